//! The generic-netlink socket: one request path ([`NlSocket::request`]) that frames the
//! message, checks sequence numbers and port ids, collects `do` replies up to the ACK and dump
//! parts up to `NLMSG_DONE`, and turns `NLMSG_ERROR` into [`NlError`] with the extended ack
//! decoded (include/uapi/linux/netlink.h, include/uapi/linux/genetlink.h).
//!
//! Message shape (host byte order):
//!
//! ```text
//! 0        4      6       8      12     16    17      18        20
//! +--------+------+-------+------+------+-----+-------+---------+-------------
//! | len    | type | flags | seq  | pid  | cmd | vers. | reserved| attributes…
//! +--------+------+-------+------+------+-----+-------+---------+-------------
//!  nlmsghdr (16 bytes)                   genlmsghdr (4 bytes)
//! ```

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use super::attr::{align, AttrIter, AttrWriter};
use crate::backoff::Backoff;
use crate::error::{Error, NlError, Result};
use crate::sys::netlink_sock as sys;
use crate::sys::uapi::{
    NLMSGERR_ATTR_MISS_NEST, NLMSGERR_ATTR_MISS_TYPE, NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS,
};

pub(crate) use super::attr::{GENL_HDRLEN, NLMSG_HDRLEN};

/// `nlmsghdr` fields.
const NLMSG_LEN: Range<usize> = 0..4;
const NLMSG_TYPE: Range<usize> = 4..6;
const NLMSG_FLAGS: Range<usize> = 6..8;
const NLMSG_SEQ: Range<usize> = 8..12;
const NLMSG_PID: Range<usize> = 12..16;
/// `genlmsghdr` fields, relative to the end of the `nlmsghdr`.
const GENL_CMD: usize = 0;
const GENL_VERSION: usize = 1;
/// `nlmsgerr.error` (negative errno or 0), at the start of an `NLMSG_ERROR` payload.
const NLMSGERR_ERROR: Range<usize> = 0..4;

/// `NLMSG_NOOP`.
const NLMSG_NOOP: u16 = libc::NLMSG_NOOP as u16;
/// `NLMSG_ERROR`: error or ACK (`nlmsgerr`).
const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
/// `NLMSG_DONE`: end of a dump.
const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
/// `NLMSG_OVERRUN`.
const NLMSG_OVERRUN: u16 = libc::NLMSG_OVERRUN as u16;

/// `NLM_F_REQUEST`.
pub(crate) const NLM_F_REQUEST: u16 = libc::NLM_F_REQUEST as u16;
/// `NLM_F_MULTI`: part of a multipart (dump) reply (the tests build such replies).
#[cfg(test)]
pub(crate) const NLM_F_MULTI: u16 = libc::NLM_F_MULTI as u16;
/// `NLM_F_ACK`: ask for an `NLMSG_ERROR` with error 0 on success.
pub(crate) const NLM_F_ACK: u16 = libc::NLM_F_ACK as u16;
/// `NLM_F_DUMP_INTR`: the dump was interrupted by a change; its content is inconsistent.
pub(crate) const NLM_F_DUMP_INTR: u16 = libc::NLM_F_DUMP_INTR as u16;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub(crate) const NLM_F_DUMP: u16 = libc::NLM_F_DUMP as u16;
/// `NLM_F_CAPPED` (on `NLMSG_ERROR`): only the request's header is echoed, not its payload.
pub(crate) const NLM_F_CAPPED: u16 = libc::NLM_F_CAPPED as u16;
/// `NLM_F_ACK_TLVS` (on `NLMSG_ERROR`/`NLMSG_DONE`): extended-ack attributes follow.
pub(crate) const NLM_F_ACK_TLVS: u16 = libc::NLM_F_ACK_TLVS as u16;

/// Receive buffer size in bytes; the kernel sizes dump datagrams at most 32 KiB, and the
/// buffer grows when a peeked datagram is longer.
const RECV_BUF: usize = 64 * 1024;
/// How long one `recv` waits for the kernel. A kernel that never answers is a bug, not a
/// condition to wait out; queue restarts during bind-rx take milliseconds.
const RECV_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a dump is restarted after `NLM_F_DUMP_INTR` before giving up.
const DUMP_RETRIES: usize = 3;

fn ne_u16(b: &[u8], r: Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_ne_bytes(a)
}

fn ne_u32(b: &[u8], r: Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_ne_bytes(a)
}

/// One netlink message inside a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NlMsg<'a> {
    /// `nlmsg_type`: a family id, `NLMSG_ERROR` (2) or `NLMSG_DONE` (3).
    pub ty: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`: the sequence number of the request this answers.
    pub seq: u32,
    /// `nlmsg_pid`: the port id the kernel addressed (ours).
    pub pid: u32,
    /// Everything after the 16-byte header, up to `nlmsg_len`.
    pub payload: &'a [u8],
}

/// Walks the messages in one datagram. Yields `Err(Error::Decode)` once for a malformed
/// `nlmsg_len` and then stops; never panics.
#[derive(Debug, Clone)]
pub(crate) struct NlMsgIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> NlMsgIter<'a> {
    /// Iterates over the messages in `datagram`.
    pub(crate) fn new(datagram: &'a [u8]) -> Self {
        NlMsgIter {
            rest: datagram,
            failed: false,
        }
    }
}

impl<'a> Iterator for NlMsgIter<'a> {
    type Item = Result<NlMsg<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        let len = b
            .get(..NLMSG_HDRLEN)
            .map_or(0, |h| ne_u32(h, NLMSG_LEN) as usize);
        if b.len() < NLMSG_HDRLEN || len < NLMSG_HDRLEN || len > b.len() {
            self.failed = true;
            return Some(Err(Error::decode(
                "nlmsghdr",
                format!(
                    "nlmsg_len {len} with {} bytes left in the datagram",
                    b.len()
                ),
            )));
        }
        let msg = NlMsg {
            ty: ne_u16(b, NLMSG_TYPE),
            flags: ne_u16(b, NLMSG_FLAGS),
            seq: ne_u32(b, NLMSG_SEQ),
            pid: ne_u32(b, NLMSG_PID),
            payload: &b[NLMSG_HDRLEN..len],
        };
        self.rest = &b[align(len).min(b.len())..];
        Some(Ok(msg))
    }
}

/// The extended-ack attributes of an `NLMSG_ERROR` or `NLMSG_DONE` (`enum nlmsgerr_attrs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtAck {
    /// `NLMSGERR_ATTR_MSG`: the kernel's text.
    pub msg: Option<String>,
    /// `NLMSGERR_ATTR_OFFS`: bytes from the start of our `nlmsghdr` to the offending attribute.
    pub offs: Option<u32>,
    /// `NLMSGERR_ATTR_MISS_TYPE`: number of a required attribute that was missing.
    pub miss_type: Option<u32>,
    /// `NLMSGERR_ATTR_MISS_NEST`: offset of the nest in which `miss_type` is missing.
    pub miss_nest: Option<u32>,
    /// The first thing wrong with the extended ack (a malformed attribute, text that is not
    /// UTF-8, attributes starting past the message), when something was; the attributes that
    /// could be read are kept.
    pub problem: Option<String>,
}

/// A decoded `NLMSG_ERROR` (or the status of an `NLMSG_DONE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorMsg {
    /// Positive errno; 0 is an ACK.
    pub errno: i32,
    /// What the extended ack said (empty without `NLM_F_ACK_TLVS`).
    pub ext: ExtAck,
}

/// Reads the extended-ack attributes; never fails. The first problem is kept in
/// [`ExtAck::problem`]: an attribute whose value is malformed is left out and the walk goes
/// on (a text that is not UTF-8 is kept with U+FFFD in place of the bad bytes); a malformed
/// attribute header ends the walk.
fn parse_ext_ack(tlvs: &[u8]) -> ExtAck {
    let mut ext = ExtAck::default();
    let mut problems = Vec::new();
    let mut keep = |r: Result<u32>| r.map_err(|e| problems.push(e.to_string())).ok();
    for a in AttrIter::new(tlvs) {
        let a = match a {
            Ok(a) => a,
            Err(e) => {
                keep(Err(e));
                break;
            }
        };
        match a.kind() {
            NLMSGERR_ATTR_MSG => {
                ext.msg = Some(a.string("NLMSGERR_ATTR_MSG").unwrap_or_else(|e| {
                    keep(Err(e));
                    let text = a.payload().split(|&b| b == 0).next().unwrap_or_default();
                    String::from_utf8_lossy(text).into_owned()
                }));
            }
            NLMSGERR_ATTR_OFFS => ext.offs = keep(a.u32("NLMSGERR_ATTR_OFFS")),
            NLMSGERR_ATTR_MISS_TYPE => ext.miss_type = keep(a.u32("NLMSGERR_ATTR_MISS_TYPE")),
            NLMSGERR_ATTR_MISS_NEST => ext.miss_nest = keep(a.u32("NLMSGERR_ATTR_MISS_NEST")),
            // NLMSGERR_ATTR_COOKIE and NLMSGERR_ATTR_POLICY are not shown.
            _ => {}
        }
    }
    ext.problem = problems.into_iter().next();
    ext
}

fn errno_of(raw: i32) -> i32 {
    // nlmsgerr.error is a negative errno; i32::MIN has no positive counterpart.
    raw.checked_neg().unwrap_or(i32::MAX).max(0)
}

/// Decodes the payload of an `NLMSG_ERROR` message with header flags `flags`.
///
/// Layout: `nlmsgerr.error` (i32), the echoed request header (16 bytes; with the request's
/// payload unless `NLM_F_CAPPED`), then extended-ack attributes if `NLM_F_ACK_TLVS`.
///
/// Errors: `Error::Decode` when the payload cannot hold the error and the echoed header. An
/// extended ack that cannot be read is no error here: it is [`ExtAck::problem`], beside the
/// errno.
pub(crate) fn parse_error(flags: u16, payload: &[u8]) -> Result<ErrorMsg> {
    if payload.len() < NLMSGERR_ERROR.end + NLMSG_HDRLEN {
        return Err(Error::decode(
            "nlmsgerr",
            format!("payload is {} bytes, expected at least 20", payload.len()),
        ));
    }
    let errno = errno_of(ne_u32(payload, NLMSGERR_ERROR) as i32);
    let echoed = &payload[NLMSGERR_ERROR.end..];
    let tlv_start = if flags & NLM_F_CAPPED != 0 {
        NLMSGERR_ERROR.end + NLMSG_HDRLEN
    } else {
        let orig_len = ne_u32(echoed, NLMSG_LEN) as usize;
        NLMSGERR_ERROR.end + align(orig_len.max(NLMSG_HDRLEN))
    };
    let ext = if flags & NLM_F_ACK_TLVS == 0 {
        ExtAck::default()
    } else if let Some(tlvs) = payload.get(tlv_start..) {
        parse_ext_ack(tlvs)
    } else {
        ExtAck {
            problem: Some(format!(
                "extended ack starts at byte {tlv_start} of a {}-byte nlmsgerr payload",
                payload.len()
            )),
            ..ExtAck::default()
        }
    };
    Ok(ErrorMsg { errno, ext })
}

/// Decodes the payload of an `NLMSG_DONE`: an i32 status (0 or a negative errno; absent in
/// some families, then 0), then extended-ack attributes if `NLM_F_ACK_TLVS`.
///
/// Errors: `Error::Decode` for a payload of 1 to 3 bytes (a status cut short: the dump's
/// outcome is unknown). An unreadable extended ack is [`ExtAck::problem`].
pub(crate) fn parse_done(flags: u16, payload: &[u8]) -> Result<ErrorMsg> {
    if payload.is_empty() {
        return Ok(ErrorMsg::default());
    }
    if payload.len() < NLMSGERR_ERROR.end {
        return Err(Error::decode(
            "NLMSG_DONE",
            format!(
                "payload is {} bytes: too short for its i32 status",
                payload.len()
            ),
        ));
    }
    let errno = errno_of(ne_u32(payload, NLMSGERR_ERROR) as i32);
    let ext = if flags & NLM_F_ACK_TLVS != 0 {
        parse_ext_ack(&payload[NLMSGERR_ERROR.end..])
    } else {
        ExtAck::default()
    };
    Ok(ErrorMsg { errno, ext })
}

/// One generic-netlink reply message: `genlmsghdr` and the attribute bytes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenlReply {
    /// `genlmsghdr.cmd`: the reply's command id (for ethtool, from the kernel→user enum).
    pub cmd: u8,
    /// `genlmsghdr.version`.
    pub version: u8,
    /// The attributes, starting 20 bytes into the message.
    pub attrs: Vec<u8>,
}

impl GenlReply {
    /// Decodes a genl message payload (everything after the `nlmsghdr`).
    pub fn parse(payload: &[u8]) -> Result<Self> {
        if payload.len() < GENL_HDRLEN {
            return Err(Error::decode(
                "genlmsghdr",
                format!(
                    "message payload is {} bytes, expected at least 4",
                    payload.len()
                ),
            ));
        }
        Ok(GenlReply {
            cmd: payload[GENL_CMD],
            version: payload[GENL_VERSION],
            attrs: payload[GENL_HDRLEN..].to_vec(),
        })
    }

    /// Iterates over [`attrs`](Self::attrs).
    pub(crate) fn attr_iter(&self) -> AttrIter<'_> {
        AttrIter::new(&self.attrs)
    }
}

/// A generic-netlink request: family, command, attributes, and the words used in errors.
#[derive(Debug, Clone)]
pub struct GenlRequest {
    family: String,
    family_id: u16,
    version: u8,
    cmd: u8,
    op: String,
    dump: bool,
    target: String,
    attrs: AttrWriter,
}

impl GenlRequest {
    /// A `do` request for command `cmd` of the family `family` (name, for errors) with id
    /// `family_id` and header version `version`; `op` is the spec's operation name
    /// (`"bind-rx"`), used in errors.
    pub fn new(family: &str, family_id: u16, version: u8, cmd: u8, op: &str) -> Self {
        GenlRequest {
            family: family.to_string(),
            family_id,
            version,
            cmd,
            op: op.to_string(),
            dump: false,
            target: String::new(),
            attrs: AttrWriter::new(),
        }
    }

    /// Makes this a dump request (`NLM_F_DUMP`): the kernel answers with `NLM_F_MULTI` parts
    /// ended by `NLMSG_DONE`.
    pub fn dump(mut self) -> Self {
        self.dump = true;
        self
    }

    /// Sets what the request is about, for errors: `"eth0 (ifindex 4), queues 8..=9"`.
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = target.into();
        self
    }

    /// The attribute writer, to add the request's attributes.
    pub fn attrs(&mut self) -> &mut AttrWriter {
        &mut self.attrs
    }

    /// The attributes written so far (with their offset → path map).
    pub fn writer(&self) -> &AttrWriter {
        &self.attrs
    }

    /// `nlmsg_flags` of the request: `NLM_F_REQUEST | NLM_F_ACK`, plus `NLM_F_DUMP` for dumps.
    pub fn flags(&self) -> u16 {
        NLM_F_REQUEST | NLM_F_ACK | if self.dump { NLM_F_DUMP } else { 0 }
    }

    /// The whole message: `nlmsghdr` (type = family id, [`flags`](Self::flags), `seq`, `pid`),
    /// `genlmsghdr` (cmd, version, reserved 0) and the attributes.
    ///
    /// Errors: `Error::Usage` if an attribute or the message does not fit its length field.
    pub fn encode(&self, seq: u32, pid: u32) -> Result<Vec<u8>> {
        self.attrs.check()?;
        let attrs = self.attrs.bytes();
        let len = NLMSG_HDRLEN + GENL_HDRLEN + attrs.len();
        let len32 = u32::try_from(len)
            .map_err(|_| Error::Usage(format!("netlink request of {len} bytes is too long")))?;
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&len32.to_ne_bytes());
        m.extend_from_slice(&self.family_id.to_ne_bytes());
        m.extend_from_slice(&self.flags().to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&pid.to_ne_bytes());
        m.extend_from_slice(&[self.cmd, self.version, 0, 0]);
        m.extend_from_slice(attrs);
        Ok(m)
    }

    /// Turns a kernel error answer into [`NlError`], mapping `NLMSGERR_ATTR_OFFS` and
    /// `NLMSGERR_ATTR_MISS_NEST` back to attribute paths of this request.
    pub fn error(&self, e: &ErrorMsg) -> NlError {
        NlError {
            family: self.family.clone(),
            op: self.op.clone(),
            target: self.target.clone(),
            errno: e.errno,
            ext_msg: e.ext.msg.clone(),
            bad_attr: e.ext.offs.map(|o| self.attrs.describe_offset(o)),
            missing_attr: e.ext.miss_type,
            missing_nest: e.ext.miss_nest.map(|o| self.attrs.describe_offset(o)),
            ack_problem: e.ext.problem.clone(),
        }
    }

    fn decode_error(&self, detail: String) -> Error {
        Error::decode(format!("{} {} reply", self.family, self.op), detail)
    }
}

/// The answer-collecting state of one request: feed it datagrams until it says "finished".
/// Pure (no I/O), so tests can drive it with fixture bytes.
#[derive(Debug)]
pub(crate) struct Exchange<'r> {
    req: &'r GenlRequest,
    seq: u32,
    port_id: u32,
    replies: Vec<GenlReply>,
    stale: usize,
}

impl<'r> Exchange<'r> {
    /// Starts collecting the answer to `req`, sent with sequence number `seq` from port
    /// `port_id`.
    pub(crate) fn new(req: &'r GenlRequest, seq: u32, port_id: u32) -> Self {
        Exchange {
            req,
            seq,
            port_id,
            replies: Vec::new(),
            stale: 0,
        }
    }

    /// Messages skipped because they answered an earlier, abandoned request.
    #[cfg(test)]
    pub(crate) fn stale(&self) -> usize {
        self.stale
    }

    /// Takes one received datagram. `Ok(true)` when the answer is complete (ACK for `do`,
    /// `NLMSG_DONE` for dumps); `Err(Error::Netlink)` for a kernel error (an interrupted
    /// dump is `EINTR`); `Err(Error::Decode)` for malformed or unexpected messages.
    pub(crate) fn feed(&mut self, datagram: &[u8]) -> Result<bool> {
        let req = self.req;
        for msg in NlMsgIter::new(datagram) {
            let msg = msg?;
            if msg.pid != self.port_id {
                return Err(req.decode_error(format!(
                    "message for port id {} on socket with port id {}",
                    msg.pid, self.port_id
                )));
            }
            if msg.seq != self.seq {
                // Answers to an earlier request we stopped reading (an error mid-dump)
                // carry an older sequence number; skip them. Anything else is a bug.
                if (self.seq.wrapping_sub(msg.seq) as i32) > 0 {
                    self.stale += 1;
                    continue;
                }
                return Err(req.decode_error(format!(
                    "nlmsg_seq {} while waiting for {}",
                    msg.seq, self.seq
                )));
            }
            match msg.ty {
                NLMSG_NOOP => {}
                NLMSG_ERROR | NLMSG_DONE => {
                    let parse = if msg.ty == NLMSG_ERROR {
                        parse_error
                    } else {
                        parse_done
                    };
                    let e = parse(msg.flags, msg.payload)?;
                    if e.errno != 0 {
                        return Err(req.error(&e).into());
                    }
                    // An ACK whose extended ack cannot be read: no errno to keep.
                    if let Some(p) = e.ext.problem {
                        return Err(req.decode_error(p));
                    }
                    return Ok(true);
                }
                NLMSG_OVERRUN => return Err(req.decode_error("NLMSG_OVERRUN".into())),
                ty if ty == req.family_id => {
                    if msg.flags & NLM_F_DUMP_INTR != 0 {
                        return Err(req
                            .error(&ErrorMsg {
                                errno: libc::EINTR,
                                ext: ExtAck {
                                    msg: Some("dump interrupted (NLM_F_DUMP_INTR)".into()),
                                    ..ExtAck::default()
                                },
                            })
                            .into());
                    }
                    self.replies.push(GenlReply::parse(msg.payload)?);
                }
                ty => {
                    return Err(req.decode_error(format!(
                        "message type {ty}, expected family id {}",
                        req.family_id
                    )))
                }
            }
        }
        Ok(false)
    }

    /// The replies collected so far.
    pub(crate) fn into_replies(self) -> Vec<GenlReply> {
        self.replies
    }
}

/// An `AF_NETLINK` / `NETLINK_GENERIC` socket with `NETLINK_EXT_ACK` and `NETLINK_CAP_ACK` set,
/// bound to a kernel-assigned port id. Closing it (drop) releases everything the kernel tied
/// to it, such as devmem bindings.
#[derive(Debug)]
pub struct NlSocket {
    fd: OwnedFd,
    port_id: u32,
    seq: u32,
    buf: Vec<u8>,
}

impl NlSocket {
    /// Opens the socket, sets `NETLINK_EXT_ACK` (extended acks with message and offset) and
    /// `NETLINK_CAP_ACK` (errors echo only our header), binds it and reads its port id.
    ///
    /// Errors: `Error::Sys` naming the failing call.
    pub fn open() -> Result<Self> {
        let fd = sys::open(sys::NETLINK_GENERIC)?;
        let b = fd.as_fd();
        for (opt, call) in [
            (sys::NETLINK_EXT_ACK, "setsockopt(NETLINK_EXT_ACK)"),
            (sys::NETLINK_CAP_ACK, "setsockopt(NETLINK_CAP_ACK)"),
        ] {
            crate::sys::socket::setsockopt_raw(b, sys::SOL_NETLINK, opt, &1)
                .map_err(|e| Error::sys(call, e))?;
        }
        sys::set_recv_timeout(b, RECV_TIMEOUT)?;
        sys::bind_auto(b)?;
        let port_id = sys::port_id(b)?;
        // Start from a time-derived sequence number so that two sockets in one trace are
        // easy to tell apart; any start works.
        let seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() as u32);
        Ok(NlSocket {
            fd,
            port_id,
            seq,
            buf: vec![0; RECV_BUF],
        })
    }

    /// The kernel-assigned port id (`nl_pid`).
    pub fn port_id(&self) -> u32 {
        self.port_id
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn recv_datagram(&mut self) -> Result<usize> {
        let mut backoff = Backoff::default();
        let fd = self.fd.as_fd();
        let mut recv = |buf: &mut [u8], peek| loop {
            match sys::recv(fd, buf, peek) {
                Err(e) if e.errno() == Some(libc::EINTR) => backoff.pause(),
                r => return r,
            }
        };
        loop {
            let peeked = recv(&mut self.buf, true)?;
            if peeked.len > self.buf.len() {
                self.buf.resize(peeked.len, 0);
            }
            let d = recv(&mut self.buf, false)?;
            if d.len > self.buf.len() {
                // MSG_TRUNC: never parse a cut-off datagram.
                return Err(Error::sys(
                    "recvfrom(AF_NETLINK): datagram truncated",
                    libc::EMSGSIZE,
                ));
            }
            if d.sender != 0 {
                // Only the kernel (port 0) may talk to us; ignore anything else.
                continue;
            }
            return Ok(d.len);
        }
    }

    fn request_once(&mut self, req: &GenlRequest) -> Result<Vec<GenlReply>> {
        let seq = self.next_seq();
        let msg = req.encode(seq, self.port_id)?;
        let sent = sys::send_to_kernel(self.fd.as_fd(), &msg)?;
        if sent != msg.len() {
            return Err(Error::sys("sendto(AF_NETLINK): short send", libc::EMSGSIZE));
        }
        let mut ex = Exchange::new(req, seq, self.port_id);
        loop {
            let n = match self.recv_datagram() {
                Err(e) if e.errno() == Some(libc::EAGAIN) => {
                    return Err(Error::Timeout(format!(
                        "no netlink answer to {} {} within {} s",
                        req.family,
                        req.op,
                        RECV_TIMEOUT.as_secs()
                    )))
                }
                r => r?,
            };
            if ex.feed(&self.buf[..n])? {
                return Ok(ex.into_replies());
            }
        }
    }

    /// Sends `req` with `NLM_F_REQUEST | NLM_F_ACK` (plus `NLM_F_DUMP` for dumps) and a new
    /// sequence number, and collects the answer: for `do`, the reply messages up to the ACK;
    /// for dumps, every part up to `NLMSG_DONE` (restarting up to 3 times when the kernel flags
    /// `NLM_F_DUMP_INTR`).
    ///
    /// Errors: `Error::Netlink` with errno, extack message, offending attribute path and
    /// missing attribute; `Error::Decode` for malformed or foreign messages; `Error::Sys` for
    /// socket failures (a truncated datagram is `EMSGSIZE`); `Error::Timeout` if the kernel
    /// does not answer within 30 s.
    pub fn request(&mut self, req: &GenlRequest) -> Result<Vec<GenlReply>> {
        let mut attempt = 0;
        loop {
            match self.request_once(req) {
                Err(Error::Netlink(e))
                    if req.dump && e.errno == libc::EINTR && attempt + 1 < DUMP_RETRIES =>
                {
                    attempt += 1;
                }
                r => return r,
            }
        }
    }
}

impl AsFd for NlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req() -> GenlRequest {
        let mut r = GenlRequest::new("netdev", 20, 1, 13, "bind-rx").target("ifindex 4");
        r.attrs().put_u32(1, "NETDEV_A_DMABUF_IFINDEX", 4);
        r
    }

    /// An `NLMSG_ERROR` with a capped echo of our header and extack TLVs. Synthetic, shaped
    /// like 6.18's answer to bind-rx with ifindex 0
    /// (`docs/kernel-interface.md#bind-rx-and-bind-tx`).
    #[rustfmt::skip]
    const ERANGE_IFINDEX: &[u8] = &[
        0x48, 0x00, 0x00, 0x00, // nlmsg_len 72
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x2a, 0x00, 0x00, 0x00, // pid 42
        0xde, 0xff, 0xff, 0xff, // error -34 (ERANGE)
        0x1c, 0x00, 0x00, 0x00, //   echoed nlmsg_len 28
        0x14, 0x00, 0x05, 0x00, //   echoed type 20, flags REQUEST|ACK
        0x07, 0x00, 0x00, 0x00, //   echoed seq 7
        0x2a, 0x00, 0x00, 0x00, //   echoed pid 42
        0x19, 0x00,             // nla_len 25
        0x01, 0x00,             // NLMSGERR_ATTR_MSG
        b'i', b'n', b't', b'e', b'g', b'e', b'r', b' ', b'o', b'u', b't', b' ',
        b'o', b'f', b' ', b'r', b'a', b'n', b'g', b'e', 0x00, // "integer out of range\0"
        0x00, 0x00, 0x00,       // padding
        0x08, 0x00,             // nla_len 8
        0x02, 0x00,             // NLMSGERR_ATTR_OFFS
        0x14, 0x00, 0x00, 0x00, // offset 20
    ];

    #[test]
    fn error_message_maps_offset_to_path() {
        let r = req();
        let mut ex = Exchange::new(&r, 7, 42);
        let Err(Error::Netlink(e)) = ex.feed(ERANGE_IFINDEX) else {
            panic!("expected a netlink error");
        };
        assert_eq!(e.errno, libc::ERANGE);
        assert_eq!(e.ext_msg.as_deref(), Some("integer out of range"));
        assert_eq!(e.bad_attr.as_deref(), Some("NETDEV_A_DMABUF_IFINDEX"));
        assert_eq!(
            e.to_string(),
            "netdev bind-rx on ifindex 4: ERANGE (Numerical result out of range); \
             kernel: \"integer out of range\"; at NETDEV_A_DMABUF_IFINDEX"
        );
    }

    /// 6.18's answer to bind-tx on veth0 (ifindex 3) with a memfd (captured with a raw-socket
    /// probe; seq 6, port id 18858): a message and no offset.
    #[rustfmt::skip]
    const BIND_TX_VETH: &[u8] = &[
        0x4c, 0x00, 0x00, 0x00, // nlmsg_len 76
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x06, 0x00, 0x00, 0x00, // seq 6
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xa1, 0xff, 0xff, 0xff, // error -95 (EOPNOTSUPP)
        0x24, 0x00, 0x00, 0x00, //   echoed nlmsg_len 36
        0x14, 0x00, 0x05, 0x00, //   echoed type 20, flags REQUEST|ACK
        0x06, 0x00, 0x00, 0x00, //   echoed seq 6
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
        0x26, 0x00, 0x01, 0x00, // nla_len 38, NLMSGERR_ATTR_MSG
        b'D', b'r', b'i', b'v', b'e', b'r', b' ', b'd', b'o', b'e', b's', b' ', b'n', b'o',
        b't', b' ', b's', b'u', b'p', b'p', b'o', b'r', b't', b' ', b'n', b'e', b't', b'm',
        b'e', b'm', b' ', b'T', b'X', 0x00, // "Driver does not support netmem TX\0"
        0x00, 0x00,             // padding
    ];

    #[test]
    fn captured_message_without_offset() {
        let mut r = GenlRequest::new("netdev", 20, 1, 15, "bind-tx").target("veth0 (ifindex 3)");
        r.attrs().put_u32(1, "NETDEV_A_DMABUF_IFINDEX", 3);
        r.attrs().put_u32(3, "NETDEV_A_DMABUF_FD", 3);
        assert_eq!(r.encode(6, 0).unwrap().len(), 36, "matches the echo");
        let mut ex = Exchange::new(&r, 6, 18858);
        let Err(Error::Netlink(e)) = ex.feed(BIND_TX_VETH) else {
            panic!("expected a netlink error");
        };
        assert_eq!(
            e.ext_msg.as_deref(),
            Some("Driver does not support netmem TX")
        );
        assert_eq!((e.bad_attr, e.missing_attr), (None, None));
        assert_eq!(
            parse_error(NLM_F_CAPPED | NLM_F_ACK_TLVS, &BIND_TX_VETH[16..])
                .unwrap()
                .errno,
            libc::EOPNOTSUPP
        );
    }

    #[test]
    fn uncapped_error_skips_the_echoed_request() {
        let r = req();
        let echoed = r.encode(9, 42).unwrap(); // 28 bytes
        let mut m = Vec::new();
        let len = 16 + 4 + echoed.len() + 12;
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes()); // NLMSG_ERROR
        m.extend_from_slice(&NLM_F_ACK_TLVS.to_ne_bytes()); // not capped
        m.extend_from_slice(&9u32.to_ne_bytes());
        m.extend_from_slice(&42u32.to_ne_bytes());
        m.extend_from_slice(&(-libc::EINVAL).to_ne_bytes());
        m.extend_from_slice(&echoed);
        m.extend_from_slice(&[8, 0, 5, 0, 3, 0, 0, 0]); // MISS_TYPE 3
        m.extend_from_slice(&[4, 0, 6, 0]); // an empty attr of type MISS_NEST is malformed...
                                            // ...: the ack's problem, beside the kernel's errno and
                                            // what was read before it.
        let e = parse_error(NLM_F_ACK_TLVS, &m[16..]).unwrap();
        assert_eq!((e.errno, e.ext.miss_type), (libc::EINVAL, Some(3)));
        let problem = e.ext.problem.unwrap_or_default();
        assert!(problem.contains("NLMSGERR_ATTR_MISS_NEST"), "{problem}");
        m.truncate(m.len() - 4);
        let e = parse_error(NLM_F_ACK_TLVS, &m[16..]).unwrap();
        assert_eq!(e.errno, libc::EINVAL);
        assert_eq!(e.ext.miss_type, Some(3));
        assert_eq!(e.ext.problem, None);
    }

    #[test]
    fn ack_ends_a_do_request_and_collects_the_reply() {
        let r = req();
        let mut ex = Exchange::new(&r, 5, 42);
        #[rustfmt::skip]
        let reply: &[u8] = &[
            0x1c, 0x00, 0x00, 0x00, // nlmsg_len 28
            0x14, 0x00,             // type 20 (netdev)
            0x00, 0x00,             // flags 0
            0x05, 0x00, 0x00, 0x00, // seq 5
            0x2a, 0x00, 0x00, 0x00, // pid 42
            0x0d, 0x01, 0x00, 0x00, // cmd 13, version 1
            0x08, 0x00, 0x04, 0x00, // NETDEV_A_DMABUF_ID
            0x03, 0x00, 0x00, 0x00, // id 3
        ];
        #[rustfmt::skip]
        let ack: &[u8] = &[
            0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
            0x02, 0x00,             // NLMSG_ERROR
            0x00, 0x01,             // NLM_F_CAPPED
            0x05, 0x00, 0x00, 0x00, // seq 5
            0x2a, 0x00, 0x00, 0x00, // pid 42
            0x00, 0x00, 0x00, 0x00, // error 0: ACK
            0x1c, 0x00, 0x00, 0x00, 0x14, 0x00, 0x05, 0x00, // echoed header
            0x05, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00,
        ];
        assert!(!ex.feed(reply).unwrap());
        assert!(ex.feed(ack).unwrap());
        let replies = ex.into_replies();
        assert_eq!(replies.len(), 1);
        assert_eq!((replies[0].cmd, replies[0].version), (13, 1));
        assert_eq!(replies[0].attrs, &reply[20..]);
    }

    #[test]
    fn sequence_and_port_checks() {
        let r = req();
        let mut ack = ERANGE_IFINDEX.to_vec();
        ack[16..20].copy_from_slice(&0i32.to_ne_bytes());
        // Older sequence number: stale, skipped.
        let mut ex = Exchange::new(&r, 8, 42);
        assert!(!ex.feed(&ack).unwrap());
        assert_eq!(ex.stale(), 1);
        // Newer sequence number: a bug.
        let mut ex = Exchange::new(&r, 6, 42);
        assert!(matches!(ex.feed(&ack), Err(Error::Decode { .. })));
        // Someone else's port id.
        let mut ex = Exchange::new(&r, 7, 43);
        assert!(matches!(ex.feed(&ack), Err(Error::Decode { .. })));
        // Matching: ACK.
        let mut ex = Exchange::new(&r, 7, 42);
        assert!(ex.feed(&ack).unwrap());
    }

    #[test]
    fn done_with_error_status_is_an_error() {
        let r = req().dump();
        #[rustfmt::skip]
        let done: &[u8] = &[
            0x14, 0x00, 0x00, 0x00, // nlmsg_len 20
            0x03, 0x00,             // NLMSG_DONE
            0x02, 0x00,             // NLM_F_MULTI
            0x01, 0x00, 0x00, 0x00, // seq 1
            0x2a, 0x00, 0x00, 0x00, // pid 42
            0xed, 0xff, 0xff, 0xff, // status -19 (ENODEV)
        ];
        let mut ex = Exchange::new(&r, 1, 42);
        let err = ex.feed(done).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENODEV));
        let mut ok = done.to_vec();
        ok[16..20].copy_from_slice(&[0; 4]);
        let mut ex = Exchange::new(&r, 1, 42);
        assert!(ex.feed(&ok).unwrap());
        assert_eq!(r.flags(), 0x305);
    }

    /// An `NLMSG_DONE` whose payload is 1 to 3 bytes cannot hold its i32 status: a decode
    /// error, never the end of a dump (an empty payload is a family without a status, 0).
    #[test]
    fn truncated_done_is_a_decode_error() {
        let r = req().dump();
        for cut in 1..=3usize {
            let mut done = Vec::new();
            done.extend_from_slice(&(16 + cut as u32).to_ne_bytes()); // nlmsg_len 17..=19
            done.extend_from_slice(&3u16.to_ne_bytes()); // NLMSG_DONE
            done.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
            done.extend_from_slice(&1u32.to_ne_bytes()); // seq 1
            done.extend_from_slice(&42u32.to_ne_bytes()); // pid 42
            done.extend_from_slice(&[0u8; 3][..cut]); // a status cut to `cut` bytes
            let mut ex = Exchange::new(&r, 1, 42);
            let got = ex.feed(&done);
            assert!(
                matches!(got, Err(Error::Decode { .. })),
                "{cut}-byte NLMSG_DONE payload: {got:?}"
            );
        }
        // No payload at all: the dump ends (some families send no status).
        let mut done = Vec::new();
        done.extend_from_slice(&16u32.to_ne_bytes());
        done.extend_from_slice(&3u16.to_ne_bytes());
        done.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
        done.extend_from_slice(&1u32.to_ne_bytes());
        done.extend_from_slice(&42u32.to_ne_bytes());
        let mut ex = Exchange::new(&r, 1, 42);
        assert!(ex.feed(&done).unwrap());
    }

    /// [`ERANGE_IFINDEX`] with its `NLMSGERR_ATTR_MSG` bytes replaced by `msg` (same length):
    /// a refusal whose extended ack text is not UTF-8.
    fn erange_with_msg(msg: &[u8; 20]) -> Vec<u8> {
        let mut m = ERANGE_IFINDEX.to_vec();
        m[40..60].copy_from_slice(msg);
        m
    }

    /// A kernel refusal whose extended ack cannot be read (text not UTF-8, an attribute
    /// running past the message, an ack that starts past the payload) keeps the kernel's
    /// errno; what was wrong with the ack is reported beside it.
    #[test]
    fn unreadable_extended_ack_keeps_the_errno() {
        let r = req();
        let feed = |m: &[u8]| Exchange::new(&r, 7, 42).feed(m);
        // Not UTF-8: 0xff in the text.
        let mut text = *b"integer out of range";
        text[8] = 0xff;
        let Err(Error::Netlink(e)) = feed(&erange_with_msg(&text)) else {
            panic!(
                "expected the kernel's ERANGE, got {:?}",
                feed(&erange_with_msg(&text))
            );
        };
        assert_eq!(e.errno, libc::ERANGE);
        assert_eq!(e.bad_attr.as_deref(), Some("NETDEV_A_DMABUF_IFINDEX"));
        let shown = e.to_string();
        assert!(
            shown.starts_with("netdev bind-rx on ifindex 4: ERANGE"),
            "{shown}"
        );
        assert!(shown.contains("; extended ack malformed: "), "{shown}");
        assert!(e.ack_problem.unwrap_or_default().contains("not UTF-8"));
        assert_eq!(e.ext_msg.as_deref(), Some("integer \u{fffd}ut of range"));
        // The OFFS attribute's nla_len runs past the message.
        let mut m = ERANGE_IFINDEX.to_vec();
        m[64] = 0x40; // nla_len 64
        let Err(Error::Netlink(e)) = feed(&m) else {
            panic!("expected the kernel's ERANGE, got {:?}", feed(&m));
        };
        assert_eq!(e.errno, libc::ERANGE);
        assert_eq!(e.ext_msg.as_deref(), Some("integer out of range"));
        assert!(e.to_string().contains("extended ack"), "{e}");
        // Uncapped, with an echoed request longer than the message: the ack would start
        // past the payload.
        let mut m = ERANGE_IFINDEX.to_vec();
        m[6..8].copy_from_slice(&NLM_F_ACK_TLVS.to_ne_bytes());
        m[20..24].copy_from_slice(&200u32.to_ne_bytes()); // echoed nlmsg_len 200
        let Err(Error::Netlink(e)) = feed(&m) else {
            panic!("expected the kernel's ERANGE, got {:?}", feed(&m));
        };
        assert_eq!(e.errno, libc::ERANGE);
        assert!(e.to_string().contains("extended ack"), "{e}");
        // The same bytes on an ACK (error 0) stay a decode error: nothing to keep.
        let mut ack = erange_with_msg(&text);
        ack[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert!(
            matches!(feed(&ack), Err(Error::Decode { .. })),
            "{:?}",
            feed(&ack)
        );
    }

    /// An `NLMSG_DONE` ending a dump with an error and an unreadable extended ack keeps its
    /// errno too.
    #[test]
    fn done_with_unreadable_ack_keeps_the_errno() {
        let r = req().dump();
        #[rustfmt::skip]
        let done: &[u8] = &[
            0x1c, 0x00, 0x00, 0x00, // nlmsg_len 28
            0x03, 0x00,             // NLMSG_DONE
            0x02, 0x02,             // NLM_F_MULTI | NLM_F_ACK_TLVS
            0x01, 0x00, 0x00, 0x00, // seq 1
            0x2a, 0x00, 0x00, 0x00, // pid 42
            0xed, 0xff, 0xff, 0xff, // status -19 (ENODEV)
            0x08, 0x00,             // nla_len 8
            0x01, 0x00,             // NLMSGERR_ATTR_MSG
            0xc3, 0x28, 0x00, 0x00, // "\xc3(": not UTF-8
        ];
        let Err(Error::Netlink(e)) = Exchange::new(&r, 1, 42).feed(done) else {
            panic!("expected ENODEV");
        };
        assert_eq!(e.errno, libc::ENODEV);
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn foreign_message_type_is_rejected() {
        let r = req();
        let mut m = ERANGE_IFINDEX.to_vec();
        m[4..6].copy_from_slice(&99u16.to_ne_bytes());
        let mut ex = Exchange::new(&r, 7, 42);
        let err = ex.feed(&m).unwrap_err();
        assert!(err.to_string().contains("message type 99"), "{err}");
    }

    proptest! {
        #[test]
        fn exchange_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let r = req();
            let mut ex = Exchange::new(&r, 7, 42);
            let _ = ex.feed(&bytes);
        }

        #[test]
        fn error_parsers_never_panic(flags in any::<u16>(),
                                     bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_error(flags, &bytes);
            let _ = parse_done(flags, &bytes);
            let _ = GenlReply::parse(&bytes);
        }

        #[test]
        fn framed_messages_never_panic(ty in prop_oneof![Just(2u16), Just(3u16), Just(20u16)],
                                       flags in any::<u16>(),
                                       body in proptest::collection::vec(any::<u8>(), 0..300)) {
            // A valid nlmsghdr with matching seq/pid around arbitrary bytes reaches the
            // payload parsers rather than stopping at the framing check.
            let mut m = Vec::new();
            m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
            m.extend_from_slice(&ty.to_ne_bytes());
            m.extend_from_slice(&flags.to_ne_bytes());
            m.extend_from_slice(&7u32.to_ne_bytes());
            m.extend_from_slice(&42u32.to_ne_bytes());
            m.extend_from_slice(&body);
            let r = req();
            let mut ex = Exchange::new(&r, 7, 42);
            let _ = ex.feed(&m);
        }
    }
}
