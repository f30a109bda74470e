//! Unit tests of the command line (the option table, its value parsers, addresses).

use super::flags::Flag;
use super::flags::{pow2_u32, seconds, Typed, FLAGS};
use super::limits::{dec_u64, size as size_bytes};
use super::*;

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn usage_msg(r: Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::Usage(m)) => m,
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn decimal_numbers_only() {
    assert_eq!(dec_u64("0"), Some(0));
    assert_eq!(dec_u64("0080"), Some(80));
    assert_eq!(dec_u64("18446744073709551615"), Some(u64::MAX));
    for bad in [
        "",
        "+1",
        "-1",
        " 1",
        "1 ",
        "0x10",
        "7x",
        "1e3",
        "18446744073709551616",
    ] {
        assert_eq!(dec_u64(bad), None, "{bad:?}");
    }
}

#[test]
fn sizes_take_binary_suffixes() {
    assert_eq!(size_bytes("0"), Some(0));
    assert_eq!(size_bytes("1K"), Some(1024));
    assert_eq!(size_bytes("4k"), Some(4096));
    assert_eq!(size_bytes("2M"), Some(2 << 20));
    assert_eq!(size_bytes("1G"), Some(1 << 30));
    assert_eq!(size_bytes("16000"), Some(16000));
    for bad in ["", "K", "1KB", "1T", "1.5G", "-1K", "17179869184G"] {
        assert_eq!(size_bytes(bad), None, "{bad:?}");
    }
}

#[test]
fn seconds_are_plain_decimals() {
    assert_eq!(seconds("0"), Some(Duration::ZERO));
    assert_eq!(seconds("0.5"), Some(Duration::from_millis(500)));
    assert_eq!(seconds("2"), Some(Duration::from_secs(2)));
    assert_eq!(seconds("0.000"), Some(Duration::ZERO));
    for bad in [
        "",
        "-1",
        "+1",
        "nan",
        "NaN",
        "inf",
        "1e3",
        ".5",
        "1.",
        "1.2.3",
        "0.0000000001",
        "1e400",
        "99999999999999999999999",
    ] {
        assert_eq!(seconds(bad), None, "{bad:?}");
    }
}

#[test]
fn pow2_bounds_follow_the_page_size() {
    let max = MAX_RX_PAGE_SIZE;
    assert_eq!(pow2_u32("-b", "x", "4096", 4096, max).unwrap(), 4096);
    assert_eq!(
        pow2_u32("-b", "x", "2147483648", 4096, max).unwrap(),
        1 << 31
    );
    assert_eq!(pow2_u32("-b", "x", "2G", 4096, max).unwrap(), 1 << 31);
    assert_eq!(pow2_u32("-b", "x", "16384", 16384, max).unwrap(), 16384);
    for bad in [
        "2048",
        "4097",
        "12288",
        "0",
        "4294967296",
        "4294971392",
        "4G",
        "3K",
    ] {
        assert!(pow2_u32("-b", "x", bad, 4096, max).is_err(), "{bad}");
    }
    // A 16 KiB-page system refuses 4096 and 8192.
    assert!(pow2_u32("-b", "x", "8192", 16384, max).is_err());
}

/// `--rx-buf-len`'s refusal states the range it really takes, to 2 MiB (the hugepages that
/// back the area). Before: "expected a power of two in 4096..=2147483648", and 4M then
/// failed later as larger than the hugepages.
#[test]
fn rx_buf_len_states_its_true_range() {
    for bad in ["4M", "4194304", "3000", "16"] {
        let m = usage_msg(parse(
            &argv(&format!("-l --zcrx -f eth0 -s ::1 -p 1 --rx-buf-len {bad}")),
            4096,
        ));
        assert_eq!(
            m,
            format!(
                "--rx-buf-len: invalid rx buffer length '{bad}' (expected a power of two in \
                 4096..=2097152 bytes (page size 4096 to 2 MiB), optional suffix K, M or G)"
            )
        );
    }
    let m = usage_msg(parse(&argv("-f eth0 -b 4G"), 4096));
    assert!(
        m.contains("a power of two in 4096..=2147483648 bytes (page size 4096 to 2 GiB)"),
        "{m}"
    );
    let Command::Run(c) = parse(
        &argv("-l --zcrx -f eth0 -s ::1 -p 1 --rx-buf-len 16K"),
        4096,
    )
    .unwrap() else {
        panic!("not run");
    };
    let ModeArgs::Zcrx(z) = c.mode else {
        panic!("not zcrx");
    };
    assert_eq!(z.rx_buf_len, Some(16384));
}

/// Every byte-size option (hint BYTES or OFFSET) reads its value with the one size parser:
/// `64K` is 65536 for each, so `-b 64K`, `-z 64K`, `--rx-buf-len 64K` and the rest agree
/// with `--send-pattern 64K`; the other numeric options take decimals only. `--help` lists
/// exactly the size options. Before: -b, -z and --rx-buf-len refused suffixes, and the help
/// named only --send-pattern, --write-size and --dmabuf-size.
#[test]
fn every_size_option_takes_suffixes_and_help_lists_them() {
    let sized: Vec<&str> = FLAGS
        .iter()
        .filter(|f| f.takes_size())
        .map(|f| if f.long.is_empty() { f.short } else { f.long })
        .collect();
    assert_eq!(
        sized,
        [
            "z",
            "b",
            "send-pattern",
            "write-size",
            "expect-bytes",
            "rcvbuf",
            "rcvlowat",
            "corrupt-offset",
            "dmabuf-size",
            "hds-thresh",
            "rx-buf-len",
            "max-bytes"
        ]
    );
    for f in FLAGS.iter().filter(|f| f.takes_size()) {
        let (mut with_suffix, mut plain) = (Typed::default(), Typed::default());
        (f.set)(&mut with_suffix, "64K", 4096).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        (f.set)(&mut plain, "65536", 4096).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(
            format!("{with_suffix:?}"),
            format!("{plain:?}"),
            "{}",
            f.display()
        );
    }
    for name in ["p", "v", "q", "t", "flows", "runs", "peer-port"] {
        let f = super::flags::by_name(name).unwrap();
        assert!(!f.takes_size(), "{name}");
        assert!(
            (f.set)(&mut Typed::default(), "4K", 4096).is_err(),
            "{name}"
        );
    }
    let help = usage().split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains(
            "Byte sizes (-z, -b, --send-pattern, --write-size, --expect-bytes, --rcvbuf, \
             --rcvlowat, --corrupt-offset, --dmabuf-size, --hds-thresh, --rx-buf-len, \
             --max-bytes) are \
             decimal bytes \
             with an optional suffix K, M or G (KiB, MiB, GiB), e.g. 64K or 1G."
        ),
        "{help}"
    );
}

/// What 0 means is each SECS option's own, in its refusal as in `--help`. Before: every
/// refusal ended "0 = none", also `--max-duration`'s, whose 0 is the default (600 s).
#[test]
fn a_seconds_refusal_says_what_its_zero_means() {
    for (line, zero) in [
        ("--peer-server --max-duration -5", "0 = the default, 600)"),
        ("-l --plain -s ::1 -p 1 --progress -1", "0 = never)"),
        (
            "-l --plain -s ::1 -p 1 --duration x",
            "0 = until the peer closes)",
        ),
        ("-l --plain -s ::1 -p 1 --warmup x", "0 = none)"),
        (
            "-l --plain -s ::1 -p 1 --timeout x",
            "0 = no timeout (receivers) or the defaults (senders))",
        ),
    ] {
        let m = usage_msg(parse(&argv(line), 4096));
        assert!(
            m.contains("(expected decimal seconds in 0..=31536000 (one year), e.g. 2 or 0.5; "),
            "{m}"
        );
        assert!(m.ends_with(zero), "{line}: {m}");
    }
    let m = usage_msg(parse(&argv("--peer-server --max-duration -5"), 4096));
    assert_eq!(
        m,
        "--max-duration: invalid duration '-5' (expected decimal seconds in 0..=31536000 \
         (one year), e.g. 2 or 0.5; 0 = the default, 600)"
    );
    assert!(usage().contains("(default 600; 0 = the default)"));
}

/// `--send-pattern 0` is "no size limit" only with `--duration`; without one it would send
/// nothing, so it is a usage error naming the fix. Before: 0 bytes sent, exit 0.
#[test]
fn send_pattern_0_needs_a_duration() {
    let want = "--send-pattern 0: without --duration it would send nothing (0 = no size limit, \
                only with --duration SECS); give a byte count (e.g. --send-pattern 1G) or add \
                --duration SECS";
    for line in [
        "--send-pattern 0 -s 2001:db8::1 -p 5201 -v 7 --json tx.json",
        "--send-pattern 0 -s 2001:db8::1 -p 5201 -v 7 --duration 0",
        "--send-pattern 0 -s 2001:db8::1 -p 5201 -v 7 --flows 2",
        "--send-pattern 0 -f eth0 -s 2001:db8::1 -p 5201 -v 7",
    ] {
        assert_eq!(usage_msg(parse(&argv(line), 4096)), want, "{line}");
    }
    for line in [
        "--send-pattern 0 -s 2001:db8::1 -p 5201 -v 7 --duration 5",
        "--send-pattern 0 -f eth0 -s 2001:db8::1 -p 5201 -v 7 --duration 5",
        "--send-pattern 1 -s 2001:db8::1 -p 5201 -v 7",
    ] {
        assert!(parse(&argv(line), 4096).is_ok(), "{line}");
    }
}

#[test]
fn one_letter_long_names_are_unknown() {
    let m = usage_msg(parse(&argv("--p 80 -f eth0"), 4096));
    assert!(m.contains("unknown option '--p'"), "{m}");
    let m = usage_msg(parse(&argv("--V -f eth0"), 4096));
    assert!(m.contains("unknown option '--V'"), "{m}");
    // As a value, "--x" is just text: here an invalid address.
    let m = usage_msg(parse(&argv("-f eth0 -s --x -p 1"), 4096));
    assert!(m.starts_with("-s: invalid server address '--x'"), "{m}");
    // After "--" everything is positional, and refused as such.
    let m = usage_msg(parse(&argv("-f eth0 -- --p"), 4096));
    assert!(m.starts_with("unexpected argument '--p'"), "{m}");
}

#[test]
fn host_addr_maps_for_sockets_and_rules() {
    let v4 = HostAddr::parse("-s", "server address", "192.0.2.1").unwrap();
    assert_eq!(
        v4.socket_ip(),
        "::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(v4.flow_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
    let mapped = HostAddr::parse("-s", "server address", "::ffff:192.0.2.1").unwrap();
    assert_eq!(mapped.text, "::ffff:192.0.2.1");
    assert!(mapped.ip.is_ipv6());
    assert_eq!(mapped.flow_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
    let v6 = HostAddr::parse("-s", "server address", "2001:db8::1").unwrap();
    assert_eq!(v6.flow_ip(), v6.ip);
    assert_eq!(IpAddr::V6(v6.socket_ip()), v6.ip);
    for bad in ["[::1]", "::1%lo", "1.2.3", "localhost", "", "1.2.3.4:80"] {
        assert!(
            HostAddr::parse("-s", "server address", bad).is_err(),
            "{bad:?}"
        );
    }
}

/// The address table sys::socket's parse_addr had (before it was removed as a copy of
/// HostAddr): the socket address, and IPv4 (tcp4 rules) for v4 and v4-mapped input only.
#[test]
fn host_addr_table() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("192.0.2.1", "::ffff:192.0.2.1", Some("192.0.2.1")),
        ("127.0.0.1", "::ffff:127.0.0.1", Some("127.0.0.1")),
        ("0.0.0.0", "::ffff:0.0.0.0", Some("0.0.0.0")),
        (
            "::ffff:198.51.100.7",
            "::ffff:198.51.100.7",
            Some("198.51.100.7"),
        ),
        (
            "::ffff:c633:6407",
            "::ffff:198.51.100.7",
            Some("198.51.100.7"),
        ),
        ("2001:db8::1", "2001:db8::1", None),
        ("::1", "::1", None),
        ("::", "::", None),
        // v4-compatible (deprecated) is not v4-mapped: stays IPv6.
        ("::192.0.2.1", "::192.0.2.1", None),
    ];
    for (input, ip, v4) in cases {
        let a = HostAddr::parse("-s", "server address", input)
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(a.socket_ip(), ip.parse::<Ipv6Addr>().unwrap(), "{input}");
        let flow_v4 = match a.flow_ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        };
        assert_eq!(flow_v4, v4.map(|s| s.parse().unwrap()), "{input}");
    }
    for bad in [
        "",
        "localhost",
        "256.1.1.1",
        "1.2.3",
        "01.2.3.4",
        "[::1]",
        "::1%lo",
        "1.2.3.4:80",
        " 1.2.3.4",
        "::ffff:1.2.3.4.5",
        "224.0.0.1",
        "ff02::1",
        "::ffff:239.1.2.3",
        "255.255.255.255",
    ] {
        let e = HostAddr::parse("-c", "client address", bad).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with("-c: invalid client address"),
            "{bad:?}: {msg}"
        );
        assert!(msg.contains(&format!("'{bad}'")), "{bad:?}: {msg}");
    }
}

/// An option whose separate value is another of our options is refused (the value was
/// forgotten: `--json --verify-restore` wrote a file named `--verify-restore`), for every
/// option that takes a value and every option spelling; free-text values (`-f`, `--json`)
/// never start with '-'; negative numbers keep their range message.
#[test]
fn a_forgotten_value_is_never_taken_from_the_next_option() {
    for (line, want) in [
        (
            "-f lo --json --verify-restore",
            "--json: missing value FILE (expected a file path): '--verify-restore' is an option",
        ),
        (
            "-f -l -s ::1 -p 1",
            "-f: missing value IFNAME (expected an interface name of 1..=15 bytes): '-l' is an option",
        ),
        (
            "-l --plain -s ::1 -p -v 7",
            "-p: missing value PORT (expected 1..=65535): '-v' is an option",
        ),
        (
            "-l --plain -s --timeout=1 -p 1",
            "-s: missing value ADDR (expected an IPv4, IPv6 or IPv4-mapped IPv6 address): '--timeout=1' is an option",
        ),
        (
            "-lf -ls -s ::1 -p 1",
            "-f: missing value IFNAME (expected an interface name of 1..=15 bytes): '-ls' is an option",
        ),
    ] {
        assert_eq!(usage_msg(parse(&argv(line), 4096)), want, "{line}");
    }
    for spec in FLAGS.iter().filter(|s| s.takes_value()) {
        for other in FLAGS {
            for name in [
                (!other.short.is_empty()).then(|| format!("-{}", other.short)),
                (!other.long.is_empty()).then(|| format!("--{}", other.long)),
            ]
            .into_iter()
            .flatten()
            {
                let line = format!("-f lo {} {name} 1", spec.display());
                let m = usage_msg(parse(&argv(&line), 4096));
                assert!(
                    m.ends_with(&format!("'{name}' is an option")),
                    "{line}: {m}"
                );
                assert!(m.starts_with(&spec.display()), "{line}: {m}");
            }
        }
    }
    for (line, want) in [
        (
            "-f lo --json=--x",
            "--json: invalid file name '--x' (expected a path that does not start with '-'",
        ),
        ("-f -x", "-f: invalid interface name '-x'"),
        ("-f-x", "-f: invalid interface name '-x'"),
        (
            "-l --plain -s ::1 -p -1 -v 7",
            "-p: invalid port '-1' (expected 1..=65535)",
        ),
        (
            "-l --plain -s ::1 -p 1 --timeout -1",
            "--timeout: invalid timeout '-1'",
        ),
    ] {
        let m = usage_msg(parse(&argv(line), 4096));
        assert!(m.starts_with(want), "{line}: {m}");
    }
    // A value that only looks odd is still a value.
    let Command::Run(c) = parse(&argv("-f lo --json ./--verify-restore"), 4096).unwrap() else {
        panic!("not run");
    };
    assert_eq!(
        c.common.json,
        Some(JsonTarget::File(PathBuf::from("./--verify-restore")))
    );
}

/// Addresses no TCP connection can use (multicast, broadcast) are usage errors for -s and -c,
/// in every spelling.
#[test]
fn multicast_and_broadcast_addresses_are_refused() {
    for (bad, kind) in [
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("ff05::2", "multicast"),
        ("::ffff:224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
    ] {
        for (line, flag) in [
            (format!("-l --plain -s {bad} -p 5201 -v 7"), "-s"),
            (format!("--send-pattern 1M -s {bad} -p 5201 -v 7"), "-s"),
            (format!("-l -f eth0 -s 192.0.2.1 -c {bad} -p 5201"), "-c"),
        ] {
            if flag == "-c" && bad.contains(':') {
                continue; // a v6 client with a v4 server is refused for that already
            }
            let m = usage_msg(parse(&argv(&line), 4096));
            assert!(m.starts_with(&format!("{flag}: invalid ")), "{line}: {m}");
            assert!(
                m.contains(&format!("'{bad}' (expected a unicast address; {kind}")),
                "{line}: {m}"
            );
        }
    }
    for good in ["192.0.2.1", "::1", "223.255.255.255", "0.0.0.0", "::"] {
        assert!(
            HostAddr::parse("-s", "server address", good).is_ok(),
            "{good}"
        );
    }
}

/// A link-local IPv6 address without a zone (none of the flags takes one) was refused only
/// by the kernel, after setup: `bind([fe80::1]:5201): EINVAL`, exit 1. It is a usage error
/// wherever a socket uses it; a server's -c only goes into the flow rule and stays allowed.
#[test]
fn link_local_ipv6_socket_addresses_are_usage_errors() {
    for (line, flag) in [
        ("-l --plain -s fe80::1 -p 5201", "-s"),
        ("-l -f eth0 -s febf::1 -p 5201", "-s"),
        ("-l --zcrx -f eth0 -s fe80::1 -p 5201", "-s"),
        ("--send-pattern 1K -s fe80::1 -p 5201 -v 7", "-s"),
        (
            "--send-pattern 1K -s 2001:db8::1 -c fe80::2 -p 5201 -v 7",
            "-c",
        ),
        ("-f eth0 -s 2001:db8::1 -c fe80::2 -p 5201", "-c"),
    ] {
        let m = usage_msg(parse(&argv(line), 4096));
        assert!(
            m.starts_with(&format!("{flag}: link-local IPv6 address 'fe")),
            "{line}: {m}"
        );
        assert!(m.contains("zone"), "{line}: {m}");
        assert!(!m.contains("  "), "one space between words: {line}: {m}");
    }
    assert_eq!(
        usage_msg(parse(&argv("-l --plain -s fe80::1 -p 5201"), 4096)),
        "-s: link-local IPv6 address 'fe80::1' cannot be used: a socket needs its zone \
         (fe80::1%eth0), which -s does not take, and the kernel refuses it without one \
         (EINVAL); use a global or unique-local address"
    );
    for line in [
        "-l -f eth0 -s 2001:db8::1 -c fe80::2 -p 5201",
        "-l --plain -s fec0::1 -p 5201",
        "-l --plain -s 169.254.1.1 -p 5201",
    ] {
        assert!(parse(&argv(line), 4096).is_ok(), "{line}");
    }
}

#[test]
fn help_wins_over_bad_values_and_documents_every_option() {
    let Command::Help(text) = parse(&argv("-p x -h"), 4096).unwrap() else {
        panic!("-h must give help");
    };
    for s in FLAGS.iter().filter(|f| !f.help.is_empty()) {
        if !s.short.is_empty() {
            assert!(
                text.contains(&format!("  -{}", s.short)),
                "help lacks -{}",
                s.short
            );
        }
        if !s.long.is_empty() {
            assert!(
                text.contains(&format!("--{}", s.long)),
                "help lacks --{}",
                s.long
            );
        }
    }
    assert!(text.contains("Unknown options and positional arguments are refused with exit 2"));
}

#[test]
fn missing_value_names_flag_and_range() {
    let m = usage_msg(parse(&argv("-f eth0 -p"), 4096));
    assert_eq!(m, "-p: missing value PORT (expected 1..=65535)");
    let m = usage_msg(parse(&argv("--timeout"), 4096));
    assert!(m.starts_with("--timeout: missing value SECS"), "{m}");
    let m = usage_msg(parse(&argv("--plain=1"), 4096));
    assert_eq!(m, "--plain: takes no value");
}

#[test]
fn queue_range_must_fit_u32() {
    let m = usage_msg(parse(&argv("-f eth0 -t 4294967295 -q 2"), 4096));
    assert!(m.starts_with("-t/-q: "), "{m}");
    let Command::Run(c) = parse(&argv("-f eth0 -t 4294967295 -q 1"), 4096).unwrap() else {
        panic!("not run");
    };
    let ModeArgs::Probe(p) = c.mode else {
        panic!("not the probe: {c:?}");
    };
    assert_eq!(
        p.queues,
        Some(QueueRange {
            start: u32::MAX,
            count: 1
        })
    );
}

#[test]
fn zcrx_nodev_needs_no_device_and_refuses_device_options() {
    let Command::Run(c) = parse(&argv("-l --zcrx --zcrx-nodev -s ::1 -p 5201 -v 7"), 4096).unwrap()
    else {
        panic!("not run");
    };
    // --zcrx-nodev: no device, so no interface and no queues.
    let ModeArgs::Zcrx(z) = c.mode else {
        panic!("not zcrx: {c:?}");
    };
    assert_eq!(z.nic, None);
    let Command::Run(c) = parse(&argv("-l --zcrx -f eth0 -s ::1 -p 1"), 4096).unwrap() else {
        panic!("not run");
    };
    let ModeArgs::Zcrx(z) = c.mode else {
        panic!("not zcrx: {c:?}");
    };
    assert_eq!(
        z.nic.map(|n| n.ifname),
        Some(IfName::parse("eth0").unwrap())
    );
    for (line, want) in [
        (
            "-l --zcrx --zcrx-nodev -f eth0 -s ::1 -p 1",
            "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
        ),
        (
            "-l --zcrx --zcrx-nodev -t 1 -q 1 -s ::1 -p 1",
            "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
        ),
        (
            "-l --plain --zcrx-nodev -s ::1 -p 1",
            "--zcrx-nodev: only applies to --zcrx",
        ),
        (
            "-l --zcrx --zcrx-nodev -s ::1 -p 1 --verify-restore",
            "--verify-restore: --zcrx-nodev changes no NIC, so there is nothing to verify",
        ),
    ] {
        assert_eq!(usage_msg(parse(&argv(line), 4096)), want, "{line}");
    }
    assert!(usage().contains("--zcrx-nodev    with --zcrx, a test aid"));
}

/// A command line of each role, to which the table-driven tests add one option.
const BASES: &[(Role, &str)] = &[
    (Role::Probe, "-f eth0"),
    (Role::Report, "--report -f eth0 --json r.json"),
    (Role::Server, "-l -f eth0 -s 2001:db8::1 -p 5201"),
    (Role::Zcrx, "-l --zcrx -f eth0 -s 2001:db8::1 -p 5201"),
    (Role::TxStdin, "-f eth0 -s 2001:db8::2 -p 5201"),
    (
        Role::TxPattern,
        "-f eth0 -s 2001:db8::2 -p 5201 --send-pattern 1K -v 7",
    ),
    (Role::Plain, "-l --plain -s 2001:db8::1 -p 5201"),
    (
        Role::Sender,
        "--send-pattern 1K -s 2001:db8::2 -p 5201 -v 7",
    ),
    (Role::PeerServer, "--peer-server -p 4343"),
    (Role::Compare, "--compare base.json new.json"),
];

/// The options that choose the mode (adding one to a base changes its role) and the help.
const SELECTORS: &[&str] = &[
    "l",
    "s",
    "c",
    "f",
    "plain",
    "zcrx",
    "report",
    "send-pattern",
    "peer-server",
    "compare",
    "h",
    "version",
];

/// The option as typed with its example value (`-t` and `-q` come as a pair: one alone is a
/// usage error in the modes that take queues; a sweep's options come with `--peer`).
fn with_example(f: &Flag, role: Role) -> String {
    let value = match f.example {
        "" => String::new(),
        v => format!(" {v}"),
    };
    let pair = match (f.short, f.long) {
        ("t", _) => " -q 1",
        ("q", _) => " -t 1",
        // A sweep's options need the peer that sends its runs.
        (
            _,
            "sweep" | "runs" | "csv" | "plot" | "peer-port" | "peer-send" | "write-size"
            | "columns" | "format" | "baseline" | "any-shape" | "pre-run" | "post-run",
        ) => " --peer 2001:db8::2",
        // The plain receiver sets the hds-thresh of the NIC -f names (-f elsewhere would
        // change the role: a sender with -f sends through devmem TX).
        (_, "hds-thresh") if role == Role::Plain => " -f eth0",
        _ => "",
    };
    format!("{}{value}{pair}", f.display())
}

/// The "only applies to" column: an option that refuses other modes refuses exactly the
/// roles outside its `roles`, with the message the table gives; an option that does not is
/// accepted everywhere, has an effect in its roles and none elsewhere (as C ignores its
/// options in modes that do not use them).
#[test]
fn the_roles_column_is_what_the_parse_does() {
    for f in FLAGS {
        let name = if f.short.is_empty() { f.long } else { f.short };
        if SELECTORS.contains(&name) {
            continue;
        }
        for (role, base) in BASES {
            let line = format!("{base} {}", with_example(f, *role));
            let got = parse(&argv(&line), 4096);
            let refusal = f
                .only
                .map(|o| format!("{}: only applies to {o}", f.display()));
            match (&refusal, f.roles.contains(role), &got) {
                (Some(want), false, Err(Error::Usage(m))) => assert_eq!(m, want, "`{line}`"),
                (Some(want), true, Err(Error::Usage(m))) => {
                    assert_ne!(m, want, "`{line}`: refused in a role of its own")
                }
                (Some(_), true, Ok(_)) => {}
                (None, applies, Ok(Command::Run(run))) => {
                    let Ok(Command::Run(plain)) = parse(&argv(base), 4096) else {
                        panic!("`{base}` does not parse");
                    };
                    // The command line as typed differs by construction; the options decide.
                    let options = |r: &Run| Run {
                        common: Common {
                            argv: Vec::new(),
                            ..r.common.clone()
                        },
                        ..r.clone()
                    };
                    assert_eq!(
                        options(run) != options(&plain),
                        applies,
                        "`{line}`: effect in {role:?}"
                    );
                }
                _ => panic!("`{line}`: {got:?}"),
            }
        }
    }
}

/// Every value row: its example is accepted where it applies, an empty value is refused
/// naming the option, and no hostile value is taken silently under another option's name.
#[test]
fn every_value_row_names_itself_when_refused() {
    for f in FLAGS.iter().filter(|f| f.takes_value()) {
        let (role, base) = BASES
            .iter()
            .find(|(r, _)| f.roles.contains(r))
            .unwrap_or_else(|| panic!("{} applies nowhere", f.display()));
        let example = format!("{base} {}", with_example(f, *role));
        assert!(parse(&argv(&example), 4096).is_ok(), "`{example}`");
        let mut line = argv(base);
        line.extend([f.display(), String::new()]);
        let m = usage_msg(parse(&line, 4096));
        assert!(
            m.starts_with(&format!("{}: ", f.display())),
            "{line:?}: {m}"
        );
        for hostile in [
            "x",
            "-1",
            "99999999999999999999999",
            " 1",
            "1 ",
            "0x10",
            "1.5",
        ] {
            let mut line = argv(base);
            line.extend([f.display(), hostile.to_string()]);
            match parse(&line, 4096) {
                Ok(_) => {}
                Err(Error::Usage(m)) => {
                    let named = m.starts_with(&format!("{}: ", f.display()));
                    // A value accepted here can still break a rule between options.
                    let rule = m.contains(" only applies to ") || m.starts_with("--corrupt-offset");
                    assert!(named || rule, "{line:?}: {m}");
                }
                Err(e) => panic!("{line:?}: {e}"),
            }
        }
    }
}

/// `--hds-thresh` (issue 35): the plain receiver takes any u32 with `-f IF` (the NIC it
/// sets); a devmem or zcrx server takes only 0 (the kernel installs no memory provider while
/// hds-thresh is not 0), and so does an `hds-thresh` sweep of them, before the first run.
#[test]
fn hds_thresh_is_plain_only_unless_zero() {
    let plain = "-l --plain -s 2001:db8::1 -p 5201";
    let Ok(Command::Run(run)) = parse(&argv(&format!("{plain} -f eth0 --hds-thresh 1K")), 4096)
    else {
        panic!("plain --hds-thresh does not parse");
    };
    let ModeArgs::Plain(p) = run.mode else {
        panic!("not plain: {:?}", run.mode);
    };
    assert_eq!(
        (p.ifname.map(|i| i.to_string()), p.hds_thresh),
        (Some("eth0".into()), Some(1024))
    );
    // Without --hds-thresh, -f is ignored as before (no NIC is touched).
    let Ok(Command::Run(run)) = parse(&argv(&format!("{plain} -f eth0")), 4096) else {
        panic!("plain -f does not parse");
    };
    let ModeArgs::Plain(p) = run.mode else {
        panic!("not plain");
    };
    assert_eq!((p.ifname, p.hds_thresh), (None, None));
    let rule = "a memory provider (the devmem binding, the zcrx ifq) cannot be installed on a \
                queue while the NIC's hds-thresh is not 0 (the kernel refuses: \"hds-thresh is \
                not zero\"; and refuses a non-zero hds-thresh while one is bound), so devmem \
                and zcrx servers run with hds-thresh 0 only; receive over plain TCP (--plain \
                -f IF) for another hds-thresh";
    let peer = "--peer 2001:db8::2";
    let refused = [
        (format!("{plain} --hds-thresh 256"), "--hds-thresh: --plain sets the hds-thresh of the NIC -f IF names; give -f IF".to_string()),
        (format!("{plain} -f eth0 -n --hds-thresh 256"), "--hds-thresh: -n skips NIC configuration, and --hds-thresh is one; not both".into()),
        (format!("{plain} {peer} --sweep hds-thresh=0,256"), "--sweep hds-thresh: --plain sets the hds-thresh of the NIC -f IF names; give -f IF".into()),
        (format!("{plain} -f eth0 {peer} --sweep hds-thresh=0,256 --hds-thresh 0"), "--sweep hds-thresh: sets --hds-thresh for each point; do not give --hds-thresh too".into()),
        ("-l -f eth0 -s 2001:db8::1 -p 5201 --hds-thresh 256".into(), format!("--hds-thresh 256: {rule}")),
        ("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --hds-thresh 1".into(), format!("--hds-thresh 1: {rule}")),
        (format!("-l -f eth0 -s 2001:db8::1 -p 5201 {peer} --sweep hds-thresh=0,256,1024"), format!("--sweep hds-thresh: point 256: {rule}")),
        (format!("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 {peer} --sweep hds-thresh=128"), format!("--sweep hds-thresh: point 128: {rule}")),
        (format!("{plain} -f eth0 --hds-thresh 4G"), "--hds-thresh: invalid hds-thresh '4G' (expected 0..=4294967295 bytes, optional suffix K, M or G)".into()),
        (format!("{plain} -f eth0 {peer} --sweep hds-thresh=4G"), "--sweep: invalid hds-thresh value '4G' (expected 0..=4294967295 bytes, optional suffix K, M or G)".into()),
    ];
    for (line, want) in refused {
        assert_eq!(usage_msg(parse(&argv(&line), 4096)), want, "{line}");
    }
    // 0 is what a devmem or zcrx server sets anyway: accepted, alone or as every point.
    for line in [
        "-l -f eth0 -s 2001:db8::1 -p 5201 --hds-thresh 0".to_string(),
        "-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --hds-thresh 0".into(),
        format!("-l -f eth0 -s 2001:db8::1 -p 5201 {peer} --sweep hds-thresh=0"),
        format!("{plain} -f eth0 {peer} --sweep hds-thresh=0,256,64K"),
    ] {
        assert!(parse(&argv(&line), 4096).is_ok(), "{line}");
    }
}
