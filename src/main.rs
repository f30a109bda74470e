//! `ncdevmem-rs`: parse the command line, run the chosen mode, map the outcome to an exit code.
//! Everything else lives in the library (`ncdevmem`).

use std::process::ExitCode;

use ncdevmem::cli::{self, Command, PROGRAM};
use ncdevmem::error::EXIT_OK;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let config = match cli::parse(&argv, ncdevmem::sys::page_size()) {
        Ok(Command::Help(text)) => {
            print!("{text}");
            return ExitCode::from(EXIT_OK);
        }
        Ok(Command::Run(config)) => config,
        Err(e) => {
            eprintln!("{PROGRAM}: {e}");
            eprintln!("{PROGRAM}: try '{PROGRAM} --help'");
            return ExitCode::from(e.exit_code());
        }
    };
    match ncdevmem::app::run(&config) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("{PROGRAM}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
