#!/usr/bin/env python3
"""The validator's AVX2 and AVX-512 builds in a built binary make no call but to a panic.

A function compiled with `#[target_feature(enable = "avx2")]` can inline only functions whose
features are a subset of its own. A generic helper it calls (`std::array::from_fn`, an
iterator adapter) is compiled without AVX2 when LLVM does not inline it; its 32-byte loads
are then calls of their own, their results stored to the stack and read back. Whether LLVM
inlines it differs from one build of the same source to the next: the benchmarks' build of
`repeat_diff_224_avx2` inlined `from_fn`, the release binary's did not, and there the `-v 7`
check ran at a third of a plain read in 1448-byte pieces (docs/benchmarks.md). So the machine
code of the binary that ships is checked, not the benchmark's.

Usage: scripts/simd-calls.py BINARY   (the release ncdevmem-rs, not stripped)

Reads `objdump -d -C`, `objdump -R` (the GOT slots that calls through `*ADDR(%rip)` use) and
`nm -C`. Prints every call from a function of `ncdevmem::validate` whose name has `avx2` or
`avx512` and whose target is not a panic (`panic`, `_fail`, `unwrap_failed`, `expect_failed`
in its name); exit status 1 when there is one, 2 when the binary has no such function (a
stripped binary, or the builds renamed: then this check would check nothing).
"""

import re
import subprocess
import sys

BUILD_FN = re.compile(r"^[0-9a-f]+ <(ncdevmem::validate::.*(?:avx2|avx512)[^>]*)>:$")
DIRECT = re.compile(r"\bcall\s+[0-9a-f]+ <([^>]+)>")
THROUGH_GOT = re.compile(r"\bcall\s+\*0x[0-9a-f]+\(%rip\)\s+# ([0-9a-f]+)")
PANIC = re.compile(r"panic|_fail|unwrap_failed|expect_failed")


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def got_targets(binary):
    """GOT slot address -> the address its relocation puts there (R_X86_64_RELATIVE)."""
    slots = {}
    for line in run("objdump", "-R", binary).splitlines():
        m = re.match(r"^([0-9a-f]+)\s+R_X86_64_RELATIVE\s+\*ABS\*\+0x([0-9a-f]+)$", line)
        if m:
            slots[int(m.group(1), 16)] = int(m.group(2), 16)
    return slots


def symbols(binary):
    names = {}
    for line in run("nm", "-C", "--defined-only", binary).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW":
            names.setdefault(int(parts[0], 16), parts[2])
    return names


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: scripts/simd-calls.py BINARY", file=sys.stderr)
        return 2
    binary = sys.argv[1]
    slots, names = got_targets(binary), symbols(binary)
    current, builds, bad = None, [], []
    for line in run("objdump", "-d", "--no-show-raw-insn", "-C", binary).splitlines():
        m = BUILD_FN.match(line)
        if m:
            current = m.group(1)
            builds.append(current)
            continue
        if not line.strip():
            current = None
            continue
        if current is None:
            continue
        d = DIRECT.search(line)
        g = THROUGH_GOT.search(line)
        if d:
            target = d.group(1)
        elif g:
            address = slots.get(int(g.group(1), 16))
            target = names.get(address, f"GOT slot {g.group(1)}")
        else:
            continue
        if not PANIC.search(target):
            bad.append(f"{current}: {line.strip()}  -> {target}")
    if not builds:
        print(f"simd-calls: no AVX2/AVX-512 build of ncdevmem::validate in {binary}", file=sys.stderr)
        return 2
    for b in bad:
        print(f"simd-calls: {b}")
    print(
        f"simd-calls: {len(builds)} AVX2/AVX-512 builds of the validator in {binary}, "
        f"{len(bad)} calls other than panics"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
