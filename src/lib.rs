//! ncdevmem-rs: a Rust port of the Linux kernel's `ncdevmem` devmem-TCP hardware selftest.
//!
//! The library holds the reusable pieces: the dma-buf memory sources behind one seam
//! ([`memory`]: udmabuf, [`udmabuf`], and dma-buf heaps), a generic-netlink client with the
//! `netdev` and `ethtool` families ([`netlink`]), the devmem receive loop with token release
//! and pattern validation ([`rx`], [`validate`]), the figures of a run beyond the loop's
//! counters ([`figures`]: CPU accounting, frag sizes, device RX, congestion control),
//! io_uring zero-copy receive ([`uring`]), send helpers ([`tx`]), waiting for the kernel to
//! give back what a run held (`release`), the command line ([`cli`]) and the run
//! orchestration ([`app`]); sweeps over many runs with a peer that sends them, and their
//! table (`lab`); other command lines of the same binary ([`personality`]:
//! `iou-zcrx`). All `unsafe` lives in [`sys`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

/// This build's version, as `ncdevmem-rs --version` prints it and the JSON summary's `version`
/// carries it: `CARGO_PKG_VERSION (commit HASH, target TRIPLE)`, e.g. `0.1.0 (commit
/// 89fd821abc12, target x86_64-unknown-linux-musl)`. HASH is the git commit built (12 hex
/// digits), `-dirty` after it when the sources differed from it, `unknown` when built outside a
/// git checkout (a source tarball); TRIPLE is the target built for. Made by build.rs.
pub const VERSION: &str = env!("NCDEVMEM_VERSION");

/// Writes one line to stderr with a single `write`, ignoring errors: a closed or full stderr
/// must not turn a log line into a panic (SIGPIPE is ignored so that sockets report `EPIPE`).
/// One write per line, so lines of processes sharing a terminal never interleave.
#[macro_export]
macro_rules! elog {
    ($($arg:tt)*) => {
        $crate::log_line(&mut ::std::io::stderr(), ::std::format_args!($($arg)*))
    };
}

/// [`elog!`] to any `std::io::Write` sink instead of stderr: `elog_to!(sink, "fmt", args..)`.
/// The receive and send loops log through it to a sink that is stderr in production and a
/// buffer in tests.
#[macro_export]
macro_rules! elog_to {
    ($sink:expr, $($arg:tt)*) => {
        $crate::log_line($sink, ::std::format_args!($($arg)*))
    };
}

/// What [`elog!`] and [`elog_to!`] expand to: formats `args` and a newline, then writes them to
/// `sink` in one `write_all`, ignoring errors.
#[doc(hidden)]
pub fn log_line(sink: &mut dyn std::io::Write, args: std::fmt::Arguments<'_>) {
    let mut line = args.to_string();
    line.push('\n');
    let _ = sink.write_all(line.as_bytes());
}

// The hand-written kernel layouts (cmsgs, ethtool and netlink structs, io_uring regions)
// assume LP64 (x86_64, aarch64): 8-byte `size_t`/`long`, 8-byte cmsg alignment.
#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "ncdevmem-rs supports 64-bit (LP64) Linux targets only: its uapi layouts assume them"
);

pub mod app;
pub(crate) mod backoff;
pub mod caps;
pub mod cli;
pub mod conn;
pub(crate) mod engine;
pub(crate) mod errno;
pub mod error;
pub mod figures;
pub(crate) mod lab;
pub mod memory;
pub(crate) mod missing;
pub(crate) mod modes;
pub mod netlink;
pub mod nic;
pub mod personality;
pub(crate) mod pid_file;
pub mod rcvbuf;
pub(crate) mod release;
pub(crate) mod run_report;
pub mod rx;
pub mod stats;
pub mod summary;
pub mod sys;
pub mod tx;
pub mod udmabuf;
pub mod uring;
pub mod validate;
pub(crate) mod verdict;

pub use error::{Error, Result};
pub use sys::signals;

#[cfg(test)]
mod version_tests {
    #[test]
    fn version_names_the_package_version_the_commit_and_the_target() {
        let v = super::VERSION;
        let rest = v
            .strip_prefix(concat!(env!("CARGO_PKG_VERSION"), " (commit "))
            .unwrap_or_else(|| panic!("{v}"));
        let (commit, target) = rest
            .strip_suffix(')')
            .and_then(|r| r.split_once(", target "))
            .unwrap_or_else(|| panic!("{v}"));
        let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
        assert!(
            commit == "unknown"
                || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
            "{v}"
        );
        assert!(
            target.starts_with(std::env::consts::ARCH) && target.contains("-linux-"),
            "{v}"
        );
    }
}
