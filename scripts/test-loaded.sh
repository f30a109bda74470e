#!/usr/bin/env bash
# The test suite on a loaded machine (make test-loaded): busy loops beside it, so a test that
# passes only when the machine is idle fails here first. CI machines are loaded; a failure
# here is a test's (or the tool's) to fix, and tests/vm/FLAKES.md records each one.
#
# Starts BUSY busy loops (default: the online CPUs + 1, so the load average stays above the
# CPU count whatever the suite does; plain shell loops, nothing to install), records the load
# average (/proc/loadavg: 1, 5 and 15 minutes) at the start, every 60 s (printed as
# "test-loaded: [N s] load ...") and at the end, runs `make TARGETS` (default: test, the
# README's test command), stops the loops it started (by their process ids) and exits with
# make's status after one summary line:
#   test-loaded: make test beside 3 busy loops: exit 0 in 1834 s; load average at the start
#   0.52 (1 min), at the end 4.61; 1-minute load over the run min 3.02 median 4.88 max 6.40
#
# With --ci it runs .ci/run itself (CI's entry point: make test, then make vm-test-opt-in)
# instead of make.
#
# With LOAD=N it holds the load average at N or more instead of running a fixed number of
# loops: BUSY loops (default 1 with LOAD) always run, and once a second it counts the tasks
# the load average counts (/proc/stat: procs_running + procs_blocked, less its own loops and
# itself), smooths that count over a few seconds and starts or stops loops so that the
# total stays at N + 0.5, with at most N + 1 loops. A fixed number of loops leaves the load
# under N in the suite's quiet phases (the VM cases under TCG keep about 1.5 CPUs busy) and
# slows its busy ones more than needed. The summary line then gives the fewest and most
# loops that ran.
#
# usage: scripts/test-loaded.sh [--ci | TARGET...]     env: BUSY (busy loops), LOAD, MAKE
set -euo pipefail
cd "$(dirname "$0")/.."

hold=${LOAD:-}
case $hold in *[!0-9]*) echo "test-loaded: LOAD=$hold is not a whole number" >&2; exit 2 ;; esac
if [ -n "$hold" ]; then busy=${BUSY:-1}; else busy=${BUSY:-$(($(getconf _NPROCESSORS_ONLN) + 1))}; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test)
if [ "${targets[0]}" = --ci ]; then
    [ ${#targets[@]} -eq 1 ] || { echo "test-loaded: --ci takes no targets" >&2; exit 2; }
    cmd=(.ci/run)
    what=.ci/run
else
    cmd=("${MAKE:-make}" "${targets[@]}")
    what="make ${targets[*]}"
fi
case $busy in '' | *[!0-9]*) echo "test-loaded: BUSY=$busy is not a number" >&2; exit 2 ;; esac

loops=()
sampler=
keeper=
samples=$(mktemp)
counts=$(mktemp)
stop_all() {
    set +e
    [ -n "$keeper" ] && kill "$keeper" 2>/dev/null && wait "$keeper" 2>/dev/null
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
    for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${loops[@]}"; do wait "$pid" 2>/dev/null; done
    loops=()
    sampler=
    keeper=
    return 0
}
trap 'stop_all; rm -f "$samples" "$counts"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

load1() { cut -d' ' -f1 /proc/loadavg; }
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
start=$SECONDS
for ((i = 0; i < busy; i++)); do
    # A busy loop at normal priority: it competes with the suite for the CPUs.
    sh -c 'while :; do :; done' &
    loops+=($!)
done
if [ -n "$hold" ]; then
    (
        # The loops it adds are its own children: it stops them when it is stopped. No errexit
        # here: `wait` for a loop it stopped returns the loop's 143.
        set +e
        extra=()
        trap 'for p in "${extra[@]}"; do kill "$p" 2>/dev/null; done; exit 0' TERM
        most=$((hold + 1))
        smooth=$((busy * 100)) # the other tasks' count, in hundredths
        while :; do
            running=0 blocked=0
            while read -r key value _; do
                case $key in procs_running) running=$value ;; procs_blocked) blocked=$value ;; esac
            done </proc/stat
            have=$((busy + ${#extra[@]}))
            others=$((running + blocked - 1 - have))
            ((others >= 0)) || others=0
            smooth=$(((smooth * 6 + others * 100 * 4) / 10))
            want=$(((hold * 100 + 50 - smooth + 99) / 100))
            ((want >= busy)) || want=$busy
            ((want <= most)) || want=$most
            while ((busy + ${#extra[@]} < want)); do
                sh -c 'while :; do :; done' &
                extra+=($!)
            done
            while ((busy + ${#extra[@]} > want)); do
                kill "${extra[-1]}" 2>/dev/null
                wait "${extra[-1]}" 2>/dev/null
                unset 'extra[-1]'
            done
            echo "$want" >>"$counts"
            sleep 1
        done
    ) &
    keeper=$!
fi
(
    # Its sleep is killed with it, so nothing holds the output open after the end.
    nap=
    trap '[ -n "$nap" ] && kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
        sleep 60 &
        nap=$!
        wait "$nap"
        l=$(cut -d' ' -f1-3 /proc/loadavg)
        echo "${l%% *}" >>"$samples"
        echo "test-loaded: [$((SECONDS - start)) s] load $l${hold:+, $(tail -n 1 "$counts" 2>/dev/null) busy loops}"
    done
) &
sampler=$!
beside="$busy busy loops"
[ -z "$hold" ] || beside="$busy or more busy loops holding the load at $hold or more"
echo "test-loaded: $what beside $beside (pids ${loops[*]}); load average" \
    "at the start $start_load (1, 5, 15 min)"

rc=0
"${cmd[@]}" || rc=$?
end_load=$(cut -d' ' -f1-3 /proc/loadavg)
load1 >>"$samples"
stop_all
took=$((SECONDS - start))
if [ -n "$hold" ]; then
    beside="$(sort -n "$counts" | sed -n '1p;$p' | paste -sd- -) busy loops holding the load at $hold or more"
fi
stats=$(sort -g "$samples" | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "no samples"; exit }
    printf "min %s median %s max %s (%d samples)", v[1], v[int((NR + 1) / 2)], v[NR], NR }')
echo "test-loaded: $what beside $beside: exit $rc in $took s; load" \
    "average at the start ${start_load%% *} (1 min), at the end ${end_load%% *};" \
    "1-minute load over the run $stats"
exit "$rc"
