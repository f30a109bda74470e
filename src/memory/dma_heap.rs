//! The dma-buf heap source: `open(/dev/dma_heap/NAME)` → `DMA_HEAP_IOCTL_ALLOC` →
//! `mmap(MAP_SHARED)` of the dma-buf, read and written inside `DMA_BUF_IOCTL_SYNC` exactly as a
//! udmabuf ([`MappedDmaBuf`]). The calls are in [`crate::sys::dma_heap`]; this module decides
//! what their answers mean.
//!
//! Refusals that make the run a skip (exit 4), each with the kernel's answer: no
//! `/dev/dma_heap` (a kernel without `CONFIG_DMABUF_HEAPS`), no heap of that name, no access,
//! `ENOMEM` for the size asked, an mmap refusal, and an rx-page-size the heap cannot serve
//! (before anything is created when the heap's chunk sizes are known, and the kernel's bind-rx
//! refusal of a scatter-gather entry that is not aligned to the niov size otherwise).
//!
//! The system heap (`drivers/dma-buf/heaps/system_heap.c`) builds a buffer from 1 MiB chunks
//! while the remaining length allows one and a 1 MiB page is free, then 64 KiB chunks, then
//! single pages; its 1 MiB and 64 KiB attempts give up rather than reclaim. Every chunk is one
//! scatter-gather entry, naturally aligned. So it promises nothing beyond the page size: a
//! niov above it binds only when every chunk came out at least that large
//! (`docs/kernel-7.3-devmem-nic.md`, "Memory sources").

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::MappedDmaBuf;
use crate::caps::{classify, Missing, Op};
use crate::error::{Error, Result};
use crate::sys;

/// Where the kernel's dma-buf heaps appear, one character device per heap
/// (`CONFIG_DMABUF_HEAPS`).
pub const DMA_HEAP_DIR: &str = "/dev/dma_heap";

/// The heap `dma-heap` without a name means: the system heap (`CONFIG_DMABUF_HEAPS_SYSTEM`),
/// pages from the buddy allocator.
pub const DEFAULT_HEAP: &str = "system";

/// The system heap's chunk sizes above a page, in bytes, largest first (1 MiB and 64 KiB;
/// then single pages).
pub const SYSTEM_HEAP_CHUNKS: [u64; 2] = [1 << 20, 64 << 10];

/// Where [`preflight`] reads `MemAvailable`.
pub const MEMINFO_PATH: &str = "/proc/meminfo";

/// What to allocate from a heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapParams {
    /// The heap: the name of an entry of [`DMA_HEAP_DIR`].
    pub name: String,
    /// Size in bytes: a multiple of the page size, and with `-b` above the page size of the
    /// niov size (for the system heap: of the smallest chunk that holds whole niovs).
    pub size_bytes: u64,
    /// `-b` as requested (bytes).
    pub rx_page_size: Option<u32>,
}

impl HeapParams {
    /// The allocation from heap `name` for rx-page-size `rx_page_size` (bytes, `-b`; `None` =
    /// not given) and an explicitly requested size in bytes (`None` = ncdevmem's default of
    /// [`crate::udmabuf::DEFAULT_NUM_PAGES`] pages), with the system page size.
    ///
    /// See [`HeapParams::with_page_size`] for the rules and errors.
    pub fn new(name: &str, rx_page_size: Option<u32>, requested_size: Option<u64>) -> Result<Self> {
        Self::with_page_size(name, rx_page_size, requested_size, sys::page_size() as u64)
    }

    /// As [`HeapParams::new`] with an explicit page size in bytes (pure; used by tests).
    ///
    /// The size is rounded up to a multiple of the page size; with `-b N` above the page size
    /// to a multiple of `N`, and for the system heap to a multiple of the smallest of its
    /// chunks ([`SYSTEM_HEAP_CHUNKS`]) that is at least `N`, so no tail is left to single
    /// pages (the default 16000 × 4 KiB = 65,536,000 bytes is already 1000 chunks of 64 KiB).
    /// Errors: `Error::Usage` for a requested size of 0 or one whose rounding overflows.
    pub fn with_page_size(
        name: &str,
        rx_page_size: Option<u32>,
        requested_size: Option<u64>,
        page_size: u64,
    ) -> Result<Self> {
        let base = match requested_size {
            Some(0) => {
                return Err(Error::Usage(
                    "dma-heap size must be at least one page, not 0 bytes".into(),
                ))
            }
            Some(n) => n,
            None => crate::udmabuf::DEFAULT_NUM_PAGES
                .checked_mul(page_size)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "dma-heap default size overflows with page size {page_size}"
                    ))
                })?,
        };
        let niov = rx_page_size.map_or(page_size, |b| u64::from(b).max(page_size));
        let align = match SYSTEM_HEAP_CHUNKS.iter().rev().find(|&&c| c >= niov) {
            Some(&chunk) if name == DEFAULT_HEAP && niov > page_size && chunk % niov == 0 => chunk,
            _ => niov,
        };
        let size_bytes = sys::align_up(base, align).ok_or_else(|| {
            Error::Usage(format!(
                "dma-heap size {base} bytes cannot be rounded up to a multiple of {align} bytes"
            ))
        })?;
        Ok(HeapParams {
            name: name.to_string(),
            size_bytes,
            rx_page_size,
        })
    }
}

/// The heaps in `dir` (normally [`DMA_HEAP_DIR`]), sorted by name: a plain directory read.
/// Errors: the errno of the read (`ENOENT` when there is no such directory).
pub fn list_heaps(dir: &Path) -> std::result::Result<Vec<String>, i32> {
    let entries = std::fs::read_dir(dir).map_err(|e| crate::error::errno_of(&e))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// Opens heap `params.name` in `dir`. Errors: `Error::Skip` when `dir` does not exist
/// (naming `CONFIG_DMABUF_HEAPS`), when it has no such heap (naming the heaps it has), or
/// without access ([`classify`] with [`Op::DmaHeapOpen`]); `Error::Sys` for any other errno.
/// Each names the kernel's answer.
fn open(params: &HeapParams, dir: &Path) -> Result<OwnedFd> {
    let path = dir.join(&params.name);
    sys::dma_heap::open_heap(&path).map_err(|errno| {
        let dir_exists =
            !matches!(std::fs::metadata(dir), Err(e) if e.kind() == ErrorKind::NotFound);
        let heaps = list_heaps(dir).ok();
        let op = Op::DmaHeapOpen {
            name: &params.name,
            path: &path,
            dir,
            heaps: heaps.as_deref(),
            dir_exists,
        };
        classify(Error::sys(format!("open({})", path.display()), errno), op)
    })
}

/// Whether heap `params.name` can serve `params.rx_page_size` (pure). Only the system heap's
/// chunk sizes are known: an rx-page-size above its largest chunk (1 MiB) can never bind over
/// it, since every scatter-gather entry must be aligned to the niov size. Other heaps, and
/// sizes up to a chunk, are left to the kernel's bind (see [`bind_refusal`]).
///
/// Errors: `Error::Skip` naming the heap, the size and why.
pub fn check_rx_page_size(params: &HeapParams, page_size: u64) -> Result<()> {
    let Some(niov) = params
        .rx_page_size
        .map(u64::from)
        .filter(|&n| n > page_size)
    else {
        return Ok(());
    };
    let largest = SYSTEM_HEAP_CHUNKS[0];
    if params.name == DEFAULT_HEAP && niov > largest {
        return Err(Error::Skip(Missing::DmaHeapChunks {
            name: params.name.clone(),
            rx_page_size: niov,
            largest,
        }));
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`'s text, in bytes (the file says kB); `None` when the
/// line is missing or garbled.
pub(crate) fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kb.checked_mul(1024)
}

/// Refuses a system-heap allocation larger than the memory available (`available` bytes,
/// `None` = unknown: not checked). 7.3's system heap does not refuse such a request: it takes
/// pages until the OOM killer ends processes (the VM suite's guest lost its test programs
/// that way), so the tool asks first. Other heaps draw from their own regions and are left to
/// the kernel. Errors: `Error::Skip` naming both sizes.
pub fn check_available(params: &HeapParams, available: Option<u64>) -> Result<()> {
    match available {
        Some(available) if params.name == DEFAULT_HEAP && params.size_bytes > available => {
            Err(Error::Skip(Missing::DmaHeapAvailable {
                name: params.name.clone(),
                size_bytes: params.size_bytes,
                available,
            }))
        }
        _ => Ok(()),
    }
}

/// Everything that makes an allocation from `params` a skip, before anything is created:
/// the heap opens (opened and closed again; the skips of a missing directory, heap or
/// access), can serve the rx-page-size ([`check_rx_page_size`]) and, for the system heap, the
/// size fits the memory available ([`check_available`], `MemAvailable` of [`MEMINFO_PATH`]).
/// `dir` is normally [`DMA_HEAP_DIR`].
pub fn preflight(params: &HeapParams, dir: &Path) -> Result<()> {
    drop(open(params, dir)?);
    check_rx_page_size(params, sys::page_size() as u64)?;
    let meminfo = std::fs::read_to_string(MEMINFO_PATH).ok();
    check_available(params, meminfo.as_deref().and_then(mem_available))
}

/// Allocates and maps `params.size_bytes` from the heap in [`DMA_HEAP_DIR`]; see
/// [`allocate_at`].
pub fn allocate(params: &HeapParams) -> Result<MappedDmaBuf> {
    allocate_at(params, Path::new(DMA_HEAP_DIR))
}

/// [`preflight`], `open(dir/NAME, O_RDONLY|O_CLOEXEC)`, `ioctl(DMA_HEAP_IOCTL_ALLOC, {len,
/// O_RDWR|O_CLOEXEC})` whose `fd` is the dma-buf, and `mmap(len, RW, MAP_SHARED)` of it.
///
/// Errors: `Error::Skip` for the preflight's refusals, `ENOMEM` from the allocation (naming
/// the size asked, [`alloc_refusal`]) and any mmap refusal (with the kernel's answer);
/// `Error::Usage` for a size that does not fit `usize`; `Error::Sys` naming the ioctl for any
/// other errno.
pub fn allocate_at(params: &HeapParams, dir: &Path) -> Result<MappedDmaBuf> {
    preflight(params, dir)?;
    let heap = open(params, dir)?;
    let size = params.size_bytes;
    let len = usize::try_from(size)
        .map_err(|_| Error::Usage(format!("dma-heap size {size} bytes exceeds usize")))?;
    let path = dir.join(&params.name);
    let dmabuf = sys::dma_heap::alloc(heap.as_fd(), size)
        .map_err(|errno| alloc_refusal(params, &path, errno))?;
    drop(heap);
    MappedDmaBuf::map(dmabuf, len).map_err(|e| match e {
        e @ Error::Sys { .. } => classify(
            e,
            Op::DmaHeapMap {
                name: &params.name,
                size_bytes: size,
            },
        ),
        other => other,
    })
}

/// What a failed `DMA_HEAP_IOCTL_ALLOC` on the heap at `path` with `errno` means: `ENOMEM`
/// is a skip naming the size asked ([`classify`] with [`Op::DmaHeapAlloc`]); anything else
/// `Error::Sys` naming the ioctl.
pub fn alloc_refusal(params: &HeapParams, path: &Path, errno: i32) -> Error {
    let size_bytes = params.size_bytes;
    let call = format!(
        "ioctl({}, DMA_HEAP_IOCTL_ALLOC, len {size_bytes} bytes)",
        path.display()
    );
    let op = Op::DmaHeapAlloc {
        name: &params.name,
        size_bytes,
    };
    classify(Error::sys(call, errno), op)
}

/// What bind-rx refusal `e` of a buffer from `params` means: `EINVAL` with the kernel's
/// "dmabuf sg entry (addr=…, len=…) not aligned to niov size N" is a skip (this heap's
/// buffer came out in chunks smaller than the niov; the heap promises nothing above the page
/// size; [`classify`] with [`Op::DmaHeapBind`]); anything else is returned unchanged.
pub fn bind_refusal(params: &HeapParams, e: Error) -> Error {
    let op = Op::DmaHeapBind {
        name: &params.name,
        rx_page_size: params.rx_page_size,
    };
    classify(e, op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NlError;

    const PAGE_4K: u64 = 4096;

    #[test]
    fn sizes_follow_the_niov_and_the_system_heaps_chunks() {
        let p = |name, b, size| HeapParams::with_page_size(name, b, size, PAGE_4K).unwrap();
        // The default: 16000 pages, as udmabuf.
        assert_eq!(p("system", None, None).size_bytes, 65_536_000);
        assert_eq!(p("system", Some(4096), None).size_bytes, 65_536_000);
        // 16 KiB and 64 KiB niovs: whole 64 KiB chunks (the default already is).
        assert_eq!(p("system", Some(16384), None).size_bytes, 65_536_000);
        assert_eq!(p("system", Some(16384), Some(5000)).size_bytes, 64 << 10);
        assert_eq!(
            p("system", Some(65536), Some((64 << 20) + 1)).size_bytes,
            (64 << 20) + (64 << 10)
        );
        // Above 64 KiB: whole 1 MiB chunks.
        assert_eq!(p("system", Some(131072), None).size_bytes, 63 << 20);
        // Another heap: only the niov's multiple.
        assert_eq!(p("reserved", Some(16384), Some(5000)).size_bytes, 16384);
        assert_eq!(p("reserved", None, Some(5000)).size_bytes, 8192);
        // Above the largest chunk: the niov's multiple (check_rx_page_size refuses it).
        assert_eq!(p("system", Some(2 << 20), Some(1)).size_bytes, 2 << 20);
        let e = HeapParams::with_page_size("system", None, Some(0), PAGE_4K).unwrap_err();
        assert!(
            matches!(&e, Error::Usage(m) if m.contains("0 bytes")),
            "{e}"
        );
        let e = HeapParams::with_page_size("system", None, Some(u64::MAX), PAGE_4K).unwrap_err();
        assert!(
            matches!(&e, Error::Usage(m) if m.contains("rounded up")),
            "{e}"
        );
    }

    #[test]
    fn the_system_heap_cannot_serve_niovs_above_its_largest_chunk() {
        let p = |name: &str, b| HeapParams::with_page_size(name, b, None, PAGE_4K).unwrap();
        for b in [None, Some(4096), Some(16384), Some(65536), Some(1 << 20)] {
            check_rx_page_size(&p("system", b), PAGE_4K).unwrap();
        }
        let e = check_rx_page_size(&p("system", Some(2 << 20)), PAGE_4K).unwrap_err();
        assert_eq!(e.exit_code(), 4);
        assert_eq!(
            e.to_string(),
            "skip: -b 2097152: dma-heap system cannot serve an rx-page-size of 2097152 bytes: \
             it builds buffers from chunks of at most 1048576 bytes (1 MiB, then 64 KiB, then \
             single pages), and bind-rx needs every scatter-gather entry aligned to the niov \
             size; udmabuf (hugetlb) serves it"
        );
        // Another heap's chunks are not known: the bind decides.
        check_rx_page_size(&p("reserved", Some(2 << 20)), PAGE_4K).unwrap();
    }

    /// The refusal the 7.3 kernel gave for a system-heap buffer of 1 MiB + 4 KiB with
    /// rx-page-size 16384 (docs/kernel-7.3-devmem-nic.md, measured in the VM suite's
    /// `devmem-nic/dma-heap-large-niov`): the extack is cut at 79 characters.
    fn sg_refusal() -> Error {
        Error::Netlink(Box::new(NlError {
            ext_msg: Some(
                "dmabuf sg entry (addr=0x000000000296c000, len=4096) not aligned to niov size 16"
                    .into(),
            ),
            ..NlError::refusal(
                "netdev",
                "bind-rx",
                "dnic60a (ifindex 9), queue 3",
                libc::EINVAL,
            )
        }))
    }

    #[test]
    fn an_unaligned_sg_entry_is_a_skip_and_other_refusals_pass_through() {
        let params = HeapParams::with_page_size("system", Some(16384), None, PAGE_4K).unwrap();
        let e = bind_refusal(&params, sg_refusal());
        assert_eq!(e.exit_code(), 4, "{e}");
        let m = e.to_string();
        assert!(
            m.starts_with("skip: dma-heap system cannot serve rx-page-size 16384: netdev bind-rx"),
            "{m}"
        );
        assert!(
            m.contains("EINVAL") && m.contains("len=4096) not aligned to niov size 16\""),
            "{m}"
        );
        // Another EINVAL (header split off) stays a failure.
        let Error::Netlink(mut nl) = sg_refusal() else {
            unreachable!()
        };
        nl.ext_msg = Some("tcp-data-split is disabled".into());
        let e = bind_refusal(&params, Error::Netlink(nl));
        assert_eq!(e.exit_code(), 1, "{e}");
        let e = bind_refusal(&params, Error::sys("bind", libc::EINVAL));
        assert!(matches!(e, Error::Sys { .. }), "{e}");
    }

    #[test]
    fn the_system_heap_is_not_asked_for_more_than_is_available() {
        let meminfo = "MemTotal:         981964 kB\nMemFree:          700000 kB\n\
                       MemAvailable:     812344 kB\nBuffers:              0 kB\n";
        assert_eq!(mem_available(meminfo), Some(812_344 * 1024));
        for bad in ["", "MemAvailable: lots kB\n", "MemAvailable: 5 MB\n"] {
            assert_eq!(mem_available(bad), None, "{bad:?}");
        }
        let p = |name: &str, size| HeapParams::with_page_size(name, None, Some(size), PAGE_4K);
        let avail = Some(812_344 * 1024);
        check_available(&p("system", 64 << 20).unwrap(), avail).unwrap();
        check_available(&p("system", 812_344 * 1024).unwrap(), avail).unwrap();
        let e = check_available(&p("system", 1 << 40).unwrap(), avail).unwrap_err();
        assert_eq!(e.exit_code(), 4);
        assert_eq!(
            e.to_string(),
            "skip: dma-heap system cannot allocate 1099511627776 bytes: only 831840256 bytes \
             are available (MemAvailable in /proc/meminfo), and the system heap takes pages \
             until the OOM killer steps in rather than refuse; choose a smaller size"
        );
        // Unknown memory, or another heap: the kernel decides.
        check_available(&p("system", 1 << 40).unwrap(), None).unwrap();
        check_available(&p("reserved", 1 << 40).unwrap(), avail).unwrap();
    }

    #[test]
    fn enomem_from_the_allocation_is_a_skip_naming_the_size() {
        let params = HeapParams::with_page_size("system", None, Some(64 << 20), PAGE_4K).unwrap();
        let path = Path::new("/dev/dma_heap/system");
        let e = alloc_refusal(&params, path, libc::ENOMEM);
        assert_eq!(
            e.to_string(),
            "skip: dma-heap system cannot allocate 67108864 bytes: ioctl(/dev/dma_heap/system, \
             DMA_HEAP_IOCTL_ALLOC, len 67108864 bytes): ENOMEM (Cannot allocate memory); choose \
             a smaller size or free memory"
        );
        let e = alloc_refusal(&params, path, libc::EINVAL);
        assert!(
            matches!(
                e,
                Error::Sys {
                    errno: libc::EINVAL,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn preflight_names_the_missing_directory_and_the_missing_heap() {
        let fake = crate::memory::TempDir::new("dma-heap");
        let params = HeapParams::new("system", None, None).unwrap();
        let gone = fake.0.join("absent");
        let e = preflight(&params, &gone).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        let m = e.to_string();
        assert!(m.starts_with("skip: no dma-buf heaps: cannot open "), "{m}");
        assert!(m.contains("(ENOENT (No such file or directory))"), "{m}");
        assert!(m.contains("CONFIG_DMABUF_HEAPS"), "{m}");
        // The directory exists with other heaps: the skip lists them.
        std::fs::write(fake.0.join("reserved"), "").unwrap();
        std::fs::write(fake.0.join("cma"), "").unwrap();
        let m = preflight(&params, &fake.0).unwrap_err().to_string();
        assert!(
            m.starts_with("skip: no dma-buf heap named \"system\": cannot open "),
            "{m}"
        );
        assert!(m.ends_with("this host's heaps: cma, reserved"), "{m}");
        assert_eq!(list_heaps(&fake.0).unwrap(), ["cma", "reserved"]);
        assert_eq!(list_heaps(&gone), Err(libc::ENOENT));
        // An entry that opens passes the preflight; allocating from a file that is no heap is
        // the kernel's ENOTTY, a failure (not a skip), naming the ioctl.
        let reserved = HeapParams::new("reserved", None, Some(4096)).unwrap();
        preflight(&reserved, &fake.0).unwrap();
        let e = allocate_at(&reserved, &fake.0).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Sys {
                    errno: libc::ENOTTY,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("DMA_HEAP_IOCTL_ALLOC, len 4096 bytes"),
            "{e}"
        );
    }
}
