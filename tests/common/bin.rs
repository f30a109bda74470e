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
