#!/bin/bash
# Run inside the VM suite's trixie chroot (tests/vm/run.sh): from the subset of a kernel source
# tree in $1 (the VM kernel's source package, or the KERNEL_TREE's sources), installs the
# kernel's uapi headers and builds, into directory $2, the kernel's C ncdevmem
# (tools/testing/selftests/drivers/net/hw/ncdevmem.c, against the two YNL families it uses,
# netdev and ethtool) as c-ncdevmem and the kernel's C iou-zcrx (iou-zcrx.c, against liburing)
# as c-iou-zcrx, the drv-net tests' xdp_helper in place, and the selftests' BPF objects (every
# *.bpf.c of drivers/net/hw and net/lib: nk_forward.bpf.o, nk_primary_rx_redirect.bpf.o for
# the netkit tests, xdp_dummy.bpf.o for nk_qlease.py) next to their sources, with clang and libbpf's headers as the selftests'
# net/bpf.mk does (clang -O2 -g --target=bpf, the tree's uapi headers, clang's own system
# include directories appended). The kernel's Makefiles would generate every YNL family; one of
# them (binder) does not finish under trixie's Python, so only the two are generated here.
# headers_install needs rsync (the chroot has it) and writes only below $1/.obj (O=), so a subset
# copied from a source tree that has been built in place is used as it is.
#
# build-kselftest.sh --sys-includes: reads `clang -v -E -` output on stdin and prints the
# -idirafter flags for its "#include <...>" search list (what --target=bpf would otherwise lack:
# the multiarch asm/ directory), one per line.
set -euo pipefail
if [ "${1:-}" = --sys-includes ]; then
    sed -n '/^#include <\.\.\.> search starts here:$/,/^End of search list\.$/s,^ \(/.*\),-idirafter\n\1,p'
    exit 0
fi
src=$1 out=$2
hdr=$src/.uapi
cd "$src"
# ynl_gen_c.py finds the tree's root by its MAINTAINERS file.
[ -e MAINTAINERS ] || : >MAINTAINERS
make -s ARCH=x86 HOSTCC=gcc-14 CC=gcc-14 O="$src/.obj" headers_install INSTALL_HDR_PATH="$hdr" >/dev/null
cd "$src/tools/net/ynl"
make -s -C lib CC=gcc-14 "CFLAGS=-O2 -std=gnu11 -isystem $hdr/include" >/dev/null
cd generated
for family in netdev ethtool; do
    extra=()
    [ "$family" = ethtool ] &&
        extra=(--user-header linux/ethtool_netlink.h --exclude-op stats-get)
    for mode in --header --source; do
        ext=c
        [ "$mode" = --header ] && ext=h
        timeout 300 ../pyynl/ynl_gen_c.py --mode user "$mode" \
            --spec "../../../../Documentation/netlink/specs/$family.yaml" \
            -o "$family-user.$ext" "${extra[@]}"
    done
done
cd "$src/tools/testing/selftests/drivers/net/hw"
mkdir -p "$out"
gcc-14 -O2 -std=gnu11 -Wall -isystem "$hdr/include" \
    -I"$src/tools/net/ynl/lib" -I"$src/tools/net/ynl/generated" \
    ncdevmem.c "$src/tools/net/ynl/generated/netdev-user.c" \
    "$src/tools/net/ynl/generated/ethtool-user.c" "$src/tools/net/ynl/lib/ynl.a" -o "$out/c-ncdevmem"
# The AF_XDP helper of the drv-net tests (queues.py's check_xsk), next to the library that runs
# it; plain C against the uapi headers.
gcc-14 -O2 -std=gnu11 -Wall -isystem "$hdr/include" -I"$src/tools/testing/selftests/net/lib" \
    "$src/tools/testing/selftests/net/lib/xdp_helper.c" \
    -o "$src/tools/testing/selftests/net/lib/xdp_helper"
# As the selftests' Makefile builds it (LDLIBS += -luring), with the uapi headers first.
# Only the opt-in case devmem-nic/c-iou-zcrx runs it: a liburing too old for the tree's zcrx
# (storage size of 'rq_ring' isn't known, with trixie's 2.9) must not stop the default suite.
if ! gcc-14 -O2 -std=gnu11 -Wall -isystem "$hdr/include" iou-zcrx.c -luring \
    -o "$out/c-iou-zcrx"; then
    echo "build-kselftest: the C iou-zcrx did not build (above); devmem-nic/c-iou-zcrx will say so" >&2
fi
# The BPF objects, as the selftests' Makefiles list them (TEST_GEN_FILES: *.bpf.c → *.bpf.o).
# (No process substitution: the chroot has no /dev/fd.)
# shellcheck disable=SC2207 # one flag or directory per line, none with blanks
sys_inc=($(clang -v -E - </dev/null 2>&1 | "$0" --sys-includes))
for dir in "$src/tools/testing/selftests/drivers/net/hw" "$src/tools/testing/selftests/net/lib"; do
    for c in "$dir"/*.bpf.c; do
        [ -e "$c" ] || continue
        clang -O2 -g --target=bpf -isystem "$hdr/include" "${sys_inc[@]}" -c "$c" -o "${c%.c}.o"
        echo "build-kselftest: built ${c#"$src/"}" | sed 's/\.c$/.o/'
    done
done
