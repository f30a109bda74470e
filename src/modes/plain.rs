//! `-l --plain -s ADDR -p PORT`: the plain-TCP receiver.

use super::{listen_and_accept, receive_and_report, rx_config};
use crate::cli::PlainArgs;
use crate::error::Result;
use crate::run_report::RunReport;
use crate::rx::{NoFragMemory, RxConfig};

/// Listens, accepts one connection, receives over plain TCP, validates or prints, reports.
/// No devmem, no NIC changes: it validates the TCP path and the sender.
///
/// Errors: socket errors, the accept and idle timeouts, validation failures.
pub(crate) fn run(a: &PlainArgs, report: &RunReport) -> Result<()> {
    let plan =
        a.rx.rcvbuf
            .map(|b| crate::rcvbuf::plan(Some(b), 0, 0, 0, None));
    let mut conn = listen_and_accept(&a.rx, plan.as_ref(), report)?;
    let rx_cfg = rx_config(&a.rx, a.fail_on_linear, RxConfig::plain(), report);
    receive_and_report(
        &a.rx,
        &mut conn,
        None::<&NoFragMemory>,
        &rx_cfg,
        None,
        None,
        report,
    )
}
