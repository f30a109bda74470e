//! The lab's cases on the software devmem NIC: a sweep on the device under test against
//! `ncdevmem-rs --peer-server` in the peer's namespace, each a whole table. Their tables are
//! printed as recordings (`NCDEVMEM-FIXTURE-BEGIN sweep-*`), which the runner saves with the
//! fixtures. TCG figures: the shape of a table, not its speed.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::super::{spawn, wait_within, CaseResult, Ctx, NicState, Outcome};
use super::{no_binding, output_text, record, terminate, Dnic, NrHugepages, DUT4, PEER4};

/// The peer's control port in these cases.
const CTRL: &str = "4343";
/// The longest a whole sweep may take under TCG.
const SWEEP_DEADLINE: Duration = Duration::from_secs(1200);

/// `--peer-server` in the peer's namespace, stopped (SIGTERM) and reaped on drop.
struct PeerServer(Option<Child>);

impl PeerServer {
    fn start(nic: &Dnic) -> Result<PeerServer, String> {
        PeerServer::start_with(nic, &[])
    }

    /// [`PeerServer::start`] with `extra` options (`-f IF`: devmem TX).
    fn start_with(nic: &Dnic, extra: &[&str]) -> Result<PeerServer, String> {
        let child = spawn(
            nic.sender(&[
                "--peer-server",
                "-s",
                PEER4,
                "-p",
                CTRL,
                "--max-duration",
                "120",
            ])
            .args(extra),
        )?;
        let pid = child.id();
        let peer = PeerServer(Some(child));
        let port: u16 = CTRL.parse().map_err(|e| format!("{e}"))?;
        listening(pid, port, Duration::from_secs(30))?;
        Ok(peer)
    }

    /// Stops it; its log.
    fn stop(mut self) -> Result<String, String> {
        let child = self.0.take().ok_or("no peer server")?;
        let out = wait_within(terminate(child)?, Duration::from_secs(30))?;
        Ok(output_text(&out))
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until process `pid` listens on `port` (its own namespace's `/proc/PID/net/tcp6`).
fn listening(pid: u32, port: u16, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    let needle = format!(":{port:04X} ");
    loop {
        let found = ["tcp", "tcp6"].iter().any(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).is_ok_and(|table| {
                table.lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 3 && format!("{} ", f[1]).ends_with(&needle) && f[3] == "0A"
                })
            })
        });
        if found {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the peer server does not listen on {port} after {within:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the sweep `-l -f DUT -s DUT4 -p PORT --peer PEER4 ARGS --json FILE`; its output and
/// JSON object.
fn sweep(nic: &Dnic, port: u16, args: &[&str]) -> Result<(Output, Value), String> {
    let json = sweep_json(port);
    let _ = std::fs::remove_file(&json);
    let port = port.to_string();
    let out = wait_within(
        spawn(
            nic.server(&[
                "-s",
                DUT4,
                "-p",
                &port,
                "--peer",
                PEER4,
                "--peer-port",
                CTRL,
            ])
            .args(args)
            .args(["--json", &json]),
        )?,
        SWEEP_DEADLINE,
    )?;
    let doc = std::fs::read_to_string(&json)
        .map_err(|e| format!("{json}: {e}; {}", output_text(&out)))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("{json}: {e}")))?;
    Ok((out, doc))
}

/// Where [`sweep`] on `port` writes its `--json`.
fn sweep_json(port: u16) -> String {
    format!("/tmp/sweep-{port}.json")
}

/// The mean of `key` at the point whose value is `value`.
fn mean(doc: &Value, value: u64, key: &str) -> Result<f64, String> {
    doc["points"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["value"] == value))
        .and_then(|p| p["columns"][key]["mean"].as_f64())
        .ok_or_else(|| format!("no {key} at {value} in {}", doc["points"]))
}

/// The table (stdout) of a sweep, recorded under `name`, and its first lines for a case line.
fn table(name: &str, out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    record(name, &text);
    text
}

/// The table of a sweep that exited 0 (recorded under `name`), the peer stopped. A sweep that
/// failed is an error with its output, the peer's log and the module's queue counters of both
/// ends.
fn passed(name: &str, out: &Output, peer: PeerServer, nic: &Dnic) -> Result<String, String> {
    let text = table(name, out);
    let peer_log = peer.stop()?;
    if !out.status.success() {
        return Err(format!(
            "the sweep: {}: {}; peer: {peer_log}; module queue counters: {}",
            out.status,
            output_text(out),
            nic.stats_text()
        ));
    }
    Ok(text)
}

/// [`sweep`] against a fresh [`PeerServer`], checked by [`passed`] (recorded under `name`): its
/// table and JSON object. Every failure fails the case, a run in which a flow received
/// nothing too (it was the tool's own start-up work in each worker, measured and fixed:
/// `tests/vm/FLAKES.md`); its line then says what the kernel received on that flow
/// (`TCP_INFO`), what its worker did (when it began and ended, its recvmsg calls and CPU time),
/// what the peer sent per connection and the module's queue counters and TX queue states of
/// both ends.
fn sweep_passing(
    name: &str,
    nic: &Dnic,
    port: u16,
    args: &[&str],
) -> Result<(String, Value), String> {
    let peer = PeerServer::start(nic)?;
    let (out, doc) = sweep(nic, port, args)?;
    passed(name, &out, peer, nic).map(|t| (t, doc))
}

/// `--sweep rx-page-size=4096,16384,65536 --runs 3 --duration 3 --flows 4 -t 4 -q 4 --seed S`
/// against the peer: the table printed (and recorded), every run passed; frags per GiB at
/// 65536 at most half of those at 4096; the NIC as before and no binding left. The binding is
/// 128 MiB. (The stricter shape — at most an eighth, and fewer `SO_DEVMEM_DONTNEED` calls per
/// GiB at 65536 — does not hold on this software NIC under TCG: measured 0.21–0.26 of the 4K
/// frags per GiB with a wide spread, and DONTNEED calls per GiB not lower; `docs/lab.md`. The
/// DONTNEED figures are printed in the case line.) The pair has 8 queues and the four bound ones
/// are 4..7: the tool keeps queue 0 in the main RSS table, so `-t 0` is refused.
pub(super) fn sweep_rx_page_size(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::with_queues(ctx, 61, 8, true)?;
    let before = NicState::take(&nic.dut)?;
    // A 128 MiB binding (64 hugepages, and as many again for the next run's while the
    // previous one's are given back): at 64K niovs it still has 2048 buffers, so each of the
    // four flows' receive windows (sized from its share of the buffers, one segment per
    // buffer at worst) stays wide enough to fill a niov.
    let _pages = NrHugepages::set(128)?;
    let (text, doc) = sweep_passing(
        "sweep-rx-page-size",
        &nic,
        5710,
        &[
            "--sweep",
            "rx-page-size=4096,16384,65536",
            "--runs",
            "3",
            "--duration",
            "3",
            "--flows",
            "4",
            "-t",
            "4",
            "-q",
            "4",
            "--seed",
            "6161",
            "--dmabuf-size",
            "128M",
        ],
    )?;
    let (f4, f64k) = (
        mean(&doc, 4096, "frags_per_gib")?,
        mean(&doc, 65536, "frags_per_gib")?,
    );
    let (d4, d64k) = (
        mean(&doc, 4096, "dontneed_per_gib")?,
        mean(&doc, 65536, "dontneed_per_gib")?,
    );
    if f64k > f4 / 2.0 {
        return Err(format!(
            "frags per GiB {f64k:.0} at 65536, more than half of {f4:.0} at 4096:\n{text}"
        ));
    }
    let runs_ok = doc["runs"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["outcome"] == "ok").count());
    if runs_ok != 9 {
        return Err(format!("{runs_ok} of 9 runs passed:\n{text}"));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the sweep")?;
    no_binding(&after)?;
    Ok(Outcome::Pass(format!(
        "9 runs interleaved, all passed; frags/GiB {f4:.0} at 4K, {:.0} at 16K, {f64k:.0} at \
         64K; DONTNEED/GiB {d4:.0} at 4K, {d64k:.0} at 64K; RX dev Gbit/s {:.2} / {:.2} / \
         {:.2} (software NIC under TCG: shape, not speed); NIC as before, no binding left",
        mean(&doc, 16384, "frags_per_gib")?,
        mean(&doc, 4096, "rx_dev_gbps").unwrap_or(f64::NAN),
        mean(&doc, 16384, "rx_dev_gbps").unwrap_or(f64::NAN),
        mean(&doc, 65536, "rx_dev_gbps").unwrap_or(f64::NAN),
    )))
}

/// zcrx, `--sweep rx-buf-len=4096,32768 --runs 3 --duration 3`, one flow: the table printed
/// (and recorded); completions per GiB at 32768 at most a quarter of those at 4096.
pub(super) fn sweep_rx_buf_len(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 62, true)?;
    let before = NicState::take(&nic.dut)?;
    let _pages = NrHugepages::set(64)?;
    let peer = PeerServer::start(&nic)?;
    let (out, doc) = sweep(
        &nic,
        5720,
        &[
            "--zcrx",
            "--sweep",
            "rx-buf-len=4096,32768",
            "--runs",
            "3",
            "--duration",
            "3",
            "--seed",
            "6262",
        ],
    )?;
    let text = passed("sweep-rx-buf-len", &out, peer, &nic)?;
    // Every run received for the sweep's --duration (the zcrx server takes it) and measured
    // its app CPUs.
    let runs = doc["runs"].as_array().cloned().unwrap_or_default();
    let timed = |r: &Value| {
        let f = &r["figures"];
        f["duration_s"].as_f64() == Some(3.0)
            && f["measured_s"]
                .as_f64()
                .is_some_and(|m| (2.0..4.5).contains(&m))
            && !f["cpu"]["app"].is_null()
    };
    if runs.len() != 6 || !runs.iter().all(timed) {
        return Err(format!(
            "expected 6 runs of --duration 3 with app CPU figures: {}",
            Value::from(runs)
        ));
    }
    let (c4, c32) = (
        mean(&doc, 4096, "completions_per_gib")?,
        mean(&doc, 32768, "completions_per_gib")?,
    );
    if c32 > c4 / 4.0 {
        return Err(format!(
            "completions per GiB {c32:.0} at 32768, more than a quarter of {c4:.0} at \
             4096:\n{text}"
        ));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the sweep")?;
    Ok(Outcome::Pass(format!(
        "6 runs interleaved, all passed, each received for --duration 3; completions/GiB {c4:.0} at 4K, {c32:.0} at 32K; MB/s \
         {:.0} / {:.0} (software NIC under TCG: shape, not speed); NIC as before",
        mean(&doc, 4096, "rx_mb_per_s")?,
        mean(&doc, 32768, "rx_mb_per_s")?,
    )))
}

/// `--sweep autorelease=0,1`: this kernel's bind-rx has no autorelease attribute, so both
/// points skip with the kernel's reason and the sweep exits 4, the NIC untouched.
pub(super) fn sweep_autorelease(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 63, true)?;
    let before = NicState::take(&nic.dut)?;
    let peer = PeerServer::start(&nic)?;
    let (out, doc) = sweep(
        &nic,
        5730,
        &[
            "--sweep",
            "autorelease=0,1",
            "--runs",
            "2",
            "--duration",
            "2",
        ],
    )?;
    let text = table("sweep-autorelease", &out);
    drop(peer);
    let skipped = doc["runs"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["outcome"] == "skip").count());
    if out.status.code() != Some(4) || skipped != 4 || !text.contains("autorelease attribute") {
        return Err(format!(
            "the sweep: {} with {skipped} of 4 runs skipped: {}",
            out.status,
            output_text(&out)
        ));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the sweep")?;
    let reason = text
        .lines()
        .find(|l| l.starts_with("skipped:"))
        .unwrap_or_default()
        .to_string();
    Ok(Outcome::Pass(format!(
        "exit 4, every run of both points skipped: {reason}"
    )))
}

/// A one-run sweep of 2 flows whose peer sends through devmem TX (`--peer-server -f PEER_IF`,
/// `--peer-send devmem --write-size 64K`) to the devmem server on bound queue 3: the run
/// passed, the peer reported both flows' bytes and no error, at least what the receiver got,
/// and its netdev's TX counter grew by at least what the receiver got. Returns a summary for
/// the case line.
pub(super) fn peer_devmem_run(
    nic: &Dnic,
    peer_if: &str,
    tx_bytes: &dyn Fn() -> Result<u64, String>,
) -> Result<String, String> {
    let peer = PeerServer::start_with(nic, &["-f", peer_if, "--dmabuf-size", "4M"])?;
    let tx0 = tx_bytes()?;
    let (out, doc) = sweep(
        nic,
        5645,
        &[
            "-t",
            "3",
            "-q",
            "1",
            "--flows",
            "2",
            "--seed",
            "645",
            "--runs",
            "1",
            "--duration",
            "2",
            "--peer-send",
            "devmem",
            "--write-size",
            "64K",
        ],
    )?;
    let tx1 = tx_bytes()?;
    let peer_log = peer.stop()?;
    let run = &doc["runs"][0];
    let fig = &run["peer"];
    let flow_bytes: Vec<u64> = fig["flow_bytes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    // What the receiver got went over the peer's wire; what the peer reports is what its
    // sendmsg calls accepted, more than that when the receiver closed at the end of its
    // duration with data still queued on the peer's sockets.
    let received = run["figures"]["bytes"].as_u64().unwrap_or(u64::MAX);
    let sent = fig["bytes"].as_u64().unwrap_or(0);
    if !out.status.success()
        || run["outcome"] != "ok"
        || !fig["error"].is_null()
        || flow_bytes.len() != 2
        || flow_bytes.contains(&0)
        || doc["environment"]["peer_send"] != "devmem"
        || doc["environment"]["peer_write_size"] != 65536
        || tx1.saturating_sub(tx0) < received
        || sent < received
    {
        return Err(format!(
            "the devmem peer's run: sweep {} ({}); run {run}; peer TX counter +{}; peer log \
             {peer_log:?}",
            out.status,
            output_text(&out),
            tx1.saturating_sub(tx0)
        ));
    }
    if !peer_log.contains("bound ") || !peer_log.contains("for TX to dmabuf id") {
        return Err(format!("the peer did not log its bind-tx: {peer_log:?}"));
    }
    Ok(format!(
        "a --peer-send devmem sweep run: the peer server (-f {peer_if}) had {flow_bytes:?} \
         bytes of 2 flows accepted by devmem TX sendmsg ({:.3} Gbit/s), {received} of them \
         received and validated by the devmem server before its 2 s ended, peer TX counter \
         +{} bytes",
        fig["gbit_per_s"].as_f64().unwrap_or(0.0),
        tx1.saturating_sub(tx0)
    ))
}

/// `ncdevmem-rs --compare BASE NEW ARGS` (no NIC, no namespace): its exit code, stdout and
/// the comparison's JSON object (`--json`).
fn compare(
    ctx: &Ctx,
    base: &str,
    new: &str,
    args: &[&str],
) -> Result<(i32, String, Value), String> {
    let json = "/tmp/compare.json";
    let _ = std::fs::remove_file(json);
    let out = wait_within(
        spawn(
            std::process::Command::new(&ctx.bin)
                .args(["--compare", base, new])
                .args(args)
                .args(["--json", json]),
        )?,
        Duration::from_secs(60),
    )?;
    let doc = std::fs::read_to_string(json)
        .map_err(|e| format!("{json}: {e}; {}", output_text(&out)))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("{json}: {e}")))?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        doc,
    ))
}

/// The comparison's cell of figure `key` in its first row.
fn cell<'a>(doc: &'a Value, key: &str) -> Result<&'a Value, String> {
    doc["comparison"]["rows"][0]["cells"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["key"] == key))
        .ok_or_else(|| format!("no {key} in the comparison: {}", doc["comparison"]))
}

/// The width and height of a PNG file's image (its IHDR), or why it is none.
fn png_size(path: &str) -> Result<(u32, u32), String> {
    let b = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if b.len() < 24 || &b[..8] != b"\x89PNG\r\n\x1a\n" || &b[12..16] != b"IHDR" {
        return Err(format!("{path}: no PNG ({} bytes)", b.len()));
    }
    let be = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    Ok((be(16), be(20)))
}

/// The reviewer's question (`--compare`): two sweeps of one point each, 4 flows on queues
/// 4..7, 3 runs of 3 s, the base at `rx-page-size=4096` and the new one at 65536 (the points
/// matched by position: same key, other values), `--columns` the seeds' columns and frags per
/// GiB. Frags per GiB must differ significantly
/// (Welch p < 0.05, marked `*`) and be smaller at 64K; the two-series plot is written as a
/// PNG. The base compared with itself: exit 0 and nothing significant. Both comparisons are
/// recorded (`compare-4k-64k`, `compare-self`); TCG figures: the shape, not the speed.
pub(super) fn compare_sweeps(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::with_queues(ctx, 66, 8, true)?;
    let before = NicState::take(&nic.dut)?;
    let _pages = NrHugepages::set(128)?;
    let shape = [
        "--runs",
        "3",
        "--duration",
        "3",
        "--flows",
        "4",
        "-t",
        "4",
        "-q",
        "4",
        "--seed",
        "6666",
        "--dmabuf-size",
        "128M",
    ];
    let mut runs = Vec::new();
    for (name, port, point) in [
        ("compare-base-4k", 5760, "rx-page-size=4096"),
        ("compare-new-64k", 5761, "rx-page-size=65536"),
    ] {
        let args: Vec<&str> = ["--sweep", point].iter().chain(&shape).copied().collect();
        let (text, doc) = sweep_passing(name, &nic, port, &args)?;
        let ok = doc["runs"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["outcome"] == "ok").count());
        if ok != 3 {
            return Err(format!("{name}: {ok} of 3 runs passed:\n{text}"));
        }
        runs.push(sweep_json(port));
    }
    let png = "/tmp/compare.png";
    let _ = std::fs::remove_file(png);
    // The seeds' columns and frags/GiB: the table a reviewer pastes (README, "Sweeps").
    let columns = "rx_dev_gbps,rx_flow_avg_gbps,app_sys_pct,frags_per_gib";
    let (code, text, doc) = compare(
        ctx,
        &runs[0],
        &runs[1],
        &["--plot", png, "--columns", columns],
    )?;
    record("compare-4k-64k", &text);
    let frags = cell(&doc, "frags_per_gib")?;
    let (b, n) = (
        frags["base"]["mean"].as_f64().unwrap_or(f64::NAN),
        frags["new"]["mean"].as_f64().unwrap_or(f64::NAN),
    );
    if code != 0
        || doc["verdict"] != "pass"
        || doc["comparison"]["matched_by"] != "position"
        || frags["significant"] != true
        || n >= b
    {
        return Err(format!(
            "--compare 4K 64K: exit {code}, frags/GiB {b:.0} -> {n:.0} (p {}, significant {}), \
             expected exit 0, significant and smaller:\n{text}",
            frags["p"], frags["significant"]
        ));
    }
    let (w, h) = png_size(png)?;
    if w < 100 || h < 100 {
        return Err(format!("{png}: a {w}x{h} image"));
    }
    let significant = text
        .lines()
        .last()
        .and_then(|l| l.rsplit(": ").next())
        .unwrap_or_default()
        .to_string();
    let (code_self, text_self, doc_self) = compare(ctx, &runs[0], &runs[0], &[])?;
    record("compare-self", &text_self);
    let any = doc_self["comparison"]["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["cells"].as_array().into_iter().flatten())
        .filter(|c| c["significant"] == true)
        .count();
    if code_self != 0 || any != 0 || !text_self.contains(": 0 significant") {
        return Err(format!(
            "--compare of a sweep with itself: exit {code_self}, {any} significant:\n{text_self}"
        ));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the sweeps")?;
    no_binding(&after)?;
    Ok(Outcome::Pass(format!(
        "4K against 64K, 3 runs each: frags/GiB {b:.0} -> {n:.0} ({:+.0} %, p {:.2e}, \
         significant), {significant}; plot {png} {w}x{h}; the 4K sweep with itself: 0 \
         significant; NIC as before, no binding left (software NIC under TCG: shape, not \
         speed)",
        frags["delta_pct"].as_f64().unwrap_or(f64::NAN),
        frags["p"].as_f64().unwrap_or(f64::NAN),
    )))
}
