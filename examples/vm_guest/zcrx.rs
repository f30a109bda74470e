//! io_uring zcrx cases on the software devmem NIC: the zcrx server (default and large
//! buffers, several flows over ifqs) and the `iou-zcrx` personality (threads, a late client).

use super::*;

/// io_uring zcrx on the bound device queue, with the tool's own NIC setup: 64 MiB validated
/// through `RECV_ZC`, every buffer returned through the refill ring, the NIC restored.
pub(super) fn zcrx(ctx: &Ctx) -> CaseResult {
    zcrx_case(ctx, 15, 5430, &[])
}

/// The same with `--rx-buf-len 16384` over a hugetlb area: the kernel writes 16384 back.
pub(super) fn zcrx_large_buf(ctx: &Ctx) -> CaseResult {
    let _pool = HugepagePool::raise(16)?;
    zcrx_case(ctx, 16, 5431, &["--rx-buf-len", "16384"])
}

fn zcrx_case(ctx: &Ctx, id: u32, port: u16, extra: &[&str]) -> CaseResult {
    let nic = Dnic::new(ctx, id, true)?;
    let before = NicState::take(&nic.dut)?;
    let mut server = vec![
        "--zcrx",
        "-s",
        DUT4,
        "-c",
        PEER4,
        "-v",
        "7",
        "--verify-restore",
    ];
    server.extend_from_slice(extra);
    let t = nic.transfer(
        port,
        &server,
        &["--send-pattern", "64M", "-s", DUT4, "-c", PEER4, "-v", "7"],
    )?;
    let j = t.expect_ok()?;
    let n = |k: &str| j[k].as_u64().unwrap_or(u64::MAX);
    let want_len = if extra.is_empty() { 4096 } else { 16384 };
    if j["mode"] != "io_uring zcrx"
        || n("bytes") != STREAM
        || n("validated_bytes") != STREAM
        || n("mismatches") != 0
        || n("zcrx_chunks") == 0
        || n("zcrx_buffers_returned") != n("zcrx_chunks")
        || n("zcrx_rx_buf_len") != want_len
    {
        return Err(format!("zcrx summary {j}"));
    }
    t.expect_log(&["registered zcrx ifq", "NIC state matches its snapshot"])?;
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the zcrx server")?;
    if let Some(q) = after.queues.iter().find(|q| q.3) {
        return Err(format!("queue {} still owned by io_uring", q.1));
    }
    let q = nic.queue_stats()?;
    // As the devmem server's: the bound queue's bytes from before the listen (read once the
    // ifq is registered), the payload and its headers.
    let queue_bytes = rx::expect_one_flow_device_rx(j)?;
    Ok(Outcome::Pass(format!(
        "{} bytes validated in {} chunks of at most rx_buf_len {}, all {} buffers returned in \
         {} refill publishes; {} frames with payload on queue {BOUND} (qstats {queue_bytes} \
         bytes); NIC as before, no io_uring owner left; {:.2} Gbit/s under TCG",
        n("validated_bytes"),
        n("zcrx_chunks"),
        n("zcrx_rx_buf_len"),
        n("zcrx_buffers_returned"),
        n("zcrx_refill_publishes"),
        q[BOUND].split,
        j["gbit_per_s"].as_f64().unwrap_or(0.0)
    )))
}

/// Flows of `devmem-nic/zcrx-multi-flow` and the queues of its two ifqs.
const ZMF_FLOWS: usize = 4;

const ZMF_QUEUES: [u64; 2] = [2, 3];

/// The zcrx server with `--flows 4 -t 2 -q 2 --duration 5 --seed S`: an RSS context over
/// exactly queues 2..4 and one rule to it, one ifq (and one worker) on each of them, each
/// flow handed to the worker of the queue it arrived on. Every flow validated (its own keyed
/// stream, in zcrx chunks), each worker's flows all on its own queue by `SO_INCOMING_NAPI_ID`,
/// every buffer returned; the module's per-queue counters agree (split frames only on a
/// bound queue while the rule is installed, and on each bound queue exactly when the tool saw
/// a flow there); about 5 s measured with CPU figures; the NIC (contexts included) as before, no
/// io_uring owner left.
pub(super) fn zcrx_multi_flow(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 65, true)?;
    let before = NicState::take(&nic.dut)?;
    let (port, seed) = (5650u16, "65");
    let flows = ZMF_FLOWS.to_string();
    let q0 = nic.queue_stats()?;
    let (t, steered) = nic.transfer_steered(
        port,
        &[
            "--zcrx",
            "-s",
            DUT4,
            "-t",
            "2",
            "-q",
            "2",
            "--flows",
            &flows,
            "--seed",
            seed,
            "--duration",
            "5",
            "--verify-restore",
        ],
        &[
            "--send-pattern",
            "0",
            "--duration",
            "100",
            "-s",
            DUT4,
            "--flows",
            &flows,
            "--seed",
            seed,
        ],
    )?;
    let j = t.expect_ok()?;
    let q1 = nic.queue_stats()?;
    t.expect_log(&[
        "RSS context",
        "registered zcrx ifq",
        "NIC state matches its snapshot",
    ])?;
    let per_flow = j["flows"].as_array().cloned().unwrap_or_default();
    let workers = j["workers"].as_array().cloned().unwrap_or_default();
    if j["flow_count"] != ZMF_FLOWS || per_flow.len() != ZMF_FLOWS || workers.len() != 2 {
        return Err(format!("expected {ZMF_FLOWS} flows over 2 workers: {j}"));
    }
    let n = |v: &Value, key: &str| v[key].as_u64().unwrap_or(u64::MAX);
    for (w, r) in workers.iter().enumerate() {
        if n(r, "rx_queue") != ZMF_QUEUES[w] || n(r, "zcrx_buffers_returned") != n(r, "zcrx_chunks")
        {
            return Err(format!(
                "worker {w}: expected the ifq of queue {} with every buffer returned: {r}",
                ZMF_QUEUES[w]
            ));
        }
    }
    let mut on_queue = [0usize; 2];
    for (k, f) in per_flow.iter().enumerate() {
        let w = n(f, "worker") as usize;
        let listed = workers.get(w).and_then(|r| r["flows"].as_array()).cloned();
        if n(f, "bytes") == 0
            || n(f, "bytes") == u64::MAX
            || n(f, "validated_bytes") != n(f, "bytes")
            || n(f, "mismatches") != 0
            || n(f, "zcrx_chunks") == 0
            || f["stream"] != format!("seed {seed} flow {k} of {ZMF_FLOWS}")
            || w >= 2
            || n(f, "rx_queue") != ZMF_QUEUES[w]
            || !listed.is_some_and(|l| l.contains(&Value::from(k)))
        {
            return Err(format!(
                "flow {k}: expected its own stream validated in zcrx chunks, received by the \
                 worker of the queue it arrived on (workers {workers:?}): {f}"
            ));
        }
        on_queue[w] += 1;
    }
    // The module's own counters: payload only on the bound queues while the server's rule
    // steered (the last sample before its undo removed the rule), and on a bound queue
    // exactly when the tool says a flow arrived there. The peer sends until the server's
    // connections close, so its frames in flight then may come after the rule is gone: the
    // default context spreads those over queues 0..2 (tests/vm/FLAKES.md).
    let split: Vec<u64> = q0.iter().zip(&q1).map(|(a, b)| b.split - a.split).collect();
    let steered = steered.ok_or("no sample of the queues while the server's rule was installed")?;
    let during: Vec<u64> = q0
        .iter()
        .zip(&steered)
        .map(|(a, b)| b.split - a.split)
        .collect();
    if during[..2].iter().any(|&s| s != 0) || during[2..].iter().sum::<u64>() == 0 {
        return Err(format!(
            "split frames per queue while the server's rule was installed {during:?} (want \
             payload, and none outside the bound queues 2..4); over the whole transfer {split:?}"
        ));
    }
    let late: u64 = split[..2].iter().sum();
    for (w, &q) in ZMF_QUEUES.iter().enumerate() {
        if (split[q as usize] > 0) != (on_queue[w] > 0) {
            return Err(format!(
                "queue {q}: the module counted {} split frames, the tool {} flows there \
                 (split per queue {split:?})",
                split[q as usize], on_queue[w]
            ));
        }
    }
    let measured = j["measured_s"].as_f64().unwrap_or(0.0);
    let cpu = &j["cpu"]["app"];
    if !(3.5..6.5).contains(&measured) || cpu.is_null() {
        return Err(format!(
            "--duration 5: expected about 5 s measured with CPU figures: {j}"
        ));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the zcrx multi-flow run")?;
    if let Some(q) = after.queues.iter().find(|q| q.3) {
        return Err(format!("queue {} still owned by io_uring", q.1));
    }
    Ok(Outcome::Pass(format!(
        "{ZMF_FLOWS} flows, each its own keyed stream validated in zcrx chunks ({} chunks in \
         all, every buffer returned), flows per ifq {on_queue:?} on queues {ZMF_QUEUES:?}, each \
         worker's flows on its own queue (module: split frames per queue {during:?} while the \
         rule was installed, {late} on queues 0..2 after its removal); {} bytes \
         in {measured:.2} s = {:.3} Gbit/s, device RX {} bytes by qstats; app sys {:.1} %, \
         softirq {:.1} %, idle {:.1} %, the tool's user CPU {} of busy (TCG: shape, not \
         speed); NIC as before, no io_uring owner left",
        j["zcrx_chunks"],
        j["bytes"],
        j["gbit_per_s"].as_f64().unwrap_or(0.0),
        j["device_rx"]["bytes"],
        cpu["sys"].as_f64().unwrap_or(0.0),
        cpu["softirq"].as_f64().unwrap_or(0.0),
        cpu["idle"].as_f64().unwrap_or(0.0),
        j["cpu"]["tool_user_pct_of_app_busy"]
            .as_f64()
            .map_or("-".to_string(), |p| format!("{p:.1} %")),
    )))
}

/// Waits until something listens on TCP port `port` of this namespace (`/proc/net/tcp6`,
/// state 0A), as the harness's `wait_port_listen`.
fn wait_listening(port: u16, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    let needle = format!(":{port:04X} ");
    loop {
        let table = std::fs::read_to_string("/proc/net/tcp6").map_err(|e| format!("{e}"))?;
        let listening = table.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && format!("{} ", f[1]).ends_with(&needle) && f[3] == "0A"
        });
        if listening {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port} after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `iou-zcrx -t 2` (the later iou-zcrx.c's threads): RSS spreads every flow over queues 2 and
/// 3 (header split on); the server registers an ifq on each and accepts 2×2 connections, each
/// handed to the worker of the queue its NAPI id names; the client (also as `iou-zcrx`, in the
/// peer namespace) opens the four at once. Both exit 0, every connection delivers 2 MiB of the
/// `'a'..'z'` stream, and every frame with payload was split on queue 2 or 3.
pub(super) fn iou_zcrx_threads(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 34, true)?;
    let _setup = EthtoolUndo::new(
        ctx,
        &nic.dut,
        &[
            &["-G", "tcp-data-split", "on"],
            &["-X", "weight", "0", "0", "1", "1"],
        ],
        &[&["-X", "default"], &["-G", "tcp-data-split", "auto"]],
    )?;
    let link = "/tmp/iou-zcrx";
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(&ctx.bin, link).map_err(|e| format!("symlink {link}: {e}"))?;
    let port = 5440u16;
    let server = spawn(Command::new(link).args([
        "-s",
        "-i",
        &nic.dut,
        "-q",
        "2",
        "-t",
        "2",
        "-p",
        &port.to_string(),
    ]))?;
    let mut server = KillOnDrop(Some(server));
    wait_listening(port, Duration::from_secs(60))?;
    let client = run(ns_exec(ctx, &nic.peer_ns).args([
        link,
        "-c",
        "-h",
        DUT6,
        "-p",
        &port.to_string(),
        "-t",
        "2",
        "-l",
        "12840",
    ]))?;
    let child = server.0.take().ok_or("the server is gone")?;
    let got = wait_within(child, Duration::from_secs(120))?;
    let log = output_text(&got);
    if !client.status.success() || !got.status.success() {
        return Err(format!(
            "client {}: {}; server {}: {log}",
            client.status,
            output_text(&client).trim(),
            got.status
        ));
    }
    let q = nic.queue_stats()?;
    if q[0].split + q[1].split != 0 || q[2].split + q[3].split == 0 {
        return Err(format!("split frames per queue: {q:?}"));
    }
    let workers: Vec<&str> = log.lines().filter(|l| l.contains("worker")).collect();
    let total: u64 = workers
        .iter()
        .filter_map(|l| l.split(", ").nth(1))
        .filter_map(|b| b.split(' ').next()?.parse::<u64>().ok())
        .sum();
    if workers.len() != 2 || total != 4 * 2_097_152 {
        return Err(format!("server log: {log:?}"));
    }
    Ok(Outcome::Pass(format!(
        "4 connections over 2 workers: {}; split frames on queues 2 and 3: {} and {}",
        workers.join("; "),
        q[2].split,
        q[3].split
    )))
}

/// How long after the server listens `devmem-nic/iou-zcrx-late-client` starts its client:
/// beyond the 5 s the server once gave its first connection, and beyond the latest start of
/// iou-zcrx.py's own client measured on a loaded host (about 6 s; docs/kernel-harness.md).
const LATE_CLIENT: Duration = Duration::from_secs(7);

/// `iou-zcrx -s` with `test_zcrx.single`'s NIC setup (header split, RSS over queues 0–2, a
/// tcp6 rule to queue 3) and a client (also as `iou-zcrx`, in the peer namespace) started
/// [`LATE_CLIENT`] after the server listens, as iou-zcrx.py's client starts on a loaded host:
/// the server waits for its first connection without a deadline, as iou-zcrx.c blocks in its
/// accept; both exit 0, the 2 MiB `'a'..'z'` stream is validated, every frame with payload was
/// split on queue 3.
pub(super) fn iou_zcrx_late_client(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 35, true)?;
    let port = 5450u16;
    let mut setup = EthtoolUndo::new(
        ctx,
        &nic.dut,
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
    let port_s = port.to_string();
    setup.add_rule(
        ctx,
        &nic.dut,
        &["flow-type", "tcp6", "dst-port", &port_s, "action", "3"],
    )?;
    let link = "/tmp/iou-zcrx";
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(&ctx.bin, link).map_err(|e| format!("symlink {link}: {e}"))?;
    let started = Instant::now();
    let server = spawn(Command::new(link).args(["-s", "-p", &port_s, "-i", &nic.dut, "-q", "3"]))?;
    let mut server = KillOnDrop(Some(server));
    wait_listening(port, Duration::from_secs(60))?;
    let listening = Instant::now();
    let to_listen = listening - started;
    std::thread::sleep(LATE_CLIENT);
    let client_after = listening.elapsed();
    let client = run(
        ns_exec(ctx, &nic.peer_ns).args([link, "-c", "-h", DUT6, "-p", &port_s, "-l", "12840"])
    )?;
    let child = server.0.take().ok_or("the server is gone")?;
    let got = wait_within(child, Duration::from_secs(120))?;
    let server_for = listening.elapsed();
    let log = output_text(&got);
    let timing = format!(
        "server listening {:.1} s after its start, client started {:.1} s after that, server \
         done {:.1} s after listening",
        to_listen.as_secs_f64(),
        client_after.as_secs_f64(),
        server_for.as_secs_f64()
    );
    if !client.status.success() || !got.status.success() {
        return Err(format!(
            "{timing}; client {}: {}; server {}: {}",
            client.status,
            output_text(&client).trim(),
            got.status,
            log.trim()
        ));
    }
    let worker = log
        .lines()
        .find(|l| l.contains("worker 0"))
        .ok_or_else(|| format!("{timing}; no worker line in the server's log: {log:?}"))?;
    if !worker.contains("1 connection(s), 2097152 bytes validated") {
        return Err(format!("{timing}; server log: {log:?}"));
    }
    let q = nic.queue_stats()?;
    only_bound_queue_split(&q)?;
    Ok(Outcome::Pass(format!(
        "{timing}; {}; {} split frames on queue {BOUND}",
        worker.trim(),
        q[BOUND].split
    )))
}
