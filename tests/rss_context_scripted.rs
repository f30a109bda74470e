//! Scripted-NIC tests of the RSS-context steering (`ncdevmem::nic::steer`): the scripted NIC's
//! answers to the RSS-context and `FLOW_RSS` operations (the ethtool core's refusals, from
//! net/ethtool/ioctl.c and common.c, as `docs/kernel-interface.md#rss-contexts` lists them),
//! the plan applied and undone in order (rule, then context) with a failure injected at every
//! step, a stop signal during the steering, a panic, and `--verify-restore` seeing a context
//! left behind.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicI32;

use ncdevmem::error::{Error, EXIT_FAIL};
use ncdevmem::nic::guards::{equal_table, span_table, NtupleFeatureGuard, SharedNic};
use ncdevmem::nic::scripted::{Op, ScriptedNic};
use ncdevmem::nic::setup::FlowTarget;
use ncdevmem::nic::snapshot::{verify_restored, Fact, NicSnapshot};
use ncdevmem::nic::steer::{
    apply_steering, plan_steering, rss_context_support, ContextSupport, Destination, SteerPlan,
    SteerRequest, Steering,
};
use ncdevmem::nic::{ChannelsSet, FlowRule, FlowType, NicOps, QueueSpan, RssTable};

/// A stop flag no test sets.
static NEVER_STOPPED: AtomicI32 = AtomicI32::new(0);

fn shared(nic: &ScriptedNic) -> SharedNic {
    SharedNic::new(Box::new(nic.clone())).stop_flag(&NEVER_STOPPED)
}

/// An 8-queue NIC with the ntuple feature on (NicSetup's job, done beforehand).
fn nic8() -> ScriptedNic {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| s.ntuple = Some(true));
    nic
}

fn errno<T: std::fmt::Debug>(r: ncdevmem::Result<T>) -> i32 {
    match r {
        Err(e) => e.errno().unwrap_or_else(|| panic!("no errno: {e}")),
        Ok(v) => panic!("expected a refusal, got {v:?}"),
    }
}

fn rule3(queue: u32) -> FlowRule {
    FlowRule {
        flow_type: FlowType::Tcp4,
        src: None,
        dst: ("192.0.2.1".parse().unwrap(), 5201),
        queue,
    }
}

const SPAN: QueueSpan = QueueSpan { start: 4, count: 4 };

/// `-t 4 -q 4 --flows F` (with `-c` 192.0.2.2).
fn request(flows: u32) -> SteerRequest {
    SteerRequest {
        start_queue: 4,
        num_queues: 4,
        flows,
        target: FlowTarget {
            server: "192.0.2.1".parse().unwrap(),
            client: Some("192.0.2.2".parse().unwrap()),
            port: 5201,
        },
    }
}

fn context_plan(flows: u32) -> SteerPlan {
    plan_steering(&request(flows), &ContextSupport::Available).unwrap()
}

/// The change journal as `(op, args, failed)`.
fn changes(nic: &ScriptedNic) -> Vec<(Op, String, bool)> {
    nic.changes()
        .into_iter()
        .map(|c| (c.op, c.args, c.errno.is_some()))
        .collect()
}

fn ch(op: Op, args: &str, failed: bool) -> (Op, String, bool) {
    (op, args.to_string(), failed)
}

const CREATE: &str = "new start 4 equal 4";
const RULE_TO_CTX: &str = "tcp4 dst 192.0.2.1:5201 -> RSS context 1";

#[test]
fn the_scripted_nic_answers_context_calls_as_the_ethtool_core() {
    let nic = nic8();
    let mut n = nic.clone();
    let span = span_table(128, SPAN);
    // No context yet: reading or deleting one is ENOENT.
    assert_eq!(errno(n.rss_context_get(1)), libc::ENOENT);
    assert_eq!(errno(n.rss_context_delete(1)), libc::ENOENT);
    assert_eq!(n.rss_contexts().unwrap(), Vec::<u32>::new());
    // A table of the wrong size, or naming a queue past the 8 RX queues: EINVAL.
    assert_eq!(
        errno(n.rss_context_create(&equal_table(64, 8))),
        libc::EINVAL
    );
    assert_eq!(
        errno(n.rss_context_create(&span_table(128, QueueSpan { start: 6, count: 4 }))),
        libc::EINVAL
    );
    // Ids from 1, lowest free.
    assert_eq!(n.rss_context_create(&span).unwrap(), 1);
    assert_eq!(n.rss_context_create(&equal_table(128, 2)).unwrap(), 2);
    assert_eq!(n.rss_context_get(1).unwrap(), span);
    assert_eq!(n.rss_contexts().unwrap(), vec![1, 2]);
    // FLOW_RSS rules: the context must exist and the offset be 0 (the core's checks).
    assert_eq!(errno(n.flow_rule_insert_rss(&rule3(0), 9)), libc::EINVAL);
    assert_eq!(errno(n.flow_rule_insert_rss(&rule3(1), 1)), libc::EINVAL);
    let loc = n.flow_rule_insert_rss(&rule3(0), 1).unwrap();
    assert_eq!(nic.state().rule_contexts.get(&loc), Some(&1));
    // A context a rule names cannot go (EBUSY); its neighbour can, and its id is reused.
    assert_eq!(errno(n.rss_context_delete(1)), libc::EBUSY);
    n.rss_context_delete(2).unwrap();
    assert_eq!(n.rss_context_create(&equal_table(128, 3)).unwrap(), 2);
    // Channels below the highest queue of any context's table (7): EINVAL, with the text the
    // default table's check gives; 8 (no change) is fine.
    let combined = |c| ChannelsSet {
        combined: Some(c),
        ..Default::default()
    };
    let e = n.channels_set(combined(7)).unwrap_err().to_string();
    assert!(
        e.contains("requested channel counts are too low for existing indirection table (7)"),
        "{e}"
    );
    // Ids 1..7 with the software NIC's limit of 8: the eighth create is EBUSY.
    for want in 3..8 {
        assert_eq!(n.rss_context_create(&span).unwrap(), want);
    }
    assert_eq!(errno(n.rss_context_create(&span)), libc::EBUSY);
    // The rule's delete frees the context; turning ntuple off flushes the rules, not the
    // contexts.
    n.flow_rule_delete(loc).unwrap();
    assert!(nic.state().rule_contexts.is_empty());
    n.rss_context_delete(1).unwrap();
    n.flow_rule_insert_rss(&rule3(0), 2).unwrap();
    n.ntuple_set(false).unwrap();
    let st = nic.state();
    assert!(st.rules.is_empty() && st.rule_contexts.is_empty());
    assert_eq!(
        st.rss_contexts.keys().copied().collect::<Vec<_>>(),
        (2..8).collect::<Vec<_>>()
    );
    n.rss_context_delete(2).unwrap();
}

#[test]
fn drivers_without_contexts_refuse_every_context_call() {
    // The software NIC's RSS, but no create_rxfh_context: EOPNOTSUPP from the core.
    let plain = nic8();
    plain.edit(|s| s.rss_context_limit = None);
    // veth: no RSS at all (and no ntuple rules).
    let veth = ScriptedNic::veth("veth0");
    for nic in [plain, veth] {
        let mut n = nic.clone();
        let before = nic.state();
        assert_eq!(errno(n.rss_context_get(1)), libc::EOPNOTSUPP);
        assert_eq!(
            errno(n.rss_context_create(&equal_table(128, 2))),
            libc::EOPNOTSUPP
        );
        assert_eq!(errno(n.rss_context_delete(1)), libc::EOPNOTSUPP);
        assert_ne!(errno(n.flow_rule_insert_rss(&rule3(0), 1)), 0);
        assert_eq!(
            n.rss_contexts().unwrap(),
            Vec::<u32>::new(),
            "the dump lists none"
        );
        let e = n.rss_context_get(1).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) on {}: EOPNOTSUPP (Operation not supported)",
                n.ifname()
            )
        );
        assert_eq!(
            rss_context_support(&mut n).unwrap(),
            ContextSupport::Unavailable(e)
        );
        assert_eq!(nic.state(), before, "refusals change nothing");
    }
    let mut good = nic8();
    assert_eq!(
        rss_context_support(&mut good).unwrap(),
        ContextSupport::Available,
        "ENOENT for context 1 means the driver has contexts"
    );
    // Context 0 is never deleted: that request would reset the default table.
    let e = good.rss_context_delete(0).unwrap_err();
    assert_eq!(e.errno(), None, "{e}");
}

#[test]
fn steering_over_a_context_is_undone_rule_first() {
    let nic = nic8();
    let before = nic.state();
    let s = shared(&nic);
    let steering = apply_steering(&s, &context_plan(4), true).expect("steer");
    assert_eq!(steering.context().map(|c| c.id()), Some(1));
    assert_eq!(steering.rule().describe(), RULE_TO_CTX);
    assert_eq!(steering.rule().context(), Some(1));
    assert_eq!(steering.shared_queue(), None);
    let st = nic.state();
    assert_eq!(st.rss_contexts.get(&1), Some(&span_table(128, SPAN).indir));
    assert_eq!(st.rule_contexts.get(&0), Some(&1));
    assert_eq!(
        steering.context().unwrap().fix_command(),
        "ethtool -X eth0 context 1 delete"
    );
    steering.restore().expect("restore");
    assert_eq!(
        changes(&nic),
        vec![
            ch(Op::RssContextCreate, CREATE, false),
            ch(Op::FlowRuleInsertRss, RULE_TO_CTX, false),
            ch(Op::FlowRuleDelete, "loc 0", false),
            ch(Op::RssContextDelete, "context 1", false),
        ]
    );
    assert_eq!(nic.state(), before);

    // One flow with -c: the 5-tuple rule to the context.
    let steering = apply_steering(&s, &context_plan(1), true).unwrap();
    assert_eq!(
        steering.rule().describe(),
        "tcp4 src 192.0.2.2:5201 dst 192.0.2.1:5201 -> RSS context 1"
    );
    drop(steering);
    assert_eq!(nic.state(), before, "Drop undoes too");
}

/// A failure injected into each call of the steering unwinds exactly what was done: nothing
/// is left on the NIC, and the error is the kernel's answer, unchanged.
#[test]
fn a_failure_at_each_steering_step_leaves_the_nic_as_it_was() {
    // (op, call number, errno, the changes made, in order)
    type Case = (Op, u64, i32, Vec<(Op, &'static str, bool)>);
    let cases: Vec<Case> = vec![
        (Op::RssGet, 1, libc::EIO, vec![]),
        (
            Op::RssContextCreate,
            1,
            libc::EBUSY,
            vec![(Op::RssContextCreate, CREATE, true)],
        ),
        (
            Op::FlowRules,
            1,
            libc::EIO,
            vec![
                (Op::RssContextCreate, CREATE, false),
                (Op::RssContextDelete, "context 1", false),
            ],
        ),
        (
            Op::FlowRuleInsertRss,
            1,
            libc::EINVAL,
            vec![
                (Op::RssContextCreate, CREATE, false),
                (Op::FlowRuleInsertRss, RULE_TO_CTX, true),
                (Op::RssContextDelete, "context 1", false),
            ],
        ),
    ];
    for (op, n, err, want) in cases {
        let nic = nic8();
        let before = nic.state();
        nic.fail_call(op, n, err);
        let e = apply_steering(&shared(&nic), &context_plan(4), true).unwrap_err();
        assert_eq!(e.errno(), Some(err), "{op:?}: {e}");
        let want: Vec<_> = want.into_iter().map(|(o, a, f)| ch(o, a, f)).collect();
        assert_eq!(changes(&nic), want, "{op:?}");
        assert_eq!(nic.state(), before, "{op:?}");
    }

    // One flow with -c: a refused 5-tuple rule falls back to the 3-tuple one, to the same
    // context.
    let nic = nic8();
    nic.fail_call(Op::FlowRuleInsertRss, 1, libc::EINVAL);
    let steering = apply_steering(&shared(&nic), &context_plan(1), true).unwrap();
    assert_eq!(steering.rule().describe(), RULE_TO_CTX);
    steering.restore().unwrap();
    assert!(nic.state().rss_contexts.is_empty());
}

/// The undo's own failures name what was left and the command that fixes it.
#[test]
fn undo_failures_name_the_fix_commands() {
    // The rule's delete fails: the context's delete then fails too (EBUSY, the rule still
    // names it), and both are reported.
    let nic = nic8();
    let steering = apply_steering(&shared(&nic), &context_plan(4), true).unwrap();
    nic.fail_call(Op::FlowRuleDelete, 1, libc::EIO);
    let e = steering.restore().unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "could not delete our ntuple rule 0 ({RULE_TO_CTX}) on eth0"
        )),
        "{e}"
    );
    assert!(e.contains("run `ethtool -N eth0 delete 0`"), "{e}");
    assert!(
        e.contains(
            "could not delete our RSS context 1 (128 entries spread over queues 4..8) on eth0: \
             ioctl(SIOCETHTOOL, ETHTOOL_SRSSH) on eth0: EBUSY"
        ),
        "{e}"
    );
    assert!(e.contains("run `ethtool -X eth0 context 1 delete`"), "{e}");

    // Only the context's delete fails: the rule is gone, the context named.
    let nic = nic8();
    let steering = apply_steering(&shared(&nic), &context_plan(4), true).unwrap();
    nic.fail_call(Op::RssContextDelete, 1, libc::EIO);
    let e = steering.restore().unwrap_err().to_string();
    assert!(e.starts_with("could not delete our RSS context 1"), "{e}");
    let st = nic.state();
    assert!(st.rules.is_empty() && st.rss_contexts.contains_key(&1));
}

#[test]
fn a_signal_during_the_steering_stops_and_unwinds() {
    // (the call during which the signal arrives, the changes made by then and undone: a step
    // that had begun is finished)
    for (op, made) in [
        (Op::RssGet, 0),
        (Op::RssContextCreate, 1),
        (Op::FlowRules, 2),
        (Op::FlowRuleInsertRss, 2),
    ] {
        let nic = nic8();
        let before = nic.state();
        let stop: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        nic.signal_after(op, 1, stop, libc::SIGTERM);
        let s = SharedNic::new(Box::new(nic.clone())).stop_flag(stop);
        let e = apply_steering(&s, &context_plan(4), true).unwrap_err();
        assert!(
            matches!(e, Error::Interrupted(libc::SIGTERM)),
            "{op:?}: {e}"
        );
        assert_eq!(e.exit_code(), EXIT_FAIL);
        let c = changes(&nic);
        assert_eq!(c.len(), 2 * made, "{op:?}: {c:?}");
        assert_eq!(nic.state(), before, "{op:?}");
    }
}

#[test]
fn a_panic_unwinds_the_rule_then_the_context() {
    let nic = nic8();
    let before = nic.state();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _steering: Steering = apply_steering(&shared(&nic), &context_plan(4), true).unwrap();
        panic!("receive loop bug");
    }));
    assert!(r.is_err());
    let c = changes(&nic);
    assert_eq!(
        c[2..],
        [
            ch(Op::FlowRuleDelete, "loc 0", false),
            ch(Op::RssContextDelete, "context 1", false)
        ]
    );
    assert_eq!(nic.state(), before);
}

/// A driver without additional contexts: the flows share the start queue through one rule,
/// and the note says so with the kernel's answer.
#[test]
fn without_contexts_one_rule_to_the_start_queue() {
    let nic = nic8();
    nic.edit(|s| s.rss_context_limit = None);
    let before = nic.state();
    let s = shared(&nic);
    let support = s.with(rss_context_support).unwrap();
    let plan = plan_steering(&request(4), &support).unwrap();
    assert_eq!(plan.destination, Destination::Queue(4));
    let steering = apply_steering(&s, &plan, true).unwrap();
    assert!(steering.context().is_none());
    assert_eq!(
        steering.rule().describe(),
        "tcp4 dst 192.0.2.1:5201 -> queue 4"
    );
    let note = steering.shared_queue().unwrap().to_string();
    assert!(
        note.starts_with(
            "the driver has no additional RSS contexts, so the 4 flows share queue 4 instead \
             of spreading over queues 4..8 (kernel: ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) on eth0: \
             EOPNOTSUPP"
        ),
        "{note}"
    );
    steering.restore().unwrap();
    assert_eq!(nic.state(), before);
}

/// The whole multi-queue NIC part in the order the setup runs it, the ntuple feature around
/// the steering: everything undone leaves the snapshot (contexts included) unchanged; a
/// context left behind is a difference.
#[test]
fn verify_restore_compares_contexts() {
    let nic = ScriptedNic::good("eth0", 8);
    let s = shared(&nic);
    let before = s.with(|n| Ok(NicSnapshot::take(n))).unwrap();
    assert_eq!(before.contexts, Fact::Known(Default::default()));
    {
        let ntuple = NtupleFeatureGuard::enable(&s).unwrap();
        let steering = apply_steering(&s, &context_plan(4), true).unwrap();
        steering.restore().unwrap();
        ntuple.restore().unwrap();
    }
    verify_restored(&s, &before).expect("restored, contexts included");

    s.with(|n| n.rss_context_create(&span_table(128, SPAN)))
        .unwrap();
    let e = verify_restored(&s, &before).unwrap_err().to_string();
    assert!(
        e.contains("RSS contexts: added 1 (128 entries spread over queues 4..8)"),
        "{e}"
    );
    let mut n = nic.clone();
    let after = NicSnapshot::take(&mut n);
    n.rss_context_delete(1).unwrap();
    n.rss_context_create(&RssTable {
        indir: vec![4; 128],
    })
    .unwrap();
    let d = after.diff(&NicSnapshot::take(&mut n));
    assert_eq!(
        d,
        vec![
            "RSS contexts: context 1's table changed (was 128 entries spread over queues 4..8, \
             now 128 entries spread over queues 4..5)"
                .to_string()
        ]
    );
}
