//! What every receive path (devmem and plain `recvmsg` in [`crate::rx`], io_uring zcrx in
//! [`crate::uring`]) does with the stream's bytes, in stream order: validate each piece in
//! place or write it to the payload output, keep the stream's CRC-32, note when the first byte
//! came (wall and CPU time), time the progress lines, and give the verdict at the end. No
//! syscalls besides the payload writes and `getrusage`.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::stats::{CpuTime, RxStats};
use crate::validate::{StreamCrc, StreamSpec, Validator};

/// The stream side of a receive: see the module doc.
pub(crate) struct PayloadSink<'a, W: Write> {
    out: &'a mut W,
    /// Diagnostics (mismatches, diagnoses, progress, `-V` lines of the caller).
    pub(crate) log: &'a mut dyn Write,
    validator: Option<Validator>,
    crc: StreamCrc,
    first_byte: Option<Instant>,
    cpu_at_first_byte: Option<CpuTime>,
    last_progress: Instant,
    last_progress_bytes: u64,
    /// Mismatches and diagnoses are logged as they are found (one flow); with several flows
    /// they are logged at the end under each flow's final number, from [`RxStats::validation`].
    live: bool,
}

impl<'a, W: Write> PayloadSink<'a, W> {
    /// Validates against `validate` (pieces named `piece` in messages: "frag", "chunk"), or
    /// writes the payload to `out` when `None`.
    ///
    /// Errors: `Error::Usage` for a `-v` period outside 2..=256.
    pub(crate) fn new(
        validate: Option<StreamSpec>,
        piece: &'static str,
        out: &'a mut W,
        log: &'a mut dyn Write,
    ) -> Result<Self> {
        Ok(PayloadSink {
            out,
            log,
            validator: validate
                .map(|s| Validator::for_spec(s).map(|v| v.with_piece_name(piece)))
                .transpose()?,
            crc: StreamCrc::default(),
            first_byte: None,
            cpu_at_first_byte: None,
            last_progress: Instant::now(),
            last_progress_bytes: 0,
            live: true,
        })
    }

    /// Whether mismatches and diagnoses are logged as they are found (the default) or only
    /// kept for the end ([`RxStats::validation`]).
    pub(crate) fn live_diagnostics(mut self, live: bool) -> Self {
        self.live = live;
        self
    }

    /// Data arrived; the first call records the first byte's time and the process's CPU time
    /// then (the start of [`RxStats::elapsed`] and [`RxStats::cpu`]). Later calls read no
    /// clock: this is on the per-piece path.
    pub(crate) fn data_arrived(&mut self) {
        if self.first_byte.is_none() {
            self.first_byte = Some(Instant::now());
            self.cpu_at_first_byte = crate::sys::cpu_time();
        }
    }

    /// Restarts the progress interval at `now` (the start of the receive).
    pub(crate) fn start_progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    /// Validates the next piece of the stream (logging its mismatches and diagnosis), or
    /// writes it to the payload output; adds it to the CRC-32 (a clean validated piece only by its
    /// length).
    ///
    /// Errors: a failed payload write ([`crate::Error::io`]: `Error::Interrupted` when a
    /// stop signal ended it).
    pub(crate) fn consume(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(v) = &mut self.validator {
            let before = (v.reported().len(), v.diagnoses().len());
            let mismatched = v.check(bytes);
            // A clean piece is not hashed: the periodic stream's CRC is computed from one
            // period at the end, a checked keyed stream's is not needed (StreamCrc32).
            self.crc.piece(bytes, mismatched == 0);
            if mismatched > 0 && self.live {
                for m in &v.reported()[before.0..] {
                    crate::elog_to!(self.log, "validation mismatch at {m}");
                }
                for d in &v.diagnoses()[before.1..] {
                    crate::elog_to!(self.log, "validation: {d}");
                }
            }
            Ok(())
        } else {
            self.crc.piece(bytes, false);
            self.out
                .write_all(bytes)
                .map_err(|e| crate::Error::io("write(payload output)", &e))
        }
    }

    /// Fills in the counters kept here: validated bytes, mismatches, the stream, elapsed time
    /// and CPU time since the first byte.
    pub(crate) fn update(&self, stats: &mut RxStats) {
        if let Some(v) = &self.validator {
            stats.validated_bytes = v.offset();
            stats.mismatches = v.mismatches();
            stats.stream = Some(v.pattern().spec());
            stats.stream_identified = v.identified();
        }
        stats.elapsed = self.first_byte.map(|t| t.elapsed()).unwrap_or_default();
        stats.cpu = match (self.cpu_at_first_byte, crate::sys::cpu_time()) {
            (Some(then), Some(now)) => Some(now.since(then)),
            _ => None,
        };
    }

    /// Every `every` (none: never), brings `stats` up to date (`update` for the caller's own
    /// counters, then [`PayloadSink::update`]) and logs a progress line.
    pub(crate) fn maybe_progress(
        &mut self,
        every: Option<Duration>,
        stats: &mut RxStats,
        update: impl FnOnce(&mut RxStats),
    ) {
        let Some(every) = every else {
            return;
        };
        let since = self.last_progress.elapsed();
        if since < every {
            return;
        }
        update(stats);
        self.update(stats);
        let line = stats.progress_line(self.last_progress_bytes, since);
        crate::elog_to!(self.log, "{line}");
        self.last_progress = Instant::now();
        self.last_progress_bytes = stats.bytes;
    }

    /// The end of the receive: the final counters, the validator's notes
    /// ([`RxStats::validation`]) and the CRC-32 into `stats`, the payload output flushed.
    /// Returns the connection's own result: `result` (the loop's), else the flush's error.
    /// Mismatches are not in it: they are facts of `stats` the verdict reads
    /// (`crate::verdict`; [`RxStats::validation_result`] for one connection).
    pub(crate) fn finish(&mut self, stats: &mut RxStats, result: Result<()>) -> Result<()> {
        if let Some(v) = &mut self.validator {
            let before = (v.reported().len(), v.diagnoses().len());
            if v.end() > 0 && self.live {
                for m in &v.reported()[before.0..] {
                    crate::elog_to!(self.log, "validation mismatch at {m}");
                }
            }
            stats.validation = crate::stats::ValidationNotes {
                failure: v.failure_text(),
                mismatches: v.reported().to_vec(),
                diagnoses: v.diagnoses().to_vec(),
                causes: v.causes().to_vec(),
            };
        }
        self.update(stats);
        stats.crc32 = self.crc.value(self.validator.as_ref().map(|v| v.pattern()));
        result.and_then(|()| {
            self.out
                .flush()
                .map_err(|e| crate::Error::io("write(payload output)", &e))
        })
    }
}
