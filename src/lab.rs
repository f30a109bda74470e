//! The lab: sweeps that compose single runs into the tables the kernel series report, and the
//! peer that sends them.
//!
//! A sweep (`-l … --peer ADDR [--sweep KEY=V1,V2,…] [--runs R]`) runs the receive mode as
//! typed — the devmem server, the zcrx server or the plain receiver, each run a whole run of
//! that mode through `crate::modes`, with its own NIC setup, binding and undo (so an
//! rx-page-size point binds afresh and waits for the previous binding's hugepages as any run
//! does) — once per point and run, interleaved ([`plan`]). For each run, once the receiver
//! listens, the sweep asks the peer ([`peer`], over [`proto`]) to send the run's flows for
//! the run's duration; the run's own JSON summary and the peer's figures become the run's
//! numbers ([`results`]). At the end: the table on stdout, and with `--csv`, `--json`,
//! `--plot` the raw runs and the picture ([`plot`]).
//!
//! A run that fails (validation, a flow) is marked and the sweep goes on; it fails the sweep
//! (exit 1) after the table. A point the kernel cannot run (a skip) is marked skipped and its
//! other runs are not tried; a sweep with a skipped run and no failed one is a skip (exit 4),
//! also when other points passed ([`results::sweep_verdict`]). The peer
//! unreachable, refusing or answering garbage, or a stop signal, stops the sweep: the table of
//! the runs so far is still printed and written, and the NIC is undone by the run itself.

pub(crate) mod compare;
pub(crate) mod hooks;
pub(crate) mod peer;
pub(crate) mod plan;
pub(crate) mod plot;
pub(crate) mod proto;
pub(crate) mod provenance;
pub(crate) mod results;
pub(crate) mod table;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cli::{Common, ModeArgs, Receive, SweepArgs, PROGRAM};
use crate::error::{Error, Result};
use crate::figures::cpu::ProcStat;
use crate::run_report::RunReport;
use crate::signals::STOP;
use crate::summary::sweep::{
    PlanFigure, QueueRangeFigure, RunFigure, RunOutcomeName, SweepBody, SweepEnvironment,
};
use crate::summary::{ModeName, ReceiveBody};
use crate::validate::StreamSpec;
use peer::PeerClient;
use plan::{Plan, Slot, SweepKey};
use proto::Stream;
use results::{Outcome, RunRecord, SweepVerdict};
use table::{wrap, wrap_units, MAIL_WIDTH};

/// How much longer than the receiver's duration the peer is asked to send: the receiver
/// closes first (a clean end for both), the peer's own duration is only its bound.
const SEND_MARGIN: Duration = Duration::from_secs(5);
/// How long after the peer's send duration its `done` may take.
const DONE_WAIT: Duration = Duration::from_secs(30);

/// The receive of a sweep's mode.
fn receive_of(args: &ModeArgs) -> Option<&Receive> {
    match args {
        ModeArgs::Server(a) => Some(&a.rx),
        ModeArgs::Zcrx(a) => Some(&a.rx),
        ModeArgs::Plain(a) => Some(&a.rx),
        _ => None,
    }
}

/// The folder a hook is given for its files (`NCDEVMEM_OUT_DIR`): that of the sweep's
/// `--json` file, else of `--csv`, else of `--plot`, else the current folder.
fn out_dir(a: &SweepArgs, report: &RunReport) -> PathBuf {
    let file = report
        .json_file()
        .or(a.csv.as_deref())
        .or(a.plot.as_deref());
    let dir = file
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// `base` with the value of a point of `key` applied.
fn point_args(base: &ModeArgs, key: Option<SweepKey>, value: Option<u64>) -> ModeArgs {
    let mut args = base.clone();
    let (Some(key), Some(v)) = (key, value) else {
        return args;
    };
    match (&mut args, key) {
        (ModeArgs::Server(a), SweepKey::RxPageSize) => a.rx_page_size = u32::try_from(v).ok(),
        (ModeArgs::Server(a), SweepKey::Autorelease) => a.bind_autorelease = Some(v != 0),
        (ModeArgs::Zcrx(a), SweepKey::RxBufLen) => a.rx_buf_len = u32::try_from(v).ok(),
        (ModeArgs::Server(a), SweepKey::Flows) => a.rx.flows.count = v as u32,
        (ModeArgs::Zcrx(a), SweepKey::Flows) => a.rx.flows.count = v as u32,
        (ModeArgs::Plain(a), SweepKey::Flows) => a.rx.flows.count = v as u32,
        (ModeArgs::Server(a), SweepKey::DmabufSize) => a.dmabuf_size = Some(v),
        (ModeArgs::Zcrx(a), SweepKey::DmabufSize) => a.area_size = Some(v),
        (ModeArgs::Plain(a), SweepKey::HdsThresh) => a.hds_thresh = u32::try_from(v).ok(),
        // A devmem or zcrx server sets hds-thresh 0 itself; the command line refuses any
        // other point for them.
        (ModeArgs::Server(_) | ModeArgs::Zcrx(_), SweepKey::HdsThresh) => {}
        // The peer's: applied by the run ([`one_run`]'s `peer_write_size`).
        (_, SweepKey::WriteSize) => {}
        // Named: [`named_point_args`].
        (_, SweepKey::TcpCc) => {}
        // The command line refuses a key its mode does not take.
        _ => {}
    }
    args
}

/// `args` with the name of a named key's point applied: tcp-cc's is every flow's
/// `--tcp-cc` (the peer sends with the receiver's: [`one_run`]).
fn named_point_args(mut args: ModeArgs, key: Option<SweepKey>, name: Option<&str>) -> ModeArgs {
    if let (Some(SweepKey::TcpCc), Some(name)) = (key, name) {
        match &mut args {
            ModeArgs::Server(a) => a.rx.flows.tcp_cc = Some(name.to_string()),
            ModeArgs::Zcrx(a) => a.rx.flows.tcp_cc = Some(name.to_string()),
            ModeArgs::Plain(a) => a.rx.flows.tcp_cc = Some(name.to_string()),
            _ => {}
        }
    }
    args
}

/// The stream the peer sends for a receive that validates `spec`.
fn peer_stream(spec: Option<StreamSpec>) -> Stream {
    match spec {
        Some(StreamSpec::Periodic(p)) => Stream::Period(p),
        Some(StreamSpec::Keyed(k)) => Stream::Seed(k.seed()),
        _ => Stream::Seed(crate::cli::DEFAULT_SWEEP_SEED),
    }
}

/// Runs the sweep `a` (see the module docs), recording the sweep's JSON object in `report`.
///
/// Errors: the first of: what stopped the sweep (the peer, naming the run; a stop signal);
/// [`Error::Failure`] when a run failed; the skip of the first skipped point when a run was
/// skipped and none failed ([`results::sweep_verdict`]); writing `--csv` or `--plot`.
pub(crate) fn run(a: &SweepArgs, report: &RunReport) -> Result<()> {
    let plan = Plan::new(a.sweep.as_ref(), a.runs);
    let rx =
        receive_of(&a.base).ok_or_else(|| Error::Usage("a sweep runs a receiver (-l)".into()))?;
    for (flag, path) in [("--csv", &a.csv), ("--plot", &a.plot)] {
        if let Some(path) = path {
            check_output(flag, path)?;
        }
    }
    check_columns(a, &plan)?;
    // Every congestion control a tcp-cc sweep names must be one this kernel has, before the
    // first run (the peer checks its own at each run).
    if plan.key == Some(SweepKey::TcpCc) {
        for name in &plan.names {
            crate::modes::check_tcp_cc_name_of("--sweep tcp-cc", name)?;
        }
    }
    let baseline = read_baseline(a, &plan, rx)?;
    if let Some(path) = &a.plot {
        plot::PlotFormat::of(path).map_err(|e| Error::Usage(format!("--plot: {e}")))?;
    }
    let duration = a.duration;
    report.summary(&format!("{PROGRAM}: {}", describe(&plan, a, rx)));
    let local = rx.addr.with_port(0);
    let peer_addr = a.peer.with_port(a.peer_port);
    let started = Instant::now();
    let mut peer_provenance = None;
    let ended = match connect_and_ask(peer_addr, local, report) {
        Err(e) => Ended {
            records: Vec::new(),
            first_skip: None,
            stopped: Some(e),
        },
        Ok((mut client, host)) => {
            peer_provenance = host;
            if client.limits.max_duration < duration + SEND_MARGIN {
                report.warn(format_args!(
                    "--peer {}: it sends at most {} s per run (its --max-duration); runs \
                     of {:.1} s may end early",
                    client.name,
                    client.limits.max_duration.as_secs_f64(),
                    duration.as_secs_f64()
                ));
            }
            let ended = run_points(&mut client, &plan, a, report, started);
            client.bye();
            ended
        }
    };
    let Ended {
        records,
        first_skip,
        stopped,
    } = ended;
    let verdict = results::sweep_verdict(
        records.iter().map(|r| &r.outcome),
        plan.total(),
        stopped.is_some(),
    );
    let extras = Extras {
        peer_provenance,
        baseline,
    };
    let written = output(
        &plan,
        a,
        rx,
        &records,
        stopped.as_ref(),
        verdict,
        extras,
        report,
    );
    let verdict = match (verdict, stopped) {
        (_, Some(e)) => Err(e),
        (SweepVerdict::Pass { .. }, None) => Ok(()),
        (SweepVerdict::Fail { failed, ran }, None) => Err(Error::Failure(format!(
            "sweep: {failed} of {ran} runs failed (marked in the table)"
        ))),
        (SweepVerdict::Skip { skipped, planned }, None) => Err(first_skip.unwrap_or_else(|| {
            Error::Failure(format!(
                "sweep: {skipped} of {planned} planned runs skipped (named in the table)"
            ))
        })),
        (SweepVerdict::Stopped { ran, planned }, None) => Err(Error::Failure(format!(
            "sweep: only {ran} of {planned} planned runs ran"
        ))),
    };
    match (verdict, written) {
        (Err(e), Err(w)) => {
            report.warn(format_args!("{w}"));
            Err(e)
        }
        (Ok(()), Err(w)) => Err(w),
        (v, Ok(())) => v,
    }
}

/// What the runs of a sweep left: each run's record, the first skip (a point's skip is the
/// sweep's reason when every run skipped), and what stopped the sweep early, if anything.
struct Ended {
    records: Vec<RunRecord>,
    first_skip: Option<Error>,
    stopped: Option<Error>,
}

/// Runs every slot of `plan` in its order through the peer `client`: the hooks around each
/// run, the run, and its record. Stops at a stop signal, at a usage error (the same for every
/// run) or when the peer fails; a skip skips the rest of its point.
fn run_points(
    client: &mut PeerClient,
    plan: &Plan,
    a: &SweepArgs,
    report: &RunReport,
    started: Instant,
) -> Ended {
    let mut records: Vec<RunRecord> = Vec::new();
    let mut first_skip: Option<Error> = None;
    let mut stopped: Option<Error> = None;
    let mut skipped: Vec<Option<String>> = vec![None; plan.points.len()];
    if plan.key == Some(SweepKey::Autorelease) {
        if let Some(e) = autorelease_missing() {
            skipped = vec![Some(format!("--sweep autorelease: {e}")); plan.points.len()];
            first_skip = Some(e);
        }
    }
    for slot in plan.order() {
        let sig = STOP.load(Ordering::SeqCst);
        if sig != 0 {
            stopped = Some(Error::Interrupted(sig));
            break;
        }
        let name = format!(
            "run {}/{}: {} run {}/{}",
            slot.index + 1,
            plan.total(),
            plan.label(slot.point),
            slot.run + 1,
            plan.runs
        );
        if let Some(why) = &skipped[slot.point] {
            records.push(RunRecord::new(
                slot,
                Outcome::Skipped(why.clone()),
                Default::default(),
            ));
            continue;
        }
        report.log(format_args!(
            "{name}{}",
            eta(started, slot.index, plan.total())
        ));
        let mut env = hook_env(plan, slot, out_dir(a, report));
        let hook_figures = match pre_run(a, &env, slot, &name, report) {
            Ok(figures) => figures,
            Err(not_made) => {
                records.push(*not_made);
                continue;
            }
        };
        let args = named_point_args(
            point_args(&a.base, plan.key, plan.points[slot.point]),
            plan.key,
            plan.name(slot.point),
        );
        let write_size = match plan.key {
            Some(SweepKey::WriteSize) => plan.points[slot.point],
            _ => a.peer_write_size,
        };
        let ran = one_run(client, &args, a, write_size, slot, report)
            .map(|(rec, verdict)| post_run(a, &mut env, hook_figures, rec, verdict));
        match ran {
            Err(peer_failed) => {
                stopped = Some(Error::Failure(format!("{name}: {peer_failed}")));
                break;
            }
            Ok((_, Err(Error::Usage(why)))) => {
                // The same for every run: the sweep stops (exit 2).
                stopped = Some(Error::Usage(format!("{name}: {why}")));
                break;
            }
            Ok((rec, verdict)) => {
                let interrupted = matches!(verdict, Err(Error::Interrupted(_)));
                if let Err(e @ Error::Skip(_)) = verdict {
                    skipped[slot.point] = rec.outcome.why().map(str::to_string);
                    first_skip.get_or_insert(e);
                } else if let Err(e) = &verdict {
                    report.warn(format_args!(
                        "{name}: FAILED: {e}{}",
                        peer_side(rec.peer.as_ref())
                    ));
                }
                records.push(rec);
                if interrupted {
                    stopped = Some(Error::Interrupted(STOP.load(Ordering::SeqCst)));
                    break;
                }
            }
        }
    }
    Ended {
        records,
        first_skip,
        stopped,
    }
}

/// What the hooks of the run in `slot` see of it (its outcome once it ran).
fn hook_env(plan: &Plan, slot: Slot, out_dir: PathBuf) -> hooks::HookEnv {
    hooks::HookEnv {
        run: slot.index + 1,
        runs: plan.total(),
        point: plan.label(slot.point),
        key: plan.key.map(SweepKey::name).unwrap_or_default().into(),
        value: plan.value(slot.point).unwrap_or_default(),
        point_run: slot.run + 1,
        out_dir,
        outcome: None,
    }
}

/// Before a run: its `--pre-run` hook, if any. Returns the hook's figure, or the record of a
/// run that was not made because the hook failed (logged as the run `name`'s failure).
fn pre_run(
    a: &SweepArgs,
    env: &hooks::HookEnv,
    slot: Slot,
    name: &str,
    report: &RunReport,
) -> std::result::Result<Vec<crate::summary::sweep::HookFigure>, Box<RunRecord>> {
    let Some(cmd) = &a.pre_run else {
        return Ok(Vec::new());
    };
    let h = hooks::run("pre-run", cmd, env, hooks::HOOK_LIMIT, &STOP);
    let Some(why) = h.error.clone() else {
        return Ok(vec![h]);
    };
    let why = format!("--pre-run: {why} (the run was not made)");
    report.warn(format_args!("{name}: FAILED: {why}"));
    let mut rec = RunRecord::new(slot, Outcome::Failed(why), Default::default());
    rec.hooks = vec![h];
    Err(Box::new(rec))
}

/// After a run: its `--post-run` hook, if any (a failing hook fails the run, naming both
/// failures when the run had failed too; a stop or usage verdict stays as it is), and the
/// figures of its hooks into its record.
fn post_run(
    a: &SweepArgs,
    env: &mut hooks::HookEnv,
    mut hook_figures: Vec<crate::summary::sweep::HookFigure>,
    mut rec: RunRecord,
    mut verdict: Result<()>,
) -> (RunRecord, Result<()>) {
    if let Some(cmd) = &a.post_run {
        env.outcome = Some(rec.outcome.name());
        let h = hooks::run("post-run", cmd, env, hooks::HOOK_LIMIT, &STOP);
        if let Some(why) = &h.error {
            let why = match &rec.outcome {
                Outcome::Failed(e) => format!("{e}; --post-run: {why}"),
                _ => format!("--post-run: {why}"),
            };
            rec.outcome = Outcome::Failed(why.clone());
            if !matches!(verdict, Err(Error::Interrupted(_) | Error::Usage(_))) {
                verdict = Err(Error::Failure(why));
            }
        }
        hook_figures.push(h);
    }
    rec.hooks = hook_figures;
    (rec, verdict)
}

/// Connects to the peer and asks it to describe its host: the client and the peer's
/// provenance. A peer that predates `about` ends that session (its `error` is logged): the
/// connection is made again and the sweep goes on without the peer's provenance.
///
/// Errors: as [`PeerClient::connect`].
fn connect_and_ask(
    peer: std::net::SocketAddrV6,
    local: std::net::SocketAddrV6,
    report: &RunReport,
) -> Result<(PeerClient, Option<crate::summary::sweep::Provenance>)> {
    let mut client = PeerClient::connect(peer, Some(local))?;
    match client.about() {
        Ok(host) => Ok((client, Some(host))),
        Err(e) => {
            report.log(format_args!(
                "the peer does not describe its host ({e}); going on without its provenance"
            ));
            Ok((PeerClient::connect(peer, Some(local))?, None))
        }
    }
}

/// The skip of every point of a sweep over `autorelease` on a kernel whose bind-rx has no
/// autorelease attribute (neither point then measures what it names); `None` when it has
/// it, or when the policy cannot be read (each run then finds out for itself).
fn autorelease_missing() -> Option<Error> {
    let policy = crate::netlink::netdev::policy::bind_rx_policy().ok()?;
    crate::caps::bind_autorelease(true, &policy)
        .err()
        .map(Error::Skip)
}

/// ` (ETA 1 min 20 s)` after the first run: the mean time per run so far times the runs left.
fn eta(started: Instant, done: usize, total: usize) -> String {
    if done == 0 {
        return String::new();
    }
    let per = started.elapsed().as_secs_f64() / done as f64;
    let left = (per * (total - done) as f64).round() as u64;
    format!(" (ETA {} min {} s)", left / 60, left % 60)
}

/// The peer's control address as a socket address is written: `[2001:db8::2]:4343` (IPv6 in
/// brackets), `192.0.2.2:4343` (an IPv4 peer, also when given v4-mapped).
fn peer_endpoint(a: &SweepArgs) -> String {
    std::net::SocketAddr::new(a.peer.ip.to_canonical(), a.peer_port).to_string()
}

/// The sweep's first line: what runs, how often, in which order.
fn describe(plan: &Plan, a: &SweepArgs, rx: &Receive) -> String {
    let what = match (&a.sweep, plan.key) {
        (Some(_), Some(k)) => format!(
            "sweep of {} over {}",
            k.name(),
            (0..plan.points.len())
                .map(|p| plan.show(p))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => "one configuration".to_string(),
    };
    format!(
        "{what}, {} each of {:.1} s{}, flows {}, against the peer {} ({}); runs interleaved \
         (run 1 of every point, then run 2, ...) so drift of the machine spreads over all \
         points; values are mean +/- sample sd over the runs that passed",
        crate::figures::count(plan.runs, "run"),
        a.duration.as_secs_f64(),
        rx.flows
            .warmup
            .map(|w| format!(" ({:.1} s warm-up)", w.as_secs_f64()))
            .unwrap_or_default(),
        match plan.key {
            Some(SweepKey::Flows) => "as swept".to_string(),
            _ => rx.flows.count.to_string(),
        },
        peer_endpoint(a),
        match (a.peer_send, a.peer_write_size) {
            (crate::cli::PeerSend::Plain, None) => "plain TCP".to_string(),
            (crate::cli::PeerSend::Plain, Some(w)) => format!("plain TCP, {w}-byte writes"),
            (crate::cli::PeerSend::Devmem, None) => "devmem TX".to_string(),
            (crate::cli::PeerSend::Devmem, Some(w)) => format!("devmem TX, {w}-byte pieces"),
        }
    )
}

/// The summary name of the receive mode `args` runs.
fn mode_name(args: &ModeArgs) -> ModeName {
    match args {
        ModeArgs::Server(_) => ModeName::Devmem,
        ModeArgs::Zcrx(_) => ModeName::Zcrx,
        _ => ModeName::PlainTcp,
    }
}

/// The record of a run of `mode` at `slot`: its outcome, its summary `body` (the receiver's
/// typed body; a run that ended before its summary, or any other body, has no figures), the
/// peer's figures and the CPU shares measured around it; from the body, where its NET_RX
/// softirqs ran over its measured interval and whether its traffic reached every bound queue.
fn record(
    mode: ModeName,
    slot: Slot,
    outcome: Outcome,
    body: Option<crate::summary::Body>,
    peer: Option<proto::PeerFigures>,
    cpu: Option<&crate::figures::cpu::CpuShares>,
) -> RunRecord {
    let body: Option<ReceiveBody> = match body {
        Some(crate::summary::Body::Receive(b)) => Some(*b),
        _ => None,
    };
    let numbers = body
        .as_ref()
        .map(|b| results::of_run(mode, b, peer.as_ref(), cpu))
        .unwrap_or_default();
    RunRecord {
        net_rx: body.as_ref().and_then(results::net_rx_of),
        steering: body.as_ref().and_then(results::steering_of),
        body,
        peer,
        ..RunRecord::new(slot, outcome, numbers)
    }
}

/// The peer's side of a failed run, for its line: what it sent on each of its connections
/// (in the order it connected them) and its error, so a flow that received nothing shows
/// whether the peer sent it anything.
fn peer_side(peer: Option<&proto::PeerFigures>) -> String {
    match peer {
        None => "; the peer reported no figures".to_string(),
        Some(p) => {
            let sent: Vec<String> = p.flow_bytes.iter().map(u64::to_string).collect();
            let error = p
                .error
                .as_deref()
                .map(|e| format!(", its error: {e}"))
                .unwrap_or_default();
            format!(
                "; the peer sent [{}] bytes on its connections in the order it made them{error}",
                sent.join(", ")
            )
        }
    }
}

/// One run of `args` (of the sweep's `duration`): the receive on a thread of its own; once it
/// listens, the peer asked to send and its `done` awaited; the run's verdict and record.
///
/// Errors: the peer's failure (the sweep stops); the run's own failure is in the record.
fn one_run(
    client: &mut PeerClient,
    args: &ModeArgs,
    a: &SweepArgs,
    peer_write_size: Option<u64>,
    slot: Slot,
    report: &RunReport,
) -> Result<(RunRecord, Result<()>)> {
    let duration = a.duration;
    let rx = receive_of(args).ok_or_else(|| Error::Usage("a sweep runs a receiver".into()))?;
    let common = Common {
        verbosity: report.verbosity(),
        json: None,
        pid_file: None,
        argv: Vec::new(),
    };
    let mode = args.mode();
    let before = ProcStat::read().ok();
    let (listening_tx, listening) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let receiver = scope.spawn(move || {
            let run_report = RunReport::new(mode, common)
                .for_sweep_run()
                .on_listening(Box::new(move || {
                    let _ = listening_tx.send(());
                }));
            let result = crate::modes::run(args, &run_report);
            let body = run_report.body_typed();
            (run_report.finish(result), body)
        });
        // Ok once the receiver listens; Err when it ended without listening (the sender
        // went with its report).
        let peer = match listening.recv() {
            Ok(()) => Some((|| {
                // The sweep's `--pid-file`: written when its first run listens.
                report.listening()?;
                // A receiver with a duration (every sweep's run has one) closes first; one
                // without would receive until the peer's send of the run's duration ends.
                let send = match rx.flows.duration {
                    Some(d) => d + SEND_MARGIN,
                    None => duration,
                };
                let (run, send_for) = client.start(
                    rx.port,
                    rx.flows.count,
                    send,
                    peer_stream(rx.validate),
                    peer_write_size,
                    rx.flows.tcp_cc.clone(),
                    a.peer_send == crate::cli::PeerSend::Devmem,
                )?;
                let wait = send_for + DONE_WAIT;
                client.done(run, wait).map(|f| (f, wait))
            })()),
            Err(_) => None,
        };
        let (verdict, body) = receiver
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        let cpu = match (before, ProcStat::read().ok()) {
            (Some(a), Some(b)) => b.since(&a).all.shares(),
            _ => None,
        };
        let (peer, waited) = match peer.transpose()? {
            Some((figures, wait)) => (Some(figures), Some(wait)),
            None => (None, None),
        };
        let bounds = crate::verdict::PeerBounds {
            received: match &body {
                Some(crate::summary::Body::Receive(b)) => Some(results::received_bytes(b)),
                _ => None,
            },
            max_bytes: Some(client.limits.max_bytes),
            // The sweep waited this long for the `done`, from the `started` on; 1 s more for
            // the `started`'s own way.
            longest_s: waited.map(|w| w.as_secs_f64() + 1.0),
        };
        let verdict = crate::verdict::with_peer(verdict, peer.as_ref(), rx.flows.count, bounds);
        let outcome = match &verdict {
            Ok(()) => Outcome::Ok,
            Err(e @ Error::Skip(_)) => Outcome::Skipped(e.to_string()),
            Err(e) => Outcome::Failed(e.to_string()),
        };
        Ok((
            record(mode_name(args), slot, outcome, body, peer, cpu.as_ref()),
            verdict,
        ))
    })
}

/// `flag`'s `path` (`--csv`, `--plot`: written in place after the last run) can be written
/// then, checked before any run so that a typo or an unwritable place does not cost a sweep:
/// its folder exists, it is not a directory, and it is either a regular file this process can
/// open for writing (opened without truncating) or a new file in a folder that takes one (a
/// temporary file is created there and removed again: a read-only file system, a folder
/// without write permission, `/proc` or `/sys`). A device or FIFO is left to the write.
///
/// Errors: [`Error::Usage`] naming `flag` and what is wrong.
fn check_output(flag: &str, path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Error::Usage(format!(
            "{flag}: '{}': no folder '{}' to write it in",
            path.display(),
            parent.display()
        )));
    }
    let cannot = |e: std::io::Error| {
        Error::Usage(format!(
            "{flag}: cannot write '{}' ({})",
            path.display(),
            crate::error::errno_display(crate::error::errno_of(&e))
        ))
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(Error::Usage(format!(
            "{flag}: '{}' is a directory (expected a file path)",
            path.display()
        ))),
        Ok(m) if m.is_file() => std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(cannot),
        Ok(_) => Ok(()),
        Err(_) => crate::stats::check_can_create_beside(path).map_err(cannot),
    }
}

/// What the sweep knows beside its runs when it writes its outputs: the peer's provenance
/// and the baseline it is compared with.
#[derive(Default)]
struct Extras {
    peer_provenance: Option<crate::summary::sweep::Provenance>,
    baseline: Option<crate::summary::sweep::SweepFile>,
}

/// The table's footer: what the figures are, the command (wrapped so that it still pastes
/// into a shell), this host's and the peer's environment, and the verdict or what stopped the
/// sweep after `ran` runs. Its lines wrap at a mail's 72 characters.
fn footer(
    plan: &Plan,
    a: &SweepArgs,
    ran: usize,
    stopped: Option<&Error>,
    verdict: SweepVerdict,
    provenance: &crate::summary::sweep::Provenance,
    peer: Option<&crate::summary::sweep::Provenance>,
) -> String {
    let mut out = String::new();
    // The footer's lines wrap at a mail's 72 characters; the command's continuation lines
    // end in ` \` so that it still pastes into a shell.
    // n is the runs column, unless --columns left it out.
    let n = match &a.columns {
        Some(c) if !c.iter().any(|c| c == "runs") => "n: the runs column, not chosen",
        _ => "n: the runs column",
    };
    out.push_str(&wrap(&format!(
        "mean +/- sample sd over the runs that passed ({n}; no sd, '-', for one run); {} of \
         {:.1} s per point, interleaved (run 1 of every point, then run 2, ...)",
        crate::figures::count(plan.runs, "run"),
        a.duration.as_secs_f64()
    )));
    out.push_str(&wrap_units(
        "command: ",
        &command_units(&a.command_line),
        "    ",
        " \\",
        MAIL_WIDTH,
    ));
    out.push_str(&wrap(&format!("env: {}", provenance::one_line(provenance))));
    if let Some(p) = peer {
        out.push_str(&wrap(&format!("peer env: {}", provenance::one_line(p))));
    }
    if let Some(e) = stopped {
        out.push_str(&wrap(&format!(
            "stopped after {} of {} runs: {e}",
            ran,
            plan.total()
        )));
    } else {
        out.push_str(&format!("{verdict}\n"));
    }
    out
}

/// The table on stdout (and the comparison with `--baseline`), `--csv`, `--plot`, and the
/// JSON object of the sweep.
///
/// Errors: writing stdout or a file (every output is still tried).
#[allow(clippy::too_many_arguments)] // the sweep's pieces, each used once
fn output(
    plan: &Plan,
    a: &SweepArgs,
    rx: &Receive,
    records: &[RunRecord],
    stopped: Option<&Error>,
    verdict: SweepVerdict,
    extras: Extras,
    report: &RunReport,
) -> Result<()> {
    let provenance = provenance::collect(
        nic_of(a).map(|n| n.ifname.as_str()),
        &bound_queues(a, records),
    );
    let mut text = results::render(plan, records, a.columns.as_deref(), a.format);
    text.push_str(&footer(
        plan,
        a,
        records.len(),
        stopped,
        verdict,
        &provenance,
        extras.peer_provenance.as_ref(),
    ));
    let mut body = sweep_body(plan, a, rx, records, stopped, provenance);
    body.peer_provenance = extras.peer_provenance;
    let mut first_err: Option<Error> = None;
    // The first error is the sweep's own (printed once, by the caller); later ones are
    // logged here.
    let mut keep = |r: Result<()>| {
        if let Err(e) = r {
            match first_err {
                None => first_err = Some(e),
                Some(_) => report.warn(format_args!("{e}")),
            }
        }
    };
    if let (Some(base), Some(path)) = (&extras.baseline, &a.baseline) {
        // A file name's control characters escaped, as the footer's: nothing raw on a
        // terminal (an ESC sequence in a name cleared it).
        let name = proto::printable(&path.display().to_string());
        match compare::compare(
            compare::Side {
                name: &name,
                body: &base.body,
            },
            compare::Side {
                name: "this sweep",
                body: &body,
            },
            a.any_shape,
            a.columns.as_deref(),
        ) {
            Ok(mut c) => {
                c.new = None;
                text.push('\n');
                text.push_str(&wrap(&format!("compared with --baseline {name}:")));
                text.push_str(&compare::render(
                    &c,
                    plan.key.map_or("point", SweepKey::column),
                    a.format,
                ));
                if let Some(plot_path) = &a.plot {
                    let to = baseline_plot_path(plot_path);
                    keep(
                        plot::PlotFormat::of(&to)
                            .and_then(|f| plot::comparison(&c, f))
                            .map_err(|e| Error::Failure(format!("--plot (baseline): {e}")))
                            .and_then(|bytes| write_file("--plot", &to, &bytes)),
                    );
                }
                body.comparison = Some(c);
            }
            Err(why) => report.warn(format_args!("--baseline: not compared: {why}")),
        }
    }
    keep(report.print(&text));
    if let Some(path) = &a.csv {
        keep(
            results::csv(plan, records)
                .map_err(|e| Error::Failure(format!("--csv: {e}")))
                .and_then(|t| write_file("--csv", path, &t)),
        );
    }
    if let Some(path) = &a.plot {
        let caption = plot::Caption {
            runs: plan.runs,
            duration_s: a.duration.as_secs_f64(),
            kernel: body.provenance.kernel_release.clone(),
            stopped: stopped
                .map(|e| format!("after {} of {} runs: {e}", records.len(), plan.total())),
        };
        keep(
            plot::PlotFormat::of(path)
                .and_then(|f| plot::sweep(plan, records, &caption, f))
                .map_err(|e| Error::Failure(format!("--plot: {e}")))
                .and_then(|bytes| write_file("--plot", path, &bytes)),
        );
    }
    report.body(crate::summary::Body::Sweep(Box::new(body)));
    first_err.map_or(Ok(()), Err)
}

/// Where `--plot FILE` puts the comparison with `--baseline`: `FILE`'s name with
/// `-vs-baseline` before its extension (`sweep.png` → `sweep-vs-baseline.png`).
fn baseline_plot_path(plot: &Path) -> std::path::PathBuf {
    let stem = plot
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = plot
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    plot.with_file_name(format!("{stem}-vs-baseline{ext}"))
}

/// `--baseline`: the file, read and checked against this sweep's shape before the first run.
///
/// Errors: [`Error::Usage`]: the file cannot be read or is no sweep's JSON; its shape differs
/// (naming every difference) and `--any-shape` is not given.
fn read_baseline(
    a: &SweepArgs,
    plan: &Plan,
    rx: &Receive,
) -> Result<Option<crate::summary::sweep::SweepFile>> {
    let Some(path) = &a.baseline else {
        return Ok(None);
    };
    let base = compare::read_file("--baseline", path)?;
    let planned = sweep_body(plan, a, rx, &[], None, provenance::collect(None, &[]));
    let shape = compare::shape_differences(&base.body, &planned);
    if !shape.is_empty() && !a.any_shape {
        return Err(Error::Usage(format!(
            "--baseline: '{}' measured another shape than this sweep: {}; give --any-shape to \
             compare them anyway",
            path.display(),
            shape.join("; ")
        )));
    }
    Ok(Some(base))
}

/// `--columns`: every name is a column of this sweep (a queue's `rx_qN_bytes` always is).
///
/// Errors: [`Error::Usage`] naming the first that is not, and the names there are.
fn check_columns(a: &SweepArgs, plan: &Plan) -> Result<()> {
    for name in a.columns.iter().flatten() {
        if name != "runs" && results::column_named(name, plan.key, &[]).is_none() {
            return Err(Error::Usage(unknown_column(name, plan, &[])));
        }
    }
    Ok(())
}

/// `--columns: no column 'x' (expected one of ...)`.
fn unknown_column(name: &str, plan: &Plan, queues: &[u32]) -> String {
    let mut keys: Vec<String> = results::all_columns(queues)
        .iter()
        .map(|c| c.key.to_string())
        .collect();
    keys.push("runs".into());
    format!(
        "--columns: no column '{name}' for this sweep (expected a name of {}: {})",
        plan.key
            .map_or("one configuration".to_string(), |k| format!(
                "a {} sweep",
                k.name()
            )),
        keys.join(", ")
    )
}

/// The command line as a shell would take it back: `ncdevmem-rs` and each argument, quoted
/// where it has a character outside `A-Za-z0-9_./=,:@+%-` ([`command_units`] joined by
/// spaces).
#[cfg(test)]
pub(crate) fn command_text(argv: &[String]) -> String {
    command_units(argv).join(" ")
}

/// `ncdevmem-rs` and each argument of `argv`, quoted as [`command_text`] quotes them: the
/// pieces a wrapped command line breaks between. An argument with a control character
/// (newline, tab, ESC, ...) is written in bash's `$'...'` quoting with escapes, so that the
/// footer holds no raw control character and still pastes into bash.
pub(crate) fn command_units(argv: &[String]) -> Vec<String> {
    let quote = |a: &String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./=,:@+%-".contains(c));
        if plain {
            a.clone()
        } else if a.chars().any(proto::hidden) {
            let mut q = String::from("$'");
            for c in a.chars() {
                match c {
                    '\\' | '\'' => {
                        q.push('\\');
                        q.push(c);
                    }
                    '\n' => q.push_str("\\n"),
                    '\t' => q.push_str("\\t"),
                    c if proto::hidden(c) => q.push_str(&format!("\\u{:04x}", u32::from(c))),
                    c => q.push(c),
                }
            }
            q.push('\'');
            q
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    std::iter::once(PROGRAM.to_string())
        .chain(argv.iter().map(quote))
        .collect()
}

fn write_file(flag: &str, path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| Error::io(format!("{flag}: write({})", path.display()), &e))
}

/// The sweep's JSON body: the plan, the environment, the provenance, every point's
/// statistics and every run's full figures.
fn sweep_body(
    plan: &Plan,
    a: &SweepArgs,
    rx: &Receive,
    records: &[RunRecord],
    stopped: Option<&Error>,
    provenance: crate::summary::sweep::Provenance,
) -> SweepBody {
    let runs = records
        .iter()
        .map(|r| RunFigure {
            index: r.slot.index + 1,
            point: r.slot.point,
            value: plan.points[r.slot.point],
            run: r.slot.run + 1,
            outcome: match r.outcome {
                Outcome::Ok => RunOutcomeName::Ok,
                Outcome::Failed(_) => RunOutcomeName::Fail,
                Outcome::Skipped(_) => RunOutcomeName::Skip,
            },
            error: r.outcome.why().map(str::to_string),
            numbers: r.numbers.clone(),
            peer: r.peer.clone(),
            figures: r.body.clone(),
            net_rx: r.net_rx.clone(),
            steering: r.steering.clone(),
            hooks: r.hooks.clone(),
        })
        .collect();
    SweepBody {
        stopped: stopped.map(ToString::to_string),
        tool: PROGRAM.to_string(),
        command_line: a.command_line.clone(),
        environment: environment(plan, a, rx),
        provenance,
        peer_provenance: None,
        plan: PlanFigure {
            key: plan.key.map(|k| k.name().to_string()),
            values: plan.points.clone(),
            names: plan.names.clone(),
            runs: plan.runs,
            order: "interleaved: run 1 of every point, then run 2, ...".into(),
        },
        points: results::points(plan, records),
        runs,
        comparison: None,
    }
}

/// The NIC of a sweep's receive mode, if it has one.
fn nic_of(a: &SweepArgs) -> Option<&crate::cli::NicArgs> {
    match a.base.as_ref() {
        ModeArgs::Server(s) => Some(&s.nic),
        ModeArgs::Zcrx(z) => z.nic.as_ref(),
        _ => None,
    }
}

/// What every run of the sweep shares.
fn environment(plan: &Plan, a: &SweepArgs, rx: &Receive) -> SweepEnvironment {
    let nic = nic_of(a);
    // The NIC of the runs: the server's, or the one a plain receiver's --hds-thresh sets.
    let ifname = nic.map(|n| &n.ifname).or(match a.base.as_ref() {
        ModeArgs::Plain(p) => p.ifname.as_ref(),
        _ => None,
    });
    let swept = |k: SweepKey| plan.key == Some(k);
    let (dmabuf_size, rx_page_size, rx_buf_len) = match a.base.as_ref() {
        ModeArgs::Server(s) => (
            s.dmabuf_size.filter(|_| !swept(SweepKey::DmabufSize)),
            s.rx_page_size.filter(|_| !swept(SweepKey::RxPageSize)),
            None,
        ),
        ModeArgs::Zcrx(z) => (
            z.area_size.filter(|_| !swept(SweepKey::DmabufSize)),
            None,
            z.rx_buf_len.filter(|_| !swept(SweepKey::RxBufLen)),
        ),
        _ => (None, None, None),
    };
    SweepEnvironment {
        kernel_release: crate::sys::kernel_release().ok(),
        receive_mode: crate::run_report::json_mode_name(a.base.mode()).to_string(),
        interface: ifname.map(ToString::to_string),
        driver: ifname.and_then(|i| driver_of(i.as_str())),
        queues: nic.and_then(|n| n.queues).map(|q| QueueRangeFigure {
            start: q.start,
            count: q.count,
        }),
        cpus: rx
            .flows
            .cpus
            .clone()
            .or_else(|| crate::sys::cpu::allowed_cpus().ok()),
        flows: (!swept(SweepKey::Flows)).then_some(rx.flows.count),
        duration_s: a.duration.as_secs_f64(),
        warmup_s: rx.flows.warmup.map(|d| d.as_secs_f64()),
        tcp_cc: rx.flows.tcp_cc.clone().filter(|_| !swept(SweepKey::TcpCc)),
        peer: peer_endpoint(a),
        peer_send: a.peer_send.name().to_string(),
        peer_write_size: a.peer_write_size.filter(|_| !swept(SweepKey::WriteSize)),
        dmabuf_size,
        rx_page_size,
        rx_buf_len,
        hds_thresh: match a.base.as_ref() {
            ModeArgs::Plain(p) => p.hds_thresh.filter(|_| !swept(SweepKey::HdsThresh)),
            _ => None,
        },
    }
}

/// The bound queues of the sweep: `-t`/`-q`, else those the runs reported bytes of.
fn bound_queues(a: &SweepArgs, records: &[RunRecord]) -> Vec<u32> {
    match nic_of(a).and_then(|n| n.queues) {
        Some(q) => (q.start..q.start.saturating_add(q.count)).collect(),
        None => results::queues_of(records),
    }
}

/// The driver of `ifname` as sysfs names it (the `device/driver` link), if it has one.
fn driver_of(ifname: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{ifname}/device/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep_of(line: &str) -> SweepArgs {
        let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
        match crate::cli::parse(&argv, 4096) {
            Ok(crate::cli::Command::Run(run)) => match run.mode {
                ModeArgs::Sweep(s) => s,
                other => panic!("{line}: not a sweep: {other:?}"),
            },
            other => panic!("{line}: {other:?}"),
        }
    }

    /// A failed run's line says what the peer sent on each connection and why it stopped, or
    /// that it reported nothing.
    /// A control character in an argument (a newline, a tab, ESC) is escaped in bash's
    /// `$'...'`: the footer holds no raw one, and bash takes each argument back as it was.
    #[test]
    fn the_command_escapes_control_characters() {
        let argv: Vec<String> = [
            "a\nb",
            "x\u{1b}[2J",
            "it's\tx",
            "back\\slash\r",
            "plain",
            "rtl\u{202e}ls",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let units = command_units(&argv);
        assert_eq!(
            units[1..],
            [
                r"$'a\nb'",
                r"$'x\u001b[2J'",
                r"$'it\'s\tx'",
                r"$'back\\slash\u000d'",
                "plain",
                r"$'rtl\u202els'"
            ]
        );
        assert!(!command_text(&argv).chars().any(proto::hidden));
        // bash takes them back: printf each argument between brackets.
        let script = format!("printf '[%s]' {}", units[1..].join(" "));
        if let Ok(out) = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
        {
            let want: String = argv.iter().map(|a| format!("[{a}]")).collect();
            assert_eq!(String::from_utf8_lossy(&out.stdout), want);
        }
    }

    #[test]
    fn a_failed_runs_line_carries_the_peers_side() {
        let p = proto::PeerFigures {
            bytes: 300,
            elapsed_s: 3.0,
            gbit_per_s: 8e-7,
            flow_bytes: vec![0, 100, 200],
            cpu: None,
            error: Some("flow 0: connection reset by peer".into()),
        };
        assert_eq!(
            peer_side(Some(&p)),
            "; the peer sent [0, 100, 200] bytes on its connections in the order it made them, \
             its error: flow 0: connection reset by peer"
        );
        let p = proto::PeerFigures { error: None, ..p };
        assert!(peer_side(Some(&p)).ends_with("in the order it made them"));
        assert_eq!(peer_side(None), "; the peer reported no figures");
    }

    /// Each point's value lands in the option it sweeps; the rest of the command line stays.
    #[test]
    fn a_point_sets_its_option_in_the_runs_arguments() {
        let s = sweep_of("-l -f eth0 -s 2001:db8::1 -p 5201 -t 0 -q 4 --flows 4 --peer 2001:db8::2 --sweep rx-page-size=4096,65536 --seed 9");
        let ModeArgs::Server(a) = point_args(&s.base, Some(SweepKey::RxPageSize), Some(65536))
        else {
            panic!("not a server");
        };
        assert_eq!(a.rx_page_size, Some(65536));
        assert_eq!(a.rx.flows.count, 4);
        assert_eq!(
            a.rx.flows.duration,
            Some(crate::cli::DEFAULT_SWEEP_DURATION)
        );
        assert_eq!(a.rx.timeout, Some(crate::cli::DEFAULT_SWEEP_TIMEOUT));
        assert_eq!(peer_stream(a.rx.validate), Stream::Seed(9));
        assert_eq!(s.runs, crate::cli::DEFAULT_RUNS);
        assert_eq!(s.peer_port, crate::cli::DEFAULT_PEER_PORT);
        let p = sweep_of("-l --plain -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --sweep flows=1,2 --runs 2 --duration 1 -v 7");
        let ModeArgs::Plain(b) = point_args(&p.base, Some(SweepKey::Flows), Some(2)) else {
            panic!("not plain");
        };
        assert_eq!(b.rx.flows.count, 2);
        assert_eq!(peer_stream(b.rx.validate), Stream::Period(7));
        assert_eq!(p.command_line.len(), 16);
        let z = sweep_of("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --sweep rx-buf-len=4096,32768");
        let ModeArgs::Zcrx(c) = point_args(&z.base, Some(SweepKey::RxBufLen), Some(32768)) else {
            panic!("not zcrx");
        };
        assert_eq!(c.rx_buf_len, Some(32768));
        let ModeArgs::Zcrx(d) = point_args(&z.base, Some(SweepKey::DmabufSize), Some(64 << 20))
        else {
            panic!("not zcrx");
        };
        assert_eq!(d.area_size, Some(64 << 20));
        let ModeArgs::Server(e) = point_args(&s.base, Some(SweepKey::DmabufSize), Some(32 << 20))
        else {
            panic!("not a server");
        };
        assert_eq!(e.dmabuf_size, Some(32 << 20));
        // An hds-thresh point is the plain receiver's --hds-thresh on its -f NIC; the
        // environment leaves the swept value out (so --compare matches points by value).
        let h = sweep_of("-l --plain -f eth0 -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --sweep hds-thresh=0,256");
        let ModeArgs::Plain(f) = point_args(&h.base, Some(SweepKey::HdsThresh), Some(256)) else {
            panic!("not plain");
        };
        assert_eq!(
            (f.ifname.map(|i| i.to_string()), f.hds_thresh),
            (Some("eth0".into()), Some(256))
        );
        let plan = Plan::new(h.sweep.as_ref(), 1);
        assert_eq!(
            (plan.label(1), plan.show(1)),
            ("hds-thresh=256".into(), "256".into())
        );
        let rx = receive_of(&h.base).unwrap();
        let env = environment(&plan, &h, rx);
        assert_eq!(
            (env.hds_thresh, env.interface.as_deref()),
            (None, Some("eth0"))
        );
        let one = sweep_of(
            "-l --plain -f eth0 -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --hds-thresh 128",
        );
        let rx = receive_of(&one.base).unwrap();
        let plan = Plan::new(None, 1);
        assert_eq!(environment(&plan, &one, rx).hds_thresh, Some(128));
        // The peer's write size is the run's, not the receiver's.
        assert_eq!(
            point_args(&p.base, Some(SweepKey::WriteSize), Some(1448)),
            *p.base
        );
        assert_eq!(
            c.rx.flows.duration,
            Some(crate::cli::DEFAULT_SWEEP_DURATION),
            "zcrx receives for the run's duration, as the other receivers"
        );
        assert_eq!(z.duration, crate::cli::DEFAULT_SWEEP_DURATION);
        assert_eq!(
            peer_stream(c.rx.validate),
            Stream::Seed(crate::cli::DEFAULT_SWEEP_SEED)
        );
        // A tcp-cc point names every flow's congestion control, in each receive mode; the
        // number keys' points leave it alone.
        let t = sweep_of(
            "-l --plain -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --sweep tcp-cc=dctcp,reno -v 7",
        );
        let plan = Plan::new(t.sweep.as_ref(), 1);
        let args = |base: &ModeArgs, point| {
            named_point_args(
                point_args(base, plan.key, plan.points[point]),
                plan.key,
                plan.name(point),
            )
        };
        let ModeArgs::Plain(q) = args(&t.base, 1) else {
            panic!("not plain");
        };
        assert_eq!(q.rx.flows.tcp_cc.as_deref(), Some("reno"));
        assert_eq!(q.rx.flows.count, 1);
        for base in [&s.base, &z.base] {
            let rx = receive_of(&named_point_args(
                (**base).clone(),
                Some(SweepKey::TcpCc),
                Some("dctcp"),
            ))
            .map(|r| r.flows.tcp_cc.clone());
            assert_eq!(rx, Some(Some("dctcp".to_string())));
        }
        assert_eq!(
            named_point_args((*s.base).clone(), Some(SweepKey::Flows), None),
            *s.base
        );
    }

    /// The first line names the peer as a socket address: IPv6 in brackets, as every other
    /// line does. Before: "against the peer 2001:db8::2:4343".
    #[test]
    fn the_first_line_brackets_an_ipv6_peer() {
        for (local, peer, want) in [
            (
                "2001:db8::1",
                "2001:db8::2",
                "against the peer [2001:db8::2]:4343 (plain TCP)",
            ),
            (
                "198.51.100.1",
                "198.51.100.2",
                "against the peer 198.51.100.2:4343 (plain TCP)",
            ),
            (
                "198.51.100.1",
                "::ffff:198.51.100.2",
                "against the peer 198.51.100.2:4343 (plain TCP)",
            ),
        ] {
            let s = sweep_of(&format!(
                "-l --plain -s {local} -p 5201 --peer {peer} --sweep flows=1,2"
            ));
            let line = describe(
                &Plan::new(s.sweep.as_ref(), s.runs),
                &s,
                receive_of(&s.base).unwrap(),
            );
            assert!(line.contains(want), "{line}");
            assert_eq!(peer_endpoint(&s), want[17..want.len() - 12], "{peer}");
        }
    }

    /// The footer's command line reads back in a shell; the baseline's plot sits beside the
    /// sweep's; a `--columns` name that is no column is refused before any run.
    #[test]
    fn footer_command_baseline_plot_and_column_names() {
        let argv: Vec<String> = [
            "-l",
            "-s",
            "::1",
            "--sweep",
            "flows=1,2",
            "--cpus",
            "0 1",
            "it's",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            command_text(&argv),
            "ncdevmem-rs -l -s ::1 --sweep flows=1,2 --cpus '0 1' 'it'\\''s'"
        );
        assert_eq!(
            baseline_plot_path(Path::new("out/sweep.png")),
            Path::new("out/sweep-vs-baseline.png")
        );
        let s = sweep_of("-l --plain -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --sweep flows=1,2 --columns rx_gbps,nosuch");
        let plan = Plan::new(s.sweep.as_ref(), s.runs);
        match check_columns(&s, &plan) {
            Err(Error::Usage(m)) => assert!(
                m.starts_with("--columns: no column 'nosuch' for this sweep (expected a name of a flows sweep: rx_dev_gbps, "),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let s = sweep_of(
            "-l --plain -s 198.51.100.1 -p 5201 --peer 198.51.100.2 --columns rx_q4_bytes,runs,RX",
        );
        let plan = Plan::new(s.sweep.as_ref(), s.runs);
        assert!(check_columns(&s, &plan).is_err(), "RX is no header");
    }

    /// The usage errors of a sweep, before anything runs.
    #[test]
    fn bad_sweeps_are_usage_errors() {
        let base = "-l -f eth0 -s 2001:db8::1 -p 5201 --peer 2001:db8::2";
        for (tail, want) in [
            ("--sweep rx-page-size=12288", "--sweep: invalid rx-page-size value '12288' (expected a power of two in 4096..=2147483648 bytes, optional suffix K, M or G)"),
            ("--sweep nosuchkey=1", "--sweep: unknown key 'nosuchkey' (expected one of rx-page-size, rx-buf-len, autorelease, flows, dmabuf-size, write-size, tcp-cc, hds-thresh)"),
            ("--sweep tcp-cc=cubic --tcp-cc reno", "--sweep tcp-cc: sets --tcp-cc for each point; do not give --tcp-cc too"),
            ("--sweep tcp-cc=cubic,cubic", "--sweep: tcp-cc: value cubic is given twice"),
            ("--sweep dmabuf-size=64M,100", "--sweep: invalid dmabuf-size value '100' (expected a non-zero multiple of the page size (4096 bytes), optional suffix K, M or G)"),
            ("--sweep write-size=1448,128M", "--sweep: invalid write-size value '128M' (expected 1..=64M bytes, optional suffix K, M or G)"),
            ("--sweep dmabuf-size=64M --dmabuf-size 32M", "--sweep dmabuf-size: sets --dmabuf-size for each point; do not give --dmabuf-size too"),
            ("--sweep write-size=1448 --write-size 64K", "--sweep write-size: sets --write-size for each point; do not give --write-size too"),
            ("--sweep rx-page-size=", "--sweep: rx-page-size= has no values (expected rx-page-size=V1,V2,...)"),
            ("--runs 0", "--runs: invalid number of runs '0' (expected 1..=1000)"),
            ("--sweep rx-buf-len=4096", "--sweep rx-buf-len: only applies to the zcrx server (-l --zcrx)"),
            ("--sweep rx-page-size=4096 -b 4096", "--sweep rx-page-size: sets -b for each point; do not give -b too"),
            ("--sweep flows=1,2 --flows 2", "--sweep flows: sets --flows for each point; do not give --flows too"),
            ("--expect-bytes 1M", "--expect-bytes: a sweep's runs are timed (--duration), not counted in bytes"),
        ] {
            let argv: Vec<String> = format!("{base} {tail}").split_whitespace().map(String::from).collect();
            match crate::cli::parse(&argv, 4096) {
                Err(Error::Usage(m)) => assert_eq!(m, want, "{tail}"),
                other => panic!("{tail}: {other:?}"),
            }
        }
        for (line, want) in [
            ("-l --plain -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --sweep rx-page-size=4096", "--sweep rx-page-size: only applies to the devmem server (-l -f IF without --plain or --zcrx)"),
            ("-l --plain -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --sweep dmabuf-size=64M", "--sweep dmabuf-size: only applies to the devmem and zcrx servers"),
            ("-l --plain -s 2001:db8::1 -p 5201 --sweep flows=1", "--sweep: a sweep needs --peer ADDR (the host running --peer-server that sends each run)"),
            ("--send-pattern 1M -s 2001:db8::1 -p 5201 -v 7 --sweep flows=1", "--sweep: only applies to receivers (-l)"),
            ("--peer-server -l", "--peer-server: serves the sender side of sweeps; not with -l"),
            ("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --sweep flows=1,2", "--sweep flows: only applies to the devmem server and the plain receiver (a zcrx point's flows must cover its -q ifqs)"),
            ("-l --plain -s 2001:db8::1 -p 5201 --peer-send devmem", "--peer-send: a sweep needs --peer ADDR (the host running --peer-server that sends each run)"),
            ("-l -f eth0 -s 2001:db8::1 -p 5201 --write-size 64K", "--write-size: a sweep needs --peer ADDR (the host running --peer-server that sends each run)"),
            ("-l -f eth0 -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --peer-send zerocopy", "--peer-send: invalid way to send 'zerocopy' (expected plain or devmem)"),
            ("--send-pattern 1M -s 2001:db8::1 -p 5201 -v 7 --peer-send devmem", "--peer-send: only applies to receivers (-l)"),
            ("--peer-server --write-size 1K", "--write-size: only applies to --send-pattern and a sweep's peer (-l --peer)"),
            ("--compare a.json", "--compare: missing NEW.json (expected --compare BASE.json NEW.json)"),
            ("--compare a.json b.json c.json", "--compare: unexpected argument 'c.json' (expected --compare BASE.json NEW.json)"),
            ("--compare a.json b.json -l", "--compare: compares two sweeps' JSON files and runs nothing; not with -l, -s or -f"),
            ("--compare a.json b.json --format html", "--format: invalid table format 'html' (expected text, markdown or csv)"),
            ("-l --plain -s 2001:db8::1 -p 5201 --baseline b.json", "--baseline: a sweep needs --peer ADDR (the host running --peer-server that sends each run)"),
            ("-l --plain -s 2001:db8::1 -p 5201 --any-shape", "--any-shape: a sweep needs --peer ADDR (the host running --peer-server that sends each run)"),
            ("-l --plain -s 2001:db8::1 -p 5201 --peer 2001:db8::2 --columns a,,b", "--columns: invalid column list 'a,,b' (expected column names, comma-separated, such as rx_dev_gbps,app_sys_pct,runs (the CSV's names))"),
            // The control connection is made from -s: a peer of the other family is refused
            // before anything starts (before: EAFNOSUPPORT or ENETUNREACH at the connect).
            ("-l --plain -s 127.0.0.1 -p 5201 --peer ::1", "--peer: peer address '::1' is not of the same family as -s '127.0.0.1' (the control connection is made from -s: both IPv4 or both IPv6, or -s ::)"),
            ("-l --plain -s ::ffff:127.0.0.1 -p 5201 --peer ::1", "--peer: peer address '::1' is not of the same family as -s '::ffff:127.0.0.1' (the control connection is made from -s: both IPv4 or both IPv6, or -s ::)"),
            ("-l --plain -s 0.0.0.0 -p 5201 --peer 2001:db8::2", "--peer: peer address '2001:db8::2' is not of the same family as -s '0.0.0.0' (the control connection is made from -s: both IPv4 or both IPv6, or -s ::)"),
            ("-l -f eth0 -s 2001:db8::1 -p 5201 --peer 198.51.100.2", "--peer: peer address '198.51.100.2' is not of the same family as -s '2001:db8::1' (the control connection is made from -s: both IPv4 or both IPv6, or -s ::)"),
        ] {
            let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
            match crate::cli::parse(&argv, 4096) {
                Err(Error::Usage(m)) => assert_eq!(m, want, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    /// `-s ::` reaches a peer of either family; a v4-mapped peer is IPv4.
    #[test]
    fn a_peer_of_the_servers_family_is_taken() {
        for line in [
            "-l --plain -s :: -p 5201 --peer 198.51.100.2",
            "-l --plain -s :: -p 5201 --peer 2001:db8::2",
            "-l --plain -s 198.51.100.1 -p 5201 --peer ::ffff:198.51.100.2",
            "-l --plain -s ::ffff:198.51.100.1 -p 5201 --peer 198.51.100.2",
            "-l --plain -s 2001:db8::1 -p 5201 --peer 2001:db8::2",
        ] {
            let s = sweep_of(line);
            assert_eq!(s.peer_port, crate::cli::DEFAULT_PEER_PORT, "{line}");
        }
    }

    #[test]
    fn the_peer_server_takes_its_defaults() {
        let argv: Vec<String> = ["--peer-server"].map(String::from).to_vec();
        let Ok(crate::cli::Command::Run(run)) = crate::cli::parse(&argv, 4096) else {
            panic!("no run");
        };
        let ModeArgs::PeerServer(p) = run.mode else {
            panic!("not the peer server");
        };
        assert_eq!(p.port, crate::cli::DEFAULT_PEER_PORT);
        assert_eq!(p.addr.text, "::");
        assert_eq!(p.max_duration, crate::cli::DEFAULT_MAX_DURATION);
        assert_eq!(
            (p.tx_ifname, p.tx_dmabuf_size),
            (None, None),
            "plain TCP only"
        );
        let argv: Vec<String> = ["--peer-server", "-f", "eth1", "--dmabuf-size", "8M"]
            .map(String::from)
            .to_vec();
        let Ok(crate::cli::Command::Run(run)) = crate::cli::parse(&argv, 4096) else {
            panic!("no run");
        };
        let ModeArgs::PeerServer(p) = run.mode else {
            panic!("not the peer server");
        };
        assert_eq!(p.tx_ifname.map(|i| i.to_string()), Some("eth1".into()));
        assert_eq!(p.tx_dmabuf_size, Some(8 << 20));
    }

    /// How the peer sends and its write size travel with the sweep; the defaults are plain TCP
    /// and the sender's own write size.
    #[test]
    fn a_sweep_carries_how_the_peer_sends() {
        let base = "-l -f eth0 -s 2001:db8::1 -p 5201 --flows 4 --seed 3 --peer 2001:db8::2";
        let s = sweep_of(&format!("{base} --peer-send devmem --write-size 64K"));
        assert_eq!(s.peer_send, crate::cli::PeerSend::Devmem);
        assert_eq!(s.peer_write_size, Some(65536));
        let s = sweep_of(base);
        assert_eq!(s.peer_send, crate::cli::PeerSend::Plain);
        assert_eq!(s.peer_write_size, None);
        let s = sweep_of(&format!("{base} --peer-send plain --write-size 1448"));
        assert_eq!(
            (s.peer_send, s.peer_write_size),
            (crate::cli::PeerSend::Plain, Some(1448))
        );
    }
}
