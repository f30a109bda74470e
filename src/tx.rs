//! Send side, two ways:
//!
//! - **devmem TX** ([`devmem`]): bind-tx, then `sendmsg(MSG_ZEROCOPY)` from the dma-buf with an
//!   `SCM_DEVMEM_DMABUF` cmsg, `-z` iov chunking and zerocopy completion tracking; the client
//!   mode (`-f IF -s ADDR -p PORT`) sends stdin line by line, or with `--send-pattern BYTES`
//!   the `-v` pattern. [`bind_tx`] and [`connect_devmem`] are the client's kernel steps.
//! - the built-in **plain pattern sender** (`--send-pattern` without `-f`), which replaces
//!   `yes $(echo -e \\x01…) | head -c N | socat -u - TCP:…` on the peer: it sends `N` bytes of
//!   the `-v` pattern in stream order, optionally with a fixed write size and `TCP_NODELAY` so
//!   each write leaves as its own segment (segment-size sweeps, as the kernel's `check_rx_hds`
//!   does with `socat -b SIZE … nodelay`).

use std::net::SocketAddrV6;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::netlink::netdev::{DmabufBinding, Netdev};
use crate::sys::socket;
use crate::sys::zerocopy::{self, ZerocopySocket};
use crate::validate::StreamSpec;

pub mod devmem;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use devmem::{
    transmit, DmabufIov, LineSource, PatternSource, TxConfig, TxMemory, TxSocket, TxSource, TxStats,
};

/// Bytes per `send` when no write size is given: large enough that syscalls are not the cost.
pub const DEFAULT_WRITE_SIZE: usize = 256 * 1024;

/// How long the sender keeps retrying a refused connect when no `--timeout` is given
/// (the receiver may still be starting).
pub const DEFAULT_CONNECT_RETRY: Duration = Duration::from_secs(5);

/// What the pattern sender should do.
#[derive(Debug, Clone)]
pub struct PatternSend {
    /// Peer address and port (`-s`/`-p`), as an AF_INET6 address (IPv4 is v4-mapped).
    pub peer: SocketAddrV6,
    /// Local address and port to bind (`-c`, with the same port, as C's client does).
    pub local: Option<SocketAddrV6>,
    /// Interface to pin the socket to (`-f`, `SO_BINDTODEVICE`).
    pub ifname: Option<String>,
    /// The stream to send (`-v N` or `--seed SEED`).
    pub stream: StreamSpec,
    /// Total bytes to send.
    pub total_bytes: u64,
    /// Bytes per `send`; `Some` also sets `TCP_NODELAY`.
    pub write_size: Option<usize>,
    /// Connect timeout (and retry window for refused connects).
    pub timeout: Option<Duration>,
    /// Test aid: flip every bit of the byte at this stream offset, so the receiver's validator
    /// must report exactly this offset.
    pub corrupt_offset: Option<u64>,
}

/// What the sender did, for the summary line and the JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SendStats {
    /// Payload bytes sent.
    pub bytes: u64,
    /// `send` calls that completed (each one a full buffer, retried on short writes).
    pub writes: u64,
    /// CRC-32 (IEEE) of the bytes sent, to compare with a receiver's.
    pub crc32: u32,
    /// Wall time from connect to the end of the last send.
    pub elapsed: Duration,
    /// The stream sent (`-v N` or `--seed SEED`).
    pub stream: Option<StreamSpec>,
}

impl SendStats {
    /// Throughput in Gbit/s (10^9 bits per second); 0 for an empty run.
    pub fn gbps(&self) -> f64 {
        crate::stats::gbit_per_s(self.bytes, self.elapsed)
    }

    /// One human line for stderr.
    pub fn summary_line(&self) -> String {
        format!(
            "sent {} bytes{} in {} writes, {:.3} s, {:.2} Gbit/s, crc32 0x{:08x}",
            self.bytes,
            self.stream.map(|t| format!(" ({t})")).unwrap_or_default(),
            self.writes,
            self.elapsed.as_secs_f64(),
            self.gbps(),
            self.crc32
        )
    }

    /// The same facts as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": "pattern-sender",
            "bytes": self.bytes,
            "writes": self.writes,
            "crc32": self.crc32,
            "stream": self.stream.map(|t| t.to_string()),
            "elapsed_s": self.elapsed.as_secs_f64(),
            "gbit_per_s": self.gbps(),
        })
    }
}

/// Connects to `req.peer` and sends `req.total_bytes` of the pattern, then shuts down the
/// write side. A refused connect is retried every 100 ms within the timeout window.
///
/// Errors: `Error::Usage` for a bad period; `Error::Timeout` / `Error::Sys` from connect or
/// send (`EPIPE`/`ECONNRESET` when the receiver went away); `Error::Interrupted` on a signal.
pub fn send_pattern(req: &PatternSend, stop: &AtomicI32) -> Result<SendStats> {
    let write_size = req.write_size.map_or(DEFAULT_WRITE_SIZE, |n| n.max(1));
    let source = PatternSource::new(req.stream, req.total_bytes, write_size, req.corrupt_offset)?;
    let fd = connect_retrying_to(
        req.peer,
        req.local,
        req.ifname.as_deref(),
        req.timeout,
        stop,
    )?;
    let sock = fd.as_fd();
    refuse_self_connect(sock)?;
    let result = send_pattern_on(req, source, sock, stop);
    if result.is_err() {
        // Stopped early (signal, timeout, error): reset the connection so the receiver sees
        // ECONNRESET instead of a clean end of a truncated stream.
        let _ = socket::abort_on_close(sock);
    }
    result
}

/// With `-c` equal to `-s` and the same port, TCP's simultaneous open can connect a socket to
/// itself; that "succeeds" without any receiver. Refuse it.
fn refuse_self_connect(sock: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    let (local, peer) = (socket::local_addr(sock)?, socket::peer_addr(sock)?);
    if local == peer {
        return Err(Error::Failure(format!(
            "connected to itself ({local}): nothing listens on the peer address; \
             drop -c or start the receiver first"
        )));
    }
    Ok(())
}

/// Sends what `source` (pieces of the write size) produces, one `send` each.
fn send_pattern_on(
    req: &PatternSend,
    mut source: PatternSource,
    sock: std::os::fd::BorrowedFd<'_>,
    stop: &AtomicI32,
) -> Result<SendStats> {
    if req.write_size.is_some() {
        socket::set_nodelay(sock, true)?;
    }
    let mut chunk = Vec::new();
    let mut crc = crc32fast::Hasher::new();
    let mut stats = SendStats {
        stream: Some(req.stream),
        ..SendStats::default()
    };
    let start = Instant::now();
    while source.next_piece(usize::MAX, &mut chunk)? {
        crate::signals::check_flag(stop)?;
        crate::conn::send_all_timeout(sock, &chunk, req.timeout)?;
        crc.update(&chunk);
        stats.bytes += chunk.len() as u64;
        stats.writes += 1;
    }
    stats.elapsed = start.elapsed();
    stats.crc32 = crc.finalize();
    socket::shutdown_write(sock)?;
    Ok(stats)
}

/// [`crate::conn::connect_timeout`], retrying a refused connect every 100 ms within `timeout`
/// (default [`DEFAULT_CONNECT_RETRY`]). The last try is made at the end of the window (the
/// pause before it is shortened), so a receiver that starts listening just before the
/// deadline is still reached, and the message states when the last try was refused.
fn connect_retrying_to(
    peer: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: Option<&str>,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<std::os::fd::OwnedFd> {
    let window = timeout.unwrap_or(DEFAULT_CONNECT_RETRY);
    let start = Instant::now();
    // A window too long to represent retries until a signal.
    let deadline = start
        .checked_add(window)
        .unwrap_or_else(|| start + Duration::from_secs(u32::MAX.into()));
    let mut tries = 0u32;
    loop {
        crate::signals::check_flag(stop)?;
        let tried_at = Instant::now();
        let left = deadline.saturating_duration_since(tried_at);
        tries = tries.saturating_add(1);
        match crate::conn::connect_timeout(
            peer,
            local,
            ifname,
            Some(left.max(Duration::from_millis(1))),
        ) {
            Err(Error::Sys { call, errno }) if errno == libc::ECONNREFUSED => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::Timeout(format!(
                        "connect to [{}]:{}: still refused after {} ms, {tries} tries in the \
                         {} ms window, the last at {} ms ({call})",
                        peer.ip(),
                        peer.port(),
                        now.duration_since(start).as_millis(),
                        window.as_millis(),
                        tried_at.duration_since(start).as_millis()
                    )));
                }
                // The next try 100 ms later, or right at the deadline.
                let pause = Duration::from_millis(100);
                std::thread::sleep(pause.min(deadline.saturating_duration_since(now)));
            }
            other => return other,
        }
    }
}

/// bind-tx for the devmem client: binds `dmabuf_fd` for TX on `ifindex` (`ifname` names it in
/// messages). The returned binding owns its netlink socket; keep it alive for the whole run
/// (dropping it unbinds). Available since 6.16.
///
/// Errors: the kernel's refusals that mean "no devmem TX here" are `Error::Skip` (exit 4) with
/// the kernel's answer verbatim, e.g. `netdev bind-tx on veth0 (ifindex 2): EOPNOTSUPP
/// (Operation not supported); kernel: "Driver does not support netmem TX"`: `EOPNOTSUPP` (driver
/// without netmem TX, or no DMA-capable device) and `EPERM`. Everything else stays a failure
/// (`Error::Netlink`), as does a reply with binding id 0 (`Error::Failure`).
#[doc(alias = "NETDEV_CMD_BIND_TX")]
pub fn bind_tx(
    netdev: &Netdev,
    ifindex: u32,
    ifname: &str,
    dmabuf_fd: BorrowedFd<'_>,
) -> Result<DmabufBinding> {
    let binding = netdev
        .bind_tx(ifindex, dmabuf_fd)
        .map_err(|e| crate::caps::classify(e, crate::caps::Op::BindTx { ifname }))?;
    if binding.id() == 0 {
        return Err(Error::Failure(format!(
            "netdev bind-tx on {}: the kernel replied with binding id 0, which sendmsg would \
             treat as \"no dma-buf\"",
            binding.target()
        )));
    }
    Ok(binding)
}

/// The devmem client's TCP socket, as ncdevmem.c's `do_client` sets it up: AF_INET6,
/// `SO_BINDTODEVICE(ifname)`, with `local` bound (address and the same port) when given,
/// connected to `peer` within `timeout` (a refused connect is retried every 100 ms within that
/// window; default [`DEFAULT_CONNECT_RETRY`]), then `SO_ZEROCOPY = 1`.
///
/// Errors: as [`crate::conn::connect_timeout`]; `Error::Sys` from `setsockopt(SO_ZEROCOPY)`;
/// `Error::Interrupted` when `stop` is set.
pub fn connect_devmem(
    peer: SocketAddrV6,
    local: Option<SocketAddrV6>,
    ifname: &str,
    timeout: Option<Duration>,
    stop: &AtomicI32,
) -> Result<ZerocopySocket> {
    let fd = connect_retrying_to(peer, local, Some(ifname), timeout, stop)?;
    zerocopy::set_zerocopy(fd.as_fd(), true)?;
    Ok(ZerocopySocket::new(fd))
}
