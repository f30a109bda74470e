//! ncdevmem-rs: a Rust port of the Linux kernel's `ncdevmem` devmem-TCP hardware selftest.
//!
//! The library holds the reusable pieces: the udmabuf memory provider ([`udmabuf`]), a
//! generic-netlink client with the `netdev` and `ethtool` families ([`netlink`]), the devmem
//! receive loop with token release and pattern validation ([`rx`], [`validate`]), io_uring
//! zero-copy receive ([`uring`]), send helpers ([`tx`]), waiting for the kernel to give back
//! what a run held ([`release`]), the command line ([`cli`]) and the run orchestration
//! ([`app`]); other command lines of the same binary ([`personality`]: `iou-zcrx`). All
//! `unsafe` lives in [`sys`] and [`udmabuf`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

/// Writes one line to stderr with a single `write`, ignoring errors: a closed or full stderr must not turn a log line
/// into a panic (SIGPIPE is ignored so that sockets report `EPIPE`).
#[macro_export]
macro_rules! elog {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        // One write per line, so lines of processes sharing a terminal never interleave.
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        let _ = ::std::io::stderr().write_all(line.as_bytes());
    }};
}

// The hand-written kernel layouts (cmsgs, ethtool and netlink structs, io_uring regions)
// assume LP64 (x86_64, aarch64): 8-byte `size_t`/`long`, 8-byte cmsg alignment.
#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "ncdevmem-rs supports 64-bit (LP64) Linux targets only: its uapi layouts assume them"
);

pub mod app;
pub mod backoff;
pub mod cli;
pub mod error;
pub mod netlink;
pub mod nic;
pub mod personality;
pub mod rcvbuf;
pub mod release;
pub mod rx;
pub mod stats;
pub mod sys;
pub mod tx;
pub mod udmabuf;
pub mod uring;
pub mod validate;

pub use error::{Error, Result};
pub use sys::signals;
