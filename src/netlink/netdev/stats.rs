//! Statistics of the `netdev` family: `qstats-get` (per-device or per-queue counters kept by
//! the driver, 6.9+) and `page-pool-stats-get` (allocation and recycling counters of page
//! pools, 6.8+, only in kernels built with `CONFIG_PAGE_POOL_STATS`). netdev.yaml attribute
//! sets `qstats`, `page-pool-stats` and `page-pool-info`; what 6.18 answered:
//! docs/kernel-interface.md#netdev-statistics.

use super::{Netdev, QueueType, NETDEV_CMD_PAGE_POOL_STATS_GET, NETDEV_CMD_QSTATS_GET};
use crate::error::Result;
use crate::netlink::attr::{attr_struct, put_attr, AttrWriter};
use crate::netlink::dev_label;

/// `enum netdev_qstats_scope` (a flags enum): `NETDEV_QSTATS_SCOPE_QUEUE`.
const NETDEV_QSTATS_SCOPE_QUEUE: u64 = 1;

/// What one `qstats-get` row covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QstatsScope {
    /// One row per device: its queues' counters summed (no `NETDEV_A_QSTATS_SCOPE` sent).
    Device,
    /// One row per queue, with queue type and id (`NETDEV_A_QSTATS_SCOPE` =
    /// `NETDEV_QSTATS_SCOPE_QUEUE`, 1).
    Queue,
}

attr_struct! {
    /// One row of a `qstats-get` dump (`NETDEV_A_QSTATS_*`): the counters of a device or of
    /// one queue, as the driver keeps them. A counter the driver does not keep is absent
    /// (`None`), never 0. Counters are since the device's queues were created; packets are
    /// wire packets and bytes their frame bytes (headers included) as the driver counts them.
    /// Table order is the kernel's: the RX counters, then the TX ones.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct QstatsInfo("netdev qstats-get reply") {
        /// Interface index.
        NETDEV_A_QSTATS_IFINDEX = 1 => ifindex: req u32,
        /// Queue type (per-queue rows only).
        NETDEV_A_QSTATS_QUEUE_TYPE = 2 => queue_type: opt u32 as QueueType,
        /// Queue index (per-queue rows only).
        NETDEV_A_QSTATS_QUEUE_ID = 3 => queue_id: opt u32,
        /// Packets received and passed to the stack (XDP counts as the stack).
        NETDEV_A_QSTATS_RX_PACKETS = 8 => rx_packets: opt uint,
        /// Bytes of those packets.
        NETDEV_A_QSTATS_RX_BYTES = 9 => rx_bytes: opt uint,
        /// Failed skb or buffer allocations on the RX path.
        NETDEV_A_QSTATS_RX_ALLOC_FAIL = 12 => rx_alloc_fail: opt uint,
        /// Packets that entered the device and never left it.
        NETDEV_A_QSTATS_RX_HW_DROPS = 13 => rx_hw_drops: opt uint,
        /// Of those, dropped for a transient lack of buffers or descriptors.
        NETDEV_A_QSTATS_RX_HW_DROP_OVERRUNS = 14 => rx_hw_drop_overruns: opt uint,
        /// Packets the device coalesced (HW-GRO).
        NETDEV_A_QSTATS_RX_HW_GRO_PACKETS = 19 => rx_hw_gro_packets: opt uint,
        /// Bytes of those packets.
        NETDEV_A_QSTATS_RX_HW_GRO_BYTES = 20 => rx_hw_gro_bytes: opt uint,
        /// Packets dropped for exceeding the device's RX rate limit.
        NETDEV_A_QSTATS_RX_HW_DROP_RATELIMITS = 23 => rx_hw_drop_ratelimits: opt uint,
        /// Packets sent (in device memory).
        NETDEV_A_QSTATS_TX_PACKETS = 10 => tx_packets: opt uint,
        /// Bytes of those packets.
        NETDEV_A_QSTATS_TX_BYTES = 11 => tx_bytes: opt uint,
        /// Times the driver stopped the TX queue because it was full.
        NETDEV_A_QSTATS_TX_STOP = 33 => tx_stop: opt uint,
        /// Times it woke it again.
        NETDEV_A_QSTATS_TX_WAKE = 34 => tx_wake: opt uint,
    }
    also {
        NETDEV_A_QSTATS_SCOPE = 4,
        NETDEV_A_QSTATS_RX_CSUM_COMPLETE = 15,
        NETDEV_A_QSTATS_RX_CSUM_UNNECESSARY = 16,
        NETDEV_A_QSTATS_RX_CSUM_NONE = 17,
        NETDEV_A_QSTATS_RX_CSUM_BAD = 18,
        NETDEV_A_QSTATS_RX_HW_GRO_WIRE_PACKETS = 21,
        NETDEV_A_QSTATS_RX_HW_GRO_WIRE_BYTES = 22,
        NETDEV_A_QSTATS_TX_HW_DROPS = 24,
        NETDEV_A_QSTATS_TX_HW_DROP_ERRORS = 25,
        NETDEV_A_QSTATS_TX_CSUM_NONE = 26,
        NETDEV_A_QSTATS_TX_NEEDS_CSUM = 27,
        NETDEV_A_QSTATS_TX_HW_GSO_PACKETS = 28,
        NETDEV_A_QSTATS_TX_HW_GSO_BYTES = 29,
        NETDEV_A_QSTATS_TX_HW_GSO_WIRE_PACKETS = 30,
        NETDEV_A_QSTATS_TX_HW_GSO_WIRE_BYTES = 31,
        NETDEV_A_QSTATS_TX_HW_DROP_RATELIMITS = 32,
    }
}

attr_struct! {
    /// Which page pool (`page-pool-info`, the subset id/ifindex of the `page-pool` set): the
    /// `info` nest of page-pool-stats requests and replies.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct PagePoolRef("netdev page-pool-stats info nest") {
        /// Page-pool id (as in `page-pool-get`).
        NETDEV_A_PAGE_POOL_ID = 1 => id: opt uint,
        /// Interface index of the pool's device; absent once the device is gone.
        NETDEV_A_PAGE_POOL_IFINDEX = 2 => ifindex: opt u32,
    }
}

attr_struct! {
    /// One page pool's counters as `page-pool-stats-get` reports them
    /// (`NETDEV_A_PAGE_POOL_STATS_*`), cumulative since the pool was created. Allocations
    /// are buffers (pages or niovs) handed to the driver; recycles are buffers coming back.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct PagePoolStats("netdev page-pool-stats-get reply") {
        /// Which pool.
        NETDEV_A_PAGE_POOL_STATS_INFO = 1 => info: req nest as PagePoolRef,
        /// Allocations served from the pool's lockless cache.
        NETDEV_A_PAGE_POOL_STATS_ALLOC_FAST = 8 => alloc_fast: opt uint,
        /// Order-0 allocations from the page allocator (slow path).
        NETDEV_A_PAGE_POOL_STATS_ALLOC_SLOW = 9 => alloc_slow: opt uint,
        /// Higher-order allocations from the page allocator.
        NETDEV_A_PAGE_POOL_STATS_ALLOC_SLOW_HIGH_ORDER = 10 => alloc_slow_high_order: opt uint,
        /// Times the ring was empty (falling back to the slow path).
        NETDEV_A_PAGE_POOL_STATS_ALLOC_EMPTY = 11 => alloc_empty: opt uint,
        /// Cache refills from the ring.
        NETDEV_A_PAGE_POOL_STATS_ALLOC_REFILL = 12 => alloc_refill: opt uint,
        /// Buffers the refill skipped (NUMA mismatch).
        NETDEV_A_PAGE_POOL_STATS_ALLOC_WAIVE = 13 => alloc_waive: opt uint,
        /// Buffers recycled into the cache.
        NETDEV_A_PAGE_POOL_STATS_RECYCLE_CACHED = 14 => recycle_cached: opt uint,
        /// Recycles refused because the cache was full.
        NETDEV_A_PAGE_POOL_STATS_RECYCLE_CACHE_FULL = 15 => recycle_cache_full: opt uint,
        /// Buffers recycled into the ring.
        NETDEV_A_PAGE_POOL_STATS_RECYCLE_RING = 16 => recycle_ring: opt uint,
        /// Recycles refused because the ring was full.
        NETDEV_A_PAGE_POOL_STATS_RECYCLE_RING_FULL = 17 => recycle_ring_full: opt uint,
        /// Buffers released (not recycled) because something else still held them.
        NETDEV_A_PAGE_POOL_STATS_RECYCLE_RELEASED_REFCNT = 18 => recycle_released_refcnt: opt uint,
    }
}

impl Netdev {
    /// `qstats-get` dump of device `ifindex` (`NETDEV_A_QSTATS_IFINDEX`, and with
    /// [`QstatsScope::Queue`] `NETDEV_A_QSTATS_SCOPE` 1): one row for the device or one per
    /// queue. The operation has no `do`.
    ///
    /// Errors: `Error::Netlink` `EOPNOTSUPP` (in the dump's `NLMSG_DONE`, no message, at
    /// `NETDEV_A_QSTATS_IFINDEX`) for a device whose driver keeps no queue stats (6.18: veth,
    /// lo); `ENODEV` at the same attribute for an unknown ifindex.
    #[doc(alias = "NETDEV_CMD_QSTATS_GET")]
    pub fn qstats_get_dump(&mut self, ifindex: u32, scope: QstatsScope) -> Result<Vec<QstatsInfo>> {
        let (target, per_queue) = match scope {
            QstatsScope::Device => (dev_label(ifindex, None), false),
            QstatsScope::Queue => (format!("{}, per queue", dev_label(ifindex, None)), true),
        };
        let attrs = |w: &mut AttrWriter| {
            put_attr!(w, put_u32, NETDEV_A_QSTATS_IFINDEX, ifindex);
            if per_queue {
                put_attr!(
                    w,
                    put_uint,
                    NETDEV_A_QSTATS_SCOPE,
                    NETDEV_QSTATS_SCOPE_QUEUE
                );
            }
        };
        let op = (NETDEV_CMD_QSTATS_GET, "qstats-get");
        self.dump(op, target, attrs, QstatsInfo::from_attrs)
    }

    /// `page-pool-stats-get` do: the counters of page pool `id`
    /// (`NETDEV_A_PAGE_POOL_STATS_INFO` { `NETDEV_A_PAGE_POOL_ID` }).
    ///
    /// Errors: `Error::Netlink` `EOPNOTSUPP` from a kernel without `CONFIG_PAGE_POOL_STATS`
    /// (the operation is not registered; 6.18 here); `ENOENT` for an unknown pool.
    #[doc(alias = "NETDEV_CMD_PAGE_POOL_STATS_GET")]
    pub fn page_pool_stats_get(&mut self, id: u64) -> Result<PagePoolStats> {
        let attrs = |w: &mut AttrWriter| {
            let nest = put_attr!(w, begin_nest, NETDEV_A_PAGE_POOL_STATS_INFO);
            put_attr!(w, put_uint, NETDEV_A_PAGE_POOL_ID, id);
            w.end_nest(nest);
        };
        let op = (NETDEV_CMD_PAGE_POOL_STATS_GET, "page-pool-stats-get");
        self.get(
            op,
            format!("page pool {id}"),
            attrs,
            PagePoolStats::from_attrs,
        )
    }

    /// `page-pool-stats-get` dump: the counters of every page pool in the socket's network
    /// namespace.
    ///
    /// Errors: as [`page_pool_stats_get`](Self::page_pool_stats_get).
    #[doc(alias = "NETDEV_CMD_PAGE_POOL_STATS_GET")]
    pub fn page_pool_stats_get_dump(&mut self) -> Result<Vec<PagePoolStats>> {
        let op = (NETDEV_CMD_PAGE_POOL_STATS_GET, "page-pool-stats-get");
        let target = "all page pools".into();
        self.dump(op, target, |_| {}, PagePoolStats::from_attrs)
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::netlink::ctrl::Family;
    use crate::netlink::socket::{Exchange, GenlRequest};

    fn qstats_request(ifindex: u32, per_queue: bool) -> GenlRequest {
        let fam = Family::fixture("netdev", 20);
        let mut req = fam.request(NETDEV_CMD_QSTATS_GET, "qstats-get").dump();
        put_attr!(req.attrs(), put_u32, NETDEV_A_QSTATS_IFINDEX, ifindex);
        if per_queue {
            put_attr!(req.attrs(), put_uint, NETDEV_A_QSTATS_SCOPE, 1);
        }
        req
    }

    /// Feeds `datagram` to an exchange for `req` (seq 7, port `pid`) and decodes the rows.
    fn rows(req: &GenlRequest, pid: u32, datagram: &[u8]) -> Result<Vec<QstatsInfo>> {
        let mut ex = Exchange::new(req, 7, pid);
        assert!(ex.feed(datagram)?);
        let replies = ex.into_replies();
        let rows: Vec<_> = replies
            .iter()
            .map(|r| QstatsInfo::from_attrs(&r.attrs).unwrap())
            .collect();
        for (r, row) in replies.iter().zip(&rows) {
            assert_eq!(r.cmd, NETDEV_CMD_QSTATS_GET);
            let mut w = AttrWriter::new();
            row.emit(&mut w);
            assert_eq!(
                w.bytes(),
                &r.attrs[..],
                "emit gives the kernel's bytes back"
            );
        }
        Ok(rows)
    }

    /// 6.18's answer to a per-queue qstats-get dump of eth0 (virtio_net, ifindex 4, one
    /// queue pair) in the root namespace of this project's machine (raw-socket probe; seq 7,
    /// port id 578): rx0 with rx-packets and rx-bytes, tx0 with tx-packets, tx-bytes, tx-stop
    /// and tx-wake, then NLMSG_DONE.
    #[rustfmt::skip]
    const QSTATS_QUEUES_VIRTIO: &[u8] = &[
        0x3c, 0x00, 0x00, 0x00, // nlmsg_len 60
        0x14, 0x00,             // type 20 (netdev)
        0x00, 0x00,             // flags 0
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x42, 0x02, 0x00, 0x00, // pid 578
        0x0c, 0x01, 0x00, 0x00, // cmd 12 NETDEV_CMD_QSTATS_GET, version 1
        0x08, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_IFINDEX 4
        0x08, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_QUEUE_TYPE 0 (rx)
        0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_QUEUE_ID 0
        0x08, 0x00, 0x08, 0x00, 0xf2, 0x39, 0x00, 0x00, // NETDEV_A_QSTATS_RX_PACKETS 14834
        0x08, 0x00, 0x09, 0x00, 0x99, 0x25, 0x22, 0x28, // NETDEV_A_QSTATS_RX_BYTES 673326489
        0x4c, 0x00, 0x00, 0x00, // nlmsg_len 76
        0x14, 0x00,             // type 20
        0x00, 0x00,             // flags 0
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x42, 0x02, 0x00, 0x00, // pid 578
        0x0c, 0x01, 0x00, 0x00, // cmd 12, version 1
        0x08, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_IFINDEX 4
        0x08, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_QUEUE_TYPE 1 (tx)
        0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_QUEUE_ID 0
        0x08, 0x00, 0x0a, 0x00, 0x21, 0x1d, 0x00, 0x00, // NETDEV_A_QSTATS_TX_PACKETS 7457
        0x08, 0x00, 0x0b, 0x00, 0x61, 0x96, 0x08, 0x00, // NETDEV_A_QSTATS_TX_BYTES 562785
        0x08, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_TX_STOP 0
        0x08, 0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_TX_WAKE 0
        0x14, 0x00, 0x00, 0x00, // nlmsg_len 20
        0x03, 0x00,             // NLMSG_DONE
        0x02, 0x00,             // NLM_F_MULTI
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x42, 0x02, 0x00, 0x00, // pid 578
        0x00, 0x00, 0x00, 0x00, // status 0
    ];

    /// The same probe's device-scope dump of eth0 (same instant): one row, the queues summed,
    /// without queue type or id.
    #[rustfmt::skip]
    const QSTATS_DEVICE_VIRTIO: &[u8] = &[
        0x4c, 0x00, 0x00, 0x00, // nlmsg_len 76
        0x14, 0x00,             // type 20
        0x00, 0x00,             // flags 0
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x42, 0x02, 0x00, 0x00, // pid 578
        0x0c, 0x01, 0x00, 0x00, // cmd 12, version 1
        0x08, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_IFINDEX 4
        0x08, 0x00, 0x08, 0x00, 0xf2, 0x39, 0x00, 0x00, // NETDEV_A_QSTATS_RX_PACKETS 14834
        0x08, 0x00, 0x09, 0x00, 0x99, 0x25, 0x22, 0x28, // NETDEV_A_QSTATS_RX_BYTES 673326489
        0x08, 0x00, 0x0a, 0x00, 0x21, 0x1d, 0x00, 0x00, // NETDEV_A_QSTATS_TX_PACKETS 7457
        0x08, 0x00, 0x0b, 0x00, 0x61, 0x96, 0x08, 0x00, // NETDEV_A_QSTATS_TX_BYTES 562785
        0x08, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_TX_STOP 0
        0x08, 0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_TX_WAKE 0
        0x14, 0x00, 0x00, 0x00, // nlmsg_len 20
        0x03, 0x00,             // NLMSG_DONE
        0x02, 0x00,             // NLM_F_MULTI
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x42, 0x02, 0x00, 0x00, // pid 578
        0x00, 0x00, 0x00, 0x00, // status 0
    ];

    /// 6.18's answer to a per-queue qstats-get dump of a veth (ifindex 2, in a netns; port id
    /// 22854; `NETLINK_EXT_ACK` and `NETLINK_CAP_ACK` set, as `NlSocket` does): no rows, only
    /// an NLMSG_DONE whose status is -EOPNOTSUPP, with no message and the offset of the
    /// ifindex attribute. The device-scope dump gets the same answer.
    #[rustfmt::skip]
    const QSTATS_VETH_REFUSED: &[u8] = &[
        0x1c, 0x00, 0x00, 0x00, // nlmsg_len 28
        0x03, 0x00,             // NLMSG_DONE
        0x02, 0x02,             // NLM_F_MULTI | NLM_F_ACK_TLVS
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x46, 0x59, 0x00, 0x00, // pid 22854
        0xa1, 0xff, 0xff, 0xff, // status -95 (EOPNOTSUPP)
        0x08, 0x00, 0x02, 0x00, // NLMSGERR_ATTR_OFFS
        0x14, 0x00, 0x00, 0x00, //   20: NETDEV_A_QSTATS_IFINDEX
    ];

    #[test]
    fn qstats_requests_are_exact() {
        // Per queue: genlmsghdr, NETDEV_A_QSTATS_IFINDEX 4, NETDEV_A_QSTATS_SCOPE 1 (uint in
        // 4 bytes), with NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP.
        let req = qstats_request(4, true);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x0c, 0x01, 0x00, 0x00,                         // cmd 12, version 1
            0x08, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_IFINDEX 4
            0x08, 0x00, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, // NETDEV_A_QSTATS_SCOPE queue
        ];
        assert_eq!(&req.encode(7, 0).unwrap()[16..], want);
        assert_eq!(req.flags(), 0x0305);
        // Per device: the ifindex only.
        let req = qstats_request(4, false);
        assert_eq!(&req.encode(7, 0).unwrap()[16..], &want[..12]);
    }

    #[test]
    fn qstats_replies_of_6_18_parse_and_emit() {
        let rows_q = rows(&qstats_request(4, true), 578, QSTATS_QUEUES_VIRTIO).unwrap();
        let rx0 = QstatsInfo {
            ifindex: 4,
            queue_type: Some(QueueType::Rx),
            queue_id: Some(0),
            rx_packets: Some(14834),
            rx_bytes: Some(673_326_489),
            ..QstatsInfo::default()
        };
        let tx0 = QstatsInfo {
            ifindex: 4,
            queue_type: Some(QueueType::Tx),
            queue_id: Some(0),
            tx_packets: Some(7457),
            tx_bytes: Some(562_785),
            tx_stop: Some(0),
            tx_wake: Some(0),
            ..QstatsInfo::default()
        };
        assert_eq!(rows_q, [rx0, tx0]);

        let rows_d = rows(&qstats_request(4, false), 578, QSTATS_DEVICE_VIRTIO).unwrap();
        assert_eq!(
            rows_d,
            [QstatsInfo {
                ifindex: 4,
                rx_packets: Some(14834),
                rx_bytes: Some(673_326_489),
                tx_packets: Some(7457),
                tx_bytes: Some(562_785),
                tx_stop: Some(0),
                tx_wake: Some(0),
                ..QstatsInfo::default()
            }]
        );

        match rows(&qstats_request(2, true), 22854, QSTATS_VETH_REFUSED) {
            Err(Error::Netlink(e)) => {
                assert_eq!((e.errno, e.ext_msg.as_deref()), (libc::EOPNOTSUPP, None));
                assert_eq!(e.bad_attr.as_deref(), Some("NETDEV_A_QSTATS_IFINDEX"));
                assert_eq!(e.op, "qstats-get");
            }
            other => panic!("expected EOPNOTSUPP, got {other:?}"),
        }
    }

    #[test]
    fn a_64_bit_counter_and_unknown_attributes() {
        let row = QstatsInfo {
            ifindex: 7,
            queue_type: Some(QueueType::Rx),
            queue_id: Some(3),
            rx_bytes: Some(5 << 32), // past u32: 8 bytes on the wire
            rx_hw_drops: Some(2),
            ..QstatsInfo::default()
        };
        let mut w = AttrWriter::new();
        row.emit(&mut w);
        w.put_uint(
            NETDEV_A_QSTATS_RX_CSUM_BAD,
            "NETDEV_A_QSTATS_RX_CSUM_BAD",
            1,
        );
        w.put_uint(40, "a later counter", 9);
        assert_eq!(QstatsInfo::from_attrs(w.bytes()).unwrap(), row);
        let e = QstatsInfo::from_attrs(&w.bytes()[8..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode netdev qstats-get reply: NETDEV_A_QSTATS_IFINDEX is missing"
        );
    }

    /// A page-pool-stats-get `do` request for pool 9: the info nest with the id (uint, 4
    /// bytes), NLA_F_NESTED set.
    #[test]
    fn page_pool_stats_request_is_exact() {
        let fam = Family::fixture("netdev", 20);
        let mut req = fam.request(NETDEV_CMD_PAGE_POOL_STATS_GET, "page-pool-stats-get");
        let w = req.attrs();
        let nest = put_attr!(w, begin_nest, NETDEV_A_PAGE_POOL_STATS_INFO);
        put_attr!(w, put_uint, NETDEV_A_PAGE_POOL_ID, 9);
        w.end_nest(nest);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x09, 0x01, 0x00, 0x00, // cmd 9 NETDEV_CMD_PAGE_POOL_STATS_GET, version 1
            0x0c, 0x00, 0x01, 0x80, // NETDEV_A_PAGE_POOL_STATS_INFO, nested, 12 bytes
            0x08, 0x00, 0x01, 0x00, //   NETDEV_A_PAGE_POOL_ID
            0x09, 0x00, 0x00, 0x00, //   9
        ];
        assert_eq!(&req.encode(1, 0).unwrap()[16..], want);
        assert_eq!(req.flags(), 0x0005);
    }

    /// Synthetic (6.18 here has no CONFIG_PAGE_POOL_STATS and refuses the operation), laid
    /// out as netdev.yaml's page-pool-stats reply: the info nest, then the eleven counters in
    /// attribute order.
    #[rustfmt::skip]
    const PP_STATS_REPLY: &[u8] = &[
        0x14, 0x00, 0x01, 0x80, // NETDEV_A_PAGE_POOL_STATS_INFO, nested, 20 bytes
        0x08, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00, //   NETDEV_A_PAGE_POOL_ID 9
        0x08, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, //   NETDEV_A_PAGE_POOL_IFINDEX 4
        0x08, 0x00, 0x08, 0x00, 0xe8, 0x03, 0x00, 0x00, // ALLOC_FAST 1000
        0x08, 0x00, 0x09, 0x00, 0x40, 0x00, 0x00, 0x00, // ALLOC_SLOW 64
        0x08, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, // ALLOC_SLOW_HIGH_ORDER 0
        0x08, 0x00, 0x0b, 0x00, 0x02, 0x00, 0x00, 0x00, // ALLOC_EMPTY 2
        0x08, 0x00, 0x0c, 0x00, 0x0f, 0x00, 0x00, 0x00, // ALLOC_REFILL 15
        0x08, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, // ALLOC_WAIVE 0
        0x08, 0x00, 0x0e, 0x00, 0x84, 0x03, 0x00, 0x00, // RECYCLE_CACHED 900
        0x08, 0x00, 0x0f, 0x00, 0x01, 0x00, 0x00, 0x00, // RECYCLE_CACHE_FULL 1
        0x0c, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // RECYCLE_RING 1 << 32
        0x01, 0x00, 0x00, 0x00,                         //   (uint in 8 bytes)
        0x08, 0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, // RECYCLE_RING_FULL 0
        0x08, 0x00, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, // RECYCLE_RELEASED_REFCNT 3
    ];

    #[test]
    fn page_pool_stats_reply_parses_and_emits() {
        let got = PagePoolStats::from_attrs(PP_STATS_REPLY).unwrap();
        let want = PagePoolStats {
            info: PagePoolRef {
                id: Some(9),
                ifindex: Some(4),
            },
            alloc_fast: Some(1000),
            alloc_slow: Some(64),
            alloc_slow_high_order: Some(0),
            alloc_empty: Some(2),
            alloc_refill: Some(15),
            alloc_waive: Some(0),
            recycle_cached: Some(900),
            recycle_cache_full: Some(1),
            recycle_ring: Some(1 << 32),
            recycle_ring_full: Some(0),
            recycle_released_refcnt: Some(3),
        };
        assert_eq!(got, want);
        let mut w = AttrWriter::new();
        want.emit(&mut w);
        assert_eq!(w.bytes(), PP_STATS_REPLY);
        // Without the info nest the reply names what is missing.
        let e = PagePoolStats::from_attrs(&PP_STATS_REPLY[20..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode netdev page-pool-stats-get reply: NETDEV_A_PAGE_POOL_STATS_INFO is \
             missing"
        );
    }

    proptest::proptest! {
        #[test]
        fn stats_parsers_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = QstatsInfo::from_attrs(&bytes);
            let _ = PagePoolStats::from_attrs(&bytes);
        }
    }
}
