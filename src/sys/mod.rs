//! The home of FFI: syscall wrappers with one shape ([`cvt`]), hand-defined uapi ([`uapi`]) and
//! socket calls ([`socket`]). Other modules (policy, netlink logic, CLI) contain no `unsafe`,
//! except the mapped-memory views in `udmabuf`.

pub mod netlink_sock;
pub mod socket;
pub mod uapi;

use crate::error::Error;

/// Turns a C-style return (`-1` and `errno`) into a `Result`, naming `call` in the error.
pub fn cvt<T: Copy + PartialOrd + Default>(ret: T, call: &str) -> Result<T, Error>
where
    T: From<i8>,
{
    if ret < T::from(0) {
        Err(Error::last_os(call))
    } else {
        Ok(ret)
    }
}

/// The calling thread's current `errno` (positive).
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The system page size in bytes (`sysconf(_SC_PAGESIZE)`), never a constant.
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers and has no preconditions.
    let ret = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if ret > 0 {
        ret as usize
    } else {
        4096
    }
}
