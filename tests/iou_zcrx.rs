//! The binary invoked as `iou-zcrx` (a symlink, as `make install` and the VM harness make it):
//! iou-zcrx.c's command line and exit codes, its client's `'a'..'z'` stream over loopback, and
//! what the running kernel answers the server on a device without zcrx support (root only;
//! otherwise skipped with the reason).

mod common;

use std::io::Read;
use std::net::{Ipv6Addr, SocketAddrV6, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ncdevmem-rs");

/// A directory with `iou-zcrx` → the binary; removed on drop.
struct Linked {
    dir: PathBuf,
}

impl Linked {
    fn new() -> Linked {
        let dir = std::env::temp_dir().join(format!(
            "iou-zcrx-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(BIN, dir.join("iou-zcrx")).unwrap();
        Linked { dir }
    }

    fn path(&self) -> String {
        self.dir.join("iou-zcrx").to_string_lossy().into_owned()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(self.path()).args(args).output().unwrap()
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn bad_command_lines_exit_1_as_iou_zcrx_c() {
    let l = Linked::new();
    for (args, msg) in [
        (&[][..], "iou-zcrx: usage: iou-zcrx (-s|-c)"),
        (&["-s", "-c"][..], "iou-zcrx: Pass one of -s or -c"),
        (
            &["-s", "-h", "::1", "-i", "lo", "-q", "0"][..],
            "iou-zcrx: Receiver cannot have -h specified",
        ),
        (
            &["-c", "-l", "2097053"][..],
            "iou-zcrx: -l: payload exceeds max (2097052)",
        ),
        (&["-c", "-p", "x"][..], "iou-zcrx: -p: invalid value 'x'"),
        (&["-c", "--help"][..], "iou-zcrx: unknown option"),
        (&["-s", "-i", "lo"][..], "iou-zcrx: -s needs -q <rxq_id>"),
        (
            &["-s", "-i", "no-such-if0", "-q", "0"][..],
            "iou-zcrx: bad interface name: no-such-if0",
        ),
    ] {
        let out = l.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(text(&out.stderr).starts_with(msg), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
    // The same binary under its own name has its own command line.
    let own = Command::new(BIN).args(["-s", "-c"]).output().unwrap();
    assert_eq!(own.status.code(), Some(2), "{own:?}");
}

/// Receives every connection of a client run on `listener` and returns their bytes.
fn collect(listener: &TcpListener, conns: usize) -> Vec<Vec<u8>> {
    (0..conns)
        .map(|_| {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        })
        .collect()
}

fn alphabet(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

#[test]
fn the_client_sends_the_alphabet_stream_on_every_connection() {
    let l = Linked::new();
    let listener = TcpListener::bind(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 0, 0, 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // iou-zcrx.py's oneshot sender; then the default size in the largest writes; then -t 2
    // (four connections at once).
    for (args, conns, len) in [
        (vec!["-l", "4096", "-z", "16384"], 1, 16384),
        (vec![], 1, 2_097_152),
        (vec!["-l", "12840", "-z", "100001", "-t", "2"], 4, 100_001),
    ] {
        let mut c = Command::new(l.path());
        c.args(["-c", "-h", "::1", "-p", &port]).args(&args);
        let child = c.spawn().unwrap();
        let got = collect(&listener, conns);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        for g in got {
            assert_eq!(g.len(), len, "{args:?}");
            assert!(g == alphabet(len), "{args:?}: not the 'a'..'z' stream");
        }
    }
}

#[test]
fn a_client_without_a_server_fails() {
    let l = Linked::new();
    // A port nobody listens on: a TCP socket this test holds bound to ::1 and never listens
    // on, so a connect there is refused and no other socket takes the port meanwhile.
    let (_closed, port) = common::bound_not_listening(Ipv6Addr::LOCALHOST.into());
    let port = port.to_string();
    let out = l.run(&["-c", "-h", "::1", "-p", &port, "-z", "10"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Refused connects are retried for 5 s (the receiver may still be starting; C tries once).
    let said = text(&out.stderr);
    assert!(
        said.starts_with(&format!(
            "iou-zcrx: timed out: connect to [::1]:{port}: still refused after "
        )) && said.contains(" tries in the 5000 ms window"),
        "{out:?}"
    );
}

/// Why the real-kernel server test cannot run here, if it cannot.
fn server_skip() -> Option<String> {
    if let Some(r) = common::skip_reason() {
        return Some(r);
    }
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        Ok(v) if v.trim() != "0" => Some(format!("kernel.io_uring_disabled = {}", v.trim())),
        _ => None,
    }
}

/// The server on `lo` (no io_uring memory-provider support), in a namespace of its own: what
/// iou-zcrx.c answers there, we answer.
#[test]
fn the_server_on_a_device_without_zcrx_fails_or_skips_as_c() {
    if let Some(r) = server_skip() {
        common::print_skip(
            "the_server_on_a_device_without_zcrx_fails_or_skips_as_c",
            &r,
        );
        return;
    }
    let l = Linked::new();
    let ns = common::NetNs::new().unwrap();
    let bin = l.path();
    // Without -x: io_uring_register_ifq() fails with EOPNOTSUPP and C exits 1; so do we, with
    // or without -d.
    for extra in [&[][..], &["-d"][..]] {
        let mut argv = vec![bin.as_str(), "-s", "-i", "lo", "-q", "0", "-p", "8000"];
        argv.extend(extra);
        let out = ns.exec(&argv).unwrap();
        assert_eq!(out.status.code(), Some(1), "{argv:?}: {out:?}");
        assert_eq!(
            text(&out.stderr).trim(),
            "iou-zcrx: io_uring_register(IORING_REGISTER_ZCRX_IFQ) on lo (ifindex 1) rx queue \
             0: EOPNOTSUPP (Operation not supported)",
            "{argv:?}"
        );
    }
    // With -x 1 (rx_buf_len = one page, no hugepages): C skips (42) when registration fails
    // with EINVAL (kernels before 7.0 reserve the field), EOPNOTSUPP or ERANGE, printing why
    // on stdout.
    let out = ns
        .exec(&[&bin, "-s", "-i", "lo", "-q", "0", "-x", "1", "-d"])
        .unwrap();
    assert_eq!(out.status.code(), Some(42), "{out:?}");
    let said = text(&out.stdout);
    assert!(
        said.starts_with("Large chunks are not supported -22: ")
            || said.starts_with("Large chunks are not supported -95: "),
        "{out:?}"
    );
    println!("-x 1 -d on lo: {}", said.trim());
    // The same skip with stdout full: still 42, the reason on stderr (it was a panic, 101).
    let out = ns
        .exec(&[
            "sh",
            "-c",
            "exec \"$0\" \"$@\" >/dev/full",
            &bin,
            "-s",
            "-i",
            "lo",
            "-q",
            "0",
            "-x",
            "1",
            "-d",
        ])
        .unwrap();
    assert_eq!(out.status.code(), Some(42), "{out:?}");
    assert!(
        text(&out.stderr).starts_with("iou-zcrx: skip: Large chunks are not supported -"),
        "{out:?}"
    );
    // With -x 2 the area needs 2 MiB hugepages: without any, C skips.
    let hp = |f: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{f}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let overcommit = std::fs::read_to_string("/proc/sys/vm/nr_overcommit_hugepages")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if hp("free_hugepages") == "0" && overcommit == "0" {
        let out = ns
            .exec(&[&bin, "-s", "-i", "lo", "-q", "0", "-x", "2", "-d"])
            .unwrap();
        assert_eq!(out.status.code(), Some(42), "{out:?}");
        assert!(
            text(&out.stdout).starts_with("Can't allocate huge pages: mmap(33554432 bytes"),
            "{out:?}"
        );
    } else {
        println!("-x 2 -d: not tried, 2 MiB hugepages are available here");
    }
}

/// A stop signal ends a client whose sends are blocked by a peer that does not read, also on
/// the worker thread the signal is not delivered to (it polls in ticks and looks at the stop
/// flag; before, it waited in `poll` without a timeout until the peer went away).
#[test]
fn sigint_stops_a_client_blocked_in_send() {
    let l = Linked::new();
    let listener = TcpListener::bind(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 0, 0, 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut child = Command::new(l.path())
        .args(["-c", "-h", "::1", "-p", &port, "-z", "1000000000"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Accept and never read: the client's socket buffers fill and its sends block.
    let (_conn, _) = listener.accept().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the client did not stop within 10 s of SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted by signal 2 (SIGINT)"), "{err}");
}
