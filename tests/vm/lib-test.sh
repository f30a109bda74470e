#!/usr/bin/env bash
# Tests of the shell helpers (make scripts-test): tests/vm/lib.sh (the Debian mirror taken from
# an apt configuration in both source formats, the cache location, the console filter, the
# KERNEL_TREE checks: configuration, architecture, image version, compiler; what a chroot lacks
# for the netkit tests; the guest's time limit and its failure line),
# tests/vm/build-kselftest.sh --sys-includes, tests/vm/run.sh's command line (--timeout,
# --shell) and make vm-shell without booting,
# scripts/target-dir.sh (cargo's target directory, CARGO_TARGET_DIR honoured) and
# scripts/install-test-tools.sh (without root it names what is missing and fails). Builds its
# apt configurations under a temporary directory; touches nothing else.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 passed=0
check() { # check NAME WANT GOT
    if [ "$2" == "$3" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        printf 'FAIL %s\n  want: %q\n  got:  %q\n' "$1" "$2" "$3" >&2
    fi
}
root() { # root NAME: a fresh configuration root
    rm -rf "${tmp:?}/$1"
    mkdir -p "$tmp/$1/etc/apt/sources.list.d"
    echo "$tmp/$1"
}

# One-line form (sources.list): comments, deb-src, options, the security suite first, a CD.
r=$(root oneline)
cat >"$r/etc/apt/sources.list" <<'EOF'
# deb http://commented.example/debian bookworm main
deb cdrom:[Debian GNU/Linux 12]/ bookworm main
deb http://security.example/debian-security bookworm-security main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian/ bookworm main contrib   # trailing comment
deb http://updates.example/debian bookworm-updates main
EOF
check "one-line: main archive" "http://mirror.example/debian" "$(debian_mirror bookworm "$r")"
check "one-line: entries" \
    "cdrom:[Debian%20GNU/Linux%2012]/ bookworm main
http://security.example/debian-security bookworm-security main
http://mirror.example/debian/ bookworm main contrib
http://updates.example/debian bookworm-updates main" \
    "$(apt_deb_sources "$r" | head -4)"
check "one-line: no trixie entry" "1" "$(debian_mirror trixie "$r" >/dev/null && echo 0 || echo 1)"

# deb822 form (*.sources): a disabled paragraph first, a comment inside a paragraph, several
# suites and URIs, a continuation line, another component only.
r=$(root deb822)
cat >"$r/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://disabled.example/debian
Suites: trixie
Components: main
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: trixie
Components: main

# a comment between paragraphs
Types: deb deb-src
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: https://first.example/debian
 http://second.example/debian
Suites: trixie trixie-updates
Components: contrib
 main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: trixie-security
Components: main
EOF
check "deb822: main archive" "https://first.example/debian" "$(debian_mirror trixie "$r")"
check "deb822: entries" \
    "https://first.example/debian trixie contrib main
https://first.example/debian trixie-updates contrib main
http://second.example/debian trixie contrib main
http://second.example/debian trixie-updates contrib main
http://security.example/debian-security trixie-security main" \
    "$(apt_deb_sources "$r")"
check "deb822: security suite is not the archive" "1" \
    "$(debian_mirror trixie-security-x "$r" >/dev/null && echo 0 || echo 1)"

# Both forms together, the .list in sources.list.d; a non-main entry does not count; files with
# other endings are not read (as apt).
r=$(root mixed)
echo "deb http://nomain.example/debian bookworm contrib" >"$r/etc/apt/sources.list"
echo "deb http://disabled.example/debian bookworm main" >"$r/etc/apt/sources.list.d/x.list.disabled"
printf 'Types: deb\nURIs: http://parts.example/debian\nSuites: bookworm\nComponents: main\n' \
    >"$r/etc/apt/sources.list.d/debian.sources"
check "mixed: main component needed" "http://parts.example/debian" "$(debian_mirror bookworm "$r")"

# Nothing usable: status 1, nothing printed.
r=$(root none)
check "none: nothing" "1:" "$(out=$(debian_mirror bookworm "$r") && echo "0:$out" || echo "1:$out")"

# The cache directory.
check "cache: variable wins" "/x/c" "$(NCDEVMEM_VM_CACHE=/x/c XDG_CACHE_HOME=/y HOME=/h vm_cache_dir)"
check "cache: XDG" "/y/ncdevmem-rs/vm" "$(NCDEVMEM_VM_CACHE='' XDG_CACHE_HOME=/y HOME=/h vm_cache_dir)"
check "cache: HOME" "/h/.cache/ncdevmem-rs/vm" \
    "$(unset NCDEVMEM_VM_CACHE XDG_CACHE_HOME; HOME=/h vm_cache_dir)"

# The console filter: what a firmware and a kernel write (reset, clear, wrap off, colours,
# a title, a charset switch, CR LF) comes out as plain lines; TAB stays.
got=$(printf '\033c\033[2J\033[?7lSeaBIOS\r\n\033]0;t\007\033(B\033[0;1mok\033[m\tcase\001\177\n' |
    strip_terminal_controls | od -An -c | tr -s ' ')
want=$(printf 'SeaBIOS\nok\tcase\n' | od -An -c | tr -s ' ')
check "console: controls stripped" "$want" "$got"

# The kernel configuration check: a configuration with every option the table names passes
# silently; each one taken away is named with the line to add and what the configuration has.
good=$tmp/config-good
{
    echo "# Linux/x86 7.3.4 Kernel Configuration"
    echo "CONFIG_X86_64=y"
    _kernel_config_needs | awk '$2 != "n" { print "CONFIG_" $1 "=y" }'
    echo "# CONFIG_MODULE_SIG_FORCE is not set"
    echo "CONFIG_NET_DEVLINK=y"
    echo "CONFIG_NET_SHAPER=y"
} >"$good"
check "config: complete" "0:" "$(out=$(kernel_config_missing "$good" 1) && echo "0:$out" || echo "1:$out")"
sed -e 's/^CONFIG_UDMABUF=y$/# CONFIG_UDMABUF is not set/' -e 's/^CONFIG_VETH=y$/CONFIG_VETH=m/' \
    -e 's/^CONFIG_9P_FS=y$/CONFIG_9P_FS=n/' -e '/^CONFIG_PAGE_POOL=y$/d' \
    -e 's/^# CONFIG_MODULE_SIG_FORCE is not set$/CONFIG_MODULE_SIG_FORCE=y/' \
    -e 's/^CONFIG_VIRTIO_PCI=y$/CONFIG_VIRTIO_PCI=m/' "$good" >"$tmp/config-bad"
check "config: missing named" \
    "# CONFIG_MODULE_SIG_FORCE is not set # the suite's out-of-tree modules are unsigned (now: CONFIG_MODULE_SIG_FORCE=y)
CONFIG_VIRTIO_PCI=y # the virtio-9p device (the guest loads no virtio_pci module) (now: CONFIG_VIRTIO_PCI=m)
CONFIG_9P_FS=m # the kernel's harness runs from the build chroot, shared over virtio-9p (now: CONFIG_9P_FS=n)
CONFIG_UDMABUF=y # /dev/udmabuf, the dma-buf of every devmem case (now: CONFIG_UDMABUF not set)
CONFIG_NETDEVSIM=m # the software NIC's page pools (CONFIG_PAGE_POOL has no prompt; NETDEVSIM selects it, as most NIC drivers do) (now: CONFIG_PAGE_POOL not set)
1" \
    "$(kernel_config_missing "$tmp/config-bad"; echo $?)"
# netdevsim out of tree needs what selecting it turns on; a tree with its own does not.
sed '/^CONFIG_NET_SHAPER=y$/d' "$good" >"$tmp/config-nsim"
check "config: netdevsim out of tree" \
    "CONFIG_NETDEVSIM=m # netdevsim, built out of tree, needs CONFIG_NET_SHAPER (no prompt; NETDEVSIM selects it), or run with --no-netdevsim (now: CONFIG_NET_SHAPER not set)
1" "$(kernel_config_missing "$tmp/config-nsim" 1; echo $?)"
check "config: no netdevsim wanted" "0" "$(kernel_config_missing "$tmp/config-nsim" 0; echo $?)"
echo "CONFIG_NETDEVSIM=m" >>"$tmp/config-nsim"
check "config: the tree's own netdevsim" "0" "$(kernel_config_missing "$tmp/config-nsim" 1; echo $?)"

# The architecture a configuration is for.
check "arch: x86_64" "x86_64" "$(kernel_config_arch "$good")"
printf '# Linux/x86 7.3.4 Kernel Configuration\nCONFIG_X86_32=y\n' >"$tmp/config-i386"
check "arch: 32-bit x86" "x86 (32-bit)" "$(kernel_config_arch "$tmp/config-i386")"
printf '#\n# Linux/arm64 7.3.4 Kernel Configuration\n#\nCONFIG_ARM64=y\n' >"$tmp/config-arm64"
check "arch: arm64" "arm64" "$(kernel_config_arch "$tmp/config-arm64")"

# The version in a bzImage's setup header: "HdrS" at 0x202, the string's offset - 0x200 at
# 0x20e (here 0x300, so the string is at 0x500).
img=$tmp/bzImage
head -c 4096 /dev/zero >"$img"
printf 'HdrS' | dd of="$img" bs=1 seek=$((0x202)) conv=notrunc 2>/dev/null
printf '\000\003' | dd of="$img" bs=1 seek=$((0x20e)) conv=notrunc 2>/dev/null
printf '7.3.4-dev (me@host) #1 SMP\000junk' | dd of="$img" bs=1 seek=$((0x500)) conv=notrunc 2>/dev/null
check "bzImage: version" "7.3.4-dev (me@host) #1 SMP" "$(bzimage_version "$img")"
check "bzImage: not one" "1" "$(bzimage_version "$good" >/dev/null && echo 0 || echo 1)"

# The tree's compiler: the candidate whose first --version line is CONFIG_CC_VERSION_TEXT,
# through a runner (here env with a PATH of stand-in compilers).
bin=$tmp/cc-bin
mkdir -p "$bin"
printf '#!/bin/sh\necho "gcc (Debian 12.2.0-14) 12.2.0"\n' >"$bin/gcc"
printf '#!/bin/sh\necho "x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0"\n' >"$bin/x86_64-linux-gnu-gcc-14"
printf '#!/bin/sh\necho "Debian clang version 19.1.7 (3)"\n' >"$bin/clang-19"
chmod +x "$bin"/*
runner=(env "PATH=$bin")
echo 'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0"' >"$tmp/cc1"
check "cc: gcc by its name" "CC=x86_64-linux-gnu-gcc-14" "$(kernel_tree_cc "$tmp/cc1" "${runner[@]}")"
echo 'CONFIG_CC_VERSION_TEXT="gcc (Debian 12.2.0-14) 12.2.0"' >"$tmp/cc2"
check "cc: gcc" "CC=gcc" "$(kernel_tree_cc "$tmp/cc2" "${runner[@]}")"
printf 'CONFIG_CC_VERSION_TEXT="Debian clang version 19.1.7 (3)"\nCONFIG_CC_IS_CLANG=y\nCONFIG_CLANG_VERSION=190107\nCONFIG_LD_IS_LLD=y\n' >"$tmp/cc3"
check "cc: versioned clang with lld" "LLVM=-19" "$(kernel_tree_cc "$tmp/cc3" "${runner[@]}")"
sed '/LD_IS_LLD/d' "$tmp/cc3" >"$tmp/cc4"
check "cc: clang with GNU ld" "CC=clang-19" "$(kernel_tree_cc "$tmp/cc4" "${runner[@]}")"
echo 'CONFIG_CC_VERSION_TEXT="gcc (GCC) 15.1.1 20250521"' >"$tmp/cc5"
check "cc: none matches, the answer named" "1:
gcc: gcc (Debian 12.2.0-14) 12.2.0" \
    "$(kernel_tree_cc "$tmp/cc5" "${runner[@]}" 2>"$tmp/cc5.err" && echo 0: || echo 1:
    cat "$tmp/cc5.err")"

# What a Debian root lacks for the kernel's netkit tests.
r=$tmp/nkroot
mkdir -p "$r/usr/bin" "$r/usr/include/bpf" "$r/usr/sbin"
check "netkit tools: all missing" "clang libbpf-dev bpftool mount 1" \
    "$(chroot_netkit_tools_missing "$r" | tr '\n' ' '; chroot_netkit_tools_missing "$r" >/dev/null || echo 1)"
install -m 0755 /dev/null "$r/usr/bin/clang"
: >"$r/usr/include/bpf/bpf_helpers.h"
install -m 0755 /dev/null "$r/usr/bin/mount"
check "netkit tools: bpftool missing" "bpftool" "$(chroot_netkit_tools_missing "$r")"
install -m 0755 /dev/null "$r/usr/sbin/bpftool"
check "netkit tools: none missing" "0:" "$(chroot_netkit_tools_missing "$r" && echo 0:)"
# build-kselftest.sh's reading of clang's include search list (clang -v -E - on trixie).
check "bpf: clang's system includes" "-idirafter /usr/lib/llvm-19/lib/clang/19/include -idirafter /usr/local/include -idirafter /usr/include/x86_64-linux-gnu -idirafter /usr/include" \
    "$(printf '%s\n' 'clang version 19.1.7 (3+b1)' 'ignoring nonexistent directory "/include"' \
        '#include "..." search starts here:' '#include <...> search starts here:' \
        ' /usr/lib/llvm-19/lib/clang/19/include' ' /usr/local/include' \
        ' /usr/include/x86_64-linux-gnu' ' /usr/include' 'End of search list.' '# 1 "<stdin>"' |
        "$here/build-kselftest.sh" --sys-includes | tr '\n' ' ' | sed 's/ $//')"

# The guest's time limit: the base plus the budget of each selected case that runs (rows as
# vm_guest --list prints them); an opt-in case that only prints skip adds nothing; a budget
# that is no number of seconds is an error, not a guess.
T=$'\t'
check "time limit: base alone" "$VM_BASE_BUDGET" "$(vm_time_limit </dev/null)"
check "time limit: the rows' budgets" "$((VM_BASE_BUDGET + 30 + 600 + 30))" \
    "$(printf 'devmem-nic/probe\t30\trun\tthe probe\ndevmem-nic/kernel-devmem-py\t600\trun\tdevmem.py\nkernel-log\t30\trun\tthe log\n' | vm_time_limit)"
check "time limit: skipped opt-in case" \
    "$((VM_BASE_BUDGET + 30))" \
    "$(printf 'devmem-nic/probe\t30\trun\tx\ndevmem-nic/c-iou-zcrx\t900\tskip\ty\n\n' | vm_time_limit)"
check "time limit: a budget that is no number" "1" \
    "$(echo "devmem-nic/probe${T}3x${T}run${T}x" | vm_time_limit 2>/dev/null && echo 0 || echo 1)"

# The failure line of a guest stopped at its time limit names the case that was running (a
# result line ends a case; a recording's "ok" lines are gone from what the runner passes in),
# how far the run got, the limit and where it came from, and how to raise it.
console="vm-guest: kernel 7.3.4, 2 CPUs, 981960 kB
vm-guest: running devmem-nic/probe
ok devmem-nic/probe: exit 0 with every contract held [3.9 s]
vm-guest: running devmem-nic/c-iou-zcrx
skip devmem-nic/c-iou-zcrx: opt-in
vm-guest: running devmem-nic/kernel-devmem-py
# an output line of the case"
check "timeout: the running case" \
    "vm: FAIL: the guest did not finish within 1290 s (300 s + the budgets of 4 cases that run): case devmem-nic/kernel-devmem-py was running (2 of 4 cases done); raise the limit with NCDEVMEM_VM_TIMEOUT=SECS (or --timeout SECS)" \
    "$(vm_timeout_failure 1290 "300 s + the budgets of 4 cases that run" 4 <<<"$console")"
check "timeout: between cases" \
    "vm: FAIL: the guest did not finish within 60 s (NCDEVMEM_VM_TIMEOUT): no case was running (3 of 4 cases done; the next had not started); raise the limit with NCDEVMEM_VM_TIMEOUT=SECS (or --timeout SECS)" \
    "$(printf '%s\nFAIL devmem-nic/kernel-devmem-py: x [50.0 s]\n' "$console" |
        vm_timeout_failure 60 NCDEVMEM_VM_TIMEOUT 4)"
check "timeout: in the boot" \
    "vm: FAIL: the guest did not finish within 10 s (--timeout): no case had started (boot, module loading or the guest program start); raise the limit with NCDEVMEM_VM_TIMEOUT=SECS (or --timeout SECS)" \
    "$(printf '[    1.0] Linux version 7.3.4\n' | vm_timeout_failure 10 --timeout 4)"
check "timeout: a case named like the start of another" \
    "case devmem-nic/rx-large-niov was running (1 of 2 cases done)" \
    "$(printf 'vm-guest: running devmem-nic/rx\nok devmem-nic/rx: y\nvm-guest: running devmem-nic/rx-large-niov\n' |
        vm_timeout_failure 9 x 2 | sed 's/.*: \(case .*done)\).*/\1/')"

# The runner's command line, without booting: a time limit that is not a number of seconds
# is refused before anything runs; everything after --shell is the guest's command (not the
# runner's options: here NCDEVMEM_VM_SKIP ends the run before root is needed); make vm-shell
# hands CMD over as one word, however many commands it holds.
out=$("$here/run.sh" --timeout 12x 2>&1) && rc=0 || rc=$?
check "run.sh: bad --timeout" "2: vm: the time limit must be a number of seconds, not '12x' (--timeout)" "$rc: $out"
out=$(NCDEVMEM_VM_TIMEOUT=0 "$here/run.sh" 2>&1) && rc=0 || rc=$?
check "run.sh: bad NCDEVMEM_VM_TIMEOUT" "2: vm: the time limit must be a number of seconds, not '0' (NCDEVMEM_VM_TIMEOUT)" "$rc: $out"
out=$(NCDEVMEM_VM_SKIP=1 "$here/run.sh" --shell --timeout 12x 'ip link; true' 2>&1) && rc=0 || rc=$?
check "run.sh: --shell takes the rest" "0: skip: vm-test: NCDEVMEM_VM_SKIP=1" "$rc: $out"
repo=$(cd "$here/../.." && pwd)
if command -v make >/dev/null 2>&1; then
    check "make vm-shell: CMD as one word" \
        "tests/vm/run.sh  --shell 'ip link; ncdevmem-rs -f dnic0a'" \
        "$(make -s -n --no-print-directory -C "$repo" vm-shell CMD='ip link; ncdevmem-rs -f dnic0a' | tail -1)"
    check "make vm-shell: interactive" "tests/vm/run.sh  --shell" \
        "$(make -s -n --no-print-directory -C "$repo" vm-shell | tail -1 | sed 's/ *$//')"
fi
# The guest's /init (busybox sh) parses.
if command -v busybox >/dev/null 2>&1; then
    check "init: parses" "0" "$(busybox sh -n "$here/init" && echo 0 || echo 1)"
fi

# cargo's target directory, as cargo resolves it.
if command -v "${CARGO:-cargo}" >/dev/null 2>&1; then
    check "target dir: CARGO_TARGET_DIR" "$tmp/tgt" "$(CARGO_TARGET_DIR=$tmp/tgt "$repo/scripts/target-dir.sh")"
    check "target dir: default" "$repo/target" "$(env -u CARGO_TARGET_DIR "$repo/scripts/target-dir.sh")"
else
    echo "skip: target dir: no cargo" >&2
fi

# The test-tools installer names what is missing and fails when it cannot install (here: not
# root, and an interpreter without pytest).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env PYTHON=/bin/false \
        "$repo/scripts/install-test-tools.sh" 2>&1) && rc=0 || rc=$?
    check "test tools: fails" "1" "$rc"
    check "test tools: names pytest" "yes" \
        "$(grep -q 'FAIL: missing the /bin/false module pytest' <<<"$out" && echo yes || echo "no: $out")"
    # The VM suite fails (never passes unrun) without root.
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env -u NCDEVMEM_VM_SKIP \
        "$repo/tests/vm/run.sh" 2>&1) && rc=0 || rc=$?
    check "vm suite without root: fails" "1" "$rc"
    check "vm suite without root: says why" "yes" \
        "$(grep -q 'FAIL: needs root' <<<"$out" && echo yes || echo "no: $out")"
else
    out=$(PYTHON=/bin/false "$repo/scripts/install-test-tools.sh" 2>&1) && rc=0 || rc=$?
    check "test tools: fails" "1" "$rc"
fi

# Which suites run byo-kernel: named by NCDEVMEM_VM_ONLY (also as opt-in, make
# vm-test-opt-in's entry), or every opt-in case asked for; never inside a KERNEL_TREE run.
(
    # shellcheck source=tests/vm/kernel-tree.sh
    . "$here/kernel-tree.sh"
    wanted() { tree=$1 kernel_tests=$2 NCDEVMEM_VM_ONLY=$3 byo_kernel_wanted && echo yes || echo no; }
    check "byo-kernel: opt-in entry" "yes" "$(wanted '' 0 opt-in)"
    check "byo-kernel: named exactly" "yes" "$(wanted '' 0 zcrx,=byo-kernel)"
    check "byo-kernel: other cases only" "no" "$(wanted '' 0 multi-flow)"
    check "byo-kernel: NCDEVMEM_VM_KERNEL_TESTS=1" "yes" "$(wanted '' 1 '')"
    check "byo-kernel: default suite" "no" "$(wanted '' 0 '')"
    check "byo-kernel: not in a tree's run" "no" "$(wanted /src/linux 0 opt-in)"
    echo "$passed $failed" >"$tmp/byo-counts"
)
read -r passed failed <"$tmp/byo-counts"

echo "lib-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
