//! `TCP_CONGESTION` for `--tcp-cc NAME`: sets the algorithm on a socket and turns the
//! kernel's refusal into an error that names what this machine offers. The calls are
//! [`crate::sys::tcp`]'s.

use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::sys::tcp::{self, ALLOWED_CC, AVAILABLE_CC, TCP_CA_NAME_MAX};

/// Sets congestion control `name` on `fd` (`flag` names the option in errors, e.g.
/// `"--tcp-cc"`). Set it on the listener before `accept` (accepted sockets inherit it) or on
/// a client socket before `connect`; a connected socket may change too.
///
/// Errors: `Error::Usage` for a name that cannot be one (empty, longer than 15 bytes, with a
/// NUL, space or control character), for an algorithm the kernel does not have (`ENOENT`:
/// the text lists [`AVAILABLE_CC`]) or may not give this process (`EPERM`: not in
/// [`ALLOWED_CC`] and no `CAP_NET_ADMIN`); `Error::Sys` for any other refusal.
pub fn set_congestion(fd: BorrowedFd<'_>, flag: &str, name: &str) -> Result<()> {
    check_name(flag, name)?;
    tcp::set_congestion(fd, name).map_err(|errno| {
        let list = match errno {
            libc::EPERM => tcp::congestion_list(ALLOWED_CC),
            _ => tcp::congestion_list(AVAILABLE_CC),
        };
        refusal(flag, name, errno, list)
    })
}

/// Refuses, before any call, a name the kernel would truncate or could never list.
fn check_name(flag: &str, name: &str) -> Result<()> {
    let max = TCP_CA_NAME_MAX - 1;
    if name.is_empty() || name.len() > max || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(Error::Usage(format!(
            "{flag}: invalid congestion control name {name:?} (expected 1..={max} bytes without \
             spaces, e.g. cubic)"
        )));
    }
    Ok(())
}

/// The error for the kernel's `errno` on setting `name`, with the sysctl list read for it
/// (`available` for `ENOENT`, `allowed` for `EPERM`; a failed read is named in the text).
fn refusal(flag: &str, name: &str, errno: i32, list: Result<Vec<String>>) -> Error {
    let names = |path: &str| match &list {
        Ok(l) if !l.is_empty() => format!("{}: {}", sysctl_name(path), l.join(" ")),
        Ok(_) => format!("{} is empty", sysctl_name(path)),
        Err(e) => format!("{} unreadable: {e}", sysctl_name(path)),
    };
    match errno {
        libc::ENOENT => Error::Usage(format!(
            "{flag}: this kernel has no TCP congestion control '{name}' ({})",
            names(AVAILABLE_CC)
        )),
        libc::EPERM => Error::Usage(format!(
            "{flag}: TCP congestion control '{name}' needs CAP_NET_ADMIN ({}; it is not \
             listed)",
            names(ALLOWED_CC)
        )),
        e => Error::sys(format!("setsockopt(TCP_CONGESTION, {name})"), e),
    }
}

/// `/proc/sys/net/ipv4/tcp_x` → `net.ipv4.tcp_x`.
fn sysctl_name(path: &str) -> String {
    path.trim_start_matches("/proc/sys/").replace('/', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Result<Vec<String>> {
        Ok(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn refusals_name_what_the_machine_has() {
        // This machine's 6.18 lists (reno bbr cubic available; reno bbr allowed).
        let e = refusal(
            "--tcp-cc",
            "dctcp",
            libc::ENOENT,
            list(&["reno", "bbr", "cubic"]),
        );
        assert_eq!(
            e.to_string(),
            "--tcp-cc: this kernel has no TCP congestion control 'dctcp' \
             (net.ipv4.tcp_available_congestion_control: reno bbr cubic)"
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_USAGE);
        let e = refusal("--tcp-cc", "cubic", libc::EPERM, list(&["reno", "bbr"]));
        assert_eq!(
            e.to_string(),
            "--tcp-cc: TCP congestion control 'cubic' needs CAP_NET_ADMIN \
             (net.ipv4.tcp_allowed_congestion_control: reno bbr; it is not listed)"
        );
        let e = refusal("--tcp-cc", "x", libc::ENOENT, list(&[]));
        assert!(
            e.to_string()
                .ends_with("(net.ipv4.tcp_available_congestion_control is empty)"),
            "{e}"
        );
        let e = refusal("--tcp-cc", "x", libc::EBADF, list(&[]));
        assert!(
            matches!(
                e,
                Error::Sys {
                    errno: libc::EBADF,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn impossible_names_are_usage_errors_before_any_call() {
        for bad in ["", "a b", "sixteen-bytes-xx", "nul\0", "tab\t"] {
            let e = check_name("--tcp-cc", bad).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("--tcp-cc: invalid congestion control name"),
                "{bad:?}: {e}"
            );
        }
        assert!(check_name("--tcp-cc", "fifteen-bytes-x").is_ok());
        assert!(check_name("--tcp-cc", "dctcp").is_ok());
    }
}
