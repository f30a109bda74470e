#!/usr/bin/env bash
# make dist-test: the tarballs of make dist, checked here, and the aarch64 binary run under
# qemu user-mode emulation (Debian's qemu-user-static), next to the x86_64 one run natively:
#
#   version   build.rs outside a git checkout (a source tarball: "commit unknown"), inside
#             another project's checkout (also unknown), in a clean and a dirty checkout
#   tarball   each tarball's files, links and README; both binaries static and stripped, for
#             the right machine, and their --version naming their target
#   aarch64   under qemu: --help and --version; the exit codes (and the usage messages) of a
#             corpus of bad command lines equal to the x86_64 binary's, and as root those of
#             the argv corpus's 888 single-process command lines (tests/fixtures/argv-corpus.txt:
#             every exit code, and every usage error's message); a 256 MiB keyed-stream
#             (--seed) transfer over loopback from an aarch64 sender to an aarch64 plain
#             receiver, validated; the same stream between the two architectures (byte by byte
#             equal); a -v pattern transfer; one byte flipped in flight (a relay on loopback)
#             caught by the aarch64 receiver at its offset; a receiver of the wrong seed
#             counting exactly the mismatches the x86_64 one counts
#   unit      the library's unit tests of the validator (the multiversion dispatch, the
#             keyed and periodic streams, proptests), the uapi layouts and tcp_info, built
#             for aarch64 and run under qemu
#
# What qemu-user cannot run is said, not tested: it has no io_uring (zcrx, iou-zcrx) and
# refuses generic netlink sockets (socket(AF_NETLINK, NETLINK_GENERIC): EPROTONOSUPPORT), so
# the probe, --report and the devmem modes end there (a line each shows it); they run on the
# x86_64 static binary in the VM suite instead (make vm-test-dist). qemu 7.2 also passes
# TCP_CONGESTION's name to the kernel as a 4-byte int, so --tcp-cc fails there (ENOENT).
#
# Tools: qemu-user-static, and for the unit tests gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross (a dev-dependency, criterion, compiles a C file), installed when
# missing as root; otherwise the run fails naming them, or, with
# NCDEVMEM_REQUIRE_REAL_KERNEL_TESTS unset or 0 and not root, prints why and skips.
# Traffic only over 127.0.0.1, on ports the kernel picks (-p 0).
#
# usage: scripts/dist-test.sh       (after make dist)     env: CARGO
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
not_ok() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # check NAME CMD...: ok when CMD succeeds
    local name=$1
    shift
    if "$@"; then ok "$name"; else not_ok "$name"; fi
}
note() { echo "note: $*"; }
finish() {
    echo "dist-test: $passed passed, $failed failed"
    exit $((failed > 0))
}
die() {
    echo "dist-test: FAIL: $*" >&2
    failed=$((failed + 1))
    finish
}

# ---- tools ------------------------------------------------------------------------------
qemu_bin() { command -v qemu-aarch64-static || command -v qemu-aarch64 || true; }
missing_pkgs() {
    local m=()
    [ -n "$(qemu_bin)" ] || m+=(qemu-user-static)
    command -v aarch64-linux-gnu-gcc >/dev/null || m+=(gcc-aarch64-linux-gnu)
    [ -e /usr/aarch64-linux-gnu/include/stdio.h ] || m+=(libc6-dev-arm64-cross)
    ((${#m[@]} == 0)) || echo "${m[*]}"
}
need=$(missing_pkgs)
if [ -n "$need" ]; then
    if [ "$(id -u)" != 0 ]; then
        if [ "${NCDEVMEM_REQUIRE_REAL_KERNEL_TESTS:-0}" = 1 ]; then
            die "missing $need (apt-get install $need as root, or run make test as root)"
        fi
        echo "skip: dist-test: missing $need and not root to install it" \
            "(apt-get install $need)"
        exit 0
    fi
    echo "dist-test: installing $need" >&2
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086 # package names are words
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 $need >/dev/null; } || die "apt-get install $need failed"
    need=$(missing_pkgs)
    [ -z "$need" ] || die "still missing after installing: $need"
fi
qemu=$(qemu_bin)
note "qemu-user: $("$qemu" --version | head -1)"

target_dir=$(CARGO=$cargo scripts/target-dir.sh)
out=$target_dir/dist
pkg_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
x86_dir=$out/ncdevmem-rs-$pkg_version-x86_64
arm_dir=$out/ncdevmem-rs-$pkg_version-aarch64
for d in "$x86_dir" "$arm_dir"; do
    [ -s "$d.tar.gz" ] || die "$d.tar.gz missing: run make dist first"
done
tmp=$(mktemp -d /tmp/ncdevmem-dist-test.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# ---- version: build.rs ------------------------------------------------------------------
rustc --edition 2021 -O -o "$tmp/build-script" build.rs 2>"$tmp/rustc.err" ||
    die "build.rs does not compile on its own: $(cat "$tmp/rustc.err")"
version_of() { # version_of DIR: the NCDEVMEM_VERSION build.rs makes for DIR
    (cd "$1" && CARGO_MANIFEST_DIR=$1 TARGET=aarch64-unknown-linux-musl \
        CARGO_PKG_VERSION=$pkg_version "$tmp/build-script") |
        sed -n 's/^cargo:rustc-env=NCDEVMEM_VERSION=//p'
}
inputs=(src build.rs Cargo.toml Cargo.lock)
mkdir -p "$tmp/tarball" "$tmp/outer/inner" "$tmp/clone"
git archive HEAD "${inputs[@]}" docs/json.md | tar -x -C "$tmp/tarball"
check "version: a source tarball says commit unknown" \
    test "$(version_of "$tmp/tarball")" = "$pkg_version (commit unknown, target aarch64-unknown-linux-musl)"
git -C "$tmp/outer" init -q
git archive HEAD "${inputs[@]}" | tar -x -C "$tmp/outer/inner"
check "version: a tarball unpacked inside another git checkout says commit unknown" \
    test "$(version_of "$tmp/outer/inner")" = "$pkg_version (commit unknown, target aarch64-unknown-linux-musl)"
git archive HEAD "${inputs[@]}" docs/json.md | tar -x -C "$tmp/clone"
git -C "$tmp/clone" init -q
git -C "$tmp/clone" add -A
git -C "$tmp/clone" -c user.name=t -c user.email=t@t commit -qm t
hash=$(git -C "$tmp/clone" rev-parse --short=12 HEAD)
check "version: a clean checkout names its commit" \
    test "$(version_of "$tmp/clone")" = "$pkg_version (commit $hash, target aarch64-unknown-linux-musl)"
echo "edited" >>"$tmp/clone/docs/json.md"
check "version: an edit outside the binary's sources (docs/) is not dirty" \
    test "$(version_of "$tmp/clone")" = "$pkg_version (commit $hash, target aarch64-unknown-linux-musl)"
echo "// edited" >>"$tmp/clone/src/lib.rs"
check "version: an edit of src/ is -dirty" \
    test "$(version_of "$tmp/clone")" = "$pkg_version (commit $hash-dirty, target aarch64-unknown-linux-musl)"

# ---- tarballs -----------------------------------------------------------------------------
# elf_check FILE MACHINE: a static (no PT_INTERP), stripped (no .symtab) ELF64 for MACHINE.
elf_check() {
    python3 - "$1" "$2" <<'EOF'
import struct, sys
path, machine = sys.argv[1], int(sys.argv[2])
b = open(path, "rb").read()
assert b[:4] == b"\x7fELF" and b[4] == 2 and b[5] == 1, "not a little-endian ELF64"
(e_machine,) = struct.unpack_from("<H", b, 18)
phoff, shoff = struct.unpack_from("<QQ", b, 32)
phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", b, 54)
assert e_machine == machine, f"machine {e_machine}, expected {machine}"
types = [struct.unpack_from("<I", b, phoff + i * phentsize)[0] for i in range(phnum)]
assert 3 not in types, "has PT_INTERP: dynamically linked"
sh = lambda i: struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize)
stroff = sh(shstrndx)[4]
names = {b[stroff + sh(i)[0]:].split(b"\0", 1)[0].decode() for i in range(shnum)}
assert ".symtab" not in names and ".debug_info" not in names, "not stripped"
EOF
}
for arch in x86_64 aarch64; do
    d=$out/ncdevmem-rs-$pkg_version-$arch
    rm -rf "$tmp/unpack"
    mkdir -p "$tmp/unpack"
    tar -xzf "$d.tar.gz" -C "$tmp/unpack"
    u=$tmp/unpack/ncdevmem-rs-$pkg_version-$arch
    files=$(cd "$tmp/unpack" && find . -mindepth 1 | sort | tr '\n' ' ')
    want=". ./NAME ./NAME/README ./NAME/iou-zcrx ./NAME/ncdevmem-rs ./NAME/py"
    for f in py/README.md $(cd py && ls ./*.py | sed 's|^\./|py/|') py/ncdevmem-rs; do
        want+=" ./NAME/$f"
    done
    want=$(tr ' ' '\n' <<<"${want//NAME/ncdevmem-rs-$pkg_version-$arch}" | tail -n +2 | sort |
        tr '\n' ' ')
    check "$arch tarball: the binary, iou-zcrx, py/ (without its tests), README" \
        test "$files" = "$want"
    check "$arch tarball: iou-zcrx and py/ncdevmem-rs link to the binary" \
        test "$(readlink "$u/iou-zcrx") $(readlink "$u/py/ncdevmem-rs")" = "ncdevmem-rs ../ncdevmem-rs"
    machine=62
    [ "$arch" = aarch64 ] && machine=183
    check "$arch binary: static, stripped, for $arch" elf_check "$u/ncdevmem-rs" "$machine"
    size=$(stat -c %s "$u/ncdevmem-rs")
    check "$arch README: names the version and the size ($size bytes)" \
        grep -q "$size bytes" "$u/README"
    echo "   $arch: tarball $(stat -c %s "$d.tar.gz") bytes, ncdevmem-rs $size bytes"
    # The project README's table of sizes, within 10 % of today's (it is not updated per commit).
    readme_sizes=$(sed -n "s/^| \`ncdevmem-rs-$pkg_version-$arch.tar.gz\` | [^(]*(\([0-9]*\) bytes) | [^(]*(\([0-9]*\) bytes) |$/\1 \2/p" README.md)
    check "README.md's sizes for $arch ($readme_sizes) within 10 % of the built ones ($size $(stat -c %s "$d.tar.gz"))" \
        awk -v r="$readme_sizes" -v b="$size" -v t="$(stat -c %s "$d.tar.gz")" \
        'BEGIN { n = split(r, s, " "); exit !(n == 2 && s[1] > b * 0.9 && s[1] < b * 1.1 && s[2] > t * 0.9 && s[2] < t * 1.1) }'
done
x86=$x86_dir/ncdevmem-rs
arm=$arm_dir/ncdevmem-rs
# The two binaries as commands: X86 natively, ARM under qemu.
X86=("$x86")
ARM=("$qemu" "$arm")
arm_run() { "${ARM[@]}" "$@"; }
x86_version=$("$x86" --version)
check "x86_64 --version names the commit and the musl target ($x86_version)" \
    grep -Eq "^ncdevmem-rs $pkg_version \(commit ([0-9a-f]{12}(-dirty)?|unknown), target x86_64-unknown-linux-musl\)$" <<<"$x86_version"
check "x86_64 README names that version" grep -qF "${x86_version#ncdevmem-rs }" "$x86_dir/README"

# ---- aarch64 under qemu-user ----------------------------------------------------------------
arm_version=$(arm_run --version) || true
check "aarch64 --version under qemu: the same commit, target aarch64-unknown-linux-musl" \
    test "$arm_version" = "${x86_version/x86_64-unknown-linux-musl/aarch64-unknown-linux-musl}"
check "aarch64 --help under qemu: exit 0, the same text as x86_64's" \
    cmp -s <(arm_run --help) <("$x86" --help)

# Bad command lines: the same exit code on both, and for usage errors (2) the same message.
corpus=(
    ""
    "-x"
    "-p"
    "-f"
    "-l"
    "-s 127.0.0.1 -p 1"
    "-l --plain -s 127.0.0.1 -p 70000"
    "-l --plain -s 127.0.0.1 -p 1 -v 1"
    "-l --plain -s 127.0.0.1 -p 1 -v 257"
    "-l --plain -s 127.0.0.1 -p 1 --seed abc"
    "-l --plain -s 127.0.0.1 -p 1 --seed 1 -v 7"
    "-l --plain -s 127.0.0.1 -p 1 --seed 1 --flows 0"
    "-l --plain -s 127.0.0.1 -p 1 --seed 1 --timeout x"
    "-l --plain -s 127.0.0.1 -p 1 --seed 1 --json"
    "-l --plain -s 127.0.0.1 -p 1 --seed 1 --expect-bytes 1Q"
    "-l --zcrx --plain -s 127.0.0.1 -p 1"
    "--send-pattern 1G -s 127.0.0.1 --seed 1"
    "--send-pattern 1X -s 127.0.0.1 -p 1 --seed 1"
    "--send-pattern 1M -s not-an-address -p 1 --seed 1"
    "-f eth0 -t 1"
    "-f eth0 -b 3000"
    "-f eth0 -A 2"
    "-l -f eth0 -s ::1 -p 1 -U 3"
    "--send-pattern 1M -s 127.0.0.1 -p 1 --seed 1 --timeout 1"
    "-l --plain -s 192.0.2.99 -p 5999 --seed 1 --timeout 1"
)
same=0
for line in "${corpus[@]}"; do
    read -ra args <<<"$line"
    xrc=0 arc=0
    "$x86" "${args[@]}" >/dev/null 2>"$tmp/x.err" </dev/null || xrc=$?
    arm_run "${args[@]}" >/dev/null 2>"$tmp/a.err" </dev/null || arc=$?
    if [ "$xrc" != "$arc" ]; then
        not_ok "exit code of '$line': x86_64 $xrc, aarch64 $arc ($(head -1 "$tmp/a.err"))"
    elif [ "$xrc" = 0 ]; then
        not_ok "'$line' is in the corpus of bad command lines but exited 0"
    elif [ "$xrc" = 2 ] && ! cmp -s "$tmp/x.err" "$tmp/a.err"; then
        not_ok "usage message of '$line': x86_64 '$(head -1 "$tmp/x.err")', aarch64 '$(head -1 "$tmp/a.err")'"
    else
        same=$((same + 1))
    fi
done
for line in "" "-x" "-s -i lo -q 0 -p 99999" "-c" "-s -q 1"; do
    read -ra args <<<"$line"
    xrc=0 arc=0
    "$x86_dir/iou-zcrx" "${args[@]}" >/dev/null 2>&1 </dev/null || xrc=$?
    "$qemu" "$arm_dir/iou-zcrx" "${args[@]}" >/dev/null 2>&1 </dev/null || arc=$?
    if [ "$xrc" = "$arc" ] && [ "$xrc" != 0 ]; then
        same=$((same + 1))
    else
        not_ok "exit code of 'iou-zcrx $line': x86_64 $xrc, aarch64 $arc"
    fi
done
check "aarch64 under qemu: $same bad command lines (ncdevmem-rs and iou-zcrx) exit as on x86_64" \
    test "$same" = $((${#corpus[@]} + 5))

# The argv corpus (tests/fixtures/argv-corpus.txt, scripts/argv-corpus.py; root: a network
# namespace per entry): its single-process categories (cli, role, edge, iou) recorded with
# each binary, the aarch64 one under qemu. Every entry must exit alike, except where the
# aarch64 run met one of qemu-user's limits, named by the binary's own message: generic
# netlink (the probe, --report, devmem modes), io_uring (zcrx, iou-zcrx), and TCP_CONGESTION
# (qemu 7.2 passes the name as a 4-byte int: "cubic" reaches the kernel as "cubi", ENOENT).
# The usage errors (exit 2 on x86_64) must match entirely: the same message, normalized.
if [ "$(id -u)" = 0 ]; then
    only='^(cli|role|edge|iou)\.'
    corpus_ok=1
    for side in x86:"$x86": arm:"$arm":"--runner=$qemu"; do
        IFS=: read -r name bin runner <<<"$side"
        # shellcheck disable=SC2086 # runner is one option or none
        scripts/argv-corpus.py record --bin "$bin" --out "$tmp/corpus-$name.jsonl" \
            --only "$only" $runner 2>"$tmp/corpus-$name.err" || {
            not_ok "argv corpus recording ($name): $(tail -3 "$tmp/corpus-$name.err")"
            corpus_ok=0
        }
    done
    if [ "$corpus_ok" = 1 ]; then
        verdict=$(python3 - "$tmp/corpus-x86.jsonl" "$tmp/corpus-arm.jsonl" \
            "$tmp/usage-ids" <<'EOF'
import collections, json, re, sys
def load(p):
    return {e["id"]: e for e in map(json.loads, open(p)) if "id" in e}
x, a = load(sys.argv[1]), load(sys.argv[2])
# qemu-user's limits, as the aarch64 binary words them.
limits = [("generic netlink", "socket(AF_NETLINK): EPROTONOSUPPORT"),
          ("io_uring", "io_uring_setup(") , ("TCP_CONGESTION", "--tcp-cc: this kernel has no")]
same, usage, limited, bad = 0, [], collections.Counter(), []
for eid, xe in x.items():
    ae = a.get(eid)
    xs = [p["exit"] for p in xe["procs"]]
    if ae is None:
        bad.append(f"{eid}: not recorded on aarch64")
        continue
    if xs == [p["exit"] for p in ae["procs"]]:
        same += 1
        if all(s == 2 for s in xs):
            usage.append(eid)
        continue
    err = "".join(p["stderr"] if isinstance(p["stderr"], str) else "" for p in ae["procs"])
    kind = next((k for k, sig in limits if sig in err), None)
    if kind:
        limited[kind] += 1
    else:
        bad.append(f"{eid}: x86_64 exit {xs}, aarch64 {[p['exit'] for p in ae['procs']]}: "
                   f"{err.strip()[:160]}")
with open(sys.argv[3], "w") as f:
    f.write("^(" + "|".join(re.escape(i) for i in usage) + ")$")
print(f"{len(x)} {same} {len(usage)} "
      + (", ".join(f"{n} {k}" for k, n in sorted(limited.items())) or "none"))
for b in bad:
    print(b)
EOF
        ) || verdict="0 0 0 the comparison failed"
        read -r total same_exit usage_n limited <<<"$(head -1 <<<"$verdict")"
        if [ "$(wc -l <<<"$verdict")" = 1 ] && [ "$total" -gt 800 ]; then
            ok "aarch64 under qemu: the argv corpus's $total single-process command lines (cli, role, edge, iou): $same_exit exit as on x86_64; the rest meet qemu-user's limits ($limited), said by the binary"
        else
            not_ok "argv corpus exit codes, x86_64 vs aarch64 under qemu: $(tail -n +2 <<<"$verdict" | head -20)"
        fi
        if [ "$usage_n" -gt 400 ] && scripts/argv-corpus.py diff "$tmp/corpus-x86.jsonl" \
            "$tmp/corpus-arm.jsonl" --only "$(cat "$tmp/usage-ids")" >"$tmp/usage.diff" 2>&1; then
            ok "aarch64 under qemu: the argv corpus's $usage_n usage errors (exit 2): the same messages as x86_64's"
        else
            head -40 "$tmp/usage.diff"
            not_ok "aarch64 under qemu: usage errors of the argv corpus differ from x86_64's ($(tail -1 "$tmp/usage.diff"))"
        fi
    fi
else
    note "the argv corpus comparison needs root (a network namespace per entry): not run"
fi

# listen CMD...: starts a receiver (its whole command line, with -p 0), waits for its listening
# line; sets rx_pid and rx_port, its stderr in $tmp/rx.err.
listen() {
    : >"$tmp/rx.err"
    "$@" 2>"$tmp/rx.err" &
    rx_pid=$!
    pids+=("$rx_pid")
    local i
    for i in $(seq 1 300); do
        rx_port=$(sed -n 's/.*listening on \[.*\]:\([0-9]*\)$/\1/p' "$tmp/rx.err")
        [ -n "$rx_port" ] && return 0
        kill -0 "$rx_pid" 2>/dev/null || break
        sleep 0.1
    done
    not_ok "receiver did not listen: $(cat "$tmp/rx.err")"
    return 1
}
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j$2)" "$1"; }
seed=$((RANDOM * 65536 + RANDOM))

# 256 MiB keyed stream, aarch64 → aarch64.
if listen "${ARM[@]}" -l --plain -s 127.0.0.1 -p 0 --seed "$seed" --expect-bytes 256M --timeout 120 \
    --json "$tmp/rx.json"; then
    t0=$(date +%s.%N)
    trc=0
    arm_run --send-pattern 256M -s 127.0.0.1 -p "$rx_port" --seed "$seed" --timeout 120 \
        --json "$tmp/tx.json" 2>"$tmp/tx.err" || trc=$?
    rrc=0
    wait "$rx_pid" || rrc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$trc.$rrc" = 0.0 ] &&
        [ "$(json "$tmp/rx.json" "['validated_bytes']")" = 268435456 ] &&
        [ "$(json "$tmp/rx.json" "['mismatches']")" = 0 ]; then
        ok "aarch64 under qemu: 256 MiB of the keyed stream (--seed $seed) over loopback, aarch64 sender to aarch64 receiver, every byte validated against the receiver's own copy of the stream, 0 mismatches (${secs} s emulated)"
    else
        not_ok "aarch64 256 MiB keyed transfer: sender exit $trc, receiver exit $rrc: $(tail -2 "$tmp/rx.err") $(tail -1 "$tmp/tx.err")"
    fi
fi
check "aarch64 --json's version: the same as its --version (${arm_version#ncdevmem-rs })" \
    test "$(json "$tmp/rx.json" "['version']" 2>&1)" = "${arm_version#ncdevmem-rs }"

# The same stream across the architectures: x86_64 sender, aarch64 receiver, and back.
for dir in "x86_64 aarch64" "aarch64 x86_64"; do
    read -r from to <<<"$dir"
    rx_cmd=("${ARM[@]}") tx_cmd=("${X86[@]}")
    [ "$to" = x86_64 ] && rx_cmd=("${X86[@]}") tx_cmd=("${ARM[@]}")
    if listen "${rx_cmd[@]}" -l --plain -s 127.0.0.1 -p 0 --seed "$seed" --expect-bytes 32M \
        --timeout 60 --json "$tmp/rx.json"; then
        trc=0 rrc=0
        "${tx_cmd[@]}" --send-pattern 32M -s 127.0.0.1 -p "$rx_port" --seed "$seed" --timeout 60 \
            --json "$tmp/tx.json" 2>"$tmp/tx.err" || trc=$?
        wait "$rx_pid" || rrc=$?
        # A keyed stream checked byte by byte carries no CRC-32 (the JSON's crc32 is null on
        # both ends): the receiver regenerates the stream on its own architecture, so every
        # byte validated is the same stream on both.
        if [ "$trc.$rrc" = 0.0 ] && [ "$(json "$tmp/rx.json" "['mismatches']")" = 0 ] &&
            [ "$(json "$tmp/rx.json" "['validated_bytes']")" = 33554432 ]; then
            ok "32 MiB keyed stream from an $from sender validated byte by byte by an $to receiver (the same bytes on both)"
        else
            not_ok "$from → $to keyed transfer: sender exit $trc, receiver exit $rrc: $(tail -1 "$tmp/rx.err")"
        fi
    fi
done

# The periodic pattern (-v 7) on aarch64.
if listen "${ARM[@]}" -l --plain -s 127.0.0.1 -p 0 -v 7 --expect-bytes 16M --timeout 60 \
    --json "$tmp/rx.json"; then
    trc=0 rrc=0
    arm_run --send-pattern 16M -s 127.0.0.1 -p "$rx_port" -v 7 --timeout 60 2>"$tmp/tx.err" || trc=$?
    wait "$rx_pid" || rrc=$?
    check "aarch64 under qemu: 16 MiB of the -v 7 pattern validated" \
        test "$trc.$rrc.$(json "$tmp/rx.json" "['validated_bytes']")" = 0.0.16777216
fi

# One byte flipped in flight by a relay on loopback: the aarch64 receiver must fail naming
# exactly that offset, one mismatched byte.
flip=3145733
if listen "${ARM[@]}" -l --plain -s 127.0.0.1 -p 0 --seed "$seed" --expect-bytes 8M --timeout 60 \
    --json "$tmp/rx.json"; then
    python3 - "$rx_port" "$flip" >"$tmp/relay.port" 2>"$tmp/relay.err" <<'EOF' &
import socket, sys
dst, flip = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
ls.settimeout(60)
print(ls.getsockname()[1], flush=True)
src, _ = ls.accept()
src.settimeout(60)
out = socket.create_connection(("127.0.0.1", dst), timeout=60)
seen = 0
while True:
    b = src.recv(1 << 16)
    if not b:
        break
    if seen <= flip < seen + len(b):
        b = bytearray(b)
        b[flip - seen] ^= 0x01
        b = bytes(b)
    seen += len(b)
    out.sendall(b)
out.shutdown(socket.SHUT_WR)
out.recv(1)
EOF
    relay=$!
    pids+=("$relay")
    for _ in $(seq 1 100); do [ -s "$tmp/relay.port" ] && break; sleep 0.1; done
    trc=0 rrc=0
    arm_run --send-pattern 8M -s 127.0.0.1 -p "$(cat "$tmp/relay.port")" --seed "$seed" \
        --timeout 60 2>"$tmp/tx.err" || trc=$?
    wait "$rx_pid" || rrc=$?
    wait "$relay" 2>/dev/null || true
    if [ "$rrc" = 1 ] && [ "$(json "$tmp/rx.json" "['mismatches']")" = 1 ] &&
        grep -q "stream offset $flip" "$tmp/rx.err"; then
        ok "aarch64 under qemu: one byte flipped in flight at stream offset $flip: exit 1, exactly 1 mismatch, at that offset"
    else
        not_ok "aarch64 flipped byte: receiver exit $rrc (want 1): $(grep -m2 "mismatch\|fail" "$tmp/rx.err")"
    fi
fi

# A receiver of another seed: every differing byte counted, the same count on both machines.
# mismatches_of CMD...: "EXIT MISMATCHES" of receiver CMD of seed+1 given seed's 4 MiB.
mismatches_of() {
    local rrc=0
    mm=none
    listen "$@" -l --plain -s 127.0.0.1 -p 0 --seed $((seed + 1)) --expect-bytes 4M --timeout 60 \
        --json "$tmp/rx.json" || return 0
    "$x86" --send-pattern 4M -s 127.0.0.1 -p "$rx_port" --seed "$seed" --timeout 60 2>/dev/null ||
        true
    wait "$rx_pid" || rrc=$?
    mm="$rrc $(json "$tmp/rx.json" "['mismatches']")"
}
mismatches_of "${X86[@]}"
want=$mm
mismatches_of "${ARM[@]}"
got=$mm
if [ "${want%% *}" = 1 ] && [ "$got" = "$want" ]; then
    ok "aarch64 under qemu: a receiver of the wrong seed fails (exit 1) counting ${want#* } mismatched bytes of 4 MiB, as x86_64 does"
else
    not_ok "wrong-seed receiver: x86_64 '$want', aarch64 '$got' (exit code, mismatches)"
fi

# What qemu-user cannot run: said, with the binary's own words (its exit code: a skip or a
# failure, never a crash).
limit() { # limit WHAT WHY ARGS...: runs ARGS on aarch64, notes its first line
    local what=$1 why=$2 rc=0
    shift 2
    arm_run "$@" >/dev/null 2>"$tmp/a.err" </dev/null || rc=$?
    note "not testable under qemu-user: $what: $why; aarch64 '$*' answers exit $rc:" \
        "$(grep -m1 . "$tmp/a.err" | cut -c1-200)"
    case $rc in 1 | 4) ;; *) not_ok "aarch64 '$*' under qemu: exit $rc, not 1 or 4" ;; esac
}
limit "the probe, --report, devmem RX and TX (-f IF)" \
    "qemu-user refuses generic netlink sockets (the netdev and ethtool families)" --report -f lo
limit "io_uring zcrx (--zcrx, iou-zcrx -s)" "qemu-user has no io_uring syscalls" \
    -l --zcrx --zcrx-nodev -s 127.0.0.1 -p 5998 -v 7 --timeout 1
note "both run on the x86_64 static binary in the VM suite (make vm-test-dist)"

# ---- aarch64 unit tests under qemu -----------------------------------------------------------
log=$tmp/unit.log
if CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=$qemu \
    "$cargo" test -q --profile dist --locked --target aarch64-unknown-linux-musl --lib -- \
    validate:: sys::uapi sys::tcp >"$log" 2>&1; then
    ok "aarch64 unit tests under qemu (validate::, sys::uapi, sys::tcp): $(grep -m1 '^test result' "$log")"
else
    tail -30 "$log"
    not_ok "aarch64 unit tests under qemu (validate::, sys::uapi, sys::tcp)"
fi

finish
