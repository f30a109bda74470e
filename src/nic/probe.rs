//! Probe / self-test mode (`-f IF` without `-s`/`-c`): the kernel-contract checks of C
//! ncdevmem's `run_devmem_tests` (`docs/kernel-interface.md#ncdevmem-probe-mode`), each reported
//! as one line.
//!
//! Order (ported from ncdevmem.c `run_devmem_tests`; header split is turned on before the
//! RSS change here so that the undo order is the server's):
//! 1. header split on (rings saved first);
//! 2. RSS spread over `[0, start)` (a driver without an RSS indirection table — veth,
//!    netdevsim — has nothing that could send other flows to the bound queues or pin queues
//!    against the channel shrink: a `note` line, and the checks go on);
//! 3. bind-rx with N queue nests that carry neither id nor type: must be refused;
//! 4. header split "off" (tcp-data-split UNKNOWN, as C; the kernel needs the configured mode
//!    to be ENABLED, so anything else is off for devmem), bind-rx of the real queues: must be
//!    refused;
//! 5. header split on again, bind-rx of the real queues (with `-b`, the rx-page-size): must
//!    succeed, and queue-get must show the binding on those queues;
//! 6. with the binding held, CHANNELS_SET leaving only `num` RX queues: must be refused (if
//!    it is accepted, the old counts are set back);
//! 7. unbind, wait for the queues to show free, restore everything.
//!
//! Verdict: a check the kernel got wrong is `FAIL` (exit 1, "kernel broke a contract"); a
//! refusal that means the device or kernel lacks something (EOPNOTSUPP, EPERM, an unknown
//! rx-page-size attribute, header split unsupported) is `skip` and ends the checks
//! (exit 4 with that reason); otherwise exit 0 — devmem works here. A check that cannot run
//! but does not decide whether devmem works (the driver does not report channels) is a
//! `skip` line that does not change the verdict.
//!
//! A stop signal (SIGINT/SIGTERM/SIGHUP) is looked at before each check
//! ([`SharedNic::interrupted`]): the remaining checks are not run, everything is undone, and the
//! verdict is `Error::Interrupted` (exit 1).

use std::fmt;
use std::io::Write;
use std::time::Duration;

use super::guards::{channels_for, describe_channels_set, ChannelsGuard, SharedNic};
use super::queues::{describe_owned, owned_rx, wait_queues_free};
use super::setup::{bind_refusal, NicSetup};
use crate::caps::Missing;
use crate::error::{Error, Result};
use crate::memory::MemoryPlan;
use crate::netlink::ethtool::TcpDataSplit;
use crate::netlink::netdev::{BindRxRequest, QueueNest};
use crate::summary::report::{CheckFigure, ProbeFigure};

/// What the probe binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeParams {
    /// First RX queue.
    pub start: u32,
    /// Number of RX queues (also the number of empty nests in check 3, and the RX queue
    /// count check 6 tries to shrink to).
    pub num: u32,
    /// The dma-buf fd number to bind.
    pub dmabuf_fd: u32,
    /// `-b`: rx-page-size in bytes for the binds.
    pub rx_page_size: Option<u32>,
    /// Suppress progress lines on stderr.
    pub quiet: bool,
    /// How long to wait for unbound queues to show free.
    pub teardown_wait: Duration,
    /// The plan the dma-buf was allocated by: a refusal of the real bind goes through its
    /// [`MemoryPlan::bind_refusal`] (a dma-heap buffer whose chunks are smaller than the niov
    /// is a missing capability, not a broken contract). `None`: refusals as they are.
    pub memory: Option<MemoryPlan>,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The kernel did what the contract says.
    Ok,
    /// The kernel broke the contract (or a step failed unexpectedly).
    Fail,
    /// Not checked: a capability is missing (or an earlier check stopped the probe).
    Skip,
    /// Information that does not decide the verdict (e.g. the driver has no RSS table, so
    /// there is nothing to exclude).
    Note,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Ok => "ok",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
            Status::Note => "note",
        })
    }
}

/// One reported check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// ok / FAIL / skip.
    pub status: Status,
    /// What was checked.
    pub name: String,
    /// The kernel's answer or the reason.
    pub detail: String,
    /// For `skip`: the missing capability that makes devmem not work here (its sentence is
    /// the detail); `None` for a skip that does not decide the verdict.
    pub missing: Option<Missing>,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.status, self.name, self.detail)
    }
}

/// Every check of one probe run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// In the order they ran.
    pub checks: Vec<Check>,
    /// The stop signal that ended the probe early, if one did.
    pub interrupted: Option<i32>,
    /// Every binding id the kernel returned (also for binds it should have refused), so the
    /// caller can wait for their teardown (`crate::release`).
    pub bindings: Vec<u32>,
}

impl ProbeOutcome {
    /// Exit verdict: a stop signal → `Error::Interrupted` (exit 1); else the first `FAIL` →
    /// `Error::Failure("kernel broke a contract: …")` (exit 1); else the first missing
    /// capability → `Error::Skip` (exit 4); else `Ok`.
    pub fn verdict(&self) -> Result<()> {
        if let Some(sig) = self.interrupted {
            return Err(Error::Interrupted(sig));
        }
        if let Some(c) = self.checks.iter().find(|c| c.status == Status::Fail) {
            return Err(Error::Failure(format!(
                "probe: kernel broke a contract: {}: {}",
                c.name, c.detail
            )));
        }
        if let Some(c) = self
            .checks
            .iter()
            .find_map(|c| c.missing.as_ref().filter(|_| c.status == Status::Skip))
        {
            return Err(Error::Skip(c.clone()));
        }
        Ok(())
    }

    /// The checks and the verdict as the summary's type: `{"checks": [{"status", "name",
    /// "detail"}], "verdict": "pass"|"skip"|"fail", "reason": …}` (a skip's reason names what
    /// is missing, without `skip: `).
    pub fn figure(&self) -> ProbeFigure {
        let checks = self
            .checks
            .iter()
            .map(|c| CheckFigure {
                status: c.status.to_string(),
                name: c.name.to_string(),
                detail: c.detail.clone(),
            })
            .collect();
        let (verdict, reason) = match self.verdict() {
            Ok(()) => ("pass", None),
            Err(Error::Skip(m)) => ("skip", Some(m.to_string())),
            Err(e) => ("fail", Some(e.to_string())),
        };
        ProbeFigure {
            checks,
            verdict: verdict.to_string(),
            reason,
        }
    }
}

struct Recorder<'a> {
    outcome: ProbeOutcome,
    out: &'a mut dyn Write,
    /// Set by the first missing capability: later checks are not run.
    stopped: Option<String>,
}

impl Recorder<'_> {
    fn push(&mut self, status: Status, name: &str, detail: String, missing: Option<Missing>) {
        let c = Check {
            status,
            name: name.into(),
            detail,
            missing,
        };
        let _ = writeln!(self.out, "{c}");
        if c.missing.is_some() && self.stopped.is_none() {
            self.stopped = Some(c.detail.clone());
        }
        self.outcome.checks.push(c);
    }

    fn ok(&mut self, name: &str, detail: String) {
        self.push(Status::Ok, name, detail, None);
    }

    fn fail(&mut self, name: &str, detail: String) {
        self.push(Status::Fail, name, detail, None);
    }

    fn missing(&mut self, name: &str, missing: Missing) {
        self.push(Status::Skip, name, missing.to_string(), Some(missing));
    }

    /// A `skip` line that does not decide the verdict.
    fn skip(&mut self, name: &str, detail: String) {
        self.push(Status::Skip, name, detail, None);
    }

    /// Records that a stop signal ended the probe (the remaining checks are "not run").
    fn interrupt(&mut self, sig: i32) {
        self.outcome.interrupted.get_or_insert(sig);
        self.stopped
            .get_or_insert_with(|| format!("interrupted by signal {sig}"));
    }

    /// `true` (and a "not run" line) when an earlier check stopped the probe or a stop signal
    /// arrived.
    fn not_run(&mut self, nic: &SharedNic, name: &str) -> bool {
        if let Err(Error::Interrupted(sig)) = nic.interrupted() {
            self.interrupt(sig);
        }
        let Some(why) = self.stopped.clone() else {
            return false;
        };
        self.skip(name, format!("not run ({why})"));
        true
    }
}

fn queues_label(start: u32, num: u32) -> String {
    if num == 1 {
        format!("queue {start}")
    } else {
        format!("queues {start}..={}", start + num - 1)
    }
}

/// Runs the probe on `nic`, writing one line per check to `out` as it goes, and undoes every
/// change before returning. See the module docs for the checks and the verdict
/// ([`ProbeOutcome::verdict`]).
pub fn run_probe(nic: &SharedNic, p: &ProbeParams, out: &mut dyn Write) -> ProbeOutcome {
    let ifname = nic.ifname().to_string();
    let ifindex = nic.ifindex();
    let mut rec = Recorder {
        outcome: ProbeOutcome::default(),
        out,
        stopped: None,
    };
    let mut setup = NicSetup::new(nic.clone())
        .quiet(p.quiet)
        .teardown_wait(p.teardown_wait);
    let label = queues_label(p.start, p.num);
    let real = BindRxRequest {
        ifindex,
        ifname: Some(ifname.clone()),
        fd: Some(p.dmabuf_fd),
        queues: (p.start..p.start.saturating_add(p.num))
            .map(QueueNest::rx)
            .collect(),
        rx_page_size: p.rx_page_size,
        autorelease: None,
    };
    // A bind that must be refused: ok when refused, a missing capability when the refusal
    // means one, FAIL (with `must` after the binding id) when accepted.
    let must_refuse =
        |rec: &mut Recorder<'_>, name: &str, req: &BindRxRequest, must: &str| match nic
            .with(|n| n.bind_rx(req))
        {
            Ok(b) => {
                let id = b.id();
                rec.outcome.bindings.push(id);
                drop(b);
                let queues: Vec<u32> = (p.start..p.start.saturating_add(p.num)).collect();
                let _ = nic.with(|n| wait_queues_free(n, &queues, p.teardown_wait));
                rec.fail(
                    name,
                    format!("the kernel accepted it (binding id {id}){must}"),
                );
            }
            Err(e) => match bind_refusal(e, req) {
                Error::Skip(missing) => rec.missing(name, missing),
                e => rec.ok(name, format!("refused: {e}")),
            },
        };

    // 1. Header split on.
    const HDS_ON: &str = "header split on";
    if !rec.not_run(nic, HDS_ON) {
        match setup.enable_hds() {
            Ok(()) => rec.ok(HDS_ON, "tcp-data-split enabled".into()),
            Err(Error::Skip(m)) => rec.missing(HDS_ON, m),
            Err(e) => rec.fail(HDS_ON, e.to_string()),
        }
    }

    // 2. RSS (a driver without a table has nothing to exclude: a note, not a skip).
    const RSS: &str = "RSS indirection table spread over the other queues";
    if !rec.not_run(nic, RSS) {
        match setup.exclude_from_rss_if_table(p.start) {
            Ok(None) => rec.ok(RSS, format!("queues 0..{} in RSS, {label} out", p.start)),
            Ok(Some(answer)) => rec.push(
                Status::Note,
                "rss",
                format!("driver has no RSS indirection table; nothing to exclude ({answer})"),
                None,
            ),
            Err(Error::Skip(m)) => rec.missing(RSS, m),
            Err(e) => rec.fail(RSS, e.to_string()),
        }
    }

    // 3. Empty queue nests.
    let empty_name = format!("bind-rx with {} empty queue nests is refused", p.num);
    if !rec.not_run(nic, &empty_name) {
        let req = real.clone().empty_queue_nests(p.num as usize);
        let must = "; it must refuse queue nests without id and type";
        must_refuse(&mut rec, &empty_name, &req, must);
    }

    // 4. Header split off.
    let off_name = format!("bind-rx of {label} with header split off is refused");
    if !rec.not_run(nic, &off_name) {
        match nic.with(|n| n.hds_set(TcpDataSplit::Unknown, None)) {
            Err(e) => rec.fail(
                &off_name,
                format!("could not set tcp-data-split unknown: {e}"),
            ),
            Ok(()) => {
                let must = " with tcp-data-split not enabled; it must refuse with EINVAL \
                            \"tcp-data-split is disabled\"";
                must_refuse(&mut rec, &off_name, &real, must);
            }
        }
    }

    // 5. Header split on, real bind.
    let on_name = format!("bind-rx of {label} with header split on succeeds");
    let mut bound = None;
    if !rec.not_run(nic, &on_name) {
        let hds_thresh = nic
            .with(|n| n.hds_get())
            .ok()
            .and_then(|h| h.hds_thresh)
            .map(|_| 0);
        match nic.with(|n| n.hds_set(TcpDataSplit::Enabled, hds_thresh)) {
            Err(e) => rec.fail(
                &on_name,
                format!("could not turn header split on again: {e}"),
            ),
            Ok(()) => match setup.bind(&real).map_err(|e| match &p.memory {
                Some(plan) => plan.bind_refusal(e),
                None => e,
            }) {
                Ok(id) => {
                    bound = Some(id);
                    rec.outcome.bindings.push(id);
                    let size = p.rx_page_size.map(|s| format!(", rx-page-size {s}"));
                    rec.ok(
                        &on_name,
                        format!("binding id {id}{}", size.unwrap_or_default()),
                    );
                }
                Err(Error::Interrupted(sig)) => {
                    rec.interrupt(sig);
                    rec.not_run(nic, &on_name);
                }
                Err(Error::Skip(m)) => rec.missing(&on_name, m),
                Err(e) => rec.fail(&on_name, e.to_string()),
            },
        }
    }
    const SHOWN: &str = "queue-get shows the binding on the bound queues";
    if let Some(id) = bound {
        match nic.with(|n| n.queues()) {
            Ok(qs) => {
                let missing: Vec<u32> = (p.start..p.start.saturating_add(p.num))
                    .filter(|q| {
                        !qs.iter().any(|i| {
                            i.id == *q
                                && i.queue_type == crate::netlink::netdev::QueueType::Rx
                                && i.dmabuf == Some(id)
                        })
                    })
                    .collect();
                if missing.is_empty() {
                    rec.ok(SHOWN, format!("dmabuf {id} on {label}"));
                } else {
                    rec.fail(
                        SHOWN,
                        format!(
                            "queue(s) {missing:?} do not show dmabuf {id} (owners: {})",
                            describe_owned(&owned_rx(&qs))
                        ),
                    );
                }
            }
            Err(e) => rec.fail(SHOWN, format!("queue-get failed: {e}")),
        }
    }

    // 6. Channel shrink below the bound queues.
    let shrink_name = format!(
        "shrinking to {} RX queues below bound {label} is refused",
        p.num
    );
    if !rec.not_run(nic, &shrink_name) {
        if bound.is_none() {
            rec.skip(&shrink_name, "not run (nothing bound)".into());
        } else {
            shrink_check(nic, p, &shrink_name, &mut rec);
        }
    }

    // 7. Undo.
    const RESTORE: &str = "NIC restored";
    match setup.finish() {
        Ok(()) => rec.ok(RESTORE, "unbound; every change undone".into()),
        Err(e) => rec.fail(RESTORE, e.to_string()),
    }
    rec.outcome
}

fn shrink_check(nic: &SharedNic, p: &ProbeParams, name: &str, rec: &mut Recorder<'_>) {
    let set = match nic.with(|n| n.channels_get()) {
        Err(e) => return rec.skip(name, format!("driver does not report channels: {e}")),
        Ok(old) => channels_for(&old, p.num, p.num),
    };
    let set = match set {
        Ok(s) => s,
        Err(e) => return rec.skip(name, e.to_string()),
    };
    match ChannelsGuard::apply(nic, set) {
        Ok(g) => {
            let restored = match g.restore() {
                Ok(()) => "old counts restored".to_string(),
                Err(e) => format!("and restoring the old counts failed: {e}"),
            };
            rec.fail(
                name,
                format!(
                    "the kernel accepted channels {} with a provider on queue {}; it must \
                     refuse deactivating a bound queue; {restored}",
                    describe_channels_set(&set),
                    p.start + p.num - 1
                ),
            );
        }
        Err(e) => rec.ok(name, format!("refused: {e}")),
    }
}
