//! The devmem server's NIC setup, in C ncdevmem's order
//! (`docs/kernel-interface.md#ncdevmem-server-and-client`), and its undo in reverse, on every exit.
//!
//! Setup: header split on → RSS spread over queues `[0, start)` → ntuple feature on (only if
//! off) → one flow rule steering the connection to queue `start` (5-tuple with `-c`, else or
//! on refusal 3-tuple) → bind-rx. Teardown: unbind (close the binding's netlink socket) and
//! wait until queue-get shows the queues free → delete our rule → ntuple back off → original
//! RSS table → header split restored. The binding goes first because the kernel refuses to
//! disable header split (or set a non-zero hds-thresh) while a memory provider is bound.
//!
//! Which steps are mandatory for devmem, and what a refusal means:
//! - header split: mandatory (bind-rx checks it); EOPNOTSUPP → skip;
//! - RSS exclusion: mandatory for the server (otherwise RSS sends other flows' packets to
//!   the bound queues); EOPNOTSUPP or an empty table → skip. Probe mode uses
//!   [`NicSetup::exclude_from_rss_if_table`], where a driver without a table is a note;
//! - ntuple feature: EOPNOTSUPP from reading it → skip ("driver has no ntuple filters");
//! - flow rule: mandatory (otherwise the flow lands on other queues: "flow steering
//!   error"); EOPNOTSUPP → skip;
//! - bind-rx: EOPNOTSUPP → skip ("device does not support devmem RX"), EPERM → skip.
//!
//! Any other refusal is a failure (exit 1). Either way every step already done is undone.
//!
//! A stop signal (SIGINT/SIGTERM/SIGHUP) during setup is acted on at the next step: every step and
//! the bind first check [`SharedNic::interrupted`], so the run ends with
//! `Error::Interrupted` (exit 1, "interrupted by signal N") and the steps done are undone,
//! instead of carrying on and reporting a later step's error.

use std::time::Duration;

use super::guards::{
    describe_hds, log_stderr, HdsGuard, NtupleFeatureGuard, RssContextGuard, RssGuard, RssSpread,
    SharedNic,
};
use super::queues::{describe_owned, wait_queues_free, QUEUE_FREE_WAIT};
use super::steer::{
    apply_steering, plan_steering, rss_context_support, ContextSupport, Destination, SteerRequest,
    Steering,
};
use super::{Binding, RssContextId, RuleLocation};
use crate::caps::{classify, Op};
use crate::error::{Error, Result};
use crate::netlink::netdev::BindRxRequest;

pub use super::steer::FlowTarget;

/// What the server changes on the NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPlan {
    /// First RX queue to bind; RSS is spread over `[0, start)`; the flow rule targets it.
    pub start_queue: u32,
    /// Number of RX queues to bind.
    pub num_queues: u32,
    /// The flow to steer.
    pub flow: FlowTarget,
    /// How many flows (connections) the server accepts: one flow with `-c` gets the 5-tuple
    /// rule; several share a 3-tuple rule (`crate::nic::steer`).
    pub flows: u32,
    /// `-n`: change nothing but the binding.
    pub skip_nic_config: bool,
}

/// Sorts a bind-rx refusal of `req` ([`classify`] with [`Op::BindRx`]): EPERM, EOPNOTSUPP
/// ("device does not support devmem RX", with the kernel's extack), EBUSY with the
/// autorelease attribute, and an unknown `rx-page-size` attribute on a kernel that predates
/// it are skips. Everything else stays.
pub fn bind_refusal(e: Error, req: &BindRxRequest) -> Error {
    let op = Op::BindRx {
        rx_page_size: req.rx_page_size,
        autorelease: req.autorelease.is_some(),
    };
    classify(e, op)
}

/// A NIC step's refusal on `ifname` ([`classify`] with [`Op::Nic`]).
fn step_refusal(e: Error, ifname: &str, what: &str) -> Error {
    classify(
        e,
        Op::Nic {
            ifname,
            what,
            hint: None,
        },
    )
}

/// Every NIC change of one run, as undo guards. Fields are declared in teardown order (Rust
/// drops fields in declaration order), which is the reverse of setup order; the explicit
/// [`finish`](Self::finish) and `Drop` follow the same order and also wait, after unbinding,
/// until queue-get shows the queues free.
#[derive(Debug)]
pub struct NicSetup {
    /// Dropped first: closing its netlink socket unbinds.
    binding: Option<Box<dyn Binding>>,
    bound_queues: Vec<u32>,
    /// The flow rule and, over several queues, the RSS context it names (the rule goes
    /// first, then the context).
    steering: Option<Steering>,
    ntuple: Option<NtupleFeatureGuard>,
    rss: Option<RssGuard>,
    /// Restored last: the kernel refuses to turn header split off while bound.
    hds: Option<HdsGuard>,
    nic: SharedNic,
    quiet: bool,
    teardown_wait: Duration,
}

impl NicSetup {
    /// No changes yet.
    pub fn new(nic: SharedNic) -> NicSetup {
        NicSetup {
            binding: None,
            bound_queues: Vec::new(),
            steering: None,
            ntuple: None,
            rss: None,
            hds: None,
            nic,
            quiet: false,
            teardown_wait: QUEUE_FREE_WAIT,
        }
    }

    /// Suppresses the progress lines on stderr (undo failures are still logged).
    pub fn quiet(mut self, quiet: bool) -> NicSetup {
        self.quiet = quiet;
        self
    }

    /// How long teardown waits for unbound queues to show free (default 2 s).
    pub fn teardown_wait(mut self, wait: Duration) -> NicSetup {
        self.teardown_wait = wait;
        self
    }

    fn log(&self, line: &str) {
        if !self.quiet {
            log_stderr(line);
        }
    }

    /// Turns header split on (tcp-data-split enabled, hds-thresh 0 if reported).
    ///
    /// Errors: `Error::Skip` when the driver does not support it; kernel errors otherwise.
    pub fn enable_hds(&mut self) -> Result<()> {
        let ifname = self.nic.ifname().to_string();
        let g = HdsGuard::enable(&self.nic)
            .map_err(|e| step_refusal(e, &ifname, "header split (tcp-data-split)"))?;
        self.log(&format!(
            "{ifname}: header split on (was: {})",
            describe_hds(&g.old())
        ));
        self.hds = Some(g);
        Ok(())
    }

    /// Turns header split on with hds-thresh `thresh` bytes (the plain receiver's
    /// `--hds-thresh`), restored at teardown like [`enable_hds`](Self::enable_hds)'s.
    ///
    /// Errors: `Error::Skip` when the driver has no header split, reports no hds-thresh or
    /// `thresh` is over its hds-thresh-max; `Error::Interrupted` on a stop signal; kernel
    /// errors otherwise.
    pub(crate) fn enable_hds_thresh(&mut self, thresh: u32) -> Result<()> {
        self.nic.interrupted()?;
        let ifname = self.nic.ifname().to_string();
        let g = HdsGuard::enable_with_thresh(&self.nic, thresh).map_err(|e| {
            step_refusal(
                e,
                &ifname,
                &format!("header split with hds-thresh {thresh}"),
            )
        })?;
        self.log(&format!(
            "{ifname}: header split on, hds-thresh {thresh} (was: {})",
            describe_hds(&g.old())
        ));
        self.hds = Some(g);
        self.nic.interrupted()
    }

    /// Spreads the RSS indirection table over queues `[0, start)`.
    ///
    /// Errors: `Error::Skip` when the driver has no RSS table; `Error::Usage` for start 0.
    pub fn exclude_from_rss(&mut self, start: u32) -> Result<()> {
        self.spread_rss(start)?
            .map_or(Ok(()), |e| Err(self.rss_skip(e)))
    }

    /// As [`exclude_from_rss`](Self::exclude_from_rss), for probe mode: a driver without an
    /// RSS indirection table (GRSSH EOPNOTSUPP, or an empty table) is `Ok(Some(answer))` with
    /// nothing changed — there is no table that could send traffic to the bound queues or
    /// pin queues against a channel change. `Ok(None)`: spread (or already spread).
    ///
    /// Errors: as [`exclude_from_rss`](Self::exclude_from_rss) for everything else.
    pub fn exclude_from_rss_if_table(&mut self, start: u32) -> Result<Option<String>> {
        Ok(self.spread_rss(start)?.map(|e| e.to_string()))
    }

    /// Spreads the table and keeps its guard; `Ok(Some(answer))` when the driver has none.
    fn spread_rss(&mut self, start: u32) -> Result<Option<Error>> {
        let g = match RssGuard::spread_if_table(&self.nic, start) {
            Ok(RssSpread::Spread(g)) => g,
            Ok(RssSpread::NoTable(e)) => return Ok(Some(e)),
            Err(e) => return Err(self.rss_skip(e)),
        };
        if g.changed() {
            self.log(&format!(
                "{}: RSS spread over queues 0..{start} (original table saved)",
                self.nic.ifname()
            ));
        }
        self.rss = Some(g);
        Ok(None)
    }

    fn rss_skip(&self, e: Error) -> Error {
        step_refusal(e, self.nic.ifname(), "the RSS indirection table")
    }

    /// Turns the ntuple feature on if it is off.
    ///
    /// Errors: `Error::Skip` when the driver has no ntuple filters.
    pub(crate) fn enable_ntuple(&mut self) -> Result<()> {
        let ifname = self.nic.ifname().to_string();
        let g = NtupleFeatureGuard::enable(&self.nic)
            .map_err(|e| step_refusal(e, &ifname, "ntuple filters (rx-ntuple-filter)"))?;
        if g.changed() {
            self.log(&format!("{ifname}: ntuple feature on"));
        }
        self.ntuple = Some(g);
        Ok(())
    }

    /// Steers the flows of `plan` to its queues ([`crate::nic::steer`]): over one queue, the
    /// first rule the driver accepts (C: 5-tuple, then 3-tuple) to `plan.start_queue`; over
    /// several, an RSS context whose indirection table spans exactly the bound queues and a
    /// rule to it; a driver without additional RSS contexts shares the start queue through
    /// one rule, and [`shared_queue`](Self::shared_queue) then says so with the kernel's
    /// answer. Returns the rule's location.
    ///
    /// Errors: `Error::Skip` when the driver answers EOPNOTSUPP (or EPERM) to the last rule or
    /// to the context; `Error::Usage` for a plan without queues or flows; the kernel's other
    /// refusals.
    pub fn steer(&mut self, plan: &ServerPlan) -> Result<RuleLocation> {
        let ifname = self.nic.ifname().to_string();
        let contexts = match plan.num_queues {
            1 => ContextSupport::Available,
            _ => self.nic.with(rss_context_support)?,
        };
        let req = SteerRequest {
            start_queue: plan.start_queue,
            num_queues: plan.num_queues,
            flows: plan.flows,
            target: plan.flow,
        };
        let steer = plan_steering(&req, &contexts)?;
        if let Some(why) = &steer.shared_queue {
            self.log(&format!("{ifname}: {why}"));
        }
        let what = match steer.destination {
            Destination::Queue(_) => "ntuple flow steering",
            Destination::Context(_) => "flow steering to an RSS context",
        };
        let steering = apply_steering(&self.nic, &steer, self.quiet)
            .map_err(|e| step_refusal(e, &ifname, what))?;
        let loc = steering.rule().location();
        self.steering = Some(steering);
        Ok(loc)
    }

    /// When the flows share the start queue because the driver has no additional RSS
    /// contexts: the sentence for the summary, with the kernel's answer.
    pub fn shared_queue(&self) -> Option<&str> {
        self.steering.as_ref().and_then(Steering::shared_queue)
    }

    /// The RSS context the flows are steered to, if one was created.
    pub fn rss_context(&self) -> Option<RssContextId> {
        self.steering
            .as_ref()
            .and_then(Steering::context)
            .map(RssContextGuard::id)
    }

    /// The whole server setup (unless `plan.skip_nic_config`): header split, RSS, ntuple
    /// feature, the flows steered to the bound queues ([`steer`](Self::steer)); the stop flag
    /// is checked before each step and after the last.
    ///
    /// Errors: the first step's error (see the module docs), or `Error::Interrupted` when a
    /// stop signal arrived; steps already done stay recorded and are undone by
    /// [`finish`](Self::finish) or `Drop`.
    pub(crate) fn configure_server(&mut self, plan: &ServerPlan) -> Result<()> {
        self.nic.interrupted()?;
        if plan.skip_nic_config {
            self.log(&format!(
                "{}: -n: NIC configuration skipped (header split, RSS, flow rule)",
                self.nic.ifname()
            ));
            return Ok(());
        }
        self.enable_hds()?;
        self.nic.interrupted()?;
        self.exclude_from_rss(plan.start_queue)?;
        self.nic.interrupted()?;
        self.enable_ntuple()?;
        self.nic.interrupted()?;
        self.steer(plan)?;
        self.nic.interrupted()
    }

    /// bind-rx; the binding is kept until teardown. Returns the binding id.
    ///
    /// Errors: `Error::Interrupted` when a stop signal arrived before the bind;
    /// [`bind_refusal`] skips; other kernel errors; `Error::Failure` when the kernel
    /// answers binding id 0 (ids start at 1; 0 in a cmsg means "no dma-buf") — that binding
    /// is released at once and its queues waited for.
    pub fn bind(&mut self, req: &BindRxRequest) -> Result<u32> {
        self.nic.interrupted()?;
        let binding = self
            .nic
            .with(|n| n.bind_rx(req))
            .map_err(|e| bind_refusal(e, req))?;
        let id = binding.id();
        self.bound_queues = req.queues.iter().filter_map(|q| q.id).collect();
        self.binding = Some(binding);
        if id == 0 {
            let leftover = self.release_binding().map(|w| format!("; {w}"));
            return Err(Error::Failure(format!(
                "kernel returned binding id 0 for bind-rx of {}; binding ids start at 1 (0 \
                 means \"no dma-buf\" in a devmem cmsg), so it was unbound{}",
                req.target(),
                leftover.unwrap_or_default()
            )));
        }
        Ok(id)
    }

    /// Drops the binding (closing its netlink socket unbinds) and waits up to the teardown
    /// wait until queue-get shows its queues free. Returns a warning if they stay owned.
    fn release_binding(&mut self) -> Option<String> {
        drop(self.binding.take()?);
        let queues = std::mem::take(&mut self.bound_queues);
        let wait = self.teardown_wait;
        match self.nic.with(|n| wait_queues_free(n, &queues, wait)) {
            Ok(still) if still.is_empty() => None,
            Ok(still) => Some(format!(
                "{}: {} still owned {} ms after unbinding",
                self.nic.ifname(),
                describe_owned(&still),
                wait.as_millis()
            )),
            Err(e) => Some(format!(
                "{}: could not check that the queues are free after unbinding: {e}",
                self.nic.ifname()
            )),
        }
    }

    /// Unbinds now (before the rest of the teardown).
    pub fn unbind(&mut self) {
        if let Some(w) = self.release_binding() {
            log_stderr(&w);
        }
    }

    /// Undoes everything in reverse setup order, trying every step even when one fails; a
    /// second call finds nothing left to undo.
    ///
    /// Errors: the undo failure (each names the `ethtool` command to fix it by hand); several
    /// are joined into one `Error::Failure`.
    pub fn finish(&mut self) -> Result<()> {
        self.unbind();
        let mut errors: Vec<Error> = [
            self.steering.take().and_then(|g| g.restore().err()),
            self.ntuple.take().and_then(|g| g.restore().err()),
            self.rss.take().and_then(|g| g.restore().err()),
            self.hds.take().and_then(|g| g.restore().err()),
        ]
        .into_iter()
        .flatten()
        .collect();
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Failure(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }
}

impl Drop for NicSetup {
    /// Best-effort teardown on error paths, panics and signals: the same order as
    /// [`finish`](NicSetup::finish) (the guards then drop in field order); each guard logs
    /// what it could not undo.
    fn drop(&mut self) {
        self.unbind();
    }
}

/// The server's NIC part around `body`, for the tests of the setup and its undo (test builds
/// and the `testing` feature only; the modes hold a `NicRun` instead): configure (unless `-n`),
/// bind, run `body` with the binding id, then undo everything in reverse order — on success, on
/// error, on a stop signal (the receive loop returns `Error::Interrupted`) and, through `Drop`,
/// on a panic.
///
/// Errors: the first of: setup/bind error, `body`'s error, undo error (an undo error after
/// another error is logged).
#[cfg(any(test, feature = "testing"))]
pub fn run_with_setup<R>(
    nic: &SharedNic,
    plan: &ServerPlan,
    req: &BindRxRequest,
    quiet: bool,
    teardown_wait: Duration,
    body: impl FnOnce(u32) -> Result<R>,
) -> Result<R> {
    let mut setup = NicSetup::new(nic.clone())
        .quiet(quiet)
        .teardown_wait(teardown_wait);
    let result = (|| {
        setup.configure_server(plan)?;
        let id = setup.bind(req)?;
        nic.interrupted()?;
        body(id)
    })();
    match (result, setup.finish()) {
        (Ok(r), Ok(())) => Ok(r),
        (Ok(_), Err(e)) | (Err(e), Ok(())) => Err(e),
        (Err(e), Err(undo)) => {
            log_stderr(&undo.to_string());
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_refusals_that_are_skips() {
        let req = BindRxRequest {
            ifindex: 4,
            ifname: None,
            fd: Some(3),
            queues: vec![],
            rx_page_size: Some(16384),
            autorelease: None,
        };
        let nl = |errno, msg: Option<&str>| {
            Error::Netlink(Box::new(crate::error::NlError {
                family: "netdev".into(),
                op: "bind-rx".into(),
                target: String::new(),
                errno,
                ext_msg: msg.map(str::to_string),
                bad_attr: None,
                missing_attr: None,
                missing_nest: None,
                ack_problem: None,
            }))
        };
        let e = bind_refusal(nl(libc::EINVAL, Some("Unknown attribute type")), &req);
        assert!(
            e.to_string()
                .contains("does not know bind-rx attribute rx-page-size"),
            "{e}"
        );
        let e = bind_refusal(nl(libc::EOPNOTSUPP, None), &req);
        assert!(e.to_string().contains("with rx-page-size 16384"), "{e}");
        let e = bind_refusal(nl(libc::EINVAL, Some("tcp-data-split is disabled")), &req);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
        let plain = BindRxRequest {
            rx_page_size: None,
            ..req
        };
        let e = bind_refusal(nl(libc::EPERM, None), &plain);
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
    }
}
