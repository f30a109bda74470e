//! The `netdev` generic-netlink family (Documentation/netlink/specs/netdev.yaml,
//! include/uapi/linux/netdev.h): device, queue, NAPI and page-pool queries, and the devmem
//! `bind-rx` / `bind-tx` operations (<https://docs.kernel.org/networking/devmem.html>).
//!
//! A devmem binding lives as long as the netlink socket that created it: the kernel keeps the
//! binding on that socket's private list and unbinds when the socket closes. There is no
//! unbind command. So [`DmabufBinding`] owns its own [`NlSocket`], and dropping the binding
//! unbinds.

use super::attr::{kernel_names, parse_all, Attr, AttrWriter, Nla, NLA_TYPE_MASK};
use super::ctrl::{resolve_family, Family};
use super::dev_label;
use super::socket::{GenlReply, GenlRequest, NlSocket};
use crate::error::{Error, Result};

mod bind;
pub use bind::{
    encode_bind_rx, BindRxRequest, BindingDirection, DmabufAttr, DmabufBinding, QueueNest,
};

kernel_names! {
    /// `enum netdev_cmd` (6.18 BTF: DEV_GET = 1 … BIND_TX = 15).
    fn netdev_cmd_name -> u8 {
        NETDEV_CMD_DEV_GET = 1,
        NETDEV_CMD_DEV_ADD_NTF = 2,
        NETDEV_CMD_DEV_DEL_NTF = 3,
        NETDEV_CMD_DEV_CHANGE_NTF = 4,
        NETDEV_CMD_PAGE_POOL_GET = 5,
        NETDEV_CMD_PAGE_POOL_ADD_NTF = 6,
        NETDEV_CMD_PAGE_POOL_DEL_NTF = 7,
        NETDEV_CMD_PAGE_POOL_CHANGE_NTF = 8,
        NETDEV_CMD_PAGE_POOL_STATS_GET = 9,
        NETDEV_CMD_QUEUE_GET = 10,
        NETDEV_CMD_NAPI_GET = 11,
        NETDEV_CMD_QSTATS_GET = 12,
        NETDEV_CMD_BIND_RX = 13,
        NETDEV_CMD_NAPI_SET = 14,
        NETDEV_CMD_BIND_TX = 15,
        // NETDEV_CMD_QUEUE_CREATE = 16 (2026, not in 6.18)
    }
}

kernel_names! {
    /// `enum netdev_a_dev`.
    fn dev_attr_name -> u16 {
        NETDEV_A_DEV_IFINDEX = 1,
        NETDEV_A_DEV_PAD = 2,
        NETDEV_A_DEV_XDP_FEATURES = 3,
        NETDEV_A_DEV_XDP_ZC_MAX_SEGS = 4,
        NETDEV_A_DEV_XDP_RX_METADATA_FEATURES = 5,
        NETDEV_A_DEV_XSK_FEATURES = 6,
    }
}

kernel_names! {
    /// `enum netdev_a_page_pool`.
    fn page_pool_attr_name -> u16 {
        NETDEV_A_PAGE_POOL_ID = 1,
        NETDEV_A_PAGE_POOL_IFINDEX = 2,
        NETDEV_A_PAGE_POOL_NAPI_ID = 3,
        NETDEV_A_PAGE_POOL_INFLIGHT = 4,
        NETDEV_A_PAGE_POOL_INFLIGHT_MEM = 5,
        NETDEV_A_PAGE_POOL_DETACH_TIME = 6,
        NETDEV_A_PAGE_POOL_DMABUF = 7,
        NETDEV_A_PAGE_POOL_IO_URING = 8,
    }
}

kernel_names! {
    /// `enum netdev_a_napi`.
    fn napi_attr_name -> u16 {
        NETDEV_A_NAPI_IFINDEX = 1,
        NETDEV_A_NAPI_ID = 2,
        NETDEV_A_NAPI_IRQ = 3,
        NETDEV_A_NAPI_PID = 4,
        NETDEV_A_NAPI_DEFER_HARD_IRQS = 5,
        NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT = 6,
        NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT = 7,
        NETDEV_A_NAPI_THREADED = 8,
    }
}

kernel_names! {
    /// `enum netdev_a_queue` (also the `queue-id` subset used inside `dmabuf.queues`).
    fn queue_attr_name -> u16 {
        NETDEV_A_QUEUE_ID = 1,
        NETDEV_A_QUEUE_IFINDEX = 2,
        NETDEV_A_QUEUE_TYPE = 3,
        NETDEV_A_QUEUE_NAPI_ID = 4,
        NETDEV_A_QUEUE_DMABUF = 5,
        NETDEV_A_QUEUE_IO_URING = 6,
        NETDEV_A_QUEUE_XSK = 7,
        // NETDEV_A_QUEUE_LEASE = 8 (2026, not in 6.18)
    }
}

kernel_names! {
    /// `enum netdev_a_dmabuf`.
    fn dmabuf_attr_name -> u16 {
        NETDEV_A_DMABUF_IFINDEX = 1,
        NETDEV_A_DMABUF_QUEUES = 2,
        NETDEV_A_DMABUF_FD = 3,
        NETDEV_A_DMABUF_ID = 4,
        NETDEV_A_DMABUF_RX_PAGE_SIZE = 5,
    }
}

/// `enum netdev_queue_type` value of `NETDEV_A_QUEUE_TYPE`.
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_QUEUE_TYPE_TX: u32 = 1;

fn decode(what: &str, detail: impl Into<String>) -> Error {
    Error::Decode {
        what: what.to_string(),
        detail: detail.into(),
    }
}

/// `enum netdev_queue_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueType {
    /// `NETDEV_QUEUE_TYPE_RX` (0).
    Rx,
    /// `NETDEV_QUEUE_TYPE_TX` (1).
    Tx,
    /// A value this crate does not know (the 6.18 policy accepts only 0..=1; sending 2 gets
    /// `ERANGE`).
    Other(u32),
}

impl QueueType {
    /// The wire value.
    pub fn value(self) -> u32 {
        match self {
            QueueType::Rx => NETDEV_QUEUE_TYPE_RX,
            QueueType::Tx => NETDEV_QUEUE_TYPE_TX,
            QueueType::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_value(v: u32) -> Self {
        match v {
            NETDEV_QUEUE_TYPE_RX => QueueType::Rx,
            NETDEV_QUEUE_TYPE_TX => QueueType::Tx,
            v => QueueType::Other(v),
        }
    }

    fn label(self) -> String {
        match self {
            QueueType::Rx => "rx".into(),
            QueueType::Tx => "tx".into(),
            QueueType::Other(v) => format!("type-{v}"),
        }
    }
}

/// The attribute number of an `Other` variant's raw `nla_type`.
fn masked(raw_type: u16) -> u16 {
    raw_type & NLA_TYPE_MASK
}

/// `dev` attribute set (`NETDEV_A_DEV_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevAttr {
    /// `NETDEV_A_DEV_IFINDEX` (u32).
    Ifindex(u32),
    /// `NETDEV_A_DEV_XDP_FEATURES` (u64 bitmask of `enum netdev_xdp_act`).
    XdpFeatures(u64),
    /// `NETDEV_A_DEV_XDP_ZC_MAX_SEGS` (u32).
    XdpZcMaxSegs(u32),
    /// `NETDEV_A_DEV_XDP_RX_METADATA_FEATURES` (u64 bitmask of `enum netdev_xdp_rx_metadata`).
    XdpRxMetadataFeatures(u64),
    /// `NETDEV_A_DEV_XSK_FEATURES` (u64 bitmask of `enum netdev_xsk_flags`).
    XskFeatures(u64),
    /// Unknown or padding attribute, kept raw.
    Other {
        /// `nla_type` as received.
        raw_type: u16,
        /// Payload bytes.
        bytes: Vec<u8>,
    },
}

impl Nla for DevAttr {
    fn name_of(kind: u16) -> &'static str {
        dev_attr_name(kind)
    }

    fn kind(&self) -> u16 {
        match self {
            DevAttr::Ifindex(_) => NETDEV_A_DEV_IFINDEX,
            DevAttr::XdpFeatures(_) => NETDEV_A_DEV_XDP_FEATURES,
            DevAttr::XdpZcMaxSegs(_) => NETDEV_A_DEV_XDP_ZC_MAX_SEGS,
            DevAttr::XdpRxMetadataFeatures(_) => NETDEV_A_DEV_XDP_RX_METADATA_FEATURES,
            DevAttr::XskFeatures(_) => NETDEV_A_DEV_XSK_FEATURES,
            DevAttr::Other { raw_type, .. } => masked(*raw_type),
        }
    }

    fn emit(&self, w: &mut AttrWriter) {
        let (k, n) = (self.kind(), self.name());
        match self {
            DevAttr::Ifindex(v) | DevAttr::XdpZcMaxSegs(v) => w.put_u32(k, n, *v),
            DevAttr::XdpFeatures(v)
            | DevAttr::XdpRxMetadataFeatures(v)
            | DevAttr::XskFeatures(v) => w.put_u64(k, n, *v),
            DevAttr::Other { raw_type, bytes } => w.put(*raw_type, n, bytes),
        }
    }

    fn parse(a: Attr<'_>) -> Result<Self> {
        let what = Self::name_of(a.kind());
        Ok(match a.kind() {
            NETDEV_A_DEV_IFINDEX => DevAttr::Ifindex(a.u32(what)?),
            NETDEV_A_DEV_XDP_FEATURES => DevAttr::XdpFeatures(a.u64(what)?),
            NETDEV_A_DEV_XDP_ZC_MAX_SEGS => DevAttr::XdpZcMaxSegs(a.u32(what)?),
            NETDEV_A_DEV_XDP_RX_METADATA_FEATURES => DevAttr::XdpRxMetadataFeatures(a.u64(what)?),
            NETDEV_A_DEV_XSK_FEATURES => DevAttr::XskFeatures(a.u64(what)?),
            _ => DevAttr::Other {
                raw_type: a.raw_type(),
                bytes: a.payload().to_vec(),
            },
        })
    }
}

/// `queue` attribute set (`NETDEV_A_QUEUE_*`); the `queue-id` subset (id, type) fills the
/// `NETDEV_A_DMABUF_QUEUES` nests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueAttr {
    /// `NETDEV_A_QUEUE_ID` (u32): queue index.
    Id(u32),
    /// `NETDEV_A_QUEUE_IFINDEX` (u32).
    Ifindex(u32),
    /// `NETDEV_A_QUEUE_TYPE` (u32, `enum netdev_queue_type`).
    Type(u32),
    /// `NETDEV_A_QUEUE_NAPI_ID` (u32).
    NapiId(u32),
    /// `NETDEV_A_QUEUE_DMABUF` (u32): id of the devmem binding on this RX queue.
    Dmabuf(u32),
    /// `NETDEV_A_QUEUE_IO_URING` (empty nest): an io_uring zcrx ifq owns the queue.
    IoUring,
    /// `NETDEV_A_QUEUE_XSK` (empty nest): an AF_XDP socket owns the queue.
    Xsk,
    /// Unknown attribute, kept raw.
    Other {
        /// `nla_type` as received.
        raw_type: u16,
        /// Payload bytes.
        bytes: Vec<u8>,
    },
}

impl Nla for QueueAttr {
    fn name_of(kind: u16) -> &'static str {
        queue_attr_name(kind)
    }

    fn kind(&self) -> u16 {
        match self {
            QueueAttr::Id(_) => NETDEV_A_QUEUE_ID,
            QueueAttr::Ifindex(_) => NETDEV_A_QUEUE_IFINDEX,
            QueueAttr::Type(_) => NETDEV_A_QUEUE_TYPE,
            QueueAttr::NapiId(_) => NETDEV_A_QUEUE_NAPI_ID,
            QueueAttr::Dmabuf(_) => NETDEV_A_QUEUE_DMABUF,
            QueueAttr::IoUring => NETDEV_A_QUEUE_IO_URING,
            QueueAttr::Xsk => NETDEV_A_QUEUE_XSK,
            QueueAttr::Other { raw_type, .. } => masked(*raw_type),
        }
    }

    fn emit(&self, w: &mut AttrWriter) {
        let (k, n) = (self.kind(), self.name());
        match self {
            QueueAttr::Id(v)
            | QueueAttr::Ifindex(v)
            | QueueAttr::Type(v)
            | QueueAttr::NapiId(v)
            | QueueAttr::Dmabuf(v) => w.put_u32(k, n, *v),
            QueueAttr::IoUring | QueueAttr::Xsk => {
                let nest = w.begin_nest(k, n);
                w.end_nest(nest);
            }
            QueueAttr::Other { raw_type, bytes } => w.put(*raw_type, n, bytes),
        }
    }

    fn parse(a: Attr<'_>) -> Result<Self> {
        let what = Self::name_of(a.kind());
        Ok(match a.kind() {
            NETDEV_A_QUEUE_ID => QueueAttr::Id(a.u32(what)?),
            NETDEV_A_QUEUE_IFINDEX => QueueAttr::Ifindex(a.u32(what)?),
            NETDEV_A_QUEUE_TYPE => QueueAttr::Type(a.u32(what)?),
            NETDEV_A_QUEUE_NAPI_ID => QueueAttr::NapiId(a.u32(what)?),
            NETDEV_A_QUEUE_DMABUF => QueueAttr::Dmabuf(a.u32(what)?),
            NETDEV_A_QUEUE_IO_URING => QueueAttr::IoUring,
            NETDEV_A_QUEUE_XSK => QueueAttr::Xsk,
            _ => QueueAttr::Other {
                raw_type: a.raw_type(),
                bytes: a.payload().to_vec(),
            },
        })
    }
}

/// `napi` attribute set (`NETDEV_A_NAPI_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NapiAttr {
    /// `NETDEV_A_NAPI_IFINDEX` (u32).
    Ifindex(u32),
    /// `NETDEV_A_NAPI_ID` (u32).
    Id(u32),
    /// `NETDEV_A_NAPI_IRQ` (u32).
    Irq(u32),
    /// `NETDEV_A_NAPI_PID` (u32): the NAPI kthread's pid in threaded mode.
    Pid(u32),
    /// `NETDEV_A_NAPI_DEFER_HARD_IRQS` (u32).
    DeferHardIrqs(u32),
    /// `NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT` (uint, nanoseconds).
    GroFlushTimeout(u64),
    /// `NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT` (uint, nanoseconds).
    IrqSuspendTimeout(u64),
    /// `NETDEV_A_NAPI_THREADED` (u32, `enum netdev_napi_threaded`).
    Threaded(u32),
    /// Unknown attribute, kept raw.
    Other {
        /// `nla_type` as received.
        raw_type: u16,
        /// Payload bytes.
        bytes: Vec<u8>,
    },
}

impl Nla for NapiAttr {
    fn name_of(kind: u16) -> &'static str {
        napi_attr_name(kind)
    }

    fn kind(&self) -> u16 {
        match self {
            NapiAttr::Ifindex(_) => NETDEV_A_NAPI_IFINDEX,
            NapiAttr::Id(_) => NETDEV_A_NAPI_ID,
            NapiAttr::Irq(_) => NETDEV_A_NAPI_IRQ,
            NapiAttr::Pid(_) => NETDEV_A_NAPI_PID,
            NapiAttr::DeferHardIrqs(_) => NETDEV_A_NAPI_DEFER_HARD_IRQS,
            NapiAttr::GroFlushTimeout(_) => NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT,
            NapiAttr::IrqSuspendTimeout(_) => NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT,
            NapiAttr::Threaded(_) => NETDEV_A_NAPI_THREADED,
            NapiAttr::Other { raw_type, .. } => masked(*raw_type),
        }
    }

    fn emit(&self, w: &mut AttrWriter) {
        let (k, n) = (self.kind(), self.name());
        match self {
            NapiAttr::Ifindex(v)
            | NapiAttr::Id(v)
            | NapiAttr::Irq(v)
            | NapiAttr::Pid(v)
            | NapiAttr::DeferHardIrqs(v)
            | NapiAttr::Threaded(v) => w.put_u32(k, n, *v),
            NapiAttr::GroFlushTimeout(v) | NapiAttr::IrqSuspendTimeout(v) => w.put_uint(k, n, *v),
            NapiAttr::Other { raw_type, bytes } => w.put(*raw_type, n, bytes),
        }
    }

    fn parse(a: Attr<'_>) -> Result<Self> {
        let what = Self::name_of(a.kind());
        Ok(match a.kind() {
            NETDEV_A_NAPI_IFINDEX => NapiAttr::Ifindex(a.u32(what)?),
            NETDEV_A_NAPI_ID => NapiAttr::Id(a.u32(what)?),
            NETDEV_A_NAPI_IRQ => NapiAttr::Irq(a.u32(what)?),
            NETDEV_A_NAPI_PID => NapiAttr::Pid(a.u32(what)?),
            NETDEV_A_NAPI_DEFER_HARD_IRQS => NapiAttr::DeferHardIrqs(a.u32(what)?),
            NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT => NapiAttr::GroFlushTimeout(a.uint(what)?),
            NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT => NapiAttr::IrqSuspendTimeout(a.uint(what)?),
            NETDEV_A_NAPI_THREADED => NapiAttr::Threaded(a.u32(what)?),
            _ => NapiAttr::Other {
                raw_type: a.raw_type(),
                bytes: a.payload().to_vec(),
            },
        })
    }
}

/// `page-pool` attribute set (`NETDEV_A_PAGE_POOL_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagePoolAttr {
    /// `NETDEV_A_PAGE_POOL_ID` (uint).
    Id(u64),
    /// `NETDEV_A_PAGE_POOL_IFINDEX` (u32).
    Ifindex(u32),
    /// `NETDEV_A_PAGE_POOL_NAPI_ID` (uint).
    NapiId(u64),
    /// `NETDEV_A_PAGE_POOL_INFLIGHT` (uint): buffers (pages or niovs) handed out, not returned.
    Inflight(u64),
    /// `NETDEV_A_PAGE_POOL_INFLIGHT_MEM` (uint): bytes of those buffers.
    InflightMem(u64),
    /// `NETDEV_A_PAGE_POOL_DETACH_TIME` (uint): seconds (wall clock) when the pool's device
    /// went away; present only for orphaned pools.
    DetachTime(u64),
    /// `NETDEV_A_PAGE_POOL_DMABUF` (u32): id of the devmem binding providing memory.
    Dmabuf(u32),
    /// `NETDEV_A_PAGE_POOL_IO_URING` (empty nest): io_uring zcrx provides memory.
    IoUring,
    /// Unknown attribute, kept raw.
    Other {
        /// `nla_type` as received.
        raw_type: u16,
        /// Payload bytes.
        bytes: Vec<u8>,
    },
}

impl Nla for PagePoolAttr {
    fn name_of(kind: u16) -> &'static str {
        page_pool_attr_name(kind)
    }

    fn kind(&self) -> u16 {
        match self {
            PagePoolAttr::Id(_) => NETDEV_A_PAGE_POOL_ID,
            PagePoolAttr::Ifindex(_) => NETDEV_A_PAGE_POOL_IFINDEX,
            PagePoolAttr::NapiId(_) => NETDEV_A_PAGE_POOL_NAPI_ID,
            PagePoolAttr::Inflight(_) => NETDEV_A_PAGE_POOL_INFLIGHT,
            PagePoolAttr::InflightMem(_) => NETDEV_A_PAGE_POOL_INFLIGHT_MEM,
            PagePoolAttr::DetachTime(_) => NETDEV_A_PAGE_POOL_DETACH_TIME,
            PagePoolAttr::Dmabuf(_) => NETDEV_A_PAGE_POOL_DMABUF,
            PagePoolAttr::IoUring => NETDEV_A_PAGE_POOL_IO_URING,
            PagePoolAttr::Other { raw_type, .. } => masked(*raw_type),
        }
    }

    fn emit(&self, w: &mut AttrWriter) {
        let (k, n) = (self.kind(), self.name());
        match self {
            PagePoolAttr::Id(v)
            | PagePoolAttr::NapiId(v)
            | PagePoolAttr::Inflight(v)
            | PagePoolAttr::InflightMem(v)
            | PagePoolAttr::DetachTime(v) => w.put_uint(k, n, *v),
            PagePoolAttr::Ifindex(v) | PagePoolAttr::Dmabuf(v) => w.put_u32(k, n, *v),
            PagePoolAttr::IoUring => {
                let nest = w.begin_nest(k, n);
                w.end_nest(nest);
            }
            PagePoolAttr::Other { raw_type, bytes } => w.put(*raw_type, n, bytes),
        }
    }

    fn parse(a: Attr<'_>) -> Result<Self> {
        let what = Self::name_of(a.kind());
        Ok(match a.kind() {
            NETDEV_A_PAGE_POOL_ID => PagePoolAttr::Id(a.uint(what)?),
            NETDEV_A_PAGE_POOL_IFINDEX => PagePoolAttr::Ifindex(a.u32(what)?),
            NETDEV_A_PAGE_POOL_NAPI_ID => PagePoolAttr::NapiId(a.uint(what)?),
            NETDEV_A_PAGE_POOL_INFLIGHT => PagePoolAttr::Inflight(a.uint(what)?),
            NETDEV_A_PAGE_POOL_INFLIGHT_MEM => PagePoolAttr::InflightMem(a.uint(what)?),
            NETDEV_A_PAGE_POOL_DETACH_TIME => PagePoolAttr::DetachTime(a.uint(what)?),
            NETDEV_A_PAGE_POOL_DMABUF => PagePoolAttr::Dmabuf(a.u32(what)?),
            NETDEV_A_PAGE_POOL_IO_URING => PagePoolAttr::IoUring,
            _ => PagePoolAttr::Other {
                raw_type: a.raw_type(),
                bytes: a.payload().to_vec(),
            },
        })
    }
}

/// One network device as `dev-get` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevInfo {
    /// Interface index.
    pub ifindex: u32,
    /// XDP actions supported (`enum netdev_xdp_act` bits: basic 1, redirect 2, ndo-xmit 4,
    /// xsk-zerocopy 8, hw-offload 16, rx-sg 32, ndo-xmit-sg 64); 0 when absent.
    pub xdp_features: u64,
    /// Max fragments per AF_XDP zero-copy packet, when the driver reports it.
    pub xdp_zc_max_segs: Option<u32>,
    /// XDP RX metadata kfuncs (`enum netdev_xdp_rx_metadata` bits); 0 when absent.
    pub xdp_rx_metadata_features: u64,
    /// AF_XDP features (`enum netdev_xsk_flags` bits); 0 when absent.
    pub xsk_features: u64,
}

impl DevInfo {
    /// Builds from the attributes of a `dev-get` reply.
    pub fn from_attrs(attrs: &[u8]) -> Result<Self> {
        let mut ifindex = None;
        let mut d = DevInfo {
            ifindex: 0,
            xdp_features: 0,
            xdp_zc_max_segs: None,
            xdp_rx_metadata_features: 0,
            xsk_features: 0,
        };
        for a in parse_all::<DevAttr>(attrs)? {
            match a {
                DevAttr::Ifindex(v) => ifindex = Some(v),
                DevAttr::XdpFeatures(v) => d.xdp_features = v,
                DevAttr::XdpZcMaxSegs(v) => d.xdp_zc_max_segs = Some(v),
                DevAttr::XdpRxMetadataFeatures(v) => d.xdp_rx_metadata_features = v,
                DevAttr::XskFeatures(v) => d.xsk_features = v,
                DevAttr::Other { .. } => {}
            }
        }
        d.ifindex = ifindex
            .ok_or_else(|| decode("netdev dev-get reply", "NETDEV_A_DEV_IFINDEX is missing"))?;
        Ok(d)
    }
}

/// One queue as `queue-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// Queue index (per type: rx 0 and tx 0 are different queues).
    pub id: u32,
    /// RX or TX.
    pub queue_type: QueueType,
    /// Interface index.
    pub ifindex: u32,
    /// NAPI instance serving the queue; veth and lo report none.
    pub napi_id: Option<u32>,
    /// Id of the devmem binding whose memory this RX queue uses.
    pub dmabuf: Option<u32>,
    /// An io_uring zcrx ifq owns the queue.
    pub io_uring: bool,
    /// An AF_XDP socket owns the queue.
    pub xsk: bool,
}

impl QueueInfo {
    /// Builds from the attributes of a `queue-get` reply.
    ///
    /// Errors: `Error::Decode` when id, type or ifindex is missing or malformed.
    pub fn from_attrs(attrs: &[u8]) -> Result<Self> {
        let (mut id, mut qtype, mut ifindex) = (None, None, None);
        let (mut napi_id, mut dmabuf, mut io_uring, mut xsk) = (None, None, false, false);
        for a in parse_all::<QueueAttr>(attrs)? {
            match a {
                QueueAttr::Id(v) => id = Some(v),
                QueueAttr::Type(v) => qtype = Some(QueueType::from_value(v)),
                QueueAttr::Ifindex(v) => ifindex = Some(v),
                QueueAttr::NapiId(v) => napi_id = Some(v),
                QueueAttr::Dmabuf(v) => dmabuf = Some(v),
                QueueAttr::IoUring => io_uring = true,
                QueueAttr::Xsk => xsk = true,
                QueueAttr::Other { .. } => {}
            }
        }
        let missing = |n: &str| decode("netdev queue-get reply", format!("{n} is missing"));
        Ok(QueueInfo {
            id: id.ok_or_else(|| missing("NETDEV_A_QUEUE_ID"))?,
            queue_type: qtype.ok_or_else(|| missing("NETDEV_A_QUEUE_TYPE"))?,
            ifindex: ifindex.ok_or_else(|| missing("NETDEV_A_QUEUE_IFINDEX"))?,
            napi_id,
            dmabuf,
            io_uring,
            xsk,
        })
    }
}

/// One NAPI instance as `napi-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NapiInfo {
    /// NAPI id.
    pub id: u32,
    /// Interface index.
    pub ifindex: u32,
    /// Interrupt line, when the driver set one.
    pub irq: Option<u32>,
    /// Pid of the NAPI kthread (threaded mode only).
    pub pid: Option<u32>,
    /// `defer-hard-irqs` count.
    pub defer_hard_irqs: Option<u32>,
    /// `gro-flush-timeout` in nanoseconds.
    pub gro_flush_timeout: Option<u64>,
    /// `irq-suspend-timeout` in nanoseconds.
    pub irq_suspend_timeout: Option<u64>,
    /// `threaded` (0 disabled, 1 enabled).
    pub threaded: Option<u32>,
}

impl NapiInfo {
    /// Builds from the attributes of a `napi-get` reply.
    pub fn from_attrs(attrs: &[u8]) -> Result<Self> {
        let (mut id, mut ifindex) = (None, None);
        let mut n = NapiInfo {
            id: 0,
            ifindex: 0,
            irq: None,
            pid: None,
            defer_hard_irqs: None,
            gro_flush_timeout: None,
            irq_suspend_timeout: None,
            threaded: None,
        };
        for a in parse_all::<NapiAttr>(attrs)? {
            match a {
                NapiAttr::Id(v) => id = Some(v),
                NapiAttr::Ifindex(v) => ifindex = Some(v),
                NapiAttr::Irq(v) => n.irq = Some(v),
                NapiAttr::Pid(v) => n.pid = Some(v),
                NapiAttr::DeferHardIrqs(v) => n.defer_hard_irqs = Some(v),
                NapiAttr::GroFlushTimeout(v) => n.gro_flush_timeout = Some(v),
                NapiAttr::IrqSuspendTimeout(v) => n.irq_suspend_timeout = Some(v),
                NapiAttr::Threaded(v) => n.threaded = Some(v),
                NapiAttr::Other { .. } => {}
            }
        }
        let missing = |x: &str| decode("netdev napi-get reply", format!("{x} is missing"));
        n.id = id.ok_or_else(|| missing("NETDEV_A_NAPI_ID"))?;
        n.ifindex = ifindex.ok_or_else(|| missing("NETDEV_A_NAPI_IFINDEX"))?;
        Ok(n)
    }
}

/// One page pool as `page-pool-get` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePoolInfo {
    /// Page-pool id.
    pub id: u64,
    /// Interface index; absent once the device is gone.
    pub ifindex: Option<u32>,
    /// NAPI instance the pool serves.
    pub napi_id: Option<u64>,
    /// Buffers (pages or niovs) handed out and not yet returned.
    pub inflight: Option<u64>,
    /// Bytes of those buffers.
    pub inflight_mem: Option<u64>,
    /// Seconds (wall clock) when the pool was detached from its device.
    pub detach_time: Option<u64>,
    /// Id of the devmem binding that provides the pool's memory.
    pub dmabuf: Option<u32>,
    /// io_uring zcrx provides the pool's memory.
    pub io_uring: bool,
}

impl PagePoolInfo {
    /// Builds from the attributes of a `page-pool-get` reply.
    pub fn from_attrs(attrs: &[u8]) -> Result<Self> {
        let mut id = None;
        let mut p = PagePoolInfo {
            id: 0,
            ifindex: None,
            napi_id: None,
            inflight: None,
            inflight_mem: None,
            detach_time: None,
            dmabuf: None,
            io_uring: false,
        };
        for a in parse_all::<PagePoolAttr>(attrs)? {
            match a {
                PagePoolAttr::Id(v) => id = Some(v),
                PagePoolAttr::Ifindex(v) => p.ifindex = Some(v),
                PagePoolAttr::NapiId(v) => p.napi_id = Some(v),
                PagePoolAttr::Inflight(v) => p.inflight = Some(v),
                PagePoolAttr::InflightMem(v) => p.inflight_mem = Some(v),
                PagePoolAttr::DetachTime(v) => p.detach_time = Some(v),
                PagePoolAttr::Dmabuf(v) => p.dmabuf = Some(v),
                PagePoolAttr::IoUring => p.io_uring = true,
                PagePoolAttr::Other { .. } => {}
            }
        }
        p.id = id.ok_or_else(|| {
            decode(
                "netdev page-pool-get reply",
                "NETDEV_A_PAGE_POOL_ID is missing",
            )
        })?;
        Ok(p)
    }
}

/// A `netdev` family handle: a socket plus the resolved family, for queries. Binds open their
/// own socket (see [`DmabufBinding`]).
#[derive(Debug)]
pub struct Netdev {
    sock: NlSocket,
    family: Family,
}

impl Netdev {
    /// Opens a socket and resolves `"netdev"`.
    ///
    /// Errors: `Error::Netlink` ENOENT if the kernel lacks the family (before 6.3; use
    /// [`super::skip_if_family_missing`] to turn that into a skip), `Error::Sys` for socket
    /// failures.
    pub fn open() -> Result<Self> {
        let mut sock = NlSocket::open()?;
        let family = resolve_family(&mut sock, "netdev")?;
        Ok(Netdev { sock, family })
    }

    /// The resolved family (id, version 1, groups `mgmt` and `page-pool`).
    pub fn family(&self) -> &Family {
        &self.family
    }

    fn run(&mut self, req: GenlRequest, cmd: u8) -> Result<Vec<GenlReply>> {
        let replies = self.sock.request(&req)?;
        if let Some(r) = replies.iter().find(|r| r.cmd != cmd) {
            return Err(decode(
                &format!("netdev {} reply", netdev_cmd_name(cmd)),
                format!(
                    "command {} ({}), expected {cmd}",
                    r.cmd,
                    netdev_cmd_name(r.cmd)
                ),
            ));
        }
        Ok(replies)
    }

    fn one(replies: Vec<GenlReply>, what: &str) -> Result<GenlReply> {
        replies
            .into_iter()
            .next()
            .ok_or_else(|| decode(what, "no reply message before the ACK"))
    }

    /// `dev-get` do: the device with `ifindex`.
    ///
    /// Errors: `Error::Netlink` ENODEV for an unknown ifindex.
    #[doc(alias = "NETDEV_CMD_DEV_GET")]
    pub fn dev_get(&mut self, ifindex: u32) -> Result<DevInfo> {
        let mut req = self
            .family
            .request(NETDEV_CMD_DEV_GET, "dev-get")
            .target(dev_label(ifindex, None));
        DevAttr::Ifindex(ifindex).emit(req.attrs());
        let r = Self::one(self.run(req, NETDEV_CMD_DEV_GET)?, "netdev dev-get reply")?;
        DevInfo::from_attrs(&r.attrs)
    }

    /// `dev-get` dump: every device in the socket's network namespace.
    #[doc(alias = "NETDEV_CMD_DEV_GET")]
    pub fn dev_get_dump(&mut self) -> Result<Vec<DevInfo>> {
        let req = self
            .family
            .request(NETDEV_CMD_DEV_GET, "dev-get")
            .dump()
            .target("all devices");
        let replies = self.run(req, NETDEV_CMD_DEV_GET)?;
        replies
            .iter()
            .map(|r| DevInfo::from_attrs(&r.attrs))
            .collect()
    }

    /// `queue-get` do: queue `id` of type `queue_type` on `ifindex`.
    ///
    /// Errors: `Error::Netlink` EINVAL for a queue index out of range, ENOENT on a down device.
    #[doc(alias = "NETDEV_CMD_QUEUE_GET")]
    pub fn queue_get(&mut self, ifindex: u32, queue_type: QueueType, id: u32) -> Result<QueueInfo> {
        let target = format!(
            "{}, {} queue {id}",
            dev_label(ifindex, None),
            queue_type.label()
        );
        let mut req = self
            .family
            .request(NETDEV_CMD_QUEUE_GET, "queue-get")
            .target(target);
        for a in [
            QueueAttr::Ifindex(ifindex),
            QueueAttr::Type(queue_type.value()),
            QueueAttr::Id(id),
        ] {
            a.emit(req.attrs());
        }
        let r = Self::one(
            self.run(req, NETDEV_CMD_QUEUE_GET)?,
            "netdev queue-get reply",
        )?;
        QueueInfo::from_attrs(&r.attrs)
    }

    /// `queue-get` dump of the queues of `ifindex` (sent as `NETDEV_A_QUEUE_IFINDEX`, attr 2).
    /// A down device has no queues (empty result).
    #[doc(alias = "NETDEV_CMD_QUEUE_GET")]
    pub fn queue_get_dump(&mut self, ifindex: u32) -> Result<Vec<QueueInfo>> {
        let mut req = self
            .family
            .request(NETDEV_CMD_QUEUE_GET, "queue-get")
            .dump()
            .target(dev_label(ifindex, None));
        QueueAttr::Ifindex(ifindex).emit(req.attrs());
        let replies = self.run(req, NETDEV_CMD_QUEUE_GET)?;
        replies
            .iter()
            .map(|r| QueueInfo::from_attrs(&r.attrs))
            .collect()
    }

    /// `napi-get` dump of the NAPI instances of `ifindex` (veth has none unless GRO is on).
    #[doc(alias = "NETDEV_CMD_NAPI_GET")]
    pub fn napi_get_dump(&mut self, ifindex: u32) -> Result<Vec<NapiInfo>> {
        let mut req = self
            .family
            .request(NETDEV_CMD_NAPI_GET, "napi-get")
            .dump()
            .target(dev_label(ifindex, None));
        NapiAttr::Ifindex(ifindex).emit(req.attrs());
        let replies = self.run(req, NETDEV_CMD_NAPI_GET)?;
        replies
            .iter()
            .map(|r| NapiInfo::from_attrs(&r.attrs))
            .collect()
    }

    /// `page-pool-get` dump: every page pool visible in the socket's network namespace.
    #[doc(alias = "NETDEV_CMD_PAGE_POOL_GET")]
    pub fn page_pool_get_dump(&mut self) -> Result<Vec<PagePoolInfo>> {
        let req = self
            .family
            .request(NETDEV_CMD_PAGE_POOL_GET, "page-pool-get")
            .dump()
            .target("all page pools");
        let replies = self.run(req, NETDEV_CMD_PAGE_POOL_GET)?;
        replies
            .iter()
            .map(|r| PagePoolInfo::from_attrs(&r.attrs))
            .collect()
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::netlink::attr::emit_all;
    use crate::netlink::socket::Exchange;
    use proptest::prelude::*;

    /// 6.18's answer to a queue-get dump of veth0 (ifindex 3) in a fresh netns (captured with
    /// a raw-socket probe; seq 5, port id 18858): rx0 and tx0 without napi-id, then
    /// NLMSG_DONE, all in one datagram. The parts carry no NLM_F_MULTI; only DONE does.
    #[rustfmt::skip]
    const QUEUE_DUMP_VETH: &[u8] = &[
        0x2c, 0x00, 0x00, 0x00, // nlmsg_len 44
        0x14, 0x00,             // type 20 (netdev)
        0x00, 0x00,             // flags 0
        0x05, 0x00, 0x00, 0x00, // seq 5
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x0a, 0x01, 0x00, 0x00, // cmd 10 NETDEV_CMD_QUEUE_GET, version 1
        0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_ID 0
        0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_TYPE 0 (rx)
        0x08, 0x00, 0x02, 0x00, 0x03, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_IFINDEX 3
        0x2c, 0x00, 0x00, 0x00, // nlmsg_len 44
        0x14, 0x00,             // type 20
        0x00, 0x00,             // flags 0
        0x05, 0x00, 0x00, 0x00, // seq 5
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x0a, 0x01, 0x00, 0x00, // cmd 10, version 1
        0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_ID 0
        0x08, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_TYPE 1 (tx)
        0x08, 0x00, 0x02, 0x00, 0x03, 0x00, 0x00, 0x00, // NETDEV_A_QUEUE_IFINDEX 3
        0x14, 0x00, 0x00, 0x00, // nlmsg_len 20
        0x03, 0x00,             // NLMSG_DONE
        0x02, 0x00,             // NLM_F_MULTI
        0x05, 0x00, 0x00, 0x00, // seq 5
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x00, 0x00, 0x00, 0x00, // status 0
    ];

    #[test]
    fn queue_get_dump_reply_parse_and_emit() {
        let fam = Family {
            name: "netdev".into(),
            id: 20,
            version: 1,
            mcast_groups: vec![],
        };
        let mut req = fam.request(NETDEV_CMD_QUEUE_GET, "queue-get").dump();
        QueueAttr::Ifindex(3).emit(req.attrs());
        let mut ex = Exchange::new(&req, 5, 18858);
        assert!(ex.feed(QUEUE_DUMP_VETH).unwrap());
        let replies = ex.into_replies();
        let expected_attrs = [
            vec![QueueAttr::Id(0), QueueAttr::Type(0), QueueAttr::Ifindex(3)],
            vec![QueueAttr::Id(0), QueueAttr::Type(1), QueueAttr::Ifindex(3)],
        ];
        for (r, exp) in replies.iter().zip(&expected_attrs) {
            assert_eq!(r.cmd, NETDEV_CMD_QUEUE_GET);
            assert_eq!(&parse_all::<QueueAttr>(&r.attrs).unwrap(), exp);
            let mut w = AttrWriter::new();
            emit_all(&mut w, exp);
            assert_eq!(w.bytes(), &r.attrs[..]);
        }
        let infos: Vec<_> = replies
            .iter()
            .map(|r| QueueInfo::from_attrs(&r.attrs).unwrap())
            .collect();
        let q = |t| QueueInfo {
            id: 0,
            queue_type: t,
            ifindex: 3,
            napi_id: None,
            dmabuf: None,
            io_uring: false,
            xsk: false,
        };
        assert_eq!(infos, vec![q(QueueType::Rx), q(QueueType::Tx)]);
        // The request: NETDEV_A_QUEUE_IFINDEX (attr 2) only, with NLM_F_DUMP.
        assert_eq!(
            &req.encode(5, 0).unwrap()[16..],
            &[0x0a, 0x01, 0x00, 0x00, 0x08, 0x00, 0x02, 0x00, 0x03, 0x00, 0x00, 0x00]
        );
        assert_eq!(req.flags(), 0x0305);
    }

    #[test]
    fn queue_info_with_binding_and_owners() {
        let attrs = vec![
            QueueAttr::Id(8),
            QueueAttr::Type(0),
            QueueAttr::Ifindex(4),
            QueueAttr::NapiId(257),
            QueueAttr::Dmabuf(3),
            QueueAttr::IoUring,
            QueueAttr::Other {
                raw_type: 0x8008,
                bytes: vec![],
            },
        ];
        let mut w = AttrWriter::new();
        emit_all(&mut w, &attrs);
        assert_eq!(parse_all::<QueueAttr>(w.bytes()).unwrap(), attrs);
        let q = QueueInfo::from_attrs(w.bytes()).unwrap();
        assert_eq!(
            (q.napi_id, q.dmabuf, q.io_uring, q.xsk),
            (Some(257), Some(3), true, false)
        );
        let e = QueueInfo::from_attrs(&w.bytes()[8..]).unwrap_err();
        assert!(
            e.to_string().contains("NETDEV_A_QUEUE_ID is missing"),
            "{e}"
        );
    }

    #[test]
    fn dev_napi_and_page_pool_round_trips() {
        // Values as 6.18 reports them for eth0 (virtio_net) and its NAPI
        // (docs/kernel-interface.md#netdev-queries).
        let dev = vec![
            DevAttr::Ifindex(4),
            DevAttr::XdpFeatures(43),
            DevAttr::XdpZcMaxSegs(1),
            DevAttr::XdpRxMetadataFeatures(0),
            DevAttr::XskFeatures(0),
        ];
        let mut w = AttrWriter::new();
        emit_all(&mut w, &dev);
        assert_eq!(parse_all::<DevAttr>(w.bytes()).unwrap(), dev);
        let d = DevInfo::from_attrs(w.bytes()).unwrap();
        assert_eq!(
            (d.ifindex, d.xdp_features, d.xdp_zc_max_segs),
            (4, 43, Some(1))
        );

        let napi = vec![
            NapiAttr::Id(257),
            NapiAttr::Ifindex(4),
            NapiAttr::Threaded(0),
            NapiAttr::DeferHardIrqs(0),
            NapiAttr::IrqSuspendTimeout(0),
            NapiAttr::GroFlushTimeout(0),
        ];
        let mut w = AttrWriter::new();
        emit_all(&mut w, &napi);
        assert_eq!(parse_all::<NapiAttr>(w.bytes()).unwrap(), napi);
        let n = NapiInfo::from_attrs(w.bytes()).unwrap();
        assert_eq!(
            (n.id, n.ifindex, n.irq, n.gro_flush_timeout),
            (257, 4, None, Some(0))
        );

        let pool = vec![
            PagePoolAttr::Id(9),
            PagePoolAttr::Ifindex(4),
            PagePoolAttr::NapiId(257),
            PagePoolAttr::Inflight(5),
            PagePoolAttr::InflightMem(1 << 33), // 8 GiB: an 8-byte uint
            PagePoolAttr::Dmabuf(3),
            PagePoolAttr::IoUring,
        ];
        let mut w = AttrWriter::new();
        emit_all(&mut w, &pool);
        assert_eq!(parse_all::<PagePoolAttr>(w.bytes()).unwrap(), pool);
        let p = PagePoolInfo::from_attrs(w.bytes()).unwrap();
        assert_eq!(
            p,
            PagePoolInfo {
                id: 9,
                ifindex: Some(4),
                napi_id: Some(257),
                inflight: Some(5),
                inflight_mem: Some(1 << 33),
                detach_time: None,
                dmabuf: Some(3),
                io_uring: true,
            }
        );
    }

    proptest! {
        #[test]
        fn reply_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = DevInfo::from_attrs(&bytes);
            let _ = QueueInfo::from_attrs(&bytes);
            let _ = NapiInfo::from_attrs(&bytes);
            let _ = PagePoolInfo::from_attrs(&bytes);
            let _ = parse_all::<DmabufAttr>(&bytes);
        }
    }
}
