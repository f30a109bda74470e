//! The command line as tables, through the library API only (`ncdevmem::cli::parse`): every
//! accepted flag with its meaning, every bad value with the flag its message names, the mode
//! selection rules, and the exact command lines the kernel's devmem_lib.py / nk_devmem.py give
//! C ncdevmem (`docs/kernel-interface.md#devmempy-command-lines`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ncdevmem::cli::{
    parse, ClientArgs, Command, Common, Flows, HostAddr, IfName, JsonTarget, Mode, ModeArgs,
    NicArgs, PatternArgs, Peer, PlainArgs, ProbeArgs, QueueRange, Receive, ReportArgs, Run, Seed,
    SendStream, SenderArgs, ServerArgs, TxSource, UnbindMode, Verbosity, ZcrxArgs,
};
use ncdevmem::error::{Error, EXIT_USAGE};
use ncdevmem::memory::MemorySource;
use ncdevmem::validate::StreamSpec;

/// x86_64 page size; `-b`, `--rx-buf-len` and `--dmabuf-size` bounds depend on it.
const PAGE: usize = 4096;

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// The run `s` parses to, its command line (`Common::argv`, checked to be `s`'s words)
/// cleared so the tables compare the options alone.
fn run(s: &str) -> Run {
    match parse(&argv(s), PAGE) {
        Ok(Command::Run(mut r)) => {
            assert_eq!(r.common.argv, argv(s), "`{s}`: the command line as typed");
            r.common.argv.clear();
            r
        }
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

fn addr(text: &str) -> HostAddr {
    HostAddr {
        text: text.to_string(),
        ip: text.parse::<IpAddr>().unwrap(),
    }
}

fn ifname(name: &str) -> IfName {
    IfName::parse(name).unwrap()
}

/// The receive of `-s ADDR -p PORT` with nothing else set.
fn receive(server: &str, port: u16) -> Receive {
    Receive {
        addr: addr(server),
        port,
        validate: None,
        timeout: None,
        progress: None,
        expect_bytes: None,
        rcvbuf: None,
        flows: Flows::default(),
        require_spread: false,
    }
}

/// The NIC of `-f IF` with nothing else set.
fn nic(name: &str) -> NicArgs {
    NicArgs {
        ifname: ifname(name),
        queues: None,
        client: None,
        skip_nic_config: false,
        verify_restore: false,
    }
}

/// A run of `mode` with the default verbosity and no `--json`.
fn plain_run(mode: ModeArgs) -> Run {
    Run {
        common: Common::default(),
        mode,
    }
}

/// `-f eth0`: the probe with defaults.
fn probe_args() -> ProbeArgs {
    ProbeArgs {
        ifname: ifname("eth0"),
        queues: None,
        rx_page_size: None,
        dmabuf_size: None,
        memory: MemorySource::Udmabuf,
        skip_nic_config: false,
        verify_restore: false,
    }
}

fn probe() -> Run {
    plain_run(ModeArgs::Probe(probe_args()))
}

/// `-l -f eth0 -s 2001:db8::1 -p 5201`: the server with defaults.
fn server_args() -> ServerArgs {
    ServerArgs {
        nic: nic("eth0"),
        rx: receive("2001:db8::1", 5201),
        fail_on_linear: false,
        rx_page_size: None,
        so_autorelease: None,
        bind_autorelease: None,
        unbind: UnbindMode::Normal,
        dmabuf_size: None,
        memory: MemorySource::Udmabuf,
    }
}

fn server() -> Run {
    plain_run(ModeArgs::Server(server_args()))
}

/// `-f eth0 -s ADDR -p 5201`: the devmem TX client sending stdin.
fn client(to: &str) -> ClientArgs {
    ClientArgs {
        ifname: ifname("eth0"),
        peer: Peer {
            addr: addr(to),
            port: 5201,
            local: None,
        },
        chunk: None,
        source: TxSource::Stdin,
        dmabuf_size: None,
        memory: MemorySource::Udmabuf,
        timeout: None,
    }
}

/// `-l --plain -s 2001:db8::1 -p 5201`: the plain receiver with defaults.
fn plain() -> Run {
    plain_run(ModeArgs::Plain(PlainArgs {
        rx: receive("2001:db8::1", 5201),
        fail_on_linear: false,
        ifname: None,
        hds_thresh: None,
        rcvlowat: None,
    }))
}

/// The plain receiver's arguments of `r` (panics when `r` is another mode).
fn pln(r: &mut Run) -> &mut PlainArgs {
    match &mut r.mode {
        ModeArgs::Plain(p) => p,
        other => panic!("not the plain receiver: {other:?}"),
    }
}

/// The server arguments of `r` (a test helper: panics when `r` is another mode).
fn srv(r: &mut Run) -> &mut ServerArgs {
    match &mut r.mode {
        ModeArgs::Server(s) => s,
        other => panic!("not the server: {other:?}"),
    }
}

/// The probe arguments of `r` (panics when `r` is another mode).
fn prb(r: &mut Run) -> &mut ProbeArgs {
    match &mut r.mode {
        ModeArgs::Probe(p) => p,
        other => panic!("not the probe: {other:?}"),
    }
}

/// The devmem TX client arguments of `r` (panics when `r` is another mode).
fn cli(r: &mut Run) -> &mut ClientArgs {
    match &mut r.mode {
        ModeArgs::Client(c) => c,
        other => panic!("not the client: {other:?}"),
    }
}

fn queues(start: u32, count: u32) -> Option<QueueRange> {
    Some(QueueRange { start, count })
}

const SERVER: &str = "-l -f eth0 -s 2001:db8::1 -p 5201";
const PLAIN: &str = "-l --plain -s 2001:db8::1 -p 5201";

/// Every accepted flag, with the field it sets. Each row: extra arguments after a base
/// command line, and the edit to the base run that must result (an option the mode does not
/// use is accepted and leaves the run as it was).
#[test]
fn every_flag_has_its_meaning() {
    type Edit = fn(&mut Run);
    let rows: &[(&str, &str, Edit)] = &[
        // C ncdevmem's options (on a server unless they need another mode).
        (SERVER, "", |_| {}),
        (SERVER, "-c 2001:db8::2", |r| {
            srv(r).nic.client = Some(addr("2001:db8::2"))
        }),
        (SERVER, "-v 7", |r| {
            srv(r).rx.validate = Some(StreamSpec::Periodic(7))
        }),
        (SERVER, "-v 2", |r| {
            srv(r).rx.validate = Some(StreamSpec::Periodic(2))
        }),
        (SERVER, "-v 256", |r| {
            srv(r).rx.validate = Some(StreamSpec::Periodic(256))
        }),
        (SERVER, "-v 0", |_| {}), // 0 = no validation, like absent
        (SERVER, "--seed 42", |r| {
            srv(r).rx.validate = Some(StreamSpec::keyed(42))
        }),
        (SERVER, "--seed 0", |r| {
            srv(r).rx.validate = Some(StreamSpec::keyed(0))
        }),
        (SERVER, "--seed 18446744073709551615", |r| {
            srv(r).rx.validate = Some(StreamSpec::keyed(u64::MAX))
        }),
        (SERVER, "--seed 0xDEADbeef", |r| {
            srv(r).rx.validate = Some(StreamSpec::keyed(0xDEAD_BEEF))
        }),
        (SERVER, "-v 0 --seed 7", |r| {
            srv(r).rx.validate = Some(StreamSpec::keyed(7))
        }),
        (SERVER, "-t 3 -q 1", |r| srv(r).nic.queues = queues(3, 1)),
        (SERVER, "-t 0 -q 4096", |r| {
            srv(r).nic.queues = queues(0, 4096)
        }),
        (SERVER, "-z 3", |_| {}), // accepted and ignored, as in C
        (SERVER, "-n", |r| srv(r).nic.skip_nic_config = true),
        (SERVER, "-L", |r| srv(r).fail_on_linear = true),
        (SERVER, "--fail-on-linear", |r| srv(r).fail_on_linear = true),
        (SERVER, "-b 4096", |r| srv(r).rx_page_size = Some(4096)),
        (SERVER, "-b 16384", |r| srv(r).rx_page_size = Some(16384)),
        (SERVER, "-b 2147483648", |r| {
            srv(r).rx_page_size = Some(1 << 31)
        }),
        (SERVER, "-A 0", |r| srv(r).so_autorelease = Some(false)),
        (SERVER, "-A 1", |r| srv(r).so_autorelease = Some(true)),
        (SERVER, "-a 0", |r| srv(r).bind_autorelease = Some(false)),
        (SERVER, "-a 1", |r| srv(r).bind_autorelease = Some(true)),
        (SERVER, "-U 0", |r| srv(r).unbind = UnbindMode::Normal),
        (SERVER, "-U 1", |r| srv(r).unbind = UnbindMode::BeforeRecv),
        (SERVER, "-U 2", |r| srv(r).unbind = UnbindMode::AfterRecv),
        (SERVER, "-a 0 -U 1", |r| {
            srv(r).bind_autorelease = Some(false);
            srv(r).unbind = UnbindMode::BeforeRecv
        }),
        (SERVER, "-p 1", |r| srv(r).rx.port = 1),
        (SERVER, "-p 65535", |r| srv(r).rx.port = 65535),
        (SERVER, "-p 0080", |r| srv(r).rx.port = 80), // decimal, not octal
        // Long options of ncdevmem-rs.
        (SERVER, "--timeout 0.5", |r| {
            srv(r).rx.timeout = Some(Duration::from_millis(500))
        }),
        (SERVER, "--timeout=3", |r| {
            srv(r).rx.timeout = Some(Duration::from_secs(3))
        }),
        (SERVER, "--timeout 0", |_| {}), // 0 = none
        (SERVER, "--json /tmp/out.json", |r| {
            r.common.json = Some(JsonTarget::File(PathBuf::from("/tmp/out.json")))
        }),
        (SERVER, "-V", |r| r.common.verbosity = Verbosity::Verbose),
        (SERVER, "--verbose", |r| {
            r.common.verbosity = Verbosity::Verbose
        }),
        (SERVER, "--quiet", |r| r.common.verbosity = Verbosity::Quiet),
        (SERVER, "--progress 1.5", |r| {
            srv(r).rx.progress = Some(Duration::from_millis(1500))
        }),
        (SERVER, "--progress 0", |_| {}), // 0 = never
        (SERVER, "--dmabuf-size 64M", |r| {
            srv(r).dmabuf_size = Some(64 << 20)
        }),
        (SERVER, "--dmabuf-size 65536000", |r| {
            srv(r).dmabuf_size = Some(16000 * 4096)
        }),
        (SERVER, "--verify-restore", |r| {
            srv(r).nic.verify_restore = true
        }),
        (SERVER, "--require-spread", |r| {
            srv(r).rx.require_spread = true
        }),
        (SERVER, "--rcvbuf 64K", |r| {
            srv(r).rx.rcvbuf = Some(64 << 10)
        }),
        (SERVER, "--rcvbuf 0", |r| srv(r).rx.rcvbuf = Some(0)),
        (SERVER, "--rcvbuf 4096", |r| srv(r).rx.rcvbuf = Some(4096)),
        (SERVER, "--rcvbuf 1G", |r| srv(r).rx.rcvbuf = Some(1 << 30)),
        (SERVER, "--memory udmabuf", |_| {}), // the default
        (SERVER, "--memory dma-heap", |r| {
            srv(r).memory = MemorySource::DmaHeap("system".into())
        }),
        (SERVER, "--memory=dma-heap:reserved", |r| {
            srv(r).memory = MemorySource::DmaHeap("reserved".into())
        }),
        (SERVER, "--memory dma-heap -b 16384", |r| {
            srv(r).memory = MemorySource::DmaHeap("system".into());
            srv(r).rx_page_size = Some(16384)
        }),
        // The plain receiver.
        (PLAIN, "", |r| *r = plain()),
        (PLAIN, "--rcvlowat 512K", |r| {
            *r = plain();
            pln(r).rcvlowat = Some(512 << 10)
        }),
        (PLAIN, "--rcvlowat 1", |r| {
            *r = plain();
            pln(r).rcvlowat = Some(1)
        }),
        (PLAIN, "--rcvlowat 1G", |r| {
            *r = plain();
            pln(r).rcvlowat = Some(1 << 30)
        }),
        (PLAIN, "--rcvlowat 64K --rcvbuf 128K", |r| {
            *r = plain();
            pln(r).rcvlowat = Some(64 << 10);
            pln(r).rx.rcvbuf = Some(128 << 10)
        }),
        // Probe mode.
        ("-f eth0", "", |r| *r = probe()),
        ("-f eth0", "-b 16384", |r| {
            *r = probe();
            prb(r).rx_page_size = Some(16384)
        }),
        ("-f eth0", "-t 2 -q 2", |r| {
            *r = probe();
            prb(r).queues = queues(2, 2)
        }),
        ("-f eth0", "-n --verify-restore", |r| {
            *r = probe();
            prb(r).skip_nic_config = true;
            prb(r).verify_restore = true
        }),
        ("-f eth0", "--memory dma-heap:system", |r| {
            *r = probe();
            prb(r).memory = MemorySource::DmaHeap("system".into())
        }),
        // The devmem TX client.
        ("-f eth0 -s 2001:db8::2 -p 5201", "--memory dma-heap", |r| {
            *r = plain_run(ModeArgs::Client(ClientArgs {
                memory: MemorySource::DmaHeap("system".into()),
                ..client("2001:db8::2")
            }))
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
    let want = plain_run(ModeArgs::Sender(SenderArgs {
        peer: Peer {
            addr: addr("192.0.2.1"),
            port: 5201,
            local: None,
        },
        pattern: PatternArgs {
            bytes: 1 << 30,
            stream: SendStream::Periodic(7),
            write_size: Some(1448),
            corrupt_offset: None,
            flows: Flows::default(),
        },
        timeout: None,
        progress: None,
    }));
    assert_eq!(c, want);

    // With -f the pattern goes through devmem TX (client mode, pattern instead of stdin).
    let mut c = run("--send-pattern 0 --duration 5 -s ::1 -p 9 -v 256 -c ::1 -f lo");
    assert_eq!(c.mode.mode(), Mode::Client);
    let tx = cli(&mut c);
    let TxSource::Pattern(p) = &tx.source else {
        panic!("not the pattern source: {tx:?}");
    };
    assert_eq!((p.bytes, p.stream), (0, SendStream::Periodic(256)));
    assert_eq!(tx.peer.local, Some(addr("::1")));
    assert_eq!(tx.ifname, ifname("lo"));

    let c = run(
        "-f eth0 -s 2001:db8::2 -p 5201 -z 3 --send-pattern 64M -v 7 --write-size 64K \
         --corrupt-offset 1000 --timeout 0.5 --json tx.json",
    );
    let want = Run {
        common: Common {
            json: Some(JsonTarget::File(PathBuf::from("tx.json"))),
            ..Common::default()
        },
        mode: ModeArgs::Client(ClientArgs {
            chunk: Some(3),
            source: TxSource::Pattern(PatternArgs {
                bytes: 64 << 20,
                stream: SendStream::Periodic(7),
                write_size: Some(64 << 10),
                corrupt_offset: Some(1000),
                flows: Flows::default(),
            }),
            timeout: Some(Duration::from_millis(500)),
            ..client("2001:db8::2")
        }),
    };
    assert_eq!(c, want);

    let c = run("-l --plain -s ::ffff:127.0.0.1 -p 5201 -v 7 --timeout 2");
    let want = plain_run(ModeArgs::Plain(PlainArgs {
        rx: Receive {
            validate: Some(StreamSpec::Periodic(7)),
            timeout: Some(Duration::from_secs(2)),
            ..receive("::ffff:127.0.0.1", 5201)
        },
        fail_on_linear: false,
        ifname: None,
        hds_thresh: None,
        rcvlowat: None,
    }));
    assert_eq!(c, want);

    // --seed replaces -v on senders (random too) and receivers.
    let c = run("--send-pattern 1G -s 192.0.2.1 -p 5201 --seed random");
    let ModeArgs::Sender(s) = c.mode else {
        panic!("not the sender: {c:?}");
    };
    assert_eq!(s.pattern.stream, SendStream::Keyed(Seed::Random));
    let mut c = run("-f eth0 --send-pattern 1M -s ::1 -p 1 --seed 0x10");
    let TxSource::Pattern(p) = &cli(&mut c).source else {
        panic!("not the pattern source: {c:?}");
    };
    assert_eq!(p.stream, SendStream::Keyed(Seed::Value(16)));
    let c = run("-l --plain -s ::1 -p 1 --seed 42");
    let ModeArgs::Plain(p) = c.mode else {
        panic!("not plain: {c:?}");
    };
    assert_eq!(p.rx.validate, Some(StreamSpec::keyed(42)));
    let c = run("-l --zcrx --zcrx-nodev -s ::1 -p 1 --seed 42");
    let ModeArgs::Zcrx(z) = c.mode else {
        panic!("not zcrx: {c:?}");
    };
    assert_eq!((z.nic, z.rx.validate), (None, Some(StreamSpec::keyed(42))));

    let c = run("-l --zcrx -f eth0 -s 2001:db8::1 -p 5201 --rx-buf-len 32768");
    let want = plain_run(ModeArgs::Zcrx(ZcrxArgs {
        nic: Some(nic("eth0")),
        rx: receive("2001:db8::1", 5201),
        area_size: None,
        rx_buf_len: Some(32768),
    }));
    assert_eq!(c, want);

    let c = run("--report -f eth0");
    let want = plain_run(ModeArgs::Report(ReportArgs {
        ifname: ifname("eth0"),
        rx_page_size: None,
        dmabuf_size: None,
    }));
    assert_eq!(c, want);
}

/// `--rcvlowat` reaches the plain receiver's arguments, also those of each run of a sweep of
/// it (`--peer`): the sweep's runs are that receiver's.
#[test]
fn rcvlowat_reaches_the_plain_receiver_and_its_sweep_runs() {
    assert_eq!(
        pln(&mut run(&format!("{PLAIN} --rcvlowat 512K"))).rcvlowat,
        Some(512 << 10)
    );
    let c = run(&format!("{PLAIN} --peer 2001:db8::2 --rcvlowat 64K"));
    let ModeArgs::Sweep(s) = c.mode else {
        panic!("not a sweep: {c:?}");
    };
    let ModeArgs::Plain(p) = *s.base else {
        panic!("not a sweep of the plain receiver: {s:?}");
    };
    assert_eq!(p.rcvlowat, Some(64 << 10));
}

/// `-p 0` (the kernel picks a free port, named in the listening line) is taken by the
/// listeners that name the port they got, the plain receiver and the peer server, and refused
/// everywhere the port is used before or beyond the listen: the devmem and zcrx servers (the
/// flow rule), the senders, a sweep (the peer is told the port).
#[test]
fn port_0_only_where_the_listener_names_its_port() {
    let ModeArgs::Plain(p) = run("-l --plain -s ::1 -p 0 -v 7").mode else {
        panic!("not plain");
    };
    assert_eq!(p.rx.port, 0);
    let ModeArgs::PeerServer(p) = run("--peer-server -s 127.0.0.1 -p 0").mode else {
        panic!("not the peer server");
    };
    assert_eq!(p.port, 0);
    for line in [
        SERVER.replace("-p 5201", "-p 0"),
        "-l --zcrx -f eth0 -s ::1 -p 0".into(),
        "-f eth0 -s ::1 -p 0".into(),
        "--send-pattern 1M -s ::1 -p 0 -v 7".into(),
        "-l --plain -s ::1 -p 0 --peer ::1 --sweep flows=1".into(),
    ] {
        let m = usage_err(&line);
        assert!(
            m.starts_with("-p: invalid port '0' (expected 1..=65535): port 0"),
            "`{line}`: {m}"
        );
    }
}

/// Adding `--plain` to a full devmem command line keeps every option the plain receiver
/// uses, accepts (and ignores) the devmem-only ones, and switches the mode.
#[test]
fn plain_accepts_a_devmem_command_line() {
    let devmem = format!("{SERVER} -c 2001:db8::2 -v 7 -t 3 -q 1 -n -L -b 16384 -A 1 -a 1 -U 2");
    let d = run(&devmem);
    let p = run(&format!("{devmem} --plain"));
    let ModeArgs::Server(d) = d.mode else {
        panic!("not the server: {d:?}");
    };
    let ModeArgs::Plain(p) = p.mode else {
        panic!("not plain: {p:?}");
    };
    assert_eq!((p.rx, p.fail_on_linear), (d.rx, d.fail_on_linear));
    assert!(p.fail_on_linear);
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
        assert_eq!(c.mode.mode(), *mode, "`{line}`");
        // The modes that take queues check -t/-q; the others accept and ignore them.
        let uses_queues = matches!(
            mode,
            Mode::Probe | Mode::Server | Mode::Client | Mode::ZcrxServer
        );
        match parse(&argv(&format!("{line} -t 1")), PAGE) {
            Err(Error::Usage(m)) if uses_queues => {
                assert!(m.starts_with("-t/-q: Both -t and -q"), "`{line}`: {m}")
            }
            Ok(Command::Run(_)) if !uses_queues => {}
            other => panic!("`{line} -t 1`: {other:?}"),
        }
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
        // SO_RCVLOWAT: the plain receiver's only (no devmem or zcrx case yet).
        (
            "-l -f eth0 -s ::1 -p 1 --rcvlowat 512K",
            "--rcvlowat: only applies to the plain receiver (-l --plain)",
        ),
        (
            "-l --zcrx -f eth0 -s ::1 -p 1 --rcvlowat 512K",
            "--rcvlowat: only applies to the plain receiver (-l --plain)",
        ),
        (
            "--send-pattern 1K -s ::1 -p 1 -v 7 --rcvlowat 512K",
            "--rcvlowat: only applies to the plain receiver (-l --plain)",
        ),
        (
            "-f eth0 -s ::1 -p 1 --send-pattern 1K -v 7 --rcvlowat 512K",
            "--rcvlowat: only applies to the plain receiver (-l --plain)",
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
        // No bound queue: nothing to spread over.
        (
            "-l --plain -s ::1 -p 1 --require-spread",
            "--require-spread: only applies to receivers with bound queues",
        ),
        (
            "-f eth0 -s ::1 -p 1 --require-spread",
            "--require-spread: only applies",
        ),
        (
            "-l --zcrx --zcrx-nodev -s ::1 -p 1 --require-spread",
            "--require-spread: --zcrx-nodev binds no queue",
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
        (
            "-z 0",
            "-z",
            "(expected 1..=4294967295 bytes, optional suffix K, M or G)",
        ),
        (
            "-z -1",
            "-z",
            "(expected 1..=4294967295 bytes, optional suffix K, M or G)",
        ),
        (
            "-z 4294967296",
            "-z",
            "(expected 1..=4294967295 bytes, optional suffix K, M or G)",
        ),
        (
            "-z 4G",
            "-z",
            "(expected 1..=4294967295 bytes, optional suffix K, M or G)",
        ),
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
        // -b takes suffixes as every byte size does (-b 16K is 16384); 12K is no power of two.
        ("-b 12K", "-b", "a power of two in 4096..=2147483648 bytes"),
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
        (
            "--rcvlowat 0",
            "--rcvlowat",
            "(expected 1..=1073741824 bytes, optional suffix K, M or G)",
        ),
        (
            "--rcvlowat 2G",
            "--rcvlowat",
            "(expected 1..=1073741824 bytes, optional suffix K, M or G)",
        ),
        (
            "--rcvlowat 1073741825",
            "--rcvlowat",
            "(expected 1..=1073741824 bytes, optional suffix K, M or G)",
        ),
        (
            "--rcvlowat -1",
            "--rcvlowat",
            "(expected 1..=1073741824 bytes, optional suffix K, M or G)",
        ),
        (
            "--rcvlowat abc",
            "--rcvlowat",
            "(expected 1..=1073741824 bytes, optional suffix K, M or G)",
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
        (
            "--memory nosuch",
            "--memory",
            "(expected udmabuf, dma-heap or dma-heap:NAME",
        ),
        (
            "--memory dma-heap:",
            "--memory",
            "NAME an entry of /dev/dma_heap)",
        ),
        (
            "--memory dma-heap:../x",
            "--memory",
            "NAME an entry of /dev/dma_heap)",
        ),
        ("--memory gpu", "--memory", "dma-heap:NAME"),
        ("--json=", "--json", "a non-empty path"),
    ];
    let mut c = run(&format!("{SERVER} -b 16K"));
    assert_eq!(srv(&mut c).rx_page_size, Some(16384));
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
    // Where --rcvlowat applies, the same words (exit 2: usage_err checks it).
    for bad in ["0", "2G", "-1", "abc"] {
        assert_eq!(
            usage_err(&format!("{PLAIN} --rcvlowat {bad}")),
            format!(
                "--rcvlowat: invalid receive low-water mark '{bad}' (expected \
                 1..=1073741824 bytes, optional suffix K, M or G)"
            )
        );
    }
}

/// `-b` and `--dmabuf-size` follow the page size given to the parser.
#[test]
fn page_size_is_a_parameter() {
    let line = argv("-f eth0 -b 8192 --dmabuf-size 36K");
    let Ok(Command::Run(mut c)) = parse(&line, 4096) else {
        panic!("4 KiB pages: 8192 and 36K are valid");
    };
    let p = prb(&mut c);
    assert_eq!(
        (p.rx_page_size, p.dmabuf_size),
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
        "-b: missing value BYTES (expected a power of two >= the page size that fits in 32 bits, in bytes, optional suffix K, M or G)"
    );
}

/// getopt behaviour: last value wins, values attached or separate, bundled flags, any order;
/// a value may start with '-' (it is then checked as a value), except that a separate value
/// spelled like one of our options is refused as a forgotten value.
#[test]
fn getopt_conventions() {
    let mut c = run("-f eth0 -f eth1 -l -s ::1 -s ::2 -p 1 -p 2 -v 7 -v 0 -A 1 -A 0");
    let s = srv(&mut c);
    assert_eq!(s.nic.ifname, ifname("eth1"));
    assert_eq!(s.rx.addr, addr("::2"));
    assert_eq!(s.rx.port, 2);
    assert_eq!(s.rx.validate, None);
    assert_eq!(s.so_autorelease, Some(false));
    let mut c = run("-f eth0 -s ::1 -p 1 --timeout 1 --timeout 0.25");
    assert_eq!(cli(&mut c).timeout, Some(Duration::from_millis(250)));
    let mut c = run("-f eth0 -l -l -n -n -s ::1 -p 1");
    assert!(srv(&mut c).nic.skip_nic_config);
    // Attached values and bundles.
    let c = run("-feth0 -ls ::1 -p5201 -q4 -t2 -v7 -nL");
    let mut want = server();
    let s = srv(&mut want);
    s.rx = Receive {
        validate: Some(StreamSpec::Periodic(7)),
        ..receive("::1", 5201)
    };
    s.nic.queues = queues(2, 4);
    s.nic.skip_nic_config = true;
    s.fail_on_linear = true;
    assert_eq!(c, want);
    let mut c = run("-p 5201 -s 192.0.2.1 -f eth0");
    assert_eq!(cli(&mut c).peer.addr.text, "192.0.2.1");
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
                format!("ncdevmem-rs {}\n", ncdevmem::VERSION),
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
    let mut c = run("-f eth0 -v 0 --timeout 0 --progress 0 -s 192.0.2.1 -p 1");
    let tx = cli(&mut c);
    assert_eq!((tx.source.clone(), tx.timeout), (TxSource::Stdin, None));
    assert_eq!(tx.peer.addr.text, "192.0.2.1");
    let c = run("-l --plain -v 0 --timeout 0 --progress 0 -s 192.0.2.1 -p 1");
    let ModeArgs::Plain(p) = c.mode else {
        panic!("not plain: {c:?}");
    };
    assert_eq!(
        (p.rx.validate, p.rx.timeout, p.rx.progress),
        (None, None, None)
    );
    assert_eq!(p.rx.addr.text, "192.0.2.1");
}

/// The command lines the kernel's tests give C ncdevmem
/// (`docs/kernel-interface.md#devmempy-command-lines`), with the meaning
/// each must have here. The devmem TX client takes `-t`/`-q`/`-n` (the netkit tests pass
/// them) and, as C, uses none of them.
#[test]
fn kernel_selftest_command_lines() {
    type Edit = fn(&mut Run);
    // ADDR 2001:db8::1 (local), REMOTE 2001:db8::2, PORT 5201, IF eth0; netkit guest nk0 with
    // V6 fd00::1 and nk_queue 3.
    let rows: &[(&str, &str, Edit)] = &[
        (
            "check_rx: ncdevmem -l -f IF -s ADDR -p PORT -c REMOTE -v 7",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -c 2001:db8::2 -v 7",
            |r| {
                *r = server();
                srv(r).nic.client = Some(addr("2001:db8::2"));
                srv(r).rx.validate = Some(StreamSpec::Periodic(7));
            },
        ),
        (
            "check_rx (IPv4): ncdevmem -l -f IF -s ADDR -p PORT -c REMOTE -v 7",
            "-l -f eth0 -s 192.0.2.1 -p 5201 -c 192.0.2.2 -v 7",
            |r| {
                *r = server();
                srv(r).rx.addr = addr("192.0.2.1");
                srv(r).nic.client = Some(addr("192.0.2.2"));
                srv(r).rx.validate = Some(StreamSpec::Periodic(7));
            },
        ),
        (
            "check_rx_hds: ncdevmem -l -f IF -s ADDR -p PORT -L",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -L",
            |r| {
                *r = server();
                srv(r).fail_on_linear = true;
            },
        ),
        (
            "check_rx_large_niov: ncdevmem -l -f IF -s ADDR -p PORT -v 7 -b 16384",
            "-l -f eth0 -s 2001:db8::1 -p 5201 -v 7 -b 16384",
            |r| {
                *r = server();
                srv(r).rx.validate = Some(StreamSpec::Periodic(7));
                srv(r).rx_page_size = Some(16384);
            },
        ),
        (
            "nk_devmem RX: ncdevmem -l -f NK -s V6 -p PORT -t nk_queue -q 1 -n -v 7",
            "-l -f nk0 -s fd00::1 -p 5201 -t 3 -q 1 -n -v 7",
            |r| {
                *r = server();
                let s = srv(r);
                s.nic.ifname = ifname("nk0");
                s.rx.addr = addr("fd00::1");
                s.nic.queues = queues(3, 1);
                s.nic.skip_nic_config = true;
                s.rx.validate = Some(StreamSpec::Periodic(7));
            },
        ),
        (
            "nk_devmem RX HDS: ncdevmem -l -f NK -s V6 -p PORT -t nk_queue -q 1 -n -L",
            "-l -f nk0 -s fd00::1 -p 5201 -t 3 -q 1 -n -L",
            |r| {
                *r = server();
                let s = srv(r);
                s.nic.ifname = ifname("nk0");
                s.rx.addr = addr("fd00::1");
                s.nic.queues = queues(3, 1);
                s.nic.skip_nic_config = true;
                s.fail_on_linear = true;
            },
        ),
        (
            "check_tx: ncdevmem -f IF -s REMOTE -p PORT",
            "-f eth0 -s 2001:db8::2 -p 5201",
            |r| *r = plain_run(ModeArgs::Client(client("2001:db8::2"))),
        ),
        (
            "check_tx_chunks: ncdevmem -f IF -s REMOTE -p PORT -z 3",
            "-f eth0 -s 2001:db8::2 -p 5201 -z 3",
            |r| {
                *r = plain_run(ModeArgs::Client(client("2001:db8::2")));
                cli(r).chunk = Some(3);
            },
        ),
        (
            "nk_devmem TX: ncdevmem -f NK -s V6 -p PORT -t 0 -q 1 -n",
            "-f nk0 -s fd00::2 -p 5201 -t 0 -q 1 -n",
            |r| {
                *r = plain_run(ModeArgs::Client(client("fd00::2")));
                cli(r).ifname = ifname("nk0");
            },
        ),
        (
            "nk_devmem TX chunks: ncdevmem -f NK -s V6 -p PORT -t 0 -q 1 -n -z 3",
            "-f nk0 -s fd00::2 -p 5201 -t 0 -q 1 -n -z 3",
            |r| {
                *r = plain_run(ModeArgs::Client(client("fd00::2")));
                cli(r).ifname = ifname("nk0");
                cli(r).chunk = Some(3);
            },
        ),
        ("require_devmem: ncdevmem -f IF", "-f eth0", |r| {
            *r = probe()
        }),
        (
            "require_devmem(rx_buf_size=16384): ncdevmem -f IF -b 16384",
            "-f eth0 -b 16384",
            |r| {
                *r = probe();
                prb(r).rx_page_size = Some(16384);
            },
        ),
    ];
    for (what, line, edit) in rows {
        let mut want = probe();
        edit(&mut want);
        assert_eq!(run(line), want, "{what}");
    }
}
