//! The lab's JSON as types: the body of a sweep (or of one configuration run `--runs R` times)
//! — its plan, environment, provenance, every point's statistics and every run — and the
//! comparison of two such files (`--compare BASE.json NEW.json`, a sweep's `--baseline`).
//! `docs/lab.md` explains every member; `--compare` reads the files back through these types.
//!
//! Units as in [`super`]: bytes, seconds (`_s`), Gbit/s (`_gbps`), percent (`_pct`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Envelope, ReceiveBody};

/// An optional member that must still be present (`null` when absent): serde takes a missing
/// `Option` as `None`, which would let an object without it pass.
fn required<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// What the peer measured of one run's send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerFigures {
    /// Payload bytes sent over all flows.
    pub bytes: u64,
    /// Wall time of the send, seconds (the longest flow's).
    pub elapsed_s: f64,
    /// `bytes` over `elapsed_s`, Gbit/s.
    pub gbit_per_s: f64,
    /// Payload bytes of each flow, flow k at index k.
    pub flow_bytes: Vec<u64>,
    /// The peer's CPUs over the send (all CPUs, `/proc/stat`), percent; `None` when
    /// `/proc/stat` could not be read.
    #[serde(deserialize_with = "required")]
    pub cpu: Option<PeerCpu>,
    /// Why the send ended early, if it failed (a connect refused, a reset): the run's
    /// receiver decides what that means for the run.
    #[serde(deserialize_with = "required")]
    pub error: Option<String>,
}

impl PeerFigures {
    /// What makes these figures impossible for a send of `flows` flows, in words; `None` when
    /// they hold together. A peer is another host's process: its `done` is input, and a table,
    /// a mean or a comparison built on a non-finite or self-contradicting figure (a rate that
    /// is not `bytes` over `elapsed_s`, flows that do not add up to `bytes`, a CPU share
    /// outside 0..=100 %) would be wrong without saying so. A failed send (`error` set) may
    /// have fewer flow entries than `flows`.
    pub fn implausible(&self, flows: u32) -> Option<String> {
        // `-0.0` is no time a clock measures (and would print as `-0.00`).
        let finite = |x: f64| x.is_finite() && x.is_sign_positive();
        if !finite(self.elapsed_s) || !finite(self.gbit_per_s) {
            return Some(format!(
                "elapsed_s {} and gbit_per_s {} must be finite and not negative",
                self.elapsed_s, self.gbit_per_s
            ));
        }
        if self.bytes > 0 && self.elapsed_s == 0.0 {
            return Some(format!("{} bytes sent in 0 s", self.bytes));
        }
        let rate = if self.elapsed_s > 0.0 {
            self.bytes as f64 * 8.0 / self.elapsed_s / 1e9
        } else {
            0.0
        };
        if (self.gbit_per_s - rate).abs() > rate * 0.01 + 1e-6 {
            return Some(format!(
                "gbit_per_s {} is not its {} bytes over {} s ({rate:.6})",
                self.gbit_per_s, self.bytes, self.elapsed_s
            ));
        }
        let sum = self
            .flow_bytes
            .iter()
            .try_fold(0u64, |a, &b| a.checked_add(b));
        if sum != Some(self.bytes)
            || (self.error.is_none() && self.flow_bytes.len() != flows as usize)
            || self.flow_bytes.len() > flows as usize
        {
            return Some(format!(
                "flow_bytes {:?} are not {} bytes over {flows} flow(s)",
                self.flow_bytes, self.bytes
            ));
        }
        if let Some(c) = &self.cpu {
            let shares = [c.usr, c.sys, c.softirq, c.idle];
            if shares.iter().any(|&x| !(0.0..=100.5).contains(&x))
                || shares.iter().sum::<f64>() > 100.5
            {
                return Some(format!(
                    "CPU shares usr {} sys {} softirq {} idle {} are not percentages of one \
                     whole",
                    c.usr, c.sys, c.softirq, c.idle
                ));
            }
        }
        None
    }
}

/// The peer's CPU shares over a send, percent of all CPUs' time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerCpu {
    /// User time.
    pub usr: f64,
    /// System time.
    pub sys: f64,
    /// Softirq time.
    pub softirq: f64,
    /// Idle time.
    pub idle: f64,
}

/// The numbers of one run that the table, the CSV, the plot and the comparison show, by the
/// CSV's names; `null` where the run has no such figure (`docs/lab.md` says where each comes
/// from).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunNumbers {
    /// Device RX Gbit/s: the bound queues' qstats `rx-bytes` over the measured interval
    /// (headers included).
    pub rx_dev_gbps: Option<f64>,
    /// The flows' mean payload Gbit/s over the measured interval.
    pub rx_flow_avg_gbps: Option<f64>,
    /// All flows' payload Gbit/s over the measured interval.
    pub rx_gbps: Option<f64>,
    /// All flows' payload, MB/s (10⁶ bytes), as the zcrx series reports it.
    pub rx_mb_per_s: Option<f64>,
    /// The app CPUs' user share, percent.
    pub app_usr_pct: Option<f64>,
    /// The app CPUs' system share, percent ("app sys %").
    pub app_sys_pct: Option<f64>,
    /// The app CPUs' softirq share, percent.
    pub app_softirq_pct: Option<f64>,
    /// The app CPUs' idle share, percent ("app idle %", the token series' "RX worker idle %").
    pub app_idle_pct: Option<f64>,
    /// Frags (dmabuf and linear) per GiB of the flows' bytes, over the whole receive.
    pub frags_per_gib: Option<f64>,
    /// `SO_DEVMEM_DONTNEED` calls per GiB, over the whole receive.
    pub dontneed_per_gib: Option<f64>,
    /// zcrx `RECV_ZC` completions with data per GiB, over the whole receive.
    pub completions_per_gib: Option<f64>,
    /// The peer's send rate over its whole send (its connects, the receiver's warm-up and
    /// the bytes left queued at the receiver's close included): Gbit/s.
    pub peer_send_gbps: Option<f64>,
    /// Payload bytes of the measured interval.
    pub bytes: Option<u64>,
    /// Each bound queue's RX bytes over the measured interval (qstats), in queue order;
    /// empty without queue stats.
    #[serde(default)]
    pub queue_rx_bytes: Vec<QueueBytes>,
}

/// One bound RX queue's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QueueBytes {
    /// The queue id.
    pub queue: u32,
    /// Its `rx-bytes` growth.
    pub bytes: u64,
}

/// Mean, sample standard deviation and count of one figure at one point, over the runs that
/// passed and have it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatFigure {
    /// The mean.
    pub mean: f64,
    /// The sample standard deviation (n − 1); `null` for one run, which has none.
    pub sd: Option<f64>,
    /// Runs counted (1 or more).
    pub n: usize,
}

/// One point of a sweep: its value and every figure's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PointFigure {
    /// The swept value (`null`: one configuration; a named key's: the position of its name
    /// in the plan's `names`).
    pub value: Option<u64>,
    /// The value as the table shows it (`4K`, `on`, a tcp-cc point's name).
    pub label: String,
    /// Runs of the point that passed.
    pub runs_ok: usize,
    /// Every figure by its CSV name (`rx_q4_bytes` for a bound queue's bytes): `null` where
    /// no passed run has it.
    pub columns: BTreeMap<String, Option<StatFigure>>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcomeName {
    /// Passed.
    Ok,
    /// Failed.
    Fail,
    /// Skipped.
    Skip,
}

/// NET_RX softirqs of one CPU over a run's measured interval (`/proc/softirqs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CpuNetRx {
    /// The CPU.
    pub cpu: usize,
    /// NET_RX softirqs it ran.
    pub net_rx: u64,
}

/// Where the run's receive processing ran: the NET_RX softirqs per CPU over its measured
/// interval (the run's own reading, its body's `cpu`), and
/// the net CPUs (those that ran at least a tenth of them) beside the app CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NetRxFigure {
    /// Each CPU's NET_RX softirqs over the measured interval, in CPU order (the CPUs of the
    /// run's per-CPU table).
    pub per_cpu: Vec<CpuNetRx>,
    /// The CPUs that ran at least 10 % of them: where the bound queues' NAPI ran.
    pub net_cpus: Vec<usize>,
    /// The app CPUs (where the workers ran).
    pub app_cpus: Vec<usize>,
}

/// Whether the run's flows reached every bound queue (the run summary's own type).
pub(crate) use super::SteeringFigure;

/// A `--pre-run` or `--post-run` hook of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HookFigure {
    /// `pre-run` or `post-run`.
    pub hook: String,
    /// Its exit code (`null`: killed by a signal, or it did not start).
    pub exit_code: Option<i32>,
    /// Why it failed (`null`: it passed).
    pub error: Option<String>,
}

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFigure {
    /// Its position among all runs (1-based).
    pub index: usize,
    /// Its point (0-based index into `points`).
    pub point: usize,
    /// Its point's value.
    pub value: Option<u64>,
    /// Its run number at its point (1-based).
    pub run: u32,
    /// How it ended.
    pub outcome: RunOutcomeName,
    /// Why it failed or was skipped.
    pub error: Option<String>,
    /// Its numbers.
    pub numbers: RunNumbers,
    /// The peer's figures of its send.
    pub peer: Option<PeerFigures>,
    /// The receiver's full body (`docs/json.md`), when it got that far.
    pub figures: Option<ReceiveBody>,
    /// Where its NET_RX processing ran.
    #[serde(default)]
    pub net_rx: Option<NetRxFigure>,
    /// Whether its flows reached every bound queue (`null`: no device, no figure).
    #[serde(default)]
    pub steering: Option<SteeringFigure>,
    /// Its hooks.
    #[serde(default)]
    pub hooks: Vec<HookFigure>,
}

/// The plan of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanFigure {
    /// The swept key (`null`: one configuration).
    pub key: Option<String>,
    /// Its values, in the order given; a named key's (`tcp-cc`) are its names' positions
    /// in `names`.
    pub values: Vec<Option<u64>>,
    /// A named key's names (`tcp-cc`: the congestion controls), by value; absent for the
    /// others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Runs of every point.
    pub runs: u32,
    /// In words: run 1 of every point, then run 2, ...
    pub order: String,
}

/// The bound queues of a run, as `-t`/`-q` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QueueRangeFigure {
    /// The first.
    pub start: u32,
    /// How many.
    pub count: u32,
}

/// What every run of a sweep shares: the receive, the peer and how it sends. Two sweeps of
/// different shape (the members `--compare` checks) measure different things.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepEnvironment {
    /// `uname -r` of the receiver.
    pub kernel_release: Option<String>,
    /// The receive mode's summary name (`devmem`, `io_uring zcrx`, `plain TCP`).
    pub receive_mode: String,
    /// `-f`.
    pub interface: Option<String>,
    /// Its driver (sysfs).
    pub driver: Option<String>,
    /// `-t`/`-q`.
    pub queues: Option<QueueRangeFigure>,
    /// `--cpus`, else the CPUs the process may run on.
    pub cpus: Option<Vec<usize>>,
    /// `--flows` (`null` when the sweep's key is `flows`: each point has its own).
    pub flows: Option<u32>,
    /// `--duration`, seconds.
    pub duration_s: f64,
    /// `--warmup`, seconds.
    pub warmup_s: Option<f64>,
    /// `--tcp-cc`.
    pub tcp_cc: Option<String>,
    /// The peer's control address.
    pub peer: String,
    /// `plain` or `devmem`.
    pub peer_send: String,
    /// `--write-size`.
    pub peer_write_size: Option<u64>,
    /// `--dmabuf-size` (devmem binding, zcrx area), bytes.
    #[serde(default)]
    pub dmabuf_size: Option<u64>,
    /// `-b` when not swept, bytes.
    #[serde(default)]
    pub rx_page_size: Option<u32>,
    /// `--rx-buf-len` when not swept, bytes.
    #[serde(default)]
    pub rx_buf_len: Option<u32>,
    /// `--hds-thresh` when not swept, bytes.
    #[serde(default)]
    pub hds_thresh: Option<u32>,
}

/// The NIC under test as `SIOCETHTOOL` drvinfo names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicProvenance {
    /// The interface.
    pub ifname: String,
    /// Its driver.
    pub driver: String,
    /// The driver's version.
    pub driver_version: String,
    /// Its firmware version.
    pub firmware: String,
    /// Its bus address (empty for a virtual device).
    pub bus: String,
}

/// One bound RX queue's interrupt: its NAPI instance's IRQ (netdev `napi-get`) and that IRQ's
/// affinity (`/proc/irq/N/smp_affinity_list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueIrq {
    /// The RX queue.
    pub queue: u32,
    /// Its NAPI id (`null`: the driver reports none).
    pub napi_id: Option<u32>,
    /// The IRQ (`null`: none set by the driver).
    pub irq: Option<u32>,
    /// Its affinity, a CPU list (`null`: unreadable).
    pub affinity: Option<String>,
}

/// Where a table's numbers came from: the tool, the host, the kernel, the CPUs, the NIC and
/// the settings that shape a run. Every member is `null` (or empty) where it could not be read,
/// and present: a member missing or unknown is refused when it is read (the peer sends it over
/// the control protocol, whose members are all required).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The tool's version, commit and target (`ncdevmem-rs --version`).
    pub version: String,
    /// The host name.
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub host_name: Option<String>,
    /// `uname -r`.
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub kernel_release: Option<String>,
    /// `/proc/cmdline`.
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub kernel_cmdline: Option<String>,
    /// The CPU model (`/proc/cpuinfo`).
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub cpu_model: Option<String>,
    /// The online CPUs, a CPU list.
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub online_cpus: Option<String>,
    /// The frequency governor of the online CPUs (`performance`; `cpu0-1 performance, cpu2
    /// powersave` where they differ; `null` without cpufreq).
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub governor: Option<String>,
    /// The NIC (`null`: no `-f`, or drvinfo refused).
    #[schemars(required)]
    #[serde(deserialize_with = "required")]
    pub nic: Option<NicProvenance>,
    /// The bound queues' IRQs and their affinity (empty: none known).
    pub queue_irqs: Vec<QueueIrq>,
    /// The sysctls that shape a run, by name (`net.ipv4.tcp_rmem`), as the files read.
    pub sysctls: BTreeMap<String, Option<String>>,
}

/// A sweep's body (the summary's members after the envelope, [`super::Envelope`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepBody {
    /// Why the sweep stopped before its last planned run (`null`: it did not).
    #[schemars(required)]
    pub stopped: Option<String>,
    /// `ncdevmem-rs`.
    pub tool: String,
    /// The command line, as typed.
    pub command_line: Vec<String>,
    /// What every run shares.
    pub environment: SweepEnvironment,
    /// This host's provenance.
    pub provenance: Provenance,
    /// The peer's, as it reported it (`null`: an older peer that does not).
    #[schemars(required)]
    pub peer_provenance: Option<Provenance>,
    /// The plan.
    pub plan: PlanFigure,
    /// Every point's statistics.
    pub points: Vec<PointFigure>,
    /// Every run.
    pub runs: Vec<RunFigure>,
    /// With `--baseline`: this sweep against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

/// A sweep's whole JSON file: the envelope and the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SweepFile {
    /// The members every summary opens with.
    #[serde(flatten)]
    pub envelope: Envelope,
    /// The sweep's.
    #[serde(flatten)]
    pub body: SweepBody,
}

/// One difference between the environments of the compared files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnvDifference {
    /// What differs (`kernel release`, `CPU model`, `sysctl net.ipv4.tcp_rmem`).
    pub what: String,
    /// The base's.
    pub base: String,
    /// The new one's.
    pub new: String,
    /// `warning` where it can explain a difference by itself (another CPU model, another
    /// governor), else `note`.
    pub level: String,
}

/// One figure at one pair of matched points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComparisonCell {
    /// The figure's CSV name.
    pub key: String,
    /// Its column header.
    pub name: String,
    /// The base's statistics (`null`: it has none).
    pub base: Option<StatFigure>,
    /// The new one's.
    pub new: Option<StatFigure>,
    /// (new − base) / base, percent (`null`: a base mean of 0, or a side without figures).
    pub delta_pct: Option<f64>,
    /// The 95 % confidence interval of new − base (Welch), `[low, high]`.
    pub ci95: Option<[f64; 2]>,
    /// Welch's t-test two-sided p (`null`: fewer than 2 runs on a side, or no spread).
    pub p: Option<f64>,
    /// p < 0.05.
    pub significant: bool,
}

/// One pair of matched points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComparisonRow {
    /// The base's point (its label).
    pub base_point: String,
    /// The new one's.
    pub new_point: String,
    /// Every compared figure.
    pub cells: Vec<ComparisonCell>,
}

/// Two sweeps (or repeated runs) compared point by point (`--compare`, `--baseline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Comparison {
    /// The base file.
    pub base: String,
    /// The new file (`null`: the sweep itself, with `--baseline`).
    pub new: Option<String>,
    /// Differences of shape found (the files were compared only as told: `--any-shape`).
    pub shape_differences: Vec<String>,
    /// Differences of environment.
    pub environment_differences: Vec<EnvDifference>,
    /// `value` (points of the same swept value), `name` (a `tcp-cc` sweep's points, of the
    /// same congestion control) or `position` (the swept values differ: the k-th point of
    /// each).
    pub matched_by: String,
    /// Points of either side without a match, by label.
    pub unmatched: Vec<String>,
    /// Every matched pair.
    pub rows: Vec<ComparisonRow>,
    /// The significance level of the marks: 0.05.
    pub alpha: f64,
}

/// `--compare`'s body (after the envelope).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompareBody {
    /// The comparison.
    pub comparison: Comparison,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys every sweep JSON must carry for its numbers to be traced: the schema of
    /// [`SweepBody`] requires the provenance and the provenance requires each of its members.
    #[test]
    fn the_schema_requires_the_provenance() {
        let schema = serde_json::to_value(schemars::schema_for!(SweepBody)).unwrap();
        let required = |v: &serde_json::Value| -> Vec<String> {
            v["required"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let top = required(&schema);
        for k in [
            "provenance",
            "environment",
            "plan",
            "points",
            "runs",
            "stopped",
        ] {
            assert!(top.contains(&k.to_string()), "{k} not required: {top:?}");
        }
        let prov = &schema["$defs"]["Provenance"];
        let keys = required(prov);
        for k in [
            "version",
            "host_name",
            "kernel_release",
            "kernel_cmdline",
            "cpu_model",
            "online_cpus",
            "governor",
            "nic",
            "queue_irqs",
            "sysctls",
        ] {
            assert!(keys.contains(&k.to_string()), "{k} not required: {keys:?}");
        }
    }
}
