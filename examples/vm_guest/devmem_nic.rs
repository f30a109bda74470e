//! Cases on the software devmem NIC (`tests/vm/devmem-nic`, module `devmem_nic`): the devmem
//! receive path against the real kernel, with no test double anywhere.
//!
//! Each case creates its own pair through the module's control file
//! (`/sys/kernel/debug/devmem_nic/new_pair`): `dnic<ID>a` stays in the guest's namespace and is
//! the device under test (so this program can snapshot it), `dnic<ID>b` moves into a namespace
//! of its own and carries the sender. 192.0.2.1/24 and 2001:db8::1/64 are on the device under
//! test, .2 and ::2 on the peer. Dropping the pair deletes both netdevs and the namespace.
//!
//! This file holds the pair ([`Dnic`]) and what every family of cases shares; the cases are in
//! one file per family: `rx.rs` (the devmem server's receive path), `tx.rs` (devmem TX),
//! `zcrx.rs` (io_uring zcrx and the `iou-zcrx` personality), `faults.rs` (driver faults the
//! receiver must catch), `harness.rs` (the kernel's own harnesses, with `drv_net.rs`), `sweep.rs`
//! (the lab's sweeps). A new family is a new file declared below and its cases' rows in the
//! case table (`examples/vm_guest.rs`).

use std::fmt::Write as _;
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use ncdevmem::conn::accept_timeout;
use ncdevmem::memory::dma_heap::{self, HeapParams, DEFAULT_HEAP};
use ncdevmem::netlink::ethtool::TcpDataSplit;
use ncdevmem::netlink::netdev::{BindRxRequest, Netdev, QueueType};
use ncdevmem::nic::guards::{
    equal_table, span_table, NtupleFeatureGuard, RssGuard, RssSpread, SharedNic,
};
use ncdevmem::nic::real::RealNic;
use ncdevmem::nic::scripted::{ScriptedHds, ScriptedNic};
use ncdevmem::nic::setup::FlowTarget;
use ncdevmem::nic::steer::{apply_steering, plan_steering, rss_context_support, SteerRequest};
use ncdevmem::nic::{Binding, FlowRule, FlowType, NicOps, QueueSpan, RssTable};
use ncdevmem::rx::{cmsgs, Cmsg, RxSocket};
use ncdevmem::sys::socket::{tcp_listen, TcpRxSocket};
use ncdevmem::sys::uapi::dmabuf_token;
use ncdevmem::udmabuf::{FragMemory, Udmabuf, UdmabufParams};
use ncdevmem::Error;
use serde_json::Value;

use super::{
    err, ifindex_of, ip, ns_exec, run, run_with_stdin, spawn, wait, wait_within, CaseResult, Ctx,
    HugepagePool, NicState, Outcome,
};

/// The module's debugfs directory.
const DEBUGFS: &str = "/sys/kernel/debug/devmem_nic";

/// RX/TX queues per netdev of a pair.
const QUEUES: u32 = 4;

/// The queue the server binds by default: the last one.
const BOUND: usize = 3;

const DUT4: &str = "192.0.2.1";

const PEER4: &str = "192.0.2.2";

const DUT6: &str = "2001:db8::1";

const PEER6: &str = "2001:db8::2";

/// Where `devmem-nic/recvmsg-record` leaves its recording for the project's `rx_fixture`
/// test binary, which runs later in the guest.
pub const FIXTURE_DIR: &str = "/tmp/fixtures";

/// The stream size of the transfer cases.
const STREAM: u64 = 64 << 20;

/// The devmem-nic cases in the order they run: name (as the VM suite prints it), time budget
/// in seconds ([`super::Row`]), one line on what it shows, the case.
pub fn cases() -> Vec<super::Row> {
    vec![
        (
            "devmem-nic/probe",
            30,
            "the probe: all four kernel contracts hold, also with -b 16384; NIC unchanged",
            rx::probe,
        ),
        (
            "devmem-nic/rx",
            30,
            "the server's own NIC setup, 64 MiB -v 7 validated in dmabuf frags, NIC restored",
            rx::rx,
        ),
        (
            "devmem-nic/rx-preconfigured",
            30,
            "the NIC set up by ethtool as devmem_lib.py does, then -n over IPv6",
            rx::rx_preconfigured,
        ),
        (
            "devmem-nic/rx-large-niov",
            30,
            "-b 16384 over a hugetlb udmabuf: frags of exactly the 16 KiB niov",
            rx::rx_large_niov,
        ),
        (
            "devmem-nic/rx-hds-sweep",
            30,
            "check_rx_hds's payload sizes with -L: every byte in dmabuf frags",
            rx::rx_hds_sweep,
        ),
        (
            "devmem-nic/rx-no-hds",
            30,
            "no header split: the probe skips naming it; left off: the kernel's extack",
            rx::rx_no_hds,
        ),
        (
            "devmem-nic/plain-hds-thresh",
            60,
            "--plain --hds-thresh 256: ring 256 during the run, frames split, restored; 2048 skips",
            rx::plain_hds_thresh,
        ),
        (
            "devmem-nic/flow-steering",
            30,
            "-n without a rule: the flow lands elsewhere, exit 1 flow steering error",
            rx::flow_steering,
        ),
        (
            "devmem-nic/rss-context",
            30,
            "RSS-context calls alike from kernel and scripted NIC; 8 flows on each context queue",
            rx::rss_context,
        ),
        (
            "devmem-nic/multi-flow",
            120,
            "4 flows, 4 bound queues through an RSS context, each flow on its own queue",
            rx::multi_flow,
        ),
        (
            "devmem-nic/require-spread",
            120,
            "2 flows hashed to one of 2 bound queues: --require-spread exit 1, else a warning",
            rx::require_spread,
        ),
        (
            "devmem-nic/multi-flow-fault",
            30,
            "the module's xflow fault: exit 1 naming the spoiled flow and the other",
            faults::multi_flow_fault,
        ),
        (
            "devmem-nic/token-pressure",
            30,
            "a 256 KiB dmabuf carries 64 MiB because tokens are recycled",
            rx::token_pressure,
        ),
        (
            "devmem-nic/signal",
            30,
            "SIGTERM mid-receive: exit 1 interrupted, NIC as before, no binding",
            rx::signal,
        ),
        (
            "devmem-nic/small-dmabuf",
            30,
            "a 128 KiB dmabuf: the tool's receive buffer sizing carries 16 MiB every time",
            rx::small_dmabuf,
        ),
        (
            "devmem-nic/recvmsg-record",
            30,
            "records real recvmsg(MSG_SOCK_DEVMEM) answers for tests_rx_fixture",
            rx::recvmsg_record,
        ),
        (
            "devmem-nic/scripted-nic-parity",
            30,
            "42 NIC operations answered alike by RealNic and the scripted NIC",
            rx::scripted_nic_parity,
        ),
        (
            "devmem-nic/tx",
            30,
            "check_tx_chunks: hello/world through devmem TX, every send zero-copy",
            tx::tx,
        ),
        (
            "devmem-nic/tx-pattern",
            30,
            "32 MiB -v 7 through devmem TX over a 1 MiB dma-buf, validated by the peer",
            tx::tx_pattern,
        ),
        (
            "devmem-nic/tx-multi-flow",
            120,
            "4 flows of devmem TX from one dma-buf, each its own window, validated",
            tx::tx_multi_flow,
        ),
        (
            "devmem-nic/zcrx",
            30,
            "io_uring zcrx on the bound queue: 64 MiB validated, every buffer back",
            zcrx::zcrx,
        ),
        (
            "devmem-nic/zcrx-large-buf",
            30,
            "zcrx with --rx-buf-len 16384 over a hugetlb area: the kernel keeps 16384",
            zcrx::zcrx_large_buf,
        ),
        (
            "devmem-nic/zcrx-multi-flow",
            120,
            "4 zcrx flows over 2 ifqs through an RSS context, each on its worker",
            zcrx::zcrx_multi_flow,
        ),
        (
            "devmem-nic/large-niov-sweep",
            30,
            "check_rx_large_niov: -b 16384 receivers back to back, no binding held",
            rx::large_niov_sweep,
        ),
        (
            "devmem-nic/lingering-binding",
            30,
            "a binding kept alive by unread frags: the next receiver waits for it",
            rx::lingering_binding,
        ),
        (
            "devmem-nic/unbind-recvmsg",
            30,
            "the binding's socket closed under queued frags (-U 1, -U 2)",
            rx::unbind_recvmsg,
        ),
        (
            "devmem-nic/unbind-modes",
            30,
            "-a and -U end to end on a kernel without the autorelease attribute",
            rx::unbind_modes,
        ),
        (
            "devmem-nic/rx-dma-heap",
            30,
            "--memory dma-heap: -v 7 and --seed streams validated in a system-heap dma-buf",
            rx::rx_dma_heap,
        ),
        (
            "devmem-nic/tx-dma-heap",
            30,
            "devmem TX from a system dma-heap buffer, validated by the peer",
            tx::tx_dma_heap,
        ),
        (
            "devmem-nic/dma-heap-large-niov",
            30,
            "large niovs over the system dma-heap: 16 KiB frags, unaligned buffers refused",
            rx::dma_heap_large_niov,
        ),
        (
            "devmem-nic/fault-a",
            30,
            "driver fault: payload left linear, -L exits 1 naming the offset",
            faults::fault_a,
        ),
        (
            "devmem-nic/fault-b",
            30,
            "driver fault: a stale buffer, caught by -v",
            |c| faults::fault(c, 'b', "stale", 0, None),
        ),
        (
            "devmem-nic/fault-c",
            30,
            "driver fault: two frags swapped, caught and diagnosed reordered",
            |c| faults::fault(c, 'c', "swap", 0, Some("reordered")),
        ),
        (
            "devmem-nic/fault-d",
            30,
            "driver fault: a frame's payload delivered twice, diagnosed duplicate",
            |c| faults::fault(c, 'd', "dup", 0, Some("duplicate")),
        ),
        (
            "devmem-nic/fault-e",
            30,
            "driver fault: one byte flipped, diagnosed corrupt",
            |c| faults::fault(c, 'e', "corrupt", 0, Some("corrupt")),
        ),
        (
            "devmem-nic/fault-f",
            30,
            "driver fault: a frag's offset 8 bytes late, diagnosed shifted",
            |c| faults::fault(c, 'f', "offset", 8, Some("shifted")),
        ),
        (
            "devmem-nic/fault-xflow",
            30,
            "the xflow fault on plain sockets: the validator names the other flow",
            faults::fault_xflow,
        ),
        (
            "devmem-nic/kernel-devmem-py",
            900,
            "the kernel's devmem.py, unchanged, with ncdevmem-rs: all five tests ok",
            harness::kernel_devmem_py,
        ),
        (
            "devmem-nic/kernel-iou-zcrx-py",
            300,
            "the kernel's iou-zcrx.py, unchanged, with ncdevmem-rs as iou-zcrx",
            harness::kernel_iou_zcrx_py,
        ),
        (
            "devmem-nic/iou-zcrx-threads",
            30,
            "iou-zcrx -t 2: an ifq per queue, each connection on its NAPI's worker",
            zcrx::iou_zcrx_threads,
        ),
        (
            "devmem-nic/iou-zcrx-late-client",
            30,
            "iou-zcrx -s waits without deadline for a client started 7 s later",
            zcrx::iou_zcrx_late_client,
        ),
        (
            "devmem-nic/c-ncdevmem",
            900,
            "devmem.py with the kernel's C ncdevmem, recorded; receiver CPU of both",
            harness::c_ncdevmem,
        ),
        (
            "devmem-nic/sweep-rx-page-size",
            180,
            "the lab: rx-page-size sweep of 4 flows against the peer server",
            sweep::sweep_rx_page_size,
        ),
        (
            "devmem-nic/sweep-rx-buf-len",
            180,
            "the lab: zcrx rx-buf-len sweep, completions per GiB shrink",
            sweep::sweep_rx_buf_len,
        ),
        (
            "devmem-nic/sweep-autorelease",
            180,
            "the lab: autorelease sweep on 7.3, every run skipped naming the policy",
            sweep::sweep_autorelease,
        ),
        (
            "devmem-nic/compare",
            150,
            "the lab: --compare of a 4K and a 64K rx-page-size sweep, frags/GiB significant",
            sweep::compare_sweeps,
        ),
        (
            "devmem-nic/verdict-matrix",
            600,
            "the fault matrix's devmem, zcrx and devmem TX rows: each fault cell fails, naming the flow",
            super::verdict_matrix::verdict_matrix,
        ),
    ]
}

/// The slow cases: opt-in (`--kernel-tests`, which tests/vm/run.sh passes with
/// `NCDEVMEM_VM_KERNEL_TESTS=1`), as each adds minutes under TCG to a suite that must stay
/// within CI's time on a loaded machine; a case `--only` names runs without it too. Rows as
/// [`cases`].
pub fn kernel_test_cases() -> Vec<super::Row> {
    vec![
        (
            "devmem-nic/c-iou-zcrx",
            900,
            "iou-zcrx.py with the kernel's C iou-zcrx, recorded; CPU and wall time of both",
            harness::c_iou_zcrx,
        ),
        (
            "devmem-nic/kernel-nk-devmem-py",
            900,
            "the kernel's nk_devmem.py and our mirror through a netkit guest",
            harness::kernel_nk_devmem_py,
        ),
        (
            "devmem-nic/kernel-userns-devmem-py",
            900,
            "userns_devmem.py and our mirror, the guest in a user namespace",
            harness::kernel_userns_devmem_py,
        ),
        (
            "devmem-nic/kernel-nk-qlease-py",
            600,
            "the kernel's nk_qlease.py: zcrx through a leased queue",
            harness::kernel_nk_qlease_py,
        ),
        (
            "devmem-nic/kernel-drv-net",
            2400,
            "the kernel's drv-net tests of what the software NIC emulates, totals as recorded",
            harness::drv_net::kernel_drv_net,
        ),
    ]
}

#[path = "sweep.rs"]
mod sweep;

#[path = "rx.rs"]
pub(super) mod rx;

#[path = "tx.rs"]
pub(super) mod tx;

#[path = "zcrx.rs"]
pub(super) mod zcrx;

#[path = "faults.rs"]
pub(super) mod faults;

#[path = "harness.rs"]
pub(super) mod harness;

/// Prints `text` between `NCDEVMEM-FIXTURE-BEGIN NAME` / `NCDEVMEM-FIXTURE-END` lines: the
/// runner saves it as target/vm/fixtures/NAME and keeps it off the console.
fn record(name: &str, text: &str) {
    println!("NCDEVMEM-FIXTURE-BEGIN {name}");
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    println!("NCDEVMEM-FIXTURE-END");
}

fn read_number(path: &str) -> Result<u64, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("read {path}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{path}: {e}"))
}

/// `vm.nr_hugepages` set to exactly `pages` (as devmem_lib's `_reserve_hugepages` sets 64),
/// the old value back on drop. Waits up to 10 s for pages an earlier case still holds, so all
/// `pages` are free.
struct NrHugepages {
    old: u64,
}

impl NrHugepages {
    fn set(pages: u64) -> Result<Self, String> {
        use ncdevmem::udmabuf::{FREE_HUGEPAGES_PATH, NR_HUGEPAGES_PATH};
        let old = read_number(NR_HUGEPAGES_PATH)?;
        std::fs::write(NR_HUGEPAGES_PATH, pages.to_string())
            .map_err(|e| format!("write {NR_HUGEPAGES_PATH}: {e}"))?;
        let guard = NrHugepages { old };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (nr, free) = (
                read_number(NR_HUGEPAGES_PATH)?,
                read_number(FREE_HUGEPAGES_PATH)?,
            );
            if nr == pages && free == pages {
                return Ok(guard);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "vm.nr_hugepages {pages}: the kernel has {nr}, {free} free (pages still in \
                     use from an earlier case?)"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for NrHugepages {
    fn drop(&mut self) {
        let _ = std::fs::write(ncdevmem::udmabuf::NR_HUGEPAGES_PATH, self.old.to_string());
    }
}

/// One pair `dnic<ID>a` (device under test, here) / `dnic<ID>b` (peer, in namespace
/// `dnic<ID>peer`), addressed and up; both netdevs and the namespace go on drop.
pub struct Dnic<'c> {
    ctx: &'c Ctx,
    id: u32,
    /// RX/TX queues of each netdev.
    queues: u32,
    /// The device under test.
    pub dut: String,
    peer_ns: String,
}

impl<'c> Dnic<'c> {
    /// Creates pair `id` with [`QUEUES`] queues; `hds: false` makes it a driver without header
    /// split.
    pub fn new(ctx: &'c Ctx, id: u32, hds: bool) -> Result<Self, String> {
        Dnic::with_queues(ctx, id, QUEUES, hds)
    }

    /// [`Dnic::new`] with `queues` queues per netdev (at most 16).
    pub fn with_queues(ctx: &'c Ctx, id: u32, queues: u32, hds: bool) -> Result<Self, String> {
        let spec = format!("{id} {queues}{}", if hds { "" } else { " nohds" });
        let ctl = format!("{DEBUGFS}/new_pair");
        std::fs::write(&ctl, &spec).map_err(|e| {
            format!("devmem_nic: write {spec:?} to {ctl}: {e} (is the module loaded?)")
        })?;
        let nic = Dnic {
            ctx,
            id,
            queues,
            dut: format!("dnic{id}a"),
            peer_ns: format!("dnic{id}peer"),
        };
        let peer = format!("dnic{id}b");
        let ns = nic.peer_ns.as_str();
        ip(ctx, &["netns", "add", ns])?;
        ip(ctx, &["-n", ns, "link", "set", "lo", "up"])?;
        ip(ctx, &["link", "set", &peer, "netns", ns])?;
        for (dev, netns, v4, v6) in [
            (nic.dut.as_str(), None, DUT4, DUT6),
            (peer.as_str(), Some(ns), PEER4, PEER6),
        ] {
            let mut pre: Vec<&str> = Vec::new();
            if let Some(n) = netns {
                pre.extend(["-n", n]);
            }
            let a4 = format!("{v4}/24");
            let a6 = format!("{v6}/64");
            ip(ctx, &[&pre[..], &["addr", "add", &a4, "dev", dev]].concat())?;
            ip(
                ctx,
                &[&pre[..], &["addr", "add", &a6, "dev", dev, "nodad"]].concat(),
            )?;
            ip(ctx, &[&pre[..], &["link", "set", dev, "up"]].concat())?;
        }
        Ok(nic)
    }

    /// The network namespace of the peer's netdev (`dnic<ID>peer`).
    pub fn peer_ns(&self) -> &str {
        &self.peer_ns
    }

    /// `ncdevmem-rs -l -f DUT ARGS`.
    fn server(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.ctx.bin);
        c.args(["-l", "-f", &self.dut]).args(args);
        c
    }

    /// `ncdevmem-rs ARGS` in the peer's namespace.
    fn sender(&self, args: &[&str]) -> Command {
        let mut c = ns_exec(self.ctx, &self.peer_ns);
        c.arg(&self.ctx.bin).args(args);
        c
    }

    /// Listens on the DUT's `DUT4:port` (IPv4-mapped, no tool in between), has the peer send
    /// `bytes` of the `-v 7` pattern, accepts and waits for the sender to finish: the
    /// connection, with everything sent queued in it (or on its way).
    fn accept_pattern(&self, port: u16, bytes: &str) -> Result<OwnedFd, String> {
        let (fd, tx) = self.start_pattern(port, bytes)?;
        let sent = wait(tx)?;
        if !sent.status.success() {
            return Err(format!("sender: {}", output_text(&sent)));
        }
        Ok(fd)
    }

    /// Listens on `DUT4`:`port`, starts the peer's `--send-pattern BYTES -v 7` and accepts its
    /// connection; the caller receives while the sender still runs, then waits for it.
    fn start_pattern(&self, port: u16, bytes: &str) -> Result<(OwnedFd, Child), String> {
        let listen_on = SocketAddrV6::new(
            format!("::ffff:{DUT4}")
                .parse()
                .map_err(|e| format!("{e}"))?,
            port,
            0,
            0,
        );
        let listener = tcp_listen(listen_on, None).map_err(err)?;
        let tx = spawn(&mut self.sender(&[
            "--send-pattern",
            bytes,
            "-s",
            DUT4,
            "-p",
            &port.to_string(),
            "-v",
            "7",
            "--timeout",
            "30",
        ]))?;
        let (fd, _) = accept_timeout(
            listener.as_fd(),
            Some(Duration::from_secs(30)),
            &AtomicI32::new(0),
        )
        .map_err(err)?;
        Ok((fd, tx))
    }

    /// Runs the server (`--json`, 120 s timeout) and the sender (connect retried up to 60 s) on
    /// `port`, to completion.
    fn transfer(&self, port: u16, server: &[&str], sender: &[&str]) -> Result<Transfer, String> {
        let port = port.to_string();
        let json = format!("/tmp/dnic{}-{port}.json", self.id);
        let _ = std::fs::remove_file(&json);
        let rx =
            spawn(
                self.server(server)
                    .args(["-p", &port, "--timeout", "120", "--json", &json]),
            )?;
        let tx = run(self.sender(sender).args(["-p", &port, "--timeout", "60"]));
        let server = wait(rx)?;
        let sender = tx?;
        let json = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        Ok(Transfer {
            server,
            sender,
            json,
        })
    }

    /// [`Dnic::transfer`], with the module's per-queue counters sampled every 100 ms while
    /// it runs. Returns the transfer and the last sample that an `ethtool -n` count of the
    /// device's ntuple rules taken after it still found a rule in: what the queues had
    /// received while the server's rule was installed (the server installs it before it
    /// listens and removes it in its undo, after its connections closed). `None` when no
    /// sample was followed by an installed rule.
    ///
    /// A timed server (`--duration`) ends while its peer still sends: the peer's frames in
    /// flight after the connections closed are steered when they are sent, and once the
    /// rule is gone the default context spreads them (one such frame on queue 0 failed
    /// `devmem-nic/zcrx-multi-flow` once in CI). Those frames are after the run; frames
    /// outside the bound queues while the rule is installed are a steering fault.
    fn transfer_steered(
        &self,
        port: u16,
        server: &[&str],
        sender: &[&str],
    ) -> Result<(Transfer, Option<Vec<QueueStats>>), String> {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let sampler = s.spawn(|| {
                let mut steered = None;
                let mut seen = false;
                while !done.load(Ordering::Relaxed) {
                    let q = self.queue_stats();
                    let rules = ethtool(self.ctx, &["-n", &self.dut]).map(|t| {
                        t.lines().any(|l| {
                            l.trim_start().starts_with("Total ") && !l.contains("Total 0 ")
                        })
                    });
                    match (q, rules) {
                        (Ok(q), Ok(true)) => {
                            steered = Some(q);
                            seen = true;
                        }
                        (_, Ok(false)) if seen => break,
                        _ => {}
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                steered
            });
            let t = self.transfer(port, server, sender);
            done.store(true, Ordering::Relaxed);
            let steered = sampler
                .join()
                .map_err(|_| "the queue sampler panicked".to_string())?;
            Ok((t?, steered))
        })
    }

    /// Makes `first..=last` the peer namespace's whole ephemeral port range
    /// (`net.ipv4.ip_local_port_range`, one per namespace; gone with the namespace): its
    /// connections then come from those source ports.
    fn peer_port_range(&self, first: u16, last: u16) -> Result<(), String> {
        let out = run(ns_exec(self.ctx, &self.peer_ns).args([
            "sh",
            "-c",
            &format!("echo {first} {last} > /proc/sys/net/ipv4/ip_local_port_range"),
        ]))?;
        if !out.status.success() {
            return Err(format!(
                "ip_local_port_range {first} {last} in {}: {}",
                self.peer_ns,
                output_text(&out)
            ));
        }
        Ok(())
    }

    /// The TX byte counter of `ifname` in the peer's namespace (`ip -s -j link`: the
    /// driver's `ndo_get_stats64`).
    fn peer_tx_bytes(&self, ifname: &str) -> Result<u64, String> {
        let out = run(Command::new(&self.ctx.ip).args([
            "-n",
            &self.peer_ns,
            "-s",
            "-j",
            "link",
            "show",
            "dev",
            ifname,
        ]))?;
        let j: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "ip -s -j link show dev {ifname}: {e}: {}",
                output_text(&out)
            )
        })?;
        j[0]["stats64"]["tx"]["bytes"]
            .as_u64()
            .ok_or_else(|| format!("no stats64.tx.bytes for {ifname}: {j}"))
    }

    /// Runs the probe with `extra` flags; exit 0 required. Returns its output.
    fn expect_probe(&self, extra: &[&str]) -> Result<String, String> {
        let out = run(Command::new(&self.ctx.bin)
            .args(["-f", &self.dut])
            .args(extra))?;
        let text = output_text(&out);
        if !out.status.success() || contracts(&text).len() != 4 {
            return Err(format!(
                "ncdevmem-rs -f {} {extra:?}: {} with contracts {:?}: {text:?}",
                self.dut,
                out.status,
                contracts(&text)
            ));
        }
        Ok(text)
    }

    /// The module's per-RX-queue counters of both ends as it prints them (`queue packets bytes
    /// hw_drops alloc_fail split ring buf_size provider tx_stopped peer_tx_stopped`), for a
    /// failure's line: which queue dropped frames, could not get a buffer or stays stopped.
    pub fn stats_text(&self) -> String {
        [self.dut.clone(), format!("dnic{}b", self.id)]
            .iter()
            .map(|dev| {
                let path = format!("{DEBUGFS}/{dev}/stats");
                match std::fs::read_to_string(&path) {
                    Ok(t) => format!("{dev}: {}", t.trim_end().replace('\n', " | ")),
                    Err(e) => format!("read {path}: {e}"),
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Frames the module dropped on either end of the pair so far: RX rings full
    /// (`hw_drops`) and frames with no buffer (`alloc_fail`), every queue.
    pub fn dropped_frames(&self) -> Result<u64, String> {
        let mut n = 0;
        for dev in [self.dut.clone(), format!("dnic{}b", self.id)] {
            let path = format!("{DEBUGFS}/{dev}/stats");
            let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
            n += text
                .lines()
                .skip(1)
                .filter_map(QueueStats::parse)
                .map(|q| q.hw_drops + q.alloc_fail)
                .sum::<u64>();
        }
        Ok(n)
    }

    /// The module's per-RX-queue counters of the device under test.
    fn queue_stats(&self) -> Result<Vec<QueueStats>, String> {
        let path = format!("{DEBUGFS}/{}/stats", self.dut);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        let rows: Vec<QueueStats> = text.lines().skip(1).filter_map(QueueStats::parse).collect();
        if rows.len() != self.queues as usize {
            return Err(format!("{path}: {text:?}"));
        }
        Ok(rows)
    }
}

impl Drop for Dnic<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("{DEBUGFS}/del_pair"), self.id.to_string());
        let _ = ip(self.ctx, &["netns", "del", &self.peer_ns]);
    }
}

/// One row of `devmem_nic/<if>/stats`.
#[derive(Debug)]
struct QueueStats {
    packets: u64,
    hw_drops: u64,
    alloc_fail: u64,
    split: u64,
    /// The queue has a memory provider (a devmem binding or a zcrx ifq).
    provider: bool,
}

impl QueueStats {
    /// `queue packets bytes hw_drops alloc_fail split ring buf_size provider tx_stopped
    /// peer_tx_stopped` (the last two not read here).
    fn parse(line: &str) -> Option<QueueStats> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let f: Vec<u64> = words
            .iter()
            .take(6)
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        (f.len() == 6).then(|| QueueStats {
            packets: f[1],
            hw_drops: f[3],
            alloc_fail: f[4],
            split: f[5],
            provider: words.get(8) == Some(&"yes"),
        })
    }
}

/// Both sides of one transfer.
struct Transfer {
    server: Output,
    sender: Output,
    json: Option<Value>,
}

impl Transfer {
    /// Both exited 0 and the server wrote its JSON summary.
    fn expect_ok(&self) -> Result<&Value, String> {
        match &self.json {
            Some(j) if self.server.status.success() && self.sender.status.success() => Ok(j),
            _ => Err(format!(
                "server {} ({:?}), sender {} ({:?})",
                self.server.status,
                String::from_utf8_lossy(&self.server.stderr).trim(),
                self.sender.status,
                String::from_utf8_lossy(&self.sender.stderr).trim()
            )),
        }
    }

    /// [`Transfer::expect_ok`], and the summary shows `bytes` validated in dmabuf frags, no
    /// mismatch, no linear byte, and as many tokens released as frags received.
    fn expect_validated(&self, bytes: u64) -> Result<&Value, String> {
        let j = self.expect_ok()?;
        let n = |k: &str| j[k].as_u64().unwrap_or(u64::MAX);
        let frags = n("dmabuf_frags");
        if n("bytes") != bytes
            || n("validated_bytes") != bytes
            || n("dmabuf_bytes") != bytes
            || n("mismatches") != 0
            || n("linear_frags") != 0
            || frags == 0
            || n("tokens_released") != frags
        {
            return Err(format!(
                "expected {bytes} bytes validated in dmabuf frags, all tokens released: {j}"
            ));
        }
        Ok(j)
    }

    /// The server's log has each of `needles`.
    fn expect_log(&self, needles: &[&str]) -> Result<(), String> {
        let text = output_text(&self.server);
        match needles.iter().find(|n| !text.contains(**n)) {
            Some(n) => Err(format!("server log lacks {n:?}: {text:?}")),
            None => Ok(()),
        }
    }
}

/// The NIC as devmem_lib.py leaves it for `-n` runs (rings with header split and 64 RX
/// descriptors, RSS away from queue 3, a tcp6 rule for `port` to queue 3), plus the ntuple
/// feature, which this driver (like gve) needs for rules; undone on drop in reverse, the way
/// the harness's deferred calls do it.
struct HarnessSetup<'c> {
    _undo: EthtoolUndo<'c>,
}

impl<'c> HarnessSetup<'c> {
    fn apply(ctx: &'c Ctx, dev: &str, port: u16) -> Result<Self, String> {
        let port = port.to_string();
        let mut undo = EthtoolUndo::new(
            ctx,
            dev,
            &[
                // devmem_lib also writes hds-thresh 0 (the default here); Debian's ethtool
                // 6.14 has no hds-thresh parameter.
                &["-G", "tcp-data-split", "on", "rx", "64"],
                &["-K", "ntuple", "on"],
                &["-X", "equal", "3"],
            ],
            &[
                &["-X", "default"],
                &["-K", "ntuple", "off"],
                &["-G", "tcp-data-split", "auto", "rx", "1024"],
            ],
        )?;
        undo.add_rule(
            ctx,
            dev,
            &["flow-type", "tcp6", "dst-port", &port, "action", "3"],
        )?;
        Ok(HarnessSetup { _undo: undo })
    }
}

/// `ethtool` changes to one device, undone on drop: `first` (added later, run first), then the
/// fixed undo list.
struct EthtoolUndo<'c> {
    ctx: &'c Ctx,
    dev: String,
    first: Vec<Vec<String>>,
    undo: Vec<Vec<String>>,
}

impl<'c> EthtoolUndo<'c> {
    /// Runs each of `apply` (`ethtool OP DEV ARGS…` given as `[OP, ARGS…]`); `undo` entries run
    /// on drop even when applying failed half way.
    fn new(ctx: &'c Ctx, dev: &str, apply: &[&[&str]], undo: &[&[&str]]) -> Result<Self, String> {
        let with_dev = |a: &[&str]| -> Vec<String> {
            let mut v = vec![a[0].to_string(), dev.to_string()];
            v.extend(a[1..].iter().map(|s| s.to_string()));
            v
        };
        let guard = EthtoolUndo {
            ctx,
            dev: dev.to_string(),
            first: Vec::new(),
            undo: undo.iter().map(|a| with_dev(a)).collect(),
        };
        for a in apply {
            let args = with_dev(a);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            ethtool(ctx, &refs)?;
        }
        Ok(guard)
    }
}

impl<'c> EthtoolUndo<'c> {
    /// Header split on, ntuple on, RSS over queues 0–2 and a rule steering TCP/IPv4 to
    /// destination port `port` to queue 3 (the queue the cases bind): the setup a devmem
    /// receive on `dev` needs, undone (rule first) on drop.
    fn split_and_steer_to_queue3(ctx: &'c Ctx, dev: &str, port: u16) -> Result<Self, String> {
        let mut setup = EthtoolUndo::new(
            ctx,
            dev,
            &[
                &["-G", "tcp-data-split", "on"],
                &["-K", "ntuple", "on"],
                &["-X", "equal", "3"],
            ],
            &[
                &["-X", "default"],
                &["-K", "ntuple", "off"],
                &["-G", "tcp-data-split", "auto"],
            ],
        )?;
        let port = port.to_string();
        setup.add_rule(
            ctx,
            dev,
            &["flow-type", "tcp4", "dst-port", &port, "action", "3"],
        )?;
        Ok(setup)
    }

    /// `ethtool -N DEV SPEC…`; the rule (at the id ethtool prints) is deleted first on drop.
    fn add_rule(&mut self, ctx: &Ctx, dev: &str, spec: &[&str]) -> Result<(), String> {
        let added = ethtool(ctx, &[&["-N", dev][..], spec].concat())?;
        let id = added
            .rsplit("ID ")
            .next()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("ethtool -N: no rule id in {added:?}"))?;
        self.first.push(vec![
            "-N".into(),
            dev.into(),
            "delete".into(),
            id.to_string(),
        ]);
        Ok(())
    }
}

impl Drop for EthtoolUndo<'_> {
    fn drop(&mut self) {
        for args in self.first.iter().rev().chain(self.undo.iter()) {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(e) = ethtool(self.ctx, &refs) {
                println!("# {}: undo failed: {e}", self.dev);
            }
        }
    }
}

/// Runs the guest's ethtool (Debian's, from the runner's chroot); non-zero exit is an error.
fn ethtool(ctx: &Ctx, args: &[&str]) -> Result<String, String> {
    let out = run(Command::new(&ctx.ethtool).args(args))?;
    if !out.status.success() {
        return Err(format!(
            "ethtool {}: {}",
            args.join(" "),
            output_text(&out).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Kills and reaps a child on drop (the sender of the signal case).
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends SIGTERM to `child` and hands it back for [`wait`].
fn terminate(child: Child) -> Result<Child, String> {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .map_err(|e| format!("kill -TERM {pid}: {e}"))?;
    Ok(child)
}

/// stdout and stderr of a finished command, as text.
fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The probe's kernel-contract result lines (`ok   bind-rx … refused`, …).
fn contracts(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            l.starts_with("ok")
                && (l.contains("bind-rx with")
                    || l.contains("bind-rx of")
                    || l.contains("shrinking"))
        })
        .map(|l| l.trim_start_matches("ok").trim().to_string())
        .filter(|l| !l.starts_with("queue-get"))
        .collect()
}

/// The first `len` bytes of the `-v 7` stream: 1, 2, …, 6, `\n`, repeated.
fn pattern(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| if i % 7 == 6 { b'\n' } else { (i % 7 + 1) as u8 })
        .collect()
}

/// One line of a receiver summary for the case output.
fn summary(j: &Value) -> String {
    format!(
        "{} bytes validated in {} dmabuf frags (largest {} B), {} linear; {} tokens released \
         in {} DONTNEED calls; {:.2} Gbit/s under TCG",
        j["validated_bytes"],
        j["dmabuf_frags"],
        j["max_dmabuf_frag"],
        j["linear_frags"],
        j["tokens_released"],
        j["dontneed_calls"],
        j["gbit_per_s"].as_f64().unwrap_or(0.0)
    )
}

/// No RX queue of `state` belongs to a devmem binding.
fn no_binding(state: &NicState) -> Result<(), String> {
    let rx = QueueType::Rx.value();
    match state.queues.iter().find(|q| q.0 == rx && q.2.is_some()) {
        Some(q) => Err(format!("queue {} still bound to dmabuf {:?}", q.1, q.2)),
        None => Ok(()),
    }
}

/// Payload went to pool buffers (split) on the bound queue only.
fn only_bound_queue_split(q: &[QueueStats]) -> Result<(), String> {
    let others: u64 = q
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != BOUND)
        .map(|(_, s)| s.split)
        .sum();
    if q[BOUND].split == 0 || others != 0 {
        return Err(format!("split frames per queue: {q:?}"));
    }
    Ok(())
}

/// The guest kernel's log has no warning, BUG, oops or refcount/page-pool leak, and no page
/// pool is left waiting for its buffers. Run after every other case.
pub fn kernel_log(_ctx: &Ctx) -> CaseResult {
    // A pool whose device is gone but whose buffers are still out is listed with a detach
    // time until they come back. Buffers of sk_buffs whose free was deferred to an idle CPU
    // (skb_attempt_defer_free; a C ncdevmem run leaves such) come back once that CPU runs the
    // NET_RX softirq: make every CPU run it, give the pools' once-a-second release retry a
    // moment, then require none.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut nl = Netdev::open().map_err(err)?;
    let lingering = loop {
        ncdevmem::sys::softirq::run_net_rx_on_each_cpu()
            .map_err(|e| format!("NET_RX on each CPU: {e}"))?;
        let pools = nl.page_pool_get_dump().map_err(err)?;
        let detached: Vec<_> = pools
            .into_iter()
            .filter(|p| p.detach_time.is_some())
            .collect();
        if detached.is_empty() || Instant::now() > deadline {
            break detached;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = run(&mut Command::new("dmesg"))?;
    let text = String::from_utf8_lossy(&log.stdout);
    const BAD: [&str; 11] = [
        "WARNING:",
        "BUG:",
        "Oops",
        "kernel BUG",
        "refcount_t",
        "page_pool_release_retry",
        "stalled pool shutdown",
        "general protection fault",
        "Call Trace",
        "UBSAN",
        "list_del corruption",
    ];
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| BAD.iter().any(|b| l.contains(b)))
        .take(20)
        .collect();
    if !bad.is_empty() || !lingering.is_empty() {
        return Err(format!(
            "kernel log: {bad:?}; page pools still holding buffers after their device went: \
             {lingering:?}"
        ));
    }
    let lines = text.lines().count();
    let dnic = text.lines().filter(|l| l.contains("devmem_nic")).count();
    Ok(Outcome::Pass(format!(
        "{lines} kernel log lines, none a warning, BUG, oops or refcount/page-pool leak \
         ({dnic} from devmem_nic); no detached page pool holds buffers (after NET_RX ran on \
         every CPU)"
    )))
}
