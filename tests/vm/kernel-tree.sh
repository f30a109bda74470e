# Sourced by tests/vm/run.sh: the KERNEL_TREE path (boot a kernel tree's own image and
# modules, build the suite's modules against that tree with the compiler that built it, take
# the kernel's selftests from its sources) and the byo-kernel case (Debian's cached kernel laid
# out as such a tree, run through that path).
#
# Uses run.sh's globals (cache, out, here, chroot_dir, ABI, KVERSION, mods, vmlinuz, kconfig,
# netdevsim, kernel_tests, cleanups, timeout_s) and functions (log, die, ensure_chroot,
# src_extract).

tree='' tree_src='' tree_where='' tree_cc=''

# tree_open DIR: DIR must be a configured and built x86_64 kernel tree (the source tree, or an
# O= build directory whose "source" link names the sources). Sets tree (absolute), tree_src,
# KREL (include/config/kernel.release), vmlinuz (arch/x86/boot/bzImage) and kconfig (.config).
tree_open() {
    local dir=$1 arch ver
    [ -d "$dir" ] || die "KERNEL_TREE=$dir: no such directory"
    tree=$(cd "$dir" && pwd -P)
    kconfig=$tree/.config
    vmlinuz=$tree/arch/x86/boot/bzImage
    if [ ! -f "$kconfig" ]; then
        die "KERNEL_TREE=$tree is not a configured kernel tree: no .config (configure and build" \
            "it, e.g. make defconfig && make -j\$(nproc))"
    fi
    arch=$(kernel_config_arch "$kconfig")
    if [ "$arch" != x86_64 ]; then
        die "KERNEL_TREE=$tree is configured for $arch: the VM suite boots x86_64 kernels" \
            "under qemu-system-x86_64 (configure it with ARCH=x86_64)"
    fi
    if [ ! -f "$vmlinuz" ] || [ ! -f "$tree/include/config/kernel.release" ]; then
        die "KERNEL_TREE=$tree is not built: no arch/x86/boot/bzImage or" \
            "include/config/kernel.release (build it: make -j\$(nproc))"
    fi
    KREL=$(cat "$tree/include/config/kernel.release")
    ver=$(bzimage_version "$vmlinuz") || die "KERNEL_TREE=$tree: $vmlinuz is not an x86 bzImage"
    if [ "${ver%% *}" != "$KREL" ]; then
        die "KERNEL_TREE=$tree: arch/x86/boot/bzImage is version ${ver%% *} but" \
            "include/config/kernel.release says $KREL: the image is from another build" \
            "(rebuild: make -j\$(nproc))"
    fi
    if [ "$kconfig" -nt "$vmlinuz" ]; then
        die "KERNEL_TREE=$tree: .config is newer than arch/x86/boot/bzImage, so the image was" \
            "not built from it (rebuild: make -j\$(nproc))"
    fi
    if [ ! -f "$tree/modules.order" ] || [ ! -f "$tree/Module.symvers" ]; then
        die "KERNEL_TREE=$tree: its modules are not built: no modules.order or Module.symvers" \
            "(make -j\$(nproc) builds them with the image)"
    fi
    tree_src=$tree
    [ -L "$tree/source" ] && tree_src=$(readlink -f "$tree/source")
    if [ ! -f "$tree_src/tools/testing/selftests/drivers/net/hw/devmem.py" ]; then
        die "KERNEL_TREE=$tree: its sources ($tree_src) have no" \
            "tools/testing/selftests/drivers/net/hw/devmem.py"
    fi
    log "kernel tree $tree: kernel $KREL (image ${ver#* }), sources in $tree_src"
}

# tree_pick_compiler: where the modules are built against the tree, with which make variable:
# on this machine, or in the suite's trixie chroot, whichever has the compiler that built the
# tree (its first --version line is CONFIG_CC_VERSION_TEXT: kbuild's own test). Sets tree_where
# (host or chroot) and tree_cc.
tree_pick_compiler() {
    local host_answers chroot_answers
    if tree_cc=$(kernel_tree_cc "$kconfig" 2>"$out/cc-host.txt"); then
        tree_where=host
    else
        ensure_chroot
        if tree_cc=$(kernel_tree_cc "$kconfig" chroot "$chroot_dir" 2>"$out/cc-chroot.txt"); then
            tree_where=chroot
        else
            host_answers=$(paste -sd';' "$out/cc-host.txt")
            chroot_answers=$(paste -sd';' "$out/cc-chroot.txt")
            die "KERNEL_TREE=$tree was built with" \
                "'$(_kconfig_value "$kconfig" CC_VERSION_TEXT)' (CONFIG_CC_VERSION_TEXT);" \
                "neither this machine ($host_answers) nor the suite's trixie chroot" \
                "($chroot_answers) has it, and modules must be built with the compiler that" \
                "built the kernel: install it, or build the tree with one of these"
        fi
    fi
    local where="this machine's compiler"
    [ "$tree_where" = chroot ] && where="the trixie chroot's compiler"
    log "modules for $KREL are built with $tree_cc ($where, as CONFIG_CC_VERSION_TEXT names it)"
}

# tree_bind_in_chroot: makes the tree (and its sources, when elsewhere) visible in the chroot at
# the same paths (an O= build directory names its sources by absolute path), read-only, until
# the run ends; the directories made for the mount points go again.
tree_bind_in_chroot() {
    local d made m
    for d in "$tree" "$tree_src"; do
        # (Sources inside the tree come with it.)
        if mountpoint -q "$chroot_dir$d" || [[ $d == "$tree"/* ]]; then
            continue
        fi
        # Cleanups run last first: the mount goes, then the directories made for it, deepest
        # first.
        made=$(mkdir -pv "$chroot_dir$d" | sed -n "s/^mkdir: created directory '\(.*\)'$/\1/p")
        while read -r m; do
            if [ -n "$m" ]; then
                cleanups+=("rmdir '$m'")
            fi
        done <<<"$made"
        mount --bind "$d" "$chroot_dir$d"
        cleanups+=("umount '$chroot_dir$d'")
        mount -o remount,bind,ro "$chroot_dir$d"
    done
}

# tree_key: names the tree's build that the cached modules belong to (image, configuration,
# module symbols, the module sources built against it).
tree_key() {
    {
        sha256sum "$vmlinuz" "$kconfig" "$tree/Module.symvers"
        cat "$here"/devmem-nic/*.c "$here/devmem-nic/Kbuild"
        if [ -z "$(_kconfig_value "$kconfig" NETDEVSIM)" ]; then
            find "$tree_src/drivers/net/netdevsim" -type f -printf '%P %s %T@\n' | sort
        fi
    } | sha256sum | cut -c1-16
}

# tree_src_extract DEST PATTERN...: what src_extract unpacks from Debian's linux-source,
# copied from the tree's sources ("dir/*" patterns copy dir), without build products.
tree_src_extract() {
    local dest=$1 p paths=()
    shift
    for p in "$@"; do
        paths+=("${p%/\*}")
    done
    mkdir -p "$dest"
    tar -C "$tree_src" -c --anchored --exclude='*.o' --exclude='*.ko' --exclude='*.a' \
        --exclude='*.so' --exclude='*/.*.cmd' --exclude='*.mod' --exclude='*.mod.c' \
        --exclude='*/.git' --exclude='arch/x86/include/generated' --exclude='*/__pycache__' \
        "${paths[@]}" | tar -x -C "$dest" ||
        die "copying ${paths[*]} from the sources of KERNEL_TREE=$tree ($tree_src) failed"
}

# tree_src_key PATTERN...: names the state of those paths of the tree's sources (each file's
# name, size and modification time), for the selftests built from them.
tree_src_key() {
    local p paths=()
    for p in "$@"; do
        paths+=("${p%/\*}")
    done
    (cd "$tree_src" && find "${paths[@]}" -type f -printf '%p %s %T@\n' | sort | sha256sum |
        cut -c1-16)
}

# tree_mod_paths NAME...: the modules NAME and everything they depend on, as paths relative to
# the tree (as modules.order lists them, .o or .ko; the file may be compressed); modules built
# into the kernel (modules.builtin) are left out. Fails naming a module the tree has neither
# built in nor built.
tree_mod_paths() {
    local todo=("$@") seen=' ' m base p f
    while ((${#todo[@]})); do
        m=${todo[0]//-/_}
        todo=("${todo[@]:1}")
        [[ $seen == *" $m "* ]] && continue
        seen+="$m "
        # modules.builtin: kernel/<path>/<name>.ko; modules.order: <path>/<name>.o (or .ko).
        if sed 's,.*/,,; s,\.ko$,,; s,-,_,g' "$tree/modules.builtin" 2>/dev/null | grep -qx "$m"; then
            continue
        fi
        p=$(sed 's,\.o$,.ko,' "$tree/modules.order" | awk -v m="$m" '{ b = $0; sub(/.*\//, "", b);
            sub(/\.ko$/, "", b); gsub(/-/, "_", b); if (b == m) { print; exit } }')
        f=''
        for base in "$p" "$p.xz" "$p.zst" "$p.gz"; do
            [ -n "$p" ] && [ -f "$tree/$base" ] && { f=$base; break; }
        done
        [ -n "$f" ] || die "KERNEL_TREE=$tree has module $m neither built in (modules.builtin)" \
            "nor built (modules.order${p:+, $p missing}); enable it (=m or =y) and rebuild"
        echo "$f"
        todo+=($(modinfo -F depends "$tree/$f" | tr ',' ' '))
    done
}

# ---------------------------------------------------------------------------------------------
# The byo-kernel case: Debian's cached kernel laid out as a built kernel tree (an O= build
# directory: Debian's build headers with its .config and Module.symvers, its image as
# arch/x86/boot/bzImage, its modules at their build paths with modules.order, and "source"
# naming a subset of its linux-source), then the suite's probe, rx and kernel devmem.py cases run
# against it through KERNEL_TREE.
# ---------------------------------------------------------------------------------------------

# The parts of the kernel source the tree gets: everything tests/vm/run.sh takes from a kernel
# tree (netdevsim, the selftests, what their build needs) and the rest of tools/.
# (in $cache/byo-tree-<Debian ABI>)
byo_src_paths=('tools/*' 'Documentation/netlink/*' 'include/*' 'arch/x86/*' 'arch/Kconfig'
    'scripts/*' 'Makefile' 'drivers/net/netdevsim/*')

# byo_kernel_wanted: the case runs in a suite on Debian's kernel when NCDEVMEM_VM_ONLY names it,
# or with NCDEVMEM_VM_KERNEL_TESTS=1 unless NCDEVMEM_VM_ONLY leaves it out (opt-in: a second
# boot and, the first time, builds of several minutes).
byo_kernel_wanted() {
    [ -z "$tree" ] || return 1
    if [ -n "${NCDEVMEM_VM_ONLY:-}" ]; then
        [[ ",$NCDEVMEM_VM_ONLY," == *,byo-kernel,* || ",$NCDEVMEM_VM_ONLY," == *,=byo-kernel,* ||
            ",$NCDEVMEM_VM_ONLY," == *,opt-in,* ]]
    else
        [ "$kernel_tests" = 1 ]
    fi
}

# byo_tree_prepare: lays the tree out once per Debian kernel (in the cache; the modules and the
# image are hard links or copies of the cached kernel's, the headers of the chroot's).
byo_tree_prepare() {
    local byo_tree=$cache/byo-tree-$ABI
    [ -e "$byo_tree/.complete" ] && return 0
    ensure_chroot
    local t=$byo_tree.tmp h=$chroot_dir/usr/src/linux-headers-$ABI
    log "laying out Debian's kernel $ABI as a built kernel tree in $byo_tree"
    rm -rf "$t" "$byo_tree"
    mkdir -p "$t/arch/x86/boot"
    cleanups+=("rm -rf '$t'")
    cp -a "$h/." "$t/"
    # Debian's headers name their kbuild scripts relatively and their output directory
    # absolutely: both again for this place (the scripts as the chroot sees them).
    ln -sfn "/usr/lib/linux-kbuild-${ABI%-*}/scripts" "$t/scripts"
    ln -sfn "/usr/lib/linux-kbuild-${ABI%-*}/tools" "$t/tools"
    printf 'KBUILD_OUTPUT=%s\ninclude /usr/src/linux-headers-%s-common/Makefile\n' \
        "$byo_tree" "${ABI%-*}" >"$t/Makefile"
    cp "$vmlinuz" "$t/arch/x86/boot/bzImage"
    # Modules at their build paths (kernel/drivers/… → drivers/…), listed as a build lists them.
    cp -al "$mods/kernel/." "$t/"
    sed 's,^kernel/,,; s,\.ko$,.o,' "$mods/modules.order" >"$t/modules.order"
    cp "$mods/modules.builtin" "$mods/modules.builtin.modinfo" "$t/"
    src_extract "$t/src" "${byo_src_paths[@]}"
    ln -s "$byo_tree/src" "$t/source"
    : >"$t/.complete"
    mv "$t" "$byo_tree"
}

# byo_kernel_case: runs this suite again with KERNEL_TREE=<that tree> and only
# devmem-nic/probe, devmem-nic/rx and devmem-nic/kernel-devmem-py (and kernel-log), holding
# this run's lock; prints the case's one line and sets byo_result (ok or FAIL).
byo_kernel_case() {
    local byo_tree=$cache/byo-tree-$ABI
    local started=$SECONDS rc=0 sum c missing=() nsim=() blog=$out/byo-kernel.log
    local need=(devmem-nic/probe devmem-nic/rx devmem-nic/kernel-devmem-py kernel-log)
    ((netdevsim)) || nsim=(--no-netdevsim)
    log "byo-kernel: the suite again, through KERNEL_TREE=$byo_tree (Debian's $ABI laid out as" \
        "a built tree)"
    env -u NCDEVMEM_VM_FAULT_MATRIX -u NCDEVMEM_VM_KERNEL_TESTS NCDEVMEM_VM_KERNEL_TREE="$byo_tree" \
        NCDEVMEM_VM_ONLY='=devmem-nic/probe,=devmem-nic/rx,=devmem-nic/kernel-devmem-py' \
        _NCDEVMEM_VM_LOCK_HELD=1 "$here/run.sh" --cache "$cache" --timeout "$timeout_s" \
        "${nsim[@]}" 2>&1 | tee "$blog" | sed -u 's/^/byo-kernel| /' || rc=$?
    sum=$(sed -n 's/^vm-test: //p' "$blog" | tail -1)
    for c in "${need[@]}"; do
        grep -q "^ok $c: " "$blog" || missing+=("$c")
    done
    if [ "$rc" = 0 ] && ((${#missing[@]} == 0)); then
        byo_result=ok
        echo "ok byo-kernel: KERNEL_TREE=$byo_tree (Debian's $ABI as a built tree: image," \
            "modules, build headers, linux-source): ${need[*]} ok; $sum [$((SECONDS - started)) s]"
    else
        byo_result=FAIL
        echo "FAIL byo-kernel: KERNEL_TREE=$byo_tree: exit $rc, not ok: ${missing[*]:-none};" \
            "${sum:-no summary} (whole output: $blog) [$((SECONDS - started)) s]"
    fi
}
