//! SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 handling that lets every NIC change unwind.
//!
//! Every signal whose default action ends the process and that a user or a harness sends on
//! purpose is a stop signal: Ctrl-\\ (SIGQUIT) or a stray `kill -USR1` would otherwise end the
//! run with header split, the RSS table and the flow rule still changed. SIGQUIT's core dump
//! is given up for that; SIGKILL cannot be caught, and SIGSEGV-like faults are not requests.
//! SIGHUP is a stop signal too: a run in a terminal or an ssh session that goes away gets it,
//! and its default action (terminate at once) would leave header split, the RSS table and the
//! flow rule changed. A SIGHUP that was ignored when the process started (`nohup`) stays
//! ignored. The handler only records the first signal number in [`STOP`] and makes an eventfd
//! readable (`stop_fd_of`); the receive loop polls with a short tick, accept, connect and
//! the flow engine's supervisor wait on that fd beside their own, and they return
//! [`crate::Error::Interrupted`], so the undo guards run their `Drop` on the normal return
//! path.
//!
//! A second Ctrl-C (a SIGINT at least [`ESCALATE_AFTER`] after the first stop signal) exits at
//! once (status 128 + signal), for a user who really wants out; it removes the `--pid-file`
//! first ([`unlink_at_exit`]). A repeated SIGTERM or SIGHUP
//! never does: programs send those, and some send them twice — GNU `timeout` signals the
//! child and then its whole process group, a terminal hangup reaches a job from the kernel and
//! again from the shell — and that second copy must not cut the unwind short. `SIGPIPE` is
//! ignored so a peer that goes away surfaces as `EPIPE` instead of killing the process.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::time::TimeValLike;

/// The first stop signal received (0 = none). Read with [`stop_requested`].
pub static STOP: AtomicI32 = AtomicI32::new(0);

/// An eventfd the stop handler writes to on every stop signal (-1 = none: [`install`] not
/// called, or `eventfd` failed). It never gets read, so once a stop signal has come it stays
/// readable: a wait that polls it with its own fd ([`stop_fd_of`]) ends on a stop signal
/// without a timer tick, also when the signal came just before the wait began or was
/// delivered to another thread.
static STOP_FD: AtomicI32 = AtomicI32::new(-1);

/// The process that made [`STOP_FD`]: a child between its fork and its exec, which shares
/// the fd but not [`STOP`], leaves it alone (a readable fd with `STOP` still 0 would make the
/// parent's waits spin).
static STOP_FD_PID: AtomicI32 = AtomicI32::new(0);

/// `CLOCK_MONOTONIC` time of the first stop signal, in nanoseconds.
static FIRST_AT_NS: AtomicU64 = AtomicU64::new(0);

/// The file the immediate exit of a second Ctrl-C removes first (a `--pid-file` this process
/// wrote), as a NUL-terminated path; null for none. Set by [`unlink_at_exit`].
static UNLINK_AT_EXIT: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// Sends `sig` to the process group `pgid` (a hook started in a group of its own, with its
/// children). Returns whether the kernel took it.
pub(crate) fn signal_group(pgid: u32, sig: nix::sys::signal::Signal) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid as i32), sig).is_ok()
}

/// Whether a process with id `pid` (> 0) exists: `kill(pid, 0)` succeeds, or answers `EPERM`
/// (it exists, owned by another user). `false` for `ESRCH` and for ids that name no single
/// process (0 and below).
pub(crate) fn process_exists(pid: i32) -> bool {
    pid > 0
        && matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Ok(()) | Err(nix::errno::Errno::EPERM)
        )
}

/// Names the file (`Some`) that the immediate exit of a second Ctrl-C removes before it
/// exits, or none (`None`): the unwind that exit cuts short would have removed it. A path with
/// a NUL byte (which no file can have) names none. The path's copy is kept for the life of
/// the process (a few bytes, once per `--pid-file`).
pub fn unlink_at_exit(path: Option<&std::path::Path>) {
    use std::os::unix::ffi::OsStrExt;
    let ptr = path
        .and_then(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).ok())
        .map_or(std::ptr::null_mut(), |c| c.into_raw());
    // The old copy is not freed: the handler may be reading it now.
    UNLINK_AT_EXIT.store(ptr, Ordering::SeqCst);
}

/// A SIGINT at least this long after the first stop signal exits at once (a second Ctrl-C);
/// one sooner is taken for a duplicate of the first.
pub const ESCALATE_AFTER: Duration = Duration::from_millis(100);

/// Whether stop signal `sig`, arriving `since_first` after the first stop signal, ends the
/// process at once instead of leaving the unwind to finish: only a SIGINT, and only
/// [`ESCALATE_AFTER`] or later.
pub(crate) fn exits_at_once(sig: i32, since_first: Duration) -> bool {
    sig == libc::SIGINT && since_first >= ESCALATE_AFTER
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (async-signal-safe).
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.num_nanoseconds() as u64)
}

/// `pid` as the pid file writes it (decimal digits and a newline) into `buf`; its length.
/// No allocation (async-signal-safe).
fn pid_line(pid: u32, buf: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[i] = digits[len - 1 - i];
    }
    buf[len] = b'\n';
    len + 1
}

/// Whether the file at `path` holds this process's id as the pid file writes it (another
/// process that wrote its own id over it keeps its file). Only async-signal-safe calls:
/// getpid, open, read, close.
fn holds_own_pid(path: *const libc::c_char) -> bool {
    let mut want = [0u8; 12];
    // SAFETY: getpid takes no arguments and is async-signal-safe.
    let len = pid_line(unsafe { libc::getpid() } as u32, &mut want);
    // SAFETY: `path` is the NUL-terminated path unlink_at_exit leaked (valid for the life of
    // the process); open is async-signal-safe.
    let fd = unsafe { libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut got = [0u8; 13];
    // SAFETY: read into a stack buffer of the length given; fd is the one just opened.
    let n = unsafe { libc::read(fd, got.as_mut_ptr().cast(), got.len()) };
    // SAFETY: closes the fd just opened, once.
    unsafe { libc::close(fd) };
    n == len as isize && got[..len] == want[..len]
}

/// Makes [`STOP_FD`] readable: adds 1 to the eventfd's count (a full count, `EAGAIN`, is as
/// readable), in the process that made it. Keeps `errno` as it was, for the code the signal
/// interrupted. Only async-signal-safe calls: getpid, write.
fn wake_stop_waits() {
    let fd = STOP_FD.load(Ordering::SeqCst);
    // SAFETY: getpid takes no arguments and is async-signal-safe.
    if fd < 0 || unsafe { libc::getpid() } != STOP_FD_PID.load(Ordering::SeqCst) {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: reads this thread's errno.
    let saved = unsafe { *errno };
    let one = 1u64.to_ne_bytes();
    // SAFETY: write of 8 bytes from a stack buffer to the eventfd install made (never closed);
    // write is async-signal-safe.
    let _ = unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
    // SAFETY: puts this thread's errno back.
    unsafe { *errno = saved };
}

extern "C" fn on_stop_signal(sig: libc::c_int) {
    let now = monotonic_ns();
    if STOP
        .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        FIRST_AT_NS.store(now, Ordering::SeqCst);
        // After the store: a wait woken by the fd finds STOP set.
        wake_stop_waits();
        return;
    }
    wake_stop_waits();
    let since_first = Duration::from_nanos(now.saturating_sub(FIRST_AT_NS.load(Ordering::SeqCst)));
    if exits_at_once(sig, since_first) {
        let unlink = UNLINK_AT_EXIT.load(Ordering::SeqCst);
        if !unlink.is_null() && holds_own_pid(unlink) {
            // SAFETY: unlink is async-signal-safe; the pointer is a NUL-terminated path that
            // unlink_at_exit leaked, so it stays valid for the life of the process.
            unsafe { libc::unlink(unlink) };
        }
        // SAFETY: _exit is async-signal-safe and takes no pointers.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Installs the stop-signal handlers (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2;
/// without `SA_RESTART`, so blocking calls return `EINTR`) and ignores `SIGPIPE`. SIGHUP keeps an
/// inherited `SIG_IGN` (`nohup`).
///
/// First makes the eventfd the handler writes to (`stop_fd_of`), once; without one (a
/// failed `eventfd`) the waits fall back to their timer tick.
///
/// Errors: [`crate::Error::Sys`] naming the signal when `sigaction` fails.
pub fn install() -> crate::Result<()> {
    if STOP_FD.load(Ordering::SeqCst) < 0 {
        // SAFETY: getpid takes no arguments. Stored before the fd, which the handler reads
        // first.
        STOP_FD_PID.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        // SAFETY: eventfd takes no pointers; the new fd is owned by STOP_FD for the life of
        // the process.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd >= 0
            && STOP_FD
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            // SAFETY: closes the fd just made, which nothing else has seen.
            unsafe { libc::close(fd) };
        }
    }
    let stop = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    for (sig, act) in [
        (Signal::SIGINT, &stop),
        (Signal::SIGTERM, &stop),
        (Signal::SIGHUP, &stop),
        (Signal::SIGQUIT, &stop),
        (Signal::SIGUSR1, &stop),
        (Signal::SIGUSR2, &stop),
        (Signal::SIGPIPE, &ignore),
    ] {
        // SAFETY: the handler only performs atomic loads and a swap, clock_gettime, a write
        // to the eventfd and, on a second signal, unlink and _exit; all are async-signal-safe.
        let old = unsafe { sigaction(sig, act) }
            .map_err(|e| crate::Error::sys(format!("sigaction({sig})"), e as i32))?;
        if sig == Signal::SIGHUP && matches!(old.handler(), SigHandler::SigIgn) {
            // SAFETY: puts back SIG_IGN, which runs no code.
            unsafe { sigaction(sig, &ignore) }
                .map_err(|e| crate::Error::sys(format!("sigaction({sig})"), e as i32))?;
        }
    }
    Ok(())
}

/// The fd that becomes readable (and stays so) on a stop signal, when `flag` is [`STOP`] and
/// [`install`] made one in this process; `None` for any other flag (a test's, a run's own),
/// whose waits have to look at it on a timer tick.
pub(crate) fn stop_fd_of(flag: &AtomicI32) -> Option<std::os::fd::BorrowedFd<'static>> {
    let fd = STOP_FD.load(Ordering::SeqCst);
    // SAFETY: getpid takes no arguments.
    let own = unsafe { libc::getpid() } == STOP_FD_PID.load(Ordering::SeqCst);
    // SAFETY: the eventfd install made is never closed once stored in STOP_FD.
    (std::ptr::eq(flag, &STOP) && fd >= 0 && own)
        .then(|| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
}

/// The stop signal received so far, if any.
pub fn stop_requested() -> Option<i32> {
    Some(STOP.load(Ordering::SeqCst)).filter(|&sig| sig != 0)
}

/// `Err(Error::Interrupted)` once a stop signal has arrived; for polling loops.
pub fn check() -> crate::Result<()> {
    check_flag(&STOP)
}

/// `Err(Error::Interrupted)` once `flag` holds a signal number (non-zero). For code that takes
/// the stop flag as a parameter (tests pass their own).
pub(crate) fn check_flag(flag: &AtomicI32) -> crate::Result<()> {
    match flag.load(Ordering::SeqCst) {
        0 => Ok(()),
        sig => Err(crate::Error::Interrupted(sig)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handler's own formatting of the pid file's line, and its check of the file: a
    /// file with this process's id is its own, one another process wrote over it is not.
    #[test]
    fn the_handler_removes_only_a_file_with_its_own_id() {
        let mut b = [0u8; 12];
        let n = pid_line(0, &mut b);
        assert_eq!(&b[..n], b"0\n");
        let n = pid_line(4_294_967_295, &mut b);
        assert_eq!(&b[..n], b"4294967295\n");
        let path = std::env::temp_dir().join(format!("ncdevmem-own-{}.pid", std::process::id()));
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        assert!(holds_own_pid(c.as_ptr()));
        std::fs::write(&path, "999999\n").unwrap();
        assert!(!holds_own_pid(c.as_ptr()));
        std::fs::write(&path, format!("{}\nmore", std::process::id())).unwrap();
        assert!(!holds_own_pid(c.as_ptr()));
        std::fs::remove_file(&path).unwrap();
        assert!(!holds_own_pid(c.as_ptr()), "no file");
    }

    /// Only the signals' own flag has the handler's fd; a wait on any other looks in ticks.
    #[test]
    fn only_the_signals_flag_has_a_stop_fd() {
        let other = AtomicI32::new(0);
        assert!(stop_fd_of(&other).is_none());
        let set = STOP_FD.load(Ordering::SeqCst) >= 0;
        assert_eq!(stop_fd_of(&STOP).is_some(), set);
    }

    /// Only a later SIGINT cuts the unwind short; repeated SIGTERM and SIGHUP (GNU `timeout`
    /// sends SIGTERM to the child and to its process group) and a SIGINT right on the heels of
    /// the first signal do not.
    #[test]
    fn only_a_later_sigint_exits_at_once() {
        let later = ESCALATE_AFTER + Duration::from_millis(1);
        assert!(exits_at_once(libc::SIGINT, later));
        assert!(exits_at_once(libc::SIGINT, Duration::from_secs(60)));
        assert!(!exits_at_once(libc::SIGINT, Duration::from_micros(20)));
        for sig in [
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            assert!(!exits_at_once(sig, Duration::ZERO));
            assert!(!exits_at_once(sig, Duration::from_secs(60)));
        }
    }
}
