//! The validator against a plain read of the same bytes, and the sender's fill against a plain
//! write (memset), as ratios measured side by side: every case of a size runs once per round,
//! round after round, and each ratio is taken within a round, so a busy neighbour slows both
//! sides of it alike. Run for every instruction-set build of the validator the CPU has
//! (`validate::force_isa`), the plain read compiled for the same instruction set.
//!
//! Two sizes: one that fits the L2 cache (a quarter of cpu0's L2 as sysfs gives it, the size
//! printed with it) and 1 GiB (from memory). Buffers are page-aligned, as dma-buf frags, zcrx
//! buffers and the receive buffer are. A case's figure in a round is the best of a few
//! back-to-back timings (a timing the scheduler cut into is slow, never fast). Prints Markdown
//! tables: GiB/s min / median / max and the ratio min / median / max over the rounds, with the
//! load average before and after.
//! Figures and how to read them: docs/benchmarks.md. `make bench` runs it;
//! `cargo bench --bench ratios -- --quick` runs fewer rounds; `-- TEXT` only the cases whose
//! name holds TEXT (with the cases they are compared with); `-- --in-l2` only the size in L2.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::hint::black_box;
use std::time::Instant;

use ncdevmem::validate::{force_isa, Isa, Pattern, Validator};

const KIB: usize = 1 << 10;
const GIB: usize = 1 << 30;

/// A zeroed, page-aligned byte buffer.
struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: `len` > 0 (every caller asks for at least a page).
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for {len} bytes");
        Aligned { ptr, layout }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `layout.size()` initialised (zeroed) bytes for self's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A plain read: the 64-bit little-endian sum of every whole word (what the compiler makes of
/// it: one vector add per vector of data).
#[inline(always)]
fn sum_body(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    for w in data.chunks_exact(8) {
        acc = acc.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2")]
unsafe fn sum_avx512(data: &[u8]) -> u64 {
    sum_body(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(data: &[u8]) -> u64 {
    sum_body(data)
}

#[inline(never)]
fn sum_baseline(data: &[u8]) -> u64 {
    sum_body(data)
}

/// The plain read in `isa`'s build.
fn plain_read(isa: Isa, data: &[u8]) -> u64 {
    assert!(isa.supported());
    match isa {
        // SAFETY: the CPU has the features (asserted above).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { sum_avx512(data) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { sum_avx2(data) },
        _ => sum_baseline(data),
    }
}

/// cpu0's L2 size in bytes, from sysfs (`None` when it does not say).
fn l2_size() -> Option<usize> {
    for i in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(size)) = (read("level"), read("size")) else {
            continue;
        };
        if level.trim() != "2" || read("type").is_some_and(|t| t.trim() == "Instruction") {
            continue;
        }
        let size = size.trim();
        let (num, mult) = match size.strip_suffix('K') {
            Some(n) => (n, KIB),
            None => match size.strip_suffix('M') {
                Some(n) => (n, KIB * KIB),
                None => (size, 1),
            },
        };
        return num.parse::<usize>().ok().map(|n| n * mult);
    }
    None
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One measured case: what it runs over `bytes` bytes, and the case its ratio is taken
/// against (`None`: a reference).
struct Case<'a> {
    name: String,
    against: Option<String>,
    run: Box<dyn FnMut() + 'a>,
    rates: Vec<f64>,
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[0], s[s.len() / 2], s[s.len() - 1])
}

/// Runs `cases` `rounds` times, each case once per round: the best of `tries` back-to-back
/// timings of `passes` passes over `bytes` bytes (on a shared machine a timing the scheduler
/// cut into is slow, never fast); prints the table.
fn measure(
    title: &str,
    cases: &mut [Case<'_>],
    bytes: usize,
    passes: usize,
    tries: usize,
    rounds: usize,
) {
    let before = loadavg();
    for c in cases.iter_mut() {
        (c.run)(); // warm-up: page faults, the first dispatch
    }
    for _ in 0..rounds {
        for c in cases.iter_mut() {
            let mut best = f64::INFINITY;
            for _ in 0..tries {
                let t = Instant::now();
                for _ in 0..passes {
                    (c.run)();
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            c.rates.push((bytes * passes) as f64 / best / GIB as f64);
        }
    }
    let after = loadavg();
    println!("\n### {title}\n");
    println!(
        "{rounds} interleaved rounds, each figure the best of {tries} timings of {} MiB; load \
         average before {before}, after {after}\n",
        (bytes * passes) >> 20
    );
    println!("| case | GiB/s min / median / max | ratio min / median / max | against |");
    println!("|---|---|---|---|");
    for c in cases.iter() {
        let (lo, med, hi) = stats(&c.rates);
        let base = c
            .against
            .as_ref()
            .and_then(|name| cases.iter().find(|b| &b.name == name));
        let (ratio, against) = match base {
            Some(base) => {
                let name = &base.name;
                let r: Vec<f64> = c
                    .rates
                    .iter()
                    .zip(&base.rates)
                    .map(|(a, b)| a / b)
                    .collect();
                let (a, b, d) = stats(&r);
                (format!("{a:.2} / **{b:.2}** / {d:.2}"), name.as_str())
            }
            None => ("—".to_string(), "—"),
        };
        println!(
            "| {} | {lo:.1} / {med:.1} / {hi:.1} | {ratio} | {against} |",
            c.name
        );
    }
}

/// One Ethernet frame's TCP payload at MTU 1500 (1500 − 20 − 20 − 12 bytes of timestamps):
/// what a devmem receiver gets per frag without hardware GRO.
const FRAME_PAYLOAD: usize = 1448;

/// `1448-byte`, `4 KiB`: how a case names its piece size.
fn piece_name(piece: usize) -> String {
    if piece % KIB == 0 {
        format!("{} KiB", piece / KIB)
    } else {
        format!("{piece}-byte")
    }
}

/// The cases of one size: per build, a plain read in one pass and in 1448-byte, 4 KiB and
/// 64 KiB pieces (a call each), `-v 7` and the keyed check (`--seed`) in the same pieces, each
/// against the plain read in its pieces; the sender's fills against memset when `fills`.
fn cases_for<'a>(
    keyed: &'a Aligned,
    periodic: &'a Aligned,
    out: &'a std::cell::RefCell<Aligned>,
    fills: bool,
) -> Vec<Case<'a>> {
    let mut cases = Vec::new();
    let case = |name: String, against: Option<String>, run: Box<dyn FnMut() + 'a>| Case {
        name,
        against,
        run,
        rates: Vec::new(),
    };
    let seed_v = Validator::with_pattern(Pattern::keyed(42));
    let v7 = Validator::new(7).expect("-v 7");
    let seed_p = Pattern::keyed(42);
    if fills {
        cases.push(case(
            "memset (glibc)".into(),
            None,
            Box::new(move || {
                let mut o = out.borrow_mut();
                for piece in o.bytes_mut().chunks_mut(256 * KIB) {
                    black_box(piece).fill(0x5a);
                }
            }),
        ));
    }
    for &isa in Isa::ALL.iter().filter(|i| i.supported()) {
        let whole = format!("{isa}: plain read (u64 sum), one pass");
        cases.push(case(
            whole.clone(),
            None,
            Box::new(move || {
                black_box(plain_read(isa, black_box(keyed.bytes())));
            }),
        ));
        let read_in = |piece: usize| format!("{isa}: plain read, {} pieces", piece_name(piece));
        // A validator (`--seed`, `-v 7`) checking its stream in pieces, against the plain
        // read in those pieces, one validator per case as a receiver has one per connection.
        // The periodic one runs on across passes: its bytes are a whole number of periods. The
        // keyed stream never repeats: each pass starts the validator again at stream offset 0
        // (`rewind`, which keeps its ring of recent pieces where a clone's would grow again).
        let check_in = |what: &str, v: &Validator, data: &'a [u8], piece: usize, runs_on: bool| {
            let mut v = v.clone();
            case(
                format!("{isa}: `{what}` check, {} pieces", piece_name(piece)),
                Some(read_in(piece)),
                Box::new(move || {
                    force_isa(Some(isa)).expect("supported");
                    if !runs_on {
                        v.rewind();
                    }
                    for p in data.chunks(piece) {
                        v.check(black_box(p));
                    }
                    assert_eq!(v.mismatches(), 0);
                }),
            )
        };
        for piece in [FRAME_PAYLOAD, 4 * KIB, 64 * KIB] {
            cases.push(case(
                read_in(piece),
                Some(whole.clone()),
                Box::new(move || {
                    for p in keyed.bytes().chunks(piece) {
                        black_box(plain_read(isa, black_box(p)));
                    }
                }),
            ));
            cases.push(check_in("--seed", &seed_v, keyed.bytes(), piece, false));
            let whole_periods = &periodic.bytes()[..periodic.bytes().len() / 7 * 7];
            cases.push(check_in("-v 7", &v7, whole_periods, piece, true));
        }
        if isa == Isa::detected() {
            // crc32fast picks its own build (PCLMULQDQ here), whatever the validator's.
            cases.push(case(
                "CRC-32 (crc32fast), 64 KiB pieces".into(),
                Some(read_in(64 * KIB)),
                Box::new(move || {
                    let mut h = crc32fast::Hasher::new();
                    for p in keyed.bytes().chunks(64 * KIB) {
                        h.update(black_box(p));
                    }
                    black_box(h.finalize());
                }),
            ));
        }
        if fills {
            let p = seed_p.clone();
            cases.push(case(
                format!("{isa}: `--seed` fill, 256 KiB pieces (the sender's writes)"),
                Some("memset (glibc)".into()),
                Box::new(move || {
                    force_isa(Some(isa)).expect("supported");
                    let mut o = out.borrow_mut();
                    for (i, piece) in o.bytes_mut().chunks_mut(256 * KIB).enumerate() {
                        p.fill(black_box(piece), (i * 256 * KIB) as u64);
                    }
                }),
            ));
        }
    }
    cases
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it (and in a
    // debug build): then one round over a small buffer, as a smoke test of every case.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = !benching || std::env::args().any(|a| a == "--quick");
    // `cargo bench --bench ratios -- TEXT`: only the cases whose name holds TEXT.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let l2 = l2_size();
    let in_l2 = l2.map_or(256 * KIB, |l| (l / 4).clamp(64 * KIB, 4 << 20));
    println!(
        "## Validator and fill ratios (benches/ratios.rs)\n\nL2 of cpu0 (sysfs): {}; \
         detected build: {}; builds this CPU runs: {}",
        l2.map_or("unknown (assumed 1 MiB)".into(), |l| format!(
            "{} KiB",
            l / KIB
        )),
        Isa::detected(),
        Isa::ALL
            .iter()
            .filter(|i| i.supported())
            .map(|i| i.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let sizes = [
        (in_l2, format!("{} KiB: in L2", in_l2 / KIB), true),
        (GIB, "1 GiB: from memory".to_string(), false),
    ];
    let in_l2_only = !benching || std::env::args().any(|a| a == "--in-l2");
    for (size, label, fills) in sizes.into_iter().take(if in_l2_only { 1 } else { 2 }) {
        let mut keyed = Aligned::new(size);
        Pattern::keyed(42).fill(keyed.bytes_mut(), 0);
        let mut periodic = Aligned::new(size);
        Pattern::new(7).expect("-v 7").fill(periodic.bytes_mut(), 0);
        let out = std::cell::RefCell::new(Aligned::new(size.min(4 << 20)));
        let mut cases = cases_for(&keyed, &periodic, &out, fills);
        if let Some(f) = &filter {
            // The cases whose name holds the filter, and the references they are taken against.
            let keep: Vec<bool> = cases
                .iter()
                .map(|c| {
                    c.name.contains(f.as_str())
                        || cases.iter().any(|d| {
                            d.name.contains(f.as_str()) && d.against.as_ref() == Some(&c.name)
                        })
                })
                .collect();
            let mut k = keep.into_iter();
            cases.retain(|_| k.next().unwrap_or(false));
        }
        // About 16 MiB a timing in L2 (about 0.2 ms), one pass from memory.
        let passes = if benching { (16 << 20) / size } else { 1 };
        let (tries, rounds) = match (quick, size == GIB) {
            _ if !benching => (1, 1),
            (true, _) => (3, 3),
            (false, true) => (3, 7),
            (false, false) => (9, 21),
        };
        measure(&label, &mut cases, size, passes.max(1), tries, rounds);
    }
    force_isa(None).expect("the detected build");
}
