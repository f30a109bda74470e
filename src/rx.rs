//! Devmem receive loop: `recvmsg(MSG_SOCK_DEVMEM)`, `SCM_DEVMEM_*` cmsg parsing, in-place
//! validation of dmabuf frags, batched token release with `SO_DEVMEM_DONTNEED`, statistics.
//! The same loop serves the plain-TCP receive mode (no cmsgs; everything is in the iov).
//!
//! The loop talks to the kernel only through the [`RxSocket`] seam and reads frag memory only
//! through [`crate::udmabuf::FragMemory`], so tests drive it with a scripted socket over a
//! `Vec`-backed region.

use std::time::Duration;

use crate::sys::uapi::dmabuf_token;

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

/// The socket operations the receive loop needs. The real implementation is
/// [`crate::sys::socket::TcpRxSocket`]; tests use a scripted double that produces exactly the
/// bytes the kernel produces.
pub trait RxSocket {
    /// One `recvmsg(2)` into `data` (a single iov) and `control`, with `MSG_SOCK_DEVMEM` when
    /// `devmem` is true. `Err` carries the positive errno of a `-1` return.
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32>;

    /// `setsockopt(SOL_SOCKET, SO_DEVMEM_DONTNEED, tokens)`: returns the number of frags the
    /// kernel freed (may be short). At most [`crate::sys::uapi::MAX_DONTNEED_TOKENS`] entries.
    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32>;

    /// `poll(POLLIN)` for up to `timeout`; `Ok(true)` when readable (or closed/errored).
    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32>;
}
