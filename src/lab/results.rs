//! The results of a sweep: each run's numbers (taken from the run's own JSON summary and the
//! peer's `done` figures), their mean and sample standard deviation per point, and the three
//! renderings — the table on stdout, one CSV row per run, and the numbers the JSON file and the
//! plot take. Pure: no syscalls.
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

use serde_json::Value;

use super::plan::{Plan, Slot, SweepKey};
use super::proto::PeerFigures;
use crate::figures::cpu::CpuShares;

/// Bytes in a GiB, for the per-GiB columns.
const GIB: f64 = (1u64 << 30) as f64;

/// How one run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Passed.
    Ok,
    /// Failed (validation, a flow, the NIC undo): the error.
    Failed(String),
    /// Skipped (the kernel lacks what the point needs): the reason.
    Skipped(String),
}

impl Outcome {
    /// `ok`, `fail` or `skip`, as the JSON summaries name verdicts.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed(_) => "fail",
            Outcome::Skipped(_) => "skip",
        }
    }

    /// The error or skip reason.
    pub fn why(&self) -> Option<&str> {
        match self {
            Outcome::Ok => None,
            Outcome::Failed(w) | Outcome::Skipped(w) => Some(w),
        }
    }
}

/// A whole sweep's verdict, from the outcomes of its runs ([`sweep_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepVerdict {
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
    pub fn name(&self) -> &'static str {
        match self {
            SweepVerdict::Pass { .. } => "pass",
            SweepVerdict::Skip { .. } => "skip",
            SweepVerdict::Fail { .. } | SweepVerdict::Stopped { .. } => "fail",
        }
    }

    /// The exit code of the verdict (a stopped sweep: 1, unless its stop says otherwise).
    pub fn exit_code(&self) -> u8 {
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
pub fn sweep_verdict<'a>(
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

/// The numbers of one run that the table, the CSV and the plot show; `None` where the run
/// has no such figure.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Numbers {
    /// Device RX Gbit/s: the bound queues' qstats rx-bytes over the measured interval.
    pub rx_dev_gbps: Option<f64>,
    /// The flows' mean Gbit/s (payload) over the measured interval.
    pub rx_flow_avg_gbps: Option<f64>,
    /// All flows' payload Gbit/s over the measured interval.
    pub rx_gbps: Option<f64>,
    /// All flows' payload in MB/s (10^6 bytes), as the zcrx series reports it.
    pub rx_mb_per_s: Option<f64>,
    /// The app CPUs' user %.
    pub app_usr: Option<f64>,
    /// The app CPUs' system % ("app sys %").
    pub app_sys: Option<f64>,
    /// The app CPUs' softirq %.
    pub app_soft: Option<f64>,
    /// The app CPUs' idle % ("app idle %"; the RX worker idle % of the token series).
    pub app_idle: Option<f64>,
    /// Frags (dmabuf and linear) per GiB received.
    pub frags_per_gib: Option<f64>,
    /// `SO_DEVMEM_DONTNEED` calls per GiB received.
    pub dontneed_per_gib: Option<f64>,
    /// zcrx completions (`RECV_ZC` CQEs with data) per GiB received.
    pub completions_per_gib: Option<f64>,
    /// The peer's send Gbit/s.
    pub peer_tx_gbps: Option<f64>,
    /// Payload bytes received in the measured interval.
    pub bytes: Option<u64>,
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

impl Numbers {
    /// The numbers of a run from its JSON summary `body` (the receive mode's object), the
    /// peer's figures, and `cpu`: the CPU shares over the whole run measured around it, used
    /// only where the mode's summary has no CPU table of its own.
    pub fn of_run(body: &Value, peer: Option<&PeerFigures>, cpu: Option<&CpuShares>) -> Numbers {
        let bytes = body.get("bytes").and_then(Value::as_u64);
        // Frag and call counters cover the whole receive, warm-up included; so do the flows'
        // own byte counts (the summary's "bytes" is the measured interval's).
        let all_bytes = match body.get("flows").and_then(Value::as_array) {
            Some(flows) if !flows.is_empty() => Some(
                flows
                    .iter()
                    .filter_map(|fl| fl.get("bytes")?.as_u64())
                    .sum(),
            ),
            _ => bytes,
        };
        let per_gib = |count: Option<f64>| {
            let b = all_bytes? as f64;
            let c = count?;
            (b > 0.0).then(|| c * GIB / b)
        };
        let frags = match (f(body, &["dmabuf_frags"]), f(body, &["linear_frags"])) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let devmem = body.get("mode").and_then(Value::as_str) == Some("devmem");
        let zcrx = body.get("zcrx_chunks").is_some();
        let rx_gbps = f(body, &["gbit_per_s"]);
        let app = |k: &str| {
            f(body, &["cpu", "app", k]).or_else(|| {
                let c = cpu?;
                Some(match k {
                    "usr" => c.usr,
                    "sys" => c.sys,
                    "softirq" => c.softirq,
                    _ => c.idle,
                })
            })
        };
        Numbers {
            rx_dev_gbps: f(body, &["device_rx", "gbit_per_s"]),
            rx_flow_avg_gbps: f(body, &["flow_avg_gbit_per_s"]).or(rx_gbps),
            rx_gbps,
            rx_mb_per_s: rx_gbps.map(|g| g * 1e9 / 8.0 / 1e6),
            app_usr: app("usr"),
            app_sys: app("sys"),
            app_soft: app("softirq"),
            app_idle: app("idle"),
            frags_per_gib: per_gib(frags.filter(|_| devmem)),
            dontneed_per_gib: per_gib(f(body, &["dontneed_calls"]).filter(|_| devmem)),
            completions_per_gib: per_gib(f(body, &["zcrx_chunks"]).filter(|_| zcrx)),
            peer_tx_gbps: peer.map(|p| p.gbit_per_s).filter(|g| g.is_finite()),
            bytes,
        }
    }
}

/// One run of a sweep, as it ended.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Where it sits in the plan.
    pub slot: Slot,
    /// How it ended.
    pub outcome: Outcome,
    /// Its numbers.
    pub numbers: Numbers,
    /// The run's full JSON summary, when it has one.
    pub body: Option<Value>,
    /// The peer's figures, when it sent.
    pub peer: Option<PeerFigures>,
}

/// A column of the table: its header and the figure it shows.
#[derive(Clone, Copy)]
pub struct Column {
    /// The header, exactly as the table prints it.
    pub name: &'static str,
    /// The CSV and JSON name.
    pub key: &'static str,
    /// The figure.
    pub get: fn(&Numbers) -> Option<f64>,
    /// Decimals shown in the table.
    pub decimals: usize,
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key)
    }
}

const RX_DEV: Column = Column {
    name: "RX dev Gbps",
    key: "rx_dev_gbps",
    get: |n| n.rx_dev_gbps,
    decimals: 2,
};
const RX_FLOW_AVG: Column = Column {
    name: "RX flow avg Gbps",
    key: "rx_flow_avg_gbps",
    get: |n| n.rx_flow_avg_gbps,
    decimals: 2,
};
const APP_SYS: Column = Column {
    name: "app sys %",
    key: "app_sys_pct",
    get: |n| n.app_sys,
    decimals: 1,
};
const APP_IDLE: Column = Column {
    name: "app idle %",
    key: "app_idle_pct",
    get: |n| n.app_idle,
    decimals: 1,
};
const WORKER_IDLE: Column = Column {
    name: "RX worker idle %",
    key: "app_idle_pct",
    get: |n| n.app_idle,
    decimals: 2,
};
const SOFTIRQ: Column = Column {
    name: "softirq %",
    key: "app_softirq_pct",
    get: |n| n.app_soft,
    decimals: 1,
};
const RX_TOTAL: Column = Column {
    name: "RX Gbps",
    key: "rx_gbps",
    get: |n| n.rx_gbps,
    decimals: 2,
};
const FRAGS: Column = Column {
    name: "frags/GiB",
    key: "frags_per_gib",
    get: |n| n.frags_per_gib,
    decimals: 0,
};
const DONTNEED: Column = Column {
    name: "DONTNEED/GiB",
    key: "dontneed_per_gib",
    get: |n| n.dontneed_per_gib,
    decimals: 0,
};
const PEER_TX: Column = Column {
    name: "peer TX Gbps",
    key: "peer_tx_gbps",
    get: |n| n.peer_tx_gbps,
    decimals: 2,
};
const MB_S: Column = Column {
    name: "MB/s",
    key: "rx_mb_per_s",
    get: |n| n.rx_mb_per_s,
    decimals: 1,
};
const USR: Column = Column {
    name: "%usr",
    key: "app_usr_pct",
    get: |n| n.app_usr,
    decimals: 2,
};
const SYS: Column = Column {
    name: "%sys",
    key: "app_sys_pct",
    get: |n| n.app_sys,
    decimals: 2,
};
const SOFT: Column = Column {
    name: "%soft",
    key: "app_softirq_pct",
    get: |n| n.app_soft,
    decimals: 2,
};
const IDLE: Column = Column {
    name: "%idle",
    key: "app_idle_pct",
    get: |n| n.app_idle,
    decimals: 2,
};
const COMPLETIONS: Column = Column {
    name: "completions/GiB",
    key: "completions_per_gib",
    get: |n| n.completions_per_gib,
    decimals: 0,
};

/// The table's value columns for a sweep over `key` (`None`: one configuration), the seeds'
/// first.
pub fn columns(key: Option<SweepKey>) -> Vec<Column> {
    match key {
        Some(SweepKey::RxBufLen) => vec![
            MB_S,
            USR,
            SYS,
            SOFT,
            IDLE,
            RX_FLOW_AVG,
            COMPLETIONS,
            PEER_TX,
        ],
        Some(SweepKey::Autorelease) => vec![
            WORKER_IDLE,
            RX_DEV,
            RX_FLOW_AVG,
            APP_SYS,
            SOFTIRQ,
            RX_TOTAL,
            FRAGS,
            DONTNEED,
            PEER_TX,
        ],
        _ => vec![
            RX_DEV,
            RX_FLOW_AVG,
            APP_SYS,
            APP_IDLE,
            SOFTIRQ,
            RX_TOTAL,
            FRAGS,
            DONTNEED,
            PEER_TX,
        ],
    }
}

/// Every figure of [`Numbers`] by its CSV/JSON name, in CSV order.
pub fn all_columns() -> Vec<Column> {
    vec![
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
        PEER_TX,
    ]
}

/// Mean, sample standard deviation and count of one column at one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); `None` for one run, which has
    /// none (the table shows `-`, the JSON `null`, the plot no error bar).
    pub sd: Option<f64>,
    /// Runs counted (1 or more).
    pub n: usize,
}

/// The statistic of `column` over the passed runs of `point`; `None` when none has it.
pub fn stat(records: &[RunRecord], point: usize, column: &Column) -> Option<Stat> {
    let values: Vec<f64> = records
        .iter()
        .filter(|r| r.slot.point == point && r.outcome == Outcome::Ok)
        .filter_map(|r| (column.get)(&r.numbers))
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
fn passed(records: &[RunRecord], point: usize) -> usize {
    records
        .iter()
        .filter(|r| r.slot.point == point && r.outcome == Outcome::Ok)
        .count()
}

/// A statistic as the table shows it: `mean +/- sd` with `decimals` decimals, `-` for the sd
/// of one run, and ` (n=K)` after it when K differs from `passed` (the runs column's count:
/// a figure some of the passed runs do not have).
pub fn stat_cell(s: &Stat, decimals: usize, passed: usize) -> String {
    let sd =
        s.sd.map_or_else(|| "-".to_string(), |sd| format!("{sd:.decimals$}"));
    let mut cell = format!("{:.decimals$} +/- {sd}", s.mean);
    if s.n != passed {
        cell.push_str(&format!(" (n={})", s.n));
    }
    cell
}

/// What happened to the runs of one point: passed, failed, skipped of how many planned.
fn runs_cell(records: &[RunRecord], point: usize, planned: u32) -> String {
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

/// The table: a header row, one row per point, the columns two spaces apart, then one line
/// per run that failed or skipped. `records` may cover only part of the plan (a sweep that
/// stopped early prints what it has).
pub fn table(plan: &Plan, records: &[RunRecord]) -> String {
    let cols = columns(plan.key);
    let first = plan.key.map_or("niov", SweepKey::column);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec![first.to_string()];
    header.extend(cols.iter().map(|c| c.name.to_string()));
    header.push("runs".into());
    rows.push(header);
    for point in 0..plan.points.len() {
        let mut row = vec![plan.show(point)];
        for c in &cols {
            row.push(match stat(records, point, c) {
                Some(s) => stat_cell(&s, c.decimals, passed(records, point)),
                None => "-".into(),
            });
        }
        row.push(runs_cell(records, point, plan.runs));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
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
    out
}

/// One CSV row per run (kperf's convention: a header row first): where the run sits, how it
/// ended, and every figure of [`all_columns`] (empty where the run has none).
///
/// Errors: the CSV writer's (only from the underlying buffer, which cannot fail).
pub fn csv(plan: &Plan, records: &[RunRecord]) -> Result<String, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let cols = all_columns();
    let mut header = vec![
        "index", "key", "value", "point", "run", "outcome", "error", "bytes",
    ];
    header.extend(cols.iter().map(|c| c.key));
    w.write_record(&header).map_err(|e| e.to_string())?;
    for r in records {
        let value = plan.points.get(r.slot.point).copied().flatten();
        let mut row = vec![
            (r.slot.index + 1).to_string(),
            plan.key.map(|k| k.name().to_string()).unwrap_or_default(),
            value.map(|v| v.to_string()).unwrap_or_default(),
            r.slot.point.to_string(),
            (r.slot.run + 1).to_string(),
            r.outcome.name().to_string(),
            r.outcome.why().unwrap_or_default().to_string(),
            r.numbers.bytes.map(|b| b.to_string()).unwrap_or_default(),
        ];
        row.extend(cols.iter().map(|c| {
            (c.get)(&r.numbers)
                .map(|v| v.to_string())
                .unwrap_or_default()
        }));
        w.write_record(&row).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// A run's numbers as a JSON object, every figure of [`all_columns`] by its key.
pub fn numbers_json(n: &Numbers) -> Value {
    let mut m = serde_json::Map::new();
    for c in all_columns() {
        m.insert(c.key.into(), (c.get)(n).into());
    }
    m.insert("bytes".into(), n.bytes.into());
    Value::Object(m)
}

/// Every point's statistics as JSON: `[{"value", "label", "runs_ok", "columns": {key:
/// {"mean", "sd", "n"}}}]`, `sd` `null` for one run and a column `null` where no passed run
/// has the figure.
pub fn points_json(plan: &Plan, records: &[RunRecord]) -> Value {
    (0..plan.points.len())
        .map(|p| {
            let mut cols = serde_json::Map::new();
            for c in all_columns() {
                cols.insert(
                    c.key.into(),
                    match stat(records, p, &c) {
                        Some(s) => serde_json::json!({"mean": s.mean, "sd": s.sd, "n": s.n}),
                        None => Value::Null,
                    },
                );
            }
            serde_json::json!({
                "value": plan.points[p],
                "label": plan.show(p),
                "runs_ok": passed(records, p),
                "columns": cols,
            })
        })
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::plan::Sweep;

    fn record(plan: &Plan, index: usize, outcome: Outcome, n: Numbers) -> RunRecord {
        RunRecord {
            slot: plan.order()[index],
            outcome,
            numbers: n,
            body: None,
            peer: None,
        }
    }

    fn nums(dev: f64, flow: f64, sys: f64) -> Numbers {
        Numbers {
            rx_dev_gbps: Some(dev),
            rx_flow_avg_gbps: Some(flow),
            rx_gbps: Some(flow * 4.0),
            app_sys: Some(sys),
            app_idle: Some(100.0 - sys),
            app_soft: Some(1.0),
            frags_per_gib: Some(262144.0),
            dontneed_per_gib: Some(1024.0),
            peer_tx_gbps: Some(dev),
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

    /// The layout, golden: the seed's first columns exactly, then the tool's own, then the
    /// runs and the failures.
    #[test]
    fn the_table_layout_is_golden() {
        let s = Sweep::parse("rx-page-size=4096,65536", 4096).unwrap();
        let plan = Plan::new(Some(&s), 2);
        let recs = vec![
            record(&plan, 0, Outcome::Ok, nums(9.0, 2.25, 40.0)),
            record(&plan, 1, Outcome::Ok, nums(9.5, 2.375, 30.0)),
            record(&plan, 2, Outcome::Ok, nums(11.0, 2.75, 42.0)),
            record(
                &plan,
                3,
                Outcome::Failed("flow 1: mismatch at 8192".into()),
                Numbers::default(),
            ),
        ];
        let want = "\
niov  RX dev Gbps     RX flow avg Gbps  app sys %     app idle %    softirq %    RX Gbps         frags/GiB     DONTNEED/GiB  peer TX Gbps    runs
4K    10.00 +/- 1.41  2.50 +/- 0.35     41.0 +/- 1.4  59.0 +/- 1.4  1.0 +/- 0.0  10.00 +/- 1.41  262144 +/- 0  1024 +/- 0    10.00 +/- 1.41  2/2
64K   9.50 +/- -      2.38 +/- -        30.0 +/- -    70.0 +/- -    1.0 +/- -    9.50 +/- -      262144 +/- -  1024 +/- -    9.50 +/- -      1/2 FAILED 1
FAILED: rx-page-size=65536 run 2/2: flow 1: mismatch at 8192
";
        assert_eq!(table(&plan, &recs), want);
        assert!(want.starts_with("niov  RX dev Gbps     RX flow avg Gbps  app sys %"));
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
        let points = points_json(&plan, &recs);
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
        let zc: Vec<&str> = columns(Some(SweepKey::RxBufLen))
            .iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(&zc[..5], &["MB/s", "%usr", "%sys", "%soft", "%idle"]);
        let ar = columns(Some(SweepKey::Autorelease));
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
            "index,key,value,point,run,outcome,error,bytes,rx_dev_gbps,rx_flow_avg_gbps,rx_gbps,rx_mb_per_s,app_usr_pct,app_sys_pct,app_softirq_pct,app_idle_pct,frags_per_gib,dontneed_per_gib,completions_per_gib,peer_tx_gbps"
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

    /// The numbers come from the flows engine's summary: device RX from qstats, frags per GiB
    /// over the whole receive's bytes, the peer's rate from its figures.
    #[test]
    fn numbers_are_taken_from_the_runs_summary() {
        let body = serde_json::json!({
            "mode": "devmem", "bytes": 1u64 << 30, "gbit_per_s": 8.0,
            "flow_avg_gbit_per_s": 2.0, "dmabuf_frags": 1000, "linear_frags": 24,
            "dontneed_calls": 512,
            "device_rx": {"gbit_per_s": 8.5},
            "cpu": {"app": {"usr": 1.0, "sys": 30.0, "softirq": 5.0, "idle": 60.0}},
            "flows": [{"bytes": 1u64 << 30}, {"bytes": 1u64 << 30}],
        });
        let peer = PeerFigures {
            bytes: 1,
            elapsed_s: 1.0,
            gbit_per_s: 7.5,
            flow_bytes: vec![1],
            cpu: None,
            error: None,
        };
        let n = Numbers::of_run(&body, Some(&peer), None);
        assert_eq!(n.rx_dev_gbps, Some(8.5));
        assert_eq!(n.rx_flow_avg_gbps, Some(2.0));
        assert_eq!(n.frags_per_gib, Some(512.0));
        assert_eq!(n.dontneed_per_gib, Some(256.0));
        assert_eq!(n.app_sys, Some(30.0));
        assert_eq!(n.peer_tx_gbps, Some(7.5));
        assert_eq!(n.rx_mb_per_s, Some(1000.0));
        assert_eq!(n.completions_per_gib, None);
        let plain = serde_json::json!({"mode": "plain TCP", "bytes": 100, "gbit_per_s": 1.0, "dontneed_calls": 0});
        let cpu = CpuShares {
            usr: 2.0,
            sys: 3.0,
            irq: 0.0,
            softirq: 4.0,
            iowait: 0.0,
            idle: 91.0,
            steal: 0.0,
            ticks: 100,
        };
        let n = Numbers::of_run(&plain, None, Some(&cpu));
        assert_eq!(n.rx_dev_gbps, None, "never the socket figure");
        assert_eq!(n.frags_per_gib, None, "plain TCP has no frags");
        assert_eq!(n.dontneed_per_gib, None);
        assert_eq!(n.app_idle, Some(91.0));
        assert_eq!(n.rx_flow_avg_gbps, Some(1.0));
    }
}
