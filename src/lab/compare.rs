//! Two sweeps (or repeated runs) compared: `--compare BASE.json NEW.json`, and a sweep's
//! `--baseline BASE.json`. Points are matched by their swept value (or, where the two files
//! swept different values of the same key, one point each or as many on each side, by
//! position); for every figure both sides have, the base's and the new one's `mean +/- sd
//! (n)`, the change in percent, the 95 % confidence interval of the difference and Welch's
//! t-test p (the t distribution from `statrs`), marked where p < 0.05.
//!
//! Files of different shape (receive mode, flows, duration, warm-up, queues, how the peer
//! sends and its write size, congestion control, buffer sizes, the swept key) are refused,
//! naming every difference, unless `--any-shape`; differences of environment (the kernel
//! release, which is usually the point; a different CPU model or governor, a warning) are
//! listed. Everything here but [`read_file`] and `run` is pure.

use std::path::Path;

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::plan::SweepKey;
use super::results::{column_named, Column, Stat};
use super::table::{render_blocks, wrap, wrap_units, Format, Grid, MAIL_WIDTH};
use crate::cli::CompareArgs;
use crate::error::{Error, Result};
use crate::run_report::RunReport;
use crate::summary::sweep::{
    CompareBody, Comparison, ComparisonCell, ComparisonRow, EnvDifference, PointFigure, Provenance,
    SweepBody, SweepEnvironment, SweepFile,
};

/// The significance level of the marks.
pub(crate) const ALPHA: f64 = 0.05;

/// Welch's t-test of two samples given by their statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Welch {
    /// The t statistic of new − base.
    pub t: f64,
    /// The Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// The two-sided p.
    pub p: f64,
    /// The 95 % confidence interval of new − base.
    pub ci95: (f64, f64),
}

/// Welch's t-test of `new` against `base` (means, sample sds, counts): `None` when a side
/// has fewer than 2 values (no sd) or neither has any spread (the standard error is 0).
pub(crate) fn welch(base: &Stat, new: &Stat) -> Option<Welch> {
    let (s1, s2) = (base.sd?, new.sd?);
    let (n1, n2) = (base.n as f64, new.n as f64);
    if base.n < 2 || new.n < 2 {
        return None;
    }
    let (v1, v2) = (s1 * s1 / n1, s2 * s2 / n2);
    let se2 = v1 + v2;
    if se2.is_nan() || se2 <= 0.0 || se2.is_infinite() {
        return None;
    }
    let se = se2.sqrt();
    let df = se2 * se2 / (v1 * v1 / (n1 - 1.0) + v2 * v2 / (n2 - 1.0));
    let d = new.mean - base.mean;
    let t = d / se;
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = (2.0 * dist.sf(t.abs())).min(1.0);
    let q = dist.inverse_cdf(0.975);
    Some(Welch {
        t,
        df,
        p,
        ci95: (d - q * se, d + q * se),
    })
}

/// One side of a comparison: a file's name and its body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side<'a> {
    /// As the comparison names it (the path given).
    pub name: &'a str,
    /// The sweep.
    pub body: &'a SweepBody,
}

/// Reads a sweep's (or repeated run's) JSON file.
///
/// Errors: [`Error::Usage`] naming the file and what is wrong with it.
pub(crate) fn read_file(flag: &str, path: &Path) -> Result<SweepFile> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "{flag}: cannot read '{}' ({})",
            path.display(),
            crate::error::errno_display(crate::error::errno_of(&e))
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "{flag}: '{}' is not the --json file of a sweep or of repeated runs of this \
             version ({e})",
            path.display()
        ))
    })
}

/// The shape of a file: what its runs measured, member by member, as `(option, value)`.
fn shape(b: &SweepBody) -> Vec<(&'static str, String)> {
    let e: &SweepEnvironment = &b.environment;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "default".into());
    vec![
        ("receive mode", e.receive_mode.clone()),
        ("--sweep key", opt(b.plan.key.clone())),
        (
            "--flows",
            e.flows.map_or_else(|| "as swept".into(), |f| f.to_string()),
        ),
        ("--duration", format!("{} s", e.duration_s)),
        ("--warmup", opt(e.warmup_s.map(|w| format!("{w} s")))),
        (
            "-t/-q",
            opt(e.queues.map(|q| format!("{}+{}", q.start, q.count))),
        ),
        ("--peer-send", e.peer_send.clone()),
        (
            "--write-size",
            opt(e.peer_write_size.map(|w| w.to_string())),
        ),
        ("--tcp-cc", opt(e.tcp_cc.clone())),
        ("--dmabuf-size", opt(e.dmabuf_size.map(|w| w.to_string()))),
        ("-b", opt(e.rx_page_size.map(|w| w.to_string()))),
        ("--rx-buf-len", opt(e.rx_buf_len.map(|w| w.to_string()))),
        ("--hds-thresh", opt(e.hds_thresh.map(|w| w.to_string()))),
    ]
}

/// The differences of shape between `base` and `new`: `--write-size: 1448 (base) against
/// 65536 (new)`.
pub(crate) fn shape_differences(base: &SweepBody, new: &SweepBody) -> Vec<String> {
    shape(base)
        .into_iter()
        .zip(shape(new))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((what, a), (_, b))| format!("{what}: {a} (base) against {b} (new)"))
        .collect()
}

/// The differences between two provenances (`who` `""` for this host, `"peer "` for the
/// peer's): the kernel release first; a different CPU model, CPU set or governor is a
/// warning.
fn provenance_differences(who: &str, a: &Provenance, b: &Provenance) -> Vec<EnvDifference> {
    let s = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
    let nic = |p: &Provenance, f: fn(&crate::summary::sweep::NicProvenance) -> &String| {
        p.nic.as_ref().map(|n| f(n).clone())
    };
    let mut pairs: Vec<(String, String, String, &str)> = vec![
        (
            "kernel release".into(),
            s(&a.kernel_release),
            s(&b.kernel_release),
            "note",
        ),
        (
            "CPU model".into(),
            s(&a.cpu_model),
            s(&b.cpu_model),
            "warning",
        ),
        (
            "online CPUs".into(),
            s(&a.online_cpus),
            s(&b.online_cpus),
            "warning",
        ),
        ("governor".into(), s(&a.governor), s(&b.governor), "warning"),
        ("host".into(), s(&a.host_name), s(&b.host_name), "note"),
        (
            "kernel command line".into(),
            s(&a.kernel_cmdline),
            s(&b.kernel_cmdline),
            "note",
        ),
        (
            "tool version".into(),
            a.version.clone(),
            b.version.clone(),
            "note",
        ),
        (
            "NIC driver".into(),
            s(&nic(a, |n| &n.driver)),
            s(&nic(b, |n| &n.driver)),
            "note",
        ),
        (
            "NIC firmware".into(),
            s(&nic(a, |n| &n.firmware)),
            s(&nic(b, |n| &n.firmware)),
            "note",
        ),
        ("IRQ affinity".into(), irqs(a), irqs(b), "note"),
    ];
    let names: std::collections::BTreeSet<&String> =
        a.sysctls.keys().chain(b.sysctls.keys()).collect();
    for name in names {
        let get = |p: &Provenance| s(&p.sysctls.get(name).cloned().flatten());
        pairs.push((format!("sysctl {name}"), get(a), get(b), "note"));
    }
    pairs
        .into_iter()
        .filter(|(_, x, y, _)| x != y)
        .map(|(what, base, new, level)| EnvDifference {
            what: format!("{who}{what}"),
            base,
            new,
            level: level.into(),
        })
        .collect()
}

fn irqs(p: &Provenance) -> String {
    let v: Vec<String> = p
        .queue_irqs
        .iter()
        .map(|q| format!("q{}@{}", q.queue, q.affinity.as_deref().unwrap_or("?")))
        .collect();
    match v.is_empty() {
        true => "?".into(),
        false => v.join(" "),
    }
}

/// The environment differences of `base` and `new`: this host's, then the peer's where both
/// reported theirs.
pub(crate) fn environment_differences(base: &SweepBody, new: &SweepBody) -> Vec<EnvDifference> {
    let mut d = provenance_differences("", &base.provenance, &new.provenance);
    if let (Some(a), Some(b)) = (&base.peer_provenance, &new.peer_provenance) {
        d.extend(provenance_differences("peer ", a, b));
    }
    d
}

/// The column (header, decimals) a figure's key names in a sweep over `key`.
fn column_of(name: &str, key: Option<SweepKey>) -> Option<Column> {
    column_named(name, key, &[])
}

/// Compares `new` with `base`: the matched points and every figure both have (`columns`:
/// only these CSV names, in this order).
///
/// Errors: the refusal, for [`Error::Usage`]: the shapes differ (naming every difference)
/// and `any_shape` is not set; no point matches; a name in `columns` is no column.
pub(crate) fn compare(
    base: Side<'_>,
    new: Side<'_>,
    any_shape: bool,
    columns: Option<&[String]>,
) -> std::result::Result<Comparison, String> {
    let shape = shape_differences(base.body, new.body);
    if !shape.is_empty() && !any_shape {
        return Err(format!(
            "'{}' and '{}' measured different shapes: {}; give --any-shape to compare them \
             anyway",
            base.name,
            new.name,
            shape.join("; ")
        ));
    }
    let (bp, np) = (&base.body.points, &new.body.points);
    // A named key's points (tcp-cc) match by name: their values are positions in each
    // sweep's own list.
    let named = [&base.body.plan.key, &new.body.plan.key]
        .iter()
        .any(|k| k.as_deref() == Some(SweepKey::TcpCc.name()));
    let same = |p: &PointFigure, q: &PointFigure| match named {
        true => p.label == q.label,
        false => p.value == q.value,
    };
    let by_value: Vec<(usize, usize)> = bp
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, np.iter().position(|q| same(p, q))?)))
        .collect();
    let (pairs, matched_by) = if by_value.is_empty() && bp.len() == np.len() {
        ((0..bp.len()).map(|i| (i, i)).collect(), "position")
    } else {
        (by_value, if named { "name" } else { "value" })
    };
    if pairs.is_empty() {
        return Err(format!(
            "'{}' and '{}' have no point in common (base: {}; new: {})",
            base.name,
            new.name,
            labels(bp),
            labels(np)
        ));
    }
    let unmatched = bp
        .iter()
        .enumerate()
        .filter(|(i, _)| !pairs.iter().any(|(b, _)| b == i))
        .map(|(_, p)| format!("{} (base)", p.label))
        .chain(
            np.iter()
                .enumerate()
                .filter(|(i, _)| !pairs.iter().any(|(_, n)| n == i))
                .map(|(_, p)| format!("{} (new)", p.label)),
        )
        .collect();
    let key = base
        .body
        .plan
        .key
        .as_deref()
        .and_then(|k| super::plan::KEYS.into_iter().find(|s| s.name() == k));
    // A name that is no column is a typo, refused as the sweep refuses it (not a table
    // silently without it).
    if let Some(bad) = columns
        .into_iter()
        .flatten()
        .find(|c| *c != "runs" && column_of(c, key).is_none())
    {
        return Err(format!(
            "--columns: no column '{bad}' (expected the CSV names or headers of the sweep's \
             columns, e.g. rx_gbps, app_sys_pct, or runs)"
        ));
    }
    let rows = pairs
        .iter()
        .map(|&(b, n)| row(&bp[b], &np[n], key, columns))
        .collect();
    Ok(Comparison {
        base: base.name.to_string(),
        new: Some(new.name.to_string()),
        shape_differences: shape,
        environment_differences: environment_differences(base.body, new.body),
        matched_by: matched_by.into(),
        unmatched,
        rows,
        alpha: ALPHA,
    })
}

fn labels(points: &[PointFigure]) -> String {
    points
        .iter()
        .map(|p| p.label.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cells of one matched pair: every figure either side has (in the base's column order,
/// or `columns`'), each with its statistics and, where both sides have them, the test.
fn row(
    b: &PointFigure,
    n: &PointFigure,
    key: Option<SweepKey>,
    columns: Option<&[String]>,
) -> ComparisonRow {
    let keys: Vec<String> = match columns {
        Some(c) => c
            .iter()
            .filter(|k| *k != "runs")
            .filter_map(|k| column_of(k, key).map(|c| c.key.to_string()))
            .collect(),
        None => {
            let mut ks: Vec<String> = super::results::columns(key, &[])
                .iter()
                .map(|c| c.key.to_string())
                .collect();
            for k in b.columns.keys().chain(n.columns.keys()) {
                if !ks.contains(k) {
                    ks.push(k.clone());
                }
            }
            ks
        }
    };
    let mut seen = Vec::new();
    let cells = keys
        .into_iter()
        .filter(|k| {
            let new = !seen.contains(k);
            seen.push(k.clone());
            new
        })
        .filter_map(|k| {
            let bs = b.columns.get(&k).copied().flatten();
            let ns = n.columns.get(&k).copied().flatten();
            if bs.is_none() && ns.is_none() {
                return None;
            }
            let test = bs.zip(ns).and_then(|(x, y)| welch(&x, &y));
            let delta_pct = bs
                .zip(ns)
                .filter(|(x, _)| x.mean != 0.0)
                .map(|(x, y)| (y.mean - x.mean) / x.mean.abs() * 100.0);
            Some(ComparisonCell {
                name: column_of(&k, key).map_or(k.clone(), |c| c.name.to_string()),
                key: k,
                base: bs,
                new: ns,
                delta_pct,
                ci95: test.map(|w| [w.ci95.0, w.ci95.1]),
                p: test.map(|w| w.p),
                significant: test.is_some_and(|w| w.p < ALPHA),
            })
        })
        .collect();
    ComparisonRow {
        base_point: b.label.clone(),
        new_point: n.label.clone(),
        cells,
    }
}

/// `mean +/- sd (n)` with `decimals`.
fn side_cell(s: Option<Stat>, decimals: usize, scale: f64) -> String {
    match s {
        None => "-".into(),
        Some(s) => format!(
            "{:.decimals$} +/- {} ({})",
            s.mean * scale,
            s.sd.map_or("-".to_string(), |sd| format!("{:.decimals$}", sd * scale)),
            s.n
        ),
    }
}

/// The comparison's table: one row per matched point and figure: the point, the figure,
/// base and new `mean +/- sd (n)`, the change in percent, the 95 % CI of new − base, p, and
/// `*` where p < 0.05.
pub(crate) fn grid(c: &Comparison, key_column: &str) -> Grid {
    let header = [
        key_column,
        "figure",
        "base",
        "new",
        "delta %",
        "95% CI of delta",
        "p",
        // The mark's column: `*` where the difference is significant.
        "sig",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for r in &c.rows {
        let point = match r.base_point == r.new_point {
            true => r.base_point.clone(),
            false => format!("{}->{}", r.base_point, r.new_point),
        };
        for cell in &r.cells {
            let (decimals, scale) =
                column_of(&cell.key, None).map_or((2, 1.0), |col| (col.decimals, col.scale));
            rows.push(vec![
                point.clone(),
                cell.name.clone(),
                side_cell(cell.base, decimals, scale),
                side_cell(cell.new, decimals, scale),
                cell.delta_pct.map_or("-".into(), |d| format!("{d:+.1}")),
                cell.ci95.map_or("-".into(), |[lo, hi]| {
                    format!("[{:.decimals$}, {:.decimals$}]", lo * scale, hi * scale)
                }),
                cell.p.map_or("-".into(), fmt_p),
                if cell.significant { "*" } else { "" }.into(),
            ]);
        }
    }
    Grid { header, rows }
}

/// p as the table shows it: 3 significant digits, `<0.001` below that.
pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// The comparison as text, markdown or CSV, with its notes (text and markdown): how the
/// points were matched, points without a match, the shape differences it was told to
/// accept, the environment differences, and how to read the marks.
///
/// A text table wider than [`MAIL_WIDTH`] is printed as two blocks, so that it fits a mail:
/// the two sides (`base`, `new`), then the difference (`delta %`, its CI, `p`, the mark).
pub(crate) fn render(c: &Comparison, key_column: &str, format: Format) -> String {
    let g = grid(c, key_column);
    let blocks = match format == Format::Text && g.width() > MAIL_WIDTH {
        true => vec![g.select(&[0, 1, 2, 3]), g.select(&[0, 1, 4, 5, 6, 7])],
        false => vec![g],
    };
    let mut out = render_blocks(&blocks, format).unwrap_or_else(|e| format!("{e}\n"));
    if format == Format::Csv {
        return out;
    }
    // The notes wrap at a mail's 72 characters, continuation lines indented.
    out.push_str(&wrap(&format!(
        "base: {}; new: {}; points matched by {}",
        c.base,
        c.new.as_deref().unwrap_or("this sweep"),
        c.matched_by
    )));
    if !c.unmatched.is_empty() {
        out.push_str(&wrap(&format!("no match: {}", c.unmatched.join(", "))));
    }
    for d in &c.shape_differences {
        out.push_str(&wrap(&format!("shape differs (--any-shape): {d}")));
    }
    for d in &c.environment_differences {
        out.push_str(&wrap(&format!(
            "{}: {} differs: {} (base) against {} (new)",
            if d.level == "warning" {
                "WARNING"
            } else {
                "env"
            },
            d.what,
            d.base,
            d.new
        )));
    }
    let sig = c
        .rows
        .iter()
        .flat_map(|r| &r.cells)
        .filter(|x| x.significant)
        .count();
    // The count stays whole at the end of the last line (`…: N significant`).
    let legend = "mean +/- sample sd (n runs); delta = new - base; 95% CI of new - base and p \
                  from Welch's t-test (two-sided; '-' with fewer than 2 runs on a side);";
    let mut units: Vec<String> = legend.split(' ').map(String::from).collect();
    units.push(format!("* p < {}: {sig} significant", c.alpha));
    out.push_str(&wrap_units("", &units, "  ", "", MAIL_WIDTH));
    out
}

/// `--compare BASE.json NEW.json`: reads both, compares them, prints the comparison and
/// records it as the run's body; with `--plot`, the two-series picture.
///
/// Errors: [`Error::Usage`] for a file that cannot be read or is no sweep's JSON, a shape
/// refusal, no point in common, a `--plot` that cannot be written; writing stdout.
pub(crate) fn run(a: &CompareArgs, report: &RunReport) -> Result<()> {
    let base = read_file("--compare", &a.base)?;
    let new = read_file("--compare", &a.new)?;
    // The names as the tables and notes print them: control characters escaped.
    let (bn, nn) = (
        super::proto::printable(&a.base.display().to_string()),
        super::proto::printable(&a.new.display().to_string()),
    );
    let c = compare(
        Side {
            name: &bn,
            body: &base.body,
        },
        Side {
            name: &nn,
            body: &new.body,
        },
        a.any_shape,
        a.columns.as_deref(),
    )
    .map_err(|e| Error::Usage(format!("--compare: {e}")))?;
    let key_column = base
        .body
        .plan
        .key
        .as_deref()
        .and_then(|k| super::plan::KEYS.into_iter().find(|s| s.name() == k))
        .map_or("point", SweepKey::column);
    report.print(&render(&c, key_column, a.format))?;
    let mut result = Ok(());
    if let Some(path) = &a.plot {
        result = super::plot::PlotFormat::of(path)
            .and_then(|f| super::plot::comparison(&c, f))
            .map_err(|e| Error::Failure(format!("--plot: {e}")))
            .and_then(|bytes| {
                std::fs::write(path, bytes)
                    .map_err(|e| Error::io(format!("--plot: write({})", path.display()), &e))
            });
    }
    report.body(crate::summary::Body::Compare(Box::new(CompareBody {
        comparison: c,
    })));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(mean: f64, sd: f64, n: usize) -> Stat {
        Stat {
            mean,
            sd: (n > 1).then_some(sd),
            n,
        }
    }

    /// Welch's t-test and the CI against scipy 1.17.1, computed outside the project:
    /// `scipy.stats.ttest_ind_from_stats(m2, s2, n2, m1, s1, n1, equal_var=False)` for t and
    /// p, `scipy.stats.t.ppf(0.975, df)` for the CI (`/tmp/ref.py` in the commit message's
    /// words: d ± t.ppf(0.975, df)·se), and cross-checked with
    /// `ttest_ind(b, a, equal_var=False).confidence_interval(0.95)` on raw samples.
    #[test]
    fn welch_matches_scipy() {
        // (base mean, sd, n, new mean, sd, n) -> (t, p, df, ci low, ci high)
        let cases = [
            // The large-niov table's 4K and 64K RX dev Gbps (mean, sd over 10 runs).
            (
                (300.63, 53.21, 10, 321.35, 28.20, 10),
                (
                    1.08803601105,
                    0.295369100335,
                    13.6860501355,
                    -20.2122938302,
                    61.6522938302,
                ),
            ),
            (
                (1.0, 0.1, 3, 1.5, 0.2, 3),
                (
                    3.87298334621,
                    0.0315622316257,
                    2.94117647059,
                    0.0844600496817,
                    0.915539950318,
                ),
            ),
            (
                (10.0, 1.0, 5, 10.2, 3.0, 2),
                (
                    0.0922531208029,
                    0.940470871569,
                    1.09032576505,
                    -22.4980053516,
                    22.8980053516,
                ),
            ),
            // The VM's 4K and 64K frags per GiB (docs/lab.md).
            (
                (286083.0, 4047.0, 3, 59032.0, 32074.0, 3),
                (
                    -12.1646896198,
                    0.00594812009094,
                    2.06366636948,
                    -305030.828602,
                    -149071.171398,
                ),
            ),
        ];
        for ((m1, s1, n1, m2, s2, n2), (t, p, df, lo, hi)) in cases {
            let w = welch(&st(m1, s1, n1), &st(m2, s2, n2)).unwrap();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-7 * b.abs().max(1.0);
            assert!(close(w.t, t), "t {} against {t}", w.t);
            assert!(close(w.df, df), "df {} against {df}", w.df);
            assert!((w.p - p).abs() < 1e-9, "p {} against {p}", w.p);
            assert!(close(w.ci95.0, lo) && close(w.ci95.1, hi), "{:?}", w.ci95);
        }
        // ttest_ind([9.5, 10.5, 10.0], [9.0, 11.0], equal_var=False): t 0, p 1,
        // CI (-9.453653198729201, 9.453653198729201).
        let a = st(10.0, std::f64::consts::SQRT_2, 2);
        let b = st(10.0, 0.5, 3);
        let w = welch(&a, &b).unwrap();
        assert_eq!((w.t, w.p), (0.0, 1.0));
        assert!((w.ci95.1 - 9.453653198729201).abs() < 1e-9, "{:?}", w.ci95);
        // No test with one run on a side, or without any spread.
        assert_eq!(welch(&st(1.0, 0.0, 1), &st(2.0, 0.1, 3)), None);
        assert_eq!(welch(&st(1.0, 0.0, 3), &st(2.0, 0.0, 3)), None);
    }

    /// A point of a test body: its value, label and figures.
    type TestPoint<'a> = (u64, &'a str, &'a [(&'a str, Stat)]);

    fn body(key: &str, points: &[TestPoint<'_>]) -> SweepBody {
        let text = include_str!("../../tests/fixtures/lab/sweep-body.json");
        let mut b: SweepBody = serde_json::from_str(text).unwrap();
        b.plan.key = Some(key.into());
        b.points = points
            .iter()
            .map(|(v, label, cols)| PointFigure {
                value: Some(*v),
                label: label.to_string(),
                runs_ok: 3,
                columns: cols
                    .iter()
                    .map(|(k, s)| (k.to_string(), Some(*s)))
                    .collect(),
            })
            .collect();
        b
    }

    /// The comparison of two rx-page-size sweeps, golden: matched by value, the frags per
    /// GiB significant, RX not; the text table and its notes.
    #[test]
    fn the_comparison_is_golden() {
        let base = body(
            "rx-page-size",
            &[(
                4096,
                "4K",
                &[
                    ("rx_dev_gbps", st(300.63, 53.21, 10)),
                    ("frags_per_gib", st(286083.0, 4047.0, 10)),
                ],
            )],
        );
        let mut new = body(
            "rx-page-size",
            &[(
                4096,
                "4K",
                &[
                    ("rx_dev_gbps", st(321.35, 28.20, 10)),
                    ("frags_per_gib", st(59032.0, 32074.0, 10)),
                ],
            )],
        );
        new.provenance.kernel_release = Some("7.3.0-patched".into());
        new.provenance.cpu_model = Some("Other CPU".into());
        let c = compare(
            Side {
                name: "base.json",
                body: &base,
            },
            Side {
                name: "new.json",
                body: &new,
            },
            false,
            None,
        )
        .unwrap();
        assert_eq!(c.matched_by, "value");
        let cells = &c.rows[0].cells;
        assert_eq!(cells.len(), 2);
        assert!(!cells[0].significant && cells[1].significant, "{cells:?}");
        let text = render(&c, "niov", Format::Text);
        // The CIs and p are scipy's (welch_matches_scipy; the second row's by the same
        // commands: [-250068.98, -204033.02], p 2.3e-09).
        let want = "\
niov  figure       base                   new
4K    RX dev Gbps  300.63 +/- 53.21 (10)  321.35 +/- 28.20 (10)
4K    frags/GiB    286083 +/- 4047 (10)   59032 +/- 32074 (10)

niov  figure       delta %  95% CI of delta     p       sig
4K    RX dev Gbps  +6.9     [-20.21, 61.65]     0.295
4K    frags/GiB    -79.4    [-250069, -204033]  <0.001  *
";
        // Every line fits a mail, the notes too (before: only the table's seven did).
        for line in text.lines() {
            assert!(line.len() <= 72, "{line:?}");
        }
        assert!(text.starts_with(want), "{text}");
        assert!(
            text.contains("base: base.json; new: new.json; points matched by value\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "env: kernel release differs: 6.18.0 (base) against 7.3.0-patched (new)\n"
            ),
            "{text}"
        );
        assert!(text.contains("WARNING: CPU model differs:"), "{text}");
        assert!(
            text.ends_with(
                "mean +/- sample sd (n runs); delta = new - base; 95% CI of new - base\n  \
                 and p from Welch's t-test (two-sided; '-' with fewer than 2 runs on a\n  \
                 side); * p < 0.05: 1 significant\n"
            ),
            "{text}"
        );
        let md = render(&c, "niov", Format::Markdown);
        assert!(
            md.starts_with(
                "| niov | figure | base | new | delta % | 95% CI of delta | p | sig |\n|---|"
            ),
            "{md}"
        );
        let csv = render(&c, "niov", Format::Csv);
        assert_eq!(csv.lines().count(), 3, "{csv}");
        // --columns picks the figures.
        let only = compare(
            Side {
                name: "base.json",
                body: &base,
            },
            Side {
                name: "new.json",
                body: &new,
            },
            false,
            Some(&["frags_per_gib".to_string()]),
        )
        .unwrap();
        assert_eq!(only.rows[0].cells.len(), 1);
        assert_eq!(only.rows[0].cells[0].key, "frags_per_gib");
        // A name that is no column is refused, not dropped (the table was empty, exit 0).
        for bad in [&["bogus"][..], &["rx_gbps", "bogus"]] {
            let cols: Vec<String> = bad.iter().map(|c| c.to_string()).collect();
            let e = compare(
                Side {
                    name: "base.json",
                    body: &base,
                },
                Side {
                    name: "new.json",
                    body: &new,
                },
                false,
                Some(&cols),
            )
            .unwrap_err();
            assert!(e.starts_with("--columns: no column 'bogus'"), "{e}");
        }
    }

    /// tcp-cc's points match by name: each sweep numbers its names in its own order.
    #[test]
    fn tcp_cc_points_match_by_name() {
        let b = body(
            "tcp-cc",
            &[
                (0, "cubic", &[("rx_gbps", st(9.0, 0.5, 3))]),
                (1, "reno", &[("rx_gbps", st(8.0, 0.5, 3))]),
            ],
        );
        let n = body(
            "tcp-cc",
            &[
                (0, "reno", &[("rx_gbps", st(8.5, 0.5, 3))]),
                (1, "dctcp", &[("rx_gbps", st(7.0, 0.5, 3))]),
            ],
        );
        let side = |name, body| Side { name, body };
        let c = compare(side("b.json", &b), side("n.json", &n), false, None).unwrap();
        assert_eq!(c.matched_by, "name");
        assert_eq!(c.rows.len(), 1, "{c:?}");
        assert_eq!(
            (c.rows[0].base_point.as_str(), c.rows[0].new_point.as_str()),
            ("reno", "reno")
        );
        assert_eq!(c.unmatched, ["cubic (base)", "dctcp (new)"]);
    }

    /// A sweep compared with itself: nothing differs, nothing is significant.
    #[test]
    fn a_sweep_against_itself_has_nothing_significant() {
        let b = body(
            "flows",
            &[
                (1, "1", &[("rx_gbps", st(9.0, 0.5, 3))]),
                (2, "2", &[("rx_gbps", st(17.0, 1.5, 3))]),
            ],
        );
        let s = Side {
            name: "a.json",
            body: &b,
        };
        let c = compare(s, s, false, None).unwrap();
        assert!(c.environment_differences.is_empty() && c.shape_differences.is_empty());
        assert_eq!(c.rows.len(), 2);
        for cell in c.rows.iter().flat_map(|r| &r.cells) {
            assert!(!cell.significant);
            assert_eq!(cell.p, Some(1.0));
            assert_eq!(cell.delta_pct, Some(0.0));
        }
    }

    /// Refusals: another write size (a shape difference, named; taken with --any-shape and
    /// listed), points with nothing in common; one point each of another value is matched by
    /// position.
    #[test]
    fn different_shapes_are_refused_naming_the_difference() {
        let b = body(
            "rx-page-size",
            &[(4096, "4K", &[("rx_gbps", st(9.0, 0.5, 3))])],
        );
        let mut n = b.clone();
        n.environment.peer_write_size = Some(1448);
        n.environment.duration_s = 5.0;
        let side = |name, body| Side { name, body };
        let e = compare(side("b.json", &b), side("n.json", &n), false, None).unwrap_err();
        assert_eq!(
            e,
            "'b.json' and 'n.json' measured different shapes: --duration: 3 s (base) against \
             5 s (new); --write-size: default (base) against 1448 (new); give --any-shape to \
             compare them anyway"
        );
        let c = compare(side("b.json", &b), side("n.json", &n), true, None).unwrap();
        assert_eq!(c.shape_differences.len(), 2);
        // Wrapped at 72 characters (before: one line of 76).
        assert!(render(&c, "niov", Format::Text).contains(
            "shape differs (--any-shape): --write-size: default (base) against 1448\n  (new)\n"
        ));
        // 4K against 64K, one point each: by position.
        let big = body(
            "rx-page-size",
            &[(65536, "64K", &[("rx_gbps", st(9.0, 0.5, 3))])],
        );
        let c = compare(side("b.json", &b), side("n.json", &big), false, None).unwrap();
        assert_eq!(
            (c.matched_by.as_str(), c.rows[0].new_point.as_str()),
            ("position", "64K")
        );
        let text = render(&c, "niov", Format::Text);
        assert!(
            text.starts_with(
                "niov     figure   base               new\n4K->64K  RX Gbps  9.00 +/- 0.50 (3)  "
            ),
            "{text}"
        );
        // Two points against one of another value: nothing in common.
        let two = body(
            "rx-page-size",
            &[
                (8192, "8K", &[("rx_gbps", st(9.0, 0.5, 3))]),
                (16384, "16K", &[("rx_gbps", st(9.0, 0.5, 3))]),
            ],
        );
        assert_eq!(
            compare(side("b.json", &b), side("t.json", &two), false, None).unwrap_err(),
            "'b.json' and 't.json' have no point in common (base: 4K; new: 8K, 16K)"
        );
        // Another key is a shape difference.
        let flows = body("flows", &[(4096, "4096", &[])]);
        assert!(
            compare(side("b.json", &b), side("f.json", &flows), false, None)
                .unwrap_err()
                .contains("--sweep key: rx-page-size (base) against flows (new)")
        );
    }
}
