//! `--report -f IF`: the read-only capability report.

use super::open_nic;
use crate::cli::ReportArgs;
use crate::error::Result;
use crate::nic::report::{HostCaps, NicReport};
use crate::run_report::RunReport;

/// The capability report on stdout (not with `--quiet`) and as the `--json` object.
/// Read-only.
///
/// Errors: an unknown interface; NIC control that cannot be opened; a stdout that cannot be
/// written.
pub(crate) fn run(a: &ReportArgs, report: &RunReport) -> Result<()> {
    a.ifname.index()?;
    let nic = open_nic(&a.ifname)?;
    let host = HostCaps::probe(a.rx_page_size, a.dmabuf_size);
    let caps = nic.with(|ops| Ok(NicReport::gather(ops, host, true)))?;
    let printed = match report.quiet() {
        true => Ok(()),
        false => report.print(&caps.render_text()),
    };
    report.body_from(&caps.figure());
    printed
}
