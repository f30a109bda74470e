//! The home of FFI: syscall wrappers with one shape ([`cvt`]), hand-defined uapi ([`uapi`]),
//! socket calls ([`socket`]), `TCP_INFO` and `TCP_CONGESTION` ([`tcp`]), CPU time and
//! affinity ([`cpu`]), the per-CPU NET_RX nudge ([`softirq`]), zerocopy sends for devmem TX
//! ([`zerocopy`]), owned memory mappings ([`mmap`]), the udmabuf and dma-buf calls
//! (`udmabuf`), the dma-buf heap calls ([`dma_heap`]), io_uring zcrx ([`uring_mem`]) and the
//! layout-checked ioctl structs (`uapi_struct`). Other modules (policy, netlink logic, CLI)
//! contain no `unsafe`.

pub mod cpu;
pub mod dma_heap;
pub mod ethtool_ioctl;
pub mod mmap;
pub(crate) mod netlink_sock;
pub mod signals;
pub mod socket;
pub mod softirq;
pub mod tcp;
pub mod uapi;
pub(crate) mod uapi_struct;
pub(crate) mod udmabuf;
pub mod uring_mem;
pub mod zerocopy;

use crate::error::Error;

/// Turns a C-style return (`-1` and `errno`) into a `Result`, naming `call` in the error.
pub fn cvt<T>(ret: T, call: &str) -> Result<T, Error>
where
    T: Copy + PartialOrd + From<i8>,
{
    if ret < T::from(0) {
        Err(Error::last_os(call))
    } else {
        Ok(ret)
    }
}

/// An ioctl command number (the kernel's `unsigned int cmd`) as the C library's `ioctl()`
/// takes it: `unsigned long` in glibc, `int` in musl. Same bits either way: the kernel reads
/// the low 32.
pub(crate) fn ioctl_request(cmd: u32) -> nix::sys::ioctl::ioctl_num_type {
    cmd as _
}

/// The calling thread's current `errno` (positive; `EIO` when it is 0, see
/// [`crate::error::errno_of`]).
pub(crate) fn last_errno() -> i32 {
    crate::error::errno_of(&std::io::Error::last_os_error())
}

/// A new non-blocking, close-on-exec eventfd with a count of 0: a wake-up that a `poll` for
/// `POLLIN` sees once [`eventfd_add`] ran, until [`eventfd_drain`].
///
/// Errors: the errno of `eventfd`.
pub(crate) fn eventfd() -> std::result::Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to eventfd `fd`'s count (it becomes readable). A full count (`EAGAIN`) is as
/// readable, so the result is not looked at.
pub(crate) fn eventfd_add(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let one = 1u64.to_ne_bytes();
    // SAFETY: write of 8 bytes from a stack buffer to a live fd.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

/// Reads eventfd `fd`'s count back to 0 (no longer readable); nothing when it was 0
/// (`EAGAIN`: the fd is non-blocking).
pub(crate) fn eventfd_drain(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let mut count = [0u8; 8];
    // SAFETY: read of up to 8 bytes into a stack buffer from a live fd.
    let _ = unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
}

/// The index of interface `name` in the calling thread's network namespace
/// (`if_nametoindex(3)`, an `SIOCGIFINDEX` ioctl). Callers word the refusal for their flag.
///
/// Errors: the errno: `ENODEV` for no such interface (also when the lookup fails without
/// one, so no caller prints "errno 0"), `EINVAL` for a name with a NUL byte.
pub(crate) fn if_index(name: &str) -> std::result::Result<u32, i32> {
    // nix turns an index of 0 into `Err(Errno::last())`.
    nix::net::if_::if_nametoindex(name).map_err(|e| match e as i32 {
        n if n > 0 => n,
        _ => libc::ENODEV,
    })
}

/// The running kernel's release, as `uname -r` prints it (`uname(2)`'s `release`), e.g.
/// `"6.18.0-1-amd64"`; bytes that are not UTF-8 become U+FFFD.
///
/// Errors: `Error::Sys` naming `uname` (it cannot fail with a valid buffer).
pub fn kernel_release() -> Result<String, Error> {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .map_err(|e| Error::sys("uname", e as i32))
}

/// The system page size in bytes (`sysconf(_SC_PAGESIZE)`), never a constant.
pub fn page_size() -> usize {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(n)) if n > 0 => n as usize,
        _ => 4096,
    }
}

/// How long ago this process started (its fork, so a wrapper it was `exec`ed from counts):
/// `/proc/uptime` (seconds since boot, `CLOCK_BOOTTIME`, to 10 ms) less `/proc/self/stat`'s
/// `starttime` (field 22, clock ticks since boot, `sysconf(_SC_CLK_TCK)` a second). Resolution
/// one clock tick (10 ms at 100 a second); never negative. `None` when either file cannot be
/// read or parsed.
pub fn process_age() -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let ticks = match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as f64,
        _ => 100.0,
    };
    process_age_of(&stat, &uptime, ticks)
}

/// [`process_age`] from the texts of `/proc/self/stat` and `/proc/uptime`, `ticks` clock ticks
/// a second. The command name (field 2) can hold spaces and parentheses: fields are counted
/// after its last `)`.
fn process_age_of(stat: &str, uptime: &str, ticks: f64) -> Option<std::time::Duration> {
    // After "pid (comm) " come field 3 (state) onwards: starttime is field 22, the 20th.
    let (_, rest) = stat.rsplit_once(')')?;
    let start: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let now: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    let age = now - start / ticks;
    std::time::Duration::try_from_secs_f64(age.max(0.0)).ok()
}

/// CPU time this process has used so far (`getrusage(RUSAGE_SELF)`): user and system time,
/// all threads. `None` when the call fails (it cannot with a valid `who`). One thread's own
/// time: [`cpu::thread_cpu_time`].
pub fn cpu_time() -> Option<cpu::CpuTime> {
    cpu::rusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

/// Rounds `value` up to the next multiple of `align` (any non-zero `align`, not only powers of
/// two). `None` when `align` is 0 or the result does not fit in `u64`.
pub(crate) fn align_up(value: u64, align: u64) -> Option<u64> {
    value.checked_next_multiple_of(align)
}

/// A `poll(2)` timeout in milliseconds: `None` waits forever (`-1`); a duration is rounded *up*
/// to whole milliseconds (so 1 µs does not become a busy 0) and clamped to `c_int::MAX`.
pub(crate) fn poll_timeout_ms(timeout: Option<std::time::Duration>) -> libc::c_int {
    timeout.map_or(-1, |d| {
        libc::c_int::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The process's age: starttime is counted after the command name's last `)`, whatever
    /// the name holds; a start after now reads as 0; text that is not /proc's is `None`.
    #[test]
    fn the_process_age_is_uptime_less_its_start() {
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    12345 1000000 200 18446744073709551615";
        let age = process_age_of(stat, "125.45 240.00\n", 100.0).unwrap();
        assert_eq!(age.as_millis(), 2000);
        let age = process_age_of(stat, "100.00 1.00\n", 100.0).unwrap();
        assert_eq!(age, std::time::Duration::ZERO);
        assert_eq!(process_age_of("4242 (a S 1", "1.0 1.0", 100.0), None);
        assert_eq!(process_age_of(stat, "", 100.0), None);
        assert!(process_age().is_some_and(|a| a < std::time::Duration::from_secs(3600 * 24)));
    }

    #[test]
    fn align_up_rounds_to_multiples() {
        assert_eq!(align_up(0, 4096), Some(0));
        assert_eq!(align_up(1, 4096), Some(4096));
        assert_eq!(align_up(4096, 4096), Some(4096));
        assert_eq!(align_up(65_536_000, 2 << 20), Some(67_108_864));
        assert_eq!(align_up(10, 3), Some(12));
        assert_eq!(align_up(5, 0), None);
        assert_eq!(align_up(u64::MAX, 4096), None);
    }

    #[test]
    fn poll_timeout_rounds_up_and_clamps() {
        assert_eq!(poll_timeout_ms(None), -1);
        assert_eq!(poll_timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(poll_timeout_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(poll_timeout_ms(Some(Duration::from_millis(300))), 300);
        assert_eq!(
            poll_timeout_ms(Some(Duration::from_secs(u64::MAX))),
            i32::MAX
        );
    }
}
