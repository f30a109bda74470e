//! Real-kernel tests of the memory sources (udmabuf, `src/udmabuf.rs`; dma-buf heaps,
//! `src/memory/dma_heap.rs`) and the socket layer (`src/sys/socket.rs`), run against the
//! machine's kernel (6.18 here: no /dev/udmabuf, no /dev/dma_heap, no hugepages reserved by
//! default).
//!
//! Tests that need root print `skip: <test>: <reason>` and return when not root. Tests that
//! change `vm.nr_hugepages` serialise on a static mutex *and* an flock on
//! [`HUGEPAGES_LOCK_FILE`] (other test binaries may use hugepages too), and restore the old
//! value in a Drop guard, also on panic. Socket tests use loopback only.

mod common;

use ncdevmem::caps::{classify, Op};
use std::fs::File;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicI32;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ncdevmem::conn::{accept_timeout, connect_timeout, send_all_timeout};
use ncdevmem::memory::dma_heap::DMA_HEAP_DIR;
use ncdevmem::memory::{Memory, MemoryPlan, MemorySource};
use ncdevmem::rx::RxSocket;
use ncdevmem::sys::dma_heap as sys_dma_heap;
use ncdevmem::sys::socket::{
    local_addr, rcvlowat, set_devmem_autorelease, set_nodelay, set_rcvlowat, shutdown_write,
    tcp_listen, TcpRxSocket,
};
use ncdevmem::sys::uapi::{dmabuf_token, MAX_DONTNEED_TOKENS};
use ncdevmem::udmabuf::{
    dma_buf_sync, preflight, FragMemory, HostPaths, HugepageStatus, Memfd, Udmabuf, UdmabufParams,
    NR_HUGEPAGES_PATH, SYNC_START_READ,
};
use ncdevmem::Error;
use nix::fcntl::{Flock, FlockArg};

/// `addr` as the sockets take it (the CLI's `HostAddr`: IPv4 becomes `::ffff:a.b.c.d`).
fn v6(addr: &str) -> Ipv6Addr {
    ncdevmem::cli::HostAddr::parse("-s", "server address", addr)
        .expect("parse")
        .socket_ip()
}

/// `ip` with `port`, no flow info or scope.
fn sa(ip: Ipv6Addr, port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(ip, port, 0, 0)
}

/// Cross-process lock for anything that reads or changes `vm.nr_hugepages`.
const HUGEPAGES_LOCK_FILE: &str = "/tmp/ncdevmem-rs-nr_hugepages.lock";

macro_rules! skip {
    ($test:expr, $($reason:tt)*) => {{
        eprintln!("skip: {}: {}", $test, format!($($reason)*));
        return;
    }};
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

// ---------------------------------------------------------------------------------------------
// nr_hugepages: lock and restore guard
// ---------------------------------------------------------------------------------------------

static HUGEPAGES_MUTEX: Mutex<()> = Mutex::new(());

/// Holds both the in-process mutex and the cross-process flock.
struct HugepagesLock {
    _flock: Flock<File>,
    _mutex: MutexGuard<'static, ()>,
}

fn lock_hugepages() -> HugepagesLock {
    let mutex = HUGEPAGES_MUTEX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(HUGEPAGES_LOCK_FILE)
        .expect("open hugepages lock file");
    let flock = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("flock hugepages lock file");
    HugepagesLock {
        _flock: flock,
        _mutex: mutex,
    }
}

fn read_nr_hugepages() -> u64 {
    std::fs::read_to_string(NR_HUGEPAGES_PATH)
        .expect("read nr_hugepages")
        .trim()
        .parse()
        .expect("parse nr_hugepages")
}

/// Sets `vm.nr_hugepages` and writes the old value back on drop (also while panicking).
struct NrHugepagesGuard {
    old: u64,
}

impl NrHugepagesGuard {
    fn set(n: u64) -> std::io::Result<Self> {
        let old = read_nr_hugepages();
        std::fs::write(NR_HUGEPAGES_PATH, format!("{n}\n"))?;
        Ok(NrHugepagesGuard { old })
    }
}

impl Drop for NrHugepagesGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(NR_HUGEPAGES_PATH, format!("{}\n", self.old)) {
            eprintln!(
                "could not restore vm.nr_hugepages to {}: {e}; run `sysctl vm.nr_hugepages={}`",
                self.old, self.old
            );
        }
    }
}

/// `KernelPageSize` (kB) of the mapping containing `addr`, from /proc/self/smaps.
fn kernel_page_size_kb(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(rest) = line.strip_prefix("KernelPageSize:") {
                return rest.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// (a) preflight without udmabuf
// ---------------------------------------------------------------------------------------------

#[test]
fn preflight_skips_without_udmabuf() {
    const T: &str = "preflight_skips_without_udmabuf";
    if std::path::Path::new("/dev/udmabuf").exists() {
        skip!(
            T,
            "/dev/udmabuf exists on this machine; this test is for kernels without it"
        );
    }
    let params = UdmabufParams::new(None, None).expect("default params");
    let e = preflight(&params, &HostPaths::default())
        .expect_err("preflight must skip without /dev/udmabuf");
    assert_eq!(e.exit_code(), 4, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("/dev/udmabuf"), "{msg}");
    assert!(msg.contains("CONFIG_UDMABUF"), "{msg}");
    // hugetlb params: the udmabuf skip comes before any hugepage check.
    let huge = UdmabufParams::new(Some(16384), None).expect("hugetlb params");
    assert!(huge.hugetlb);
    assert_eq!(huge.hugepages_needed(), 32);
    let msg = preflight(&huge, &HostPaths::default())
        .expect_err("skip")
        .to_string();
    assert!(msg.contains("/dev/udmabuf"), "{msg}");
    // The full allocation gives the same skip (before creating anything).
    let e = Udmabuf::create(&params).expect_err("create must skip");
    assert!(
        matches!(e, Error::Skip(ref m) if m.to_string().contains("/dev/udmabuf")),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// (a2) dma-buf heaps: the skips without them (6.18 here), a real allocation with them (7.3 VM)
// ---------------------------------------------------------------------------------------------

/// Without `/dev/dma_heap` (this 6.18 host: `CONFIG_DMABUF_HEAPS` is not set) the heap source
/// skips before creating anything, with the kernel's answer to the open (ENOENT), through every
/// entry point a mode uses; the allocation ioctl itself, on a descriptor that is no heap, gets
/// the kernel's ENOTTY.
#[test]
fn dma_heap_skips_without_heaps() {
    const T: &str = "dma_heap_skips_without_heaps";
    if Path::new(DMA_HEAP_DIR).exists() {
        skip!(
            T,
            "{DMA_HEAP_DIR} exists on this machine; this test is for kernels without it"
        );
    }
    let source = MemorySource::parse("dma-heap").expect("parse");
    let plan = MemoryPlan::new(&source, None, None).expect("plan");
    for e in [
        plan.preflight().expect_err("preflight must skip"),
        plan.allocate().expect_err("allocate must skip"),
    ] {
        assert_eq!(e.exit_code(), 4, "{e}");
        assert_eq!(
            e.to_string(),
            "skip: no dma-buf heaps: cannot open /dev/dma_heap/system (ENOENT (No such file or \
             directory)); /dev/dma_heap does not exist: the kernel needs CONFIG_DMABUF_HEAPS \
             (and CONFIG_DMABUF_HEAPS_SYSTEM for the system heap)"
        );
    }
    // A named heap and -b give the same first answer: the device, before the rx-page-size.
    let named = MemorySource::parse("dma-heap:reserved").expect("parse");
    let e = MemoryPlan::new(&named, Some(1 << 21), None)
        .expect("plan")
        .preflight()
        .expect_err("skip");
    assert!(
        e.to_string()
            .contains("cannot open /dev/dma_heap/reserved (ENOENT"),
        "{e}"
    );
    assert_eq!(
        ncdevmem::memory::dma_heap::list_heaps(Path::new(DMA_HEAP_DIR)),
        Err(libc::ENOENT)
    );
    assert_eq!(
        sys_dma_heap::open_heap(Path::new("/dev/dma_heap/system")).map(drop),
        Err(libc::ENOENT)
    );
    let not_a_heap = File::open("/dev/null").expect("open /dev/null");
    assert_eq!(
        sys_dma_heap::alloc(not_a_heap.as_fd(), 1 << 20).map(drop),
        Err(libc::ENOTTY)
    );
}

/// With the system heap (the 7.3 VM guest): a 1 MiB dma-buf is allocated, mapped, written
/// inside DMA_BUF_IOCTL_SYNC(WRITE) and read back inside SYNC(READ), bounds-checked; an
/// allocation larger than the machine's memory is a skip before any ioctl.
#[test]
fn dma_heap_system_allocates_maps_and_syncs() {
    const T: &str = "dma_heap_system_allocates_maps_and_syncs";
    if !Path::new("/dev/dma_heap/system").exists() {
        skip!(
            T,
            "no /dev/dma_heap/system on this machine (CONFIG_DMABUF_HEAPS_SYSTEM)"
        );
    }
    if !is_root() {
        skip!(T, "needs root to open /dev/dma_heap/system");
    }
    let source = MemorySource::parse("dma-heap:system").expect("parse");
    let plan = MemoryPlan::new(&source, None, Some(1 << 20)).expect("plan");
    plan.preflight().expect("preflight");
    let mut mem = plan.allocate().expect("allocate");
    assert_eq!(mem.size(), 1 << 20);
    let Memory::DmaHeap(buf) = &mut mem else {
        panic!("a dma-heap plan allocated {mem:?}");
    };
    buf.write_at(0, b"head").expect("write head");
    buf.write_at((1 << 20) - 4, b"tail")
        .expect("write at the exact end");
    buf.begin_cpu_read().expect("SYNC START|READ");
    assert_eq!(buf.bytes(0, 4).expect("read head"), b"head");
    assert_eq!(buf.bytes((1 << 20) - 4, 4).expect("read tail"), b"tail");
    assert!(matches!(
        buf.bytes((1 << 20) - 3, 4),
        Err(Error::Bounds {
            region_len: 1048576,
            ..
        })
    ));
    buf.end_cpu_read().expect("SYNC END|READ");
    assert!(matches!(
        buf.write_at(1 << 20, b"x"),
        Err(Error::Bounds { .. })
    ));
    // The dma-buf fd is a real dma-buf: the sync ioctl on it succeeds.
    dma_buf_sync(mem.fd(), SYNC_START_READ).expect("sync on the heap's dma-buf");
    drop(mem);
    // 1 TiB: more than the machine has. 7.3's system heap would take pages until the OOM
    // killer ended processes, so the preflight refuses it first, before any ioctl.
    let huge = MemoryPlan::new(&source, None, Some(1 << 40)).expect("plan");
    for e in [
        huge.preflight().expect_err("1 TiB must be refused"),
        huge.allocate().expect_err("1 TiB must not be allocated"),
    ] {
        assert_eq!(e.exit_code(), 4, "{e}");
        let m = e.to_string();
        assert!(
            m.starts_with("skip: dma-heap system cannot allocate 1099511627776 bytes: only "),
            "{m}"
        );
        assert!(
            m.contains("bytes are available (MemAvailable in /proc/meminfo)"),
            "{m}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (b) memfd: shmem, hugetlb, sync errno
// ---------------------------------------------------------------------------------------------

#[test]
fn shmem_memfd_is_sealed_mapped_and_bounds_checked() {
    let memfd = Memfd::create(c"ncdevmem-test-shmem", 1 << 20, false).expect("memfd");
    assert!(!memfd.is_hugetlb());
    assert_eq!(memfd.size(), 1 << 20);
    let seals =
        nix::fcntl::fcntl(memfd.as_fd(), nix::fcntl::FcntlArg::F_GET_SEALS).expect("F_GET_SEALS");
    assert_eq!(
        seals & libc::F_SEAL_SHRINK,
        libc::F_SEAL_SHRINK,
        "seals 0x{seals:x}"
    );
    // Shrinking is refused by the seal.
    assert_eq!(
        nix::unistd::ftruncate(memfd.as_fd(), 4096),
        Err(nix::errno::Errno::EPERM)
    );
    let mut map = memfd.map().expect("map memfd");
    assert_eq!(map.len(), 1 << 20);
    map.write_at(0, b"head").expect("write head");
    map.write_at((1 << 20) - 4, b"tail")
        .expect("write at the exact end");
    assert_eq!(map.bytes(0, 4).expect("read head"), b"head");
    assert_eq!(map.bytes((1 << 20) - 4, 4).expect("read tail"), b"tail");
    assert!(matches!(
        map.bytes((1 << 20) - 3, 4),
        Err(Error::Bounds {
            region_len: 1048576,
            ..
        })
    ));
    assert!(matches!(map.bytes(u64::MAX, 1), Err(Error::Bounds { .. })));
    assert!(matches!(
        map.write_at(1 << 20, b"x"),
        Err(Error::Bounds { .. })
    ));
}

#[test]
fn dma_buf_sync_on_a_memfd_surfaces_enotty() {
    let memfd = Memfd::create(c"ncdevmem-test-sync", 4096, false).expect("memfd");
    let e = dma_buf_sync(memfd.as_fd(), SYNC_START_READ).expect_err("memfd is no dma-buf");
    match e {
        Error::Sys { ref call, errno } => {
            assert_eq!(errno, libc::ENOTTY, "{e}");
            assert!(call.contains("DMA_BUF_IOCTL_SYNC"), "{e}");
            assert!(call.contains("START|READ"), "{e}");
        }
        other => panic!("expected Error::Sys, got {other:?}"),
    }
}

#[test]
fn hugetlb_memfd_maps_after_raising_nr_hugepages() {
    const T: &str = "hugetlb_memfd_maps_after_raising_nr_hugepages";
    if !is_root() {
        skip!(T, "needs root to write {NR_HUGEPAGES_PATH}");
    }
    let _lock = lock_hugepages();
    let before = match HugepageStatus::read() {
        Ok(s) => s,
        Err(e) => skip!(T, "{e}"),
    };
    const SIZE: u64 = 4 << 20;
    const NEEDED: u64 = 2;
    let target = before.nr + NEEDED.saturating_sub(before.available());
    let _guard = NrHugepagesGuard::set(target).expect("raise nr_hugepages");
    let raised = HugepageStatus::read().expect("hugepage status");
    if raised.available() < NEEDED {
        skip!(
            T,
            "kernel could not allocate {NEEDED} 2 MiB hugepages (nr_hugepages={target}, {raised:?})"
        );
    }
    raised.require(NEEDED).expect("enough hugepages now");

    let memfd = Memfd::create(c"ncdevmem-test-huge", SIZE, true).expect("hugetlb memfd");
    assert!(memfd.is_hugetlb());
    assert_eq!(memfd.hugepages_needed(), NEEDED);
    let seals =
        nix::fcntl::fcntl(memfd.as_fd(), nix::fcntl::FcntlArg::F_GET_SEALS).expect("F_GET_SEALS");
    assert_eq!(seals & libc::F_SEAL_SHRINK, libc::F_SEAL_SHRINK);
    let mut map = memfd.map().expect("map hugetlb memfd");
    assert_eq!(map.len() as u64, SIZE);
    // One pattern per 2 MiB page plus the exact end.
    let second = 2u64 << 20;
    map.write_at(0, b"page0").expect("write page 0");
    map.write_at(second, b"page1").expect("write page 1");
    map.write_at(SIZE - 3, b"end").expect("write end");
    assert_eq!(map.bytes(0, 5).expect("read"), b"page0");
    assert_eq!(map.bytes(second, 5).expect("read"), b"page1");
    assert_eq!(map.bytes(SIZE - 3, 3).expect("read"), b"end");
    // It really is backed by 2 MiB pages.
    let addr = map.bytes(0, 1).expect("view").as_ptr() as usize;
    assert_eq!(kernel_page_size_kb(addr), Some(2048));
    drop(map);
    drop(memfd);
    // _guard restores nr_hugepages, then _lock is released.
}

#[test]
fn nr_hugepages_guard_restores_on_panic() {
    const T: &str = "nr_hugepages_guard_restores_on_panic";
    if !is_root() {
        skip!(T, "needs root to write {NR_HUGEPAGES_PATH}");
    }
    let _lock = lock_hugepages();
    let old = read_nr_hugepages();
    let result = std::panic::catch_unwind(|| {
        let _guard = NrHugepagesGuard::set(old + 1).expect("raise nr_hugepages");
        assert_eq!(read_nr_hugepages(), old + 1, "raised");
        panic!("deliberate panic while nr_hugepages is raised");
    });
    assert!(result.is_err());
    assert_eq!(read_nr_hugepages(), old, "restored after the panic");
}

#[test]
fn hugetlb_without_hugepages_is_a_skip_naming_the_count() {
    const T: &str = "hugetlb_without_hugepages_is_a_skip_naming_the_count";
    let _lock = lock_hugepages();
    let status = match HugepageStatus::read() {
        Ok(s) => s,
        Err(e) => skip!(T, "{e}"),
    };
    if status.nr != 0 || status.available() != 0 {
        skip!(
            T,
            "vm.nr_hugepages is {} here, not 0 ({status:?})",
            status.nr
        );
    }
    let e = status.require(2).expect_err("no hugepages");
    assert_eq!(e.exit_code(), 4);
    let msg = e.to_string();
    assert!(
        msg.contains("need 2 free 2 MiB hugepages, have 0; raise vm.nr_hugepages"),
        "{msg}"
    );
    // The kernel lets memfd_create and ftruncate pass and fails mmap with ENOMEM; the project
    // turns that into the same skip.
    let memfd = Memfd::create(c"ncdevmem-test-nohuge", 4 << 20, true).expect("hugetlb memfd");
    let e = memfd.map().expect_err("no hugepages to map");
    assert!(
        matches!(e, Error::Skip(ref m) if m.to_string().contains("need 2 free 2 MiB hugepages, have 0")),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// (c)-(f) sockets over loopback
// ---------------------------------------------------------------------------------------------

fn no_stop() -> AtomicI32 {
    AtomicI32::new(0)
}

/// A connected loopback pair: (client, accepted server socket, client's address).
fn loopback_pair(addr: &str) -> (OwnedFd, TcpRxSocket, SocketAddr) {
    let a = v6(addr);
    let listener = tcp_listen(sa(a, 0), None).expect("listen");
    let port = local_addr(listener.as_fd()).expect("getsockname").port();
    assert_ne!(port, 0);
    let client =
        connect_timeout(sa(a, port), None, None, Some(Duration::from_secs(5))).expect("connect");
    let (server, peer) =
        accept_timeout(listener.as_fd(), Some(Duration::from_secs(5)), &no_stop()).expect("accept");
    (client, TcpRxSocket::new(server), peer)
}

#[test]
fn dontneed_on_plain_tcp_returns_zero_and_einval_above_128_tokens() {
    let (_client, mut server, _) = loopback_pair("127.0.0.1");
    let tok = |start| dmabuf_token {
        token_start: start,
        token_count: 1,
    };
    // No devmem frags are outstanding, so the kernel frees 0 of them.
    assert_eq!(server.dontneed(&[tok(0)]), Ok(0));
    let many: Vec<_> = (0..MAX_DONTNEED_TOKENS as u32).map(tok).collect();
    assert_eq!(server.dontneed(&many), Ok(0));
    let too_many: Vec<_> = (0..=MAX_DONTNEED_TOKENS as u32).map(tok).collect();
    assert_eq!(too_many.len(), 129);
    assert_eq!(server.dontneed(&too_many), Err(libc::EINVAL));
    // An empty batch makes no call.
    assert_eq!(server.dontneed(&[]), Ok(0));
}

/// `SO_RCVLOWAT` (`--rcvlowat`): the default reads back as 1; 65536 reads back as 65536, or
/// half of `tcp_rmem`'s max where that is less (TCP caps it at half the receive buffer, which
/// an unlocked socket may grow to that max); 1 reads back as 1. With the mark above what is
/// queued, `poll` does not report the socket readable, yet a non-blocking `recvmsg` still
/// returns what is queued: the receive loop, which polls in ticks, strands no byte.
#[test]
fn rcvlowat_round_trips_within_the_kernels_cap() {
    let rmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").expect("tcp_rmem");
    let rmem_max: u32 = rmem
        .split_whitespace()
        .nth(2)
        .and_then(|m| m.parse().ok())
        .expect("tcp_rmem's third field");
    let (client, mut server, _) = loopback_pair("127.0.0.1");
    assert_eq!(rcvlowat(server.fd()).expect("getsockopt"), 1);
    set_rcvlowat(server.fd(), 65536).expect("setsockopt 65536");
    let kept = rcvlowat(server.fd()).expect("getsockopt");
    assert_eq!(
        kept,
        65536.min(rmem_max / 2),
        "SO_RCVLOWAT 65536 read back (tcp_rmem max {rmem_max})"
    );

    let payload = [7u8; 1000];
    set_nodelay(client.as_fd(), true).expect("TCP_NODELAY");
    send_all_timeout(client.as_fd(), &payload, None).expect("send");
    // Queued but under the mark: not readable (the bytes reach the socket within the wait).
    let wait = Duration::from_millis(300);
    match kept > payload.len() as u32 {
        true => assert!(
            !server.wait_readable(wait).expect("poll"),
            "readable under the mark"
        ),
        false => assert!(server.wait_readable(Duration::from_secs(5)).expect("poll")),
    }
    let (mut data, mut control) = (vec![0u8; 4096], vec![0u8; 256]);
    let out = server
        .recvmsg(&mut data, &mut control, false)
        .expect("non-blocking recvmsg under the mark");
    assert_eq!(out.bytes, payload.len());

    set_rcvlowat(server.fd(), 1).expect("setsockopt 1");
    assert_eq!(rcvlowat(server.fd()).expect("getsockopt"), 1);
}

#[test]
fn devmem_autorelease_missing_is_a_skip() {
    const T: &str = "devmem_autorelease_missing_is_a_skip";
    let (_client, server, _) = loopback_pair("127.0.0.1");
    // The kernel's answer is an errno (sys decides nothing); the policy makes it the skip.
    let answer = set_devmem_autorelease(server.fd(), true);
    if let Err(e) = &answer {
        assert_eq!(e.errno(), Some(libc::ENOPROTOOPT), "{e}");
    }
    let optname = ncdevmem::sys::uapi::SO_DEVMEM_AUTORELEASE;
    match answer.map_err(|e| classify(e, Op::DevmemAutorelease { optname })) {
        Err(e @ Error::Skip(_)) => {
            assert_eq!(e.exit_code(), 4);
            let msg = e.to_string();
            assert!(msg.contains("kernel has no SO_DEVMEM_AUTORELEASE"), "{msg}");
            assert!(msg.contains("ENOPROTOOPT"), "{msg}");
        }
        Ok(()) => skip!(T, "this kernel accepts SO_DEVMEM_AUTORELEASE (option 85)"),
        Err(e) => panic!("expected the ENOPROTOOPT skip, got {e:?}"),
    }
}

#[test]
fn devmem_recvmsg_on_plain_tcp_copies_normally() {
    for addr in ["127.0.0.1", "::1"] {
        let (client, mut server, peer) = loopback_pair(addr);
        // AF_INET6 sockets: an IPv4 peer shows up v4-mapped.
        assert_eq!(peer.ip(), std::net::IpAddr::V6(v6(addr)), "{addr}");
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        set_nodelay(client.as_fd(), true).expect("TCP_NODELAY");
        send_all_timeout(client.as_fd(), &payload, None).expect("send");
        shutdown_write(client.as_fd()).expect("shutdown");

        let mut got = Vec::new();
        let mut data = vec![0u8; 4096];
        let mut control = vec![0u8; 1024];
        loop {
            assert!(server.wait_readable(Duration::from_secs(5)).expect("poll"));
            let out = server
                .recvmsg(&mut data, &mut control, true)
                .expect("recvmsg(MSG_SOCK_DEVMEM)");
            if out.bytes == 0 {
                break;
            }
            assert_eq!(out.control_len, 0, "no devmem cmsgs on plain memory");
            assert_eq!(out.msg_flags, 0);
            got.extend_from_slice(&data[..out.bytes]);
        }
        assert_eq!(got, payload, "{addr}");
    }
}

#[test]
fn accept_times_out_promptly() {
    let a = v6("127.0.0.1");
    let listener = tcp_listen(sa(a, 0), None).expect("listen");
    let t0 = Instant::now();
    let e = accept_timeout(
        listener.as_fd(),
        Some(Duration::from_millis(300)),
        &no_stop(),
    )
    .expect_err("no client");
    let took = t0.elapsed();
    assert!(
        matches!(e, Error::Timeout(ref m) if m.contains("300 ms")),
        "{e}"
    );
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[test]
fn accept_notices_the_stop_flag() {
    let a = v6("::1");
    let listener = tcp_listen(sa(a, 0), None).expect("listen");
    let stop = AtomicI32::new(0);
    let t0 = Instant::now();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            stop.store(libc::SIGTERM, std::sync::atomic::Ordering::Relaxed);
        });
        accept_timeout(listener.as_fd(), None, &stop).expect_err("stopped")
    });
    assert!(matches!(e, Error::Interrupted(libc::SIGTERM)), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn connect_refused_and_bad_ifname() {
    let a = v6("127.0.0.1");
    // A port nobody listens on: bind one, note it, close it.
    let port = {
        let l = tcp_listen(sa(a, 0), None).expect("listen");
        local_addr(l.as_fd()).expect("getsockname").port()
    };
    let e = connect_timeout(sa(a, port), None, None, Some(Duration::from_secs(5)))
        .expect_err("nobody listens");
    assert_eq!(e.errno(), Some(libc::ECONNREFUSED), "{e}");
    let e = connect_timeout(
        sa(a, port),
        None,
        Some("a-very-long-ifname0"),
        Some(Duration::from_secs(5)),
    )
    .expect_err("ifname too long");
    // Refused before SO_BINDTODEVICE, as the kernel would (sys decides no exit code).
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains("must be 1..15 bytes"), "{e}");
}

#[test]
fn connect_bound_to_lo_with_source_port() {
    const T: &str = "connect_bound_to_lo_with_source_port";
    if !is_root() {
        skip!(T, "SO_BINDTODEVICE needs CAP_NET_RAW");
    }
    let a = v6("127.0.0.1");
    let listener = tcp_listen(sa(a, 0), None).expect("listen");
    let port = local_addr(listener.as_fd()).expect("getsockname").port();
    // Source port: pick a free one the same way.
    let src_port = {
        let l = tcp_listen(sa(a, 0), None).expect("listen");
        local_addr(l.as_fd()).expect("getsockname").port()
    };
    let client = connect_timeout(
        sa(a, port),
        Some(sa(a, src_port)),
        Some("lo"),
        Some(Duration::from_secs(5)),
    )
    .expect("connect bound to lo");
    let (_server, peer) =
        accept_timeout(listener.as_fd(), Some(Duration::from_secs(5)), &no_stop()).expect("accept");
    assert_eq!(peer.port(), src_port);
    assert_eq!(
        local_addr(client.as_fd()).expect("getsockname").port(),
        src_port
    );
    // The client is blocking again after the non-blocking connect.
    let fl = nix::fcntl::fcntl(client.as_fd(), nix::fcntl::FcntlArg::F_GETFL).expect("F_GETFL");
    assert_eq!(fl & libc::O_NONBLOCK, 0);
}

// ---------------------------------------------------------------------------------------------
// Listener port sharing, connect retries up to the deadline
// ---------------------------------------------------------------------------------------------

/// A second listener on the address and port of a first is refused with EADDRINUSE (no
/// SO_REUSEPORT), while SO_REUSEADDR still lets a new listener take a port whose last
/// connection is in TIME_WAIT (a socket without it is refused there).
#[test]
fn second_listener_is_eaddrinuse_but_time_wait_is_no_obstacle() {
    let a = v6("127.0.0.1");
    let first = tcp_listen(sa(a, 0), None).expect("listen");
    let port = local_addr(first.as_fd()).expect("getsockname").port();
    let e = tcp_listen(sa(a, port), None).expect_err("a second listener on the same port");
    assert_eq!(e.errno(), Some(libc::EADDRINUSE), "{e}");
    assert!(e.to_string().contains("bind("), "{e}");

    // A connection closed by the server side first leaves the server's end in TIME_WAIT.
    let client =
        connect_timeout(sa(a, port), None, None, Some(Duration::from_secs(5))).expect("connect");
    let (server, _) =
        accept_timeout(first.as_fd(), Some(Duration::from_secs(5)), &no_stop()).expect("accept");
    drop(server);
    let mut buf = [0u8; 16];
    assert_eq!(nix::unistd::read(&client, &mut buf).expect("read EOF"), 0);
    drop(client);
    drop(first);
    std::thread::sleep(Duration::from_millis(50));
    // Without SO_REUSEADDR the port is still taken ...
    {
        use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
        use std::os::fd::AsRawFd;
        let plain = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        let r = bind(plain.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port));
        assert_eq!(
            r,
            Err(nix::errno::Errno::EADDRINUSE),
            "TIME_WAIT holds the port"
        );
    }
    // ... but the tool's listener (SO_REUSEADDR) gets it.
    tcp_listen(sa(a, port), None).expect("listen over TIME_WAIT");
}

/// The pattern sender's last connect try is at the end of its --timeout window, not up to
/// 100 ms before it: a receiver that starts listening at 93% of the window is reached.
#[test]
fn the_last_connect_try_is_at_the_deadline() {
    use ncdevmem::tx::{send_pattern, PatternSend};
    let (fd, port) = common::bound_not_listening(std::net::Ipv4Addr::LOCALHOST.into());
    let req = PatternSend {
        peer: sa(v6("127.0.0.1"), port),
        local: None,
        ifname: None,
        stream: ncdevmem::validate::StreamSpec::Periodic(7),
        total_bytes: 4096,
        write_size: None,
        timeout: Some(Duration::from_secs(1)),
        corrupt_offset: None,
    };
    let start = Instant::now();
    let listened_at = std::sync::OnceLock::new();
    let got = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(930));
            nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::new(1).expect("backlog"))
                .expect("listen");
            let _ = listened_at.set(start.elapsed());
            // Bounded, so a sender that gave up early fails the test instead of hanging it.
            let Ok((conn, _)) =
                accept_timeout(fd.as_fd(), Some(Duration::from_secs(3)), &no_stop())
            else {
                return Vec::new();
            };
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match nix::unistd::read(&conn, &mut buf).expect("read") {
                    0 => break got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let sent = send_pattern(&req, &no_stop());
        (sent, rx.join().expect("receiver thread"))
    });
    let listened = listened_at.get().copied().unwrap_or(Duration::MAX);
    if listened >= Duration::from_secs(1) && got.0.is_err() {
        // The machine woke the receiver thread after the sender's window: nothing to judge.
        eprintln!("the receiver listened at {listened:?}, after the 1 s window: inconclusive");
        return;
    }
    let stats = got.0.expect("the receiver listened before the deadline");
    assert_eq!(stats.bytes, 4096);
    assert_eq!(got.1.len(), 4096);
}

/// When nothing ever listens, the refusal is reported after the whole window, naming the
/// time of the last try (at the deadline), not a window the tries did not cover.
#[test]
fn refused_until_the_deadline_says_when_it_last_tried() {
    use ncdevmem::tx::{send_pattern, PatternSend};
    let (_fd, port) = common::bound_not_listening(std::net::Ipv4Addr::LOCALHOST.into());
    let req = PatternSend {
        peer: sa(v6("127.0.0.1"), port),
        local: None,
        ifname: None,
        stream: ncdevmem::validate::StreamSpec::Periodic(7),
        total_bytes: 1,
        write_size: None,
        timeout: Some(Duration::from_millis(500)),
        corrupt_offset: None,
    };
    let t0 = Instant::now();
    let e = send_pattern(&req, &no_stop()).expect_err("nothing listens");
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    let m = e.to_string();
    assert!(matches!(e, Error::Timeout(_)), "{m}");
    let last_at: u128 = m
        .split("the last at ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time of the last try in: {m}"));
    assert!(last_at >= 500, "{m}");
}

/// A write stopped in its middle (the run's end while the send buffer is full) still says
/// how many of its bytes the kernel took, and the receiver reads exactly that many: a timed
/// sender's count is what the receiver can get (a sweep's peer bound rests on it; a peer once
/// reported 160 KiB fewer bytes than its receiver got, the part of the last write it lost).
#[test]
fn a_write_stopped_midway_counts_what_the_kernel_took() {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    let a = v6("127.0.0.1");
    let listener = tcp_listen(sa(a, 0), None).expect("listen");
    let port = local_addr(listener.as_fd()).expect("getsockname").port();
    let client =
        connect_timeout(sa(a, port), None, None, Some(Duration::from_secs(5))).expect("connect");
    let (server, _) =
        accept_timeout(listener.as_fd(), Some(Duration::from_secs(5)), &no_stop()).expect("accept");
    // Far more than loopback's buffers hold while nobody reads.
    let data = vec![0x5au8; 256 << 20];
    let stop = AtomicI32::new(0);
    let (sent, result) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            stop.store(7, Ordering::SeqCst);
        });
        ncdevmem::conn::send_until(client.as_fd(), &data, None, None, &stop)
    });
    assert!(
        matches!(result, Err(Error::Interrupted(7))),
        "stopped by the flag: {result:?}"
    );
    assert!(
        sent > 0 && sent < data.len(),
        "part of the write went out: {sent}"
    );
    shutdown_write(client.as_fd()).expect("shutdown");
    let mut got = Vec::new();
    std::net::TcpStream::from(server)
        .read_to_end(&mut got)
        .expect("read");
    assert_eq!(got.len(), sent, "the receiver reads what the count says");
}
