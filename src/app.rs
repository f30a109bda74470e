//! One run from its parsed command line to its verdict: install the stop-signal handlers,
//! check that `--json FILE` can be written, run the mode (`crate::modes`), and finish its
//! `RunReport` (which decides the verdict among the run's, the NIC undo's and
//! `--verify-restore`'s errors, and writes `--json`). `main` maps the verdict to the exit code
//! ([`Error::exit_code`]).

use std::io::Write;

use crate::cli::Run;
use crate::error::{Error, Result};
use crate::run_report::RunReport;
use crate::signals;

/// Runs `run`. Installs the SIGINT/SIGTERM/SIGHUP handlers first, so every later step can
/// unwind on a signal.
///
/// # Errors
/// The run's verdict as `RunReport::finish` decides it; [`Error::exit_code`] maps it to the
/// process exit code.
pub fn run(run: &Run) -> Result<()> {
    signals::install()?;
    // A summary that cannot be written is known before anything is set up.
    if let Some(path) = &run.common.json {
        crate::stats::check_json_path(path)?;
    }
    let report = RunReport::new(run.mode.mode(), run.common.clone());
    let result = crate::modes::run(&run.mode, &report);
    report.finish(result)
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
