//! SIGINT/SIGTERM/SIGHUP handling that lets every NIC change unwind.
//!
//! SIGHUP is a stop signal too: a run in a terminal or an ssh session that goes away gets it,
//! and its default action (terminate at once) would leave header split, the RSS table and the
//! flow rule changed. A SIGHUP that was ignored when the process started (`nohup`) stays
//! ignored. The handler only records the signal number in [`STOP`]; the receive loop, accept and connect
//! poll with a short tick and return [`crate::Error::Interrupted`], so the undo guards run their
//! `Drop` on the normal return path. A second signal while the first is being handled exits at
//! once (status 128 + signal), for a user who really wants out. `SIGPIPE` is ignored so a peer
//! that goes away surfaces as `EPIPE` instead of killing the process.

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// The first stop signal received (0 = none). Read with [`stop_requested`].
pub static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    if STOP.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe and takes no pointers.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Installs the SIGINT/SIGTERM/SIGHUP handlers (without `SA_RESTART`, so blocking calls
/// return `EINTR`) and ignores `SIGPIPE`. SIGHUP keeps an inherited `SIG_IGN` (`nohup`).
///
/// Errors: [`crate::Error::Sys`] naming the signal when `sigaction` fails.
pub fn install() -> crate::Result<()> {
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
        (Signal::SIGPIPE, &ignore),
    ] {
        // SAFETY: the handler only performs an atomic swap and, on a second signal, _exit;
        // both are async-signal-safe.
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

/// The stop signal received so far, if any.
pub fn stop_requested() -> Option<i32> {
    match STOP.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// `Err(Error::Interrupted)` once a stop signal has arrived; for polling loops.
pub fn check() -> crate::Result<()> {
    check_flag(&STOP)
}

/// `Err(Error::Interrupted)` once `flag` holds a signal number (non-zero). For code that takes
/// the stop flag as a parameter (tests pass their own).
pub fn check_flag(flag: &AtomicI32) -> crate::Result<()> {
    match flag.load(Ordering::SeqCst) {
        0 => Ok(()),
        sig => Err(crate::Error::Interrupted(sig)),
    }
}
