//! Real-kernel tests of the NIC kernel layer: ethtool netlink RINGS_SET / CHANNELS_SET and the
//! RSS_GET dump, the `SIOCETHTOOL` ioctls (ntuple rules, `FLOW_RSS` rules, RSS table and
//! additional RSS contexts, features by name, driver info) and
//! `RealNic`, the `NicOps` of a real interface — all on a veth pair in a fresh network
//! namespace (`common::NetNs`, always deleted). Without root they print
//! `skip: <test>: <reason>`.
//!
//! Expected answers are the 6.18 kernel's, as measured (`docs/kernel-interface.md#ethtool-netlink`,
//! `#siocethtool-ioctls`): veth has
//! rx/tx channels (max 2 each) and driver info, but no ring parameters, no ntuple filters and
//! no RSS, and its `rx-ntuple-filter` feature is off and not changeable.

mod common;

use std::fmt::Debug;
use std::os::fd::{AsFd, OwnedFd};

use common::NetNs;
use ncdevmem::caps::skip_if_family_missing;
use ncdevmem::error::{Error, NlError};
use ncdevmem::netlink::ethtool::{shrink_rx_request, Ethtool, TcpDataSplit};
use ncdevmem::netlink::netdev::{BindRxRequest, QueueType};
use ncdevmem::nic::guards::SharedNic;
use ncdevmem::nic::real::RealNic;
use ncdevmem::nic::setup::FlowTarget;
use ncdevmem::nic::snapshot::{Fact, NicSnapshot};
use ncdevmem::nic::steer::{
    apply_steering, plan_steering, rss_context_support, ContextSupport, SteerRequest,
};
use ncdevmem::nic::{ChannelsSet, FlowRule, FlowType, NicOps, RssTable};
use ncdevmem::sys::ethtool_ioctl::{
    feature_words, tcp4_flow_spec, EthtoolIoctl, NTUPLE_FEATURE, RX_CLS_LOC_ANY,
};

/// Root and `ip` available: a namespace with veth0–veth1 (both up), not yet entered.
fn veth_ns(test: &str) -> Option<NetNs> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    Some(NetNs::with_veth("veth0", "veth1").expect("create netns with veth0-veth1"))
}

fn nl_err<T: Debug>(r: Result<T, Error>) -> NlError {
    match r {
        Err(Error::Netlink(e)) => *e,
        other => panic!("expected a netlink error, got {other:?}"),
    }
}

/// The `Error::Sys` of an ioctl: (call, errno).
fn sys_err<T: Debug>(r: Result<T, Error>) -> (String, i32) {
    match r {
        Err(Error::Sys { call, errno }) => (call, errno),
        other => panic!("expected a syscall error, got {other:?}"),
    }
}

/// (rx queue ids, tx queue ids) from a queue-get dump.
fn queue_ids(q: &[ncdevmem::netlink::netdev::QueueInfo]) -> (Vec<u32>, Vec<u32>) {
    let ids = |t: QueueType| {
        let mut v: Vec<u32> = q
            .iter()
            .filter(|q| q.queue_type == t)
            .map(|q| q.id)
            .collect();
        v.sort_unstable();
        v
    };
    (ids(QueueType::Rx), ids(QueueType::Tx))
}

#[test]
fn channels_set_is_applied_and_restored() {
    let test = "channels_set_is_applied_and_restored";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let mut et = match skip_if_family_missing(Ethtool::open(), "ethtool") {
        Ok(et) => et,
        Err(Error::Skip(r)) => return common::print_skip(test, &r.to_string()),
        Err(e) => panic!("open ethtool: {e}"),
    };
    let mut nd = ncdevmem::netlink::netdev::Netdev::open().expect("netdev family");
    assert_eq!(
        queue_ids(&nd.queue_get_dump(ifindex).unwrap()),
        (vec![0], vec![0])
    );

    et.channels_set(ifindex, Some(2), Some(2), None)
        .expect("channels-set rx 2 tx 2 on veth0");
    let c = et.channels_get(ifindex).unwrap();
    assert_eq!((c.rx_count, c.tx_count), (Some(2), Some(2)));
    assert_eq!(
        queue_ids(&nd.queue_get_dump(ifindex).unwrap()),
        (vec![0, 1], vec![0, 1]),
        "two real RX queues after the set"
    );

    // The probe's shrink request for an rx/tx driver, back to one queue.
    assert_eq!(shrink_rx_request(&c, 1), (Some(1), Some(1), None));
    let (rx, tx, combined) = shrink_rx_request(&c, 1);
    et.channels_set(ifindex, rx, tx, combined)
        .expect("channels-set rx 1 tx 1");
    let c = et.channels_get(ifindex).unwrap();
    assert_eq!(
        (c.rx_count, c.tx_count, c.combined_count),
        (Some(1), Some(1), None)
    );
    assert_eq!(
        queue_ids(&nd.queue_get_dump(ifindex).unwrap()),
        (vec![0], vec![0])
    );

    // Above the maximum: refused at the attribute, nothing changed.
    let e = nl_err(et.channels_set(ifindex, Some(3), None, None));
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert_eq!(
        e.ext_msg.as_deref(),
        Some("requested channel count exceeds maximum")
    );
    assert_eq!(e.bad_attr.as_deref(), Some("ETHTOOL_A_CHANNELS_RX_COUNT"));
    assert!(
        e.to_string().starts_with(&format!(
            "ethtool channels-set on veth0 (ifindex {ifindex}), rx 3: EINVAL"
        )),
        "{e}"
    );
    // Combined on a driver without combined channels: also above its maximum (0).
    let e = nl_err(et.channels_set(ifindex, None, None, Some(1)));
    assert_eq!(
        (e.errno, e.ext_msg.as_deref(), e.bad_attr.as_deref()),
        (
            libc::EINVAL,
            Some("requested channel count exceeds maximum"),
            Some("ETHTOOL_A_CHANNELS_COMBINED_COUNT")
        )
    );
    assert_eq!(
        et.channels_get(ifindex).unwrap(),
        c,
        "refusals changed nothing"
    );
}

#[test]
fn rings_set_refused_on_veth() {
    let test = "rings_set_refused_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let mut et = match skip_if_family_missing(Ethtool::open(), "ethtool") {
        Ok(et) => et,
        Err(Error::Skip(r)) => return common::print_skip(test, &r.to_string()),
        Err(e) => panic!("open ethtool: {e}"),
    };
    let e = nl_err(et.rings_get(ifindex));
    assert_eq!(
        (e.errno, e.ext_msg.as_deref()),
        (libc::EOPNOTSUPP, None),
        "{e}"
    );

    // Turning header split on (with hds-thresh 0), off, or back to "unknown": the kernel
    // refuses at the tcp-data-split attribute before anything else.
    for (split, thresh) in [
        (TcpDataSplit::Enabled, Some(0)),
        (TcpDataSplit::Disabled, None),
        (TcpDataSplit::Unknown, None),
    ] {
        let e = nl_err(et.rings_set_hds(ifindex, split, thresh));
        assert_eq!(e.errno, libc::EOPNOTSUPP, "{split:?}: {e}");
        assert_eq!(
            e.ext_msg.as_deref(),
            Some("setting TCP data split is not supported"),
            "{split:?}"
        );
        assert_eq!(
            e.bad_attr.as_deref(),
            Some("ETHTOOL_A_RINGS_TCP_DATA_SPLIT"),
            "{split:?}"
        );
    }
    let e = nl_err(et.rings_set_hds(ifindex, TcpDataSplit::Enabled, Some(0)));
    assert_eq!(
        e.to_string(),
        format!(
            "ethtool rings-set on veth0 (ifindex {ifindex}), tcp-data-split enabled, hds-thresh 0: \
             EOPNOTSUPP (Operation not supported); kernel: \"setting TCP data split is not \
             supported\"; at ETHTOOL_A_RINGS_TCP_DATA_SPLIT"
        )
    );
}

#[test]
fn ethtool_ioctls_on_veth() {
    let test = "ethtool_ioctls_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    let io = EthtoolIoctl::open("veth0").expect("ioctl socket");

    let d = io.drvinfo().expect("GDRVINFO on veth0");
    assert_eq!(d.driver, "veth");
    assert_eq!(d.bus_info, "", "a virtual device has no bus address");

    let eop = |r: (String, i32), cmd: &str| {
        assert_eq!(r.1, libc::EOPNOTSUPP, "{cmd}: {}", r.0);
        assert_eq!(r.0, format!("ioctl(SIOCETHTOOL, {cmd}) on veth0"));
    };
    eop(sys_err(io.rx_rings()), "ETHTOOL_GRXRINGS");
    eop(sys_err(io.rule_count()), "ETHTOOL_GRXCLSRLCNT");
    let fs = tcp4_flow_spec(
        None,
        ("198.51.100.1".parse().unwrap(), 5201),
        0,
        RX_CLS_LOC_ANY,
    );
    eop(sys_err(io.rule_insert(&fs)), "ETHTOOL_SRXCLSRLINS");
    eop(sys_err(io.rule_delete(0)), "ETHTOOL_SRXCLSRLDEL");
    eop(sys_err(io.rss_get()), "ETHTOOL_GRSSH");
    eop(sys_err(io.rss_set(&[0, 0, 0, 0])), "ETHTOOL_SRSSH");
    let e = io.rule_insert(&fs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ioctl(SIOCETHTOOL, ETHTOOL_SRXCLSRLINS) on veth0: EOPNOTSUPP (Operation not supported)"
    );

    // Features: the name list is the kernel's (core strings, so veth has them too).
    let names = io.feature_names().expect("GSSET_INFO + GSTRINGS");
    let bit = names
        .iter()
        .position(|n| n == NTUPLE_FEATURE)
        .expect("rx-ntuple-filter among the feature names") as u32;
    assert!(names.iter().any(|n| n == "rx-gro"), "{names:?}");
    let words = feature_words(names.len() as u32);
    let blocks = io.features_get(words).expect("GFEATURES");
    assert_eq!(
        blocks.len(),
        words as usize,
        "the kernel has as many blocks as names need"
    );
    let mask = 1u32 << (bit % 32);
    let b = blocks[(bit / 32) as usize];
    assert_eq!(b.active & mask, 0, "ntuple is off on veth");
    assert_eq!(b.available & mask, 0, "and veth cannot change it");

    // SFEATURES: ETHTOOL_F_UNSUPPORTED (1) for both directions; nothing changes.
    for on in [true, false] {
        let f = io
            .features_set(words, bit, on)
            .expect("SFEATURES answers with flags");
        assert_eq!(f.0, 1, "on={on}: ETHTOOL_F_UNSUPPORTED only");
        assert!(f.unsupported() && !f.wish());
    }
    assert_eq!(
        io.features_get(words).unwrap()[(bit / 32) as usize].active & mask,
        0
    );
    // A block count that is not the kernel's: EINVAL.
    let (call, errno) = sys_err(io.features_set(words + 1, bit, true));
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES) on veth0",
            libc::EINVAL
        )
    );

    // lo has no ethtool driver ops at all.
    let lo = EthtoolIoctl::open("lo").unwrap();
    eop_lo(sys_err(lo.drvinfo()));
    fn eop_lo(r: (String, i32)) {
        assert_eq!(
            r,
            (
                "ioctl(SIOCETHTOOL, ETHTOOL_GDRVINFO) on lo".into(),
                libc::EOPNOTSUPP
            )
        );
    }
}

fn memfd() -> OwnedFd {
    nix::sys::memfd::memfd_create("ncdevmem-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .expect("memfd_create")
}

#[test]
fn real_nic_answers_on_veth() {
    let test = "real_nic_answers_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let mut nic = match RealNic::open("veth0") {
        Ok(n) => n,
        Err(e) if ncdevmem::netlink::is_family_missing(&e) => {
            return common::print_skip(test, &format!("{e}"))
        }
        Err(e) => panic!("RealNic::open(veth0): {e}"),
    };
    assert_eq!((nic.ifname(), nic.ifindex()), ("veth0", ifindex));
    assert_eq!(nic.drvinfo().unwrap().driver, "veth");
    assert_eq!(sys_err(nic.rx_rings()).1, libc::EOPNOTSUPP);

    // Header split: rings are not supported on veth.
    let e = nl_err(nic.hds_get());
    assert_eq!((e.errno, e.op.as_str()), (libc::EOPNOTSUPP, "rings-get"));
    let e = nl_err(nic.hds_set(TcpDataSplit::Enabled, Some(0)));
    assert_eq!(
        (e.errno, e.ext_msg.as_deref()),
        (
            libc::EOPNOTSUPP,
            Some("setting TCP data split is not supported")
        )
    );

    // Channels: rx/tx driver, applied and restored.
    let c0 = nic.channels_get().unwrap();
    assert_eq!(
        (
            c0.rx_max,
            c0.tx_max,
            c0.rx_count,
            c0.tx_count,
            c0.combined_count
        ),
        (Some(2), Some(2), Some(1), Some(1), None)
    );
    nic.channels_set(ChannelsSet {
        rx: Some(2),
        tx: Some(2),
        combined: None,
    })
    .unwrap();
    assert_eq!(queue_ids(&nic.queues().unwrap()), (vec![0, 1], vec![0, 1]));
    nic.channels_set(ChannelsSet {
        rx: c0.rx_count,
        tx: c0.tx_count,
        combined: None,
    })
    .unwrap();
    assert_eq!(nic.channels_get().unwrap(), c0);

    // Queues: rx0 and tx0, no NAPI (veth reports none), no owner.
    let q = nic.queues().unwrap();
    assert_eq!(queue_ids(&q), (vec![0], vec![0]));
    for q in &q {
        assert_eq!(q.ifindex, ifindex);
        assert_eq!(
            (q.napi_id, q.dmabuf, q.io_uring, q.xsk),
            (None, None, false, false)
        );
    }

    // RSS: no indirection table on veth.
    let (call, errno) = sys_err(nic.rss_get());
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) on veth0",
            libc::EOPNOTSUPP
        )
    );
    let (call, errno) = sys_err(nic.rss_set(&RssTable { indir: vec![0; 4] }));
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_SRSSH) on veth0",
            libc::EOPNOTSUPP
        )
    );

    // ntuple feature: off, and not changeable.
    assert!(
        !nic.ntuple_get().unwrap(),
        "rx-ntuple-filter is off on veth"
    );
    for on in [true, false] {
        let (call, errno) = sys_err(nic.ntuple_set(on));
        assert_eq!(errno, libc::EOPNOTSUPP, "{call}");
        assert!(call.contains("ETHTOOL_F_UNSUPPORTED"), "{call}");
    }
    assert!(!nic.ntuple_get().unwrap(), "still off");

    // ntuple rules: none can be listed, inserted or deleted.
    let (call, errno) = sys_err(nic.flow_rules());
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_GRXCLSRLCNT) on veth0",
            libc::EOPNOTSUPP
        )
    );
    for src in [Some(("198.51.100.2".parse().unwrap(), 5201)), None] {
        let rule = FlowRule {
            flow_type: FlowType::Tcp4,
            src,
            dst: ("198.51.100.1".parse().unwrap(), 5201),
            queue: 0,
        };
        let (call, errno) = sys_err(nic.flow_rule_insert(&rule));
        assert_eq!(
            (call.as_str(), errno),
            (
                "ioctl(SIOCETHTOOL, ETHTOOL_SRXCLSRLINS) on veth0",
                libc::EOPNOTSUPP
            )
        );
    }
    let rule6 = FlowRule {
        flow_type: FlowType::Tcp6,
        src: None,
        dst: ("2001:db8::1".parse().unwrap(), 5201),
        queue: 0,
    };
    assert_eq!(sys_err(nic.flow_rule_insert(&rule6)).1, libc::EOPNOTSUPP);
    let (call, errno) = sys_err(nic.flow_rule_delete(0));
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_SRXCLSRLDEL) on veth0",
            libc::EOPNOTSUPP
        )
    );

    // bind-rx: veth has no queue management; refused at the ifindex.
    let fd = memfd();
    let e = nl_err(nic.bind_rx(&BindRxRequest::new(ifindex, fd.as_fd(), &[0])));
    assert_eq!(
        (e.errno, e.bad_attr.as_deref()),
        (libc::EOPNOTSUPP, Some("NETDEV_A_DMABUF_IFINDEX"))
    );

    // Nothing was left changed.
    assert_eq!(nic.channels_get().unwrap(), c0);
    assert_eq!(queue_ids(&nic.queues().unwrap()), (vec![0], vec![0]));
}

/// veth has no RSS (no `get_rxfh`/`set_rxfh`) and no ntuple filters (no `set_rxnfc`): every
/// RSS-context ioctl and the `FLOW_RSS` insert answer EOPNOTSUPP, the RSS_GET dump lists no
/// context, and the steering plan falls back to one rule (which veth refuses too), with the
/// NIC unchanged.
#[test]
fn rss_context_calls_on_veth() {
    let test = "rss_context_calls_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    let io = EthtoolIoctl::open("veth0").expect("ioctl socket");
    let eop = |r: (String, i32), cmd: &str| {
        assert_eq!(
            r,
            (
                format!("ioctl(SIOCETHTOOL, {cmd}) on veth0"),
                libc::EOPNOTSUPP
            )
        );
    };
    eop(sys_err(io.rss_context_get(1)), "ETHTOOL_GRSSH");
    eop(sys_err(io.rss_context_create(&[0; 4])), "ETHTOOL_SRSSH");
    eop(sys_err(io.rss_context_delete(1)), "ETHTOOL_SRSSH");
    let fs = tcp4_flow_spec(
        None,
        ("198.51.100.1".parse().unwrap(), 5201),
        0,
        RX_CLS_LOC_ANY,
    );
    eop(sys_err(io.rule_insert_rss(&fs, 1)), "ETHTOOL_SRXCLSRLINS");
    // Context 0 is never deleted (that request would reset the default table): refused
    // before the ioctl.
    match io.rss_context_delete(0) {
        Err(Error::Failure(m)) => assert!(m.contains("cannot be deleted"), "{m}"),
        other => panic!("expected a refusal before the ioctl, got {other:?}"),
    }

    let mut nic = match RealNic::open("veth0") {
        Ok(n) => n,
        Err(e) if ncdevmem::netlink::is_family_missing(&e) => {
            return common::print_skip(test, &format!("{e}"))
        }
        Err(e) => panic!("RealNic::open(veth0): {e}"),
    };
    assert_eq!(
        nic.rss_contexts().expect("RSS_GET dump"),
        Vec::<u32>::new(),
        "the dump skips a device without get_rxfh"
    );
    let before = NicSnapshot::take(&mut nic);
    assert_eq!(before.contexts, Fact::Known(Default::default()));
    let support = rss_context_support(&mut nic).expect("the probe");
    assert_eq!(
        support,
        ContextSupport::Unavailable(
            "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) on veth0: EOPNOTSUPP (Operation not supported)"
                .into()
        )
    );
    let req = SteerRequest {
        start_queue: 1,
        num_queues: 1,
        flows: 2,
        target: FlowTarget {
            server: "198.51.100.1".parse().unwrap(),
            client: None,
            port: 5201,
        },
    };
    let plan = plan_steering(
        &SteerRequest {
            num_queues: 2,
            ..req
        },
        &support,
    )
    .unwrap();
    assert!(plan.shared_queue.is_some(), "{plan:?}");
    let shared = SharedNic::new(Box::new(nic));
    let (call, errno) = sys_err(apply_steering(&shared, &plan, true));
    assert_eq!(
        (call.as_str(), errno),
        (
            "ioctl(SIOCETHTOOL, ETHTOOL_SRXCLSRLINS) on veth0",
            libc::EOPNOTSUPP
        )
    );
    let after = shared.with(|n| Ok(NicSnapshot::take(n))).unwrap();
    assert!(before.diff(&after).is_empty(), "{:?}", before.diff(&after));
}

#[test]
fn real_nic_unknown_interface_is_a_usage_error() {
    // No namespace needed: the name is resolved before any socket is opened.
    match RealNic::open("nosuchdev0") {
        Err(Error::Usage(m)) => {
            assert_eq!(
                m,
                "-f: no network interface named \"nosuchdev0\" in this network namespace"
            )
        }
        other => panic!("expected a usage error, got {other:?}"),
    }
}
