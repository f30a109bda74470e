//! The layers of docs/architecture.md, held against the code: which modules each part of
//! `src/` may name as `crate::…` (in code, not in comments or `#[cfg(test)]` modules).
//! A lower layer that reaches up makes the crate one circle again; this test names the file,
//! the line and the module it reached.

use std::path::{Path, PathBuf};

/// A part of `src/` and the crate modules its code may name.
struct Rule {
    /// Files: a path under `src/`, a folder ending in `/`, or a file.
    part: &'static str,
    /// The top-level crate modules it may use (`crate::NAME`).
    may_use: &'static [&'static str],
}

/// From the bottom up. Leaves first, then the kernel boundary, then the pure values.
const RULES: &[Rule] = &[
    Rule {
        part: "errno.rs",
        may_use: &[],
    },
    Rule {
        part: "missing.rs",
        may_use: &["errno"],
    },
    Rule {
        part: "summary.rs",
        may_use: &[],
    },
    Rule {
        part: "rcvbuf.rs",
        may_use: &[],
    },
    Rule {
        part: "cli/limits.rs",
        may_use: &[],
    },
    Rule {
        part: "error.rs",
        may_use: &["errno", "missing"],
    },
    Rule {
        part: "backoff.rs",
        may_use: &["error"],
    },
    // The kernel boundary: it returns errnos and the kernel's answers, and decides nothing.
    Rule {
        part: "sys/",
        may_use: &["error", "errno", "missing", "sys", "Error", "Result"],
    },
    Rule {
        part: "netlink.rs",
        may_use: &["error", "errno", "sys", "backoff", "netlink"],
    },
    Rule {
        part: "netlink/",
        may_use: &["error", "errno", "sys", "backoff", "netlink"],
    },
    Rule {
        part: "validate.rs",
        may_use: &["error", "validate"],
    },
    Rule {
        part: "validate/",
        may_use: &["error", "validate"],
    },
];

/// Modules no module below them may name: the run's top (app), the lab that composes runs,
/// the modes, and the run's report.
const TOP: &[(&str, &[&str])] = &[
    ("app", &["main.rs", "lib.rs", "app.rs"]),
    ("lab", &["app.rs", "lab.rs", "lab/", "cli.rs", "cli/"]),
    (
        "modes",
        &[
            "app.rs",
            "lab.rs",
            "lab/",
            "modes.rs",
            "modes/",
            "personality/",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `(line number, module)` for each `crate::NAME` in the file's code: comments, strings of
/// doc attributes and the `#[cfg(test)]` module at the end are left out.
fn crate_uses(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending_test = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
            pending_test = true;
            continue;
        }
        if pending_test && t.starts_with("mod ") {
            break;
        }
        if !t.starts_with("#[") {
            pending_test = false;
        }
        let code = match t.find("//") {
            Some(0) => continue,
            Some(k) => &t[..k],
            None => t,
        };
        let mut rest = code;
        while let Some(k) = rest.find("crate::") {
            let after = &rest[k + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `$crate::` in macros is the same crate; `crate::` inside a longer identifier
            // (e.g. `some_crate::`) is another crate.
            let before = &rest[..k];
            let other_crate = before
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if !name.is_empty() && !other_crate {
                out.push((i + 1, name));
            }
            rest = after;
        }
    }
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(src())
        .expect("under src")
        .to_string_lossy()
        .into_owned()
}

fn in_part(rel: &str, part: &str) -> bool {
    if part.ends_with('/') {
        rel.starts_with(part)
    } else {
        rel == part
    }
}

#[test]
fn lower_layers_import_nothing_above_them() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for f in &files {
        let rel = relative(f);
        let text = std::fs::read_to_string(f).expect("read");
        let uses = crate_uses(&text);
        for rule in RULES.iter().filter(|r| in_part(&rel, r.part)) {
            for (line, name) in &uses {
                if !rule.may_use.contains(&name.as_str()) {
                    wrong.push(format!(
                        "src/{rel}:{line}: crate::{name} (src/{} may use only {:?})",
                        rule.part, rule.may_use
                    ));
                }
            }
        }
        for (top, allowed) in TOP {
            if allowed.iter().any(|a| in_part(&rel, a)) {
                continue;
            }
            for (line, name) in &uses {
                if name == top {
                    wrong.push(format!(
                        "src/{rel}:{line}: crate::{name} reaches up (only {allowed:?} may)"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up the layers (docs/architecture.md#layers):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scanner_sees_code_and_skips_comments_and_tests() {
    let text = "use crate::error::Error;\n// crate::lab in a comment\n\
                let x = crate::sys::page_size(); // crate::modes\n\
                $crate::memory::Memory::Udmabuf\nfoo_crate::bar\n\
                #[cfg(test)]\nmod tests {\n    use crate::modes;\n}\n";
    let names: Vec<String> = crate_uses(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["error", "sys", "memory"]);
}
