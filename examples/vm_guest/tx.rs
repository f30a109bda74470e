//! devmem TX cases on the software devmem NIC: the TX client and the pattern sender through
//! a bound dma-buf (one flow, several flows, dma-heap memory), validated by the devmem server.

use super::*;

/// The kernel's `check_tx_chunks`: `hello\nworld\n` through devmem TX with `-z 3`; the peer
/// (the plain receiver in the socat's place) gets exactly those bytes and every zerocopy send
/// completes.
pub(super) fn tx(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 13, true)?;
    let rx = spawn(&mut nic.sender(&[
        "-l",
        "--plain",
        "-s",
        PEER4,
        "-p",
        "5420",
        "--timeout",
        "60",
    ]))?;
    let out = run_with_stdin(
        Command::new(&ctx.bin).args([
            "-f",
            &nic.dut,
            "-s",
            PEER4,
            "-p",
            "5420",
            "-z",
            "3",
            "--timeout",
            "60",
        ]),
        b"hello\nworld\n",
    )?;
    let got = wait(rx)?;
    let text = output_text(&out);
    let line = text
        .lines()
        .find(|l| l.contains("tx ok"))
        .unwrap_or_default()
        .to_string();
    if !out.status.success() || !got.status.success() || got.stdout != b"hello\nworld\n" {
        return Err(format!(
            "sender {} {text:?}; receiver {} got {:?} ({})",
            out.status,
            got.status,
            String::from_utf8_lossy(&got.stdout),
            output_text(&got)
        ));
    }
    completions_cover_sends(&line)?;
    Ok(Outcome::Pass(format!(
        "the peer got exactly \"hello\\nworld\\n\"; {line:?}"
    )))
}

/// 32 MiB of the `-v 7` pattern through devmem TX, without and with `-z 4096`, through a 1 MiB
/// dma-buf (so every region is written again 32 times, each only after its completion: the
/// software NIC reads the payload when it delivers the frame, so an early reuse would corrupt
/// what the peer validates), to a receiver with a 64 KiB window (so the sender has to wait for
/// regions).
pub(super) fn tx_pattern(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 14, true)?;
    let mut seen = Vec::new();
    for (i, z) in [None, Some("4096")].into_iter().enumerate() {
        let port = (5421 + i).to_string();
        let json = format!("/tmp/dnic-tx-{port}.json");
        let rx = spawn(&mut nic.sender(&[
            "-l",
            "--plain",
            "-s",
            PEER4,
            "-p",
            &port,
            "-v",
            "7",
            "--expect-bytes",
            "32M",
            // A 64 KiB window keeps each 1 MiB piece in the sender's socket for many round
            // trips, so the next piece must wait for its region's completion (a receiver fast
            // enough to drain a piece before the next one is placed made the waits timing).
            "--rcvbuf",
            "65536",
            "--timeout",
            "60",
        ]))?;
        let mut cmd = Command::new(&ctx.bin);
        cmd.args([
            "-f",
            &nic.dut,
            "--send-pattern",
            "32M",
            "-s",
            PEER4,
            "-p",
            &port,
            "-v",
            "7",
            "--dmabuf-size",
            "1M",
            "--timeout",
            "60",
            "--json",
            &json,
        ]);
        if let Some(z) = z {
            cmd.args(["-z", z]);
        }
        let out = run(&mut cmd)?;
        let got = wait(rx)?;
        if !out.status.success() || !got.status.success() {
            return Err(format!(
                "-z {z:?}: sender {} {:?}; receiver {} {:?}",
                out.status,
                output_text(&out),
                got.status,
                output_text(&got)
            ));
        }
        let j: Value = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| format!("no JSON summary in {json}"))?;
        let n = |k: &str| j[k].as_u64().unwrap_or(u64::MAX);
        if n("bytes") != 32 << 20
            || n("completed_sends") != n("sends")
            || n("copied_completions") != 0
            || n("buffer_full_waits") == 0
        {
            return Err(format!("-z {z:?}: sender summary {j}"));
        }
        seen.push(format!(
            "-z {}: {} sends in {} iovs, all completed zero-copy ({} notifications), {} waits \
             for a free region",
            z.unwrap_or("-"),
            n("sends"),
            n("iovs"),
            n("completions"),
            n("buffer_full_waits")
        ));
    }
    Ok(Outcome::Pass(format!(
        "32 MiB validated by the peer each time through a 1 MiB dma-buf; {}",
        seen.join("; ")
    )))
}

/// Flows and bytes per flow of `devmem-nic/tx-multi-flow`.
const TXMF_FLOWS: usize = 4;

const TXMF_BYTES: u64 = 16 << 20;

/// 4 flows of devmem TX from the peer's end of the pair (one 4 MiB dma-buf, one binding, each
/// flow from its own 1 MiB window with its own zerocopy completions) to the devmem server on
/// the DUT receiving `--flows 4` on bound queue 3: every flow's keyed stream validated in
/// dmabuf frags by the server (byte by byte: a keyed stream so checked carries no CRC-32, its
/// `crc32` is null on both ends), both ends naming the same stream per flow, every send
/// completed without a copy, and the peer netdev's TX byte counter (the module's, through
/// `ndo_get_stats64`) grown by at least the payload and at most 10 % more (the frames'
/// headers); afterwards the DUT's NIC as before and no binding left on it. Then the same
/// through the lab: a one-run sweep whose peer server (`-f` the peer's netdev) sends 2 flows
/// through devmem TX (`--peer-send devmem`, [`sweep::peer_devmem_run`]).
pub(super) fn tx_multi_flow(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 64, true)?;
    let before = NicState::take(&nic.dut)?;
    let peer_if = format!("dnic{}b", nic.id);
    let (port, seed) = (5640u16, "64");
    let flows = TXMF_FLOWS.to_string();
    let bytes = TXMF_BYTES.to_string();
    let json = format!("/tmp/dnic-txmf-{port}.json");
    let _ = std::fs::remove_file(&json);
    let tx0 = nic.peer_tx_bytes(&peer_if)?;
    let t = nic.transfer(
        port,
        &[
            "-s",
            DUT4,
            "-t",
            "3",
            "-q",
            "1",
            "--flows",
            &flows,
            "--seed",
            seed,
            "--verify-restore",
        ],
        &[
            "-f",
            &peer_if,
            "--send-pattern",
            &bytes,
            "-s",
            DUT4,
            "--flows",
            &flows,
            "--seed",
            seed,
            "--dmabuf-size",
            "4M",
            "--json",
            &json,
        ],
    )?;
    let tx1 = nic.peer_tx_bytes(&peer_if)?;
    let j = t.expect_ok()?;
    let sent: Value = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| format!("no sender JSON in {json}: {:?}", output_text(&t.sender)))?;
    let rx_flows = j["flows"].as_array().cloned().unwrap_or_default();
    let tx_flows = sent["flows"].as_array().cloned().unwrap_or_default();
    if rx_flows.len() != TXMF_FLOWS || tx_flows.len() != TXMF_FLOWS || sent["ok"] != true {
        return Err(format!(
            "expected {TXMF_FLOWS} flows on both ends: server {j}; sender {sent}"
        ));
    }
    let mut windows = Vec::new();
    for (k, (r, s)) in rx_flows.iter().zip(&tx_flows).enumerate() {
        let n = |v: &Value, key: &str| v[key].as_u64().unwrap_or(u64::MAX);
        let frags = n(r, "dmabuf_frags");
        let stream = format!("seed {seed} flow {k} of {TXMF_FLOWS}");
        if n(r, "bytes") != TXMF_BYTES
            || n(r, "validated_bytes") != TXMF_BYTES
            || n(r, "mismatches") != 0
            || n(r, "linear_frags") != 0
            || frags == 0
            || n(r, "tokens_released") != frags
            || r["stream"] != stream
        {
            return Err(format!(
                "server flow {k}: expected {TXMF_BYTES} bytes of {stream} in dmabuf frags, \
                 every token released: {r}"
            ));
        }
        if n(s, "bytes") != TXMF_BYTES
            || s["stream"] != stream
            || n(s, "completed_sends") != n(s, "sends")
            || n(s, "sends") == 0
            || n(s, "copied_completions") != 0
            || s["cpu_user_s"].as_f64().is_none()
        {
            return Err(format!(
                "sender flow {k}: expected {TXMF_BYTES} bytes of {stream}, every send \
                 completed zero-copy, its worker's CPU: {s}"
            ));
        }
        windows.push((n(s, "dmabuf_window_offset"), n(s, "dmabuf_window_bytes")));
    }
    let want: Vec<(u64, u64)> = (0..TXMF_FLOWS as u64).map(|k| (k << 20, 1 << 20)).collect();
    if windows != want {
        return Err(format!("dma-buf windows {windows:?}, want {want:?}"));
    }
    let payload = TXMF_BYTES * TXMF_FLOWS as u64;
    let wire = tx1.saturating_sub(tx0);
    if wire < payload || wire as f64 > payload as f64 * 1.10 {
        return Err(format!(
            "the peer's TX counter grew by {wire} bytes for {payload} bytes of payload: want \
             within [payload, payload + 10 %]"
        ));
    }
    t.expect_log(&["NIC state matches its snapshot"])?;
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the run")?;
    no_binding(&after)?;
    let line = output_text(&t.sender)
        .lines()
        .find(|l| l.contains("tx ok: "))
        .unwrap_or_default()
        .to_string();
    // The same through the lab: the peer server sending a sweep's run through devmem TX.
    let lab = sweep::peer_devmem_run(&nic, &peer_if, &|| nic.peer_tx_bytes(&peer_if))?;
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the sweep run")?;
    no_binding(&after)?;
    let user: f64 = tx_flows
        .iter()
        .map(|f| f["cpu_user_s"].as_f64().unwrap_or(0.0))
        .sum();
    let sys: f64 = tx_flows
        .iter()
        .map(|f| f["cpu_sys_s"].as_f64().unwrap_or(0.0))
        .sum();
    Ok(Outcome::Pass(format!(
        "{TXMF_FLOWS} flows x {TXMF_BYTES} bytes through devmem TX from one binding (windows \
         {windows:?}), each validated byte by byte by the devmem server as its own keyed \
         stream, {} sends all completed zero-copy; peer TX counter +{wire} bytes \
         for {payload} of payload (+{:.2} %); the sender's workers {user:.2} s user, {sys:.2} s \
         system; {line:?}; {lab} (TCG: shape, not speed)",
        sent["sends"],
        (wire as f64 / payload as f64 - 1.0) * 100.0,
    )))
}

/// `tx ok: … N completions for M sends …` with M equal to the sendmsg calls.
fn completions_cover_sends(line: &str) -> Result<(), String> {
    let num_before = |marker: &str| -> Option<u64> {
        let head = &line[..line.find(marker)?];
        head.rsplit(' ')
            .next()?
            .trim_start_matches('(')
            .parse()
            .ok()
    };
    let num_after = |marker: &str| -> Option<u64> {
        let tail = &line[line.find(marker)? + marker.len()..];
        tail.split(' ').next()?.parse().ok()
    };
    let sends = num_before(" sendmsg calls");
    let covered = num_after("completions for ");
    let copied = num_before(" copied by the kernel");
    if sends.is_none() || sends != covered || copied != Some(0) {
        return Err(format!(
            "completions must cover every send, none copied: {line:?}"
        ));
    }
    Ok(())
}

/// `--memory dma-heap` on the devmem TX client: 32 MiB of the `-v 7` pattern sent from a 1 MiB
/// system-heap dma-buf (every region written again 32 times, each after its completion), to a
/// plain receiver in the peer namespace that validates every byte.
pub(super) fn tx_dma_heap(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 62, true)?;
    let port = "5663";
    let json = "/tmp/dnic-tx-dma-heap.json";
    let rx = spawn(&mut nic.sender(&[
        "-l",
        "--plain",
        "-s",
        PEER4,
        "-p",
        port,
        "-v",
        "7",
        "--expect-bytes",
        "32M",
        "--timeout",
        "60",
    ]))?;
    let out = run(Command::new(&ctx.bin).args([
        "-f",
        &nic.dut,
        "--send-pattern",
        "32M",
        "-s",
        PEER4,
        "-p",
        port,
        "-v",
        "7",
        "--memory",
        "dma-heap",
        "--dmabuf-size",
        "1M",
        "--timeout",
        "60",
        "--json",
        json,
    ]))?;
    let got = wait(rx)?;
    let text = output_text(&out);
    if !out.status.success() || !got.status.success() {
        return Err(format!(
            "sender {} {text:?}; receiver {} {:?}",
            out.status,
            got.status,
            output_text(&got)
        ));
    }
    if !text.contains("(1048576 bytes, dma-heap system)") {
        return Err(format!(
            "the sender did not bind a system-heap dma-buf: {text:?}"
        ));
    }
    let j: Value = std::fs::read_to_string(json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| format!("no JSON summary in {json}"))?;
    let n = |k: &str| j[k].as_u64().unwrap_or(u64::MAX);
    if n("bytes") != 32 << 20 || n("completed_sends") != n("sends") || n("copied_completions") != 0
    {
        return Err(format!("sender summary {j}"));
    }
    Ok(Outcome::Pass(format!(
        "32 MiB from a 1 MiB system-heap dma-buf validated by the peer; {} sends, all \
         completed zero-copy ({} notifications)",
        n("sends"),
        n("completions")
    )))
}
