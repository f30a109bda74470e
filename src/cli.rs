//! The command line: C ncdevmem's short options (getopt string `"Lls:c:p:v:q:t:f:z:nb:"` plus
//! `-A`, `-a`, `-U`) with the same meanings and mode selection, and long options for
//! ncdevmem-rs's own features.
//!
//! Two layers, both pure (no syscalls; the page size is a parameter):
//! * `flags`: the option table, one row per option, and the parse of what was typed
//!   (every value checked: decimal numbers, ranges, powers of two, sizes, seconds);
//! * `resolve`: which mode runs, which options apply to it, and one typed argument struct
//!   per mode ([`ModeArgs`]) whose fields are what that mode needs — not optional where the
//!   mode requires them. Interface name → ifindex and the default queue choice need the
//!   kernel, so they are left to the modes: queues stay an optional [`QueueRange`].
//!
//! [`parse`] does both and returns [`Command::Help`] for `-h`/`--help`/`--version`. Every
//! error is [`Error::Usage`] (exit 2) with a message that names the flag and the accepted
//! values, e.g. `-p: invalid port 'x' (expected 1..=65535)`; the caller prints it after
//! `ncdevmem-rs: `.
//!
//! Option semantics follow kernel `tools/testing/selftests/drivers/net/hw/ncdevmem.c` `main()`
//! (net-next, 2026-08) as summarised in `docs/kernel-interface.md#ncdevmem-options`.

mod flags;
pub(crate) mod limits;

use std::net::{IpAddr, Ipv6Addr, SocketAddrV6};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::memory::MemorySource;
pub use crate::rx::UnbindMode;
use crate::validate::StreamSpec;
use flags::{invalid, Flag, Section, Typed, EXPECT_ADDR};
pub use flags::{IFNAME_MAX_LEN, MAX_NUM_QUEUES, MAX_SECONDS, MAX_WRITE_SIZE, VALIDATE_MAX};
pub use limits::{MAX_FLOWS, MAX_RX_BUF_LEN, MAX_RX_PAGE_SIZE};

/// The binary's name, as used in messages and in the usage text.
pub const PROGRAM: &str = "ncdevmem-rs";

/// `--seed` as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// This seed (any 64-bit value).
    Value(u64),
    /// `random`: the sender draws one and prints it.
    Random,
}

/// An interface name as `-f` takes it: 1..=[`IFNAME_MAX_LEN`] bytes, no NUL, not starting
/// with `-` (that looks like a forgotten value). Whether the interface exists is the kernel's
/// answer ([`IfName::index`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfName(String);

impl IfName {
    /// Checks `text` as `-f` takes it.
    ///
    /// Errors: [`Error::Usage`] naming `-f`.
    pub fn parse(text: &str) -> Result<IfName> {
        if text.starts_with('-') {
            return Err(invalid(
                "-f",
                "interface name",
                text,
                "an interface name that does not start with '-' (it looks like an option)",
            ));
        }
        if text.is_empty() || text.len() > IFNAME_MAX_LEN || text.contains('\0') {
            return Err(invalid(
                "-f",
                "interface name",
                text,
                "1..=15 bytes, the kernel's IFNAMSIZ limit",
            ));
        }
        Ok(IfName(text.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The interface index (`if_nametoindex(3)`).
    ///
    /// Errors: [`Error::Usage`] `-f: no such interface 'NAME'` when the kernel knows no such
    /// interface (in this network namespace).
    pub fn index(&self) -> Result<u32> {
        crate::sys::if_index(&self.0)
            .map_err(|_| Error::Usage(format!("-f: no such interface '{}'", self.0)))
    }
}

impl std::fmt::Display for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An address given with `-s` or `-c`: the text as typed and what it parses to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddr {
    /// The argument exactly as typed, for messages.
    pub text: String,
    /// The parsed address (an IPv4-mapped IPv6 address stays [`IpAddr::V6`]).
    pub ip: IpAddr,
}

impl HostAddr {
    /// Parses an IPv4 (`192.0.2.1`), IPv6 (`2001:db8::1`) or IPv4-mapped IPv6
    /// (`::ffff:192.0.2.1`) address with `std::net`. No brackets, ports or zone ids. The
    /// address must be one a TCP socket can listen on, bind to or connect to: multicast and
    /// broadcast addresses are refused (a receiver would wait forever for a connection that
    /// cannot come).
    ///
    /// Errors: [`Error::Usage`] naming `flag`.
    pub fn parse(flag: &str, what: &str, text: &str) -> Result<HostAddr> {
        let ip = text
            .parse::<IpAddr>()
            .map_err(|_| invalid(flag, what, text, EXPECT_ADDR))?;
        if let Some(kind) = not_for_tcp(ip) {
            return Err(invalid(
                flag,
                what,
                text,
                &format!("a unicast address; {kind} addresses cannot carry a TCP connection"),
            ));
        }
        Ok(HostAddr {
            text: text.to_string(),
            ip,
        })
    }

    /// The address for an `AF_INET6` socket: IPv4 becomes `::ffff:a.b.c.d`, as C ncdevmem's
    /// `parse_address` does (its sockets are always `AF_INET6`).
    pub fn socket_ip(&self) -> Ipv6Addr {
        match self.ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        }
    }

    /// The socket address of this address and `port`.
    pub(crate) fn with_port(&self, port: u16) -> SocketAddrV6 {
        SocketAddrV6::new(self.socket_ip(), port, 0, 0)
    }

    /// The address for an ntuple flow rule: IPv4 (plain or v4-mapped) gives an
    /// [`IpAddr::V4`] (rule `flow-type tcp4`), anything else [`IpAddr::V6`] (`tcp6`).
    pub(crate) fn flow_ip(&self) -> IpAddr {
        self.ip.to_canonical()
    }

    /// `Err(Error::Usage)` when a socket is to use this address and it is link-local IPv6
    /// (`fe80::/10`): a socket needs its zone, which no flag takes, and the kernel refuses it
    /// without one (`EINVAL`).
    pub(crate) fn refuse_unscoped_link_local(&self, flag: &str) -> Result<()> {
        if !matches!(self.ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80) {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{flag}: link-local IPv6 address '{}' cannot be used: a socket needs its zone \
             (fe80::1%eth0), which {flag} does not take, and the kernel refuses it without \
             one (EINVAL); use a global or unique-local address",
            self.text
        )))
    }
}

/// Why `ip` cannot be a TCP endpoint, if it cannot: `"multicast"` (224.0.0.0/4, ff00::/8, and
/// their IPv4-mapped forms) or `"broadcast"` (255.255.255.255).
fn not_for_tcp(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    if ip.is_multicast() {
        Some("multicast")
    } else if matches!(ip, IpAddr::V4(v4) if v4.is_broadcast()) {
        Some("broadcast")
    } else {
        None
    }
}

/// What the run does. Selection follows C ncdevmem for the devmem modes; the other modes
/// are chosen by their long option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `-f IF` with neither `-s` nor `-c` (and no `-l`): the devmem self-test of the kernel
    /// contract (C's `run_devmem_tests`).
    #[default]
    Probe,
    /// `-l -f IF -s ADDR -p PORT`: devmem RX server.
    Server,
    /// `-f IF -s ADDR -p PORT` without `-l` (also `-c` without `-l`, which then needs `-s`):
    /// devmem TX client sending stdin, or with `--send-pattern BYTES` that many bytes of the
    /// pattern.
    Client,
    /// `-l --plain -s ADDR -p PORT`: plain-TCP receive (no devmem; no NIC changes but
    /// `--hds-thresh` with `-f IF`).
    PlainServer,
    /// `--send-pattern BYTES -s ADDR -p PORT -v N` without `-f`: plain-TCP sender of the `-v`
    /// pattern.
    PatternSender,
    /// `-l --zcrx -f IF -s ADDR -p PORT`: io_uring zero-copy receive on one RX queue of IF
    /// (with `--zcrx-nodev`: without a device, `-f` not given).
    ZcrxServer,
    /// `--report -f IF`: read-only capability report (text; JSON with `--json`).
    Report,
    /// `--peer-server -p CTRL`: the sender side of sweeps (`crate::lab`).
    PeerServer,
    /// `-l ... --peer ADDR`: a sweep of one of the receive modes, driven through the peer
    /// (`crate::lab`).
    Sweep,
    /// `--compare BASE.json NEW.json`: two sweeps' JSON files compared
    /// (`crate::lab::compare`).
    Compare,
}

/// The mode as the option table sees it: [`Mode`], with the devmem TX client split by what
/// it sends (options like `--write-size` apply to the pattern source only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// [`Mode::Probe`].
    Probe,
    /// [`Mode::Report`].
    Report,
    /// [`Mode::Server`].
    Server,
    /// [`Mode::ZcrxServer`].
    Zcrx,
    /// [`Mode::Client`] sending stdin.
    TxStdin,
    /// [`Mode::Client`] sending `--send-pattern`.
    TxPattern,
    /// [`Mode::PlainServer`].
    Plain,
    /// [`Mode::PatternSender`].
    Sender,
    /// [`Mode::PeerServer`].
    PeerServer,
    /// [`Mode::Compare`].
    Compare,
}

impl Role {
    /// The modes that receive (`-l`).
    fn receives(self) -> bool {
        matches!(self, Role::Server | Role::Plain | Role::Zcrx)
    }
}

/// How much the run logs to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verbosity {
    /// `--quiet`: errors and the final verdict only.
    Quiet,
    /// Default: one line per event, no per-frag lines.
    #[default]
    Normal,
    /// `-V`/`--verbose`: also a line per frag, like C ncdevmem.
    Verbose,
}

/// `-t START -q NUM`: RX queues `START..START+NUM` (a queue index and a count ≥ 1; the
/// last index fits `u32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRange {
    /// `-t`: first queue index.
    pub start: u32,
    /// `-q`: number of queues (≥ 1).
    pub count: u32,
}

/// What every mode takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Common {
    /// `-V`/`--quiet`.
    pub verbosity: Verbosity,
    /// `--json`: where to write the summary as one JSON object.
    pub json: Option<JsonTarget>,
    /// `--pid-file`: where a listening receiver or the peer server writes its process id
    /// once it listens (removed when it ends; `crate::pid_file`).
    pub pid_file: Option<PathBuf>,
    /// The command line as typed, without `argv[0]` (the summary's `argv`).
    pub argv: Vec<String>,
}

/// Where `--json` writes the summary object (`docs/json.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonTarget {
    /// `--json FILE`: written atomically to this file.
    File(PathBuf),
    /// `--json -`: one line on stdout (the human output goes to stderr).
    Stdout,
}

impl JsonTarget {
    /// The file, or `None` for stdout.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            JsonTarget::File(p) => Some(p),
            JsonTarget::Stdout => None,
        }
    }
}

/// What every receiver takes: where it listens, what it validates, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receive {
    /// `-s`: local address to listen on (and the flow rule's dst-ip).
    pub addr: HostAddr,
    /// `-p`: TCP port.
    pub port: u16,
    /// `-v N` (periodic) or `--seed SEED` (keyed); `None` without validation (payload to
    /// stdout).
    pub validate: Option<StreamSpec>,
    /// `--timeout`: accept, first-byte and idle timeout; `None` = wait forever.
    pub timeout: Option<Duration>,
    /// `--progress`: interval between progress lines; `None` = none.
    pub progress: Option<Duration>,
    /// `--expect-bytes`: the stream must carry exactly this many bytes.
    pub expect_bytes: Option<u64>,
    /// `--rcvbuf`: `SO_RCVBUF` in bytes before `listen` (`Some(0)`: the kernel's default).
    /// `None`: devmem and zcrx servers size it from the binding ([`crate::rcvbuf`]), the
    /// plain receiver leaves the kernel's default.
    pub rcvbuf: Option<u64>,
    /// The flows: how many connections, for how long, on which CPUs, with which congestion
    /// control.
    pub flows: Flows,
    /// `--require-spread`: the run fails unless its flows reached every bound queue (the one
    /// verdict, `src/verdict.rs`); only where queues are bound (the devmem and zcrx servers).
    pub require_spread: bool,
}

/// `--flows`, `--duration`, `--warmup`, `--cpus`, `--tcp-cc`: the shape of a measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flows {
    /// `--flows`: connections (1..=[`MAX_FLOWS`], default 1).
    pub count: u32,
    /// `--duration`: receive (send) for this long, then close; `None` = until the peer
    /// closes.
    pub duration: Option<Duration>,
    /// `--warmup`: receivers: left out of the figures; `None` = none.
    pub warmup: Option<Duration>,
    /// `--cpus`: the CPUs the workers are pinned to, flow k to the k-th, round robin, in the
    /// order written (a CPU may repeat: it then takes a flow each time).
    pub cpus: Option<Vec<usize>>,
    /// `--tcp-cc`: `TCP_CONGESTION` of every flow.
    pub tcp_cc: Option<String>,
}

impl Default for Flows {
    /// One flow, until the peer closes, unpinned, the kernel's congestion control.
    fn default() -> Self {
        Flows {
            count: 1,
            duration: None,
            warmup: None,
            cpus: None,
            tcp_cc: None,
        }
    }
}

/// The NIC a server configures and binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicArgs {
    /// `-f`: the interface.
    pub ifname: IfName,
    /// `-t`/`-q`; `None`: the mode picks (C's defaults).
    pub queues: Option<QueueRange>,
    /// `-c`: the flow rule's src-ip (a 5-tuple rule, src-port = the port).
    pub client: Option<HostAddr>,
    /// `-n`: skip NIC configuration (rings/HDS, RSS, flow rule) and its teardown.
    pub skip_nic_config: bool,
    /// `--verify-restore`: compare the NIC after the unwind with its state before.
    pub verify_restore: bool,
}

/// `-l -f IF -s ADDR -p PORT`: the devmem RX server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerArgs {
    /// The NIC setup.
    pub nic: NicArgs,
    /// The receive.
    pub rx: Receive,
    /// `-L`: fail when a `SCM_DEVMEM_LINEAR` cmsg arrives (header split did not work).
    pub fail_on_linear: bool,
    /// `-b`: rx-page-size in bytes for bind-rx (`NETDEV_A_DMABUF_RX_PAGE_SIZE`).
    pub rx_page_size: Option<u32>,
    /// `-A`: `SO_DEVMEM_AUTORELEASE` to set (proposed socket option 85); `None` leaves the
    /// kernel default.
    pub so_autorelease: Option<bool>,
    /// `-a`: bind-rx autorelease (`NETDEV_A_DMABUF_AUTORELEASE`, u8; unmerged series
    /// v7–v10): sent when the kernel's bind-rx policy has the attribute; without it `false`
    /// binds as before and `true` is a skip. `None` sends nothing.
    pub bind_autorelease: Option<bool>,
    /// `-U`: when the server unbinds.
    pub unbind: UnbindMode,
    /// `--dmabuf-size`: dma-buf size in bytes; `None` = 16000 pages, as C.
    pub dmabuf_size: Option<u64>,
    /// `--memory`: where the dma-buf comes from (default udmabuf).
    pub memory: MemorySource,
}

/// `-l --zcrx -s ADDR -p PORT`: the io_uring zero-copy receive server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcrxArgs {
    /// The NIC and queue (`-f`, `-t`, `-q`, `-c`, `-n`, `--verify-restore`); `None` with
    /// `--zcrx-nodev`, which registers without a device and changes no NIC.
    pub nic: Option<NicArgs>,
    /// The receive.
    pub rx: Receive,
    /// `--dmabuf-size`: the zcrx area size in bytes; `None` = 8192 pages.
    pub area_size: Option<u64>,
    /// `--rx-buf-len`: `rx_buf_len` in bytes (7.0+); the area is then hugetlb-backed.
    pub rx_buf_len: Option<u32>,
}

/// `-l --plain -s ADDR -p PORT`: the plain-TCP receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainArgs {
    /// The receive.
    pub rx: Receive,
    /// `-L` (no cmsgs arrive over plain TCP; kept so a devmem command line reruns as-is).
    pub fail_on_linear: bool,
    /// `-f`: the NIC whose hds-thresh `--hds-thresh` (or an `hds-thresh` sweep) sets; `None`
    /// otherwise (then `-f` is accepted and ignored, and no NIC is touched).
    pub ifname: Option<IfName>,
    /// `--hds-thresh`: the NIC's hds-thresh in bytes for the run (header split turned on with
    /// it, both restored at the end); `None`: the NIC is not touched.
    pub hds_thresh: Option<u32>,
    /// `--rcvlowat`: `SO_RCVLOWAT` in bytes (1..=1 GiB) set on each accepted connection: the
    /// receiver is woken once that many bytes are queued (the kernel caps it at half the
    /// receive buffer); `None`: the kernel's default, 1 byte.
    pub rcvlowat: Option<u32>,
}

/// `-f IF`: the devmem probe (self-test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeArgs {
    /// `-f`.
    pub ifname: IfName,
    /// `-t`/`-q`; `None`: the upper half of the queues.
    pub queues: Option<QueueRange>,
    /// `-b`.
    pub rx_page_size: Option<u32>,
    /// `--dmabuf-size`.
    pub dmabuf_size: Option<u64>,
    /// `--memory`.
    pub memory: MemorySource,
    /// `-n` (does not apply to the probe's checks; noted in the log).
    pub skip_nic_config: bool,
    /// `--verify-restore`.
    pub verify_restore: bool,
}

/// `--report -f IF`: the read-only capability report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportArgs {
    /// `-f`.
    pub ifname: IfName,
    /// `-b`: report the hugepages a bind of that niov size needs.
    pub rx_page_size: Option<u32>,
    /// `--dmabuf-size`.
    pub dmabuf_size: Option<u64>,
}

/// Where a sender connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// `-s`: the address to connect to.
    pub addr: HostAddr,
    /// `-p`: its port.
    pub port: u16,
    /// `-c`: the local address to bind (with the same port) before connecting.
    pub local: Option<HostAddr>,
}

impl Peer {
    /// The address connected to.
    pub fn remote(&self) -> SocketAddrV6 {
        self.addr.with_port(self.port)
    }

    /// The local address bound before connecting, if any (`-c` and the same port, as C).
    pub fn local(&self) -> Option<SocketAddrV6> {
        self.local.as_ref().map(|l| l.with_port(self.port))
    }
}

/// The stream a sender sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStream {
    /// `-v N`: the periodic pattern.
    Periodic(u32),
    /// `--seed SEED` or `--seed random` (drawn when the send starts, and printed).
    Keyed(Seed),
}

/// `--send-pattern BYTES` and the options of a pattern source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternArgs {
    /// `--send-pattern`: bytes to send.
    pub bytes: u64,
    /// `-v N` or `--seed`.
    pub stream: SendStream,
    /// `--write-size`: plain sender: bytes per `write` with `TCP_NODELAY`; devmem TX: bytes
    /// per piece copied into the dma-buf.
    pub write_size: Option<usize>,
    /// `--corrupt-offset`: flip every bit of the byte at this stream offset (test aid).
    pub corrupt_offset: Option<u64>,
    /// The flows (`--warmup` never set: receivers only).
    pub flows: Flows,
}

/// What the devmem TX client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxSource {
    /// Stdin, line by line (C ncdevmem's client).
    Stdin,
    /// `--send-pattern`.
    Pattern(PatternArgs),
}

/// `-f IF -s ADDR -p PORT`: the devmem TX client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientArgs {
    /// `-f`: the interface bound for TX and the socket's `SO_BINDTODEVICE`.
    pub ifname: IfName,
    /// `-s`, `-p`, `-c`.
    pub peer: Peer,
    /// `-z`: split each send into iovs of at most this many bytes.
    pub chunk: Option<u32>,
    /// What is sent.
    pub source: TxSource,
    /// `--dmabuf-size`.
    pub dmabuf_size: Option<u64>,
    /// `--memory`.
    pub memory: MemorySource,
    /// `--timeout`: the connect window and the longest wait without a zerocopy completion
    /// (`None` = the client's defaults).
    pub timeout: Option<Duration>,
}

/// `--send-pattern BYTES -s ADDR -p PORT`: the plain-TCP pattern sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderArgs {
    /// `-s`, `-p`, `-c`.
    pub peer: Peer,
    /// What is sent.
    pub pattern: PatternArgs,
    /// `--timeout`: the connect retry window (`None` = 5 s).
    pub timeout: Option<Duration>,
    /// `--progress`: interval between progress lines; `None` = none.
    pub progress: Option<Duration>,
}

/// The default control port of `--peer-server` and `--peer`.
pub const DEFAULT_PEER_PORT: u16 = 4343;
/// The default `--runs` of a sweep.
pub const DEFAULT_RUNS: u32 = 3;
/// The default `--duration` of a sweep's runs.
pub const DEFAULT_SWEEP_DURATION: Duration = Duration::from_secs(10);
/// The default `--timeout` of a sweep's runs (a peer that does not connect fails the run).
pub const DEFAULT_SWEEP_TIMEOUT: Duration = Duration::from_secs(20);
/// The default seed of a sweep without `-v N` or `--seed`.
pub const DEFAULT_SWEEP_SEED: u64 = 1;
/// The default `--max-duration` of `--peer-server`.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(600);
/// The default `--max-bytes` of `--peer-server` (1 TiB).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 40;

/// `--peer-send`: how a sweep's peer sends each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerSend {
    /// Plain TCP (the built-in pattern sender; the default).
    #[default]
    Plain,
    /// Devmem TX through the NIC the peer was started with (`--peer-server -f IF`).
    Devmem,
}

impl PeerSend {
    /// `plain` or `devmem`.
    pub fn parse(text: &str) -> Option<PeerSend> {
        match text {
            "plain" => Some(PeerSend::Plain),
            "devmem" => Some(PeerSend::Devmem),
            _ => None,
        }
    }

    /// The word [`PeerSend::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            PeerSend::Plain => "plain",
            PeerSend::Devmem => "devmem",
        }
    }
}

/// `--peer-server -p CTRL`: the sender side of sweeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerServerArgs {
    /// `-s`: the address the control port listens on (default `::`, every address).
    pub addr: HostAddr,
    /// `-p`: the control port.
    pub port: u16,
    /// `-f`: the NIC a run asking for devmem TX sends through (its own bind-tx binding per
    /// run); `None`: plain TCP only, a devmem request is refused. Never named by a request.
    pub tx_ifname: Option<IfName>,
    /// `--dmabuf-size`: the dma-buf of each devmem TX run (`None`: the client's default).
    pub tx_dmabuf_size: Option<u64>,
    /// `--max-duration`: the longest send of one run.
    pub max_duration: Duration,
    /// `--max-bytes`: the most bytes of one run over all flows.
    pub max_bytes: u64,
}

/// `--compare BASE.json NEW.json`: two sweeps compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareArgs {
    /// The base file (`--compare`'s value).
    pub base: PathBuf,
    /// The new file (the argument after it).
    pub new: PathBuf,
    /// `--any-shape`: compare files of different shape (the differences are listed).
    pub any_shape: bool,
    /// `--columns`: the figures compared, by name.
    pub columns: Option<Vec<String>>,
    /// `--format`.
    pub format: crate::lab::table::Format,
    /// `--plot`: the two-series picture.
    pub plot: Option<PathBuf>,
}

/// `-l ... --peer ADDR`: a sweep of the receive mode `base`, one run at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepArgs {
    /// The receive mode of every run ([`ModeArgs::Server`], [`ModeArgs::Zcrx`] or
    /// [`ModeArgs::Plain`]) as typed, before a point's value is applied; its `--timeout`
    /// has the sweep's default, its stream the default seed, and its `--duration` is
    /// [`duration`](Self::duration) (the receiver closes the flows; the peer sends a little
    /// longer).
    pub base: Box<ModeArgs>,
    /// `--duration`: each run's length (default [`DEFAULT_SWEEP_DURATION`]).
    pub duration: Duration,
    /// `--sweep`; `None`: one configuration, repeated `--runs` times.
    pub sweep: Option<crate::lab::plan::Sweep>,
    /// `--runs`.
    pub runs: u32,
    /// `--peer`.
    pub peer: HostAddr,
    /// `--peer-port`.
    pub peer_port: u16,
    /// `--peer-send`: plain TCP or devmem TX on the peer.
    pub peer_send: PeerSend,
    /// `--write-size`: the peer's write (plain) or piece (devmem) size; `None`: its default.
    pub peer_write_size: Option<u64>,
    /// `--csv`.
    pub csv: Option<PathBuf>,
    /// `--plot`.
    pub plot: Option<PathBuf>,
    /// `--columns`: the table's columns by name (checked when the sweep starts); `None`: the
    /// default table.
    pub columns: Option<Vec<String>>,
    /// `--format`.
    pub format: crate::lab::table::Format,
    /// `--baseline`: a sweep's JSON file this sweep is compared with at its end.
    pub baseline: Option<PathBuf>,
    /// `--any-shape`: compare with a baseline of another shape.
    pub any_shape: bool,
    /// `--pre-run`: a shell command run before every run (`crate::lab::hooks`).
    pub pre_run: Option<String>,
    /// `--post-run`: a shell command run after every run that was made.
    pub post_run: Option<String>,
    /// The command line as typed (for the JSON file).
    pub command_line: Vec<String>,
}

/// One mode's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeArgs {
    /// [`Mode::Probe`].
    Probe(ProbeArgs),
    /// [`Mode::Report`].
    Report(ReportArgs),
    /// [`Mode::Server`].
    Server(ServerArgs),
    /// [`Mode::ZcrxServer`].
    Zcrx(ZcrxArgs),
    /// [`Mode::Client`].
    Client(ClientArgs),
    /// [`Mode::PlainServer`].
    Plain(PlainArgs),
    /// [`Mode::PatternSender`].
    Sender(SenderArgs),
    /// [`Mode::PeerServer`].
    PeerServer(PeerServerArgs),
    /// [`Mode::Sweep`].
    Sweep(SweepArgs),
    /// [`Mode::Compare`].
    Compare(CompareArgs),
}

impl ModeArgs {
    /// The mode.
    pub fn mode(&self) -> Mode {
        match self {
            ModeArgs::Probe(_) => Mode::Probe,
            ModeArgs::Report(_) => Mode::Report,
            ModeArgs::Server(_) => Mode::Server,
            ModeArgs::Zcrx(_) => Mode::ZcrxServer,
            ModeArgs::Client(_) => Mode::Client,
            ModeArgs::Plain(_) => Mode::PlainServer,
            ModeArgs::Sender(_) => Mode::PatternSender,
            ModeArgs::PeerServer(_) => Mode::PeerServer,
            ModeArgs::Sweep(_) => Mode::Sweep,
            ModeArgs::Compare(_) => Mode::Compare,
        }
    }
}

/// A run: the options every mode takes and the mode's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Verbosity and `--json`.
    pub common: Common,
    /// The mode and its arguments.
    pub mode: ModeArgs,
}

/// What [`parse`] asks the caller to do.
// `Run` is much larger than `Help`; one value per process, so no boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Print this text to stdout and exit 0 (`--help`: the usage; `--version`: the version).
    Help(String),
    /// Run this.
    Run(Run),
}

/// Parses a command line (`argv` without `argv[0]`): [`Command::Help`] for `-h`/`--help` and
/// `--version`, otherwise the [`Run`].
///
/// `page_size` is the system page size in bytes (`crate::sys::page_size()`), a parameter so
/// the parser stays free of syscalls.
///
/// Errors: [`Error::Usage`] (exit 2) whose message names the flag and the accepted values.
pub fn parse(argv: &[String], page_size: usize) -> Result<Command> {
    let (typed, given) = Typed::parse(argv, page_size)?;
    if typed.help {
        return Ok(Command::Help(usage()));
    }
    if typed.version {
        return Ok(Command::Help(format!("{PROGRAM} {}\n", crate::VERSION)));
    }
    let mut run = resolve(typed, &given)?;
    run.common.argv = argv.to_vec();
    if let ModeArgs::Sweep(s) = &mut run.mode {
        s.command_line = argv.to_vec();
    }
    Ok(Command::Run(run))
}

fn usage_err(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

fn require<T>(v: Option<T>, msg: impl FnOnce() -> String) -> Result<T> {
    v.ok_or_else(|| usage_err(msg()))
}

/// Picks the mode, checks which options it needs and allows, and builds its arguments.
///
/// Mode selection, in order:
/// 1. at most one of `--send-pattern`, `--plain`, `--zcrx`, `--report`;
/// 2. `--send-pattern` (not with `-l`; needs `-s`, `-p`, `-v N`) → with `-f IF`,
///    [`Mode::Client`] sending the pattern through devmem TX; without `-f`,
///    [`Mode::PatternSender`] (plain TCP);
/// 3. `--plain` → [`Mode::PlainServer`] (needs `-l`, `-s`, `-p`);
/// 4. `--zcrx` → [`Mode::ZcrxServer`] (needs `-l`, `-f`, `-s`, `-p`; with `--zcrx-nodev`
///    no `-f`, `-t` or `-q`);
/// 5. `--report` → [`Mode::Report`] (needs `-f`; not with `-l`, `-s`, `-c`);
/// 6. otherwise C's rules: `-f` required ("missing -f argument"); neither `-s` nor `-c`
///    and no `-l` → [`Mode::Probe`]; `-l` → [`Mode::Server`]; else [`Mode::Client`].
///    Server and client need `-s` and `-p`.
///
/// Then `-t`/`-q`, the table's "only applies to" refusals ([`flags::check_roles`]), the
/// rules between options, and the addresses.
///
/// Differs from C: `-l` without `-s` is refused (C would run the probe, which changes the
/// NIC, and ignore `-l`).
///
/// Errors: [`Error::Usage`] naming the flag.
fn resolve(t: Typed, given: &[&'static Flag]) -> Result<Run> {
    if t.verbose && t.quiet {
        return Err(usage_err("-V/--verbose and --quiet exclude each other"));
    }
    let role = select_role(&t)?;
    check_queue_range(&t, role)?;
    if t.seed.is_some() && t.validate.is_some() {
        return Err(usage_err(
            "--seed: selects the keyed stream instead of the -v N pattern; give one of them",
        ));
    }
    flags::check_roles(given, role)?;
    check_rules(&t, role)?;
    let (server, client) = resolve_addrs(&t, role)?;
    let verbosity = if t.verbose {
        Verbosity::Verbose
    } else if t.quiet {
        Verbosity::Quiet
    } else {
        Verbosity::Normal
    };
    let common = Common {
        verbosity,
        json: t.json.clone(),
        pid_file: t.pid_file.clone(),
        argv: Vec::new(),
    };
    Ok(Run {
        common,
        mode: mode_args(t, role, server, client)?,
    })
}

fn need_s(what: &str) -> String {
    format!("-s: missing -s ADDR ({what})")
}

fn need_p(what: &str) -> String {
    format!("-p: missing -p PORT ({what}; expected 1..=65535)")
}

fn need_f(what: &str) -> String {
    format!("-f: missing -f argument (the interface to use; required for {what})")
}

/// Step 1 of [`resolve`]: at most one mode selector, then that mode's own rules.
fn select_role(t: &Typed) -> Result<Role> {
    let selectors: Vec<&str> = [
        (t.pattern_bytes.is_some(), "--send-pattern"),
        (t.plain, "--plain"),
        (t.zcrx, "--zcrx"),
        (t.report, "--report"),
        (t.peer_server, "--peer-server"),
        (t.compare.is_some(), "--compare"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if selectors.len() > 1 {
        return Err(usage_err(format!(
            "{}: these select different modes; give at most one",
            selectors.join(", ")
        )));
    }
    if t.pattern_bytes.is_some() {
        pattern_sender_role(t)
    } else if t.plain {
        plain_server_role(t)
    } else if t.zcrx {
        zcrx_server_role(t)
    } else if t.report {
        report_role(t)
    } else if t.compare.is_some() {
        if t.listen || t.server.is_some() || t.ifname.is_some() {
            return Err(usage_err(
                "--compare: compares two sweeps' JSON files and runs nothing; not with -l, -s \
                 or -f",
            ));
        }
        Ok(Role::Compare)
    } else if t.peer_server {
        if t.listen {
            return Err(usage_err(
                "--peer-server: serves the sender side of sweeps; not with -l",
            ));
        }
        Ok(Role::PeerServer)
    } else {
        devmem_role(t)
    }
}

/// `--send-pattern`: [`Role::TxPattern`] (devmem TX) with `-f`, else [`Role::Sender`].
fn pattern_sender_role(t: &Typed) -> Result<Role> {
    if t.listen {
        return Err(usage_err(
            "--send-pattern: sends to -s/-p and cannot be combined with -l",
        ));
    }
    require(t.server.as_ref(), || {
        need_s("the receiver --send-pattern connects to")
    })?;
    require(t.port, || need_p("the receiver's port"))?;
    if t.seed.is_none() {
        require(t.validate, || {
            format!(
                "--send-pattern: missing -v N (the pattern period to send; expected \
                 2..={VALIDATE_MAX}) or --seed SEED (the keyed stream)"
            )
        })?;
    }
    // -f selects devmem TX, as in C's client mode; the pattern replaces stdin.
    Ok(if t.ifname.is_some() {
        Role::TxPattern
    } else {
        Role::Sender
    })
}

/// `--plain`: [`Role::Plain`].
fn plain_server_role(t: &Typed) -> Result<Role> {
    if !t.listen {
        return Err(usage_err(
            "--plain: plain-TCP receive needs -l (to send a pattern, use --send-pattern)",
        ));
    }
    require(t.server.as_ref(), || {
        need_s("local address --plain listens on")
    })?;
    require(t.port, || need_p("port to listen on"))?;
    Ok(Role::Plain)
}

/// `--zcrx`: [`Role::Zcrx`], on a device queue or (`--zcrx-nodev`) without one.
fn zcrx_server_role(t: &Typed) -> Result<Role> {
    if !t.listen {
        return Err(usage_err("--zcrx: zero-copy receive needs -l"));
    }
    if t.zcrx_nodev {
        if t.ifname.is_some() || t.start_queue.is_some() || t.num_queues.is_some() {
            return Err(usage_err(
                "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
            ));
        }
    } else {
        require(t.ifname.as_ref(), || need_f("--zcrx"))?;
    }
    require(t.server.as_ref(), || {
        need_s("local address --zcrx listens on")
    })?;
    require(t.port, || need_p("port to listen on"))?;
    Ok(Role::Zcrx)
}

/// `--report`: [`Role::Report`].
fn report_role(t: &Typed) -> Result<Role> {
    if t.listen || t.server.is_some() || t.client.is_some() {
        return Err(usage_err(
            "--report: the capability report takes only -f IF (not -l, -s or -c)",
        ));
    }
    require(t.ifname.as_ref(), || need_f("--report"))?;
    if t.quiet && t.json.is_none() {
        return Err(usage_err(
            "--report: with --quiet the report is only written to --json FILE, so give \
             --json (or drop --quiet)",
        ));
    }
    Ok(Role::Report)
}

/// C ncdevmem's own modes: [`Role::Server`] (`-l`), the devmem TX client (`-s`/`-c`), else
/// [`Role::Probe`]; all need `-f`.
fn devmem_role(t: &Typed) -> Result<Role> {
    require(t.ifname.as_ref(), || {
        need_f("probe, server and client modes; --plain and --send-pattern do not need it")
    })?;
    if t.listen {
        require(t.server.as_ref(), || {
            need_s("server mode: the local address to listen on")
        })?;
        require(t.port, || need_p("server mode"))?;
        Ok(Role::Server)
    } else if t.server.is_some() || t.client.is_some() {
        require(t.server.as_ref(), || {
            need_s("client mode: the address to connect to")
        })?;
        require(t.port, || need_p("client mode"))?;
        Ok(Role::TxStdin)
    } else {
        Ok(Role::Probe)
    }
}

/// `-t`/`-q`: both or neither, and the range inside `u32` queue ids, in the modes that
/// take queues (the devmem TX client too, as C).
fn check_queue_range(t: &Typed, role: Role) -> Result<()> {
    if matches!(
        role,
        Role::Report | Role::Plain | Role::Sender | Role::PeerServer | Role::Compare
    ) {
        return Ok(());
    }
    match (t.start_queue, t.num_queues) {
        (Some(_), None) | (None, Some(_)) => Err(usage_err(
            "-t/-q: Both -t and -q are required (or neither, to let ncdevmem-rs pick the queues)",
        )),
        (Some(start), Some(num)) if start.checked_add(num - 1).is_none() => {
            Err(usage_err(format!(
                "-t/-q: queues {start}..{start}+{num} run past the largest queue id {}",
                u32::MAX
            )))
        }
        _ => Ok(()),
    }
}

/// The rules between options, after the table's refusals: `-p 0` only where the listener
/// names the port it got; `--send-pattern 0` (no size
/// limit) only with a duration; the corrupted byte inside the stream; only a sender draws
/// `--seed random`; nothing to verify with `--zcrx-nodev` or `-n`.
fn check_rules(t: &Typed, role: Role) -> Result<()> {
    let names_its_port = (role == Role::Plain && t.peer.is_none()) || role == Role::PeerServer;
    if t.port == Some(0) && !names_its_port {
        return Err(usage_err(
            "-p: invalid port '0' (expected 1..=65535): port 0, a free port the kernel picks, \
             is only for the listeners that name it (-l --plain without --peer, \
             --peer-server)",
        ));
    }
    if t.pattern_bytes == Some(0) && t.duration.is_none() {
        return Err(usage_err(
            "--send-pattern 0: without --duration it would send nothing (0 = no size limit, \
             only with --duration SECS); give a byte count (e.g. --send-pattern 1G) or add \
             --duration SECS",
        ));
    }
    if let (Some(off), Some(total)) = (t.corrupt_offset, t.pattern_bytes) {
        if off >= total {
            return Err(usage_err(format!(
                "--corrupt-offset: invalid stream offset '{off}' (expected 0..{total}, \
                 inside the --send-pattern stream)"
            )));
        }
    }
    if role.receives() && t.seed == Some(Seed::Random) {
        return Err(usage_err(
            "--seed random: only a sender draws a seed; give the receiver the seed the \
             sender printed",
        ));
    }
    if t.zcrx_nodev && t.require_spread {
        return Err(usage_err(
            "--require-spread: --zcrx-nodev binds no queue, so there is no spread to require",
        ));
    }
    if t.zcrx_nodev && t.verify_restore {
        return Err(usage_err(
            "--verify-restore: --zcrx-nodev changes no NIC, so there is nothing to verify",
        ));
    }
    if let (Some(warmup), Some(duration)) = (t.warmup, t.duration) {
        if warmup >= duration {
            return Err(usage_err(format!(
                "--warmup: {} s leaves nothing of --duration {} s to measure (expected less \
                 than the duration)",
                warmup.as_secs_f64(),
                duration.as_secs_f64()
            )));
        }
    }
    if t.json == Some(JsonTarget::Stdout)
        && role.receives()
        && t.peer.is_none()
        && t.seed.is_none()
        && t.validate.is_none()
    {
        return Err(usage_err(
            "--json -: a receiver without -v N or --seed writes the payload to stdout; give \
             -v N or --seed SEED, or --json FILE",
        ));
    }
    check_hds_thresh(t, role)?;
    check_sweep_rules(t, role)?;
    if t.verify_restore && t.skip_nic_config && role != Role::Probe {
        return Err(usage_err(
            "--verify-restore: -n skips NIC configuration, so there is nothing to verify",
        ));
    }
    Ok(())
}

/// Why a devmem or zcrx server runs with hds-thresh 0 only: the kernel's rule, for the usage
/// errors of `--hds-thresh` and of an `hds-thresh` sweep.
const HDS_THRESH_RULE: &str = "a memory provider (the devmem binding, the zcrx ifq) cannot be \
    installed on a queue while the NIC's hds-thresh is not 0 (the kernel refuses: \
    \"hds-thresh is not zero\"; and refuses a non-zero hds-thresh while one is bound), so \
    devmem and zcrx servers run with hds-thresh 0 only; receive over plain TCP (--plain -f IF) \
    for another hds-thresh";

/// Whether a `--plain` receiver changes the NIC's hds-thresh: `--hds-thresh` or an
/// `hds-thresh` sweep.
fn plain_sets_hds(t: &Typed) -> bool {
    use crate::lab::plan::SweepKey;
    t.hds_thresh.is_some()
        || t.sweep
            .as_ref()
            .is_some_and(|s| s.key == SweepKey::HdsThresh)
}

/// `--hds-thresh` (and an `hds-thresh` sweep's points): only 0 for the devmem and zcrx
/// servers ([`HDS_THRESH_RULE`]); the plain receiver needs `-f IF` (the NIC it sets) and no
/// `-n`.
fn check_hds_thresh(t: &Typed, role: Role) -> Result<()> {
    use crate::lab::plan::SweepKey;
    let swept = t.sweep.as_ref().filter(|s| s.key == SweepKey::HdsThresh);
    match role {
        Role::Server | Role::Zcrx => {
            if let Some(n) = t.hds_thresh.filter(|n| *n != 0) {
                return Err(usage_err(format!("--hds-thresh {n}: {HDS_THRESH_RULE}")));
            }
            if let Some(v) = swept.and_then(|s| s.values.iter().find(|v| **v != 0)) {
                return Err(usage_err(format!(
                    "--sweep hds-thresh: point {v}: {HDS_THRESH_RULE}"
                )));
            }
        }
        Role::Plain if plain_sets_hds(t) => {
            let flag = match swept {
                Some(_) => "--sweep hds-thresh",
                None => "--hds-thresh",
            };
            if t.ifname.is_none() {
                return Err(usage_err(format!(
                    "{flag}: --plain sets the hds-thresh of the NIC -f IF names; give -f IF"
                )));
            }
            if t.skip_nic_config {
                return Err(usage_err(format!(
                    "{flag}: -n skips NIC configuration, and {flag} is one; not both"
                )));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The rules of a sweep: its options need `--peer`; the swept key applies to the mode and
/// is not also given as its own option.
fn check_sweep_rules(t: &Typed, role: Role) -> Result<()> {
    use crate::lab::plan::SweepKey;
    if t.peer.is_none() {
        let needs = [
            (t.sweep.is_some(), "--sweep"),
            (t.runs.is_some(), "--runs"),
            (t.csv.is_some(), "--csv"),
            (t.columns.is_some() && role != Role::Compare, "--columns"),
            (t.format.is_some() && role != Role::Compare, "--format"),
            (t.plot.is_some() && role != Role::Compare, "--plot"),
            (t.baseline.is_some(), "--baseline"),
            (t.pre_run.is_some(), "--pre-run"),
            (t.post_run.is_some(), "--post-run"),
            (t.any_shape && role != Role::Compare, "--any-shape"),
            (t.peer_port.is_some(), "--peer-port"),
            (t.peer_send.is_some(), "--peer-send"),
            (role.receives() && t.write_size.is_some(), "--write-size"),
        ];
        if let Some((_, flag)) = needs.iter().find(|(given, _)| *given) {
            return Err(usage_err(format!(
                "{flag}: a sweep needs --peer ADDR (the host running --peer-server that sends \
                 each run)"
            )));
        }
        return Ok(());
    }
    if t.expect_bytes.is_some() {
        return Err(usage_err(
            "--expect-bytes: a sweep's runs are timed (--duration), not counted in bytes",
        ));
    }
    let Some(sweep) = &t.sweep else {
        return Ok(());
    };
    let (applies, own) = match sweep.key {
        SweepKey::RxPageSize => (role == Role::Server, t.rx_page_size.map(|_| "-b")),
        SweepKey::Autorelease => (role == Role::Server, t.bind_autorelease.map(|_| "-a")),
        SweepKey::RxBufLen => (role == Role::Zcrx, t.rx_buf_len.map(|_| "--rx-buf-len")),
        SweepKey::Flows => (role != Role::Zcrx, t.flows.map(|_| "--flows")),
        SweepKey::DmabufSize => (
            role == Role::Server || role == Role::Zcrx,
            t.dmabuf_size.map(|_| "--dmabuf-size"),
        ),
        SweepKey::WriteSize => (true, t.write_size.map(|_| "--write-size")),
        SweepKey::TcpCc => (true, t.tcp_cc.as_ref().map(|_| "--tcp-cc")),
        SweepKey::HdsThresh => (true, t.hds_thresh.map(|_| "--hds-thresh")),
    };
    let name = sweep.key.name();
    if !applies {
        let to = match sweep.key {
            SweepKey::RxBufLen => "the zcrx server (-l --zcrx)",
            SweepKey::DmabufSize => "the devmem and zcrx servers",
            SweepKey::Flows => {
                "the devmem server and the plain receiver (a zcrx point's flows \
                                must cover its -q ifqs)"
            }
            _ => "the devmem server (-l -f IF without --plain or --zcrx)",
        };
        return Err(usage_err(format!("--sweep {name}: only applies to {to}")));
    }
    if let Some(flag) = own {
        return Err(usage_err(format!(
            "--sweep {name}: sets {flag} for each point; do not give {flag} too"
        )));
    }
    Ok(())
}

/// `-s` and `-c` parsed: no unscoped link-local address where a socket uses it, and both of
/// one family.
fn resolve_addrs(t: &Typed, role: Role) -> Result<(Option<HostAddr>, Option<HostAddr>)> {
    let server = t
        .server
        .as_deref()
        .map(|a| HostAddr::parse("-s", "server address", a))
        .transpose()?;
    let client = t
        .client
        .as_deref()
        .map(|a| HostAddr::parse("-c", "client address", a))
        .transpose()?;
    // A socket bound or connected to a link-local IPv6 address needs its zone (the
    // interface), which these flags cannot carry: the kernel answers EINVAL. -s is always
    // a socket address; -c only where the sender binds it (a server puts it in the flow
    // rule, where it needs no zone).
    let binds_client = matches!(role, Role::TxStdin | Role::TxPattern | Role::Sender);
    if role == Role::PeerServer {
        if let Some(h) = &server {
            h.refuse_unscoped_link_local("-s")?;
        }
        return Ok((server, client));
    }
    for (flag, addr, used) in [("-s", &server, true), ("-c", &client, binds_client)] {
        if let Some(h) = addr.as_ref().filter(|_| used) {
            h.refuse_unscoped_link_local(flag)?;
        }
    }
    if let (Some(s), Some(c)) = (&server, &client) {
        // Sockets are AF_INET6 with v4-mapped IPv4, so both must be IPv4 or both IPv6.
        let v4 = |h: &HostAddr| h.flow_ip().is_ipv4();
        if v4(s) != v4(c) {
            return Err(usage_err(format!(
                "-c: client address '{}' is not of the same family as -s '{}' \
                 (both IPv4 or both IPv6)",
                c.text, s.text
            )));
        }
    }
    Ok((server, client))
}

/// `Err(Error::Usage)` naming `flag` when `addr` cannot be reached from a socket bound to
/// `-s` `server` (the sweep's control connection is made from `-s`, and the peer sends to
/// where it came from): an IPv4 `-s` (plain or v4-mapped) needs an IPv4 `addr`, an IPv6 one
/// an IPv6 `addr`; `-s ::` (every address, dual-stack) reaches both. Without this the connect
/// fails only once the sweep runs (`EAFNOSUPPORT`, `ENETUNREACH`).
fn same_family_as_server(flag: &str, what: &str, addr: &HostAddr, server: &HostAddr) -> Result<()> {
    let v4 = |h: &HostAddr| h.flow_ip().is_ipv4();
    let any6 = matches!(server.ip, IpAddr::V6(v6) if v6.is_unspecified());
    if any6 || v4(addr) == v4(server) {
        return Ok(());
    }
    Err(usage_err(format!(
        "{flag}: {what} address '{}' is not of the same family as -s '{}' (the control \
         connection is made from -s: both IPv4 or both IPv6, or -s ::)",
        addr.text, server.text
    )))
}

/// The arguments of `role`'s mode from what was typed (every rule already checked; a missing
/// required value would be the usage error its mode selection gives).
fn mode_args(
    t: Typed,
    role: Role,
    server: Option<HostAddr>,
    client: Option<HostAddr>,
) -> Result<ModeArgs> {
    let missing = |flag: &str| usage_err(format!("missing {flag} argument"));
    let ifname = |t: &Typed| t.ifname.clone().ok_or_else(|| missing("-f"));
    let queues = t
        .start_queue
        .zip(t.num_queues)
        .map(|(start, count)| QueueRange { start, count });
    let port = t.port;
    let flows = |t: &Typed| Flows {
        count: t.flows.unwrap_or(1),
        duration: t.duration,
        warmup: t.warmup,
        cpus: t.cpus.clone(),
        tcp_cc: t.tcp_cc.clone(),
    };
    let receive = |t: &Typed, server: Option<HostAddr>| -> Result<Receive> {
        let validate = match t.seed {
            Some(Seed::Value(seed)) => Some(StreamSpec::keyed(seed)),
            _ => t.validate.map(StreamSpec::Periodic),
        };
        Ok(Receive {
            addr: server.ok_or_else(|| missing("-s"))?,
            port: port.ok_or_else(|| missing("-p"))?,
            validate,
            timeout: t.timeout,
            progress: t.progress,
            expect_bytes: t.expect_bytes,
            rcvbuf: t.rcvbuf,
            flows: flows(t),
            require_spread: t.require_spread,
        })
    };
    let peer = |server: Option<HostAddr>, client: Option<HostAddr>| -> Result<Peer> {
        Ok(Peer {
            addr: server.ok_or_else(|| missing("-s"))?,
            port: port.ok_or_else(|| missing("-p"))?,
            local: client,
        })
    };
    let pattern = |t: &Typed| -> Result<PatternArgs> {
        let stream = match (t.seed, t.validate) {
            (Some(seed), _) => SendStream::Keyed(seed),
            (None, Some(n)) => SendStream::Periodic(n),
            (None, None) => return Err(missing("-v")),
        };
        Ok(PatternArgs {
            bytes: t.pattern_bytes.ok_or_else(|| missing("--send-pattern"))?,
            stream,
            write_size: t.write_size,
            corrupt_offset: t.corrupt_offset,
            flows: flows(t),
        })
    };
    if role.receives() {
        if let Some(peer) = &t.peer {
            let peer = HostAddr::parse("--peer", "peer address", peer)?;
            peer.refuse_unscoped_link_local("--peer")?;
            if let Some(s) = &server {
                same_family_as_server("--peer", "peer", &peer, s)?;
            }
            return sweep_args(t, role, server, client, peer);
        }
    }
    Ok(match role {
        Role::Compare => {
            let (base, new) = t
                .compare
                .clone()
                .ok_or_else(|| usage_err("--compare: missing BASE.json NEW.json"))?;
            ModeArgs::Compare(CompareArgs {
                base,
                new,
                any_shape: t.any_shape,
                columns: t.columns.clone(),
                format: t.format.unwrap_or_default(),
                plot: t.plot.clone(),
            })
        }
        Role::PeerServer => ModeArgs::PeerServer(PeerServerArgs {
            addr: match server {
                Some(s) => s,
                None => HostAddr::parse("-s", "server address", "::")?,
            },
            port: t.port.unwrap_or(DEFAULT_PEER_PORT),
            tx_ifname: t.ifname.clone(),
            tx_dmabuf_size: t.dmabuf_size,
            max_duration: t.max_duration.unwrap_or(DEFAULT_MAX_DURATION),
            max_bytes: t.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
        }),
        Role::Probe => ModeArgs::Probe(ProbeArgs {
            ifname: ifname(&t)?,
            queues,
            rx_page_size: t.rx_page_size,
            dmabuf_size: t.dmabuf_size,
            memory: t.memory.clone(),
            skip_nic_config: t.skip_nic_config,
            verify_restore: t.verify_restore,
        }),
        Role::Report => ModeArgs::Report(ReportArgs {
            ifname: ifname(&t)?,
            rx_page_size: t.rx_page_size,
            dmabuf_size: t.dmabuf_size,
        }),
        Role::Server => ModeArgs::Server(ServerArgs {
            nic: NicArgs {
                ifname: ifname(&t)?,
                queues,
                client,
                skip_nic_config: t.skip_nic_config,
                verify_restore: t.verify_restore,
            },
            rx: receive(&t, server)?,
            fail_on_linear: t.fail_on_linear,
            rx_page_size: t.rx_page_size,
            so_autorelease: t.autorelease,
            bind_autorelease: t.bind_autorelease,
            unbind: t.unbind,
            dmabuf_size: t.dmabuf_size,
            memory: t.memory.clone(),
        }),
        Role::Zcrx => ModeArgs::Zcrx(ZcrxArgs {
            nic: match t.zcrx_nodev {
                true => None,
                false => Some(NicArgs {
                    ifname: ifname(&t)?,
                    queues,
                    client,
                    skip_nic_config: t.skip_nic_config,
                    verify_restore: t.verify_restore,
                }),
            },
            rx: receive(&t, server)?,
            area_size: t.dmabuf_size,
            rx_buf_len: t.rx_buf_len,
        }),
        Role::Plain => ModeArgs::Plain(PlainArgs {
            rx: receive(&t, server)?,
            fail_on_linear: t.fail_on_linear,
            ifname: t.ifname.clone().filter(|_| plain_sets_hds(&t)),
            hds_thresh: t.hds_thresh,
            rcvlowat: t.rcvlowat,
        }),
        Role::TxStdin | Role::TxPattern => ModeArgs::Client(ClientArgs {
            ifname: ifname(&t)?,
            source: match role {
                Role::TxPattern => TxSource::Pattern(pattern(&t)?),
                _ => TxSource::Stdin,
            },
            peer: peer(server, client)?,
            chunk: t.tx_chunk,
            dmabuf_size: t.dmabuf_size,
            memory: t.memory.clone(),
            timeout: t.timeout,
        }),
        Role::Sender => ModeArgs::Sender(SenderArgs {
            pattern: pattern(&t)?,
            peer: peer(server, client)?,
            timeout: t.timeout,
            progress: t.progress,
        }),
    })
}

/// The arguments of a sweep of `role`'s receive: the receive with the sweep's defaults (a
/// duration, a timeout, a stream), and the sweep's own options.
fn sweep_args(
    mut t: Typed,
    role: Role,
    server: Option<HostAddr>,
    client: Option<HostAddr>,
    peer: HostAddr,
) -> Result<ModeArgs> {
    let duration = t.duration.unwrap_or(DEFAULT_SWEEP_DURATION);
    t.duration = Some(duration);
    t.timeout = t.timeout.or(Some(DEFAULT_SWEEP_TIMEOUT));
    if t.validate.is_none() && t.seed.is_none() {
        t.seed = Some(Seed::Value(DEFAULT_SWEEP_SEED));
    }
    // The NIC an hds-thresh sweep of the plain receiver sets at each point.
    let hds_ifname = t.ifname.clone().filter(|_| plain_sets_hds(&t));
    let sweep = t.sweep.take();
    let runs = t.runs.take().unwrap_or(DEFAULT_RUNS);
    let peer_port = t.peer_port.take().unwrap_or(DEFAULT_PEER_PORT);
    let peer_send = t.peer_send.take().unwrap_or_default();
    let peer_write_size = t.write_size.take().map(|w| w as u64);
    let (csv, plot) = (t.csv.take(), t.plot.take());
    let (columns, format) = (t.columns.take(), t.format.take().unwrap_or_default());
    let (baseline, any_shape) = (t.baseline.take(), t.any_shape);
    let (pre_run, post_run) = (t.pre_run.take(), t.post_run.take());
    t.peer = None;
    let mut base = mode_args(t, role, server, client)?;
    if let ModeArgs::Plain(p) = &mut base {
        p.ifname = p.ifname.take().or(hds_ifname);
    }
    Ok(ModeArgs::Sweep(SweepArgs {
        base: Box::new(base),
        duration,
        sweep,
        runs,
        peer,
        peer_port,
        peer_send,
        peer_write_size,
        csv,
        plot,
        columns,
        format,
        baseline,
        any_shape,
        pre_run,
        post_run,
        command_line: Vec::new(),
    }))
}

/// The full `--help` text; its option lists come from the option table.
pub fn usage() -> String {
    format!(
        "\
Usage:
  {p} -f IF [-t N -q N] [-b BYTES] [-n] [--memory SRC]      probe (devmem self-test)
  {p} -l -f IF -s ADDR -p PORT [-c ADDR] [-v N] [-L] ...    devmem RX server
  {p} -f IF -s ADDR -p PORT [-c ADDR] [-z BYTES] ...        devmem TX client (sends stdin)
  {p} -f IF -s ADDR -p PORT --send-pattern BYTES -v N ...   devmem TX client (sends a pattern)
  {p} -l --zcrx -f IF -s ADDR -p PORT [-v N] [-t N -q 1] ... io_uring zcrx RX server
  {p} -l --plain -s ADDR -p PORT [-v N] ...                 plain-TCP RX server
  {p} --report -f IF [--json FILE]                          capability report (read-only)
  {p} --send-pattern BYTES -s ADDR -p PORT -v N ...         plain-TCP pattern sender
  {p} --peer-server [-p CTRL] [-f IF] [--max-duration SECS] the sender side of sweeps
  {p} -l ... --peer ADDR [--sweep KEY=V1,V2] [--runs R]     a sweep of a receiver: the table
  {p} -h | --help | --version

A port of the kernel selftest ncdevmem (devmem TCP). The short options are C ncdevmem's, with
the same meanings; ncdevmem-rs's own features have long options.

Modes (as C ncdevmem picks them):
  -f IF and neither -s nor -c    probe: bind with an empty queue list must fail, bind with
                                 header split off must fail, bind with header split on must
                                 succeed, shrinking channels below a bound queue must fail;
                                 everything is restored. Exit 0 means devmem works on IF.
  -l                             devmem RX server: configure the NIC (unless -n), bind-rx,
                                 accept one connection, receive with MSG_SOCK_DEVMEM, validate
                                 (-v N) or print the payload to stdout, release tokens, undo.
  -s without -l                  devmem TX client: bind-tx, connect, send each line of stdin
                                 from the dmabuf with MSG_ZEROCOPY, wait for the zerocopy
                                 completions (at most --timeout, default 2 s, without any).
                                 With --send-pattern BYTES -v N: send the pattern instead.

Options from C ncdevmem:
{c}
Options of ncdevmem-rs:
{ours}
Values:
  Numbers are decimal digits only (no sign, no 0x except --seed; leading zeros are decimal).
{sizes}
  Every receiver and sender prints the CRC-32 (as zlib.crc32) of the stream in its summary
  and --json, validated or not, so any two tools can be compared end to end (a --seed
  stream checked byte by byte is not hashed; the summary says which bytes it covers). A repeated
  option keeps its last value. Short options bundle (-ls ::1) and take values attached or
  separate (-q4, -q 4). A separate value spelled like one of the options (--json
  --verify-restore) is refused as a forgotten value, and -f and --json values never start
  with '-' (write ./-name for such a file; --json - is stdout). -s and -c take unicast
  addresses (no link-local IPv6 where a socket uses them: it needs a zone, which they do not
  take).

Differences from C ncdevmem:
  Unknown options and positional arguments are refused with exit 2 (C prints \"unknown
  option\" and continues). Bad values are refused with exit 2 before anything is changed.
  -l without -s is refused (C ignores -l then and runs the probe).

Exit status:
  0 success, 1 test failure, 2 usage error, 4 skip (the environment lacks a capability).
",
        p = PROGRAM,
        c = flags::help_list(Section::C),
        ours = flags::help_list(Section::Ours),
        sizes = wrap(
            &format!(
                "Byte sizes ({}) are decimal bytes with an optional suffix K, M or G (KiB, \
                 MiB, GiB), e.g. 64K or 1G.",
                flags::size_options()
            ),
            92,
            "  "
        ),
    )
}

/// `text` broken at spaces into lines of at most `width` columns, each starting with
/// `indent` (a word longer than a line gets a line of its own); no newline at the end.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::from(indent);
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::replace(&mut line, String::from(indent)));
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}

#[cfg(test)]
mod tests;
