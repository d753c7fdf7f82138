#!/usr/bin/env bash
# TCP segments per full TLS connection (one request), counted by the kernel: shuck, its
# origin and the load client run in a network namespace of their own, so that its loopback
# carries nothing else and nstat's TcpOutSegs is theirs alone. Like bench/syscalls.sh, the
# figure is the difference of two runs (sessions of one request for 4 s minus those of 1 s)
# divided by the difference in sessions, so that what is done once cancels. It counts every
# segment on the namespace's loopback: client -> shuck, shuck -> client, shuck -> origin and
# origin -> shuck (data, ACKs, SYNs and FINs).
#
#   bench/packets.sh [SHUCK] [SHUCK_BENCH]     (defaults: target/release/...; run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=$(realpath "${1:-target/release/shuck}")
bench=$(realpath "${2:-target/release/shuck-bench}")
command -v nstat >/dev/null || { echo "nstat is needed (apt-get install iproute2)" >&2; exit 1; }
ns="shuck-packets-$$"
work=$(mktemp -d)
ip netns add "$ns"
cleanup() {
    # Every process in the namespace is ours: end them by pid, then the namespace.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up

# shellcheck source=bench/lib.sh
. bench/lib.sh
make_cert "$work"
oport=18000
port=18443
in_ns "$bench" origin --listen "127.0.0.1:$oport" >/dev/null 2>&1 &
in_ns "$shuck" -n 1 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q ${SHUCK_ARGS:-} "$pem" 2>"$work/shuck.log" &
for _ in $(seq 1 100); do
    in_ns bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && break
    sleep 0.1
done

# Segments sent while shuck-bench loads for $1 seconds: "SEGMENTS SESSIONS".
count() {
    in_ns nstat -n >/dev/null
    in_ns "$bench" load --target "127.0.0.1:$port" --concurrency 1 --timeout 120 --json --duration "$1" >"$work/load.json"
    local segs
    segs=$(in_ns nstat -az TcpOutSegs | awk '/TcpOutSegs/ { print $2 }')
    python3 - "$work/load.json" "$segs" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r["failures"] or r["completed"] != r["attempted"] or not r["completed"]:
    sys.exit(f"the load run failed: {r}")
print(sys.argv[2], r["completed"])
PY
}

read -r s1 n1 <<<"$(count 1)"
read -r s4 n4 <<<"$(count 4)"
python3 -c "print(f'segments per connection: {($s4 - $s1) / ($n4 - $n1):.1f} ({$n4 - $n1} sessions; all four directions)')"
