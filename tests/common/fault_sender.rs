//! A test sender that injects faults, written from the stream definitions of
//! `docs/validation.md` alone (it uses nothing of the crate): the `-v N` pattern and the keyed
//! stream of `--seed`, sent over plain TCP connections with a fault per connection — a flipped
//! byte, bytes of another flow spliced in, a reset, silence, a stream cut short. The fault
//! matrix (`tests/fault_matrix.rs`, and the VM suite's `devmem-nic/verdict-matrix`) drives
//! every receive path with it.
//!
//! Keeping it apart from `ncdevmem::validate` is the point: a receiver and a sender that share
//! one wrong definition would agree with each other.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// SplitMix64's increment, the `G` of docs/validation.md.
const G: u64 = 0x9E37_79B9_7F4A_7C15;

/// docs/validation.md's `mix(z)`.
fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key `K` and odd step `S` of flow `flow` (0-based) of `seed`.
fn key_and_step(seed: u64, flow: u32) -> (u64, u64) {
    let h = mix(seed.wrapping_add(G));
    let f = u64::from(flow);
    let key = mix(h.wrapping_add((2 * f + 1).wrapping_mul(G)));
    let step = mix(h.wrapping_add((2 * f + 2).wrapping_mul(G))) | 1;
    (key, step)
}

/// Which stream a connection's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Flow `flow` of `--seed seed`.
    Keyed {
        /// The seed.
        seed: u64,
        /// The flow (0-based).
        flow: u32,
    },
    /// The `-v period` pattern: byte `i` is `i % period + 1`, but `0x0A` where `i % period`
    /// is `period - 1`.
    Period(u32),
}

impl Source {
    /// Fills `buf` with the stream's bytes from stream offset `offset` on.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match *self {
            Source::Keyed { seed, flow } => {
                let (key, step) = key_and_step(seed, flow);
                for (j, b) in buf.iter_mut().enumerate() {
                    let at = offset + j as u64;
                    let word = key.wrapping_add((at / 8).wrapping_mul(step));
                    *b = word.to_le_bytes()[(at % 8) as usize];
                }
            }
            Source::Period(p) => {
                let p = u64::from(p);
                for (j, b) in buf.iter_mut().enumerate() {
                    let r = (offset + j as u64) % p;
                    *b = if r == p - 1 { 0x0A } else { (r + 1) as u8 };
                }
            }
        }
    }
}

/// How much a connection sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Exactly this many bytes, then a clean close.
    Bytes(u64),
    /// Until the receiver closes (a timed receiver), at most [`Plan::limit`] long.
    UntilClosed,
}

/// One fault of a connection's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The byte at this stream offset has its bits inverted.
    FlipAt(u64),
    /// From stream offset `at`, `len` bytes of `from` (at the same offsets of its stream) in
    /// place of the connection's own.
    Splice {
        /// Where, in the connection's stream.
        at: u64,
        /// How many bytes.
        len: u64,
        /// Whose bytes.
        from: Source,
    },
    /// After this many bytes, the connection is reset (`SO_LINGER` 0, close: an RST).
    ResetAfter(u64),
    /// The connection sends nothing and stays open until the receiver closes it (or the
    /// plan's limit).
    Silent,
    /// After this many bytes, the connection goes quiet: it stays open, sending nothing more,
    /// until the receiver closes it (or the plan's limit).
    QuietAfter(u64),
}

/// What one connection sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conn {
    /// Its stream.
    pub source: Source,
    /// How much of it.
    pub length: Length,
    /// What goes wrong with it.
    pub faults: Vec<Fault>,
}

impl Conn {
    /// `length` of `source`, no fault.
    pub fn clean(source: Source, length: Length) -> Conn {
        Conn {
            source,
            length,
            faults: Vec::new(),
        }
    }

    /// This connection with `fault` too.
    pub fn with(mut self, fault: Fault) -> Conn {
        self.faults.push(fault);
        self
    }

    /// The bytes at stream offsets `offset..offset + buf.len()`, faults applied.
    fn fill(&self, offset: u64, buf: &mut [u8]) {
        self.source.fill(offset, buf);
        let end = offset + buf.len() as u64;
        for f in &self.faults {
            match *f {
                Fault::FlipAt(at) if (offset..end).contains(&at) => {
                    buf[(at - offset) as usize] ^= 0xFF;
                }
                Fault::Splice { at, len, from } => {
                    let (lo, hi) = (at.max(offset), (at + len).min(end));
                    if lo < hi {
                        let piece = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
                        from.fill(lo, piece);
                    }
                }
                _ => {}
            }
        }
    }

    fn reset_after(&self) -> Option<u64> {
        self.faults.iter().find_map(|f| match f {
            Fault::ResetAfter(n) => Some(*n),
            _ => None,
        })
    }

    fn quiet_after(&self) -> Option<u64> {
        self.faults.iter().find_map(|f| match f {
            Fault::QuietAfter(n) => Some(*n),
            _ => None,
        })
    }

    fn silent(&self) -> bool {
        self.faults.contains(&Fault::Silent)
    }
}

/// What each connection of a [`Plan`] ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Bytes written (accepted by the kernel).
    pub bytes: u64,
    /// Why the connection ended, when not by plan (the receiver closed it: reset, broken
    /// pipe).
    pub ended_by_peer: Option<String>,
    /// From the first write to the end of the sending (a failure's message: a sender that
    /// was not scheduled shows here).
    pub took: Duration,
    /// The longest time between two writes that each took bytes (the fill of a chunk, a
    /// full send buffer, or a thread that did not run).
    pub longest_gap: Duration,
}

/// A set of connections to one receiver, made in order (connection 0 is connected, and so
/// accepted, first), then sent on concurrently.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The connections, in connect order.
    pub conns: Vec<Conn>,
    /// The longest any connection may live (a bound, so a test never hangs).
    pub limit: Duration,
    /// How long a refused connect is tried again (the receiver may not listen yet).
    pub connect_within: Duration,
}

/// Bytes per write.
const CHUNK: usize = 64 << 10;

impl Plan {
    /// Connects every connection to `addr` (retrying refused connects for up to
    /// [`Plan::connect_within`]), then sends on each from its own thread. Returns what each
    /// sent, in connect order.
    ///
    /// # Errors
    /// A connection that could not be made in time (a receiver that never listened, or one
    /// that ended before all connected), naming it.
    pub fn run(&self, addr: SocketAddr) -> Result<Vec<Sent>, String> {
        let socks = (0..self.conns.len())
            .map(|c| connect(addr, self.connect_within).map_err(|e| format!("connection {c}: {e}")))
            .collect::<Result<Vec<TcpStream>, String>>()?;
        let limit = self.limit;
        std::thread::scope(|s| {
            let threads: Vec<_> = socks
                .into_iter()
                .zip(&self.conns)
                .map(|(sock, conn)| s.spawn(move || send(sock, conn, limit)))
                .collect();
            Ok(threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect())
        })
    }
}

fn connect(addr: SocketAddr, within: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + within;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("connect to {addr}: {e}")),
        }
    }
}

/// Waits for the receiver's close of `sock` (EOF or a reset), until `limit` after `start`,
/// sending nothing.
fn wait_for_close(sock: &mut TcpStream, start: Instant, limit: Duration) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(100)));
    let mut b = [0u8; 64];
    while start.elapsed() < limit {
        match sock.read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

fn send(mut sock: TcpStream, conn: &Conn, limit: Duration) -> Sent {
    let start = Instant::now();
    if conn.silent() {
        wait_for_close(&mut sock, start, limit);
        return Sent {
            bytes: 0,
            ended_by_peer: None,
            took: start.elapsed(),
            longest_gap: Duration::ZERO,
        };
    }
    let total = match conn.length {
        Length::Bytes(n) => n,
        Length::UntilClosed => u64::MAX,
    };
    let total = total.min(conn.quiet_after().unwrap_or(u64::MAX));
    let cut = conn.reset_after().unwrap_or(u64::MAX);
    let _ = sock.set_write_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    let mut ended_by_peer = None;
    let mut last_write = Instant::now();
    let mut longest_gap = Duration::ZERO;
    while off < total.min(cut) && start.elapsed() < limit {
        let n = (total.min(cut) - off).min(CHUNK as u64) as usize;
        conn.fill(off, &mut buf[..n]);
        let mut done = 0;
        while done < n && start.elapsed() < limit {
            match sock.write(&buf[done..n]) {
                Ok(w) => {
                    done += w;
                    if w > 0 {
                        longest_gap = longest_gap.max(last_write.elapsed());
                        last_write = Instant::now();
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    ended_by_peer = Some(e.to_string());
                    break;
                }
            }
        }
        off += done as u64;
        if ended_by_peer.is_some() || done < n {
            break;
        }
    }
    if conn.quiet_after().is_some_and(|q| off >= q) && ended_by_peer.is_none() {
        let took = start.elapsed();
        wait_for_close(&mut sock, start, limit);
        return Sent {
            bytes: off,
            ended_by_peer,
            took,
            longest_gap,
        };
    }
    let took = start.elapsed();
    if off >= cut && cut != u64::MAX {
        // An RST instead of a FIN.
        let _ = nix::sys::socket::setsockopt(
            &sock,
            nix::sys::socket::sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        );
        drop(sock);
    } else {
        let _ = sock.shutdown(std::net::Shutdown::Write);
        // Wait for the receiver to close, so its view of the stream is complete when the test
        // reads its verdict (bounded).
        wait_for_close(&mut sock, Instant::now(), Duration::from_secs(5));
    }
    Sent {
        bytes: off,
        ended_by_peer,
        took,
        longest_gap,
    }
}
