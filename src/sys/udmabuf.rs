//! The udmabuf and dma-buf calls, one thin wrapper each (include/uapi/linux/udmabuf.h,
//! include/uapi/linux/dma-buf.h). Each returns the positive errno of a failed
//! call; what an errno means for the run (a skip, a retry, a failure) is decided by
//! `udmabuf`.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::sys::{ioctl_request, last_errno, uapi};

/// Opens the udmabuf misc device at `path` `O_RDWR|O_CLOEXEC`.
pub(crate) fn open_device(path: &Path) -> Result<OwnedFd, i32> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|e| crate::error::errno_of(&e))
}

/// `ioctl(dev, UDMABUF_CREATE, {memfd, UDMABUF_FLAGS_CLOEXEC, offset 0, size})`: exports the
/// first `size` bytes of `memfd` as a dma-buf; the returned dma-buf fd is owned at once.
pub(crate) fn create(
    dev: BorrowedFd<'_>,
    memfd: BorrowedFd<'_>,
    size: u64,
) -> Result<OwnedFd, i32> {
    let arg = uapi::udmabuf_create {
        memfd: memfd.as_raw_fd() as u32,
        flags: uapi::UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size,
    };
    // SAFETY: `dev` is a live descriptor; UDMABUF_CREATE is an _IOW ioctl reading exactly
    // size_of::<udmabuf_create>() (24) bytes from the pointer, which points at `arg`, alive
    // across the call. The result is checked before use.
    let ret = unsafe { libc::ioctl(dev.as_raw_fd(), ioctl_request(uapi::UDMABUF_CREATE), &arg) };
    if ret < 0 {
        return Err(last_errno());
    }
    // SAFETY: UDMABUF_CREATE returned a new dma-buf descriptor (checked >= 0) owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// One `ioctl(fd, DMA_BUF_IOCTL_SYNC, {flags})`.
pub(crate) fn dma_buf_sync(fd: BorrowedFd<'_>, flags: u64) -> Result<(), i32> {
    let arg = uapi::dma_buf_sync { flags };
    // SAFETY: `fd` is a live descriptor for the borrow's duration; DMA_BUF_IOCTL_SYNC is an
    // _IOW ioctl that reads exactly size_of::<dma_buf_sync>() (8) bytes from the pointer,
    // which points at `arg`, alive across the call. On a non-dma-buf fd the kernel answers
    // ENOTTY (or the file's own ioctl refuses the unknown number) without touching memory.
    let ret = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            ioctl_request(uapi::DMA_BUF_IOCTL_SYNC),
            &arg,
        )
    };
    if ret < 0 {
        return Err(last_errno());
    }
    Ok(())
}
