//! Raw `AF_NETLINK` socket calls for the generic-netlink client (`netlink`):
//! [`socket(7)`](https://man7.org/linux/man-pages/man7/netlink.7.html) creation, socket options,
//! `bind`/`getsockname` for the port id, `sendto` the kernel and `recvfrom` with `MSG_TRUNC`.
//!
//! Everything here is one syscall with its result checked; message framing, sequence checks
//! and extended-ack parsing live in `src/netlink/socket.rs` and contain no `unsafe`.

use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use nix::sys::socket::{bind, getsockname, sendto, setsockopt, sockopt, MsgFlags, NetlinkAddr};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};
use crate::sys::cvt;

pub(crate) use libc::{NETLINK_CAP_ACK, NETLINK_EXT_ACK, NETLINK_GENERIC, SOL_NETLINK};

/// `socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol)`; the fd is owned by the result.
///
/// Errors: `Error::Sys { call: "socket(AF_NETLINK)", .. }` (e.g. `EPROTONOSUPPORT` when the
/// protocol is not built in).
pub(crate) fn open(protocol: libc::c_int) -> Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; the return value is checked by cvt below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    let fd = cvt(fd, "socket(AF_NETLINK)")?;
    // SAFETY: `fd` is a fresh descriptor returned by a successful socket() call; nothing else
    // owns it, so handing ownership to OwnedFd (which closes it once) is sound.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(SOL_SOCKET, SO_RCVTIMEO)`: a blocking `recv` gives `EAGAIN` after `timeout`.
pub(crate) fn set_recv_timeout(fd: BorrowedFd<'_>, timeout: Duration) -> Result<()> {
    // time_t and suseconds_t by inference (libc marks musl's names deprecated); a timeout
    // past 2^31 - 1 s (68 years) is that.
    let tv = TimeVal::new(
        timeout.as_secs().try_into().unwrap_or(i32::MAX.into()),
        timeout.subsec_micros().into(),
    );
    setsockopt(&fd, sockopt::ReceiveTimeout, &tv).map_err(|e| nix_err("setsockopt(SO_RCVTIMEO)", e))
}

/// [`Error::Sys`] naming `call` from a `nix` errno.
fn nix_err(call: &str, e: nix::errno::Errno) -> Error {
    Error::sys(call, e as i32)
}

fn kernel_addr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is a plain C struct of integers (and padding) for which all-zero is
    // a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa
}

/// `bind()` with `nl_pid = 0` and no multicast groups: the kernel assigns a unique port id.
pub(crate) fn bind_auto(fd: BorrowedFd<'_>) -> Result<()> {
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| nix_err("bind(AF_NETLINK)", e))
}

/// `getsockname()`: the socket's netlink port id (`nl_pid`), which the kernel puts in
/// `nlmsghdr.nlmsg_pid` of every unicast reply to us.
pub(crate) fn port_id(fd: BorrowedFd<'_>) -> Result<u32> {
    getsockname::<NetlinkAddr>(fd.as_raw_fd())
        .map(|a| a.pid())
        .map_err(|e| nix_err("getsockname(AF_NETLINK)", e))
}

/// `sendto(fd, buf, 0, {AF_NETLINK, pid 0})`: one datagram to the kernel. Returns the bytes sent
/// (netlink sends whole datagrams or fails).
pub(crate) fn send_to_kernel(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize> {
    let kernel = NetlinkAddr::new(0, 0);
    sendto(fd.as_raw_fd(), buf, &kernel, MsgFlags::empty())
        .map_err(|e| nix_err("sendto(AF_NETLINK)", e))
}

/// What one [`recv`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Datagram {
    /// Full length of the datagram in bytes (thanks to `MSG_TRUNC`, even when it is longer
    /// than the buffer: then only `buf.len()` bytes were stored and the rest is lost).
    pub len: usize,
    /// Sender's port id (`nl_pid`); 0 is the kernel.
    pub sender: u32,
}

/// `recvfrom(fd, buf, MSG_TRUNC [| MSG_PEEK])`: one datagram. With `peek` the datagram stays
/// queued, so a caller can size its buffer from [`Datagram::len`] and read it again.
///
/// Errors: `Error::Sys { call: "recvfrom(AF_NETLINK)", errno }`; `EAGAIN` after the receive
/// timeout, `EINTR` when a signal arrived, `ENOBUFS` when the socket's queue overran.
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], peek: bool) -> Result<Datagram> {
    let mut sa = kernel_addr();
    let mut alen = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    let flags = libc::MSG_TRUNC | if peek { libc::MSG_PEEK } else { 0 };
    // SAFETY: `buf` is a live, exclusively borrowed slice valid for writes of buf.len() bytes,
    // and the kernel writes at most that many; `sa`/`alen` are live and sized for a
    // sockaddr_nl. The fd is borrowed for the call. The result is checked.
    let ret = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
            (&mut sa as *mut libc::sockaddr_nl).cast(),
            &mut alen,
        )
    };
    let len = cvt(ret, "recvfrom(AF_NETLINK)")? as usize;
    Ok(Datagram {
        len,
        sender: sa.nl_pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn open_bind_and_port_id() {
        let fd = open(NETLINK_GENERIC).expect("socket(AF_NETLINK, NETLINK_GENERIC)");
        bind_auto(fd.as_fd()).expect("bind");
        let pid = port_id(fd.as_fd()).expect("getsockname");
        assert_ne!(
            pid, 0,
            "the kernel assigns a non-zero port id to user sockets"
        );
        crate::sys::socket::setsockopt_raw(fd.as_fd(), SOL_NETLINK, NETLINK_EXT_ACK, &1)
            .expect("ext ack");
        set_recv_timeout(fd.as_fd(), Duration::from_millis(10)).expect("timeout");
        let mut buf = [0u8; 16];
        let err = recv(fd.as_fd(), &mut buf, true).expect_err("nothing queued");
        assert_eq!(err.errno(), Some(libc::EAGAIN));
    }
}
