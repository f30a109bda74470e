//! Kernel user-space ABI that this crate needs and the system's libc/headers lack (they are 6.1
//! here). Values are checked against the 6.18 kernel's BTF and listed, with their sources, in
//! `docs/kernel-interface.md`; each item names its uapi header. Where `libc` already exports an
//! item it is re-exported, not redefined.

#![allow(non_camel_case_types)]

use std::mem::size_of;

// ---- include/uapi/asm-generic/socket.h, include/linux/socket.h, include/uapi/linux/uio.h
// (devmem TCP, v6.12+) ----

pub use libc::{
    dmabuf_cmsg, dmabuf_token, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR, SO_DEVMEM_DONTNEED,
};

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

const _: () = assert!(size_of::<dmabuf_cmsg>() == 24);
const _: () = assert!(size_of::<dmabuf_token>() == 8);

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

pub use libc::sock_extended_err;

/// `sock_extended_err.ee_origin` of a zerocopy completion.
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `sock_extended_err.ee_code` bit: the kernel copied instead of sending zero-copy.
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

const _: () = assert!(size_of::<sock_extended_err>() == 16);

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

/// `struct udmabuf_create` (24 bytes): a page-aligned range of a sealed memfd to export.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct udmabuf_create {
    /// memfd (shmem or hugetlbfs) with `F_SEAL_SHRINK` set.
    pub memfd: u32,
    /// `UDMABUF_FLAGS_CLOEXEC` or 0.
    pub flags: u32,
    /// Byte offset into the memfd, page aligned.
    pub offset: u64,
    /// Size in bytes, page aligned, non-zero.
    pub size: u64,
}
const _: () = assert!(size_of::<udmabuf_create>() == 24);

/// `UDMABUF_FLAGS_CLOEXEC`: the new dma-buf fd gets `O_CLOEXEC`.
pub const UDMABUF_FLAGS_CLOEXEC: u32 = 0x1;
/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)`; returns the dma-buf fd.
pub const UDMABUF_CREATE: libc::c_ulong =
    nix::request_code_write!(b'u', 0x42, size_of::<udmabuf_create>());

// ---- include/uapi/linux/dma-buf.h ----

/// `struct dma_buf_sync` (8 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct dma_buf_sync {
    /// `DMA_BUF_SYNC_*`: START or END, plus a direction (READ, WRITE or RW; never none).
    pub flags: u64,
}
const _: () = assert!(size_of::<dma_buf_sync>() == 8);

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
pub const DMA_BUF_IOCTL_SYNC: libc::c_ulong =
    nix::request_code_write!(b'b', 0, size_of::<dma_buf_sync>());

// ---- include/uapi/linux/memfd.h, fcntl.h ----

pub use libc::{F_ADD_SEALS, F_SEAL_SHRINK, MFD_ALLOW_SEALING, MFD_CLOEXEC, MFD_HUGETLB};

/// `MFD_HUGE_SHIFT`.
pub const MFD_HUGE_SHIFT: u32 = 26;
/// `MFD_HUGE_2MB` (21 << 26); only valid together with `MFD_HUGETLB`.
pub const MFD_HUGE_2MB: libc::c_uint = 21 << MFD_HUGE_SHIFT;

/// Size of a 2 MiB huge page in bytes.
pub const HUGEPAGE_2M: usize = 2 << 20;

// ---- include/uapi/linux/io_uring.h, io_uring/zcrx.h (io_uring zero-copy receive) ----
//
// The structs come from the `io-uring` crate (`io_uring::types::io_uring_zcrx_*`); these
// asserts pin the layouts this crate relies on (docs/kernel-interface.md#zcrx-registration).

pub use io_uring::types::{
    io_uring_region_desc, io_uring_zcrx_area_reg, io_uring_zcrx_cqe, io_uring_zcrx_ifq_reg,
    io_uring_zcrx_rqe, IORING_MEM_REGION_TYPE_USER, IORING_ZCRX_AREA_MASK, IORING_ZCRX_AREA_SHIFT,
};

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

/// `struct zcrx_ctrl` (72 bytes, io_uring/zcrx.h): the argument of
/// `IORING_REGISTER_ZCRX_CTRL`. The trailing union (export / flush-rq / ...) is 48 bytes; for
/// `ZCRX_CTRL_FLUSH_RQ` it is reserved and must be zero.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct zcrx_ctrl {
    /// `io_uring_zcrx_ifq_reg.zcrx_id` of the instance.
    pub zcrx_id: u32,
    /// `ZCRX_CTRL_*`.
    pub op: u32,
    /// Reserved, zero.
    pub __resv: [u64; 2],
    /// The per-op union; zero for `ZCRX_CTRL_FLUSH_RQ`.
    pub payload: [u64; 6],
}
const _: () = assert!(size_of::<zcrx_ctrl>() == 72);

const _: () = assert!(size_of::<io_uring_zcrx_rqe>() == 16);
const _: () = assert!(size_of::<io_uring_zcrx_cqe>() == 16);
const _: () = assert!(size_of::<io_uring_zcrx_area_reg>() == 48);
const _: () = assert!(size_of::<io_uring_region_desc>() == 64);
const _: () = assert!(size_of::<io_uring_zcrx_ifq_reg>() == 96);
// `rx_buf_len` (7.0+) is the u32 the crate still calls `__resv2`, at byte 68.
const _: () = assert!(std::mem::offset_of!(io_uring_zcrx_ifq_reg, __resv2) == 68);
const _: () = assert!(std::mem::offset_of!(io_uring_zcrx_ifq_reg, zcrx_id) == 64);
// `struct io_uring_zcrx_offsets` (not re-exported by the crate) spans bytes 32..64.
const _: () = assert!(std::mem::offset_of!(io_uring_zcrx_ifq_reg, offsets) == 32);
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

    #[test]
    fn zcrx_numbers_match_the_uapi_headers() {
        assert_eq!(IORING_ZCRX_AREA_SHIFT, 48);
        assert_eq!(IORING_ZCRX_AREA_MASK, 0xffff_0000_0000_0000);
        assert_eq!(IORING_MEM_REGION_TYPE_USER, 1);
        assert_eq!(ZCRX_REG_NODEV, 2);
        assert_eq!(io_uring::opcode::RecvZc::CODE, 58);
    }
}
