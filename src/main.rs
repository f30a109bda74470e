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
        Ok(Command::Help(text)) => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            // A help text that could not be written (stdout full or closed) is a failure.
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    elog!("{PROGRAM}: {}", Error::io("write(stdout)", &e));
                    ncdevmem::error::EXIT_FAIL
                }
            }
        }
        Ok(Command::Run(config)) => match ncdevmem::app::run(&config) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                elog!("{PROGRAM}: {e}");
                e.exit_code()
            }
        },
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
