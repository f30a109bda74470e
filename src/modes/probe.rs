//! `-f IF [-b N]`: the probe / self-test (ncdevmem.c `run_devmem_tests`).

use std::os::fd::AsRawFd;

use super::server::require_rx_page_size;
use super::{await_hugepages, await_release, log, open_nic, pick_queues};
use crate::caps::Missing;
use crate::cli::ProbeArgs;
use crate::error::{Error, Result};
use crate::memory::MemoryPlan;
use crate::nic::guards::SharedNic;
use crate::nic::probe::{run_probe, ProbeOutcome, ProbeParams};
use crate::nic::queues::{QueuePolicy, QUEUE_FREE_WAIT};
use crate::nic::report::{HostCaps, NicReport};
use crate::nic::snapshot::{verify_restored, NicSnapshot};
use crate::release::kernel::KernelEnv;
use crate::release::{self, Holdings, PoolOwner};
use crate::run_report::RunReport;
use crate::signals;
use crate::summary::report::{ProbeBody, ProbeFigure};

/// The probe: prints the capability report first (read-only, so a host that cannot run the
/// checks still shows why; not with `--quiet`), checks what makes the probe a skip before
/// anything on the NIC changes — a driver without queue management ops (the report's
/// answer), `-b` without kernel support, the memory source's skips (`--memory`): every one
/// found, the one no configuration can fix first — then prints one line per kernel-contract
/// check on stdout.
///
/// The JSON body is written whatever the outcome: `{"report", "probe": {"checks",
/// "verdict", "reason"}}`, where a probe that ended before its checks (a skip, a failure, a
/// signal) has no checks and says why in `verdict` and `reason` (a skip's reason names what
/// is missing, without the `skip: ` its verdict says).
///
/// Errors: the missing capabilities (exit 4), a broken kernel contract (exit 1), a stop
/// signal.
pub(crate) fn run(a: &ProbeArgs, report: &RunReport) -> Result<()> {
    let ifindex = a.ifname.index()?;
    let plan = MemoryPlan::new(&a.memory, a.rx_page_size, a.dmabuf_size)?;
    let nic = open_nic(&a.ifname);
    let caps = match &nic {
        Ok(n) => {
            let host = HostCaps::probe(a.rx_page_size, a.dmabuf_size);
            let r = n.with(|ops| Ok(NicReport::gather(ops, host, true)))?;
            if !report.quiet() {
                // Informational, like the check lines after it: a stdout that went away
                // does not change the probe's verdict (the exit code and --json carry it).
                let _ = report.print(&r.render_text());
            }
            Some(r)
        }
        Err(_) => None,
    };
    let no_queue_ops = caps.as_ref().and_then(|c| c.no_queue_ops.clone());
    let (probe, result) = match checks(a, nic, ifindex, &plan, no_queue_ops, report) {
        Ok(outcome) => (outcome.figure(), outcome.verdict()),
        Err(e) => {
            let figure = ProbeFigure {
                checks: Vec::new(),
                verdict: match &e {
                    Error::Skip(_) => "skip",
                    _ => "fail",
                }
                .to_string(),
                reason: Some(reason_of(&e)),
            };
            (figure, Err(e))
        }
    };
    report.body_from(&ProbeBody {
        report: caps.as_ref().map(NicReport::figure),
        probe,
    });
    result
}

/// The probe after its report: the skips that need no NIC change ([`blockers`]), the
/// hugepages, the queue choice, the dma-buf (`--memory`), then the checks ([`run_probe`]),
/// `--verify-restore` (recorded in `report`) and the teardown wait. A stop signal between the
/// steps ends it.
///
/// Errors: what ended it before the checks ran.
fn checks(
    a: &ProbeArgs,
    nic: Result<SharedNic>,
    ifindex: u32,
    plan: &MemoryPlan,
    no_queue_ops: Option<Missing>,
    report: &RunReport,
) -> Result<ProbeOutcome> {
    let mut env = KernelEnv::new(Some(ifindex));
    blockers(a, plan, no_queue_ops)?;
    await_hugepages(&mut env, plan.hugepages_needed(), report)?;
    signals::check()?;
    let nic = nic?;
    if a.skip_nic_config {
        log!(
            report,
            "-n does not apply to probe mode: its checks change header split, RSS and \
             channels (and undo every change)",
        );
    }
    let before = match a.verify_restore {
        true => Some(nic.with(|n| Ok(NicSnapshot::take(n)))?),
        false => None,
    };
    let choice = pick_queues(&nic, a.queues, QueuePolicy::Probe, false, report)?;
    let mem = plan.allocate()?;
    let hugepages = release::hugepage_goal(&mut env, plan.hugepages_needed());
    let dmabuf_fd = u32::try_from(mem.fd().as_raw_fd())
        .map_err(|_| Error::Failure("dma-buf fd does not fit u32".into()))?;
    signals::check()?;
    let p = ProbeParams {
        start: choice.start,
        num: choice.num,
        dmabuf_fd,
        rx_page_size: a.rx_page_size,
        quiet: report.quiet(),
        teardown_wait: QUEUE_FREE_WAIT,
        memory: Some(plan.clone()),
    };
    let outcome = match report.json_on_stdout() {
        // `--json -`: the check lines go to stderr, beside the other human output.
        true => run_probe(&nic, &p, &mut std::io::stderr().lock()),
        false => run_probe(&nic, &p, &mut std::io::stdout().lock()),
    };
    drop(mem);
    if let Some(before) = before {
        let verified = verify_restored(&nic, &before);
        if verified.is_ok() {
            log!(
                report,
                "{}: NIC state matches its snapshot from before the run",
                nic.ifname()
            );
        }
        report.verified(verified);
    }
    let ids = &outcome.bindings;
    let what = match ids.len() {
        0 => format!("the probe's {} for {}", plan.source(), nic.ifname()),
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
    await_release(&mut env, &held, report);
    Ok(outcome)
}

/// The probe's `reason` for an error that ended it: a skip's missing capabilities (without
/// the `skip: ` the verdict already says), else the error's message.
fn reason_of(e: &Error) -> String {
    match e {
        Error::Skip(m) => m.to_string(),
        other => other.to_string(),
    }
}

/// Every skip found before the NIC is touched, as one: the driver without queue management
/// ops first (`no_queue_ops`, the capability report's answer; no configuration can fix it),
/// then `-b` on a kernel whose bind-rx has no rx-page-size (the check specific to this
/// request), then the memory source's ([`MemoryPlan::preflight`]: udmabuf, or a dma-buf
/// heap) — all of them, so a user fixing the last one named does not find the next one on
/// the next run.
///
/// Errors: [`Error::Skip`] with the one missing capability or [`Missing::Several`] in that
/// order; a check that failed otherwise (reading the bind-rx policy), at once.
fn blockers(a: &ProbeArgs, plan: &MemoryPlan, no_queue_ops: Option<Missing>) -> Result<()> {
    let mut found: Vec<Missing> = no_queue_ops.into_iter().collect();
    let mut skip = |r: Result<()>| match r {
        Err(Error::Skip(m)) => {
            found.push(m);
            Ok(())
        }
        other => other,
    };
    if let Some(size) = a.rx_page_size {
        skip(require_rx_page_size(size))?;
    }
    skip(plan.preflight())?;
    match Missing::all(found) {
        Some(m) => Err(Error::Skip(m)),
        None => Ok(()),
    }
}
