//! Benchmarks of the receive hot path (criterion): the pattern validator against a naive
//! per-byte reference, cmsg parsing of a full control buffer, token batching, and the whole
//! receive loop per niov size and token-release strategy (against the scripted socket over a
//! `Vec`-backed dma-buf, so the figures are user-space CPU cost, not NIC throughput).
//! Figures and how to read them: docs/benchmarks.md. Run with `make bench`.

use std::hint::black_box;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
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
    for frag in [1448usize, 4096, 16384, 65536] {
        g.bench_function(format!("window/frag{frag}"), |b| {
            b.iter(|| {
                let mut v = Validator::new(7).unwrap();
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

/// The keyed stream (`--seed`) against the periodic pattern (`-v 7`), a plain read and CRC-32
/// of the same bytes, in 4 KiB pieces, over a buffer that fits the caches (4 MiB) and one that
/// does not (256 MiB, read from memory).
fn keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate-keyed");
    for size in [4 * MIB, 256 * MIB] {
        let label = format!("{}MiB", size / MIB);
        let mut periodic = vec![0u8; size];
        Pattern::new(7).unwrap().fill(&mut periodic, 0);
        let mut keyed = vec![0u8; size];
        Pattern::keyed(42).fill(&mut keyed, 0);
        g.throughput(Throughput::Bytes(size as u64));
        if size > 4 * MIB {
            g.sample_size(10);
        }
        g.bench_function(format!("{label}/plain-read"), |b| {
            b.iter(|| plain_read(black_box(&keyed)))
        });
        g.bench_function(format!("{label}/periodic-v7"), |b| {
            b.iter(|| {
                let mut v = Validator::new(7).unwrap();
                for chunk in periodic.chunks(4096) {
                    v.check(black_box(chunk));
                }
                assert_eq!(v.mismatches(), 0);
            })
        });
        g.bench_function(format!("{label}/keyed-seed"), |b| {
            b.iter(|| {
                let mut v = Validator::with_pattern(Pattern::keyed(42));
                for chunk in keyed.chunks(4096) {
                    v.check(black_box(chunk));
                }
                assert_eq!(v.mismatches(), 0);
            })
        });
        g.bench_function(format!("{label}/crc32"), |b| {
            b.iter(|| {
                let mut h = crc32fast::Hasher::new();
                for chunk in keyed.chunks(4096) {
                    h.update(black_box(chunk));
                }
                h.finalize()
            })
        });
    }
    g.finish();
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

criterion_group!(benches, validator, keyed, cmsg_parse, tokens, receive_loop);
criterion_main!(benches);
