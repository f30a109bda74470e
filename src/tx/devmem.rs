//! Devmem TX: sends from a dma-buf with `sendmsg(MSG_ZEROCOPY)` and an `SCM_DEVMEM_DMABUF`
//! cmsg carrying the bind-tx binding id, and tracks the zerocopy completions the kernel queues
//! on the socket's error queue, so a dma-buf region is reused only after every send that used
//! it completed.
//!
//! The kernel's contract (`docs/kernel-interface.md#devmem-tx`,
//! `docs.kernel.org/networking/devmem.html`, `docs.kernel.org/networking/msg_zerocopy.html`;
//! available since 6.16):
//! - the socket has `SO_ZEROCOPY` set and each `sendmsg` passes `MSG_ZEROCOPY` and one cmsg
//!   `SOL_SOCKET`/`SCM_DEVMEM_DMABUF` whose `cmsg_len` is exactly `CMSG_LEN(4)`, data = the TX
//!   binding id (u32);
//! - each iov's `iov_base` is a **byte offset into the dma-buf**, not a pointer; `iov_len` is
//!   its length. At most `UIO_MAXIOV` (1024) iovs per call;
//! - every zerocopy `sendmsg` that accepted data takes the next number of a per-socket
//!   counter starting at 0; when the NIC is done with the data, the kernel queues a
//!   `sock_extended_err` with origin `SO_EE_ORIGIN_ZEROCOPY` (5) on the error queue, covering
//!   the inclusive range `[ee_info, ee_data]` of send numbers (consecutive completions are
//!   coalesced into one range; ranges may arrive out of order). `ee_code` has
//!   `SO_EE_CODE_ZEROCOPY_COPIED` when the kernel copied instead.
//!
//! Data flows as *pieces*: a piece is a contiguous byte range of the dma-buf, filled once
//! under `DMA_BUF_IOCTL_SYNC(START|WRITE)`/`(END|WRITE)` and sent by one or more `sendmsg`
//! calls (more than one when `-z` makes more than 1024 iovs, or after a short send). Pieces are
//! allocated ring-buffer style ([`RegionRing`]); a region comes back only after every send of
//! its piece completed ([`CompletionTracker`]). When the ring is full the sender waits with
//! `poll(POLLERR)` for completions, up to a timeout.
//!
//! Ported from ncdevmem.c `do_client` (torvalds/linux, tools/testing/selftests/drivers/net/hw),
//! with these differences: input larger than the dma-buf is sent in pieces instead of being
//! written past the buffer; sends are pipelined instead of waiting for each line's completion;
//! short sends continue where they stopped; more than 1024 iovs become several `sendmsg`s.
//!
//! The loop reaches the kernel only through [`TxSocket`] and [`TxMemory`], so tests drive it
//! with a scripted double (`crate::tx::testing`, with the `testing` feature).

use std::collections::VecDeque;
use std::io::{BufRead, ErrorKind, Write};
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{errno_display, Error, Result};
pub use crate::memory::TxMemory;
use crate::stats::gbit_per_s;
use crate::sys::mmap::MappedRegion;
use crate::sys::uapi::{walk_cmsgs, RawCmsg, SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_ORIGIN_ZEROCOPY};
pub use crate::sys::zerocopy::{
    DmabufIov, ErrqueueRead, DMABUF_ID_CMSG_LEN, DMABUF_ID_CMSG_SPACE, MAX_IOV,
};
use crate::udmabuf::Udmabuf;
use crate::validate::{Pattern, StreamCrc32, StreamSpec};

/// How long the sender waits for a zerocopy completion when no `--timeout` is given. It is
/// the longest gap without any completion arriving, not a bound on the whole run.
pub const DEFAULT_COMPLETION_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest piece in bytes by default (capped at the dma-buf size): large enough that syscalls
/// are not the cost, small enough that many pieces are in flight in a 64 MB dma-buf.
pub const DEFAULT_MAX_PIECE: usize = 1 << 20;

/// How often waits wake up to look at the stop flag.
pub const DEFAULT_POLL_TICK: Duration = Duration::from_millis(50);

/// Control-buffer bytes for one error-queue read: a `IPV6_RECVERR` cmsg is
/// `CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))` = 16 + 48 = 64 bytes; room
/// for a few more cmsgs the socket might add.
pub const ERRQUEUE_CONTROL_LEN: usize = 256;

/// `sizeof(struct sock_extended_err)` (include/uapi/linux/errqueue.h): 16.
pub const SOCK_EXTENDED_ERR_LEN: usize = std::mem::size_of::<SockExtendedErr>();

// ---------------------------------------------------------------------------------------------
// Seams
// ---------------------------------------------------------------------------------------------

/// The socket operations the devmem sender needs. The real implementation is
/// [`crate::sys::zerocopy::ZerocopySocket`]; tests use `crate::tx::testing::ScriptedTxSocket`
/// (`testing` feature).
/// `Err` carries the positive errno of a `-1` return.
pub trait TxSocket {
    /// `sendmsg(iovs as dma-buf offsets, cmsg SOL_SOCKET/SCM_DEVMEM_DMABUF = dmabuf_id,
    /// MSG_ZEROCOPY)`. Returns the bytes the kernel accepted (may be fewer than offered).
    /// At most [`MAX_IOV`] iovs.
    fn send_dmabuf(&mut self, iovs: &[DmabufIov], dmabuf_id: u32) -> Result<usize, i32>;

    /// One non-blocking `recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)` into `control` (no data iov).
    /// `Err(EAGAIN)` when the error queue is empty.
    fn recv_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32>;

    /// `poll(POLLERR)` for up to `timeout`: `Ok(true)` when the error queue (or a socket
    /// error) is pending. `Err(EINTR)` lets the caller look at its stop flag.
    fn wait_errqueue(&mut self, timeout: Duration) -> Result<bool, i32>;

    /// `getsockopt(SO_ERROR)`: the pending socket error (0 = none), cleared by reading.
    fn socket_error(&mut self) -> Result<i32, i32>;
}

/// The real socket: each call is one system call of `crate::sys::zerocopy`.
impl TxSocket for crate::sys::zerocopy::ZerocopySocket {
    fn send_dmabuf(&mut self, iovs: &[DmabufIov], dmabuf_id: u32) -> Result<usize, i32> {
        self.send_dmabuf_iovs(iovs, dmabuf_id)
    }

    fn recv_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32> {
        self.read_errqueue(control)
    }

    fn wait_errqueue(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.poll_errqueue(timeout)
    }

    fn socket_error(&mut self) -> Result<i32, i32> {
        self.so_error()
    }
}

/// One flow's share of a dma-buf that several flows send from at once: `len` bytes from
/// byte `base` of the memory behind the mutex. Writes lock the memory for the copy only;
/// windows of one split never overlap, so a region one flow has in flight is never written by
/// another.
#[derive(Debug)]
pub struct DmabufWindow<'a, 'm, M: ?Sized> {
    mem: &'a std::sync::Mutex<&'m mut M>,
    base: u64,
    len: usize,
}

impl<'a, 'm, M: TxMemory + ?Sized> DmabufWindow<'a, 'm, M> {
    /// `count` windows of equal size over `mem`, each a multiple of [`WINDOW_ALIGN`] bytes
    /// (the rest of the buffer is left unused), window k at `k · size`.
    ///
    /// Errors: `Error::Usage` when `count` is 0 or the dma-buf gives a window less than
    /// [`WINDOW_ALIGN`] bytes (naming the sizes).
    pub fn split(mem: &'a std::sync::Mutex<&'m mut M>, count: u32) -> Result<Vec<Self>> {
        let total = mem.lock().unwrap_or_else(|e| e.into_inner()).size();
        let size = window_size(total, count)?;
        Ok((0..u64::from(count))
            .map(|k| DmabufWindow {
                mem,
                base: k * size as u64,
                len: size,
            })
            .collect())
    }
}

/// Windows of a split dma-buf start at multiples of this many bytes (a page: a window never
/// shares a page with another).
pub const WINDOW_ALIGN: usize = 4096;

/// The size of each of `count` windows over a dma-buf of `total` bytes ([`DmabufWindow::split`]).
///
/// Errors: `Error::Usage` when `count` is 0 or a window would be under [`WINDOW_ALIGN`].
pub(crate) fn window_size(total: usize, count: u32) -> Result<usize> {
    let each = match count {
        0 => 0,
        n => total / n as usize / WINDOW_ALIGN * WINDOW_ALIGN,
    };
    if each == 0 {
        return Err(Error::Usage(format!(
            "devmem TX: a dma-buf of {total} bytes split over {count} flows leaves less than \
             {WINDOW_ALIGN} bytes per flow (give --dmabuf-size at least {} bytes)",
            u64::from(count.max(1)) * WINDOW_ALIGN as u64
        )));
    }
    Ok(each)
}

impl<M: TxMemory + ?Sized> TxMemory for DmabufWindow<'_, '_, M> {
    fn size(&self) -> usize {
        self.len
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let r = crate::sys::mmap::checked_range(
            "dma-buf window write",
            offset,
            data.len() as u64,
            self.len,
        )?;
        let mut mem = self.mem.lock().unwrap_or_else(|e| e.into_inner());
        mem.write_at(self.base + r.start as u64, data)
    }

    fn dmabuf_offset(&self) -> u64 {
        self.base
    }
}

impl TxMemory for Udmabuf {
    fn size(&self) -> usize {
        crate::udmabuf::FragMemory::size(self)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        Udmabuf::write_at(self, offset, data)
    }
}

/// A plain shared mapping (e.g. of a memfd): no dma-buf sync needed.
impl TxMemory for MappedRegion {
    fn size(&self) -> usize {
        self.len()
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        MappedRegion::write_at(self, offset, data)
    }
}

// ---------------------------------------------------------------------------------------------
// iov construction
// ---------------------------------------------------------------------------------------------

/// Walks the iovs of one piece lazily: without `-z`, one iov for everything left; with `-z N`,
/// iovs of at most `N` bytes whose boundaries sit at multiples of `N` from the piece start (as
/// ncdevmem.c's `{i·N, N}` split, the last one shorter). A short send moves the position into
/// the middle of an iov; the next batch starts there and the rest of that iov comes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IovCursor {
    start: u64,
    pos: u64,
    end: u64,
    chunk: Option<u64>,
}

impl IovCursor {
    /// The piece `[offset, offset + len)` of the dma-buf (bytes), split by `chunk` bytes.
    /// A chunk of 0 is treated as no split.
    pub fn new(offset: u64, len: usize, chunk: Option<u32>) -> IovCursor {
        IovCursor {
            start: offset,
            pos: offset,
            end: offset.saturating_add(len as u64),
            chunk: chunk.filter(|&c| c > 0).map(u64::from),
        }
    }

    /// Bytes not yet accepted by the kernel.
    pub fn remaining(&self) -> u64 {
        self.end - self.pos
    }

    /// True when every byte was accepted.
    pub fn is_done(&self) -> bool {
        self.pos >= self.end
    }

    /// The next batch: up to `max_iovs` iovs from the current position, into `out` (cleared
    /// first). Returns the batch's bytes.
    pub fn batch(&self, max_iovs: usize, out: &mut Vec<DmabufIov>) -> u64 {
        out.clear();
        let mut p = self.pos;
        let mut total = 0;
        while p < self.end && out.len() < max_iovs {
            let stop = match self.chunk {
                None => self.end,
                Some(c) => (self.start + ((p - self.start) / c + 1) * c).min(self.end),
            };
            out.push(DmabufIov {
                offset: p,
                len: (stop - p) as usize,
            });
            total += stop - p;
            p = stop;
        }
        total
    }

    /// The kernel accepted `n` more bytes (at most [`IovCursor::remaining`]).
    pub fn advance(&mut self, n: u64) {
        self.pos = self.pos.saturating_add(n).min(self.end);
    }
}

/// Every iov of the piece `[offset, offset + len)` split by `chunk`, grouped into `sendmsg`
/// calls of at most [`MAX_IOV`] iovs, assuming every call is accepted in full. (The sender
/// builds the same batches lazily with [`IovCursor`]; this eager form is for the tests, in
/// test builds and with the `testing` feature only.)
#[cfg(any(test, feature = "testing"))]
pub fn plan_sends(offset: u64, len: usize, chunk: Option<u32>) -> Vec<Vec<DmabufIov>> {
    let mut cur = IovCursor::new(offset, len, chunk);
    let mut calls = Vec::new();
    while !cur.is_done() {
        let mut iovs = Vec::new();
        let n = cur.batch(MAX_IOV, &mut iovs);
        cur.advance(n);
        calls.push(iovs);
    }
    calls
}

// ---------------------------------------------------------------------------------------------
// Completions
// ---------------------------------------------------------------------------------------------

/// `struct sock_extended_err` (include/uapi/linux/errqueue.h; declared in `sys/uapi.rs` with
/// its layout asserted), under the name the send path uses: `from_bytes` / `to_bytes` are its
/// codec.
pub use crate::sys::uapi::sock_extended_err as SockExtendedErr;

/// One zerocopy completion: sends `lo..=hi` (the kernel's u32 send numbers) are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZerocopyCompletion {
    /// First send number (`ee_info`).
    pub lo: u32,
    /// Last send number, inclusive (`ee_data`).
    pub hi: u32,
    /// `ee_code` had `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data.
    pub copied: bool,
}

/// Name of an `SO_EE_ORIGIN_*` value, for messages.
pub(crate) fn ee_origin_name(origin: u8) -> &'static str {
    match origin {
        0 => "SO_EE_ORIGIN_NONE",
        1 => "SO_EE_ORIGIN_LOCAL",
        2 => "SO_EE_ORIGIN_ICMP",
        3 => "SO_EE_ORIGIN_ICMP6",
        4 => "SO_EE_ORIGIN_TXSTATUS",
        5 => "SO_EE_ORIGIN_ZEROCOPY",
        6 => "SO_EE_ORIGIN_TXTIME",
        _ => "unknown origin",
    }
}

/// Decodes one error-queue message into a zerocopy completion.
///
/// Failures (`Error::Failure`, each naming what was wrong): `MSG_CTRUNC` in `read.msg_flags`
/// (the kernel had more control data than fits: completions may be lost); no
/// `SOL_IP`/`IP_RECVERR` or `SOL_IPV6`/`IPV6_RECVERR` cmsg; an origin other than
/// `SO_EE_ORIGIN_ZEROCOPY`; a non-zero `ee_errno`. `Error::Decode` for malformed cmsgs or a
/// payload shorter than `struct sock_extended_err`.
pub fn parse_completion(read: &ErrqueueRead, control: &[u8]) -> Result<ZerocopyCompletion> {
    if read.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(Error::Failure(format!(
            "zerocopy completion truncated: recvmsg(MSG_ERRQUEUE) set MSG_CTRUNC (control buffer \
             of {} bytes too small); completions may be lost",
            control.len()
        )));
    }
    if read.control_len > control.len() {
        return Err(Error::Decode {
            what: "recvmsg(MSG_ERRQUEUE) msg_controllen".into(),
            detail: format!(
                "{} bytes reported for a {}-byte buffer",
                read.control_len,
                control.len()
            ),
        });
    }
    let cmsgs = walk_cmsgs(&control[..read.control_len]).collect::<Result<Vec<RawCmsg>>>()?;
    let recverr = cmsgs.iter().find(|c| {
        (c.level == libc::SOL_IP && c.ty == libc::IP_RECVERR)
            || (c.level == libc::SOL_IPV6 && c.ty == libc::IPV6_RECVERR)
    });
    let Some(&RawCmsg {
        level, ty, payload, ..
    }) = recverr
    else {
        let seen = cmsgs.iter().map(|c| {
            let (level, ty, len) = (c.level, c.ty, c.payload.len());
            format!("level {level} type {ty} ({len} bytes)")
        });
        let seen = seen.collect::<Vec<_>>().join(", ");
        return Err(Error::Failure(format!(
            "error-queue message without an IP_RECVERR/IPV6_RECVERR cmsg (got {})",
            if seen.is_empty() { "no cmsg" } else { &seen }
        )));
    };
    let ee = SockExtendedErr::from_bytes(payload).map_err(|_| Error::Decode {
        what: "sock_extended_err".into(),
        detail: format!(
            "level {level} type {ty} payload of {} bytes, need {SOCK_EXTENDED_ERR_LEN}",
            payload.len()
        ),
    })?;
    if ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY {
        let errno = if ee.ee_errno != 0 {
            format!(", ee_errno {}", errno_display(ee.ee_errno as i32))
        } else {
            String::new()
        };
        return Err(Error::Failure(format!(
            "error-queue message has origin {} ({}){errno}, expected SO_EE_ORIGIN_ZEROCOPY (5): \
             not a zerocopy completion",
            ee.ee_origin,
            ee_origin_name(ee.ee_origin)
        )));
    }
    if ee.ee_errno != 0 {
        return Err(Error::Failure(format!(
            "zerocopy completion [{}, {}] reports an error: ee_errno {}",
            ee.ee_info,
            ee.ee_data,
            errno_display(ee.ee_errno as i32)
        )));
    }
    Ok(ZerocopyCompletion {
        lo: ee.ee_info,
        hi: ee.ee_data,
        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
    })
}

/// Which zerocopy sends are complete. Sends are numbered from 0 in the order they were made
/// (u64 here; the kernel's u32 counter wraps, and ranges are mapped back relative to the oldest
/// outstanding send). Completions may come in any order and cover any range of outstanding
/// sends; a range naming a send that was never made or is already complete is an error.
#[derive(Debug, Clone, Default)]
pub struct CompletionTracker {
    /// Every send below this number is complete.
    base: u64,
    /// Number of sends made.
    next: u64,
    /// Completion flags of sends `base..next`.
    done: VecDeque<bool>,
    /// Sends not complete.
    pending: u64,
}

impl CompletionTracker {
    /// No sends yet.
    pub fn new() -> CompletionTracker {
        CompletionTracker::default()
    }

    /// Records a send and returns its number.
    pub fn on_send(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        self.done.push_back(false);
        self.pending += 1;
        n
    }

    /// Sends made so far (= the next send's number).
    pub fn sends(&self) -> u64 {
        self.next
    }

    /// Sends not yet complete.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Every send numbered `<= send` is complete.
    pub fn complete_through(&self, send: u64) -> bool {
        send < self.base
    }

    /// The oldest incomplete send and the newest send, when any is pending.
    pub(crate) fn outstanding_range(&self) -> Option<(u64, u64)> {
        (self.pending > 0).then(|| (self.base, self.next - 1))
    }

    /// Marks `[lo, hi]` (the kernel's u32 numbers, inclusive) complete. Returns how many sends
    /// the range covers.
    ///
    /// Errors (`Error::Failure`): no send outstanding; the range reaches outside the
    /// outstanding sends (never made, or completed before); a send in it completed twice.
    pub fn complete(&mut self, lo: u32, hi: u32) -> Result<u64> {
        if self.base == self.next {
            return Err(Error::Failure(format!(
                "zerocopy completion [{lo}, {hi}] arrived with no send outstanding \
                 ({} sends made, all complete)",
                self.next
            )));
        }
        let lo64 = self.base + u64::from(lo.wrapping_sub(self.base as u32));
        let count = u64::from(hi.wrapping_sub(lo)) + 1;
        let hi64 = lo64 + count - 1;
        if hi64 >= self.next {
            return Err(Error::Failure(format!(
                "zerocopy completion [{lo}, {hi}] names sends that were never made or completed \
                 before (outstanding: sends {}..={})",
                self.base,
                self.next - 1
            )));
        }
        // Validate the whole range before marking anything: a rejected range changes nothing.
        let first = (lo64 - self.base) as usize;
        let last = (hi64 - self.base) as usize;
        if let Some(i) = self.done.range(first..=last).position(|&d| d) {
            return Err(Error::Failure(format!(
                "zerocopy completion [{lo}, {hi}] completes send {} a second time",
                lo64 + i as u64
            )));
        }
        for slot in self.done.range_mut(first..=last) {
            *slot = true;
        }
        self.pending -= count;
        while self.done.front() == Some(&true) {
            self.done.pop_front();
            self.base += 1;
        }
        Ok(count)
    }
}

// ---------------------------------------------------------------------------------------------
// dma-buf regions
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    offset: u64,
    len: u64,
    /// The last send of the piece, once it is fully sent.
    last_send: Option<u64>,
}

/// Ring-buffer allocation of dma-buf regions (bytes): pieces are placed one after the other
/// and wrap to offset 0 when the end does not fit; regions are released oldest first, and only
/// when every send of their piece completed. A piece never straddles the end of the buffer.
#[derive(Debug, Clone)]
pub struct RegionRing {
    size: u64,
    live: VecDeque<Region>,
}

impl RegionRing {
    /// An empty ring over a dma-buf of `size` bytes.
    pub fn new(size: u64) -> RegionRing {
        RegionRing {
            size,
            live: VecDeque::new(),
        }
    }

    /// Places a region of `len` bytes; `None` when no free space fits it now (or `len` is 0
    /// or larger than the buffer). The new region is in use until [`RegionRing::seal`] names
    /// its last send and that send completed.
    pub(crate) fn try_alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 || len > self.size {
            return None;
        }
        let offset = match (self.live.front(), self.live.back()) {
            (Some(head), Some(tail)) => {
                let tail_end = tail.offset + tail.len;
                if tail.offset >= head.offset {
                    // In use: [head, tail_end). Free: [tail_end, size) and [0, head).
                    if tail_end + len <= self.size {
                        tail_end
                    } else if len <= head.offset {
                        0
                    } else {
                        return None;
                    }
                } else if tail_end + len <= head.offset {
                    // Wrapped. In use: [head, size) and [0, tail_end). Free: [tail_end, head).
                    tail_end
                } else {
                    return None;
                }
            }
            _ => 0,
        };
        self.live.push_back(Region {
            offset,
            len,
            last_send: None,
        });
        Some(offset)
    }

    /// The newest region's piece is fully sent; `last_send` is its last send number.
    pub fn seal(&mut self, last_send: u64) {
        if let Some(r) = self.live.back_mut() {
            r.last_send = Some(last_send);
        }
    }

    /// Releases the oldest regions whose sends all completed; returns how many.
    pub fn release(&mut self, tracker: &CompletionTracker) -> usize {
        let mut n = 0;
        while let Some(r) = self.live.front() {
            match r.last_send {
                Some(s) if tracker.complete_through(s) => {
                    self.live.pop_front();
                    n += 1;
                }
                _ => break,
            }
        }
        n
    }
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

/// Where the bytes to send come from.
pub trait TxSource {
    /// Fills `out` (cleared first) with the next piece of at most `max` bytes (`max` ≥ 1).
    /// `Ok(false)` at the end of the input.
    fn next_piece(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool>;

    /// What the source is, for the summary (`"stdin"`, `"pattern"`).
    fn label(&self) -> &'static str;

    /// The CRC-32 of the first `sent` bytes this source produced when it is known without
    /// hashing them (a test stream: [`StreamCrc32`]); `None` (the default) when the sender
    /// must hash what it sends. Whether it is `None` does not depend on `sent`.
    fn sent_crc(&self, sent: u64) -> Option<StreamCrc32> {
        let _ = sent;
        None
    }
}

/// Lines of a reader, as ncdevmem.c reads stdin with `getline`: each piece is one line
/// including its `\n` (the last line may lack it), so the peer receives exactly the input. A
/// line longer than `max` bytes is sent as several pieces.
#[derive(Debug)]
pub struct LineSource<'s, R: BufRead> {
    reader: R,
    stop: &'s AtomicI32,
}

impl<'s, R: BufRead> LineSource<'s, R> {
    /// Lines of `reader`; a read interrupted by a signal looks at `stop` before retrying.
    pub fn new(reader: R, stop: &'s AtomicI32) -> Self {
        LineSource { reader, stop }
    }
}

impl<R: BufRead> TxSource for LineSource<'_, R> {
    fn next_piece(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        while out.len() < max {
            let avail = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    crate::signals::check_flag(self.stop)?;
                    continue;
                }
                Err(e) => return Err(Error::io("read(stdin)", &e)),
            };
            if avail.is_empty() {
                break;
            }
            let room = (max - out.len()).min(avail.len());
            let (take, line_end) = match avail[..room].iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (room, false),
            };
            out.extend_from_slice(&avail[..take]);
            self.reader.consume(take);
            if line_end {
                break;
            }
        }
        Ok(!out.is_empty())
    }

    fn label(&self) -> &'static str {
        "stdin"
    }
}

/// `total` bytes of a test stream (the `-v` pattern or the `--seed` keyed stream) in pieces of
/// at most `piece` bytes, optionally with every bit of one stream byte flipped (a validator
/// test aid).
#[derive(Debug, Clone)]
pub struct PatternSource {
    pattern: Pattern,
    total: u64,
    produced: u64,
    piece: usize,
    corrupt_offset: Option<u64>,
}

impl PatternSource {
    /// `total` bytes of the stream `spec`, `piece` bytes at a time (0 = as large as the
    /// sender allows). Errors: `Error::Usage` for a bad period.
    pub fn new(
        spec: StreamSpec,
        total: u64,
        piece: usize,
        corrupt_offset: Option<u64>,
    ) -> Result<Self> {
        Ok(PatternSource {
            pattern: Pattern::from_spec(spec)?,
            total,
            produced: 0,
            piece: if piece == 0 { usize::MAX } else { piece },
            corrupt_offset,
        })
    }
}

impl TxSource for PatternSource {
    fn next_piece(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool> {
        let left = self.total - self.produced;
        let n = (max.min(self.piece) as u64).min(left) as usize;
        if n == 0 {
            out.clear();
            return Ok(false);
        }
        // Every byte is overwritten by the fill: resize without clearing first, so a piece of
        // the previous length costs no zeroing pass.
        out.resize(n, 0);
        self.pattern.fill(out, self.produced);
        if let Some(off) = self.corrupt_offset {
            if off >= self.produced && off < self.produced + n as u64 {
                out[(off - self.produced) as usize] ^= 0xff;
            }
        }
        self.produced += n as u64;
        Ok(true)
    }

    fn label(&self) -> &'static str {
        "pattern"
    }

    /// The periodic stream's CRC from one period; none for the keyed stream, whose receiver
    /// checks every byte (hashing them would cost twice what filling them does); hashed when a
    /// byte is flipped (`corrupt_offset`).
    fn sent_crc(&self, sent: u64) -> Option<StreamCrc32> {
        if self.corrupt_offset.is_some() {
            return None;
        }
        Some(if self.pattern.crc_without_data() {
            StreamCrc32::of_all(self.pattern.crc32(sent))
        } else {
            StreamCrc32 {
                value: None,
                from: sent,
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------

/// Counters of one devmem TX run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TxStats {
    /// Source label (`"stdin"`, `"pattern"`).
    pub source: &'static str,
    /// The TX binding id carried in every cmsg.
    pub dmabuf_id: u32,
    /// Payload bytes the kernel accepted.
    pub bytes: u64,
    /// Pieces written into the dma-buf and sent.
    pub pieces: u64,
    /// `sendmsg` calls that accepted data (each takes one zerocopy send number).
    pub sends: u64,
    /// Of those, calls that accepted fewer bytes than offered (continued by the next call).
    pub short_sends: u64,
    /// iovs handed to the kernel, over all `sendmsg` calls.
    pub iovs: u64,
    /// Error-queue messages (zerocopy completions) read.
    pub completions: u64,
    /// Sends those completions covered.
    pub completed_sends: u64,
    /// Completions flagged `SO_EE_CODE_ZEROCOPY_COPIED` (the kernel copied the data).
    pub copied_completions: u64,
    /// Times the dma-buf was full and the sender waited for completions.
    pub buffer_full_waits: u64,
    /// `sendmsg` calls that failed with `ENOBUFS`/`EAGAIN` and were retried after waiting.
    pub enobufs_retries: u64,
    /// Calls interrupted by a signal (`EINTR`) and retried.
    pub eintr_retries: u64,
    /// From the first send to the last completion.
    pub elapsed: Duration,
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the payload bytes the kernel accepted, in
    /// stream order (none for the keyed stream: [`StreamCrc32`], [`TxSource::sent_crc`]);
    /// equal to the receiver's when the stream arrived intact.
    pub crc32: StreamCrc32,
}

impl TxStats {
    /// Throughput in Gbit/s (10^9 bits per second) over [`TxStats::elapsed`].
    pub fn gbit_per_s(&self) -> f64 {
        gbit_per_s(self.bytes, self.elapsed)
    }

    /// One human line for stderr: `tx ok: …` after a successful run (ncdevmem.c prints
    /// "ncdevmem: tx ok"), `tx failed after: …` otherwise.
    pub fn summary_line(&self, ok: bool) -> String {
        format!(
            "{}: {} bytes from {} in {} sendmsg calls ({} iovs, {} pieces, {} short), \
             {} completions for {} sends ({} copied by the kernel), dmabuf id {}, \
             {:.3} s = {:.3} Gbit/s, {}",
            if ok { "tx ok" } else { "tx failed after" },
            self.bytes,
            self.source,
            self.sends,
            self.iovs,
            self.pieces,
            self.short_sends,
            self.completions,
            self.completed_sends,
            self.copied_completions,
            self.dmabuf_id,
            self.elapsed.as_secs_f64(),
            self.gbit_per_s(),
            self.crc32.describe()
        )
    }

    /// The counters every devmem TX summary has ([`crate::summary::DevmemTxCounters`]).
    pub fn counters(&self) -> crate::summary::DevmemTxCounters {
        crate::summary::DevmemTxCounters {
            dmabuf_id: self.dmabuf_id,
            bytes: self.bytes,
            completed_sends: self.completed_sends,
            sends: self.sends,
            completions: self.completions,
            copied_completions: self.copied_completions,
            crc32: self.crc32.value,
            elapsed_s: self.elapsed.as_secs_f64(),
            gbit_per_s: self.gbit_per_s(),
        }
    }

    /// The counters of one sender beyond [`TxStats::counters`]
    /// ([`crate::summary::DevmemTxDetail`]).
    pub fn detail(&self) -> crate::summary::DevmemTxDetail {
        crate::summary::DevmemTxDetail {
            pieces: self.pieces,
            short_sends: self.short_sends,
            iovs: self.iovs,
            buffer_full_waits: self.buffer_full_waits,
            enobufs_retries: self.enobufs_retries,
            eintr_retries: self.eintr_retries,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sender
// ---------------------------------------------------------------------------------------------

/// Settings of a devmem TX run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxConfig {
    /// The bind-tx binding id (`NETDEV_A_DMABUF_ID`, ≥ 1) for the `SCM_DEVMEM_DMABUF` cmsg.
    pub dmabuf_id: u32,
    /// `-z`: split each send into iovs of at most this many bytes.
    pub chunk: Option<u32>,
    /// Largest piece in bytes (capped at the dma-buf size).
    pub max_piece: usize,
    /// Longest wait without any completion arriving before the run fails.
    pub completion_timeout: Duration,
    /// How often waits wake up to look at the stop flag.
    pub poll_tick: Duration,
    /// Log every send and completion (`-V`), like ncdevmem.c's `tx complete [lo,hi]`.
    pub verbose: bool,
}

impl TxConfig {
    /// Defaults for binding `dmabuf_id`: no `-z`, [`DEFAULT_MAX_PIECE`],
    /// [`DEFAULT_COMPLETION_TIMEOUT`], [`DEFAULT_POLL_TICK`], quiet.
    pub fn new(dmabuf_id: u32) -> TxConfig {
        TxConfig {
            dmabuf_id,
            chunk: None,
            max_piece: DEFAULT_MAX_PIECE,
            completion_timeout: DEFAULT_COMPLETION_TIMEOUT,
            poll_tick: DEFAULT_POLL_TICK,
            verbose: false,
        }
    }
}

/// Sends everything `source` produces through `sock` from `mem`, then waits until every send
/// completed. Returns the counters also when the run failed (a failed run is still a
/// measurement), with the outcome.
///
/// Errors: `Error::Usage` for dmabuf id 0 (the kernel would read the offsets as addresses) or
/// an empty dma-buf; `Error::Sys` naming the failing call (`sendmsg(...)` with the binding id,
/// iov count, bytes and dma-buf offset; `recvmsg(MSG_ERRQUEUE)`; `poll(POLLERR)`; the dma-buf
/// sync); `Error::Failure` for a broken completion (see [`parse_completion`] and
/// [`CompletionTracker::complete`]); `Error::Timeout` when no completion arrives within
/// `cfg.completion_timeout` while one is awaited; `Error::Interrupted` when `stop` is set.
pub fn transmit<S, M, Src>(
    sock: &mut S,
    mem: &mut M,
    source: &mut Src,
    cfg: &TxConfig,
    stop: &AtomicI32,
    log: &mut dyn Write,
) -> (TxStats, Result<()>)
where
    S: TxSocket + ?Sized,
    M: TxMemory + ?Sized,
    Src: TxSource + ?Sized,
{
    let mut tx = Sender {
        ring: RegionRing::new(mem.size() as u64),
        sock,
        mem,
        cfg,
        stop,
        log,
        tracker: CompletionTracker::default(),
        stats: TxStats {
            source: source.label(),
            dmabuf_id: cfg.dmabuf_id,
            ..TxStats::default()
        },
        iovs: Vec::with_capacity(MAX_IOV),
        control: vec![0; ERRQUEUE_CONTROL_LEN],
        started: None,
        crc: source.sent_crc(0).is_none().then(crc32fast::Hasher::new),
    };
    let result = tx.run(source);
    tx.stats.elapsed = tx.started.map(|t| t.elapsed()).unwrap_or_default();
    tx.stats.crc32 = source.sent_crc(tx.stats.bytes).unwrap_or_else(|| {
        StreamCrc32::of_all(tx.crc.as_ref().map_or(0, |h| h.clone().finalize()))
    });
    (tx.stats, result)
}

struct Sender<'a, S: ?Sized, M: ?Sized> {
    sock: &'a mut S,
    mem: &'a mut M,
    cfg: &'a TxConfig,
    stop: &'a AtomicI32,
    log: &'a mut dyn Write,
    ring: RegionRing,
    tracker: CompletionTracker,
    stats: TxStats,
    iovs: Vec<DmabufIov>,
    control: Vec<u8>,
    started: Option<Instant>,
    /// CRC-32 of the bytes accepted so far, when the source does not know it
    /// ([`TxSource::sent_crc`]).
    crc: Option<crc32fast::Hasher>,
}

impl<S: TxSocket + ?Sized, M: TxMemory + ?Sized> Sender<'_, S, M> {
    fn run<Src: TxSource + ?Sized>(&mut self, source: &mut Src) -> Result<()> {
        if self.cfg.dmabuf_id == 0 {
            return Err(Error::Usage(
                "devmem TX needs a bind-tx binding id >= 1 (id 0 means \"no dma-buf\" to the \
                 kernel, which would then read the dma-buf offsets as addresses)"
                    .into(),
            ));
        }
        let max_piece = self.cfg.max_piece.min(self.mem.size());
        if max_piece == 0 {
            return Err(Error::Usage(format!(
                "devmem TX: piece size {} bytes over a dma-buf of {} bytes leaves nothing to send",
                self.cfg.max_piece,
                self.mem.size()
            )));
        }
        let mut piece = Vec::with_capacity(max_piece.min(DEFAULT_MAX_PIECE));
        loop {
            crate::signals::check_flag(self.stop)?;
            if !source.next_piece(max_piece, &mut piece)? {
                break;
            }
            self.send_piece(&piece)?;
        }
        self.finish()
    }

    /// Places `data` in a free region, writes it there and sends it.
    fn send_piece(&mut self, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        let region = self.alloc(len)?;
        self.mem.write_at(region, data)?;
        self.started.get_or_insert_with(Instant::now);
        // The kernel's offsets are the dma-buf's, the ring's this memory's.
        let offset = self.mem.dmabuf_offset() + region;
        let mut cur = IovCursor::new(offset, data.len(), self.cfg.chunk);
        let mut backoff = Backoff::default();
        while !cur.is_done() {
            crate::signals::check_flag(self.stop)?;
            let batch = cur.batch(MAX_IOV, &mut self.iovs);
            match self.sock.send_dmabuf(&self.iovs, self.cfg.dmabuf_id) {
                Ok(0) => {
                    return Err(Error::Failure(format!(
                        "{} accepted 0 bytes",
                        self.send_call(batch)
                    )))
                }
                Ok(n) if n as u64 > batch => {
                    return Err(Error::Failure(format!(
                        "{} returned {n}, more than the {batch} bytes offered",
                        self.send_call(batch)
                    )))
                }
                Ok(n) => {
                    let send = self.tracker.on_send();
                    self.stats.sends += 1;
                    self.stats.iovs += self.iovs.len() as u64;
                    self.stats.bytes += n as u64;
                    self.stats.short_sends += u64::from((n as u64) < batch);
                    if self.cfg.verbose {
                        crate::elog_to!(
                            self.log,
                            "tx send {send}: {n} of {batch} bytes, {} iovs from dmabuf offset {}",
                            self.iovs.len(),
                            cur.pos
                        );
                    }
                    let at = (cur.pos - offset) as usize;
                    if let Some(h) = &mut self.crc {
                        h.update(&data[at..at + n]);
                    }
                    cur.advance(n as u64);
                    backoff.reset();
                }
                Err(libc::EINTR) => {
                    self.stats.eintr_retries += 1;
                    backoff.pause();
                }
                Err(errno @ (libc::ENOBUFS | libc::EAGAIN)) => {
                    // ENOBUFS: the socket's optmem for zerocopy notifications is used up; it
                    // frees as completions are read.
                    if self.tracker.pending() == 0 {
                        return Err(Error::sys(self.send_call(batch), errno));
                    }
                    self.stats.enobufs_retries += 1;
                    self.wait_progress("a send refused with ENOBUFS to be retried")?;
                }
                Err(errno) => return Err(Error::sys(self.send_call(batch), errno)),
            }
        }
        self.ring.seal(self.tracker.sends() - 1);
        self.stats.pieces += 1;
        self.drain().map(drop)
    }

    /// `sendmsg(...)` as named in errors: the binding id, the batch and where it starts.
    fn send_call(&self, batch: u64) -> String {
        format!(
            "sendmsg(MSG_ZEROCOPY, SCM_DEVMEM_DMABUF id {}, {} iovs, {batch} bytes from dmabuf \
             offset {})",
            self.cfg.dmabuf_id,
            self.iovs.len(),
            self.iovs.first().map_or(0, |i| i.offset)
        )
    }

    /// A free region of `len` bytes, waiting for completions while the dma-buf is full.
    fn alloc(&mut self, len: u64) -> Result<u64> {
        loop {
            self.ring.release(&self.tracker);
            if let Some(offset) = self.ring.try_alloc(len) {
                return Ok(offset);
            }
            self.stats.buffer_full_waits += 1;
            self.wait_progress("dma-buf space to be released")?;
        }
    }

    /// Waits for all outstanding sends.
    fn finish(&mut self) -> Result<()> {
        self.drain()?;
        while self.tracker.pending() > 0 {
            self.wait_progress("the last sends to complete")?;
        }
        self.ring.release(&self.tracker);
        Ok(())
    }

    /// Waits until at least one completion was read, for up to the completion timeout.
    fn wait_progress(&mut self, why: &str) -> Result<()> {
        let timeout = self.cfg.completion_timeout;
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::default();
        loop {
            if self.drain()? > 0 {
                return Ok(());
            }
            crate::signals::check_flag(self.stop)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let what = match self.tracker.outstanding_range() {
                    Some((a, b)) => format!(
                        "{} of sends {a}..={b} not completed",
                        self.tracker.pending()
                    ),
                    None => "no send outstanding".to_string(),
                };
                return Err(Error::Timeout(format!(
                    "did not receive tx completion within {} ms while waiting for {why}: {what} \
                     (zerocopy completions arrive when the peer has acknowledged the data)",
                    timeout.as_millis()
                )));
            }
            match self.sock.wait_errqueue(left.min(self.cfg.poll_tick)) {
                Ok(true) => {
                    // Something is pending; if the error queue turns out empty it is a socket
                    // error (e.g. a reset connection).
                    if self.drain()? > 0 {
                        return Ok(());
                    }
                    match self.sock.socket_error() {
                        // Readiness without a completion or an error (POLLHUP after the peer
                        // closed, a spurious wake-up): wait a little instead of spinning until
                        // the completion timeout.
                        Ok(0) | Err(libc::EINTR) => {
                            std::thread::sleep(left.min(Duration::from_millis(10)));
                        }
                        Ok(errno) => {
                            return Err(Error::sys(
                                format!("connection failed while waiting for {why} (SO_ERROR)"),
                                errno,
                            ))
                        }
                        Err(errno) => {
                            return Err(Error::sys("getsockopt(SO_ERROR)", errno));
                        }
                    }
                }
                Ok(false) => {}
                Err(libc::EINTR) => backoff.pause(),
                Err(errno) => return Err(Error::sys("poll(POLLERR)", errno)),
            }
        }
    }

    /// Reads every queued completion without blocking; returns how many were read.
    fn drain(&mut self) -> Result<u64> {
        let mut n = 0;
        let mut backoff = Backoff::default();
        loop {
            match self.sock.recv_errqueue(&mut self.control) {
                Ok(read) => {
                    let c = parse_completion(&read, &self.control)?;
                    let covered = self.tracker.complete(c.lo, c.hi)?;
                    self.stats.completions += 1;
                    self.stats.completed_sends += covered;
                    self.stats.copied_completions += u64::from(c.copied);
                    if self.cfg.verbose {
                        crate::elog_to!(
                            self.log,
                            "tx complete [{},{}]{}",
                            c.lo,
                            c.hi,
                            if c.copied { " (copied)" } else { "" }
                        );
                    }
                    n += 1;
                }
                Err(libc::EAGAIN) => break,
                Err(libc::EINTR) => {
                    self.stats.eintr_retries += 1;
                    crate::signals::check_flag(self.stop)?;
                    backoff.pause();
                }
                Err(errno) => {
                    return Err(Error::sys("recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)", errno));
                }
            }
        }
        self.ring.release(&self.tracker);
        Ok(n)
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::sys::zerocopy::encode_dmabuf_id_cmsg;

    /// The cmsg ncdevmem.c builds for binding id 7 (x86_64; synthetic from the uapi layout).
    #[rustfmt::skip]
    const DMABUF_ID_7: [u8; 24] = [
        0x14, 0, 0, 0, 0, 0, 0, 0, // cmsg_len 20 = CMSG_LEN(4)
        0x01, 0, 0, 0,             // cmsg_level SOL_SOCKET
        0x4f, 0, 0, 0,             // cmsg_type 79 SCM_DEVMEM_DMABUF
        0x07, 0, 0, 0,             // u32 binding id 7
        0, 0, 0, 0,                // padding to CMSG_SPACE(4) = 24
    ];

    #[test]
    fn dmabuf_id_cmsg_bytes() {
        assert_eq!(encode_dmabuf_id_cmsg(7), DMABUF_ID_7);
        let parsed: Vec<_> = walk_cmsgs(&DMABUF_ID_7).map(Result::unwrap).collect();
        assert_eq!(
            parsed,
            vec![RawCmsg {
                level: 1,
                ty: 79,
                offset: 0,
                payload: &[7u8, 0, 0, 0][..]
            }]
        );
    }

    /// A zerocopy completion for sends 3..=9, kernel copied (synthetic from the uapi layout;
    /// the real-kernel test reads live ones).
    #[rustfmt::skip]
    const EE_3_9_COPIED: [u8; 16] = [
        0, 0, 0, 0,  // ee_errno 0
        5,           // ee_origin SO_EE_ORIGIN_ZEROCOPY
        0,           // ee_type
        1,           // ee_code SO_EE_CODE_ZEROCOPY_COPIED
        0,           // ee_pad
        3, 0, 0, 0,  // ee_info 3 (first send)
        9, 0, 0, 0,  // ee_data 9 (last send, inclusive)
    ];

    #[test]
    fn sock_extended_err_round_trips() {
        let ee = SockExtendedErr {
            ee_origin: 5,
            ee_code: 1,
            ee_info: 3,
            ee_data: 9,
            ..SockExtendedErr::default()
        };
        assert_eq!(ee.to_bytes(), EE_3_9_COPIED);
        assert_eq!(SockExtendedErr::from_bytes(&EE_3_9_COPIED).ok(), Some(ee));
        assert_eq!(SockExtendedErr::from_bytes(&EE_3_9_COPIED[..15]).ok(), None);
    }

    #[test]
    fn iov_cursor_splits_at_chunk_boundaries_and_resumes_mid_iov() {
        let mut c = IovCursor::new(100, 10, Some(3));
        let mut v = Vec::new();
        assert_eq!(c.batch(MAX_IOV, &mut v), 10);
        let want = [(100, 3), (103, 3), (106, 3), (109, 1)];
        let got: Vec<_> = v.iter().map(|i| (i.offset, i.len)).collect();
        assert_eq!(got, want);
        // A short send of 4 bytes stops inside the second iov: resume with its last 2 bytes.
        c.advance(4);
        assert_eq!(c.remaining(), 6);
        assert_eq!(c.batch(2, &mut v), 5);
        let got: Vec<_> = v.iter().map(|i| (i.offset, i.len)).collect();
        assert_eq!(got, [(104, 2), (106, 3)]);
        c.advance(6);
        assert!(c.is_done());
        assert_eq!(c.batch(MAX_IOV, &mut v), 0);
        assert!(v.is_empty());
    }

    /// A range that overlaps a completed send is refused as a whole: nothing in it is marked,
    /// so the sends it named can still complete later.
    #[test]
    fn tracker_rejected_range_changes_nothing() {
        let mut t = CompletionTracker::new();
        for _ in 0..4 {
            t.on_send();
        }
        assert_eq!(t.complete(2, 2).unwrap(), 1);
        let e = t.complete(0, 3).unwrap_err().to_string();
        assert!(e.contains("completes send 2 a second time"), "{e}");
        assert_eq!(t.pending(), 3);
        assert_eq!(t.outstanding_range(), Some((0, 3)));
        // Sends 0, 1 and 3 are still open: completing them works and empties the tracker.
        assert_eq!(t.complete(0, 1).unwrap(), 2);
        assert_eq!(t.complete(3, 3).unwrap(), 1);
        assert_eq!(t.pending(), 0);
        assert!(t.complete_through(3));
    }

    #[test]
    fn tracker_maps_wrapped_u32_numbers() {
        let mut t = CompletionTracker {
            base: u64::from(u32::MAX) - 1,
            next: u64::from(u32::MAX) - 1,
            ..CompletionTracker::default()
        };
        for _ in 0..4 {
            t.on_send();
        }
        // Sends 2^32-2 ..= 2^32+1 carry kernel numbers 0xffff_fffe, 0xffff_ffff, 0, 1.
        assert_eq!(t.complete(0xffff_fffe, 1).unwrap(), 4);
        assert_eq!(t.pending(), 0);
        assert!(t.complete_through(u64::from(u32::MAX) + 2));
    }
}
