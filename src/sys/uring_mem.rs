//! Raw memory shared with io_uring zero-copy receive (zcrx), and the one unsafe submission.
//!
//! Two [`MappedRegion`]s are handed to the kernel by address: the receive *area*
//! (`io_uring_zcrx_area_reg.addr`, which the NIC — or, with `ZCRX_REG_NODEV`, the kernel's
//! copy path — fills) and the *refill region* (`io_uring_region_desc` with
//! `IORING_MEM_REGION_TYPE_USER`, which the kernel maps to read the refill ring): anonymous
//! `mmap`s (the area optionally `MAP_HUGETLB`) in production, heap regions of the same shape in
//! tests, so the same pointer code runs in both.
//!
//! * [`RefillRing`]: the refill ring inside the refill region, at the byte offsets the kernel
//!   returned in `io_uring_zcrx_offsets` (head and tail `u32`s, then `rq_entries` 16-byte
//!   `io_uring_zcrx_rqe`s), with every offset checked against the region before use.
//! * [`register_zcrx_ifq`]: `IORING_REGISTER_ZCRX_IFQ` with the area and refill regions, and
//!   [`probe_zcrx_register`] (a registration the kernel must refuse, to learn about
//!   `CAP_NET_ADMIN` early).
//! * [`zcrx_flush_rq`]: `ZCRX_CTRL_FLUSH_RQ`, recycling returned buffers without a page pool.
//! * [`push_recv_zc`]: queues a multishot `IORING_OP_RECV_ZC` SQE (optionally length-limited) (the
//!   crate's `push` is `unsafe`).
//!
//! Rules for memory the kernel writes concurrently (as in vm-memory's volatile-memory rules):
//! no Rust reference to the kernel-written head word is ever created except as an atomic; refill
//! entries are written through raw pointers; area bytes are read only through
//! [`MappedRegion::bytes`], and only between the completion that hands a buffer to user space and
//! the refill entry that gives it back (see `docs/kernel-interface.md#zcrx-refill-queue` and
//! `docs.kernel.org/networking/iou-zcrx.html`).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::error::{Error, Result};
use crate::sys::mmap::MappedRegion;
use crate::sys::uapi::{
    io_uring_region_desc, io_uring_zcrx_area_reg, io_uring_zcrx_ifq_reg, io_uring_zcrx_rqe,
    zcrx_ctrl, IORING_MEM_REGION_TYPE_USER, IORING_REGISTER_ZCRX_CTRL, ZCRX_CTRL_FLUSH_RQ,
};

/// Where the refill ring lives inside its region: the byte offsets the kernel wrote back in
/// `io_uring_zcrx_offsets` (`head`, `tail`, `rqes`) and the entry count it wrote back in
/// `io_uring_zcrx_ifq_reg.rq_entries` (a power of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefillLayout {
    /// Byte offset of the `u32` head (written by the kernel as it consumes entries).
    pub head: u32,
    /// Byte offset of the `u32` tail (written by user space to publish entries).
    pub tail: u32,
    /// Byte offset of the first `io_uring_zcrx_rqe` (16 bytes each).
    pub rqes: u32,
    /// Number of entries, a power of two.
    pub entries: u32,
}

impl RefillLayout {
    /// Checks the layout against a refill region of `region_len` bytes (what
    /// [`RefillRing::new`] requires), without taking the region.
    ///
    /// Errors: `Error::Decode` (what = "io_uring_zcrx_offsets") when `entries` is not a
    /// non-zero power of two, a word is misaligned (head/tail to 4 bytes, rqes to 8) or
    /// outside the region, the entry array does not fit, or the head or tail word overlaps the
    /// entry array or each other.
    pub fn check(&self, region_len: usize) -> Result<()> {
        let bad = |detail: String| Error::Decode {
            what: "io_uring_zcrx_offsets".into(),
            detail: format!("{detail} (layout {self:?}, region {} bytes)", region_len),
        };
        let len = region_len as u64;
        if self.entries == 0 || !self.entries.is_power_of_two() {
            return Err(bad(format!(
                "rq_entries {} is not a power of two",
                self.entries
            )));
        }
        let (head, tail, rqes) = (
            u64::from(self.head),
            u64::from(self.tail),
            u64::from(self.rqes),
        );
        if head % 4 != 0 || tail % 4 != 0 || rqes % 8 != 0 {
            return Err(bad("misaligned head, tail or rqes offset".into()));
        }
        if head + 4 > len || tail + 4 > len {
            return Err(bad("head or tail outside the region".into()));
        }
        let rqes_end = rqes + u64::from(self.entries) * RQE_SIZE;
        if rqes_end > len {
            return Err(bad(format!("entry array ends at byte {rqes_end}")));
        }
        let overlaps = |w: u64| w + 4 > rqes && w < rqes_end;
        if overlaps(head) || overlaps(tail) || head == tail {
            return Err(bad("head/tail overlap the entry array or each other".into()));
        }
        Ok(())
    }
}

/// The refill ring over its region: raw head/tail/entry access, with the layout checked once.
/// Policy (free space, batching, the local tail) is `uring::ZcrxRefill`'s.
///
/// Ordering: the kernel loads the tail with acquire semantics and stores the head with release
/// semantics (io_uring/zcrx.c refill path); [`store_tail`](Self::store_tail) is the matching
/// release and [`load_head`](Self::load_head) the matching acquire.
#[derive(Debug)]
pub struct RefillRing {
    region: MappedRegion,
    layout: RefillLayout,
}

const RQE_SIZE: u64 = std::mem::size_of::<io_uring_zcrx_rqe>() as u64;

impl RefillRing {
    /// Checks `layout` against `region` and takes ownership of the region.
    ///
    /// Errors: as [`RefillLayout::check`].
    pub fn new(region: MappedRegion, layout: RefillLayout) -> Result<RefillRing> {
        layout.check(region.len())?;
        Ok(RefillRing { region, layout })
    }

    /// The checked layout.
    pub fn layout(&self) -> RefillLayout {
        self.layout
    }

    fn word(&self, offset: u32) -> &AtomicU32 {
        let p = self.region.at(offset as usize).cast::<u32>();
        // SAFETY: `new` checked that offset + 4 is inside the live region and 4-byte aligned
        // (the region base is page aligned); the word is only ever accessed atomically (by us
        // and by the kernel), and the reference borrows `self`, so it cannot outlive the
        // region.
        unsafe { AtomicU32::from_ptr(p) }
    }

    /// The kernel's head (entries it has consumed, wrapping), loaded with `Acquire`: pairs with
    /// the kernel's release store, so slots below the head are no longer read by the kernel
    /// when we overwrite them.
    pub fn load_head(&self) -> u32 {
        self.word(self.layout.head).load(Ordering::Acquire)
    }

    /// The published tail as it is in memory (`Relaxed`: only user space writes it).
    pub(crate) fn load_tail(&self) -> u32 {
        self.word(self.layout.tail).load(Ordering::Relaxed)
    }

    /// Publishes `tail` with a `Release` store. The reader is the kernel (its refill path
    /// loads the tail with acquire before reading entries), so every entry written with
    /// [`write_rqe`](Self::write_rqe) below `tail` is visible to it first.
    pub fn store_tail(&mut self, tail: u32) {
        self.word(self.layout.tail).store(tail, Ordering::Release);
    }

    /// Writes entry `index & (entries - 1)`. The caller owns that slot: it lies between the
    /// kernel's head and the not-yet-published tail, so the kernel does not read it now.
    pub fn write_rqe(&mut self, index: u32, rqe: io_uring_zcrx_rqe) {
        let p = self.rqe(index);
        // SAFETY: `new` checked that the whole entry array is inside the region and 8-byte
        // aligned, and slot < entries; the slot is not read by the kernel until the tail is
        // published past it (see above). A volatile write keeps the store even though no Rust
        // code reads it back.
        unsafe { std::ptr::write_volatile(p, rqe) };
    }

    /// The kernel's side, for tests and benchmarks (test builds and the
    /// `testing` feature only): the published tail (`Acquire`).
    #[cfg(any(test, feature = "testing"))]
    pub fn kernel_load_tail(&self) -> u32 {
        self.word(self.layout.tail).load(Ordering::Acquire)
    }

    /// The kernel's side, for tests and benchmarks (test builds and the
    /// `testing` feature only): reads entry `index & (entries - 1)`.
    #[cfg(any(test, feature = "testing"))]
    #[cfg(test)]
    pub(crate) fn kernel_read_rqe(&self, index: u32) -> io_uring_zcrx_rqe {
        // SAFETY: inside the checked, aligned entry array (see write_rqe); a volatile read of
        // plain old data.
        unsafe { std::ptr::read_volatile(self.rqe(index)) }
    }

    /// Where entry `index & (entries - 1)` lives.
    fn rqe(&self, index: u32) -> *mut io_uring_zcrx_rqe {
        let slot = (index & (self.layout.entries - 1)) as usize;
        let off = self.layout.rqes as usize + slot * RQE_SIZE as usize;
        self.region.at(off).cast()
    }

    /// The kernel's side, for tests and benchmarks (test builds and the
    /// `testing` feature only): stores the head (`Release`).
    #[cfg(any(test, feature = "testing"))]
    pub fn kernel_store_head(&self, head: u32) {
        self.word(self.layout.head).store(head, Ordering::Release);
    }
}

/// `IORING_REGISTER_ZCRX_IFQ` (32), io_uring_register(2) opcode; not named by the crate's public
/// API.
const IORING_REGISTER_ZCRX_IFQ: libc::c_uint = 32;

/// `io_uring_register(ring fd, opcode, arg, nr_args)`: `Err` carries the errno.
///
/// # Safety
/// `arg` must point at what `opcode` expects (`nr_args` of them), live and exclusively
/// borrowed across the call, and every pointer inside it must be valid for what the kernel
/// does with it.
unsafe fn io_uring_register(
    ring: &IoUring<squeue::Entry, cqueue::Entry32>,
    opcode: libc::c_uint,
    arg: *mut libc::c_void,
    nr_args: libc::c_uint,
) -> std::result::Result<(), i32> {
    // SAFETY: the ring's fd is open while `ring` is borrowed; `arg` as the caller promised.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            opcode,
            arg,
            nr_args,
        )
    };
    if ret < 0 {
        Err(crate::sys::last_errno())
    } else {
        Ok(())
    }
}

/// What the kernel wrote back on a successful zcrx registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxRegistered {
    /// `io_uring_zcrx_area_reg.rq_area_token`: the area id in bits 48..64, to OR into refill
    /// entries' offsets.
    pub area_token: u64,
}

/// Registers a zcrx interface queue on `ring`: fills `reg.area_ptr` with an
/// `io_uring_zcrx_area_reg` describing `area` (user memory) and `reg.region_ptr` with an
/// `io_uring_region_desc` describing `refill` (`IORING_MEM_REGION_TYPE_USER`), then calls
/// `io_uring_register(ring fd, IORING_REGISTER_ZCRX_IFQ, reg, 1)`. On success the kernel has
/// written `reg.rq_entries`, `reg.offsets`, `reg.zcrx_id` (and on 7.0+ `rx_buf_len`) back.
/// Available since 6.15.
///
/// The syscall is made here rather than through `Submitter::register_ifq`, which takes the
/// struct by shared reference although the kernel writes into it: reading the written-back
/// fields through that reference would rely on the compiler not assuming it unchanged.
///
/// The kernel pins both regions' pages until the ring is closed, so they must be mmap-backed:
/// heap-backed regions (whose memory the allocator could reuse) are refused with `EINVAL`
/// before the call. `reg.area_ptr` and `reg.region_ptr` are overwritten.
///
/// Errors: `Error::Sys` with `call` and the kernel's errno (EPERM, EINVAL, ENODEV, EOPNOTSUPP,
/// ... see `docs/kernel-interface.md#zcrx-registration`).
pub fn register_zcrx_ifq(
    ring: &IoUring<squeue::Entry, cqueue::Entry32>,
    reg: &mut io_uring_zcrx_ifq_reg,
    area: &MappedRegion,
    refill: &MappedRegion,
    call: &str,
) -> Result<ZcrxRegistered> {
    if !area.is_mmap() || !refill.is_mmap() {
        return Err(Error::sys(
            format!("{call}: zcrx registration needs mmap-backed regions (the kernel pins them)"),
            libc::EINVAL,
        ));
    }
    let mut area_reg = io_uring_zcrx_area_reg {
        addr: area.addr(),
        len: area.len() as u64,
        ..Default::default()
    };
    let mut region = io_uring_region_desc {
        user_addr: refill.addr(),
        size: refill.len() as u64,
        flags: IORING_MEM_REGION_TYPE_USER,
        ..Default::default()
    };
    reg.area_ptr = std::ptr::addr_of_mut!(area_reg) as u64;
    reg.region_ptr = std::ptr::addr_of_mut!(region) as u64;
    // SAFETY: `reg`, `area_reg` and `region` are live, exclusively borrowed locals of the sizes
    // the kernel expects (asserted in uapi.rs); the kernel reads them and writes results back
    // into them during the call only. The memory they describe is two live mmap regions
    // (checked above) that the kernel pins, so its later writes never reach memory Rust reuses.
    let ret = unsafe {
        io_uring_register(
            ring,
            IORING_REGISTER_ZCRX_IFQ,
            (reg as *mut io_uring_zcrx_ifq_reg).cast(),
            1,
        )
    };
    reg.area_ptr = 0;
    reg.region_ptr = 0;
    ret.map_err(|errno| Error::sys(call, errno))?;
    Ok(ZcrxRegistered {
        area_token: area_reg.rq_area_token,
    })
}

/// Asks the kernel to register a zcrx ifq with a non-zero reserved word (`__resv[0] = 1`), which
/// every kernel refuses before it allocates anything: with `EPERM` when the caller lacks
/// `CAP_NET_ADMIN` (checked first), otherwise with `EINVAL` (or `EFAULT`). Returns the errno.
/// No pointers are passed (area and region pointers are 0), so nothing can be registered.
pub fn probe_zcrx_register(ring: &IoUring<squeue::Entry, cqueue::Entry32>) -> i32 {
    let mut reg = io_uring_zcrx_ifq_reg {
        rq_entries: 1,
        __resv: [1, 0, 0],
        ..Default::default()
    };
    let arg = std::ptr::addr_of_mut!(reg).cast();
    // SAFETY: `reg` is a live local of the size the kernel expects; it carries no pointers
    // (area_ptr and region_ptr are 0), and a reserved word is set, so the kernel refuses the
    // request without touching any other memory.
    unsafe { io_uring_register(ring, IORING_REGISTER_ZCRX_IFQ, arg, 1) }
        .err()
        .unwrap_or(0)
}

/// `IORING_REGISTER_ZCRX_CTRL` with `ZCRX_CTRL_FLUSH_RQ` for instance `zcrx_id`: the kernel
/// takes every published refill entry back into the area's free list now. Newer than 6.18.
///
/// Errors: the positive errno (`EINVAL` on kernels without zcrx control ops, `ENXIO` for an
/// unknown instance).
pub fn zcrx_flush_rq(
    ring: &IoUring<squeue::Entry, cqueue::Entry32>,
    zcrx_id: u32,
) -> std::result::Result<(), i32> {
    let ctrl = zcrx_ctrl {
        zcrx_id,
        op: ZCRX_CTRL_FLUSH_RQ,
        ..Default::default()
    };
    let arg = std::ptr::addr_of!(ctrl).cast_mut().cast();
    // SAFETY: `ctrl` is a live 72-byte local the kernel only reads (nr_args 0, as the op
    // requires); it carries no pointers.
    unsafe { io_uring_register(ring, IORING_REGISTER_ZCRX_CTRL, arg, 0) }
}

/// Queues one multishot `IORING_OP_RECV_ZC` on socket `sock` for zcrx instance `zcrx_id`
/// (`sqe.zcrx_ifq_idx`), tagged `user_data`, taking at most `len` bytes (`sqe.len`; 0 = no
/// limit; a limit needs 6.16+). Does not enter the
/// kernel: the next `submit*` call does.
///
/// Errors: `Error::Failure` when the submission queue is full.
pub fn push_recv_zc(
    ring: &mut IoUring<squeue::Entry, cqueue::Entry32>,
    sock: BorrowedFd<'_>,
    zcrx_id: u32,
    len: u32,
    user_data: u64,
) -> Result<()> {
    let sqe = opcode::RecvZc::new(types::Fd(sock.as_raw_fd()), len)
        .ifq(zcrx_id)
        .build()
        .user_data(user_data);
    let mut sq = ring.submission();
    // SAFETY: a RECV_ZC SQE carries no pointer into this process's memory: the data lands in
    // the registered area (pinned by the kernel for the ifq's lifetime) and the socket is
    // named by fd number, resolved by the kernel when it consumes the SQE.
    unsafe { sq.push(&sqe) }.map_err(|_| {
        Error::Failure("io_uring submission queue full while arming RECV_ZC".into())
    })?;
    sq.sync();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> RefillLayout {
        RefillLayout {
            head: 0,
            tail: 64,
            rqes: 128,
            entries: 8,
        }
    }

    #[test]
    fn layout_outside_or_overlapping_is_refused() {
        let ok = RefillRing::new(MappedRegion::heap(4096).unwrap(), layout());
        assert!(ok.is_ok());
        for bad in [
            RefillLayout {
                entries: 6,
                ..layout()
            },
            RefillLayout {
                entries: 0,
                ..layout()
            },
            RefillLayout {
                head: 2,
                ..layout()
            },
            RefillLayout {
                rqes: 132,
                ..layout()
            },
            RefillLayout {
                tail: 4096,
                ..layout()
            },
            RefillLayout {
                entries: 256,
                ..layout()
            },
            RefillLayout {
                head: 128,
                ..layout()
            },
            RefillLayout {
                tail: 0,
                ..layout()
            },
        ] {
            let e = RefillRing::new(MappedRegion::heap(4096).unwrap(), bad).unwrap_err();
            assert!(
                matches!(&e, Error::Decode { what, .. } if what == "io_uring_zcrx_offsets"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn entries_land_at_masked_slots_and_tail_is_published() {
        let mut r = RefillRing::new(MappedRegion::heap(4096).unwrap(), layout()).unwrap();
        let rqe = io_uring_zcrx_rqe {
            off: 0x1000,
            len: 4096,
            __pad: 0,
        };
        r.write_rqe(9, rqe); // slot 1
        assert_eq!(r.kernel_read_rqe(1).off, 0x1000);
        assert_eq!(r.kernel_read_rqe(17).len, 4096);
        r.store_tail(10);
        assert_eq!(r.kernel_load_tail(), 10);
        r.kernel_store_head(7);
        assert_eq!(r.load_head(), 7);
        // The entry sits at rqes + 1 * 16 in the region's bytes: off (u64 LE), len (u32 LE).
        let raw = r.region.bytes(128 + 16, 16).unwrap();
        assert_eq!(raw, &[0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn the_kernels_own_layout_passes_the_check_without_taking_the_region() {
        // What io_uring/zcrx.c writes back: head @0, tail @4 (`struct io_uring`), entries at
        // the next 64-byte cache line; 64 entries of 16 bytes end at byte 1088.
        let kernel = RefillLayout {
            head: 0,
            tail: 4,
            rqes: 64,
            entries: 64,
        };
        kernel.check(4096).unwrap();
        kernel.check(1088).unwrap();
        let e = kernel.check(1087).unwrap_err();
        assert!(matches!(&e, Error::Decode { what, .. } if what == "io_uring_zcrx_offsets"));
    }
}
