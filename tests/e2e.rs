//! End-to-end tests of the `ncdevmem-rs` binary on the real kernel: a plain-TCP receiver and the
//! built-in pattern sender in two network namespaces joined by a veth pair (created here and
//! always removed), plus the skip/timeout/signal behaviour of the devmem modes on a host without
//! udmabuf or a devmem NIC. Needs root; prints `skip: <test>: <reason>` otherwise.

mod common;

use common::bin::{ns_cmd, pair, read_json, spawn, text, tmp_json, BIN};

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{NetNsPair, ADDR_A_V4, ADDR_A_V6, VETH_A};

const PORT: &str = "5201";

/// Runs receiver (side A) and sender (side B); returns both outputs.
fn transfer(p: &NetNsPair, addr: &str, rx_extra: &[&str], tx_extra: &[&str]) -> (Output, Output) {
    let mut rx_args = vec!["-l", "--plain", "-s", addr, "-p", PORT, "--timeout", "20"];
    rx_args.extend_from_slice(rx_extra);
    let rx = spawn(ns_cmd(&p.a, &rx_args));
    let mut tx_args = vec!["-s", addr, "-p", PORT, "--timeout", "10"];
    tx_args.extend_from_slice(tx_extra);
    let tx = ns_cmd(&p.b, &tx_args).output().expect("run sender");
    let rx = rx.wait_with_output().expect("wait receiver");
    (rx, tx)
}

#[test]
fn plain_256mib_validated_across_veth() {
    let Some(p) = pair("plain_256mib_validated_across_veth") else {
        return;
    };
    let (rx_json, tx_json) = (tmp_json("rx256"), tmp_json("tx256"));
    let (rx, tx) = transfer(
        &p,
        ADDR_A_V4,
        &["-v", "7", "--json", rx_json.to_str().unwrap()],
        &[
            "--send-pattern",
            "256M",
            "-v",
            "7",
            "--json",
            tx_json.to_str().unwrap(),
        ],
    );
    assert_eq!(tx.status.code(), Some(0), "sender: {}", text(&tx.stderr));
    assert_eq!(rx.status.code(), Some(0), "receiver: {}", text(&rx.stderr));
    let (r, t) = (read_json(&rx_json), read_json(&tx_json));
    let sent = 256u64 << 20;
    assert_eq!(t["bytes"], sent);
    assert_eq!(r["bytes"], sent, "receiver summary: {r}");
    assert_eq!(r["validated_bytes"], sent);
    assert_eq!(r["mismatches"], 0);
    assert!(
        text(&rx.stderr).contains("268435456"),
        "{}",
        text(&rx.stderr)
    );
}

#[test]
fn plain_ipv6_transfer_validated() {
    let Some(p) = pair("plain_ipv6_transfer_validated") else {
        return;
    };
    let (rx, tx) = transfer(
        &p,
        ADDR_A_V6,
        &["-v", "256"],
        &["--send-pattern", "3M", "-v", "256", "--write-size", "1000"],
    );
    assert_eq!(tx.status.code(), Some(0), "sender: {}", text(&tx.stderr));
    assert_eq!(rx.status.code(), Some(0), "receiver: {}", text(&rx.stderr));
    assert!(
        text(&tx.stderr).contains("3146 writes"),
        "{}",
        text(&tx.stderr)
    );
}

#[test]
fn one_flipped_byte_fails_naming_its_offset() {
    let Some(p) = pair("one_flipped_byte_fails_naming_its_offset") else {
        return;
    };
    let offset: u64 = rand::random_range(0..4u64 << 20);
    eprintln!("corrupting stream offset {offset}");
    let off = offset.to_string();
    let (rx, tx) = transfer(
        &p,
        ADDR_A_V4,
        &["-v", "7"],
        &["--send-pattern", "4M", "-v", "7", "--corrupt-offset", &off],
    );
    assert_eq!(tx.status.code(), Some(0), "sender: {}", text(&tx.stderr));
    assert_eq!(rx.status.code(), Some(1), "receiver: {}", text(&rx.stderr));
    let err = text(&rx.stderr);
    assert!(
        err.contains(&format!("offset {offset}")),
        "receiver must name stream offset {offset}: {err}"
    );
}

#[test]
fn plain_receive_without_validation_writes_payload_to_stdout() {
    let Some(p) = pair("plain_receive_without_validation_writes_payload_to_stdout") else {
        return;
    };
    let (rx, tx) = transfer(&p, ADDR_A_V4, &[], &["--send-pattern", "100000", "-v", "9"]);
    assert_eq!(tx.status.code(), Some(0), "sender: {}", text(&tx.stderr));
    assert_eq!(rx.status.code(), Some(0), "receiver: {}", text(&rx.stderr));
    let expected: Vec<u8> = (0..100_000u32)
        .map(|i| match i % 9 {
            8 => b'\n',
            r => (r + 1) as u8,
        })
        .collect();
    assert_eq!(rx.stdout.len(), expected.len());
    assert!(rx.stdout == expected, "stdout differs from the pattern");
}

/// A receiver whose stdout reader stopped reading (`| less`, a stalled pipe) is blocked in
/// write(2); a stop signal interrupts it and the run unwinds at once. Before, std's stdout
/// buffer and `write_all` retried the `EINTR`, so SIGTERM/SIGINT went unanswered until the
/// reader went away (and a devmem server kept the NIC configured all that time).
#[test]
fn a_stop_signal_ends_a_receiver_blocked_on_a_full_stdout() {
    let Some(p) = pair("a_stop_signal_ends_a_receiver_blocked_on_a_full_stdout") else {
        return;
    };
    let mut rx = spawn(ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "--timeout",
            "20",
        ],
    ));
    // stdout is a pipe nobody reads: 64 KiB of pipe and the 1 MiB output buffer fill up.
    let stdout = rx.stdout.take().expect("stdout");
    let tx = spawn(ns_cmd(
        &p.b,
        &[
            "--send-pattern",
            "64M",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "20",
        ],
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let pid = nix::unistd::Pid::from_raw(rx.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = rx.try_wait().expect("try_wait") {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(3) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdout);
    let out = rx.wait_with_output().expect("wait receiver");
    let _ = tx.wait_with_output();
    let err = text(&out.stderr);
    assert!(status.is_some(), "still blocked 3 s after SIGTERM: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted by signal 15 (SIGTERM)"), "{err}");
}

#[test]
fn no_client_times_out_within_bound() {
    let Some(p) = pair("no_client_times_out_within_bound") else {
        return;
    };
    let start = Instant::now();
    let out = ns_cmd(
        &p.a,
        &[
            "-l",
            "--plain",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "2",
        ],
    )
    .output()
    .expect("run receiver");
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("timed out"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(3500),
        "took {took:?}"
    );
}

/// SIGTERM, SIGINT, SIGHUP (a closed terminal or ssh session), SIGQUIT (Ctrl-\\), SIGUSR1 and
/// SIGUSR2 are all stop signals: the run unwinds and exits 1 naming the signal, never dies of
/// it (a SIGHUP, and later a SIGQUIT or SIGUSR1, used to kill the process before any NIC
/// change could be undone). A SIGHUP ignored at start (`nohup`) stays ignored.
#[test]
fn sigterm_while_waiting_unwinds_and_fails() {
    let Some(p) = pair("sigterm_while_waiting_unwinds_and_fails") else {
        return;
    };
    use nix::sys::signal::Signal;
    for (sig, name) in [
        (Signal::SIGTERM, "interrupted by signal 15 (SIGTERM)"),
        (Signal::SIGINT, "interrupted by signal 2 (SIGINT)"),
        (Signal::SIGHUP, "interrupted by signal 1 (SIGHUP)"),
        (Signal::SIGQUIT, "interrupted by signal 3 (SIGQUIT)"),
        (Signal::SIGUSR1, "interrupted by signal 10 (SIGUSR1)"),
        (Signal::SIGUSR2, "interrupted by signal 12 (SIGUSR2)"),
    ] {
        let mut c = ns_cmd(
            &p.a,
            &["-l", "--plain", "-s", ADDR_A_V4, "-p", PORT, "-v", "7"],
        );
        // The child starts with every signal's default action, whatever this test inherited:
        // run under `nohup` (a CI runner, a detached shell), SIGHUP would arrive ignored, stay
        // ignored by design (below), and the SIGHUP round would wait for ever.
        // SAFETY: between fork and exec only async-signal-safe calls: signal(2) is one.
        unsafe {
            c.pre_exec(|| {
                nix::sys::signal::signal(Signal::SIGHUP, nix::sys::signal::SigHandler::SigDfl)
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let child = spawn(c);
        // Listening means the stop-signal handlers are in place (they are installed first).
        common::wait_listening(child.id(), PORT.parse().unwrap());
        // `ip netns exec` execs the binary, so the child pid is ncdevmem-rs itself.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig)
            .expect("send the signal");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(1), "{sig}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(name),
            "{sig}: {}",
            text(&out.stderr)
        );
    }
    // With SIGHUP ignored when exec'd (what nohup does; the shell's `trap '' HUP` here, so no
    // nohup binary is needed) a hangup does not stop the run.
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        p.a.name(),
        "sh",
        "-c",
        "trap '' HUP; exec \"$0\" \"$@\"",
        BIN,
    ])
    .args(["-l", "--plain", "-s", ADDR_A_V4, "-p", PORT, "-v", "7"]);
    let child = spawn(c);
    common::wait_listening(child.id(), PORT.parse().unwrap());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGHUP).expect("send SIGHUP");
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("interrupted by signal 15 (SIGTERM)"),
        "{}",
        text(&out.stderr)
    );
}

/// One command line of each devmem mode on veth: the server, the server with `-b 16384` and
/// `-n` over IPv6, the TX client, the probe.
const DEVMEM_MODES: [&[&str]; 4] = [
    &["-l", "-f", VETH_A, "-s", ADDR_A_V4, "-p", PORT, "-v", "7"],
    &[
        "-l", "-f", VETH_A, "-s", ADDR_A_V6, "-p", PORT, "-v", "7", "-b", "16384", "-n",
    ],
    &["-f", VETH_A, "-s", ADDR_A_V4, "-p", PORT],
    &["-f", VETH_A],
];

/// This kernel's bind-rx has no rx-page-size attribute (6.18 here).
fn no_rx_page_size() -> bool {
    ncdevmem::netlink::netdev::policy::bind_rx_policy()
        .is_ok_and(|p| !ncdevmem::netlink::netdev::policy::has_rx_page_size(&p))
}

/// Without udmabuf (this machine's kernel has no CONFIG_UDMABUF) every devmem mode is a skip
/// (exit 4) with one line naming what is missing, before anything is changed. With it (the VM
/// suite's guest) each is still a skip on veth, for another reason.
#[test]
fn devmem_modes_skip_without_udmabuf() {
    let Some(p) = pair("devmem_modes_skip_without_udmabuf") else {
        return;
    };
    let have_udmabuf = std::path::Path::new("/dev/udmabuf").exists();
    for args in DEVMEM_MODES {
        let out = ns_cmd(&p.a, args).output().expect("run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        if have_udmabuf {
            // Past the udmabuf preflight (the VM suite's guest): what is missing now is the
            // device's support (or, for -b, free hugepages), and the skip says that instead.
            assert!(err.contains("skip:"), "{args:?}: {err}");
            assert!(!err.contains("/dev/udmabuf"), "{args:?}: {err}");
        } else {
            assert!(err.contains("/dev/udmabuf"), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            // Every skip is named at once: `-b 16384` on a kernel whose bind-rx has no
            // rx-page-size (this machine's) is named beside udmabuf.
            if args.contains(&"-b") && no_rx_page_size() {
                assert!(
                    err.contains("and: -b 16384: this kernel's bind-rx has no rx-page-size"),
                    "{args:?}: {err}"
                );
            }
        }
    }
}

/// `--memory dma-heap` without `/dev/dma_heap` (this machine's kernel has no
/// CONFIG_DMABUF_HEAPS): the devmem server, the TX client and the probe are each a skip (exit
/// 4) with one line giving the kernel's answer (ENOENT), before anything is changed; the probe
/// names veth's missing queue management ops first, then the heaps. With the system heap (the
/// VM suite's guest) each is still a skip on veth, for another reason.
#[test]
fn devmem_modes_skip_without_dma_heaps() {
    let Some(p) = pair("devmem_modes_skip_without_dma_heaps") else {
        return;
    };
    let have_heap = std::path::Path::new("/dev/dma_heap/system").exists();
    let heap = ["--memory", "dma-heap"];
    for args in DEVMEM_MODES {
        let out = ns_cmd(&p.a, &[args, &heap[..]].concat())
            .output()
            .expect("run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        if have_heap {
            assert!(err.contains("skip:"), "{args:?}: {err}");
            assert!(!err.contains("no dma-buf heaps"), "{args:?}: {err}");
        } else {
            let heaps = "no dma-buf heaps: cannot open /dev/dma_heap/system (ENOENT (No such \
                         file or directory)); /dev/dma_heap does not exist: the kernel needs \
                         CONFIG_DMABUF_HEAPS (and CONFIG_DMABUF_HEAPS_SYSTEM for the system \
                         heap)\n";
            if args == ["-f", VETH_A] {
                let driver = "ncdevmem-rs: skip: veth-a: the driver has no queue management ops";
                assert!(err.starts_with(driver), "{args:?}: {err}");
                assert!(err.ends_with(&format!("; and: {heaps}")), "{args:?}: {err}");
                assert_eq!(err.lines().count(), 1, "one line: {err}");
            } else if args.contains(&"-b") && no_rx_page_size() {
                // Every skip at once: the heaps, and the rx-page-size this kernel lacks.
                let heaps = heaps.trim_end();
                let both = format!(
                    "ncdevmem-rs: skip: {heaps}; and: -b 16384: this kernel's bind-rx has no \
                     rx-page-size attribute"
                );
                assert!(err.starts_with(&both), "{args:?}: {err}");
                assert_eq!(err.lines().count(), 1, "one line: {err}");
            } else {
                assert_eq!(err, format!("ncdevmem-rs: skip: {heaps}"), "{args:?}");
            }
        }
    }
}

/// `-a` (bind-rx autorelease, unmerged series v7–v10) against the running kernel's bind-rx
/// policy. Without the attribute (6.18 here, 7.3 in the VM suite): `-a 1` is a skip naming the
/// policy first (then every other skip of the run: udmabuf here), before anything is changed;
/// `-a 0` (what the series' devmem.py passes on every run) says it binds without the attribute and
/// goes on to the same skip as a run without `-a` (udmabuf here, the device's support on veth in
/// the VM), also with `-U 1` or `-U 2`. With the attribute, `-a 1` is no skip of its own.
#[test]
fn bind_autorelease_follows_the_kernel_policy() {
    let Some(p) = pair("bind_autorelease_follows_the_kernel_policy") else {
        return;
    };
    let policy = ncdevmem::netlink::netdev::policy::bind_rx_policy().expect("bind-rx policy");
    let attr = ncdevmem::netlink::netdev::policy::autorelease_attr(&policy);
    let kinds: Vec<u16> = policy.iter().map(|a| a.kind).collect();
    let server = ["-l", "-f", VETH_A, "-s", ADDR_A_V4, "-p", PORT, "-v", "7"];
    let baseline = ns_cmd(&p.a, &server).output().expect("run");
    let base_err = text(&baseline.stderr);
    assert_eq!(baseline.status.code(), Some(4), "{base_err}");

    let on = ns_cmd(&p.a, &[&server[..], &["-a", "1"]].concat())
        .output()
        .expect("run");
    let err = text(&on.stderr);
    assert_eq!(on.status.code(), Some(4), "{err}");
    match attr {
        // First, and one line with every other skip of the run after it (here: udmabuf).
        None => {
            let first = format!(
                "ncdevmem-rs: skip: -a 1: this kernel's bind-rx has no autorelease attribute \
                 (policy attributes {kinds:?}, none of them the u8 NETDEV_A_DMABUF_AUTORELEASE); \
                 it needs the unmerged series \"net: devmem: improve cpu cost of RX token \
                 management\" v7-v10"
            );
            assert!(err.starts_with(&first), "{err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            if !std::path::Path::new("/dev/udmabuf").exists() {
                assert!(err.contains("; and: no udmabuf"), "{err}");
            }
        }
        Some(_) => assert!(!err.contains("-a 1:"), "{err}"),
    }

    for extra in [
        &["-a", "0"][..],
        &["-a", "0", "-U", "1"],
        &["-a", "0", "-U", "2"],
    ] {
        let out = ns_cmd(&p.a, &[&server[..], extra].concat())
            .output()
            .expect("run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{extra:?}: {err}");
        if attr.is_none() {
            let (first, rest) = err.split_once('\n').unwrap_or_default();
            assert_eq!(
                first,
                format!(
                    "ncdevmem-rs: -a 0: this kernel's bind-rx has no autorelease attribute \
                     (policy attributes {kinds:?}); binding without it (the kernel's only mode \
                     releases tokens still held at close)"
                ),
                "{extra:?}"
            );
            assert_eq!(rest, base_err, "{extra:?}: then the run's own skip");
        }
    }
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["-l", "-f", "eth0", "-s", "::1", "-p", "0"][..], "-p"),
        (
            &[
                "-l",
                "-f",
                "eth0",
                "-s",
                "::1",
                "-p",
                "5201",
                "-b",
                "4294971392",
            ][..],
            "-b",
        ),
        (
            &["-l", "-f", "eth0", "-s", "::1", "-p", "5201", "-v", "1"][..],
            "-v",
        ),
        // A multicast address is no TCP endpoint (the receiver waited forever).
        (
            &["-l", "--plain", "-s", "224.0.0.1", "-p", "5201", "-v", "7"][..],
            "-s",
        ),
        // A forgotten value is not taken from the next option (this wrote a file named
        // --verify-restore).
        (&["-f", "lo", "--json", "--verify-restore"][..], "--json"),
    ] {
        let out = Command::new(BIN).args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with(&format!("ncdevmem-rs: {flag}:")), "{err}");
    }
    assert!(
        !std::path::Path::new("--verify-restore").exists(),
        "no file named after an option"
    );
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--send-pattern"));
}

/// Several devmem TX flows split the one dma-buf into windows of at least a page each: a
/// dma-buf too small for them is a usage error before anything is allocated or bound.
#[test]
fn devmem_tx_flows_refuse_a_dmabuf_too_small_to_split() {
    let out = Command::new(BIN)
        .args([
            "-f",
            "lo",
            "-s",
            "::1",
            "-p",
            "5201",
            "--send-pattern",
            "1M",
            "--seed",
            "1",
            "--flows",
            "4",
            "--dmabuf-size",
            "8K",
        ])
        .output()
        .expect("run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("8192 bytes split over 4 flows"), "{err}");
    assert!(err.contains("--dmabuf-size at least 16384"), "{err}");
}

/// Findings of the adversarial pass (shared/cases style): each bad input gets its right answer.
#[test]
fn hostile_values_exit_2_without_panicking() {
    use std::os::unix::ffi::OsStrExt;
    let cases: [&[&std::ffi::OsStr]; 4] = [
        &[
            "-l",
            "--plain",
            "-s",
            "::1",
            "-p",
            "5201",
            "--timeout",
            "9223372036854775807",
        ]
        .map(std::ffi::OsStr::new),
        &[
            "--send-pattern",
            "1K",
            "--write-size",
            "64G",
            "-s",
            "::1",
            "-p",
            "5201",
            "-v",
            "7",
        ]
        .map(std::ffi::OsStr::new),
        &[
            std::ffi::OsStr::new("-f"),
            std::ffi::OsStr::from_bytes(b"\xff"),
        ],
        &[
            "--send-pattern",
            "1K",
            "-s",
            "::1",
            "-p",
            "5201",
            "-v",
            "7",
            "--corrupt-offset",
            "5000",
        ]
        .map(std::ffi::OsStr::new),
    ];
    for args in cases {
        let out = Command::new(BIN).args(args).output().expect("run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = Command::new(BIN)
        .args([
            "-l",
            "--plain",
            "-s",
            "::1",
            "-p",
            "5201",
            "-c",
            "127.0.0.1",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = Command::new(BIN)
        .args([
            "-l",
            "--plain",
            "-s",
            "::1",
            "-p",
            "5201",
            "--json",
            "/dev/null",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a regular file"));
}

/// `--json` is a verdict for every run that got past its command line: a receiver that never
/// got a connection, a devmem server that is a skip and a mode with a bad interface all write
/// `{"mode", "ok": false, "verdict", "error"}` (before, only the sender and the probe did); and
/// a path no file can be created at is exit 2 before the run, not exit 1 after it (a probe that
/// was a skip ended with exit 1 "create(/proc/...): ENOENT").
#[test]
fn json_is_written_for_runs_that_end_early_and_refused_when_unwritable() {
    let Some(p) = pair("json_is_written_for_runs_that_end_early_and_refused_when_unwritable")
    else {
        return;
    };
    let json = tmp_json("early");
    let j = json.to_str().expect("utf-8 temp path");
    for (args, code, mode, verdict, error) in [
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
            1,
            "plain TCP",
            "fail",
            "timed out: accept on",
        ),
        (
            vec!["-l", "-f", VETH_A, "-s", ADDR_A_V4, "-p", PORT],
            4,
            "devmem",
            "skip",
            "skip: ",
        ),
        (
            vec!["-l", "-f", "nosuch0", "-s", ADDR_A_V4, "-p", PORT],
            2,
            "devmem",
            "fail",
            "-f: no such interface 'nosuch0'",
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
            1,
            "pattern-sender",
            "fail",
            "timed out: connect to",
        ),
    ] {
        let mut args = args.clone();
        args.extend(["--json", j]);
        let out = ns_cmd(&p.a, &args).output().expect("run");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let v = read_json(&json);
        assert_eq!(v["mode"], mode, "{v}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["verdict"], verdict, "{v}");
        assert!(v["error"].as_str().unwrap().starts_with(error), "{v}");
    }
    for path in ["/proc/ncdevmem.json", "/sys/ncdevmem.json"] {
        let out = ns_cmd(&p.a, &["-f", "lo", "--quiet", "--json", path])
            .output()
            .expect("run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {err}");
        assert!(
            err.starts_with("ncdevmem-rs: --json: cannot create a file next to"),
            "{err}"
        );
    }
}

/// A stdout whose reader already went away (`| head -1`, `| true`) made the report and the
/// probe panic in `print!` ("failed printing to stdout: Broken pipe", exit 101, backtrace).
/// The report now fails with exit 1 naming write(stdout); the probe keeps its verdict.
#[test]
fn a_closed_stdout_pipe_is_no_panic() {
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    drop(read_end);
    // stdout: the pipe without a reader, or /dev/full.
    let run = |args: &[&str], full: bool| {
        let stdout = if full {
            let f = std::fs::File::options().write(true).open("/dev/full");
            Stdio::from(f.expect("/dev/full"))
        } else {
            Stdio::from(write_end.try_clone().expect("dup the pipe's write end"))
        };
        let out = Command::new(BIN).args(args).stdout(stdout).output();
        let out = out.expect("run");
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        (out.status.code(), err)
    };
    let (code, err) = run(&["-f", "lo"], false);
    assert!(
        matches!(code, Some(1) | Some(4)),
        "the probe's own verdict: {err}"
    );
    // The report, and --help and --version (which exited 0), fail naming write(stdout).
    for args in [&["--report", "-f", "lo"][..], &["--help"], &["--version"]] {
        for (full, why) in [
            (false, "EPIPE (Broken pipe)"),
            (true, "ENOSPC (No space left on device)"),
        ] {
            let (code, err) = run(args, full);
            assert_eq!(code, Some(1), "{args:?}: {err}");
            assert!(
                err.contains(&format!("write(stdout): {why}")),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn closed_stderr_does_not_panic() {
    let Some(p) = pair("closed_stderr_does_not_panic") else {
        return;
    };
    let mut rx = ns_cmd(
        &p.a,
        &[
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
        ],
    );
    let mut rx = rx
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(rx.stderr.take()); // the log reader goes away: every log line meets EPIPE
    let mut tx = ns_cmd(
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
        ],
    );
    let mut tx = tx
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(tx.stderr.take());
    assert_eq!(tx.wait().expect("wait").code(), Some(0));
    assert_eq!(rx.wait().expect("wait").code(), Some(0));
}

#[test]
fn stopped_or_silent_senders_are_failures_not_short_successes() {
    let Some(p) = pair("stopped_or_silent_senders_are_failures_not_short_successes") else {
        return;
    };
    // A peer that connects and closes at once: a -v receiver has validated nothing.
    let rx = spawn(ns_cmd(
        &p.a,
        &[
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
        ],
    ));
    // (`--send-pattern 0` did that once; it is now refused without --duration, so the test
    // connects from B itself.)
    {
        let _in_b = p.b.enter().expect("enter namespace B");
        let to = std::net::SocketAddr::new(ADDR_A_V4.parse().unwrap(), PORT.parse().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                Ok(s) => break drop(s),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("connect to the receiver at {to}: {e}"),
            }
        }
    }
    let out = rx.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("without sending any data"),
        "{}",
        text(&out.stderr)
    );

    // A sender killed mid-stream (FIN, no RST): only --expect-bytes can tell.
    for sig in [
        nix::sys::signal::Signal::SIGKILL,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let rx = spawn(ns_cmd(
            &p.a,
            &[
                "-l",
                "--plain",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "-v",
                "7",
                "--expect-bytes",
                "100G",
                "--timeout",
                "10",
            ],
        ));
        let tx = spawn(ns_cmd(
            &p.b,
            &[
                "--send-pattern",
                "100G",
                "-s",
                ADDR_A_V4,
                "-p",
                PORT,
                "-v",
                "7",
            ],
        ));
        std::thread::sleep(Duration::from_millis(700));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(tx.id() as i32), sig).expect("kill");
        let tx = tx.wait_with_output().expect("wait sender");
        assert_ne!(tx.status.code(), Some(0), "{sig}");
        let out = rx.wait_with_output().expect("wait receiver");
        assert_eq!(out.status.code(), Some(1), "{sig}: {}", text(&out.stderr));
    }
}

#[test]
fn sender_refuses_to_connect_to_itself() {
    let Some(p) = pair("sender_refuses_to_connect_to_itself") else {
        return;
    };
    let out = ns_cmd(
        &p.a,
        &[
            "--send-pattern",
            "1M",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "-c",
            ADDR_A_V4,
            "--timeout",
            "2",
        ],
    )
    .output()
    .expect("run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("connected to itself") || err.contains("refused"),
        "{err}"
    );
}

/// The README's demo script (small stream): exits 0 after a validated transfer and leaves no
/// namespace behind.
#[test]
fn demo_script_succeeds_and_cleans_up() {
    if let Some(reason) = common::skip_reason() {
        common::print_skip("demo_script_succeeds_and_cleans_up", &reason);
        return;
    }
    let demo_namespaces = || {
        let out = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns");
        text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("ncdevmem-demo-"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo-loopback.sh");
    let bash = Command::new("bash").arg("-c").arg("true").status();
    if !std::path::Path::new(script).exists() || !bash.is_ok_and(|s| s.success()) {
        // The VM suite runs this binary in a guest without the checkout or bash.
        common::print_skip(
            "demo_script_succeeds_and_cleans_up",
            "the checkout's scripts/ or bash is not available here",
        );
        return;
    }
    let before = demo_namespaces();
    let out = Command::new("bash")
        .args([script, BIN, "16M"])
        .output()
        .expect("run demo");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("validated 16777216 bytes (seed ") && err.contains("), 0 mismatched"),
        "{err}"
    );
    // The keyed stream is checked byte by byte, not hashed: both ends say so.
    assert_eq!(
        err.matches("crc32 none (every byte was the keyed stream's, none hashed)")
            .count(),
        2,
        "{err}"
    );
    assert_eq!(demo_namespaces(), before, "the demo left namespaces behind");
}

/// `--quiet` silences the capability report (probe and `--report`), and a probe that ends
/// before its checks (here: no udmabuf, a skip) still writes its verdict and reason to
/// `--json` instead of `"probe": null`.
#[test]
fn quiet_probe_prints_no_report_and_its_json_says_why_it_skipped() {
    const T: &str = "quiet_probe_prints_no_report_and_its_json_says_why_it_skipped";
    let Some(p) = pair(T) else {
        return;
    };
    if std::path::Path::new("/dev/udmabuf").exists() {
        common::print_skip(T, "this host has /dev/udmabuf, so the probe does not skip");
        return;
    }
    let json = tmp_json("probe-quiet");
    let out = ns_cmd(
        &p.a,
        &["-f", VETH_A, "--quiet", "--json", json.to_str().unwrap()],
    )
    .output()
    .expect("run probe");
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "--quiet prints no report");
    let j = read_json(&json);
    assert_eq!(j["probe"]["verdict"], "skip", "{j}");
    assert!(
        j["probe"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("/dev/udmabuf")),
        "{j}"
    );
    assert_eq!(j["probe"]["checks"], serde_json::json!([]), "{j}");
    assert_eq!(j["report"]["ifname"], VETH_A, "{j}");

    // Without --quiet the report is printed.
    let out = ns_cmd(&p.a, &["-f", VETH_A]).output().expect("run probe");
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("capability report for {VETH_A}")),
        "{}",
        text(&out.stdout)
    );

    // --report --quiet writes the report to --json only; without --json it is refused.
    let json = tmp_json("report-quiet");
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
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(read_json(&json)["ifname"], VETH_A);
    let out = ns_cmd(&p.a, &["--report", "-f", VETH_A, "--quiet"])
        .output()
        .expect("run report");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A second receiver on the address and port a first one listens on exits 1 at once with
/// EADDRINUSE instead of listening too (with SO_REUSEPORT it did, and took some of the first
/// one's connections); the first receives the whole stream.
#[test]
fn a_second_receiver_on_the_same_port_is_refused_at_once() {
    use std::io::{BufRead, BufReader};
    let Some(p) = pair("a_second_receiver_on_the_same_port_is_refused_at_once") else {
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
    ];
    let mut first = spawn(ns_cmd(&p.a, &rx_args));
    let mut first_err = BufReader::new(first.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        let n = first_err.read_line(&mut line).expect("read stderr");
        assert!(n > 0, "the first receiver ended before listening");
    }
    let t0 = Instant::now();
    let second = ns_cmd(&p.a, &rx_args)
        .output()
        .expect("run second receiver");
    let took = t0.elapsed();
    let err = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("EADDRINUSE"), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}: {err}");

    let tx = ns_cmd(
        &p.b,
        &[
            "--send-pattern",
            "4M",
            "-s",
            ADDR_A_V4,
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "5",
        ],
    )
    .output()
    .expect("run sender");
    assert_eq!(tx.status.code(), Some(0), "sender: {}", text(&tx.stderr));
    let status = first.wait().expect("wait first receiver");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut first_err, &mut rest).expect("read stderr");
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("4194304"), "{rest}");
}

/// On veth, which has no queue management ops, the probe's skip names that first — no
/// configuration can fix it — and then every other blocker in order (on this host also: no
/// udmabuf), on one line, once.
#[test]
fn probe_on_veth_names_the_driver_first_then_every_blocker() {
    let Some(p) = pair("probe_on_veth_names_the_driver_first_then_every_blocker") else {
        return;
    };
    let out = ns_cmd(&p.a, &["-f", VETH_A, "--quiet"])
        .output()
        .expect("run probe");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let want = format!(
        "ncdevmem-rs: skip: {VETH_A}: the driver has no queue management ops (bind-rx answered \
         EOPNOTSUPP"
    );
    assert!(lines[0].starts_with(&want), "{err}");
    if !std::path::Path::new("/dev/udmabuf").exists() {
        assert!(
            lines[0].contains("; and: no udmabuf: cannot open /dev/udmabuf"),
            "{err}"
        );
    }
}
