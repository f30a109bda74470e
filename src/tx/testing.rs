//! Test double for the devmem sender: a socket that answers `sendmsg(MSG_ZEROCOPY)` with an
//! `SCM_DEVMEM_DMABUF` cmsg and `recvmsg(MSG_ERRQUEUE)` the way the kernel does
//! ([`ScriptedTxSocket`]), over a `Vec`-backed dma-buf it shares with the memory handle
//! ([`ScriptedTxMemory`]), so it can check that no byte is rewritten while a send that uses it
//! is in flight.
//!
//! The double follows net/ipv4/tcp.c `tcp_sendmsg_locked`, net/core/sock.c `__sock_cmsg_send`,
//! net/core/skbuff.c `msg_zerocopy_*` and net/ipv4/ip_sockglue.c `ip_recv_error` (behaviour,
//! not code):
//! - a send is checked like the kernel checks it: the cmsg's binding id must be the bound one
//!   (else `EINVAL`), at most 1024 iovs (else `EMSGSIZE`), every iov inside the dma-buf (else
//!   `EFAULT`);
//! - each send that accepts data takes the next u32 send number, from 0;
//! - a completion is one error-queue message: a `SOL_IP`/`IP_RECVERR` cmsg with
//!   `struct sock_extended_err` and a zeroed `sockaddr_in` (payload 32 bytes, `cmsg_len` 48),
//!   `msg_flags` = `MSG_ERRQUEUE`; when the control buffer is too small the message is cut and
//!   `MSG_CTRUNC` set, as `put_cmsg` does;
//! - an empty error queue answers `EAGAIN`; `poll` reports `POLLERR` while it is not empty.
//!
//! Also a sender of several flows over plain TCP that can put one flow's bytes on another
//! flow's connection on purpose ([`send_flows`], [`Misdelivery`]), for tests of a multi-flow
//! receive (real kernel, VM guest).
//!
//! This module is compiled into the library so integration tests can use it; nothing in the
//! tool itself calls it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::devmem::{
    DmabufIov, ErrqueueRead, SockExtendedErr, TxMemory, TxSocket, MAX_IOV, SOCK_EXTENDED_ERR_LEN,
};
use crate::error::Result;
use crate::sys::uapi::{
    cmsg_align, cmsg_len, encode_cmsghdr, CMSGHDR_LEN, SO_EE_CODE_ZEROCOPY_COPIED,
    SO_EE_ORIGIN_ZEROCOPY,
};
use crate::validate::{Pattern, StreamSpec};

/// `sizeof(struct sockaddr_in)`: the offender address after `sock_extended_err` in an
/// `IP_RECVERR` cmsg.
const SOCKADDR_IN_LEN: usize = 16;

/// `sizeof(struct sockaddr_in6)`: the offender address in an `IPV6_RECVERR` cmsg.
const SOCKADDR_IN6_LEN: usize = 28;

/// When the double produces completions by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionPolicy {
    /// Each accepted send is completed at once, one message per send.
    Immediate,
    /// Nothing completes until the sender waits (`poll(POLLERR)`); then every in-flight send
    /// completes in one coalesced range.
    OnWaitCoalesced,
    /// Nothing completes until the sender waits; then every in-flight send completes with its
    /// own message, newest first (out of order).
    OnWaitReversed,
    /// Only what the test queues with [`ScriptedTxSocket::push_errqueue`].
    Manual,
}

/// How the next `sendmsg` is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendReply {
    /// Accept every byte offered.
    Full,
    /// Accept at most this many bytes (a short send; the kernel does this when interrupted or
    /// out of send buffer with a timeout).
    Short(usize),
    /// Fail with this errno, accepting nothing and taking no send number.
    Errno(i32),
}

/// One error-queue message to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrqEntry {
    /// A well-formed zerocopy completion of sends `lo..=hi` with `ee_code` = `code`, as an
    /// `IP_RECVERR` (or, with `ipv6`, an `IPV6_RECVERR`) cmsg.
    Completion {
        /// `ee_info`.
        lo: u32,
        /// `ee_data`.
        hi: u32,
        /// `ee_code` (`SO_EE_CODE_ZEROCOPY_COPIED` = 1).
        code: u8,
        /// Use `SOL_IPV6`/`IPV6_RECVERR` (with a `sockaddr_in6`).
        ipv6: bool,
    },
    /// A `sock_extended_err` as given, in an `IP_RECVERR` cmsg (wrong origin, `ee_errno`).
    Err(SockExtendedErr),
    /// Arbitrary control bytes and `msg_flags` (e.g. `MSG_CTRUNC`).
    Raw {
        /// Control-buffer content (copied as far as it fits).
        control: Vec<u8>,
        /// `msg_flags`.
        msg_flags: i32,
    },
}

/// One `sendmsg` the double saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRecord {
    /// The iovs offered.
    pub iovs: Vec<DmabufIov>,
    /// The binding id in the cmsg.
    pub dmabuf_id: u32,
    /// What the call returned: bytes accepted, or the errno.
    pub result: std::result::Result<usize, i32>,
    /// The kernel's send number, for calls that accepted data.
    pub send_number: Option<u32>,
}

#[derive(Debug)]
struct InFlight {
    /// Byte ranges `[start, end)` of the dma-buf the send reads.
    ranges: Vec<(u64, u64)>,
    /// Their content when the send was made.
    data: Vec<u8>,
}

#[derive(Debug)]
struct Shared {
    bytes: Vec<u8>,
    /// In-flight sends by (socket, send number): every socket of the dma-buf numbers its
    /// sends from 0.
    in_flight: BTreeMap<(u32, u32), InFlight>,
    violations: Vec<String>,
    writes: u64,
    syncs: u64,
    /// Sockets made over this dma-buf.
    sockets: u32,
    /// Sends accepted so far, by socket (index = the socket's number).
    accepted: Vec<u64>,
}

/// Locks the state shared by a dma-buf and its sockets (a panic of another test thread
/// holding it leaves the data as it was: take it anyway).
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// In-flight sends that read any byte of `[start, end)`: send numbers, prefixed with
    /// `socket S ` when the dma-buf has several sockets.
    fn overlaps(&self, start: u64, end: u64) -> Vec<String> {
        self.in_flight
            .iter()
            .filter(|(_, f)| f.ranges.iter().any(|&(a, b)| a < end && start < b))
            .map(|(&(sock, id), _)| match self.sockets {
                1 => id.to_string(),
                _ => format!("socket {sock} send {id}"),
            })
            .collect()
    }

    fn read(&self, ranges: &[(u64, u64)]) -> Vec<u8> {
        let slice = |&(a, b): &(u64, u64)| &self.bytes[a as usize..b as usize];
        ranges.iter().flat_map(slice).copied().collect()
    }
}

/// The dma-buf side of the double: a `Vec` shared with [`ScriptedTxSocket`]. A write that
/// touches bytes of an in-flight send is recorded as a violation (and still done).
#[derive(Debug, Clone)]
pub struct ScriptedTxMemory {
    shared: Arc<Mutex<Shared>>,
}

impl ScriptedTxMemory {
    /// `write_at` calls so far.
    pub fn writes(&self) -> u64 {
        lock(&self.shared).writes
    }

    /// Dma-buf sync ioctls modelled so far (two per write: `START|WRITE`, `END|WRITE`).
    pub fn syncs(&self) -> u64 {
        lock(&self.shared).syncs
    }

    /// Sends accepted so far by each socket over this dma-buf, in the order the sockets were
    /// made ([`ScriptedTxSocket::another`]): what a test that runs the sockets on other
    /// threads can wait for, instead of a fixed sleep.
    pub fn accepted_per_socket(&self) -> Vec<u64> {
        lock(&self.shared).accepted.clone()
    }

    /// The whole buffer.
    pub fn contents(&self) -> Vec<u8> {
        lock(&self.shared).bytes.clone()
    }
}

impl TxMemory for ScriptedTxMemory {
    fn size(&self) -> usize {
        lock(&self.shared).bytes.len()
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let mut s = lock(&self.shared);
        let r = crate::sys::mmap::checked_range(
            "scripted dma-buf write",
            offset,
            data.len() as u64,
            s.bytes.len(),
        )?;
        let hit = s.overlaps(r.start as u64, r.end as u64);
        if !hit.is_empty() {
            let msg = format!(
                "write of [{}, {}) while sends [{}] that read those bytes are in flight",
                r.start,
                r.end,
                hit.join(", ")
            );
            s.violations.push(msg);
        }
        s.bytes[r].copy_from_slice(data);
        s.writes += 1;
        s.syncs += 2;
        Ok(())
    }
}

/// A scripted [`TxSocket`]: checks and records every send, produces completions per its
/// [`CompletionPolicy`] and whatever the test queues, and keeps the byte stream the peer
/// would receive.
#[derive(Debug)]
pub struct ScriptedTxSocket {
    shared: Arc<Mutex<Shared>>,
    /// This socket among the dma-buf's ([`ScriptedTxSocket::another`]), from 0.
    socket: u32,
    dmabuf_id: u32,
    policy: CompletionPolicy,
    copied: bool,
    next_number: u32,
    replies: VecDeque<SendReply>,
    /// Queued messages, each deliverable once this many sends were accepted.
    errq: VecDeque<(u64, ErrqEntry)>,
    accepted: u64,
    sends: Vec<SendRecord>,
    stream: Vec<u8>,
    socket_error: i32,
    wait_calls: u64,
    max_in_flight: usize,
}

impl ScriptedTxSocket {
    /// A socket bound (by bind-tx) to a dma-buf of `size` bytes with binding `dmabuf_id`, and
    /// the memory handle to write that dma-buf.
    pub fn new(
        size: usize,
        dmabuf_id: u32,
        policy: CompletionPolicy,
    ) -> (ScriptedTxSocket, ScriptedTxMemory) {
        let shared = Arc::new(Mutex::new(Shared {
            bytes: vec![0; size],
            in_flight: BTreeMap::new(),
            violations: Vec::new(),
            writes: 0,
            syncs: 0,
            sockets: 0,
            accepted: Vec::new(),
        }));
        let sock = ScriptedTxSocket::on(&shared, dmabuf_id, policy);
        (sock, ScriptedTxMemory { shared })
    }

    /// Another socket over the same dma-buf and binding (a flow of a multi-flow send), with
    /// this one's completion policy: its own send numbers from 0, its own error queue and
    /// stream; a byte of the dma-buf in flight on any socket may not be rewritten.
    pub fn another(&self) -> ScriptedTxSocket {
        ScriptedTxSocket::on(&self.shared, self.dmabuf_id, self.policy)
    }

    fn on(shared: &Arc<Mutex<Shared>>, dmabuf_id: u32, policy: CompletionPolicy) -> Self {
        let socket = {
            let mut s = lock(shared);
            s.sockets += 1;
            s.accepted.push(0);
            s.sockets - 1
        };
        ScriptedTxSocket {
            shared: Arc::clone(shared),
            socket,
            dmabuf_id,
            policy,
            copied: false,
            next_number: 0,
            replies: VecDeque::new(),
            errq: VecDeque::new(),
            accepted: 0,
            sends: Vec::new(),
            stream: Vec::new(),
            socket_error: 0,
            wait_calls: 0,
            max_in_flight: 0,
        }
    }

    /// Automatic completions carry `SO_EE_CODE_ZEROCOPY_COPIED`.
    pub fn set_copied(&mut self, copied: bool) {
        self.copied = copied;
    }

    /// Answers for the next `sendmsg` calls, in order; when they run out every send is
    /// accepted in full.
    pub fn script_sends(&mut self, replies: impl IntoIterator<Item = SendReply>) {
        self.replies.extend(replies);
    }

    /// Queues an error-queue message, readable at once.
    pub fn push_errqueue(&mut self, entry: ErrqEntry) {
        self.errq.push_back((0, entry));
    }

    /// Queues an error-queue message that becomes readable once `sends` sends were accepted
    /// (messages stay in order: a later one waits for an earlier one).
    pub fn push_errqueue_after(&mut self, sends: u64, entry: ErrqEntry) {
        self.errq.push_back((sends, entry));
    }

    fn readable(&self) -> bool {
        self.errq
            .front()
            .is_some_and(|(after, _)| self.accepted >= *after)
    }

    /// A pending socket error (`SO_ERROR`), e.g. `ECONNRESET`; `poll` then reports `POLLERR`.
    pub fn set_socket_error(&mut self, errno: i32) {
        self.socket_error = errno;
    }

    /// Every `sendmsg` call so far.
    pub fn sends(&self) -> &[SendRecord] {
        &self.sends
    }

    /// The bytes the peer received: every accepted send's bytes, in send order.
    pub fn stream(&self) -> &[u8] {
        &self.stream
    }

    /// Problems the double saw: a write or send touching bytes of an in-flight send, or a
    /// completed send whose bytes changed while in flight. Empty for a correct sender.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared).violations.clone()
    }

    /// Send numbers accepted and not yet completed, ascending.
    pub fn in_flight(&self) -> Vec<u32> {
        let me = self.socket;
        let s = lock(&self.shared);
        let mine = s.in_flight.keys().filter(|(sock, _)| *sock == me);
        mine.map(|&(_, n)| n).collect()
    }

    /// Most sends in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// `poll(POLLERR)` calls so far.
    pub fn wait_calls(&self) -> u64 {
        self.wait_calls
    }

    /// Completes the in-flight sends numbered `lo..=hi` (u32 numbers that may wrap past
    /// `u32::MAX`; `lo = hi + 1` names all of them). Looks at the sends in flight, never at
    /// every number of the range, so a hostile range is answered as fast as the kernel would.
    fn complete(&mut self, lo: u32, hi: u32) {
        let me = self.socket;
        let mut s = lock(&self.shared);
        let span = hi.wrapping_sub(lo);
        let done: Vec<u32> = s
            .in_flight
            .keys()
            .filter(|&&(sock, n)| sock == me && n.wrapping_sub(lo) <= span)
            .map(|&(_, n)| n)
            .collect();
        for n in done {
            let Some(f) = s.in_flight.remove(&(me, n)) else {
                continue;
            };
            if s.read(&f.ranges) != f.data {
                let msg = format!("send {n} completed, but its bytes changed while in flight");
                s.violations.push(msg);
            }
        }
    }

    fn generate_on_wait(&mut self) {
        let ids = self.in_flight();
        if ids.is_empty() || self.policy == CompletionPolicy::Manual || !self.errq.is_empty() {
            return;
        }
        match self.policy {
            CompletionPolicy::OnWaitCoalesced => {
                // In flight is always a run of consecutive numbers here (older ones completed);
                // with a wrapped counter the run is the one starting after the gap.
                let lo = first_of_run(&ids);
                self.push_completion(lo, lo.wrapping_add(ids.len() as u32 - 1));
            }
            CompletionPolicy::OnWaitReversed => {
                for &id in ids.iter().rev() {
                    self.push_completion(id, id);
                }
            }
            CompletionPolicy::Immediate | CompletionPolicy::Manual => {}
        }
    }

    /// Queues an automatic completion of sends `lo..=hi` (IPv4; `COPIED` per
    /// [`ScriptedTxSocket::set_copied`]).
    fn push_completion(&mut self, lo: u32, hi: u32) {
        let code = if self.copied {
            SO_EE_CODE_ZEROCOPY_COPIED
        } else {
            0
        };
        let ipv6 = false;
        self.push_errqueue(ErrqEntry::Completion { lo, hi, code, ipv6 });
    }
}

/// The first number of a set of consecutive u32s that may wrap past `u32::MAX`.
fn first_of_run(sorted: &[u32]) -> u32 {
    let gap = sorted.windows(2).find(|w| w[1] != w[0].wrapping_add(1));
    gap.map_or(sorted[0], |w| w[1])
}

/// The bytes of one error-queue cmsg as the kernel writes it (x86_64): `cmsg_len` u64,
/// `cmsg_level` i32, `cmsg_type` i32, `struct sock_extended_err` (16 bytes), the offender
/// address zeroed (`sockaddr_in`, 16 bytes, for `SOL_IP`/`IP_RECVERR`; `sockaddr_in6`, 28
/// bytes, for `SOL_IPV6`/`IPV6_RECVERR`), then padding to `CMSG_SPACE`.
pub(crate) fn encode_recverr_cmsg(ee: &SockExtendedErr, ipv6: bool) -> Vec<u8> {
    let (level, ty, addr_len) = if ipv6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR, SOCKADDR_IN6_LEN)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR, SOCKADDR_IN_LEN)
    };
    let payload = SOCK_EXTENDED_ERR_LEN + addr_len;
    let mut b = vec![0u8; cmsg_align(cmsg_len(payload))];
    b[..CMSGHDR_LEN].copy_from_slice(&encode_cmsghdr(payload, level, ty));
    b[CMSGHDR_LEN..CMSGHDR_LEN + SOCK_EXTENDED_ERR_LEN].copy_from_slice(&ee.to_bytes());
    b
}

impl TxSocket for ScriptedTxSocket {
    fn send_dmabuf(&mut self, iovs: &[DmabufIov], dmabuf_id: u32) -> Result<usize, i32> {
        let reply = self.replies.pop_front().unwrap_or(SendReply::Full);
        let mut record = SendRecord {
            iovs: iovs.to_vec(),
            dmabuf_id,
            result: Err(0),
            send_number: None,
        };
        let size = lock(&self.shared).bytes.len() as u64;
        let offered: u64 = iovs.iter().map(|i| i.len as u64).sum();
        let checked = if dmabuf_id != self.dmabuf_id {
            Err(libc::EINVAL)
        } else if iovs.len() > MAX_IOV {
            Err(libc::EMSGSIZE)
        } else if iovs
            .iter()
            .any(|i| i.offset.checked_add(i.len as u64).is_none_or(|e| e > size))
        {
            Err(libc::EFAULT)
        } else {
            match reply {
                SendReply::Errno(e) => Err(e),
                SendReply::Full => Ok(offered as usize),
                SendReply::Short(n) => Ok(n.min(offered as usize)),
            }
        };
        record.result = checked;
        let accepted = match checked {
            Ok(n) if n > 0 => n as u64,
            _ => {
                self.sends.push(record);
                return checked;
            }
        };
        // The byte ranges this send reads: the iovs cut to what was accepted.
        let mut ranges = Vec::new();
        let mut left = accepted;
        for i in iovs {
            if left == 0 {
                break;
            }
            let n = (i.len as u64).min(left);
            ranges.push((i.offset, i.offset + n));
            left -= n;
        }
        let number = self.next_number;
        self.next_number = self.next_number.wrapping_add(1);
        self.accepted += 1;
        record.send_number = Some(number);
        {
            let mut s = lock(&self.shared);
            for &(a, b) in &ranges {
                let hit = s.overlaps(a, b);
                if !hit.is_empty() {
                    let msg = format!(
                        "send {number} reads [{a}, {b}), which in-flight sends [{}] also read",
                        hit.join(", ")
                    );
                    s.violations.push(msg);
                }
            }
            s.accepted[self.socket as usize] += 1;
            let data = s.read(&ranges);
            self.stream.extend_from_slice(&data);
            s.in_flight
                .insert((self.socket, number), InFlight { ranges, data });
            let me = self.socket;
            let mine = s.in_flight.keys().filter(|(sock, _)| *sock == me).count();
            self.max_in_flight = self.max_in_flight.max(mine);
        }
        self.sends.push(record);
        if self.policy == CompletionPolicy::Immediate {
            self.push_completion(number, number);
        }
        Ok(accepted as usize)
    }

    fn recv_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32> {
        if !self.readable() {
            return Err(libc::EAGAIN);
        }
        let Some((_, entry)) = self.errq.pop_front() else {
            return Err(libc::EAGAIN);
        };
        let (bytes, mut msg_flags) = match &entry {
            ErrqEntry::Completion { lo, hi, code, ipv6 } => {
                self.complete(*lo, *hi);
                let ee = SockExtendedErr {
                    ee_origin: SO_EE_ORIGIN_ZEROCOPY,
                    ee_code: *code,
                    ee_info: *lo,
                    ee_data: *hi,
                    ..SockExtendedErr::default()
                };
                (encode_recverr_cmsg(&ee, *ipv6), libc::MSG_ERRQUEUE)
            }
            ErrqEntry::Err(ee) => (encode_recverr_cmsg(ee, false), libc::MSG_ERRQUEUE),
            ErrqEntry::Raw { control, msg_flags } => (control.clone(), *msg_flags),
        };
        let n = bytes.len().min(control.len());
        control[..n].copy_from_slice(&bytes[..n]);
        if n < bytes.len() {
            msg_flags |= libc::MSG_CTRUNC;
        }
        Ok(ErrqueueRead {
            msg_flags,
            control_len: n,
        })
    }

    fn wait_errqueue(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.wait_calls += 1;
        self.generate_on_wait();
        if self.readable() || self.socket_error != 0 {
            return Ok(true);
        }
        std::thread::sleep(timeout);
        Ok(false)
    }

    fn socket_error(&mut self) -> Result<i32, i32> {
        Ok(std::mem::take(&mut self.socket_error))
    }
}

// ---------------------------------------------------------------------------------------------
// A multi-flow sender that misdelivers on purpose
// ---------------------------------------------------------------------------------------------

/// Another flow's bytes that [`send_flows`] puts on one flow's connection on purpose: what a
/// receiver sees when a driver delivers a frag of flow `from` to flow `into`'s socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misdelivery {
    /// The flow (0-based) whose connection carries the foreign bytes.
    pub into: u32,
    /// Where they start in `into`'s stream (stream offset, bytes).
    pub at: u64,
    /// How many bytes.
    pub len: u64,
    /// The flow (0-based) they belong to.
    pub from: u32,
    /// The stream offset of the first of them in `from`'s stream.
    pub from_offset: u64,
}

/// What [`send_flows`] sent on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentFlow {
    /// The connection's local address (the receiver's peer address for this flow).
    pub local: std::net::SocketAddr,
    /// Bytes sent.
    pub bytes: u64,
    /// CRC-32 (as zlib's `crc32`) of the bytes sent, misdelivered ones included.
    pub crc32: u32,
}

/// The bytes flow `flow` of `spec`'s run carries at stream offsets `offset..offset +
/// buf.len()`, into `buf`: its own stream ([`StreamSpec::for_flow`]), with the bytes of
/// `misdelivery` where it lands on this flow.
///
/// Errors: `Error::Usage` for a flow out of range (as [`StreamSpec::for_flow`]).
pub fn flow_bytes(
    spec: StreamSpec,
    flow: u32,
    flows: u32,
    misdelivery: Option<&Misdelivery>,
    buf: &mut [u8],
    offset: u64,
) -> Result<()> {
    Pattern::from_spec(spec.for_flow(flow, flows)?)?.fill(buf, offset);
    let Some(m) = misdelivery.filter(|m| m.into == flow) else {
        return Ok(());
    };
    let end = offset + buf.len() as u64;
    let (lo, hi) = (m.at.max(offset), (m.at + m.len).min(end));
    if lo < hi {
        let piece = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
        Pattern::from_spec(spec.for_flow(m.from, flows)?)?.fill(piece, m.from_offset + (lo - m.at));
    }
    Ok(())
}

/// Connects `flows` TCP connections to `peer` one after another (flow 0 first; each connect
/// completes before the next starts, so a receiver that numbers flows in accept order numbers
/// them as here), then sends on each, from a thread of its own, `total` bytes of its flow's
/// stream of `spec` ([`flow_bytes`]: with `misdelivery` applied) in writes of `write` bytes
/// (at least 1), and shuts down its write side. The sockets are opened in the calling thread's
/// network namespace.
///
/// Errors: `Error::Usage` for a flow out of range, in `misdelivery` too; `Error::Sys` from
/// connect (within `timeout`) or a write (`EPIPE`/`ECONNRESET` when the receiver went away).
pub fn send_flows(
    peer: std::net::SocketAddr,
    spec: StreamSpec,
    flows: u32,
    total: u64,
    write: usize,
    misdelivery: Option<Misdelivery>,
    timeout: Duration,
) -> Result<Vec<SentFlow>> {
    use std::io::Write;

    for f in [0, flows.saturating_sub(1)]
        .into_iter()
        .chain(misdelivery.iter().flat_map(|m| [m.into, m.from]))
    {
        spec.for_flow(f, flows)?;
    }
    let conns = (0..flows)
        .map(|_| {
            let s = std::net::TcpStream::connect_timeout(&peer, timeout)
                .map_err(|e| crate::Error::io(format!("connect({peer})"), &e))?;
            let local = s
                .local_addr()
                .map_err(|e| crate::Error::io("getsockname", &e))?;
            Ok((s, local))
        })
        .collect::<Result<Vec<_>>>()?;
    std::thread::scope(|scope| {
        let workers: Vec<_> = conns
            .into_iter()
            .zip(0u32..)
            .map(|((mut sock, local), flow)| {
                scope.spawn(move || -> Result<SentFlow> {
                    let mut buf = vec![0u8; write.max(1)];
                    let mut crc = crc32fast::Hasher::new();
                    let mut at = 0u64;
                    while at < total {
                        let n = (total - at).min(buf.len() as u64) as usize;
                        flow_bytes(spec, flow, flows, misdelivery.as_ref(), &mut buf[..n], at)?;
                        sock.write_all(&buf[..n])
                            .map_err(|e| crate::Error::io(format!("write(flow {flow})"), &e))?;
                        crc.update(&buf[..n]);
                        at += n as u64;
                    }
                    sock.shutdown(std::net::Shutdown::Write)
                        .map_err(|e| crate::Error::io(format!("shutdown(flow {flow})"), &e))?;
                    Ok(SentFlow {
                        local,
                        bytes: total,
                        crc32: crc.finalize(),
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(crate::Error::Failure("a sender thread panicked".into()))
                })
            })
            .collect()
    })
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// What `ip_recv_error` writes for a zerocopy completion of sends 0..=1 on an AF_INET
    /// socket (layout from include/uapi/linux/errqueue.h and in.h; values as 6.18 answered,
    /// `docs/kernel-interface.md#devmem-tx`: level 0, type 11, origin 5, code 0, range 0..=1).
    #[rustfmt::skip]
    const RECVERR_0_1: [u8; 48] = [
        48, 0, 0, 0, 0, 0, 0, 0, // cmsg_len 48 = CMSG_LEN(16 + 16)
        0, 0, 0, 0,              // cmsg_level SOL_IP
        11, 0, 0, 0,             // cmsg_type IP_RECVERR
        0, 0, 0, 0,              // ee_errno 0
        5,                       // ee_origin SO_EE_ORIGIN_ZEROCOPY
        0,                       // ee_type
        0,                       // ee_code
        0,                       // ee_pad
        0, 0, 0, 0,              // ee_info 0
        1, 0, 0, 0,              // ee_data 1
        0, 0, 0, 0, 0, 0, 0, 0,  // offender sockaddr_in (zero), 16 bytes
        0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn recverr_cmsg_bytes() {
        let ee = SockExtendedErr {
            ee_origin: 5,
            ee_info: 0,
            ee_data: 1,
            ..SockExtendedErr::default()
        };
        assert_eq!(encode_recverr_cmsg(&ee, false), RECVERR_0_1);
        // IPv6: cmsg_len 16 + 16 + 28 = 60, padded to 64; level 41, type 25.
        let v6 = encode_recverr_cmsg(&ee, true);
        assert_eq!(v6.len(), 64);
        assert_eq!(
            &v6[..16],
            &[60, 0, 0, 0, 0, 0, 0, 0, 41, 0, 0, 0, 25, 0, 0, 0]
        );
    }

    /// Hostile completion ranges are answered at once, as the kernel would: `lo = hi + 1`
    /// names all 2^32 send numbers (it completes every send in flight), a wrapped range
    /// completes exactly the in-flight sends inside it. (Before: the double walked every
    /// number of the range, about 2^32 steps.)
    #[test]
    fn hostile_completion_ranges_are_answered_at_once() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut sock, _mem) = ScriptedTxSocket::new(4096, 1, CompletionPolicy::Manual);
            let iov = |offset| DmabufIov { offset, len: 16 };
            for i in 0..6 {
                assert_eq!(sock.send_dmabuf(&[iov(i * 16)], 1), Ok(16));
            }
            let mut control = [0u8; 64];
            let mut complete = |sock: &mut ScriptedTxSocket, lo: u32, hi: u32| {
                let entry = ErrqEntry::Completion {
                    lo,
                    hi,
                    code: 0,
                    ipv6: false,
                };
                sock.push_errqueue(entry);
                sock.recv_errqueue(&mut control).unwrap();
                sock.in_flight()
            };
            // A range wrapping past u32::MAX that holds sends 0 and 1 only.
            let wrapped = complete(&mut sock, u32::MAX - 5, 1);
            // lo = hi + 1: every number, so every send still in flight.
            let everything = complete(&mut sock, 3, 2);
            let _ = tx.send((wrapped, everything));
        });
        // A watchdog, not a timing assert: answering takes microseconds.
        let (wrapped, everything) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the double walked the whole u32 range");
        assert_eq!(wrapped, vec![2, 3, 4, 5]);
        assert_eq!(everything, Vec::<u32>::new());
    }

    #[test]
    fn run_start_finds_the_wrap() {
        assert_eq!(first_of_run(&[3, 4, 5]), 3);
        assert_eq!(first_of_run(&[0, 1, u32::MAX - 1, u32::MAX]), u32::MAX - 1);
    }

    /// What a receiver of flow 0 of two sees of [`flow_bytes`]' misdelivery: flow 1's bytes,
    /// named with flow 1 and their offset in flow 1's stream.
    #[test]
    fn a_misdelivery_is_diagnosed_as_the_other_flows_bytes() {
        use crate::validate::{Fault, Validator};
        let spec = StreamSpec::keyed(77);
        let m = Misdelivery {
            into: 0,
            at: 100_000,
            len: 1448,
            from: 1,
            from_offset: 123_456,
        };
        let mut flow0 = vec![0u8; 300_000];
        flow_bytes(spec, 0, 2, Some(&m), &mut flow0[..150_000], 0).unwrap();
        flow_bytes(spec, 0, 2, Some(&m), &mut flow0[150_000..], 150_000).unwrap();
        let mut flow1 = vec![0u8; 200_000];
        flow_bytes(spec, 1, 2, Some(&m), &mut flow1, 0).unwrap();
        // Those bytes are flow 1's, the rest flow 0's own; flow 1 is untouched.
        assert_eq!(flow0[100_000..101_448], flow1[123_456..124_904]);
        let mut own = vec![0u8; 300_000];
        Pattern::from_spec(spec.for_flow(0, 2).unwrap())
            .unwrap()
            .fill(&mut own, 0);
        assert_eq!(flow0[..100_000], own[..100_000]);
        assert_eq!(flow0[101_448..], own[101_448..]);
        let mut v = Validator::for_spec(spec.for_flow(0, 2).unwrap())
            .unwrap()
            .with_piece_name("chunk");
        for piece in flow0.chunks(65_483) {
            v.check(piece);
        }
        let d = v.diagnoses()[0];
        assert_eq!(
            (d.fault, d.source, d.first),
            (Fault::Misdelivered { flow: 1 }, Some(123_456), 100_000),
            "{d}"
        );
        assert!(
            d.to_string().starts_with(
                "chunk at stream offset 65483 (65483 bytes), from stream offset \
                              100000, holds bytes of flow 1 at stream offset 123456 (misdelivered"
            ),
            "{d}"
        );
        // A misdelivery naming a flow not in the run is refused.
        let bad = Misdelivery { from: 2, ..m };
        assert!(flow_bytes(spec, 0, 2, Some(&bad), &mut flow0, 0).is_err());
    }

    /// Over loopback: two connections, flow 0 first; flow 1's bytes on flow 0's connection at
    /// the given offset, named so by flow 0's validator; flow 1 arrives intact.
    #[test]
    fn send_flows_over_loopback_misdelivers_as_asked() {
        use crate::validate::{Fault, Validator};
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = listener.local_addr().unwrap();
        let spec = StreamSpec::keyed(5);
        let m = Misdelivery {
            into: 0,
            at: 1 << 20,
            len: 4096,
            from: 1,
            from_offset: (1 << 20) + 8192,
        };
        let total = 2u64 << 20;
        let sender = std::thread::spawn(move || {
            send_flows(
                peer,
                spec,
                2,
                total,
                10_000,
                Some(m),
                Duration::from_secs(10),
            )
        });
        let mut got = Vec::new();
        for flow in 0..2 {
            let (mut s, from) = listener.accept().unwrap();
            let mut v = Validator::for_spec(spec.for_flow(flow, 2).unwrap()).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                v.check(&buf[..n]);
            }
            got.push((from, v));
        }
        let sent = sender.join().unwrap().unwrap();
        assert_eq!(
            sent.iter().map(|f| f.local).collect::<Vec<_>>(),
            [got[0].0, got[1].0]
        );
        assert_eq!(
            sent.iter().map(|f| f.bytes).collect::<Vec<_>>(),
            [total, total]
        );
        let (v0, v1) = (&got[0].1, &got[1].1);
        assert_eq!(
            (v0.offset(), v1.offset(), v1.mismatches()),
            (total, total, 0)
        );
        assert!(v0.mismatches() > 4000 && v0.mismatches() <= 4096);
        let d = v0.diagnoses()[0];
        assert_eq!(d.fault, Fault::Misdelivered { flow: 1 }, "{d}");
        // The first differing byte names its own place in flow 1's stream.
        assert_eq!(d.source, Some(m.from_offset + (d.first - m.at)), "{d}");
    }
}
