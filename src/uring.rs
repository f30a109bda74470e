//! io_uring zero-copy receive (zcrx): the ring, the zcrx interface queue (ifq), the refill
//! ring, completion decoding and the receive loop.
//!
//! The flow follows the kernel's `iou-zcrx` selftest and `docs.kernel.org/networking/iou-zcrx.html`
//! (`docs/kernel-interface.md#io_uring-zcrx`):
//! 1. a ring with `IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN | CQE32 | CQSIZE` ([`create_ring`]);
//! 2. an area of anonymous memory (2 MiB hugepages when `rx_buf_len` exceeds the page size) and
//!    a refill region of user memory, registered with `IORING_REGISTER_ZCRX_IFQ` on one RX
//!    queue of a device, or with `ZCRX_REG_NODEV` on none ([`Zcrx::register`]);
//! 3. a multishot `IORING_OP_RECV_ZC` on the accepted TCP socket; every completion is decoded
//!    once into an [`RxEvent`] ([`Completion::decode`]): data points into the area, is
//!    validated in place by stream offset, and goes back through the refill ring
//!    ([`ZcrxRefill`]) in batches; a completion without `IORING_CQE_F_MORE` re-arms; `res == 0`
//!    is the end of the stream.
//!
//! Kernel availability: `RECV_ZC` and `IORING_REGISTER_ZCRX_IFQ` since 6.15, `rx_buf_len` since
//! 7.0, `ZCRX_REG_NODEV` after 6.18 (7.3 has it). Registration needs `CAP_NET_ADMIN`. The ABI
//! structs are this crate's (`crate::sys::uapi::io_uring_zcrx_*`, layouts asserted); raw memory and
//! the syscalls that write through pointers live in [`crate::sys::uring_mem`]. Which refusals are
//! skips, and how the refill ring is sized, is decided in `uring/policy.rs` (re-exported here).

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::stats::{RxMode, RxStats, ZcrxCounters};
use crate::sys::mmap::MappedRegion;
use crate::sys::uapi::{
    io_uring_zcrx_ifq_reg, io_uring_zcrx_rqe, IORING_ZCRX_AREA_MASK, ZCRX_REG_NODEV,
    ZCRX_RQ_MAX_ENTRIES,
};
use crate::sys::uring_mem::{
    push_recv_zc, register_zcrx_ifq, zcrx_flush_rq, RefillLayout, RefillRing,
};
use crate::validate::StreamSpec;

mod policy;
pub(crate) use policy::check_io_uring_enabled;
pub use policy::{register_refusal, require_net_admin, require_recv_zc, setup_refusal};

/// The ring type zcrx needs: 64-byte SQEs, 32-byte CQEs (`IORING_SETUP_CQE32`; the zcrx part
/// of a completion, `struct io_uring_zcrx_cqe`, is its second half).
pub type ZcrxRing = IoUring<squeue::Entry, cqueue::Entry32>;

/// `user_data` of every `RECV_ZC` SQE ("zcrx" in ASCII), checked on every completion.
pub const RECV_ZC_USER_DATA: u64 = 0x7a63_7278;

/// Where `/proc/sys/kernel/io_uring_disabled` lives (6.6+): 0 enabled, 1 only for
/// `kernel.io_uring_group` members and CAP_SYS_ADMIN, 2 disabled for everyone.
pub const IO_URING_DISABLED_PATH: &str = "/proc/sys/kernel/io_uring_disabled";

/// Default area size in pages (the iou-zcrx selftest's 8192 pages: 32 MiB with 4 KiB pages).
pub const DEFAULT_AREA_PAGES: usize = 8192;

/// Default completion-queue size in entries: one CQE per received buffer, and with
/// `DEFER_TASKRUN` one wait can post a socket's whole receive queue (a CQ of 16 ended the
/// multishot with `ENOSPC` in the VM; `docs/kernel-interface.md#zcrx-registration`).
pub const DEFAULT_CQ_ENTRIES: u32 = 4096;

/// Submission-queue size in entries (only `RECV_ZC` is ever queued, one at a time).
pub const SQ_ENTRIES: u32 = 16;

/// Consecutive `ENOSPC`/`ENOMEM` completions (without data in between) after which the
/// receive gives up.
pub const MAX_CONSECUTIVE_RETRIES: u32 = 64;

// ---------------------------------------------------------------------------------------------
// Completions
// ---------------------------------------------------------------------------------------------

/// What one `RECV_ZC` completion means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxEvent {
    /// `len` stream bytes at byte `area_off` of the area (the offset with the area id bits,
    /// `IORING_ZCRX_AREA_MASK`, cleared). The buffer belongs to user space until it is
    /// returned through the refill ring.
    Data {
        /// Byte offset in the area.
        area_off: u64,
        /// Bytes of stream data (the CQE's `res`, > 0).
        len: u32,
    },
    /// `res == 0`: the peer closed the stream; no more completions for this request.
    Eof,
    /// `res < 0`: the request failed with this positive errno.
    Err(i32),
}

/// One decoded `RECV_ZC` completion: the event and whether the multishot request goes on
/// (`IORING_CQE_F_MORE`; when absent it has ended and must be re-armed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// What happened.
    pub event: RxEvent,
    /// `IORING_CQE_F_MORE`: more completions follow for the same request.
    pub more: bool,
}

impl Completion {
    /// Decodes a `RECV_ZC` CQE: `res` (bytes or −errno), `flags` (`IORING_CQE_F_*`) and
    /// `zcrx_off`, the first `u64` of the CQE's second half (`io_uring_zcrx_cqe.off`: area id
    /// in bits 48..64, byte offset below). `area_token` is the registered area's
    /// `rq_area_token` (area id << 48): data must come from that area.
    ///
    /// Errors: `Error::Decode` (what = "io_uring_zcrx_cqe.off") for data from another area;
    /// `Error::Decode` (what = "io_uring CQE res") for `i32::MIN`, which is no negated errno
    /// (and has no positive counterpart).
    pub fn decode(res: i32, flags: u32, zcrx_off: u64, area_token: u64) -> Result<Completion> {
        let event = match res {
            r if r < 0 => RxEvent::Err(r.checked_neg().ok_or_else(|| Error::Decode {
                what: "io_uring CQE res".into(),
                detail: format!("{r} is not a negated errno"),
            })?),
            0 => RxEvent::Eof,
            r => {
                let area_bits = zcrx_off & IORING_ZCRX_AREA_MASK;
                if area_bits != area_token {
                    return Err(Error::Decode {
                        what: "io_uring_zcrx_cqe.off".into(),
                        detail: format!(
                            "0x{zcrx_off:x} names area id {} but the registered area's token is \
                             0x{area_token:x}",
                            zcrx_off >> 48
                        ),
                    });
                }
                RxEvent::Data {
                    area_off: zcrx_off & !IORING_ZCRX_AREA_MASK,
                    len: r as u32,
                }
            }
        };
        Ok(Completion {
            event,
            more: cqueue::more(flags),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Refill ring
// ---------------------------------------------------------------------------------------------

/// The refill ring, user side: returns buffers to the kernel as `io_uring_zcrx_rqe { off =
/// area_off | area_token, len }` entries.
///
/// Owns the ring memory ([`RefillRing`], whose `khead`/`ktail`/`rqes` positions come from the
/// kernel's `io_uring_zcrx_offsets`), a local tail that runs ahead of the published one
/// (entries written but not yet visible to the kernel), a cached copy of the kernel's head,
/// and a backlog for the rare case that the ring is full (the kernel takes entries only when
/// it needs buffers). Head and tail are free-running `u32`s; slot = index & (entries − 1).
///
/// [`publish`](Self::publish) makes a batch visible with one `Release` store of the tail; the
/// reader is the kernel's refill path, which loads the tail with acquire semantics.
#[derive(Debug)]
pub struct ZcrxRefill {
    ring: RefillRing,
    area_token: u64,
    entries: u32,
    /// Next index to write (local; ahead of `published` by the unpublished entries).
    tail: u32,
    /// The tail value last stored for the kernel.
    published: u32,
    /// The kernel's head as last loaded.
    head: u32,
    backlog: VecDeque<io_uring_zcrx_rqe>,
    returned: u64,
    publishes: u64,
}

impl ZcrxRefill {
    /// Takes over `ring`, starting at the tail already in memory (0 after registration).
    /// `area_token` is OR'ed into every entry's offset.
    pub fn new(ring: RefillRing, area_token: u64) -> ZcrxRefill {
        let tail = ring.load_tail();
        let head = ring.load_head();
        ZcrxRefill {
            entries: ring.layout().entries,
            ring,
            area_token,
            tail,
            published: tail,
            head,
            backlog: VecDeque::new(),
            returned: 0,
            publishes: 0,
        }
    }

    /// Ring size in entries.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The ring memory (tests play the kernel through it).
    pub fn ring(&self) -> &RefillRing {
        &self.ring
    }

    /// Free slots, reloading the kernel's head only when the cached one shows none. A head
    /// that is not within `entries` behind the tail (a misbehaving kernel) counts as a full
    /// ring, never a panic.
    fn free_slots(&mut self) -> u32 {
        let used = self.tail.wrapping_sub(self.head);
        if used < self.entries {
            return self.entries - used;
        }
        self.head = self.ring.load_head();
        self.entries
            .saturating_sub(self.tail.wrapping_sub(self.head))
    }

    fn write(&mut self, rqe: io_uring_zcrx_rqe) {
        self.ring.write_rqe(self.tail, rqe);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Queues the return of `len` bytes at `area_off` (a buffer from an [`RxEvent::Data`]).
    /// Written into the ring right away when there is room (not yet visible to the kernel),
    /// else kept in the backlog; either way it is published by a later
    /// [`publish`](Self::publish).
    pub fn push(&mut self, area_off: u64, len: u32) {
        let rqe = io_uring_zcrx_rqe {
            off: (area_off & !IORING_ZCRX_AREA_MASK) | self.area_token,
            len,
            __pad: 0,
        };
        if self.backlog.is_empty() && self.free_slots() > 0 {
            self.write(rqe);
        } else {
            self.backlog.push_back(rqe);
        }
    }

    /// Entries queued but not yet visible to the kernel (written or in the backlog).
    pub fn unpublished(&self) -> usize {
        self.tail.wrapping_sub(self.published) as usize + self.backlog.len()
    }

    /// Entries waiting in the backlog for ring space; for tests (test builds and the `testing`
    /// feature only).
    #[cfg(any(test, feature = "testing"))]
    #[cfg(test)]
    pub(crate) fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Moves backlog entries into free slots, then publishes every written entry with one
    /// `Release` store of the tail (none when nothing is new). Returns how many entries became
    /// visible to the kernel.
    pub fn publish(&mut self) -> u32 {
        while !self.backlog.is_empty() && self.free_slots() > 0 {
            if let Some(rqe) = self.backlog.pop_front() {
                self.write(rqe);
            }
        }
        let n = self.tail.wrapping_sub(self.published);
        if n > 0 {
            // Release: the kernel (zcrx refill path, acquire load of the tail) must see every
            // entry written above before it sees the new tail.
            self.ring.store_tail(self.tail);
            self.published = self.tail;
            self.returned += u64::from(n);
            self.publishes += 1;
        }
        n
    }

    /// Entries published so far (buffers returned).
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// Tail stores made so far (one per non-empty [`publish`](Self::publish)).
    pub fn publishes(&self) -> u64 {
        self.publishes
    }
}

// ---------------------------------------------------------------------------------------------
// Ring setup and skips
// ---------------------------------------------------------------------------------------------

/// How to build the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingParams {
    /// Submission-queue entries.
    pub sq_entries: u32,
    /// Completion-queue entries (`IORING_SETUP_CQSIZE`).
    pub cq_entries: u32,
    /// `IORING_SETUP_DEFER_TASKRUN`: required by zcrx; `false` only to observe the kernel's
    /// refusal (`EINVAL` at registration).
    pub defer_taskrun: bool,
}

impl Default for RingParams {
    /// [`SQ_ENTRIES`], [`DEFAULT_CQ_ENTRIES`], `DEFER_TASKRUN` on.
    fn default() -> Self {
        RingParams {
            sq_entries: SQ_ENTRIES,
            cq_entries: DEFAULT_CQ_ENTRIES,
            defer_taskrun: true,
        }
    }
}

/// Creates the zcrx ring: `IORING_SETUP_SINGLE_ISSUER | CQE32 | CQSIZE`, plus `DEFER_TASKRUN`
/// unless `p.defer_taskrun` is false. The calling thread must be the one that submits and
/// waits (`SINGLE_ISSUER`). `DEFER_TASKRUN` since 6.1, `CQE32` since 5.19.
///
/// Errors: `Error::Sys` naming `io_uring_setup` and the flags; [`setup_refusal`] turns the
/// "cannot here" answers into skips.
pub fn create_ring(p: &RingParams) -> Result<ZcrxRing> {
    let mut b = IoUring::<squeue::Entry, cqueue::Entry32>::builder();
    b.setup_single_issuer().setup_cqsize(p.cq_entries);
    if p.defer_taskrun {
        b.setup_defer_taskrun();
    }
    let defer = if p.defer_taskrun {
        "DEFER_TASKRUN|"
    } else {
        ""
    };
    b.build(p.sq_entries).map_err(|e| {
        Error::io(
            format!(
                "io_uring_setup({} SQ / {} CQ entries, SINGLE_ISSUER|{defer}CQE32|CQSIZE)",
                p.sq_entries, p.cq_entries,
            ),
            &e,
        )
    })
}

/// Asks the kernel which opcodes it has (`IORING_REGISTER_PROBE`): whether it knows
/// `IORING_OP_RECV_ZC` (58, 6.15+).
///
/// Errors: `Error::Sys` when the probe fails.
pub fn supports_recv_zc(ring: &ZcrxRing) -> Result<bool> {
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| Error::io("io_uring_register(IORING_REGISTER_PROBE)", &e))?;
    Ok(probe.is_supported(opcode::RecvZc::CODE))
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

/// What the ifq is registered on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZcrxTarget {
    /// RX queue `rxq` of the device `ifname` (ifindex `ifindex`).
    Device {
        /// Interface name, for messages.
        ifname: String,
        /// Interface index (`if_idx`).
        ifindex: u32,
        /// RX queue index (`if_rxq`).
        rxq: u32,
    },
    /// No device: `ZCRX_REG_NODEV` (`if_idx` and `if_rxq` 0); the kernel copies received data
    /// into the area (a test mode of newer kernels; 7.3 has it, 6.18 answers `EINVAL`).
    NoDev,
}

impl std::fmt::Display for ZcrxTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZcrxTarget::Device {
                ifname,
                ifindex,
                rxq,
            } => write!(f, "{ifname} (ifindex {ifindex}) rx queue {rxq}"),
            ZcrxTarget::NoDev => write!(f, "no device (ZCRX_REG_NODEV)"),
        }
    }
}

/// What to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcrxParams {
    /// Device queue or no device.
    pub target: ZcrxTarget,
    /// Area size in bytes: a multiple of the page size, or of 2 MiB with `hugetlb`.
    pub area_len: usize,
    /// Back the area with 2 MiB hugepages (`MAP_HUGETLB`), as large `rx_buf_len`s need.
    pub hugetlb: bool,
    /// Refill ring entries to ask for (the kernel rounds up to a power of two; at most
    /// [`ZCRX_RQ_MAX_ENTRIES`]).
    pub rq_entries: u32,
    /// `rx_buf_len` in bytes (7.0+); `None` = 0 = the kernel's default (the page size).
    pub rx_buf_len: Option<u32>,
}

/// A registered zcrx ifq with its ring, refill ring and area.
///
/// Field order is drop order and enforces the lifetimes: the ring goes first (closing it
/// cancels the receive and unregisters the ifq, releasing the device queue), then the refill
/// ring's region, then the area. The kernel pins both regions until the ifq is gone, so
/// unmapping them after the ring's fd is closed is sound.
pub struct Zcrx {
    ring: ZcrxRing,
    refill: ZcrxRefill,
    area: MappedRegion,
    zcrx_id: u32,
    area_token: u64,
    rx_buf_len: u32,
    target: ZcrxTarget,
}

impl std::fmt::Debug for Zcrx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zcrx")
            .field("target", &self.target)
            .field("zcrx_id", &self.zcrx_id)
            .field("area_token", &format_args!("0x{:x}", self.area_token))
            .field("area", &self.area)
            .field("refill", &self.refill)
            .field("rx_buf_len", &self.rx_buf_len)
            .finish_non_exhaustive()
    }
}

impl Zcrx {
    /// Maps the area and the refill region and registers the ifq on `ring`
    /// (`IORING_REGISTER_ZCRX_IFQ`, `docs/kernel-interface.md#zcrx-registration`), checks what
    /// the kernel wrote back (refill offsets inside the region, area token in the high 16 bits)
    /// and takes ownership of the ring. Available since 6.15.
    ///
    /// Errors: `Error::Usage` for an area that is not a page (or 2 MiB) multiple or
    /// `rq_entries` out of range; `Error::Sys` for `mmap` (ENOMEM with hugetlb = hugepage pool
    /// short) and for the registration (EPERM, EINVAL, ENODEV, EOPNOTSUPP, ...; see
    /// [`register_refusal`] for which mean "cannot here"); `Error::Decode` for offsets or a
    /// token the kernel should not have written.
    pub fn register(ring: ZcrxRing, p: &ZcrxParams) -> Result<Zcrx> {
        let page = crate::sys::page_size();
        let unit = if p.hugetlb {
            crate::sys::uapi::HUGEPAGE_2M
        } else {
            page
        };
        if p.area_len == 0 || p.area_len % unit != 0 {
            return Err(Error::Usage(format!(
                "zcrx area of {} bytes is not a non-zero multiple of {unit} bytes",
                p.area_len
            )));
        }
        if p.rq_entries == 0 || p.rq_entries > ZCRX_RQ_MAX_ENTRIES {
            return Err(Error::Usage(format!(
                "zcrx refill ring of {} entries (expected 1..={ZCRX_RQ_MAX_ENTRIES})",
                p.rq_entries
            )));
        }
        let area = MappedRegion::map_anon(p.area_len, p.hugetlb)?;
        let region_len = ZcrxParams::refill_region_len(p.rq_entries.next_power_of_two(), page);
        let region = MappedRegion::map_anon(region_len, false)?;
        // Rebound after the regions so that every early return below drops (closes) the ring,
        // which unregisters the ifq, before the regions are unmapped: a parameter would be
        // dropped after all locals.
        let ring = ring;
        let (if_idx, if_rxq, flags) = match &p.target {
            ZcrxTarget::Device { ifindex, rxq, .. } => (*ifindex, *rxq, 0),
            ZcrxTarget::NoDev => (0, 0, ZCRX_REG_NODEV),
        };
        let mut reg = io_uring_zcrx_ifq_reg {
            if_idx,
            if_rxq,
            rq_entries: p.rq_entries,
            flags,
            rx_buf_len: p.rx_buf_len.unwrap_or(0),
            ..Default::default()
        };
        let buf_len = p.rx_buf_len.map(|l| format!(", rx_buf_len {l}"));
        let call = format!(
            "io_uring_register(IORING_REGISTER_ZCRX_IFQ) on {}{}",
            p.target,
            buf_len.unwrap_or_default()
        );
        let out = register_zcrx_ifq(&ring, &mut reg, &area, &region, &call)?;
        // From here on, returning an error drops `ring` first (see above), then the regions.
        if out.area_token & !IORING_ZCRX_AREA_MASK != 0 {
            return Err(Error::Decode {
                what: "io_uring_zcrx_area_reg.rq_area_token".into(),
                detail: format!("0x{:x} has bits below bit 48", out.area_token),
            });
        }
        let layout = RefillLayout {
            head: reg.offsets.head,
            tail: reg.offsets.tail,
            rqes: reg.offsets.rqes,
            entries: reg.rq_entries,
        };
        // Checked before `region` moves into the refill ring: a refusal inside
        // `RefillRing::new` would unmap the region while the ring is still open.
        layout.check(region.len())?;
        let refill = ZcrxRefill::new(RefillRing::new(region, layout)?, out.area_token);
        Ok(Zcrx {
            ring,
            refill,
            area,
            zcrx_id: reg.zcrx_id,
            area_token: out.area_token,
            rx_buf_len: reg.rx_buf_len,
            target: p.target.clone(),
        })
    }

    /// The id the kernel gave the ifq (`sqe.zcrx_ifq_idx`).
    pub fn zcrx_id(&self) -> u32 {
        self.zcrx_id
    }

    /// Refill ring entries (as the kernel rounded them).
    pub fn rq_entries(&self) -> u32 {
        self.refill.entries()
    }

    /// `rx_buf_len` as the kernel wrote it back (0 = default).
    pub fn rx_buf_len(&self) -> u32 {
        self.rx_buf_len
    }

    /// Area size in bytes.
    pub fn area_len(&self) -> usize {
        self.area.len()
    }

    /// Whether the area uses 2 MiB hugepages.
    pub(crate) fn area_is_hugetlb(&self) -> bool {
        self.area.is_hugetlb()
    }

    /// What the ifq is registered on.
    pub fn target(&self) -> &ZcrxTarget {
        &self.target
    }

    fn arm(&mut self, sock: BorrowedFd<'_>, len: u32, flow: usize) -> Result<()> {
        push_recv_zc(
            &mut self.ring,
            sock,
            self.zcrx_id,
            len,
            flow_user_data(flow),
        )?;
        self.ring
            .submit()
            .map(drop)
            .map_err(|e| Error::io("io_uring_enter(submit RECV_ZC)", &e))
    }

    /// Receives the TCP stream on `sock` (already accepted) until the peer closes: arms a
    /// multishot `RECV_ZC`, validates (`cfg.validate`) or writes to `out` every chunk
    /// in place, returns chunks through the refill ring in batches, re-arms after a completion
    /// without `IORING_CQE_F_MORE`. `stop` (a signal number, 0 = go on) and
    /// `cfg.idle_timeout` are checked every `cfg.poll_tick`. Diagnostics go to `log`.
    ///
    /// Returns the counters also when the run fails. Buffers still queued are published
    /// before returning.
    ///
    /// # Errors
    /// - `Error::Sys`: `io_uring_enter` failed; a completion carried an errno other than the
    ///   retried `ENOSPC`/`ENOMEM` (named as `"RECV_ZC completion"`); writing the payload.
    /// - `Error::Failure`: more than [`MAX_CONSECUTIVE_RETRIES`] `ENOSPC`/`ENOMEM` in a row;
    ///   validation mismatches (after the stream ended).
    /// - `Error::Bounds`: a completion outside the area. `Error::Decode`: a completion of
    ///   another area or request.
    /// - `Error::Timeout`: no data for `idle_timeout`. `Error::Interrupted`: `stop` was set.
    pub fn receive_logged<W: Write>(
        &mut self,
        sock: BorrowedFd<'_>,
        cfg: &ZcrxRxConfig,
        stop: &AtomicI32,
        out: &mut W,
        log: &mut dyn Write,
    ) -> (RxStats, Result<()>) {
        let (stats, own) = self.receive_flow(sock, cfg, stop, out, log);
        let result = own.and_then(|()| stats.validation_result());
        (stats, result)
    }

    /// [`receive_logged`](Self::receive_logged) for a receive whose verdict is decided from
    /// its facts (`crate::verdict`): the result is the connection's own (the loop's error,
    /// a stop, or `Ok`); mismatches are only in the counters.
    ///
    /// # Errors
    /// As [`receive_logged`](Self::receive_logged), without the validation mismatches.
    pub(crate) fn receive_flow<W: Write>(
        &mut self,
        sock: BorrowedFd<'_>,
        cfg: &ZcrxRxConfig,
        stop: &AtomicI32,
        out: &mut W,
        log: &mut dyn Write,
    ) -> (RxStats, Result<()>) {
        let c = match ChunkConsumer::new(cfg, out, log) {
            Ok(c) => c,
            Err(e) => return (RxStats::new(RxMode::Zcrx), Err(e)),
        };
        let mut flows = [self.flow_rx(sock, c)];
        let mut ifq = ZcrxCounters::default();
        let result = self.run(&mut flows, stop, &mut ifq, &mut NoObserver);
        self.refill.publish();
        let [f] = flows;
        f.c.finish(f.result.unwrap_or(Ok(())).and(result), &self.refill)
    }

    /// Receives several TCP streams (`flows`, flow `j` on `flows[j].sock` with its own
    /// settings, e.g. its own stream to validate) on this one ifq at once: one multishot
    /// `RECV_ZC` per socket (flow `j`'s completions carry `user_data`
    /// [`RECV_ZC_USER_DATA`]` | j << 32`), the loop of [`receive_logged`](Self::receive_logged)
    /// over all of them, the payload discarded unless validated. Each flow ends on its own
    /// (end of stream, or its own failure, which `observer` hears of at once); the loop ends
    /// when every flow has, or when `stop` is set (each flow still open then ends with
    /// `Error::Interrupted`). After every batch of completions `observer` gets each flow's
    /// bytes so far. The chunks of a flow that already ended go back unread.
    ///
    /// Returns each flow's counters and own result (flow order; mismatches are in the
    /// counters, `crate::verdict` decides) and the ifq's own counters: the
    /// buffers it returned, its refill publishes, flushes and waits (in the flows' counters
    /// these are 0: they belong to the ifq, not to one flow).
    ///
    /// Errors (per flow): as [`receive_logged`](Self::receive_logged); an error of the ring
    /// itself (`io_uring_enter`, a completion of no flow) ends every flow still open with it.
    pub fn receive_flows(
        &mut self,
        flows: &[ZcrxFlow<'_>],
        out0: Option<&mut dyn Write>,
        stop: &AtomicI32,
        observer: &mut dyn FlowsObserver,
    ) -> (Vec<(RxStats, Result<()>)>, ZcrxCounters) {
        let n = flows.len();
        let mut out0 = out0;
        let mut sinks: Vec<Box<dyn Write + '_>> = (0..n)
            .map(|j| match (j, out0.take()) {
                (0, Some(o)) => Box::new(o) as Box<dyn Write + '_>,
                _ => Box::new(std::io::sink()),
            })
            .collect();
        let mut logs: Vec<std::io::Stderr> = (0..n).map(|_| std::io::stderr()).collect();
        let mut rxs = Vec::with_capacity(n);
        let mut refused = Vec::new();
        for ((f, out), log) in flows.iter().zip(&mut sinks).zip(&mut logs) {
            match ChunkConsumer::new(f.cfg, out, log) {
                Ok(c) => rxs.push(self.flow_rx(f.sock, c)),
                Err(e) => refused.push(e),
            }
        }
        let mut ifq = ZcrxCounters::default();
        if let Some(e) = refused.into_iter().next() {
            let results = (0..n)
                .map(|_| (RxStats::new(RxMode::Zcrx), Err(e.clone())))
                .collect();
            return (results, ifq);
        }
        let result = self.run(&mut rxs, stop, &mut ifq, observer);
        self.refill.publish();
        ifq.buffers_returned = self.refill.returned();
        ifq.refill_publishes = self.refill.publishes();
        ifq.rx_buf_len = self.buf_len();
        let results = rxs
            .into_iter()
            .map(|f| {
                let r = match (f.result, &result) {
                    (Some(r), _) => r,
                    (None, Err(e)) => Err(e.clone()),
                    (None, Ok(())) => Ok(()),
                };
                let (mut stats, r) = f.c.finish(r, &self.refill);
                stats.zcrx.buffers_returned = 0;
                stats.zcrx.refill_publishes = 0;
                (stats, r)
            })
            .collect();
        (results, ifq)
    }

    /// The buffer size the kernel wrote back at registration (0 = its default, the page).
    fn buf_len(&self) -> u32 {
        match self.rx_buf_len {
            0 => crate::sys::page_size() as u32,
            l => l,
        }
    }

    fn flow_rx<'s, 'c, W: Write>(
        &self,
        sock: BorrowedFd<'s>,
        mut c: ChunkConsumer<'c, W>,
    ) -> FlowRx<'s, 'c, W> {
        c.stats.zcrx.rx_buf_len = self.buf_len();
        FlowRx {
            sock,
            len: c.cfg.limited.map_or(0, |l| l.len),
            c,
            last_data: Instant::now(),
            result: None,
        }
    }

    /// The loop over `flows`; `Err` only for what ends all of them (the ring's own errors).
    /// With one flow, the ifq's waits and flushes are that flow's counters too.
    fn run<W: Write>(
        &mut self,
        flows: &mut [FlowRx<'_, '_, W>],
        stop: &AtomicI32,
        ifq: &mut ZcrxCounters,
        observer: &mut dyn FlowsObserver,
    ) -> Result<()> {
        let n = flows.len();
        for (j, f) in flows.iter_mut().enumerate() {
            let (sock, len) = (f.sock, f.len);
            self.arm(sock, len, j)?;
            f.c.stats.zcrx.arms += 1;
        }
        let tick = flows
            .iter()
            .map(|f| f.c.cfg.poll_tick)
            .min()
            .unwrap_or(Duration::from_millis(200))
            .max(Duration::from_millis(1));
        let ts = types::Timespec::from(tick);
        let mut flush_failed = false;
        // io_uring_enter answering EINTR (or EBUSY) again and again must not spin.
        let mut backoff = Backoff::new(tick.min(crate::backoff::DEFAULT_MAX_PAUSE));
        let start = Instant::now();
        for f in flows.iter_mut() {
            f.last_data = start;
            f.c.sink.start_progress(start);
        }
        let mut bytes = vec![0u64; n];
        let mut next = vec![Next::Continue; n];
        loop {
            let mut open = 0;
            for (j, f) in flows.iter_mut().enumerate() {
                if f.result.is_some() {
                    continue;
                }
                let cfg = f.c.cfg;
                match crate::rx::check_stop_and_idle(
                    stop,
                    cfg.idle_timeout,
                    f.last_data,
                    f.c.stats.bytes,
                ) {
                    Ok(()) => open += 1,
                    Err(e) => {
                        observer.failed(j, &e);
                        f.result = Some(Err(e));
                    }
                }
            }
            if open == 0 {
                return Ok(());
            }
            for f in flows.iter_mut().filter(|f| f.result.is_none()) {
                f.c.maybe_progress(&self.refill);
            }
            let args = types::SubmitArgs::new().timespec(&ts);
            ifq.waits += 1;
            let mut transient = false;
            if let Err(e) = self.ring.submitter().submit_with_args(1, &args) {
                match crate::error::errno_of(&e) {
                    // Timed out (no completion within the tick): drain what is there.
                    libc::ETIME => {}
                    // Completions are waiting in the kernel's overflow list: drain them.
                    libc::EBUSY => transient = true,
                    libc::EINTR => {
                        for f in flows.iter_mut() {
                            f.c.stats.eintr_retries += 1;
                        }
                        transient = true;
                    }
                    errno => return Err(Error::sys("io_uring_enter(GETEVENTS)", errno)),
                }
            }
            let mut completions = 0u64;
            next.iter_mut().for_each(|x| *x = Next::Continue);
            let token = self.area_token;
            for cqe in self.ring.completion() {
                let j = flow_of(cqe.user_data(), n)?;
                completions += 1;
                let comp = Completion::decode(cqe.result(), cqe.flags(), cqe.big_cqe()[0], token)?;
                let f = &mut flows[j];
                if f.result.is_some() {
                    // A flow that ended (failed or stopped) gets nothing more: its buffer
                    // goes back unread.
                    if let RxEvent::Data { area_off, len } = comp.event {
                        self.refill.push(area_off, len);
                    }
                    continue;
                }
                match f.c.on_completion(comp, &self.area, &mut self.refill) {
                    // Eof wins over everything; Starved over Rearm.
                    Ok(Next::Continue) => {}
                    Ok(Next::Rearm) if next[j] == Next::Continue => next[j] = Next::Rearm,
                    Ok(Next::Rearm) => {}
                    Ok(Next::Starved) if next[j] != Next::Eof => next[j] = Next::Starved,
                    Ok(Next::Starved) => {}
                    Ok(Next::Eof) => next[j] = Next::Eof,
                    Err(e) => {
                        observer.failed(j, &e);
                        f.result = Some(Err(e));
                    }
                }
                if matches!(comp.event, RxEvent::Data { .. }) {
                    f.last_data = Instant::now();
                }
            }
            self.refill.publish();
            for (f, nx) in flows.iter_mut().zip(&next) {
                if *nx == Next::Eof && f.result.is_none() {
                    f.result = Some(Ok(()));
                }
            }
            if completions > 0 || !transient {
                backoff.reset();
            } else {
                backoff.pause();
            }
            let starved = flows
                .iter()
                .zip(&next)
                .any(|(f, nx)| *nx == Next::Starved && f.result.is_none());
            if starved {
                // No free buffer left: without a page pool (ZCRX_REG_NODEV) nothing takes the
                // returned ones back from the refill ring unless asked to.
                ifq.flushes += 1;
                if let Err(errno) = zcrx_flush_rq(&self.ring, self.zcrx_id) {
                    if !flush_failed {
                        flush_failed = true;
                        let log = &mut flows[0].c.sink.log;
                        crate::elog_to!(
                            log,
                            "zcrx: ZCRX_CTRL_FLUSH_RQ failed: {} (kernel without zcrx control \
                             ops?); returned buffers come back only when the kernel refills",
                            crate::error::errno_display(errno)
                        );
                    }
                }
            }
            for (j, f) in flows.iter_mut().enumerate() {
                if f.result.is_none() && matches!(next[j], Next::Rearm | Next::Starved) {
                    let (sock, len) = (f.sock, f.len);
                    self.arm(sock, len, j)?;
                    f.c.stats.zcrx.arms += 1;
                }
            }
            if n == 1 {
                flows[0].c.stats.zcrx.waits = ifq.waits;
                flows[0].c.stats.zcrx.flushes = ifq.flushes;
            }
            for (b, f) in bytes.iter_mut().zip(flows.iter()) {
                *b = f.c.stats.bytes;
            }
            observer.tick(&bytes);
        }
    }
}

/// The `user_data` of flow `flow`'s `RECV_ZC` ([`RECV_ZC_USER_DATA`] for the first).
fn flow_user_data(flow: usize) -> u64 {
    RECV_ZC_USER_DATA | ((flow as u64) << 32)
}

/// The flow of `n` a completion's `user_data` names.
///
/// Errors: `Error::Decode` for a `user_data` that is no flow's request.
fn flow_of(user_data: u64, n: usize) -> Result<usize> {
    let flow = (user_data >> 32) as usize;
    if user_data & 0xffff_ffff == RECV_ZC_USER_DATA && flow < n {
        return Ok(flow);
    }
    Err(Error::Decode {
        what: "io_uring CQE user_data".into(),
        detail: match n {
            1 => format!("0x{user_data:x} is not the RECV_ZC request (0x{RECV_ZC_USER_DATA:x})"),
            _ => format!(
                "0x{user_data:x} is not the RECV_ZC request of one of the {n} flows \
                 (0x{RECV_ZC_USER_DATA:x} | flow << 32)"
            ),
        },
    })
}

/// One flow of [`Zcrx::receive_flows`].
#[derive(Debug, Clone, Copy)]
pub struct ZcrxFlow<'a> {
    /// The accepted connection.
    pub sock: BorrowedFd<'a>,
    /// How it is received (its own stream to validate, its idle timeout).
    pub cfg: &'a ZcrxRxConfig,
}

/// What [`Zcrx::receive_flows`] tells its caller while it runs (on its thread).
pub trait FlowsObserver {
    /// After each batch of completions: each flow's bytes so far, in flow order.
    fn tick(&mut self, bytes: &[u64]);
    /// Flow `flow` ended with `error` (the loop goes on with the others).
    fn failed(&mut self, flow: usize, error: &Error);
}

/// The observer of a single-flow receive: hears nothing.
struct NoObserver;

impl FlowsObserver for NoObserver {
    fn tick(&mut self, _: &[u64]) {}
    fn failed(&mut self, _: usize, _: &Error) {}
}

/// One flow inside the loop.
struct FlowRx<'s, 'c, W: Write> {
    sock: BorrowedFd<'s>,
    /// `sqe.len` of its requests (0: unlimited).
    len: u32,
    c: ChunkConsumer<'c, W>,
    last_data: Instant,
    /// `Some` once the flow has ended (end of stream, its failure, or a stop).
    result: Option<Result<()>>,
}

// ---------------------------------------------------------------------------------------------
// The per-completion work
// ---------------------------------------------------------------------------------------------

/// Settings of [`Zcrx::receive_logged`].
#[derive(Debug, Clone, PartialEq)]
pub struct ZcrxRxConfig {
    /// `-v N` or `--seed SEED`: validate against that test stream instead of writing the
    /// payload out.
    pub validate: Option<StreamSpec>,
    /// Fail when no data arrives for this long (also before the first byte).
    pub idle_timeout: Option<Duration>,
    /// Progress line interval.
    pub progress_interval: Option<Duration>,
    /// `-V`: one log line per chunk.
    pub verbose: bool,
    /// Longest single wait before the stop flag and timeouts are looked at again.
    pub poll_tick: Duration,
    /// Publish the refill tail once this many buffers are queued (also at the end of every
    /// drained batch of completions).
    pub refill_batch: usize,
    /// `None`: every `RECV_ZC` is unlimited (`sqe.len` 0) and its end without data
    /// (`res == 0`) is the end of the stream. `Some`: each request takes at most
    /// [`LimitedRecv::len`] bytes, and its end without data re-arms it, up to
    /// [`LimitedRecv::rearms`] times, before ending the receive (iou-zcrx.c's `-o N`).
    pub limited: Option<LimitedRecv>,
    /// Log mismatches and diagnoses as they are found (the default); `false` keeps them in
    /// [`RxStats::validation`] for the end.
    pub live_diagnostics: bool,
}

/// `RECV_ZC` requests of bounded length (the kernel's `sqe.len`, 6.16+): the request ends with
/// a `res == 0` completion once it has delivered `len` bytes (or at the end of the stream:
/// the two look alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitedRecv {
    /// Bytes per request (non-zero).
    pub len: u32,
    /// How many times a request that ended is submitted again.
    pub rearms: u32,
}

impl Default for ZcrxRxConfig {
    /// No validation, no timeouts, 200 ms tick, batches of 64 entries.
    fn default() -> Self {
        ZcrxRxConfig {
            validate: None,
            idle_timeout: None,
            progress_interval: None,
            verbose: false,
            poll_tick: Duration::from_millis(200),
            refill_batch: 64,
            limited: None,
            live_diagnostics: true,
        }
    }
}

/// What the loop does after a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The multishot request goes on.
    Continue,
    /// It ended (no `IORING_CQE_F_MORE`) without end of stream: submit a new one.
    Rearm,
    /// It ended with `ENOMEM`: no free buffer in the area. Publish the returns, have the
    /// kernel take them back (`ZCRX_CTRL_FLUSH_RQ`), then submit a new one.
    Starved,
    /// End of stream.
    Eof,
}

/// Handles decoded completions: reads each chunk in place, validates it or writes it out,
/// queues its return, keeps the counters. No syscalls (tests drive it over heap regions).
pub struct ChunkConsumer<'a, W: Write> {
    cfg: &'a ZcrxRxConfig,
    /// Validation or output, CRC-32, first-byte and progress timing.
    sink: crate::rx::PayloadSink<'a, W>,
    /// Counters so far ([`RxMode::Zcrx`]).
    pub stats: RxStats,
    consecutive_retries: u32,
    /// Re-arms left of [`ZcrxRxConfig::limited`].
    rearms_left: u32,
}

impl<'a, W: Write> ChunkConsumer<'a, W> {
    /// A consumer at stream offset 0.
    ///
    /// Errors: `Error::Usage` for a `-v` period outside 2..=256.
    pub fn new(
        cfg: &'a ZcrxRxConfig,
        out: &'a mut W,
        log: &'a mut dyn Write,
    ) -> Result<ChunkConsumer<'a, W>> {
        Ok(ChunkConsumer {
            cfg,
            sink: crate::rx::PayloadSink::new(cfg.validate, "chunk", out, log)?
                .live_diagnostics(cfg.live_diagnostics),
            stats: RxStats::new(RxMode::Zcrx),
            consecutive_retries: 0,
            rearms_left: cfg.limited.map_or(0, |l| l.rearms),
        })
    }

    /// Handles one completion: data is read from `area`, validated or written out, and queued
    /// for return on `refill` (published once `refill_batch` entries are queued); `ENOSPC`
    /// (completion queue full) and `ENOMEM` (no free buffer; [`Next::Starved`]) leave the data
    /// in the socket, so the queued returns are published and the request re-armed, up to
    /// [`MAX_CONSECUTIVE_RETRIES`] in a row.
    ///
    /// Errors: `Error::Bounds` for a chunk outside the area; `Error::Sys` for a completion
    /// error or a failed payload write; `Error::Failure` after too many retries.
    pub fn on_completion(
        &mut self,
        c: Completion,
        area: &MappedRegion,
        refill: &mut ZcrxRefill,
    ) -> Result<Next> {
        match c.event {
            RxEvent::Data { area_off, len } => {
                let bytes = area.bytes(area_off, u64::from(len))?;
                self.sink.data_arrived();
                if self.cfg.verbose {
                    crate::elog_to!(
                        self.sink.log,
                        "zcrx chunk: stream offset {}, area offset 0x{area_off:x}, {len} bytes",
                        self.stats.bytes
                    );
                }
                let consumed = self.sink.consume(bytes);
                // The buffer goes back even if the payload could not be written out.
                refill.push(area_off, len);
                consumed?;
                self.stats.bytes += u64::from(len);
                self.stats.zcrx.chunks += 1;
                self.consecutive_retries = 0;
                if refill.unpublished() >= self.cfg.refill_batch.max(1) {
                    refill.publish();
                }
                Ok(if c.more { Next::Continue } else { Next::Rearm })
            }
            RxEvent::Eof if self.rearms_left > 0 => {
                // A length-limited request has delivered its bytes ([`ZcrxRxConfig::limited`]).
                self.rearms_left -= 1;
                Ok(Next::Rearm)
            }
            RxEvent::Eof => Ok(Next::Eof),
            RxEvent::Err(errno @ (libc::ENOSPC | libc::ENOMEM)) if !c.more => {
                self.stats.zcrx.retried_errors += 1;
                self.consecutive_retries += 1;
                if self.consecutive_retries > MAX_CONSECUTIVE_RETRIES {
                    return Err(Error::Failure(format!(
                        "RECV_ZC ended with {} {} times in a row without data",
                        crate::error::errno_display(errno),
                        self.consecutive_retries
                    )));
                }
                refill.publish();
                Ok(if errno == libc::ENOMEM {
                    Next::Starved
                } else {
                    Next::Rearm
                })
            }
            RxEvent::Err(errno) => Err(Error::sys("RECV_ZC completion", errno)),
        }
    }

    fn update_refill_stats(stats: &mut RxStats, refill: &ZcrxRefill) {
        stats.zcrx.buffers_returned = refill.returned();
        stats.zcrx.refill_publishes = refill.publishes();
    }

    fn maybe_progress(&mut self, refill: &ZcrxRefill) {
        self.sink
            .maybe_progress(self.cfg.progress_interval, &mut self.stats, |s| {
                Self::update_refill_stats(s, refill)
            });
    }

    /// Final counters (mismatches and the validator's notes among them) and the connection's
    /// own result: `result` of the loop, then the payload flush. Mismatches are not in it
    /// ([`RxStats::validation_result`] gives their verdict alone; `crate::verdict` the
    /// run's).
    pub fn finish(mut self, result: Result<()>, refill: &ZcrxRefill) -> (RxStats, Result<()>) {
        Self::update_refill_stats(&mut self.stats, refill);
        let result = self.sink.finish(&mut self.stats, result);
        (self.stats, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::uapi::IORING_ZCRX_AREA_SHIFT;

    const TOKEN: u64 = 3 << IORING_ZCRX_AREA_SHIFT;

    /// Flow j's requests carry RECV_ZC_USER_DATA | j << 32 (the first flow's is the one-flow
    /// receive's); anything else is no flow's.
    #[test]
    fn each_flow_has_its_own_user_data() {
        assert_eq!(flow_user_data(0), RECV_ZC_USER_DATA);
        for n in [1, 2, 64] {
            for j in 0..n {
                assert_eq!(flow_of(flow_user_data(j), n).unwrap(), j);
            }
            assert!(matches!(
                flow_of(flow_user_data(n), n),
                Err(Error::Decode { .. })
            ));
        }
        let e = flow_of(7, 1).unwrap_err().to_string();
        assert!(
            e.contains("0x7 is not the RECV_ZC request (0x7a637278)"),
            "{e}"
        );
        let e = flow_of(RECV_ZC_USER_DATA + 1, 4).unwrap_err().to_string();
        assert!(e.contains("of one of the 4 flows"), "{e}");
    }

    /// A refill ring of `entries` over a heap region, head and tail preset to `start`
    /// (as if the kernel had already consumed that many entries).
    fn refill(entries: u32, start: u32) -> ZcrxRefill {
        let layout = RefillLayout {
            head: 0,
            tail: 64,
            rqes: 128,
            entries,
        };
        let len = ZcrxParams::refill_region_len(entries, crate::sys::page_size());
        let ring = RefillRing::new(MappedRegion::heap(len).unwrap(), layout).unwrap();
        ring.kernel_store_head(start);
        // Preset the published tail the way the kernel would see it.
        let mut r = ZcrxRefill::new(ring, TOKEN);
        r.ring.store_tail(start);
        r.tail = start;
        r.published = start;
        r.head = start;
        r
    }

    /// The kernel consumes every published entry: returns them and advances the head.
    fn kernel_consume(r: &ZcrxRefill) -> Vec<(u64, u32)> {
        let ring = r.ring();
        let tail = ring.kernel_load_tail();
        let mut head = ring.load_head();
        let mut got = Vec::new();
        while head != tail {
            let e = ring.kernel_read_rqe(head);
            got.push((e.off, e.len));
            head = head.wrapping_add(1);
        }
        ring.kernel_store_head(head);
        got
    }

    #[test]
    fn entries_carry_the_area_token_and_wrap_around_u32() {
        let mut r = refill(8, u32::MAX - 2);
        for i in 0..5u64 {
            r.push(i * 4096, 4096 - i as u32);
        }
        assert_eq!(r.unpublished(), 5);
        // Nothing is visible before the Release store.
        assert_eq!(r.ring().kernel_load_tail(), u32::MAX - 2);
        assert_eq!(r.publish(), 5);
        assert_eq!(r.ring().kernel_load_tail(), 2); // wrapped past u32::MAX
        let got = kernel_consume(&r);
        let want: Vec<(u64, u32)> = (0..5u64)
            .map(|i| ((i * 4096) | TOKEN, 4096 - i as u32))
            .collect();
        assert_eq!(got, want);
        assert_eq!((r.returned(), r.publishes()), (5, 1));
    }

    #[test]
    fn slots_are_masked_into_the_ring() {
        let mut r = refill(4, 6); // slot of index 6 is 2
        r.push(0x2000, 100);
        r.publish();
        let e = r.ring().kernel_read_rqe(2);
        assert_eq!((e.off, e.len), (0x2000 | TOKEN, 100));
        // An offset that already carries area bits is re-tagged, not OR'ed twice.
        r.push(0x3000 | (5 << IORING_ZCRX_AREA_SHIFT), 1);
        r.publish();
        assert_eq!(r.ring().kernel_read_rqe(7).off, 0x3000 | TOKEN);
    }

    #[test]
    fn a_full_ring_keeps_a_backlog_until_the_kernel_consumes() {
        let mut r = refill(4, 0);
        for i in 0..6u64 {
            r.push(i << 12, 4096);
        }
        assert_eq!(r.backlog_len(), 2);
        assert_eq!(r.unpublished(), 6);
        assert_eq!(r.publish(), 4);
        assert_eq!(r.backlog_len(), 2);
        // The kernel has not moved its head: still no room.
        assert_eq!(r.publish(), 0);
        let first = kernel_consume(&r);
        assert_eq!(first.len(), 4);
        assert_eq!(r.publish(), 2);
        assert_eq!(r.backlog_len(), 0);
        let rest = kernel_consume(&r);
        assert_eq!(
            rest,
            vec![((4 << 12) | TOKEN, 4096), ((5 << 12) | TOKEN, 4096)]
        );
        assert_eq!((r.returned(), r.publishes()), (6, 2));
    }

    #[test]
    fn a_head_ahead_of_the_tail_counts_as_full_not_a_panic() {
        let mut r = refill(4, 10);
        r.ring().kernel_store_head(100); // nonsense from a broken kernel
        r.head = 5; // force a reload
        r.tail = 10;
        r.push(0, 1);
        r.push(4096, 1);
        assert!(r.unpublished() >= 2);
    }

    proptest::proptest! {
        /// Whatever a CQE carries, decoding it never panics (also with overflow checks on).
        #[test]
        fn cqe_decoding_never_panics(
            res in proptest::prelude::any::<i32>(),
            flags in proptest::prelude::any::<u32>(),
            off in proptest::prelude::any::<u64>(),
            token in proptest::prelude::any::<u64>(),
        ) {
            let _ = Completion::decode(res, flags, off, token);
        }
    }

    #[test]
    fn cqe_decoding_covers_data_eof_and_errors() {
        // res 4096, IORING_CQE_F_MORE (1 << 1), zcrx off = area 3, byte 0x5000.
        let c = Completion::decode(4096, 1 << 1, TOKEN | 0x5000, TOKEN).unwrap();
        assert_eq!(c, data(0x5000, 4096, true));
        let c = Completion::decode(0, 0, 0, TOKEN).unwrap();
        assert_eq!(c, EOF);
        let c = Completion::decode(-libc::ENOSPC, 0, 0, TOKEN).unwrap();
        assert_eq!((c.event, c.more), (RxEvent::Err(libc::ENOSPC), false));
        // i32::MIN has no positive counterpart: a decode error, not an overflow.
        let e = Completion::decode(i32::MIN, 0, 0, TOKEN).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode io_uring CQE res: -2147483648 is not a negated errno"
        );
        let c = Completion::decode(i32::MIN + 1, 0, 0, TOKEN).unwrap();
        assert_eq!(c.event, RxEvent::Err(i32::MAX));
        // Data that names another area is refused.
        let e = Completion::decode(10, 2, 0x1000, TOKEN).unwrap_err();
        assert!(matches!(&e, Error::Decode { what, .. } if what == "io_uring_zcrx_cqe.off"));
        // With area 0 the token is 0 and the offset passes unchanged.
        let c = Completion::decode(7, 0, 0x7000, 0).unwrap();
        assert_eq!(c, data(0x7000, 7, false));
    }

    /// A `RECV_ZC` data completion.
    fn data(area_off: u64, len: u32, more: bool) -> Completion {
        let event = RxEvent::Data { area_off, len };
        Completion { event, more }
    }

    const EOF: Completion = Completion {
        event: RxEvent::Eof,
        more: false,
    };

    fn area_with_pattern(period: u32, chunks: &[(u64, u64, usize)]) -> MappedRegion {
        // chunks: (area offset, stream offset, len)
        let mut area = MappedRegion::heap(64 * 1024).unwrap();
        let p = crate::validate::Pattern::new(period).unwrap();
        for &(off, stream, len) in chunks {
            let mut buf = vec![0u8; len];
            p.fill(&mut buf, stream);
            area.write_at(off, &buf).unwrap();
        }
        area
    }

    #[test]
    fn chunks_are_validated_in_stream_order_and_returned() {
        // Three chunks out of area order: stream 0..4096 at 0x8000, 4096..5000 at 0, rest at
        // 0x3000.
        let area = area_with_pattern(7, &[(0x8000, 0, 4096), (0, 4096, 904), (0x3000, 5000, 100)]);
        let mut r = refill(64, 0);
        let cfg = ZcrxRxConfig {
            validate: Some(crate::validate::StreamSpec::Periodic(7)),
            refill_batch: 2,
            ..ZcrxRxConfig::default()
        };
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let mut c = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
        assert_eq!(
            c.on_completion(data(0x8000, 4096, true), &area, &mut r)
                .unwrap(),
            Next::Continue
        );
        assert_eq!(r.ring().kernel_load_tail(), 0); // batch of 2 not reached
        assert_eq!(
            c.on_completion(data(0, 904, true), &area, &mut r).unwrap(),
            Next::Continue
        );
        assert_eq!(r.ring().kernel_load_tail(), 2); // published at the batch size
        assert_eq!(
            c.on_completion(data(0x3000, 100, false), &area, &mut r)
                .unwrap(),
            Next::Rearm
        );
        assert_eq!(c.on_completion(EOF, &area, &mut r).unwrap(), Next::Eof);
        r.publish();
        let (stats, result) = c.finish(Ok(()), &r);
        result.unwrap();
        assert_eq!(stats.mode, RxMode::Zcrx);
        assert_eq!(
            (stats.bytes, stats.validated_bytes, stats.mismatches),
            (5100, 5100, 0)
        );
        assert_eq!((stats.zcrx.chunks, stats.zcrx.buffers_returned), (3, 3));
        assert!(stats.cpu.is_some(), "CPU time over the receive");
        assert!(out.is_empty(), "validating mode writes no payload");
        let returned = kernel_consume(&r);
        assert_eq!(
            returned,
            vec![(0x8000 | TOKEN, 4096), (TOKEN, 904), (0x3000 | TOKEN, 100)]
        );
    }

    #[test]
    fn a_limited_request_is_rearmed_as_often_as_asked_then_ends() {
        // iou-zcrx -o 2: the request's end without data (res 0) re-arms twice, the third ends
        // the receive; an unlimited receive ends at the first.
        let area = area_with_pattern(7, &[(0, 0, 4096)]);
        let mut r = refill(64, 0);
        let cfg = ZcrxRxConfig {
            limited: Some(LimitedRecv {
                len: 4096,
                rearms: 2,
            }),
            ..ZcrxRxConfig::default()
        };
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let mut c = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
        assert_eq!(
            c.on_completion(data(0, 4096, true), &area, &mut r).unwrap(),
            Next::Continue
        );
        assert_eq!(c.on_completion(EOF, &area, &mut r).unwrap(), Next::Rearm);
        assert_eq!(c.on_completion(EOF, &area, &mut r).unwrap(), Next::Rearm);
        assert_eq!(c.on_completion(EOF, &area, &mut r).unwrap(), Next::Eof);
        let plain = ZcrxRxConfig::default();
        let mut c = ChunkConsumer::new(&plain, &mut out, &mut log).unwrap();
        assert_eq!(c.on_completion(EOF, &area, &mut r).unwrap(), Next::Eof);
    }

    #[test]
    fn a_corrupted_byte_is_reported_at_its_stream_offset() {
        let mut area = area_with_pattern(7, &[(0, 0, 4096)]);
        area.write_at(1000, &[0xee]).unwrap();
        let mut r = refill(64, 0);
        let cfg = ZcrxRxConfig {
            validate: Some(crate::validate::StreamSpec::Periodic(7)),
            ..ZcrxRxConfig::default()
        };
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let mut c = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
        c.on_completion(data(0, 4096, true), &area, &mut r).unwrap();
        let (stats, result) = c.finish(Ok(()), &r);
        // The consumer's own result is clean; the mismatch is a fact of its counters.
        assert!(result.is_ok());
        let e = stats.validation_result().unwrap_err();
        assert!(e.to_string().contains("stream offset 1000"), "{e}");
        assert_eq!(stats.mismatches, 1);
        let log = String::from_utf8_lossy(&log);
        assert!(
            log.contains("validation mismatch at stream offset 1000"),
            "{log}"
        );
    }

    #[test]
    fn payload_goes_out_without_validation_and_bounds_are_checked() {
        let mut area = MappedRegion::heap(8192).unwrap();
        area.write_at(4096, b"hello").unwrap();
        let mut r = refill(64, 0);
        let cfg = ZcrxRxConfig::default();
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let mut c = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
        c.on_completion(data(4096, 5, true), &area, &mut r).unwrap();
        let e = c
            .on_completion(data(8190, 5, true), &area, &mut r)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Bounds {
                    offset: 8190,
                    len: 5,
                    ..
                }
            ),
            "{e}"
        );
        let (stats, _) = c.finish(Ok(()), &r);
        assert_eq!(stats.bytes, 5);
        assert_eq!(out, b"hello");
    }

    #[test]
    fn enospc_and_enomem_rearm_a_bounded_number_of_times_and_other_errors_fail() {
        let area = MappedRegion::heap(4096).unwrap();
        let mut r = refill(64, 0);
        let cfg = ZcrxRxConfig::default();
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let mut c = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
        let err = |errno| Completion {
            event: RxEvent::Err(errno),
            more: false,
        };
        assert_eq!(
            c.on_completion(err(libc::ENOMEM), &area, &mut r).unwrap(),
            Next::Starved
        );
        for _ in 1..MAX_CONSECUTIVE_RETRIES {
            assert_eq!(
                c.on_completion(err(libc::ENOSPC), &area, &mut r).unwrap(),
                Next::Rearm
            );
        }
        let e = c
            .on_completion(err(libc::ENOSPC), &area, &mut r)
            .unwrap_err();
        assert!(e.to_string().contains("ENOSPC"), "{e}");
        let e = c
            .on_completion(err(libc::ECONNRESET), &area, &mut r)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "RECV_ZC completion: ECONNRESET (Connection reset by peer)"
        );
    }
}
