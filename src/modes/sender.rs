//! `--send-pattern BYTES -s ADDR -p PORT`: the built-in plain-TCP pattern sender.

use crate::cli::{Seed, SendStream, SenderArgs, PROGRAM};
use crate::error::Result;
use crate::run_report::RunReport;
use crate::signals::STOP;
use crate::summary::{Body, SendBody, SendFlow, SendFlows};
use crate::tx::{self, PatternSend};
use crate::validate::StreamSpec;

/// Connects, sends the pattern, closes, reports: the summary (bytes, time, rate, CRC-32,
/// CPU) and the JSON body also when the send failed or was stopped (SIGINT/SIGTERM) once
/// connected — then of what was sent so far, and the run still fails. `--progress SECS`: a
/// progress line every SECS.
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
    let f = &a.pattern.flows;
    super::flows::check_cpus(f.cpus.as_deref())?;
    // A congestion control this kernel lacks is known before any connect, as the receivers
    // know it (exit 2), whatever the number of flows.
    if let Some(cc) = &f.tcp_cc {
        super::check_tcp_cc_name(cc)?;
    }
    let flows = tx::SendFlows {
        count: f.count,
        duration: f.duration,
        cpus: f.cpus.clone(),
        tcp_cc: f.tcp_cc.clone(),
    };
    let quiet = report.quiet();
    let progress = a.progress.map(|interval| tx::SendProgress {
        interval,
        line: Box::new(move |line: String| {
            if !quiet {
                crate::elog!("{PROGRAM}: {line}");
            }
        }),
    });
    let cpu_at_start = crate::sys::cpu_time();
    let (stats, result) = tx::send_flows_reporting(&req, &flows, &STOP, progress);
    let cpu = cpu_at_start
        .zip(crate::sys::cpu_time())
        .map(|(a, b)| b.since(a));
    match stats.as_slice() {
        // No flow connected: no summary; the report says why.
        [] => {}
        [one] if !measured(f) => {
            report.summary(&one.summary_line());
            report.body(Body::Send(SendBody::One(one.figures())));
        }
        all => report_flows(all, cpu, report),
    }
    result
}

/// Whether a send of `f` is measured (several flows, or `--duration`, `--cpus`, `--tcp-cc`):
/// it reports each flow and the total; one that is not, its one summary line.
fn measured(f: &crate::cli::Flows) -> bool {
    f.count > 1 || f.duration.is_some() || f.cpus.is_some() || f.tcp_cc.is_some()
}

/// The report of a measured send: one line per flow and one for the total (with the
/// process's CPU time `cpu`; each flow's line has its thread's), and the JSON object with each
/// flow's figures.
fn report_flows(stats: &[tx::SendStats], cpu: Option<crate::stats::CpuTime>, report: &RunReport) {
    let bytes: u64 = stats.iter().map(|s| s.bytes).sum();
    let elapsed = stats.iter().map(|s| s.elapsed).max().unwrap_or_default();
    let gbps = crate::stats::gbit_per_s(bytes, elapsed);
    report.summary(&format!(
        "sent {}: {bytes} bytes in {:.3} s, {gbps:.2} Gbit/s{}",
        crate::figures::count(stats.len() as u64, "flow"),
        elapsed.as_secs_f64(),
        tx::cpu_text(cpu, elapsed),
    ));
    for (k, s) in stats.iter().enumerate() {
        report.summary(&format!("  flow {k}: {}", s.summary_line()));
    }
    report.body(Body::Send(SendBody::Flows(SendFlows {
        bytes,
        elapsed_s: elapsed.as_secs_f64(),
        gbit_per_s: gbps,
        flow_count: stats.len(),
        cpu_user_s: cpu.map(|c| c.user.as_secs_f64()),
        cpu_sys_s: cpu.map(|c| c.sys.as_secs_f64()),
        cpu_utilisation: tx::cpu_share(cpu, elapsed),
        flows: stats
            .iter()
            .enumerate()
            .map(|(k, s)| SendFlow {
                flow: k,
                cpu: s.pinned,
                figures: s.figures(),
            })
            .collect(),
    })));
}

/// The stream a sender sends: `--seed SEED`, `--seed random` (drawn here and printed, so a
/// failing run can be replayed), or `-v N`.
pub(crate) fn sender_stream(stream: SendStream) -> StreamSpec {
    match stream {
        SendStream::Keyed(Seed::Value(seed)) => StreamSpec::keyed(seed),
        SendStream::Keyed(Seed::Random) => {
            let seed: u64 = rand::random();
            // Printed even with --quiet: without it the run cannot be replayed.
            crate::elog!("{PROGRAM}: --seed random: seed {seed} (replay with --seed {seed})");
            StreamSpec::keyed(seed)
        }
        SendStream::Periodic(n) => StreamSpec::Periodic(n),
    }
}
