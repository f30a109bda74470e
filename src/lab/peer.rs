//! `--peer-server -p CTRL`: the long-lived sender side of sweeps, in the spirit of `iperf3 -s`.
//! It listens for control connections ([`super::proto`]); each client says hello, then asks
//! for one run's traffic at a time, and the peer sends it with the built-in pattern sender
//! ([`crate::tx::send_flows`]) and answers with its own figures and CPU shares.
//!
//! Safety rules, kept here and nowhere else:
//! - test traffic goes only to the address the control connection came from (at the port the
//!   request names); a request cannot name an address;
//! - every send is bounded by the peer's own limits: `--max-duration` (seconds) and
//!   `--max-bytes` (over all flows of a run), whatever the request asks;
//! - every run is over within the peer's `--max-duration` of its `started`, its connects
//!   included, and stops within a second of its control connection closing;
//! - one client at a time: a second client is refused with `busy` while a sweep is served;
//! - a client cannot keep the peer: its `hello` must begin within [`HELLO_WAIT`], every line
//!   must end within [`LINE_WAIT`] of its first byte, the next message must begin within
//!   [`CONTROL_IDLE`], and an answer must be taken within [`WRITE_WAIT`]; else it is dropped;
//! - a stop signal ends the server within a second, whatever its client is doing;
//! - a bad, oversized or out-of-order message is answered with an `error` and ends that
//!   client's session (never the server); the server then takes the next client.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddrV6, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use super::proto::{Conn, ErrorCode, Msg, Patience, PeerCpu, PeerFigures, ProtoError, Stream};
use crate::cli::{PeerServerArgs, PROGRAM};
use crate::error::{Error, Result};
use crate::figures::cpu::ProcStat;
use crate::run_report::RunReport;
use crate::signals::STOP;
use crate::tx::{self, PatternSend, SendFlows};
use crate::validate::StreamSpec;

/// How long a session waits for the first byte of the client's next message (a sweep's
/// receiver may spend minutes between runs waiting for the kernel to give back a binding's
/// hugepages).
pub(crate) const CONTROL_IDLE: Duration = Duration::from_secs(900);
/// How long a new client may stay silent before the first byte of its `hello`.
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(5);
/// How long any line of a client may take from its first byte to its newline.
pub(crate) const LINE_WAIT: Duration = Duration::from_secs(10);
/// How long a client may leave an answer untaken (its socket's buffer full) before it is
/// dropped.
pub(crate) const WRITE_WAIT: Duration = Duration::from_secs(10);
/// The tick of the control connection's reads and writes: how soon a stop signal is seen.
const CONTROL_TICK: Duration = Duration::from_millis(100);
/// How often a run's watcher looks at the control connection and the stop signal.
const WATCH_TICK: Duration = Duration::from_millis(50);
/// How long the peer retries connecting to a receiver that refuses (it is listening by the
/// time it asks, so this only covers a slow accept queue); never past the run's end.
const CONNECT_WINDOW: Duration = Duration::from_secs(10);
/// A run's stop flag once its control connection closed.
const CONTROL_CLOSED: i32 = -10;
/// A run's stop flag once it reached its duration, its connects included (devmem TX, whose
/// sender the deadline reaches only through the flag).
const RUN_OVER: i32 = -11;

/// What a session's reads wait for ([`session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waits {
    /// The first byte of the client's `hello`, from the session's start.
    pub hello: Duration,
    /// The first byte of every later message.
    pub idle: Duration,
    /// Any line, from its first byte to its newline.
    pub line: Duration,
}

/// The peer server's own waits: [`HELLO_WAIT`], [`CONTROL_IDLE`], [`LINE_WAIT`].
pub(crate) const WAITS: Waits = Waits {
    hello: HELLO_WAIT,
    idle: CONTROL_IDLE,
    line: LINE_WAIT,
};

/// The peer's own bounds on every run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    /// The longest send of one run.
    pub max_duration: Duration,
    /// The most bytes of one run over all its flows.
    pub max_bytes: u64,
    /// The peer was started with `-f IF` and sends a run asking for devmem TX through it.
    /// (Not announced in `welcome`: a client learns it from the refusal of such a run, and a
    /// client's copy of the peer's limits has `false`.)
    pub devmem_tx: bool,
}

/// One run's send as the peer carries it out: where, how many flows, for how long, at most how
/// many bytes per flow.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SendJob {
    /// The receiver: the control connection's address and the requested port.
    pub to: SocketAddrV6,
    /// Flows.
    pub flows: u32,
    /// The send's duration after the limit.
    pub duration: Duration,
    /// At most this many bytes per flow.
    pub bytes_per_flow: u64,
    /// The stream.
    pub stream: StreamSpec,
    /// Bytes per `write`.
    pub write_size: Option<usize>,
    /// `TCP_CONGESTION`.
    pub tcp_cc: Option<String>,
    /// Through devmem TX on the peer's own `-f IF` (else plain TCP).
    pub devmem_tx: bool,
}

/// The peer's devmem TX: the NIC it was started with and the dma-buf of each run.
#[derive(Debug, Clone)]
pub(crate) struct DevmemPeer {
    /// `-f IF`.
    pub ifname: crate::cli::IfName,
    /// The dma-buf each run allocates and binds for TX (`--dmabuf-size`).
    pub plan: crate::memory::MemoryPlan,
}

/// The peer server's `-f IF`, for the `host` it describes (set once when it starts).
static PEER_NIC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// The peer's provenance, as `about` asks it: this host, and the NIC of its `-f` (no bound
/// queues: it binds for TX only).
fn describe() -> crate::summary::sweep::Provenance {
    let nic = PEER_NIC.get().cloned().flatten();
    crate::lab::provenance::collect(nic.as_deref(), &[])
}

/// Serves `--peer-server` until a stop signal (see the module docs).
///
/// Errors: the listening socket's; the `--pid-file` write's; a stop signal ends the server
/// cleanly (`Ok`).
pub(crate) fn run(a: &PeerServerArgs, report: &RunReport) -> Result<()> {
    let _ = PEER_NIC.set(a.tx_ifname.as_ref().map(|i| i.to_string()));
    let devmem = match &a.tx_ifname {
        Some(ifname) => {
            // The interface must exist now; what it can do is the kernel's answer to each
            // run's bind-tx (a refusal fails that run, not the server).
            ifname.index()?;
            let plan = crate::memory::MemoryPlan::new(
                &crate::memory::MemorySource::Udmabuf,
                None,
                a.tx_dmabuf_size,
            )?;
            Some(DevmemPeer {
                ifname: ifname.clone(),
                plan,
            })
        }
        None if a.tx_dmabuf_size.is_some() => {
            return Err(Error::Usage(
                "--dmabuf-size: with --peer-server it sizes the devmem TX dma-buf, which \
                 needs -f IF"
                    .into(),
            ))
        }
        None => None,
    };
    let limits = Limits {
        max_duration: a.max_duration,
        max_bytes: a.max_bytes,
        devmem_tx: devmem.is_some(),
    };
    let listener = crate::sys::socket::tcp_listen_backlog(a.addr.with_port(a.port), None, 4)?;
    // The bound port: with `-p 0` the kernel picked it, and this line names it (then also
    // with --quiet).
    let port = crate::sys::socket::local_addr(listener.as_fd()).map_or(a.port, |s| s.port());
    let line = format!(
        "peer server: control on [{}]:{}; each run at most {} s and {} bytes, sent only to \
         the address of the client that asks; {}",
        a.addr.ip,
        port,
        limits.max_duration.as_secs_f64(),
        limits.max_bytes,
        match &devmem {
            Some(d) => format!(
                "plain TCP, or devmem TX through {} ({} bytes of {})",
                d.ifname,
                d.plan.size_bytes(),
                d.plan.describe()
            ),
            None => "plain TCP only (no -f IF: devmem TX runs are refused)".to_string(),
        }
    );
    match a.port {
        0 => report.warn(format_args!("{line}")),
        _ => report.log(format_args!("{line}")),
    }
    // `--pid-file`, now that the control port listens.
    report.listening()?;
    let quiet = report.quiet();
    let busy = AtomicBool::new(false);
    std::thread::scope(|scope| loop {
        let (fd, from) = match crate::conn::accept_timeout(listener.as_fd(), None, &STOP) {
            Ok(c) => c,
            Err(Error::Interrupted(_)) => {
                crate::modes::log!(report, "peer server: stopped by a signal");
                return Ok(());
            }
            Err(e) => {
                // A failed accept (a full file table) must not end the server: log, go on.
                report.warn(format_args!("peer server: accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let stream = TcpStream::from(fd);
        let from_ip = from.ip().to_canonical();
        if busy.swap(true, Ordering::AcqRel) {
            refuse_busy(stream, from_ip, quiet);
            continue;
        }
        let (busy, devmem) = (&busy, devmem.as_ref());
        scope.spawn(move || {
            serve_client(stream, from_ip, &limits, devmem, quiet);
            busy.store(false, Ordering::Release);
        });
    })
}

fn log(quiet: bool, line: std::fmt::Arguments<'_>) {
    if !quiet {
        crate::elog!("{PROGRAM}: {line}");
    }
}

/// Tells a second client that a sweep is being served, and closes.
fn refuse_busy(stream: TcpStream, from: IpAddr, quiet: bool) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut conn = Conn::new(stream);
    let _ = conn.send(&Msg::error(
        ErrorCode::Busy,
        "this peer is serving another client's sweep (one sweep at a time); try again when it \
         is over",
    ));
    log(
        quiet,
        format_args!("peer server: refused {from}: busy with another client"),
    );
}

/// A served client's control connection: its reads and writes wait in [`CONTROL_TICK`]s (the
/// socket's timeouts), so a stop signal is seen within one; a write that cannot go on for
/// [`WRITE_WAIT`] (a client that takes no answer) fails.
struct Control(TcpStream);

impl Read for Control {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Control {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let started = Instant::now();
        loop {
            match self.0.write(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if STOP.load(Ordering::SeqCst) != 0 {
                        return Err(std::io::Error::other("stopped by a signal"));
                    }
                    if started.elapsed() >= WRITE_WAIT {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "the client took no answer for {:.0} s",
                                WRITE_WAIT.as_secs_f64()
                            ),
                        ));
                    }
                }
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One client's session over `stream`, logged.
fn serve_client(
    stream: TcpStream,
    from: IpAddr,
    limits: &Limits,
    devmem: Option<&DevmemPeer>,
    quiet: bool,
) {
    log(quiet, format_args!("peer server: client {from} connected"));
    let setup = stream
        .set_read_timeout(Some(CONTROL_TICK))
        .and_then(|()| stream.set_write_timeout(Some(CONTROL_TICK)))
        .and_then(|()| stream.try_clone());
    let watch = match setup {
        Ok(w) => w,
        Err(e) => {
            log(quiet, format_args!("peer server: client {from}: {e}"));
            return;
        }
    };
    let mut conn = Conn::new(Control(stream));
    let mut send = |job: &SendJob| run_bounded(job, watch.as_fd(), devmem, quiet);
    let stopping = || STOP.load(Ordering::SeqCst) != 0;
    match session(
        &mut conn,
        from,
        limits,
        &WAITS,
        &mut send,
        &stopping,
        &mut |line| log(quiet, format_args!("peer server: client {from}: {line}")),
    ) {
        Ok(runs) => log(
            quiet,
            format_args!(
                "peer server: client {from} done after {}",
                crate::figures::count(runs, "run")
            ),
        ),
        Err(e) => log(quiet, format_args!("peer server: client {from}: {e}")),
    }
}

/// The peer's CPU shares between two `/proc/stat` reads.
fn cpu_between(before: Result<ProcStat>, after: Result<ProcStat>) -> Option<PeerCpu> {
    match (before, after) {
        (Ok(a), Ok(b)) => b.since(&a).all.shares().map(|s| PeerCpu {
            usr: s.usr,
            sys: s.sys,
            softirq: s.softirq,
            idle: s.idle,
        }),
        _ => None,
    }
}

impl SendJob {
    /// The flows of this run for either sender: its count, its duration, the asked-for
    /// congestion control, on any CPU.
    fn send_flows(&self) -> SendFlows {
        SendFlows {
            count: self.flows,
            duration: Some(self.duration),
            cpus: None,
            tcp_cc: self.tcp_cc.clone(),
        }
    }
}

/// Carries out `job` (through devmem TX on `devmem` when it asks for it, else the pattern
/// sender) within its bounds: over by `job.duration` after its start, its connects included,
/// and stopped within a [`WATCH_TICK`] of the client's control connection (`control`) closing
/// or a stop signal, by a watcher thread that sets the run's own stop flag.
fn run_bounded(
    job: &SendJob,
    control: BorrowedFd<'_>,
    devmem: Option<&DevmemPeer>,
    quiet: bool,
) -> PeerFigures {
    let deadline = Instant::now().checked_add(job.duration);
    let stop = AtomicI32::new(0);
    let finished = AtomicBool::new(false);
    let devmem = devmem.filter(|_| job.devmem_tx);
    let mut figures = std::thread::scope(|scope| {
        // The pattern sender ends at the deadline by itself (a clean end); devmem TX is told
        // through the flag.
        let flag_deadline = deadline.filter(|_| devmem.is_some());
        let (stop, finished) = (&stop, &finished);
        scope.spawn(move || watch_run(control, stop, finished, flag_deadline));
        let figures = match devmem {
            Some(d) => devmem_send(job, d, deadline, stop, quiet),
            None => real_send(job, deadline, stop),
        };
        finished.store(true, Ordering::SeqCst);
        figures
    });
    match stop.load(Ordering::SeqCst) {
        CONTROL_CLOSED => {
            figures.error = Some("stopped: the client's control connection closed".into());
        }
        // The run's end, reached by the flag: as clean as the duration's.
        RUN_OVER => figures.error = None,
        _ => {}
    }
    figures
}

/// Until `finished`: sets `stop` to the stop signal's number once one came, to
/// [`CONTROL_CLOSED`] once the control connection `control` is closed or broken (`POLLRDHUP`,
/// `POLLHUP`, `POLLERR`; a byte the client sends is left for the session), and to
/// [`RUN_OVER`] at `deadline`.
fn watch_run(
    control: BorrowedFd<'_>,
    stop: &AtomicI32,
    finished: &AtomicBool,
    deadline: Option<Instant>,
) {
    let set = |v: i32| {
        let _ = stop.compare_exchange(0, v, Ordering::SeqCst, Ordering::SeqCst);
    };
    let mut closed = false;
    while !finished.load(Ordering::SeqCst) {
        let sig = STOP.load(Ordering::SeqCst);
        if sig != 0 {
            set(sig);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            set(RUN_OVER);
        }
        if closed {
            std::thread::sleep(WATCH_TICK);
            continue;
        }
        match crate::sys::socket::poll_one(control.as_raw_fd(), libc::POLLRDHUP, Some(WATCH_TICK)) {
            Ok(0) => {}
            Ok(_) => {
                closed = true;
                set(CONTROL_CLOSED);
            }
            Err(_) => std::thread::sleep(WATCH_TICK),
        }
    }
}

/// Sends `job` through devmem TX on the peer's own NIC `d` (one dma-buf and binding for the
/// run, each flow its own window: [`crate::modes::client::send_devmem_flows`]) until `stop`,
/// its connects within [`CONNECT_WINDOW`] and `deadline`, measuring the peer's CPUs around it.
fn devmem_send(
    job: &SendJob,
    d: &DevmemPeer,
    deadline: Option<Instant>,
    stop: &AtomicI32,
    quiet: bool,
) -> PeerFigures {
    let window = deadline.map_or(CONNECT_WINDOW, |d| {
        CONNECT_WINDOW.min(d.saturating_duration_since(Instant::now()))
    });
    let dev = crate::modes::client::DevmemTx {
        ifname: &d.ifname,
        plan: &d.plan,
        chunk: None,
        timeout: Some(window),
        verbose: false,
        max_piece: job.write_size,
    };
    let pattern = tx::FlowPattern {
        stream: job.stream,
        total_bytes: job.bytes_per_flow,
        write_size: job.write_size,
        corrupt_offset: None,
    };
    let flows = job.send_flows();
    let before = ProcStat::read();
    let start = Instant::now();
    let (per_flow, result) = crate::modes::client::send_devmem_flows(
        &dev,
        job.to,
        None,
        tx::TxStreams::Pattern(pattern),
        &flows,
        stop,
        &mut |line| log(quiet, format_args!("peer server: {line}")),
    );
    let wall = start.elapsed();
    let cpu = cpu_between(before, ProcStat::read());
    let bytes: u64 = per_flow.iter().map(|f| f.stats.bytes).sum();
    let elapsed = per_flow
        .iter()
        .map(|f| f.stats.elapsed)
        .max()
        .filter(|d| !d.is_zero())
        .unwrap_or(wall);
    PeerFigures {
        bytes,
        elapsed_s: elapsed.as_secs_f64(),
        gbit_per_s: crate::stats::gbit_per_s(bytes, elapsed),
        flow_bytes: per_flow.iter().map(|f| f.stats.bytes).collect(),
        cpu,
        error: result
            .err()
            .map(|e| format!("devmem TX through {}: {e}", d.ifname)),
    }
}

/// Sends `job` with the built-in pattern sender until `stop`, over by `deadline` (its
/// connects included, [`tx::send_flows_until`]), measuring the peer's CPUs around it.
fn real_send(job: &SendJob, deadline: Option<Instant>, stop: &AtomicI32) -> PeerFigures {
    let req = PatternSend {
        peer: job.to,
        local: None,
        ifname: None,
        stream: job.stream,
        total_bytes: job.bytes_per_flow,
        write_size: job.write_size,
        timeout: Some(CONNECT_WINDOW),
        corrupt_offset: None,
    };
    let flows = job.send_flows();
    let before = ProcStat::read();
    let start = Instant::now();
    let (stats, result) = tx::send_flows_until(&req, &flows, stop, deadline);
    let wall = start.elapsed();
    let cpu = cpu_between(before, ProcStat::read());
    let bytes: u64 = stats.iter().map(|s| s.bytes).sum();
    let elapsed = stats
        .iter()
        .map(|s| s.elapsed)
        .max()
        .filter(|d| !d.is_zero())
        .unwrap_or(wall);
    PeerFigures {
        bytes,
        elapsed_s: elapsed.as_secs_f64(),
        gbit_per_s: crate::stats::gbit_per_s(bytes, elapsed),
        flow_bytes: stats.iter().map(|s| s.bytes).collect(),
        cpu,
        error: result.err().map(|e| e.to_string()),
    }
}

/// The checks of a `send` request against the peer's limits, and the job it becomes.
///
/// Errors: the `refused` message's text.
#[allow(clippy::too_many_arguments)] // the members of a `send` message, one each
pub(crate) fn plan_job(
    from: IpAddr,
    limits: &Limits,
    port: u16,
    flows: u32,
    duration_s: f64,
    stream: Stream,
    write_size: Option<u64>,
    tcp_cc: Option<String>,
    devmem_tx: bool,
) -> std::result::Result<SendJob, String> {
    if devmem_tx && !limits.devmem_tx {
        return Err(
            "devmem TX asked, but this peer was started without -f IF: it sends over \
                    plain TCP only (start it as --peer-server -f IF to serve devmem TX)"
                .into(),
        );
    }
    if port == 0 {
        return Err("port 0 is not a receiver's port".into());
    }
    if !(1..=crate::cli::MAX_FLOWS).contains(&flows) {
        return Err(format!(
            "flows {flows} (expected 1..={})",
            crate::cli::MAX_FLOWS
        ));
    }
    if !(duration_s.is_finite() && duration_s > 0.0) {
        return Err(format!(
            "duration_s {duration_s} (expected a positive number of seconds)"
        ));
    }
    let stream = match stream {
        Stream::Seed(seed) => StreamSpec::keyed(seed),
        Stream::Period(p) if (2..=crate::cli::VALIDATE_MAX).contains(&p) => StreamSpec::Periodic(p),
        Stream::Period(p) => {
            return Err(format!(
                "period {p} (expected 2..={})",
                crate::cli::VALIDATE_MAX
            ))
        }
    };
    let write_size = match write_size {
        None => None,
        Some(w) if (1..=crate::cli::MAX_WRITE_SIZE).contains(&w) => Some(w as usize),
        Some(w) => {
            return Err(format!(
                "write_size {w} (expected 1..={})",
                crate::cli::MAX_WRITE_SIZE
            ))
        }
    };
    if let Some(cc) = &tcp_cc {
        crate::modes::check_tcp_cc_name(cc).map_err(|e| e.to_string())?;
    }
    let ip = match from {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let duration = Duration::try_from_secs_f64(duration_s)
        .unwrap_or(limits.max_duration)
        .min(limits.max_duration);
    Ok(SendJob {
        to: SocketAddrV6::new(ip, port, 0, 0),
        flows,
        duration,
        bytes_per_flow: (limits.max_bytes / u64::from(flows)).max(1),
        stream,
        write_size,
        tcp_cc,
        devmem_tx,
    })
}

/// One client's session over `conn` (the client at `from`): `hello` → `welcome`, then `send`
/// → `started`, the send, `done` for each run until `bye`. `send` carries out a job (the real
/// sender, or a test's); `note` logs a line. A bad or unexpected message is answered with an
/// `error` and ends the session. The reads wait as `waits` says ([`Conn::recv_patiently`];
/// `conn`'s stream has a short read timeout) and give up once `stopping` says so (a stop
/// signal); a request that comes then is refused, and the session ends after the run being
/// sent, so the client's sweep stops.
///
/// Errors: what ended the session other than `bye` (a client silent or too slow is
/// [`ProtoError::Timeout`] or [`ProtoError::SlowLine`], a stop [`ProtoError::Stopped`]); `Ok`
/// has the number of runs served.
pub(crate) fn session<S: Read + Write>(
    conn: &mut Conn<S>,
    from: IpAddr,
    limits: &Limits,
    waits: &Waits,
    send: &mut dyn FnMut(&SendJob) -> PeerFigures,
    stopping: &dyn Fn() -> bool,
    note: &mut dyn FnMut(&str),
) -> std::result::Result<u32, ProtoError> {
    let fail = |conn: &mut Conn<S>, e: ProtoError| {
        if let Some(answer) = e.answer() {
            let _ = conn.send(&answer);
        }
        Err(e)
    };
    let first = Patience {
        idle: waits.hello,
        line: waits.line,
    };
    let next = Patience {
        idle: waits.idle,
        line: waits.line,
    };
    match conn.recv_patiently(first, stopping) {
        Ok(Msg::Hello { tool, version }) => note(&format!(
            "hello from {} {}",
            super::proto::printable(&tool),
            super::proto::printable(&version)
        )),
        Ok(other) => {
            let e = ProtoError::Unexpected {
                expected: "hello".into(),
                got: other.kind().into(),
            };
            return fail(conn, e);
        }
        Err(e) => return fail(conn, e),
    }
    conn.send(&Msg::Welcome {
        tool: PROGRAM.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        max_duration_s: limits.max_duration.as_secs_f64(),
        max_bytes: limits.max_bytes,
    })?;
    let mut runs = 0u32;
    loop {
        let msg = match conn.recv_patiently(next, stopping) {
            Ok(m) => m,
            Err(e) => return fail(conn, e),
        };
        let (run, job) = match msg {
            Msg::Bye {} => return Ok(runs),
            Msg::About {} => {
                conn.send(&Msg::Host {
                    host: Box::new(describe()),
                })?;
                continue;
            }
            Msg::Send {
                run,
                port,
                flows,
                duration_s,
                stream,
                write_size,
                tcp_cc,
                devmem_tx,
            } => {
                if Some(run) != runs.checked_add(1) {
                    let e = ProtoError::Unexpected {
                        expected: format!("send for run {}", u64::from(runs) + 1),
                        got: format!("send for run {run}"),
                    };
                    return fail(conn, e);
                }
                let job = plan_job(
                    from, limits, port, flows, duration_s, stream, write_size, tcp_cc, devmem_tx,
                );
                (run, job)
            }
            other => {
                let e = ProtoError::Unexpected {
                    expected: "send or bye".into(),
                    got: other.kind().into(),
                };
                return fail(conn, e);
            }
        };
        runs = run;
        if stopping() {
            conn.send(&Msg::error(
                ErrorCode::Refused,
                format!("run {run}: the peer server is stopping (a stop signal)"),
            ))?;
            note(&format!("run {run} refused: stopping"));
            return Ok(runs - 1);
        }
        let job = match job {
            Ok(j) => j,
            Err(why) => {
                note(&format!("run {run} refused: {why}"));
                conn.send(&Msg::error(ErrorCode::Refused, format!("run {run}: {why}")))?;
                continue;
            }
        };
        conn.send(&Msg::Started {
            run,
            duration_s: job.duration.as_secs_f64(),
            bytes_per_flow: job.bytes_per_flow,
        })?;
        note(&format!(
            "run {run}: sending {} to {} for at most {:.1} s",
            crate::figures::count(job.flows, "flow"),
            job.to,
            job.duration.as_secs_f64()
        ));
        let figures = send(&job);
        note(&format!(
            "run {run}: sent {} bytes in {:.3} s, {:.3} Gbit/s{}",
            figures.bytes,
            figures.elapsed_s,
            figures.gbit_per_s,
            figures
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
        conn.send(&Msg::Done { run, figures })?;
        if stopping() {
            note("stopping: the session ends");
            return Ok(runs);
        }
    }
}

/// How a sweep talks to its peer: the client side of [`session`].
#[derive(Debug)]
pub(crate) struct PeerClient {
    conn: Conn<TcpStream>,
    /// The peer as messages name it, `[addr]:port`.
    pub name: String,
    /// The peer's limits from its `welcome`.
    pub limits: Limits,
    next_run: u32,
}

/// How long a sweep keeps asking a peer that answers `busy` before it gives up: the client
/// before it may have just left, and the peer ends that session within a control tick of the
/// close, later on a loaded host (back-to-back sweeps met it; tests/vm/FLAKES.md).
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// How long the sweep waits for the peer's `welcome` and `started`.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The read tick of a client's wait for the peer's answer: a stop signal ends the wait
/// within one.
const ANSWER_TICK: Duration = Duration::from_millis(100);

impl PeerClient {
    /// Connects to the peer at `peer` from `local` (port 0: the address the peer will send
    /// to), says hello and takes its limits.
    ///
    /// A peer that answers `busy` is asked again every 50 ms for [`BUSY_WAIT`].
    ///
    /// Errors: [`Error::Failure`] naming the peer: connect, a refusal (busy for
    /// [`BUSY_WAIT`], or another), an answer that is not a `welcome`;
    /// [`Error::Interrupted`] on a stop signal.
    pub(crate) fn connect(peer: SocketAddrV6, local: Option<SocketAddrV6>) -> Result<PeerClient> {
        let deadline = Instant::now() + BUSY_WAIT;
        loop {
            match Self::connect_once(peer, local) {
                Err((true, _)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                    crate::signals::check_flag(&STOP)?;
                }
                Err((_, e)) => return Err(e),
                Ok(c) => return Ok(c),
            }
        }
    }

    /// One try of [`PeerClient::connect`]; the error says whether it was a `busy` refusal.
    fn connect_once(
        peer: SocketAddrV6,
        local: Option<SocketAddrV6>,
    ) -> std::result::Result<PeerClient, (bool, Error)> {
        let name = format!("[{}]:{}", peer.ip().to_canonical(), peer.port());
        let failed = |what: String| Error::Failure(format!("--peer {name}: {what}"));
        let other = |e: Error| (false, e);
        let fd = crate::conn::connect_timeout(peer, local, None, Some(ANSWER_WAIT))
            .map_err(|e| other(failed(format!("connect: {e}"))))?;
        let stream = TcpStream::from(fd);
        stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| other(failed(e.to_string())))?;
        let mut conn = Conn::new(stream);
        let hello = Msg::Hello {
            tool: PROGRAM.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        };
        conn.send(&hello)
            .map_err(|e| other(failed(e.to_string())))?;
        let mut client = PeerClient {
            conn,
            name: name.clone(),
            limits: Limits {
                max_duration: Duration::ZERO,
                max_bytes: 0,
                devmem_tx: false,
            },
            next_run: 1,
        };
        let welcome = match client.recv_answer(ANSWER_WAIT) {
            Ok(m) => m,
            Err(e) => {
                let busy = match &e {
                    ProtoError::Refused { code, .. } => code == ErrorCode::Busy.name(),
                    _ => false,
                };
                return Err((busy, client.failed_answer("welcome", e)));
            }
        };
        match welcome {
            Msg::Welcome {
                max_duration_s,
                max_bytes,
                ..
            } => {
                // Limits a peer cannot have: its runs would send nothing, or for no time the
                // sweep could wait for.
                let max_duration = Duration::try_from_secs_f64(max_duration_s)
                    .ok()
                    .filter(|d| !d.is_zero());
                let (Some(max_duration), 1..) = (max_duration, max_bytes) else {
                    return Err(other(failed(format!(
                        "its welcome's limits are not possible: max_duration_s \
                         {max_duration_s}, max_bytes {max_bytes} (expected more than 0 of each)"
                    ))));
                };
                client.limits = Limits {
                    max_duration,
                    max_bytes,
                    devmem_tx: false,
                };
                Ok(client)
            }
            got => Err((false, client.unexpected("welcome", &got))),
        }
    }

    /// The next message, an `error` taken as the peer's refusal; errors as
    /// [`PeerClient::failed_answer`] makes them.
    fn answer(&mut self, wait: Duration, expected: &str) -> Result<Msg> {
        self.recv_answer(wait)
            .map_err(|e| self.failed_answer(expected, e))
    }

    /// The next message within `wait` (a stop signal ends the wait within [`ANSWER_TICK`]).
    ///
    /// Errors: an `error` message as [`ProtoError::Refused`] with its code; as
    /// [`Conn::recv_patiently`].
    fn recv_answer(&mut self, wait: Duration) -> std::result::Result<Msg, ProtoError> {
        // Read in ticks, so that a stop signal ends the wait within one (the handlers do not
        // restart reads, but a signal that comes between two reads would wait for the whole
        // of `wait`).
        let tick = ANSWER_TICK.min(wait).max(Duration::from_millis(1));
        let _ = self.conn.stream().set_read_timeout(Some(tick));
        let stopping = || STOP.load(Ordering::SeqCst) != 0;
        let patience = Patience {
            idle: wait,
            line: wait,
        };
        match self.conn.recv_patiently(patience, &stopping)? {
            Msg::Error { code, message } => Err(ProtoError::Refused { code, message }),
            other => Ok(other),
        }
    }

    /// The error of a wait for `expected` that failed with `e`
    /// ([`PeerClient::recv_answer`]): [`Error::Interrupted`] on a stop signal, else
    /// [`Error::Failure`] naming the peer (after answering the peer when `e` calls for it).
    fn failed_answer(&mut self, expected: &str, e: ProtoError) -> Error {
        if matches!(e, ProtoError::Stopped) {
            return Error::Interrupted(STOP.load(Ordering::SeqCst));
        }
        if let Some(answer) = e.answer() {
            let _ = self.conn.send(&answer);
        }
        Error::Failure(format!("--peer {}: waiting for {expected}: {e}", self.name))
    }

    fn unexpected(&mut self, expected: &str, got: &Msg) -> Error {
        let e = ProtoError::Unexpected {
            expected: expected.into(),
            got: got.kind().into(),
        };
        if let Some(answer) = e.answer() {
            let _ = self.conn.send(&answer);
        }
        Error::Failure(format!("--peer {}: {e}", self.name))
    }

    /// Asks for the next run's traffic (`send`, then its `started`): `flows` flows of
    /// `stream` to `port` for `duration`, in writes (pieces) of `write_size`, over plain TCP
    /// or (`devmem_tx`) through the peer's devmem TX. Returns the run's number and the duration the
    /// peer will send for (after its limit).
    ///
    /// Errors: [`Error::Failure`] naming the peer: a refusal, another answer, the connection.
    #[allow(clippy::too_many_arguments)] // the members of a `send` message, one each
    pub(crate) fn start(
        &mut self,
        port: u16,
        flows: u32,
        duration: Duration,
        stream: Stream,
        write_size: Option<u64>,
        tcp_cc: Option<String>,
        devmem_tx: bool,
    ) -> Result<(u32, Duration)> {
        let run = self.next_run;
        self.next_run += 1;
        let msg = Msg::Send {
            run,
            port,
            flows,
            duration_s: duration.as_secs_f64(),
            stream,
            write_size,
            tcp_cc,
            devmem_tx,
        };
        self.conn
            .send(&msg)
            .map_err(|e| Error::Failure(format!("--peer {}: {e}", self.name)))?;
        match self.answer(ANSWER_WAIT, "started")? {
            Msg::Started {
                run: r, duration_s, ..
            } if r == run => Ok((
                run,
                Duration::try_from_secs_f64(duration_s).unwrap_or(Duration::ZERO),
            )),
            other => Err(self.unexpected(&format!("started for run {run}"), &other)),
        }
    }

    /// Waits up to `wait` for run `run`'s `done`.
    ///
    /// Errors: [`Error::Failure`] naming the peer.
    pub(crate) fn done(&mut self, run: u32, wait: Duration) -> Result<PeerFigures> {
        match self.answer(wait, "done")? {
            Msg::Done { run: r, figures } if r == run => Ok(figures),
            other => Err(self.unexpected(&format!("done for run {run}"), &other)),
        }
    }

    /// Asks the peer to describe its host (`about`, answered by `host`).
    ///
    /// Errors: [`Error::Failure`] naming the peer: a peer that predates `about` answers an
    /// `error` (malformed: an unknown kind) and ends the session, which the caller then opens
    /// again.
    pub(crate) fn about(&mut self) -> Result<crate::summary::sweep::Provenance> {
        self.conn
            .send(&Msg::About {})
            .map_err(|e| Error::Failure(format!("--peer {}: {e}", self.name)))?;
        match self.answer(ANSWER_WAIT, "host")? {
            Msg::Host { host } => Ok(*host),
            other => Err(self.unexpected("host", &other)),
        }
    }

    /// Says `bye` (the peer then takes its next client).
    pub(crate) fn bye(mut self) {
        let _ = self.conn.send(&Msg::Bye {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::proto;
    use crate::lab::proto::tests::Pipe;

    /// A `welcome` whose limits no peer can have (no time, or no byte, to send in) ends the
    /// connect, naming them; a fractional limit is kept as it came.
    #[test]
    fn a_welcome_with_impossible_limits_is_refused() {
        use std::io::BufRead;
        let welcome = |limits: &'static str| {
            let listener = std::net::TcpListener::bind("[::1]:0").expect("bind [::1]:0");
            let std::net::SocketAddr::V6(addr) = listener.local_addr().expect("its address") else {
                unreachable!("bound to ::1")
            };
            let peer = std::thread::spawn(move || {
                let (c, _) = listener.accept().expect("accept");
                let mut hello = String::new();
                let _ =
                    std::io::BufReader::new(c.try_clone().expect("clone")).read_line(&mut hello);
                let line = format!(
                    "{{\"v\":1,\"type\":\"welcome\",\"tool\":\"ncdevmem-rs\",\
                     \"version\":\"0.1.0\",{limits}}}\n"
                );
                let _ = (&c).write_all(line.as_bytes());
                c
            });
            let got = PeerClient::connect(addr, None);
            drop(peer.join());
            got
        };
        for (limits, named) in [
            (
                r#""max_duration_s":-1.0,"max_bytes":1000"#,
                "max_duration_s -1,",
            ),
            (
                r#""max_duration_s":0.0,"max_bytes":1000"#,
                "max_duration_s 0,",
            ),
            (r#""max_duration_s":600.0,"max_bytes":0"#, "max_bytes 0 "),
        ] {
            let e = welcome(limits).expect_err(limits).to_string();
            assert!(
                e.contains("its welcome's limits are not possible") && e.contains(named),
                "{limits}: {e}"
            );
        }
        let c = welcome(r#""max_duration_s":0.5,"max_bytes":1000"#).expect("a possible welcome");
        assert_eq!(c.limits.max_duration, Duration::from_millis(500));
        assert_eq!(c.limits.max_bytes, 1000);
    }

    /// A peer still ending the session of the client before (back to back sweeps) answers
    /// `busy`: the sweep asks again, and is welcomed once that session is over; another
    /// refusal is not asked again.
    #[test]
    fn a_busy_peer_is_asked_again_until_it_is_free() {
        use std::io::BufRead;
        let peer = |answers: Vec<&'static str>| {
            let listener = std::net::TcpListener::bind("[::1]:0").expect("bind [::1]:0");
            let std::net::SocketAddr::V6(addr) = listener.local_addr().expect("its address") else {
                unreachable!("bound to ::1")
            };
            let served = std::thread::spawn(move || {
                let mut n = 0;
                for line in answers {
                    let (c, _) = listener.accept().expect("accept");
                    let mut hello = String::new();
                    let _ = std::io::BufReader::new(c.try_clone().expect("clone"))
                        .read_line(&mut hello);
                    let _ = (&c).write_all(line.as_bytes());
                    n += 1;
                }
                n
            });
            (addr, served)
        };
        let busy = r#"{"v":1,"type":"error","code":"busy","message":"another sweep"}
"#;
        let welcome = r#"{"v":1,"type":"welcome","tool":"ncdevmem-rs","version":"0.1.0","max_duration_s":5.0,"max_bytes":1000}
"#;
        let (addr, served) = peer(vec![busy, busy, welcome]);
        let c = PeerClient::connect(addr, None).expect("welcomed after two busy answers");
        assert_eq!(c.limits.max_bytes, 1000);
        assert_eq!(served.join().expect("the peer"), 3);

        let limit = r#"{"v":1,"type":"error","code":"version","message":"v2 only"}
"#;
        let (addr, served) = peer(vec![limit]);
        let e = PeerClient::connect(addr, None).expect_err("another refusal is final");
        assert!(e.to_string().contains("refused (version)"), "{e}");
        assert_eq!(served.join().expect("the peer"), 1);
    }

    /// What the test sender reports of every job.
    fn figures() -> PeerFigures {
        PeerFigures {
            bytes: 10,
            elapsed_s: 1.0,
            gbit_per_s: 0.5,
            flow_bytes: vec![5, 5],
            cpu: None,
            error: None,
        }
    }

    const LIMITS: Limits = Limits {
        max_duration: Duration::from_secs(5),
        max_bytes: 1000,
        devmem_tx: false,
    };

    fn from() -> IpAddr {
        "198.51.100.2".parse().unwrap()
    }

    fn hello() -> String {
        proto::encode(&Msg::Hello {
            tool: "test".into(),
            version: "1".into(),
        })
    }

    fn send_line(run: u32, duration_s: f64) -> String {
        proto::encode(&Msg::Send {
            run,
            port: 4242,
            flows: 2,
            duration_s,
            stream: Stream::Seed(7),
            write_size: None,
            tcp_cc: None,
            devmem_tx: false,
        })
    }

    /// Runs a session over `lines`; returns its result, the peer's answers and the jobs.
    fn serve(lines: &[String]) -> (std::result::Result<u32, ProtoError>, Vec<Msg>, Vec<SendJob>) {
        let mut conn = Conn::new(Pipe::new(lines.concat().as_bytes(), 4096));
        let mut jobs = Vec::new();
        let mut send = |job: &SendJob| {
            jobs.push(job.clone());
            figures()
        };
        let r = session(
            &mut conn,
            from(),
            &LIMITS,
            &WAITS,
            &mut send,
            &|| false,
            &mut |_| {},
        );
        let out = String::from_utf8(conn.stream().out.clone()).unwrap();
        let answers = out
            .lines()
            .map(|l| proto::decode(l.as_bytes()).unwrap())
            .collect();
        (r, answers, jobs)
    }

    fn code(m: &Msg) -> &str {
        match m {
            Msg::Error { code, .. } => code,
            other => other.kind(),
        }
    }

    /// A whole sweep of two runs: the traffic goes to the client's own address, bounded by
    /// the peer's limits whatever was asked.
    #[test]
    fn a_session_serves_runs_to_the_clients_own_address_within_the_limits() {
        let lines = [
            hello(),
            send_line(1, 2.0),
            send_line(2, 3600.0),
            proto::encode(&Msg::Bye {}),
        ];
        let (r, answers, jobs) = serve(&lines);
        assert_eq!(r, Ok(2));
        let kinds: Vec<&str> = answers.iter().map(code).collect();
        assert_eq!(kinds, ["welcome", "started", "done", "started", "done"]);
        assert_eq!(jobs.len(), 2);
        let to: SocketAddrV6 = "[::ffff:198.51.100.2]:4242".parse().unwrap();
        assert!(jobs.iter().all(|j| j.to == to));
        assert_eq!(jobs[0].duration, Duration::from_secs(2));
        assert_eq!(
            jobs[1].duration, LIMITS.max_duration,
            "capped by --max-duration"
        );
        assert_eq!(
            jobs[1].bytes_per_flow, 500,
            "--max-bytes over the two flows"
        );
        assert!(matches!(answers[3], Msg::Started { run: 2, duration_s, .. } if duration_s == 5.0));
    }

    /// Out-of-order, malformed and oversized messages get an error answer of their code
    /// and end the session; nothing is sent.
    /// `about` between runs is answered with the peer's `host` and the session goes on.
    #[test]
    fn about_is_answered_with_the_host() {
        let lines = [
            hello(),
            proto::encode(&Msg::About {}),
            send_line(1, 1.0),
            proto::encode(&Msg::About {}),
            proto::encode(&Msg::Bye {}),
        ];
        let (r, answers, jobs) = serve(&lines);
        assert_eq!(r, Ok(1));
        assert_eq!(jobs.len(), 1);
        let kinds: Vec<&str> = answers.iter().map(Msg::kind).collect();
        assert_eq!(kinds, ["welcome", "host", "started", "done", "host"]);
        let Msg::Host { host } = &answers[1] else {
            panic!("{answers:?}");
        };
        assert_eq!(host.version, crate::VERSION);
        assert!(host.kernel_release.is_some());
    }

    #[test]
    fn bad_messages_end_the_session_with_an_error_answer() {
        let cases: Vec<(Vec<String>, &str)> = vec![
            (vec![send_line(1, 1.0)], "order"),
            (vec![hello(), hello()], "order"),
            (vec![hello(), send_line(2, 1.0)], "order"),
            (vec![hello(), send_line(1, 1.0), send_line(1, 1.0)], "order"),
            (vec!["{\"v\":1,\"type\":\"hello\"}\n".into()], "malformed"),
            (vec!["garbage\n".into()], "malformed"),
            (
                vec!["{\"v\":7,\"type\":\"hello\",\"tool\":\"x\",\"version\":\"y\"}\n".into()],
                "version",
            ),
            (vec![hello(), "x".repeat(proto::MAX_LINE + 1)], "oversized"),
            (
                vec![
                    hello(),
                    proto::encode(&Msg::Done {
                        run: 1,
                        figures: figures(),
                    }),
                ],
                "order",
            ),
        ];
        for (lines, want) in cases {
            let (r, answers, jobs) = serve(&lines);
            assert!(r.is_err(), "{lines:?}");
            assert_eq!(
                answers.last().map(code),
                Some(want),
                "{lines:?}: {answers:?}"
            );
            assert!(jobs.len() <= 1, "{lines:?}");
        }
        // A client that hangs up is not answered.
        let (r, answers, _) = serve(&[hello()]);
        assert_eq!(r, Err(ProtoError::Closed(None)));
        assert_eq!(answers.len(), 1);
    }

    /// Requests outside the peer's abilities are refused one by one; the session goes on.
    #[test]
    fn requests_outside_the_limits_are_refused_and_the_session_goes_on() {
        let bad = |f: &dyn Fn(&mut Msg)| {
            let mut m = proto::decode(send_line(1, 1.0).as_bytes()).unwrap();
            f(&mut m);
            proto::encode(&m)
        };
        let set = |field: &'static str, v: serde_json::Value| {
            move |m: &mut Msg| {
                let mut j = serde_json::to_value(&*m).unwrap();
                j[field] = v.clone();
                *m = serde_json::from_value(j).unwrap();
            }
        };
        for (line, why) in [
            (bad(&set("devmem_tx", true.into())), "plain TCP only"),
            (bad(&set("flows", 0.into())), "flows 0"),
            (bad(&set("flows", 65.into())), "flows 65"),
            (bad(&set("duration_s", 0.0.into())), "duration_s 0"),
            (bad(&set("duration_s", (-1.0).into())), "duration_s -1"),
            (bad(&set("port", 0.into())), "port 0"),
            (
                bad(&set("stream", serde_json::json!({"period": 1}))),
                "period 1",
            ),
            (bad(&set("write_size", (1u64 << 40).into())), "write_size"),
        ] {
            let (r, answers, jobs) = serve(&[
                hello(),
                line.clone(),
                send_line(2, 1.0),
                proto::encode(&Msg::Bye {}),
            ]);
            assert_eq!(r, Ok(2), "{line}");
            assert!(
                matches!(&answers[1], Msg::Error { code, message } if code == "refused" && message.contains(why)),
                "{line}: {answers:?}"
            );
            assert_eq!(jobs.len(), 1, "only the good run is sent");
        }
    }

    /// A run asking for devmem TX: a peer started with `-f` takes it (the job says devmem,
    /// the write size passes through, the traffic still goes only to the client's address);
    /// a peer without `-f` refuses that run naming why and serves the next one.
    #[test]
    fn devmem_runs_are_served_only_by_a_peer_with_its_own_nic() {
        let devmem_line = |run: u32| {
            proto::encode(&Msg::Send {
                run,
                port: 5201,
                flows: 4,
                duration_s: 2.0,
                stream: Stream::Seed(9),
                write_size: Some(65536),
                tcp_cc: None,
                devmem_tx: true,
            })
        };
        let lines = [
            hello(),
            devmem_line(1),
            send_line(2, 1.0),
            proto::encode(&Msg::Bye {}),
        ];
        for devmem_tx in [true, false] {
            let limits = Limits {
                devmem_tx,
                ..LIMITS
            };
            let mut conn = Conn::new(Pipe::new(lines.concat().as_bytes(), 4096));
            let mut jobs = Vec::new();
            let mut send = |job: &SendJob| {
                jobs.push(job.clone());
                figures()
            };
            let r = session(
                &mut conn,
                from(),
                &limits,
                &WAITS,
                &mut send,
                &|| false,
                &mut |_| {},
            );
            assert_eq!(r, Ok(2), "devmem_tx {devmem_tx}");
            let out = String::from_utf8(conn.stream().out.clone()).unwrap();
            let answers: Vec<Msg> = out
                .lines()
                .map(|l| proto::decode(l.as_bytes()).unwrap())
                .collect();
            let to: SocketAddrV6 = "[::ffff:198.51.100.2]:5201".parse().unwrap();
            if devmem_tx {
                let kinds: Vec<&str> = answers.iter().map(code).collect();
                assert_eq!(kinds, ["welcome", "started", "done", "started", "done"]);
                assert_eq!(jobs.len(), 2);
                assert!(jobs[0].devmem_tx && !jobs[1].devmem_tx);
                assert_eq!(jobs[0].write_size, Some(65536));
                assert_eq!(jobs[0].to, to);
                assert_eq!(jobs[0].bytes_per_flow, 250, "--max-bytes over the 4 flows");
            } else {
                assert!(
                    matches!(&answers[1], Msg::Error { code, message }
                        if code == "refused" && message.contains("run 1")
                            && message.contains("without -f IF")),
                    "{answers:?}"
                );
                assert_eq!(jobs.len(), 1, "only the plain run is sent");
                assert!(!jobs[0].devmem_tx);
            }
        }
    }

    /// A peer that is stopping refuses the next run and ends the session: the client's sweep
    /// stops instead of getting empty runs.
    /// (A stop that comes while a request is being read, or before any: the session's reads
    /// give up at once, answering `refused`.)
    #[test]
    fn a_stopping_peer_refuses_the_next_run() {
        let lines = [hello(), send_line(1, 1.0), proto::encode(&Msg::Bye {})].concat();
        // The stop from the first look (before hello), or from the second (the request
        // already read).
        for (stop_from, want) in [(0, Err(ProtoError::Stopped)), (1, Ok(0))] {
            let mut conn = Conn::new(Pipe::new(lines.as_bytes(), 4096));
            let mut sent = 0;
            let mut send = |_: &SendJob| {
                sent += 1;
                figures()
            };
            let looks = std::cell::Cell::new(0);
            let stopping = || {
                looks.set(looks.get() + 1);
                looks.get() > stop_from
            };
            let r = session(
                &mut conn,
                from(),
                &LIMITS,
                &WAITS,
                &mut send,
                &stopping,
                &mut |_| {},
            );
            assert_eq!(r, want);
            let out = String::from_utf8(conn.stream().out.clone()).unwrap();
            let last = out
                .lines()
                .last()
                .map(|l| proto::decode(l.as_bytes()).unwrap());
            assert!(
                matches!(last, Some(Msg::Error { code, message }) if code == "refused" && message.contains("stopping")),
                "{out}"
            );
            assert_eq!(sent, 0);
        }
    }

    /// What a client sends reaches the peer's log with its control characters escaped: a
    /// `hello` naming itself with a screen clear and a newline, or a member name holding an
    /// escape sequence, can neither clear the operator's terminal nor forge a log line.
    #[test]
    fn a_clients_control_characters_never_reach_the_log_raw() {
        let hostile_hello = proto::encode(&Msg::Hello {
            tool: "\u{1b}[2J\npeer server: client 10.0.0.9 done".into(),
            version: "\0".into(),
        });
        let hostile_member = "{\"v\":1,\"type\":\"bye\",\"\\u001b[31m\":1}\n".to_string();
        let mut notes = Vec::new();
        let lines = [hostile_hello, hostile_member].concat();
        let mut conn = Conn::new(Pipe::new(lines.as_bytes(), 4096));
        let r = session(
            &mut conn,
            from(),
            &LIMITS,
            &WAITS,
            &mut |_| figures(),
            &|| false,
            &mut |l| notes.push(l.to_string()),
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("\\u{1b}[31m"), "{e}");
        notes.push(e);
        for n in &notes {
            assert!(!n.chars().any(char::is_control), "{n:?}");
        }
        assert!(
            notes[0].contains("\\u{1b}[2J\\u{a}peer server"),
            "{notes:?}"
        );
        let refused = ProtoError::Refused {
            code: "x\ny".into(),
            message: "\u{1b}]0;title\u{7}".into(),
        };
        assert_eq!(
            refused.to_string(),
            "refused (x\\u{a}y): \\u{1b}]0;title\\u{7}"
        );
    }
}
