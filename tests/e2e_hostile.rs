//! The pattern sender, the peer server and the multi-flow receiver against hostile or broken
//! peers, over the host's loopback (no root needed): a receiver that reads a little now and
//! then, connections that send nothing, too little or a stream cut short, control clients that
//! send terminal control characters. Every case bounds its own time, so a regression fails
//! instead of hanging.
//!
//! The loopback is shared with every other process on the machine, so no port is picked by
//! binding port 0 and releasing it (another socket could take it before the receiver binds,
//! and its connections would go there: "0 of 2 flows connected" with both connects done).
//! Receivers and the peer server listen on `-p 0` and the test reads the port from their
//! listening line ([`Listening`]); a port where nothing may listen is held bound, not
//! listening, for the whole test ([`ClosedPort`]).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::bin::{text, BIN};

/// A loopback port held bound and not listening until drop: a connect there is refused
/// (`ECONNREFUSED`), and no other socket can listen there meanwhile.
struct ClosedPort {
    _sock: OwnedFd,
    port: u16,
}

impl ClosedPort {
    fn new() -> ClosedPort {
        use nix::sys::socket::SockaddrIn;
        use nix::sys::socket::{bind, getsockname, socket, AddressFamily, SockFlag, SockType};
        let sock = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        let any = SockaddrIn::new(127, 0, 0, 1, 0);
        bind(std::os::fd::AsRawFd::as_raw_fd(&sock), &any).expect("bind 127.0.0.1:0");
        let a: SockaddrIn =
            getsockname(std::os::fd::AsRawFd::as_raw_fd(&sock)).expect("getsockname");
        ClosedPort {
            _sock: sock,
            port: a.port(),
        }
    }

    fn arg(&self) -> String {
        self.port.to_string()
    }
}

/// Waits for `child` at most `limit`; kills it when it is still running then. Returns its
/// output and whether it ended on its own.
fn wait_bounded(mut child: Child, limit: Duration) -> (Output, bool) {
    let deadline = Instant::now() + limit;
    let on_its_own = loop {
        if child.try_wait().expect("try_wait").is_some() {
            break true;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (child.wait_with_output().expect("wait"), on_its_own)
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ncdevmem-rs")
}

/// A receiver or peer server started with `-p 0`, once it listens: the port the kernel gave
/// it, read from its `listening on [ADDR]:PORT` (`control on [ADDR]:PORT`) line.
struct Listening {
    child: Child,
    port: u16,
    /// Its stderr up to and including that line.
    head: String,
    /// The rest of its stderr.
    rest: common::bin::Lines,
}

impl Listening {
    /// Spawns `args` followed by `-p 0` and reads stderr until the listening line (at most
    /// 20 s; a child that ends or stays silent fails the test with what it printed).
    fn start(args: &[&str]) -> Listening {
        let mut child = spawn(&[args, &["-p", "0"]].concat());
        let (rest, head) = common::bin::wait_for(&mut child, "listening line", |l| {
            listening_port(l).is_some()
        });
        let port = head.lines().find_map(listening_port).expect("the port");
        Listening {
            child,
            port,
            head,
            rest,
        }
    }

    /// [`wait_bounded`], with the whole stderr in the output.
    fn wait(self, limit: Duration) -> (Output, bool) {
        let (mut out, on_its_own) = wait_bounded(self.child, limit);
        out.stderr = format!("{}{}", self.head, self.rest.rest()).into_bytes();
        (out, on_its_own)
    }
}

/// The port of a `ncdevmem-rs: listening on [ADDR]:PORT` or `... control on [ADDR]:PORT;`
/// line.
fn listening_port(line: &str) -> Option<u16> {
    let at = line
        .find("listening on [")
        .or_else(|| line.find("control on ["))?;
    let after = &line[at..];
    let digits = &after[after.find("]:")? + 2..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// A listener on loopback whose accepted connection reads `per` bytes every `every` for
/// `life` (a receive buffer of 4 KiB keeps the sender's queue short): a receiver slow enough
/// to keep the sender blocked in a write, fast enough that it never stalls for seconds.
/// Returns the port and the thread, which answers how many bytes it read.
fn trickle_receiver(
    per: usize,
    every: Duration,
    life: Duration,
) -> (u16, std::thread::JoinHandle<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the trickle receiver");
    nix::sys::socket::setsockopt(&l, nix::sys::socket::sockopt::RcvBuf, &4096).expect("SO_RCVBUF");
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().expect("accept");
        let start = Instant::now();
        let mut buf = vec![0u8; per];
        let mut total = 0u64;
        while start.elapsed() < life {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
            std::thread::sleep(every);
        }
        total
    });
    (port, t)
}

/// `--duration` bounds the pattern sender's time also when the receiver reads slowly (before,
/// the duration was checked only between writes of 256 KiB, and a receiver that accepted a
/// little every half second held a `--duration 1` sender for as long as it liked).
#[test]
fn a_slow_receiver_cannot_stretch_the_senders_duration() {
    let (port, rx) = trickle_receiver(2048, Duration::from_millis(200), Duration::from_secs(30));
    let port = port.to_string();
    let start = Instant::now();
    let tx = spawn(&[
        "--send-pattern",
        "1G",
        "-s",
        "127.0.0.1",
        "-p",
        &port,
        "--seed",
        "1",
        "--duration",
        "1",
    ]);
    let (out, on_its_own) = wait_bounded(tx, Duration::from_secs(20));
    let took = start.elapsed();
    assert!(
        on_its_own,
        "the sender with --duration 1 was still sending after 20 s: {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(6), "took {took:?}");
    drop(rx);
}

/// The peer server's control port, started on loopback with `--max-duration 1` (killed on
/// drop).
struct Peer {
    server: Option<Listening>,
    port: u16,
}

impl Peer {
    fn start() -> Peer {
        let server = Listening::start(&["--peer-server", "-s", "127.0.0.1", "--max-duration", "1"]);
        Peer {
            port: server.port,
            server: Some(server),
        }
    }

    /// A control connection sending `lines` (each with its `\n`).
    fn client(&self, lines: &[&str]) -> BufReader<TcpStream> {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the peer");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        for l in lines {
            w.write_all(l.as_bytes()).unwrap();
        }
        BufReader::new(s)
    }

    /// SIGINT, then its stderr; the peer server must end with exit 0 (its normal end).
    fn stop(self) -> String {
        self.stop_with(nix::sys::signal::Signal::SIGINT)
    }

    /// `signal`, then its stderr, asserting exit 0.
    fn stop_with(mut self, signal: nix::sys::signal::Signal) -> String {
        let server = self.server.take().expect("the peer server");
        let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        let (out, on_its_own) = server.wait(Duration::from_secs(10));
        assert!(on_its_own, "the peer server ignored {signal}");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "after {signal}: {err}");
        err
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

fn answer(r: &mut BufReader<TcpStream>) -> serde_json::Value {
    let mut line = String::new();
    r.read_line(&mut line).expect("an answer line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

const HELLO: &str = "{\"v\":1,\"type\":\"hello\",\"tool\":\"test\",\"version\":\"0\"}\n";

/// `--max-duration` bounds every send whatever the receiver does: a client asking for 100 s
/// from a peer limited to 1 s, whose receiver reads a little every 200 ms, gets `done` within
/// a few seconds (before, the peer went on sending for as long as the receiver kept reading).
#[test]
fn a_slow_receiver_cannot_stretch_the_peers_max_duration() {
    let peer = Peer::start();
    let (port, rx) = trickle_receiver(2048, Duration::from_millis(200), Duration::from_secs(40));
    let send = format!(
        "{{\"v\":1,\"type\":\"send\",\"run\":1,\"port\":{port},\"flows\":1,\"duration_s\":100.0,\
         \"stream\":{{\"seed\":1}},\"write_size\":null,\"tcp_cc\":null,\"devmem_tx\":false}}\n"
    );
    let start = Instant::now();
    let mut c = peer.client(&[HELLO, &send]);
    assert_eq!(answer(&mut c)["type"], "welcome");
    let started = answer(&mut c);
    assert_eq!(started["type"], "started", "{started}");
    assert_eq!(started["duration_s"], 1.0, "{started}");
    let done = answer(&mut c);
    let took = start.elapsed();
    assert_eq!(done["type"], "done", "{done}");
    assert!(
        took < Duration::from_secs(6),
        "the peer limited to 1 s answered done after {took:?}: {done}"
    );
    drop(c);
    drop(rx);
    peer.stop();
}

/// SIGINT and SIGTERM are the peer server's normal way to stop: it says so and exits 0, as
/// README's exit-code table and docs/lab.md state.
#[test]
fn a_stop_signal_ends_the_peer_server_with_exit_0() {
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let err = Peer::start().stop_with(signal);
        assert!(
            err.contains("peer server: stopped by a signal"),
            "{signal}: {err}"
        );
    }
}

/// `len` bytes of flow `flow` of `flows` of the keyed stream of `seed`.
fn keyed(seed: u64, flow: u32, flows: u32, len: usize) -> Vec<u8> {
    use ncdevmem::validate::{KeyedFlow, Pattern, StreamSpec};
    let spec = StreamSpec::Keyed(KeyedFlow::new(seed, flow, flows).expect("flow in range"));
    let mut buf = vec![0u8; len];
    Pattern::from_spec(spec).expect("pattern").fill(&mut buf, 0);
    buf
}

/// Starts `-l --plain --flows N --seed 3` on loopback with `extra`, waits until it listens,
/// connects one client per entry of `conns` (in that order, each kept open until all are
/// connected, then written and closed one after the other) and returns the receiver's exit
/// code, its stderr and its `--json` object.
fn receive_from(
    flows: u32,
    extra: &[&str],
    conns: &[Vec<u8>],
) -> (Option<i32>, String, serde_json::Value) {
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = std::env::temp_dir().join(format!(
        "ncdevmem-hostile-{}-{run}.json",
        std::process::id()
    ));
    let rx = plain_receiver(
        flows,
        &[&["--json", json.to_str().unwrap()], extra].concat(),
    );
    let socks: Vec<TcpStream> = conns
        .iter()
        .map(|_| TcpStream::connect(("127.0.0.1", rx.port)).expect("connect"))
        .collect();
    for (mut s, data) in socks.into_iter().zip(conns) {
        s.write_all(data).expect("write");
        drop(s);
    }
    let (out, on_its_own) = rx.wait(Duration::from_secs(20));
    assert!(on_its_own, "the receiver hung: {}", text(&out.stderr));
    let j = common::bin::read_json(&json);
    let _ = std::fs::remove_file(&json);
    (out.status.code(), text(&out.stderr), j)
}

/// The plain receiver of `flows` flows of the keyed stream of seed 3 on loopback, on a port
/// the kernel picks (`--timeout 10`, then `extra`), once it listens.
fn plain_receiver(flows: u32, extra: &[&str]) -> Listening {
    let n = flows.to_string();
    let mut args = vec![
        "-l",
        "--plain",
        "-s",
        "127.0.0.1",
        "--flows",
        &n,
        "--seed",
        "3",
        "--timeout",
        "10",
    ];
    args.extend_from_slice(extra);
    Listening::start(&args)
}

/// A validated multi-flow run fails a connection that sent nothing, as a single-flow run does
/// (before, the run passed with that flow at 0 bytes).
#[test]
fn a_connection_that_sends_nothing_fails_a_validated_multi_flow_run() {
    let (code, err, j) = receive_from(2, &[], &[Vec::new(), keyed(3, 1, 2, 100_000)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("flow 0: the peer closed without sending any data: nothing was validated"),
        "{err}"
    );
    assert_eq!(j["ok"], false, "{j}");
    assert_eq!(j["flows"][0]["ok"], false, "{j}");
    assert_eq!(j["flows"][1]["ok"], true, "{j}");
}

/// A flow that stays connected and silent through a fixed-time run fails with what the kernel
/// saw of it: no byte reached its socket (before, the error said only "nothing was
/// validated", which cannot tell a receiver that never read from data that never arrived).
#[test]
fn a_silent_flow_of_a_timed_run_fails_with_what_the_kernel_received() {
    let rx = plain_receiver(2, &["--duration", "2"]);
    let silent = TcpStream::connect(("127.0.0.1", rx.port)).expect("connect");
    let mut busy = TcpStream::connect(("127.0.0.1", rx.port)).expect("connect");
    let data = keyed(3, 1, 2, 4 << 20);
    let writer = std::thread::spawn(move || {
        let _ = busy.write_all(&data);
        busy
    });
    let (out, on_its_own) = rx.wait(Duration::from_secs(20));
    drop(silent);
    drop(writer.join());
    let err = text(&out.stderr);
    assert!(on_its_own, "the receiver hung: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "flow 0: no data within --duration: nothing was validated (TCP_INFO: 0 bytes \
             received in 0 data segments, "
        ),
        "{err}"
    );
}

/// `--expect-bytes` holds for every flow of a multi-flow run (before, it was ignored there and
/// a run of two 100000-byte flows passed `--expect-bytes 5`).
#[test]
fn expect_bytes_holds_for_every_flow() {
    let conns = [keyed(3, 0, 2, 100_000), keyed(3, 1, 2, 99_999)];
    let (code, err, j) = receive_from(2, &["--expect-bytes", "100000"], &conns);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("flow 1: the peer sent 99999 bytes, --expect-bytes wanted 100000"),
        "{err}"
    );
    assert_eq!(j["flows"][0]["ok"], true, "{j}");
    let conns = [keyed(3, 0, 2, 100_000), keyed(3, 1, 2, 100_000)];
    let (code, err, _) = receive_from(2, &["--expect-bytes", "100000"], &conns);
    assert_eq!(code, Some(0), "{err}");
}

/// Connections accepted in the other order are reported in stream order, with one readable
/// line each (before, the line held a run of 18 spaces from a broken string continuation).
#[test]
fn flows_accepted_out_of_order_are_named_on_one_readable_line() {
    let conns = [keyed(3, 1, 2, 100_000), keyed(3, 0, 2, 100_000)];
    let (code, err, j) = receive_from(2, &[], &conns);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "accepted connection 0 carries flow 1's stream (by its first bytes): reported as flow 1\n"
        ),
        "{err}"
    );
    // Flow k is the connection that carried flow k's bytes, every one of them checked.
    for (k, conn) in [(0, 1), (1, 0)] {
        let f = &j["flows"][k];
        assert_eq!(f["connection"], conn, "{j}");
        assert_eq!(f["stream"], format!("seed 3 flow {k} of 2"), "{j}");
        assert_eq!(f["validated_bytes"], 100_000, "{j}");
        assert_eq!(f["mismatches"], 0, "{j}");
    }
}

/// A connection that sent too few bytes to name its flow carried no flow's stream: the
/// connection that carried flow 0's whole stream is flow 0 and passes, and the short one takes
/// the number left over, flow 1, whose stream then never came (before: the short connection
/// counted as flow 0's carrier because it was accepted first; then, that it was flow 0 and
/// failed on its own bytes, which were another flow's).
#[test]
fn a_connection_too_short_to_name_its_flow_is_no_flows_carrier() {
    let conns = [keyed(3, 1, 2, 3), keyed(3, 0, 2, 100_000)];
    let (code, err, j) = receive_from(2, &[], &conns);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("as connection 0 does"), "{err}");
    assert!(
        err.contains(
            "flow 1: no connection carried its stream (connection 0, reported as flow 1, sent \
             3 byte(s), too few to name a flow (8))"
        ),
        "{err}"
    );
    assert_eq!(j["flows"][0]["ok"], true, "{j}");
    assert_eq!(j["flows"][0]["connection"], 1, "{j}");
    assert_eq!(j["flows"][1]["ok"], false, "{j}");
}

/// `--csv` and `--plot` that cannot be written are usage errors before the sweep starts (exit
/// 2, no peer contacted), as `--json` is: a directory, a folder that takes no new file
/// (`/proc`). Before, only a missing folder was found then; these cost the whole sweep and
/// failed at its end (the error printed twice).
#[test]
fn unwritable_csv_and_plot_paths_are_refused_before_the_sweep() {
    let dir = std::env::temp_dir();
    let dir = dir.to_str().unwrap();
    // The peer's port and the receiver's: nothing listens there (the sweep ends before it
    // would listen on its own).
    let (data, peer) = (ClosedPort::new(), ClosedPort::new());
    let (port, ctrl) = (data.arg(), peer.arg());
    for (flag, path, why) in [
        ("--csv", dir, "is a directory"),
        ("--plot", dir, "is a directory"),
        (
            "--plot",
            "/proc/ncdevmem-hostile.svg",
            "--plot: cannot write",
        ),
        ("--csv", "/proc/ncdevmem-hostile.csv", "--csv: cannot write"),
    ] {
        let child = spawn(&[
            "-l",
            "--plain",
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "--peer",
            "127.0.0.1",
            "--peer-port",
            &ctrl,
            "--sweep",
            "flows=1",
            "--duration",
            "1",
            flag,
            path,
        ]);
        let (out, on_its_own) = wait_bounded(child, Duration::from_secs(20));
        assert!(on_its_own);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {path}: {err}");
        assert!(err.contains(why), "{flag} {path}: {err}");
        assert!(!err.contains("sweep of"), "the sweep started: {err}");
    }
}

/// An output that fails at the end of a sweep (`/dev/full`: a device, left to the write) is
/// printed once, beside what stopped the sweep (before, it was printed twice).
#[test]
fn an_output_that_fails_at_the_end_is_printed_once() {
    // The peer's port and the receiver's: nothing listens there (the sweep ends before it
    // would listen on its own).
    let (data, peer) = (ClosedPort::new(), ClosedPort::new());
    let (port, ctrl) = (data.arg(), peer.arg());
    let child = spawn(&[
        "-l",
        "--plain",
        "-s",
        "127.0.0.1",
        "-p",
        &port,
        "--peer",
        "127.0.0.1",
        "--peer-port",
        &ctrl,
        "--sweep",
        "flows=1",
        "--duration",
        "1",
        "--csv",
        "/dev/full",
    ]);
    let (out, on_its_own) = wait_bounded(child, Duration::from_secs(20));
    assert!(on_its_own);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("--csv: write(/dev/full)").count(), 1, "{err}");
    assert!(err.contains("ECONNREFUSED"), "the peer is not there: {err}");
}

/// A receiver that no client reaches says it waited the `--timeout` given (before: "no
/// connection within 999 ms" for `--timeout 1`, and what was left of it for a later flow).
#[test]
fn an_accept_timeout_names_the_timeout_given() {
    for (flows, want) in [
        ("1", "no connection within 1000 ms\n"),
        (
            "3",
            "no connection within 1000 ms: 0 of 3 flows connected within --timeout\n",
        ),
    ] {
        let rx = Listening::start(&[
            "-l",
            "--plain",
            "-s",
            "127.0.0.1",
            "-v",
            "7",
            "--timeout",
            "1",
            "--flows",
            flows,
        ]);
        let (out, on_its_own) = rx.wait(Duration::from_secs(20));
        assert!(on_its_own);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// `-p 0`: the receiver's listening line names the port the kernel gave it, in the line's
/// usual form, and it accepts there; with `--quiet` the line is still printed (it is the only
/// way to learn the port).
#[test]
fn port_0_names_the_port_it_got() {
    for quiet in [&[][..], &["--quiet"][..]] {
        let rx = plain_receiver(1, quiet);
        assert_ne!(rx.port, 0);
        assert_eq!(
            rx.head.lines().last(),
            Some(format!("ncdevmem-rs: listening on [127.0.0.1]:{}", rx.port).as_str()),
            "{quiet:?}: {}",
            rx.head
        );
        let mut s = TcpStream::connect(("127.0.0.1", rx.port)).expect("connect");
        s.write_all(&keyed(3, 0, 1, 10_000)).expect("write");
        drop(s);
        let (out, on_its_own) = rx.wait(Duration::from_secs(20));
        assert!(on_its_own);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{quiet:?}: {}",
            text(&out.stderr)
        );
    }
}

/// A `--pid-file` path of this test process for `tag`.
fn pid_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ncdevmem-hostile-{}-{tag}.pid", std::process::id()))
}

/// The process id in `path`, once the file is there (at most 10 s after the listening line:
/// the file is written right after it).
fn read_pid(path: &std::path::Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            assert!(s.ends_with('\n'), "{path:?}: {s:?}");
            return s.trim_end().parse().expect("a process id and a newline");
        }
        assert!(Instant::now() < deadline, "{path:?} was not written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--pid-file` of the peer server (issue 35: in a guest, `ip netns exec` forks and `$!` is
/// not the tool): once it listens the file holds its own process id; SIGTERM to that id ends
/// it within 2 s with exit 0, and the file is gone. SIGINT and SIGUSR1 the same.
#[test]
fn the_peer_servers_pid_file_names_it_and_goes_when_it_stops() {
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGUSR1,
    ] {
        let path = pid_path(&format!("peer-{signal}"));
        let _ = std::fs::remove_file(&path);
        let server = Listening::start(&[
            "--peer-server",
            "-s",
            "127.0.0.1",
            "--pid-file",
            path.to_str().unwrap(),
        ]);
        let pid = read_pid(&path);
        assert_eq!(pid, server.child.id() as i32, "{signal}");
        let sent = Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("kill");
        let (out, on_its_own) = server.wait(Duration::from_secs(10));
        let took = sent.elapsed();
        let err = text(&out.stderr);
        assert!(on_its_own, "{signal}: the peer server kept running: {err}");
        assert!(
            took < Duration::from_secs(2),
            "{signal}: took {took:?}: {err}"
        );
        assert_eq!(out.status.code(), Some(0), "{signal}: {err}");
        assert!(!path.exists(), "{signal}: {path:?} left behind: {err}");
    }
}

/// A listening receiver's `--pid-file` is written once it listens and removed on every way
/// out: a pass (exit 0), a failure (exit 1, a stream that does not match) and a stop signal
/// (SIGTERM to the id in the file, while it waits for its connection).
#[test]
fn a_receivers_pid_file_goes_on_pass_fail_and_signal() {
    for (case, want) in [("pass", 0), ("fail", 1), ("signal", 1)] {
        let path = pid_path(&format!("rx-{case}"));
        let _ = std::fs::remove_file(&path);
        let rx = plain_receiver(1, &["--pid-file", path.to_str().unwrap()]);
        let pid = read_pid(&path);
        assert_eq!(pid, rx.child.id() as i32, "{case}");
        match case {
            "signal" => nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .expect("kill"),
            _ => {
                let mut data = keyed(3, 0, 1, 100_000);
                if case == "fail" {
                    data[5000] ^= 1;
                }
                let mut s = TcpStream::connect(("127.0.0.1", rx.port)).expect("connect");
                s.write_all(&data).expect("write");
            }
        }
        let (out, on_its_own) = rx.wait(Duration::from_secs(20));
        let err = text(&out.stderr);
        assert!(on_its_own, "{case}: the receiver hung: {err}");
        assert_eq!(out.status.code(), Some(want), "{case}: {err}");
        assert!(!path.exists(), "{case}: {path:?} left behind: {err}");
    }
}

/// A `--pid-file` that cannot be written, or that holds the id of a running process
/// (another instance), is a usage error (exit 2) before anything starts (no listening line),
/// for the peer server and a receiver; an old file at the path is left as it was. Outside the
/// modes that listen the option is refused.
#[test]
fn an_unwritable_pid_file_is_refused_before_listening() {
    let blocked = pid_path("a-directory");
    std::fs::create_dir_all(&blocked).unwrap();
    let no_dir = "/nonexistent-ncdevmem-dir/x.pid";
    let dir_arg = blocked.to_str().unwrap();
    // This test process is running: its id in the file stands for another instance.
    let running = pid_path("running");
    let running_line = format!("{}\n", std::process::id());
    std::fs::write(&running, &running_line).unwrap();
    let running_arg = running.to_str().unwrap();
    let peer: &[&str] = &["--peer-server", "-s", "127.0.0.1", "-p", "0"];
    let receiver: &[&str] = &["-l", "--plain", "-s", "127.0.0.1", "-p", "0"];
    for (mode, path) in [
        (peer, no_dir),
        (peer, dir_arg),
        (peer, running_arg),
        (receiver, no_dir),
        (receiver, "/proc/x.pid"),
        (receiver, running_arg),
    ] {
        let args = &[mode, &["--pid-file", path]].concat();
        let (out, on_its_own) = wait_bounded(spawn(args), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert!(on_its_own, "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("ncdevmem-rs: --pid-file: "), "{args:?}: {err}");
        assert!(!err.contains(" on ["), "{args:?} listened: {err}");
    }
    assert!(blocked.is_dir());
    let _ = std::fs::remove_dir(&blocked);
    assert_eq!(std::fs::read_to_string(&running).unwrap(), running_line);
    let _ = std::fs::remove_file(&running);
    let out = Command::new(BIN)
        .args([
            "--send-pattern",
            "1",
            "-s",
            "127.0.0.1",
            "-p",
            "9",
            "-v",
            "7",
        ])
        .args(["--pid-file", "x.pid"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--pid-file: only applies to receivers (-l) and --peer-server"),
        "{}",
        text(&out.stderr)
    );
}
