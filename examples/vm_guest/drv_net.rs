//! The kernel's own NIC tests as the judge of the software NIC: drv-net tests of what the
//! module claims to emulate (header split, queues, ntuple rules), unchanged, from the VM
//! kernel's source, each on a fresh `dnic` pair with the other end in a namespace (the drv-net
//! library's netns remote). Each script's KTAP totals must be exactly the ones
//! `tests/vm/devmem-nic/README.md` records, so a change of the module (or of the kernel) that
//! makes a test pass, fail or skip differently shows, and a skip must give the recorded
//! reason. `hw/rss_ctx.py` is not in the list yet (the README says why).

use std::time::Duration;

use super::super::{CaseResult, Ctx, Outcome};
use super::{drv_net_command, record, DebianRoot, Dnic, HarnessRun};

/// The drv-net tests directory inside the chroot.
const DRV_NET: &str = "/opt/kselftest/tools/testing/selftests/drivers/net";
/// Queues of each pair, the module's maximum (rss_ctx.py's four contexts of two queues each
/// beside the main context's two need ten).
const QUEUES: u32 = 16;
/// The pair ids, one per script.
const FIRST_ID: u32 = 45;
/// Beyond a test's limit: `timeout`'s 30 s to KILL, and the rest of its output.
const KILL_MARGIN: Duration = Duration::from_secs(60);

/// A script's KTAP totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Totals {
    pass: u32,
    fail: u32,
    skip: u32,
    /// xfail, xpass and error, which none of these scripts should report.
    other: u32,
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pass {} fail {} skip {}",
            self.pass, self.fail, self.skip
        )?;
        if self.other > 0 {
            write!(f, " xfail/xpass/error {}", self.other)?;
        }
        Ok(())
    }
}

/// One kernel test: its path below [`DRV_NET`], how long it may take under TCG (the chroot's
/// `timeout` interrupts it then, so the tests it finished keep their KTAP lines and it prints
/// its totals), and the totals recorded in `tests/vm/devmem-nic/README.md` (every failure and
/// skip is explained there), with the reason every skipped test must print (`None`: none may
/// skip).
struct DrvNetTest {
    script: &'static str,
    limit: Duration,
    expected: Totals,
    skip_reason: Option<&'static str>,
}

const fn totals(pass: u32, fail: u32, skip: u32) -> Totals {
    Totals {
        pass,
        fail,
        skip,
        other: 0,
    }
}

/// The tests, in the order they run (about 200 s under TCG at host load 2.5, most of it
/// ntuple.py's 155 s).
const TESTS: [DrvNetTest; 4] = [
    DrvNetTest {
        script: "hds.py",
        limit: Duration::from_secs(300),
        expected: totals(13, 0, 0),
        skip_reason: None,
    },
    DrvNetTest {
        script: "queues.py",
        limit: Duration::from_secs(300),
        expected: totals(4, 0, 0),
        skip_reason: None,
    },
    // Skips where it would arm page pool allocation failures: the Debian kernel has no
    // fail_function (no CONFIG_FUNCTION_ERROR_INJECTION). Its first checks, before that (the
    // queues report rx-alloc-fail; iperf3 gets 4000 packets a second through), pass.
    DrvNetTest {
        script: "hw/pp_alloc_fail.py",
        limit: Duration::from_secs(300),
        expected: totals(0, 0, 1),
        skip_reason: Some("Kernel built without function error injection (or DebugFS)"),
    },
    DrvNetTest {
        script: "hw/ntuple.py",
        limit: Duration::from_secs(1200),
        expected: totals(24, 0, 0),
        skip_reason: None,
    },
];

/// Runs `python3 -u SCRIPT` within LIMIT seconds (`timeout -s INT`: the kernel's ksft_run
/// stops at the interrupted test and still prints its totals; KILL 30 s later), with its
/// stderr on stdout, and after each KTAP result line a `# [N s]` comment: the seconds since
/// the script started, which the saved output keeps (how long each test took under TCG).
const TIMED: &str = r#"limit=$1 script=$2
timeout -s INT -k 30 "$limit" python3 -u "$script" 2>&1 | while IFS= read -r l; do
    printf '%s\n' "$l"
    case $l in "ok "* | "not ok "*) printf '# [%s s]\n' "$SECONDS" ;; esac
done
rc=${PIPESTATUS[0]}
[ "$rc" != 124 ] || printf '# [stopped at the %s s limit]\n' "$limit"
exit "$rc""#;

/// The `# Totals: pass:N fail:N xfail:N xpass:N skip:N error:N` line of a KTAP run.
fn parse_totals(output: &str) -> Option<Totals> {
    let line = output
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("# Totals:"))?;
    let mut t = totals(0, 0, 0);
    let mut seen = 0;
    for word in line.split_whitespace() {
        let (key, value) = word.split_once(':')?;
        let n: u32 = value.parse().ok()?;
        match key {
            "pass" => t.pass = n,
            "fail" => t.fail = n,
            "skip" => t.skip = n,
            "xfail" | "xpass" | "error" => t.other += n,
            _ => return None,
        }
        seen += 1;
    }
    (seen == 6).then_some(t)
}

/// The tests of `run` with verdict `verdict` (`not ok`, `SKIP`), comma-separated.
fn named(run: &HarnessRun, verdict: &str) -> String {
    run.results
        .iter()
        .filter(|(_, v)| v == verdict)
        .map(|(t, _)| t.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// `devmem-nic/kernel-drv-net` (opt-in: over 3 minutes under TCG): each script of [`TESTS`]
/// on its own 16-queue pair (deleted when its script is done); one line with every script's
/// totals (and the names of its failed tests); a failure when any script's totals differ from
/// the recorded ones or a test skips without the recorded reason, naming each difference. Each
/// script's whole output, with the seconds at each test's end, is saved with the fixtures
/// (`drv-net-<script>.txt`).
pub fn kernel_drv_net(ctx: &Ctx) -> CaseResult {
    let mut line = Vec::new();
    let mut wrong = Vec::new();
    let mut nics = Vec::new();
    for id in FIRST_ID..FIRST_ID + TESTS.len() as u32 {
        nics.push(Dnic::with_queues(ctx, id, QUEUES, true)?);
    }
    // Once, after the pairs' namespaces exist: the chroot binds the guest's /run (a second
    // mount after a lazy unmount is refused while the first is still busy).
    let root = DebianRoot::mount()?;
    for (test, nic) in TESTS.iter().zip(nics) {
        let path = format!("{DRV_NET}/{}", test.script);
        let name = test.script.rsplit('/').next().unwrap_or(test.script);
        let limit = test.limit.as_secs().to_string();
        let argv = ["bash", "-c", TIMED, "drv-net", &limit, &path];
        let run = drv_net_command(&root, &nic, &path, &argv, test.limit + KILL_MARGIN)?;
        record(&format!("drv-net-{name}.txt"), &run.output);
        drop(nic);
        let got = parse_totals(&run.output)
            .ok_or_else(|| format!("{name}: no KTAP totals line; {}", run.failure_lines()))?;
        let failed = named(&run, "not ok");
        let mut entry = format!("{name} {got}");
        if !failed.is_empty() {
            entry.push_str(&format!(" (not ok: {failed})"));
        }
        if run.output.contains("# [stopped at the ") {
            entry.push_str(&format!(" (interrupted at its {limit} s limit)"));
        }
        let odd_skips: Vec<&str> = run
            .output
            .lines()
            .filter(|l| l.contains("# SKIP"))
            .filter(|l| test.skip_reason.is_none_or(|why| !l.contains(why)))
            .collect();
        if got != test.expected || !odd_skips.is_empty() {
            wrong.push(format!(
                "{name}: {got}, recorded {} (skipped: {}; skips without the recorded reason \
                 {:?}: {odd_skips:?}; {})",
                test.expected,
                named(&run, "SKIP"),
                test.skip_reason.unwrap_or("(none may skip)"),
                run.failure_lines()
            ));
        }
        line.push(entry);
    }
    let line = line.join("; ");
    if !wrong.is_empty() {
        return Err(format!(
            "{line} -- not the totals tests/vm/devmem-nic/README.md records: {}",
            wrong.join(" | ")
        ));
    }
    Ok(Outcome::Pass(format!(
        "the VM kernel's drv-net tests on a dnic pair, as recorded in \
         tests/vm/devmem-nic/README.md: {line}"
    )))
}
