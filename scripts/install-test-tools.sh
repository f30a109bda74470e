#!/usr/bin/env bash
# Makes sure the tools the test suites need are present, so that `make test` runs every suite
# instead of passing with one skipped: the pytest module for $PYTHON (the py/ harness tests),
# socat (the harness's socat peer path), iproute2's ip (namespace tests) and ethtool (the kernel's
# own iou-zcrx.py, run by py/tests/test_kernel_tree.py, calls it first). Installs what is
# missing when run as root (apt for Debian's own python3 and for the tools, pip for any other
# python); otherwise, or when an install fails, exits 1 naming what is missing and how to
# install it. Does nothing when everything is there.
#
# usage: scripts/install-test-tools.sh      env: PYTHON (default python3)
set -euo pipefail
python=${PYTHON:-python3}

has_pytest() { "$python" -c 'import pytest' >/dev/null 2>&1; }
missing_list() {
    local m=()
    has_pytest || m+=("the $python module pytest")
    command -v socat >/dev/null 2>&1 || m+=("socat")
    command -v ip >/dev/null 2>&1 || m+=("iproute2 (ip)")
    command -v ethtool >/dev/null 2>&1 || m+=("ethtool")
    ((${#m[@]} == 0)) || printf '%s\n' "${m[@]}"
}
fail() {
    echo "test-tools: FAIL: missing $(missing_list | paste -sd, - | sed 's/,/, /g')$1" >&2
    echo "test-tools: install them (as root: apt-get install python3-pytest socat iproute2 ethtool, or" \
        "$python -m pip install pytest) or run 'make test' as root, which installs them" >&2
    exit 1
}

command -v "$python" >/dev/null 2>&1 || {
    echo "test-tools: FAIL: no $python (set PYTHON to a python3 interpreter)" >&2
    exit 1
}
[ -z "$(missing_list)" ] && exit 0
[ "$(id -u)" = 0 ] || fail " (not root, so nothing was installed)"

apt_pkgs=()
command -v socat >/dev/null 2>&1 || apt_pkgs+=(socat)
command -v ip >/dev/null 2>&1 || apt_pkgs+=(iproute2)
command -v ethtool >/dev/null 2>&1 || apt_pkgs+=(ethtool)
# Debian's own interpreter takes Debian's package (pip refuses to change it, PEP 668); any
# other interpreter (a venv, pyenv) gets pytest from pip.
system_python=0
[ "$("$python" -c 'import sys; print(sys.prefix)')" = /usr ] && system_python=1
if ! has_pytest && ((system_python)); then
    apt_pkgs+=(python3-pytest)
fi
echo "test-tools: installing $(missing_list | paste -sd, - | sed 's/,/, /g')" >&2
if ((${#apt_pkgs[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || fail " (apt-get update failed)"
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
        "${apt_pkgs[@]}" >/dev/null ||
        fail " (apt-get install ${apt_pkgs[*]} failed)"
fi
if ! has_pytest && ((system_python == 0)); then
    "$python" -m pip install -q pytest || fail " ($python -m pip install pytest failed)"
fi
[ -z "$(missing_list)" ] || fail " after installing"
echo "test-tools: pytest $("$python" -c 'import pytest; print(pytest.__version__)'), $(socat -V 2>/dev/null | sed -n 's/^socat version \([^ ]*\).*/socat \1/p' | head -1)" >&2
