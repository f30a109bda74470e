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
use std::time::Duration;

use common::bin::{ns_cmd, pair};
use common::{NetNsPair, ADDR_A_V4, ADDR_B_V4};

const CTRL: u16 = 4393;

/// The peer server on side B, listening on its control port (killed on drop).
struct Peer(Option<Child>);

impl Peer {
    fn start(p: &NetNsPair) -> Peer {
        let port = CTRL.to_string();
        let child = ns_cmd(
            &p.b,
            &[
                "--peer-server",
                "-s",
                ADDR_B_V4,
                "-p",
                &port,
                "--max-duration",
                "30",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the peer server");
        common::wait_listening(child.id(), CTRL);
        Peer(Some(child))
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
    for _ in 0..250 {
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
