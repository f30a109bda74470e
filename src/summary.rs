//! The run summary as types: the `--json` object of every run (`docs/json.md`), its envelope
//! and each mode's body, serialized with serde (and read back the same way, by the lab and the
//! tests), with its schema derived by `schemars`: `docs/summary.schema.json` (hand-written,
//! for its constraints) is checked against these types, so it names no member they lack. The
//! summary lines, the `--quiet` pass line, the lab's tables and the one verdict read these fields,
//! not JSON keys.
//!
//! Units: bytes, seconds (`_s`), Gbit/s (10⁹ bit/s, `gbit_per_s`), CPU shares in percent of
//! the CPUs' time, `cpu_utilisation` as a fraction of one CPU. Counts are `u64`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod report;
pub mod sweep;

/// The `"mode"` of a summary: which mode ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ModeName {
    /// The devmem RX server.
    #[serde(rename = "devmem")]
    Devmem,
    /// The io_uring zcrx server.
    #[serde(rename = "io_uring zcrx")]
    Zcrx,
    /// The plain-TCP receiver.
    #[serde(rename = "plain TCP")]
    PlainTcp,
    /// The devmem TX client.
    #[serde(rename = "devmem-tx")]
    DevmemTx,
    /// The plain-TCP pattern sender.
    #[serde(rename = "pattern-sender")]
    PatternSender,
    /// The probe.
    #[serde(rename = "probe")]
    Probe,
    /// The capability report.
    #[serde(rename = "report")]
    Report,
    /// The lab's peer server.
    #[serde(rename = "peer-server")]
    PeerServer,
    /// A sweep.
    #[serde(rename = "sweep")]
    Sweep,
    /// Two sweeps' files compared (`--compare`).
    #[serde(rename = "compare")]
    Compare,
}

/// A run's verdict as the summary names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictName {
    /// Exit 0.
    Pass,
    /// Exit 1 (or 2 for a usage error found after the start).
    Fail,
    /// Exit 4: the environment lacks a capability.
    Skip,
}

/// The members every summary opens with, in this order, whatever the mode and the outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Envelope {
    /// Which mode ran.
    pub mode: ModeName,
    /// The run passed (`verdict` is `pass`).
    pub ok: bool,
    /// The final verdict, after the NIC undo and `--verify-restore`.
    pub verdict: VerdictName,
    /// The message the run ended with; `null` on a pass.
    pub error: Option<String>,
    /// The tool's version, commit and target (`ncdevmem-rs --version`).
    pub version: String,
    /// The command line after `argv[0]`.
    pub argv: Vec<String>,
    /// The kernel release (`uname -r`), `null` when it could not be read.
    pub kernel_release: Option<String>,
    /// The set-up's steps before the run listened, in order (empty for a mode that does not
    /// listen, or one that ended before its first step); a run that ended during its set-up
    /// has the steps it finished.
    #[serde(default)]
    pub setup: Vec<SetupStep>,
}

/// One step of a run's set-up, from the end of the step before it (for the first: from the
/// start of the run, the command line read) to its own end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetupStep {
    /// The step: `start` (from the process's start, its fork, to the run's: the loader, the
    /// runtime, the command line; to the clock tick, 10 ms), `checks` (the skip and option
    /// checks), `hugepages` (waiting for hugepages a
    /// previous binding still holds), `nic` (the netlink and ethtool sockets), `queues`
    /// (choosing the RX queues), `memory` (allocating the dmabuf), `configure` (header split,
    /// RSS context, ntuple rules), `bind` (`bind-rx`), `register` (the zcrx ifqs), `listen`.
    pub step: String,
    /// Its time, milliseconds (to the microsecond).
    pub ms: f64,
}

/// One bucket of a frag-size histogram: `frags` frags of `min..=max` bytes (powers of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FragBucket {
    /// Smallest size of the bucket, bytes.
    pub min: u32,
    /// Largest size of the bucket, bytes.
    pub max: u32,
    /// Frags in it.
    pub frags: u64,
}

/// The io_uring zcrx counters of a receive (zcrx only; the ifq-wide ones summed over the
/// workers in a run of several flows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ZcrxTotals {
    /// `RECV_ZC` completions that carried data.
    pub zcrx_chunks: u64,
    /// Buffers returned through the refill ring.
    pub zcrx_buffers_returned: u64,
    /// Refill-ring tail publishes.
    pub zcrx_refill_publishes: u64,
    /// `RECV_ZC` requests armed.
    pub zcrx_arms: u64,
    /// `ENOSPC`/`ENOMEM` completions retried.
    pub zcrx_retried_errors: u64,
    /// `ZCRX_CTRL_FLUSH_RQ` calls.
    pub zcrx_flushes: u64,
    /// Waits for completions.
    pub zcrx_waits: u64,
    /// The rx buffer length the kernel used, bytes.
    pub zcrx_rx_buf_len: u32,
}

/// The receive buffer a server planned for its connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RcvbufFigures {
    /// The `SO_RCVBUF` set (bytes), `null` when the kernel's default was kept.
    pub rcvbuf_set: Option<u64>,
    /// What the kernel reports (`SO_RCVBUF` read back: twice the value set), bytes.
    pub rcvbuf_bytes: u64,
    /// Why that size.
    pub rcvbuf_reason: String,
}

/// A receive's counters: one connection's, or every flow's summed (`RxStats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RxTotals {
    /// Stream bytes received (the measured interval's, with several flows).
    pub bytes: u64,
    /// Dmabuf frags (one token each).
    pub dmabuf_frags: u64,
    /// Bytes in dmabuf frags.
    pub dmabuf_bytes: u64,
    /// Largest dmabuf frag, bytes.
    pub max_dmabuf_frag: u32,
    /// Linear frags.
    pub linear_frags: u64,
    /// Bytes in linear frags.
    pub linear_bytes: u64,
    /// Bytes without a devmem cmsg (plain TCP).
    pub plain_bytes: u64,
    /// Tokens the kernel reported freed.
    pub tokens_released: u64,
    /// `SO_DEVMEM_DONTNEED` calls.
    pub dontneed_calls: u64,
    /// `recvmsg` calls.
    pub recvmsg_calls: u64,
    /// Spurious `EAGAIN`s after a readable poll.
    pub eagain_retries: u64,
    /// `EINTR` retries.
    pub eintr_retries: u64,
    /// `recvmsg` calls that returned control data and no byte.
    pub control_only_recvmsgs: u64,
    /// `poll` calls.
    pub poll_calls: u64,
    /// The process's user CPU seconds over the receive (`null`: unknown).
    pub cpu_user_s: Option<f64>,
    /// The process's system CPU seconds over the receive (`null`: unknown).
    pub cpu_sys_s: Option<f64>,
    /// User + system over wall time, a fraction of one CPU (`null`: unknown or under 10 ms).
    pub cpu_utilisation: Option<f64>,
    /// Bytes checked against the test stream.
    pub validated_bytes: u64,
    /// Bytes that did not match it.
    pub mismatches: u64,
    /// The stream checked (`"period 7"`, `"seed 42"`), `null` without validation.
    pub stream: Option<String>,
    /// CRC-32 of the bytes received from stream offset `crc32_from` on: every byte but a
    /// checked keyed stream's clean start (`null` when no byte was hashed, and for several
    /// flows: each has its own).
    pub crc32: Option<u32>,
    /// The stream offset `crc32` covers from (`null` for several flows).
    pub crc32_from: Option<u64>,
    /// From the first byte to the end (the measured interval, with several flows).
    pub elapsed_s: f64,
    /// `bytes` over `elapsed_s`.
    pub gbit_per_s: f64,
    /// io_uring zcrx only.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub zcrx: Option<ZcrxTotals>,
    /// Devmem only: the receive ended at `ENODEV` after a `-U 1` unbind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_gone: Option<bool>,
    /// When the server sized its receive buffer or was told to.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub rcvbuf: Option<RcvbufFigures>,
    /// `SO_RCVLOWAT` as the kernel kept it, bytes, when `--rcvlowat` set one (one flow; with
    /// several, each flow's is in its `flows` object, as the receive buffer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvlowat_bytes: Option<u64>,
}

/// A flow's io_uring zcrx counters of its own (the ifq's are its worker's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ZcrxFlowCounters {
    /// `RECV_ZC` completions that carried data.
    pub zcrx_chunks: u64,
    /// `RECV_ZC` requests armed.
    pub zcrx_arms: u64,
    /// `ENOSPC`/`ENOMEM` completions retried.
    pub zcrx_retried_errors: u64,
}

/// What the kernel says of a flow's connection (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TcpInfoFigures {
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Retransmits of the segment now being retransmitted.
    pub retransmits: u8,
    /// Retransmits over the connection's life.
    pub total_retrans: u32,
    /// Reordering degree.
    pub reordering: u32,
    /// Receive-side space estimate, bytes.
    pub rcv_space: u32,
    /// Last advertised receive window, bytes (`null`: an older kernel).
    pub rcv_wnd: Option<u32>,
    /// Receive MSS, bytes.
    pub rcv_mss: u32,
    /// Out-of-order packets received (`null`: an older kernel).
    pub rcv_ooopack: Option<u32>,
    /// Bytes received in order (`null`: an older kernel).
    pub bytes_received: Option<u64>,
    /// Segments in (`null`: an older kernel).
    pub segs_in: Option<u32>,
    /// Data segments in (`null`: an older kernel).
    pub data_segs_in: Option<u32>,
}

/// One flow of a receive of several flows (or of a measured one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReceiveFlow {
    /// Its number (flow order).
    pub flow: usize,
    /// The connection reported as this flow, by accept order (`null`: none was).
    pub connection: Option<usize>,
    /// Bytes received, warm-up included.
    pub bytes: u64,
    /// Bytes of the measured interval.
    pub measured_bytes: u64,
    /// Its measured interval, seconds.
    pub measured_s: f64,
    /// `measured_bytes` over `measured_s`.
    pub gbit_per_s: f64,
    /// Dmabuf frags.
    pub dmabuf_frags: u64,
    /// Linear frags.
    pub linear_frags: u64,
    /// Tokens released.
    pub tokens_released: u64,
    /// `SO_DEVMEM_DONTNEED` calls.
    pub dontneed_calls: u64,
    /// `recvmsg` calls.
    pub recvmsg_calls: u64,
    /// Bytes validated.
    pub validated_bytes: u64,
    /// Bytes that mismatched.
    pub mismatches: u64,
    /// The stream its validator checked (`"seed 42 flow 1 of 4"`).
    pub stream: Option<String>,
    /// CRC-32 of its bytes from stream offset `crc32_from` on (`null`: none hashed, every
    /// byte matched a keyed stream).
    pub crc32: Option<u32>,
    /// The stream offset `crc32` covers from.
    pub crc32_from: u64,
    /// The CPU its worker was pinned to (`--cpus`).
    pub cpu: Option<usize>,
    /// Its worker's user CPU seconds over the measured interval.
    pub worker_user_s: Option<f64>,
    /// Its worker's system CPU seconds over the measured interval.
    pub worker_sys_s: Option<f64>,
    /// `SO_INCOMING_NAPI_ID` of its connection.
    pub napi_id: Option<u32>,
    /// The bound RX queue that NAPI instance serves.
    pub rx_queue: Option<u32>,
    /// Where it arrived, in words.
    pub arrival: Option<String>,
    /// Its frag sizes.
    pub frag_sizes: Vec<FragBucket>,
    /// Its verdict (the one verdict's, `src/verdict.rs`).
    pub ok: bool,
    /// Its failures, `; `-joined (`null` when it passed).
    pub error: Option<String>,
    /// When its worker began on it, seconds after the run's clock started (the last accept):
    /// a worker that began late was not run by a starved machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_began_s: Option<f64>,
    /// When its worker was done with it, seconds after the run's clock started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_ended_s: Option<f64>,
    /// io_uring zcrx only.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub zcrx: Option<ZcrxFlowCounters>,
    /// `TCP_INFO` of its connection, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpInfoFigures>,
    /// Its receive buffer (`SO_RCVBUF` read back), bytes, when the server planned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvbuf_bytes: Option<u64>,
    /// Its `SO_RCVLOWAT` as the kernel kept it, bytes, when `--rcvlowat` set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvlowat_bytes: Option<u64>,
    /// The worker that received it, when a worker served several flows (zcrx: its ifq's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
}

/// CPU shares of one group of CPUs over the measured interval, percent of their ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SharesFigure {
    /// user + nice.
    pub usr: f64,
    /// nice alone, the part of `usr` mpstat shows as %nice (`null`/absent: a summary
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nice: Option<f64>,
    /// system.
    pub sys: f64,
    /// hard interrupts.
    pub irq: f64,
    /// softirqs.
    pub softirq: f64,
    /// I/O wait.
    pub iowait: f64,
    /// idle.
    pub idle: f64,
    /// stolen.
    pub steal: f64,
    /// The ticks the shares are of.
    pub ticks: u64,
}

/// One CPU's shares.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CpuShareFigure {
    /// The CPU.
    pub cpu: usize,
    /// Its shares.
    #[serde(flatten)]
    pub shares: SharesFigure,
    /// The NET_RX softirqs it ran over the measured interval (`/proc/softirqs`; absent when
    /// the file could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_rx: Option<u64>,
}

/// The CPU figures of a measured receive (`/proc/stat` over the measured interval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CpuSplit {
    /// The app CPUs: where the workers ran (`--cpus`), else every allowed CPU.
    pub app_cpus: Vec<usize>,
    /// The app CPUs' system share, percent (the kernel series' "app sys %").
    #[serde(rename = "app sys %")]
    pub app_sys: f64,
    /// The app CPUs' idle share, percent.
    #[serde(rename = "app idle %")]
    pub app_idle: f64,
    /// The app CPUs together.
    pub app: SharesFigure,
    /// Every CPU together.
    pub all: SharesFigure,
    /// Each CPU.
    pub per_cpu: Vec<CpuShareFigure>,
    /// The net CPUs: those that ran at least a tenth of the NET_RX softirqs of the measured
    /// interval (where the bound queues' NAPI ran), ascending; absent when `/proc/softirqs`
    /// could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_cpus: Option<Vec<usize>>,
    /// The workers' user CPU as a percent of the app CPUs' busy time.
    pub tool_user_pct_of_app_busy: Option<f64>,
    /// Other tasks' share of the app CPUs' busy time, percent: the busy time less the
    /// workers' user and system time, interrupts and steal (docs/flows.md).
    pub foreign_pct_of_app_busy: Option<f64>,
}

/// A figure that could not be taken, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unavailable {
    /// Why there is no figure.
    pub unavailable: String,
}

/// The CPU figures, or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CpuFigure {
    /// Measured.
    Split(Box<CpuSplit>),
    /// Not measured.
    Unavailable(Unavailable),
}

/// Device RX of the bound queues over the measured interval (`qstats-get`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceRxMeasured {
    /// Growth of the queues' `rx-bytes` (headers included).
    pub bytes: u64,
    /// Growth of their `rx-packets`, when every queue reports it.
    pub packets: Option<u64>,
    /// `bytes` over the interval (`null`: an empty interval).
    pub gbit_per_s: Option<f64>,
    /// Where the figure comes from, in words.
    pub source: String,
    /// Each bound queue's growth, in the order the queues were bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<QueueRxFigure>>,
}

/// One bound RX queue's growth over the measured interval (`qstats-get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QueueRxFigure {
    /// The queue id.
    pub queue: u32,
    /// Its `rx-bytes` growth (headers included).
    pub bytes: u64,
    /// Its `rx-packets` growth (`null`: the queue does not report it).
    pub packets: Option<u64>,
}

/// Device RX, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DeviceRxFigure {
    /// Measured.
    Measured(DeviceRxMeasured),
    /// Not measured.
    Unavailable(Unavailable),
}

/// The page pools of one NAPI instance of the bound queues: their counters' growth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PoolGroupFigure {
    /// The bound queues it serves.
    pub queues: Vec<u32>,
    /// Its NAPI id.
    pub napi_id: u32,
    /// The pools (ids).
    pub pools: Vec<u64>,
    /// Allocations from the lockless cache.
    pub alloc_fast: u64,
    /// Slow-path allocations.
    pub alloc_slow: u64,
    /// Higher-order slow-path allocations.
    pub alloc_slow_high_order: u64,
    /// Times the ring was empty.
    pub alloc_empty: u64,
    /// Cache refills from the ring.
    pub alloc_refill: u64,
    /// Buffers the refill skipped.
    pub alloc_waive: u64,
    /// Buffers recycled into the cache.
    pub recycle_cached: u64,
    /// Recycles refused: cache full.
    pub recycle_cache_full: u64,
    /// Buffers recycled into the ring.
    pub recycle_ring: u64,
    /// Recycles refused: ring full.
    pub recycle_ring_full: u64,
    /// Buffers released because something else held a reference.
    pub recycle_released_refcnt: u64,
}

/// The page pools, or why there are no figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PagePoolsFigure {
    /// Per NAPI instance.
    Groups(Vec<PoolGroupFigure>),
    /// Not measured.
    Unavailable(Unavailable),
}

/// A worker that received several flows (the zcrx server's, one per ifq).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkerFigure {
    /// Its number.
    pub worker: usize,
    /// What it received on (`zcrx ifq 1 on eth0 rx queue 3`).
    pub what: String,
    /// The RX queue it served.
    pub rx_queue: Option<u32>,
    /// Its flows.
    pub flows: Vec<usize>,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Its flows' chunks, summed.
    pub zcrx_chunks: u64,
    /// Buffers its ifq returned.
    pub zcrx_buffers_returned: u64,
    /// Its refill-ring publishes.
    pub zcrx_refill_publishes: u64,
    /// Its flushes.
    pub zcrx_flushes: u64,
    /// Its waits.
    pub zcrx_waits: u64,
    /// Its rx buffer length, bytes.
    pub zcrx_rx_buf_len: u32,
}

/// Whether the run's flows reached every bound queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SteeringFigure {
    /// The bound queues.
    pub bound: Vec<u32>,
    /// Those that received no byte in the measured interval.
    pub unreached: Vec<u32>,
    /// `qstats` (the queues' rx-bytes) or `arrival` (the flows' `SO_INCOMING_NAPI_ID`).
    pub source: String,
}

/// The figures of a measured receive (several flows, or `--duration`, `--warmup`, `--cpus`):
/// the measured interval, every flow, the CPUs, the device and its page pools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Measured {
    /// All flows' frag sizes.
    pub frag_sizes: Vec<FragBucket>,
    /// `--flows`.
    pub flow_count: usize,
    /// The flows' mean Gbit/s.
    pub flow_avg_gbit_per_s: f64,
    /// Their sample standard deviation (0 for one flow).
    pub flow_sd_gbit_per_s: f64,
    /// The measured interval, seconds.
    pub measured_s: f64,
    /// `--warmup`, seconds.
    pub warmup_s: Option<f64>,
    /// `--duration`, seconds.
    pub duration_s: Option<f64>,
    /// With `--duration`: the peers closed every flow before it was over.
    pub ended_before_duration: bool,
    /// The bound queues' page pools (`null`: no device).
    pub page_pools: Option<PagePoolsFigure>,
    /// The CPU figures.
    pub cpu: CpuFigure,
    /// Every flow, in flow order.
    pub flows: Vec<ReceiveFlow>,
    /// The workers that served several flows (zcrx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<WorkerFigure>>,
}

/// A receiver's body (`devmem`, `io_uring zcrx`, `plain TCP`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReceiveBody {
    /// The counters (summed over the flows of a measured run).
    #[serde(flatten)]
    pub totals: RxTotals,
    /// The figures of a measured run.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// Device RX of the bound queues over the measured interval (a one-flow run without a
    /// measurement's options: over its receive), each bound queue's own growth included
    /// (`qstats-get`). A measured run always has the member (`null`: no device, the plain
    /// receiver); a one-flow run without a measurement's options has it only where queues
    /// are bound (the devmem and zcrx servers), `{"unavailable": why}` without qstats.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(with = "Option<DeviceRxFigure>")]
    pub device_rx: Option<Option<DeviceRxFigure>>,
    /// Whether the flows reached every bound queue, from `device_rx`'s queues (else from the
    /// flows' arrival queues); absent without a device or when neither tells. Every receive
    /// with bound queues has it, measured or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<SteeringFigure>,
}

/// A member that may be `null`, as present (`Some`): with `default`, an absent member is
/// `None` and a `null` one `Some(None)` (serde alone reads both as `None`).
fn present<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// One flow of a pattern sender (or of its only flow, for the totals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendFlowFigures {
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// `send` calls.
    pub writes: u64,
    /// CRC-32 of the bytes sent (`null` for the keyed stream, which is not hashed).
    pub crc32: Option<u32>,
    /// The stream sent.
    pub stream: Option<String>,
    /// From connect to the end of the send, seconds.
    pub elapsed_s: f64,
    /// `bytes` over `elapsed_s`.
    pub gbit_per_s: f64,
    /// User CPU seconds (its thread's, or the process's for one flow).
    pub cpu_user_s: Option<f64>,
    /// System CPU seconds.
    pub cpu_sys_s: Option<f64>,
    /// Fraction of one CPU.
    pub cpu_utilisation: Option<f64>,
}

/// One flow of a pattern sender of several flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendFlow {
    /// Its number.
    pub flow: usize,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Its figures.
    #[serde(flatten)]
    pub figures: SendFlowFigures,
}

/// The figures of a pattern sender of several flows (or with `--duration`, `--cpus`,
/// `--tcp-cc`): the totals of every flow and each flow's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendFlows {
    /// Bytes of every flow.
    pub bytes: u64,
    /// The longest flow's time, seconds.
    pub elapsed_s: f64,
    /// `bytes` over `elapsed_s`.
    pub gbit_per_s: f64,
    /// `--flows`.
    pub flow_count: usize,
    /// The process's user CPU seconds.
    pub cpu_user_s: Option<f64>,
    /// The process's system CPU seconds.
    pub cpu_sys_s: Option<f64>,
    /// Fraction of one CPU.
    pub cpu_utilisation: Option<f64>,
    /// Every flow.
    pub flows: Vec<SendFlow>,
}

/// The pattern sender's body: one flow's figures, or several flows'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SendBody {
    /// Several flows (a measured send).
    Flows(SendFlows),
    /// One flow.
    One(SendFlowFigures),
}

/// A devmem TX sender's counters (one flow's, or every flow's summed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevmemTxCounters {
    /// The bind-tx binding.
    pub dmabuf_id: u32,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Sends completed by the kernel (zerocopy completions' ranges).
    pub completed_sends: u64,
    /// `sendmsg` calls.
    pub sends: u64,
    /// Zerocopy completion notifications read.
    pub completions: u64,
    /// Completions flagged `SO_EE_CODE_ZEROCOPY_COPIED`.
    pub copied_completions: u64,
    /// CRC-32 of the bytes sent (`null` for several flows: each has its own).
    pub crc32: Option<u32>,
    /// From connect to the last completion, seconds.
    pub elapsed_s: f64,
    /// `bytes` over `elapsed_s`.
    pub gbit_per_s: f64,
}

/// The devmem TX client's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevmemTxBody {
    /// `"stdin"` or `"pattern"`.
    pub source: String,
    /// The stream sent (`null` for stdin).
    pub stream: Option<String>,
    /// The counters.
    #[serde(flatten)]
    pub counters: DevmemTxCounters,
    /// The single-flow sender's own counters (pieces, retries).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<DevmemTxDetail>,
    /// Several flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_count: Option<usize>,
    /// Every flow, when several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Vec<DevmemTxFlow>>,
}

/// The counters of one devmem TX sender beyond [`DevmemTxCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DevmemTxDetail {
    /// Pieces copied into the dma-buf.
    pub pieces: u64,
    /// Sends the kernel took short.
    pub short_sends: u64,
    /// iovs sent.
    pub iovs: u64,
    /// Waits for a free region of the dma-buf.
    pub buffer_full_waits: u64,
    /// `ENOBUFS` retries.
    pub enobufs_retries: u64,
    /// `EINTR` retries.
    pub eintr_retries: u64,
}

/// One flow of a devmem TX sender of several flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevmemTxFlow {
    /// Its number.
    pub flow: usize,
    /// The stream it sent.
    pub stream: Option<String>,
    /// Its counters.
    #[serde(flatten)]
    pub counters: DevmemTxCounters,
    /// Its own send counters.
    #[serde(flatten)]
    pub detail: DevmemTxDetail,
    /// `"pattern"`.
    pub source: String,
    /// Its window of the dma-buf: offset, bytes.
    pub dmabuf_window_offset: u64,
    /// Its window's size, bytes.
    pub dmabuf_window_bytes: usize,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Its thread's user CPU seconds.
    pub cpu_user_s: Option<f64>,
    /// Its thread's system CPU seconds.
    pub cpu_sys_s: Option<f64>,
    /// Fraction of one CPU.
    pub cpu_utilisation: Option<f64>,
    /// It passed.
    pub ok: bool,
    /// Why it failed.
    pub error: Option<String>,
}

impl std::ops::AddAssign for DevmemTxCounters {
    /// Another flow's counters: the counts and bytes summed, the longest time, the CRC-32 of
    /// no one stream (`None`); the rate is the caller's (over the run's time).
    fn add_assign(&mut self, o: DevmemTxCounters) {
        self.bytes += o.bytes;
        self.completed_sends += o.completed_sends;
        self.sends += o.sends;
        self.completions += o.completions;
        self.copied_completions += o.copied_completions;
        self.crc32 = None;
        self.elapsed_s = self.elapsed_s.max(o.elapsed_s);
    }
}

impl std::ops::AddAssign for DevmemTxDetail {
    /// Another flow's counters, summed.
    fn add_assign(&mut self, o: DevmemTxDetail) {
        self.pieces += o.pieces;
        self.short_sends += o.short_sends;
        self.iovs += o.iovs;
        self.buffer_full_waits += o.buffer_full_waits;
        self.enobufs_retries += o.enobufs_retries;
        self.eintr_retries += o.eintr_retries;
    }
}

/// A mode's body: what follows the envelope.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Body {
    /// A receiver's (`devmem`, `io_uring zcrx`, `plain TCP`).
    Receive(Box<ReceiveBody>),
    /// The pattern sender's.
    Send(SendBody),
    /// The devmem TX client's.
    DevmemTx(Box<DevmemTxBody>),
    /// A sweep's (`--sweep`, `--runs`: [`sweep::SweepBody`]).
    Sweep(Box<sweep::SweepBody>),
    /// `--compare`'s ([`sweep::CompareBody`]).
    Compare(Box<sweep::CompareBody>),
    /// Another mode's object (the probe, the capability report, the peer server),
    /// without the envelope's members ([`Body::other`]).
    Other(serde_json::Map<String, serde_json::Value>),
}

/// The members of [`Envelope`], which a body never repeats.
pub const ENVELOPE_MEMBERS: [&str; 8] = [
    "mode",
    "ok",
    "verdict",
    "error",
    "version",
    "argv",
    "kernel_release",
    "setup",
];

impl SetupStep {
    /// A step named `step` that took `took` (kept in milliseconds to the microsecond).
    pub fn new(step: &str, took: std::time::Duration) -> SetupStep {
        SetupStep {
            step: step.to_string(),
            ms: (took.as_secs_f64() * 1e6).round() / 1e3,
        }
    }
}

impl Body {
    /// The body of an object `v` (members of the envelope left out: the envelope's win); a
    /// value that is no object has none.
    pub fn other(v: serde_json::Value) -> Option<Body> {
        match v {
            serde_json::Value::Object(mut m) => {
                for k in ENVELOPE_MEMBERS {
                    m.remove(k);
                }
                Some(Body::Other(m))
            }
            _ => None,
        }
    }

    /// Bytes, Gbit/s and CRC-32 of a body that moved a stream, for the `--quiet` pass line
    /// (the CRC-32 of one stream only).
    pub(crate) fn stream_figures(&self) -> Option<(u64, f64, Option<u32>)> {
        match self {
            Body::Receive(b) => Some((b.totals.bytes, b.totals.gbit_per_s, b.totals.crc32)),
            Body::Send(SendBody::One(f)) => Some((f.bytes, f.gbit_per_s, f.crc32)),
            Body::Send(SendBody::Flows(f)) => Some((f.bytes, f.gbit_per_s, None)),
            Body::DevmemTx(b) => Some((b.counters.bytes, b.counters.gbit_per_s, b.counters.crc32)),
            Body::Sweep(_) | Body::Compare(_) | Body::Other(_) => None,
        }
    }
}

/// A whole `--json` object: the envelope, then the mode's body (none for a run that ended
/// before its summary: no connection, a skip, a refused bind).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The envelope.
    #[serde(flatten)]
    pub envelope: Envelope,
    /// The body.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every member name a type's derived schema gives an object of it: its properties,
    /// those of the structs it flattens and those of every variant of an enum.
    fn member_names(root: &serde_json::Value) -> std::collections::BTreeSet<String> {
        fn walk(
            v: &serde_json::Value,
            defs: &serde_json::Value,
            seen: &mut Vec<String>,
            out: &mut std::collections::BTreeSet<String>,
        ) {
            if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
                out.extend(props.keys().cloned());
            }
            if let Some(r) = v.get("$ref").and_then(|r| r.as_str()) {
                let name = r.trim_start_matches("#/$defs/").to_string();
                if !seen.contains(&name) {
                    seen.push(name.clone());
                    walk(&defs[name.as_str()], defs, seen, out);
                }
            }
            for key in ["allOf", "anyOf", "oneOf"] {
                for sub in v.get(key).and_then(|a| a.as_array()).into_iter().flatten() {
                    walk(sub, defs, seen, out);
                }
            }
        }
        let mut out = std::collections::BTreeSet::new();
        walk(root, &root["$defs"], &mut Vec::new(), &mut out);
        out
    }

    /// docs/summary.schema.json describes no member the types do not have: each of its
    /// bodies' and flows' properties and required members is a field of the type that writes
    /// it (the schema's constraints stay hand-written; the members come from these types).
    #[test]
    fn the_documented_schema_names_only_members_of_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/summary.schema.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
        let derived = |s: schemars::Schema| member_names(&serde_json::to_value(s).expect("schema"));
        let pairs = [
            ("receiver", derived(schemars::schema_for!(ReceiveBody))),
            ("receiver_flow", derived(schemars::schema_for!(ReceiveFlow))),
            ("sender", derived(schemars::schema_for!(SendBody))),
            ("sender_flow", derived(schemars::schema_for!(SendFlow))),
            ("devmem_tx", derived(schemars::schema_for!(DevmemTxBody))),
            (
                "devmem_tx_flow",
                derived(schemars::schema_for!(DevmemTxFlow)),
            ),
            ("report", derived(schemars::schema_for!(report::ReportBody))),
            ("probe", derived(schemars::schema_for!(report::ProbeBody))),
        ];
        let envelope = derived(schemars::schema_for!(Envelope));
        let mut wrong = Vec::new();
        for name in doc["required"].as_array().expect("required") {
            let name = name.as_str().expect("a name");
            if !envelope.contains(name) {
                wrong.push(format!("envelope: {name}"));
            }
        }
        for (def, members) in &pairs {
            assert!(!members.is_empty(), "{def}: no members derived");
            let d = &doc["$defs"][*def];
            let props = d["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k);
            let required = d["required"].as_array().into_iter().flatten();
            let required = required.map(|k| k.as_str().expect("a name"));
            for k in props.map(String::as_str).chain(required) {
                if !members.contains(k) {
                    wrong.push(format!("{def}: {k}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "docs/summary.schema.json names members no type has: {wrong:?}"
        );
    }

    /// The bodies the tool writes today parse into these types and come back the same:
    /// every member is a field, none is lost or added.
    #[test]
    fn todays_bodies_round_trip() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/summary");
        let envelope = [
            "mode",
            "ok",
            "verdict",
            "error",
            "version",
            "argv",
            "kernel_release",
        ];
        for (file, kind) in [
            ("plain-1-flow.json", "rx"),
            ("plain-1-flow-wrong-seed.json", "rx"),
            ("plain-2-flows-timed.json", "rx"),
            ("devmem-1-flow-body.json", "rx"),
            ("zcrx-1-flow-body.json", "rx"),
            ("zcrx-3-flows-body.json", "rx"),
            ("sender-1-flow.json", "tx"),
            ("sender-2-flows.json", "tx"),
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let obj = v.as_object_mut().unwrap();
            for k in envelope {
                obj.remove(k);
            }
            // Members of today's bodies the types drop, as documented in docs/json.md: a
            // multi-flow sender's `ok` (the envelope's) and each of its flows' `mode`.
            if kind == "tx" {
                obj.remove("ok");
                if let Some(flows) = obj.get_mut("flows").and_then(|f| f.as_array_mut()) {
                    for f in flows {
                        f.as_object_mut().unwrap().remove("mode");
                    }
                }
            }
            let back = match kind {
                "rx" => {
                    let b: ReceiveBody =
                        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
                    serde_json::to_value(b).unwrap()
                }
                _ => {
                    let b: SendBody =
                        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
                    serde_json::to_value(b).unwrap()
                }
            };
            assert_eq!(back, v, "{file}");
        }
    }
}
