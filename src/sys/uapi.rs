//! Kernel user-space ABI that this crate needs and the system's libc/headers lack (they are 6.1
//! here). Values are checked against the 6.18 kernel's BTF and listed, with their sources, in
//! `docs/kernel-interface.md`; each item names its uapi header. Constants `libc` already exports
//! are re-exported, not redefined; structs are declared with `uapi_struct!` (size and every
//! offset asserted, a byte codec generated) even where `libc` or the `io-uring` crate has
//! them, and each has a byte-exact test below.

#![allow(non_camel_case_types)]

use std::mem::size_of;

use crate::sys::uapi_struct::uapi_struct;

// ---- include/uapi/asm-generic/socket.h, include/linux/socket.h, include/uapi/linux/uio.h
// (devmem TCP, v6.12+) ----

pub use libc::{SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR, SO_DEVMEM_DONTNEED};

uapi_struct! {
    /// `struct dmabuf_cmsg` (include/uapi/linux/uio.h, 24 bytes): the payload of both devmem
    /// cmsgs, `SCM_DEVMEM_DMABUF` (a frag left in the dma-buf) and `SCM_DEVMEM_LINEAR` (bytes
    /// copied to the iov; only `frag_size` is meaningful).
    #[derive(Default)]
    dmabuf_cmsg = 24 {
        /// Byte offset of the frag in the dma-buf.
        frag_offset: u64 = 0,
        /// Bytes of the frag.
        frag_size: u32 = 8,
        /// The frag's token, to give back with `SO_DEVMEM_DONTNEED`.
        frag_token: u32 = 12,
        /// The binding id (`NETDEV_A_DMABUF_ID`) the frag's dma-buf is bound as.
        dmabuf_id: u32 = 16,
        /// Reserved, zero.
        flags: u32 = 20,
    }
}

uapi_struct! {
    /// `struct dmabuf_token` (include/uapi/linux/uio.h, 8 bytes): one range of frag tokens
    /// given back with `SO_DEVMEM_DONTNEED`.
    #[derive(Default)]
    dmabuf_token = 8 {
        /// First token of the range.
        token_start: u32 = 0,
        /// Tokens in the range.
        token_count: u32 = 4,
    }
}

/// `recvmsg` flag asking for devmem frags as `SCM_DEVMEM_*` cmsgs (include/linux/socket.h).
pub const MSG_SOCK_DEVMEM: libc::c_int = 0x0200_0000;

/// Proposed `SOL_SOCKET` option (devmem autorelease series v6, not merged upstream): int 0/1.
/// Kernels without it answer `ENOPROTOOPT`.
pub const SO_DEVMEM_AUTORELEASE: libc::c_int = 85;

/// Most `dmabuf_token` entries one `SO_DEVMEM_DONTNEED` accepts (kernel `MAX_DONTNEED_TOKENS`);
/// more gives `EINVAL`.
pub const MAX_DONTNEED_TOKENS: usize = 128;

/// Most frags one `SO_DEVMEM_DONTNEED` frees (kernel `MAX_DONTNEED_FRAGS`); the returned count
/// is then smaller than asked.
pub const MAX_DONTNEED_FRAGS: usize = 1024;

/// `sizeof(struct dmabuf_cmsg)` (include/uapi/linux/uio.h): the payload of both devmem cmsgs.
pub const DMABUF_CMSG_LEN: usize = size_of::<dmabuf_cmsg>();

// ---- include/linux/socket.h (control messages; LP64 layout) ----

/// `sizeof(struct cmsghdr)` on LP64: `cmsg_len` (u64, bytes of header + payload), `cmsg_level`
/// (i32), `cmsg_type` (i32).
pub const CMSGHDR_LEN: usize = 16;
// The hand-written cmsg header is libc's.
const _: () = assert!(CMSGHDR_LEN == size_of::<libc::cmsghdr>());

/// `CMSG_ALIGN(len)`: rounds a byte length up to the 8-byte cmsg alignment.
///
/// ```
/// use ncdevmem::sys::uapi::cmsg_align;
/// assert_eq!(cmsg_align(0), 0);
/// assert_eq!(cmsg_align(4), 8);
/// assert_eq!(cmsg_align(20), 24);
/// assert_eq!(cmsg_align(24), 24);
/// ```
pub const fn cmsg_align(len: usize) -> usize {
    (len + 7) & !7
}

/// `CMSG_LEN(payload)`: the `cmsg_len` value of a cmsg with `payload` bytes.
///
/// ```
/// use ncdevmem::sys::uapi::{cmsg_len, DMABUF_CMSG_LEN};
/// // The binding id cmsg of devmem TX (a u32): the kernel wants exactly 20.
/// assert_eq!(cmsg_len(4), 20);
/// // SCM_DEVMEM_DMABUF / SCM_DEVMEM_LINEAR carry a 24-byte struct dmabuf_cmsg.
/// assert_eq!(DMABUF_CMSG_LEN, 24);
/// assert_eq!(cmsg_len(DMABUF_CMSG_LEN), 40);
/// ```
pub const fn cmsg_len(payload: usize) -> usize {
    CMSGHDR_LEN + payload
}

/// `CMSG_SPACE(payload)`: bytes a cmsg with `payload` bytes takes in the control buffer.
///
/// ```
/// use ncdevmem::sys::uapi::{cmsg_space, DMABUF_CMSG_LEN};
/// // The u32 binding id is padded to 8 bytes after the 16-byte header.
/// assert_eq!(cmsg_space(4), 24);
/// // One devmem frag cmsg; ncdevmem's 80000-byte control buffer holds 2000 of them.
/// assert_eq!(cmsg_space(DMABUF_CMSG_LEN), 40);
/// assert_eq!(80_000 / cmsg_space(DMABUF_CMSG_LEN), 2000);
/// ```
pub const fn cmsg_space(payload: usize) -> usize {
    CMSGHDR_LEN + cmsg_align(payload)
}

/// The 16 header bytes of a cmsg with `payload` bytes (native byte order): `cmsg_len` =
/// `CMSG_LEN(payload)`, `cmsg_level`, `cmsg_type`.
pub fn encode_cmsghdr(payload: usize, level: i32, ty: i32) -> [u8; CMSGHDR_LEN] {
    let mut b = [0u8; CMSGHDR_LEN];
    b[0..8].copy_from_slice(&(cmsg_len(payload) as u64).to_ne_bytes());
    b[8..12].copy_from_slice(&level.to_ne_bytes());
    b[12..16].copy_from_slice(&ty.to_ne_bytes());
    b
}

/// One control message as it sits in the buffer: header fields and payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCmsg<'a> {
    /// `cmsg_level` (`SOL_SOCKET`, `SOL_IPV6`, ...).
    pub level: i32,
    /// `cmsg_type` (`SCM_DEVMEM_DMABUF`, `IPV6_RECVERR`, ...).
    pub ty: i32,
    /// Byte offset of the header in the control buffer.
    pub offset: usize,
    /// The `cmsg_len - 16` payload bytes (no padding).
    pub payload: &'a [u8],
}

/// Walks the cmsgs in `control` (the first `msg_controllen` bytes of the control buffer), like
/// `CMSG_FIRSTHDR`/`CMSG_NXTHDR` but over bytes, never reading past the slice. The last cmsg's
/// padding may be cut off by the end of the buffer.
///
/// Yields `Err(Error::Decode)` (what = "cmsghdr") once and then stops for: fewer than 16 bytes
/// left for a header, `cmsg_len < 16`, or `cmsg_len` larger than the bytes left (a truncated
/// cmsg).
///
/// ```
/// use ncdevmem::sys::uapi::{cmsg_space, encode_cmsghdr, walk_cmsgs};
/// const SOL_SOCKET: i32 = 1;
/// const SOL_IP: i32 = 0;
/// // A cmsg with a 4-byte payload (padded to 8), then one with an empty payload.
/// let mut control = Vec::new();
/// control.extend_from_slice(&encode_cmsghdr(4, SOL_SOCKET, 80));
/// control.extend_from_slice(&7u32.to_ne_bytes());
/// control.extend_from_slice(&[0; 4]); // CMSG_ALIGN padding
/// control.extend_from_slice(&encode_cmsghdr(0, SOL_IP, 11));
/// assert_eq!(control.len(), cmsg_space(4) + cmsg_space(0));
///
/// let seen: Vec<(i32, i32, usize, Vec<u8>)> = walk_cmsgs(&control)
///     .map(|c| c.map(|c| (c.level, c.ty, c.offset, c.payload.to_vec())))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(
///     seen,
///     [
///         (SOL_SOCKET, 80, 0, 7u32.to_ne_bytes().to_vec()),
///         (SOL_IP, 11, 24, Vec::new()),
///     ]
/// );
///
/// // The last cmsg's padding may be cut off by the end of the buffer ...
/// assert_eq!(walk_cmsgs(&control[..20]).count(), 1);
/// // ... its payload may not: one error, then the walk stops.
/// let mut walk = walk_cmsgs(&control[..19]);
/// let e = walk.next().unwrap().unwrap_err();
/// assert!(e.to_string().contains("truncated cmsg"), "{e}");
/// assert!(walk.next().is_none());
/// # Ok::<(), ncdevmem::Error>(())
/// ```
pub fn walk_cmsgs(control: &[u8]) -> CmsgWalk<'_> {
    CmsgWalk {
        buf: control,
        pos: 0,
    }
}

/// Iterator returned by [`walk_cmsgs`].
#[derive(Debug, Clone)]
pub struct CmsgWalk<'a> {
    buf: &'a [u8],
    /// Offset of the next header; past the end once done (after an error too).
    pos: usize,
}

impl<'a> Iterator for CmsgWalk<'a> {
    type Item = crate::Result<RawCmsg<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let pos = self.pos;
        let rest = self.buf.get(pos..).filter(|r| !r.is_empty())?;
        let fail = |this: &mut Self, detail: String| {
            this.pos = usize::MAX;
            Some(Err(crate::Error::decode("cmsghdr", detail)))
        };
        let Some(h) = rest.first_chunk::<CMSGHDR_LEN>() else {
            let n = rest.len();
            return fail(
                self,
                format!(
                    "{n} trailing bytes at control offset {pos}; a cmsghdr needs {CMSGHDR_LEN}"
                ),
            );
        };
        let field = |at: usize| -> [u8; 4] { [h[at], h[at + 1], h[at + 2], h[at + 3]] };
        let len = u64::from_ne_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
        let level = i32::from_ne_bytes(field(8));
        let ty = i32::from_ne_bytes(field(12));
        if len < CMSGHDR_LEN as u64 {
            return fail(
                self,
                format!(
                    "cmsg_len {len} at control offset {pos} is below the {CMSGHDR_LEN}-byte header"
                ),
            );
        }
        if len > rest.len() as u64 {
            return fail(
                self,
                format!(
                    "cmsg_len {len} (level {level}, type {ty}) at control offset {pos} exceeds the {} bytes left: truncated cmsg",
                    rest.len()
                ),
            );
        }
        let len = len as usize;
        self.pos += cmsg_align(len).min(rest.len());
        Some(Ok(RawCmsg {
            level,
            ty,
            offset: pos,
            payload: &rest[CMSGHDR_LEN..len],
        }))
    }
}

impl std::iter::FusedIterator for CmsgWalk<'_> {}

// ---- include/uapi/linux/errqueue.h (MSG_ZEROCOPY completions) ----

uapi_struct! {
    /// `struct sock_extended_err` (include/uapi/linux/errqueue.h, 16 bytes): the payload of an
    /// `IP_RECVERR` / `IPV6_RECVERR` cmsg; for a zerocopy completion `ee_info..=ee_data` are the
    /// completed send numbers. (`ee_data` shares its bytes with `ee_rfc4884`, which ICMP errors
    /// use; this tool reads only completions.)
    #[derive(Default)]
    sock_extended_err = 16 {
        /// Positive errno; 0 for a zerocopy completion.
        ee_errno: u32 = 0,
        /// `SO_EE_ORIGIN_*`; [`SO_EE_ORIGIN_ZEROCOPY`] for a zerocopy completion.
        ee_origin: u8 = 4,
        /// Origin-specific type.
        ee_type: u8 = 5,
        /// For zerocopy: [`SO_EE_CODE_ZEROCOPY_COPIED`] when the kernel copied.
        ee_code: u8 = 6,
        /// Padding.
        ee_pad: u8 = 7,
        /// For zerocopy: first send number of the completed range.
        ee_info: u32 = 8,
        /// For zerocopy: last send number of the completed range (inclusive).
        ee_data: u32 = 12,
    }
}

/// `sock_extended_err.ee_origin` of a zerocopy completion.
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `sock_extended_err.ee_code` bit: the kernel copied instead of sending zero-copy.
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

// ---- include/uapi/linux/netlink.h (extended ack) ----

/// `NLMSGERR_ATTR_MSG`: extack text (nul-terminated string).
pub const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NLMSGERR_ATTR_OFFS`: u32 byte offset of the offending attribute from the start of our
/// `nlmsghdr`.
pub const NLMSGERR_ATTR_OFFS: u16 = 2;
/// `NLMSGERR_ATTR_COOKIE`.
pub const NLMSGERR_ATTR_COOKIE: u16 = 3;
/// `NLMSGERR_ATTR_POLICY`: nest describing the violated policy.
pub const NLMSGERR_ATTR_POLICY: u16 = 4;
/// `NLMSGERR_ATTR_MISS_TYPE`: u32 type of a missing required attribute.
pub const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;
/// `NLMSGERR_ATTR_MISS_NEST`: u32 offset of the nest that lacks `MISS_TYPE`.
pub const NLMSGERR_ATTR_MISS_NEST: u16 = 6;

// ---- include/uapi/linux/udmabuf.h ----

uapi_struct! {
    /// `struct udmabuf_create` (24 bytes): a page-aligned range of a sealed memfd to export.
    #[derive(Default)]
    udmabuf_create = 24 {
        /// memfd (shmem or hugetlbfs) with `F_SEAL_SHRINK` set.
        memfd: u32 = 0,
        /// `UDMABUF_FLAGS_CLOEXEC` or 0.
        flags: u32 = 4,
        /// Byte offset into the memfd, page aligned.
        offset: u64 = 8,
        /// Size in bytes, page aligned, non-zero.
        size: u64 = 16,
    }
}

/// `UDMABUF_FLAGS_CLOEXEC`: the new dma-buf fd gets `O_CLOEXEC`.
pub const UDMABUF_FLAGS_CLOEXEC: u32 = 0x1;
/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)`; returns the dma-buf fd.
pub const UDMABUF_CREATE: u32 =
    nix::request_code_write!(b'u', 0x42, size_of::<udmabuf_create>()) as u32;

// ---- include/uapi/linux/dma-buf.h ----

uapi_struct! {
    /// `struct dma_buf_sync` (8 bytes).
    #[derive(Default)]
    dma_buf_sync = 8 {
        /// `DMA_BUF_SYNC_*`: START or END, plus a direction (READ, WRITE or RW; never none).
        flags: u64 = 0,
    }
}

/// CPU reads the buffer.
pub const DMA_BUF_SYNC_READ: u64 = 1;
/// CPU writes the buffer.
pub const DMA_BUF_SYNC_WRITE: u64 = 2;
/// CPU reads and writes.
pub const DMA_BUF_SYNC_RW: u64 = 3;
/// Begin of CPU access.
pub const DMA_BUF_SYNC_START: u64 = 0;
/// End of CPU access.
pub const DMA_BUF_SYNC_END: u64 = 4;
/// `DMA_BUF_IOCTL_SYNC` = `_IOW('b', 0, struct dma_buf_sync)`.
pub const DMA_BUF_IOCTL_SYNC: u32 =
    nix::request_code_write!(b'b', 0, size_of::<dma_buf_sync>()) as u32;

// ---- include/uapi/linux/memfd.h, fcntl.h ----

pub use libc::{F_ADD_SEALS, F_SEAL_SHRINK, MFD_ALLOW_SEALING, MFD_CLOEXEC, MFD_HUGETLB};

/// `MFD_HUGE_SHIFT`.
pub const MFD_HUGE_SHIFT: u32 = 26;
/// `MFD_HUGE_2MB` (21 << 26); only valid together with `MFD_HUGETLB`.
pub const MFD_HUGE_2MB: libc::c_uint = 21 << MFD_HUGE_SHIFT;

/// Size of a 2 MiB huge page in bytes.
pub const HUGEPAGE_2M: usize = 2 << 20;

// ---- include/uapi/linux/io_uring.h (since 7.0 also include/uapi/linux/io_uring/zcrx.h):
// io_uring zero-copy receive ----
//
// The structs are this crate's own (the `io-uring` crate's still call `rx_buf_len`, 7.0+,
// `__resv2`); docs/kernel-interface.md#zcrx-registration.

pub use io_uring::types::{
    IORING_MEM_REGION_TYPE_USER, IORING_ZCRX_AREA_MASK, IORING_ZCRX_AREA_SHIFT,
};

uapi_struct! {
    /// `struct io_uring_zcrx_rqe` (16 bytes): one refill-ring entry, a buffer given back.
    #[derive(Default)]
    io_uring_zcrx_rqe = 16 {
        /// The area's `rq_area_token` (area id in bits 48..64) OR'd with the buffer's byte
        /// offset in the area.
        off: u64 = 0,
        /// Bytes given back.
        len: u32 = 8,
        /// Reserved, zero.
        __pad: u32 = 12,
    }
}

uapi_struct! {
    /// `struct io_uring_zcrx_cqe` (16 bytes): the second half of a 32-byte `RECV_ZC` CQE.
    #[derive(Default)]
    io_uring_zcrx_cqe = 16 {
        /// Area id in bits 48..64 ([`IORING_ZCRX_AREA_MASK`]), the buffer's byte offset in the
        /// area below.
        off: u64 = 0,
        /// Reserved.
        __pad: u64 = 8,
    }
}

uapi_struct! {
    /// `struct io_uring_zcrx_offsets` (32 bytes): where the refill ring lives in its region,
    /// written back by the kernel on registration.
    #[derive(Default)]
    io_uring_zcrx_offsets = 32 {
        /// Byte offset of the `u32` head.
        head: u32 = 0,
        /// Byte offset of the `u32` tail.
        tail: u32 = 4,
        /// Byte offset of the first [`io_uring_zcrx_rqe`].
        rqes: u32 = 8,
        /// Reserved.
        __resv2: u32 = 12,
        /// Reserved.
        __resv: [u64; 2] = 16,
    }
}

uapi_struct! {
    /// `struct io_uring_zcrx_area_reg` (48 bytes): the receive area (user memory here).
    #[derive(Default)]
    io_uring_zcrx_area_reg = 48 {
        /// Start address of the area, page aligned.
        addr: u64 = 0,
        /// Bytes, a multiple of the page size.
        len: u64 = 8,
        /// Written back: the area id in bits 48..64, to OR into refill entries' offsets.
        rq_area_token: u64 = 16,
        /// `IORING_ZCRX_AREA_*` (1 = the area is a dma-buf); 0 here.
        flags: u32 = 24,
        /// The dma-buf fd with `IORING_ZCRX_AREA_DMABUF`; 0 here.
        dmabuf_fd: u32 = 28,
        /// Reserved, zero.
        __resv2: [u64; 2] = 32,
    }
}

uapi_struct! {
    /// `struct io_uring_region_desc` (64 bytes): the refill region
    /// ([`IORING_MEM_REGION_TYPE_USER`]: user memory the kernel maps).
    #[derive(Default)]
    io_uring_region_desc = 64 {
        /// Start address of the region (user memory).
        user_addr: u64 = 0,
        /// Bytes.
        size: u64 = 8,
        /// `IORING_MEM_REGION_TYPE_*`.
        flags: u32 = 16,
        /// Region id; 0.
        id: u32 = 20,
        /// Written back for kernel-allocated regions; unused with user memory.
        mmap_offset: u64 = 24,
        /// Reserved, zero.
        __resv: [u64; 4] = 32,
    }
}

uapi_struct! {
    /// `struct io_uring_zcrx_ifq_reg` (96 bytes): the argument of `IORING_REGISTER_ZCRX_IFQ`.
    #[derive(Default)]
    io_uring_zcrx_ifq_reg = 96 {
        /// Interface index; 0 with [`ZCRX_REG_NODEV`].
        if_idx: u32 = 0,
        /// RX queue index; 0 with [`ZCRX_REG_NODEV`].
        if_rxq: u32 = 4,
        /// Refill-ring entries asked for; written back rounded up to a power of two.
        rq_entries: u32 = 8,
        /// `ZCRX_REG_*`.
        flags: u32 = 12,
        /// Address of an [`io_uring_zcrx_area_reg`].
        area_ptr: u64 = 16,
        /// Address of an [`io_uring_region_desc`] for the refill ring.
        region_ptr: u64 = 24,
        /// Written back: the refill ring's layout in its region.
        offsets: io_uring_zcrx_offsets = 32,
        /// Written back: the instance id (`sqe.zcrx_ifq_idx`, `zcrx_ctrl.zcrx_id`).
        zcrx_id: u32 = 64,
        /// Buffer size in bytes (7.0+; 0 = the page size), written back with the size used.
        /// Older kernels reserve the word and refuse a non-zero value.
        rx_buf_len: u32 = 68,
        /// Reserved, zero.
        __resv: [u64; 3] = 72,
    }
}

/// `io_uring_zcrx_ifq_reg.flags`: register without a net device; the kernel fills the area by
/// copying (`ZCRX_REG_NODEV`, io_uring/zcrx.h, added after 6.18; 7.3 has it). `if_idx` and
/// `if_rxq` must then be 0.
pub const ZCRX_REG_NODEV: u32 = 2;

/// `IORING_OP_RECV_ZC` (58): the zero-copy receive opcode (6.15+).
pub const IORING_OP_RECV_ZC: u8 = 58;

/// The kernel's largest refill ring (`IO_RQ_MAX_ENTRIES` in io_uring/zcrx.c), in entries; a
/// larger `rq_entries` is `EINVAL` unless the ring was set up with `IORING_SETUP_CLAMP`.
pub const ZCRX_RQ_MAX_ENTRIES: u32 = 32768;

/// `IORING_REGISTER_ZCRX_CTRL` (36): io_uring_register(2) opcode for zcrx control operations
/// (`nr_args` must be 0). Newer than 6.18 (`EINVAL` there).
pub const IORING_REGISTER_ZCRX_CTRL: u32 = 36;

/// `zcrx_ctrl.op`: move every entry of the refill ring back to the area's free list now
/// (`ZCRX_CTRL_FLUSH_RQ`). Without a page pool (`ZCRX_REG_NODEV`) this is how returned buffers
/// become reusable.
pub const ZCRX_CTRL_FLUSH_RQ: u32 = 0;

uapi_struct! {
    /// `struct zcrx_ctrl` (72 bytes): the argument of `IORING_REGISTER_ZCRX_CTRL`. The trailing
    /// union (export / flush-rq / ...) is 48 bytes; for `ZCRX_CTRL_FLUSH_RQ` it is reserved and
    /// must be zero.
    #[derive(Default)]
    zcrx_ctrl = 72 {
        /// `io_uring_zcrx_ifq_reg.zcrx_id` of the instance.
        zcrx_id: u32 = 0,
        /// `ZCRX_CTRL_*`.
        op: u32 = 4,
        /// Reserved, zero.
        __resv: [u64; 2] = 8,
        /// The per-op union; zero for `ZCRX_CTRL_FLUSH_RQ`.
        payload: [u64; 6] = 24,
    }
}

const _: () = assert!(io_uring::opcode::RecvZc::CODE == IORING_OP_RECV_ZC);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_uapi_headers() {
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
        assert_eq!(MFD_HUGE_2MB, 0x5400_0000);
    }

    #[test]
    fn devmem_socket_numbers() {
        assert_eq!(SCM_DEVMEM_LINEAR, 78);
        assert_eq!(SCM_DEVMEM_DMABUF, 79);
        assert_eq!(SO_DEVMEM_DONTNEED, 80);
        assert_eq!(MSG_SOCK_DEVMEM, 0x200_0000);
    }

    /// The fixtures' fields, concatenated in order: each field's width then places the next one
    /// at the offset the header gives.
    fn fields(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn dmabuf_cmsg_and_token_bytes() {
        // struct dmabuf_cmsg as the kernel writes it after a SCM_DEVMEM_DMABUF header.
        let wire = fields(&[
            &8192u64.to_le_bytes(), // frag_offset @0
            &4096u32.to_le_bytes(), // frag_size @8
            &17u32.to_le_bytes(),   // frag_token @12
            &3u32.to_le_bytes(),    // dmabuf_id @16
            &0u32.to_le_bytes(),    // flags @20
        ]);
        let c = dmabuf_cmsg {
            frag_offset: 8192,
            frag_size: 4096,
            frag_token: 17,
            dmabuf_id: 3,
            flags: 0,
        };
        assert_eq!(wire.len(), DMABUF_CMSG_LEN);
        assert_eq!(dmabuf_cmsg::from_bytes(&wire).unwrap(), c);
        assert_eq!(c.to_bytes().as_slice(), wire);
        let e = dmabuf_cmsg::from_bytes(&wire[..23]).unwrap_err();
        assert!(e.to_string().contains("struct dmabuf_cmsg"), "{e}");
        // One SO_DEVMEM_DONTNEED range.
        let t = dmabuf_token {
            token_start: 5,
            token_count: 3,
        };
        let wire = fields(&[
            &5u32.to_le_bytes(), // token_start @0
            &3u32.to_le_bytes(), // token_count @4
        ]);
        assert_eq!(t.to_bytes().as_slice(), wire);
    }

    #[test]
    fn udmabuf_and_dma_buf_sync_bytes() {
        let create = udmabuf_create {
            memfd: 7,
            flags: UDMABUF_FLAGS_CLOEXEC,
            offset: 0x1000,
            size: 0x20_0000,
        };
        let wire = fields(&[
            &7u32.to_le_bytes(),         // memfd @0
            &1u32.to_le_bytes(),         // flags @4: UDMABUF_FLAGS_CLOEXEC
            &0x1000u64.to_le_bytes(),    // offset @8
            &0x20_0000u64.to_le_bytes(), // size @16: 2 MiB
        ]);
        assert_eq!(create.to_bytes().as_slice(), wire);
        let sync = dma_buf_sync {
            flags: DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ,
        };
        // flags @0: END (4) | READ (1)
        assert_eq!(sync.to_bytes(), 5u64.to_le_bytes());
    }

    #[test]
    fn zcrx_registration_bytes() {
        let reg = io_uring_zcrx_ifq_reg {
            if_idx: 2,
            if_rxq: 1,
            rq_entries: 4096,
            flags: ZCRX_REG_NODEV,
            area_ptr: 0x7f00_0000_1000,
            region_ptr: 0x7f00_0000_2000,
            offsets: io_uring_zcrx_offsets {
                head: 0,
                tail: 64,
                rqes: 128,
                ..Default::default()
            },
            zcrx_id: 1,
            rx_buf_len: 4096,
            __resv: [0; 3],
        };
        let wire = fields(&[
            &2u32.to_le_bytes(),                // if_idx @0
            &1u32.to_le_bytes(),                // if_rxq @4
            &4096u32.to_le_bytes(),             // rq_entries @8
            &2u32.to_le_bytes(),                // flags @12: ZCRX_REG_NODEV
            &0x7f00_0000_1000u64.to_le_bytes(), // area_ptr @16
            &0x7f00_0000_2000u64.to_le_bytes(), // region_ptr @24
            &0u32.to_le_bytes(),                // offsets.head @32
            &64u32.to_le_bytes(),               // offsets.tail @36
            &128u32.to_le_bytes(),              // offsets.rqes @40
            &[0; 4],                            // offsets.__resv2 @44
            &[0; 16],                           // offsets.__resv[2] @48
            &1u32.to_le_bytes(),                // zcrx_id @64
            &4096u32.to_le_bytes(),             // rx_buf_len @68 (7.0+)
            &[0; 24],                           // __resv[3] @72
        ]);
        assert_eq!(reg.to_bytes().as_slice(), wire);
        assert_eq!(io_uring_zcrx_ifq_reg::from_bytes(&wire).unwrap(), reg);

        // The area as registered, then with the token the kernel writes back (area id 1).
        let mut area = io_uring_zcrx_area_reg {
            addr: 0x7f00_0010_0000,
            len: 0x200_0000,
            ..Default::default()
        };
        area.rq_area_token = 1 << IORING_ZCRX_AREA_SHIFT;
        let wire = fields(&[
            &0x7f00_0010_0000u64.to_le_bytes(), // addr @0
            &0x200_0000u64.to_le_bytes(),       // len @8: 32 MiB
            &(1u64 << 48).to_le_bytes(),        // rq_area_token @16: area id 1
            &0u32.to_le_bytes(),                // flags @24
            &0u32.to_le_bytes(),                // dmabuf_fd @28
            &[0; 16],                           // __resv2[2] @32
        ]);
        assert_eq!(area.to_bytes().as_slice(), wire);

        let region = io_uring_region_desc {
            user_addr: 0x7f00_0020_0000,
            size: 0x11000,
            flags: IORING_MEM_REGION_TYPE_USER,
            ..Default::default()
        };
        let wire = fields(&[
            &0x7f00_0020_0000u64.to_le_bytes(), // user_addr @0
            &0x11000u64.to_le_bytes(),          // size @8
            &1u32.to_le_bytes(),                // flags @16: IORING_MEM_REGION_TYPE_USER
            &0u32.to_le_bytes(),                // id @20
            &0u64.to_le_bytes(),                // mmap_offset @24
            &[0; 32],                           // __resv[4] @32
        ]);
        assert_eq!(region.to_bytes().as_slice(), wire);

        let ctrl = zcrx_ctrl {
            zcrx_id: 1,
            op: ZCRX_CTRL_FLUSH_RQ,
            ..Default::default()
        };
        let wire = fields(&[
            &1u32.to_le_bytes(), // zcrx_id @0
            &0u32.to_le_bytes(), // op @4: ZCRX_CTRL_FLUSH_RQ
            &[0; 16],            // __resv[2] @8
            &[0; 48],            // the per-op union @24, reserved for FLUSH_RQ
        ]);
        assert_eq!(ctrl.to_bytes().as_slice(), wire);
    }

    #[test]
    fn zcrx_ring_entry_bytes() {
        // A refill entry giving back 4096 bytes at byte 8192 of area 1.
        let rqe = io_uring_zcrx_rqe {
            off: (1 << 48) | 8192,
            len: 4096,
            __pad: 0,
        };
        let wire = fields(&[
            &((1u64 << 48) | 8192).to_le_bytes(), // off @0: area token | offset
            &4096u32.to_le_bytes(),               // len @8
            &0u32.to_le_bytes(),                  // __pad @12
        ]);
        assert_eq!(rqe.to_bytes().as_slice(), wire);
        // The second half of a RECV_ZC CQE32, as the kernel writes it.
        let wire = fields(&[
            &((1u64 << 48) | 12288).to_le_bytes(), // off @0
            &0u64.to_le_bytes(),                   // __pad @8
        ]);
        let cqe = io_uring_zcrx_cqe::from_bytes(&wire).unwrap();
        assert_eq!(cqe.off & IORING_ZCRX_AREA_MASK, 1 << 48);
        assert_eq!(cqe.off & !IORING_ZCRX_AREA_MASK, 12288);
    }

    #[test]
    fn zcrx_numbers_match_the_uapi_headers() {
        assert_eq!(IORING_ZCRX_AREA_SHIFT, 48);
        assert_eq!(IORING_ZCRX_AREA_MASK, 0xffff_0000_0000_0000);
        assert_eq!(IORING_MEM_REGION_TYPE_USER, 1);
        assert_eq!(ZCRX_REG_NODEV, 2);
        assert_eq!(io_uring::opcode::RecvZc::CODE, 58);
    }
}
