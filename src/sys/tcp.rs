//! TCP socket options for the figures of a flow: `TCP_INFO` (include/uapi/linux/tcp.h
//! `struct tcp_info`) and `TCP_CONGESTION`, plus the sysctl files listing the congestion
//! control algorithms (`net.ipv4.tcp_available_congestion_control`,
//! `tcp_allowed_congestion_control`). Which refusal is a usage error is
//! `figures::tcp`'s (docs/kernel-interface.md#tcp_info-and-tcp_congestion).

use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::sys::socket::{getsockopt_buf, setsockopt_raw};

/// `TCP_CA_NAME_MAX` (include/net/tcp.h): a congestion control name is at most 15 bytes
/// plus NUL.
pub(crate) const TCP_CA_NAME_MAX: usize = 16;

/// The sysctl file listing the congestion control algorithms the kernel has (built in or
/// loaded), space separated.
pub const AVAILABLE_CC: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// The sysctl file listing those an unprivileged process may set.
pub const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// The byte offsets in `struct tcp_info` (include/uapi/linux/tcp.h) of the fields read. Every
/// field of the struct is a naturally aligned u8/u16/u32/u64, so they are the same on every
/// Linux ABI (x86_64, aarch64, ...). libc's musl struct stops at `tcpi_snd_wnd`, so the
/// offsets and the buffer size are ours, pinned against libc's glibc struct at compile time.
mod tcpi {
    pub(super) const STATE: usize = 0;
    pub(super) const CA_STATE: usize = 1;
    pub(super) const RETRANSMITS: usize = 2;
    pub(super) const RTO: usize = 8;
    pub(super) const SND_MSS: usize = 16;
    pub(super) const RCV_MSS: usize = 20;
    pub(super) const LOST: usize = 32;
    pub(super) const RETRANS: usize = 36;
    pub(super) const RTT: usize = 68;
    pub(super) const RTTVAR: usize = 72;
    pub(super) const SND_CWND: usize = 80;
    pub(super) const REORDERING: usize = 88;
    pub(super) const RCV_RTT: usize = 92;
    pub(super) const RCV_SPACE: usize = 96;
    pub(super) const TOTAL_RETRANS: usize = 100;
    pub(super) const BYTES_ACKED: usize = 120;
    pub(super) const BYTES_RECEIVED: usize = 128;
    pub(super) const SEGS_OUT: usize = 136;
    pub(super) const SEGS_IN: usize = 140;
    pub(super) const MIN_RTT: usize = 148;
    pub(super) const DATA_SEGS_IN: usize = 152;
    pub(super) const BYTES_RETRANS: usize = 208;
    pub(super) const REORD_SEEN: usize = 220;
    pub(super) const RCV_OOOPACK: usize = 224;
    pub(super) const SND_WND: usize = 228;
    pub(super) const RCV_WND: usize = 232;
    pub(super) const TOTAL_RTO: usize = 240;
}

/// The `getsockopt(TCP_INFO)` buffer: 6.18's `struct tcp_info` (280 bytes, also libc's glibc
/// struct size); the kernel writes `min(its size, this)`.
pub const TCP_INFO_BUF_LEN: usize = 280;

#[cfg(target_env = "gnu")]
const _: () = {
    use libc::tcp_info as T;
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(T, tcpi_state) == tcpi::STATE);
    assert!(offset_of!(T, tcpi_ca_state) == tcpi::CA_STATE);
    assert!(offset_of!(T, tcpi_retransmits) == tcpi::RETRANSMITS);
    assert!(offset_of!(T, tcpi_rto) == tcpi::RTO);
    assert!(offset_of!(T, tcpi_snd_mss) == tcpi::SND_MSS);
    assert!(offset_of!(T, tcpi_rcv_mss) == tcpi::RCV_MSS);
    assert!(offset_of!(T, tcpi_lost) == tcpi::LOST);
    assert!(offset_of!(T, tcpi_retrans) == tcpi::RETRANS);
    assert!(offset_of!(T, tcpi_rtt) == tcpi::RTT);
    assert!(offset_of!(T, tcpi_rttvar) == tcpi::RTTVAR);
    assert!(offset_of!(T, tcpi_snd_cwnd) == tcpi::SND_CWND);
    assert!(offset_of!(T, tcpi_reordering) == tcpi::REORDERING);
    assert!(offset_of!(T, tcpi_rcv_rtt) == tcpi::RCV_RTT);
    assert!(offset_of!(T, tcpi_rcv_space) == tcpi::RCV_SPACE);
    assert!(offset_of!(T, tcpi_total_retrans) == tcpi::TOTAL_RETRANS);
    assert!(offset_of!(T, tcpi_bytes_acked) == tcpi::BYTES_ACKED);
    assert!(offset_of!(T, tcpi_bytes_received) == tcpi::BYTES_RECEIVED);
    assert!(offset_of!(T, tcpi_segs_out) == tcpi::SEGS_OUT);
    assert!(offset_of!(T, tcpi_segs_in) == tcpi::SEGS_IN);
    assert!(offset_of!(T, tcpi_min_rtt) == tcpi::MIN_RTT);
    assert!(offset_of!(T, tcpi_data_segs_in) == tcpi::DATA_SEGS_IN);
    assert!(offset_of!(T, tcpi_bytes_retrans) == tcpi::BYTES_RETRANS);
    assert!(offset_of!(T, tcpi_reord_seen) == tcpi::REORD_SEEN);
    assert!(offset_of!(T, tcpi_rcv_ooopack) == tcpi::RCV_OOOPACK);
    assert!(offset_of!(T, tcpi_snd_wnd) == tcpi::SND_WND);
    assert!(offset_of!(T, tcpi_rcv_wnd) == tcpi::RCV_WND);
    assert!(offset_of!(T, tcpi_total_rto) == tcpi::TOTAL_RTO);
    assert!(size_of::<T>() == TCP_INFO_BUF_LEN);
};

/// The bytes every kernel since 2.6.x writes: `struct tcp_info` up to `tcpi_total_retrans`.
pub const TCP_INFO_BASE_LEN: usize = tcpi::TOTAL_RETRANS + 4;

/// The fields of `struct tcp_info` a network engineer reads for a receiving flow. Times are
/// microseconds, windows and spaces bytes. Fields added after the 2.6 layout are `None` when
/// the kernel's struct is too short to hold them (it copies `min(its size, ours)` and says how
/// much in `optlen`); nothing past that length is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Bytes the kernel wrote (its `struct tcp_info` size; 6.18 here: see
    /// docs/kernel-interface.md#tcp_info-and-tcp_congestion).
    pub len: usize,
    /// `tcpi_state`: `TCP_ESTABLISHED` 1, `TCP_CLOSE_WAIT` 8, ... (include/net/tcp_states.h).
    pub state: u8,
    /// `tcpi_ca_state`: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss.
    pub ca_state: u8,
    /// `tcpi_retransmits`: consecutive RTO retransmissions of the current head segment.
    pub retransmits: u8,
    /// `tcpi_rto`: retransmission timeout, µs.
    pub rto_us: u32,
    /// `tcpi_snd_mss`: MSS for sending, bytes.
    pub snd_mss: u32,
    /// `tcpi_rcv_mss`: estimated MSS of the peer's segments, bytes.
    pub rcv_mss: u32,
    /// `tcpi_lost`: segments now presumed lost.
    pub lost: u32,
    /// `tcpi_retrans`: segments now retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// `tcpi_rtt`: smoothed RTT, µs.
    pub rtt_us: u32,
    /// `tcpi_rttvar`: RTT variation, µs.
    pub rttvar_us: u32,
    /// `tcpi_snd_cwnd`: congestion window, segments.
    pub snd_cwnd: u32,
    /// `tcpi_reordering`: the reordering degree TCP currently tolerates, segments (3 by
    /// default, `net.ipv4.tcp_reordering`).
    pub reordering: u32,
    /// `tcpi_rcv_rtt`: RTT as the receiver estimates it, µs (0 until measured).
    pub rcv_rtt_us: u32,
    /// `tcpi_rcv_space`: the receive-buffer autotuning's current space estimate, bytes.
    pub rcv_space: u32,
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// `tcpi_bytes_acked` (4.1+): bytes of ours the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// `tcpi_bytes_received` (4.1+): payload bytes received in order (`rcv_nxt` advanced).
    pub bytes_received: Option<u64>,
    /// `tcpi_segs_out` (4.2+): segments sent, retransmissions and pure ACKs included.
    pub segs_out: Option<u32>,
    /// `tcpi_segs_in` (4.2+): segments received, pure ACKs included.
    pub segs_in: Option<u32>,
    /// `tcpi_min_rtt` (4.6+): minimum RTT seen recently, µs.
    pub min_rtt_us: Option<u32>,
    /// `tcpi_data_segs_in` (4.6+): segments received carrying data.
    pub data_segs_in: Option<u32>,
    /// `tcpi_bytes_retrans` (4.19+): bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// `tcpi_reord_seen` (4.19+): reordering events seen.
    pub reord_seen: Option<u32>,
    /// `tcpi_rcv_ooopack` (5.4+): out-of-order packets received.
    pub rcv_ooopack: Option<u32>,
    /// `tcpi_snd_wnd` (5.4+): the peer's advertised receive window, bytes.
    pub snd_wnd: Option<u32>,
    /// `tcpi_rcv_wnd` (6.2+): the receive window we last advertised, bytes.
    pub rcv_wnd: Option<u32>,
    /// `tcpi_total_rto` (6.7+): RTO expirations over the connection's life.
    pub total_rto: Option<u16>,
}

impl TcpInfo {
    /// Decodes the `len` bytes a `getsockopt(TCP_INFO)` wrote (`bytes` is exactly those).
    /// Fields that end past `bytes` are `None`.
    ///
    /// Errors: `Error::Decode` for fewer than [`TCP_INFO_BASE_LEN`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<TcpInfo> {
        if bytes.len() < TCP_INFO_BASE_LEN {
            return Err(Error::decode(
                "struct tcp_info",
                format!(
                    "the kernel wrote {} bytes, fewer than the {TCP_INFO_BASE_LEN} every kernel \
                     since 2.6 writes",
                    bytes.len()
                ),
            ));
        }
        fn at<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
            b.get(off..off + N)?.try_into().ok()
        }
        let u8_ = |off| at::<1>(bytes, off).map_or(0, |a| a[0]);
        let u16_ = |off| at(bytes, off).map(u16::from_ne_bytes);
        let u32_ = |off| at(bytes, off).map(u32::from_ne_bytes);
        let u64_ = |off| at(bytes, off).map(u64::from_ne_bytes);
        // The base fields are inside TCP_INFO_BASE_LEN, checked above.
        let base = |off| u32_(off).unwrap_or(0);
        Ok(TcpInfo {
            len: bytes.len(),
            state: u8_(tcpi::STATE),
            ca_state: u8_(tcpi::CA_STATE),
            retransmits: u8_(tcpi::RETRANSMITS),
            rto_us: base(tcpi::RTO),
            snd_mss: base(tcpi::SND_MSS),
            rcv_mss: base(tcpi::RCV_MSS),
            lost: base(tcpi::LOST),
            retrans: base(tcpi::RETRANS),
            rtt_us: base(tcpi::RTT),
            rttvar_us: base(tcpi::RTTVAR),
            snd_cwnd: base(tcpi::SND_CWND),
            reordering: base(tcpi::REORDERING),
            rcv_rtt_us: base(tcpi::RCV_RTT),
            rcv_space: base(tcpi::RCV_SPACE),
            total_retrans: base(tcpi::TOTAL_RETRANS),
            bytes_acked: u64_(tcpi::BYTES_ACKED),
            bytes_received: u64_(tcpi::BYTES_RECEIVED),
            segs_out: u32_(tcpi::SEGS_OUT),
            segs_in: u32_(tcpi::SEGS_IN),
            min_rtt_us: u32_(tcpi::MIN_RTT),
            data_segs_in: u32_(tcpi::DATA_SEGS_IN),
            bytes_retrans: u64_(tcpi::BYTES_RETRANS),
            reord_seen: u32_(tcpi::REORD_SEEN),
            rcv_ooopack: u32_(tcpi::RCV_OOOPACK),
            snd_wnd: u32_(tcpi::SND_WND),
            rcv_wnd: u32_(tcpi::RCV_WND),
            total_rto: u16_(tcpi::TOTAL_RTO),
        })
    }
}

/// `getsockopt(IPPROTO_TCP, TCP_INFO)` into a [`TCP_INFO_BUF_LEN`]-byte buffer,
/// decoded from the bytes the kernel wrote.
///
/// Errors: `Error::Sys` naming the call (`EOPNOTSUPP`/`ENOPROTOOPT` on a socket that is not
/// TCP); `Error::Decode` for a struct shorter than [`TCP_INFO_BASE_LEN`].
pub fn tcp_info(fd: BorrowedFd<'_>) -> Result<TcpInfo> {
    let mut buf = [0u8; TCP_INFO_BUF_LEN];
    let len = getsockopt_buf(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)
        .map_err(|e| Error::sys("getsockopt(TCP_INFO)", e))?;
    TcpInfo::from_bytes(buf.get(..len).unwrap_or(&buf))
}

/// `setsockopt(IPPROTO_TCP, TCP_CONGESTION, name, strlen(name))`: the raw errno on failure
/// (6.18: `ENOENT` for a name the kernel does not know, `EPERM` for one not in
/// [`ALLOWED_CC`] without `CAP_NET_ADMIN`, `EINVAL` for an empty name). The kernel reads at
/// most 15 bytes of the name.
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> Result<(), i32> {
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_bytes()).map(drop)
}

/// `getsockopt(IPPROTO_TCP, TCP_CONGESTION)`: the socket's congestion control algorithm.
///
/// Errors: `Error::Sys` naming the call; `Error::Decode` for a name that is not UTF-8.
pub fn congestion(fd: BorrowedFd<'_>) -> Result<String> {
    let mut buf = [0u8; TCP_CA_NAME_MAX];
    let len = getsockopt_buf(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut buf)
        .map_err(|e| Error::sys("getsockopt(TCP_CONGESTION)", e))?;
    let name = buf[..len.min(buf.len())]
        .split(|&b| b == 0)
        .next()
        .unwrap_or_default();
    std::str::from_utf8(name)
        .map(str::to_string)
        .map_err(|_| Error::decode("TCP_CONGESTION", format!("name {name:?} is not UTF-8")))
}

/// The congestion control names listed in sysctl file `path` ([`AVAILABLE_CC`] or
/// [`ALLOWED_CC`]), in the file's order.
///
/// Errors: `Error::Sys` naming the read.
pub fn congestion_list(path: &str) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("read {path}"), &e))?;
    Ok(text.split_whitespace().map(str::to_string).collect())
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// Synthetic `struct tcp_info` bytes: each field read, written at its uapi offset (x86_64)
    /// with a distinct value; the struct cut at `len`.
    fn tcp_info_bytes(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 280];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(0, &[1]); //                         tcpi_state TCP_ESTABLISHED
        put(1, &[3]); //                         tcpi_ca_state recovery
        put(2, &[2]); //                         tcpi_retransmits
        put(8, &204_000u32.to_ne_bytes()); //    tcpi_rto
        put(16, &1448u32.to_ne_bytes()); //      tcpi_snd_mss
        put(20, &1400u32.to_ne_bytes()); //      tcpi_rcv_mss
        put(32, &4u32.to_ne_bytes()); //         tcpi_lost
        put(36, &5u32.to_ne_bytes()); //         tcpi_retrans
        put(68, &61u32.to_ne_bytes()); //        tcpi_rtt
        put(72, &17u32.to_ne_bytes()); //        tcpi_rttvar
        put(80, &10u32.to_ne_bytes()); //        tcpi_snd_cwnd
        put(88, &3u32.to_ne_bytes()); //         tcpi_reordering
        put(92, &99u32.to_ne_bytes()); //        tcpi_rcv_rtt
        put(96, &65_483u32.to_ne_bytes()); //    tcpi_rcv_space
        put(100, &7u32.to_ne_bytes()); //        tcpi_total_retrans
        put(120, &1u64.to_ne_bytes()); //        tcpi_bytes_acked
        put(128, &(5u64 << 32).to_ne_bytes()); // tcpi_bytes_received
        put(136, &11u32.to_ne_bytes()); //       tcpi_segs_out
        put(140, &12u32.to_ne_bytes()); //       tcpi_segs_in
        put(148, &13u32.to_ne_bytes()); //       tcpi_min_rtt
        put(152, &14u32.to_ne_bytes()); //       tcpi_data_segs_in
        put(208, &15u64.to_ne_bytes()); //       tcpi_bytes_retrans
        put(220, &16u32.to_ne_bytes()); //       tcpi_reord_seen
        put(224, &17u32.to_ne_bytes()); //       tcpi_rcv_ooopack
        put(228, &18u32.to_ne_bytes()); //       tcpi_snd_wnd
        put(232, &19u32.to_ne_bytes()); //       tcpi_rcv_wnd
        put(240, &20u16.to_ne_bytes()); //       tcpi_total_rto
        b.truncate(len);
        b
    }

    #[test]
    fn tcp_info_fields_at_their_offsets() {
        let i = TcpInfo::from_bytes(&tcp_info_bytes(248)).unwrap();
        assert_eq!(
            i,
            TcpInfo {
                len: 248,
                state: 1,
                ca_state: 3,
                retransmits: 2,
                rto_us: 204_000,
                snd_mss: 1448,
                rcv_mss: 1400,
                lost: 4,
                retrans: 5,
                rtt_us: 61,
                rttvar_us: 17,
                snd_cwnd: 10,
                reordering: 3,
                rcv_rtt_us: 99,
                rcv_space: 65_483,
                total_retrans: 7,
                bytes_acked: Some(1),
                bytes_received: Some(5 << 32),
                segs_out: Some(11),
                segs_in: Some(12),
                min_rtt_us: Some(13),
                data_segs_in: Some(14),
                bytes_retrans: Some(15),
                reord_seen: Some(16),
                rcv_ooopack: Some(17),
                snd_wnd: Some(18),
                rcv_wnd: Some(19),
                total_rto: Some(20),
            }
        );
    }

    #[test]
    fn a_shorter_struct_leaves_later_fields_out() {
        // A 4.19-era struct ends after tcpi_reord_seen (224 bytes): later fields are None,
        // although our buffer would have held zeros there.
        let i = TcpInfo::from_bytes(&tcp_info_bytes(224)).unwrap();
        assert_eq!(
            (i.len, i.reord_seen, i.rcv_ooopack, i.rcv_wnd),
            (224, Some(16), None, None)
        );
        // The 2.6 base: nothing optional.
        let i = TcpInfo::from_bytes(&tcp_info_bytes(TCP_INFO_BASE_LEN)).unwrap();
        assert_eq!(
            (i.total_retrans, i.bytes_acked, i.total_rto),
            (7, None, None)
        );
        // A field cut in half is absent, not half-read.
        let i = TcpInfo::from_bytes(&tcp_info_bytes(132)).unwrap();
        assert_eq!((i.bytes_acked, i.bytes_received), (Some(1), None));
        let e = TcpInfo::from_bytes(&tcp_info_bytes(103)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode struct tcp_info: the kernel wrote 103 bytes, fewer than the 104 every \
             kernel since 2.6 writes"
        );
    }
}
