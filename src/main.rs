//! `ncdevmem-rs`: parse the command line, run the chosen mode, map the outcome to an exit code.
//! Invoked as `iou-zcrx` (a link), it is that selftest's command line instead
//! ([`ncdevmem::personality`]).
//! Everything else lives in the library (`ncdevmem`).

use std::process::ExitCode;

use ncdevmem::cli::{self, Command, PROGRAM};
use ncdevmem::elog;
use ncdevmem::error::{Error, EXIT_OK};
use ncdevmem::personality::{self, iou_zcrx, Personality};

fn main() -> ExitCode {
    if personality::from_argv0(std::env::args_os().next().as_deref()) == Personality::IouZcrx {
        return ExitCode::from(match args() {
            Ok(argv) => iou_zcrx::main(&argv),
            Err(e) => {
                elog!("{}: {e}", iou_zcrx::NAME);
                iou_zcrx::EXIT_FAIL
            }
        });
    }
    let code = match args().and_then(|argv| cli::parse(&argv, ncdevmem::sys::page_size())) {
        // Help text that cannot be written (stdout full, a pipe without reader) fails the run.
        Ok(Command::Help(text)) => exit_code(ncdevmem::app::print_stdout(&text)),
        Ok(Command::Run(run)) => exit_code(ncdevmem::app::run(&run)),
        Err(e) => {
            elog!("{PROGRAM}: {e}");
            if matches!(e, Error::Usage(_)) {
                elog!("{PROGRAM}: try '{PROGRAM} --help'");
            }
            e.exit_code()
        }
    };
    ExitCode::from(code)
}

/// The exit code of a run that ended with `result`; an error is logged first.
fn exit_code(result: Result<(), Error>) -> u8 {
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            elog!("{PROGRAM}: {e}");
            e.exit_code()
        }
    }
}

/// The arguments after `argv[0]`; one that is not UTF-8 is a usage error (no flag or value of
/// this tool needs other bytes).
fn args() -> Result<Vec<String>, Error> {
    std::env::args_os()
        .skip(1)
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|raw| {
                Error::Usage(format!("argument {} ({raw:?}) is not valid UTF-8", i + 1))
            })
        })
        .collect()
}
