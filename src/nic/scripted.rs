//! A scripted NIC: an in-memory [`NicOps`] that keeps the kernel's contracts, for tests of the
//! setup, undo, probe and report policy without a devmem-capable NIC.
//!
//! State: header split (configured mode, what the driver picks for "unknown", hds-thresh),
//! channel counts, the RSS indirection table, the ntuple feature and rule table, queue owners
//! and our bindings. The rules it enforces are the kernel's (behaviour, not code), in the
//! kernel's order and with its extack texts and attributes, as measured against a real kernel
//! by the VM suite's `devmem-nic/scripted-nic-parity` (docs/kernel-7.3-devmem-nic.md):
//! - bind-rx: rx-page-size on a kernel without the attribute → EINVAL "Unknown attribute
//!   type"; no fd / no queue nests → EINVAL, missing attribute 3 / 2; rx-page-size not a power
//!   of two → EINVAL; device without queue management → EOPNOTSUPP at the ifindex; a nest
//!   without id or type → EINVAL, missing attribute 1 / 3 in that nest; a queue id past the RX
//!   queues → EINVAL at that nest's id; fd `u32::MAX` (never an open descriptor) → EBADF;
//!   then per queue: tcp-data-split not *configured* ENABLED → EINVAL "tcp-data-split is
//!   disabled"; hds-thresh ≠ 0 → EINVAL "hds-thresh is not zero"; rx-page-size the driver
//!   does not take → EOPNOTSUPP; an owned queue → EEXIST (provider) / EBUSY (AF_XDP);
//! - rings-set: unsupported tcp-data-split / hds-thresh → EOPNOTSUPP at the attribute; while
//!   a provider is bound, tcp-data-split ≠ ENABLED or hds-thresh ≠ 0 → EINVAL; hds-thresh
//!   above its maximum → EINVAL "requested ring size exceeds maximum";
//! - channels-set: no change → nothing checked; above the maxima or leaving no RX/TX channel
//!   → EINVAL at the count; then below a user-configured RSS table's highest queue, below an
//!   ntuple rule's queue, up to the highest bound queue (+ 1) → EINVAL with the kernel's text;
//!   an AF_XDP queue that would go → EINVAL; a table that is not user-configured is re-spread
//!   by the driver over the new RX queues;
//! - RSS table of the wrong size or referencing a queue past the RX queues → EINVAL; writing
//!   a table marks it user-configured (`IFF_RXFH_CONFIGURED`), a reset (SRSSH with
//!   `indir_size` 0) writes the driver default (`i % RX queues`) and clears the mark;
//! - ntuple rules need the feature on; turning it off flushes the rules; deleting a rule that
//!   is not there → ENOENT;
//! - additional RSS contexts (net/ethtool/ioctl.c `ethtool_set_rxfh`, `ethtool_get_rxfh`,
//!   `ethtool_set_rxnfc`): a driver without them answers EOPNOTSUPP to every context call
//!   (as one without RSS does); a create with a table of the wrong size or naming a queue
//!   past the RX queues → EINVAL; ids are allocated lowest-free from 1, below the driver's
//!   limit ([`NicState::rss_context_limit`]), and a create with all taken → EBUSY (the core's
//!   id allocator); reading or deleting an id that is not there → ENOENT; deleting a context
//!   a rule names → EBUSY (checked first); a `FLOW_RSS` rule with a non-zero queue offset or
//!   naming a context that is not there → EINVAL, before the driver's own checks; channels
//!   below the highest queue of any context's table → EINVAL (contexts count whether or not
//!   a rule uses them).
//!
//! Tests can inject a failure into the N-th call of an operation ([`ScriptedNic::fail_call`]),
//! read the journal of calls ([`ScriptedNic::journal`], [`ScriptedNic::changes`]) and compare
//! the whole state ([`ScriptedNic::state`]). Quirks make it break a contract on purpose
//! ([`Quirks`]). `ScriptedNic` is a cheap handle: clones share one NIC, so a test keeps one
//! clone while the code under test owns another.
//!
//! Compiled into the library so integration tests can use it; the tool itself never does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};

use super::guards::{describe_rule, describe_rule_to, equal_table, span_of};
use super::queues::QueueOwner;
use super::{
    Binding, ChannelsSet, FlowRule, FlowType, HdsConfig, NicOps, RssContextId, RssTable,
    RuleLocation,
};
use crate::error::{Error, NlError, Result};
use crate::netlink::ethtool::{Channels, TcpDataSplit};
use crate::netlink::netdev::{BindRxRequest, DevInfo, PagePoolInfo, QueueInfo, QueueType};
use crate::sys::ethtool_ioctl::DrvInfo;

macro_rules! ops {
    ($($(#[$doc:meta])* $op:ident => $call:expr, $change:literal;)*) => {
        /// The operations of [`NicOps`], for the journal and failure injection.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Op {
            $($(#[$doc])* $op,)*
        }

        impl Op {
            /// True for operations that change the NIC (sets, inserts, deletes, bind, unbind).
            pub fn is_change(self) -> bool {
                match self {
                    $(Op::$op => $change,)*
                }
            }

            /// How the real implementation reaches the kernel: `(family, op)` for netlink,
            /// `(ioctl command, "")` for `SIOCETHTOOL`.
            fn kernel_call(self) -> (&'static str, &'static str) {
                match self {
                    $(Op::$op => $call,)*
                }
            }
        }
    };
}

ops! {
    /// `hds_get` (ethtool rings-get).
    HdsGet => ("ethtool", "rings-get"), false;
    /// `hds_set` (ethtool rings-set).
    HdsSet => ("ethtool", "rings-set"), true;
    /// `channels_get`.
    ChannelsGet => ("ethtool", "channels-get"), false;
    /// `channels_set`.
    ChannelsSet => ("ethtool", "channels-set"), true;
    /// `rss_get` (`ETHTOOL_GRSSH`).
    RssGet => ("ETHTOOL_GRSSH", ""), false;
    /// `rss_set` (`ETHTOOL_SRSSH` with a table).
    RssSet => ("ETHTOOL_SRSSH", ""), true;
    /// `rss_reset` (`ETHTOOL_SRSSH` with `indir_size` 0: driver default).
    RssReset => ("ETHTOOL_SRSSH", ""), true;
    /// `rss_context_create` (`ETHTOOL_SRSSH` with `ETH_RXFH_CONTEXT_ALLOC`).
    RssContextCreate => ("ETHTOOL_SRSSH", ""), true;
    /// `rss_context_get` (`ETHTOOL_GRSSH` with `rss_context`).
    RssContextGet => ("ETHTOOL_GRSSH", ""), false;
    /// `rss_context_delete` (`ETHTOOL_SRSSH` with `rss_context`, sizes 0).
    RssContextDelete => ("ETHTOOL_SRSSH", ""), true;
    /// `rss_contexts` (ethtool netlink RSS_GET dump).
    RssContexts => ("ethtool", "rss-get"), false;
    /// `ntuple_get` (`ETHTOOL_GFEATURES`).
    NtupleGet => ("ETHTOOL_GFEATURES", ""), false;
    /// `ntuple_set` (`ETHTOOL_SFEATURES`).
    NtupleSet => ("ETHTOOL_SFEATURES", ""), true;
    /// `flow_rules` (`ETHTOOL_GRXCLSRLALL`).
    FlowRules => ("ETHTOOL_GRXCLSRLALL", ""), false;
    /// `flow_rule_insert` (`ETHTOOL_SRXCLSRLINS`).
    FlowRuleInsert => ("ETHTOOL_SRXCLSRLINS", ""), true;
    /// `flow_rule_insert_rss` (`ETHTOOL_SRXCLSRLINS` with `FLOW_RSS`).
    FlowRuleInsertRss => ("ETHTOOL_SRXCLSRLINS", ""), true;
    /// `flow_rule_delete` (`ETHTOOL_SRXCLSRLDEL`).
    FlowRuleDelete => ("ETHTOOL_SRXCLSRLDEL", ""), true;
    /// `queues` (netdev queue-get dump).
    Queues => ("netdev", "queue-get"), false;
    /// `bind_rx`.
    BindRx => ("netdev", "bind-rx"), true;
    /// A binding was dropped (its netlink socket closed).
    Unbind => ("netdev", "unbind"), true;
    /// `page_pools`.
    PagePools => ("netdev", "page-pool-get"), false;
    /// `dev_info`.
    DevInfo => ("netdev", "dev-get"), false;
    /// `drvinfo` (`ETHTOOL_GDRVINFO`).
    DrvInfo => ("ETHTOOL_GDRVINFO", ""), false;
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The operation.
    pub op: Op,
    /// Its arguments, compactly (e.g. `"enabled hds-thresh=0"`, `"equal 7"`, `"loc 3"`).
    pub args: String,
    /// The errno it failed with, `None` on success.
    pub errno: Option<i32>,
}

/// Header-split state of a driver that has ring parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedHds {
    /// Whether the driver reports and accepts tcp-data-split.
    pub split_supported: bool,
    /// The configured mode (what user space last set; UNKNOWN = driver's choice). bind-rx
    /// needs this to be ENABLED.
    pub configured: TcpDataSplit,
    /// What the driver does (and RINGS_GET reports) while `configured` is UNKNOWN.
    pub auto: TcpDataSplit,
    /// hds-thresh in bytes, `None` when the driver does not report it.
    pub thresh: Option<u32>,
    /// hds-thresh-max in bytes.
    pub thresh_max: u32,
}

/// The NIC's whole state; [`ScriptedNic::state`] returns a copy for equality checks.
/// `Default` is a NIC with no ring, channel, RSS or ntuple support and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicState {
    /// `None`: RINGS_GET/SET answer EOPNOTSUPP (veth).
    pub hds: Option<ScriptedHds>,
    /// `None`: CHANNELS_GET/SET answer EOPNOTSUPP (lo). RX queues = rx + combined.
    pub channels: Option<Channels>,
    /// The indirection table; `None`: GRSSH/SRSSH answer EOPNOTSUPP.
    pub rss: Option<Vec<u32>>,
    /// The table was written by user space (`IFF_RXFH_CONFIGURED`); `false` while it is the
    /// driver default (never written, or reset with `indir_size` 0).
    pub rss_configured: bool,
    /// The `rx-ntuple-filter` feature; `None`: even reading it answers EOPNOTSUPP.
    pub ntuple: Option<bool>,
    /// The feature can be read but not changed and there is no rule table (veth: GFEATURES
    /// works, SFEATURES reports the bit unchangeable, GRXCLSRLCNT answers EOPNOTSUPP).
    pub ntuple_fixed: bool,
    /// Installed ntuple rules by location (including other people's).
    pub rules: BTreeMap<RuleLocation, FlowRule>,
    /// The RSS context of each `FLOW_RSS` rule in `rules`, by location (its `queue` is the
    /// offset, 0).
    pub rule_contexts: BTreeMap<RuleLocation, RssContextId>,
    /// The driver's `rxfh_max_num_contexts`: context ids run `1..limit`; `None`: a driver
    /// without additional RSS contexts (no `create_rxfh_context`; every context call answers
    /// EOPNOTSUPP).
    pub rss_context_limit: Option<u32>,
    /// The additional RSS contexts: id → indirection table (the ethtool core's copy).
    pub rss_contexts: BTreeMap<RssContextId, Vec<u32>>,
    /// Rule table size (locations `0..size`).
    pub rule_table_size: u32,
    /// Queues owned by someone else (RX queue index → owner).
    pub foreign_owners: BTreeMap<u32, QueueOwner>,
    /// RX queues bound by live bindings from this NIC (queue → binding id).
    pub bound: BTreeMap<u32, u32>,
    /// Whether the driver has queue-management ops (bind-rx gets past the device check).
    pub devmem: bool,
    /// Whether the kernel knows bind-rx attribute `rx-page-size` (5).
    pub rx_page_size_known: bool,
    /// Whether the driver accepts an rx-page-size (else EOPNOTSUPP).
    pub rx_page_size_supported: bool,
    /// Whether the kernel knows the bind-rx autorelease attribute (unmerged series v7–v10;
    /// 6.18 and 7.3 do not: EINVAL "Unknown attribute type" at the attribute, measured here).
    pub autorelease_known: bool,
    /// Series kernels: the system-wide autorelease mode of the live RX bindings (set by the
    /// first, default 0); a bind asking for the other mode while any is live gets EBUSY
    /// "System already configured with autorelease=N" (net/core/devmem.c of the series).
    pub autorelease_mode: Option<bool>,
    /// What dev-get answers.
    pub dev: DevInfo,
    /// What `ETHTOOL_GDRVINFO` answers; `None`: EOPNOTSUPP (lo).
    pub drvinfo: Option<DrvInfo>,
    /// Page pools not tied to a binding.
    pub page_pools: Vec<PagePoolInfo>,
}

/// Ways to make the scripted NIC break a kernel contract (or behave oddly), on purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quirks {
    /// bind-rx accepts nests without id/type (binding no queues).
    pub accept_empty_queue_nests: bool,
    /// bind-rx accepts a device whose tcp-data-split is not configured ENABLED.
    pub accept_bind_hds_off: bool,
    /// channels-set accepts counts below a bound queue.
    pub accept_channel_shrink: bool,
    /// Rules with a source (5-tuple) are refused with EINVAL.
    pub no_5tuple_rules: bool,
    /// After an unbind, queue-get keeps showing the binding for this many queue-get calls
    /// (asynchronous provider teardown).
    pub unbind_linger_queries: u32,
    /// A rule insert reports this location instead of where the rule went (a driver that
    /// writes back a bogus `fs.location`).
    pub insert_reports: Option<RuleLocation>,
    /// A rule insert puts the rule at this location even when another rule is there
    /// (replacing it), and reports that location.
    pub insert_overwrites: Option<RuleLocation>,
    /// bind-rx answers binding id 0 (which the kernel never hands out).
    pub binding_id_zero: bool,
    /// The driver has no channels ops: channels-get and channels-set answer EOPNOTSUPP,
    /// while its RX rings (which RSS checks tables against) stay as `channels` says.
    pub no_channels_ops: bool,
}

#[derive(Debug)]
struct Inner {
    ifname: String,
    ifindex: u32,
    state: NicState,
    quirks: Quirks,
    journal: Vec<Call>,
    counts: BTreeMap<Op, u64>,
    inject: BTreeMap<(Op, u64), i32>,
    /// (op, call number) → (stop flag, signal number) to store after that call.
    signals: BTreeMap<(Op, u64), (&'static AtomicI32, i32)>,
    next_binding: u32,
    next_pool: u64,
    /// Queue → (binding id, queue-get calls left) for bindings released but still visible.
    lingering: BTreeMap<u32, (u32, u32)>,
}

impl Inner {
    fn rx_queues(&self) -> u32 {
        self.state.channels.as_ref().map_or(1, Channels::rx_queues)
    }

    fn tx_queues(&self) -> u32 {
        self.state.channels.as_ref().map_or(1, tx_queues)
    }

    fn target(&self) -> String {
        format!("{} (ifindex {})", self.ifname, self.ifindex)
    }

    /// The error `op` fails with, shaped as the real implementation's.
    fn error(&self, op: Op, errno: i32, msg: Option<&str>) -> Error {
        self.error_at(op, errno, msg, None)
    }

    /// EINVAL for a required attribute `attr` left out (in the nest at `nest`, a path such as
    /// `NETDEV_A_DMABUF_QUEUES[0]`), as the kernel's extack reports it.
    fn missing(&self, op: Op, attr: u32, nest: Option<&str>) -> Error {
        match self.error(op, libc::EINVAL, None) {
            Error::Netlink(mut e) => {
                e.missing_attr = Some(attr);
                e.missing_nest = nest.map(str::to_string);
                Error::Netlink(e)
            }
            other => other,
        }
    }

    /// [`Inner::error`] with the attribute the kernel's extack points at (the path the real
    /// implementation prints, e.g. `ETHTOOL_A_RINGS_HDS_THRESH`).
    fn error_at(&self, op: Op, errno: i32, msg: Option<&str>, bad_attr: Option<&str>) -> Error {
        match op.kernel_call() {
            (cmd, "") => Error::sys(
                format!("ioctl(SIOCETHTOOL, {cmd}) on {}", self.ifname),
                errno,
            ),
            (family, name) => Error::Netlink(Box::new(NlError {
                ext_msg: msg.map(str::to_string),
                bad_attr: bad_attr.map(str::to_string),
                ..NlError::refusal(family, name, self.target(), errno)
            })),
        }
    }

    /// The driver's part of a rule insert (`op` for errors): the ntuple feature on, the queue
    /// (for a direct rule) below the RX queues, addresses of the flow type's family, a free
    /// location; `ctx` records a `FLOW_RSS` rule's context.
    fn insert_rule(
        &mut self,
        op: Op,
        rule: &FlowRule,
        ctx: Option<RssContextId>,
    ) -> Result<RuleLocation> {
        if self.state.ntuple != Some(true) || self.state.ntuple_fixed {
            return Err(self.error(op, libc::EOPNOTSUPP, None));
        }
        let family_ok = |ip: &IpAddr| match rule.flow_type {
            FlowType::Tcp4 => ip.is_ipv4(),
            FlowType::Tcp6 => ip.is_ipv6(),
        };
        if (ctx.is_none() && rule.queue >= self.rx_queues())
            || !family_ok(&rule.dst.0)
            || rule.src.is_some_and(|(ip, _)| !family_ok(&ip))
            || (rule.src.is_some() && self.quirks.no_5tuple_rules)
        {
            return Err(self.error(op, libc::EINVAL, None));
        }
        let free = (0..self.state.rule_table_size).find(|l| !self.state.rules.contains_key(l));
        let Some(loc) = self.quirks.insert_overwrites.or(free) else {
            return Err(self.error(op, libc::ENOSPC, None));
        };
        self.state.rules.insert(loc, rule.clone());
        match ctx {
            Some(c) => self.state.rule_contexts.insert(loc, c),
            None => self.state.rule_contexts.remove(&loc),
        };
        Ok(self.quirks.insert_reports.unwrap_or(loc))
    }

    /// EOPNOTSUPP for `op` unless the driver has RSS and additional RSS contexts
    /// (net/ethtool/ioctl.c: no `get_rxfh`/`set_rxfh`, or a non-zero `rss_context` without
    /// `create_rxfh_context`).
    fn contexts_supported(&self, op: Op) -> Result<u32> {
        match (self.state.rss.as_ref(), self.state.rss_context_limit) {
            (Some(_), Some(limit)) => Ok(limit),
            _ => Err(self.error(op, libc::EOPNOTSUPP, None)),
        }
    }
}

/// The scripted NIC; see the module documentation.
#[derive(Debug, Clone)]
pub struct ScriptedNic {
    inner: Rc<RefCell<Inner>>,
    /// A copy of the (fixed) name, so `ifname()` can hand out a `&str`.
    ifname: Rc<str>,
}

/// A binding handed out by [`ScriptedNic::bind_rx`]; dropping it unbinds its queues.
#[derive(Debug)]
pub struct ScriptedBinding {
    id: u32,
    nic: Rc<RefCell<Inner>>,
}

impl Binding for ScriptedBinding {
    fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for ScriptedBinding {
    fn drop(&mut self) {
        // A binding outliving a borrow is impossible in single-threaded use; never panic.
        let Ok(mut inner) = self.nic.try_borrow_mut() else {
            return;
        };
        let queues: Vec<u32> = inner
            .state
            .bound
            .iter()
            .filter(|(_, id)| **id == self.id)
            .map(|(q, _)| *q)
            .collect();
        let linger = inner.quirks.unbind_linger_queries;
        for q in &queues {
            inner.state.bound.remove(q);
            if linger > 0 {
                inner.lingering.insert(*q, (self.id, linger));
            }
        }
        let id = self.id;
        inner.state.page_pools.retain(|p| p.dmabuf != Some(id));
        *inner.counts.entry(Op::Unbind).or_default() += 1;
        inner.journal.push(Call {
            op: Op::Unbind,
            args: format!("id {id}"),
            errno: None,
        });
    }
}

/// TX queues of a channel configuration: tx + combined.
fn tx_queues(c: &Channels) -> u32 {
    c.tx_count
        .unwrap_or(0)
        .saturating_add(c.combined_count.unwrap_or(0))
}

/// The driver-default indirection table: `len` entries, entry `i` = `i % rx_queues`.
fn default_table(len: usize, rx_queues: u32) -> Vec<u32> {
    equal_table(len, rx_queues).indir
}

/// A table as `ethtool -X` would name it: `equal 7`, `start 4 equal 4`, or the entries.
fn rss_args(t: &[u32]) -> String {
    match span_of(&RssTable { indir: t.to_vec() }) {
        Some(s) if s.start == 0 => format!("equal {}", s.count),
        Some(s) => format!("start {} equal {}", s.start, s.count),
        None => format!("{t:?}"),
    }
}

fn split_name(s: TcpDataSplit) -> &'static str {
    match s {
        TcpDataSplit::Unknown => "unknown",
        TcpDataSplit::Disabled => "disabled",
        TcpDataSplit::Enabled => "enabled",
    }
}

impl ScriptedNic {
    /// A NIC from an explicit state.
    pub fn new(ifname: &str, ifindex: u32, state: NicState) -> ScriptedNic {
        ScriptedNic {
            ifname: Rc::from(ifname),
            inner: Rc::new(RefCell::new(Inner {
                ifname: ifname.into(),
                ifindex,
                state,
                quirks: Quirks::default(),
                journal: Vec::new(),
                counts: BTreeMap::new(),
                inject: BTreeMap::new(),
                signals: BTreeMap::new(),
                next_binding: 1,
                next_pool: 100,
                lingering: BTreeMap::new(),
            })),
        }
    }

    /// A devmem-capable NIC (ifindex 4) with `rx_queues` combined channels (max 16):
    /// header split supported, configured "unknown" with the driver defaulting to off,
    /// hds-thresh 128 (max 1024); a 128-entry RSS table spread over all queues; additional RSS
    /// contexts 1..7 (a limit of 8, as the software devmem NIC), none created; ntuple off and
    /// no rules (table of 16); no owners; rx-page-size unknown to the kernel; one page pool
    /// per queue. [`with_foreign_rule`](Self::with_foreign_rule) adds someone else's
    /// rule.
    pub fn good(ifname: &str, rx_queues: u32) -> ScriptedNic {
        let state = NicState {
            hds: Some(ScriptedHds {
                split_supported: true,
                configured: TcpDataSplit::Unknown,
                auto: TcpDataSplit::Disabled,
                thresh: Some(128),
                thresh_max: 1024,
            }),
            channels: Some(Channels {
                combined_max: Some(16),
                combined_count: Some(rx_queues),
                ..Default::default()
            }),
            rss: Some(default_table(128, rx_queues)),
            rss_context_limit: Some(8),
            ntuple: Some(false),
            rule_table_size: 16,
            devmem: true,
            dev: DevInfo {
                ifindex: 4,
                xdp_features: 0x2b,
                xdp_zc_max_segs: Some(1),
                ..Default::default()
            },
            drvinfo: Some(DrvInfo {
                driver: "scripted".into(),
                version: "1.0".into(),
                fw_version: "2.5".into(),
                bus_info: "0000:03:00.0".into(),
            }),
            page_pools: (0..rx_queues)
                .map(|q| PagePoolInfo {
                    id: u64::from(q) + 1,
                    ifindex: Some(4),
                    napi_id: Some(u64::from(q) + 100),
                    inflight: Some(0),
                    inflight_mem: Some(0),
                    detach_time: None,
                    dmabuf: None,
                    io_uring: false,
                })
                .collect(),
            ..Default::default()
        };
        ScriptedNic::new(ifname, 4, state)
    }

    /// Turns ntuple on and installs someone else's rule (tcp6 port 22 → queue 0) at
    /// location `loc`, as a NIC in use would have.
    pub fn with_foreign_rule(self, loc: RuleLocation) -> ScriptedNic {
        self.edit(|s| {
            s.ntuple = Some(true);
            s.rules.insert(
                loc,
                FlowRule {
                    flow_type: FlowType::Tcp6,
                    src: None,
                    dst: (
                        IpAddr::from([
                            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99,
                        ]),
                        22,
                    ),
                    queue: 0,
                },
            );
        });
        self
    }

    /// A veth device as 6.18 answers for it (`docs/kernel-interface.md#ethtool-netlink` and
    /// `#siocethtool-ioctls`): no ring parameters
    /// (EOPNOTSUPP), rx/tx channels 1/1 of max 2, no RSS, the ntuple feature readable (off)
    /// but not changeable and no rule table, no queue management.
    pub fn veth(ifname: &str) -> ScriptedNic {
        let state = NicState {
            hds: None,
            channels: Some(Channels {
                rx_max: Some(2),
                tx_max: Some(2),
                rx_count: Some(1),
                tx_count: Some(1),
                ..Default::default()
            }),
            ntuple: Some(false),
            ntuple_fixed: true,
            dev: DevInfo {
                ifindex: 2,
                xdp_features: 0x23,
                xdp_rx_metadata_features: 7,
                ..Default::default()
            },
            // As 6.18's veth answers: no firmware, no bus.
            drvinfo: Some(DrvInfo {
                driver: "veth".into(),
                version: "1.0".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        ScriptedNic::new(ifname, 2, state)
    }

    /// A copy of the whole state (without journal, counters or quirks).
    pub fn state(&self) -> NicState {
        self.inner.borrow().state.clone()
    }

    /// Changes the state directly (test setup; not journaled).
    pub fn edit(&self, f: impl FnOnce(&mut NicState)) {
        f(&mut self.inner.borrow_mut().state);
    }

    /// Replaces the quirks.
    pub fn set_quirks(&self, q: Quirks) {
        self.inner.borrow_mut().quirks = q;
    }

    /// Makes the `n`-th call (1-based, counted since the NIC was made) of `op` fail with
    /// `errno`, before it changes anything.
    pub fn fail_call(&self, op: Op, n: u64, errno: i32) {
        self.inner.borrow_mut().inject.insert((op, n), errno);
    }

    /// After the `n`-th call (1-based) of `op`, whatever its result, stores `sig` in `flag`:
    /// what the SIGINT/SIGTERM/SIGHUP handler does when a signal arrives during that call.
    pub fn signal_after(&self, op: Op, n: u64, flag: &'static AtomicI32, sig: i32) {
        self.inner.borrow_mut().signals.insert((op, n), (flag, sig));
    }

    /// Every call so far, in order.
    pub fn journal(&self) -> Vec<Call> {
        self.inner.borrow().journal.clone()
    }

    /// The calls that change the NIC (see [`Op::is_change`]), including failed ones.
    pub fn changes(&self) -> Vec<Call> {
        self.journal()
            .into_iter()
            .filter(|c| c.op.is_change())
            .collect()
    }

    /// Forgets the journal (counters for [`fail_call`](Self::fail_call) keep running).
    pub fn clear_journal(&self) {
        self.inner.borrow_mut().journal.clear();
    }

    /// How many times `op` was called.
    pub fn calls(&self, op: Op) -> u64 {
        self.inner.borrow().counts.get(&op).copied().unwrap_or(0)
    }

    /// Journals `op`, applies failure injection, then runs `f` and records its errno.
    fn call<R>(&self, op: Op, args: String, f: impl FnOnce(&mut Inner) -> Result<R>) -> Result<R> {
        let mut inner = self
            .inner
            .try_borrow_mut()
            .map_err(|_| Error::Failure("scripted NIC re-entered while borrowed".into()))?;
        let n = {
            let c = inner.counts.entry(op).or_default();
            *c += 1;
            *c
        };
        inner.journal.push(Call {
            op,
            args,
            errno: None,
        });
        let r = match inner.inject.get(&(op, n)).copied() {
            Some(errno) => Err(inner.error(op, errno, Some("injected failure"))),
            None => f(&mut inner),
        };
        if let Err(e) = &r {
            let errno = e.errno().unwrap_or(-1);
            if let Some(last) = inner.journal.last_mut() {
                last.errno = Some(errno);
            }
        }
        if let Some((flag, sig)) = inner.signals.get(&(op, n)) {
            flag.store(*sig, Ordering::SeqCst);
        }
        r
    }
}

impl NicOps for ScriptedNic {
    fn ifname(&self) -> &str {
        &self.ifname
    }

    fn ifindex(&self) -> u32 {
        self.inner.borrow().ifindex
    }

    fn hds_get(&mut self) -> Result<HdsConfig> {
        self.call(Op::HdsGet, String::new(), |st| {
            let Some(h) = &st.state.hds else {
                return Err(st.error(Op::HdsGet, libc::EOPNOTSUPP, None));
            };
            let effective = if h.configured == TcpDataSplit::Unknown {
                h.auto
            } else {
                h.configured
            };
            Ok(HdsConfig {
                tcp_data_split: h.split_supported.then_some(effective),
                hds_thresh: h.thresh,
                hds_thresh_max: h.thresh.map(|_| h.thresh_max),
            })
        })
    }

    fn hds_set(&mut self, split: TcpDataSplit, hds_thresh: Option<u32>) -> Result<()> {
        let thresh = hds_thresh.map(|t| format!(" hds-thresh={t}"));
        let args = format!("{}{}", split_name(split), thresh.unwrap_or_default());
        self.call(Op::HdsSet, args, |st| {
            // A provider being torn down (still visible in queue-get) counts as bound.
            let bound = !st.state.bound.is_empty() || !st.lingering.is_empty();
            let err = |st: &Inner, errno, m: &str| st.error(Op::HdsSet, errno, Some(m));
            let Some(h) = &st.state.hds else {
                return Err(st.error(Op::HdsSet, libc::EOPNOTSUPP, None));
            };
            // net/ethtool/rings.c's order: attributes the driver does not support, then the
            // memory-provider rules, then the limits.
            let at = |st: &Inner, errno, m: &str, attr: &str| {
                st.error_at(Op::HdsSet, errno, Some(m), Some(attr))
            };
            if !h.split_supported {
                return Err(at(
                    st,
                    libc::EOPNOTSUPP,
                    "setting TCP data split is not supported",
                    "ETHTOOL_A_RINGS_TCP_DATA_SPLIT",
                ));
            }
            if hds_thresh.is_some() && h.thresh.is_none() {
                return Err(at(
                    st,
                    libc::EOPNOTSUPP,
                    "setting hds-thresh is not supported",
                    "ETHTOOL_A_RINGS_HDS_THRESH",
                ));
            }
            let thresh = hds_thresh.or(h.thresh).unwrap_or(0);
            if bound && split != TcpDataSplit::Enabled {
                return Err(err(
                    st,
                    libc::EINVAL,
                    "can't disable tcp-data-split while device has memory provider enabled",
                ));
            }
            if bound && thresh != 0 {
                return Err(err(
                    st,
                    libc::EINVAL,
                    "can't set non-zero hds_thresh while device is memory provider enabled",
                ));
            }
            if thresh > h.thresh_max {
                return Err(at(
                    st,
                    libc::EINVAL,
                    "requested ring size exceeds maximum",
                    "ETHTOOL_A_RINGS_HDS_THRESH",
                ));
            }
            if let Some(h) = st.state.hds.as_mut() {
                h.configured = split;
                if hds_thresh.is_some() {
                    h.thresh = hds_thresh;
                }
            }
            Ok(())
        })
    }

    fn channels_get(&mut self) -> Result<Channels> {
        self.call(Op::ChannelsGet, String::new(), |st| {
            let c = st
                .state
                .channels
                .clone()
                .filter(|_| !st.quirks.no_channels_ops);
            c.ok_or_else(|| st.error(Op::ChannelsGet, libc::EOPNOTSUPP, None))
        })
    }

    fn channels_set(&mut self, set: ChannelsSet) -> Result<()> {
        let f = |n: &str, v: Option<u32>| v.map(|v| format!("{n}={v}"));
        let args: Vec<String> = [
            f("rx", set.rx),
            f("tx", set.tx),
            f("combined", set.combined),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.call(Op::ChannelsSet, args.join(" "), |st| {
            let err = |st: &Inner, m: String| st.error(Op::ChannelsSet, libc::EINVAL, Some(&m));
            if st.quirks.no_channels_ops {
                return Err(st.error(Op::ChannelsSet, libc::EOPNOTSUPP, None));
            }
            let Some(old) = st.state.channels.clone() else {
                return Err(st.error(Op::ChannelsSet, libc::EOPNOTSUPP, None));
            };
            let new = Channels {
                rx_count: set.rx.or(old.rx_count),
                tx_count: set.tx.or(old.tx_count),
                combined_count: set.combined.or(old.combined_count),
                ..old.clone()
            };
            // net/ethtool/channels.c: nothing changed → nothing checked.
            if new == old {
                return Ok(());
            }
            let at = |st: &Inner, m: &str, attr: &str| {
                st.error_at(Op::ChannelsSet, libc::EINVAL, Some(m), Some(attr))
            };
            for (v, max, attr) in [
                (set.rx, old.rx_max, "ETHTOOL_A_CHANNELS_RX_COUNT"),
                (set.tx, old.tx_max, "ETHTOOL_A_CHANNELS_TX_COUNT"),
                (set.combined, old.combined_max, "ETHTOOL_A_CHANNELS_COMBINED_COUNT"),
            ] {
                if v.is_some_and(|v| v > max.unwrap_or(0)) {
                    return Err(at(st, "requested channel count exceeds maximum", attr));
                }
            }
            let rxq = new.rx_queues();
            let txq = tx_queues(&new);
            if rxq == 0 || txq == 0 {
                let attr = if set.combined.is_some() {
                    "ETHTOOL_A_CHANNELS_COMBINED_COUNT"
                } else if rxq == 0 {
                    "ETHTOOL_A_CHANNELS_RX_COUNT"
                } else {
                    "ETHTOOL_A_CHANNELS_TX_COUNT"
                };
                return Err(at(
                    st,
                    "requested channel counts would result in no RX or TX channel being configured",
                    attr,
                ));
            }
            // net/ethtool/common.c ethtool_check_max_channel(): the RSS table (when user
            // configured; the number is the highest queue it uses), the ntuple rules, then
            // the memory providers (the number is the highest bound queue + 1, and equal
            // counts are refused too).
            // The highest queue of a user-configured default table and of every additional
            // context's table (net/ethtool/common.c counts contexts whether or not a rule uses
            // them).
            let configured = st.state.rss.as_ref().filter(|_| st.state.rss_configured);
            let tables = configured.into_iter().chain(st.state.rss_contexts.values());
            if let Some(m) = tables.flat_map(|t| t.iter().copied()).max().filter(|&m| rxq <= m) {
                return Err(err(
                    st,
                    format!(
                        "requested channel counts are too low for existing indirection table ({m})"
                    ),
                ));
            }
            // FLOW_RSS rules carry an offset, not a queue: their contexts were checked above.
            let direct = |(loc, _): &(&RuleLocation, &FlowRule)| {
                !st.state.rule_contexts.contains_key(*loc)
            };
            if st.state.rules.iter().filter(direct).any(|(_, r)| r.queue >= rxq) {
                return Err(err(
                    st,
                    "requested channel counts are too low for existing ntuple filter settings"
                        .into(),
                ));
            }
            let providers = st.state.foreign_owners.iter().filter_map(|(q, o)| match o {
                QueueOwner::Xsk => None,
                QueueOwner::Dmabuf(_) | QueueOwner::IoUring => Some(q),
            });
            let provider_max = st
                .state
                .bound
                .keys()
                .chain(providers)
                .chain(st.lingering.keys())
                .copied()
                .max();
            let shrink_ok = st.quirks.accept_channel_shrink;
            if let Some(q) = provider_max.filter(|q| rxq <= q + 1 && !shrink_ok) {
                return Err(err(
                    st,
                    format!(
                        "requested channel counts are too low for existing memory provider setting ({})",
                        q + 1
                    ),
                ));
            }
            // Then queues that would go away must not be busy (netdev_queue_busy()).
            if st
                .state
                .foreign_owners
                .iter()
                .any(|(q, o)| *o == QueueOwner::Xsk && *q >= rxq)
            {
                return Err(err(st, "Device queue in use by AF_XDP".into()));
            }
            st.state.channels = Some(new);
            if !st.state.rss_configured {
                // The driver owns a default table: it spreads it over the new RX queues.
                if let Some(t) = st.state.rss.as_mut() {
                    *t = default_table(t.len(), rxq);
                }
            }
            Ok(())
        })
    }

    fn rss_get(&mut self) -> Result<RssTable> {
        self.call(Op::RssGet, String::new(), |st| {
            let table = st.state.rss.clone().map(|indir| RssTable { indir });
            table.ok_or_else(|| st.error(Op::RssGet, libc::EOPNOTSUPP, None))
        })
    }

    fn rss_set(&mut self, table: &RssTable) -> Result<()> {
        self.call(Op::RssSet, rss_args(&table.indir), |st| {
            let rxq = st.rx_queues();
            let Some(cur) = st.state.rss.as_ref() else {
                return Err(st.error(Op::RssSet, libc::EOPNOTSUPP, None));
            };
            if cur.len() != table.indir.len() || table.indir.iter().any(|&q| q >= rxq) {
                return Err(st.error(Op::RssSet, libc::EINVAL, None));
            }
            st.state.rss = Some(table.indir.clone());
            st.state.rss_configured = true;
            Ok(())
        })
    }

    fn rss_reset(&mut self) -> Result<()> {
        self.call(Op::RssReset, "default".into(), |st| {
            let rxq = st.rx_queues();
            let Some(cur) = st.state.rss.as_ref() else {
                return Err(st.error(Op::RssReset, libc::EOPNOTSUPP, None));
            };
            st.state.rss = Some(default_table(cur.len(), rxq));
            st.state.rss_configured = false;
            Ok(())
        })
    }

    fn rss_context_create(&mut self, table: &RssTable) -> Result<RssContextId> {
        let op = Op::RssContextCreate;
        self.call(op, format!("new {}", rss_args(&table.indir)), |st| {
            let limit = st.contexts_supported(op)?;
            let rxq = st.rx_queues();
            let len = st.state.rss.as_ref().map_or(0, Vec::len);
            if table.indir.len() != len || table.indir.iter().any(|&q| q >= rxq) {
                return Err(st.error(op, libc::EINVAL, None));
            }
            let Some(id) = (1..limit).find(|id| !st.state.rss_contexts.contains_key(id)) else {
                return Err(st.error(op, libc::EBUSY, None));
            };
            st.state.rss_contexts.insert(id, table.indir.clone());
            Ok(id)
        })
    }

    fn rss_context_get(&mut self, id: RssContextId) -> Result<RssTable> {
        let op = Op::RssContextGet;
        self.call(op, format!("context {id}"), |st| {
            if id == 0 {
                let table = st.state.rss.clone().map(|indir| RssTable { indir });
                return table.ok_or_else(|| st.error(op, libc::EOPNOTSUPP, None));
            }
            st.contexts_supported(op)?;
            let table = st.state.rss_contexts.get(&id).cloned();
            let table = table.map(|indir| RssTable { indir });
            table.ok_or_else(|| st.error(op, libc::ENOENT, None))
        })
    }

    fn rss_context_delete(&mut self, id: RssContextId) -> Result<()> {
        let op = Op::RssContextDelete;
        self.call(op, format!("context {id}"), |st| {
            if id == 0 || id == u32::MAX {
                // Never sent: the real implementation refuses before the ioctl.
                return Err(Error::Failure(format!(
                    "RSS context {id:#x} cannot be deleted (not an additional context)"
                )));
            }
            st.contexts_supported(op)?;
            if st.state.rule_contexts.values().any(|&c| c == id) {
                return Err(st.error(op, libc::EBUSY, None));
            }
            if st.state.rss_contexts.remove(&id).is_none() {
                return Err(st.error(op, libc::ENOENT, None));
            }
            Ok(())
        })
    }

    fn rss_contexts(&mut self) -> Result<Vec<RssContextId>> {
        self.call(Op::RssContexts, String::new(), |st| {
            // The dump skips a device without RSS and lists context ids ascending.
            Ok(st.state.rss_contexts.keys().copied().collect())
        })
    }

    fn ntuple_get(&mut self) -> Result<bool> {
        self.call(Op::NtupleGet, String::new(), |st| {
            st.state
                .ntuple
                .ok_or_else(|| st.error(Op::NtupleGet, libc::EOPNOTSUPP, None))
        })
    }

    fn ntuple_set(&mut self, on: bool) -> Result<()> {
        self.call(Op::NtupleSet, if on { "on" } else { "off" }.into(), |st| {
            if st.state.ntuple.is_none() || st.state.ntuple_fixed {
                return Err(st.error(Op::NtupleSet, libc::EOPNOTSUPP, None));
            }
            st.state.ntuple = Some(on);
            if !on {
                // Drivers flush their rule table when ntuple goes off.
                st.state.rules.clear();
                st.state.rule_contexts.clear();
            }
            Ok(())
        })
    }

    fn flow_rules(&mut self) -> Result<(Vec<RuleLocation>, u32)> {
        self.call(Op::FlowRules, String::new(), |st| {
            if st.state.ntuple.is_none() || st.state.ntuple_fixed {
                return Err(st.error(Op::FlowRules, libc::EOPNOTSUPP, None));
            }
            Ok((
                st.state.rules.keys().copied().collect(),
                st.state.rule_table_size,
            ))
        })
    }

    fn flow_rule_insert(&mut self, rule: &FlowRule) -> Result<RuleLocation> {
        self.call(Op::FlowRuleInsert, describe_rule(rule), |st| {
            st.insert_rule(Op::FlowRuleInsert, rule, None)
        })
    }

    fn flow_rule_insert_rss(&mut self, rule: &FlowRule, ctx: RssContextId) -> Result<RuleLocation> {
        let op = Op::FlowRuleInsertRss;
        self.call(op, describe_rule_to(rule, Some(ctx)), |st| {
            // net/ethtool/ioctl.c ethtool_set_rxnfc(): no set_rxnfc at all, then the core's
            // FLOW_RSS checks (offset, context), then the driver.
            if st.state.ntuple.is_none() || st.state.ntuple_fixed {
                return Err(st.error(op, libc::EOPNOTSUPP, None));
            }
            if rule.queue != 0 || !st.state.rss_contexts.contains_key(&ctx) {
                return Err(st.error(op, libc::EINVAL, None));
            }
            st.insert_rule(op, rule, Some(ctx))
        })
    }

    fn flow_rule_delete(&mut self, loc: RuleLocation) -> Result<()> {
        self.call(Op::FlowRuleDelete, format!("loc {loc}"), |st| {
            if st.state.ntuple.is_none() || st.state.ntuple_fixed {
                return Err(st.error(Op::FlowRuleDelete, libc::EOPNOTSUPP, None));
            }
            if st.state.rules.remove(&loc).is_none() {
                return Err(st.error(Op::FlowRuleDelete, libc::ENOENT, None));
            }
            st.state.rule_contexts.remove(&loc);
            Ok(())
        })
    }

    fn queues(&mut self) -> Result<Vec<QueueInfo>> {
        self.call(Op::Queues, String::new(), |st| {
            let ifindex = st.ifindex;
            let queue = |id: u32, queue_type| QueueInfo {
                id,
                queue_type,
                ifindex,
                napi_id: Some(100 + id),
                dmabuf: None,
                io_uring: false,
                xsk: false,
            };
            let mut v = Vec::new();
            let mut lingering = std::mem::take(&mut st.lingering);
            for q in 0..st.rx_queues() {
                let mut info = queue(q, QueueType::Rx);
                info.dmabuf = st.state.bound.get(&q).copied();
                match st.state.foreign_owners.get(&q) {
                    Some(QueueOwner::Dmabuf(id)) => info.dmabuf = Some(*id),
                    Some(QueueOwner::IoUring) => info.io_uring = true,
                    Some(QueueOwner::Xsk) => info.xsk = true,
                    None => {}
                }
                if let Some((id, left)) = lingering.get_mut(&q) {
                    info.dmabuf = info.dmabuf.or(Some(*id));
                    *left -= 1;
                }
                v.push(info);
            }
            lingering.retain(|_, (_, left)| *left > 0);
            st.lingering = lingering;
            v.extend((0..st.tx_queues()).map(|q| queue(q, QueueType::Tx)));
            Ok(v)
        })
    }

    fn bind_rx(&mut self, req: &BindRxRequest) -> Result<Box<dyn Binding>> {
        let rc = self.inner.clone();
        let args = req.target();
        self.call(Op::BindRx, args, move |st| {
            let err = |st: &Inner, errno, m: Option<&str>| st.error(Op::BindRx, errno, m);
            let at = |st: &Inner, errno, m: Option<&str>, attr: &str| {
                st.error_at(Op::BindRx, errno, m, Some(attr))
            };
            // net/core/netdev-genl.c netdev_nl_bind_rx_doit()'s order: the policy, required
            // attributes, rx-page-size, the device, each queue nest, the dma-buf, then per
            // queue the memory-provider rules (net/core/netdev_rx_queue.c).
            if req.rx_page_size.is_some() && !st.state.rx_page_size_known {
                return Err(err(st, libc::EINVAL, Some("Unknown attribute type")));
            }
            if req.autorelease.is_some() && !st.state.autorelease_known {
                return Err(at(
                    st,
                    libc::EINVAL,
                    Some("Unknown attribute type"),
                    "NETDEV_A_DMABUF_AUTORELEASE",
                ));
            }
            let Some(fd) = req.fd else {
                return Err(st.missing(Op::BindRx, 3, None));
            };
            if req.queues.is_empty() {
                return Err(st.missing(Op::BindRx, 2, None));
            }
            if req.rx_page_size.is_some_and(|size| !size.is_power_of_two()) {
                return Err(at(
                    st,
                    libc::EINVAL,
                    Some("rx-page-size must be a power of 2"),
                    "NETDEV_A_DMABUF_RX_PAGE_SIZE",
                ));
            }
            if !st.state.devmem {
                return Err(at(st, libc::EOPNOTSUPP, None, "NETDEV_A_DMABUF_IFINDEX"));
            }
            let mut queues = Vec::new();
            for (i, nest) in req.queues.iter().enumerate() {
                let path = format!("NETDEV_A_DMABUF_QUEUES[{i}]");
                match (nest.id, nest.queue_type) {
                    (None, _) | (_, None) if st.quirks.accept_empty_queue_nests => {}
                    (None, _) => return Err(st.missing(Op::BindRx, 1, Some(&path))),
                    (_, None) => return Err(st.missing(Op::BindRx, 3, Some(&path))),
                    (Some(_), Some(t)) if t != 0 => {
                        let attr = format!("{path}.NETDEV_A_QUEUE_TYPE");
                        return Err(at(st, libc::EINVAL, None, &attr));
                    }
                    (Some(id), Some(_)) => {
                        if id >= st.rx_queues() {
                            let attr = format!("{path}.NETDEV_A_QUEUE_ID");
                            return Err(at(st, libc::EINVAL, None, &attr));
                        }
                        queues.push(id);
                    }
                }
            }
            if fd == u32::MAX {
                return Err(err(st, libc::EBADF, None));
            }
            let hds_enabled = st
                .state
                .hds
                .as_ref()
                .is_some_and(|h| h.configured == TcpDataSplit::Enabled);
            if !hds_enabled && !st.quirks.accept_bind_hds_off {
                return Err(err(st, libc::EINVAL, Some("tcp-data-split is disabled")));
            }
            if st
                .state
                .hds
                .as_ref()
                .and_then(|h| h.thresh)
                .is_some_and(|t| t != 0)
                && !st.quirks.accept_bind_hds_off
            {
                return Err(err(st, libc::EINVAL, Some("hds-thresh is not zero")));
            }
            if req.rx_page_size.is_some() && !st.state.rx_page_size_supported && !queues.is_empty()
            {
                return Err(err(
                    st,
                    libc::EOPNOTSUPP,
                    Some("device does not support: rx_page_size"),
                ));
            }
            for q in &queues {
                let owner = st
                    .state
                    .foreign_owners
                    .get(q)
                    .copied()
                    .or_else(|| st.state.bound.get(q).map(|id| QueueOwner::Dmabuf(*id)))
                    .or_else(|| st.lingering.get(q).map(|(id, _)| QueueOwner::Dmabuf(*id)));
                match owner {
                    Some(QueueOwner::Xsk) => {
                        return Err(err(
                            st,
                            libc::EBUSY,
                            Some("designated queue already in use by AF_XDP"),
                        ))
                    }
                    Some(_) => {
                        return Err(err(
                            st,
                            libc::EEXIST,
                            Some("designated queue already memory provider bound"),
                        ))
                    }
                    None => {}
                }
            }
            if st.state.autorelease_known {
                let want = req.autorelease.is_some_and(|(_, on)| on);
                let live = !st.state.bound.is_empty() || !st.lingering.is_empty();
                match st.state.autorelease_mode {
                    Some(mode) if live && mode != want => {
                        let m = format!(
                            "System already configured with autorelease={}",
                            u8::from(mode)
                        );
                        return Err(err(st, libc::EBUSY, Some(&m)));
                    }
                    _ => st.state.autorelease_mode = Some(want),
                }
            }
            let id = if st.quirks.binding_id_zero {
                0
            } else {
                st.next_binding += 1;
                st.next_binding - 1
            };
            for q in &queues {
                st.state.bound.insert(*q, id);
                let pool = st.next_pool;
                st.next_pool += 1;
                st.state.page_pools.push(PagePoolInfo {
                    id: pool,
                    ifindex: Some(st.ifindex),
                    napi_id: Some(u64::from(100 + q)),
                    inflight: Some(0),
                    inflight_mem: Some(0),
                    detach_time: None,
                    dmabuf: Some(id),
                    io_uring: false,
                });
            }
            Ok(Box::new(ScriptedBinding { id, nic: rc }) as Box<dyn Binding>)
        })
    }

    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>> {
        self.call(Op::PagePools, String::new(), |st| {
            Ok(st.state.page_pools.clone())
        })
    }

    fn dev_info(&mut self) -> Result<DevInfo> {
        self.call(Op::DevInfo, String::new(), |st| Ok(st.state.dev.clone()))
    }

    fn drvinfo(&mut self) -> Result<DrvInfo> {
        self.call(Op::DrvInfo, String::new(), |st| match &st.state.drvinfo {
            Some(d) => Ok(d.clone()),
            None => Err(st.error(Op::DrvInfo, libc::EOPNOTSUPP, None)),
        })
    }
}
