//! Netlink attributes (`struct nlattr`, include/uapi/linux/netlink.h): an [`AttrWriter`] that
//! builds them 4-byte aligned, nests them with `NLA_F_NESTED` and remembers which byte offset
//! holds which attribute path, and an [`AttrIter`] that walks received attributes without ever
//! panicking.
//!
//! Wire shape of one attribute (host byte order):
//!
//! ```text
//! 0      2      4                    nla_len      align4(nla_len)
//! +------+------+----------------------+------------+
//! | len  | type | payload              | pad (zero) |
//! +------+------+----------------------+------------+
//!   nla_len counts header + payload, not the padding; type carries NLA_F_NESTED (0x8000).
//! ```

use std::borrow::Cow;
use std::ops::Range;

use crate::error::{Error, Result};

/// `NLMSG_HDRLEN`: size of `struct nlmsghdr` in bytes.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// `GENL_HDRLEN`: size of `struct genlmsghdr` in bytes.
pub(crate) const GENL_HDRLEN: usize = 4;

/// `NLA_HDRLEN`: size of `struct nlattr` in bytes.
pub(crate) const NLA_HDRLEN: usize = 4;
/// `NLA_ALIGNTO`: attributes start on 4-byte boundaries.
pub(crate) const NLA_ALIGNTO: usize = 4;
/// `NLA_F_NESTED`: the payload is a sequence of attributes.
pub(crate) const NLA_F_NESTED: u16 = libc::NLA_F_NESTED as u16;
/// `NLA_TYPE_MASK`: the attribute number without the two flag bits.
pub(crate) const NLA_TYPE_MASK: u16 = libc::NLA_TYPE_MASK as u16;

/// `nla_len` field of `struct nlattr`.
const LENGTH: Range<usize> = 0..2;
/// `nla_type` field of `struct nlattr`.
const TYPE: Range<usize> = 2..4;

/// Rounds `len` up to the netlink alignment (`NLA_ALIGN` / `NLMSG_ALIGN`, 4 bytes).
pub(crate) const fn align(len: usize) -> usize {
    (len + NLA_ALIGNTO - 1) & !(NLA_ALIGNTO - 1)
}

/// Defines crate-private constants for one kernel attribute set (or command enum) and a
/// function mapping a number back to its kernel name (matching on the constants themselves),
/// used in error paths and decode errors. The values listed are the ones the crate sends or may
/// receive, so that gaps are visible.
macro_rules! kernel_names {
    ($(#[$meta:meta])* fn $fname:ident -> $ty:ty { $($name:ident = $value:literal,)+ }) => {
        $(pub(crate) const $name: $ty = $value;)+
        $(#[$meta])*
        fn $fname(value: $ty) -> &'static str {
            match value {
                $($name => stringify!($name),)+
                _ => "UNKNOWN",
            }
        }
    };
}
pub(crate) use kernel_names;

/// A Rust enum carried in an integer attribute (`raw` is the attribute's wire type).
pub(crate) trait WireEnum: Sized {
    /// The attribute's integer type.
    type Raw;
    /// From the wire value; `Error::Decode` for values the enum does not know.
    fn decode(raw: Self::Raw) -> Result<Self>;
    /// The wire value.
    fn encode(&self) -> Self::Raw;
}

/// Defines one kernel attribute set from a single table: the `u16` constants (error paths
/// name attributes by their constants' names) and a struct with one field per attribute it
/// carries, with `from_attrs` (decode a message's attributes; unknown
/// ones are skipped, as newer kernels add some) and `emit` (write the fields that are set).
///
/// A field row is `NAME = number => field: mode wire`, with mode `opt` (`Option`, absent is
/// `None`), `req` (absent is `Error::Decode` "`NAME` is missing" about the struct's reply),
/// `zero` (absent is 0) or `present` (a `bool`: the empty nest is there), and wire `u8`,
/// `u16`, `u32`, `u64` (fixed width), `uint` (`NLA_UINT`: 4 or 8 bytes, a `u64`), `string`,
/// `nest` (with `present` only), `nest as Table` (a nest decoded and emitted by another
/// `attr_struct!` table) or `wire as Enum` (an [`WireEnum`] type). Numbers the struct does not
/// carry (header nests, padding, multi-attr nests, counters it does not read) go in the
/// `also` list: `from_attrs` names them in its match as known and skipped, so each number is
/// listed once (a number in both lists is an unreachable-pattern warning).
///
/// Nothing generated carries an `allow(dead_code)`: a constant, a table or a name function no
/// code uses is a warning, and goes.
macro_rules! attr_struct {
    (
        $(#[$smeta:meta])* $vis:vis struct $S:ident($what:literal) {
            $($(#[$m:meta])* $N:ident = $v:literal => $f:ident: $mode:ident $wire:ident
                $(as $ety:ty)?,)+
        }
        $(also { $($N2:ident = $v2:literal,)+ })?
    ) => {
        $(pub(crate) const $N: u16 = $v;)+
        $($(pub(crate) const $N2: u16 = $v2;)+)?
        $(#[$smeta])*
        $vis struct $S {
            $($(#[$m])* pub $f: attr_struct!(@field $mode $wire $(as $ety)?),)+
        }
        impl $S {
            /// Decodes the attributes of one message; the `also` numbers and unknown
            /// attributes are skipped.
            ///
            /// Errors: `Error::Decode` naming the attribute when one is malformed or a
            /// required one is missing.
            $vis fn from_attrs(attrs: &[u8]) -> $crate::error::Result<Self> {
                $(let mut $f = None;)+
                for a in $crate::netlink::attr::AttrIter::new(attrs) {
                    let a = a?;
                    match a.kind() {
                        $($N => $f = Some(attr_struct!(@get a, $N, $wire $(as $ety)?)),)+
                        // Known numbers the struct does not carry, then newer ones.
                        $($($N2)|+ => {})?
                        _ => {}
                    }
                }
                Ok($S {
                    $($f: attr_struct!(@finish $mode, $f, $what, $N),)+
                })
            }

            /// Writes the fields that are set (optional ones when `Some`, flags when `true`)
            /// as attributes, in table order.
            $vis fn emit(&self, w: &mut $crate::netlink::attr::AttrWriter) {
                self.emit_kinds(w, &[$($N),+]);
            }

            /// [`emit`](Self::emit), but only attributes `kinds`, in that order.
            pub(crate) fn emit_kinds(&self, w: &mut $crate::netlink::attr::AttrWriter, kinds: &[u16]) {
                for &k in kinds {
                    match k {
                        $($N => attr_struct!(@emit $mode, w, $N, &self.$f, $wire $(as $ety)?),)+
                        _ => {}
                    }
                }
            }
        }
    };
    (@field opt $($t:tt)+) => { Option<attr_struct!(@ty $($t)+)> };
    (@field present nest) => { bool };
    (@field $mode:ident $($t:tt)+) => { attr_struct!(@ty $($t)+) };
    (@ty uint) => { u64 };
    (@ty string) => { String };
    (@ty $w:ident as $e:ty) => { $e };
    (@ty $w:ident) => { $w };
    (@get $a:ident, $N:ident, nest) => { true };
    (@get $a:ident, $N:ident, nest as $e:ty) => { <$e>::from_attrs($a.payload())? };
    (@get $a:ident, $N:ident, $w:ident as $e:ty) => {
        <$e as $crate::netlink::attr::WireEnum>::decode($a.$w(stringify!($N))?)?
    };
    (@get $a:ident, $N:ident, $w:ident) => { $a.$w(stringify!($N))? };
    (@finish opt, $f:ident, $what:literal, $N:ident) => { $f };
    (@finish req, $f:ident, $what:literal, $N:ident) => {
        $f.ok_or_else(|| $crate::error::Error::decode($what, concat!(stringify!($N), " is missing")))?
    };
    (@finish $mode:ident, $f:ident, $what:literal, $N:ident) => { $f.unwrap_or_default() };
    (@emit opt, $w:ident, $N:ident, $v:expr, $($t:tt)+) => {
        if let Some(v) = $v {
            attr_struct!(@put $w, $N, v, $($t)+)
        }
    };
    (@emit present, $w:ident, $N:ident, $v:expr, nest) => {
        if *$v {
            let nest = $w.begin_nest($N, stringify!($N));
            $w.end_nest(nest);
        }
    };
    (@emit $mode:ident, $w:ident, $N:ident, $v:expr, $($t:tt)+) => {{
        let v = $v;
        attr_struct!(@put $w, $N, v, $($t)+)
    }};
    (@put $w:ident, $N:ident, $v:ident, string) => { $w.put_str($N, stringify!($N), $v) };
    (@put $w:ident, $N:ident, $v:ident, nest as $e:ty) => {{
        let nest = $w.begin_nest($N, stringify!($N));
        $v.emit($w);
        $w.end_nest(nest);
    }};
    (@put $w:ident, $N:ident, $v:ident, $t:ident as $e:ty) => {{
        let raw = &<$e as $crate::netlink::attr::WireEnum>::encode($v);
        attr_struct!(@put $w, $N, raw, $t)
    }};
    (@put $w:ident, $N:ident, $v:ident, u8) => { $w.put_u8($N, stringify!($N), *$v) };
    (@put $w:ident, $N:ident, $v:ident, u16) => { $w.put_u16($N, stringify!($N), *$v) };
    (@put $w:ident, $N:ident, $v:ident, u32) => { $w.put_u32($N, stringify!($N), *$v) };
    (@put $w:ident, $N:ident, $v:ident, u64) => { $w.put_u64($N, stringify!($N), *$v) };
    (@put $w:ident, $N:ident, $v:ident, uint) => { $w.put_uint($N, stringify!($N), *$v) };
}
pub(crate) use attr_struct;

/// Calls [`AttrWriter`] method `$method` (`put_u32`, `begin_nest`, ...) for attribute `$name`
/// (a constant), naming it after the constant.
macro_rules! put_attr {
    ($w:expr, $method:ident, $name:ident $(, $value:expr)?) => {
        $w.$method($name, stringify!($name) $(, $value)?)
    };
}
pub(crate) use put_attr;

/// A token for a nest opened by [`AttrWriter::begin_nest`]; give it back to
/// [`AttrWriter::end_nest`].
#[derive(Debug)]
#[must_use = "a nest must be closed with AttrWriter::end_nest"]
pub struct Nest(usize);

#[derive(Debug, Clone)]
struct Entry {
    /// Offset of the attribute header in `AttrWriter::buf`, bytes.
    offset: usize,
    kind: u16,
    name: Cow<'static, str>,
    /// Position among same-kind siblings, for multi-attr elements (`QUEUES[1]`).
    index: Option<usize>,
    parent: Option<usize>,
}

/// Builds a run of attributes and records, for every attribute it writes, its offset and its
/// path of kernel names, so that an extended ack's `NLMSGERR_ATTR_OFFS` can be shown as
/// `NETDEV_A_DMABUF_QUEUES[1].NETDEV_A_QUEUE_TYPE`.
///
/// `base` is where the first attribute will sit, in bytes from the start of the `nlmsghdr`
/// (20 for generic netlink: 16-byte `nlmsghdr` + 4-byte `genlmsghdr`). Every attribute is
/// padded to 4 bytes with zeros; `nla_len` excludes the padding.
#[derive(Debug, Clone)]
pub struct AttrWriter {
    buf: Vec<u8>,
    base: usize,
    entries: Vec<Entry>,
    open: Vec<usize>,
    too_long: Option<String>,
}

impl Default for AttrWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl AttrWriter {
    /// A writer whose attributes follow a generic-netlink header (base offset 20 bytes).
    pub fn new() -> Self {
        Self::with_base(NLMSG_HDRLEN + GENL_HDRLEN)
    }

    /// A writer whose first attribute sits `base` bytes after the start of the `nlmsghdr`.
    pub(crate) fn with_base(base: usize) -> Self {
        AttrWriter {
            buf: Vec::new(),
            base,
            entries: Vec::new(),
            open: Vec::new(),
            too_long: None,
        }
    }

    /// The attributes written so far (nests still open have a provisional length).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes from the start of the `nlmsghdr` to the first attribute.
    pub fn base(&self) -> usize {
        self.base
    }

    /// `Err(Error::Usage)` if some attribute or nest exceeded the 65535-byte `nla_len`.
    pub fn check(&self) -> Result<()> {
        self.too_long.as_ref().map_or(Ok(()), |p| {
            Err(Error::Usage(format!(
                "netlink attribute {p} is longer than 65535 bytes"
            )))
        })
    }

    fn record(&mut self, kind: u16, name: Cow<'static, str>, indexed: bool) -> usize {
        let parent = self.open.last().copied();
        let index = indexed.then(|| {
            self.entries
                .iter()
                .filter(|e| e.parent == parent && e.kind == kind && e.index.is_some())
                .count()
        });
        self.entries.push(Entry {
            offset: self.buf.len(),
            kind,
            name,
            index,
            parent,
        });
        self.entries.len() - 1
    }

    /// `len` as an `nla_len` for entry `entry`; longer than `u16::MAX` records the first such
    /// path for [`check`](Self::check) and gives `u16::MAX`.
    fn nla_len(&mut self, len: usize, entry: usize) -> u16 {
        u16::try_from(len).unwrap_or_else(|_| {
            if self.too_long.is_none() {
                self.too_long = Some(self.path_of(entry));
            }
            u16::MAX
        })
    }

    fn header(&mut self, kind: u16, len: usize) {
        let nla_len = self.nla_len(len, self.entries.len() - 1);
        self.buf.extend_from_slice(&nla_len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
    }

    fn pad(&mut self) {
        self.buf.resize(align(self.buf.len()), 0);
    }

    /// Writes attribute `kind` (its number; flags may be ORed in) with raw `payload` bytes.
    /// `name` is the kernel constant, e.g. `"NETDEV_A_DMABUF_FD"`.
    pub fn put(&mut self, kind: u16, name: impl Into<Cow<'static, str>>, payload: &[u8]) {
        self.record(kind & NLA_TYPE_MASK, name.into(), false);
        self.header(kind, NLA_HDRLEN + payload.len());
        self.buf.extend_from_slice(payload);
        self.pad();
    }

    /// Writes a `u8` attribute (`NLA_U8`; 1 byte + 3 bytes padding).
    pub(crate) fn put_u8(&mut self, kind: u16, name: &'static str, value: u8) {
        self.put(kind, name, &[value]);
    }

    /// Writes a `u16` attribute (`NLA_U16`, host byte order).
    #[cfg(test)]
    pub(crate) fn put_u16(&mut self, kind: u16, name: &'static str, value: u16) {
        self.put(kind, name, &value.to_ne_bytes());
    }

    /// Writes a `u32` attribute (`NLA_U32`, host byte order).
    pub fn put_u32(&mut self, kind: u16, name: &'static str, value: u32) {
        self.put(kind, name, &value.to_ne_bytes());
    }

    /// Writes a `u64` attribute (`NLA_U64`, host byte order).
    pub(crate) fn put_u64(&mut self, kind: u16, name: &'static str, value: u64) {
        self.put(kind, name, &value.to_ne_bytes());
    }

    /// Writes a variable-width unsigned attribute (`NLA_UINT`) the way the kernel does: 4 bytes
    /// when the value fits in `u32`, otherwise 8.
    pub(crate) fn put_uint(&mut self, kind: u16, name: &'static str, value: u64) {
        match u32::try_from(value) {
            Ok(v) => self.put_u32(kind, name, v),
            Err(_) => self.put_u64(kind, name, value),
        }
    }

    /// Writes a NUL-terminated string attribute (`NLA_NUL_STRING` / `NLA_STRING`).
    pub(crate) fn put_str(&mut self, kind: u16, name: &'static str, value: &str) {
        self.put(kind, name, &[value.as_bytes(), &[0]].concat());
    }

    fn open_nest(&mut self, kind: u16, name: Cow<'static, str>, indexed: bool) -> Nest {
        let entry = self.record(kind & NLA_TYPE_MASK, name, indexed);
        let start = self.buf.len();
        self.header(kind, NLA_HDRLEN);
        self.open.push(entry);
        Nest(start)
    }

    /// Opens nest `kind` (`NLA_F_NESTED` is ORed in). Attributes written until
    /// [`end_nest`](Self::end_nest) go inside it and get paths `NAME.INNER`.
    pub fn begin_nest(&mut self, kind: u16, name: &'static str) -> Nest {
        self.open_nest(kind | NLA_F_NESTED, name.into(), false)
    }

    /// Opens one element of a multi-attr nest (the same `kind` repeated, e.g. one
    /// `NETDEV_A_DMABUF_QUEUES` per queue). Its path carries the element's position among
    /// same-kind siblings: `NETDEV_A_DMABUF_QUEUES[1]`.
    pub(crate) fn begin_nest_indexed(&mut self, kind: u16, name: &'static str) -> Nest {
        self.open_nest(kind | NLA_F_NESTED, name.into(), true)
    }

    /// Opens a nest *without* `NLA_F_NESTED`, the way older families (nlctrl) encode their
    /// replies. Never use it in requests: strict families reject such nests with EINVAL
    /// "NLA_F_NESTED is missing".
    #[cfg(test)]
    pub(crate) fn begin_nest_unflagged(
        &mut self,
        kind: u16,
        name: &'static str,
        indexed: bool,
    ) -> Nest {
        self.open_nest(kind & !NLA_F_NESTED, name.into(), indexed)
    }

    /// Closes `nest`: patches its `nla_len` to cover everything written since it was opened.
    /// Nests opened inside it and still open are closed too.
    pub fn end_nest(&mut self, nest: Nest) {
        let start = nest.0;
        while let Some(e) = self.open.pop() {
            let off = self.entries[e].offset;
            let nla_len = self.nla_len(self.buf.len() - off, e);
            self.buf[off + LENGTH.start..off + LENGTH.end].copy_from_slice(&nla_len.to_ne_bytes());
            if off <= start {
                break;
            }
        }
    }

    fn path_of(&self, i: usize) -> String {
        let mut parts: Vec<String> = std::iter::successors(Some(i), |&i| self.entries[i].parent)
            .map(|i| {
                let e = &self.entries[i];
                e.index
                    .map_or(e.name.to_string(), |n| format!("{}[{n}]", e.name))
            })
            .collect();
        parts.reverse();
        parts.join(".")
    }

    /// The path of the attribute whose header starts `offset` bytes after the start of the
    /// `nlmsghdr` (what `NLMSGERR_ATTR_OFFS` and `NLMSGERR_ATTR_MISS_NEST` report), e.g.
    /// `NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE`; `None` if no attribute starts there.
    pub fn path_at(&self, offset: u32) -> Option<String> {
        let off = (offset as usize).checked_sub(self.base)?;
        let i = self.entries.iter().position(|e| e.offset == off)?;
        Some(self.path_of(i))
    }

    /// [`path_at`](Self::path_at), or a description of where `offset` points when no
    /// attribute starts there: `"offset 2 (message header)"`, `"offset 50 (inside
    /// NETDEV_A_DMABUF_QUEUES[0])"`, `"offset 400 (past the request)"`.
    pub(crate) fn describe_offset(&self, offset: u32) -> String {
        if let Some(p) = self.path_at(offset) {
            return p;
        }
        let Some(off) = (offset as usize).checked_sub(self.base) else {
            return format!("offset {offset} (message header)");
        };
        let inner = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                let len = self
                    .buf
                    .get(e.offset..e.offset + 2)
                    .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]) as usize);
                e.offset < off && off < e.offset + len
            })
            .map(|(i, _)| i)
            .next_back();
        match inner {
            Some(i) => format!("offset {offset} (inside {})", self.path_of(i)),
            None => format!("offset {offset} (past the request)"),
        }
    }
}

/// One received attribute: its number (flags masked off), flags and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    raw_type: u16,
    payload: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The attribute number (`nla_type & NLA_TYPE_MASK`).
    pub fn kind(&self) -> u16 {
        self.raw_type & NLA_TYPE_MASK
    }

    /// The `nla_type` field as received, flags included.
    #[cfg(test)]
    pub(crate) fn raw_type(&self) -> u16 {
        self.raw_type
    }

    /// Whether `NLA_F_NESTED` is set.
    #[cfg(test)]
    pub(crate) fn is_nested(&self) -> bool {
        self.raw_type & NLA_F_NESTED != 0
    }

    /// The payload (without header and padding).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    fn fixed<const N: usize>(&self, what: &str) -> Result<[u8; N]> {
        self.payload.try_into().map_err(|_| {
            Error::decode(
                what,
                format!("payload is {} bytes, expected {N}", self.payload.len()),
            )
        })
    }

    /// The payload as `u8`; `Error::Decode` naming `what` unless it is exactly 1 byte.
    pub fn u8(&self, what: &str) -> Result<u8> {
        Ok(self.fixed::<1>(what)?[0])
    }

    /// The payload as `u16` (host byte order); exactly 2 bytes.
    pub fn u16(&self, what: &str) -> Result<u16> {
        Ok(u16::from_ne_bytes(self.fixed(what)?))
    }

    /// The payload as `u32` (host byte order); exactly 4 bytes.
    pub fn u32(&self, what: &str) -> Result<u32> {
        Ok(u32::from_ne_bytes(self.fixed(what)?))
    }

    /// The payload as `u64` (host byte order); exactly 8 bytes.
    pub fn u64(&self, what: &str) -> Result<u64> {
        Ok(u64::from_ne_bytes(self.fixed(what)?))
    }

    /// A variable-width unsigned integer (`NLA_UINT`): 4 or 8 bytes.
    pub fn uint(&self, what: &str) -> Result<u64> {
        match self.payload.len() {
            4 => Ok(self.u32(what)? as u64),
            8 => self.u64(what),
            n => Err(Error::decode(
                what,
                format!("uint payload is {n} bytes, expected 4 or 8"),
            )),
        }
    }

    /// A string payload up to its first NUL (a missing NUL is tolerated); `Error::Decode`
    /// if it is not UTF-8.
    pub fn string(&self, what: &str) -> Result<String> {
        let text = self.payload.split(|&b| b == 0).next().unwrap_or_default();
        std::str::from_utf8(text)
            .map(str::to_string)
            .map_err(|e| Error::decode(what, format!("string is not UTF-8: {e}")))
    }

    /// The attributes inside this one (for nests; the `NLA_F_NESTED` flag is not required,
    /// older kernels omit it in replies).
    pub fn nested(&self) -> AttrIter<'a> {
        AttrIter::new(self.payload)
    }
}

/// Walks the attributes in a byte run. Yields `Err(Error::Decode)` once for a malformed
/// length (shorter than the header, or running past the end) and then stops; never panics.
#[derive(Debug, Clone)]
pub struct AttrIter<'a> {
    rest: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> AttrIter<'a> {
    /// Iterates over the attributes in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        AttrIter {
            rest: bytes,
            offset: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Result<Attr<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let fail = |this: &mut Self, detail: String| {
            this.failed = true;
            Some(Err(Error::decode("nlattr", detail)))
        };
        if self.rest.len() < NLA_HDRLEN {
            let n = self.rest.len();
            let off = self.offset;
            return fail(
                self,
                format!("{n} trailing bytes at offset {off}, shorter than a header"),
            );
        }
        let len =
            u16::from_ne_bytes([self.rest[LENGTH.start], self.rest[LENGTH.start + 1]]) as usize;
        let raw_type = u16::from_ne_bytes([self.rest[TYPE.start], self.rest[TYPE.start + 1]]);
        if len < NLA_HDRLEN || len > self.rest.len() {
            let (off, avail) = (self.offset, self.rest.len());
            return fail(
                self,
                format!("nla_len {len} at offset {off} (type {raw_type}) with {avail} bytes left"),
            );
        }
        let payload = &self.rest[NLA_HDRLEN..len];
        let step = align(len).min(self.rest.len());
        self.rest = &self.rest[step..];
        self.offset += step;
        Some(Ok(Attr { raw_type, payload }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn align_rounds_up_to_four() {
        assert_eq!([0, 1, 4, 5, 7, 8].map(align), [0, 4, 4, 8, 8, 8]);
    }

    /// Synthetic: a u8 (padded), an empty nest and a nest with a u32, written by hand.
    #[cfg(target_endian = "little")]
    #[test]
    fn writer_pads_and_nests() {
        let mut w = AttrWriter::with_base(0);
        w.put_u8(7, "A", 0xab);
        let n = w.begin_nest(2, "N");
        w.end_nest(n);
        let n = w.begin_nest(3, "M");
        w.put_u32(1, "X", 5);
        w.end_nest(n);
        #[rustfmt::skip]
        let expected: &[u8] = &[
            0x05, 0x00,             // nla_len 5
            0x07, 0x00,             // type 7 (A)
            0xab, 0x00, 0x00, 0x00, // value 0xab + 3 bytes padding
            0x04, 0x00,             // nla_len 4: empty nest
            0x02, 0x80,             // type 2 | NLA_F_NESTED (N)
            0x0c, 0x00,             // nla_len 12
            0x03, 0x80,             // type 3 | NLA_F_NESTED (M)
            0x08, 0x00,             //   nla_len 8
            0x01, 0x00,             //   type 1 (X)
            0x05, 0x00, 0x00, 0x00, //   u32 5
        ];
        assert_eq!(w.bytes(), expected);
        let attrs: Vec<_> = AttrIter::new(expected).collect::<Result<_>>().unwrap();
        assert_eq!(attrs.len(), 3);
        assert_eq!((attrs[0].kind(), attrs[0].u8("A").unwrap()), (7, 0xab));
        assert!(attrs[1].is_nested() && attrs[1].payload().is_empty());
        let inner: Vec<_> = attrs[2].nested().collect::<Result<_>>().unwrap();
        assert_eq!(inner[0].u32("X").unwrap(), 5);
        assert_eq!(w.path_at(16), Some("M.X".to_string()));
        assert_eq!(w.describe_offset(18), "offset 18 (inside M.X)");
        assert_eq!(w.describe_offset(2), "offset 2 (inside A)");
        assert_eq!(w.describe_offset(200), "offset 200 (past the request)");
    }

    #[test]
    fn indexed_nests_number_same_kind_siblings() {
        let mut w = AttrWriter::with_base(20);
        w.put_u32(1, "IFINDEX", 4);
        for id in [8, 9] {
            let n = w.begin_nest_indexed(2, "QUEUES");
            w.put_u32(1, "ID", id);
            w.put_u32(3, "TYPE", 0);
            w.end_nest(n);
        }
        // 20: IFINDEX, 28: QUEUES[0], 32: .ID, 40: .TYPE, 48: QUEUES[1], 52: .ID, 60: .TYPE
        assert_eq!(w.path_at(20).as_deref(), Some("IFINDEX"));
        assert_eq!(w.path_at(28).as_deref(), Some("QUEUES[0]"));
        assert_eq!(w.path_at(40).as_deref(), Some("QUEUES[0].TYPE"));
        assert_eq!(w.path_at(60).as_deref(), Some("QUEUES[1].TYPE"));
        assert_eq!(w.path_at(44), None);
        assert_eq!(w.describe_offset(4), "offset 4 (message header)");
        assert!(w.check().is_ok());
    }

    #[test]
    fn oversized_attribute_is_reported_not_truncated_silently() {
        let mut w = AttrWriter::new();
        w.put(1, "BIG", &vec![0u8; 70_000]);
        let err = w.check().unwrap_err();
        assert!(err.to_string().contains("BIG"), "{err}");
    }

    #[test]
    fn bad_lengths_are_decode_errors_then_iteration_stops() {
        for bytes in [
            &[0x03, 0x00, 0x01, 0x00][..],         // nla_len 3 < header
            &[0x09, 0x00, 0x01, 0x00, 0, 0, 0, 0], // nla_len 9 > 8 available
            &[0x04, 0x00],                         // truncated header
        ] {
            let mut it = AttrIter::new(bytes);
            assert!(matches!(it.next(), Some(Err(Error::Decode { .. }))));
            assert!(it.next().is_none());
        }
    }

    #[test]
    fn scalar_decoders_check_width() {
        let a = Attr {
            raw_type: 1,
            payload: &[1, 0, 0, 0],
        };
        assert_eq!(a.u32("X").unwrap(), 1);
        assert_eq!(a.uint("X").unwrap(), 1);
        let e = a.u16("NETDEV_A_QUEUE_ID").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode NETDEV_A_QUEUE_ID: payload is 4 bytes, expected 2"
        );
        assert!(a.uint("X").is_ok() && a.u64("X").is_err());
        let s = Attr {
            raw_type: 2,
            payload: b"netdev\0\0",
        };
        assert_eq!(s.string("name").unwrap(), "netdev");
    }

    fn walk(bytes: &[u8], depth: u32) {
        for a in AttrIter::new(bytes).flatten() {
            let _ = (a.u8("x"), a.u16("x"), a.u32("x"), a.u64("x"), a.uint("x"));
            let _ = a.string("x");
            if depth < 4 {
                walk(a.payload(), depth + 1);
            }
        }
    }

    proptest! {
        #[test]
        fn iterator_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            walk(&bytes, 0);
        }
    }
}
