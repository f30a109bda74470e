//! Scripted-kernel tests of the receive loop: `ncdevmem::rx::receive_logged` against
//! `ScriptedSocket` (kernel cmsg bytes, buffer limits, token allocation, DONTNEED counts) over
//! a `VecMemory` dma-buf holding the pattern bytes the frags claim.

use std::cell::RefCell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use ncdevmem::error::Error;
use ncdevmem::figures::hist::FragSizeHistogram;
use ncdevmem::rx::testing::{PatternStream, Piece, ScriptedSocket, Step, VecMemory, ETOOSMALL};
use ncdevmem::rx::{
    receive, receive_logged, AfterFirstData, NoFragMemory, RecvOutcome, RxConfig, RxSocket,
    UnbindMode, DEFAULT_DATA_BUF_LEN, DEVMEM_CMSG_SPACE,
};
use ncdevmem::stats::{RxMode, RxStats};
use ncdevmem::sys::uapi::{dmabuf_cmsg, dmabuf_token};
use ncdevmem::validate::{StreamCrc32, StreamSpec};

/// Binding id the tests bind to.
const ID: u32 = 3;
const PAGE: u32 = 4096;

struct Run {
    stats: RxStats,
    result: ncdevmem::Result<()>,
    log: String,
    out: Vec<u8>,
}

fn run_with(sock: &mut impl RxSocket, mem: &VecMemory, cfg: &RxConfig, stop: &AtomicI32) -> Run {
    let mut out = Vec::new();
    let mut log = Vec::new();
    let (mut stats, result) = receive_logged(sock, Some(mem), cfg, stop, &mut out, &mut log);
    stats.elapsed = Duration::ZERO;
    // The CPU time is real; a run that received something reports it.
    assert!(stats.bytes == 0 || stats.cpu.is_some(), "{:?}", stats.cpu);
    stats.cpu = None;
    Run {
        stats,
        result,
        log: String::from_utf8(log).unwrap(),
        out,
    }
}

fn run(sock: &mut ScriptedSocket, mem: &VecMemory, cfg: &RxConfig) -> Run {
    run_with(sock, mem, cfg, &AtomicI32::new(0))
}

/// Devmem, binding [`ID`], 4 KiB niovs, `-v 7`, 5 ms poll tick.
fn cfg() -> RxConfig {
    RxConfig {
        validate: Some(StreamSpec::Periodic(7)),
        poll_tick: Duration::from_millis(5),
        ..RxConfig::devmem(ID, PAGE)
    }
}

/// The frag-size histogram of dmabuf frags of these sizes.
fn hist(sizes: &[(u32, u64)]) -> FragSizeHistogram {
    let mut h = FragSizeHistogram::default();
    for &(size, n) in sizes {
        for _ in 0..n {
            h.record(size);
        }
    }
    h
}

fn devmem_stats() -> RxStats {
    RxStats::new(RxMode::Devmem)
}

/// Devmem counters of a `-v 7` receive of everything `s` laid out: its CRC-32 and stream.
fn validated_stats(s: &PatternStream) -> RxStats {
    RxStats {
        stream: Some(StreamSpec::Periodic(7)),
        crc32: StreamCrc32::of_all(s.crc32()),
        ..devmem_stats()
    }
}

/// `n` dmabuf frags of `size` bytes, one per `stride` bytes of the dma-buf from `base`.
/// Two batches of `n` 4 KiB frags each, back to back in a 1 MiB dma-buf: the memory, the
/// stream (for the expected counters) and the two batches.
fn two_batches(n: u64) -> (VecMemory, PatternStream, Vec<Piece>, Vec<Piece>) {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let first = frags(&mut s, &mut mem, 0, n, 4096, 4096);
    let second = frags(&mut s, &mut mem, n * 4096, n, 4096, 4096);
    (mem, s, first, second)
}

fn frags(
    s: &mut PatternStream,
    mem: &mut VecMemory,
    base: u64,
    n: u64,
    size: u32,
    stride: u64,
) -> Vec<Piece> {
    (0..n)
        .map(|i| s.dmabuf(mem, base + i * stride, size, ID))
        .collect()
}

fn err_text(r: &Run) -> String {
    r.result.as_ref().unwrap_err().to_string()
}

#[test]
fn four_kib_frags_validated_and_released_in_one_range() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 64, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    r.result.as_ref().unwrap();
    assert_eq!(
        r.stats,
        RxStats {
            bytes: 64 * 4096,
            dmabuf_frags: 64,
            dmabuf_bytes: 64 * 4096,
            max_dmabuf_frag: 4096,
            tokens_released: 64,
            dontneed_calls: 1,
            recvmsg_calls: 2,
            validated_bytes: 64 * 4096,
            frag_sizes: hist(&[(4096, 64)]),
            ..validated_stats(&s)
        }
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 64)]]);
    assert!(sock.outstanding_tokens().is_empty());
    assert_eq!((mem.begin_calls(), mem.end_calls()), (1, 1));
    assert_eq!(mem.reads_outside_cpu_access(), 0);
    assert!(r.out.is_empty(), "validating: nothing on the output");
    assert!(r.log.is_empty(), "quiet hot path: {}", r.log);
}

#[test]
fn sixteen_kib_frags_fill_the_iov_and_tokens_are_reused() {
    let mut mem = VecMemory::new(4 << 20);
    let mut s = PatternStream::new(7);
    // 100 frags of 16 KiB: 50 fill the 819200-byte iov exactly.
    let pieces = frags(&mut s, &mut mem, 0, 100, 16384, 16384);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        data_buf_len: DEFAULT_DATA_BUF_LEN,
        ..RxConfig::devmem(ID, 16384).with_test_defaults()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(
        r.stats,
        RxStats {
            bytes: 100 * 16384,
            dmabuf_frags: 100,
            dmabuf_bytes: 100 * 16384,
            max_dmabuf_frag: 16384,
            tokens_released: 100,
            dontneed_calls: 2,
            recvmsg_calls: 3,
            validated_bytes: 100 * 16384,
            frag_sizes: hist(&[(16384, 100)]),
            ..validated_stats(&s)
        }
    );
    // Released after each batch, so the kernel hands out 1..=50 again.
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 50)], vec![(1, 50)]]);
    assert_eq!((mem.begin_calls(), mem.end_calls()), (2, 2));
}

/// The devmem iov is as long as the control buffer's 2000 frags of whole niovs (up to 16 MiB),
/// so one `recvmsg` returns all of them: 64 KiB niovs, 1000 frags of 64000 bytes arrive in 5
/// calls with EOF (16 MiB each), not 80 as with the 819200-byte iov.
#[test]
fn the_devmem_iov_lets_one_recvmsg_fill_the_control_buffer() {
    let mut mem = VecMemory::new(64 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 1000, 64_000, 65536);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig::devmem(ID, 65536).with_test_defaults();
    assert_eq!(cfg.data_buf_len, 16 << 20);
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    // 64,000,000 bytes in 3 calls of 16 MiB (262 frags and a part each) and one of the
    // rest, then EOF.
    assert_eq!(r.stats.recvmsg_calls, 5);
    assert_eq!(r.stats.bytes, 64_000_000);
    assert_eq!(r.stats.poll_calls, 0, "a busy socket is not polled");

    // 4 KiB niovs: 2000 whole-niov frags fill the 80000-byte control buffer and the
    // 8,192,000-byte iov together, in one call.
    let mut mem = VecMemory::new(16 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 2001, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig::devmem(ID, 4096).with_test_defaults();
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    // 2000 frags, then the last one, then EOF.
    assert_eq!((r.stats.recvmsg_calls, r.stats.dmabuf_frags), (3, 2001));
}

/// Held across batches up to an eighth of the binding: 64 KiB niovs in a 64 MiB binding (1024
/// niovs) release every 128 tokens, under 8 `SO_DEVMEM_DONTNEED` calls per 1000 frags.
#[test]
fn tokens_are_held_across_batches_up_to_an_eighth_of_the_binding() {
    let mut mem = VecMemory::new(64 << 20);
    let mut s = PatternStream::new(7);
    // 1000 frags in 100 batches of 10 (a slow sender): no batch alone reaches the mark.
    let mut steps = Vec::new();
    for b in 0..100u64 {
        steps.push(Step::Data(frags(
            &mut s,
            &mut mem,
            b * 10 * 65536,
            10,
            65536,
            65536,
        )));
    }
    steps.push(Step::Eof);
    let mut sock = ScriptedSocket::new(steps);
    let cfg = RxConfig::devmem(ID, 65536)
        .with_test_defaults()
        .holding_tokens_of(1024);
    assert_eq!(cfg.token_high_water, 128);
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(r.stats.dmabuf_frags, 1000);
    assert_eq!(r.stats.tokens_released, 1000);
    // 7 releases of 130 at the mark (13 batches each), then the last 90 at EOF.
    assert_eq!(r.stats.dontneed_calls, 8);
    assert!(sock.outstanding_tokens().is_empty());
}

trait TestDefaults {
    fn with_test_defaults(self) -> RxConfig;
}

impl TestDefaults for RxConfig {
    fn with_test_defaults(self) -> RxConfig {
        RxConfig {
            validate: Some(StreamSpec::Periodic(7)),
            poll_tick: Duration::from_millis(5),
            ..self
        }
    }
}

#[test]
fn odd_size_frags_split_by_the_iov_budget_get_new_tokens() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 3, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        data_buf_len: 6000,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    // recvmsg 1: 4096 (token 1) + 1904 (token 2); 2: 2192 (1) + 3808 (2); 3: 288 (1).
    assert_eq!(
        sock.dontneed_calls(),
        &[vec![(1, 2)], vec![(1, 2)], vec![(1, 1)]]
    );
    assert_eq!(
        r.stats,
        RxStats {
            bytes: 3 * 4096,
            dmabuf_frags: 5,
            dmabuf_bytes: 3 * 4096,
            max_dmabuf_frag: 4096,
            tokens_released: 5,
            dontneed_calls: 3,
            recvmsg_calls: 4,
            validated_bytes: 3 * 4096,
            frag_sizes: hist(&[(4096, 1), (1904, 1), (2192, 1), (3808, 1), (288, 1)]),
            ..validated_stats(&s)
        }
    );
}

#[test]
fn odd_size_frags_at_odd_offsets_within_niovs() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(251);
    let layout: [(u64, u32); 6] = [
        (17, 1),
        (4096 + 100, 3996),
        (3 * 4096, 4095),
        (5 * 4096 + 4093, 3),
        (9 * 4096 + 1, 1000),
        (7 * 4096, 4096),
    ];
    let pieces: Vec<Piece> = layout
        .iter()
        .map(|&(o, n)| s.dmabuf(&mut mem, o, n, ID))
        .collect();
    let total: u64 = layout.iter().map(|&(_, n)| n as u64).sum();
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        validate: Some(StreamSpec::Periodic(251)),
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(r.stats.bytes, total);
    assert_eq!(r.stats.validated_bytes, total);
    assert_eq!(r.stats.dmabuf_frags, 6);
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 6)]]);
}

fn interleaved(mem: &mut VecMemory) -> (Vec<Step>, Vec<u8>) {
    let mut s = PatternStream::new(7);
    let pieces = vec![
        s.linear(66),
        s.dmabuf(mem, 0, 4096, ID),
        s.dmabuf(mem, 4096, 1000, ID),
        s.linear(100),
        s.dmabuf(mem, 5 * 4096, 4096, ID),
        s.linear(1),
    ];
    let second = vec![s.linear(54), s.dmabuf(mem, 8 * 4096 + 8, 4000, ID)];
    let total = s.offset() as usize;
    let mut stream = vec![0; total];
    ncdevmem::validate::Pattern::new(7)
        .unwrap()
        .fill(&mut stream, 0);
    (
        vec![Step::Data(pieces), Step::Data(second), Step::Eof],
        stream,
    )
}

#[test]
fn linear_frags_interleaved_are_validated_in_stream_order() {
    let mut mem = VecMemory::new(1 << 20);
    let (steps, stream) = interleaved(&mut mem);
    let mut sock = ScriptedSocket::new(steps);
    let r = run(&mut sock, &mem, &cfg());
    r.result.as_ref().unwrap();
    assert_eq!(
        r.stats,
        RxStats {
            bytes: stream.len() as u64,
            dmabuf_frags: 4,
            dmabuf_bytes: 4096 + 1000 + 4096 + 4000,
            max_dmabuf_frag: 4096,
            linear_frags: 4,
            linear_bytes: 66 + 100 + 1 + 54,
            tokens_released: 4,
            dontneed_calls: 2,
            recvmsg_calls: 3,
            validated_bytes: stream.len() as u64,
            stream: Some(StreamSpec::Periodic(7)),
            crc32: StreamCrc32::of_all(crc32fast::hash(&stream)),
            frag_sizes: hist(&[(4096, 2), (1000, 1), (4000, 1)]),
            ..devmem_stats()
        }
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 3)], vec![(1, 1)]]);
}

#[test]
fn without_validation_the_payload_goes_to_the_output_in_stream_order() {
    let mut mem = VecMemory::new(1 << 20);
    let (steps, stream) = interleaved(&mut mem);
    let mut sock = ScriptedSocket::new(steps);
    let cfg = RxConfig {
        validate: None,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(r.out, stream);
    assert_eq!(r.stats.validated_bytes, 0);
}

#[test]
fn fail_on_linear_fails_and_still_releases_every_token() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = vec![
        s.dmabuf(&mut mem, 0, 4096, ID),
        s.linear(10),
        s.dmabuf(&mut mem, 4096, 4096, ID),
    ];
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        fail_on_linear: true,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    assert!(matches!(r.result, Err(Error::Failure(_))));
    assert_eq!(
        err_text(&r),
        "-L: SCM_DEVMEM_LINEAR frag of 10 bytes at stream offset 4096: payload landed in host memory (header split not working)"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)]]);
    assert!(sock.outstanding_tokens().is_empty());
    assert_eq!((mem.begin_calls(), mem.end_calls()), (1, 1));
}

#[test]
fn frag_crossing_a_niov_boundary_is_an_error_naming_token_offset_size() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = vec![
        s.dmabuf(&mut mem, 0, 4096, ID),
        s.dmabuf(&mut mem, 2 * 4096 + 4000, 200, ID),
    ];
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces.clone()), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert!(matches!(r.result, Err(Error::Bounds { .. })));
    assert_eq!(
        err_text(&r),
        "dmabuf frag (token 2, dma-buf offset 0x2fa0, size 200) inside its niov (rx-page-size 4096 bytes) \
         out of bounds: offset 0xfa0 + len 0xc8 exceeds region of 0x1000 bytes"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)]]);
    assert_eq!(r.stats.validated_bytes, 4096, "bad frag not read");

    // The same frag is inside one 16 KiB niov (rx-page-size 16384).
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(
        &mut sock,
        &mem,
        &RxConfig::devmem(ID, 16384).with_test_defaults(),
    );
    r.result.as_ref().unwrap();
    assert_eq!(r.stats.bytes, 4296);
}

#[test]
fn wrong_dmabuf_id_is_a_flow_steering_error() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let mut pieces = frags(&mut s, &mut mem, 0, 3, 4096, 4096);
    if let Piece::Dmabuf { dmabuf_id, .. } = &mut pieces[1] {
        *dmabuf_id = 9;
    }
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "flow steering error: dmabuf frag (token 2) at stream offset 4096 comes from binding 9, expected binding 3"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 3)]]);
    assert!(sock.outstanding_tokens().is_empty());
}

#[test]
fn frag_beyond_the_dmabuf_is_rejected_before_any_read() {
    let mem = VecMemory::new(64 * 1024);
    for (offset, size, text) in [
        (
            64 * 1024u64,
            100u32,
            "dmabuf frag (token 1, size 100) out of bounds: offset 0x10000 + len 0x64 exceeds region of 0x10000 bytes",
        ),
        (
            u64::MAX - 10,
            100,
            "dmabuf frag (token 1, size 100) out of bounds: offset 0xfffffffffffffff5 + len 0x64 exceeds region of 0x10000 bytes",
        ),
    ] {
        let piece = Piece::Dmabuf {
            frag_offset: offset,
            size,
            dmabuf_id: ID,
            token: None,
        };
        let mut sock = ScriptedSocket::new(vec![Step::Data(vec![piece]), Step::Eof]);
        let r = run(&mut sock, &mem, &cfg());
        assert!(matches!(r.result, Err(Error::Bounds { .. })));
        assert_eq!(err_text(&r), text);
        assert_eq!(sock.dontneed_calls(), &[vec![(1, 1)]]);
        assert_eq!(mem.begin_calls(), 0, "nothing read");
    }
}

#[test]
fn msg_ctrunc_fails_and_releases_the_tokens_it_got() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 4, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::CtruncNext, Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "recvmsg(MSG_SOCK_DEVMEM) set MSG_CTRUNC: the 80000-byte control buffer was too small (160 bytes of cmsgs delivered) and cmsgs were dropped (their frags' tokens are lost)"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 4)]]);
    assert_eq!(r.stats.recvmsg_calls, 1);
    // The size named is the buffer's, whatever the configuration.
    let pieces = frags(&mut s, &mut mem, 0, 1, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::CtruncNext, Step::Data(pieces), Step::Eof]);
    let r = run(
        &mut sock,
        &mem,
        &RxConfig {
            control_buf_len: 100,
            ..cfg()
        },
    );
    assert!(
        err_text(&r).contains("the 100-byte control buffer was too small (40 bytes of cmsgs"),
        "{}",
        err_text(&r)
    );
}

/// A `recvmsg` that claims more bytes than the iov holds is an error, and the tokens of the
/// dmabuf cmsgs it delivered still go back.
#[test]
fn a_return_larger_than_the_iov_fails_and_releases_its_tokens() {
    let mem = VecMemory::new(1 << 20);
    let mut control = raw_devmem(libc::SCM_DEVMEM_DMABUF, 0, 4096, 1);
    control.extend(raw_devmem(libc::SCM_DEVMEM_DMABUF, 4096, 4096, 2));
    let cfg = RxConfig {
        data_buf_len: 4096,
        ..cfg()
    };
    let mut sock = ScriptedSocket::new(vec![
        Step::Raw {
            data: vec![],
            control,
            bytes: 8192,
            msg_flags: 0,
        },
        Step::Eof,
    ]);
    let r = run(&mut sock, &mem, &cfg);
    assert!(
        matches!(r.result, Err(Error::Decode { .. })),
        "{:?}",
        r.result
    );
    assert_eq!(
        err_text(&r),
        "cannot decode recvmsg(MSG_SOCK_DEVMEM) return: 8192 bytes for a 4096-byte iov"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)]]);
    assert_eq!(
        sock.outstanding_tokens(),
        Vec::<u32>::new(),
        "no token leaked"
    );
}

#[test]
fn efault_ends_the_run_with_its_name() {
    let (mem, _, first, second) = two_batches(4);
    let mut sock = ScriptedSocket::new(vec![
        Step::Data(first),
        Step::Errno(libc::EFAULT),
        Step::Data(second),
        Step::Eof,
    ]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(r.result.as_ref().unwrap_err().errno(), Some(libc::EFAULT));
    assert_eq!(
        err_text(&r),
        "recvmsg(MSG_SOCK_DEVMEM): EFAULT (Bad address)"
    );
    assert_eq!(r.stats.recvmsg_calls, 2, "no retry after EFAULT");
    assert_eq!(sock.remaining_steps(), 2);
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 4)]]);
}

#[test]
fn eagain_and_eintr_are_retried_and_counted() {
    let (mem, s, first, second) = two_batches(2);
    let mut sock = ScriptedSocket::new(vec![
        Step::Errno(libc::EAGAIN),
        Step::Data(first),
        Step::Errno(libc::EINTR),
        Step::PollErrno(libc::EINTR),
        Step::Data(second),
        Step::Eof,
    ]);
    let r = run(&mut sock, &mem, &cfg());
    r.result.as_ref().unwrap();
    assert_eq!(
        r.stats,
        RxStats {
            bytes: 4 * 4096,
            dmabuf_frags: 4,
            dmabuf_bytes: 4 * 4096,
            max_dmabuf_frag: 4096,
            tokens_released: 4,
            dontneed_calls: 2,
            // EAGAIN, data, EINTR, EAGAIN (the queued poll error), data, EOF.
            recvmsg_calls: 6,
            // Neither EAGAIN came after a poll that said readable.
            eagain_retries: 0,
            poll_calls: 2,
            eintr_retries: 2,
            validated_bytes: 4 * 4096,
            frag_sizes: hist(&[(4096, 4)]),
            ..validated_stats(&s)
        }
    );
}

/// An EAGAIN right after a poll that said readable is the one counted as a spurious retry;
/// held tokens go back before every poll.
#[test]
fn eagain_after_a_readable_poll_is_counted_as_spurious() {
    let (mem, _, first, second) = two_batches(2);
    let mut sock = ScriptedSocket::new(vec![
        Step::Data(first),
        // Nothing queued (then poll: readable), and again after the poll said readable.
        Step::Errno(libc::EAGAIN),
        Step::Errno(libc::EAGAIN),
        Step::Data(second),
        Step::Eof,
    ]);
    let cfg = RxConfig {
        token_high_water: 1000,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(
        (
            r.stats.recvmsg_calls,
            r.stats.eagain_retries,
            r.stats.poll_calls
        ),
        (5, 1, 2)
    );
    // Released at the first EAGAIN (before the poll), the rest at EOF.
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)], vec![(1, 2)]]);
    assert!(sock.outstanding_tokens().is_empty());
}

#[test]
fn other_recvmsg_errors_and_poll_errors_end_the_run() {
    let mem = VecMemory::new(4096);
    let mut sock = ScriptedSocket::new(vec![Step::Errno(libc::ECONNRESET)]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "recvmsg(MSG_SOCK_DEVMEM): ECONNRESET (Connection reset by peer)"
    );
    let mut sock = ScriptedSocket::new(vec![Step::PollErrno(libc::EBADF)]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "poll(POLLIN) on the data socket: EBADF (Bad file descriptor)"
    );
    // recvmsg first (nothing queued), then the poll that fails.
    assert_eq!((r.stats.recvmsg_calls, r.stats.poll_calls), (1, 1));
}

#[test]
fn short_dontneed_count_is_a_leaked_tokens_failure() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 64, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    sock.short_next_dontneed(1);
    let r = run(&mut sock, &mem, &cfg());
    assert!(matches!(r.result, Err(Error::Failure(_))));
    assert_eq!(
        err_text(&r),
        "SO_DEVMEM_DONTNEED freed 63 of 64 tokens (1 ranges, first 1+64): 1 tokens leaked"
    );
    assert_eq!(r.stats.tokens_released, 63);
    assert_eq!(r.stats.dontneed_calls, 1);
    assert_eq!(sock.outstanding_tokens(), vec![64]);
}

#[test]
fn more_than_128_scattered_tokens_in_one_recvmsg_are_released_in_128_range_calls() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let mut pieces = frags(&mut s, &mut mem, 0, 300, 1024, 1024);
    for (i, p) in pieces.iter_mut().enumerate() {
        if let Piece::Dmabuf { token, .. } = p {
            *token = Some(2 * i as u32 + 2); // 2, 4, 6, ...: nothing to coalesce
        }
    }
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    r.result.as_ref().unwrap();
    let calls = sock.dontneed_calls();
    assert_eq!(
        calls.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![128, 128, 44]
    );
    assert_eq!(calls[0][0], (2, 1));
    assert_eq!(calls[0][127], (256, 1));
    assert_eq!(calls[1][0], (258, 1));
    assert_eq!(calls[2][43], (600, 1));
    assert_eq!(r.stats.tokens_released, 300);
    assert_eq!(r.stats.dontneed_calls, 3);
    assert_eq!(r.stats.recvmsg_calls, 2);
    assert!(sock.outstanding_tokens().is_empty());
}

#[test]
fn full_control_buffer_stops_at_2000_frags_and_long_ranges_split_at_1024() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 2100, 256, 256);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    r.result.as_ref().unwrap();
    assert_eq!(
        sock.dontneed_calls(),
        &[vec![(1, 1024)], vec![(1025, 976)], vec![(1, 100)]]
    );
    assert_eq!(
        r.stats,
        RxStats {
            bytes: 2100 * 256,
            dmabuf_frags: 2100,
            dmabuf_bytes: 2100 * 256,
            max_dmabuf_frag: 256,
            tokens_released: 2100,
            dontneed_calls: 3,
            recvmsg_calls: 3,
            validated_bytes: 2100 * 256,
            frag_sizes: hist(&[(256, 2100)]),
            ..validated_stats(&s)
        }
    );
}

#[test]
fn one_corrupted_byte_is_reported_at_its_stream_offset_after_draining() {
    let (mut mem, _, first, second) = two_batches(16);
    // Stream offset 5 * 4096 + 123 = 20603; 20603 % 7 = 2, so 0x03 is expected there.
    mem.as_mut_slice()[5 * 4096 + 123] = 0x55;
    let mut sock = ScriptedSocket::new(vec![Step::Data(first), Step::Data(second), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert!(matches!(r.result, Err(Error::Failure(_))));
    assert_eq!(
        err_text(&r),
        "validation failed (period 7): 1 mismatched byte(s) in 131072 bytes; \
         first at stream offset 20603: expected 0x03, actual 0x55"
    );
    assert_eq!(
        r.log,
        "validation mismatch at stream offset 20603: expected 0x03, actual 0x55\n"
    );
    // The stream was drained and every token went back.
    assert_eq!(r.stats.recvmsg_calls, 3);
    assert_eq!(r.stats.bytes, 131072);
    assert_eq!(r.stats.mismatches, 1);
    assert_eq!(r.stats.tokens_released, 32);
    assert!(sock.outstanding_tokens().is_empty());
}

#[test]
fn only_the_first_20_mismatches_are_logged() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 4, 4096, 4096);
    for i in 0..25 {
        mem.as_mut_slice()[100 + i * 7] ^= 0xFF;
    }
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(r.log.lines().count(), 20);
    assert!(r
        .log
        .starts_with("validation mismatch at stream offset 100: "));
    assert_eq!(r.stats.mismatches, 25);
    assert!(err_text(&r).contains("25 mismatched byte(s) in 16384 bytes"));
}

#[test]
fn data_without_devmem_cmsgs_is_a_flow_steering_error() {
    let mem = VecMemory::new(4096);
    let mut s = PatternStream::new(7);
    let mut sock = ScriptedSocket::new(vec![Step::Plain(s.bytes(1000)), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "flow steering error: recvmsg(MSG_SOCK_DEVMEM) returned 1000 bytes at stream offset 0 \
         without SCM_DEVMEM cmsgs (the flow did not arrive on the bound queue)"
    );
}

#[test]
fn plain_mode_validates_the_iov_and_is_labelled_plain_tcp() {
    let mut s = PatternStream::new(7);
    let mut sock = ScriptedSocket::new(vec![
        Step::Plain(s.bytes(1_000_000)),
        Step::Plain(s.bytes(10)),
        Step::Eof,
    ]);
    let cfg = RxConfig {
        validate: Some(StreamSpec::Periodic(7)),
        poll_tick: Duration::from_millis(5),
        ..RxConfig::plain()
    };
    let stop = AtomicI32::new(0);
    let mut out = Vec::new();
    let stats = receive::<_, NoFragMemory, _>(&mut sock, None, &cfg, &stop, &mut out).unwrap();
    assert_eq!(
        RxStats {
            elapsed: Duration::ZERO,
            cpu: None,
            ..stats.clone()
        },
        RxStats {
            bytes: 1_000_010,
            plain_bytes: 1_000_010,
            recvmsg_calls: 4, // 819200 + 180800 + 10 + EOF
            validated_bytes: 1_000_010,
            stream: Some(StreamSpec::Periodic(7)),
            crc32: StreamCrc32::of_all(s.crc32()),
            ..RxStats::new(RxMode::PlainTcp)
        }
    );
    assert!(sock.dontneed_calls().is_empty());
    assert!(stats.summary_line().contains("plain TCP"));
}

#[test]
fn plain_mode_outputs_payload_and_rejects_devmem_data() {
    let mut s = PatternStream::new(9);
    let bytes = s.bytes(5000);
    let mut sock = ScriptedSocket::new(vec![Step::Plain(bytes.clone()), Step::Eof]);
    let cfg = RxConfig {
        poll_tick: Duration::from_millis(5),
        ..RxConfig::plain()
    };
    let stop = AtomicI32::new(0);
    let mut out = Vec::new();
    receive::<_, NoFragMemory, _>(&mut sock, None, &cfg, &stop, &mut out).unwrap();
    assert_eq!(out, bytes);

    // Devmem skbs read without MSG_SOCK_DEVMEM: the kernel answers EFAULT.
    let mut mem = VecMemory::new(4096);
    let piece = s.dmabuf(&mut mem, 0, 100, ID);
    let mut sock = ScriptedSocket::new(vec![Step::Data(vec![piece])]);
    let e = receive::<_, NoFragMemory, _>(&mut sock, None, &cfg, &stop, &mut out).unwrap_err();
    assert_eq!(e.to_string(), "recvmsg: EFAULT (Bad address)");
}

/// An output that holds its first write for `hold` (a pipe nobody reads for a while, or a
/// receive thread the host did not run).
struct SlowOut {
    hold: Duration,
    held: bool,
    bytes: Vec<u8>,
}

impl std::io::Write for SlowOut {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if !self.held {
            self.held = true;
            std::thread::sleep(self.hold);
        }
        self.bytes.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The idle timeout is judged after a call that found nothing, not from the clock alone: a
/// receive held longer than the timeout between two reads (here by its output) reads what was
/// queued meanwhile instead of timing out with data waiting (the old loop checked the clock
/// first and timed out here).
#[test]
fn a_receive_held_past_the_idle_timeout_reads_what_was_queued() {
    let mut s = PatternStream::new(9);
    let first = s.bytes(5000);
    let second = s.bytes(3000);
    let mut sock = ScriptedSocket::new(vec![
        Step::Plain(first.clone()),
        Step::Plain(second.clone()),
        Step::Eof,
    ]);
    let cfg = RxConfig {
        poll_tick: Duration::from_millis(5),
        idle_timeout: Some(Duration::from_millis(50)),
        ..RxConfig::plain()
    };
    let mut out = SlowOut {
        hold: Duration::from_millis(200),
        held: false,
        bytes: Vec::new(),
    };
    let stats = receive::<_, NoFragMemory, _>(&mut sock, None, &cfg, &AtomicI32::new(0), &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.bytes, 8000);
    assert_eq!(out.bytes, [first, second].concat());
}

#[test]
fn idle_timeout_names_how_long() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 2, 4096, 4096);
    let mut steps = vec![Step::Data(pieces)];
    steps.extend(std::iter::repeat_n(Step::Idle, 100));
    let mut sock = ScriptedSocket::new(steps);
    let cfg = RxConfig {
        idle_timeout: Some(Duration::from_millis(40)),
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    assert!(matches!(r.result, Err(Error::Timeout(_))));
    let e = err_text(&r);
    // How long it was idle is wall time: at least the timeout, more on a loaded machine
    // (0.118 s seen at load 9), so only its form and its lower bound are checked.
    let idle: f64 = e
        .strip_prefix("timed out: no data for ")
        .and_then(|rest| rest.split_once(" s (idle timeout 0.040 s) after 8192 bytes"))
        .filter(|(_, tail)| tail.is_empty())
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("{e}"));
    assert!(idle >= 0.040, "{e}");
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)]]);
    assert!(sock.remaining_steps() > 80, "gave up after about 8 ticks");
}

#[test]
fn tokens_are_released_when_the_socket_goes_idle() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let a = frags(&mut s, &mut mem, 0, 10, 4096, 4096);
    let b = frags(&mut s, &mut mem, 10 * 4096, 10, 4096, 4096);
    let c = frags(&mut s, &mut mem, 20 * 4096, 10, 4096, 4096);
    let mut sock = ScriptedSocket::new(vec![
        Step::Data(a),
        Step::Data(b),
        Step::Idle,
        Step::Data(c),
        Step::Eof,
    ]);
    let cfg = RxConfig {
        token_high_water: 1000,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    // Held across two batches, released at the idle poll, the rest at EOF.
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 20)], vec![(1, 10)]]);
    assert_eq!(r.stats.tokens_released, 30);
}

/// Wraps a socket and sets the stop flag after `after` recvmsg calls.
struct StopAfter<'a> {
    inner: ScriptedSocket,
    stop: &'a AtomicI32,
    after: u64,
}

impl RxSocket for StopAfter<'_> {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        let r = self.inner.recvmsg(data, control, devmem);
        if self.inner.recvmsg_calls() == self.after {
            self.stop.store(libc::SIGTERM, Ordering::Relaxed);
        }
        r
    }
    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.inner.dontneed(tokens)
    }
    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.inner.wait_readable(timeout)
    }
}

#[test]
fn stop_flag_ends_the_loop_with_the_signal_and_releases_tokens() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let steps = (0..5)
        .map(|i| Step::Data(frags(&mut s, &mut mem, i * 8192, 2, 4096, 4096)))
        .collect();
    let stop = AtomicI32::new(0);
    let mut sock = StopAfter {
        inner: ScriptedSocket::new(steps),
        stop: &stop,
        after: 2,
    };
    let cfg = RxConfig {
        token_high_water: 1000,
        ..cfg()
    };
    let r = run_with(&mut sock, &mem, &cfg, &stop);
    assert!(matches!(r.result, Err(Error::Interrupted(libc::SIGTERM))));
    assert_eq!(r.stats.recvmsg_calls, 2);
    assert_eq!(sock.inner.dontneed_calls(), &[vec![(1, 4)]]);
    assert!(sock.inner.outstanding_tokens().is_empty());

    // Already set before the first call: nothing is received.
    let stop = AtomicI32::new(libc::SIGINT);
    let mut sock = ScriptedSocket::new(vec![Step::Eof]);
    let r = run_with(&mut sock, &mem, &cfg, &stop);
    assert!(matches!(r.result, Err(Error::Interrupted(libc::SIGINT))));
    assert_eq!(sock.recvmsg_calls(), 0);
}

fn raw_devmem(ty: i32, offset: u64, size: u32, token: u32) -> Vec<u8> {
    let c = dmabuf_cmsg {
        frag_offset: offset,
        frag_size: size,
        frag_token: token,
        dmabuf_id: ID,
        flags: 0,
    };
    ncdevmem::rx::testing::encode_devmem_cmsg(ty, &c).to_vec()
}

#[test]
fn byte_counts_that_disagree_with_the_recvmsg_return_are_decode_errors() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let _ = s.dmabuf(&mut mem, 0, 4096, ID);
    let cases = [
        // A linear frag longer than what recvmsg returned.
        (
            raw_devmem(libc::SCM_DEVMEM_LINEAR, 0, 200, 0),
            100,
            "cannot decode SCM_DEVMEM_LINEAR cmsg: frag_size 200 at iov offset 0 runs past the 100 bytes recvmsg(MSG_SOCK_DEVMEM) returned",
        ),
        // cmsgs describe 4096 bytes, recvmsg returned 5000.
        (
            raw_devmem(libc::SCM_DEVMEM_DMABUF, 0, 4096, 1),
            5000,
            "cannot decode recvmsg(MSG_SOCK_DEVMEM) return: 5000 bytes returned but the cmsgs describe 0 linear + 4096 dmabuf bytes",
        ),
        // A dmabuf frag beyond the return.
        (
            raw_devmem(libc::SCM_DEVMEM_DMABUF, 0, 4096, 1),
            4000,
            "cannot decode SCM_DEVMEM_DMABUF cmsg: frag (token 1, size 4096) makes 4096 bytes, more than the 4000 bytes recvmsg(MSG_SOCK_DEVMEM) returned",
        ),
    ];
    for (control, bytes, text) in cases {
        let mut sock = ScriptedSocket::new(vec![Step::Raw {
            data: vec![1; 300],
            control,
            bytes,
            msg_flags: 0,
        }]);
        let r = run(&mut sock, &mem, &cfg());
        assert!(matches!(r.result, Err(Error::Decode { .. })), "{text}");
        assert_eq!(err_text(&r), text);
    }
}

#[test]
fn control_len_is_clamped_to_the_control_buffer() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let _ = s.dmabuf(&mut mem, 0, 8192, ID);
    let mut control = raw_devmem(libc::SCM_DEVMEM_DMABUF, 0, 4096, 1);
    control.extend(raw_devmem(libc::SCM_DEVMEM_DMABUF, 4096, 4096, 2));
    control.extend(raw_devmem(libc::SCM_DEVMEM_DMABUF, 8192, 4096, 3));
    // The answer claims 120 bytes of cmsgs; the buffer holds 80.
    let mut sock = ScriptedSocket::new(vec![
        Step::Raw {
            data: vec![],
            control,
            bytes: 8192,
            msg_flags: 0,
        },
        Step::Eof,
    ]);
    let cfg = RxConfig {
        control_buf_len: 2 * DEVMEM_CMSG_SPACE,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(r.stats.dmabuf_frags, 2);
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 2)]]);
}

#[test]
fn dma_buf_sync_failure_propagates_and_tokens_are_released() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 3, 4096, 4096);
    mem.fail_next_begin(libc::EINVAL);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let r = run(&mut sock, &mem, &cfg());
    assert_eq!(
        err_text(&r),
        "ioctl(DMA_BUF_IOCTL_SYNC, START|READ): EINVAL (Invalid argument)"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 3)]]);
}

#[test]
fn verbose_prints_one_line_per_frag() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = vec![
        s.linear(10),
        s.dmabuf(&mut mem, 3 * 4096 + 16, 100, ID),
        s.dmabuf(&mut mem, 4096, 4096, ID),
    ];
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        verbose: true,
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    assert_eq!(
        r.log,
        "frag linear: size 10, stream offset 0\n\
         frag dmabuf: token 1, dma-buf offset 0x3010 (niov 3, +0x10), size 100, stream offset 10, dmabuf id 3\n\
         frag dmabuf: token 2, dma-buf offset 0x1000 (niov 1, +0x0), size 4096, stream offset 110, dmabuf id 3\n"
    );
}

#[test]
fn progress_lines_appear_at_the_interval() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 2, 4096, 4096);
    let mut steps = vec![Step::Data(pieces)];
    steps.extend(std::iter::repeat_n(Step::Idle, 6));
    steps.push(Step::Eof);
    let mut sock = ScriptedSocket::new(steps);
    let cfg = RxConfig {
        progress_interval: Some(Duration::from_millis(10)),
        ..cfg()
    };
    let r = run(&mut sock, &mem, &cfg);
    r.result.as_ref().unwrap();
    let lines: Vec<&str> = r.log.lines().collect();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("rx progress (devmem): 8192 bytes in ")),
        "{lines:?}"
    );
}

#[test]
fn bad_configuration_is_a_usage_error() {
    let mem = VecMemory::new(4096);
    for (cfg, text) in [
        (
            RxConfig {
                data_buf_len: 0,
                ..cfg()
            },
            "receive buffer of 0 bytes",
        ),
        (
            RxConfig {
                control_buf_len: 39,
                ..cfg()
            },
            "control buffer of 39 bytes cannot hold one devmem cmsg (40 bytes)",
        ),
        (
            RxConfig::devmem(ID, 0),
            "niov size (rx-page-size) of 0 bytes",
        ),
        (
            RxConfig {
                validate: Some(StreamSpec::Periodic(1)),
                ..cfg()
            },
            "-v: validation period 1 out of range 2..=256 bytes",
        ),
    ] {
        let mut sock = ScriptedSocket::new(vec![Step::Eof]);
        let r = run(&mut sock, &mem, &cfg);
        assert!(matches!(r.result, Err(Error::Usage(_))), "{text}");
        assert_eq!(err_text(&r), text);
        assert_eq!(sock.recvmsg_calls(), 0);
    }
    let mut sock = ScriptedSocket::new(vec![Step::Eof]);
    let e =
        receive::<_, NoFragMemory, _>(&mut sock, None, &cfg(), &AtomicI32::new(0), &mut Vec::new())
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "devmem receive needs the dma-buf mapping to read frags from"
    );
}

// ---- the double itself behaves like the kernel ----

#[test]
fn double_fails_when_the_first_cmsg_does_not_fit() {
    let mut mem = VecMemory::new(4096);
    let mut s = PatternStream::new(7);
    let mut sock = ScriptedSocket::new(vec![Step::Data(vec![s.dmabuf(&mut mem, 0, 10, ID)])]);
    let mut data = [0u8; 100];
    let mut control = [0u8; DEVMEM_CMSG_SPACE - 1];
    assert_eq!(sock.recvmsg(&mut data, &mut control, true), Err(ETOOSMALL));
    let mut control = [0u8; DEVMEM_CMSG_SPACE];
    let o = sock.recvmsg(&mut data, &mut control, true).unwrap();
    assert_eq!(
        o,
        RecvOutcome {
            bytes: 10,
            msg_flags: 0,
            control_len: 40
        }
    );
}

#[test]
fn double_dontneed_follows_kernel_limits() {
    let mut mem = VecMemory::new(1 << 20);
    let mut s = PatternStream::new(7);
    let pieces = frags(&mut s, &mut mem, 0, 1100, 256, 256);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces)]);
    let mut data = vec![0u8; 1 << 20];
    let mut control = vec![0u8; 80_000];
    let o = sock.recvmsg(&mut data, &mut control, true).unwrap();
    assert_eq!(o.control_len, 1100 * 40);
    let tok = |s, c| dmabuf_token {
        token_start: s,
        token_count: c,
    };
    assert_eq!(sock.dontneed(&[]), Err(libc::EINVAL));
    assert_eq!(sock.dontneed(&vec![tok(5000, 1); 129]), Err(libc::EINVAL));
    // At most 1024 tokens are looked at per call.
    assert_eq!(sock.dontneed(&[tok(1, 1100)]), Ok(1024));
    // The cap counts tokens looked at, freed or not: 1..=1024 are gone, 1025.. not reached.
    assert_eq!(sock.dontneed(&[tok(1, 1100)]), Ok(0));
    // Unknown tokens are skipped; the rest are freed.
    assert_eq!(sock.dontneed(&[tok(1, 3), tok(1025, 76)]), Ok(76));
    assert!(sock.outstanding_tokens().is_empty());
}

/// A socket that is always readable and whose every call fails with a transient errno.
struct TransientForever {
    /// `Some(e)`: `wait_readable` fails with `e`; `None`: it reports readable.
    poll_errno: Option<i32>,
    recv_errno: i32,
    calls: u64,
}

impl RxSocket for TransientForever {
    fn recvmsg(&mut self, _: &mut [u8], _: &mut [u8], _: bool) -> Result<RecvOutcome, i32> {
        self.calls += 1;
        Err(self.recv_errno)
    }
    fn dontneed(&mut self, _: &[dmabuf_token]) -> Result<usize, i32> {
        Ok(0)
    }
    fn wait_readable(&mut self, _: Duration) -> Result<bool, i32> {
        match self.poll_errno {
            Some(e) => {
                self.calls += 1;
                Err(e)
            }
            None => Ok(true),
        }
    }
}

/// A kernel answering EAGAIN or EINTR forever (to recvmsg, or EINTR to poll) does not make the
/// loop spin until the idle timeout: it backs off, so 300 ms cost a few dozen calls, not
/// millions.
#[test]
fn transient_errors_forever_back_off_instead_of_spinning() {
    let mem = VecMemory::new(1 << 20);
    for (poll_errno, recv_errno) in [
        (None, libc::EAGAIN),
        (None, libc::EINTR),
        (Some(libc::EINTR), libc::EAGAIN),
    ] {
        let mut sock = TransientForever {
            poll_errno,
            recv_errno,
            calls: 0,
        };
        let cfg = RxConfig {
            idle_timeout: Some(Duration::from_millis(300)),
            poll_tick: Duration::from_millis(200),
            ..cfg()
        };
        let t0 = std::time::Instant::now();
        let r = run_with(&mut sock, &mem, &cfg, &AtomicI32::new(0));
        assert!(
            matches!(r.result, Err(Error::Timeout(_))),
            "{poll_errno:?}/{recv_errno}: {:?}",
            r.result
        );
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert!(
            sock.calls < 100,
            "{poll_errno:?}/{recv_errno}: {} calls in 300 ms",
            sock.calls
        );
    }
}

/// A socket that is always readable and whose every `recvmsg` returns 0 bytes with a
/// control message (6.18 does this with `TCP_INQ` set: a `TCP_CM_INQ` cmsg and no data),
/// which is neither EOF nor data.
struct ControlOnlyForever {
    calls: u64,
}

impl RxSocket for ControlOnlyForever {
    fn recvmsg(&mut self, _: &mut [u8], control: &mut [u8], _: bool) -> Result<RecvOutcome, i32> {
        self.calls += 1;
        // SOL_TCP (6) / TCP_CM_INQ (36) with an i32 of 0: cmsg_len 20, CMSG_SPACE 24.
        let mut c = [0u8; 24];
        c[..16].copy_from_slice(&ncdevmem::sys::uapi::encode_cmsghdr(4, 6, 36));
        control[..24].copy_from_slice(&c);
        Ok(RecvOutcome {
            bytes: 0,
            msg_flags: 0,
            control_len: 24,
        })
    }
    fn dontneed(&mut self, _: &[dmabuf_token]) -> Result<usize, i32> {
        Ok(0)
    }
    fn wait_readable(&mut self, _: Duration) -> Result<bool, i32> {
        Ok(true)
    }
}

/// `recvmsg` calls that return 0 bytes with control data are counted, do not count as data
/// for `--timeout` (a run of them is idle) and do not spin: 300 ms of them cost a few dozen
/// calls. (Before: each reset the idle timer, so the run never ended, at 100% CPU.)
#[test]
fn control_only_recvmsgs_are_idle_and_back_off() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mem = VecMemory::new(1 << 20);
        let mut sock = ControlOnlyForever { calls: 0 };
        let cfg = RxConfig {
            idle_timeout: Some(Duration::from_millis(300)),
            poll_tick: Duration::from_millis(200),
            ..cfg()
        };
        let r = run_with(&mut sock, &mem, &cfg, &AtomicI32::new(0));
        let _ = tx.send((r.result, r.stats, sock.calls));
    });
    // A watchdog, not a timing assert: the loop must end at all (its idle timeout is 300 ms).
    let (result, stats, calls) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the receive never ended: control-only recvmsgs reset the idle timer");
    assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
    assert!(calls < 100, "{calls} recvmsg calls in 300 ms");
    assert_eq!(stats.control_only_recvmsgs, calls);
    assert_eq!(stats.recvmsg_calls, calls);
    assert_eq!(stats.bytes, 0);
}

/// `-U` and the "binding gone" verdict: `recvmsg(MSG_SOCK_DEVMEM)` answering ENODEV (a
/// kernel with the autorelease series once the binding has no users: unbound before this
/// socket's first devmem recvmsg, autorelease 0).
fn unbind_cfg(mode: UnbindMode) -> RxConfig {
    RxConfig {
        unbind: mode,
        ..cfg()
    }
}

/// `-U 1` on a series kernel: the first recvmsg answers ENODEV; the run ends there, cleanly,
/// with nothing released and `binding_gone` in the counters (C ncdevmem: `goto cleanup`).
#[test]
fn enodev_after_a_before_recv_unbind_ends_the_run_cleanly() {
    let (mem, _, first, _) = two_batches(4);
    // The series kernel keeps answering ENODEV; the data stays queued.
    let mut sock = ScriptedSocket::new(vec![
        Step::Errno(libc::ENODEV),
        Step::Errno(libc::ENODEV),
        Step::Data(first),
    ]);
    let r = run(&mut sock, &mem, &unbind_cfg(UnbindMode::BeforeRecv));
    r.result.as_ref().unwrap();
    assert_eq!(
        r.stats,
        RxStats {
            recvmsg_calls: 1,
            binding_gone: true,
            stream: Some(StreamSpec::Periodic(7)),
            crc32: StreamCrc32::of_all(PatternStream::new(7).crc32()),
            ..devmem_stats()
        }
    );
    assert!(sock.dontneed_calls().is_empty());
    assert_eq!(sock.remaining_steps(), 2);
    assert_eq!(
        r.log,
        "binding gone: recvmsg(MSG_SOCK_DEVMEM) answered ENODEV at stream offset 0 after the \
         -U 1 unbind (expected); the run ends here\n"
    );
}

/// `-U 1` on a kernel without the series (6.18, 7.3: measured by the VM case
/// devmem-nic/unbind-recvmsg): the queued frags stay readable after the unbind, every byte
/// is validated and every token goes back; no binding-gone verdict.
#[test]
fn before_recv_unbind_without_the_series_receives_everything() {
    let (mem, s, first, second) = two_batches(4);
    let mut sock = ScriptedSocket::new(vec![Step::Data(first), Step::Data(second), Step::Eof]);
    let r = run(&mut sock, &mem, &unbind_cfg(UnbindMode::BeforeRecv));
    r.result.as_ref().unwrap();
    assert!(!r.stats.binding_gone);
    assert_eq!(r.stats.validated_bytes, 8 * 4096);
    assert_eq!(r.stats.tokens_released, 8);
    assert!(sock.outstanding_tokens().is_empty());
    assert_eq!(r.stats.crc32, StreamCrc32::of_all(s.crc32()));
}

/// ENODEV anywhere else is a failure named "binding gone", after the tokens already
/// delivered went back: without `-U` (the binding went away under the run) and after a
/// `-U 2` unbind (the series keeps a binding usable for a socket that already received).
#[test]
fn enodev_without_a_before_recv_unbind_is_a_binding_gone_failure() {
    for (mode, text) in [
        (
            UnbindMode::Normal,
            "binding gone: recvmsg(MSG_SOCK_DEVMEM) answered ENODEV at stream offset 16384: \
             the dmabuf binding was torn down under the socket",
        ),
        (
            UnbindMode::AfterRecv,
            "binding gone: recvmsg(MSG_SOCK_DEVMEM) answered ENODEV at stream offset 16384 \
             after the -U 2 unbind: a socket that already received must keep its binding usable",
        ),
    ] {
        let (mem, _, first, second) = two_batches(4);
        let mut sock = ScriptedSocket::new(vec![
            Step::Data(first),
            Step::Errno(libc::ENODEV),
            Step::Data(second),
            Step::Eof,
        ]);
        let r = run(&mut sock, &mem, &unbind_cfg(mode));
        assert_eq!(err_text(&r), text, "{mode:?}");
        assert_eq!(r.result.as_ref().unwrap_err().exit_code(), 1);
        assert!(!r.stats.binding_gone);
        assert_eq!(r.stats.recvmsg_calls, 2, "no retry after ENODEV");
        assert_eq!(sock.dontneed_calls(), &[vec![(1, 4)]]);
        assert!(sock.outstanding_tokens().is_empty());
    }
}

/// Plain TCP never asks for devmem: ENODEV there is an ordinary recvmsg error.
#[test]
fn enodev_on_a_plain_receive_is_an_ordinary_error() {
    let mut sock = ScriptedSocket::new(vec![Step::Errno(libc::ENODEV)]);
    let plain = RxConfig {
        unbind: UnbindMode::BeforeRecv,
        ..RxConfig::plain()
    };
    let mut out = Vec::new();
    let mut log = Vec::new();
    let (_, result) = receive_logged(
        &mut sock,
        None::<&NoFragMemory>,
        &plain,
        &AtomicI32::new(0),
        &mut out,
        &mut log,
    );
    assert_eq!(
        result.unwrap_err().to_string(),
        "recvmsg: ENODEV (No such device)"
    );
}

/// Records the order of socket calls and of the `-U 2` hook.
struct Recorder<'a> {
    inner: ScriptedSocket,
    events: &'a RefCell<Vec<String>>,
}

impl RxSocket for Recorder<'_> {
    fn recvmsg(
        &mut self,
        data: &mut [u8],
        control: &mut [u8],
        devmem: bool,
    ) -> Result<RecvOutcome, i32> {
        let r = self.inner.recvmsg(data, control, devmem);
        self.events.borrow_mut().push(match &r {
            Ok(o) => format!("recvmsg {}", o.bytes),
            Err(e) => format!("recvmsg errno {e}"),
        });
        r
    }

    fn dontneed(&mut self, tokens: &[dmabuf_token]) -> Result<usize, i32> {
        self.events.borrow_mut().push("dontneed".into());
        self.inner.dontneed(tokens)
    }

    fn wait_readable(&mut self, timeout: Duration) -> Result<bool, i32> {
        self.inner.wait_readable(timeout)
    }
}

/// `-U 2`: the hook (the unbind) runs once, after the first recvmsg that delivered data and
/// the release of its tokens, before the next recvmsg — where C ncdevmem unbinds. An EAGAIN
/// before the first data does not count.
#[test]
fn after_first_data_unbinds_between_the_first_batch_and_the_next_recvmsg() {
    let (mem, s, first, second) = two_batches(4);
    let events = RefCell::new(Vec::new());
    let mut rec = Recorder {
        inner: ScriptedSocket::new(vec![
            Step::Idle,
            Step::Data(first),
            Step::Data(second),
            Step::Eof,
        ]),
        events: &events,
    };
    let c = RxConfig {
        token_high_water: 1,
        ..unbind_cfg(UnbindMode::AfterRecv)
    };
    let fired = {
        let mut wrapped =
            AfterFirstData::new(&mut rec, || events.borrow_mut().push("unbind".into()));
        let r = run_with(&mut wrapped, &mem, &c, &AtomicI32::new(0));
        r.result.as_ref().unwrap();
        assert_eq!(r.stats.validated_bytes, 8 * 4096);
        assert_eq!(r.stats.crc32, StreamCrc32::of_all(s.crc32()));
        wrapped.fired()
    };
    assert!(fired);
    drop(rec);
    assert_eq!(
        events.into_inner(),
        [
            "recvmsg errno 11",
            "recvmsg 16384",
            "dontneed",
            "unbind",
            "recvmsg 16384",
            "dontneed",
            "recvmsg 0"
        ]
    );
}

/// `-U 2` when the first data is also the last: the hook runs at the recvmsg that sees EOF.
#[test]
fn after_first_data_fires_before_the_eof_recvmsg_and_never_twice() {
    let (mem, _, first, _) = two_batches(4);
    let events = RefCell::new(Vec::new());
    let mut rec = Recorder {
        inner: ScriptedSocket::new(vec![Step::Data(first), Step::Eof]),
        events: &events,
    };
    let c = RxConfig {
        token_high_water: 1,
        ..unbind_cfg(UnbindMode::AfterRecv)
    };
    let mut wrapped = AfterFirstData::new(&mut rec, || events.borrow_mut().push("unbind".into()));
    run_with(&mut wrapped, &mem, &c, &AtomicI32::new(0))
        .result
        .unwrap();
    drop(wrapped);
    drop(rec);
    assert_eq!(
        events.into_inner(),
        ["recvmsg 16384", "dontneed", "unbind", "recvmsg 0"]
    );
}

/// What 7.3 does with data that arrives after a `-U 2` unbind (VM case
/// devmem-nic/unbind-modes, 64 MiB stream): the queue runs without the provider, the new
/// segments are ordinary memory, and `recvmsg(MSG_SOCK_DEVMEM)` copies them with no devmem
/// cmsg: a flow steering error, after the tokens already delivered went back.
#[test]
fn data_after_an_after_recv_unbind_is_a_flow_steering_error() {
    let (mem, _, first, _) = two_batches(4);
    let mut sock = ScriptedSocket::new(vec![
        Step::Data(first),
        Step::Plain(vec![b'x'; 1448]),
        Step::Eof,
    ]);
    let c = RxConfig {
        token_high_water: 1,
        ..unbind_cfg(UnbindMode::AfterRecv)
    };
    let mut hooked = false;
    let r = {
        let mut wrapped = AfterFirstData::new(&mut sock, || hooked = true);
        run_with(&mut wrapped, &mem, &c, &AtomicI32::new(0))
    };
    assert!(hooked);
    assert_eq!(
        err_text(&r),
        "flow steering error: recvmsg(MSG_SOCK_DEVMEM) returned 1448 bytes at stream offset \
         16384 without SCM_DEVMEM cmsgs (the flow did not arrive on the bound queue)"
    );
    assert_eq!(sock.dontneed_calls(), &[vec![(1, 4)]]);
}
