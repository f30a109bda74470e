//! The crate's one error type, and the exit codes it maps to.
//!
//! Every failure names the operation, the object and, for kernel errors, the errno *name*
//! (`EINVAL (Invalid argument)`), the netlink extended-ack message and the attribute the kernel
//! pointed at. Exit codes (`docs/architecture.md#exit-codes`): 0 success, 1 test failure,
//! 2 usage error, 4 skip (kselftest's `KSFT_SKIP`).

use std::fmt;

pub use crate::errno::errno_display;

/// Process exit code for success.
pub const EXIT_OK: u8 = 0;
/// Process exit code for a test failure (validation error, kernel refused what must work,
/// lost tokens, timeout).
pub const EXIT_FAIL: u8 = 1;
/// Process exit code for a usage error (bad flag or value).
pub const EXIT_USAGE: u8 = 2;
/// Process exit code for "the environment lacks a capability" (kselftest `KSFT_SKIP`).
pub const EXIT_SKIP: u8 = 4;

/// Crate-wide result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A netlink request the kernel refused, with everything the extended ack told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlError {
    /// Generic-netlink family name (`"netdev"`, `"ethtool"`, `"nlctrl"`).
    pub family: String,
    /// Operation name as in the family's YAML spec (`"bind-rx"`, `"rings-set"`).
    pub op: String,
    /// What the request was about, e.g. `"eth0 (ifindex 4), queues 8..=9"`; may be empty.
    pub target: String,
    /// Positive errno from `nlmsgerr.error`.
    pub errno: i32,
    /// `NLMSGERR_ATTR_MSG`: the kernel's extack text.
    pub ext_msg: Option<String>,
    /// `NLMSGERR_ATTR_OFFS` mapped back to an attribute path of our request
    /// (e.g. `NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE`), or the raw offset if unmapped.
    pub bad_attr: Option<String>,
    /// `NLMSGERR_ATTR_MISS_TYPE`: the number of a required attribute that was missing.
    pub missing_attr: Option<u32>,
    /// `NLMSGERR_ATTR_MISS_NEST`: offset of the nest in which `missing_attr` was missing.
    pub missing_nest: Option<String>,
    /// What was wrong with the extended ack (a malformed attribute, text that is not UTF-8),
    /// when something was; the errno is the kernel's all the same.
    pub ack_problem: Option<String>,
}

impl NlError {
    /// The kernel's refusal of `family`'s `op` on `target` with `errno` and an extended ack
    /// that says nothing more (every optional field `None`); test doubles and tests fill in
    /// what else an ack said with struct update syntax.
    pub fn refusal(family: &str, op: &str, target: impl Into<String>, errno: i32) -> NlError {
        NlError {
            family: family.into(),
            op: op.into(),
            target: target.into(),
            errno,
            ext_msg: None,
            bad_attr: None,
            missing_attr: None,
            missing_nest: None,
            ack_problem: None,
        }
    }

    /// The kernel's answer without the request it answered: the errno and what the extended
    /// ack added, e.g. `EOPNOTSUPP (Operation not supported); at NETDEV_A_DMABUF_IFINDEX`
    /// (the `Display` text after `family op on target: `).
    pub fn answer(&self) -> String {
        let mut s = errno_display(self.errno);
        let _ = self.write_ack(&mut s);
        s
    }

    /// The extended ack's facts, each after `; `.
    fn write_ack(&self, f: &mut dyn fmt::Write) -> fmt::Result {
        if let Some(m) = &self.ext_msg {
            write!(f, "; kernel: \"{m}\"")?;
        }
        if let Some(a) = &self.bad_attr {
            write!(f, "; at {a}")?;
        }
        if let Some(t) = self.missing_attr {
            write!(f, "; missing attribute {t}")?;
            if let Some(n) = &self.missing_nest {
                write!(f, " in {n}")?;
            }
        }
        if let Some(p) = &self.ack_problem {
            write!(f, "; extended ack malformed: {p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for NlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.family, self.op)?;
        if !self.target.is_empty() {
            write!(f, " on {}", self.target)?;
        }
        write!(f, ": {}", errno_display(self.errno))?;
        self.write_ack(f)
    }
}

/// Every way a run can fail. The variant decides the exit code ([`Error::exit_code`]).
#[derive(Debug, Clone)]
pub enum Error {
    /// Bad command line: flag, value or combination. Exit 2.
    Usage(String),
    /// The environment lacks a capability (no udmabuf, no hugepages, not root, driver without
    /// queue management): what is missing (`crate::missing`). Exit 4.
    Skip(crate::missing::Missing),
    /// A system call failed. `call` names it, e.g. `"setsockopt(SO_DEVMEM_DONTNEED)"`.
    Sys {
        /// The call and its object, e.g. `"open(/dev/udmabuf)"`.
        call: String,
        /// Positive errno.
        errno: i32,
    },
    /// A netlink request was refused by the kernel (boxed: it is the largest variant).
    Netlink(Box<NlError>),
    /// The kernel (or a peer) sent bytes we could not decode: `what` names the field.
    Decode {
        /// The structure or attribute, e.g. `"NETDEV_A_DMABUF_ID"`.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// A fragment or access fell outside a memory region. Offsets and lengths in bytes.
    Bounds {
        /// What was accessed, e.g. `"dmabuf frag (token 7)"`.
        what: String,
        /// Start offset in bytes.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// Size of the region in bytes.
        region_len: u64,
    },
    /// Something did not happen in time (accept, first byte, idle, completion).
    Timeout(String),
    /// The test failed: validation mismatch, flow steering error, leaked tokens, a kernel
    /// contract broken. Exit 1.
    Failure(String),
    /// The run was stopped by a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
    /// SIGUSR2: [`crate::sys::signals`]). Exit 1 (after unwinding every NIC change).
    Interrupted(i32),
}

impl Error {
    /// Builds [`Error::Sys`] from `call` and the calling thread's current `errno` (`EIO` when
    /// it is 0: the call failed without saying why).
    pub(crate) fn last_os(call: impl Into<String>) -> Self {
        Error::io(call, &std::io::Error::last_os_error())
    }

    /// The one conversion of a `std::io::Error` from `call`: [`Error::Interrupted`] when a
    /// stop-aware writer gave up for a signal ([`Stopped`]), else [`Error::Sys`] with the
    /// error's errno ([`errno_of`]: `EIO` when it carries none, never 0).
    pub fn io(call: impl Into<String>, e: &std::io::Error) -> Self {
        match e.get_ref().and_then(|x| x.downcast_ref::<Stopped>()) {
            Some(Stopped(sig)) => Error::Interrupted(*sig),
            None => Error::sys(call, errno_of(e)),
        }
    }

    /// Builds [`Error::Sys`] from `call` and an explicit positive errno.
    pub fn sys(call: impl Into<String>, errno: i32) -> Self {
        Error::Sys {
            call: call.into(),
            errno,
        }
    }

    /// Builds [`Error::Decode`]: `what` names the structure or attribute, `detail` what was
    /// wrong with it.
    pub fn decode(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Decode {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// The errno carried by a `Sys` or `Netlink` error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Sys { errno, .. } => Some(*errno),
            Error::Netlink(e) => Some(e.errno),
            _ => None,
        }
    }

    /// The kernel's answer, for a sentence that already names the request: a netlink error's
    /// [`NlError::answer`], a system call's errno (`EOPNOTSUPP (Operation not supported)`),
    /// anything else its whole text.
    pub fn kernel_answer(&self) -> String {
        match self {
            Error::Netlink(e) => e.answer(),
            Error::Sys { errno, .. } => errno_display(*errno),
            e => e.to_string(),
        }
    }

    /// Exit code for this error: 2 usage, 4 skip, 1 everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::Skip(_) => EXIT_SKIP,
            _ => EXIT_FAIL,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "{m}"),
            Error::Skip(m) => write!(f, "skip: {m}"),
            Error::Sys { call, errno } => write!(f, "{call}: {}", errno_display(*errno)),
            Error::Netlink(e) => write!(f, "{e}"),
            Error::Decode { what, detail } => write!(f, "cannot decode {what}: {detail}"),
            Error::Bounds {
                what,
                offset,
                len,
                region_len,
            } => write!(
                f,
                "{what} out of bounds: offset 0x{offset:x} + len 0x{len:x} exceeds region of 0x{region_len:x} bytes"
            ),
            Error::Timeout(m) => write!(f, "timed out: {m}"),
            Error::Failure(m) => write!(f, "{m}"),
            Error::Interrupted(sig) => {
                let name = match *sig {
                    libc::SIGINT => " (SIGINT)",
                    libc::SIGTERM => " (SIGTERM)",
                    libc::SIGHUP => " (SIGHUP)",
                    libc::SIGQUIT => " (SIGQUIT)",
                    libc::SIGUSR1 => " (SIGUSR1)",
                    libc::SIGUSR2 => " (SIGUSR2)",
                    _ => "",
                };
                write!(f, "interrupted by signal {sig}{name}; everything set up was undone")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<NlError> for Error {
    fn from(e: NlError) -> Self {
        Error::Netlink(Box::new(e))
    }
}

/// The positive errno of an I/O error: its OS error, or `EIO` when it has none (a short write,
/// an error std made up) or the OS said 0. Never 0, so no message reads "errno 0".
pub fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().filter(|&n| n > 0).unwrap_or(libc::EIO)
}

/// The error a stop-aware writer (the receive loop's `StopAwareWriter`) returns, inside a
/// `std::io::Error`, once a stop signal has arrived: the signal number. [`Error::io`] turns it
/// into [`Error::Interrupted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped(pub i32);

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stopped by signal {}", self.0)
    }
}

impl std::error::Error for Stopped {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errno::errno_name;

    #[test]
    fn io_errors_keep_their_errno_and_never_say_errno_0() {
        let e = Error::io("read(x)", &std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert_eq!(e.to_string(), "read(x): ENOENT (No such file or directory)");
        // No OS error (a short write), or an OS error of 0: EIO, never "errno 0 (Success)".
        for io in [
            std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "failed to write whole buffer",
            ),
            std::io::Error::from_raw_os_error(0),
        ] {
            let e = Error::io("write(stdout)", &io);
            assert_eq!(e.errno(), Some(libc::EIO), "{io}");
            assert_eq!(e.to_string(), "write(stdout): EIO (Input/output error)");
        }
        // A stop-aware writer's signal is an interruption, not an I/O failure.
        let e = Error::io(
            "write(stdout)",
            &std::io::Error::other(Stopped(libc::SIGTERM)),
        );
        assert!(matches!(e, Error::Interrupted(libc::SIGTERM)), "{e}");
    }

    #[test]
    fn errno_renders_name_and_text() {
        assert_eq!(errno_display(libc::EINVAL), "EINVAL (Invalid argument)");
        assert_eq!(
            errno_display(libc::EOPNOTSUPP),
            "EOPNOTSUPP (Operation not supported)"
        );
        assert!(errno_display(4000).starts_with("errno 4000 ("));
        // Aliases print as the name the kernel headers list first; 525 is kernel-internal.
        assert_eq!(errno_name(libc::EWOULDBLOCK).as_deref(), Some("EAGAIN"));
        assert_eq!(errno_name(libc::ENOTSUP).as_deref(), Some("EOPNOTSUPP"));
        assert_eq!(errno_name(525).as_deref(), Some("ETOOSMALL"));
        assert_eq!(errno_name(0), None);
    }

    #[test]
    fn netlink_error_renders_every_fact() {
        let e = NlError {
            family: "netdev".into(),
            op: "bind-rx".into(),
            target: "eth0 (ifindex 4), queues 8..=9".into(),
            errno: libc::ERANGE,
            ext_msg: Some("integer out of range".into()),
            bad_attr: Some("NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE".into()),
            missing_attr: None,
            missing_nest: None,
            ack_problem: None,
        };
        assert_eq!(
            e.to_string(),
            "netdev bind-rx on eth0 (ifindex 4), queues 8..=9: ERANGE (Numerical result out of range); \
             kernel: \"integer out of range\"; at NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE"
        );
        assert_eq!(
            e.answer(),
            "ERANGE (Numerical result out of range); kernel: \"integer out of range\"; at \
             NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE"
        );
        assert_eq!(Error::from(e).kernel_answer(), "ERANGE (Numerical result out of range); kernel: \"integer out of range\"; at NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE");
        assert_eq!(
            Error::sys("x", libc::EPERM).kernel_answer(),
            "EPERM (Operation not permitted)"
        );
    }

    #[test]
    fn exit_codes_follow_design() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
        assert_eq!(
            Error::Skip(crate::missing::Missing::ChannelConfig).exit_code(),
            4
        );
        assert_eq!(Error::Failure("x".into()).exit_code(), 1);
        assert_eq!(Error::sys("x", libc::EFAULT).exit_code(), 1);
        assert_eq!(Error::Interrupted(2).exit_code(), 1);
    }
}
