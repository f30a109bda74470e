//! `--send-pattern BYTES -s ADDR -p PORT`: the built-in plain-TCP pattern sender.

use crate::cli::{Seed, SendStream, SenderArgs, PROGRAM};
use crate::error::Result;
use crate::run_report::RunReport;
use crate::signals::STOP;
use crate::tx::{self, PatternSend};
use crate::validate::StreamSpec;

/// Connects, sends the pattern, closes, reports.
///
/// Errors: connect (after the retry window), send errors, a stop signal.
pub(crate) fn run(a: &SenderArgs, report: &RunReport) -> Result<()> {
    let req = PatternSend {
        peer: a.peer.remote(),
        local: a.peer.local(),
        ifname: None,
        stream: sender_stream(a.pattern.stream),
        total_bytes: a.pattern.bytes,
        write_size: a.pattern.write_size,
        timeout: a.timeout,
        corrupt_offset: a.pattern.corrupt_offset,
    };
    // A send that failed has no summary of its own: the report says why it ended.
    let stats = tx::send_pattern(&req, &STOP)?;
    report.summary(&stats.summary_line());
    let mut json = stats.to_json();
    json["ok"] = true.into();
    report.body(json);
    Ok(())
}

/// The stream a sender sends: `--seed SEED`, `--seed random` (drawn here and printed, so a
/// failing run can be replayed), or `-v N`.
pub(crate) fn sender_stream(stream: SendStream) -> StreamSpec {
    match stream {
        SendStream::Keyed(Seed::Value(seed)) => StreamSpec::Keyed(seed),
        SendStream::Keyed(Seed::Random) => {
            let seed: u64 = rand::random();
            // Printed even with --quiet: without it the run cannot be replayed.
            crate::elog!("{PROGRAM}: --seed random: seed {seed} (replay with --seed {seed})");
            StreamSpec::Keyed(seed)
        }
        SendStream::Periodic(n) => StreamSpec::Periodic(n),
    }
}
