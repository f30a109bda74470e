#!/usr/bin/env bash
# Installs the host tools the VM suite needs (root, Debian): qemu-system-x86 (from
# <codename>-backports on bookworm: bookworm's own qemu 7.2 would remove a preinstalled
# qemu-utils 10.0), busybox-static, cpio, kmod (depmod), xz-utils, and mmdebstrap when netdevsim
# is built. Idempotent: does nothing when every tool is present.
#
# The backports suite is read through a PRIVATE apt configuration (its own source part, lists
# and cache under the VM cache directory); the host's sources, lists and preferences are never
# changed. Packages are installed into the host's dpkg database as usual. When the host's
# sources have no bookworm-backports entry, one is added (privately) for the mirror the host's
# apt configuration uses for bookworm main; NCDEVMEM_VM_MIRROR overrides it.
#
# usage: tests/vm/install-host-tools.sh [--netdevsim] [--cache DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"
cache=$(vm_cache_dir)
want_mmdebstrap=0
while (($#)); do
    case $1 in
    --netdevsim) want_mmdebstrap=1 ;;
    --cache) cache=$2; shift ;;
    *) echo "install-host-tools: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

log() { echo "vm: $*" >&2; }
die() { echo "vm: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "installing host tools needs root"

# command → package; the qemu binary comes from backports where that matters.
declare -A pkg_of=(
    [qemu-system-x86_64]=qemu-system-x86
    [cpio]=cpio
    [depmod]=kmod
    [xz]=xz-utils
)
((want_mmdebstrap)) && pkg_of[mmdebstrap]=mmdebstrap
missing=()
for cmd in "${!pkg_of[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
done
# busybox must be the static build: it runs as the guest's userland.
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" ||
    missing+=(busybox-static)
((${#missing[@]})) || exit 0

log "installing host tools: ${missing[*]}"
. /etc/os-release
codename=${VERSION_CODENAME:-}
apt_args=(-y -qq --no-install-recommends --no-remove -o DPkg::Lock::Timeout=300)
export DEBIAN_FRONTEND=noninteractive

retry() { # retry WHAT CMD... : three attempts, then fail loudly
    local what=$1 n
    shift
    for n in 1 2 3; do
        "$@" && return 0
        log "$what failed (attempt $n of 3)"
        ((n < 3)) && sleep $((n * 10))
    done
    die "$what failed 3 times (is the Debian archive reachable?)"
}

if [ "$codename" = bookworm ]; then
    # A private apt configuration: the host's own source files (read, never changed) plus
    # bookworm-backports, with private lists and cache.
    dir=$cache/apt-host
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d"
    rm -f "$dir/sources.list.d/"*
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] && ln -s "$f" "$dir/sources.list.d/"
    done
    if ! apt_deb_sources | grep -q "^[^ ]* bookworm-backports "; then
        mirror=${NCDEVMEM_VM_MIRROR:-}
        if [ -z "$mirror" ]; then
            mirror=$(debian_mirror bookworm) ||
                die "no Debian mirror for bookworm-backports: this machine's apt configuration" \
                    "has no http(s) entry for bookworm's main archive; set NCDEVMEM_VM_MIRROR"
        fi
        cat >"$dir/sources.list.d/zz-ncdevmem-vm-backports.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    fi
    cat >"$dir/apt.conf" <<EOF
Dir::State::Lists "$dir/lists";
Dir::Cache "$dir/cache";
Dir::Etc::SourceParts "$dir/sources.list.d";
APT::Sandbox::User "root";
Acquire::Languages "none";
EOF
    export APT_CONFIG=$dir/apt.conf
    retry "apt-get update (host sources + bookworm-backports)" \
        apt-get update -qq -o APT::Update::Error-Mode=any
    retry "apt-get install ${missing[*]}" \
        apt-get install "${apt_args[@]}" -t bookworm-backports "${missing[@]}"
    apt-get clean
else
    retry "apt-get update" apt-get update -qq
    retry "apt-get install ${missing[*]}" apt-get install "${apt_args[@]}" "${missing[@]}"
fi
log "qemu: $(qemu-system-x86_64 --version | head -1)"
