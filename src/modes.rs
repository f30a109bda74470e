//! The modes, one file each, each one function that reads top to bottom in the order of
//! ncdevmem.c's `main`: check what makes the run a skip, create the memory, configure the NIC,
//! bind, accept, receive or send, report, undo. They decide policy (which failures are skips)
//! and reach the kernel through [`crate::nic`], [`crate::udmabuf`], [`crate::uring`],
//! [`crate::rx`], [`crate::tx`], [`crate::conn`] and [`crate::release`].
//!
//! Resources are locals declared in acquisition order, so Rust drops them in reverse on every
//! exit: the TCP socket, then the memory provider (the devmem binding, or the zcrx ring),
//! then the NIC setup ([`NicRun`]: the flow rule, ntuple feature, RSS table and header split,
//! undone in that order and recorded in the [`RunReport`]), then the dma-buf. What the kernel
//! still holds of a run after that (page pools, hugepages) is waited for on exit, and what a
//! previous run still holds on start, as `crate::release` decides.
//!
//! This file holds what several modes share: the listening socket and accept, the receive
//! buffer plan, the receive and its summary, the NIC of a run, and the teardown waits.

pub(crate) mod client;
pub(crate) mod flows;
pub(crate) mod plain;
pub(crate) mod probe;
pub(crate) mod report;
pub(crate) mod sender;
pub(crate) mod server;
pub(crate) mod zcrx;

use std::os::fd::{AsFd, OwnedFd};

use crate::cli::{IfName, ModeArgs, QueueRange, Receive};
use crate::error::{Error, Result};
use crate::netlink::netdev::Netdev;
use crate::nic::guards::SharedNic;
use crate::nic::queues::{choose_queues, QueueChoice, QueuePolicy, QUEUE_FREE_WAIT};
use crate::nic::setup::NicSetup;
use crate::nic::snapshot::{verify_restored, NicSnapshot};
use crate::nic::NicOps;
use crate::rcvbuf::RcvbufPlan;
use crate::release::kernel::KernelEnv;
use crate::release::{self, Env, Holdings};
use crate::run_report::RunReport;
use crate::rx::RxConfig;
use crate::stats::{RcvbufReport, RxStats};
use crate::sys::socket::{self, TcpRxSocket};
use crate::verdict::{ConnFacts, Ended, ReceiveFacts};

/// `log!(report, "fmt", args..)`: one `ncdevmem-rs: ` line on stderr, unless `--quiet`.
macro_rules! log {
    ($report:expr, $($arg:tt)*) => {
        $report.log(format_args!($($arg)*))
    };
}
pub(crate) use log;

/// Runs the single-run mode `args` selects, recording into `report` (the lab's modes,
/// `--sweep` and `--peer-server`, are run by `app::run` through `crate::lab`).
///
/// Errors: whatever the mode returns ([`RunReport::finish`] combines it with the undo's).
pub(crate) fn run(args: &ModeArgs, report: &RunReport) -> Result<()> {
    match args {
        ModeArgs::Probe(a) => probe::run(a, report),
        ModeArgs::Report(a) => report::run(a, report),
        ModeArgs::Server(a) => server::run(a, report),
        ModeArgs::Zcrx(a) => zcrx::run(a, report),
        ModeArgs::Client(a) => client::run(a, report),
        ModeArgs::Plain(a) => plain::run(a, report),
        ModeArgs::Sender(a) => sender::run(a, report),
        // The lab's modes compose runs of these ones and sit above them: `app::run` runs them.
        ModeArgs::PeerServer(_) | ModeArgs::Sweep(_) | ModeArgs::Compare(_) => Err(Error::Failure(
            "a sweep, a comparison or a peer server is run by the lab, not as a single run".into(),
        )),
    }
}

/// Opens NIC control ([`NicOps`]) for `ifname`: the real ethtool/netdev backend
/// ([`crate::nic::real::RealNic`]).
pub(crate) fn open_nic(ifname: &IfName) -> Result<SharedNic> {
    let ops: Box<dyn NicOps> = Box::new(crate::nic::real::RealNic::open(ifname.as_str())?);
    Ok(SharedNic::new(ops))
}

/// The NIC of one run: its changes (a [`NicSetup`]) and, with `--verify-restore`, the
/// snapshot it is compared with after they are undone. [`finish`](NicRun::finish) — or,
/// on an early return, the drop — unbinds, undoes every change in reverse order, compares,
/// and records both outcomes in the run's [`RunReport`].
pub(crate) struct NicRun<'r> {
    nic: SharedNic,
    setup: NicSetup,
    before: Option<NicSnapshot>,
    report: &'r RunReport,
    finished: bool,
}

impl<'r> NicRun<'r> {
    /// Takes the `--verify-restore` snapshot (when `verify`) of `nic`; no change yet.
    ///
    /// Errors: reading the NIC state for the snapshot.
    pub(crate) fn new(nic: &SharedNic, verify: bool, report: &'r RunReport) -> Result<Self> {
        let before = match verify {
            true => Some(nic.with(|n| Ok(NicSnapshot::take(n)))?),
            false => None,
        };
        let setup = NicSetup::new(nic.clone())
            .quiet(report.quiet())
            .teardown_wait(QUEUE_FREE_WAIT);
        Ok(NicRun {
            nic: nic.clone(),
            setup,
            before,
            report,
            finished: false,
        })
    }

    /// The changes made so far (to make more).
    pub(crate) fn setup(&mut self) -> &mut NicSetup {
        &mut self.setup
    }

    /// Undoes everything now and records the outcome (see the type docs).
    pub(crate) fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        // While unwinding after a panic, the NIC setup's own drop undoes and logs.
        if std::mem::replace(&mut self.finished, true) || std::thread::panicking() {
            return;
        }
        self.report.undo(self.setup.finish());
        if let Some(before) = self.before.take() {
            let verified = verify_restored(&self.nic, &before);
            if verified.is_ok() {
                log!(
                    self.report,
                    "{}: NIC state matches its snapshot from before the run",
                    self.nic.ifname()
                );
            }
            self.report.verified(verified);
        }
    }
}

impl Drop for NicRun<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the kernel still holds of a run once it ends — its queues, page pools and hugepages
/// ([`Holdings`]) — waited for ([`await_release`]) when this is finished or, on an early
/// return, dropped. Declared before the NIC setup and the memory, so that it drops after
/// them: the wait starts once everything is unbound, closed and unmapped.
pub(crate) struct Teardown<'r> {
    env: KernelEnv,
    held: Option<Holdings>,
    report: &'r RunReport,
}

impl<'r> Teardown<'r> {
    /// Nothing held yet; the kernel readings go through `env`.
    pub(crate) fn new(env: KernelEnv, report: &'r RunReport) -> Self {
        Teardown {
            env,
            held: None,
            report,
        }
    }

    /// The kernel readings (for the waits and nudges before the teardown).
    pub(crate) fn env(&mut self) -> &mut KernelEnv {
        &mut self.env
    }

    /// What to wait for (replacing what was set before).
    pub(crate) fn hold(&mut self, held: Holdings) {
        self.held = Some(held);
    }

    /// What is held so far, to add to.
    pub(crate) fn held(&mut self) -> Option<&mut Holdings> {
        self.held.as_mut()
    }

    /// Waits now (see the type docs).
    pub(crate) fn finish(mut self) {
        self.wait();
    }

    fn wait(&mut self) {
        if let Some(held) = self.held.take().filter(|_| !std::thread::panicking()) {
            await_release(&mut self.env, &held, self.report);
        }
    }
}

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        self.wait();
    }
}

/// [`choose_queues`] for `-t`/`-q` (or the policy's default), waiting up to
/// [`QUEUE_FREE_WAIT`] for queues a previous run still holds; its notes are logged.
pub(crate) fn pick_queues(
    nic: &SharedNic,
    queues: Option<QueueRange>,
    policy: QueuePolicy,
    skip_nic_config: bool,
    report: &RunReport,
) -> Result<QueueChoice> {
    let explicit = queues.map(|q| (q.start, q.count));
    let choice = choose_queues(nic, explicit, policy, QUEUE_FREE_WAIT, skip_nic_config)?;
    for note in &choice.notes {
        log!(report, "{note}");
    }
    Ok(choice)
}

/// Before allocating `pages` 2 MiB hugepages (none: nothing to do): waits while a previous
/// binding still holds them ([`release::await_hugepages`]) and logs how long it waited.
///
/// Errors: the hugepage skip (naming what still holds them), `Error::Interrupted`, errors
/// reading the hugepage pool.
pub(crate) fn await_hugepages(env: &mut dyn Env, pages: u64, report: &RunReport) -> Result<()> {
    if pages == 0 {
        return Ok(());
    }
    if let Some(line) = release::await_hugepages(env, pages, release::WAIT)? {
        log!(report, "{line}");
    }
    Ok(())
}

/// On exit, once everything is unbound, closed and unmapped: waits until the kernel gave
/// back what `held` names ([`release::await_release`]). One line when it had to wait (not with
/// `--quiet`); one line, always, when something is still held at the end. Never changes the
/// run's result.
pub(crate) fn await_release(env: &mut dyn Env, held: &Holdings, report: &RunReport) {
    match release::await_release(env, held, release::WAIT) {
        Ok(r) => match r.log_line() {
            Some(line) if r.still.is_empty() => log!(report, "{line}"),
            Some(line) => report.warn(format_args!("{line}")),
            None => {}
        },
        Err(e) => report.warn(format_args!(
            "could not check that the kernel gave back what {} held: {e}",
            held.what
        )),
    }
}

/// A peer address as the user wrote its family: an IPv4 peer of the AF_INET6 listener
/// (v4-mapped, `[::ffff:a.b.c.d]:p`) as `[a.b.c.d]:p`, like the listening line.
pub(crate) fn peer_text(peer: std::net::SocketAddr) -> String {
    format!("[{}]:{}", peer.ip().to_canonical(), peer.port())
}

/// An accepted connection and, when the receiver planned one, the receive buffer it got.
pub(crate) struct Accepted {
    /// The connection.
    pub sock: TcpRxSocket,
    /// What `SO_RCVBUF` became, and why.
    pub rcvbuf: Option<RcvbufReport>,
    /// `SO_RCVLOWAT` as the kernel kept it (bytes), once `--rcvlowat` set it.
    pub rcvlowat: Option<u32>,
}

/// Binds `-s`:`-p` with the receive buffer of `plan` (when it sets one) and the congestion
/// control of `--tcp-cc` (accepted connections inherit both), and prints where it listens
/// (`listening on [ADDR]:PORT`, PORT the bound one, so `-p 0` names the port it got).
///
/// Then `--pid-file` is written ([`RunReport::listening`]).
///
/// Errors: socket errors; `Error::Usage` for a congestion control the kernel does not have;
/// the `--pid-file` write's.
pub(crate) fn listen(
    rx: &Receive,
    plan: Option<&RcvbufPlan>,
    report: &RunReport,
) -> Result<OwnedFd> {
    let backlog = rx.flows.count.max(1);
    let addr = rx.addr.with_port(rx.port);
    let listener = socket::tcp_listen_backlog(addr, plan.and_then(|p| p.bytes), backlog)?;
    if let Some(cc) = &rx.flows.tcp_cc {
        crate::figures::tcp::set_congestion(listener.as_fd(), "--tcp-cc", cc)?;
    }
    if let Some(p) = plan {
        log!(report, "receive buffer: {}", p.reason);
    }
    // The bound port: `-p 0` asks the kernel for a free one, and this line is how a caller
    // learns it (the same line as with a port given; then also with --quiet).
    let port = socket::local_addr(listener.as_fd()).map_or(rx.port, |a| a.port());
    let line = format_args!("listening on [{}]:{port}", rx.addr.ip);
    match rx.port {
        0 => report.warn(line),
        _ => report.log(line),
    }
    report.listening()?;
    Ok(listener)
}

/// `--tcp-cc NAME`, asked before anything changes: a throwaway listening socket (port 0)
/// takes it, or the run is a usage error naming the algorithms this machine has.
///
/// Errors: `Error::Usage`; socket errors.
pub(crate) fn check_tcp_cc(rx: &Receive) -> Result<()> {
    match &rx.flows.tcp_cc {
        Some(cc) => check_tcp_cc_name(cc),
        None => Ok(()),
    }
}

/// [`check_tcp_cc`] for one name.
///
/// Errors: as [`check_tcp_cc`].
pub(crate) fn check_tcp_cc_name(cc: &str) -> Result<()> {
    check_tcp_cc_name_of("--tcp-cc", cc)
}

/// [`check_tcp_cc_name`] with the errors naming `flag` (a sweep's `--sweep tcp-cc`).
///
/// Errors: as [`check_tcp_cc`].
pub(crate) fn check_tcp_cc_name_of(flag: &str, cc: &str) -> Result<()> {
    let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, 0, 0, 0);
    let probe = socket::tcp_listen(any, None)?;
    crate::figures::tcp::set_congestion(probe.as_fd(), flag, cc)
}

/// Where a receive's buffers come from, to explain a stall: the devmem binding or the zcrx
/// ifq's device, and how many buffers it has.
pub(crate) struct StallContext {
    /// Page pools that take their memory from this binding (devmem).
    pub dmabuf_id: Option<u32>,
    /// io_uring page pools of this interface (zcrx).
    pub io_uring_ifindex: Option<u32>,
    /// Buffers of the binding or area.
    pub buffers: u64,
}

/// An idle timeout of a devmem or zcrx receive, explained from the kernel's own counters:
/// the page pools' buffers in flight, the bytes queued in the socket, and what that means.
pub(crate) fn explain_stall(
    e: Error,
    ctx: &StallContext,
    sock: &TcpRxSocket,
    rcvbuf: Option<&RcvbufReport>,
) -> Error {
    let Error::Timeout(msg) = e else {
        return e;
    };
    let pools = match Netdev::open().and_then(|mut n| n.page_pool_get_dump()) {
        Ok(p) => p,
        Err(q) => return Error::Timeout(format!("{msg}; (page-pool-get for a diagnosis: {q})")),
    };
    let inflight: u64 = pools
        .iter()
        .filter(|p| {
            ctx.dmabuf_id.is_some_and(|id| p.dmabuf == Some(id))
                || ctx
                    .io_uring_ifindex
                    .is_some_and(|i| p.io_uring && p.ifindex == Some(i))
        })
        .filter_map(|p| p.inflight)
        .sum();
    let queued = socket::inq(sock.fd()).map_or("?".to_string(), |n| n.to_string());
    let window = rcvbuf.map_or("the kernel's default".to_string(), |r| {
        format!("{} bytes", r.effective)
    });
    let why = if inflight.saturating_mul(10) >= ctx.buffers.saturating_mul(9) {
        format!(
            "the NIC has (nearly) no free buffer, none of them held by this tool: the dmabuf is \
             too small for the TCP window (receive buffer {window}); a larger --dmabuf-size or \
             a smaller --rcvbuf avoids it"
        )
    } else {
        "the NIC has free buffers: the peer stopped sending, or the flow lands on another queue"
            .to_string()
    };
    Error::Timeout(format!(
        "{msg}; stalled with {inflight} of {} buffers in flight in the page pools, 0 held by \
         {}, {queued} bytes queued in the socket: {why}",
        ctx.buffers,
        crate::cli::PROGRAM
    ))
}

/// The receive-loop settings every receiver shares, on top of `base` (plain or devmem).
pub(crate) fn rx_config(
    rx: &Receive,
    fail_on_linear: bool,
    base: RxConfig,
    report: &RunReport,
) -> RxConfig {
    RxConfig {
        fail_on_linear,
        validate: rx.validate,
        idle_timeout: rx.timeout,
        progress_interval: rx.progress,
        verbose: report.verbose(),
        ..base
    }
}

/// The facts of the one flow of a single-flow receive that left `stats` and ended with its
/// own result `own` (a stop signal, an error, or `Ok` when the peer closed).
pub(crate) fn one_flow_facts(rx: &Receive, stats: &RxStats, own: &Result<()>) -> ReceiveFacts {
    ReceiveFacts {
        flows: 1,
        expect_bytes: rx.expect_bytes,
        ended: match own {
            Err(Error::Interrupted(sig)) => Ended::Signal(*sig),
            _ => Ended::PeersClosed,
        },
        conns: vec![ConnFacts::of_receive(stats, own)],
        whole_duration: None,
        ended_in_warmup: None,
        // `--require-spread` makes a run measured (`flows::measured`): one that is not has no
        // figure of its queues, so the requirement cannot be met.
        require_spread: rx
            .require_spread
            .then(|| crate::verdict::Spread::Unknown("the run was not measured".into())),
    }
}

/// The steering figures a one-flow run without a measurement's options records in its JSON
/// ([`flows::Measure::queue_figures`]); both `None` without bound queues.
pub(crate) struct QueueFigures {
    /// The bound queues' RX growth over the receive, each queue's included (`Some(None)`
    /// never: a run with bound queues has the figure or why there is none).
    pub device_rx: Option<Option<crate::summary::DeviceRxFigure>>,
    /// Which bound queues the flow reached, when that is known.
    pub steering: Option<crate::summary::SteeringFigure>,
}

/// The verdict of a single-flow receive from its facts ([`crate::verdict::judge_receive`]:
/// an error of its own, mismatches, `--expect-bytes`, a validated stream that carried
/// nothing); prints its summary line and records its JSON object (with `queues`, the
/// steering figures) and its facts in `report`
/// (also when the run failed, so a failed run is still a measurement).
///
/// Errors: the verdict's.
pub(crate) fn record_receive(
    rx: &Receive,
    stats: &RxStats,
    own: Result<()>,
    queues: QueueFigures,
    report: &RunReport,
) -> Result<()> {
    let facts = one_flow_facts(rx, stats, &own);
    let verdict = crate::verdict::judge_receive(&facts);
    report.summary(&stats.summary_line());
    report.body(crate::summary::Body::Receive(Box::new(
        crate::summary::ReceiveBody {
            totals: stats.totals(),
            measured: None,
            device_rx: queues.device_rx,
            steering: queues.steering,
        },
    )));
    report.receive(facts);
    verdict.result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Command, Mode, Run};
    use crate::netlink::netdev::{policy::bind_rx_policy_attrs, NETDEV_A_DMABUF_RX_PAGE_SIZE};

    #[test]
    fn peers_are_named_in_their_own_family() {
        let v4: std::net::SocketAddr = "[::ffff:198.51.100.2]:42736".parse().unwrap();
        assert_eq!(peer_text(v4), "[198.51.100.2]:42736");
        let v6: std::net::SocketAddr = "[2001:db8::2]:5201".parse().unwrap();
        assert_eq!(peer_text(v6), "[2001:db8::2]:5201");
    }

    /// The run of command line `args`.
    fn parsed(args: &[&str]) -> Run {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match crate::cli::parse(&argv, crate::sys::page_size()) {
            Ok(Command::Run(run)) => run,
            other => panic!("{args:?} is not a run: {other:?}"),
        }
    }

    /// Probe with `-b` on a kernel whose bind-rx has no rx-page-size is a skip naming that,
    /// decided before the NIC is changed (and before udmabuf, which this host may lack): the
    /// same early check the server makes. Uses `lo`, which the checks never change.
    #[test]
    fn probe_with_b_checks_rx_page_size_before_the_nic() {
        const TEST: &str = "probe_with_b_checks_rx_page_size_before_the_nic";
        match bind_rx_policy_attrs() {
            Ok(attrs) if attrs.contains(&NETDEV_A_DMABUF_RX_PAGE_SIZE) => {
                eprintln!("skip: {TEST}: this kernel's bind-rx knows rx-page-size");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("skip: {TEST}: cannot read the bind-rx policy: {e}");
                return;
            }
        }
        let run = parsed(&["-f", "lo", "-b", "16384", "--quiet"]);
        let ModeArgs::Probe(a) = &run.mode else {
            panic!("not the probe: {run:?}");
        };
        let report = RunReport::new(Mode::Probe, run.common.clone());
        let e = probe::run(a, &report).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP, "{e}");
        assert!(
            e.to_string()
                .contains("-b 16384: this kernel's bind-rx has no rx-page-size attribute"),
            "{e}"
        );
    }

    /// `-v` wants data, except after a `-U 1` run ended at ENODEV ("binding gone").
    #[test]
    fn binding_gone_needs_no_stream() {
        let server = [
            "-l", "-f", "lo", "-s", "::1", "-p", "1", "-v", "7", "-U", "1",
        ];
        let rx = |args: &[&str]| match parsed(args).mode {
            ModeArgs::Server(s) => s.rx,
            other => panic!("not the server: {other:?}"),
        };
        let check_received = |rx: &Receive, stats: &RxStats| {
            crate::verdict::judge_receive(&one_flow_facts(rx, stats, &Ok(()))).result
        };
        let mut stats = RxStats::new(crate::stats::RxMode::Devmem);
        stats.stream = Some(crate::validate::StreamSpec::Periodic(7));
        assert_eq!(
            check_received(&rx(&server), &stats)
                .unwrap_err()
                .to_string(),
            "the peer closed without sending any data: nothing was validated"
        );
        stats.binding_gone = true;
        check_received(&rx(&server), &stats).unwrap();
        // --expect-bytes is a promise about the stream that a gone binding does not excuse.
        let with_expect = [&server[..], &["--expect-bytes", "1000"]].concat();
        assert_eq!(
            check_received(&rx(&with_expect), &stats)
                .unwrap_err()
                .to_string(),
            "the peer sent 0 bytes, --expect-bytes wanted 1000"
        );
    }
}
