//! The release policy against a scripted kernel with a fake clock: pools that go some time
//! after the CPUs were asked to free deferred buffers (or at a fixed time, or never), hugepages
//! that come back when their pool goes, queues owned for a while, signals.

use std::time::Duration;

use super::*;
use crate::netlink::netdev::QueueType;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// When something the fake kernel holds is given back.
#[derive(Debug, Clone, Copy)]
enum When {
    At(Duration),
    /// This long after the first successful nudge; never without one.
    AfterNudge(Duration),
    Never,
}

struct FakePool {
    info: PagePoolInfo,
    gone: When,
    /// Hugepages that come free `lag` after the pool goes.
    pages: u64,
    lag: Duration,
}

struct FakeKernel {
    t: Duration,
    nr: u64,
    /// Free pages apart from the pools' and `returns`'.
    free: u64,
    pools: Vec<FakePool>,
    /// Hugepages given back without a pool: (pages, when).
    returns: Vec<(u64, When)>,
    /// RX queue 3 of ifindex 4 is owned by dmabuf 7 until then.
    queue_owned: When,
    first_nudge: Option<Duration>,
    nudges: u32,
    nudge_fails: bool,
    reach: CpuReach,
    pool_dump_fails: bool,
    stop_at: Option<(Duration, i32)>,
    pool_reads: u32,
    sleeps: u32,
}

impl FakeKernel {
    fn new(nr: u64, free: u64) -> FakeKernel {
        FakeKernel {
            t: Duration::ZERO,
            nr,
            free,
            pools: Vec::new(),
            returns: Vec::new(),
            queue_owned: When::At(Duration::ZERO),
            first_nudge: None,
            nudges: 0,
            nudge_fails: false,
            reach: CpuReach {
                reached: 2,
                online: 2,
            },
            pool_dump_fails: false,
            stop_at: None,
            pool_reads: 0,
            sleeps: 0,
        }
    }

    fn pool(mut self, info: PagePoolInfo, gone: When, pages: u64, lag: Duration) -> Self {
        self.pools.push(FakePool {
            info,
            gone,
            pages,
            lag,
        });
        self
    }

    fn at(&self, w: When) -> Option<Duration> {
        match w {
            When::At(d) => Some(d),
            When::AfterNudge(d) => self.first_nudge.map(|n| n + d),
            When::Never => None,
        }
    }

    fn done(&self, w: When, lag: Duration) -> bool {
        self.at(w).is_some_and(|d| self.t >= d + lag)
    }
}

impl Env for FakeKernel {
    fn queues(&mut self) -> Result<Vec<QueueInfo>> {
        let owned = !self.done(self.queue_owned, Duration::ZERO);
        Ok((0..4)
            .map(|id| QueueInfo {
                id,
                queue_type: QueueType::Rx,
                ifindex: 4,
                napi_id: None,
                dmabuf: (id == 3 && owned).then_some(7),
                io_uring: false,
                xsk: false,
            })
            .collect())
    }

    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>> {
        self.pool_reads += 1;
        if self.pool_dump_fails {
            return Err(Error::sys("page-pool-get", libc::ENOENT));
        }
        Ok(self
            .pools
            .iter()
            .filter(|p| !self.done(p.gone, Duration::ZERO))
            .map(|p| p.info.clone())
            .collect())
    }

    fn hugepages(&mut self) -> Result<HugepageStatus> {
        let back: u64 = self
            .pools
            .iter()
            .filter(|p| self.done(p.gone, p.lag))
            .map(|p| p.pages)
            .sum::<u64>()
            + self
                .returns
                .iter()
                .filter(|(_, w)| self.done(*w, Duration::ZERO))
                .map(|(n, _)| n)
                .sum::<u64>();
        Ok(HugepageStatus {
            nr: self.nr,
            free: self.free + back,
            resv: 0,
        })
    }

    fn return_deferred_buffers(&mut self) -> Result<CpuReach> {
        if self.nudge_fails {
            return Err(Error::sys("bind(UDP 127.0.0.1:0)", libc::EADDRNOTAVAIL));
        }
        self.nudges += 1;
        self.first_nudge.get_or_insert(self.t);
        Ok(self.reach)
    }

    fn now(&self) -> Duration {
        self.t
    }

    fn sleep(&mut self, d: Duration) {
        self.sleeps += 1;
        self.t += d;
    }

    fn stop_requested(&self) -> Option<i32> {
        self.stop_at.filter(|(t, _)| self.t >= *t).map(|(_, s)| s)
    }
}

/// A devmem pool of binding `dmabuf` on ifindex 4 with `inflight` buffers out, detached.
fn pool(id: u64, dmabuf: u32, inflight: u64) -> PagePoolInfo {
    PagePoolInfo {
        id,
        ifindex: Some(4),
        napi_id: None,
        inflight: Some(inflight),
        inflight_mem: Some(inflight * 16384),
        detach_time: Some(5),
        dmabuf: Some(dmabuf),
        io_uring: false,
    }
}

/// What a `-b 16384` receiver held: binding 7 on queue 3, 32 hugepages taken from 64.
fn receiver() -> Holdings {
    Holdings {
        what: "dmabuf binding 7 on dnic0a".into(),
        queues: vec![3],
        pools: PoolOwner::Dmabuf(vec![7]),
        hugepages: Some(HugepageGoal::after_alloc(
            32,
            &HugepageStatus {
                nr: 64,
                free: 32,
                resv: 0,
            },
        )),
    }
}

#[test]
fn nothing_held_is_no_wait_and_no_line() {
    let mut k = FakeKernel::new(64, 64);
    let r = await_release(&mut k, &receiver(), WAIT).unwrap();
    assert!(r.still.is_empty() && r.first.is_empty());
    assert_eq!(r.waited, Duration::ZERO);
    assert_eq!((k.sleeps, k.nudges), (0, 0));
    assert_eq!(r.log_line(), None);
}

/// The measured case: the pool goes at the page pool's next release retry after the nudge,
/// the hugepages a moment later.
#[test]
fn waits_for_the_pool_and_the_hugepages_and_says_so_in_one_line() {
    let mut k =
        FakeKernel::new(64, 32).pool(pool(33, 7, 4), When::AfterNudge(MS(1000)), 32, MS(20));
    let r = await_release(&mut k, &receiver(), WAIT).unwrap();
    assert!(r.still.is_empty(), "{r:?}");
    assert_eq!(
        k.nudges, 1,
        "one nudge; the pool went before a second was due"
    );
    assert_eq!(r.waited, MS(1050), "polled every 50 ms");
    assert_eq!(
        r.log_line().unwrap(),
        "waited 1.05 s until the kernel gave back what dmabuf binding 7 on dnic0a held: page \
         pool 33 (ifindex 4, dmabuf 7, 4 buffers in flight, detached), 32 of its 32 2 MiB \
         hugepages"
    );
}

#[test]
fn the_bound_ends_the_wait_and_the_line_names_what_is_held() {
    let mut k = FakeKernel::new(64, 32).pool(pool(33, 7, 1), When::Never, 32, MS(0));
    let r = await_release(&mut k, &receiver(), WAIT).unwrap();
    assert_eq!(r.waited, WAIT);
    assert_eq!(
        k.nudges, 5,
        "asked again every second while the pool stayed: {}",
        k.nudges
    );
    assert_eq!(
        r.log_line().unwrap(),
        "the kernel still holds what dmabuf binding 7 on dnic0a held after 5.0 s: page pool \
         33 (ifindex 4, dmabuf 7, 1 buffer in flight, detached), 32 of its 32 2 MiB \
         hugepages; a next run that needs it waits for it or skips (buffers in flight: an \
         sk_buff or token still refers to them)"
    );
    // Buffers deferred to a CPU the process may not run on: the line says so.
    let mut k = FakeKernel::new(64, 32).pool(pool(33, 7, 2), When::Never, 32, MS(0));
    k.reach = CpuReach {
        reached: 1,
        online: 2,
    };
    let line = await_release(&mut k, &receiver(), MS(100))
        .unwrap()
        .log_line()
        .unwrap();
    assert!(
        line.ends_with(
            "(buffers in flight: sk_buffs whose free was deferred to a CPU this process may \
             not run on (1 of 2 CPUs reached) wait for that CPU's next network receive)"
        ),
        "{line}"
    );
    // A bound of 0 reads once and does not sleep.
    let mut k = FakeKernel::new(64, 32).pool(pool(33, 7, 1), When::Never, 32, MS(0));
    let r = await_release(&mut k, &receiver(), Duration::ZERO).unwrap();
    assert_eq!((r.waited, k.sleeps), (Duration::ZERO, 0));
    assert!(!r.still.is_empty());
}

#[test]
fn a_failed_nudge_is_named_when_buffers_stay_out() {
    let mut k = FakeKernel::new(64, 32).pool(pool(33, 7, 2), When::AfterNudge(MS(0)), 32, MS(0));
    k.nudge_fails = true;
    let r = await_release(&mut k, &receiver(), MS(300)).unwrap();
    let line = r.log_line().unwrap();
    assert!(
        line.starts_with("the kernel still holds what dmabuf binding 7 on dnic0a held after 0.3 s"),
        "{line}"
    );
    assert!(
        line.ends_with(
            "the CPUs could not be asked to run them: bind(UDP 127.0.0.1:0): EADDRNOTAVAIL \
             (Cannot assign requested address))"
        ),
        "{line}"
    );
}

#[test]
fn a_stop_signal_ends_the_wait() {
    let mut k = FakeKernel::new(64, 32).pool(pool(33, 7, 1), When::Never, 32, MS(0));
    k.stop_at = Some((MS(300), libc::SIGINT));
    let r = await_release(&mut k, &receiver(), WAIT).unwrap();
    assert_eq!(r.interrupted, Some(libc::SIGINT));
    assert_eq!(r.waited, MS(300));
    assert!(r.log_line().unwrap().starts_with(
        "the kernel still holds what dmabuf binding 7 on dnic0a held when signal 2 ended the \
             wait after 0.30 s: page pool 33"
    ));
}

/// A queue still owned is waited for without asking the CPUs (no pool is listed).
#[test]
fn an_owned_queue_is_waited_for() {
    let mut k = FakeKernel::new(64, 64);
    k.queue_owned = When::At(MS(120));
    let h = Holdings {
        what: "dmabuf binding 7 on dnic0a".into(),
        queues: vec![3],
        pools: PoolOwner::Nothing,
        hugepages: None,
    };
    let r = await_release(&mut k, &h, WAIT).unwrap();
    assert_eq!((r.waited, k.nudges, k.pool_reads), (MS(150), 0, 0));
    assert_eq!(
        r.log_line().unwrap(),
        "waited 0.15 s until the kernel gave back what dmabuf binding 7 on dnic0a held: queue \
         3 (dmabuf 7)"
    );
}

#[test]
fn pool_ownership() {
    let mut zc = pool(40, 0, 1);
    zc.dmabuf = None;
    zc.io_uring = true;
    let mut other_dev = zc.clone();
    other_dev.id = 41;
    other_dev.ifindex = Some(9);
    let before = zc.clone();
    let mut mine = zc.clone();
    mine.id = 42;
    let owner = PoolOwner::IoUring {
        ifindex: 4,
        before: io_uring_pool_ids(&[before.clone(), other_dev.clone(), pool(1, 7, 0)], 4),
    };
    assert_eq!(
        owner,
        PoolOwner::IoUring {
            ifindex: 4,
            before: vec![40]
        }
    );
    assert!(owner.owns(&mine));
    assert!(!owner.owns(&before) && !owner.owns(&other_dev) && !owner.owns(&pool(1, 7, 0)));
    let d = PoolOwner::Dmabuf(vec![7, 9]);
    assert!(d.owns(&pool(1, 7, 0)) && d.owns(&pool(2, 9, 0)) && !d.owns(&pool(3, 8, 0)));
    assert!(!d.owns(&mine) && !PoolOwner::Nothing.owns(&pool(1, 7, 0)));
    assert_eq!(
        describe_pool(&mine),
        "page pool 42 (ifindex 4, io_uring zcrx, 1 buffer in flight, detached)"
    );
}

#[test]
fn hugepage_goal_counts_only_the_runs_pages() {
    let after = HugepageStatus {
        nr: 64,
        free: 10,
        resv: 2,
    };
    let g = HugepageGoal::after_alloc(32, &after);
    assert_eq!(g.target, 40);
    let s = |nr, free, resv| HugepageStatus { nr, free, resv };
    assert_eq!(g.missing(&s(64, 10, 2)), 32);
    assert_eq!(g.missing(&s(64, 30, 2)), 12);
    assert_eq!(g.missing(&s(64, 42, 2)), 0);
    // More than the target (someone else freed pages): none missing, never negative.
    assert_eq!(g.missing(&s(64, 64, 0)), 0);
    // Fewer available than right after the allocation (someone took pages): capped at 32.
    assert_eq!(g.missing(&s(64, 0, 0)), 32);
    // nr_hugepages lowered below the target: the pool's size is the most that can come back.
    assert_eq!(g.missing(&s(20, 20, 0)), 0);
}

#[test]
fn start_with_enough_hugepages_reads_nothing_else() {
    let mut k = FakeKernel::new(64, 40);
    assert_eq!(await_hugepages(&mut k, 32, WAIT).unwrap(), None);
    assert_eq!((k.sleeps, k.pool_reads, k.nudges), (0, 0, 0));
}

/// The case: 64 hugepages, two previous receivers' bindings still being torn down.
#[test]
fn start_waits_for_a_binding_being_torn_down() {
    let mut k = FakeKernel::new(64, 0)
        .pool(pool(31, 5, 1), When::AfterNudge(MS(900)), 32, MS(10))
        .pool(pool(33, 6, 4), When::AfterNudge(MS(1000)), 32, MS(10));
    let line = await_hugepages(&mut k, 32, WAIT).unwrap().unwrap();
    assert_eq!(k.nudges, 1);
    assert_eq!(
        line,
        "waited 0.95 s for 32 free 2 MiB hugepages (0 at first), held by page pool 31 \
         (ifindex 4, dmabuf 5, 1 buffer in flight, detached), page pool 33 (ifindex 4, dmabuf \
         6, 4 buffers in flight, detached)"
    );
}

/// No pool lingers and the count does not move: a plain shortage, skipped after the short
/// quiet window with the usual message.
#[test]
fn start_without_a_teardown_skips_quickly_with_the_usual_message() {
    let mut k = FakeKernel::new(16, 16);
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
    assert_eq!(
        e.to_string(),
        "skip: need 32 free 2 MiB hugepages, have 16; raise vm.nr_hugepages (now 16; e.g. \
         `sysctl vm.nr_hugepages=32`)"
    );
    assert_eq!(k.t, QUIET);
    assert_eq!(k.nudges, 0);
}

/// Pools already gone but the pages still coming back (the dma-buf released a moment later):
/// the rising count keeps the wait going.
#[test]
fn start_follows_a_rising_count() {
    let mut k = FakeKernel::new(64, 16);
    k.returns = vec![(8, When::At(MS(150))), (8, When::At(MS(300)))];
    let line = await_hugepages(&mut k, 32, WAIT).unwrap().unwrap();
    assert_eq!(
        line,
        "waited 0.30 s for 32 free 2 MiB hugepages (16 at first), held by a binding being torn \
         down"
    );
    // Rising, but not far enough: a skip that says it waited.
    let mut k = FakeKernel::new(64, 16);
    k.returns = vec![(8, When::At(MS(100)))];
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert_eq!(k.t, MS(300), "quiet window counted from the last rise");
    assert!(
        e.to_string()
            .ends_with("; waited 0.3 s while a previous binding was torn down (16 free at first)"),
        "{e}"
    );
}

/// A pool seen lingering, then gone, its pages back only 600 ms after it went (the dma-buf's
/// release work under a loaded TCG host took longer than the quiet window): the wait goes on
/// and succeeds. Before, it skipped 200 ms after the pool went ("waited 2.0 s while a previous
/// binding was torn down (0 free at first)" in the VM suite at host load 17).
#[test]
fn start_waits_for_the_pages_of_a_pool_it_saw_go() {
    let mut k = FakeKernel::new(32, 0).pool(pool(31, 5, 2), When::At(MS(1000)), 32, MS(600));
    let line = await_hugepages(&mut k, 32, WAIT).unwrap().unwrap();
    assert!(k.t >= MS(1600) && k.t < MS(1700), "{:?}", k.t);
    assert!(
        line.starts_with("waited 1.6") && line.contains("held by page pool 31"),
        "{line}"
    );
    // Pages that never come back: a skip at the bound, saying it waited for the teardown.
    let mut k = FakeKernel::new(32, 0).pool(pool(31, 5, 2), When::At(MS(1000)), 32, WAIT * 2);
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert_eq!(k.t, WAIT);
    assert!(
        e.to_string()
            .ends_with("; waited 5.0 s while a previous binding was torn down (0 free at first)"),
        "{e}"
    );
}

#[test]
fn start_skip_after_the_bound_names_the_lingering_pools() {
    let mut k = FakeKernel::new(64, 0)
        .pool(pool(31, 5, 1), When::Never, 32, MS(0))
        .pool(pool(33, 6, 4), When::Never, 32, MS(0));
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
    assert_eq!(k.t, WAIT);
    assert_eq!(k.nudges, 5);
    assert_eq!(
        e.to_string(),
        "skip: need 32 free 2 MiB hugepages, have 0; raise vm.nr_hugepages (now 64; e.g. \
         `sysctl vm.nr_hugepages=96`); after waiting 5.0 s a previous binding still holds \
         them: page pool 31 (ifindex 4, dmabuf 5, 1 buffer in flight, detached), page pool 33 \
         (ifindex 4, dmabuf 6, 4 buffers in flight, detached)"
    );
}

#[test]
fn start_is_interrupted_by_a_stop_signal() {
    let mut k = FakeKernel::new(64, 0).pool(pool(31, 5, 1), When::Never, 32, MS(0));
    k.stop_at = Some((MS(500), libc::SIGTERM));
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert!(
        matches!(e, Error::Interrupted(s) if s == libc::SIGTERM),
        "{e}"
    );
    assert_eq!(k.t, MS(500));
}

#[test]
fn start_with_a_failing_pool_dump_still_skips_and_says_why() {
    let mut k = FakeKernel::new(16, 0);
    k.pool_dump_fails = true;
    let e = await_hugepages(&mut k, 32, WAIT).unwrap_err();
    assert_eq!(k.t, QUIET);
    assert!(
        e.to_string().ends_with(
            " (page-pool-get failed: page-pool-get: ENOENT (No such file or directory))"
        ),
        "{e}"
    );
}

/// Only the pools of a binding being torn down count: a live binding's pool has no detach
/// time, a plain pool no provider.
#[test]
fn lingering_means_a_provider_and_a_detach_time() {
    let mut live = pool(1, 7, 64);
    live.detach_time = None;
    let mut plain = pool(2, 0, 3);
    plain.dmabuf = None;
    let mut zc = pool(3, 0, 1);
    zc.dmabuf = None;
    zc.io_uring = true;
    let gone_dev = PagePoolInfo {
        ifindex: None,
        ..pool(4, 9, 1)
    };
    let l = lingering(&[gone_dev.clone(), live, plain, zc.clone(), pool(5, 8, 2)]);
    let ids: Vec<u64> = l.iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![3, 4, 5]);
}
