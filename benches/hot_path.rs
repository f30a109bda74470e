//! Benchmarks of the receive hot path (criterion): the pattern validator against a naive
//! per-byte reference (the validators against a plain read, side by side: benches/ratios.rs), cmsg
//! parsing of a full control buffer, token batching, and the whole receive loop per niov size and
//! token-release strategy (against the scripted socket over a `Vec`-backed dma-buf, so the figures
//! are user-space CPU cost, not NIC throughput). Figures and how to read them: docs/benchmarks.md.
//! Run with `make bench`.

use std::hint::black_box;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ncdevmem::figures::hist::FragSizeHistogram;
use ncdevmem::rx::testing::{
    encode_devmem_cmsg, PatternStream, Piece, ScriptedSocket, Step, VecMemory,
};
use ncdevmem::rx::{cmsgs, receive_logged, RxConfig, TokenBatcher, DEVMEM_CMSG_SPACE};
use ncdevmem::sys::uapi::{dmabuf_cmsg, SCM_DEVMEM_DMABUF};
use ncdevmem::validate::{Pattern, Validator};

const MIB: usize = 1 << 20;

/// The per-byte modulo loop the validator replaces (what ncdevmem.c does).
fn naive_mismatches(data: &[u8], period: u32, start: u64) -> u64 {
    let mut bad = 0;
    for (i, &b) in data.iter().enumerate() {
        let r = ((start + i as u64) % period as u64) as u32;
        let want = if r == period - 1 {
            b'\n'
        } else {
            (r + 1) as u8
        };
        bad += u64::from(b != want);
    }
    bad
}

fn validator(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate");
    let mut buf = vec![0u8; 4 * MIB];
    Pattern::new(7).unwrap().fill(&mut buf, 0);
    g.throughput(Throughput::Bytes(buf.len() as u64));
    // Built once: `Validator::new` builds the comparison window, which is not what a piece
    // costs; each iteration starts from a copy at stream offset 0.
    let fresh = Validator::new(7).unwrap();
    for frag in [1448usize, 4096, 16384, 65536] {
        g.bench_function(format!("window/frag{frag}"), |b| {
            b.iter(|| {
                let mut v = fresh.clone();
                for chunk in buf.chunks(frag) {
                    v.check(black_box(chunk));
                }
                assert_eq!(v.mismatches(), 0);
            })
        });
    }
    g.bench_function("naive-per-byte", |b| {
        b.iter(|| assert_eq!(naive_mismatches(black_box(&buf), 7, 0), 0))
    });
    g.finish();
}

/// A plain read of every byte (8 at a time, folded so nothing is optimised away): the floor
/// any validator is measured against.
fn plain_read(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        acc ^= u64::from_le_bytes(b);
    }
    words.remainder().iter().fold(acc, |a, &b| a ^ u64::from(b))
}

fn cmsg_parse(c: &mut Criterion) {
    let mut control = Vec::with_capacity(2000 * DEVMEM_CMSG_SPACE);
    for i in 0..2000u32 {
        let cm = dmabuf_cmsg {
            frag_offset: u64::from(i) * 4096,
            frag_size: 4096,
            frag_token: i + 1,
            dmabuf_id: 3,
            flags: 0,
        };
        control.extend_from_slice(&encode_devmem_cmsg(SCM_DEVMEM_DMABUF, &cm));
    }
    let mut g = c.benchmark_group("cmsg");
    g.throughput(Throughput::Elements(2000));
    g.bench_function("parse-2000-dmabuf", |b| {
        b.iter(|| cmsgs(black_box(&control)).filter(|c| c.is_ok()).count())
    });
    g.finish();
}

fn tokens(c: &mut Criterion) {
    let mut g = c.benchmark_group("tokens");
    g.throughput(Throughput::Elements(2000));
    g.bench_function("plan-2000-consecutive", |b| {
        b.iter(|| {
            let mut t = TokenBatcher::new();
            for tok in 1..=2000u32 {
                t.push(tok);
            }
            black_box(t.plan())
        })
    });
    g.bench_function("plan-2000-scattered", |b| {
        b.iter(|| {
            let mut t = TokenBatcher::new();
            for tok in 1..=2000u32 {
                t.push(tok * 2);
            }
            black_box(t.plan())
        })
    });
    g.finish();
}

/// The whole loop: 16 MiB as dmabuf frags of one niov each, validated in place.
fn receive_loop(c: &mut Criterion) {
    let total = 16 * MIB;
    let mut g = c.benchmark_group("receive-loop");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(20);
    for niov in [4096u32, 16384, 65536] {
        let mut mem = VecMemory::new(total);
        let mut s = PatternStream::new(7);
        let n = total / niov as usize;
        let pieces: Vec<Piece> = (0..n)
            .map(|i| s.dmabuf(&mut mem, (i * niov as usize) as u64, niov, 3))
            .collect();
        for (label, high_water) in [("release-per-batch", 1u64), ("release-at-1024", 1024)] {
            let cfg = RxConfig {
                validate: Some(ncdevmem::validate::StreamSpec::Periodic(7)),
                token_high_water: high_water,
                poll_tick: Duration::from_millis(1),
                ..RxConfig::devmem(3, niov)
            };
            g.bench_function(format!("niov{niov}/{label}"), |b| {
                b.iter_batched(
                    || ScriptedSocket::new(vec![Step::Data(pieces.clone()), Step::Eof]),
                    |mut sock| {
                        let (stats, r) = receive_logged(
                            &mut sock,
                            Some(&mem),
                            &cfg,
                            &AtomicI32::new(0),
                            &mut std::io::sink(),
                            &mut std::io::sink(),
                        );
                        r.expect("clean run");
                        assert_eq!(stats.bytes, total as u64);
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

/// Bytes each `*-1gib` group moves per iteration.
const GIB: usize = 1 << 30;

/// A group over 1 GiB per iteration: throughput in bytes, 10 samples (each iteration is tens of
/// milliseconds to seconds), a short warm-up.
fn gib_group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(GIB as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g
}

/// The C ncdevmem loop per frag: copy the frag out of the dma-buf mapping into a bounce buffer,
/// then check it byte by byte with a modulo (ncdevmem.c's `validate_buffer`). Generous to C:
/// no cmsg parsing, no syscalls.
fn c_style_loop(mem: &[u8], frag: usize, bounce: &mut [u8]) -> u64 {
    let mut bad = 0;
    for (i, chunk) in mem.chunks(frag).enumerate() {
        let b = &mut bounce[..chunk.len()];
        b.copy_from_slice(black_box(chunk));
        bad += naive_mismatches(b, 7, (i * frag) as u64);
    }
    bad
}

/// The scripted socket alone: every `recvmsg` until EOF and one `SO_DEVMEM_DONTNEED` of the
/// batch's tokens, with no parsing or validation: the double's share of the receive-loop rows.
fn drive_double(mut sock: ScriptedSocket, data_len: usize) -> u64 {
    use ncdevmem::rx::RxSocket;
    use ncdevmem::sys::uapi::dmabuf_token;
    let mut data = vec![0u8; data_len];
    let mut control = vec![0u8; ncdevmem::rx::DEFAULT_CONTROL_BUF_LEN];
    let mut bytes = 0u64;
    loop {
        let o = sock
            .recvmsg(&mut data, &mut control, true)
            .expect("scripted recvmsg");
        if o.bytes == 0 {
            return bytes;
        }
        bytes += o.bytes as u64;
        let frags = (o.control_len / DEVMEM_CMSG_SPACE) as u32;
        // The double hands out the lowest free tokens: this batch holds 1..=frags.
        let _ = sock.dontneed(&[dmabuf_token {
            token_start: 1,
            token_count: frags,
        }]);
    }
}

/// One run side by side over a real 1 GiB buffer: a plain read of the bytes (the
/// ceiling), the product's receive loop with its devmem defaults (iov, token high water of a
/// 1 GiB binding), the C ncdevmem loop, and the scripted socket alone, at 4, 16 and 64 KiB
/// frags and at 4 KiB with a 128-byte linear piece before every 32nd frag. Prints the loop's
/// calls per 1000 frags once per row.
fn receive_1gib(c: &mut Criterion) {
    const ID: u32 = 3;
    let mut g = gib_group(c, "rx-1gib");
    let mut mem = VecMemory::new(GIB);
    Pattern::new(7).unwrap().fill(mem.as_mut_slice(), 0);
    g.bench_function("plain-read", |b| {
        b.iter(|| plain_read(black_box(mem.as_slice())))
    });
    let mut bounce = vec![0u8; 65536];
    for frag in [4096usize, 16384, 65536] {
        g.bench_function(format!("frag{}k/c-style", frag >> 10), |b| {
            b.iter(|| assert_eq!(c_style_loop(mem.as_slice(), frag, &mut bounce), 0))
        });
    }
    let mut rows: Vec<(String, u32, Vec<Piece>)> = [4096u32, 16384, 65536]
        .into_iter()
        .map(|niov| {
            let pieces = (0..GIB / niov as usize)
                .map(|i| Piece::Dmabuf {
                    frag_offset: (i * niov as usize) as u64,
                    size: niov,
                    dmabuf_id: ID,
                    token: None,
                })
                .collect();
            (format!("frag{}k", niov >> 10), niov, pieces)
        })
        .collect();
    // 4 KiB niovs, a linear piece of the stream before every 32nd frag: the frag after it is
    // 128 bytes short so the stream stays contiguous in the dma-buf.
    let mut mixed = Vec::new();
    let pattern = Pattern::new(7).unwrap();
    for i in 0..GIB / 4096 {
        let off = (i * 4096) as u64;
        if i % 32 == 0 {
            let mut lin = vec![0u8; 128];
            pattern.fill(&mut lin, off);
            mixed.push(Piece::Linear(lin));
            mixed.push(Piece::Dmabuf {
                frag_offset: off + 128,
                size: 4096 - 128,
                dmabuf_id: ID,
                token: None,
            });
        } else {
            mixed.push(Piece::Dmabuf {
                frag_offset: off,
                size: 4096,
                dmabuf_id: ID,
                token: None,
            });
        }
    }
    rows.push(("frag4k+linear".to_string(), 4096, mixed));
    for (label, niov, pieces) in &rows {
        let cfg = RxConfig {
            validate: Some(ncdevmem::validate::StreamSpec::Periodic(7)),
            poll_tick: Duration::from_millis(1),
            ..RxConfig::devmem(ID, *niov).holding_tokens_of((GIB / *niov as usize) as u64)
        };
        let script = || ScriptedSocket::new(vec![Step::Data(pieces.clone()), Step::Eof]);
        let run = |sock: &mut ScriptedSocket| {
            let (stats, r) = receive_logged(
                sock,
                Some(&mem),
                &cfg,
                &AtomicI32::new(0),
                &mut std::io::sink(),
                &mut std::io::sink(),
            );
            r.expect("clean run");
            assert_eq!(stats.bytes, GIB as u64);
            stats
        };
        let stats = run(&mut script());
        let frags = stats.dmabuf_frags + stats.linear_frags;
        eprintln!(
            "rx-1gib/{label}: {} frags; per 1000 frags: {:.2} DONTNEED, {:.2} recvmsg; per GiB: \
             {} recvmsg, {} DONTNEED",
            frags,
            stats.dontneed_calls as f64 * 1000.0 / frags as f64,
            stats.recvmsg_calls as f64 * 1000.0 / frags as f64,
            stats.recvmsg_calls,
            stats.dontneed_calls
        );
        g.bench_function(format!("{label}/receive-loop"), |b| {
            b.iter_batched(script, |mut sock| run(&mut sock), BatchSize::LargeInput)
        });
        g.bench_function(format!("{label}/double-only"), |b| {
            b.iter_batched(
                script,
                |sock| assert_eq!(drive_double(sock, cfg.data_buf_len), GIB as u64),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// The zcrx consumer over a 1 GiB heap area: every completion decoded
/// (`Completion::decode`), validated in place (`-v 7`), queued for the refill ring and
/// published every 64; the bench plays the kernel by taking back whatever was published.
/// Against a plain read of the same area, at 4 KiB (the page) and 16 KiB (`--rx-buf-len`)
/// buffers.
fn zcrx_1gib(c: &mut Criterion) {
    use ncdevmem::sys::mmap::MappedRegion;
    use ncdevmem::sys::uring_mem::{RefillLayout, RefillRing};
    use ncdevmem::uring::{ChunkConsumer, Completion, Next, ZcrxParams, ZcrxRefill, ZcrxRxConfig};
    const IORING_CQE_F_MORE: u32 = 1 << 1;
    let mut g = gib_group(c, "zcrx-1gib");
    let mut area = MappedRegion::heap(GIB).expect("1 GiB area");
    let mut block = vec![0u8; 7 << 20];
    Pattern::new(7).unwrap().fill(&mut block, 0);
    for at in (0..GIB).step_by(block.len()) {
        let n = block.len().min(GIB - at);
        area.write_at(at as u64, &block[..n]).unwrap();
    }
    let all = area.bytes(0, GIB as u64).unwrap();
    g.bench_function("plain-read", |b| b.iter(|| plain_read(black_box(all))));
    let cfg = ZcrxRxConfig {
        validate: Some(ncdevmem::validate::StreamSpec::Periodic(7)),
        ..ZcrxRxConfig::default()
    };
    for buf in [4096usize, 16384] {
        g.bench_function(format!("buf{}k/consumer", buf >> 10), |b| {
            b.iter_batched(
                || {
                    let entries = 4096;
                    let layout = RefillLayout {
                        head: 0,
                        tail: 64,
                        rqes: 128,
                        entries,
                    };
                    let len = ZcrxParams::refill_region_len(entries, 4096);
                    ZcrxRefill::new(
                        RefillRing::new(MappedRegion::heap(len).unwrap(), layout).unwrap(),
                        0,
                    )
                },
                |mut refill| {
                    let (mut out, mut log) = (std::io::sink(), std::io::sink());
                    let mut consumer = ChunkConsumer::new(&cfg, &mut out, &mut log).unwrap();
                    for off in (0..GIB).step_by(buf) {
                        let done = Completion::decode(buf as i32, IORING_CQE_F_MORE, off as u64, 0)
                            .expect("decode");
                        let next = consumer.on_completion(done, &area, &mut refill).unwrap();
                        assert_eq!(next, Next::Continue);
                        let ring = refill.ring();
                        ring.kernel_store_head(ring.kernel_load_tail());
                    }
                    refill.publish();
                    let (stats, r) = consumer.finish(Ok(()), &refill);
                    r.expect("clean run");
                    assert_eq!(stats.bytes, GIB as u64);
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// The devmem TX fill and iov path for 1 GiB through a 64 MiB dma-buf, in the sender's default
/// 1 MiB pieces: the pattern source fills each piece (`PatternSource::next_piece`), the piece is
/// copied into the dma-buf (what `TxMemory::write_at` does to the udmabuf mapping), and
/// `IovCursor` cuts it into `sendmsg` batches of ≤ 1024 iovs (no split, and `-z 4096`). Against
/// a plain copy of 1 GiB.
fn tx_1gib(c: &mut Criterion) {
    use ncdevmem::tx::devmem::{IovCursor, PatternSource, TxSource, DEFAULT_MAX_PIECE};
    const DMABUF: usize = 64 << 20;
    let mut g = gib_group(c, "tx-1gib");
    let mut dmabuf = vec![0u8; DMABUF];
    let src_block = vec![7u8; DMABUF];
    g.bench_function("plain-copy", |b| {
        b.iter(|| {
            for _ in 0..GIB / DMABUF {
                dmabuf.copy_from_slice(black_box(&src_block));
            }
            black_box(&dmabuf);
        })
    });
    for chunk in [None, Some(4096u32)] {
        let label = chunk.map_or("no-split".to_string(), |c| format!("z{c}"));
        g.bench_function(format!("{label}/fill-and-iovs"), |b| {
            b.iter(|| {
                let mut src = PatternSource::new(
                    ncdevmem::validate::StreamSpec::Periodic(7),
                    GIB as u64,
                    0,
                    None,
                )
                .unwrap();
                let mut piece = Vec::new();
                let mut iovs = Vec::new();
                let mut n_iovs = 0usize;
                let mut at = 0usize;
                while src.next_piece(DEFAULT_MAX_PIECE, &mut piece).unwrap() {
                    // Pieces go round the dma-buf, as the region ring places them.
                    if at + piece.len() > DMABUF {
                        at = 0;
                    }
                    dmabuf[at..at + piece.len()].copy_from_slice(&piece);
                    let mut cur = IovCursor::new(at as u64, piece.len(), chunk);
                    at += piece.len();
                    while !cur.is_done() {
                        let bytes = cur.batch(1024, &mut iovs);
                        n_iovs += iovs.len();
                        cur.advance(bytes);
                    }
                }
                black_box(&dmabuf);
                black_box(n_iovs)
            })
        });
    }
    g.finish();
}

/// The per-flow frag-size histogram, one `record` per frag: 4096 frags all of one size (every
/// increment hits one bucket, the worst case for the store-to-load chain) and of a mix (whole
/// 4 KiB niovs, MSS-sized, short and 16 KiB frags).
fn frag_hist(c: &mut Criterion) {
    let mut g = c.benchmark_group("frag-hist");
    let uniform = vec![4096u32; 4096];
    let mixed: Vec<u32> = (0..4096u32)
        .map(|i| match i % 8 {
            0..=3 => 4096,
            4 => 1448,
            5 => 2648,
            6 => 64 + i % 512,
            _ => 16384,
        })
        .collect();
    for (name, sizes) in [("uniform-4096", &uniform), ("mixed", &mixed)] {
        g.throughput(Throughput::Elements(sizes.len() as u64));
        g.bench_function(format!("record/{name}"), |b| {
            b.iter(|| {
                let mut h = FragSizeHistogram::default();
                for &s in black_box(sizes.as_slice()) {
                    h.record(s);
                }
                black_box(h)
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    validator,
    cmsg_parse,
    tokens,
    receive_loop,
    receive_1gib,
    zcrx_1gib,
    tx_1gib,
    frag_hist
);
criterion_main!(benches);
