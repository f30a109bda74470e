//! `-l --plain -s ADDR -p PORT`: the plain-TCP receiver.

use super::{check_tcp_cc, flows, listen, log, open_nic, rx_config, Accepted, NicRun};
use crate::cli::PlainArgs;
use crate::error::{Error, Result};
use crate::run_report::RunReport;
use crate::rx::{NoFragMemory, RxConfig};
use crate::signals;
use crate::sys::socket;

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

/// The listen, accept and receive of [`run`]; with `--rcvlowat`, each connection's
/// `SO_RCVLOWAT` is set between the accept and the receive.
fn receive(a: &PlainArgs, report: &RunReport) -> Result<()> {
    let plan =
        a.rx.rcvbuf
            .map(|b| crate::rcvbuf::plan(Some(b), 0, 0, 0, None));
    let rx_cfg = rx_config(&a.rx, a.fail_on_linear, RxConfig::plain(), report);
    let listener = listen(&a.rx, plan.as_ref(), report)?;
    let mut conns = flows::accept(&listener, &a.rx, plan.as_ref(), report)?;
    drop(listener);
    if let Some(bytes) = a.rcvlowat {
        set_rcvlowat(&mut conns, bytes, a.rx.rcvbuf, report)?;
    }
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

/// `--rcvlowat BYTES`: sets `SO_RCVLOWAT` on every accepted connection, reads back what the
/// kernel kept (into [`Accepted::rcvlowat`]: the summary's `rcvlowat_bytes`), and logs one
/// line: `receive low-water mark: SO_RCVLOWAT 524288 on each connection (--rcvlowat 524288)`,
/// with what the kernel kept where it kept less and why, and the connection of the smallest
/// where they differ. TCP caps the mark at half the receive
/// buffer: with `rcvbuf` (`--rcvbuf N`, which the kernel doubles) at N; without, at half of
/// `tcp_rmem`'s max, growing the buffer to fit a mark up to that.
///
/// Errors: `Error::Sys` from `setsockopt(SO_RCVLOWAT)` or `getsockopt(SO_RCVLOWAT)`.
fn set_rcvlowat(
    conns: &mut [Accepted],
    bytes: u32,
    rcvbuf: Option<u64>,
    report: &RunReport,
) -> Result<()> {
    for c in conns.iter_mut() {
        socket::set_rcvlowat(c.sock.fd(), bytes)?;
        c.rcvlowat = Some(socket::rcvlowat(c.sock.fd())?);
    }
    let kept: Vec<u32> = conns.iter().filter_map(|c| c.rcvlowat).collect();
    let Some((smallest_at, &smallest)) = kept.iter().enumerate().min_by_key(|(_, v)| **v) else {
        return Ok(());
    };
    let capped = match (smallest < bytes, rcvbuf) {
        (false, _) => String::new(),
        (true, Some(n)) if n > 0 => {
            format!("; the kernel keeps at most half the receive buffer, set by --rcvbuf {n}")
        }
        (true, _) => "; the kernel keeps at most half of tcp_rmem's max".to_string(),
    };
    let on = match kept.iter().all(|&v| v == smallest) {
        true => "on each connection".to_string(),
        // Accepted connection k (flow k, or with --seed and several flows the connection
        // whose first bytes will name its flow).
        false => format!(
            "on connection {smallest_at}, the smallest of {}",
            kept.len()
        ),
    };
    log!(
        report,
        "receive low-water mark: SO_RCVLOWAT {smallest} {on} (--rcvlowat {bytes}{capped})"
    );
    Ok(())
}
