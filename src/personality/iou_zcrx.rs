//! The `iou-zcrx` personality: the command line of the kernel's io_uring zero-copy receive
//! selftest (`tools/testing/selftests/drivers/net/hw/iou-zcrx.c`, driven by `iou-zcrx.py`), run
//! on this crate's zcrx receive ([`crate::uring`]), `'a'..'z'` stream validation
//! ([`StreamSpec::Alphabet`]) and pattern sender ([`crate::tx::send_pattern`]).
//!
//! Options (getopt string `sch:p:l:i:q:o:z:x:dt:`; numbers as C's `strtoul(…, 0)`: decimal,
//! `0x` hex or `0` octal, here refused when anything but digits follows):
//! * `-s` server (receiver) or `-c` client (sender); exactly one.
//! * `-i IFNAME`, `-q QUEUE` (server): the device and first RX queue the zcrx ifq is registered
//!   on; `-t N` threads use queues `QUEUE..QUEUE+N`.
//! * `-p PORT` (default 8000): the server listens on `[::]:PORT`; the client connects there.
//! * `-h HOST` (client only; IPv4 is v4-mapped): the server; `::` when absent, as C.
//! * `-l LEN` (client): bytes per `send`, at most [`MAX_PAYLOAD_LEN`] (the default).
//! * `-z SIZE`: bytes per connection: the client sends them; the server expects them (default
//!   [`SEND_SIZE`]) unless `-o` is given.
//! * `-x N` (server): `rx_buf_len` = N pages; any size but one page takes the area from 2 MiB
//!   hugepages.
//! * `-o N` (server): receive with length-limited requests of one page, re-armed N times after
//!   the first ends; each connection must deliver some data.
//! * `-d` (server): register the ifq and exit (a probe).
//! * `-t N`: the server runs N workers, each with its own ring and ifq (queue `QUEUE+i`), and
//!   accepts N×N connections, each handed to the worker whose queue's NAPI id it arrived on
//!   (`SO_INCOMING_NAPI_ID`); the client opens N×N connections at once.
//!
//! Exit codes, as iou-zcrx.c: 0 success; [`EXIT_SKIP`] (42) when hugepages for `-x` cannot be
//! had or the kernel or device refuses `rx_buf_len` (`EINVAL`, `EOPNOTSUPP`, `ERANGE`), with
//! the reason on stdout; 1 for everything else, bad options included. Differences from C: bad
//! numbers, unknown options and missing `-i`/`-q` are errors instead of being ignored or
//! crashing; the server waits for its first connection without a deadline (C blocks in its
//! accept too), then up to [`DEADLINE`] for each later connection and for data on each (C: one
//! 5 s limit on the whole receive, checked between completions, counted from the listen in the
//! iou-zcrx.c without `-t`, so there a first connection after 5 s still fails, and from the
//! last accept in the later one with `-t`); each connection is validated by stream offset; the
//! client retries a refused connect for 5 s and sets `TCP_NODELAY` (the pattern sender does with a
//! write size); each server worker prints one line to stderr with what it validated.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicI32;
use std::sync::mpsc;
use std::time::Duration;

use crate::caps::Missing;
use crate::cli::HostAddr;
use crate::conn::QueueDispatch;
use crate::engine::{self, FLOW_FAILED};
use crate::error::{Error, Result};
use crate::netlink::netdev::Netdev;
use crate::signals::{self, STOP};
use crate::sys::socket;
use crate::tx::{self, PatternSend, SendFlows};
use crate::uring::{self, LimitedRecv, RingParams, Zcrx, ZcrxParams, ZcrxRxConfig, ZcrxTarget};
use crate::validate::StreamSpec;

/// The file name (`argv[0]`) that selects this personality.
pub const NAME: &str = "iou-zcrx";
/// Exit code for "cannot run here" (iou-zcrx.c `SKIP_CODE`).
pub const EXIT_SKIP: u8 = 42;
/// Exit code for every failure, bad options included (iou-zcrx.c's `error(1, …)`).
pub const EXIT_FAIL: u8 = 1;
/// `-p` default.
pub const DEFAULT_PORT: u16 = 8000;
/// `-z` default: bytes per connection (iou-zcrx.c `SEND_SIZE`, 512 × 4096).
pub const SEND_SIZE: u64 = 512 * 4096;
/// Largest (and default) `-l`: [`SEND_SIZE`] less an IPv6 header (40), a TCP header (20) and
/// the most TCP options (40), as iou-zcrx.c.
pub const MAX_PAYLOAD_LEN: u64 = SEND_SIZE - 40 - 20 - 40;
/// Largest `-t`: N×N connections and one 8192-page area per worker.
pub const MAX_THREADS: u32 = 16;
/// Most connections one worker takes (iou-zcrx.c `MAX_CONNS_PER_THREAD`).
pub const MAX_CONNS_PER_THREAD: usize = 64;
/// How long the server waits for each connection after the first (which it waits for without
/// a deadline), and for data on each.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Sender or receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `-s`.
    Server,
    /// `-c`.
    Client,
}

/// The parsed command line (see the module doc for each option).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `-s` or `-c`.
    pub role: Role,
    /// `-h` (client).
    pub host: Option<HostAddr>,
    /// `-p`.
    pub port: u16,
    /// `-l`, bytes per `send`.
    pub payload_len: u64,
    /// `-i`.
    pub ifname: Option<String>,
    /// `-q`, the first RX queue.
    pub queue: Option<u32>,
    /// `-o N`: one-page requests re-armed N times.
    pub oneshot_recvs: Option<u32>,
    /// `-z`, bytes per connection.
    pub send_size: u64,
    /// `-x N` as bytes (N × page size); `None` for no `-x` or `-x 0` (the kernel's default).
    pub rx_buf_len: Option<u32>,
    /// `-d`.
    pub dry_run: bool,
    /// `-t` (1 without it).
    pub threads: u32,
}

fn usage() -> String {
    format!(
        "usage: {NAME} (-s|-c) -h<server_ip> -p<port> -l<payload_size> -i<ifname> -q<rxq_id> \
         [-o<recvs>] [-z<size>] [-x<pages>] [-d] [-t<num_threads>]"
    )
}

/// `strtoul(text, NULL, 0)` without its leniency: `0x`/`0X` hex, a leading `0` octal, else
/// decimal; nothing else may follow. `None` for garbage or a value above `u64`.
fn c_number(text: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = text.strip_prefix("0x").or(text.strip_prefix("0X")) {
        (h, 16)
    } else if text.len() > 1 && text.starts_with('0') {
        (&text[1..], 8)
    } else {
        (text, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// A number of `-flag` in `min..=max`.
fn number(flag: char, text: &str, min: u64, max: u64) -> Result<u64> {
    match c_number(text) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(Error::Usage(format!(
            "-{flag}: invalid value '{text}' (expected a number in {min}..={max}; decimal, 0x \
             hex or 0 octal)"
        ))),
    }
}

/// Parses the arguments after `argv[0]`. `page_size` (bytes) scales `-x`.
///
/// Errors: `Error::Usage` for no arguments, an unknown option, a missing or bad value, a
/// positional argument, both or neither of `-s`/`-c`, `-h` on the server, a server without
/// `-i` or `-q`, `-l` above [`MAX_PAYLOAD_LEN`], `-t` outside 1..=[`MAX_THREADS`].
pub fn parse(argv: &[String], page_size: usize) -> Result<Options> {
    if argv.is_empty() {
        return Err(Error::Usage(usage()));
    }
    let mut opts = getopts::Options::new();
    opts.parsing_style(getopts::ParsingStyle::FloatingFrees);
    for f in ["s", "c", "d"] {
        opts.optflagmulti(f, "", "");
    }
    for f in ["h", "p", "l", "i", "q", "o", "z", "x", "t"] {
        opts.optmulti(f, "", "", "");
    }
    let m = opts.parse(argv).map_err(|e| {
        use getopts::Fail;
        Error::Usage(match e {
            Fail::UnrecognizedOption(n) => format!("unknown option '{n}'; {}", usage()),
            Fail::ArgumentMissing(n) => format!("-{n}: missing value"),
            other => other.to_string(),
        })
    })?;
    if let Some(free) = m.free.first() {
        return Err(Error::Usage(format!(
            "unexpected argument '{free}'; {}",
            usage()
        )));
    }
    // As getopt: the last of a repeated option wins.
    let last = |f: &str| m.opt_strs(f).pop();
    let role = match (m.opt_present("s"), m.opt_present("c")) {
        (true, true) => return Err(Error::Usage("Pass one of -s or -c".into())),
        (true, false) => Role::Server,
        (false, true) => Role::Client,
        (false, false) => return Err(Error::Usage(format!("pass -s or -c; {}", usage()))),
    };
    let host = match last("h") {
        Some(_) if role == Role::Server => {
            return Err(Error::Usage("Receiver cannot have -h specified".into()))
        }
        Some(h) => {
            let host = HostAddr::parse("-h", "IP address", &h)?;
            host.refuse_unscoped_link_local("-h")?;
            Some(host)
        }
        None => None,
    };
    let num = |f: char, min: u64, max: u64| -> Result<Option<u64>> {
        last(&f.to_string())
            .map(|t| number(f, &t, min, max))
            .transpose()
    };
    let port = num('p', 0, u64::from(u16::MAX))?.map_or(DEFAULT_PORT, |p| p as u16);
    let payload_len = match last("l") {
        Some(t) => match c_number(&t) {
            Some(v) if v > MAX_PAYLOAD_LEN => {
                return Err(Error::Usage(format!(
                    "-l: payload exceeds max ({MAX_PAYLOAD_LEN})"
                )))
            }
            _ => number('l', &t, 1, MAX_PAYLOAD_LEN)?,
        },
        None => MAX_PAYLOAD_LEN,
    };
    let queue = num('q', 0, u64::from(u32::MAX))?.map(|q| q as u32);
    let oneshot_recvs = num('o', 0, u64::from(u32::MAX))?.map(|o| o as u32);
    let send_size = num('z', 0, u64::MAX)?.unwrap_or(SEND_SIZE);
    let max_pages = u64::from(u32::MAX) / page_size.max(1) as u64;
    let rx_buf_len = num('x', 0, max_pages)?
        .filter(|&n| n > 0)
        .map(|n| (n * page_size as u64) as u32);
    let threads = num('t', 1, u64::from(MAX_THREADS))?.map_or(1, |t| t as u32);
    let ifname = last("i");
    if role == Role::Server {
        if ifname.is_none() {
            return Err(Error::Usage("-s needs -i <ifname>".into()));
        }
        match queue {
            None => return Err(Error::Usage("-s needs -q <rxq_id>".into())),
            Some(q) if u64::from(q) + u64::from(threads) - 1 > u64::from(u32::MAX) => {
                return Err(Error::Usage(format!(
                    "-q {q} with -t {threads}: queue ids past {}",
                    u32::MAX
                )))
            }
            Some(_) => {}
        }
    }
    Ok(Options {
        role,
        host,
        port,
        payload_len,
        ifname,
        queue,
        oneshot_recvs,
        send_size,
        rx_buf_len,
        dry_run: m.opt_present("d"),
        threads,
    })
}

/// The exit code of a run that ended with `e`: [`EXIT_SKIP`] for a skip, else [`EXIT_FAIL`].
pub fn exit_code(e: &Error) -> u8 {
    match e {
        Error::Skip(_) => EXIT_SKIP,
        _ => EXIT_FAIL,
    }
}

/// Runs the personality on `argv` (after `argv[0]`) and returns the exit code. Errors go to
/// stderr; a skip's reason goes to stdout (iou-zcrx.py reports a probe's stdout).
pub fn main(argv: &[String]) -> u8 {
    let result = parse(argv, crate::sys::page_size())
        .and_then(|o| signals::install().and_then(|()| run(&o)));
    match result {
        Ok(()) => 0,
        Err(Error::Skip(reason)) => {
            // stdout may be full or without a reader: the reason then goes to stderr, still a
            // skip.
            if crate::run_report::print_stdout(&format!("{reason}\n")).is_err() {
                crate::elog!("{NAME}: skip: {reason}");
            }
            EXIT_SKIP
        }
        Err(e) => {
            crate::elog!("{NAME}: {e}");
            exit_code(&e)
        }
    }
}

/// Runs the server or the client.
///
/// Errors: see [`run_server`] and [`run_client`].
pub fn run(o: &Options) -> Result<()> {
    match o.role {
        Role::Server => run_server(o),
        Role::Client => run_client(o),
    }
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

/// `-c`: N×N connections (N = `-t`), each a flow of [`tx::send_flows`] (the one flow engine:
/// connected one after another, then sending together) of `-z` bytes of the `'a'..'z'`
/// stream in `-l`-byte writes.
///
/// Errors: as [`tx::send_flows`]: the first failing connection's error, named `flow k: …` when
/// there are several (the others stop); `Error::Sys` for connect or send; `Error::Interrupted`.
pub fn run_client(o: &Options) -> Result<()> {
    let peer = SocketAddrV6::new(
        o.host
            .as_ref()
            .map_or(Ipv6Addr::UNSPECIFIED, HostAddr::socket_ip),
        o.port,
        0,
        0,
    );
    let req = PatternSend {
        peer,
        local: None,
        ifname: None,
        stream: StreamSpec::Alphabet,
        total_bytes: o.send_size,
        write_size: Some(o.payload_len as usize),
        timeout: None,
        corrupt_offset: None,
    };
    let flows = SendFlows {
        count: o.threads * o.threads,
        ..SendFlows::default()
    };
    tx::send_flows(&req, &flows, &STOP).1
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

/// `if_nametoindex(3)`; an unknown name fails as iou-zcrx.c ("bad interface name").
fn ifindex(ifname: &str) -> Result<u32> {
    crate::sys::if_index(ifname)
        .map_err(|_| Error::Failure(format!("bad interface name: {ifname}")))
}

/// Which failures are skips, as iou-zcrx.c decides: the hugepage area cannot be mapped, or,
/// with `rx_buf_len`, registration fails with `EINVAL`, `EOPNOTSUPP` or `ERANGE`. A skip the
/// library decided on (e.g. io_uring disabled) is a failure here, as in C.
fn c_verdict(e: Error, rx_buf_len: Option<u32>) -> Error {
    let (call, errno) = match &e {
        Error::Sys { call, errno } => (call.as_str(), *errno),
        Error::Skip(reason) => return Error::Failure(reason.to_string()),
        _ => return e,
    };
    if call.starts_with("mmap(") && call.contains("MAP_HUGETLB") {
        return Error::Skip(Missing::IouZcrxHugepages {
            answer: e.to_string(),
        });
    }
    if call.starts_with("io_uring_register(IORING_REGISTER_ZCRX_IFQ")
        && rx_buf_len.is_some()
        && matches!(errno, libc::EINVAL | libc::EOPNOTSUPP | libc::ERANGE)
    {
        return Error::Skip(Missing::IouZcrxLargeChunks {
            errno,
            answer: e.to_string(),
        });
    }
    e
}

/// What each worker registers and how it receives.
struct WorkerPlan {
    params: ZcrxParams,
    rx: ZcrxRxConfig,
    /// Bytes each connection must deliver; `None` (with `-o`): some.
    expect: Option<u64>,
}

/// `-s`: binds `[::]:PORT`; N workers (N = `-t`) each create a ring and register an ifq on
/// queue `QUEUE+i` of `-i` (8192 pages of area, hugetlb for a `-x` other than one page);
/// with `-d` that is all. Then listens, accepts N×N connections (the first without a
/// deadline, each later one within [`DEADLINE`]), hands each to the worker of its NAPI id
/// (N > 1), and every worker receives its connections in turn, validating the `'a'..'z'`
/// stream.
///
/// Errors: `Error::Skip` as `c_verdict`; `Error::Failure` for a bad interface, an unknown
/// NAPI id, a short connection; `Error::Timeout` without a later connection or data;
/// `Error::Sys` and validation failures from the receive; `Error::Interrupted` on a stop
/// signal (also while waiting for the first connection).
pub fn run_server(o: &Options) -> Result<()> {
    let ifname = o
        .ifname
        .clone()
        .ok_or_else(|| Error::Usage("-s needs -i <ifname>".into()))?;
    let first_queue = o
        .queue
        .ok_or_else(|| Error::Usage("-s needs -q <rxq_id>".into()))?;
    let ifindex = ifindex(&ifname)?;
    let page = crate::sys::page_size();
    let area_len = uring::DEFAULT_AREA_PAGES * page;
    let buf_len = o.rx_buf_len.map_or(page, |l| l as usize);
    let listener_addr = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, o.port, 0, 0);
    let plan = |i: u32| WorkerPlan {
        params: ZcrxParams {
            target: ZcrxTarget::Device {
                ifname: ifname.clone(),
                ifindex,
                rxq: first_queue + i,
            },
            area_len,
            hugetlb: buf_len != page,
            rq_entries: ZcrxParams::rq_entries_for(area_len, buf_len),
            rx_buf_len: o.rx_buf_len,
        },
        rx: ZcrxRxConfig {
            validate: Some(StreamSpec::Alphabet),
            idle_timeout: Some(DEADLINE),
            limited: o.oneshot_recvs.map(|rearms| LimitedRecv {
                len: page as u32,
                rearms,
            }),
            ..ZcrxRxConfig::default()
        },
        expect: o.oneshot_recvs.is_none().then_some(o.send_size),
    };
    // The one flow engine runs the workers: worker 0 (this thread) waits for every ifq, then
    // accepts and dispatches; workers 1..=N are the ifqs' receivers.
    let workers = o.threads as usize;
    let eplan = engine::Plan {
        workers: workers + 1,
        ..engine::Plan::default()
    };
    let shared = engine::Shared::new(workers + 1);
    let (ready_tx, ready_rx) = mpsc::channel::<(u32, Result<()>)>();
    let mut conn_txs = Vec::with_capacity(workers);
    let mut rest: Vec<engine::Worker<'_, Result<()>>> = Vec::with_capacity(workers);
    for i in 0..o.threads {
        let (conn_tx, conn_rx) = mpsc::channel::<Vec<OwnedFd>>();
        conn_txs.push(conn_tx);
        let ready = ready_tx.clone();
        let p = plan(i);
        rest.push(Box::new(move |ctx: &engine::Ctx<'_>| {
            let r = worker(i, p, ready, conn_rx, ctx.run_stop());
            if let Err(e) = &r {
                ctx.shared.note_failure(e);
            }
            r
        }));
    }
    drop(ready_tx);
    let first = move |_: &engine::Ctx<'_>| -> Result<()> {
        let mut setup = Ok(());
        for _ in 0..o.threads {
            match ready_rx.recv() {
                Ok((i, Err(e))) if setup.is_ok() => {
                    let e = c_verdict(e, o.rx_buf_len);
                    setup = Err(if o.threads > 1 {
                        prefix_worker(i, e)
                    } else {
                        e
                    });
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let dispatched = setup.and_then(|()| {
            if o.dry_run {
                return Ok(());
            }
            accept_and_dispatch(o, ifindex, first_queue, listener_addr, &conn_txs)
        });
        // Workers that got nothing (dry run, or a failure here) end when their sender goes.
        drop(conn_txs);
        dispatched
    };
    first_failure(engine::run(
        &eplan,
        &shared,
        &STOP,
        &mut engine::NoClock,
        first,
        rest,
    ))
}

/// The run's result from its workers' (in worker order): the first failure, passing over a
/// worker that only stopped because another failed (`Error::Interrupted(FLOW_FAILED)`).
fn first_failure(outs: Vec<Result<()>>) -> Result<()> {
    let mut errors: Vec<Error> = outs.into_iter().filter_map(|r| r.err()).collect();
    match errors
        .iter()
        .position(|e| !matches!(e, Error::Interrupted(FLOW_FAILED)))
    {
        Some(k) => Err(errors.swap_remove(k)),
        None => errors.into_iter().next().map_or(Ok(()), Err),
    }
}

fn prefix_worker(i: u32, e: Error) -> Error {
    match e {
        Error::Skip(r) => Error::Skip(r),
        e => Error::Failure(format!("worker {i}: {e}")),
    }
}

/// Listens, accepts N×N connections and sends each worker its own.
fn accept_and_dispatch(
    o: &Options,
    ifindex: u32,
    first_queue: u32,
    addr: SocketAddrV6,
    conn_txs: &[mpsc::Sender<Vec<OwnedFd>>],
) -> Result<()> {
    let listener = socket::tcp_listen_backlog(addr, None, 1024)?;
    let dispatch = if o.threads > 1 {
        let queues: Vec<u32> = (0..o.threads).map(|i| first_queue + i).collect();
        Some(QueueDispatch::read(&mut Netdev::open()?, ifindex, &queues)?)
    } else {
        None
    };
    let total = (o.threads * o.threads) as usize;
    let mut per_worker: Vec<Vec<OwnedFd>> = (0..o.threads).map(|_| Vec::new()).collect();
    accept_conns(listener.as_fd(), total, DEADLINE, &STOP, |fd| {
        let idx = match &dispatch {
            None => 0,
            Some(d) => d
                .worker_of(fd.as_fd())?
                .map_err(|id| Error::Failure(format!("unknown NAPI ID: {id}")))?,
        };
        if per_worker[idx].len() >= MAX_CONNS_PER_THREAD {
            return Err(Error::Failure(format!("worker {idx} connection overflow")));
        }
        per_worker[idx].push(fd);
        Ok(())
    })?;
    for (tx, conns) in conn_txs.iter().zip(per_worker) {
        // A worker that already ended reports why when joined.
        let _ = tx.send(conns);
    }
    Ok(())
}

/// Accepts `total` connections on `listener` and hands each to `take`: the first without a
/// deadline, each later one within `later` of the one before. The first connection comes when
/// the client starts, which the server does not control (iou-zcrx.py starts its client after
/// its own `wait_port_listen` poll and an `ip netns exec`, several seconds after the listen
/// under QEMU/TCG on a loaded host: docs/kernel-harness.md), and iou-zcrx.c blocks in its
/// accept without a timeout; the later ones come from a client that is already running (`-t N`
/// opens N×N at once).
///
/// Errors: `Error::Timeout` when a connection after the first does not come within `later`;
/// `Error::Interrupted` when `stop` is set (also while waiting for the first); `Error::Sys`
/// from poll/accept; whatever `take` returns.
fn accept_conns(
    listener: BorrowedFd<'_>,
    total: usize,
    later: Duration,
    stop: &AtomicI32,
    mut take: impl FnMut(OwnedFd) -> Result<()>,
) -> Result<()> {
    for n in 0..total {
        let window = (n > 0).then_some(later);
        let (fd, _peer) = crate::conn::accept_timeout(listener, window, stop)?;
        take(fd)?;
    }
    Ok(())
}

/// One worker: its ring and ifq (reported on `ready`), then the connections it is handed, in
/// turn (`stop`: the run's stop flag, which the engine sets on a signal or when another worker
/// failed). Returns the first failure; `Error::Interrupted(FLOW_FAILED)` when it only stopped.
fn worker(
    i: u32,
    plan: WorkerPlan,
    ready: mpsc::Sender<(u32, Result<()>)>,
    conns: mpsc::Receiver<Vec<OwnedFd>>,
    stop: &AtomicI32,
) -> Result<()> {
    let zcrx = uring::create_ring(&RingParams::default())
        .and_then(|ring| Zcrx::register(ring, &plan.params));
    let mut zcrx = match zcrx {
        Ok(z) => z,
        Err(e) => {
            let _ = ready.send((i, Err(e)));
            return Ok(());
        }
    };
    let _ = ready.send((i, Ok(())));
    drop(ready);
    let Ok(fds) = conns.recv() else {
        return Ok(());
    };
    let mut log = std::io::stderr();
    let mut result = Ok(());
    let mut bytes = 0u64;
    for (c, fd) in fds.iter().enumerate() {
        let (stats, r) =
            zcrx.receive_logged(fd.as_fd(), &plan.rx, stop, &mut std::io::sink(), &mut log);
        let r = r.and_then(|()| match plan.expect {
            Some(want) if stats.bytes != want => Err(Error::Failure(format!(
                "connection {c} received {} of {want} bytes",
                stats.bytes
            ))),
            None if stats.bytes == 0 => {
                Err(Error::Failure(format!("connection {c} received no data")))
            }
            _ => Ok(()),
        });
        match r {
            Ok(()) => {}
            // Another worker failed; this one only stopped.
            Err(e @ Error::Interrupted(FLOW_FAILED)) => {
                result = Err(e);
                break;
            }
            Err(e) => {
                result = Err(Error::Failure(format!("worker {i}, connection {c}: {e}")));
                break;
            }
        }
        bytes += stats.bytes;
    }
    if result.is_ok() {
        crate::elog!(
            "{NAME}: worker {i} ({}): {} connection(s), {bytes} bytes validated",
            plan.params.target,
            fds.len()
        );
    }
    // What other CPUs still hold of the received buffers goes back before the ring closes, so
    // the ifq's page pool (and the queue) is let go of promptly.
    crate::release::return_deferred_buffers(&mut crate::release::kernel::KernelEnv::new(Some(
        match &plan.params.target {
            ZcrxTarget::Device { ifindex, .. } => *ifindex,
            ZcrxTarget::NoDev => 0,
        },
    )));
    drop(zcrx);
    drop(fds);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn opts(s: &str) -> Options {
        parse(&argv(s), PAGE).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn usage_error(s: &str) -> String {
        match parse(&argv(s), PAGE) {
            Err(Error::Usage(m)) => m,
            other => panic!("{s}: expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn a_worker_that_only_stopped_does_not_name_the_failure() {
        let stopped = || Err(Error::Interrupted(FLOW_FAILED));
        let failed = || Err(Error::Failure("worker 1, connection 0: short".into()));
        let r = first_failure(vec![Ok(()), stopped(), failed()]);
        assert!(
            matches!(&r, Err(Error::Failure(m)) if m.starts_with("worker 1")),
            "{r:?}"
        );
        assert!(first_failure(vec![Ok(()), Ok(())]).is_ok());
        let r = first_failure(vec![Ok(()), stopped()]);
        assert!(matches!(r, Err(Error::Interrupted(FLOW_FAILED))), "{r:?}");
        let r = first_failure(vec![Err(Error::Interrupted(libc::SIGINT)), failed()]);
        assert!(matches!(r, Err(Error::Interrupted(libc::SIGINT))), "{r:?}");
    }

    #[test]
    fn server_defaults_are_iou_zcrx_cs() {
        let o = opts("-s -i eth0 -q 3");
        assert_eq!(
            o,
            Options {
                role: Role::Server,
                host: None,
                port: 8000,
                payload_len: 2_097_052,
                ifname: Some("eth0".into()),
                queue: Some(3),
                oneshot_recvs: None,
                send_size: 2_097_152,
                rx_buf_len: None,
                dry_run: false,
                threads: 1,
            }
        );
    }

    #[test]
    fn every_option_as_iou_zcrx_py_passes_them() {
        let o = opts("-s -p 41234 -i dnic40a -q 3 -o 4");
        assert_eq!((o.port, o.oneshot_recvs), (41234, Some(4)));
        let o = opts("-s -p 41234 -i dnic40a -q 3 -x 2 -d");
        assert_eq!((o.rx_buf_len, o.dry_run), (Some(8192), true));
        let o = opts("-c -h 2001:db8::1 -p 41234 -l 12840");
        assert_eq!(o.role, Role::Client);
        assert_eq!(
            o.host.unwrap().socket_ip(),
            "2001:db8::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!((o.payload_len, o.send_size), (12840, SEND_SIZE));
        let o = opts("-c -h 192.0.2.1 -p 41234 -l 4096 -z 16384");
        assert_eq!(o.host.unwrap().socket_ip().to_string(), "::ffff:192.0.2.1");
        assert_eq!((o.payload_len, o.send_size), (4096, 16384));
        let o = opts("-s -i eth0 -q 2 -t 3");
        assert_eq!(o.threads, 3);
    }

    #[test]
    fn getopt_spellings_and_c_numbers() {
        // Attached values, clustered flags, the last repeat wins, strtoul bases.
        let o = opts("-sd -ieth0 -q0x3 -p010 -p 9000 -x0");
        assert_eq!(
            (o.dry_run, o.ifname.as_deref(), o.queue, o.port),
            (true, Some("eth0"), Some(3), 9000)
        );
        assert_eq!(o.rx_buf_len, None, "-x 0 is the kernel's default");
        assert_eq!(opts("-s -i e -q 010").queue, Some(8));
        assert_eq!(opts("-s -i e -q 0").queue, Some(0));
        assert_eq!(c_number("0x"), None);
        assert_eq!(c_number("08"), None);
        assert_eq!(c_number("-1"), None);
        assert_eq!(c_number("12abc"), None);
        assert_eq!(c_number("0X1f"), Some(31));
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        assert!(parse(&[], PAGE).is_err());
        assert!(usage_error("").contains("usage: iou-zcrx"));
        assert_eq!(usage_error("-s -c"), "Pass one of -s or -c");
        assert!(usage_error("-i eth0").starts_with("pass -s or -c"));
        assert_eq!(
            usage_error("-s -h ::1 -i e -q 1"),
            "Receiver cannot have -h specified"
        );
        assert_eq!(usage_error("-s -q 1"), "-s needs -i <ifname>");
        assert_eq!(usage_error("-s -i e"), "-s needs -q <rxq_id>");
        assert_eq!(
            usage_error("-c -l 2097053"),
            "-l: payload exceeds max (2097052)"
        );
        assert!(usage_error("-c -l 0").starts_with("-l: invalid value '0'"));
        assert!(usage_error("-c -p 65536").starts_with("-p: invalid value '65536'"));
        assert!(usage_error("-c -p http").starts_with("-p: invalid value 'http'"));
        assert!(usage_error("-c -z -1").starts_with("-z: invalid value '-1'"));
        assert!(usage_error("-s -i e -q 1 -t 0").starts_with("-t: invalid value '0'"));
        assert!(usage_error("-s -i e -q 1 -t 17").starts_with("-t: invalid value '17'"));
        assert!(usage_error("-s -i e -q 1 -o x").starts_with("-o: invalid value 'x'"));
        assert!(usage_error("-s -i e -q 1 -x 1048576").starts_with("-x: invalid value"));
        assert!(usage_error("-s -i e -q 4294967295 -t 2").contains("queue ids past"));
        assert!(usage_error("-c -h 224.0.0.1").contains("multicast"));
        assert!(usage_error("-c -h fe80::1").starts_with("-h: link-local IPv6 address 'fe80::1'"));
        assert!(usage_error("-c -h nohost").starts_with("-h: invalid IP address"));
        assert!(usage_error("-c -y").starts_with("unknown option 'y'"));
        assert_eq!(usage_error("-c -p"), "-p: missing value");
        assert!(usage_error("-c extra").starts_with("unexpected argument 'extra'"));
    }

    #[test]
    fn skips_are_where_iou_zcrx_c_skips() {
        let hugetlb = Error::Sys {
            call: "mmap(33554432 bytes, MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB|MAP_HUGE_2MB)".into(),
            errno: libc::ENOMEM,
        };
        let v = c_verdict(hugetlb, Some(8192));
        assert!(
            matches!(&v, Error::Skip(r) if r.to_string().starts_with("Can't allocate huge pages")),
            "{v:?}"
        );
        let reg = |errno| Error::Sys {
            call: "io_uring_register(IORING_REGISTER_ZCRX_IFQ) on eth0 rx queue 3".into(),
            errno,
        };
        for errno in [libc::EINVAL, libc::EOPNOTSUPP, libc::ERANGE] {
            let v = c_verdict(reg(errno), Some(8192));
            assert!(
                matches!(&v, Error::Skip(r)
                    if r.to_string().starts_with("Large chunks are not supported")),
                "{v:?}"
            );
            assert_eq!(exit_code(&v), EXIT_SKIP);
            // Without -x the same refusal fails, as in C.
            let v = c_verdict(reg(errno), None);
            assert!(matches!(v, Error::Sys { .. }), "{v:?}");
            assert_eq!(exit_code(&v), EXIT_FAIL);
        }
        let v = c_verdict(reg(libc::EPERM), Some(8192));
        assert_eq!(exit_code(&v), EXIT_FAIL);
        // A library skip is a failure here.
        let disabled = Missing::IoUringDisabled { path: "x" };
        let v = c_verdict(Error::Skip(disabled), None);
        assert_eq!(exit_code(&v), EXIT_FAIL);
        assert_eq!(exit_code(&Error::Usage("x".into())), EXIT_FAIL);
    }

    /// A listener on `[::1]`, its port, and a client thread that connects `conns` times
    /// after `delay` (the connections are held until the thread ends, after `hold`).
    fn late_client(
        delay: Duration,
        conns: usize,
        hold: Duration,
    ) -> (OwnedFd, std::thread::JoinHandle<()>) {
        let listener =
            socket::tcp_listen_backlog(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 0, 0, 0), None, 16)
                .expect("listen on [::1]");
        let port = match socket::local_addr(listener.as_fd()).expect("local address") {
            std::net::SocketAddr::V6(a) => a.port(),
            a => panic!("{a}"),
        };
        let client = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let held: Vec<std::net::TcpStream> = (0..conns)
                .map(|_| std::net::TcpStream::connect(("::1", port)).expect("connect"))
                .collect();
            std::thread::sleep(hold);
            drop(held);
        });
        (listener, client)
    }

    #[test]
    fn the_first_connection_is_waited_for_without_a_deadline() {
        // The client comes three windows late (as iou-zcrx.py's did under load); its two
        // connections are both taken.
        let window = Duration::from_millis(200);
        let (listener, client) = late_client(3 * window, 2, Duration::ZERO);
        let started = std::time::Instant::now();
        let mut got = 0;
        accept_conns(listener.as_fd(), 2, window, &AtomicI32::new(0), |_fd| {
            got += 1;
            Ok(())
        })
        .expect("a late first connection is accepted");
        assert_eq!(got, 2);
        assert!(started.elapsed() >= 3 * window, "{:?}", started.elapsed());
        client.join().expect("client");
    }

    #[test]
    fn a_later_connection_must_come_within_the_window() {
        // One connection, late; the second never comes: the wait for it ends after the window
        // with a timeout naming it.
        let window = Duration::from_millis(200);
        let (listener, client) = late_client(2 * window, 1, 10 * window);
        let mut got = 0;
        let mut second_wait = None;
        let e = accept_conns(listener.as_fd(), 2, window, &AtomicI32::new(0), |_fd| {
            got += 1;
            second_wait = Some(std::time::Instant::now());
            Ok(())
        })
        .expect_err("no second connection");
        let waited = second_wait.expect("the first was taken").elapsed();
        assert_eq!(got, 1);
        assert!(
            matches!(&e, Error::Timeout(m) if m.contains("no connection within 200 ms")),
            "{e:?}"
        );
        assert!(waited >= window && waited < 5 * window, "{waited:?}");
        client.join().expect("client");
    }

    #[test]
    fn a_stop_signal_ends_the_wait_for_the_first_connection() {
        let listener =
            socket::tcp_listen_backlog(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 0, 0, 0), None, 16)
                .expect("listen on [::1]");
        let stop = AtomicI32::new(0);
        let started = std::time::Instant::now();
        let e = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(libc::SIGTERM, std::sync::atomic::Ordering::SeqCst);
            });
            accept_conns(
                listener.as_fd(),
                1,
                Duration::from_millis(50),
                &stop,
                |_| panic!("no connection was made"),
            )
            .expect_err("stopped")
        });
        assert!(matches!(e, Error::Interrupted(libc::SIGTERM)), "{e:?}");
        let t = started.elapsed();
        assert!(
            t >= Duration::from_millis(300) && t < Duration::from_secs(3),
            "{t:?}"
        );
    }

    #[test]
    fn a_failure_taking_a_connection_ends_the_accepts() {
        let (listener, client) = late_client(Duration::ZERO, 2, Duration::from_millis(200));
        let mut calls = 0;
        let e = accept_conns(
            listener.as_fd(),
            2,
            Duration::from_secs(5),
            &AtomicI32::new(0),
            |_| {
                calls += 1;
                Err(Error::Failure("worker 0 connection overflow".into()))
            },
        )
        .expect_err("take failed");
        assert_eq!(calls, 1);
        assert!(
            matches!(&e, Error::Failure(m) if m.contains("overflow")),
            "{e:?}"
        );
        client.join().expect("client");
    }
}
