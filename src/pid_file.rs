//! `--pid-file PATH` (as iperf3's `-I`/`--pidfile`): the process id of a listening receiver
//! (`-l`) or of `--peer-server`, for a script that started it in the background and stops it
//! later by that id (where `$!` is not the tool: `ip netns exec`, `sudo`, a wrapper script).
//!
//! Lifecycle:
//! * before anything is set up, [`PidFile::check`] checks that `PATH` can be written (the
//!   checks of `--json FILE`) and that it does not hold the id of a process that is running
//!   (another instance, as iperf3 refuses): either is a usage error (exit 2), and nothing
//!   changed. A file whose process is gone (a SIGKILLed run's) is stale and is overwritten;
//! * once the tool listens (after its `listening on` or `control on` line),
//!   [`PidFile::write`] writes `PID\n` atomically (a temporary file beside it, renamed over
//!   it: a reader sees the whole line or no file); a sweep (`-l --peer`) writes it when its
//!   first run listens. A write that fails then (the directory changed since the check)
//!   fails the run (exit 1);
//! * on every way out — pass, fail, a stop signal (the run unwinds), a panic — the drop
//!   removes the file if it still holds this process's id (a file another process wrote over
//!   it is left alone); the immediate exit of a second Ctrl-C removes it from the signal
//!   handler. Only SIGKILL leaves it behind (a stale file, overwritten by the next run).
//!
//! The file carries no data of the run: it cannot pass bad data into a verdict.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use crate::error::Result;

/// The option's name, for messages.
const FLAG: &str = "--pid-file";

/// A `--pid-file` this process writes once it listens and removes when it ends (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct PidFile {
    /// `PATH` as given.
    path: PathBuf,
    /// The line written: this process's id and a newline.
    line: String,
    /// Whether [`write`](Self::write) wrote it (then the drop removes it).
    written: Cell<bool>,
}

impl PidFile {
    /// Checks that `path` can be written (as `--json FILE`: a file path in an existing
    /// directory this process can create files in, nothing or a regular file there now) and
    /// does not hold the id of another running process. Writes nothing.
    ///
    /// Errors: [`crate::Error::Usage`] naming `--pid-file` and what is wrong.
    pub(crate) fn check(path: &Path) -> Result<PidFile> {
        crate::stats::check_file_path(FLAG, path)?;
        if let Some(pid) = running_owner(path) {
            return Err(crate::Error::Usage(format!(
                "{FLAG}: {} holds the id of process {pid}, which is running (another \
                 instance?); stop it, or remove the file if that process is not one",
                path.display()
            )));
        }
        Ok(PidFile {
            path: path.to_path_buf(),
            line: format!("{}\n", std::process::id()),
            written: Cell::new(false),
        })
    }

    /// Writes the process id (`PID\n`), atomically; the first call only (a sweep's later
    /// runs listen again).
    ///
    /// Errors: [`crate::Error::Usage`] when the path can no longer be a file;
    /// [`crate::Error::Sys`] naming `--pid-file` and the failing step (`create`, `write`,
    /// `fsync`, `rename`).
    pub(crate) fn write(&self) -> Result<()> {
        if self.written.get() {
            return Ok(());
        }
        crate::stats::write_file_atomic(FLAG, &self.path, self.line.as_bytes())?;
        self.written.set(true);
        crate::sys::signals::unlink_at_exit(Some(&self.path));
        Ok(())
    }
}

/// The process id in the file at `path` (`PID` and optional white space, as [`PidFile::write`]
/// writes it) when that process exists and is not this one; `None` for no file, another
/// content or a process that is gone.
fn running_owner(path: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    (pid != std::process::id() as i32 && crate::sys::signals::process_exists(pid)).then_some(pid)
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if !self.written.get() {
            return;
        }
        crate::sys::signals::unlink_at_exit(None);
        // Only our own line: a later run that wrote its id over it keeps its file.
        if std::fs::read_to_string(&self.path).is_ok_and(|s| s == self.line) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ncdevmem-pid-file-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn written_once_and_removed_on_drop() {
        let path = dir().join("written.pid");
        let p = PidFile::check(&path).unwrap();
        assert!(!path.exists(), "check writes nothing");
        p.write().unwrap();
        let line = format!("{}\n", std::process::id());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), line);
        p.write().unwrap();
        drop(p);
        assert!(!path.exists());
    }

    /// The id of a process that has exited and been reaped.
    fn gone_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn not_written_leaves_an_old_file_alone() {
        let path = dir().join("old.pid");
        let old = format!("{}\n", gone_pid());
        std::fs::write(&path, &old).unwrap();
        drop(PidFile::check(&path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), old);
        let _ = std::fs::remove_file(&path);
    }

    /// A file naming a running process (pid 1 always runs) is refused before anything is
    /// written; a stale one (its process gone), another content or this process's own id is
    /// taken over.
    #[test]
    fn a_running_processs_file_is_refused_a_stale_one_taken_over() {
        let path = dir().join("live.pid");
        std::fs::write(&path, "1\n").unwrap();
        let e = PidFile::check(&path).unwrap_err();
        assert!(
            matches!(&e, crate::Error::Usage(m) if m.starts_with("--pid-file: ")
                && m.contains("process 1, which is running")),
            "{e:?}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        let own = format!("{}\n", std::process::id());
        for content in [format!("{}\n", gone_pid()), "not a pid\n".to_string(), own] {
            std::fs::write(&path, &content).unwrap();
            let p = PidFile::check(&path).unwrap();
            p.write().unwrap();
            drop(p);
            assert!(!path.exists(), "{content:?}");
        }
    }

    #[test]
    fn another_process_id_over_it_is_kept() {
        let path = dir().join("other.pid");
        let p = PidFile::check(&path).unwrap();
        p.write().unwrap();
        std::fs::write(&path, "1\n").unwrap();
        drop(p);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_path_that_cannot_be_written_is_a_usage_error() {
        for bad in ["/nonexistent-dir/x.pid", "/proc/ncdevmem.pid", "/tmp/"] {
            let e = PidFile::check(Path::new(bad)).unwrap_err();
            assert!(
                matches!(&e, crate::Error::Usage(m) if m.starts_with("--pid-file: ")),
                "{bad}: {e:?}"
            );
        }
        let d = dir();
        let e = PidFile::check(&d).unwrap_err();
        assert!(matches!(e, crate::Error::Usage(_)), "a directory: {e:?}");
    }
}
