//! `-l --plain -s ADDR -p PORT`: the plain-TCP receiver.

use super::{check_tcp_cc, flows, listen, rx_config};
use crate::cli::PlainArgs;
use crate::error::Result;
use crate::run_report::RunReport;
use crate::rx::{NoFragMemory, RxConfig};

/// Listens, accepts one connection (or `--flows N`), receives over plain TCP, validates or
/// prints, reports. No devmem, no NIC changes: it validates the TCP path and the sender, and
/// with several flows it measures the way the devmem server does (`flows`).
///
/// Errors: socket errors, the accept and idle timeouts, validation failures; usage errors of
/// the flows' options.
pub(crate) fn run(a: &PlainArgs, report: &RunReport) -> Result<()> {
    flows::check(&a.rx)?;
    check_tcp_cc(&a.rx)?;
    let plan =
        a.rx.rcvbuf
            .map(|b| crate::rcvbuf::plan(Some(b), 0, 0, 0, None));
    let rx_cfg = rx_config(&a.rx, a.fail_on_linear, RxConfig::plain(), report);
    let listener = listen(&a.rx, plan.as_ref(), report)?;
    let conns = flows::accept(&listener, &a.rx, plan.as_ref(), report)?;
    drop(listener);
    flows::receive(
        &a.rx,
        conns,
        None::<&NoFragMemory>,
        &rx_cfg,
        None,
        None,
        flows::FirstFlow::default(),
        report,
    )
}
