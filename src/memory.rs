//! Where a run's dma-buf comes from: the one memory-source seam the devmem receive and send
//! paths use, so that what the kernel binds (a dma-buf fd) and what the CPU validates (a
//! mapping, or a copy) do not depend on who exported the buffer.
//!
//! A module of its own rather than a part of `udmabuf.rs`: udmabuf is one source among
//! several, and the policy that picks a source, sizes it and words its refusals must not grow
//! inside one of them. The seam is three types, resolved once per run:
//!
//! * [`MemorySource`]: what the user asked for (`udmabuf`, `dma-heap[:NAME]`), parsed from
//!   the command line;
//! * [`MemoryPlan`]: the source with its size resolved from `-b` and `--dmabuf-size`; its
//!   [`preflight`](MemoryPlan::preflight) finds every skip before anything is created, and
//!   [`allocate`](MemoryPlan::allocate) makes the buffer;
//! * [`Memory`]: the allocated buffer. [`Memory::fd`] is what bind-rx and bind-tx take; the
//!   receive loop (`rx::receive`, generic over [`FragMemory`]) and the devmem sender
//!   (`tx::transmit`, generic over [`TxMemory`]) get the concrete buffer through
//!   [`with_memory!`](crate::with_memory), which matches the variant once, outside the loop, so the
//!   per-frag path is monomorphised for each source and never branches on it.
//!
//! Sources: [`crate::udmabuf`] (a memfd exported by `/dev/udmabuf`, hugetlb for large niovs;
//! today's behaviour, the default) and [`dma_heap`] (`/dev/dma_heap/NAME`, default `system`).
//! Both hand out a dma-buf the CPU can map, read through [`MappedDmaBuf`]. A source without a
//! CPU mapping (GPU memory) adds one variant here and one implementation of
//! [`DmaBufMemory`] in a module of its own; `docs/architecture.md` ("Memory sources") says
//! what it must provide.

pub mod dma_heap;

use std::fmt;
use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::udmabuf::{self, FragMemory, HostPaths, Udmabuf, UdmabufParams};

// ---------------------------------------------------------------------------------------------
// The source the user asked for
// ---------------------------------------------------------------------------------------------

/// Which exporter the run's dma-buf comes from (`--memory`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemorySource {
    /// A memfd exported through `/dev/udmabuf` (hugetlb when `-b` exceeds the page size): C
    /// ncdevmem's memory and the default.
    #[default]
    Udmabuf,
    /// A dma-buf heap, `/dev/dma_heap/<name>` (`system` unless named).
    DmaHeap(String),
}

impl MemorySource {
    /// Parses `udmabuf`, `dma-heap` (the [`dma_heap::DEFAULT_HEAP`]) or `dma-heap:NAME`
    /// (pure; the command line words the refusal, [`MemorySource::EXPECTED`]).
    ///
    /// `None` for any other word, and for a heap name that is empty, `.` or `..`, or holds a
    /// `/` or a NUL byte (it must be one entry of `/dev/dma_heap`).
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            None if text == "udmabuf" => Some(MemorySource::Udmabuf),
            None if text == "dma-heap" => {
                Some(MemorySource::DmaHeap(dma_heap::DEFAULT_HEAP.to_string()))
            }
            Some(("dma-heap", name)) => {
                let bad =
                    name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
                (!bad).then(|| MemorySource::DmaHeap(name.to_string()))
            }
            _ => None,
        }
    }

    /// What [`MemorySource::parse`] accepts, for usage messages.
    pub const EXPECTED: &'static str =
        "udmabuf, dma-heap or dma-heap:NAME, NAME an entry of /dev/dma_heap";
}

impl fmt::Display for MemorySource {
    /// `udmabuf` or `dma-heap:NAME`: the form [`MemorySource::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemorySource::Udmabuf => f.write_str("udmabuf"),
            MemorySource::DmaHeap(name) => write!(f, "dma-heap:{name}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The plan: source and size, checked before anything is created
// ---------------------------------------------------------------------------------------------

/// What a run will allocate: the source with its size resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryPlan {
    /// udmabuf sizes: page multiples, or 2 MiB hugetlb for `-b` above the page size.
    Udmabuf(UdmabufParams),
    /// A dma-heap allocation.
    DmaHeap(dma_heap::HeapParams),
}

impl MemoryPlan {
    /// The plan for `source` with rx-page-size `rx_page_size` (bytes, `-b`; `None` = not
    /// given) and an explicitly requested size in bytes (`--dmabuf-size`; `None` = ncdevmem's
    /// default of [`udmabuf::DEFAULT_NUM_PAGES`] pages). Pure: nothing is opened.
    ///
    /// Errors: `Error::Usage` for a size of 0 or one whose rounding overflows
    /// ([`UdmabufParams::new`], [`dma_heap::HeapParams::new`]).
    pub fn new(
        source: &MemorySource,
        rx_page_size: Option<u32>,
        requested_size: Option<u64>,
    ) -> Result<Self> {
        Ok(match source {
            MemorySource::Udmabuf => {
                MemoryPlan::Udmabuf(UdmabufParams::new(rx_page_size, requested_size)?)
            }
            MemorySource::DmaHeap(name) => MemoryPlan::DmaHeap(dma_heap::HeapParams::new(
                name,
                rx_page_size,
                requested_size,
            )?),
        })
    }

    /// The source this plan allocates from.
    pub fn source(&self) -> MemorySource {
        match self {
            MemoryPlan::Udmabuf(_) => MemorySource::Udmabuf,
            MemoryPlan::DmaHeap(p) => MemorySource::DmaHeap(p.name.clone()),
        }
    }

    /// The dma-buf size in bytes.
    pub fn size_bytes(&self) -> u64 {
        match self {
            MemoryPlan::Udmabuf(p) => p.size_bytes,
            MemoryPlan::DmaHeap(p) => p.size_bytes,
        }
    }

    /// 2 MiB hugepages the allocation needs (0 for every source but a hugetlb udmabuf). The
    /// mode waits for them (a previous binding may still hold them) after
    /// [`preflight`](Self::preflight).
    pub fn hugepages_needed(&self) -> u64 {
        match self {
            MemoryPlan::Udmabuf(p) => p.hugepages_needed(),
            MemoryPlan::DmaHeap(_) => 0,
        }
    }

    /// The source for log lines: `udmabuf`, `udmabuf, hugetlb` or `dma-heap system`.
    pub fn describe(&self) -> String {
        match self {
            MemoryPlan::Udmabuf(p) if p.hugetlb => "udmabuf, hugetlb".into(),
            MemoryPlan::Udmabuf(_) => "udmabuf".into(),
            MemoryPlan::DmaHeap(p) => format!("dma-heap {}", p.name),
        }
    }

    /// Everything that makes the run a skip, before anything is created or changed, on the
    /// real system:
    ///
    /// * udmabuf: [`udmabuf::preflight_device`] (the device opens, the size fits
    ///   `size_limit_mb`); the hugepage count is left to the mode
    ///   ([`hugepages_needed`](Self::hugepages_needed));
    /// * dma-heap: [`dma_heap::preflight`] (`/dev/dma_heap` exists, the named heap opens, the
    ///   heap can serve the rx-page-size, and a system-heap size fits `MemAvailable`).
    ///
    /// Errors: `Error::Skip` naming what is missing and the kernel's answer; `Error::Sys` or
    /// `Error::Decode` for what cannot be read.
    pub fn preflight(&self) -> Result<()> {
        match self {
            MemoryPlan::Udmabuf(p) => udmabuf::preflight_device(p, &HostPaths::default()),
            MemoryPlan::DmaHeap(p) => dma_heap::preflight(p, dma_heap::DMA_HEAP_DIR.as_ref()),
        }
    }

    /// Allocates and maps the buffer: [`Udmabuf::create`] or [`dma_heap::allocate`] (each
    /// runs its preflight again first).
    ///
    /// Errors: the source's skips (`Error::Skip`, with the kernel's answer: no device, no
    /// such heap, `ENOMEM` for the size asked, an mmap refusal), `Error::Sys` naming the step
    /// that failed otherwise.
    pub fn allocate(&self) -> Result<Memory> {
        Ok(match self {
            MemoryPlan::Udmabuf(p) => Memory::Udmabuf(Udmabuf::create(p)?),
            MemoryPlan::DmaHeap(p) => Memory::DmaHeap(dma_heap::allocate(p)?),
        })
    }

    /// What a bind-rx refusal `e` of this plan's buffer means: for a dma-heap buffer, the
    /// kernel's `EINVAL` for a scatter-gather entry not aligned to the niov size (the heap
    /// fell back to smaller pages than `-b` needs) is a skip naming the heap and the kernel's
    /// answer ([`dma_heap::bind_refusal`]); everything else is returned unchanged.
    pub fn bind_refusal(&self, e: Error) -> Error {
        match self {
            MemoryPlan::Udmabuf(_) => e,
            MemoryPlan::DmaHeap(p) => dma_heap::bind_refusal(p, e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The allocated buffer
// ---------------------------------------------------------------------------------------------

/// The dma-buf as the sender writes it.
pub trait TxMemory {
    /// Size in bytes.
    fn size(&self) -> usize;

    /// Copies `data` to byte `offset`, inside CPU-write access (`DMA_BUF_IOCTL_SYNC`
    /// `START|WRITE` before, `END|WRITE` after, for a dma-buf). `Error::Bounds` when it does
    /// not fit.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;

    /// Where byte 0 of this memory sits in the bound dma-buf, in bytes: what the sender adds
    /// to its offsets in the iovs it hands the kernel. 0 for a whole dma-buf; the start of
    /// the window for a devmem TX flow's window (`tx::devmem::DmabufWindow`).
    fn dmabuf_offset(&self) -> u64 {
        0
    }
}

/// What every memory source's buffer gives the devmem paths: the dma-buf fd the kernel binds,
/// the frag views the receive loop validates ([`FragMemory`]) and the writes the devmem
/// sender makes ([`TxMemory`]).
pub trait DmaBufMemory: FragMemory + TxMemory {
    /// The dma-buf fd (what `bind-rx`'s `NETDEV_A_DMABUF_FD` and `bind-tx` take).
    fn dmabuf_fd(&self) -> BorrowedFd<'_>;
}

/// An allocated dma-buf, one variant per source. Reach the concrete buffer through
/// [`with_memory!`](crate::with_memory) (once per run, outside any per-frag loop).
#[derive(Debug)]
pub enum Memory {
    /// A udmabuf (memfd + `/dev/udmabuf`).
    Udmabuf(Udmabuf),
    /// A dma-heap dma-buf.
    DmaHeap(MappedDmaBuf),
}

/// Runs `$body` with `$m` bound to the concrete buffer inside a [`Memory`] (`&Memory` gives
/// `&T`, `&mut Memory` gives `&mut T`, where `T` implements [`DmaBufMemory`]), so generic code
/// is instantiated per source and the variant is matched exactly once:
///
/// ```
/// # use ncdevmem::{memory::Memory, udmabuf::FragMemory, with_memory};
/// fn size_of_buffer(mem: &Memory) -> usize {
///     with_memory!(mem, m => FragMemory::size(m))
/// }
/// ```
#[macro_export]
macro_rules! with_memory {
    ($mem:expr, $m:ident => $body:expr) => {
        match $mem {
            $crate::memory::Memory::Udmabuf($m) => $body,
            $crate::memory::Memory::DmaHeap($m) => $body,
        }
    };
}

impl Memory {
    /// The dma-buf fd (what `bind-rx`'s `NETDEV_A_DMABUF_FD` and `bind-tx` take).
    pub fn fd(&self) -> BorrowedFd<'_> {
        with_memory!(self, m => m.dmabuf_fd())
    }

    /// The dma-buf size in bytes.
    pub fn size(&self) -> usize {
        with_memory!(self, m => FragMemory::size(m))
    }
}

impl DmaBufMemory for Udmabuf {
    fn dmabuf_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl DmaBufMemory for MappedDmaBuf {
    fn dmabuf_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

// ---------------------------------------------------------------------------------------------
// A dma-buf the CPU maps
// ---------------------------------------------------------------------------------------------

pub use crate::udmabuf::MappedDmaBuf;

impl TxMemory for MappedDmaBuf {
    fn size(&self) -> usize {
        FragMemory::size(self)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        MappedDmaBuf::write_at(self, offset, data)
    }
}

/// A temporary directory for tests of the sources' preflights (fake device and sysfs files),
/// removed on drop.
#[cfg(test)]
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

#[cfg(test)]
impl TempDir {
    /// A fresh, empty directory named after `what`, the process and a counter.
    pub(crate) fn new(what: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ncdevmem-{what}-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

#[cfg(test)]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_print_back() {
        for (text, want) in [
            ("udmabuf", MemorySource::Udmabuf),
            ("dma-heap", MemorySource::DmaHeap("system".into())),
            ("dma-heap:system", MemorySource::DmaHeap("system".into())),
            (
                "dma-heap:reserved",
                MemorySource::DmaHeap("reserved".into()),
            ),
        ] {
            let got = MemorySource::parse(text).unwrap();
            assert_eq!(got, want, "{text}");
            // Display is what parse reads back.
            assert_eq!(MemorySource::parse(&got.to_string()).unwrap(), got);
        }
        assert_eq!(MemorySource::default(), MemorySource::Udmabuf);
        assert_eq!(
            MemorySource::DmaHeap("system".into()).to_string(),
            "dma-heap:system"
        );
    }

    #[test]
    fn unknown_sources_and_bad_heap_names_are_refused() {
        for bad in [
            "nosuch",
            "",
            "udmabuf:x",
            "dma_heap",
            "DMA-HEAP",
            "gpu:0",
            "dma-heap:",
            "dma-heap:.",
            "dma-heap:..",
            "dma-heap:a/b",
            "dma-heap:a\0",
        ] {
            assert_eq!(MemorySource::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn plans_size_each_source() {
        let page = crate::sys::page_size() as u64;
        let u = MemoryPlan::new(&MemorySource::Udmabuf, None, None).unwrap();
        assert_eq!(u.size_bytes(), udmabuf::DEFAULT_NUM_PAGES * page);
        assert_eq!((u.hugepages_needed(), u.describe()), (0, "udmabuf".into()));
        assert_eq!(u.source(), MemorySource::Udmabuf);
        let u = MemoryPlan::new(&MemorySource::Udmabuf, Some(16384), None).unwrap();
        assert_eq!(u.describe(), "udmabuf, hugetlb");
        assert_eq!(u.hugepages_needed(), u.size_bytes() / (2 << 20));

        let heap = MemorySource::DmaHeap("system".into());
        let h = MemoryPlan::new(&heap, None, None).unwrap();
        assert_eq!(h.size_bytes(), udmabuf::DEFAULT_NUM_PAGES * page);
        assert_eq!(
            (h.hugepages_needed(), h.describe()),
            (0, "dma-heap system".into())
        );
        assert_eq!(h.source(), heap);
        let h = MemoryPlan::new(&heap, Some(16384), Some(1 << 20)).unwrap();
        assert_eq!((h.size_bytes(), h.hugepages_needed()), (1 << 20, 0));
        // A size of 0 is a usage error for either source.
        for source in [MemorySource::Udmabuf, heap] {
            let e = MemoryPlan::new(&source, None, Some(0)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{source}: {e}");
        }
    }

    #[test]
    fn a_udmabuf_plan_passes_bind_refusals_through() {
        let plan = MemoryPlan::new(&MemorySource::Udmabuf, Some(16384), None).unwrap();
        let e = plan.bind_refusal(Error::sys("bind", libc::EINVAL));
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
}
