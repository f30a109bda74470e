//! The histogram of frag sizes of one flow, in power-of-two buckets, updated once per frag in
//! the receive loop: one `leading_zeros` and one add into a fixed array, no branch on the
//! size and no bounds check (the compiler sees the index is at most 32). Merged
//! across flows for the totals. Cost per frag: docs/benchmarks.md ("frag-hist").

/// Number of buckets: bucket 0 holds size 0, bucket `k` (1..=32) sizes `2^(k-1) ..= 2^k - 1`.
const FRAG_HIST_BUCKETS: usize = u32::BITS as usize + 1;

/// The bucket of a frag of `size` bytes: the bit length of `size` (0 for 0, 1 for 1, 13 for
/// 4096..=8191, 32 for 2^31 and above), as `63 - leading_zeros(2 * size + 1)`. The operand is
/// never 0, so on baseline x86-64 this is one `lea` and one `bsr`; `u32::leading_zeros` of a
/// possibly-zero `size` compiles to the zero-preserving `bsr` form instead, which measured 3×
/// slower per frag on this project's AMD EPYC machines.
#[inline]
pub(crate) fn bucket_of(size: u32) -> usize {
    (63 - ((u64::from(size) << 1) | 1).leading_zeros()) as usize
}

/// Frag counts by size class. A 4 KiB niov filled to the end gives 4096-byte frags, the first
/// size of bucket 13 (4096..=8191), so whole-niov frags stand apart from the short ones below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragSizeHistogram {
    counts: [u64; FRAG_HIST_BUCKETS],
}

impl Default for FragSizeHistogram {
    fn default() -> Self {
        FragSizeHistogram {
            counts: [0; FRAG_HIST_BUCKETS],
        }
    }
}

/// One non-empty bucket of a [`FragSizeHistogram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragBucket {
    /// Smallest size in the bucket, bytes.
    pub min: u32,
    /// Largest size in the bucket, bytes.
    pub max: u32,
    /// Frags whose size fell in `min..=max`.
    pub frags: u64,
}

impl FragSizeHistogram {
    /// Counts one frag of `size` bytes.
    #[inline]
    pub fn record(&mut self, size: u32) {
        self.counts[bucket_of(size)] += 1;
    }

    /// Adds every count of `other` (another flow's frags) to this one.
    pub(crate) fn merge(&mut self, other: &FragSizeHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a = a.saturating_add(b);
        }
    }

    /// Frags counted.
    pub fn frags(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The non-empty buckets, smallest sizes first.
    pub fn buckets(&self) -> impl Iterator<Item = FragBucket> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(k, &frags)| {
                let (min, max) = match k {
                    0 => (0, 0),
                    k => (1u32 << (k - 1), u32::MAX >> (u32::BITS as usize - k)),
                };
                FragBucket { min, max, frags }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_bit_lengths() {
        let cases = [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (1448, 11),
            (4095, 12),
            (4096, 13),
            (8191, 13),
            (65536, 17),
            (1 << 31, 32),
            (u32::MAX, 32),
        ];
        for (size, k) in cases {
            assert_eq!(bucket_of(size), k, "{size}");
        }
    }

    #[test]
    fn record_merge_and_list() {
        let mut a = FragSizeHistogram::default();
        for s in [4096, 4096, 1448, 0, 5000, u32::MAX] {
            a.record(s);
        }
        let mut b = FragSizeHistogram::default();
        b.record(4096);
        b.record(100);
        a.merge(&b);
        assert_eq!(a.frags(), 8);
        let got: Vec<_> = a.buckets().map(|b| (b.min, b.max, b.frags)).collect();
        assert_eq!(
            got,
            [
                (0, 0, 1),
                (64, 127, 1),
                (1024, 2047, 1),
                (4096, 8191, 4),
                (1 << 31, u32::MAX, 1),
            ]
        );
        assert_eq!(FragSizeHistogram::default().buckets().count(), 0);
    }

    proptest! {
        #[test]
        fn every_size_lies_in_its_bucket(size in any::<u32>()) {
            let mut h = FragSizeHistogram::default();
            h.record(size);
            let b: Vec<_> = h.buckets().collect();
            prop_assert_eq!(b.len(), 1);
            prop_assert!(b[0].min <= size && size <= b[0].max);
        }
    }
}
