//! Real-kernel tests of devmem TX on this machine (6.18, no devmem-capable NIC, no udmabuf):
//! bind-tx on a veth is refused and the client path turns that into a skip carrying the
//! kernel's message verbatim; the zerocopy send path (`sendmsg(MSG_ZEROCOPY)` with an
//! `SCM_DEVMEM_DMABUF` cmsg) and the completion reader run for real over loopback, where a
//! dmabuf id of 0 means "no dma-buf" so real buffer addresses can stand in for dma-buf offsets;
//! unknown ids and a missing `SO_ZEROCOPY` are refused with `EINVAL`.
//!
//! Every test runs in a fresh network namespace (`common::NetNs`, always deleted) and sends
//! only over that namespace's loopback. Without root they print `skip: <test>: <reason>`.
//! Expected answers: `docs/kernel-interface.md#bind-rx-and-bind-tx` (bind-tx) and `#devmem-tx`
//! (TX socket API).

mod common;

use std::io::Read;
use std::net::{SocketAddr, SocketAddrV6, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicI32;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::NetNs;
use ncdevmem::caps::skip_if_family_missing;
use ncdevmem::error::{Error, EXIT_SKIP};
use ncdevmem::netlink::netdev::Netdev;
use ncdevmem::sys::mmap::MappedRegion;
use ncdevmem::sys::socket;
use ncdevmem::sys::uapi::walk_cmsgs;
use ncdevmem::sys::zerocopy::{set_zerocopy, ZerocopySocket};
use ncdevmem::tx::devmem::{
    parse_completion, transmit, CompletionTracker, DmabufIov, ErrqueueRead, PatternSource,
    TxConfig, TxSocket, ERRQUEUE_CONTROL_LEN, MAX_IOV,
};
use ncdevmem::udmabuf::Memfd;
use ncdevmem::validate::Pattern;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Root and `ip` available: a fresh namespace (not yet entered).
fn netns(test: &str) -> Option<NetNs> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    Some(NetNs::new().expect("create netns"))
}

/// A connected loopback TCP pair in the current namespace: the client socket, and a thread
/// that reads everything the server side receives until EOF.
fn loopback_pair(addr: &str) -> (OwnedFd, JoinHandle<Vec<u8>>) {
    let listen_at: SocketAddrV6 = format!("[{addr}]:0").parse().expect("address");
    let listener = socket::tcp_listen(listen_at, None).expect("listen on loopback");
    let port = match socket::local_addr(listener.as_fd()).expect("getsockname") {
        SocketAddr::V6(a) => a.port(),
        SocketAddr::V4(a) => a.port(),
    };
    let peer = SocketAddrV6::new(*listen_at.ip(), port, 0, 0);
    let client = ncdevmem::conn::connect_timeout(peer, None, Some("lo"), Some(TIMEOUT))
        .expect("connect over lo");
    let stop = AtomicI32::new(0);
    let (server, _) =
        ncdevmem::conn::accept_timeout(listener.as_fd(), Some(TIMEOUT), &stop).expect("accept");
    let reader = std::thread::spawn(move || {
        let mut s = TcpStream::from(server);
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("SO_RCVTIMEO");
        let mut v = Vec::new();
        s.read_to_end(&mut v).expect("read until EOF");
        v
    });
    (client, reader)
}

fn pattern(period: u32, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    Pattern::new(period).unwrap().fill(&mut v, 0);
    v
}

/// bind-tx of a memfd on a veth: the kernel says EOPNOTSUPP "Driver does not support netmem
/// TX", and the client's bind step turns that into a skip (exit 4) quoting it verbatim.
#[test]
fn bind_tx_on_veth_is_a_skip_with_the_kernels_message() {
    let test = "bind_tx_on_veth_is_a_skip_with_the_kernels_message";
    if let Some(reason) = common::skip_reason() {
        return common::print_skip(test, &reason);
    }
    let ns = NetNs::with_veth("veth0", "veth1").expect("netns with veth0-veth1");
    let ifindex = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter netns");
    let nd = match skip_if_family_missing(Netdev::open(), "netdev") {
        Ok(n) => n,
        Err(Error::Skip(r)) => return common::print_skip(test, &r.to_string()),
        Err(e) => panic!("open netdev: {e}"),
    };
    let memfd = Memfd::create(c"ncdevmem-test-tx", 1 << 20, false).expect("memfd");
    let e = ncdevmem::tx::bind_tx(&nd, ifindex, "veth0", memfd.as_fd()).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_SKIP, "{e}");
    assert_eq!(e.errno(), None, "a skip, not a failure: {e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "skip: veth0 does not support devmem TX: netdev bind-tx on veth0 (ifindex \
             {ifindex}): EOPNOTSUPP (Operation not supported); kernel: \"Driver does not \
             support netmem TX\""
        )
    );
}

/// Plain MSG_ZEROCOPY sends through the cmsg path with dmabuf id 0 and real buffers: the
/// completions arrive with origin 5 and ranges covering exactly the sends made, in order of
/// send numbers; the peer receives exactly the bytes. IPv6 and v4-mapped loopback.
#[test]
fn zerocopy_completions_over_loopback_with_dmabuf_id_0() {
    let test = "zerocopy_completions_over_loopback_with_dmabuf_id_0";
    let Some(ns) = netns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    for addr in ["::1", "::ffff:127.0.0.1"] {
        let (fd, reader) = loopback_pair(addr);
        set_zerocopy(fd.as_fd(), true).expect("SO_ZEROCOPY");
        let mut sock = ZerocopySocket::new(fd);
        // Eight 4 KiB buffers with different bytes; they stay untouched until completion.
        let bufs: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 4096]).collect();
        let mut tracker = CompletionTracker::new();
        for b in &bufs {
            let n = sock
                .send_user(&[b.as_slice()], Some(0))
                .unwrap_or_else(|e| panic!("sendmsg with dmabuf id 0 on [{addr}]: errno {e}"));
            assert_eq!(n, 4096);
            tracker.on_send();
        }
        let mut control = vec![0u8; ERRQUEUE_CONTROL_LEN];
        let mut ranges = Vec::new();
        let mut levels = Vec::new();
        let deadline = Instant::now() + TIMEOUT;
        while tracker.pending() > 0 {
            assert!(
                Instant::now() < deadline,
                "[{addr}]: completions missing: {ranges:?}"
            );
            match sock.recv_errqueue(&mut control) {
                Ok(read) => {
                    let c = parse_completion(&read, &control).expect("a zerocopy completion");
                    let cm = walk_cmsgs(&control[..read.control_len])
                        .next()
                        .expect("a cmsg")
                        .unwrap();
                    levels.push((cm.level, cm.ty));
                    assert_ne!(read.msg_flags & libc::MSG_ERRQUEUE, 0);
                    tracker
                        .complete(c.lo, c.hi)
                        .expect("range of outstanding sends");
                    ranges.push((c.lo, c.hi, c.copied));
                }
                Err(libc::EAGAIN) => {
                    sock.wait_errqueue(Duration::from_millis(100))
                        .expect("poll(POLLERR)");
                }
                Err(e) => panic!("recvmsg(MSG_ERRQUEUE): errno {e}"),
            }
        }
        eprintln!("[{addr}]: completions {ranges:?}, cmsg (level, type) {levels:?}");
        // AF_INET6 sockets (ours, also for v4-mapped peers) get SOL_IPV6/IPV6_RECVERR
        // (measured on 6.18); AF_INET sockets would get SOL_IP/IP_RECVERR.
        assert!(
            levels
                .iter()
                .all(|&l| l == (libc::SOL_IPV6, libc::IPV6_RECVERR)),
            "{levels:?}"
        );
        let covered: u64 = ranges
            .iter()
            .map(|&(lo, hi, _)| u64::from(hi - lo) + 1)
            .sum();
        assert_eq!(covered, 8);
        assert!(tracker.complete_through(7));
        // The error queue is now empty.
        assert_eq!(sock.recv_errqueue(&mut control), Err(libc::EAGAIN));
        socket::shutdown_write(sock.fd()).expect("shutdown");
        let got = reader.join().expect("reader");
        assert_eq!(
            got,
            bufs.concat(),
            "[{addr}]: peer received exactly the bytes"
        );
    }
}

/// The sender loop on the real kernel: a memfd mapped twice stands in for the dma-buf (one
/// mapping written by the sender, the other giving the real addresses the kernel reads when
/// the cmsg id is 0). `-z 7` makes more than 1024 iovs per piece, the ring wraps many times,
/// and the peer must receive the pattern exactly.
#[test]
fn devmem_sender_runs_on_real_zerocopy_over_loopback() {
    let test = "devmem_sender_runs_on_real_zerocopy_over_loopback";
    let Some(ns) = netns(test) else { return };
    let _in = ns.enter().expect("enter netns");

    /// Turns dma-buf offsets into addresses in its own mapping of the memfd and sends with
    /// dmabuf id 0 (plain MSG_ZEROCOPY through the same cmsg path).
    struct EmulatedBinding {
        sock: ZerocopySocket,
        view: MappedRegion,
    }
    impl TxSocket for EmulatedBinding {
        fn send_dmabuf(&mut self, iovs: &[DmabufIov], _id: u32) -> Result<usize, i32> {
            let mut bufs = Vec::with_capacity(iovs.len());
            for i in iovs {
                bufs.push(
                    self.view
                        .bytes(i.offset, i.len as u64)
                        .map_err(|_| libc::EFAULT)?,
                );
            }
            self.sock.send_user(&bufs, Some(0))
        }
        fn recv_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32> {
            self.sock.recv_errqueue(control)
        }
        fn wait_errqueue(&mut self, timeout: Duration) -> Result<bool, i32> {
            self.sock.wait_errqueue(timeout)
        }
        fn socket_error(&mut self) -> Result<i32, i32> {
            self.sock.socket_error()
        }
    }

    let (fd, reader) = loopback_pair("::1");
    set_zerocopy(fd.as_fd(), true).expect("SO_ZEROCOPY");
    let memfd = Memfd::create(c"ncdevmem-test-tx", 64 << 10, false).expect("memfd");
    let mut mem = memfd.map().expect("map memfd for the sender");
    let mut sock = EmulatedBinding {
        sock: ZerocopySocket::new(fd),
        view: memfd.map().expect("map memfd for the kernel's reads"),
    };
    let total = 512 << 10;
    let cfg = TxConfig {
        chunk: Some(7),
        max_piece: 16 << 10,
        completion_timeout: TIMEOUT,
        ..TxConfig::new(1)
    };
    let mut src = PatternSource::new(
        ncdevmem::validate::StreamSpec::Periodic(7),
        total as u64,
        0,
        None,
    )
    .unwrap();
    let stop = AtomicI32::new(0);
    let (stats, result) = transmit(&mut sock, &mut mem, &mut src, &cfg, &stop, &mut Vec::new());
    eprintln!("{}", stats.summary_line(result.is_ok()));
    result.expect("transmit over loopback");
    socket::shutdown_write(sock.sock.fd()).expect("shutdown");
    let got = reader.join().expect("reader");
    assert!(
        got == pattern(7, total),
        "peer received the pattern exactly"
    );
    assert_eq!(stats.bytes, total as u64);
    assert_eq!(stats.pieces, 32);
    let iovs_per_piece = (16u64 << 10).div_ceil(7);
    let calls_per_piece = iovs_per_piece.div_ceil(MAX_IOV as u64);
    if stats.short_sends == 0 {
        assert_eq!(stats.iovs, 32 * iovs_per_piece);
        assert_eq!(stats.sends, 32 * calls_per_piece);
    } else {
        // A short send re-offers the rest of its batch in the next call.
        assert!(stats.iovs > 32 * iovs_per_piece);
        assert!(stats.sends > 32 * calls_per_piece);
    }
    assert_eq!(stats.completed_sends, stats.sends);
    assert!(stats.completions >= 1);
}

/// A binding id the kernel does not know (12345, or 1) is refused with EINVAL before any data
/// is taken, and the sender names the call; id 0 with offsets is refused without a call.
#[test]
fn unknown_dmabuf_id_is_einval_naming_the_call() {
    let test = "unknown_dmabuf_id_is_einval_naming_the_call";
    let Some(ns) = netns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    let (fd, reader) = loopback_pair("::1");
    set_zerocopy(fd.as_fd(), true).expect("SO_ZEROCOPY");
    let mut sock = ZerocopySocket::new(fd);
    let memfd = Memfd::create(c"ncdevmem-test-tx", 1 << 20, false).expect("memfd");
    let mut mem = memfd.map().expect("map memfd");

    let cfg = TxConfig::new(12345);
    let mut src =
        PatternSource::new(ncdevmem::validate::StreamSpec::Periodic(7), 6, 0, None).unwrap();
    let stop = AtomicI32::new(0);
    let (stats, result) = transmit(&mut sock, &mut mem, &mut src, &cfg, &stop, &mut Vec::new());
    let e = result.unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL));
    assert_eq!(
        e.to_string(),
        "sendmsg(MSG_ZEROCOPY, SCM_DEVMEM_DMABUF id 12345, 1 iovs, 6 bytes from dmabuf offset \
         0): EINVAL (Invalid argument)"
    );
    assert_eq!((stats.sends, stats.bytes), (0, 0));

    let one = [DmabufIov {
        offset: 0,
        len: 4096,
    }];
    assert_eq!(sock.send_dmabuf(&one, 1), Err(libc::EINVAL));
    assert_eq!(
        sock.send_dmabuf(&one, 0),
        Err(libc::EINVAL),
        "refused in user space"
    );
    let too_many = vec![one[0]; MAX_IOV + 1];
    assert_eq!(sock.send_dmabuf(&too_many, 1), Err(libc::EMSGSIZE));
    socket::shutdown_write(sock.fd()).expect("shutdown");
    assert!(
        reader.join().expect("reader").is_empty(),
        "nothing was sent"
    );
}

/// An SCM_DEVMEM_DMABUF cmsg naming a binding on a socket without SO_ZEROCOPY is EINVAL; id 0
/// ("no dma-buf") and no cmsg at all go out as ordinary copied sends (MSG_ZEROCOPY is ignored
/// without SO_ZEROCOPY), with no completion queued. Measured on 6.18.
#[test]
fn dmabuf_cmsg_without_so_zerocopy_is_einval() {
    let test = "dmabuf_cmsg_without_so_zerocopy_is_einval";
    let Some(ns) = netns(test) else { return };
    let _in = ns.enter().expect("enter netns");
    let (fd, reader) = loopback_pair("::ffff:127.0.0.1");
    let mut sock = ZerocopySocket::new(fd);
    let data = b"abcd";
    assert_eq!(sock.send_user(&[data], Some(1)), Err(libc::EINVAL));
    assert_eq!(sock.send_user(&[data], Some(12345)), Err(libc::EINVAL));
    assert_eq!(sock.send_user(&[data], Some(0)), Ok(4));
    assert_eq!(sock.send_user(&[data], None), Ok(4));
    let mut control = vec![0u8; ERRQUEUE_CONTROL_LEN];
    assert_eq!(
        sock.recv_errqueue(&mut control),
        Err(libc::EAGAIN),
        "no zerocopy, no completion"
    );
    socket::shutdown_write(sock.fd()).expect("shutdown");
    assert_eq!(reader.join().expect("reader"), b"abcdabcd");
}
