//! Running the `ncdevmem-rs` binary in the test namespaces: the end-to-end tests' shared steps.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{NetNs, NetNsPair};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ncdevmem-rs");

/// A fresh namespace pair for `test`, or `None` after printing why the test cannot run here.
pub fn pair(test: &str) -> Option<NetNsPair> {
    if let Some(reason) = super::skip_reason() {
        super::print_skip(test, &reason);
        return None;
    }
    Some(NetNsPair::new().expect("create namespace pair"))
}

/// `ip netns exec NS ncdevmem-rs ARGS`.
pub fn ns_cmd(ns: &NetNs, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name(), BIN]).args(args);
    c
}

/// Starts `c` with its stdout and stderr captured.
pub fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ncdevmem-rs")
}

/// Output bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A `--json` path of this test process for `tag`.
pub fn tmp_json(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ncdevmem-e2e-{}-{tag}.json", std::process::id()))
}

/// Reads and removes a `--json` summary: one JSON object.
pub fn read_json(p: &PathBuf) -> serde_json::Value {
    let s = std::fs::read_to_string(p).expect("read json summary");
    std::fs::remove_file(p).ok();
    serde_json::from_str(&s).expect("summary is one JSON object")
}

/// The rest of a child's stderr, line by line, read by a thread of its own
/// ([`wait_for_line`]).
pub struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    /// The rest of the output, once the child closed its stderr.
    pub fn rest(self) -> String {
        self.0.iter().collect()
    }
}

/// Reads `child`'s stderr until a line containing `want`; returns the reader and what came
/// so far. Kills the child and fails when the output ends first or after 20 s.
pub fn wait_for_line(child: &mut Child, want: &str) -> (Lines, String) {
    wait_for(child, want, |l| l.contains(want))
}

/// [`wait_for_line`] for the first line `found` accepts (`what` names it in the failure).
pub fn wait_for(child: &mut Child, what: &str, found: impl Fn(&str) -> bool) -> (Lines, String) {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let mut line = String::new();
        match err.read_line(&mut line) {
            Ok(n) if n > 0 => {
                if send.send(line).is_err() {
                    return;
                }
            }
            _ => return,
        }
    });
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match recv.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                if found(&line) {
                    return (Lines(recv), seen);
                }
            }
            Err(e) => {
                let _ = child.kill();
                panic!("no '{what}' ({e}): {seen}");
            }
        }
    }
}
