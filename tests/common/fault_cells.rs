//! The cells of the fault matrix, shared by its host rows (`tests/fault_matrix.rs`) and its VM
//! rows (`examples/vm_guest/verdict_matrix.rs`): the faults (the columns), the shape of a
//! receive path (a row), what each connection sends for a cell, and how a cell's end is
//! judged. Which receiver runs, and where, is each side's own.

use std::time::Duration;

use crate::fault_sender::{Conn, Fault, Length, Source};

/// The seed every keyed cell's receiver validates.
pub const SEED: u64 = 42;

/// The faults of the matrix's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Every flow's own stream, `--seed`.
    Clean,
    /// Every flow's own stream, `-v 7`.
    CleanPeriod,
    /// One byte of the last flow inverted.
    FlippedByte,
    /// Every flow sent with another seed.
    WrongSeed,
    /// `-v 7` receiver, the sender's period 5.
    WrongPeriod,
    /// 64 KiB of another flow's stream spliced into the last flow (one flow: flow 1's bytes).
    OtherFlow,
    /// Flow 0's stream on no connection (its connection sends 5 bytes of flow 1; one flow:
    /// nothing).
    MissingFlow,
    /// Flow 0's stream on two connections, none for flow 1.
    DuplicateFlow,
    /// The last connection sends 5 bytes (of its flow): too few to name a flow.
    NoFlow,
    /// The last flow stops 1000 bytes short of `--expect-bytes` (timed with `--warmup`: every
    /// flow closes within the warm-up).
    Truncated,
    /// The last flow sends nothing and stays open.
    Silent,
    /// The last flow is reset after a quarter of a fixed-size flow's bytes.
    Reset,
}

/// Every column, in order.
pub const CASES: [Case; 12] = [
    Case::Clean,
    Case::CleanPeriod,
    Case::FlippedByte,
    Case::WrongSeed,
    Case::WrongPeriod,
    Case::OtherFlow,
    Case::MissingFlow,
    Case::DuplicateFlow,
    Case::NoFlow,
    Case::Truncated,
    Case::Silent,
    Case::Reset,
];

impl Case {
    /// The column's heading.
    pub fn name(self) -> &'static str {
        match self {
            Case::Clean => "clean",
            Case::CleanPeriod => "clean -v",
            Case::FlippedByte => "flip",
            Case::WrongSeed => "seed",
            Case::WrongPeriod => "-v period",
            Case::OtherFlow => "xflow",
            Case::MissingFlow => "missing",
            Case::DuplicateFlow => "dup",
            Case::NoFlow => "<8 B",
            Case::Truncated => "short",
            Case::Silent => "silent",
            Case::Reset => "reset",
        }
    }
}

/// A row of the matrix: the shape of the receive.
#[derive(Debug, Clone, Copy)]
pub struct Path {
    /// The row's heading.
    pub name: &'static str,
    /// `--flows`.
    pub flows: u32,
    /// `--duration` (and the senders send until the receiver closes).
    pub timed: bool,
    /// `--warmup` (timed only).
    pub warmup: bool,
    /// A sweep run (`--peer`, one run of one point).
    pub sweep: bool,
    /// Bytes per flow of a fixed-size cell.
    pub flow_bytes: u64,
}

impl Path {
    /// Where the in-stream faults sit: a quarter into a fixed-size flow, so inside a timed
    /// run's warm-up too.
    pub fn fault_at(&self) -> u64 {
        self.flow_bytes / 4 + 3
    }
}

/// What a cell must end with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Exit 0, verdict `pass`.
    Pass,
    /// Exit 1, verdict `fail`, and (several flows) every one of these flows named; none
    /// listed: some flow named (every flow is wrong, and which one fails first is a race).
    Fail(Vec<u32>),
}

/// One cell: the receiver's stream option, `--expect-bytes`, and what each connection sends.
pub struct Cell {
    /// The receiver validates `-v 7` (else `--seed` [`SEED`]).
    pub period: bool,
    /// `--expect-bytes`.
    pub expect_bytes: Option<u64>,
    /// What each connection sends, in connect order.
    pub conns: Vec<Conn>,
    /// How the cell must end.
    pub expect: Expect,
    /// The cell's fault must reach the receiver within the run: a fault cell, except a silent
    /// flow's (it fails for what never comes). A timed run of such a cell needs a `--duration`
    /// long enough for the fault's bytes to be sent on a loaded machine; a clean cell or a
    /// silent flow's needs no byte by a time.
    pub fault_in_run: bool,
}

fn keyed(flow: u32) -> Source {
    Source::Keyed { seed: SEED, flow }
}

/// The cell of `case` on `path`, or `None` where the fault does not apply (one flow cannot
/// carry a duplicate or a connection of no flow; a timed run has no byte count to fall short
/// of, but with `--warmup` its flows can all end within the warm-up: "short" is that cell).
pub fn cell(path: &Path, case: Case) -> Option<Cell> {
    let n = path.flows;
    let last = n - 1;
    let length = match path.timed {
        true => Length::UntilClosed,
        false => Length::Bytes(path.flow_bytes),
    };
    let own = |k: u32| Conn::clean(keyed(k), length);
    let all = || (0..n).map(own).collect::<Vec<_>>();
    let with_last = |f: Fault| {
        let mut c = all();
        c[last as usize] = own(last).with(f);
        c
    };
    let fail_last = Expect::Fail(vec![last]);
    let (period, expect_bytes, conns, expect) = match case {
        Case::Clean => (false, None, all(), Expect::Pass),
        Case::CleanPeriod => (
            true,
            None,
            (0..n)
                .map(|_| Conn::clean(Source::Period(7), length))
                .collect(),
            Expect::Pass,
        ),
        Case::FlippedByte => (
            false,
            None,
            with_last(Fault::FlipAt(path.fault_at())),
            fail_last,
        ),
        Case::WrongSeed => (
            false,
            None,
            (0..n)
                .map(|k| {
                    Conn::clean(
                        Source::Keyed {
                            seed: SEED + 1,
                            flow: k,
                        },
                        length,
                    )
                })
                .collect(),
            Expect::Fail(Vec::new()),
        ),
        Case::WrongPeriod => (
            true,
            None,
            (0..n)
                .map(|_| Conn::clean(Source::Period(5), length))
                .collect(),
            Expect::Fail(Vec::new()),
        ),
        Case::OtherFlow => {
            let from = if n == 1 { keyed(1) } else { keyed(0) };
            let splice = Fault::Splice {
                at: path.fault_at(),
                len: 64 << 10,
                from,
            };
            (false, None, with_last(splice), fail_last)
        }
        Case::MissingFlow if n == 1 => (
            false,
            None,
            vec![Conn::clean(keyed(0), Length::Bytes(0))],
            Expect::Fail(vec![0]),
        ),
        Case::MissingFlow => {
            // Flow 0's connection is a short piece of flow 1's stream: flow 0 never came.
            let mut c: Vec<Conn> = (1..n).map(own).collect();
            c.push(Conn::clean(keyed(1), Length::Bytes(5)));
            (false, None, c, Expect::Fail(vec![0]))
        }
        Case::DuplicateFlow if n == 1 => return None,
        Case::DuplicateFlow => {
            let mut c = all();
            c[1] = own(0);
            (false, None, c, Expect::Fail(vec![0, 1]))
        }
        Case::NoFlow if n == 1 => return None,
        Case::NoFlow => {
            let mut c = all();
            c[last as usize] = Conn::clean(keyed(last), Length::Bytes(5));
            (false, None, c, fail_last)
        }
        Case::Truncated if path.timed && path.warmup => {
            // Every flow closes (8 KiB in) within the warm-up: the run measured nothing.
            let c = (0..n)
                .map(|k| Conn::clean(keyed(k), Length::Bytes(8 << 10)))
                .collect();
            (false, None, c, Expect::Fail(Vec::new()))
        }
        Case::Truncated if path.timed => return None,
        Case::Truncated => {
            let mut c = all();
            c[last as usize] = Conn::clean(keyed(last), Length::Bytes(path.flow_bytes - 1000));
            (false, Some(path.flow_bytes), c, fail_last)
        }
        Case::Silent => (false, None, with_last(Fault::Silent), fail_last),
        Case::Reset => (
            false,
            None,
            with_last(Fault::ResetAfter(path.flow_bytes / 4)),
            fail_last,
        ),
    };
    let fault_in_run = matches!(expect, Expect::Fail(_)) && case != Case::Silent;
    Some(Cell {
        period,
        expect_bytes,
        conns,
        expect,
        fault_in_run,
    })
}

/// The receiver's options for a cell of `path` that validate as `cell` says: the stream,
/// `--flows`, `--duration` (`timed`), `--warmup`, `--expect-bytes`.
pub fn receiver_args(path: &Path, cell: &Cell, duration: Duration) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    match cell.period {
        true => args.extend(["-v".into(), "7".into()]),
        false => args.extend(["--seed".into(), SEED.to_string()]),
    }
    if path.flows > 1 {
        args.extend(["--flows".into(), path.flows.to_string()]);
    }
    if path.timed {
        args.extend(["--duration".into(), format!("{}", duration.as_secs_f64())]);
    }
    if path.warmup {
        args.extend([
            "--warmup".into(),
            format!("{}", duration.as_secs_f64() / 3.0),
        ]);
    }
    if let Some(b) = cell.expect_bytes {
        args.extend(["--expect-bytes".into(), b.to_string()]);
    }
    args
}

/// How one cell ended.
pub struct Ran {
    /// The receiver's exit code.
    pub code: Option<i32>,
    /// Its `--json` object.
    pub json: Option<serde_json::Value>,
    /// Its stderr.
    pub stderr: String,
}

impl Ran {
    /// `None` when the cell ended as `expect` says, else what was wrong.
    pub fn judge(&self, expect: &Expect, path: &Path) -> Option<String> {
        let verdict = self.json.as_ref().map(|j| j["verdict"].clone());
        match expect {
            Expect::Pass => (self.code != Some(0) || verdict != Some("pass".into())).then(|| {
                format!(
                    "should pass: exit {:?}, verdict {verdict:?}: {}",
                    self.code,
                    last_lines(&self.stderr)
                )
            }),
            Expect::Fail(flows) => {
                if self.code == Some(0) {
                    return Some(format!(
                        "PASSED BAD DATA (exit 0, verdict {verdict:?}): {}",
                        last_lines(&self.stderr)
                    ));
                }
                if self.code != Some(1) || verdict != Some("fail".into()) {
                    return Some(format!(
                        "should fail with exit 1: exit {:?}, verdict {verdict:?}: {}",
                        self.code,
                        last_lines(&self.stderr)
                    ));
                }
                let error = self.error_text(path);
                if path.flows > 1 && flows.is_empty() && !error.contains("flow ") {
                    return Some(format!(
                        "failed without naming a flow: error {error:?}: {}",
                        last_lines(&self.stderr)
                    ));
                }
                let unnamed: Vec<u32> = flows
                    .iter()
                    .copied()
                    .filter(|k| path.flows > 1 && !error.contains(&format!("flow {k}")))
                    .collect();
                (!unnamed.is_empty()).then(|| {
                    format!(
                        "failed without naming flow(s) {unnamed:?}: error {error:?}: {}",
                        last_lines(&self.stderr)
                    )
                })
            }
        }
    }

    /// The run's error as the JSON gives it (a sweep: its one run's).
    pub fn error_text(&self, path: &Path) -> String {
        let Some(j) = &self.json else {
            return String::new();
        };
        let e = match path.sweep {
            true => &j["runs"][0]["error"],
            false => &j["error"],
        };
        e.as_str().unwrap_or_default().to_string()
    }
}

/// The last lines of `s`, joined, for a failure's message.
pub fn last_lines(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

/// The matrix's grid: a heading line, then one line per row (`cells` in [`CASES`] order:
/// `pass`, `FAIL` (the fault failed the run, as it must), `n/a`, or `WRONG`).
pub fn grid(rows: &[(&str, Vec<String>)]) -> String {
    let mut out = format!("{:<30}", "path");
    for c in CASES {
        out.push_str(&format!("{:>10}", c.name()));
    }
    out.push('\n');
    for (name, cells) in rows {
        out.push_str(&format!("{name:<30}"));
        for c in cells {
            out.push_str(&format!("{c:>10}"));
        }
        out.push('\n');
    }
    out
}

/// The grid cell of a cell that ended as it must (`None` from [`Ran::judge`]).
pub fn mark(expect: &Expect) -> &'static str {
    match expect {
        Expect::Pass => "pass",
        Expect::Fail(_) => "FAIL",
    }
}
