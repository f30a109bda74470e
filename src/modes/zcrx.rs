//! `-l --zcrx -s ADDR -p PORT`: the io_uring zero-copy receive server, in the order of the
//! kernel's iou-zcrx selftest.

use std::io::Write;
use std::sync::mpsc;
use std::time::Instant;

use super::{
    await_hugepages, await_release, check_tcp_cc, explain_stall, flows, listen, log, open_nic,
    pick_queues, Accepted, NicRun, StallContext, Teardown,
};
use crate::caps::Missing;
use crate::cli::{NicArgs, ZcrxArgs};
use crate::conn::QueueDispatch;
use crate::engine::{self, Shared};
use crate::error::{Error, Result};
use crate::nic::queues::{describe_owned, wait_queues_free, QueuePolicy, QUEUE_FREE_WAIT};
use crate::nic::setup::{FlowTarget, ServerPlan};
use crate::release::kernel::KernelEnv;
use crate::release::{self, Env, Holdings, PoolOwner};
use crate::run_report::RunReport;
use crate::rx;
use crate::signals::{self, STOP};
use crate::stats::ZcrxCounters;
use crate::uring::{
    self, FlowsObserver, RingParams, Zcrx, ZcrxFlow, ZcrxParams, ZcrxRxConfig, ZcrxTarget,
};

/// The zcrx server: the skips first (io_uring disabled, no `RECV_ZC`, hugepages for
/// `--rx-buf-len`, no `CAP_NET_ADMIN`), then the NIC setup of the devmem server (unless
/// `-n`) for the bound queues `-t START -q NUM` (one by default: the last; for NUM > 1 an
/// RSS context over exactly them and one rule to it), one zcrx ifq on each bound queue, each
/// registered and served by its own worker of the one flow engine (worker 0 on this thread),
/// listen, accept the flows, each handed to the worker of the queue it arrived on (its NAPI
/// id, [`crate::conn::QueueDispatch`]), a multishot `RECV_ZC` per flow validated in place, the
/// summary; then the rings are closed (which frees the queues), the queues are awaited free,
/// and every NIC change is undone.
///
/// With `--zcrx-nodev` (test aid) the ifq is registered without a device (`ZCRX_REG_NODEV`)
/// and no NIC is touched: the kernel copies the TCP stream into the area, so the whole
/// receive path runs over loopback on kernels that have it.
///
/// Every skip names the mode, also those of shared steps: "skip: io_uring zcrx: ...".
///
/// Errors: the skips, kernel refusals, accept and idle timeouts, validation failures.
pub(crate) fn run(a: &ZcrxArgs, report: &RunReport) -> Result<()> {
    serve(a, report).map_err(|e| match e {
        Error::Skip(m) => Error::Skip(Missing::InZcrx(Box::new(m))),
        e => e,
    })
}

fn serve(a: &ZcrxArgs, report: &RunReport) -> Result<()> {
    let page = crate::sys::page_size();
    let hugetlb = a.rx_buf_len.is_some_and(|l| l as usize > page);
    if let Some(len) = a
        .rx_buf_len
        .filter(|&l| l as usize > crate::sys::uapi::HUGEPAGE_2M)
    {
        return Err(Error::Usage(format!(
            "--rx-buf-len: {len} bytes is larger than the 2 MiB hugepages that back the zcrx area"
        )));
    }
    let area_len = zcrx_area_len(a.area_size, hugetlb, page)?;
    let buf_len = a.rx_buf_len.map_or(page, |l| l as usize);
    let pages = if hugetlb {
        (area_len / crate::sys::uapi::HUGEPAGE_2M) as u64
    } else {
        0
    };
    let ifqs = check_flows(a)?;
    let buffers = area_len as u64 / buf_len as u64;
    let ifname = a.nic.as_ref().map(|n| &n.ifname);
    let mtu = ifname
        .and_then(|i| crate::sys::socket::if_mtu(i.as_str()).ok())
        .unwrap_or(1500);
    // Which queue a flow lands on is the NIC's hash: the plan is for all flows on one ifq.
    let plan = flows::rcvbuf_plan(
        &a.rx,
        buffers,
        buf_len as u32,
        crate::rcvbuf::mss_for_mtu(mtu),
        crate::sys::socket::tcp_rmem_max().ok(),
    )?;
    let all_pages = pages * u64::from(ifqs);
    // Everything that makes this run a skip is checked before anything is changed; hugepages
    // a previous binding or area still holds are waited for.
    uring::check_io_uring_enabled()?;
    report.step("checks");
    let mut env = KernelEnv::new(None);
    await_hugepages(&mut env, all_pages, report)?;
    report.step("hugepages");
    signals::check()?;
    {
        // Asked on a ring of this thread; each worker makes its own (a ring is its
        // creator's: SINGLE_ISSUER).
        let ring = uring::create_ring(&RingParams::default()).map_err(uring::setup_refusal)?;
        uring::require_recv_zc(&ring)?;
        uring::require_net_admin(&ring)?;
    }
    signals::check()?;
    let params = |target: ZcrxTarget| ZcrxParams {
        target,
        area_len,
        hugetlb,
        rq_entries: ZcrxParams::rq_entries_for(area_len, buf_len),
        rx_buf_len: a.rx_buf_len,
    };
    let Some(nic_args) = &a.nic else {
        let mut hugepages = None;
        let received = receive_flows(
            a,
            vec![params(ZcrxTarget::NoDev)],
            &plan,
            None,
            &mut |all| {
                if all {
                    report.step("register");
                    hugepages = release::hugepage_goal(&mut env, all_pages);
                }
            },
            report,
        );
        let held = Holdings {
            what: "zcrx ifq (no device)".into(),
            queues: Vec::new(),
            pools: PoolOwner::Nothing,
            hugepages,
        };
        await_release(&mut env, &held, report);
        return received;
    };

    // From here every exit undoes the NIC (`nic`) and then waits for what the kernel still
    // holds (`teardown`).
    let ifname = &nic_args.ifname;
    let ifindex = ifname.index()?;
    let shared = open_nic(ifname)?;
    report.step("nic");
    let mut teardown = Teardown::new(KernelEnv::new(Some(ifindex)), report);
    let mut nic = NicRun::new(&shared, nic_args.verify_restore, report)?;
    let choice = pick_queues(
        &shared,
        nic_args.queues,
        QueuePolicy::Server,
        nic_args.skip_nic_config,
        report,
    )?;
    signals::check()?;
    report.step("queues");
    let queues = choice.queues();
    let areas = match queues.len() {
        1 => {
            log!(report, "using rx queue {}", choice.start);
            "area"
        }
        _ => {
            log!(
                report,
                "using rx queues {}..={}: one zcrx ifq on each",
                choice.start,
                choice.start + choice.num - 1
            );
            "areas"
        }
    };
    teardown.hold(Holdings {
        what: format!("the zcrx {areas} for {ifname}"),
        queues: queues.clone(),
        pools: PoolOwner::Nothing,
        hugepages: None,
    });
    let mut plan_nic = server_plan(a, nic_args, choice.start);
    plan_nic.num_queues = choice.num;
    nic.setup().configure_server(&plan_nic)?;
    report.step("configure");
    shared.interrupted()?;
    if let Some(why) = nic.setup().shared_queue() {
        report.log(format_args!("{ifname}: {why}"));
    }
    // io_uring page pools of the device that are not this run's.
    let other_pools = teardown
        .env()
        .page_pools()
        .map(|p| release::io_uring_pool_ids(&p, ifindex))
        .unwrap_or_default();
    let mut registered = |all: bool| {
        if all {
            report.step("register");
        }
        let hugepages = all
            .then(|| release::hugepage_goal(teardown.env(), all_pages))
            .flatten();
        teardown.hold(Holdings {
            what: format!("the zcrx ifqs on {ifname} rx queues {queues:?}"),
            queues: queues.clone(),
            pools: PoolOwner::IoUring {
                ifindex,
                before: other_pools.clone(),
            },
            hugepages,
        });
    };
    let targets = queues
        .iter()
        .map(|&rxq| {
            params(ZcrxTarget::Device {
                ifname: ifname.to_string(),
                ifindex,
                rxq,
            })
        })
        .collect();
    let device = flows::Device {
        ifindex,
        queues: queues.clone(),
    };
    let received = receive_flows(a, targets, &plan, Some(&device), &mut registered, report);

    // Every ring is closed: wait until the kernel has let go of the queues, so header split
    // can be restored.
    match shared.with(|n| wait_queues_free(n, &queues, QUEUE_FREE_WAIT)) {
        Ok(still) if still.is_empty() => {}
        Ok(still) => report.warn(format_args!(
            "{ifname}: {} still owned {} ms after closing the io_uring ring",
            describe_owned(&still),
            QUEUE_FREE_WAIT.as_millis()
        )),
        Err(e) => report.warn(format_args!(
            "{ifname}: could not check that rx queues {queues:?} are free: {e}"
        )),
    }
    nic.finish();
    teardown.finish();
    received
}

/// The NIC setup of the zcrx server on `queue`: the devmem server's, for one queue.
fn server_plan(a: &ZcrxArgs, nic: &NicArgs, queue: u32) -> ServerPlan {
    ServerPlan {
        start_queue: queue,
        num_queues: 1,
        flow: FlowTarget {
            server: a.rx.addr.ip,
            client: nic.client.as_ref().map(|c| c.ip),
            port: a.rx.port,
        },
        flows: a.rx.flows.count,
        skip_nic_config: nic.skip_nic_config,
    }
}

/// The zcrx area size in bytes: `--dmabuf-size` or [`uring::DEFAULT_AREA_PAGES`] pages; with
/// hugepages rounded up to whole 2 MiB pages.
fn zcrx_area_len(requested: Option<u64>, hugetlb: bool, page: usize) -> Result<usize> {
    let bytes = requested.unwrap_or((uring::DEFAULT_AREA_PAGES * page) as u64);
    let unit = if hugetlb {
        crate::sys::uapi::HUGEPAGE_2M as u64
    } else {
        page as u64
    };
    crate::sys::align_up(bytes, unit)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::Usage(format!("--dmabuf-size: zcrx area of {bytes} bytes")))
}

/// `registered zcrx ifq 1 on eth0 rx queue 3: area 33554432 bytes, refill ring 8192 entries`.
fn describe_zcrx(z: &Zcrx) -> String {
    format!(
        "registered zcrx ifq {} on {}: area {} bytes{}, refill ring {} entries{}",
        z.zcrx_id(),
        z.target(),
        z.area_len(),
        if z.area_is_hugetlb() {
            " (hugetlb)"
        } else {
            ""
        },
        z.rq_entries(),
        match z.rx_buf_len() {
            0 => String::new(),
            l => format!(", rx_buf_len {l}"),
        }
    )
}

/// The checks of a zcrx run that need no NIC change, on top of [`flows::check`]: there are at
/// least as many flows as ifqs (`-q NUM`: one ifq per bound queue, each of which must be able
/// to get a flow), and `--tcp-cc` is known. Returns the number of ifqs.
///
/// Errors: [`Error::Usage`].
fn check_flows(a: &ZcrxArgs) -> Result<u32> {
    flows::check(&a.rx)?;
    let n = a.rx.flows.count;
    let ifqs = a
        .nic
        .as_ref()
        .and_then(|nic| nic.queues)
        .map_or(1, |q| q.count);
    if n == 1 && ifqs != 1 {
        return Err(Error::Usage(format!(
            "-q: one io_uring zcrx ifq serves one RX queue: use -q 1 (got -q {ifqs}), or \
             --flows N with N >= {ifqs} for one ifq on each of the {ifqs} queues"
        )));
    }
    if ifqs > n {
        return Err(Error::Usage(format!(
            "--flows {n} over -q {ifqs}: one zcrx ifq per bound queue, and each ifq needs at \
             least one flow; use --flows {ifqs} or more, or -q {n} or fewer"
        )));
    }
    check_tcp_cc(&a.rx)?;
    Ok(ifqs)
}

/// One ifq's worker as worker 0 sees it before the flows come: what it registered.
type Ready = (usize, Result<(String, String)>);

/// The flows of one worker: flow number (accept order), connection, receive settings.
type Job = Vec<(usize, Accepted, ZcrxRxConfig)>;

/// What one ifq's worker did: what it received on, its flows (by accept order) and the ifq's
/// own counters; `Err` when the run did not get to receive (a registration refused, the accept
/// failed: worker 0's error is the run's).
type WorkerOut = Result<(String, Vec<(usize, flows::Flow)>, ZcrxCounters)>;

/// Receives the run's flows through the one flow engine ([`engine::run`]), one worker per
/// ifq of `targets`: worker w registers `targets[w]` on its own thread (a ring is its
/// creator's), worker 0 — this thread — registers its own, then (once `registered(all of them
/// did)` noted what the run now holds) listens, accepts the flows, hands each to the worker of
/// its queue (`device`'s queues, in the order of `targets`) and starts the clock; every worker
/// then receives all its flows at once on its ring. The figures, the verdict and the report
/// are the receivers' ([`flows::Measure`], [`super::record_receive`]).
fn receive_flows(
    a: &ZcrxArgs,
    targets: Vec<ZcrxParams>,
    plan: &crate::rcvbuf::RcvbufPlan,
    device: Option<&flows::Device>,
    registered: &mut dyn FnMut(bool),
    report: &RunReport,
) -> Result<()> {
    let rx = &a.rx;
    let n = rx.flows.count as usize;
    let workers = targets.len();
    let measured = flows::measured(rx);
    let streams = flows::flow_streams(rx, n)?;
    let eplan = flows::receive_plan(rx, workers, false);
    // Nothing validates: the payload of the one flow goes to stdout.
    let mut stdout = flows::payload_stdout(rx.validate.is_none())?;
    let buffers = targets.first().map_or(0, |t| {
        t.area_len as u64 / u64::from(t.rx_buf_len.unwrap_or(crate::sys::page_size() as u32))
    });
    let stall = StallContext {
        dmabuf_id: None,
        io_uring_ifindex: device.map(|d| d.ifindex),
        buffers,
    };
    let shared = Shared::new(n);
    // The device's reading from before the listen is taken once the ifqs are registered (their
    // queue restarts may reset a driver's counters), after this began.
    let early = flows::EarlySlot::default();
    let mut measure = flows::Measure::begin(rx, device, report.quiet(), &early);
    let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
    let mut job_txs = Vec::with_capacity(workers);
    let mut rest: Vec<engine::Worker<'_, WorkerOut>> = Vec::with_capacity(workers);
    let mut targets = targets.into_iter();
    let first_target = targets
        .next()
        .ok_or_else(|| Error::Failure("no zcrx ifq to register".into()))?;
    for params in targets {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        job_txs.push(job_tx);
        let ready = ready_tx.clone();
        let (shared, stall) = (&shared, &stall);
        rest.push(Box::new(move |ctx: &engine::Ctx<'_>| {
            let zcrx = register(&params);
            let described = zcrx.as_ref().map(describe).map_err(Clone::clone);
            let what = described.as_ref().map(|d| d.0.clone()).unwrap_or_default();
            let _ = ready.send((ctx.worker, described));
            let zcrx = zcrx?;
            drop(ready);
            let Ok(job) = job_rx.recv() else {
                return Ok((what, Vec::new(), ZcrxCounters::default()));
            };
            let (done, counters) = serve_job(zcrx, &params, job, ctx, None, stall, shared);
            Ok((what, done, counters))
        }));
    }
    drop(ready_tx);
    let first = |ctx: &engine::Ctx<'_>| -> WorkerOut {
        let zcrx = register(&first_target);
        let mut lines = vec![(0, zcrx.as_ref().map(describe).map_err(Clone::clone))];
        for _ in 1..workers {
            match ready_rx.recv() {
                Ok(r) => lines.push(r),
                Err(_) => break,
            }
        }
        lines.sort_by_key(|(w, _)| *w);
        let mut setup = Ok(());
        let mut what = String::new();
        for (w, r) in lines {
            match r {
                Ok((w_what, line)) => {
                    match measured {
                        true => log!(report, "worker {w}: {line}"),
                        false => log!(report, "{line}"),
                    }
                    if w == 0 {
                        what = w_what;
                    }
                }
                Err(e) if setup.is_ok() => setup = Err(e),
                Err(_) => {}
            }
        }
        registered(setup.is_ok());
        let (zcrx, mut jobs) = setup
            .and(zcrx)
            .and_then(|z| {
                signals::check()?;
                if let Ok(mut slot) = early.lock() {
                    *slot = flows::device_before_listen(rx, device);
                }
                let jobs =
                    accept_and_dispatch(rx, &streams, plan, device, workers, measured, report)?;
                Ok((z, jobs))
            })
            .inspect_err(|e| ctx.shared.note_failure(e))?;
        ctx.start_clock();
        for (tx, job) in job_txs.iter().zip(jobs.drain(1..)) {
            // A worker that already ended says why when joined.
            let _ = tx.send(job);
        }
        drop(job_txs);
        let job = jobs.pop().unwrap_or_default();
        let out0 = stdout.as_mut().map(|o| o as &mut dyn Write);
        let (mut done, counters) =
            serve_job(zcrx, &first_target, job, ctx, out0, &stall, ctx.shared);
        if let Some(out) = stdout.as_mut() {
            let flushed = out.flush().map_err(|e| Error::io("write(stdout)", &e));
            if let (Some((_, f)), Err(e)) = (done.first_mut(), flushed) {
                f.fail_with(e);
            }
        }
        Ok((what, done, counters))
    };
    let outs = engine::run(&eplan, &shared, &STOP, &mut measure, first, rest);
    let mut by_flow: Vec<Option<flows::Flow>> = (0..n).map(|_| None).collect();
    let mut records = Vec::with_capacity(workers);
    let mut failed = None;
    for (w, out) in outs.into_iter().enumerate() {
        match out {
            Ok((what, done, zcrx)) => {
                let mut ks = Vec::new();
                for (k, flow) in done {
                    ks.push(k);
                    by_flow[k] = Some(flow);
                }
                records.push(flows::WorkerRecord {
                    what,
                    queue: device.and_then(|d| d.queues.get(w).copied()),
                    flows: ks,
                    cpu: eplan.cpu_of(w),
                    zcrx,
                });
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let flows: Vec<flows::Flow> = by_flow.into_iter().flatten().collect();
    if flows.len() != n {
        return Err(Error::Failure(format!(
            "{} of {n} flows came back from the workers",
            flows.len()
        )));
    }
    flows::report_receive(flows::Report {
        rx,
        flows,
        workers: records,
        shared: &shared,
        measure,
        unbind: rx::UnbindMode::Normal,
        report,
    })
}

/// A ring of this thread with `params`' zcrx ifq registered on it.
///
/// Errors: the ring's and the registration's refusals, as skips where they mean one.
fn register(params: &ZcrxParams) -> Result<Zcrx> {
    let ring = uring::create_ring(&RingParams::default()).map_err(uring::setup_refusal)?;
    Zcrx::register(ring, params).map_err(|e| uring::register_refusal(e, params))
}

/// What a registered ifq is, for its worker's record, and its log line.
fn describe(z: &Zcrx) -> (String, String) {
    (
        format!("zcrx ifq {} on {}", z.zcrx_id(), z.target()),
        describe_zcrx(z),
    )
}

/// Listens, accepts the run's flows and sorts them into one job per worker: by the queue each
/// arrived on when there are several (its NAPI id against `device`'s queues), else all to
/// worker 0; flow k validates flow k's stream (`streams[k]`).
///
/// Errors: listen and accept errors; a flow that arrived on none of the bound queues.
fn accept_and_dispatch(
    rx: &crate::cli::Receive,
    streams: &[Option<crate::validate::StreamSpec>],
    plan: &crate::rcvbuf::RcvbufPlan,
    device: Option<&flows::Device>,
    workers: usize,
    measured: bool,
    report: &RunReport,
) -> Result<Vec<Job>> {
    let dispatch = match device {
        Some(d) if d.queues.len() > 1 => Some(QueueDispatch::read(
            &mut crate::netlink::netdev::Netdev::open()?,
            d.ifindex,
            &d.queues,
        )?),
        _ => None,
    };
    let listener = listen(rx, Some(plan), report)?;
    let conns = flows::accept(&listener, rx, Some(plan), report)?;
    drop(listener);
    let mut jobs: Vec<Job> = (0..workers).map(|_| Vec::new()).collect();
    for (k, conn) in conns.into_iter().enumerate() {
        let w = match &dispatch {
            None => 0,
            Some(d) => d.worker_of(conn.sock.fd())?.map_err(|id| {
                Error::Failure(format!(
                    "flow {k} arrived through NAPI {id}, which serves none of the bound rx \
                     queues {:?}: it cannot be received on their ifqs",
                    device.map(|d| d.queues.clone()).unwrap_or_default()
                ))
            })?,
        };
        let cfg = ZcrxRxConfig {
            validate: streams[k],
            idle_timeout: rx.timeout,
            progress_interval: rx.progress.filter(|_| !measured),
            verbose: report.verbose(),
            // Several flows' diagnostics come at the end, under their final numbers.
            live_diagnostics: streams.len() == 1,
            ..ZcrxRxConfig::default()
        };
        jobs[w].push((k, conn, cfg));
    }
    Ok(jobs)
}

/// One ifq's worker with its job: receives all its flows at once on its ring until they end
/// or the run stops (flow 0's payload to `out0` when nothing validates); a timeout is
/// explained from the kernel's counters (`stall`); before the ring closes, what other CPUs
/// still hold of its buffers goes back; then its connections close. Returns its flows (by
/// accept order) and the ifq's own counters.
fn serve_job(
    mut zcrx: Zcrx,
    params: &ZcrxParams,
    job: Job,
    ctx: &engine::Ctx<'_>,
    out0: Option<&mut dyn Write>,
    stall: &StallContext,
    shared: &Shared,
) -> (Vec<(usize, flows::Flow)>, ZcrxCounters) {
    let started = Instant::now();
    let cpu_at_start = crate::sys::cpu::thread_cpu_time();
    let zflows: Vec<ZcrxFlow<'_>> = job
        .iter()
        .map(|(_, conn, cfg)| ZcrxFlow {
            sock: conn.sock.fd(),
            cfg,
        })
        .collect();
    let mut observer = Observer {
        shared,
        flows: job.iter().map(|(k, _, _)| *k).collect(),
        marks: vec![None; job.len()],
    };
    let (results, counters) = zcrx.receive_flows(&zflows, out0, shared.run_stop(), &mut observer);
    drop(zflows);
    let results: Vec<_> = results
        .into_iter()
        .zip(&job)
        .map(|((stats, r), (_, conn, _))| {
            // Explained while the ifq (and its page pool) still exists.
            let r = r.map_err(|e| explain_stall(e, stall, &conn.sock, conn.rcvbuf.as_ref()));
            (stats, r)
        })
        .collect();
    release::return_deferred_buffers(&mut KernelEnv::new(match &params.target {
        ZcrxTarget::Device { ifindex, .. } => Some(*ifindex),
        ZcrxTarget::NoDev => None,
    }));
    drop(zcrx);
    let done = job
        .into_iter()
        .zip(results)
        .zip(observer.marks)
        .map(|(((k, conn, _), (stats, result)), mark)| {
            flows::flow_ended(shared, &result, &stats);
            let flow = flows::Flow::ended(
                conn,
                flows::Ran {
                    stats,
                    result,
                    started,
                    mark,
                    cpu_at_start,
                    cpu: ctx.cpu,
                    worker: ctx.worker,
                },
            );
            (k, flow)
        })
        .collect();
    (done, counters)
}

/// The live figures of one worker's flows, fed by its receive loop.
struct Observer<'a> {
    shared: &'a Shared,
    /// The run's flow number of each of the worker's flows.
    flows: Vec<usize>,
    marks: Vec<Option<engine::Mark>>,
}

impl FlowsObserver for Observer<'_> {
    fn tick(&mut self, bytes: &[u64]) {
        let mut cpu = None;
        for ((&k, &b), mark) in self.flows.iter().zip(bytes).zip(&mut self.marks) {
            self.shared.live(k).observe(b, mark, || {
                *cpu.get_or_insert_with(crate::sys::cpu::thread_cpu_time)
            });
        }
    }

    fn failed(&mut self, _flow: usize, error: &Error) {
        self.shared.note_failure(error);
    }
}
