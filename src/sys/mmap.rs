//! [`MappedRegion`]: page-aligned memory owned by one value and handed to the kernel or a
//! device by address — an `mmap` of a file (the udmabuf dma-buf, a memfd), an anonymous `mmap`
//! (io_uring zcrx's receive area and refill region), or, for tests, a zeroed heap allocation of
//! the same shape — read through bounds-checked views and freed on drop.
//!
//! When a view is sound depends on who else writes the memory; the owners say so
//! (`udmabuf`'s module docs for dma-buf frags, [`crate::sys::uring_mem`] for zcrx buffers).
//! Writes from this process need `&mut self`, so no view is alive while it writes.

use std::alloc::Layout;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::sys::uapi::HUGEPAGE_2M;

/// Checks `[offset, offset + len)` against a region of `region_len` bytes with overflow-safe
/// arithmetic and returns it as a `usize` range. `what` names the access in the
/// `Error::Bounds` (e.g. `"dma-buf frag"`). The exact end (`offset + len == region_len`) is in
/// bounds; so is an empty range at the end.
pub(crate) fn checked_range(
    what: &str,
    offset: u64,
    len: u64,
    region_len: usize,
) -> Result<std::ops::Range<usize>> {
    let bounds = || Error::Bounds {
        what: what.to_string(),
        offset,
        len,
        region_len: region_len as u64,
    };
    let end = offset
        .checked_add(len)
        .filter(|&end| end <= region_len as u64)
        .ok_or_else(bounds)?;
    // Both fit in usize: end <= region_len, which is a usize.
    Ok(offset as usize..end as usize)
}

/// How a [`MappedRegion`] was allocated (decides how `Drop` frees it).
#[derive(Debug)]
enum Backing {
    /// `mmap`; `munmap` on drop. `hugetlb` for `MAP_HUGETLB` anonymous mappings.
    Mmap { hugetlb: bool },
    /// `alloc_zeroed(layout)`; `dealloc` on drop.
    Heap(Layout),
}

/// Page-aligned memory of a fixed, non-zero length in bytes (`PROT_READ|PROT_WRITE`), owned by
/// this value and freed on drop (`munmap`, or `dealloc` for [`heap`](Self::heap) regions).
/// Memory the kernel pinned (a zcrx registration, a dma-buf attachment) stays alive until the
/// kernel unpins it, so freeing after the owner's fds are closed is sound.
#[derive(Debug)]
pub struct MappedRegion {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: the region is plain memory owned by this value (no thread-affine state); moving the
// owner to another thread moves the right to free it with it.
unsafe impl Send for MappedRegion {}
// SAFETY: `&MappedRegion` only hands out `&[u8]` views (reads) and its address; all writes by
// this process need `&mut self` (or go through atomics, see `uring_mem::RefillRing`), so
// sharing references across threads adds no data race within this process.
unsafe impl Sync for MappedRegion {}

impl MappedRegion {
    /// `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0)`. For a dma-buf fd MAP_SHARED
    /// is required (udmabuf refuses private mappings with `EINVAL`).
    pub fn map_shared(fd: BorrowedFd<'_>, len: usize) -> Result<Self> {
        Self::map(fd, len, libc::MAP_SHARED)
    }

    /// `mmap(NULL, len, PROT_READ|PROT_WRITE, flags, fd, 0)` with caller-chosen `flags`
    /// (e.g. `MAP_SHARED | MAP_POPULATE`). `MAP_FIXED` and `MAP_FIXED_NOREPLACE` are refused
    /// (`Error::Sys` with `EINVAL`, before any call): the kernel picks the address, so no
    /// existing mapping is replaced. `len == 0` is refused the same way. Kernel errors:
    /// `Error::Sys` naming the call.
    pub fn map(fd: BorrowedFd<'_>, len: usize, flags: libc::c_int) -> Result<Self> {
        if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0 {
            return Err(Error::sys(
                "mmap(MAP_FIXED/MAP_FIXED_NOREPLACE): refused, the kernel must pick the address",
                libc::EINVAL,
            ));
        }
        let call = || {
            format!(
                "mmap({len} bytes, PROT_READ|PROT_WRITE, flags 0x{flags:x}, fd {})",
                fd.as_raw_fd()
            )
        };
        Self::mmap(len, flags, Some(fd), false, call)
    }

    /// `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)`, plus
    /// `MAP_HUGETLB|MAP_HUGE_2MB` when `hugetlb` (then `len` must be a multiple of 2 MiB).
    ///
    /// Errors: `Error::Sys` with `EINVAL` (before any call) for `len == 0` or, with `hugetlb`,
    /// a `len` that is not a multiple of 2 MiB (the kernel would round the mapping up, and the
    /// `munmap` of `len` bytes on drop would then fail and leak it); `Error::Sys` naming the call
    /// (`ENOMEM` from a hugetlb mapping means the 2 MiB pool is short).
    pub fn map_anon(len: usize, hugetlb: bool) -> Result<Self> {
        if hugetlb && len % HUGEPAGE_2M != 0 {
            return Err(Error::sys(
                format!("mmap(MAP_HUGETLB): {len} bytes is not a multiple of 2 MiB"),
                libc::EINVAL,
            ));
        }
        let (huge, huge_name) = match hugetlb {
            true => (
                libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
                "|MAP_HUGETLB|MAP_HUGE_2MB",
            ),
            false => (0, ""),
        };
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | huge;
        let call = || format!("mmap({len} bytes, MAP_PRIVATE|MAP_ANONYMOUS{huge_name})");
        Self::mmap(len, flags, None, hugetlb, call)
    }

    /// The one `mmap` call: NULL address, `PROT_READ|PROT_WRITE`, `flags` without `MAP_FIXED*`
    /// (checked by the callers), `fd` or `-1`, offset 0.
    fn mmap(
        len: usize,
        flags: libc::c_int,
        fd: Option<BorrowedFd<'_>>,
        hugetlb: bool,
        call: impl FnOnce() -> String,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::sys("mmap(0 bytes): refused", libc::EINVAL));
        }
        // SAFETY: addr is NULL and no MAP_FIXED flag is set (the callers refuse them), so the
        // kernel chooses a fresh address range and cannot replace any existing mapping (no Rust
        // object's memory is affected). `fd`, when given, is live for the call. The result is
        // checked against MAP_FAILED below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.map_or(-1, |fd| fd.as_raw_fd()),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Error::last_os(call()));
        }
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or_else(|| {
            Error::Failure("mmap returned a NULL mapping without an error".into())
        })?;
        Ok(MappedRegion {
            ptr,
            len,
            backing: Backing::Mmap { hugetlb },
        })
    }

    /// A zeroed heap allocation of `len` bytes aligned to the page size: the same shape as
    /// [`map_anon`](Self::map_anon) without a syscall, for tests and simulations of the kernel
    /// side (never handed to the kernel: see [`is_mmap`](Self::is_mmap)).
    ///
    /// Errors: `Error::Sys` with `EINVAL` for `len == 0` or a length the allocator cannot
    /// describe; `Error::Sys` (`ENOMEM`) when the allocation fails.
    pub fn heap(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len, crate::sys::page_size())
            .ok()
            .filter(|l| l.size() > 0)
            .ok_or_else(|| {
                Error::sys(format!("heap region of {len} bytes: refused"), libc::EINVAL)
            })?;
        // SAFETY: the layout has a non-zero size (checked above) and a power-of-two alignment
        // (the page size); the result is checked for NULL.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| Error::sys("alloc_zeroed", libc::ENOMEM))?;
        Ok(MappedRegion {
            ptr,
            len,
            backing: Backing::Heap(layout),
        })
    }

    /// The user virtual address (what the kernel is told, e.g. `area_reg.addr`).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (0-byte regions are refused); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True for an anonymous mapping backed by 2 MiB hugepages ([`map_anon`](Self::map_anon)).
    pub fn is_hugetlb(&self) -> bool {
        matches!(self.backing, Backing::Mmap { hugetlb: true })
    }

    /// True when the memory is an `mmap` (which the kernel may pin), false for a
    /// [`heap`](Self::heap) region (which the allocator could reuse).
    pub fn is_mmap(&self) -> bool {
        matches!(self.backing, Backing::Mmap { .. })
    }

    /// A view of `[offset, offset + len)`; `Error::Bounds` (what = "mapped region") if it
    /// leaves the region or `offset + len` overflows. Sound only while nobody else writes
    /// those bytes (see the module docs).
    pub fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]> {
        let r = checked_range("mapped region", offset, len, self.len)?;
        // SAFETY: `r` lies inside [0, self.len) (checked above), and the memory stays valid and
        // readable for as long as `self` is borrowed (freed only in Drop). Writes from this
        // process need `&mut self`, so none happen while the view lives; the owners' docs state
        // when writes by the kernel or a device are excluded.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(r.start), r.len()) })
    }

    /// Copies `data` into the region at `offset` (bytes); `Error::Bounds` if it does not fit.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let r = checked_range("mapped region write", offset, data.len() as u64, self.len)?;
        // SAFETY: the destination [r.start, r.end) lies inside the live, writable memory
        // (checked above); `&mut self` guarantees no view into it is alive; `data` is a
        // separate Rust slice, so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(r.start), data.len())
        };
        Ok(())
    }

    /// The whole region as one writable slice (e.g. a `recvmsg` iov the kernel writes).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr/len describe live, readable and writable memory owned by this value
        // (freed only in Drop); `&mut self` guarantees no other view into it is alive for the
        // slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Pointer to byte `offset`, which the caller has checked to be inside the region.
    pub(crate) fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset < self.len);
        self.ptr.as_ptr().wrapping_add(offset)
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        match self.backing {
            Backing::Mmap { .. } => {
                // SAFETY: ptr/len are exactly the range this value mapped and nothing else
                // unmapped it; views borrow `self`, so none outlives it. Pages the kernel still
                // pins stay alive until it unpins them.
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            }
            Backing::Heap(layout) => {
                // SAFETY: ptr was returned by alloc_zeroed with exactly this layout and is
                // freed once, here.
                unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn checked_range_bounds() {
        // Exact end is in bounds; empty at the end too.
        assert_eq!(checked_range("frag", 96, 4, 100).unwrap(), 96..100);
        assert_eq!(checked_range("frag", 100, 0, 100).unwrap(), 100..100);
        // Past the end.
        let e = checked_range("frag", 97, 4, 100).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Bounds { ref what, offset: 97, len: 4, region_len: 100 } if what == "frag"
            ),
            "{e}"
        );
        assert!(checked_range("frag", 101, 0, 100).is_err());
        // offset + len overflows u64.
        let e = checked_range("frag", u64::MAX, 2, 100).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Bounds {
                    offset: u64::MAX,
                    len: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(checked_range("frag", 1, u64::MAX, usize::MAX).is_err());
    }

    #[test]
    fn map_refuses_fixed_and_empty() {
        let fd = std::fs::File::open("/dev/zero").expect("open /dev/zero");
        for flags in [
            libc::MAP_SHARED | libc::MAP_FIXED,
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
        ] {
            let e = MappedRegion::map(fd.as_fd(), 4096, flags).unwrap_err();
            assert!(
                matches!(e, Error::Sys { ref call, errno: libc::EINVAL } if call.contains("MAP_FIXED")),
                "{e}"
            );
        }
        assert!(matches!(
            MappedRegion::map_shared(fd.as_fd(), 0),
            Err(Error::Sys {
                errno: libc::EINVAL,
                ..
            })
        ));
        assert!(matches!(
            MappedRegion::map_anon(0, false),
            Err(Error::Sys {
                errno: libc::EINVAL,
                ..
            })
        ));
    }

    #[test]
    fn a_hugetlb_mapping_must_be_whole_2mib_pages() {
        // Refused before mmap: the kernel would round the mapping up to 2 MiB, and munmap of
        // the shorter length on drop would fail and leak it.
        for len in [4096, HUGEPAGE_2M + 4096] {
            let e = MappedRegion::map_anon(len, true).unwrap_err();
            assert!(
                matches!(&e, Error::Sys { call, errno: libc::EINVAL } if call.contains("2 MiB")),
                "{len}: {e}"
            );
        }
        // Without hugetlb any non-zero length maps.
        let r = MappedRegion::map_anon(4096, false).unwrap();
        assert_eq!((r.len(), r.is_hugetlb(), r.is_mmap()), (4096, false, true));
    }

    #[test]
    fn region_views_are_bounds_checked() {
        let mut r = MappedRegion::heap(8192).unwrap();
        assert!(!r.is_mmap());
        assert_eq!(r.addr() % crate::sys::page_size() as u64, 0);
        r.write_at(8190, &[7, 9]).unwrap();
        assert_eq!(r.bytes(8190, 2).unwrap(), &[7, 9]);
        assert!(matches!(r.bytes(8190, 3), Err(Error::Bounds { .. })));
        assert!(matches!(r.bytes(u64::MAX, 2), Err(Error::Bounds { .. })));
        assert!(r.write_at(8191, &[1, 2]).is_err());
        assert!(MappedRegion::heap(0).is_err());
    }
}
