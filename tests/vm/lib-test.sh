#!/usr/bin/env bash
# Tests of the shell helpers (make scripts-test): tests/vm/lib.sh (the Debian mirror taken from
# an apt configuration in both source formats, the cache location, the console filter),
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

# cargo's target directory, as cargo resolves it.
repo=$(cd "$here/../.." && pwd)
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

echo "lib-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
