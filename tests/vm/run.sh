#!/usr/bin/env bash
# The VM suite: boots the newest Debian trixie-backports kernel under QEMU/TCG and runs the
# guest cases (examples/vm_guest.rs) against it: udmabuf, dma-buf sync, bind-rx and bind-tx
# refusals, netdevsim rings/channels, the server's NIC setup and its unwind (also on SIGTERM),
# the TX sender filling a real udmabuf, namespace transfers. See tests/vm/README.md.
#
# On a fresh Debian machine, as root:
#   1. installs qemu (bookworm-backports), busybox-static, cpio, kmod, mmdebstrap
#      (tests/vm/install-host-tools.sh; nothing when present);
#   2. resolves and fetches the newest trixie-backports kernel through a PRIVATE apt
#      configuration (own sources, lists, cache and dpkg status under the cache dir; the host's
#      apt setup is never touched): apt-get download + dpkg -x;
#   3. builds devmem_nic (tests/vm/devmem-nic, the software devmem NIC) and, optionally
#      (default on), netdevsim from the same version's linux-source, out of tree against
#      linux-headers-<abi> in a trixie chroot (mmdebstrap) that stays in the cache;
#   4. builds (or finds already built, by `make build` and `make unit`) ncdevmem-rs (release),
#      the guest program and the project's real-kernel test binaries (tests/kernel_*.rs,
#      tests/e2e.rs, tests/rx_fixture.rs; test profile) in cargo's own target directory;
#   5. packs an initramfs (busybox-static, the binaries with their shared libraries, iproute2
#      with its libraries, the modules + depmod) and boots it with a hard timeout;
#   6. parses the console, shown with terminal control sequences (and recordings of kernel
#      answers) removed: one "ok|FAIL|skip|miss <case>" line per case (each test binary is one
#      case; "miss": a driver fault the -v pattern cannot see, named by the case) and the exit
#      marker; saves the recordings under <cargo target dir>/vm/fixtures.
#
# Downloads and builds that do not depend on the checkout are cached per user in
# $NCDEVMEM_VM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/ncdevmem-rs/vm), shared by every
# clone: a second run fetches nothing. Per-clone outputs (initramfs, console log) go to
# <cargo target dir>/vm. Failure to reach the archive is retried, then FAILS the run.
#
# The Debian mirror is the one this machine's apt configuration uses for its own release's main
# archive (/etc/apt/sources.list and sources.list.d, one-line or deb822 form); nothing is
# fetched when everything is cached.
#
# Bring your own kernel: with --kernel-tree DIR (or NCDEVMEM_VM_KERNEL_TREE=DIR; `make vm-test
# KERNEL_TREE=DIR`) the guest boots DIR's built image (arch/x86/boot/bzImage) with DIR's own
# modules instead of Debian's kernel; devmem_nic and netdevsim (when DIR has no netdevsim of its
# own) are built against DIR with the compiler that built it (on this machine, or in the trixie
# chroot when only that one has it), and the kernel's selftests (devmem.py, iou-zcrx.py, nk_*.py,
# ncdevmem.c, iou-zcrx.c, the drv-net library) come from DIR's sources. DIR is a built x86_64
# tree, in place or an O= build directory (its "source" link names the sources); before anything
# is built its .config is checked for every option the suite needs, and each missing one is
# named with the line to add. The trixie chroot (python3, socat, ethtool, gcc-14) still runs
# the kernel's harness in the guest. Per-clone outputs then go to <cargo target dir>/vm-kernel-tree.
# The byo-kernel case (in a suite on Debian's kernel) runs devmem-nic/probe, devmem-nic/rx and
# devmem-nic/kernel-devmem-py through this path, with Debian's kernel laid out as a built tree
# (tests/vm/kernel-tree.sh).
#
# usage: tests/vm/run.sh [--no-netdevsim] [--refresh] [--cache DIR] [--timeout SECS]
#                        [--kernel-tree DIR] [--shell [CMD...]]
#   --no-netdevsim  skip the netdevsim build (netdevsim cases print skip)
#   --refresh       look up the newest kernel again even when one is cached
#   --timeout       the guest's time limit in seconds (default: a base plus a budget per case
#                   that runs, from the guest's case table; with --shell CMD 600, an
#                   interactive shell none)
#   --kernel-tree   boot that kernel tree's build (above)
#   --shell         boot the same guest, with the software devmem NIC loaded and pair 0 made
#                   as the cases make theirs (dnic0a here, 192.0.2.1 and 2001:db8::1; dnic0b
#                   in netns dnic0peer, 192.0.2.2 and 2001:db8::2) and the build chroot at
#                   /debian, but no case: an interactive shell on the console (exit or
#                   Ctrl-D powers the guest off; Ctrl-A X quits QEMU), or, with CMD (the
#                   rest of the arguments, joined by blanks and run by sh -c, as ssh does),
#                   that command, exiting with its status. Outputs go to
#                   <cargo target dir>/vm-shell. The cache stays locked while it runs.
# env: NCDEVMEM_VM_CACHE, NCDEVMEM_VM_NETDEVSIM=0|1, NCDEVMEM_VM_TIMEOUT (s, as --timeout),
#      NCDEVMEM_VM_KERNEL_TREE=DIR (as --kernel-tree),
#      NCDEVMEM_VM_MIRROR (Debian mirror for the trixie suites; default: from the host's apt
#      configuration), NCDEVMEM_VM_SKIP=1 (print a skip line and exit 0; without it a run
#      that is not root fails), NCDEVMEM_VM_FAULT_MATRIX=N (also measure the fault-detection
#      matrix, N runs per fault; docs/fault-detection.md), NCDEVMEM_VM_ONLY=A,B (only the
#      cases whose names contain A or B, =A: exactly A, opt-in: every opt-in case and
#      byo-kernel, as make vm-test-opt-in runs them; and the final kernel-log check),
#      NCDEVMEM_VM_KERNEL_TESTS=1 (also the slow opt-in cases, which print skip otherwise
#      unless NCDEVMEM_VM_ONLY names them: devmem-nic/c-iou-zcrx and byo-kernel),
#      NCDEVMEM_VM_BIN=PATH (that ncdevmem-rs binary is the tool under test instead of the
#      release build, e.g. the static one of make dist: make vm-test-dist),
#      CARGO, CARGO_TARGET_DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/vm/kernel-tree.sh
. "$here/kernel-tree.sh"
cache=$(vm_cache_dir)
netdevsim=${NCDEVMEM_VM_NETDEVSIM:-1}
refresh=0
kernel_tests=${NCDEVMEM_VM_KERNEL_TESTS:-0}
# The guest's time limit: NCDEVMEM_VM_TIMEOUT or --timeout, else computed from the cases that
# run (below, once the guest program is built).
timeout_s=${NCDEVMEM_VM_TIMEOUT:-}
timeout_how=NCDEVMEM_VM_TIMEOUT
shell=0
shell_cmd=()
cargo=${CARGO:-cargo}
mirror=${NCDEVMEM_VM_MIRROR:-}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
kernel_tree=${NCDEVMEM_VM_KERNEL_TREE:-}

while (($#)); do
    case $1 in
    --no-netdevsim) netdevsim=0 ;;
    --refresh) refresh=1 ;;
    --cache) cache=$2; shift ;;
    --timeout) timeout_s=$2; timeout_how=--timeout; shift ;;
    --kernel-tree) kernel_tree=$2; shift ;;
    --shell) shell=1; shift; shell_cmd=("$@"); break ;;
    *) echo "vm: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "$timeout_s" ] && ! [[ "$timeout_s" =~ ^[1-9][0-9]*$ ]]; then
    echo "vm: the time limit must be a number of seconds, not '$timeout_s' ($timeout_how)" >&2
    exit 2
fi
# A shell runs no case: nothing to select, no opt-in case, no byo-kernel run.
if ((shell)); then
    unset NCDEVMEM_VM_ONLY
    kernel_tests=0
fi

t0=$(date +%s)
log() { echo "vm: [$(($(date +%s) - t0)) s] $*" >&2; }
die() { echo "vm: FAIL: $*" >&2; echo "vm-test: 0 passed, 1 failed"; exit 1; }

if [ "${NCDEVMEM_VM_SKIP:-0}" = 1 ]; then
    echo "skip: vm-test: NCDEVMEM_VM_SKIP=1"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    # A suite that cannot run fails the run (naming why) instead of passing unrun.
    echo "vm: FAIL: needs root (installs qemu, builds a chroot, loads modules in the guest);" \
        "run as root, or set NCDEVMEM_VM_SKIP=1 to leave the VM suite out" >&2
    echo "vm-test: 0 passed, 1 failed"
    exit 1
fi

# The Debian mirror, resolved when first needed (a fully cached run needs none).
need_mirror() {
    [ -n "$mirror" ] && return 0
    local codename=''
    [ -r /etc/os-release ] && codename=$(. /etc/os-release && [ "${ID:-}" = debian ] &&
        echo "${VERSION_CODENAME:-}")
    mirror=$(debian_mirror "$codename") ||
        die "no Debian mirror: this machine's apt configuration has no http(s) entry for" \
            "${codename:-its Debian release}'s main archive (suite ${codename:-?}, component" \
            "main); set NCDEVMEM_VM_MIRROR to a Debian mirror URI"
    log "Debian mirror $mirror (from this machine's apt configuration)"
}

retry() { # retry WHAT CMD... : three attempts, then fail loudly (never a silent pass)
    local what=$1 n
    shift
    for n in 1 2 3; do
        "$@" && return 0
        log "$what failed (attempt $n of 3)"
        ((n < 3)) && sleep $((n * 10))
    done
    die "$what failed 3 times (is the Debian archive reachable?)"
}

cleanups=()
cleanup() {
    local i
    for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
}
trap cleanup EXIT

target_dir=$(CARGO=$cargo "$repo/scripts/target-dir.sh") || die "cannot find cargo's target directory"
out=$target_dir/vm
[ -n "$kernel_tree" ] && out=$target_dir/vm-kernel-tree
((shell)) && out=$target_dir/vm-shell
mkdir -p "$cache" "$out"
# One run at a time per cache (a second one waits). The byo-kernel case's run inherits the lock
# of the run that started it (same open file: flock succeeds at once).
if [ "${_NCDEVMEM_VM_LOCK_HELD:-}" != 1 ] || ! { : >&9; } 2>/dev/null; then
    exec 9>"$cache/.lock"
fi
flock 9

# ---------------------------------------------------------------------------------------------
# 1. host tools
# ---------------------------------------------------------------------------------------------
nsim_flag=()
((netdevsim)) && nsim_flag=(--netdevsim)
"$here/install-host-tools.sh" --cache "$cache" "${nsim_flag[@]}" || die "host tools"

# ---------------------------------------------------------------------------------------------
# 2. the kernel, through a private apt configuration for trixie + trixie-backports
# ---------------------------------------------------------------------------------------------
tapt=$cache/apt-trixie
setup_private_apt() {
    need_mirror
    mkdir -p "$tapt"/{lists/partial,cache/archives/partial,state,etc/sources.list.d,etc/preferences.d,etc/apt.conf.d}
    : >"$tapt/state/status"
    cat >"$tapt/etc/sources.list" <<EOF
deb [signed-by=$keyring] $mirror trixie main
deb [signed-by=$keyring] $mirror trixie-backports main
EOF
    cat >"$tapt/apt.conf" <<EOF
Dir::State "$tapt/state";
Dir::State::Lists "$tapt/lists";
Dir::State::status "$tapt/state/status";
Dir::Cache "$tapt/cache";
Dir::Etc::SourceList "$tapt/etc/sources.list";
Dir::Etc::SourceParts "$tapt/etc/sources.list.d";
Dir::Etc::Preferences "$tapt/etc/preferences";
Dir::Etc::PreferencesParts "$tapt/etc/preferences.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled "false";
Acquire::IndexTargets::deb::CNF::DefaultEnabled "false";
EOF
}
tapt_get() { APT_CONFIG=$tapt/apt.conf apt-get -q "$@"; }
tapt_cache() { APT_CONFIG=$tapt/apt.conf apt-cache "$@"; }
apt_updated=0
tapt_update() {
    ((apt_updated)) && return 0
    setup_private_apt
    retry "apt-get update (trixie, trixie-backports; private config)" \
        tapt_get update -qq -o APT::Update::Error-Mode=any
    apt_updated=1
}
# download_into DIR PKG=VERSION...: apt-get download with retries.
download_into() {
    local dir=$1
    shift
    mkdir -p "$dir"
    (cd "$dir" && retry "apt-get download $*" tapt_get download -qq "$@")
}

kenv=$cache/kernel.env
ABI='' KVERSION='' KDIR=''
if ((refresh == 0)) && [ -s "$kenv" ]; then
    . "$kenv"
fi
# (A KERNEL_TREE run needs only the name: the chroot and its headers are per Debian kernel.)
if [ -z "$ABI" ] || { [ -z "$kernel_tree" ] && [ ! -d "$KDIR" ]; }; then
    tapt_update
    meta=$(tapt_cache show linux-image-amd64/trixie-backports) ||
        die "no linux-image-amd64 in trixie-backports"
    KVERSION=$(sed -n 's/^Version: //p' <<<"$meta" | head -1)
    ABI=$(sed -n 's/^Depends: //p' <<<"$meta" | head -1 | tr ',' '\n' |
        sed -n 's/^ *linux-image-\([0-9][^ ]*\).*/\1/p' | head -1)
    [ -n "$ABI" ] && [ -n "$KVERSION" ] || die "cannot read the kernel ABI from: $meta"
    KDIR=$cache/kernel-$ABI
    if [ ! -d "$KDIR" ] && [ -z "$kernel_tree" ]; then
        # linux-image-<abi> and the parts it is split into on 7.x (base, binary, modules).
        img=$(tapt_cache show "linux-image-$ABI=$KVERSION") || die "no linux-image-$ABI=$KVERSION"
        pkgs=("linux-image-$ABI=$KVERSION")
        for p in $(sed -n 's/^Depends: //p' <<<"$img" | head -1 | tr ',|' '\n\n' |
            sed -n "s/^ *\(linux-[a-z]*-$ABI\)\b.*/\1/p" | sort -u); do
            pkgs+=("$p=$KVERSION")
        done
        log "downloading ${pkgs[*]}"
        download_into "$cache/debs" "${pkgs[@]}"
        rm -rf "$KDIR.tmp"
        mkdir -p "$KDIR.tmp"
        for p in "${pkgs[@]}"; do
            dpkg -x "$cache/debs/${p%%=*}_"*.deb "$KDIR.tmp"
        done
        mv "$KDIR.tmp" "$KDIR"
        rm -rf "$cache/debs"
    fi
    printf 'ABI=%q\nKVERSION=%q\nKDIR=%q\n' "$ABI" "$KVERSION" "$KDIR" >"$kenv"
fi
# Debian's kernel: image, config and modules (also what the byo-kernel case lays out as a tree).
mods=$KDIR/usr/lib/modules/$ABI
[ -d "$mods" ] || mods=$KDIR/lib/modules/$ABI
vmlinuz=$mods/vmlinuz
[ -f "$vmlinuz" ] || vmlinuz=$KDIR/boot/vmlinuz-$ABI
kconfig=$mods/config
[ -f "$kconfig" ] || kconfig=$KDIR/boot/config-$ABI
# KREL: the release the guest boots; kernel_label names that kernel in failures.
if [ -n "$kernel_tree" ]; then
    tree_open "$kernel_tree"
    kernel_label="KERNEL_TREE=$tree (kernel $KREL)"
else
    [ -f "$vmlinuz" ] && [ -f "$kconfig" ] || die "no vmlinuz/config in $KDIR"
    KREL=$ABI
    kernel_label="kernel $ABI (Debian $KVERSION)"
    log "kernel $ABI (Debian $KVERSION, trixie-backports)"
fi
flags=()
for f in UDMABUF NET_DEVMEM IO_URING_ZCRX HUGETLBFS VETH PSAMPLE NETDEVSIM; do
    v=$(sed -n "s/^CONFIG_$f=\(.*\)/\1/p" "$kconfig")
    flags+=("CONFIG_$f=${v:-n}")
done
log "kernel config: ${flags[*]}"
# Every option the suite needs, before anything is built or booted.
if ! missing=$(kernel_config_missing "$kconfig" "$netdevsim"); then
    sed 's/^/vm:   /' <<<"$missing" >&2
    die "$kconfig lacks what the VM suite needs: add the lines above (then make olddefconfig" \
        "and rebuild) ($kernel_label)"
fi

# ---------------------------------------------------------------------------------------------
# 3. out-of-tree modules, built in a trixie chroot (gcc-14, make, linux-headers-<abi>, plus
#    iproute2, ethtool, python3, socat for the kernel's devmem.py in the guest, iperf3 and ping
#    for its drv-net tests) that stays in
#    the cache: devmem_nic, the software devmem NIC (tests/vm/devmem-nic; always, cached per
#    kernel and source hash), and netdevsim from the same version's linux-source (optional, cached per kernel)
# ---------------------------------------------------------------------------------------------
chroot_dir=$cache/chroot-$ABI
# liburing for the kernel's C iou-zcrx (tests/vm/build-kselftest.sh): trixie's liburing 2.9 has
# no zcrx (io_uring_register_ifq came with 2.10), so liburing-dev comes from forky (2.15 when
# measured; it needs nothing newer than trixie's libc).
chroot_liburing=liburing-dev/forky
chroot_has_liburing_zcrx() {
    grep -qs 'io_uring_register_ifq' "$chroot_dir/usr/include/liburing.h"
}
ensure_chroot() {
    [ -x "$chroot_dir/usr/bin/gcc-14" ] && [ -d "$chroot_dir/usr/src/linux-headers-$ABI" ] &&
        [ -x "$chroot_dir/usr/sbin/ethtool" ] && [ -x "$chroot_dir/usr/bin/socat" ] &&
        [ -x "$chroot_dir/usr/bin/rsync" ] && [ -e "$chroot_dir/usr/include/stdio.h" ] &&
        [ -x "$chroot_dir/usr/bin/pgrep" ] && [ -x "$chroot_dir/usr/bin/iperf3" ] &&
        [ -x "$chroot_dir/usr/bin/ping" ] &&
        [ -e "$chroot_dir/usr/lib/python3/dist-packages/jsonschema/__init__.py" ] &&
        [ -e "$chroot_dir/usr/lib/python3/dist-packages/yaml/__init__.py" ] &&
        chroot_has_liburing_zcrx && {
        chroot_add_netkit_tools
        return 0
    }
    need_mirror
    log "building a trixie chroot (gcc-14, make, linux-headers-$ABI, iproute2, ethtool, python3," \
        "python3-jsonschema, socat, rsync, procps, iperf3, iputils-ping, ${chroot_netkit_pkgs[*]};" \
        "liburing-dev from forky)"
    make_chroot() {
        rm -rf "$chroot_dir.tmp"
        mmdebstrap "$@"
    }
    # Every package comes from trixie (APT::Default-Release) except the ones named /forky.
    # Debian's testing suite's Release file is valid for a week only: a mirror that lags (the
    # one measured was a month behind) would be refused; its signature is still checked.
    retry "mmdebstrap trixie" make_chroot --variant=apt --quiet \
        --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' \
        --aptopt='APT::Default-Release "trixie"' \
        --include="gcc-14,libc6-dev,make,linux-headers-$ABI,iproute2,ethtool,python3,python3-yaml,python3-jsonschema,socat,rsync,procps,iperf3,iputils-ping" \
        --include="$chroot_liburing" --include="$(IFS=,; echo "${chroot_netkit_pkgs[*]}")" \
        trixie "$chroot_dir.tmp" \
        "deb [signed-by=$keyring] $mirror trixie main" \
        "deb [signed-by=$keyring] $mirror trixie-backports main" \
        "deb [signed-by=$keyring check-valid-until=no] $mirror forky main"
    rm -rf "$chroot_dir"
    mv "$chroot_dir.tmp" "$chroot_dir"
}
# The kernel's netkit tests need the selftests' BPF objects (tests/vm/build-kselftest.sh builds
# them with clang and libbpf's headers), bpftool to fill their maps, and mount(8) (the library's
# user namespaces are bind-mounted under /run/userns). A chroot made before they were needed
# gets them added through its own apt sources (measured on trixie: 21 packages, 64.9 MB, plus
# 20.4 MB of package indices that are removed again; 320 MB more on disk).
chroot_netkit_pkgs=(clang libbpf-dev bpftool mount)
chroot_add_netkit_tools() {
    local missing log=$out/chroot-netkit-tools.log
    missing=$(chroot_netkit_tools_missing "$chroot_dir") && return 0
    log "adding ${chroot_netkit_pkgs[*]} to the chroot (it lacks: ${missing//$'\n'/, }); apt's" \
        "output in $log"
    mount -t proc proc "$chroot_dir/proc"
    cleanups+=("umount '$chroot_dir/proc' 2>/dev/null")
    in_chroot_apt() { chroot "$chroot_dir" env DEBIAN_FRONTEND=noninteractive apt-get -q "$@" >>"$log" 2>&1; }
    retry "apt-get update in the chroot ($log)" in_chroot_apt update
    retry "apt-get install ${chroot_netkit_pkgs[*]} in the chroot ($log)" \
        in_chroot_apt install -y --no-install-recommends "${chroot_netkit_pkgs[@]}"
    grep -E '^(Need to get|After this operation)' "$log" | sed 's/^/vm:   /' >&2 || true
    in_chroot_apt clean
    rm -rf "$chroot_dir"/var/lib/apt/lists/*
    umount "$chroot_dir/proc"
    missing=$(chroot_netkit_tools_missing "$chroot_dir") ||
        die "the chroot still lacks ${missing//$'\n'/, } after installing ${chroot_netkit_pkgs[*]}"
}
# Where the out-of-tree modules are built: against Debian's headers in the chroot, or against
# the KERNEL_TREE with the compiler that built it, on this machine or in the chroot
# (kbuild_setup). kbuild_dir is the kernel build directory as the build sees it; modules are
# built in $build_root/NAME.
kbuild_dir=/usr/src/linux-headers-$ABI kbuild_where=chroot kbuild_cc=() build_root=$chroot_dir/build
kbuild_against=linux-headers-$ABI kbuild_ready=0
kbuild_setup() {
    ((kbuild_ready)) && return 0
    kbuild_ready=1
    if [ -z "$tree" ]; then
        ensure_chroot
        return 0
    fi
    tree_pick_compiler
    kbuild_dir=$tree kbuild_where=$tree_where kbuild_cc=("$tree_cc") kbuild_against="the tree"
    if [ "$tree_where" = chroot ]; then
        tree_bind_in_chroot
    else
        build_root=$out/build
    fi
}
# kbuild_module NAME LOG MAKEARGS...: make -C <kernel build dir> M=<build root>/NAME MAKEARGS
# modules (in the chroot with /proc mounted: objtool needs it), then strips NAME.ko's debug
# info; on failure prints the compiler's messages and fails the run naming the kernel.
kbuild_module() {
    local name=$1 buildlog=$2 rc=0 run=()
    shift 2
    if [ "$kbuild_where" = chroot ]; then
        run=(chroot "$chroot_dir")
        mount -t proc proc "$chroot_dir/proc"
        cleanups+=("umount '$chroot_dir/proc' 2>/dev/null")
    fi
    local m=$build_root/$name
    [ "$kbuild_where" = chroot ] && m=/build/$name
    "${run[@]}" make -s -C "$kbuild_dir" M="$m" "${kbuild_cc[@]}" "$@" modules >"$buildlog" 2>&1 ||
        rc=$?
    [ "$rc" = 0 ] && "${run[@]}" strip --strip-debug "$m/$name.ko"
    [ "$kbuild_where" = chroot ] && umount "$chroot_dir/proc"
    if [ "$rc" != 0 ]; then
        sed 's/^/vm:   /' "$buildlog" | tail -40 >&2
        die "building $name.ko against $kbuild_against failed ($kernel_label); the compiler's" \
            "messages are above"
    fi
}

# The guest's iproute2 and ethtool (busybox's ip has no netns), with their shared libraries.
tools_dir=$cache/guest-tools-$ABI
if [ ! -x "$tools_dir/usr/sbin/ethtool" ]; then
    ensure_chroot
    rm -rf "$tools_dir.tmp"
    for b in /usr/bin/ip /usr/sbin/ethtool; do
        for f in "$b" $(chroot "$chroot_dir" ldd "$b" | grep -o '/[^ ]*'); do
            mkdir -p "$tools_dir.tmp$(dirname "$f")"
            cp -L "$chroot_dir$f" "$tools_dir.tmp$f"
        done
    done
    rm -rf "$tools_dir"
    mv "$tools_dir.tmp" "$tools_dir"
fi

# devmem_nic: rebuilt whenever its source changes (the hash names the cache directory). Against
# a KERNEL_TREE: rebuilt whenever the tree's build changes too (one tree's builds are cached).
dnic_src=$here/devmem-nic
dnic_hash=$(cat "$dnic_src"/*.c "$dnic_src"/Kbuild | sha256sum | cut -c1-12)
dnic_dir=$cache/devmem-nic-$ABI-$dnic_hash
old_builds=("$cache"/devmem-nic-"$ABI"-*)
if [ -n "$tree" ]; then
    tree_mods=$cache/tree-modules-$(tree_key)
    dnic_dir=$tree_mods/devmem-nic
    old_builds=()
    for d in "$cache"/tree-modules-*; do
        [ -e "$d" ] && [ "$d" != "$tree_mods" ] && old_builds+=("$d")
    done
fi
if [ ! -s "$dnic_dir/devmem_nic.ko" ]; then
    kbuild_setup
    log "building devmem_nic.ko (tests/vm/devmem-nic, source $dnic_hash) against $kbuild_against"
    # Older builds (other sources, another tree) go; one per kernel stays.
    rm -rf "$build_root/devmem_nic" "${old_builds[@]}"
    mkdir -p "$build_root/devmem_nic" "$dnic_dir.tmp"
    cleanups+=("rm -rf '$dnic_dir.tmp'")
    cp "$dnic_src"/*.c "$dnic_src"/Kbuild "$build_root/devmem_nic/"
    kbuild_module devmem_nic "$dnic_dir.tmp/build.log" W=1
    if grep -q 'warning:' "$dnic_dir.tmp/build.log"; then
        sed 's/^/vm:   /' "$dnic_dir.tmp/build.log" >&2
        log "devmem_nic.ko built with the compiler warnings above"
    fi
    cp "$build_root/devmem_nic/devmem_nic.ko" "$dnic_dir.tmp/"
    rm -rf "$build_root/devmem_nic"
    mv "$dnic_dir.tmp" "$dnic_dir"
    log "devmem_nic.ko cached in $dnic_dir"
fi

# The VM kernel's source package, fetched at most once per run (netdevsim and the kernel's
# selftests come from it); src_extract DEST PATTERN... unpacks the matching paths into DEST
# (paths relative to the source tree's root).
major_minor=$(sed 's/^\([0-9]*\.[0-9]*\).*/\1/' <<<"$ABI")
src_deb_dir=$cache/src-$ABI.tmp
src_extract() {
    local dest=$1
    shift
    if [ -n "$tree" ]; then
        tree_src_extract "$dest" "$@"
        return
    fi
    if ! ls "$src_deb_dir"/linux-source-*.deb >/dev/null 2>&1; then
        rm -rf "$src_deb_dir"
        cleanups+=("rm -rf '$src_deb_dir'")
        tapt_update
        log "fetching linux-source-$major_minor=$KVERSION"
        download_into "$src_deb_dir" "linux-source-$major_minor=$KVERSION"
    fi
    mkdir -p "$dest"
    dpkg-deb --fsys-tarfile "$src_deb_dir"/linux-source-*.deb |
        tar -xO "./usr/src/linux-source-$major_minor.tar.xz" |
        tar -xJ -C "$dest" --strip-components=1 --wildcards \
            "${@/#/linux-source-$major_minor/}"
}

# netdevsim, built out of tree unless the kernel has its own (a KERNEL_TREE with
# CONFIG_NETDEVSIM=y or =m: nsim_build=0, the guest loads the tree's).
nsim_dir=$cache/netdevsim-$ABI
nsim_build=$netdevsim
if [ -n "$tree" ]; then
    nsim_dir=$tree_mods/netdevsim
    [ -n "$(_kconfig_value "$kconfig" NETDEVSIM)" ] && nsim_build=0
fi
if ((nsim_build)) && [ ! -s "$nsim_dir/netdevsim.ko" ]; then
    kbuild_setup
    rm -rf "$nsim_dir.tmp" "$build_root/netdevsim"
    mkdir -p "$nsim_dir.tmp" "$build_root"
    cleanups+=("rm -rf '$nsim_dir.tmp'")
    src_extract "$build_root/src-nsim" 'drivers/net/netdevsim/*'
    mv "$build_root/src-nsim/drivers/net/netdevsim" "$build_root/netdevsim"
    rm -rf "$build_root/src-nsim"
    log "building netdevsim.ko against $kbuild_against"
    kbuild_module netdevsim "$nsim_dir.tmp/build.log" CONFIG_NETDEVSIM=m
    cp "$build_root/netdevsim/netdevsim.ko" "$nsim_dir.tmp/"
    rm -rf "$build_root/netdevsim" "$nsim_dir"
    mv "$nsim_dir.tmp" "$nsim_dir"
    log "netdevsim.ko cached in $nsim_dir"
fi

# The kernel's own devmem harness (tools/testing/selftests/drivers/net/hw/devmem.py, the
# drv-net and YNL Python libraries, the netlink specs) and the kernel's C ncdevmem and iou-zcrx
# built from the same source, inside the chroot at /opt/kselftest: the guest mounts the chroot
# (virtio-9p, read-only) and runs them there. The harness's "ncdevmem" is a link to
# /run/ncdevmem-under-test, which the guest fills with the binary it tests. A KERNEL_TREE's own
# (from its sources, rebuilt when they change) go to /opt/kselftest-tree, which the guest mounts
# over /opt/kselftest.
kst_paths=('tools/testing/selftests/net/lib/*' 'tools/testing/selftests/drivers/net/*'
    'tools/net/ynl/*' 'Documentation/netlink/*' 'tools/include/*' 'tools/scripts/*'
    'tools/build/*' 'scripts/*' 'Makefile' 'include/uapi/*' 'arch/x86/*' 'arch/Kconfig')
kst=$chroot_dir/opt/kselftest
kst_key=$(sha256sum "$here/build-kselftest.sh" | cut -c1-12)
kst_from=linux-source-$major_minor
if [ -n "$tree" ]; then
    kst=$chroot_dir/opt/kselftest-tree
    kst_key+=-$(tree_src_key "${kst_paths[@]}")
    kst_from=$tree_src
fi
kst_stamp=$kst/.built-$kst_key
if [ ! -e "$kst_stamp" ]; then
    ensure_chroot
    log "building the kernel's devmem harness, C ncdevmem and C iou-zcrx from $kst_from"
    rm -rf "$kst" "$chroot_dir/build/kst" "$chroot_dir/build/kst-out"
    src_extract "$chroot_dir/build/kst" "${kst_paths[@]}"
    cp "$here/build-kselftest.sh" "$chroot_dir/build/"
    mount -t proc proc "$chroot_dir/proc"
    cleanups+=("umount '$chroot_dir/proc' 2>/dev/null")
    if ! chroot "$chroot_dir" /build/build-kselftest.sh /build/kst /build/kst-out \
        >"$out/kselftest-build.log" 2>&1; then
        umount "$chroot_dir/proc"
        sed 's/^/vm:   /' "$out/kselftest-build.log" | tail -40 >&2
        die "building the kernel's C ncdevmem and iou-zcrx ($kernel_label) failed; the" \
            "messages are above"
    fi
    umount "$chroot_dir/proc"
    mkdir -p "$kst/tools/testing/selftests" "$kst/tools/net/ynl" "$kst/Documentation"
    b=$chroot_dir/build/kst
    cp -a "$b/tools/testing/selftests/net" "$b/tools/testing/selftests/drivers" \
        "$kst/tools/testing/selftests/"
    cp -a "$b/tools/net/ynl/pyynl" "$kst/tools/net/ynl/"
    cp -a "$b/Documentation/netlink" "$kst/Documentation/"
    cp "$chroot_dir/build/kst-out/c-ncdevmem" "$kst/"
    # The C iou-zcrx is for the opt-in devmem-nic/c-iou-zcrx only; its build may have failed.
    if [ -e "$chroot_dir/build/kst-out/c-iou-zcrx" ]; then
        cp "$chroot_dir/build/kst-out/c-iou-zcrx" "$kst/"
    fi
    ln -sf /run/ncdevmem-under-test "$kst/tools/testing/selftests/drivers/net/hw/ncdevmem"
    rm -rf "$b" "$chroot_dir/build/kst-out" "$chroot_dir/build/build-kselftest.sh"
    : >"$kst_stamp"
    log "kernel devmem harness, C ncdevmem and C iou-zcrx in $kst"
fi
# The kernel's iou-zcrx.py runs "iou-zcrx" from the same directory: a link to the binary under
# test too, which answers to that name with iou-zcrx.c's command line (src/personality).
# Outside the build above, so a harness built before the link existed gets it.
ln -sfn /run/ncdevmem-under-test "$kst/tools/testing/selftests/drivers/net/hw/iou-zcrx"
# Where the guest puts py/'s scripts (a tmpfs over this directory), inside the kernel's tree
# where they find its library: the netkit cases run them beside the kernel's.
mkdir -p "$kst/tools/testing/selftests/drivers/net/hw/ncdevmem-rs"
# The byo-kernel case's tree takes a part of the same source package (before it goes).
byo_kernel_wanted && byo_tree_prepare
rm -rf "$src_deb_dir"

# ---------------------------------------------------------------------------------------------
# 4. the project's binaries
# ---------------------------------------------------------------------------------------------
# The same builds the rest of `make test` makes, so nothing is compiled twice: ncdevmem-rs in
# release (`make build`, also used by the demo and the py/ harness), the guest program and the
# test binaries in the test profile (`make unit` built them with --all-targets). The guest gets
# their shared libraries.
# The project's real-kernel integration tests run in the guest too (each binary is one case).
test_args=()
# rx_fixture replays the recording the guest has just made (devmem-nic/recvmsg-record).
# (A shell runs none of them.)
for t in "$repo"/tests/kernel_*.rs "$repo"/tests/e2e.rs "$repo"/tests/iou_zcrx.rs \
    "$repo"/tests/rx_fixture.rs; do
    ((shell)) && break
    [ -e "$t" ] && test_args+=(--test "$(basename "$t" .rs)")
done
log "building (if not built yet) ncdevmem-rs, examples/vm_guest and $((${#test_args[@]} / 2))" \
    "test binaries in $target_dir"
in_repo_cargo() { (cd "$repo" && "$cargo" "$@" --locked); }
if [ -n "${NCDEVMEM_VM_BIN:-}" ]; then
    # Another build as the tool under test (make vm-test-dist: the static binary of make dist).
    tool=$(realpath -e "$NCDEVMEM_VM_BIN") && [ -x "$tool" ] ||
        die "NCDEVMEM_VM_BIN=$NCDEVMEM_VM_BIN is no executable file"
    log "the tool under test: $tool ($("$tool" --version))"
else
    in_repo_cargo build -q --release --bin ncdevmem-rs || die "release build failed"
    tool=$target_dir/release/ncdevmem-rs
fi
in_repo_cargo build -q --example vm_guest || die "build of examples/vm_guest failed"
guest=$target_dir/debug/examples/vm_guest
test_bins=()
if ((${#test_args[@]})); then
    json=$(in_repo_cargo test --no-run -q "${test_args[@]}" --message-format=json) ||
        die "test build failed"
    while read -r exe; do
        test_bins+=("$exe")
    done < <(sed -n 's/.*"executable":"\([^"]*\/deps\/[^"]*\)".*/\1/p' <<<"$json")
    # The path cargo compiled into them (CARGO_BIN_EXE_ncdevmem-rs, test profile).
    bin_exe=$(sed -n 's/.*"executable":"\([^"]*\/ncdevmem-rs\)".*/\1/p' <<<"$json" | head -1)
    [ -n "$bin_exe" ] || bin_exe=$target_dir/debug/ncdevmem-rs
fi

# The kernel's harness files (devmem.py, nk_devmem.py, userns_devmem.py, iou-zcrx.py and the
# drv-net library, from the tree made above) and py/'s scripts placed in that tree, run on a veth
# pair on this host, with ncdevmem and iou-zcrx linked to the release binary
# (py/tests/test_kernel_tree.py). Here because `make test` runs pytest before this suite, when
# a fresh clone has no tree yet. Skipped under NCDEVMEM_VM_ONLY unless it names host-harness.
if ((shell)); then
    :
elif [ -z "${NCDEVMEM_VM_ONLY:-}" ] || [[ ",$NCDEVMEM_VM_ONLY," == *,host-harness,* ]]; then
    if python3 -c 'import pytest' 2>/dev/null; then
        log "host: the kernel's devmem harness files on a veth pair (py/tests/test_kernel_tree.py)"
        (cd "$repo" && NCDEVMEM_KSELFTEST_TREE=$kst NCDEVMEM=$tool PYTHONDONTWRITEBYTECODE=1 \
            python3 -m pytest -q -rs -p no:cacheprovider py/tests/test_kernel_tree.py) ||
            die "the kernel's harness files on this host: py/tests/test_kernel_tree.py failed (above)"
    else
        log "host: py/tests/test_kernel_tree.py SKIPPED: python3 has no pytest (make test-tools)"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 5. initramfs
# ---------------------------------------------------------------------------------------------
root=$out/root
rm -rf "$root"
mkdir -p "$root"/{bin,dev,etc,proc,sys,run,tmp,usr/bin,usr/sbin}
mknod "$root/dev/console" c 5 1
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do
    # iproute2's ip replaces busybox's (no netns there).
    [ "$a" = ip ] || [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
done
install -m 0755 "$here/init" "$root/init"
# copy_libs FILE...: the shared libraries FILE needs (and the loader), at the same paths.
copy_libs() {
    local f
    # (ldd heads each file's list with "FILE:" when given several; the libraries are indented.)
    for f in $(ldd "$@" 2>/dev/null | grep '^[[:space:]]' | grep -o '/[^ ]*' | sort -u); do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
    done
}
for b in "$tool" "$guest"; do
    [ -x "$b" ] || die "$b was not built"
    strip -o "$root/usr/bin/$(basename "$b")" "$b"
done
copy_libs "$tool" "$guest"
# py/'s scripts, which the netkit cases run in the kernel's tree (examples/vm_guest GUEST_PY).
mkdir -p "$root/usr/share/ncdevmem-rs/py"
cp "$repo"/py/*.py "$root/usr/share/ncdevmem-rs/py/"
guest_modules=(veth)
guest_args=(--bin /usr/bin/ncdevmem-rs --ip /usr/sbin/ip)
if ((${#test_bins[@]})); then
    mkdir -p "$root/usr/libexec/ncdevmem-tests" "$root/etc"
    for b in "${test_bins[@]}"; do
        # libtest names them <test>-<hash>; the case is named after <test>.
        strip -o "$root/usr/libexec/ncdevmem-tests/$(basename "$b" | sed 's/-[0-9a-f]*$//')" "$b"
    done
    copy_libs "${test_bins[@]}"
    # Tests find the binary at the path cargo compiled in (CARGO_BIN_EXE_ncdevmem-rs); there
    # the guest runs the release build. /init links it after mounting the guest's filesystems:
    # the target directory may live under /tmp or /run, which the guest mounts tmpfs over.
    echo "$bin_exe" >"$root/etc/vm-bin-links"
    guest_args+=(--tests /usr/libexec/ncdevmem-tests)
fi
# iproute2 and ethtool from the chroot; its (newer) C library replaces the host's, and the
# host's binaries run on it too.
cp -a "$tools_dir/." "$root/"
ln -sf ../bin/ip "$root/usr/sbin/ip"
guest_modules+=("devmem_nic pairs=0")
# virtio-9p: the devmem-nic harness cases mount the chroot (the kernel's Python harness,
# python3, socat, the C ncdevmem) read-only at /debian.
guest_modules+=(9pnet_virtio 9p)
if ((netdevsim)); then
    guest_modules+=(netdevsim)
    guest_args+=(--netdevsim)
fi
# NCDEVMEM_VM_FAULT_MATRIX=N: also measure the fault-detection matrix, N runs per fault.
if [ "${NCDEVMEM_VM_FAULT_MATRIX:-0}" != 0 ]; then
    guest_args+=(--fault-matrix "$NCDEVMEM_VM_FAULT_MATRIX")
fi
# NCDEVMEM_VM_KERNEL_TESTS=1: also the opt-in cases.
if [ "$kernel_tests" = 1 ]; then
    guest_args+=(--kernel-tests)
fi
# NCDEVMEM_VM_ONLY=A,B: only the cases whose names contain A or B, =A: named exactly A (and
# kernel-log).
if [ -n "${NCDEVMEM_VM_ONLY:-}" ]; then
    guest_args+=(--only "$NCDEVMEM_VM_ONLY")
fi
printf '%s\n' "${guest_modules[@]}" >"$root/etc/vm-modules"
# A KERNEL_TREE's selftests: the guest mounts them over the chroot's /opt/kselftest.
[ -z "$tree" ] || echo "${kst#"$chroot_dir"}" >"$root/etc/vm-kselftest"
echo "${guest_args[*]}" >"$root/etc/vm-guest.args"
# --shell: /init makes pair 0 and runs this command (an empty line: an interactive shell)
# instead of the guest program.
if ((shell)); then
    printf '%s\n' "${shell_cmd[*]}" >"$root/etc/vm-shell"
fi

# Modules: the ones the guest loads and everything they depend on, decompressed, plus depmod.
# A KERNEL_TREE's come from its build (modules.order; built-in ones are left out), debug info
# stripped.
if [ -n "$tree" ]; then
    mods=$tree
    mod_paths() { tree_mod_paths "$@"; }
else
    [ -s "$mods/modules.dep" ] || depmod -b "$(dirname "$(dirname "$(dirname "$mods")")")" "$ABI"
    mod_paths() { # names... → relative paths of the modules and their dependencies
        local m line
        for m in "$@"; do
            line=$(grep -E "(^|/)${m//-/[-_]}\.ko(\.[a-z]+)?:" "$mods/modules.dep") ||
                die "module $m not in $mods/modules.dep"
            echo "${line%%:*}"
            tr ' ' '\n' <<<"${line#*:}" | sed '/^$/d'
        done
    }
fi
gmods=$root/lib/modules/$KREL
mkdir -p "$gmods"
cp "$mods"/modules.builtin* "$mods/modules.order" "$gmods/" 2>/dev/null || true
# sch_ingress and cls_bpf: the kernel's netkit tests (clsact qdiscs, tc bpf filters); the
# netkit cases load them.
need=(veth 9pnet_virtio 9p sch_ingress cls_bpf)
mkdir -p "$gmods/extra"
cp "$dnic_dir/devmem_nic.ko" "$gmods/extra/"
need+=($(modinfo -F depends "$dnic_dir/devmem_nic.ko" | tr ',' ' '))
if ((nsim_build)); then
    cp "$nsim_dir/netdevsim.ko" "$gmods/extra/"
    deps=$(modinfo -F depends "$nsim_dir/netdevsim.ko" | tr ',' ' ')
    need+=($deps)
elif ((netdevsim)); then
    need+=(netdevsim)
fi
for p in $(mod_paths "${need[@]}" | sort -u); do
    mkdir -p "$gmods/$(dirname "$p")"
    case $p in
    *.xz) xz -dc "$mods/$p" >"$gmods/${p%.xz}" ;;
    *.zst) zstd -qdc "$mods/$p" >"$gmods/${p%.zst}" ;;
    *.gz) gzip -dc "$mods/$p" >"$gmods/${p%.gz}" ;;
    *) cp "$mods/$p" "$gmods/$p" ;;
    esac
    [ -z "$tree" ] || strip --strip-debug "$gmods/$(sed 's/\.\(xz\|zst\|gz\)$//' <<<"$p")"
done
depmod -b "$root" "$KREL"
initrd=$out/initramfs.cpio.gz
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$initrd"
log "initramfs $(du -h "$initrd" | cut -f1) (modules: ${need[*]})"

# ---------------------------------------------------------------------------------------------
# 6. the guest's time limit, boot, and the result read off the console
# ---------------------------------------------------------------------------------------------
# The cases that will run, as the guest program selects them (run here on the host: --list
# runs nothing), and from them the time limit, unless one was given.
n_cases=0
case_list=''
if ((shell)); then
    if [ -z "$timeout_s" ] && ((${#shell_cmd[@]})); then
        timeout_s=600
        timeout_how="the default for --shell CMD"
    fi
else
    list_args=(--list)
    ((netdevsim)) && list_args+=(--netdevsim)
    if [ "${NCDEVMEM_VM_FAULT_MATRIX:-0}" != 0 ]; then
        list_args+=(--fault-matrix "$NCDEVMEM_VM_FAULT_MATRIX")
    fi
    [ "$kernel_tests" != 1 ] || list_args+=(--kernel-tests)
    [ -z "${NCDEVMEM_VM_ONLY:-}" ] || list_args+=(--only "$NCDEVMEM_VM_ONLY")
    ((${#test_bins[@]} == 0)) || list_args+=(--tests "$root/usr/libexec/ncdevmem-tests")
    case_list=$("$guest" "${list_args[@]}") || die "$guest ${list_args[*]} failed"
    n_cases=$(grep -c . <<<"$case_list" || true)
    if [ -z "$timeout_s" ]; then
        timeout_s=$(vm_time_limit <<<"$case_list") || die "no time limit for the cases: $case_list"
        timeout_how="$VM_BASE_BUDGET s + the budgets of the $n_cases cases that run"
    fi
fi
console=$out/console.log
qemu_cmd=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 1G
    -nographic -no-reboot -nodefaults -display none
    -virtfs "local,path=$chroot_dir,mount_tag=debian,security_model=none,readonly=on"
    -kernel "$vmlinuz" -initrd "$initrd"
    -append "console=ttyS0 panic=-1 oops=panic quiet no_timer_check")
# no_timer_check: the kernel's boot-time check that the PIT timer interrupt arrives through
# the IO-APIC busy-waits a few ticks; under TCG on a loaded host the vCPU can miss them, and
# the kernel then panics ("IO-APIC + timer doesn't work!", seen once: tests/vm/FLAKES.md).
if ((shell)) && ((${#shell_cmd[@]} == 0)); then
    # The terminal goes straight to the guest's console (QEMU's monitor multiplexed on it).
    limit=()
    [ -z "$timeout_s" ] || limit=(timeout --foreground -k 10 "$timeout_s")
    log "booting under QEMU/TCG for a shell on its console (${timeout_s:-no} time limit;" \
        "exit or Ctrl-D powers the guest off, Ctrl-A X quits QEMU)"
    set +e
    "${limit[@]}" "${qemu_cmd[@]}" -serial mon:stdio
    qemu_rc=$?
    set -e
    [ ! -t 0 ] || stty sane 2>/dev/null || true
    log "done: $kernel_label, qemu exit $qemu_rc"
    exit "$qemu_rc"
fi
log "booting under QEMU/TCG (time limit ${timeout_s} s: $timeout_how); console in $console"
set +e
timeout -k 10 "$timeout_s" "${qemu_cmd[@]}" -serial stdio </dev/null | strip_terminal_controls |
    tee "$console" |
    awk '/^NCDEVMEM-FIXTURE-BEGIN /{ skip = 1 } !skip { print; fflush() } /^NCDEVMEM-FIXTURE-END$/{ skip = 0 }'
qemu_rc=${PIPESTATUS[0]}
set -e
marker=$(sed -n 's/^NCDEVMEM-VM-EXIT=\([0-9]*\)$/\1/p' "$console" | tail -1)
# --shell CMD: the command's exit status is the run's.
if ((shell)); then
    log "done: $kernel_label, qemu exit $qemu_rc, command exit ${marker:-none}"
    if [ -n "$marker" ]; then
        exit "$marker"
    elif [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
        echo "vm: FAIL: the command did not finish within $timeout_s s ($timeout_how); raise" \
            "the limit with NCDEVMEM_VM_TIMEOUT=SECS (or --timeout SECS)" >&2
    else
        echo "vm: FAIL: no result marker on the console (qemu exit $qemu_rc; kernel panic?)" >&2
    fi
    exit 1
fi
# Recordings of real kernel answers the guest printed (see tests/fixtures/README.md).
rm -rf "$out/fixtures"
mkdir -p "$out/fixtures"
awk -v dir="$out/fixtures" '
    /^NCDEVMEM-FIXTURE-BEGIN / { name = $2; next }
    /^NCDEVMEM-FIXTURE-END$/ { if (name != "") { close(dir "/" name); saved = saved " " name }; name = ""; next }
    name != "" { print > (dir "/" name) }
    END { if (saved != "") print "vm: fixtures recorded in " dir ":" saved > "/dev/stderr" }
' "$console"
# The case lines, outside the recordings (a recorded devmem.py output has KTAP "ok" lines).
cases=$(awk '/^NCDEVMEM-FIXTURE-BEGIN /{ skip = 1 } !skip { print } /^NCDEVMEM-FIXTURE-END$/{ skip = 0 }' "$console")
passed=$(grep -c '^ok ' <<<"$cases" || true)
failed=$(grep -c '^FAIL ' <<<"$cases" || true)
skipped=$(grep -c '^skip ' <<<"$cases" || true)
missed=$(grep -c '^miss ' <<<"$cases" || true)
log "done: $kernel_label, qemu exit $qemu_rc, guest exit ${marker:-none}"
if [ -z "$marker" ]; then
    if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
        vm_timeout_failure "$timeout_s" "$timeout_how" "$n_cases" <<<"$cases" >&2
    else
        echo "vm: FAIL: no result marker on the console (qemu exit $qemu_rc; kernel panic?)" >&2
    fi
    failed=$((failed + 1))
elif [ "$marker" != 0 ] && [ "$failed" = 0 ]; then
    failed=1
fi
# The guest counts its cases too; the two must agree (a stray "ok " line would inflate ours).
guest_sum=$(sed -n 's/^vm-guest: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped, \([0-9]*\) expected misses$/\1 \2 \3 \4/p' <<<"$cases" | tail -1)
if [ -n "$guest_sum" ] && [ "$guest_sum" != "$passed $failed $skipped $missed" ] && [ -n "$marker" ]; then
    echo "vm: FAIL: the console has $passed/$failed/$skipped/$missed ok/FAIL/skip/miss lines," \
        "the guest counted $guest_sum" >&2
    failed=$((failed + 1))
fi
# The byo-kernel case: one more line, from a run of this script (tests/vm/kernel-tree.sh).
if byo_kernel_wanted; then
    byo_kernel_case
    if [ "$byo_result" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
elif [ -z "$tree" ] && [ -z "${NCDEVMEM_VM_ONLY:-}" ]; then
    echo "skip byo-kernel: opt-in: runs with NCDEVMEM_VM_KERNEL_TESTS=1 or when NCDEVMEM_VM_ONLY names it"
    skipped=$((skipped + 1))
fi
echo "vm-test: $passed passed, $failed failed, $skipped skipped, $missed expected misses"
[ "$failed" = 0 ]
