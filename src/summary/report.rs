//! The capability report's and the probe's bodies (`--report`, `--probe`; docs/json.md): what
//! `nic::report::NicReport` and `nic::probe::ProbeOutcome` write, as types.
//!
//! A fact the tool could not read is not a missing member: each is a value, or
//! `{"unsupported": reason}` (the device or kernel has no such thing), or `{"error": text}`
//! (asking failed) — [`FactFigure`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One fact of the report: its value, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum FactFigure<T> {
    /// What the kernel answered.
    Known(T),
    /// The device or kernel has no such thing.
    Unsupported {
        /// Why.
        unsupported: String,
    },
    /// Asking failed.
    Failed {
        /// The error.
        error: String,
    },
}

/// The driver (`ETHTOOL_GDRVINFO`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DriverFigure {
    /// The driver's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The firmware version (empty when none).
    pub fw_version: String,
    /// The bus address (empty when none).
    pub bus_info: String,
}

/// netdev dev-get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceFigure {
    /// `enum netdev_xdp_act` bits.
    pub xdp_features: u64,
    /// Those bits by name.
    pub xdp_features_names: String,
    /// Most fragments of an AF_XDP zero-copy packet, when reported.
    pub xdp_zc_max_segs: Option<u32>,
    /// `enum netdev_xdp_rx_metadata` bits.
    pub xdp_rx_metadata_features: u64,
    /// `enum netdev_xsk_flags` bits.
    pub xsk_features: u64,
}

/// ethtool channels-get (counts; `null` where the driver reports none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelsFigure {
    /// RX-only channels in use.
    pub rx_count: Option<u32>,
    /// Most RX-only channels.
    pub rx_max: Option<u32>,
    /// TX-only channels in use.
    pub tx_count: Option<u32>,
    /// Most TX-only channels.
    pub tx_max: Option<u32>,
    /// Other channels in use.
    pub other_count: Option<u32>,
    /// Most other channels.
    pub other_max: Option<u32>,
    /// Combined channels in use.
    pub combined_count: Option<u32>,
    /// Most combined channels.
    pub combined_max: Option<u32>,
    /// RX queues: RX-only plus combined channels.
    pub rx_queues: u32,
}

/// ethtool rings-get, its header-split part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RingsFigure {
    /// `"auto"`, `"off"` or `"on"`; `null` when not reported.
    pub tcp_data_split: Option<String>,
    /// The header-split threshold, bytes.
    pub hds_thresh: Option<u32>,
}

/// The RSS indirection table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RssFigure {
    /// Entries.
    pub size: usize,
    /// N when the table spreads evenly over queues 0..N, else `null`.
    pub equal_spread: Option<u32>,
    /// The queue of each entry.
    pub indir: Vec<u32>,
}

/// The ntuple rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RulesFigure {
    /// The locations in use.
    pub locations: Vec<u32>,
    /// The table's size.
    pub table_size: u32,
}

/// Who owns a queue: `{"dmabuf": id}`, `"io_uring"` or `"xsk"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OwnerFigure {
    /// A devmem binding.
    Dmabuf {
        /// Its id.
        dmabuf: u32,
    },
    /// `"io_uring"` or `"xsk"`.
    Named(String),
}

/// One queue of the netdev queue-get dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QueueFigure {
    /// Its index.
    pub id: u32,
    /// `"rx"`, `"tx"` or `"other"`.
    #[serde(rename = "type")]
    pub queue_type: String,
    /// Its NAPI instance, when reported.
    pub napi_id: Option<u32>,
    /// Who owns it.
    pub owners: Vec<OwnerFigure>,
}

/// One page pool of the device (netdev page-pool-get).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PagePoolFigure {
    /// Its id.
    pub id: u64,
    /// Its NAPI instance.
    pub napi_id: Option<u64>,
    /// Buffers handed out and not yet returned.
    pub inflight: Option<u64>,
    /// Bytes of those.
    pub inflight_mem: Option<u64>,
    /// When it was detached (seconds, wall clock), for orphaned pools.
    pub detach_time: Option<u64>,
    /// The devmem binding that provides its memory.
    pub dmabuf: Option<u32>,
    /// Whether io_uring zcrx provides its memory.
    pub io_uring: bool,
}

/// `/dev/udmabuf`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UdmabufFigure {
    /// The module's size limit, MiB, when readable.
    pub size_limit_mb: Option<u64>,
}

/// The 2 MiB hugepage pool, pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HugepagesFigure {
    /// `vm.nr_hugepages`.
    pub nr: u64,
    /// Free pages (reserved ones included).
    pub free: u64,
    /// Reserved pages.
    pub resv: u64,
    /// Free minus reserved.
    pub available: u64,
}

/// The host's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostFigure {
    /// `uname -r`.
    pub kernel_release: FactFigure<String>,
    /// `/dev/udmabuf`.
    pub udmabuf: FactFigure<UdmabufFigure>,
    /// The dma-buf heaps by name.
    pub dma_heaps: FactFigure<Vec<String>>,
    /// The hugepage pool.
    pub hugepages: FactFigure<HugepagesFigure>,
    /// 2 MiB hugepages a run with the requested `-b` needs.
    pub hugepages_needed: u64,
    /// bind-rx's policy attribute numbers.
    pub bind_rx_policy_attrs: FactFigure<Vec<u16>>,
    /// The number of bind-rx's autorelease attribute, `null` when none.
    pub bind_rx_autorelease_attr: FactFigure<Option<u16>>,
    /// Whether the kernel accepts `SO_DEVMEM_AUTORELEASE`.
    pub so_devmem_autorelease: FactFigure<bool>,
}

/// One capability line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CapabilityFigure {
    /// What.
    pub name: String,
    /// `"yes"`, `"warn"`, `"no"` or `"?"` (unknown).
    pub state: String,
    /// Why.
    pub detail: String,
}

/// The capability report (`--report`, and the probe's `report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReportBody {
    /// The interface.
    pub ifname: String,
    /// Its index.
    pub ifindex: u32,
    /// The driver.
    pub driver: FactFigure<DriverFigure>,
    /// netdev dev-get.
    pub device: FactFigure<DeviceFigure>,
    /// The channels.
    pub channels: FactFigure<ChannelsFigure>,
    /// Header split.
    pub rings: FactFigure<RingsFigure>,
    /// The RSS table.
    pub rss: FactFigure<RssFigure>,
    /// `rx-ntuple-filter`.
    pub ntuple: FactFigure<bool>,
    /// The ntuple rules.
    pub ntuple_rules: FactFigure<RulesFigure>,
    /// The queues.
    pub queues: FactFigure<Vec<QueueFigure>>,
    /// The device's page pools.
    pub page_pools: FactFigure<Vec<PagePoolFigure>>,
    /// bind-rx's answer about the driver, when asked.
    pub devmem_driver: Option<FactFigure<String>>,
    /// The host.
    pub host: HostFigure,
    /// The capability lines.
    pub capabilities: Vec<CapabilityFigure>,
}

/// One check of the probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckFigure {
    /// `"ok"`, `"skip"`, `"FAIL"` or `"note"`, as the check line prints it.
    pub status: String,
    /// What was checked.
    pub name: String,
    /// The answer.
    pub detail: String,
}

/// The probe's checks and their verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeFigure {
    /// The checks, in order.
    pub checks: Vec<CheckFigure>,
    /// `"pass"`, `"skip"` or `"fail"`.
    pub verdict: String,
    /// Why a skip or a failure (a skip's names what is missing, without `skip: `).
    pub reason: Option<String>,
}

/// The probe's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ProbeBody {
    /// The capability report, when the NIC could be opened.
    pub report: Option<ReportBody>,
    /// The checks.
    pub probe: ProbeFigure,
}
