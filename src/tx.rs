//! Send side. For now: the built-in pattern sender (`--send-pattern`), which replaces
//! `yes $(echo -e \\x01…) | head -c N | socat -u - TCP:…` on the peer: it sends `N` bytes of the
//! `-v` pattern in stream order, optionally with a fixed write size and `TCP_NODELAY` so each
//! write leaves as its own segment (segment-size sweeps, as the kernel's `check_rx_hds` does with
//! `socat -b SIZE … nodelay`).

use std::net::SocketAddrV6;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicI32;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys::socket;
use crate::validate::Pattern;

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
    /// Pattern period in bytes (`-v`).
    pub period: u32,
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
}

impl SendStats {
    /// Throughput in Gbit/s (10^9 bits per second); 0 for an empty run.
    pub fn gbps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.bytes as f64 * 8.0 / secs / 1e9
        } else {
            0.0
        }
    }

    /// One human line for stderr.
    pub fn summary_line(&self) -> String {
        format!(
            "sent {} bytes in {} writes, {:.3} s, {:.2} Gbit/s, crc32 0x{:08x}",
            self.bytes,
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
    let pattern = Pattern::new(req.period)?;
    let fd = connect_retrying(req, stop)?;
    let sock = fd.as_fd();
    let write_size = match req.write_size {
        Some(n) => {
            socket::set_nodelay(sock, true)?;
            n.max(1)
        }
        None => DEFAULT_WRITE_SIZE,
    };
    let mut buf = vec![0u8; write_size];
    let mut crc = crc32fast::Hasher::new();
    let mut stats = SendStats::default();
    let start = Instant::now();
    while stats.bytes < req.total_bytes {
        crate::signals::check_flag(stop)?;
        let n = (req.total_bytes - stats.bytes).min(write_size as u64) as usize;
        let chunk = &mut buf[..n];
        pattern.fill(chunk, stats.bytes);
        if let Some(off) = req.corrupt_offset {
            if off >= stats.bytes && off < stats.bytes + n as u64 {
                chunk[(off - stats.bytes) as usize] ^= 0xff;
            }
        }
        socket::send_all(sock, chunk)?;
        crc.update(chunk);
        stats.bytes += n as u64;
        stats.writes += 1;
    }
    stats.elapsed = start.elapsed();
    stats.crc32 = crc.finalize();
    socket::shutdown_write(sock)?;
    Ok(stats)
}

fn connect_retrying(req: &PatternSend, stop: &AtomicI32) -> Result<std::os::fd::OwnedFd> {
    let window = req.timeout.unwrap_or(DEFAULT_CONNECT_RETRY);
    let deadline = Instant::now() + window;
    loop {
        crate::signals::check_flag(stop)?;
        let left = deadline.saturating_duration_since(Instant::now());
        match socket::connect_timeout(
            req.peer,
            req.local,
            req.ifname.as_deref(),
            Some(left.max(ms(1))),
        ) {
            Err(Error::Sys { errno, .. })
                if errno == libc::ECONNREFUSED && Instant::now() + ms(100) < deadline =>
            {
                std::thread::sleep(ms(100));
            }
            Err(Error::Sys { call, errno }) if errno == libc::ECONNREFUSED => {
                return Err(Error::Timeout(format!(
                    "connect to [{}]:{}: still refused after {} ms ({call})",
                    req.peer.ip(),
                    req.peer.port(),
                    window.as_millis()
                )))
            }
            other => return other,
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
