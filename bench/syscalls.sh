#!/usr/bin/env bash
# System calls shuck's worker makes per full TLS connection (one request) and per keep-alive
# request, counted by strace (exact, unlike time), each a difference of two runs with fixed
# work so that what is done once cancels:
#   connection: sessions of one request for 4 s minus those of 1 s, divided by the
#               difference in sessions (TLS 1.3, ECDSA, no resumption; accept, handshake,
#               backend connect, request, close);
#   keep-alive: one session of 4,500 requests minus one of 500, divided by 4,000.
# Prints the totals and the calls by name per connection and per request.
#
#   bench/syscalls.sh [SHUCK] [SHUCK_BENCH]     (defaults: target/release/...)
#   SHUCK_ARGS="--http" bench/syscalls.sh       (the same, with more shuck flags)
#   QUIC=1 bench/syscalls.sh                     (a full QUIC handshake and one HTTP/3
#                                                 request a connection instead; no keep-alive)
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
command -v strace >/dev/null || { echo "strace is needed (apt-get install strace)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh
start_origin
make_cert "$work"
pids+=("$origin_pid")
port=$(free_port)
"$shuck" -n 1 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q $(quic_args) ${SHUCK_ARGS:-} "$pem" 2>"$work/shuck.log" &
master=$!
pids+=("$master")
wait_port "$port"
worker=$(pgrep -P "$master" | head -1)
[ -n "$worker" ] || { echo "no worker process" >&2; exit 1; }

# Counts the worker's calls while shuck-bench does "$@"; writes NAME COUNT lines to $1.
count() {
    local out=$1
    shift
    strace -f -c -o "$work/strace.txt" -p "$worker" 2>/dev/null &
    local st=$!
    sleep 0.5
    load_json "$work/load.json" "$@"
    kill -INT "$st"
    wait "$st" || true
    python3 - "$work/strace.txt" "$work/load.json" >"$out" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[2]))
if r["failures"] or r["completed"] != r["attempted"] or not r["completed"]:
    sys.exit(f"the load run failed: {r}")
print("_sessions", r["completed"])
print("_requests", r["requests"])
for line in open(sys.argv[1]):
    f = line.split()
    # % time, seconds, usecs/call, calls, [errors], syscall
    if len(f) >= 5 and re.match(r"^[0-9.]+$", f[0]) and f[-1] != "total":
        print(f[-1], f[3])
PY
}

# The difference of two counts, per unit (sessions or requests), by name.
per() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d[k] = int(v)
    return d
a, b, unit = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
n = b["_" + unit] - a["_" + unit]
names = sorted({k for k in a.keys() | b.keys() if not k.startswith("_")})
rows = [(k, (b.get(k, 0) - a.get(k, 0)) / n) for k in names]
rows = [(k, v) for k, v in rows if abs(v) >= 0.05]
total = sum(v for _, v in rows)
print(f"{total:.1f} per {unit[:-1]} ({n} {unit}): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(rows, key=lambda r: -r[1])))
PY
}

count "$work/c1" --duration 1 --requests-per-conn 1
count "$work/c2" --duration 4 --requests-per-conn 1
echo "connection: $(per "$work/c1" "$work/c2" sessions)"
[ -n "${QUIC:-}" ] && exit 0
count "$work/k1" --duration 0.001 --requests-per-conn 500
count "$work/k2" --duration 0.001 --requests-per-conn 4500
echo "keep-alive: $(per "$work/k1" "$work/k2" requests)"
