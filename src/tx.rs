//! Send side, two ways:
//!
//! - **devmem TX** ([`devmem`]): bind-tx, then `sendmsg(MSG_ZEROCOPY)` from the dma-buf with an
//!   `SCM_DEVMEM_DMABUF` cmsg, `-z` iov chunking and zerocopy completion tracking; the client
//!   mode (`-f IF -s ADDR -p PORT`) sends stdin line by line, or with `--send-pattern BYTES`
//!   the `-v` pattern. [`bind_tx`] and [`connect_devmem`] are the client's kernel steps.
//! - the built-in **plain pattern sender** (`--send-pattern` without `-f`), which replaces
//!   `yes $(echo -e \\x01…) | head -c N | socat -u - TCP:…` on the peer: it sends `N` bytes of
//!   the `-v` pattern in stream order, optionally with a fixed write size and `TCP_NODELAY` so
//!   each write leaves as its own segment (segment-size sweeps, as the kernel's `check_rx_hds`
//!   does with `socat -b SIZE … nodelay`).

use std::net::SocketAddrV6;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::engine::{Clock, Ctx, NoClock, Plan, Shared, Worker, DURATION_OVER, FLOW_FAILED};
use crate::error::{Error, Result};
use crate::netlink::netdev::{DmabufBinding, Netdev};
use crate::stats::CpuTime;
use crate::sys::socket;
use crate::sys::zerocopy::{self, ZerocopySocket};
use crate::validate::{StreamCrc32, StreamSpec};

pub mod devmem;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use devmem::{
    transmit, DmabufIov, DmabufWindow, LineSource, PatternSource, TxConfig, TxMemory, TxSocket,
    TxSource, TxStats,
};

/// Bytes per `send` when no write size is given: large enough that syscalls are not the cost.
pub const DEFAULT_WRITE_SIZE: usize = 256 * 1024;

/// How long the sender keeps retrying a refused connect when no `--timeout` is given
/// (the receiver may still be starting).
pub const DEFAULT_CONNECT_RETRY: Duration = Duration::from_secs(5);

/// What the pattern sender should do.
#[derive(Debug, Clone)]
pub struct PatternSend {
    /// Peer address and port (`-s`/`-p`), as an AF_INET6 address (IPv4 is v4-mapped).
    pub peer: SocketAddrV6,
    /// Local address and port to bind (`-c`, with the same port, as C's client does).
    pub local: Option<SocketAddrV6>,
    /// Interface to pin the socket to (`-f`, `SO_BINDTODEVICE`).
    pub ifname: Option<String>,
    /// The stream to send (`-v N` or `--seed SEED`).
    pub stream: StreamSpec,
    /// Total bytes to send.
    pub total_bytes: u64,
    /// Bytes per `send`; `Some` also sets `TCP_NODELAY`.
    pub write_size: Option<usize>,
    /// Connect timeout (and retry window for refused connects).
    pub timeout: Option<Duration>,
    /// Test aid: flip every bit of the byte at this stream offset, so the receiver's validator
    /// must report exactly this offset.
    pub corrupt_offset: Option<u64>,
}

/// What the sender did, for the summary line and the JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SendStats {
    /// Payload bytes sent.
    pub bytes: u64,
    /// `send` calls that completed (each one a full buffer, retried on short writes).
    pub writes: u64,
    /// CRC-32 (IEEE) of the bytes sent, to compare with a receiver's (none for the keyed
    /// stream, whose receiver checks every byte: [`StreamCrc32`]).
    pub crc32: StreamCrc32,
    /// Wall time from connect to the end of the last send.
    pub elapsed: Duration,
    /// The stream sent (`-v N` or `--seed SEED`).
    pub stream: Option<StreamSpec>,
    /// A flow of [`send_flows`]: the CPU its thread was pinned to (`--cpus`).
    pub pinned: Option<usize>,
    /// CPU time over [`elapsed`](Self::elapsed): the process's (`getrusage(RUSAGE_SELF)`)
    /// for one connection, the flow's thread's (`RUSAGE_THREAD`) for a flow of
    /// [`send_flows`]; `None` when it could not be read.
    pub cpu: Option<CpuTime>,
}

impl SendStats {
    /// Throughput in Gbit/s (10^9 bits per second); 0 for an empty run.
    pub(crate) fn gbps(&self) -> f64 {
        crate::stats::gbit_per_s(self.bytes, self.elapsed)
    }

    /// User + system CPU time over the send divided by its wall time (1.0 = one CPU busy
    /// throughout), at most the online CPUs; `None` without CPU figures or for a send
    /// shorter than [`MIN_CPU_SHARE_WALL`](crate::stats::MIN_CPU_SHARE_WALL).
    pub fn cpu_utilisation(&self) -> Option<f64> {
        cpu_share(self.cpu, self.elapsed)
    }

    /// One human line for stderr, e.g. `sent 1048576 bytes (period 7) in 4 writes, 0.003 s,
    /// 3.06 Gbit/s, crc32 0x0faf8379; CPU user 0.000 s, sys 0.002 s (67% of one CPU over the
    /// send)`.
    pub fn summary_line(&self) -> String {
        format!(
            "sent {} bytes{} in {} writes, {:.3} s, {:.2} Gbit/s, {}{}",
            self.bytes,
            self.stream.map(|t| format!(" ({t})")).unwrap_or_default(),
            self.writes,
            self.elapsed.as_secs_f64(),
            self.gbps(),
            self.crc32.describe(),
            cpu_text(self.cpu, self.elapsed),
        )
    }

    /// The same facts as the summary's type: `bytes`, `writes`, `crc32`, `stream`,
    /// `elapsed_s`, `gbit_per_s`, `cpu_user_s` and `cpu_sys_s` (seconds over the send, null
    /// when unknown), `cpu_utilisation` (fraction of one CPU, null when unknown).
    pub fn figures(&self) -> crate::summary::SendFlowFigures {
        crate::summary::SendFlowFigures {
            bytes: self.bytes,
            writes: self.writes,
            crc32: self.crc32.value,
            stream: self.stream.map(|t| t.to_string()),
            elapsed_s: self.elapsed.as_secs_f64(),
            gbit_per_s: self.gbps(),
            cpu_user_s: self.cpu.map(|c| c.user.as_secs_f64()),
            cpu_sys_s: self.cpu.map(|c| c.sys.as_secs_f64()),
            cpu_utilisation: self.cpu_utilisation(),
        }
    }
}

/// `cpu`'s user + system time over `wall` (1.0 = one CPU busy throughout), at most the online
/// CPUs; `None` without CPU figures or for a send shorter than
/// [`MIN_CPU_SHARE_WALL`](crate::stats::MIN_CPU_SHARE_WALL) ([`crate::stats::cpu_share`]).
pub fn cpu_share(cpu: Option<CpuTime>, wall: Duration) -> Option<f64> {
    crate::stats::cpu_share(cpu, wall)
}

/// `"; CPU user U s, sys S s (P% of one CPU over the send)"` (or, for a send too short to
/// measure, `"(CPU share not measured: the send took under 10 ms)"`), or nothing without
/// figures.
pub(crate) fn cpu_text(cpu: Option<CpuTime>, wall: Duration) -> String {
    match cpu {
        None => String::new(),
        Some(c) => format!(
            "; CPU user {:.3} s, sys {:.3} s {}",
            c.user.as_secs_f64(),
            c.sys.as_secs_f64(),
            crate::stats::cpu_share_text(cpu, wall, "send")
        ),
    }
}

/// A progress line every `interval` while a sender sends (`--progress SECS`).
pub struct SendProgress<'a> {
    /// Between two lines.
    pub interval: Duration,
    /// Takes each line (the sender logs it), on the engine's supervisor thread.
    pub line: LineSink<'a>,
}

impl std::fmt::Debug for SendProgress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendProgress")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// The progress clock of a send: when the next line is due, and the bytes and time of the
/// previous one.
struct ProgressClock {
    start: Instant,
    interval: Duration,
    next: Option<Instant>,
    prev_bytes: u64,
    prev_at: Instant,
}

impl ProgressClock {
    fn new(interval: Duration) -> ProgressClock {
        let start = Instant::now();
        ProgressClock {
            start,
            interval,
            next: start.checked_add(interval),
            prev_bytes: 0,
            prev_at: start,
        }
    }

    /// The line due at `now` with `bytes` sent so far by `flows` flows, if one is due:
    /// `tx progress: 104857600 bytes in 1.0 s, 0.839 Gbit/s (last 1.0 s: 0.839 Gbit/s)`.
    fn line(&mut self, now: Instant, bytes: u64, flows: u32) -> Option<String> {
        if self.next.is_none_or(|at| now < at) {
            return None;
        }
        let since = now - self.prev_at;
        let what = match flows {
            1 => String::new(),
            n => format!(" ({n} flows)"),
        };
        let line = format!(
            "tx progress{what}: {bytes} bytes in {:.1} s, {:.3} Gbit/s (last {:.1} s: {:.3} \
             Gbit/s)",
            (now - self.start).as_secs_f64(),
            crate::stats::gbit_per_s(bytes, now - self.start),
            since.as_secs_f64(),
            crate::stats::gbit_per_s(bytes.saturating_sub(self.prev_bytes), since),
        );
        self.prev_bytes = bytes;
        self.prev_at = now;
        self.next = now.checked_add(self.interval);
        Some(line)
    }
}

/// How a pattern send ended: its figures once it was connected (also when it then failed or
/// was stopped: what was sent so far), and its verdict.
#[derive(Debug)]
pub struct SendOutcome {
    /// `None` when it never connected.
    pub stats: Option<SendStats>,
    /// The send's verdict.
    pub result: Result<()>,
}

/// Connects to `req.peer` and sends `req.total_bytes` of the pattern, then shuts down the
/// write side. A refused connect is retried every 100 ms within the timeout window.
///
/// Errors: `Error::Usage` for a bad period; `Error::Timeout` / `Error::Sys` from connect or
/// send (`EPIPE`/`ECONNRESET` when the receiver went away); `Error::Interrupted` on a signal.
pub fn send_pattern(req: &PatternSend, stop: &AtomicI32) -> Result<SendStats> {
    let SendOutcome { stats, result } = send_pattern_reporting(req, stop, None);
    result.map(|()| stats.unwrap_or_default())
}

/// [`send_pattern`], with a progress line every `progress.interval`, and the figures of what
/// was sent also when the send failed or was stopped once connected (a partial summary): the
/// one flow of [`send_flows`] (`--flows 1`).
///
/// Errors (in [`SendOutcome::result`]): as [`send_pattern`].
pub(crate) fn send_pattern_reporting(
    req: &PatternSend,
    stop: &AtomicI32,
    progress: Option<SendProgress<'_>>,
) -> SendOutcome {
    let one = SendFlows {
        count: 1,
        ..SendFlows::default()
    };
    let (stats, result) = send_flows_within(req, &one, stop, progress, None);
    SendOutcome {
        stats: stats.into_iter().next(),
        result,
    }
}

/// With `-c` equal to `-s` and the same port, TCP's simultaneous open can connect a socket to
/// itself; that "succeeds" without any receiver. Refuse it.
fn refuse_self_connect(sock: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    let (local, peer) = (socket::local_addr(sock)?, socket::peer_addr(sock)?);
    if local == peer {
        return Err(Error::Failure(format!(
            "connected to itself ({local}): nothing listens on the peer address; \
             drop -c or start the receiver first"
        )));
    }
    Ok(())
}

/// The least time a try of [`connect_retrying_to`] waits for its answer, also past the window
/// (a refusal comes back in microseconds on an idle host; a 1 ms wait on a loaded one ended
/// the last try of a refused run as "no answer within 1 ms").
const CONNECT_TRY_WAIT: Duration = Duration::from_millis(200);

/// [`crate::conn::connect_timeout`], retrying a refused connect every 100 ms within `timeout`
/// (default [`DEFAULT_CONNECT_RETRY`]). The last try is made at the end of the window (the
/// pause before it is shortened), so a receiver that starts listening just before the
/// deadline is still reached, and the message states when the last try was refused. Each
/// try waits at least [`CONNECT_TRY_WAIT`] for its answer, so a loaded host's late answer
/// to the last try is still read as a refusal; a last try with no answer after refused ones
/// still says they were refused.
fn connect_retrying_to(
    peer: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: Option<&str>,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<std::os::fd::OwnedFd> {
    let window = timeout.unwrap_or(DEFAULT_CONNECT_RETRY);
    let start = Instant::now();
    // A window too long to represent retries until a signal.
    let deadline = start
        .checked_add(window)
        .unwrap_or_else(|| start + Duration::from_secs(u32::MAX.into()));
    let mut tries = 0u32;
    loop {
        crate::signals::check_flag(stop)?;
        let tried_at = Instant::now();
        let left = deadline.saturating_duration_since(tried_at);
        tries = tries.saturating_add(1);
        match crate::conn::connect_until(
            peer,
            local,
            ifname,
            Some(left.max(CONNECT_TRY_WAIT)),
            stop,
        ) {
            Err(Error::Sys { call, errno }) if errno == libc::ECONNREFUSED => {
                let now = Instant::now();
                // Only a try begun at or after the deadline is the last: one begun before it
                // and answered after it (a loaded machine) is followed by one more.
                if tried_at >= deadline {
                    return Err(Error::Timeout(format!(
                        "connect to [{}]:{}: still refused after {} ms, {tries} tries in the \
                         {} ms window, the last at {} ms ({call})",
                        peer.ip(),
                        peer.port(),
                        now.duration_since(start).as_millis(),
                        window.as_millis(),
                        tried_at.duration_since(start).as_millis()
                    )));
                }
                // The next try 100 ms later, or right at the deadline.
                let pause = Duration::from_millis(100);
                std::thread::sleep(pause.min(deadline.saturating_duration_since(now)));
            }
            Err(Error::Timeout(what)) if tries > 1 => {
                return Err(Error::Timeout(format!(
                    "connect to [{}]:{}: refused {} times in the {} ms window, then {what}",
                    peer.ip(),
                    peer.port(),
                    tries - 1,
                    window.as_millis()
                )))
            }
            other => return other,
        }
    }
}

/// bind-tx for the devmem client: binds `dmabuf_fd` for TX on `ifindex` (`ifname` names it in
/// messages). The returned binding owns its netlink socket; keep it alive for the whole run
/// (dropping it unbinds). Available since 6.16.
///
/// Errors: the kernel's refusals that mean "no devmem TX here" are `Error::Skip` (exit 4) with
/// the kernel's answer verbatim, e.g. `netdev bind-tx on veth0 (ifindex 2): EOPNOTSUPP
/// (Operation not supported); kernel: "Driver does not support netmem TX"`: `EOPNOTSUPP` (driver
/// without netmem TX, or no DMA-capable device) and `EPERM`. Everything else stays a failure
/// (`Error::Netlink`), as does a reply with binding id 0 (`Error::Failure`).
#[doc(alias = "NETDEV_CMD_BIND_TX")]
pub fn bind_tx(
    netdev: &Netdev,
    ifindex: u32,
    ifname: &str,
    dmabuf_fd: BorrowedFd<'_>,
) -> Result<DmabufBinding> {
    let binding = netdev
        .bind_tx(ifindex, dmabuf_fd)
        .map_err(|e| crate::caps::classify(e, crate::caps::Op::BindTx { ifname }))?;
    if binding.id() == 0 {
        return Err(Error::Failure(format!(
            "netdev bind-tx on {}: the kernel replied with binding id 0, which sendmsg would \
             treat as \"no dma-buf\"",
            binding.target()
        )));
    }
    Ok(binding)
}

/// The devmem client's TCP socket, as ncdevmem.c's `do_client` sets it up: AF_INET6,
/// `SO_BINDTODEVICE(ifname)`, with `local` bound (address and the same port) when given,
/// connected to `peer` within `timeout` (a refused connect is retried every 100 ms within that
/// window; default [`DEFAULT_CONNECT_RETRY`]), then `SO_ZEROCOPY = 1`.
///
/// Errors: as [`crate::conn::connect_timeout`]; `Error::Sys` from `setsockopt(SO_ZEROCOPY)`;
/// `Error::Interrupted` when `stop` is set.
pub fn connect_devmem(
    peer: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: &str,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<ZerocopySocket> {
    let fd = connect_retrying_to(peer, local, Some(ifname), timeout, stop)?;
    zerocopy::set_zerocopy(fd.as_fd(), true)?;
    Ok(ZerocopySocket::new(fd))
}

/// The flows of [`send_flows`]: how many, for how long, on which CPUs, with which congestion
/// control.
#[derive(Debug, Clone, Default)]
pub struct SendFlows {
    /// Connections, each its own flow (flow k: the k-th connected, sending flow k's stream).
    pub count: u32,
    /// Send until then (a clean end); the receiver closing first is a clean end too.
    /// `None`: each flow sends its `total_bytes` and a receiver that closes early is a failure.
    pub duration: Option<Duration>,
    /// Pin flow k's thread to the k-th CPU of the list, round robin.
    pub cpus: Option<Vec<usize>>,
    /// `TCP_CONGESTION` of every flow.
    pub tcp_cc: Option<String>,
}

/// Sends `req`'s pattern on `flows.count` connections at once, one thread each: the
/// connections are made one after another (each established before the next, so the
/// receiver accepts them in flow order), then flow k sends flow k's stream
/// ([`StreamSpec::for_flow`]), at most `req.total_bytes` bytes (0 with a duration: no limit),
/// until the duration ends or the receiver closes (with a duration: both clean). Returns each
/// flow's figures, also when the run failed.
///
/// Errors: connect errors (naming the flow); a flow's send error, named `flow k: …` (the
/// others stop); `Error::Interrupted` on `stop`.
pub fn send_flows(
    req: &PatternSend,
    flows: &SendFlows,
    stop: &AtomicI32,
) -> (Vec<SendStats>, Result<()>) {
    send_flows_reporting(req, flows, stop, None)
}

/// [`send_flows`], with a progress line of all flows together every `progress.interval`.
///
/// Errors: as [`send_flows`].
pub fn send_flows_reporting(
    req: &PatternSend,
    flows: &SendFlows,
    stop: &AtomicI32,
    progress: Option<SendProgress<'_>>,
) -> (Vec<SendStats>, Result<()>) {
    send_flows_within(req, flows, stop, progress, None)
}

/// [`send_flows`] that is over by `deadline`, its connects included: each flow's connect
/// window (`req.timeout`) ends there at the latest, and so does the send (at the earlier of
/// the duration's end and `deadline`; a clean end, as the duration's). The peer server's
/// runs, which may not outlive its `--max-duration`.
///
/// Errors: as [`send_flows`]; a connect still refused at `deadline` is `Error::Timeout`.
pub fn send_flows_until(
    req: &PatternSend,
    flows: &SendFlows,
    stop: &AtomicI32,
    deadline: Option<Instant>,
) -> (Vec<SendStats>, Result<()>) {
    send_flows_within(req, flows, stop, None, deadline)
}

/// [`send_flows_reporting`] over by `deadline` ([`send_flows_until`]).
fn send_flows_within(
    req: &PatternSend,
    flows: &SendFlows,
    stop: &AtomicI32,
    progress: Option<SendProgress<'_>>,
    deadline: Option<Instant>,
) -> (Vec<SendStats>, Result<()>) {
    let n = flows.count.max(1);
    let mut socks = Vec::with_capacity(n as usize);
    for k in 0..n {
        // The connect window, cut at the deadline.
        let window = match deadline {
            None => req.timeout,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                Some(req.timeout.map_or(left, |t| t.min(left)))
            }
        };
        let conn = connect_retrying_to(req.peer, req.local, req.ifname.as_deref(), window, stop)
            .and_then(|fd| {
                refuse_self_connect(fd.as_fd())?;
                if let Some(cc) = &flows.tcp_cc {
                    crate::figures::tcp::set_congestion(fd.as_fd(), "--tcp-cc", cc)?;
                }
                Ok(fd)
            });
        match conn {
            Ok(fd) => socks.push(fd),
            Err(e) => {
                let e = match e {
                    // One flow's error is the run's, as it is.
                    e if n == 1 => e,
                    Error::Timeout(m) => Error::Timeout(format!("flow {k}: {m}")),
                    Error::Interrupted(s) => Error::Interrupted(s),
                    other => Error::Failure(format!("flow {k}: {other}")),
                };
                return (Vec::new(), Err(e));
            }
        }
    }
    let plan = Plan {
        workers: n as usize,
        duration: flows.duration,
        warmup: None,
        deadline,
        progress: progress.as_ref().map(|p| p.interval),
        cpus: flows.cpus.clone(),
        clock_at_start: true,
    };
    let shared = Shared::new(n as usize);
    let mut clock = SendClock {
        progress: progress.map(|p| (ProgressClock::new(p.interval), p.line)),
        flows: n,
    };
    let mut socks = socks.iter();
    let Some(first) = socks.next() else {
        return (Vec::new(), Ok(()));
    };
    let rest: Vec<Worker<'_, (SendStats, Result<()>)>> = socks
        .map(|fd| {
            Box::new(move |ctx: &Ctx<'_>| send_one_flow(req, n, fd.as_fd(), ctx)) as Worker<'_, _>
        })
        .collect();
    let results = crate::engine::run(
        &plan,
        &shared,
        stop,
        &mut clock,
        |ctx| send_one_flow(req, n, first.as_fd(), ctx),
        rest,
    );
    let mut first_err = None;
    let mut stats = Vec::with_capacity(results.len());
    for (k, (s, r)) in results.into_iter().enumerate() {
        if let Err(e) = r {
            if first_err.is_none() {
                first_err = Some(match e {
                    Error::Interrupted(sig) if sig > 0 => Error::Interrupted(sig),
                    // One flow's error is the run's, as it is.
                    other if n == 1 => other,
                    other => Error::Failure(format!("flow {k}: {other}")),
                });
            }
        }
        stats.push(s);
    }
    (stats, first_err.map_or(Ok(()), Err))
}

/// Takes each progress line of a send.
type LineSink<'a> = Box<dyn FnMut(String) + Send + 'a>;

/// The supervisor's side of a send: the progress lines of all flows together.
struct SendClock<'a> {
    progress: Option<(ProgressClock, LineSink<'a>)>,
    flows: u32,
}

impl Clock for SendClock<'_> {
    fn progress(&mut self, _elapsed: Duration, _since: Duration, _before: &[u64], now: &[u64]) {
        if let Some((clock, line)) = self.progress.as_mut() {
            if let Some(l) = clock.line(Instant::now(), now.iter().sum(), self.flows) {
                line(l);
            }
        }
    }
}

/// The start of flow `k` of `n` (`flow` = `(k, n)`), for both senders: its keyed stream (or
/// the run's `-v` pattern), and how many bytes it sends: `total_bytes`, or no end of its own
/// when that is 0 and the run has an end (`end`: its duration or deadline).
///
/// Errors: `Error::Usage` for a flow out of range.
fn start_flow(
    (k, n): (u32, u32),
    stream: StreamSpec,
    total_bytes: u64,
    end: Option<Instant>,
) -> Result<(StreamSpec, u64)> {
    let stream = stream.for_flow(k, n)?;
    let total = match (total_bytes, end) {
        (0, Some(_)) => u64::MAX,
        (t, _) => t,
    };
    Ok((stream, total))
}

/// The CRC-32 of the first `sent` bytes of `source`: the source's own when it knows it
/// ([`TxSource::sent_crc`]), else the hash of what was sent (`hashed`).
fn sent_crc(source: &PatternSource, sent: u64, hashed: Option<crc32fast::Hasher>) -> StreamCrc32 {
    source
        .sent_crc(sent)
        .unwrap_or_else(|| StreamCrc32::of_all(hashed.map_or(0, |h| h.finalize())))
}

/// One flow of [`send_flows`] on `sock`, the engine's worker `ctx.worker` of `n` (pinned by
/// the engine): its byte count is the flow's live figure (the progress lines).
fn send_one_flow(
    req: &PatternSend,
    n: u32,
    sock: BorrowedFd<'_>,
    ctx: &Ctx<'_>,
) -> (SendStats, Result<()>) {
    let k = ctx.worker as u32;
    let end = ctx.shared.end();
    let run_stop = ctx.run_stop();
    let sent = ctx.shared.live(ctx.worker);
    let mut stats = SendStats {
        pinned: ctx.cpu,
        ..SendStats::default()
    };
    let cpu_at_start = crate::sys::cpu::thread_cpu_time();
    let result = (|| {
        let (stream, total) = start_flow((k, n), req.stream, req.total_bytes, end)?;
        stats.stream = Some(stream);
        let write_size = req.write_size.map_or(DEFAULT_WRITE_SIZE, |w| w.max(1));
        let mut source = PatternSource::new(stream, total, write_size, req.corrupt_offset)?;
        if req.write_size.is_some() {
            socket::set_nodelay(sock, true)?;
        }
        let mut chunk = Vec::new();
        let mut crc = source.sent_crc(0).is_none().then(crc32fast::Hasher::new);
        let start = Instant::now();
        let done = loop {
            if end.is_some_and(|e| Instant::now() >= e) {
                break Ok(());
            }
            match crate::signals::check_flag(run_stop) {
                // Another flow failed (its error is the run's), or the run's end: this one
                // just stops.
                Err(Error::Interrupted(FLOW_FAILED | DURATION_OVER)) => break Ok(()),
                Err(e) => break Err(e),
                Ok(()) => {}
            }
            if !source.next_piece(usize::MAX, &mut chunk)? {
                break Ok(());
            }
            // The duration ends the send also within a write: a receiver that reads a little
            // now and then never lets the stall timeout run out.
            // The bytes the kernel took count also when the write ended early: a stop
            // within a write (the run's end while the send buffer was full) still leaves
            // them on their way to the receiver, which may read every one of them.
            let (n, written) = crate::conn::send_until(sock, &chunk, req.timeout, end, run_stop);
            if n > 0 {
                if let Some(h) = &mut crc {
                    h.update(&chunk[..n]);
                }
                stats.bytes += n as u64;
                stats.writes += 1;
                sent.set_bytes(stats.bytes);
            }
            match written {
                // Another flow failed (its error is the run's), or the run's end.
                Err(Error::Interrupted(FLOW_FAILED | DURATION_OVER)) => break Ok(()),
                // With a duration the receiver may close first: the end of this flow.
                Err(e)
                    if end.is_some()
                        && matches!(e.errno(), Some(libc::EPIPE | libc::ECONNRESET)) =>
                {
                    break Ok(());
                }
                Err(e) => break Err(e),
                Ok(()) if n < chunk.len() => break Ok(()),
                Ok(()) => {}
            }
        };
        stats.elapsed = start.elapsed();
        stats.crc32 = sent_crc(&source, stats.bytes, crc);
        done?;
        match socket::shutdown_write(sock) {
            Err(e) if end.is_some() && matches!(e.errno(), Some(libc::ENOTCONN | libc::EPIPE)) => {
                Ok(())
            }
            r => r,
        }
    })();
    stats.cpu = cpu_at_start
        .zip(crate::sys::cpu::thread_cpu_time())
        .map(|(a, b)| b.since(a));
    if let Err(e) = &result {
        ctx.shared.note_failure(e);
        // Stopped early (signal, timeout, error): reset the connection so the receiver sees
        // ECONNRESET instead of a clean end of a truncated stream.
        let _ = socket::abort_on_close(sock);
    }
    (stats, result)
}

/// The pattern every flow of [`transmit_flows`] sends: flow k sends flow k's stream of
/// `stream` ([`StreamSpec::for_flow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPattern {
    /// The run's stream (`--seed SEED` or `-v N`).
    pub stream: StreamSpec,
    /// Bytes each flow sends; with a duration, 0 means no limit.
    pub total_bytes: u64,
    /// Bytes per piece copied into the dma-buf (`--write-size`; `None`: as large as the
    /// sender's `max_piece` allows).
    pub write_size: Option<usize>,
    /// Test aid: flip every bit of the byte at this stream offset, on every flow.
    pub corrupt_offset: Option<u64>,
}

/// What one flow of [`transmit_flows`] did.
#[derive(Debug)]
pub struct DevmemFlow {
    /// The sender's counters (of this flow's socket only).
    pub stats: TxStats,
    /// The stream it sent.
    pub stream: Option<StreamSpec>,
    /// The CPU its worker was pinned to (`--cpus`).
    pub pinned: Option<usize>,
    /// Its worker thread's own user and system time over the flow
    /// (`getrusage(RUSAGE_THREAD)`).
    pub cpu: Option<CpuTime>,
    /// Its window of the dma-buf: `(offset, bytes)`.
    pub window: (u64, usize),
    /// How it ended: `Ok` also when the duration ended it, when the receiver closed first
    /// under a duration, or when another flow failed (that flow's error is the run's).
    pub result: Result<()>,
}

/// What the flows of [`transmit_flows`] send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStreams {
    /// Flow k sends flow k's stream of the pattern.
    Pattern(FlowPattern),
    /// The one flow sends stdin, line by line (the client without `--send-pattern`; `stop` is
    /// the stop flag the reads watch).
    StdinLines,
}

/// Devmem TX of one flow or several at once from one dma-buf and one binding, through the one
/// flow engine (flow 0 on the calling thread): the dma-buf is split into one window per flow
/// ([`DmabufWindow::split`], equal page multiples; one flow has the whole dma-buf) and flow k
/// sends on `socks[k]` from its window — flow k's stream of the pattern, or stdin's lines for
/// the one flow of [`TxStreams::StdinLines`] — with its own zerocopy completion handling
/// ([`transmit`] with `cfg`), pinned to the k-th CPU of `flows.cpus` (round robin). With
/// `flows.duration` each flow sends until then (a clean end; every send still completes) and
/// a receiver that closes first (`EPIPE`, `ECONNRESET`) ends that flow cleanly too.
/// `flows.count` and `flows.tcp_cc` are the caller's (the sockets are made). Returns each
/// flow's figures, also when the run failed.
///
/// Errors: a window under a page (`Error::Usage`, before any send); the first flow's failure,
/// named `flow k: …` when there are several (the other flows stop at their next piece or
/// wait); `Error::Interrupted` on `stop`.
pub fn transmit_flows<S, M>(
    socks: &mut [S],
    mem: &mut M,
    streams: TxStreams,
    cfg: &TxConfig,
    flows: &SendFlows,
    stop: &AtomicI32,
) -> (Vec<DevmemFlow>, Result<()>)
where
    S: TxSocket + Send,
    M: TxMemory + Send + ?Sized,
{
    let n = socks.len() as u32;
    let shared_mem = std::sync::Mutex::new(mem);
    let windows = match DmabufWindow::split(&shared_mem, n) {
        Ok(w) => w,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let plan = Plan {
        workers: n as usize,
        duration: flows.duration,
        cpus: flows.cpus.clone(),
        clock_at_start: true,
        ..Plan::default()
    };
    let shared = Shared::new(n as usize);
    let mut work = socks.iter_mut().zip(windows);
    let Some((sock0, window0)) = work.next() else {
        return (Vec::new(), Ok(()));
    };
    let pattern = match streams {
        TxStreams::Pattern(p) => Some(p),
        TxStreams::StdinLines => None,
    };
    let rest: Vec<Worker<'_, DevmemFlow>> = work
        .map(|(sock, window)| {
            Box::new(move |ctx: &Ctx<'_>| {
                transmit_one_flow(sock, window, pattern.as_ref(), cfg, n, ctx, stop)
            }) as Worker<'_, _>
        })
        .collect();
    let results = crate::engine::run(
        &plan,
        &shared,
        stop,
        &mut NoClock,
        |ctx| transmit_one_flow(sock0, window0, pattern.as_ref(), cfg, n, ctx, stop),
        rest,
    );
    let mut first_err = None;
    for (k, f) in results.iter().enumerate() {
        if let Err(e) = &f.result {
            first_err.get_or_insert_with(|| match e {
                Error::Interrupted(sig) => Error::Interrupted(*sig),
                other if n == 1 => other.clone(),
                Error::Usage(m) => Error::Usage(format!("flow {k}: {m}")),
                Error::Timeout(m) => Error::Timeout(format!("flow {k}: {m}")),
                other => Error::Failure(format!("flow {k}: {other}")),
            });
        }
    }
    (results, first_err.map_or(Ok(()), Err))
}

/// One flow of [`transmit_flows`] on `sock` from `window`, the engine's worker `ctx.worker` of
/// `n`: flow k's stream of `pattern`, or (no pattern) stdin's lines read with `stop` watched.
fn transmit_one_flow<S: TxSocket, M: TxMemory + ?Sized>(
    sock: &mut S,
    mut window: DmabufWindow<'_, '_, M>,
    pattern: Option<&FlowPattern>,
    cfg: &TxConfig,
    n: u32,
    ctx: &Ctx<'_>,
    stop: &AtomicI32,
) -> DevmemFlow {
    let k = ctx.worker as u32;
    let end = ctx.shared.end();
    let run_stop = ctx.run_stop();
    let cpu_at_start = crate::sys::cpu::thread_cpu_time();
    let mut flow = DevmemFlow {
        stats: TxStats {
            source: if pattern.is_some() {
                "pattern"
            } else {
                "stdin"
            },
            dmabuf_id: cfg.dmabuf_id,
            ..TxStats::default()
        },
        stream: None,
        pinned: ctx.cpu,
        cpu: None,
        window: (window.dmabuf_offset(), window.size()),
        result: Ok(()),
    };
    let source: Result<Box<dyn TxSource + '_>> = match pattern {
        Some(p) => start_flow((k, n), p.stream, p.total_bytes, end).and_then(|(stream, total)| {
            flow.stream = Some(stream);
            let piece = p.write_size.unwrap_or(0);
            let source = PatternSource::new(stream, total, piece, p.corrupt_offset)?;
            Ok(Box::new(Until { inner: source, end }) as Box<dyn TxSource>)
        }),
        None => Ok(Box::new(LineSource::new(std::io::stdin().lock(), stop))),
    };
    let result = match source {
        Err(e) => Err(e),
        Ok(mut source) => {
            let mut log = std::io::stderr();
            let (stats, r) = transmit(sock, &mut window, source.as_mut(), cfg, run_stop, &mut log);
            flow.stats = stats;
            match r {
                // Another flow failed (the run reports that flow's error), or the run's end.
                Err(Error::Interrupted(FLOW_FAILED | DURATION_OVER)) => Ok(()),
                // With a duration the receiver may close first: the end of this flow.
                Err(e)
                    if end.is_some()
                        && matches!(e.errno(), Some(libc::EPIPE | libc::ECONNRESET)) =>
                {
                    Ok(())
                }
                r => r,
            }
        }
    };
    if let Err(e) = &result {
        ctx.shared.note_failure(e);
    }
    flow.cpu = cpu_at_start
        .zip(crate::sys::cpu::thread_cpu_time())
        .map(|(a, b)| b.since(a));
    flow.result = result;
    flow
}

/// A source that ends at `end` (`None`: with its inner source).
struct Until<S> {
    inner: S,
    end: Option<Instant>,
}

impl<S: TxSource> TxSource for Until<S> {
    fn next_piece(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool> {
        if self.end.is_some_and(|e| Instant::now() >= e) {
            out.clear();
            return Ok(false);
        }
        self.inner.next_piece(max, out)
    }

    fn label(&self) -> &'static str {
        self.inner.label()
    }

    fn sent_crc(&self, sent: u64) -> Option<StreamCrc32> {
        self.inner.sent_crc(sent)
    }
}
