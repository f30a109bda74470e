//! One run from its parsed command line to its verdict: install the stop-signal handlers,
//! check that `--json FILE` can be written, run the mode (`crate::modes`, or `crate::lab` for a
//! sweep or a peer server), and finish its `RunReport` (which decides the verdict among the run's,
//! the NIC undo's and `--verify-restore`'s errors, and writes `--json`). `main` maps the verdict to
//! the exit code ([`crate::error::Error::exit_code`]).

use crate::cli::{JsonTarget, ModeArgs, Run, PROGRAM};
use crate::error::Result;
use crate::run_report::RunReport;
use crate::signals;

/// For `main`: `--help` goes to stdout the way every report does.
pub use crate::run_report::print_stdout;

/// Runs `run`. Installs the SIGINT/SIGTERM/SIGHUP handlers first, so every later step can
/// unwind on a signal.
///
/// # Errors
/// The run's verdict as `RunReport::finish` decides it; [`crate::error::Error::exit_code`] maps it
/// to the process exit code.
pub fn run(run: &Run) -> Result<()> {
    signals::install()?;
    // A summary that cannot be written is known before anything is set up.
    if let Some(path) = run.common.json.as_ref().and_then(JsonTarget::file) {
        crate::stats::check_json_path(path)?;
    }
    // So is a `--pid-file` that cannot be (it is written once the mode listens).
    let pid_file = run
        .common
        .pid_file
        .as_deref()
        .map(crate::pid_file::PidFile::check)
        .transpose()?;
    let mut report = RunReport::new(run.mode.mode(), run.common.clone());
    if let Some(p) = pid_file {
        report = report.with_pid_file(p);
    }
    // The lab composes single runs: it sits above the modes, so it is dispatched here.
    let result = match &run.mode {
        ModeArgs::Sweep(a) => crate::lab::run(a, &report),
        ModeArgs::PeerServer(a) => crate::lab::peer::run(a, &report),
        ModeArgs::Compare(a) => crate::lab::compare::run(a, &report),
        mode => crate::modes::run(mode, &report),
    };
    let quiet = report.quiet();
    let body = report.body_typed();
    let result = report.finish(result);
    // `--quiet`'s verdict: a failure is the error main prints; a pass is this line.
    if quiet && result.is_ok() {
        crate::elog!(
            "{PROGRAM}: {}",
            crate::run_report::pass_line(run.mode.mode(), body.as_ref())
        );
    }
    result
}
