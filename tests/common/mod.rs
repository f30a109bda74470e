//! Helpers for real-kernel tests: network-namespace guards (one namespace, or two joined by a
//! veth pair with addresses), entering a namespace on the test thread, and skip reporting.
//!
//! Every namespace gets a unique name `ncdevmem-test-<pid>-<n>`, a stale namespace of the same
//! name is removed first, and the guard ALWAYS deletes its namespace on drop. Traffic in these
//! tests goes only to loopback or to these namespaces.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sched::{setns, CloneFlags};

pub mod bin;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Side A of a [`NetNsPair`]: interface name and addresses.
pub const VETH_A: &str = "veth-a";
/// Side B of a [`NetNsPair`]: interface name.
pub const VETH_B: &str = "veth-b";
/// IPv4 address of side A (TEST-NET-2, /24).
pub const ADDR_A_V4: &str = "198.51.100.1";
/// IPv4 address of side B.
pub const ADDR_B_V4: &str = "198.51.100.2";
/// IPv6 address of side A (documentation prefix, /64, no DAD).
pub const ADDR_A_V6: &str = "2001:db8::1";
/// IPv6 address of side B.
pub const ADDR_B_V6: &str = "2001:db8::2";

/// Reports `skip: <test>: <reason>` (the convention for real-kernel tests that cannot run) on
/// the process's stderr directly, not through `println!`, so `cargo test` shows it even though
/// it captures the output of tests that pass.
pub fn print_skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "skip: {test}: {reason}");
}

/// Environment variable that makes [`skip_reason`] a failure: `.ci/run` and `make unit` as root
/// set it to `1`, where every real-kernel test must run.
pub const REQUIRE_ENV: &str = "NCDEVMEM_REQUIRE_REAL_KERNEL_TESTS";

/// Why real-kernel namespace tests cannot run here, if they cannot: not root, or no `ip`.
///
/// # Panics
/// When [`REQUIRE_ENV`] is `1` and the tests cannot run, so a host that should run them
/// cannot pass by skipping.
pub fn skip_reason() -> Option<String> {
    let reason = host_skip_reason();
    if let Some(r) = &reason {
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{REQUIRE_ENV}=1, but real-kernel tests cannot run here: {r}"
        );
    }
    reason
}

fn host_skip_reason() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("needs root (CAP_SYS_ADMIN for netns, CAP_NET_ADMIN for bind-rx)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("iproute2 `ip` is not installed".into()),
    }
}

/// Waits (up to 10 s) until process `pid` has a TCP socket listening on `port`, read from its
/// own `/proc/<pid>/net/tcp{,6}` (so in its network namespace): a readiness check for tests
/// that signal or connect to a server they started, instead of a fixed sleep.
///
/// # Panics
/// When the process is not listening within 10 s.
pub fn wait_listening(pid: u32, port: u16) {
    let want = format!(":{port:04X} ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listening = ["tcp", "tcp6"].iter().any(|f| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
                t.lines().skip(1).any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    // local_address is column 1, st column 3 (0A = LISTEN).
                    cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
                })
            })
        });
        if listening {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} is not listening on port {port} after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A uniquely named network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates `ncdevmem-test-<pid>-<n>` (removing a stale one of that name first) and brings
    /// its `lo` up.
    pub fn new() -> Result<Self, String> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("ncdevmem-test-{}-{n}", std::process::id());
        // A crashed run with a recycled pid may have left one behind.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Creates a namespace holding a veth pair `a`–`b` (both ends inside, both up).
    pub fn with_veth(a: &str, b: &str) -> Result<Self, String> {
        let ns = NetNs::new()?;
        ns.ip(&["link", "add", a, "type", "veth", "peer", "name", b])?;
        ns.ip(&["link", "set", a, "up"])?;
        ns.ip(&["link", "set", b, "up"])?;
        Ok(ns)
    }

    /// The namespace's name (as `ip netns list` shows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <name> <args>`; `Err` carries the command and its stderr.
    pub fn ip(&self, args: &[&str]) -> Result<String, String> {
        let out = run(Command::new("ip").args(["-n", &self.name]).args(args))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `ip netns exec <name> <argv...>` and returns its output, whatever the status.
    pub fn exec(&self, argv: &[&str]) -> Result<Output, String> {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(argv)
            .output()
            .map_err(|e| format!("ip netns exec {} {argv:?}: {e}", self.name))
    }

    /// The ifindex of `ifname` inside the namespace.
    pub fn ifindex(&self, ifname: &str) -> Result<u32, String> {
        let out = self.ip(&["-o", "link", "show", "dev", ifname])?;
        out.split(':')
            .next()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("cannot parse ifindex of {ifname} from {out:?}"))
    }

    /// Moves the calling thread into the namespace until the returned guard drops. Sockets
    /// opened meanwhile stay in this namespace for their whole life.
    pub fn enter(&self) -> Result<Entered<'_>, String> {
        // /proc/thread-self: the netns is per thread, and /proc/self would name the main one.
        let orig = File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("open /proc/thread-self/ns/net: {e}"))?;
        let target = File::open(format!("/run/netns/{}", self.name))
            .map_err(|e| format!("open /run/netns/{}: {e}", self.name))?;
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns({}): {e}", self.name))?;
        Ok(Entered {
            orig,
            _ns: PhantomData,
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("ip").args(["netns", "del", &self.name])) {
            eprintln!(
                "could not delete netns {}: {e}; run `ip netns del {}`",
                self.name, self.name
            );
        }
    }
}

/// The calling thread is inside a [`NetNs`]; dropping this returns it to its original
/// namespace. `!Send`: a namespace belongs to the thread that entered it.
#[derive(Debug)]
pub struct Entered<'a> {
    orig: File,
    _ns: PhantomData<(&'a NetNs, *mut ())>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Err(e) = setns(self.orig.as_fd(), CloneFlags::CLONE_NEWNET) {
            if std::thread::panicking() {
                eprintln!("could not return to the original netns: {e}");
            } else {
                panic!("could not return to the original netns: {e}");
            }
        }
    }
}

/// Two namespaces joined by a veth pair: A holds [`VETH_A`] with [`ADDR_A_V4`]/24 and
/// [`ADDR_A_V6`]/64, B holds [`VETH_B`] with [`ADDR_B_V4`]/24 and [`ADDR_B_V6`]/64 (IPv6 without
/// DAD), all links up. Both namespaces are deleted on drop.
#[derive(Debug)]
pub struct NetNsPair {
    /// Side A.
    pub a: NetNs,
    /// Side B.
    pub b: NetNs,
}

impl NetNsPair {
    /// Creates both namespaces and the link.
    pub fn new() -> Result<Self, String> {
        let a = NetNs::new()?;
        let b = NetNs::new()?;
        a.ip(&[
            "link",
            "add",
            VETH_A,
            "type",
            "veth",
            "peer",
            "name",
            VETH_B,
            "netns",
            b.name(),
        ])?;
        for (ns, dev, v4, v6) in [
            (&a, VETH_A, ADDR_A_V4, ADDR_A_V6),
            (&b, VETH_B, ADDR_B_V4, ADDR_B_V6),
        ] {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev])?;
            ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
            ns.ip(&["link", "set", dev, "up"])?;
        }
        Ok(NetNsPair { a, b })
    }
}

/// A TCP socket bound to a free port of `ip` that never listens, and that port: a connect
/// there is refused, and no other socket takes the port while the test holds the socket
/// (a port picked by binding port 0 and releasing it could be taken meanwhile).
///
/// Panics when the socket, its bind or `getsockname` fails (a test helper).
pub fn bound_not_listening(ip: std::net::IpAddr) -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{
        bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrStorage,
    };
    use std::os::fd::AsRawFd;
    let family = match ip {
        std::net::IpAddr::V4(_) => AddressFamily::Inet,
        std::net::IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).expect("socket");
    let addr = SockaddrStorage::from(std::net::SocketAddr::new(ip, 0));
    bind(fd.as_raw_fd(), &addr).expect("bind");
    let bound = getsockname::<SockaddrStorage>(fd.as_raw_fd()).expect("getsockname");
    let port = bound
        .as_sockaddr_in()
        .map(|a| a.port())
        .or_else(|| bound.as_sockaddr_in6().map(|a| a.port()))
        .expect("an inet address");
    (fd, port)
}
