//! `-l --zcrx -s ADDR -p PORT`: the io_uring zero-copy receive server, in the order of the
//! kernel's iou-zcrx selftest.

use std::io::Write;
use std::sync::mpsc;
use std::time::Instant;

use super::{
    await_hugepages, await_release, check_tcp_cc, explain_stall, flows, listen, listen_and_accept,
    log, open_nic, pick_queues, rcvbuf_plan, record_receive, Accepted, NicRun, StallContext,
    Teardown,
};
use crate::caps::Missing;
use crate::cli::{IfName, NicArgs, Receive, ZcrxArgs};
use crate::conn::QueueDispatch;
use crate::error::{Error, Result};
use crate::figures::cpu::cpu_for_flow;
use crate::nic::guards::SharedNic;
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
/// `-n`), the zcrx ifq on one RX queue, listen, accept, a multishot `RECV_ZC` receive
/// validated in place, the summary; then the ring is closed (which frees the queue), the
/// queue is awaited free, and every NIC change is undone.
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
    let several = flows::wanted(&a.rx);
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
    if several {
        return serve_flows(a, area_len, hugetlb, buf_len, pages, report);
    }
    // Everything that makes this run a skip is checked before anything is changed; hugepages
    // a previous binding or area still holds are waited for.
    uring::check_io_uring_enabled()?;
    let mut env = KernelEnv::new(None);
    await_hugepages(&mut env, pages, report)?;
    signals::check()?;
    let ring = uring::create_ring(&RingParams::default()).map_err(uring::setup_refusal)?;
    uring::require_recv_zc(&ring)?;
    uring::require_net_admin(&ring)?;
    signals::check()?;
    let mut params = ZcrxParams {
        target: ZcrxTarget::NoDev,
        area_len,
        hugetlb,
        rq_entries: ZcrxParams::rq_entries_for(area_len, buf_len),
        rx_buf_len: a.rx_buf_len,
    };
    let Some(nic_args) = &a.nic else {
        let zcrx =
            Zcrx::register(ring, &params).map_err(|e| uring::register_refusal(e, &params))?;
        let hugepages = release::hugepage_goal(&mut env, pages);
        let what = format!("zcrx ifq {} (no device)", zcrx.zcrx_id());
        log_zcrx(&zcrx, report);
        let received = accept_and_receive(&a.rx, zcrx, None, &mut env, report);
        let held = Holdings {
            what,
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
    let mut teardown = Teardown::new(KernelEnv::new(Some(ifindex)), report);
    let mut nic = NicRun::new(&shared, nic_args.verify_restore, report)?;
    let queue = zcrx_queue(nic_args, &shared, report)?;
    signals::check()?;
    log!(report, "using rx queue {queue}");
    params.target = ZcrxTarget::Device {
        ifname: ifname.to_string(),
        ifindex,
        rxq: queue,
    };
    teardown.hold(Holdings {
        what: format!("the zcrx area for {ifname}"),
        queues: vec![queue],
        pools: PoolOwner::Nothing,
        hugepages: None,
    });
    nic.setup()
        .configure_server(&server_plan(a, nic_args, queue))?;
    shared.interrupted()?;
    // io_uring page pools of the device that are not this run's.
    let other_pools = teardown
        .env()
        .page_pools()
        .map(|p| release::io_uring_pool_ids(&p, ifindex))
        .unwrap_or_default();
    let zcrx = Zcrx::register(ring, &params).map_err(|e| uring::register_refusal(e, &params))?;
    let hugepages = release::hugepage_goal(teardown.env(), pages);
    teardown.hold(Holdings {
        what: format!("zcrx ifq {} on {ifname}", zcrx.zcrx_id()),
        queues: vec![queue],
        pools: PoolOwner::IoUring {
            ifindex,
            before: other_pools,
        },
        hugepages,
    });
    log_zcrx(&zcrx, report);
    let received = accept_and_receive(&a.rx, zcrx, Some(ifname), teardown.env(), report);

    // The ring is closed: wait until the kernel has let go of the queue, so header split can
    // be restored.
    match shared.with(|n| wait_queues_free(n, &[queue], QUEUE_FREE_WAIT)) {
        Ok(still) if still.is_empty() => {}
        Ok(still) => report.warn(format_args!(
            "{ifname}: {} still owned {} ms after closing the io_uring ring",
            describe_owned(&still),
            QUEUE_FREE_WAIT.as_millis()
        )),
        Err(e) => report.warn(format_args!(
            "{ifname}: could not check that rx queue {queue} is free: {e}"
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

/// The RX queue for the zcrx ifq of a one-flow run: `-t` (with `-q 1`), else the last RX queue (as the devmem
/// server). Queue 0 is accepted only with `-n` (without NIC configuration nothing needs it to
/// stay in RSS); then the kernel's answer decides.
fn zcrx_queue(a: &NicArgs, nic: &SharedNic, report: &RunReport) -> Result<u32> {
    if let Some(n) = a.queues.map(|q| q.count).filter(|&n| n != 1) {
        return Err(Error::Usage(format!(
            "-q: one io_uring zcrx ifq serves one RX queue: use -q 1 (got -q {n}), or \
             --flows N with N >= {n} for one ifq on each of the {n} queues"
        )));
    }
    let policy = QueuePolicy::Server;
    Ok(pick_queues(nic, a.queues, policy, a.skip_nic_config, report)?.start)
}

fn log_zcrx(z: &Zcrx, report: &RunReport) {
    log!(report, "{}", describe_zcrx(z));
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

/// Listens on `-s`/`-p`, accepts one connection and receives it through `zcrx`; prints the
/// summary and records the JSON object (also for a failed run). The ring is closed before the
/// connection socket; before that, what other CPUs still hold of the received buffers is
/// freed ([`release::return_deferred_buffers`]), so the ifq's page pool can go with the ring.
fn accept_and_receive(
    rx: &Receive,
    mut zcrx: Zcrx,
    ifname: Option<&IfName>,
    env: &mut dyn Env,
    report: &RunReport,
) -> Result<()> {
    let buf_len = match zcrx.rx_buf_len() {
        0 => crate::sys::page_size() as u32,
        l => l,
    };
    let buffers = zcrx.area_len() as u64 / u64::from(buf_len);
    let plan = rcvbuf_plan(rx, ifname, buffers, buf_len);
    let Accepted { sock, rcvbuf } = listen_and_accept(rx, Some(&plan), report)?;
    let rx_cfg = ZcrxRxConfig {
        validate: rx.validate,
        idle_timeout: rx.timeout,
        progress_interval: rx.progress,
        verbose: report.verbose(),
        ..ZcrxRxConfig::default()
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, rx::stop_aware_stdout(&STOP)?);
    let mut log_sink = std::io::stderr();
    let (mut stats, result) = zcrx.receive_flow(sock.fd(), &rx_cfg, &STOP, &mut out, &mut log_sink);
    // Explained while the ifq (and its page pool) still exists.
    let result = match (result, ifname) {
        (Err(e), Some(i)) => {
            let ctx = StallContext {
                dmabuf_id: None,
                io_uring_ifindex: i.index().ok(),
                buffers,
            };
            Err(explain_stall(e, &ctx, &sock, rcvbuf.as_ref()))
        }
        (r, _) => r,
    };
    stats.rcvbuf = rcvbuf;
    release::return_deferred_buffers(env);
    drop(zcrx);
    drop(sock);
    let flushed = out.flush().map_err(|e| Error::io("write(stdout)", &e));
    record_receive(rx, &stats, result.and(flushed), report)
}

// ---------------------------------------------------------------------------------------------
// Several flows: one ifq per bound queue, one worker per ifq
// ---------------------------------------------------------------------------------------------

/// The checks of a multi-flow zcrx run that need no NIC change, on top of
/// [`flows::check`]: there are at least as many flows as ifqs (`-q NUM`: one ifq per bound
/// queue, each of which must be able to get a flow), and `--tcp-cc` is known. Returns the
/// number of ifqs.
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
    if ifqs > n {
        return Err(Error::Usage(format!(
            "--flows {n} over -q {ifqs}: one zcrx ifq per bound queue, and each ifq needs at \
             least one flow; use --flows {ifqs} or more, or -q {n} or fewer"
        )));
    }
    check_tcp_cc(&a.rx)?;
    Ok(ifqs)
}

/// The zcrx server with `--flows`, `--duration`, `--warmup`, `--cpus` (the multi-flow
/// receive of `crate::modes::flows`): the NIC setup of the devmem server for the bound queues
/// `-t START -q NUM` (for NUM > 1 an RSS context over exactly them and one rule to it), then
/// one worker thread per bound queue, which creates its own ring and registers its own ifq
/// (area of `area_len` bytes, `buf_len`-byte buffers) on its queue; the N connections are
/// accepted and each handed to the worker of the queue it arrived on (its NAPI id,
/// [`crate::conn::QueueDispatch`]); each worker receives all its flows at once on its ring
/// ([`Zcrx::receive_flows`]), flow k validating flow k's stream. The figures are the devmem
/// multi-flow run's, with one record per worker. Then every ring is closed, the queues are
/// awaited free, and the NIC is undone. With `--zcrx-nodev`: one ifq without a device, no NIC.
///
/// Errors: as [`run`]; a flow that arrived on none of the bound queues (`Error::Failure`,
/// naming it); the first flow's failure.
fn serve_flows(
    a: &ZcrxArgs,
    area_len: usize,
    hugetlb: bool,
    buf_len: usize,
    pages: u64,
    report: &RunReport,
) -> Result<()> {
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
    uring::check_io_uring_enabled()?;
    let mut env = KernelEnv::new(None);
    await_hugepages(&mut env, all_pages, report)?;
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

    let ifname = &nic_args.ifname;
    let ifindex = ifname.index()?;
    let shared = open_nic(ifname)?;
    let mut teardown = Teardown::new(KernelEnv::new(Some(ifindex)), report);
    let mut nic = NicRun::new(&shared, nic_args.verify_restore, report)?;
    let choice = pick_queues(
        &shared,
        nic_args.queues,
        QueuePolicy::Server,
        nic_args.skip_nic_config,
        report,
    )?;
    let queues = choice.queues();
    log!(
        report,
        "using rx queues {}..={}: one zcrx ifq on each",
        choice.start,
        choice.start + choice.num - 1
    );
    teardown.hold(Holdings {
        what: format!("the zcrx areas for {ifname}"),
        queues: queues.clone(),
        pools: PoolOwner::Nothing,
        hugepages: None,
    });
    let mut plan_nic = server_plan(a, nic_args, choice.start);
    plan_nic.num_queues = choice.num;
    nic.setup().configure_server(&plan_nic)?;
    shared.interrupted()?;
    if let Some(why) = nic.setup().shared_queue() {
        report.log(format_args!("{ifname}: {why}"));
    }
    let other_pools = teardown
        .env()
        .page_pools()
        .map(|p| release::io_uring_pool_ids(&p, ifindex))
        .unwrap_or_default();
    let mut registered = |all: bool| {
        let hugepages = all
            .then(|| release::hugepage_goal(teardown.env(), all_pages))
            .flatten();
        teardown.hold(Holdings {
            what: format!("zcrx ifqs on {ifname} rx queues {queues:?}"),
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
            "{ifname}: {} still owned {} ms after closing the io_uring rings",
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

/// One ifq's worker as the main thread sees it before the flows come: what it registered.
type Ready = (usize, Result<(String, String)>);

/// The flows of one worker: flow number, connection, receive settings.
type Job = Vec<(usize, Accepted, ZcrxRxConfig)>;

/// Runs one worker per ifq of `targets` (worker w registers `targets[w]`; once each has
/// answered, `registered(all of them did)` notes what the run now holds), accepts the flows, hands each to
/// the worker of its queue (`device`'s queues, in the order of `targets`), measures the run
/// ([`flows::Measure`]) and reports it.
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
    let streams = flows::flow_streams(rx, n)?;
    let shared = flows::Shared::new(n);
    std::thread::scope(|scope| {
        let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
        let mut job_txs = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for (w, params) in targets.into_iter().enumerate() {
            let (job_tx, job_rx) = mpsc::channel::<Job>();
            job_txs.push(job_tx);
            let ready = ready_tx.clone();
            let shared = &shared;
            let cpu = rx.flows.cpus.as_deref().and_then(|c| cpu_for_flow(c, w));
            handles.push(scope.spawn(move || ifq_worker(w, params, cpu, ready, job_rx, shared)));
        }
        drop(ready_tx);
        let mut setup = Ok(());
        let mut whats = vec![String::new(); workers];
        for _ in 0..workers {
            match ready_rx.recv() {
                Ok((w, Ok((what, line)))) => {
                    log!(report, "worker {w}: {line}");
                    whats[w] = what;
                }
                Ok((_, Err(e))) if setup.is_ok() => setup = Err(e),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        registered(setup.is_ok());
        let started = setup.and_then(|()| {
            signals::check()?;
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
            let mut jobs: Vec<Job> = (0..workers).map(|_| Vec::new()).collect();
            for (k, conn) in conns.into_iter().enumerate() {
                let w = match &dispatch {
                    None => 0,
                    Some(d) => d.worker_of(conn.sock.fd())?.map_err(|id| {
                        Error::Failure(format!(
                            "flow {k} arrived through NAPI {id}, which serves none of the \
                             bound rx queues {:?}: it cannot be received on their ifqs",
                            device.map(|d| d.queues.clone()).unwrap_or_default()
                        ))
                    })?,
                };
                let cfg = ZcrxRxConfig {
                    validate: streams[k],
                    idle_timeout: rx.timeout,
                    verbose: report.verbose(),
                    // Several flows' diagnostics come at the end, under their final numbers.
                    live_diagnostics: n == 1,
                    ..ZcrxRxConfig::default()
                };
                jobs[w].push((k, conn, cfg));
            }
            let measure = flows::Measure::begin(rx, device);
            for (tx, job) in job_txs.iter().zip(jobs) {
                // A worker that already ended says why when joined.
                let _ = tx.send(job);
            }
            Ok(measure)
        });
        // Workers without flows (or all of them, when the run did not start) end now.
        drop(job_txs);
        let mut measure = match started {
            Ok(m) => m,
            Err(e) => {
                for h in handles {
                    let _ = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                }
                return Err(e);
            }
        };
        measure.supervise(&shared, report);
        let mut by_flow: Vec<Option<flows::Flow>> = (0..n).map(|_| None).collect();
        let mut records = Vec::with_capacity(workers);
        for (w, h) in handles.into_iter().enumerate() {
            // A worker's panic (a bug) goes on unwinding here, so the undo guards still run.
            let (done, zcrx) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            let mut ks = Vec::new();
            for (k, flow) in done {
                ks.push(k);
                by_flow[k] = Some(flow);
            }
            records.push(flows::WorkerRecord {
                what: std::mem::take(&mut whats[w]),
                queue: device.and_then(|d| d.queues.get(w).copied()),
                flows: ks,
                cpu: rx.flows.cpus.as_deref().and_then(|c| cpu_for_flow(c, w)),
                zcrx,
            });
        }
        let flows: Vec<flows::Flow> = by_flow.into_iter().flatten().collect();
        if flows.len() != n {
            return Err(Error::Failure(format!(
                "{} of {n} flows came back from the workers",
                flows.len()
            )));
        }
        measure.finish(flows, records, &shared, report)
    })
}

/// One ifq's worker: pins itself (`--cpus`), creates its ring and registers its ifq
/// (reported on `ready` as what it is and its log line), then receives the flows it is
/// handed, all at once, until they end or the run stops. Before its ring closes, what other
/// CPUs still hold of its buffers goes back; then its connections close.
fn ifq_worker(
    w: usize,
    params: ZcrxParams,
    cpu: Option<usize>,
    ready: mpsc::Sender<Ready>,
    jobs: mpsc::Receiver<Job>,
    shared: &flows::Shared,
) -> (Vec<(usize, flows::Flow)>, ZcrxCounters) {
    let zcrx = cpu
        .map(crate::sys::cpu::pin_current_thread)
        .transpose()
        .and_then(|_| uring::create_ring(&RingParams::default()).map_err(uring::setup_refusal))
        .and_then(|ring| {
            Zcrx::register(ring, &params).map_err(|e| uring::register_refusal(e, &params))
        });
    let mut zcrx = match zcrx {
        Ok(z) => {
            let what = format!("zcrx ifq {} on {}", z.zcrx_id(), z.target());
            let _ = ready.send((w, Ok((what, describe_zcrx(&z)))));
            z
        }
        Err(e) => {
            let _ = ready.send((w, Err(e)));
            return (Vec::new(), ZcrxCounters::default());
        }
    };
    drop(ready);
    let Ok(job) = jobs.recv() else {
        return (Vec::new(), ZcrxCounters::default());
    };
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
    let (results, counters) = zcrx.receive_flows(&zflows, shared.run_stop(), &mut observer);
    drop(zflows);
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
            shared.ended(&result, &stats);
            let flow = flows::Flow::ended(
                conn,
                flows::Ran {
                    stats,
                    result,
                    started,
                    mark,
                    cpu_at_start,
                    cpu,
                    worker: w,
                },
            );
            shared.done(k);
            (k, flow)
        })
        .collect();
    (done, counters)
}

/// The live figures of one worker's flows, fed by its receive loop.
struct Observer<'a> {
    shared: &'a flows::Shared,
    /// The run's flow number of each of the worker's flows.
    flows: Vec<usize>,
    marks: Vec<Option<flows::Mark>>,
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
