#!/usr/bin/env bash
# Sweep demo (the lab without a NIC): two network namespaces joined by a veth pair, the peer
# server (--peer-server) in one, a small plain-TCP sweep (--sweep flows=1,2, 3 runs of 2 s each,
# interleaved) in the other; the table, its JSON and a PNG plot. Then the same sweep once more
# and --compare of the two (a before/after of nothing: whatever it marks significant is this
# machine's noise), with its PNG. The namespaces are removed on every exit path; the files stay
# in OUT.
#
# usage: scripts/demo-sweep.sh [path/to/ncdevmem-rs] [OUT]   (root required)
# OUT defaults to <cargo target dir>/demo-sweep.
set -euo pipefail
BIN=${1:-$("$(dirname "$0")/target-dir.sh")/release/ncdevmem-rs}
OUT=${2:-$("$(dirname "$0")/target-dir.sh")/demo-sweep}
PORT=5201
CTRL=4343
A=ncdevmem-sweep-a-$$
B=ncdevmem-sweep-b-$$

[ "$(id -u)" = 0 ] || { echo "demo-sweep: needs root (creates network namespaces)" >&2; exit 4; }
[ -x "$BIN" ] || { echo "demo-sweep: $BIN not built; run 'make build'" >&2; exit 2; }
mkdir -p "$OUT"

peer=
cleanup() {
    set +e  # best effort: never change the script's exit status
    [ -n "$peer" ] && kill "$peer" 2>/dev/null && wait "$peer" 2>/dev/null
    ip netns pids "$A" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    return 0
}
trap cleanup EXIT
trap 'echo "demo-sweep: interrupted" >&2; exit 130' INT TERM

ip netns add "$A"
ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 198.51.100.1/24 dev va
ip -n "$B" addr add 198.51.100.2/24 dev vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set va up
ip -n "$B" link set vb up

# The peer server: the sender of every run, bounded to 10 minutes. `ip netns exec` execs the
# tool (no fork), so $! is its PID and the cleanup stops it.
ip netns exec "$B" "$BIN" --peer-server -s 198.51.100.2 -p "$CTRL" --max-duration 600 \
    2>"$OUT/peer.log" &
peer=$!
for _ in $(seq 100); do
    grep -q 'control on' "$OUT/peer.log" 2>/dev/null && break
    sleep 0.1
done

sweep() {  # sweep NAME: the sweep into OUT/NAME.{json,png}, its table on stdout
    echo "demo-sweep: $1: plain TCP, --sweep flows=1,2 --runs 3 --duration 2" >&2
    ip netns exec "$A" "$BIN" -l --plain -s 198.51.100.1 -p "$PORT" --seed 42 \
        --peer 198.51.100.2 --peer-port "$CTRL" --sweep flows=1,2 --runs 3 --duration 2 \
        --json "$OUT/$1.json" --plot "$OUT/$1.png"
}
sweep before
sweep after
echo "demo-sweep: --compare before.json after.json" >&2
"$BIN" --compare "$OUT/before.json" "$OUT/after.json" --plot "$OUT/compare.png" \
    --json "$OUT/compare.json"
echo "demo-sweep: files in $OUT: before.{json,png}, after.{json,png}, compare.{json,png}," \
    "peer.log" >&2
