//! Errno numbers as text: `"EINVAL (Invalid argument)"`. A leaf (std and `nix` only), so
//! every layer, the kernel boundary included, can word an errno the same way.

/// Renders an errno as `"EINVAL (Invalid argument)"`; unknown numbers as `"errno 4095 (...)"`.
pub fn errno_display(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std renders "Invalid argument (os error 22)"; keep only the description.
    let desc = text
        .rsplit_once(" (os error")
        .map(|(d, _)| d.to_string())
        .unwrap_or(text);
    match errno_name(errno) {
        Some(n) => format!("{n} ({desc})"),
        None => format!("errno {errno} ({desc})"),
    }
}

/// Symbolic name of a Linux errno, e.g. `"EINVAL"`: `nix::errno::Errno`'s (its Debug text is
/// the constant's name), plus the kernel-internal `ETOOSMALL` (525), which can leak from
/// `put_cmsg_notrunc`; `None` for a number Linux does not define.
pub(crate) fn errno_name(errno: i32) -> Option<String> {
    match nix::errno::Errno::from_raw(errno) {
        _ if errno == 525 => Some("ETOOSMALL".into()),
        nix::errno::Errno::UnknownErrno => None,
        e => Some(format!("{e:?}")),
    }
}
