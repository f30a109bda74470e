//! Connection set-up and sending with timeouts and stop signals: the waiting, retrying and
//! deadline policy over the single calls of [`crate::sys::socket`] (`accept`, `connect`,
//! `send`, `poll`). A stop signal (SIGINT, SIGTERM, SIGHUP) ends every wait at once: a wait on
//! the signals' own flag also polls the fd their handler makes readable
//! (`signals::stop_fd_of`), one on another flag looks at it every [`STOP_POLL_TICK`].

use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::sys::socket::{self, poll_one_or_wake};

/// How often the waits here wake up to look at a stop flag that is not the signals' own
/// (a test's, a run's), or at theirs when the handler has no fd to make readable.
pub const STOP_POLL_TICK: Duration = Duration::from_millis(50);

/// Polls `fd` for `events` until it is ready (`Ok(true)`) or `deadline` passes (`Ok(false)`;
/// `None` = never), ending at once when `stop` (the signal number; 0 = keep going) becomes
/// non-zero, also on a thread whose `poll` the signal does not interrupt: for the signals'
/// flag the `poll` also waits on the fd their handler makes readable, without a timer (the
/// flag is looked at before each `poll`, and a signal after that look leaves the fd
/// readable); for any other flag it wakes every [`STOP_POLL_TICK`] to look. An interrupted
/// `poll` is retried, with backoff pauses once it repeats.
///
/// Errors: `Error::Interrupted(sig)` once `stop` is non-zero; `Error::Sys` naming `call` for
/// a `poll` failure other than `EINTR`.
pub(crate) fn poll_ready(
    fd: BorrowedFd<'_>,
    events: i16,
    deadline: Option<Instant>,
    stop: &AtomicI32,
    call: &str,
) -> Result<bool> {
    let mut backoff = Backoff::default();
    let wake = crate::signals::stop_fd_of(stop).map(|w| w.as_raw_fd());
    loop {
        crate::signals::check_flag(stop)?;
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(false);
        }
        let wait = match wake {
            Some(_) => left,
            None => Some(left.map_or(STOP_POLL_TICK, |l| l.min(STOP_POLL_TICK))),
        };
        match poll_one_or_wake(fd.as_raw_fd(), events, wake, wait) {
            Ok(0) => {}
            Ok(_) => return Ok(true),
            Err(libc::EINTR) => backoff.pause(),
            Err(errno) => return Err(Error::sys(call, errno)),
        }
    }
}

/// Waits for one connection on `listener` (non-blocking, from [`socket::tcp_listen`]) and
/// accepts it ([`socket::accept`]; the new socket is blocking). Waits as `poll_ready` does, so a
/// signal handler's store to `stop` (the signal number; 0 = keep going) ends the wait at once.
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
        if !poll_ready(
            listener,
            libc::POLLIN,
            deadline,
            stop,
            "poll(listener, POLLIN)",
        )? {
            let what = socket::local_addr(listener).map_or_else(
                |_| format!("fd {}", listener.as_raw_fd()),
                |a| a.to_string(),
            );
            return Err(Error::Timeout(format!(
                "accept on {what}: no connection within {} ms",
                timeout.unwrap_or_default().as_millis()
            )));
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
    connect_until(addr, local, ifname, timeout, &crate::signals::STOP)
}

/// [`connect_timeout`], whose wait ends also once `stop` (a run's own stop flag; 0 = keep
/// going) is set.
///
/// Errors: as [`connect_timeout`]; `Error::Interrupted` with `stop`'s value.
pub(crate) fn connect_until(
    addr: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: Option<&str>,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<OwnedFd> {
    crate::signals::check_flag(stop)?;
    let (fd, pending) = socket::connect_start(addr, local, ifname)?;
    if !pending {
        return Ok(fd);
    }
    // A deadline too far to represent waits forever.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    if !poll_ready(
        fd.as_fd(),
        libc::POLLOUT,
        deadline,
        stop,
        "poll(connect, POLLOUT)",
    )? {
        return Err(Error::Timeout(format!(
            "connect to {addr}: no answer within {} ms",
            timeout.unwrap_or_default().as_millis()
        )));
    }
    socket::connect_finish(fd.as_fd(), addr)?;
    Ok(fd)
}

/// Sends all of `data`, retrying on `EINTR` and short writes; gives up when the socket accepts
/// no byte for `stall` (None = wait forever): each `send` is `MSG_DONTWAIT`
/// ([`socket::send_once`]), and a full send buffer is waited for with `poll(POLLOUT)`. A stop
/// signal ([`crate::signals::STOP`]) ends the wait. A closed peer is `EPIPE`/`ECONNRESET`,
/// never `SIGPIPE`.
///
/// Errors: `Error::Timeout` naming how many bytes of `data` went out; `Error::Interrupted`;
/// `Error::Sys` naming `send` and the offset within `data` (`EPIPE`, `ECONNRESET`, ...).
pub fn send_all_timeout(fd: BorrowedFd<'_>, data: &[u8], stall: Option<Duration>) -> Result<()> {
    send_until(fd, data, stall, None, &crate::signals::STOP).1
}

/// As [`send_all_timeout`], but sends nothing more once `end` (if any) has come, also in
/// the middle of `data`: a wait for a peer that reads slowly (accepting a little now and
/// then, so `stall` never runs out) ends at `end`. A wait for a full send buffer also ends
/// once `stop` is set (the stop signal's flag, or a run's own that mirrors it). Returns how
/// many bytes of `data` went out (the kernel took them: `data.len()` unless `end` came
/// first), also when an error ended the write after a part of it, with the write's result.
///
/// Errors (the result): as [`send_all_timeout`]; `Error::Interrupted` with `stop`'s value.
pub fn send_until(
    fd: BorrowedFd<'_>,
    data: &[u8],
    stall: Option<Duration>,
    end: Option<Instant>,
    stop: &AtomicI32,
) -> (usize, Result<()>) {
    let mut off = 0;
    let r = send_from(fd, data, stall, end, stop, &mut off);
    (off, r)
}

/// [`send_until`]'s loop: `off` counts the bytes of `data` the kernel took, whatever ends it.
fn send_from(
    fd: BorrowedFd<'_>,
    data: &[u8],
    stall: Option<Duration>,
    end: Option<Instant>,
    stop: &AtomicI32,
    off: &mut usize,
) -> Result<()> {
    let mut backoff = Backoff::default();
    while *off < data.len() {
        if end.is_some_and(|e| Instant::now() >= e) {
            return Ok(());
        }
        let rest = &data[*off..];
        match socket::send_once(fd, rest) {
            Ok(n) => {
                *off += n;
                backoff.reset();
            }
            Err(libc::EINTR) => {
                crate::signals::check()?;
                backoff.pause();
            }
            Err(libc::EAGAIN) => {
                // Waited as poll_ready waits (the stop signals' fd, or ticks for another
                // flag): on a thread the stop signal is not delivered to, nothing else would
                // end a wait for a peer that does not read.
                let stalled = stall.and_then(|s| Instant::now().checked_add(s));
                let deadline = match (stalled, end) {
                    (Some(s), Some(e)) => Some(s.min(e)),
                    (s, e) => s.or(e),
                };
                if !poll_ready(fd, libc::POLLOUT, deadline, stop, "poll(POLLOUT)")? {
                    if end.is_some_and(|e| Instant::now() >= e) {
                        return Ok(());
                    }
                    return Err(Error::Timeout(format!(
                        "send: the peer accepted no data for {:.3} s ({} of {} bytes of \
                         this write sent)",
                        stall.unwrap_or_default().as_secs_f64(),
                        *off,
                        data.len()
                    )));
                }
                // Writable again; a send that keeps answering EAGAIN all the same pauses.
                backoff.pause();
            }
            Err(errno) => {
                return Err(Error::sys(
                    format!(
                        "send({} bytes at offset {} of this write)",
                        rest.len(),
                        *off
                    ),
                    errno,
                ))
            }
        }
    }
    Ok(())
}
/// Which worker an accepted connection goes to when each worker serves one RX queue: the
/// worker of the queue whose NAPI instance the connection's packets arrived through
/// (`SO_INCOMING_NAPI_ID` against the netdev family's `queue-get`), as the kernel's
/// `iou-zcrx -t` does. Worker `i` serves `queues[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDispatch {
    queues: Vec<u32>,
    napi_ids: Vec<u32>,
}

impl QueueDispatch {
    /// Reads the NAPI id of each of `queues` (RX queues of `ifindex`) through `netdev`.
    ///
    /// Errors: `queue-get`'s; `Error::Failure` for a queue the kernel lists without a NAPI id.
    pub fn read(
        netdev: &mut crate::netlink::netdev::Netdev,
        ifindex: u32,
        queues: &[u32],
    ) -> Result<QueueDispatch> {
        let napi_ids = queues
            .iter()
            .map(|&q| {
                netdev
                    .queue_get(ifindex, crate::netlink::netdev::QueueType::Rx, q)?
                    .napi_id
                    .ok_or_else(|| {
                        Error::Failure(format!("netdev_queue_get(q={q}): napi_id not present"))
                    })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(QueueDispatch::from_ids(queues, napi_ids))
    }

    /// The dispatch of worker `i` on `queues[i]`, whose NAPI id is `napi_ids[i]`.
    pub(crate) fn from_ids(queues: &[u32], napi_ids: Vec<u32>) -> QueueDispatch {
        QueueDispatch {
            queues: queues.to_vec(),
            napi_ids,
        }
    }

    /// The worker whose queue NAPI `napi_id` serves (the first, should two share one).
    pub(crate) fn worker_of_napi(&self, napi_id: u32) -> Option<usize> {
        self.napi_ids.iter().position(|&n| n == napi_id)
    }

    /// The RX queue of worker `worker`.
    pub fn queue(&self, worker: usize) -> Option<u32> {
        self.queues.get(worker).copied()
    }

    /// The worker of connection `fd`: `Ok(Ok(worker))`, or `Ok(Err(napi_id))` when it arrived
    /// through a NAPI instance of none of the queues.
    ///
    /// Errors: `getsockopt(SO_INCOMING_NAPI_ID)`'s.
    pub(crate) fn worker_of(&self, fd: BorrowedFd<'_>) -> Result<std::result::Result<usize, u32>> {
        let id = socket::incoming_napi_id(fd)?;
        Ok(self.worker_of_napi(id).ok_or(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker i serves queues[i]; a connection goes to the worker whose queue's NAPI id it
    /// carries, or is named by its NAPI id when none does.
    #[test]
    fn connections_go_to_the_worker_of_their_queue() {
        let d = QueueDispatch::from_ids(&[2, 3], vec![8201, 8202]);
        assert_eq!(d.worker_of_napi(8202), Some(1));
        assert_eq!(d.worker_of_napi(8201), Some(0));
        assert_eq!(d.worker_of_napi(8203), None);
        assert_eq!(d.worker_of_napi(0), None);
        assert_eq!((d.queue(1), d.queue(2)), (Some(3), None));
    }
}
