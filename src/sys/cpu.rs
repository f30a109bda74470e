//! CPU time and placement of the calling thread: `getrusage(RUSAGE_SELF | RUSAGE_THREAD)`,
//! `sched_getaffinity` / `sched_setaffinity` (through `nix`), and the read of `/proc/stat`.
//! The parsing and the percentages are the figures' (`figures::cpu`); which CPUs a run may use is
//! decided there too (docs/kernel-interface.md#cpu-time-and-placement).

use std::time::Duration;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// `/proc/stat`: per-CPU time in `USER_HZ` ticks since boot (fs/proc/stat.c).
pub const PROC_STAT: &str = "/proc/stat";

/// The number of CPUs a `cpu_set_t` holds (`CPU_SETSIZE`, 1024 with glibc): the largest CPU
/// number [`pin_current_thread`] and [`allowed_cpus`] can name is one less.
pub const CPU_SETSIZE: usize = CpuSet::count();

/// User and system CPU time (`struct rusage` `ru_utime`/`ru_stime`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// User time.
    pub user: Duration,
    /// System (kernel) time.
    pub sys: Duration,
}

impl CpuTime {
    /// `self - earlier`, saturating at zero.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }
}

/// `getrusage(who)` as user and system time; `None` when the call fails (it cannot with a
/// valid `who`).
pub(super) fn rusage(who: UsageWho) -> Option<CpuTime> {
    let u = getrusage(who).ok()?;
    let d = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    Some(CpuTime {
        user: d(u.user_time()),
        sys: d(u.system_time()),
    })
}

/// CPU time the *calling thread* has used so far (`getrusage(RUSAGE_THREAD)`, Linux 2.6.26+):
/// user and system time of this thread only, in microsecond resolution (the kernel splits the
/// thread's scheduler runtime between user and system in the ratio of its ticks). `None`
/// when the call fails (it cannot on Linux).
pub fn thread_cpu_time() -> Option<CpuTime> {
    rusage(UsageWho::RUSAGE_THREAD)
}

/// The CPUs the calling thread may run on (`sched_getaffinity(0)`), ascending. What
/// `taskset`, cgroups' cpuset or a container allowed; offline CPUs are never in it.
///
/// Errors: `Error::Sys` naming the call (`EINVAL` on a machine with more than
/// [`CPU_SETSIZE`] possible CPUs, whose mask does not fit).
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| Error::sys("sched_getaffinity(0)", e as i32))?;
    Ok((0..CPU_SETSIZE)
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Pins the calling thread to CPU `cpu` alone (`sched_setaffinity(0, {cpu})`). Only this
/// thread: threads it starts afterwards inherit the mask, others keep theirs.
///
/// Errors: as [`set_affinity`].
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    set_affinity(&[cpu])
}

/// Lets the calling thread run on `cpus` only (`sched_setaffinity(0, mask)`), e.g. to give
/// back the mask [`allowed_cpus`] returned. The kernel moves the thread before returning when
/// its current CPU is not in the mask.
///
/// Errors: `Error::Sys` naming the call and the CPUs: `EINVAL` for a CPU at or above
/// [`CPU_SETSIZE`] (without a call), and from the kernel for a mask with no CPU that is online
/// and in the thread's cpuset (6.18: `EINVAL`).
pub fn set_affinity(cpus: &[usize]) -> Result<()> {
    let call = || {
        let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
        format!("sched_setaffinity(0, {{{}}})", list.join(","))
    };
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| Error::sys(call(), e as i32))?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| Error::sys(call(), e as i32))
}

/// The text of [`PROC_STAT`], read whole.
///
/// Errors: `Error::Sys` naming the read.
pub fn read_proc_stat() -> Result<String> {
    std::fs::read_to_string(PROC_STAT).map_err(|e| Error::io(format!("read {PROC_STAT}"), &e))
}
