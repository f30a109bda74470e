//! The test streams: generation (for the senders) and validation (for the receivers), both by
//! stream offset.
//!
//! Two streams ([`StreamSpec`]):
//! * **`-v N`, periodic**: the bytes `1, 2, …, N-1, 0x0A` repeated with period `N` (what
//!   `yes $(printf '\x01\x02…')` produces), so the expected byte at stream offset `i` is `r + 1`
//!   for `r = i % N < N - 1` and `0x0A` for `r == N - 1`. This matches ncdevmem.c's
//!   `validate_buffer` for `N` in 2..=255; `N = 256` is accepted too (bytes 1..=255 then 0x0A),
//!   which C's 8-bit counter cannot express. Data moved by a multiple of `N` bytes passes.
//! * **`--seed SEED`, keyed, one stream per flow** ([`KeyedFlow`]): flow `f` (0-based; a
//!   single-flow run is flow 0) has a key `K` and an odd step `S` ([`flow_key`]: SplitMix64's
//!   outputs `2f` and `2f+1`, the latter made odd, from the state its first output from `SEED`
//!   gives), and the 8 bytes at stream offsets `8i..8i+7` are, little-endian, `K + i·S`
//!   mod 2^64 ([`FlowKey::word`]). `S` is odd, so every 8-byte word names its own position
//!   under its flow's key and step ([`FlowKey::index_of`] inverts it), misplaced data never
//!   passes, and the validator can say where a misplaced frag's bytes came from
//!   ([`Diagnosis`]). Every flow has its own step, so no flow's words are a shifted copy of
//!   another's: under another flow's key and step (a wrong seed, another flow) consecutive
//!   words decode to positions `S'·S⁻¹` apart, never to a shifted or reordered stretch of
//!   this stream, and the diagnosis tries every flow's key to tell another flow's bytes from
//!   bytes of no stream of this seed.
//!
//! Both are checked without per-byte work on the good path: the periodic stream against a
//! precomputed window whose length is a multiple of `N`, placed so that its loads are as
//! aligned as the data's, the keyed stream word by word (a load, an XOR with the expected word,
//! an OR, and one add to step the expected word: the same few vector instructions per 64 bytes
//! as a plain read's one add, in [`Isa`]'s builds); only a failing block is scanned byte by
//! byte. State is one stream offset per connection: linear (iov) bytes and dmabuf frag bytes
//! advance the same offset, in stream order.

use crate::error::{Error, Result};

mod simd;

use simd::dispatched;
pub use simd::{active_isa, force_isa, Isa};

/// Smallest accepted period (bytes): `1, 0x0A` repeated.
pub const MIN_PERIOD: u32 = 2;
/// Largest accepted period (bytes): `1..=255, 0x0A` repeated.
pub const MAX_PERIOD: u32 = 256;
/// How many mismatches are kept (and reported to stderr by the receive loop) per connection;
/// later ones are only counted. Same cap as ncdevmem.c.
pub const MAX_REPORTED_MISMATCHES: usize = 20;
/// How many diagnoses of bad pieces ([`Diagnosis`]) are kept per connection.
pub const MAX_DIAGNOSES: usize = 20;
/// A misplaced piece whose bytes are those of one of this many latest pieces, from its start,
/// is a duplicate; from further back, stale. 32 pieces cover a 64 KiB TSO frame in 4 KiB
/// frags twice over, so a frame delivered again is a duplicate; a recycled niov whose payload
/// was not written usually held data older than that.
pub const DUPLICATE_WINDOW: usize = 32;
/// How many of the latest pieces (frags, or plain `recvmsg` chunks) the validator remembers
/// for [`Diagnosis`]: whether a misplaced piece's bytes belong to a piece delivered just before
/// (duplicate) or to one that was itself out of place (reordered).
pub const RECENT_PIECES: usize = 4096;

/// Bytes compared per window comparison of the periodic stream. 4 KiB keeps the window in L1 next
/// to the data streaming through: 16 KiB made the 64 KiB-frag comparison 2× slower in cache and the
/// 1 GiB receive loop 15% slower (docs/benchmarks.md).
const COMPARE_CHUNK: usize = 4 * 1024;
/// Keyed stream: bytes checked per block before a block with a difference is scanned byte by
/// byte.
const KEYED_BLOCK: usize = 16 * 1024;
/// The vector width the loops align their data to (a cache line; AVX-512's vector).
const VECTOR_ALIGN: usize = 64;
/// Most flows a [`KeyedFlow`] can be one of (each one's key is tried when a piece is not its
/// own stream's).
pub const MAX_FLOWS: u32 = 64;
/// A decoded word index at or above this (stream offset 2^48 bytes, 256 TiB) is not a plausible
/// position: no run sends that much, and a word of another key decodes below it with
/// probability 2^-19.
const PLAUSIBLE_WORDS: u64 = 1 << 45;

/// SplitMix64's increment (the golden-ratio constant), `G` of the keyed stream's key
/// derivation.
pub const SPLITMIX64_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration; each step doubles the correct
/// low bits, 3 → 6 → … → 96).
const fn inverse_mod_2_64(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for odd a
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key and the step of one flow's keyed stream ([`flow_key`]): word `i` is
/// `key + i·step` mod 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Word 0 of the stream.
    pub key: u64,
    /// What each word adds to the one before it (odd).
    pub step: u64,
}

impl FlowKey {
    /// Word `i` of the stream: the bytes at stream offsets `8i..8i+7`, little-endian.
    ///
    /// ```
    /// use ncdevmem::validate::flow_key;
    /// let k = flow_key(42, 0);
    /// assert_eq!(k.word(0), k.key);
    /// assert_eq!(k.word(3), k.key.wrapping_add(3u64.wrapping_mul(k.step)));
    /// // Every word names its position ...
    /// for i in [0, 1, 1 << 20, u64::MAX] {
    ///     assert_eq!(k.index_of(k.word(i)), i);
    /// }
    /// // ... and another flow's consecutive words do not name consecutive positions.
    /// let other = flow_key(42, 1);
    /// assert_ne!(
    ///     k.index_of(other.word(8)).wrapping_sub(k.index_of(other.word(7))),
    ///     1
    /// );
    /// ```
    #[inline(always)]
    pub fn word(self, i: u64) -> u64 {
        self.key.wrapping_add(i.wrapping_mul(self.step))
    }

    /// The `i` with `self.word(i) == word`: every 64-bit value is some word of every flow's
    /// stream (for `i` anywhere in 0..2^64), so the caller decides whether `i` is plausible.
    pub fn index_of(self, word: u64) -> u64 {
        word.wrapping_sub(self.key)
            .wrapping_mul(inverse_mod_2_64(self.step))
    }
}

/// The key and step of flow `flow` of `--seed seed`: with `h = mix(seed + G)` (SplitMix64's
/// first output from state `seed`), the key is `mix(h + (2·flow+1)·G)` and the step
/// `mix(h + (2·flow+2)·G) | 1`: SplitMix64's outputs `2·flow` and `2·flow+1` from state `h`,
/// the step made odd. Keys of one seed are distinct (`mix` is a bijection of distinct
/// counters), and so are steps but for a chance of about 2^-63 per pair.
pub fn flow_key(seed: u64, flow: u32) -> FlowKey {
    let h = mix(seed.wrapping_add(SPLITMIX64_GAMMA));
    let out = |n: u64| mix(h.wrapping_add(n.wrapping_mul(SPLITMIX64_GAMMA)));
    let n = 2 * u64::from(flow);
    FlowKey {
        key: out(n + 1),
        step: out(n + 2) | 1,
    }
}

/// Loads the little-endian word at `b[..8]`.
#[inline(always)]
fn le_word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// Whether `data` equals `key`'s stream at `offset` when it is the common piece (whole words
/// from a word boundary, at most [`KEYED_BLOCK`] bytes: one [`keyed_diff`]); `None` for any
/// other piece.
#[inline(always)]
fn keyed_common(key: FlowKey, offset: u64, data: &[u8]) -> Option<bool> {
    if (offset | data.len() as u64) % 8 != 0 || data.len() > KEYED_BLOCK {
        return None;
    }
    Some(keyed_diff(key.word(offset / 8), key.step, data) == 0)
}

/// Bytes from `ptr` to the next [`VECTOR_ALIGN`]-byte boundary, at most `len` rounded down
/// to whole words, when `ptr` is word-aligned (0 otherwise: no word boundary of the data is
/// a vector boundary). The loops check or fill these words one at a time, then the rest in
/// aligned vectors.
#[inline(always)]
fn lead_to_vector_align(ptr: *const u8, len: usize) -> usize {
    let mis = ptr as usize % VECTOR_ALIGN;
    if mis % 8 != 0 {
        return 0;
    }
    ((VECTOR_ALIGN - mis) % VECTOR_ALIGN).min(len / 8 * 8)
}

dispatched! {
    /// 0 exactly when every whole 8-byte word of `data` is the word expected there, the first
    /// expected word being `first` and each next one `step` more (else the OR of some words'
    /// differences: the baseline's of every word's, the AVX builds' 1). Bytes after the last
    /// whole word are not looked at. Built for AVX-512 and AVX2 as well ([`Isa`]:
    /// [`keyed_diff_avx512`], [`keyed_diff_avx`]); on aarch64 the baseline build is NEON's
    /// (NEON is aarch64's baseline, so every aarch64 CPU runs it).
    fn keyed_diff / keyed_diff_in / keyed_diff_builds = keyed_diff_body(first: u64, step: u64, data: &[u8]) -> u64; avx512 = keyed_diff_avx512, avx2 = keyed_diff_avx
}

/// [`keyed_diff`] in the AVX-512 build: data that starts on a 64-byte boundary and is whole
/// 256-byte steps (a 4 KiB niov, a page-aligned buffer) in the portable loop, which the
/// compiler makes 512-bit (no word checked alone at either end); any other piece (a 1448-byte
/// frag) in [`keyed_diff_avx`]'s 256-bit one. Measured in the release binary's code on this
/// machine kind: 4 KiB pieces 1.00x a plain read in the 512-bit loop against 0.94x in the
/// 256-bit one, 1448-byte pieces 0.73x against 0.83x (docs/benchmarks.md).
///
/// # Safety
/// The CPU has AVX2 (the caller is the AVX-512 build, which has it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn keyed_diff_avx512(first: u64, step: u64, data: &[u8]) -> u64 {
    if data.as_ptr() as usize % VECTOR_ALIGN == 0 && data.len() % 256 == 0 {
        return keyed_diff_body(first, step, data);
    }
    // SAFETY: the caller's contract is this function's.
    unsafe { keyed_diff_avx(first, step, data) }
}

#[inline(always)]
fn keyed_diff_body(first: u64, step: u64, data: &[u8]) -> u64 {
    let (lead, rest) = data.split_at(lead_to_vector_align(data.as_ptr(), data.len()));
    let mut want = first;
    let mut diff = 0u64;
    for w in lead.chunks_exact(8) {
        diff |= le_word(w) ^ want;
        want = want.wrapping_add(step);
    }
    // The compiler vectorizes this: `want` is an induction, `diff` an OR reduction.
    for w in rest.chunks_exact(8) {
        diff |= le_word(w) ^ want;
        want = want.wrapping_add(step);
    }
    diff
}

/// [`keyed_diff`] in the AVX builds, written with AVX2 intrinsics (the AVX-512 build makes
/// each XOR-and-OR one `vpternlogq`): 128 bytes a step in four unaligned 32-byte loads, the
/// whole vectors left, then the last whole words as one load of the last 32 bytes
/// overlapping the vector before them. Nothing is aligned first: the portable loop's words
/// one by one up to a 64-byte boundary and its epilogue took a varying number of steps per
/// piece; in 1448-byte pieces it ran at 0.64x a plain read with AVX2 and 0.74x with AVX-512,
/// this loop at 0.71x and 0.83x (docs/benchmarks.md).
///
/// # Safety
/// The CPU has AVX2 (the caller is an AVX2 function).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
// The register intrinsics are safe calls in an AVX2 function from Rust 1.87; the crate's
// rust-version (1.85) still needs them in `unsafe`.
#[allow(unused_unsafe)]
unsafe fn keyed_diff_avx(first: u64, step: u64, data: &[u8]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_loadu_si256, _mm256_or_si256, _mm256_set1_epi64x,
        _mm256_set_epi64x, _mm256_setzero_si256, _mm256_testz_si256, _mm256_xor_si256,
    };
    let words = data.len() / 8;
    if words < 4 {
        return keyed_diff_body(first, step, data);
    }
    let load = |v: &[u8]| -> __m256i {
        let v = &v[..32];
        // SAFETY: `v` is 32 readable bytes; the load takes any alignment; AVX2 is enabled.
        unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
    };
    let s2 = step.wrapping_add(step);
    // SAFETY: AVX2 is enabled (this function's callers' target feature); likewise in every
    // block below.
    let (lanes, step4, step16) = unsafe {
        (
            // Words 0..4 of a vector: 0, step, 2·step, 3·step past its first.
            _mm256_set_epi64x(s2.wrapping_add(step) as i64, s2 as i64, step as i64, 0),
            _mm256_set1_epi64x(s2.wrapping_add(s2) as i64),
            _mm256_set1_epi64x(step.wrapping_mul(16) as i64),
        )
    };
    // The expected vectors of the next 128 bytes.
    let (mut e0, mut e1, mut e2, mut e3);
    // SAFETY: as above.
    unsafe {
        e0 = _mm256_add_epi64(_mm256_set1_epi64x(first as i64), lanes);
        e1 = _mm256_add_epi64(e0, step4);
        e2 = _mm256_add_epi64(e1, step4);
        e3 = _mm256_add_epi64(e2, step4);
    }
    // SAFETY: as above.
    let (mut a0, mut a1, mut a2, mut a3) = unsafe {
        (
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
        )
    };
    let whole = &data[..words * 8];
    let mut blocks = whole.chunks_exact(128);
    for b in &mut blocks {
        // SAFETY: as above.
        unsafe {
            a0 = _mm256_or_si256(a0, _mm256_xor_si256(load(b), e0));
            a1 = _mm256_or_si256(a1, _mm256_xor_si256(load(&b[32..]), e1));
            a2 = _mm256_or_si256(a2, _mm256_xor_si256(load(&b[64..]), e2));
            a3 = _mm256_or_si256(a3, _mm256_xor_si256(load(&b[96..]), e3));
            e0 = _mm256_add_epi64(e0, step16);
            e1 = _mm256_add_epi64(e1, step16);
            e2 = _mm256_add_epi64(e2, step16);
            e3 = _mm256_add_epi64(e3, step16);
        }
    }
    // Under 128 bytes left: at most three whole vectors, expected e0, e1, e2.
    let rest = blocks.remainder();
    let mut vectors = rest.chunks_exact(32);
    for (v, e) in (&mut vectors).zip([e0, e1, e2]) {
        // SAFETY: as above.
        unsafe { a0 = _mm256_or_si256(a0, _mm256_xor_si256(load(v), e)) };
    }
    // Then at most three words: the last 32 bytes of `whole` (words `words - 4..words`),
    // overlapping the vector before them.
    if !vectors.remainder().is_empty() {
        let at = words - 4;
        let want = first.wrapping_add((at as u64).wrapping_mul(step));
        // SAFETY: as above.
        unsafe {
            let e = _mm256_add_epi64(_mm256_set1_epi64x(want as i64), lanes);
            a1 = _mm256_or_si256(a1, _mm256_xor_si256(load(&whole[at * 8..]), e));
        }
    }
    // SAFETY: as above.
    let equal = unsafe {
        let all = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
        _mm256_testz_si256(all, all) == 1
    };
    u64::from(!equal)
}

dispatched! {
    /// Fills every whole 8-byte word of `out` with the words `first`, `first + step`, …
    /// (bytes after the last whole word are left alone). Built like [`keyed_diff`].
    fn keyed_fill / keyed_fill_in / keyed_fill_builds = keyed_fill_body(first: u64, step: u64, out: &mut [u8])
}

#[inline(always)]
fn keyed_fill_body(first: u64, step: u64, out: &mut [u8]) {
    let lead = lead_to_vector_align(out.as_ptr(), out.len());
    let (lead, rest) = out.split_at_mut(lead);
    let mut word = first;
    for w in lead.chunks_exact_mut(8) {
        w.copy_from_slice(&word.to_le_bytes());
        word = word.wrapping_add(step);
    }
    for w in rest.chunks_exact_mut(8) {
        w.copy_from_slice(&word.to_le_bytes());
        word = word.wrapping_add(step);
    }
}

dispatched! {
    /// The OR over `data` of (byte XOR the byte of `expected` at the same place), word by
    /// word (`expected` at least as long as `data`): 0 when they are equal. Built like
    /// [`keyed_diff`].
    fn window_diff / window_diff_in / window_diff_builds = window_diff_body(expected: &[u8], data: &[u8]) -> u64
}

#[inline(always)]
fn window_diff_body(expected: &[u8], data: &[u8]) -> u64 {
    let expected = &expected[..data.len()];
    let mut diff = 0u64;
    let (words, tail) = data.split_at(data.len() / 8 * 8);
    let (want, want_tail) = expected.split_at(words.len());
    for (w, e) in words.chunks_exact(8).zip(want.chunks_exact(8)) {
        diff |= le_word(w) ^ le_word(e);
    }
    for (a, b) in tail.iter().zip(want_tail) {
        diff |= u64::from(a ^ b);
    }
    diff
}

/// Bytes of the stream held in registers by [`window_diff_224`]: seven 32-byte vectors.
const REGISTER_BLOCK: usize = 224;

/// Bytes of the stream [`window_diff_224`] is given, from the data's phase on: up to 31 before
/// the data's first 32-byte boundary, then the 256 it compares against from that boundary on
/// (the block's 224 and the 32 a last part vector may reach past it).
const REGISTER_SPAN: usize = 288;

/// The window comparison of a period that divides 224 (`-v 7`, and 14, 28, 56, 112, 224; 2,
/// 4, 8, 16, 32): the stream from any byte on repeats every 224 bytes, seven 32-byte vectors,
/// so the seven from `data`'s first 32-byte boundary on (`stream[lead..lead + 224]`, `stream`
/// being the stream's [`REGISTER_SPAN`] bytes from `data`'s phase on and `lead` the bytes
/// before that boundary) are held in registers and the data from that boundary on is compared
/// against them 224 bytes at a time with aligned loads, a last part block against the block's
/// start; the data's first 32 bytes (when it does not start on a boundary) and last 32 bytes
/// (when its end is not one) by one overlapping unaligned load each. The check reads only the
/// data (the window from memory doubles the loads), a load never straddles two cache lines
/// but at the piece's ends, and a piece of any length is one call. `None` where this CPU has
/// no AVX2 or `data` is under 32 bytes; else as [`window_diff`] (0 when equal).
#[inline]
fn window_diff_224(stream: &[u8; REGISTER_SPAN], data: &[u8]) -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= 32 {
        match simd::active_isa() {
            // SAFETY: the active build is AVX-512's, which the CPU has (`active_isa`).
            simd::Isa::Avx512 => return Some(unsafe { repeat_diff_224_avx512(stream, data) }),
            // SAFETY: the active build is AVX2's, which the CPU has (`active_isa`).
            simd::Isa::Avx2 => return Some(unsafe { repeat_diff_224_avx2(stream, data) }),
            simd::Isa::Baseline => {}
        }
    }
    let _ = (stream, data);
    None
}

/// [`window_diff_224`] with AVX2: sixteen 32-byte registers, seven of them the block.
///
/// # Safety
/// The CPU has AVX2; `data` is at least 32 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn repeat_diff_224_avx2(stream: &[u8; REGISTER_SPAN], data: &[u8]) -> u64 {
    // SAFETY: the caller's contract is this function's.
    unsafe { repeat_diff_224_body(stream, data) }
}

/// [`window_diff_224`] in the AVX-512 build: the same AVX2 instructions with thirty-two
/// registers, and the XOR and the OR of each vector made one `vpternlogq`.
///
/// # Safety
/// The CPU has AVX-512 (F, VL) and AVX2; `data` is at least 32 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
unsafe fn repeat_diff_224_avx512(stream: &[u8; REGISTER_SPAN], data: &[u8]) -> u64 {
    // SAFETY: the caller's contract is this function's.
    unsafe { repeat_diff_224_body(stream, data) }
}

/// The body of [`window_diff_224`]'s builds.
///
/// # Safety
/// The CPU has AVX2 (the caller is an AVX2 function); `data` is at least 32 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
// The register intrinsics are safe calls in an AVX2 function from Rust 1.87; the crate's
// rust-version (1.85) still needs them in `unsafe`.
#[allow(unused_unsafe)]
unsafe fn repeat_diff_224_body(stream: &[u8; REGISTER_SPAN], data: &[u8]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_loadu_si256, _mm256_or_si256, _mm256_setzero_si256, _mm256_testz_si256,
        _mm256_xor_si256,
    };
    const V: usize = REGISTER_BLOCK / 32;
    let load = |b: &[u8], at: usize| -> __m256i {
        let v = &b[at..at + 32];
        // SAFETY: `v` is 32 readable bytes; the load takes any alignment; AVX2 is enabled.
        unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
    };
    // Bytes before the data's first 32-byte boundary: at most 31, and `data` has at least 32.
    let lead = (32 - data.as_ptr() as usize % 32) % 32;
    let block = &stream[lead..lead + 256];
    // Seven loads written out: through `std::array::from_fn` the release binary called a
    // function compiled without AVX2, whose loads were calls of their own, stored to the stack
    // and read back by the loop (a third of a plain read in 1448-byte pieces; the benchmark's
    // build had inlined it). `make test` checks the binary's builds (scripts/simd-calls.py).
    let pattern: [__m256i; V] = [
        load(block, 0),
        load(block, 32),
        load(block, 64),
        load(block, 96),
        load(block, 128),
        load(block, 160),
        load(block, 192),
    ];
    // SAFETY: AVX2 is enabled (this function's callers' target feature).
    let (mut even, mut odd) = unsafe { (_mm256_setzero_si256(), _mm256_setzero_si256()) };
    // A first part vector: the data's first 32 bytes (overlapping the first aligned vector)
    // against the stream from their phase on.
    if lead != 0 {
        // SAFETY: AVX2 is enabled.
        unsafe { odd = _mm256_xor_si256(load(data, 0), load(stream, 0)) };
    }
    // Blocks while 224 bytes are left: no division by 224 on the way to the first comparison.
    let mut rest = &data[lead..];
    while let Some((piece, after)) = rest.split_first_chunk::<REGISTER_BLOCK>() {
        rest = after;
        for (i, p) in pattern.iter().enumerate() {
            // SAFETY: AVX2 is enabled.
            let d = unsafe { _mm256_xor_si256(load(piece, 32 * i), *p) };
            // SAFETY: AVX2 is enabled.
            unsafe {
                if i % 2 == 0 {
                    even = _mm256_or_si256(even, d);
                } else {
                    odd = _mm256_or_si256(odd, d);
                }
            }
        }
    }
    // The stream repeats every 224 bytes: the rest's whole vectors are the block's first ones.
    let vectors = rest.len() / 32;
    for (i, p) in pattern.iter().enumerate().take(V - 1) {
        if i < vectors {
            // SAFETY: AVX2 is enabled.
            unsafe { even = _mm256_or_si256(even, _mm256_xor_si256(load(rest, 32 * i), *p)) };
        }
    }
    // A last part vector: the data's last 32 bytes (overlapping the vector before them),
    // against the stream from their phase on: `stream[at..]` before the boundary, else the
    // block's at `(at - lead) % 224`, which is `rest.len() - 32` (the rest starts a block), or
    // `rest.len() + 192` for a rest under 32 bytes after a whole block; `want + 32` is at most
    // 31 + 223 + 32 = 286.
    if rest.len() % 32 != 0 {
        let at = data.len() - 32;
        let want = if at < lead {
            at
        } else if rest.len() >= 32 {
            lead + rest.len() - 32
        } else {
            lead + rest.len() + REGISTER_BLOCK - 32
        };
        // SAFETY: AVX2 is enabled.
        unsafe {
            odd = _mm256_or_si256(odd, _mm256_xor_si256(load(data, at), load(stream, want)));
        }
    }
    // SAFETY: AVX2 is enabled.
    let equal = unsafe {
        let all = _mm256_or_si256(even, odd);
        _mm256_testz_si256(all, all) == 1
    };
    u64::from(!equal)
}

/// Which flow of `stream`'s run (its seed and number of flows) a connection carries, from the
/// first 8 bytes it received (stream offsets 0..8): the flow `j` whose word 0 (its key,
/// little-endian) they are. `None` for a single-flow run, fewer than 8 bytes, or bytes that
/// are no flow's word 0. The keys of one seed's flows differ, and random bytes match one with
/// probability about `flows` in 2⁶⁴.
pub fn identify_flow(stream: KeyedFlow, first: &[u8]) -> Option<u32> {
    let word = u64::from_le_bytes(first.get(..8)?.try_into().ok()?);
    if stream.flows < 2 {
        return None;
    }
    (0..stream.flows).find(|&j| flow_key(stream.seed, j).key == word)
}

/// Which test stream a sender writes and a receiver checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSpec {
    /// `-v N`: the periodic pattern of period `N` bytes (2..=256), the same on every flow.
    Periodic(u32),
    /// `--seed SEED`: the keyed stream of one flow of `SEED` ([`KeyedFlow`]).
    Keyed(KeyedFlow),
    /// The kernel's `iou-zcrx` selftest stream: `'a' + i % 26` at stream offset `i`
    /// (`b"abc…z"` repeated, period [`ALPHABET_PERIOD`]).
    Alphabet,
}

/// Period (bytes) of [`StreamSpec::Alphabet`].
pub const ALPHABET_PERIOD: usize = 26;

impl StreamSpec {
    /// `--seed seed` of a single-flow run: flow 0 of 1.
    pub const fn keyed(seed: u64) -> StreamSpec {
        StreamSpec::Keyed(KeyedFlow::single(seed))
    }

    /// The stream of flow `flow` of `flows` (0-based) in a run of this stream: the keyed
    /// stream of that flow ([`KeyedFlow::new`]); `-v N` and the alphabet are the same on every
    /// flow, so a receiver of one of those cannot see another flow's bytes.
    ///
    /// # Errors
    /// [`Error::Usage`] for a keyed stream unless `flow < flows <= MAX_FLOWS` (the other
    /// streams have no flow number to check: the `iou-zcrx` personality's client runs up to
    /// 256 connections of the alphabet).
    pub fn for_flow(self, flow: u32, flows: u32) -> Result<StreamSpec> {
        Ok(match self {
            StreamSpec::Keyed(s) => {
                let k = KeyedFlow::check(flow, flows)?;
                StreamSpec::Keyed(KeyedFlow {
                    seed: s.seed,
                    flow: k.0,
                    flows: k.1,
                })
            }
            other => other,
        })
    }
}

impl std::fmt::Display for StreamSpec {
    /// `period 7`, `seed 42` (a single flow), `seed 42 flow 1 of 4`: how messages and
    /// summaries name the stream.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamSpec::Periodic(p) => write!(f, "period {p}"),
            StreamSpec::Keyed(k) => write!(f, "{k}"),
            StreamSpec::Alphabet => f.write_str("alphabet a..z"),
        }
    }
}

/// The keyed stream of flow `flow` of a run of `flows` flows with `--seed seed`: a sender
/// sends the stream of [`KeyedFlow::key`]; a receiver checks it and, when a piece is not its
/// own stream's, tries the keys of the other `flows - 1` flows of the seed to name the flow
/// its bytes belong to. A single-flow run is flow 0 of 1 ([`KeyedFlow::single`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedFlow {
    seed: u64,
    flow: u32,
    flows: u32,
}

impl KeyedFlow {
    /// Flow 0 of 1 of `seed`.
    pub const fn single(seed: u64) -> KeyedFlow {
        KeyedFlow {
            seed,
            flow: 0,
            flows: 1,
        }
    }

    /// Flow `flow` (0-based) of `flows` of `seed`.
    ///
    /// # Errors
    /// [`Error::Usage`] unless `flow < flows <= MAX_FLOWS`.
    pub fn new(seed: u64, flow: u32, flows: u32) -> Result<KeyedFlow> {
        let (flow, flows) = KeyedFlow::check(flow, flows)?;
        Ok(KeyedFlow { seed, flow, flows })
    }

    fn check(flow: u32, flows: u32) -> Result<(u32, u32)> {
        if flow >= flows || flows > MAX_FLOWS {
            return Err(Error::Usage(format!(
                "flow {flow} of {flows}: flows are numbered from 0, at most {MAX_FLOWS}"
            )));
        }
        Ok((flow, flows))
    }

    /// The `--seed` value.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// This flow's index, from 0.
    pub fn flow(&self) -> u32 {
        self.flow
    }

    /// How many flows the run has (the keys a diagnosis tries).
    pub fn flows(&self) -> u32 {
        self.flows
    }

    /// This flow's key and step ([`flow_key`]).
    pub fn key(&self) -> FlowKey {
        flow_key(self.seed, self.flow)
    }
}

impl std::fmt::Display for KeyedFlow {
    /// `seed 42` for a single flow, `seed 42 flow 1 of 4` otherwise.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {}", self.seed)?;
        if self.flows > 1 {
            write!(f, " flow {} of {}", self.flow, self.flows)?;
        }
        Ok(())
    }
}

/// A test stream ready to fill and compare: the periodic pattern with its precomputed window,
/// or the keyed stream.
#[derive(Debug, Clone)]
pub struct Pattern {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Periodic {
        /// [`StreamSpec::Periodic`] or [`StreamSpec::Alphabet`].
        spec: StreamSpec,
        period: usize,
        /// Bytes compared (and filled) per window comparison: [`COMPARE_CHUNK`], a multiple of
        /// [`VECTOR_ALIGN`], so that every comparison of aligned data starts aligned.
        chunk: usize,
        /// `chunk + period · spread` bytes of the pattern starting at stream offset 0: a
        /// comparison at phase `r` may start at any `r + period·u` for `u < spread`, which
        /// puts it at the data's alignment ([`Pattern::window_start`]). Shared by the
        /// pattern's clones (a clone copies no window).
        window: std::sync::Arc<[u8]>,
        /// `VECTOR_ALIGN / gcd(period, VECTOR_ALIGN)`: the window starts a phase has, one
        /// period apart, are that many alignments apart (mod [`VECTOR_ALIGN`]).
        spread: usize,
        /// `gcd(period, VECTOR_ALIGN)`.
        gcd: usize,
        /// The inverse of `period / gcd` modulo `spread`.
        inverse: usize,
        /// `⌈2^64 / period⌉`, for [`phase_of`] (a multiply, not a division, per piece).
        reciprocal: u64,
        /// The period divides [`REGISTER_BLOCK`], so pieces are compared against the stream
        /// in registers ([`Pattern::matches_224`]); asked once, not per piece.
        in_registers: bool,
    },
    Keyed {
        stream: KeyedFlow,
        /// `stream.key()`.
        key: FlowKey,
    },
}

impl Pattern {
    /// The periodic pattern with period `period` bytes.
    ///
    /// # Errors
    /// [`Error::Usage`] unless `period` is in [`MIN_PERIOD`]..=[`MAX_PERIOD`] (names `-v`).
    pub fn new(period: u32) -> Result<Pattern> {
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(Error::Usage(format!(
                "-v: validation period {period} out of range {MIN_PERIOD}..={MAX_PERIOD} bytes"
            )));
        }
        let p = period as usize;
        Ok(Pattern::periodic(StreamSpec::Periodic(period), p, |r| {
            byte_for_phase(r, p)
        }))
    }

    /// The `iou-zcrx` stream ([`StreamSpec::Alphabet`]).
    pub fn alphabet() -> Pattern {
        // r < 26, so b'a' + r stays in b'a'..=b'z'.
        Pattern::periodic(StreamSpec::Alphabet, ALPHABET_PERIOD, |r| b'a' + r as u8)
    }

    /// A periodic stream of `period` bytes whose byte at phase `r` is `byte(r)`, with its
    /// comparison window.
    fn periodic(spec: StreamSpec, period: usize, byte: impl Fn(usize) -> u8) -> Pattern {
        let chunk = COMPARE_CHUNK;
        let mut gcd = VECTOR_ALIGN;
        let mut b = period;
        while b != 0 {
            (gcd, b) = (b, gcd % b);
        }
        let spread = VECTOR_ALIGN / gcd;
        // `period / gcd` is odd or `spread` is 1, so it has an inverse mod `spread` (a power
        // of two): found by trying, at most 64 candidates, once per pattern.
        let n = period / gcd;
        let inverse = (0..spread)
            .find(|u| n * u % spread == 1 % spread)
            .unwrap_or(0);
        let one: Vec<u8> = (0..period).map(&byte).collect();
        let window: std::sync::Arc<[u8]> = one
            .iter()
            .copied()
            .cycle()
            .take(chunk + period * spread)
            .collect();
        Pattern {
            kind: Kind::Periodic {
                spec,
                period,
                chunk,
                window,
                spread,
                gcd,
                inverse,
                reciprocal: u64::MAX / period as u64 + 1,
                in_registers: REGISTER_BLOCK % period == 0,
            },
        }
    }

    /// The keyed stream of a single-flow run of `seed` (any 64-bit value): flow 0 of 1.
    pub fn keyed(seed: u64) -> Pattern {
        Pattern::keyed_flow(KeyedFlow::single(seed))
    }

    /// The keyed stream of one flow.
    pub fn keyed_flow(stream: KeyedFlow) -> Pattern {
        Pattern {
            kind: Kind::Keyed {
                stream,
                key: stream.key(),
            },
        }
    }

    /// The stream `spec` names.
    ///
    /// # Errors
    /// As [`Pattern::new`] for a period out of range.
    pub fn from_spec(spec: StreamSpec) -> Result<Pattern> {
        match spec {
            StreamSpec::Periodic(p) => Pattern::new(p),
            StreamSpec::Keyed(k) => Ok(Pattern::keyed_flow(k)),
            StreamSpec::Alphabet => Ok(Pattern::alphabet()),
        }
    }

    /// Which stream this is.
    pub fn spec(&self) -> StreamSpec {
        match &self.kind {
            Kind::Periodic { spec, .. } => *spec,
            Kind::Keyed { stream, .. } => StreamSpec::Keyed(*stream),
        }
    }

    /// The expected byte at stream offset `offset` (bytes from the start of the connection).
    pub fn expected(&self, offset: u64) -> u8 {
        match &self.kind {
            Kind::Periodic {
                period,
                window,
                reciprocal,
                ..
            } => window[phase_of(offset, *period, *reciprocal)],
            Kind::Keyed { key, .. } => key.word(offset / 8).to_le_bytes()[(offset % 8) as usize],
        }
    }

    /// Fills `buf` with the stream bytes of offsets `offset..offset + buf.len()`. Used by the
    /// senders to build what they send.
    pub fn fill(&self, buf: &mut [u8], offset: u64) {
        match &self.kind {
            Kind::Periodic {
                period,
                window,
                chunk,
                reciprocal,
                ..
            } => {
                let mut base = offset;
                for part in buf.chunks_mut(*chunk) {
                    let phase = phase_of(base, *period, *reciprocal);
                    part.copy_from_slice(&window[phase..phase + part.len()]);
                    base += part.len() as u64;
                }
            }
            Kind::Keyed { key, .. } => {
                let key = *key;
                let head = head_len(offset, buf.len());
                let (first, rest) = buf.split_at_mut(head);
                if head > 0 {
                    let at = (offset % 8) as usize;
                    first.copy_from_slice(&key.word(offset / 8).to_le_bytes()[at..at + head]);
                }
                let k = (offset + head as u64) / 8;
                let whole = rest.len() / 8 * 8;
                let (words, tail) = rest.split_at_mut(whole);
                keyed_fill(key.word(k), key.step, words);
                let n = tail.len();
                let last = key.word(k + whole as u64 / 8);
                tail.copy_from_slice(&last.to_le_bytes()[..n]);
            }
        }
    }

    /// Whether [`Pattern::crc32`] costs nothing per byte: true for the periodic stream
    /// (O(log len)); false for the keyed stream, whose CRC costs hashing every byte (so a
    /// checked keyed stream is not hashed: [`StreamCrc32`]).
    pub(crate) fn crc_without_data(&self) -> bool {
        matches!(self.kind, Kind::Periodic { .. })
    }

    /// CRC-32 (as zlib's `crc32`) of the first `len` stream bytes, computed without reading
    /// any received byte: for the periodic stream from one period and `crc32fast`'s combine
    /// (O(log len)), for the keyed stream by generating it in 64 KiB blocks (about as fast as
    /// hashing it).
    pub fn crc32(&self, len: u64) -> u32 {
        let mut h = crc32fast::Hasher::new();
        match &self.kind {
            Kind::Periodic { period, window, .. } => {
                let block = &window[..*period];
                let mut n = len / *period as u64;
                // `pow` hashes 2^i periods; every period is the same bytes, so the order in
                // which the powers are combined does not matter.
                let mut pow = crc32fast::Hasher::new();
                pow.update(block);
                while n > 0 {
                    if n & 1 == 1 {
                        h.combine(&pow);
                    }
                    n >>= 1;
                    if n > 0 {
                        let twice = pow.clone();
                        pow.combine(&twice);
                    }
                }
                h.update(&block[..(len % *period as u64) as usize]);
            }
            Kind::Keyed { .. } => {
                let mut buf = vec![0u8; 64 << 10];
                let mut at = 0u64;
                while at < len {
                    let n = (len - at).min(buf.len() as u64) as usize;
                    self.fill(&mut buf[..n], at);
                    h.update(&buf[..n]);
                    at += n as u64;
                }
            }
        }
        h.finalize()
    }

    /// Compares `data` against the stream at `offset`; calls `on_mismatch` for every
    /// differing byte in stream order and returns how many there were. The bad-piece path:
    /// [`Pattern::matches`] already found a difference, so no fast whole-piece check here.
    fn compare(&self, offset: u64, data: &[u8], mut on_mismatch: impl FnMut(Mismatch)) -> u64 {
        match &self.kind {
            Kind::Periodic {
                period,
                window,
                chunk,
                reciprocal,
                ..
            } => {
                let mut count = 0;
                let mut base = offset;
                for part in data.chunks(*chunk) {
                    let phase = phase_of(base, *period, *reciprocal);
                    let start = self.window_start(phase, part.as_ptr());
                    let expected = &window[start..start + part.len()];
                    if window_diff(expected, part) != 0 {
                        count += scan(base, part, expected.iter().copied(), &mut on_mismatch);
                    }
                    base += part.len() as u64;
                }
                count
            }
            Kind::Keyed { key, .. } => compare_keyed(*key, offset, data, &mut on_mismatch),
        }
    }

    /// Whether `data` equals the stream at `offset`, compared word by word without looking
    /// for the differing bytes ([`Pattern::compare`] finds them). The register block
    /// ([`Pattern::matches_224`]) is not tried here: [`Validator::check`] tries it before a
    /// piece gets here, and the other ways here carry only the keyed stream.
    #[inline]
    fn matches(&self, offset: u64, data: &[u8]) -> bool {
        match &self.kind {
            Kind::Keyed { key, .. } => match keyed_common(*key, offset, data) {
                Some(equal) => equal,
                None => compare_keyed(*key, offset, data, &mut |_| {}) == 0,
            },
            Kind::Periodic {
                period,
                window,
                chunk,
                reciprocal,
                ..
            } => {
                let mut base = offset;
                for part in data.chunks(*chunk) {
                    let phase = phase_of(base, *period, *reciprocal);
                    let start = self.window_start(phase, part.as_ptr());
                    if window_diff(&window[start..start + part.len()], part) != 0 {
                        return false;
                    }
                    base += part.len() as u64;
                }
                true
            }
        }
    }

    /// Periodic stream whose period divides 224 (`-v 7`): whether `data` equals the stream at
    /// `offset`, the whole piece compared against one 224-byte block held in registers
    /// ([`window_diff_224`]). `None` for another stream, a piece under 32 bytes or a CPU
    /// without AVX2 (the window comparison then decides).
    #[inline]
    fn matches_224(&self, offset: u64, data: &[u8]) -> Option<bool> {
        let Kind::Periodic {
            period,
            window,
            reciprocal,
            in_registers: true,
            ..
        } = &self.kind
        else {
            return None;
        };
        let phase = phase_of(offset, *period, *reciprocal);
        let stream: &[u8; REGISTER_SPAN] =
            window.get(phase..phase + REGISTER_SPAN)?.try_into().ok()?;
        window_diff_224(stream, data).map(|d| d == 0)
    }

    /// Periodic stream: where in the window a comparison of data at `data` whose first byte
    /// has phase `phase` starts: at a position of that phase whose address has the data's
    /// alignment modulo [`VECTOR_ALIGN`] when there is one (always for an odd period), so that
    /// aligned data meets an aligned window; else at `phase`.
    fn window_start(&self, phase: usize, data: *const u8) -> usize {
        let Kind::Periodic {
            period,
            window,
            spread,
            gcd,
            inverse,
            ..
        } = &self.kind
        else {
            return 0;
        };
        // Solve period·u ≡ t (mod VECTOR_ALIGN), t = (data - window - phase) mod VECTOR_ALIGN;
        // `gcd` and `spread` are powers of two, so no division here (this runs per piece).
        let t = (data as usize)
            .wrapping_sub(window.as_ptr() as usize)
            .wrapping_sub(phase)
            & (VECTOR_ALIGN - 1);
        if t & (gcd - 1) != 0 {
            return phase;
        }
        phase + period * (((t >> gcd.trailing_zeros()) * inverse) & (spread - 1))
    }
}

/// `offset % period` for a period of at least 2, from `reciprocal = ⌈2^64 / period⌉`: the
/// quotient from a multiply is exact or one too large, which the sign of the remainder says
/// (this runs for every piece; a 64-bit division costs 10–40 cycles).
#[inline(always)]
fn phase_of(offset: u64, period: usize, reciprocal: u64) -> usize {
    let d = period as u64;
    let q = ((u128::from(offset) * u128::from(reciprocal)) >> 64) as u64;
    let r = offset.wrapping_sub(q.wrapping_mul(d));
    (if (r as i64) < 0 { r.wrapping_add(d) } else { r }) as usize
}

/// Bytes before the first 8-byte word boundary of the stream at `offset`, at most `len`.
fn head_len(offset: u64, len: usize) -> usize {
    (((8 - offset % 8) % 8) as usize).min(len)
}

/// Byte-by-byte comparison of `part` (at stream offset `base`) with `expected`.
fn scan(
    base: u64,
    part: &[u8],
    expected: impl Iterator<Item = u8>,
    on_mismatch: &mut impl FnMut(Mismatch),
) -> u64 {
    let mut count = 0;
    for (i, (&actual, expected)) in part.iter().zip(expected).enumerate() {
        if actual != expected {
            count += 1;
            on_mismatch(Mismatch {
                offset: base + i as u64,
                expected,
                actual,
            });
        }
    }
    count
}

/// The expected keyed bytes of `len` stream bytes from `offset`, one at a time.
fn keyed_bytes(key: FlowKey, offset: u64, len: usize) -> impl Iterator<Item = u8> {
    (offset..offset + len as u64).map(move |o| key.word(o / 8).to_le_bytes()[(o % 8) as usize])
}

fn compare_keyed(
    key: FlowKey,
    offset: u64,
    data: &[u8],
    on_mismatch: &mut impl FnMut(Mismatch),
) -> u64 {
    let head = head_len(offset, data.len());
    let (first, rest) = data.split_at(head);
    let mut count = 0;
    if head > 0 {
        count += scan(offset, first, keyed_bytes(key, offset, head), on_mismatch);
    }
    let mut base = offset + head as u64;
    for block in rest.chunks(KEYED_BLOCK) {
        let k = base / 8;
        let mut diff = keyed_diff(key.word(k), key.step, block);
        let tail = &block[block.len() / 8 * 8..];
        if !tail.is_empty() {
            let want = key.word(k + block.len() as u64 / 8).to_le_bytes();
            for (a, e) in tail.iter().zip(want) {
                diff |= u64::from(a ^ e);
            }
        }
        if diff != 0 {
            count += scan(
                base,
                block,
                keyed_bytes(key, base, block.len()),
                on_mismatch,
            );
        }
        base += block.len() as u64;
    }
    count
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

/// One byte that differed from the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Stream offset of the byte, in bytes from the start of the connection.
    pub offset: u64,
    /// The stream byte expected there.
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

/// What happened to a piece with mismatches, as far as the keyed stream tells (the periodic
/// pattern cannot tell where bytes came from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The bytes belong earlier in the stream and were delivered correctly before, longer ago
    /// than the last [`DUPLICATE_WINDOW`] pieces (or not from a piece's start): a buffer's
    /// stale contents (the payload was never written).
    Stale,
    /// The bytes are those of one of the last [`DUPLICATE_WINDOW`] pieces, again from its
    /// start: a frag or frame delivered twice.
    Duplicate,
    /// The bytes belong to another place of the stream that was not delivered there (correctly)
    /// yet: later bytes (a frag dropped, or frags reordered), or those of a piece that itself
    /// came out of place (two frags swapped).
    Reordered,
    /// The bytes are this piece's own stream, shifted by less than the piece's length (a frag
    /// offset or size off by that much).
    Shifted,
    /// The bytes are those of another flow of the same seed (flow `flow`, 0-based, at
    /// [`Diagnosis::source`] of its stream): a frag delivered to the wrong socket, or a
    /// buffer that still held that flow's bytes.
    Misdelivered {
        /// The flow the bytes belong to.
        flow: u32,
    },
    /// The bytes decode under no flow's key of this seed: a wrong `--seed`, or memory that
    /// never held one of these streams.
    Foreign,
    /// A short run of differing bytes with the stream in place around it, or too few bytes to
    /// tell whose they are.
    Corrupt,
}

/// The diagnosis of one piece (a dmabuf or linear frag, or a plain `recvmsg` chunk) with
/// mismatches, keyed stream only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diagnosis {
    /// Stream offset of the piece (bytes).
    pub piece_offset: u64,
    /// The piece's length (bytes).
    pub piece_len: u64,
    /// What the piece is, in messages: `frag` (devmem), `chunk` (a plain `recvmsg` or a zcrx
    /// completion).
    pub piece: &'static str,
    /// Stream offset of the first byte that differs.
    pub first: u64,
    /// Stream offset of the last byte that differs.
    pub last: u64,
    /// Bytes of the piece that differ.
    pub differing: u64,
    /// With a [`Diagnosis::source`]: the stream offset from which the piece holds the
    /// source's bytes: `first`, or the start of `first`'s 8-byte word or of the piece,
    /// whichever is later, when the bytes from there to `first` are the source's as well as
    /// this place's (the keyed stream's words 2 KiB·n apart have the same lowest byte, so a
    /// frag moved by 4 KiB agrees with its place in one byte of eight, the first among them;
    /// and a piece's first bytes may agree by chance). `first` otherwise.
    pub from: u64,
    /// Where the bytes at `from` belong: a stream offset of this flow's stream, or of the
    /// stream of the flow [`Fault::Misdelivered`] names.
    pub source: Option<u64>,
    /// What that means.
    pub fault: Fault,
    /// [`Fault::Corrupt`]: the bytes around the differing ones are in place (a local
    /// corruption), rather than too few to tell whose they are.
    pub in_place_around: bool,
}

impl std::fmt::Display for Diagnosis {
    /// E.g. `frag at stream offset 8192 (4096 bytes) holds the bytes of stream offset 4096
    /// (-4096: duplicate of an earlier frag); 4090 byte(s) differ`, `frag at stream offset
    /// 8192 (4096 bytes) holds bytes of flow 1 at stream offset 12288 (misdelivered: …); 4080
    /// byte(s) differ`, or `frag at stream offset 0 (4096 bytes): 1 byte(s) differ in stream
    /// offsets 100..=100 (corrupt: the bytes around them are in place)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = format!(
            "{} at stream offset {} ({} bytes)",
            self.piece, self.piece_offset, self.piece_len
        );
        match self.source {
            Some(src) => {
                let from = if self.from == self.piece_offset {
                    what
                } else {
                    format!("{what}, from stream offset {},", self.from)
                };
                if let Fault::Misdelivered { flow } = self.fault {
                    return write!(
                        f,
                        "{from} holds bytes of flow {flow} at stream offset {src} (misdelivered: \
                         another flow's bytes, or a buffer that still held them); {} byte(s) \
                         differ",
                        self.differing
                    );
                }
                let d = i128::from(src) - i128::from(self.from);
                let why = match self.fault {
                    Fault::Stale => "stale: bytes delivered earlier, a buffer's old contents",
                    Fault::Duplicate => "duplicate: the bytes of a recent piece again",
                    Fault::Reordered => {
                        "reordered: bytes of another place that were not delivered there (a \
                         frag dropped, reordered or swapped)"
                    }
                    Fault::Shifted => "shifted: its own bytes at the wrong offset",
                    Fault::Misdelivered { .. } | Fault::Foreign | Fault::Corrupt => "corrupt",
                };
                write!(
                    f,
                    "{from} holds the bytes of stream offset {src} ({d:+}: {why}); {} byte(s) differ",
                    self.differing
                )
            }
            None => {
                let why = match (self.fault, self.in_place_around) {
                    (Fault::Foreign, _) => {
                        "bytes of no stream with this seed (wrong --seed?), or memory that never \
                         held one"
                    }
                    (_, true) => "corrupt: the bytes around them are in place",
                    (_, false) => "corrupt: too few bytes to tell whose they are",
                };
                write!(
                    f,
                    "{what}: {} byte(s) differ in stream offsets {}..={} ({why})",
                    self.differing, self.first, self.last
                )
            }
        }
    }
}

/// One piece the validator saw, for [`Diagnosis`].
#[derive(Debug, Clone, Copy)]
struct SeenPiece {
    offset: u64,
    len: u64,
    ok: bool,
}

/// In [`Validator`]'s ring of recent pieces: the piece had mismatches (stream offsets stay
/// below 2^63).
const BAD_PIECE: u64 = 1 << 63;

/// The CRC-32 a receiver or sender reports, and which bytes of the stream it covers.
///
/// A keyed stream's bytes are not hashed where every byte was checked (or, by its sender, made)
/// against the stream: the check already tells more than a CRC would, and hashing them costs
/// twice what checking them does (`crc32fast` runs at half a plain read's speed; end to end
/// against iperf3 the two CRCs of a `--seed` run were 7 % of the CPU per GiB,
/// docs/benchmarks.md). The periodic stream's CRC costs nothing per byte (it is computed from
/// one period), and every other stream is hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamCrc32 {
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the stream's bytes from stream offset
    /// [`StreamCrc32::from`] to the end; `None` when no byte was hashed (every byte was the
    /// keyed stream's).
    pub value: Option<u32>,
    /// The first stream offset the CRC covers: 0 (every byte) unless the stream is keyed and
    /// its first `from` bytes matched it (then they were not hashed; with no byte hashed,
    /// every byte, so `from` is the byte count).
    pub from: u64,
}

impl StreamCrc32 {
    /// The CRC-32 of every byte (`from` 0).
    pub fn of_all(value: u32) -> StreamCrc32 {
        StreamCrc32 {
            value: Some(value),
            from: 0,
        }
    }

    /// How summaries say it: `crc32 0x…` (every byte), `crc32 0x… of stream offsets X.. (the
    /// first X bytes were the keyed stream's, not hashed)`, or `crc32 none (every byte was the
    /// keyed stream's, none hashed)`.
    pub fn describe(&self) -> String {
        match (self.value, self.from) {
            (Some(v), 0) => format!("crc32 0x{v:08x}"),
            (Some(v), x) => format!(
                "crc32 0x{v:08x} of stream offsets {x}.. (the first {x} bytes were the keyed \
                 stream's, not hashed)"
            ),
            (None, _) => "crc32 none (every byte was the keyed stream's, none hashed)".into(),
        }
    }
}

/// CRC-32 of what a receiver got, hashing received bytes only where it must: the pieces
/// before the first one given with `matched` false are the stream's own bytes; from there on
/// every byte is hashed. For the periodic stream the CRC of those first bytes is
/// [`Pattern::crc32`] of their length, computed at the end, so the value is
/// `crc32(all received bytes)` (zlib); for the keyed stream they are left out
/// ([`StreamCrc32`]). Receivers pass `matched` true for a piece the validator found clean and
/// false otherwise (and for every piece without validation).
#[derive(Debug, Clone, Default)]
pub struct StreamCrc {
    /// Bytes at the start known to equal the stream.
    clean: u64,
    /// The hash of everything after them (`None` while every piece matched).
    rest: Option<crc32fast::Hasher>,
}

impl StreamCrc {
    /// Adds the next piece of the received stream; `matched`: the validator found every byte
    /// of it equal to the stream.
    pub fn piece(&mut self, bytes: &[u8], matched: bool) {
        match &mut self.rest {
            None if matched => self.clean += bytes.len() as u64,
            None => {
                let mut h = crc32fast::Hasher::new();
                h.update(bytes);
                self.rest = Some(h);
            }
            Some(h) => h.update(bytes),
        }
    }

    /// The CRC-32 of the bytes given so far: of every byte unless `pattern` (the stream the
    /// `matched` pieces were checked against) is keyed, then of the bytes from the first
    /// piece that did not match on.
    pub fn value(&self, pattern: Option<&Pattern>) -> StreamCrc32 {
        let head = match (self.clean, pattern) {
            (0, _) => 0,
            (n, Some(p)) if p.crc_without_data() => p.crc32(n),
            // A keyed stream's checked bytes are not hashed.
            (n, _) => {
                return StreamCrc32 {
                    value: self.rest.as_ref().map(|h| h.clone().finalize()),
                    from: n,
                }
            }
        };
        let mut h = crc32fast::Hasher::new_with_initial_len(head, self.clean);
        if let Some(rest) = &self.rest {
            h.combine(rest);
        }
        StreamCrc32::of_all(h.finalize())
    }
}

/// Validation state of one connection: the next stream offset, the mismatch count, the first
/// [`MAX_REPORTED_MISMATCHES`] mismatches and (keyed stream) the first [`MAX_DIAGNOSES`]
/// diagnoses.
#[derive(Debug, Clone)]
pub struct Validator {
    pattern: Pattern,
    offset: u64,
    mismatches: u64,
    reported: Vec<Mismatch>,
    diagnoses: Vec<Diagnosis>,
    /// The start offsets of the latest [`RECENT_PIECES`] pieces (keyed stream only), with
    /// [`BAD_PIECE`] set for a piece that had mismatches; a ring once full, its oldest at
    /// `recent_head`. Pieces follow each other without gaps, so each ends where the next
    /// starts and the latest at `offset` ([`Validator::recent_piece`]).
    recent: Vec<u64>,
    recent_head: usize,
    /// What a piece is called in diagnoses.
    piece: &'static str,
    /// The first bytes (fewer than 8) of a keyed stream of several flows, held unchecked
    /// until the 8th names the connection's flow ([`identify_flow`]).
    held: Vec<u8>,
    /// The first 8 bytes named the connection's flow ([`Validator::identified`]).
    identified: bool,
    /// Every diagnosed piece's fault, counted ([`Validator::causes`]).
    causes: Vec<(Fault, u64)>,
}

impl Validator {
    /// A validator at stream offset 0 for the periodic pattern of `period` bytes.
    ///
    /// # Errors
    /// [`Error::Usage`] for a period outside 2..=256 (see [`Pattern::new`]).
    pub fn new(period: u32) -> Result<Validator> {
        Ok(Validator::with_pattern(Pattern::new(period)?))
    }

    /// A validator at stream offset 0 for `pattern`.
    pub fn with_pattern(pattern: Pattern) -> Validator {
        Validator {
            pattern,
            offset: 0,
            mismatches: 0,
            reported: Vec::new(),
            diagnoses: Vec::new(),
            recent: Vec::new(),
            recent_head: 0,
            piece: "frag",
            held: Vec::new(),
            identified: false,
            causes: Vec::new(),
        }
    }

    /// Names the pieces passed to [`Validator::check`] in diagnoses: `frag` (the default,
    /// devmem) or `chunk` (plain `recvmsg` returns, zcrx completions).
    pub fn with_piece_name(mut self, piece: &'static str) -> Validator {
        self.piece = piece;
        self
    }

    /// A validator at stream offset 0 for the stream `spec` names.
    ///
    /// # Errors
    /// As [`Pattern::from_spec`].
    pub(crate) fn for_spec(spec: StreamSpec) -> Result<Validator> {
        Ok(Validator::with_pattern(Pattern::from_spec(spec)?))
    }

    /// Back to stream offset 0 with nothing counted, reported or held, keeping the memory of
    /// the ring of recent pieces. For benchmarks: they check one buffer of the keyed stream
    /// (which never repeats) pass after pass, and a clone per pass, whose ring starts empty and
    /// grows, cost them several per cent of a 4 KiB piece's check that a receiver's validator,
    /// running on through its connection, does not pay.
    #[cfg(any(test, feature = "testing"))]
    pub fn rewind(&mut self) {
        self.offset = 0;
        self.mismatches = 0;
        self.reported.clear();
        self.diagnoses.clear();
        self.recent.clear();
        self.recent_head = 0;
        self.held.clear();
        self.identified = false;
        self.causes.clear();
    }

    /// The pattern being checked.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Stream offset (bytes) of the next byte to check = bytes checked so far (the first
    /// bytes of a keyed stream of several flows count once its first 8 bytes are in, or at
    /// [`Validator::end`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Checks the next `data.len()` bytes of the stream (one piece: a frag or a `recvmsg`
    /// chunk) and advances the offset. Returns how many of them mismatched. The first
    /// [`MAX_REPORTED_MISMATCHES`] mismatches of the connection are kept in
    /// [`Validator::reported`]; with the keyed stream a piece with mismatches is diagnosed
    /// ([`Validator::diagnoses`]).
    ///
    /// With the keyed stream of several flows the first 8 bytes of the connection name its
    /// flow ([`identify_flow`]): pieces before the 8th byte are held (0 returned) and checked
    /// with the piece that completes them, as the flow they name.
    #[inline]
    pub fn check(&mut self, data: &[u8]) -> u64 {
        // A period that divides 224 (`-v 7`) first, with nothing else on its path: through
        // `check_piece` (a second call, whose frame serves the keyed stream's and the window's
        // paths) it cost a few per cent of a 1448-byte piece's comparison.
        if let Some(equal) = self.pattern.matches_224(self.offset, data) {
            if !equal {
                return self.check_bad_piece(data);
            }
            self.offset += data.len() as u64;
            return 0;
        }
        // The keyed stream's common piece past the connection's first bytes, likewise: through
        // `check_other` and `check_piece` (a call, and a frame for every stream's code) a 4 KiB
        // piece's check ran at 0.88x a plain read with AVX2, here 0.91-0.92x; with AVX-512
        // 0.95-0.99x and 1.00x (docs/benchmarks.md).
        if let Kind::Keyed { key, .. } = self.pattern.kind {
            if self.offset != 0 {
                match keyed_common(key, self.offset, data) {
                    Some(false) => return self.check_bad_piece(data),
                    Some(true) => {
                        self.note_piece(self.offset);
                        self.offset += data.len() as u64;
                        return 0;
                    }
                    None => {}
                }
            }
        }
        self.check_other(data)
    }

    /// [`Validator::check`] of every stream but a period that divides 224 (and of that one
    /// where the register block does not run): out of line, so that `check`'s own path stays
    /// short.
    #[inline(never)]
    fn check_other(&mut self, data: &[u8]) -> u64 {
        if self.offset == 0
            && matches!(self.pattern.kind, Kind::Keyed { stream, .. } if stream.flows > 1)
        {
            return self.check_first(data);
        }
        self.check_piece(data)
    }

    /// [`Validator::check`] at stream offset 0 of a keyed stream of several flows: hold the
    /// bytes until the 8th names the flow.
    #[cold]
    fn check_first(&mut self, data: &[u8]) -> u64 {
        if self.held.len() + data.len() < 8 {
            self.held.extend_from_slice(data);
            return 0;
        }
        let mut first = std::mem::take(&mut self.held);
        let held = first.len();
        first.extend_from_slice(&data[..8 - held]);
        self.identify_flow(&first);
        let n = if held > 0 {
            self.check_piece(&first[..held])
        } else {
            0
        };
        n + self.check_piece(data)
    }

    /// With the keyed stream of several flows: whether the connection's first 8 bytes were
    /// word 0 of one of the run's flows, which the validator then checks
    /// ([`identify_flow`]); `false` before the 8th byte, for bytes that are no flow's word 0,
    /// and for every other stream.
    pub fn identified(&self) -> bool {
        self.identified
    }

    /// The end of the connection: checks bytes still held by [`Validator::check`] (a stream
    /// of fewer than 8 bytes) as the flow the validator was made for; returns their
    /// mismatches.
    pub fn end(&mut self) -> u64 {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            0
        } else {
            self.check_piece(&held)
        }
    }

    /// Checks one piece: the whole-word comparison first, and only when it finds a difference
    /// the byte-by-byte scan that reports and diagnoses ([`Validator::check_bad_piece`]).
    #[inline]
    fn check_piece(&mut self, data: &[u8]) -> u64 {
        if !self.pattern.matches(self.offset, data) {
            return self.check_bad_piece(data);
        }
        if matches!(self.pattern.kind, Kind::Keyed { .. }) {
            self.note_piece(self.offset);
        }
        self.offset += data.len() as u64;
        0
    }

    /// Remembers a piece starting at stream offset `start` (with [`BAD_PIECE`] when it had
    /// mismatches) in the ring of recent pieces.
    #[inline]
    fn note_piece(&mut self, start: u64) {
        if self.recent.len() < RECENT_PIECES {
            self.recent.push(start);
        } else {
            self.recent[self.recent_head] = start;
            self.recent_head = (self.recent_head + 1) % RECENT_PIECES;
        }
    }

    /// Recent piece `i` (0: the oldest still remembered; there are `self.recent.len()`).
    fn recent_piece(&self, i: usize) -> SeenPiece {
        let n = self.recent.len();
        let at = |i: usize| self.recent[(self.recent_head + i) % n];
        let start = at(i);
        let end = if i + 1 < n {
            at(i + 1) & !BAD_PIECE
        } else {
            self.offset
        };
        let offset = start & !BAD_PIECE;
        SeenPiece {
            offset,
            len: end - offset,
            ok: start & BAD_PIECE == 0,
        }
    }

    /// A piece with mismatches: finds, counts, reports and diagnoses them.
    #[cold]
    #[inline(never)]
    fn check_bad_piece(&mut self, data: &[u8]) -> u64 {
        let reported = &mut self.reported;
        let mut first = None;
        let mut last = 0;
        let n = self.pattern.compare(self.offset, data, |m| {
            first.get_or_insert(m.offset);
            last = m.offset;
            if reported.len() < MAX_REPORTED_MISMATCHES {
                reported.push(m);
            }
        });
        if let Kind::Keyed { stream, key } = self.pattern.kind {
            if let Some(first) = first {
                let d = self.diagnose(stream, key, data, (first, last), n);
                match self.causes.iter_mut().find(|(f, _)| *f == d.fault) {
                    Some((_, count)) => *count += 1,
                    None => self.causes.push((d.fault, 1)),
                }
                if self.diagnoses.len() < MAX_DIAGNOSES {
                    self.diagnoses.push(d);
                }
            }
            self.note_piece(self.offset | if n > 0 { BAD_PIECE } else { 0 });
        }
        self.offset += data.len() as u64;
        self.mismatches += n;
        n
    }

    /// The keyed stream of a run of several flows: the connection's flow is the one whose
    /// word 0 its first 8 bytes are ([`identify_flow`]), so connections may be accepted in
    /// any order; bytes that are no flow's word 0 leave the flow the validator was made for.
    fn identify_flow(&mut self, first: &[u8]) {
        debug_assert_eq!(first.len(), 8);
        if let Kind::Keyed { stream, .. } = self.pattern.kind {
            let named = identify_flow(stream, first);
            self.identified = named.is_some();
            match named {
                Some(flow) if flow != stream.flow => {
                    self.pattern = Pattern::keyed_flow(KeyedFlow { flow, ..stream });
                }
                _ => {}
            }
        }
    }

    /// Where the bytes of `data` (at [`Self::offset`] of `stream`, whose key is `key`; the
    /// first and last differing bytes at stream offsets `span`, `differing` bytes differ) came
    /// from.
    fn diagnose(
        &self,
        stream: KeyedFlow,
        key: FlowKey,
        data: &[u8],
        span: (u64, u64),
        differing: u64,
    ) -> Diagnosis {
        let (first, last) = span;
        let at = self.offset;
        let len = data.len() as u64;
        let rel = (first - at) as usize;
        let mut d = Diagnosis {
            piece_offset: at,
            piece_len: len,
            piece: self.piece,
            first,
            last,
            differing,
            from: first,
            source: None,
            fault: Fault::Corrupt,
            in_place_around: false,
        };
        // Under the key and step of the stream they belong to, two consecutive words decode to
        // consecutive plausible indexes and name the place the bytes at `p` come from (random
        // bytes do that with probability 2^-83 per alignment and key; another flow's words,
        // whose step differs, never); try the 8 alignments from the first differing byte on.
        let source_under = |key: FlowKey| {
            let word = |p: usize| key.index_of(le_word(&data[p..]));
            (rel..rel + 8)
                .take_while(|&p| p + 16 <= data.len())
                .find_map(|p| {
                    let k = word(p);
                    let plausible = k < PLAUSIBLE_WORDS
                        && 8 * k + rel as u64 >= p as u64
                        && word(p + 8) == k + 1;
                    // Stream offset of the byte at `rel`: 8k is that of the byte at `p`, and
                    // `8k + rel >= p` (checked above) keeps this from going below 0, also when
                    // the bytes come from before `p`'s own position in the piece.
                    plausible.then(|| 8 * k + rel as u64 - p as u64)
                })
        };
        // When the bytes of the piece from the start of `first`'s word (or from the piece's
        // start, if later) up to `first` are the source's too (under `key`, whose stream has
        // them just before `src`), the misplaced bytes start there: how many bytes that is (0
        // when not, or when the source would start before the stream).
        let back = |key: FlowKey, src: u64| {
            let b = ((first % 8) as usize).min(rel);
            let theirs = |j: usize| {
                let o = src - j as u64;
                data[rel - j] == key.word(o / 8).to_le_bytes()[(o % 8) as usize]
            };
            if b <= rel && b as u64 <= src && (1..=b).all(theirs) {
                b as u64
            } else {
                0
            }
        };
        let Some(src) = source_under(key) else {
            // Not this flow's stream: another flow's?
            let other = (0..stream.flows())
                .filter(|&f| f != stream.flow())
                .find_map(|f| {
                    let k = flow_key(stream.seed(), f);
                    source_under(k).map(|src| (f, src, back(k, src)))
                });
            if let Some((flow, src, b)) = other {
                d.from = first - b;
                d.source = Some(src - b);
                d.fault = Fault::Misdelivered { flow };
            } else if last - first + 1 < 16 && len - differing >= 8 {
                // Too few differing bytes to identify, with in-place bytes around them (8 or
                // more, not a chance match of a few): a local corruption.
                d.in_place_around = true;
            } else if rel + 16 <= data.len() {
                // Words to decode, and no key of this seed decodes them.
                d.fault = Fault::Foreign;
            }
            return d;
        };
        if src == first {
            // The bytes around are in place: the differing ones are corrupt.
            d.in_place_around = true;
            return d;
        }
        let b = back(key, src);
        let (from, src) = (first - b, src - b);
        d.from = from;
        d.source = Some(src);
        let shift = src.abs_diff(from);
        // The recent piece the bytes came from, when they come from earlier in the stream, and
        // whether it is one of the last DUPLICATE_WINDOW pieces and the bytes start at its start.
        let n = self.recent.len();
        let earlier = (src < from)
            .then(|| {
                (0..n)
                    .rev()
                    .map(|i| (i, self.recent_piece(i)))
                    .find(|(_, p)| p.offset <= src && src < p.offset + p.len)
            })
            .flatten()
            .map(|(i, p)| (p.ok, p.offset == src && i + DUPLICATE_WINDOW >= n));
        d.fault = match earlier {
            // A whole recent piece again, from its start, is a duplicate even when that piece
            // was shorter than this one (the bytes then also look shifted by its length).
            Some((true, true)) => Fault::Duplicate,
            _ if shift < len => Fault::Shifted,
            _ if src > from => Fault::Reordered,
            Some((false, _)) => Fault::Reordered,
            _ => Fault::Stale,
        };
        d
    }

    /// Total mismatched bytes so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// The first (up to [`MAX_REPORTED_MISMATCHES`]) mismatches, in stream order.
    pub fn reported(&self) -> &[Mismatch] {
        &self.reported
    }

    /// The first (up to [`MAX_DIAGNOSES`]) diagnoses of pieces with mismatches, in stream
    /// order (keyed stream only; empty for `-v`).
    pub fn diagnoses(&self) -> &[Diagnosis] {
        &self.diagnoses
    }

    /// Every piece with mismatches (keyed stream), counted by what its diagnosis found, in
    /// the order the kinds first appeared: the flow's cause is read from all of them, not
    /// from its first piece alone.
    pub fn causes(&self) -> &[(Fault, u64)] {
        &self.causes
    }

    /// `Ok` if every byte so far matched.
    ///
    /// # Errors
    /// [`Error::Failure`] with [`Validator::failure_text`].
    pub fn finish(&self) -> Result<()> {
        match self.failure_text() {
            None => Ok(()),
            Some(text) => Err(Error::Failure(text)),
        }
    }

    /// What [`Validator::finish`] says of a stream with mismatches, naming the stream, the
    /// mismatch count, the bytes checked, the first mismatch and (keyed stream) the first
    /// diagnosis; `None` while every byte matched.
    pub fn failure_text(&self) -> Option<String> {
        let first = self.reported.first()?;
        let why = self
            .diagnoses
            .first()
            .map(|d| format!("; {d}"))
            .unwrap_or_default();
        Some(format!(
            "validation failed ({}): {} mismatched byte(s) in {} bytes; first at {first}{why}",
            self.pattern.spec(),
            self.mismatches,
            self.offset,
        ))
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
        assert_eq!(Pattern::new(2).unwrap().spec(), StreamSpec::Periodic(2));
        assert_eq!(Pattern::new(256).unwrap().spec(), StreamSpec::Periodic(256));
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
    fn alphabet_is_the_iou_zcrx_stream() {
        let p = Pattern::alphabet();
        assert_eq!(p.spec(), StreamSpec::Alphabet);
        assert_eq!(
            Pattern::from_spec(StreamSpec::Alphabet).unwrap().spec(),
            p.spec()
        );
        assert_eq!(StreamSpec::Alphabet.to_string(), "alphabet a..z");
        let mut buf = [0u8; 30];
        p.fill(&mut buf, 0);
        assert_eq!(&buf, b"abcdefghijklmnopqrstuvwxyzabcd");
        p.fill(&mut buf[..5], 24);
        assert_eq!(&buf[..5], b"yzabc");
        assert_eq!(p.expected(26 * 1000 + 25), b'z');
        // Validation by stream offset, as the receiver does it: a good stream in odd pieces
        // passes, a changed byte is reported at its offset.
        let mut v = Validator::for_spec(StreamSpec::Alphabet).unwrap();
        let mut data = vec![0u8; 100_000];
        p.fill(&mut data, 0);
        for piece in data.chunks(12_840) {
            assert_eq!(v.check(piece), 0);
        }
        data[5] = b'!';
        let mut v = Validator::for_spec(StreamSpec::Alphabet).unwrap();
        assert_eq!(v.check(&data), 1);
        assert_eq!(v.reported()[0].offset, 5);
        assert_eq!(p.crc32(data.len() as u64), {
            p.fill(&mut data, 0);
            crc32fast::hash(&data)
        });
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

    /// SplitMix64's output function, written out again from the definition.
    fn naive_mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The keyed stream of flow `flow` of `seed` written out from the definition, one byte at
    /// a time.
    fn naive_keyed(seed: u64, flow: u32, offset: u64) -> u8 {
        const G: u64 = 0x9E37_79B9_7F4A_7C15;
        let h = naive_mix(seed.wrapping_add(G));
        let f = u64::from(flow);
        let key = naive_mix(h.wrapping_add((2 * f + 1).wrapping_mul(G)));
        let step = naive_mix(h.wrapping_add((2 * f + 2).wrapping_mul(G))) | 1;
        let word = key.wrapping_add((offset / 8).wrapping_mul(step));
        word.to_le_bytes()[(offset % 8) as usize]
    }

    #[test]
    fn keyed_stream_is_a_key_plus_the_word_index_times_an_odd_step() {
        // Keys and steps: SplitMix64's outputs 2f and 2f+1 from the state its first output
        // from the seed gives (values from an independent Python implementation of the
        // definition).
        let fk = |key, step| FlowKey { key, step };
        assert_eq!(
            flow_key(0, 0),
            fk(0xA706_DD2F_4D19_7E6F, 0xB382_A305_F441_4F5F)
        );
        assert_eq!(
            flow_key(0, 1),
            fk(0x631A_9154_FBAB_F717, 0xA80A_BA8C_8664_0907)
        );
        assert_eq!(
            flow_key(42, 0),
            fk(0x57E1_FABA_6510_7204, 0xF4AB_D143_FEB2_4055)
        );
        assert_eq!(
            flow_key(42, 3),
            fk(0x3202_8F50_341E_BD74, 0xBC16_A3D4_CC48_678F)
        );
        assert_eq!(flow_key(0, 0).word(2), 0x0E0C_233B_359C_1D2D);
        assert_eq!(flow_key(42, 3).word(2), 0xAA2F_D6F9_CCAF_8C92);
        let p = Pattern::keyed(0);
        let mut buf = [0u8; 10];
        p.fill(&mut buf, 0);
        assert_eq!(
            buf,
            [0x6F, 0x7E, 0x19, 0x4D, 0x2F, 0xDD, 0x06, 0xA7, 0xCE, 0xCD]
        );
        // Every flow of every seed below has an odd step of its own.
        let mut steps = std::collections::BTreeSet::new();
        for seed in [0u64, 1, 42, u64::MAX] {
            for f in 0..MAX_FLOWS {
                let k = flow_key(seed, f);
                assert_eq!(k.step % 2, 1);
                assert!(steps.insert(k.step), "seed {seed} flow {f}");
            }
        }
        assert_eq!(p.spec(), StreamSpec::keyed(0));
        assert_eq!(p.spec().to_string(), "seed 0");
    }

    #[test]
    fn every_word_names_its_index() {
        for key in [
            FlowKey { key: 0, step: 1 },
            FlowKey {
                key: u64::MAX,
                step: u64::MAX,
            },
            flow_key(7, 63),
        ] {
            for i in [0u64, 1, 7, 1 << 20, (1 << 60) - 1, u64::MAX] {
                assert_eq!(key.index_of(key.word(i)), i, "{key:?} i {i}");
            }
        }
    }

    #[test]
    fn a_connection_is_the_flow_its_first_word_names() {
        let fill = |p: Pattern, offset: u64, len: usize| {
            let mut b = vec![0u8; len];
            p.fill(&mut b, offset);
            b
        };
        let of4 = |flow| KeyedFlow::new(9, flow, 4).unwrap();
        let bytes = |flow| fill(Pattern::keyed_flow(of4(flow)), 0, 4096);
        for j in 0..4 {
            assert_eq!(identify_flow(of4(0), &bytes(j)), Some(j));
            assert_eq!(identify_flow(of4(0), &bytes(j)[..8]), Some(j));
            assert_eq!(identify_flow(of4(0), &bytes(j)[..7]), None);
        }
        // Not at word 0, another seed, a single flow: no identity.
        let later = fill(Pattern::keyed_flow(of4(2)), 8, 64);
        assert_eq!(identify_flow(of4(0), &later), None);
        assert_eq!(
            identify_flow(KeyedFlow::new(10, 0, 4).unwrap(), &bytes(1)),
            None
        );
        assert_eq!(identify_flow(KeyedFlow::single(9), &bytes(0)), None);
        // A validator made for flow 0 that receives flow 2 validates it as flow 2, cleanly.
        let mut v = Validator::for_spec(StreamSpec::Keyed(of4(0))).unwrap();
        assert_eq!(v.check(&bytes(2)), 0);
        assert_eq!(v.pattern().spec(), StreamSpec::Keyed(of4(2)));
        // Flow 2's bytes after a clean start as flow 0 are still misdelivered bytes.
        let mut v = Validator::for_spec(StreamSpec::Keyed(of4(0))).unwrap();
        assert_eq!(v.check(&bytes(0)), 0);
        let foreign = fill(Pattern::keyed_flow(of4(2)), 4096, 4096);
        assert!(v.check(&foreign) > 0);
        assert_eq!(v.pattern().spec(), StreamSpec::Keyed(of4(0)));
        assert!(v.diagnoses()[0]
            .to_string()
            .contains("holds bytes of flow 2"));
        // Pieces of 1, 2 and 3 bytes are held until the 8th byte names the flow.
        let b3 = bytes(3);
        let mut v = Validator::for_spec(StreamSpec::Keyed(of4(0))).unwrap();
        assert_eq!(
            (v.check(&b3[..1]), v.check(&b3[1..3]), v.offset()),
            (0, 0, 0)
        );
        assert_eq!((v.check(&b3[3..6]), v.offset()), (0, 0));
        assert_eq!(v.check(&b3[6..4096]), 0);
        assert_eq!((v.offset(), v.mismatches()), (4096, 0));
        assert_eq!(v.pattern().spec(), StreamSpec::Keyed(of4(3)));
        // A stream of 5 bytes is checked at its end, as the validator's own flow.
        let mut v = Validator::for_spec(StreamSpec::Keyed(of4(1))).unwrap();
        assert_eq!(v.check(&bytes(1)[..5]), 0);
        assert_eq!((v.end(), v.offset(), v.mismatches()), (0, 5, 0));
        let mut v = Validator::for_spec(StreamSpec::Keyed(of4(1))).unwrap();
        v.check(&bytes(2)[..5]);
        assert!(v.end() > 0 && v.finish().is_err());
    }

    #[test]
    fn keyed_flows_are_named_and_bounded() {
        let spec = StreamSpec::keyed(42);
        assert_eq!(spec, StreamSpec::Keyed(KeyedFlow::single(42)));
        let f = spec.for_flow(1, 4).unwrap();
        assert_eq!(f, StreamSpec::Keyed(KeyedFlow::new(42, 1, 4).unwrap()));
        assert_eq!(f.to_string(), "seed 42 flow 1 of 4");
        assert_eq!(spec.for_flow(0, 1).unwrap().to_string(), "seed 42");
        // -v N and the alphabet: the same pattern on every flow.
        assert_eq!(
            StreamSpec::Periodic(7).for_flow(3, 4).unwrap(),
            StreamSpec::Periodic(7)
        );
        for (flow, flows) in [(1, 1), (0, 0), (4, 4), (0, MAX_FLOWS + 1)] {
            assert!(
                matches!(spec.for_flow(flow, flows), Err(Error::Usage(_))),
                "flow {flow} of {flows}"
            );
            assert!(KeyedFlow::new(42, flow, flows).is_err());
        }
        // Every flow of a seed has its own key, and no other seed's flow 0 has one of them.
        let keys: std::collections::BTreeSet<u64> = (0..MAX_FLOWS)
            .flat_map(|f| [flow_key(42, f), flow_key(43, f), flow_key(0, f)])
            .map(|k| k.key)
            .collect();
        assert_eq!(keys.len(), 3 * MAX_FLOWS as usize);
        let f = KeyedFlow::new(42, 63, 64).unwrap();
        assert_eq!(
            (f.seed(), f.flow(), f.flows(), f.key()),
            (42, 63, 64, flow_key(42, 63))
        );
    }

    /// A keyed stream of `len` bytes from offset 0.
    fn keyed_stream(seed: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        Pattern::keyed(seed).fill(&mut v, 0);
        v
    }

    /// Runs `frags` (stream offset, bytes) through a keyed validator in order.
    fn diagnose_frags(seed: u64, frags: &[&[u8]]) -> Validator {
        let mut v = Validator::with_pattern(Pattern::keyed(seed));
        for f in frags {
            v.check(f);
        }
        v
    }

    /// A short piece (1504 bytes, one small frame) delivered again at the start of the next,
    /// longer one: the bytes also look like the next piece shifted back by 1504, but they
    /// start exactly where that recent piece started, so it is a duplicate (the VM's fault (d)
    /// after a short frame).
    #[test]
    fn a_short_piece_again_at_the_start_of_a_longer_one_is_a_duplicate() {
        let s = keyed_stream(5, 20_000);
        let (a, b) = (8192, 8192 + 1504);
        let mut piece = s[b..b + 4096].to_vec();
        piece[..1504].copy_from_slice(&s[a..b]);
        let v = diagnose_frags(5, &[&s[..a], &s[a..b], &piece]);
        let d = &v.diagnoses()[0];
        assert_eq!(
            (d.fault, d.source),
            (Fault::Duplicate, Some(a as u64)),
            "{d}"
        );
        // An offset error of the same length with no piece starting there stays a shift.
        let mut shifted = s[b..b + 4096].to_vec();
        shifted.copy_from_slice(&s[b - 1000..b - 1000 + 4096]);
        let v = diagnose_frags(5, &[&s[..b], &shifted]);
        assert_eq!(
            v.diagnoses()[0].fault,
            Fault::Shifted,
            "{}",
            v.diagnoses()[0]
        );
    }

    #[test]
    fn keyed_diagnosis_names_each_fault() {
        const F: usize = 4096;
        let s = keyed_stream(42, 16 * F);
        let frag = |i: usize| &s[i * F..(i + 1) * F];
        // Duplicate: frag 5 delivered where frag 6 belongs.
        let frags: Vec<&[u8]> = (0..=5).chain([5]).map(frag).collect();
        let v = diagnose_frags(42, &frags);
        let d = v.diagnoses()[0];
        assert_eq!(
            (d.fault, d.source, d.from),
            (Fault::Duplicate, Some(5 * F as u64), 6 * F as u64)
        );
        assert_eq!(d.differing, F as u64 - count_equal(frag(5), frag(6)));
        // Stale: frag 1's bytes where frag 40 belongs (older than the duplicate window); from
        // frag 9 it is still a duplicate.
        let s = keyed_stream(42, 48 * F);
        let frag = |i: usize| &s[i * F..(i + 1) * F];
        for (back_to, fault) in [(1, Fault::Stale), (9, Fault::Duplicate)] {
            let mut v = Validator::with_pattern(Pattern::keyed(42));
            for i in 0..40 {
                v.check(frag(i));
            }
            v.check(frag(back_to));
            assert_eq!(v.diagnoses()[0].fault, fault);
            assert_eq!(v.diagnoses()[0].source, Some((back_to * F) as u64));
        }
        // Swapped: frags 3 and 4 in each other's place: both reordered.
        let v = diagnose_frags(42, &[frag(0), frag(1), frag(2), frag(4), frag(3), frag(5)]);
        let kinds: Vec<_> = v.diagnoses().iter().map(|d| (d.fault, d.source)).collect();
        assert_eq!(
            kinds,
            [
                (Fault::Reordered, Some(4 * F as u64)),
                (Fault::Reordered, Some(3 * F as u64))
            ]
        );
        // Dropped: frag 2 never arrives; every later one is reordered (and the stream ends
        // short, which the length check catches).
        let v = diagnose_frags(42, &[frag(0), frag(1), frag(3)]);
        assert_eq!(v.diagnoses()[0].fault, Fault::Reordered);
        assert_eq!(v.diagnoses()[0].source, Some(3 * F as u64));
        // Shifted by 1, 7, 8 bytes (the frag's offset reported late), either way.
        for shift in [1usize, 7, 8] {
            let late = &s[2 * F + shift..3 * F + shift];
            let v = diagnose_frags(42, &[frag(0), frag(1), late]);
            let d = v.diagnoses()[0];
            assert_eq!(d.fault, Fault::Shifted, "shift {shift}: {d}");
            assert_eq!(d.source, Some(2 * F as u64 + shift as u64));
            let early = &s[2 * F - shift..3 * F - shift];
            let v = diagnose_frags(42, &[frag(0), frag(1), early]);
            assert_eq!(v.diagnoses()[0].fault, Fault::Shifted);
            assert_eq!(v.diagnoses()[0].source, Some(2 * F as u64 - shift as u64));
        }
        // One bit flipped, also in the last 16 bytes of a frag (too few to decode after it).
        for at in [100usize, F - 3] {
            let mut bad = frag(1).to_vec();
            bad[at] ^= 0x10;
            let v = diagnose_frags(42, &[frag(0), &bad, frag(2)]);
            let d = v.diagnoses()[0];
            assert_eq!(
                (d.fault, d.source, d.differing),
                (Fault::Corrupt, None, 1),
                "{d}"
            );
            assert_eq!(d.first, (F + at) as u64);
        }
        // Memory that never held the stream.
        let v = diagnose_frags(42, &[frag(0), &[0u8; F]]);
        let d = v.diagnoses()[0];
        assert_eq!((d.fault, d.source), (Fault::Foreign, None));
        assert!(
            d.to_string().contains(
                "(bytes of no stream with this seed (wrong --seed?), or memory that never held \
                 one)"
            ),
            "{d}"
        );
        // Too few bytes after the first differing one to decode, and too few in place around
        // them to call it a local corruption: corrupt, and it says why.
        let other = keyed_stream(43, 12);
        let v = diagnose_frags(42, &[frag(0), &other]);
        let d = v.diagnoses()[0];
        assert_eq!((d.fault, d.in_place_around), (Fault::Corrupt, false), "{d}");
        assert!(
            d.to_string().contains("(corrupt: too few bytes to tell"),
            "{d}"
        );
    }

    /// The stream of flow `flow` of `flows` of `seed`, `len` bytes from offset 0.
    fn flow_stream(seed: u64, flow: u32, flows: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        Pattern::keyed_flow(KeyedFlow::new(seed, flow, flows).unwrap()).fill(&mut v, 0);
        v
    }

    /// Another flow's bytes in a flow's piece are named with that flow and their offset in its
    /// stream, at any alignment; a receiver told of fewer flows (one) calls them bytes of no
    /// stream with the seed, never a shift or reorder of its own.
    #[test]
    fn another_flows_bytes_name_that_flow_and_offset() {
        const F: usize = 4096;
        let own = flow_stream(9, 1, 4, 8 * F);
        let other = flow_stream(9, 3, 4, 8 * F);
        for (src, at_in_piece) in [(5 * F, 0usize), (2 * F + 3, 0), (F + 5, 1000)] {
            let mut piece = own[2 * F..3 * F].to_vec();
            let n = F - at_in_piece;
            piece[at_in_piece..].copy_from_slice(&other[src..src + n]);
            let flow1 = KeyedFlow::new(9, 1, 4).unwrap();
            let mut v = Validator::with_pattern(Pattern::keyed_flow(flow1));
            v.check(&own[..2 * F]);
            v.check(&piece);
            let d = v.diagnoses()[0];
            assert_eq!(
                (d.fault, d.source, d.from),
                (
                    Fault::Misdelivered { flow: 3 },
                    Some(src as u64),
                    (2 * F + at_in_piece) as u64
                ),
                "{d}"
            );
            assert!(
                d.to_string()
                    .contains(&format!("holds bytes of flow 3 at stream offset {src}")),
                "{d}"
            );
            let e = v.finish().unwrap_err().to_string();
            assert!(
                e.starts_with("validation failed (seed 9 flow 1 of 4): "),
                "{e}"
            );
            // Told of one flow only (or of 3: flow 3 is not among them).
            for flows in [2, 3] {
                let mut v = Validator::with_pattern(Pattern::keyed_flow(
                    KeyedFlow::new(9, 1, flows).unwrap(),
                ));
                v.check(&own[..2 * F]);
                v.check(&piece);
                assert_eq!(v.diagnoses()[0].fault, Fault::Foreign, "{flows} flows");
            }
        }
    }

    /// Stale bytes that start in the middle of a piece and come from an earlier stream offset
    /// than their position in the piece (the stream's first 100 bytes again after its first
    /// 100, in one 200-byte recvmsg) were a subtract-with-overflow panic in debug builds on
    /// network input; they are diagnosed as coming from offset 0.
    #[test]
    fn stale_bytes_from_before_their_place_in_the_piece_are_diagnosed() {
        let s = keyed_stream(42, 4096);
        let mut piece = s[..100].to_vec();
        piece.extend_from_slice(&s[..100]);
        let v = diagnose_frags(42, &[&piece]);
        let d = v.diagnoses()[0];
        assert_eq!((d.from, d.source), (100, Some(0)), "{d}");
        // The same a page in: bytes of offset 4096.. at piece position 5000.
        let s = keyed_stream(42, 3 * 4096);
        let mut piece = s[..5000].to_vec();
        piece.extend_from_slice(&s[4096..4096 + 200]);
        let v = diagnose_frags(42, &[&piece]);
        assert_eq!(v.diagnoses()[0].source, Some(4096));
    }

    fn count_equal(a: &[u8], b: &[u8]) -> u64 {
        a.iter().zip(b).filter(|(x, y)| x == y).count() as u64
    }

    #[test]
    fn keyed_failure_message_names_seed_and_diagnosis() {
        const F: usize = 4096;
        let s = keyed_stream(7, 4 * F);
        let v = diagnose_frags(7, &[&s[..F], &s[2 * F..3 * F]]);
        let e = v.finish().unwrap_err().to_string();
        assert!(e.starts_with("validation failed (seed 7): "), "{e}");
        assert!(
            e.contains(
                "; frag at stream offset 4096 (4096 bytes) holds the bytes of stream offset 8192 \
                 (+4096: reordered"
            ),
            "{e}"
        );
    }

    /// One build of the register block's comparison ([`repeat_diff_224_avx2`],
    /// [`repeat_diff_224_avx512`]).
    #[cfg(target_arch = "x86_64")]
    type RegisterDiff = unsafe fn(&[u8; REGISTER_SPAN], &[u8]) -> u64;

    /// The register block's builds this CPU runs, for the tests that compare every one.
    #[cfg(target_arch = "x86_64")]
    struct RegisterBuild {
        /// Each build's name (`avx2`, `avx512`) and comparison: the CPU has the build's
        /// features (asked by [`register_block_builds`]); a piece must be 32 bytes or more.
        builds: Vec<(&'static str, RegisterDiff)>,
    }

    /// The builds of the register block ([`window_diff_224`]) this CPU runs.
    #[cfg(target_arch = "x86_64")]
    fn register_block_builds() -> RegisterBuild {
        let mut builds: Vec<(&'static str, RegisterDiff)> = Vec::new();
        if Isa::Avx2.supported() {
            builds.push(("avx2", repeat_diff_224_avx2));
        }
        if Isa::Avx512.supported() {
            builds.push(("avx512", repeat_diff_224_avx512));
        }
        RegisterBuild { builds }
    }

    /// The 224-byte register block of `-v 7` (and of every period that divides 224), in each
    /// build this CPU runs: 0 for the stream from any phase and piece length, not 0 for a
    /// flipped bit anywhere in the piece, in the last part block and the last part vector too.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_register_block_of_v7_finds_every_flipped_bit() {
        for (name, build) in register_block_builds().builds {
            for period in [2u32, 4, 7, 8, 14, 16, 28, 32, 56, 112, 224] {
                let p = Pattern::new(period).unwrap();
                for phase in [0u64, 1, 6, 100, 223, 447] {
                    let mut block = [0u8; REGISTER_SPAN];
                    p.fill(&mut block, phase);
                    for len in [
                        32usize,
                        33,
                        63,
                        64,
                        223,
                        224,
                        225,
                        255,
                        448,
                        449,
                        895,
                        896,
                        4096,
                        65536 + 3,
                    ] {
                        let mut data = vec![0u8; len];
                        p.fill(&mut data, phase);
                        // SAFETY: the CPU has the build's features (register_block_builds);
                        // `len` >= 32.
                        let diff = |d: &[u8]| unsafe { build(&block, d) };
                        assert_eq!(
                            diff(&data),
                            0,
                            "{name} period {period} phase {phase} len {len}"
                        );
                        let step = match len {
                            ..=256 => 7,
                            257..=4096 => 61,
                            _ => 4093,
                        };
                        for bit in (0..len * 8).step_by(step).chain([len * 8 - 1]) {
                            data[bit / 8] ^= 1 << (bit % 8);
                            assert_ne!(
                                diff(&data),
                                0,
                                "{name} period {period} len {len} bit {bit}"
                            );
                            data[bit / 8] ^= 1 << (bit % 8);
                        }
                    }
                }
            }
        }
    }

    /// Exactly the periods that divide 224 are compared in registers (asked once, when the
    /// pattern is made); the alphabet and the keyed stream never are.
    #[test]
    fn only_periods_that_divide_224_use_the_register_block() {
        for period in MIN_PERIOD..=MAX_PERIOD {
            let p = Pattern::new(period).unwrap();
            let Kind::Periodic { in_registers, .. } = p.kind else {
                unreachable!()
            };
            assert_eq!(in_registers, 224 % period == 0, "period {period}");
        }
        let data = [0u8; 64];
        let Kind::Periodic { in_registers, .. } = Pattern::alphabet().kind else {
            unreachable!()
        };
        assert!(!in_registers);
        assert_eq!(Pattern::alphabet().matches_224(0, &data), None);
        assert_eq!(Pattern::keyed(42).matches_224(0, &data), None);
    }

    /// The register block at every alignment of the data (it compares from the data's first
    /// 32-byte boundary on, the bytes before it and after the last boundary by one overlapping
    /// load each): 0 for the stream, not 0 for a changed byte anywhere, the first and last 40
    /// bytes of a piece byte by byte, in each build this CPU runs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_register_block_finds_a_changed_byte_at_every_alignment() {
        // 32-byte aligned storage, so `at` is the data's alignment.
        let mut space = vec![[0u8; 32]; 4096 / 32 + 2];
        let space = space.as_flattened_mut();
        for (name, build) in register_block_builds().builds {
            for period in [2u32, 7, 14, 32, 224] {
                let p = Pattern::new(period).unwrap();
                for phase in [0u64, 5, 104, 223] {
                    let mut stream = [0u8; REGISTER_SPAN];
                    p.fill(&mut stream, phase);
                    for len in [32usize, 33, 40, 63, 64, 65, 95, 257, 1448, 1448 + 31, 4096] {
                        for at in 0..32 {
                            let data = &mut space[at..at + len];
                            p.fill(data, phase);
                            // SAFETY: the CPU has the build's features
                            // (register_block_builds); `len` >= 32.
                            let diff = |d: &[u8]| unsafe { build(&stream, d) };
                            let what = format!("{name} period {period} phase {phase} len {len}");
                            assert_eq!(diff(data), 0, "{what} at {at}");
                            let ends = (0..40.min(len)).chain(len.saturating_sub(40)..len);
                            for i in ends.chain((0..len).step_by(37)) {
                                data[i] ^= 0x80;
                                assert_ne!(diff(data), 0, "{what} at {at}: byte {i}");
                                data[i] ^= 0x80;
                            }
                        }
                    }
                }
            }
        }
    }

    /// `-v 7` pieces of a devmem receiver without hardware GRO (1448 bytes, one frame's
    /// payload) at every alignment, with pieces of 1 to 31 bytes (no register block) and pieces
    /// that straddle the period between them: a clean stream has no mismatch; a changed last
    /// byte of a 1448-byte piece, or a changed 1-byte piece, is reported at its stream offset
    /// with the byte expected there, in each build this CPU runs.
    #[test]
    fn v7_frame_sized_pieces_report_their_last_byte_at_every_alignment() {
        let p = Pattern::new(7).unwrap();
        let lens = [1448usize, 1, 1448, 3, 31, 32, 1448, 6, 1448, 1, 1, 1448];
        let total: usize = lens.iter().sum();
        let mut stream = vec![0u8; total];
        p.fill(&mut stream, 0);
        let mut space = vec![[0u8; 64]; total / 64 + 2];
        let space = space.as_flattened_mut();
        for &isa in Isa::ALL.iter().filter(|i| i.supported()) {
            force_isa(Some(isa)).unwrap();
            for at in 0..64 {
                for bad in [None, Some(0usize), Some(1), Some(11)] {
                    let mut v = Validator::new(7).unwrap();
                    let mut want = Vec::new();
                    let mut start = 0;
                    for (k, &len) in lens.iter().enumerate() {
                        let piece = &mut space[at..at + len];
                        piece.copy_from_slice(&stream[start..start + len]);
                        let mut expect = 0;
                        if bad == Some(k) {
                            piece[len - 1] ^= 0x5a;
                            expect = 1;
                            want.push(Mismatch {
                                offset: (start + len - 1) as u64,
                                expected: stream[start + len - 1],
                                actual: stream[start + len - 1] ^ 0x5a,
                            });
                        }
                        assert_eq!(v.check(piece), expect, "{isa} at {at} piece {k}");
                        start += len;
                    }
                    assert_eq!(v.offset(), total as u64);
                    assert_eq!(v.reported(), &want[..], "{isa} at {at}");
                }
            }
        }
        force_isa(None).unwrap();
    }

    /// `rewind` starts the stream again with nothing counted: the same bytes check clean a
    /// second time, and a fault after it is counted once.
    #[test]
    fn a_rewound_validator_checks_the_stream_again() {
        let p = Pattern::keyed(7);
        let mut data = vec![0u8; 3 * 4096];
        p.fill(&mut data, 0);
        let mut v = Validator::with_pattern(p);
        data[5000] ^= 1;
        for piece in data.chunks(4096) {
            v.check(piece);
        }
        assert_eq!(v.mismatches(), 1);
        v.rewind();
        assert_eq!((v.offset(), v.mismatches(), v.reported().len()), (0, 0, 0));
        assert!(v.diagnoses().is_empty() && v.causes().is_empty());
        data[5000] ^= 1;
        for piece in data.chunks(4096) {
            assert_eq!(v.check(piece), 0);
        }
        assert_eq!(v.offset(), data.len() as u64);
        data[9000] ^= 4;
        v.rewind();
        for piece in data.chunks(4096) {
            v.check(piece);
        }
        assert_eq!(v.mismatches(), 1);
        assert_eq!(v.reported()[0].offset, 9000);
    }

    /// Every instruction-set build this CPU runs fills and checks the same words as the
    /// baseline's, at every length, start and alignment, and finds a flipped bit in any word;
    /// so does the window comparison.
    #[test]
    fn every_build_fills_and_checks_the_same_words() {
        let key = flow_key(42, 3);
        let mut space = vec![0u8; 8 * 300 + 5 + 128];
        // `at` counts from a 64-byte boundary: at 0 and 64, whole 256-byte steps are the
        // AVX-512 build's 512-bit loop (`keyed_diff_avx512`), anything else its 256-bit one.
        let aligned = space.as_ptr().align_offset(64);
        for &isa in Isa::ALL.iter().filter(|i| i.supported()) {
            for (len, at, k) in [
                (0usize, 0usize, 5u64),
                (8, 0, 0),
                (8 * 4, 8, 2),
                (8 * 16, 0, 3),
                (8 * 32, 0, 8),
                (8 * 256, 64, 9),
                (8 * 19, 24, 4),
                (8 * 31, 40, 6),
                (1448, 8, 1 << 33),
                (8 * 17, 8, 99),
                (8 * 300 + 5, 16, 1 << 40),
                (8 * 200 + 3, 3, 7),
            ] {
                let first = key.word(k);
                let mut want = vec![0u8; len];
                keyed_fill_in(Isa::Baseline, first, key.step, &mut want);
                for (i, w) in want.chunks_exact(8).enumerate() {
                    assert_eq!(le_word(w), key.word(k + i as u64));
                }
                let got = &mut space[aligned + at..aligned + at + len];
                got.fill(0);
                keyed_fill_in(isa, first, key.step, got);
                assert_eq!(got, &want[..], "{isa} fill, {len} bytes at {at}");
                assert_eq!(keyed_diff_in(isa, first, key.step, got), 0, "{isa}");
                assert_eq!(window_diff_in(isa, &want, got), 0, "{isa}");
                for bit in (0..len * 8).step_by(61) {
                    got[bit / 8] ^= 1 << (bit % 8);
                    if bit < len / 8 * 64 {
                        assert_ne!(
                            keyed_diff_in(isa, first, key.step, got),
                            0,
                            "{isa}: bit {bit}"
                        );
                    }
                    assert_ne!(window_diff_in(isa, &want, got), 0, "{isa}: bit {bit}");
                    got[bit / 8] ^= 1 << (bit % 8);
                }
            }
        }
    }

    #[test]
    fn phase_of_is_the_remainder() {
        for period in MIN_PERIOD..=MAX_PERIOD {
            let p = period as usize;
            let r = u64::MAX / u64::from(period) + 1;
            for offset in [0u64, 1, 6, 7, 8, 4095, 1 << 40, u64::MAX - 1, u64::MAX]
                .into_iter()
                .chain((0..64).map(|k| (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (k % 7)))
            {
                assert_eq!(
                    phase_of(offset, p, r),
                    (offset % u64::from(period)) as usize,
                    "{offset} % {period}"
                );
            }
        }
    }

    /// A periodic comparison starts in the window at the data's phase, at any alignment of the
    /// data and for every period (the window start that matches the data's alignment, or the
    /// phase itself).
    #[test]
    fn periodic_window_starts_hold_the_phase() {
        let data = vec![0u8; 256];
        for period in MIN_PERIOD..=MAX_PERIOD {
            let p = Pattern::new(period).unwrap();
            let Kind::Periodic {
                period,
                window,
                chunk,
                ..
            } = &p.kind
            else {
                unreachable!()
            };
            for phase in (0..*period).step_by(3) {
                for at in 0..64 {
                    let s = p.window_start(phase, data[at..].as_ptr());
                    assert_eq!(s % period, phase, "period {period}");
                    assert!(s + chunk <= window.len(), "period {period}");
                    if period % 2 == 1 {
                        let aligned = (window.as_ptr() as usize + s) % VECTOR_ALIGN
                            == data[at..].as_ptr() as usize % VECTOR_ALIGN;
                        assert!(aligned, "period {period} phase {phase} at {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn periodic_validator_makes_no_diagnosis() {
        let mut v = Validator::new(7).unwrap();
        v.check(&[0u8; 100]);
        assert!(v.diagnoses().is_empty());
    }

    fn zlib_crc(bytes: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(bytes);
        h.finalize()
    }

    #[test]
    fn stream_crc_equals_hashing_the_stream() {
        for p in [
            Pattern::new(2).unwrap(),
            Pattern::new(7).unwrap(),
            Pattern::new(256).unwrap(),
            Pattern::keyed(42),
        ] {
            for len in [0usize, 1, 6, 7, 8, 4095, 4096, 70_001, 200_000] {
                let mut buf = vec![0u8; len];
                p.fill(&mut buf, 0);
                assert_eq!(
                    p.crc32(len as u64),
                    zlib_crc(&buf),
                    "{:?} len {len}",
                    p.spec()
                );
            }
        }
        // 1 GiB of `-v 7` (as the demo sends): zlib.crc32 of `yes`-style bytes.
        let p = Pattern::new(7).unwrap();
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 7 << 20];
        let mut at = 0u64;
        while at < 1 << 30 {
            let n = ((1u64 << 30) - at).min(buf.len() as u64) as usize;
            p.fill(&mut buf[..n], at);
            h.update(&buf[..n]);
            at += n as u64;
        }
        assert_eq!(p.crc32(1 << 30), h.finalize());
    }

    /// Flips the bytes `flips` names in `data` (a fill of `p` at stream offset `offset`) and
    /// checks that `p.compare` reports exactly the bytes that differ from `naive`.
    fn flip_and_compare(
        p: &Pattern,
        offset: u64,
        mut data: Vec<u8>,
        flips: &[(prop::sample::Index, u8)],
        naive: impl Fn(u64) -> u8,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        if !data.is_empty() {
            for (idx, x) in flips {
                let i = idx.index(data.len());
                data[i] ^= x;
            }
        }
        let want: Vec<Mismatch> = data
            .iter()
            .enumerate()
            .filter_map(|(i, &a)| {
                let e = naive(offset + i as u64);
                (a != e).then_some(Mismatch {
                    offset: offset + i as u64,
                    expected: e,
                    actual: a,
                })
            })
            .collect();
        let mut got = Vec::new();
        let n = p.compare(offset, &data, |m| got.push(m));
        prop_assert_eq!(n as usize, want.len());
        prop_assert_eq!(got, want);
        Ok(())
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
            flip_and_compare(&p, offset, data, &flips, |o| naive(o, period))?;
        }

        #[test]
        fn keyed_fill_and_compare_agree_with_definition(
            seed in any::<u64>(),
            flow in 0u32..MAX_FLOWS,
            offset in 0u64..1 << 40,
            len in 0usize..5_000,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..8),
        ) {
            let p = Pattern::keyed_flow(KeyedFlow::new(seed, flow, MAX_FLOWS).unwrap());
            let mut data = vec![0u8; len];
            p.fill(&mut data, offset);
            for (i, b) in data.iter().enumerate() {
                prop_assert_eq!(*b, naive_keyed(seed, flow, offset + i as u64));
                prop_assert_eq!(p.expected(offset + i as u64), *b);
            }
            flip_and_compare(&p, offset, data, &flips, |o| naive_keyed(seed, flow, o))?;
        }

        /// The trap of a stream whose seed only moves its start: under a wrong seed, or with
        /// another seed's bytes, no piece may read as shifted, reordered, stale or a duplicate
        /// (SplitMix64 started at two seeds is one sequence shifted, and said "reordered …
        /// from stream offset 8.8e18"); it is bytes of no stream with this seed.
        #[test]
        fn a_wrong_seed_is_never_a_shift_or_a_reorder(
            sent in any::<u64>(),
            told in any::<u64>(),
            flows in 1u32..=8,
            offset in 0usize..100_000,
            len in 16usize..9000,
        ) {
            prop_assume!(sent != told);
            let mut data = vec![0u8; len];
            Pattern::keyed(sent).fill(&mut data, offset as u64);
            let mut v = Validator::with_pattern(Pattern::keyed_flow(
                KeyedFlow::new(told, 0, flows).unwrap(),
            ));
            // The receiver's place is the sender's: only the seed differs.
            let mut lead = vec![0u8; offset];
            v.pattern().fill(&mut lead, 0);
            v.check(&lead);
            v.check(&data);
            let d = v.diagnoses()[0];
            prop_assert_eq!((d.fault, d.source), (Fault::Foreign, None), "{}", d);
            prop_assert!(d.to_string().contains("(wrong --seed?)"));
        }
    }

    proptest! {
        /// A received stream cut into pieces, some with flipped bytes, validated piece by
        /// piece: [`StreamCrc`] (which hashes only from the first bad piece on) equals the
        /// CRC-32 of every received byte for the periodic stream, and for the keyed stream the
        /// CRC-32 of the bytes from the first bad piece on (none when every piece matched).
        #[test]
        fn stream_crc_equals_the_crc_of_what_was_received(
            keyed in any::<bool>(),
            cuts in proptest::collection::vec(1usize..9000, 1..12),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3),
        ) {
            let p = if keyed { Pattern::keyed(9) } else { Pattern::new(7).unwrap() };
            let len: usize = cuts.iter().sum();
            let mut data = vec![0u8; len];
            p.fill(&mut data, 0);
            for (idx, x) in &flips {
                data[idx.index(len)] ^= x;
            }
            let mut v = Validator::with_pattern(p.clone());
            let mut crc = StreamCrc::default();
            let mut at = 0;
            for n in &cuts {
                let piece = &data[at..at + n];
                let bad = v.check(piece);
                crc.piece(piece, bad == 0);
                at += n;
            }
            let got = crc.value(Some(v.pattern()));
            if keyed {
                // The first bad piece's offset: the bytes before it are not hashed.
                let mut from = 0;
                let mut checker = Validator::with_pattern(p.clone());
                for n in &cuts {
                    if checker.check(&data[from..from + n]) > 0 {
                        break;
                    }
                    from += n;
                }
                let want = (from < len).then(|| zlib_crc(&data[from..]));
                prop_assert_eq!(got, StreamCrc32 { value: want, from: from as u64 });
            } else {
                prop_assert_eq!(got, StreamCrc32::of_all(zlib_crc(&data)));
            }
            // Without validation every byte is hashed.
            let mut plain = StreamCrc::default();
            plain.piece(&data, false);
            prop_assert_eq!(plain.value(None), StreamCrc32::of_all(zlib_crc(&data)));
        }
    }

    proptest! {
        /// Pieces spliced from anywhere in the stream (earlier, later, the same place), with
        /// garbage between, at any stream offset: the validator (and its diagnosis) never
        /// panics, and a piece with mismatches is diagnosed with a source inside the stream.
        #[test]
        fn keyed_diagnosis_never_panics_on_spliced_pieces(
            seed in any::<u64>(),
            start in 0usize..4096,
            good in 0usize..3000,
            parts in proptest::collection::vec(
                prop_oneof![
                    (0u64..1 << 13, 0usize..300).prop_map(|(o, n)| (Some(o), n)),
                    (0usize..40).prop_map(|n| (None, n)),
                ],
                1..6,
            ),
        ) {
            let p = Pattern::keyed(seed);
            // The piece starts in place for `good` bytes, then the spliced parts.
            let mut piece = vec![0u8; good];
            p.fill(&mut piece, start as u64);
            for (from, n) in parts {
                let mut b = vec![0xa5u8; n];
                if let Some(o) = from {
                    p.fill(&mut b, o);
                }
                piece.extend_from_slice(&b);
            }
            let mut v = Validator::with_pattern(p);
            let mut lead = vec![0u8; start];
            v.pattern().fill(&mut lead, 0);
            v.check(&lead);
            v.check(&piece);
            let _ = v.finish();
            for d in v.diagnoses() {
                let _ = d.to_string();
            }
        }
    }
}
