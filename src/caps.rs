//! Every capability a run can find missing — the reason of every skip (exit 4, kselftest's
//! `KSFT_SKIP`) — and the one function that sorts a kernel refusal into one
//! ([`classify`]).
//!
//! A [`Missing`] is what [`Error::Skip`] carries. Its `Display` is the sentence the user (and
//! the kernel's harness, which matches some of them) reads after `skip: `; each names what is
//! missing, where, the kernel's own answer when there is one, and what would fix it. The
//! probe, the capability report and the modes read the same values, so nothing turns a
//! sentence back into a fact.
//!
//! Policy only: the kernel calls are made in `crate::sys` and `crate::netlink`, which return
//! errnos and the kernel's answers; the callers here decide which answers mean "this host,
//! kernel or driver cannot", everything else staying a failure.

use std::fmt;
use std::path::PathBuf;

use crate::error::{errno_display, Error};
use crate::udmabuf::HugepageStatus;

/// What a run found missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    // --- memory ---
    /// The udmabuf device does not open (`ENOENT`, `ENODEV`, `ENXIO`): a kernel without
    /// `CONFIG_UDMABUF`, or the module not loaded.
    Udmabuf {
        /// The device path.
        dev: PathBuf,
        /// The `open` errno.
        errno: i32,
    },
    /// The udmabuf device refuses this process (`EACCES`, `EPERM`): not root.
    UdmabufAccess {
        /// The device path.
        dev: PathBuf,
        /// The `open` errno.
        errno: i32,
    },
    /// The dma-buf is larger than the udmabuf module's `size_limit_mb` allows.
    UdmabufSizeLimit {
        /// Bytes asked for.
        size_bytes: u64,
        /// The module parameter, MiB.
        limit_mb: u64,
    },
    /// No 2 MiB hugepage pool (a kernel without `CONFIG_HUGETLBFS`).
    HugepagePool {
        /// The missing `free_hugepages` file.
        path: PathBuf,
    },
    /// Too few free 2 MiB hugepages.
    Hugepages {
        /// Pages needed.
        needed: u64,
        /// The pool, when it could be read.
        pool: Option<HugepageStatus>,
        /// What waiting for a previous binding's teardown found, appended as it is (`; after
        /// waiting 5.0 s a previous binding still holds them: …`).
        waited: Option<String>,
    },
    /// No 2 MiB hugetlb memfds (`memfd_create(MFD_HUGETLB|MFD_HUGE_2MB)` refused).
    HugetlbMemfd {
        /// The errno (`EINVAL` or `ENODEV`).
        errno: i32,
    },
    /// No dma-buf heaps: the heap's device does not open and its directory does not exist
    /// (a kernel without `CONFIG_DMABUF_HEAPS`).
    DmaHeaps {
        /// The heap device asked for (`/dev/dma_heap/system`).
        path: PathBuf,
        /// The directory of the heaps (`/dev/dma_heap`).
        dir: PathBuf,
        /// The `open` errno.
        errno: i32,
    },
    /// The heap directory exists but has no heap of that name.
    DmaHeapName {
        /// The heap's name.
        name: String,
        /// The heap device asked for.
        path: PathBuf,
        /// The `open` errno.
        errno: i32,
        /// The heaps the host has, when the directory could be listed.
        heaps: Option<Vec<String>>,
    },
    /// The heap device refuses this process (`EACCES`, `EPERM`): not root.
    DmaHeapAccess {
        /// The heap device.
        path: PathBuf,
        /// The `open` errno.
        errno: i32,
    },
    /// The heap cannot allocate the size asked (`DMA_HEAP_IOCTL_ALLOC` answered `ENOMEM`).
    DmaHeapMemory {
        /// The heap's name.
        name: String,
        /// Bytes asked for.
        size_bytes: u64,
        /// The kernel's answer.
        answer: String,
    },
    /// More than the memory available asked of the system heap, which would not refuse it
    /// (it takes pages until the OOM killer steps in).
    DmaHeapAvailable {
        /// The heap's name.
        name: String,
        /// Bytes asked for.
        size_bytes: u64,
        /// `MemAvailable`, bytes.
        available: u64,
    },
    /// The heap's dma-buf cannot be mapped for validation.
    DmaHeapMap {
        /// The heap's name.
        name: String,
        /// The dma-buf's size, bytes.
        size_bytes: u64,
        /// The kernel's answer.
        answer: String,
    },
    /// `-b` above the largest chunk the heap builds buffers from: no scatter-gather entry can
    /// be aligned to it.
    DmaHeapChunks {
        /// The heap's name.
        name: String,
        /// The `-b` value, bytes.
        rx_page_size: u64,
        /// The heap's largest chunk, bytes.
        largest: u64,
    },
    /// bind-rx refused a heap dma-buf for a scatter-gather entry not aligned to the niov size
    /// (the heap handed out chunks smaller than `-b`).
    DmaHeapUnaligned {
        /// The heap's name.
        name: String,
        /// The `-b` value, bytes.
        rx_page_size: Option<u32>,
        /// The kernel's answer.
        answer: String,
    },

    // --- permission ---
    /// The operation needs `CAP_NET_ADMIN` (the kernel answered `EPERM`).
    NetAdmin {
        /// What needs it: `eth0: header split (tcp-data-split)`, `bind-rx`.
        what: String,
        /// The kernel's answer.
        answer: String,
    },
    /// bind-tx refused with `EPERM`.
    BindTxNotPermitted {
        /// The kernel's answer.
        answer: String,
    },
    /// `io_uring_setup` refused with `EPERM`: `kernel.io_uring_disabled`, or a seccomp/LSM
    /// policy.
    IoUringNotPermitted {
        /// `kernel.io_uring_disabled`, when readable.
        disabled: Option<u64>,
        /// The kernel's answer.
        answer: String,
    },

    // --- the driver ---
    /// The driver answered `EOPNOTSUPP` to a NIC operation.
    Driver {
        /// The interface.
        ifname: String,
        /// The operation, e.g. `header split (tcp-data-split)`.
        what: String,
        /// The kernel's answer.
        answer: String,
        /// What to do instead, after `; ` (e.g. `give -t START -q NUM`).
        hint: Option<&'static str>,
    },
    /// The driver reports no channel counts at all, so its RX queues are unknown.
    NoChannelCounts {
        /// The interface.
        ifname: String,
    },
    /// The driver reports neither combined nor rx channel counts, so no channel change can
    /// be computed.
    ChannelConfig,
    /// Fewer than 2 RX queues: queue 0 stays in RSS, so none is left to bind.
    TooFewQueues {
        /// The interface.
        ifname: String,
        /// Its RX queues.
        rx_queues: u32,
    },
    /// The driver has no queue management ops: the capability report's bind-rx with an
    /// invalid dma-buf fd was refused with `EOPNOTSUPP` (the kernel checks the device before
    /// the fd). No configuration can add them, so the probe names this first.
    NoQueueOps {
        /// The interface.
        ifname: String,
        /// The kernel's answer ([`Error::kernel_answer`]).
        answer: String,
    },
    /// bind-rx refused with `EOPNOTSUPP`: no queue management ops, no DMA device, or no
    /// support for the rx-page-size asked.
    DevmemRx {
        /// `-b`, when given.
        rx_page_size: Option<u32>,
        /// The kernel's answer.
        answer: String,
    },
    /// bind-tx refused with `EOPNOTSUPP`.
    DevmemTx {
        /// The interface.
        ifname: String,
        /// The kernel's answer.
        answer: String,
    },
    /// zcrx registration refused with `EOPNOTSUPP`.
    Zcrx {
        /// `--rx-buf-len`, when given.
        rx_buf_len: Option<u32>,
        /// Registered without a device (`--zcrx-nodev`).
        nodev: bool,
        /// The kernel's answer.
        answer: String,
    },

    // --- the kernel ---
    /// A generic netlink family is not registered.
    NetlinkFamily {
        /// `netdev`, `ethtool`.
        family: &'static str,
    },
    /// `-b`: the kernel's bind-rx policy has no rx-page-size attribute.
    RxPageSizeAttr {
        /// The `-b` value.
        size: u32,
        /// The policy's attribute numbers.
        policy: Vec<u16>,
    },
    /// bind-rx refused rx-page-size as an unknown attribute (the policy read said otherwise).
    RxPageSizeUnknown {
        /// The kernel's answer.
        answer: String,
    },
    /// `-a 1`: the kernel's bind-rx policy has no autorelease attribute.
    AutoreleaseAttr {
        /// The policy's attribute numbers.
        policy: Vec<u16>,
    },
    /// bind-rx with the autorelease attribute refused with `EBUSY`: another RX binding holds
    /// the other system-wide mode (series v10).
    AutoreleaseBusy {
        /// The kernel's answer.
        answer: String,
    },
    /// `-A`: the kernel has no `SO_DEVMEM_AUTORELEASE` (a proposal, not merged).
    SoDevmemAutorelease {
        /// The socket option number.
        optname: i32,
    },
    /// `kernel.io_uring_disabled = 2`.
    IoUringDisabled {
        /// The sysctl's path.
        path: &'static str,
    },
    /// `io_uring_setup` refused with `ENOSYS`: a kernel without io_uring.
    NoIoUring {
        /// The kernel's answer.
        answer: String,
    },
    /// `io_uring_setup` refused the ring flags zcrx needs with `EINVAL`.
    RingFlags {
        /// The kernel's answer.
        answer: String,
    },
    /// No `IORING_OP_RECV_ZC` (6.15+).
    RecvZc {
        /// The opcode.
        opcode: u8,
    },
    /// zcrx registration with `ZCRX_REG_NODEV` refused with `EINVAL` (added after 6.18).
    ZcrxNoDev {
        /// The flag's value.
        flag: u32,
        /// The kernel's answer.
        answer: String,
    },
    /// zcrx registration with `rx_buf_len` refused with `EINVAL` (before 7.0 the field is
    /// reserved).
    RxBufLen {
        /// The `--rx-buf-len` value.
        len: u32,
        /// The kernel's answer.
        answer: String,
    },

    // --- the iou-zcrx personality (C iou-zcrx's own sentences) ---
    /// iou-zcrx: the hugepage area could not be allocated.
    IouZcrxHugepages {
        /// What the run said.
        answer: String,
    },
    /// iou-zcrx: large chunks (`rx_buf_len`) refused.
    IouZcrxLargeChunks {
        /// The errno.
        errno: i32,
        /// What the run said.
        answer: String,
    },

    /// A skip of the io_uring zcrx mode: every skip there names the mode.
    InZcrx(Box<Missing>),

    /// Several capabilities missing at once, the first the one configuration cannot fix
    /// (built by [`Missing::all`]: at least two, none of them `Several`).
    Several(Vec<Missing>),
}

impl Missing {
    /// What `missing` (in order) add up to: `None` for none, the one for one, else
    /// [`Missing::Several`] (a nested `Several` is flattened into it).
    pub fn all(missing: Vec<Missing>) -> Option<Missing> {
        let mut flat: Vec<Missing> = Vec::with_capacity(missing.len());
        for m in missing {
            match m {
                Missing::Several(inner) => flat.extend(inner),
                m => flat.push(m),
            }
        }
        match flat.len() {
            0 => None,
            1 => flat.pop(),
            _ => Some(Missing::Several(flat)),
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Missing::*;
        match self {
            Udmabuf { dev, errno } => write!(f, "no udmabuf: {}", open_failure(dev, *errno)),
            UdmabufAccess { dev, errno } => f.write_str(&open_failure(dev, *errno)),
            UdmabufSizeLimit {
                size_bytes,
                limit_mb,
            } => write!(
                f,
                "udmabuf size {size_bytes} bytes exceeds the udmabuf module's size_limit_mb of \
                 {limit_mb} MiB ({} bytes, {}); choose a smaller size or raise \
                 udmabuf.size_limit_mb",
                limit_mb.saturating_mul(1 << 20),
                crate::udmabuf::SIZE_LIMIT_MB_PATH
            ),
            HugepagePool { path } => write!(
                f,
                "no 2 MiB hugepage pool ({} missing; kernel without CONFIG_HUGETLBFS?)",
                path.display()
            ),
            Hugepages {
                needed,
                pool,
                waited,
            } => {
                match pool {
                    Some(s) => {
                        let have = s.available();
                        let target = s.nr.saturating_add(needed.saturating_sub(have));
                        write!(
                            f,
                            "need {needed} free 2 MiB hugepages, have {have}; raise \
                             vm.nr_hugepages (now {}; e.g. `sysctl vm.nr_hugepages={target}`)",
                            s.nr
                        )?
                    }
                    None => write!(
                        f,
                        "need {needed} free 2 MiB hugepages, have fewer; raise vm.nr_hugepages"
                    )?,
                }
                f.write_str(waited.as_deref().unwrap_or_default())
            }
            HugetlbMemfd { errno } => write!(
                f,
                "no 2 MiB hugetlb memfd: memfd_create(MFD_HUGETLB|MFD_HUGE_2MB): {}",
                errno_display(*errno)
            ),
            DmaHeaps { path, dir, errno } => write!(
                f,
                "no dma-buf heaps: cannot open {} ({}); {} does not exist: the kernel needs \
                 CONFIG_DMABUF_HEAPS (and CONFIG_DMABUF_HEAPS_SYSTEM for the system heap)",
                path.display(),
                errno_display(*errno),
                dir.display()
            ),
            DmaHeapName {
                name,
                path,
                errno,
                heaps,
            } => {
                let heaps = match heaps {
                    Some(h) if h.is_empty() => "none".to_string(),
                    Some(h) => h.join(", "),
                    None => "(could not be listed)".to_string(),
                };
                write!(
                    f,
                    "no dma-buf heap named {name:?}: cannot open {} ({}); this host's heaps: \
                     {heaps}",
                    path.display(),
                    errno_display(*errno)
                )
            }
            DmaHeapAccess { path, errno } => write!(
                f,
                "cannot open {} ({}): needs root or read access to the heap",
                path.display(),
                errno_display(*errno)
            ),
            DmaHeapMemory {
                name,
                size_bytes,
                answer,
            } => write!(
                f,
                "dma-heap {name} cannot allocate {size_bytes} bytes: {answer}; choose a smaller \
                 size or free memory"
            ),
            DmaHeapAvailable {
                name,
                size_bytes,
                available,
            } => write!(
                f,
                "dma-heap {name} cannot allocate {size_bytes} bytes: only {available} bytes are \
                 available (MemAvailable in /proc/meminfo), and the system heap takes pages \
                 until the OOM killer steps in rather than refuse; choose a smaller size"
            ),
            DmaHeapMap {
                name,
                size_bytes,
                answer,
            } => write!(
                f,
                "dma-heap {name} dma-buf of {size_bytes} bytes cannot be mapped for validation: \
                 {answer}"
            ),
            DmaHeapChunks {
                name,
                rx_page_size,
                largest,
            } => write!(
                f,
                "-b {rx_page_size}: dma-heap {name} cannot serve an rx-page-size of \
                 {rx_page_size} bytes: it builds buffers from chunks of at most {largest} bytes \
                 (1 MiB, then 64 KiB, then single pages), and bind-rx needs every \
                 scatter-gather entry aligned to the niov size; udmabuf (hugetlb) serves it"
            ),
            DmaHeapUnaligned {
                name,
                rx_page_size,
                answer,
            } => write!(
                f,
                "dma-heap {name} cannot serve rx-page-size {}: {answer}; the heap handed out \
                 chunks smaller than the niov (it promises no alignment above the page size); \
                 udmabuf (hugetlb) serves it",
                rx_page_size.unwrap_or(0)
            ),
            NetAdmin { what, answer } => write!(f, "{what} needs CAP_NET_ADMIN: {answer}"),
            BindTxNotPermitted { answer } => write!(f, "bind-tx is not permitted here: {answer}"),
            IoUringNotPermitted { disabled, answer } => write!(
                f,
                "io_uring is not permitted for this process (kernel.io_uring_disabled = {}; 1 \
                 allows only kernel.io_uring_group members): {answer}",
                disabled.map_or_else(|| "unknown".to_string(), |v| v.to_string())
            ),
            Driver {
                ifname,
                what,
                answer,
                hint,
            } => {
                write!(f, "{ifname}: driver does not support {what}: {answer}")?;
                match hint {
                    Some(h) => write!(f, "; {h}"),
                    None => Ok(()),
                }
            }
            NoChannelCounts { ifname } => write!(
                f,
                "{ifname}: the driver reports no channel counts (ethtool channels-get answered \
                 without rx, tx, other or combined counts), so the RX queues are unknown; give \
                 -t START -q NUM"
            ),
            ChannelConfig => f.write_str(
                "driver reports neither combined nor rx channel counts; cannot compute a \
                 channel configuration",
            ),
            TooFewQueues { ifname, rx_queues } => write!(
                f,
                "{ifname} has {rx_queues} RX queue(s); binding one for devmem or zcrx needs at \
                 least 2 (queue 0 stays in RSS)"
            ),
            NoQueueOps { ifname, answer } => write!(
                f,
                "{ifname}: the driver has no queue management ops (bind-rx answered {answer}); \
                 devmem needs a driver that implements them, which no configuration changes"
            ),
            DevmemRx {
                rx_page_size: Some(size),
                answer,
            } => write!(
                f,
                "device does not support devmem RX with rx-page-size {size}: {answer}"
            ),
            DevmemRx {
                rx_page_size: None,
                answer,
            } => write!(f, "device does not support devmem RX: {answer}"),
            DevmemTx { ifname, answer } => {
                write!(f, "{ifname} does not support devmem TX: {answer}")
            }
            Zcrx {
                rx_buf_len: Some(len),
                nodev: true,
                answer,
            } => write!(
                f,
                "this kernel's device-less zcrx (ZCRX_REG_NODEV) does not support rx_buf_len \
                 {len}: {answer}"
            ),
            Zcrx {
                rx_buf_len: Some(len),
                nodev: false,
                answer,
            } => write!(
                f,
                "device/queue does not support io_uring zcrx with rx_buf_len {len}: {answer}"
            ),
            Zcrx {
                rx_buf_len: None,
                answer,
                ..
            } => write!(f, "device/queue does not support io_uring zcrx: {answer}"),
            NetlinkFamily { family } => write!(
                f,
                "generic netlink family \"{family}\" is not registered in this kernel"
            ),
            RxPageSizeAttr { size, policy } => write!(
                f,
                "-b {size}: this kernel's bind-rx has no rx-page-size attribute (policy \
                 attributes {policy:?}); large niovs need a kernel with the rx-page-size series"
            ),
            RxPageSizeUnknown { answer } => write!(
                f,
                "this kernel does not know bind-rx attribute rx-page-size (-b needs a newer \
                 kernel): {answer}"
            ),
            AutoreleaseAttr { policy } => write!(
                f,
                "-a 1: this kernel's bind-rx has no autorelease attribute (policy attributes \
                 {policy:?}, none of them the u8 NETDEV_A_DMABUF_AUTORELEASE); it needs the \
                 unmerged series \"net: devmem: improve cpu cost of RX token management\" v7-v10"
            ),
            AutoreleaseBusy { answer } => write!(
                f,
                "another devmem RX binding on this system uses the other autorelease mode (the \
                 mode is system-wide while any RX binding exists): {answer}"
            ),
            SoDevmemAutorelease { optname } => write!(
                f,
                "kernel has no SO_DEVMEM_AUTORELEASE (setsockopt(SOL_SOCKET, {optname}): {}; \
                 the option is a proposal, not merged upstream)",
                errno_display(libc::ENOPROTOOPT)
            ),
            IoUringDisabled { path } => write!(
                f,
                "io_uring is disabled on this host (kernel.io_uring_disabled = 2, {path}); \
                 `sysctl kernel.io_uring_disabled=0` enables it"
            ),
            NoIoUring { answer } => write!(f, "kernel built without io_uring: {answer}"),
            RingFlags { answer } => write!(
                f,
                "kernel refused the ring flags zcrx needs (SINGLE_ISSUER, DEFER_TASKRUN: 6.1+; \
                 CQE32): {answer}"
            ),
            RecvZc { opcode } => write!(
                f,
                "this kernel's io_uring does not support IORING_OP_RECV_ZC (opcode {opcode}); \
                 io_uring zcrx needs Linux 6.15+ with CONFIG_IO_URING_ZCRX"
            ),
            ZcrxNoDev { flag, answer } => write!(
                f,
                "kernel has no ZCRX_REG_NODEV (device-less zcrx, io_uring_zcrx_ifq_reg.flags \
                 {flag}; added after 6.18): {answer}"
            ),
            RxBufLen { len, answer } => write!(
                f,
                "kernel refused rx_buf_len {len}: kernels before 7.0 reserve that field \
                 (io_uring_zcrx_ifq_reg byte 68): {answer}"
            ),
            IouZcrxHugepages { answer } => write!(f, "Can't allocate huge pages: {answer}"),
            IouZcrxLargeChunks { errno, answer } => {
                write!(f, "Large chunks are not supported -{errno}: {answer}")
            }
            InZcrx(inner) => {
                let text = inner.to_string();
                match text.contains("zcrx") {
                    true => f.write_str(&text),
                    false => write!(f, "io_uring zcrx: {text}"),
                }
            }
            Several(all) => {
                for (i, m) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; and: ")?;
                    }
                    write!(f, "{m}")?;
                }
                Ok(())
            }
        }
    }
}

/// What a failed `open` of the udmabuf device at `dev` with `errno` means, as one sentence:
/// `cannot open /dev/udmabuf (ENOENT (...)); the kernel needs CONFIG_UDMABUF ...`.
pub fn open_failure(dev: &std::path::Path, errno: i32) -> String {
    let why = match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => {
            "; the kernel needs CONFIG_UDMABUF (built in, or the udmabuf module loaded)"
        }
        libc::EACCES | libc::EPERM => ": needs root or write access to the device",
        _ => "",
    };
    format!(
        "cannot open {} ({}){why}",
        dev.display(),
        errno_display(errno)
    )
}

/// A kernel operation whose refusal [`classify`] sorts.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// A NIC configuration step on `ifname` (header split, RSS, ntuple, channels), named
    /// `what`; `hint` is appended to its skip.
    Nic {
        /// The interface.
        ifname: &'a str,
        /// The step, e.g. `header split (tcp-data-split)`.
        what: &'a str,
        /// What to do instead.
        hint: Option<&'static str>,
    },
    /// netdev bind-rx with these attributes.
    BindRx {
        /// `-b`.
        rx_page_size: Option<u32>,
        /// The autorelease attribute was sent.
        autorelease: bool,
    },
    /// netdev bind-tx on `ifname`.
    BindTx {
        /// The interface.
        ifname: &'a str,
    },
    /// Resolving a generic netlink family.
    Family {
        /// The family.
        name: &'static str,
    },
    /// `io_uring_setup` with the flags zcrx needs; `disabled` is `kernel.io_uring_disabled`.
    IoUringSetup {
        /// The sysctl, when readable.
        disabled: Option<u64>,
    },
    /// `IORING_REGISTER_ZCRX_IFQ`.
    ZcrxRegister {
        /// With `ZCRX_REG_NODEV`.
        nodev: bool,
        /// `rx_buf_len`, when set.
        rx_buf_len: Option<u32>,
    },
    /// `setsockopt(SOL_SOCKET, SO_DEVMEM_AUTORELEASE)`.
    DevmemAutorelease {
        /// The option number.
        optname: i32,
    },
    /// `open` of the udmabuf device.
    UdmabufOpen {
        /// The device.
        dev: &'a std::path::Path,
    },
    /// `open` of a dma-buf heap's device.
    DmaHeapOpen {
        /// The heap's name.
        name: &'a str,
        /// The heap's device.
        path: &'a std::path::Path,
        /// The directory of the heaps.
        dir: &'a std::path::Path,
        /// The heaps the directory lists; `None` when it does not exist or cannot be read.
        heaps: Option<&'a [String]>,
        /// Whether the directory exists.
        dir_exists: bool,
    },
    /// `DMA_HEAP_IOCTL_ALLOC` of `size_bytes` from heap `name`.
    DmaHeapAlloc {
        /// The heap's name.
        name: &'a str,
        /// Bytes asked for.
        size_bytes: u64,
    },
    /// `mmap` of a heap's dma-buf.
    DmaHeapMap {
        /// The heap's name.
        name: &'a str,
        /// The dma-buf's size, bytes.
        size_bytes: u64,
    },
    /// netdev bind-rx of a heap's dma-buf with rx-page-size `rx_page_size`.
    DmaHeapBind {
        /// The heap's name.
        name: &'a str,
        /// `-b`.
        rx_page_size: Option<u32>,
    },
}

/// The extack text of the kernel's bind-rx refusal of a scatter-gather entry that is not a
/// whole number of niovs at a niov-aligned address (`net/core/devmem.c`, with rx-page-size;
/// the kernel cuts the whole message at 79 characters).
const SG_NOT_ALIGNED: &str = "not aligned to niov size";

/// Sorts the kernel's refusal `e` of `op`: the answers that mean "this host, kernel or
/// driver cannot" become [`Error::Skip`] with what is missing; every other answer (a
/// failure) is returned unchanged.
///
/// - `EPERM`: the operation needs `CAP_NET_ADMIN` (bind-tx: "not permitted"; io_uring
///   setup: `kernel.io_uring_disabled` or a policy; the udmabuf device: root);
/// - `EOPNOTSUPP`: the driver, device or queue lacks the operation;
/// - `ENOENT` resolving a family: the kernel lacks it;
/// - bind-rx `EBUSY` with the autorelease attribute: the other system-wide mode is in use;
///   bind-rx `EINVAL` "Unknown attribute type" with rx-page-size: a kernel without it;
/// - io_uring setup `ENOSYS` / `EINVAL`: no io_uring / not the flags zcrx needs; zcrx
///   registration `EINVAL`: no device-less mode, or `rx_buf_len` reserved;
/// - `SO_DEVMEM_AUTORELEASE` `ENOPROTOOPT`: the option does not exist;
/// - udmabuf `ENOENT`/`ENODEV`/`ENXIO`: no udmabuf; `EACCES`/`EPERM`: no access;
/// - a dma-buf heap's device: the same errnos (no heaps at all when the directory is
///   missing, else no heap of that name); its allocation `ENOMEM`; any refusal to map its
///   dma-buf; bind-rx of its dma-buf `EINVAL` "… not aligned to niov size …".
pub fn classify(e: Error, op: Op<'_>) -> Error {
    let answer = || e.to_string();
    let missing = match (op, e.errno()) {
        (Op::Nic { ifname, what, hint }, Some(libc::EOPNOTSUPP)) => Missing::Driver {
            ifname: ifname.to_string(),
            what: what.to_string(),
            answer: answer(),
            hint,
        },
        (Op::Nic { ifname, what, .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: format!("{ifname}: {what}"),
            answer: answer(),
        },
        (Op::BindRx { .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: "bind-rx".into(),
            answer: answer(),
        },
        (Op::BindRx { rx_page_size, .. }, Some(libc::EOPNOTSUPP)) => Missing::DevmemRx {
            rx_page_size,
            answer: answer(),
        },
        // Autorelease series v10: the mode is system-wide while any RX binding exists
        // (devmem.c, "System already configured with autorelease=%d").
        (
            Op::BindRx {
                autorelease: true, ..
            },
            Some(libc::EBUSY),
        ) => Missing::AutoreleaseBusy { answer: answer() },
        (
            Op::BindRx {
                rx_page_size: Some(_),
                ..
            },
            Some(libc::EINVAL),
        ) if matches!(&e, Error::Netlink(nl)
                if nl.ext_msg.as_deref() == Some("Unknown attribute type")) =>
        {
            Missing::RxPageSizeUnknown { answer: answer() }
        }
        (Op::BindTx { ifname }, Some(libc::EOPNOTSUPP)) => Missing::DevmemTx {
            ifname: ifname.to_string(),
            answer: answer(),
        },
        (Op::BindTx { .. }, Some(libc::EPERM)) => Missing::BindTxNotPermitted { answer: answer() },
        (Op::Family { name }, _) if crate::netlink::ctrl::is_family_missing(&e) => {
            Missing::NetlinkFamily { family: name }
        }
        (Op::IoUringSetup { disabled }, Some(libc::EPERM)) => Missing::IoUringNotPermitted {
            disabled,
            answer: answer(),
        },
        (Op::IoUringSetup { .. }, Some(libc::ENOSYS)) => Missing::NoIoUring { answer: answer() },
        (Op::IoUringSetup { .. }, Some(libc::EINVAL)) => Missing::RingFlags { answer: answer() },
        (Op::ZcrxRegister { .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: "io_uring zcrx registration".into(),
            answer: answer(),
        },
        (Op::ZcrxRegister { nodev, rx_buf_len }, Some(libc::EOPNOTSUPP)) => Missing::Zcrx {
            rx_buf_len,
            nodev,
            answer: answer(),
        },
        (Op::ZcrxRegister { nodev: true, .. }, Some(libc::EINVAL)) => Missing::ZcrxNoDev {
            flag: crate::sys::uapi::ZCRX_REG_NODEV,
            answer: answer(),
        },
        (
            Op::ZcrxRegister {
                rx_buf_len: Some(len),
                ..
            },
            Some(libc::EINVAL),
        ) => Missing::RxBufLen {
            len,
            answer: answer(),
        },
        (Op::DevmemAutorelease { optname }, Some(libc::ENOPROTOOPT)) => {
            Missing::SoDevmemAutorelease { optname }
        }
        (Op::UdmabufOpen { dev }, Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO))) => {
            Missing::Udmabuf {
                dev: dev.to_path_buf(),
                errno,
            }
        }
        (Op::UdmabufOpen { dev }, Some(errno @ (libc::EACCES | libc::EPERM))) => {
            Missing::UdmabufAccess {
                dev: dev.to_path_buf(),
                errno,
            }
        }
        (
            Op::DmaHeapOpen {
                path,
                dir,
                dir_exists: false,
                ..
            },
            Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO)),
        ) => Missing::DmaHeaps {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            errno,
        },
        (
            Op::DmaHeapOpen {
                name, path, heaps, ..
            },
            Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO)),
        ) => Missing::DmaHeapName {
            name: name.to_string(),
            path: path.to_path_buf(),
            errno,
            heaps: heaps.map(<[String]>::to_vec),
        },
        (Op::DmaHeapOpen { path, .. }, Some(errno @ (libc::EACCES | libc::EPERM))) => {
            Missing::DmaHeapAccess {
                path: path.to_path_buf(),
                errno,
            }
        }
        (Op::DmaHeapAlloc { name, size_bytes }, Some(libc::ENOMEM)) => Missing::DmaHeapMemory {
            name: name.to_string(),
            size_bytes,
            answer: answer(),
        },
        (Op::DmaHeapMap { name, size_bytes }, Some(_)) => Missing::DmaHeapMap {
            name: name.to_string(),
            size_bytes,
            answer: answer(),
        },
        (Op::DmaHeapBind { name, rx_page_size }, Some(libc::EINVAL))
            if matches!(&e, Error::Netlink(nl)
                if nl.ext_msg.as_deref().is_some_and(|m| m.contains(SG_NOT_ALIGNED))) =>
        {
            Missing::DmaHeapUnaligned {
                name: name.to_string(),
                rx_page_size,
                answer: answer(),
            }
        }
        _ => return e,
    };
    Error::Skip(missing)
}

/// `r`, with "the kernel has no generic netlink family `name`" as a skip ([`classify`] with
/// [`Op::Family`]); every other error passes through unchanged.
///
/// Errors: [`Error::Skip`] with [`Missing::NetlinkFamily`]; `r`'s other errors.
pub fn skip_if_family_missing<T>(
    r: crate::error::Result<T>,
    name: &'static str,
) -> crate::error::Result<T> {
    r.map_err(|e| classify(e, Op::Family { name }))
}

/// What `-a WANT` (bind-rx autorelease) sends to a kernel whose bind-rx `do` policy is
/// `policy` (its attribute numbers and types, [`crate::netlink::ctrl::bind_rx_policy`]): with
/// the attribute, `Some((its number, want))`; without it, `-a 0` binds without the attribute
/// (`None`: such a kernel's only mode releases tokens still held at close), and `-a 1` cannot
/// run. The one place that decides it, for the devmem server and for a sweep over
/// `autorelease`.
///
/// Errors: [`Missing::AutoreleaseAttr`] (with the policy's attribute numbers) for `-a 1` on a
/// kernel without the attribute.
pub fn bind_autorelease(
    want: bool,
    policy: &[crate::netlink::ctrl::PolicyAttr],
) -> Result<Option<(u16, bool)>, Missing> {
    match crate::netlink::ctrl::autorelease_attr(policy) {
        Some(attr) => Ok(Some((attr, want))),
        None if !want => Ok(None),
        None => Err(Missing::AutoreleaseAttr {
            policy: policy.iter().map(|a| a.kind).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NlError;

    /// Scripted bind-rx policies: this kernel's (6.18, 7.3: no autorelease), the unmerged
    /// series' as posted (5 = autorelease, u8) and rebased after rx-page-size (6, u8).
    #[test]
    fn bind_autorelease_follows_the_policy() {
        use crate::netlink::ctrl::{PolicyAttr, NL_ATTR_TYPE_U32, NL_ATTR_TYPE_U8};
        let pol = |a: &[(u16, u32)]| -> Vec<PolicyAttr> {
            a.iter()
                .map(|&(kind, t)| PolicyAttr {
                    kind,
                    nl_type: Some(t),
                })
                .collect()
        };
        let nest = 13; // NL_ATTR_TYPE_NESTED
        let base = pol(&[(1, NL_ATTR_TYPE_U32), (2, nest), (3, NL_ATTR_TYPE_U32)]);
        let rx_page_size = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U32),
        ]);
        let series = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U8),
        ]);
        let rebased = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U32),
            (6, NL_ATTR_TYPE_U8),
        ]);
        for want in [false, true] {
            assert_eq!(bind_autorelease(want, &series), Ok(Some((5, want))));
            assert_eq!(bind_autorelease(want, &rebased), Ok(Some((6, want))));
        }
        for p in [&base, &rx_page_size] {
            assert_eq!(bind_autorelease(false, p), Ok(None));
        }
        let skip = bind_autorelease(true, &rx_page_size).unwrap_err();
        assert_eq!(
            skip,
            Missing::AutoreleaseAttr {
                policy: vec![1, 2, 3, 5]
            }
        );
        assert!(skip.to_string().starts_with(
            "-a 1: this kernel's bind-rx has no autorelease attribute (policy attributes [1, 2, \
             3, 5]"
        ));
    }

    fn nl(errno: i32, msg: Option<&str>) -> Error {
        Error::Netlink(Box::new(NlError {
            ext_msg: msg.map(str::to_string),
            ..NlError::refusal("netdev", "bind-rx", "", errno)
        }))
    }

    fn skip_text(e: Error) -> String {
        match e {
            Error::Skip(m) => m.to_string(),
            other => panic!("not a skip: {other}"),
        }
    }

    /// The sentences of the skips the kernel's harness and our tests match, byte for byte.
    #[test]
    fn sentences_are_kept() {
        let op = Op::Nic {
            ifname: "eth0",
            what: "header split (tcp-data-split)",
            hint: None,
        };
        assert_eq!(
            skip_text(classify(Error::sys("RINGS_SET", libc::EOPNOTSUPP), op)),
            "eth0: driver does not support header split (tcp-data-split): RINGS_SET: \
             EOPNOTSUPP (Operation not supported)"
        );
        assert_eq!(
            skip_text(classify(Error::sys("RINGS_SET", libc::EPERM), op)),
            "eth0: header split (tcp-data-split) needs CAP_NET_ADMIN: RINGS_SET: EPERM \
             (Operation not permitted)"
        );
        let bind = Op::BindRx {
            rx_page_size: Some(16384),
            autorelease: false,
        };
        let e = classify(nl(libc::EINVAL, Some("Unknown attribute type")), bind);
        assert!(
            skip_text(e).contains("does not know bind-rx attribute rx-page-size"),
            "unknown attribute"
        );
        let e = classify(nl(libc::EOPNOTSUPP, None), bind);
        assert!(skip_text(e).contains("with rx-page-size 16384"));
        let e = classify(nl(libc::EINVAL, Some("tcp-data-split is disabled")), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
        assert_eq!(
            Missing::InZcrx(Box::new(Missing::Hugepages {
                needed: 16,
                pool: None,
                waited: None
            }))
            .to_string(),
            "io_uring zcrx: need 16 free 2 MiB hugepages, have fewer; raise vm.nr_hugepages"
        );
        assert_eq!(
            Missing::InZcrx(Box::new(Missing::RecvZc { opcode: 58 })).to_string(),
            Missing::RecvZc { opcode: 58 }.to_string(),
            "a sentence naming zcrx is not prefixed twice"
        );
    }

    /// A dma-buf heap's refusals: which `open` errno is which skip (no heaps at all, no heap
    /// of that name, no access), the allocation's `ENOMEM`, any mmap refusal; every other
    /// answer stays a failure.
    #[test]
    fn dma_heap_refusals_are_sorted() {
        use std::path::Path;
        let path = Path::new("/dev/dma_heap/system");
        let dir = Path::new("/dev/dma_heap");
        let heaps = ["reserved".to_string()];
        let open = |dir_exists, heaps| Op::DmaHeapOpen {
            name: "system",
            path,
            dir,
            heaps,
            dir_exists,
        };
        let refused = |errno| Error::sys("open(/dev/dma_heap/system)", errno);
        let e = classify(refused(libc::ENOENT), open(false, None));
        assert!(
            matches!(&e, Error::Skip(Missing::DmaHeaps { errno, .. }) if *errno == libc::ENOENT),
            "{e}"
        );
        let e = classify(refused(libc::ENODEV), open(true, Some(&heaps)));
        assert_eq!(
            skip_text(e),
            "no dma-buf heap named \"system\": cannot open /dev/dma_heap/system (ENODEV (No \
             such device)); this host's heaps: reserved"
        );
        let e = classify(refused(libc::ENOENT), open(true, None));
        assert!(
            skip_text(e).ends_with("this host's heaps: (could not be listed)"),
            "an unreadable directory"
        );
        let e = classify(refused(libc::EACCES), open(true, Some(&heaps)));
        assert_eq!(
            skip_text(e),
            "cannot open /dev/dma_heap/system (EACCES (Permission denied)): needs root or read \
             access to the heap"
        );
        let e = classify(refused(libc::EMFILE), open(true, Some(&heaps)));
        assert!(
            matches!(e, Error::Sys { errno, .. } if errno == libc::EMFILE),
            "{e}"
        );

        let alloc = Op::DmaHeapAlloc {
            name: "system",
            size_bytes: 1 << 20,
        };
        let e = classify(Error::sys("ioctl", libc::ENOMEM), alloc);
        assert!(
            matches!(e, Error::Skip(Missing::DmaHeapMemory { .. })),
            "{e}"
        );
        let e = classify(Error::sys("ioctl", libc::EINVAL), alloc);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);

        let map = Op::DmaHeapMap {
            name: "system",
            size_bytes: 1 << 20,
        };
        let e = classify(Error::sys("mmap", libc::ENODEV), map);
        assert_eq!(
            skip_text(e),
            "dma-heap system dma-buf of 1048576 bytes cannot be mapped for validation: mmap: \
             ENODEV (No such device)"
        );

        let bind = Op::DmaHeapBind {
            name: "system",
            rx_page_size: Some(16384),
        };
        let e = classify(
            nl(
                libc::EINVAL,
                Some("dmabuf sg entry (addr=0x0, len=4096) not aligned to niov size 16"),
            ),
            bind,
        );
        assert!(
            matches!(e, Error::Skip(Missing::DmaHeapUnaligned { .. })),
            "{e}"
        );
        let e = classify(nl(libc::EINVAL, Some("tcp-data-split is disabled")), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
        let e = classify(nl(libc::EBUSY, None), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
    }

    /// Several blockers are named in order on one line; one is itself; none is none.
    #[test]
    fn several_blockers_are_named_in_order() {
        let driver = Missing::NoQueueOps {
            ifname: "veth0".into(),
            answer: "EOPNOTSUPP (Operation not supported); at NETDEV_A_DMABUF_IFINDEX".into(),
        };
        let udmabuf = Missing::Udmabuf {
            dev: "/dev/udmabuf".into(),
            errno: libc::ENOENT,
        };
        assert_eq!(Missing::all(vec![]), None);
        assert_eq!(Missing::all(vec![udmabuf.clone()]), Some(udmabuf.clone()));
        let both = Missing::all(vec![driver.clone(), udmabuf.clone()]).unwrap();
        assert_eq!(
            both.to_string(),
            format!("{driver}; and: {udmabuf}"),
            "in the order given"
        );
        assert!(both.to_string().starts_with(
            "veth0: the driver has no queue management ops (bind-rx answered EOPNOTSUPP \
             (Operation not supported); at NETDEV_A_DMABUF_IFINDEX); "
        ));
        let nested = Missing::all(vec![both.clone(), Missing::ChannelConfig]).unwrap();
        assert_eq!(
            nested,
            Missing::Several(vec![driver, udmabuf, Missing::ChannelConfig])
        );
    }

    /// Answers that are no missing capability stay what they were.
    #[test]
    fn failures_stay_failures() {
        let e = classify(
            Error::sys("bind", libc::EINVAL),
            Op::BindTx { ifname: "eth0" },
        );
        assert!(matches!(e, Error::Sys { errno, .. } if errno == libc::EINVAL));
        let e = classify(
            Error::sys("x", libc::EBUSY),
            Op::BindRx {
                rx_page_size: None,
                autorelease: false,
            },
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
    }
}
