//! Scripted-NIC tests of the NIC policy: the server setup and its undo (failure injected at
//! every step, signals in the receive loop, a panic), the careful header-split restore, the
//! queue wait after an unbind, `--verify-restore`, probe mode's verdicts and the capability
//! report — all against `ncdevmem::nic::scripted::ScriptedNic`, which keeps the kernel's
//! contracts (`docs/kernel-interface.md#bind-rx-and-bind-tx`, `#ethtool-netlink`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use ncdevmem::error::{Error, EXIT_FAIL, EXIT_SKIP};
use ncdevmem::netlink::ctrl::{PolicyAttr, NL_ATTR_TYPE_U32, NL_ATTR_TYPE_U8};
use ncdevmem::netlink::ethtool::TcpDataSplit;
use ncdevmem::netlink::netdev::{BindRxRequest, QueueNest};
use ncdevmem::nic::guards::{equal_table, HdsGuard, SharedNic};
use ncdevmem::nic::probe::{run_probe, ProbeOutcome, ProbeParams, Status};
use ncdevmem::nic::queues::{choose_queues, QueueOwner, QueuePolicy};
use ncdevmem::nic::report::{CapState, HostCaps, NicReport};
use ncdevmem::nic::scripted::{Op, Quirks, ScriptedNic};
use ncdevmem::nic::setup::{run_with_setup, FlowTarget, ServerPlan};
use ncdevmem::nic::snapshot::{verify_restored, Fact, NicSnapshot};
use ncdevmem::nic::{ChannelsSet, NicOps};
use ncdevmem::rx::testing::{PatternStream, ScriptedSocket, Step, VecMemory};
use ncdevmem::rx::{receive, RecvOutcome, RxConfig, RxSocket};
use ncdevmem::sys::uapi::dmabuf_token;
use ncdevmem::udmabuf::HugepageStatus;

const WAIT: Duration = Duration::from_millis(300);

/// A stop flag no test sets: `real_sigint_and_sigterm_unwind` raises real signals into the
/// process-wide `signals::STOP`, which would stop whatever other test runs beside it.
static NEVER_STOPPED: AtomicI32 = AtomicI32::new(0);

fn shared(nic: &ScriptedNic) -> SharedNic {
    SharedNic::new(Box::new(nic.clone())).stop_flag(&NEVER_STOPPED)
}

/// Server on queue 7 of 8, IPv4 with a client address (so the 5-tuple rule comes first).
fn plan() -> ServerPlan {
    ServerPlan {
        start_queue: 7,
        num_queues: 1,
        flow: FlowTarget {
            server: "192.0.2.1".parse().unwrap(),
            client: Some("192.0.2.2".parse().unwrap()),
            port: 5201,
        },
        flows: 1,
        skip_nic_config: false,
    }
}

fn bind_req(queues: &[u32]) -> BindRxRequest {
    BindRxRequest {
        ifindex: 4,
        ifname: Some("eth0".into()),
        fd: Some(3),
        queues: queues.iter().map(|&q| QueueNest::rx(q)).collect(),
        rx_page_size: None,
        autorelease: None,
    }
}

fn run_server(
    nic: &ScriptedNic,
    body: impl FnOnce(u32) -> ncdevmem::Result<()>,
) -> ncdevmem::Result<()> {
    run_with_setup(&shared(nic), &plan(), &bind_req(&[7]), true, WAIT, body)
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

const RULE5: &str = "tcp4 src 192.0.2.2:5201 dst 192.0.2.1:5201 -> queue 7";
const RULE3: &str = "tcp4 dst 192.0.2.1:5201 -> queue 7";
const BIND: &str = "eth0 (ifindex 4), queue 7";

/// A journal entry to expect: operation and arguments.
type Change = (Op, &'static str);

/// The five setup changes, in order, and the change that undoes each.
fn steps() -> Vec<(Change, Change)> {
    vec![
        (
            (Op::HdsSet, "enabled hds-thresh=0"),
            (Op::HdsSet, "unknown hds-thresh=128"),
        ),
        // The table was the driver default: restored by a reset, not by writing it.
        ((Op::RssSet, "equal 7"), (Op::RssReset, "default")),
        ((Op::NtupleSet, "on"), (Op::NtupleSet, "off")),
        ((Op::FlowRuleInsert, RULE5), (Op::FlowRuleDelete, "loc 0")),
        ((Op::BindRx, BIND), (Op::Unbind, "id 1")),
    ]
}

/// The journal of a run where steps `0..done` succeeded: applies in order, then `extra`
/// (the failed calls), then the undos in reverse order.
fn expected(done: usize, extra: &[(Op, &str)]) -> Vec<(Op, String, bool)> {
    let s = steps();
    let mut v: Vec<_> = s[..done].iter().map(|(a, _)| ch(a.0, a.1, false)).collect();
    v.extend(extra.iter().map(|(op, a)| ch(*op, a, true)));
    v.extend(s[..done].iter().rev().map(|(_, u)| ch(u.0, u.1, false)));
    v
}

#[test]
fn a_clean_run_undoes_every_step_in_reverse_order() {
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    let mut seen = None;
    run_server(&nic, |id| {
        seen = Some(id);
        // Everything is in place while the body runs.
        let s = nic.state();
        assert_eq!(s.bound.get(&7), Some(&id));
        assert_eq!(s.hds.as_ref().unwrap().configured, TcpDataSplit::Enabled);
        assert_eq!(s.rules.len(), 1);
        Ok(())
    })
    .expect("run");
    assert_eq!(seen, Some(1));
    assert_eq!(changes(&nic), expected(5, &[]));
    assert_eq!(nic.state(), before);
}

/// A failure injected at each setup step (reads and changes) unwinds exactly the steps done,
/// in reverse order, and leaves the NIC as it was. EOPNOTSUPP makes the run a skip naming
/// what the driver lacks; other errnos fail it.
#[test]
fn a_failure_at_each_setup_step_unwinds_exactly_the_steps_done() {
    // (op, call number, errno, steps done before, failed changes, message part)
    type Case = (Op, u64, i32, usize, Vec<Change>, &'static str);
    let cases: Vec<Case> = vec![
        (
            Op::HdsGet,
            1,
            libc::EOPNOTSUPP,
            0,
            vec![],
            "driver does not support header split",
        ),
        (
            Op::HdsSet,
            1,
            libc::EOPNOTSUPP,
            0,
            vec![(Op::HdsSet, "enabled hds-thresh=0")],
            "driver does not support header split",
        ),
        (
            Op::RssGet,
            1,
            libc::EOPNOTSUPP,
            1,
            vec![],
            "driver does not support the RSS indirection table",
        ),
        (
            Op::RssSet,
            1,
            libc::EIO,
            1,
            vec![(Op::RssSet, "equal 7")],
            "ETHTOOL_SRSSH",
        ),
        (
            Op::NtupleGet,
            1,
            libc::EOPNOTSUPP,
            2,
            vec![],
            "driver does not support ntuple filters",
        ),
        (
            Op::NtupleSet,
            1,
            libc::EIO,
            2,
            vec![(Op::NtupleSet, "on")],
            "ETHTOOL_SFEATURES",
        ),
        (
            Op::BindRx,
            1,
            libc::EOPNOTSUPP,
            4,
            vec![(Op::BindRx, BIND)],
            "device does not support devmem RX",
        ),
        (
            Op::BindRx,
            1,
            libc::ENOMEM,
            4,
            vec![(Op::BindRx, BIND)],
            "ENOMEM",
        ),
    ];
    for (op, n, errno, done, failed, msg) in cases {
        let nic = ScriptedNic::good("eth0", 8);
        let before = nic.state();
        nic.fail_call(op, n, errno);
        let e = run_server(&nic, |_| panic!("the body must not run")).unwrap_err();
        let want_exit = if errno == libc::EOPNOTSUPP {
            EXIT_SKIP
        } else {
            EXIT_FAIL
        };
        assert_eq!(e.exit_code(), want_exit, "{op:?}: {e}");
        assert!(e.to_string().contains(msg), "{op:?}: {e}");
        assert_eq!(changes(&nic), expected(done, &failed), "{op:?}");
        assert_eq!(nic.state(), before, "{op:?}");
    }

    // Both flow rules refused: 5-tuple, then 3-tuple.
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    nic.fail_call(Op::FlowRuleInsert, 1, libc::EINVAL);
    nic.fail_call(Op::FlowRuleInsert, 2, libc::EOPNOTSUPP);
    let e = run_server(&nic, |_| Ok(())).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP, "{e}");
    assert!(
        e.to_string()
            .contains("driver does not support ntuple flow steering"),
        "{e}"
    );
    assert_eq!(
        changes(&nic),
        expected(
            3,
            &[(Op::FlowRuleInsert, RULE5), (Op::FlowRuleInsert, RULE3)]
        )
    );
    assert_eq!(nic.state(), before);

    // The body fails (e.g. a validation error): everything is undone, the body's error wins.
    let nic = ScriptedNic::good("eth0", 8);
    let e = run_server(&nic, |_| Err(Error::Failure("validation failed".into()))).unwrap_err();
    assert_eq!(e.to_string(), "validation failed");
    assert_eq!(changes(&nic), expected(5, &[]));
    assert_eq!(nic.state(), before);
}

/// A driver that refuses 5-tuple rules gets the 3-tuple one, and only our rule is deleted:
/// someone else's rule at location 0 stays, the ntuple feature (already on) is not touched.
#[test]
fn three_tuple_fallback_and_only_our_rule_is_deleted() {
    let nic = ScriptedNic::good("eth0", 8).with_foreign_rule(0);
    nic.set_quirks(Quirks {
        no_5tuple_rules: true,
        ..Quirks::default()
    });
    let before = nic.state();
    run_server(&nic, |_| Ok(())).expect("run");
    assert_eq!(
        changes(&nic),
        vec![
            ch(Op::HdsSet, "enabled hds-thresh=0", false),
            ch(Op::RssSet, "equal 7", false),
            ch(Op::FlowRuleInsert, RULE5, true),
            ch(Op::FlowRuleInsert, RULE3, false),
            ch(Op::BindRx, BIND, false),
            ch(Op::Unbind, "id 1", false),
            ch(Op::FlowRuleDelete, "loc 1", false),
            ch(Op::RssReset, "default", false),
            ch(Op::HdsSet, "unknown hds-thresh=128", false),
        ]
    );
    assert_eq!(nic.state(), before);
}

/// On a veth-like driver (no ring parameters, no RSS table, ntuple not changeable) the run is
/// a skip naming what the driver lacks, and nothing was changed.
#[test]
fn veth_like_driver_is_a_skip_that_changes_nothing() {
    let veth = ScriptedNic::veth("va");
    let mut view = veth.clone();
    let snap = NicSnapshot::take(&mut view);
    let p = ServerPlan {
        start_queue: 1,
        ..plan()
    };
    let e =
        run_with_setup(&shared(&veth), &p, &bind_req(&[1]), true, WAIT, |_| Ok(())).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP);
    assert_eq!(
        e.to_string(),
        "skip: va: driver does not support header split (tcp-data-split): ethtool rings-get on \
         va (ifindex 2): EOPNOTSUPP (Operation not supported)"
    );
    assert!(changes(&veth).is_empty(), "{:?}", changes(&veth));
    assert!(snap.diff(&NicSnapshot::take(&mut view)).is_empty());

    // With header split and RSS but a fixed ntuple feature: header split and RSS are undone.
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| s.ntuple_fixed = true);
    let before = nic.state();
    let e = run_server(&nic, |_| Ok(())).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("skip: eth0: driver does not support ntuple filters"),
        "{e}"
    );
    assert_eq!(changes(&nic), expected(2, &[(Op::NtupleSet, "on")]));
    assert_eq!(nic.state(), before);
}

/// `-n`: nothing but the binding.
#[test]
fn skip_nic_config_binds_only() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| {
        let h = s.hds.as_mut().unwrap();
        h.configured = TcpDataSplit::Enabled;
        h.thresh = Some(0);
    });
    let p = ServerPlan {
        flows: 1,
        skip_nic_config: true,
        ..plan()
    };
    run_with_setup(&shared(&nic), &p, &bind_req(&[7]), true, WAIT, |_| Ok(())).expect("run");
    assert_eq!(
        changes(&nic),
        vec![ch(Op::BindRx, BIND, false), ch(Op::Unbind, "id 1", false)]
    );
}

/// Wraps a scripted socket and raises a stop after `after` recvmsg calls: either by storing
/// into a stop flag, or by sending the process a real signal (whose handler stores it).
struct StopAfter<'a> {
    inner: ScriptedSocket,
    calls: u32,
    after: u32,
    stop: Stop<'a>,
}

enum Stop<'a> {
    Flag(&'a AtomicI32, i32),
    Signal(nix::sys::signal::Signal),
}

impl RxSocket for StopAfter<'_> {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        let r = self.inner.recvmsg(data, control, devmem);
        self.calls += 1;
        if self.calls == self.after {
            match &self.stop {
                Stop::Flag(flag, sig) => flag.store(*sig, Ordering::SeqCst),
                Stop::Signal(sig) => nix::sys::signal::raise(*sig).expect("raise"),
            }
        }
        r
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.inner.dontneed(tokens)
    }

    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.inner.wait_readable(timeout)
    }
}

/// Runs the server with a devmem receive loop whose socket delivers 16 KiB of the `-v 7`
/// pattern, then stops (`stop`), with more data queued that is never read.
fn receive_until_stopped(
    nic: &ScriptedNic,
    stop: Stop<'_>,
    flag: &AtomicI32,
) -> ncdevmem::Result<()> {
    run_server(nic, |id| {
        let mut mem = VecMemory::new(1 << 20);
        let mut s = PatternStream::new(7);
        let first: Vec<_> = (0..4)
            .map(|i| s.dmabuf(&mut mem, i * 4096, 4096, id))
            .collect();
        let more: Vec<_> = (4..8)
            .map(|i| s.dmabuf(&mut mem, i * 4096, 4096, id))
            .collect();
        let mut sock = StopAfter {
            inner: ScriptedSocket::new(vec![
                Step::Data(first),
                Step::Idle,
                Step::Data(more),
                Step::Eof,
            ]),
            calls: 0,
            after: 1,
            stop,
        };
        let cfg = RxConfig {
            validate: Some(ncdevmem::validate::StreamSpec::Periodic(7)),
            poll_tick: Duration::from_millis(5),
            ..RxConfig::devmem(id, 4096)
        };
        receive(&mut sock, Some(&mem), &cfg, flag, &mut std::io::sink()).map(|_| ())
    })
}

/// A stop flag set mid-run (what the SIGINT/SIGTERM handler does) ends the receive loop with
/// `Error::Interrupted`, and every NIC change is undone.
#[test]
fn stop_flag_in_the_receive_loop_unwinds() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let nic = ScriptedNic::good("eth0", 8);
        let mut probe_view = nic.clone();
        let snap = NicSnapshot::take(&mut probe_view);
        let before = nic.state();
        let flag = AtomicI32::new(0);
        let e = receive_until_stopped(&nic, Stop::Flag(&flag, sig), &flag).unwrap_err();
        assert!(matches!(e, Error::Interrupted(s) if s == sig), "{e}");
        assert_eq!(e.exit_code(), EXIT_FAIL);
        assert_eq!(nic.state(), before);
        assert!(snap.diff(&NicSnapshot::take(&mut probe_view)).is_empty());
        assert_eq!(changes(&nic), expected(5, &[]));
    }
}

/// Real SIGINT, SIGTERM and SIGHUP through the tool's handlers (`ncdevmem::signals`): the
/// handler records the signal in `signals::STOP`, the loop returns `Error::Interrupted`, the
/// NIC is restored. (The only test in this binary that touches process signal state.)
///
/// A SIGHUP ignored when the process started (`nohup`) stays ignored; the test sets both
/// dispositions itself, since it ran under whatever its parent left (under `nohup` the raised
/// SIGHUP was ignored and the receive loop ended without interruption: that failure was the
/// environment's, not the handler's).
#[test]
fn real_sigint_and_sigterm_unwind() {
    use ncdevmem::signals::{self, STOP};
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let set_sighup = |h: SigHandler| {
        let act = SigAction::new(h, SaFlags::empty(), SigSet::empty());
        // SAFETY: SIG_IGN and SIG_DFL run no code of this process.
        unsafe { sigaction(Signal::SIGHUP, &act) }.expect("sigaction(SIGHUP)")
    };
    set_sighup(SigHandler::SigIgn);
    signals::install().expect("install handlers");
    assert!(
        matches!(set_sighup(SigHandler::SigDfl).handler(), SigHandler::SigIgn),
        "an inherited SIG_IGN for SIGHUP is kept"
    );
    signals::install().expect("install handlers");
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        STOP.store(0, Ordering::SeqCst);
        let nic = ScriptedNic::good("eth0", 8);
        let before = nic.state();
        let e = receive_until_stopped(&nic, Stop::Signal(sig), &STOP).unwrap_err();
        assert!(matches!(e, Error::Interrupted(s) if s == sig as i32), "{e}");
        assert_eq!(nic.state(), before, "{sig}");
    }
    // A duplicate SIGTERM or SIGHUP (GNU timeout signals the child, then its process group)
    // is not a second Ctrl-C: the process stays alive to finish its unwind, and STOP keeps
    // the first signal. (Before, the second copy _exit()ed at once, NIC changes and all.)
    for sig in [Signal::SIGTERM, Signal::SIGHUP] {
        STOP.store(0, Ordering::SeqCst);
        nix::sys::signal::raise(sig).expect("raise");
        nix::sys::signal::raise(sig).expect("raise again");
        nix::sys::signal::raise(Signal::SIGINT).expect("raise SIGINT at once");
        assert_eq!(STOP.load(Ordering::SeqCst), sig as i32);
    }
    STOP.store(0, Ordering::SeqCst);
}

/// A panic in the receive loop unwinds through the setup's `Drop`: unbind first, then every
/// guard in reverse order.
#[test]
fn a_panic_unwinds_every_change() {
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = run_server(&nic, |_| panic!("receive loop bug"));
    }));
    assert!(r.is_err(), "the panic propagates");
    assert_eq!(nic.state(), before);
    assert_eq!(changes(&nic), expected(5, &[]));
}

/// Header split restored the careful way on a NIC where "unknown" does not bring the old
/// value back: header split was explicitly ENABLED (hds-thresh 64) and the driver's own
/// default is off. Setting UNKNOWN reads back "off", so the exact old value is written.
#[test]
fn careful_hds_restore_writes_the_exact_old_value() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| {
        let h = s.hds.as_mut().unwrap();
        h.configured = TcpDataSplit::Enabled;
        h.auto = TcpDataSplit::Disabled;
        h.thresh = Some(64);
    });
    let before = nic.state();
    let g = HdsGuard::enable(&shared(&nic)).expect("enable");
    assert_eq!(
        g.fix_command(),
        "ethtool -G eth0 tcp-data-split on hds-thresh 64"
    );
    nic.clear_journal();
    g.restore().expect("restore");
    let calls: Vec<(Op, String)> = nic.journal().into_iter().map(|c| (c.op, c.args)).collect();
    assert_eq!(
        calls,
        vec![
            (Op::HdsSet, "unknown hds-thresh=64".to_string()),
            (Op::HdsGet, String::new()),
            (Op::HdsSet, "enabled hds-thresh=64".to_string()),
        ]
    );
    assert_eq!(nic.state(), before);

    // Where "unknown" does bring it back (the driver default is what was there), no exact
    // write follows, and the configured mode goes back to "unknown" as it was.
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    let g = HdsGuard::enable(&shared(&nic)).expect("enable");
    nic.clear_journal();
    g.restore().expect("restore");
    assert_eq!(nic.journal().len(), 2, "{:?}", nic.journal());
    assert_eq!(nic.state(), before);
}

/// Provider teardown is asynchronous: the setup waits until queue-get shows the queue free
/// before restoring header split (which the kernel refuses while a provider is bound).
#[test]
fn teardown_waits_for_the_queue_before_restoring_header_split() {
    let lingering = Quirks {
        unbind_linger_queries: 3,
        ..Quirks::default()
    };
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(lingering.clone());
    let before = nic.state();
    run_server(&nic, |_| Ok(())).expect("run");
    assert_eq!(nic.state(), before);
    assert!(nic.calls(Op::Queues) >= 3, "polled queue-get");

    // Without the wait, the kernel refuses: the error names the command to fix it by hand.
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(lingering);
    let e = run_with_setup(
        &shared(&nic),
        &plan(),
        &bind_req(&[7]),
        true,
        Duration::ZERO,
        |_| Ok(()),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("can't disable tcp-data-split while device has memory provider"),
        "{e}"
    );
    assert!(
        e.contains("run `ethtool -G eth0 tcp-data-split off hds-thresh 128`"),
        "{e}"
    );
}

/// `--verify-restore`: a restore the kernel refused shows up as a difference.
#[test]
fn verify_restore_reports_what_differs() {
    let nic = ScriptedNic::good("eth0", 8);
    let s = shared(&nic);
    let before = s.with(|n| Ok(NicSnapshot::take(n))).unwrap();
    run_server(&nic, |_| Ok(())).expect("run");
    verify_restored(&s, &before).expect("restored");

    // The second run's restore: the reset, then the explicit write it falls back to.
    nic.fail_call(Op::RssReset, 2, libc::EBUSY);
    nic.fail_call(Op::RssSet, 3, libc::EBUSY);
    let e = run_server(&nic, |_| Ok(())).unwrap_err().to_string();
    assert!(
        e.contains("(was: the driver default, 128 entries spread over queues 0..8)"),
        "{e}"
    );
    assert!(e.contains("run `ethtool -X eth0 default`"), "{e}");
    let e = verify_restored(&s, &before).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL);
    assert!(
        e.to_string()
            .contains("RSS indirection table: 107 of 128 entries differ"),
        "{e}"
    );
}

fn probe_params() -> ProbeParams {
    ProbeParams {
        start: 4,
        num: 4,
        dmabuf_fd: 3,
        rx_page_size: None,
        quiet: true,
        teardown_wait: WAIT,
        memory: None,
    }
}

fn probe(nic: &ScriptedNic, p: &ProbeParams) -> (ProbeOutcome, String) {
    let mut out = Vec::new();
    let o = run_probe(&shared(nic), p, &mut out);
    (o, String::from_utf8(out).unwrap())
}

#[test]
fn probe_on_a_good_nic_passes_every_check() {
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    let (o, out) = probe(&nic, &probe_params());
    assert!(o.verdict().is_ok(), "{out}");
    assert!(o.checks.iter().all(|c| c.status == Status::Ok), "{out}");
    let names: Vec<&str> = o.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "header split on",
            "RSS indirection table spread over the other queues",
            "bind-rx with 4 empty queue nests is refused",
            "bind-rx of queues 4..=7 with header split off is refused",
            "bind-rx of queues 4..=7 with header split on succeeds",
            "queue-get shows the binding on the bound queues",
            "shrinking to 4 RX queues below bound queues 4..=7 is refused",
            "NIC restored",
        ]
    );
    assert_eq!(out.lines().count(), 8);
    assert!(out.contains("ok   bind-rx of queues 4..=7 with header split off is refused: refused: netdev bind-rx on eth0 (ifindex 4): EINVAL (Invalid argument); kernel: \"tcp-data-split is disabled\""), "{out}");
    // The kernel names the highest bound queue + 1 (measured on the software devmem NIC,
    // docs/kernel-7.3-devmem-nic.md).
    assert!(
        out.contains(
            "requested channel counts are too low for existing memory provider setting (8)"
        ),
        "{out}"
    );
    assert_eq!(nic.state(), before);
    assert_eq!(json_of(o.figure())["verdict"], "pass");
    // The one binding the kernel returned, for the exit wait on its page pools.
    assert_eq!(o.bindings.len(), 1, "{:?}", o.bindings);
    assert!(
        out.contains(&format!("binding id {}", o.bindings[0])),
        "{out}"
    );
}

#[test]
fn probe_fails_when_a_bind_with_header_split_off_is_accepted() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(Quirks {
        accept_bind_hds_off: true,
        ..Quirks::default()
    });
    let before = nic.state();
    let (o, out) = probe(&nic, &probe_params());
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL);
    assert!(
        e.to_string().starts_with(
            "probe: kernel broke a contract: bind-rx of queues 4..=7 with header split off is refused: the kernel accepted it"
        ),
        "{e}"
    );
    // The wrongly accepted binding counts too: its page pools are waited for like the real one's.
    assert_eq!(o.bindings.len(), 2, "{:?}", o.bindings);
    assert!(
        out.contains("FAIL bind-rx of queues 4..=7 with header split off"),
        "{out}"
    );
    assert_eq!(nic.state(), before);
}

#[test]
fn probe_fails_when_empty_queue_nests_are_accepted() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(Quirks {
        accept_empty_queue_nests: true,
        ..Quirks::default()
    });
    let (o, out) = probe(&nic, &probe_params());
    assert_eq!(o.verdict().unwrap_err().exit_code(), EXIT_FAIL);
    assert!(
        out.contains("FAIL bind-rx with 4 empty queue nests is refused"),
        "{out}"
    );
}

#[test]
fn probe_on_a_nic_without_devmem_skips_with_the_reason() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| s.devmem = false);
    let before = nic.state();
    let (o, out) = probe(&nic, &probe_params());
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP);
    assert!(
        e.to_string()
            .starts_with("skip: device does not support devmem RX: netdev bind-rx on eth0"),
        "{e}"
    );
    let status: Vec<Status> = o.checks.iter().map(|c| c.status).collect();
    assert_eq!(
        status,
        vec![
            Status::Ok,
            Status::Ok,
            Status::Skip,
            Status::Skip,
            Status::Skip,
            Status::Skip,
            Status::Ok
        ],
        "{out}"
    );
    assert!(out.contains("skip bind-rx of queues 4..=7 with header split on succeeds: not run (device does not support devmem RX"), "{out}");
    assert_eq!(nic.state(), before);
    assert_eq!(json_of(o.figure())["verdict"], "skip");
}

#[test]
fn probe_restores_channels_a_kernel_wrongly_shrank() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(Quirks {
        accept_channel_shrink: true,
        ..Quirks::default()
    });
    let before = nic.state();
    let (o, out) = probe(&nic, &probe_params());
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL);
    assert!(e.to_string().contains("shrinking to 4 RX queues"), "{e}");
    assert!(
        out.contains("the kernel accepted channels combined 4"),
        "{out}"
    );
    assert!(out.contains("old counts restored"), "{out}");
    let sets: Vec<String> = nic
        .changes()
        .into_iter()
        .filter(|c| c.op == Op::ChannelsSet)
        .map(|c| c.args)
        .collect();
    assert_eq!(
        sets,
        vec!["combined=4".to_string(), "combined=8".to_string()]
    );
    assert_eq!(nic.state(), before);
}

#[test]
fn probe_skips_on_veth_and_without_rx_page_size() {
    // veth: no ring parameters, so header split is the first missing capability.
    let veth = ScriptedNic::veth("va");
    let before = veth.state();
    let p = ProbeParams {
        start: 1,
        num: 1,
        ..probe_params()
    };
    let (o, out) = probe(&veth, &p);
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP);
    assert!(
        e.to_string()
            .contains("va: driver does not support header split"),
        "{e}"
    );
    assert!(out.starts_with("skip header split on: "), "{out}");
    assert_eq!(veth.state(), before);

    // -b on a kernel whose bind-rx does not know rx-page-size.
    let nic = ScriptedNic::good("eth0", 8);
    let p = ProbeParams {
        rx_page_size: Some(16384),
        ..probe_params()
    };
    let (o, _) = probe(&nic, &p);
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP);
    assert!(
        e.to_string()
            .contains("does not know bind-rx attribute rx-page-size"),
        "{e}"
    );

    // ... and on a kernel that knows it, with a driver that accepts it.
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| {
        s.rx_page_size_known = true;
        s.rx_page_size_supported = true;
    });
    let (o, out) = probe(&nic, &p);
    assert!(o.verdict().is_ok(), "{out}");
    assert!(out.contains("binding id 1, rx-page-size 16384"), "{out}");
}

/// `NL_ATTR_TYPE_NESTED` (`enum netlink_attribute_type`, include/uapi/linux/netlink.h).
const NL_ATTR_TYPE_NESTED: u32 = 13;

/// A bind-rx policy as CTRL_CMD_GETPOLICY reports it: (attribute, type) pairs.
fn policy(attrs: &[(u16, u32)]) -> Vec<PolicyAttr> {
    attrs
        .iter()
        .map(|&(kind, t)| PolicyAttr {
            kind,
            nl_type: Some(t),
        })
        .collect()
}

fn host() -> HostCaps {
    HostCaps {
        kernel_release: Fact::Known("7.3.4+deb13-amd64".into()),
        udmabuf: Fact::Unsupported(
            "cannot open /dev/udmabuf (ENOENT (No such file or directory)); the kernel needs CONFIG_UDMABUF".into(),
        ),
        dma_heaps: Fact::Unsupported(
            "no /dev/dma_heap (ENOENT (No such file or directory)); the kernel needs CONFIG_DMABUF_HEAPS".into(),
        ),
        hugepages: Fact::Known(HugepageStatus {
            nr: 0,
            free: 0,
            resv: 0,
        }),
        hugepages_needed: 0,
        rx_page_size: None,
        // 6.18's bind-rx policy: ifindex u32, queues nest, fd u32.
        bind_rx_policy: Fact::Known(policy(&[
            (1, NL_ATTR_TYPE_U32),
            (2, NL_ATTR_TYPE_NESTED),
            (3, NL_ATTR_TYPE_U32),
        ])),
        autorelease: Fact::Unsupported("kernel has no SO_DEVMEM_AUTORELEASE".into()),
        // A 256 KiB dmabuf next to the default tcp_rmem.
        rcvbuf: ncdevmem::rcvbuf::plan(None, 64, 4096, 1428, Some(6 << 20)),
        zcrx: Fact::Known(()),
        // 7.3's bind-tx policy: ifindex u32, fd u32.
        bind_tx_policy: Fact::Known(policy(&[(1, NL_ATTR_TYPE_U32), (3, NL_ATTR_TYPE_U32)])),
    }
}

#[test]
fn report_text_for_a_scripted_nic() {
    let nic = ScriptedNic::good("eth0", 2);
    nic.edit(|s| {
        s.foreign_owners.insert(1, QueueOwner::Xsk);
        s.page_pools.truncate(1);
    });
    let mut ops = nic.clone();
    let r = NicReport::gather(&mut ops, host(), true);
    let text = r.render_text();
    let want = "\
capability report for eth0 (ifindex 4)
  driver:    scripted, version 1.0, firmware 2.5, bus 0000:03:00.0
  kernel:    7.3.4+deb13-amd64
  device:    xdp-features basic,redirect,xsk-zerocopy,rx-sg, xdp-zc-max-segs 1, xdp-rx-metadata 0x0, xsk-features 0x0 (an attached XDP program makes bind-rx fail with EEXIST)
  channels:  combined 2 (max 16); RX queues: 2
  rings:     tcp-data-split off, hds-thresh 128
  rss:       128 entries spread over queues 0..2
  ntuple:    off; rules at [] (table size 16)
  rx 0:      napi 100, free
  rx 1:      napi 101, AF_XDP
  tx:        2 queues
  pool 1:    napi 100, inflight 0 (0 bytes), memory: pages
capabilities:
  yes  devmem RX driver support: bind-rx got past the device check (an invalid dma-buf fd was refused with EBADF (Bad file descriptor))
  yes  header split: supported, now off (tcp-data-split off, hds-thresh 128); setup turns it on (bind-rx needs it on)
  yes  at least 2 RX queues: 2 RX queues
  yes  free RX queues: 1 of 2 free; queue 1 owned by AF_XDP (binding it fails with EBUSY \"designated queue already in use by AF_XDP\")
  yes  RSS indirection table: 128 entries
  yes  ntuple flow steering: feature off (setup turns it on and back off)
  no   udmabuf: cannot open /dev/udmabuf (ENOENT (No such file or directory)); the kernel needs CONFIG_UDMABUF; there is no dma-buf to bind
  no   dma-buf heaps: no /dev/dma_heap (ENOENT (No such file or directory)); the kernel needs CONFIG_DMABUF_HEAPS; a dma-heap source skips here
  no   2 MiB hugepages: none available; -b above the page size needs them (raise vm.nr_hugepages)
  warn TCP window inside the dmabuf: the kernel's default receive window is larger than the dmabuf can hold, which can stall a receive (the binding holds 64 buffers of 4096 bytes, at least 91392 bytes of TCP payload at one 1428-byte segment per buffer; SO_RCVBUF 22848 keeps the receive buffer (the kernel doubles it) and so the TCP window within half of that); the server sets SO_RCVBUF 22848 (--rcvbuf 0 would not)
  no   rx-page-size (bind-rx attribute 5): the kernel's bind-rx policy has attributes [1, 2, 3] only; a bind with -b fails with EINVAL \"Unknown attribute type\"
  no   bind-rx autorelease (-a): the kernel's bind-rx policy has no u8 autorelease attribute (unmerged series v7-v10); -a 1 skips, -a 0 binds without it
  no   SO_DEVMEM_AUTORELEASE: kernel has no SO_DEVMEM_AUTORELEASE; -A is a skip (exit 4) here
  yes  io_uring zcrx: io_uring has RECV_ZC and would register a zcrx ifq for this process; the driver's side (header split, a queue with a memory provider) shows when -l --zcrx registers
  yes  devmem TX (bind-tx): the kernel's netdev family has bind-tx (attributes [1, 3]); whether the driver sends from netmem shows when the devmem TX client (-f IF without -l) binds
";
    assert_eq!(text, want, "\n{text}");
    assert_eq!(r.no_queue_ops, None, "the driver got past the device check");
    // The report is read-only: the only change is the bind that had to fail.
    assert_eq!(
        changes(&nic),
        vec![ch(Op::BindRx, "eth0 (ifindex 4), queue 0", true)]
    );
}

#[test]
fn report_for_veth_says_why_a_bind_would_fail() {
    let veth = ScriptedNic::veth("va");
    let mut ops = veth.clone();
    let r = NicReport::gather(&mut ops, host(), true);
    let caps = r.capabilities();
    let no: Vec<&str> = caps
        .iter()
        .filter(|c| c.state == CapState::No)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        no,
        vec![
            "devmem RX driver support",
            "header split",
            "at least 2 RX queues",
            "RSS indirection table",
            "ntuple flow steering",
            "udmabuf",
            "dma-buf heaps",
            "2 MiB hugepages",
            "rx-page-size (bind-rx attribute 5)",
            "bind-rx autorelease (-a)",
            "SO_DEVMEM_AUTORELEASE"
        ]
    );
    let devmem = &caps[0].detail;
    assert!(devmem.starts_with("the driver has no queue-management ops; bind-rx fails with netdev bind-rx on va (ifindex 2): EOPNOTSUPP"), "{devmem}");
    // Kept typed for the probe, which names it before every other blocker.
    let no_ops = r.no_queue_ops.as_ref().map(ToString::to_string);
    assert!(
        no_ops.as_deref().is_some_and(|m| m.starts_with(
            "va: the driver has no queue management ops (bind-rx answered EOPNOTSUPP \
             (Operation not supported); at NETDEV_A_DMABUF_IFINDEX); devmem needs a driver"
        )),
        "{no_ops:?}"
    );
    assert!(
        caps[1].detail.ends_with(
            "bind-rx would need header split (the kernel refuses with EINVAL \
             \"tcp-data-split is disabled\" on a device that supports devmem)"
        ),
        "{}",
        caps[1].detail
    );
    let j = json_of(r.figure());
    assert_eq!(j["ifname"], "va");
    assert_eq!(j["driver"]["name"], "veth");
    assert_eq!(j["driver"]["bus_info"], "");
    assert_eq!(j["host"]["kernel_release"], "7.3.4+deb13-amd64");
    assert!(r
        .render_text()
        .contains("\n  driver:    veth, version 1.0\n"));
    assert_eq!(j["channels"]["rx_queues"], 1);
    assert!(j["rings"]["unsupported"]
        .as_str()
        .unwrap()
        .contains("EOPNOTSUPP"));
    assert_eq!(
        j["host"]["bind_rx_policy_attrs"],
        serde_json::json!([1, 2, 3])
    );
    assert!(j["host"]["dma_heaps"]["unsupported"]
        .as_str()
        .unwrap()
        .contains("CONFIG_DMABUF_HEAPS"));
    assert_eq!(j["capabilities"][0]["state"], "no");
}

#[test]
fn report_json_for_a_bound_nic() {
    let nic = ScriptedNic::good("eth0", 4);
    nic.edit(|s| {
        let h = s.hds.as_mut().unwrap();
        h.configured = TcpDataSplit::Enabled;
        h.thresh = Some(0);
    });
    let s = shared(&nic);
    let binding = s.with(|n| n.bind_rx(&bind_req(&[3]))).expect("bind");
    let mut ops = nic.clone();
    let j = json_of(NicReport::gather(&mut ops, host(), false).figure());
    assert_eq!(j["queues"][3]["owners"][0]["dmabuf"], binding.id());
    assert_eq!(j["queues"][3]["napi_id"], 103);
    assert_eq!(j["rings"]["tcp_data_split"], "on");
    assert_eq!(j["rings"]["hds_thresh"], 0);
    let pools = j["page_pools"].as_array().unwrap();
    assert_eq!(pools.len(), 5, "4 queues' pools + the binding's");
    assert_eq!(pools[4]["dmabuf"], binding.id());
    assert_eq!(j["devmem_driver"], serde_json::Value::Null);
    assert_eq!(
        j["device"]["xdp_features_names"],
        "basic,redirect,xsk-zerocopy,rx-sg"
    );
    assert_eq!(j["rss"]["equal_spread"], 4);
    drop(binding);
}

// ---------------------------------------------------------------------------------------------
// Findings of the adversarial pass and the VM suite (netdevsim on 7.3)
// ---------------------------------------------------------------------------------------------

/// A table that was the driver default (even spread over the RX queues) is restored by a reset
/// (SRSSH `indir_size` 0), re-read to confirm, and the NIC is no longer marked
/// user-configured: a later channel change is not checked against the table, and the driver
/// spreads it over the new queue count. Writing the table back explicitly would leave the mark.
#[test]
fn rss_driver_default_is_restored_by_a_reset() {
    let nic = ScriptedNic::good("eth0", 8);
    let before = nic.state();
    assert!(!before.rss_configured);
    run_server(&nic, |_| {
        assert!(nic.state().rss_configured, "spread marks the table");
        Ok(())
    })
    .expect("run");
    assert_eq!(
        nic.state(),
        before,
        "table and the configured mark restored"
    );
    let rss: Vec<(Op, String)> = nic
        .journal()
        .into_iter()
        .filter(|c| matches!(c.op, Op::RssGet | Op::RssSet | Op::RssReset))
        .map(|c| (c.op, c.args))
        .collect();
    assert_eq!(
        rss,
        vec![
            (Op::RssGet, String::new()),
            (Op::RssSet, "equal 7".into()),
            (Op::RssReset, "default".into()),
            (Op::RssGet, String::new()),
        ],
        "reset, then re-read to confirm"
    );
    // The driver still manages the table: shrinking the channels re-spreads it.
    let mut ops = nic.clone();
    ops.channels_set(ChannelsSet {
        combined: Some(4),
        ..ChannelsSet::default()
    })
    .expect("a driver-managed table does not block a channel change");
    assert_eq!(nic.state().rss.unwrap(), equal_table(128, 4).indir);
    // A reset the driver refuses: see rss_mark_left_behind_fails_the_run.
}

/// A table someone configured (custom, or an even spread over fewer queues than the NIC has)
/// is written back explicitly, never reset to the driver default.
#[test]
fn rss_custom_or_user_spread_table_is_written_back() {
    for table in [
        [3u32, 3, 1, 0, 2, 2, 1, 0].repeat(16),
        equal_table(128, 6).indir,
    ] {
        let nic = ScriptedNic::good("eth0", 8);
        nic.edit(|s| {
            s.rss = Some(table.clone());
            s.rss_configured = true;
        });
        let before = nic.state();
        run_server(&nic, |_| Ok(())).expect("run");
        assert_eq!(nic.state(), before);
        assert_eq!(nic.calls(Op::RssReset), 0, "never reset a configured table");
        let last_rss = nic
            .changes()
            .into_iter()
            .rfind(|c| c.op == Op::RssSet)
            .unwrap();
        assert_ne!(
            last_rss.args, "equal 7",
            "the restore is the last RSS write"
        );
    }
}

/// A restore failure on a large custom table summarises the table (size and spread) instead
/// of printing every entry.
#[test]
fn rss_restore_error_summarises_a_large_table() {
    let nic = ScriptedNic::good("eth0", 8);
    let table: Vec<u32> = (0..512u32)
        .map(|i| if i % 4 == 0 { 3 } else { i % 2 })
        .collect();
    nic.edit(|s| {
        s.rss = Some(table.clone());
        s.rss_configured = true;
    });
    nic.fail_call(Op::RssSet, 2, libc::EBUSY); // the restore
    let e = run_server(&nic, |_| Ok(())).unwrap_err().to_string();
    assert!(
        e.contains("(was: custom table of 512 entries using queues 0 (128), 1 (256), 3 (128))"),
        "{e}"
    );
    assert!(e.len() < 600, "{} bytes: {e}", e.len());
    assert!(e.contains("run `ethtool -X eth0 default`"), "{e}");
}

/// An empty RSS table is "the driver has no RSS table": the server skips (RSS exclusion is
/// mandatory there) without writing anything, instead of counting it as already spread.
#[test]
fn empty_rss_table_is_no_table() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| s.rss = Some(Vec::new()));
    let before = nic.state();
    let e = run_server(&nic, |_| panic!("the body must not run")).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP, "{e}");
    assert!(
        e.to_string()
            .contains("eth0: driver does not support the RSS indirection table"),
        "{e}"
    );
    assert!(e.to_string().contains("empty RSS indirection table"), "{e}");
    assert_eq!(changes(&nic), expected(1, &[]));
    assert_eq!(nic.state(), before);
}

/// A driver that reports RX_CLS_LOC_ANY back instead of the rule's location: the rule list is
/// read again, the one new location is ours and is what teardown deletes; someone else's rule
/// stays.
#[test]
fn flow_rule_bogus_location_is_replaced_by_the_new_one_in_the_list() {
    let nic = ScriptedNic::good("eth0", 8).with_foreign_rule(0);
    nic.set_quirks(Quirks {
        insert_reports: Some(0xffff_ffff),
        ..Quirks::default()
    });
    let before = nic.state();
    run_server(&nic, |_| Ok(())).expect("run");
    let deletes: Vec<String> = nic
        .changes()
        .into_iter()
        .filter(|c| c.op == Op::FlowRuleDelete)
        .map(|c| c.args)
        .collect();
    assert_eq!(deletes, vec!["loc 1".to_string()]);
    assert_eq!(nic.state(), before, "foreign rule at 0 kept, ours removed");
}

/// A driver that puts our rule over someone else's (reporting a location that was in use
/// before the insert): no new location shows up, so the insert fails naming the driver's
/// answer, nothing is deleted and no second rule is tried.
#[test]
fn flow_rule_location_in_use_before_is_never_deleted() {
    let nic = ScriptedNic::good("eth0", 8).with_foreign_rule(0);
    nic.set_quirks(Quirks {
        insert_overwrites: Some(0),
        ..Quirks::default()
    });
    let e = run_server(&nic, |_| panic!("the body must not run")).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL, "{e}");
    let m = e.to_string();
    assert!(
        m.contains(&format!(
            "eth0: ntuple rule insert ({RULE5}) returned location 0, a location that already \
             held another rule before the insert; no new location in the rule list"
        )),
        "{m}"
    );
    assert!(m.contains("nothing was deleted"), "{m}");
    assert!(m.contains("`ethtool -n eth0`"), "{m}");
    let ch = nic.changes();
    assert!(!ch.iter().any(|c| c.op == Op::FlowRuleDelete), "{ch:?}");
    assert_eq!(
        ch.iter().filter(|c| c.op == Op::FlowRuleInsert).count(),
        1,
        "no 3-tuple attempt after an untrusted location: {ch:?}"
    );
    assert!(nic.state().rules.contains_key(&0));
}

/// bind-rx answering binding id 0 is refused: the binding is dropped (unbound) and every
/// other change undone; the body never runs.
#[test]
fn binding_id_zero_is_refused_and_unbound() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.set_quirks(Quirks {
        binding_id_zero: true,
        ..Quirks::default()
    });
    let before = nic.state();
    let e = run_server(&nic, |_| panic!("the body must not run")).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL, "{e}");
    assert!(
        e.to_string()
            .starts_with("kernel returned binding id 0 for bind-rx of eth0 (ifindex 4), queue 7"),
        "{e}"
    );
    let mut want = expected(4, &[]);
    want.insert(4, ch(Op::BindRx, BIND, false));
    want.insert(5, ch(Op::Unbind, "id 0", false));
    assert_eq!(changes(&nic), want);
    assert_eq!(nic.state(), before);
}

/// Probe on a driver without an RSS table (netdevsim, veth with header split): a note line,
/// and the checks go on to the binds, which decide the verdict. The server still skips.
#[test]
fn probe_without_rss_table_notes_it_and_goes_on_to_the_binds() {
    // Like netdevsim on 7.3: header split and channels, no RSS, no devmem.
    let nic = ScriptedNic::good("eni0", 8);
    nic.edit(|s| {
        s.rss = None;
        s.devmem = false;
    });
    let before = nic.state();
    let (o, out) = probe(&nic, &probe_params());
    assert!(
        out.lines().nth(1).unwrap().starts_with(
            "note rss: driver has no RSS indirection table; nothing to exclude (ioctl(SIOCETHTOOL, \
             ETHTOOL_GRSSH) on eni0: EOPNOTSUPP"
        ),
        "{out}"
    );
    let e = o.verdict().unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP);
    assert!(
        e.to_string()
            .starts_with("skip: device does not support devmem RX: netdev bind-rx on eni0"),
        "{e}"
    );
    assert_eq!(json_of(o.figure())["checks"][1]["status"], "note");
    assert_eq!(nic.state(), before);

    // With devmem, every contract check runs and passes.
    let nic = ScriptedNic::good("eni0", 8);
    nic.edit(|s| s.rss = None);
    let (o, out) = probe(&nic, &probe_params());
    assert!(o.verdict().is_ok(), "{out}");
    assert_eq!(
        o.checks.iter().filter(|c| c.status == Status::Ok).count(),
        7,
        "{out}"
    );

    // An empty table is the same as none.
    let nic = ScriptedNic::good("eni0", 8);
    nic.edit(|s| s.rss = Some(Vec::new()));
    let (o, out) = probe(&nic, &probe_params());
    assert!(o.verdict().is_ok(), "{out}");
    assert!(out.contains("note rss: "), "{out}");

    // Server mode keeps RSS mandatory.
    let nic = ScriptedNic::good("eni0", 8);
    nic.edit(|s| s.rss = None);
    let e = run_server(&nic, |_| Ok(())).unwrap_err();
    assert!(
        e.to_string()
            .contains("driver does not support the RSS indirection table"),
        "{e}"
    );
}

/// Report wording: no channel counts, a down interface (no queues visible), a driver that
/// does not report tcp-data-split, and a large custom RSS table.
#[test]
fn report_wording_for_odd_answers() {
    let nic = ScriptedNic::good("eth0", 4);
    nic.edit(|s| {
        // channels-get with no counts at all; queue-get then lists nothing (as when down).
        s.channels = Some(ncdevmem::netlink::ethtool::Channels::default());
        s.hds.as_mut().unwrap().split_supported = false;
        s.rss = Some((0..512u32).map(|i| u32::from(i % 3 == 0)).collect());
    });
    let mut ops = nic.clone();
    let r = NicReport::gather(&mut ops, host(), false);
    let text = r.render_text();
    assert!(
        text.contains("  channels:  the driver reports no channel counts\n"),
        "{text}"
    );
    assert!(
        text.contains("  rings:     tcp-data-split not reported, hds-thresh 128\n"),
        "{text}"
    );
    assert!(
        text.contains("  rss:       custom table of 512 entries using queues 0 (341), 1 (171)\n"),
        "{text}"
    );
    assert!(
        text.contains("  queues:    no queues visible (interface down?)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  ?    at least 2 RX queues: the driver reports no channel counts; give -t/-q\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  ?    free RX queues: no queues visible (interface down?)\n"),
        "{text}"
    );
    assert!(!text.contains("0 of 0 free"), "{text}");
    assert!(!text.contains("tcp-data-split auto"), "{text}");
    assert!(
        text.contains(
            "  no   header split: the driver does not report tcp-data-split, so setup cannot turn \
             it on; bind-rx would need header split (the kernel refuses with EINVAL \
             \"tcp-data-split is disabled\" on a device that supports devmem)\n"
        ),
        "{text}"
    );
}

/// Default queue choice on a driver whose channels-get has no counts: a skip that says so
/// and asks for -t/-q (not "has 0 RX queue(s)").
#[test]
fn no_channel_counts_is_a_skip_asking_for_explicit_queues() {
    let nic = ScriptedNic::good("eth0", 4);
    nic.edit(|s| s.channels = Some(ncdevmem::netlink::ethtool::Channels::default()));
    let e = choose_queues(&shared(&nic), None, QueuePolicy::Server, WAIT, false).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP, "{e}");
    let m = e.to_string();
    assert!(
        m.contains("eth0: the driver reports no channel counts"),
        "{m}"
    );
    assert!(m.ends_with("give -t START -q NUM"), "{m}");
    assert!(!m.contains("RX queue(s)"), "{m}");
}

// ---------------------------------------------------------------------------------------------
// A stop signal during setup
// ---------------------------------------------------------------------------------------------

/// A stop flag of its own for one run (what the SIGINT/SIGTERM handler stores into), so tests
/// running in parallel never see each other's signals.
fn new_stop_flag() -> &'static AtomicI32 {
    Box::leak(Box::new(AtomicI32::new(0)))
}

/// A stop signal that arrives during any setup call (reads and changes) is acted on at the
/// next step: no later setup change is made, the body never runs, the run ends with
/// `Error::Interrupted` (exit 1), and the steps done are undone in reverse order, leaving the
/// NIC as it was.
#[test]
fn a_signal_during_setup_stops_at_the_next_step_and_unwinds() {
    // (the call during which the signal arrives, setup changes made by then: a step that had
    // begun is finished)
    let cases = [
        (Op::HdsGet, 1),
        (Op::HdsSet, 1),
        (Op::RssGet, 2),
        (Op::ChannelsGet, 2),
        (Op::RssSet, 2),
        (Op::NtupleGet, 3),
        (Op::NtupleSet, 3),
        (Op::FlowRules, 4),
        (Op::FlowRuleInsert, 4),
        (Op::BindRx, 5),
    ];
    for (op, done) in cases {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            let nic = ScriptedNic::good("eth0", 8);
            let before = nic.state();
            let stop = new_stop_flag();
            nic.signal_after(op, 1, stop, sig);
            let shared = SharedNic::new(Box::new(nic.clone())).stop_flag(stop);
            let e = run_with_setup(&shared, &plan(), &bind_req(&[7]), true, WAIT, |_| {
                panic!("{op:?}: the body ran after the signal");
                #[allow(unreachable_code)]
                Ok(())
            })
            .unwrap_err();
            assert!(
                matches!(e, Error::Interrupted(s) if s == sig),
                "{op:?}/{sig}: {e}"
            );
            assert_eq!(e.exit_code(), EXIT_FAIL);
            assert!(
                e.to_string()
                    .starts_with(&format!("interrupted by signal {sig}")),
                "{e}"
            );
            assert_eq!(changes(&nic), expected(done, &[]), "{op:?}/{sig}");
            assert_eq!(nic.state(), before, "{op:?}/{sig}");
        }
    }
}

/// A signal while the probe runs ends it at the next check: the rest is "not run
/// (interrupted by signal N)", everything is undone, and the verdict (and JSON) say
/// interrupted, not a kernel failure.
#[test]
fn a_signal_during_the_probe_stops_it_and_unwinds() {
    for (op, n, ran) in [(Op::HdsSet, 1, 1), (Op::RssSet, 1, 2), (Op::BindRx, 1, 3)] {
        let nic = ScriptedNic::good("eth0", 8);
        let before = nic.state();
        let stop = new_stop_flag();
        nic.signal_after(op, n, stop, libc::SIGINT);
        let mut out = Vec::new();
        let shared = SharedNic::new(Box::new(nic.clone())).stop_flag(stop);
        let o = run_probe(&shared, &probe_params(), &mut out);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(o.interrupted, Some(libc::SIGINT), "{op:?}: {out}");
        let e = o.verdict().unwrap_err();
        assert!(matches!(e, Error::Interrupted(libc::SIGINT)), "{op:?}: {e}");
        assert!(
            o.checks[..ran].iter().all(|c| c.status == Status::Ok),
            "{op:?}: {out}"
        );
        let not_run: Vec<&str> = o.checks[ran..o.checks.len() - 1]
            .iter()
            .map(|c| c.detail.as_str())
            .collect();
        assert!(!not_run.is_empty(), "{op:?}: {out}");
        assert!(
            not_run
                .iter()
                .all(|d| *d == "not run (interrupted by signal 2)"),
            "{op:?}: {out}"
        );
        assert_eq!(o.checks.last().unwrap().name, "NIC restored", "{out}");
        assert_eq!(o.checks.last().unwrap().status, Status::Ok, "{out}");
        assert_eq!(json_of(o.figure())["verdict"], "fail");
        assert!(json_of(o.figure())["reason"]
            .as_str()
            .unwrap()
            .starts_with("interrupted by signal 2"));
        assert_eq!(nic.state(), before, "{op:?}");
    }
}

/// The queue choice's wait for a queue someone else holds ends at a signal, not at the end of
/// the wait.
#[test]
fn a_signal_ends_the_wait_for_an_owned_queue() {
    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| {
        s.foreign_owners.insert(7, QueueOwner::IoUring);
    });
    let stop = new_stop_flag();
    nic.signal_after(Op::Queues, 2, stop, libc::SIGTERM);
    let shared = SharedNic::new(Box::new(nic.clone())).stop_flag(stop);
    let t0 = std::time::Instant::now();
    let e = choose_queues(
        &shared,
        Some((7, 1)),
        QueuePolicy::Server,
        Duration::from_secs(10),
        false,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Interrupted(libc::SIGTERM)), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

/// The hugepage line says "yes" only when there are hugepages: an empty pool is "no" even when
/// this run needs none, and a pool with pages is "yes".
#[test]
fn hugepage_line_follows_the_pool() {
    let nic = ScriptedNic::good("eth0", 2);
    let line = |nr: u64, free: u64| {
        let mut h = host();
        h.hugepages = Fact::Known(HugepageStatus { nr, free, resv: 0 });
        let mut ops = nic.clone();
        let text = NicReport::gather(&mut ops, h, false).render_text();
        text.lines()
            .find(|l| l.contains("2 MiB hugepages"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line(0, 0).starts_with("  no   2 MiB hugepages: none available"),
        "{}",
        line(0, 0)
    );
    assert_eq!(
        line(4, 3),
        "  yes  2 MiB hugepages: 3 available (only -b above the page size needs them)"
    );
}

/// The RSS undo does not depend on reading the channel counts: on a driver
/// with RSS but no channels ops, and when that read fails once, a table that was the driver
/// default is still restored by a reset, so the kernel's user-configured mark is cleared and
/// the NIC is exactly as before; someone's even spread over fewer queues is still written
/// back (reset, compared, rewritten), its mark kept.
#[test]
fn rss_default_is_reset_even_when_the_channels_cannot_be_read() {
    let no_channels = || {
        let nic = ScriptedNic::good("eth0", 8);
        nic.set_quirks(Quirks {
            no_channels_ops: true,
            ..Quirks::default()
        });
        nic
    };
    let transient = || {
        let nic = ScriptedNic::good("eth0", 8);
        nic.fail_call(Op::ChannelsGet, 1, libc::EBUSY);
        nic
    };
    for (what, nic) in [
        ("no channels ops", no_channels()),
        ("a failed channels read", transient()),
    ] {
        let before = nic.state();
        assert!(!before.rss_configured);
        run_server(&nic, |_| {
            assert!(nic.state().rss_configured, "{what}: spread marks the table");
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(nic.state(), before, "{what}: table and mark restored");
        assert_eq!(nic.calls(Op::RssReset), 1, "{what}");
    }
    for (what, nic) in [
        ("no channels ops", no_channels()),
        ("a failed channels read", transient()),
    ] {
        nic.edit(|s| {
            s.rss = Some(equal_table(128, 6).indir);
            s.rss_configured = true;
        });
        let before = nic.state();
        run_server(&nic, |_| Ok(())).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            nic.state(),
            before,
            "{what}: the user's spread is back, still marked"
        );
    }
}

/// A driver default that could only be written back (the reset was refused) leaves the table
/// marked user-configured: the run fails naming the command that clears it, instead of
/// exiting 0 with the NIC changed.
#[test]
fn rss_mark_left_behind_fails_the_run() {
    let nic = ScriptedNic::good("eth0", 8);
    let table = nic.state().rss;
    nic.fail_call(Op::RssReset, 1, libc::EOPNOTSUPP);
    let e = run_server(&nic, |_| Ok(())).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL, "{e}");
    let m = e.to_string();
    assert!(m.contains("written back"), "{m}");
    assert!(m.contains("marked user-configured"), "{m}");
    assert!(m.ends_with("run `ethtool -X eth0 default`"), "{m}");
    assert_eq!(nic.state().rss, table, "the table itself is back");
}

/// The bind-rx autorelease attribute (unmerged series v7–v10) against the contracts the
/// scripted NIC keeps: a kernel without it (6.18 and 7.3, measured) refuses it with EINVAL
/// "Unknown attribute type" at the attribute — a failure, not a skip (the server never sends
/// it there); a series kernel takes either value, but while one RX binding lives, a bind
/// asking for the other mode gets EBUSY, which the server turns into a skip with the reason.
#[test]
fn bind_rx_autorelease_attribute() {
    let nic = ScriptedNic::good("eth0", 8);
    let off = bind_req(&[7]).autorelease(Some((5, false)));
    let e = run_with_setup(&shared(&nic), &plan(), &off, true, WAIT, |_| Ok(())).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAIL, "{e}");
    assert_eq!(e.errno(), Some(libc::EINVAL));
    assert!(
        e.to_string().contains("Unknown attribute type")
            && e.to_string().contains("NETDEV_A_DMABUF_AUTORELEASE"),
        "{e}"
    );

    let nic = ScriptedNic::good("eth0", 8);
    nic.edit(|s| s.autorelease_known = true);
    let on = bind_req(&[7]).autorelease(Some((5, true)));
    run_with_setup(&shared(&nic), &plan(), &on, true, WAIT, |id| {
        let other = bind_req(&[6]).autorelease(Some((5, false)));
        let mut ops = nic.clone();
        let e = ops.bind_rx(&other).map(|b| b.id()).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EBUSY));
        let skip = ncdevmem::nic::setup::bind_refusal(e, &other);
        assert_eq!(skip.exit_code(), EXIT_SKIP);
        assert!(
            skip.to_string().contains(
                "another devmem RX binding on this system uses the other autorelease mode"
            ) && skip
                .to_string()
                .contains("System already configured with autorelease=1"),
            "{skip}"
        );
        // The same mode is fine; leaving the attribute out means 0 (the series' default).
        let same = ops
            .bind_rx(&bind_req(&[6]).autorelease(Some((5, true))))
            .unwrap();
        assert_ne!(same.id(), id);
        drop(same);
        let e = ops.bind_rx(&bind_req(&[6])).map(|b| b.id()).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EBUSY));
        Ok(())
    })
    .unwrap();
    // Once no RX binding lives, the other mode binds.
    run_with_setup(&shared(&nic), &plan(), &off, true, WAIT, |_| Ok(())).unwrap();
}

/// The report on a kernel with the autorelease series: attribute 5 is the u8 autorelease,
/// so rx-page-size (also 5, but u32) is not claimed.
#[test]
fn report_on_a_series_kernel_shows_autorelease_not_rx_page_size() {
    let nic = ScriptedNic::good("eth0", 2);
    let mut ops = nic.clone();
    let mut h = host();
    h.bind_rx_policy = Fact::Known(policy(&[
        (1, NL_ATTR_TYPE_U32),
        (2, NL_ATTR_TYPE_NESTED),
        (3, NL_ATTR_TYPE_U32),
        (5, NL_ATTR_TYPE_U8),
    ]));
    let r = NicReport::gather(&mut ops, h, true);
    let caps = r.capabilities();
    let state = |name: &str| caps.iter().find(|c| c.name == name).map(|c| c.state);
    assert_eq!(state("bind-rx autorelease (-a)"), Some(CapState::Yes));
    assert_eq!(
        state("rx-page-size (bind-rx attribute 5)"),
        Some(CapState::No)
    );
    let j = json_of(r.figure());
    assert_eq!(j["host"]["bind_rx_autorelease_attr"], 5, "{j}");
    assert_eq!(
        j["host"]["bind_rx_policy_attrs"],
        serde_json::json!([1, 2, 3, 5]),
        "{j}"
    );
    // The report reads attribute 5 by the rule -b runs by (ctrl::has_rx_page_size): u32 is
    // rx-page-size, any other type is not.
    for (t, want) in [(NL_ATTR_TYPE_U32, CapState::Yes), (3, CapState::No)] {
        let mut h = host();
        h.bind_rx_policy = Fact::Known(policy(&[(1, NL_ATTR_TYPE_U32), (5, t)]));
        let r = NicReport::gather(&mut ops, h, true);
        let caps = r.capabilities();
        let got = caps
            .iter()
            .find(|c| c.name == "rx-page-size (bind-rx attribute 5)")
            .map(|c| c.state);
        assert_eq!(got, Some(want), "attribute 5 of type {t}");
    }
}

/// A summary type as the JSON it writes.
fn json_of<T: serde::Serialize>(t: T) -> serde_json::Value {
    serde_json::to_value(t).expect("a summary type serializes")
}
