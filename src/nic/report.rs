//! The capability report (`--report -f IF`, and printed by probe mode): what the device and
//! host offer for devmem, read-only, with every "no" saying why a bind would fail.
//!
//! Device facts come through [`NicOps`] (the driver's drvinfo, dev-get, channels, rings, RSS,
//! ntuple, queue-get, page-pool-get, and a bind-rx with an invalid dma-buf fd that can only
//! fail: it tells whether the driver gets past the kernel's queue-management check). Host
//! facts ([`HostCaps`]) come from the kernel release, the dma-buf sources (/dev/udmabuf and
//! its size limit, the heaps in /dev/dma_heap), the hugepage pool, the kernel's bind-rx policy
//! (does it know `rx-page-size`?) and a throwaway socket (`SO_DEVMEM_AUTORELEASE`).

use std::fmt::Write as _;
use std::path::Path;

use super::guards::{describe_hds, describe_rss, equal_spread_of, split_cli};
use super::queues::{describe_owners, no_channel_counts, owned_rx, owners, QueueOwner};
use super::snapshot::Fact;
use super::{HdsConfig, NicOps, RssTable, RuleLocation};
use crate::caps::{classify, Missing, Op};
use crate::error::{errno_display, Error};
use crate::memory::dma_heap;
use crate::netlink::ctrl::PolicyAttr;
use crate::netlink::ethtool::{Channels, TcpDataSplit};
use crate::netlink::netdev::policy::{
    autorelease_attr, bind_rx_policy, bind_tx_policy, has_rx_page_size,
};
use crate::netlink::netdev::{
    BindRxRequest, DevInfo, PagePoolInfo, QueueInfo, QueueNest, QueueType,
};
use crate::summary::report::{
    CapabilityFigure, ChannelsFigure, DeviceFigure, DriverFigure, FactFigure, HostFigure,
    HugepagesFigure, OwnerFigure, PagePoolFigure, QueueFigure, ReportBody, RingsFigure, RssFigure,
    RulesFigure, UdmabufFigure,
};
use crate::sys::ethtool_ioctl::DrvInfo;
use crate::udmabuf::{self, HugepageStatus};

/// Why a device without header split cannot do devmem. The kernel checks the device
/// (queue-management ops, EOPNOTSUPP) before header split, so the EINVAL below is what a
/// devmem-capable device answers.
const HDS_NEEDED: &str = "bind-rx would need header split (the kernel refuses with EINVAL \
                          \"tcp-data-split is disabled\" on a device that supports devmem)";

/// What the report says when queue-get lists no queues (a down interface has none).
const NO_QUEUES_VISIBLE: &str = "no queues visible (interface down?)";

/// `enum netdev_xdp_act` bit names, in bit order.
const XDP_ACT_NAMES: [&str; 7] = [
    "basic",
    "redirect",
    "ndo-xmit",
    "xsk-zerocopy",
    "hw-offload",
    "rx-sg",
    "ndo-xmit-sg",
];

/// `"basic,redirect,rx-sg"` for an `xdp-features` bitmask (unknown bits as `bit N`).
pub(crate) fn xdp_feature_names(bits: u64) -> String {
    let names: Vec<String> = (0..64)
        .filter(|b| bits & (1u64 << b) != 0)
        .map(|b| {
            XDP_ACT_NAMES
                .get(b)
                .map_or_else(|| format!("bit {b}"), |s| (*s).to_string())
        })
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(",")
    }
}

/// Facts about the host (not the device) that decide whether a devmem run can work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCaps {
    /// The running kernel's release (`uname -r`).
    pub kernel_release: Fact<String>,
    /// `/dev/udmabuf` opens: `Known(size_limit_mb)` (the module's limit in MiB, when
    /// readable); `Unsupported(reason)` when it is missing or not accessible.
    pub udmabuf: Fact<Option<u64>>,
    /// The dma-buf heaps in `/dev/dma_heap`, by name (sorted): `Unsupported(reason)` when
    /// the directory is missing (a kernel without `CONFIG_DMABUF_HEAPS`).
    pub dma_heaps: Fact<Vec<String>>,
    /// The 2 MiB hugepage pool.
    pub hugepages: Fact<HugepageStatus>,
    /// 2 MiB hugepages a run with the requested `-b` needs (0 without `-b` above the page
    /// size).
    pub hugepages_needed: u64,
    /// `-b` as requested, for messages.
    pub rx_page_size: Option<u32>,
    /// The kernel's bind-rx policy (CTRL_CMD_GETPOLICY): attribute numbers and types. The
    /// rx-page-size and autorelease (`-a`; unmerged series v7–v10) lines read it with the
    /// rules the runs use ([`has_rx_page_size`], [`autorelease_attr`]: told apart by type).
    pub bind_rx_policy: Fact<Vec<PolicyAttr>>,
    /// `SO_DEVMEM_AUTORELEASE`: `Known(true)` when the kernel accepts it, `Unsupported` with
    /// the kernel's answer otherwise.
    pub autorelease: Fact<bool>,
    /// What a devmem server with this `--dmabuf-size` and `-b` does with its receive buffer
    /// ([`crate::rcvbuf`], for a 1500-byte MTU and this namespace's `tcp_rmem`).
    pub rcvbuf: crate::rcvbuf::RcvbufPlan,
    /// io_uring zcrx: `Known(())` when a ring can be made here, the kernel has
    /// `IORING_OP_RECV_ZC` and would register a zcrx ifq for this process (`CAP_NET_ADMIN`);
    /// `Unsupported` with the reason a zcrx run would skip.
    pub zcrx: Fact<()>,
    /// The kernel's netdev `bind-tx` `do` policy (devmem TX, 6.16+): `Unsupported` when the
    /// netdev family has no such op.
    pub bind_tx_policy: Fact<Vec<PolicyAttr>>,
}

impl HostCaps {
    /// Asks the running system. `rx_page_size` and `dmabuf_size` are `-b` and
    /// `--dmabuf-size` (bytes), for the hugepage need.
    pub fn probe(rx_page_size: Option<u32>, dmabuf_size: Option<u64>) -> HostCaps {
        let dev = Path::new(udmabuf::UDMABUF_DEV);
        let udmabuf = match crate::sys::udmabuf::open_device(dev) {
            Ok(_) => match udmabuf::read_size_limit_mb(Path::new(udmabuf::SIZE_LIMIT_MB_PATH)) {
                Ok(mb) => Fact::Known(mb),
                Err(e) => Fact::Failed(e.to_string()),
            },
            Err(errno) => Fact::Unsupported(crate::caps::open_failure(dev, errno)),
        };
        let dma_heaps = dma_heaps_fact(dma_heap::list_heaps(Path::new(dma_heap::DMA_HEAP_DIR)));
        let hugepages = match HugepageStatus::read() {
            Ok(h) => Fact::Known(h),
            Err(Error::Skip(m)) => Fact::Unsupported(m.to_string()),
            Err(e) => Fact::Failed(e.to_string()),
        };
        let params = udmabuf::UdmabufParams::new(rx_page_size, dmabuf_size).ok();
        let hugepages_needed = params
            .as_ref()
            .map_or(0, udmabuf::UdmabufParams::hugepages_needed);
        let niov = rx_page_size.unwrap_or(crate::sys::page_size() as u32);
        let buffers = params.map_or(0, |p| p.size_bytes / u64::from(niov.max(1)));
        let rcvbuf = crate::rcvbuf::plan(
            None,
            buffers,
            niov,
            crate::rcvbuf::mss_for_mtu(1500),
            crate::sys::socket::tcp_rmem_max().ok(),
        );
        let optname = crate::sys::uapi::SO_DEVMEM_AUTORELEASE;
        let autorelease = match crate::sys::socket::probe_devmem_autorelease()
            .map_err(|e| classify(e, Op::DevmemAutorelease { optname }))
        {
            Ok(()) => Fact::Known(true),
            Err(Error::Skip(m)) => Fact::Unsupported(m.to_string()),
            Err(e) => Fact::Failed(e.to_string()),
        };
        let zcrx = match zcrx_here() {
            Ok(()) => Fact::Known(()),
            Err(Error::Skip(m)) => Fact::Unsupported(m.to_string()),
            Err(e) => Fact::Failed(e.to_string()),
        };
        let bind_tx_policy = match bind_tx_policy() {
            Ok(p) => Fact::Known(p),
            Err(e) if is_op_missing(&e) => Fact::Unsupported(
                "the kernel's netdev family has no bind-tx (devmem TX is 6.16+)".into(),
            ),
            Err(e) => Fact::Failed(e.to_string()),
        };
        HostCaps {
            zcrx,
            bind_tx_policy,
            kernel_release: Fact::from_result(crate::sys::kernel_release()),
            udmabuf,
            dma_heaps,
            hugepages,
            hugepages_needed,
            rx_page_size,
            bind_rx_policy: Fact::from_result(bind_rx_policy()),
            autorelease,
            rcvbuf,
        }
    }
}

/// Whether a zcrx receive could start here: io_uring enabled, a zcrx ring made, the kernel
/// knows `IORING_OP_RECV_ZC`, and a registration would not be refused for lack of
/// `CAP_NET_ADMIN` (the checks a zcrx run makes before it changes anything).
///
/// Errors: `Error::Skip` naming what is missing; others as the checks give them.
fn zcrx_here() -> crate::error::Result<()> {
    crate::uring::check_io_uring_enabled()?;
    let ring = crate::uring::create_ring(&crate::uring::RingParams::default())
        .map_err(crate::uring::setup_refusal)?;
    crate::uring::require_recv_zc(&ring)?;
    crate::uring::require_net_admin(&ring)
}

/// Whether `e` is nlctrl's answer to a getpolicy for an op the family does not have (or no
/// netdev family at all).
fn is_op_missing(e: &Error) -> bool {
    matches!(e, Error::Netlink(n) if n.family == "nlctrl" && n.errno == libc::ENOENT)
}

/// Yes / warn / no / could not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapState {
    /// Available.
    Yes,
    /// Available, with a caveat the detail explains (nothing fails because of it).
    Warn,
    /// Missing: a devmem bind (or the option) would fail; the detail says how.
    No,
    /// Could not be determined.
    Unknown,
}

impl CapState {
    fn word(self) -> &'static str {
        match self {
            CapState::Yes => "yes",
            CapState::Warn => "warn",
            CapState::No => "no",
            CapState::Unknown => "?",
        }
    }
}

/// One capability line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// What.
    pub name: &'static str,
    /// Yes / warn / no / unknown.
    pub state: CapState,
    /// Why; for "no", the way a bind (or option) would fail.
    pub detail: String,
}

/// Everything the report shows about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicReport {
    /// Interface name.
    pub ifname: String,
    /// Interface index.
    pub ifindex: u32,
    /// The driver (`ETHTOOL_GDRVINFO`).
    pub driver: Fact<DrvInfo>,
    /// netdev dev-get.
    pub dev: Fact<DevInfo>,
    /// ethtool channels-get.
    pub channels: Fact<Channels>,
    /// ethtool rings-get (header-split part).
    pub hds: Fact<HdsConfig>,
    /// RSS indirection table.
    pub rss: Fact<RssTable>,
    /// `rx-ntuple-filter`.
    pub ntuple: Fact<bool>,
    /// ntuple rule locations and table size.
    pub rules: Fact<(Vec<RuleLocation>, u32)>,
    /// netdev queue-get dump.
    pub queues: Fact<Vec<QueueInfo>>,
    /// netdev page-pool-get dump for this device.
    pub page_pools: Fact<Vec<PagePoolInfo>>,
    /// bind-rx with an invalid dma-buf fd: `Known(answer)` when the driver passed the
    /// device check, `Unsupported` for EOPNOTSUPP, `Failed` when it could not be asked
    /// (e.g. EPERM); `None` when not asked.
    pub devmem_driver: Option<Fact<String>>,
    /// The same bind-rx answered `EOPNOTSUPP` without a kernel message (the kernel's
    /// queue-ops check): the driver has no queue management ops ([`Missing::NoQueueOps`], the
    /// kernel's answer kept typed for the probe's skip).
    pub no_queue_ops: Option<Missing>,
    /// Host facts.
    pub host: HostCaps,
}

impl NicReport {
    /// Reads every fact. With `ask_bind`, also sends bind-rx with dma-buf fd `u32::MAX`
    /// (never an open descriptor) for queue 0: the kernel checks the device before the fd,
    /// so EOPNOTSUPP means "no queue management" and EBADF means the driver passed; the
    /// bind cannot succeed (if it ever did, the binding is dropped at once).
    pub fn gather(nic: &mut dyn NicOps, host: HostCaps, ask_bind: bool) -> NicReport {
        let mut no_queue_ops = None;
        let devmem_driver = ask_bind.then(|| {
            let req = BindRxRequest {
                ifindex: nic.ifindex(),
                ifname: Some(nic.ifname().to_string()),
                fd: Some(u32::MAX),
                queues: vec![QueueNest::rx(0)],
                rx_page_size: None,
                autorelease: None,
            };
            match nic.bind_rx(&req) {
                // The binding drops at the end of this arm.
                Ok(b) => Fact::Known(format!(
                    "bind-rx accepted an invalid dma-buf fd (binding {}, dropped)",
                    b.id()
                )),
                Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
                    // The queue-ops check answers without text; a later EOPNOTSUPP with the
                    // kernel's words (no DMA device, a DMA device mismatch) is another refusal,
                    // which the probe's own checks name.
                    let silent = matches!(&e, Error::Netlink(nl) if nl.ext_msg.is_none());
                    if silent {
                        no_queue_ops = Some(Missing::NoQueueOps {
                            ifname: nic.ifname().to_string(),
                            answer: e.kernel_answer(),
                        });
                    }
                    Fact::Unsupported(e.to_string())
                }
                Err(e) if e.errno() == Some(libc::EPERM) => {
                    Fact::Failed(format!("cannot ask without CAP_NET_ADMIN: {e}"))
                }
                Err(e) => Fact::Known(format!(
                    "bind-rx got past the device check (an invalid dma-buf fd was refused with {})",
                    e.errno().map_or_else(|| e.to_string(), errno_display)
                )),
            }
        });
        NicReport {
            ifname: nic.ifname().to_string(),
            ifindex: nic.ifindex(),
            driver: Fact::from_result(nic.drvinfo()),
            dev: Fact::from_result(nic.dev_info()),
            channels: Fact::from_result(nic.channels_get()),
            hds: Fact::from_result(nic.hds_get()),
            rss: Fact::from_result(nic.rss_get()),
            ntuple: Fact::from_result(nic.ntuple_get()),
            rules: Fact::from_result(nic.flow_rules()),
            queues: Fact::from_result(nic.queues()),
            page_pools: Fact::from_result(nic.page_pools()),
            devmem_driver,
            no_queue_ops,
            host,
        }
    }

    /// The yes/no lines, each "no" with the way a devmem bind (or option) would fail.
    pub fn capabilities(&self) -> Vec<Capability> {
        let h = &self.host;
        let mut v = vec![
            ("devmem RX driver support", self.cap_devmem_driver()),
            ("header split", self.cap_header_split()),
            ("at least 2 RX queues", self.cap_rx_queues()),
        ];
        v.extend(self.cap_free_rx_queues().map(|c| ("free RX queues", c)));
        v.extend([
            ("RSS indirection table", self.cap_rss()),
            ("ntuple flow steering", self.cap_ntuple()),
            ("udmabuf", cap_udmabuf(h)),
            ("dma-buf heaps", cap_dma_heaps(h)),
            ("2 MiB hugepages", cap_hugepages(h)),
            ("TCP window inside the dmabuf", cap_rcvbuf(h)),
            ("rx-page-size (bind-rx attribute 5)", cap_rx_page_size(h)),
            ("bind-rx autorelease (-a)", cap_bind_autorelease(h)),
            ("SO_DEVMEM_AUTORELEASE", cap_autorelease(h)),
            ("io_uring zcrx", cap_zcrx(h)),
            ("devmem TX (bind-tx)", cap_bind_tx(h)),
        ]);
        v.into_iter()
            .map(|(name, (state, detail))| Capability {
                name,
                state,
                detail,
            })
            .collect()
    }

    /// Driver support, from the bind-rx question [`NicReport::gather`] asked.
    fn cap_devmem_driver(&self) -> Cap {
        match &self.devmem_driver {
            None => (CapState::Unknown, "not asked".into()),
            Some(Fact::Known(d)) => (CapState::Yes, d.clone()),
            Some(Fact::Unsupported(e)) => (
                CapState::No,
                format!("the driver has no queue-management ops; bind-rx fails with {e}"),
            ),
            Some(Fact::Failed(e)) => (CapState::Unknown, e.clone()),
        }
    }

    /// Header split (`tcp-data-split`) and hds-thresh.
    fn cap_header_split(&self) -> Cap {
        match &self.hds {
            Fact::Known(h) => match h.tcp_data_split {
                None => (
                    CapState::No,
                    format!(
                        "the driver does not report tcp-data-split, so setup cannot turn it \
                         on; {HDS_NEEDED}"
                    ),
                ),
                Some(TcpDataSplit::Enabled) => {
                    let mut d = "on".to_string();
                    if let Some(t) = h.hds_thresh.filter(|t| *t != 0) {
                        d.push_str(&format!(
                            "; hds-thresh {t} (setup sets 0; otherwise bind-rx fails with \
                             EINVAL \"hds-thresh is not zero\")"
                        ));
                    }
                    (CapState::Yes, d)
                }
                Some(s) => (
                    CapState::Yes,
                    format!(
                        "supported, now {} ({}); setup turns it on (bind-rx needs it on)",
                        split_cli(Some(s)),
                        describe_hds(h)
                    ),
                ),
            },
            Fact::Unsupported(e) => (
                CapState::No,
                format!("no ring parameters ({e}); {HDS_NEEDED}"),
            ),
            Fact::Failed(e) => (CapState::Unknown, e.clone()),
        }
    }

    /// At least 2 RX queues (queue 0 stays in RSS).
    fn cap_rx_queues(&self) -> Cap {
        match &self.channels {
            Fact::Known(c) if no_channel_counts(c) => (
                CapState::Unknown,
                "the driver reports no channel counts; give -t/-q".into(),
            ),
            Fact::Known(c) if c.rx_queues() >= 2 => {
                (CapState::Yes, format!("{} RX queues", c.rx_queues()))
            }
            Fact::Known(c) => (
                CapState::No,
                format!(
                    "{} RX queue(s); devmem binds queues other than 0, which stays in RSS",
                    c.rx_queues()
                ),
            ),
            Fact::Unsupported(e) => (
                CapState::Unknown,
                format!("the driver does not report channels ({e}); give -t/-q"),
            ),
            Fact::Failed(e) => (CapState::Unknown, e.clone()),
        }
    }

    /// Free RX queues (none owned by a memory provider), when the queue list was read.
    fn cap_free_rx_queues(&self) -> Option<Cap> {
        let Fact::Known(qs) = &self.queues else {
            return None;
        };
        let owned = owned_rx(qs);
        let rx = qs.iter().filter(|q| q.queue_type == QueueType::Rx).count();
        if rx == 0 {
            return Some((CapState::Unknown, NO_QUEUES_VISIBLE.into()));
        }
        if owned.is_empty() {
            return Some((CapState::Yes, format!("{rx} of {rx} free")));
        }
        let lines: Vec<String> = owned
            .iter()
            .map(|(q, o)| {
                format!(
                    "queue {q} owned by {} (binding it fails with {})",
                    describe_owners(o),
                    o[0].bind_refusal()
                )
            })
            .collect();
        let state = if owned.len() >= rx {
            CapState::No
        } else {
            CapState::Yes
        };
        let free = rx - owned.len();
        Some((state, format!("{free} of {rx} free; {}", lines.join("; "))))
    }

    /// The RSS indirection table (setup takes the bound queues out of it).
    fn cap_rss(&self) -> Cap {
        match &self.rss {
            Fact::Known(t) => (CapState::Yes, format!("{} entries", t.indir.len())),
            Fact::Unsupported(e) => (
                CapState::No,
                format!(
                    "{e}; setup cannot take the bound queues out of RSS (other flows would \
                     land on them)"
                ),
            ),
            Fact::Failed(e) => (CapState::Unknown, e.clone()),
        }
    }

    /// ntuple flow steering: the feature and the rule table.
    fn cap_ntuple(&self) -> Cap {
        let no_steering = |why: String| {
            (
                CapState::No,
                format!(
                    "{why}; no flow rule can steer the connection to the bound queue, so data \
                     lands on RSS queues (\"flow steering error\")"
                ),
            )
        };
        match (&self.ntuple, &self.rules) {
            (Fact::Unsupported(e), _) => no_steering(e.clone()),
            (_, Fact::Unsupported(e)) => no_steering(format!("no ntuple rule table ({e})")),
            (Fact::Failed(e), _) | (_, Fact::Failed(e)) => (CapState::Unknown, e.clone()),
            (Fact::Known(true), Fact::Known(_)) => (CapState::Yes, "feature on".into()),
            (Fact::Known(false), Fact::Known(_)) => (
                CapState::Yes,
                "feature off (setup turns it on and back off)".into(),
            ),
        }
    }

    /// The report as text, one fact per line.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capability report for {} (ifindex {})",
            self.ifname, self.ifindex
        );
        let line = |s: &mut String, label: &str, text: String| {
            let _ = writeln!(s, "  {label:<10} {text}");
        };
        line(&mut s, "driver:", fact_text(&self.driver, driver_text));
        line(
            &mut s,
            "kernel:",
            fact_text(&self.host.kernel_release, String::clone),
        );
        line(
            &mut s,
            "device:",
            fact_text(&self.dev, |d| {
                let zc = d.xdp_zc_max_segs.map(|m| format!(", xdp-zc-max-segs {m}"));
                format!(
                    "xdp-features {}{}, xdp-rx-metadata 0x{:x}, xsk-features 0x{:x} (an \
                     attached XDP program makes bind-rx fail with EEXIST)",
                    xdp_feature_names(d.xdp_features),
                    zc.unwrap_or_default(),
                    d.xdp_rx_metadata_features,
                    d.xsk_features
                )
            }),
        );
        line(
            &mut s,
            "channels:",
            fact_text(&self.channels, |c| {
                if no_channel_counts(c) {
                    return "the driver reports no channel counts".into();
                }
                let f = |name: &str, n: Option<u32>, m: Option<u32>| {
                    n.map(|n| format!("{name} {n} (max {})", m.unwrap_or(0)))
                };
                let parts: Vec<String> = [
                    f("rx", c.rx_count, c.rx_max),
                    f("tx", c.tx_count, c.tx_max),
                    f("other", c.other_count, c.other_max),
                    f("combined", c.combined_count, c.combined_max),
                ]
                .into_iter()
                .flatten()
                .collect();
                format!("{}; RX queues: {}", parts.join(", "), c.rx_queues())
            }),
        );
        line(&mut s, "rings:", fact_text(&self.hds, describe_hds));
        line(&mut s, "rss:", fact_text(&self.rss, describe_rss));
        let rules = match &self.rules {
            Fact::Known((locs, size)) => format!("; rules at {locs:?} (table size {size})"),
            other => format!("; rules: {}", fact_text(other, |_| String::new())),
        };
        line(
            &mut s,
            "ntuple:",
            fact_text(&self.ntuple, |on| {
                format!("{}{rules}", if *on { "on" } else { "off" })
            }),
        );
        match &self.queues {
            Fact::Known(qs) if qs.is_empty() => line(&mut s, "queues:", NO_QUEUES_VISIBLE.into()),
            Fact::Known(qs) => {
                for q in qs.iter().filter(|q| q.queue_type == QueueType::Rx) {
                    let owner = Some(describe_owners(&owners(q))).filter(|o| !o.is_empty());
                    let owner = owner.unwrap_or_else(|| "free".into());
                    let napi = q.napi_id.map_or_else(|| "none".into(), |n| n.to_string());
                    line(
                        &mut s,
                        &format!("rx {}:", q.id),
                        format!("napi {napi}, {owner}"),
                    );
                }
                let tx = qs.iter().filter(|q| q.queue_type == QueueType::Tx).count();
                line(&mut s, "tx:", format!("{tx} queues"));
            }
            other => line(&mut s, "queues:", fact_text(other, |_| String::new())),
        }
        match &self.page_pools {
            Fact::Known(pools) if pools.is_empty() => line(&mut s, "pools:", "none visible".into()),
            Fact::Known(pools) => {
                for p in pools {
                    line(&mut s, &format!("pool {}:", p.id), page_pool_text(p));
                }
            }
            other => line(&mut s, "pools:", fact_text(other, |_| String::new())),
        }
        let _ = writeln!(s, "capabilities:");
        for c in self.capabilities() {
            let _ = writeln!(s, "  {:<4} {}: {}", c.state.word(), c.name, c.detail);
        }
        s
    }

    /// The report as its summary type ([`ReportBody`]): every fact (a value,
    /// `{"unsupported": reason}` or `{"error": text}`) and the capability lines.
    pub fn figure(&self) -> ReportBody {
        let h = &self.host;
        ReportBody {
            ifname: self.ifname.clone(),
            ifindex: self.ifindex,
            driver: fact_figure(&self.driver, |d| DriverFigure {
                name: d.driver.clone(),
                version: d.version.clone(),
                fw_version: d.fw_version.clone(),
                bus_info: d.bus_info.clone(),
            }),
            device: fact_figure(&self.dev, |d| DeviceFigure {
                xdp_features: d.xdp_features,
                xdp_features_names: xdp_feature_names(d.xdp_features),
                xdp_zc_max_segs: d.xdp_zc_max_segs,
                xdp_rx_metadata_features: d.xdp_rx_metadata_features,
                xsk_features: d.xsk_features,
            }),
            channels: fact_figure(&self.channels, |c| ChannelsFigure {
                rx_count: c.rx_count,
                rx_max: c.rx_max,
                tx_count: c.tx_count,
                tx_max: c.tx_max,
                other_count: c.other_count,
                other_max: c.other_max,
                combined_count: c.combined_count,
                combined_max: c.combined_max,
                rx_queues: c.rx_queues(),
            }),
            rings: fact_figure(&self.hds, |h| RingsFigure {
                tcp_data_split: h.tcp_data_split.map(|s| split_cli(Some(s)).to_string()),
                hds_thresh: h.hds_thresh,
            }),
            rss: fact_figure(&self.rss, |t| RssFigure {
                size: t.indir.len(),
                equal_spread: equal_spread_of(t),
                indir: t.indir.clone(),
            }),
            ntuple: fact_figure(&self.ntuple, |on| *on),
            ntuple_rules: fact_figure(&self.rules, |(locs, size)| RulesFigure {
                locations: locs.clone(),
                table_size: *size,
            }),
            queues: fact_figure(&self.queues, |qs| qs.iter().map(queue_figure).collect()),
            page_pools: fact_figure(&self.page_pools, |ps| {
                ps.iter()
                    .map(|p| PagePoolFigure {
                        id: p.id,
                        napi_id: p.napi_id,
                        inflight: p.inflight,
                        inflight_mem: p.inflight_mem,
                        detach_time: p.detach_time,
                        dmabuf: p.dmabuf,
                        io_uring: p.io_uring,
                    })
                    .collect()
            }),
            devmem_driver: self
                .devmem_driver
                .as_ref()
                .map(|f| fact_figure(f, String::clone)),
            host: HostFigure {
                kernel_release: fact_figure(&h.kernel_release, String::clone),
                udmabuf: fact_figure(&h.udmabuf, |l| UdmabufFigure { size_limit_mb: *l }),
                dma_heaps: fact_figure(&h.dma_heaps, Vec::clone),
                hugepages: fact_figure(&h.hugepages, |s| HugepagesFigure {
                    nr: s.nr,
                    free: s.free,
                    resv: s.resv,
                    available: s.available(),
                }),
                hugepages_needed: h.hugepages_needed,
                bind_rx_policy_attrs: fact_figure(&h.bind_rx_policy, |p| kinds(p)),
                bind_rx_autorelease_attr: fact_figure(&h.bind_rx_policy, |p| autorelease_attr(p)),
                so_devmem_autorelease: fact_figure(&h.autorelease, |b| *b),
            },
            capabilities: self
                .capabilities()
                .into_iter()
                .map(|c| CapabilityFigure {
                    name: c.name.to_string(),
                    state: c.state.word().to_string(),
                    detail: c.detail,
                })
                .collect(),
        }
    }
}

/// A capability's state and detail; [`NicReport::capabilities`] adds the name.
type Cap = (CapState, String);

/// `/dev/udmabuf` and its size limit.
fn cap_udmabuf(h: &HostCaps) -> Cap {
    let dev = udmabuf::UDMABUF_DEV;
    match &h.udmabuf {
        Fact::Known(Some(mb)) => (CapState::Yes, format!("{dev} (size limit {mb} MiB)")),
        Fact::Known(None) => (CapState::Yes, format!("{dev} (size limit unknown)")),
        Fact::Unsupported(e) => (CapState::No, format!("{e}; there is no dma-buf to bind")),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// What the listing of `/dev/dma_heap` says: the heaps, or why there are none (`ENOENT`: the
/// kernel has no `CONFIG_DMABUF_HEAPS`).
fn dma_heaps_fact(listing: std::result::Result<Vec<String>, i32>) -> Fact<Vec<String>> {
    let dir = dma_heap::DMA_HEAP_DIR;
    match listing {
        Ok(names) => Fact::Known(names),
        Err(libc::ENOENT) => Fact::Unsupported(format!(
            "no {dir} ({}); the kernel needs CONFIG_DMABUF_HEAPS",
            errno_display(libc::ENOENT)
        )),
        Err(errno) => Fact::Failed(format!("read({dir}): {}", errno_display(errno))),
    }
}

/// The dma-buf heaps, each by name.
fn cap_dma_heaps(h: &HostCaps) -> Cap {
    let dir = dma_heap::DMA_HEAP_DIR;
    match &h.dma_heaps {
        Fact::Known(names) if names.is_empty() => (
            CapState::No,
            format!("{dir} has no heaps; a dma-heap source skips here"),
        ),
        Fact::Known(names) => (CapState::Yes, format!("{} ({dir})", names.join(", "))),
        Fact::Unsupported(e) => (CapState::No, format!("{e}; a dma-heap source skips here")),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// 2 MiB hugepages for `-b` above the page size.
fn cap_hugepages(h: &HostCaps) -> Cap {
    let need = h.hugepages_needed;
    match &h.hugepages {
        // Not needed by this run: the state still says whether there are any, so an
        // empty pool is never a "yes".
        Fact::Known(s) if need == 0 && s.available() == 0 => (
            CapState::No,
            "none available; -b above the page size needs them (raise vm.nr_hugepages)".into(),
        ),
        Fact::Known(s) if need == 0 => (
            CapState::Yes,
            format!(
                "{} available (only -b above the page size needs them)",
                s.available()
            ),
        ),
        Fact::Known(s) if s.available() >= need => (
            CapState::Yes,
            format!("{} available, {need} needed", s.available()),
        ),
        Fact::Known(s) => (
            CapState::No,
            format!(
                "{} available, {need} needed for -b {}; raise vm.nr_hugepages",
                s.available(),
                h.rx_page_size.unwrap_or(0)
            ),
        ),
        Fact::Unsupported(e) => (CapState::No, e.clone()),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// The TCP receive window against the dmabuf: a warning, not a refusal (the server sizes its
/// receive buffer itself).
fn cap_rcvbuf(h: &HostCaps) -> Cap {
    match h.rcvbuf.bytes {
        None => (CapState::Yes, h.rcvbuf.reason.clone()),
        Some(set) => (
            CapState::Warn,
            format!(
                "the kernel's default receive window is larger than the dmabuf can \
                 hold, which can stall a receive ({}); the server sets SO_RCVBUF {set} \
                 (--rcvbuf 0 would not)",
                h.rcvbuf.reason
            ),
        ),
    }
}

/// `rx-page-size` in the kernel's bind-rx policy (a u32 attribute 5; a u8 5 is the
/// autorelease series' attribute instead).
fn cap_rx_page_size(h: &HostCaps) -> Cap {
    match &h.bind_rx_policy {
        Fact::Known(p) if has_rx_page_size(p) => {
            (CapState::Yes, "the kernel's bind-rx policy has it".into())
        }
        Fact::Known(p) => (
            CapState::No,
            format!(
                "the kernel's bind-rx policy has attributes {:?} only; a bind with -b \
                 fails with EINVAL \"Unknown attribute type\"",
                kinds(p)
            ),
        ),
        Fact::Unsupported(e) | Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// The bind-rx autorelease attribute (u8) of the unmerged autorelease series v7–v10.
fn cap_bind_autorelease(h: &HostCaps) -> Cap {
    match &h.bind_rx_policy {
        Fact::Known(p) => match autorelease_attr(p) {
            Some(attr) => (
                CapState::Yes,
                format!(
                    "the kernel's bind-rx policy has the u8 autorelease attribute (number \
                     {attr}); -a 0|1 sends it, and after -U 1 recvmsg may answer ENODEV \
                     (binding gone)"
                ),
            ),
            None => (
                CapState::No,
                "the kernel's bind-rx policy has no u8 autorelease attribute (unmerged series \
                 v7-v10); -a 1 skips, -a 0 binds without it"
                    .into(),
            ),
        },
        Fact::Unsupported(e) | Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// The attribute numbers of a bind-rx policy, as the report lists them.
fn kinds(policy: &[PolicyAttr]) -> Vec<u16> {
    policy.iter().map(|a| a.kind).collect()
}

/// io_uring zcrx on this host (the device's side shows at registration).
fn cap_zcrx(h: &HostCaps) -> Cap {
    match &h.zcrx {
        Fact::Known(()) => (
            CapState::Yes,
            "io_uring has RECV_ZC and would register a zcrx ifq for this process; the \
             driver's side (header split, a queue with a memory provider) shows when -l \
             --zcrx registers"
                .into(),
        ),
        Fact::Unsupported(e) => (
            CapState::No,
            format!("{e}; -l --zcrx is a skip (exit 4) here"),
        ),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// devmem TX: the kernel's bind-tx op (the driver's netmem TX support shows at the bind).
fn cap_bind_tx(h: &HostCaps) -> Cap {
    match &h.bind_tx_policy {
        Fact::Known(p) => (
            CapState::Yes,
            format!(
                "the kernel's netdev family has bind-tx (attributes {:?}); whether the driver \
                 sends from netmem shows when the devmem TX client (-f IF without -l) binds",
                kinds(p)
            ),
        ),
        Fact::Unsupported(e) => (
            CapState::No,
            format!("{e}; the devmem TX client skips here"),
        ),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// The proposed `SO_DEVMEM_AUTORELEASE` socket option.
fn cap_autorelease(h: &HostCaps) -> Cap {
    match &h.autorelease {
        Fact::Known(_) => (CapState::Yes, "the kernel accepts the socket option".into()),
        Fact::Unsupported(e) => (CapState::No, format!("{e}; -A is a skip (exit 4) here")),
        Fact::Failed(e) => (CapState::Unknown, e.clone()),
    }
}

/// One queue of the queue-get dump, as the report writes it.
fn queue_figure(q: &QueueInfo) -> QueueFigure {
    QueueFigure {
        id: q.id,
        queue_type: match q.queue_type {
            QueueType::Rx => "rx",
            QueueType::Tx => "tx",
            QueueType::Other(_) => "other",
        }
        .to_string(),
        napi_id: q.napi_id,
        owners: owners(q)
            .iter()
            .map(|o| match o {
                QueueOwner::Dmabuf(id) => OwnerFigure::Dmabuf { dmabuf: *id },
                QueueOwner::IoUring => OwnerFigure::Named("io_uring".into()),
                QueueOwner::Xsk => OwnerFigure::Named("xsk".into()),
            })
            .collect(),
    }
}

/// `"veth, version 1.0"`, with `", firmware …"` and `", bus …"` when the driver reports them.
fn driver_text(d: &DrvInfo) -> String {
    let mut t = d.driver.clone();
    for (what, v) in [
        ("version", &d.version),
        ("firmware", &d.fw_version),
        ("bus", &d.bus_info),
    ] {
        if !v.is_empty() {
            let _ = write!(t, ", {what} {v}");
        }
    }
    t
}

fn page_pool_text(p: &PagePoolInfo) -> String {
    let o = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let provider = match (p.dmabuf, p.io_uring) {
        (Some(id), _) => format!("dmabuf {id}"),
        (None, true) => "io_uring zcrx".into(),
        (None, false) => "pages".into(),
    };
    let detached = p.detach_time.map(|d| format!(", detached at {d}"));
    format!(
        "napi {}, inflight {} ({} bytes), memory: {provider}{}",
        o(p.napi_id),
        o(p.inflight),
        o(p.inflight_mem),
        detached.unwrap_or_default()
    )
}

fn fact_text<T>(f: &Fact<T>, known: impl FnOnce(&T) -> String) -> String {
    match f {
        Fact::Known(v) => known(v),
        Fact::Unsupported(e) => format!("unsupported ({e})"),
        Fact::Failed(e) => format!("error ({e})"),
    }
}

fn fact_figure<T, F>(f: &Fact<T>, known: impl FnOnce(&T) -> F) -> FactFigure<F> {
    match f {
        Fact::Known(v) => FactFigure::Known(known(v)),
        Fact::Unsupported(e) => FactFigure::Unsupported {
            unsupported: e.clone(),
        },
        Fact::Failed(e) => FactFigure::Failed { error: e.clone() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_listing_becomes_the_dma_buf_heaps_line() {
        let with = |listing| {
            let mut h = HostCaps::probe(None, None);
            h.dma_heaps = dma_heaps_fact(listing);
            cap_dma_heaps(&h)
        };
        assert_eq!(
            with(Ok(vec!["reserved".into(), "system".into()])),
            (CapState::Yes, "reserved, system (/dev/dma_heap)".into())
        );
        assert_eq!(
            with(Ok(vec![])),
            (
                CapState::No,
                "/dev/dma_heap has no heaps; a dma-heap source skips here".into()
            )
        );
        assert_eq!(
            with(Err(libc::ENOENT)),
            (
                CapState::No,
                "no /dev/dma_heap (ENOENT (No such file or directory)); the kernel needs \
                 CONFIG_DMABUF_HEAPS; a dma-heap source skips here"
                    .into()
            )
        );
        assert_eq!(
            with(Err(libc::EACCES)),
            (
                CapState::Unknown,
                "read(/dev/dma_heap): EACCES (Permission denied)".into()
            )
        );
    }
}
