//! `-l --plain -s ADDR -p PORT`: the plain-TCP receiver.

use super::{check_tcp_cc, flows, listen, open_nic, rx_config, NicRun};
use crate::cli::PlainArgs;
use crate::error::{Error, Result};
use crate::run_report::RunReport;
use crate::rx::{NoFragMemory, RxConfig};
use crate::signals;

/// Listens, accepts one connection (or `--flows N`), receives over plain TCP, validates or
/// prints, reports. No devmem: it validates the TCP path and the sender, and with several
/// flows it measures the way the devmem server does (`flows`). The NIC is changed only for
/// `--hds-thresh N` (with `-f IF`): header split on with hds-thresh N before the listen,
/// restored at the end — also on errors, signals and panics ([`NicRun`]).
///
/// Errors: socket errors, the accept and idle timeouts, validation failures; usage errors of
/// the flows' options; for `--hds-thresh`, a skip when the driver has no header split or
/// hds-thresh or N is over its hds-thresh-max, and the kernel's other refusals.
pub(crate) fn run(a: &PlainArgs, report: &RunReport) -> Result<()> {
    flows::check(&a.rx)?;
    check_tcp_cc(&a.rx)?;
    let shared = match (&a.ifname, a.hds_thresh) {
        (Some(ifname), Some(_)) => Some(open_nic(ifname)?),
        (None, Some(_)) => {
            return Err(Error::Usage(
                "--hds-thresh: --plain sets the hds-thresh of the NIC -f IF names; give -f IF"
                    .into(),
            ))
        }
        _ => None,
    };
    signals::check()?;
    // Declared before the sockets, so it drops (undoes) after them.
    let mut nic = match &shared {
        Some(shared) => Some(NicRun::new(shared, false, report)?),
        None => None,
    };
    if let (Some(nic), Some(thresh)) = (nic.as_mut(), a.hds_thresh) {
        report.step("nic");
        nic.setup().enable_hds_thresh(thresh)?;
        report.step("configure");
    }
    let result = receive(a, report);
    if let Some(nic) = nic {
        nic.finish();
    }
    result
}

/// The listen, accept and receive of [`run`].
fn receive(a: &PlainArgs, report: &RunReport) -> Result<()> {
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
        None,
        report,
    )
}
