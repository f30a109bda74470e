//! Several flows at once — `--flows N`, `--duration`, `--warmup`, `--cpus`, `--progress` — for
//! the devmem server and the plain receiver: the N connections of one listener, each received
//! by its own worker thread (the receive loop of a single flow, unchanged, releasing its own
//! tokens), all sharing one binding, for a fixed time or until the peers close; and the figures
//! of the run, the way the field measures them:
//!
//! - per flow: bytes, Gbit/s over the measured interval, frags, tokens, `SO_DEVMEM_DONTNEED`
//!   and `recvmsg` calls, the RX queue it arrived on (`SO_INCOMING_NAPI_ID` and the queue-get
//!   dump), `TCP_INFO`, a histogram of frag sizes, and its worker's own user/system time
//!   (`getrusage(RUSAGE_THREAD)`);
//! - per CPU, from `/proc/stat` over the measured interval: usr, sys, irq, softirq, idle % for
//!   the app CPUs (where the workers ran) and for all CPUs ("app sys %", "app idle %");
//! - device RX Gbit/s from the netdev family's `qstats-get` (the bound queues' rx-bytes over
//!   the measured interval), or why there is none.
//!
//! The measured interval starts after `--warmup` (everything received is validated, the
//! figures leave it out, as `iperf3 -O`) and ends with `--duration` or when the last flow
//! ended. The workers stop together: at the end of the duration (a clean end: every flow is
//! closed, the peers see it), when any flow fails (the others stop within one poll tick;
//! every flow's figures are still reported), or on a stop signal.
//!
//! Flow k is the k-th connection accepted (0-based); with `--seed` it is the connection whose
//! first 8 bytes are word 0 of flow k's keyed stream (`crate::validate::identify_flow`:
//! handshakes on different queues can complete out of order), and bytes of another flow later
//! in it fail the run naming that flow.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::summary;

use super::{log, peer_text, Accepted};
use crate::cli::Receive;
use crate::error::{Error, Result};
use crate::figures::cpu::{format_cpu_list, CpuShares, ProcStat, APP_IDLE, APP_SYS};
use crate::figures::device::{
    arrival_queue, device_rx, unreached_queues, unreached_words, ArrivalQueue, DeviceRx, NoQstats,
    Qstats,
};
use crate::figures::hist::FragSizeHistogram;
use crate::figures::page_pool::{self, NoPoolStats, PoolReading, QueuePools};
use crate::figures::softirq;
use crate::netlink::netdev::{Netdev, QstatsScope};
use crate::rcvbuf::RcvbufPlan;
use crate::run_report::RunReport;
use crate::rx::{self, RecvOutcome, RxConfig, RxSocket};
use crate::signals::STOP;
use crate::stats::{gbit_per_s, CpuTime, RcvbufReport, RxStats};
use crate::sys::socket::{self, TcpRxSocket};
use crate::sys::tcp::TcpInfo;
use crate::sys::uapi::dmabuf_token;
use crate::udmabuf::FragMemory;

use crate::engine::{self, Live, Mark, Shared};
use crate::verdict::{ConnFacts, Ended, ReceiveFacts, Spread, DURATION_OVER};

/// Whether a receive of `rx` is measured: several flows, or a measurement's options
/// (`--duration`, `--warmup`, `--cpus`, `--require-spread`). A measured run reports its flows,
/// the CPUs and the device and its progress comes from the engine's supervisor; one that is
/// not reports the one summary line ncdevmem.c does. Both run through the one flow engine.
pub(crate) fn measured(rx: &Receive) -> bool {
    let f = &rx.flows;
    f.count > 1
        || f.duration.is_some()
        || f.warmup.is_some()
        || f.cpus.is_some()
        || rx.require_spread
}

/// The checks of a multi-flow receive that need no NIC change: several flows validate (their
/// payload cannot all go to stdout), and `--cpus` names only CPUs this process may run on.
///
/// Errors: [`Error::Usage`].
pub(crate) fn check(rx: &Receive) -> Result<()> {
    if rx.flows.count > 1 && rx.validate.is_none() {
        return Err(Error::Usage(format!(
            "--flows {}: give -v N or --seed SEED (the payload of several flows cannot go to \
             stdout)",
            rx.flows.count
        )));
    }
    check_cpus(rx.flows.cpus.as_deref())
}

/// `--cpus` names only CPUs this process may run on (receivers and senders alike).
///
/// Errors: [`Error::Usage`] naming the CPU outside the affinity mask; `sched_getaffinity`'s.
pub(crate) fn check_cpus(cpus: Option<&[usize]>) -> Result<()> {
    if let Some(cpus) = cpus {
        let allowed = crate::sys::cpu::allowed_cpus()?;
        crate::figures::cpu::check_allowed(cpus, &allowed)
            .map_err(|why| Error::Usage(format!("--cpus: {why}")))?;
    }
    Ok(())
}

/// The receive buffer of each of the `flows` flows of a binding of `buffers` buffers of
/// `buf_size` bytes ([`crate::rcvbuf::plan`] over the flow's share of the buffers); the
/// listener's `SO_RCVBUF` is every accepted flow's.
///
/// Errors: [`Error::Usage`] when the flows' windows together cannot fit in the binding (each
/// at least [`crate::rcvbuf::MIN_RCVBUF`], doubled by the kernel): the run would stall, so it
/// does not start, and the message says by how much.
pub(crate) fn rcvbuf_plan(
    rx: &Receive,
    buffers: u64,
    buf_size: u32,
    mss: u32,
    rmem_max: Option<u64>,
) -> Result<RcvbufPlan> {
    let flows = u64::from(rx.flows.count.max(1));
    let payload = buffers.saturating_mul(u64::from(buf_size.min(mss)));
    let per_flow = rx
        .rcvbuf
        .filter(|&b| b > 0)
        .unwrap_or(crate::rcvbuf::MIN_RCVBUF);
    // The kernel doubles SO_RCVBUF; the plan keeps the window within half of what the
    // buffers hold, so each flow needs 4 × its SO_RCVBUF of payload.
    let need = per_flow.saturating_mul(4).saturating_mul(flows);
    if flows > 1 && need > payload {
        return Err(Error::Usage(format!(
            "--flows {flows}: the binding holds {buffers} buffers of {buf_size} bytes, at least \
             {payload} bytes of TCP payload at one {mss}-byte segment per buffer; {flows} \
             receive windows of SO_RCVBUF {per_flow} need {need} ({} short): raise \
             --dmabuf-size or use fewer flows",
            need - payload
        )));
    }
    let mut plan = crate::rcvbuf::plan(rx.rcvbuf, buffers / flows, buf_size, mss, rmem_max);
    if flows > 1 {
        plan.reason = format!(
            "per flow ({flows} flows share the binding): {}",
            plan.reason
        );
    }
    Ok(plan)
}

/// Accepts `rx.flows.count` connections on `listener` within `--timeout` (one deadline for
/// all of them), logging each.
///
/// Errors: `Error::Timeout` naming how many of the flows connected; accept errors;
/// `Error::Interrupted` on a stop signal.
pub(crate) fn accept(
    listener: &OwnedFd,
    rx: &Receive,
    plan: Option<&RcvbufPlan>,
    report: &RunReport,
) -> Result<Vec<Accepted>> {
    let n = rx.flows.count;
    let keyed = matches!(rx.validate, Some(crate::validate::StreamSpec::Keyed(_)));
    let deadline = rx.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut conns = Vec::with_capacity(n as usize);
    for k in 0..n {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let (fd, peer) = match crate::conn::accept_timeout(listener.as_fd(), left, &STOP) {
            Ok(c) => c,
            Err(Error::Timeout(m)) => {
                // The message names the --timeout given, not what was left of it when this
                // flow's wait began (which read "within 999 ms" for --timeout 1).
                let given = rx.timeout.unwrap_or_default().as_millis();
                let m = match socket::local_addr(listener.as_fd()) {
                    Ok(a) => format!("accept on {a}: no connection within {given} ms"),
                    Err(_) => m,
                };
                return Err(Error::Timeout(match n {
                    1 => m,
                    _ => format!("{m}: {k} of {n} flows connected within --timeout"),
                }));
            }
            Err(e) => return Err(e),
        };
        match n {
            1 => log!(report, "accepted connection from {}", peer_text(peer)),
            // Keyed streams: the flow is the one its first bytes name, known later.
            _ if keyed => log!(report, "connection {k}: accepted from {}", peer_text(peer)),
            _ => log!(
                report,
                "flow {k}: accepted connection from {}",
                peer_text(peer)
            ),
        }
        let sock = TcpRxSocket::new(fd);
        let rcvbuf = plan
            .map(|p| {
                socket::rcvbuf(sock.fd()).map(|effective| RcvbufReport {
                    set: p.bytes,
                    effective,
                    reason: p.reason.clone(),
                    requested: p.requested,
                })
            })
            .transpose()?;
        conns.push(Accepted {
            sock,
            rcvbuf,
            rcvlowat: None,
        });
    }
    Ok(conns)
}

/// Where the flows are received: the device and its bound queues, for the queue a flow
/// arrived on and the device's RX counters (`None` for the plain receiver).
pub(crate) struct Device {
    /// The interface index.
    pub ifindex: u32,
    /// The bound RX queues.
    pub queues: Vec<u32>,
}

/// A flow's socket with the live figures around it: every `recvmsg` adds its bytes, and the
/// first one after the warm-up mark notes the mark.
struct Counted<'a, S> {
    inner: &'a mut S,
    live: &'a Live,
    bytes: u64,
    mark: Option<Mark>,
}

impl<S: RxSocket> RxSocket for Counted<'_, S> {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> std::result::Result<RecvOutcome, i32> {
        if self.live.mark_due(&self.mark) {
            self.live
                .observe(self.bytes, &mut self.mark, crate::sys::cpu::thread_cpu_time);
        }
        let r = self.inner.recvmsg(data, control, devmem);
        if let Ok(o) = &r {
            self.bytes += o.bytes as u64;
            self.live.set_bytes(self.bytes);
        }
        r
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> std::result::Result<usize, i32> {
        self.inner.dontneed(tokens)
    }

    fn wait_readable(&mut self, timeout: Duration) -> std::result::Result<bool, i32> {
        self.inner.wait_readable(timeout)
    }
}

/// How many diagnoses (or mismatching bytes) of a flow the end of a run of several flows
/// prints before its count line.
const DIAGNOSTIC_LINES: usize = 3;

/// Above this share (percent) of the app CPUs' busy time taken by other tasks, the receiver
/// warns that its CPU figures are not its own ([`RunFigures::foreign_share`]).
const FOREIGN_WARN_PCT: f64 = 10.0;

/// What the pieces of a flow that differed were, for its count line: the cause said once.
fn cause_name(f: crate::validate::Fault) -> String {
    use crate::validate::Fault;
    match f {
        Fault::Stale => "stale".into(),
        Fault::Duplicate => "duplicate".into(),
        Fault::Reordered => "reordered".into(),
        Fault::Shifted => "shifted".into(),
        Fault::Misdelivered { flow } => format!("bytes of flow {flow} (misdelivered)"),
        Fault::Foreign => "bytes of no stream of this seed (wrong --seed?)".into(),
        Fault::Corrupt => "corrupt".into(),
    }
}

/// One flow's outcome, as its worker leaves it ([`Flow::ended`]).
pub(crate) struct Flow {
    stats: RxStats,
    result: Result<()>,
    rcvbuf: Option<RcvbufReport>,
    rcvlowat: Option<u32>,
    started: Instant,
    mark: Option<Mark>,
    ended: Instant,
    cpu_at_start: Option<CpuTime>,
    cpu_at_end: Option<CpuTime>,
    cpu: Option<usize>,
    napi_id: Option<u32>,
    tcp: Option<TcpInfo>,
    /// The worker that received it (its own for devmem and plain; its ifq's for zcrx).
    worker: usize,
}

/// How a worker ran one flow, for [`Flow::ended`].
pub(crate) struct Ran {
    /// The receive's counters.
    pub stats: RxStats,
    /// Its verdict as the run sees it ([`Shared::verdict`]).
    pub result: Result<()>,
    /// When the worker started on it.
    pub started: Instant,
    /// What the worker noted at the warm-up mark ([`Live::observe`]).
    pub mark: Option<Mark>,
    /// The worker's CPU time when it started.
    pub cpu_at_start: Option<CpuTime>,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Which worker (the flow's own number when each flow has one).
    pub worker: usize,
}

impl Flow {
    /// Where the flow's measured part begins: the warm-up's mark (when and at how many
    /// bytes); with a warm-up and no mark (the flow ended before it), its end with all its
    /// bytes (it measured nothing); without a warm-up, its start.
    fn measured_from(&self, warmup: bool) -> (Instant, u64) {
        match self.mark {
            Some(m) => (m.at, m.bytes),
            None if warmup => (self.ended, self.stats.bytes),
            None => (self.started, 0),
        }
    }

    /// The flow failed after its receive (its payload could not be flushed): `e` unless it
    /// had failed already.
    pub(crate) fn fail_with(&mut self, e: Error) {
        if self.result.is_ok() {
            self.result = Err(e);
        }
    }

    /// The flow `conn` as its worker ran it (`ran`): now, on the worker's thread, reads the
    /// worker's CPU time and what the kernel says of the connection (`TCP_INFO`, its NAPI
    /// id); the connection closes when `conn` is dropped here.
    pub(crate) fn ended(conn: Accepted, ran: Ran) -> Flow {
        let fd = conn.sock.fd();
        Flow {
            tcp: crate::sys::tcp::tcp_info(fd).ok(),
            napi_id: socket::incoming_napi_id(fd).ok(),
            stats: ran.stats,
            result: ran.result,
            rcvbuf: conn.rcvbuf,
            rcvlowat: conn.rcvlowat,
            started: ran.started,
            mark: ran.mark,
            ended: Instant::now(),
            cpu_at_start: ran.cpu_at_start,
            cpu_at_end: crate::sys::cpu::thread_cpu_time(),
            cpu: ran.cpu,
            worker: ran.worker,
        }
    }
}

/// A reading of the whole machine at one end of the measured interval.
struct Snapshot {
    at: Instant,
    proc_stat: Result<ProcStat>,
    /// Each CPU's NET_RX softirq count (`/proc/softirqs`), or why it could not be read.
    net_rx: std::result::Result<Vec<(usize, u64)>, String>,
    qstats: Option<Result<Qstats>>,
    /// The page pools and their counters (`page-pool-get`, `page-pool-stats-get`).
    pools: Option<Result<PoolReading>>,
}

impl Snapshot {
    fn take(device: Option<&Device>, netdev: &mut Option<Netdev>) -> Snapshot {
        let qstats = device.map(|d| read_qstats(d, netdev));
        let pools = device.map(|_| read_pools(netdev));
        Snapshot {
            at: Instant::now(),
            proc_stat: ProcStat::read(),
            net_rx: softirq::read_net_rx(Path::new(softirq::PROC_SOFTIRQS)),
            qstats,
            pools,
        }
    }

    /// A reading of `device`'s queue stats only, the others left unread: the end of a
    /// one-flow run without a measurement's options, whose summary has no CPU or page-pool
    /// figures (only its steering, [`Measure::queue_figures`]).
    fn queues_only(device: &Device, netdev: &mut Option<Netdev>) -> Snapshot {
        let unread = "not read: a one-flow run without a measurement's options";
        Snapshot {
            at: Instant::now(),
            proc_stat: Err(Error::Failure(unread.into())),
            net_rx: Err(unread.into()),
            qstats: Some(read_qstats(device, netdev)),
            pools: None,
        }
    }
}

/// `device`'s per-queue stats (`qstats-get`), or why there are none (a driver without them,
/// no netdev family): a value, never the run's error.
fn read_qstats(device: &Device, netdev: &mut Option<Netdev>) -> Result<Qstats> {
    let nd = opened(netdev)?;
    Qstats::from_dump(nd.qstats_get_dump(device.ifindex, QstatsScope::Queue))
}

/// The page pools and their counters (`page-pool-get`, `page-pool-stats-get`), or why there
/// are none: a value, never the run's error.
fn read_pools(netdev: &mut Option<Netdev>) -> Result<PoolReading> {
    let nd = opened(netdev)?;
    PoolReading::from_dumps(nd.page_pool_get_dump(), nd.page_pool_stats_get_dump())
}

/// The device's counters read before the listen of a run without a warm-up, for the
/// interval's first reading: without a warm-up every byte the flows receive is measured, and
/// a flow's bytes reach the device from its connect on, which the listen allows: before the
/// accept, the last accept and the workers' start (the built-in sender connects every flow,
/// then sends on all at once; a peer that waits for the listen sends its first window at
/// once), so device RX and the page pools' counters start before the listen. `None` with a
/// warm-up (all start at its mark) or no device. Read after the binding or the zcrx ifqs'
/// registration (a queue restart may reset a driver's counters).
pub(crate) fn device_before_listen(rx: &Receive, device: Option<&Device>) -> Option<EarlyReading> {
    let d = device.filter(|_| rx.flows.warmup.is_none())?;
    let mut netdev = None;
    let qstats = read_qstats(d, &mut netdev);
    let pools = read_pools(&mut netdev);
    Some(EarlyReading { qstats, pools })
}

/// The device's counters from before the listen ([`device_before_listen`]), which the
/// interval's first reading takes instead of its own.
pub(crate) struct EarlyReading {
    qstats: Result<Qstats>,
    pools: Result<PoolReading>,
}

/// Where a receive's reading from before the listen is until the interval's first reading
/// takes it ([`Measure::begin`]): filled before the measurement began (devmem) or after it
/// (zcrx, once its ifqs are registered).
pub(crate) type EarlySlot = std::sync::Mutex<Option<EarlyReading>>;

/// The run's netdev socket, opened at its first use.
///
/// Errors: as [`Netdev::open`] (tried again at the next use).
fn opened(netdev: &mut Option<Netdev>) -> Result<&mut Netdev> {
    match netdev {
        Some(n) => Ok(n),
        None => Ok(netdev.insert(Netdev::open()?)),
    }
}

/// A flow's worker is done with it, its receive having ended with `result` (its own: a stop
/// of the run's is none) and `stats`: a failure of its own, or mismatches, stop the others
/// (the verdict is the facts', [`crate::verdict`]) — but not the mismatches of a connection
/// whose first bytes named no flow: the others go on until theirs have named theirs, so the
/// verdict can tell which flow's stream never came.
pub(crate) fn flow_ended(shared: &Shared, result: &Result<()>, stats: &RxStats) {
    match result {
        Err(e) => shared.note_failure(e),
        Ok(()) if stats.mismatches > 0 => {
            let facts = ConnFacts::of_receive(stats, result);
            if facts.identity != crate::verdict::Identity::Unnamed {
                shared.note_failure(&Error::Failure("mismatches".into()))
            }
        }
        Ok(()) => {}
    }
}

/// The readings of a receive, taken by the engine's supervisor
/// ([`engine::Clock`]): `/proc/stat`, qstats and the page pools at both ends of the measured
/// interval, and the progress lines; [`finish`](Measure::finish) turns them and the flows into
/// the summary, the JSON object and the verdict.
pub(crate) struct Measure<'a> {
    rx: &'a Receive,
    device: Option<&'a Device>,
    queues: Vec<crate::netlink::netdev::QueueInfo>,
    netdev: Option<Netdev>,
    first: Option<Snapshot>,
    last: Option<Snapshot>,
    /// Where the device's counters read before the listen are ([`device_before_listen`]):
    /// the interval's first reading takes them instead of its own. A receive that listens
    /// after the measurement began (zcrx: once its ifqs are registered) fills it then; an
    /// empty slot leaves the first reading its own.
    early: &'a EarlySlot,
    /// `--quiet`: no progress lines.
    quiet: bool,
}

impl engine::Clock for Measure<'_> {
    fn interval_starts(&mut self) {
        let mut first = Snapshot::take(self.device, &mut self.netdev);
        let early = self.early.lock().ok().and_then(|mut slot| slot.take());
        if let Some(e) = early {
            first.qstats = Some(e.qstats);
            first.pools = Some(e.pools);
        }
        self.first = Some(first);
    }

    fn clock_ends(&mut self) {
        self.last = Some(Snapshot::take(self.device, &mut self.netdev));
    }

    fn progress(&mut self, elapsed: Duration, since: Duration, before: &[u64], now: &[u64]) {
        if !self.quiet {
            crate::elog!(
                "{}: {}",
                crate::cli::PROGRAM,
                progress_line(elapsed, since, before, now)
            );
        }
    }
}

impl<'a> Measure<'a> {
    /// The readings of a receive of `rx` on `device` (its queues read now), none taken yet;
    /// `early`, where the device's counters from before the listen are
    /// ([`device_before_listen`]) by the time the interval starts: its first reading takes
    /// them from there.
    pub(crate) fn begin(
        rx: &'a Receive,
        device: Option<&'a Device>,
        quiet: bool,
        early: &'a EarlySlot,
    ) -> Measure<'a> {
        let queues = match device {
            Some(d) => Netdev::open()
                .and_then(|mut nd| nd.queue_get_dump(d.ifindex))
                .unwrap_or_default(),
            None => Vec::new(),
        };
        Measure {
            rx,
            device,
            queues,
            netdev: None,
            first: None,
            last: None,
            early,
            quiet,
        }
    }

    /// The figures and the verdict of the run from its `flows` (in accept order) and, when a
    /// worker served several flows (zcrx: one per ifq), its `workers`: the facts of every
    /// connection go to the one verdict ([`crate::verdict::judge_receive`]), which names the
    /// flows (by the streams they carried) and fails what must fail; the flows are reported in
    /// flow order, with their diagnostics under their final numbers; prints the summary and
    /// records the JSON object and the facts in `report` (also when the run failed: every
    /// flow's figures are kept).
    ///
    /// Errors: the verdict's: the failing flows, named `flow k: …`; a stop signal.
    pub(crate) fn finish(
        mut self,
        flows: Vec<Flow>,
        workers: Vec<WorkerRecord>,
        shared: &Shared,
        report: &RunReport,
    ) -> Result<()> {
        let last = match self.last.take() {
            Some(l) => l,
            None => Snapshot::take(self.device, &mut self.netdev),
        };
        // No reading at the interval's start: the flows all ended before it began.
        let began = self.first.is_some();
        // The bytes after the warm-up mark, all flows (a flow that ended before the mark
        // brought none; without a warm-up every byte is measured).
        let measured_bytes: u64 = flows
            .iter()
            .map(|f| {
                let (_, from) = f.measured_from(self.rx.flows.warmup.is_some());
                f.stats.bytes.saturating_sub(from)
            })
            .sum();
        let first = match self.first.take() {
            Some(f) => f,
            None => Snapshot::take(self.device, &mut self.netdev),
        };
        let stop = shared.run_stop().load(Ordering::SeqCst);
        let facts = ReceiveFacts {
            flows: self.rx.flows.count.max(1),
            expect_bytes: self.rx.expect_bytes,
            ended: Ended::from_stop(stop),
            conns: flows
                .iter()
                .map(|f| ConnFacts {
                    silence: (f.stats.bytes == 0).then(|| {
                        format!(
                            "{}; {}",
                            kernel_saw(f.tcp.as_ref(), f.napi_id),
                            worker_saw(f, shared.started().unwrap_or(f.started))
                        )
                    }),
                    ..ConnFacts::of_receive(&f.stats, &f.result)
                })
                .collect(),
            whole_duration: match (report.sweep_run(), self.rx.flows.duration) {
                (true, Some(d)) => Some((
                    d.as_secs_f64(),
                    measured_interval(&flows, &first, &last).as_secs_f64(),
                )),
                _ => None,
            },
            ended_in_warmup: match (self.rx.flows.warmup, began, measured_bytes) {
                (Some(w), false, _) | (Some(w), _, 0) => Some(w.as_secs_f64()),
                _ => None,
            },
            require_spread: None,
        };
        // Which bound queues the flows reached: the bound queues' rx-bytes over the measured
        // interval, else the flows' arrival queues.
        let steering = self
            .device
            .map(|d| self.queues_reached(d, &flows, &first, &last).1);
        let facts = ReceiveFacts {
            require_spread: self.rx.require_spread.then(|| {
                steering
                    .clone()
                    .unwrap_or_else(|| Spread::Unknown("no RX queue is bound".into()))
            }),
            ..facts
        };
        let verdict = crate::verdict::judge_receive(&facts);
        let order = verdict.order();
        let flows = in_flow_order(flows, &order, report);
        let mut figures = RunFigures::new(self.rx, flows, &first, &last, self.device, &self.queues);
        figures.verdicts = verdict.flows.iter().map(|v| v.error_text()).collect();
        figures.connections = order;
        figures.clock_start = shared.started();
        figures.steering = steering;
        // No stop of the run's own (duration, failure, signal): the peers closed every flow.
        figures.ended_before_duration = self.rx.flows.duration.is_some() && stop == 0;
        // A worker's flows by their numbers in the report (stream order).
        figures.workers = workers
            .into_iter()
            .enumerate()
            .map(|(w, mut r)| {
                r.flows = (figures.flows.iter().enumerate())
                    .filter(|(_, f)| f.flow.worker == w)
                    .map(|(k, _)| k)
                    .collect();
                r
            })
            .collect();
        if figures.flows.len() > 1 {
            for line in figures.diagnostic_lines() {
                report.warn(format_args!("{line}"));
            }
        }
        report.summary(&figures.summary());
        if let Some(line) = figures.queue_line() {
            report.summary(&line);
        }
        if let (Some(line), false) = (figures.unreached_line(), self.rx.require_spread) {
            // With --require-spread the verdict says it.
            report.warn(format_args!("warning: {line}"));
        }
        for line in figures.flow_lines() {
            report.summary(&line);
        }
        for line in figures.worker_lines() {
            report.summary(&line);
        }
        report.summary(&figures.cpu_line());
        let body = figures.body();
        // A timed run: the per-CPU table, from the figures the JSON carries.
        if let (Some(_), Some(summary::CpuFigure::Split(split))) = (
            self.rx.flows.duration,
            body.measured.as_ref().map(|m| &m.cpu),
        ) {
            for line in crate::figures::cpu_table::table(split) {
                report.summary(&line);
            }
        }
        if let Some(line) = figures.foreign_warning() {
            report.log(format_args!("{line}"));
        }
        if let Some(line) = figures.page_pool_line() {
            report.summary(&line);
        }
        // A --seed flow that matched throughout hashed nothing: no CRC-32 to compare.
        let hashed = figures
            .flows
            .iter()
            .any(|f| f.flow.stats.crc32.value.is_some());
        if stop == DURATION_OVER && hashed {
            report.summary(
                "crc32: each flow's covers the bytes it received before --duration closed it; \
                 a sender still writing then counts bytes its kernel accepted that this \
                 receiver never read, so its CRC-32 covers more and differs",
            );
        }
        report.body(summary::Body::Receive(Box::new(body)));
        report.receive(facts);
        verdict.result
    }
}

impl Measure<'_> {
    /// The bound queues' RX growth between the readings `first` and `last` (over the
    /// interval [`measured_interval`] gives), or why there is none, and which of them the
    /// `flows` reached ([`spread`]: by that growth, else by the flows' arrival queues).
    fn queues_reached(
        &self,
        d: &Device,
        flows: &[Flow],
        first: &Snapshot,
        last: &Snapshot,
    ) -> (std::result::Result<DeviceRx, NoQstats>, Spread) {
        let interval = measured_interval(flows, first, last);
        let arrivals: Vec<ArrivalQueue> = flows
            .iter()
            .filter_map(|f| f.napi_id)
            .map(|id| arrival_queue(&self.queues, id))
            .collect();
        let rx = device_figure(d, first, last, interval);
        let reached = spread(d, &rx, &arrivals);
        (rx, reached)
    }

    /// The steering figures of a one-flow run without a measurement's options, which
    /// reports ncdevmem.c's one summary line and no measured figures: the bound queues' RX
    /// growth over its receive (`device_rx`, each queue's included; from the reading at the
    /// clock's start to one of the queue stats taken now) and which of them the flow reached
    /// (`steering`), as a measured run's JSON carries them. Both `None` without bound queues
    /// (the plain receiver). A driver without qstats gives `device_rx`'s `unavailable` and the
    /// flow's arrival queue (or no `steering`): figures, never an error, and nothing printed.
    pub(crate) fn queue_figures(
        mut self,
        flows: &[Flow],
    ) -> (
        Option<Option<summary::DeviceRxFigure>>,
        Option<summary::SteeringFigure>,
    ) {
        let Some(d) = self.device else {
            return (None, None);
        };
        let first = match self.first.take() {
            Some(f) => f,
            None => Snapshot::queues_only(d, &mut self.netdev),
        };
        let last = match self.last.take() {
            Some(l) => l,
            None => Snapshot::queues_only(d, &mut self.netdev),
        };
        let (rx, reached) = self.queues_reached(d, flows, &first, &last);
        (
            Some(Some(device_rx_figure(&rx))),
            steering_figure(Some(&reached)),
        )
    }
}

/// A worker that received several flows (the zcrx server's, one per ifq): what it was and
/// the counters that are its own rather than one flow's.
pub(crate) struct WorkerRecord {
    /// What it received on, e.g. `zcrx ifq 1 on eth0 rx queue 3`.
    pub what: String,
    /// The RX queue it served (`None`: no device).
    pub queue: Option<u32>,
    /// Its flows, ascending.
    pub flows: Vec<usize>,
    /// The CPU it was pinned to (`--cpus`).
    pub cpu: Option<usize>,
    /// The ifq's own zcrx counters (buffers returned, refill publishes, flushes, waits).
    pub zcrx: crate::stats::ZcrxCounters,
}

/// The per-flow receive settings of `n` flows on `base`: flow k validates flow k's stream
/// (`--seed`), progress is the main thread's.
///
/// Errors: a stream that cannot be derived for a flow ([`crate::validate`]).
pub(crate) fn flow_streams(
    rx: &Receive,
    n: usize,
) -> Result<Vec<Option<crate::validate::StreamSpec>>> {
    (0..n)
        .map(|k| {
            rx.validate
                .map(|s| s.for_flow(k as u32, n as u32))
                .transpose()
        })
        .collect()
}

/// What only flow 0 of a receive has, on the calling thread: the payload output when nothing
/// validates (then it is the only flow), and the hook the devmem server's `-U 2` unbinds
/// through after the first data.
#[derive(Default)]
pub(crate) struct FirstFlow<'a> {
    /// Called once, after the first `recvmsg` that delivered data (`-U 2`).
    pub(crate) after_first_data: Option<Box<dyn FnOnce() + 'a>>,
}

/// Receives the connections `conns` (in accept order) through the one flow engine
/// ([`engine::run`]: connection 0 on the calling thread, each other on its own), with the
/// receive loop configured by `base` (connection k validates flow k's stream until its first
/// bytes name its own), sharing `mem`; a timeout is explained from the kernel's counters when
/// `stall` says where the buffers come from; `early`, the device's counters from before the
/// listen ([`device_before_listen`]), start the measured interval's device figures. Then the
/// one verdict ([`crate::verdict`]) and the report: a measured run ([`measured`]) prints the
/// summary of its flows, per-CPU and device figures ([`Measure::finish`]); a plain one-flow
/// run its one summary line, as ncdevmem.c does. The JSON object is recorded either way (also
/// when the run failed).
///
/// Errors: the verdict's: the failing flows, named `flow k: …` when there are several; a stop
/// signal; the end of `--duration` is no error; writing the payload to stdout.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive<M: FragMemory + Sync>(
    rx: &Receive,
    conns: Vec<Accepted>,
    mem: Option<&M>,
    base: &RxConfig,
    device: Option<&Device>,
    stall: Option<&super::StallContext>,
    first: FirstFlow<'_>,
    early: Option<EarlyReading>,
    report: &RunReport,
) -> Result<()> {
    let n = conns.len();
    let measured = measured(rx);
    let cfgs = flow_streams(rx, n)?
        .into_iter()
        .map(|validate| RxConfig {
            validate,
            // A measured run's progress is the supervisor's, for all flows at once.
            progress_interval: base.progress_interval.filter(|_| !measured),
            // Several flows' diagnostics come at the end, under their final numbers.
            live_diagnostics: n == 1,
            ..base.clone()
        })
        .collect::<Vec<_>>();
    let plan = receive_plan(rx, n, true);
    // Nothing validates: the payload goes to stdout (one flow only, `check`), written on the
    // calling thread.
    let mut stdout = payload_stdout(base.validate.is_none())?;
    let shared = Shared::new(n);
    let early = EarlySlot::new(early);
    let mut measure = Measure::begin(rx, device, report.quiet(), &early);
    let mut conns = conns.into_iter();
    let conn0 = conns
        .next()
        .ok_or_else(|| Error::Failure("accept returned no connection".into()))?;
    let rest: Vec<engine::Worker<'_, Flow>> = conns
        .zip(cfgs.iter().skip(1))
        .map(|(conn, cfg)| {
            Box::new(move |ctx: &engine::Ctx<'_>| {
                run_flow(conn, mem, cfg, ctx, None, &mut std::io::sink(), stall)
            }) as engine::Worker<'_, Flow>
        })
        .collect();
    let hook = first.after_first_data;
    let cfg0 = &cfgs[0];
    let flows = engine::run(
        &plan,
        &shared,
        &STOP,
        &mut measure,
        |ctx| match stdout.as_mut() {
            Some(out) => {
                let mut f = run_flow(conn0, mem, cfg0, ctx, hook, out, stall);
                let flushed = out.flush().map_err(|e| Error::io("write(stdout)", &e));
                f.result = std::mem::replace(&mut f.result, Ok(())).and(flushed);
                f
            }
            None => run_flow(conn0, mem, cfg0, ctx, hook, &mut std::io::sink(), stall),
        },
        rest,
    );
    report_receive(Report {
        rx,
        flows,
        workers: Vec::new(),
        shared: &shared,
        measure,
        unbind: base.unbind,
        report,
    })
}

/// The engine's plan of a receive with `workers` workers: the receive's `--duration`,
/// `--warmup`, `--cpus` and (for a measured run) `--progress`; the clock starts with the run
/// (`clock_at_start`) or when a worker starts it (zcrx, once its connections are in).
pub(crate) fn receive_plan(rx: &Receive, workers: usize, clock_at_start: bool) -> engine::Plan {
    engine::Plan {
        workers,
        duration: rx.flows.duration,
        warmup: rx.flows.warmup,
        deadline: None,
        progress: rx.progress.filter(|_| measured(rx)),
        cpus: rx.flows.cpus.clone(),
        clock_at_start,
    }
}

/// Where the payload goes when nothing validates it (`to_stdout`): stdout, buffered, a write
/// that a stop signal ends; `None` otherwise.
///
/// Errors: from setting up the stop-aware stdout.
pub(crate) fn payload_stdout(
    to_stdout: bool,
) -> Result<Option<std::io::BufWriter<rx::StopAwareWriter<'static, std::fs::File>>>> {
    if !to_stdout {
        return Ok(None);
    }
    Ok(Some(std::io::BufWriter::with_capacity(
        1 << 20,
        rx::stop_aware_stdout(&STOP)?,
    )))
}

/// What [`report_receive`] reports.
pub(crate) struct Report<'a, 'r> {
    /// The receive's options.
    pub(crate) rx: &'a Receive,
    /// Its flows, in accept order.
    pub(crate) flows: Vec<Flow>,
    /// The workers that served several flows (zcrx), none when each flow had its own.
    pub(crate) workers: Vec<WorkerRecord>,
    /// The run's shared state (its stop flag).
    pub(crate) shared: &'a Shared,
    /// The readings of the measured interval.
    pub(crate) measure: Measure<'a>,
    /// `-U`: what a binding gone means.
    pub(crate) unbind: rx::UnbindMode,
    /// Where it goes.
    pub(crate) report: &'r RunReport,
}

/// The verdict and the report of a receive the engine ran: a measured run ([`measured`])
/// prints the summary of its flows, per-CPU and device figures ([`Measure::finish`]); a
/// one-flow run its one summary line, as ncdevmem.c does ([`super::record_receive`]).
///
/// Errors: the verdict's.
pub(crate) fn report_receive(r: Report<'_, '_>) -> Result<()> {
    let Report {
        rx,
        mut flows,
        workers,
        shared,
        measure,
        unbind,
        report,
    } = r;
    if measured(rx) || flows.len() != 1 {
        return measure.finish(flows, workers, shared, report);
    }
    // The JSON's steering figures, as a measured run's (nothing printed: the output stays
    // ncdevmem.c's one summary line).
    let (device_rx, steering) = measure.queue_figures(&flows);
    let mut f = flows.remove(0);
    if let [w] = workers.as_slice() {
        // One flow on one ifq: the ifq's buffer returns are that flow's too.
        f.stats.zcrx.buffers_returned = w.zcrx.buffers_returned;
        f.stats.zcrx.refill_publishes = w.zcrx.refill_publishes;
    }
    if unbind == rx::UnbindMode::BeforeRecv && !f.stats.binding_gone && f.result.is_ok() {
        log!(
            report,
            "-U 1: recvmsg went on delivering data after the unbind (no ENODEV): this kernel \
             keeps a socket's queued devmem data readable after its binding goes (a kernel \
             without the autorelease series, or one in autorelease 1 mode)",
        );
    }
    f.stats.rcvbuf = f.rcvbuf.take();
    f.stats.rcvlowat = f.rcvlowat;
    let queues = super::QueueFigures {
        device_rx,
        steering,
    };
    super::record_receive(rx, &f.stats, f.result, queues, report)
}

/// `flows` (in accept order) in flow order: flow k's connection is `order[k]` (the
/// verdict's assignment, [`crate::verdict`]); each connection reported under a number other
/// than its accept order is logged. Accept order stays when `order` is not a permutation of
/// the connections (a flow without one).
fn in_flow_order(flows: Vec<Flow>, order: &[Option<usize>], report: &RunReport) -> Vec<Flow> {
    let n = flows.len();
    let mut seen = vec![false; n];
    let permutation = order.len() == n
        && order
            .iter()
            .all(|c| matches!(c, Some(c) if *c < n && !std::mem::replace(&mut seen[*c], true)));
    if !permutation {
        return flows;
    }
    let mut slots: Vec<Option<Flow>> = flows.into_iter().map(Some).collect();
    order
        .iter()
        .enumerate()
        .filter_map(|(k, c)| {
            let c = (*c)?;
            if c != k {
                let carries = match slots[c]
                    .as_ref()
                    .map(|f| ConnFacts::of_receive(&f.stats, &f.result).identity)
                {
                    Some(crate::verdict::Identity::Named(j)) if j as usize == k => {
                        format!("carries flow {k}'s stream (by its first bytes)")
                    }
                    _ => "named no flow of its own by its first bytes".to_string(),
                };
                let left = match carries.starts_with("carries") {
                    true => "",
                    false => ", a number left over",
                };
                log!(
                    report,
                    "accepted connection {c} {carries}: reported as flow {k}{left}"
                );
            }
            slots[c].take()
        })
        .collect()
}

/// What the worker of a flow that gave it no byte did, for its error: when it began (after
/// the run's `start`, the last accept), its `recvmsg` calls and its CPU time. A worker that
/// began late or used no CPU was not run (a starved machine); one that ran and called
/// `recvmsg` found nothing to read.
fn worker_saw(f: &Flow, start: Instant) -> String {
    let cpu = match (f.cpu_at_start, f.cpu_at_end) {
        (Some(a), Some(b)) => {
            let c = b.since(a);
            format!("{:.3} s of CPU", (c.user + c.sys).as_secs_f64())
        }
        _ => "CPU time unknown".to_string(),
    };
    format!(
        "its worker began {:.2} s after the run started and ended at {:.2} s, {} recvmsg \
         calls, {cpu}",
        f.started.saturating_duration_since(start).as_secs_f64(),
        f.ended.saturating_duration_since(start).as_secs_f64(),
        f.stats.recvmsg_calls,
    )
}

/// What the kernel says of a flow that gave the worker no byte, for its error: whether data
/// reached the socket at all (`TCP_INFO`: bytes received in order, data segments in, the
/// window last advertised) and the NAPI instance its packets came through. Data the kernel
/// received but the worker never read is this tool's fault; none received points at the
/// NIC, the steering or the peer.
fn kernel_saw(tcp: Option<&TcpInfo>, napi_id: Option<u32>) -> String {
    let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    let tcp = match tcp {
        Some(t) => format!(
            "TCP_INFO: {} bytes received in {} data segments, {} segments in, receive window {}",
            opt(t.bytes_received),
            opt(t.data_segs_in.map(u64::from)),
            opt(t.segs_in.map(u64::from)),
            opt(t.rcv_wnd.map(u64::from)),
        ),
        None => "no TCP_INFO".to_string(),
    };
    match napi_id {
        Some(id) if id != 0 => format!("{tcp}; NAPI id {id}"),
        _ => format!("{tcp}; no NAPI id"),
    }
}

/// One connection's worker (pinned by the engine): receives it until the peer closes or the
/// run stops, the payload going to `out` when nothing validates, `hook` called after its first
/// data; then reads what the kernel says of it (`TCP_INFO`, its NAPI id) and closes it. A
/// timeout is explained from the kernel's counters when `stall` says where the buffers come
/// from; a failure of its own, or mismatches, stop the other flows ([`flow_ended`]).
fn run_flow<M: FragMemory, W: Write>(
    mut conn: Accepted,
    mem: Option<&M>,
    cfg: &RxConfig,
    ctx: &engine::Ctx<'_>,
    hook: Option<Box<dyn FnOnce() + '_>>,
    out: &mut W,
    stall: Option<&super::StallContext>,
) -> Flow {
    let k = ctx.worker;
    let started = Instant::now();
    let cpu_at_start = crate::sys::cpu::thread_cpu_time();
    let mut counted = Counted {
        inner: &mut conn.sock,
        live: ctx.shared.live(k),
        bytes: 0,
        mark: None,
    };
    let mut log = std::io::stderr();
    let run_stop = ctx.run_stop();
    let (stats, result) = match hook {
        Some(hook) => {
            let mut wrapped = rx::AfterFirstData::new(&mut counted, hook);
            rx::receive_flow(&mut wrapped, mem, cfg, run_stop, out, &mut log)
        }
        None => rx::receive_flow(&mut counted, mem, cfg, run_stop, out, &mut log),
    };
    let mark = counted.mark;
    let result = match (result, stall) {
        (Err(e), Some(s)) => Err(super::explain_stall(e, s, &conn.sock, conn.rcvbuf.as_ref())),
        (r, _) => r,
    };
    flow_ended(ctx.shared, &result, &stats);
    Flow::ended(
        conn,
        Ran {
            stats,
            result,
            started,
            mark,
            cpu_at_start,
            cpu: ctx.cpu,
            worker: k,
        },
    )
}

/// `progress: 3.0 s: 4.12 Gbit/s (flows 1.03 1.02 1.04 1.03)`: the last interval's rate, in
/// total and per flow.
fn progress_line(elapsed: Duration, interval: Duration, before: &[u64], now: &[u64]) -> String {
    let rates: Vec<f64> = before
        .iter()
        .zip(now)
        .map(|(b, a)| gbit_per_s(a.saturating_sub(*b), interval))
        .collect();
    let total: f64 = rates.iter().sum();
    let each: Vec<String> = rates.iter().map(|r| format!("{r:.2}")).collect();
    format!(
        "progress: {:.1} s: {total:.2} Gbit/s (flows {})",
        elapsed.as_secs_f64(),
        each.join(" ")
    )
}

/// The figures of one flow over the measured interval.
struct FlowFigures {
    flow: Flow,
    /// Bytes received in the measured interval.
    bytes: u64,
    /// The measured interval of this flow.
    secs: f64,
    queue: Option<ArrivalQueue>,
}

impl FlowFigures {
    fn gbps(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 * 8.0 / self.secs / 1e9
        } else {
            0.0
        }
    }

    /// The worker's own CPU time over the measured interval.
    fn cpu(&self) -> Option<CpuTime> {
        let from = match self.flow.mark {
            Some(m) => m.cpu?,
            None => self.flow.cpu_at_start?,
        };
        Some(self.flow.cpu_at_end?.since(from))
    }
}

/// The measured interval of a run of `flows` between the readings `first` and `last`: it
/// ends at the last reading or, when every flow ended before it (the peers closed, a stop
/// signal), when the last flow ended: the readings after that add no bytes.
fn measured_interval(flows: &[Flow], first: &Snapshot, last: &Snapshot) -> Duration {
    let end = flows
        .iter()
        .map(|f| f.ended)
        .max()
        .map_or(last.at, |e| e.min(last.at));
    end.saturating_duration_since(first.at)
}

/// The bound queues' RX growth between the readings `first` and `last` (`interval` apart), or
/// why there is none.
fn device_figure(
    d: &Device,
    first: &Snapshot,
    last: &Snapshot,
    interval: Duration,
) -> std::result::Result<DeviceRx, NoQstats> {
    match (&first.qstats, &last.qstats) {
        (Some(Ok(a)), Some(Ok(b))) => device_rx(a, b, d.ifindex, &d.queues, interval),
        (Some(Err(e)), _) | (_, Some(Err(e))) => Err(NoQstats(format!("qstats-get: {e}"))),
        _ => Err(NoQstats("no reading".into())),
    }
}

/// Which of `d`'s bound queues the flows reached: by the queues' own RX bytes (`rx`, qstats)
/// where the device has them, else by the flows' `arrivals`
/// ([`crate::figures::device::unreached_queues`]); [`Spread::Unknown`] when neither tells.
fn spread(
    d: &Device,
    rx: &std::result::Result<DeviceRx, NoQstats>,
    arrivals: &[ArrivalQueue],
) -> Spread {
    let per_queue = rx.as_ref().ok().map(|r| r.per_queue.as_slice());
    match unreached_queues(&d.queues, per_queue, arrivals) {
        Some((unreached, source)) => Spread::Known {
            bound: d.queues.clone(),
            unreached,
            source,
        },
        None => Spread::Unknown(match rx {
            Err(why) if !d.queues.is_empty() => {
                format!("{why}; no flow's arrival queue is known")
            }
            _ => "no RX queue is bound".into(),
        }),
    }
}

/// The `/proc/stat` shares of the measured interval: the app CPUs together, all CPUs, and
/// each CPU by number.
type CpuSplit = (CpuShares, CpuShares, Vec<(usize, CpuShares)>);

/// The figures of the run.
struct RunFigures {
    flows: Vec<FlowFigures>,
    /// The measured interval of the run: from the first snapshot to the last one or to the
    /// end of the last flow, whichever came first.
    interval: Duration,
    /// With `--duration`: every flow ended (its peer closed) before the duration was over,
    /// so the figures cover only `interval`.
    ended_before_duration: bool,
    cpu: std::result::Result<CpuSplit, String>,
    app_cpus: Vec<usize>,
    /// Each CPU's NET_RX softirqs over the measured interval, in CPU order (`None`:
    /// `/proc/softirqs` could not be read at both ends).
    net_rx: Option<Vec<(usize, u64)>>,
    device: Option<std::result::Result<DeviceRx, NoQstats>>,
    /// Per NAPI instance of the bound queues, their page pools' counter growth.
    page_pools: Option<std::result::Result<Vec<QueuePools>, NoPoolStats>>,
    warmup: Option<Duration>,
    duration: Option<Duration>,
    /// Workers that served several flows (zcrx); empty when each flow had its own.
    workers: Vec<WorkerRecord>,
    /// Flow k's failures as the verdict words them (`None`: it passed).
    verdicts: Vec<Option<String>>,
    /// Flow k's connection (its accept order), as the verdict assigned it.
    connections: Vec<Option<usize>>,
    /// When the run's clock started (the last accept), for when each worker began and ended.
    clock_start: Option<Instant>,
    /// Which bound queues the flows reached (`None`: no device).
    steering: Option<Spread>,
}

impl RunFigures {
    fn new(
        rx: &Receive,
        flows: Vec<Flow>,
        first: &Snapshot,
        last: &Snapshot,
        device: Option<&Device>,
        queues: &[crate::netlink::netdev::QueueInfo],
    ) -> RunFigures {
        let interval = measured_interval(&flows, first, last);
        let flows = flows
            .into_iter()
            .map(|f| {
                let (from_at, from_bytes) = f.measured_from(rx.flows.warmup.is_some());
                let until = f.ended.min(last.at.max(from_at));
                let bytes = f.stats.bytes.saturating_sub(from_bytes);
                FlowFigures {
                    secs: until.saturating_duration_since(from_at).as_secs_f64(),
                    bytes,
                    queue: f
                        .napi_id
                        .filter(|_| device.is_some())
                        .map(|id| arrival_queue(queues, id)),
                    flow: f,
                }
            })
            .collect::<Vec<_>>();
        let app_cpus = match &rx.flows.cpus {
            Some(c) => {
                let mut used: Vec<usize> = flows.iter().filter_map(|f| f.flow.cpu).collect();
                used.sort_unstable();
                used.dedup();
                if used.is_empty() {
                    c.clone()
                } else {
                    used
                }
            }
            None => crate::sys::cpu::allowed_cpus().unwrap_or_default(),
        };
        let cpu = match (&first.proc_stat, &last.proc_stat) {
            (Ok(a), Ok(b)) => {
                let d = b.since(a);
                let per_cpu = d
                    .cpus
                    .iter()
                    .filter_map(|(&c, t)| Some((c, t.shares()?)))
                    .collect();
                match (d.of(&app_cpus).shares(), d.all.shares()) {
                    (Some(app), Some(all)) => Ok((app, all, per_cpu)),
                    _ => Err("no CPU ticks in the measured interval".to_string()),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        };
        let device_figure = device.map(|d| device_figure(d, first, last, interval));
        let page_pools = device.map(|d| match (&first.pools, &last.pools) {
            (Some(Ok(a)), Some(Ok(b))) => page_pool::per_queue(a, b, d.ifindex, &d.queues, queues),
            (Some(Err(e)), _) | (_, Some(Err(e))) => Err(NoPoolStats(e.to_string())),
            _ => Err(NoPoolStats("no reading".into())),
        });
        RunFigures {
            flows,
            interval,
            cpu,
            app_cpus,
            net_rx: match (&first.net_rx, &last.net_rx) {
                (Ok(a), Ok(b)) => Some(softirq::growth(a, b)),
                _ => None,
            },
            device: device_figure,
            page_pools,
            warmup: rx.flows.warmup,
            duration: rx.flows.duration,
            ended_before_duration: false,
            workers: Vec::new(),
            verdicts: Vec::new(),
            connections: Vec::new(),
            clock_start: None,
            steering: None,
        }
    }

    fn total_bytes(&self) -> u64 {
        self.flows.iter().map(|f| f.bytes).sum()
    }

    fn total_gbps(&self) -> f64 {
        gbit_per_s(self.total_bytes(), self.interval)
    }

    /// Mean and sample standard deviation of the flows' Gbit/s.
    fn flow_spread(&self) -> (f64, f64) {
        let rates: Vec<f64> = self.flows.iter().map(FlowFigures::gbps).collect();
        crate::stats::mean_sd(&rates)
    }

    /// The app CPUs' seconds over the measured interval at `pct` percent of their time.
    fn app_secs(&self, pct: f64) -> f64 {
        self.interval.as_secs_f64() * self.app_cpus.len() as f64 * pct / 100.0
    }

    /// The tool's own user CPU time (all workers) as a share of the app CPUs' busy time.
    fn tool_user_share(&self) -> Option<f64> {
        let (user, _) = self.workers_secs();
        let (app, _, _) = self.cpu.as_ref().ok()?;
        let busy = self.app_secs(100.0 - app.idle - app.iowait);
        (busy > 0.0).then(|| 100.0 * user / busy)
    }

    /// Percent of the app CPUs' busy time that other tasks took: the busy time less the
    /// workers' own user and system time and less interrupts (hard and soft) and steal, over
    /// the busy time (at least 0). It is what dilutes [`RunFigures::tool_user_share`]: a
    /// sender on the same CPUs, a build, a VM.
    fn foreign_share(&self) -> Option<f64> {
        let (user, sys) = self.workers_secs();
        let (app, _, _) = self.cpu.as_ref().ok()?;
        let busy = self.app_secs(100.0 - app.idle - app.iowait);
        let kernel = self.app_secs(app.irq + app.softirq + app.steal);
        (busy > 0.0).then(|| (100.0 * (busy - kernel - user - sys) / busy).max(0.0))
    }

    /// The workers' own user and system CPU seconds over the measured interval: a worker of
    /// several flows counts once (each of its flows carries the worker's CPU time).
    fn workers_secs(&self) -> (f64, f64) {
        let mut seen = Vec::new();
        self.flows
            .iter()
            .filter(|f| {
                let new = !seen.contains(&f.flow.worker);
                seen.push(f.flow.worker);
                new
            })
            .filter_map(FlowFigures::cpu)
            .fold((0.0, 0.0), |(u, s), c| {
                (u + c.user.as_secs_f64(), s + c.sys.as_secs_f64())
            })
    }

    /// `4 flows: 1073741824 bytes in 5.0 s (measured after 1.0 s of warm-up) = 1.72 Gbit/s;
    /// flow avg 0.43 ± 0.01 Gbit/s; device RX 1.75 Gbit/s (qstats, headers included)`.
    fn summary(&self) -> String {
        let (avg, sd) = self.flow_spread();
        // A sample sd over one flow does not exist: `-`, as the lab prints one run's.
        let sd = match self.flows.len() {
            1 => "-".to_string(),
            _ => format!("{sd:.3}"),
        };
        let mut s = format!(
            "rx flows: {}, {} bytes in {:.3} s{} = {:.3} Gbit/s; flow avg {avg:.3} +/- \
             {sd} Gbit/s",
            crate::figures::count(self.flows.len() as u64, "flow"),
            self.total_bytes(),
            self.interval.as_secs_f64(),
            match self.warmup {
                Some(w) => format!(" (after {:.1} s of warm-up)", w.as_secs_f64()),
                None => String::new(),
            },
            self.total_gbps()
        );
        if let (true, Some(d)) = (self.ended_before_duration, self.duration) {
            s.push_str(&format!(
                " (the peers closed every flow before --duration {:.1} s was over: the figures \
                 cover {:.3} s)",
                d.as_secs_f64(),
                self.interval.as_secs_f64()
            ));
        }
        match &self.device {
            Some(Ok(d)) => s.push_str(&format!(
                "; device RX {:.3} Gbit/s ({} bytes on the bound queues by qstats, headers \
                 included)",
                d.gbps().unwrap_or(0.0),
                d.bytes
            )),
            Some(Err(why)) => s.push_str(&format!("; device RX: {why}")),
            None => {}
        }
        s
    }

    /// `rx queues: queue 4 8388608 bytes, queue 5 0 bytes (qstats rx-bytes over the
    /// measured interval, headers included)`: each bound queue's share of device RX (`None`
    /// without the figure).
    fn queue_line(&self) -> Option<String> {
        let d = self.device.as_ref()?.as_ref().ok()?;
        let qs: Vec<String> = d
            .per_queue
            .iter()
            .map(|q| format!("queue {} {} bytes", q.queue, q.bytes))
            .collect();
        Some(format!(
            "rx queues: {} (qstats rx-bytes over the measured interval, headers included)",
            qs.join(", ")
        ))
    }

    /// `steering: the flows reached 1 of 2 bound queues (2,3): no bytes on queue 3 (qstats)`
    /// when some bound queue was not reached; `None` otherwise.
    fn unreached_line(&self) -> Option<String> {
        match self.steering.as_ref()? {
            Spread::Known {
                bound,
                unreached,
                source,
            } if !unreached.is_empty() => Some(format!(
                "steering: {}",
                unreached_words(bound, unreached, source)
            )),
            _ => None,
        }
    }

    /// One line per flow.
    fn flow_lines(&self) -> Vec<String> {
        self.flows
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let st = &f.flow.stats;
                let mut s = format!("  flow {k}: ");
                if self.warmup.is_some() {
                    s.push_str(&format!("{} bytes measured ({} in all)", f.bytes, st.bytes));
                } else {
                    s.push_str(&format!("{} bytes", st.bytes));
                }
                s.push_str(&format!(", {:.3} Gbit/s", f.gbps()));
                if st.mode == crate::stats::RxMode::Zcrx {
                    s.push_str(&format!(
                        ", {} chunks, {} RECV_ZC arms; worker {}",
                        st.zcrx.chunks, st.zcrx.arms, f.flow.worker
                    ));
                } else if st.mode != crate::stats::RxMode::PlainTcp {
                    s.push_str(&format!(
                        ", {} frags ({} dmabuf, {} linear), {} tokens in {} DONTNEED calls",
                        st.dmabuf_frags + st.linear_frags,
                        st.dmabuf_frags,
                        st.linear_frags,
                        st.tokens_released,
                        st.dontneed_calls,
                    ));
                }
                s.push_str(&format!(
                    ", {} recvmsg calls, {}",
                    st.recvmsg_calls,
                    st.crc32.describe()
                ));
                if let Some(q) = &f.queue {
                    s.push_str(&format!("; {q}"));
                }
                if let Some(c) = f.flow.cpu {
                    s.push_str(&format!("; cpu {c}"));
                }
                if let Some(t) = &f.flow.tcp {
                    s.push_str(&format!(
                        "; rtt {} us (var {}), {} retransmits, reordering {}, rcv_space {}",
                        t.rtt_us, t.rttvar_us, t.total_retrans, t.reordering, t.rcv_space
                    ));
                }
                if let Some(Some(e)) = self.verdicts.get(k) {
                    s.push_str(&format!("; FAILED: {e}"));
                }
                s
            })
            .collect()
    }

    /// The diagnostics of every flow with mismatches, under its final number: its first
    /// diagnoses (keyed stream) or mismatching bytes (`-v N`), at most
    /// [`DIAGNOSTIC_LINES`], then one line with the counts and the cause, read from every
    /// piece that differed.
    fn diagnostic_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (k, f) in self.flows.iter().enumerate() {
            let st = &f.flow.stats;
            if st.mismatches == 0 {
                continue;
            }
            let v = &st.validation;
            if let Some(crate::validate::StreamSpec::Keyed(s)) = st.stream {
                if s.flow() as usize != k {
                    lines.push(format!(
                        "flow {k}: its bytes were checked as flow {}'s stream, its connection's \
                         by accept order (its first 8 bytes named no flow)",
                        s.flow()
                    ));
                }
            }
            if v.diagnoses.is_empty() {
                for m in v.mismatches.iter().take(DIAGNOSTIC_LINES) {
                    lines.push(format!("flow {k}: validation mismatch at {m}"));
                }
            } else {
                for d in v.diagnoses.iter().take(DIAGNOSTIC_LINES) {
                    lines.push(format!("flow {k}: validation: {d}"));
                }
            }
            let pieces: u64 = v.causes.iter().map(|(_, n)| n).sum();
            let mut causes = v.causes.clone();
            causes.sort_by_key(|c| std::cmp::Reverse(c.1));
            let cause = match causes.as_slice() {
                [] => String::new(),
                list => format!(
                    "; {pieces} piece(s) differ: {}",
                    list.iter()
                        .map(|(fault, n)| format!("{} in {n}", cause_name(*fault)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            lines.push(format!(
                "flow {k}: {} mismatched byte(s) in {} validated{cause}",
                st.mismatches, st.validated_bytes
            ));
        }
        lines
    }

    /// One line per worker of several flows: `  worker 1 (zcrx ifq 2 on eth0 rx queue 5):
    /// flows 1,3; 2048 buffers returned in 40 refill publishes, 0 flushes, 310 waits`.
    fn worker_lines(&self) -> Vec<String> {
        self.workers
            .iter()
            .enumerate()
            .map(|(w, r)| {
                let flows: Vec<String> = r.flows.iter().map(usize::to_string).collect();
                let mut s = format!(
                    "  worker {w} ({}): flows {}; {} buffers returned in {} refill publishes, \
                     {} flushes, {} waits",
                    r.what,
                    match flows.is_empty() {
                        true => "none".to_string(),
                        false => flows.join(","),
                    },
                    r.zcrx.buffers_returned,
                    r.zcrx.refill_publishes,
                    r.zcrx.flushes,
                    r.zcrx.waits
                );
                if let Some(c) = r.cpu {
                    s.push_str(&format!("; cpu {c}"));
                }
                s
            })
            .collect()
    }

    /// `cpu: app sys % 45.1, app idle % 10.2 (CPUs 0-1); all CPUs: usr … sys … irq … soft …
    /// idle …`.
    fn cpu_line(&self) -> String {
        match &self.cpu {
            Ok((app, all, _)) => {
                let mut s = format!(
                    "cpu: {APP_SYS} {:.1}, {APP_IDLE} {:.1} (app CPUs {}: usr {:.1} sys {:.1} \
                     irq {:.1} soft {:.1} idle {:.1}); all CPUs: usr {:.1} sys {:.1} irq {:.1} \
                     soft {:.1} idle {:.1}",
                    app.sys,
                    app.idle,
                    format_cpu_list(&self.app_cpus),
                    app.usr,
                    app.sys,
                    app.irq,
                    app.softirq,
                    app.idle,
                    all.usr,
                    all.sys,
                    all.irq,
                    all.softirq,
                    all.idle
                );
                if let Some(u) = self.tool_user_share() {
                    s.push_str(&format!(
                        "; the tool's user CPU is {u:.1}% of the app CPUs' busy time"
                    ));
                }
                if let Some(o) = self.foreign_share() {
                    s.push_str(&format!(", other tasks' {o:.1}%"));
                }
                s
            }
            Err(why) => format!("cpu: no /proc/stat figures ({why})"),
        }
    }

    /// A warning (not with `--quiet`) when other tasks took more than [`FOREIGN_WARN_PCT`] of
    /// the app CPUs' busy time: the CPU split and the tool's share are then not the tool's
    /// alone.
    fn foreign_warning(&self) -> Option<String> {
        let o = self.foreign_share()?;
        (o > FOREIGN_WARN_PCT).then(|| {
            format!(
                "warning: other tasks took {o:.1}% of the app CPUs' busy time (over \
                 {FOREIGN_WARN_PCT:.0}%): the CPU split is not this tool's alone, and the \
                 tool's share of it reads low"
            )
        })
    }

    /// `page pools: q2: 812 alloc (800 fast, 12 slow), 790 recycled (700 cache, 90 ring), 0
    /// released; q3: …` (counter growth over the measured interval), or why there is none;
    /// `None` for the plain receiver.
    fn page_pool_line(&self) -> Option<String> {
        Some(match self.page_pools.as_ref()? {
            Ok(groups) => format!(
                "page pools: {}",
                groups
                    .iter()
                    .map(page_pool::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Err(why) => format!("page pools: {why}"),
        })
    }

    #[cfg(test)]
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.body()).unwrap_or_default()
    }

    /// The run's summary body: the flows' counters summed (the measured interval's bytes and
    /// rate, no CRC-32: each flow has its own), the measured figures and every flow.
    fn body(&self) -> summary::ReceiveBody {
        let mut merged = RxStats::new(
            self.flows
                .first()
                .map_or(crate::stats::RxMode::PlainTcp, |f| f.flow.stats.mode),
        );
        let mut hist = FragSizeHistogram::default();
        for f in &self.flows {
            merged.merge(&f.flow.stats);
            hist.merge(&f.flow.stats.frag_sizes);
        }
        merged.elapsed = self.interval;
        let mut totals = merged.totals();
        totals.bytes = self.total_bytes();
        totals.gbit_per_s = self.total_gbps();
        totals.crc32 = None;
        totals.crc32_from = None;
        if let (Some(z), false) = (totals.zcrx.as_mut(), self.workers.is_empty()) {
            // The ifq-wide counters are the workers' (the flows' own are 0).
            let sum = |g: fn(&crate::stats::ZcrxCounters) -> u64| -> u64 {
                self.workers.iter().map(|w| g(&w.zcrx)).sum()
            };
            z.zcrx_buffers_returned = sum(|z| z.buffers_returned);
            z.zcrx_refill_publishes = sum(|z| z.refill_publishes);
            z.zcrx_flushes = sum(|z| z.flushes);
            z.zcrx_waits = sum(|z| z.waits);
        }
        let (avg, sd) = self.flow_spread();
        let unavailable = |why: String| summary::Unavailable { unavailable: why };
        let measured = summary::Measured {
            frag_sizes: buckets(&hist),
            flow_count: self.flows.len(),
            flow_avg_gbit_per_s: avg,
            flow_sd_gbit_per_s: sd,
            measured_s: self.interval.as_secs_f64(),
            warmup_s: self.warmup.map(|w| w.as_secs_f64()),
            duration_s: self.duration.map(|d| d.as_secs_f64()),
            ended_before_duration: self.ended_before_duration,
            page_pools: self.page_pools.as_ref().map(|p| match p {
                Ok(groups) => {
                    summary::PagePoolsFigure::Groups(groups.iter().map(pool_group).collect())
                }
                Err(why) => summary::PagePoolsFigure::Unavailable(unavailable(why.to_string())),
            }),
            cpu: match &self.cpu {
                Ok((app, all, per_cpu)) => summary::CpuFigure::Split(Box::new(summary::CpuSplit {
                    app_cpus: self.app_cpus.clone(),
                    app_sys: app.sys,
                    app_idle: app.idle,
                    app: shares(app),
                    all: shares(all),
                    per_cpu: per_cpu
                        .iter()
                        .map(|(c, s)| summary::CpuShareFigure {
                            cpu: *c,
                            shares: shares(s),
                            net_rx: self
                                .net_rx
                                .as_ref()
                                .and_then(|g| g.iter().find(|(cpu, _)| cpu == c).map(|&(_, n)| n)),
                        })
                        .collect(),
                    net_cpus: self.net_rx.as_deref().map(softirq::net_cpus),
                    tool_user_pct_of_app_busy: self.tool_user_share(),
                    foreign_pct_of_app_busy: self.foreign_share(),
                })),
                Err(why) => summary::CpuFigure::Unavailable(unavailable(why.clone())),
            },
            flows: self
                .flows
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    let mut v = flow_figures(k, f);
                    v.connection = self.connections.get(k).copied().flatten();
                    v.ok = self.verdicts.get(k).is_none_or(Option::is_none);
                    v.error = self.verdicts.get(k).cloned().flatten();
                    if !self.workers.is_empty() {
                        v.worker = Some(f.flow.worker);
                    }
                    if let Some(start) = self.clock_start {
                        let since = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
                        v.worker_began_s = Some(since(f.flow.started));
                        v.worker_ended_s = Some(since(f.flow.ended));
                    }
                    v
                })
                .collect(),
            workers: (!self.workers.is_empty()).then(|| {
                self.workers
                    .iter()
                    .enumerate()
                    .map(|(w, r)| summary::WorkerFigure {
                        worker: w,
                        what: r.what.clone(),
                        rx_queue: r.queue,
                        flows: r.flows.clone(),
                        cpu: r.cpu,
                        zcrx_chunks: r
                            .flows
                            .iter()
                            .filter_map(|&k| self.flows.get(k))
                            .map(|f| f.flow.stats.zcrx.chunks)
                            .sum(),
                        zcrx_buffers_returned: r.zcrx.buffers_returned,
                        zcrx_refill_publishes: r.zcrx.refill_publishes,
                        zcrx_flushes: r.zcrx.flushes,
                        zcrx_waits: r.zcrx.waits,
                        zcrx_rx_buf_len: r.zcrx.rx_buf_len,
                    })
                    .collect()
            }),
        };
        summary::ReceiveBody {
            totals,
            measured: Some(measured),
            device_rx: Some(self.device.as_ref().map(device_rx_figure)),
            steering: steering_figure(self.steering.as_ref()),
        }
    }
}

/// The JSON figure of the bound queues' RX growth `rx`, or of why there is none.
fn device_rx_figure(rx: &std::result::Result<DeviceRx, NoQstats>) -> summary::DeviceRxFigure {
    match rx {
        Ok(d) => summary::DeviceRxFigure::Measured(summary::DeviceRxMeasured {
            bytes: d.bytes,
            packets: d.packets,
            gbit_per_s: d.gbps(),
            source: "qstats-get rx-bytes of the bound queues (headers included)".into(),
            queues: Some(
                d.per_queue
                    .iter()
                    .map(|q| summary::QueueRxFigure {
                        queue: q.queue,
                        bytes: q.bytes,
                        packets: q.packets,
                    })
                    .collect(),
            ),
        }),
        Err(why) => summary::DeviceRxFigure::Unavailable(summary::Unavailable {
            unavailable: why.to_string(),
        }),
    }
}

/// The JSON figure of which bound queues the flows reached, when that is known.
fn steering_figure(spread: Option<&Spread>) -> Option<summary::SteeringFigure> {
    match spread? {
        Spread::Known {
            bound,
            unreached,
            source,
        } => Some(summary::SteeringFigure {
            bound: bound.clone(),
            unreached: unreached.clone(),
            source: (*source).into(),
        }),
        Spread::Unknown(_) => None,
    }
}

/// CPU shares as the summary's type.
fn shares(s: &CpuShares) -> summary::SharesFigure {
    summary::SharesFigure {
        usr: s.usr,
        nice: Some(s.nice),
        sys: s.sys,
        irq: s.irq,
        softirq: s.softirq,
        iowait: s.iowait,
        idle: s.idle,
        steal: s.steal,
        ticks: s.ticks,
    }
}

/// A frag-size histogram's non-empty buckets.
fn buckets(h: &FragSizeHistogram) -> Vec<summary::FragBucket> {
    h.buckets()
        .map(|b| summary::FragBucket {
            min: b.min,
            max: b.max,
            frags: b.frags,
        })
        .collect()
}

/// One NAPI instance's page pools as the summary's type.
fn pool_group(g: &QueuePools) -> summary::PoolGroupFigure {
    let c = &g.counters;
    summary::PoolGroupFigure {
        queues: g.queues.clone(),
        napi_id: g.napi_id,
        pools: g.pools.clone(),
        alloc_fast: c.alloc_fast,
        alloc_slow: c.alloc_slow,
        alloc_slow_high_order: c.alloc_slow_high_order,
        alloc_empty: c.alloc_empty,
        alloc_refill: c.alloc_refill,
        alloc_waive: c.alloc_waive,
        recycle_cached: c.recycle_cached,
        recycle_cache_full: c.recycle_cache_full,
        recycle_ring: c.recycle_ring,
        recycle_ring_full: c.recycle_ring_full,
        recycle_released_refcnt: c.recycle_released_refcnt,
    }
}

/// Flow `k`'s figures (its verdict, connection and worker filled in by the caller).
fn flow_figures(k: usize, f: &FlowFigures) -> summary::ReceiveFlow {
    let st = &f.flow.stats;
    let cpu = f.cpu();
    summary::ReceiveFlow {
        flow: k,
        connection: None,
        bytes: st.bytes,
        measured_bytes: f.bytes,
        measured_s: f.secs,
        gbit_per_s: f.gbps(),
        dmabuf_frags: st.dmabuf_frags,
        linear_frags: st.linear_frags,
        tokens_released: st.tokens_released,
        dontneed_calls: st.dontneed_calls,
        recvmsg_calls: st.recvmsg_calls,
        validated_bytes: st.validated_bytes,
        mismatches: st.mismatches,
        stream: st.stream.map(|s| s.to_string()),
        crc32: st.crc32.value,
        crc32_from: st.crc32.from,
        cpu: f.flow.cpu,
        worker_user_s: cpu.map(|c| c.user.as_secs_f64()),
        worker_sys_s: cpu.map(|c| c.sys.as_secs_f64()),
        napi_id: f.flow.napi_id,
        rx_queue: f.queue.as_ref().and_then(|q| match q {
            ArrivalQueue::Queue(q) => Some(*q),
            _ => None,
        }),
        arrival: f.queue.as_ref().map(ToString::to_string),
        frag_sizes: buckets(&st.frag_sizes),
        ok: true,
        error: None,
        worker_began_s: None,
        worker_ended_s: None,
        zcrx: (st.mode == crate::stats::RxMode::Zcrx).then_some(summary::ZcrxFlowCounters {
            zcrx_chunks: st.zcrx.chunks,
            zcrx_arms: st.zcrx.arms,
            zcrx_retried_errors: st.zcrx.retried_errors,
        }),
        tcp_info: f.flow.tcp.as_ref().map(|t| summary::TcpInfoFigures {
            rtt_us: t.rtt_us,
            rttvar_us: t.rttvar_us,
            retransmits: t.retransmits,
            total_retrans: t.total_retrans,
            reordering: t.reordering,
            rcv_space: t.rcv_space,
            rcv_wnd: t.rcv_wnd,
            rcv_mss: t.rcv_mss,
            rcv_ooopack: t.rcv_ooopack,
            bytes_received: t.bytes_received,
            segs_in: t.segs_in,
            data_segs_in: t.data_segs_in,
        }),
        rcvbuf_bytes: f.flow.rcvbuf.as_ref().map(|r| u64::from(r.effective)),
        rcvlowat_bytes: f.flow.rcvlowat.map(u64::from),
        worker: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{RxMode, ZcrxCounters};
    use serde_json::{json, Value};

    /// Flow `k` of worker `worker` (zcrx): `bytes` in `chunks` chunks, its worker's user CPU
    /// `user_ms` over the run.
    fn zcrx_flow(worker: usize, bytes: u64, chunks: u64, user_ms: u64, at: Instant) -> Flow {
        let mut stats = RxStats::new(RxMode::Zcrx);
        stats.bytes = bytes;
        stats.validated_bytes = bytes;
        stats.zcrx.chunks = chunks;
        stats.zcrx.arms = 1;
        stats.zcrx.rx_buf_len = 4096;
        Flow {
            stats,
            result: Ok(()),
            rcvbuf: None,
            rcvlowat: None,
            started: at,
            mark: None,
            ended: at + Duration::from_secs(2),
            cpu_at_start: Some(CpuTime::default()),
            cpu_at_end: Some(CpuTime {
                user: Duration::from_millis(user_ms),
                sys: Duration::from_millis(3 * user_ms),
            }),
            cpu: None,
            napi_id: None,
            tcp: None,
            worker,
        }
    }

    /// A reading at `at` with no figures in it.
    fn snap(at: Instant) -> Snapshot {
        Snapshot {
            at,
            proc_stat: Err(Error::Failure("not read in this test".into())),
            net_rx: Err("not read in this test".into()),
            qstats: None,
            pools: None,
        }
    }

    fn rx() -> Receive {
        let argv: Vec<String> = "-l --zcrx --zcrx-nodev -s ::1 -p 1 --flows 3 --seed 5"
            .split(' ')
            .map(String::from)
            .collect();
        match crate::cli::parse(&argv, 4096) {
            Ok(crate::cli::Command::Run(r)) => match r.mode {
                crate::cli::ModeArgs::Zcrx(z) => z.rx,
                other => panic!("not zcrx: {other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// A run whose flows all ended before its last reading (the peers closed, a signal)
    /// measures up to the last flow's end: one flow's Gbit/s is then the run's (before, the
    /// interval ran on to the supervisor's next tick, up to 50 ms more, and the total read
    /// 10-17 % low for a 0.2 s run); a reading before the flows' end bounds it as before.
    #[test]
    fn the_measured_interval_ends_with_the_last_flow() {
        let at = Instant::now();
        let rx = rx();
        let flows = || {
            vec![
                zcrx_flow(0, 1000, 10, 40, at),
                zcrx_flow(1, 2000, 20, 60, at),
            ]
        };
        let late = snap(at + Duration::from_millis(2050));
        let f = RunFigures::new(&rx, flows(), &snap(at), &late, None, &[]);
        assert_eq!(f.interval, Duration::from_secs(2));
        assert!((f.total_gbps() - 3000.0 * 8.0 / 2.0 / 1e9).abs() < 1e-12);
        assert_eq!(f.flows[0].secs, 2.0);
        let early = snap(at + Duration::from_millis(1500));
        let f = RunFigures::new(&rx, flows(), &snap(at), &early, None, &[]);
        assert_eq!(f.interval, Duration::from_millis(1500));
        assert_eq!(f.flows[0].secs, 1.5);
    }

    /// The tool's share and other tasks' share of the app CPUs' busy time: the workers' user
    /// time (each worker once) over the busy time, and the busy time less the workers' user
    /// and system time, interrupts and steal; the warning only above 10 %.
    #[test]
    fn other_tasks_share_of_the_app_cpus_is_the_busy_time_the_tool_did_not_take() {
        // Two workers: user 0.040 + 0.060 s, system 0.120 + 0.180 s (3 x user), over 2 s.
        let mut f = three_flows_on_two_workers();
        assert_eq!(f.foreign_share(), None, "no /proc/stat figures: no share");
        let app = |idle: f64, softirq: f64| CpuShares {
            usr: 0.0,
            nice: 0.0,
            sys: 100.0 - idle - softirq - 1.0,
            irq: 0.0,
            softirq,
            iowait: 0.0,
            idle,
            steal: 1.0,
            ticks: 400,
        };
        f.app_cpus = vec![0, 1];
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // 2 s on 2 CPUs, half of it busy: 2.0 s busy, 0.1 s softirq and 0.04 s steal;
        // 0.1 s user and 0.3 s system of the workers: the rest, 1.46 s, is other tasks'.
        f.cpu = Ok((app(50.0, 2.5), app(50.0, 2.5), Vec::new()));
        assert!(close(f.tool_user_share(), 5.0), "{:?}", f.tool_user_share());
        assert!(close(f.foreign_share(), 73.0), "{:?}", f.foreign_share());
        let warning = f.foreign_warning().expect("over 10 %");
        assert!(
            warning.starts_with("warning: other tasks took 73.0% of the app CPUs' busy time"),
            "{warning}"
        );
        assert!(
            f.cpu_line().ends_with("busy time, other tasks' 73.0%"),
            "{}",
            f.cpu_line()
        );
        match f.body().measured.expect("measured").cpu {
            summary::CpuFigure::Split(s) => {
                assert!(close(s.foreign_pct_of_app_busy, 73.0), "{s:?}");
            }
            other => panic!("{other:?}"),
        }
        // 11 % busy (0.44 s), all of it the tool's, interrupts and steal: no warning.
        f.cpu = Ok((app(89.0, 0.0), app(89.0, 0.0), Vec::new()));
        assert!(close(f.foreign_share(), 0.0), "{:?}", f.foreign_share());
        assert_eq!(f.foreign_warning(), None);
    }

    /// Three zcrx flows over 2 s, flows 0 and 2 on worker 0 (user 0.040 s, system 0.120 s),
    /// flow 1 on worker 1 (0.060 s, 0.180 s), without `/proc/stat` figures.
    fn three_flows_on_two_workers() -> RunFigures {
        let at = Instant::now();
        let flows = vec![
            zcrx_flow(0, 1000, 10, 40, at),
            zcrx_flow(1, 2000, 20, 60, at),
            zcrx_flow(0, 3000, 30, 40, at),
        ];
        RunFigures::new(
            &rx(),
            flows,
            &snap(at),
            &snap(at + Duration::from_secs(2)),
            None,
            &[],
        )
    }

    /// Three flows over two zcrx workers: each flow names its worker, the workers' records
    /// carry the ifq-wide counters (the top-level figures are their sums), the chunks are
    /// summed per worker, and a worker's CPU time counts once.
    #[test]
    fn workers_of_several_flows_are_reported_once_each() {
        let mut f = three_flows_on_two_workers();
        let ifq = |returned, publishes| ZcrxCounters {
            buffers_returned: returned,
            refill_publishes: publishes,
            flushes: 1,
            waits: 7,
            rx_buf_len: 4096,
            ..ZcrxCounters::default()
        };
        f.workers = vec![
            WorkerRecord {
                what: "zcrx ifq 1 on eth0 rx queue 2".into(),
                queue: Some(2),
                flows: vec![0, 2],
                cpu: Some(0),
                zcrx: ifq(40, 3),
            },
            WorkerRecord {
                what: "zcrx ifq 2 on eth0 rx queue 3".into(),
                queue: Some(3),
                flows: vec![1],
                cpu: None,
                zcrx: ifq(20, 2),
            },
        ];
        assert!(
            (f.workers_secs().0 - 0.100).abs() < 1e-9,
            "{:?}",
            f.workers_secs()
        );
        let j = f.to_json();
        assert_eq!(j["flow_count"], 3);
        assert_eq!(j["bytes"], 6000);
        assert_eq!(j["zcrx_chunks"], 60);
        assert_eq!(j["zcrx_buffers_returned"], 60);
        assert_eq!(j["zcrx_refill_publishes"], 5);
        assert_eq!(j["zcrx_flushes"], 2);
        assert_eq!(j["zcrx_waits"], 14);
        assert_eq!(j["zcrx_rx_buf_len"], 4096);
        let workers = j["workers"].as_array().expect("workers");
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0]["rx_queue"], 2);
        assert_eq!(workers[0]["flows"], json!([0, 2]));
        assert_eq!(workers[0]["zcrx_chunks"], 40);
        assert_eq!(workers[1]["zcrx_chunks"], 20);
        assert_eq!(workers[1]["cpu"], Value::Null);
        let per_flow = j["flows"].as_array().expect("flows");
        let of: Vec<_> = per_flow.iter().map(|f| f["worker"].clone()).collect();
        assert_eq!(of, vec![json!(0), json!(1), json!(0)]);
        assert_eq!(per_flow[2]["zcrx_chunks"], 30);
        assert_eq!(per_flow[2]["worker_user_s"], 0.04);
        let lines = f.worker_lines();
        assert_eq!(
            lines[0],
            "  worker 0 (zcrx ifq 1 on eth0 rx queue 2): flows 0,2; 40 buffers returned in 3 \
             refill publishes, 1 flushes, 7 waits; cpu 0"
        );
        assert!(
            f.flow_lines()[1].contains("20 chunks, 1 RECV_ZC arms; worker 1"),
            "{:?}",
            f.flow_lines()
        );
    }

    /// Devmem and plain runs (a worker per flow) keep their JSON shape: no `workers`, no
    /// per-flow `worker`; each flow's CPU time counts.
    #[test]
    fn one_worker_per_flow_keeps_the_shape() {
        let at = Instant::now();
        let flows = vec![zcrx_flow(0, 10, 1, 10, at), zcrx_flow(1, 10, 1, 20, at)];
        let rx = rx();
        let f = RunFigures::new(
            &rx,
            flows,
            &snap(at),
            &snap(at + Duration::from_secs(1)),
            None,
            &[],
        );
        assert!((f.workers_secs().0 - 0.030).abs() < 1e-9);
        let j = f.to_json();
        assert!(j.get("workers").is_none(), "{j}");
        assert!(j["flows"][0].get("worker").is_none(), "{j}");
    }

    /// Two flows on bound queues 2 and 3 that all landed on queue 2: the run's steering
    /// names queue 3 (qstats first; the flows' arrival queues without them; nothing without
    /// either), the per-queue line gives each queue's bytes, and the JSON carries both.
    #[test]
    fn a_bound_queue_without_bytes_is_named() {
        use crate::figures::device::QueueRx;
        let d = Device {
            ifindex: 4,
            queues: vec![2, 3],
        };
        let q = |queue, bytes| QueueRx {
            queue,
            bytes,
            packets: None,
        };
        let rx_of = |per_queue: Vec<QueueRx>| DeviceRx {
            bytes: per_queue.iter().map(|q| q.bytes).sum(),
            packets: None,
            interval: Duration::from_secs(2),
            per_queue,
        };
        let both_on_2 = Ok(rx_of(vec![q(2, 9000), q(3, 0)]));
        let s = spread(&d, &both_on_2, &[]);
        assert_eq!(
            s,
            Spread::Known {
                bound: vec![2, 3],
                unreached: vec![3],
                source: "qstats"
            }
        );
        let no_qstats = Err(NoQstats("the driver keeps none".into()));
        assert_eq!(
            spread(
                &d,
                &no_qstats,
                &[ArrivalQueue::Queue(2), ArrivalQueue::Queue(3)]
            ),
            Spread::Known {
                bound: vec![2, 3],
                unreached: vec![],
                source: "arrival"
            }
        );
        assert_eq!(
            spread(&d, &no_qstats, &[ArrivalQueue::NoNapi]),
            Spread::Unknown(
                "no qstats: the driver keeps none; no flow's arrival queue is known".into()
            )
        );
        let mut f = three_flows_on_two_workers();
        f.device = Some(both_on_2);
        f.steering = Some(s);
        assert_eq!(
            f.queue_line().unwrap(),
            "rx queues: queue 2 9000 bytes, queue 3 0 bytes (qstats rx-bytes over the measured \
             interval, headers included)"
        );
        assert_eq!(
            f.unreached_line().unwrap(),
            "steering: the flows reached 1 of 2 bound queues (2,3): no bytes on queue 3 (qstats)"
        );
        let j = f.to_json();
        assert_eq!(
            j["steering"],
            serde_json::json!({"bound": [2, 3], "unreached": [3], "source": "qstats"})
        );
        assert_eq!(j["device_rx"]["queues"][1]["bytes"], 0);
        // Every queue reached: no warning; no device: neither line nor key.
        f.steering = Some(Spread::Known {
            bound: vec![2, 3],
            unreached: vec![],
            source: "qstats",
        });
        assert_eq!(f.unreached_line(), None);
        let plain = three_flows_on_two_workers();
        assert_eq!((plain.queue_line(), plain.unreached_line()), (None, None));
        assert!(plain.to_json().get("steering").is_none());
    }

    /// The interval's first reading takes the device's counters (queue stats and page pools)
    /// from before the listen, handed to the measurement when it began or put into its slot
    /// later (zcrx, once its ifqs are registered); without either it keeps its own.
    #[test]
    fn the_first_reading_takes_the_counters_from_before_the_listen() {
        use engine::Clock;
        let d = Device {
            ifindex: u32::MAX,
            queues: vec![2],
        };
        let rx = rx();
        let early = || EarlyReading {
            qstats: Ok(Qstats::Unsupported("early qstats".into())),
            pools: Err(Error::Failure("early pools".into())),
        };
        let taken = |m: &Measure<'_>| {
            let f = m.first.as_ref().expect("a first reading");
            (
                format!("{:?}", f.qstats),
                format!(
                    "{:?}",
                    f.pools
                        .as_ref()
                        .map(|p| p.as_ref().err().map(|e| e.to_string()))
                ),
            )
        };
        let took_early = |m: &Measure<'_>| {
            let (qstats, pools) = taken(m);
            qstats.contains("early qstats") && pools.contains("early pools")
        };
        let filled = EarlySlot::new(Some(early()));
        let mut given = Measure::begin(&rx, Some(&d), true, &filled);
        given.interval_starts();
        assert!(took_early(&given), "{:?}", taken(&given));

        let slot = EarlySlot::default();
        let mut later = Measure::begin(&rx, Some(&d), true, &slot);
        *slot.lock().unwrap() = Some(early());
        later.interval_starts();
        assert!(took_early(&later), "{:?}", taken(&later));
        assert!(
            slot.lock().unwrap().is_none(),
            "the slot's reading is taken, not copied"
        );

        let empty = EarlySlot::default();
        let mut own = Measure::begin(&rx, Some(&d), true, &empty);
        own.interval_starts();
        assert!(!taken(&own).0.contains("early"), "{:?}", taken(&own));
        assert!(!taken(&own).1.contains("early"), "{:?}", taken(&own));
    }
    /// A flow stopped by the run (its duration, another flow's failure) stops nobody; a
    /// failure of its own, or mismatches, stop the others, once; a signal already in the stop
    /// flag stays.
    /// A one-flow run without a measurement's options carries the measured runs' steering
    /// figures in its JSON: the bound queues' rx-bytes growth over its receive, per queue,
    /// and which queues it reached; a driver without qstats (or a failing qstats-get) gives
    /// `device_rx`'s `unavailable` and no `steering`, never an error; no bound queues (the
    /// plain receiver), neither.
    #[test]
    fn the_plainest_run_carries_the_steering_figures() {
        use crate::netlink::netdev::{QstatsInfo, QueueType};
        let d = Device {
            ifindex: 4,
            queues: vec![2, 3],
        };
        let rows = |b2: u64, b3: u64| {
            let q = |queue_id, rx_bytes| QstatsInfo {
                ifindex: 4,
                queue_type: Some(QueueType::Rx),
                queue_id: Some(queue_id),
                rx_bytes: Some(rx_bytes),
                ..QstatsInfo::default()
            };
            Qstats::Rows(vec![q(2, b2), q(3, b3)])
        };
        let at = Instant::now();
        let rx = rx();
        let no_early = EarlySlot::default();
        let with = |first: Result<Qstats>, last: Result<Qstats>, device| Measure {
            rx: &rx,
            device,
            queues: Vec::new(),
            netdev: None,
            first: Some(Snapshot {
                qstats: Some(first),
                ..snap(at)
            }),
            last: Some(Snapshot {
                qstats: Some(last),
                ..snap(at + Duration::from_secs(2))
            }),
            early: &no_early,
            quiet: true,
        };
        let flows = [zcrx_flow(0, 9000, 1, 1, at)];
        let (device_rx, steering) =
            with(Ok(rows(100, 5)), Ok(rows(9100, 5)), Some(&d)).queue_figures(&flows);
        let body = summary::ReceiveBody {
            totals: summary::RxTotals::default(),
            measured: None,
            device_rx,
            steering,
        };
        let j = serde_json::to_value(&body).unwrap();
        assert_eq!(j["device_rx"]["bytes"], 9000, "{j}");
        assert_eq!(
            j["device_rx"]["queues"],
            json!([{"queue": 2, "bytes": 9000, "packets": null},
                   {"queue": 3, "bytes": 0, "packets": null}])
        );
        assert_eq!(
            j["steering"],
            json!({"bound": [2, 3], "unreached": [3], "source": "qstats"})
        );
        let unsupported = || Ok(Qstats::Unsupported("Operation not supported".into()));
        let failed = || Err(Error::Failure("qstats-get: EIO".into()));
        for (first, last) in [(unsupported(), unsupported()), (Ok(rows(1, 1)), failed())] {
            let (device_rx, steering) = with(first, last, Some(&d)).queue_figures(&flows);
            match device_rx {
                Some(Some(summary::DeviceRxFigure::Unavailable(u))) => {
                    assert!(u.unavailable.starts_with("no qstats: "), "{u:?}")
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(steering, None);
        }
        let none = with(Ok(rows(0, 0)), Ok(rows(0, 0)), None).queue_figures(&flows);
        assert_eq!(none, (None, None));
        let j = serde_json::to_value(summary::ReceiveBody {
            totals: summary::RxTotals::default(),
            measured: None,
            device_rx: None,
            steering: None,
        })
        .unwrap();
        assert!(
            j.get("device_rx").is_none() && j.get("steering").is_none(),
            "{j}"
        );
    }

    #[test]
    fn the_end_of_a_flow_and_the_run_stop() {
        let shared = Shared::new(2);
        let clean = RxStats::default();
        flow_ended(&shared, &Err(Error::Interrupted(DURATION_OVER)), &clean);
        assert_eq!(shared.run_stop().load(Ordering::SeqCst), 0);
        flow_ended(&shared, &Ok(()), &clean);
        assert_eq!(shared.run_stop().load(Ordering::SeqCst), 0);
        let mismatched = RxStats {
            mismatches: 3,
            ..RxStats::default()
        };
        flow_ended(&shared, &Ok(()), &mismatched);
        assert_eq!(
            shared.run_stop().load(Ordering::SeqCst),
            crate::verdict::FLOW_FAILED
        );
        // A connection that named no flow by its first bytes stops nobody with its mismatches:
        // the others must get to name theirs.
        let unnamed = RxStats {
            mismatches: 5,
            stream: Some(
                crate::validate::StreamSpec::keyed(9)
                    .for_flow(1, 2)
                    .unwrap(),
            ),
            stream_identified: false,
            ..RxStats::default()
        };
        let quiet = Shared::new(2);
        flow_ended(&quiet, &Ok(()), &unnamed);
        assert_eq!(quiet.run_stop().load(Ordering::SeqCst), 0);
        let failed = Shared::new(2);
        flow_ended(&failed, &Err(Error::Failure("x".into())), &clean);
        assert_eq!(
            failed.run_stop().load(Ordering::SeqCst),
            crate::verdict::FLOW_FAILED
        );
        flow_ended(
            &failed,
            &Err(Error::Interrupted(crate::verdict::FLOW_FAILED)),
            &clean,
        );
        assert_eq!(
            failed.run_stop().load(Ordering::SeqCst),
            crate::verdict::FLOW_FAILED
        );
        let signalled = Shared::new(1);
        signalled.run_stop().store(libc::SIGINT, Ordering::SeqCst);
        signalled.note_failure(&Error::Timeout("idle".into()));
        assert_eq!(signalled.run_stop().load(Ordering::SeqCst), libc::SIGINT);
    }
}
