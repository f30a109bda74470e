//! The per-CPU table a timed receive prints at its end, in mpstat's shape: one row for all
//! CPUs and one per app CPU and net CPU, the columns `%usr %nice %sys %iowait %irq %soft
//! %idle`, and a role column naming each CPU net (it ran NET_RX softirqs: the bound queues'
//! NAPI), app (a worker ran there) or both. Pure: it prints the run's typed figures
//! ([`crate::summary::CpuSplit`]), it measures nothing.

use crate::summary::{CpuSplit, SharesFigure};

/// The table's header line (no trailing blank).
pub(crate) const HEADER: &str =
    "CPU     %usr   %nice    %sys %iowait    %irq   %soft   %idle  role";

/// A CPU's role in the run.
fn role(cpu: usize, app: &[usize], net: &[usize]) -> &'static str {
    match (net.contains(&cpu), app.contains(&cpu)) {
        (true, true) => "net,app",
        (true, false) => "net",
        (false, true) => "app",
        (false, false) => "",
    }
}

/// One row: the CPU label left-aligned in 4 characters, then each share right-aligned in 8
/// with two decimals, then the role (none: no trailing blank). `%usr` is `usr` less `nice`
/// (a summary without `nice` shows `usr` whole and `-` under `%nice`).
fn row(label: &str, s: &SharesFigure, role: &str) -> String {
    let (usr, nice) = match s.nice {
        Some(n) => ((s.usr - n).max(0.0), format!("{n:8.2}")),
        None => (s.usr, format!("{:>8}", "-")),
    };
    let line = format!(
        "{label:<4}{usr:8.2}{nice}{:8.2}{:8.2}{:8.2}{:8.2}{:8.2}  {role}",
        s.sys, s.iowait, s.irq, s.softirq, s.idle
    );
    line.trim_end().to_string()
}

/// The table of `split`: a title line, [`HEADER`], the `all` row, one row per CPU that is an
/// app CPU or a net CPU (ascending; a CPU without a `/proc/stat` row is left out), a line
/// that names the roles, and, when any row had steal time, a line with each row's `%steal`
/// (mpstat's column, left out of the table so that it fits a 72-character mail line; each
/// row's columns and its steal sum to 100), wrapped like the rest: every line is at most 72
/// characters.
pub(crate) fn table(split: &CpuSplit) -> Vec<String> {
    let app = &split.app_cpus;
    let net: &[usize] = split.net_cpus.as_deref().unwrap_or(&[]);
    let shown: Vec<_> = split
        .per_cpu
        .iter()
        .filter(|c| app.contains(&c.cpu) || net.contains(&c.cpu))
        .collect();
    let mut lines = vec![
        "per CPU over the measured interval (/proc/stat, as mpstat reads it):".to_string(),
        HEADER.to_string(),
        row("all", &split.all, ""),
    ];
    for c in &shown {
        lines.push(row(&c.cpu.to_string(), &c.shares, role(c.cpu, app, net)));
    }
    lines.push(match split.net_cpus {
        Some(_) => "role: net ran >= 10 % of the NET_RX softirqs, app ran a worker".to_string(),
        None => "role: app ran a worker; net CPUs unknown (no /proc/softirqs)".to_string(),
    });
    let steal: Vec<String> = std::iter::once(("all".to_string(), &split.all))
        .chain(shown.iter().map(|c| (c.cpu.to_string(), &c.shares)))
        .map(|(l, s)| format!("{l} {:.2}", s.steal))
        .collect();
    if std::iter::once(&split.all)
        .chain(shown.iter().map(|c| &c.shares))
        .any(|s| s.steal > 0.0)
    {
        // Wrapped at 72 characters like the rows; continuation lines indented.
        let mut line = String::from("%steal:");
        let n = steal.len();
        for (k, item) in steal.into_iter().enumerate() {
            let piece = if k + 1 < n { format!("{item},") } else { item };
            if line.len() + 1 + piece.len() > 72 && line.trim() != "%steal:" {
                lines.push(std::mem::replace(&mut line, String::from("       ")));
            }
            line.push(' ');
            line.push_str(&piece);
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::CpuShareFigure;

    fn shares(usr: f64, nice: f64, sys: f64, soft: f64, idle: f64, steal: f64) -> SharesFigure {
        SharesFigure {
            usr,
            nice: Some(nice),
            sys,
            irq: 0.5,
            softirq: soft,
            iowait: 0.0,
            idle,
            steal,
            ticks: 400,
        }
    }

    /// Four CPUs: the workers on 2-3, NET_RX on 0 and 2; CPU 1 is neither and has no row.
    fn split() -> CpuSplit {
        let per = |cpu, s, net_rx| CpuShareFigure {
            cpu,
            shares: s,
            net_rx: Some(net_rx),
        };
        CpuSplit {
            app_cpus: vec![2, 3],
            app_sys: 35.0,
            app_idle: 20.0,
            app: shares(30.0, 0.0, 35.0, 14.5, 20.0, 0.0),
            all: shares(20.0, 1.25, 25.0, 12.0, 42.5, 0.0),
            per_cpu: vec![
                per(0, shares(1.0, 0.0, 4.0, 40.5, 54.0, 0.0), 9000),
                per(1, shares(10.0, 5.0, 5.0, 0.0, 84.5, 0.0), 3),
                per(2, shares(30.0, 0.0, 40.0, 24.5, 5.0, 0.0), 7000),
                per(3, shares(39.0, 0.0, 51.0, 4.5, 5.0, 0.0), 10),
            ],
            net_cpus: Some(vec![0, 2]),
            tool_user_pct_of_app_busy: None,
            foreign_pct_of_app_busy: None,
        }
    }

    /// The table of a fixed figures value, golden.
    #[test]
    fn the_table_is_golden() {
        let got = table(&split()).join("\n");
        let want = "\
per CPU over the measured interval (/proc/stat, as mpstat reads it):
CPU     %usr   %nice    %sys %iowait    %irq   %soft   %idle  role
all    18.75    1.25   25.00    0.00    0.50   12.00   42.50
0       1.00    0.00    4.00    0.00    0.50   40.50   54.00  net
2      30.00    0.00   40.00    0.00    0.50   24.50    5.00  net,app
3      39.00    0.00   51.00    0.00    0.50    4.50    5.00  app
role: net ran >= 10 % of the NET_RX softirqs, app ran a worker";
        assert_eq!(got, want);
        for line in table(&split()) {
            assert!(line.chars().count() <= 72, "{line:?}");
        }
    }

    /// Steal time gets its line; no `/proc/softirqs` reading: only app CPUs, said so; a
    /// summary without `nice` shows `-`.
    #[test]
    fn steal_unknown_net_cpus_and_old_summaries() {
        let mut s = split();
        s.net_cpus = None;
        s.all.steal = 2.0;
        s.all.idle = 40.5;
        s.per_cpu[3].shares.nice = None;
        let got = table(&s).join("\n");
        let want = "\
per CPU over the measured interval (/proc/stat, as mpstat reads it):
CPU     %usr   %nice    %sys %iowait    %irq   %soft   %idle  role
all    18.75    1.25   25.00    0.00    0.50   12.00   40.50
2      30.00    0.00   40.00    0.00    0.50   24.50    5.00  app
3      39.00       -   51.00    0.00    0.50    4.50    5.00  app
role: app ran a worker; net CPUs unknown (no /proc/softirqs)
%steal: all 2.00, 2 0.00, 3 0.00";
        assert_eq!(got, want);
    }

    /// With many CPUs the steal line wraps at 72 characters like the rows.
    #[test]
    fn the_steal_line_of_many_cpus_wraps() {
        let mut s = split();
        s.all.steal = 1.0;
        let row = s.per_cpu[0];
        s.per_cpu = (0..40)
            .map(|cpu| {
                let mut r = row;
                r.cpu = cpu;
                r
            })
            .collect();
        s.app_cpus = (0..40).collect();
        let lines = table(&s);
        let steal: Vec<&String> = lines
            .iter()
            .skip_while(|l| !l.starts_with("%steal:"))
            .collect();
        assert!(steal.len() > 1, "{lines:#?}");
        for line in &lines {
            assert!(line.chars().count() <= 72, "{line:?}");
        }
        let items: Vec<&str> = steal
            .iter()
            .flat_map(|l| l.trim_start_matches("%steal:").split(','))
            .map(str::trim)
            .filter(|i| !i.is_empty()) // a line ends in the comma before the next
            .collect();
        assert_eq!(items.len(), 41, "all and every CPU: {items:?}");
        assert_eq!(items[0], "all 1.00");
    }
}
