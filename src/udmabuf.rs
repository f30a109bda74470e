//! udmabuf memory provider: memfd (optionally hugetlb) → `UDMABUF_CREATE` → `mmap(MAP_SHARED)`,
//! plus `DMA_BUF_IOCTL_SYNC` around CPU access and checked views of the mapping.

use crate::error::Result;

/// Memory that dmabuf frags point into, read only through bounds-checked views.
///
/// Implemented by the real udmabuf mapping and by a `Vec`-backed region in tests, so the same
/// bounds checks run in both.
pub trait FragMemory {
    /// Size of the region in bytes (the dma-buf size).
    fn size(&self) -> usize;

    /// The bytes `[offset, offset + len)`, or `Error::Bounds` if any of them lies outside the
    /// region (checked with overflow-safe arithmetic before any read). Sound to read after
    /// `recvmsg` returned the frag and before its token is released.
    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]>;

    /// `DMA_BUF_IOCTL_SYNC(START|READ)` before the CPU reads frags.
    fn begin_cpu_read(&self) -> Result<()>;

    /// `DMA_BUF_IOCTL_SYNC(END|READ)` after the CPU is done reading.
    fn end_cpu_read(&self) -> Result<()>;
}
