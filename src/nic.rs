//! NIC configuration for devmem: header split, channels, RSS indirection table, additional RSS
//! contexts, ntuple flow steering — through ethtool netlink and `SIOCETHTOOL` ioctls, never
//! the `ethtool` program.
//!
//! This file is the seam between policy and kernel: [`NicOps`] lists the kernel operations
//! the setup, the undo guards, probe mode and the capability report need. The real
//! implementation talks to the kernel; tests use a scripted NIC with the same interface.
//! Policy code (guards, setup order, probe checks) is written against the trait only.

use std::net::IpAddr;

use crate::error::Result;
use crate::netlink::ethtool::{Channels, TcpDataSplit};
use crate::netlink::netdev::{BindRxRequest, DevInfo, DmabufBinding, PagePoolInfo, QueueInfo};
use crate::sys::ethtool_ioctl::DrvInfo;

/// The header-split part of the ring configuration (ethtool RINGS_GET/SET, attrs 11 and 17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HdsConfig {
    /// `ETHTOOL_A_RINGS_TCP_DATA_SPLIT`; `None` when the driver does not report it.
    pub tcp_data_split: Option<TcpDataSplit>,
    /// `ETHTOOL_A_RINGS_HDS_THRESH` in bytes; `None` when the driver does not report it
    /// (then it must not be set).
    pub hds_thresh: Option<u32>,
    /// `ETHTOOL_A_RINGS_HDS_THRESH_MAX` in bytes: the largest hds-thresh the driver takes;
    /// `None` when the driver does not report it.
    pub hds_thresh_max: Option<u32>,
}

/// Channel counts to set (ethtool CHANNELS_SET, attrs 6/7/9); `None` leaves a count unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelsSet {
    /// RX-only channels.
    pub rx: Option<u32>,
    /// TX-only channels.
    pub tx: Option<u32>,
    /// Combined channels.
    pub combined: Option<u32>,
}

/// The RSS indirection table of the default context: entry `i` is the RX queue index that
/// hash bucket `i` steers to. (`ETHTOOL_GRSSH`, uapi `struct ethtool_rxfh`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssTable {
    /// One queue index per bucket; length = the driver's table size.
    pub indir: Vec<u32>,
}

/// RX queues `start..start + count` (queue indices; `count` queues), e.g. the queues an
/// additional RSS context spreads over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpan {
    /// First queue index.
    pub start: u32,
    /// Number of queues.
    pub count: u32,
}

impl QueueSpan {
    /// One past the last queue index (`start + count`, saturating).
    pub fn end(&self) -> u32 {
        self.start.saturating_add(self.count)
    }
}

impl std::fmt::Display for QueueSpan {
    /// `queues 4..8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "queues {}..{}", self.start, self.end())
    }
}

/// TCP flow type of an ntuple rule (uapi `TCP_V4_FLOW` = 1, `TCP_V6_FLOW` = 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowType {
    /// `TCP_V4_FLOW`: IPv4 addresses (also used for IPv4-mapped server addresses).
    Tcp4,
    /// `TCP_V6_FLOW`.
    Tcp6,
}

/// An ntuple rule steering one TCP flow to an RX queue, as `ethtool -N IF flow-type tcp4|tcp6
/// [src-ip S] dst-ip D [src-port P] dst-port P action Q` would (exact-match masks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRule {
    /// tcp4 or tcp6; addresses must be of that family (v4-mapped already unwrapped for tcp4).
    pub flow_type: FlowType,
    /// Source address and port (5-tuple rule, `-c`); `None` for a 3-tuple rule.
    pub src: Option<(IpAddr, u16)>,
    /// Destination address and port (the server's `-s`/`-p`).
    pub dst: (IpAddr, u16),
    /// Target RX queue index (`ring_cookie`).
    pub queue: u32,
}

/// Where the kernel put an inserted rule (`fs.location` written back by
/// `ETHTOOL_SRXCLSRLINS`); needed to delete exactly our rule.
pub type RuleLocation = u32;

/// The id of an additional RSS context (`ethtool_rxfh.rss_context`, `ethtool -X IF context
/// N`): allocated by the ethtool core from 1 up, below the driver's limit. 0 names the default
/// context, whose table [`NicOps::rss_get`] reads.
pub type RssContextId = u32;

/// Every kernel operation NIC setup, undo, probe mode and the capability report need, for one
/// interface. Errors are the crate's (`Error::Netlink` with extack, `Error::Sys` for ioctls);
/// an unsupported operation surfaces as errno `EOPNOTSUPP`.
pub trait NicOps {
    /// Interface name, for messages.
    fn ifname(&self) -> &str;
    /// Interface index.
    fn ifindex(&self) -> u32;

    /// Header-split settings (ethtool netlink RINGS_GET).
    fn hds_get(&mut self) -> Result<HdsConfig>;
    /// Sets tcp-data-split and, when `Some`, hds-thresh (ethtool netlink RINGS_SET).
    fn hds_set(&mut self, split: TcpDataSplit, hds_thresh: Option<u32>) -> Result<()>;

    /// Channel counts and maxima (ethtool netlink CHANNELS_GET).
    fn channels_get(&mut self) -> Result<Channels>;
    /// Sets channel counts (ethtool netlink CHANNELS_SET).
    fn channels_set(&mut self, set: ChannelsSet) -> Result<()>;

    /// The RSS indirection table of context 0 (`ETHTOOL_GRSSH`).
    fn rss_get(&mut self) -> Result<RssTable>;
    /// Writes the indirection table of context 0 (`ETHTOOL_SRSSH`, key unchanged). The
    /// kernel then marks the table as user-configured (`IFF_RXFH_CONFIGURED`): channel
    /// changes are checked against it and the driver no longer re-spreads it.
    fn rss_set(&mut self, table: &RssTable) -> Result<()>;
    /// Resets the indirection table of context 0 to the driver default (`ETHTOOL_SRSSH` with
    /// `indir_size` 0, key unchanged; `ethtool -X IF default`): entry `i` = `i % RX rings`,
    /// and the user-configured mark is cleared.
    fn rss_reset(&mut self) -> Result<()>;

    /// Whether the `rx-ntuple-filter` feature is active (`ETHTOOL_GFEATURES`, looked up by
    /// name through `ETH_SS_FEATURES` strings).
    fn ntuple_get(&mut self) -> Result<bool>;
    /// Requests `rx-ntuple-filter` on or off (`ETHTOOL_SFEATURES`).
    fn ntuple_set(&mut self, on: bool) -> Result<()>;

    /// Creates an additional RSS context with `table` as its indirection table (entries are
    /// RX queue indices; the length must be the device's table size) and returns the id the
    /// kernel allocated (`ETHTOOL_SRSSH` with `ETH_RXFH_CONTEXT_ALLOC`). The context shares
    /// the device's key and hash function.
    ///
    /// Errors: EOPNOTSUPP for a driver without RSS or without additional contexts; EINVAL for
    /// a table of the wrong size or naming a queue past the RX rings; EBUSY when all the
    /// driver's context ids are taken.
    fn rss_context_create(&mut self, table: &RssTable) -> Result<RssContextId>;
    /// The indirection table of RSS context `id` (`ETHTOOL_GRSSH` with `rss_context`; 0 is
    /// the default context).
    ///
    /// Errors: EOPNOTSUPP for a driver without RSS or (for `id` ≠ 0) without additional
    /// contexts; ENOENT for an id the device does not have.
    fn rss_context_get(&mut self, id: RssContextId) -> Result<RssTable>;
    /// Deletes RSS context `id` (`ETHTOOL_SRSSH` with `rss_context` = `id`, `indir_size` and
    /// `key_size` 0).
    ///
    /// Errors: EBUSY while an ntuple rule names the context (delete the rule first); ENOENT
    /// for an id the device does not have; EOPNOTSUPP without additional contexts;
    /// `Error::Failure` for 0 (that request would reset the default table), never sent.
    fn rss_context_delete(&mut self, id: RssContextId) -> Result<()>;
    /// The ids of the device's additional RSS contexts, ascending (ethtool netlink RSS_GET
    /// dump: no ioctl lists them). A device without RSS has none.
    ///
    /// Errors: EOPNOTSUPP from kernels without the RSS_GET dump (before 6.11).
    fn rss_contexts(&mut self) -> Result<Vec<RssContextId>>;

    /// Locations of the installed ntuple rules and the rule table size
    /// (`ETHTOOL_GRXCLSRLCNT` + `ETHTOOL_GRXCLSRLALL`).
    fn flow_rules(&mut self) -> Result<(Vec<RuleLocation>, u32)>;
    /// Inserts `rule` at `RX_CLS_LOC_ANY` (or at a free location for drivers that need one)
    /// and returns where the kernel put it (`ETHTOOL_SRXCLSRLINS`).
    fn flow_rule_insert(&mut self, rule: &FlowRule) -> Result<RuleLocation>;
    /// Inserts `rule` as a `FLOW_RSS` rule delivering to RSS context `ctx` (`ethtool -N IF …
    /// context CTX`), at a location picked as [`flow_rule_insert`](Self::flow_rule_insert)
    /// does; `rule.queue` is the queue offset added to the context's pick, which must be 0 on
    /// drivers that cannot add it. Returns where the kernel put it.
    ///
    /// Errors: EOPNOTSUPP for a driver without ntuple filters; EINVAL from the ethtool core for
    /// a context the device does not have or a non-zero offset; the driver's own refusals.
    fn flow_rule_insert_rss(&mut self, rule: &FlowRule, ctx: RssContextId) -> Result<RuleLocation>;
    /// Deletes the rule at `loc` (`ETHTOOL_SRXCLSRLDEL`).
    fn flow_rule_delete(&mut self, loc: RuleLocation) -> Result<()>;

    /// RX and TX queues with their owners (netdev queue-get dump).
    fn queues(&mut self) -> Result<Vec<QueueInfo>>;
    /// netdev bind-rx; the returned binding unbinds when dropped.
    fn bind_rx(&mut self, req: &BindRxRequest) -> Result<Box<dyn Binding>>;

    /// The device's page pools (netdev `page-pool-get` dump, filtered to this ifindex), for
    /// the capability report. Available since 6.8.
    ///
    /// Errors: `Error::Netlink` (ENOENT from nlctrl when the kernel has no netdev family).
    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>>;

    /// XDP / AF_XDP features of the device (netdev `dev-get`), for the capability report.
    ///
    /// Errors: `Error::Netlink` (ENODEV for a vanished device).
    fn dev_info(&mut self) -> Result<DevInfo>;

    /// Driver name, version, firmware and bus (`ETHTOOL_GDRVINFO`), for the capability
    /// report.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP for lo).
    fn drvinfo(&mut self) -> Result<DrvInfo>;
}

/// A live devmem binding: dropping it unbinds (for the real one, by closing its netlink
/// socket). Lets a scripted NIC hand out bindings whose drop it observes.
pub trait Binding: std::fmt::Debug {
    /// The binding id (`NETDEV_A_DMABUF_ID`), as it appears in `dmabuf_cmsg.dmabuf_id`.
    fn id(&self) -> u32;
}

impl Binding for DmabufBinding {
    fn id(&self) -> u32 {
        DmabufBinding::id(self)
    }
}

pub mod guards;
pub mod probe;
pub mod queues;
pub mod real;
pub mod report;
#[cfg(any(test, feature = "testing"))]
pub mod scripted;
pub mod setup;
pub mod snapshot;
pub mod steer;
