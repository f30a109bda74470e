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
