//! `-l --zcrx -s ADDR -p PORT`: the io_uring zero-copy receive server, in the order of the
//! kernel's iou-zcrx selftest.

use std::io::Write;

use super::{
    await_hugepages, await_release, check_received, explain_stall, listen_and_accept, log,
    open_nic, pick_queues, rcvbuf_plan, record_receive, Accepted, NicRun, StallContext, Teardown,
};
use crate::caps::Missing;
use crate::cli::{IfName, NicArgs, Receive, ZcrxArgs};
use crate::error::{Error, Result};
use crate::nic::guards::SharedNic;
use crate::nic::queues::{describe_owned, wait_queues_free, QueuePolicy, QUEUE_FREE_WAIT};
use crate::nic::setup::{FlowTarget, ServerPlan};
use crate::release::kernel::KernelEnv;
use crate::release::{self, Env, Holdings, PoolOwner};
use crate::run_report::RunReport;
use crate::rx;
use crate::signals::{self, STOP};
use crate::uring::{self, RingParams, Zcrx, ZcrxParams, ZcrxRxConfig, ZcrxTarget};

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
    if super::flows::wanted(&a.rx) {
        return Err(Error::Usage(
            "--flows, --duration, --warmup, --cpus: the io_uring zcrx server receives one flow \
             until the peer closes (one zcrx ifq on one RX queue); use them with the devmem \
             server or --plain"
                .into(),
        ));
    }
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

/// The RX queue for the zcrx ifq: `-t` (with `-q 1`), else the last RX queue (as the devmem
/// server). Queue 0 is accepted only with `-n` (without NIC configuration nothing needs it to
/// stay in RSS); then the kernel's answer decides.
fn zcrx_queue(a: &NicArgs, nic: &SharedNic, report: &RunReport) -> Result<u32> {
    if let Some(n) = a.queues.map(|q| q.count).filter(|&n| n != 1) {
        return Err(Error::Usage(format!(
            "-q: one io_uring zcrx ifq serves one RX queue: use -q 1 (got -q {n})"
        )));
    }
    let policy = QueuePolicy::Server;
    Ok(pick_queues(nic, a.queues, policy, a.skip_nic_config, report)?.start)
}

fn log_zcrx(z: &Zcrx, report: &RunReport) {
    log!(
        report,
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
    );
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
    let (mut stats, result) =
        zcrx.receive_logged(sock.fd(), &rx_cfg, &STOP, &mut out, &mut log_sink);
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
    let result = result
        .and(flushed)
        .and_then(|()| check_received(rx, stats.bytes, false));
    record_receive(&stats, result, report)
}
