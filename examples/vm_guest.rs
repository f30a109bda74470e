//! Guest side of the VM suite (`tests/vm/run.sh`, `make vm-test`).
//!
//! Runs (with its shared libraries in the initramfs) inside a QEMU guest booted with a newer
//! Debian kernel that has udmabuf, devmem TCP netlink and (when the runner built it) the
//! netdevsim module. Each case
//! exercises the project's own library (`ncdevmem`) or binary (`ncdevmem-rs`) against that
//! real kernel and prints exactly one result line:
//!
//! ```text
//! ok <case>: <what was observed>
//! FAIL <case>: <why>
//! skip <case>: <why>          (netdevsim cases when the runner did not build it, opt-in cases)
//! miss <case>: <why>          (a fault the -v pattern cannot see; the case says why)
//! ```
//!
//! then `vm-guest: N passed, N failed, N skipped`, and exits 1 if any case failed.
//!
//! Cases assert behaviour (errno, presence of a kernel message, byte-exact data), never a
//! kernel version.
//!
//! After these, each of the project's real-kernel test binaries in `--tests DIR` runs as one
//! more case (`tests_<name>`), so the whole integration suite also meets the newer kernel.
//!
//! usage: `vm_guest --bin PATH --ip PATH [--ethtool PATH] [--netdevsim] [--kernel-tests]
//! [--fault-matrix N] [--only A,B] [--tests DIR] [--list]`
//! (`--ip`: iproute2's `ip`, not busybox's, which has no `netns`.)
//!
//! Before each case it prints `vm-guest: running <case>`, so a runner whose time limit ends
//! the guest can name the case that was running. `--list` (no `--bin`/`--ip` needed; the
//! runner calls it on the host) prints the names of the cases the other options select, one a
//! line, in order, an opt-in case that will only print `skip` as `NAME skip`, and runs nothing.
//!
//! Hidden subcommand, used by the `netdevsim_sigterm_mid_run` case as its child process:
//! `vm_guest hold-nic IF` installs the tool's SIGINT/SIGTERM handlers, turns header split on
//! and shrinks the channels of IF through the project's undo guards, prints `ready …`, then
//! waits for a stop signal; on one it returns `Error::Interrupted`, the guards unwind, and it
//! prints `unwound after signal N` and exits 1 (the tool's exit code for an interrupted run).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::sync::atomic::AtomicI32;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ncdevmem::netlink::ethtool::{Channels, Ethtool, TcpDataSplit};
use ncdevmem::netlink::netdev::{Netdev, QueueInfo, QueueType};
use ncdevmem::nic::guards::{channels_for, ChannelsGuard, HdsGuard, SharedNic};
use ncdevmem::nic::real::RealNic;
use ncdevmem::nic::snapshot::NicSnapshot;
use ncdevmem::sys::mmap::MappedRegion;
use ncdevmem::sys::uapi;
use ncdevmem::tx::devmem::ErrqueueRead;
use ncdevmem::tx::testing::{CompletionPolicy, ScriptedTxSocket};
use ncdevmem::tx::{
    self as devmem_tx, DmabufIov, LineSource, PatternSource, TxConfig, TxSocket, TxSource,
};
use ncdevmem::udmabuf::{
    self, dma_buf_sync, FragMemory, HugepageStatus, Udmabuf, UdmabufParams, NR_HUGEPAGES_PATH,
    SIZE_LIMIT_MB_PATH,
};
use ncdevmem::Error;

#[path = "vm_guest/devmem_nic.rs"]
mod devmem_nic;
#[path = "../tests/common/fault_cells.rs"]
#[allow(dead_code)] // shared with the host rows, which use other parts
mod fault_cells;
#[path = "../tests/common/fault_sender.rs"]
#[allow(dead_code)]
mod fault_sender;
#[path = "vm_guest/verdict_matrix.rs"]
mod verdict_matrix;

/// A case passed (with what it saw) or could not run here.
enum Outcome {
    Pass(String),
    Skip(String),
    /// The check ran and could not see what it looks for, for a reason the case names (a
    /// driver fault that the `-v` pattern's period hides): neither a pass nor a failure.
    ExpectedMiss(String),
}

/// `Err` is the failure reason printed after `FAIL <case>: `.
type CaseResult = Result<Outcome, String>;

/// A built-in case.
type Case = fn(&Ctx) -> CaseResult;

/// A case as run by `main` (the built-in ones and one per project test binary).
type CaseFn = Box<dyn Fn(&Ctx) -> CaseResult>;

/// What the guest was given on its command line.
struct Ctx {
    /// The `ncdevmem-rs` binary (release build).
    bin: PathBuf,
    /// iproute2's `ip`.
    ip: PathBuf,
    /// Debian's `ethtool` (the devmem-nic cases configure the NIC the way the kernel's
    /// harness does, through it).
    ethtool: PathBuf,
    /// `--fault-matrix N`: also run the fault-detection matrix, N runs per fault (0: not).
    fault_matrix: u32,
    /// The runner built netdevsim and /init loaded it: netdevsim cases must pass.
    netdevsim: bool,
    /// `--only A,B`: run only the cases whose names contain one of these, or, written `=A`,
    /// are exactly A, or, for the entry `opt-in`, are opt-in cases (kernel-log always).
    only: Vec<String>,
    /// `--kernel-tests`: also run the opt-in cases of [`devmem_nic::kernel_test_cases`] (a
    /// case `--only` names runs without it too).
    kernel_tests: bool,
    /// Directory of the project's own real-kernel test binaries (`tests/kernel_*.rs`,
    /// `tests/e2e.rs`, test-profile builds), each run as one more case.
    tests: Option<PathBuf>,
    /// `--list`: print the selected cases' names instead of running them.
    list: bool,
}

/// netdevsim device ids used by the cases (each case removes its devices again).
const NSIM_BIND_ID: u32 = 10;
const NSIM_RINGS_ID: u32 = 11;
const NSIM_SETUP_ID: u32 = 12;
const NSIM_SIGTERM_ID: u32 = 13;
const NSIM_TX_ID: u32 = 14;
const NSIM_LINK_A: u32 = 20;
const NSIM_LINK_B: u32 = 21;

/// How long any child process may run before it is killed and the case fails.
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, ifname] = argv.as_slice() {
        if cmd == "hold-nic" {
            return hold_nic(ifname);
        }
    }
    let ctx = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vm_guest: {e}");
            eprintln!(
                "usage: vm_guest --bin PATH --ip PATH [--ethtool PATH] [--netdevsim] [--kernel-tests] [--fault-matrix N] [--only A,B] [--tests DIR] [--list]"
            );
            return ExitCode::from(2);
        }
    };
    let cases: &[(&str, Case)] = &[
        ("udmabuf_memfd", udmabuf_memfd),
        ("udmabuf_hugetlb", udmabuf_hugetlb),
        ("udmabuf_size_limit", udmabuf_size_limit),
        ("dma_buf_sync", dma_buf_sync_case),
        ("bind_rx_netdevsim", bind_rx_netdevsim),
        ("netdevsim_rings_hds", netdevsim_rings_hds),
        ("netdevsim_channels", netdevsim_channels),
        ("netdevsim_nic_setup", netdevsim_nic_setup),
        ("netdevsim_sigterm_mid_run", netdevsim_sigterm_mid_run),
        ("bind_tx_netdevsim", bind_tx_netdevsim),
        ("plain_transfer_veth", plain_transfer_veth),
        ("plain_transfer_netdevsim", plain_transfer_netdevsim),
        ("devmem_server_veth", devmem_server_veth),
        ("devmem_server_netdevsim", devmem_server_netdevsim),
    ];
    let mut all: Vec<(String, CaseFn)> = cases
        .iter()
        .copied()
        .chain(devmem_nic::cases())
        .chain([(
            "devmem-nic/verdict-matrix",
            verdict_matrix::verdict_matrix as Case,
        )])
        .map(|(name, case)| (name.to_string(), Box::new(case) as CaseFn))
        .collect();
    // The opt-in cases that only print skip here (marked so by --list).
    let mut opt_in_skipped = Vec::new();
    let mut opt_in = Vec::new();
    for (name, case) in devmem_nic::kernel_test_cases() {
        opt_in.push(name.to_string());
        let named = ctx.only.iter().any(|o| o == OPT_IN || selects(o, name));
        let run: CaseFn = if ctx.kernel_tests || named {
            Box::new(case)
        } else {
            opt_in_skipped.push(name.to_string());
            Box::new(|_: &Ctx| {
                Ok(Outcome::Skip(
                    "opt-in: runs with NCDEVMEM_VM_KERNEL_TESTS=1 or when NCDEVMEM_VM_ONLY \
                     names it (tests/vm/run.sh)"
                        .into(),
                ))
            })
        };
        all.push((name.to_string(), run));
    }
    for path in test_binaries(&ctx) {
        let name = format!(
            "tests_{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        all.push((name, Box::new(move |_: &Ctx| project_test_binary(&path))));
    }
    if ctx.fault_matrix > 0 {
        let runs = ctx.fault_matrix;
        all.push((
            "devmem-nic/fault-matrix".to_string(),
            Box::new(move |c: &Ctx| devmem_nic::faults::fault_matrix(c, runs)),
        ));
    }
    if !ctx.only.is_empty() {
        all.retain(|(name, _)| {
            ctx.only
                .iter()
                .any(|o| selects(o, name) || (o == OPT_IN && opt_in.contains(name)))
        });
    }
    // Last: what every case above left in the kernel log and in the page pools.
    all.push(("kernel-log".to_string(), Box::new(devmem_nic::kernel_log)));
    if ctx.list {
        for (name, _) in &all {
            if opt_in_skipped.contains(name) {
                println!("{name} skip");
            } else {
                println!("{name}");
            }
        }
        return ExitCode::SUCCESS;
    }
    let (mut passed, mut failed, mut skipped, mut missed) = (0, 0, 0, 0);
    for (name, case) in &all {
        println!("vm-guest: running {name}");
        let _ = std::io::stdout().flush();
        let started = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&ctx)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))));
        let secs = started.elapsed().as_secs_f64();
        match result {
            Ok(Outcome::Pass(detail)) => {
                passed += 1;
                println!("ok {name}: {detail} [{secs:.1} s]");
            }
            Ok(Outcome::Skip(why)) => {
                skipped += 1;
                println!("skip {name}: {why}");
            }
            Ok(Outcome::ExpectedMiss(why)) => {
                missed += 1;
                println!("miss {name}: {why} [{secs:.1} s]");
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {name}: {why} [{secs:.1} s]");
            }
        }
        let _ = std::io::stdout().flush();
    }
    println!(
        "vm-guest: {passed} passed, {failed} failed, {skipped} skipped, {missed} expected misses"
    );
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The `--only` entry that selects every opt-in case ([`devmem_nic::kernel_test_cases`]):
/// `make vm-test-opt-in`, which `.ci/run` runs after `make test`.
const OPT_IN: &str = "opt-in";

/// Whether `--only` entry `only` selects case `name`: `=A` names exactly A, else a part of the
/// name.
fn selects(only: &str, name: &str) -> bool {
    match only.strip_prefix('=') {
        Some(exact) => name == exact,
        None => name.contains(only),
    }
}

fn parse_args() -> Result<Ctx, String> {
    let mut bin = None;
    let mut ip = None;
    let mut ethtool = PathBuf::from("/usr/sbin/ethtool");
    let mut netdevsim = false;
    let mut fault_matrix = 0;
    let mut tests = None;
    let mut only = Vec::new();
    let mut kernel_tests = false;
    let mut list = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bin" => bin = args.next().map(PathBuf::from),
            "--ip" => ip = args.next().map(PathBuf::from),
            "--ethtool" => ethtool = args.next().map(PathBuf::from).ok_or("--ethtool PATH")?,
            "--netdevsim" => netdevsim = true,
            "--kernel-tests" => kernel_tests = true,
            "--list" => list = true,
            "--fault-matrix" => {
                fault_matrix = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--fault-matrix N")?
            }
            "--tests" => tests = args.next().map(PathBuf::from),
            "--only" => {
                let list = args.next().ok_or("--only A,B")?;
                only.extend(list.split(',').filter(|s| !s.is_empty()).map(String::from));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    // --list runs nothing: the binaries need not be named.
    if list {
        bin = bin.or_else(|| Some(PathBuf::new()));
        ip = ip.or_else(|| Some(PathBuf::new()));
    }
    Ok(Ctx {
        bin: bin.ok_or("missing --bin")?,
        ip: ip.ok_or("missing --ip")?,
        ethtool,
        fault_matrix,
        netdevsim,
        only,
        kernel_tests,
        tests,
        list,
    })
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".into())
}

// ---------------------------------------------------------------------------------------------
// 1. udmabuf through the project's allocator
// ---------------------------------------------------------------------------------------------

/// The default allocation (16000 pages of a 4 KiB-page memfd, as C ncdevmem): created,
/// exported as a real dma-buf, mapped, written and read back in full.
fn udmabuf_memfd(_: &Ctx) -> CaseResult {
    let params = UdmabufParams::new(None, None).map_err(err)?;
    if params.hugetlb || params.size_bytes != 16000 * 4096 {
        return Err(format!("unexpected default params {params:?}"));
    }
    let mut buf = Udmabuf::create(&params).map_err(|e| format!("Udmabuf::create: {e}"))?;
    let exporter = dmabuf_exporter(&buf)?;
    if exporter != "udmabuf" {
        return Err(format!(
            "fd is a dma-buf of exporter {exporter:?}, not udmabuf"
        ));
    }
    fill_and_verify(&mut buf)?;
    Ok(Outcome::Pass(format!(
        "{} bytes from a 4 KiB-page memfd: dma-buf exporter {exporter}, written and read back \
         byte for byte (dma-buf and memfd mappings agree), out-of-range view refused",
        params.size_bytes
    )))
}

/// rx-page-size 16 KiB selects a hugetlb memfd of 64 MiB (32 × 2 MiB), after `nr_hugepages`
/// is raised; the udmabuf pins exactly those pages.
fn udmabuf_hugetlb(_: &Ctx) -> CaseResult {
    let params = UdmabufParams::new(Some(16384), None).map_err(err)?;
    if !params.hugetlb || params.size_bytes != 64 << 20 {
        return Err(format!("unexpected hugetlb params {params:?}"));
    }
    let needed = params.hugepages_needed();
    let _pool = HugepagePool::raise(needed)?;
    let before = HugepageStatus::read().map_err(err)?;
    before
        .require(needed)
        .map_err(|e| format!("after raising nr_hugepages: {e}"))?;
    let mut buf = Udmabuf::create(&params).map_err(|e| format!("Udmabuf::create: {e}"))?;
    if !buf.is_hugetlb() {
        return Err("Udmabuf::create returned a non-hugetlb buffer".into());
    }
    let during = HugepageStatus::read().map_err(err)?;
    let used = before.available().saturating_sub(during.available());
    if used != needed {
        return Err(format!(
            "expected the udmabuf to take {needed} hugepages, it took {used} ({before:?} → {during:?})"
        ));
    }
    fill_and_verify(&mut buf)?;
    let exporter = dmabuf_exporter(&buf)?;
    drop(buf);
    let after = HugepageStatus::read().map_err(err)?;
    if after.available() != before.available() {
        return Err(format!(
            "hugepages not returned after drop: {before:?} → {after:?}"
        ));
    }
    Ok(Outcome::Pass(format!(
        "{} bytes from a hugetlb memfd ({needed} × 2 MiB pinned while alive, all returned on \
         drop): exporter {exporter}, written and read back byte for byte",
        params.size_bytes
    )))
}

/// Sizes above the udmabuf module's `size_limit_mb` are refused before anything is created,
/// with the reason the tool prints (exit 4); exactly the limit is created by the kernel. The
/// limit is lowered to [`TEST_LIMIT_MB`] for the case (distribution kernels may set it huge)
/// and put back afterwards.
fn udmabuf_size_limit(ctx: &Ctx) -> CaseResult {
    let limit = SizeLimit::lower_to(TEST_LIMIT_MB)?;
    let at_limit = UdmabufParams {
        size_bytes: TEST_LIMIT_MB << 20,
        hugetlb: false,
    };
    udmabuf::preflight(&at_limit, &udmabuf::HostPaths::default())
        .map_err(|e| format!("exactly the limit refused: {e}"))?;
    let mut exact = Udmabuf::create(&at_limit)
        .map_err(|e| format!("kernel refused exactly size_limit_mb: {e}"))?;
    exact.write_at(0, b"limit").map_err(err)?;
    drop(exact);
    let over = UdmabufParams {
        size_bytes: (TEST_LIMIT_MB + 1) << 20,
        hugetlb: false,
    };
    let lib_msg = match udmabuf::preflight(&over, &udmabuf::HostPaths::default()) {
        Err(e @ Error::Skip(_)) if e.to_string().contains("size_limit_mb") => e.to_string(),
        other => {
            return Err(format!(
                "preflight over the limit: expected the skip, got {other:?}"
            ))
        }
    };
    match Udmabuf::create(&over) {
        Err(e @ Error::Skip(_)) if e.to_string() == lib_msg => {}
        other => return Err(format!("Udmabuf::create over the limit: got {other:?}")),
    }
    // The binary: the devmem server with a too-large --dmabuf-size skips with that reason.
    let size_arg = format!("{}M", TEST_LIMIT_MB + 1);
    let out = run(Command::new(&ctx.bin).args([
        "-l",
        "-f",
        "lo",
        "-s",
        "127.0.0.1",
        "-p",
        "5301",
        "-t",
        "0",
        "-q",
        "1",
        "-n",
        "--dmabuf-size",
        &size_arg,
    ]))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.status.code() != Some(4) || !stderr.contains("size_limit_mb") {
        return Err(format!(
            "ncdevmem-rs --dmabuf-size {size_arg}: {}, stderr {stderr:?}",
            out.status
        ));
    }
    Ok(Outcome::Pass(format!(
        "size_limit_mb {TEST_LIMIT_MB} (was {}): exactly the limit created; {size_arg} refused \
         before allocating, tool exits 4 with {stderr:?}",
        limit.old
    )))
}

/// The udmabuf `size_limit_mb` the size-limit case sets, in MiB.
const TEST_LIMIT_MB: u64 = 8;

/// Sets the udmabuf module's `size_limit_mb` and puts the old value back on drop.
struct SizeLimit {
    old: u64,
}

impl SizeLimit {
    fn lower_to(mb: u64) -> Result<Self, String> {
        let text = std::fs::read_to_string(SIZE_LIMIT_MB_PATH)
            .map_err(|e| format!("read {SIZE_LIMIT_MB_PATH}: {e}"))?;
        let old = udmabuf::parse_size_limit_mb(&text).map_err(err)?;
        std::fs::write(SIZE_LIMIT_MB_PATH, mb.to_string())
            .map_err(|e| format!("write {SIZE_LIMIT_MB_PATH}: {e}"))?;
        Ok(SizeLimit { old })
    }
}

impl Drop for SizeLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(SIZE_LIMIT_MB_PATH, self.old.to_string());
    }
}

// ---------------------------------------------------------------------------------------------
// 2. dma-buf sync
// ---------------------------------------------------------------------------------------------

/// The project's START|READ / END|READ (and the write pair inside `write_at`) succeed on a real
/// dma-buf; a sync without a direction bit is refused with EINVAL (the C tool's silent bug),
/// and the sync on a file that is not a dma-buf is ENOTTY.
fn dma_buf_sync_case(_: &Ctx) -> CaseResult {
    let params = UdmabufParams {
        size_bytes: 4 << 20,
        hugetlb: false,
    };
    let mut buf = Udmabuf::create(&params).map_err(|e| format!("Udmabuf::create: {e}"))?;
    buf.write_at(4096, b"sync")
        .map_err(|e| format!("write_at (START|WRITE, END|WRITE): {e}"))?;
    buf.begin_cpu_read()
        .map_err(|e| format!("begin_cpu_read (START|READ): {e}"))?;
    let seen = buf.bytes(4096, 4).map_err(err)?.to_vec();
    buf.end_cpu_read()
        .map_err(|e| format!("end_cpu_read (END|READ): {e}"))?;
    if seen != b"sync" {
        return Err(format!("read back {seen:?} after the sync pair"));
    }
    for (flags, label) in [
        (uapi::DMA_BUF_SYNC_START, "START (no direction)"),
        (uapi::DMA_BUF_SYNC_END, "END (no direction)"),
        (
            uapi::DMA_BUF_SYNC_READ | 0x8,
            "START|READ|0x8 (unknown bit)",
        ),
    ] {
        match dma_buf_sync(buf.fd(), flags) {
            Err(e) if e.errno() == Some(libc::EINVAL) => {}
            other => return Err(format!("sync {label}: expected EINVAL, got {other:?}")),
        }
    }
    let no_dir = dma_buf_sync(buf.fd(), uapi::DMA_BUF_SYNC_START)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    match dma_buf_sync(buf.memfd().as_fd(), udmabuf::SYNC_START_READ) {
        Err(e) if e.errno() == Some(libc::ENOTTY) => {}
        other => return Err(format!("sync on the memfd: expected ENOTTY, got {other:?}")),
    }
    Ok(Outcome::Pass(format!(
        "START|READ, END|READ, START|WRITE, END|WRITE succeed; no-direction and unknown-bit \
         syncs refused ({no_dir}); a memfd is ENOTTY"
    )))
}

// ---------------------------------------------------------------------------------------------
// 3. bind-rx on netdevsim
// ---------------------------------------------------------------------------------------------

/// bind-rx through the project's netlink code on a netdevsim queue is refused with EOPNOTSUPP
/// and a kernel message, printed verbatim; probe mode on netdevsim exits 4.
fn bind_rx_netdevsim(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_BIND_ID, 4)?;
    let ifname = dev.ifname.clone();
    ip(ctx, &["link", "set", &ifname, "up"])?;
    let ifindex = ifindex_of(&ifname)?;
    let mut netdev = Netdev::open().map_err(err)?;
    let rx_queues = netdev
        .queue_get_dump(ifindex)
        .map_err(err)?
        .into_iter()
        .filter(|q| q.queue_type == QueueType::Rx)
        .count();
    if rx_queues != 4 {
        return Err(format!(
            "{ifname}: queue-get dump lists {rx_queues} RX queues, not 4"
        ));
    }
    let buf = Udmabuf::create(&UdmabufParams::new(None, None).map_err(err)?).map_err(err)?;
    let kernel_msg = match netdev.bind_rx(ifindex, buf.fd(), &[1], None) {
        Ok(b) => {
            return Err(format!(
                "bind-rx on {ifname} queue 1 succeeded (dmabuf id {}); netdevsim has no DMA device",
                b.id()
            ))
        }
        Err(Error::Netlink(nl)) if nl.errno == libc::EOPNOTSUPP => match &nl.ext_msg {
            Some(m) if !m.is_empty() => {
                println!("  bind_rx_netdevsim: kernel refused bind-rx: {nl}");
                m.clone()
            }
            _ => return Err(format!("EOPNOTSUPP without an extack message: {nl}")),
        },
        Err(e) => return Err(format!("bind-rx: expected EOPNOTSUPP, got {e}")),
    };
    // Probe mode: exit 4 with exactly one skip line. Which capability it names depends on how
    // far the probe gets on netdevsim (its RSS table is unsupported; a probe that notes that
    // and goes on reaches the bind); when it names bind-rx, it must carry the kernel's text.
    let out = run(Command::new(&ctx.bin).args(["-f", &ifname]))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let reason = one_skip_line(&stderr);
    let reason = match (out.status.code(), reason) {
        (Some(4), Some(r)) => r,
        _ => {
            return Err(format!(
                "probe mode on {ifname}: {} (expected exit 4 with one skip line), stderr \
                 {stderr:?}",
                out.status
            ))
        }
    };
    let stage = if reason.contains("bind-rx") {
        if !reason.contains(kernel_msg.as_str()) {
            return Err(format!(
                "probe mode on {ifname} names bind-rx without the kernel's {kernel_msg:?}: \
                 {reason:?}"
            ));
        }
        "the probe reached the bind"
    } else {
        "the probe stopped before the bind"
    };
    Ok(Outcome::Pass(format!(
        "bind-rx {ifname} queue 1: EOPNOTSUPP, kernel: {kernel_msg:?}; probe mode exits 4 \
         ({stage}): {reason:?}"
    )))
}

/// The one `ncdevmem-rs: skip: …` line of a run's stderr; `None` when there is none or more
/// than one.
fn one_skip_line(stderr: &str) -> Option<String> {
    let mut skips = stderr.lines().filter(|l| l.contains(": skip: "));
    let first = skips.next()?;
    skips.next().is_none().then(|| first.trim().to_string())
}

// ---------------------------------------------------------------------------------------------
// 4. netdevsim rings (header split) and channels
// ---------------------------------------------------------------------------------------------

/// RINGS_SET tcp-data-split on (and off) through the project's ethtool client, then restored:
/// the RINGS_GET snapshot after equals the one before.
fn netdevsim_rings_hds(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_RINGS_ID, 4)?;
    let ifindex = ifindex_of(&dev.ifname)?;
    let mut eth = Ethtool::open().map_err(err)?;
    let before = eth.rings_get(ifindex).map_err(err)?;
    let hds_before = before
        .tcp_data_split
        .ok_or("RINGS_GET reports no tcp-data-split")?;
    for want in [
        TcpDataSplit::Enabled,
        TcpDataSplit::Disabled,
        TcpDataSplit::Enabled,
    ] {
        rings_set(&mut eth, ifindex, want, None)?;
        let got = eth.rings_get(ifindex).map_err(err)?.tcp_data_split;
        if got != Some(want) {
            return Err(format!(
                "set tcp-data-split {want:?}, RINGS_GET reports {got:?}"
            ));
        }
    }
    let mut hds_note = String::from("hds-thresh not reported");
    if let (Some(t), Some(max)) = (before.hds_thresh, before.hds_thresh_max) {
        let other = if t == 0 { max.min(256) } else { 0 };
        rings_set(&mut eth, ifindex, TcpDataSplit::Enabled, Some(other))?;
        let got = eth.rings_get(ifindex).map_err(err)?.hds_thresh;
        if got != Some(other) {
            return Err(format!("set hds-thresh {other}, RINGS_GET reports {got:?}"));
        }
        hds_note = format!("hds-thresh {t} → {other} → {t} (max {max})");
    }
    // SET unknown (0) hands the choice back to the driver; what GET then reports is recorded
    // (netdevsim reports "enabled" for a configured "unknown").
    rings_set(&mut eth, ifindex, TcpDataSplit::Unknown, None)?;
    let unknown_reads = eth.rings_get(ifindex).map_err(err)?.tcp_data_split;
    rings_set(&mut eth, ifindex, hds_before, before.hds_thresh)?;
    let after = eth.rings_get(ifindex).map_err(err)?;
    if after != before {
        return Err(format!(
            "rings not restored: before {before:?}, after {after:?}"
        ));
    }
    Ok(Outcome::Pass(format!(
        "tcp-data-split {hds_before:?} → Enabled → Disabled → Enabled → restored; SET Unknown \
         reads back as {unknown_reads:?}; {hds_note}; RINGS_GET after == before (RINGS_SET \
         through Ethtool::rings_set_hds)"
    )))
}

/// CHANNELS_SET combined down and back; an out-of-range count is refused with its message; the
/// snapshot after equals the one before, and queue-get follows the change.
fn netdevsim_channels(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_RINGS_ID, 4)?;
    // queue-get lists the queues of running devices only.
    ip(ctx, &["link", "set", &dev.ifname, "up"])?;
    let ifindex = ifindex_of(&dev.ifname)?;
    let mut eth = Ethtool::open().map_err(err)?;
    let mut netdev = Netdev::open().map_err(err)?;
    let before = eth.channels_get(ifindex).map_err(err)?;
    let (count, max) = match (before.combined_count, before.combined_max) {
        (Some(c), Some(m)) if m >= 2 => (c, m),
        _ => {
            return Err(format!(
                "netdevsim reports no usable combined channels: {before:?}"
            ))
        }
    };
    let smaller = if count > 1 { count - 1 } else { 2 };
    channels_set(&mut eth, ifindex, smaller)?;
    let mid: Channels = eth.channels_get(ifindex).map_err(err)?;
    if mid.combined_count != Some(smaller) {
        return Err(format!(
            "set combined {smaller}, CHANNELS_GET reports {mid:?}"
        ));
    }
    let rx_queues = netdev
        .queue_get_dump(ifindex)
        .map_err(err)?
        .into_iter()
        .filter(|q| q.queue_type == QueueType::Rx)
        .count();
    if rx_queues != smaller as usize {
        return Err(format!(
            "combined {smaller} but queue-get lists {rx_queues} RX queues"
        ));
    }
    let refusal = match channels_set(&mut eth, ifindex, max + 1) {
        Err(e) => e,
        Ok(()) => return Err(format!("combined {} (max {max}) accepted", max + 1)),
    };
    channels_set(&mut eth, ifindex, count)?;
    let after = eth.channels_get(ifindex).map_err(err)?;
    if after != before {
        return Err(format!(
            "channels not restored: before {before:?}, after {after:?}"
        ));
    }
    Ok(Outcome::Pass(format!(
        "combined {count} → {smaller} (queue-get agrees) → {count}; {} refused: {refusal}; \
         CHANNELS_GET after == before (CHANNELS_SET through Ethtool::channels_set)",
        max + 1
    )))
}

/// ETHTOOL_MSG_RINGS_SET tcp-data-split (and hds-thresh) through the project's typed op.
fn rings_set(
    eth: &mut Ethtool,
    ifindex: u32,
    split: TcpDataSplit,
    hds_thresh: Option<u32>,
) -> Result<(), String> {
    eth.rings_set_hds(ifindex, split, hds_thresh)
        .map_err(|e| format!("RINGS_SET: {e}"))
}

/// ETHTOOL_MSG_CHANNELS_SET combined = `combined` through the project's typed op.
fn channels_set(eth: &mut Ethtool, ifindex: u32, combined: u32) -> Result<(), String> {
    eth.channels_set(ifindex, None, None, Some(combined))
        .map_err(err)
}

// ---------------------------------------------------------------------------------------------
// 4b. NIC setup on netdevsim: the server's real setup, and a SIGTERM mid-run
// ---------------------------------------------------------------------------------------------

/// The server without `-n` on a netdevsim port runs the project's NIC setup for real: header
/// split first (netdevsim can), then the RSS indirection table (netdevsim cannot): exit 4
/// "driver does not support …", and every change undone.
///
/// Twice: from netdevsim's default ring config (tcp-data-split configured "unknown", which
/// RINGS_GET reports as "enabled", hds-thresh 0), and from an explicit `tcp-data-split off,
/// hds-thresh 128`, which the setup must turn on and then put back exactly (the careful
/// restore first writes "unknown", which netdevsim reads back as "enabled", so it must follow
/// up with the exact old values). The configured value itself is not readable through any
/// uapi; what is checked is what RINGS_GET reports, which for "off" is unambiguous.
fn netdevsim_nic_setup(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_SETUP_ID, 4)?;
    let ifname = dev.ifname.clone();
    ip(ctx, &["link", "set", &ifname, "up"])?;
    let ifindex = ifindex_of(&ifname)?;
    let mut eth = Ethtool::open().map_err(err)?;
    let mut notes = Vec::new();
    for start in [None, Some((TcpDataSplit::Disabled, 128))] {
        if let Some((split, thresh)) = start {
            rings_set(&mut eth, ifindex, split, Some(thresh))?;
        }
        let before = NicState::take(&ifname)?;
        let rings_before = eth.rings_get(ifindex).map_err(err)?;
        let out = run(Command::new(&ctx.bin).args([
            "-l",
            "-f",
            &ifname,
            "-s",
            "127.0.0.1",
            "-p",
            "5303",
            "--timeout",
            "10",
            "--verify-restore",
        ]))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let last = stderr.lines().last().unwrap_or_default().to_string();
        let label = match start {
            None => "from the default config".to_string(),
            Some((s, t)) => format!("from tcp-data-split {}, hds-thresh {t}", s.name()),
        };
        if out.status.code() != Some(4)
            || !last.contains("driver does not support")
            || stderr.contains("could not restore")
            || stderr.contains("not restored")
        {
            return Err(format!(
                "server without -n on {ifname} {label}: {} (expected exit 4 \"driver does not \
                 support …\" and nothing left changed), stderr {stderr:?}",
                out.status
            ));
        }
        let turned_on = stderr.lines().find(|l| l.contains("header split on"));
        if turned_on.is_none() {
            return Err(format!(
                "server without -n {label}: no \"header split on\" in stderr {stderr:?}"
            ));
        }
        before.same_as(
            &NicState::take(&ifname)?,
            &format!("after the server {label}"),
        )?;
        let rings_after = eth.rings_get(ifindex).map_err(err)?;
        if (rings_after.tcp_data_split, rings_after.hds_thresh)
            != (rings_before.tcp_data_split, rings_before.hds_thresh)
        {
            return Err(format!(
                "{label}: RINGS_GET before {rings_before:?}, after {rings_after:?}"
            ));
        }
        notes.push(format!(
            "{label}: {}; exit 4 {last:?}; snapshot after == before (tcp-data-split {:?}, \
             hds-thresh {:?})",
            turned_on.map_or(String::new(), |l| format!("{:?}", l.trim())),
            rings_after.tcp_data_split,
            rings_after.hds_thresh
        ));
    }
    Ok(Outcome::Pass(notes.join("; ")))
}

/// The NIC-setup guards unwind on SIGTERM: a child (`vm_guest hold-nic IF`) turns header split
/// on and shrinks the channels through `HdsGuard` / `ChannelsGuard` on a `SharedNic(RealNic)`
/// with the tool's signal handlers installed, and waits; the parent sees the NIC changed,
/// sends SIGTERM, and after the child exits (status 1, "unwound after signal 15") the NIC
/// snapshot equals the one from before.
fn netdevsim_sigterm_mid_run(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_SIGTERM_ID, 4)?;
    let ifname = dev.ifname.clone();
    ip(ctx, &["link", "set", &ifname, "up"])?;
    let ifindex = ifindex_of(&ifname)?;
    let mut eth = Ethtool::open().map_err(err)?;
    // From "off, 128" so that turning header split on is a visible change.
    rings_set(&mut eth, ifindex, TcpDataSplit::Disabled, Some(128))?;
    let before = NicState::take(&ifname)?;
    let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(&me)
        .args(["hold-nic", &ifname])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {} hold-nic: {e}", me.display()))?;
    let lines = line_channel(child.stdout.take());
    let ready = match lines.recv_timeout(Duration::from_secs(30)) {
        Ok(l) if l.starts_with("ready") => l,
        other => {
            let _ = child.kill();
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "hold-nic {ifname}: no \"ready\" line ({other:?}); stderr {:?}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    };
    let during = NicState::take(&ifname);
    let rings = eth.rings_get(ifindex).map_err(err);
    // SIGTERM before judging anything, so the child never outlives the case.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .map_err(|e| format!("kill(SIGTERM): {e}"))?;
    let out = wait(child)?;
    let rest: Vec<String> = lines.try_iter().collect();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let (during, rings) = (during?, rings?);
    let changed: Vec<String> = before.snapshot.diff(&during.snapshot);
    if rings.tcp_data_split != Some(TcpDataSplit::Enabled)
        || during.rx_queues() >= before.rx_queues()
    {
        return Err(format!(
            "after \"{ready}\" the NIC was not changed as expected: rings {rings:?}, \
             queue-get {:?} (before {:?})",
            during.queues, before.queues
        ));
    }
    let unwound = rest.iter().find(|l| l.starts_with("unwound after signal"));
    if out.status.code() != Some(1)
        || unwound.map(String::as_str) != Some("unwound after signal 15")
        || !stderr.is_empty()
    {
        return Err(format!(
            "hold-nic after SIGTERM: {} (expected exit 1 and \"unwound after signal 15\"), \
             stdout {rest:?}, stderr {stderr:?}",
            out.status
        ));
    }
    before.same_as(&NicState::take(&ifname)?, "after SIGTERM")?;
    Ok(Outcome::Pass(format!(
        "child {ready:?}; changed while it ran: {}; SIGTERM → exit 1 \"unwound after signal 15\", \
         NIC snapshot and queue-get after == before",
        changed.join("; ")
    )))
}

/// Forwards the lines of a child's stdout to a channel (from a thread), so the parent can wait
/// for one with a timeout.
fn line_channel(stdout: Option<std::process::ChildStdout>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// How long `hold-nic` waits for its signal before it gives up.
const HOLD_NIC_DEADLINE: Duration = Duration::from_secs(60);

/// `vm_guest hold-nic IF` (the child of `netdevsim_sigterm_mid_run`): exit 1 after a stop
/// signal unwound the guards (the tool's exit code for `Error::Interrupted`), otherwise the
/// exit code of the error.
fn hold_nic(ifname: &str) -> ExitCode {
    match hold_nic_until_signal(ifname) {
        // The guards were locals of hold_nic_until_signal: they have been dropped (restored)
        // by the time this line prints.
        Err(e @ Error::Interrupted(sig)) => {
            println!("unwound after signal {sig}");
            ExitCode::from(e.exit_code())
        }
        Err(e) => {
            eprintln!("hold-nic: {e}");
            ExitCode::from(e.exit_code())
        }
        Ok(()) => ExitCode::SUCCESS,
    }
}

fn hold_nic_until_signal(ifname: &str) -> Result<(), Error> {
    ncdevmem::signals::install()?;
    let nic = SharedNic::new(Box::new(RealNic::open(ifname)?));
    let hds = HdsGuard::enable(&nic)?;
    let old = nic.with(|n| n.channels_get())?;
    let keep = old.rx_queues().saturating_sub(2).max(1);
    let set = channels_for(&old, keep, keep)?;
    let channels = ChannelsGuard::apply(&nic, set)?;
    println!(
        "ready: header split on (was: {:?}), channels {} → {keep} RX queues",
        hds.old().tcp_data_split,
        old.rx_queues()
    );
    let _ = std::io::stdout().flush();
    let deadline = Instant::now() + HOLD_NIC_DEADLINE;
    while Instant::now() < deadline {
        ncdevmem::signals::check()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(channels);
    drop(hds);
    Err(Error::Timeout(format!(
        "no stop signal within {} s",
        HOLD_NIC_DEADLINE.as_secs()
    )))
}

// ---------------------------------------------------------------------------------------------
// 4c. devmem TX on netdevsim: the TX source fills a real udmabuf; bind-tx is refused
// ---------------------------------------------------------------------------------------------

/// Size of the udmabuf the TX case fills, in bytes.
const TX_DMABUF_BYTES: u64 = 1 << 20;

/// The TX path up to the kernel's refusal:
/// 1. the project's sender (`tx::transmit`) with its sources (`LineSource` for "hello\nworld\n",
///    `PatternSource` for 3.5 × the dma-buf, so the region ring wraps) writes a real udmabuf
///    through `TxMemory::write_at` (dma-buf sync START|WRITE / END|WRITE); a socket double
///    completes every send and reads each one's bytes back through its own mapping of the same
///    dma-buf between START|READ / END|READ: the stream equals the source, and the dma-buf's
///    final contents equal the last bytes written at every offset;
/// 2. bind-tx of that udmabuf on a netdevsim port, through `Netdev::bind_tx` and
///    `tx::bind_tx`: refused with EOPNOTSUPP and the kernel's message, verbatim;
/// 3. the client `ncdevmem-rs -f IF -s PEER -p PORT` with stdin "hello\nworld\n": exit 4
///    with that refusal.
fn bind_tx_netdevsim(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let params = UdmabufParams {
        size_bytes: TX_DMABUF_BYTES,
        hugetlb: false,
    };
    let mut buf = Udmabuf::create(&params).map_err(|e| format!("Udmabuf::create: {e}"))?;
    let stop = AtomicI32::new(0);
    let hello = b"hello\nworld\n";
    let mut lines = LineSource::new(&hello[..], &stop);
    let (sends, stream) = send_through_udmabuf(&mut buf, &mut lines, None)?;
    if stream != hello || sends != 2 {
        return Err(format!(
            "LineSource: {sends} sends carrying {:?}, expected 2 sends of {:?}",
            String::from_utf8_lossy(&stream),
            String::from_utf8_lossy(hello)
        ));
    }
    let total = TX_DMABUF_BYTES * 7 / 2;
    let piece = 64 << 10;
    let mut expected = Vec::with_capacity(total as usize);
    let mut reference = PatternSource::new(
        ncdevmem::validate::StreamSpec::Periodic(7),
        total,
        piece,
        None,
    )
    .map_err(err)?;
    let mut chunk = Vec::new();
    while reference.next_piece(piece, &mut chunk).map_err(err)? {
        expected.extend_from_slice(&chunk);
    }
    let mut pattern = PatternSource::new(
        ncdevmem::validate::StreamSpec::Periodic(7),
        total,
        piece,
        None,
    )
    .map_err(err)?;
    let (psends, pstream) = send_through_udmabuf(&mut buf, &mut pattern, Some(16 << 10))?;
    if pstream != expected {
        let at = pstream
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(pstream.len().min(expected.len()));
        return Err(format!(
            "PatternSource: {} bytes read back from the dma-buf, {} expected, first difference \
             at {at}",
            pstream.len(),
            expected.len()
        ));
    }

    let dev = NsimDev::new(ctx, NSIM_TX_ID, 2)?;
    let ifname = dev.ifname.clone();
    ip(ctx, &["link", "set", &ifname, "up"])?;
    let ifindex = ifindex_of(&ifname)?;
    let netdev = Netdev::open().map_err(err)?;
    let (refusal, kernel_msg) = match netdev.bind_tx(ifindex, buf.fd()) {
        Ok(b) => {
            return Err(format!(
                "bind-tx on {ifname} succeeded (dmabuf id {}); netdevsim has no DMA device",
                b.id()
            ))
        }
        Err(Error::Netlink(nl)) if nl.errno == libc::EOPNOTSUPP => match &nl.ext_msg {
            Some(m) if !m.is_empty() => (nl.to_string(), m.clone()),
            _ => return Err(format!("EOPNOTSUPP without an extack message: {nl}")),
        },
        Err(e) => return Err(format!("bind-tx: expected EOPNOTSUPP, got {e}")),
    };
    println!("  bind_tx_netdevsim: kernel refused bind-tx: {refusal}");
    match devmem_tx::bind_tx(&netdev, ifindex, &ifname, buf.fd()) {
        Err(Error::Skip(m)) if m.to_string().contains(&refusal) => {}
        other => {
            return Err(format!(
                "tx::bind_tx: expected a skip carrying {refusal:?}, got {other:?}"
            ))
        }
    }
    drop(buf);
    let out = run_with_stdin(
        Command::new(&ctx.bin).args(["-f", &ifname, "-s", "192.0.2.2", "-p", "5304"]),
        hello,
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let last = stderr.lines().last().unwrap_or_default().to_string();
    if out.status.code() != Some(4) || !last.contains(&kernel_msg) || !last.contains("EOPNOTSUPP") {
        return Err(format!(
            "ncdevmem-rs -f {ifname} -s 192.0.2.2 -p 5304 < \"hello\\nworld\\n\": {} (expected \
             exit 4 with {kernel_msg:?}), stderr {stderr:?}",
            out.status
        ));
    }
    Ok(Outcome::Pass(format!(
        "udmabuf of {TX_DMABUF_BYTES} bytes filled by the sender: stdin lines in 2 sends, \
         {total} pattern bytes in {psends} sends (-z 16K, region ring wrapped), all read back \
         through the dma-buf byte for byte; bind-tx on {ifname}: EOPNOTSUPP, kernel: \
         {kernel_msg:?}; client exits 4: {last:?}"
    )))
}

/// Runs the project's sender over `buf` with `source` and a socket double that completes every
/// send at once and captures each send's bytes from the dma-buf. Returns the number of sends
/// and the captured stream, after checking that the dma-buf (read through `Udmabuf::bytes`
/// between START|READ / END|READ) holds, at every offset a send used, the last bytes sent from
/// there.
fn send_through_udmabuf(
    buf: &mut Udmabuf,
    source: &mut dyn TxSource,
    chunk: Option<u32>,
) -> Result<(u64, Vec<u8>), String> {
    let size = FragMemory::size(buf);
    let mut sock = CaptureSocket::new(buf, size)?;
    let cfg = TxConfig {
        chunk,
        max_piece: 64 << 10,
        ..TxConfig::new(1)
    };
    let stop = AtomicI32::new(0);
    let mut log = Vec::new();
    let (stats, result) = devmem_tx::transmit(&mut sock, buf, source, &cfg, &stop, &mut log);
    result.map_err(|e| {
        format!(
            "transmit into the udmabuf: {e} ({})",
            String::from_utf8_lossy(&log)
        )
    })?;
    if stats.completions == 0 || !sock.inner.in_flight().is_empty() {
        return Err(format!(
            "transmit finished with {} completions and {:?} in flight",
            stats.completions,
            sock.inner.in_flight()
        ));
    }
    let mut shadow: Vec<Option<u8>> = vec![None; size];
    let mut pos = 0;
    for iov in &sock.iovs {
        for i in 0..iov.len {
            shadow[iov.offset as usize + i] = Some(sock.stream[pos + i]);
        }
        pos += iov.len;
    }
    buf.begin_cpu_read().map_err(err)?;
    let now = buf.bytes(0, size as u64).map_err(err).map(<[u8]>::to_vec);
    buf.end_cpu_read().map_err(err)?;
    let now = now?;
    if let Some(off) = shadow
        .iter()
        .zip(&now)
        .position(|(want, got)| want.is_some_and(|w| w != *got))
    {
        return Err(format!(
            "dma-buf byte {off} is {:#x}, the last send from there carried {:?}",
            now[off], shadow[off]
        ));
    }
    Ok((stats.sends, sock.stream))
}

/// A [`TxSocket`] for the TX case: the project's scripted socket decides what is accepted and
/// produces the zerocopy completions; every accepted send's bytes are read from the real
/// dma-buf through a second mapping of it, between `DMA_BUF_IOCTL_SYNC` START|READ and
/// END|READ on a duplicate of its fd.
struct CaptureSocket {
    inner: ScriptedTxSocket,
    dmabuf: OwnedFd,
    map: MappedRegion,
    /// Every accepted iov, in send order.
    iovs: Vec<DmabufIov>,
    /// The bytes those iovs carried when they were sent.
    stream: Vec<u8>,
}

impl CaptureSocket {
    fn new(buf: &Udmabuf, size: usize) -> Result<Self, String> {
        let dmabuf = buf
            .fd()
            .try_clone_to_owned()
            .map_err(|e| format!("dup dma-buf fd: {e}"))?;
        let map = MappedRegion::map_shared(dmabuf.as_fd(), size).map_err(err)?;
        let (inner, _) = ScriptedTxSocket::new(size, 1, CompletionPolicy::Immediate);
        Ok(CaptureSocket {
            inner,
            dmabuf,
            map,
            iovs: Vec::new(),
            stream: Vec::new(),
        })
    }
}

impl TxSocket for CaptureSocket {
    fn send_dmabuf(&mut self, iovs: &[DmabufIov], dmabuf_id: u32) -> Result<usize, i32> {
        let n = self.inner.send_dmabuf(iovs, dmabuf_id)?;
        let errno = |e: Error| e.errno().unwrap_or(libc::EIO);
        dma_buf_sync(self.dmabuf.as_fd(), udmabuf::SYNC_START_READ).map_err(errno)?;
        let mut left = n;
        for iov in iovs {
            let take = left.min(iov.len);
            if take == 0 {
                break;
            }
            let bytes = self.map.bytes(iov.offset, take as u64).map_err(errno)?;
            self.stream.extend_from_slice(bytes);
            self.iovs.push(DmabufIov {
                offset: iov.offset,
                len: take,
            });
            left -= take;
        }
        dma_buf_sync(self.dmabuf.as_fd(), udmabuf::SYNC_END_READ).map_err(errno)?;
        Ok(n)
    }

    fn recv_errqueue(&mut self, control: &mut [u8]) -> Result<ErrqueueRead, i32> {
        self.inner.recv_errqueue(control)
    }

    fn wait_errqueue(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.inner.wait_errqueue(timeout)
    }

    fn socket_error(&mut self) -> Result<i32, i32> {
        self.inner.socket_error()
    }
}

/// What the cases compare before and after a run: the project's NIC snapshot (header split,
/// channel counts, RSS table, RSS contexts, ntuple feature and rules, read through `RealNic`) and the
/// queue-get dump (type, id, owners; NAPI ids change whenever queues are re-created).
#[derive(Debug)]
struct NicState {
    snapshot: NicSnapshot,
    /// (queue type, id, dmabuf, io_uring, xsk), sorted.
    queues: Vec<(u32, u32, Option<u32>, bool, bool)>,
}

impl NicState {
    fn take(ifname: &str) -> Result<Self, String> {
        use ncdevmem::nic::NicOps;
        let mut nic = RealNic::open(ifname).map_err(err)?;
        let snapshot = NicSnapshot::take(&mut nic);
        let mut queues: Vec<_> = nic
            .queues()
            .map_err(err)?
            .iter()
            .map(|q: &QueueInfo| (q.queue_type.value(), q.id, q.dmabuf, q.io_uring, q.xsk))
            .collect();
        queues.sort_unstable();
        Ok(NicState { snapshot, queues })
    }

    fn rx_queues(&self) -> usize {
        let rx = QueueType::Rx.value();
        self.queues.iter().filter(|q| q.0 == rx).count()
    }

    /// `Err` listing every difference from `self` (before) to `after`.
    fn same_as(&self, after: &NicState, when: &str) -> Result<(), String> {
        let mut diff = self.snapshot.diff(&after.snapshot);
        if self.queues != after.queues {
            diff.push(format!(
                "queue-get was {:?}, now {:?}",
                self.queues, after.queues
            ));
        }
        if diff.is_empty() {
            Ok(())
        } else {
            Err(format!("NIC state {when} differs: {}", diff.join("; ")))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. plain-mode validated transfer between two namespaces
// ---------------------------------------------------------------------------------------------

const TRANSFER_BYTES: u64 = 64 << 20;

fn plain_transfer_veth(ctx: &Ctx) -> CaseResult {
    let pair = NsPair::new(ctx, "vmveth")?;
    ip(
        ctx,
        &[
            "link", "add", "va", "netns", &pair.a, "type", "veth", "peer", "name", "vb", "netns",
            &pair.b,
        ],
    )?;
    pair.address("va", "vb")?;
    plain_transfer(ctx, &pair, "veth")
}

fn plain_transfer_netdevsim(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let pair = NsPair::new(ctx, "vmnsim")?;
    let da = NsimDev::new(ctx, NSIM_LINK_A, 1)?;
    let db = NsimDev::new(ctx, NSIM_LINK_B, 1)?;
    ip(
        ctx,
        &["link", "set", &da.ifname, "netns", &pair.a, "name", "na"],
    )?;
    ip(
        ctx,
        &["link", "set", &db.ifname, "netns", &pair.b, "name", "nb"],
    )?;
    // link_device takes "<netns fd>:<ifindex> <netns fd>:<ifindex>", fds of the writer.
    let fa = File::open(format!("/run/netns/{}", pair.a)).map_err(|e| e.to_string())?;
    let fb = File::open(format!("/run/netns/{}", pair.b)).map_err(|e| e.to_string())?;
    let ia = ns_ifindex(ctx, &pair.a, "na")?;
    let ib = ns_ifindex(ctx, &pair.b, "nb")?;
    let spec = format!("{}:{ia} {}:{ib}", fa.as_raw_fd(), fb.as_raw_fd());
    std::fs::write("/sys/bus/netdevsim/link_device", &spec)
        .map_err(|e| format!("link_device {spec:?}: {e}"))?;
    pair.address("na", "nb")?;
    // Dropped in reverse order: the devices, then the namespaces.
    plain_transfer(ctx, &pair, "linked netdevsim ports")
}

/// `-l --plain -v 7` in namespace A receives `--send-pattern 64M -v 7` from namespace B.
fn plain_transfer(ctx: &Ctx, pair: &NsPair, via: &str) -> CaseResult {
    let json = format!("/tmp/plain-rx-{}.json", pair.a);
    let bin = ctx.bin.to_string_lossy().to_string();
    let rx = spawn(ns_exec(ctx, &pair.a).args([
        &bin,
        "-l",
        "--plain",
        "-s",
        "192.0.2.1",
        "-p",
        "5201",
        "-v",
        "7",
        "--timeout",
        "60",
        "--json",
        &json,
    ]))?;
    let size = TRANSFER_BYTES.to_string();
    let tx = run(ns_exec(ctx, &pair.b).args([
        &bin,
        "--send-pattern",
        &size,
        "-s",
        "192.0.2.1",
        "-p",
        "5201",
        "-v",
        "7",
        "--timeout",
        "60",
    ]));
    let rx = wait(rx)?;
    let tx = tx?;
    if !tx.status.success() || !rx.status.success() {
        return Err(format!(
            "sender {} ({}), receiver {} ({})",
            tx.status,
            String::from_utf8_lossy(&tx.stderr).trim(),
            rx.status,
            String::from_utf8_lossy(&rx.stderr).trim()
        ));
    }
    let text = std::fs::read_to_string(&json).map_err(|e| format!("read {json}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let bytes = v["bytes"].as_u64();
    let validated = v["validated_bytes"].as_u64();
    let mismatches = v["mismatches"].as_u64();
    if bytes != Some(TRANSFER_BYTES) || validated != Some(TRANSFER_BYTES) || mismatches != Some(0) {
        return Err(format!("receiver summary {text}"));
    }
    let gbit = v["gbit_per_s"].as_f64().unwrap_or(0.0);
    Ok(Outcome::Pass(format!(
        "{TRANSFER_BYTES} bytes over {via} across two namespaces, all validated, 0 mismatched \
         ({gbit:.2} Gbit/s under TCG)"
    )))
}

// ---------------------------------------------------------------------------------------------
// 6. the devmem server gets past the udmabuf preflight; the bind is refused
// ---------------------------------------------------------------------------------------------

/// On veth (given 2 RX/TX queues through the project's `Ethtool::channels_set`, put back
/// afterwards):
/// (a) without `-n` the server does real NIC setup, header split first, which veth cannot do:
///     exit 4 naming header split, and the NIC snapshot (rings, channels, RSS, ntuple and
///     queue-get) unchanged;
/// (b) with `-n -t 1 -q 1` it allocates the real udmabuf (4 KiB pages, then hugetlb with
///     `-b 16384`) and the kernel refuses the bind: exit 4 naming bind-rx and EOPNOTSUPP.
fn devmem_server_veth(ctx: &Ctx) -> CaseResult {
    ip(
        ctx,
        &["link", "add", "vsa", "type", "veth", "peer", "name", "vsb"],
    )?;
    let _del = DelLink {
        ctx,
        name: "vsa".into(),
    };
    ip(ctx, &["link", "set", "vsa", "up"])?;
    let ifindex = ifindex_of("vsa")?;
    let _queues = VethChannels::set(ifindex, 2)?;
    let before = NicState::take("vsa")?;
    if before.rx_queues() != 2 {
        return Err(format!(
            "vsa after CHANNELS_SET rx 2 tx 2: queue-get lists {:?}",
            before.queues
        ));
    }
    let out = run(Command::new(&ctx.bin).args([
        "-l",
        "-f",
        "vsa",
        "-s",
        "127.0.0.1",
        "-p",
        "5302",
        "--timeout",
        "10",
    ]))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let setup_line = stderr.lines().last().unwrap_or_default().to_string();
    if out.status.code() != Some(4)
        || !setup_line.contains("header split")
        || !setup_line.contains("does not support")
    {
        return Err(format!(
            "ncdevmem-rs -l -f vsa (NIC setup): {} (expected exit 4 naming header split), \
             stderr {stderr:?}",
            out.status
        ));
    }
    before.same_as(&NicState::take("vsa")?, "after the server without -n")?;
    let plain = server_refused(ctx, "vsa", &[], false)?;
    let _pool = HugepagePool::raise(32)?;
    let huge = server_refused(ctx, "vsa", &["-b", "16384"], false)?;
    before.same_as(&NicState::take("vsa")?, "after the -n runs")?;
    Ok(Outcome::Pass(format!(
        "rx 2 tx 2; without -n: exit 4 {setup_line:?}, NIC snapshot unchanged; -n -t 1 -q 1: \
         exit 4 past the udmabuf preflight {plain:?}; with -b 16384 (hugetlb): {huge:?}"
    )))
}

/// The same on a netdevsim port, where the kernel explains the refusal (extack).
fn devmem_server_netdevsim(ctx: &Ctx) -> CaseResult {
    if let Some(why) = no_netdevsim(ctx) {
        return Ok(Outcome::Skip(why));
    }
    let dev = NsimDev::new(ctx, NSIM_BIND_ID, 4)?;
    ip(ctx, &["link", "set", &dev.ifname, "up"])?;
    let line = server_refused(ctx, &dev.ifname, &[], true)?;
    Ok(Outcome::Pass(format!(
        "exit 4 past the udmabuf preflight with the kernel's reason: {line:?}"
    )))
}

/// Runs `ncdevmem-rs -l -f IF -s 127.0.0.1 -p 5302 -t 1 -q 1 -n EXTRA` and checks it exits 4
/// because bind-rx was refused (not because of udmabuf or hugepages). `want_extack`: the
/// message must carry the kernel's text. Returns the tool's message line.
fn server_refused(
    ctx: &Ctx,
    ifname: &str,
    extra: &[&str],
    want_extack: bool,
) -> Result<String, String> {
    let out = run(Command::new(&ctx.bin)
        .args([
            "-l",
            "-f",
            ifname,
            "-s",
            "127.0.0.1",
            "-p",
            "5302",
            "-t",
            "1",
            "-q",
            "1",
            "-n",
            "--timeout",
            "10",
        ])
        .args(extra))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let line = stderr.lines().last().unwrap_or_default().to_string();
    let ok = out.status.code() == Some(4)
        && line.contains("bind-rx")
        && line.contains("EOPNOTSUPP")
        && !line.contains("udmabuf")
        && !line.contains("hugepage")
        && (!want_extack || line.contains("kernel: \""));
    if !ok {
        return Err(format!(
            "ncdevmem-rs -l -f {ifname} -n -t 1 -q 1 {extra:?}: {}, stderr {stderr:?}",
            out.status
        ));
    }
    Ok(line)
}

/// A veth's RX/TX channel counts set through the project's `Ethtool::channels_set`; the old
/// counts are put back on drop.
struct VethChannels {
    ifindex: u32,
    old: Channels,
}

impl VethChannels {
    fn set(ifindex: u32, n: u32) -> Result<Self, String> {
        let mut eth = Ethtool::open().map_err(err)?;
        let old = eth.channels_get(ifindex).map_err(err)?;
        eth.channels_set(ifindex, Some(n), Some(n), None)
            .map_err(|e| format!("CHANNELS_SET rx {n} tx {n}: {e}"))?;
        Ok(VethChannels { ifindex, old })
    }
}

impl Drop for VethChannels {
    fn drop(&mut self) {
        if let Ok(mut eth) = Ethtool::open() {
            let _ = eth.channels_set(self.ifindex, self.old.rx_count, self.old.tx_count, None);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The project's own real-kernel test binaries
// ---------------------------------------------------------------------------------------------

/// The test binaries in `--tests DIR`, sorted by name.
fn test_binaries(ctx: &Ctx) -> Vec<PathBuf> {
    let Some(dir) = &ctx.tests else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs one libtest binary single-threaded (its tests create namespaces and change sysctls)
/// and passes when libtest reports no failure; a failure lists the failed tests.
fn project_test_binary(path: &Path) -> CaseResult {
    // rx_fixture replays the recording devmem-nic/recvmsg-record made in this guest.
    let out = run(Command::new(path)
        .arg("--test-threads=1")
        .env("NCDEVMEM_FIXTURE_DIR", devmem_nic::FIXTURE_DIR))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rfind(|l| l.starts_with("test result:"))
        .unwrap_or("no libtest summary")
        .to_string();
    if !out.status.success() {
        let failed: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_suffix(" ... FAILED"))
            .map(|l| l.trim_start_matches("test "))
            .collect();
        let panics: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains("panicked at") || l.starts_with("thread '"))
            .take(3)
            .collect();
        return Err(format!(
            "{}: {summary}; failed: {failed:?}; {panics:?}",
            out.status
        ));
    }
    Ok(Outcome::Pass(summary))
}

// ---------------------------------------------------------------------------------------------
// Helpers: udmabuf checks
// ---------------------------------------------------------------------------------------------

/// Fills the whole buffer with a position-dependent pattern through `write_at`, reads it back
/// through `bytes` between the read syncs, checks the memfd's own mapping sees the same bytes,
/// and checks a view past the end is refused.
fn fill_and_verify(buf: &mut Udmabuf) -> Result<(), String> {
    let size = buf.size();
    let pattern: Vec<u8> = (0..size)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect();
    buf.write_at(0, &pattern)
        .map_err(|e| format!("write_at: {e}"))?;
    buf.begin_cpu_read().map_err(err)?;
    let same = buf.bytes(0, size as u64).map_err(err)? == pattern.as_slice();
    let tail = buf.bytes(size as u64 - 1, 2);
    buf.end_cpu_read().map_err(err)?;
    if !same {
        return Err("dma-buf mapping does not read back what was written".into());
    }
    if !matches!(tail, Err(Error::Bounds { .. })) {
        return Err(format!("view past the end not refused: {tail:?}"));
    }
    let memfd_map = buf.memfd().map().map_err(|e| format!("map memfd: {e}"))?;
    for off in [0, 4095, size / 2, size - 1] {
        let want = pattern[off];
        let got = memfd_map.bytes(off as u64, 1).map_err(err)?[0];
        if got != want {
            return Err(format!(
                "memfd mapping differs from the dma-buf at {off}: {got:#x} vs {want:#x}"
            ));
        }
    }
    Ok(())
}

/// `exp_name` of the dma-buf fd, from `/proc/self/fdinfo`.
fn dmabuf_exporter(buf: &Udmabuf) -> Result<String, String> {
    let path = format!("/proc/self/fdinfo/{}", buf.fd().as_raw_fd());
    let info = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("exp_name:"))
        .map(|s| s.trim().to_string())
        .ok_or_else(|| format!("{path} has no exp_name: the fd is not a dma-buf ({info:?})"))
}

/// Raises `vm.nr_hugepages` by `pages` and puts the old value back on drop.
struct HugepagePool {
    old: u64,
}

impl HugepagePool {
    fn raise(pages: u64) -> Result<Self, String> {
        let old: u64 = std::fs::read_to_string(NR_HUGEPAGES_PATH)
            .map_err(|e| format!("read {NR_HUGEPAGES_PATH}: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("{NR_HUGEPAGES_PATH}: {e}"))?;
        std::fs::write(NR_HUGEPAGES_PATH, (old + pages).to_string())
            .map_err(|e| format!("write {NR_HUGEPAGES_PATH}: {e}"))?;
        Ok(HugepagePool { old })
    }
}

impl Drop for HugepagePool {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES_PATH, self.old.to_string());
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers: processes, namespaces, netdevsim
// ---------------------------------------------------------------------------------------------

fn err(e: Error) -> String {
    e.to_string()
}

fn no_netdevsim(ctx: &Ctx) -> Option<String> {
    (!ctx.netdevsim).then(|| "netdevsim not built (runner's --no-netdevsim)".to_string())
}

fn spawn(cmd: &mut Command) -> Result<Child, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {cmd:?}: {e}"))
}

/// Waits for `child` at most [`CHILD_DEADLINE`]; kills it past that.
fn wait(child: Child) -> Result<Output, String> {
    wait_within(child, CHILD_DEADLINE)
}

/// Waits for `child` at most `limit`; kills it past that.
fn wait_within(mut child: Child, limit: Duration) -> Result<Output, String> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| e.to_string()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                return Err(format!(
                    "killed after {} s; stderr {:?}",
                    limit.as_secs(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Runs a command to completion (bounded by [`CHILD_DEADLINE`]), whatever its exit status.
fn run(cmd: &mut Command) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    wait(spawn(cmd)?).map_err(|e| format!("{what}: {e}"))
}

/// Runs a command with `input` on its stdin (then closed), bounded by [`CHILD_DEADLINE`].
fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {what}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A child that exits before reading all of it is judged by its status, not by EPIPE.
        let _ = stdin.write_all(input);
    }
    wait(child).map_err(|e| format!("{what}: {e}"))
}

/// Runs iproute2 `ip ARGS`; a non-zero exit is an error carrying its stderr.
fn ip(ctx: &Ctx, args: &[&str]) -> Result<String, String> {
    let out = run(Command::new(&ctx.ip).args(args))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ns_exec(ctx: &Ctx, ns: &str) -> Command {
    let mut c = Command::new(&ctx.ip);
    c.args(["netns", "exec", ns]);
    c
}

fn ifindex_of(ifname: &str) -> Result<u32, String> {
    let p = format!("/sys/class/net/{ifname}/ifindex");
    std::fs::read_to_string(&p)
        .map_err(|e| format!("read {p}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{p}: {e}"))
}

fn ns_ifindex(ctx: &Ctx, ns: &str, ifname: &str) -> Result<u32, String> {
    let out = ip(ctx, &["-n", ns, "-o", "link", "show", "dev", ifname])?;
    out.split(':')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("no ifindex in {out:?}"))
}

/// Two network namespaces `<prefix>a` / `<prefix>b` with loopback up; removed on drop.
struct NsPair<'c> {
    ctx: &'c Ctx,
    a: String,
    b: String,
}

impl<'c> NsPair<'c> {
    fn new(ctx: &'c Ctx, prefix: &str) -> Result<Self, String> {
        let pair = NsPair {
            ctx,
            a: format!("{prefix}a"),
            b: format!("{prefix}b"),
        };
        for ns in [&pair.a, &pair.b] {
            ip(ctx, &["netns", "add", ns])?;
            ip(ctx, &["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    /// 192.0.2.1/24 on `dev_a` in A, 192.0.2.2/24 on `dev_b` in B, both up.
    fn address(&self, dev_a: &str, dev_b: &str) -> Result<(), String> {
        let ctx = self.ctx;
        for (ns, dev, addr) in [
            (&self.a, dev_a, "192.0.2.1/24"),
            (&self.b, dev_b, "192.0.2.2/24"),
        ] {
            ip(ctx, &["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(ctx, &["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }
}

impl Drop for NsPair<'_> {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = ip(self.ctx, &["netns", "del", ns]);
        }
    }
}

/// Deletes a link on drop.
struct DelLink<'c> {
    ctx: &'c Ctx,
    name: String,
}

impl Drop for DelLink<'_> {
    fn drop(&mut self) {
        let _ = ip(self.ctx, &["link", "del", &self.name]);
    }
}

/// A netdevsim device with one port and `queues` queues; deleted on drop.
struct NsimDev {
    id: u32,
    ifname: String,
}

impl NsimDev {
    fn new(_ctx: &Ctx, id: u32, queues: u32) -> Result<Self, String> {
        let spec = format!("{id} 1 {queues}");
        std::fs::write("/sys/bus/netdevsim/new_device", &spec)
            .map_err(|e| format!("netdevsim new_device {spec:?}: {e}"))?;
        // From here on, drop deletes the device (also on the error path).
        let mut dev = NsimDev {
            id,
            ifname: String::new(),
        };
        let dir = PathBuf::from(format!("/sys/bus/netdevsim/devices/netdevsim{id}/net"));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(name) = first_entry(&dir) {
                dev.ifname = name;
                return Ok(dev);
            }
            if Instant::now() > deadline {
                return Err(format!("netdevsim{id}: no netdev under {}", dir.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NsimDev {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/bus/netdevsim/del_device", self.id.to_string());
    }
}

fn first_entry(dir: &Path) -> Option<String> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
}
