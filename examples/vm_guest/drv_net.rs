//! The kernel's own NIC tests as the judge of the software NIC: drv-net tests of what the
//! module claims to emulate (header split, queues, ntuple rules), unchanged, from the VM
//! kernel's source, each on a fresh `dnic` pair with the other end in a namespace (the drv-net
//! library's netns remote). Each script's KTAP totals must be exactly the ones
//! `tests/vm/devmem-nic/README.md` records, so a change of the module (or of the kernel) that
//! makes a test pass, fail or skip differently shows. `hw/rss_ctx.py` and
//! `hw/pp_alloc_fail.py` are not in the list yet (the README says why).

use std::time::Duration;

use super::super::{CaseResult, Ctx, Outcome};
use super::{drv_net_py, record, DebianRoot, Dnic, HarnessRun};

/// The drv-net tests directory inside the chroot.
const DRV_NET: &str = "/opt/kselftest/tools/testing/selftests/drivers/net";
/// Queues of each pair, the module's maximum (rss_ctx.py's four contexts of two queues each
/// beside the main context's two need ten).
const QUEUES: u32 = 16;
/// The pair ids, one per script.
const FIRST_ID: u32 = 45;

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

/// One kernel test: its path below [`DRV_NET`], how long it may take under TCG, and the totals
/// recorded in `tests/vm/devmem-nic/README.md` (every failure and skip is explained there).
struct DrvNetTest {
    script: &'static str,
    deadline: Duration,
    expected: Totals,
}

const fn totals(pass: u32, fail: u32, skip: u32) -> Totals {
    Totals {
        pass,
        fail,
        skip,
        other: 0,
    }
}

/// The tests, in the order they run.
const TESTS: [DrvNetTest; 3] = [
    // set_xdp and ioctl_set_xdp fail: no xdp_dummy.bpf.o (the suite builds no BPF objects).
    DrvNetTest {
        script: "hds.py",
        deadline: Duration::from_secs(300),
        expected: totals(11, 2, 0),
    },
    DrvNetTest {
        script: "queues.py",
        deadline: Duration::from_secs(300),
        expected: totals(4, 0, 0),
    },
    // Most of the case's time under TCG (the three scripts: about 510 s at host load 7).
    DrvNetTest {
        script: "hw/ntuple.py",
        deadline: Duration::from_secs(1200),
        expected: totals(24, 0, 0),
    },
];

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

/// `devmem-nic/kernel-drv-net` (opt-in: over 8 minutes under TCG): each script of [`TESTS`]
/// on its own 16-queue pair (deleted when its script is done); one line with every script's
/// totals (and the names of its failed tests); a failure when any script's totals differ from
/// the recorded ones, naming each difference. Each script's whole output is saved with the
/// fixtures (`drv-net-<script>.txt`).
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
        let run = drv_net_py(&root, &nic, &path, test.deadline)?;
        record(&format!("drv-net-{name}.txt"), &run.output);
        drop(nic);
        let got = parse_totals(&run.output)
            .ok_or_else(|| format!("{name}: no KTAP totals line; {}", run.failure_lines()))?;
        let failed = named(&run, "not ok");
        let mut entry = format!("{name} {got}");
        if !failed.is_empty() {
            entry.push_str(&format!(" (not ok: {failed})"));
        }
        if got != test.expected {
            wrong.push(format!(
                "{name}: {got}, recorded {} (skipped: {}; {})",
                test.expected,
                named(&run, "SKIP"),
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
