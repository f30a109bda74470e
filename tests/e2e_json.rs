//! End-to-end tests of what a run reports on the real kernel: the `--json` object's top-level
//! keys in every mode and outcome (`docs/json.md`, `docs/summary.schema.json`), `--json -`,
//! `--quiet`'s verdict line, and the pattern sender's partial summary when it is stopped, its
//! CPU figures and its `--progress` lines. Receivers and senders run in two network
//! namespaces joined by a veth pair (created here and always removed). Needs root; prints
//! `skip: <test>: <reason>` otherwise.

mod common;

use common::bin::{ns_cmd, pair, read_json, spawn, text, tmp_json, wait_for_line};

use std::io::Read;
use std::process::Output;

use common::{NetNsPair, ADDR_A_V4, VETH_A};

const PORT: &str = "5202";

/// The top-level keys the schema requires of every object.
fn required_keys() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/summary.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read the schema"))
            .expect("the schema is JSON");
    schema["required"]
        .as_array()
        .expect("a required list")
        .iter()
        .map(|k| k.as_str().expect("a key").to_string())
        .collect()
}

/// This machine's kernel release, as `uname -r` prints it.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("osrelease")
        .trim()
        .to_string()
}

/// Checks the top-level keys of `j`, the summary of `args` in `mode` whose exit code was
/// `code`: every key the schema requires, `verdict` from the exit code, `ok` and `error` from
/// the verdict, the version, the command line and the kernel release.
fn check_envelope(j: &serde_json::Value, mode: &str, args: &[&str], code: i32) {
    for k in required_keys() {
        assert!(j.get(&k).is_some(), "{args:?}: no {k}: {j}");
    }
    let verdict = match code {
        0 => "pass",
        4 => "skip",
        _ => "fail",
    };
    assert_eq!(j["mode"], mode, "{args:?}: {j}");
    assert_eq!(j["verdict"], verdict, "{args:?} exited {code}: {j}");
    assert_eq!(j["ok"], code == 0, "{args:?}: {j}");
    match code {
        0 => assert!(j["error"].is_null(), "{args:?}: {j}"),
        _ => assert!(
            j["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{args:?}: {j}"
        ),
    }
    if code == 4 {
        assert!(
            j["error"].as_str().unwrap().starts_with("skip: "),
            "{args:?}: {j}"
        );
    }
    assert_eq!(j["version"], ncdevmem::VERSION, "{j}");
    assert_eq!(j["argv"], serde_json::json!(args), "{j}");
    assert_eq!(j["kernel_release"], kernel_release(), "{j}");
    // The set-up's steps: known names, each timed, the listen (when there is one) last; a
    // mode that does not listen has none.
    let steps = j["setup"].as_array().expect("setup is an array");
    const STEPS: [&str; 10] = [
        "start",
        "checks",
        "hugepages",
        "nic",
        "queues",
        "memory",
        "configure",
        "bind",
        "register",
        "listen",
    ];
    for (i, s) in steps.iter().enumerate() {
        let name = s["step"].as_str().unwrap_or_default();
        assert!(STEPS.contains(&name), "{args:?}: {j}");
        assert!(
            s["ms"].as_f64().is_some_and(|ms| ms >= 0.0),
            "{args:?}: {j}"
        );
        assert!(name != "listen" || i + 1 == steps.len(), "{args:?}: {j}");
    }
    if ["probe", "report", "pattern-sender", "devmem-tx", "compare"].contains(&mode) {
        assert!(steps.is_empty(), "{args:?}: {j}");
    }
    for (i, s) in steps.iter().enumerate() {
        assert!(s["step"] != "start" || i == 0, "{args:?}: {j}");
    }
    if mode == "plain TCP" && code == 0 {
        assert_eq!(j["setup"][0]["step"], "start", "{args:?}: {j}");
        assert_eq!(j["setup"][1]["step"], "listen", "{args:?}: {j}");
    }
}

/// `args` plus `--json PATH`.
fn with_json<'a>(args: &[&'a str], path: &'a str) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend(["--json", path]);
    v
}

/// Runs `rx_args` on side A (waiting until it listens), then `tx_args` on side B; both
/// outputs.
fn transfer(p: &NetNsPair, rx_args: &[&str], tx_args: &[&str]) -> (Output, Output) {
    let mut rx = spawn(ns_cmd(&p.a, rx_args));
    let (err, seen) = wait_for_line(&mut rx, "listening on");
    let tx = ns_cmd(&p.b, tx_args).output().expect("run sender");
    let rest = err.rest();
    let mut out = rx.wait_with_output().expect("wait receiver");
    out.stderr = format!("{seen}{rest}").into_bytes();
    (out, tx)
}

/// Every mode's `--json` object has the same top-level keys — a pass, a skip, a run that ends
/// before its summary (no connection, an unknown interface, a sender that cannot connect, a
/// sweep without its peer), a stopped peer server — and the probe's skip reason does not
/// repeat the `skip: ` of its verdict. Before: a full summary had no `verdict`, an early end
/// only `{mode, ok, verdict, error}`, the probe no `mode` or `ok` and a reason starting
/// `skip: `, and no object the version, the command line or the kernel release.
#[test]
fn every_json_summary_has_the_same_top_level_keys() {
    let Some(p) = pair("every_json_summary_has_the_same_top_level_keys") else {
        return;
    };
    let json = tmp_json("envelope");
    let j = json.to_str().expect("utf-8 temp path");
    let tx_json = tmp_json("envelope-tx");
    let tj = tx_json.to_str().expect("utf-8 temp path");
    let udmabuf = std::path::Path::new("/dev/udmabuf").exists();
    // (args, mode, exit code or None for "whatever this host answers")
    let early: Vec<(Vec<&str>, &str, Option<i32>)> = vec![
        (vec!["-f", VETH_A], "probe", (!udmabuf).then_some(4)),
        (vec!["--report", "-f", VETH_A], "report", Some(0)),
        (vec!["-f", "nosuch0"], "probe", Some(2)),
        (
            vec![
                "-l",
                "--plain",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "--timeout",
                "0.2",
            ],
            "plain TCP",
            Some(1),
        ),
        (
            vec!["-l", "-f", VETH_A, "-s", ADDR_A_V4, "-p", PORT, "-v", "7"],
            "devmem",
            Some(4),
        ),
        (
            vec![
                "-l",
                "--zcrx",
                "-f",
                VETH_A,
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "-v",
                "7",
                "--timeout",
                "1",
            ],
            "io_uring zcrx",
            None,
        ),
        (
            vec![
                "-f",
                VETH_A,
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "--timeout",
                "0.2",
            ],
            "devmem-tx",
            None,
        ),
        (
            vec![
                "--send-pattern",
                "1K",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "-v",
                "7",
                "--timeout",
                "0.2",
            ],
            "pattern-sender",
            Some(1),
        ),
        (
            vec![
                "--send-pattern",
                "1K",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "-v",
                "7",
                "--timeout",
                "0.2",
                "--flows",
                "2",
            ],
            "pattern-sender",
            Some(1),
        ),
        (
            vec![
                "-l",
                "--plain",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "--peer",
                ADDR_A_V4,
                "--peer-port",
                "5299",
                "--runs",
                "1",
                "--duration",
                "1",
            ],
            "sweep",
            Some(1),
        ),
    ];
    for (args, mode, code) in &early {
        let args = with_json(args, j);
        let out = ns_cmd(&p.a, &args).output().expect("run");
        let got = out.status.code().expect("an exit code");
        if let Some(want) = code {
            assert_eq!(got, *want, "{args:?}: {}", text(&out.stderr));
        }
        let v = read_json(&json);
        check_envelope(&v, mode, &args, got);
        if *mode == "probe" && got == 4 {
            let reason = v["probe"]["reason"].as_str().expect("a skip's reason");
            assert!(!reason.starts_with("skip: "), "{v}");
            assert_eq!(v["error"], format!("skip: {reason}"), "{v}");
            assert_eq!(v["probe"]["verdict"], "skip", "{v}");
        }
        if *mode == "report" {
            assert_eq!(v["ifname"], VETH_A, "{v}");
        }
    }

    // A pass of each side, one flow and two.
    for (rx_extra, tx_extra) in [
        (vec!["-v", "7"], vec!["--send-pattern", "1M", "-v", "7"]),
        (
            vec!["--seed", "9", "--flows", "2"],
            vec!["--send-pattern", "1M", "--seed", "9", "--flows", "2"],
        ),
    ] {
        let mut rx_args = vec![
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "--timeout",
            "10",
        ];
        rx_args.extend(&rx_extra);
        let rx_args = with_json(&rx_args, j);
        let mut tx_args = vec!["-s", ADDR_A_V4, "-p", PORT, "--timeout", "5"];
        tx_args.extend(&tx_extra);
        let tx_args = with_json(&tx_args, tj);
        let (rx, tx) = transfer(&p, &rx_args, &tx_args);
        assert_eq!(tx.status.code(), Some(0), "{}", text(&tx.stderr));
        assert_eq!(rx.status.code(), Some(0), "{}", text(&rx.stderr));
        let (r, t) = (read_json(&json), read_json(&tx_json));
        check_envelope(&r, "plain TCP", &rx_args, 0);
        check_envelope(&t, "pattern-sender", &tx_args, 0);
        assert!(r["bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
        assert!(t["cpu_user_s"].is_number(), "{t}");
    }

    // The peer server, stopped by SIGTERM once it listens.
    let args = with_json(&["--peer-server", "-s", ADDR_A_V4, "-p", "5298"], j);
    let mut peer = spawn(ns_cmd(&p.a, &args));
    let (_err, _) = wait_for_line(&mut peer, "peer server: control on");
    let pid = nix::unistd::Pid::from_raw(peer.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = peer.wait().expect("wait peer server");
    check_envelope(
        &read_json(&json),
        "peer-server",
        &args,
        status.code().expect("exit code"),
    );
}

/// The pattern sender stopped by SIGINT or SIGTERM prints its summary of what it sent (bytes,
/// seconds, Gbit/s, the CRC-32 of exactly those bytes, CPU) and writes it to `--json`; the
/// run still fails (exit 1). `--progress` prints its lines while it sends. Before: only
/// "interrupted by signal", `{mode, ok, verdict, error}` in the JSON, and `--progress` was
/// accepted and did nothing on the sender.
#[test]
fn a_stopped_sender_reports_what_it_sent() {
    let Some(p) = pair("a_stopped_sender_reports_what_it_sent") else {
        return;
    };
    let json = tmp_json("stopped-tx");
    let j = json.to_str().expect("utf-8 temp path");
    for (signal, name) in [
        (nix::sys::signal::Signal::SIGINT, "SIGINT"),
        (nix::sys::signal::Signal::SIGTERM, "SIGTERM"),
    ] {
        let rx_args = [
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "10",
        ];
        let mut rx = spawn(ns_cmd(&p.a, &rx_args));
        let (_rx_err, _) = wait_for_line(&mut rx, "listening on");
        let tx_args = [
            "--send-pattern",
            "100G",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--progress",
            "0.2",
            "--json",
            j,
        ];
        let mut tx = spawn(ns_cmd(&p.b, &tx_args));
        let (tx_err, seen) = wait_for_line(&mut tx, "tx progress: ");
        assert!(
            seen.lines()
                .last()
                .is_some_and(|l| l.starts_with("ncdevmem-rs: tx progress: ")
                    && l.contains(" bytes in ")
                    && l.contains("Gbit/s (last ")),
            "{seen}"
        );
        let pid = nix::unistd::Pid::from_raw(tx.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal the sender");
        let rest = tx_err.rest();
        let status = tx.wait().expect("wait sender");
        assert_eq!(status.code(), Some(1), "{name}: {rest}");
        let summary = rest
            .lines()
            .find(|l| l.starts_with("sent "))
            .unwrap_or_else(|| panic!("{name}: no summary line: {rest}"));
        assert!(summary.contains("(period 7) in "), "{summary}");
        assert!(summary.contains(" Gbit/s, crc32 0x"), "{summary}");
        assert!(summary.contains("; CPU user "), "{summary}");
        assert!(rest.contains("interrupted by signal"), "{rest}");
        let v = read_json(&json);
        check_envelope(&v, "pattern-sender", &tx_args, 1);
        assert!(v["error"].as_str().unwrap().contains(name), "{v}");
        let bytes = v["bytes"].as_u64().expect("bytes");
        assert!(bytes > 0, "{v}");
        let crc = ncdevmem::validate::Pattern::new(7)
            .expect("period 7")
            .crc32(bytes);
        assert_eq!(v["crc32"], crc, "the CRC-32 of the {bytes} bytes sent: {v}");
        assert!(
            summary.contains(&format!("sent {bytes} bytes")),
            "{summary}"
        );
        assert!(summary.contains(&format!("crc32 0x{crc:08x}")), "{summary}");
        assert!(v["elapsed_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
        assert!(v["gbit_per_s"].as_f64().is_some_and(|g| g > 0.0), "{v}");
        assert!(
            v["cpu_user_s"].is_number() && v["cpu_sys_s"].is_number(),
            "{v}"
        );
        let rx = rx.wait_with_output().expect("wait receiver");
        assert_eq!(rx.status.code(), Some(1), "the receiver sees the reset");
    }
}

/// The sender's summary and JSON carry its CPU time as the receiver's do, per flow too
/// (each flow's thread), and `--progress` sums the flows. Before: no CPU figure on the sender
/// side, no progress line.
#[test]
fn the_sender_reports_its_cpu_per_flow_and_its_progress() {
    let Some(p) = pair("the_sender_reports_its_cpu_per_flow_and_its_progress") else {
        return;
    };
    let json = tmp_json("flows-tx");
    let j = json.to_str().expect("utf-8 temp path");
    let rx_args = [
        "-l",
        "--plain",
        "-s",
        ADDR_A_V4,
        "-p",
        PORT,
        "--seed",
        "3",
        "--flows",
        "2",
        "--timeout",
        "10",
    ];
    let tx_args = [
        "--send-pattern",
        "0",
        "--duration",
        "1",
        "-s",
        ADDR_A_V4,
        "-p",
        PORT,
        "--seed",
        "3",
        "--flows",
        "2",
        "--progress",
        "0.3",
        "--json",
        j,
    ];
    let (rx, tx) = transfer(&p, &rx_args, &tx_args);
    let err = text(&tx.stderr);
    assert_eq!(tx.status.code(), Some(0), "{err}");
    assert_eq!(rx.status.code(), Some(0), "{}", text(&rx.stderr));
    assert!(
        err.lines()
            .any(|l| l.starts_with("ncdevmem-rs: tx progress (2 flows): ")),
        "{err}"
    );
    let total = err
        .lines()
        .find(|l| l.starts_with("sent 2 flows: "))
        .unwrap_or_else(|| panic!("no total line: {err}"));
    assert!(total.contains("; CPU user "), "{total}");
    let v = read_json(&json);
    check_envelope(&v, "pattern-sender", &tx_args, 0);
    assert!(v["cpu_user_s"].is_number(), "{v}");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 2, "{v}");
    for f in flows {
        for k in ["cpu_user_s", "cpu_sys_s", "cpu_utilisation"] {
            assert!(f[k].is_number(), "flow {}: {k}: {f}", f["flow"]);
        }
    }
}

/// `--quiet` prints one verdict line when the run passes, as its help says ("only errors and
/// the verdict"); the receiver's and the sender's name the same bytes and CRC-32. Before: a
/// passing `--quiet` run printed nothing.
#[test]
fn quiet_prints_the_verdict_of_a_pass() {
    let Some(p) = pair("quiet_prints_the_verdict_of_a_pass") else {
        return;
    };
    let rx_args = [
        "-l",
        "--plain",
        "-s",
        ADDR_A_V4,
        "-p",
        PORT,
        "-v",
        "7",
        "--timeout",
        "10",
        "--quiet",
    ];
    let mut rx = spawn(ns_cmd(&p.a, &rx_args));
    common::wait_listening(rx.id(), 5202);
    let tx = ns_cmd(
        &p.b,
        &[
            "--send-pattern",
            "1M",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "5",
            "--quiet",
        ],
    )
    .output()
    .expect("run sender");
    let mut rx_err = String::new();
    rx.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut rx_err)
        .expect("read stderr");
    let rx_status = rx.wait().expect("wait receiver");
    let tx_err = text(&tx.stderr);
    assert_eq!(tx.status.code(), Some(0), "{tx_err}");
    assert_eq!(rx_status.code(), Some(0), "{rx_err}");
    let crc = ncdevmem::validate::Pattern::new(7)
        .expect("period 7")
        .crc32(1 << 20);
    for (err, mode) in [(&rx_err, "plain TCP"), (&tx_err, "pattern-sender")] {
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{mode}: {err}");
        let want = format!("ncdevmem-rs: pass ({mode}): 1048576 bytes, ");
        assert!(lines[0].starts_with(&want), "{err}");
        assert!(
            lines[0].ends_with(&format!(" Gbit/s, crc32 0x{crc:08x}")),
            "{err}"
        );
    }
    let json = tmp_json("quiet-report");
    let out = ns_cmd(
        &p.a,
        &[
            "--report",
            "-f",
            VETH_A,
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .output()
    .expect("run report");
    read_json(&json);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "ncdevmem-rs: pass (report)\n");
}

/// `--json -` writes the object as one line on stdout; what would go to stdout (the probe's
/// capability report) goes to stderr; a receiver whose payload goes to stdout refuses it.
/// Before: `--json -` was refused as "a path that does not start with '-'".
#[test]
fn json_dash_writes_the_summary_to_stdout() {
    let Some(p) = pair("json_dash_writes_the_summary_to_stdout") else {
        return;
    };
    let args = ["-f", VETH_A, "--json", "-"];
    let out = ns_cmd(&p.a, &args).output().expect("run probe");
    let code = out.status.code().expect("exit code");
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is the object");
    check_envelope(&v, "probe", &args, code);
    assert!(
        text(&out.stderr).contains(&format!("capability report for {VETH_A}")),
        "the report goes to stderr: {}",
        text(&out.stderr)
    );

    let rx_args = [
        "-l",
        "--plain",
        "-s",
        ADDR_A_V4,
        "-p",
        PORT,
        "-v",
        "7",
        "--timeout",
        "10",
        "--json",
        "-",
    ];
    let (rx, tx) = transfer(
        &p,
        &rx_args,
        &[
            "--send-pattern",
            "64K",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
        ],
    );
    assert_eq!(tx.status.code(), Some(0), "{}", text(&tx.stderr));
    assert_eq!(rx.status.code(), Some(0), "{}", text(&rx.stderr));
    let stdout = text(&rx.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is the object");
    check_envelope(&v, "plain TCP", &rx_args, 0);
    assert_eq!(v["bytes"], 65536, "{v}");
    assert!(
        text(&rx.stderr).contains("rx summary (plain TCP)"),
        "{}",
        text(&rx.stderr)
    );

    let out = ns_cmd(
        &p.a,
        &["-l", "--plain", "-s", ADDR_A_V4, "-p", PORT, "--json", "-"],
    )
    .output()
    .expect("run receiver");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("ncdevmem-rs: --json -: a receiver without -v N"),
        "{}",
        text(&out.stderr)
    );
}
