//! The detection matrix (docs/validation.md): driver faults against the periodic `-v 7` and
//! `-v 256` patterns, the keyed `--seed` stream (flow 0 of a two-flow run, so another flow's
//! bytes can be named) and CRC-32, each over many random placements, measured through the whole
//! devmem receive loop (`ncdevmem::rx::receive_logged`) on the scripted socket over a
//! `Vec`-backed dma-buf.
//!
//! The dma-buf holds the stream back to back (frag `i` of a run at dma-buf offset `i · size`),
//! as a driver that packs payload into its niovs leaves it; a fault changes what one frag's
//! region holds or what its cmsg says. Every run draws the frag size, the faulty frag and the
//! fault's parameters from a fixed-seed RNG, so the table is the same on every machine.
//!
//! Asserted: `--seed` detects every fault in every run and its diagnosis names the fault
//! (another flow's bytes: misdelivered, from flow 1);
//! CRC-32 (the receiver's without validation, which hashes every byte, against the sender's)
//! detects every fault; a bit flip is caught by
//! every stream. The periodic rates are printed, not asserted (they are what the table shows).
//! Print the table with `cargo test --test validation_matrix -- --nocapture`.

use std::sync::atomic::AtomicI32;
use std::time::Duration;

use ncdevmem::rx::testing::{Piece, ScriptedSocket, Step, VecMemory};
use ncdevmem::rx::{receive_logged, RxConfig};
use ncdevmem::validate::{Pattern, StreamCrc32, StreamSpec, DUPLICATE_WINDOW};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const ID: u32 = 3;
/// Frags per run.
const FRAGS: usize = 100;
/// Random placements per fault and frag-size regime.
const RUNS: usize = 100;

/// What a driver does wrong to one frag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The frag's payload is not written: its region holds the stream of `back` frags
    /// earlier (the niov's previous use).
    Stale { back: usize },
    /// Frag `j` and `j + 1` delivered in each other's place.
    Swap,
    /// Frag `j`'s payload delivered again as frag `j + 1`.
    Duplicate,
    /// Frag `j` never delivered.
    Drop,
    /// Frag `j`'s cmsg offset `by` bytes late (it shows the stream from there on).
    Shift { by: u64 },
    /// One bit of frag `j` flipped.
    BitFlip { byte: usize, bit: u8 },
    /// Frag `j`'s region holds the bytes of the run's other flow (flow 1) from its stream
    /// offset `from`: a frag delivered to the wrong socket. Under `-v N` every flow carries the
    /// same pattern.
    OtherFlow { from: u64 },
}

impl Fault {
    /// The row name in the table.
    fn row(self) -> String {
        match self {
            Fault::Stale { .. } => {
                "stale buffer (the niov's contents from 33–64 frags earlier)".into()
            }
            Fault::Swap => "two consecutive frags swapped".into(),
            Fault::Duplicate => "a frag delivered twice (in the next one's place)".into(),
            Fault::Drop => "a frag dropped".into(),
            Fault::Shift { by: 1 } => "a frag's offset shifted by 1 byte".into(),
            Fault::Shift { by } => format!("a frag's offset shifted by {by} bytes"),
            Fault::BitFlip { .. } => "one bit flipped".into(),
            Fault::OtherFlow { .. } => "another flow's frag in its place (misdelivered)".into(),
        }
    }

    /// The kind the keyed diagnosis must name.
    fn keyed_kind(self, frag: usize) -> &'static str {
        match self {
            Fault::Stale { .. } => "stale",
            Fault::Swap | Fault::Drop => "reordered",
            Fault::Duplicate => "duplicate",
            Fault::Shift { by } if by < frag as u64 => "shifted",
            Fault::Shift { .. } => "reordered",
            Fault::BitFlip { .. } => "corrupt",
            Fault::OtherFlow { .. } => "misdelivered",
        }
    }
}

/// One receive of `FRAGS` frags of `size` bytes of `stream` with `fault` at frag `j`: whether
/// the validator failed the run, the first diagnosis line, and whether the CRC-32 the receiver
/// reports without validation differs from the sender's.
struct Outcome {
    validator_caught: bool,
    diagnosis: String,
    crc_caught: bool,
}

fn receive(stream: StreamSpec, size: usize, j: usize, fault: Fault) -> Outcome {
    let total = FRAGS * size;
    let pattern = Pattern::from_spec(stream).unwrap();
    // One frag more than the stream: a shifted frag reads on into it.
    let mut sent = vec![0u8; total + size];
    pattern.fill(&mut sent, 0);
    let sent_crc = crc32fast::hash(&sent[..total]);
    let mut mem = VecMemory::from_vec(sent.clone());
    let region = |i: usize| i * size..(i + 1) * size;
    let mut offsets: Vec<u64> = (0..FRAGS).map(|i| (i * size) as u64).collect();
    match fault {
        Fault::Stale { back } => {
            let old = sent[region(j - back)].to_vec();
            mem.write((j * size) as u64, &old);
        }
        Fault::Swap => offsets.swap(j, j + 1),
        Fault::Duplicate => offsets[j + 1] = offsets[j],
        Fault::Drop => {
            offsets.remove(j);
        }
        Fault::Shift { by } => offsets[j] += by,
        Fault::BitFlip { byte, bit } => {
            let at = j * size + byte;
            let flipped = [sent[at] ^ (1 << bit)];
            mem.write(at as u64, &flipped);
        }
        Fault::OtherFlow { from } => {
            let other = Pattern::from_spec(stream.for_flow(1, 2).unwrap()).unwrap();
            let mut bytes = vec![0u8; size];
            other.fill(&mut bytes, from);
            mem.write((j * size) as u64, &bytes);
        }
    }
    let pieces: Vec<Piece> = offsets
        .iter()
        .map(|&frag_offset| Piece::Dmabuf {
            frag_offset,
            size: size as u32,
            dmabuf_id: ID,
            token: None,
        })
        .collect();
    let run = |validate: Option<StreamSpec>, log: &mut Vec<u8>| {
        let mut sock = ScriptedSocket::new(vec![Step::Data(pieces.clone()), Step::Eof]);
        let cfg = RxConfig {
            validate,
            poll_tick: Duration::from_millis(1),
            ..RxConfig::devmem(ID, sent.len().next_power_of_two() as u32)
        };
        receive_logged(
            &mut sock,
            Some(&mem),
            &cfg,
            &AtomicI32::new(0),
            &mut std::io::sink(),
            log,
        )
    };
    let mut log = Vec::new();
    let (_, result) = run(Some(stream), &mut log);
    let log = String::from_utf8_lossy(&log);
    // The CRC-32 column: the receiver without validation (the payload to its output), which
    // hashes every byte (a validated keyed stream's checked bytes are not hashed).
    let (plain, _) = run(None, &mut Vec::new());
    Outcome {
        validator_caught: result.is_err(),
        diagnosis: log
            .lines()
            .find_map(|l| l.strip_prefix("validation: "))
            .unwrap_or_default()
            .to_string(),
        crc_caught: plain.crc32 != StreamCrc32::of_all(sent_crc) || plain.bytes != total as u64,
    }
}

/// Draws a fault of the row's kind (its parameters random) for a frag of `size` bytes.
fn draw(rng: &mut StdRng, row: usize, size: usize) -> Fault {
    match row {
        0 => Fault::Stale {
            // From the last DUPLICATE_WINDOW frags a stale buffer shows what a duplicate
            // shows, and the diagnosis calls it that.
            back: rng.random_range(DUPLICATE_WINDOW + 1..=64),
        },
        1 => Fault::Swap,
        2 => Fault::Duplicate,
        3 => Fault::Drop,
        4 => Fault::Shift { by: 1 },
        5 => Fault::Shift { by: 7 },
        6 => Fault::Shift { by: 8 },
        7 => Fault::Shift { by: 4096 },
        8 => Fault::BitFlip {
            byte: rng.random_range(0..size),
            bit: rng.random_range(0..8),
        },
        // The other flow at a frame of its own, anywhere in the run.
        _ => Fault::OtherFlow {
            from: (rng.random_range(0..FRAGS) * size) as u64,
        },
    }
}

const ROWS: usize = 10;

/// The matrix for one frag-size regime: per row, detections out of [`RUNS`] for `-v 7`,
/// `-v 256`, `--seed` and CRC-32.
fn matrix(rng: &mut StdRng, sizes: impl Fn(&mut StdRng) -> usize) -> Vec<(String, [usize; 4])> {
    let mut rows = Vec::new();
    for row in 0..ROWS {
        let mut caught = [0usize; 4];
        let mut name = String::new();
        for _ in 0..RUNS {
            let size = sizes(rng);
            let fault = draw(rng, row, size);
            name = fault.row();
            // Room for a stale source 64 frags back and a swap partner after.
            let j = rng.random_range(64..FRAGS - 2);
            let seed: u64 = rng.random();
            for (col, stream) in [
                StreamSpec::Periodic(7),
                StreamSpec::Periodic(256),
                StreamSpec::keyed(seed).for_flow(0, 2).unwrap(),
            ]
            .into_iter()
            .enumerate()
            {
                let o = receive(stream, size, j, fault);
                caught[col] += usize::from(o.validator_caught);
                if let StreamSpec::Keyed(_) = stream {
                    assert!(
                        o.validator_caught,
                        "--seed {seed} missed {fault:?} at frag {j} of {size} bytes"
                    );
                    let kind = fault.keyed_kind(size);
                    assert!(
                        o.diagnosis.contains(&format!("({kind}"))
                            || o.diagnosis.contains(&format!(": {kind}")),
                        "{fault:?} at frag {j} of {size} bytes: diagnosis {:?} does not say {kind}",
                        o.diagnosis
                    );
                    if let Fault::OtherFlow { from } = fault {
                        // From the frag's start, unless its first bytes happen to be equal.
                        let names = format!("holds bytes of flow 1 at stream offset {from} (");
                        let later = o.diagnosis.contains(", from stream offset ")
                            && o.diagnosis
                                .contains("holds bytes of flow 1 at stream offset ");
                        assert!(o.diagnosis.contains(&names) || later, "{:?}", o.diagnosis);
                    }
                    caught[3] += usize::from(o.crc_caught);
                    assert!(o.crc_caught, "CRC-32 missed {fault:?}");
                }
                if let Fault::BitFlip { .. } = fault {
                    assert!(o.validator_caught, "{stream} missed a bit flip");
                }
            }
        }
        rows.push((name, caught));
    }
    rows
}

fn print(title: &str, rows: &[(String, [usize; 4])]) {
    println!("\n{title} ({RUNS} random placements per row)\n");
    println!("| fault | `-v 7` | `-v 256` | `--seed` | CRC-32 |");
    println!("|---|---|---|---|---|");
    for (name, c) in rows {
        let pct = |n: usize| format!("{}%", n * 100 / RUNS);
        println!(
            "| {name} | {} | {} | {} | {} |",
            pct(c[0]),
            pct(c[1]),
            pct(c[2]),
            pct(c[3])
        );
    }
}

#[test]
fn detection_matrix() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    // Frags of any size, as linear and MSS-sized frags come.
    let any = matrix(&mut rng, |r| r.random_range(1000..=4096));
    print("Frag sizes drawn from 1000..=4096 bytes", &any);
    // Niov-sized frags, the common devmem case.
    let niov = matrix(&mut rng, |_| 4096);
    print("4 KiB frags (one niov each)", &niov);
    // What the periodic patterns must show: blind to data moved by a multiple of the period.
    let row = |rows: &[(String, [usize; 4])], i: usize| rows[i].1;
    assert_eq!(
        row(&niov, 1)[1],
        0,
        "-v 256 cannot see two 4 KiB frags swapped"
    );
    assert_eq!(row(&niov, 5)[0], 0, "-v 7 cannot see a 7-byte shift");
    assert_eq!(row(&niov, 7)[1], 0, "-v 256 cannot see a 4096-byte shift");
    assert_eq!(
        row(&niov, 9)[1],
        0,
        "-v 256 cannot see another flow's 4 KiB frag (every flow carries the same pattern)"
    );
    assert_eq!(
        row(&any, 8),
        [RUNS; 4],
        "a bit flip is caught by every stream"
    );
}
