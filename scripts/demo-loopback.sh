#!/usr/bin/env bash
# Loopback demo (manual loopback validation, no devmem needed): two network namespaces joined by
# a veth pair; the plain-TCP receiver validates a 1 GiB keyed stream (--seed, a random seed,
# printed) from the built-in sender byte for byte and prints its summary; both ends print the
# stream's CRC-32, which must agree. The namespaces are removed on every exit path.
#
# usage: scripts/demo-loopback.sh [path/to/ncdevmem-rs] [bytes]   (root required)
# env: NCDEVMEM_DEMO_SEED (the seed; default random)
set -euo pipefail
BIN=${1:-$("$(dirname "$0")/target-dir.sh")/release/ncdevmem-rs}
BYTES=${2:-1G}
PORT=5201
SEED=${NCDEVMEM_DEMO_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
A=ncdevmem-demo-a-$$
B=ncdevmem-demo-b-$$

[ "$(id -u)" = 0 ] || { echo "demo: needs root (creates network namespaces)" >&2; exit 4; }
[ -x "$BIN" ] || { echo "demo: $BIN not built; run 'make build'" >&2; exit 2; }

rx=
cleanup() {
    set +e  # best effort: never change the script's exit status
    [ -n "$rx" ] && kill "$rx" 2>/dev/null
    ip netns pids "$A" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    return 0
}
trap cleanup EXIT
trap 'echo "demo: interrupted" >&2; exit 130' INT TERM

ip netns add "$A"
ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 198.51.100.1/24 dev va
ip -n "$B" addr add 198.51.100.2/24 dev vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set va up
ip -n "$B" link set vb up

echo "demo: receiver in $A (198.51.100.1:$PORT), sender in $B, $BYTES bytes of the keyed stream" \
    "--seed $SEED" >&2
ip netns exec "$A" "$BIN" -l --plain -s 198.51.100.1 -p "$PORT" --seed "$SEED" --expect-bytes "$BYTES" \
    --timeout 20 &
rx=$!
# The receiver prints "listening" once bound; the sender also retries its connect until the timeout.
tx_rc=0
ip netns exec "$B" "$BIN" --send-pattern "$BYTES" -s 198.51.100.1 -p "$PORT" --seed "$SEED" --timeout 20 ||
    tx_rc=$?
rx_rc=0
wait "$rx" || rx_rc=$?
echo "demo: sender exit $tx_rc, receiver exit $rx_rc" >&2
exit $(( tx_rc != 0 ? tx_rc : rx_rc ))
