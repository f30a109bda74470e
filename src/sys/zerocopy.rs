//! Zerocopy sends for devmem TX: `SO_ZEROCOPY`, `sendmsg(MSG_ZEROCOPY)` with an
//! `SCM_DEVMEM_DMABUF` cmsg, error-queue reads of the completions, `poll(POLLERR)`.
//!
//! [`ZerocopySocket`] is the real devmem TX socket (behind `tx::devmem::TxSocket`). Its normal send
//! path takes iovs as **dma-buf offsets** ([`DmabufIov`]), as the kernel wants them when the cmsg
//! names a TX binding. `ZerocopySocket::send_user` (tests only) takes real buffers instead: for
//! plain `MSG_ZEROCOPY` sends, and for exercising the cmsg path with dmabuf id 0, which the kernel
//! treats as "no dma-buf" (measured on 6.18, `docs/kernel-interface.md#devmem-tx`). Numbers:
//! `include/uapi/asm-generic/socket.h`, `include/linux/socket.h`, `include/uapi/linux/errqueue.h`
//! (`docs/kernel-interface.md#socket-constants`, `#devmem-tx`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::error::Result;
use crate::sys::last_errno;
use crate::sys::socket::{getsockopt_raw, poll_one, recvmsg_raw, setsockopt_int};
use crate::sys::uapi::{cmsg_len, cmsg_space, encode_cmsghdr, SCM_DEVMEM_DMABUF};

/// Most iovs one `sendmsg` takes (`UIO_MAXIOV`, include/uapi/linux/uio.h; ncdevmem.c's
/// `MAX_IOV`). A piece that needs more is sent with several calls.
pub const MAX_IOV: usize = 1024;

/// Bytes of the control buffer that carries the binding id: `CMSG_SPACE(sizeof(u32))` = 24.
pub const DMABUF_ID_CMSG_SPACE: usize = cmsg_space(4);

/// `cmsg_len` of that cmsg: `CMSG_LEN(sizeof(u32))` = 20. The kernel refuses any other length
/// with `EINVAL`.
pub const DMABUF_ID_CMSG_LEN: usize = cmsg_len(4);

const _: () = assert!(DMABUF_ID_CMSG_SPACE == 24 && DMABUF_ID_CMSG_LEN == 20);

/// One iov of a devmem send: `len` bytes at byte `offset` of the dma-buf. Passed to the kernel
/// as `struct iovec { iov_base = offset, iov_len = len }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmabufIov {
    /// Byte offset into the dma-buf.
    pub offset: u64,
    /// Length in bytes.
    pub len: usize,
}

/// What one `recvmsg(MSG_ERRQUEUE)` returned (besides the control bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrqueueRead {
    /// `msghdr.msg_flags` after the call (`MSG_ERRQUEUE`, `MSG_CTRUNC`, ...).
    pub msg_flags: i32,
    /// `msghdr.msg_controllen` after the call: bytes of cmsgs written.
    pub control_len: usize,
}

/// The bytes of the `SOL_SOCKET`/`SCM_DEVMEM_DMABUF` cmsg that names the TX binding (x86_64):
/// `cmsg_len` u64 = 20 (`CMSG_LEN(4)`), `cmsg_level` i32 = 1 (`SOL_SOCKET`), `cmsg_type` i32 =
/// 79, the u32 id, then 4 bytes of zero padding up to `CMSG_SPACE(4)` = 24.
pub(crate) fn encode_dmabuf_id_cmsg(dmabuf_id: u32) -> [u8; DMABUF_ID_CMSG_SPACE] {
    let mut b = [0u8; DMABUF_ID_CMSG_SPACE];
    b[..16].copy_from_slice(&encode_cmsghdr(4, libc::SOL_SOCKET, SCM_DEVMEM_DMABUF));
    b[16..20].copy_from_slice(&dmabuf_id.to_ne_bytes());
    b
}

/// `setsockopt(SOL_SOCKET, SO_ZEROCOPY, on)`: allows `MSG_ZEROCOPY` sends (and is required
/// for any `SCM_DEVMEM_DMABUF` cmsg: without it the kernel answers `EINVAL`). Accepted on a
/// connected TCP socket (measured on 6.18).
///
/// Errors: `Error::Sys` naming the option.
pub fn set_zerocopy(fd: BorrowedFd<'_>, on: bool) -> Result<()> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_ZEROCOPY,
        libc::c_int::from(on),
        "SO_ZEROCOPY",
    )
}

/// A connected TCP socket for zerocopy sends; the real one behind `tx::devmem::TxSocket`.
#[derive(Debug)]
pub struct ZerocopySocket {
    fd: OwnedFd,
}

impl ZerocopySocket {
    /// Wraps a connected stream socket (set `SO_ZEROCOPY` with [`set_zerocopy`]).
    pub fn new(fd: OwnedFd) -> Self {
        ZerocopySocket { fd }
    }

    /// The socket.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `sendmsg(bufs, MSG_ZEROCOPY | MSG_NOSIGNAL)` from real buffers, with an
    /// `SCM_DEVMEM_DMABUF` cmsg carrying `dmabuf_id` when it is `Some`. With `Some(0)` the
    /// kernel treats the send as an ordinary zerocopy send; with a non-zero id the kernel
    /// would read the buffer *addresses* as dma-buf offsets (use [`TxSocket::send_dmabuf`]).
    /// Returns the bytes accepted.
    ///
    /// With `SO_ZEROCOPY` set the kernel may read the buffers until the send's completion
    /// arrives: the caller must leave them unchanged until then, or the peer may receive the
    /// new bytes. At most [`MAX_IOV`] buffers (more gives `EMSGSIZE` from the kernel).
    ///
    /// Used by the real-kernel send tests only (test builds and the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn send_user(&mut self, bufs: &[&[u8]], dmabuf_id: Option<u32>) -> Result<usize, i32> {
        let iovs: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        sendmsg_zerocopy(self.fd.as_raw_fd(), &iovs, dmabuf_id)
    }
}

/// `sendmsg(fd, {iovs, control = the SCM_DEVMEM_DMABUF cmsg if any}, MSG_ZEROCOPY |
/// MSG_NOSIGNAL)`. Returns the bytes accepted or the errno.
fn sendmsg_zerocopy(fd: i32, iovs: &[libc::iovec], dmabuf_id: Option<u32>) -> Result<usize, i32> {
    /// A control buffer with cmsghdr alignment (8 bytes).
    #[repr(C, align(8))]
    struct Control([u8; DMABUF_ID_CMSG_SPACE]);
    let mut control = Control(dmabuf_id.map_or([0; DMABUF_ID_CMSG_SPACE], encode_dmabuf_id_cmsg));
    // SAFETY: msghdr is plain integers and pointers; all-zero (no name, no iov, no control)
    // is a valid value and also zeroes any private padding.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if dmabuf_id.is_some() {
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = DMABUF_ID_CMSG_SPACE as _;
    }
    msg.msg_iov = iovs.as_ptr().cast_mut();
    msg.msg_iovlen = iovs.len() as _;
    // SAFETY: `msg` points at `iovs` (iovs.len() entries) and, when set, at `control` with its
    // exact length; both outlive the call and the kernel only reads them (sendmsg never writes
    // through msg_iov or msg_control). The iov_base values are either real buffers the caller
    // borrowed for the call (with MSG_ZEROCOPY the kernel pins their pages and may still
    // *read* them after the call returns; it never writes them, so no memory of this process
    // changes), or dma-buf offsets that the kernel resolves against the binding named in the
    // cmsg and never dereferences as user memory (send_dmabuf_iovs refuses id 0, the case
    // where it would). The result is checked.
    let ret = unsafe { libc::sendmsg(fd, &msg, libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL) };
    usize::try_from(ret).map_err(|_| last_errno())
}

impl ZerocopySocket {
    /// `sendmsg` with each iov's `iov_base` set to its dma-buf offset. `dmabuf_id` 0 is
    /// refused with `EINVAL` without a call: the kernel would then read the offsets as
    /// addresses of this process. More than [`MAX_IOV`] iovs: `EMSGSIZE` without a call (the
    /// kernel's answer too). An offset beyond the address space: `EINVAL`.
    pub(crate) fn send_dmabuf_iovs(
        &mut self,
        iovs: &[DmabufIov],
        dmabuf_id: u32,
    ) -> Result<usize, i32> {
        if dmabuf_id == 0 {
            return Err(libc::EINVAL);
        }
        if iovs.len() > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        let raw = iovs.iter().map(|iov| {
            Ok(libc::iovec {
                // An integer, not a pointer into the mapping: the kernel wants the offset.
                iov_base: usize::try_from(iov.offset).map_err(|_| libc::EINVAL)? as *mut _,
                iov_len: iov.len,
            })
        });
        let raw = raw.collect::<Result<Vec<_>, i32>>()?;
        sendmsg_zerocopy(self.fd.as_raw_fd(), &raw, Some(dmabuf_id))
    }

    /// `recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)` with no data iov and `control` as the control
    /// buffer. `Err(EAGAIN)` when the error queue is empty.
    pub(crate) fn read_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32> {
        let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
        let o = recvmsg_raw(self.fd(), &mut [], control, flags)?;
        Ok(ErrqueueRead {
            msg_flags: o.msg_flags,
            control_len: o.control_len,
        })
    }

    /// `poll(POLLERR)` (reported whether asked or not) for up to `timeout`. `POLLNVAL` is
    /// `Err(EBADF)`; `Err(EINTR)` is passed on.
    pub(crate) fn poll_errqueue(&mut self, timeout: Duration) -> Result<bool, i32> {
        let revents = poll_one(self.fd.as_raw_fd(), libc::POLLERR, Some(timeout))?;
        if revents & libc::POLLNVAL != 0 {
            return Err(libc::EBADF);
        }
        Ok(revents & libc::POLLERR != 0)
    }

    /// `getsockopt(SOL_SOCKET, SO_ERROR)`.
    pub(crate) fn so_error(&mut self) -> Result<i32, i32> {
        getsockopt_raw(self.fd(), libc::SOL_SOCKET, libc::SO_ERROR)
    }
}
