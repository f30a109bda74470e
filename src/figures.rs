//! The figures of a run beyond the receive loop's own counters ([`crate::stats`]), as pure
//! computations over what the kernel-boundary modules return:
//!
//! - [`cpu`]: CPU lists (`--cpus 2-5,8`), the flow → CPU assignment, and per-CPU usr / sys /
//!   irq / softirq / iowait / idle / steal percentages from two `/proc/stat` snapshots
//!   (read by [`crate::sys::cpu`]), summarised as "app sys %" and "app idle %";
//! - `cpu_table`: those shares per CPU as the table a timed receive prints (mpstat's
//!   columns, net and app CPUs named);
//! - [`hist`]: the per-flow histogram of frag sizes (powers of two), updated per frag;
//! - [`device`]: device RX Gbit/s from two netdev `qstats-get` dumps of the bound queues, and
//!   the RX queue a flow arrived on from its `SO_INCOMING_NAPI_ID` and the `queue-get` dump;
//! - [`tcp`]: `TCP_CONGESTION` with a refusal that names the available algorithms.
//!
//! No function here makes a system call except [`tcp::set_congestion`] and
//! [`cpu::ProcStat::read`], which go through [`crate::sys`]. Every figure's definition and its
//! source: docs/kernel-interface.md#cpu-time-and-placement, #tcp_info, #netdev-statistics.

pub mod cpu;

/// `n` and its noun, the noun plural unless `n` is 1: `count(1, "flow")` is `"1 flow"`,
/// `count(4, "run")` is `"4 runs"` (nouns of this tool take an `s`).
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
#[test]
fn a_count_names_one_in_the_singular() {
    assert_eq!(count(1u32, "flow"), "1 flow");
    assert_eq!(count(0u32, "run"), "0 runs");
    assert_eq!(count(4u64, "run"), "4 runs");
}
pub(crate) mod cpu_table;
pub mod device;
pub mod hist;
pub(crate) mod page_pool;
pub(crate) mod softirq;
pub mod tcp;
