//! Which RX queues to bind: C ncdevmem's defaults (server: the last RX queue alone; probe:
//! the upper half), minus queues that already belong to someone (a memory provider, io_uring
//! zcrx or AF_XDP, as netdev `queue-get` shows them), and a bounded wait for queues a
//! previous run is still releasing (provider teardown is asynchronous).

use std::fmt;
use std::time::{Duration, Instant};

use super::guards::SharedNic;
use super::NicOps;
use crate::caps::{classify, Missing, Op};
use crate::error::{Error, Result};
use crate::netlink::ethtool::Channels;
use crate::netlink::netdev::{QueueInfo, QueueType};

/// How long [`choose_queues`] waits for a wanted queue to become free, and how long
/// teardown waits for unbound queues to show free: the release policy's bound
/// (5 s, as long as the teardown's other waits).
pub const QUEUE_FREE_WAIT: Duration = Duration::from_secs(5);

/// Interval between `queue-get` polls while waiting (50 ms, as the teardown's other polls).
pub const QUEUE_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Who owns an RX queue, from `queue-get` (`NETDEV_A_QUEUE_DMABUF` / `IO_URING` / `XSK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueOwner {
    /// A devmem binding with this id (ours lingering, or someone else's).
    Dmabuf(u32),
    /// An io_uring zcrx interface queue.
    IoUring,
    /// An AF_XDP socket.
    Xsk,
}

impl fmt::Display for QueueOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueOwner::Dmabuf(id) => write!(f, "dmabuf {id}"),
            QueueOwner::IoUring => write!(f, "io_uring zcrx"),
            QueueOwner::Xsk => write!(f, "AF_XDP"),
        }
    }
}

impl QueueOwner {
    /// What a bind-rx of a queue with this owner answers (refusals row 9 in
    /// `docs/kernel-interface.md#bind-rx-and-bind-tx`).
    pub fn bind_refusal(&self) -> &'static str {
        match self {
            QueueOwner::Dmabuf(_) | QueueOwner::IoUring => {
                "EEXIST \"designated queue already memory provider bound\""
            }
            QueueOwner::Xsk => "EBUSY \"designated queue already in use by AF_XDP\"",
        }
    }
}

/// The owners of one queue (usually zero or one).
pub fn owners(q: &QueueInfo) -> Vec<QueueOwner> {
    let flags = [(q.io_uring, QueueOwner::IoUring), (q.xsk, QueueOwner::Xsk)];
    let flagged = flags.into_iter().filter_map(|(on, o)| on.then_some(o));
    q.dmabuf
        .map(QueueOwner::Dmabuf)
        .into_iter()
        .chain(flagged)
        .collect()
}

/// `(queue index, owners)` of every owned RX queue in `queues`, ascending.
pub(crate) fn owned_rx(queues: &[QueueInfo]) -> Vec<(u32, Vec<QueueOwner>)> {
    let mut v: Vec<(u32, Vec<QueueOwner>)> = queues
        .iter()
        .filter(|q| q.queue_type == QueueType::Rx)
        .map(|q| (q.id, owners(q)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    v.sort();
    v
}

/// `"dmabuf 7, AF_XDP"`: the owners of one queue.
pub(crate) fn describe_owners(owners: &[QueueOwner]) -> String {
    owners
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"queue 3 (dmabuf 7), queue 5 (AF_XDP)"`.
pub(crate) fn describe_owned(owned: &[(u32, Vec<QueueOwner>)]) -> String {
    let q = owned
        .iter()
        .map(|(q, o)| format!("queue {q} ({})", describe_owners(o)));
    q.collect::<Vec<_>>().join(", ")
}

/// True when channels-get answered without any count (rx, tx, other, combined).
pub(crate) fn no_channel_counts(c: &Channels) -> bool {
    c.rx_count.is_none()
        && c.tx_count.is_none()
        && c.other_count.is_none()
        && c.combined_count.is_none()
}

/// Which default C ncdevmem uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuePolicy {
    /// Server (and client): the last RX queue, one queue.
    Server,
    /// Probe: the upper half, `N/2` queues from `N/2`.
    Probe,
}

/// The queues to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueChoice {
    /// First RX queue index.
    pub start: u32,
    /// Number of RX queues (a count).
    pub num: u32,
    /// Lines for the log: owned queues seen, waits, fallbacks.
    pub notes: Vec<String>,
}

impl QueueChoice {
    /// The queue indices `start..start+num`.
    pub fn queues(&self) -> Vec<u32> {
        (self.start..self.start.saturating_add(self.num)).collect()
    }
}

fn range_owned(
    owned: &[(u32, Vec<QueueOwner>)],
    start: u32,
    num: u32,
) -> Vec<(u32, Vec<QueueOwner>)> {
    owned
        .iter()
        .filter(|(q, _)| *q >= start && u64::from(*q) < u64::from(start) + u64::from(num))
        .cloned()
        .collect()
}

/// Polls `queue-get` until none of `queues` has an owner or `timeout` passes; returns the
/// owned ones still left (empty = all free).
///
/// Errors: as [`NicOps::queues`].
pub fn wait_queues_free(
    nic: &mut dyn NicOps,
    queues: &[u32],
    timeout: Duration,
) -> Result<Vec<(u32, Vec<QueueOwner>)>> {
    poll_until_free(queues, timeout, || nic.queues())
}

/// [`wait_queues_free`] for the setup side: also ends with `Error::Interrupted` as soon as a
/// stop signal arrives ([`SharedNic::interrupted`]), instead of waiting out `timeout`.
fn wait_queues_free_unless_stopped(
    nic: &SharedNic,
    queues: &[u32],
    timeout: Duration,
) -> Result<Vec<(u32, Vec<QueueOwner>)>> {
    poll_until_free(queues, timeout, || {
        nic.interrupted()?;
        nic.with(|n| n.queues())
    })
}

/// Calls `read_queues` every [`QUEUE_POLL_INTERVAL`] until none of `queues` has an owner or
/// `timeout` passes; returns the owned ones still left. An error from `read_queues` ends it.
fn poll_until_free(
    queues: &[u32],
    timeout: Duration,
    mut read_queues: impl FnMut() -> Result<Vec<QueueInfo>>,
) -> Result<Vec<(u32, Vec<QueueOwner>)>> {
    let deadline = Instant::now() + timeout;
    loop {
        let owned: Vec<_> = owned_rx(&read_queues()?)
            .into_iter()
            .filter(|(q, _)| queues.contains(q))
            .collect();
        if owned.is_empty() || Instant::now() >= deadline {
            return Ok(owned);
        }
        std::thread::sleep(
            QUEUE_POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())),
        );
    }
}

/// Picks the RX queues to bind.
///
/// * `explicit` (`-t START -q NUM`) is used as given, after waiting up to `wait` for owned
///   queues in it to become free; if they stay owned it is `Error::Failure` listing the owners.
/// * Otherwise N = rx + combined channels (ethtool CHANNELS_GET) must be ≥ 2, and the C
///   default is tried first ([`QueuePolicy`]). When a queue of the default range is owned,
///   the choice waits up to `wait` for it (a previous run's binding may still be tearing
///   down), then falls back to the highest free range below it that leaves queue 0 in RSS;
///   if there is none it is `Error::Failure` listing the owners.
///
/// * `skip_nic_config` (`-n`): the NIC was configured by someone else (a test harness that
///   leased a queue, for instance), so an explicit start at queue 0 is allowed; without
///   `-n` queue 0 must stay in the RSS table this tool spreads.
///
/// Errors: `Error::Skip` when the driver does not report channels or reports no channel
/// counts at all (give `-t`/`-q`), or has fewer than 2 RX queues; `Error::Usage` when
/// `explicit` starts at queue 0 without `-n` or runs past the RX queues queue-get reports;
/// `Error::Failure` as above; `Error::Interrupted` when a stop signal arrives (also while
/// waiting); kernel errors as [`NicOps::queues`].
pub fn choose_queues(
    nic: &SharedNic,
    explicit: Option<(u32, u32)>,
    policy: QueuePolicy,
    wait: Duration,
    skip_nic_config: bool,
) -> Result<QueueChoice> {
    nic.interrupted()?;
    let ifname = nic.ifname().to_string();
    let (start, num, n_rx) = match explicit {
        Some((start, num)) => (start, num, None),
        None => {
            let op = Op::Nic {
                ifname: &ifname,
                what: "reporting channels (ethtool channels-get)",
                hint: Some("give -t START -q NUM"),
            };
            let channels = nic
                .with(|n| n.channels_get())
                .map_err(|e| classify(e, op))?;
            if no_channel_counts(&channels) {
                return Err(Error::Skip(Missing::NoChannelCounts {
                    ifname: ifname.clone(),
                }));
            }
            let n = channels.rx_queues();
            if n < 2 {
                return Err(Error::Skip(Missing::TooFewQueues {
                    ifname: ifname.clone(),
                    rx_queues: n,
                }));
            }
            match policy {
                QueuePolicy::Server => (n - 1, 1, Some(n)),
                QueuePolicy::Probe => (n / 2, n / 2, Some(n)),
            }
        }
    };
    if start == 0 && !skip_nic_config {
        return Err(Error::Usage(format!(
            "-t: queue 0 of {ifname} must stay in RSS; bind queues from 1 up (or configure \
             the NIC yourself and pass -n)"
        )));
    }
    let all = nic.with(|n| n.queues())?;
    let rx_count = all.iter().filter(|q| q.queue_type == QueueType::Rx).count() as u64;
    if explicit.is_some() && rx_count > 0 && u64::from(start) + u64::from(num) > rx_count {
        return Err(Error::Usage(format!(
            "-t/-q: queues {start}..={} but {ifname} has {rx_count} RX queues",
            u64::from(start) + u64::from(num) - 1
        )));
    }
    let mut notes = Vec::new();
    let busy = range_owned(&owned_rx(&all), start, num);
    if busy.is_empty() {
        return Ok(QueueChoice { start, num, notes });
    }
    notes.push(format!(
        "{ifname}: {} in use; waiting up to {} ms for it to be released",
        describe_owned(&busy),
        wait.as_millis()
    ));
    let wanted: Vec<u32> = (start..start.saturating_add(num)).collect();
    let still = wait_queues_free_unless_stopped(nic, &wanted, wait)?;
    if still.is_empty() {
        notes.push(format!(
            "{ifname}: queues {start}..={} are free now",
            start + num - 1
        ));
        return Ok(QueueChoice { start, num, notes });
    }
    let owned_now = owned_rx(&nic.with(|n| n.queues())?);
    // Highest free window of `num` queues that leaves queue 0 in RSS.
    let free = |s: &u32| range_owned(&owned_now, *s, num).is_empty();
    if let Some(s) = n_rx.and_then(|n| (1..=n - num).rev().find(free)) {
        notes.push(format!(
            "{ifname}: {} still in use; using queues {s}..={} instead",
            describe_owned(&still),
            s + num - 1
        ));
        return Ok(QueueChoice {
            start: s,
            num,
            notes,
        });
    }
    Err(Error::Failure(format!(
        "{ifname}: no free RX queues to bind: {} (a bind would fail with {}); free them or \
         pick others with -t/-q",
        describe_owned(&owned_now),
        still[0].1[0].bind_refusal()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::scripted::{Quirks, ScriptedNic};

    fn shared(n: &ScriptedNic) -> SharedNic {
        SharedNic::new(Box::new(n.clone()))
    }

    #[test]
    fn defaults_follow_c() {
        let nic = ScriptedNic::good("eth0", 8);
        let s = shared(&nic);
        let c = choose_queues(&s, None, QueuePolicy::Server, Duration::ZERO, false).unwrap();
        assert_eq!((c.start, c.num), (7, 1));
        let c = choose_queues(&s, None, QueuePolicy::Probe, Duration::ZERO, false).unwrap();
        assert_eq!((c.start, c.num), (4, 4));
        assert_eq!(c.queues(), vec![4, 5, 6, 7]);
        let c =
            choose_queues(&s, Some((2, 3)), QueuePolicy::Server, Duration::ZERO, false).unwrap();
        assert_eq!((c.start, c.num), (2, 3));
    }

    #[test]
    fn too_few_queues_is_a_skip_and_queue_zero_is_refused() {
        let nic = ScriptedNic::good("eth0", 1);
        let e = choose_queues(
            &shared(&nic),
            None,
            QueuePolicy::Server,
            Duration::ZERO,
            false,
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP, "{e}");
        let nic = ScriptedNic::good("eth0", 4);
        let e = choose_queues(
            &shared(&nic),
            Some((0, 1)),
            QueuePolicy::Server,
            Duration::ZERO,
            false,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e}");
        let e = choose_queues(
            &shared(&nic),
            Some((3, 2)),
            QueuePolicy::Server,
            Duration::ZERO,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("has 4 RX queues"), "{e}");
        let veth = ScriptedNic::veth("va");
        veth.edit(|s| s.channels = None);
        let e = choose_queues(
            &shared(&veth),
            None,
            QueuePolicy::Server,
            Duration::ZERO,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("give -t START -q NUM"), "{e}");
    }

    /// With -n the NIC was configured by someone else (e.g. a harness that leased queue 0
    /// of a netkit device): queue 0 is allowed. Without -n it must stay in RSS.
    #[test]
    fn queue_zero_is_allowed_with_skip_nic_config() {
        let nic = ScriptedNic::good("nk0", 2);
        let c = choose_queues(
            &shared(&nic),
            Some((0, 1)),
            QueuePolicy::Server,
            Duration::ZERO,
            true,
        )
        .unwrap();
        assert_eq!((c.start, c.num), (0, 1));
        let e = choose_queues(
            &shared(&nic),
            Some((0, 1)),
            QueuePolicy::Server,
            Duration::ZERO,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("pass -n"), "{e}");
    }

    #[test]
    fn owned_default_falls_back_to_a_free_queue() {
        let nic = ScriptedNic::good("eth0", 8);
        nic.edit(|s| {
            s.foreign_owners.insert(7, QueueOwner::Xsk);
            s.foreign_owners.insert(6, QueueOwner::Dmabuf(9));
        });
        let c = choose_queues(
            &shared(&nic),
            None,
            QueuePolicy::Server,
            Duration::from_millis(20),
            false,
        )
        .unwrap();
        assert_eq!((c.start, c.num), (5, 1));
        assert!(
            c.notes.iter().any(|n| n.contains("queue 7 (AF_XDP)")),
            "{:?}",
            c.notes
        );
        // Probe: upper half 4..=7 is busy; 3..=6 too (6); 2..=5 is free.
        let c = choose_queues(
            &shared(&nic),
            None,
            QueuePolicy::Probe,
            Duration::ZERO,
            false,
        )
        .unwrap();
        assert_eq!((c.start, c.num), (2, 4));
    }

    #[test]
    fn explicit_owned_queue_fails_listing_owners() {
        let nic = ScriptedNic::good("eth0", 8);
        nic.edit(|s| {
            s.foreign_owners.insert(3, QueueOwner::IoUring);
        });
        let e = choose_queues(
            &shared(&nic),
            Some((2, 2)),
            QueuePolicy::Server,
            Duration::from_millis(10),
            false,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Failure(_)));
        let m = e.to_string();
        assert!(m.contains("queue 3 (io_uring zcrx)"), "{m}");
        assert!(m.contains("EEXIST"), "{m}");
    }

    #[test]
    fn waits_for_a_lingering_binding() {
        let nic = ScriptedNic::good("eth0", 4);
        nic.set_quirks(Quirks {
            unbind_linger_queries: 3,
            ..Quirks::default()
        });
        let s = shared(&nic);
        // A previous run's binding on queue 3, released just now.
        nic.edit(|st| {
            st.hds.as_mut().unwrap().configured = crate::netlink::ethtool::TcpDataSplit::Enabled
        });
        nic.edit(|st| st.hds.as_mut().unwrap().thresh = Some(0));
        let req = crate::netlink::netdev::BindRxRequest {
            ifindex: 4,
            ifname: None,
            fd: Some(3),
            queues: vec![crate::netlink::netdev::QueueNest::rx(3)],
            rx_page_size: None,
            autorelease: None,
        };
        let b = s.with(|n| n.bind_rx(&req)).unwrap();
        drop(b);
        let c =
            choose_queues(&s, None, QueuePolicy::Server, Duration::from_secs(2), false).unwrap();
        assert_eq!((c.start, c.num), (3, 1), "waited, did not fall back");
        assert!(
            c.notes.iter().any(|n| n.contains("free now")),
            "{:?}",
            c.notes
        );
    }
}
