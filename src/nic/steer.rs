//! Steering N flows over the bound queues `-t START -q NUM`: which ntuple rule, to a queue or to
//! an additional RSS context, and the undo guards that apply it.
//!
//! [`plan_steering`] is the decision, a pure function of the request and of whether the driver
//! has additional RSS contexts:
//! - one bound queue (`-q 1`): one rule to queue START, as C ncdevmem steers — the 5-tuple
//!   rule with `-c` and one flow (the 3-tuple rule if the driver refuses it), else the 3-tuple
//!   rule (`dst-ip`, `dst-port`): several flows come from several source ports;
//! - several bound queues and a driver with additional RSS contexts: a context whose
//!   indirection table spreads evenly over exactly START..START+NUM, and one `FLOW_RSS` rule to
//!   it (queue offset 0; the same 5-tuple/3-tuple choice), the way kperf steers devmem flows.
//!   The flows then land on the bound queues by their RSS hash;
//! - several bound queues and a driver without additional contexts: the flows share queue
//!   START through one rule, and the plan carries the sentence for the summary, with the
//!   kernel's answer.
//!
//! [`apply_steering`] carries a plan out through [`NicOps`] (the context, then the rule) and
//! returns [`Steering`], which holds their guards and undoes them in reverse order — the rule
//! first, then the context (the kernel refuses to delete a context a rule still names) — on
//! [`Steering::restore`] and, best-effort, on drop (error, panic, stop signal).
//!
//! Not here, and still the caller's: header split, the default RSS table kept off the bound
//! queues ([`super::guards::RssGuard`]), the ntuple feature, and the judgement of which
//! refusal is a skip.

use super::guards::{
    describe_rule_to, log_stderr, span_table, FlowRuleGuard, RssContextGuard, SharedNic,
};
use std::net::IpAddr;

use super::{FlowRule, FlowType, NicOps, QueueSpan, RssContextId};
use crate::error::{Error, Result};

/// The flow the server steers to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowTarget {
    /// `-s`: the server (local, destination) address.
    pub server: IpAddr,
    /// `-c`: the client (source) address, for a 5-tuple rule.
    pub client: Option<IpAddr>,
    /// `-p`: destination port, and source port of the 5-tuple rule (C uses the same port).
    pub port: u16,
}

/// The rules to try, in order: with a client address of the server's family, the 5-tuple
/// rule (src-ip, dst-ip, src-port, dst-port), then the 3-tuple rule (dst-ip, dst-port). IPv4
/// and IPv4-mapped addresses give `tcp4` rules with the plain IPv4 address, others `tcp6`.
pub(crate) fn flow_rules_for(t: &FlowTarget, queue: u32) -> Vec<FlowRule> {
    let server = t.server.to_canonical();
    let flow_type = if server.is_ipv4() {
        FlowType::Tcp4
    } else {
        FlowType::Tcp6
    };
    let mut rules = Vec::new();
    if let Some(c) = t.client.map(|c| c.to_canonical()) {
        if c.is_ipv4() == server.is_ipv4() {
            rules.push(FlowRule {
                flow_type,
                src: Some((c, t.port)),
                dst: (server, t.port),
                queue,
            });
        }
    }
    rules.push(FlowRule {
        flow_type,
        src: None,
        dst: (server, t.port),
        queue,
    });
    rules
}

/// What is to be steered: the bound queues, how many flows, and the flow's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteerRequest {
    /// `-t`: the first bound RX queue (queue index).
    pub start_queue: u32,
    /// `-q`: how many RX queues are bound from `start_queue` on (at least 1).
    pub num_queues: u32,
    /// `--flows`: how many TCP connections the server accepts (at least 1).
    pub flows: u32,
    /// `-s`, `-p`, `-c`: the server address and port, and the client address for a 5-tuple
    /// rule.
    pub target: FlowTarget,
}

/// Whether the driver has additional RSS contexts ([`rss_context_support`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextSupport {
    /// It has (the ethtool core knows contexts for it).
    Available,
    /// It has none; the kernel's answer (an EOPNOTSUPP), as text.
    Unavailable(String),
}

/// Where the rule sends the flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// To this RX queue (`ring_cookie`).
    Queue(u32),
    /// To a new RSS context spreading evenly over these queues (the rule's `queue` is the
    /// offset 0).
    Context(QueueSpan),
}

/// How the flows are steered: the destination, the rules to try in order (the first the
/// driver accepts is kept) and, when the flows cannot spread as asked, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerPlan {
    /// A queue, or an RSS context over the bound queues.
    pub destination: Destination,
    /// Candidate rules, most specific first (a 5-tuple rule, then the 3-tuple one). For a
    /// context destination each rule's `queue` is 0 (the queue offset).
    pub rules: Vec<FlowRule>,
    /// For the summary when several bound queues get the flows on START only (no additional
    /// RSS contexts): what happens instead and the kernel's answer. `None` otherwise.
    pub shared_queue: Option<String>,
}

/// The steering for `req` ([module docs](self)). `contexts` is consulted only when more
/// than one queue is bound.
///
/// Errors: `Error::Usage` for 0 queues or 0 flows, or queues past `u32::MAX`.
pub fn plan_steering(req: &SteerRequest, contexts: &ContextSupport) -> Result<SteerPlan> {
    if req.num_queues == 0 || req.flows == 0 {
        return Err(Error::Usage(format!(
            "steering needs at least one queue and one flow (got -q {} and {} flows)",
            req.num_queues, req.flows
        )));
    }
    if req.start_queue.checked_add(req.num_queues).is_none() {
        return Err(Error::Usage(format!(
            "-t {} -q {}: the bound queues run past the last queue index",
            req.start_queue, req.num_queues
        )));
    }
    // Several flows come from several source ports: only the 3-tuple rule matches them all.
    let target = if req.flows == 1 {
        req.target
    } else {
        FlowTarget {
            client: None,
            ..req.target
        }
    };
    let span = QueueSpan {
        start: req.start_queue,
        count: req.num_queues,
    };
    let to_start = |shared_queue| SteerPlan {
        destination: Destination::Queue(span.start),
        rules: flow_rules_for(&target, span.start),
        shared_queue,
    };
    Ok(match contexts {
        _ if span.count == 1 => to_start(None),
        ContextSupport::Available => SteerPlan {
            destination: Destination::Context(span),
            rules: flow_rules_for(&target, 0),
            shared_queue: None,
        },
        ContextSupport::Unavailable(answer) => {
            let flows = match req.flows {
                1 => "the flow goes to queue".to_string(),
                n => format!("the {n} flows share queue"),
            };
            to_start(Some(format!(
                "the driver has no additional RSS contexts, so {flows} {} instead of \
                 spreading over {span} (kernel: {answer})",
                span.start
            )))
        }
    })
}

/// Asks whether the driver has additional RSS contexts without changing anything: reads
/// context 1 (`ETHTOOL_GRSSH` with `rss_context` 1). EOPNOTSUPP — the driver has no RSS or no
/// additional contexts — is [`ContextSupport::Unavailable`] with that answer; a table or
/// ENOENT (no context 1 yet) is [`ContextSupport::Available`].
///
/// Errors: any other answer of [`NicOps::rss_context_get`].
pub fn rss_context_support(nic: &mut dyn NicOps) -> Result<ContextSupport> {
    match nic.rss_context_get(1) {
        Ok(_) => Ok(ContextSupport::Available),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(ContextSupport::Available),
        Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
            Ok(ContextSupport::Unavailable(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

/// The guards of an applied [`SteerPlan`]. Fields drop in declaration order: the rule, then
/// the context.
#[derive(Debug)]
pub struct Steering {
    rule: FlowRuleGuard,
    context: Option<RssContextGuard>,
    shared_queue: Option<String>,
}

impl Steering {
    /// The rule the driver accepted.
    pub fn rule(&self) -> &FlowRuleGuard {
        &self.rule
    }

    /// The RSS context created for the flows, if the plan had one.
    pub fn context(&self) -> Option<&RssContextGuard> {
        self.context.as_ref()
    }

    /// [`SteerPlan::shared_queue`]: the summary sentence when the flows share the start queue.
    pub fn shared_queue(&self) -> Option<&str> {
        self.shared_queue.as_deref()
    }

    /// Deletes the rule, then the context, trying both even when the first fails.
    ///
    /// Errors: the undo failures (each names the `ethtool` command that fixes it by hand),
    /// joined into one `Error::Failure` when both fail.
    pub fn restore(self) -> Result<()> {
        let rule = self.rule.restore();
        let context = self.context.map_or(Ok(()), RssContextGuard::restore);
        match (rule, context) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Err(a), Err(b)) => Err(Error::Failure(format!("{a}; {b}"))),
        }
    }
}

/// Carries out `plan` on `nic`: for a context destination, reads the default table's size
/// (`rss_get`), creates the context over the span with a table of that size, then inserts the
/// first rule of `plan.rules` the driver accepts, to the context or the queue. A kernel
/// refusal of one rule moves on to the next (logged unless `quiet`); an untrustworthy
/// location stops (the rule may be installed). The stop flag is checked before each change
/// and after the last.
///
/// Takes the [`SharedNic`] the guards hold today (each guard keeps a handle to undo through);
/// the plan itself ([`plan_steering`]) needs no NIC.
///
/// Errors: the kernel's answers unchanged, for the caller to judge — the table read's or
/// the create's (EOPNOTSUPP, EINVAL, EBUSY: see [`NicOps::rss_context_create`]), the last
/// rule refusal (EOPNOTSUPP from a driver without ntuple filters; EINVAL from the ethtool
/// core for a `FLOW_RSS` rule it refuses); `Error::Failure` for a table smaller than the span
/// or a rule location that cannot be trusted; `Error::Interrupted` on a stop signal. Whatever
/// was created before the error is undone before returning (an undo failure is logged).
pub fn apply_steering(nic: &SharedNic, plan: &SteerPlan, quiet: bool) -> Result<Steering> {
    nic.interrupted()?;
    let context = match plan.destination {
        Destination::Queue(_) => None,
        Destination::Context(span) => {
            let len = nic.with(|n| n.rss_get())?.indir.len();
            if len < span.count as usize {
                return Err(Error::Failure(format!(
                    "{}: an RSS table of {len} entries cannot spread over the {} {span}",
                    nic.ifname(),
                    span.count
                )));
            }
            nic.interrupted()?;
            let g = RssContextGuard::create(nic, &span_table(len, span))?;
            if !quiet {
                log_stderr(&format!(
                    "{}: RSS context {} over {span}",
                    nic.ifname(),
                    g.id()
                ));
            }
            Some(g)
        }
    };
    let id = context.as_ref().map(RssContextGuard::id);
    let steering = match insert_first(nic, &plan.rules, id, quiet) {
        Ok(rule) => Steering {
            rule,
            context,
            shared_queue: plan.shared_queue.clone(),
        },
        Err(e) => {
            if let Some(Err(undo)) = context.map(RssContextGuard::restore) {
                log_stderr(&undo.to_string());
            }
            return Err(e);
        }
    };
    // A signal during the last step: undo it all here rather than leave it to the caller.
    if let Err(e) = nic.interrupted() {
        if let Err(undo) = steering.restore() {
            log_stderr(&undo.to_string());
        }
        return Err(e);
    }
    Ok(steering)
}

/// Inserts the first of `rules` the driver accepts, to RSS context `ctx` or (`None`) to each
/// rule's queue.
fn insert_first(
    nic: &SharedNic,
    rules: &[FlowRule],
    ctx: Option<RssContextId>,
    quiet: bool,
) -> Result<FlowRuleGuard> {
    let mut last = None;
    for rule in rules {
        nic.interrupted()?;
        let inserted = match ctx {
            None => FlowRuleGuard::insert(nic, rule),
            Some(c) => FlowRuleGuard::insert_to_context(nic, rule, c),
        };
        match inserted {
            Ok(g) => {
                if !quiet {
                    log_stderr(&format!(
                        "{}: ntuple rule {} at location {}",
                        nic.ifname(),
                        g.describe(),
                        g.location()
                    ));
                }
                return Ok(g);
            }
            // Not a kernel refusal (an untrustworthy location): our rule may be installed,
            // so no other rule is tried.
            Err(e) if e.errno().is_none() => return Err(e),
            Err(e) => {
                if !quiet {
                    log_stderr(&format!(
                        "{}: ntuple rule {} refused: {e}",
                        nic.ifname(),
                        describe_rule_to(rule, ctx)
                    ));
                }
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Failure("no flow rule to insert".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_follow_the_address_family() {
        let t = FlowTarget {
            server: "::ffff:192.0.2.1".parse().unwrap(),
            client: Some("192.0.2.2".parse().unwrap()),
            port: 5201,
        };
        let r = flow_rules_for(&t, 7);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].flow_type, FlowType::Tcp4);
        assert_eq!(r[0].src, Some(("192.0.2.2".parse().unwrap(), 5201)));
        assert_eq!(r[0].dst, ("192.0.2.1".parse().unwrap(), 5201));
        assert_eq!(r[1].src, None);
        assert_eq!(r[1].queue, 7);

        let t6 = FlowTarget {
            server: "2001:db8::1".parse().unwrap(),
            client: Some("192.0.2.2".parse().unwrap()),
            port: 9,
        };
        let r = flow_rules_for(&t6, 3);
        assert_eq!(r.len(), 1, "a v4 client cannot go into a tcp6 rule");
        assert_eq!(r[0].flow_type, FlowType::Tcp6);
        let t6 = FlowTarget { client: None, ..t6 };
        assert_eq!(flow_rules_for(&t6, 3).len(), 1);
    }

    use crate::nic::FlowType;

    fn target(client: Option<&str>) -> FlowTarget {
        FlowTarget {
            server: "192.0.2.1".parse().unwrap(),
            client: client.map(|c| c.parse().unwrap()),
            port: 5201,
        }
    }

    fn req(start: u32, num: u32, flows: u32, client: Option<&str>) -> SteerRequest {
        SteerRequest {
            start_queue: start,
            num_queues: num,
            flows,
            target: target(client),
        }
    }

    /// (has a source, queue) of each candidate rule.
    fn shapes(p: &SteerPlan) -> Vec<(bool, u32)> {
        p.rules.iter().map(|r| (r.src.is_some(), r.queue)).collect()
    }

    const NO: &str = "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) on eth0: EOPNOTSUPP";

    #[test]
    fn one_queue_is_todays_single_rule() {
        for contexts in [
            ContextSupport::Available,
            ContextSupport::Unavailable(NO.into()),
        ] {
            let p = plan_steering(&req(7, 1, 1, Some("192.0.2.2")), &contexts).unwrap();
            assert_eq!(p.destination, Destination::Queue(7));
            assert_eq!(
                shapes(&p),
                vec![(true, 7), (false, 7)],
                "5-tuple, then 3-tuple"
            );
            assert_eq!(p.shared_queue, None, "nothing is lost with one queue");
            let p = plan_steering(&req(7, 1, 1, None), &contexts).unwrap();
            assert_eq!(shapes(&p), vec![(false, 7)]);
            // Several flows on one queue: only the 3-tuple rule matches them all.
            let p = plan_steering(&req(7, 1, 4, Some("192.0.2.2")), &contexts).unwrap();
            assert_eq!(shapes(&p), vec![(false, 7)]);
        }
    }

    #[test]
    fn several_queues_get_a_context_over_exactly_them() {
        let span = QueueSpan { start: 4, count: 4 };
        let avail = ContextSupport::Available;
        let p = plan_steering(&req(4, 4, 1, Some("192.0.2.2")), &avail).unwrap();
        assert_eq!(p.destination, Destination::Context(span));
        assert_eq!(shapes(&p), vec![(true, 0), (false, 0)], "offset 0");
        assert_eq!(p.rules[0].flow_type, FlowType::Tcp4);
        assert_eq!(p.rules[1].dst, ("192.0.2.1".parse().unwrap(), 5201));
        let p = plan_steering(&req(4, 4, 4, Some("192.0.2.2")), &avail).unwrap();
        assert_eq!(p.destination, Destination::Context(span));
        assert_eq!(shapes(&p), vec![(false, 0)], "server address and port");
        assert_eq!(p.shared_queue, None);
        assert_eq!(
            span_table(8, span).indir,
            vec![4, 5, 6, 7, 4, 5, 6, 7],
            "the context's table spans 4..8 and nothing else"
        );
    }

    #[test]
    fn without_contexts_the_flows_share_the_start_queue_and_say_why() {
        let no = ContextSupport::Unavailable(NO.into());
        let p = plan_steering(&req(2, 3, 4, Some("192.0.2.2")), &no).unwrap();
        assert_eq!(p.destination, Destination::Queue(2));
        assert_eq!(shapes(&p), vec![(false, 2)]);
        assert_eq!(
            p.shared_queue.as_deref(),
            Some(
                "the driver has no additional RSS contexts, so the 4 flows share queue 2 \
                 instead of spreading over queues 2..5 (kernel: ioctl(SIOCETHTOOL, \
                 ETHTOOL_GRSSH) on eth0: EOPNOTSUPP)"
            )
        );
        let p = plan_steering(&req(2, 3, 1, Some("192.0.2.2")), &no).unwrap();
        assert_eq!(shapes(&p), vec![(true, 2), (false, 2)]);
        let note = p.shared_queue.unwrap();
        assert!(
            note.contains("so the flow goes to queue 2 instead"),
            "{note}"
        );
    }

    #[test]
    fn nonsense_requests_are_usage_errors() {
        let a = ContextSupport::Available;
        for r in [
            req(1, 0, 1, None),
            req(1, 1, 0, None),
            req(u32::MAX, 2, 1, None),
        ] {
            let e = plan_steering(&r, &a).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::EXIT_USAGE, "{r:?}: {e}");
        }
    }
}
