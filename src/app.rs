//! Mode orchestration: one top-down flow per mode, in the order of ncdevmem.c's `main` —
//! check what can make the run a skip, allocate, bind, accept, receive, report, unwind.
//!
//! This module decides policy (which failures are skips) and calls the kernel only through
//! [`crate::nic`] (NIC setup, probe and report, behind the [`NicOps`] seam),
//! [`crate::udmabuf`] and [`crate::sys::socket`]. Resources are locals declared in
//! acquisition order, so Rust drops them in reverse: the TCP socket, then the NIC setup (the
//! binding first — closing its netlink socket unbinds — then the flow rule, ntuple feature,
//! RSS table and header split), then the dma-buf mapping. In zcrx mode the io_uring ring takes
//! the binding's place: closing it releases the queue ([`crate::uring`]). What the kernel
//! still holds of a run after that (page pools, hugepages) is waited for on exit, and what a
//! previous run still holds on start, as `crate::release` decides.

use std::cell::Cell;
use std::io::Write;
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use crate::cli::{Config, Mode, Seed, Verbosity};
use crate::error::{Error, Result};
use crate::netlink::ctrl::skip_if_family_missing;
use crate::netlink::netdev::{BindRxRequest, Netdev};
use crate::nic::guards::SharedNic;
use crate::nic::probe::{run_probe, ProbeParams};
use crate::nic::queues::{
    choose_queues, describe_owned, wait_queues_free, QueueChoice, QueuePolicy, QUEUE_FREE_WAIT,
};
use crate::nic::report::{HostCaps, NicReport};
use crate::nic::setup::{
    run_configured, run_with_early_unbind, EarlyUnbind, FlowTarget, ServerPlan,
};
use crate::nic::snapshot::{verify_restored, NicSnapshot};
use crate::nic::NicOps;
use crate::rcvbuf::RcvbufPlan;
use crate::release::kernel::KernelEnv;
use crate::release::{self, Env, Holdings, PoolOwner};
use crate::rx::{self, NoFragMemory, RxConfig, UnbindMode};
use crate::signals::{self, STOP};
use crate::stats::{RcvbufReport, RxStats};
use crate::sys::socket::{self, TcpRxSocket};
use crate::tx::{self, LineSource, PatternSend, PatternSource, TxConfig, TxSource};
use crate::udmabuf::{self, HostPaths, Udmabuf, UdmabufParams};
use crate::uring::{self, RingParams, Zcrx, ZcrxParams, ZcrxRxConfig, ZcrxTarget};
use crate::validate::StreamSpec;

/// `log!(cfg, "fmt", args..)`: one `ncdevmem-rs: ` line on stderr, unless `--quiet`.
macro_rules! log {
    ($cfg:expr, $($arg:tt)*) => {
        if $cfg.verbosity != Verbosity::Quiet {
            crate::elog!("{}: {}", crate::cli::PROGRAM, format_args!($($arg)*));
        }
    };
}

/// Runs the mode `cfg` selects. Installs the SIGINT/SIGTERM/SIGHUP handlers first, so every later
/// step can unwind on a signal.
///
/// # Errors
/// Whatever the mode's flow returns; [`Error::exit_code`] maps it to the process exit code.
pub fn run(cfg: &Config) -> Result<()> {
    signals::install()?;
    let Some(path) = &cfg.json else {
        return run_mode(cfg);
    };
    // A summary that cannot be written is known before anything is set up.
    crate::stats::check_json_path(path)?;
    let before = crate::stats::file_identity(path);
    let result = run_mode(cfg);
    match &result {
        // The mode ended before its summary (no connection within --timeout, a refused bind, a
        // skip): the verdict still goes to FILE.
        Err(e) if crate::stats::file_identity(path) == before => {
            let json = serde_json::json!({
                "mode": json_mode_name(cfg),
                "ok": false,
                "verdict": verdict_name(&result),
                "error": e.to_string(),
            });
            write_summary(path, &json, result)
        }
        _ => result,
    }
}

/// The `"mode"` the JSON summary of `cfg`'s mode carries.
fn json_mode_name(cfg: &Config) -> &'static str {
    match cfg.mode {
        Mode::PlainServer => "plain TCP",
        Mode::Server => "devmem",
        Mode::ZcrxServer => "io_uring zcrx",
        Mode::Client => "devmem-tx",
        Mode::PatternSender => "pattern-sender",
        Mode::Probe => "probe",
        Mode::Report => "report",
    }
}

/// Writes `json` to `--json` `path` and combines that with the run's `result`: a run that
/// failed keeps its own error and exit code (the write failure is logged), a run that
/// succeeded fails with the write error.
fn write_summary(
    path: &std::path::Path,
    json: &serde_json::Value,
    result: Result<()>,
) -> Result<()> {
    match (crate::stats::write_json_atomic(path, json), result) {
        (Ok(()), r) => r,
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(run)) => {
            crate::elog!("{}: {e}", crate::cli::PROGRAM);
            Err(run)
        }
    }
}

/// Runs the mode itself (see [`run`]).
fn run_mode(cfg: &Config) -> Result<()> {
    match cfg.mode {
        Mode::PlainServer => plain_server(cfg),
        Mode::PatternSender => pattern_sender(cfg),
        Mode::Server => devmem_server(cfg),
        Mode::Client => devmem_client(cfg),
        Mode::Probe => probe(cfg),
        Mode::ZcrxServer => zcrx_server(cfg).map_err(zcrx_skip_context),
        Mode::Report => report_mode(cfg),
    }
}

/// Opens NIC control ([`NicOps`]) for `ifname`: the real ethtool/netdev backend
/// ([`crate::nic::real::RealNic`]).
fn open_nic(ifname: &str) -> Result<Box<dyn NicOps>> {
    Ok(Box::new(crate::nic::real::RealNic::open(ifname)?))
}

/// `--verify-restore`: the NIC's state before the run, to compare after the unwind.
fn snapshot_if(cfg: &Config, nic: &SharedNic) -> Result<Option<NicSnapshot>> {
    if !cfg.verify_restore {
        return Ok(None);
    }
    nic.with(|n| Ok(Some(NicSnapshot::take(n))))
}

/// Compares the NIC with `before` (when `--verify-restore` took one) and combines that with
/// the run's `result`: a NIC that does not match fails the run (exit 1), also a run that was
/// a skip; a run that failed otherwise keeps its own error (the verify failure is logged).
fn verify_and_combine(
    cfg: &Config,
    nic: &SharedNic,
    before: Option<NicSnapshot>,
    result: Result<()>,
) -> Result<()> {
    let Some(before) = before else {
        return result;
    };
    let verified = verify_restored(nic, &before);
    match (&result, verified) {
        (_, Ok(())) => {
            log!(
                cfg,
                "{}: NIC state matches its snapshot from before the run",
                nic.ifname()
            );
            result
        }
        // A NIC left changed is worse than a skip: the verify failure decides the exit code.
        (Ok(()) | Err(Error::Skip(_)), Err(e)) => Err(e),
        (Err(_), Err(e)) => {
            crate::elog!("{}: {e}", crate::cli::PROGRAM);
            result
        }
    }
}

/// `--report -f IF`: the capability report on stdout (not with `--quiet`) and `--json FILE`.
/// Read-only.
fn report_mode(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    if_nametoindex(ifname)?;
    let mut nic = open_nic(ifname)?;
    let host = HostCaps::probe(cfg.rx_page_size, cfg.dmabuf_size);
    let report = NicReport::gather(nic.as_mut(), host, true);
    let printed = match cfg.verbosity {
        Verbosity::Quiet => Ok(()),
        _ => print_stdout(&report.render_text()),
    };
    match &cfg.json {
        Some(path) => write_summary(path, &report.to_json(), printed),
        None => printed,
    }
}

/// Writes `text` to stdout and flushes it. Unlike `print!`, a stdout whose reader went away
/// (`| head -1`, `| true`: `EPIPE`, SIGPIPE being ignored) is an error, never a panic.
///
/// Errors: [`Error::Sys`] naming `write(stdout)`; [`Error::Interrupted`] never (plain stdout).
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("write(stdout)", &e))
}

/// `-l --plain`: listen, accept one connection, receive over plain TCP, validate or print,
/// report. No devmem, no NIC changes: it validates the TCP path and the sender.
fn plain_server(cfg: &Config) -> Result<()> {
    let plan = plain_rcvbuf_plan(cfg);
    let (mut sock, rcvbuf) = listen_and_accept(cfg, plan.as_ref())?;
    let rx_cfg = rx_config(cfg, RxConfig::plain());
    receive_and_report(
        cfg,
        &mut sock,
        None::<&NoFragMemory>,
        &rx_cfg,
        rcvbuf,
        None,
        None,
    )
}

/// `-l -f IF -s ADDR -p PORT`: the devmem RX server (ncdevmem.c `do_server`): NIC setup
/// (unless `-n`), bind, accept, receive, then every NIC change undone in reverse order — also
/// on errors, signals (the receive loop returns `Error::Interrupted`) and panics.
fn devmem_server(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let params = UdmabufParams::new(cfg.rx_page_size, cfg.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created or changed;
    // hugepages a previous binding still holds are waited for. `-a` first: it only asks the
    // kernel's bind-rx policy.
    let autorelease = cfg
        .bind_autorelease
        .map(|want| bind_autorelease_attr(cfg, want));
    let autorelease = autorelease.transpose()?.flatten();
    udmabuf::preflight_device(&params, &HostPaths::default())?;
    if cfg.autorelease.is_some() {
        socket::probe_devmem_autorelease()?;
    }
    if let Some(size) = cfg.rx_page_size {
        require_rx_page_size(size)?;
    }
    let mut env = KernelEnv::new(Some(ifindex));
    await_hugepages(cfg, &mut env, params.hugepages_needed())?;
    // A stop signal is acted on between the steps (and between the NIC setup steps, see
    // `crate::nic::setup`), not only once the receive loop runs.
    signals::check()?;
    let nic = SharedNic::new(open_nic(ifname)?);
    let before = snapshot_if(cfg, &nic)?;
    let choice = pick_queues(cfg, &nic, QueuePolicy::Server, cfg.skip_nic_config)?;
    let (start, num) = (choice.start, choice.num);
    log!(cfg, "using queues {start}..={}", start + num - 1);

    let mem = Udmabuf::create(&params)?;
    let hugepages = release::hugepage_goal(&mut env, params.hugepages_needed());
    signals::check()?;
    let request = BindRxRequest::new(ifindex, mem.fd(), &choice.queues())
        .ifname(ifname)
        .rx_page_size(cfg.rx_page_size)
        .autorelease(autorelease);
    let plan = server_plan(cfg, start, num)?;
    let quiet = cfg.verbosity == Verbosity::Quiet;
    let bound_id = Cell::new(None);
    let result = run_with_early_unbind(&nic, &plan, &request, quiet, QUEUE_FREE_WAIT, |id, u| {
        bound_id.set(Some(id));
        let result = bound_server(cfg, &mem, &params, id, (start, num), u);
        // The connection is closed: what other CPUs still hold of its buffers is freed now,
        // so the binding's page pool can go as soon as it is unbound.
        release::return_deferred_buffers(&mut env);
        result
    });
    let result = verify_and_combine(cfg, &nic, before, result);
    drop(mem);
    let (what, pools) = match bound_id.get() {
        Some(id) => (
            format!("dmabuf binding {id} on {ifname}"),
            PoolOwner::Dmabuf(vec![id]),
        ),
        None => (format!("the udmabuf for {ifname}"), PoolOwner::Nothing),
    };
    await_release(
        cfg,
        &mut env,
        &Holdings {
            what,
            queues: choice.queues(),
            pools,
            hugepages,
        },
    );
    result
}

/// The devmem server once `mem` is bound to queues `start..start+num` as binding `id`: listen,
/// accept, receive, report. The connection is closed when it returns. `-U 1` and `-U 2`
/// unbind through `unbind` during the receive (series v10's ncdevmem `unbind_mode`).
fn bound_server(
    cfg: &Config,
    mem: &Udmabuf,
    params: &UdmabufParams,
    id: u32,
    (start, num): (u32, u32),
    unbind: &mut EarlyUnbind<'_>,
) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    log!(
        cfg,
        "bound {ifname} rx queues {start}..={} to dmabuf id {id} ({} bytes{}{})",
        start + num - 1,
        params.size_bytes,
        if params.hugetlb { ", hugetlb" } else { "" },
        match cfg.rx_page_size {
            Some(n) => format!(", rx-page-size {n}"),
            None => String::new(),
        }
    );
    let niov_size = cfg.rx_page_size.unwrap_or(crate::sys::page_size() as u32);
    let buffers = params.size_bytes / u64::from(niov_size);
    let plan = rcvbuf_plan(cfg, Some(ifname), buffers, niov_size);
    let (mut sock, rcvbuf) = listen_and_accept(cfg, Some(&plan))?;
    if let Some(on) = cfg.autorelease {
        socket::set_devmem_autorelease(sock.fd(), on)?;
    }
    let mut rx_cfg = rx_config(
        cfg,
        RxConfig::devmem(id, niov_size).holding_tokens_of(buffers),
    );
    let stall = StallContext {
        dmabuf_id: Some(id),
        io_uring_ifindex: None,
        buffers,
    };
    rx_cfg.unbind = cfg.unbind;
    let mut hook: Option<Box<dyn FnOnce() + '_>> = None;
    match cfg.unbind {
        UnbindMode::Normal => {}
        UnbindMode::BeforeRecv => {
            await_first_data(&sock)?;
            log!(
                cfg,
                "-U 1: data is queued; unbinding before the first recvmsg",
            );
            unbind.unbind();
        }
        UnbindMode::AfterRecv => {
            // As C: the first batch's tokens go back before the unbind.
            rx_cfg.token_high_water = 1;
            hook = Some(Box::new(move || {
                log!(
                    cfg,
                    "-U 2: first recvmsg done and its tokens released; unbinding",
                );
                unbind.unbind();
            }));
        }
    }
    receive_and_report(
        cfg,
        &mut sock,
        Some(mem),
        &rx_cfg,
        rcvbuf,
        Some(&stall),
        hook,
    )
}

/// The NIC setup of a server on queues `start_queue..start_queue+num_queues`: the flow rule
/// for `-s`, `-c` and `-p` (none with `-n`).
fn server_plan(cfg: &Config, start_queue: u32, num_queues: u32) -> Result<ServerPlan> {
    Ok(ServerPlan {
        start_queue,
        num_queues,
        flow: FlowTarget {
            server: required(cfg.server.as_ref(), "-s")?.ip,
            client: cfg.client.as_ref().map(|c| c.ip),
            port: required(cfg.port, "-p")?,
        },
        skip_nic_config: cfg.skip_nic_config,
    })
}

/// How long `-U 1` waits after accept for data to be queued before it unbinds (C ncdevmem
/// polls 5000 ms).
const UNBIND_DATA_WAIT: Duration = Duration::from_secs(5);

/// `-U 1`: waits up to [`UNBIND_DATA_WAIT`] until the accepted socket is readable, checking
/// for a stop signal between short polls.
///
/// Errors: `Error::Timeout` when no data came (C: "poll failed or timed out waiting for
/// data"); `Error::Sys` from `poll`; `Error::Interrupted` on a stop signal.
fn await_first_data(sock: &TcpRxSocket) -> Result<()> {
    let deadline = Instant::now().checked_add(UNBIND_DATA_WAIT);
    let on_data = "poll(POLLIN) on the data socket";
    if crate::conn::poll_ready(sock.fd(), libc::POLLIN, deadline, &STOP, on_data)? {
        return Ok(());
    }
    Err(Error::Timeout(format!(
        "-U 1: no data within {} s of accept, so there was nothing to unbind under",
        UNBIND_DATA_WAIT.as_secs()
    )))
}

/// `-a`: the bind-rx autorelease attribute to send, from the kernel's bind-rx policy (asked
/// before anything is changed). A kernel with the attribute gets `(its number, want)`. One
/// without it: `-a 0` binds without the attribute (logged: such a kernel has only the
/// release-at-close behaviour, which a run that returns every token cannot tell apart), and
/// `-a 1` is a skip.
///
/// Errors: `Error::Skip` as said and when the netdev family is missing; policy dump errors.
fn bind_autorelease_attr(cfg: &Config, want: bool) -> Result<Option<(u16, bool)>> {
    use crate::netlink::ctrl::{autorelease_attr, bind_rx_policy};
    let policy = skip_if_family_missing(bind_rx_policy(), "netdev")?;
    let kinds: Vec<u16> = policy.iter().map(|a| a.kind).collect();
    match autorelease_attr(&policy) {
        Some(attr) => {
            log!(
                cfg,
                "bind-rx autorelease: the kernel has the attribute (number {attr}, u8); \
                 sending {}",
                u8::from(want)
            );
            Ok(Some((attr, want)))
        }
        None if !want => {
            log!(
                cfg,
                "-a 0: this kernel's bind-rx has no autorelease attribute (policy \
                 attributes {kinds:?}); binding without it (the kernel's only mode \
                 releases tokens still held at close)"
            );
            Ok(None)
        }
        None => Err(Error::Skip(format!(
            "-a 1: this kernel's bind-rx has no autorelease attribute (policy attributes \
             {kinds:?}, none of them the u8 NETDEV_A_DMABUF_AUTORELEASE); it needs the unmerged \
             series \"net: devmem: improve cpu cost of RX token management\" v7-v10"
        ))),
    }
}

/// `-l --zcrx -f IF -s ADDR -p PORT`: the io_uring zero-copy receive server (the flow of the
/// kernel's iou-zcrx selftest): the skips first (io_uring disabled, no `RECV_ZC`, hugepages
/// for `--rx-buf-len`, no `CAP_NET_ADMIN`), then the NIC setup of the devmem server (unless
/// `-n`), the zcrx ifq on one RX queue, listen, accept, a multishot `RECV_ZC` receive
/// validated in place, the summary; then the ring is closed (which frees the queue), the queue
/// is awaited free, and every NIC change is undone.
///
/// With `--zcrx-nodev` (test aid) the ifq is registered without a device (`ZCRX_REG_NODEV`)
/// and no NIC is touched: the kernel copies the TCP stream into the area, so the whole
/// receive path runs over loopback on kernels that have it.
fn zcrx_server(cfg: &Config) -> Result<()> {
    required(cfg.port, "-p")?;
    required(cfg.server.as_ref(), "-s")?;
    let page = crate::sys::page_size();
    let hugetlb = cfg.rx_buf_len.is_some_and(|l| l as usize > page);
    if let Some(len) = cfg
        .rx_buf_len
        .filter(|&l| l as usize > crate::sys::uapi::HUGEPAGE_2M)
    {
        return Err(Error::Usage(format!(
            "--rx-buf-len: {len} bytes is larger than the 2 MiB hugepages that back the zcrx area"
        )));
    }
    let area_len = zcrx_area_len(cfg.dmabuf_size, hugetlb, page)?;
    let buf_len = cfg.rx_buf_len.map_or(page, |l| l as usize);
    let pages = if hugetlb {
        (area_len / crate::sys::uapi::HUGEPAGE_2M) as u64
    } else {
        0
    };
    // Everything that makes this run a skip is checked before anything is changed; hugepages
    // a previous binding or area still holds are waited for.
    uring::check_io_uring_enabled()?;
    let mut env = KernelEnv::new(None);
    await_hugepages(cfg, &mut env, pages)?;
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
        rx_buf_len: cfg.rx_buf_len,
    };
    if cfg.zcrx_nodev {
        let zcrx =
            Zcrx::register(ring, &params).map_err(|e| uring::register_refusal(e, &params))?;
        let hugepages = release::hugepage_goal(&mut env, pages);
        let what = format!("zcrx ifq {} (no device)", zcrx.zcrx_id());
        log_zcrx(cfg, &zcrx);
        let result = zcrx_accept_and_receive(cfg, zcrx, None, &mut env);
        let held = Holdings {
            what,
            queues: Vec::new(),
            pools: PoolOwner::Nothing,
            hugepages,
        };
        await_release(cfg, &mut env, &held);
        return result;
    }

    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let nic = SharedNic::new(open_nic(ifname)?);
    let before = snapshot_if(cfg, &nic)?;
    let queue = zcrx_queue(cfg, &nic)?;
    signals::check()?;
    log!(cfg, "using rx queue {queue}");
    params.target = ZcrxTarget::Device {
        ifname: ifname.to_string(),
        ifindex,
        rxq: queue,
    };
    let plan = server_plan(cfg, queue, 1)?;
    let quiet = cfg.verbosity == Verbosity::Quiet;
    let mut env = KernelEnv::new(Some(ifindex));
    // io_uring page pools of the device that are not this run's.
    let mut other_pools = Vec::new();
    let mut hugepages = None;
    let zcrx_id = Cell::new(None);
    let result = run_configured(&nic, &plan, quiet, QUEUE_FREE_WAIT, || {
        other_pools = env
            .page_pools()
            .map(|p| release::io_uring_pool_ids(&p, ifindex))
            .unwrap_or_default();
        let zcrx =
            Zcrx::register(ring, &params).map_err(|e| uring::register_refusal(e, &params))?;
        hugepages = release::hugepage_goal(&mut env, pages);
        zcrx_id.set(Some(zcrx.zcrx_id()));
        log_zcrx(cfg, &zcrx);
        let result = zcrx_accept_and_receive(cfg, zcrx, Some(ifname), &mut env);
        // The ring is closed: wait until the kernel has let go of the queue, so header split
        // can be restored.
        match nic.with(|n| wait_queues_free(n, &[queue], QUEUE_FREE_WAIT)) {
            Ok(still) if still.is_empty() => {}
            Ok(still) => crate::elog!(
                "{}: {ifname}: {} still owned {} ms after closing the io_uring ring",
                crate::cli::PROGRAM,
                describe_owned(&still),
                QUEUE_FREE_WAIT.as_millis()
            ),
            Err(e) => crate::elog!(
                "{}: {ifname}: could not check that rx queue {queue} is free: {e}",
                crate::cli::PROGRAM
            ),
        }
        result
    });
    let result = verify_and_combine(cfg, &nic, before, result);
    let (what, pools) = match zcrx_id.get() {
        Some(id) => (
            format!("zcrx ifq {id} on {ifname}"),
            PoolOwner::IoUring {
                ifindex,
                before: other_pools,
            },
        ),
        None => (format!("the zcrx area for {ifname}"), PoolOwner::Nothing),
    };
    let held = Holdings {
        what,
        queues: vec![queue],
        pools,
        hugepages,
    };
    await_release(cfg, &mut env, &held);
    result
}

/// Every skip of the zcrx mode names the mode, also those from shared steps (queue choice,
/// hugepages, NIC setup): "skip: io_uring zcrx: ...".
fn zcrx_skip_context(e: Error) -> Error {
    match e {
        Error::Skip(m) if !m.contains("zcrx") => Error::Skip(format!("io_uring zcrx: {m}")),
        e => e,
    }
}

/// Before allocating `pages` 2 MiB hugepages (none: nothing to do): waits while a previous
/// binding still holds them ([`release::await_hugepages`]) and logs how long it waited.
///
/// Errors: the hugepage skip (naming what still holds them), `Error::Interrupted`, errors
/// reading the hugepage pool.
fn await_hugepages(cfg: &Config, env: &mut dyn Env, pages: u64) -> Result<()> {
    if pages == 0 {
        return Ok(());
    }
    if let Some(line) = release::await_hugepages(env, pages, release::WAIT)? {
        log!(cfg, "{line}");
    }
    Ok(())
}

/// On exit, once everything is unbound, closed and unmapped: waits until the kernel gave
/// back what `held` names ([`release::await_release`]). One line when it had to wait (not with
/// `--quiet`); one line, always, when something is still held at the end. Never changes the
/// run's result.
fn await_release(cfg: &Config, env: &mut dyn Env, held: &Holdings) {
    match release::await_release(env, held, release::WAIT) {
        Ok(r) => match r.log_line() {
            Some(line) if r.still.is_empty() => log!(cfg, "{line}"),
            Some(line) => crate::elog!("{}: {line}", crate::cli::PROGRAM),
            None => {}
        },
        Err(e) => crate::elog!(
            "{}: could not check that the kernel gave back what {} held: {e}",
            crate::cli::PROGRAM,
            held.what
        ),
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
fn zcrx_queue(cfg: &Config, nic: &SharedNic) -> Result<u32> {
    if let Some(n) = cfg.start_queue.and(cfg.num_queues).filter(|&n| n != 1) {
        return Err(Error::Usage(format!(
            "-q: one io_uring zcrx ifq serves one RX queue: use -q 1 (got -q {n})"
        )));
    }
    Ok(pick_queues(cfg, nic, QueuePolicy::Server, cfg.skip_nic_config)?.start)
}

/// [`choose_queues`] for `-t`/`-q` (or the policy's default), waiting up to
/// [`QUEUE_FREE_WAIT`] for queues a previous run still holds; its notes are logged.
fn pick_queues(
    cfg: &Config,
    nic: &SharedNic,
    policy: QueuePolicy,
    skip_nic_config: bool,
) -> Result<QueueChoice> {
    let explicit = cfg.start_queue.zip(cfg.num_queues);
    let choice = choose_queues(nic, explicit, policy, QUEUE_FREE_WAIT, skip_nic_config)?;
    for note in &choice.notes {
        log!(cfg, "{note}");
    }
    Ok(choice)
}

fn log_zcrx(cfg: &Config, z: &Zcrx) {
    log!(
        cfg,
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
/// summary and writes `--json` (also for a failed run). The ring is closed before the
/// connection socket; before that, what other CPUs still hold of the received buffers is
/// freed ([`release::return_deferred_buffers`]), so the ifq's page pool can go with the ring.
fn zcrx_accept_and_receive(
    cfg: &Config,
    mut zcrx: Zcrx,
    ifname: Option<&str>,
    env: &mut dyn Env,
) -> Result<()> {
    let buf_len = match zcrx.rx_buf_len() {
        0 => crate::sys::page_size() as u32,
        l => l,
    };
    let buffers = zcrx.area_len() as u64 / u64::from(buf_len);
    let plan = rcvbuf_plan(cfg, ifname, buffers, buf_len);
    let (sock, rcvbuf) = listen_and_accept(cfg, Some(&plan))?;
    let rx_cfg = ZcrxRxConfig {
        validate: stream_spec(cfg),
        idle_timeout: cfg.timeout,
        progress_interval: cfg.progress,
        verbose: cfg.verbosity == Verbosity::Verbose,
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
                io_uring_ifindex: if_nametoindex(i).ok(),
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
        .and_then(|()| check_received(cfg, stats.bytes, false));
    report(cfg, &stats, result)
}

/// `-f IF -s ADDR -p PORT` without `-l`: devmem TX (ncdevmem.c `do_client`). Skips first
/// (udmabuf), then the udmabuf, bind-tx (its netlink socket stays open for the whole run), a
/// socket bound to IF (and `-c` with the same port) with `SO_ZEROCOPY`, then stdin line by
/// line — or, with `--send-pattern`, the `-v` pattern — through the dma-buf, and every
/// zerocopy completion awaited before "tx ok".
fn devmem_client(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let params = UdmabufParams::new(None, cfg.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created.
    udmabuf::preflight(&params, &HostPaths::default())?;
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let peer = SocketAddrV6::new(server.socket_ip(), port, 0, 0);
    let local = cfg
        .client
        .as_ref()
        .map(|c| SocketAddrV6::new(c.socket_ip(), port, 0, 0));
    let stream = cfg.pattern_bytes.map(|_| sender_stream(cfg));
    let mut source: Box<dyn TxSource> = match cfg.pattern_bytes.zip(stream) {
        Some((total, stream)) => Box::new(PatternSource::new(
            stream,
            total,
            cfg.write_size.unwrap_or(0),
            cfg.corrupt_offset,
        )?),
        None => Box::new(LineSource::new(std::io::stdin().lock(), &STOP)),
    };
    let netdev = skip_if_family_missing(Netdev::open(), "netdev")?;
    signals::check()?;

    let mut mem = Udmabuf::create(&params)?;
    signals::check()?;
    let binding = tx::bind_tx(&netdev, ifindex, ifname, mem.fd())?;
    signals::check()?;
    log!(
        cfg,
        "bound {ifname} for TX to dmabuf id {} ({} bytes)",
        binding.id(),
        params.size_bytes
    );
    let mut sock = tx::connect_devmem(peer, local, ifname, cfg.timeout, &STOP)?;
    log!(cfg, "connected to [{}]:{port}", server.ip);

    let tx_cfg = TxConfig {
        chunk: cfg.tx_chunk,
        max_piece: cfg.write_size.unwrap_or(tx::devmem::DEFAULT_MAX_PIECE),
        completion_timeout: cfg
            .timeout
            .unwrap_or(tx::devmem::DEFAULT_COMPLETION_TIMEOUT),
        verbose: cfg.verbosity == Verbosity::Verbose,
        ..TxConfig::new(binding.id())
    };
    let mut log_sink = std::io::stderr();
    let (stats, result) = tx::transmit(
        &mut sock,
        &mut mem,
        source.as_mut(),
        &tx_cfg,
        &STOP,
        &mut log_sink,
    );
    let ok = result.is_ok();
    log!(cfg, "{}", stats.summary_line(ok));
    drop(sock);
    drop(binding);
    drop(mem);
    match &cfg.json {
        Some(path) => {
            let mut json = stats.to_json(ok);
            json["stream"] = stream.map(|t| t.to_string()).into();
            write_summary(path, &json, result)
        }
        None => result,
    }
}

/// `-f IF [-b N]`: probe / self-test (ncdevmem.c `run_devmem_tests`). Prints the capability
/// report first (read-only, so a host that cannot run the checks still shows why; not with
/// `--quiet`), checks what makes the probe a skip (`-b` without kernel support, no udmabuf)
/// before anything on the NIC changes, then prints one line per kernel-contract check on
/// stdout; exit 0 only if devmem works, 4 with the first missing capability, 1 if the kernel
/// broke a contract (or a signal interrupted the probe).
///
/// `--json` is written whatever the outcome: `{"report", "probe": {"checks", "verdict",
/// "reason"}}`, where a probe that ended before its checks (a skip, a failure, a signal) has no
/// checks and says why in `verdict` and `reason`.
fn probe(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let params = UdmabufParams::new(cfg.rx_page_size, cfg.dmabuf_size)?;
    let nic = open_nic(ifname).map(SharedNic::new);
    let report = match &nic {
        Ok(n) => {
            let host = HostCaps::probe(cfg.rx_page_size, cfg.dmabuf_size);
            let r = n.with(|ops| Ok(NicReport::gather(ops, host, true)))?;
            if cfg.verbosity != Verbosity::Quiet {
                // Informational, like the check lines after it: a stdout that went away
                // does not change the probe's verdict (the exit code and --json carry it).
                let _ = print_stdout(&r.render_text());
            }
            Some(r)
        }
        Err(_) => None,
    };
    let (outcome, result) = probe_checks(cfg, nic, ifindex, &params);
    if let Some(path) = &cfg.json {
        let probe = match &outcome {
            Some(o) => o.to_json(),
            None => serde_json::json!({
                "checks": [],
                "verdict": verdict_name(&result),
                "reason": result.as_ref().err().map(ToString::to_string),
            }),
        };
        let json = serde_json::json!({
            "report": report.as_ref().map(NicReport::to_json),
            "probe": probe,
        });
        return write_summary(path, &json, result);
    }
    result
}

/// `ok`, `skip` or `fail`: the verdict of a run's result, as the JSON summaries name it.
fn verdict_name(result: &Result<()>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::Skip(_)) => "skip",
        Err(_) => "fail",
    }
}

/// The probe after its report: the skips that need no NIC change (`-b` on a kernel whose
/// bind-rx has no rx-page-size first, the check specific to this request, then udmabuf), the
/// queue choice, the udmabuf, then the checks ([`run_probe`]) and `--verify-restore`. Returns
/// the checks' outcome when they ran, and the run's result; a stop signal between the steps
/// ends it.
fn probe_checks(
    cfg: &Config,
    nic: Result<SharedNic>,
    ifindex: u32,
    params: &UdmabufParams,
) -> (Option<crate::nic::probe::ProbeOutcome>, Result<()>) {
    let mut env = KernelEnv::new(Some(ifindex));
    let prepared = (|| {
        if let Some(size) = cfg.rx_page_size {
            require_rx_page_size(size)?;
        }
        udmabuf::preflight_device(params, &HostPaths::default())?;
        await_hugepages(cfg, &mut env, params.hugepages_needed())?;
        signals::check()?;
        let nic = nic?;
        if cfg.skip_nic_config {
            log!(
                cfg,
                "-n does not apply to probe mode: its checks change header split, RSS and \
                 channels (and undo every change)",
            );
        }
        let before = snapshot_if(cfg, &nic)?;
        let choice = pick_queues(cfg, &nic, QueuePolicy::Probe, false)?;
        let mem = Udmabuf::create(params)?;
        let hugepages = release::hugepage_goal(&mut env, params.hugepages_needed());
        let dmabuf_fd = u32::try_from(mem.fd().as_raw_fd())
            .map_err(|_| Error::Failure("dma-buf fd does not fit u32".into()))?;
        signals::check()?;
        Ok((nic, before, choice, mem, hugepages, dmabuf_fd))
    })();
    let (nic, before, choice, mem, hugepages, dmabuf_fd) = match prepared {
        Ok(p) => p,
        Err(e) => return (None, Err(e)),
    };
    let p = ProbeParams {
        start: choice.start,
        num: choice.num,
        dmabuf_fd,
        rx_page_size: cfg.rx_page_size,
        quiet: cfg.verbosity == Verbosity::Quiet,
        teardown_wait: QUEUE_FREE_WAIT,
    };
    let stdout = std::io::stdout();
    let outcome = run_probe(&nic, &p, &mut stdout.lock());
    drop(mem);
    let result = verify_and_combine(cfg, &nic, before, outcome.verdict());
    let ids = &outcome.bindings;
    let what = match ids.len() {
        0 => format!("the probe's udmabuf for {}", nic.ifname()),
        1 => format!("the probe's dmabuf binding {} on {}", ids[0], nic.ifname()),
        _ => format!("the probe's dmabuf bindings {ids:?} on {}", nic.ifname()),
    };
    let held = Holdings {
        what,
        queues: choice.queues(),
        pools: if ids.is_empty() {
            PoolOwner::Nothing
        } else {
            PoolOwner::Dmabuf(ids.clone())
        },
        hugepages,
    };
    await_release(cfg, &mut env, &held);
    (Some(outcome), result)
}

/// `--send-pattern BYTES -s ADDR -p PORT -v N`: the built-in pattern sender.
fn pattern_sender(cfg: &Config) -> Result<()> {
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let req = PatternSend {
        peer: SocketAddrV6::new(server.socket_ip(), port, 0, 0),
        local: cfg
            .client
            .as_ref()
            .map(|c| SocketAddrV6::new(c.socket_ip(), port, 0, 0)),
        ifname: cfg.ifname.clone(),
        stream: sender_stream(cfg),
        total_bytes: required(cfg.pattern_bytes, "--send-pattern")?,
        write_size: cfg.write_size,
        timeout: cfg.timeout,
        corrupt_offset: cfg.corrupt_offset,
    };
    // A send that failed leaves its --json summary to `run`.
    let stats = tx::send_pattern(&req, &STOP)?;
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}", stats.summary_line());
    }
    let Some(path) = &cfg.json else {
        return Ok(());
    };
    let mut json = stats.to_json();
    json["ok"] = true.into();
    write_summary(path, &json, Ok(()))
}

/// A peer address as the user wrote its family: an IPv4 peer of the AF_INET6 listener
/// (v4-mapped, `[::ffff:a.b.c.d]:p`) as `[a.b.c.d]:p`, like the listening line.
fn peer_text(peer: std::net::SocketAddr) -> String {
    format!("[{}]:{}", peer.ip().to_canonical(), peer.port())
}

/// Binds `-s`:`-p` (with the receive buffer of `plan`, when it sets one), prints where it
/// listens, and accepts one connection within `--timeout`. Returns the connection and, when
/// there is a plan, the receive buffer it got.
fn listen_and_accept(
    cfg: &Config,
    plan: Option<&RcvbufPlan>,
) -> Result<(TcpRxSocket, Option<RcvbufReport>)> {
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let addr = SocketAddrV6::new(server.socket_ip(), port, 0, 0);
    let listener = socket::tcp_listen(addr, plan.and_then(|p| p.bytes))?;
    if let Some(p) = plan {
        log!(cfg, "receive buffer: {}", p.reason);
    }
    log!(cfg, "listening on [{}]:{port}", server.ip);
    let (fd, peer) = crate::conn::accept_timeout(listener.as_fd(), cfg.timeout, &STOP)?;
    log!(cfg, "accepted connection from {}", peer_text(peer));
    let sock = TcpRxSocket::new(fd);
    let report = plan.map(|p| {
        socket::rcvbuf(sock.fd()).map(|effective| RcvbufReport {
            set: p.bytes,
            effective,
            reason: p.reason.clone(),
            requested: p.requested,
        })
    });
    Ok((sock, report.transpose()?))
}

/// The receive buffer of a devmem or zcrx server whose memory is `buffers` buffers of
/// `buf_size` bytes on `ifname` ([`crate::rcvbuf::plan`], from the interface's MTU and this
/// namespace's `tcp_rmem`).
fn rcvbuf_plan(cfg: &Config, ifname: Option<&str>, buffers: u64, buf_size: u32) -> RcvbufPlan {
    let mtu = ifname.and_then(|i| socket::if_mtu(i).ok()).unwrap_or(1500);
    crate::rcvbuf::plan(
        cfg.rcvbuf,
        buffers,
        buf_size,
        crate::rcvbuf::mss_for_mtu(mtu),
        socket::tcp_rmem_max().ok(),
    )
}

/// What the plain receiver does with `--rcvbuf` (nothing without it).
fn plain_rcvbuf_plan(cfg: &Config) -> Option<RcvbufPlan> {
    cfg.rcvbuf
        .map(|b| crate::rcvbuf::plan(Some(b), 0, 0, 0, None))
}

/// Where a receive's buffers come from, to explain a stall: the devmem binding or the zcrx
/// ifq's device, and how many buffers it has.
struct StallContext {
    /// Page pools that take their memory from this binding (devmem).
    dmabuf_id: Option<u32>,
    /// io_uring page pools of this interface (zcrx).
    io_uring_ifindex: Option<u32>,
    /// Buffers of the binding or area.
    buffers: u64,
}

/// An idle timeout of a devmem or zcrx receive, explained from the kernel's own counters:
/// the page pools' buffers in flight, the bytes queued in the socket, and what that means.
fn explain_stall(
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

/// The receive-loop settings every mode shares, on top of `base` (plain or devmem).
fn rx_config(cfg: &Config, base: RxConfig) -> RxConfig {
    RxConfig {
        fail_on_linear: cfg.fail_on_linear,
        validate: stream_spec(cfg),
        idle_timeout: cfg.timeout,
        progress_interval: cfg.progress,
        verbose: cfg.verbosity == Verbosity::Verbose,
        ..base
    }
}

/// Runs the receive loop with the payload going to stdout (when not validating), then prints
/// the summary and writes the JSON object — also when the run failed, so a failed run is still
/// a measurement.
fn receive_and_report<M: crate::udmabuf::FragMemory>(
    cfg: &Config,
    sock: &mut TcpRxSocket,
    mem: Option<&M>,
    rx_cfg: &RxConfig,
    rcvbuf: Option<RcvbufReport>,
    stall: Option<&StallContext>,
    after_first_data: Option<Box<dyn FnOnce() + '_>>,
) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, rx::stop_aware_stdout(&STOP)?);
    let mut log_sink = std::io::stderr();
    let (mut stats, result) = match after_first_data {
        Some(hook) => {
            let mut wrapped = rx::AfterFirstData::new(&mut *sock, hook);
            rx::receive_logged(&mut wrapped, mem, rx_cfg, &STOP, &mut out, &mut log_sink)
        }
        None => rx::receive_logged(sock, mem, rx_cfg, &STOP, &mut out, &mut log_sink),
    };
    if rx_cfg.unbind == UnbindMode::BeforeRecv && !stats.binding_gone && result.is_ok() {
        log!(
            cfg,
            "-U 1: recvmsg went on delivering data after the unbind (no ENODEV): this kernel \
             keeps a socket's queued devmem data readable after its binding goes (a kernel \
             without the autorelease series, or one in autorelease 1 mode)",
        );
    }
    let result = match (result, stall) {
        (Err(e), Some(ctx)) => Err(explain_stall(e, ctx, sock, rcvbuf.as_ref())),
        (r, _) => r,
    };
    stats.rcvbuf = rcvbuf;
    let flushed = out.flush().map_err(|e| Error::io("write(stdout)", &e));
    let result = result
        .and(flushed)
        .and_then(|()| check_received(cfg, stats.bytes, stats.binding_gone));
    report(cfg, &stats, result)
}

/// A stream that ended cleanly can still be wrong: shorter or longer than `--expect-bytes`,
/// or empty although `-v` asked for validation (a sender that never sent) — except in a `-U 1`
/// run that ended at "binding gone" (`binding_gone`: ENODEV before any byte), which had no
/// stream to measure (an explicit `--expect-bytes` still does).
fn check_received(cfg: &Config, bytes: u64, binding_gone: bool) -> Result<()> {
    match cfg.expect_bytes {
        Some(want) if want != bytes => Err(Error::Failure(format!(
            "the peer sent {bytes} bytes, --expect-bytes wanted {want}"
        ))),
        None if bytes == 0 && cfg.validate.is_some() && !binding_gone => Err(Error::Failure(
            "the peer closed without sending any data: nothing was validated".into(),
        )),
        _ => Ok(()),
    }
}

/// Prints the summary line and writes `--json` with the verdict (`ok`, and `error` when the
/// run failed); returns the run's `result` ([`write_summary`] decides when a failed write
/// changes it).
fn report(cfg: &Config, stats: &RxStats, result: Result<()>) -> Result<()> {
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}", stats.summary_line());
    }
    let Some(path) = &cfg.json else {
        return result;
    };
    let mut json = stats.to_json();
    json["ok"] = result.is_ok().into();
    if let Err(e) = &result {
        json["error"] = e.to_string().into();
    }
    write_summary(path, &json, result)
}

/// `-b` needs a kernel whose bind-rx knows `rx-page-size` (attribute 5): ask the kernel's
/// bind-rx policy before the NIC is touched, so an older kernel is a skip with the reason.
fn require_rx_page_size(size: u32) -> Result<()> {
    let policy = skip_if_family_missing(crate::netlink::ctrl::bind_rx_policy(), "netdev")?;
    if crate::netlink::ctrl::has_rx_page_size(&policy) {
        return Ok(());
    }
    let attrs: Vec<u16> = policy.iter().map(|a| a.kind).collect();
    Err(Error::Skip(format!(
        "-b {size}: this kernel's bind-rx has no rx-page-size attribute (policy attributes \
         {attrs:?}); large niovs need a kernel with the rx-page-size series"
    )))
}

/// `if_nametoindex(3)`; an unknown name is a usage error naming `-f`.
fn if_nametoindex(ifname: &str) -> Result<u32> {
    if ifname.contains('\0') {
        return Err(Error::Usage(format!(
            "-f: invalid interface name {ifname:?}"
        )));
    }
    crate::sys::if_index(ifname)
        .map_err(|_| Error::Usage(format!("-f: no such interface '{ifname}'")))
}

/// The stream a receiver validates: `--seed SEED` (keyed) or `-v N` (periodic); `None`
/// without validation. (`--seed random` never reaches a receiver: the CLI refuses it.)
fn stream_spec(cfg: &Config) -> Option<StreamSpec> {
    match cfg.seed {
        Some(Seed::Value(seed)) => Some(StreamSpec::keyed(seed)),
        _ => cfg.validate.map(StreamSpec::Periodic),
    }
}

/// The stream a sender sends: `--seed SEED`, `--seed random` (drawn here and printed, so a
/// failing run can be replayed), or `-v N` (the CLI requires one of them for
/// `--send-pattern`; `-v 7` if neither, which it never is).
fn sender_stream(cfg: &Config) -> StreamSpec {
    match cfg.seed {
        Some(Seed::Value(seed)) => StreamSpec::keyed(seed),
        Some(Seed::Random) => {
            let seed: u64 = rand::random();
            // Printed even with --quiet: without it the run cannot be replayed.
            crate::elog!(
                "{}: --seed random: seed {seed} (replay with --seed {seed})",
                crate::cli::PROGRAM
            );
            StreamSpec::keyed(seed)
        }
        None => StreamSpec::Periodic(cfg.validate.unwrap_or(7)),
    }
}

fn required<T>(v: Option<T>, flag: &str) -> Result<T> {
    v.ok_or_else(|| Error::Usage(format!("missing {flag} argument")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_named_in_their_own_family() {
        let v4: std::net::SocketAddr = "[::ffff:198.51.100.2]:42736".parse().unwrap();
        assert_eq!(peer_text(v4), "[198.51.100.2]:42736");
        let v6: std::net::SocketAddr = "[2001:db8::2]:5201".parse().unwrap();
        assert_eq!(peer_text(v6), "[2001:db8::2]:5201");
    }
    use crate::cli::Command;
    use crate::netlink::{ctrl::bind_rx_policy_attrs, netdev::NETDEV_A_DMABUF_RX_PAGE_SIZE};

    /// The run configuration of command line `args`.
    fn config(args: &[&str]) -> Config {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match crate::cli::parse(&argv, crate::sys::page_size()) {
            Ok(Command::Run(cfg)) => cfg,
            other => panic!("{args:?} is not a run configuration: {other:?}"),
        }
    }

    /// A summary that cannot be written never hides the run's own verdict: a skip stays a skip
    /// (exit 4), a failure keeps its message; only a run that succeeded fails with it.
    #[test]
    fn a_json_write_failure_keeps_the_runs_verdict() {
        let gone = std::path::Path::new("/nonexistent-dir-ncdevmem/x.json");
        let json = serde_json::json!({"ok": false});
        let e = write_summary(gone, &json, Err(Error::Skip("no udmabuf".into()))).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP, "{e}");
        assert_eq!(e.to_string(), "skip: no udmabuf");
        let e = write_summary(gone, &json, Err(Error::Failure("mismatch".into()))).unwrap_err();
        assert_eq!(e.to_string(), "mismatch");
        let e = write_summary(gone, &json, Ok(())).unwrap_err();
        assert!(e.to_string().starts_with("--json: "), "{e}");
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
        let cfg = config(&["-f", "lo", "-b", "16384", "--quiet"]);
        assert_eq!(cfg.mode, Mode::Probe);
        let e = probe(&cfg).unwrap_err();
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
        let cfg = config(&server);
        let mut stats = RxStats::new(crate::stats::RxMode::Devmem);
        assert_eq!(
            check_received(&cfg, stats.bytes, stats.binding_gone)
                .unwrap_err()
                .to_string(),
            "the peer closed without sending any data: nothing was validated"
        );
        stats.binding_gone = true;
        check_received(&cfg, stats.bytes, stats.binding_gone).unwrap();
        // --expect-bytes is a promise about the stream that a gone binding does not excuse.
        let cfg = config(&[&server[..], &["--expect-bytes", "1000"]].concat());
        assert_eq!(
            check_received(&cfg, stats.bytes, stats.binding_gone)
                .unwrap_err()
                .to_string(),
            "the peer sent 0 bytes, --expect-bytes wanted 1000"
        );
    }
}
