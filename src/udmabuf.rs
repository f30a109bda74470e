//! udmabuf memory provider: memfd (optionally hugetlb) → `UDMABUF_CREATE` → `mmap(MAP_SHARED)`,
//! plus `DMA_BUF_IOCTL_SYNC` around CPU access and checked views of the mapping.
//!
//! The allocation is split into steps so each can be used (and tested) on its own:
//!
//! 1. [`preflight`]: everything that can make the run a *skip* (exit 4) is checked before
//!    anything is created: `/dev/udmabuf` opens, the size fits the module's `size_limit_mb`, and
//!    for hugetlb enough free 2 MiB hugepages exist.
//! 2. [`Memfd::create`]: `memfd_create(MFD_ALLOW_SEALING|MFD_CLOEXEC [|MFD_HUGETLB|MFD_HUGE_2MB])`,
//!    `F_ADD_SEALS(F_SEAL_SHRINK)`, `ftruncate(size)`. Works without udmabuf.
//! 3. `ioctl(/dev/udmabuf, UDMABUF_CREATE)` exports the memfd as a dma-buf fd.
//! 4. [`MappedRegion::map_shared`] maps the dma-buf (or, for tests, the memfd itself).
//!
//! [`Udmabuf::create`] runs all four. Layouts and rules follow `include/uapi/linux/udmabuf.h`,
//! `include/uapi/linux/dma-buf.h` and `drivers/dma-buf/udmabuf.c`
//! (see `docs/kernel-interface.md#udmabuf-dma-buf-and-memfd`);
//! the sizes follow ncdevmem.c's `udmabuf` allocation (16000 pages, or hugetlb rounded up to
//! 2 MiB when `-b` exceeds the page size).
//!
//! # When a `&[u8]` over the mapping is sound
//!
//! The mapping is shared with the NIC (by DMA) and, through the memfd, with anyone holding the
//! file. Rust requires that the bytes behind a `&[u8]` do not change while it lives. For a
//! dma-buf frag that holds from the moment `recvmsg(MSG_SOCK_DEVMEM)` returned the frag's
//! `SCM_DEVMEM_DMABUF` cmsg until its token is handed back with `SO_DEVMEM_DONTNEED` (or the
//! socket is closed): in between the kernel keeps the niov pinned and the NIC does not write
//! into it. [`FragMemory::bytes`] views must therefore be dropped before the token is released;
//! the receive loop does this by validating each frag before batching its token. Writes
//! ([`Udmabuf::write_at`], [`MappedRegion::write_at`]) need `&mut self`, so no view is alive
//! while this process writes.

use std::ffi::CStr;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::caps::{classify, Missing, Op};
use crate::error::{Error, Result};
pub use crate::missing::HugepageStatus;
use crate::sys::mmap::{checked_range, MappedRegion};
use crate::sys::{self, uapi};

/// Memory that dmabuf frags point into, read only through bounds-checked views.
///
/// Implemented by the real udmabuf mapping and by a `Vec`-backed region in tests, so the same
/// bounds checks run in both.
pub trait FragMemory {
    /// Size of the region in bytes (the dma-buf size).
    fn size(&self) -> usize;

    /// The bytes `[offset, offset + len)`, or `Error::Bounds` if any of them lies outside the
    /// region (checked with overflow-safe arithmetic before any read). Sound to read after
    /// `recvmsg` returned the frag and before its token is released.
    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]>;

    /// `DMA_BUF_IOCTL_SYNC(START|READ)` before the CPU reads frags.
    fn begin_cpu_read(&self) -> Result<()>;

    /// `DMA_BUF_IOCTL_SYNC(END|READ)` after the CPU is done reading.
    fn end_cpu_read(&self) -> Result<()>;
}

/// Default udmabuf size in pages, as ncdevmem.c (`NUM_PAGES`): 16000 pages, i.e. 65,536,000
/// bytes with 4 KiB pages.
pub const DEFAULT_NUM_PAGES: u64 = 16000;

/// The udmabuf misc device (`drivers/dma-buf/udmabuf.c`), present with `CONFIG_UDMABUF`.
pub const UDMABUF_DEV: &str = "/dev/udmabuf";
pub use crate::missing::SIZE_LIMIT_MB_PATH;
/// Persistent hugepages of the default size (`vm.nr_hugepages`).
pub const NR_HUGEPAGES_PATH: &str = "/proc/sys/vm/nr_hugepages";
/// Free pages in the 2 MiB hugepage pool (includes reserved ones).
pub const FREE_HUGEPAGES_PATH: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";
/// Reserved (promised to a mapping, not yet faulted in) pages of the 2 MiB pool.
pub const RESV_HUGEPAGES_PATH: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages";

/// Name given to the memfd (visible in `/proc/PID/fd` as `memfd:<name>`).
const MEMFD_NAME: &CStr = c"ncdevmem-rs-udmabuf";

/// `DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ`: before the CPU reads.
pub const SYNC_START_READ: u64 = uapi::DMA_BUF_SYNC_START | uapi::DMA_BUF_SYNC_READ;
/// `DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ`: after the CPU read.
pub const SYNC_END_READ: u64 = uapi::DMA_BUF_SYNC_END | uapi::DMA_BUF_SYNC_READ;
/// `DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE`: before the CPU writes.
pub const SYNC_START_WRITE: u64 = uapi::DMA_BUF_SYNC_START | uapi::DMA_BUF_SYNC_WRITE;
/// `DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE`: after the CPU wrote.
pub const SYNC_END_WRITE: u64 = uapi::DMA_BUF_SYNC_END | uapi::DMA_BUF_SYNC_WRITE;

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

/// What to allocate: the udmabuf size and whether it is backed by 2 MiB hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdmabufParams {
    /// Size in bytes: a multiple of the system page size, or of 2 MiB when `hugetlb`.
    pub size_bytes: u64,
    /// Back the memfd with 2 MiB hugepages (`MFD_HUGETLB | MFD_HUGE_2MB`), needed so each
    /// dma-buf sg entry is large enough for an rx-page-size (niov) above the page size.
    pub hugetlb: bool,
}

impl UdmabufParams {
    /// The parameters for rx-page-size `rx_page_size` (bytes, `-b`; `None` = not given) and an
    /// explicitly requested size in bytes (`None` = ncdevmem's default of
    /// [`DEFAULT_NUM_PAGES`] pages), with the system page size.
    ///
    /// See [`UdmabufParams::with_page_size`] for the rules and errors.
    pub fn new(rx_page_size: Option<u32>, requested_size: Option<u64>) -> Result<Self> {
        Self::with_page_size(rx_page_size, requested_size, sys::page_size() as u64)
    }

    /// As [`UdmabufParams::new`] with an explicit page size in bytes (pure; used by tests).
    ///
    /// hugetlb is chosen when `rx_page_size > page_size` (as ncdevmem.c). The size is rounded up
    /// to a multiple of the page size, or of 2 MiB for hugetlb (16000 × 4 KiB = 65,536,000
    /// bytes becomes 67,108,864). Errors: `Error::Usage` for a requested size of 0 or one whose
    /// rounding overflows.
    pub fn with_page_size(
        rx_page_size: Option<u32>,
        requested_size: Option<u64>,
        page_size: u64,
    ) -> Result<Self> {
        let hugetlb = rx_page_size.is_some_and(|b| u64::from(b) > page_size);
        let base = match requested_size {
            Some(0) => {
                return Err(Error::Usage(
                    "udmabuf size must be at least one page, not 0 bytes".into(),
                ))
            }
            Some(n) => n,
            None => DEFAULT_NUM_PAGES.checked_mul(page_size).ok_or_else(|| {
                Error::Usage(format!(
                    "udmabuf default size overflows with page size {page_size}"
                ))
            })?,
        };
        let align = if hugetlb {
            uapi::HUGEPAGE_2M as u64
        } else {
            page_size
        };
        let size_bytes = sys::align_up(base, align).ok_or_else(|| {
            Error::Usage(format!(
                "udmabuf size {base} bytes cannot be rounded up to a multiple of {align} bytes"
            ))
        })?;
        Ok(UdmabufParams {
            size_bytes,
            hugetlb,
        })
    }

    /// 2 MiB hugepages this allocation needs (0 without hugetlb); rounded up.
    pub fn hugepages_needed(&self) -> u64 {
        if self.hugetlb {
            self.size_bytes.div_ceil(uapi::HUGEPAGE_2M as u64)
        } else {
            0
        }
    }
}

/// Parses the contents of `/sys/module/udmabuf/parameters/size_limit_mb` (a decimal number of
/// MiB and a newline). Garbage is `Error::Decode`, never a panic.
pub fn parse_size_limit_mb(contents: &str) -> Result<u64> {
    let t = contents.trim();
    t.parse::<u64>().map_err(|e| Error::Decode {
        what: SIZE_LIMIT_MB_PATH.into(),
        detail: format!("expected a number of MiB, got {t:?} ({e})"),
    })
}

/// Reads the udmabuf module's `size_limit_mb` at `path` (normally [`SIZE_LIMIT_MB_PATH`]):
/// `Ok(None)` when the file does not exist (no limit known). Garbage is `Error::Decode`, an
/// unreadable file `Error::Sys`.
pub(crate) fn read_size_limit_mb(path: &Path) -> Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(s) => parse_size_limit_mb(&s).map(Some),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("read({})", path.display()), &e)),
    }
}

/// Refuses `size_bytes` above the udmabuf module's limit of `limit_mb` MiB, as the kernel
/// would (its check is `size > limit_mb << 20`, so exactly the limit is allowed).
/// Error: `Error::Skip` naming both numbers and the module parameter.
pub fn check_size_limit(size_bytes: u64, limit_mb: u64) -> Result<()> {
    let limit_bytes = limit_mb.saturating_mul(1 << 20);
    if size_bytes > limit_bytes {
        return Err(Error::Skip(Missing::UdmabufSizeLimit {
            size_bytes,
            limit_mb,
        }));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Preflight: every reason to skip, before anything is created
// ---------------------------------------------------------------------------------------------

/// Where [`preflight`] and [`HugepageStatus::read_at`] look. [`Default`] is the real system
/// paths; tests point them at a temporary directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// The udmabuf device, default [`UDMABUF_DEV`].
    pub udmabuf_dev: PathBuf,
    /// default [`SIZE_LIMIT_MB_PATH`]; a missing file means "no limit known".
    pub size_limit_mb: PathBuf,
    /// default [`NR_HUGEPAGES_PATH`].
    pub nr_hugepages: PathBuf,
    /// default [`FREE_HUGEPAGES_PATH`].
    pub free_hugepages: PathBuf,
    /// default [`RESV_HUGEPAGES_PATH`]; a missing file counts as 0 reserved.
    pub resv_hugepages: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            udmabuf_dev: UDMABUF_DEV.into(),
            size_limit_mb: SIZE_LIMIT_MB_PATH.into(),
            nr_hugepages: NR_HUGEPAGES_PATH.into(),
            free_hugepages: FREE_HUGEPAGES_PATH.into(),
            resv_hugepages: RESV_HUGEPAGES_PATH.into(),
        }
    }
}

impl HugepageStatus {
    /// Reads the real pool ([`HostPaths::default`]).
    pub fn read() -> Result<Self> {
        Self::read_at(&HostPaths::default())
    }

    /// Reads the pool from `paths`. A missing 2 MiB pool (`free_hugepages` absent) is
    /// `Error::Skip`; unreadable or garbage files are `Error::Sys` / `Error::Decode`.
    pub fn read_at(paths: &HostPaths) -> Result<Self> {
        let free = read_u64_file(&paths.free_hugepages)?.ok_or_else(|| {
            Error::Skip(Missing::HugepagePool {
                path: paths.free_hugepages.clone(),
            })
        })?;
        let nr = read_u64_file(&paths.nr_hugepages)?.unwrap_or(0);
        let resv = read_u64_file(&paths.resv_hugepages)?.unwrap_or(0);
        Ok(HugepageStatus { nr, free, resv })
    }

    /// Pages a new mapping can still get: `free - resv`.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.resv)
    }

    /// `Ok` when at least `needed` 2 MiB pages are available, else the hugepage
    /// `Error::Skip` ("need N free 2 MiB hugepages, have M; raise vm.nr_hugepages ...").
    pub fn require(&self, needed: u64) -> Result<()> {
        if self.available() >= needed {
            Ok(())
        } else {
            Err(hugepage_skip(needed, Some(self)))
        }
    }
}

/// The skip for missing hugepages; `status` adds the current numbers and the sysctl to run.
fn hugepage_skip(needed: u64, status: Option<&HugepageStatus>) -> Error {
    Error::Skip(Missing::Hugepages {
        needed,
        pool: status.copied(),
        waited: None,
    })
}

/// `e` from a hugetlb mmap or `UDMABUF_CREATE` of `needed` 2 MiB pages (0: not hugetlb): an
/// `ENOMEM` becomes the hugepage skip, with the pool's numbers when they can be read.
fn hugepage_enomem(e: Error, needed: u64) -> Error {
    if needed == 0 || e.errno() != Some(libc::ENOMEM) {
        return e;
    }
    hugepage_skip(needed, HugepageStatus::read().ok().as_ref())
}

/// Reads a sysfs/procfs file holding one decimal number. `Ok(None)` if the file does not exist.
fn read_u64_file(path: &Path) -> Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let t = s.trim();
            t.parse::<u64>().map(Some).map_err(|e| Error::Decode {
                what: path.display().to_string(),
                detail: format!("expected a decimal number, got {t:?} ({e})"),
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("read({})", path.display()), &e)),
    }
}

/// Opens the udmabuf device at `dev` `O_RDWR|O_CLOEXEC`. Errors: a missing device (`ENOENT`,
/// `ENODEV`, `ENXIO`) is `Error::Skip` ("no udmabuf: ...", naming `CONFIG_UDMABUF`), `EACCES`
/// or `EPERM` is `Error::Skip` (needs root) — [`classify`] with [`Op::UdmabufOpen`] —
/// anything else `Error::Sys`.
pub(crate) fn open_device(dev: &Path) -> Result<OwnedFd> {
    sys::udmabuf::open_device(dev).map_err(|errno| {
        let e = Error::sys(format!("open({}, O_RDWR)", dev.display()), errno);
        classify(e, Op::UdmabufOpen { dev })
    })
}

/// Checks everything that can make a udmabuf allocation a skip, before anything is created, in
/// this order, and changes nothing ([`HostPaths::default`] for the real system):
///
/// 1. `paths.udmabuf_dev` opens read-write (opened and closed again). Missing →
///    `Error::Skip` naming the device and `CONFIG_UDMABUF`; `EACCES`/`EPERM` → `Error::Skip`
///    (needs root); other errors → `Error::Sys`.
/// 2. `params.size_bytes` fits the module's `size_limit_mb` when that file exists
///    ([`check_size_limit`]); garbage in it → `Error::Decode`.
/// 3. For hugetlb, enough available 2 MiB hugepages ([`HugepageStatus::require`]).
pub fn preflight(params: &UdmabufParams, paths: &HostPaths) -> Result<()> {
    preflight_device(params, paths)?;
    if params.hugetlb {
        HugepageStatus::read_at(paths)?.require(params.hugepages_needed())?;
    }
    Ok(())
}

/// Steps 1 and 2 of [`preflight`]: the device and the size limit, not the hugepage count — for
/// callers that wait for hugepages a previous binding still holds
/// (`crate::release::await_hugepages`).
pub fn preflight_device(params: &UdmabufParams, paths: &HostPaths) -> Result<()> {
    drop(open_device(&paths.udmabuf_dev)?);
    if let Some(limit_mb) = read_size_limit_mb(&paths.size_limit_mb)? {
        check_size_limit(params.size_bytes, limit_mb)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// dma-buf sync
// ---------------------------------------------------------------------------------------------

/// Renders `DMA_BUF_SYNC_*` flags as `"START|READ"`, for error messages.
pub(crate) fn sync_flags_name(flags: u64) -> String {
    let phase = if flags & uapi::DMA_BUF_SYNC_END != 0 {
        "END"
    } else {
        "START"
    };
    let dir = match flags & uapi::DMA_BUF_SYNC_RW {
        uapi::DMA_BUF_SYNC_READ => "READ",
        uapi::DMA_BUF_SYNC_WRITE => "WRITE",
        uapi::DMA_BUF_SYNC_RW => "RW",
        _ => "no direction",
    };
    let extra = flags & !(uapi::DMA_BUF_SYNC_END | uapi::DMA_BUF_SYNC_RW);
    if extra != 0 {
        format!("{phase}|{dir}|0x{extra:x}")
    } else {
        format!("{phase}|{dir}")
    }
}

/// `ioctl(fd, DMA_BUF_IOCTL_SYNC, {flags})` (include/uapi/linux/dma-buf.h). `flags` is
/// START or END plus a direction (READ, WRITE or RW; see [`SYNC_START_READ`] and friends). The
/// kernel refuses flags without a direction with `EINVAL`; that is returned, never ignored.
/// `EINTR`/`EAGAIN` are retried a few times. Errors: `Error::Sys` naming the ioctl, the flags
/// and the fd (`ENOTTY` when `fd` is not a dma-buf).
pub fn dma_buf_sync(fd: BorrowedFd<'_>, flags: u64) -> Result<()> {
    let mut attempts = 0;
    let mut backoff = crate::backoff::Backoff::default();
    loop {
        let errno = match sys::udmabuf::dma_buf_sync(fd, flags) {
            Ok(()) => return Ok(()),
            Err(libc::EINTR | libc::EAGAIN) if attempts < 15 => {
                attempts += 1;
                backoff.pause();
                continue;
            }
            Err(errno) => errno,
        };
        return Err(Error::sys(
            format!(
                "ioctl(DMA_BUF_IOCTL_SYNC, {}) on fd {}",
                sync_flags_name(flags),
                fd.as_raw_fd()
            ),
            errno,
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// memfd
// ---------------------------------------------------------------------------------------------

/// A sealed memfd of a fixed size: shmem, or hugetlbfs with 2 MiB pages.
#[derive(Debug)]
pub struct Memfd {
    fd: OwnedFd,
    size: u64,
    hugetlb: bool,
}

impl Memfd {
    /// `memfd_create(name, MFD_ALLOW_SEALING|MFD_CLOEXEC [|MFD_HUGETLB|MFD_HUGE_2MB])`,
    /// `fcntl(F_ADD_SEALS, F_SEAL_SHRINK)`, `ftruncate(size)`. `size` is in bytes (a multiple
    /// of 2 MiB for hugetlb, else the kernel refuses it with `EINVAL`).
    ///
    /// Note: for hugetlb this succeeds even with no free hugepages; the shortage shows at
    /// [`Memfd::map`] (or `UDMABUF_CREATE`) as `ENOMEM`, which is mapped to the hugepage skip.
    /// Errors: `Error::Sys` naming the step; a kernel without 2 MiB hugetlb memfds is
    /// `Error::Skip`.
    pub fn create(name: &CStr, size: u64, hugetlb: bool) -> Result<Memfd> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let mut flags = MFdFlags::MFD_ALLOW_SEALING | MFdFlags::MFD_CLOEXEC;
        if hugetlb {
            flags |= MFdFlags::MFD_HUGETLB | MFdFlags::MFD_HUGE_2MB;
        }
        let fd = memfd_create(name, flags).map_err(|errno| {
            let errno = errno as i32;
            if hugetlb && matches!(errno, libc::EINVAL | libc::ENODEV) {
                return Error::Skip(Missing::HugetlbMemfd { errno });
            }
            Error::sys(
                format!("memfd_create({name:?}, 0x{:x})", flags.bits()),
                errno,
            )
        })?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))
            .map_err(|e| Error::sys("fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK)", e as i32))?;
        let len = libc::off_t::try_from(size)
            .map_err(|_| Error::Usage(format!("memfd size {size} bytes does not fit off_t")))?;
        nix::unistd::ftruncate(&fd, len)
            .map_err(|e| Error::sys(format!("ftruncate(memfd, {size} bytes)"), e as i32))?;
        Ok(Memfd { fd, size, hugetlb })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Backed by 2 MiB hugepages.
    pub fn is_hugetlb(&self) -> bool {
        self.hugetlb
    }

    /// 2 MiB hugepages the memfd's size needs (0 when not hugetlb).
    pub fn hugepages_needed(&self) -> u64 {
        UdmabufParams {
            size_bytes: self.size,
            hugetlb: self.hugetlb,
        }
        .hugepages_needed()
    }

    /// Maps the memfd itself `MAP_SHARED` over its whole size (the dma-buf-free path, used by
    /// tests and by anyone wanting plain shared memory). For hugetlb, `ENOMEM` becomes the
    /// hugepage `Error::Skip` with the number of pages needed.
    pub fn map(&self) -> Result<MappedRegion> {
        let len = usize::try_from(self.size)
            .map_err(|_| Error::Usage(format!("memfd size {} bytes exceeds usize", self.size)))?;
        MappedRegion::map_shared(self.fd.as_fd(), len)
            .map_err(|e| hugepage_enomem(e, self.hugepages_needed()))
    }
}

impl AsFd for Memfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

// ---------------------------------------------------------------------------------------------
// udmabuf
// ---------------------------------------------------------------------------------------------

/// A udmabuf: a sealed memfd exported as a dma-buf (the fd bind-rx / bind-tx take) and mapped
/// into this process.
///
/// Field order is drop order: the mapping and the dma-buf fd go first ([`MappedDmaBuf`]),
/// then the memfd.
#[derive(Debug)]
pub struct Udmabuf {
    buf: MappedDmaBuf,
    memfd: Memfd,
}

impl Udmabuf {
    /// Allocates per `params`: [`preflight`] (all skips first), [`Memfd::create`], `open
    /// /dev/udmabuf (O_RDWR|O_CLOEXEC)`, `ioctl(UDMABUF_CREATE, {memfd, UDMABUF_FLAGS_CLOEXEC,
    /// offset 0, size})` whose return is the dma-buf fd, and `mmap(size, RW, MAP_SHARED)` of
    /// it. Ported from ncdevmem.c's udmabuf allocation, with `MFD_CLOEXEC` and
    /// `UDMABUF_FLAGS_CLOEXEC` added.
    ///
    /// Errors: `Error::Skip` (no udmabuf, size limit, hugepages, including an `ENOMEM` from the
    /// kernel for hugetlb), `Error::Usage` for a size that is 0 or not page / 2 MiB aligned,
    /// `Error::Sys` naming the failing step.
    pub fn create(params: &UdmabufParams) -> Result<Udmabuf> {
        let align = if params.hugetlb {
            uapi::HUGEPAGE_2M as u64
        } else {
            sys::page_size() as u64
        };
        if params.size_bytes == 0 || params.size_bytes % align != 0 {
            return Err(Error::Usage(format!(
                "udmabuf size {} bytes is not a non-zero multiple of {align} bytes",
                params.size_bytes
            )));
        }
        preflight(params, &HostPaths::default())?;
        let len = usize::try_from(params.size_bytes).map_err(|_| {
            Error::Usage(format!(
                "udmabuf size {} bytes exceeds usize",
                params.size_bytes
            ))
        })?;
        let memfd = Memfd::create(MEMFD_NAME, params.size_bytes, params.hugetlb)?;
        let dev = open_device(Path::new(UDMABUF_DEV))?;
        let dmabuf = udmabuf_create(dev.as_fd(), &memfd)?;
        drop(dev);
        let buf = MappedDmaBuf::map(dmabuf, len)
            .map_err(|e| hugepage_enomem(e, params.hugepages_needed()))?;
        Ok(Udmabuf { buf, memfd })
    }

    /// The dma-buf fd (what `bind-rx`'s `NETDEV_A_DMABUF_FD` and `bind-tx` take).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.buf.fd()
    }

    /// The backing memfd.
    pub fn memfd(&self) -> &Memfd {
        &self.memfd
    }

    /// Backed by 2 MiB hugepages.
    pub fn is_hugetlb(&self) -> bool {
        self.memfd.is_hugetlb()
    }

    /// Copies `data` into the dma-buf at `offset` (bytes), between
    /// `DMA_BUF_IOCTL_SYNC(START|WRITE)` and `(END|WRITE)` (the TX side). Errors:
    /// `Error::Bounds` before anything is done; `Error::Sys` from either sync.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.buf.write_at(offset, data)
    }
}

/// The frags are read through the mapped dma-buf ([`MappedDmaBuf`]).
impl FragMemory for Udmabuf {
    #[inline]
    fn size(&self) -> usize {
        self.buf.size()
    }

    #[inline]
    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]> {
        self.buf.bytes(offset, len)
    }

    fn begin_cpu_read(&self) -> Result<()> {
        self.buf.begin_cpu_read()
    }

    fn end_cpu_read(&self) -> Result<()> {
        self.buf.end_cpu_read()
    }
}

/// `UDMABUF_CREATE` for the whole of `memfd`: the new dma-buf fd. For hugetlb, `ENOMEM` is the
/// hugepage `Error::Skip`; other errors are `Error::Sys` naming the call.
fn udmabuf_create(dev: BorrowedFd<'_>, memfd: &Memfd) -> Result<OwnedFd> {
    sys::udmabuf::create(dev, memfd.as_fd(), memfd.size()).map_err(|errno| {
        let call = format!(
            "ioctl(UDMABUF_CREATE, memfd {}, offset 0, size {} bytes)",
            memfd.as_fd().as_raw_fd(),
            memfd.size()
        );
        hugepage_enomem(Error::sys(call, errno), memfd.hugepages_needed())
    })
}

// ---------------------------------------------------------------------------------------------
// A dma-buf the CPU maps (udmabuf and dma-heap buffers alike)
// ---------------------------------------------------------------------------------------------

/// A dma-buf mapped `MAP_SHARED` over its whole size, read and written by the CPU only
/// inside `DMA_BUF_IOCTL_SYNC` (START before, END after, with the direction): what udmabuf and
/// dma-heap buffers share. When a view is sound is in this module's docs.
///
/// Field order is drop order: the mapping goes first, then the dma-buf fd.
#[derive(Debug)]
pub struct MappedDmaBuf {
    map: MappedRegion,
    dmabuf: OwnedFd,
}

impl MappedDmaBuf {
    /// `mmap(len, PROT_READ|PROT_WRITE, MAP_SHARED)` of `dmabuf` (`len` bytes, its size).
    ///
    /// Errors: `Error::Usage` for `len == 0`; `Error::Sys` naming the mmap (the caller says
    /// what a refusal means for its source). On error `dmabuf` is closed.
    pub fn map(dmabuf: OwnedFd, len: usize) -> Result<Self> {
        let map = MappedRegion::map_shared(dmabuf.as_fd(), len)?;
        let buf = MappedDmaBuf { map, dmabuf };
        buf.first_touch()?;
        Ok(buf)
    }

    /// The CPU's first access to the mapping, made here, at setup, and not by the first frag
    /// read of a receive worker: one byte read between `DMA_BUF_IOCTL_SYNC(START|READ)` and
    /// `(END|READ)`. What the exporter does once, at the first access, happens now: udmabuf
    /// maps every page of the buffer at a page fault on a mapping with no pages yet (a PAT
    /// lookup per 4 KiB page), under the process's mmap lock, so another thread's `mmap`
    /// (a thread's stack, a large allocation) waits as long. Under TCG on a loaded host the
    /// rx-page-size sweep's workers spent seconds of a 3 s run there, several at once
    /// (`tests/vm/FLAKES.md`).
    ///
    /// Errors: `Error::Sys` from either sync (which the receive's own would meet too).
    fn first_touch(&self) -> Result<()> {
        dma_buf_sync(self.dmabuf.as_fd(), SYNC_START_READ)?;
        // The view is opaque to the optimizer, so its byte is read.
        let read = self
            .map
            .bytes(0, 1)
            .map(|b| std::hint::black_box(std::hint::black_box(b)[0]));
        let ended = dma_buf_sync(self.dmabuf.as_fd(), SYNC_END_READ);
        read.and(ended).map(drop)
    }

    /// The dma-buf fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dmabuf.as_fd()
    }

    /// Copies `data` into the dma-buf at `offset` (bytes), between
    /// `DMA_BUF_IOCTL_SYNC(START|WRITE)` and `(END|WRITE)` (the TX side). Errors:
    /// `Error::Bounds` before anything is done; `Error::Sys` from either sync.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        checked_range("dma-buf write", offset, data.len() as u64, self.map.len())?;
        dma_buf_sync(self.dmabuf.as_fd(), SYNC_START_WRITE)?;
        let written = self.map.write_at(offset, data);
        let ended = dma_buf_sync(self.dmabuf.as_fd(), SYNC_END_WRITE);
        written.and(ended)
    }
}

impl FragMemory for MappedDmaBuf {
    #[inline]
    fn size(&self) -> usize {
        self.map.len()
    }

    #[inline]
    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]> {
        match self.map.bytes(offset, len) {
            Err(Error::Bounds { .. }) => Err(Error::Bounds {
                what: "dma-buf frag".into(),
                offset,
                len,
                region_len: self.map.len() as u64,
            }),
            other => other,
        }
    }

    fn begin_cpu_read(&self) -> Result<()> {
        dma_buf_sync(self.dmabuf.as_fd(), SYNC_START_READ)
    }

    fn end_cpu_read(&self) -> Result<()> {
        dma_buf_sync(self.dmabuf.as_fd(), SYNC_END_READ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE_4K: u64 = 4096;

    #[test]
    fn default_size_is_16000_pages() {
        let p = UdmabufParams::with_page_size(None, None, PAGE_4K).unwrap();
        assert_eq!(
            p,
            UdmabufParams {
                size_bytes: 65_536_000,
                hugetlb: false
            }
        );
        assert_eq!(p.hugepages_needed(), 0);
        // -b equal to the page size does not need hugetlb.
        let p = UdmabufParams::with_page_size(Some(4096), None, PAGE_4K).unwrap();
        assert!(!p.hugetlb);
        assert_eq!(p.size_bytes, 65_536_000);
        // With 64 KiB pages the default follows the page size, never a constant.
        let p = UdmabufParams::with_page_size(None, None, 65_536).unwrap();
        assert_eq!(p.size_bytes, 16000 * 65_536);
    }

    #[test]
    fn hugetlb_rounds_up_to_2mib() {
        let p = UdmabufParams::with_page_size(Some(16384), None, PAGE_4K).unwrap();
        assert_eq!(
            p,
            UdmabufParams {
                size_bytes: 67_108_864,
                hugetlb: true
            }
        );
        assert_eq!(p.hugepages_needed(), 32);
        let p = UdmabufParams::with_page_size(Some(8192), Some(1), PAGE_4K).unwrap();
        assert_eq!(p.size_bytes, 2 << 20);
        assert_eq!(p.hugepages_needed(), 1);
        let p = UdmabufParams::with_page_size(Some(8192), Some(4 << 20), PAGE_4K).unwrap();
        assert_eq!(p.size_bytes, 4 << 20);
        assert_eq!(p.hugepages_needed(), 2);
    }

    #[test]
    fn requested_size_rounds_to_pages_and_rejects_zero_and_overflow() {
        let p = UdmabufParams::with_page_size(None, Some(5000), PAGE_4K).unwrap();
        assert_eq!(p.size_bytes, 8192);
        let e = UdmabufParams::with_page_size(None, Some(0), PAGE_4K).unwrap_err();
        assert!(
            matches!(e, Error::Usage(ref m) if m.contains("0 bytes")),
            "{e}"
        );
        let e = UdmabufParams::with_page_size(Some(8192), Some(u64::MAX), PAGE_4K).unwrap_err();
        assert!(
            matches!(e, Error::Usage(ref m) if m.contains("rounded up")),
            "{e}"
        );
    }

    #[test]
    fn size_limit_refuses_only_above_the_limit() {
        // Exactly 64 MiB is allowed (the kernel's check is `>`).
        check_size_limit(67_108_864, 64).unwrap();
        check_size_limit(65_536_000, 64).unwrap();
        let e = check_size_limit(67_108_864 + 4096, 64).unwrap_err();
        assert_eq!(e.exit_code(), 4);
        let msg = e.to_string();
        assert!(msg.contains("67112960 bytes"), "{msg}");
        assert!(msg.contains("size_limit_mb of 64 MiB"), "{msg}");
        assert!(msg.contains(SIZE_LIMIT_MB_PATH), "{msg}");
        // A huge limit must not overflow.
        check_size_limit(u64::MAX, u64::MAX).unwrap();
    }

    #[test]
    fn size_limit_file_parses_and_rejects_garbage() {
        assert_eq!(parse_size_limit_mb("64\n").unwrap(), 64);
        assert_eq!(parse_size_limit_mb("  128 ").unwrap(), 128);
        for bad in [
            "",
            "\n",
            "sixty-four",
            "-1",
            "64 MiB",
            "99999999999999999999999",
        ] {
            let e = parse_size_limit_mb(bad).unwrap_err();
            assert!(
                matches!(e, Error::Decode { ref what, .. } if what == SIZE_LIMIT_MB_PATH),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn sync_flag_names() {
        assert_eq!(sync_flags_name(SYNC_START_READ), "START|READ");
        assert_eq!(sync_flags_name(SYNC_END_READ), "END|READ");
        assert_eq!(sync_flags_name(SYNC_START_WRITE), "START|WRITE");
        assert_eq!(sync_flags_name(SYNC_END_WRITE), "END|WRITE");
        assert_eq!(sync_flags_name(uapi::DMA_BUF_SYNC_END), "END|no direction");
        assert_eq!(sync_flags_name(0x9), "START|READ|0x8");
        assert_eq!(SYNC_START_READ, 1);
        assert_eq!(SYNC_END_READ, 5);
        assert_eq!(SYNC_START_WRITE, 2);
        assert_eq!(SYNC_END_WRITE, 6);
    }

    #[test]
    fn hugepage_skip_names_the_count_and_sysctl() {
        let s = HugepageStatus {
            nr: 4,
            free: 3,
            resv: 1,
        };
        assert_eq!(s.available(), 2);
        s.require(2).unwrap();
        let e = s.require(32).unwrap_err();
        assert_eq!(e.exit_code(), 4);
        assert_eq!(
            e.to_string(),
            "skip: need 32 free 2 MiB hugepages, have 2; raise vm.nr_hugepages \
             (now 4; e.g. `sysctl vm.nr_hugepages=34`)"
        );
    }

    /// A temporary directory with fake sysfs/procfs/dev files, removed on drop.
    struct FakeHost {
        _dir: crate::memory::TempDir,
        paths: HostPaths,
    }

    impl FakeHost {
        fn new() -> Self {
            let dir = crate::memory::TempDir::new("udmabuf");
            let at = |name: &str| dir.0.join(name);
            let paths = HostPaths {
                udmabuf_dev: at("udmabuf"),
                size_limit_mb: at("size_limit_mb"),
                nr_hugepages: at("nr_hugepages"),
                free_hugepages: at("free_hugepages"),
                resv_hugepages: at("resv_hugepages"),
            };
            FakeHost { _dir: dir, paths }
        }

        fn write(&self, path: &Path, contents: &str) {
            std::fs::write(path, contents).expect("write fake file");
        }
    }

    #[test]
    fn preflight_checks_in_order_and_names_the_reason() {
        let host = FakeHost::new();
        let huge = UdmabufParams {
            size_bytes: 64 << 20,
            hugetlb: true,
        };
        host.write(&host.paths.free_hugepages, "0\n");
        // 1. No device: the udmabuf skip wins over the hugepage shortage.
        let e = preflight(&huge, &host.paths).unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.exit_code(), 4);
        assert!(msg.contains("CONFIG_UDMABUF"), "{msg}");
        assert!(
            msg.contains(&host.paths.udmabuf_dev.display().to_string()),
            "{msg}"
        );
        // 2. Device present, size limit 32 MiB: refused by the limit.
        host.write(&host.paths.udmabuf_dev, "");
        host.write(&host.paths.size_limit_mb, "32\n");
        let msg = preflight(&huge, &host.paths).unwrap_err().to_string();
        assert!(msg.contains("size_limit_mb of 32 MiB"), "{msg}");
        // Garbage in the limit file is a decode error, not a panic.
        host.write(&host.paths.size_limit_mb, "lots\n");
        assert!(matches!(
            preflight(&huge, &host.paths),
            Err(Error::Decode { .. })
        ));
        // 3. Limit 64 MiB: exactly 64 MiB passes the limit, then the hugepage count fails.
        host.write(&host.paths.size_limit_mb, "64\n");
        host.write(&host.paths.nr_hugepages, "0\n");
        let msg = preflight(&huge, &host.paths).unwrap_err().to_string();
        assert!(
            msg.contains("need 32 free 2 MiB hugepages, have 0; raise vm.nr_hugepages"),
            "{msg}"
        );
        // The device-and-limit part alone leaves the hugepage count to the caller.
        preflight_device(&huge, &host.paths).unwrap();
        // Reserved pages are not available.
        host.write(&host.paths.nr_hugepages, "32\n");
        host.write(&host.paths.free_hugepages, "32\n");
        host.write(&host.paths.resv_hugepages, "1\n");
        let msg = preflight(&huge, &host.paths).unwrap_err().to_string();
        assert!(msg.contains("have 31"), "{msg}");
        host.write(&host.paths.resv_hugepages, "0\n");
        preflight(&huge, &host.paths).unwrap();
        // Without hugetlb the pool is not consulted, and a missing limit file means no limit.
        std::fs::remove_file(&host.paths.free_hugepages).unwrap();
        std::fs::remove_file(&host.paths.size_limit_mb).unwrap();
        let plain = UdmabufParams {
            size_bytes: 128 << 20,
            hugetlb: false,
        };
        preflight(&plain, &host.paths).unwrap();
        // A missing 2 MiB pool is a skip for hugetlb.
        let msg = preflight(&huge, &host.paths).unwrap_err().to_string();
        assert!(msg.contains("no 2 MiB hugepage pool"), "{msg}");
    }
}
