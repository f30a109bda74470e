//! Connection set-up and sending with timeouts and stop signals: the waiting, retrying and
//! deadline policy over the single calls of [`crate::sys::socket`] (`accept`, `connect`,
//! `send`, `poll`). A stop signal (SIGINT, SIGTERM, SIGHUP) ends every wait within
//! [`STOP_POLL_TICK`].

use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::sys::socket::{self, poll_one};

/// How often the waits here wake up to look at the stop flag.
pub const STOP_POLL_TICK: Duration = Duration::from_millis(50);

/// Waits for one connection on `listener` (non-blocking, from [`socket::tcp_listen`]) and
/// accepts it ([`socket::accept`]; the new socket is blocking). Polls with a
/// [`STOP_POLL_TICK`] tick so a signal handler's store to `stop` (the signal number; 0 = keep
/// going) is noticed promptly.
///
/// Errors: `Error::Timeout` when `timeout` (None = forever) passes without a connection;
/// `Error::Interrupted(sig)` when `stop` becomes non-zero; `Error::Sys` for poll/accept
/// failures other than `EINTR`, `EAGAIN` and `ECONNABORTED` (which are retried, with
/// `Backoff` pauses once they repeat).
pub fn accept_timeout(
    listener: BorrowedFd<'_>,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<(OwnedFd, SocketAddr)> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut backoff = Backoff::default();
    loop {
        let sig = stop.load(Ordering::Relaxed);
        if sig != 0 {
            return Err(Error::Interrupted(sig));
        }
        let tick = match deadline {
            None => STOP_POLL_TICK,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let what = match socket::local_addr(listener) {
                        Ok(a) => format!("{a}"),
                        Err(_) => format!("fd {}", listener.as_raw_fd()),
                    };
                    return Err(Error::Timeout(format!(
                        "accept on {what}: no connection within {} ms",
                        timeout.unwrap_or_default().as_millis()
                    )));
                }
                left.min(STOP_POLL_TICK)
            }
        };
        match poll_one(listener.as_raw_fd(), libc::POLLIN, Some(tick)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(libc::EINTR) => {
                backoff.pause();
                continue;
            }
            Err(errno) => return Err(Error::sys("poll(listener, POLLIN)", errno)),
        }
        match socket::accept(listener) {
            Err(e)
                if matches!(
                    e.errno(),
                    Some(libc::EINTR | libc::EAGAIN | libc::ECONNABORTED)
                ) =>
            {
                backoff.pause();
            }
            other => return other,
        }
    }
}

/// Connects a new AF_INET6 stream socket to `addr` ([`socket::connect_start`]: the socket
/// options of ncdevmem.c's client, optionally bound to `ifname` and `local`), waiting for the
/// connect with `poll(POLLOUT)` up to `timeout` (None = forever). The returned socket is
/// blocking.
///
/// Errors: `Error::Usage` for a bad interface name; `Error::Timeout`; `Error::Interrupted`
/// for a stop signal; `Error::Sys` naming the call (`ECONNREFUSED` from `connect`).
pub fn connect_timeout(
    addr: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: Option<&str>,
    timeout: Option<Duration>,
) -> Result<OwnedFd> {
    let (fd, pending) = socket::connect_start(addr, local, ifname)?;
    if !pending {
        return Ok(fd);
    }
    // A deadline too far to represent waits forever.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut backoff = Backoff::default();
    loop {
        crate::signals::check()?;
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(Error::Timeout(format!(
                "connect to {addr}: no answer within {} ms",
                timeout.unwrap_or_default().as_millis()
            )));
        }
        // Wake at least every STOP_POLL_TICK to notice a stop signal.
        let wait = Some(left.map_or(STOP_POLL_TICK, |l| l.min(STOP_POLL_TICK)));
        match poll_one(fd.as_raw_fd(), libc::POLLOUT, wait) {
            Ok(0) => continue,
            Err(libc::EINTR) => {
                backoff.pause();
                continue;
            }
            Ok(_) => break,
            Err(errno) => return Err(Error::sys("poll(connect, POLLOUT)", errno)),
        }
    }
    socket::connect_finish(fd.as_fd(), addr)?;
    Ok(fd)
}

/// Sends all of `data`, retrying on `EINTR` and short writes and waiting with `poll(POLLOUT)`
/// for a full send buffer. A closed peer is `Error::Sys` with `EPIPE`/`ECONNRESET`, never
/// `SIGPIPE`.
pub fn send_all(fd: BorrowedFd<'_>, data: &[u8]) -> Result<()> {
    send_all_timeout(fd, data, None)
}

/// Waits until `fd` is writable, polling in [`STOP_POLL_TICK`] ticks so a stop signal is
/// seen also on a thread the signal was not delivered to (whose `poll` is never interrupted):
/// `Error::Interrupted` then, `Error::Timeout` once `stall` passes without the socket becoming
/// writable (`sent` of `len` bytes of the write name the progress).
fn wait_writable(
    fd: BorrowedFd<'_>,
    stall: Option<Duration>,
    sent: usize,
    len: usize,
) -> Result<()> {
    let since = Instant::now();
    loop {
        let left = stall.map(|s| s.saturating_sub(since.elapsed()));
        if left == Some(Duration::ZERO) {
            return Err(Error::Timeout(format!(
                "send: the peer accepted no data for {:.3} s ({sent} of {len} bytes of this \
                 write sent)",
                stall.unwrap_or_default().as_secs_f64()
            )));
        }
        let tick = left.map_or(STOP_POLL_TICK, |l| l.min(STOP_POLL_TICK));
        match poll_one(fd.as_raw_fd(), libc::POLLOUT, Some(tick)) {
            Ok(0) | Err(libc::EINTR) => crate::signals::check()?,
            Ok(_) => return Ok(()),
            Err(errno) => return Err(Error::sys("poll(POLLOUT)", errno)),
        }
    }
}

/// [`send_all`] that gives up when the socket accepts no byte for `stall` (None = wait
/// forever): each `send` is `MSG_DONTWAIT` ([`socket::send_once`]), and a full send buffer is
/// waited for with `poll(POLLOUT)`. A stop signal ([`crate::signals::STOP`]) ends the wait.
///
/// Errors: `Error::Timeout` naming how many bytes of `data` went out; `Error::Interrupted`;
/// `Error::Sys` naming `send` and the offset within `data` (`EPIPE`, `ECONNRESET`, ...).
pub fn send_all_timeout(fd: BorrowedFd<'_>, data: &[u8], stall: Option<Duration>) -> Result<()> {
    let mut off = 0;
    let mut backoff = Backoff::default();
    while off < data.len() {
        let rest = &data[off..];
        let errno = match socket::send_once(fd, rest) {
            Ok(n) => {
                off += n;
                backoff.reset();
                continue;
            }
            Err(errno) => errno,
        };
        match errno {
            libc::EINTR => {
                crate::signals::check()?;
                backoff.pause();
            }
            libc::EAGAIN => {
                wait_writable(fd, stall, off, data.len())?;
                // Writable again; a send that keeps answering EAGAIN all the same pauses.
                backoff.pause();
            }
            errno => {
                return Err(Error::sys(
                    format!("send({} bytes at offset {off} of this write)", rest.len()),
                    errno,
                ))
            }
        }
    }
    Ok(())
}
