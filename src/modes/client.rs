//! `-f IF -s ADDR -p PORT`: the devmem TX client (ncdevmem.c `do_client`).

use super::log;
use super::sender::sender_stream;
use crate::caps::skip_if_family_missing;
use crate::cli::{ClientArgs, TxSource as Source};
use crate::error::Error;
use crate::error::Result;
use crate::memory::MemoryPlan;
use crate::netlink::netdev::Netdev;
use crate::run_report::RunReport;
use crate::signals::STOP;
use crate::summary::{Body, DevmemTxBody, DevmemTxCounters, DevmemTxDetail, DevmemTxFlow};
use crate::tx::{self, TxConfig};
use crate::with_memory;

/// The devmem TX client: the skips first (the memory source's), then the dma-buf
/// (`--memory`: udmabuf or a dma-buf heap), bind-tx (its netlink socket stays open for the
/// whole run), one socket bound to IF per flow (one by default; with `-c`, the one flow binds
/// its address and the same port, as C does) with `SO_ZEROCOPY`, then stdin line by line — or,
/// with `--send-pattern`, the pattern — through the dma-buf, every flow its own window of it
/// ([`send_devmem_flows`]), and every zerocopy completion awaited before "tx ok".
///
/// Errors: the skips, kernel refusals, connect and completion timeouts, send errors.
pub(crate) fn run(a: &ClientArgs, report: &RunReport) -> Result<()> {
    let plan = MemoryPlan::new(&a.memory, None, a.dmabuf_size)?;
    let (streams, stream, flows) = match &a.source {
        Source::Pattern(p) => {
            let stream = sender_stream(p.stream);
            let f = &p.flows;
            let pattern = tx::FlowPattern {
                stream,
                total_bytes: p.bytes,
                write_size: p.write_size,
                corrupt_offset: p.corrupt_offset,
            };
            let flows = tx::SendFlows {
                count: f.count,
                duration: f.duration,
                cpus: f.cpus.clone(),
                tcp_cc: f.tcp_cc.clone(),
            };
            (tx::TxStreams::Pattern(pattern), Some(stream), flows)
        }
        Source::Stdin => (
            tx::TxStreams::StdinLines,
            None,
            tx::SendFlows {
                count: 1,
                ..tx::SendFlows::default()
            },
        ),
    };
    let measured = flows.count > 1
        || flows.duration.is_some()
        || flows.cpus.is_some()
        || flows.tcp_cc.is_some();
    let write_size = match &a.source {
        Source::Pattern(p) => p.write_size,
        Source::Stdin => None,
    };
    let dev = DevmemTx {
        ifname: &a.ifname,
        plan: &plan,
        chunk: a.chunk,
        timeout: a.timeout,
        verbose: report.verbose(),
        max_piece: write_size,
    };
    let peer = &a.peer;
    // Several connections cannot share one port: the measured run's bind port 0.
    let local = match measured {
        true => peer.local.as_ref().map(|l| l.with_port(0)),
        false => peer.local(),
    };
    let (per_flow, result) = send_devmem_flows(
        &dev,
        peer.remote(),
        local,
        streams,
        &flows,
        &STOP,
        &mut |line| log!(report, "{line}"),
    );
    let ok = result.is_ok();
    match per_flow.as_slice() {
        // Nothing was sent: the set-up failed, and the report says why.
        [] => {}
        [one] if !measured => {
            log!(report, "{}", one.stats.summary_line(ok));
            report.body(Body::DevmemTx(Box::new(DevmemTxBody {
                source: one.stats.source.to_string(),
                stream: stream.map(|t| t.to_string()),
                counters: one.stats.counters(),
                detail: Some(one.stats.detail()),
                flow_count: None,
                flows: None,
            })));
        }
        all => report_flows(all, stream, ok, report),
    }
    result
}

/// The report of a measured devmem TX send: one summary line for the run and one per flow,
/// and the JSON object with each flow's figures.
fn report_flows(
    per_flow: &[tx::DevmemFlow],
    stream: Option<crate::validate::StreamSpec>,
    ok: bool,
    report: &RunReport,
) {
    let bytes: u64 = per_flow.iter().map(|f| f.stats.bytes).sum();
    let elapsed = per_flow
        .iter()
        .map(|f| f.stats.elapsed)
        .max()
        .unwrap_or_default();
    let gbps = crate::stats::gbit_per_s(bytes, elapsed);
    log!(
        report,
        "{}: {}, {bytes} bytes in {:.3} s, {gbps:.3} Gbit/s",
        if ok { "tx ok" } else { "tx failed after" },
        crate::figures::count(per_flow.len() as u64, "flow"),
        elapsed.as_secs_f64()
    );
    for (k, fl) in per_flow.iter().enumerate() {
        log!(
            report,
            "  flow {k}{}: {}",
            fl.stream.map(|s| format!(" ({s})")).unwrap_or_default(),
            fl.stats.summary_line(fl.result.is_ok() && ok)
        );
    }
    let mut counters = DevmemTxCounters::default();
    let mut detail = DevmemTxDetail::default();
    for f in per_flow {
        counters += f.stats.counters();
        detail += f.stats.detail();
    }
    counters.dmabuf_id = per_flow.first().map_or(0, |f| f.stats.dmabuf_id);
    counters.bytes = bytes;
    counters.elapsed_s = elapsed.as_secs_f64();
    counters.gbit_per_s = gbps;
    // Each flow has its own CRC-32, as a multi-flow receiver's.
    counters.crc32 = None;
    report.body(Body::DevmemTx(Box::new(DevmemTxBody {
        source: "pattern".into(),
        stream: stream.map(|s| s.to_string()),
        counters,
        detail: Some(detail),
        flow_count: Some(per_flow.len()),
        flows: Some(
            per_flow
                .iter()
                .enumerate()
                .map(|(k, fl)| DevmemTxFlow {
                    flow: k,
                    stream: fl.stream.map(|s| s.to_string()),
                    counters: fl.stats.counters(),
                    detail: fl.stats.detail(),
                    source: fl.stats.source.to_string(),
                    dmabuf_window_offset: fl.window.0,
                    dmabuf_window_bytes: fl.window.1,
                    cpu: fl.pinned,
                    cpu_user_s: fl.cpu.map(|c| c.user.as_secs_f64()),
                    cpu_sys_s: fl.cpu.map(|c| c.sys.as_secs_f64()),
                    cpu_utilisation: tx::cpu_share(fl.cpu, fl.stats.elapsed),
                    ok: fl.result.is_ok() && ok,
                    error: fl.result.as_ref().err().map(ToString::to_string),
                })
                .collect(),
        ),
    })));
}

/// The NIC and dma-buf side of a multi-flow devmem TX send ([`send_devmem_flows`]).
#[derive(Debug)]
pub(crate) struct DevmemTx<'a> {
    /// The interface bound for TX and every socket's `SO_BINDTODEVICE`.
    pub ifname: &'a crate::cli::IfName,
    /// The dma-buf.
    pub plan: &'a MemoryPlan,
    /// `-z`: the iov split.
    pub chunk: Option<u32>,
    /// The connect window and the longest wait without a completion (`None`: the defaults).
    pub timeout: Option<std::time::Duration>,
    /// Log every send and completion.
    pub verbose: bool,
    /// `--write-size`: the largest piece copied into the dma-buf (`None`: the default).
    pub max_piece: Option<usize>,
}

/// Devmem TX of `flows.count` flows of `streams` to `to` (from `local` when given): the cpus
/// checked, one dma-buf allocated and bound for TX on `dev.ifname`, the connections made one
/// after another (so the receiver numbers them in this order), each its own `SO_ZEROCOPY`
/// socket with `flows.tcp_cc`, then every flow at once through the one flow engine
/// ([`tx::transmit_flows`]: its own window of the dma-buf and completions). A flow that failed, or
/// every flow of a failed run, is reset on close so the receiver sees `ECONNRESET` rather than a
/// clean end of a truncated stream. `log` gets the progress lines. Returns each flow's figures
/// (none when the set-up failed) and the outcome.
///
/// Errors: the `--cpus` and window checks (`Error::Usage`, before anything is created); the
/// memory source's and bind-tx's skips and refusals; a connect failure naming the flow; a
/// flow's failure (as [`tx::transmit_flows`]).
pub(crate) fn send_devmem_flows(
    dev: &DevmemTx<'_>,
    to: std::net::SocketAddrV6,
    local: Option<std::net::SocketAddrV6>,
    streams: tx::TxStreams,
    flows: &tx::SendFlows,
    stop: &std::sync::atomic::AtomicI32,
    log: &mut dyn FnMut(std::fmt::Arguments<'_>),
) -> (Vec<tx::DevmemFlow>, Result<()>) {
    let setup = (|| {
        let ifname = dev.ifname;
        let ifindex = ifname.index()?;
        super::flows::check_cpus(flows.cpus.as_deref())?;
        tx::devmem::window_size(dev.plan.size_bytes() as usize, flows.count)?;
        dev.plan.preflight()?;
        let netdev = skip_if_family_missing(Netdev::open(), "netdev")?;
        crate::signals::check_flag(stop)?;
        let mem = dev.plan.allocate()?;
        crate::signals::check_flag(stop)?;
        let binding = tx::bind_tx(&netdev, ifindex, ifname.as_str(), mem.fd())?;
        crate::signals::check_flag(stop)?;
        let how_many = match flows.count {
            1 => String::new(),
            n => format!(", {n} flows"),
        };
        log(format_args!(
            "bound {ifname} for TX to dmabuf id {} ({} bytes, {}){how_many}",
            binding.id(),
            dev.plan.size_bytes(),
            dev.plan.describe(),
        ));
        let mut socks = Vec::with_capacity(flows.count as usize);
        for k in 0..flows.count {
            let sock = tx::connect_devmem(to, local, ifname.as_str(), dev.timeout, stop)
                .and_then(|s| {
                    if let Some(cc) = &flows.tcp_cc {
                        crate::figures::tcp::set_congestion(s.fd(), "--tcp-cc", cc)?;
                    }
                    Ok(s)
                })
                .map_err(|e| match e {
                    // One flow's error is the run's, as it is.
                    e if flows.count == 1 => e,
                    Error::Timeout(m) => Error::Timeout(format!("flow {k}: {m}")),
                    Error::Interrupted(s) => Error::Interrupted(s),
                    Error::Usage(m) => Error::Usage(m),
                    other => Error::Failure(format!("flow {k}: {other}")),
                })?;
            socks.push(sock);
        }
        match flows.count {
            1 => log(format_args!(
                "connected to [{}]:{}",
                to.ip().to_canonical(),
                to.port()
            )),
            n => log(format_args!(
                "connected {n} flows to [{}]:{}",
                to.ip().to_canonical(),
                to.port()
            )),
        }
        Ok((mem, binding, socks))
    })();
    let (mut mem, binding, mut socks) = match setup {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let tx_cfg = TxConfig {
        chunk: dev.chunk,
        max_piece: dev.max_piece.unwrap_or(tx::devmem::DEFAULT_MAX_PIECE),
        completion_timeout: dev
            .timeout
            .unwrap_or(tx::devmem::DEFAULT_COMPLETION_TIMEOUT),
        verbose: dev.verbose,
        ..TxConfig::new(binding.id())
    };
    let (per_flow, result) = with_memory!(&mut mem, m => tx::transmit_flows(
        &mut socks,
        m,
        streams,
        &tx_cfg,
        flows,
        stop,
    ));
    for (sock, flow) in socks.iter().zip(&per_flow) {
        if flow.result.is_err() || result.is_err() {
            let _ = crate::sys::socket::abort_on_close(sock.fd());
        }
    }
    drop(socks);
    drop(binding);
    drop(mem);
    (per_flow, result)
}
