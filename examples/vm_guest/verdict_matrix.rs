//! `devmem-nic/verdict-matrix`: the fault matrix's rows that need a devmem NIC, on the software
//! devmem NIC under the real kernel — the devmem server with one flow and three, fixed-size and
//! timed (with warm-up), the zcrx server with one flow and three, and devmem TX validated by
//! the devmem server — each crossed with the faults of the host rows (`tests/fault_matrix.rs`:
//! the same cells, `tests/common/fault_cells.rs`, and the same sender written from
//! docs/validation.md alone, `tests/common/fault_sender.rs`, connecting from the peer's
//! namespace). Devmem TX takes the faults its own sender can make (`--corrupt-offset`, another
//! seed or period, a short stream) and the module's `xflow` fault; the others are `n/a` there.
//! Every fault cell must end with exit 1, the JSON verdict `fail` and the flow named; every
//! clean cell with exit 0; the NIC as it was before. The case prints the grid.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::devmem_nic::Dnic;
use super::{spawn, wait_within, CaseResult, Ctx, NicState, Outcome};
use crate::fault_cells::{cell, grid, mark, receiver_args, Cell, Expect, Path, Ran, CASES, SEED};
use crate::fault_sender::Plan;

/// The pair this case makes.
const PAIR: u32 = 70;
/// The device under test's address (as every devmem-nic case's).
const DUT4: &str = "192.0.2.1";
/// Bytes per flow of a fixed-size cell: a fraction of a second under TCG.
const FLOW_BYTES: u64 = 1 << 20;
/// A timed clean cell's `--duration`, and a silent flow's (its warm-up a third of it).
const DURATION: Duration = Duration::from_secs(2);
/// A timed fault cell's `--duration` (its warm-up a third of it): its fault must reach the
/// server within the run (`Cell::fault_in_run`), on a loaded host under TCG too. The run ends
/// at the fault, so only a missed fault runs this long (the host rows' premise,
/// tests/fault_matrix.rs, tests/vm/FLAKES.md).
const FAULT_DURATION: Duration = Duration::from_secs(6);
/// The longest one cell may take before it fails.
const CELL_LIMIT: Duration = Duration::from_secs(90);

fn path(name: &'static str, flows: u32, timed: bool) -> Path {
    Path {
        name,
        flows,
        timed,
        warmup: timed && flows > 1,
        sweep: false,
        flow_bytes: FLOW_BYTES,
    }
}

/// Runs the case (see the module docs).
pub fn verdict_matrix(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, PAIR, true)?;
    let before = NicState::take(&nic.dut)?;
    let one = ["-t", "3", "-q", "1"];
    let two = ["-t", "2", "-q", "2"];
    let rows: [(Path, Vec<&str>); 6] = [
        (path("devmem, 1 flow, fixed-size", 1, false), one.to_vec()),
        (path("devmem, 1 flow, timed", 1, true), one.to_vec()),
        (path("devmem, 3 flows, fixed-size", 3, false), two.to_vec()),
        (path("devmem, 3 flows, timed+warm", 3, true), two.to_vec()),
        (
            path("zcrx, 1 flow, fixed-size", 1, false),
            [&["--zcrx"][..], &one].concat(),
        ),
        (
            path("zcrx, 3 flows, timed", 3, true),
            [&["--zcrx"][..], &two].concat(),
        ),
    ];
    let mut port = 5700u16;
    let mut grid_rows = Vec::new();
    let mut wrong = Vec::new();
    for (path, server) in &rows {
        let mut cells = Vec::new();
        for case in CASES {
            let Some(c) = cell(path, case) else {
                cells.push("n/a".to_string());
                continue;
            };
            port += 1;
            let ran = run_cell(ctx, &nic, path, server, &c, port)?;
            match ran.judge(&c.expect, path) {
                None => cells.push(mark(&c.expect).to_string()),
                Some(why) => {
                    cells.push("WRONG".to_string());
                    wrong.push(format!("{} × {}: {why}", path.name, case.name()));
                }
            }
        }
        grid_rows.push((path.name, cells));
    }
    let (tx_cells, tx_wrong) = devmem_tx_row(ctx, &nic, &mut port)?;
    grid_rows.push(("devmem TX → devmem, 2 flows", tx_cells));
    wrong.extend(tx_wrong);
    let table = grid(&grid_rows);
    for line in table.lines() {
        println!("verdict-matrix: {line}");
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    before.same_as(&NicState::take(&nic.dut)?, "after the matrix")?;
    Ok(Outcome::Pass(format!(
        "{} rows: every fault failed its run with the flow named, every clean run passed, the \
         NIC restored (grid above)",
        grid_rows.len()
    )))
}

/// One cell: the server on the device under test, the test sender from the peer's namespace.
fn run_cell(
    ctx: &Ctx,
    nic: &Dnic,
    path: &Path,
    server: &[&str],
    cell: &Cell,
    port: u16,
) -> Result<Ran, String> {
    let json = format!("/tmp/verdict-matrix-{port}.json");
    let _ = std::fs::remove_file(&json);
    let port_s = port.to_string();
    let mut cmd = Command::new(&ctx.bin);
    cmd.args(["-l", "-f", &nic.dut, "-s", DUT4, "-p", &port_s])
        .args(["--timeout", "10", "--json", &json])
        .args(server)
        .args(receiver_args(
            path,
            cell,
            match cell.fault_in_run {
                true => FAULT_DURATION,
                false => DURATION,
            },
        ));
    let rx = spawn(&mut cmd)?;
    let plan = Plan {
        conns: cell.conns.clone(),
        limit: Duration::from_secs(60),
        connect_within: Duration::from_secs(60),
    };
    let addr = std::net::SocketAddr::from(([192, 0, 2, 1], port));
    let peer_ns = format!("/run/netns/{}", nic.peer_ns());
    let sender = std::thread::spawn(move || -> Result<(), String> {
        let ns = File::open(&peer_ns).map_err(|e| format!("open {peer_ns}: {e}"))?;
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns({peer_ns}): {e}"))?;
        plan.run(addr).map(drop)
    });
    let out = wait_within(rx, CELL_LIMIT)?;
    let sent = sender
        .join()
        .map_err(|_| "the test sender panicked".to_string())?;
    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if let Err(e) = sent {
        stderr.push_str(&format!(" | the test sender: {e}"));
    }
    let json = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    Ok(Ran {
        code: out.status.code(),
        json,
        stderr,
    })
}

/// The devmem TX row: the tool's devmem TX sender on the peer (`-f dnic70b`, two flows from
/// one dma-buf) against the devmem server on the device under test (`-t 3 -q 1 --flows 2`:
/// both flows on one queue, so that the module's `xflow` fault, which gives a frame another
/// flow's payload, has the other flow's frames beside it), with the faults the sender itself
/// can make and that `xflow` fault, which must fire: it is armed after 4 split frames, since
/// devmem TX sends a flow's 1 MiB in few large frames (after 50, as the receiver rows arm it,
/// the run ended before it was due and the cell passed unspoiled data). Returns its grid cells
/// (in [`CASES`] order) and what ended wrong.
fn devmem_tx_row(
    ctx: &Ctx,
    nic: &Dnic,
    port: &mut u16,
) -> Result<(Vec<String>, Vec<String>), String> {
    let row = Path {
        name: "devmem TX → devmem, 2 flows",
        flows: 2,
        timed: false,
        warmup: false,
        sweep: false,
        flow_bytes: FLOW_BYTES,
    };
    let seed = SEED.to_string();
    let bytes = FLOW_BYTES.to_string();
    let short = (FLOW_BYTES - 1000).to_string();
    let flip = row.fault_at().to_string();
    let other_seed = (SEED + 1).to_string();
    let mut cells = Vec::new();
    let mut wrong = Vec::new();
    for case in CASES {
        use crate::fault_cells::Case;
        // (receiver stream, sender args, --expect-bytes, module fault, expected end)
        let (rx_stream, tx, expect_bytes, fault, expect): (
            [&str; 2],
            Vec<&str>,
            Option<&str>,
            Option<&str>,
            Expect,
        ) = match case {
            Case::Clean => (
                ["--seed", &seed],
                vec!["--seed", &seed],
                None,
                None,
                Expect::Pass,
            ),
            Case::CleanPeriod => (["-v", "7"], vec!["-v", "7"], None, None, Expect::Pass),
            Case::FlippedByte => (
                ["--seed", &seed],
                vec!["--seed", &seed, "--corrupt-offset", &flip],
                None,
                None,
                Expect::Fail(Vec::new()),
            ),
            Case::WrongSeed => (
                ["--seed", &seed],
                vec!["--seed", &other_seed],
                None,
                None,
                Expect::Fail(Vec::new()),
            ),
            Case::WrongPeriod => (
                ["-v", "7"],
                vec!["-v", "5"],
                None,
                None,
                Expect::Fail(Vec::new()),
            ),
            Case::OtherFlow => (
                ["--seed", &seed],
                vec!["--seed", &seed],
                None,
                Some("xflow 4"),
                Expect::Fail(Vec::new()),
            ),
            Case::Truncated => (
                ["--seed", &seed],
                vec!["--seed", &seed],
                Some(&bytes),
                None,
                Expect::Fail(Vec::new()),
            ),
            _ => {
                cells.push("n/a".to_string());
                continue;
            }
        };
        *port += 1;
        let port_s = port.to_string();
        let json = format!("/tmp/verdict-matrix-{port_s}.json");
        let _ = std::fs::remove_file(&json);
        let ctl = format!("/sys/kernel/debug/devmem_nic/{}/fault", nic.dut);
        if let Some(f) = fault {
            std::fs::write(&ctl, f).map_err(|e| format!("write {f:?} to {ctl}: {e}"))?;
        }
        let mut server = Command::new(&ctx.bin);
        server
            .args(["-l", "-f", &nic.dut, "-s", DUT4, "-p", &port_s])
            .args(["-t", "3", "-q", "1", "--flows", "2"])
            .args(rx_stream)
            .args(["--timeout", "10", "--json", &json]);
        if let Some(b) = expect_bytes {
            server.args(["--expect-bytes", b]);
        }
        let rx = spawn(&mut server)?;
        let sent = match case {
            Case::Truncated => short.as_str(),
            _ => bytes.as_str(),
        };
        let peer_if = format!("dnic{PAIR}b");
        let started = Instant::now();
        let mut sender = super::ns_exec(ctx, nic.peer_ns());
        sender
            .arg(&ctx.bin)
            .args(["-f", &peer_if, "-s", DUT4, "-p", &port_s])
            .args([
                "--send-pattern",
                sent,
                "--flows",
                "2",
                "--dmabuf-size",
                "1M",
            ])
            .args(["--timeout", "60"])
            .args(&tx);
        let tx_out = wait_within(spawn(&mut sender)?, CELL_LIMIT)?;
        let out = wait_within(rx, CELL_LIMIT.saturating_sub(started.elapsed()))?;
        let fired = match fault {
            Some(_) => {
                let report = std::fs::read_to_string(&ctl).unwrap_or_default();
                let _ = std::fs::write(&ctl, "none");
                Some(report.trim().to_string())
            }
            None => None,
        };
        let ran = Ran {
            code: out.status.code(),
            json: std::fs::read_to_string(&json)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok()),
            stderr: format!(
                "{} | sender {}: {}",
                String::from_utf8_lossy(&out.stderr),
                tx_out.status,
                String::from_utf8_lossy(&tx_out.stderr)
            ),
        };
        // The module's report of a fault that fired (which frame, how many bytes of whose),
        // kept in the log beside the grid.
        if let Some(r) = fired.as_deref().filter(|r| r.starts_with("fired")) {
            println!("verdict-matrix: {} × {}: {r}", row.name, case.name());
        }
        // Which flow a fault of every flow (or the module's xflow fault) fails first is a
        // race: those cells want some flow named (`Fail` of no flow in particular).
        let judged = match &fired {
            Some(r) if !r.starts_with("fired") => {
                Some(format!("the module's fault did not fire: {r:?}"))
            }
            _ => ran.judge(&expect, &row),
        };
        match judged {
            None => cells.push(mark(&expect).to_string()),
            Some(why) => {
                cells.push("WRONG".to_string());
                wrong.push(format!("{} × {}: {why}", row.name, case.name()));
            }
        }
    }
    Ok((cells, wrong))
}
