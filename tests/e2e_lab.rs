//! End-to-end tests of the lab on the real kernel: `--peer-server` in one network namespace, a
//! sweep of the plain receiver (`--sweep flows=1,2 --runs 2 --duration 2`) in the other, joined
//! by a veth pair created here and always removed. Needs root; prints `skip: <test>: <reason>`
//! otherwise.
//!
//! Asserted is what holds on any machine, loaded or not: the table, the CSV, the JSON and the
//! SVG are written and agree with each other (the table's means are recomputed from the JSON's
//! runs), every run validated its flows, the peer sent to the receiver's own address, keeps
//! serving after a client's garbage and refuses a second client while one is served; never a
//! rate.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::bin::{ns_cmd, pair};
use common::{NetNsPair, ADDR_A_V4, ADDR_B_V4};

const CTRL: u16 = 4393;

/// The peer server on side B, listening on its control port (killed on drop).
struct Peer(Option<Child>);

impl Peer {
    /// On [`CTRL`], with `--max-duration 30`.
    fn start(p: &NetNsPair) -> Peer {
        peer_on(p, CTRL, "30")
    }

    /// SIGINT, then its exit status and stderr.
    fn stop(mut self) -> (i32, String) {
        let child = self.0.take().expect("the peer server");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let out = child.wait_with_output().expect("wait for the peer server");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tmp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ncdevmem-lab-{}-{tag}", std::process::id()))
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A control connection from the test, in side A's namespace, sending `lines`: the
/// connection (kept open) and the first line it reads. The peer may still be finishing the
/// previous client's session when a client has read that session's last answer, so a `busy`
/// answer is retried (at most 5 s) unless `busy_ok`.
fn control(p: &NetNsPair, lines: &[&str], busy_ok: bool) -> (TcpStream, serde_json::Value) {
    let _inside = p.a.enter().expect("enter side A");
    // A deadline, not a number of tries (as `Client::taken`).
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let s = TcpStream::connect((ADDR_B_V4, CTRL)).expect("connect to the peer's control port");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut w = s.try_clone().unwrap();
        for l in lines {
            w.write_all(l.as_bytes()).unwrap();
        }
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .expect("an answer line");
        let answer: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        if busy_ok || answer["code"] != "busy" {
            return (s, answer);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the peer stayed busy for 5 s after its client left");
}

#[test]
fn a_plain_sweep_over_flows_prints_and_writes_one_consistent_table() {
    let Some(p) = pair("a_plain_sweep_over_flows_prints_and_writes_one_consistent_table") else {
        return;
    };
    let peer = Peer::start(&p);
    let (csv, json, svg) = (tmp("runs.csv"), tmp("sweep.json"), tmp("sweep.svg"));
    let ctrl = CTRL.to_string();
    let out = ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5391",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--sweep",
            "flows=1,2",
            "--runs",
            "2",
            "--duration",
            "2",
            "--seed",
            "77",
            "--csv",
            csv.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
    )
    .output()
    .expect("run the sweep");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    // The table: the seed's first columns, one row per point, every run passed.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("flows  RX dev Gbps  RX flow avg Gbps  app sys %"),
        "{stdout}"
    );
    let rows: Vec<Vec<&str>> = lines[1..3]
        .iter()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    for (row, flows) in rows.iter().zip(["1", "2"]) {
        assert_eq!(row[0], flows, "{stdout}");
        assert_eq!(row[1], "-", "plain TCP has no device counters: {stdout}");
        assert_eq!(row.last(), Some(&"2/2"), "{stdout}");
    }
    assert!(stdout.contains("interleaved"), "{stdout}");
    assert_eq!(
        lines.last(),
        Some(&"sweep: pass: all 4 planned runs passed"),
        "{stdout}"
    );
    for n in 1..=4 {
        assert!(stderr.contains(&format!("run {n}/4: flows=")), "{stderr}");
    }

    // The JSON: four runs, interleaved, each validated its flows; the peer sent each flow.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read --json")).unwrap();
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4);
    let order: Vec<u64> = runs.iter().map(|r| r["value"].as_u64().unwrap()).collect();
    assert_eq!(order, [1, 2, 1, 2], "interleaved");
    for r in runs {
        let flows = r["value"].as_u64().unwrap() as usize;
        assert_eq!(r["outcome"], "ok", "{r}");
        let fig = &r["figures"];
        assert_eq!(fig["flows"].as_array().unwrap().len(), flows);
        for fl in fig["flows"].as_array().unwrap() {
            assert!(fl["validated_bytes"].as_u64().unwrap() > 0, "{fl}");
            assert_eq!(fl["mismatches"], 0, "{fl}");
        }
        assert_eq!(r["peer"]["flow_bytes"].as_array().unwrap().len(), flows);
        assert!(r["peer"]["bytes"].as_u64().unwrap() >= fig["bytes"].as_u64().unwrap());
    }
    assert_eq!(doc["plan"]["key"], "flows");
    assert_eq!(doc["environment"]["receive_mode"], "plain TCP");
    assert!(doc["environment"]["kernel_release"].is_string());
    assert!(doc["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "flows=1,2"));

    // The table's means, recomputed from the JSON's runs, and the points' statistics.
    for (point, row) in rows.iter().enumerate() {
        for (col, key, decimals) in [(2, "rx_flow_avg_gbps", 2), (3, "app_sys_pct", 1)] {
            let values: Vec<f64> = runs
                .iter()
                .filter(|r| r["point"] == point)
                .map(|r| f(&r["numbers"][key]))
                .collect();
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>()
                / (values.len() - 1) as f64)
                .sqrt();
            let stat = &doc["points"][point]["columns"][key];
            assert!((f(&stat["mean"]) - mean).abs() < 1e-9, "{key}: {stat}");
            assert!((f(&stat["sd"]) - sd).abs() < 1e-9, "{key}: {stat}");
            assert_eq!(
                row[col],
                format!("{mean:.decimals$} +/- {sd:.decimals$}"),
                "{key} of point {point}"
            );
        }
    }

    // The CSV: a header and a row per run, agreeing with the JSON.
    let csv_text = std::fs::read_to_string(&csv).expect("read --csv");
    let csv_lines: Vec<&str> = csv_text.lines().collect();
    assert_eq!(csv_lines.len(), 5, "{csv_text}");
    assert!(csv_lines[0].starts_with("index,key,value,point,run,outcome,error,bytes,"));
    for (line, r) in csv_lines[1..].iter().zip(runs) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[2], r["value"].to_string());
        assert_eq!(cells[5], "ok");
        assert_eq!(cells[7], r["numbers"]["bytes"].to_string());
    }

    // The SVG: a picture that renders.
    let svg_text = std::fs::read_to_string(&svg).expect("read --plot");
    assert!(svg_text.starts_with("<svg") && svg_text.contains("app sys %"));
    if Command::new("rsvg-convert")
        .arg("--version")
        .output()
        .is_ok()
    {
        let png = tmp("sweep.png");
        let st = Command::new("rsvg-convert")
            .arg(&svg)
            .arg("-o")
            .arg(&png)
            .status()
            .expect("rsvg-convert");
        assert!(st.success());
        let bytes = std::fs::read(&png).expect("read the PNG");
        assert!(
            bytes.len() > 1000 && bytes.starts_with(b"\x89PNG"),
            "{} bytes",
            bytes.len()
        );
        std::fs::remove_file(png).ok();
    } else {
        common::print_skip("rendering the SVG", "rsvg-convert is not installed");
    }
    for path in [&csv, &json, &svg] {
        std::fs::remove_file(path).ok();
    }

    // The peer keeps serving: garbage is answered and the next client is welcomed; while one
    // client is served, another is refused.
    let (_, garbage) = control(&p, &["not json\n"], false);
    assert_eq!(garbage["type"], "error");
    assert_eq!(garbage["code"], "malformed");
    let hello = "{\"v\":1,\"type\":\"hello\",\"tool\":\"test\",\"version\":\"0\"}\n";
    let (_, newer) = control(&p, &["{\"v\":2,\"type\":\"hello\"}\n"], false);
    assert_eq!(newer["code"], "version", "{newer}");
    {
        let (_first, welcome) = control(&p, &[hello], false);
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        // While that client's session is open, another is refused.
        let (_, second) = control(&p, &[hello], true);
        assert_eq!(second["code"], "busy", "{second}");
    }
    let (code, log) = peer.stop();
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains(&format!("client {ADDR_A_V4} done after 4 runs")),
        "{log}"
    );
    assert!(
        log.contains(&format!("to [::ffff:{ADDR_A_V4}]:5391")),
        "traffic only to the client's own address: {log}"
    );
}

#[test]
fn a_sweep_whose_peer_is_not_there_fails_naming_it() {
    let Some(p) = pair("a_sweep_whose_peer_is_not_there_fails_naming_it") else {
        return;
    };
    let ctrl = CTRL.to_string();
    let out = ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5392",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--runs",
            "2",
            "--duration",
            "1",
        ],
    )
    .output()
    .expect("run the sweep");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("--peer [{ADDR_B_V4}]:{CTRL}: connect")),
        "{stderr}"
    );
    // The table of the runs so far (none) is still printed, and says why it stopped.
    assert!(
        stdout.starts_with("niov  RX dev Gbps  RX flow avg Gbps  app sys %"),
        "{stdout}"
    );
    assert!(stdout.contains("stopped after 0 of 2 runs"), "{stdout}");
}

/// A stop signal ends a sweep that waits on its peer within a second, named: here a peer
/// that accepts the control connection and never answers its `hello` (the sweep used to wait
/// out its 10 s, and then named the timeout instead of the signal).
#[test]
fn a_stop_signal_ends_a_sweep_waiting_on_a_silent_peer() {
    let Some(p) = pair("a_stop_signal_ends_a_sweep_waiting_on_a_silent_peer") else {
        return;
    };
    const SILENT: u16 = 4430;
    let listener = {
        let _in_b = p.b.enter().expect("enter the peer's namespace");
        std::net::TcpListener::bind((ADDR_B_V4, SILENT)).expect("bind the silent peer")
    };
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        // Holds the connection, unanswered, until the test is done (bounded).
        let conn = listener.accept().map(|(c, _)| c);
        let _ = held_tx.send(());
        let _ = done_rx.recv_timeout(Duration::from_secs(20));
        drop(conn);
    });
    let ctrl = SILENT.to_string();
    let mut cmd = ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5394",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--runs",
            "1",
            "--duration",
            "1",
        ],
    );
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sweep");
    held_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the sweep connects to its peer");
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .expect("send SIGUSR1");
    let out = child.wait_with_output().expect("wait for the sweep");
    let took = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("interrupted by signal 10 (SIGUSR1)"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}: {stderr}");
    let _ = done_tx.send(());
    let _ = holder.join();
}

/// A sweep asking for devmem TX from a peer started without `-f IF`: the peer refuses that
/// run naming why, the sweep fails (exit 1) with that answer, and the peer keeps serving: the
/// next sweep, over plain TCP with the peer writing 1448 bytes at a time, passes.
#[test]
fn a_peer_without_a_nic_refuses_devmem_runs_and_keeps_serving() {
    let Some(p) = pair("a_peer_without_a_nic_refuses_devmem_runs_and_keeps_serving") else {
        return;
    };
    let peer = Peer::start(&p);
    let ctrl = CTRL.to_string();
    let json = tmp("peer-send.json");
    let sweep = |port: &str, extra: &[&str]| {
        let mut args = vec![
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            port,
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--runs",
            "1",
            "--duration",
            "1",
            "--seed",
            "5",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = ns_cmd(&p.a, &args).output().expect("run the sweep");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
                .unwrap_or_default();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            doc,
        )
    };
    let (code, stderr, doc) = sweep("5393", &["--peer-send", "devmem"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "refused (refused): run 1: devmem TX asked, but this peer was started without -f IF"
        ),
        "{stderr}"
    );
    assert_eq!(doc["environment"]["peer_send"], "devmem", "{doc}");
    let (code, stderr, doc) = sweep("5394", &["--write-size", "1448"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(doc["environment"]["peer_send"], "plain", "{doc}");
    assert_eq!(doc["environment"]["peer_write_size"], 1448, "{doc}");
    assert_eq!(doc["runs"][0]["outcome"], "ok", "{doc}");
    let (status, log) = peer.stop();
    assert_eq!(status, 0, "{log}");
    assert!(log.contains("run 1 refused: devmem TX asked"), "{log}");
    let _ = std::fs::remove_file(&json);
}

/// `--peer` of the other family than `-s` is a usage error before anything starts (nothing
/// listens, nothing connects): before, the sweep ran and its connect failed with a raw
/// `EAFNOSUPPORT` (exit 1). Needs no root: nothing is opened.
#[test]
fn a_peer_of_the_other_family_is_a_usage_error() {
    for (server, peer) in [("127.0.0.1", "::1"), ("::1", "127.0.0.1")] {
        let out = Command::new(common::bin::BIN)
            .args([
                "-l",
                "--plain",
                "-s",
                server,
                "-p",
                "5395",
                "--peer",
                peer,
                "--runs",
                "1",
                "--duration",
                "1",
            ])
            .output()
            .expect("run the sweep");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--peer: peer address '{peer}' is not of the same family as -s '{server}'"
            )),
            "{stderr}"
        );
        assert!(!stderr.contains("listening"), "{stderr}");
        assert!(out.stdout.is_empty(), "no table: nothing ran");
    }
}

/// `--cpus 1,0` pins flow 0 to CPU 1 and flow 1 to CPU 0 ("the k-th CPU of LIST", as
/// `--help` says), in every run of a sweep; the app CPUs are the set {0, 1}. Before, the list
/// was sorted: flow 0 ran on CPU 0. Needs two CPUs this process may run on.
#[test]
fn a_sweeps_cpu_list_keeps_its_order() {
    let Some(p) = pair("a_sweeps_cpu_list_keeps_its_order") else {
        return;
    };
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    if !(allowed.is_set(0).unwrap_or(false) && allowed.is_set(1).unwrap_or(false)) {
        common::print_skip(
            "a_sweeps_cpu_list_keeps_its_order",
            "needs CPUs 0 and 1 in the affinity mask",
        );
        return;
    }
    let peer = Peer::start(&p);
    let ctrl = CTRL.to_string();
    let json = tmp("cpus.json");
    let out = ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5396",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--runs",
            "1",
            "--duration",
            "1",
            "--flows",
            "2",
            "--cpus",
            "1,0",
            "--seed",
            "8",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .output()
    .expect("run the sweep");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read --json")).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(
        doc["environment"]["cpus"],
        serde_json::json!([1, 0]),
        "{doc}"
    );
    let fig = &doc["runs"][0]["figures"];
    let pinned: Vec<(u64, u64)> = fig["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|f| (f["flow"].as_u64().unwrap(), f["cpu"].as_u64().unwrap()))
        .collect();
    assert_eq!(pinned, [(0, 1), (1, 0)], "{fig}");
    assert_eq!(fig["cpu"]["app_cpus"], serde_json::json!([0, 1]), "{fig}");
    assert!(
        stderr.contains("flow 0: ") && stderr.contains("; cpu 1;"),
        "{stderr}"
    );
    let (code, log) = peer.stop();
    assert_eq!(code, 0, "{log}");
}

/// The peer server on side B listening on `ctrl` with `--max-duration max` (killed on drop).
fn peer_on(p: &NetNsPair, ctrl: u16, max: &str) -> Peer {
    let port = ctrl.to_string();
    let child = ns_cmd(
        &p.b,
        &[
            "--peer-server",
            "-s",
            ADDR_B_V4,
            "-p",
            &port,
            "--max-duration",
            max,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn the peer server");
    common::wait_listening(child.id(), ctrl);
    Peer(Some(child))
}

impl Peer {
    /// SIGINT, then how long it took to exit (failing after `limit` with it killed), its exit
    /// status and stderr.
    fn stop_within(mut self, limit: Duration) -> (Duration, i32, String) {
        let mut child = self.0.take().expect("the peer server");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let sent = Instant::now();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        loop {
            if child
                .try_wait()
                .expect("wait for the peer server")
                .is_some()
            {
                break;
            }
            if sent.elapsed() > limit {
                let _ = child.kill();
                let out = child.wait_with_output().expect("reap the peer server");
                panic!(
                    "the peer server did not end within {limit:?} of SIGINT: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = sent.elapsed();
        let out = child.wait_with_output().expect("the peer server's output");
        (
            took,
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A control connection of the test's own (from side A): lines out, messages in.
struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(p: &NetNsPair, ctrl: u16) -> Client {
        let _inside = p.a.enter().expect("enter side A");
        let stream = TcpStream::connect((ADDR_B_V4, ctrl)).expect("connect to the control port");
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client { stream, reader }
    }

    /// A connection the peer serves: one answered `busy` at once (the previous client's
    /// session still ending) is made again, for at most 5 s.
    fn taken(p: &NetNsPair, ctrl: u16) -> Client {
        // A deadline, not a number of tries: a `busy` answer comes back in a few ms, so 50
        // tries were over in well under a second, and a loaded machine's peer took longer than
        // that to end the previous session (tests/vm/FLAKES.md).
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let mut c = Client::connect(p, ctrl);
            c.stream
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut line = String::new();
            match c.reader.read_line(&mut line) {
                Ok(n) if n > 0 && line.contains("\"busy\"") => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(n) => panic!("unexpected answer before hello ({n} bytes): {line:?}"),
                Err(_) => return c,
            }
        }
        panic!("the peer stayed busy for 5 s after its client left");
    }

    fn send(&mut self, bytes: &str) {
        self.stream
            .write_all(bytes.as_bytes())
            .expect("write a control line");
    }

    /// The next message within `wait`, or `None` when the peer closed the connection.
    fn next(&mut self, wait: Duration) -> Option<serde_json::Value> {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("no control message within {wait:?}: {e}"),
        }
    }

    /// `hello`, then the `welcome`.
    fn hello(&mut self) {
        self.send(HELLO);
        let welcome = self.next(Duration::from_secs(10)).expect("a welcome");
        assert_eq!(welcome["type"], "welcome", "{welcome}");
    }

    /// Asks for run 1: `flows` flow of seed 1 to `port` for `secs`; returns the `started`.
    fn start_run(&mut self, port: u16, secs: f64) -> serde_json::Value {
        self.send(&format!(
            "{{\"v\":1,\"type\":\"send\",\"run\":1,\"port\":{port},\"flows\":1,\"duration_s\":{secs:.1},\"stream\":{{\"seed\":1}},\"write_size\":null,\"tcp_cc\":null,\"devmem_tx\":false}}\n"
        ));
        let started = self
            .next(Duration::from_secs(10))
            .expect("an answer to send");
        assert_eq!(started["type"], "started", "{started}");
        started
    }
}

const HELLO: &str = "{\"v\":1,\"type\":\"hello\",\"tool\":\"test\",\"version\":\"0\"}\n";

/// A listening socket of the test on side A at a port the kernel picked (it keeps it), whose
/// `listen` comes only when [`Receiver::listen`] is called: until then a connect to it is
/// refused. Accepts one connection and reads it to its end.
struct Receiver {
    fd: std::os::fd::OwnedFd,
    port: u16,
}

impl Receiver {
    fn bound(p: &NetNsPair) -> Receiver {
        use nix::sys::socket::{
            bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
        };
        use std::os::fd::AsRawFd;
        let _inside = p.a.enter().expect("enter side A");
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        let addr: std::net::SocketAddrV4 = format!("{ADDR_A_V4}:0").parse().unwrap();
        bind(fd.as_raw_fd(), &SockaddrIn::from(addr)).expect("bind");
        let port = getsockname::<SockaddrIn>(fd.as_raw_fd())
            .expect("getsockname")
            .port();
        Receiver { fd, port }
    }

    /// Listens, accepts the peer's flow on a thread and reads it until it ends; the thread
    /// returns the bytes read and when the flow ended (EOF or a reset).
    fn listen(self) -> std::thread::JoinHandle<(u64, Instant)> {
        nix::sys::socket::listen(&self.fd, nix::sys::socket::Backlog::new(4).unwrap())
            .expect("listen");
        let listener = std::net::TcpListener::from(self.fd);
        std::thread::spawn(move || {
            let (mut flow, _) = listener.accept().expect("accept the peer's flow");
            flow.set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut bytes = 0u64;
            loop {
                match std::io::Read::read(&mut flow, &mut buf) {
                    Ok(0) | Err(_) => return (bytes, Instant::now()),
                    Ok(n) => bytes += n as u64,
                }
            }
        })
    }
}

/// SIGINT (or SIGTERM) ends `--peer-server` within 1 s whatever its client is doing: silent
/// after connecting, in the middle of a line, between runs, in a run. Asserted with 1 s of
/// margin for a loaded machine: at most 2 s. Before, the server waited for the client's
/// control connection to close (up to 900 s) in the first three.
#[test]
fn a_stop_signal_ends_the_peer_server_within_a_second_whatever_its_client_does() {
    let Some(p) =
        pair("a_stop_signal_ends_the_peer_server_within_a_second_whatever_its_client_does")
    else {
        return;
    };
    for (case, ctrl) in [
        ("silent", 4401),
        ("mid-line", 4402),
        ("between runs", 4403),
        ("in a run", 4404),
    ] {
        let peer = peer_on(&p, ctrl, "30");
        let mut client = Client::connect(&p, ctrl);
        let mut flow = None;
        match case {
            "silent" => {}
            "mid-line" => client.send("{\"v\":1,\"type\":\"hel"),
            "between runs" => client.hello(),
            _ => {
                client.hello();
                let rx = Receiver::bound(&p);
                let port = rx.port;
                flow = Some(rx.listen());
                client.start_run(port, 20.0);
            }
        }
        // The peer has taken the connection and waits in its read (or sends).
        std::thread::sleep(Duration::from_millis(300));
        let (took, code, log) = peer.stop_within(Duration::from_secs(10));
        assert_eq!(code, 0, "{case}: {log}");
        assert!(
            took <= Duration::from_secs(2),
            "{case}: the peer server took {took:?} to end: {log}"
        );
        assert!(
            log.contains("peer server: stopped by a signal"),
            "{case}: {log}"
        );
        drop(client);
        if let Some(f) = flow {
            let (bytes, _) = f.join().unwrap();
            assert!(bytes > 0, "{case}: the run sent nothing");
        }
    }
}

/// A client must send its `hello` within 5 s and finish every line within 10 s of its first
/// byte: a silent client is dropped after 5 s, one that sends its `hello` a byte every 400 ms
/// (19 s for the line) after 10 s, and the next client is served each time. Before, a silent
/// client kept the peer (busy to everyone else) for 900 s, and a dribbling one forever (each
/// byte restarted the 900 s).
#[test]
fn a_silent_or_dribbling_client_is_dropped_and_the_next_one_served() {
    let Some(p) = pair("a_silent_or_dribbling_client_is_dropped_and_the_next_one_served") else {
        return;
    };
    let peer = peer_on(&p, CTRL, "30");
    // Silent: the peer is busy with it, then drops it within 5 s (+ 2 s of margin).
    let mut silent = Client::connect(&p, CTRL);
    let since = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let (_, busy) = control(&p, &[HELLO], true);
    assert_eq!(busy["code"], "busy", "{busy}");
    assert_eq!(
        silent.next(Duration::from_secs(10)),
        None,
        "the silent client is closed"
    );
    let dropped = since.elapsed();
    assert!(
        dropped >= Duration::from_secs(4) && dropped <= Duration::from_secs(7),
        "a silent client dropped after {dropped:?} (expected 5 s)"
    );
    let (_, welcome) = control(&p, &[HELLO], false);
    assert_eq!(
        welcome["type"], "welcome",
        "the next client is served: {welcome}"
    );

    // Dribbling: a byte every 400 ms; dropped 10 s (+ 3 s) after its first byte, before
    // the line is done.
    let mut dribble = Client::taken(&p, CTRL);
    let mut writer = dribble.stream.try_clone().unwrap();
    let first_byte = Instant::now();
    let dribbling = std::thread::spawn(move || {
        for b in HELLO.bytes() {
            if writer.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    let answer = dribble.next(Duration::from_secs(30));
    let after = first_byte.elapsed();
    assert_eq!(answer, None, "the dribbling client is closed, not welcomed");
    assert!(
        after >= Duration::from_secs(9) && after <= Duration::from_secs(13),
        "a dribbling client dropped {after:?} after its first byte (expected 10 s)"
    );
    drop(dribble);
    dribbling.join().unwrap();
    let (_, welcome) = control(&p, &[HELLO], false);
    assert_eq!(
        welcome["type"], "welcome",
        "the next client is served: {welcome}"
    );
    let (code, log) = peer.stop();
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("no control message within 5.0 s"), "{log}");
    assert!(log.contains("not finished within 10.0 s"), "{log}");
}

/// A run never outlives the peer's `--max-duration` (3 s here), its connect window included:
/// a receiver that listens only 2.5 s after the request gets its flow ended by 3 s after the
/// `started` (+ 1.5 s of margin), and so does the `done`; a receiver that never listens gets
/// the `done` within 3 s (+ 1.5 s), not after the 10 s connect window. Before: the flow ran
/// 3 s from its connect (5.5 s), the `done` of a refused run came after 10 s.
#[test]
fn a_run_never_outlives_the_peers_max_duration_its_connect_included() {
    let Some(p) = pair("a_run_never_outlives_the_peers_max_duration_its_connect_included") else {
        return;
    };
    let peer = peer_on(&p, CTRL, "3");
    let limit = Duration::from_secs(3) + Duration::from_millis(1500);
    // A receiver that listens late.
    let mut client = Client::taken(&p, CTRL);
    client.hello();
    let rx = Receiver::bound(&p);
    let port = rx.port;
    let started_at = Instant::now();
    let started = client.start_run(port, 60.0);
    assert_eq!(started["duration_s"], 3.0, "{started}");
    std::thread::sleep(Duration::from_millis(2500));
    let flow = rx.listen();
    let done = client.next(Duration::from_secs(20)).expect("done");
    let done_after = started_at.elapsed();
    assert_eq!(done["type"], "done", "{done}");
    let (bytes, ended) = flow.join().unwrap();
    assert!(bytes > 0, "the late receiver got nothing: {done}");
    let flow_for = ended.duration_since(started_at);
    assert!(
        flow_for <= limit,
        "the flow ended {flow_for:?} after the request (limit 3 s): {done}"
    );
    assert!(
        done_after <= limit,
        "done came {done_after:?} after the request: {done}"
    );
    assert_eq!(
        done["figures"]["error"],
        serde_json::Value::Null,
        "a clean end at the limit: {done}"
    );
    // A receiver that never listens: the connect window ends with the run.
    client.send("{\"v\":1,\"type\":\"send\",\"run\":2,\"port\":9,\"flows\":1,\"duration_s\":60.0,\"stream\":{\"seed\":1},\"write_size\":null,\"tcp_cc\":null,\"devmem_tx\":false}\n");
    let asked = Instant::now();
    let started = client.next(Duration::from_secs(10)).expect("started");
    assert_eq!(started["type"], "started", "{started}");
    let done = client.next(Duration::from_secs(20)).expect("done");
    let done_after = asked.elapsed();
    assert!(
        done_after <= limit,
        "a refused run's done came {done_after:?} after the request: {done}"
    );
    assert!(
        done["figures"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "{done}"
    );
    drop(client);
    let (code, log) = peer.stop();
    assert_eq!(code, 0, "{log}");
}

/// A run stops within 1 s of its control connection closing (asserted with 1 s of margin):
/// the client asks for 20 s, the receiver reads, the client hangs up; the flow ends within
/// 2 s. Before, the peer sent on for the whole 20 s.
#[test]
fn a_run_stops_when_its_control_connection_closes() {
    let Some(p) = pair("a_run_stops_when_its_control_connection_closes") else {
        return;
    };
    let peer = peer_on(&p, CTRL, "30");
    let mut client = Client::taken(&p, CTRL);
    client.hello();
    let rx = Receiver::bound(&p);
    let port = rx.port;
    let flow = rx.listen();
    client.start_run(port, 20.0);
    std::thread::sleep(Duration::from_millis(500));
    drop(client);
    let closed = Instant::now();
    let (bytes, ended) = flow.join().unwrap();
    assert!(bytes > 0, "the receiver got nothing");
    let after = ended.saturating_duration_since(closed);
    assert!(
        after <= Duration::from_secs(2),
        "the flow ended {after:?} after the control connection closed"
    );
    let (code, log) = peer.stop();
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("control connection closed"), "{log}");
}

/// The reviewer's question on the real kernel: a `--plain` sweep (3 runs of 1 s) compared
/// with itself — nothing significant, nothing differs — and with a sweep whose peer wrote
/// 1448 bytes at a time, which `--compare` refuses naming `--write-size` as a shape
/// difference (exit 2) and compares with `--any-shape`, listing it. Every sweep's JSON
/// carries the provenance (this host's and the peer's); the comparison's plot is a PNG that
/// decodes; `--format markdown` and `--columns` shape the table.
#[test]
fn a_plain_sweep_compared_with_itself_and_with_another_write_size() {
    let Some(p) = pair("a_plain_sweep_compared_with_itself_and_with_another_write_size") else {
        return;
    };
    let peer = Peer::start(&p);
    let ctrl = CTRL.to_string();
    let sweep = |tag: &str, extra: &[&str]| -> PathBuf {
        let json = tmp(&format!("{tag}.json"));
        let mut args = vec![
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5397",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--runs",
            "3",
            "--duration",
            "1",
            "--seed",
            "5",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend(extra);
        let out = ns_cmd(&p.a, &args).output().expect("run the sweep");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The footer: the command and the one-line environment.
        assert!(
            stdout.contains("\ncommand: ncdevmem-rs -l --plain"),
            "{stdout}"
        );
        assert!(stdout.contains("\nenv: ncdevmem-rs "), "{stdout}");
        assert!(stdout.contains("\npeer env: ncdevmem-rs "), "{stdout}");
        for line in stdout.lines().take(4) {
            assert!(line.len() <= 72, "{line:?}: {stdout}");
        }
        // The footer wraps at 72 characters too, from the "mean +/-" line to the verdict;
        // the command's continuation lines end in ` \`, so that it pastes into a shell.
        let footer: Vec<&str> = stdout
            .lines()
            .skip_while(|l| !l.starts_with("mean +/- sample sd"))
            .collect();
        assert!(
            footer.last().is_some_and(|l| l.starts_with("sweep: ")),
            "{stdout}"
        );
        for line in &footer {
            assert!(line.len() <= 72, "{line:?}: {stdout}");
        }
        let command: Vec<&str> = footer
            .iter()
            .skip_while(|l| !l.starts_with("command: "))
            .take_while(|l| !l.starts_with("env: "))
            .copied()
            .collect();
        assert!(command.len() > 1, "{stdout}");
        let (last, rest) = command.split_last().unwrap();
        assert!(rest.iter().all(|l| l.ends_with(" \\")), "{stdout}");
        assert!(!last.ends_with('\\'), "{stdout}");
        json
    };
    let a = sweep("a", &[]);
    let b = sweep("b", &["--write-size", "1448"]);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    for k in [
        "version",
        "host_name",
        "kernel_release",
        "kernel_cmdline",
        "cpu_model",
        "online_cpus",
        "governor",
        "nic",
        "queue_irqs",
        "sysctls",
    ] {
        assert!(
            doc["provenance"].get(k).is_some(),
            "no provenance.{k}: {doc}"
        );
        assert!(
            doc["peer_provenance"].get(k).is_some(),
            "no peer_provenance.{k}"
        );
    }
    assert_eq!(doc["provenance"]["version"], ncdevmem::VERSION);
    let compare = |args: &[&str]| {
        let out = Command::new(common::bin::BIN)
            .args(args)
            .output()
            .expect("run --compare");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let png = tmp("compare.png");
    let cjson = tmp("compare.json");
    let (code, out, err) = compare(&[
        "--compare",
        a_s,
        a_s,
        "--plot",
        png.to_str().unwrap(),
        "--json",
        cjson.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.starts_with("point  figure "), "{out}");
    assert!(out.contains(": 0 significant\n"), "{out}");
    assert!(!out.contains("differs"), "{out}");
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cjson).unwrap()).unwrap();
    assert_eq!(c["mode"], "compare");
    assert_eq!(c["verdict"], "pass");
    for cell in c["comparison"]["rows"][0]["cells"].as_array().unwrap() {
        assert_eq!(cell["significant"], false, "{cell}");
    }
    let bytes = std::fs::read(&png).expect("the comparison's plot");
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert!(info.width > 100 && info.height > 100);
    assert!(buf.chunks(3).any(|px| px != [255, 255, 255]), "not blank");

    let (code, out, err) = compare(&["--compare", a_s, b_s]);
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(
        err.contains("measured different shapes: --write-size: default (base) against 1448 (new)"),
        "{err}"
    );
    let (code, out, err) = compare(&[
        "--compare",
        a_s,
        b_s,
        "--any-shape",
        "--format",
        "markdown",
        "--columns",
        "rx_gbps,app_sys_pct",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.starts_with("| point | figure | base | new |"), "{out}");
    assert_eq!(out.matches("| - | RX Gbps |").count(), 1, "{out}");
    // The note wraps at 72 characters (markdown's notes too).
    assert!(
        out.contains(
            "shape differs (--any-shape): --write-size: default (base) against 1448\n  (new)\n"
        ),
        "{out}"
    );
    drop(peer);
    for f in [&a, &b, &png, &cjson] {
        std::fs::remove_file(f).ok();
    }
}

/// A `tcp-cc` sweep on the real kernel: each point's receiver (and the peer's send) runs with
/// that congestion control, the table's first column names it, the JSON keeps the names;
/// a name this kernel does not have is a usage error before the first run, naming the ones
/// it has.
#[test]
fn a_tcp_cc_sweep_runs_each_congestion_control_by_name() {
    let Some(p) = pair("a_tcp_cc_sweep_runs_each_congestion_control_by_name") else {
        return;
    };
    let peer = Peer::start(&p);
    let ctrl = CTRL.to_string();
    let json = tmp("tcp-cc.json");
    let sweep = |cc: &str| {
        let spec = format!("tcp-cc={cc}");
        let args = [
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            "5398",
            "--peer",
            ADDR_B_V4,
            "--peer-port",
            &ctrl,
            "--sweep",
            &spec,
            "--runs",
            "1",
            "--duration",
            "1",
            "--seed",
            "5",
            "--json",
            json.to_str().unwrap(),
        ];
        ns_cmd(&p.a, &args).output().expect("run the sweep")
    };
    // reno is built into every kernel; cubic is 6.18's default.
    let out = sweep("reno,cubic");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("tcp-cc "), "{stdout}");
    let first: Vec<&str> = stdout
        .lines()
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(first, ["reno", "cubic"], "{stdout}");
    assert!(stderr.contains("tcp-cc=cubic run 1/1"), "{stderr}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["plan"]["key"], "tcp-cc", "{doc}");
    assert_eq!(doc["plan"]["names"], serde_json::json!(["reno", "cubic"]));
    assert_eq!(doc["points"][1]["label"], "cubic");
    assert_eq!(doc["environment"]["tcp_cc"], serde_json::Value::Null);

    let out = sweep("reno,nosuchcc");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--sweep tcp-cc"), "{stderr}");
    assert!(stderr.contains("nosuchcc"), "{stderr}");
    assert!(
        stderr.contains("reno"),
        "names the available ones: {stderr}"
    );
    assert!(!stderr.contains("run 1/"), "no run was made: {stderr}");
    drop(peer);
    std::fs::remove_file(&json).ok();
}
