//! io_uring zcrx policy: which kernel answers mean "zcrx cannot run here" (a skip, exit 4)
//! rather than a failure, and how large the refill ring and its region are. The kernel calls
//! these decisions are about live in [`super`] (ring setup, the opcode probe, registration)
//! and [`crate::sys::uring_mem`]; this module makes none itself: it reads
//! `kernel.io_uring_disabled` from `/proc` and calls those probes (`require_recv_zc`,
//! `require_net_admin`) to decide on their answers.

use io_uring::opcode;

use super::{ZcrxParams, ZcrxRing, ZcrxTarget, IO_URING_DISABLED_PATH};
use crate::caps::{classify, Missing, Op};
use crate::error::{Error, Result};
use crate::sys::uapi::{io_uring_zcrx_rqe, ZCRX_RQ_MAX_ENTRIES};
use crate::sys::uring_mem::probe_zcrx_register;

/// Reads `kernel.io_uring_disabled` and turns 2 (disabled for everyone) into a skip. A missing
/// file (kernels before 6.6) or 0/1 pass; 1 surfaces later as `EPERM` from `io_uring_setup`.
///
/// Errors: `Error::Skip` naming the sysctl.
pub(crate) fn check_io_uring_enabled() -> Result<()> {
    match read_io_uring_disabled() {
        Some(2) => Err(Error::Skip(Missing::IoUringDisabled {
            path: IO_URING_DISABLED_PATH,
        })),
        _ => Ok(()),
    }
}

fn read_io_uring_disabled() -> Option<u64> {
    std::fs::read_to_string(IO_URING_DISABLED_PATH)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Maps an `io_uring_setup` refusal that means "io_uring cannot run here" to a skip: `EPERM`
/// (io_uring disabled by `kernel.io_uring_disabled`, or a seccomp/LSM policy), `ENOSYS` (kernel
/// without io_uring), `EINVAL` (kernel older than the flags zcrx needs). Others stay.
pub fn setup_refusal(e: Error) -> Error {
    let disabled = read_io_uring_disabled();
    classify(e, Op::IoUringSetup { disabled })
}

/// Skips without `IORING_OP_RECV_ZC` (58, 6.15+), asking the kernel
/// ([`super::supports_recv_zc`]).
///
/// Errors: `Error::Skip` when unsupported; `Error::Sys` when the probe fails.
pub fn require_recv_zc(ring: &ZcrxRing) -> Result<()> {
    let missing = Missing::RecvZc {
        opcode: opcode::RecvZc::CODE,
    };
    super::supports_recv_zc(ring)?
        .then_some(())
        .ok_or(Error::Skip(missing))
}

/// Learns before anything is changed whether registration will be refused for lack of
/// `CAP_NET_ADMIN`, with a request every kernel refuses ([`probe_zcrx_register`]).
///
/// Errors: `Error::Skip` on `EPERM`.
pub fn require_net_admin(ring: &ZcrxRing) -> Result<()> {
    match probe_zcrx_register(ring) {
        libc::EPERM => Err(classify(
            Error::sys("io_uring_register(IORING_REGISTER_ZCRX_IFQ)", libc::EPERM),
            Op::ZcrxRegister {
                nodev: false,
                rx_buf_len: None,
            },
        )),
        _ => Ok(()),
    }
}

impl ZcrxParams {
    /// Refill entries for an area of `area_len` bytes in buffers of `buf_len` bytes: one per
    /// buffer, rounded up to a power of two, clamped to 64..=[`ZCRX_RQ_MAX_ENTRIES`].
    pub(crate) fn rq_entries_for(area_len: usize, buf_len: usize) -> u32 {
        let bufs = (area_len / buf_len.max(1)).max(1);
        let n = u32::try_from(bufs)
            .unwrap_or(ZCRX_RQ_MAX_ENTRIES)
            .min(ZCRX_RQ_MAX_ENTRIES);
        n.next_power_of_two().clamp(64, ZCRX_RQ_MAX_ENTRIES)
    }

    /// Bytes of the refill region for `rq_entries`: the entries plus one page for the head and
    /// tail words, rounded up to whole pages (as iou-zcrx sizes it).
    pub fn refill_region_len(rq_entries: u32, page_size: usize) -> usize {
        let raw = rq_entries as usize * std::mem::size_of::<io_uring_zcrx_rqe>() + page_size;
        raw.div_ceil(page_size) * page_size
    }
}

/// Maps a registration refusal that means "this host, kernel or device cannot do zcrx" to a
/// skip; anything else (a failure) stays:
/// - `EPERM`: no `CAP_NET_ADMIN`;
/// - `EOPNOTSUPP`: the device or queue has no io_uring memory-provider support (veth, lo,
///   virtio_net on 6.18), or, with `rx_buf_len`, no large-buffer support;
/// - `EINVAL` with `ZCRX_REG_NODEV`: the kernel has no device-less mode (6.18);
/// - `EINVAL` with `rx_buf_len`: the kernel reserves that field (before 7.0) or refuses the
///   value.
pub fn register_refusal(e: Error, p: &ZcrxParams) -> Error {
    let op = Op::ZcrxRegister {
        nodev: p.target == ZcrxTarget::NoDev,
        rx_buf_len: p.rx_buf_len,
    };
    classify(e, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refill_sizes_follow_the_area() {
        assert_eq!(ZcrxParams::rq_entries_for(32 << 20, 4096), 8192);
        assert_eq!(
            ZcrxParams::rq_entries_for(1 << 30, 4096),
            ZCRX_RQ_MAX_ENTRIES
        );
        assert_eq!(ZcrxParams::rq_entries_for(4 << 20, 2 << 20), 64);
        assert_eq!(ZcrxParams::rq_entries_for(3 * 4096, 4096), 64);
        assert_eq!(ZcrxParams::refill_region_len(8192, 4096), 8192 * 16 + 4096);
        assert_eq!(ZcrxParams::refill_region_len(100, 4096), 8192);
    }

    #[test]
    fn refusals_that_mean_cannot_here_are_skips() {
        let dev = ZcrxParams {
            target: ZcrxTarget::Device {
                ifname: "vx0".into(),
                ifindex: 5,
                rxq: 0,
            },
            area_len: 1 << 20,
            hugetlb: false,
            rq_entries: 256,
            rx_buf_len: None,
        };
        let big = ZcrxParams {
            rx_buf_len: Some(16384),
            ..dev.clone()
        };
        let nodev = ZcrxParams {
            target: ZcrxTarget::NoDev,
            ..dev.clone()
        };
        let big_nodev = ZcrxParams {
            rx_buf_len: Some(16384),
            ..nodev.clone()
        };
        let sys = |errno| Error::sys("io_uring_register(IORING_REGISTER_ZCRX_IFQ)", errno);
        // Each "cannot here" refusal is a skip (exit 4) whose reason names the cause and keeps
        // the kernel's errno.
        let skips: [(i32, &ZcrxParams, &str); 6] = [
            (libc::EOPNOTSUPP, &dev, "device/queue does not support io_uring zcrx: "),
            (
                libc::EOPNOTSUPP,
                &big,
                "device/queue does not support io_uring zcrx with rx_buf_len 16384: ",
            ),
            (
                libc::EOPNOTSUPP,
                &big_nodev,
                "this kernel's device-less zcrx (ZCRX_REG_NODEV) does not support rx_buf_len 16384: ",
            ),
            (libc::EPERM, &dev, "io_uring zcrx registration needs CAP_NET_ADMIN: "),
            (libc::EINVAL, &big, "kernel refused rx_buf_len 16384: kernels before 7.0"),
            (libc::EINVAL, &nodev, "kernel has no ZCRX_REG_NODEV"),
        ];
        for (errno, params, reason) in skips {
            let e = register_refusal(sys(errno), params);
            assert_eq!(e.exit_code(), 4, "{e}");
            let text = e.to_string();
            assert!(text.starts_with(&format!("skip: {reason}")), "{text}");
            assert!(text.contains("IORING_REGISTER_ZCRX_IFQ"), "{text}");
        }
        // A plain EINVAL or ENODEV on a device queue is a failure (exit 1), passed through.
        for errno in [libc::EINVAL, libc::ENODEV] {
            let e = register_refusal(sys(errno), &dev);
            assert_eq!(e.exit_code(), 1, "{e}");
            assert_eq!(e.errno(), Some(errno));
        }
    }
}
