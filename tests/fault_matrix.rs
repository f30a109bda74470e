//! The fault matrix, host rows: every receive path this machine can run (plain TCP, one flow
//! and several, fixed-size and timed, with warm-up, with `--rcvlowat`, and a sweep run driven
//! through the lab's control protocol) crossed with every fault a stream can carry. A cell
//! whose fault applies must end with exit 1, the JSON verdict `fail` and, for several flows,
//! the failing flow named; each row's clean cells must pass. No path may pass bad data.
//!
//! The faults are made by a test sender written from docs/validation.md's definitions alone
//! (`common/fault_sender.rs`), connecting from the test process into the receiver's own
//! network namespace over loopback (created here and always removed). The sweep row's peer is
//! a stand-in written from docs/lab.md's protocol, which sends what the fault asks instead of
//! what the sweep asked. Needs root; prints `skip: <test>: <reason>` otherwise.
//!
//! The devmem, zcrx and devmem TX rows run in the VM suite on the software devmem NIC
//! (`devmem-nic/verdict-matrix`), with the same sender and the same cells.
//!
//! Options with no row of their own, because they cannot pass bad data: `--pid-file` (it
//! writes the process id once the receiver listens and removes it at the end; no byte of the
//! stream or of a verdict goes through it), and the steering figures (`device_rx`,
//! `steering`) of a one-flow run without a measurement's options, which only its JSON carries
//! and no verdict reads (`--require-spread`, which does, makes a run measured).

#![allow(dead_code)] // the shared cells serve the VM rows too

mod common;
#[path = "common/fault_cells.rs"]
mod fault_cells;
#[path = "common/fault_sender.rs"]
mod fault_sender;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::bin::{ns_cmd, spawn, text, tmp_json};
use common::NetNs;
use fault_cells::{cell, grid, mark, receiver_args, Case, Cell, Path, Ran, CASES};
use fault_sender::{Plan, Source};

/// Waits for `child` at most `limit`, then kills it; its output and whether it ended on its own.
fn wait_bounded(mut child: Child, limit: Duration) -> (Output, bool) {
    let deadline = Instant::now() + limit;
    let own = loop {
        if child.try_wait().expect("try_wait").is_some() {
            break true;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (child.wait_with_output().expect("wait"), own)
}

/// Runs one cell: the receiver in `ns`, the test sender (or, for a sweep, the stand-in peer)
/// from this process into `ns`.
fn run_cell(ns: &NetNs, path: &Path, cell: &Cell, port: u16, extra: &[&str]) -> Ran {
    let duration = match cell.fault_in_run {
        true => FAULT_CELL_DURATION,
        false => CELL_DURATION,
    };
    run_cell_with(ns, path, cell, port, extra, None, duration)
}

/// A timed clean cell's `--duration` (its `--warmup` a third of it).
const CELL_DURATION: Duration = Duration::from_millis(1500);

/// A timed fault cell's `--duration` (its `--warmup` a third of it): the fault must reach the
/// receiver within it (a quarter of a fixed-size flow's bytes in; within the warm-up for the
/// cells that close within it). The run ends at the fault, so only a cell whose fault is
/// missed runs this long. At load 15-16 on 2 cores, 1.5 s let a sender
/// move only 640 KiB of the 1 MiB before its flip: the fault was never sent, and the cell read
/// as "PASSED BAD DATA" (tests/vm/FLAKES.md).
const FAULT_CELL_DURATION: Duration = Duration::from_secs(9);

/// A change to the stand-in peer's `done` figures.
type Spoil = fn(&mut serde_json::Value);

/// [`run_cell`], with the stand-in peer's `done` figures changed by `spoil` before it sends
/// them (a peer that reports what it cannot have measured).
fn run_cell_with(
    ns: &NetNs,
    path: &Path,
    cell: &Cell,
    port: u16,
    extra: &[&str],
    spoil: Option<Spoil>,
    duration: Duration,
) -> Ran {
    let json = tmp_json(&format!("matrix-{port}"));
    let port_s = port.to_string();
    let ctrl_port = port + 1000;
    let ctrl_s = ctrl_port.to_string();
    let mut args: Vec<String> = [
        "-l",
        "--plain",
        "-s",
        "127.0.0.1",
        "-p",
        &port_s,
        // The idle timeout: 3 s ended a clean flow of a fixed-size row at load 13, whose sender
        // had paused for as long (tests/vm/FLAKES.md).
        "--timeout",
        "6",
        "--json",
        json.to_str().expect("utf-8 temp path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(receiver_args(path, cell, duration));
    if path.sweep {
        args.extend(
            ["--peer", "127.0.0.1", "--peer-port", &ctrl_s, "--runs", "1"].map(String::from),
        );
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plan = Plan {
        conns: cell.conns.clone(),
        limit: Duration::from_secs(20),
        connect_within: Duration::from_secs(10),
    };
    let entered = ns.enter().expect("enter the receiver's namespace");
    // The stand-in peer listens before the sweep starts.
    let peer = path.sweep.then(|| {
        let l = TcpListener::bind(("127.0.0.1", ctrl_port)).expect("bind the stand-in peer");
        let plan = plan.clone();
        std::thread::spawn(move || stand_in_peer(l, plan, spoil))
    });
    let rx = spawn(ns_cmd(ns, &args));
    let mut sender = None;
    if !path.sweep {
        common::wait_listening(rx.id(), port);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        match plan.run(addr) {
            Ok(sent) => sender = Some(sent),
            Err(e) => eprintln!("the test sender: {e}"),
        }
    }
    drop(entered);
    let (out, own) = wait_bounded(rx, Duration::from_secs(60));
    if let Some(p) = peer {
        let _ = p.join();
    }
    let mut stderr = text(&out.stderr);
    if !own {
        stderr.push_str(" | (killed after 60 s)");
    }
    if let Some(sent) = sender {
        // What the test sender saw, for a failure's message (the last lines of stderr).
        let each: Vec<String> = sent
            .iter()
            .enumerate()
            .map(|(c, s)| {
                format!(
                    "connection {c}: {} B in {:.3} s, longest gap between writes {:.3} s{}",
                    s.bytes,
                    s.took.as_secs_f64(),
                    s.longest_gap.as_secs_f64(),
                    s.ended_by_peer
                        .as_ref()
                        .map(|e| format!(", ended by the receiver: {e}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        stderr.push_str(&format!("\nthe test sender: {}", each.join("; ")));
    }
    let json = std::fs::read_to_string(&json)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    Ran {
        code: out.status.code(),
        json,
        stderr,
    }
}

/// A peer server as docs/lab.md defines it, for one sweep of one run: it answers `hello`
/// (and `about`, with a host it knows nothing of), takes the `send`, and sends `plan` (not what the
/// sweep asked for) to the sweep's address at the port the `send` names, then reports `done` (its
/// figures changed by `spoil`, if any).
fn stand_in_peer(listener: TcpListener, plan: Plan, spoil: Option<Spoil>) {
    let _ = listener.set_nonblocking(false);
    let (ctrl, from) = match listener.accept() {
        Ok(c) => c,
        Err(_) => return,
    };
    let _ = ctrl.set_read_timeout(Some(Duration::from_secs(30)));
    let mut w = ctrl.try_clone().expect("clone the control connection");
    let mut r = BufReader::new(ctrl);
    let mut line = String::new();
    let mut read = |line: &mut String| -> Option<serde_json::Value> {
        line.clear();
        r.read_line(line).ok()?;
        serde_json::from_str(line).ok()
    };
    let Some(_hello) = read(&mut line) else {
        return;
    };
    let _ = w.write_all(
        b"{\"v\":1,\"type\":\"welcome\",\"tool\":\"ncdevmem-rs\",\"version\":\"0.1.0\",\
          \"max_duration_s\":60.0,\"max_bytes\":274877906944}\n",
    );
    let Some(mut send) = read(&mut line) else {
        return;
    };
    // A sweep asks the peer to describe its host (`about`) before its first run.
    if send["type"] == "about" {
        let _ = w.write_all(
            b"{\"v\":1,\"type\":\"host\",\"host\":{\"version\":\"0.1.0\",\"host_name\":null,\
              \"kernel_release\":null,\"kernel_cmdline\":null,\"cpu_model\":null,\
              \"online_cpus\":null,\"governor\":null,\"nic\":null,\"queue_irqs\":[],\
              \"sysctls\":{}}}\n",
        );
        send = match read(&mut line) {
            Some(s) => s,
            None => return,
        };
    }
    if send["type"] != "send" {
        return;
    }
    let run = send["run"].as_u64().unwrap_or(1);
    let port = send["port"].as_u64().unwrap_or(0) as u16;
    let duration = send["duration_s"].as_f64().unwrap_or(1.0);
    let _ = w.write_all(
        format!(
            "{{\"v\":1,\"type\":\"started\",\"run\":{run},\"duration_s\":{duration:?},\
             \"bytes_per_flow\":68719476736}}\n"
        )
        .as_bytes(),
    );
    let start = Instant::now();
    let sent = plan
        .run(SocketAddr::new(from.ip(), port))
        .unwrap_or_default();
    let secs = start.elapsed().as_secs_f64();
    let flow_bytes: Vec<u64> = sent.iter().map(|s| s.bytes).collect();
    let bytes: u64 = flow_bytes.iter().sum();
    // docs/lab.md: "v" and "type" are the first members (serde_json's map would sort them).
    let mut figures = serde_json::json!({
        "bytes": bytes, "elapsed_s": secs,
        "gbit_per_s": bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        "flow_bytes": flow_bytes, "cpu": null, "error": null,
    });
    if let Some(spoil) = spoil {
        spoil(&mut figures);
    }
    let done = format!("{{\"v\":1,\"type\":\"done\",\"run\":{run},\"figures\":{figures}}}");
    let _ = w.write_all(format!("{done}\n").as_bytes());
    let _ = read(&mut line); // bye
}

/// Runs every cell of `path`, prints its row, and fails naming every cell that ended wrong.
fn row(test: &str, path: Path, base_port: u16) {
    row_with(test, path, base_port, &[]);
}

/// [`row`] with `extra` options given to the receiver of every cell.
fn row_with(test: &str, path: Path, base_port: u16, extra: &[&str]) {
    row_runs(test, path, base_port, extra);
}

/// [`row_with`], returning how each cell that applies ended (its column and its run), for a
/// row that checks more of them; `None` when the test is skipped.
fn row_runs(test: &str, path: Path, base_port: u16, extra: &[&str]) -> Option<Vec<(Case, Ran)>> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    let ns = NetNs::new().expect("create the namespace");
    let mut cells = Vec::new();
    let mut wrong = Vec::new();
    let mut runs = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let Some(c) = cell(&path, *case) else {
            cells.push("n/a".to_string());
            continue;
        };
        let ran = run_cell(&ns, &path, &c, base_port + i as u16, extra);
        match ran.judge(&c.expect, &path) {
            None => cells.push(mark(&c.expect).to_string()),
            Some(why) => {
                cells.push("WRONG".to_string());
                wrong.push(format!("{} × {}: {why}", path.name, case.name()));
            }
        }
        runs.push((*case, ran));
    }
    eprintln!(
        "fault matrix (FAIL: the fault failed the run, as it must)\n{}",
        grid(&[(path.name, cells)])
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    Some(runs)
}

#[test]
fn plain_one_flow_fixed_size() {
    let path = Path {
        name: "plain, 1 flow, fixed-size",
        flows: 1,
        timed: false,
        warmup: false,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    row("plain_one_flow_fixed_size", path, 7100);
}

/// The fixed-size row with `--rcvlowat 512 KiB`: the receiver is woken once that many bytes
/// are queued (`SO_RCVLOWAT`), so a fault's bytes, a short last piece, a reset or a silent
/// flow must still reach the verdict (the receive loop reads what is queued every poll tick).
#[test]
fn plain_one_flow_fixed_size_with_rcvlowat() {
    let path = Path {
        name: "plain, 1 flow, --rcvlowat 512K",
        flows: 1,
        timed: false,
        warmup: false,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    let test = "plain_one_flow_fixed_size_with_rcvlowat";
    let Some(runs) = row_runs(test, path, 7900, &["--rcvlowat", "524288"]) else {
        return;
    };
    // Every cell's connection got the mark: one line saying what the kernel kept (all of it
    // while half of tcp_rmem's max is at least 512 KiB; less is said as less).
    for (case, ran) in runs {
        let logged = ran.stderr.lines().any(|l| {
            l.contains("receive low-water mark: SO_RCVLOWAT ") && l.contains("(--rcvlowat 524288")
        });
        assert!(
            logged,
            "{}: no low-water mark line: {}",
            case.name(),
            ran.stderr
        );
        // And the summary says what it kept, whatever the verdict.
        if let Some(j) = &ran.json {
            assert!(
                j["rcvlowat_bytes"]
                    .as_u64()
                    .is_some_and(|b| (1..=524288).contains(&b)),
                "{}: rcvlowat_bytes {}",
                case.name(),
                j["rcvlowat_bytes"]
            );
        }
    }
}

#[test]
fn plain_one_flow_timed() {
    let path = Path {
        name: "plain, 1 flow, timed",
        flows: 1,
        timed: true,
        warmup: false,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    row("plain_one_flow_timed", path, 7200);
}

#[test]
fn plain_three_flows_fixed_size() {
    let path = Path {
        name: "plain, 3 flows, fixed-size",
        flows: 3,
        timed: false,
        warmup: false,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    row("plain_three_flows_fixed_size", path, 7300);
}

#[test]
fn plain_three_flows_timed_with_warmup() {
    let path = Path {
        name: "plain, 3 flows, timed+warmup",
        flows: 3,
        timed: true,
        warmup: true,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    row("plain_three_flows_timed_with_warmup", path, 7400);
}

#[test]
fn a_sweep_run_through_the_peer_protocol() {
    let path = Path {
        name: "sweep run, 2 flows (peer)",
        flows: 2,
        timed: true,
        warmup: false,
        sweep: true,
        flow_bytes: 4 << 20,
    };
    row("a_sweep_run_through_the_peer_protocol", path, 7500);
}

/// The sweep row with per-run hooks that pass (`--pre-run true --post-run true`): the hooks
/// run around the run and every fault still fails it.
#[test]
fn a_sweep_run_with_passing_hooks() {
    let path = Path {
        name: "sweep run with --pre-run/--post-run",
        flows: 2,
        timed: true,
        warmup: false,
        sweep: true,
        flow_bytes: 4 << 20,
    };
    row_with(
        "a_sweep_run_with_passing_hooks",
        path,
        7600,
        &["--pre-run", "true", "--post-run", "true"],
    );
}

/// The sweep row through a named point (`--sweep tcp-cc=reno`: every flow's congestion
/// control set from the point's name): every fault still fails the run.
#[test]
fn a_tcp_cc_sweep_point_still_fails_every_fault() {
    let path = Path {
        name: "sweep run, tcp-cc=reno point",
        flows: 2,
        timed: true,
        warmup: false,
        sweep: true,
        flow_bytes: 4 << 20,
    };
    row_with(
        "a_tcp_cc_sweep_point_still_fails_every_fault",
        path,
        7800,
        &["--sweep", "tcp-cc=reno"],
    );
}

/// The namespace, the sweep row's path (2 timed flows, named `name`) and its clean cell, for
/// a test of one sweep-run fault outside the grid; `None` (printed as `test`'s skip) where
/// the suite cannot run network tests.
fn clean_sweep_cell(test: &str, name: &'static str) -> Option<(NetNs, Path, Cell)> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    let path = Path {
        name,
        flows: 2,
        timed: true,
        warmup: false,
        sweep: true,
        flow_bytes: 4 << 20,
    };
    let ns = NetNs::new().expect("create the namespace");
    let clean = cell(&path, fault_cells::Case::Clean).expect("the clean cell");
    Some((ns, path, clean))
}

/// A hook that fails fails its run, named, on clean data: `--post-run false` after the run
/// (its figure in the run's `hooks`), `--pre-run false` before it (the run is not made).
#[test]
fn a_failing_hook_fails_its_sweep_run_named() {
    let Some((ns, path, clean)) = clean_sweep_cell(
        "a_failing_hook_fails_its_sweep_run_named",
        "sweep run, failing hook",
    ) else {
        return;
    };
    for (port, extra, named, made) in [
        (7690, ["--post-run", "false"], "--post-run: exit 1", true),
        (7692, ["--pre-run", "false"], "--pre-run: exit 1", false),
    ] {
        let ran = run_cell(&ns, &path, &clean, port, &extra);
        let j = ran.json.clone().unwrap_or_default();
        assert_eq!(ran.code, Some(1), "{extra:?}: {}", ran.stderr);
        assert_eq!(j["verdict"], "fail", "{extra:?}: {j}");
        let run = &j["runs"][0];
        assert_eq!(run["outcome"], "fail", "{extra:?}: {run}");
        assert!(
            run["error"].as_str().unwrap_or_default().contains(named),
            "{extra:?}: {run}"
        );
        assert_eq!(run["hooks"][0]["exit_code"], 1, "{extra:?}: {run}");
        assert_eq!(run["figures"].is_null(), !made, "{extra:?}: {run}");
    }
}

/// A peer whose `done` figures cannot be true (a rate that is not its bytes over its time,
/// flows that do not add up, a CPU share of 400 %) fails its sweep run on clean data, named:
/// the table, the means and a comparison would otherwise carry them.
#[test]
fn a_peers_impossible_figures_fail_its_sweep_run() {
    let Some((ns, path, clean)) = clean_sweep_cell(
        "a_peers_impossible_figures_fail_its_sweep_run",
        "sweep run, lying peer",
    ) else {
        return;
    };
    let spoils: [(u16, Spoil, &str); 3] = [
        (7694, |f| f["gbit_per_s"] = 1e300.into(), "gbit_per_s"),
        (7696, |f| f["flow_bytes"][0] = 1.into(), "flow_bytes"),
        (
            7698,
            |f| {
                f["cpu"] =
                    serde_json::json!({"usr": 400.0, "sys": 0.0, "softirq": 0.0, "idle": 0.0})
            },
            "CPU shares",
        ),
    ];
    for (port, spoil, named) in spoils {
        let ran = run_cell_with(&ns, &path, &clean, port, &[], Some(spoil), CELL_DURATION);
        let j = ran.json.clone().unwrap_or_default();
        assert_eq!(ran.code, Some(1), "{named}: {}", ran.stderr);
        assert_eq!(j["verdict"], "fail", "{named}: {j}");
        let err = j["runs"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            err.contains("cannot be true") && err.contains(named),
            "{named}: {}",
            j["runs"][0]
        );
    }
}

/// Flows that carry data in the warm-up and then go quiet, staying open until the duration
/// ends, measured nothing: the run fails, saying so (it passed with 0 bytes measured: a
/// breaker's finding). The warm-up is 1 s, long past the flows' 8 KiB.
#[test]
fn flows_that_go_quiet_within_the_warmup_fail_the_run() {
    let test = "flows_that_go_quiet_within_the_warmup_fail_the_run";
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return;
    }
    let path = Path {
        name: "plain, 3 flows, quiet after the warm-up",
        flows: 3,
        timed: true,
        warmup: true,
        sweep: false,
        flow_bytes: 4 << 20,
    };
    let ns = NetNs::new().expect("create the namespace");
    let mut quiet = cell(&path, fault_cells::Case::Clean).expect("the clean cell");
    for c in &mut quiet.conns {
        *c = c.clone().with(fault_sender::Fault::QuietAfter(8 << 10));
    }
    // The idle timeout past the duration: quiet flows are the point here.
    let ran = run_cell_with(
        &ns,
        &path,
        &quiet,
        7702,
        &["--timeout", "20"],
        None,
        FAULT_CELL_DURATION,
    );
    let j = ran.json.clone().unwrap_or_default();
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert_eq!(j["verdict"], "fail", "{j}");
    assert!(
        j["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("nothing was measured: no flow carried a byte after the --warmup of 3 s"),
        "{j}"
    );
}

/// The test sender's keyed stream is docs/validation.md's: its Python reference printed
/// `keyed_stream(7, 0, 16)` and `keyed_stream(7, 2, 8)` as these bytes.
#[test]
fn the_test_sender_sends_the_documented_streams() {
    let hex = |s: Source, n: usize| {
        let mut b = vec![0u8; n];
        s.fill(0, &mut b);
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    assert_eq!(
        hex(Source::Keyed { seed: 7, flow: 0 }, 16),
        "45ceab7e97c2b4b844973ab294c8075f"
    );
    assert_eq!(
        hex(Source::Keyed { seed: 7, flow: 2 }, 8),
        "26c88c60a95c1a59"
    );
    assert_eq!(hex(Source::Period(4), 5), "0102030a01");
}

/// `--hds-thresh` (issue 35) on the host: its runs cannot be crossed with the faults here
/// (veth has no header split (HDS), so no run receives), so its cells are the ends the tool
/// must reach. A `--plain -f IF --hds-thresh` run on a NIC without header split is a skip
/// (exit 4, JSON verdict `skip`, naming the driver's answer) before it listens, with the NIC
/// untouched; an `hds-thresh` sweep point there is a skipped run and the sweep exits 4; a
/// devmem server with a non-zero `--hds-thresh`, or an `hds-thresh` sweep of it with a point
/// other than 0, is refused before anything runs (exit 2) naming the kernel's rule.
#[test]
fn hds_thresh_on_a_nic_without_header_split_skips_or_is_refused() {
    let test = "hds_thresh_on_a_nic_without_header_split_skips_or_is_refused";
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return;
    }
    let ns = NetNs::with_veth("hdsa", "hdsb").expect("create the namespace and veth");
    let json = tmp_json("hds-thresh-plain");
    let json_s = json.to_str().expect("utf-8 temp path");
    let out = ns_cmd(
        &ns,
        &[
            "-l",
            "--plain",
            "-s",
            "127.0.0.1",
            "-p",
            "7950",
            "-v",
            "7",
            "--timeout",
            "3",
            "-f",
            "hdsa",
            "--hds-thresh",
            "256",
            "--json",
            json_s,
        ],
    )
    .output()
    .expect("run the receiver");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("skip: hdsa: driver does not support header split with hds-thresh 256"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening on"), "it listened: {stderr}");
    let j = common::bin::read_json(&json);
    assert_eq!(j["verdict"], "skip", "{j}");

    // The sweep passes the point to its run: a skipped run, the sweep exit 4.
    let path = Path {
        name: "sweep run, hds-thresh=256 point on veth",
        flows: 2,
        timed: true,
        warmup: false,
        sweep: true,
        flow_bytes: 4 << 20,
    };
    let clean = cell(&path, fault_cells::Case::Clean).expect("the clean cell");
    let ran = run_cell(
        &ns,
        &path,
        &clean,
        7952,
        &["-f", "hdsa", "--sweep", "hds-thresh=256"],
    );
    let j = ran.json.clone().unwrap_or_default();
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
    assert_eq!(j["verdict"], "skip", "{j}");
    assert_eq!(j["runs"][0]["outcome"], "skip", "{j}");
    assert!(
        j["runs"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("hds-thresh 256"),
        "{j}"
    );

    // Devmem: refused before anything runs, naming the rule.
    for extra in [
        &["--hds-thresh", "256"][..],
        &["--peer", "127.0.0.1", "--sweep", "hds-thresh=0,256"][..],
    ] {
        let mut args = vec![
            "-l",
            "-f",
            "hdsa",
            "-s",
            "127.0.0.1",
            "-p",
            "7954",
            "-v",
            "7",
        ];
        args.extend_from_slice(extra);
        let out = ns_cmd(&ns, &args).output().expect("run the devmem server");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("cannot be installed on a queue while the NIC's hds-thresh is not 0"),
            "{extra:?}: {stderr}"
        );
    }
}
