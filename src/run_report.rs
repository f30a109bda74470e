//! One run's report: the log lines and the summary a mode prints, the `--json` object it
//! leaves, the NIC undo's and `--verify-restore`'s outcomes, and the one rule of which error
//! decides the exit code ([`RunReport::finish`]).
//!
//! A mode gets `&RunReport` and records into it as it goes; the NIC setup records its undo
//! and verification into it too, from its explicit finish or, on an early return, from its
//! drop. So every exit path of a mode ends in [`RunReport::finish`], which writes `--json`.

use crate::cli::{Common, JsonTarget, Mode, Verbosity, PROGRAM};
use crate::error::{Error, Result};
use crate::summary::{Body, SetupStep};
use crate::verdict::{ReceiveFacts, RunFacts};
use std::cell::RefCell;
use std::io::Write;
use std::time::Instant;

/// What one run found (see the module docs). Single-threaded: a collector with interior
/// mutability, so the mode and its NIC setup can both record into it.
#[derive(Debug)]
pub(crate) struct RunReport {
    mode: Mode,
    common: Common,
    /// The mode's summary body, once it has one.
    body: RefCell<Option<Body>>,
    /// The NIC undo's failure, if it failed.
    undo: RefCell<Option<Error>>,
    /// `--verify-restore`'s outcome, when it ran.
    verify: RefCell<Option<Result<()>>>,
    /// The receive's facts, when the run received: [`finish`](Self::finish) gives them to
    /// the one verdict ([`crate::verdict::decide`]).
    receive: RefCell<Option<ReceiveFacts>>,
    /// A sweep's run: its figures must cover its whole `--duration`.
    sweep_run: bool,
    /// Called when the mode listens (a sweep then asks its peer to send).
    on_listening: Option<Notify>,
    /// `--pid-file`: written when the mode listens, removed when the report is dropped (at
    /// the end of [`finish`](Self::finish), or on a panic's unwind).
    pid_file: Option<crate::pid_file::PidFile>,
    /// The set-up's timeline ([`step`](Self::step)).
    setup: RefCell<SetupClock>,
}

/// The set-up's timeline of a [`RunReport`]: the steps its mode marked before it listened.
#[derive(Debug)]
struct SetupClock {
    /// When the last step ended (for the first: when the report was made).
    last: Instant,
    /// The process's age when the report was made ([`crate::sys::process_age`]): the
    /// `start` step, put first once a step ends.
    start: Option<std::time::Duration>,
    /// The steps marked so far, in order.
    steps: Vec<SetupStep>,
    /// The listen ended the set-up: later steps are not recorded.
    done: bool,
}

impl SetupClock {
    fn new() -> SetupClock {
        SetupClock {
            last: Instant::now(),
            start: crate::sys::process_age(),
            steps: Vec::new(),
            done: false,
        }
    }

    /// Ends `step`: what ran since the previous step ended.
    fn step(&mut self, step: &'static str) {
        if self.done {
            return;
        }
        let now = Instant::now();
        let took = now.saturating_duration_since(self.last);
        self.last = now;
        if let Some(start) = self.start.take() {
            self.steps.push(SetupStep::new("start", start));
        }
        self.steps.push(SetupStep::new(step, took));
    }

    /// The log line of a set-up that a stop signal ended before its listen: the steps it
    /// ended (`start` first), then `unfinished after STEP`, the time from the last step's end
    /// to now (the step it was in and what the run did to end: the NIC's undo). `None` after
    /// the listen, and before the first step of a NIC's set-up ended. So a start that a
    /// caller's wait gave up on says where its time went.
    fn unfinished_line(&self) -> Option<String> {
        if self.done || !self.has_set_up() {
            return None;
        }
        // A marked step put the start first: it is in `steps`.
        let mut steps = self.steps.clone();
        let after = steps.last().map_or("", |s| s.step.as_str()).to_string();
        steps.push(SetupStep {
            step: format!("unfinished after {after}"),
            ms: self.last.elapsed().as_secs_f64() * 1e3,
        });
        Some(setup_line("set-up ended before the listen", &steps))
    }

    /// Whether a step other than the process's start and the listen was marked (a NIC's
    /// set-up): then the listen logs them.
    fn has_set_up(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.step != "start" && s.step != "listen")
    }
}

/// The log line of a set-up's `steps` led by `what`: `set-up before the listen 0.412 s: start
/// 0.010 s, checks 0.002 s, ...` (seconds to the millisecond; the total from the process's
/// start).
fn setup_line(what: &str, steps: &[SetupStep]) -> String {
    let total: f64 = steps.iter().map(|s| s.ms).sum();
    let each: Vec<String> = steps
        .iter()
        .map(|s| format!("{} {:.3} s", s.step, s.ms / 1e3))
        .collect();
    format!("{what} {:.3} s: {}", total / 1e3, each.join(", "))
}

/// A callback of a [`RunReport`].
struct Notify(Box<dyn Fn()>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}

impl RunReport {
    /// An empty report of a `mode` run with `common` options.
    pub(crate) fn new(mode: Mode, common: Common) -> RunReport {
        RunReport {
            mode,
            common,
            body: RefCell::new(None),
            undo: RefCell::new(None),
            verify: RefCell::new(None),
            receive: RefCell::new(None),
            sweep_run: false,
            on_listening: None,
            pid_file: None,
            setup: RefCell::new(SetupClock::new()),
        }
    }

    /// Ends the set-up step `step` (`checks`, `hugepages`, `nic`, `queues`, `memory`,
    /// `configure`, `bind`, `register`, `listen`: docs/json.md's `setup`): its time is what
    /// ran since the previous step ended, or since the report was made (the command line
    /// read). The first step ended also records `start`, the process's age when the report
    /// was made, before it. Steps after the listen are not recorded.
    pub(crate) fn step(&self, step: &'static str) {
        self.setup.borrow_mut().step(step);
    }

    /// This report, of a sweep's run: the verdict fails a run whose peers closed every flow
    /// before its `--duration` was over (its figures would cover less time than the others');
    /// its set-up has no `start` step.
    pub(crate) fn for_sweep_run(mut self) -> RunReport {
        self.sweep_run = true;
        // Not the process's first run: its start is the sweep's, not this run's.
        self.setup.get_mut().start = None;
        self
    }

    /// Whether this is a sweep's run ([`for_sweep_run`](Self::for_sweep_run)).
    pub(crate) fn sweep_run(&self) -> bool {
        self.sweep_run
    }

    /// Records the receive's facts, which the verdict is decided from.
    pub(crate) fn receive(&self, facts: ReceiveFacts) {
        *self.receive.borrow_mut() = Some(facts);
    }

    /// This report, calling `f` once the mode's receiver listens.
    pub(crate) fn on_listening(mut self, f: Box<dyn Fn()>) -> RunReport {
        self.on_listening = Some(Notify(f));
        self
    }

    /// This report, writing `pid_file` when the mode listens ([`listening`](Self::listening))
    /// and removing it when the report is dropped.
    pub(crate) fn with_pid_file(mut self, pid_file: crate::pid_file::PidFile) -> RunReport {
        self.pid_file = Some(pid_file);
        self
    }

    /// The mode's receiver (or the peer server) listens now, its listening line logged: ends
    /// the set-up with its `listen` step (the first time; a set-up of more steps than that is
    /// logged as one line, [`step`](Self::step)), writes `--pid-file` (the first time), then
    /// calls
    /// [`on_listening`](Self::on_listening)'s callback.
    ///
    /// Errors: the `--pid-file` write's ([`crate::pid_file::PidFile::write`]).
    pub(crate) fn listening(&self) -> Result<()> {
        {
            let mut clock = self.setup.borrow_mut();
            if !clock.done {
                clock.step("listen");
                clock.done = true;
                // A mode that marked steps before its listen (a NIC's set-up) logs them.
                if clock.has_set_up() {
                    self.log(format_args!(
                        "{}",
                        setup_line("set-up before the listen", &clock.steps)
                    ));
                }
            }
        }
        if let Some(p) = &self.pid_file {
            p.write()?;
        }
        if let Some(f) = &self.on_listening {
            (f.0)();
        }
        Ok(())
    }

    /// The `--json FILE` this run writes (`None`: none, or stdout).
    pub(crate) fn json_file(&self) -> Option<&std::path::Path> {
        match &self.common.json {
            Some(crate::cli::JsonTarget::File(p)) => Some(p),
            _ => None,
        }
    }

    /// A copy of the mode's summary body, once it has one.
    pub(crate) fn body_typed(&self) -> Option<Body> {
        self.body.borrow().clone()
    }

    /// `--quiet`: only errors and the verdict are logged.
    pub(crate) fn quiet(&self) -> bool {
        self.common.verbosity == Verbosity::Quiet
    }

    /// The run's verbosity.
    pub(crate) fn verbosity(&self) -> Verbosity {
        self.common.verbosity
    }

    /// `-V`: a log line per frag.
    pub(crate) fn verbose(&self) -> bool {
        self.common.verbosity == Verbosity::Verbose
    }

    /// One `ncdevmem-rs: ` line on stderr, unless `--quiet`.
    pub(crate) fn log(&self, line: std::fmt::Arguments<'_>) {
        if !self.quiet() {
            crate::elog!("{PROGRAM}: {line}");
        }
    }

    /// One `ncdevmem-rs: ` line on stderr, also with `--quiet` (what was left behind, what
    /// could not be checked).
    pub(crate) fn warn(&self, line: std::fmt::Arguments<'_>) {
        crate::elog!("{PROGRAM}: {line}");
    }

    /// A summary line on stderr (without the `ncdevmem-rs: ` prefix), unless `--quiet`.
    pub(crate) fn summary(&self, line: &str) {
        if !self.quiet() {
            crate::elog!("{line}");
        }
    }

    /// Sets the mode's summary body (written by [`finish`](Self::finish) to `--json FILE`).
    pub(crate) fn body(&self, body: Body) {
        *self.body.borrow_mut() = Some(body);
    }

    /// Sets the mode's body from a JSON object; its envelope members are left out.
    pub(crate) fn body_object(&self, json: serde_json::Value) {
        *self.body.borrow_mut() = Body::other(json);
    }

    /// Sets the mode's body from one of the summary's types without a [`Body`] variant of its
    /// own (the probe's, the capability report's: `crate::summary::report`).
    pub(crate) fn body_from<T: serde::Serialize>(&self, body: &T) {
        match serde_json::to_value(body) {
            Ok(v) => self.body_object(v),
            Err(e) => self.warn(format_args!("the summary's body could not be written: {e}")),
        }
    }

    /// Records the NIC undo's outcome (a failure names what was left behind).
    pub(crate) fn undo(&self, outcome: Result<()>) {
        if let Err(e) = outcome {
            let mut undo = self.undo.borrow_mut();
            match undo.as_ref() {
                // A second undo failure (there is one NIC setup per run) is only logged.
                Some(_) => self.warn(format_args!("{e}")),
                None => *undo = Some(e),
            }
        }
    }

    /// Records `--verify-restore`'s comparison of the NIC with its snapshot.
    pub(crate) fn verified(&self, outcome: Result<()>) {
        *self.verify.borrow_mut() = Some(outcome);
    }

    /// The run's verdict, decided in one place ([`crate::verdict::decide`]) from the mode's
    /// own `run` result, the receive's facts, the NIC undo's and `--verify-restore`'s
    /// outcomes (the failures that lose to another are logged), and `--json FILE` written.
    /// A summary that cannot be written fails a run that succeeded; a run that failed keeps
    /// its own error (the write failure is logged).
    ///
    /// The object is [`summary_json`]'s: the same top-level keys for every mode and outcome;
    /// a run that ended before its summary (no connection within `--timeout`, a skip, a
    /// refused bind) has only those.
    pub(crate) fn finish(self, run: Result<()>) -> Result<()> {
        // A stop signal before the listen (a caller that gave up waiting for it): where the
        // set-up's time went. A skip or a failure says what it found instead.
        if matches!(run, Err(Error::Interrupted(_))) {
            if let Some(line) = self.setup.borrow().unfinished_line() {
                self.log(format_args!("{line}"));
            }
        }
        let decision = crate::verdict::decide(RunFacts {
            run,
            receive: self.receive.into_inner(),
            undo: self.undo.into_inner(),
            verify: self.verify.into_inner(),
        });
        for e in &decision.also {
            crate::elog!("{PROGRAM}: {e}");
        }
        let result = decision.result;
        let Some(target) = self.common.json.as_ref() else {
            return result;
        };
        let mut summary = summary(
            self.mode,
            &self.common.argv,
            self.body.into_inner(),
            &result,
        );
        summary.envelope.setup = self.setup.into_inner().steps;
        let json = serde_json::to_value(summary).unwrap_or_default();
        write_summary(target, &json, result)
    }

    /// Writes `text` (a report, the probe's check lines, a sweep's table) where the run's
    /// human output goes: stdout, or stderr when `--json -` has stdout for the summary.
    ///
    /// Errors: as [`print_stdout`]; `write(stderr)` failing.
    pub(crate) fn print(&self, text: &str) -> Result<()> {
        match self.json_on_stdout() {
            false => print_stdout(text),
            true => {
                let mut err = std::io::stderr().lock();
                err.write_all(text.as_bytes())
                    .and_then(|()| err.flush())
                    .map_err(|e| Error::io("write(stderr)", &e))
            }
        }
    }

    /// `--json -`: the summary object goes to stdout, so nothing else may.
    pub(crate) fn json_on_stdout(&self) -> bool {
        self.common.json == Some(JsonTarget::Stdout)
    }
}

/// The top-level keys every `--json` object carries (`docs/json.md`), in this order before
/// the mode's own.
#[cfg(test)]
pub(crate) const ENVELOPE_KEYS: [&str; 8] = crate::summary::ENVELOPE_MEMBERS;

/// The summary of a run of `mode` typed as `argv` that ended with `result`: the envelope
/// (`mode`, `ok`, `verdict` `"pass"`|`"fail"`|`"skip"`, `error` null or the message the run
/// ended with, `version`, `argv`, `kernel_release` or null), then the mode's `body` (none when
/// the run ended before its summary). `ok` and `error` are the run's final verdict, after the
/// NIC undo and `--verify-restore`.
pub(crate) fn summary(
    mode: Mode,
    argv: &[String],
    body: Option<Body>,
    result: &Result<()>,
) -> crate::summary::Summary {
    crate::summary::Summary {
        envelope: crate::summary::Envelope {
            mode: summary_mode(mode),
            ok: result.is_ok(),
            verdict: match result {
                Ok(()) => crate::summary::VerdictName::Pass,
                Err(Error::Skip(_)) => crate::summary::VerdictName::Skip,
                Err(_) => crate::summary::VerdictName::Fail,
            },
            error: result.as_ref().err().map(ToString::to_string),
            version: crate::VERSION.to_string(),
            argv: argv.to_vec(),
            kernel_release: crate::sys::kernel_release().ok(),
            setup: Vec::new(),
        },
        body,
    }
}

/// [`summary`] as a JSON value.
#[cfg(test)]
pub(crate) fn summary_json(
    mode: Mode,
    argv: &[String],
    body: Option<Body>,
    result: &Result<()>,
) -> serde_json::Value {
    serde_json::to_value(summary(mode, argv, body, result)).unwrap_or_default()
}

/// The one line `--quiet` prints for a run that passed: `pass (MODE)`, with the bytes, the
/// rate and the CRC-32 of a summary that has them (`pass (plain TCP): 1048576 bytes, 0.84
/// Gbit/s, crc32 0x1c5d4b0a`).
pub(crate) fn pass_line(mode: Mode, body: Option<&Body>) -> String {
    let mut line = format!("pass ({})", json_mode_name(mode));
    if let Some((bytes, gbps, crc)) = body.and_then(Body::stream_figures) {
        line.push_str(&format!(": {bytes} bytes, {gbps:.2} Gbit/s"));
        if let Some(crc) = crc {
            line.push_str(&format!(", crc32 0x{crc:08x}"));
        }
    }
    line
}

/// The summary's `"mode"` of `mode`.
fn summary_mode(mode: Mode) -> crate::summary::ModeName {
    use crate::summary::ModeName as M;
    match mode {
        Mode::PlainServer => M::PlainTcp,
        Mode::Server => M::Devmem,
        Mode::ZcrxServer => M::Zcrx,
        Mode::Client => M::DevmemTx,
        Mode::PatternSender => M::PatternSender,
        Mode::Probe => M::Probe,
        Mode::Report => M::Report,
        Mode::PeerServer => M::PeerServer,
        Mode::Sweep => M::Sweep,
        Mode::Compare => M::Compare,
    }
}

/// The `"mode"` the JSON summary of `mode` carries.
pub(crate) fn json_mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::PlainServer => "plain TCP",
        Mode::Server => "devmem",
        Mode::ZcrxServer => "io_uring zcrx",
        Mode::Client => "devmem-tx",
        Mode::PatternSender => "pattern-sender",
        Mode::Probe => "probe",
        Mode::Report => "report",
        Mode::PeerServer => "peer-server",
        Mode::Sweep => "sweep",
        Mode::Compare => "compare",
    }
}

/// Writes `json` to `--json` `target` (a file, atomically, or one line on stdout) and
/// combines that with the run's `result`: a run that failed keeps its own error and exit code
/// (the write failure is logged), a run that succeeded fails with the write error.
fn write_summary(target: &JsonTarget, json: &serde_json::Value, result: Result<()>) -> Result<()> {
    let written = match target {
        JsonTarget::File(path) => crate::stats::write_json_atomic(path, json),
        JsonTarget::Stdout => print_stdout(&format!("{json}\n")),
    };
    match (written, result) {
        (Ok(()), r) => r,
        // After the run, a summary that cannot be written is the run's failure (exit 1), not a
        // usage error: the path was checked before the run (docs/json.md).
        (Err(Error::Usage(m)), Ok(())) => Err(Error::Failure(m)),
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(run)) => {
            crate::elog!("{PROGRAM}: {e}");
            Err(run)
        }
    }
}

/// Writes `text` to stdout and flushes it. Unlike `print!`, a stdout whose reader went away
/// (`| head -1`, `| true`: `EPIPE`, SIGPIPE being ignored) is an error, never a panic.
///
/// Errors: [`Error::Sys`] naming `write(stdout)`; [`Error::Interrupted`] never (plain stdout).
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("write(stdout)", &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Missing;

    /// A summary that cannot be written never hides the run's own verdict: a skip stays a skip
    /// (exit 4), a failure keeps its message; only a run that succeeded fails with it.
    #[test]
    fn a_json_write_failure_keeps_the_runs_verdict() {
        let gone = JsonTarget::File("/nonexistent-dir-ncdevmem/x.json".into());
        let json = serde_json::json!({"ok": false});
        let e = write_summary(&gone, &json, Err(Error::Skip(Missing::ChannelConfig))).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP, "{e}");
        assert_eq!(e.to_string(), format!("skip: {}", Missing::ChannelConfig));
        let e = write_summary(&gone, &json, Err(Error::Failure("mismatch".into()))).unwrap_err();
        assert_eq!(e.to_string(), "mismatch");
        let e = write_summary(&gone, &json, Ok(())).unwrap_err();
        assert!(e.to_string().starts_with("--json: "), "{e}");
    }

    /// Every mode's object starts with the same keys, whatever its body; the envelope's
    /// verdict wins over a body's own `ok`/`error` (a receive that passed, then an undo that
    /// failed, is a failure), and the body's other keys stay.
    #[test]
    fn every_summary_has_the_envelope_and_the_final_verdict() {
        let argv = vec!["-f".to_string(), "eth0".to_string()];
        let body = serde_json::json!({"mode": "plain TCP", "ok": true, "bytes": 7});
        for mode in [
            Mode::PlainServer,
            Mode::Server,
            Mode::ZcrxServer,
            Mode::Client,
            Mode::PatternSender,
            Mode::Probe,
            Mode::Report,
            Mode::PeerServer,
            Mode::Sweep,
            Mode::Compare,
        ] {
            for (result, verdict) in [
                (Ok(()), "pass"),
                (Err(Error::Skip(Missing::ChannelConfig)), "skip"),
                (Err(Error::Failure("rule left".into())), "fail"),
            ] {
                for b in [None, Body::other(body.clone())] {
                    let j = summary_json(mode, &argv, b.clone(), &result);
                    for k in ENVELOPE_KEYS {
                        assert!(j.get(k).is_some(), "{mode:?} {verdict}: no {k}: {j}");
                    }
                    assert_eq!(j["mode"], json_mode_name(mode));
                    assert_eq!(j["verdict"], verdict);
                    assert_eq!(j["ok"], result.is_ok());
                    assert_eq!(j["argv"], serde_json::json!(["-f", "eth0"]));
                    assert_eq!(j["version"], crate::VERSION);
                    match &result {
                        Ok(()) => assert!(j["error"].is_null()),
                        Err(e) => assert_eq!(j["error"], e.to_string()),
                    }
                    assert_eq!(j.get("bytes").is_some(), b.is_some(), "{j}");
                }
            }
        }
    }

    /// `--quiet`'s line for a pass: the mode, and the bytes, rate and CRC-32 when the body
    /// has them.
    #[test]
    fn the_pass_line_names_the_mode_and_the_figures() {
        use crate::summary::{ReceiveBody, RxTotals};
        assert_eq!(pass_line(Mode::Report, None), "pass (report)");
        let receive = |crc32| {
            Body::Receive(Box::new(ReceiveBody {
                totals: RxTotals {
                    bytes: 1048576,
                    gbit_per_s: 2.314,
                    crc32,
                    ..RxTotals::default()
                },
                measured: None,
                device_rx: None,
                steering: None,
            }))
        };
        assert_eq!(
            pass_line(Mode::PlainServer, Some(&receive(Some(0x0faf8379)))),
            "pass (plain TCP): 1048576 bytes, 2.31 Gbit/s, crc32 0x0faf8379"
        );
        let mut flows = receive(None);
        if let Body::Receive(b) = &mut flows {
            b.totals.bytes = 5;
            b.totals.gbit_per_s = 0.0;
        }
        assert_eq!(
            pass_line(Mode::Server, Some(&flows)),
            "pass (devmem): 5 bytes, 0.00 Gbit/s"
        );
    }

    fn report() -> RunReport {
        RunReport::new(Mode::Server, Common::default())
    }

    /// The run's own error wins over the undo's; the undo's fails a run that succeeded.
    #[test]
    fn the_runs_error_wins_over_the_undos() {
        let r = report();
        r.undo(Err(Error::Failure("rule left".into())));
        let e = r.finish(Err(Error::Timeout("no peer".into()))).unwrap_err();
        assert_eq!(e.to_string(), "timed out: no peer");
        let r = report();
        r.undo(Err(Error::Failure("rule left".into())));
        assert_eq!(r.finish(Ok(())).unwrap_err().to_string(), "rule left");
        report().finish(Ok(())).unwrap();
    }

    /// A NIC that differs from its snapshot fails a run that passed or skipped, not one that
    /// failed otherwise.
    #[test]
    fn a_nic_left_changed_beats_a_skip_not_a_failure() {
        let changed = || Err(Error::Failure("RSS table differs".into()));
        for run in [Ok(()), Err(Error::Skip(Missing::ChannelConfig))] {
            let r = report();
            r.verified(changed());
            let e = r.finish(run).unwrap_err();
            assert_eq!(e.to_string(), "RSS table differs");
        }
        let r = report();
        r.verified(changed());
        let e = r
            .finish(Err(Error::Failure("mismatch".into())))
            .unwrap_err();
        assert_eq!(e.to_string(), "mismatch");
        let r = report();
        r.verified(Ok(()));
        let e = r
            .finish(Err(Error::Skip(Missing::ChannelConfig)))
            .unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
    }

    /// The set-up's steps are kept in order, each timing what ran since the one before; the
    /// listen ends the set-up (later steps are not recorded) and its line names every step;
    /// `--json FILE` carries them as `setup`.
    #[test]
    fn the_set_up_steps_end_at_the_listen_and_reach_the_summary() {
        let path = std::env::temp_dir().join(format!("ncdevmem-setup-{}.json", std::process::id()));
        let common = Common {
            json: Some(JsonTarget::File(path.clone())),
            ..Common::default()
        };
        let r = RunReport::new(Mode::Server, common);
        r.step("checks");
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.step("memory");
        r.listening().unwrap();
        r.step("bind");
        r.listening().unwrap();
        let steps = r.setup.borrow().steps.clone();
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["start", "checks", "memory", "listen"]);
        assert!(steps[2].ms >= 20.0, "{steps:?}");
        assert!(steps.iter().all(|s| s.ms >= 0.0), "{steps:?}");
        r.finish(Ok(())).unwrap();
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).ok();
        let json_names: Vec<&str> = j["setup"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["step"].as_str().unwrap())
            .collect();
        assert_eq!(json_names, names, "{j}");
        assert_eq!(j["setup"][2]["ms"].as_f64(), Some(steps[2].ms), "{j}");
    }

    /// The set-up line: the total, then each step, in seconds to the millisecond.
    #[test]
    fn the_set_up_line_gives_the_total_and_each_step() {
        let step = |step: &str, ms: f64| SetupStep {
            step: step.into(),
            ms,
        };
        let line = setup_line(
            "set-up before the listen",
            &[
                step("checks", 1.5),
                step("memory", 2950.25),
                step("listen", 0.4),
            ],
        );
        assert_eq!(
            line,
            "set-up before the listen 2.952 s: checks 0.002 s, memory 2.950 s, listen 0.000 s"
        );
    }

    /// A set-up that ends before its listen names the steps it ended and the time after the
    /// last one (`unfinished after STEP`); before its first step, and after the listen,
    /// nothing.
    #[test]
    fn a_set_up_that_ends_before_the_listen_says_where_its_time_went() {
        let mut clock = SetupClock::new();
        clock.start = Some(std::time::Duration::from_millis(440));
        assert_eq!(clock.unfinished_line(), None);
        clock.step("checks");
        clock.step("nic");
        clock.last -= std::time::Duration::from_millis(4600);
        let line = clock.unfinished_line().unwrap();
        let (_, steps) = line.split_once(": ").unwrap();
        let names: Vec<&str> = steps
            .split(", ")
            .map(|p| p.rsplitn(3, ' ').nth(2).unwrap())
            .collect();
        assert_eq!(
            names,
            ["start", "checks", "nic", "unfinished after nic"],
            "{line}"
        );
        let last: f64 = steps.rsplit(' ').nth(1).unwrap().parse().unwrap();
        assert!((4.6..5.6).contains(&last), "{line}");
        clock.step("listen");
        clock.done = true;
        assert_eq!(clock.unfinished_line(), None);
    }

    /// A mode without set-up steps (a sender, the probe) writes `setup: []`.
    #[test]
    fn a_summary_without_steps_has_an_empty_setup() {
        let j = summary_json(Mode::Server, &[], None, &Ok(()));
        assert_eq!(j["setup"], serde_json::json!([]), "{j}");
    }
}
