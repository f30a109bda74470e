//! CPUs of a run: the `--cpus LIST` syntax, the flow → CPU assignment, and per-CPU time
//! accounting from `/proc/stat`, computed the way `mpstat` (sysstat) computes it.
//!
//! **Accounting.** `/proc/stat` has one `cpu` line (all CPUs) and one `cpuN` line per online
//! CPU, each with cumulative times in `USER_HZ` ticks since boot: user, nice, system, idle,
//! iowait, irq, softirq, steal, guest, guest_nice (fs/proc/stat.c; kernels before 2.6.33 have
//! fewer columns, read as 0). Over an interval, each column's growth divided by the growth of
//! the CPU's total gives its share, with these definitions:
//!
//! - **total** = user + nice + system + idle + iowait + irq + softirq + steal. guest and
//!   guest_nice are *not* added: the kernel already counts guest time in user (and niced guest
//!   time in nice) when it accounts it (kernel/sched/cputime.c `account_guest_time`), so
//!   adding them would count it twice. mpstat's total is the same sum.
//! - **usr** = user + nice (guest time included, as it is in user); mpstat splits this into
//!   %usr, %nice and %guest.
//! - **sys** = system (kernel code outside interrupts; mpstat's %sys).
//! - **irq**, **softirq**, **steal**: their columns (mpstat's %irq, %soft, %steal).
//! - **iowait** and **idle** stay separate, as in mpstat: idle is the idle column only. A
//!   receiver hardly waits for block I/O, so iowait is normally 0; idle + iowait is the time
//!   the CPU ran nothing.
//!
//! So usr + sys + irq + softirq + iowait + idle + steal = 100 for every CPU with any ticks in
//! the interval. A column that went backwards (iowait may, proc(5)) counts 0. The "app CPUs"
//! are the CPUs the workers ran on; their shares are summed ticks over the set (the same as
//! the average of the CPUs' shares, each interval being equally long), reported as
//! [`APP_SYS`] and [`APP_IDLE`].

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::sys::cpu::{read_proc_stat, CPU_SETSIZE, PROC_STAT};

/// The name under which the app CPUs' [`CpuShares::sys`] is reported.
pub const APP_SYS: &str = "app sys %";
/// The name under which the app CPUs' [`CpuShares::idle`] is reported.
pub const APP_IDLE: &str = "app idle %";

// ---------------------------------------------------------------------------------------------
// CPU lists and the flow → CPU assignment
// ---------------------------------------------------------------------------------------------

/// Parses a CPU list (`"2-5,8"`, `"0"`, `"0-1"`): items separated by `,`, each a CPU number
/// `N` or an inclusive range `N-M` with `N <= M`, decimal digits only. Returns the CPUs in the
/// order written, a range counting up: `--cpus LIST` pins flow k to the k-th CPU of the list
/// ([`cpu_for_flow`]), so `"1,0"` puts flow 0 on CPU 1. A CPU written twice takes a flow each
/// time (`"0,0,1"`: flows 0 and 1 on CPU 0, flow 2 on CPU 1); the set of CPUs (the app CPUs)
/// counts it once ([`format_cpu_list`]).
///
/// Errors (the text, without a flag name): an empty list or item (`""`, `"1,"`), a range
/// without an end or start (`"1-"`, `"-1"`), a reversed range (`"5-2"`), anything but digits,
/// `-` and `,` (spaces, signs, the kernel's `N-M:S/G` stride form), and a CPU at or above
/// [`CPU_SETSIZE`] (1024), which no affinity mask can hold.
pub fn parse_cpu_list(s: &str) -> std::result::Result<Vec<usize>, String> {
    let number = |item: &str, n: &str| -> std::result::Result<usize, String> {
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "'{item}' in CPU list '{s}' is not a CPU number or a range N-M"
            ));
        }
        match n.parse::<usize>() {
            Ok(c) if c < CPU_SETSIZE => Ok(c),
            _ => Err(format!(
                "CPU {n} in CPU list '{s}' is above {} (the largest an affinity mask holds)",
                CPU_SETSIZE - 1
            )),
        }
    };
    if s.is_empty() {
        return Err("empty CPU list (expected e.g. 2-5,8)".into());
    }
    let mut cpus = Vec::new();
    for item in s.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (number(item, a)?, number(item, b)?),
            None => {
                let c = number(item, item)?;
                (c, c)
            }
        };
        if lo > hi {
            return Err(format!(
                "range '{item}' in CPU list '{s}' runs backwards (expected N-M with N <= M)"
            ));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// The set of `cpus` (in any order, repeats counted once) in the CPU-list syntax
/// [`parse_cpu_list`] reads, ascending, ranges folded: `[0, 1, 2, 5]` and `[5, 2, 1, 0, 1]` →
/// `"0-2,5"`; `""` for none.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut cpus = cpus.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Checks that every CPU of `cpus` is in `allowed` (the thread's affinity mask,
/// [`crate::sys::cpu::allowed_cpus`]).
///
/// Errors: the first CPU that is not, with the mask: `"CPU 99 is not in this process's
/// affinity mask (allowed: 0-1)"`.
pub fn check_allowed(cpus: &[usize], allowed: &[usize]) -> std::result::Result<(), String> {
    match cpus.iter().find(|c| allowed.binary_search(c).is_err()) {
        None => Ok(()),
        Some(c) => Err(format!(
            "CPU {c} is not in this process's affinity mask (allowed: {})",
            format_cpu_list(allowed)
        )),
    }
}

/// The CPU of flow `flow` (0-based): the `flow`-th CPU of `cpus`, round robin (flow k of N on
/// `cpus[k % cpus.len()]`). `None` for an empty list.
pub fn cpu_for_flow(cpus: &[usize], flow: usize) -> Option<usize> {
    cpus.get(flow.checked_rem(cpus.len())?).copied()
}

// ---------------------------------------------------------------------------------------------
// /proc/stat
// ---------------------------------------------------------------------------------------------

/// One `cpu`/`cpuN` line of `/proc/stat`: cumulative times in `USER_HZ` ticks (or, from
/// [`ProcStat::since`], their growth over an interval).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// Normal processes in user mode (guest time included).
    pub user: u64,
    /// Niced processes in user mode (niced guest time included).
    pub nice: u64,
    /// Kernel mode, outside interrupts.
    pub system: u64,
    /// The idle task.
    pub idle: u64,
    /// Idle with a task waiting for block I/O (2.5.41+).
    pub iowait: u64,
    /// Hard interrupts (2.6.0+).
    pub irq: u64,
    /// Softirqs, NET_RX among them (2.6.0+).
    pub softirq: u64,
    /// Time a hypervisor ran something else on this virtual CPU (2.6.11+).
    pub steal: u64,
    /// Running a guest's virtual CPU, already counted in `user` (2.6.24+).
    pub guest: u64,
    /// Running a niced guest, already counted in `nice` (2.6.33+).
    pub guest_nice: u64,
}

impl CpuTicks {
    /// The columns in file order.
    fn columns(&mut self) -> [&mut u64; 10] {
        [
            &mut self.user,
            &mut self.nice,
            &mut self.system,
            &mut self.idle,
            &mut self.iowait,
            &mut self.irq,
            &mut self.softirq,
            &mut self.steal,
            &mut self.guest,
            &mut self.guest_nice,
        ]
    }

    /// Every column's growth from `earlier` to `self`; a column that went backwards gives 0.
    pub fn since(mut self, mut earlier: CpuTicks) -> CpuTicks {
        for (now, then) in self.columns().into_iter().zip(earlier.columns()) {
            *now = now.saturating_sub(*then);
        }
        self
    }

    /// The total the shares are taken of: every column but guest and guest_nice (see the
    /// module doc), in ticks.
    pub fn total(&self) -> u64 {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// These ticks as shares of their [`total`](Self::total); `None` when it is 0 (an interval
    /// shorter than a tick, or a CPU that was offline).
    pub fn shares(&self) -> Option<CpuShares> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let pct = |v: u64| v as f64 * 100.0 / total as f64;
        Some(CpuShares {
            usr: pct(self.user.saturating_add(self.nice)),
            nice: pct(self.nice),
            sys: pct(self.system),
            irq: pct(self.irq),
            softirq: pct(self.softirq),
            iowait: pct(self.iowait),
            idle: pct(self.idle),
            steal: pct(self.steal),
            ticks: total,
        })
    }
}

/// Column-wise sum (saturating): the ticks of a set of CPUs.
impl std::ops::Add for CpuTicks {
    type Output = CpuTicks;

    fn add(mut self, mut other: CpuTicks) -> CpuTicks {
        for (a, b) in self.columns().into_iter().zip(other.columns()) {
            *a = a.saturating_add(*b);
        }
        self
    }
}

/// Where one or more CPUs spent an interval, in percent of its ticks (the module doc gives
/// each definition); the seven shares (all but `nice`, which is inside `usr`) sum to 100.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuShares {
    /// user + nice (guest time included).
    pub usr: f64,
    /// nice alone (niced guest time included): the part of [`usr`](Self::usr) that
    /// mpstat shows as %nice.
    pub nice: f64,
    /// system: the kernel outside interrupts; for the app CPUs, [`APP_SYS`].
    pub sys: f64,
    /// Hard interrupts.
    pub irq: f64,
    /// Softirqs (NET_RX processing of the received packets when it runs there).
    pub softirq: f64,
    /// Idle with block I/O outstanding.
    pub iowait: f64,
    /// Idle; for the app CPUs, [`APP_IDLE`].
    pub idle: f64,
    /// Stolen by the hypervisor.
    pub steal: f64,
    /// The ticks (`USER_HZ`) the shares are taken of, summed over the CPUs.
    pub ticks: u64,
}

/// A parsed `/proc/stat`: the `cpu` line and every `cpuN` line (online CPUs only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// The `cpu` line: the kernel's sum over all CPUs.
    pub all: CpuTicks,
    /// `cpuN` lines by CPU number.
    pub cpus: BTreeMap<usize, CpuTicks>,
}

impl ProcStat {
    /// Reads and parses `/proc/stat` now ([`crate::sys::cpu::read_proc_stat`]).
    ///
    /// Errors: as [`read_proc_stat`] and [`ProcStat::parse`].
    pub fn read() -> Result<ProcStat> {
        ProcStat::parse(&read_proc_stat()?)
    }

    /// Parses the text of `/proc/stat`. Only the `cpu` line and the `cpuN` lines are read;
    /// each needs at least the four columns of every kernel (user nice system idle), missing
    /// later columns are 0, columns after guest_nice are ignored.
    ///
    /// Errors: `Error::Decode` naming `/proc/stat` for a column that is not a number, fewer
    /// than four columns, a CPU listed twice, a CPU number above `usize`, or no `cpu` line.
    pub fn parse(text: &str) -> Result<ProcStat> {
        let bad = |detail: String| Error::decode(PROC_STAT, detail);
        let mut all = None;
        let mut cpus = BTreeMap::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            // `cpu` or `cpu` + digits; any other line (or a future `cpu…` line) is skipped.
            let Some((label, num)) = words.next().and_then(|w| Some((w, w.strip_prefix("cpu")?)))
            else {
                continue;
            };
            if !num.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let mut ticks = CpuTicks::default();
            let mut n = 0;
            for (slot, word) in ticks.columns().into_iter().zip(words) {
                *slot = word
                    .parse()
                    .map_err(|_| bad(format!("{label}: column {} is {word:?}", n + 1)))?;
                n += 1;
            }
            if n < 4 {
                return Err(bad(format!("{label}: {n} columns, expected at least 4")));
            }
            let dup = match num {
                "" => all.replace(ticks).is_some(),
                num => {
                    let cpu: usize = num
                        .parse()
                        .map_err(|_| bad(format!("CPU number of {label:?}")))?;
                    cpus.insert(cpu, ticks).is_some()
                }
            };
            if dup {
                return Err(bad(format!("{label} is listed twice")));
            }
        }
        let all = all.ok_or_else(|| bad("no 'cpu' line".into()))?;
        Ok(ProcStat { all, cpus })
    }

    /// The interval from `earlier` to `self`: every column's growth, for all CPUs and for
    /// each CPU listed in both snapshots (a CPU that went offline or came online in between
    /// has no row).
    pub fn since(&self, earlier: &ProcStat) -> CpuInterval {
        CpuInterval {
            all: self.all.since(earlier.all),
            cpus: self
                .cpus
                .iter()
                .filter_map(|(&c, now)| Some((c, now.since(*earlier.cpus.get(&c)?))))
                .collect(),
        }
    }
}

/// The ticks of one measured interval ([`ProcStat::since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuInterval {
    /// All CPUs (the `cpu` line's growth).
    pub all: CpuTicks,
    /// Each CPU's growth, by CPU number.
    pub cpus: BTreeMap<usize, CpuTicks>,
}

impl CpuInterval {
    /// The summed ticks of the CPUs in `set` (the app CPUs) that have a row; CPUs without one
    /// add nothing.
    pub fn of(&self, set: &[usize]) -> CpuTicks {
        set.iter()
            .filter_map(|c| self.cpus.get(c))
            .fold(CpuTicks::default(), |a, &t| a + t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_in_the_order_written() {
        assert_eq!(parse_cpu_list("2-5,8"), Ok(vec![2, 3, 4, 5, 8]));
        assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
        assert_eq!(parse_cpu_list("0-1"), Ok(vec![0, 1]));
        // The order written is the flows' order (before: sorted and deduplicated, so
        // "1,0" pinned flow 0 to CPU 0).
        assert_eq!(parse_cpu_list("8,2-3"), Ok(vec![8, 2, 3]));
        assert_eq!(parse_cpu_list("1,0"), Ok(vec![1, 0]));
        assert_eq!(parse_cpu_list("2-5,4,4"), Ok(vec![2, 3, 4, 5, 4, 4]));
        assert_eq!(parse_cpu_list("0,0,1"), Ok(vec![0, 0, 1]));
        assert_eq!(parse_cpu_list("3-3"), Ok(vec![3]));
        assert_eq!(parse_cpu_list("1023"), Ok(vec![1023]));
    }

    #[test]
    fn bad_cpu_lists_are_refused_with_the_reason() {
        let cases = [
            ("", "empty CPU list (expected e.g. 2-5,8)"),
            (
                "1-",
                "'1-' in CPU list '1-' is not a CPU number or a range N-M",
            ),
            (
                "-1",
                "'-1' in CPU list '-1' is not a CPU number or a range N-M",
            ),
            (
                "1,",
                "'' in CPU list '1,' is not a CPU number or a range N-M",
            ),
            (
                ",1",
                "'' in CPU list ',1' is not a CPU number or a range N-M",
            ),
            (
                "1,,2",
                "'' in CPU list '1,,2' is not a CPU number or a range N-M",
            ),
            (
                "5-2",
                "range '5-2' in CPU list '5-2' runs backwards (expected N-M with N <= M)",
            ),
            (
                "1-2-3",
                "'1-2-3' in CPU list '1-2-3' is not a CPU number or a range N-M",
            ),
            (
                " 1",
                "' 1' in CPU list ' 1' is not a CPU number or a range N-M",
            ),
            (
                "+1",
                "'+1' in CPU list '+1' is not a CPU number or a range N-M",
            ),
            (
                "0-7:2/4",
                "'0-7:2/4' in CPU list '0-7:2/4' is not a CPU number or a range N-M",
            ),
            (
                "x",
                "'x' in CPU list 'x' is not a CPU number or a range N-M",
            ),
            (
                "1024",
                "CPU 1024 in CPU list '1024' is above 1023 (the largest an affinity mask holds)",
            ),
            (
                "0-99999999999999999999999",
                "CPU 99999999999999999999999 in CPU list '0-99999999999999999999999' is above \
                 1023 (the largest an affinity mask holds)",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_cpu_list(input), Err(want.to_string()), "{input:?}");
        }
    }

    #[test]
    fn cpu_lists_format_and_round_trip() {
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(format_cpu_list(&[3]), "3");
        assert_eq!(format_cpu_list(&[1, 3, 4, 6, 7, 8]), "1,3-4,6-8");
        assert_eq!(
            format_cpu_list(&[5, 2, 1, 0, 1]),
            "0-2,5",
            "the set, ascending"
        );
        let cpus = parse_cpu_list("0-3,8,10-11").unwrap();
        assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)), Ok(cpus));
    }

    #[test]
    fn flows_go_round_robin_and_cpus_must_be_allowed() {
        let cpus = [2, 3, 8];
        let got: Vec<_> = (0..7).map(|k| cpu_for_flow(&cpus, k).unwrap()).collect();
        assert_eq!(got, [2, 3, 8, 2, 3, 8, 2]);
        // "the k-th CPU of LIST", as written: --cpus 1,0 puts flow 0 on CPU 1.
        let cpus = parse_cpu_list("1,0").unwrap();
        assert_eq!(
            (cpu_for_flow(&cpus, 0), cpu_for_flow(&cpus, 1)),
            (Some(1), Some(0))
        );
        let cpus = parse_cpu_list("0,0,1").unwrap();
        let got: Vec<_> = (0..4).map(|k| cpu_for_flow(&cpus, k).unwrap()).collect();
        assert_eq!(got, [0, 0, 1, 0]);
        assert_eq!(cpu_for_flow(&[], 0), None);
        assert_eq!(check_allowed(&[0, 1], &[0, 1]), Ok(()));
        assert_eq!(
            check_allowed(&[1, 99], &[0, 1]),
            Err("CPU 99 is not in this process's affinity mask (allowed: 0-1)".into())
        );
    }

    /// `/proc/stat` of this project's 6.18 machine (2 CPUs, USER_HZ 100) read twice about a
    /// second apart during a build (both CPUs busy, no idle tick); the `intr` line is cut short.
    const STAT_618_A: &str = "\
cpu  90196 0 18999 40546 902 0 470 3053 0 0
cpu0 46172 0 9179 19738 475 0 43 1513 0 0
cpu1 44024 0 9820 20808 427 0 426 1539 0 0
intr 632706 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 11 0 0 0 0 153 72
ctxt 1665423
btime 1796160351
processes 26588
procs_running 15
procs_blocked 0
softirq 415347 0 49842 406 60615 97499 0 62 53564 15058 138301
";
    const STAT_618_B: &str = "\
cpu  90392 0 19027 40546 902 0 470 3053 0 0
cpu0 46274 0 9188 19738 475 0 43 1513 0 0
cpu1 44117 0 9838 20808 427 0 426 1539 0 0
intr 633483 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 11 0 0 0 0 153 72
ctxt 1666194
btime 1796160351
processes 26596
procs_running 18
procs_blocked 0
softirq 415510 0 49888 406 60615 97501 0 62 53603 15058 138377
";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn proc_stat_of_6_18_parses() {
        let a = ProcStat::parse(STAT_618_A).unwrap();
        assert_eq!(
            a.all,
            CpuTicks {
                user: 90196,
                nice: 0,
                system: 18999,
                idle: 40546,
                iowait: 902,
                irq: 0,
                softirq: 470,
                steal: 3053,
                guest: 0,
                guest_nice: 0,
            }
        );
        assert_eq!(a.cpus.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(a.cpus[&1].softirq, 426);
        assert_eq!(a.cpus[&0].steal, 1513);
    }

    #[test]
    fn interval_shares_of_6_18() {
        let (a, b) = (
            ProcStat::parse(STAT_618_A).unwrap(),
            ProcStat::parse(STAT_618_B).unwrap(),
        );
        let iv = b.since(&a);
        // cpu0: user +102, system +9, nothing else: 111 ticks.
        let c0 = iv.cpus[&0].shares().unwrap();
        assert_eq!(c0.ticks, 111);
        assert!(
            close(c0.usr, 10200.0 / 111.0) && close(c0.sys, 900.0 / 111.0),
            "{c0:?}"
        );
        assert!(close(
            c0.idle + c0.iowait + c0.irq + c0.softirq + c0.steal,
            0.0
        ));
        // cpu1: user +93, system +18.
        let c1 = iv.cpus[&1].shares().unwrap();
        assert_eq!(
            (iv.cpus[&1].user, iv.cpus[&1].system, c1.ticks),
            (93, 18, 111)
        );
        // All CPUs from the kernel's own `cpu` line: +196 user, +28 system.
        let all = iv.all.shares().unwrap();
        assert_eq!(all.ticks, 224);
        assert!(close(all.sys, 2800.0 / 224.0), "{all:?}");
        // The app CPUs {1}: cpu1's shares; {0, 1}: summed ticks; a CPU without a row adds 0.
        assert_eq!(iv.of(&[1]).shares(), Some(c1));
        let app = iv.of(&[0, 1, 7]).shares().unwrap();
        assert_eq!(app.ticks, 222);
        assert!(close(app.sys, 2700.0 / 222.0), "{app:?}");
        assert_eq!(iv.of(&[7]).shares(), None);
    }

    /// Synthetic, with every column moving: guest (50) and guest_nice (5) are inside user and
    /// nice and must not enlarge the total; iowait going backwards counts 0.
    #[test]
    fn guest_time_is_not_counted_twice() {
        let a =
            ProcStat::parse("cpu 100 10 50 800 5 2 8 4 30 3\ncpu3 100 10 50 800 9 2 8 4 30 3\n")
                .unwrap();
        let b = ProcStat::parse(
            "cpu 200 20 80 1500 10 4 20 6 80 8\ncpu3 200 20 80 1500 7 4 20 6 80 8\n",
        )
        .unwrap();
        let iv = b.since(&a);
        let all = iv.all.shares().unwrap();
        // 100 + 10 + 30 + 700 + 5 + 2 + 12 + 2
        assert_eq!(all.ticks, 861);
        assert!(close(all.usr, 11000.0 / 861.0), "{all:?}");
        // nice (10 of which 5 niced guest) is inside usr and shown apart as mpstat's %nice.
        assert!(close(all.nice, 1000.0 / 861.0), "{all:?}");
        assert!(close(all.idle, 70000.0 / 861.0) && close(all.iowait, 500.0 / 861.0));
        let sum = all.usr + all.sys + all.irq + all.softirq + all.iowait + all.idle + all.steal;
        assert!(close(sum, 100.0), "{sum}");
        let c3 = iv.cpus[&3];
        assert_eq!((c3.iowait, c3.total()), (0, 856));
    }

    #[test]
    fn old_and_odd_proc_stat_lines() {
        // A 2.6.0 kernel's seven columns; a newer kernel's eleventh column is ignored, and so
        // are lines that only start with "cpu".
        let p = ProcStat::parse("cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7 8 9 10 11\n").unwrap();
        assert_eq!(
            (p.all.softirq, p.all.steal, p.cpus[&0].guest_nice),
            (7, 0, 10)
        );
        let err = |t: &str| ProcStat::parse(t).unwrap_err().to_string();
        assert_eq!(
            err("cpu 1 2 3\n"),
            "cannot decode /proc/stat: cpu: 3 columns, expected at least 4"
        );
        assert_eq!(
            err("cpu 1 2 x 4\n"),
            "cannot decode /proc/stat: cpu: column 3 is \"x\""
        );
        assert_eq!(
            err("cpu 1 2 3 4\ncpu0 1 2 3 4\ncpu0 1 2 3 4\n"),
            "cannot decode /proc/stat: cpu0 is listed twice"
        );
        let p = ProcStat::parse("cpufreq 9\ncpu 1 2 3 4\ncpu_x 1\n").unwrap();
        assert_eq!((p.all.idle, p.cpus.len()), (4, 0));
        assert_eq!(err("intr 5\n"), "cannot decode /proc/stat: no 'cpu' line");
        // A CPU that came online in between has no row; a zero interval no shares.
        let a = ProcStat::parse("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        let b = ProcStat::parse("cpu 1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 1 1 1\n").unwrap();
        let iv = b.since(&a);
        assert_eq!(iv.cpus.keys().copied().collect::<Vec<_>>(), [0]);
        assert_eq!(iv.all.shares(), None);
    }
}
