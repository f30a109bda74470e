//! The dma-buf heap calls (include/uapi/linux/dma-heap.h, drivers/dma-buf/dma-heap.c): open a
//! heap's character device (`/dev/dma_heap/NAME`) and allocate a dma-buf from it with
//! `DMA_HEAP_IOCTL_ALLOC`. Each call returns the positive errno of a failure; what an errno
//! means for the run (a skip, a failure) is decided by `memory::dma_heap`.
//!
//! Layout (x86_64, LP64; the same on every architecture: fixed-width fields only): `struct
//! dma_heap_allocation_data` is 24 bytes, `len` u64 at 0, `fd` u32 at 8 (written by the
//! kernel), `fd_flags` u32 at 12, `heap_flags` u64 at 16. `DMA_HEAP_IOCTL_ALLOC` is
//! `_IOWR('H', 0x0, struct dma_heap_allocation_data)` = `0xc0184800`.

#![allow(non_camel_case_types)]

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::sys::uapi_struct::uapi_struct;
use crate::sys::{ioctl_request, last_errno};

uapi_struct! {
    /// `struct dma_heap_allocation_data` (24 bytes): the argument of `DMA_HEAP_IOCTL_ALLOC`,
    /// read and written by the kernel (`_IOWR`).
    dma_heap_allocation_data = 24 {
        /// Bytes to allocate (the kernel rounds them up to whole pages).
        len: u64 = 0,
        /// Out: the new dma-buf fd. Must be 0 on input (the kernel refuses anything else
        /// with `EINVAL`).
        fd: u32 = 8,
        /// Flags of the new fd: `O_CLOEXEC` and an access mode (`O_RDONLY`, `O_WRONLY`,
        /// `O_RDWR`); other bits are `EINVAL` (`DMA_HEAP_VALID_FD_FLAGS`).
        fd_flags: u32 = 12,
        /// Heap flags; none are defined (`DMA_HEAP_VALID_HEAP_FLAGS` is 0), anything else
        /// is `EINVAL`.
        heap_flags: u64 = 16,
    }
}

/// `DMA_HEAP_IOC_MAGIC`: the ioctl type of the dma-heap devices.
pub const DMA_HEAP_IOC_MAGIC: u8 = b'H';

/// `DMA_HEAP_IOCTL_ALLOC` = `_IOWR('H', 0x0, struct dma_heap_allocation_data)`: allocates
/// `len` bytes and returns the dma-buf fd in `fd`.
pub const DMA_HEAP_IOCTL_ALLOC: u32 = nix::request_code_readwrite!(
    DMA_HEAP_IOC_MAGIC,
    0x0,
    std::mem::size_of::<dma_heap_allocation_data>()
) as u32;

/// The `fd_flags` this crate asks for: the dma-buf is mapped read-write (`O_RDWR`) and not
/// inherited by children (`O_CLOEXEC`).
pub const ALLOC_FD_FLAGS: u32 = (libc::O_RDWR | libc::O_CLOEXEC) as u32;

/// The request for a `len`-byte allocation: `fd` 0 (the kernel fills it in),
/// [`ALLOC_FD_FLAGS`], no heap flags.
pub fn alloc_request(len: u64) -> dma_heap_allocation_data {
    dma_heap_allocation_data {
        len,
        fd: 0,
        fd_flags: ALLOC_FD_FLAGS,
        heap_flags: 0,
    }
}

/// Opens the heap device at `path` (`/dev/dma_heap/NAME`) `O_RDONLY|O_CLOEXEC`: the
/// allocation ioctl needs no write access to the heap itself.
pub fn open_heap(path: &Path) -> Result<OwnedFd, i32> {
    OpenOptions::new()
        .read(true)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|e| crate::error::errno_of(&e))
}

/// `ioctl(heap, DMA_HEAP_IOCTL_ALLOC, alloc_request(len))`: a new dma-buf of `len` bytes,
/// owned at once. On a descriptor that is not a dma-heap the kernel answers `ENOTTY`.
pub fn alloc(heap: BorrowedFd<'_>, len: u64) -> Result<OwnedFd, i32> {
    let mut arg = alloc_request(len);
    // SAFETY: `heap` is a live descriptor for the borrow's duration; DMA_HEAP_IOCTL_ALLOC is
    // an _IOWR ioctl that reads and writes exactly size_of::<dma_heap_allocation_data>() (24)
    // bytes at the pointer, which points at `arg` (a #[repr(C)] struct of that size, asserted),
    // alive and exclusively borrowed across the call. The return is checked before `arg.fd`
    // is used.
    let ret = unsafe {
        libc::ioctl(
            heap.as_raw_fd(),
            ioctl_request(DMA_HEAP_IOCTL_ALLOC),
            &mut arg,
        )
    };
    if ret < 0 {
        return Err(last_errno());
    }
    let fd = i32::try_from(arg.fd).map_err(|_| libc::EBADF)?;
    // SAFETY: the ioctl succeeded (checked above), so `arg.fd` is a new dma-buf descriptor
    // the kernel installed for this process and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_number_matches_the_uapi_header() {
        // _IOWR: direction 3 << 30, size 24 << 16, type 'H' (0x48) << 8, number 0.
        assert_eq!(DMA_HEAP_IOCTL_ALLOC, 0xc018_4800);
        assert_eq!(ALLOC_FD_FLAGS, 0x8_0002);
    }

    #[test]
    fn alloc_request_is_byte_exact() {
        let got = alloc_request(64 << 20).to_bytes();
        #[rustfmt::skip]
        let want: [u8; 24] = [
            // len: u64 = 67108864 (64 MiB)
            0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
            // fd: u32 = 0 (the kernel writes the new dma-buf fd here)
            0x00, 0x00, 0x00, 0x00,
            // fd_flags: u32 = O_RDWR | O_CLOEXEC = 0x80002
            0x02, 0x00, 0x08, 0x00,
            // heap_flags: u64 = 0 (no heap flags are defined)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn the_kernels_answer_decodes() {
        // Synthetic, following the kernel's answer: the request above with fd 5 filled in.
        #[rustfmt::skip]
        let reply: [u8; 24] = [
            // len: u64 = 67108864
            0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
            // fd: u32 = 5
            0x05, 0x00, 0x00, 0x00,
            // fd_flags: u32 = 0x80002
            0x02, 0x00, 0x08, 0x00,
            // heap_flags: u64 = 0
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let got = dma_heap_allocation_data::from_bytes(&reply).unwrap();
        assert_eq!(
            got,
            dma_heap_allocation_data {
                fd: 5,
                ..alloc_request(64 << 20)
            }
        );
        assert!(dma_heap_allocation_data::from_bytes(&reply[..23]).is_err());
    }
}
