#!/usr/bin/env python3
"""The code's own figures, for before/after tables of a refactor (issue 34's table):

  src lines            every line of src/**/*.rs
  production lines     without blank lines, comments (// and doc comments), #[cfg(test)]
                       modules (inline or in a tests.rs file) and the test doubles
                       (nic/scripted.rs, rx/testing.rs, tx/testing.rs)
  functions >= 100     production functions of 100 lines or more (their names, longest first)
  pub fn               `pub fn` spelled so in src/ (not `pub(crate) fn`; tests included)

Usage: scripts/code-figures.py [SRC_DIR]   (default: src beside this script)
       scripts/code-figures.py --rev REV   (the tree of a git revision, read with git show)

A scanner of text, not a parser: braces in a string or char literal on one line are not
counted (`"{{\"v\":{}}}"`, `'{'`); a brace in a string that spans lines still is. The same
scanner on both sides keeps a comparison fair.
"""

import os
import re
import subprocess
import sys

DOUBLES = {"nic/scripted.rs", "rx/testing.rs", "tx/testing.rs"}
FN_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def files_from_dir(src):
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                with open(p, encoding="utf-8") as f:
                    yield os.path.relpath(p, src), f.read()


def files_from_rev(rev):
    out = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "src"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    for p in out:
        if p.endswith(".rs"):
            text = subprocess.run(
                ["git", "show", f"{rev}:{p}"], check=True, capture_output=True, text=True
            ).stdout
            yield p[len("src/"):], text


LITERAL_RE = re.compile(r'r#*"[^"]*"#*|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')


def braces(line):
    """Opening minus closing braces of a line, outside its one-line string and char literals."""
    code = LITERAL_RE.sub("", line.split("//")[0] if '"' not in line else line)
    return code.count("{") - code.count("}")


def production_lines(text):
    """The lines of code outside comments and #[cfg(test)] modules."""
    out = []
    lines = text.split("\n")
    i = 0
    pending_test = False
    in_block_comment = False
    while i < len(lines):
        line = lines[i]
        t = line.strip()
        if in_block_comment:
            if "*/" in t:
                in_block_comment = False
            i += 1
            continue
        if t.startswith("/*"):
            in_block_comment = "*/" not in t
            i += 1
            continue
        if t.startswith("#[cfg(test)]") or t.startswith("#[cfg(all(test"):
            pending_test = True
            i += 1
            continue
        if pending_test and re.match(r"(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", t):
            depth = braces(t)
            i += 1
            while i < len(lines) and depth > 0:
                depth += braces(lines[i])
                i += 1
            pending_test = False
            continue
        if pending_test and not t.startswith("#["):
            # A #[cfg(test)] item other than a module: skip it to its end.
            depth = braces(t)
            i += 1
            while i < len(lines) and (depth > 0 or (depth == 0 and not t.endswith((";", "}")))):
                t = lines[i].strip()
                depth += braces(t)
                i += 1
                if depth == 0 and t.endswith(("}", ";")):
                    break
            pending_test = False
            continue
        if not t or t.startswith("//"):
            i += 1
            continue
        out.append(line)
        i += 1
    return out


def long_functions(lines, path, limit=100):
    found = []
    i = 0
    while i < len(lines):
        m = FN_RE.match(lines[i])
        if m and "{" in "".join(lines[i:i + 12]) and not lines[i].rstrip().endswith(";"):
            depth = 0
            started = False
            j = i
            while j < len(lines):
                depth += braces(lines[j])
                if "{" in lines[j]:
                    started = True
                if started and depth <= 0:
                    break
                j += 1
            n = j - i + 1
            if n >= limit:
                found.append((n, f"{path}:{m.group(6)}"))
            i += 1
        else:
            i += 1
    return found


def main():
    args = sys.argv[1:]
    if args[:1] == ["--rev"]:
        files = list(files_from_rev(args[1]))
    else:
        src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
        files = list(files_from_dir(src))
    total = sum(t.count("\n") for _, t in files)
    prod = 0
    longs = []
    pub_fn = 0
    for path, text in files:
        pub_fn += len(re.findall(r"\bpub fn\s", text))
        if path in DOUBLES or path.endswith("/tests.rs") or path == "tests.rs":
            continue
        lines = production_lines(text)
        prod += len(lines)
        longs += long_functions(lines, path)
    longs.sort(reverse=True)
    print(f"src lines: {total}")
    print(f"production lines: {prod}")
    print(f"production functions >= 100 lines: {len(longs)}")
    for n, name in longs:
        print(f"  {n:4d}  {name}")
    print(f"pub fn: {pub_fn}")


if __name__ == "__main__":
    main()
