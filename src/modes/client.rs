//! `-f IF -s ADDR -p PORT`: the devmem TX client (ncdevmem.c `do_client`).

use super::log;
use super::sender::sender_stream;
use crate::caps::skip_if_family_missing;
use crate::cli::{ClientArgs, TxSource as Source};
use crate::error::Result;
use crate::memory::MemoryPlan;
use crate::netlink::netdev::Netdev;
use crate::run_report::RunReport;
use crate::signals::{self, STOP};
use crate::tx::{self, LineSource, PatternSource, TxConfig, TxSource};
use crate::with_memory;

/// The devmem TX client: the skips first (the memory source's), then the dma-buf (`--memory`:
/// udmabuf or a dma-buf heap), bind-tx (its netlink socket stays open for the whole run), a socket bound to IF (and `-c` with the same port)
/// with `SO_ZEROCOPY`, then stdin line by line — or, with `--send-pattern`, the `-v` pattern
/// — through the dma-buf, and every zerocopy completion awaited before "tx ok".
///
/// Errors: the skips, kernel refusals, connect and completion timeouts, send errors.
pub(crate) fn run(a: &ClientArgs, report: &RunReport) -> Result<()> {
    let ifname = &a.ifname;
    let ifindex = ifname.index()?;
    let plan = MemoryPlan::new(&a.memory, None, a.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created (no
    // hugepages: TX memory is never hugetlb).
    plan.preflight()?;
    let (stream, mut source): (_, Box<dyn TxSource>) = match &a.source {
        Source::Pattern(p) => {
            let stream = sender_stream(p.stream);
            let write_size = p.write_size.unwrap_or(0);
            let source = PatternSource::new(stream, p.bytes, write_size, p.corrupt_offset)?;
            (Some(stream), Box::new(source))
        }
        Source::Stdin => (
            None,
            Box::new(LineSource::new(std::io::stdin().lock(), &STOP)),
        ),
    };
    let netdev = skip_if_family_missing(Netdev::open(), "netdev")?;
    signals::check()?;

    let mut mem = plan.allocate()?;
    signals::check()?;
    let binding = tx::bind_tx(&netdev, ifindex, ifname.as_str(), mem.fd())?;
    signals::check()?;
    log!(
        report,
        "bound {ifname} for TX to dmabuf id {} ({} bytes, {})",
        binding.id(),
        plan.size_bytes(),
        plan.describe()
    );
    let peer = &a.peer;
    let mut sock = tx::connect_devmem(
        peer.remote(),
        peer.local(),
        ifname.as_str(),
        a.timeout,
        &STOP,
    )?;
    log!(report, "connected to [{}]:{}", peer.addr.ip, peer.port);

    let write_size = match &a.source {
        Source::Pattern(p) => p.write_size,
        Source::Stdin => None,
    };
    let tx_cfg = TxConfig {
        chunk: a.chunk,
        max_piece: write_size.unwrap_or(tx::devmem::DEFAULT_MAX_PIECE),
        completion_timeout: a.timeout.unwrap_or(tx::devmem::DEFAULT_COMPLETION_TIMEOUT),
        verbose: report.verbose(),
        ..TxConfig::new(binding.id())
    };
    let mut log_sink = std::io::stderr();
    // The memory's type is resolved here, once: the send loop is compiled per source.
    let (stats, result) = with_memory!(&mut mem, m => tx::transmit(
        &mut sock,
        m,
        source.as_mut(),
        &tx_cfg,
        &STOP,
        &mut log_sink,
    ));
    let ok = result.is_ok();
    log!(report, "{}", stats.summary_line(ok));
    drop(sock);
    drop(binding);
    drop(mem);
    let mut json = stats.to_json(ok);
    json["stream"] = stream.map(|t| t.to_string()).into();
    report.body(json);
    result
}
