//! Waiting for the kernel to give back what a devmem or zcrx run held: the policy (what to
//! wait for, how long, what to say), in one place.
//!
//! The kernel tears a binding down asynchronously. Unbinding (closing the binding's netlink
//! socket) or closing a zcrx ring restarts the queues at once, but the old page pool lives on
//! while buffers are out: it is listed by `page-pool-get` with a detach time and its buffers in
//! flight, and the kernel retries releasing it once a second (net/core/page_pool.c
//! `page_pool_release_retry`). Only when it goes does the binding drop the dma-buf, and only
//! then are the udmabuf's pages — for large niovs, 2 MiB hugepages — free again. Buffers stay
//! out mostly because received sk_buffs that the socket consumed on another CPU wait in that
//! CPU's deferred-free list (see [`crate::sys::softirq`]); on an idle machine that took up to
//! 78 s in the VM suite's guest. A run that ends leaves that behind, and the next run finds
//! its hugepages missing.
//!
//! So:
//! - **before unbinding**, [`return_deferred_buffers`] has every CPU free what was deferred to
//!   it, so the pool usually goes at once;
//! - **on exit**, [`await_release`] waits (at most [`WAIT`], ended by a stop signal) until the
//!   run's queues show free, its page pools are gone and its hugepages are free again, and
//!   [`Release::log_line`] says so in one line when it had to wait, or what is still held;
//! - **on start**, [`await_hugepages`] waits when the hugepages a run needs are short while a
//!   previous binding is being torn down (a page pool with a memory provider and a detach
//!   time, or the free count rising), instead of skipping at once; the skip, when it still
//!   comes, names what holds them.
//!
//! The udmabuf's `size_limit_mb` is a fixed per-buffer limit of the module, not something a
//! teardown gives back, so it is never waited for. Queues a previous run still owns are waited
//! for by [`crate::nic::queues::choose_queues`], with this module's bound.
//!
//! Every kernel reading goes through [`Env`]; [`kernel::KernelEnv`] is the real one (netdev
//! netlink, the hugepage pool, [`crate::sys::softirq`]). Tests script the readings and the
//! clock.

use std::time::Duration;

use crate::caps::Missing;
use crate::error::{Error, Result};
use crate::netlink::netdev::{PagePoolInfo, QueueInfo};
use crate::nic::queues::{describe_owned, owned_rx, QueueOwner};
pub(crate) use crate::sys::softirq::CpuReach;
use crate::udmabuf::HugepageStatus;

pub(crate) mod kernel;

/// The longest wait for what a run held (on exit) or for hugepages a previous binding still
/// holds (on start): 5 s. With [`return_deferred_buffers`] the VM suite's guest had a devmem
/// binding's hugepages back within 0.06 s of the exit and a zcrx area's within 1.05 s (one
/// page-pool release retry; docs/kernel-7.3-devmem-nic.md); 5 s leaves room for a slower
/// machine without making a real shortage wait long.
pub(crate) const WAIT: Duration = crate::nic::queues::QUEUE_FREE_WAIT;

/// Interval between readings while waiting: 50 ms.
pub(crate) const POLL_INTERVAL: Duration = crate::nic::queues::QUEUE_POLL_INTERVAL;

/// How often a wait asks the CPUs again to free deferred buffers while page pools of the run
/// (on start: of a binding being torn down) are listed: 1 s, the kernel's own page-pool release
/// retry interval.
pub(crate) const NUDGE_INTERVAL: Duration = Duration::from_secs(1);

/// On start, how long a hugepage shortage is watched for the free count to rise when no page
/// pool was seen being torn down, before it is a skip: 200 ms (a shortage with no teardown in
/// sight is a plain one; once a lingering pool was seen, the wait goes on to its bound).
pub(crate) const QUIET: Duration = Duration::from_millis(200);

/// The kernel as the waits see it. Real: [`kernel::KernelEnv`]; tests: scripted readings and
/// a fake clock.
pub(crate) trait Env {
    /// RX and TX queues of the run's device (netdev `queue-get` dump); empty without a device.
    fn queues(&mut self) -> Result<Vec<QueueInfo>>;
    /// Every page pool of the network namespace (netdev `page-pool-get` dump).
    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>>;
    /// The 2 MiB hugepage pool.
    fn hugepages(&mut self) -> Result<HugepageStatus>;
    /// Has every CPU the process may run on free the sk_buffs whose free was deferred to it
    /// ([`crate::sys::softirq::run_net_rx_on_each_cpu`]); says how many of the online CPUs
    /// that was.
    fn return_deferred_buffers(&mut self) -> Result<CpuReach>;
    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;
    /// Sleeps `d`.
    fn sleep(&mut self, d: Duration);
    /// The stop signal received so far (SIGINT/SIGTERM/SIGHUP), if any.
    fn stop_requested(&self) -> Option<i32>;
}

/// Before unbinding (or after closing a zcrx ring): frees what other CPUs hold for the run's
/// sockets, so the page pools can go as soon as the provider is gone. Best effort: the waits
/// ask again and name a failure when buffers stay out.
pub(crate) fn return_deferred_buffers(env: &mut dyn Env) {
    let _ = env.return_deferred_buffers();
}

/// Which page pools belong to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PoolOwner {
    /// The run had no memory provider (nothing was bound).
    Nothing,
    /// Pools whose memory comes from these devmem bindings (`NETDEV_A_PAGE_POOL_DMABUF`).
    Dmabuf(Vec<u32>),
    /// io_uring zcrx pools of `ifindex`, except the pool ids in `before` (there before the run
    /// registered its ifq).
    IoUring {
        /// The device of the ifq.
        ifindex: u32,
        /// io_uring pools of the device that are not the run's.
        before: Vec<u64>,
    },
}

impl PoolOwner {
    /// Whether `p` is one of the run's pools.
    pub(crate) fn owns(&self, p: &PagePoolInfo) -> bool {
        match self {
            PoolOwner::Nothing => false,
            PoolOwner::Dmabuf(ids) => p.dmabuf.is_some_and(|d| ids.contains(&d)),
            PoolOwner::IoUring { ifindex, before } => {
                p.io_uring && p.ifindex == Some(*ifindex) && !before.contains(&p.id)
            }
        }
    }
}

/// The ids of the io_uring zcrx pools of `ifindex` in `pools` (read before a run registers its
/// ifq: [`PoolOwner::IoUring`]'s `before`).
pub(crate) fn io_uring_pool_ids(pools: &[PagePoolInfo], ifindex: u32) -> Vec<u64> {
    pools
        .iter()
        .filter(|p| p.io_uring && p.ifindex == Some(ifindex))
        .map(|p| p.id)
        .collect()
}

/// The run's hugepages, counted from the pool right after they were allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HugepageGoal {
    /// 2 MiB hugepages the run's memory took.
    pub pages: u64,
    /// Available pages ([`HugepageStatus::available`]) once they are back: what was available
    /// right after the allocation, plus `pages`.
    pub target: u64,
}

impl HugepageGoal {
    /// The goal for `pages` hugepages, with the pool as it was right after they were taken.
    pub(crate) fn after_alloc(pages: u64, after: &HugepageStatus) -> HugepageGoal {
        HugepageGoal {
            pages,
            target: after.available().saturating_add(pages),
        }
    }

    /// How many of the run's pages are not yet free in `now` (0..=`pages`). A pool shrunk
    /// below the target meanwhile (`vm.nr_hugepages` lowered) counts as given back up to its
    /// size. Pages another run frees meanwhile count as the run's: the next run has them
    /// either way.
    pub(crate) fn missing(&self, now: &HugepageStatus) -> u64 {
        self.target
            .min(now.nr)
            .saturating_sub(now.available())
            .min(self.pages)
    }
}

/// The goal for a run that just took `pages` 2 MiB hugepages, from a reading right after the
/// allocation; `None` without hugepages or when the pool cannot be read (then the exit wait
/// does not look at hugepages).
pub(crate) fn hugepage_goal(env: &mut dyn Env, pages: u64) -> Option<HugepageGoal> {
    if pages == 0 {
        return None;
    }
    env.hugepages()
        .ok()
        .map(|s| HugepageGoal::after_alloc(pages, &s))
}

/// What a run held, to see given back on exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holdings {
    /// What held it, for the log: "dmabuf binding 7 on eth0", "zcrx ifq 0 on eth0", ….
    pub what: String,
    /// RX queues of the device that must show no owner.
    pub queues: Vec<u32>,
    /// The run's page pools, which must be gone.
    pub pools: PoolOwner,
    /// The run's hugepages, which must be free again.
    pub hugepages: Option<HugepageGoal>,
}

/// What of a run's holdings the kernel still has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Owned queues among the run's.
    pub queues: Vec<(u32, Vec<QueueOwner>)>,
    /// The run's page pools still listed.
    pub pools: Vec<PagePoolInfo>,
    /// The run's hugepages not yet free.
    pub hugepages: u64,
}

impl Held {
    /// Nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.pools.is_empty() && self.hugepages == 0
    }

    /// Buffers the pools still have out.
    pub(crate) fn in_flight(&self) -> u64 {
        self.pools.iter().filter_map(|p| p.inflight).sum()
    }

    /// `"queue 3 (dmabuf 7), page pool 33 (ifindex 4, dmabuf 7, 4 buffers in flight,
    /// detached), 32 of its 32 hugepages"`, with `of` the run's hugepage count.
    pub(crate) fn describe(&self, of: Option<u64>) -> String {
        let mut parts = Vec::new();
        if !self.queues.is_empty() {
            parts.push(describe_owned(&self.queues));
        }
        parts.extend(self.pools.iter().map(describe_pool));
        if self.hugepages > 0 {
            parts.push(match of {
                Some(n) => format!("{} of its {n} 2 MiB hugepages", self.hugepages),
                None => format!("{} 2 MiB hugepages", self.hugepages),
            });
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(", ")
        }
    }
}

/// `"page pool 33 (ifindex 4, dmabuf 7, 4 buffers in flight, detached)"`.
pub(crate) fn describe_pool(p: &PagePoolInfo) -> String {
    let mut facts = Vec::new();
    if let Some(i) = p.ifindex {
        facts.push(format!("ifindex {i}"));
    }
    if let Some(d) = p.dmabuf {
        facts.push(format!("dmabuf {d}"));
    }
    if p.io_uring {
        facts.push("io_uring zcrx".into());
    }
    if let Some(n) = p.inflight {
        facts.push(format!("{} in flight", crate::figures::count(n, "buffer")));
    }
    if p.detach_time.is_some() {
        facts.push("detached".into());
    }
    format!("page pool {} ({})", p.id, facts.join(", "))
}

/// [`describe_pool`] of each, joined with `", "`.
fn describe_pools(pools: &[PagePoolInfo]) -> String {
    pools
        .iter()
        .map(describe_pool)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads what of `h` the kernel still holds (only what `h` has: no queue-get without queues,
/// no page-pool dump without pools, no hugepage read without a goal).
pub(crate) fn held(env: &mut dyn Env, h: &Holdings) -> Result<Held> {
    let queues = if h.queues.is_empty() {
        Vec::new()
    } else {
        owned_rx(&env.queues()?)
            .into_iter()
            .filter(|(q, _)| h.queues.contains(q))
            .collect()
    };
    let pools = if h.pools == PoolOwner::Nothing {
        Vec::new()
    } else {
        let mut v: Vec<PagePoolInfo> = env
            .page_pools()?
            .into_iter()
            .filter(|p| h.pools.owns(p))
            .collect();
        v.sort_by_key(|p| p.id);
        v
    };
    let hugepages = match &h.hugepages {
        Some(g) => g.missing(&env.hugepages()?),
        None => 0,
    };
    Ok(Held {
        queues,
        pools,
        hugepages,
    })
}

/// How an exit wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Release {
    /// What held it ([`Holdings::what`]).
    pub what: String,
    /// The run's hugepage count, for the log.
    pub hugepages: Option<u64>,
    /// Time from the first reading to the last.
    pub waited: Duration,
    /// Held at the first reading.
    pub first: Held,
    /// Held at the last reading (empty: everything was given back).
    pub still: Held,
    /// The stop signal that ended the wait early.
    pub interrupted: Option<i32>,
    /// The last answer when the CPUs were asked to free deferred buffers (`None`: not asked):
    /// how many were reached, or why none was.
    pub nudge: Option<std::result::Result<CpuReach, String>>,
}

impl Release {
    /// The log line: `None` when nothing was held at the first reading (no wait); a line
    /// saying how long it waited and for what; or, when the wait ran out or was stopped, a line
    /// saying what is still held.
    pub(crate) fn log_line(&self) -> Option<String> {
        if self.first.is_empty() {
            return None;
        }
        let secs = self.waited.as_secs_f64();
        let of = self.hugepages;
        if self.still.is_empty() {
            return Some(format!(
                "waited {secs:.2} s until the kernel gave back what {} held: {}",
                self.what,
                self.first.describe(of)
            ));
        }
        let when = match self.interrupted {
            Some(sig) => format!("when signal {sig} ended the wait after {secs:.2} s"),
            None => format!("after {secs:.1} s"),
        };
        let mut line = format!(
            "the kernel still holds what {} held {when}: {}; a next run that needs it waits \
             for it or skips",
            self.what,
            self.still.describe(of)
        );
        if self.still.in_flight() > 0 {
            match &self.nudge {
                Some(Err(e)) => line.push_str(&format!(
                    " (buffers in flight wait for their CPU's deferred sk_buff frees, and the \
                     CPUs could not be asked to run them: {e})"
                )),
                Some(Ok(r)) if r.reached < r.online => line.push_str(&format!(
                    " (buffers in flight: sk_buffs whose free was deferred to a CPU this \
                     process may not run on ({} of {} CPUs reached) wait for that CPU's next \
                     network receive)",
                    r.reached, r.online
                )),
                _ => {
                    line.push_str(" (buffers in flight: an sk_buff or token still refers to them)")
                }
            }
        }
        Some(line)
    }
}

/// On exit, after unbinding and releasing the memory: waits until the kernel no longer holds
/// anything of `h`, for at most `bound`, asking the CPUs to free deferred buffers at once and
/// every [`NUDGE_INTERVAL`] while page pools of the run are still listed. A stop signal ends
/// the wait at the next reading.
///
/// Errors: the first reading that fails (the wait is informational: callers log it).
pub(crate) fn await_release(env: &mut dyn Env, h: &Holdings, bound: Duration) -> Result<Release> {
    let start = env.now();
    let mut first = None;
    let mut last_nudge: Option<Duration> = None;
    let mut nudge = None;
    loop {
        let now_held = held(env, h)?;
        let elapsed = env.now().saturating_sub(start);
        let first_held = first.get_or_insert_with(|| now_held.clone()).clone();
        let interrupted = env.stop_requested();
        if now_held.is_empty() || interrupted.is_some() || elapsed >= bound {
            return Ok(Release {
                what: h.what.clone(),
                hugepages: h.hugepages.map(|g| g.pages),
                waited: elapsed,
                first: first_held,
                still: now_held,
                interrupted,
                nudge,
            });
        }
        if !now_held.pools.is_empty()
            && last_nudge.is_none_or(|t| elapsed.saturating_sub(t) >= NUDGE_INTERVAL)
        {
            last_nudge = Some(elapsed);
            nudge = Some(env.return_deferred_buffers().map_err(|e| e.to_string()));
        }
        env.sleep(POLL_INTERVAL.min(bound - elapsed));
    }
}

/// Page pools that belong to a binding being torn down: a memory provider (devmem or io_uring
/// zcrx) and a detach time (destroyed, waiting for buffers in flight). Any device: the
/// hugepages are the whole system's.
pub(crate) fn lingering(pools: &[PagePoolInfo]) -> Vec<PagePoolInfo> {
    let mut v: Vec<PagePoolInfo> = pools
        .iter()
        .filter(|p| (p.dmabuf.is_some() || p.io_uring) && p.detach_time.is_some())
        .cloned()
        .collect();
    v.sort_by_key(|p| p.id);
    v
}

/// On start, before allocating `needed` 2 MiB hugepages: `Ok(None)` when they are available;
/// otherwise waits while a previous binding is being torn down ([`lingering`] page pools, then,
/// once one was seen, until its pages come back; or the available count rising within
/// [`QUIET`]), for at most `bound`, asking the CPUs to free
/// deferred buffers at once and every [`NUDGE_INTERVAL`] while such pools are listed.
/// `Ok(Some(line))` when the pages came free (the line says how long it waited and for what).
///
/// Errors: the hugepage `Error::Skip` ([`HugepageStatus::require`]) when they stay short,
/// naming the page pools still holding them and how long it waited; `Error::Interrupted` on
/// a stop signal; errors reading the hugepage pool. A failing page-pool dump only means no
/// pool is known to linger (it is named in the skip).
pub(crate) fn await_hugepages(
    env: &mut dyn Env,
    needed: u64,
    bound: Duration,
) -> Result<Option<String>> {
    let start = env.now();
    let first = env.hugepages()?;
    if first.available() >= needed {
        return Ok(None);
    }
    let mut prev = first.available();
    let mut last_activity = Duration::ZERO;
    let mut last_nudge: Option<Duration> = None;
    let mut held_by: Vec<PagePoolInfo> = Vec::new();
    loop {
        if let Some(sig) = env.stop_requested() {
            return Err(Error::Interrupted(sig));
        }
        let (pools, pools_error) = match env.page_pools() {
            Ok(p) => (lingering(&p), None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let elapsed = env.now().saturating_sub(start);
        if !pools.is_empty() {
            last_activity = elapsed;
            for p in &pools {
                held_by.retain(|h| h.id != p.id);
                held_by.push(p.clone());
            }
            held_by.sort_by_key(|p| p.id);
            if elapsed < bound
                && last_nudge.is_none_or(|t| elapsed.saturating_sub(t) >= NUDGE_INTERVAL)
            {
                last_nudge = Some(elapsed);
                return_deferred_buffers(env);
            }
        }
        let now = env.hugepages()?;
        let elapsed = env.now().saturating_sub(start);
        if now.available() >= needed {
            let by = if held_by.is_empty() {
                "a binding being torn down".to_string()
            } else {
                describe_pools(&held_by)
            };
            return Ok(Some(format!(
                "waited {:.2} s for {needed} free 2 MiB hugepages ({} at first), held by {by}",
                elapsed.as_secs_f64(),
                first.available()
            )));
        }
        if now.available() > prev {
            last_activity = elapsed;
        }
        prev = now.available();
        // The quiet window only for a shortage no teardown was seen in: once a lingering pool
        // was listed, its pages come back after it goes (the binding's dma-buf is released by
        // a work item, then the udmabuf unpins them), which took over 200 ms under TCG on a
        // loaded host (tests/vm/FLAKES.md): the wait goes on to its bound.
        let quiet = pools.is_empty()
            && held_by.is_empty()
            && elapsed.saturating_sub(last_activity) >= QUIET;
        if quiet || elapsed >= bound {
            let mut waited = if !pools.is_empty() {
                format!(
                    "; after waiting {:.1} s a previous binding still holds them: {}",
                    elapsed.as_secs_f64(),
                    describe_pools(&pools)
                )
            } else if !held_by.is_empty() || now.available() > first.available() {
                format!(
                    "; waited {:.1} s while a previous binding was torn down ({} free at first)",
                    elapsed.as_secs_f64(),
                    first.available()
                )
            } else {
                String::new()
            };
            if let Some(e) = pools_error {
                waited.push_str(&format!(" (page-pool-get failed: {e})"));
            }
            return Err(Error::Skip(Missing::Hugepages {
                needed,
                pool: Some(now),
                waited: Some(waited).filter(|w| !w.is_empty()),
            }));
        }
        env.sleep(POLL_INTERVAL.min(bound.saturating_sub(elapsed)));
    }
}

#[cfg(test)]
mod tests;
