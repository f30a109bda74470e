//! One run's report: the log lines and the summary a mode prints, the `--json` object it
//! leaves, the NIC undo's and `--verify-restore`'s outcomes, and the one rule of which error
//! decides the exit code ([`RunReport::finish`]).
//!
//! A mode gets `&RunReport` and records into it as it goes; the NIC setup records its undo
//! and verification into it too, from its explicit finish or, on an early return, from its
//! drop. So every exit path of a mode ends in [`RunReport::finish`], which writes `--json`.

use std::cell::RefCell;
use std::io::Write;
use std::path::Path;

use crate::cli::{Common, Mode, Verbosity, PROGRAM};
use crate::error::{Error, Result};

/// What one run found (see the module docs). Single-threaded: a collector with interior
/// mutability, so the mode and its NIC setup can both record into it.
#[derive(Debug)]
pub(crate) struct RunReport {
    mode: Mode,
    common: Common,
    /// The mode's JSON object, once it has one.
    body: RefCell<Option<serde_json::Value>>,
    /// The NIC undo's failure, if it failed.
    undo: RefCell<Option<Error>>,
    /// `--verify-restore`'s outcome, when it ran.
    verify: RefCell<Option<Result<()>>>,
    /// Called when the mode listens (a sweep then asks its peer to send).
    on_listening: Option<Notify>,
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
            on_listening: None,
        }
    }

    /// This report, calling `f` once the mode's receiver listens.
    pub(crate) fn on_listening(mut self, f: Box<dyn Fn()>) -> RunReport {
        self.on_listening = Some(Notify(f));
        self
    }

    /// The mode's receiver listens now (see [`on_listening`](Self::on_listening)).
    pub(crate) fn listening(&self) {
        if let Some(f) = &self.on_listening {
            (f.0)();
        }
    }

    /// A copy of the mode's JSON object, once it has one.
    pub(crate) fn body_json(&self) -> Option<serde_json::Value> {
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

    /// Sets the mode's JSON object (written by [`finish`](Self::finish) to `--json FILE`).
    pub(crate) fn body(&self, json: serde_json::Value) {
        *self.body.borrow_mut() = Some(json);
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

    /// The run's verdict from its own `run` result, the NIC undo's and `--verify-restore`'s,
    /// and `--json FILE` written.
    ///
    /// Which error wins:
    /// 1. the run's own error, else the undo's (an undo failure after another error is
    ///    logged);
    /// 2. a NIC that does not match its snapshot fails the run (exit 1), also a run that was
    ///    a skip — a NIC left changed is worse than a skip; a run that failed otherwise keeps
    ///    its own error (the verify failure is logged);
    /// 3. a summary that cannot be written fails a run that succeeded; a run that failed
    ///    keeps its own error (the write failure is logged).
    ///
    /// Without a JSON object of its own (the run ended before its summary: no connection
    /// within `--timeout`, a skip, a refused bind) the file gets
    /// `{"mode", "ok": false, "verdict", "error"}`.
    pub(crate) fn finish(self, run: Result<()>) -> Result<()> {
        let result = match (run, self.undo.into_inner()) {
            (r, None) => r,
            (Ok(()), Some(undo)) => Err(undo),
            (Err(e), Some(undo)) => {
                crate::nic::guards::log_stderr(&undo.to_string());
                Err(e)
            }
        };
        let result = match (result, self.verify.into_inner()) {
            (r, None | Some(Ok(()))) => r,
            // A NIC left changed is worse than a skip: the verify failure decides.
            (Ok(()) | Err(Error::Skip(_)), Some(Err(e))) => Err(e),
            (Err(run), Some(Err(e))) => {
                crate::elog!("{PROGRAM}: {e}");
                Err(run)
            }
        };
        let Some(path) = self.common.json.as_deref() else {
            return result;
        };
        let json = match self.body.into_inner() {
            Some(json) => json,
            None => {
                let err = result.as_ref().err();
                serde_json::json!({
                    "mode": json_mode_name(self.mode),
                    "ok": false,
                    "verdict": verdict_name(&result),
                    "error": err.map(ToString::to_string),
                })
            }
        };
        write_summary(path, &json, result)
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
    }
}

/// `ok`, `skip` or `fail`: the verdict of a run's result, as the JSON summaries name it.
pub(crate) fn verdict_name(result: &Result<()>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::Skip(_)) => "skip",
        Err(_) => "fail",
    }
}

/// Writes `json` to `--json` `path` and combines that with the run's `result`: a run that
/// failed keeps its own error and exit code (the write failure is logged), a run that
/// succeeded fails with the write error.
fn write_summary(path: &Path, json: &serde_json::Value, result: Result<()>) -> Result<()> {
    match (crate::stats::write_json_atomic(path, json), result) {
        (Ok(()), r) => r,
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
        let gone = std::path::Path::new("/nonexistent-dir-ncdevmem/x.json");
        let json = serde_json::json!({"ok": false});
        let e = write_summary(gone, &json, Err(Error::Skip(Missing::ChannelConfig))).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP, "{e}");
        assert_eq!(e.to_string(), format!("skip: {}", Missing::ChannelConfig));
        let e = write_summary(gone, &json, Err(Error::Failure("mismatch".into()))).unwrap_err();
        assert_eq!(e.to_string(), "mismatch");
        let e = write_summary(gone, &json, Ok(())).unwrap_err();
        assert!(e.to_string().starts_with("--json: "), "{e}");
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
}
