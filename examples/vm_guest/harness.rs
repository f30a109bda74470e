//! The kernel's own harnesses on the software devmem NIC: devmem.py and iou-zcrx.py with
//! ncdevmem-rs, the kernel's C ncdevmem and C iou-zcrx beside it, the netkit tests and the
//! drv-net tests (`drv_net.rs`), run from the build chroot.

use super::*;
use std::path::Path;
use std::sync::mpsc;

use statrs::statistics::{Data, Max, Median, Min};

#[path = "drv_net.rs"]
pub(super) mod drv_net;

/// Where the runner's chroot (a Debian userland with python3, socat, iproute2, ethtool, the
/// VM kernel's devmem.py and drv-net library, and its C ncdevmem) is mounted.
const DEBIAN: &str = "/debian";

/// The harness's `ncdevmem` is a link to this file (in the guest's /run, bound into the
/// chroot): the binary under test is copied here.
const UNDER_TEST: &str = "/run/ncdevmem-under-test";

/// The kernel's devmem.py inside the chroot.
const DEVMEM_PY: &str = "/opt/kselftest/tools/testing/selftests/drivers/net/hw/devmem.py";

/// The kernel's iou-zcrx.py inside the chroot (its `iou-zcrx` links to [`UNDER_TEST`]).
const IOU_ZCRX_PY: &str = "/opt/kselftest/tools/testing/selftests/drivers/net/hw/iou-zcrx.py";

/// The C ncdevmem built from the VM kernel's source, inside the chroot.
const C_NCDEVMEM: &str = "/opt/kselftest/c-ncdevmem";

/// The C iou-zcrx built from the VM kernel's source (with liburing), inside the chroot.
const C_IOU_ZCRX: &str = "/opt/kselftest/c-iou-zcrx";

/// The kernel's harness runs `iou-zcrx` from its own directory: a link to [`UNDER_TEST`].
const HARNESS_IOU_ZCRX: &str = "/opt/kselftest/tools/testing/selftests/drivers/net/hw/iou-zcrx";

/// Written by the runner for a KERNEL_TREE run: the chroot directory with that tree's harness
/// and C tools, mounted over [`KSELFTEST_DIR`].
const KSELFTEST_OVERRIDE: &str = "/etc/vm-kselftest";

/// The chroot's directory of the kernel's harness and C tools (the prefix of the paths above).
const KSELFTEST_DIR: &str = "/opt/kselftest";

/// How long one devmem.py run may take under TCG.
const HARNESS_DEADLINE: Duration = Duration::from_secs(420);

/// The runner's chroot mounted read-only at [`DEBIAN`] (virtio-9p tag `debian`), with the
/// guest's /proc, /sys, /dev and /run (network namespaces included: mount after creating
/// them) bound into it and a tmpfs /tmp; unmounted on drop.
struct DebianRoot;

impl DebianRoot {
    fn mount() -> Result<DebianRoot, String> {
        let sh = |args: &[&str]| -> Result<(), String> {
            let out = run(Command::new(args[0]).args(&args[1..]))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{}: {}", args.join(" "), output_text(&out).trim()))
            }
        };
        std::fs::create_dir_all(DEBIAN).map_err(|e| format!("mkdir {DEBIAN}: {e}"))?;
        sh(&[
            "mount",
            "-t",
            "9p",
            "-o",
            // cache=loose: the chroot is read-only and the host changes nothing in it while
            // the guest runs, so the guest may keep what it read. Without it every exec from
            // the chroot read its program and libraries over 9p again: 0.11-0.26 s for
            // /bin/true, 1.3-3.5 s for python3 importing socket on an idle host, against 0.01
            // and 0.25 s cached (FLAKES.md: the harness's 5 s listener wait).
            "trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose",
            "debian",
            DEBIAN,
        ])
        .map_err(|e| format!("{e} (the runner shares its chroot over virtio-9p)"))?;
        let root = DebianRoot;
        for d in ["proc", "sys", "dev", "run"] {
            sh(&[
                "mount",
                "-o",
                "rbind",
                &format!("/{d}"),
                &format!("{DEBIAN}/{d}"),
            ])?;
        }
        sh(&["mount", "-t", "tmpfs", "tmpfs", &format!("{DEBIAN}/tmp")])?;
        if let Ok(dir) = std::fs::read_to_string(KSELFTEST_OVERRIDE) {
            sh(&[
                "mount",
                "--bind",
                &format!("{DEBIAN}{}", dir.trim()),
                &format!("{DEBIAN}{KSELFTEST_DIR}"),
            ])
            .map_err(|e| format!("{e} (the KERNEL_TREE's selftests, {KSELFTEST_OVERRIDE})"))?;
        }
        Ok(root)
    }

    /// `chroot /debian env VARS… ARGS…` with Debian's PATH.
    fn command(&self, env: &[(&str, &str)], args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        c.args([DEBIAN, "env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]);
        c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        c.args(args);
        c
    }
}

impl Drop for DebianRoot {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").args(["-l", DEBIAN]));
    }
}

/// One run of the kernel's devmem.py: each test's KTAP result (`ok`, `SKIP`, `not ok`) and
/// the whole output.
#[derive(Default)]
struct HarnessRun {
    results: Vec<(String, String)>,
    output: String,
    /// When each result line arrived ([`uptime`], in the order of `results`; python3 runs
    /// unbuffered) and when the run started.
    times: Vec<f64>,
    started: f64,
    /// Each start of the tool under test, for a run behind the listen wrapper ([`devmem_py`]).
    listen: Vec<ToolStart>,
}

impl HarnessRun {
    fn summary(&self) -> String {
        self.results
            .iter()
            .map(|(t, r)| format!("{t} {r}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The output lines explaining failures: each exception's command and what it printed
    /// (the harness's `# Exception|` lines from `CMD:` on), shortened.
    fn failure_lines(&self) -> String {
        let mut lines = Vec::new();
        let mut in_cmd = false;
        let mut last_exception = None;
        for l in self.output.lines() {
            let Some(rest) = l.strip_prefix("# Exception|") else {
                in_cmd = false;
                continue;
            };
            let rest = rest.trim();
            if !rest.is_empty() {
                last_exception = Some(rest);
            }
            in_cmd |= rest.starts_with("CMD:");
            if in_cmd && !rest.is_empty() && !rest.starts_with("STDERR: using ifindex") {
                lines.push(rest);
            }
        }
        // An exception raised by the harness itself (no command's output): its last line
        // ("Exception: Waiting for port listen timed out").
        if lines.is_empty() {
            lines.extend(last_exception);
        }
        lines.truncate(16);
        lines.join(" | ")
    }
}

/// The binary under test beside its listen wrapper ([`install_listen_wrapper`]).
const UNDER_TEST_BIN: &str = "/run/ncdevmem-under-test.bin";

/// The log the listen wrapper appends to (the guest's /run, bound into the chroot).
const LISTEN_LOG: &str = "/run/ncdevmem-listen.log";

/// The listen wrapper, installed at [`UNDER_TEST`] for devmem.py runs: it appends the tool's
/// start (`/proc/uptime`, its pid, its argv) to [`LISTEN_LOG`], where [`ListenWatch`] finds it,
/// then `exec`s the binary ([`UNDER_TEST_BIN`]) in its own place: same pid, argv, stdin,
/// stdout and exit status, signals reach the tool. Its stderr goes through a FIFO to `tee`,
/// which passes it on and keeps a copy at [`STDERR_COPY`]`PID.txt` (ncdevmem-rs logs its
/// set-up's steps there when it listens: [`setup_brief`]). Besides the shell's builtins it
/// starts only mkfifo before the tool (tee and rm beside it): an earlier wrapper polled for the
/// listen itself, starting grep and sleep every 10 ms in the guest the tool was starting in
/// (FLAKES.md).
const LISTEN_WRAPPER: &str = r#"#!/bin/sh
# Written by vm_guest (examples/vm_guest/harness.rs): logs this start of the tool under test,
# then runs the tool in its place, a copy of its stderr kept.
read -r t0 _ < /proc/uptime
echo "$t0 $$ start $*" >> /run/ncdevmem-listen.log
copy=/run/ncdevmem-stderr-$$
if mkfifo "$copy.fifo" 2>/dev/null; then
    (exec <"$copy.fifo"; rm -f "$copy.fifo"; exec tee "$copy.txt" >&2) &
    exec /run/ncdevmem-under-test.bin "$@" 2>"$copy.fifo"
fi
exec /run/ncdevmem-under-test.bin "$@"
"#;

/// Where the listen wrapper keeps a copy of each start's stderr: this, the tool's pid and
/// `.txt` (the guest's /run, bound into the chroot).
const STDERR_COPY: &str = "/run/ncdevmem-stderr-";

/// How often [`ListenWatch`] looks, and how long it waits for a listener.
const WATCH_TICK: Duration = Duration::from_millis(10);
const WATCH_LIMIT: f64 = 30.0;

/// Times each listener the wrapper starts, from a thread of this program (no process per
/// look): every [`WATCH_TICK`] it reads the starts in its log ([`LISTEN_LOG`]) and, for each
/// start with `-l` and `-p PORT`, the TCP tables of the tool's own network namespace
/// (`/proc/PID/net/tcp` and `tcp6`) until PORT shows LISTEN (state 0A), then appends
/// `T PID listen PORT after S s` to the log; or `exited` when the tool is gone (or a zombie)
/// first, `no-listen` after [`WATCH_LIMIT`] s. Stopped (and joined) on drop.
struct ListenWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ListenWatch {
    /// Starts watching `log` (a path: [`LISTEN_LOG`] in the guest).
    fn start(log: &Path) -> ListenWatch {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let log = log.to_path_buf();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // (pid, port, start time) of each listener not yet decided; pids seen.
            let mut pending: Vec<(u32, u16, f64)> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while !flag.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                for (pid, port, at) in listener_starts(&text) {
                    if seen.insert(pid) {
                        pending.push((pid, port, at));
                    }
                }
                let mut lines = String::new();
                pending.retain(|&(pid, port, at)| {
                    let now = uptime();
                    let secs = now - at;
                    let line = match listen_state(pid, port) {
                        Some(true) => format!("{now:.2} {pid} listen {port} after {secs:.2} s"),
                        None => format!(
                            "{now:.2} {pid} exited {port} after {secs:.2} s without listening"
                        ),
                        Some(false) if secs >= WATCH_LIMIT => {
                            format!("{now:.2} {pid} no-listen {port}: not listening after 30 s")
                        }
                        Some(false) => return true,
                    };
                    lines += &line;
                    lines.push('\n');
                    false
                });
                if !lines.is_empty() {
                    use std::io::Write;
                    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log) {
                        let _ = f.write_all(lines.as_bytes());
                    }
                }
                std::thread::sleep(WATCH_TICK);
            }
        });
        ListenWatch {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ListenWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The listeners' starts in a [`LISTEN_LOG`] text: (pid, port, start time) of each `start`
/// line whose argv has `-l` and `-p PORT`.
fn listener_starts(text: &str) -> Vec<(u32, u16, f64)> {
    parse_listen_log(text)
        .into_iter()
        .filter_map(|s| {
            let args: Vec<&str> = s.argv.split_whitespace().collect();
            if !args.contains(&"-l") {
                return None;
            }
            let port = args
                .windows(2)
                .rev()
                .find(|w| w[0] == "-p")
                .and_then(|w| w[1].parse().ok())?;
            Some((s.pid, port, s.at))
        })
        .collect()
}

/// Whether `port` shows LISTEN in the TCP tables (IPv4 and IPv6) of `pid`'s network
/// namespace; `None` when the process is gone or a zombie.
fn listen_state(pid: u32, port: u16) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (state, _) = parse_stat(&stat)?;
    if state == 'Z' || state == 'X' {
        return None;
    }
    let hex = format!("{port:04X}");
    let listening = ["tcp", "tcp6"].iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].rsplit_once(':').is_some_and(|(_, p)| p == hex) && f[3] == "0A"
            })
    });
    Some(listening)
}

/// Installs `binary` (a guest path) as [`UNDER_TEST_BIN`] and [`LISTEN_WRAPPER`] as
/// [`UNDER_TEST`] (each written beside and renamed over, so a file still running is never
/// rewritten), empties [`LISTEN_LOG`] and removes earlier runs' stderr copies
/// ([`STDERR_COPY`]).
fn install_listen_wrapper(binary: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = format!("{UNDER_TEST_BIN}.tmp");
    std::fs::copy(binary, &tmp).map_err(|e| format!("copy {binary} to {tmp}: {e}"))?;
    std::fs::rename(&tmp, UNDER_TEST_BIN).map_err(|e| format!("rename {tmp}: {e}"))?;
    let tmp = format!("{UNDER_TEST}.tmp");
    std::fs::write(&tmp, LISTEN_WRAPPER).map_err(|e| format!("write {tmp}: {e}"))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {tmp}: {e}"))?;
    std::fs::rename(&tmp, UNDER_TEST).map_err(|e| format!("rename {tmp}: {e}"))?;
    // The stderr copies of earlier runs' starts (pids are reused across runs).
    let (dir, prefix) = STDERR_COPY
        .rsplit_once('/')
        .unwrap_or(("/run", STDERR_COPY));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                std::fs::remove_file(e.path()).ok();
            }
        }
    }
    std::fs::write(LISTEN_LOG, "").map_err(|e| format!("write {LISTEN_LOG}: {e}"))
}

/// One start of the tool under test in [`LISTEN_LOG`].
#[derive(Clone, Debug, PartialEq)]
struct ToolStart {
    /// When it started ([`uptime`]).
    at: f64,
    pid: u32,
    argv: String,
    /// A listener's seconds from its start to listening, or what came instead (`exited
    /// after 2.10 s without listening`, `not listening after 30 s`); `None` for a tool that
    /// does not listen (a TX client) or a listener [`ListenWatch`] wrote nothing of.
    listen: Option<Result<f64, String>>,
    /// ncdevmem-rs's set-up before its listen, from its stderr's copy ([`setup_brief`]).
    setup: Option<String>,
}

/// The starts in a [`LISTEN_LOG`] text, with what [`ListenWatch`] logged of them; lines that are
/// not the wrapper's are passed over.
fn parse_listen_log(text: &str) -> Vec<ToolStart> {
    let mut starts: Vec<ToolStart> = Vec::new();
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        let (Some(at), Some(pid), Some(what)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let (Ok(at), Ok(pid)) = (at.parse::<f64>(), pid.parse::<u32>()) else {
            continue;
        };
        let rest = words.next().unwrap_or("");
        if what == "start" {
            starts.push(ToolStart {
                at,
                pid,
                argv: rest.to_string(),
                listen: None,
                setup: None,
            });
            continue;
        }
        // Pids are not reused within a run's few hundred processes; the latest start wins.
        let Some(start) = starts.iter_mut().rev().find(|s| s.pid == pid) else {
            continue;
        };
        let secs = || {
            rest.split_once(" after ")
                .and_then(|(_, s)| s.split_whitespace().next()?.parse::<f64>().ok())
        };
        start.listen = match what {
            "listen" => secs().map(Ok),
            "exited" => Some(Err(format!(
                "exited after {} s without listening",
                secs().map_or("?".to_string(), |s| format!("{s:.2}"))
            ))),
            "no-listen" => Some(Err("not listening after 30 s".to_string())),
            _ => start.listen.clone(),
        };
    }
    starts
}

/// ncdevmem-rs's set-up line in `stderr` (`ncdevmem-rs: set-up before the listen 4.100 s:
/// start 0.010 s, checks 0.002 s, ..., memory 3.200 s, ...`), or the line of a set-up that
/// ended before its listen (`set-up ended before the listen 5.071 s: ..., queues 0.002 s,
/// unfinished after queues 4.618 s`: stopped by a signal); `None` without either (the C tool).
fn setup_line_in(stderr: &str) -> Option<&str> {
    stderr.lines().find(|l| {
        l.contains("set-up before the listen ") || l.contains("set-up ended before the listen ")
    })
}

/// A set-up line ([`setup_line_in`]) in brief: the total and its two longest steps,
/// `set-up 4.10 s: memory 3.20 s, bind 0.50 s` (`set-up ended 5.07 s: unfinished after queues
/// 4.62 s, start 0.44 s` for one that did not reach its listen); `None` when it does not
/// parse.
fn setup_brief(line: &str) -> Option<String> {
    let (what, line) = match line.split_once("set-up before the listen ") {
        Some((_, rest)) => ("set-up", rest),
        None => (
            "set-up ended",
            line.split_once("set-up ended before the listen ")?.1,
        ),
    };
    let (total, steps) = line.split_once(": ")?;
    let secs = |t: &str| t.trim().strip_suffix(" s")?.parse::<f64>().ok();
    let total = secs(total)?;
    // `NAME SECONDS s`, the name maybe of several words (`unfinished after queues`).
    let mut steps: Vec<(&str, f64)> = steps
        .split(", ")
        .filter_map(|p| {
            let (name, t) = p.trim().strip_suffix(" s")?.rsplit_once(' ')?;
            Some((name, t.parse::<f64>().ok()?))
        })
        .collect();
    steps.sort_by(|a, b| b.1.total_cmp(&a.1));
    let longest: Vec<String> = steps
        .iter()
        .take(2)
        .map(|(n, t)| format!("{n} {t:.2} s"))
        .collect();
    Some(format!("{what} {total:.2} s: {}", longest.join(", ")))
}

/// Per test of `run`: its time (from the previous test's result, the first from the run's
/// start) and the tool's start-to-listen time (min-max over the listeners it started), e.g.
/// `check_rx 14.2 s (listen 0.41 s)`; `-` for a time the run did not give.
fn test_timing(run: &HarnessRun) -> String {
    let mut previous = run.started;
    let mut taken = 0;
    let mut parts = Vec::new();
    for (i, (test, _)) in run.results.iter().enumerate() {
        let Some(&end) = run.times.get(i) else {
            parts.push(format!("{test} -"));
            continue;
        };
        let mut part = if previous > 0.0 && end >= previous {
            format!("{test} {:.1} s", end - previous)
        } else {
            format!("{test} -")
        };
        // The starts before this test's result that no earlier test took.
        let mine: Vec<&ToolStart> = run.listen[taken..]
            .iter()
            .take_while(|s| s.at <= end)
            .collect();
        taken += mine.len();
        previous = end;
        let secs: Vec<f64> = mine.iter().filter_map(|s| s.listen.clone()?.ok()).collect();
        let mut notes = Vec::new();
        if !secs.is_empty() {
            let (lo, hi) = secs
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
            notes.push(if secs.len() == 1 {
                format!("listen {lo:.2} s")
            } else {
                format!("listen {lo:.2}-{hi:.2} s over {}", secs.len())
            });
        }
        // What the slowest listener's set-up spent its time on (ncdevmem-rs only).
        let slowest = mine
            .iter()
            .filter(|s| matches!(s.listen, Some(Ok(_))))
            .max_by(|a, b| {
                let secs = |s: &ToolStart| match s.listen {
                    Some(Ok(t)) => t,
                    _ => 0.0,
                };
                secs(a).total_cmp(&secs(b))
            });
        if let Some(brief) = slowest.and_then(|s| s.setup.clone()) {
            notes.push(match secs.len() {
                1 => brief,
                _ => format!("the slowest's {brief}"),
            });
        }
        // A start that did not listen, with where its set-up's time went when it said.
        notes.extend(mine.iter().filter_map(|s| {
            let failed = s.listen.clone()?.err()?;
            Some(match &s.setup {
                Some(brief) => format!("{failed}: {brief}"),
                None => failed,
            })
        }));
        if !notes.is_empty() {
            part += &format!(" ({})", notes.join(", "));
        }
        parts.push(part);
    }
    parts.join(", ")
}

/// Runs devmem.py with `binary` (a guest path) as its ncdevmem, behind the listen wrapper
/// ([`install_listen_wrapper`]), on `nic` with its peer namespace as the netns remote; `label`
/// names the run ([`wait_harness`]). The run carries each start of the tool and its listen
/// time ([`parse_listen_log`]), and the log, with each test's end, is saved as
/// `<log_label>-listen.txt`.
fn devmem_py(
    root: &DebianRoot,
    nic: &Dnic,
    binary: &str,
    label: &str,
    log_label: &str,
) -> Result<HarnessRun, String> {
    install_listen_wrapper(binary)?;
    let watch = ListenWatch::start(Path::new(LISTEN_LOG));
    let run = drv_net_py(root, nic, DEVMEM_PY, HARNESS_DEADLINE, label);
    drop(watch);
    let log =
        std::fs::read_to_string(LISTEN_LOG).unwrap_or_else(|e| format!("({LISTEN_LOG}: {e})\n"));
    let name = format!("{log_label}-listen.txt");
    let mut run = match run {
        Ok(run) => run,
        // A killed run or one without results: the log as far as it got.
        Err(e) => {
            record(&name, &log);
            return Err(format!("{e}; listen log saved as {name}"));
        }
    };
    run.listen = parse_listen_log(&log);
    let mut setups = String::new();
    for start in &mut run.listen {
        let copy = format!("{STDERR_COPY}{}.txt", start.pid);
        let err = std::fs::read_to_string(&copy).unwrap_or_default();
        if let Some(line) = setup_line_in(&err) {
            setups += &format!("# {} {line}\n", start.pid);
            start.setup = setup_brief(line);
        }
    }
    let mut text = format!(
        "# {LISTEN_LOG}: /proc/uptime, pid, what (the wrapper's start with the tool's argv, or its \
         watch's listen / exited / no-listen)\n# harness started at {:.2}\n{log}",
        run.started
    );
    for ((test, verdict), end) in run.results.iter().zip(&run.times) {
        text += &format!("# {end:.2} harness result: {verdict} {test}\n");
    }
    text += &setups;
    text += &format!("# per test: {}\n", test_timing(&run));
    record(&name, &text);
    Ok(run)
}

/// Runs the kernel's drv-net test `script` (a path in the chroot) with `binary` (a guest path)
/// as the tool it runs (copied to [`UNDER_TEST`], which the chroot's `ncdevmem` and `iou-zcrx`
/// link to), on `nic` with its peer namespace as the netns remote; each test's KTAP verdict is
/// named without the script's prefix (`check_rx`, `test_zcrx.single`). `label` names the run
/// (its `<label>-killed.txt` when killed at its deadline).
fn kernel_py(
    root: &DebianRoot,
    nic: &Dnic,
    script: &str,
    binary: &str,
    label: &str,
) -> Result<HarnessRun, String> {
    std::fs::copy(binary, UNDER_TEST).map_err(|e| format!("copy {binary} to {UNDER_TEST}: {e}"))?;
    drv_net_py(root, nic, script, HARNESS_DEADLINE, label)
}

/// Runs the kernel's drv-net test `script` (a path in the chroot) on `nic` with its peer
/// namespace as the netns remote (the drv-net library's NETIF, LOCAL_V4/V6, REMOTE_V4/V6,
/// REMOTE_TYPE=netns), within `deadline` (a run past it is recorded as `<label>-killed.txt`);
/// each test's KTAP verdict is named without the script's prefix.
fn drv_net_py(
    root: &DebianRoot,
    nic: &Dnic,
    script: &str,
    deadline: Duration,
    label: &str,
) -> Result<HarnessRun, String> {
    drv_net_command(root, nic, script, &["python3", script], deadline, label)
}

/// [`drv_net_py`] with `argv` as the command that runs `script` in the chroot (a wrapper that
/// bounds or annotates it); a run past `deadline` is killed and recorded as `<label>-killed.txt`
/// ([`wait_harness`]).
fn drv_net_command(
    root: &DebianRoot,
    nic: &Dnic,
    script: &str,
    argv: &[&str],
    deadline: Duration,
    label: &str,
) -> Result<HarnessRun, String> {
    let env = [
        ("NETIF", nic.dut.as_str()),
        ("LOCAL_V4", DUT4),
        ("REMOTE_V4", PEER4),
        ("LOCAL_V6", DUT6),
        ("REMOTE_V6", PEER6),
        ("REMOTE_TYPE", "netns"),
        ("REMOTE_ARGS", nic.peer_ns.as_str()),
        // Each result line as it is printed: its arrival times each test.
        ("PYTHONUNBUFFERED", "1"),
    ];
    let child = spawn(&mut root.command(&env, argv))?;
    let done = wait_harness(child, deadline, label)?;
    let output = output_text(&done.out);
    let results = ktap_results(&output);
    if results.is_empty() {
        let file = script.rsplit('/').next().unwrap_or(script);
        return Err(format!(
            "{file} ran no test ({}): {output:?}",
            done.out.status
        ));
    }
    Ok(HarnessRun {
        results,
        output,
        times: result_times(&done),
        started: done.started,
        listen: Vec::new(),
    })
}

/// How long [`wait_harness`] goes on reading a killed harness's output (and waiting for it to
/// be reaped): a process stuck in the kernel keeps its pipes open past SIGKILL.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// The kernel log lines a killed harness's record keeps.
const KILLED_KERNEL_LOG_LINES: usize = 30;

/// One process under a harness as /proc showed it.
#[derive(Clone, Debug)]
struct ProcState {
    pid: u32,
    ppid: u32,
    /// The state letter of `/proc/PID/stat` (R, S, D, T, Z, …).
    state: char,
    /// `/proc/PID/wchan`: the kernel function it sleeps in (`0` when running).
    wchan: String,
    /// `/proc/PID/stack`: its kernel stack (root only), or why it could not be read.
    stack: String,
    /// Its command line, arguments joined by blanks (`[comm]` for a kernel thread or zombie).
    cmdline: String,
}

impl ProcState {
    /// `pid`'s state now; `None` once it is gone.
    fn read(pid: u32) -> Option<ProcState> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid) = parse_stat(&stat)?;
        let text = |f: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/{f}"))
                .map(|t| t.trim_end().to_string())
                .unwrap_or_else(|e| format!("({f}: {e})"))
        };
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut cmdline = args
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        if cmdline.is_empty() {
            let comm = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')'));
            cmdline = format!("[{}]", comm.map_or("?", |(c, _)| c));
        }
        Some(ProcState {
            pid,
            ppid,
            state,
            wchan: text("wchan"),
            stack: text("stack"),
            cmdline,
        })
    }

    /// `pid 812 (python3 /opt/…/devmem.py): state S, wchan do_select`, the command line
    /// shortened to 60 characters.
    fn short(&self) -> String {
        let mut cmd: String = self.cmdline.chars().take(60).collect();
        if cmd.len() < self.cmdline.len() {
            cmd.push('…');
        }
        format!(
            "pid {} ({cmd}): state {}, wchan {}",
            self.pid, self.state, self.wchan
        )
    }
}

/// The state letter and parent pid of a `/proc/PID/stat` line, read after the command's last
/// `)` (a command name may hold blanks and parentheses).
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut words = rest.split_whitespace();
    let state = words.next()?.chars().next()?;
    let ppid = words.next()?.parse().ok()?;
    Some((state, ppid))
}

/// `root` and every process under it (its children, theirs, …), parents before their
/// children, from each process's parent in `/proc/PID/stat`.
fn process_tree(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| {
                let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                Some((pid, parse_stat(&stat)?.1))
            })
            .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for (pid, _) in parents.iter().filter(|(p, pp)| *pp == parent && *p != root) {
            if !tree.contains(pid) {
                tree.push(*pid);
            }
        }
        i += 1;
    }
    tree
}

/// Stops `root` and every process under it (SIGSTOP, the tree walked again until no new
/// process appears, so none forks past the walk), then kills them all (SIGKILL); the pids
/// signalled.
fn kill_tree(root: u32) -> Vec<u32> {
    let mut seen: Vec<u32> = Vec::new();
    for _ in 0..10 {
        let new: Vec<u32> = process_tree(root)
            .into_iter()
            .filter(|p| !seen.contains(p))
            .collect();
        if new.is_empty() {
            break;
        }
        for &pid in &new {
            // SAFETY: kill(2) with a pid read from /proc and a valid signal.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
        seen.extend(new);
    }
    for &pid in &seen {
        // SAFETY: as above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    seen
}

/// The last `n` lines of the kernel log (`/dev/kmsg`, read without blocking) as `[seconds]
/// message`, or one line saying why it could not be read.
fn kernel_log_tail(n: usize) -> Vec<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
    {
        Ok(f) => f,
        Err(e) => return vec![format!("(/dev/kmsg: {e})")],
    };
    let mut lines = std::collections::VecDeque::new();
    let mut record = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut record) {
            Ok(0) => break,
            Ok(len) => {
                // `PRIO,SEQ,MICROSECONDS,FLAGS;MESSAGE\n` then ` KEY=VALUE` lines.
                let text = String::from_utf8_lossy(&record[..len]);
                let first = text.lines().next().unwrap_or("");
                let (head, message) = first.split_once(';').unwrap_or(("", first));
                let usecs: u64 = head
                    .split(',')
                    .nth(2)
                    .and_then(|u| u.parse().ok())
                    .unwrap_or(0);
                lines.push_back(format!(
                    "[{:5}.{:06}] {message}",
                    usecs / 1_000_000,
                    usecs % 1_000_000
                ));
                if lines.len() > n {
                    lines.pop_front();
                }
            }
            // EPIPE: a record was overwritten while reading; go on with the next.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                lines.push_back(format!("(/dev/kmsg: {e})"));
                break;
            }
        }
    }
    lines.into()
}

/// A pipe read to its end by a thread of its own, what it read so far shared, with the time
/// ([`uptime`]) each line's end arrived.
struct Drain {
    read: std::sync::Arc<std::sync::Mutex<(Vec<u8>, Vec<f64>)>>,
    done: mpsc::Receiver<()>,
}

impl Drain {
    fn start(mut pipe: impl std::io::Read + Send + 'static) -> Drain {
        let read = std::sync::Arc::new(std::sync::Mutex::new((Vec::new(), Vec::new())));
        let (tx, done) = mpsc::channel();
        let shared = read.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let now = uptime();
                        let mut r = shared.lock().unwrap_or_else(|e| e.into_inner());
                        let ends = chunk[..n].iter().filter(|b| **b == b'\n').count();
                        r.0.extend_from_slice(&chunk[..n]);
                        r.1.extend(std::iter::repeat_n(now, ends));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
        Drain { read, done }
    }

    /// Waits until `until` for the pipe's end; whether it came.
    fn ended_by(&self, until: Instant) -> bool {
        !matches!(
            self.done
                .recv_timeout(until.saturating_duration_since(Instant::now())),
            Err(mpsc::RecvTimeoutError::Timeout)
        )
    }

    /// What was read so far and the time each line's end arrived.
    fn taken(&self) -> (Vec<u8>, Vec<f64>) {
        self.read.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Seconds since boot (`/proc/uptime`, 10 ms steps: the clock the listen wrapper reads);
/// 0 when it cannot be read.
fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A harness run that ended: its output, with the time ([`uptime`]) each stdout line's end
/// arrived and the time it was started.
struct HarnessOutput {
    out: Output,
    stdout_times: Vec<f64>,
    started: f64,
}

/// A harness run stopped at its deadline by [`wait_killing`], and what it left.
struct Killed {
    /// Why it was stopped (`past its 420 s deadline`).
    why: String,
    /// Each process under the harness (the harness first) at the deadline.
    procs: Vec<ProcState>,
    /// The kernel log's last lines at the deadline.
    kernel_log: Vec<String>,
    /// What it wrote before it was killed and within [`AFTER_KILL`] after.
    stdout: String,
    stderr: String,
    /// Whether both pipes reached their end within [`AFTER_KILL`] of the kill.
    output_ended: bool,
    /// The processes signalled that were still there (not gone, not zombies) [`AFTER_KILL`]
    /// after the kill.
    survivors: Vec<ProcState>,
}

impl Killed {
    /// The last non-blank line it wrote (stderr's when stdout has none).
    fn last_line(&self) -> Option<&str> {
        self.stdout
            .lines()
            .chain(self.stderr.lines())
            .rev()
            .find(|l| !l.trim().is_empty())
    }

    /// The `<label>-killed.txt` record: every process with its state, wchan, kernel stack and
    /// command line; the kernel log's tail; the output so far.
    fn report(&self, label: &str) -> String {
        let mut t = format!("{label}: killed {}\n\nprocesses under the harness at the deadline (the harness first):\n", self.why);
        for p in &self.procs {
            t += &format!(
                "\npid {} ppid {} state {} wchan {}\n  cmdline: {}\n  kernel stack:\n",
                p.pid, p.ppid, p.state, p.wchan, p.cmdline
            );
            for l in p.stack.lines() {
                t += &format!("    {l}\n");
            }
        }
        if !self.survivors.is_empty() {
            t += &format!("\nstill there {} s after SIGKILL:\n", AFTER_KILL.as_secs());
            for p in &self.survivors {
                t += &format!("  {}\n", p.short());
            }
        }
        t += &format!("\nkernel log at the deadline (last {KILLED_KERNEL_LOG_LINES} lines):\n");
        for l in &self.kernel_log {
            t += &format!("  {l}\n");
        }
        if !self.output_ended {
            t += &format!(
                "\n(the output had not ended {} s after SIGKILL: what follows is what was read by then)\n",
                AFTER_KILL.as_secs()
            );
        }
        t += "\nstdout so far:\n";
        t += &self.stdout;
        t += "\nstderr so far:\n";
        t += &self.stderr;
        t
    }

    /// The error a case reports: each process's state and wchan, the last output line, the
    /// record's name.
    fn message(&self, label: &str) -> String {
        let procs: Vec<String> = self.procs.iter().map(ProcState::short).collect();
        let mut m = format!(
            "{label}: killed {} with the processes under it: {}",
            self.why,
            procs.join("; ")
        );
        if !self.survivors.is_empty() {
            let pids: Vec<String> = self.survivors.iter().map(|p| p.pid.to_string()).collect();
            m += &format!(
                "; still there {} s after SIGKILL: pid {}",
                AFTER_KILL.as_secs(),
                pids.join(", ")
            );
        }
        m += &format!(
            "; last output line {:?}; processes, kernel stacks, kernel log and output saved as \
             {label}-killed.txt",
            self.last_line().unwrap_or("")
        );
        m
    }
}

/// Waits for the harness `child` (its stdout and stderr piped) at most `limit`, reading its
/// output meanwhile. Past the limit, records every process under it ([`ProcState`]) and the
/// kernel log's tail, kills the whole tree ([`kill_tree`]) and reads what is left of its output
/// for at most [`AFTER_KILL`] more.
fn wait_killing(mut child: Child, limit: Duration) -> Result<HarnessOutput, Box<Killed>> {
    let started = uptime();
    let deadline = Instant::now() + limit;
    let out = Drain::start(child.stdout.take().expect("stdout piped"));
    let err = Drain::start(child.stderr.take().expect("stderr piped"));
    let why = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                // A process the harness left behind may hold its pipes open: read them until
                // the deadline (at least AFTER_KILL), then take what came.
                let until = deadline.max(Instant::now() + AFTER_KILL);
                let ended = out.ended_by(until) & err.ended_by(until);
                let (stdout, stdout_times) = out.taken();
                let (mut stderr, _) = err.taken();
                if !ended {
                    stderr.extend_from_slice(
                        b"\n# [vm_guest: the harness exited; its output was still open at the \
                          deadline]\n",
                    );
                }
                return Ok(HarnessOutput {
                    out: Output {
                        status,
                        stdout,
                        stderr,
                    },
                    stdout_times,
                    started,
                });
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => break format!("past its {} s deadline", limit.as_secs()),
            Err(e) => break format!("after waiting for it failed ({e})"),
        }
    };
    let procs: Vec<ProcState> = process_tree(child.id())
        .into_iter()
        .filter_map(ProcState::read)
        .collect();
    let kernel_log = kernel_log_tail(KILLED_KERNEL_LOG_LINES);
    let signalled = kill_tree(child.id());
    // Not gone and not a zombie: still exiting, or stuck in the kernel.
    let alive = |pid: &u32| ProcState::read(*pid).filter(|p| p.state != 'Z');
    let until = Instant::now() + AFTER_KILL;
    while Instant::now() < until
        && (matches!(child.try_wait(), Ok(None)) || signalled.iter().any(|p| alive(p).is_some()))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let output_ended = out.ended_by(until) & err.ended_by(until);
    let survivors = signalled.iter().filter_map(alive).collect();
    Err(Box::new(Killed {
        why,
        procs,
        kernel_log,
        stdout: String::from_utf8_lossy(&out.taken().0).into_owned(),
        stderr: String::from_utf8_lossy(&err.taken().0).into_owned(),
        output_ended,
        survivors,
    }))
}

/// [`wait_killing`] for a harness run named `label`: a run killed at its deadline is recorded
/// as `<label>-killed.txt` ([`Killed::report`]) and is an error naming each process's state
/// and wchan, the last output line and the record. A killed run is never run again
/// ([`run_again_if_harness`] reruns only a run that ended).
fn wait_harness(child: Child, deadline: Duration, label: &str) -> Result<HarnessOutput, String> {
    wait_killing(child, deadline).map_err(|k| {
        record(&format!("{label}-killed.txt"), &k.report(label));
        k.message(label)
    })
}

/// When each KTAP result line of `done`'s stdout arrived, in order.
fn result_times(done: &HarnessOutput) -> Vec<f64> {
    String::from_utf8_lossy(&done.out.stdout)
        .lines()
        .zip(&done.stdout_times)
        .filter(|(l, _)| l.starts_with("ok ") || l.starts_with("not ok "))
        .map(|(_, t)| *t)
        .collect()
}

/// Each KTAP result line's test (without the script's prefix) and verdict (`ok`, `SKIP`,
/// `not ok`).
fn ktap_results(output: &str) -> Vec<(String, String)> {
    let mut results = Vec::new();
    for line in output.lines() {
        let (verdict, rest) = if let Some(r) = line.strip_prefix("not ok ") {
            ("not ok", r)
        } else if let Some(r) = line.strip_prefix("ok ") {
            ("ok", r)
        } else {
            continue;
        };
        let mut words = rest.split_whitespace().skip(1);
        let full = words.next().unwrap_or("?");
        let name = full.split_once('.').map_or(full, |(_, n)| n);
        let verdict = if line.contains("# SKIP") {
            "SKIP"
        } else {
            verdict
        };
        results.push((name.to_string(), verdict.to_string()));
    }
    results
}

/// Whether harness run `r` failed in the kernel's harness itself, inside one of its own fixed
/// waits or in its own tools, never in the tool under test: its socat binding a port still in
/// TIME_WAIT (socat's own `Address already in use`), its fixed 5 s wait for a listener (socat
/// on the remote in the TX tests, the tool after its NIC setup in the RX tests), or its 20 s
/// limit on a command that does not run the tool under test (its traffic generators: socat,
/// dd, a shell loop) running out on a loaded host under TCG. A command of the harness that
/// runs the tool (`ncdevmem`, `iou-zcrx`) and did not end in time is the tool's failure: no
/// rerun hides a tool that hangs.
fn harness_own(r: &HarnessRun) -> bool {
    let runs_the_tool = |l: &str| l.contains("ncdevmem") || l.contains("iou-zcrx");
    r.output.lines().any(|l| {
        (l.contains("socat") && l.contains("Address already in use"))
            || l.contains("Waiting for port listen timed out")
            || (l.contains("subprocess.TimeoutExpired: Command '") && !runs_the_tool(l))
    })
}

/// The kernel's devmem.py, unchanged, with ncdevmem-rs as its ncdevmem, the software NIC as
/// NETIF and a netns remote: check_rx, check_tx, check_tx_chunks, check_rx_hds and
/// check_rx_large_niov must all pass (not skip). A failure that is the harness's own (its
/// socat binds a random port that an earlier connection of the remote still holds in
/// TIME_WAIT, or one of its fixed waits for a listener or a command runs out on a loaded
/// host) runs it again, up to [`DEVMEM_PY_RUNS`] runs, and says so; the last run must pass.
pub(super) fn kernel_devmem_py(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 31, true)?;
    let root = DebianRoot::mount()?;
    let label = "devmem-py-ncdevmem-rs";
    let bin = ctx.bin.to_string_lossy();
    // Each run's timing (and listen log), apart.
    let mut timings = Vec::new();
    let (run1, first) = run_again_if_harness(label, 5, DEVMEM_PY_RUNS, || {
        let log_label = match timings.len() {
            0 => label.to_string(),
            n => format!("{label}-{}", n + 1),
        };
        let r = devmem_py(&root, &nic, &bin, label, &log_label)?;
        timings.push(test_timing(&r));
        Ok(r)
    })?;
    let timing = match timings.as_slice() {
        [] => String::new(),
        [one] => format!(
            "; per test (time; the tool's start to listen): {one}; listen log saved as \
             {label}-listen.txt"
        ),
        all => {
            let runs: Vec<String> = all
                .iter()
                .enumerate()
                .map(|(i, t)| format!("run {}: {t}", i + 1))
                .collect();
            let logs: Vec<String> = (0..all.len())
                .map(|i| match i {
                    0 => format!("{label}-listen.txt"),
                    n => format!("{label}-{}-listen.txt", n + 1),
                })
                .collect();
            format!(
                "; per test (time; the tool's start to listen): {}; listen logs saved as {}",
                runs.join("; "),
                logs.join(", ")
            )
        }
    };
    let note = rerun_note(label, &first);
    record(&format!("{label}.txt"), &run1.output);
    if !all_passed(&run1, 5) {
        return Err(format!(
            "devmem.py with ncdevmem-rs: {}; {}{note}{timing}",
            run1.summary(),
            run1.failure_lines()
        ));
    }
    Ok(Outcome::Pass(format!(
        "the VM kernel's devmem.py, unchanged, with ncdevmem-rs: {}{note}{timing}",
        run1.summary()
    )))
}

/// The tests of the kernel's iou-zcrx.py.
const IOU_ZCRX_TESTS: [&str; 5] = [
    "test_zcrx.single",
    "test_zcrx.rss",
    "test_zcrx_oneshot.single",
    "test_zcrx_oneshot.rss",
    "test_zcrx_large_chunks",
];

/// The kernel's iou-zcrx.py, unchanged, with ncdevmem-rs as its `iou-zcrx` (the chroot's
/// `iou-zcrx` links to the binary, so it runs under that name: [`ncdevmem::personality`]), the
/// software NIC as NETIF and a netns remote: every test must pass (not skip), and every frame
/// with payload must have been split on the harness's target queue (the last one, [`BOUND`]):
/// zcrx copies what arrives on other queues, so a pass alone would not show the steering
/// (the rss variants' through an additional RSS context) worked.
pub(super) fn kernel_iou_zcrx_py(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 33, true)?;
    let root = DebianRoot::mount()?;
    let bin = ctx.bin.to_string_lossy();
    let run1 = kernel_py(&root, &nic, IOU_ZCRX_PY, &bin, "iou-zcrx-py-ncdevmem-rs")?;
    let all_ok = |r: &HarnessRun| {
        let names: Vec<&str> = r.results.iter().map(|(t, _)| t.as_str()).collect();
        names == IOU_ZCRX_TESTS && r.results.iter().all(|(_, v)| v == "ok")
    };
    record("iou-zcrx-py-ncdevmem-rs.txt", &run1.output);
    if !all_ok(&run1) {
        return Err(format!(
            "iou-zcrx.py with ncdevmem-rs: {}; {}",
            run1.summary(),
            run1.failure_lines()
        ));
    }
    let q = nic.queue_stats()?;
    only_bound_queue_split(&q)?;
    Ok(Outcome::Pass(format!(
        "the VM kernel's iou-zcrx.py, unchanged, with ncdevmem-rs as iou-zcrx: {}; all {} \
         split frames on queue {BOUND}",
        run1.summary(),
        q[BOUND].split
    )))
}

/// How a command enters the runner's Debian root ([`DEBIAN`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum RootMode {
    /// `chroot(2)`: the kernel refuses `unshare(CLONE_NEWUSER)` to a chrooted process.
    Chroot,
    /// A mount namespace of its own whose root `pivot_root(2)` makes the Debian root.
    Pivot,
    /// A mount namespace of its own with the Debian root's `/usr`, `/etc`, `/opt`, `/var` (and
    /// `/bin`, `/sbin`, `/lib`, `/lib64`, merged into `/usr` on trixie) bound over the guest's.
    Bind,
}

/// The Debian root's directories [`RootMode::Bind`] binds over the guest root's (created in
/// the guest root first when missing).
const BIND_DIRS: [(&std::ffi::CStr, &std::ffi::CStr); 8] = [
    (c"/debian/usr", c"/usr"),
    (c"/debian/usr/bin", c"/bin"),
    (c"/debian/usr/sbin", c"/sbin"),
    (c"/debian/usr/lib", c"/lib"),
    (c"/debian/usr/lib64", c"/lib64"),
    (c"/debian/etc", c"/etc"),
    (c"/debian/opt", c"/opt"),
    (c"/debian/var", c"/var"),
];

/// `Err(errno)` of a libc call that returned -1.
fn os_check(rc: libc::c_long) -> std::io::Result<()> {
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// In the child between fork and exec: a mount namespace of its own (nothing propagating back
/// to the guest's), then the Debian root as its root, by `mode`. Only system calls on static
/// strings (async-signal-safe).
fn enter_root(mode: RootMode) -> std::io::Result<()> {
    // SAFETY: plain system calls on NUL-terminated static strings and null pointers where the
    // kernel takes none; nothing is allocated or locked between fork and exec.
    unsafe {
        os_check(libc::unshare(libc::CLONE_NEWNS).into())?;
        os_check(
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
            .into(),
        )?;
        match mode {
            RootMode::Chroot => {}
            RootMode::Pivot => {
                // pivot_root(".", "."): the old root ends up on top of the new one, and the
                // lazy unmount of "." takes it away (pivot_root(2), NOTES).
                os_check(libc::chdir(c"/debian".as_ptr()).into())?;
                os_check(libc::syscall(
                    libc::SYS_pivot_root,
                    c".".as_ptr(),
                    c".".as_ptr(),
                ))?;
                os_check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH).into())?;
                os_check(libc::chdir(c"/".as_ptr()).into())?;
            }
            RootMode::Bind => {
                for (from, to) in BIND_DIRS {
                    os_check(
                        libc::mount(
                            from.as_ptr(),
                            to.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        )
                        .into(),
                    )?;
                }
                os_check(libc::chdir(c"/".as_ptr()).into())?;
            }
        }
    }
    Ok(())
}

impl DebianRoot {
    /// `env VARS… ARGS…` (Debian's `env`, with Debian's PATH) in the Debian root entered by
    /// `mode`.
    fn command_in(&self, mode: RootMode, env: &[(&str, &str)], args: &[&str]) -> Command {
        if mode == RootMode::Chroot {
            return self.command(env, args);
        }
        let mut c = Command::new("/usr/bin/env");
        c.arg("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
        c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        c.args(args);
        // SAFETY: enter_root makes only async-signal-safe system calls.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, move || enter_root(mode));
        }
        c
    }

    /// The first way into the Debian root (pivot_root, then bind mounts) in which the kernel
    /// lets `unshare --user --net --map-root-user` (what the kernel library's `UserNetNS` runs)
    /// create a user namespace, and what each way answered before it.
    fn userns_mode(&self) -> Result<(RootMode, String), String> {
        for d in ["/opt", "/var", "/sbin", "/lib64"] {
            std::fs::create_dir_all(d).map_err(|e| format!("mkdir {d}: {e}"))?;
        }
        let mut answers = Vec::new();
        for mode in [RootMode::Chroot, RootMode::Pivot, RootMode::Bind] {
            let probe = ["unshare", "--user", "--net", "--map-root-user", "true"];
            match run(&mut self.command_in(mode, &[], &probe)) {
                Ok(out) if out.status.success() => {
                    answers.push(format!("{mode:?}: unshare --user works"));
                    return Ok((mode, answers.join("; ")));
                }
                Ok(out) => answers.push(format!(
                    "{mode:?}: {} ({})",
                    output_text(&out).trim(),
                    out.status
                )),
                Err(e) => answers.push(format!("{mode:?}: {e}")),
            }
        }
        Err(format!(
            "no way into the Debian root lets unshare(CLONE_NEWUSER) work: {}",
            answers.join("; ")
        ))
    }

    /// Our py/ scripts (the initramfs's [`GUEST_PY`]) in the harness's tree, in
    /// `hw/ncdevmem-rs/` (the runner makes that directory; a tmpfs goes over it), where they
    /// find the kernel library; unmounted with the root.
    fn add_our_py(&self) -> Result<(), String> {
        let dir = format!("{DEBIAN}{OUR_PY_DIR}");
        let out = run(Command::new("mount").args(["-t", "tmpfs", "tmpfs", &dir]))?;
        if !out.status.success() {
            return Err(format!(
                "mount tmpfs on {dir}: {}",
                output_text(&out).trim()
            ));
        }
        let entries = std::fs::read_dir(GUEST_PY).map_err(|e| format!("{GUEST_PY}: {e}"))?;
        for e in entries {
            let e = e.map_err(|e| format!("{GUEST_PY}: {e}"))?;
            let to = format!("{dir}/{}", e.file_name().to_string_lossy());
            std::fs::copy(e.path(), &to).map_err(|err| format!("copy to {to}: {err}"))?;
        }
        // The kernel library looks for its BPF objects beside the script it runs (and in
        // hw/ below that): a VM run of our nk_devmem.py there skipped with "BPF prog
        // nk_forward.bpf.o not found".
        for obj in ["nk_forward.bpf.o", "nk_primary_rx_redirect.bpf.o"] {
            let from = format!("{DEBIAN}{HW_DIR}/{obj}");
            let to = format!("{dir}/{obj}");
            std::fs::copy(&from, &to).map_err(|err| format!("copy {from} to {to}: {err}"))?;
        }
        Ok(())
    }
}

/// py/'s scripts in the initramfs (tests/vm/run.sh copies them).
const GUEST_PY: &str = "/usr/share/ncdevmem-rs/py";

/// Where the harness's tree takes them (inside the Debian root).
const OUR_PY_DIR: &str = "/opt/kselftest/tools/testing/selftests/drivers/net/hw/ncdevmem-rs";

/// The kernel's netkit devmem tests and its netkit queue-lease test, inside the Debian root.
const HW_DIR: &str = "/opt/kselftest/tools/testing/selftests/drivers/net/hw";

/// The environment of the kernel's netkit tests (NetDrvContEnv) on `nic`: IPv6 only, the peer
/// namespace as a netns remote, the netkit guest's prefix 2001:db8:2::/64.
fn nk_env<'a>(nic: &'a Dnic<'_>) -> [(&'a str, &'a str); 6] {
    [
        ("NETIF", nic.dut.as_str()),
        ("LOCAL_V6", DUT6),
        ("REMOTE_V6", PEER6),
        ("REMOTE_TYPE", "netns"),
        ("REMOTE_ARGS", nic.peer_ns.as_str()),
        ("LOCAL_PREFIX_V6", "2001:db8:2::/64"),
    ]
}

/// The sysctls the kernel's NetDrvContEnv sets for its netkit pair (forwarding 1, accept_ra
/// 2) and puts back in its `__del__`, which a killed harness never reaches.
const NK_SYSCTLS: [&str; 2] = [
    "/proc/sys/net/ipv6/conf/all/forwarding",
    "/proc/sys/net/ipv6/conf/all/accept_ra",
];

/// Where `ip netns` keeps its named namespaces (the harness's `NetNS`, the `init` it
/// attaches).
const NETNS_DIR: &str = "/run/netns";

/// What a netkit harness run may leave behind when it is killed before its own teardown:
/// taken before the run ([`NkLeftovers::take`]); [`NkLeftovers::clean`] after a killed run
/// deletes the netkit devices and named namespaces the run added and puts back
/// [`NK_SYSCTLS`].
struct NkLeftovers {
    netkit: Vec<String>,
    netns: Vec<String>,
    sysctls: Vec<(&'static str, String)>,
}

impl NkLeftovers {
    fn take(ctx: &Ctx) -> Result<NkLeftovers, String> {
        let mut sysctls = Vec::new();
        for path in NK_SYSCTLS {
            let v = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
            sysctls.push((path, v.trim().to_string()));
        }
        Ok(NkLeftovers {
            netkit: netkit_links(&ip(ctx, &["-j", "-d", "link", "show"])?)?,
            netns: named_netns(),
            sysctls,
        })
    }

    /// Deletes the netkit devices and named namespaces that are new since
    /// [`NkLeftovers::take`] and puts back the sysctls that changed; what it did (and what
    /// failed) in one clause for the case line.
    fn clean(&self, ctx: &Ctx) -> String {
        let mut done = Vec::new();
        let mut failed = Vec::new();
        match ip(ctx, &["-j", "-d", "link", "show"]).and_then(|j| netkit_links(&j)) {
            Ok(now) => {
                let added: Vec<&String> = now.iter().filter(|n| !self.netkit.contains(n)).collect();
                let mut deleted = Vec::new();
                for name in added {
                    // Deleting one end of a pair deletes its peer too: a peer already gone
                    // is not a failure.
                    match ip(ctx, &["link", "del", "dev", name]) {
                        Ok(_) => deleted.push(name.as_str()),
                        Err(_) if !Path::new(&format!("/sys/class/net/{name}")).exists() => {
                            deleted.push(name.as_str())
                        }
                        Err(e) => failed.push(e),
                    }
                }
                if !deleted.is_empty() {
                    done.push(format!("netkit {}", deleted.join(", ")));
                }
            }
            Err(e) => failed.push(e),
        }
        let mut deleted = Vec::new();
        for name in named_netns()
            .into_iter()
            .filter(|n| !self.netns.contains(n))
        {
            match ip(ctx, &["netns", "del", &name]) {
                Ok(_) => deleted.push(name),
                Err(e) => failed.push(e),
            }
        }
        if !deleted.is_empty() {
            done.push(format!("netns {}", deleted.join(", ")));
        }
        for (path, was) in &self.sysctls {
            let now = std::fs::read_to_string(path).unwrap_or_default();
            if now.trim() == was {
                continue;
            }
            let name = path.trim_start_matches("/proc/sys/").replace('/', ".");
            match std::fs::write(path, was) {
                Ok(()) => done.push(format!("{name} {} back to {was}", now.trim())),
                Err(e) => failed.push(format!("write {was} to {path}: {e}")),
            }
        }
        let mut line = if done.is_empty() {
            "the killed run left no netkit device, named netns or changed sysctl".to_string()
        } else {
            format!("removed what the killed run left: {}", done.join("; "))
        };
        if !failed.is_empty() {
            line += &format!(" (could not: {})", failed.join("; "));
        }
        line
    }
}

/// The netkit devices (`linkinfo.info_kind` `netkit`) of `ip -j -d link show`'s output.
fn netkit_links(json: &str) -> Result<Vec<String>, String> {
    let links: Value =
        serde_json::from_str(json).map_err(|e| format!("ip -j -d link show: {e}: {json:?}"))?;
    let links = links
        .as_array()
        .ok_or_else(|| format!("ip -j -d link show: not a list: {json:?}"))?;
    Ok(links
        .iter()
        .filter(|l| l["linkinfo"]["info_kind"] == "netkit")
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect())
}

/// The named network namespaces ([`NETNS_DIR`]'s entries; none when it does not exist).
fn named_netns() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_string()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// One run of `script` (a path in the Debian root) with python3 in the root entered by
/// `mode`, `env` set and ncdevmem-rs copied to [`UNDER_TEST`] (the harness's `ncdevmem` and
/// `iou-zcrx`; py/'s scripts take it from `NCDEVMEM`); the output is recorded as
/// `<label>.txt`. A run that prints no KTAP result is an error with its output. A run killed
/// at its deadline ([`wait_harness`]) is an error that also says what [`NkLeftovers`] removed
/// of what it left.
fn nk_run(
    ctx: &Ctx,
    root: &DebianRoot,
    mode: RootMode,
    env: &[(&str, &str)],
    script: &str,
    label: &str,
) -> Result<HarnessRun, String> {
    let bin = ctx.bin.to_string_lossy();
    std::fs::copy(&*bin, UNDER_TEST).map_err(|e| format!("copy {bin} to {UNDER_TEST}: {e}"))?;
    let mut env = env.to_vec();
    env.push(("NCDEVMEM", UNDER_TEST));
    let leftovers = NkLeftovers::take(ctx)?;
    let child = spawn(&mut root.command_in(mode, &env, &["python3", script]))?;
    let out = match wait_harness(child, HARNESS_DEADLINE, label) {
        Ok(done) => done.out,
        Err(e) => return Err(format!("{e}; {}", leftovers.clean(ctx))),
    };
    let output = output_text(&out);
    record(&format!("{label}.txt"), &output);
    let results = ktap_results(&output);
    if results.is_empty() {
        let last = output.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "{label}: no test ran ({}; last line {last:?})",
            out.status
        ));
    }
    Ok(HarnessRun {
        results,
        output,
        ..Default::default()
    })
}

/// `run`, and again, up to `runs` runs in all, while not all of its `tests` passed and the
/// failure was the harness's own ([`harness_own`]; each such run's output saved as
/// `<label>-first.txt`, `<label>-second.txt`, …): the run that counts, and the failure lines of
/// each run before it. A run that is an error (one killed at its deadline by
/// [`wait_harness`], one that printed no result) is never run again: only a run that ended is
/// judged by [`harness_own`].
fn run_again_if_harness(
    label: &str,
    tests: usize,
    runs: usize,
    mut run: impl FnMut() -> Result<HarnessRun, String>,
) -> Result<(HarnessRun, Vec<String>), String> {
    let mut earlier = Vec::new();
    loop {
        let r = run()?;
        if all_passed(&r, tests) || !harness_own(&r) || earlier.len() + 1 >= runs {
            return Ok((r, earlier));
        }
        record(
            &format!("{label}-{}.txt", ordinal(earlier.len())),
            &r.output,
        );
        earlier.push(r.failure_lines());
    }
}

/// `first`, `second`, `third`, … for run index `i` (from 0): the names of the saved outputs
/// of the runs [`run_again_if_harness`] repeated.
fn ordinal(i: usize) -> String {
    match i {
        0 => "first".into(),
        1 => "second".into(),
        2 => "third".into(),
        n => format!("run{}", n + 1),
    }
}

/// How many runs of devmem.py a failure of the kernel's harness itself may take
/// ([`run_again_if_harness`]): on a host at load 6 with two TCG guests, its fixed 5 s wait
/// for a listener ran out in both of two runs (tests/vm/FLAKES.md).
const DEVMEM_PY_RUNS: usize = 3;

/// How many runs a netkit script's failure of the harness itself may take.
const NK_RUNS: usize = 2;

/// [`run_again_if_harness`] for [`nk_run`].
fn nk_run_again_if_harness(
    ctx: &Ctx,
    root: &DebianRoot,
    mode: RootMode,
    env: &[(&str, &str)],
    script: &str,
    label: &str,
    tests: usize,
) -> Result<(HarnessRun, Vec<String>), String> {
    run_again_if_harness(label, tests, NK_RUNS, || {
        nk_run(ctx, root, mode, env, script, label)
    })
}

/// What a case line says of the runs of `label` that [`run_again_if_harness`] repeated
/// (`earlier`: their failure lines, in order); nothing when there were none.
fn rerun_note(label: &str, earlier: &[String]) -> String {
    if earlier.is_empty() {
        return String::new();
    }
    let failed: Vec<String> = earlier
        .iter()
        .enumerate()
        .map(|(i, f)| {
            format!(
                "run {}: {f}; output saved as {label}-{}.txt",
                i + 1,
                ordinal(i)
            )
        })
        .collect();
    format!(
        " (run {}: the earlier failed in the harness itself: {})",
        earlier.len() + 1,
        failed.join("; ")
    )
}

/// The ntuple feature on (off again on drop): the kernel's netkit tests steer the leased
/// queue's flow with an ntuple rule and never turn the feature on themselves (they expect a
/// NIC that takes rules as it comes up); the software NIC, as gve, starts with it off.
fn nk_ntuple_on<'c>(ctx: &'c Ctx, nic: &Dnic<'_>) -> Result<EthtoolUndo<'c>, String> {
    EthtoolUndo::new(
        ctx,
        &nic.dut,
        &[&["-K", "ntuple", "on"]],
        &[&["-K", "ntuple", "off"]],
    )
}

/// Loads what the kernel's netkit tests need beyond the suite's modules: `sch_ingress` (their
/// clsact qdiscs) and `cls_bpf` (their tc bpf filters), in the initramfs but not loaded at boot.
fn nk_modules() -> Result<(), String> {
    for m in ["sch_ingress", "cls_bpf"] {
        let out = run(Command::new("modprobe").arg(m))?;
        if !out.status.success() {
            return Err(format!("modprobe {m}: {}", output_text(&out).trim()));
        }
    }
    Ok(())
}

/// Every test of `run` passed (none skipped).
fn all_passed(run: &HarnessRun, tests: usize) -> bool {
    run.results.len() == tests && run.results.iter().all(|(_, v)| v == "ok")
}

/// The kernel's nk_devmem.py, unchanged, with ncdevmem-rs as its ncdevmem: NetDrvContEnv's
/// netkit pair (two RX queues) with the guest end in a namespace, the selftests' BPF redirects
/// (nk_forward.bpf.o on the software NIC, nk_primary_rx_redirect.bpf.o on the netkit host
/// end; tests/vm/build-kselftest.sh builds them), the last queue of the software NIC leased to
/// the netkit guest; then our py/nk_devmem.py, its mirror, in the same root. All five tests of
/// each must pass.
pub(super) fn kernel_nk_devmem_py(ctx: &Ctx) -> CaseResult {
    nk_devmem_case(ctx, 42, "nk_devmem.py", 5)
}

/// The kernel's userns_devmem.py, unchanged, as [`kernel_nk_devmem_py`] with the netkit
/// guest's namespace owned by a user namespace (the library's `UserNetNS`: `unshare --user
/// --net --map-root-user`), so the harness runs in a root the kernel allows that in (not
/// `chroot`: [`DebianRoot::userns_mode`]); then our py/userns_devmem.py. All four tests of
/// each must pass.
pub(super) fn kernel_userns_devmem_py(ctx: &Ctx) -> CaseResult {
    nk_devmem_case(ctx, 43, "userns_devmem.py", 4)
}

fn nk_devmem_case(ctx: &Ctx, pair: u32, script: &str, tests: usize) -> CaseResult {
    nk_modules()?;
    let nic = Dnic::new(ctx, pair, true)?;
    let _ntuple = nk_ntuple_on(ctx, &nic)?;
    let root = DebianRoot::mount()?;
    let (mode, answers) = root.userns_mode()?;
    root.add_our_py()?;
    let env = nk_env(&nic);
    // Both scripts run whatever the first one did: each failure is its own finding.
    let mut lines = Vec::new();
    let mut failed = false;
    for (path, label) in [
        (format!("{HW_DIR}/{script}"), format!("kernel-{script}")),
        (format!("{OUR_PY_DIR}/{script}"), format!("ours-{script}")),
    ] {
        match nk_run_again_if_harness(ctx, &root, mode, &env, &path, &label, tests) {
            Ok((r, first)) if all_passed(&r, tests) => lines.push(format!(
                "{label}: {}{}",
                r.summary(),
                rerun_note(&label, &first)
            )),
            Ok((r, first)) => {
                failed = true;
                lines.push(format!(
                    "{label}: {}; {}{}",
                    r.summary(),
                    r.failure_lines(),
                    rerun_note(&label, &first)
                ));
            }
            Err(e) => {
                failed = true;
                lines.push(e);
            }
        }
    }
    let text = format!("{} (root {mode:?}: {answers})", lines.join("; "));
    if failed {
        return Err(text);
    }
    Ok(Outcome::Pass(text))
}

/// The tests of the kernel's nk_qlease.py.
const NK_QLEASE_TESTS: usize = 5;

/// The kernel's nk_qlease.py, unchanged, with ncdevmem-rs as its `iou-zcrx`: a queue of the
/// software NIC leased into netkit, io_uring zero-copy receive on the netkit queue (default and
/// 8 KiB buffers), the lease's attributes in `queue-get`, XDP refused on NETIF while the
/// leased queue has a memory provider, and the memory provider gone when the netkit device is
/// deleted under the receiver. All five tests must pass.
pub(super) fn kernel_nk_qlease_py(ctx: &Ctx) -> CaseResult {
    nk_modules()?;
    let nic = Dnic::new(ctx, 44, true)?;
    let _ntuple = nk_ntuple_on(ctx, &nic)?;
    let root = DebianRoot::mount()?;
    let (mode, answers) = root.userns_mode()?;
    let env = nk_env(&nic);
    // The remote reaches the netkit guest's prefix through the DUT, as a lab's remote is
    // routed: the library adds that route only with primary_rx_redirect, which nk_qlease.py
    // does not ask for (without it the client's connect was ENETUNREACH). The route goes with
    // the peer namespace.
    let route = run(ns_exec(ctx, &nic.peer_ns).args([
        "ip",
        "-6",
        "route",
        "add",
        "2001:db8:2::/64",
        "via",
        DUT6,
    ]))?;
    if !route.status.success() {
        return Err(format!(
            "route 2001:db8:2::/64 via {DUT6} in {}: {}",
            nic.peer_ns,
            output_text(&route).trim()
        ));
    }
    let path = format!("{HW_DIR}/nk_qlease.py");
    let label = "kernel-nk_qlease.py";
    let (run1, first) =
        nk_run_again_if_harness(ctx, &root, mode, &env, &path, label, NK_QLEASE_TESTS)
            .map_err(|e| format!("{e} (root: {answers})"))?;
    if !all_passed(&run1, NK_QLEASE_TESTS) {
        return Err(format!(
            "nk_qlease.py ({mode:?}): {}; {}{}",
            run1.summary(),
            run1.failure_lines(),
            rerun_note(label, &first)
        ));
    }
    Ok(Outcome::Pass(format!(
        "the VM kernel's nk_qlease.py, unchanged, with ncdevmem-rs as iou-zcrx: {}{} (root: \
         {answers})",
        run1.summary(),
        rerun_note(label, &first)
    )))
}

/// The kernel's C ncdevmem, built from the VM kernel's source, under the same devmem.py on
/// the same NIC: with the ntuple feature as the driver starts (off, as on gve) and with it
/// turned on first; then the receiver CPU time of a 64 MiB `-v 7` receive by each binary
/// (user + system seconds, bash's `time` in the chroot). The case passes when everything ran;
/// the C tool's results are recorded, not required.
pub(super) fn c_ncdevmem(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 32, true)?;
    let root = DebianRoot::mount()?;
    let c_bin = format!("{DEBIAN}{C_NCDEVMEM}");
    let off_label = "devmem-py-c-ncdevmem-ntuple-off";
    let off = devmem_py(&root, &nic, &c_bin, off_label, off_label)?;
    let on = {
        let _ntuple = EthtoolUndo::new(
            ctx,
            &nic.dut,
            &[&["-K", "ntuple", "on"]],
            &[&["-K", "ntuple", "off"]],
        )?;
        let on_label = "devmem-py-c-ncdevmem-ntuple-on";
        devmem_py(&root, &nic, &c_bin, on_label, on_label)?
    };
    record("devmem-py-c-ncdevmem-ntuple-off.txt", &off.output);
    record("devmem-py-c-ncdevmem-ntuple-on.txt", &on.output);
    let mut cpu = Vec::new();
    for (label, bin, port) in [
        ("ncdevmem-rs", ctx.bin.to_string_lossy().to_string(), "5490"),
        ("C ncdevmem", c_bin.clone(), "5491"),
    ] {
        std::fs::copy(&bin, UNDER_TEST).map_err(|e| format!("copy {bin}: {e}"))?;
        let _ntuple = EthtoolUndo::new(
            ctx,
            &nic.dut,
            &[&["-K", "ntuple", "on"]],
            &[&["-K", "ntuple", "off"]],
        )?;
        let script = format!(
            "TIMEFORMAT='cpu %U %S %R'; time {UNDER_TEST} -l -f {} -s {DUT4} -p {port} -c \
             {PEER4} -v 7 >/dev/null 2>/tmp/receiver.err; echo \"exit $?\"",
            nic.dut
        );
        let rx = spawn(&mut root.command(&[], &["bash", "-c", &script]))?;
        let tx = run(&mut nic.sender(&[
            "--send-pattern",
            "64M",
            "-s",
            DUT4,
            "-p",
            port,
            "-c",
            PEER4,
            "-v",
            "7",
            "--timeout",
            "60",
        ]))?;
        let got = wait_within(rx, HARNESS_DEADLINE)?;
        let text = output_text(&got);
        let times = text
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))
            .map(|t| t.split_whitespace().collect::<Vec<_>>())
            .filter(|t| t.len() == 3)
            .ok_or_else(|| format!("{label}: no time: {text:?}"))?;
        let status = text
            .lines()
            .find(|l| l.starts_with("exit "))
            .unwrap_or("exit ?");
        cpu.push(format!(
            "{label}: {status}, user {} s + sys {} s (wall {} s); sender {}",
            times[0],
            times[1],
            times[2],
            if tx.status.success() { "ok" } else { "failed" }
        ));
    }
    let failures = |label: &str, r: &HarnessRun| {
        if r.results.iter().any(|(_, v)| v != "ok") {
            format!(" ({label}: {})", r.failure_lines())
        } else {
            String::new()
        }
    };
    Ok(Outcome::Pass(format!(
        "devmem.py with the C ncdevmem: ntuple off: {}; ntuple on: {}. 64 MiB -v 7 receive: {}\
         {}{}. Per test (time; the C tool's start to listen): ntuple off: {}; ntuple on: {}; \
         whole outputs saved as devmem-py-c-ncdevmem-ntuple-{{off,on}}.txt, listen logs as \
         devmem-py-c-ncdevmem-ntuple-{{off,on}}-listen.txt",
        off.summary(),
        on.summary(),
        cpu.join("; "),
        failures("ntuple off", &off),
        failures("ntuple on", &on),
        test_timing(&off),
        test_timing(&on),
    )))
}

/// How many times each receiver takes the timed transfer of [`c_iou_zcrx`].
const ZCRX_TIMED_RUNS: usize = 7;

/// What the C iou-zcrx's server prints when its receive did not end within 5 s of listening
/// (its fixed deadline, `tstop`).
const C_IOU_ZCRX_DEADLINE: &str = "iou-zcrx: test failed";

/// The kernel's C iou-zcrx, built from the VM kernel's source with liburing, under the same
/// iou-zcrx.py on the same kind of NIC as `devmem-nic/kernel-iou-zcrx-py` (its results are
/// recorded, not required); then the receiver CPU, wall time, faults and switches ([`RUSAGE_PY`])
/// of the same transfer by each binary run as the harness's `iou-zcrx`: `test_zcrx.single`'s NIC
/// setup and server command line (`-s -p P -i DUT -q 3`), 2 MiB of the `'a'..'z'` stream (the C
/// client's whole send buffer) from one sender for both, ncdevmem-rs as `iou-zcrx -c -h DUT6 -p
/// P -l 12840` in the peer namespace, started once the server's ifq is registered (it retries
/// the connect until the server listens), [`ZCRX_TIMED_RUNS`] times each, alternating. Every
/// ncdevmem-rs receive must exit 0; a C receive either exits 0 or ends at its own 5 s deadline
/// ([`C_IOU_ZCRX_DEADLINE`]), which the line counts. Every frame with payload must have been
/// split on queue [`BOUND`].
pub(super) fn c_iou_zcrx(ctx: &Ctx) -> CaseResult {
    let nic = Dnic::new(ctx, 36, true)?;
    let root = DebianRoot::mount()?;
    let c_bin = format!("{DEBIAN}{C_IOU_ZCRX}");
    let harness = kernel_py(&root, &nic, IOU_ZCRX_PY, &c_bin, "iou-zcrx-py-c-iou-zcrx")?;
    record("iou-zcrx-py-c-iou-zcrx.txt", &harness.output);
    wait_provider(&nic, BOUND, false)?;
    let before = nic.queue_stats()?;
    let port = 5492u16;
    let _setup = HarnessSetup::apply(ctx, &nic.dut, port)?;
    let sender_link = "/tmp/iou-zcrx";
    let _ = std::fs::remove_file(sender_link);
    std::os::unix::fs::symlink(&ctx.bin, sender_link)
        .map_err(|e| format!("symlink {sender_link}: {e}"))?;
    let mut receivers = [
        TimedReceiver::new("ncdevmem-rs", &ctx.bin.to_string_lossy(), false),
        TimedReceiver::new("C iou-zcrx", &c_bin, true),
    ];
    let mut runs = Vec::new();
    for round in 1..=ZCRX_TIMED_RUNS {
        for r in receivers.iter_mut() {
            std::fs::copy(&r.bin, UNDER_TEST).map_err(|e| format!("copy {}: {e}", r.bin))?;
            // The receiver's own rusage (RUSAGE_CHILDREN of a python3 that only waits for it):
            // CPU seconds, minor page faults and context switches, which say what it asked of
            // the kernel where the guest has no strace or perf.
            let script = format!(
                "python3 -c '{RUSAGE_PY}' {HARNESS_IOU_ZCRX} -s -p {port} -i {} -q {BOUND} \
                 >/tmp/iou-zcrx-rx.out 2>&1; echo \"exit $?\"; cat /tmp/iou-zcrx-rx.out",
                nic.dut
            );
            let rx = spawn(&mut root.command(&[], &["bash", "-c", &script]))?;
            let mut rx = KillOnDrop(Some(rx));
            wait_provider(&nic, BOUND, true)?;
            let tx = run(ns_exec(ctx, &nic.peer_ns).args([
                sender_link,
                "-c",
                "-h",
                DUT6,
                "-p",
                &port.to_string(),
                "-l",
                "12840",
            ]))?;
            let got = wait_within(rx.0.take().ok_or("the receiver is gone")?, HARNESS_DEADLINE)?;
            let text = output_text(&got);
            runs.push(format!("{} run {round}: {}", r.label, text.trim()));
            r.add(&text, tx.status.success())
                .map_err(|e| format!("run {round}: {e}; sender: {}", output_text(&tx).trim()))?;
            wait_provider(&nic, BOUND, false)?;
        }
    }
    record("iou-zcrx-timed-runs.txt", &(runs.join("\n") + "\n"));
    let after = nic.queue_stats()?;
    let elsewhere: u64 = (0..BOUND).map(|n| after[n].split - before[n].split).sum();
    if elsewhere != 0 || after[BOUND].split == before[BOUND].split {
        return Err(format!(
            "split frames per queue before the timed runs {before:?}, after {after:?}"
        ));
    }
    if receivers[0].runs.len() != ZCRX_TIMED_RUNS {
        return Err(format!("ncdevmem-rs: {}", receivers[0].summary()));
    }
    let failures = if harness.results.iter().any(|(_, v)| v != "ok") {
        format!(" ({})", harness.failure_lines())
    } else {
        String::new()
    };
    Ok(Outcome::Pass(format!(
        "iou-zcrx.py with the C iou-zcrx: {}{failures}. Receiver of 2 MiB (test_zcrx.single's \
         transfer, one sender for both), {ZCRX_TIMED_RUNS} runs each, interleaved: ncdevmem-rs: \
         {}; C iou-zcrx: {}; ncdevmem-rs / C, medians: CPU {}, minor faults {}, voluntary \
         switches {} (TCG: counts and ratios, not speed); all split frames on queue {BOUND}; \
         outputs saved as iou-zcrx-py-c-iou-zcrx.txt, iou-zcrx-timed-runs.txt",
        harness.summary(),
        receivers[0].summary(),
        receivers[1].summary(),
        ratio(receivers[0].median_of(6), receivers[1].median_of(6)),
        ratio(receivers[0].median_of(3), receivers[1].median_of(3)),
        ratio(receivers[0].median_of(4), receivers[1].median_of(4)),
    )))
}

/// `a / b` as `1.17x`, or `-` when `b` is not above 0 (NaN: no C run was timed).
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_string()
    }
}

/// Runs its arguments as a command and prints, on stdout after the command's own output,
/// `cpu USER SYS WALL MINFLT NVCSW NIVCSW` for it (seconds; minor faults, voluntary and
/// involuntary context switches), exiting with its status.
const RUSAGE_PY: &str = "import resource, subprocess, sys, time\n\
    t = time.monotonic()\n\
    rc = subprocess.run(sys.argv[1:]).returncode\n\
    w = time.monotonic() - t\n\
    u = resource.getrusage(resource.RUSAGE_CHILDREN)\n\
    print(\"cpu\", u.ru_utime, u.ru_stime, w, u.ru_minflt, u.ru_nvcsw, u.ru_nivcsw, flush=True)\n\
    sys.exit(rc if rc >= 0 else 128 - rc)";

/// One receiver of [`c_iou_zcrx`]'s timed transfer and its runs so far.
struct TimedReceiver {
    label: &'static str,
    /// The binary (a guest path), copied to [`UNDER_TEST`] for each run.
    bin: String,
    /// The C tool: a run may end at its deadline ([`C_IOU_ZCRX_DEADLINE`]).
    c_tool: bool,
    /// Each run that exited 0 with its sender: [`RUSAGE_PY`]'s user, system and wall seconds,
    /// minor page faults, voluntary and involuntary context switches.
    runs: Vec<[f64; 6]>,
    /// Runs that ended at the C tool's own deadline ([`C_IOU_ZCRX_DEADLINE`]).
    deadline: usize,
}

impl TimedReceiver {
    fn new(label: &'static str, bin: &str, c_tool: bool) -> Self {
        TimedReceiver {
            label,
            bin: bin.to_string(),
            c_tool,
            runs: Vec::new(),
            deadline: 0,
        }
    }

    /// Counts one run from its output (`exit N`, [`RUSAGE_PY`]'s `cpu USER SYS WALL MINFLT
    /// NVCSW NIVCSW`, what the receiver printed) and whether its sender succeeded; an outcome
    /// other than success or the C tool's deadline is an error.
    fn add(&mut self, text: &str, sender_ok: bool) -> Result<(), String> {
        let figures: Vec<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))
            .map(|t| {
                t.split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let exit0 = text.lines().any(|l| l == "exit 0");
        match <[f64; 6]>::try_from(figures.as_slice()) {
            Ok(run) if exit0 && sender_ok => {
                self.runs.push(run);
                Ok(())
            }
            _ if self.c_tool && text.contains(C_IOU_ZCRX_DEADLINE) => {
                self.deadline += 1;
                Ok(())
            }
            _ => Err(format!("{} as iou-zcrx: {text:?}", self.label)),
        }
    }

    /// Figure `i` of [`TimedReceiver::runs`] over the timed runs; `i` = 6 is user + system
    /// seconds.
    fn figure(&self, i: usize) -> Data<Vec<f64>> {
        Data::new(
            self.runs
                .iter()
                .map(|r| if i == 6 { r[0] + r[1] } else { r[i] })
                .collect(),
        )
    }

    /// The median of figure `i` over the timed runs (NaN for none).
    fn median_of(&self, i: usize) -> f64 {
        self.figure(i).median()
    }

    /// `N of M runs, per run (median, min-max): CPU …`.
    fn summary(&self) -> String {
        let (cpu, faults) = (self.figure(6), self.figure(3));
        let ((clo, chi), (flo, fhi)) = ((cpu.min(), cpu.max()), (faults.min(), faults.max()));
        let mut line = format!(
            "{} of {ZCRX_TIMED_RUNS} runs, per run (median, min-max): CPU {:.3} s ({clo:.3}-{chi:.3}; \
             user {:.3} + sys {:.3}), wall {:.3} s, {:.0} minor faults ({flo:.0}-{fhi:.0}), {:.0} \
             voluntary and {:.0} involuntary context switches",
            self.runs.len(),
            self.median_of(6),
            self.median_of(0),
            self.median_of(1),
            self.median_of(2),
            self.median_of(3),
            self.median_of(4),
            self.median_of(5),
        );
        if self.deadline > 0 {
            line += &format!(
                " ({} ended at its own 5 s deadline: {C_IOU_ZCRX_DEADLINE:?})",
                self.deadline
            );
        }
        line
    }
}

/// Waits (up to 60 s) until queue `queue` of `nic` has (`want`) or no longer has a memory
/// provider: an io_uring ifq comes with the registration and goes with its ring, after the
/// process that held it has exited (the harness's `mp_clear_wait` waits the same way).
fn wait_provider(nic: &Dnic, queue: usize, want: bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = nic.queue_stats()?;
        if q[queue].provider == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "queue {queue}: memory provider {} after 60 s: {q:?}",
                if want { "still missing" } else { "still there" }
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits up to 10 s until `root`'s tree has at least `n` processes.
    fn tree_of_at_least(root: u32, n: usize) -> Vec<u32> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let tree = process_tree(root);
            if tree.len() >= n || Instant::now() > until {
                return tree;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Gone, or a zombie waiting for its parent.
    fn gone(pid: u32) -> bool {
        ProcState::read(pid).is_none_or(|p| p.state == 'Z')
    }

    /// A shell whose child shell has a child of its own: three levels, four processes.
    const THREE_LEVELS: &str = "echo before; sleep 30 & sh -c 'sleep 30 & wait' & wait";

    #[test]
    fn the_process_tree_holds_every_level() {
        let mut child = spawn(Command::new("sh").args(["-c", THREE_LEVELS])).unwrap();
        let root = child.id();
        let tree = tree_of_at_least(root, 4);
        let procs: Vec<ProcState> = tree.iter().filter_map(|p| ProcState::read(*p)).collect();
        let killed = kill_tree(root);
        let _ = child.wait();
        assert_eq!(tree.len(), 4, "{procs:?}");
        assert_eq!(tree[0], root);
        // Parents before their children, and one process two levels down.
        for (i, p) in procs.iter().enumerate().skip(1) {
            assert!(tree[..i].contains(&p.ppid), "{procs:?}");
        }
        let parent = |pid: u32| procs.iter().find(|p| p.pid == pid).map(|p| p.ppid);
        assert!(
            procs.iter().any(|p| parent(p.ppid) == Some(root)),
            "{procs:?}"
        );
        assert_eq!(killed.len(), 4, "{killed:?}");
        for pid in &killed {
            let until = Instant::now() + Duration::from_secs(5);
            while !gone(*pid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(gone(*pid), "{pid} still there");
        }
    }

    #[test]
    fn a_stat_line_with_blanks_and_parentheses_in_the_name_parses() {
        let stat = "812 (python3 (x) y) S 800 812 800 0 -1 4194560 1234 0 0 0";
        assert_eq!(parse_stat(stat), Some(('S', 800)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_run_past_its_deadline_is_killed_with_its_children_and_its_output_kept() {
        let child = spawn(Command::new("sh").args(["-c", THREE_LEVELS])).unwrap();
        let root = child.id();
        let started = Instant::now();
        // 3 s: time for the shells to fork on a loaded host.
        let Err(killed) = wait_killing(child, Duration::from_secs(3)) else {
            panic!("a 30 s run ended within 3 s");
        };
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(killed.procs.len(), 4, "{:?}", killed.procs);
        assert_eq!(killed.procs[0].pid, root);
        // Three levels: a process whose parent's parent is the harness.
        let parent = |pid: u32| killed.procs.iter().find(|p| p.pid == pid).map(|p| p.ppid);
        assert!(
            killed.procs.iter().any(|p| parent(p.ppid) == Some(root)),
            "{:?}",
            killed.procs
        );
        assert_eq!(
            killed
                .procs
                .iter()
                .filter(|p| p.cmdline == "sleep 30")
                .count(),
            2,
            "{:?}",
            killed.procs
        );
        assert!(killed.output_ended);
        assert!(killed.survivors.is_empty(), "{:?}", killed.survivors);
        for p in &killed.procs {
            assert!(gone(p.pid), "{} still there", p.pid);
        }
        assert_eq!(killed.stdout, "before\n");
        let message = killed.message("t");
        assert!(
            message.starts_with("t: killed past its 3 s deadline"),
            "{message}"
        );
        assert!(message.contains("last output line \"before\""), "{message}");
        assert!(message.contains("t-killed.txt"), "{message}");
        let report = killed.report("t");
        assert!(report.contains("cmdline: sleep 30"), "{report}");
        assert!(report.contains("stdout so far:\nbefore\n"), "{report}");
    }

    #[test]
    fn a_run_within_its_deadline_keeps_its_output_and_status() {
        let child = spawn(Command::new("sh").args(["-c", "echo a; echo b >&2; exit 3"])).unwrap();
        let Ok(done) = wait_killing(child, Duration::from_secs(20)) else {
            panic!("killed");
        };
        assert_eq!(done.out.status.code(), Some(3));
        assert_eq!(done.out.stdout, b"a\n");
        assert_eq!(done.out.stderr, b"b\n");
        assert_eq!(done.stdout_times.len(), 1);
    }

    /// `ip -j -d link show` in the guest during a netkit run (shortened): the software NIC
    /// (no linkinfo), a veth, the netkit host end (the guest end is in the run's namespace,
    /// so only one end shows) and a second netkit pair's two ends.
    const IP_LINK_JSON: &str = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"link_type":"loopback","address":"00:00:00:00:00:00"},
{"ifindex":12,"ifname":"dnic42a","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"link_type":"ether","num_rx_queues":4},
{"ifindex":13,"ifname":"veth0","flags":["BROADCAST","MULTICAST"],"link_type":"ether","linkinfo":{"info_kind":"veth"}},
{"ifindex":15,"link_index":14,"ifname":"nk1","flags":["BROADCAST","MULTICAST","NOARP","UP","LOWER_UP"],"mtu":1500,"link_type":"ether","linkinfo":{"info_kind":"netkit","info_data":{"mode":"l2","policy":"forward","peer_policy":"forward","primary":true}},"num_rx_queues":2},
{"ifindex":17,"link":"nk3","ifname":"nk2","flags":["BROADCAST"],"linkinfo":{"info_kind":"netkit","info_data":{"mode":"l2"}}},
{"ifindex":18,"link":"nk2","ifname":"nk3","flags":["BROADCAST"],"linkinfo":{"info_kind":"netkit"}}]"#;

    #[test]
    fn netkit_devices_are_found_in_ip_link_json() {
        assert_eq!(netkit_links(IP_LINK_JSON).unwrap(), ["nk1", "nk2", "nk3"]);
        assert_eq!(netkit_links("[]").unwrap(), Vec::<String>::new());
        assert!(netkit_links("{}").is_err());
        assert!(netkit_links("Cannot open netlink socket").is_err());
    }

    #[test]
    fn the_listen_log_gives_each_start_its_listen_time() {
        let log = "100.10 812 start -l -f dnic31a -s 192.0.2.1 -p 5201 -c 192.0.2.2 -v 7\n\
                   100.20 830 start -f dnic31a -s 2001:db8::2 -p 5202\n\
                   100.55 812 listen 5201 after 0.45 s\n\
                   not a line of the wrapper\n\
                   120.00 901 start -l -p 5203\n\
                   122.10 901 exited 5203 after 2.10 s without listening\n\
                   130.00 902 start -l -p 5204\n\
                   160.00 902 no-listen 5204: not listening after 30 s\n";
        let mut starts = parse_listen_log(log);
        assert_eq!(starts.len(), 4, "{starts:?}");
        assert_eq!(starts[0].setup, None);
        assert_eq!(starts[0].pid, 812);
        assert_eq!(starts[0].at, 100.10);
        assert!(starts[0].argv.starts_with("-l -f dnic31a"));
        assert_eq!(starts[0].listen, Some(Ok(0.45)));
        assert_eq!(starts[1].listen, None);
        assert_eq!(
            starts[2].listen,
            Some(Err("exited after 2.10 s without listening".to_string()))
        );
        assert_eq!(
            starts[3].listen,
            Some(Err("not listening after 30 s".to_string()))
        );
        starts[0].setup = Some("set-up 0.40 s: memory 0.30 s, bind 0.05 s".into());
        starts[2].setup = Some("set-up ended 2.09 s: unfinished after nic 1.60 s".into());
        let run = HarnessRun {
            results: ["check_rx", "check_tx", "check_rx_hds"]
                .iter()
                .map(|t| (t.to_string(), "ok".to_string()))
                .collect(),
            times: vec![110.0, 121.0, 170.0],
            started: 95.0,
            listen: starts,
            ..Default::default()
        };
        assert_eq!(
            test_timing(&run),
            "check_rx 15.0 s (listen 0.45 s, set-up 0.40 s: memory 0.30 s, bind 0.05 s), check_tx \
             11.0 s (exited after 2.10 s without listening: set-up ended 2.09 s: unfinished \
             after nic 1.60 s), check_rx_hds 49.0 s (not listening after 30 s)"
        );
    }

    /// ncdevmem-rs's set-up line, in brief: the total and its two longest steps; none in a
    /// stderr without it.
    #[test]
    fn the_set_up_line_is_read_in_brief() {
        let err = "ncdevmem-rs: using queues 2..=3\n\
                   ncdevmem-rs: set-up before the listen 4.100 s: checks 0.002 s, hugepages \
                   0.000 s, nic 0.031 s, queues 0.120 s, memory 3.200 s, configure 0.247 s, bind \
                   0.500 s, listen 0.000 s\n\
                   ncdevmem-rs: listening on [192.0.2.1]:5201\n";
        assert_eq!(
            setup_line_in(err).and_then(setup_brief).as_deref(),
            Some("set-up 4.10 s: memory 3.20 s, bind 0.50 s")
        );
        assert_eq!(setup_line_in("using queues 2..=3\nlistening on x\n"), None);
        assert_eq!(setup_brief("set-up before the listen garbage"), None);
        let killed = "ncdevmem-rs: using queues 2..=3\n\
                      ncdevmem-rs: set-up ended before the listen 5.071 s: start 0.440 s, \
                      checks 0.006 s, nic 0.007 s, queues 0.002 s, unfinished after queues \
                      4.616 s\n\
                      ncdevmem-rs: interrupted by SIGTERM\n";
        assert_eq!(
            setup_line_in(killed).and_then(setup_brief).as_deref(),
            Some("set-up ended 5.07 s: unfinished after queues 4.62 s, start 0.44 s")
        );
    }

    /// The watch reads the listeners' starts from the log (`-l` and the last `-p PORT`) and
    /// tells a listening port in a process's namespace from a closed one and a process that
    /// is gone.
    #[test]
    fn the_listen_watch_finds_listeners_and_their_state() {
        let log = "10.00 812 start -l -f dnic31a -s 192.0.2.1 -p 5201 -v 7\n\
                   10.10 813 start -f dnic31a -s 192.0.2.1 -p 5202\n\
                   10.20 814 start -l -p 1 -p 5203\n\
                   10.30 815 start -l -p x\n";
        assert_eq!(listener_starts(log), [(812, 5201, 10.0), (814, 5203, 10.2)]);
        let (held, port) = reserve_loopback_port();
        assert_eq!(listen_state(std::process::id(), port), Some(false));
        let listener = reserved_port_listener(port);
        assert_eq!(listen_state(std::process::id(), port), Some(true));
        drop(listener);
        assert_eq!(listen_state(std::process::id(), port), Some(false));
        drop(held);
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(listen_state(pid, port), None);
    }

    /// Runs the listen wrapper (its paths moved to a temporary directory) over a stand-in tool
    /// that copies stdin to stdout, writes a line to stderr, listens on its `-p` port 0.3 s
    /// after its start when given `-l`, and exits 7.
    #[test]
    fn the_listen_wrapper_is_transparent_and_logs_the_time_to_listen() {
        use std::os::unix::fs::PermissionsExt;
        assert!(LISTEN_WRAPPER.contains(LISTEN_LOG) && LISTEN_WRAPPER.contains(UNDER_TEST_BIN));
        let dir = std::env::temp_dir().join(format!("vm-guest-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (log, tool, wrapper) = (dir.join("log"), dir.join("tool"), dir.join("wrapper"));
        let copy = dir.join("stderr-");
        let exec = |path: &Path, text: &str| {
            std::fs::write(path, text).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exec(
            &tool,
            "#!/bin/sh\ncat\necho err >&2\ncase \" $* \" in *\" -l \"*) python3 -c 'import \
             socket, sys, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, \
             socket.SO_REUSEPORT, 1)\ns.bind((\"127.0.0.1\", int(sys.argv[1])))\n\
             time.sleep(0.3)\ns.listen()\ntime.sleep(0.7)' \"$3\" ;; esac\nexit 7\n",
        );
        exec(
            &wrapper,
            &LISTEN_WRAPPER
                .replace(LISTEN_LOG, &log.to_string_lossy())
                .replace(UNDER_TEST_BIN, &tool.to_string_lossy())
                .replace(STDERR_COPY, &copy.to_string_lossy()),
        );
        // The port stays the test's for the whole test: a bound socket that never listens (so
        // it is not in /proc/net/tcp and takes no connection) with SO_REUSEPORT, which only
        // the stand-in (same user, SO_REUSEPORT too) can bind beside.
        let (_held, port) = reserve_loopback_port();
        let port = port.to_string();
        std::fs::write(&log, "").unwrap();
        let watch = ListenWatch::start(&log);
        for args in [["-l", "-p", &port], ["-x", "-p", &port]] {
            let out = run_with_stdin(Command::new(&wrapper).args(args), b"hello\n").unwrap();
            assert_eq!(out.status.code(), Some(7));
            assert_eq!(out.stdout, b"hello\n");
            assert_eq!(out.stderr, b"err\n");
        }
        drop(watch);
        let starts = parse_listen_log(&std::fs::read_to_string(&log).unwrap());
        // Each start's stderr is copied beside the log, its FIFO gone.
        for s in &starts {
            let path = format!("{}{}.txt", copy.to_string_lossy(), s.pid);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "err\n", "{path}");
        }
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".fifo")), "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(starts.len(), 2, "{starts:?}");
        assert_eq!(starts[0].argv, format!("-l -p {port}"));
        let Some(Ok(secs)) = starts[0].listen else {
            panic!("{starts:?}");
        };
        assert!((0.25..5.0).contains(&secs), "{secs}");
        assert_eq!(starts[1].listen, None);
    }

    /// A TCP socket with SO_REUSEPORT bound to 127.0.0.1 `port` (0: a free one the kernel
    /// picks), and the port it got.
    fn reuseport_socket(port: u16) -> (std::os::fd::OwnedFd, u16) {
        use nix::sys::socket::{
            bind, getsockname, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType,
            SockaddrIn,
        };
        use std::os::fd::AsRawFd;
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        setsockopt(&fd, sockopt::ReusePort, &true).unwrap();
        bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).unwrap();
        let port = getsockname::<SockaddrIn>(fd.as_raw_fd()).unwrap().port();
        (fd, port)
    }

    /// A loopback TCP port that no other socket can take while the returned socket is open:
    /// bound with SO_REUSEPORT ([`reuseport_socket`]) and never listening, so only another
    /// SO_REUSEPORT socket of the same user binds beside it.
    fn reserve_loopback_port() -> (std::os::fd::OwnedFd, u16) {
        reuseport_socket(0)
    }

    /// A listener on a port [`reserve_loopback_port`] holds (SO_REUSEPORT, as the stand-in
    /// tool's).
    fn reserved_port_listener(port: u16) -> std::os::fd::OwnedFd {
        use nix::sys::socket::{listen, Backlog};
        let (fd, _) = reuseport_socket(port);
        listen(&fd, Backlog::new(1).unwrap()).unwrap();
        fd
    }

    /// The reserved port refuses a plain bind and takes a SO_REUSEPORT listener beside it.
    #[test]
    fn a_reserved_port_is_kept_from_other_sockets() {
        let (_held, port) = reserve_loopback_port();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_err());
        drop(reserved_port_listener(port));
    }

    /// A run that is an error (killed) is not run again, whatever its output was.
    #[test]
    fn a_killed_run_is_never_run_again() {
        let mut runs = 0;
        let got = run_again_if_harness("t", 5, 3, || {
            runs += 1;
            Err("t: killed past its 420 s deadline".to_string())
        });
        assert!(got.is_err());
        assert_eq!(runs, 1);
    }

    /// The harness's own failures are run again up to the limit, the last run counts and the
    /// note names each earlier run; a failure of the tool's stops at once.
    #[test]
    fn the_harness_own_failures_are_run_up_to_the_limit() {
        let own =
            "not ok 1 devmem.check_rx\n# Exception| Exception: Waiting for port listen timed out\n";
        let tool = "not ok 1 devmem.check_rx\n# ncdevmem-rs: validation failed\n";
        for (outputs, runs, want_runs, want_earlier) in [
            (vec![own, own, own, own], 3, 3, 2),
            (vec![own, own], 2, 2, 1),
            (vec![own, tool, own], 3, 2, 1),
            (vec![tool, own], 3, 1, 0),
        ] {
            let mut n = 0;
            let (last, earlier) = run_again_if_harness("t-rerun", 1, runs, || {
                n += 1;
                Ok(run_of(outputs[n - 1]))
            })
            .unwrap();
            assert_eq!((n, earlier.len()), (want_runs, want_earlier), "{outputs:?}");
            assert_eq!(last.output, outputs[n - 1]);
            let note = rerun_note("t-rerun", &earlier);
            for i in 0..want_earlier {
                assert!(note.contains(&format!("run {}: ", i + 1)), "{note}");
                assert!(
                    note.contains(&format!("t-rerun-{}.txt", ordinal(i))),
                    "{note}"
                );
            }
            assert_eq!(note.is_empty(), want_earlier == 0, "{note}");
        }
    }

    fn run_of(output: &str) -> HarnessRun {
        HarnessRun {
            results: ktap_results(output),
            output: output.to_string(),
            ..Default::default()
        }
    }

    /// Only the harness's own waits and tools make a second run: a timed-out command that
    /// runs the tool under test (as the RX listener or the TX client) is the tool's failure.
    #[test]
    fn only_the_harness_own_failures_are_rerun() {
        let own = [
            "# Exception| Exception: Waiting for port listen timed out",
            "# 2026/01/01 socat[812] E bind(5, {AF=10 [::]:41234}, 28): Address already in use",
            "# Exception| subprocess.TimeoutExpired: Command 'dd if=/dev/zero bs=4096 count=1 | \
             socat -u - TCP6:[2001:db8::1]:5201' timed out after 20 seconds",
        ];
        for line in own {
            assert!(
                harness_own(&run_of(&format!("not ok 1 devmem.check_rx\n{line}\n"))),
                "{line}"
            );
        }
        let tools = [
            "# Exception| subprocess.TimeoutExpired: Command 'bash -c 'echo -e \"hello\\nworld\" | \
             /opt/kselftest/drivers/net/hw/ncdevmem -f dnic31a -s 2001:db8::2 -p 5201'' timed out \
             after 20 seconds",
            "# Exception| subprocess.TimeoutExpired: Command '/opt/kselftest/drivers/net/hw/iou-zcrx \
             -s -p 9999 -i dnic33a -q 3' timed out after 20 seconds",
            "# ncdevmem-rs: bind([::ffff:192.0.2.1]:5201): EADDRINUSE (Address already in use)",
        ];
        for line in tools {
            assert!(
                !harness_own(&run_of(&format!("not ok 1 devmem.check_rx\n{line}\n"))),
                "{line}"
            );
        }
    }
}
