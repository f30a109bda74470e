//! The results of a sweep: each run's numbers (taken from the run's own summary, read as
//! [`ReceiveBody`], and the peer's `done` figures), their mean and sample standard deviation per
//! point, and the three renderings — the table on stdout, one CSV row per run, and the numbers the
//! JSON file and the plot take. Pure: no syscalls.
//!
//! The table's first columns are the seeds' own, in their order and spelling:
//! `niov  RX dev Gbps  RX flow avg Gbps  app sys %` (the rx-page-size series; the first
//! column is named after the swept key), then this tool's own. For `rx-buf-len` the columns
//! follow the zcrx series (MB/s and the app CPUs' `%usr %sys %soft %idle`); for `autorelease`
//! the token-management series' `RX worker idle %` comes first. A value is `mean +/- sd` over
//! the runs of that point that passed (sample standard deviation, [`crate::stats::mean_sd`]);
//! one run has no sd (`mean +/- -`); a figure that only some of the passed runs have says its
//! count (` (n=K)`); `-` where no run has the figure (a plain receiver has no device counters:
//! the socket's figure is never copied into `RX dev Gbps`).

use std::borrow::Cow;

use super::plan::{Plan, Slot, SweepKey};
use super::proto::PeerFigures;
pub(crate) use super::table::Grid;
use super::table::{render_blocks, Format, MAIL_WIDTH};
use crate::figures::cpu::CpuShares;
use crate::summary::sweep::{HookFigure, NetRxFigure, PointFigure, QueueBytes, SteeringFigure};
use crate::summary::{CpuFigure, DeviceRxFigure, ModeName, ReceiveBody, SharesFigure};

/// Bytes in a GiB, for the per-GiB columns.
const GIB: f64 = (1u64 << 30) as f64;

/// How one run ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Passed.
    Ok,
    /// Failed (validation, a flow, the NIC undo): the error.
    Failed(String),
    /// Skipped (the kernel lacks what the point needs): the reason.
    Skipped(String),
}

impl Outcome {
    /// `ok`, `fail` or `skip`, as the JSON summaries name verdicts.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed(_) => "fail",
            Outcome::Skipped(_) => "skip",
        }
    }

    /// The error or skip reason.
    pub(crate) fn why(&self) -> Option<&str> {
        match self {
            Outcome::Ok => None,
            Outcome::Failed(w) | Outcome::Skipped(w) => Some(w),
        }
    }
}

/// A whole sweep's verdict, from the outcomes of its runs ([`sweep_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SweepVerdict {
    /// Every planned run ran and passed: exit 0.
    Pass {
        /// The planned runs (all passed).
        planned: usize,
    },
    /// At least one run failed (whatever else was skipped): exit 1.
    Fail {
        /// Runs that failed.
        failed: usize,
        /// Runs with an outcome (passed, failed or skipped).
        ran: usize,
    },
    /// No run failed and at least one planned run was skipped (a point the kernel or the
    /// host cannot run): exit 4, also when other points passed.
    Skip {
        /// Runs skipped.
        skipped: usize,
        /// The planned runs.
        planned: usize,
    },
    /// The sweep stopped before its last planned run (the peer, a stop signal, a usage
    /// error), or fewer runs have an outcome than were planned: the stop's own error decides
    /// the exit code (1, or 2 for a usage error).
    Stopped {
        /// Runs with an outcome.
        ran: usize,
        /// The planned runs.
        planned: usize,
    },
}

impl SweepVerdict {
    /// `pass`, `fail`, `skip` (a stopped sweep is `fail`), as the JSON summaries name
    /// verdicts.
    #[cfg(test)]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SweepVerdict::Pass { .. } => "pass",
            SweepVerdict::Skip { .. } => "skip",
            SweepVerdict::Fail { .. } | SweepVerdict::Stopped { .. } => "fail",
        }
    }

    /// The exit code of the verdict (a stopped sweep: 1, unless its stop says otherwise).
    #[cfg(test)]
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            SweepVerdict::Pass { .. } => crate::error::EXIT_OK,
            SweepVerdict::Skip { .. } => crate::error::EXIT_SKIP,
            SweepVerdict::Fail { .. } | SweepVerdict::Stopped { .. } => crate::error::EXIT_FAIL,
        }
    }
}

impl std::fmt::Display for SweepVerdict {
    /// The table's last line: `sweep: pass: all 4 planned runs passed`, `sweep: FAILED: 1 of
    /// 4 runs failed (marked above)`, `sweep: skip: 2 of 4 planned runs skipped (named
    /// above), none failed`, `sweep: stopped after 1 of 4 planned runs`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            SweepVerdict::Pass { planned } => {
                write!(f, "sweep: pass: all {planned} planned runs passed")
            }
            SweepVerdict::Fail { failed, ran } => {
                write!(
                    f,
                    "sweep: FAILED: {failed} of {ran} runs failed (marked above)"
                )
            }
            SweepVerdict::Skip { skipped, planned } => write!(
                f,
                "sweep: skip: {skipped} of {planned} planned runs skipped (named above), \
                 none failed"
            ),
            SweepVerdict::Stopped { ran, planned } => {
                write!(f, "sweep: stopped after {ran} of {planned} planned runs")
            }
        }
    }
}

/// The verdict of a sweep of `planned` runs from the `outcomes` of the runs it has, and
/// whether it `stopped` early. In this order: a stopped sweep, or one with fewer outcomes
/// than planned runs, is [`SweepVerdict::Stopped`]; any failed run makes it
/// [`SweepVerdict::Fail`]; else any skipped run [`SweepVerdict::Skip`]; else every planned
/// run passed: [`SweepVerdict::Pass`]. (A sweep of no planned runs cannot pass: the command
/// line refuses `--runs 0`, and such a sweep is `Stopped`.)
pub(crate) fn sweep_verdict<'a>(
    outcomes: impl IntoIterator<Item = &'a Outcome>,
    planned: usize,
    stopped: bool,
) -> SweepVerdict {
    let (mut ran, mut failed, mut skipped) = (0, 0, 0);
    for o in outcomes {
        ran += 1;
        match o {
            Outcome::Ok => {}
            Outcome::Failed(_) => failed += 1,
            Outcome::Skipped(_) => skipped += 1,
        }
    }
    if stopped || ran < planned || planned == 0 {
        SweepVerdict::Stopped { ran, planned }
    } else if failed > 0 {
        SweepVerdict::Fail { failed, ran }
    } else if skipped > 0 {
        SweepVerdict::Skip { skipped, planned }
    } else {
        SweepVerdict::Pass { planned }
    }
}

/// The numbers of one run that the table, the CSV, the plot and the comparison show
/// ([`of_run`]); `None` where the run has no such figure.
pub(crate) use crate::summary::sweep::RunNumbers as Numbers;

/// The stream bytes a receiver got over all its flows, warm-up included: its flows' own
/// counts where it reports flows, else its total (a summary's `bytes` is the measured
/// interval's).
pub(crate) fn received_bytes(body: &ReceiveBody) -> u64 {
    match body.measured.as_ref().map(|m| &m.flows) {
        Some(flows) if !flows.is_empty() => flows.iter().map(|f| f.bytes).sum(),
        _ => body.totals.bytes,
    }
}

/// The numbers of a run from its summary `body` (the receive mode `mode`'s), the peer's
/// figures, and `cpu`: the CPU shares over the whole run measured around it, used only where
/// the mode's summary has no CPU table of its own.
pub(crate) fn of_run(
    mode: ModeName,
    body: &ReceiveBody,
    peer: Option<&PeerFigures>,
    cpu: Option<&CpuShares>,
) -> Numbers {
    let t = &body.totals;
    let m = body.measured.as_ref();
    let finite = |x: f64| Some(x).filter(|x| x.is_finite());
    // Frag and call counters cover the whole receive, warm-up included; so do the flows' own
    // byte counts (the summary's `bytes` is the measured interval's).
    let all_bytes = received_bytes(body);
    let per_gib = |count: u64| (all_bytes > 0).then(|| count as f64 * GIB / all_bytes as f64);
    let devmem = mode == ModeName::Devmem;
    let rx_gbps = finite(t.gbit_per_s);
    let split = m.and_then(|m| match &m.cpu {
        CpuFigure::Split(s) => Some(s.app),
        CpuFigure::Unavailable(_) => None,
    });
    let app = |pick: fn(&SharesFigure) -> f64, whole: fn(&CpuShares) -> f64| match split {
        Some(s) => finite(pick(&s)),
        None => cpu.map(whole).and_then(finite),
    };
    let device = match &body.device_rx {
        Some(Some(DeviceRxFigure::Measured(d))) => Some(d),
        _ => None,
    };
    Numbers {
        rx_dev_gbps: device.and_then(|d| d.gbit_per_s).and_then(finite),
        rx_flow_avg_gbps: m.and_then(|m| finite(m.flow_avg_gbit_per_s)).or(rx_gbps),
        rx_gbps,
        rx_mb_per_s: rx_gbps.map(|g| g * 1e9 / 8.0 / 1e6),
        app_usr_pct: app(|s| s.usr, |c| c.usr),
        app_sys_pct: app(|s| s.sys, |c| c.sys),
        app_softirq_pct: app(|s| s.softirq, |c| c.softirq),
        app_idle_pct: app(|s| s.idle, |c| c.idle),
        frags_per_gib: devmem
            .then(|| per_gib(t.dmabuf_frags + t.linear_frags))
            .flatten(),
        dontneed_per_gib: devmem.then(|| per_gib(t.dontneed_calls)).flatten(),
        completions_per_gib: t.zcrx.and_then(|z| per_gib(z.zcrx_chunks)),
        peer_send_gbps: peer.and_then(|p| finite(p.gbit_per_s)),
        bytes: Some(t.bytes),
        queue_rx_bytes: device
            .and_then(|d| d.queues.as_ref())
            .map(|qs| {
                qs.iter()
                    .map(|q| QueueBytes {
                        queue: q.queue,
                        bytes: q.bytes,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Whether a run's traffic reached every bound queue, from its summary `body`: the run's own
/// `steering`, else the bound queues' own RX bytes over the measured interval
/// (`device_rx.queues`, qstats; a queue without a byte was not reached). `None` without those
/// figures (no device, the plain receiver; a kernel without queue stats).
pub(crate) fn steering_of(body: &ReceiveBody) -> Option<SteeringFigure> {
    if let Some(s) = &body.steering {
        // The run's own (qstats, else the flows' arrival queues).
        return Some(s.clone());
    }
    let Some(Some(DeviceRxFigure::Measured(d))) = &body.device_rx else {
        return None;
    };
    let queues = d.queues.as_ref().filter(|q| !q.is_empty())?;
    Some(SteeringFigure {
        bound: queues.iter().map(|q| q.queue).collect(),
        unreached: queues
            .iter()
            .filter(|q| q.bytes == 0)
            .map(|q| q.queue)
            .collect(),
        source: "qstats".into(),
    })
}

/// Where a run's NET_RX softirqs ran, from its summary `body`: each CPU's NET_RX softirqs
/// over the run's measured interval (the per-CPU table's, `cpu.per_cpu[k].net_rx`), the net
/// CPUs among them (`cpu.net_cpus`) and the app CPUs. `None` when the run has no such
/// reading: no measured figures (it ended before its summary), no `/proc/stat` or
/// `/proc/softirqs` reading.
pub(crate) fn net_rx_of(body: &ReceiveBody) -> Option<NetRxFigure> {
    let CpuFigure::Split(split) = &body.measured.as_ref()?.cpu else {
        return None;
    };
    Some(NetRxFigure {
        per_cpu: split
            .per_cpu
            .iter()
            .filter_map(|c| {
                c.net_rx
                    .map(|net_rx| crate::summary::sweep::CpuNetRx { cpu: c.cpu, net_rx })
            })
            .collect(),
        net_cpus: split.net_cpus.clone()?,
        app_cpus: split.app_cpus.clone(),
    })
}

/// `0-3,6`: a CPU list as `--cpus` takes it (`-`: none).
fn cpu_list(cpus: &[usize]) -> String {
    let mut v: Vec<usize> = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => v[i].to_string(),
            1 => format!("{},{}", v[i], v[j]),
            _ => format!("{}-{}", v[i], v[j]),
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// The table's line naming where receive processing ran (`None`: no run measured it): the
/// net CPUs (NET_RX softirqs, at least a tenth of a run's, in any run) beside the app CPUs
/// (where the workers ran), and which CPUs were both.
pub(crate) fn net_cpus_line(records: &[RunRecord]) -> Option<String> {
    let figs: Vec<&NetRxFigure> = records.iter().filter_map(|r| r.net_rx.as_ref()).collect();
    if figs.is_empty() {
        return None;
    }
    let net: Vec<usize> = figs
        .iter()
        .flat_map(|f| f.net_cpus.iter().copied())
        .collect();
    let app: Vec<usize> = figs
        .iter()
        .flat_map(|f| f.app_cpus.iter().copied())
        .collect();
    let both: Vec<usize> = net.iter().copied().filter(|c| app.contains(c)).collect();
    Some(format!(
        "net CPUs (NET_RX softirqs, /proc/softirqs): {}; app CPUs: {}; both: {}\n",
        cpu_list(&net),
        cpu_list(&app),
        cpu_list(&both)
    ))
}

/// One run of a sweep, as it ended.
#[derive(Debug, Clone)]
pub(crate) struct RunRecord {
    /// Where it sits in the plan.
    pub slot: Slot,
    /// How it ended.
    pub outcome: Outcome,
    /// Its numbers.
    pub numbers: Numbers,
    /// The run's full summary body, when it has one.
    pub body: Option<ReceiveBody>,
    /// The peer's figures, when it sent.
    pub peer: Option<PeerFigures>,
    /// Where its NET_RX softirqs ran.
    pub net_rx: Option<NetRxFigure>,
    /// Whether its flows reached every bound queue.
    pub steering: Option<SteeringFigure>,
    /// Its `--pre-run` and `--post-run` hooks.
    pub hooks: Vec<HookFigure>,
}

impl RunRecord {
    /// A run at `slot` that ended as `outcome` with `numbers`, nothing else known.
    pub(crate) fn new(slot: Slot, outcome: Outcome, numbers: Numbers) -> RunRecord {
        RunRecord {
            slot,
            outcome,
            numbers,
            body: None,
            peer: None,
            net_rx: None,
            steering: None,
            hooks: Vec::new(),
        }
    }
}

/// How a column reads its figure from a run's [`Numbers`].
#[derive(Clone, Copy)]
pub(crate) enum Get {
    /// A member of [`Numbers`].
    Field(fn(&Numbers) -> Option<f64>),
    /// The bytes of this bound RX queue.
    Queue(u32),
}

/// A column of the table: its header and the figure it shows.
#[derive(Clone)]
pub(crate) struct Column {
    /// The header, exactly as the table prints it.
    pub name: Cow<'static, str>,
    /// The CSV and JSON name (what `--columns` takes).
    pub key: Cow<'static, str>,
    /// The figure.
    pub get: Get,
    /// Decimals shown in the table.
    pub decimals: usize,
    /// The table shows the figure times this (1e-6 for bytes shown as MB).
    pub scale: f64,
}

impl Column {
    /// The column's figure of a run.
    pub(crate) fn value(&self, n: &Numbers) -> Option<f64> {
        match self.get {
            Get::Field(f) => f(n),
            Get::Queue(q) => n
                .queue_rx_bytes
                .iter()
                .find(|b| b.queue == q)
                .map(|b| b.bytes as f64),
        }
    }

    /// The column of bound RX queue `q`'s bytes, shown in MB (10⁶ bytes): `q4 MB`,
    /// `rx_q4_bytes`.
    pub(crate) fn queue(q: u32) -> Column {
        Column {
            name: Cow::Owned(format!("q{q} MB")),
            key: Cow::Owned(format!("rx_q{q}_bytes")),
            get: Get::Queue(q),
            decimals: 1,
            scale: 1e-6,
        }
    }
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key)
    }
}

const fn field(
    name: &'static str,
    key: &'static str,
    get: fn(&Numbers) -> Option<f64>,
    decimals: usize,
) -> Column {
    Column {
        name: Cow::Borrowed(name),
        key: Cow::Borrowed(key),
        get: Get::Field(get),
        decimals,
        scale: 1.0,
    }
}

const RX_DEV: Column = field("RX dev Gbps", "rx_dev_gbps", |n| n.rx_dev_gbps, 2);
const RX_FLOW_AVG: Column = field(
    "RX flow avg Gbps",
    "rx_flow_avg_gbps",
    |n| n.rx_flow_avg_gbps,
    2,
);
const APP_SYS: Column = field("app sys %", "app_sys_pct", |n| n.app_sys_pct, 1);
const APP_IDLE: Column = field("app idle %", "app_idle_pct", |n| n.app_idle_pct, 1);
const WORKER_IDLE: Column = field("RX worker idle %", "app_idle_pct", |n| n.app_idle_pct, 2);
const SOFTIRQ: Column = field("softirq %", "app_softirq_pct", |n| n.app_softirq_pct, 1);
const RX_TOTAL: Column = field("RX Gbps", "rx_gbps", |n| n.rx_gbps, 2);
const FRAGS: Column = field("frags/GiB", "frags_per_gib", |n| n.frags_per_gib, 0);
const DONTNEED: Column = field(
    "DONTNEED/GiB",
    "dontneed_per_gib",
    |n| n.dontneed_per_gib,
    0,
);
const PEER_SEND: Column = field("peer send Gbps", "peer_send_gbps", |n| n.peer_send_gbps, 2);
const MB_S: Column = field("MB/s", "rx_mb_per_s", |n| n.rx_mb_per_s, 1);
const USR: Column = field("%usr", "app_usr_pct", |n| n.app_usr_pct, 2);
const SYS: Column = field("%sys", "app_sys_pct", |n| n.app_sys_pct, 2);
const SOFT: Column = field("%soft", "app_softirq_pct", |n| n.app_softirq_pct, 2);
const IDLE: Column = field("%idle", "app_idle_pct", |n| n.app_idle_pct, 2);
const COMPLETIONS: Column = field(
    "completions/GiB",
    "completions_per_gib",
    |n| n.completions_per_gib,
    0,
);

/// The seeds' columns of a sweep over `key` (`None`: one configuration): the series' own
/// table, which the default text table keeps within 72 characters.
pub(crate) fn seed_columns(key: Option<SweepKey>) -> Vec<Column> {
    match key {
        Some(SweepKey::RxBufLen) => vec![MB_S, USR, SYS, SOFT, IDLE],
        Some(SweepKey::Autorelease) => vec![WORKER_IDLE, RX_DEV, RX_FLOW_AVG, APP_SYS],
        _ => vec![RX_DEV, RX_FLOW_AVG, APP_SYS],
    }
}

/// This tool's own columns after the seeds' for a sweep over `key`, the bound queues' bytes
/// (`queues`) last.
pub(crate) fn own_columns(key: Option<SweepKey>, queues: &[u32]) -> Vec<Column> {
    let mut cols = match key {
        Some(SweepKey::RxBufLen) => vec![RX_FLOW_AVG, COMPLETIONS, PEER_SEND],
        Some(SweepKey::Autorelease) => vec![SOFTIRQ, RX_TOTAL, FRAGS, DONTNEED, PEER_SEND],
        _ => vec![APP_IDLE, SOFTIRQ, RX_TOTAL, FRAGS, DONTNEED, PEER_SEND],
    };
    cols.extend(queues.iter().map(|&q| Column::queue(q)));
    cols
}

/// The table's value columns for a sweep over `key`: the seeds' then the tool's own.
pub(crate) fn columns(key: Option<SweepKey>, queues: &[u32]) -> Vec<Column> {
    let mut cols = seed_columns(key);
    cols.extend(own_columns(key, queues));
    cols
}

/// Every figure of [`Numbers`] by its CSV/JSON name, in CSV order, then the bound queues'
/// bytes (`queues`).
pub(crate) fn all_columns(queues: &[u32]) -> Vec<Column> {
    let mut cols = vec![
        RX_DEV,
        RX_FLOW_AVG,
        RX_TOTAL,
        MB_S,
        USR,
        SYS,
        SOFT,
        IDLE,
        FRAGS,
        DONTNEED,
        COMPLETIONS,
        PEER_SEND,
    ];
    cols.extend(queues.iter().map(|&q| Column::queue(q)));
    cols
}

/// The bound queues any run reported bytes of, in order.
pub(crate) fn queues_of(records: &[RunRecord]) -> Vec<u32> {
    let mut qs: Vec<u32> = records
        .iter()
        .flat_map(|r| r.numbers.queue_rx_bytes.iter().map(|b| b.queue))
        .collect();
    qs.sort_unstable();
    qs.dedup();
    qs
}

/// The column a `--columns` name picks, for a sweep over `key` with bound queues `queues`:
/// a CSV name (`app_sys_pct`, `rx_q4_bytes`) or a header as printed (`app sys %`). Where a
/// key has two headers (`app_idle_pct`: `app idle %`, and `RX worker idle %` for the
/// autorelease series) the series' own is taken.
pub(crate) fn column_named(name: &str, key: Option<SweepKey>, queues: &[u32]) -> Option<Column> {
    let ours = columns(key, queues);
    let every = all_columns(queues);
    ours.iter()
        .chain(every.iter())
        .find(|c| c.key == name || c.name == name)
        .cloned()
        .or_else(|| {
            let q = name
                .strip_prefix("rx_q")?
                .strip_suffix("_bytes")?
                .parse()
                .ok()?;
            Some(Column::queue(q))
        })
}

/// Mean, sample standard deviation and count of one column at one point.
pub(crate) use crate::summary::sweep::StatFigure as Stat;

/// The statistic of `column` over the passed runs of `point`; `None` when none has it.
pub(crate) fn stat(records: &[RunRecord], point: usize, column: &Column) -> Option<Stat> {
    let values: Vec<f64> = records
        .iter()
        .filter(|r| r.slot.point == point && r.outcome == Outcome::Ok)
        .filter_map(|r| column.value(&r.numbers))
        .collect();
    if values.is_empty() {
        return None;
    }
    let (mean, sd) = crate::stats::mean_sd(&values);
    Some(Stat {
        mean,
        sd: (values.len() > 1).then_some(sd),
        n: values.len(),
    })
}

/// How many runs of `point` passed.
pub(crate) fn passed(records: &[RunRecord], point: usize) -> usize {
    records
        .iter()
        .filter(|r| r.slot.point == point && r.outcome == Outcome::Ok)
        .count()
}

/// A statistic as the table shows it: `mean +/- sd` with `decimals` decimals, `-` for the sd
/// of one run, and ` (n=K)` after it when K differs from `passed` (the runs column's count:
/// a figure some of the passed runs do not have).
pub(crate) fn stat_cell(s: &Stat, decimals: usize, passed: usize) -> String {
    let sd =
        s.sd.map_or_else(|| "-".to_string(), |sd| format!("{sd:.decimals$}"));
    let mut cell = format!("{:.decimals$} +/- {sd}", s.mean);
    if s.n != passed {
        cell.push_str(&format!(" (n={})", s.n));
    }
    cell
}

/// `s` scaled for display by `column`'s scale.
pub(crate) fn scaled(s: &Stat, column: &Column) -> Stat {
    Stat {
        mean: s.mean * column.scale,
        sd: s.sd.map(|sd| sd * column.scale),
        n: s.n,
    }
}

/// What happened to the runs of one point: passed, failed, skipped of how many planned.
pub(crate) fn runs_cell(records: &[RunRecord], point: usize, planned: u32) -> String {
    let of = |name: &str| {
        records
            .iter()
            .filter(|r| r.slot.point == point && r.outcome.name() == name)
            .count()
    };
    let (ok, failed, skipped) = (of("ok"), of("fail"), of("skip"));
    let mut s = format!("{ok}/{planned}");
    if failed > 0 {
        s.push_str(&format!(" FAILED {failed}"));
    }
    if skipped > 0 {
        s.push_str(&format!(" skipped {skipped}"));
    }
    s
}

/// The lines after the table naming every run that failed or was skipped, and every run
/// whose flows did not reach every bound queue.
pub(crate) fn run_notes(plan: &Plan, records: &[RunRecord]) -> String {
    let mut out = String::new();
    for r in records {
        if let Some(why) = r.outcome.why() {
            out.push_str(&format!(
                "{} {} run {}/{}: {why}\n",
                match r.outcome {
                    Outcome::Skipped(_) => "skipped:",
                    _ => "FAILED:",
                },
                plan.label(r.slot.point),
                r.slot.run + 1,
                plan.runs,
            ));
        }
    }
    for r in records {
        if let Some(s) = r.steering.as_ref().filter(|s| !s.unreached.is_empty()) {
            out.push_str(&format!(
                "steering: {} run {}/{}: {}\n",
                plan.label(r.slot.point),
                r.slot.run + 1,
                plan.runs,
                crate::figures::device::unreached_words(&s.bound, &s.unreached, &s.source)
            ));
        }
    }
    if let Some(line) = net_cpus_line(records) {
        out.push_str(&line);
    }
    out
}

/// The table as one grid: the key column, `cols` and (with `runs`) the runs column; one row
/// per point.
pub(crate) fn grid(plan: &Plan, records: &[RunRecord], cols: &[Column], runs: bool) -> Grid {
    let first = plan.key.map_or("niov", SweepKey::column);
    let mut header = vec![first.to_string()];
    header.extend(cols.iter().map(|c| c.name.to_string()));
    if runs {
        header.push("runs".into());
    }
    let mut rows = Vec::new();
    for point in 0..plan.points.len() {
        let mut row = vec![plan.show(point)];
        for c in cols {
            row.push(match stat(records, point, c) {
                Some(s) => stat_cell(&scaled(&s, c), c.decimals, passed(records, point)),
                None => "-".into(),
            });
        }
        if runs {
            row.push(runs_cell(records, point, plan.runs));
        }
        rows.push(row);
    }
    Grid { header, rows }
}

/// The table as `--format` and `--columns` say, then (text and markdown) the notes: failed
/// and skipped runs, unreached queues. The default text table is the seeds' columns and
/// `runs` in one block (within 72 characters for the seeds' own values), then the tool's own
/// columns in blocks of at most 72 characters; with `columns`, those columns (CSV names or
/// headers, `runs` for the runs column) in that order in one block; markdown and CSV are one
/// table. A name that is no column is left out (the sweep checks them before it runs).
/// `records` may cover only part of the plan (a sweep that stopped early prints what it has).
pub(crate) fn render(
    plan: &Plan,
    records: &[RunRecord],
    columns_named: Option<&[String]>,
    format: Format,
) -> String {
    let queues = queues_of(records);
    let blocks = match columns_named {
        Some(names) => {
            // The grid's columns are the key, `cols`, then runs: `order` picks them in the
            // order named.
            let (mut cols, mut order) = (Vec::new(), vec![0]);
            let mut runs_at = None;
            for name in names {
                if name == "runs" {
                    runs_at = Some(order.len());
                    order.push(usize::MAX);
                } else if let Some(c) = column_named(name, plan.key, &queues) {
                    cols.push(c);
                    order.push(cols.len());
                }
            }
            if let Some(at) = runs_at {
                order[at] = cols.len() + 1;
            }
            vec![grid(plan, records, &cols, runs_at.is_some()).select(&order)]
        }
        None if format == Format::Text => {
            let mut b = vec![grid(plan, records, &seed_columns(plan.key), true)];
            let own = own_columns(plan.key, &queues);
            b.extend(grid(plan, records, &own, false).blocks(1, MAIL_WIDTH));
            b
        }
        None => vec![grid(plan, records, &columns(plan.key, &queues), true)],
    };
    // Rendering a grid cannot fail (the CSV writer writes to memory).
    let mut text = render_blocks(&blocks, format).unwrap_or_else(|e| format!("{e}\n"));
    if format != Format::Csv {
        text.push_str(&run_notes(plan, records));
    }
    text
}

/// The default text table ([`render`]).
#[cfg(test)]
pub(crate) fn table(plan: &Plan, records: &[RunRecord]) -> String {
    render(plan, records, None, Format::Text)
}

/// One CSV row per run (kperf's convention: a header row first): where the run sits (its
/// value as the option takes it: a tcp-cc point's name), how it ended, and every figure of
/// [`all_columns`] (empty where the run has none).
///
/// Errors: the CSV writer's (only from the underlying buffer, which cannot fail).
pub(crate) fn csv(plan: &Plan, records: &[RunRecord]) -> Result<String, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let cols = all_columns(&queues_of(records));
    let mut header: Vec<String> = [
        "index", "key", "value", "point", "run", "outcome", "error", "bytes",
    ]
    .map(String::from)
    .to_vec();
    header.extend(cols.iter().map(|c| c.key.to_string()));
    w.write_record(&header).map_err(|e| e.to_string())?;
    for r in records {
        let mut row = vec![
            (r.slot.index + 1).to_string(),
            plan.key.map(|k| k.name().to_string()).unwrap_or_default(),
            // The number as the option takes it; a tcp-cc point's name.
            plan.value(r.slot.point).unwrap_or_default(),
            r.slot.point.to_string(),
            (r.slot.run + 1).to_string(),
            r.outcome.name().to_string(),
            r.outcome.why().unwrap_or_default().to_string(),
            r.numbers.bytes.map(|b| b.to_string()).unwrap_or_default(),
        ];
        row.extend(cols.iter().map(|c| {
            c.value(&r.numbers)
                .map(|v| v.to_string())
                .unwrap_or_default()
        }));
        w.write_record(&row).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// Every point's statistics: value, label, runs passed and every figure of [`all_columns`]
/// by its key (`None` where no passed run has it; `sd` `None` for one run).
pub(crate) fn points(plan: &Plan, records: &[RunRecord]) -> Vec<PointFigure> {
    let cols = all_columns(&queues_of(records));
    (0..plan.points.len())
        .map(|p| PointFigure {
            value: plan.points[p],
            label: plan.show(p),
            runs_ok: passed(records, p),
            columns: cols
                .iter()
                .map(|c| (c.key.to_string(), stat(records, p, c)))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::plan::Sweep;

    fn record(plan: &Plan, index: usize, outcome: Outcome, n: Numbers) -> RunRecord {
        RunRecord::new(plan.order()[index], outcome, n)
    }

    fn nums(dev: f64, flow: f64, sys: f64) -> Numbers {
        Numbers {
            rx_dev_gbps: Some(dev),
            rx_flow_avg_gbps: Some(flow),
            rx_gbps: Some(flow * 4.0),
            app_sys_pct: Some(sys),
            app_idle_pct: Some(100.0 - sys),
            app_softirq_pct: Some(1.0),
            frags_per_gib: Some(262144.0),
            dontneed_per_gib: Some(1024.0),
            peer_send_gbps: Some(dev),
            ..Numbers::default()
        }
    }

    /// The sweep's verdict, table-driven: a failure wins over a skip, a skip over passes,
    /// a stop over everything; a single skipped run of many makes the sweep a skip (exit 4),
    /// not a pass (before: exit 0 whenever any run passed).
    #[test]
    fn the_sweep_verdict_is_decided_by_every_planned_run() {
        use SweepVerdict::*;
        let ok = || Outcome::Ok;
        let fail = || Outcome::Failed("flow 0: mismatch".into());
        let skip = || Outcome::Skipped("skip: too few hugepages".into());
        // (outcomes, planned, stopped, verdict, exit code, JSON verdict)
        type Case = (Vec<Outcome>, usize, bool, SweepVerdict, u8, &'static str);
        let cases: Vec<Case> = vec![
            (
                vec![ok(), ok(), ok(), ok()],
                4,
                false,
                Pass { planned: 4 },
                0,
                "pass",
            ),
            (vec![ok()], 1, false, Pass { planned: 1 }, 0, "pass"),
            (
                vec![ok(), fail(), ok(), ok()],
                4,
                false,
                Fail { failed: 1, ran: 4 },
                1,
                "fail",
            ),
            (
                vec![fail(), fail()],
                2,
                false,
                Fail { failed: 2, ran: 2 },
                1,
                "fail",
            ),
            // The finding: the 16K point skipped for lack of hugepages, the others passed.
            (
                vec![ok(), skip(), ok(), ok(), skip(), ok()],
                6,
                false,
                Skip {
                    skipped: 2,
                    planned: 6,
                },
                4,
                "skip",
            ),
            (
                vec![skip(), skip()],
                2,
                false,
                Skip {
                    skipped: 2,
                    planned: 2,
                },
                4,
                "skip",
            ),
            (
                vec![ok(), skip(), fail()],
                3,
                false,
                Fail { failed: 1, ran: 3 },
                1,
                "fail",
            ),
            (
                vec![ok(), ok()],
                4,
                true,
                Stopped { ran: 2, planned: 4 },
                1,
                "fail",
            ),
            (
                vec![ok(), ok(), ok(), ok()],
                4,
                true,
                Stopped { ran: 4, planned: 4 },
                1,
                "fail",
            ),
            (vec![], 4, true, Stopped { ran: 0, planned: 4 }, 1, "fail"),
            // Fewer outcomes than planned runs is never a pass, stopped or not.
            (
                vec![ok(), ok()],
                3,
                false,
                Stopped { ran: 2, planned: 3 },
                1,
                "fail",
            ),
            (vec![], 0, false, Stopped { ran: 0, planned: 0 }, 1, "fail"),
        ];
        for (outcomes, planned, stopped, want, code, name) in cases {
            let got = sweep_verdict(&outcomes, planned, stopped);
            assert_eq!(got, want, "{outcomes:?} of {planned}, stopped {stopped}");
            assert_eq!(got.exit_code(), code, "{want:?}");
            assert_eq!(got.name(), name, "{want:?}");
        }
        assert_eq!(
            Skip {
                skipped: 2,
                planned: 6
            }
            .to_string(),
            "sweep: skip: 2 of 6 planned runs skipped (named above), none failed"
        );
        assert_eq!(
            Pass { planned: 4 }.to_string(),
            "sweep: pass: all 4 planned runs passed"
        );
    }

    /// Mean and sample sd over the passed runs only; a point without runs has none.
    #[test]
    fn statistics_count_the_passed_runs() {
        let s = Sweep::parse("flows=1,2", 4096).unwrap();
        let plan = Plan::new(Some(&s), 3);
        let recs = vec![
            record(&plan, 0, Outcome::Ok, nums(1.0, 1.0, 10.0)),
            record(&plan, 2, Outcome::Ok, nums(3.0, 1.0, 20.0)),
            record(&plan, 4, Outcome::Failed("x".into()), nums(100.0, 1.0, 0.0)),
            record(&plan, 1, Outcome::Ok, nums(2.0, 1.0, 5.0)),
        ];
        let st = stat(&recs, 0, &RX_DEV).unwrap();
        assert_eq!((st.mean, st.n), (2.0, 2));
        let sd = st.sd.unwrap();
        assert!((sd - std::f64::consts::SQRT_2).abs() < 1e-12, "{sd}");
        let one = stat(&recs, 1, &APP_SYS).unwrap();
        assert_eq!(
            (one.mean, one.sd, one.n),
            (5.0, None, 1),
            "one run has no sample sd (before: Some(0.0))"
        );
        assert_eq!(stat(&recs, 1, &COMPLETIONS), None);
        assert_eq!(runs_cell(&recs, 0, 3), "2/3 FAILED 1");
    }

    /// The default layout, golden: the seed's columns exactly and the runs in a first block
    /// within 72 characters, the tool's own in blocks of at most 72 after it, then the
    /// failures and the unreached queues. Before: one block of about 150 characters.
    #[test]
    fn the_table_layout_is_golden() {
        let (plan, recs) = golden_runs();
        let want = "\
niov  RX dev Gbps     RX flow avg Gbps  app sys %     runs
4K    10.00 +/- 1.41  2.50 +/- 0.35     41.0 +/- 1.4  2/2
64K   9.50 +/- -      2.38 +/- -        30.0 +/- -    1/2 FAILED 1

niov  app idle %    softirq %    RX Gbps         frags/GiB
4K    59.0 +/- 1.4  1.0 +/- 0.0  10.00 +/- 1.41  262144 +/- 0
64K   70.0 +/- -    1.0 +/- -    9.50 +/- -      262144 +/- -

niov  DONTNEED/GiB  peer send Gbps  q2 MB        q3 MB
4K    1024 +/- 0    10.00 +/- 1.41  2.0 +/- 1.4  0.0 +/- 0.0
64K   1024 +/- -    9.50 +/- -      3.0 +/- -    0.0 +/- -
FAILED: rx-page-size=65536 run 2/2: flow 1: mismatch at 8192
steering: rx-page-size=4096 run 1/2: the flows reached 1 of 2 bound queues (2,3): no bytes on queue 3 (qstats)
";
        let got = table(&plan, &recs);
        assert_eq!(got, want);
        for line in got
            .lines()
            .filter(|l| !l.starts_with("FAILED") && !l.starts_with("steering"))
        {
            assert!(line.len() <= 72, "{line:?} is {} characters", line.len());
        }
    }

    /// Markdown and CSV are one table of every default column; `--columns` picks and orders
    /// columns by CSV name or header, `runs` included.
    #[test]
    fn formats_and_column_selection_are_golden() {
        let (plan, recs) = golden_runs();
        let md = render(&plan, &recs, None, Format::Markdown);
        assert!(md.starts_with(
            "| niov | RX dev Gbps | RX flow avg Gbps | app sys % | app idle % | softirq % | RX Gbps | frags/GiB | DONTNEED/GiB | peer send Gbps | q2 MB | q3 MB | runs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n| 4K | 10.00 +/- 1.41 | 2.50 +/- 0.35 | 41.0 +/- 1.4 |"
        ), "{md}");
        assert!(md.contains("\nFAILED: rx-page-size=65536 run 2/2"), "{md}");
        let names: Vec<String> = ["frags_per_gib", "app sys %", "runs", "rx_q2_bytes"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            render(&plan, &recs, Some(&names), Format::Text),
            "\
niov  frags/GiB     app sys %     runs          q2 MB
4K    262144 +/- 0  41.0 +/- 1.4  2/2           2.0 +/- 1.4
64K   262144 +/- -  30.0 +/- -    1/2 FAILED 1  3.0 +/- -
FAILED: rx-page-size=65536 run 2/2: flow 1: mismatch at 8192
steering: rx-page-size=4096 run 1/2: the flows reached 1 of 2 bound queues (2,3): no bytes on queue 3 (qstats)
"
        );
        assert_eq!(
            render(&plan, &recs, Some(&names[..3]), Format::Csv),
            "niov,frags/GiB,app sys %,runs\n4K,262144 +/- 0,41.0 +/- 1.4,2/2\n64K,262144 +/- -,30.0 +/- -,1/2 FAILED 1\n"
        );
        assert!(column_named("rx_q9_bytes", plan.key, &[]).is_some());
        assert!(column_named("nosuch", plan.key, &[]).is_none());
        assert_eq!(
            column_named("app_idle_pct", Some(SweepKey::Autorelease), &[])
                .unwrap()
                .name,
            "RX worker idle %"
        );
    }

    fn golden_runs() -> (Plan, Vec<RunRecord>) {
        let s = Sweep::parse("rx-page-size=4096,65536", 4096).unwrap();
        let plan = Plan::new(Some(&s), 2);
        let q = |a: u64, b: u64| {
            vec![
                QueueBytes { queue: 2, bytes: a },
                QueueBytes { queue: 3, bytes: b },
            ]
        };
        let mut first = record(&plan, 0, Outcome::Ok, nums(9.0, 2.25, 40.0));
        first.numbers.queue_rx_bytes = q(1_000_000, 0);
        first.steering = Some(SteeringFigure {
            bound: vec![2, 3],
            unreached: vec![3],
            source: "qstats".into(),
        });
        let mut second = record(&plan, 1, Outcome::Ok, nums(9.5, 2.375, 30.0));
        second.numbers.queue_rx_bytes = q(3_000_000, 1);
        let mut third = record(&plan, 2, Outcome::Ok, nums(11.0, 2.75, 42.0));
        third.numbers.queue_rx_bytes = q(3_000_000, 2);
        let recs = vec![
            first,
            second,
            third,
            record(
                &plan,
                3,
                Outcome::Failed("flow 1: mismatch at 8192".into()),
                Numbers::default(),
            ),
        ];
        (plan, recs)
    }

    /// A point left with one passed run: no sd anywhere (`-` in the table, `null` in the
    /// JSON), n said; a figure only some passed runs have says its own n in the table.
    /// Before: `+/- 0.00` and `"sd": 0.0`.
    #[test]
    fn one_run_has_no_sd() {
        let plan = Plan::new(Some(&Sweep::parse("flows=1,2", 4096).unwrap()), 3);
        let mut partial = nums(4.0, 1.0, 20.0);
        partial.rx_dev_gbps = None;
        let recs = vec![
            record(&plan, 0, Outcome::Ok, nums(2.0, 1.0, 10.0)),
            record(&plan, 1, Outcome::Ok, nums(3.0, 1.0, 10.0)),
            record(&plan, 2, Outcome::Ok, nums(2.0, 1.0, 30.0)),
            record(&plan, 3, Outcome::Failed("x".into()), Numbers::default()),
            record(&plan, 4, Outcome::Ok, partial),
        ];
        let points = serde_json::to_value(points(&plan, &recs)).unwrap();
        let one = &points[1]["columns"]["rx_dev_gbps"];
        assert_eq!(one, &serde_json::json!({"mean": 3.0, "sd": null, "n": 1}));
        assert_eq!(points[1]["runs_ok"], 1);
        let two = &points[0]["columns"]["app_sys_pct"];
        assert_eq!(two, &serde_json::json!({"mean": 20.0, "sd": 10.0, "n": 3}));
        let t = table(&plan, &recs);
        let rows: Vec<&str> = t.lines().collect();
        assert!(
            rows[1].starts_with("1      2.00 +/- 0.00 (n=2)  1.00 +/- 0.00     20.0 +/- 10.0"),
            "{t}"
        );
        assert!(
            rows[2].starts_with("2      3.00 +/- -           1.00 +/- -        10.0 +/- -"),
            "{t}"
        );
        assert!(rows[1].ends_with("3/3"), "{t}");
        assert!(rows[2].ends_with("1/3 FAILED 1"), "{t}");
        assert_eq!(
            stat_cell(
                &Stat {
                    mean: 1.5,
                    sd: None,
                    n: 1
                },
                2,
                1
            ),
            "1.50 +/- -"
        );
        assert_eq!(
            stat_cell(
                &Stat {
                    mean: 1.5,
                    sd: Some(0.25),
                    n: 2
                },
                1,
                3
            ),
            "1.5 +/- 0.2 (n=2)"
        );
    }

    #[test]
    fn the_zcrx_and_token_series_have_their_own_columns() {
        let zc: Vec<String> = columns(Some(SweepKey::RxBufLen), &[])
            .iter()
            .map(|c| c.name.to_string())
            .collect();
        assert_eq!(&zc[..5], &["MB/s", "%usr", "%sys", "%soft", "%idle"]);
        let ar = columns(Some(SweepKey::Autorelease), &[]);
        assert_eq!(ar[0].name, "RX worker idle %");
        let plan = Plan::new(
            Some(&Sweep::parse("rx-buf-len=4096,32768", 4096).unwrap()),
            1,
        );
        let t = table(&plan, &[]);
        assert!(
            t.starts_with("rx-buf-len  MB/s  %usr  %sys  %soft  %idle"),
            "{t}"
        );
        assert!(t.contains("\n32K         -     -"), "{t}");
    }

    /// The CSV: a header row, one row per run, empty cells for absent figures.
    #[test]
    fn csv_has_a_header_and_a_row_per_run() {
        let plan = Plan::new(Some(&Sweep::parse("flows=1,2", 4096).unwrap()), 1);
        let recs = vec![
            record(&plan, 0, Outcome::Ok, nums(1.5, 1.5, 10.0)),
            record(
                &plan,
                1,
                Outcome::Failed("a, \"quoted\" error".into()),
                Numbers::default(),
            ),
        ];
        let text = csv(&plan, &recs).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "index,key,value,point,run,outcome,error,bytes,rx_dev_gbps,rx_flow_avg_gbps,rx_gbps,rx_mb_per_s,app_usr_pct,app_sys_pct,app_softirq_pct,app_idle_pct,frags_per_gib,dontneed_per_gib,completions_per_gib,peer_send_gbps"
        );
        assert_eq!(
            lines[1],
            "1,flows,1,0,1,ok,,,1.5,1.5,6,,,10,1,90,262144,1024,,1.5"
        );
        assert_eq!(
            lines[2],
            "2,flows,2,1,1,fail,\"a, \"\"quoted\"\" error\",,,,,,,,,,,,,"
        );
    }

    /// A run's `net_rx` is its own reading over its measured interval, copied from its
    /// body's per-CPU figures (the sweep takes no second reading around the run): the CPUs'
    /// NET_RX counts, the net CPUs and the app CPUs; none without `/proc/softirqs`'s reading
    /// (`net_cpus` absent) or without measured CPU figures.
    #[test]
    fn net_rx_is_the_runs_own_reading() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/summary/plain-2-flows-timed.json"
        );
        let text = std::fs::read_to_string(fixture).unwrap();
        let mut body: ReceiveBody = serde_json::from_str(&text).unwrap();
        // The fixture's machine had no readable /proc/softirqs.
        assert_eq!(net_rx_of(&body), None);
        let CpuFigure::Split(split) = &mut body.measured.as_mut().unwrap().cpu else {
            panic!("the fixture has CPU figures");
        };
        for (k, c) in split.per_cpu.iter_mut().enumerate() {
            c.net_rx = Some(if k == 0 { 900 } else { 100 });
        }
        split.net_cpus = Some(vec![0, 1]);
        let app = split.app_cpus.clone();
        let n = net_rx_of(&body).expect("a reading");
        assert_eq!(
            n.per_cpu,
            vec![
                crate::summary::sweep::CpuNetRx {
                    cpu: 0,
                    net_rx: 900
                },
                crate::summary::sweep::CpuNetRx {
                    cpu: 1,
                    net_rx: 100
                }
            ]
        );
        assert_eq!((n.net_cpus, n.app_cpus), (vec![0, 1], app));
        body.measured = None;
        assert_eq!(net_rx_of(&body), None);
    }

    /// The numbers come from the flows engine's summary: device RX from qstats, frags per GiB
    /// over the whole receive's bytes, the peer's rate from its figures.
    #[test]
    fn numbers_are_taken_from_the_runs_summary() {
        use crate::summary::{DeviceRxMeasured, QueueRxFigure};
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/summary/plain-2-flows-timed.json"
        );
        let text = std::fs::read_to_string(fixture).unwrap();
        let mut body: ReceiveBody = serde_json::from_str(&text).unwrap();
        body.totals.bytes = 1 << 30;
        body.totals.gbit_per_s = 8.0;
        body.totals.dmabuf_frags = 1000;
        body.totals.linear_frags = 24;
        body.totals.dontneed_calls = 512;
        let m = body.measured.as_mut().unwrap();
        m.flow_avg_gbit_per_s = 2.0;
        for f in &mut m.flows {
            f.bytes = 1 << 30;
        }
        body.device_rx = Some(Some(DeviceRxFigure::Measured(DeviceRxMeasured {
            bytes: 1,
            packets: None,
            gbit_per_s: Some(8.5),
            source: "qstats".into(),
            queues: Some(vec![QueueRxFigure {
                queue: 4,
                bytes: 7,
                packets: None,
            }]),
        })));
        let m = body.measured.as_mut().unwrap();
        let CpuFigure::Split(split) = &mut m.cpu else {
            panic!("the fixture has CPU figures");
        };
        split.app.sys = 30.0;
        let peer = PeerFigures {
            bytes: 1,
            elapsed_s: 1.0,
            gbit_per_s: 7.5,
            flow_bytes: vec![1],
            cpu: None,
            error: None,
        };
        let n = of_run(ModeName::Devmem, &body, Some(&peer), None);
        assert_eq!(n.rx_dev_gbps, Some(8.5));
        assert_eq!(n.rx_flow_avg_gbps, Some(2.0));
        assert_eq!(n.frags_per_gib, Some(512.0));
        assert_eq!(n.dontneed_per_gib, Some(256.0));
        assert_eq!(n.app_sys_pct, Some(30.0));
        assert_eq!(n.peer_send_gbps, Some(7.5));
        assert_eq!(n.rx_mb_per_s, Some(1000.0));
        assert_eq!(n.completions_per_gib, None);
        assert_eq!(n.queue_rx_bytes, vec![QueueBytes { queue: 4, bytes: 7 }]);
        assert_eq!(Column::queue(4).value(&n), Some(7.0));
        // One flow without the measured figures: the CPU measured around the run.
        let mut plain = body.clone();
        plain.measured = None;
        // The plain receiver's: no bound queues, no device figure.
        plain.device_rx = None;
        plain.totals.bytes = 100;
        plain.totals.gbit_per_s = 1.0;
        let cpu = CpuShares {
            usr: 2.0,
            nice: 0.0,
            sys: 3.0,
            irq: 0.0,
            softirq: 4.0,
            iowait: 0.0,
            idle: 91.0,
            steal: 0.0,
            ticks: 100,
        };
        let n = of_run(ModeName::PlainTcp, &plain, None, Some(&cpu));
        assert_eq!(n.rx_dev_gbps, None, "never the socket figure");
        assert_eq!(n.frags_per_gib, None, "plain TCP has no frags");
        assert_eq!(n.dontneed_per_gib, None);
        assert_eq!(n.app_idle_pct, Some(91.0));
        assert_eq!(n.rx_flow_avg_gbps, Some(1.0));
        assert!(n.queue_rx_bytes.is_empty());
    }
}
