//! The command line as tables, through the library API only (`ncdevmem::cli::parse`): every
//! accepted flag with its meaning, every bad value with the flag its message names, the mode
//! selection rules, and the exact command lines the kernel's devmem_lib.py / nk_devmem.py give
//! C ncdevmem (`docs/kernel-interface.md#devmempy-command-lines`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ncdevmem::cli::{parse, Command, Config, HostAddr, Mode, Seed, UnbindMode, Verbosity};
use ncdevmem::error::{Error, EXIT_USAGE};

/// x86_64 page size; `-b`, `--rx-buf-len` and `--dmabuf-size` bounds depend on it.
const PAGE: usize = 4096;

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn run(s: &str) -> Config {
    match parse(&argv(s), PAGE) {
        Ok(Command::Run(c)) => c,
        other => panic!("`{s}`: expected Run, got {other:?}"),
    }
}

fn usage_err(s: &str) -> String {
    match parse(&argv(s), PAGE) {
        Err(e @ Error::Usage(_)) => {
            assert_eq!(e.exit_code(), EXIT_USAGE, "`{s}`");
            e.to_string()
        }
        other => panic!("`{s}`: expected a usage error, got {other:?}"),
    }
}

fn addr(text: &str) -> Option<HostAddr> {
    Some(HostAddr {
        text: text.to_string(),
        ip: text.parse::<IpAddr>().unwrap(),
    })
}

/// The config every mode starts from: nothing set.
fn blank(mode: Mode) -> Config {
    Config {
        mode,
        ifname: None,
        server: None,
        client: None,
        port: None,
        validate: None,
        seed: None,
        start_queue: None,
        num_queues: None,
        tx_chunk: None,
        skip_nic_config: false,
        fail_on_linear: false,
        rx_page_size: None,
        autorelease: None,
        bind_autorelease: None,
        unbind: UnbindMode::Normal,
        timeout: None,
        json: None,
        verbosity: Verbosity::Normal,
        progress: None,
        dmabuf_size: None,
        pattern_bytes: None,
        write_size: None,
        corrupt_offset: None,
        expect_bytes: None,
        rcvbuf: None,
        rx_buf_len: None,
        zcrx_nodev: false,
        verify_restore: false,
    }
}

/// `-f eth0`: the probe with defaults.
fn probe() -> Config {
    Config {
        ifname: Some("eth0".into()),
        ..blank(Mode::Probe)
    }
}

/// `-l -f eth0 -s 2001:db8::1 -p 5201`: the server with defaults.
fn server() -> Config {
    Config {
        ifname: Some("eth0".into()),
        server: addr("2001:db8::1"),
        port: Some(5201),
        ..blank(Mode::Server)
    }
}

const SERVER: &str = "-l -f eth0 -s 2001:db8::1 -p 5201";

/// Every accepted flag, with the field it sets. Each row: extra arguments after a base
/// command line, and the edit to the base config that must result.
#[test]
fn every_flag_has_its_meaning() {
    type Edit = fn(&mut Config);
    let rows: &[(&str, &str, Edit)] = &[
        // C ncdevmem's options (on a server unless they need another mode).
        (SERVER, "", |_| {}),
        (SERVER, "-c 2001:db8::2", |c| c.client = addr("2001:db8::2")),
        (SERVER, "-v 7", |c| c.validate = Some(7)),
        (SERVER, "-v 2", |c| c.validate = Some(2)),
        (SERVER, "-v 256", |c| c.validate = Some(256)),
        (SERVER, "-v 0", |_| {}), // 0 = no validation, like absent
        (SERVER, "--seed 42", |c| c.seed = Some(Seed::Value(42))),
        (SERVER, "--seed 0", |c| c.seed = Some(Seed::Value(0))),
        (SERVER, "--seed 18446744073709551615", |c| {
            c.seed = Some(Seed::Value(u64::MAX))
        }),
        (SERVER, "--seed 0xDEADbeef", |c| {
            c.seed = Some(Seed::Value(0xDEAD_BEEF))
        }),
        (SERVER, "-v 0 --seed 7", |c| c.seed = Some(Seed::Value(7))),
        (SERVER, "-t 3 -q 1", |c| {
            c.start_queue = Some(3);
            c.num_queues = Some(1)
        }),
        (SERVER, "-t 0 -q 4096", |c| {
            c.start_queue = Some(0);
            c.num_queues = Some(4096)
        }),
        (SERVER, "-z 3", |c| c.tx_chunk = Some(3)), // accepted and ignored, as in C
        (SERVER, "-n", |c| c.skip_nic_config = true),
        (SERVER, "-L", |c| c.fail_on_linear = true),
        (SERVER, "--fail-on-linear", |c| c.fail_on_linear = true),
        (SERVER, "-b 4096", |c| c.rx_page_size = Some(4096)),
        (SERVER, "-b 16384", |c| c.rx_page_size = Some(16384)),
        (SERVER, "-b 2147483648", |c| c.rx_page_size = Some(1 << 31)),
        (SERVER, "-A 0", |c| c.autorelease = Some(false)),
        (SERVER, "-A 1", |c| c.autorelease = Some(true)),
        (SERVER, "-a 0", |c| c.bind_autorelease = Some(false)),
        (SERVER, "-a 1", |c| c.bind_autorelease = Some(true)),
        (SERVER, "-U 0", |c| c.unbind = UnbindMode::Normal),
        (SERVER, "-U 1", |c| c.unbind = UnbindMode::BeforeRecv),
        (SERVER, "-U 2", |c| c.unbind = UnbindMode::AfterRecv),
        (SERVER, "-a 0 -U 1", |c| {
            c.bind_autorelease = Some(false);
            c.unbind = UnbindMode::BeforeRecv
        }),
        (SERVER, "-p 1", |c| c.port = Some(1)),
        (SERVER, "-p 65535", |c| c.port = Some(65535)),
        (SERVER, "-p 0080", |c| c.port = Some(80)), // decimal, not octal
        // Long options of ncdevmem-rs.
        (SERVER, "--timeout 0.5", |c| {
            c.timeout = Some(Duration::from_millis(500))
        }),
        (SERVER, "--timeout=3", |c| {
            c.timeout = Some(Duration::from_secs(3))
        }),
        (SERVER, "--timeout 0", |_| {}), // 0 = none
        (SERVER, "--json /tmp/out.json", |c| {
            c.json = Some(PathBuf::from("/tmp/out.json"))
        }),
        (SERVER, "-V", |c| c.verbosity = Verbosity::Verbose),
        (SERVER, "--verbose", |c| c.verbosity = Verbosity::Verbose),
        (SERVER, "--quiet", |c| c.verbosity = Verbosity::Quiet),
        (SERVER, "--progress 1.5", |c| {
            c.progress = Some(Duration::from_millis(1500))
        }),
        (SERVER, "--progress 0", |_| {}), // 0 = never
        (SERVER, "--dmabuf-size 64M", |c| {
            c.dmabuf_size = Some(64 << 20)
        }),
        (SERVER, "--dmabuf-size 65536000", |c| {
            c.dmabuf_size = Some(16000 * 4096)
        }),
        (SERVER, "--verify-restore", |c| c.verify_restore = true),
        (SERVER, "--rcvbuf 64K", |c| c.rcvbuf = Some(64 << 10)),
        (SERVER, "--rcvbuf 0", |c| c.rcvbuf = Some(0)),
        (SERVER, "--rcvbuf 4096", |c| c.rcvbuf = Some(4096)),
        (SERVER, "--rcvbuf 1G", |c| c.rcvbuf = Some(1 << 30)),
        // Probe mode.
        ("-f eth0", "", |c| *c = probe()),
        ("-f eth0", "-b 16384", |c| {
            *c = probe();
            c.rx_page_size = Some(16384)
        }),
        ("-f eth0", "-t 2 -q 2", |c| {
            *c = probe();
            c.start_queue = Some(2);
            c.num_queues = Some(2)
        }),
        ("-f eth0", "-n --verify-restore", |c| {
            *c = probe();
            c.skip_nic_config = true;
            c.verify_restore = true
        }),
    ];
    for (base, extra, edit) in rows {
        let line = format!("{base} {extra}");
        let mut want = server();
        edit(&mut want);
        assert_eq!(run(&line), want, "`{line}`");
    }
}

/// The modes that only have long options, each with its own flags.
#[test]
fn new_modes_carry_their_options() {
    let c = run("--send-pattern 1G -s 192.0.2.1 -p 5201 -v 7 --write-size 1448");
    let want = Config {
        server: addr("192.0.2.1"),
        port: Some(5201),
        validate: Some(7),
        pattern_bytes: Some(1 << 30),
        write_size: Some(1448),
        corrupt_offset: None,
        expect_bytes: None,
        ..blank(Mode::PatternSender)
    };
    assert_eq!(c, want);

    // With -f the pattern goes through devmem TX (client mode, pattern instead of stdin).
    let c = run("--send-pattern 0 -s ::1 -p 9 -v 256 -c ::1 -f lo");
    assert_eq!(c.mode, Mode::Client);
    assert_eq!(c.pattern_bytes, Some(0));
    assert_eq!(c.client, addr("::1"));
    assert_eq!(c.ifname.as_deref(), Some("lo"));

    let c = run(
        "-f eth0 -s 2001:db8::2 -p 5201 -z 3 --send-pattern 64M -v 7 --write-size 64K \
         --corrupt-offset 1000 --timeout 0.5 --json tx.json",
    );
    let want = Config {
        ifname: Some("eth0".into()),
        server: addr("2001:db8::2"),
        port: Some(5201),
        validate: Some(7),
        tx_chunk: Some(3),
        pattern_bytes: Some(64 << 20),
        write_size: Some(64 << 10),
        corrupt_offset: Some(1000),
        timeout: Some(Duration::from_millis(500)),
        json: Some(PathBuf::from("tx.json")),
        ..blank(Mode::Client)
    };
    assert_eq!(c, want);

    let c = run("-l --plain -s ::ffff:127.0.0.1 -p 5201 -v 7 --timeout 2");
    let want = Config {
        server: addr("::ffff:127.0.0.1"),
        port: Some(5201),
        validate: Some(7),
        timeout: Some(Duration::from_secs(2)),
        ..blank(Mode::PlainServer)
    };
    assert_eq!(c, want);

    // --seed replaces -v on senders (random too) and receivers.
    let c = run("--send-pattern 1G -s 192.0.2.1 -p 5201 --seed random");
    assert_eq!(
        (c.mode, c.seed, c.validate),
        (Mode::PatternSender, Some(Seed::Random), None)
    );
    let c = run("-f eth0 --send-pattern 1M -s ::1 -p 1 --seed 0x10");
    assert_eq!((c.mode, c.seed), (Mode::Client, Some(Seed::Value(16))));
    let c = run("-l --plain -s ::1 -p 1 --seed 42");
    assert_eq!((c.mode, c.seed), (Mode::PlainServer, Some(Seed::Value(42))));
    let c = run("-l --zcrx --zcrx-nodev -s ::1 -p 1 --seed 42");
    assert_eq!((c.mode, c.seed), (Mode::ZcrxServer, Some(Seed::Value(42))));

    let c = run("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --rx-buf-len 32768");
    assert_eq!(c.mode, Mode::ZcrxServer);
    assert_eq!(c.rx_buf_len, Some(32768));

    let c = run("--report -f eth0");
    assert_eq!(
        c,
        Config {
            ifname: Some("eth0".into()),
            ..blank(Mode::Report)
        }
    );
}

/// Adding `--plain` to a full devmem command line keeps every option and switches the mode.
#[test]
fn plain_accepts_a_devmem_command_line() {
    let devmem = format!("{SERVER} -c 2001:db8::2 -v 7 -t 3 -q 1 -n -L -b 16384 -A 1 -a 1 -U 2");
    let d = run(&devmem);
    let p = run(&format!("{devmem} --plain"));
    assert_eq!(d.mode, Mode::Server);
    assert_eq!(p.mode, Mode::PlainServer);
    assert_eq!(
        Config {
            mode: Mode::Server,
            ..p
        },
        d
    );
}

/// Mode selection: C ncdevmem's rules, plus the long-option modes.
#[test]
fn mode_selection_table() {
    let ok: &[(&str, Mode)] = &[
        ("-f eth0", Mode::Probe),
        ("-f eth0 -b 16384", Mode::Probe),
        ("-f eth0 -p 5201 -v 7 -z 3 -L", Mode::Probe), // C ignores these in probe
        ("-l -f eth0 -s 192.0.2.1 -p 1", Mode::Server),
        ("-f eth0 -l -s 192.0.2.1 -p 1", Mode::Server), // order does not matter
        ("-f eth0 -s 192.0.2.1 -p 1", Mode::Client),
        ("-f eth0 -s 192.0.2.1 -c 192.0.2.2 -p 1", Mode::Client),
        ("-l --plain -s ::1 -p 1", Mode::PlainServer),
        ("-l --plain -f eth0 -s ::1 -p 1", Mode::PlainServer),
        ("--send-pattern 1K -s ::1 -p 1 -v 7", Mode::PatternSender),
        // -f turns the pattern sender into the devmem TX client with the pattern as source.
        ("-f eth0 -s ::1 -p 1 --send-pattern 1K -v 7", Mode::Client),
        (
            "--send-pattern 1M -v 7 -f eth0 -s ::1 -p 1 -z 3 --write-size 4K",
            Mode::Client,
        ),
        ("-l --zcrx -f eth0 -s ::1 -p 1", Mode::ZcrxServer),
        ("--report -f eth0", Mode::Report),
    ];
    for (line, mode) in ok {
        let c = run(line);
        assert_eq!(c.mode, *mode, "`{line}`");
        assert_eq!(
            c.mode.uses_queues(),
            matches!(
                mode,
                Mode::Probe | Mode::Server | Mode::Client | Mode::ZcrxServer
            )
        );
    }

    // (command line, text the usage message must contain)
    let bad: &[(&str, &str)] = &[
        ("", "-f: missing -f argument"),
        ("-l -s ::1 -p 1", "-f: missing -f argument"),
        ("-s ::1 -p 1", "-f: missing -f argument"),
        ("-v 7", "-f: missing -f argument"),
        ("-l -f eth0", "-s: missing -s ADDR"), // C would run the probe here
        ("-l -f eth0 -c ::1 -p 1", "-s: missing -s ADDR"),
        ("-f eth0 -c ::1 -p 1", "-s: missing -s ADDR (client mode"),
        ("-l -f eth0 -s ::1", "-p: missing -p PORT (server mode"),
        ("-f eth0 -s ::1", "-p: missing -p PORT (client mode"),
        ("-f eth0 -t 1", "-t/-q: Both -t and -q are required"),
        ("-f eth0 -q 1", "-t/-q: Both -t and -q are required"),
        (
            "-l -f eth0 -s ::1 -p 1 -t 1",
            "-t/-q: Both -t and -q are required",
        ),
        (
            "-f eth0 -s ::1 -p 1 -q 1",
            "-t/-q: Both -t and -q are required",
        ),
        ("-f eth0 -t 4294967295 -q 2", "-t/-q: queues"),
        ("--plain -s ::1 -p 1", "--plain: plain-TCP receive needs -l"),
        (
            "-f eth0 -s ::1 -p 1 --rcvbuf 64K",
            "--rcvbuf: only applies to receivers (-l)",
        ),
        ("-l --plain -p 1", "-s: missing -s ADDR"),
        ("-l --plain -s ::1", "-p: missing -p PORT"),
        (
            "--send-pattern 1K -s ::1 -p 1",
            "--send-pattern: missing -v N",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 0",
            "--send-pattern: missing -v N",
        ),
        ("--send-pattern 1K -p 1 -v 7", "-s: missing -s ADDR"),
        ("--send-pattern 1K -s ::1 -v 7", "-p: missing -p PORT"),
        (
            "-f eth0 --send-pattern 1K -s ::1 -p 1",
            "--send-pattern: missing -v N",
        ),
        ("-f eth0 --send-pattern 1K -p 1 -v 7", "-s: missing -s ADDR"),
        (
            "-l -f eth0 --send-pattern 1K -s ::1 -p 1 -v 7",
            "--send-pattern: sends to -s/-p",
        ),
        (
            "-f eth0 -s ::1 -p 1 --corrupt-offset 5",
            "--corrupt-offset: only applies to --send-pattern",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 7 --seed 1",
            "--seed: selects the keyed stream instead of the -v N pattern; give one of them",
        ),
        (
            "-l -f eth0 -s ::1 -p 1 -v 7 --seed 1",
            "--seed: selects the keyed stream instead of the -v N pattern",
        ),
        (
            "-f eth0 -s ::1 -p 1 --seed 1",
            "--seed: only applies to --send-pattern and to receivers (-l)",
        ),
        (
            "-f eth0 --seed 1",
            "--seed: only applies to --send-pattern and to receivers (-l)",
        ),
        (
            "-l -f eth0 -s ::1 -p 1 --seed random",
            "--seed random: only a sender draws a seed",
        ),
        (
            "-l --send-pattern 1K -s ::1 -p 1 -v 7",
            "--send-pattern: sends to -s/-p",
        ),
        (
            "-l --plain --send-pattern 1K -s ::1 -p 1 -v 7",
            "give at most one",
        ),
        ("-l --plain --zcrx -f eth0 -s ::1 -p 1", "give at most one"),
        (
            "--zcrx -f eth0 -s ::1 -p 1",
            "--zcrx: zero-copy receive needs -l",
        ),
        ("-l --zcrx -s ::1 -p 1", "-f: missing -f argument"),
        ("--report", "-f: missing -f argument"),
        (
            "--report -f eth0 -l",
            "--report: the capability report takes only -f",
        ),
        (
            "--report -f eth0 -s ::1",
            "--report: the capability report takes only -f",
        ),
        (
            "-f eth0 -s ::1 -p 1 --write-size 1",
            "--write-size: only applies to --send-pattern",
        ),
        (
            "-l -f eth0 -s ::1 -p 1 --rx-buf-len 4096",
            "--rx-buf-len: only applies to --zcrx",
        ),
        (
            "-f eth0 -s ::1 -p 1 --verify-restore",
            "--verify-restore: only applies",
        ),
        (
            "-l -f eth0 -s ::1 -p 1 -n --verify-restore",
            "--verify-restore: -n skips",
        ),
        (
            "-f eth0 -V --quiet",
            "-V/--verbose and --quiet exclude each other",
        ),
    ];
    for (line, msg) in bad {
        let m = usage_err(line);
        assert!(m.contains(msg), "`{line}`: {m}");
    }
}

/// Every bad value is a usage error (exit 2) whose message starts with the flag and shows the
/// value and the accepted range.
#[test]
fn every_bad_value_names_its_flag() {
    // (argument(s) added to a valid server line, flag the message must start with, expected
    // range text it must contain)
    let rows: &[(&str, &str, &str)] = &[
        ("-p x", "-p", "(expected 1..=65535)"),
        ("-p 0", "-p", "(expected 1..=65535)"),
        ("-p 65536", "-p", "(expected 1..=65535)"),
        ("-p 7x", "-p", "(expected 1..=65535)"),
        ("-p -1", "-p", "(expected 1..=65535)"),
        ("-p +80", "-p", "(expected 1..=65535)"),
        ("-p 0x50", "-p", "(expected 1..=65535)"),
        ("-p 99999999999999999999999", "-p", "(expected 1..=65535)"),
        ("-v 1", "-v", "(expected 0 or 2..=256)"),
        ("-v 257", "-v", "(expected 0 or 2..=256)"),
        ("-v 7x", "-v", "(expected 0 or 2..=256)"),
        ("-v -7", "-v", "(expected 0 or 2..=256)"),
        ("-t -1 -q 1", "-t", "(expected 0..=4294967295)"),
        ("-t 4294967296 -q 1", "-t", "(expected 0..=4294967295)"),
        ("-t x -q 1", "-t", "(expected 0..=4294967295)"),
        ("-t 1 -q -3", "-q", "(expected 1..=4096)"),
        ("-t 1 -q 0", "-q", "(expected 1..=4096)"),
        ("-t 1 -q 1.5", "-q", "(expected 1..=4096)"),
        ("-t 0 -q 4097", "-q", "(expected 1..=4096)"),
        ("-z 0", "-z", "(expected 1..=4294967295 bytes)"),
        ("-z -1", "-z", "(expected 1..=4294967295 bytes)"),
        ("-z 4294967296", "-z", "(expected 1..=4294967295 bytes)"),
        ("-b 0", "-b", "a power of two in 4096..=2147483648 bytes"),
        ("-b 2048", "-b", "a power of two in 4096..=2147483648 bytes"),
        (
            "-b 12288",
            "-b",
            "a power of two in 4096..=2147483648 bytes",
        ),
        (
            "-b 4294967296",
            "-b",
            "a power of two in 4096..=2147483648 bytes",
        ),
        // 2^32 + 4096: must be refused, not truncated to 4096.
        (
            "-b 4294971392",
            "-b",
            "a power of two in 4096..=2147483648 bytes",
        ),
        ("-b 16K", "-b", "a power of two"), // no suffixes for -b (C: strtoul)
        (
            "--rcvbuf 100",
            "--rcvbuf",
            "0 (the kernel's default) or 4096..=1073741824",
        ),
        (
            "--rcvbuf 2G",
            "--rcvbuf",
            "0 (the kernel's default) or 4096..=1073741824",
        ),
        (
            "--rcvbuf -1",
            "--rcvbuf",
            "0 (the kernel's default) or 4096..=1073741824",
        ),
        ("-A 2", "-A", "(expected 0 or 1)"),
        ("-A -1", "-A", "(expected 0 or 1)"),
        ("-A yes", "-A", "(expected 0 or 1)"),
        ("-a 2", "-a", "(expected 0 or 1)"),
        ("-a -1", "-a", "(expected 0 or 1)"),
        ("-a on", "-a", "(expected 0 or 1)"),
        ("-U 3", "-U", "(expected 0, 1 or 2)"),
        ("-U -1", "-U", "(expected 0, 1 or 2)"),
        ("-U x", "-U", "(expected 0, 1 or 2)"),
        ("-c 1.2.3", "-c", "IPv4, IPv6 or IPv4-mapped IPv6"),
        ("-c [::1]", "-c", "IPv4, IPv6 or IPv4-mapped IPv6"),
        (
            "--timeout -1",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout NaN",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout nan",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout inf",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout 1e3",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout 5s",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout 31536000.5",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--timeout 9223372036854775807",
            "--timeout",
            "decimal seconds in 0..=31536000",
        ),
        ("--timeout=", "--timeout", "decimal seconds in 0..=31536000"),
        (
            "--progress -2",
            "--progress",
            "decimal seconds in 0..=31536000",
        ),
        (
            "--dmabuf-size 1000",
            "--dmabuf-size",
            "multiple of the page size (4096 bytes)",
        ),
        (
            "--dmabuf-size 0",
            "--dmabuf-size",
            "multiple of the page size (4096 bytes)",
        ),
        ("--dmabuf-size 1T", "--dmabuf-size", "suffix K, M or G"),
        ("--json=", "--json", "a non-empty path"),
    ];
    for (extra, flag, range) in rows {
        let line = format!("{SERVER} {extra}");
        let m = usage_err(&line);
        assert!(m.starts_with(&format!("{flag}: invalid ")), "`{line}`: {m}");
        assert!(m.contains(range), "`{line}`: {m}");
    }

    // Values of flags whose mode differs from the server line.
    let rows: &[(&str, &str, &str)] = &[
        ("-f ''", "-f", "1..=15 bytes"),
        ("-f abcdefghijklmnop", "-f", "1..=15 bytes"),
        (
            "-f eth0 -s 10.0.0.256 -p 1",
            "-s",
            "IPv4, IPv6 or IPv4-mapped IPv6",
        ),
        (
            "-f eth0 -s ::1%lo -p 1",
            "-s",
            "IPv4, IPv6 or IPv4-mapped IPv6",
        ),
        (
            "--send-pattern 1X -s ::1 -p 1 -v 7",
            "--send-pattern",
            "suffix K, M or G",
        ),
        (
            "--send-pattern -1 -s ::1 -p 1 -v 7",
            "--send-pattern",
            "suffix K, M or G",
        ),
        (
            "--send-pattern 17179869184G -s ::1 -p 1 -v 7",
            "--send-pattern",
            "suffix K, M or G",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 7 --write-size 0",
            "--write-size",
            "1..=64M",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 7 --write-size 65M",
            "--write-size",
            "1..=64M",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 7 --corrupt-offset 1K",
            "--corrupt-offset",
            "inside the --send-pattern stream",
        ),
        (
            "-l --zcrx -f eth0 -s ::1 -p 1 --rx-buf-len 3000",
            "--rx-buf-len",
            "a power of two",
        ),
        ("-l -f eth0 -s ::1 -p 1 --seed -1", "--seed", "or 'random'"),
        (
            "-l -f eth0 -s ::1 -p 1 --seed 18446744073709551616",
            "--seed",
            "0x hex",
        ),
        ("-l -f eth0 -s ::1 -p 1 --seed 0x", "--seed", "0x hex"),
        ("-l -f eth0 -s ::1 -p 1 --seed 0x1g", "--seed", "0x hex"),
        (
            "-l -f eth0 -s ::1 -p 1 --seed 0x10000000000000000",
            "--seed",
            "0x hex",
        ),
        (
            "-l -f eth0 -s ::1 -p 1 --seed Random",
            "--seed",
            "or 'random'",
        ),
        ("-l -f eth0 -s ::1 -p 1 --seed ''", "--seed", "or 'random'"),
    ];
    for (line, flag, range) in rows {
        // The shell would pass '' as an empty argument; emulate it.
        let args: Vec<String> = argv(line)
            .into_iter()
            .map(|a| if a == "''" { String::new() } else { a })
            .collect();
        let m = match parse(&args, PAGE) {
            Err(Error::Usage(m)) => m,
            other => panic!("`{line}`: expected a usage error, got {other:?}"),
        };
        assert!(m.starts_with(&format!("{flag}: invalid ")), "`{line}`: {m}");
        assert!(m.contains(range), "`{line}`: {m}");
    }

    // The exact wording of the example in the brief.
    assert_eq!(
        usage_err(&format!("{SERVER} -p x")),
        "-p: invalid port 'x' (expected 1..=65535)"
    );
}

/// `-b` and `--dmabuf-size` follow the page size given to the parser.
#[test]
fn page_size_is_a_parameter() {
    let line = argv("-f eth0 -b 8192 --dmabuf-size 36K");
    let Ok(Command::Run(c)) = parse(&line, 4096) else {
        panic!("4 KiB pages: 8192 and 36K are valid");
    };
    assert_eq!(
        (c.rx_page_size, c.dmabuf_size),
        (Some(8192), Some(36 << 10))
    );
    let e = parse(&line, 16384).unwrap_err();
    assert!(
        e.to_string().starts_with("-b: invalid rx-page-size '8192'"),
        "{e}"
    );
    assert!(e.to_string().contains("page size 16384"), "{e}");
    let e = parse(&argv("-f eth0 --dmabuf-size 36K"), 16384).unwrap_err();
    assert!(e.to_string().starts_with("--dmabuf-size:"), "{e}");
}

/// Unknown options are refused with exit 2 (C prints "unknown option" and continues);
/// positional arguments too (C prints "extra arguments" and continues).
#[test]
fn unknown_options_and_positionals_are_refused() {
    for (line, shown) in [
        ("-f eth0 -x", "'-x'"),
        ("-f eth0 -P", "'-P'"),
        ("-f eth0 --bogus", "'--bogus'"),
        ("-f eth0 --skip-nic-config", "'--skip-nic-config'"), // old flags get no long form
        ("-f eth0 --v 7", "'--v'"),
        ("-lx -f eth0", "'-x'"),
    ] {
        let m = usage_err(line);
        assert!(
            m.starts_with(&format!("unknown option {shown}")),
            "`{line}`: {m}"
        );
        assert!(m.contains("unknown options are refused"), "`{line}`: {m}");
    }
    let m = usage_err("-f eth0 extra");
    assert!(m.starts_with("unexpected argument 'extra'"), "{m}");
    let m = usage_err("-f eth0 -- -l");
    assert!(m.starts_with("unexpected argument '-l'"), "{m}");
    let m = usage_err("-f eth0 -");
    assert!(m.starts_with("unexpected argument '-'"), "{m}");
    // A flag given a value with '=' is refused too.
    assert_eq!(usage_err("-f eth0 --quiet=1"), "--quiet: takes no value");
    // A value missing at the end of the line names the flag and what it takes.
    assert_eq!(
        usage_err("-f eth0 -b"),
        "-b: missing value BYTES (expected a power of two >= the page size that fits in 32 bits, in bytes)"
    );
}

/// getopt behaviour: last value wins, values attached or separate, bundled flags, any order;
/// a value may start with '-' (it is then checked as a value), except that a separate value
/// spelled like one of our options is refused as a forgotten value.
#[test]
fn getopt_conventions() {
    let c = run("-f eth0 -f eth1 -l -s ::1 -s ::2 -p 1 -p 2 -v 7 -v 0 -A 1 -A 0");
    assert_eq!(c.ifname.as_deref(), Some("eth1"));
    assert_eq!(c.server, addr("::2"));
    assert_eq!(c.port, Some(2));
    assert_eq!(c.validate, None);
    assert_eq!(c.autorelease, Some(false));
    let c = run("-f eth0 --timeout 1 --timeout 0.25");
    assert_eq!(c.timeout, Some(Duration::from_millis(250)));
    let c = run("-f eth0 -l -l -n -n -s ::1 -p 1");
    assert_eq!((c.mode, c.skip_nic_config), (Mode::Server, true));
    // Attached values and bundles.
    let c = run("-feth0 -ls ::1 -p5201 -q4 -t2 -v7 -nL");
    let want = Config {
        server: addr("::1"),
        port: Some(5201),
        validate: Some(7),
        start_queue: Some(2),
        num_queues: Some(4),
        skip_nic_config: true,
        fail_on_linear: true,
        ..server()
    };
    assert_eq!(c, want);
    let c = run("-p 5201 -s 192.0.2.1 -f eth0");
    assert_eq!(
        (c.mode, c.server.unwrap().text),
        (Mode::Client, "192.0.2.1".to_string())
    );
    // A value that starts with '-' is checked as a value...
    let m = usage_err("-f eth0 -s -x -p 1");
    assert_eq!(
        m,
        "-s: invalid server address '-x' (expected an IPv4, IPv6 or IPv4-mapped IPv6 address)"
    );
    // ... but one spelled like our options means the value was forgotten.
    let m = usage_err("-f eth0 -s -l -p 1");
    assert_eq!(
        m,
        "-s: missing value ADDR (expected an IPv4, IPv6 or IPv4-mapped IPv6 address): '-l' is an option"
    );
}

/// `-h`/`--help` ask for the usage text; the caller prints it and exits 0.
#[test]
fn help_is_an_outcome() {
    for line in ["-h", "--help", "-f eth0 -h", "-l --help -p 0"] {
        match parse(&argv(line), PAGE) {
            Ok(Command::Help(text)) => {
                assert!(text.starts_with("Usage:"), "`{line}`");
                assert!(text.contains("Exit status:"), "`{line}`");
                assert!(text.contains("refused with exit 2"), "`{line}`");
            }
            other => panic!("`{line}`: expected Help, got {other:?}"),
        }
    }
    for line in ["--version", "-l --version -p 0"] {
        match parse(&argv(line), PAGE) {
            Ok(Command::Help(text)) => assert_eq!(
                text,
                format!("ncdevmem-rs {}\n", env!("CARGO_PKG_VERSION")),
                "`{line}`"
            ),
            other => panic!("`{line}`: expected the version, got {other:?}"),
        }
    }
}

/// `-v 0`, `--timeout 0` and `--progress 0` are accepted as typed and mean "off"; the address
/// keeps its text.
#[test]
fn zero_values_mean_off() {
    let c = run("-f eth0 -v 0 --timeout 0 --progress 0 -s 192.0.2.1 -p 1");
    assert_eq!(
        (c.mode, c.validate, c.timeout, c.progress),
        (Mode::Client, None, None, None)
    );
    assert_eq!(c.server.map(|h| h.text).as_deref(), Some("192.0.2.1"));
}

/// The command lines the kernel's tests give C ncdevmem
/// (`docs/kernel-interface.md#devmempy-command-lines`), with the meaning
/// each must have here.
#[test]
fn kernel_selftest_command_lines() {
    type Edit = fn(&mut Config);
    // ADDR 2001:db8::1 (local), REMOTE 2001:db8::2, PORT 5201, IF eth0; netkit guest nk0 with
    // V6 fd00::1 and nk_queue 3.
    let rows: &[(&str, &str, Edit)] = &[
        (
            "check_rx: ncdevmem -l -f IF -s ADDR -p PORT -c REMOTE -v 7",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -c 2001:db8::2 -v 7",
            |c| {
                *c = server();
                c.client = addr("2001:db8::2");
                c.validate = Some(7);
            },
        ),
        (
            "check_rx (IPv4): ncdevmem -l -f IF -s ADDR -p PORT -c REMOTE -v 7",
            "-l -f eth0 -s 192.0.2.1 -p 5201 -c 192.0.2.2 -v 7",
            |c| {
                *c = server();
                c.server = addr("192.0.2.1");
                c.client = addr("192.0.2.2");
                c.validate = Some(7);
            },
        ),
        (
            "check_rx_hds: ncdevmem -l -f IF -s ADDR -p PORT -L",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -L",
            |c| {
                *c = server();
                c.fail_on_linear = true;
            },
        ),
        (
            "check_rx_large_niov: ncdevmem -l -f IF -s ADDR -p PORT -v 7 -b 16384",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -v 7 -b 16384",
            |c| {
                *c = server();
                c.validate = Some(7);
                c.rx_page_size = Some(16384);
            },
        ),
        (
            "nk_devmem RX: ncdevmem -l -f NK -s V6 -p PORT -t nk_queue -q 1 -n -v 7",
            "-l -f nk0 -s fd00::1 -p 5201 -t 3 -q 1 -n -v 7",
            |c| {
                *c = server();
                c.ifname = Some("nk0".into());
                c.server = addr("fd00::1");
                c.start_queue = Some(3);
                c.num_queues = Some(1);
                c.skip_nic_config = true;
                c.validate = Some(7);
            },
        ),
        (
            "nk_devmem RX HDS: ncdevmem -l -f NK -s V6 -p PORT -t nk_queue -q 1 -n -L",
            "-l -f nk0 -s fd00::1 -p 5201 -t 3 -q 1 -n -L",
            |c| {
                *c = server();
                c.ifname = Some("nk0".into());
                c.server = addr("fd00::1");
                c.start_queue = Some(3);
                c.num_queues = Some(1);
                c.skip_nic_config = true;
                c.fail_on_linear = true;
            },
        ),
        (
            "check_tx: ncdevmem -f IF -s REMOTE -p PORT",
            "-f eth0 -s 2001:db8::2 -p 5201",
            |c| {
                *c = server();
                c.mode = Mode::Client;
                c.server = addr("2001:db8::2");
            },
        ),
        (
            "check_tx_chunks: ncdevmem -f IF -s REMOTE -p PORT -z 3",
            "-f eth0 -s 2001:db8::2 -p 5201 -z 3",
            |c| {
                *c = server();
                c.mode = Mode::Client;
                c.server = addr("2001:db8::2");
                c.tx_chunk = Some(3);
            },
        ),
        (
            "nk_devmem TX: ncdevmem -f NK -s V6 -p PORT -t 0 -q 1 -n",
            "-f nk0 -s fd00::2 -p 5201 -t 0 -q 1 -n",
            |c| {
                *c = server();
                c.mode = Mode::Client;
                c.ifname = Some("nk0".into());
                c.server = addr("fd00::2");
                c.start_queue = Some(0);
                c.num_queues = Some(1);
                c.skip_nic_config = true;
            },
        ),
        (
            "nk_devmem TX chunks: ncdevmem -f NK -s V6 -p PORT -t 0 -q 1 -n -z 3",
            "-f nk0 -s fd00::2 -p 5201 -t 0 -q 1 -n -z 3",
            |c| {
                *c = server();
                c.mode = Mode::Client;
                c.ifname = Some("nk0".into());
                c.server = addr("fd00::2");
                c.start_queue = Some(0);
                c.num_queues = Some(1);
                c.skip_nic_config = true;
                c.tx_chunk = Some(3);
            },
        ),
        ("require_devmem: ncdevmem -f IF", "-f eth0", |c| {
            *c = probe()
        }),
        (
            "require_devmem(rx_buf_size=16384): ncdevmem -f IF -b 16384",
            "-f eth0 -b 16384",
            |c| {
                *c = probe();
                c.rx_page_size = Some(16384);
            },
        ),
    ];
    for (what, line, edit) in rows {
        let mut want = blank(Mode::Probe);
        edit(&mut want);
        assert_eq!(run(line), want, "{what}");
    }
}
