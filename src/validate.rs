//! The `-v N` test pattern: generation (for the pattern sender) and validation (for the
//! receiver), both by stream offset.
//!
//! The stream is the bytes `1, 2, …, N-1, 0x0A` repeated with period `N` (what
//! `yes $(printf '\x01\x02…')` produces), so the expected byte at stream offset `i` is
//! `r + 1` for `r = i % N < N - 1` and `0x0A` for `r == N - 1`. This matches ncdevmem.c's
//! `validate_buffer` for `N` in 2..=255; `N = 256` is accepted too (bytes 1..=255 then 0x0A),
//! which C's 8-bit counter cannot express.
//!
//! Both directions work on a precomputed window of several KiB whose length is a multiple of
//! `N`, so checking a frag is a slice comparison (`memcmp`) and only a failing chunk is
//! scanned byte by byte. State is one stream offset per connection: linear (iov) bytes and
//! dmabuf frag bytes advance the same offset, in stream order.

use crate::error::{Error, Result};

/// Smallest accepted period (bytes): `1, 0x0A` repeated.
pub const MIN_PERIOD: u32 = 2;
/// Largest accepted period (bytes): `1..=255, 0x0A` repeated.
pub const MAX_PERIOD: u32 = 256;
/// How many mismatches are kept (and reported to stderr by the receive loop) per connection;
/// later ones are only counted. Same cap as ncdevmem.c.
pub const MAX_REPORTED_MISMATCHES: usize = 20;

/// Minimum bytes compared per slice comparison; the window is this plus one period, rounded
/// up to a multiple of the period.
const COMPARE_CHUNK: usize = 16 * 1024;

/// The repeating test pattern of period `N` bytes, with a precomputed window for fast
/// comparison and filling.
#[derive(Debug, Clone)]
pub struct Pattern {
    period: usize,
    /// `k * period` bytes of the pattern starting at stream offset 0, with
    /// `(k - 1) * period >= COMPARE_CHUNK`.
    window: Box<[u8]>,
}

impl Pattern {
    /// The pattern with period `period` bytes.
    ///
    /// # Errors
    /// [`Error::Usage`] unless `period` is in [`MIN_PERIOD`]..=[`MAX_PERIOD`] (names `-v`).
    pub fn new(period: u32) -> Result<Pattern> {
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(Error::Usage(format!(
                "-v: validation period {period} out of range {MIN_PERIOD}..={MAX_PERIOD} bytes"
            )));
        }
        let period = period as usize;
        let periods = COMPARE_CHUNK.div_ceil(period) + 1;
        let window: Box<[u8]> = (0..periods * period)
            .map(|i| byte_for_phase(i % period, period))
            .collect();
        Ok(Pattern { period, window })
    }

    /// The period in bytes.
    pub fn period(&self) -> u32 {
        self.period as u32
    }

    /// The expected byte at stream offset `offset` (bytes from the start of the connection).
    pub fn expected(&self, offset: u64) -> u8 {
        byte_for_phase((offset % self.period as u64) as usize, self.period)
    }

    /// Fills `buf` with the pattern bytes of stream offsets `offset..offset + buf.len()`.
    /// Used by the pattern sender to build what it sends.
    pub fn fill(&self, buf: &mut [u8], offset: u64) {
        let phase = (offset % self.period as u64) as usize;
        let chunk = self.window.len() - self.period;
        // Every full chunk is a multiple of the period, so the phase stays the same.
        for part in buf.chunks_mut(chunk) {
            part.copy_from_slice(&self.window[phase..phase + part.len()]);
        }
    }

    /// Compares `data` against the stream at `offset`; calls `on_mismatch` for every
    /// differing byte in stream order and returns how many there were.
    fn compare(&self, offset: u64, data: &[u8], mut on_mismatch: impl FnMut(Mismatch)) -> u64 {
        let phase = (offset % self.period as u64) as usize;
        let chunk = self.window.len() - self.period;
        let mut count = 0;
        let mut base = offset;
        for part in data.chunks(chunk) {
            let expected = &self.window[phase..phase + part.len()];
            if part != expected {
                for (i, (&actual, &expected)) in part.iter().zip(expected).enumerate() {
                    if actual != expected {
                        count += 1;
                        on_mismatch(Mismatch {
                            offset: base + i as u64,
                            expected,
                            actual,
                        });
                    }
                }
            }
            base += part.len() as u64;
        }
        count
    }
}

/// Pattern byte for phase `r` (`stream offset % period`).
fn byte_for_phase(r: usize, period: usize) -> u8 {
    if r == period - 1 {
        0x0A
    } else {
        // r <= period - 2 <= 254, so r + 1 fits a byte.
        (r + 1) as u8
    }
}

/// One byte that differed from the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Stream offset of the byte, in bytes from the start of the connection.
    pub offset: u64,
    /// The pattern byte expected there.
    pub expected: u8,
    /// The byte received.
    pub actual: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream offset {}: expected 0x{:02x}, actual 0x{:02x}",
            self.offset, self.expected, self.actual
        )
    }
}

/// Validation state of one connection: the next stream offset, the mismatch count and the
/// first [`MAX_REPORTED_MISMATCHES`] mismatches.
#[derive(Debug, Clone)]
pub struct Validator {
    pattern: Pattern,
    offset: u64,
    mismatches: u64,
    reported: Vec<Mismatch>,
}

impl Validator {
    /// A validator at stream offset 0 for period `period` bytes.
    ///
    /// # Errors
    /// [`Error::Usage`] for a period outside 2..=256 (see [`Pattern::new`]).
    pub fn new(period: u32) -> Result<Validator> {
        Ok(Validator {
            pattern: Pattern::new(period)?,
            offset: 0,
            mismatches: 0,
            reported: Vec::new(),
        })
    }

    /// The pattern being checked.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Stream offset (bytes) of the next byte to check = bytes checked so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Checks the next `data.len()` bytes of the stream and advances the offset. Returns how
    /// many of them mismatched. The first [`MAX_REPORTED_MISMATCHES`] mismatches of the
    /// connection are kept in [`Validator::reported`].
    pub fn check(&mut self, data: &[u8]) -> u64 {
        let reported = &mut self.reported;
        let n = self.pattern.compare(self.offset, data, |m| {
            if reported.len() < MAX_REPORTED_MISMATCHES {
                reported.push(m);
            }
        });
        self.offset += data.len() as u64;
        self.mismatches += n;
        n
    }

    /// Total mismatched bytes so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// The first (up to [`MAX_REPORTED_MISMATCHES`]) mismatches, in stream order.
    pub fn reported(&self) -> &[Mismatch] {
        &self.reported
    }

    /// `Ok` if every byte so far matched.
    ///
    /// # Errors
    /// [`Error::Failure`] naming the mismatch count, the bytes checked and the first mismatch.
    pub fn finish(&self) -> Result<()> {
        match self.reported.first() {
            None => Ok(()),
            Some(first) => Err(Error::Failure(format!(
                "validation failed (period {}): {} mismatched byte(s) in {} bytes; first at {}",
                self.pattern.period, self.mismatches, self.offset, first
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Per-byte reference of the pattern definition.
    fn naive(offset: u64, period: u32) -> u8 {
        let r = offset % period as u64;
        if r == period as u64 - 1 {
            0x0A
        } else {
            (r + 1) as u8
        }
    }

    #[test]
    fn period_range_is_enforced() {
        assert!(matches!(Pattern::new(0), Err(Error::Usage(_))));
        assert!(matches!(Pattern::new(1), Err(Error::Usage(_))));
        assert!(matches!(Pattern::new(257), Err(Error::Usage(_))));
        assert_eq!(Pattern::new(2).unwrap().period(), 2);
        assert_eq!(Pattern::new(256).unwrap().period(), 256);
    }

    #[test]
    fn period_7_is_ncdevmem_default_stream() {
        let p = Pattern::new(7).unwrap();
        let mut buf = [0u8; 15];
        p.fill(&mut buf, 0);
        assert_eq!(
            buf,
            [1, 2, 3, 4, 5, 6, 0x0A, 1, 2, 3, 4, 5, 6, 0x0A, 1],
            "`yes $(echo -e \\x01..\\x06)` stream"
        );
    }

    #[test]
    fn wraps_for_period_2_and_256() {
        let p = Pattern::new(2).unwrap();
        let mut buf = [0u8; 5];
        p.fill(&mut buf, 1);
        assert_eq!(buf, [0x0A, 1, 0x0A, 1, 0x0A]);

        let p = Pattern::new(256).unwrap();
        assert_eq!(p.expected(0), 1);
        assert_eq!(p.expected(254), 255);
        assert_eq!(p.expected(255), 0x0A);
        assert_eq!(p.expected(256), 1);
        assert_eq!(p.expected(256 * 1000 + 255), 0x0A);
    }

    #[test]
    fn fill_at_offset_spans_several_windows() {
        let p = Pattern::new(13).unwrap();
        let off = 1_000_003u64;
        let mut buf = vec![0u8; 100_000];
        p.fill(&mut buf, off);
        for (i, b) in buf.iter().enumerate() {
            assert_eq!(*b, naive(off + i as u64, 13), "offset {}", off + i as u64);
        }
    }

    #[test]
    fn validator_follows_stream_offset_across_calls() {
        let p = Pattern::new(7).unwrap();
        let mut stream = vec![0u8; 50_000];
        p.fill(&mut stream, 0);
        let mut v = Validator::new(7).unwrap();
        for piece in [
            &stream[..1],
            &stream[1..4097],
            &stream[4097..4100],
            &stream[4100..],
        ] {
            assert_eq!(v.check(piece), 0);
        }
        assert_eq!(v.offset(), 50_000);
        assert!(v.finish().is_ok());
    }

    #[test]
    fn validator_reports_offset_expected_actual() {
        let p = Pattern::new(7).unwrap();
        let mut stream = vec![0u8; 40_000];
        p.fill(&mut stream, 0);
        stream[20_001] = 0xEE; // 20001 % 7 = 2 -> expected 3
        let mut v = Validator::new(7).unwrap();
        assert_eq!(v.check(&stream[..20_000]), 0);
        assert_eq!(v.check(&stream[20_000..]), 1);
        assert_eq!(
            v.reported(),
            &[Mismatch {
                offset: 20_001,
                expected: 3,
                actual: 0xEE
            }]
        );
        let e = v.finish().unwrap_err().to_string();
        assert_eq!(
            e,
            "validation failed (period 7): 1 mismatched byte(s) in 40000 bytes; \
             first at stream offset 20001: expected 0x03, actual 0xee"
        );
    }

    #[test]
    fn validator_keeps_first_20_and_counts_all() {
        let mut v = Validator::new(5).unwrap();
        let zeros = vec![0u8; 100];
        assert_eq!(v.check(&zeros), 100);
        assert_eq!(v.mismatches(), 100);
        assert_eq!(v.reported().len(), MAX_REPORTED_MISMATCHES);
        assert_eq!(v.reported()[19].offset, 19);
        assert_eq!(v.reported()[19].expected, naive(19, 5));
    }

    proptest! {
        #[test]
        fn validator_agrees_with_naive_reference(
            period in MIN_PERIOD..=MAX_PERIOD,
            offset in 0u64..10_000_000,
            len in 0usize..40_000,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..8),
        ) {
            let p = Pattern::new(period).unwrap();
            let mut data = vec![0u8; len];
            p.fill(&mut data, offset);
            for (i, b) in data.iter().enumerate() {
                prop_assert_eq!(*b, naive(offset + i as u64, period));
            }
            if len > 0 {
                for (idx, x) in &flips {
                    let i = idx.index(len);
                    data[i] ^= x;
                }
            }
            let want: Vec<Mismatch> = data
                .iter()
                .enumerate()
                .filter_map(|(i, &a)| {
                    let e = naive(offset + i as u64, period);
                    (a != e).then_some(Mismatch { offset: offset + i as u64, expected: e, actual: a })
                })
                .collect();
            let mut got = Vec::new();
            let n = p.compare(offset, &data, |m| got.push(m));
            prop_assert_eq!(n as usize, want.len());
            prop_assert_eq!(got, want);
        }
    }
}
