//! The one verdict of a run: from its facts — per connection what stream it carried, how many
//! bytes it brought and validated, its mismatches and its own failure; per run how it ended,
//! the NIC undo and `--verify-restore` — one function decides pass, fail or skip. Every path
//! that reports a result goes through it: devmem, plain and zcrx receives, one flow and
//! several, fixed-size and timed, alone, as a sweep run or driven by a peer
//! ([`crate::run_report::RunReport::finish`] calls [`decide`]; the receive engines call
//! [`judge_receive`] for their flow lines). Nothing here does I/O.
//!
//! A run passes when, and only when, every expected flow's stream was seen exactly once, no
//! byte mismatched, every validated flow carried data, no flow failed on its own, and nothing
//! failed in the undo. [`decide`] checks that invariant again, independently, whenever it is
//! about to say pass.
//!
//! **Flow identity.** With the keyed stream of several flows a connection's first 8 bytes name
//! its flow ([`crate::validate::identify_flow`]): a connection so named is reported as that
//! flow; connections that named none (fewer than 8 bytes, or bytes of no flow), and a second
//! connection naming a flow already taken, get the flow numbers left over, in accept order. A
//! flow whose stream no connection carried, or that two carried, fails by name, and that
//! failure comes before any other of the flow's. Without the keyed stream of several flows
//! (one flow, `-v N`, no validation) flow k is the k-th connection accepted.
//!
//! **Spread.** With `--require-spread` a run whose flows did not reach every bound queue
//! fails, after every flow passed: a bound queue whose `rx-bytes` (qstats) did not grow over
//! the measured interval, or without queue stats one no flow arrived on
//! ([`crate::figures::device::unreached_queues`]), was not reached; a run where neither tells
//! fails too (a requirement that cannot be checked is not met). Without the option the run
//! only says so ([`Spread`] is then no fact of the verdict).

use crate::error::{Error, Result};
use crate::stats::RxStats;
use crate::summary::sweep::PeerFigures;
use crate::validate::StreamSpec;

/// The stop flag's value when `--duration` is over (beside a signal number, and 0: go on).
pub(crate) const DURATION_OVER: i32 = -1;
/// The stop flag's value when another flow failed: the other flows stop; they did not fail.
pub(crate) const FLOW_FAILED: i32 = -2;

/// What a connection's first bytes said of the stream it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Keyed stream of several flows: its first 8 bytes were word 0 of flow `k`.
    Named(u32),
    /// Keyed stream of several flows: it sent fewer than 8 bytes, or 8 that are no flow's
    /// word 0.
    Unnamed,
    /// Flows are not told apart by their bytes (one flow, `-v N`, no validation): the
    /// connection is the flow of its accept order.
    ByOrder,
}

/// The facts of one connection of a receive, as its receive loop left them.
#[derive(Debug, Clone)]
pub(crate) struct ConnFacts {
    /// What its first bytes said.
    pub(crate) identity: Identity,
    /// Stream bytes received.
    pub(crate) bytes: u64,
    /// A validator checked its bytes (`-v N` or `--seed`).
    pub(crate) validated: bool,
    /// Bytes that differed from the stream.
    pub(crate) mismatches: u64,
    /// The validator's account of them (`validation failed (…): …`), when any differed.
    pub(crate) mismatch: Option<String>,
    /// Its receive's own failure (a kernel error, a reset, an idle timeout, a frag out of
    /// bounds); not a stop of the run's ([`Ended`]).
    pub(crate) error: Option<Error>,
    /// Devmem `-U 1`: the receive ended at ENODEV after the unbind, as it must.
    pub(crate) binding_gone: bool,
    /// What the kernel said of a connection that brought no byte (`TCP_INFO`, its NAPI
    /// instance), for the message.
    pub(crate) silence: Option<String>,
}

#[cfg(test)]
impl ConnFacts {
    /// A connection of `bytes` bytes that ended cleanly: nothing failed, nothing mismatched.
    pub(crate) fn clean(identity: Identity, bytes: u64, validated: bool) -> ConnFacts {
        ConnFacts {
            identity,
            bytes,
            validated,
            mismatches: 0,
            mismatch: None,
            error: None,
            binding_gone: false,
            silence: None,
        }
    }
}

impl ConnFacts {
    /// The facts of a connection whose receive left `stats` and ended with its own `result`
    /// (a stop of the run's is no failure of its own): its identity from the stream its
    /// validator settled on ([`RxStats::stream`], [`RxStats::stream_identified`]).
    pub(crate) fn of_receive(stats: &RxStats, result: &Result<()>) -> ConnFacts {
        let identity = match stats.stream {
            Some(StreamSpec::Keyed(k)) if k.flows() > 1 => match stats.stream_identified {
                true => Identity::Named(k.flow()),
                false => Identity::Unnamed,
            },
            _ => Identity::ByOrder,
        };
        ConnFacts {
            identity,
            bytes: stats.bytes,
            validated: stats.stream.is_some(),
            mismatches: stats.mismatches,
            mismatch: stats.validation.failure.clone(),
            error: match result {
                Err(e) if !is_stop(result) => Some(e.clone()),
                _ => None,
            },
            binding_gone: stats.binding_gone,
            silence: None,
        }
    }
}

/// How a receive ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The peers closed every flow (a fixed-size run, or a timed one the peers ended first).
    PeersClosed,
    /// `--duration` was over; the receiver closed the flows.
    Duration,
    /// A stop signal (its number) ended it.
    Signal(i32),
    /// A flow failed and the others were stopped.
    FlowFailed,
}

impl Ended {
    /// How a receive ended from its stop flag's last value (0: nobody stopped it).
    pub(crate) fn from_stop(stop: i32) -> Ended {
        match stop {
            0 => Ended::PeersClosed,
            DURATION_OVER => Ended::Duration,
            FLOW_FAILED => Ended::FlowFailed,
            sig => Ended::Signal(sig),
        }
    }

    /// The flows' ends were their own or the clock's: each flow's stream is whole, so each
    /// must have carried what it should. (A signal or another flow's failure cut them short.)
    fn clean(self) -> bool {
        matches!(self, Ended::PeersClosed | Ended::Duration)
    }
}

/// Whether a receive loop's `result` is a stop of the run's own (the duration, another flow's
/// failure, a signal) rather than a failure of the connection; `Ok` is neither.
pub(crate) fn is_stop(result: &Result<()>) -> bool {
    matches!(result, Err(Error::Interrupted(_)))
}

/// Which bound queues a receive's flows reached, for `--require-spread`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spread {
    /// The bound queues, those the flows did not reach, and how that is known (`qstats`: the
    /// queues' rx-bytes over the measured interval; `arrival`: the flows' arrival queues).
    Known {
        /// The bound queues, in the order they were bound.
        bound: Vec<u32>,
        /// Those not reached (empty: every one was).
        unreached: Vec<u32>,
        /// `qstats` or `arrival`.
        source: &'static str,
    },
    /// Nothing tells (no queue stats and no flow's arrival queue known): why.
    Unknown(String),
}

impl Spread {
    /// Why the flows are not known to have reached every bound queue (`None`: they are).
    fn shortfall(&self) -> Option<String> {
        match self {
            Spread::Known {
                bound,
                unreached,
                source,
            } if !unreached.is_empty() => Some(crate::figures::device::unreached_words(
                bound, unreached, source,
            )),
            Spread::Known { .. } => None,
            Spread::Unknown(why) => Some(format!(
                "which bound queues the flows reached is not known ({why})"
            )),
        }
    }
}

/// The facts of one receive: the flows it expected and what each accepted connection did.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveFacts {
    /// `--flows` (1 for a single-flow run).
    pub(crate) flows: u32,
    /// `--expect-bytes`: every flow must carry exactly this many bytes.
    pub(crate) expect_bytes: Option<u64>,
    /// How it ended.
    pub(crate) ended: Ended,
    /// The accepted connections, in accept order.
    pub(crate) conns: Vec<ConnFacts>,
    /// A sweep's run, `(its --duration, the interval its figures cover)` in seconds: its
    /// figures are a row of the table only when they cover the whole duration, so a run whose
    /// peers closed every flow before it was over fails. `None` for any other run.
    pub(crate) whole_duration: Option<(f64, f64)>,
    /// `--warmup`, in seconds, when the run measured nothing after it: the peers closed every
    /// flow before it was over (the measured interval never began), or no flow carried a byte
    /// after its mark (drained and closing as the warm-up ended). The figures would be empty.
    /// `None` otherwise.
    pub(crate) ended_in_warmup: Option<f64>,
    /// `--require-spread`: which bound queues the flows reached. `None` without the option.
    pub(crate) require_spread: Option<Spread>,
}

/// One flow's verdict.
#[derive(Debug, Clone)]
pub(crate) struct FlowVerdict {
    /// The connection reported as this flow (its index in accept order), if any.
    pub(crate) conn: Option<usize>,
    /// Why it failed, first the failure that decides (empty: it passed).
    pub(crate) failures: Vec<Error>,
}

impl FlowVerdict {
    /// Every failure, `; `-joined (`None` when the flow passed), for its line and its JSON.
    pub(crate) fn error_text(&self) -> Option<String> {
        (!self.failures.is_empty()).then(|| {
            self.failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// A receive's verdict: each flow's, in flow order, and the run's.
#[derive(Debug)]
pub(crate) struct ReceiveVerdict {
    /// Flow k's verdict at index k.
    pub(crate) flows: Vec<FlowVerdict>,
    /// The receive's result: `Ok`, the failures named by flow, or the stop signal.
    pub(crate) result: Result<()>,
}

impl ReceiveVerdict {
    /// The connections in flow order: flow k's connection (accept index) at index k, `None`
    /// for a flow no connection was reported as.
    pub(crate) fn order(&self) -> Vec<Option<usize>> {
        self.flows.iter().map(|f| f.conn).collect()
    }
}

/// Which connection is reported as which flow (see the module docs): flow k's connection at
/// index k (`None`: no connection left for it), and for each flow the connections whose
/// first bytes named it.
fn assign(conns: &[ConnFacts], n: usize) -> (Vec<Option<usize>>, Vec<Vec<usize>>) {
    let mut of_flow: Vec<Option<usize>> = vec![None; n];
    let mut carriers: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut rest = Vec::new();
    for (c, f) in conns.iter().enumerate() {
        match f.identity {
            Identity::Named(k) if (k as usize) < n => {
                let k = k as usize;
                carriers[k].push(c);
                match of_flow[k] {
                    None => of_flow[k] = Some(c),
                    Some(_) => rest.push(c),
                }
            }
            Identity::ByOrder if c < n && of_flow[c].is_none() => of_flow[c] = Some(c),
            _ => rest.push(c),
        }
    }
    let mut rest = rest.into_iter();
    for slot in of_flow.iter_mut().filter(|s| s.is_none()) {
        match rest.next() {
            Some(c) => *slot = Some(c),
            None => break,
        }
    }
    (of_flow, carriers)
}

/// The verdict of a receive from its facts (see the module docs for the rule).
///
/// One flow's failures, in the order they decide: its stream carried by no connection or by
/// two; its own failure; mismatches; then, where the flows ended on their own or at the
/// duration, `--expect-bytes` and "a validated flow that carried no data". The run's result
/// for one flow is that flow's first failure as it is; for several it names the flow (`flow
/// k: …`) and every other flow that failed. A stop signal with no failure is
/// [`Error::Interrupted`].
pub(crate) fn judge_receive(facts: &ReceiveFacts) -> ReceiveVerdict {
    let n = facts.flows.max(1) as usize;
    let (of_flow, carriers) = assign(&facts.conns, n);
    let keyed_several = facts.conns.iter().any(|c| c.identity != Identity::ByOrder);
    let cut_short = !facts.ended.clean();
    let flows: Vec<FlowVerdict> = (0..n)
        .map(|k| {
            let mut failures = Vec::new();
            let Some(c) = of_flow[k] else {
                if !cut_short {
                    failures.push(Error::Failure(
                        "no connection was accepted for it".to_string(),
                    ));
                }
                return FlowVerdict {
                    conn: None,
                    failures,
                };
            };
            let conn = &facts.conns[c];
            if keyed_several {
                if let Some(why) = identity_failure(k, c, conn, &carriers, cut_short) {
                    failures.push(Error::Failure(why));
                }
            }
            if let Some(e) = &conn.error {
                failures.push(e.clone());
            }
            if conn.mismatches > 0 {
                failures.push(Error::Failure(conn.mismatch.clone().unwrap_or_else(|| {
                    format!("validation failed: {} mismatched byte(s)", conn.mismatches)
                })));
            }
            if !cut_short && conn.error.is_none() {
                if let Some(why) = stream_short(facts, conn) {
                    failures.push(Error::Failure(why));
                }
            }
            FlowVerdict {
                conn: Some(c),
                failures,
            }
        })
        .collect();
    let result = run_result(facts, &flows);
    ReceiveVerdict { flows, result }
}

/// Why flow `k`, reported as connection `c` (`conn`), fails its identity, if it does.
fn identity_failure(
    k: usize,
    c: usize,
    conn: &ConnFacts,
    carriers: &[Vec<usize>],
    cut_short: bool,
) -> Option<String> {
    let by = &carriers[k];
    if by.len() > 1 {
        let list: Vec<String> = by.iter().map(usize::to_string).collect();
        return Some(format!(
            "its stream came on {} connections ({}), not once",
            by.len(),
            list.join(", ")
        ));
    }
    if by.first() == Some(&c) {
        return None;
    }
    let what = match conn.identity {
        Identity::Named(j) => format!(
            "connection {c}, reported as flow {k}, carried flow {j}'s stream, as connection {} \
             did",
            carriers
                .get(j as usize)
                .and_then(|v| v.first())
                .map_or("?".to_string(), usize::to_string)
        ),
        // A connection cut short by a signal or another flow's failure had no chance to name
        // its flow: that is no failure of its own. One that sent nothing fails as an empty
        // stream (`stream_short`), which says more.
        Identity::Unnamed if conn.bytes < 8 && cut_short => return None,
        Identity::Unnamed if conn.bytes == 0 && conn.validated => return None,
        Identity::Unnamed if conn.bytes < 8 => format!(
            "connection {c}, reported as flow {k}, sent {} byte(s), too few to name a flow \
             (8)",
            conn.bytes
        ),
        Identity::Unnamed | Identity::ByOrder => format!(
            "connection {c}, reported as flow {k}, began with bytes that are no flow's first \
             word"
        ),
    };
    Some(format!("no connection carried its stream ({what})"))
}

/// Why a whole stream (`conn`'s, ended by its peer or the duration) is still wrong:
/// `--expect-bytes` not met, or validated and empty.
fn stream_short(facts: &ReceiveFacts, conn: &ConnFacts) -> Option<String> {
    match facts.expect_bytes {
        Some(want) if want != conn.bytes => Some(format!(
            "the peer sent {} bytes, --expect-bytes wanted {want}",
            conn.bytes
        )),
        None if conn.bytes == 0 && conn.validated && !conn.binding_gone => {
            Some(match facts.ended {
                Ended::Duration => format!(
                    "no data within --duration: nothing was validated{}",
                    conn.silence
                        .as_ref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                ),
                _ => "the peer closed without sending any data: nothing was validated".into(),
            })
        }
        _ => None,
    }
}

/// The receive's result from its flows' verdicts.
fn run_result(facts: &ReceiveFacts, flows: &[FlowVerdict]) -> Result<()> {
    let failed: Vec<usize> = (0..flows.len())
        .filter(|&k| !flows[k].failures.is_empty())
        .collect();
    let Some(&first) = failed.first() else {
        match (facts.ended, facts.whole_duration) {
            (Ended::Signal(sig), _) => return Err(Error::Interrupted(sig)),
            (Ended::PeersClosed | Ended::Duration, _) if facts.ended_in_warmup.is_some() => {
                return Err(Error::Failure(format!(
                    "nothing was measured: no flow carried a byte after the --warmup of {} s \
                     (the peers closed or went quiet within it)",
                    facts.ended_in_warmup.unwrap_or_default()
                )))
            }
            (Ended::PeersClosed, Some((duration, measured))) => {
                return Err(Error::Failure(format!(
                    "the peer closed every flow before --duration {duration} s was over (the \
                     figures cover {measured:.3} s; a short run is left out of the table)"
                )))
            }
            _ => {}
        }
        // Every flow passed: the one rule of the run as a whole.
        return match facts.require_spread.as_ref().and_then(Spread::shortfall) {
            Some(why) => Err(Error::Failure(format!("--require-spread: {why}"))),
            None => Ok(()),
        };
    };
    let e = &flows[first].failures[0];
    if flows.len() == 1 {
        return Err(e.clone());
    }
    let also = match &failed[1..] {
        [] => String::new(),
        rest => format!(
            " (also failed: {})",
            rest.iter()
                .map(|k| format!("flow {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(match e {
        Error::Timeout(m) => Error::Timeout(format!("flow {first}: {m}{also}")),
        other => Error::Failure(format!("flow {first}: {other}{also}")),
    })
}

/// The facts of a whole run, for [`decide`].
#[derive(Debug)]
pub(crate) struct RunFacts {
    /// The mode's own result (its setup, its skips, the receive's result it returned).
    pub(crate) run: Result<()>,
    /// The receive's facts, when the run received.
    pub(crate) receive: Option<ReceiveFacts>,
    /// The NIC undo's failure, if it failed.
    pub(crate) undo: Option<Error>,
    /// `--verify-restore`'s outcome, when it ran.
    pub(crate) verify: Option<Result<()>>,
}

/// A run's verdict, and the errors that lost to it (to be logged).
#[derive(Debug)]
pub(crate) struct Decision {
    /// Pass (`Ok`), skip or fail.
    pub(crate) result: Result<()>,
    /// Failures that did not decide the verdict but must not go unsaid (an undo failure
    /// after another failure, a NIC left changed after a failure).
    pub(crate) also: Vec<Error>,
}

/// The run's verdict. Which error wins:
/// 1. the receive's verdict ([`judge_receive`]) when the mode passed although its receive did
///    not (no path passes a run its facts fail), else the mode's own result;
/// 2. the NIC undo's failure fails a run that passed; after another failure it is logged;
/// 3. a NIC that does not match its `--verify-restore` snapshot fails a run that passed or
///    skipped (a NIC left changed is worse than a skip); after another failure it is logged.
///
/// Before it says pass, it checks the pass invariant on the receive's facts
/// ([`invariant`]): a run that breaks it fails, naming it.
pub(crate) fn decide(facts: RunFacts) -> Decision {
    let mut also = Vec::new();
    let judged = facts.receive.as_ref().map(judge_receive);
    let mut result = match (facts.run, judged) {
        (Ok(()), Some(v)) => v.result,
        (r, _) => r,
    };
    if let Some(undo) = facts.undo {
        match result {
            Ok(()) => result = Err(undo),
            Err(_) => also.push(undo),
        }
    }
    if let Some(Err(changed)) = facts.verify {
        match result {
            Ok(()) | Err(Error::Skip(_)) => result = Err(changed),
            Err(_) => also.push(changed),
        }
    }
    if result.is_ok() {
        if let Some(Err(why)) = facts.receive.as_ref().map(invariant) {
            debug_assert!(
                false,
                "the verdict passed a run that breaks its invariant: {why}"
            );
            result = Err(Error::Failure(format!(
                "internal: the run was about to pass although {why}"
            )));
        }
    }
    Decision { result, also }
}

/// What a peer's `done` is held against besides itself: what the run's receiver got and what
/// the peer announced. `None` where it is not known.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PeerBounds {
    /// Stream bytes the receiver got over all flows, warm-up included.
    pub(crate) received: Option<u64>,
    /// The most the peer sends in one run (its `welcome`'s `max_bytes`).
    pub(crate) max_bytes: Option<u64>,
    /// The longest its send of this run can have taken, seconds (the send's duration and
    /// the wait for its `done`).
    pub(crate) longest_s: Option<f64>,
}

impl PeerBounds {
    /// Why `p` cannot be this run's send, if it cannot: a receiver never gets more stream
    /// bytes than were sent, a peer never sends more than its own limit, and a send does not
    /// outlast the wait for its `done`.
    fn contradiction(&self, p: &PeerFigures) -> Option<String> {
        if let Some(r) = self.received.filter(|&r| r > p.bytes) {
            return Some(format!(
                "bytes {} is less than the {r} stream bytes the receiver got",
                p.bytes
            ));
        }
        if let Some(m) = self.max_bytes.filter(|&m| p.bytes > m) {
            return Some(format!(
                "bytes {} is more than its own max_bytes {m}",
                p.bytes
            ));
        }
        if let Some(l) = self.longest_s.filter(|&l| p.elapsed_s > l) {
            return Some(format!(
                "elapsed_s {} is longer than its send can have taken ({l:.1} s)",
                p.elapsed_s
            ));
        }
        None
    }
}

/// A peer-driven run (a sweep's): the receiver's own verdict `run`, then what the peer
/// reported of its send (`peer`: its `done`, for a send of `flows` flows, held against
/// `bounds`). A run whose peer says its send failed fails, even when every byte that arrived
/// validated (a devmem TX that failed after its data was out); so does one whose peer's
/// figures cannot be true ([`PeerFigures::implausible`], [`PeerBounds`]: the table would
/// carry them); a receiver's own failure or skip stays first.
///
/// Errors: `run`'s error; else `Error::Failure` naming the peer's error or its figures.
pub(crate) fn with_peer(
    run: Result<()>,
    peer: Option<&PeerFigures>,
    flows: u32,
    bounds: PeerBounds,
) -> Result<()> {
    let Some(p) = peer else { return run };
    let why = p.implausible(flows).or_else(|| bounds.contradiction(p));
    match (run, &p.error, why) {
        (Ok(()), Some(e), _) => Err(Error::Failure(format!(
            "the peer reported that its send failed: {e}"
        ))),
        (Ok(()), None, Some(why)) => Err(Error::Failure(format!(
            "the peer's figures of its send cannot be true: {why}"
        ))),
        (run, _, _) => run,
    }
}

/// The pass invariant, stated on its own: every expected flow's stream seen exactly once (by
/// its first bytes where flows are told apart so, else one connection per flow), no mismatch,
/// every validated flow carried data (unless a `-U 1` unbind ended it), no own failure of a
/// connection; with `--require-spread`, every bound queue known to be reached.
///
/// # Errors
/// What breaks it, in words.
pub(crate) fn invariant(f: &ReceiveFacts) -> std::result::Result<(), String> {
    let n = f.flows.max(1) as usize;
    if f.conns.len() != n {
        return Err(format!("{} connections carried {n} flows", f.conns.len()));
    }
    let named: Vec<Option<u32>> = f
        .conns
        .iter()
        .map(|c| match c.identity {
            Identity::Named(k) => Some(k),
            _ => None,
        })
        .collect();
    if named.iter().any(Option::is_some) || f.conns.iter().any(|c| c.identity == Identity::Unnamed)
    {
        let mut seen = vec![0u32; n];
        for k in named.iter().flatten() {
            match seen.get_mut(*k as usize) {
                Some(s) => *s += 1,
                None => return Err(format!("a connection named flow {k} of {n}")),
            }
        }
        if let Some(k) = seen.iter().position(|&s| s != 1) {
            return Err(format!("flow {k}'s stream was seen {} times", seen[k]));
        }
    }
    for (c, conn) in f.conns.iter().enumerate() {
        if conn.mismatches > 0 {
            return Err(format!("connection {c} had {} mismatches", conn.mismatches));
        }
        if conn.validated && conn.bytes == 0 && !conn.binding_gone {
            return Err(format!("connection {c} was validated and carried no data"));
        }
        if let Some(e) = &conn.error {
            return Err(format!("connection {c} failed: {e}"));
        }
    }
    match &f.require_spread {
        Some(Spread::Unknown(_)) => Err("--require-spread could not be checked".into()),
        Some(Spread::Known { unreached, .. }) if !unreached.is_empty() => Err(format!(
            "--require-spread: bound queues {unreached:?} got no bytes"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(error: Option<&str>) -> PeerFigures {
        PeerFigures {
            bytes: 3_000_000_000,
            elapsed_s: 2.0,
            gbit_per_s: 12.0,
            flow_bytes: vec![1_000_000_000, 2_000_000_000],
            cpu: Some(crate::summary::sweep::PeerCpu {
                usr: 10.0,
                sys: 30.0,
                softirq: 20.0,
                idle: 40.0,
            }),
            error: error.map(str::to_string),
        }
    }

    /// A peer's reported failure fails a run that passed; a receiver's own end stays first.
    #[test]
    fn a_peers_reported_failure_fails_the_run() {
        assert!(with_peer(Ok(()), None, 2, PeerBounds::default()).is_ok());
        assert!(with_peer(Ok(()), Some(&peer(None)), 2, PeerBounds::default()).is_ok());
        let e = with_peer(
            Ok(()),
            Some(&peer(Some("bind-tx: EINVAL"))),
            2,
            PeerBounds::default(),
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("bind-tx: EINVAL"), "{e}");
        let own = with_peer(
            Err(Error::Failure("flow 0: x".into())),
            Some(&peer(Some("y"))),
            2,
            PeerBounds::default(),
        )
        .unwrap_err();
        assert_eq!(own.to_string(), "flow 0: x");
        let skip = with_peer(
            Err(Error::Skip(crate::missing::Missing::ChannelConfig)),
            Some(&peer(Some("y"))),
            2,
            PeerBounds::default(),
        );
        assert_eq!(skip.unwrap_err().exit_code(), 4);
    }

    /// Figures a peer cannot have measured fail the run, each named: the table would carry
    /// them (a hostile peer once put `inf` in a sweep's table).
    #[test]
    fn a_peers_impossible_figures_fail_the_run() {
        type Spoil = fn(&mut PeerFigures);
        let cases: [(&str, Spoil); 14] = [
            ("finite", |p| p.gbit_per_s = f64::INFINITY),
            ("finite", |p| {
                (p.elapsed_s, p.gbit_per_s) = (-0.0, -0.0);
            }),
            ("in 0 s", |p| {
                (p.elapsed_s, p.gbit_per_s) = (0.0, 0.0);
            }),
            ("finite", |p| p.elapsed_s = f64::NAN),
            ("finite", |p| p.elapsed_s = -1.0),
            ("is not its", |p| p.gbit_per_s = 1e300),
            ("is not its", |p| p.elapsed_s = 0.001),
            ("flow_bytes", |p| p.flow_bytes = vec![1, 2]),
            ("flow_bytes", |p| p.flow_bytes = vec![u64::MAX, 2]),
            ("flow_bytes", |p| p.flow_bytes.push(0)),
            ("CPU shares", |p| p.cpu.as_mut().unwrap().idle = 400.0),
            ("CPU shares", |p| p.cpu.as_mut().unwrap().usr = -3.0),
            ("CPU shares", |p| p.cpu.as_mut().unwrap().sys = f64::NAN),
            ("CPU shares", |p| p.cpu.as_mut().unwrap().usr = 100.6),
        ];
        for (want, spoil) in cases {
            let mut p = peer(None);
            spoil(&mut p);
            let e = with_peer(Ok(()), Some(&p), 2, PeerBounds::default()).unwrap_err();
            assert_eq!(e.exit_code(), 1, "{p:?}");
            assert!(
                e.to_string().contains("cannot be true") && e.to_string().contains(want),
                "{e}"
            );
        }
        // A failed send may have fewer flows; its error is what the run reports.
        let mut p = peer(Some("connect: refused"));
        p.flow_bytes = vec![3_000_000_000];
        assert!(with_peer(Ok(()), Some(&p), 2, PeerBounds::default())
            .unwrap_err()
            .to_string()
            .contains("refused"));
        // No bytes in no time is a rate of 0.
        let mut p = peer(None);
        (p.bytes, p.elapsed_s, p.gbit_per_s, p.flow_bytes) = (0, 0.0, 0.0, vec![0, 0]);
        assert!(with_peer(Ok(()), Some(&p), 2, PeerBounds::default()).is_ok());
    }

    /// A `done` held against the run: fewer bytes than the receiver got, more than the peer's
    /// own limit, or a send longer than the run's wait for it, each fails the run, named; the
    /// same figures within the bounds pass.
    #[test]
    fn a_peers_figures_that_contradict_the_run_fail_it() {
        let p = peer(None); // 3 GB in 2 s
        let within = PeerBounds {
            received: Some(3_000_000_000),
            max_bytes: Some(3_000_000_000),
            longest_s: Some(2.0),
        };
        assert!(with_peer(Ok(()), Some(&p), 2, within).is_ok());
        for (bounds, want) in [
            (
                PeerBounds {
                    received: Some(3_000_000_001),
                    ..within
                },
                "less than the 3000000001 stream bytes the receiver got",
            ),
            (
                PeerBounds {
                    max_bytes: Some(1 << 30),
                    ..within
                },
                "more than its own max_bytes",
            ),
            (
                PeerBounds {
                    longest_s: Some(1.5),
                    ..within
                },
                "longer than its send can have taken",
            ),
        ] {
            let e = with_peer(Ok(()), Some(&p), 2, bounds)
                .unwrap_err()
                .to_string();
            assert!(e.contains("cannot be true") && e.contains(want), "{e}");
        }
    }

    use proptest::prelude::*;

    fn receive(conns: Vec<ConnFacts>, flows: u32, ended: Ended) -> ReceiveFacts {
        ReceiveFacts {
            flows,
            expect_bytes: None,
            ended,
            conns,
            whole_duration: None,
            ended_in_warmup: None,
            require_spread: None,
        }
    }

    fn named(k: u32, bytes: u64) -> ConnFacts {
        ConnFacts::clean(Identity::Named(k), bytes, true)
    }

    fn err(v: &ReceiveVerdict) -> String {
        v.result.as_ref().unwrap_err().to_string()
    }

    /// Finding 1 of the one-verdict issue: a timed run's mismatches fail it, one flow or
    /// several (before, the end of --duration passed whatever was validated).
    #[test]
    fn mismatches_fail_a_timed_run() {
        let mut c = ConnFacts::clean(Identity::ByOrder, 1000, true);
        c.mismatches = 3;
        c.mismatch = Some("validation failed (period 7): 3 mismatched byte(s)".into());
        let v = judge_receive(&receive(vec![c.clone()], 1, Ended::Duration));
        assert_eq!(
            err(&v),
            "validation failed (period 7): 3 mismatched byte(s)"
        );
        let ok = ConnFacts::clean(Identity::ByOrder, 1000, true);
        let v = judge_receive(&receive(vec![ok, c], 2, Ended::Duration));
        assert_eq!(
            err(&v),
            "flow 1: validation failed (period 7): 3 mismatched byte(s)"
        );
        // Stopped by another flow's failure: its mismatches still count.
        let mut stopped = ConnFacts::clean(Identity::ByOrder, 10, true);
        stopped.mismatches = 1;
        let mut failed = ConnFacts::clean(Identity::ByOrder, 10, true);
        failed.error = Some(Error::Failure("reset".into()));
        let v = judge_receive(&receive(vec![stopped, failed], 2, Ended::FlowFailed));
        assert!(
            err(&v).starts_with("flow 0: validation failed"),
            "{}",
            err(&v)
        );
        assert!(err(&v).ends_with("(also failed: flow 1)"), "{}", err(&v));
    }

    /// Finding 2: flow 0's stream on no connection fails by name, and the connection that
    /// took its number says what it carried.
    #[test]
    fn a_missing_flow_fails_by_name() {
        let short = ConnFacts::clean(Identity::Unnamed, 5, true);
        let v = judge_receive(&receive(vec![named(1, 100), short], 2, Ended::PeersClosed));
        assert_eq!(v.order(), vec![Some(1), Some(0)]);
        assert_eq!(
            err(&v),
            "flow 0: no connection carried its stream (connection 1, reported as flow 0, sent \
             5 byte(s), too few to name a flow (8))"
        );
        assert!(v.flows[1].failures.is_empty());
    }

    /// Finding 3: identified connections keep their stream's number whatever else happened;
    /// the leftover numbers go to the others in accept order; a duplicate fails both flows
    /// by name, the conflict first.
    #[test]
    fn flows_are_named_by_their_streams() {
        let mut broken = named(2, 100);
        broken.mismatches = 1;
        broken.mismatch = Some("validation failed (seed 9 flow 2 of 3): 1".into());
        let unnamed = ConnFacts::clean(Identity::Unnamed, 3, true);
        let v = judge_receive(&receive(
            vec![unnamed, broken, named(1, 100)],
            3,
            Ended::Duration,
        ));
        assert_eq!(v.order(), vec![Some(0), Some(2), Some(1)]);
        assert!(
            err(&v).starts_with("flow 0: no connection carried its stream"),
            "{}",
            err(&v)
        );
        assert_eq!(
            v.flows[2].error_text().unwrap(),
            "validation failed (seed 9 flow 2 of 3): 1"
        );

        let v = judge_receive(&receive(
            vec![named(0, 10), named(0, 10)],
            2,
            Ended::PeersClosed,
        ));
        assert_eq!(
            err(&v),
            "flow 0: its stream came on 2 connections (0, 1), not once (also failed: flow 1)"
        );
        assert_eq!(
            v.flows[1].error_text().unwrap(),
            "no connection carried its stream (connection 1, reported as flow 1, carried flow \
             0's stream, as connection 0 did)"
        );
    }

    /// A signal with nothing wrong is the signal; a connection it cut short before its 8th
    /// byte is no identity failure; data that was wrong still fails the run by name.
    #[test]
    fn a_signal_is_the_verdict_only_when_nothing_failed() {
        let short = ConnFacts::clean(Identity::Unnamed, 3, true);
        let v = judge_receive(&receive(
            vec![named(0, 10), short],
            2,
            Ended::Signal(libc::SIGINT),
        ));
        assert!(matches!(v.result, Err(Error::Interrupted(libc::SIGINT))));
        let mut bad = named(1, 10);
        bad.mismatches = 2;
        let v = judge_receive(&receive(
            vec![named(0, 10), bad],
            2,
            Ended::Signal(libc::SIGINT),
        ));
        assert!(
            err(&v).starts_with("flow 1: validation failed"),
            "{}",
            err(&v)
        );
    }

    /// A validated flow must carry data; `--expect-bytes` is every flow's count; a timed flow
    /// that got nothing says what the kernel saw; a run cut short checks neither.
    #[test]
    fn whole_streams_are_checked_only_when_whole() {
        let empty = ConnFacts {
            silence: Some("the kernel received 0 bytes".into()),
            ..ConnFacts::clean(Identity::ByOrder, 0, true)
        };
        let v = judge_receive(&receive(vec![empty.clone()], 1, Ended::PeersClosed));
        assert_eq!(
            err(&v),
            "the peer closed without sending any data: nothing was validated"
        );
        let v = judge_receive(&receive(vec![empty.clone()], 1, Ended::Duration));
        assert_eq!(
            err(&v),
            "no data within --duration: nothing was validated (the kernel received 0 bytes)"
        );
        let v = judge_receive(&receive(vec![empty.clone()], 1, Ended::FlowFailed));
        assert!(v.result.is_ok());
        let gone = ConnFacts {
            binding_gone: true,
            ..empty.clone()
        };
        assert!(
            judge_receive(&receive(vec![gone.clone()], 1, Ended::PeersClosed))
                .result
                .is_ok()
        );
        let mut want = receive(vec![gone], 1, Ended::PeersClosed);
        want.expect_bytes = Some(1000);
        assert_eq!(
            err(&judge_receive(&want)),
            "the peer sent 0 bytes, --expect-bytes wanted 1000"
        );
        let unvalidated = ConnFacts::clean(Identity::ByOrder, 0, false);
        assert!(
            judge_receive(&receive(vec![unvalidated], 1, Ended::Duration))
                .result
                .is_ok()
        );
    }

    /// A sweep's run whose peers closed every flow before its duration is no row of the
    /// table (it fails, saying why); a full run, or any other run, is judged as before.
    #[test]
    fn a_sweep_run_the_peers_ended_early_fails() {
        let mut f = receive(vec![named(0, 10), named(1, 10)], 2, Ended::PeersClosed);
        f.whole_duration = Some((3.0, 1.25));
        assert_eq!(
            err(&judge_receive(&f)),
            "the peer closed every flow before --duration 3 s was over (the figures cover \
             1.250 s; a short run is left out of the table)"
        );
        f.ended = Ended::Duration;
        assert!(judge_receive(&f).result.is_ok());
        f.ended = Ended::PeersClosed;
        f.whole_duration = None;
        assert!(judge_receive(&f).result.is_ok());
    }

    /// A run whose flows carried nothing after its `--warmup` measured nothing: it
    /// fails, saying so (it used to pass with empty figures); a signal still wins, and a run
    /// whose measured interval began is judged as before.
    #[test]
    fn a_run_that_ended_in_its_warmup_fails() {
        let mut f = receive(vec![named(0, 10), named(1, 10)], 2, Ended::PeersClosed);
        f.ended_in_warmup = Some(0.5);
        assert_eq!(
            err(&judge_receive(&f)),
            "nothing was measured: no flow carried a byte after the --warmup of 0.5 s (the \
             peers closed or went quiet within it)"
        );
        // Flows that went quiet and stayed open until the duration ended: the same.
        f.ended = Ended::Duration;
        assert!(err(&judge_receive(&f)).starts_with("nothing was measured"));
        f.ended = Ended::Signal(libc::SIGTERM);
        assert!(matches!(
            judge_receive(&f).result,
            Err(Error::Interrupted(libc::SIGTERM))
        ));
        f.ended = Ended::PeersClosed;
        f.ended_in_warmup = None;
        assert!(judge_receive(&f).result.is_ok());
    }

    /// `--require-spread`: a run whose flows all passed fails when a bound queue got no
    /// bytes (naming it), or when nothing tells which queues they reached; one that reached
    /// every bound queue passes; without the option the same facts pass (the run only says
    /// so). A flow's own failure, and a signal, still come first.
    #[test]
    fn require_spread_fails_a_run_that_missed_a_bound_queue() {
        let two = || vec![named(0, 100), named(1, 100)];
        let on_one = Spread::Known {
            bound: vec![2, 3],
            unreached: vec![3],
            source: "qstats",
        };
        let mut f = receive(two(), 2, Ended::Duration);
        assert!(judge_receive(&f).result.is_ok());
        f.require_spread = Some(on_one.clone());
        let v = judge_receive(&f);
        let e = v.result.as_ref().unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert_eq!(
            e.to_string(),
            "--require-spread: the flows reached 1 of 2 bound queues (2,3): no bytes on queue 3 \
             (qstats)"
        );
        // The flows themselves passed: no flow carries the failure.
        assert!(v.flows.iter().all(|fl| fl.failures.is_empty()));
        assert!(invariant(&f).is_err());
        assert!(decide(RunFacts {
            run: Ok(()),
            receive: Some(f.clone()),
            undo: None,
            verify: None
        })
        .result
        .is_err());
        // Every bound queue reached: pass, by qstats or by the flows' arrival queues.
        for source in ["qstats", "arrival"] {
            f.require_spread = Some(Spread::Known {
                bound: vec![2, 3],
                unreached: vec![],
                source,
            });
            assert!(judge_receive(&f).result.is_ok(), "{source}");
            assert!(invariant(&f).is_ok());
        }
        // One flow on one bound queue is spread.
        let mut one = receive(
            vec![ConnFacts::clean(Identity::ByOrder, 9, true)],
            1,
            Ended::PeersClosed,
        );
        one.require_spread = Some(Spread::Known {
            bound: vec![5],
            unreached: vec![],
            source: "qstats",
        });
        assert!(judge_receive(&one).result.is_ok());
        // Nothing tells: a requirement that cannot be checked is not met.
        f.require_spread = Some(Spread::Unknown(
            "no qstats: the driver keeps none; no flow's arrival queue is known".into(),
        ));
        assert_eq!(
            err(&judge_receive(&f)),
            "--require-spread: which bound queues the flows reached is not known (no qstats: \
             the driver keeps none; no flow's arrival queue is known)"
        );
        // A flow's own failure decides first; a signal stays the verdict.
        f.require_spread = Some(on_one.clone());
        let mut bad = named(1, 100);
        bad.mismatches = 2;
        f.conns = vec![named(0, 100), bad];
        assert!(err(&judge_receive(&f)).starts_with("flow 1: validation failed"));
        f.conns = two();
        f.ended = Ended::Signal(libc::SIGINT);
        assert!(matches!(
            judge_receive(&f).result,
            Err(Error::Interrupted(s)) if s == libc::SIGINT
        ));
        // A sweep's short run keeps its own reason.
        f.ended = Ended::PeersClosed;
        f.whole_duration = Some((3.0, 1.0));
        assert!(err(&judge_receive(&f)).starts_with("the peer closed every flow"));
    }

    /// The run's verdict: the receive's facts beat a mode that passed; the undo and the
    /// snapshot as before.
    #[test]
    fn decide_combines_the_run_the_receive_and_the_nic() {
        let mut bad = ConnFacts::clean(Identity::ByOrder, 10, true);
        bad.mismatches = 1;
        let d = decide(RunFacts {
            run: Ok(()),
            receive: Some(receive(vec![bad], 1, Ended::Duration)),
            undo: None,
            verify: None,
        });
        assert!(d.result.is_err());
        let d = decide(RunFacts {
            run: Err(Error::Failure("mismatch".into())),
            receive: None,
            undo: Some(Error::Failure("rule left".into())),
            verify: Some(Err(Error::Failure("RSS differs".into()))),
        });
        assert_eq!(d.result.unwrap_err().to_string(), "mismatch");
        assert_eq!(d.also.len(), 2);
        let d = decide(RunFacts {
            run: Err(Error::Skip(crate::caps::Missing::ChannelConfig)),
            receive: None,
            undo: None,
            verify: Some(Err(Error::Failure("RSS differs".into()))),
        });
        assert_eq!(d.result.unwrap_err().to_string(), "RSS differs");
        let d = decide(RunFacts {
            run: Ok(()),
            receive: None,
            undo: Some(Error::Failure("rule left".into())),
            verify: None,
        });
        assert_eq!(d.result.unwrap_err().to_string(), "rule left");
    }

    fn conn_strategy(n: u32) -> impl Strategy<Value = ConnFacts> {
        (
            prop_oneof![
                (0..n + 1).prop_map(Identity::Named),
                Just(Identity::Unnamed),
            ],
            prop_oneof![Just(0u64), Just(5), 8..100_000u64],
            any::<bool>(),
            prop_oneof![4 => Just(0u64), 1 => 1..50u64],
            prop_oneof![6 => Just(false), 1 => Just(true)],
        )
            .prop_map(
                |(identity, bytes, validated, mismatches, error)| ConnFacts {
                    identity,
                    bytes,
                    validated,
                    mismatches,
                    mismatch: None,
                    error: error.then(|| Error::Failure("reset".into())),
                    binding_gone: false,
                    silence: None,
                },
            )
    }

    fn facts_strategy() -> impl Strategy<Value = ReceiveFacts> {
        (1u32..5).prop_flat_map(|n| {
            (
                proptest::collection::vec(conn_strategy(n), n as usize..=n as usize),
                prop_oneof![Just(Ended::PeersClosed), Just(Ended::Duration)],
                any::<bool>(),
                prop_oneof![
                    4 => Just(None),
                    1 => Just(Some(Spread::Known { bound: vec![2, 3], unreached: vec![], source: "qstats" })),
                    1 => Just(Some(Spread::Known { bound: vec![2, 3], unreached: vec![3], source: "qstats" })),
                    1 => Just(Some(Spread::Unknown("no qstats".into()))),
                ],
            )
                .prop_map(move |(mut conns, ended, by_order, require_spread)| {
                    if n == 1 || by_order {
                        for c in &mut conns {
                            c.identity = Identity::ByOrder;
                        }
                    }
                    ReceiveFacts {
                        flows: n,
                        expect_bytes: None,
                        ended,
                        conns,
                        whole_duration: None,
                        ended_in_warmup: None,
                        require_spread,
                    }
                })
        })
    }

    proptest! {
        /// Random facts of runs that ended on their own or at the duration: the verdict is
        /// pass exactly when the invariant holds, and a failure names a flow that broke it.
        #[test]
        fn pass_exactly_when_the_invariant_holds(f in facts_strategy()) {
            let v = judge_receive(&f);
            prop_assert_eq!(v.result.is_ok(), invariant(&f).is_ok(), "{:?} {:?}", f, v.result);
            let d = decide(RunFacts { run: Ok(()), receive: Some(f.clone()), undo: None, verify: None });
            prop_assert_eq!(d.result.is_ok(), invariant(&f).is_ok());
            let spread_short = f.require_spread.as_ref().and_then(Spread::shortfall).is_some();
            if f.flows > 1 && !(spread_short && v.flows.iter().all(|fl| fl.failures.is_empty())) {
                if let Err(e) = &v.result {
                    let text = e.to_string();
                    let named = (0..f.flows).any(|k| text.contains(&format!("flow {k}:")));
                    prop_assert!(named, "{}", text);
                }
            }
        }
    }
}
