//! Real-kernel tests of the generic-netlink client: family resolution, netdev queries and
//! every bind-rx / bind-tx refusal a 6.18 kernel gives on a veth, ethtool channels and rings.
//!
//! They run as root in a fresh network namespace with a veth pair (`veth0`–`veth1`), created
//! and deleted by `common::NetNs`. Without root they print `skip: <test>: <reason>`.
//! Expected answers were measured on 6.18.44 (`docs/kernel-interface.md#bind-rx-and-bind-tx`,
//! `#netdev-queries`): no device here has
//! queue management ops, so every well-formed bind is refused after attribute validation.

mod common;

use std::os::fd::{AsFd, OwnedFd};

use common::{NetNs, NetNsPair};
use ncdevmem::caps::skip_if_family_missing;
use ncdevmem::error::{Error, NlError, EXIT_SKIP};
use ncdevmem::netlink::ethtool::Ethtool;
use ncdevmem::netlink::netdev::{BindRxRequest, Netdev, QueueNest, QueueType};
use ncdevmem::netlink::{is_family_missing, resolve_family, NlSocket};

/// Root and `ip` available: a namespace with veth0–veth1, not yet entered.
fn veth_ns(test: &str) -> Option<NetNs> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    Some(NetNs::with_veth("veth0", "veth1").expect("create netns with veth0-veth1"))
}

/// `Netdev::open` in the current namespace, or a skip when the kernel lacks the family.
fn netdev(test: &str) -> Option<Netdev> {
    match skip_if_family_missing(Netdev::open(), "netdev") {
        Ok(n) => Some(n),
        Err(Error::Skip(reason)) => {
            common::print_skip(test, &reason.to_string());
            None
        }
        Err(e) => panic!("open netdev: {e}"),
    }
}

fn memfd() -> OwnedFd {
    nix::sys::memfd::memfd_create("ncdevmem-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .expect("memfd_create")
}

fn nl_err(r: Result<impl std::fmt::Debug, Error>) -> NlError {
    match r {
        Err(Error::Netlink(e)) => *e,
        other => panic!("expected a netlink error, got {other:?}"),
    }
}

#[test]
fn families_resolve() {
    let test = "families_resolve";
    let Some(ns) = veth_ns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    let Some(nd) = netdev(test) else { return };
    let f = nd.family();
    assert_eq!((f.name.as_str(), f.version), ("netdev", 1));
    assert!(
        f.id > 16,
        "dynamic family ids follow GENL_ID_CTRL (16): {}",
        f.id
    );
    assert!(
        f.mcast_group("mgmt").is_some() && f.mcast_group("page-pool").is_some(),
        "{f:?}"
    );

    let et = skip_if_family_missing(Ethtool::open(), "ethtool").expect("ethtool family");
    let e = et.family();
    assert_eq!((e.name.as_str(), e.version), ("ethtool", 1));
    assert!(e.mcast_group("monitor").is_some(), "{e:?}");
    assert_ne!(e.id, f.id);

    let mut sock = NlSocket::open().expect("netlink socket");
    let err = resolve_family(&mut sock, "nosuchfam").unwrap_err();
    assert!(is_family_missing(&err), "{err}");
    assert_eq!(err.errno(), Some(libc::ENOENT));
    let skip = skip_if_family_missing(Err::<(), _>(err), "nosuchfam").unwrap_err();
    assert_eq!(skip.exit_code(), EXIT_SKIP);
    assert_eq!(
        skip.to_string(),
        "skip: generic netlink family \"nosuchfam\" is not registered in this kernel"
    );
}

#[test]
fn dev_get_on_veth() {
    let test = "dev_get_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(mut nd) = netdev(test) else { return };
    let d = nd.dev_get(ifindex).expect("dev-get veth0");
    assert_eq!(d.ifindex, ifindex);
    // veth: BASIC | REDIRECT | RX_SG (35) and TIMESTAMP | HASH | VLAN_TAG (7), no zc segs.
    assert_eq!(d.xdp_features, 35);
    assert_eq!(d.xdp_rx_metadata_features, 7);
    assert_eq!(d.xdp_zc_max_segs, None);

    let all = nd.dev_get_dump().expect("dev-get dump");
    let mut ids: Vec<u32> = all.iter().map(|d| d.ifindex).collect();
    ids.sort_unstable();
    let peer = ns.ifindex("veth1").expect("ifindex");
    let mut want = vec![1, ifindex, peer];
    want.sort_unstable();
    assert_eq!(
        ids, want,
        "lo and the two veth ends, nothing from other namespaces"
    );

    let e = nl_err(nd.dev_get(9999));
    assert_eq!(e.errno, libc::ENODEV, "{e}");
}

#[test]
fn queue_get_on_veth() {
    let test = "queue_get_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(mut nd) = netdev(test) else { return };
    let qs = nd.queue_get_dump(ifindex).expect("queue-get dump");
    let mut got: Vec<(QueueType, u32)> = qs.iter().map(|q| (q.queue_type, q.id)).collect();
    got.sort_by_key(|&(t, id)| (t.value(), id));
    assert_eq!(got, vec![(QueueType::Rx, 0), (QueueType::Tx, 0)]);
    for q in &qs {
        assert_eq!(q.ifindex, ifindex);
        assert_eq!(
            (q.napi_id, q.dmabuf, q.io_uring, q.xsk),
            (None, None, false, false)
        );
    }
    let rx0 = nd
        .queue_get(ifindex, QueueType::Rx, 0)
        .expect("queue-get rx0");
    assert_eq!(
        rx0,
        qs.iter()
            .find(|q| q.queue_type == QueueType::Rx)
            .cloned()
            .unwrap()
    );

    let e = nl_err(nd.queue_get(ifindex, QueueType::Rx, 99));
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert!(e.to_string().contains("veth0 (ifindex"), "{e}");
}

#[test]
fn napi_and_page_pools_on_veth() {
    let test = "napi_and_page_pools_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(mut nd) = netdev(test) else { return };
    // veth has NAPI only with GRO on (off by default), and no visible page pools.
    assert_eq!(nd.napi_get_dump(ifindex).expect("napi-get dump"), vec![]);
    assert_eq!(nd.page_pool_get_dump().expect("page-pool-get dump"), vec![]);
}

#[test]
fn bind_rx_on_veth_is_refused_at_ifindex() {
    let test = "bind_rx_on_veth_is_refused_at_ifindex";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(nd) = netdev(test) else { return };
    let fd = memfd();

    let e = nl_err(nd.bind_rx(ifindex, fd.as_fd(), &[0], None));
    assert_eq!(e.errno, libc::EOPNOTSUPP, "{e}");
    assert_eq!(e.bad_attr.as_deref(), Some("NETDEV_A_DMABUF_IFINDEX"));
    assert_eq!(e.ext_msg, None);
    assert_eq!(
        e.to_string(),
        format!(
            "netdev bind-rx on veth0 (ifindex {ifindex}), queue 0: EOPNOTSUPP (Operation not \
             supported); at NETDEV_A_DMABUF_IFINDEX"
        )
    );

    // C ncdevmem's probe: nests with nothing inside pass validation and meet the same refusal.
    let req = BindRxRequest::new(ifindex, fd.as_fd(), &[]).empty_queue_nests(2);
    let e = nl_err(nd.bind_rx_request(&req));
    assert_eq!(
        (e.errno, e.bad_attr.as_deref()),
        (libc::EOPNOTSUPP, Some("NETDEV_A_DMABUF_IFINDEX"))
    );
    assert!(e.target.ends_with("2 empty queue nests"), "{e}");
}

#[test]
fn bind_rx_attribute_errors() {
    let test = "bind_rx_attribute_errors";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(nd) = netdev(test) else { return };
    let fd = memfd();

    // ifindex 0: below the policy minimum.
    let e = nl_err(nd.bind_rx(0, fd.as_fd(), &[0], None));
    assert_eq!(e.errno, libc::ERANGE, "{e}");
    assert_eq!(e.ext_msg.as_deref(), Some("integer out of range"));
    assert_eq!(e.bad_attr.as_deref(), Some("NETDEV_A_DMABUF_IFINDEX"));

    // Queue type 2: out of the queue-type range; the path names the nest and its index.
    let mut req = BindRxRequest::new(ifindex, fd.as_fd(), &[0]);
    req.queues = vec![QueueNest {
        id: Some(0),
        queue_type: Some(2),
    }];
    let e = nl_err(nd.bind_rx_request(&req));
    assert_eq!(e.errno, libc::ERANGE, "{e}");
    assert_eq!(e.ext_msg.as_deref(), Some("integer out of range"));
    assert_eq!(
        e.bad_attr.as_deref(),
        Some("NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE")
    );
    let shown = e.to_string();
    assert!(
        shown.contains("ERANGE (Numerical result out of range)"),
        "{shown}"
    );
    assert!(
        shown.contains("at NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE"),
        "{shown}"
    );

    // No fd: a missing required attribute, reported by number.
    let mut req = BindRxRequest::new(ifindex, fd.as_fd(), &[0]);
    req.fd = None;
    let e = nl_err(nd.bind_rx_request(&req));
    assert_eq!(
        (e.errno, e.missing_attr, e.ext_msg.as_deref()),
        (libc::EINVAL, Some(3), None)
    );
    assert!(e.to_string().ends_with("missing attribute 3"), "{e}");

    // Unknown device.
    let e = nl_err(nd.bind_rx(9999, fd.as_fd(), &[0], None));
    assert_eq!(e.errno, libc::ENODEV, "{e}");

    // rx-page-size (attr 5) is newer than 6.18's dmabuf policy (max attr 4).
    let e = nl_err(nd.bind_rx(ifindex, fd.as_fd(), &[0], Some(16384)));
    if e.errno == libc::EINVAL {
        assert_eq!(
            e.bad_attr.as_deref(),
            Some("NETDEV_A_DMABUF_RX_PAGE_SIZE"),
            "{e}"
        );
        assert_eq!(e.ext_msg.as_deref(), Some("Unknown attribute type"), "{e}");
        assert!(e.target.ends_with("rx-page-size 16384"), "{e}");
    } else {
        // A kernel that knows the attribute refuses the veth as usual.
        assert_eq!(e.errno, libc::EOPNOTSUPP, "{e}");
    }
}

#[test]
fn bind_tx_on_veth_is_refused_with_message() {
    let test = "bind_tx_on_veth_is_refused_with_message";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let Some(nd) = netdev(test) else { return };
    let fd = memfd();
    let e = nl_err(nd.bind_tx(ifindex, fd.as_fd()));
    assert_eq!(e.errno, libc::EOPNOTSUPP, "{e}");
    assert_eq!(
        e.ext_msg.as_deref(),
        Some("Driver does not support netmem TX")
    );
    assert_eq!(e.bad_attr, None);
    assert_eq!(
        e.to_string(),
        format!(
            "netdev bind-tx on veth0 (ifindex {ifindex}): EOPNOTSUPP (Operation not supported); \
             kernel: \"Driver does not support netmem TX\""
        )
    );
}

#[test]
fn ethtool_channels_and_rings_on_veth() {
    let test = "ethtool_channels_and_rings_on_veth";
    let Some(ns) = veth_ns(test) else { return };
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let mut et = match skip_if_family_missing(Ethtool::open(), "ethtool") {
        Ok(et) => et,
        Err(Error::Skip(r)) => return common::print_skip(test, &r.to_string()),
        Err(e) => panic!("open ethtool: {e}"),
    };
    let c = et.channels_get(ifindex).expect("channels-get veth0");
    assert_eq!(
        (c.rx_max, c.tx_max, c.rx_count, c.tx_count),
        (Some(2), Some(2), Some(1), Some(1))
    );
    assert_eq!((c.combined_max, c.combined_count), (None, None));
    assert_eq!(c.rx_queues(), 1);

    let e = nl_err(et.rings_get(ifindex));
    assert_eq!(e.errno, libc::EOPNOTSUPP, "{e}");
    assert!(
        e.to_string()
            .starts_with("ethtool rings-get on veth0 (ifindex"),
        "{e}"
    );

    let e = nl_err(et.channels_get(1));
    assert_eq!(e.errno, libc::EOPNOTSUPP, "lo has no channels: {e}");
}

#[test]
fn netns_guard_deletes_its_namespace() {
    let test = "netns_guard_deletes_its_namespace";
    let Some(ns) = veth_ns(test) else { return };
    let name = ns.name().to_string();
    let listed = || {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name.as_str()))
    };
    assert!(listed(), "{name} exists while the guard lives");
    let out = ns
        .exec(&["ip", "-o", "link", "show", "veth1"])
        .expect("ip netns exec");
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("veth1"));
    {
        let _in = ns.enter().expect("enter netns");
        assert!(
            nix::net::if_::if_nametoindex("veth0").is_ok(),
            "veth0 visible inside"
        );
    }
    drop(ns);
    assert!(!listed(), "{name} is gone after drop");
}

#[test]
fn netns_pair_carries_tcp_over_veth() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    let test = "netns_pair_carries_tcp_over_veth";
    if let Some(reason) = common::skip_reason() {
        return common::print_skip(test, &reason);
    }
    let pair = NetNsPair::new().expect("create netns pair");
    for (b_addr, port) in [(common::ADDR_B_V4, 5201), (common::ADDR_B_V6, 5202)] {
        let listener = {
            let _in = pair.b.enter().expect("enter B");
            TcpListener::bind((b_addr, port)).expect("listen in B")
        };
        let mut client = {
            let _in = pair.a.enter().expect("enter A");
            TcpStream::connect((b_addr, port)).expect("connect from A")
        };
        let (mut server, peer) = listener.accept().expect("accept in B");
        let want_peer = if b_addr.contains(':') {
            common::ADDR_A_V6
        } else {
            common::ADDR_A_V4
        };
        assert_eq!(peer.ip().to_string(), want_peer);
        client
            .write_all(b"\x01\x02\x03\x04\x05\x06\n")
            .expect("send");
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).expect("receive");
        assert_eq!(got, b"\x01\x02\x03\x04\x05\x06\n");
    }
}
