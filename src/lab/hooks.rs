//! A sweep's per-run hooks: `--pre-run CMD` before every run and `--post-run CMD` after every
//! run that was made, each `sh -c CMD`, so that a reviewer can `perf record` or trace the page
//! pool and devmem tracepoints run by run. A hook learns which run it is from its environment
//! ([`HookEnv`]); its stdout and stderr go to the sweep's stderr (the table keeps stdout); it
//! has [`HOOK_LIMIT`] to exit (a hook that starts a tracer leaves it in the background). A
//! hook that exits non-zero, is killed by a signal, cannot be started or outlives its limit
//! fails its run, named (`--pre-run: exit 3`); a failed `--pre-run` means the run is not made.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::summary::sweep::HookFigure;

/// The longest a hook may run before it is killed and its run failed.
pub(crate) const HOOK_LIMIT: Duration = Duration::from_secs(300);

/// What a hook is told about its run, as environment variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookEnv {
    /// `NCDEVMEM_RUN`: the run's position among all runs, 1-based.
    pub run: usize,
    /// `NCDEVMEM_RUNS`: all planned runs.
    pub runs: usize,
    /// `NCDEVMEM_POINT`: the point, as the progress lines name it (`rx-page-size=4096`, `one
    /// configuration`).
    pub point: String,
    /// `NCDEVMEM_KEY`: the swept key (empty: none).
    pub key: String,
    /// `NCDEVMEM_VALUE`: the point's value (empty: none).
    pub value: String,
    /// `NCDEVMEM_POINT_RUN`: the run's number at its point, 1-based.
    pub point_run: u32,
    /// `NCDEVMEM_OUT_DIR`: the folder of the sweep's `--json` (else `--csv`, `--plot`, else
    /// the current folder), for the hook's own files.
    pub out_dir: PathBuf,
    /// `NCDEVMEM_OUTCOME` (`--post-run` only): `ok`, `fail` or `skip`.
    pub outcome: Option<&'static str>,
}

impl HookEnv {
    /// The variables, as `(name, value)`.
    pub(crate) fn vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("NCDEVMEM_RUN", self.run.to_string()),
            ("NCDEVMEM_RUNS", self.runs.to_string()),
            ("NCDEVMEM_POINT", self.point.clone()),
            ("NCDEVMEM_KEY", self.key.clone()),
            ("NCDEVMEM_VALUE", self.value.clone()),
            ("NCDEVMEM_POINT_RUN", self.point_run.to_string()),
            ("NCDEVMEM_OUT_DIR", self.out_dir.display().to_string()),
        ];
        if let Some(o) = self.outcome {
            v.push(("NCDEVMEM_OUTCOME", o.to_string()));
        }
        v
    }
}

/// Runs hook `which` (`pre-run` or `post-run`): `sh -c cmd` with `env`'s variables, stdout
/// and stderr on this process's stderr, at most `limit`, and only until `stop` (the stop
/// signal's flag) is set: then it is killed, with all it started. Its figure: the exit code,
/// and why it failed (`None`: it exited 0).
pub(crate) fn run(
    which: &str,
    cmd: &str,
    env: &HookEnv,
    limit: Duration,
    stop: &std::sync::atomic::AtomicI32,
) -> HookFigure {
    let fail = |exit_code: Option<i32>, why: String| HookFigure {
        hook: which.to_string(),
        exit_code,
        error: Some(why),
    };
    use std::os::unix::process::CommandExt;
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(cmd)
        .envs(env.vars())
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::from(std::io::stderr()))
        // A process group of its own: the hook and whatever it starts (`perf record`, a
        // `sleep`) are stopped together, never left running after the sweep.
        .process_group(0);
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => return fail(None, format!("cannot start /bin/sh: {e}")),
    };
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {
                // A stop signal ends the hook at once (the sweep then stops); so does its
                // limit.
                let why = match stop.load(std::sync::atomic::Ordering::SeqCst) {
                    0 if Instant::now() >= deadline => {
                        format!("still running after {limit:?}: killed")
                    }
                    0 => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    sig => format!("stopped by signal {sig}: killed"),
                };
                end_group(&mut child);
                return fail(None, why);
            }
            Err(e) => return fail(None, format!("wait: {e}")),
        }
    };
    match status.code() {
        Some(0) => HookFigure {
            hook: which.to_string(),
            exit_code: Some(0),
            error: None,
        },
        Some(n) => fail(Some(n), format!("exit {n}")),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let sig = status.signal().unwrap_or(0);
            fail(None, format!("killed by signal {sig}"))
        }
    }
}

/// Ends a hook's process group: SIGTERM, then SIGKILL if the hook is still there 1 s later;
/// reaps the hook.
fn end_group(child: &mut std::process::Child) {
    use nix::sys::signal::Signal;
    let pgid = child.id();
    crate::sys::signals::signal_group(pgid, Signal::SIGTERM);
    let grace = Instant::now() + Duration::from_secs(1);
    while Instant::now() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            // The hook is gone; what it started may not be.
            crate::sys::signals::signal_group(pgid, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    crate::sys::signals::signal_group(pgid, Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static NO_STOP: AtomicI32 = AtomicI32::new(0);

    /// Whether a process with this id runs: it has a /proc entry that is not a zombie (an
    /// orphan killed is reaped by whoever adopted it, perhaps late).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    }

    /// A stop signal ends a hook at once, with what it started (its `sleep`): neither is left
    /// running; and so does the limit.
    #[test]
    fn a_stop_ends_the_hook_and_what_it_started() {
        for stopped in [true, false] {
            let dir = std::env::temp_dir()
                .join(format!("ncdevmem-hook-{}-{stopped}", std::process::id()));
            let _ = std::fs::remove_file(&dir);
            let stop = AtomicI32::new(0);
            let cmd = format!("sleep 30 & echo $! > {}; wait", dir.display());
            let started = Instant::now();
            let figure = std::thread::scope(|s| {
                if stopped {
                    s.spawn(|| {
                        std::thread::sleep(Duration::from_millis(300));
                        stop.store(15, Ordering::SeqCst);
                    });
                }
                run("post-run", &cmd, &env(), Duration::from_millis(600), &stop)
            });
            let want = match stopped {
                true => "stopped by signal 15: killed",
                false => "still running after 600ms: killed",
            };
            assert_eq!(figure.error.as_deref(), Some(want));
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
            let sleep: i32 = std::fs::read_to_string(&dir)
                .expect("the hook wrote its sleep's id")
                .trim()
                .parse()
                .expect("a pid");
            let gone = Instant::now() + Duration::from_secs(2);
            while alive(sleep) && Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!alive(sleep), "the hook's sleep {sleep} still runs");
            let _ = std::fs::remove_file(&dir);
        }
    }

    fn env() -> HookEnv {
        HookEnv {
            run: 3,
            runs: 6,
            point: "rx-page-size=65536".into(),
            key: "rx-page-size".into(),
            value: "65536".into(),
            point_run: 2,
            out_dir: PathBuf::from("/tmp"),
            outcome: Some("ok"),
        }
    }

    #[test]
    fn a_hook_is_told_its_run_and_its_exit_is_its_figure() {
        let ok = run(
            "pre-run",
            "test \"$NCDEVMEM_RUN/$NCDEVMEM_RUNS $NCDEVMEM_POINT $NCDEVMEM_KEY $NCDEVMEM_VALUE \
             $NCDEVMEM_POINT_RUN $NCDEVMEM_OUT_DIR $NCDEVMEM_OUTCOME\" = \
             '3/6 rx-page-size=65536 rx-page-size 65536 2 /tmp ok'",
            &env(),
            Duration::from_secs(10),
            &NO_STOP,
        );
        assert_eq!(ok.error, None, "{ok:?}");
        assert_eq!(ok.exit_code, Some(0));
        let bad = run(
            "post-run",
            "exit 3",
            &env(),
            Duration::from_secs(10),
            &NO_STOP,
        );
        assert_eq!(
            (bad.hook.as_str(), bad.exit_code, bad.error.as_deref()),
            ("post-run", Some(3), Some("exit 3"))
        );
        let killed = run(
            "pre-run",
            "kill -9 $$",
            &env(),
            Duration::from_secs(10),
            &NO_STOP,
        );
        assert_eq!(killed.error.as_deref(), Some("killed by signal 9"));
        let slow = run(
            "pre-run",
            "sleep 5",
            &env(),
            Duration::from_millis(200),
            &NO_STOP,
        );
        assert_eq!(
            slow.error.as_deref(),
            Some("still running after 200ms: killed")
        );
    }
}
