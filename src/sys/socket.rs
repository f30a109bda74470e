//! TCP sockets for the devmem receiver and the plain pattern sender, one call per function:
//! AF_INET6 listen, accept, connect, send, `recvmsg(MSG_SOCK_DEVMEM)`, `SO_DEVMEM_DONTNEED`,
//! the proposed `SO_DEVMEM_AUTORELEASE`. Waiting with timeouts and stop signals is
//! `conn`'s.
//!
//! Every socket is `AF_INET6` with `IPV6_V6ONLY = 0`, as ncdevmem.c: an IPv4 address is used in
//! its v4-mapped form `::ffff:a.b.c.d`. Numbers follow `include/uapi/asm-generic/socket.h`
//! and `include/linux/socket.h` (`docs/kernel-interface.md#socket-api`). All `unsafe` of this
//! module is here; the functions exposed are safe.

use std::mem::{size_of, size_of_val, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::sys::uapi::{self, dmabuf_token};
use crate::sys::{cvt, last_errno, poll_timeout_ms};

// ---------------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------------

/// Encodes a `SocketAddrV6` as `struct sockaddr_in6` (port and flowinfo in network order).
fn sockaddr_in6(addr: &SocketAddrV6) -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain integers and byte arrays; all-zero is a valid value.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_port = addr.port().to_be();
    sa.sin6_flowinfo = addr.flowinfo().to_be();
    sa.sin6_addr.s6_addr = addr.ip().octets();
    sa.sin6_scope_id = addr.scope_id();
    sa
}

/// Decodes a `sockaddr_storage` filled by the kernel (AF_INET6 or AF_INET).
fn decode_sockaddr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Result<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family is AF_INET6 and the kernel wrote at least
            // size_of::<sockaddr_in6>() bytes; sockaddr_storage is large and aligned enough
            // for any sockaddr, and read_unaligned avoids any alignment assumption.
            let sa: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sa.sin6_addr.s6_addr),
                u16::from_be(sa.sin6_port),
                u32::from_be(sa.sin6_flowinfo),
                sa.sin6_scope_id,
            )))
        }
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: as above, for AF_INET and sockaddr_in.
            let sa: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
                u16::from_be(sa.sin_port),
            )))
        }
        fam => Err(Error::decode(
            "sockaddr",
            format!("family {fam} with {len} bytes"),
        )),
    }
}

/// `getsockname(2)`: the local address of a socket (e.g. the port a listener bound to port 0
/// got).
pub fn local_addr(fd: BorrowedFd<'_>) -> Result<SocketAddr> {
    socket_name(fd, "getsockname", libc::getsockname)
}

/// The peer address of a connected socket (`getpeername`).
pub(crate) fn peer_addr(fd: BorrowedFd<'_>) -> Result<SocketAddr> {
    socket_name(fd, "getpeername", libc::getpeername)
}

/// `getsockname` or `getpeername` (`f`, named `call` in errors) into a zeroed
/// `sockaddr_storage`, decoded.
fn socket_name(
    fd: BorrowedFd<'_>,
    call: &str,
    f: unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int,
) -> Result<SocketAddr> {
    let mut ss = zeroed_storage();
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `f` is getsockname or getpeername; the pointer and length describe `ss`, which
    // outlives the call; the kernel writes at most `len` bytes and updates `len`.
    let ret = unsafe {
        f(
            fd.as_raw_fd(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    cvt(ret, call)?;
    decode_sockaddr(&ss, len)
}

// ---------------------------------------------------------------------------------------------
// Small wrappers
// ---------------------------------------------------------------------------------------------

/// `setsockopt(fd, level, opt, val, sizeof val)` for a plain-data `val` (an int, a `linger`,
/// a byte string, a slice of `dmabuf_token`s): the call's non-negative return, or its errno
/// (`EINVAL` without a call for a value too long for `socklen_t`).
pub(crate) fn setsockopt_raw<T: ?Sized>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
) -> Result<libc::c_int, i32> {
    let len = libc::socklen_t::try_from(size_of_val(val)).map_err(|_| libc::EINVAL)?;
    // SAFETY: the pointer and length describe `val`, plain data borrowed across the call; the
    // kernel only reads it. The result is checked.
    let ret =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, (val as *const T).cast(), len) };
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok(ret)
    }
}

/// `setsockopt(fd, level, opt, &int, 4)`; `name` is used in the error (`"SO_REUSEADDR"`).
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
    name: &str,
) -> Result<()> {
    setsockopt_raw(fd, level, opt, &val)
        .map(drop)
        .map_err(|e| Error::sys(format!("setsockopt({name}, {val})"), e))
}

/// `getsockopt(fd, level, opt, &int, &4)`: the value, or the errno.
pub(crate) fn getsockopt_raw(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
) -> Result<libc::c_int, i32> {
    let mut val: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the pointers describe `val` and `len`, alive across the call; the kernel writes
    // at most `len` bytes into `val` and updates `len`. The result is checked.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok(val)
    }
}

/// `getsockopt(fd, level, opt, buf, &len)` into a byte buffer (a struct's bytes, a name):
/// the number of bytes the kernel wrote (at most `buf.len()`), or the errno.
pub(crate) fn getsockopt_buf(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    buf: &mut [u8],
) -> Result<usize, i32> {
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(|_| libc::EINVAL)?;
    // SAFETY: the pointer and length describe `buf`, exclusively borrowed across the call;
    // the kernel writes at most `len` bytes into it and stores the count in `len`. The result
    // is checked.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok((len as usize).min(buf.len()))
    }
}

/// [`getsockopt_raw`]; `name` is used in the error.
fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    name: &str,
) -> Result<libc::c_int> {
    getsockopt_raw(fd, level, opt).map_err(|e| Error::sys(format!("getsockopt({name})"), e))
}

/// The socket's receive buffer in bytes as the kernel keeps it (`getsockopt(SO_RCVBUF)`:
/// twice what `SO_RCVBUF` was set to, or the autotuned size).
pub fn rcvbuf(fd: BorrowedFd<'_>) -> Result<u32> {
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, "SO_RCVBUF").map(|v| v.max(0) as u32)
}

/// Sets `SO_RCVLOWAT` to `bytes`: the receive low-water mark, the bytes that must be queued
/// before `poll` reports the socket readable (and before a blocking `recv` returns). TCP caps
/// it at half the receive buffer (a locked `SO_RCVBUF`, else half of `tcp_rmem`'s max); read
/// [`rcvlowat`] for what it kept. A non-blocking `recv` still returns whatever is queued.
///
/// Errors: `Error::Sys` naming `setsockopt(SO_RCVLOWAT, bytes)`; `EINVAL` without a call for
/// `bytes` above `i32::MAX`.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: u32) -> Result<()> {
    let v = libc::c_int::try_from(bytes)
        .map_err(|_| Error::sys(format!("setsockopt(SO_RCVLOWAT, {bytes})"), libc::EINVAL))?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v, "SO_RCVLOWAT")
}

/// The socket's receive low-water mark in bytes as the kernel keeps it
/// (`getsockopt(SO_RCVLOWAT)`: 1 unless set; see [`set_rcvlowat`]).
///
/// Errors: `Error::Sys` naming `getsockopt(SO_RCVLOWAT)`.
pub fn rcvlowat(fd: BorrowedFd<'_>) -> Result<u32> {
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, "SO_RCVLOWAT").map(|v| v.max(0) as u32)
}

/// `SO_INCOMING_NAPI_ID` (include/uapi/asm-generic/socket.h; 4.12+), the value of x86_64 and
/// aarch64.
const SO_INCOMING_NAPI_ID: libc::c_int = 56;

/// `SO_INCOMING_NAPI_ID`: the NAPI instance that last received for this socket (0 when none
/// has, or the device has no NAPI ids).
pub fn incoming_napi_id(fd: BorrowedFd<'_>) -> Result<u32> {
    getsockopt_int(
        fd,
        libc::SOL_SOCKET,
        SO_INCOMING_NAPI_ID,
        "SO_INCOMING_NAPI_ID",
    )
    .map(|v| v as u32)
}

/// Bytes queued for reading on a TCP socket (`ioctl(SIOCINQ)`): the receive queue not yet
/// returned by `recvmsg`, dmabuf frags included.
pub(crate) fn inq(fd: BorrowedFd<'_>) -> Result<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCINQ (FIONREAD) writes one int through the pointer, which points at `n`,
    // alive across the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    cvt(ret, "ioctl(SIOCINQ)")?;
    Ok(n.max(0) as u32)
}

/// `tcp_rmem[2]` of this network namespace (`/proc/sys/net/ipv4/tcp_rmem`, third field):
/// the largest receive buffer TCP autotuning grows to, in bytes.
pub(crate) fn tcp_rmem_max() -> Result<u64> {
    const PATH: &str = "/proc/sys/net/ipv4/tcp_rmem";
    let text = std::fs::read_to_string(PATH).map_err(|e| Error::io(format!("read {PATH}"), &e))?;
    text.split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::decode(PATH, format!("no third number in {text:?}")))
}

/// The MTU of interface `ifname` in bytes (`/sys/class/net/IF/mtu`).
pub(crate) fn if_mtu(ifname: &str) -> Result<u32> {
    let path = format!("/sys/class/net/{ifname}/mtu");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("read {path}"), &e))?;
    text.trim()
        .parse()
        .map_err(|_| Error::decode(path, format!("not a number: {text:?}")))
}

/// Whether a new socket may share its port with other sockets that ask for the same
/// (`SO_REUSEPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortSharing {
    /// Only `SO_REUSEADDR`: a listener refuses a port another listener holds (`EADDRINUSE`)
    /// but may take one over connections in TIME_WAIT.
    Exclusive,
    /// `SO_REUSEADDR` and `SO_REUSEPORT`, as ncdevmem.c's client sets them.
    Shared,
}

/// A new `AF_INET6` `SOCK_STREAM` socket (close-on-exec, `O_NONBLOCK` if asked) with
/// `IPV6_V6ONLY = 0`, `SO_REUSEADDR`, and `SO_REUSEPORT` when `sharing` is
/// [`PortSharing::Shared`].
fn tcp6_socket(nonblock: bool, sharing: PortSharing) -> Result<OwnedFd> {
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblock {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket takes no pointers; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET6, ty, 0) };
    cvt(raw, "socket(AF_INET6, SOCK_STREAM)")?;
    // SAFETY: socket returned a new descriptor (checked >= 0) owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let b = fd_borrow(&fd);
    setsockopt_int(b, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0, "IPV6_V6ONLY")?;
    setsockopt_int(b, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, "SO_REUSEADDR")?;
    if sharing == PortSharing::Shared {
        setsockopt_int(b, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1, "SO_REUSEPORT")?;
    }
    Ok(fd)
}

fn fd_borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// `bind(2)` to an AF_INET6 address.
fn bind6(fd: BorrowedFd<'_>, addr: &SocketAddrV6) -> Result<()> {
    let ret = with_sockaddr_in6(fd, addr, libc::bind);
    cvt(ret, &format!("bind({addr})")).map(drop)
}

/// `bind` or `connect` (`f`) of `fd` with `addr` as a `sockaddr_in6`: the call's return.
fn with_sockaddr_in6(
    fd: BorrowedFd<'_>,
    addr: &SocketAddrV6,
    f: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
) -> libc::c_int {
    let sa = sockaddr_in6(addr);
    let (p, len) = ((&sa as *const libc::sockaddr_in6).cast(), size_of_val(&sa));
    // SAFETY: `f` is bind or connect; the pointer and length describe `sa`, alive across the
    // call; the kernel reads it.
    unsafe { f(fd.as_raw_fd(), p, len as libc::socklen_t) }
}

/// `poll(2)` on one fd. `Ok(revents)` (0 on timeout); `Err(errno)` on failure (incl. `EINTR`).
pub(crate) fn poll_one(
    fd: RawFd,
    events: libc::c_short,
    timeout: Option<Duration>,
) -> Result<i16, i32> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd, alive across the call; the kernel writes only its `revents`.
    let ret = unsafe { libc::poll(&mut pfd, 1, poll_timeout_ms(timeout)) };
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok(pfd.revents)
    }
}

/// `poll(2)` on `fd` for `events` and, when given, on `wake` for `POLLIN` (an fd that becomes
/// readable when the wait is to end, e.g. the stop signals' eventfd). `Ok(revents)` of `fd`
/// (0 on timeout or when only `wake` is ready); `Err(errno)` on failure (incl. `EINTR`).
pub(crate) fn poll_one_or_wake(
    fd: RawFd,
    events: libc::c_short,
    wake: Option<RawFd>,
    timeout: Option<Duration>,
) -> Result<i16, i32> {
    let Some(wake) = wake else {
        return poll_one(fd, events, timeout);
    };
    let mut pfds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: wake,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two pollfds, alive across the call; the kernel writes only their `revents`.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), 2, poll_timeout_ms(timeout)) };
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok(pfds[0].revents)
    }
}

/// Sets or clears `O_NONBLOCK`.
fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> Result<()> {
    // SAFETY: fcntl(F_GETFL) on a live descriptor; no pointers.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    cvt(flags, "fcntl(F_GETFL)")?;
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: fcntl(F_SETFL, int) on a live descriptor; no pointers.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, new) };
    cvt(ret, "fcntl(F_SETFL, O_NONBLOCK)").map(drop)
}

// ---------------------------------------------------------------------------------------------
// Listen / accept / connect
// ---------------------------------------------------------------------------------------------

/// The server socket: `socket(AF_INET6, SOCK_STREAM)`, `IPV6_V6ONLY = 0`, `SO_REUSEADDR`,
/// `SO_RCVBUF` when given (bytes; see `rcvbuf`), `bind(addr)`, `listen(1)`. The listener
/// is `O_NONBLOCK` (used with `conn::accept_timeout`);
/// port 0 picks a free port (see [`local_addr`]).
///
/// Unlike ncdevmem.c there is no `SO_REUSEPORT`: with it a second receiver on the same address
/// and port would listen too and take some of the first one's connections. `SO_REUSEADDR`
/// alone still lets a new run bind over connections of the last one in TIME_WAIT.
///
/// Errors: `Error::Sys` naming the call and the address (`EADDRINUSE` from `bind` when
/// another socket listens there).
pub fn tcp_listen(addr: SocketAddrV6, rcvbuf: Option<u32>) -> Result<OwnedFd> {
    tcp_listen_backlog(addr, rcvbuf, 1)
}

/// [`tcp_listen`] with `listen(backlog)`, for a server that takes several connections at once.
///
/// Errors: as [`tcp_listen`].
pub fn tcp_listen_backlog(
    addr: SocketAddrV6,
    rcvbuf: Option<u32>,
    backlog: u32,
) -> Result<OwnedFd> {
    let fd = tcp6_socket(true, PortSharing::Exclusive)?;
    if let Some(bytes) = rcvbuf {
        // Before listen: the window scale of the accepted connection follows from it, and
        // the accepted socket inherits it.
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        setsockopt_int(
            fd_borrow(&fd),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            v,
            "SO_RCVBUF",
        )?;
    }
    bind6(fd_borrow(&fd), &addr)?;
    // SAFETY: listen takes no pointers.
    let ret = unsafe {
        libc::listen(
            fd.as_raw_fd(),
            libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX),
        )
    };
    cvt(ret, &format!("listen({addr}, {backlog})"))?;
    Ok(fd)
}

/// One `accept4(listener, SOCK_CLOEXEC)`: the new (blocking) socket and the peer's address.
/// Waiting, retries and timeouts are `conn::accept_timeout`'s.
///
/// Errors: `Error::Sys` naming `accept4` (`EAGAIN` when nothing is pending on the
/// non-blocking listener); `Error::Decode` for a peer address of an unknown family.
pub fn accept(listener: BorrowedFd<'_>) -> Result<(OwnedFd, SocketAddr)> {
    let mut ss = zeroed_storage();
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `ss`, alive across the call; the kernel
    // writes at most `len` bytes and updates `len`. The result is checked.
    let raw = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_CLOEXEC,
        )
    };
    cvt(raw, "accept4")?;
    // SAFETY: accept4 returned a new descriptor (checked >= 0) owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    Ok((fd, decode_sockaddr(&ss, len)?))
}

/// Starts connecting a new AF_INET6 stream socket to `addr`, as ncdevmem.c's client:
/// `IPV6_V6ONLY = 0`, `SO_REUSEADDR`/`SO_REUSEPORT`, optionally `SO_BINDTODEVICE(ifname)`
/// (length strlen+1) and `bind(local)` (address and source port), then a non-blocking
/// `connect`. Returns the socket and whether the connect is still in progress (then wait for
/// `POLLOUT` and call [`connect_finish`]); waiting and timeouts are
/// `conn::connect_timeout`'s.
///
/// Errors: `Error::Sys` naming the call: `EINVAL` for an interface name that is empty, has a
/// NUL or is ≥ IFNAMSIZ (16) bytes (refused before `SO_BINDTODEVICE`), `ECONNREFUSED` from
/// `connect`.
pub fn connect_start(
    addr: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: Option<&str>,
) -> Result<(OwnedFd, bool)> {
    let fd = tcp6_socket(false, PortSharing::Shared)?;
    let b = fd_borrow(&fd);
    if let Some(name) = ifname {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            let call = format!(
                "setsockopt(SO_BINDTODEVICE, {name:?}): the name must be 1..{} bytes without NUL",
                libc::IFNAMSIZ - 1
            );
            return Err(Error::sys(call, libc::EINVAL));
        }
        let mut buf = [0u8; libc::IFNAMSIZ];
        buf[..name.len()].copy_from_slice(name.as_bytes());
        // Length strlen + 1, the NUL included.
        setsockopt_raw(
            b,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            &buf[..=name.len()],
        )
        .map_err(|e| Error::sys(format!("setsockopt(SO_BINDTODEVICE, {name})"), e))?;
    }
    if let Some(l) = local {
        bind6(b, &l)?;
    }
    set_nonblocking(b, true)?;
    let pending = if with_sockaddr_in6(b, &addr, libc::connect) < 0 {
        let errno = last_errno();
        if errno != libc::EINPROGRESS && errno != libc::EINTR {
            return Err(Error::sys(format!("connect({addr})"), errno));
        }
        true
    } else {
        set_nonblocking(b, false)?;
        false
    };
    Ok((fd, pending))
}

/// Ends a connect [`connect_start`] left in progress, once the socket polled writable: its
/// `SO_ERROR`, then the socket back to blocking.
///
/// Errors: `Error::Sys` naming `connect(addr)` with the connect's errno (`ECONNREFUSED`), or
/// the failing call.
pub fn connect_finish(fd: BorrowedFd<'_>, addr: SocketAddrV6) -> Result<()> {
    let err = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR, "SO_ERROR")?;
    if err != 0 {
        return Err(Error::sys(format!("connect({addr})"), err));
    }
    set_nonblocking(fd, false)
}

// ---------------------------------------------------------------------------------------------
// Devmem RX socket
// ---------------------------------------------------------------------------------------------

/// What one `recvmsg` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvOutcome {
    /// Return value of `recvmsg`: bytes of stream consumed (linear bytes copied to the iov
    /// plus dmabuf frag bytes, which are *not* copied). 0 means the peer closed.
    pub bytes: usize,
    /// `msghdr.msg_flags` after the call (`MSG_CTRUNC`, ...).
    pub msg_flags: i32,
    /// `msghdr.msg_controllen` after the call: bytes of cmsgs written to the control buffer.
    pub control_len: usize,
}

/// One `recvmsg(fd, {one iov = data, control}, flags)` (no iov when `data` is empty, no control
/// buffer when `control` is): what it returned, or the errno.
pub(crate) fn recvmsg_raw(
    fd: BorrowedFd<'_>,
    data: &mut [u8],
    control: &mut [u8],
    flags: libc::c_int,
) -> Result<RecvOutcome, i32> {
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain integers and pointers; all-zero (NULL name, no iov, no control)
    // is a valid value, and it also zeroes any private padding fields.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if !data.is_empty() {
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
    }
    if !control.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
    }
    // SAFETY: `msg` points (optionally) at one iovec describing `data` and at `control` with
    // its exact length; both are exclusively borrowed for the call and the kernel writes at
    // most those lengths. The result is checked.
    let ret = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) };
    if ret < 0 {
        return Err(last_errno());
    }
    Ok(RecvOutcome {
        bytes: ret as usize,
        msg_flags: msg.msg_flags,
        control_len: msg.msg_controllen as usize,
    })
}

/// An accepted TCP connection, behind the receive loop's `RxSocket` seam:
/// `recvmsg(MSG_SOCK_DEVMEM)`, `SO_DEVMEM_DONTNEED` and `poll(POLLIN)`. Closing it (drop) releases
/// any tokens still held.
#[derive(Debug)]
pub struct TcpRxSocket {
    fd: OwnedFd,
}

impl TcpRxSocket {
    /// Wraps an accepted (or connected) stream socket.
    pub fn new(fd: OwnedFd) -> Self {
        TcpRxSocket { fd }
    }

    /// The socket.
    pub fn fd(&self) -> BorrowedFd<'_> {
        fd_borrow(&self.fd)
    }
}

impl TcpRxSocket {
    /// `recvmsg(fd, {one iov = data, control}, MSG_DONTWAIT | (devmem ? MSG_SOCK_DEVMEM : 0))`
    /// (no `MSG_WAITALL`): `Err(EAGAIN)` when nothing is queued. On a socket whose data is
    /// ordinary memory the kernel ignores `MSG_SOCK_DEVMEM` and copies normally with
    /// `control_len` 0 (measured on 6.18).
    pub(crate) fn recvmsg_nonblocking(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        let flags = libc::MSG_DONTWAIT | if devmem { uapi::MSG_SOCK_DEVMEM } else { 0 };
        recvmsg_raw(self.fd(), data, control, flags)
    }

    /// `setsockopt(SOL_SOCKET, SO_DEVMEM_DONTNEED, tokens, n * 8)`; the raw return is the number
    /// of frags freed (≥ 0), returned as is. An empty slice returns `Ok(0)` without a call (the
    /// kernel refuses optlen 0). More than [`uapi::MAX_DONTNEED_TOKENS`] entries get `EINVAL`
    /// from the kernel.
    pub(crate) fn devmem_dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        if tokens.is_empty() {
            return Ok(0);
        }
        // The tokens are 8-byte repr(C) dmabuf_token entries.
        setsockopt_raw(
            self.fd(),
            libc::SOL_SOCKET,
            uapi::SO_DEVMEM_DONTNEED,
            tokens,
        )
        .map(|n| n as usize)
    }

    /// `poll(POLLIN)` for up to `timeout`. `POLLHUP`/`POLLERR`/`POLLRDHUP` count as readable
    /// (the next `recvmsg` reports EOF or the error). `Err(EINTR)` is returned so the caller
    /// can look at its stop flag; `POLLNVAL` is `Err(EBADF)`.
    pub(crate) fn poll_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        let revents = poll_one(
            self.fd.as_raw_fd(),
            libc::POLLIN | libc::POLLRDHUP,
            Some(timeout),
        )?;
        if revents & libc::POLLNVAL != 0 {
            return Err(libc::EBADF);
        }
        Ok(revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP) != 0)
    }
}

/// Asks the kernel whether it knows `SO_DEVMEM_AUTORELEASE`, on a throwaway TCP socket, so a
/// kernel without it is a skip before anything is changed. Sets the option to 1 (the
/// pre-proposal behaviour) on that socket only.
///
/// # Errors
/// `Error::Sys` (`ENOPROTOOPT` from a kernel without the option).
pub(crate) fn probe_devmem_autorelease() -> Result<()> {
    let fd = tcp6_socket(false, PortSharing::Exclusive)?;
    set_devmem_autorelease(fd_borrow(&fd), true)
}

/// Sets the proposed `SO_DEVMEM_AUTORELEASE` (`SOL_SOCKET` option 85, int 0/1; devmem
/// autorelease series v6, not merged upstream). Must be set before any token is outstanding.
///
/// Errors: `Error::Sys` (a kernel without the option answers `ENOPROTOOPT`).
pub fn set_devmem_autorelease(fd: BorrowedFd<'_>, on: bool) -> Result<()> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        uapi::SO_DEVMEM_AUTORELEASE,
        libc::c_int::from(on),
        "SO_DEVMEM_AUTORELEASE",
    )
}

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

/// One `send(fd, data, MSG_NOSIGNAL|MSG_DONTWAIT)`: the bytes taken. `Err` carries the
/// positive errno (`EAGAIN` for a full send buffer; `EPIPE`/`ECONNRESET` for a closed peer,
/// never `SIGPIPE`). Waiting and retries are `conn::send_all_timeout`'s.
pub fn send_once(fd: BorrowedFd<'_>, data: &[u8]) -> Result<usize, i32> {
    // SAFETY: the pointer and length describe `data`, alive across the call; the kernel
    // only reads it.
    let ret = unsafe {
        libc::send(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if ret < 0 {
        return Err(last_errno());
    }
    Ok(ret as usize)
}

/// Sets `SO_LINGER {on, 0 s}` so that closing the socket sends a RST instead of a FIN: a
/// sender that stops early makes its peer see `ECONNRESET`, not a clean (truncated) end.
pub(crate) fn abort_on_close(fd: BorrowedFd<'_>) -> Result<()> {
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_LINGER, &lg)
        .map(drop)
        .map_err(|e| Error::sys("setsockopt(SO_LINGER)", e))
}

/// `setsockopt(IPPROTO_TCP, TCP_NODELAY, on)`.
pub fn set_nodelay(fd: BorrowedFd<'_>, on: bool) -> Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NODELAY,
        libc::c_int::from(on),
        "TCP_NODELAY",
    )
}

/// `shutdown(SHUT_WR)`: sends FIN; the peer's next read returns 0 (EOF).
pub fn shutdown_write(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: shutdown takes no pointers.
    let ret = unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
    cvt(ret, "shutdown(SHUT_WR)").map(drop)
}

/// An all-zero `sockaddr_storage` for the kernel to fill.
fn zeroed_storage() -> libc::sockaddr_storage {
    let s = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    unsafe { s.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_in6_layout_round_trips() {
        let addr: SocketAddrV6 = "[::ffff:127.0.0.1]:5201".parse().unwrap();
        let sa = sockaddr_in6(&addr);
        assert_eq!(sa.sin6_family, libc::AF_INET6 as libc::sa_family_t);
        // Port in network byte order: 5201 = 0x1451 → bytes 0x14, 0x51.
        assert_eq!(sa.sin6_port.to_ne_bytes(), [0x14, 0x51]);
        assert_eq!(
            sa.sin6_addr.s6_addr,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]
        );
        let mut ss = zeroed_storage();
        // SAFETY: sockaddr_storage is larger than sockaddr_in6; write_unaligned needs no alignment.
        unsafe {
            std::ptr::write_unaligned(
                (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                sa,
            )
        };
        let back = decode_sockaddr(&ss, size_of::<libc::sockaddr_in6>() as _).unwrap();
        assert_eq!(back, SocketAddr::V6(addr));
        // Truncated length is a decode error, not a read past the data.
        assert!(matches!(decode_sockaddr(&ss, 8), Err(Error::Decode { .. })));
    }
}
