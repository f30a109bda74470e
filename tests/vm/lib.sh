# Shell functions shared by tests/vm/run.sh and tests/vm/install-host-tools.sh (sourced, not
# run). Tested by tests/vm/lib-test.sh (make scripts-test).
#
# vm_cache_dir             the VM cache: $NCDEVMEM_VM_CACHE, else
#                          ${XDG_CACHE_HOME:-$HOME/.cache}/ncdevmem-rs/vm (per user, shared by
#                          every clone: downloads and builds that do not depend on the checkout)
# apt_deb_sources [ROOT]   the deb entries of the apt configuration under ROOT (default: this
#                          machine's, where apt-config says it is), one line each:
#                          "URI SUITE COMPONENT..." (one-line and deb822 forms; comments,
#                          deb-src and disabled entries left out)
# debian_mirror CODENAME [ROOT]
#                          the URI of the first http(s) entry serving CODENAME's main archive
#                          (suite exactly CODENAME: not -security, -updates or -backports) with
#                          component main; status 1 and nothing printed when there is none
# strip_terminal_controls  filter: removes terminal control sequences (ESC c, CSI, OSC, other
#                          ESC sequences) and control characters other than TAB and LF, so a
#                          guest console cannot reset, clear or unwrap the user's terminal
# kernel_config_missing CONFIG [NETDEVSIM]
#                          what the kernel configuration CONFIG (a .config) lacks for the VM
#                          suite, one line each: the line to add, then "# " and why (and what
#                          CONFIG has now); an option without a prompt is named through one
#                          that selects it. NETDEVSIM=1 (default 0): netdevsim is to be built
#                          out of tree when CONFIG does not have it. Status 1 when something is
#                          missing
# kernel_config_arch CONFIG
#                          the architecture CONFIG was made for: x86_64, "x86 (32-bit)", or the
#                          name in its "# Linux/ARCH VERSION Kernel Configuration" header
# bzimage_version FILE     the version string an x86 bzImage carries (its setup header's
#                          kernel_version field); status 1 when FILE is not a bzImage
# kernel_tree_cc CONFIG [RUNNER...]
#                          the compiler that built the kernel of CONFIG, as the make variable
#                          for an external module build ("CC=x86_64-linux-gnu-gcc-14",
#                          "LLVM=1"): the first candidate whose first --version line equals
#                          CONFIG_CC_VERSION_TEXT (kbuild's own test for external modules), run
#                          through RUNNER (e.g. chroot DIR; default: this machine). Status 1,
#                          and each candidate's answer on stderr, when none matches
# chroot_netkit_tools_missing ROOT
#                          what the Debian root ROOT lacks for the kernel's netkit tests (to
#                          build and load the selftests' BPF objects, to bind-mount namespaces),
#                          one package name a line (clang, libbpf-dev, bpftool, mount); status 1
#                          when something is missing
# vm_time_limit            reads the selected cases' rows as `vm_guest --list` prints them
#                          (NAME, budget in seconds, run or skip, what it shows; tab-separated)
#                          and prints the guest's time limit for them: VM_BASE_BUDGET plus the
#                          budget of each case that runs (an opt-in case that only prints skip:
#                          none). The budgets live in the guest's case table (examples/vm_guest.rs)
# vm_timeout_failure LIMIT HOW SELECTED
#                          reads the guest's console (stdin) and prints the failure line of a
#                          guest stopped at its time limit: LIMIT seconds (HOW: where the limit
#                          came from), the case that was running (the last "vm-guest: running
#                          NAME" without its result line) or that none was, how many of the
#                          SELECTED cases had ended, and how to raise the limit

vm_cache_dir() {
    if [ -n "${NCDEVMEM_VM_CACHE:-}" ]; then
        echo "$NCDEVMEM_VM_CACHE"
    else
        echo "${XDG_CACHE_HOME:-${HOME:?neither NCDEVMEM_VM_CACHE nor HOME is set}/.cache}/ncdevmem-rs/vm"
    fi
}

# The source list file and parts directory of the apt configuration under ROOT.
_apt_source_files() {
    local root=${1:-} list='' parts='' f
    if [ -z "$root" ] && command -v apt-config >/dev/null 2>&1; then
        list=$(apt-config shell v Dir::Etc::sourcelist/f | sed -n "s/^v='\(.*\)'$/\1/p")
        parts=$(apt-config shell v Dir::Etc::sourceparts/d | sed -n "s/^v='\(.*\)'$/\1/p")
    fi
    [ -n "$list" ] || list=$root/etc/apt/sources.list
    [ -n "$parts" ] || parts=$root/etc/apt/sources.list.d
    [ -f "$list" ] && echo "$list"
    for f in "${parts%/}"/*.list "${parts%/}"/*.sources; do
        [ -f "$f" ] && echo "$f"
    done
    return 0
}

apt_deb_sources() {
    local f
    while read -r f; do
        case $f in
        *.sources) _deb822_entries <"$f" ;;
        *) _one_line_entries <"$f" ;;
        esac
    done < <(_apt_source_files "${1:-}")
}

# One-line form: deb [opt=val ...] URI SUITE [COMPONENT...]
_one_line_entries() {
    awk '
        { sub(/#.*/, "") }
        $1 != "deb" { next }
        {
            line = $0
            sub(/^[ \t]*deb[ \t]+/, "", line)
            if (line ~ /^\[/) {
                if (index(line, "]") == 0) next
                line = substr(line, index(line, "]") + 1)
            }
            n = split(line, w, /[ \t]+/)
            out = ""
            k = 0
            for (i = 1; i <= n; i++) {
                if (w[i] == "") continue
                tok = w[i]
                # A URI with a bracketed part may hold blanks (cdrom:[Debian GNU/Linux 12]/);
                # keep it one word, blanks as %20.
                if (tok ~ /\[/ && tok !~ /\]/)
                    while (i < n && tok !~ /\]/) tok = tok "%20" w[++i]
                out = out (out == "" ? "" : " ") tok
                k++
            }
            if (k >= 2) print out
        }'
}

# deb822 form: paragraphs of "Key: value" fields (continuation lines start with a blank),
# separated by blank lines; "#" lines are comments, also inside a paragraph.
_deb822_entries() {
    awk '
        function flush(   nt, nu, ns, i, j, k, t, u, s, isdeb) {
            if (have) {
                isdeb = 0
                nt = split(fld["types"], t, /[ \t]+/)
                for (i = 1; i <= nt; i++) if (t[i] == "deb") isdeb = 1
                if (isdeb && tolower(fld["enabled"]) != "no") {
                    nu = split(fld["uris"], u, /[ \t]+/)
                    ns = split(fld["suites"], s, /[ \t]+/)
                    for (i = 1; i <= nu; i++) if (u[i] != "")
                        for (j = 1; j <= ns; j++) if (s[j] != "")
                            print u[i] " " s[j] (fld["components"] == "" ? "" : " " fld["components"])
                }
            }
            delete fld
            have = 0
            key = ""
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ {
            if (key != "") { v = $0; gsub(/^[ \t]+|[ \t]+$/, "", v); fld[key] = fld[key] " " v }
            next
        }
        {
            c = index($0, ":")
            if (c == 0) next
            key = tolower(substr($0, 1, c - 1))
            v = substr($0, c + 1)
            gsub(/^[ \t]+|[ \t]+$/, "", v)
            gsub(/[ \t]+/, " ", v)
            fld[key] = v
            have = 1
        }
        END { flush() }'
}

debian_mirror() {
    local codename=$1 root=${2:-} uri suite comps
    [ -n "$codename" ] || return 1
    while read -r uri suite comps; do
        [ "$suite" = "$codename" ] || continue
        case " $comps " in *" main "*) ;; *) continue ;; esac
        case $uri in http://* | https://*) ;; *) continue ;; esac
        echo "${uri%/}"
        return 0
    done < <(apt_deb_sources "$root")
    return 1
}

strip_terminal_controls() {
    # CSI (ESC [ params intermediates final), OSC (ESC ] ... BEL or ESC \), charset and other
    # two-character ESC sequences (ESC c is the full reset), then the remaining C0 controls.
    LC_ALL=C sed -u \
        -e 's,\x1b\[[0-?]*[ -/]*[@-~],,g' \
        -e 's,\x1b\][^\x07\x1b]*\(\x07\|\x1b\\\),,g' \
        -e 's,\x1b[()*+#%][0-~],,g' \
        -e 's,\x1b[ -~],,g' \
        -e 's,[\x00-\x08\x0b-\x1f\x7f],,g'
}

# The options the VM suite relies on: "NAME WANT ADD WHY", WANT y (built in), ym (built in or a
# module, which the guest loads) or n (off); ADD is the line to add (one word, or the five of
# "# CONFIG_NAME is not set"), an option that selects NAME when NAME has no prompt.
_kernel_config_needs() {
    cat <<'EOF'
MODULES y CONFIG_MODULES=y the suite loads its own modules (devmem_nic, netdevsim)
MODULE_SIG_FORCE n # CONFIG_MODULE_SIG_FORCE is not set the suite's out-of-tree modules are unsigned
BLK_DEV_INITRD y CONFIG_BLK_DEV_INITRD=y the guest boots from an initramfs
RD_GZIP y CONFIG_RD_GZIP=y the initramfs is gzip-compressed
BINFMT_ELF y CONFIG_BINFMT_ELF=y every guest program
BINFMT_SCRIPT y CONFIG_BINFMT_SCRIPT=y /init is a shell script
DEVTMPFS y CONFIG_DEVTMPFS=y /dev/udmabuf and the other device nodes
TMPFS y CONFIG_TMPFS=y the guest's /run and /tmp
PROC_FS y CONFIG_PROC_FS=y the guest's /proc
SYSFS y CONFIG_SYSFS=y the guest's /sys
SERIAL_8250 y CONFIG_SERIAL_8250=y the results are read off the serial console (ttyS0)
SERIAL_8250_CONSOLE y CONFIG_SERIAL_8250_CONSOLE=y the results are read off the serial console (ttyS0)
PCI y CONFIG_PCI=y the virtio-9p device is a PCI device
VIRTIO_PCI y CONFIG_VIRTIO_PCI=y the virtio-9p device (the guest loads no virtio_pci module)
NET_9P ym CONFIG_NET_9P=m the kernel's harness runs from the build chroot, shared over virtio-9p
NET_9P_VIRTIO ym CONFIG_NET_9P_VIRTIO=m the kernel's harness runs from the build chroot, shared over virtio-9p
9P_FS ym CONFIG_9P_FS=m the kernel's harness runs from the build chroot, shared over virtio-9p
NET y CONFIG_NET=y every network case
INET y CONFIG_INET=y every transfer case
IPV6 y CONFIG_IPV6=y the IPv6 transfers (the kernel's harness, iou-zcrx)
UNIX y CONFIG_UNIX=y the guest's programs (python3, socat)
NET_NS y CONFIG_NET_NS=y the peer of every pair lives in a network namespace
VETH ym CONFIG_VETH=m the veth cases and the project's real-kernel tests
DEBUG_FS y CONFIG_DEBUG_FS=y the software NIC's control files (/sys/kernel/debug/devmem_nic)
ETHTOOL_NETLINK y CONFIG_ETHTOOL_NETLINK=y rings, channels and header split through ethtool netlink
DMA_SHARED_BUFFER y CONFIG_SYNC_FILE=y dma-bufs (CONFIG_DMA_SHARED_BUFFER has no prompt; SYNC_FILE selects it)
UDMABUF y CONFIG_UDMABUF=y /dev/udmabuf, the dma-buf of every devmem case
MEMFD_CREATE y CONFIG_MEMFD_CREATE=y udmabuf takes a memfd
HUGETLBFS y CONFIG_HUGETLBFS=y hugetlb udmabufs and zcrx areas (-b 16384, check_rx_large_niov, iou-zcrx -x)
PAGE_POOL y CONFIG_NETDEVSIM=m the software NIC's page pools (CONFIG_PAGE_POOL has no prompt; NETDEVSIM selects it, as most NIC drivers do)
NET_DEVMEM y CONFIG_UDMABUF=y devmem TCP (CONFIG_NET_DEVMEM has no prompt: on with DMA_SHARED_BUFFER and PAGE_POOL)
IO_URING y CONFIG_IO_URING=y io_uring zero-copy receive (iou-zcrx, --zcrx)
NET_RX_BUSY_POLL y # CONFIG_PREEMPT_RT is not set io_uring zcrx (CONFIG_NET_RX_BUSY_POLL has no prompt: on unless PREEMPT_RT with NETCONSOLE)
IO_URING_ZCRX y CONFIG_IO_URING=y io_uring zcrx (CONFIG_IO_URING_ZCRX has no prompt: on with IO_URING, PAGE_POOL, INET and NET_RX_BUSY_POLL)
BPF_SYSCALL y CONFIG_BPF_SYSCALL=y netkit, which the kernel's netkit devmem tests use
NETKIT y CONFIG_NETKIT=y the kernel's netkit devmem tests
NET_SCH_INGRESS ym CONFIG_NET_SCH_INGRESS=m the kernel's netkit tests (their clsact qdiscs)
NET_CLS_BPF ym CONFIG_NET_CLS_BPF=m the kernel's netkit tests (their tc bpf filters)
USER_NS y CONFIG_USER_NS=y userns_devmem.py (a user namespace owning the netkit guest's)
EOF
}

# The value of CONFIG_$2 in the .config $1 (empty when not set).
_kconfig_value() {
    sed -n "s/^CONFIG_$2=\(.*\)/\1/p" "$1" | tail -1
}

kernel_config_missing() {
    local config=$1 netdevsim=${2:-0} name want rest add why now status=0
    while read -r name want rest; do
        if [ "${rest:0:2}" = "# " ]; then
            # "# CONFIG_X is not set" (five words), then the reason.
            add=$(cut -d' ' -f1-5 <<<"$rest")
            why=$(cut -d' ' -f6- <<<"$rest")
        else
            add=${rest%% *}
            why=${rest#* }
        fi
        now=$(_kconfig_value "$config" "$name")
        case $want in
        y) [ "$now" = y ] && continue ;;
        ym) [ "$now" = y ] || [ "$now" = m ] && continue ;;
        n) [ -z "$now" ] || [ "$now" = n ] && continue ;;
        esac
        if [ -n "$now" ]; then now="CONFIG_$name=$now"; else now="CONFIG_$name not set"; fi
        echo "$add # $why (now: $now)"
        status=1
    done < <(_kernel_config_needs)
    # netdevsim built out of tree needs what selecting it would have turned on.
    if [ "$netdevsim" = 1 ] && [ -z "$(_kconfig_value "$config" NETDEVSIM)" ]; then
        for name in NET_DEVLINK NET_SHAPER; do
            [ "$(_kconfig_value "$config" "$name")" = y ] && continue
            echo "CONFIG_NETDEVSIM=m # netdevsim, built out of tree, needs CONFIG_$name (no prompt; NETDEVSIM selects it), or run with --no-netdevsim (now: CONFIG_$name not set)"
            status=1
            break
        done
    fi
    return $status
}

kernel_config_arch() {
    local config=$1 arch
    if grep -qx 'CONFIG_X86_64=y' "$config"; then
        echo x86_64
    elif grep -qx 'CONFIG_X86_32=y' "$config"; then
        echo "x86 (32-bit)"
    else
        arch=$(sed -n 's,^# Linux/\([^ ]*\) .*Kernel Configuration$,\1,p' "$config" | head -1)
        echo "${arch:-unknown}"
    fi
}

bzimage_version() {
    local f=$1 off
    # The setup header: "HdrS" at 0x202; kernel_version at 0x20e, the string's offset - 0x200.
    [ "$(dd if="$f" bs=1 skip=$((0x202)) count=4 2>/dev/null)" = HdrS ] || return 1
    off=$(od -An -tu2 -j $((0x20e)) -N2 "$f" | tr -d ' ')
    [ -n "$off" ] && [ "$off" -gt 0 ] || return 1
    dd if="$f" bs=1 skip=$((off + 0x200)) count=256 2>/dev/null | tr '\0' '\n' | head -1
}

kernel_tree_cc() {
    local config=$1 text major cand got answers=()
    shift
    text=$(_kconfig_value "$config" CC_VERSION_TEXT)
    text=${text#\"}
    text=${text%\"}
    [ -n "$text" ] || { echo "no CONFIG_CC_VERSION_TEXT in $config" >&2; return 1; }
    # gcc names itself first, as it was invoked (gcc, gcc-14, x86_64-linux-gnu-gcc-14).
    local cands=("${text%% *}")
    if [ "$(_kconfig_value "$config" CC_IS_CLANG)" = y ]; then
        major=$(_kconfig_value "$config" CLANG_VERSION)
        major=${major%????}
        cands=(clang ${major:+"clang-$major"})
    fi
    for cand in "${cands[@]}"; do
        got=$("$@" "$cand" --version 2>/dev/null | head -1) || got=''
        answers+=("$cand: ${got:-not found}")
        [ "$got" = "$text" ] || continue
        if [ "$(_kconfig_value "$config" CC_IS_CLANG)" != y ]; then
            echo "CC=$cand"
        elif [ "$(_kconfig_value "$config" LD_IS_LLD)" != y ]; then
            echo "CC=$cand"
        elif [ "$cand" = clang ]; then
            echo "LLVM=1"
        else
            echo "LLVM=-$major"
        fi
        return 0
    done
    printf '%s\n' "${answers[@]}" >&2
    return 1
}

chroot_netkit_tools_missing() {
    local root=$1 status=0
    [ -x "$root/usr/bin/clang" ] || { echo clang; status=1; }
    [ -e "$root/usr/include/bpf/bpf_helpers.h" ] || { echo libbpf-dev; status=1; }
    [ -x "$root/usr/sbin/bpftool" ] || { echo bpftool; status=1; }
    [ -x "$root/usr/bin/mount" ] || { echo mount; status=1; }
    return $status
}

# The guest's time limit. What the cases take under QEMU/TCG on this project's 2-core machines
# (the per-case times a run prints, "[N s]" on each case line): on an idle host the suite's
# guest takes about 290 s, most cases 1-10 s; the kernel harness cases far more. A loaded host
# (load 10-15 from parallel builds and other guests) stretches each of them 5-10 times. Each
# case's budget, those loaded-host times with room to spare, is in its row of the guest's case
# table (vm_guest --list); the boot, the module loads and the guest's exit get VM_BASE_BUDGET.
VM_BASE_BUDGET=300
vm_time_limit() {
    local name budget state about total=$VM_BASE_BUDGET
    while IFS=$'\t' read -r name budget state about; do
        [ -n "$name" ] && [ "$state" = run ] || continue
        case $budget in
        '' | *[!0-9]*)
            echo "vm_time_limit: case $name has no budget in seconds: '$budget'" >&2
            return 1
            ;;
        esac
        total=$((total + budget))
    done
    echo "$total"
}

vm_timeout_failure() {
    local limit=$1 how=$2 selected=$3
    awk -v limit="$limit" -v how="$how" -v selected="$selected" '
        /^vm-guest: running / { running = substr($0, 19); next }
        /^(ok|FAIL|skip|miss) / {
            name = $2
            sub(/:$/, "", name)
            done++
            if (name == running) running = ""
        }
        END {
            if (running != "")
                where = "case " running " was running (" done " of " selected " cases done)"
            else if (done == 0)
                where = "no case had started (boot, module loading or the guest program start)"
            else
                where = "no case was running (" done " of " selected " cases done; the next had not started)"
            printf "vm: FAIL: the guest did not finish within %s s (%s): %s; raise the limit with NCDEVMEM_VM_TIMEOUT=SECS (or --timeout SECS)\n", limit, how, where
        }'
}
