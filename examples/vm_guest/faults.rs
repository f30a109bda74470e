//! Driver-fault cases: the module's one-shot faults (stale, swapped, duplicated, corrupt,
//! shifted, another flow's payload) must be caught by the receiver; the fault matrix.

use super::*;

/// (a) Payload left in the linear part although header split is on (the driver's
/// `fault_linear_bytes` at 100): `-L` fails naming the stream offset and its reason.
pub(super) fn fault_a(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 17, true)?;
    let knob = format!("{DEBUGFS}/{}/fault_linear_bytes", nic.dut);
    std::fs::write(&knob, "100").map_err(|e| format!("write {knob}: {e}"))?;
    let t = nic.transfer(
        5440,
        &["-s", DUT4, "-v", "7", "-L"],
        &["--send-pattern", "16M", "-s", DUT4, "-v", "7"],
    )?;
    let text = output_text(&t.server);
    let line = text
        .lines()
        .find(|l| l.contains("-L:"))
        .unwrap_or_default()
        .to_string();
    if t.server.status.code() != Some(1)
        || !line.contains("stream offset")
        || !line.contains("header split")
    {
        return Err(format!(
            "server {} (expected exit 1 naming the stream offset and header split): {text:?}",
            t.server.status
        ));
    }
    Ok(Outcome::Pass(format!("exit 1: {line:?}")))
}

/// (b)–(f): one frame spoiled by the driver (armed through the module's `fault` file, after
/// 100 split frames of a 16 MiB `-v 7` stream). The module reports how many delivered bytes
/// differ from the stream; when some do, the tool must exit 1 naming the stream offset and
/// counting exactly those bytes; when none do (the periodic pattern put equal bytes where the
/// fault moved them), `-v 7` cannot see it and the case reports an expected miss. Then the
/// same fault under `--seed`: it must be caught, counted exactly, and (except for the stale
/// buffer, whose old contents may be another run's) diagnosed as `want`.
pub(super) fn fault(
    ctx: &Ctx,
    letter: char,
    kind: &str,
    arg: u32,
    want: Option<&str>,
) -> CaseResult {
    let id = 18 + (letter as u32 - 'b' as u32);
    let nic = Dnic::new(ctx, id, true)?;
    let port = 5700 + 10 * (letter as u16 - 'b' as u16);
    let seed = 0x5eed_0000 + u64::from(letter);
    let keyed = match fault_run(
        &nic,
        port + 1,
        kind,
        100,
        arg,
        &["--seed", &seed.to_string()],
    )? {
        FaultSeen::Caught {
            report,
            diagnosis,
            diagnoses,
            ..
        } => {
            if let Some(w) = want {
                if !diagnosis.contains(&format!("({w}")) && !diagnosis.contains(&format!(": {w}")) {
                    return Err(format!(
                        "--seed {seed}: {report}; the first diagnosis that can tell whose bytes                          it holds does not say {w}: {diagnosis:?} (all {}: {diagnoses:?})",
                        diagnoses.len()
                    ));
                }
            }
            format!("--seed {seed}: {report}; diagnosis: {diagnosis:?}")
        }
        FaultSeen::Invisible { report } => {
            return Err(format!("--seed {seed} missed a fault: {report}"))
        }
    };
    match fault_run(&nic, port, kind, 100, arg, &["-v", "7"])? {
        FaultSeen::Caught { report, line, .. } => Ok(Outcome::Pass(format!(
            "-v 7: {report}; exit 1: {line:?}. {keyed}"
        ))),
        FaultSeen::Invisible { report } => Ok(Outcome::ExpectedMiss(format!(
            "-v 7: {report}: the delivered bytes equal the stream's at every position (the -v 7 \
             period hides this fault), and the run passed. {keyed}"
        ))),
    }
}

/// The module's `xflow` fault on its own (the multi-flow receive that must name the flow under
/// it is `devmem-nic/multi-flow-fault`): flows 0 and 1 of one seed on two plain TCP connections
/// from the peer (`tx::testing::send_flows`, connected in that order), read here by plain
/// sockets with header split on (so their payload lands in the page pools' buffers, where the
/// module's faults act), the fault armed after 50 split frames. The frame the module reports
/// must have arrived on the connection it names, spoiled by exactly the bytes it counts, all of
/// them the other flow's: that flow's validator (told of both flows) says so and names the
/// other flow; the other connection arrives intact.
pub(super) fn fault_xflow(ctx: &Ctx) -> CaseResult {
    use ncdevmem::validate::{Fault, KeyedFlow, Pattern, StreamSpec, Validator};
    use std::io::Read;

    const TOTAL: u64 = 8 << 20;
    let nic = Dnic::new(ctx, 23, true)?;
    let _hds = EthtoolUndo::new(
        ctx,
        &nic.dut,
        &[&["-G", "tcp-data-split", "on"]],
        &[&["-G", "tcp-data-split", "auto"]],
    )?;
    let ctl = format!("{DEBUGFS}/{}/fault", nic.dut);
    std::fs::write(&ctl, "xflow 50").map_err(|e| format!("write \"xflow 50\" to {ctl}: {e}"))?;
    let port = 5760u16;
    let seed = 0x5eed_0f10u64;
    let listen_on = SocketAddrV6::new(
        format!("::ffff:{DUT4}")
            .parse()
            .map_err(|e| format!("{e}"))?,
        port,
        0,
        0,
    );
    let listener = ncdevmem::sys::socket::tcp_listen_backlog(listen_on, None, 2).map_err(err)?;
    let peer_ns = format!("/run/netns/{}", nic.peer_ns);
    let sender = std::thread::spawn(
        move || -> Result<Vec<ncdevmem::tx::testing::SentFlow>, String> {
            let ns = std::fs::File::open(&peer_ns).map_err(|e| format!("open {peer_ns}: {e}"))?;
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns({peer_ns}): {e}"))?;
            let to = std::net::SocketAddr::new(DUT4.parse().map_err(|e| format!("{e}"))?, port);
            ncdevmem::tx::testing::send_flows(
                to,
                StreamSpec::keyed(seed),
                2,
                TOTAL,
                64 << 10,
                None,
                Duration::from_secs(30),
            )
            .map_err(err)
        },
    );
    // Accepted in connect order: flow 0, then flow 1.
    let mut conns = Vec::new();
    for flow in 0..2u32 {
        let (fd, from) = accept_timeout(
            listener.as_fd(),
            Some(Duration::from_secs(60)),
            &AtomicI32::new(0),
        )
        .map_err(|e| format!("accept flow {flow}: {e}"))?;
        conns.push((std::net::TcpStream::from(fd), from.port(), flow));
    }
    let received: Vec<Result<(u16, Validator), String>> = std::thread::scope(|scope| {
        let readers: Vec<_> = conns
            .into_iter()
            .map(|(mut sock, from_port, flow)| {
                scope.spawn(move || {
                    let stream = KeyedFlow::new(seed, flow, 2).map_err(err)?;
                    let mut v = Validator::with_pattern(Pattern::keyed_flow(stream))
                        .with_piece_name("chunk");
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        match sock.read(&mut buf) {
                            Ok(0) => return Ok((from_port, v)),
                            Ok(n) => {
                                v.check(&buf[..n]);
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(format!("read flow {flow}: {e}")),
                        }
                    }
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|_| Err("a reader panicked".into())))
            .collect()
    });
    let sent = sender
        .join()
        .map_err(|_| "the sender thread panicked".to_string())??;
    let received = received.into_iter().collect::<Result<Vec<_>, String>>()?;
    let report = std::fs::read_to_string(&ctl)
        .map_err(|e| format!("read {ctl}: {e}"))?
        .trim()
        .to_string();
    let _ = std::fs::write(&ctl, "none");
    // "fired xflow on queue Q (flow A > B got the payload of flow C > D, a frame of K bytes): a
    // frame of L payload bytes, N of them differ from the stream"
    let ports = |s: &str| -> Option<u16> { s.split(' ').next()?.parse().ok() };
    let (into, from) = report
        .split_once("(flow ")
        .and_then(|(_, r)| r.split_once(" got the payload of flow "))
        .and_then(|(a, b)| Some((ports(a)?, ports(b)?)))
        .ok_or_else(|| format!("the fault did not fire: {report:?}"))?;
    let differ = report
        .split(", ")
        .find_map(|p| p.strip_suffix(" of them differ from the stream"))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| format!("no count of differing bytes in {report:?}"))?;
    let flow_of = |port: u16| received.iter().position(|(p, _)| *p == port);
    let (Some(spoiled), Some(source)) = (flow_of(into), flow_of(from)) else {
        return Err(format!(
            "{report}: the ports are not those of the two flows ({:?})",
            received.iter().map(|(p, _)| p).collect::<Vec<_>>()
        ));
    };
    let clean = 1 - spoiled;
    let (v, w) = (&received[spoiled].1, &received[clean].1);
    let d = v.diagnoses().first().copied();
    let bytes: Vec<u64> = sent.iter().map(|f| f.bytes).collect();
    if spoiled == source
        || differ == 0
        || v.mismatches() != differ
        || w.mismatches() != 0
        || v.offset() != TOTAL
        || w.offset() != TOTAL
        || bytes != [TOTAL, TOTAL]
        || d.map(|d| d.fault)
            != Some(Fault::Misdelivered {
                flow: source as u32,
            })
    {
        return Err(format!(
            "{report}: flow {spoiled} (the spoiled one) got {} bytes, {} mismatched, diagnosis \
             {:?}; flow {clean} got {} bytes, {} mismatched; sent {bytes:?}",
            v.offset(),
            v.mismatches(),
            d.map(|d| d.to_string()),
            w.offset(),
            w.mismatches()
        ));
    }
    Ok(Outcome::Pass(format!(
        "{report}; flow {spoiled}: exactly those {differ} bytes mismatched: {}; flow {clean} \
         intact",
        d.map(|d| d.to_string()).unwrap_or_default()
    )))
}

/// The devmem server with 2 flows of one seed sharing bound queue 3 (`-t 3 -q 1`, one rule
/// on the server's address and port), the module's `xflow` fault armed after 50 split
/// frames: a frame of one flow gets the payload of the other's latest frame. The run must
/// fail (exit 1) naming the spoiled flow and saying it holds bytes of the other flow; the NIC
/// is restored and no binding is left.
pub(super) fn multi_flow_fault(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 62, true)?;
    let before = NicState::take(&nic.dut)?;
    let ctl = format!("{DEBUGFS}/{}/fault", nic.dut);
    std::fs::write(&ctl, "xflow 50").map_err(|e| format!("write \"xflow 50\" to {ctl}: {e}"))?;
    let seed = "62";
    let t = nic.transfer(
        5630,
        &[
            "-s", DUT4, "-t", "3", "-q", "1", "--flows", "2", "--seed", seed,
        ],
        &[
            "--send-pattern",
            "8M",
            "-s",
            DUT4,
            "--flows",
            "2",
            "--seed",
            seed,
        ],
    )?;
    let report = std::fs::read_to_string(&ctl)
        .map_err(|e| format!("read {ctl}: {e}"))?
        .trim()
        .to_string();
    let _ = std::fs::write(&ctl, "none");
    let text = output_text(&t.server);
    let j = t.json.clone().unwrap_or(Value::Null);
    let error = j["error"].as_str().unwrap_or("").to_string();
    // "flow K: ... holds bytes of flow J at stream offset X"
    let named = |s: &str| -> Option<(u32, u32)> {
        let k = s.strip_prefix("flow ")?.split(':').next()?.parse().ok()?;
        let (_, rest) = s.split_once("holds bytes of flow ")?;
        let j = rest.split(' ').next()?.parse().ok()?;
        Some((k, j))
    };
    match (t.server.status.code(), named(&error)) {
        (Some(1), Some((k, other))) if k != other && k < 2 && other < 2 => {}
        _ => {
            return Err(format!(
                "module: {report:?}; expected exit 1 naming the spoiled flow and the other \
                 flow's bytes; server {}: error {error:?}; log {text:?}",
                t.server.status
            ))
        }
    }
    if !report.starts_with("fired xflow") {
        return Err(format!("the fault did not fire: {report:?}"));
    }
    let after = NicState::take(&nic.dut)?;
    before.same_as(&after, "after the failed run")?;
    no_binding(&after)?;
    Ok(Outcome::Pass(format!("module: {report}; exit 1: {error}")))
}

/// What the tool made of one spoiled frame.
enum FaultSeen {
    /// Exit 1 naming the stream offset, counting exactly the bytes the module spoiled.
    /// `diagnoses`: every diagnosis the tool printed, in order (`--seed`; none for `-v`);
    /// `diagnosis`: the first of them that can tell whose bytes it holds, else the first
    /// (empty when none). A spoiled frame is cut into frags where the NIC's buffers end, so
    /// its first spoiled frag can be a single word, for which "too few bytes to tell whose
    /// they are" is the right answer and names no fault.
    Caught {
        report: String,
        line: String,
        diagnosis: String,
        diagnoses: Vec<String>,
    },
    /// The module spoiled no byte a reader could tell (equal bytes by the pattern's period)
    /// and the run passed.
    Invisible { report: String },
}

/// One 16 MiB run of `stream` (`-v 7`, `--seed S`) on `nic` with fault `kind` armed after
/// `after` split frames (`arg`: the offset fault's shift). Any other outcome is an error.
fn fault_run(
    nic: &Dnic,
    port: u16,
    kind: &str,
    after: u32,
    arg: u32,
    stream: &[&str],
) -> Result<FaultSeen, String> {
    let ctl = format!("{DEBUGFS}/{}/fault", nic.dut);
    let spec = format!("{kind} {after} {arg}");
    std::fs::write(&ctl, &spec).map_err(|e| format!("write {spec:?} to {ctl}: {e}"))?;
    let t = nic.transfer(
        port,
        &[&["-s", DUT4][..], stream].concat(),
        &[&["--send-pattern", "16M", "-s", DUT4][..], stream].concat(),
    )?;
    let report = std::fs::read_to_string(&ctl)
        .map_err(|e| format!("read {ctl}: {e}"))?
        .trim()
        .to_string();
    let text = output_text(&t.server);
    let differ = report
        .split(", ")
        .find_map(|p| p.strip_suffix(" of them differ from the stream"))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| {
            format!(
                "the fault did not fire: {report:?}; server {}: {text:?}; sender {}: {:?}",
                t.server.status,
                t.sender.status,
                output_text(&t.sender)
            )
        })?;
    let line = text
        .lines()
        .find(|l| l.contains("validation failed"))
        .unwrap_or_default()
        .to_string();
    let diagnoses: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("validation: "))
        .map(str::to_string)
        .collect();
    let diagnosis = telling_diagnosis(&diagnoses).to_string();
    match (differ, t.server.status.code()) {
        (0, Some(0)) => Ok(FaultSeen::Invisible { report }),
        // The tool must count exactly the bytes the driver spoiled.
        (d, Some(1))
            if d > 0
                && line.contains("stream offset")
                && line.contains(&format!(": {d} mismatched byte")) =>
        {
            Ok(FaultSeen::Caught {
                report,
                line,
                diagnosis,
                diagnoses,
            })
        }
        _ => Err(format!(
            "{report}; server {} (expected exit 1 naming the stream offset and counting the \
             bytes that differ, or exit 0 when none do): {text:?}",
            t.server.status
        )),
    }
}

/// The first of `diagnoses` that can tell whose bytes its frag holds (not "too few bytes to
/// tell"), else the first, else "".
fn telling_diagnosis(diagnoses: &[String]) -> &str {
    diagnoses
        .iter()
        .find(|d| !d.contains("too few bytes to tell"))
        .or(diagnoses.first())
        .map_or("", String::as_str)
}

/// The detection matrix (`vm_guest --fault-matrix N`, `NCDEVMEM_VM_FAULT_MATRIX=N make
/// vm-test`): each fault kind N times at a pseudo-random frame (and, for the offset fault, a
/// shift of 1..=16 bytes), each placement once under `-v 7` and once under `--seed`; how often
/// each caught it and how often the fault was invisible to it, and the `--seed` diagnoses.
/// Prints a Markdown table (docs/fault-detection.md holds one). A `--seed` miss fails the case.
pub fn fault_matrix(ctx: &Ctx, runs: u32) -> CaseResult {
    let nic = Dnic::new(ctx, 30, true)?;
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut next = move || {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut rows = vec![
        "| fault | runs | `-v 7` caught (exit 1, bytes counted exactly) | invisible to `-v 7` \
         | `--seed` caught (bytes counted exactly) | `--seed` diagnoses |"
            .to_string(),
        "|---|---|---|---|---|---|".to_string(),
    ];
    let mut port = 5800u16;
    for (kind, what) in [
        ("stale", "(b) stale buffer: payload not written"),
        ("swap", "(c) two frags' payloads swapped"),
        ("dup", "(d) the previous frame's payload again"),
        ("corrupt", "(e) one byte flipped"),
        ("offset", "(f) first frag's offset off by 1..=16 bytes"),
    ] {
        let (mut caught, mut invisible, mut keyed) = (0, 0, 0);
        let mut kinds = std::collections::BTreeMap::<String, u32>::new();
        for _ in 0..runs {
            // A 16 MiB stream has about 330 split frames (64 KiB TSO frames).
            let after = 10 + (next() % 240) as u32;
            let arg = if kind == "offset" {
                1 + (next() % 16) as u32
            } else {
                0
            };
            port += 2;
            match fault_run(&nic, port, kind, after, arg, &["-v", "7"])? {
                FaultSeen::Caught { .. } => caught += 1,
                FaultSeen::Invisible { .. } => invisible += 1,
            }
            let seed = next().to_string();
            match fault_run(&nic, port + 1, kind, after, arg, &["--seed", &seed])? {
                FaultSeen::Caught { diagnosis, .. } => {
                    keyed += 1;
                    // "(+28: reordered: …", "(corrupt: the bytes around …", "(bytes of
                    // no stream with this seed …", "(misdelivered: …".
                    let name = ["stale", "duplicate", "reordered", "shifted"]
                        .into_iter()
                        .find(|k| diagnosis.contains(&format!(": {k}:")))
                        .unwrap_or(if diagnosis.contains("(corrupt:") {
                            "corrupt"
                        } else if diagnosis.contains("(bytes of no stream with this seed") {
                            "no stream of this seed"
                        } else if diagnosis.contains("(misdelivered:") {
                            "misdelivered"
                        } else {
                            "none"
                        });
                    *kinds.entry(name.to_string()).or_default() += 1;
                }
                FaultSeen::Invisible { report } => {
                    return Err(format!("--seed {seed} missed {kind}: {report}"))
                }
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        rows.push(format!(
            "| {what} | {runs} | {caught} | {invisible} | {keyed} | {} |",
            kinds.join(", ")
        ));
    }
    for r in &rows {
        println!("# {r}");
    }
    Ok(Outcome::Pass(format!(
        "{runs} runs per fault under -v 7 and --seed; table printed above (lines starting with \
         '# |')"
    )))
}

#[cfg(test)]
mod tests {
    use super::telling_diagnosis;

    #[test]
    fn the_diagnosis_checked_is_the_first_that_can_tell_whose_bytes() {
        let word = "frag at stream offset 3026936 (8 bytes): 8 byte(s) differ (corrupt: too few \
                    bytes to tell whose they are)"
            .to_string();
        let told = "frag at stream offset 3026944 (4096 bytes): (+28: reordered: …)".to_string();
        assert_eq!(telling_diagnosis(&[word.clone(), told.clone()]), told);
        assert_eq!(telling_diagnosis(&[told.clone(), word.clone()]), told);
        assert_eq!(telling_diagnosis(std::slice::from_ref(&word)), word);
        assert_eq!(telling_diagnosis(&[]), "");
    }
}
