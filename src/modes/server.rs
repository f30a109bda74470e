//! `-l -f IF -s ADDR -p PORT`: the devmem RX server, in the order of ncdevmem.c `do_server`.

use std::time::{Duration, Instant};

use super::{
    await_hugepages, check_tcp_cc, flows, listen, log, open_nic, pick_queues, rx_config, NicRun,
    StallContext, Teardown,
};
use crate::caps::{classify, skip_if_family_missing, Missing, Op};
use crate::cli::ServerArgs;
use crate::error::{Error, Result};
use crate::memory::MemoryPlan;
use crate::netlink::netdev::BindRxRequest;
use crate::nic::queues::QueuePolicy;
use crate::nic::setup::{FlowTarget, ServerPlan};
use crate::rcvbuf::RcvbufPlan;
use crate::release::kernel::KernelEnv;
use crate::release::{self, Holdings, PoolOwner};
use crate::run_report::RunReport;
use crate::rx::{RxConfig, UnbindMode};
use crate::signals::{self, STOP};
use crate::sys::socket::{self, TcpRxSocket};
use crate::udmabuf::FragMemory;
use crate::with_memory;

/// The devmem RX server: NIC setup (unless `-n`), bind, accept, receive, then every NIC
/// change undone in reverse order — also on errors, signals (the receive loop returns
/// `Error::Interrupted`) and panics. `-U 1` and `-U 2` unbind during the receive (series
/// v10's ncdevmem `unbind_mode`).
///
/// Errors: the skips (no udmabuf or dma-buf heap, hugepages, `-b`/`-a`/`-A` without kernel
/// support, a `-b` the heap cannot serve, the NIC refusing a step), kernel refusals, accept and
/// idle timeouts, validation failures.
pub(crate) fn run(a: &ServerArgs, report: &RunReport) -> Result<()> {
    let ifname = &a.nic.ifname;
    let ifindex = ifname.index()?;
    let memory = MemoryPlan::new(&a.memory, a.rx_page_size, a.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created or changed;
    // hugepages a previous binding still holds are waited for. `-a` first: it only asks the
    // kernel's bind-rx policy.
    // The checks below are independent: every skip among them is named at once (a user
    // missing udmabuf and rx-page-size learns of both in one run); any other error ends here.
    let mut skips = Vec::new();
    let mut skip = |r: Result<()>| match r {
        Err(Error::Skip(m)) => {
            skips.push(m);
            Ok(())
        }
        r => r,
    };
    let mut autorelease = None;
    if let Some(want) = a.bind_autorelease {
        skip(bind_autorelease_attr(want, report).map(|attr| autorelease = attr))?;
    }
    skip(memory.preflight())?;
    let autorelease_refusal = |e| {
        let optname = crate::sys::uapi::SO_DEVMEM_AUTORELEASE;
        classify(e, Op::DevmemAutorelease { optname })
    };
    if a.so_autorelease.is_some() {
        skip(socket::probe_devmem_autorelease().map_err(autorelease_refusal))?;
    }
    if let Some(size) = a.rx_page_size {
        skip(require_rx_page_size(size))?;
    }
    if let Some(m) = Missing::all(skips) {
        return Err(Error::Skip(m));
    }
    // Several flows each validate their own stream, --cpus are this process's, the windows
    // fit in the binding (or the run refuses to start), -U stays a test of one flow.
    flows::check(&a.rx)?;
    if flows::measured(&a.rx) && a.unbind != UnbindMode::Normal {
        return Err(Error::Usage(
            "-U: unbinding during the receive is a test of one flow (not with --flows, \
             --duration, --warmup or --cpus)"
                .into(),
        ));
    }
    check_tcp_cc(&a.rx)?;
    let niov_size = a.rx_page_size.unwrap_or(crate::sys::page_size() as u32);
    let buffers = memory.size_bytes() / u64::from(niov_size);
    let mtu = socket::if_mtu(ifname.as_str()).unwrap_or(1500);
    let mss = crate::rcvbuf::mss_for_mtu(mtu);
    let plan = flows::rcvbuf_plan(&a.rx, buffers, niov_size, mss, socket::tcp_rmem_max().ok())?;
    report.step("checks");
    let mut env = KernelEnv::new(Some(ifindex));
    await_hugepages(&mut env, memory.hugepages_needed(), report)?;
    report.step("hugepages");
    // A stop signal is acted on between the steps (and between the NIC setup steps, see
    // `crate::nic::setup`), not only once the receive loop runs.
    signals::check()?;

    // From here every exit — a `?`, the end, a panic — undoes the NIC (`nic`), closes the
    // memory (`mem`) and then waits for what the kernel still holds (`teardown`).
    let shared = open_nic(ifname)?;
    report.step("nic");
    let mut teardown = Teardown::new(env, report);
    let mut nic = NicRun::new(&shared, a.nic.verify_restore, report)?;
    let choice = pick_queues(
        &shared,
        a.nic.queues,
        QueuePolicy::Server,
        a.nic.skip_nic_config,
        report,
    )?;
    let (start, num) = (choice.start, choice.num);
    log!(report, "using queues {start}..={}", start + num - 1);
    report.step("queues");
    let mem = memory.allocate()?;
    report.step("memory");
    let hugepages = release::hugepage_goal(teardown.env(), memory.hugepages_needed());
    teardown.hold(Holdings {
        what: format!("the {} for {ifname}", memory.source()),
        queues: choice.queues(),
        pools: PoolOwner::Nothing,
        hugepages,
    });
    signals::check()?;
    nic.setup().configure_server(&server_plan(a, start, num))?;
    report.step("configure");
    let request = BindRxRequest::new(ifindex, mem.fd(), &choice.queues())
        .ifname(ifname.as_str())
        .rx_page_size(a.rx_page_size)
        .autorelease(autorelease);
    let id = nic
        .setup()
        .bind(&request)
        .map_err(|e| memory.bind_refusal(e))?;
    report.step("bind");
    if let Some(held) = teardown.held() {
        held.what = format!("dmabuf binding {id} on {ifname}");
        held.pools = PoolOwner::Dmabuf(vec![id]);
    }
    shared.interrupted()?;
    log!(
        report,
        "bound {ifname} rx queues {start}..={} to dmabuf id {id} ({} bytes, {}{})",
        start + num - 1,
        memory.size_bytes(),
        memory.describe(),
        match a.rx_page_size {
            Some(n) => format!(", rx-page-size {n}"),
            None => String::new(),
        }
    );

    if let Some(why) = nic.setup().shared_queue() {
        report.log(format_args!("{ifname}: {why}"));
    }
    let base =
        RxConfig::devmem(id, niov_size).holding_tokens_of(buffers / u64::from(a.rx.flows.count));
    let device = flows::Device {
        ifindex,
        queues: choice.queues(),
    };
    let stall = StallContext {
        dmabuf_id: Some(id),
        io_uring_ifindex: None,
        buffers,
    };
    // The memory's type is resolved here, once: the receive loops are compiled per source.
    let received =
        with_memory!(&mem, m => receive(a, &plan, base, m, &mut nic, &device, &stall, report))?;
    // The connections are closed: what other CPUs still hold of their buffers is freed now,
    // so the binding's page pool can go as soon as it is unbound.
    release::return_deferred_buffers(teardown.env());
    nic.finish();
    drop(mem);
    teardown.finish();
    received
}

/// Accepts the flows, sets `-A` on each, arms `-U`'s unbind point (one flow), and receives
/// them through the one flow engine ([`flows::receive`]). Returns the receive's verdict;
/// `Err` only for what ends the run before the receive.
#[allow(clippy::too_many_arguments)]
fn receive<M: FragMemory + Sync>(
    a: &ServerArgs,
    plan: &RcvbufPlan,
    base: RxConfig,
    mem: &M,
    nic: &mut NicRun<'_>,
    device: &flows::Device,
    stall: &StallContext,
    report: &RunReport,
) -> Result<Result<()>> {
    // Before the listen: a peer may connect and send its first window as soon as it listens.
    let early = flows::device_before_listen(&a.rx, Some(device));
    let listener = listen(&a.rx, Some(plan), report)?;
    let conns = flows::accept(&listener, &a.rx, Some(plan), report)?;
    drop(listener);
    if let Some(on) = a.so_autorelease {
        for c in &conns {
            socket::set_devmem_autorelease(c.sock.fd(), on).map_err(|e| {
                let optname = crate::sys::uapi::SO_DEVMEM_AUTORELEASE;
                classify(e, Op::DevmemAutorelease { optname })
            })?;
        }
    }
    let mut rx_cfg = rx_config(&a.rx, a.fail_on_linear, base, report);
    rx_cfg.unbind = a.unbind;
    let mut first = flows::FirstFlow::default();
    match a.unbind {
        UnbindMode::Normal => {}
        UnbindMode::BeforeRecv => {
            await_first_data(&conns[0].sock)?;
            log!(
                report,
                "-U 1: data is queued; unbinding before the first recvmsg",
            );
            nic.setup().unbind();
        }
        UnbindMode::AfterRecv => {
            // As C: the first batch's tokens go back before the unbind.
            rx_cfg.token_high_water = 1;
            first.after_first_data = Some(Box::new(move || {
                log!(
                    report,
                    "-U 2: first recvmsg done and its tokens released; unbinding",
                );
                nic.setup().unbind();
            }));
        }
    }
    Ok(flows::receive(
        &a.rx,
        conns,
        Some(mem),
        &rx_cfg,
        Some(device),
        Some(stall),
        first,
        early,
        report,
    ))
}

/// The NIC setup of a server on queues `start_queue..start_queue+num_queues`: the flow rule
/// for `-s`, `-c` and `-p` (none with `-n`).
pub(crate) fn server_plan(a: &ServerArgs, start_queue: u32, num_queues: u32) -> ServerPlan {
    ServerPlan {
        start_queue,
        num_queues,
        flow: FlowTarget {
            server: a.rx.addr.ip,
            client: a.nic.client.as_ref().map(|c| c.ip),
            port: a.rx.port,
        },
        flows: a.rx.flows.count,
        skip_nic_config: a.nic.skip_nic_config,
    }
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
fn bind_autorelease_attr(want: bool, report: &RunReport) -> Result<Option<(u16, bool)>> {
    let policy =
        skip_if_family_missing(crate::netlink::netdev::policy::bind_rx_policy(), "netdev")?;
    let attr = crate::caps::bind_autorelease(want, &policy).map_err(Error::Skip)?;
    match attr {
        Some((number, _)) => log!(
            report,
            "bind-rx autorelease: the kernel has the attribute (number {number}, u8); sending {}",
            u8::from(want)
        ),
        None => log!(
            report,
            "-a 0: this kernel's bind-rx has no autorelease attribute (policy attributes {:?}); \
             binding without it (the kernel's only mode releases tokens still held at close)",
            policy.iter().map(|a| a.kind).collect::<Vec<_>>()
        ),
    }
    Ok(attr)
}

/// `-b` needs a kernel whose bind-rx knows `rx-page-size` (attribute 5): ask the kernel's
/// bind-rx policy before the NIC is touched, so an older kernel is a skip with the reason.
pub(crate) fn require_rx_page_size(size: u32) -> Result<()> {
    let policy =
        skip_if_family_missing(crate::netlink::netdev::policy::bind_rx_policy(), "netdev")?;
    if crate::netlink::netdev::policy::has_rx_page_size(&policy) {
        return Ok(());
    }
    let policy = policy.iter().map(|a| a.kind).collect();
    Err(Error::Skip(Missing::RxPageSizeAttr { size, policy }))
}
