#!/bin/bash
# Run inside the VM suite's trixie chroot (tests/vm/run.sh): from the subset of the VM kernel's
# source package in $1, installs the kernel's uapi headers and builds the kernel's C ncdevmem
# (tools/testing/selftests/drivers/net/hw/ncdevmem.c) against the two YNL families it uses,
# netdev and ethtool, into $2. The kernel's Makefiles would generate every YNL family; one of
# them (binder) does not finish under trixie's Python, so only the two are generated here.
# headers_install needs rsync (the chroot has it).
set -euo pipefail
src=$1 out=$2
hdr=$src/.uapi
cd "$src"
# ynl_gen_c.py finds the tree's root by its MAINTAINERS file.
[ -e MAINTAINERS ] || : >MAINTAINERS
make -s ARCH=x86 HOSTCC=gcc-14 CC=gcc-14 headers_install INSTALL_HDR_PATH="$hdr" >/dev/null
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
gcc-14 -O2 -std=gnu11 -Wall -isystem "$hdr/include" \
    -I"$src/tools/net/ynl/lib" -I"$src/tools/net/ynl/generated" \
    ncdevmem.c "$src/tools/net/ynl/generated/netdev-user.c" \
    "$src/tools/net/ynl/generated/ethtool-user.c" "$src/tools/net/ynl/lib/ynl.a" -o "$out"
