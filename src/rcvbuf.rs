//! Receive-buffer sizing for the devmem and zcrx servers: keep the TCP window inside the
//! binding, so the peer can never have more in flight than the NIC has buffers for.
//!
//! Every received frag pins one buffer of the binding (a niov, or a zcrx area buffer) until
//! the tool gives it back, and segments TCP holds out of order pin theirs while they wait. When
//! the socket's receive buffer (and so the window it advertises) is larger than what the
//! buffers can hold, the NIC runs out of buffers and drops; the retransmission that would fill
//! the hole finds no buffer either, and TCP, still within its receive buffer, never prunes the
//! out-of-order queue: the transfer stalls until a timeout ends it (measured on the software
//! devmem NIC with a 256 KiB dmabuf and the default `tcp_rmem`).
//!
//! The plan assumes the worst packing a driver may use, one segment per buffer, so the payload
//! the buffers can hold is `buffers × min(buffer size, MSS)`; the socket may hold half of that
//! (the other half covers segments in flight, the ring and frags being read). `SO_RCVBUF` is
//! the half of that again, because the kernel doubles what it is given. When the kernel's
//! largest automatic receive buffer (`tcp_rmem[2]`) already fits, nothing is set and
//! autotuning stays on.
//!
//! Pure policy: the caller reads the MTU and `tcp_rmem` and sets the option.

/// What the server does with `SO_RCVBUF` before `listen`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RcvbufPlan {
    /// Bytes to pass to `setsockopt(SOL_SOCKET, SO_RCVBUF)`; `None` = leave the kernel's
    /// default (autotuning).
    pub bytes: Option<u32>,
    /// One sentence for the log and the JSON summary.
    pub reason: String,
    /// `--rcvbuf` gave the size (rather than the binding it was sized from).
    pub requested: bool,
}

/// The smallest `SO_RCVBUF` the plan sets: room for a few segments, so a tiny binding still
/// makes progress (bytes).
pub const MIN_RCVBUF: u64 = 16 * 1024;

/// TCP payload of one full segment at `mtu` bytes: the MTU less IPv6 (40) and TCP with
/// timestamps (32) headers, the larger of the two families, so the estimate stays on the
/// small side. At least 536 (the IPv4 minimum MSS).
pub(crate) fn mss_for_mtu(mtu: u32) -> u32 {
    mtu.saturating_sub(72).max(536)
}

/// The plan for a binding of `buffers` buffers of `buf_size` bytes each, segments of `mss`
/// payload bytes, and the kernel's `tcp_rmem[2]` (`rmem_max`, bytes; `None` when it could not
/// be read). `requested`: `--rcvbuf` (`Some(0)` = leave the kernel's default).
pub fn plan(
    requested: Option<u64>,
    buffers: u64,
    buf_size: u32,
    mss: u32,
    rmem_max: Option<u64>,
) -> RcvbufPlan {
    if let Some(n) = requested {
        let (bytes, reason) = match n {
            0 => (
                None,
                "left at the kernel's default (--rcvbuf 0)".to_string(),
            ),
            n => {
                let set = u32::try_from(n).unwrap_or(u32::MAX);
                (Some(set), format!("SO_RCVBUF {set}, from --rcvbuf"))
            }
        };
        return RcvbufPlan {
            bytes,
            reason,
            requested: true,
        };
    }
    let payload = buffers.saturating_mul(u64::from(buf_size.min(mss)));
    let set = (payload / 4).max(MIN_RCVBUF);
    let holds = format!(
        "the binding holds {buffers} buffers of {buf_size} bytes, at least {payload} bytes of \
         TCP payload at one {mss}-byte segment per buffer"
    );
    match rmem_max {
        Some(max) if set.saturating_mul(2) >= max => RcvbufPlan {
            requested: false,
            bytes: None,
            reason: format!(
                "left at the kernel's default: {holds}, more than the largest automatic receive \
                 buffer (tcp_rmem max {max})"
            ),
        },
        _ => RcvbufPlan {
            requested: false,
            bytes: Some(u32::try_from(set).unwrap_or(u32::MAX)),
            reason: format!(
                "{holds}; SO_RCVBUF {set} keeps the receive buffer (the kernel doubles it) and \
                 so the TCP window within half of that"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_dmabuf_caps_the_window_at_a_quarter_of_its_worst_case_payload() {
        // 256 KiB of 4 KiB niovs, 1500-byte MTU: 64 buffers × 1428 bytes.
        let p = plan(None, 64, 4096, mss_for_mtu(1500), Some(6 << 20));
        assert_eq!(p.bytes, Some(22848));
        assert!(
            p.reason.contains("64 buffers of 4096 bytes"),
            "{}",
            p.reason
        );
        assert!(p.reason.contains("91392 bytes"), "{}", p.reason);
    }

    #[test]
    fn large_niovs_count_one_segment_each() {
        // 62.5 MiB of 64 KiB niovs: 1000 buffers, yet only 1000 segments of payload.
        let p = plan(None, 1000, 65536, 1428, Some(6 << 20));
        assert_eq!(p.bytes, Some(1000 * 1428 / 4));
    }

    #[test]
    fn the_default_dmabuf_leaves_autotuning_on() {
        // 16000 niovs of 4 KiB: 22.8 MB of payload, the set value exceeds tcp_rmem max / 2.
        let p = plan(None, 16000, 4096, 1428, Some(6 << 20));
        assert_eq!(p.bytes, None);
        assert!(p.reason.contains("tcp_rmem max 6291456"), "{}", p.reason);
    }

    #[test]
    fn an_unreadable_tcp_rmem_still_sizes() {
        assert!(plan(None, 16000, 4096, 1428, None).bytes.is_some());
    }

    #[test]
    fn tiny_bindings_get_the_minimum() {
        assert_eq!(plan(None, 4, 4096, 1428, Some(6 << 20)).bytes, Some(16384));
    }

    #[test]
    fn the_option_wins() {
        assert_eq!(plan(Some(0), 64, 4096, 1428, Some(6 << 20)).bytes, None);
        let p = plan(Some(1 << 20), 64, 4096, 1428, Some(6 << 20));
        // The log line "receive buffer: ..." names the value (before: only "--rcvbuf").
        assert_eq!(
            (p.bytes, p.reason.as_str()),
            (Some(1 << 20), "SO_RCVBUF 1048576, from --rcvbuf")
        );
        assert!(p.requested);
    }

    #[test]
    fn mss_is_the_mtu_less_ipv6_and_tcp_headers() {
        assert_eq!(mss_for_mtu(1500), 1428);
        assert_eq!(mss_for_mtu(9000), 8928);
        assert_eq!(mss_for_mtu(100), 536);
    }
}
