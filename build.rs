//! Makes the version string `ncdevmem-rs --version` prints and the JSON summary's `version`
//! carries (`ncdevmem::VERSION`, from the `NCDEVMEM_VERSION` variable set here):
//!
//! `CARGO_PKG_VERSION (commit HASH, target TRIPLE)`: HASH is the checkout's commit (12 hex
//! digits), with `-dirty` when the files the binary is built from (`src/`, `build.rs`,
//! `Cargo.toml`, `Cargo.lock`, `.cargo/`) differ from that commit, and `unknown` where there
//! is no git checkout of this package (a source tarball, no git installed); TRIPLE is the
//! target the build is for (`x86_64-unknown-linux-musl`, say).
//!
//! The script reruns when those files or the checkout's HEAD change, so a commit or an edit
//! is seen without a `cargo clean`; edits elsewhere (tests, docs) neither rebuild nor count
//! as dirty.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files the binary is built from: what `-dirty` looks at and what reruns this script.
const INPUTS: [&str; 5] = ["src", "build.rs", "Cargo.toml", "Cargo.lock", ".cargo"];

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_else(|_| "unknown".into());
    for input in INPUTS {
        if dir.join(input).exists() {
            println!("cargo:rerun-if-changed={input}");
        }
    }
    let commit = match checkout(&dir) {
        Some(c) => {
            for path in c.watch {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            format!("{}{}", c.hash, if c.dirty { "-dirty" } else { "" })
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=NCDEVMEM_VERSION={version} (commit {commit}, target {target})");
}

/// What git says of the checkout at `dir`.
struct Checkout {
    /// HEAD's commit, 12 hex digits.
    hash: String,
    /// Whether any of [`INPUTS`] differs from HEAD (staged, unstaged or untracked).
    dirty: bool,
    /// The files that move when HEAD does: HEAD itself, the branch's ref, packed-refs.
    watch: Vec<PathBuf>,
}

/// `None` when `dir` is not the top of a git checkout (no git, no `.git`, or `dir` inside
/// another project's checkout, as an unpacked source tarball may be).
fn checkout(dir: &Path) -> Option<Checkout> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(dir).ok()? {
        return None;
    }
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    let mut status = vec!["status", "--porcelain", "--untracked-files=normal", "--"];
    status.extend(INPUTS);
    let dirty = !git(dir, &status)?.is_empty();
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let git_dir = abs(git(dir, &["rev-parse", "--git-dir"])?);
    let common = abs(git(dir, &["rev-parse", "--git-common-dir"])?);
    let mut watch = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(common.join(branch));
    }
    // A path that does not exist would rerun the script on every build.
    watch.retain(|p| p.exists());
    Some(Checkout { hash, dirty, watch })
}

/// `git ARGS` in `dir`: its trimmed stdout, or `None` when git is missing or fails. Never
/// writes to the repository (no index refresh: GIT_OPTIONAL_LOCKS=0).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
