//! The fault matrix, host rows: every receive path this machine can run (plain TCP, one flow
//! and several, fixed-size and timed, with warm-up, and a sweep run driven through the lab's
//! control protocol) crossed with every fault a stream can carry. A cell whose fault applies
//! must end with exit 1, the JSON verdict `fail` and, for several flows, the failing flow
//! named; each row's clean cells must pass. No path may pass bad data.
//!
//! The faults are made by a test sender written from docs/validation.md's definitions alone
//! (`common/fault_sender.rs`), connecting from the test process into the receiver's own
//! network namespace over loopback (created here and always removed). The sweep row's peer is
//! a stand-in written from docs/lab.md's protocol, which sends what the fault asks instead of
//! what the sweep asked. Needs root; prints `skip: <test>: <reason>` otherwise.
//!
//! The devmem, zcrx and devmem TX rows run in the VM suite on the software devmem NIC
//! (`devmem-nic/verdict-matrix`), with the same sender and the same cells.

mod common;
#[path = "common/fault_sender.rs"]
mod fault_sender;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::bin::{ns_cmd, spawn, text, tmp_json};
use common::NetNs;
use fault_sender::{Conn, Fault, Length, Plan, Source};

const SEED: u64 = 42;
/// Bytes per flow of a fixed-size cell.
const FLOW_BYTES: u64 = 4 << 20;
/// Where the in-stream faults sit: after the first megabyte, inside a timed run's warm-up.
const FAULT_AT: u64 = (1 << 20) + 3;

/// The faults of the matrix's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Every flow's own stream, `--seed`.
    Clean,
    /// Every flow's own stream, `-v 7`.
    CleanPeriod,
    /// One byte of the last flow inverted.
    FlippedByte,
    /// Every flow sent with another seed.
    WrongSeed,
    /// `-v 7` receiver, the sender's period 5.
    WrongPeriod,
    /// 64 KiB of another flow's stream spliced into the last flow (one flow: flow 1's bytes).
    OtherFlow,
    /// Flow 0's stream on no connection (its connection sends 5 bytes of flow 1; one flow:
    /// nothing).
    MissingFlow,
    /// Flow 0's stream on two connections, none for flow 1.
    DuplicateFlow,
    /// The last connection sends 5 bytes (of its flow): too few to name a flow.
    NoFlow,
    /// The last flow stops 1000 bytes short of `--expect-bytes`.
    Truncated,
    /// The last flow sends nothing and stays open.
    Silent,
    /// The last flow is reset after 1 MiB.
    Reset,
}

const CASES: [Case; 12] = [
    Case::Clean,
    Case::CleanPeriod,
    Case::FlippedByte,
    Case::WrongSeed,
    Case::WrongPeriod,
    Case::OtherFlow,
    Case::MissingFlow,
    Case::DuplicateFlow,
    Case::NoFlow,
    Case::Truncated,
    Case::Silent,
    Case::Reset,
];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Clean => "clean",
            Case::CleanPeriod => "clean -v",
            Case::FlippedByte => "flip",
            Case::WrongSeed => "seed",
            Case::WrongPeriod => "-v period",
            Case::OtherFlow => "xflow",
            Case::MissingFlow => "missing",
            Case::DuplicateFlow => "dup",
            Case::NoFlow => "<8 B",
            Case::Truncated => "short",
            Case::Silent => "silent",
            Case::Reset => "reset",
        }
    }
}

/// A row of the matrix: how the receiver runs.
#[derive(Debug, Clone, Copy)]
struct Path {
    name: &'static str,
    flows: u32,
    /// `--duration` (and the senders send until the receiver closes).
    timed: bool,
    /// `--warmup` (timed only).
    warmup: bool,
    /// A sweep run (`--peer`, one run of one point).
    sweep: bool,
}

/// What a cell must end with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Pass,
    /// Exit 1, verdict `fail`, and (several flows) every one of these flows named.
    Fail(Vec<u32>),
}

/// One cell: the receiver's stream option, `--expect-bytes`, and what each connection sends.
struct Cell {
    period: bool,
    expect_bytes: Option<u64>,
    conns: Vec<Conn>,
    expect: Expect,
}

fn keyed(flow: u32) -> Source {
    Source::Keyed { seed: SEED, flow }
}

/// The cell of `case` on `path`, or `None` where the fault does not apply (one flow cannot
/// carry a duplicate or a connection of no flow; a timed run has no byte count to fall short
/// of).
fn cell(path: &Path, case: Case) -> Option<Cell> {
    let n = path.flows;
    let last = n - 1;
    let length = match path.timed {
        true => Length::UntilClosed,
        false => Length::Bytes(FLOW_BYTES),
    };
    let own = |k: u32| Conn::clean(keyed(k), length);
    let all = || (0..n).map(own).collect::<Vec<_>>();
    let with_last = |f: Fault| {
        let mut c = all();
        c[last as usize] = own(last).with(f);
        c
    };
    let fail_last = Expect::Fail(vec![last]);
    let (period, expect_bytes, conns, expect) = match case {
        Case::Clean => (false, None, all(), Expect::Pass),
        Case::CleanPeriod => (
            true,
            None,
            (0..n)
                .map(|_| Conn::clean(Source::Period(7), length))
                .collect(),
            Expect::Pass,
        ),
        Case::FlippedByte => (false, None, with_last(Fault::FlipAt(FAULT_AT)), fail_last),
        Case::WrongSeed => (
            false,
            None,
            (0..n)
                .map(|k| {
                    Conn::clean(
                        Source::Keyed {
                            seed: SEED + 1,
                            flow: k,
                        },
                        length,
                    )
                })
                .collect(),
            Expect::Fail(vec![0]),
        ),
        Case::WrongPeriod => (
            true,
            None,
            (0..n)
                .map(|_| Conn::clean(Source::Period(5), length))
                .collect(),
            Expect::Fail(vec![0]),
        ),
        Case::OtherFlow => {
            let from = if n == 1 { keyed(1) } else { keyed(0) };
            let splice = Fault::Splice {
                at: FAULT_AT,
                len: 64 << 10,
                from,
            };
            (false, None, with_last(splice), fail_last)
        }
        Case::MissingFlow if n == 1 => (
            false,
            None,
            vec![Conn::clean(keyed(0), Length::Bytes(0))],
            Expect::Fail(vec![0]),
        ),
        Case::MissingFlow => {
            // Flow 0's connection is a short piece of flow 1's stream: flow 0 never came.
            let mut c: Vec<Conn> = (1..n).map(own).collect();
            c.push(Conn::clean(keyed(1), Length::Bytes(5)));
            (false, None, c, Expect::Fail(vec![0]))
        }
        Case::DuplicateFlow if n == 1 => return None,
        Case::DuplicateFlow => {
            let mut c = all();
            c[1] = own(0);
            (false, None, c, Expect::Fail(vec![0, 1]))
        }
        Case::NoFlow if n == 1 => return None,
        Case::NoFlow => {
            let mut c = all();
            c[last as usize] = Conn::clean(keyed(last), Length::Bytes(5));
            (false, None, c, fail_last)
        }
        Case::Truncated if path.timed => return None,
        Case::Truncated => {
            let mut c = all();
            c[last as usize] = Conn::clean(keyed(last), Length::Bytes(FLOW_BYTES - 1000));
            (false, Some(FLOW_BYTES), c, fail_last)
        }
        Case::Silent => (false, None, with_last(Fault::Silent), fail_last),
        Case::Reset => (
            false,
            None,
            with_last(Fault::ResetAfter(1 << 20)),
            fail_last,
        ),
    };
    Some(Cell {
        period,
        expect_bytes,
        conns,
        expect,
    })
}

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

/// How one cell ended.
struct Ran {
    code: Option<i32>,
    json: Option<serde_json::Value>,
    stderr: String,
}

impl Ran {
    /// `None` when the cell ended as `expect` says, else what was wrong.
    fn judge(&self, expect: &Expect, path: &Path) -> Option<String> {
        let verdict = self.json.as_ref().map(|j| j["verdict"].clone());
        match expect {
            Expect::Pass => (self.code != Some(0) || verdict != Some("pass".into())).then(|| {
                format!(
                    "should pass: exit {:?}, verdict {verdict:?}: {}",
                    self.code,
                    last_lines(&self.stderr)
                )
            }),
            Expect::Fail(flows) => {
                if self.code == Some(0) {
                    return Some(format!(
                        "PASSED BAD DATA (exit 0, verdict {verdict:?}): {}",
                        last_lines(&self.stderr)
                    ));
                }
                if self.code != Some(1) || verdict != Some("fail".into()) {
                    return Some(format!(
                        "should fail with exit 1: exit {:?}, verdict {verdict:?}: {}",
                        self.code,
                        last_lines(&self.stderr)
                    ));
                }
                let error = self.error_text(path);
                let unnamed: Vec<u32> = flows
                    .iter()
                    .copied()
                    .filter(|k| path.flows > 1 && !error.contains(&format!("flow {k}")))
                    .collect();
                (!unnamed.is_empty())
                    .then(|| format!("failed without naming flow(s) {unnamed:?}: error {error:?}"))
            }
        }
    }

    /// The run's error as the JSON gives it (a sweep: its one run's).
    fn error_text(&self, path: &Path) -> String {
        let Some(j) = &self.json else {
            return String::new();
        };
        let e = match path.sweep {
            true => &j["runs"][0]["error"],
            false => &j["error"],
        };
        e.as_str().unwrap_or_default().to_string()
    }
}

fn last_lines(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

/// Runs one cell: the receiver in `ns`, the test sender (or, for a sweep, the stand-in peer)
/// from this process into `ns`.
fn run_cell(ns: &NetNs, path: &Path, cell: &Cell, port: u16) -> Ran {
    let json = tmp_json(&format!("matrix-{port}"));
    let port_s = port.to_string();
    let ctrl_port = port + 1000;
    let ctrl_s = ctrl_port.to_string();
    let flows_s = path.flows.to_string();
    let expect_s = cell.expect_bytes.map(|b| b.to_string());
    let mut args: Vec<&str> = vec![
        "-l",
        "--plain",
        "-s",
        "127.0.0.1",
        "-p",
        &port_s,
        "--timeout",
        "3",
        "--json",
        json.to_str().expect("utf-8 temp path"),
    ];
    match cell.period {
        true => args.extend(["-v", "7"]),
        false => args.extend(["--seed", "42"]),
    }
    if path.flows > 1 {
        args.extend(["--flows", &flows_s]);
    }
    if path.timed {
        args.extend(["--duration", "1.5"]);
    }
    if path.warmup {
        args.extend(["--warmup", "0.5"]);
    }
    if let Some(b) = &expect_s {
        args.extend(["--expect-bytes", b]);
    }
    if path.sweep {
        args.extend(["--peer", "127.0.0.1", "--peer-port", &ctrl_s, "--runs", "1"]);
    }
    let plan = Plan {
        conns: cell.conns.clone(),
        limit: Duration::from_secs(20),
    };
    let entered = ns.enter().expect("enter the receiver's namespace");
    // The stand-in peer listens before the sweep starts.
    let peer = path.sweep.then(|| {
        let l = TcpListener::bind(("127.0.0.1", ctrl_port)).expect("bind the stand-in peer");
        let plan = plan.clone();
        std::thread::spawn(move || stand_in_peer(l, plan))
    });
    let rx = spawn(ns_cmd(ns, &args));
    if !path.sweep {
        common::wait_listening(rx.id(), port);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        plan.run(addr);
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
    let json = std::fs::read_to_string(&json)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    Ran {
        code: out.status.code(),
        json,
        stderr,
    }
}

/// A peer server as docs/lab.md defines it, for one sweep of one run: it answers `hello`,
/// takes the `send`, and sends `plan` (not what the sweep asked for) to the sweep's address
/// at the port the `send` names, then reports `done`.
fn stand_in_peer(listener: TcpListener, plan: Plan) {
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
    let Some(send) = read(&mut line) else {
        return;
    };
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
    let sent = plan.run(SocketAddr::new(from.ip(), port));
    let secs = start.elapsed().as_secs_f64();
    let flow_bytes: Vec<u64> = sent.iter().map(|s| s.bytes).collect();
    let bytes: u64 = flow_bytes.iter().sum();
    let done = serde_json::json!({
        "v": 1, "type": "done", "run": run,
        "figures": {
            "bytes": bytes, "elapsed_s": secs,
            "gbit_per_s": bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
            "flow_bytes": flow_bytes, "cpu": null, "error": null,
        }
    });
    let _ = w.write_all(format!("{done}\n").as_bytes());
    let _ = read(&mut line); // bye
}

/// Runs every cell of `path`, prints its row, and fails naming every cell that ended wrong.
fn row(test: &str, path: Path, base_port: u16) {
    let Some(reason) = common::skip_reason() else {
        let ns = NetNs::new().expect("create the namespace");
        let mut cells = Vec::new();
        let mut wrong = Vec::new();
        for (i, case) in CASES.iter().enumerate() {
            let Some(c) = cell(&path, *case) else {
                cells.push("n/a".to_string());
                continue;
            };
            let ran = run_cell(&ns, &path, &c, base_port + i as u16);
            match ran.judge(&c.expect, &path) {
                None => cells.push(
                    match c.expect {
                        Expect::Pass => "pass",
                        Expect::Fail(_) => "FAIL",
                    }
                    .to_string(),
                ),
                Some(why) => {
                    cells.push("WRONG".to_string());
                    wrong.push(format!("{} × {}: {why}", path.name, case.name()));
                }
            }
        }
        let header: Vec<String> = CASES.iter().map(|c| format!("{:>10}", c.name())).collect();
        let cells: Vec<String> = cells.iter().map(|c| format!("{c:>10}")).collect();
        eprintln!(
            "fault matrix (FAIL: the fault failed the run, as it must)\n{:<28}{}\n{:<28}{}",
            "path",
            header.join(""),
            path.name,
            cells.join("")
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        return;
    };
    common::print_skip(test, &reason);
}

#[test]
fn plain_one_flow_fixed_size() {
    let path = Path {
        name: "plain, 1 flow, fixed-size",
        flows: 1,
        timed: false,
        warmup: false,
        sweep: false,
    };
    row("plain_one_flow_fixed_size", path, 7100);
}

#[test]
fn plain_one_flow_timed() {
    let path = Path {
        name: "plain, 1 flow, timed",
        flows: 1,
        timed: true,
        warmup: false,
        sweep: false,
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
    };
    row("a_sweep_run_through_the_peer_protocol", path, 7500);
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
        "60e70844788f072aa5b0b60e64244fdb"
    );
    assert_eq!(
        hex(Source::Keyed { seed: 7, flow: 2 }, 8),
        "3a7a76db78a983c4"
    );
    assert_eq!(hex(Source::Period(4), 5), "0102030a01");
}
