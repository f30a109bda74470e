//! Real-kernel tests of the sources of a run's figures (`src/figures/`, `src/sys/cpu.rs`,
//! `src/sys/tcp.rs`, the netdev statistics): `/proc/stat` accounting, per-thread CPU time,
//! CPU affinity, `TCP_INFO` and `TCP_CONGESTION` over loopback, `SO_INCOMING_NAPI_ID` over
//! loopback and over a veth with GRO, and netdev `qstats-get` / `page-pool-stats-get`.
//!
//! Loopback tests run as any user in the caller's namespace; the veth and netlink tests need
//! root and make their own namespaces (`common::NetNs`, always removed), or print
//! `skip: <test>: <reason>`. Expected answers were measured on 6.18.44
//! (docs/kernel-interface.md#cpu-time-and-placement, #tcp_info-and-tcp_congestion,
//! #netdev-statistics).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::{NetNs, NetNsPair, ADDR_B_V4, VETH_A, VETH_B};
use ncdevmem::error::{Error, NlError};
use ncdevmem::figures::cpu::{check_allowed, parse_cpu_list, ProcStat};
use ncdevmem::figures::device::{arrival_queue, device_rx, ArrivalQueue, Qstats};
use ncdevmem::figures::tcp::set_congestion;
use ncdevmem::netlink::netdev::{Netdev, QstatsScope};
use ncdevmem::sys::cpu::{allowed_cpus, pin_current_thread, thread_cpu_time, CPU_SETSIZE};
use ncdevmem::sys::socket::incoming_napi_id;
use ncdevmem::sys::tcp::{self, congestion_list, ALLOWED_CC, AVAILABLE_CC};

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Whether the running kernel is a 6.18 (the release whose exact answers are pinned).
fn kernel_6_18() -> bool {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().starts_with("6.18."))
        .unwrap_or(false)
}

fn nl_err<T: std::fmt::Debug>(r: Result<T, Error>) -> NlError {
    match r {
        Err(Error::Netlink(e)) => *e,
        other => panic!("expected a netlink error, got {other:?}"),
    }
}

/// A connected loopback pair: (client, accepted server side).
fn loopback_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let c = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

// ---------------------------------------------------------------------------------------------
// CPU
// ---------------------------------------------------------------------------------------------

#[test]
fn proc_stat_shares_sum_to_100_per_cpu() {
    let a = ProcStat::read().expect("read /proc/stat");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let b = ProcStat::read().expect("read /proc/stat");
    let elapsed = t0.elapsed();
    // The cpuN lines are the online CPUs, as /sys lists them in the CPU-list syntax.
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online");
    let online = parse_cpu_list(online.trim()).expect("parse the kernel's CPU list");
    assert_eq!(b.cpus.keys().copied().collect::<Vec<_>>(), online);

    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .expect("sysconf")
        .expect("CLK_TCK") as f64;
    let iv = b.since(&a);
    assert_eq!(iv.cpus.len(), online.len());
    for (cpu, ticks) in &iv.cpus {
        let s = ticks
            .shares()
            .unwrap_or_else(|| panic!("cpu{cpu}: no ticks in 0.2 s"));
        let sum = s.usr + s.sys + s.irq + s.softirq + s.iowait + s.idle + s.steal;
        assert!((sum - 100.0).abs() < 1e-6, "cpu{cpu}: {s:?} sums to {sum}");
        // Every tick of the interval is in some column: about elapsed × USER_HZ of them
        // (the kernel's idle time is nanosecond-precise, so give a few ticks of slack).
        let most = elapsed.as_secs_f64() * hz * 1.25 + 5.0;
        assert!(
            (s.ticks as f64) <= most,
            "cpu{cpu}: {} ticks in {elapsed:?}",
            s.ticks
        );
    }
    let app = iv.of(&online).shares().expect("app CPUs");
    let all = iv.all.shares().expect("all CPUs");
    for s in [app, all] {
        let sum = s.usr + s.sys + s.irq + s.softirq + s.iowait + s.idle + s.steal;
        assert!((sum - 100.0).abs() < 1e-6, "{s:?}");
    }
}

#[test]
fn thread_cpu_time_is_the_calling_threads_own() {
    let main_before = thread_cpu_time().expect("RUSAGE_THREAD");
    let busy = std::thread::spawn(|| {
        let start = thread_cpu_time().expect("RUSAGE_THREAD");
        let mut x = 0u64;
        loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = thread_cpu_time().expect("RUSAGE_THREAD").since(start);
            if now.user + now.sys >= Duration::from_millis(50) {
                return now;
            }
        }
    })
    .join()
    .expect("busy thread");
    let main = thread_cpu_time().expect("RUSAGE_THREAD").since(main_before);
    let process = ncdevmem::sys::cpu_time().expect("RUSAGE_SELF");
    assert!(busy.user + busy.sys >= Duration::from_millis(50));
    // This thread only waited in join: its own time grew by less than the spinner's.
    assert!(
        main.user + main.sys < busy.user + busy.sys,
        "main {main:?}, busy {busy:?}"
    );
    assert!(
        process.user + process.sys >= busy.user + busy.sys,
        "{process:?}"
    );
}

#[test]
fn pinning_a_thread_and_the_affinity_mask() {
    std::thread::spawn(|| {
        let allowed = allowed_cpus().expect("sched_getaffinity");
        assert!(!allowed.is_empty());
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online");
        let online = parse_cpu_list(online.trim()).unwrap();
        assert!(allowed.iter().all(|c| online.contains(c)), "{allowed:?}");

        let cpu = *allowed.last().unwrap();
        pin_current_thread(cpu).expect("pin");
        assert_eq!(allowed_cpus().unwrap(), [cpu]);
        // sched_setaffinity migrates the caller before it returns.
        assert_eq!(nix::sched::sched_getcpu().unwrap(), cpu);

        // A CPU that is not online: the kernel's EINVAL; past CPU_SETSIZE: EINVAL without a call.
        let offline = CPU_SETSIZE - 1;
        assert!(!online.contains(&offline));
        for c in [offline, CPU_SETSIZE] {
            match pin_current_thread(c) {
                Err(Error::Sys { call, errno }) => {
                    assert_eq!(errno, libc::EINVAL, "{call}");
                    assert_eq!(call, format!("sched_setaffinity(0, {{{c}}})"));
                }
                other => panic!("pin to CPU {c}: {other:?}"),
            }
        }
        assert_eq!(
            allowed_cpus().unwrap(),
            [cpu],
            "a refused pin changes nothing"
        );
        let e = check_allowed(&[cpu, offline], &allowed).unwrap_err();
        assert!(e.starts_with(&format!(
            "CPU {offline} is not in this process's affinity mask"
        )));
    })
    .join()
    .expect("pinned thread");
}

// ---------------------------------------------------------------------------------------------
// TCP_INFO, TCP_CONGESTION, SO_INCOMING_NAPI_ID over loopback
// ---------------------------------------------------------------------------------------------

#[test]
fn tcp_info_of_a_loopback_receiver() {
    const N: usize = 1 << 20;
    let (mut c, mut s) = loopback_pair();
    let writer = std::thread::spawn(move || {
        c.write_all(&vec![7u8; N]).expect("send");
        c
    });
    let mut buf = vec![0u8; N];
    s.read_exact(&mut buf).expect("receive");
    let c = writer.join().expect("writer");

    let i = tcp::tcp_info(s.as_fd()).expect("TCP_INFO");
    if kernel_6_18() {
        // 6.18's struct tcp_info is 280 bytes; the kernel writes min(that, ours).
        let ours = std::mem::size_of::<libc::tcp_info>();
        assert_eq!(i.len, ours.min(280), "libc's struct is {ours} bytes");
    }
    assert_eq!(i.state, 1, "TCP_ESTABLISHED");
    assert_eq!(i.bytes_received, Some(N as u64), "{i:?}");
    assert_eq!((i.total_retrans, i.lost, i.retrans), (0, 0, 0), "{i:?}");
    assert!(i.rcv_mss > 0 && i.rcv_space > 0, "{i:?}");
    let (segs, data) = (i.segs_in.unwrap(), i.data_segs_in.unwrap());
    assert!(
        data >= 16 && segs >= data,
        "1 MiB over lo's 64 KiB MTU: {i:?}"
    );

    let ci = tcp::tcp_info(c.as_fd()).expect("TCP_INFO");
    // Loopback delivers in order unless it drops a packet: a CPU's backlog full
    // (net.core.netdev_max_backlog) while the softirq waits for a loaded machine's CPU. The
    // sender then retransmits what was dropped, and what came after it arrived out of order.
    // (Reproduced with the backlog at 2: rcv_ooopack > 0 in 6 of 6 runs, each with the
    // sender's retransmissions.) So out-of-order packets come only with retransmissions.
    let ooo = i.rcv_ooopack.expect("tcpi_rcv_ooopack (5.4+)");
    assert!(
        ooo == 0 || ci.total_retrans > 0,
        "{ooo} out-of-order packets without a retransmission: receiver {i:?}\nsender {ci:?}"
    );
    // The SYN counts: N + 1 once the last ACK is in (6.18 here: 1048577).
    assert!(ci.bytes_acked.unwrap() <= N as u64 + 1, "{ci:?}");
    assert_eq!(ci.bytes_received, Some(0), "{ci:?}");
    assert!(ci.snd_mss > 0 && ci.snd_cwnd > 0, "{ci:?}");

    // Not a TCP socket: the kernel refuses the level.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    match tcp::tcp_info(u.as_fd()) {
        Err(Error::Sys { call, errno }) => {
            assert_eq!(
                (call.as_str(), errno),
                ("getsockopt(TCP_INFO)", libc::EOPNOTSUPP)
            );
        }
        other => panic!("TCP_INFO on UDP: {other:?}"),
    }
}

#[test]
fn tcp_congestion_set_get_and_refusals() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let fd = l.as_fd();
    let available = congestion_list(AVAILABLE_CC).expect("available list");
    let allowed = congestion_list(ALLOWED_CC).expect("allowed list");
    assert!(
        available.iter().any(|n| n == "reno"),
        "reno is always built in: {available:?}"
    );

    tcp::set_congestion(fd, "reno").expect("reno");
    assert_eq!(tcp::congestion(fd).unwrap(), "reno");
    // A listener's algorithm, set with TCP_CONGESTION, is the accepted socket's.
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    assert_eq!(tcp::congestion(s.as_fd()).unwrap(), "reno");
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(tcp::congestion(c.as_fd()).unwrap(), default.trim());

    if available.iter().any(|n| n == "cubic") {
        let r = tcp::set_congestion(fd, "cubic");
        if is_root() || allowed.iter().any(|n| n == "cubic") {
            r.expect("cubic");
            assert_eq!(tcp::congestion(fd).unwrap(), "cubic");
        } else {
            assert_eq!(r, Err(libc::EPERM));
        }
    }
    assert_eq!(tcp::set_congestion(fd, "nosuchcc"), Err(libc::ENOENT));
    assert_eq!(tcp::set_congestion(fd, ""), Err(libc::EINVAL));
    // The kernel reads the name up to a NUL.
    tcp::set_congestion(fd, "reno\0zzz").expect("reno with a tail");
    assert_eq!(tcp::congestion(fd).unwrap(), "reno");
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    assert_eq!(
        tcp::set_congestion(u.as_fd(), "reno"),
        Err(libc::ENOPROTOOPT)
    );

    // The policy above: an unknown name is a usage error naming what this kernel has.
    let e = set_congestion(fd, "--tcp-cc", "nosuchcc").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "--tcp-cc: this kernel has no TCP congestion control 'nosuchcc' \
             (net.ipv4.tcp_available_congestion_control: {})",
            available.join(" ")
        )
    );
    assert_eq!(e.exit_code(), ncdevmem::error::EXIT_USAGE);
    set_congestion(fd, "--tcp-cc", "reno").expect("reno through the policy");
}

#[test]
fn loopback_has_no_napi_id() {
    let (mut c, s) = loopback_pair();
    assert_eq!(incoming_napi_id(s.as_fd()).unwrap(), 0, "before data");
    c.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    (&s).read_exact(&mut b).unwrap();
    let id = incoming_napi_id(s.as_fd()).unwrap();
    assert_eq!(
        id, 0,
        "loopback delivers through the backlog, not a NAPI with an id"
    );
    assert_eq!(arrival_queue(&[], id), ArrivalQueue::NoNapi);
}

// ---------------------------------------------------------------------------------------------
// veth with GRO: a NAPI id that no queue lists
// ---------------------------------------------------------------------------------------------

#[test]
fn veth_gro_napi_id_is_not_a_queue() {
    let test = "veth_gro_napi_id_is_not_a_queue";
    if let Some(reason) = common::skip_reason() {
        return common::print_skip(test, &reason);
    }
    let pair = NetNsPair::new().expect("netns pair");
    // GRO on the receiving end gives veth a NAPI instance per RX queue (6.18); TCP reaches
    // it only from a sender without TSO (veth_xmit sends TSO skbs through the backlog).
    for (ns, dev, feature) in [(&pair.b, VETH_B, "gro"), (&pair.a, VETH_A, "tso")] {
        let on_off = if feature == "gro" { "on" } else { "off" };
        let out = ns
            .exec(&["ethtool", "-K", dev, feature, on_off])
            .expect("ethtool");
        if !out.status.success() {
            return common::print_skip(
                test,
                &format!("ethtool -K {dev} {feature} {on_off} failed"),
            );
        }
    }
    let ifindex_b = pair.b.ifindex(VETH_B).expect("ifindex");
    let listener = {
        let _in = pair.b.enter().expect("enter B");
        TcpListener::bind(format!("{ADDR_B_V4}:0")).expect("listen in B")
    };
    let port = listener.local_addr().unwrap().port();
    let mut client = {
        let _in = pair.a.enter().expect("enter A");
        TcpStream::connect((ADDR_B_V4, port)).expect("connect from A")
    };
    let (mut s, _) = listener.accept().expect("accept");
    client.write_all(&[1u8; 100_000]).unwrap();
    let mut buf = vec![0u8; 100_000];
    s.read_exact(&mut buf).unwrap();
    let id = incoming_napi_id(s.as_fd()).unwrap();

    let _in = pair.b.enter().expect("enter B");
    let mut nd = Netdev::open().expect("netdev");
    let napis = nd.napi_get_dump(ifindex_b).expect("napi-get");
    assert!(
        napis.iter().any(|n| n.id == id),
        "the flow's NAPI {id} is one of veth-b's: {napis:?}"
    );
    let queues = nd.queue_get_dump(ifindex_b).expect("queue-get");
    assert!(queues.iter().all(|q| q.napi_id.is_none()), "{queues:?}");
    assert_eq!(arrival_queue(&queues, id), ArrivalQueue::Unknown(id));
}

// ---------------------------------------------------------------------------------------------
// netdev statistics
// ---------------------------------------------------------------------------------------------

#[test]
fn qstats_of_veth_and_lo_are_refused() {
    let test = "qstats_of_veth_and_lo_are_refused";
    if let Some(reason) = common::skip_reason() {
        return common::print_skip(test, &reason);
    }
    let ns = NetNs::with_veth("veth0", "veth1").expect("netns");
    let veth = ns.ifindex("veth0").expect("ifindex");
    let _in = ns.enter().expect("enter");
    let mut nd = Netdev::open().expect("netdev");
    for (ifindex, scope) in [
        (veth, QstatsScope::Queue),
        (veth, QstatsScope::Device),
        (1, QstatsScope::Queue),
    ] {
        let e = nl_err(nd.qstats_get_dump(ifindex, scope));
        assert_eq!(
            (e.errno, e.ext_msg.as_deref()),
            (libc::EOPNOTSUPP, None),
            "{e}"
        );
        assert_eq!(
            e.bad_attr.as_deref(),
            Some("NETDEV_A_QSTATS_IFINDEX"),
            "{e}"
        );
    }
    let e = nl_err(nd.qstats_get_dump(9999, QstatsScope::Queue));
    assert_eq!(e.errno, libc::ENODEV, "{e}");
    assert_eq!(
        e.to_string(),
        "netdev qstats-get on ifindex 9999, per queue: ENODEV (No such device); at \
         NETDEV_A_QSTATS_IFINDEX"
    );

    let snap = || Qstats::from_dump(Netdev::open()?.qstats_get_dump(veth, QstatsScope::Queue));
    let (before, after) = (snap().expect("sorted"), snap().expect("sorted"));
    assert!(matches!(before, Qstats::Unsupported(_)), "{before:?}");
    let why = device_rx(&before, &after, veth, &[0], Duration::from_secs(1)).unwrap_err();
    assert_eq!(
        why.to_string(),
        format!(
            "no qstats: the driver keeps none (netdev qstats-get on veth0 (ifindex {veth}), \
             per queue: EOPNOTSUPP (Operation not supported); at NETDEV_A_QSTATS_IFINDEX)"
        )
    );
}

#[test]
fn page_pool_stats_are_refused_without_page_pool_stats() {
    let test = "page_pool_stats_are_refused_without_page_pool_stats";
    if let Some(reason) = common::skip_reason() {
        return common::print_skip(test, &reason);
    }
    let ns = NetNs::new().expect("netns");
    let _in = ns.enter().expect("enter");
    let mut nd = Netdev::open().expect("netdev");
    if !kernel_6_18() {
        // Another kernel may have CONFIG_PAGE_POOL_STATS (then a netns without pools dumps
        // nothing and an unknown id is ENOENT).
        return common::print_skip(test, "the refusal is pinned for 6.18 only");
    }
    let e = nl_err(nd.page_pool_stats_get_dump());
    assert_eq!(
        (e.errno, e.ext_msg.as_deref()),
        (libc::EOPNOTSUPP, None),
        "{e}"
    );
    let e = nl_err(nd.page_pool_stats_get(1));
    assert_eq!(
        (e.errno, e.ext_msg.as_deref()),
        (libc::EOPNOTSUPP, None),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "netdev page-pool-stats-get on page pool 1: EOPNOTSUPP (Operation not supported)"
    );
}
