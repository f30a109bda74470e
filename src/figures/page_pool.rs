//! The page pools of the bound RX queues over the measured interval: the growth of each
//! pool's `page-pool-stats-get` counters (allocations from the cache and from the provider or
//! page allocator, recycles into the cache and the ring), grouped by the NAPI instance that
//! serves the bound queues. Pools are tied to queues by their `napi-id` (`page-pool-get`) and
//! the queue's `napi-id` (`queue-get`). A kernel without `CONFIG_PAGE_POOL_STATS` (6.18 here)
//! gives no figure ([`NoPoolStats`]), never a zero.

use std::fmt;

use crate::error::{Error, Result};
use crate::netlink::netdev::{PagePoolInfo, PagePoolStats, QueueInfo, QueueType};

/// One reading of the page pools: the `page-pool-get` dump (which pool serves which NAPI) and
/// the `page-pool-stats-get` dump (their counters), or why the kernel keeps no counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PoolReading {
    /// Both dumps as the kernel answered them.
    Rows {
        /// `page-pool-get` rows (every pool of the network namespace).
        pools: Vec<PagePoolInfo>,
        /// `page-pool-stats-get` rows.
        stats: Vec<PagePoolStats>,
    },
    /// The kernel has no page-pool stats (`CONFIG_PAGE_POOL_STATS` off): its refusal, as text.
    Unsupported(String),
}

impl PoolReading {
    /// Sorts the two dumps' answers: `EOPNOTSUPP` from the stats dump (the operation is not
    /// registered) is [`PoolReading::Unsupported`].
    ///
    /// Errors: any other error of either dump, unchanged.
    pub(crate) fn from_dumps(
        pools: Result<Vec<PagePoolInfo>>,
        stats: Result<Vec<PagePoolStats>>,
    ) -> Result<PoolReading> {
        match stats {
            Err(Error::Netlink(e)) if e.errno == libc::EOPNOTSUPP => {
                Ok(PoolReading::Unsupported(e.to_string()))
            }
            Err(e) => Err(e),
            Ok(stats) => Ok(PoolReading::Rows {
                pools: pools?,
                stats,
            }),
        }
    }
}

/// Why a run has no page-pool figures. Displays as `no page-pool stats: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoPoolStats(pub String);

impl fmt::Display for NoPoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no page-pool stats: {}", self.0)
    }
}

/// Growth of one group of pools' counters over the interval, in buffers (pages or niovs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PoolCounters {
    /// Allocations served from the pool's lockless cache.
    pub alloc_fast: u64,
    /// Allocations from the slow path (the memory provider, or the page allocator).
    pub alloc_slow: u64,
    /// Higher-order slow-path allocations.
    pub alloc_slow_high_order: u64,
    /// Times the ring was empty.
    pub alloc_empty: u64,
    /// Cache refills from the ring.
    pub alloc_refill: u64,
    /// Buffers the refill skipped (NUMA mismatch).
    pub alloc_waive: u64,
    /// Buffers recycled into the cache.
    pub recycle_cached: u64,
    /// Recycles refused: cache full.
    pub recycle_cache_full: u64,
    /// Buffers recycled into the ring.
    pub recycle_ring: u64,
    /// Recycles refused: ring full.
    pub recycle_ring_full: u64,
    /// Buffers released, not recycled, because something else held a reference.
    pub recycle_released_refcnt: u64,
}

impl PoolCounters {
    fn of(s: &PagePoolStats) -> PoolCounters {
        let v = |x: Option<u64>| x.unwrap_or(0);
        PoolCounters {
            alloc_fast: v(s.alloc_fast),
            alloc_slow: v(s.alloc_slow),
            alloc_slow_high_order: v(s.alloc_slow_high_order),
            alloc_empty: v(s.alloc_empty),
            alloc_refill: v(s.alloc_refill),
            alloc_waive: v(s.alloc_waive),
            recycle_cached: v(s.recycle_cached),
            recycle_cache_full: v(s.recycle_cache_full),
            recycle_ring: v(s.recycle_ring),
            recycle_ring_full: v(s.recycle_ring_full),
            recycle_released_refcnt: v(s.recycle_released_refcnt),
        }
    }

    /// The counters as `(name, value)` pairs, in the kernel's attribute order; the names are
    /// the netlink spec's (`alloc-fast` …) with underscores.
    pub(crate) fn fields(&self) -> [(&'static str, u64); 11] {
        [
            ("alloc_fast", self.alloc_fast),
            ("alloc_slow", self.alloc_slow),
            ("alloc_slow_high_order", self.alloc_slow_high_order),
            ("alloc_empty", self.alloc_empty),
            ("alloc_refill", self.alloc_refill),
            ("alloc_waive", self.alloc_waive),
            ("recycle_cached", self.recycle_cached),
            ("recycle_cache_full", self.recycle_cache_full),
            ("recycle_ring", self.recycle_ring),
            ("recycle_ring_full", self.recycle_ring_full),
            ("recycle_released_refcnt", self.recycle_released_refcnt),
        ]
    }

    fn checked_sub(&self, b: &PoolCounters) -> Option<PoolCounters> {
        Some(PoolCounters {
            alloc_fast: self.alloc_fast.checked_sub(b.alloc_fast)?,
            alloc_slow: self.alloc_slow.checked_sub(b.alloc_slow)?,
            alloc_slow_high_order: self
                .alloc_slow_high_order
                .checked_sub(b.alloc_slow_high_order)?,
            alloc_empty: self.alloc_empty.checked_sub(b.alloc_empty)?,
            alloc_refill: self.alloc_refill.checked_sub(b.alloc_refill)?,
            alloc_waive: self.alloc_waive.checked_sub(b.alloc_waive)?,
            recycle_cached: self.recycle_cached.checked_sub(b.recycle_cached)?,
            recycle_cache_full: self.recycle_cache_full.checked_sub(b.recycle_cache_full)?,
            recycle_ring: self.recycle_ring.checked_sub(b.recycle_ring)?,
            recycle_ring_full: self.recycle_ring_full.checked_sub(b.recycle_ring_full)?,
            recycle_released_refcnt: self
                .recycle_released_refcnt
                .checked_sub(b.recycle_released_refcnt)?,
        })
    }

    fn add(&mut self, o: &PoolCounters) {
        let mut sum = self.fields();
        for (s, (_, v)) in sum.iter_mut().zip(o.fields()) {
            s.1 = s.1.saturating_add(v);
        }
        let [a, b, c, d, e, f, g, h, i, j, k] = sum.map(|(_, v)| v);
        *self = PoolCounters {
            alloc_fast: a,
            alloc_slow: b,
            alloc_slow_high_order: c,
            alloc_empty: d,
            alloc_refill: e,
            alloc_waive: f,
            recycle_cached: g,
            recycle_cache_full: h,
            recycle_ring: i,
            recycle_ring_full: j,
            recycle_released_refcnt: k,
        };
    }
}

/// The pools that serve one NAPI instance of the bound queues, and their counters' growth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueuePools {
    /// The bound RX queues this NAPI instance serves (usually one).
    pub queues: Vec<u32>,
    /// The NAPI id.
    pub napi_id: u32,
    /// The pools (ids) that served it at the end of the interval; a pool created during the
    /// interval counts from zero.
    pub pools: Vec<u64>,
    /// The summed growth of their counters.
    pub counters: PoolCounters,
}

/// The page pools of `queues` (RX queues of `ifindex`) between two readings, grouped by NAPI
/// instance (`queue_info`: the device's `queue-get` dump).
///
/// Errors: [`NoPoolStats`] with the reason when there is no honest figure: the kernel keeps no
/// page-pool stats, no queue is bound, a bound queue has no NAPI id, no pool serves it, or a
/// pool that served it at the start went away or counted backwards.
pub(crate) fn per_queue(
    before: &PoolReading,
    after: &PoolReading,
    ifindex: u32,
    queues: &[u32],
    queue_info: &[QueueInfo],
) -> std::result::Result<Vec<QueuePools>, NoPoolStats> {
    let rows = |r: &PoolReading| match r {
        PoolReading::Rows { pools, stats } => Ok((pools.clone(), stats.clone())),
        PoolReading::Unsupported(why) => Err(NoPoolStats(format!("the kernel keeps none ({why})"))),
    };
    let ((pools_b, stats_b), (pools_a, stats_a)) = (rows(before)?, rows(after)?);
    if queues.is_empty() {
        return Err(NoPoolStats("no RX queue is bound".into()));
    }
    let mut groups: Vec<QueuePools> = Vec::new();
    for &q in queues {
        let napi = queue_info
            .iter()
            .find(|i| i.queue_type == QueueType::Rx && i.id == q && i.ifindex == ifindex)
            .and_then(|i| i.napi_id)
            .ok_or_else(|| NoPoolStats(format!("rx queue {q} has no napi-id")))?;
        match groups.iter_mut().find(|g| g.napi_id == napi) {
            Some(g) => g.queues.push(q),
            None => groups.push(QueuePools {
                queues: vec![q],
                napi_id: napi,
                pools: Vec::new(),
                counters: PoolCounters::default(),
            }),
        }
    }
    let serving = |pools: &[PagePoolInfo], napi: u32| -> Vec<u64> {
        let mut ids: Vec<u64> = pools
            .iter()
            .filter(|p| {
                p.ifindex == Some(ifindex)
                    && p.napi_id == Some(u64::from(napi))
                    && p.detach_time.is_none()
            })
            .map(|p| p.id)
            .collect();
        ids.sort_unstable();
        ids
    };
    let counters = |stats: &[PagePoolStats], id: u64| {
        stats
            .iter()
            .find(|s| s.info.id == Some(id))
            .map(PoolCounters::of)
    };
    for g in &mut groups {
        let (was, now) = (serving(&pools_b, g.napi_id), serving(&pools_a, g.napi_id));
        let label = || format!("rx queue {}", join(&g.queues));
        if now.is_empty() {
            return Err(NoPoolStats(format!("no page pool serves {}", label())));
        }
        if let Some(gone) = was.iter().find(|id| !now.contains(id)) {
            return Err(NoPoolStats(format!(
                "page pool {gone} of {} went away during the interval (queue restarted?)",
                label()
            )));
        }
        for &id in &now {
            let a = counters(&stats_a, id).ok_or_else(|| {
                NoPoolStats(format!("page pool {id} of {} has no stats row", label()))
            })?;
            let b = if was.contains(&id) {
                counters(&stats_b, id).ok_or_else(|| {
                    NoPoolStats(format!("page pool {id} of {} has no stats row", label()))
                })?
            } else {
                PoolCounters::default()
            };
            let grew = a.checked_sub(&b).ok_or_else(|| {
                NoPoolStats(format!("the counters of page pool {id} went backwards"))
            })?;
            g.counters.add(&grew);
        }
        g.pools = now;
    }
    Ok(groups)
}

fn join(qs: &[u32]) -> String {
    qs.iter().map(u32::to_string).collect::<Vec<_>>().join("+")
}

/// `q2: 812 alloc (800 fast, 12 slow), 790 recycled (700 cache, 90 ring)`: one group, for
/// the human summary.
pub(crate) fn describe(g: &QueuePools) -> String {
    let c = &g.counters;
    format!(
        "q{}: {} alloc ({} fast, {} slow), {} recycled ({} cache, {} ring), {} released",
        join(&g.queues),
        c.alloc_fast.saturating_add(c.alloc_slow),
        c.alloc_fast,
        c.alloc_slow,
        c.recycle_cached.saturating_add(c.recycle_ring),
        c.recycle_cached,
        c.recycle_ring,
        c.recycle_released_refcnt
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::netdev::PagePoolRef;

    fn queue(id: u32, napi: u32) -> QueueInfo {
        QueueInfo {
            id,
            queue_type: QueueType::Rx,
            ifindex: 4,
            napi_id: Some(napi),
            dmabuf: None,
            io_uring: false,
            xsk: false,
        }
    }

    fn pool(id: u64, napi: u64) -> PagePoolInfo {
        PagePoolInfo {
            id,
            ifindex: Some(4),
            napi_id: Some(napi),
            inflight: None,
            inflight_mem: None,
            detach_time: None,
            dmabuf: None,
            io_uring: false,
        }
    }

    fn stats(id: u64, fast: u64, slow: u64, ring: u64) -> PagePoolStats {
        PagePoolStats {
            info: PagePoolRef {
                id: Some(id),
                ifindex: Some(4),
            },
            alloc_fast: Some(fast),
            alloc_slow: Some(slow),
            recycle_ring: Some(ring),
            ..Default::default()
        }
    }

    fn reading(pools: Vec<PagePoolInfo>, stats: Vec<PagePoolStats>) -> PoolReading {
        PoolReading::Rows { pools, stats }
    }

    #[test]
    fn counters_grow_per_napi_and_new_pools_count_from_zero() {
        let qi = [queue(2, 10), queue(3, 11), queue(0, 9)];
        let before = reading(
            vec![pool(7, 10), pool(8, 11), pool(1, 9)],
            vec![stats(7, 100, 5, 90), stats(8, 0, 1, 0), stats(1, 9, 9, 9)],
        );
        let after = reading(
            vec![pool(7, 10), pool(8, 11), pool(9, 11), pool(1, 9)],
            vec![
                stats(7, 150, 6, 130),
                stats(8, 10, 1, 4),
                stats(9, 3, 2, 1),
                stats(1, 99, 99, 99),
            ],
        );
        let g = per_queue(&before, &after, 4, &[2, 3], &qi).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].queues.clone(), g[0].pools.clone()),
            (vec![2], vec![7])
        );
        assert_eq!(
            (
                g[0].counters.alloc_fast,
                g[0].counters.alloc_slow,
                g[0].counters.recycle_ring
            ),
            (50, 1, 40)
        );
        assert_eq!(g[1].pools, vec![8, 9]);
        assert_eq!(
            (
                g[1].counters.alloc_fast,
                g[1].counters.alloc_slow,
                g[1].counters.recycle_ring
            ),
            (13, 2, 5)
        );
        assert_eq!(
            describe(&g[0]),
            "q2: 51 alloc (50 fast, 1 slow), 40 recycled (0 cache, 40 ring), 0 released"
        );
    }

    #[test]
    fn queues_sharing_a_napi_are_one_group() {
        let qi = [queue(2, 10), queue(3, 10)];
        let r = reading(vec![pool(7, 10)], vec![stats(7, 1, 1, 1)]);
        let g = per_queue(&r, &r, 4, &[2, 3], &qi).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].queues, vec![2, 3]);
        assert_eq!(describe(&g[0]).split(':').next(), Some("q2+3"));
    }

    #[test]
    fn every_reason_for_no_figure_is_named() {
        let qi = [queue(2, 10)];
        let ok = reading(vec![pool(7, 10)], vec![stats(7, 5, 5, 5)]);
        let why = |b: &PoolReading, a: &PoolReading, qs: &[u32], qi: &[QueueInfo]| {
            per_queue(b, a, 4, qs, qi).unwrap_err().to_string()
        };
        let off = PoolReading::Unsupported("EOPNOTSUPP".into());
        assert_eq!(
            why(&off, &ok, &[2], &qi),
            "no page-pool stats: the kernel keeps none (EOPNOTSUPP)"
        );
        assert_eq!(
            why(&ok, &ok, &[], &qi),
            "no page-pool stats: no RX queue is bound"
        );
        assert_eq!(
            why(&ok, &ok, &[5], &qi),
            "no page-pool stats: rx queue 5 has no napi-id"
        );
        let none = reading(vec![pool(7, 99)], vec![stats(7, 5, 5, 5)]);
        assert_eq!(
            why(&none, &none, &[2], &qi),
            "no page-pool stats: no page pool serves rx queue 2"
        );
        let replaced = reading(vec![pool(8, 10)], vec![stats(8, 1, 1, 1)]);
        assert_eq!(
            why(&ok, &replaced, &[2], &qi),
            "no page-pool stats: page pool 7 of rx queue 2 went away during the interval \
             (queue restarted?)"
        );
        let back = reading(vec![pool(7, 10)], vec![stats(7, 4, 5, 5)]);
        assert_eq!(
            why(&ok, &back, &[2], &qi),
            "no page-pool stats: the counters of page pool 7 went backwards"
        );
        let mut detached = pool(7, 10);
        detached.detach_time = Some(1);
        let gone = reading(vec![detached], vec![stats(7, 5, 5, 5)]);
        assert_eq!(
            why(&gone, &gone, &[2], &qi),
            "no page-pool stats: no page pool serves rx queue 2"
        );
    }

    #[test]
    fn only_eopnotsupp_means_no_stats() {
        use crate::error::NlError;
        let refusal = |errno| {
            Err(Error::Netlink(Box::new(NlError::refusal(
                "netdev",
                "page-pool-stats-get",
                "all page pools",
                errno,
            ))))
        };
        assert!(matches!(
            PoolReading::from_dumps(Ok(vec![]), refusal(libc::EOPNOTSUPP)),
            Ok(PoolReading::Unsupported(_))
        ));
        assert!(PoolReading::from_dumps(Ok(vec![]), refusal(libc::EPERM)).is_err());
    }
}
