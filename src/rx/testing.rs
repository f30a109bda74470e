//! Test doubles for the receive loop: a socket that answers `recvmsg` and
//! `SO_DEVMEM_DONTNEED` the way the kernel does ([`ScriptedSocket`]), a `Vec`-backed dma-buf
//! ([`VecMemory`]) and a helper that lays the `-v` pattern out over linear pieces and dmabuf
//! frags ([`PatternStream`]).
//!
//! The double follows net/ipv4/tcp.c `tcp_recvmsg_locked`/`tcp_recvmsg_dmabuf` and
//! net/core/sock.c `sock_devmem_dontneed` (behaviour, not code):
//! - one `recvmsg(MSG_SOCK_DEVMEM)` returns at most `data.len()` stream bytes, counting linear
//!   bytes (copied back to back into the iov) and dmabuf bytes (not copied);
//! - each piece delivered writes one 40-byte cmsg (`cmsghdr {cmsg_len 40, SOL_SOCKET,
//!   SCM_DEVMEM_LINEAR|SCM_DEVMEM_DMABUF}` + `struct dmabuf_cmsg`); the call stops when the
//!   control buffer has no room for the next one (no truncated cmsgs), and fails with
//!   [`ScriptedSocket::no_room_errno`] when not even the first fits;
//! - a frag cut short by the byte budget is finished in the next call with a new token;
//! - tokens are allocated lowest-free-first from 1 (the socket's token xarray allocates from 1);
//! - without `MSG_SOCK_DEVMEM`, devmem data gives `EFAULT`; readable (plain) data is copied
//!   normally with or without the flag, with no cmsgs;
//! - DONTNEED: 0 or more than 128 ranges → `EINVAL`; at most 1024 tokens are looked at per
//!   call; unknown tokens are skipped; the return is the number freed.
//!
//! This module is compiled into the library so integration tests and other modules' tests can
//! use it; nothing in the tool itself calls it.

use std::cell::Cell;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use super::{RecvOutcome, RxSocket, DEVMEM_CMSG_SPACE};
use crate::error::{Error, Result};
use crate::sys::uapi::{
    dmabuf_cmsg, dmabuf_token, encode_cmsghdr, DMABUF_CMSG_LEN, MAX_DONTNEED_FRAGS,
    MAX_DONTNEED_TOKENS, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR,
};
use crate::udmabuf::FragMemory;
use crate::validate::Pattern;

/// The kernel's internal `ETOOSMALL` (525), returned by `put_cmsg_notrunc` when the control
/// buffer cannot hold a devmem cmsg. net/ipv4/tcp.c passes it on when nothing was received in
/// the call; in the kernels read, user space sees `EFAULT` (`docs/kernel-interface.md#devmem-rx`).
/// Both end the run.
pub const ETOOSMALL: i32 = 525;

/// One piece of a devmem skb sequence, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes from an skb's linear part: copied into the iov, `SCM_DEVMEM_LINEAR` cmsg.
    Linear(Vec<u8>),
    /// A frag left in the dma-buf: `SCM_DEVMEM_DMABUF` cmsg.
    Dmabuf {
        /// Byte offset in the dma-buf (`dmabuf_cmsg.frag_offset`).
        frag_offset: u64,
        /// Bytes (`dmabuf_cmsg.frag_size`).
        size: u32,
        /// Binding id the frag claims (`dmabuf_cmsg.dmabuf_id`).
        dmabuf_id: u32,
        /// Token to hand out; `None` = allocate lowest-free like the kernel.
        token: Option<u32>,
    },
}

/// What the kernel has for the socket at the next call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Devmem skbs queued: delivered across as many `recvmsg` calls as the iov and control
    /// buffer sizes need.
    Data(Vec<Piece>),
    /// Readable (non-devmem) bytes queued: copied into the iov, no cmsgs.
    Plain(Vec<u8>),
    /// The next `recvmsg` fails with this errno.
    Errno(i32),
    /// The next `wait_readable` fails with this errno.
    PollErrno(i32),
    /// The next `recvmsg` that returns data also sets `MSG_CTRUNC`.
    CtruncNext,
    /// Nothing arrives for one poll: `wait_readable` sleeps its timeout and returns false;
    /// `recvmsg` would give `EAGAIN`.
    Idle,
    /// An arbitrary answer: the bytes are copied (as far as they fit), `bytes`,
    /// `msg_flags` and `control.len()` are returned as given (`control_len` is not clamped).
    /// Tokens of the `SCM_DEVMEM_DMABUF` cmsgs in the part of `control` that fits become
    /// outstanding.
    Raw {
        /// iov content.
        data: Vec<u8>,
        /// Control-buffer content.
        control: Vec<u8>,
        /// The `recvmsg` return.
        bytes: usize,
        /// `msg_flags`.
        msg_flags: i32,
    },
    /// The peer closed: `recvmsg` returns 0 from now on.
    Eof,
}

/// The bytes of one devmem cmsg as the kernel writes them (x86_64):
/// `cmsg_len` u64 = 40, `cmsg_level` i32 = `SOL_SOCKET` (1), `cmsg_type` i32 = `ty`
/// (78 `SCM_DEVMEM_LINEAR` or 79 `SCM_DEVMEM_DMABUF`), then `struct dmabuf_cmsg` (24 bytes);
/// 40 is already 8-aligned, so there is no padding.
pub fn encode_devmem_cmsg(ty: i32, c: &dmabuf_cmsg) -> [u8; DEVMEM_CMSG_SPACE] {
    let mut b = [0u8; DEVMEM_CMSG_SPACE];
    b[..16].copy_from_slice(&encode_cmsghdr(DMABUF_CMSG_LEN, libc::SOL_SOCKET, ty));
    b[16..].copy_from_slice(&c.to_bytes());
    b
}

/// The socket's outstanding tokens, handed out lowest free first from 1 as the kernel's xarray
/// does: a bitmap for the ids below [`TokenSet::BITMAP_IDS`] (so a 1 GiB benchmark's 262,144
/// tokens cost a few ns each) and an ordered set for script-given ids above it.
#[derive(Debug, Clone, Default)]
struct TokenSet {
    /// Bit `t` set: token `t` is outstanding.
    bits: Vec<u64>,
    /// Every word before this one is full (no free id below `64 * hint`, except 0).
    hint: usize,
    high: BTreeSet<u32>,
}

impl TokenSet {
    const BITMAP_IDS: u32 = 1 << 22;

    fn insert(&mut self, t: u32) -> bool {
        if t >= Self::BITMAP_IDS {
            return self.high.insert(t);
        }
        let (w, b) = ((t / 64) as usize, t % 64);
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        let was = self.bits[w] & (1 << b) != 0;
        self.bits[w] |= 1 << b;
        !was
    }

    fn remove(&mut self, t: u32) -> bool {
        if t >= Self::BITMAP_IDS {
            return self.high.remove(&t);
        }
        let (w, b) = ((t / 64) as usize, t % 64);
        match self.bits.get_mut(w) {
            Some(word) if *word & (1 << b) != 0 => {
                *word &= !(1 << b);
                self.hint = self.hint.min(w);
                true
            }
            _ => false,
        }
    }

    /// The lowest id ≥ 1 not outstanding.
    fn lowest_free(&mut self) -> u32 {
        let mut w = self.hint;
        loop {
            // Id 0 is never handed out: treat it as taken.
            let word = self.bits.get(w).copied().unwrap_or(0) | u64::from(w == 0);
            if word != u64::MAX {
                self.hint = w;
                let mut t = (w as u32) * 64 + word.trailing_ones();
                // Past a full bitmap: skip the script-given ids held above it.
                while self.high.contains(&t) {
                    t += 1;
                }
                return t;
            }
            w += 1;
        }
    }

    fn to_vec(&self) -> Vec<u32> {
        let low = self.bits.iter().enumerate().flat_map(|(w, &word)| {
            (0..64u32)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w as u32 * 64 + b)
        });
        low.chain(self.high.iter().copied()).collect()
    }
}

/// A scripted [`RxSocket`]: replays [`Step`]s with the kernel's buffer and token rules, and
/// records every `SO_DEVMEM_DONTNEED` call.
#[derive(Debug, Clone)]
pub struct ScriptedSocket {
    steps: VecDeque<Step>,
    ctrunc_next: bool,
    outstanding: TokenSet,
    dontneed_log: Vec<Vec<(u32, u32)>>,
    short_dontneed: VecDeque<usize>,
    recvmsg_calls: u64,
    wait_calls: u64,
    /// errno for a devmem `recvmsg` whose control buffer cannot hold the first cmsg
    /// (default [`ETOOSMALL`]).
    pub no_room_errno: i32,
}

impl ScriptedSocket {
    /// A socket that will play `steps` in order (then behaves as closed).
    pub fn new(steps: Vec<Step>) -> ScriptedSocket {
        ScriptedSocket {
            steps: steps.into(),
            ctrunc_next: false,
            outstanding: TokenSet::default(),
            dontneed_log: Vec::new(),
            short_dontneed: VecDeque::new(),
            recvmsg_calls: 0,
            wait_calls: 0,
            no_room_errno: ETOOSMALL,
        }
    }

    /// Appends a step.
    pub fn push(&mut self, step: Step) {
        self.steps.push_back(step);
    }

    /// The next `SO_DEVMEM_DONTNEED` call frees (and reports) `by` tokens fewer than it
    /// would; those stay outstanding (a leak). Calls queue up in order.
    pub fn short_next_dontneed(&mut self, by: usize) {
        self.short_dontneed.push_back(by);
    }

    /// Every `SO_DEVMEM_DONTNEED` call so far, as `(token_start, token_count)` ranges.
    pub fn dontneed_calls(&self) -> &[Vec<(u32, u32)>] {
        &self.dontneed_log
    }

    /// Tokens handed out and not released, ascending.
    pub fn outstanding_tokens(&self) -> Vec<u32> {
        self.outstanding.to_vec()
    }

    /// `recvmsg` calls so far.
    pub fn recvmsg_calls(&self) -> u64 {
        self.recvmsg_calls
    }

    /// `wait_readable` calls so far.
    pub fn wait_calls(&self) -> u64 {
        self.wait_calls
    }

    /// Steps not yet fully consumed.
    pub fn remaining_steps(&self) -> usize {
        self.steps.len()
    }

    fn alloc_token(&mut self) -> u32 {
        let t = self.outstanding.lowest_free();
        self.outstanding.insert(t);
        t
    }

    fn take_token(&mut self, explicit: Option<u32>) -> u32 {
        match explicit {
            Some(t) => {
                assert!(
                    self.outstanding.insert(t),
                    "test script error: token {t} is already outstanding"
                );
                t
            }
            None => self.alloc_token(),
        }
    }

    fn take_ctrunc(&mut self) -> i32 {
        if std::mem::take(&mut self.ctrunc_next) {
            libc::MSG_CTRUNC
        } else {
            0
        }
    }

    /// Delivers from the `Data` step at the front.
    fn deliver(&mut self, data: &mut [u8], control: &mut [u8]) -> Result<RecvOutcome, i32> {
        let Some(Step::Data(mut pieces)) = self.steps.pop_front() else {
            unreachable!("deliver is called with a Data step in front");
        };
        let mut budget = data.len();
        let (mut iov, mut ctl, mut sent, mut done) = (0usize, 0usize, 0usize, 0usize);
        while done < pieces.len() {
            if budget == 0 || control.len() - ctl < DEVMEM_CMSG_SPACE {
                break;
            }
            let (ty, n, finished, c) = match &mut pieces[done] {
                Piece::Linear(bytes) => {
                    let n = bytes.len().min(budget);
                    data[iov..iov + n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    iov += n;
                    let c = dmabuf_cmsg {
                        frag_offset: 0,
                        frag_size: n as u32,
                        frag_token: 0,
                        dmabuf_id: 0,
                        flags: 0,
                    };
                    (SCM_DEVMEM_LINEAR, n, bytes.is_empty(), c)
                }
                Piece::Dmabuf {
                    frag_offset,
                    size,
                    dmabuf_id,
                    token,
                } => {
                    let n = (*size as usize).min(budget);
                    let c = dmabuf_cmsg {
                        frag_offset: *frag_offset,
                        frag_size: n as u32,
                        frag_token: self.take_token(token.take()),
                        dmabuf_id: *dmabuf_id,
                        flags: 0,
                    };
                    *frag_offset = frag_offset.wrapping_add(n as u64);
                    *size -= n as u32;
                    (SCM_DEVMEM_DMABUF, n, *size == 0, c)
                }
            };
            done += usize::from(finished);
            budget -= n;
            sent += n;
            control[ctl..ctl + DEVMEM_CMSG_SPACE].copy_from_slice(&encode_devmem_cmsg(ty, &c));
            ctl += DEVMEM_CMSG_SPACE;
        }
        pieces.drain(..done);
        if !pieces.is_empty() {
            self.steps.push_front(Step::Data(pieces));
        }
        if ctl == 0 {
            return Err(self.no_room_errno);
        }
        Ok(RecvOutcome {
            bytes: sent,
            msg_flags: self.take_ctrunc(),
            control_len: ctl,
        })
    }
}

impl RxSocket for ScriptedSocket {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        self.recvmsg_calls += 1;
        loop {
            match self.steps.front_mut() {
                None | Some(Step::Eof) => return Ok(RecvOutcome::default()),
                Some(Step::Idle) => return Err(libc::EAGAIN),
                Some(Step::CtruncNext) => {
                    self.ctrunc_next = true;
                    self.steps.pop_front();
                }
                Some(Step::PollErrno(_)) => {
                    // Only wait_readable consumes it; a recvmsg sees nothing queued.
                    return Err(libc::EAGAIN);
                }
                Some(Step::Errno(e)) => {
                    let e = *e;
                    self.steps.pop_front();
                    return Err(e);
                }
                Some(Step::Plain(bytes)) => {
                    let n = bytes.len().min(data.len());
                    data[..n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    if bytes.is_empty() {
                        self.steps.pop_front();
                    }
                    return Ok(RecvOutcome {
                        bytes: n,
                        msg_flags: self.take_ctrunc(),
                        control_len: 0,
                    });
                }
                Some(Step::Raw { .. }) => {
                    let Some(Step::Raw {
                        data: d,
                        control: c,
                        bytes,
                        msg_flags,
                    }) = self.steps.pop_front()
                    else {
                        unreachable!("front was Raw");
                    };
                    let n = d.len().min(data.len());
                    data[..n].copy_from_slice(&d[..n]);
                    let m = c.len().min(control.len());
                    control[..m].copy_from_slice(&c[..m]);
                    // The kernel pinned a niov for every dmabuf cmsg it delivered.
                    for cm in super::cmsgs(&control[..m]).map_while(|r| r.ok()) {
                        if let super::Cmsg::Dmabuf(d) = cm {
                            self.outstanding.insert(d.frag_token);
                        }
                    }
                    return Ok(RecvOutcome {
                        bytes,
                        msg_flags: msg_flags | self.take_ctrunc(),
                        control_len: c.len(),
                    });
                }
                Some(Step::Data(_)) => {
                    if !devmem {
                        // Unreadable frags need MSG_SOCK_DEVMEM.
                        return Err(libc::EFAULT);
                    }
                    return self.deliver(data, control);
                }
            }
        }
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.dontneed_log.push(
            tokens
                .iter()
                .map(|t| (t.token_start, t.token_count))
                .collect(),
        );
        if tokens.is_empty() || tokens.len() > MAX_DONTNEED_TOKENS {
            return Err(libc::EINVAL);
        }
        let mut looked = 0usize;
        let mut freed = Vec::new();
        'ranges: for t in tokens {
            for i in 0..t.token_count {
                looked += 1;
                if looked > MAX_DONTNEED_FRAGS {
                    break 'ranges;
                }
                let id = t.token_start.wrapping_add(i);
                if self.outstanding.remove(id) {
                    freed.push(id);
                }
            }
        }
        let short = self
            .short_dontneed
            .pop_front()
            .unwrap_or(0)
            .min(freed.len());
        for id in freed.drain(freed.len() - short..) {
            self.outstanding.insert(id);
        }
        Ok(freed.len())
    }

    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.wait_calls += 1;
        match self.steps.front() {
            Some(Step::Idle) => {
                self.steps.pop_front();
                std::thread::sleep(timeout);
                Ok(false)
            }
            Some(Step::PollErrno(e)) => {
                let e = *e;
                self.steps.pop_front();
                Err(e)
            }
            _ => Ok(true),
        }
    }
}

/// A dma-buf stand-in over a `Vec<u8>`, with the same bounds checks as the real mapping and
/// counters for the CPU-access bracket.
#[derive(Debug, Clone, Default)]
pub struct VecMemory {
    bytes: Vec<u8>,
    begins: Cell<u64>,
    ends: Cell<u64>,
    reading: Cell<bool>,
    reads_outside: Cell<u64>,
    fail_begin: Cell<Option<i32>>,
}

impl VecMemory {
    /// `size` zero bytes.
    pub fn new(size: usize) -> VecMemory {
        VecMemory::from_vec(vec![0; size])
    }

    /// Wraps existing bytes.
    pub fn from_vec(bytes: Vec<u8>) -> VecMemory {
        VecMemory {
            bytes,
            ..VecMemory::default()
        }
    }

    /// Writes `data` at byte `offset` (what the NIC would DMA there). Panics when outside
    /// (a test-script error).
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.bytes[o..o + data.len()].copy_from_slice(data);
    }

    /// The whole region.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// The whole region, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// `begin_cpu_read` calls so far.
    pub fn begin_calls(&self) -> u64 {
        self.begins.get()
    }

    /// `end_cpu_read` calls so far.
    pub fn end_calls(&self) -> u64 {
        self.ends.get()
    }

    /// `bytes` calls made outside a `begin_cpu_read`/`end_cpu_read` bracket.
    pub fn reads_outside_cpu_access(&self) -> u64 {
        self.reads_outside.get()
    }

    /// The next `begin_cpu_read` fails with `errno` (as `DMA_BUF_IOCTL_SYNC` would).
    pub fn fail_next_begin(&self, errno: i32) {
        self.fail_begin.set(Some(errno));
    }
}

impl FragMemory for VecMemory {
    fn size(&self) -> usize {
        self.bytes.len()
    }

    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]> {
        // The same bounds check as the real mapping.
        let r = crate::sys::mmap::checked_range("VecMemory read", offset, len, self.bytes.len())?;
        if !self.reading.get() {
            self.reads_outside.set(self.reads_outside.get() + 1);
        }
        Ok(&self.bytes[r])
    }

    fn begin_cpu_read(&self) -> Result<()> {
        if let Some(e) = self.fail_begin.take() {
            return Err(Error::sys("ioctl(DMA_BUF_IOCTL_SYNC, START|READ)", e));
        }
        self.begins.set(self.begins.get() + 1);
        self.reading.set(true);
        Ok(())
    }

    fn end_cpu_read(&self) -> Result<()> {
        self.ends.set(self.ends.get() + 1);
        self.reading.set(false);
        Ok(())
    }
}

/// Lays the `-v` pattern out in stream order over [`Piece`]s: each call takes the next bytes of
/// the stream.
#[derive(Debug, Clone)]
pub struct PatternStream {
    pattern: Pattern,
    offset: u64,
    crc: crc32fast::Hasher,
}

impl PatternStream {
    /// A stream of period `period` at offset 0. Panics for a period outside 2..=256.
    pub fn new(period: u32) -> PatternStream {
        PatternStream {
            pattern: Pattern::new(period).expect("period in 2..=256"),
            offset: 0,
            crc: crc32fast::Hasher::new(),
        }
    }

    /// CRC-32 of the stream bytes taken so far (what a receiver of all of them reports).
    pub fn crc32(&self) -> u32 {
        self.crc.clone().finalize()
    }

    /// Stream offset (bytes) of the next piece.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next `len` stream bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.pattern.fill(&mut v, self.offset);
        self.offset += len as u64;
        self.crc.update(&v);
        v
    }

    /// The next `len` stream bytes as a linear piece.
    pub fn linear(&mut self, len: usize) -> Piece {
        Piece::Linear(self.bytes(len))
    }

    /// The next `size` stream bytes as a dmabuf frag at `frag_offset`, written into `mem`
    /// there; the token is allocated by the socket.
    pub fn dmabuf(
        &mut self,
        mem: &mut VecMemory,
        frag_offset: u64,
        size: u32,
        dmabuf_id: u32,
    ) -> Piece {
        let b = self.bytes(size as usize);
        mem.write(frag_offset, &b);
        Piece::Dmabuf {
            frag_offset,
            size,
            dmabuf_id,
            token: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TokenSet;

    #[test]
    fn tokens_are_handed_out_lowest_free_first_from_one() {
        let mut s = TokenSet::default();
        let take = |s: &mut TokenSet| {
            let t = s.lowest_free();
            assert!(s.insert(t));
            t
        };
        let first: Vec<u32> = (0..200).map(|_| take(&mut s)).collect();
        assert_eq!(first, (1..=200).collect::<Vec<_>>());
        assert!(s.remove(70) && s.remove(3) && !s.remove(3) && !s.remove(5000));
        assert_eq!((take(&mut s), take(&mut s), take(&mut s)), (3, 70, 201));
        // Script-given ids: far above the bitmap, and 0.
        assert!(s.insert(u32::MAX) && !s.insert(u32::MAX) && s.insert(0));
        assert_eq!(take(&mut s), 202);
        let all = s.to_vec();
        assert_eq!(all.len(), 204);
        assert_eq!((all[0], all[203]), (0, u32::MAX));
        assert!(s.remove(u32::MAX) && s.remove(0));
    }

    /// Once every bitmap id is outstanding, the lowest free id is the first one above the
    /// bitmap that no script-given token holds.
    #[test]
    fn past_a_full_bitmap_script_given_ids_are_skipped() {
        let mut s = TokenSet::default();
        let top = TokenSet::BITMAP_IDS;
        assert!(s.insert(top) && s.insert(top + 1) && s.insert(top + 3));
        for t in 1..top {
            assert!(s.insert(t));
        }
        assert_eq!(s.lowest_free(), top + 2);
        assert!(s.insert(top + 2));
        assert_eq!(s.lowest_free(), top + 4);
    }
}
