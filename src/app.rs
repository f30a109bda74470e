//! Mode orchestration: one top-down flow per mode, in the order of ncdevmem.c's `main` —
//! check what can make the run a skip, allocate, bind, accept, receive, report, unwind.
//!
//! This module decides policy (which queues, which failures are skips) and calls the kernel
//! only through [`crate::netlink`], [`crate::udmabuf`] and [`crate::sys::socket`]. Resources
//! are locals declared in acquisition order, so Rust drops them in reverse: the TCP socket,
//! then the binding (closing its netlink socket unbinds), then the dma-buf mapping.

use std::ffi::CString;
use std::io::Write;
use std::net::SocketAddrV6;
use std::os::fd::AsFd;

use crate::cli::{Config, Mode, Verbosity};
use crate::error::{Error, Result};
use crate::netlink::ethtool::Ethtool;
use crate::netlink::netdev::{BindRxRequest, Netdev};
use crate::rx::{self, NoFragMemory, RxConfig};
use crate::signals::{self, STOP};
use crate::stats::RxStats;
use crate::sys::socket::{self, TcpRxSocket};
use crate::tx::{self, LineSource, PatternSend, PatternSource, TxConfig, TxSource};
use crate::udmabuf::{self, Udmabuf, UdmabufParams};

/// Runs the mode `cfg` selects. Installs the SIGINT/SIGTERM handlers first, so every later
/// step can unwind on a signal.
///
/// # Errors
/// Whatever the mode's flow returns; [`Error::exit_code`] maps it to the process exit code.
pub fn run(cfg: &Config) -> Result<()> {
    signals::install()?;
    if let Some(path) = &cfg.json {
        // A summary that cannot be written is known before anything is set up.
        crate::stats::check_json_path(path)?;
    }
    match cfg.mode {
        Mode::PlainServer => plain_server(cfg),
        Mode::PatternSender => pattern_sender(cfg),
        Mode::Server => devmem_server(cfg),
        Mode::Client => devmem_client(cfg),
        Mode::Probe => probe(cfg),
        Mode::ZcrxServer => Err(Error::Skip(
            "io_uring zcrx receive (--zcrx) is not implemented in this version".into(),
        )),
        Mode::Report => Err(Error::Skip(
            "the capability report (--report) is not implemented in this version".into(),
        )),
    }
}

/// `-l --plain`: listen, accept one connection, receive over plain TCP, validate or print,
/// report. No devmem, no NIC changes: it validates the TCP path and the sender.
fn plain_server(cfg: &Config) -> Result<()> {
    let mut sock = listen_and_accept(cfg)?;
    let rx_cfg = rx_config(cfg, RxConfig::plain());
    receive_and_report(cfg, &mut sock, None::<&NoFragMemory>, &rx_cfg)
}

/// `-l -f IF -s ADDR -p PORT`: the devmem RX server (ncdevmem.c `do_server`).
fn devmem_server(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let params = UdmabufParams::new(cfg.rx_page_size, cfg.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created or changed.
    udmabuf::preflight(&params)?;
    if cfg.autorelease.is_some() {
        socket::probe_devmem_autorelease()?;
    }
    let netdev = Netdev::open().map_err(family_missing_is_skip)?;
    let (start, num) = choose_queues(cfg, ifname, ifindex)?;
    if !cfg.skip_nic_config {
        log(
            cfg,
            &format!(
                "NIC setup (header split, RSS, flow rule) is not done by this version; \
                 assuming {ifname} is configured, as with -n"
            ),
        );
    }

    let mem = Udmabuf::create(&params)?;
    let queues: Vec<u32> = (start..start + num).collect();
    let request = BindRxRequest::new(ifindex, mem.fd(), &queues)
        .ifname(ifname)
        .rx_page_size(cfg.rx_page_size);
    let binding = netdev
        .bind_rx_request(&request)
        .map_err(bind_refusal_is_skip)?;
    log(
        cfg,
        &format!(
            "bound {ifname} rx queues {start}..={} to dmabuf id {} ({} bytes{})",
            start + num - 1,
            binding.id(),
            params.size_bytes,
            if params.hugetlb { ", hugetlb" } else { "" }
        ),
    );

    let mut sock = listen_and_accept(cfg)?;
    if let Some(on) = cfg.autorelease {
        socket::set_devmem_autorelease(sock.fd(), on)?;
    }
    let niov_size = cfg.rx_page_size.unwrap_or(crate::sys::page_size() as u32);
    let rx_cfg = rx_config(cfg, RxConfig::devmem(binding.id(), niov_size));
    let result = receive_and_report(cfg, &mut sock, Some(&mem), &rx_cfg);
    drop(sock);
    drop(binding);
    drop(mem);
    result
}

/// `-f IF -s ADDR -p PORT` without `-l`: devmem TX (ncdevmem.c `do_client`). Skips first
/// (udmabuf), then the udmabuf, bind-tx (its netlink socket stays open for the whole run), a
/// socket bound to IF (and `-c` with the same port) with `SO_ZEROCOPY`, then stdin line by
/// line — or, with `--send-pattern`, the `-v` pattern — through the dma-buf, and every
/// zerocopy completion awaited before "tx ok".
fn devmem_client(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    let ifindex = if_nametoindex(ifname)?;
    let params = UdmabufParams::new(None, cfg.dmabuf_size)?;
    // Everything that makes this run a skip is checked before anything is created.
    udmabuf::preflight(&params)?;
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let peer = SocketAddrV6::new(server.socket_ip(), port, 0, 0);
    let local = cfg
        .client
        .as_ref()
        .map(|c| SocketAddrV6::new(c.socket_ip(), port, 0, 0));
    let mut source: Box<dyn TxSource> = match cfg.pattern_bytes {
        Some(total) => Box::new(PatternSource::new(
            required(cfg.validate, "-v")?,
            total,
            cfg.write_size.unwrap_or(0),
            cfg.corrupt_offset,
        )?),
        None => Box::new(LineSource::new(std::io::stdin().lock(), &STOP)),
    };
    let netdev = Netdev::open().map_err(family_missing_is_skip)?;

    let mut mem = Udmabuf::create(&params)?;
    let binding = tx::bind_tx(&netdev, ifindex, ifname, mem.fd())?;
    log(
        cfg,
        &format!(
            "bound {ifname} for TX to dmabuf id {} ({} bytes)",
            binding.id(),
            params.size_bytes
        ),
    );
    let mut sock = tx::connect_devmem(peer, local, ifname, cfg.timeout, &STOP)?;
    log(cfg, &format!("connected to [{}]:{port}", server.ip));

    let tx_cfg = TxConfig {
        chunk: cfg.tx_chunk,
        max_piece: cfg.write_size.unwrap_or(tx::devmem::DEFAULT_MAX_PIECE),
        completion_timeout: cfg
            .timeout
            .unwrap_or(tx::devmem::DEFAULT_COMPLETION_TIMEOUT),
        verbose: cfg.verbosity == Verbosity::Verbose,
        ..TxConfig::new(binding.id())
    };
    let mut log_sink = std::io::stderr();
    let (stats, result) = tx::transmit(
        &mut sock,
        &mut mem,
        source.as_mut(),
        &tx_cfg,
        &STOP,
        &mut log_sink,
    );
    let ok = result.is_ok();
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}: {}", crate::cli::PROGRAM, stats.summary_line(ok));
    }
    if let Some(path) = &cfg.json {
        crate::stats::write_json_atomic(path, &stats.to_json(ok))?;
    }
    drop(sock);
    drop(binding);
    drop(mem);
    result
}

/// `-f IF [-b N]`: probe / self-test. Checks its preconditions so that a host without udmabuf
/// or hugepages skips with the reason.
fn probe(cfg: &Config) -> Result<()> {
    let ifname = required(cfg.ifname.as_deref(), "-f")?;
    if_nametoindex(ifname)?;
    udmabuf::preflight(&UdmabufParams::new(cfg.rx_page_size, cfg.dmabuf_size)?)?;
    Err(Error::Skip(
        "probe mode's kernel-contract checks (bind with HDS off/on, channel shrink) are not \
         implemented in this version"
            .into(),
    ))
}

/// `--send-pattern BYTES -s ADDR -p PORT -v N`: the built-in pattern sender.
fn pattern_sender(cfg: &Config) -> Result<()> {
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let req = PatternSend {
        peer: SocketAddrV6::new(server.socket_ip(), port, 0, 0),
        local: cfg
            .client
            .as_ref()
            .map(|c| SocketAddrV6::new(c.socket_ip(), port, 0, 0)),
        ifname: cfg.ifname.clone(),
        period: required(cfg.validate, "-v")?,
        total_bytes: required(cfg.pattern_bytes, "--send-pattern")?,
        write_size: cfg.write_size,
        timeout: cfg.timeout,
        corrupt_offset: cfg.corrupt_offset,
    };
    let stats = tx::send_pattern(&req, &STOP);
    if let Some(path) = &cfg.json {
        let json = match &stats {
            Ok(s) => {
                let mut j = s.to_json();
                j["ok"] = true.into();
                j
            }
            Err(e) => {
                serde_json::json!({"mode": "pattern-sender", "ok": false, "error": e.to_string()})
            }
        };
        crate::stats::write_json_atomic(path, &json)?;
    }
    let stats = stats?;
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}", stats.summary_line());
    }
    Ok(())
}

/// Binds `-s`:`-p`, prints where it listens, and accepts one connection within `--timeout`.
fn listen_and_accept(cfg: &Config) -> Result<TcpRxSocket> {
    let port = required(cfg.port, "-p")?;
    let server = required(cfg.server.as_ref(), "-s")?;
    let addr = SocketAddrV6::new(server.socket_ip(), port, 0, 0);
    let listener = socket::tcp_listen(addr)?;
    log(cfg, &format!("listening on [{}]:{port}", server.ip));
    let (fd, peer) = socket::accept_timeout(listener.as_fd(), cfg.timeout, &STOP)?;
    log(cfg, &format!("accepted connection from {peer}"));
    Ok(TcpRxSocket::new(fd))
}

/// The receive-loop settings every mode shares, on top of `base` (plain or devmem).
fn rx_config(cfg: &Config, base: RxConfig) -> RxConfig {
    RxConfig {
        fail_on_linear: cfg.fail_on_linear,
        validate_period: cfg.validate,
        idle_timeout: cfg.timeout,
        progress_interval: cfg.progress,
        verbose: cfg.verbosity == Verbosity::Verbose,
        ..base
    }
}

/// Runs the receive loop with the payload going to stdout (when not validating), then prints
/// the summary and writes the JSON object — also when the run failed, so a failed run is still
/// a measurement.
fn receive_and_report<M: crate::udmabuf::FragMemory>(
    cfg: &Config,
    sock: &mut TcpRxSocket,
    mem: Option<&M>,
    rx_cfg: &RxConfig,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let mut log_sink = std::io::stderr();
    let (stats, result) = rx::receive_logged(sock, mem, rx_cfg, &STOP, &mut out, &mut log_sink);
    let flushed = out
        .flush()
        .map_err(|e| Error::sys("write(stdout)", e.raw_os_error().unwrap_or(0)));
    let result = result
        .and(flushed)
        .and_then(|()| check_stream_length(cfg, stats.bytes));
    report(cfg, &stats, &result)?;
    result
}

/// A stream that ended cleanly can still be wrong: shorter or longer than `--expect-bytes`,
/// or empty although `-v` asked for validation (a sender that never sent).
fn check_stream_length(cfg: &Config, bytes: u64) -> Result<()> {
    match cfg.expect_bytes {
        Some(want) if want != bytes => Err(Error::Failure(format!(
            "the peer sent {bytes} bytes, --expect-bytes wanted {want}"
        ))),
        None if bytes == 0 && cfg.validate.is_some() => Err(Error::Failure(
            "the peer closed without sending any data: nothing was validated".into(),
        )),
        _ => Ok(()),
    }
}

/// Prints the summary line and writes `--json` with the verdict (`ok`, and `error` when the
/// run failed).
fn report(cfg: &Config, stats: &RxStats, result: &Result<()>) -> Result<()> {
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}", stats.summary_line());
    }
    if let Some(path) = &cfg.json {
        let mut json = stats.to_json();
        json["ok"] = result.is_ok().into();
        if let Err(e) = result {
            json["error"] = e.to_string().into();
        }
        crate::stats::write_json_atomic(path, &json)?;
    }
    Ok(())
}

/// Queue range `(start, count)` to bind: `-t`/`-q` when given, else C's server default — the
/// last RX queue, one queue — from ethtool CHANNELS_GET (rx + combined).
fn choose_queues(cfg: &Config, ifname: &str, ifindex: u32) -> Result<(u32, u32)> {
    if let (Some(start), Some(num)) = (cfg.start_queue, cfg.num_queues) {
        return Ok((start, num));
    }
    let mut ethtool = Ethtool::open().map_err(family_missing_is_skip)?;
    let channels = ethtool.channels_get(ifindex).map_err(|e| match e.errno() {
        Some(libc::EOPNOTSUPP) => Error::Skip(format!(
            "{ifname}: driver does not report channels (ethtool CHANNELS_GET: {e}); \
             give -t START -q NUM"
        )),
        _ => e,
    })?;
    let rx_queues = channels.rx_queues();
    if rx_queues < 2 {
        return Err(Error::Skip(format!(
            "{ifname} has {rx_queues} RX queue(s); devmem needs at least 2 (one stays in RSS)"
        )));
    }
    Ok((rx_queues - 1, 1))
}

/// `if_nametoindex(3)`; an unknown name is a usage error naming `-f`.
fn if_nametoindex(ifname: &str) -> Result<u32> {
    let c = CString::new(ifname)
        .map_err(|_| Error::Usage(format!("-f: invalid interface name {ifname:?}")))?;
    match nix::net::if_::if_nametoindex(c.as_c_str()) {
        Ok(i) if i > 0 => Ok(i),
        _ => Err(Error::Usage(format!("-f: no such interface '{ifname}'"))),
    }
}

/// A generic-netlink family the kernel lacks means "no devmem here": a skip.
fn family_missing_is_skip(e: Error) -> Error {
    match &e {
        Error::Netlink(nl) if nl.errno == libc::ENOENT && nl.family == "nlctrl" => Error::Skip(
            format!("kernel has no such generic-netlink family (needs devmem TCP, 6.12+): {e}"),
        ),
        _ => e,
    }
}

/// bind-rx refusals that mean "this host/device cannot do devmem" are skips; everything else
/// (a kernel that refuses what must work) stays a failure.
fn bind_refusal_is_skip(e: Error) -> Error {
    match e.errno() {
        Some(libc::EPERM) => Error::Skip(format!("bind-rx needs CAP_NET_ADMIN: {e}")),
        Some(libc::EOPNOTSUPP) => Error::Skip(format!("device does not support devmem RX: {e}")),
        _ => e,
    }
}

fn required<T>(v: Option<T>, flag: &str) -> Result<T> {
    v.ok_or_else(|| Error::Usage(format!("missing {flag} argument")))
}

fn log(cfg: &Config, line: &str) {
    if cfg.verbosity != Verbosity::Quiet {
        crate::elog!("{}: {line}", crate::cli::PROGRAM);
    }
}
