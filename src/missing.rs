//! What a run found missing — the reason of every skip (exit 4, kselftest's `KSFT_SKIP`):
//! [`Missing`], which `Error::Skip` carries. Its `Display` is the sentence the user (and the
//! kernel's harness, which matches some of them) reads after `skip: `; each names what is
//! missing, where, the kernel's own answer when there is one, and what would fix it. The
//! probe, the capability report and the modes read the same values, so nothing turns a
//! sentence back into a fact.
//!
//! A leaf (values and sentences only): which kernel answer is which `Missing` is decided by
//! `caps::classify`, above it.

use std::fmt;
use std::path::PathBuf;

use crate::errno::errno_display;

/// udmabuf module parameter: the largest single udmabuf in MiB (default 64; the kernel refuses
/// `size > size_limit_mb << 20` with `EINVAL`, so exactly the limit is allowed).
pub const SIZE_LIMIT_MB_PATH: &str = "/sys/module/udmabuf/parameters/size_limit_mb";

/// The 2 MiB hugepage pool, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugepageStatus {
    /// `vm.nr_hugepages` (persistent pages of the default hugepage size, 2 MiB on x86_64).
    pub nr: u64,
    /// `free_hugepages` of the 2 MiB pool (includes reserved pages).
    pub free: u64,
    /// `resv_hugepages` of the 2 MiB pool: free but promised to existing mappings.
    pub resv: u64,
}

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
        /// The kernel's answer (`Error::kernel_answer`).
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
                SIZE_LIMIT_MB_PATH
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
pub(crate) fn open_failure(dev: &std::path::Path, errno: i32) -> String {
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
