//! Figures from the device's side of a run: the bound queues' RX bytes over the measured
//! interval from two netdev `qstats-get` dumps (device RX Gbit/s), and the RX queue a flow
//! arrived on, from its `SO_INCOMING_NAPI_ID` and the `queue-get` dump. A driver that keeps no
//! queue stats gives *no* device figure ([`NoQstats`]), never the socket's.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::netlink::netdev::{QstatsInfo, QueueInfo, QueueType};

/// One `qstats-get` per-queue dump of the bound device
/// ([`crate::netlink::netdev::Netdev::qstats_get_dump`] with `QstatsScope::Queue`), or why
/// the driver has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Qstats {
    /// The rows the kernel returned.
    Rows(Vec<QstatsInfo>),
    /// The driver keeps no queue stats: the kernel's refusal, as text.
    Unsupported(String),
}

impl Qstats {
    /// Sorts a dump's answer: the kernel's `EOPNOTSUPP` (a driver without queue stats: veth,
    /// lo) is [`Qstats::Unsupported`]; rows are [`Qstats::Rows`].
    ///
    /// Errors: any other error of the dump, unchanged.
    pub fn from_dump(answer: Result<Vec<QstatsInfo>>) -> Result<Qstats> {
        match answer {
            Ok(rows) => Ok(Qstats::Rows(rows)),
            Err(Error::Netlink(e)) if e.errno == libc::EOPNOTSUPP => {
                Ok(Qstats::Unsupported(e.to_string()))
            }
            Err(e) => Err(e),
        }
    }
}

/// Why a run has no device RX figure. Displays as `no qstats: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoQstats(pub String);

impl fmt::Display for NoQstats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no qstats: {}", self.0)
    }
}

/// One bound RX queue's growth over the measured interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRx {
    /// The queue id.
    pub queue: u32,
    /// Its `rx-bytes` growth (headers included).
    pub bytes: u64,
    /// Its `rx-packets` growth, when it reports it.
    pub packets: Option<u64>,
}

/// What the bound RX queues received over the measured interval, by the driver's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRx {
    /// Growth of the queues' `rx-bytes`, summed: frame bytes as the driver counts them, so
    /// the Ethernet, IP and TCP headers of every packet are included (a flow's payload is
    /// smaller by about 66 bytes per MSS-sized packet for IPv4 with timestamps).
    pub bytes: u64,
    /// Growth of the queues' `rx-packets`, when every queue reports it.
    pub packets: Option<u64>,
    /// The measured interval.
    pub interval: Duration,
    /// Each bound queue's growth, in the order the queues were bound.
    pub per_queue: Vec<QueueRx>,
}

impl DeviceRx {
    /// `bytes` as Gbit/s (10⁹ bit/s) over the interval; `None` for an empty interval.
    pub(crate) fn gbps(&self) -> Option<f64> {
        let secs = self.interval.as_secs_f64();
        (secs > 0.0).then(|| self.bytes as f64 * 8.0 / secs / 1e9)
    }
}

/// The RX queues `queues` of `ifindex` between two [`Qstats`] dumps taken `interval` apart.
///
/// Errors: [`NoQstats`] with the reason when there is no honest figure: the driver has no
/// queue stats, no queues are bound, a bound queue has no row or no `rx-bytes` in either dump,
/// or its `rx-bytes` went backwards (the queue was reset in between).
pub fn device_rx(
    before: &Qstats,
    after: &Qstats,
    ifindex: u32,
    queues: &[u32],
    interval: Duration,
) -> std::result::Result<DeviceRx, NoQstats> {
    let rows = |q: &Qstats| match q {
        Qstats::Rows(r) => Ok(r.clone()),
        Qstats::Unsupported(why) => Err(NoQstats(format!("the driver keeps none ({why})"))),
    };
    let (before, after) = (rows(before)?, rows(after)?);
    if queues.is_empty() {
        return Err(NoQstats("no RX queue is bound".into()));
    }
    let row = |rows: &[QstatsInfo], q: u32| {
        rows.iter()
            .find(|r| {
                r.ifindex == ifindex && r.queue_type == Some(QueueType::Rx) && r.queue_id == Some(q)
            })
            .cloned()
            .ok_or_else(|| NoQstats(format!("rx queue {q} of ifindex {ifindex} has no row")))
    };
    let (mut bytes, mut packets) = (0u64, Some(0u64));
    let mut per_queue = Vec::with_capacity(queues.len());
    for &q in queues {
        let (b, a) = (row(&before, q)?, row(&after, q)?);
        let (Some(b_bytes), Some(a_bytes)) = (b.rx_bytes, a.rx_bytes) else {
            return Err(NoQstats(format!("rx queue {q} reports no rx-bytes")));
        };
        let grew = a_bytes.checked_sub(b_bytes).ok_or_else(|| {
            NoQstats(format!(
                "rx-bytes of rx queue {q} went back from {b_bytes} to {a_bytes} (queue reset?)"
            ))
        })?;
        bytes = bytes.saturating_add(grew);
        let own = match (b.rx_packets, a.rx_packets) {
            (Some(b), Some(a)) => a.checked_sub(b),
            _ => None,
        };
        packets = packets.zip(own).map(|(sum, d)| sum.saturating_add(d));
        per_queue.push(QueueRx {
            queue: q,
            bytes: grew,
            packets: own,
        });
    }
    Ok(DeviceRx {
        bytes,
        packets,
        interval,
        per_queue,
    })
}

/// The RX queue a flow arrived on, from its socket's `SO_INCOMING_NAPI_ID`
/// ([`crate::sys::socket::incoming_napi_id`]) and the device's queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrivalQueue {
    /// The RX queue served by that NAPI instance.
    Queue(u32),
    /// The NAPI instance serves several RX queues (ascending): which one is not known.
    Shared(Vec<u32>),
    /// The socket's NAPI id is 0: nothing reached it through a NAPI instance with an id
    /// (loopback; veth without GRO or XDP; nothing received yet).
    NoNapi,
    /// No RX queue of the device has this NAPI id (another device's NAPI, or one that
    /// `queue-get` does not list, as veth's GRO NAPIs on 6.18).
    Unknown(u32),
}

impl fmt::Display for ArrivalQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrivalQueue::Queue(q) => write!(f, "rx queue {q}"),
            ArrivalQueue::Shared(qs) => {
                let qs: Vec<String> = qs.iter().map(u32::to_string).collect();
                write!(f, "rx queues {} (one NAPI)", qs.join(","))
            }
            ArrivalQueue::NoNapi => write!(f, "no NAPI id"),
            ArrivalQueue::Unknown(id) => write!(f, "NAPI {id} (no queue of the device)"),
        }
    }
}

/// Which RX queue of `queues` (a `queue-get` dump of the device) NAPI `napi_id` serves.
pub fn arrival_queue(queues: &[QueueInfo], napi_id: u32) -> ArrivalQueue {
    if napi_id == 0 {
        return ArrivalQueue::NoNapi;
    }
    let mut ids: Vec<u32> = queues
        .iter()
        .filter(|q| q.queue_type == QueueType::Rx && q.napi_id == Some(napi_id))
        .map(|q| q.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    match ids[..] {
        [] => ArrivalQueue::Unknown(napi_id),
        [q] => ArrivalQueue::Queue(q),
        _ => ArrivalQueue::Shared(ids),
    }
}

/// Which of the `bound` RX queues the run's traffic did not reach, and how that is known:
/// from the queues' own RX bytes over the measured interval (`per_queue`, qstats: a queue
/// without a byte was not reached), else from the queues the flows arrived on (`arrivals`,
/// each flow's [`ArrivalQueue`]; a NAPI instance of several queues reaches them all).
/// `None` when neither tells (no queue stats and no flow's arrival known), or no queue is
/// bound.
pub fn unreached_queues(
    bound: &[u32],
    per_queue: Option<&[QueueRx]>,
    arrivals: &[ArrivalQueue],
) -> Option<(Vec<u32>, &'static str)> {
    if bound.is_empty() {
        return None;
    }
    if let Some(rows) = per_queue {
        let reached = |q: &u32| rows.iter().any(|r| r.queue == *q && r.bytes > 0);
        return Some((
            bound.iter().copied().filter(|q| !reached(q)).collect(),
            "qstats",
        ));
    }
    let mut reached: Vec<u32> = Vec::new();
    for a in arrivals {
        match a {
            ArrivalQueue::Queue(q) => reached.push(*q),
            ArrivalQueue::Shared(qs) => reached.extend(qs),
            ArrivalQueue::NoNapi | ArrivalQueue::Unknown(_) => {}
        }
    }
    if reached.is_empty() {
        return None;
    }
    Some((
        bound
            .iter()
            .copied()
            .filter(|q| !reached.contains(q))
            .collect(),
        "arrival",
    ))
}

/// The sentence of a run whose traffic did not reach every bound queue: `the flows reached 1
/// of 2 bound queues (2,3): no bytes on queue 2 (qstats)`.
pub(crate) fn unreached_words(bound: &[u32], unreached: &[u32], source: &str) -> String {
    let list = |qs: &[u32]| qs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let how = match source {
        "qstats" => "no bytes on",
        _ => "no flow arrived on",
    };
    format!(
        "the flows reached {} of {} bound queues ({}): {how} queue{} {} ({source})",
        bound.len() - unreached.len(),
        bound.len(),
        list(bound),
        if unreached.len() == 1 { "" } else { "s" },
        list(unreached)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(q: u32, bytes: Option<u64>, packets: Option<u64>) -> QstatsInfo {
        QstatsInfo {
            ifindex: 4,
            queue_type: Some(QueueType::Rx),
            queue_id: Some(q),
            rx_bytes: bytes,
            rx_packets: packets,
            ..QstatsInfo::default()
        }
    }

    fn tx(q: u32) -> QstatsInfo {
        QstatsInfo {
            ifindex: 4,
            queue_type: Some(QueueType::Tx),
            queue_id: Some(q),
            tx_bytes: Some(1 << 40),
            ..QstatsInfo::default()
        }
    }

    const SEC2: Duration = Duration::from_secs(2);

    #[test]
    fn device_rx_sums_the_bound_queues_only() {
        let before = Qstats::Rows(vec![
            rx(0, Some(100), Some(1)),
            rx(2, Some(1_000), Some(10)),
            rx(3, Some(5_000), Some(50)),
            tx(2),
        ]);
        let after = Qstats::Rows(vec![
            rx(0, Some(9_999_999), Some(99)),
            rx(2, Some(1_000 + 1_000_000_000), Some(10 + 700_000)),
            rx(3, Some(5_000 + 1_500_000_000), Some(50 + 1_000_000)),
            tx(2),
        ]);
        let d = device_rx(&before, &after, 4, &[2, 3], SEC2).unwrap();
        assert_eq!((d.bytes, d.packets), (2_500_000_000, Some(1_700_000)));
        assert_eq!(d.gbps(), Some(10.0));
        assert_eq!(
            d.per_queue,
            vec![
                QueueRx {
                    queue: 2,
                    bytes: 1_000_000_000,
                    packets: Some(700_000)
                },
                QueueRx {
                    queue: 3,
                    bytes: 1_500_000_000,
                    packets: Some(1_000_000)
                }
            ]
        );
        let zero = DeviceRx {
            interval: Duration::ZERO,
            ..d
        };
        assert_eq!(zero.gbps(), None);
        // A queue without rx-packets leaves the packet count out, not the bytes.
        let after2 = Qstats::Rows(vec![rx(2, Some(2_000), None)]);
        let d = device_rx(&before, &after2, 4, &[2], SEC2).unwrap();
        assert_eq!((d.bytes, d.packets), (1_000, None));
    }

    #[test]
    fn no_figure_without_honest_counters() {
        let rows = Qstats::Rows(vec![rx(2, Some(1_000), Some(1)), rx(3, None, Some(1))]);
        let veth = Qstats::Unsupported(
            "netdev qstats-get on veth0 (ifindex 3), per queue: EOPNOTSUPP (Operation not \
             supported)"
                .into(),
        );
        let why = |b: &Qstats, a: &Qstats, q: &[u32]| {
            device_rx(b, a, 4, q, SEC2).unwrap_err().to_string()
        };
        assert_eq!(
            why(&veth, &veth, &[0]),
            "no qstats: the driver keeps none (netdev qstats-get on veth0 (ifindex 3), per \
             queue: EOPNOTSUPP (Operation not supported))"
        );
        assert_eq!(why(&rows, &rows, &[]), "no qstats: no RX queue is bound");
        assert_eq!(
            why(&rows, &rows, &[5]),
            "no qstats: rx queue 5 of ifindex 4 has no row"
        );
        assert_eq!(
            why(&rows, &rows, &[3]),
            "no qstats: rx queue 3 reports no rx-bytes"
        );
        let reset = Qstats::Rows(vec![rx(2, Some(10), Some(1))]);
        assert_eq!(
            why(&rows, &reset, &[2]),
            "no qstats: rx-bytes of rx queue 2 went back from 1000 to 10 (queue reset?)"
        );
        // Another device's rows do not count.
        let other = Qstats::Rows(vec![QstatsInfo {
            ifindex: 9,
            ..rx(2, Some(5_000), None)
        }]);
        assert_eq!(
            why(&rows, &other, &[2]),
            "no qstats: rx queue 2 of ifindex 4 has no row"
        );
    }

    #[test]
    fn dump_answers_sort_into_rows_or_unsupported() {
        use crate::error::NlError;
        let refused = |errno| {
            Err(Error::Netlink(Box::new(NlError::refusal(
                "netdev",
                "qstats-get",
                "veth0 (ifindex 3), per queue",
                errno,
            ))))
        };
        assert_eq!(
            Qstats::from_dump(refused(libc::EOPNOTSUPP)).unwrap(),
            Qstats::Unsupported(
                "netdev qstats-get on veth0 (ifindex 3), per queue: EOPNOTSUPP (Operation not \
                 supported)"
                    .into()
            )
        );
        let e = Qstats::from_dump(refused(libc::ENODEV)).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENODEV));
        assert_eq!(Qstats::from_dump(Ok(vec![])).unwrap(), Qstats::Rows(vec![]));
        // Only the kernel's netlink answer means "no qstats", not a socket call's errno.
        let sys = Qstats::from_dump(Err(Error::sys("recvmsg(netlink)", libc::EOPNOTSUPP)));
        assert!(matches!(sys, Err(Error::Sys { .. })), "{sys:?}");
    }

    fn queue(id: u32, t: QueueType, napi: Option<u32>) -> QueueInfo {
        QueueInfo {
            id,
            queue_type: t,
            ifindex: 4,
            napi_id: napi,
            dmabuf: None,
            io_uring: false,
            xsk: false,
        }
    }

    #[test]
    fn napi_ids_map_to_rx_queues() {
        // Combined channels: rx N and tx N share NAPI 8193 + N; rx 6 and 7 share one NAPI.
        let qs = [
            queue(0, QueueType::Rx, Some(8193)),
            queue(1, QueueType::Rx, Some(8194)),
            queue(0, QueueType::Tx, Some(8193)),
            queue(1, QueueType::Tx, Some(8194)),
            queue(7, QueueType::Rx, Some(8200)),
            queue(6, QueueType::Rx, Some(8200)),
            queue(5, QueueType::Rx, None),
        ];
        assert_eq!(arrival_queue(&qs, 8194), ArrivalQueue::Queue(1));
        assert_eq!(arrival_queue(&qs, 8200), ArrivalQueue::Shared(vec![6, 7]));
        assert_eq!(arrival_queue(&qs, 0), ArrivalQueue::NoNapi);
        assert_eq!(arrival_queue(&qs, 258), ArrivalQueue::Unknown(258));
        let shown: Vec<String> = [
            ArrivalQueue::Queue(1),
            ArrivalQueue::Shared(vec![6, 7]),
            ArrivalQueue::NoNapi,
            ArrivalQueue::Unknown(258),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            shown,
            [
                "rx queue 1",
                "rx queues 6,7 (one NAPI)",
                "no NAPI id",
                "NAPI 258 (no queue of the device)"
            ]
        );
    }

    /// The finding: both flows on queue 3 of the context's 2..3; qstats first, the flows'
    /// arrival queues without them, nothing to say without either.
    #[test]
    fn unreached_queues_are_named() {
        let q = |queue, bytes| QueueRx {
            queue,
            bytes,
            packets: None,
        };
        let rows = [q(2, 0), q(3, 9_000)];
        let (un, src) = unreached_queues(&[2, 3], Some(&rows), &[]).unwrap();
        assert_eq!((un.clone(), src), (vec![2], "qstats"));
        assert_eq!(
            unreached_words(&[2, 3], &un, src),
            "the flows reached 1 of 2 bound queues (2,3): no bytes on queue 2 (qstats)"
        );
        let both = [q(2, 1), q(3, 1)];
        assert_eq!(
            unreached_queues(&[2, 3], Some(&both), &[]),
            Some((vec![], "qstats"))
        );
        let arrivals = [ArrivalQueue::Queue(3), ArrivalQueue::Queue(3)];
        assert_eq!(
            unreached_queues(&[2, 3], None, &arrivals),
            Some((vec![2], "arrival"))
        );
        let shared = [ArrivalQueue::Shared(vec![2, 3])];
        assert_eq!(
            unreached_queues(&[2, 3], None, &shared),
            Some((vec![], "arrival"))
        );
        assert_eq!(
            unreached_queues(&[2, 3], None, &[ArrivalQueue::NoNapi]),
            None
        );
        assert_eq!(unreached_queues(&[], Some(&rows), &[]), None);
        assert_eq!(
            unreached_words(&[4, 5, 6, 7], &[5, 6, 7], "arrival"),
            "the flows reached 1 of 4 bound queues (4,5,6,7): no flow arrived on queues 5,6,7 \
             (arrival)"
        );
    }
}
