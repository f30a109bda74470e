//! Receive statistics: counters kept by the receive loop, the human summary line for stderr,
//! the periodic progress line, and the `--json FILE` object (written atomically).
//!
//! A run is a measurement as well as a verdict (`docs/architecture.md#purpose`), so the
//! counters cover the data (bytes, dmabuf and linear frags), the token traffic (tokens
//! released, `SO_DEVMEM_DONTNEED` calls) and the syscalls (`recvmsg` calls, `EAGAIN`/`EINTR`
//! retries).

use crate::validate::{StreamCrc32, StreamSpec};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};

/// Which receive path produced the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxMode {
    /// `recvmsg(MSG_SOCK_DEVMEM)` with `SCM_DEVMEM_*` cmsgs and token release.
    #[default]
    Devmem,
    /// Ordinary `recvmsg` into the iov: validates the TCP path, not devmem.
    PlainTcp,
    /// io_uring zero-copy receive: multishot `RECV_ZC` completions pointing into the zcrx
    /// area, buffers returned through the refill ring ([`ZcrxCounters`]).
    Zcrx,
}

impl RxMode {
    /// Label used in the summary line and the JSON `mode` field.
    pub fn label(self) -> &'static str {
        match self {
            RxMode::Devmem => "devmem",
            RxMode::PlainTcp => "plain TCP",
            RxMode::Zcrx => "io_uring zcrx",
        }
    }
}

/// Counters of one receive run (one connection).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RxStats {
    /// Receive path.
    pub mode: RxMode,
    /// Stream bytes received (sum of `recvmsg` returns).
    pub bytes: u64,
    /// `SCM_DEVMEM_DMABUF` frags received (one token each).
    pub dmabuf_frags: u64,
    /// Bytes in dmabuf frags (read in place from the dma-buf mapping).
    pub dmabuf_bytes: u64,
    /// Largest dmabuf frag in bytes: at most the binding's niov size (rx-page-size), reached
    /// when the driver fills niovs back to back and TCP coalesces adjacent frags.
    pub max_dmabuf_frag: u32,
    /// `SCM_DEVMEM_LINEAR` frags received (bytes copied to the iov from the skb head).
    pub linear_frags: u64,
    /// Bytes in linear frags.
    pub linear_bytes: u64,
    /// Bytes that arrived in the iov with no devmem cmsg (plain TCP mode).
    pub plain_bytes: u64,
    /// Tokens the kernel reported freed (sum of `SO_DEVMEM_DONTNEED` returns).
    pub tokens_released: u64,
    /// `setsockopt(SO_DEVMEM_DONTNEED)` calls made.
    pub dontneed_calls: u64,
    /// `recvmsg` calls made (including the final one returning 0 and failed ones).
    pub recvmsg_calls: u64,
    /// `recvmsg` calls that answered `EAGAIN` right after `poll` had said the socket was
    /// readable (a spurious wakeup; the loop pauses before the next try).
    pub eagain_retries: u64,
    /// `poll(POLLIN)` calls: one each time `recvmsg` found nothing queued (a busy socket is
    /// read without polling).
    pub poll_calls: u64,
    /// `recvmsg` (or poll) calls that failed with `EINTR` and were retried.
    pub eintr_retries: u64,
    /// `recvmsg` calls that returned 0 bytes with control data: neither EOF nor data (idle for
    /// the timeout; the loop pauses before the next try).
    pub control_only_recvmsgs: u64,
    /// Bytes checked against the test stream (0 without validation).
    pub validated_bytes: u64,
    /// Bytes that did not match the test stream.
    pub mismatches: u64,
    /// The test stream checked (`-v N` or `--seed SEED`), `None` without validation.
    pub stream: Option<StreamSpec>,
    /// With the keyed stream of several flows: the connection's first 8 bytes were word 0 of
    /// [`RxStats::stream`]'s flow, so that is the flow it carried; `false` when they were no
    /// flow's (too few bytes, or bytes of no flow), the stream then being the one the
    /// connection was received as.
    pub stream_identified: bool,
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the stream bytes received, in stream order:
    /// of every byte, validated or not, except where a keyed stream was checked: its bytes
    /// before the first piece with a mismatch are not hashed ([`StreamCrc32`]). Equal to the
    /// sender's when the stream arrived intact and both hashed every byte.
    pub crc32: StreamCrc32,
    /// Time from the first byte received to the end of the run (zero if nothing arrived).
    pub elapsed: Duration,
    /// CPU time the process used over [`RxStats::elapsed`] (`getrusage(RUSAGE_SELF)`, all
    /// threads); `None` when nothing arrived or it could not be read.
    pub cpu: Option<CpuTime>,
    /// io_uring zcrx counters ([`RxMode::Zcrx`] only; zero otherwise).
    pub zcrx: ZcrxCounters,
    /// The connection's receive buffer, when the server sized it or was told to
    /// ([`crate::rcvbuf`]).
    pub rcvbuf: Option<RcvbufReport>,
    /// The connection's `SO_RCVLOWAT` as the kernel kept it (bytes), when `--rcvlowat` set one.
    pub rcvlowat: Option<u32>,
    /// Devmem: `recvmsg` answered `ENODEV` after a `-U 1` unbind (the binding had no users
    /// left, autorelease series v10) and the run ended there, cleanly.
    pub binding_gone: bool,
    /// Sizes of the dmabuf frags, in power-of-two buckets.
    pub frag_sizes: crate::figures::hist::FragSizeHistogram,
    /// What the validator found beyond the counts (empty without mismatches).
    pub validation: ValidationNotes,
}

/// What a connection's validator found beyond [`RxStats::mismatches`]: its account of the
/// failure, the first mismatching bytes and diagnoses, and every diagnosed piece's fault
/// counted — for the verdict (`crate::verdict`) and the lines that explain it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidationNotes {
    /// `validation failed (…): …` ([`crate::validate::Validator::failure_text`]), when a
    /// byte differed.
    pub failure: Option<String>,
    /// The first mismatching bytes (at most [`crate::validate::MAX_REPORTED_MISMATCHES`]).
    pub mismatches: Vec<crate::validate::Mismatch>,
    /// The first diagnoses (keyed stream; at most [`crate::validate::MAX_DIAGNOSES`]).
    pub diagnoses: Vec<crate::validate::Diagnosis>,
    /// Every diagnosed piece's fault, counted ([`crate::validate::Validator::causes`]).
    pub causes: Vec<(crate::validate::Fault, u64)>,
}

pub use crate::sys::cpu::CpuTime;

/// Shortest wall time a CPU share ([`cpu_share_capped`]) is computed over. The kernel
/// advances a process's user and system times in scheduler ticks (up to 10 ms apart, at
/// HZ=100), so over a shorter interval the quotient says when a tick fell rather than how
/// busy the CPU was (a send of a few microseconds read 439 % of one CPU).
pub const MIN_CPU_SHARE_WALL: Duration = Duration::from_millis(10);

/// `cpu`'s user + system time over `wall` (1.0 = one CPU busy throughout), at most `cpus`
/// (a process cannot use more than the CPUs there are). `None` without CPU figures, or when
/// `wall` is shorter than [`MIN_CPU_SHARE_WALL`]: not measurable. Summed in seconds, so
/// huge CPU times do not overflow.
pub fn cpu_share_capped(cpu: Option<CpuTime>, wall: Duration, cpus: usize) -> Option<f64> {
    let c = cpu?;
    if wall < MIN_CPU_SHARE_WALL {
        return None;
    }
    let share = (c.user.as_secs_f64() + c.sys.as_secs_f64()) / wall.as_secs_f64();
    Some(share.min(cpus.max(1) as f64))
}

/// [`cpu_share_capped`] at the online CPUs of this machine.
pub fn cpu_share(cpu: Option<CpuTime>, wall: Duration) -> Option<f64> {
    cpu_share_capped(cpu, wall, crate::sys::softirq::online_cpus())
}

/// `"(P% of one CPU over the {what})"`, or, for an interval too short to measure
/// ([`MIN_CPU_SHARE_WALL`]), `"(CPU share not measured: the {what} took under 10 ms)"`.
pub(crate) fn cpu_share_text(cpu: Option<CpuTime>, wall: Duration, what: &str) -> String {
    match cpu_share(cpu, wall) {
        Some(share) => format!("({:.0}% of one CPU over the {what})", share * 100.0),
        None => format!(
            "(CPU share not measured: the {what} took under {} ms)",
            MIN_CPU_SHARE_WALL.as_millis()
        ),
    }
}

/// The receive buffer a server asked for and got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RcvbufReport {
    /// `SO_RCVBUF` as set before `listen` (bytes); `None` when left at the kernel's default.
    pub set: Option<u32>,
    /// What the kernel reports for the connection (`getsockopt(SO_RCVBUF)`, bytes).
    pub effective: u32,
    /// Why ([`crate::rcvbuf::RcvbufPlan::reason`]).
    pub reason: String,
    /// `--rcvbuf` gave `set` ([`crate::rcvbuf::RcvbufPlan::requested`]).
    pub requested: bool,
}

/// Counters of the io_uring zcrx receive path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZcrxCounters {
    /// `RECV_ZC` completions carrying data (one buffer of the area each).
    pub chunks: u64,
    /// Refill-ring entries published back to the kernel (buffers returned).
    pub buffers_returned: u64,
    /// Release stores of the refill-ring tail (one per batch).
    pub refill_publishes: u64,
    /// `RECV_ZC` submissions (the first arm plus every re-arm after a completion without
    /// `IORING_CQE_F_MORE`).
    pub arms: u64,
    /// Completions with `ENOSPC`/`ENOMEM` (completion queue full, or no free buffer in the
    /// area) that were answered by returning buffers and re-arming.
    pub retried_errors: u64,
    /// `ZCRX_CTRL_FLUSH_RQ` calls (after `ENOMEM`: returned buffers put back into the free
    /// list, which nothing else does without a page pool).
    pub flushes: u64,
    /// `io_uring_enter(GETEVENTS)` waits.
    pub waits: u64,
    /// Bytes per area buffer (`rx_buf_len`) as the kernel wrote it back at registration (its
    /// default, the page size, when the field came back 0).
    pub rx_buf_len: u32,
}

impl RxStats {
    /// Empty counters for `mode`.
    pub fn new(mode: RxMode) -> RxStats {
        RxStats {
            mode,
            ..RxStats::default()
        }
    }

    /// Adds `other`'s counts (another flow of the same run) to these: bytes, frags, tokens,
    /// calls, validated bytes, mismatches and the zcrx counters are summed, the largest frag
    /// (and zcrx buffer size) is the larger one, `binding_gone` is either's. The CRC-32, the
    /// stream, the times, the receive buffer and the low-water mark are per flow and stay as
    /// they are.
    pub(crate) fn merge(&mut self, other: &RxStats) {
        self.bytes += other.bytes;
        self.dmabuf_frags += other.dmabuf_frags;
        self.dmabuf_bytes += other.dmabuf_bytes;
        self.max_dmabuf_frag = self.max_dmabuf_frag.max(other.max_dmabuf_frag);
        self.linear_frags += other.linear_frags;
        self.linear_bytes += other.linear_bytes;
        self.plain_bytes += other.plain_bytes;
        self.tokens_released += other.tokens_released;
        self.dontneed_calls += other.dontneed_calls;
        self.recvmsg_calls += other.recvmsg_calls;
        self.eagain_retries += other.eagain_retries;
        self.poll_calls += other.poll_calls;
        self.eintr_retries += other.eintr_retries;
        self.control_only_recvmsgs += other.control_only_recvmsgs;
        self.validated_bytes += other.validated_bytes;
        self.mismatches += other.mismatches;
        self.binding_gone |= other.binding_gone;
        self.frag_sizes.merge(&other.frag_sizes);
        let (z, o) = (&mut self.zcrx, &other.zcrx);
        z.chunks += o.chunks;
        z.buffers_returned += o.buffers_returned;
        z.refill_publishes += o.refill_publishes;
        z.arms += o.arms;
        z.retried_errors += o.retried_errors;
        z.flushes += o.flushes;
        z.waits += o.waits;
        z.rx_buf_len = z.rx_buf_len.max(o.rx_buf_len);
    }

    /// The verdict of this connection's bytes alone: `Ok` when none mismatched.
    ///
    /// # Errors
    /// [`crate::Error::Failure`] with the validator's account ([`ValidationNotes::failure`]).
    pub fn validation_result(&self) -> crate::Result<()> {
        match (&self.validation.failure, self.mismatches) {
            (_, 0) => Ok(()),
            (Some(text), _) => Err(crate::Error::Failure(text.clone())),
            (None, n) => Err(crate::Error::Failure(format!(
                "validation failed: {n} mismatched byte(s)"
            ))),
        }
    }

    /// Throughput in Gbit/s (10^9 bits per second) over [`RxStats::elapsed`]; 0 when no time
    /// has elapsed.
    pub fn gbit_per_s(&self) -> f64 {
        gbit_per_s(self.bytes, self.elapsed)
    }

    /// One human line for stderr, e.g.
    /// `rx summary (devmem): 1048576 bytes in 0.010 s = 0.839 Gbit/s; frags: 256 dmabuf
    /// (1048576 B), 0 linear (0 B); tokens released: 256 in 2 DONTNEED calls; recvmsg calls: 3
    /// (0 spurious EAGAIN, 0 EINTR retries), poll calls: 1 (per GiB: …)`, the CPU time over the
    /// receive, the CRC-32, and validation or plain-TCP notes when relevant.
    pub fn summary_line(&self) -> String {
        let mut s = format!(
            "rx summary ({}): {} bytes in {:.3} s = {:.3} Gbit/s",
            self.mode.label(),
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.gbit_per_s()
        );
        match self.mode {
            RxMode::Devmem => s.push_str(&format!(
                "; frags: {} dmabuf ({} B, largest {} B), {} linear ({} B); tokens released: {} in {} DONTNEED calls",
                self.dmabuf_frags,
                self.dmabuf_bytes,
                self.max_dmabuf_frag,
                self.linear_frags,
                self.linear_bytes,
                self.tokens_released,
                self.dontneed_calls
            )),
            RxMode::PlainTcp => s.push_str(&format!(
                "; {} bytes through the iov (validates the TCP path, not devmem)",
                self.plain_bytes
            )),
            RxMode::Zcrx => s.push_str(&format!(
                "; chunks: {} (rx_buf_len {}); buffers returned: {} in {} refill publishes, {} \
                 flushes; RECV_ZC arms: {} ({} ENOSPC/ENOMEM retries); io_uring_enter waits: {} \
                 ({} EINTR retries)",
                self.zcrx.chunks,
                self.zcrx.rx_buf_len,
                self.zcrx.buffers_returned,
                self.zcrx.refill_publishes,
                self.zcrx.flushes,
                self.zcrx.arms,
                self.zcrx.retried_errors,
                self.zcrx.waits,
                self.eintr_retries
            )),
        }
        if self.binding_gone {
            s.push_str("; binding gone (recvmsg answered ENODEV after the -U 1 unbind)");
        }
        if self.mode != RxMode::Zcrx {
            let control_only = match self.control_only_recvmsgs {
                0 => String::new(),
                n => format!(", {n} with control data and no bytes"),
            };
            s.push_str(&format!(
                "; recvmsg calls: {} ({} spurious EAGAIN, {} EINTR retries{control_only}), poll \
                 calls: {}",
                self.recvmsg_calls, self.eagain_retries, self.eintr_retries, self.poll_calls
            ));
            if self.bytes > 0 {
                let per_gib = |n: u64| n as f64 * GIB / self.bytes as f64;
                s.push_str(&format!(
                    " (per GiB: {:.1} recvmsg, {:.1} poll, {:.1} DONTNEED)",
                    per_gib(self.recvmsg_calls),
                    per_gib(self.poll_calls),
                    per_gib(self.dontneed_calls)
                ));
            }
        }
        if let Some(c) = self.cpu {
            s.push_str(&format!(
                "; CPU user {:.3} s, sys {:.3} s {}",
                c.user.as_secs_f64(),
                c.sys.as_secs_f64(),
                cpu_share_text(self.cpu, self.elapsed, "receive")
            ));
        }
        if let Some(r) = &self.rcvbuf {
            let how = r.set.map_or("kernel default".into(), |set| {
                let from = if r.requested {
                    "from --rcvbuf"
                } else {
                    "sized to the binding"
                };
                format!("SO_RCVBUF {set}, {from}")
            });
            s.push_str(&format!("; receive buffer {} B ({how})", r.effective));
        }
        s.push_str(&format!("; {}", self.crc32.describe()));
        if self.validated_bytes > 0 || self.mismatches > 0 {
            let stream = self.stream.map(|t| format!(" ({t})")).unwrap_or_default();
            s.push_str(&format!(
                "; validated {} bytes{stream}, {} mismatched",
                self.validated_bytes, self.mismatches
            ));
        }
        s
    }

    /// User + system CPU time over the receive divided by its wall time (1.0 = one CPU busy
    /// throughout), at most the online CPUs; `None` without CPU figures or for a receive
    /// shorter than [`MIN_CPU_SHARE_WALL`] ([`cpu_share`]).
    pub fn cpu_utilisation(&self) -> Option<f64> {
        cpu_share(self.cpu, self.elapsed)
    }

    /// The progress line printed at an interval on long runs: totals so far plus the rate
    /// since the previous progress line (`prev_bytes` bytes `since` ago).
    pub(crate) fn progress_line(&self, prev_bytes: u64, since: Duration) -> String {
        let tail = match self.mode {
            RxMode::Zcrx => format!(
                "{} chunks, {} buffers returned",
                self.zcrx.chunks, self.zcrx.buffers_returned
            ),
            _ => format!(
                "{} dmabuf + {} linear frags, {} tokens released",
                self.dmabuf_frags, self.linear_frags, self.tokens_released
            ),
        };
        format!(
            "rx progress ({}): {} bytes in {:.1} s, {:.3} Gbit/s (last {:.1} s: {:.3} Gbit/s); {tail}",
            self.mode.label(),
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.gbit_per_s(),
            since.as_secs_f64(),
            gbit_per_s(self.bytes.saturating_sub(prev_bytes), since),
        )
    }

    /// The counters as one JSON object (the `--json FILE` content). Fields: `mode`
    /// (`"devmem"` | `"plain TCP"` | `"io_uring zcrx"`), `bytes`, `dmabuf_frags`, `dmabuf_bytes`,
    /// `max_dmabuf_frag` (bytes), `linear_frags`,
    /// `linear_bytes`, `plain_bytes`, `tokens_released`, `dontneed_calls`, `recvmsg_calls`,
    /// `eagain_retries`, `eintr_retries`, `control_only_recvmsgs`, `poll_calls`, `cpu_user_s`,
    /// `cpu_sys_s` (seconds over the receive, null when unknown), `cpu_utilisation` (fraction of
    /// one CPU, null when unknown), `validated_bytes`, `mismatches`, `stream` (`"period 7"`,
    /// `"seed 42"` or null), `crc32` (number; null when no byte was hashed) and `crc32_from` (the
    /// stream offset the CRC covers from: [`StreamCrc32`]), `elapsed_s` (seconds, float),
    /// `gbit_per_s` (float). In [`RxMode::Zcrx`] also `zcrx_chunks`, `zcrx_buffers_returned`,
    /// `zcrx_refill_publishes`, `zcrx_arms`, `zcrx_retried_errors`, `zcrx_flushes`, `zcrx_waits`,
    /// `zcrx_rx_buf_len` (bytes). When the server sized or was given its receive buffer:
    /// `rcvbuf_set` (`SO_RCVBUF` bytes or null), `rcvbuf_bytes` (what the kernel keeps) and
    /// `rcvbuf_reason`. With `--rcvlowat`: `rcvlowat_bytes` (what the kernel kept).
    #[cfg(test)]
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.totals()).unwrap_or_default()
    }

    /// These counters as the summary's types ([`crate::summary::RxTotals`]): the zcrx
    /// counters only for a zcrx receive, `binding_gone` only for devmem, the receive buffer
    /// when one was planned.
    pub fn totals(&self) -> crate::summary::RxTotals {
        let z = &self.zcrx;
        crate::summary::RxTotals {
            bytes: self.bytes,
            dmabuf_frags: self.dmabuf_frags,
            dmabuf_bytes: self.dmabuf_bytes,
            max_dmabuf_frag: self.max_dmabuf_frag,
            linear_frags: self.linear_frags,
            linear_bytes: self.linear_bytes,
            plain_bytes: self.plain_bytes,
            tokens_released: self.tokens_released,
            dontneed_calls: self.dontneed_calls,
            recvmsg_calls: self.recvmsg_calls,
            eagain_retries: self.eagain_retries,
            eintr_retries: self.eintr_retries,
            control_only_recvmsgs: self.control_only_recvmsgs,
            poll_calls: self.poll_calls,
            cpu_user_s: self.cpu.map(|c| c.user.as_secs_f64()),
            cpu_sys_s: self.cpu.map(|c| c.sys.as_secs_f64()),
            cpu_utilisation: self.cpu_utilisation(),
            validated_bytes: self.validated_bytes,
            mismatches: self.mismatches,
            stream: self.stream.map(|t| t.to_string()),
            crc32: self.crc32.value,
            crc32_from: Some(self.crc32.from),
            elapsed_s: self.elapsed.as_secs_f64(),
            gbit_per_s: self.gbit_per_s(),
            zcrx: (self.mode == RxMode::Zcrx).then_some(crate::summary::ZcrxTotals {
                zcrx_chunks: z.chunks,
                zcrx_buffers_returned: z.buffers_returned,
                zcrx_refill_publishes: z.refill_publishes,
                zcrx_arms: z.arms,
                zcrx_retried_errors: z.retried_errors,
                zcrx_flushes: z.flushes,
                zcrx_waits: z.waits,
                zcrx_rx_buf_len: z.rx_buf_len,
            }),
            binding_gone: (self.mode == RxMode::Devmem).then_some(self.binding_gone),
            rcvbuf: self.rcvbuf.as_ref().map(|r| crate::summary::RcvbufFigures {
                rcvbuf_set: r.set.map(u64::from),
                rcvbuf_bytes: u64::from(r.effective),
                rcvbuf_reason: r.reason.clone(),
            }),
            rcvlowat_bytes: self.rcvlowat.map(u64::from),
        }
    }
}

/// Writes one JSON object (plus a newline) to `path` atomically, for every mode's `--json`:
/// into a new temporary file in the same directory (`create_temp`), `fsync`, then `rename`
/// over `path`, so a reader never sees a partial object.
///
/// # Errors
/// [`Error::Usage`] as [`check_json_path`] for a path that cannot be the target; [`Error::Sys`]
/// naming the failing step and file (`create`, `write`, `fsync`, `rename`).
pub fn write_json_atomic(path: &Path, value: &serde_json::Value) -> Result<()> {
    write_file_atomic("--json", path, format!("{value}\n").as_bytes())
}

/// Writes `bytes` to the file `path` of option `flag` atomically, as [`write_json_atomic`]
/// does (a temporary file beside it, `fsync`, `rename`): a reader sees the old file or the
/// whole new one.
///
/// # Errors
/// [`Error::Usage`] as [`check_file_path`]; [`Error::Sys`] naming `flag`, the failing step and
/// file (`create`, `write`, `fsync`, `rename`).
pub(crate) fn write_file_atomic(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    check_file_target(flag, path)?;
    let io_err = |step: &str, p: &Path, e: std::io::Error| {
        Error::io(format!("{flag}: {step}({})", p.display()), &e)
    };
    let (tmp, mut f) = create_temp(path).map_err(|(tmp, e)| io_err("create", &tmp, e))?;
    let result = (|| {
        f.write_all(bytes).map_err(|e| io_err("write", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("fsync", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| io_err("rename", path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Mean and sample standard deviation (n − 1 in the denominator) of `values`; the deviation
/// is 0 for fewer than two values, and both are 0 for none.
///
/// ```
/// let (mean, sd) = ncdevmem::stats::mean_sd(&[1.0, 2.0, 3.0]);
/// assert_eq!((mean, sd), (2.0, 1.0));
/// assert_eq!(ncdevmem::stats::mean_sd(&[5.0]), (5.0, 0.0));
/// ```
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Gbit/s for `bytes` over `elapsed`; 0 for a zero duration.
pub fn gbit_per_s(bytes: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e9
    } else {
        0.0
    }
}

/// Longest file name the kernel accepts, in bytes (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// Bytes in a GiB, for the per-GiB call rates.
const GIB: f64 = (1u64 << 30) as f64;

/// Checks, before a run starts, that `--json PATH` can be written: a file name (not ending in
/// `/`, `.` or `..`, at most `NAME_MAX` bytes) whose parent is an existing directory, either
/// nothing at `PATH` yet or a regular file (never a device, FIFO, directory or symlink, which
/// the atomic rename would replace), and a directory this process can create files in (a
/// temporary file is created there and removed again: a read-only file system, a directory
/// without write permission or one of `/proc` or `/sys` is found now, not after the run).
///
/// # Errors
/// [`Error::Usage`] naming `--json` and what is wrong.
pub fn check_json_path(path: &Path) -> Result<()> {
    check_file_path("--json", path)
}

/// [`check_json_path`]'s checks for the output file `path` of option `flag` (`--json`,
/// `--pid-file`).
///
/// # Errors
/// [`Error::Usage`] naming `flag` and what is wrong.
pub(crate) fn check_file_path(flag: &str, path: &Path) -> Result<()> {
    check_file_target(flag, path)?;
    let (tmp, _file) = create_temp(path).map_err(|(tmp, e)| {
        Error::Usage(format!(
            "{flag}: cannot create a file next to '{}' ({}: {})",
            path.display(),
            tmp.display(),
            crate::error::errno_display(crate::error::errno_of(&e))
        ))
    })?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// Creates a temporary file next to `path` and removes it again: whether the directory takes
/// a new file (a read-only file system, a directory without write permission, `/proc`).
///
/// # Errors
/// The creation's error.
pub(crate) fn check_can_create_beside(path: &Path) -> std::io::Result<()> {
    let (tmp, _file) = create_temp(path).map_err(|(_, e)| e)?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// The checks of [`check_file_path`] that need no write: the path's shape, its directory and
/// what is at `path` now.
fn check_file_target(flag: &str, path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bad = |why: &str| Error::Usage(format!("{flag}: '{}' {why}", path.display()));
    // `Path` drops a trailing `/` or `.` ("out/" has the file name "out"), but the kernel
    // does not: the last component as typed must be the file name.
    let typed_last = path.as_os_str().as_bytes().rsplit(|&b| b == b'/').next();
    match path.file_name() {
        Some(name) if typed_last == Some(name.as_bytes()) => {
            if name.len() > NAME_MAX {
                return Err(bad(&format!(
                    "has a file name of {} bytes (at most {NAME_MAX})",
                    name.len()
                )));
            }
        }
        _ => return Err(bad("is not a file path")),
    }
    if path.as_os_str().len() >= libc::PATH_MAX as usize {
        return Err(bad(&format!(
            "is {} bytes long (at most {})",
            path.as_os_str().len(),
            libc::PATH_MAX - 1
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(bad("is in a directory that does not exist"));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => Err(bad(
            "exists and is not a regular file (a device, FIFO, directory or symlink)",
        )),
        _ => Ok(()),
    }
}

/// Creates a new temporary file next to `path` (`O_EXCL|O_NOFOLLOW`, so a planted file or
/// symlink is never written through), named `.ncdevmem-rs.PID.N.tmp` whatever the length of
/// `path`'s own name. Returns its path and the open file, or the path last tried and the error.
fn create_temp(
    path: &Path,
) -> std::result::Result<(PathBuf, std::fs::File), (PathBuf, std::io::Error)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut attempt = 0u32;
    loop {
        let tmp = path.with_file_name(format!(
            ".{}.{}.{attempt}.tmp",
            crate::cli::PROGRAM,
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
            }
            Err(e) => return Err((tmp, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RxStats {
        RxStats {
            mode: RxMode::Devmem,
            bytes: 1_250_000_000,
            dmabuf_frags: 300,
            dmabuf_bytes: 1_249_999_000,
            max_dmabuf_frag: 4096,
            linear_frags: 2,
            linear_bytes: 1000,
            tokens_released: 300,
            dontneed_calls: 3,
            recvmsg_calls: 5,
            eagain_retries: 1,
            eintr_retries: 2,
            poll_calls: 4,
            validated_bytes: 1_250_000_000,
            stream: Some(StreamSpec::Periodic(7)),
            crc32: StreamCrc32::of_all(0xCBF4_3926),
            elapsed: Duration::from_secs(1),
            cpu: Some(CpuTime {
                user: Duration::from_millis(250),
                sys: Duration::from_millis(500),
            }),
            ..RxStats::default()
        }
    }

    #[test]
    fn binding_gone_is_reported() {
        let mut s = sample();
        assert!(!s.summary_line().contains("binding gone"));
        assert_eq!(s.to_json()["binding_gone"], false);
        s.binding_gone = true;
        assert!(
            s.summary_line()
                .contains("; binding gone (recvmsg answered ENODEV after the -U 1 unbind)"),
            "{}",
            s.summary_line()
        );
        assert_eq!(s.to_json()["binding_gone"], true);
        s.mode = RxMode::PlainTcp;
        assert!(s.to_json().get("binding_gone").is_none());
    }

    #[test]
    fn the_low_water_mark_is_reported_when_set() {
        let mut s = sample();
        assert!(s.to_json().get("rcvlowat_bytes").is_none());
        s.rcvlowat = Some(131072);
        assert_eq!(s.to_json()["rcvlowat_bytes"], 131072);
        // Per flow: a merged flow's mark does not replace the first's.
        let mut other = sample();
        other.rcvlowat = Some(65536);
        s.merge(&other);
        assert_eq!(s.to_json()["rcvlowat_bytes"], 131072);
    }

    #[test]
    fn the_receive_buffer_is_reported_when_sized() {
        let mut s = sample();
        assert!(!s.summary_line().contains("receive buffer"));
        assert!(s.to_json().get("rcvbuf_bytes").is_none());
        s.rcvbuf = Some(RcvbufReport {
            set: Some(22848),
            effective: 45696,
            reason: "the binding holds 64 buffers".into(),
            requested: false,
        });
        assert!(
            s.summary_line()
                .contains("; receive buffer 45696 B (SO_RCVBUF 22848, sized to the binding)"),
            "{}",
            s.summary_line()
        );
        let j = s.to_json();
        assert_eq!(j["rcvbuf_set"], 22848);
        assert_eq!(j["rcvbuf_bytes"], 45696);
        assert_eq!(j["rcvbuf_reason"], "the binding holds 64 buffers");
        s.rcvbuf = Some(RcvbufReport {
            set: None,
            effective: 131072,
            reason: "left".into(),
            requested: false,
        });
        assert!(s
            .summary_line()
            .contains("; receive buffer 131072 B (kernel default)"));
        assert!(s.to_json()["rcvbuf_set"].is_null());
        // A size the user gave is not called sized to the binding (a plain receiver has none).
        s.rcvbuf = Some(RcvbufReport {
            set: Some(8192),
            effective: 16384,
            reason: "SO_RCVBUF 8192, from --rcvbuf".into(),
            requested: true,
        });
        assert!(
            s.summary_line()
                .contains("; receive buffer 16384 B (SO_RCVBUF 8192, from --rcvbuf)"),
            "{}",
            s.summary_line()
        );
    }

    #[test]
    fn merged_flows_sum_their_zcrx_counters() {
        let mut a = RxStats::new(RxMode::Zcrx);
        a.zcrx = ZcrxCounters {
            chunks: 3,
            buffers_returned: 3,
            refill_publishes: 1,
            arms: 1,
            retried_errors: 0,
            flushes: 0,
            waits: 5,
            rx_buf_len: 4096,
        };
        let mut b = RxStats::new(RxMode::Zcrx);
        b.zcrx = ZcrxCounters {
            chunks: 4,
            arms: 2,
            retried_errors: 1,
            flushes: 1,
            rx_buf_len: 16384,
            ..ZcrxCounters::default()
        };
        a.merge(&b);
        assert_eq!(
            a.zcrx,
            ZcrxCounters {
                chunks: 7,
                buffers_returned: 3,
                refill_publishes: 1,
                arms: 3,
                retried_errors: 1,
                flushes: 1,
                waits: 5,
                rx_buf_len: 16384,
            }
        );
    }

    #[test]
    fn zcrx_mode_reports_its_own_counters() {
        let s = RxStats {
            mode: RxMode::Zcrx,
            bytes: 8192,
            eintr_retries: 1,
            elapsed: Duration::from_millis(1),
            zcrx: ZcrxCounters {
                chunks: 2,
                buffers_returned: 2,
                refill_publishes: 1,
                arms: 1,
                waits: 3,
                rx_buf_len: 16384,
                ..ZcrxCounters::default()
            },
            ..RxStats::default()
        };
        let line = s.summary_line();
        assert!(
            line.starts_with("rx summary (io_uring zcrx): 8192 bytes"),
            "{line}"
        );
        assert!(
            line.contains(
                "chunks: 2 (rx_buf_len 16384); buffers returned: 2 in 1 refill publishes, 0 \
                 flushes; RECV_ZC arms: 1 (0 ENOSPC/ENOMEM retries); io_uring_enter waits: 3 (1 \
                 EINTR retries)"
            ),
            "{line}"
        );
        assert!(!line.contains("recvmsg"), "{line}");
        assert!(s
            .progress_line(0, Duration::from_secs(1))
            .ends_with("2 chunks, 2 buffers returned"));
        let j = s.to_json();
        // The mode is the summary's envelope's (`run_report::summary_json`), not the body's.
        assert_eq!(s.mode.label(), "io_uring zcrx");
        assert!(j.get("mode").is_none(), "{j}");
        assert_eq!(j["zcrx_chunks"], 2);
        assert_eq!(j["zcrx_buffers_returned"], 2);
        assert_eq!(j["zcrx_rx_buf_len"], 16384);
        assert_eq!(j["zcrx_waits"], 3);
        // Other modes keep their key set.
        assert!(sample().to_json().get("zcrx_chunks").is_none());
    }

    #[test]
    fn throughput_is_gigabits_per_second() {
        assert_eq!(sample().gbit_per_s(), 10.0);
        assert_eq!(gbit_per_s(100, Duration::ZERO), 0.0);
    }

    /// `recvmsg` calls with control data and no bytes are named in the summary when there were
    /// any, and always in the JSON.
    #[test]
    fn control_only_recvmsgs_are_shown_when_any() {
        let s = RxStats {
            control_only_recvmsgs: 3,
            ..sample()
        };
        let line = s.summary_line();
        assert!(
            line.contains("recvmsg calls: 5 (1 spurious EAGAIN, 2 EINTR retries, 3 with control data and no bytes), poll calls: 4"),
            "{line}"
        );
        assert_eq!(s.to_json()["control_only_recvmsgs"], 3);
    }

    #[test]
    fn summary_line_names_every_counter() {
        assert_eq!(
            sample().summary_line(),
            "rx summary (devmem): 1250000000 bytes in 1.000 s = 10.000 Gbit/s; \
             frags: 300 dmabuf (1249999000 B, largest 4096 B), 2 linear (1000 B); tokens released: 300 in 3 DONTNEED calls; \
             recvmsg calls: 5 (1 spurious EAGAIN, 2 EINTR retries), poll calls: 4 \
             (per GiB: 4.3 recvmsg, 3.4 poll, 2.6 DONTNEED); \
             CPU user 0.250 s, sys 0.500 s (75% of one CPU over the receive); crc32 0xcbf43926; \
             validated 1250000000 bytes (period 7), 0 mismatched"
        );
        let j = sample().to_json();
        assert_eq!(j["crc32"], 0xCBF4_3926u32);
        assert_eq!(j["poll_calls"], 4);
        assert_eq!(j["cpu_user_s"], 0.25);
        assert_eq!(j["cpu_sys_s"], 0.5);
        assert_eq!(j["cpu_utilisation"], 0.75);
        assert!(RxStats::default().to_json()["cpu_utilisation"].is_null());
        assert_eq!(j["stream"], "period 7");
        let keyed = RxStats {
            stream: Some(StreamSpec::keyed(42)),
            ..sample()
        };
        assert!(keyed
            .summary_line()
            .ends_with("validated 1250000000 bytes (seed 42), 0 mismatched"));
        assert_eq!(keyed.to_json()["stream"], "seed 42");
        assert!(RxStats::default().to_json()["stream"].is_null());
    }

    /// CPU figures too large to add as `Duration`s (user + sys past `u64::MAX` seconds) do
    /// not panic the summary or the JSON: the utilisation is summed in seconds.
    #[test]
    fn cpu_utilisation_of_huge_cpu_times_does_not_overflow() {
        let s = RxStats {
            cpu: Some(CpuTime {
                user: Duration::MAX,
                sys: Duration::MAX,
            }),
            ..sample()
        };
        let u = s.cpu_utilisation().unwrap();
        // Capped at the online CPUs: no process uses more than there are.
        let cpus = crate::sys::softirq::online_cpus() as f64;
        assert!(u.is_finite() && u == cpus, "{u}");
        assert_eq!(
            cpu_share_capped(s.cpu, s.elapsed, usize::MAX).unwrap(),
            usize::MAX as f64
        );
        assert!(s.summary_line().contains("; CPU user "));
        assert_eq!(s.to_json()["cpu_utilisation"], u);
    }

    /// A CPU share is never above what the CPUs allow, and over an interval shorter than
    /// MIN_CPU_SHARE_WALL it is not measured: null in the JSON, said in the line. Before: a
    /// 0-byte send of about 1 ms read "439% of one CPU", 4.39 in the JSON.
    #[test]
    fn cpu_share_is_capped_and_not_measured_over_a_tiny_interval() {
        let cpu = Some(CpuTime {
            user: Duration::from_millis(2),
            sys: Duration::from_micros(2390),
        });
        assert_eq!(cpu_share_capped(cpu, Duration::from_millis(1), 8), None);
        assert_eq!(cpu_share_capped(cpu, Duration::from_micros(9_999), 8), None);
        let four_cpus = Some(CpuTime {
            user: Duration::from_millis(30),
            sys: Duration::from_millis(20),
        });
        assert_eq!(
            cpu_share_capped(four_cpus, MIN_CPU_SHARE_WALL, 8),
            Some(5.0)
        );
        assert_eq!(
            cpu_share_capped(four_cpus, MIN_CPU_SHARE_WALL, 2),
            Some(2.0)
        );
        assert_eq!(cpu_share_capped(None, Duration::from_secs(1), 2), None);
        let short = RxStats {
            cpu,
            elapsed: Duration::from_millis(1),
            ..sample()
        };
        assert!(short.to_json()["cpu_utilisation"].is_null());
        let line = short.summary_line();
        assert!(
            line.contains(
                "CPU user 0.002 s, sys 0.002 s (CPU share not measured: the receive took \
                 under 10 ms)"
            ),
            "{line}"
        );
        let text = crate::tx::cpu_text(cpu, Duration::from_millis(1));
        assert_eq!(
            text,
            "; CPU user 0.002 s, sys 0.002 s (CPU share not measured: the send took under 10 ms)"
        );
    }

    #[test]
    fn plain_mode_is_labelled_honestly() {
        let s = RxStats {
            mode: RxMode::PlainTcp,
            bytes: 10,
            plain_bytes: 10,
            recvmsg_calls: 2,
            ..RxStats::default()
        };
        let line = s.summary_line();
        assert!(
            line.starts_with("rx summary (plain TCP): 10 bytes"),
            "{line}"
        );
        assert!(
            line.contains("validates the TCP path, not devmem"),
            "{line}"
        );
        assert_eq!(s.mode.label(), "plain TCP");
    }

    #[test]
    fn progress_line_has_interval_rate() {
        let line = sample().progress_line(0, Duration::from_millis(500));
        assert!(
            line.contains("(last 0.5 s: 20.000 Gbit/s)"),
            "rate over the interval: {line}"
        );
    }

    #[test]
    fn json_object_has_all_fields_and_is_written_atomically() {
        let dir = std::env::temp_dir().join(format!("ncdevmem-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rx.json");
        write_json_atomic(&path, &sample().to_json()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(sample().mode.label(), "devmem");
        assert_eq!(v["bytes"], 1_250_000_000u64);
        assert_eq!(v["dmabuf_frags"], 300);
        assert_eq!(v["max_dmabuf_frag"], 4096);
        assert_eq!(v["linear_bytes"], 1000);
        assert_eq!(v["tokens_released"], 300);
        assert_eq!(v["dontneed_calls"], 3);
        assert_eq!(v["recvmsg_calls"], 5);
        assert_eq!(v["eagain_retries"], 1);
        assert_eq!(v["eintr_retries"], 2);
        assert_eq!(v["elapsed_s"], 1.0);
        assert_eq!(v["gbit_per_s"], 10.0);
        assert_eq!(v["crc32"], 0xCBF4_3926u32);
        assert_eq!(v["crc32_from"], 0);
        assert_eq!(v["stream"], "period 7");
        assert_eq!(v["binding_gone"], false);
        assert_eq!(v["control_only_recvmsgs"], 0);
        // 25 members before, without `mode` (the summary's envelope carries it), with
        // `crc32_from`.
        assert_eq!(v.as_object().unwrap().len(), 25);
        // Only the final file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("rx.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_path_in_missing_directory_is_a_usage_error() {
        let e = write_json_atomic(
            Path::new("/nonexistent-dir-ncdevmem/x.json"),
            &sample().to_json(),
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "--json: '/nonexistent-dir-ncdevmem/x.json' is in a directory that does not exist"
        );
    }

    /// A `--json` path the summary can never be written to is refused before the run (exit 2),
    /// not found after it: a trailing `/` or `.`, a name over `NAME_MAX`, a directory where
    /// no file can be created (`/proc`, `/sys`). A name of exactly `NAME_MAX` bytes works (the
    /// temporary file's name no longer grows with it).
    #[test]
    fn json_paths_that_cannot_be_written_are_refused_up_front() {
        let dir = std::env::temp_dir().join(format!("ncdevmem-json-shape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        for (p, why) in [
            (format!("{d}/out/"), "is not a file path"),
            (format!("{d}/out/."), "is not a file path"),
            (format!("{d}/.."), "is not a file path"),
            (
                format!("{d}/{}", "a".repeat(256)),
                "has a file name of 256 bytes",
            ),
            (
                "/proc/x.json".to_string(),
                "cannot create a file next to '/proc/x.json'",
            ),
            (
                "/sys/x.json".to_string(),
                "cannot create a file next to '/sys/x.json'",
            ),
        ] {
            let e = check_json_path(Path::new(&p)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{p}: {e}");
            assert!(e.to_string().contains(why), "{p}: {e}");
        }
        let longest = dir.join("b".repeat(NAME_MAX));
        check_json_path(&longest).unwrap();
        write_json_atomic(&longest, &sample().to_json()).unwrap();
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![longest.file_name().unwrap().to_owned()],
            "no temp file left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_never_replaces_devices_directories_or_symlinks() {
        for p in ["/dev/null", "/tmp", "/"] {
            let e = check_json_path(Path::new(p)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{p}: {e}");
        }
        let dir = std::env::temp_dir().join(format!("ncdevmem-json-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = dir.join("out.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = write_json_atomic(&link, &sample().to_json()).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_temp_file_planted_by_someone_else_is_not_written_through() {
        let dir = std::env::temp_dir().join(format!("ncdevmem-json-tmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let planted = dir.join(format!(".ncdevmem-rs.{}.0.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_json_atomic(&dir.join("rx.json"), &sample().to_json()).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let written = std::fs::read_to_string(dir.join("rx.json")).unwrap();
        assert!(written.starts_with('{'), "{written}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
