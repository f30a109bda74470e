//! Devmem receive loop: `recvmsg(MSG_SOCK_DEVMEM)`, `SCM_DEVMEM_*` cmsg parsing, in-place
//! validation of dmabuf frags, batched token release with `SO_DEVMEM_DONTNEED`, statistics.
//! The same loop serves the plain-TCP receive mode (no cmsgs; everything is in the iov).
//!
//! The loop talks to the kernel only through the [`RxSocket`] seam and reads frag memory only
//! through [`crate::udmabuf::FragMemory`], so tests drive it with a scripted socket over a
//! `Vec`-backed region (`testing`, with the `testing` feature).
//!
//! What one `recvmsg(MSG_SOCK_DEVMEM)` returns (net/ipv4/tcp.c `tcp_recvmsg_dmabuf`, see
//! `docs.kernel.org/networking/devmem.html`): for each devmem skb, its linear part is copied to
//! the iov and described by an `SCM_DEVMEM_LINEAR` cmsg; each paged frag is described by an
//! `SCM_DEVMEM_DMABUF` cmsg (`struct dmabuf_cmsg`: offset and size in the dma-buf, a token,
//! the binding's dmabuf id) and is *not* copied. The cmsg order is the stream order, the linear
//! bytes sit back to back at the start of the iov, and the return value counts both kinds.
//! Every dmabuf frag pins a niov until its token goes back with `SO_DEVMEM_DONTNEED`.
//!
//! Ported from ncdevmem.c `do_server` (torvalds/linux, tools/testing/selftests/drivers/net/hw),
//! with these differences: linear bytes are validated too (so the pattern position stays
//! right), frags are bounds-checked against the dma-buf and niov size before any read, tokens
//! are released in coalesced batches and the returned count is checked, `EFAULT` and other
//! errors end the run instead of spinning.

mod sink;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub(crate) use sink::PayloadSink;

use std::io::Write;
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::stats::{RxMode, RxStats};
use crate::sys::mmap::MappedRegion;
use crate::sys::uapi::{
    cmsg_len, cmsg_space, dmabuf_cmsg, dmabuf_token, walk_cmsgs, CmsgWalk, DMABUF_CMSG_LEN,
    MAX_DONTNEED_FRAGS, MAX_DONTNEED_TOKENS, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR,
};
use crate::udmabuf::FragMemory;
use crate::validate::StreamSpec;

pub use crate::sys::socket::RecvOutcome;

/// The socket operations the receive loop needs. The real implementation is
/// [`crate::sys::socket::TcpRxSocket`]; tests use a scripted double that produces exactly the
/// bytes the kernel produces (`testing::ScriptedSocket`, with the `testing` feature).
pub trait RxSocket {
    /// One non-blocking `recvmsg(2)` (`MSG_DONTWAIT`) into `data` (a single iov) and `control`,
    /// with `MSG_SOCK_DEVMEM` when `devmem` is true. `Err` carries the positive errno of a `-1`
    /// return; `EAGAIN` when nothing is queued (the loop then waits with
    /// [`RxSocket::wait_readable`]).
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

/// The real socket: each call is one system call of `crate::sys::socket`.
impl RxSocket for crate::sys::socket::TcpRxSocket {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        self.recvmsg_nonblocking(data, control, devmem)
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.devmem_dontneed(tokens)
    }

    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.poll_readable(timeout)
    }
}

// ---------------------------------------------------------------------------------------------
// cmsg layout (x86_64 / LP64; include/uapi/linux/socket.h, include/linux/socket.h)
// ---------------------------------------------------------------------------------------------

/// Control-buffer bytes per devmem cmsg: `CMSG_SPACE(sizeof(struct dmabuf_cmsg))` = 40.
pub const DEVMEM_CMSG_SPACE: usize = cmsg_space(DMABUF_CMSG_LEN);

/// Default iov size in bytes (ncdevmem.c's 819200-byte receive buffer).
pub const DEFAULT_DATA_BUF_LEN: usize = 819_200;

/// Default control buffer in bytes: room for 2000 devmem cmsgs (ncdevmem.c's 80000 bytes).
pub const DEFAULT_CONTROL_BUF_LEN: usize = 2000 * DEVMEM_CMSG_SPACE;

const _: () = assert!(DEVMEM_CMSG_SPACE == 40);
const _: () = assert!(cmsg_len(DMABUF_CMSG_LEN) == 40);
const _: () = assert!(DEFAULT_CONTROL_BUF_LEN == 80_000);

/// One control message from a `recvmsg` control buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmsg {
    /// `SOL_SOCKET`/`SCM_DEVMEM_LINEAR`: `frag_size` bytes (from the skb's linear part) were
    /// copied to the iov, next in stream order.
    Linear {
        /// Bytes copied to the iov.
        frag_size: u32,
    },
    /// `SOL_SOCKET`/`SCM_DEVMEM_DMABUF`: a frag left in the dma-buf, with its token.
    Dmabuf(dmabuf_cmsg),
    /// Any other cmsg (e.g. timestamps); `len` is its `cmsg_len` in bytes.
    Other {
        /// `cmsg_level`.
        level: i32,
        /// `cmsg_type`.
        ty: i32,
        /// `cmsg_len` (header + payload bytes).
        len: usize,
    },
}

/// Walks the cmsgs in `control` (the first `msg_controllen` bytes of the control buffer) with
/// [`walk_cmsgs`], decoding the devmem ones.
///
/// Yields `Err(Error::Decode)` once and then stops for: fewer than 16 bytes left for a header,
/// `cmsg_len < 16`, `cmsg_len` larger than the bytes left (a truncated cmsg), or a devmem cmsg
/// whose payload is shorter than `struct dmabuf_cmsg` (24 bytes). A devmem payload longer than
/// 24 bytes is accepted and its first 24 bytes are decoded.
///
/// ```
/// use ncdevmem::rx::{cmsgs, Cmsg};
/// use ncdevmem::sys::uapi::{encode_cmsghdr, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR};
/// const SOL_SOCKET: i32 = 1;
/// // struct dmabuf_cmsg, one field per line: frag_offset u64, frag_size u32,
/// // frag_token u32, dmabuf_id u32, flags u32.
/// let frag = |offset: u64, size: u32, token: u32| {
///     let mut b = encode_cmsghdr(24, SOL_SOCKET, SCM_DEVMEM_DMABUF).to_vec();
///     b.extend_from_slice(&offset.to_ne_bytes());
///     b.extend_from_slice(&size.to_ne_bytes());
///     b.extend_from_slice(&token.to_ne_bytes());
///     b.extend_from_slice(&3u32.to_ne_bytes()); // dmabuf_id: the binding
///     b.extend_from_slice(&0u32.to_ne_bytes());
///     b
/// };
/// let mut control = frag(8192, 4096, 17);
/// // 100 bytes from the skb's linear part: only frag_size is meaningful.
/// let mut linear = encode_cmsghdr(24, SOL_SOCKET, SCM_DEVMEM_LINEAR).to_vec();
/// linear.extend_from_slice(&[0; 8]);
/// linear.extend_from_slice(&100u32.to_ne_bytes());
/// linear.extend_from_slice(&[0; 12]);
/// control.extend_from_slice(&linear);
///
/// let got = cmsgs(&control).collect::<Result<Vec<_>, _>>()?;
/// let Cmsg::Dmabuf(d) = got[0] else { panic!("{got:?}") };
/// assert_eq!((d.frag_offset, d.frag_size, d.frag_token, d.dmabuf_id), (8192, 4096, 17, 3));
/// assert_eq!(got[1], Cmsg::Linear { frag_size: 100 });
///
/// // A devmem cmsg too short for struct dmabuf_cmsg is an error.
/// let mut short = encode_cmsghdr(8, SOL_SOCKET, SCM_DEVMEM_DMABUF).to_vec();
/// short.extend_from_slice(&[0; 8]);
/// assert!(cmsgs(&short).next().unwrap().is_err());
/// # Ok::<(), ncdevmem::Error>(())
/// ```
pub fn cmsgs(control: &[u8]) -> CmsgIter<'_> {
    CmsgIter {
        walk: walk_cmsgs(control),
        done: false,
    }
}

/// Iterator returned by [`cmsgs`].
#[derive(Debug, Clone)]
pub struct CmsgIter<'a> {
    walk: CmsgWalk<'a>,
    done: bool,
}

impl Iterator for CmsgIter<'_> {
    type Item = Result<Cmsg>;

    fn next(&mut self) -> Option<Result<Cmsg>> {
        if self.done {
            return None;
        }
        let c = match self.walk.next()? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let (level, ty, payload) = (c.level, c.ty, c.payload);
        if level == libc::SOL_SOCKET && (ty == SCM_DEVMEM_LINEAR || ty == SCM_DEVMEM_DMABUF) {
            let name = if ty == SCM_DEVMEM_LINEAR {
                "SCM_DEVMEM_LINEAR cmsg"
            } else {
                "SCM_DEVMEM_DMABUF cmsg"
            };
            let Ok(d) = dmabuf_cmsg::from_bytes(payload) else {
                self.done = true;
                return Some(Err(Error::decode(
                    name,
                    format!(
                        "payload of {} bytes at control offset {}; struct dmabuf_cmsg needs {DMABUF_CMSG_LEN}",
                        payload.len(),
                        c.offset
                    ),
                )));
            };
            return Some(Ok(if ty == SCM_DEVMEM_LINEAR {
                Cmsg::Linear {
                    frag_size: d.frag_size,
                }
            } else {
                Cmsg::Dmabuf(d)
            }));
        }
        Some(Ok(Cmsg::Other {
            level,
            ty,
            len: cmsg_len(payload.len()),
        }))
    }
}

impl std::iter::FusedIterator for CmsgIter<'_> {}

// ---------------------------------------------------------------------------------------------
// Token release
// ---------------------------------------------------------------------------------------------

/// Queues frag tokens and returns them with `SO_DEVMEM_DONTNEED` in as few calls as the kernel
/// allows.
///
/// Consecutive token ids are coalesced into one `dmabuf_token {token_start, token_count}`
/// range. A call carries at most [`MAX_DONTNEED_TOKENS`] (128) ranges and at most
/// [`MAX_DONTNEED_FRAGS`] (1024) tokens in total, because the kernel frees no more than that
/// per call (net/core/sock.c `sock_devmem_dontneed`); longer ranges are split across calls.
/// Every call's return must equal the tokens asked for: a short count means leaked tokens.
///
/// ```
/// use ncdevmem::rx::TokenBatcher;
/// use ncdevmem::sys::uapi::dmabuf_token;
/// // The SO_DEVMEM_DONTNEED calls a flush would make, each as its (token_start, token_count)
/// // ranges.
/// let plan = |b: &TokenBatcher| -> Vec<Vec<(u32, u32)>> {
///     let call = |c: &Vec<dmabuf_token>| {
///         c.iter().map(|t| (t.token_start, t.token_count)).collect()
///     };
///     b.plan().iter().map(call).collect()
/// };
/// let mut b = TokenBatcher::new();
/// for token in [5, 6, 7, 9, 10, 2] {
///     assert!(!b.push(token)); // far from 128 ranges: no flush due
/// }
/// assert_eq!(b.pending_tokens(), 6);
/// // Consecutive tokens coalesce into {token_start, token_count} ranges, in push order.
/// assert_eq!(plan(&b), [vec![(5, 3), (9, 2), (2, 1)]]);
///
/// // At most 2 ranges and 4 tokens per call: the range of 5 tokens is split.
/// let mut b = TokenBatcher::with_limits(2, 4);
/// for token in [0, 1, 2, 3, 4, 20] {
///     b.push(token);
/// }
/// assert_eq!(plan(&b), [vec![(0, 4)], vec![(4, 1), (20, 1)]]);
/// // The second range makes the flush due.
/// let mut b = TokenBatcher::with_limits(2, 4);
/// assert!(!b.push(1));
/// assert!(b.push(3));
/// ```
#[derive(Debug, Clone)]
pub struct TokenBatcher {
    ranges: Vec<dmabuf_token>,
    pending: u64,
    max_entries: usize,
    max_tokens_per_call: u32,
    calls: u64,
    released: u64,
}

impl Default for TokenBatcher {
    fn default() -> Self {
        TokenBatcher::new()
    }
}

impl TokenBatcher {
    /// A batcher with the kernel's limits: 128 ranges and 1024 tokens per call.
    pub fn new() -> TokenBatcher {
        TokenBatcher::with_limits(MAX_DONTNEED_TOKENS, MAX_DONTNEED_FRAGS as u32)
    }

    /// A batcher with smaller limits (each at least 1), e.g. to measure the cost of release
    /// strategies.
    pub fn with_limits(max_entries: usize, max_tokens_per_call: u32) -> TokenBatcher {
        TokenBatcher {
            ranges: Vec::new(),
            pending: 0,
            max_entries: max_entries.clamp(1, MAX_DONTNEED_TOKENS),
            max_tokens_per_call: max_tokens_per_call.clamp(1, MAX_DONTNEED_FRAGS as u32),
            calls: 0,
            released: 0,
        }
    }

    /// Queues one token. Returns true when [`MAX_DONTNEED_TOKENS`] ranges (or the configured
    /// limit) are queued, i.e. a [`TokenBatcher::flush`] is due.
    pub fn push(&mut self, token: u32) -> bool {
        self.pending += 1;
        if let Some(last) = self.ranges.last_mut() {
            if last.token_start.checked_add(last.token_count) == Some(token)
                && last.token_count < u32::MAX
            {
                last.token_count += 1;
                return self.ranges.len() >= self.max_entries;
            }
        }
        self.ranges.push(dmabuf_token {
            token_start: token,
            token_count: 1,
        });
        self.ranges.len() >= self.max_entries
    }

    /// Tokens queued and not yet released.
    pub fn pending_tokens(&self) -> u64 {
        self.pending
    }

    /// The queued ranges (coalesced), in push order; for tests (test builds and the `testing`
    /// feature only).
    #[cfg(any(test, feature = "testing"))]
    #[cfg(test)]
    pub(crate) fn pending_ranges(&self) -> &[dmabuf_token] {
        &self.ranges
    }

    /// The `SO_DEVMEM_DONTNEED` calls a flush would make now: each at most `max_entries`
    /// ranges and `max_tokens_per_call` tokens, ranges split where needed, order kept.
    pub fn plan(&self) -> Vec<Vec<dmabuf_token>> {
        let mut calls = Vec::new();
        let mut call: Vec<dmabuf_token> = Vec::new();
        let mut in_call: u32 = 0;
        for r in &self.ranges {
            let mut start = r.token_start;
            let mut left = r.token_count;
            while left > 0 {
                if call.len() == self.max_entries || in_call == self.max_tokens_per_call {
                    calls.push(std::mem::take(&mut call));
                    in_call = 0;
                }
                let n = left.min(self.max_tokens_per_call - in_call);
                call.push(dmabuf_token {
                    token_start: start,
                    token_count: n,
                });
                in_call += n;
                start = start.wrapping_add(n);
                left -= n;
            }
        }
        if !call.is_empty() {
            calls.push(call);
        }
        calls
    }

    /// Releases every queued token through `sock`, then empties the queue (also on error: a
    /// token is never offered twice). All planned calls are made even if one fails; with
    /// nothing queued there are none.
    ///
    /// # Errors
    /// The first of: [`Error::Sys`] for a failed `setsockopt(SO_DEVMEM_DONTNEED)`;
    /// [`Error::Failure`] ("leaked tokens") when the kernel freed fewer tokens than asked (or
    /// more), naming the counts and the call's first range.
    pub fn flush<S: RxSocket + ?Sized>(&mut self, sock: &mut S) -> Result<()> {
        let plan = self.plan();
        self.ranges.clear();
        self.pending = 0;
        let mut first_err = None;
        for call in plan {
            let want: u64 = call.iter().map(|r| r.token_count as u64).sum();
            self.calls += 1;
            let err = match sock.dontneed(&call) {
                Ok(n) => {
                    self.released += n as u64;
                    if n as u64 == want {
                        continue;
                    }
                    let (s, c) = (call[0].token_start, call[0].token_count);
                    Error::Failure(if (n as u64) < want {
                        format!(
                            "SO_DEVMEM_DONTNEED freed {n} of {want} tokens ({} ranges, first {s}+{c}): {} tokens leaked",
                            call.len(),
                            want - n as u64
                        )
                    } else {
                        format!(
                            "SO_DEVMEM_DONTNEED reported {n} tokens freed but {want} were asked for ({} ranges, first {s}+{c})",
                            call.len()
                        )
                    })
                }
                Err(e) => Error::sys(
                    format!(
                        "setsockopt(SO_DEVMEM_DONTNEED, {} ranges, {want} tokens)",
                        call.len()
                    ),
                    e,
                ),
            };
            first_err.get_or_insert(err);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// `SO_DEVMEM_DONTNEED` calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Tokens the kernel reported freed so far.
    pub fn released(&self) -> u64 {
        self.released
    }
}

// ---------------------------------------------------------------------------------------------
// The receive loop
// ---------------------------------------------------------------------------------------------

/// The devmem binding the loop receives into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevmemParams {
    /// Binding id from the bind-rx reply (`NETDEV_A_DMABUF_ID`); every `SCM_DEVMEM_DMABUF`
    /// frag must carry it, otherwise the flow landed on a queue of another binding.
    pub dmabuf_id: u32,
    /// niov size in bytes (rx-page-size; the system page size by default). No frag may cross
    /// a niov boundary.
    pub niov_size: u32,
}

/// When the devmem server drops its binding (`-U`; the autorelease series v10's ncdevmem
/// `unbind_mode`, whose numbers are the `-U` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnbindMode {
    /// `-U 0`: at the end of the run, after the connection closed.
    #[default]
    Normal,
    /// `-U 1`: once data is queued on the accepted socket (poll up to 5 s, as C), before the
    /// first `recvmsg`. A kernel with per-binding users (series v10, autorelease off) then
    /// answers `ENODEV`, which ends the run cleanly ("binding gone"); other kernels go on
    /// delivering what was queued.
    BeforeRecv,
    /// `-U 2`: after the first `recvmsg` that delivered data and the release of its tokens;
    /// the socket must go on receiving (an `ENODEV` then is a failure).
    AfterRecv,
}

/// Configuration of [`receive`].
#[derive(Debug, Clone, PartialEq)]
pub struct RxConfig {
    /// `Some` for devmem (`recvmsg(MSG_SOCK_DEVMEM)`), `None` for plain TCP.
    pub devmem: Option<DevmemParams>,
    /// `-L`: any `SCM_DEVMEM_LINEAR` frag fails the run (header split is not working).
    pub fail_on_linear: bool,
    /// `-v N` or `--seed SEED`: validate the stream against that test stream
    /// ([`crate::validate`]) instead of writing it to the output.
    pub validate: Option<StreamSpec>,
    /// Fail with [`Error::Timeout`] when no data arrives for this long (also before the first
    /// byte).
    pub idle_timeout: Option<Duration>,
    /// Print a progress line to the log at this interval.
    pub progress_interval: Option<Duration>,
    /// `-V`: one log line per frag.
    pub verbose: bool,
    /// iov size in bytes; bounds the bytes (linear + dmabuf) one `recvmsg` returns.
    pub data_buf_len: usize,
    /// Control buffer in bytes; each devmem frag takes [`DEVMEM_CMSG_SPACE`] (40) bytes.
    pub control_buf_len: usize,
    /// Longest single wait for data before the stop flag, the idle timeout and the progress
    /// interval are looked at again.
    pub poll_tick: Duration,
    /// At the end of a `recvmsg` batch, release queued tokens once at least this many are
    /// queued (1 = after every batch). Tokens are also released whenever 128 ranges are
    /// queued, when the socket goes idle, and before returning.
    pub token_high_water: u64,
    /// `-U`: what an `ENODEV` from `recvmsg(MSG_SOCK_DEVMEM)` means ("binding gone"): the
    /// clean end of a [`UnbindMode::BeforeRecv`] run, a failure otherwise. The unbinding
    /// itself is the caller's ([`AfterFirstData`] for [`UnbindMode::AfterRecv`]).
    pub unbind: UnbindMode,
    /// Log mismatches and diagnoses as they are found (the default); `false` keeps them in
    /// [`RxStats::validation`] only (several flows log them at the end, under each flow's
    /// final number).
    pub live_diagnostics: bool,
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig::plain()
    }
}

impl RxConfig {
    /// Plain-TCP receive with the defaults (819200-byte iov, 200 ms poll tick).
    pub fn plain() -> RxConfig {
        RxConfig {
            devmem: None,
            fail_on_linear: false,
            validate: None,
            idle_timeout: None,
            progress_interval: None,
            verbose: false,
            data_buf_len: DEFAULT_DATA_BUF_LEN,
            control_buf_len: DEFAULT_CONTROL_BUF_LEN,
            poll_tick: Duration::from_millis(200),
            token_high_water: 1,
            unbind: UnbindMode::Normal,
            live_diagnostics: true,
        }
    }

    /// Devmem receive into binding `dmabuf_id` with niovs of `niov_size` bytes: an 80000-byte
    /// control buffer (2000 frags per `recvmsg`), an iov of [`devmem_iov_len`] bytes, other
    /// fields at their defaults (tokens released after every batch until
    /// [`RxConfig::holding_tokens_of`] says how many the binding can spare).
    pub fn devmem(dmabuf_id: u32, niov_size: u32) -> RxConfig {
        RxConfig {
            devmem: Some(DevmemParams {
                dmabuf_id,
                niov_size,
            }),
            data_buf_len: devmem_iov_len(niov_size, DEFAULT_CONTROL_BUF_LEN),
            ..RxConfig::plain()
        }
    }

    /// Lets the loop hold up to [`token_high_water`]`(buffers)` tokens across `recvmsg`
    /// batches for a binding of `buffers` niovs (fewer `SO_DEVMEM_DONTNEED` calls).
    pub fn holding_tokens_of(self, buffers: u64) -> RxConfig {
        RxConfig {
            token_high_water: token_high_water(buffers),
            ..self
        }
    }
}

/// An [`RxSocket`] that calls `hook` once, right before the first `recvmsg` that follows one
/// which delivered data: the `-U 2` unbind point. With tokens released after every batch
/// (`token_high_water` 1) that is where C ncdevmem unbinds: after the first batch's
/// `SO_DEVMEM_DONTNEED`, before the next `recvmsg`.
pub struct AfterFirstData<'a, S: RxSocket + ?Sized> {
    inner: &'a mut S,
    hook: Option<Box<dyn FnOnce() + 'a>>,
    seen_data: bool,
}

impl<'a, S: RxSocket + ?Sized> AfterFirstData<'a, S> {
    /// Wraps `inner`; `hook` runs at most once.
    pub fn new(inner: &'a mut S, hook: impl FnOnce() + 'a) -> Self {
        AfterFirstData {
            inner,
            hook: Some(Box::new(hook)),
            seen_data: false,
        }
    }

    /// Whether the hook has run; for tests (test builds and the `testing` feature only).
    #[cfg(any(test, feature = "testing"))]
    pub fn fired(&self) -> bool {
        self.hook.is_none()
    }
}

impl<S: RxSocket + ?Sized> RxSocket for AfterFirstData<'_, S> {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        if let Some(hook) = self.hook.take_if(|_| self.seen_data) {
            hook();
        }
        let r = self.inner.recvmsg(data, control, devmem);
        if matches!(r, Ok(o) if o.bytes > 0) {
            self.seen_data = true;
        }
        r
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.inner.dontneed(tokens)
    }

    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.inner.wait_readable(timeout)
    }
}

/// Largest iov a devmem receive uses (bytes): 16 MiB.
pub const MAX_DEVMEM_IOV_LEN: usize = 16 << 20;

/// iov bytes for a devmem receive with niovs of `niov_size` bytes and a `control_buf_len`-byte
/// control buffer: enough for one `recvmsg` to fill the control buffer with whole-niov frags,
/// at least [`DEFAULT_DATA_BUF_LEN`], at most [`MAX_DEVMEM_IOV_LEN`].
///
/// Dmabuf frags count against the iov length (`tcp_recvmsg_dmabuf` stops at it) but are never
/// written to it, so only linear bytes touch its pages: the allocation is zeroed memory the
/// kernel maps lazily, and a run with header split touches a few pages of it.
pub fn devmem_iov_len(niov_size: u32, control_buf_len: usize) -> usize {
    let frags = control_buf_len / DEVMEM_CMSG_SPACE;
    frags
        .saturating_mul(niov_size as usize)
        .clamp(DEFAULT_DATA_BUF_LEN, MAX_DEVMEM_IOV_LEN)
}

/// Tokens the receive loop may hold across `recvmsg` batches before releasing them, for a
/// binding of `buffers` niovs: an eighth of the binding (the receive buffer is sized to half of
/// it, [`crate::rcvbuf`], so the NIC keeps at least three eighths to fill), at least 1, at most
/// [`MAX_DONTNEED_FRAGS`] (1024, what one `SO_DEVMEM_DONTNEED` frees). Held tokens also go back
/// whenever `recvmsg` finds nothing queued.
pub fn token_high_water(buffers: u64) -> u64 {
    (buffers / 8).clamp(1, MAX_DONTNEED_FRAGS as u64)
}

/// Receives one connection until the peer closes, with `stop` checked between `recvmsg`
/// calls (a signal number, 0 = keep going). Diagnostics (mismatches, `-V` frag lines,
/// progress) go to stderr; payload goes to `out` when not validating.
///
/// `mem` is the dma-buf mapping the binding receives into (required in devmem mode).
///
/// # Errors
/// See [`receive_logged`].
pub fn receive<S: RxSocket, M: FragMemory, W: Write>(
    sock: &mut S,
    mem: Option<&M>,
    cfg: &RxConfig,
    stop: &AtomicI32,
    out: &mut W,
) -> Result<RxStats> {
    let mut log = std::io::stderr();
    let (stats, result) = receive_logged(sock, mem, cfg, stop, out, &mut log);
    result.map(|()| stats)
}

/// [`receive`] with the diagnostics going to `log`, returning the counters also when the run
/// fails (so a summary can be printed either way).
///
/// Tokens queued when the run ends are always released (best-effort on error paths).
///
/// # Errors
/// - [`Error::Usage`]: bad configuration (zero buffer sizes, a control buffer below 40 bytes
///   in devmem mode, niov size 0, a `-v` period outside 2..=256, devmem without `mem`).
/// - [`Error::Sys`]: `recvmsg` failed with anything but `EAGAIN`/`EINTR` (which are retried,
///   with `Backoff` pauses once they repeat),
///   e.g. `EFAULT`; `poll` failed; `SO_DEVMEM_DONTNEED` failed; writing the payload failed;
///   `DMA_BUF_IOCTL_SYNC` failed (from `mem`).
/// - [`Error::Failure`]: `MSG_CTRUNC`; "flow steering error" (data without devmem cmsgs, or a
///   frag of another binding); `-L` and a linear frag; leaked tokens (short DONTNEED count);
///   validation mismatches (reported after the stream was drained); unexpected cmsgs in plain
///   mode.
/// - [`Error::Bounds`]: a frag outside the dma-buf or crossing a niov boundary (names the
///   token, offset and size).
/// - [`Error::Decode`]: malformed cmsgs; linear/dmabuf byte counts that disagree with the
///   `recvmsg` return.
/// - [`Error::Timeout`]: no data for `idle_timeout`.
/// - [`Error::Interrupted`]: `stop` became non-zero (its value is the signal number).
pub fn receive_logged<S: RxSocket, M: FragMemory, W: Write>(
    sock: &mut S,
    mem: Option<&M>,
    cfg: &RxConfig,
    stop: &AtomicI32,
    out: &mut W,
    log: &mut dyn Write,
) -> (RxStats, Result<()>) {
    let (stats, own) = receive_flow(sock, mem, cfg, stop, out, log);
    let result = own.and_then(|()| stats.validation_result());
    (stats, result)
}

/// [`receive_logged`] for a receive whose verdict is decided from its facts
/// (`crate::verdict`): the result is the connection's own — the loop's error, a stop, or
/// `Ok` — and mismatches are only in the counters ([`RxStats::mismatches`],
/// [`RxStats::validation`]).
///
/// # Errors
/// As [`receive_logged`], without the validation mismatches.
pub(crate) fn receive_flow<S: RxSocket, M: FragMemory, W: Write>(
    sock: &mut S,
    mem: Option<&M>,
    cfg: &RxConfig,
    stop: &AtomicI32,
    out: &mut W,
    log: &mut dyn Write,
) -> (RxStats, Result<()>) {
    let mode = if cfg.devmem.is_some() {
        RxMode::Devmem
    } else {
        RxMode::PlainTcp
    };
    let mut rx = match Receiver::new(sock, mem, cfg, out, log) {
        Ok(rx) => rx,
        Err(e) => return (RxStats::new(mode), Err(e)),
    };
    let result = rx.run(stop);
    let result = rx.finish(result);
    (rx.stats, result)
}

/// Per-`recvmsg` bookkeeping of the devmem path.
#[derive(Debug, Default)]
struct Batch {
    /// Bytes the call returned.
    bytes: usize,
    /// Linear bytes consumed from the iov so far (= iov cursor).
    linear: usize,
    /// Dmabuf bytes seen so far.
    dmabuf: u64,
    /// A devmem cmsg (either kind) was seen.
    any_devmem: bool,
    /// `begin_cpu_read` was called for this batch.
    cpu_reading: bool,
}

/// Between two waits of a receive loop (devmem, plain or zcrx): `Error::Interrupted` once
/// `stop` holds a signal number, `Error::Timeout` once no data arrived for `idle_timeout` since
/// `last_data` (`bytes` received so far, for the message).
pub(crate) fn check_stop_and_idle(
    stop: &AtomicI32,
    idle_timeout: Option<Duration>,
    last_data: Instant,
    bytes: u64,
) -> Result<()> {
    crate::signals::check_flag(stop)?;
    if let Some(t) = idle_timeout {
        let idle = last_data.elapsed();
        if idle >= t {
            return Err(Error::Timeout(format!(
                "no data for {:.3} s (idle timeout {:.3} s) after {bytes} bytes",
                idle.as_secs_f64(),
                t.as_secs_f64(),
            )));
        }
    }
    Ok(())
}

/// The token counters of `batcher` into `stats`.
fn update_token_stats(stats: &mut RxStats, batcher: &TokenBatcher) {
    stats.tokens_released = batcher.released();
    stats.dontneed_calls = batcher.calls();
}

struct Receiver<'a, S: RxSocket, M: FragMemory, W: Write> {
    sock: &'a mut S,
    mem: Option<&'a M>,
    cfg: &'a RxConfig,
    stats: RxStats,
    batcher: TokenBatcher,
    /// Validation or output, CRC-32, first-byte and progress timing.
    sink: PayloadSink<'a, W>,
    /// Stream offset (bytes) of the next byte.
    offset: u64,
}

impl<'a, S: RxSocket, M: FragMemory, W: Write> Receiver<'a, S, M, W> {
    fn new(
        sock: &'a mut S,
        mem: Option<&'a M>,
        cfg: &'a RxConfig,
        out: &'a mut W,
        log: &'a mut dyn Write,
    ) -> Result<Self> {
        if cfg.data_buf_len == 0 {
            return Err(Error::Usage("receive buffer of 0 bytes".into()));
        }
        if let Some(p) = &cfg.devmem {
            if cfg.control_buf_len < DEVMEM_CMSG_SPACE {
                return Err(Error::Usage(format!(
                    "control buffer of {} bytes cannot hold one devmem cmsg ({DEVMEM_CMSG_SPACE} bytes)",
                    cfg.control_buf_len
                )));
            }
            if p.niov_size == 0 {
                return Err(Error::Usage("niov size (rx-page-size) of 0 bytes".into()));
            }
            if mem.is_none() {
                return Err(Error::Usage(
                    "devmem receive needs the dma-buf mapping to read frags from".into(),
                ));
            }
        }
        let (mode, piece) = match cfg.devmem {
            Some(_) => (RxMode::Devmem, "frag"),
            None => (RxMode::PlainTcp, "chunk"),
        };
        Ok(Receiver {
            sock,
            mem,
            cfg,
            stats: RxStats::new(mode),
            batcher: TokenBatcher::new(),
            sink: PayloadSink::new(cfg.validate, piece, out, log)?
                .live_diagnostics(cfg.live_diagnostics),
            offset: 0,
        })
    }

    fn recv_call(&self) -> &'static str {
        if self.cfg.devmem.is_some() {
            "recvmsg(MSG_SOCK_DEVMEM)"
        } else {
            "recvmsg"
        }
    }

    /// The loop proper; returns at EOF or at the first error.
    fn run(&mut self, stop: &AtomicI32) -> Result<()> {
        let devmem = self.cfg.devmem.is_some();
        // The iov is an anonymous mapping of its own, not a heap allocation: the kernel maps
        // its pages only when something writes them (a devmem receive writes only its linear
        // bytes, a few pages). A zeroed heap allocation of this size is zeroed by the
        // allocator in a worker thread's arena, every page faulted in: under TCG on a loaded
        // host that took a worker the whole of a 3 s run before its first recvmsg
        // (tests/vm/FLAKES.md, the rx-page-size sweep).
        let mut iov = MappedRegion::map_anon(self.cfg.data_buf_len, false)?;
        let data = iov.as_mut_slice();
        let mut control = vec![0u8; self.cfg.control_buf_len];
        let tick = self.cfg.poll_tick.max(Duration::from_millis(1));
        let mut last_data = Instant::now();
        // EINTR/EAGAIN again and again (a readable socket whose recvmsg keeps failing) must not
        // spin: pause between the tries.
        let mut backoff = Backoff::new(tick.min(crate::backoff::DEFAULT_MAX_PAUSE));
        self.sink.start_progress(last_data);
        // recvmsg first, poll only when it would block: a busy socket costs one syscall per
        // batch. After a poll that said readable, another EAGAIN is spurious and pauses.
        let mut polled_readable = false;
        // The idle timeout is judged only after a call that returned no data: a thread the
        // host did not run for longer than the timeout finds what was queued meanwhile
        // instead of timing out on the clock alone.
        let idle_timeout = self.cfg.idle_timeout;
        let idle = |last_data: Instant, bytes: u64| {
            check_stop_and_idle(stop, idle_timeout, last_data, bytes)
        };
        loop {
            crate::signals::check_flag(stop)?;
            self.maybe_progress();
            self.stats.recvmsg_calls += 1;
            let o = match self.sock.recvmsg(data, &mut control, devmem) {
                Ok(o) => o,
                Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => {
                    idle(last_data, self.stats.bytes)?;
                    if polled_readable {
                        self.stats.eagain_retries += 1;
                        backoff.pause();
                    }
                    // Nothing queued: do not keep niovs pinned while waiting for more data.
                    self.batcher.flush(&mut *self.sock)?;
                    self.stats.poll_calls += 1;
                    polled_readable = match self.sock.wait_readable(tick) {
                        Ok(readable) => readable,
                        Err(libc::EINTR) => {
                            self.stats.eintr_retries += 1;
                            backoff.pause();
                            false
                        }
                        Err(e) => return Err(Error::sys("poll(POLLIN) on the data socket", e)),
                    };
                    continue;
                }
                Err(libc::EINTR) => {
                    idle(last_data, self.stats.bytes)?;
                    self.stats.eintr_retries += 1;
                    backoff.pause();
                    continue;
                }
                Err(libc::ENODEV) if devmem => return self.binding_gone(),
                Err(e) => return Err(Error::sys(self.recv_call(), e)),
            };
            polled_readable = false;
            if o.bytes == 0 {
                if o.control_len == 0 {
                    return Ok(());
                }
                // Control data and no bytes (6.18 answers so with TCP_INQ set): neither EOF nor
                // data. Its cmsgs are handled (tokens queued), but a run of such calls is idle
                // for the timeout and backs off like a transient error instead of spinning.
                self.stats.control_only_recvmsgs += 1;
                self.batch(data, &control, o)?;
                idle(last_data, self.stats.bytes)?;
                backoff.pause();
                continue;
            }
            backoff.reset();
            last_data = Instant::now();
            self.sink.data_arrived();
            self.batch(data, &control, o)?;
            if self.batcher.pending_tokens() >= self.cfg.token_high_water.max(1) {
                self.batcher.flush(&mut *self.sock)?;
            }
        }
    }

    /// `recvmsg(MSG_SOCK_DEVMEM)` answered `ENODEV`: the socket's binding is gone (autorelease
    /// series v10: the binding has no users left, `tcp_recvmsg_dmabuf`). After a `-U 1` unbind
    /// that is the expected end (C ncdevmem ends there with success); otherwise a failure.
    fn binding_gone(&mut self) -> Result<()> {
        let at = format!(
            "{} answered ENODEV at stream offset {}",
            self.recv_call(),
            self.offset
        );
        match self.cfg.unbind {
            UnbindMode::BeforeRecv => {
                self.stats.binding_gone = true;
                crate::elog_to!(
                    self.sink.log,
                    "binding gone: {at} after the -U 1 unbind (expected); the run ends here"
                );
                Ok(())
            }
            UnbindMode::AfterRecv => Err(Error::Failure(format!(
                "binding gone: {at} after the -U 2 unbind: a socket that already received must \
                 keep its binding usable"
            ))),
            UnbindMode::Normal => Err(Error::Failure(format!(
                "binding gone: {at}: the dmabuf binding was torn down under the socket"
            ))),
        }
    }

    /// Releases what is still queued, fills in the final counters and decides the verdict.
    fn finish(&mut self, result: Result<()>) -> Result<()> {
        let released = self.batcher.flush(&mut *self.sock);
        update_token_stats(&mut self.stats, &self.batcher);
        self.sink.finish(&mut self.stats, result.and(released))
    }

    fn maybe_progress(&mut self) {
        let batcher = &self.batcher;
        self.sink
            .maybe_progress(self.cfg.progress_interval, &mut self.stats, |s| {
                update_token_stats(s, batcher)
            });
    }

    /// Handles what one `recvmsg` returned. Whatever makes the call's answer unusable, the
    /// tokens of the dmabuf cmsgs it delivered are queued first, so they go back to the kernel
    /// (every frag the kernel described pins a niov until its token is returned).
    fn batch(&mut self, data: &[u8], control: &[u8], o: RecvOutcome) -> Result<()> {
        let call = self.recv_call();
        let control_buf_len = control.len();
        let control = &control[..o.control_len.min(control_buf_len)];
        if o.bytes > data.len() {
            self.collect_tokens(cmsgs(control));
            return Err(Error::Decode {
                what: format!("{call} return"),
                detail: format!("{} bytes for a {}-byte iov", o.bytes, data.len()),
            });
        }
        self.stats.bytes += o.bytes as u64;
        if o.msg_flags & libc::MSG_CTRUNC != 0 {
            self.collect_tokens(cmsgs(control));
            return Err(Error::Failure(format!(
                "{call} set MSG_CTRUNC: the {control_buf_len}-byte control buffer was too small \
                 ({} bytes of cmsgs delivered) and cmsgs were dropped (their frags' tokens are \
                 lost)",
                control.len()
            )));
        }
        match self.cfg.devmem {
            None => self.plain_batch(&data[..o.bytes], control),
            Some(p) => self.devmem_batch(data, control, o.bytes, p),
        }
    }

    fn plain_batch(&mut self, data: &[u8], control: &[u8]) -> Result<()> {
        if let Some(first) = cmsgs(control).next() {
            self.collect_tokens(cmsgs(control));
            let what = match first? {
                Cmsg::Linear { .. } => "SCM_DEVMEM_LINEAR".to_string(),
                Cmsg::Dmabuf(_) => "SCM_DEVMEM_DMABUF".to_string(),
                Cmsg::Other { level, ty, .. } => format!("level {level} type {ty}"),
            };
            return Err(Error::Failure(format!(
                "unexpected cmsg ({what}) on a plain TCP receive"
            )));
        }
        self.stats.plain_bytes += data.len() as u64;
        self.consume(data)
    }

    fn devmem_batch(
        &mut self,
        data: &[u8],
        control: &[u8],
        bytes: usize,
        p: DevmemParams,
    ) -> Result<()> {
        let mut b = Batch {
            bytes,
            ..Batch::default()
        };
        let mut iter = cmsgs(control);
        let mut result = self.devmem_cmsgs(&mut iter, data, &mut b, p);
        if result.is_err() {
            // Whatever the problem, the kernel handed out the remaining frags' tokens too.
            self.collect_tokens(iter);
        }
        if b.cpu_reading {
            if let Some(mem) = self.mem {
                let ended = mem.end_cpu_read();
                match (&result, ended) {
                    (Ok(()), Err(e)) => result = Err(e),
                    (Err(_), Err(e)) => {
                        crate::elog_to!(self.sink.log, "rx: also failed to end CPU access: {e}");
                    }
                    _ => {}
                }
            }
        }
        result?;
        if !b.any_devmem && bytes > 0 {
            return Err(Error::Failure(format!(
                "flow steering error: {} returned {bytes} bytes at stream offset {} without SCM_DEVMEM cmsgs (the flow did not arrive on the bound queue)",
                self.recv_call(),
                self.offset
            )));
        }
        if b.linear as u64 + b.dmabuf != bytes as u64 {
            return Err(Error::Decode {
                what: format!("{} return", self.recv_call()),
                detail: format!(
                    "{bytes} bytes returned but the cmsgs describe {} linear + {} dmabuf bytes",
                    b.linear, b.dmabuf
                ),
            });
        }
        Ok(())
    }

    fn devmem_cmsgs(
        &mut self,
        iter: &mut CmsgIter<'_>,
        data: &[u8],
        b: &mut Batch,
        p: DevmemParams,
    ) -> Result<()> {
        for c in iter {
            match c? {
                Cmsg::Linear { frag_size } => {
                    b.any_devmem = true;
                    let n = frag_size as usize;
                    self.stats.linear_frags += 1;
                    self.stats.linear_bytes += n as u64;
                    if self.cfg.verbose {
                        crate::elog_to!(
                            self.sink.log,
                            "frag linear: size {n}, stream offset {}",
                            self.offset
                        );
                    }
                    if self.cfg.fail_on_linear {
                        return Err(Error::Failure(format!(
                            "-L: SCM_DEVMEM_LINEAR frag of {n} bytes at stream offset {}: payload landed in host memory (header split not working)",
                            self.offset
                        )));
                    }
                    let end = b.linear.checked_add(n).filter(|&e| e <= b.bytes);
                    let Some(end) = end else {
                        return Err(Error::Decode {
                            what: "SCM_DEVMEM_LINEAR cmsg".into(),
                            detail: format!(
                                "frag_size {n} at iov offset {} runs past the {} bytes {} returned",
                                b.linear,
                                b.bytes,
                                self.recv_call()
                            ),
                        });
                    };
                    self.consume(&data[b.linear..end])?;
                    b.linear = end;
                }
                Cmsg::Dmabuf(d) => {
                    b.any_devmem = true;
                    self.stats.dmabuf_frags += 1;
                    self.stats.dmabuf_bytes += d.frag_size as u64;
                    self.stats.max_dmabuf_frag = self.stats.max_dmabuf_frag.max(d.frag_size);
                    self.stats.frag_sizes.record(d.frag_size);
                    let r = self.dmabuf_frag(&d, b, p);
                    // Queue the token whatever happened: the kernel pinned the niov for us.
                    let due = self.batcher.push(d.frag_token);
                    r?;
                    if due {
                        self.batcher.flush(&mut *self.sock)?;
                    }
                }
                Cmsg::Other { level, ty, len } => {
                    if self.cfg.verbose {
                        crate::elog_to!(
                            self.sink.log,
                            "cmsg ignored: level {level}, type {ty}, {len} bytes"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks one dmabuf frag and validates (or outputs) its bytes in place.
    fn dmabuf_frag(&mut self, d: &dmabuf_cmsg, b: &mut Batch, p: DevmemParams) -> Result<()> {
        let (token, off, size) = (d.frag_token, d.frag_offset, d.frag_size as u64);
        if self.cfg.verbose {
            let niov = p.niov_size as u64;
            crate::elog_to!(
                self.sink.log,
                "frag dmabuf: token {token}, dma-buf offset 0x{off:x} (niov {}, +0x{:x}), size {size}, stream offset {}, dmabuf id {}",
                off / niov,
                off % niov,
                self.offset,
                d.dmabuf_id
            );
        }
        if d.dmabuf_id != p.dmabuf_id {
            return Err(Error::Failure(format!(
                "flow steering error: dmabuf frag (token {token}) at stream offset {} comes from binding {}, expected binding {}",
                self.offset, d.dmabuf_id, p.dmabuf_id
            )));
        }
        let Some(mem) = self.mem else {
            return Err(Error::Usage(
                "devmem receive needs the dma-buf mapping".into(),
            ));
        };
        let region = mem.size() as u64;
        let inside = matches!(off.checked_add(size), Some(end) if end <= region);
        if !inside {
            return Err(Error::Bounds {
                what: format!("dmabuf frag (token {token}, size {size})"),
                offset: off,
                len: size,
                region_len: region,
            });
        }
        let niov = p.niov_size as u64;
        if off % niov + size > niov {
            return Err(Error::Bounds {
                what: format!(
                    "dmabuf frag (token {token}, dma-buf offset 0x{off:x}, size {size}) inside its niov (rx-page-size {niov} bytes)"
                ),
                offset: off % niov,
                len: size,
                region_len: niov,
            });
        }
        let total = b.linear as u64 + b.dmabuf + size;
        if total > b.bytes as u64 {
            return Err(Error::Decode {
                what: "SCM_DEVMEM_DMABUF cmsg".into(),
                detail: format!(
                    "frag (token {token}, size {size}) makes {total} bytes, more than the {} bytes {} returned",
                    b.bytes,
                    self.recv_call()
                ),
            });
        }
        b.dmabuf += size;
        if size == 0 {
            return Ok(());
        }
        if !b.cpu_reading {
            mem.begin_cpu_read()?;
            b.cpu_reading = true;
        }
        let bytes = mem.bytes(off, size)?;
        self.consume(bytes)
    }

    /// Validates or outputs the next stream bytes (one piece: a frag or a plain chunk).
    fn consume(&mut self, bytes: &[u8]) -> Result<()> {
        self.sink.consume(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Queues the tokens of every dmabuf cmsg left in `iter` (error paths; stops at the first
    /// undecodable cmsg).
    fn collect_tokens(&mut self, iter: CmsgIter<'_>) {
        for c in iter {
            match c {
                Ok(Cmsg::Dmabuf(d)) => {
                    self.batcher.push(d.frag_token);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}

use crate::error::Stopped;

/// A payload sink a stop signal can interrupt. A write blocked on a full pipe (a reader that
/// stopped reading, such as `| less`) returns `EINTR` when a signal arrives, but `write_all`,
/// `BufWriter` and std's own stdout buffer retry that at once, so SIGINT/SIGTERM/SIGHUP were
/// ignored until the reader went away — with every NIC change still in place. This writer
/// checks `stop` before every write and after every `EINTR`, and once it holds a signal
/// number fails every call at once with [`Stopped`] (so a later flush, or a `BufWriter`'s
/// drop, cannot block again). `inner` should write straight to the file descriptor (a
/// [`std::fs::File`], not [`std::io::Stdout`], whose buffer retries `EINTR` itself).
#[derive(Debug)]
pub struct StopAwareWriter<'s, W: Write> {
    inner: W,
    stop: &'s AtomicI32,
}

impl<'s, W: Write> StopAwareWriter<'s, W> {
    /// Wraps `inner`; `stop` is the stop flag (a signal number, 0 = keep going).
    pub fn new(inner: W, stop: &'s AtomicI32) -> Self {
        StopAwareWriter { inner, stop }
    }

    /// `op` on the inner writer, retried after `EINTR`, with the stop flag checked before
    /// every try.
    fn retry<T>(&mut self, mut op: impl FnMut(&mut W) -> std::io::Result<T>) -> std::io::Result<T> {
        loop {
            match self.stop.load(std::sync::atomic::Ordering::SeqCst) {
                0 => {}
                sig => return Err(std::io::Error::other(Stopped(sig))),
            }
            match op(&mut self.inner) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }
}

impl<W: Write> Write for StopAwareWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.retry(|w| w.write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.retry(|w| w.flush())
    }
}

/// The process's stdout as a [`StopAwareWriter`] over its own descriptor (a `dup` of fd 1, so
/// nothing of std's stdout buffer sits in between), for the receivers' payload output.
///
/// Errors: [`Error::Sys`] when fd 1 cannot be duplicated.
pub(crate) fn stop_aware_stdout(stop: &AtomicI32) -> Result<StopAwareWriter<'_, std::fs::File>> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("dup(stdout)", &e))?;
    Ok(StopAwareWriter::new(std::fs::File::from(fd), stop))
}

/// A [`FragMemory`] that cannot exist, for plain-TCP receives, which read no frag memory:
/// `receive::<_, NoFragMemory, _>(&mut sock, None, &cfg, &stop, &mut out)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoFragMemory {}

impl FragMemory for NoFragMemory {
    fn size(&self) -> usize {
        match *self {}
    }
    fn bytes(&self, _offset: u64, _len: u64) -> Result<&[u8]> {
        match *self {}
    }
    fn begin_cpu_read(&self) -> Result<()> {
        match *self {}
    }
    fn end_cpu_read(&self) -> Result<()> {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{encode_devmem_cmsg, ScriptedSocket};
    use super::*;
    use proptest::prelude::*;

    /// A writer blocked on a full pipe sees `EINTR` on every signal and nothing else: the
    /// stop-aware writer gives up with `Stopped` once the flag is set (plain `write_all` would
    /// retry forever), later calls fail at once without touching the pipe, and the error maps
    /// to `Error::Interrupted`.
    #[test]
    fn a_stop_signal_interrupts_a_blocked_payload_write() {
        struct AlwaysEintr<'a> {
            calls: u32,
            stop: &'a AtomicI32,
        }
        impl Write for AlwaysEintr<'_> {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                self.calls += 1;
                if self.calls == 3 {
                    self.stop
                        .store(libc::SIGTERM, std::sync::atomic::Ordering::SeqCst);
                }
                Err(std::io::Error::from_raw_os_error(libc::EINTR))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let stop = AtomicI32::new(0);
        let mut w = StopAwareWriter::new(
            AlwaysEintr {
                calls: 0,
                stop: &stop,
            },
            &stop,
        );
        let e = w.write_all(b"payload").unwrap_err();
        assert!(matches!(
            Error::io("write(payload output)", &e),
            Error::Interrupted(libc::SIGTERM)
        ));
        assert_eq!(w.inner.calls, 3);
        assert!(w.flush().is_err());
        assert!(w.write(b"x").is_err());
        assert_eq!(w.inner.calls, 3, "nothing more reaches the blocked pipe");
        let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(matches!(
            Error::io("write(payload output)", &e),
            Error::Sys {
                errno: libc::ENOSPC,
                ..
            }
        ));
    }

    /// Synthetic (no devmem NIC here): one SCM_DEVMEM_DMABUF cmsg laid out as
    /// net/ipv4/tcp.c `put_cmsg_notrunc` writes it on x86_64, followed by one
    /// SCM_DEVMEM_LINEAR cmsg.
    #[cfg(target_endian = "little")]
    const TWO_CMSGS: [u8; 80] = [
        0x28, 0, 0, 0, 0, 0, 0, 0, // cmsg_len 40 = CMSG_LEN(24)
        0x01, 0, 0, 0, // cmsg_level SOL_SOCKET
        0x4f, 0, 0, 0, // cmsg_type SCM_DEVMEM_DMABUF (79)
        0x00, 0x30, 0x01, 0, 0, 0, 0, 0, // frag_offset 0x13000
        0x00, 0x10, 0, 0, // frag_size 4096
        0x07, 0, 0, 0, // frag_token 7
        0x03, 0, 0, 0, // dmabuf_id 3
        0, 0, 0, 0, // flags 0
        0x28, 0, 0, 0, 0, 0, 0, 0, // cmsg_len 40
        0x01, 0, 0, 0, // cmsg_level SOL_SOCKET
        0x4e, 0, 0, 0, // cmsg_type SCM_DEVMEM_LINEAR (78)
        0, 0, 0, 0, 0, 0, 0, 0, // frag_offset (unused for linear)
        0x42, 0, 0, 0, // frag_size 66 bytes in the iov
        0, 0, 0, 0, // frag_token (unused)
        0, 0, 0, 0, // dmabuf_id (unused)
        0, 0, 0, 0, // flags
    ];

    fn dm(frag_offset: u64, frag_size: u32, frag_token: u32, dmabuf_id: u32) -> dmabuf_cmsg {
        dmabuf_cmsg {
            frag_offset,
            frag_size,
            frag_token,
            dmabuf_id,
            flags: 0,
        }
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn parses_kernel_layout_byte_exact() {
        let got: Vec<Cmsg> = cmsgs(&TWO_CMSGS).collect::<Result<_>>().unwrap();
        assert_eq!(
            got,
            vec![
                Cmsg::Dmabuf(dm(0x13000, 4096, 7, 3)),
                Cmsg::Linear { frag_size: 66 }
            ]
        );
        // The encoder of the test double writes exactly these bytes.
        let mut enc = encode_devmem_cmsg(SCM_DEVMEM_DMABUF, &dm(0x13000, 4096, 7, 3)).to_vec();
        let lin = dmabuf_cmsg {
            frag_size: 66,
            ..dm(0, 0, 0, 0)
        };
        enc.extend_from_slice(&encode_devmem_cmsg(SCM_DEVMEM_LINEAR, &lin));
        assert_eq!(enc, TWO_CMSGS);
    }

    #[test]
    fn empty_control_has_no_cmsgs() {
        assert_eq!(cmsgs(&[]).count(), 0);
    }

    #[test]
    fn devmem_iov_covers_the_control_buffer_within_bounds() {
        // 2000 frags of 4 KiB: 8,192,000 bytes; of 16 KiB and 64 KiB: capped at 16 MiB.
        assert_eq!(devmem_iov_len(4096, DEFAULT_CONTROL_BUF_LEN), 8_192_000);
        assert_eq!(devmem_iov_len(16384, DEFAULT_CONTROL_BUF_LEN), 16 << 20);
        assert_eq!(devmem_iov_len(65536, DEFAULT_CONTROL_BUF_LEN), 16 << 20);
        // A small control buffer never makes the iov smaller than the default.
        assert_eq!(devmem_iov_len(4096, 400), DEFAULT_DATA_BUF_LEN);
        assert_eq!(devmem_iov_len(u32::MAX, usize::MAX), MAX_DEVMEM_IOV_LEN);
    }

    #[test]
    fn token_high_water_is_an_eighth_of_the_binding_within_one_call() {
        assert_eq!(token_high_water(0), 1);
        assert_eq!(token_high_water(64), 8);
        assert_eq!(token_high_water(1024), 128);
        assert_eq!(token_high_water(16384), 1024);
        assert_eq!(token_high_water(u64::MAX), 1024);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn other_cmsg_is_skipped_with_padding() {
        // SOL_TCP (6) / TCP_CM_INQ (2) with a 4-byte int: cmsg_len 20, padded to 24.
        let mut buf = vec![
            20, 0, 0, 0, 0, 0, 0, 0, // cmsg_len 20 = CMSG_LEN(4)
            6, 0, 0, 0, // cmsg_level SOL_TCP
            2, 0, 0, 0, // cmsg_type TCP_CM_INQ
            9, 0, 0, 0, // int 9
            0, 0, 0, 0, // padding to CMSG_ALIGN
        ];
        buf.extend_from_slice(&TWO_CMSGS[..40]);
        let got: Vec<Cmsg> = cmsgs(&buf).collect::<Result<_>>().unwrap();
        assert_eq!(
            got,
            vec![
                Cmsg::Other {
                    level: 6,
                    ty: 2,
                    len: 20
                },
                Cmsg::Dmabuf(dm(0x13000, 4096, 7, 3))
            ]
        );
        // Padding of the last cmsg cut off by the buffer end is fine.
        assert_eq!(cmsgs(&buf[..20]).count(), 1);
        assert!(cmsgs(&buf[..20]).next().unwrap().is_ok());
    }

    fn decode_err(buf: &[u8]) -> String {
        let mut it = cmsgs(buf);
        let e = it.find_map(|c| c.err()).expect("expected a decode error");
        assert!(matches!(e, Error::Decode { .. }), "{e:?}");
        assert!(it.next().is_none(), "iteration stops after an error");
        e.to_string()
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn truncated_and_short_cmsgs_are_decode_errors() {
        // Header cut short.
        assert!(decode_err(&TWO_CMSGS[..10]).contains("10 trailing bytes at control offset 0"));
        // Second cmsg cut in its payload: cmsg_len 40 > 30 bytes left.
        let e = decode_err(&TWO_CMSGS[..70]);
        assert!(e.contains("cmsg_len 40"), "{e}");
        assert!(e.contains("exceeds the 30 bytes left"), "{e}");
        // cmsg_len below the header.
        let mut b = TWO_CMSGS;
        b[0] = 8;
        assert!(decode_err(&b).contains("cmsg_len 8 at control offset 0 is below"));
        // A devmem cmsg with a 16-byte payload.
        let mut b = TWO_CMSGS[..40].to_vec();
        b[0] = 32;
        let e = decode_err(&b);
        assert!(
            e.starts_with("cannot decode SCM_DEVMEM_DMABUF cmsg: payload of 16 bytes"),
            "{e}"
        );
        // A huge cmsg_len does not overflow.
        let mut b = TWO_CMSGS[..40].to_vec();
        b[..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(decode_err(&b).contains("exceeds the 40 bytes left"));
    }

    fn ranges(r: &[dmabuf_token]) -> Vec<(u32, u32)> {
        r.iter().map(|r| (r.token_start, r.token_count)).collect()
    }

    fn plan(b: &TokenBatcher) -> Vec<Vec<(u32, u32)>> {
        b.plan().iter().map(|c| ranges(c)).collect()
    }

    #[test]
    fn batcher_coalesces_consecutive_tokens() {
        let mut b = TokenBatcher::new();
        for t in [1, 2, 3, 7, 8, 5, 6, 6, u32::MAX, 0] {
            assert!(!b.push(t));
        }
        assert_eq!(
            ranges(b.pending_ranges()),
            vec![(1, 3), (7, 2), (5, 2), (6, 1), (u32::MAX, 1), (0, 1)],
            "only ascending neighbours merge; no wrap-around at u32::MAX"
        );
        assert_eq!(b.pending_tokens(), 10);
    }

    #[test]
    fn batcher_is_due_at_128_ranges() {
        let mut b = TokenBatcher::new();
        for i in 0..127u32 {
            assert!(!b.push(i * 2));
        }
        assert!(b.push(1000), "128th range makes a flush due");
        assert_eq!(plan(&b).len(), 1);
        assert_eq!(plan(&b)[0].len(), 128);
    }

    #[test]
    fn batcher_splits_at_1024_tokens_per_call() {
        let mut b = TokenBatcher::new();
        for t in 1..=2500u32 {
            b.push(t);
        }
        assert_eq!(ranges(b.pending_ranges()), vec![(1, 2500)]);
        assert_eq!(
            plan(&b),
            vec![vec![(1, 1024)], vec![(1025, 1024)], vec![(2049, 452)]]
        );
        // Ranges that together exceed the cap are split at the cap.
        let mut b = TokenBatcher::new();
        for t in (1..=1000).chain(2001..=2100) {
            b.push(t);
        }
        assert_eq!(
            plan(&b),
            vec![vec![(1, 1000), (2001, 24)], vec![(2025, 76)]]
        );
    }

    #[test]
    fn flush_checks_the_returned_count() {
        let mut sock = ScriptedSocket::new(vec![]);
        // Tokens 1..=3 were never handed out by this socket: the kernel frees 0 of 3.
        let mut b = TokenBatcher::new();
        for t in 1..=3 {
            b.push(t);
        }
        let e = b.flush(&mut sock).unwrap_err().to_string();
        assert_eq!(
            e,
            "SO_DEVMEM_DONTNEED freed 0 of 3 tokens (1 ranges, first 1+3): 3 tokens leaked"
        );
        assert_eq!(b.pending_tokens(), 0, "queue is emptied even on failure");
        assert_eq!(b.calls(), 1);
        assert_eq!(b.released(), 0);
        assert_eq!(sock.dontneed_calls(), &[vec![(1, 3)]]);
        // Nothing queued: no call.
        b.flush(&mut sock).unwrap();
        assert_eq!((b.calls(), sock.dontneed_calls().len()), (1, 1));
    }

    #[test]
    fn batcher_with_limits_clamps_to_kernel_limits() {
        let mut b = TokenBatcher::with_limits(1000, 5000);
        for i in 0..200u32 {
            b.push(i * 3);
        }
        let p = plan(&b);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].len(), 128);
        let mut b = TokenBatcher::with_limits(2, 3);
        for t in 10..=16 {
            b.push(t);
        }
        assert_eq!(plan(&b), vec![vec![(10, 3)], vec![(13, 3)], vec![(16, 1)]]);
    }

    proptest! {
        #[test]
        fn cmsg_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut n = 0;
            for c in cmsgs(&bytes) {
                n += 1;
                prop_assert!(n <= bytes.len() / crate::sys::uapi::CMSGHDR_LEN + 1);
                if c.is_err() {
                    break;
                }
            }
        }

        #[test]
        fn cmsg_parser_never_panics_on_mutated_kernel_bytes(
            frags in proptest::collection::vec((any::<u64>(), any::<u32>(), any::<u32>()), 1..6),
            cut in any::<prop::sample::Index>(),
            pokes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ) {
            let mut buf = Vec::new();
            for (o, s, t) in &frags {
                buf.extend_from_slice(&encode_devmem_cmsg(SCM_DEVMEM_DMABUF, &dm(*o, *s, *t, 1)));
            }
            let all: Vec<Cmsg> = cmsgs(&buf).collect::<Result<_>>().unwrap();
            prop_assert_eq!(all.len(), frags.len());
            for (i, v) in &pokes {
                let i = i.index(buf.len());
                buf[i] = *v;
            }
            let end = cut.index(buf.len() + 1);
            let _ = cmsgs(&buf[..end]).count();
        }

        #[test]
        fn batcher_preserves_the_multiset_of_tokens(
            tokens in proptest::collection::vec(0u32..3000, 0..3000),
            max_entries in 1usize..=128,
            max_tokens in 1u32..=1024,
        ) {
            let mut b = TokenBatcher::with_limits(max_entries, max_tokens);
            for &t in &tokens {
                b.push(t);
            }
            let mut got = Vec::new();
            for call in b.plan() {
                prop_assert!(!call.is_empty());
                prop_assert!(call.len() <= max_entries);
                let n: u64 = call.iter().map(|r| r.token_count as u64).sum();
                prop_assert!(n <= max_tokens as u64);
                for r in call {
                    prop_assert!(r.token_count > 0);
                    got.extend((0..r.token_count).map(|i| r.token_start + i));
                }
            }
            prop_assert_eq!(got, tokens, "same tokens, same order");
        }
    }
}
