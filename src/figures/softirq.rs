//! Where receive processing ran: the `NET_RX` row of `/proc/softirqs` (cumulative softirq
//! counts per CPU since boot, one column per possible CPU), read before and after a run. The
//! CPUs whose count grew by a tenth or more of the whole growth are the run's **net CPUs**
//! (where the bound queues' NAPI polled: kperf's "net CPUs"), named beside the app CPUs
//! (where the workers ran).

use std::path::Path;

/// `/proc/softirqs`.
pub(crate) const PROC_SOFTIRQS: &str = "/proc/softirqs";

/// The share of the whole `NET_RX` growth a CPU must have to be a net CPU.
pub(crate) const NET_CPU_SHARE: f64 = 0.10;

/// The `NET_RX` counts of `/proc/softirqs` text `text`, one per CPU column (CPU order of the
/// header; `CPU0 CPU1 ...`), as `(cpu, count)`.
///
/// Errors: why, in words (no header, no `NET_RX:` row, a count that is no number, more
/// counts than CPUs).
pub(crate) fn parse_net_rx(text: &str) -> Result<Vec<(usize, u64)>, String> {
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty")?;
    let cpus = header
        .split_whitespace()
        .map(|c| {
            c.strip_prefix("CPU")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| format!("header column '{c}' is no CPUn"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let row = lines
        .find_map(|l| l.trim_start().strip_prefix("NET_RX:"))
        .ok_or("no NET_RX row")?;
    let counts = row
        .split_whitespace()
        .map(|n| {
            n.parse::<u64>()
                .map_err(|e| format!("NET_RX count '{n}': {e}"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    if counts.len() > cpus.len() {
        return Err(format!(
            "{} NET_RX counts for {} CPUs",
            counts.len(),
            cpus.len()
        ));
    }
    Ok(cpus.into_iter().zip(counts).collect())
}

/// [`parse_net_rx`] of the file at `path` ([`PROC_SOFTIRQS`]).
///
/// Errors: reading the file, or why it does not parse, naming the file.
pub(crate) fn read_net_rx(path: &Path) -> Result<Vec<(usize, u64)>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    parse_net_rx(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The growth of every CPU's count from `before` to `after` (CPUs of both; a count that went
/// backwards, a CPU brought online in between, grew by 0), in CPU order.
pub(crate) fn growth(before: &[(usize, u64)], after: &[(usize, u64)]) -> Vec<(usize, u64)> {
    after
        .iter()
        .filter_map(|&(cpu, a)| {
            let b = before.iter().find(|(c, _)| *c == cpu)?.1;
            Some((cpu, a.saturating_sub(b)))
        })
        .collect()
}

/// The net CPUs of `growth` ([`growth`]): those with at least [`NET_CPU_SHARE`] of the whole,
/// in CPU order; none when nothing grew.
pub(crate) fn net_cpus(growth: &[(usize, u64)]) -> Vec<usize> {
    let total: u64 = growth.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return Vec::new();
    }
    growth
        .iter()
        .filter(|(_, n)| *n as f64 >= NET_CPU_SHARE * total as f64)
        .map(|(c, _)| *c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-CPU host's file as 6.18 prints it (two rows before NET_RX, padding as printed).
    const FOUR: &str = "                    CPU0       CPU1       CPU2       CPU3       \n\
\x20         HI:          0          0          0          0\n\
\x20      TIMER:     757190     653464     600000     610000\n\
\x20     NET_TX:      16457      18577         12         13\n\
\x20     NET_RX:   11039182   10625343        100         90\n\
\x20      BLOCK:      30307      29795          1          2\n";

    #[test]
    fn the_net_rx_row_by_cpu() {
        assert_eq!(
            parse_net_rx(FOUR).unwrap(),
            vec![(0, 11039182), (1, 10625343), (2, 100), (3, 90)]
        );
        assert!(parse_net_rx("").is_err());
        assert!(parse_net_rx("    CPU0\n  TIMER: 1\n")
            .unwrap_err()
            .contains("NET_RX"));
        assert!(parse_net_rx("    CPU0\n NET_RX: x\n").is_err());
        assert!(parse_net_rx("    CPU0\n NET_RX: 1 2\n").is_err());
        assert!(parse_net_rx("    cpu0\n NET_RX: 1\n").is_err());
    }

    #[test]
    fn net_cpus_are_those_with_a_tenth() {
        let before = [(0, 100), (1, 100), (2, 100), (3, 100)];
        let after = [(0, 1100), (1, 150), (2, 200), (3, 50)];
        let g = growth(&before, &after);
        assert_eq!(g, vec![(0, 1000), (1, 50), (2, 100), (3, 0)]);
        // 1150 in all: CPU 0 (87 %) only; CPU 2 has 8.7 %.
        assert_eq!(net_cpus(&g), vec![0]);
        assert_eq!(net_cpus(&[(0, 0), (1, 0)]), Vec::<usize>::new());
        assert_eq!(net_cpus(&[(0, 5), (1, 5)]), vec![0, 1]);
        // A CPU that came online in between has no growth.
        assert_eq!(growth(&[(0, 1)], &[(0, 3), (1, 9)]), vec![(0, 2)]);
    }
}
