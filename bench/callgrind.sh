#!/usr/bin/env bash
# Instructions shuck executes per keep-alive request and per full handshake, counted by
# callgrind (steady from run to run, unlike time on a shared machine).
#
#   bench/callgrind.sh [SHUCK] [SHUCK_BENCH]     (defaults: target/release/...)
#   SHUCK_ARGS="--http" bench/callgrind.sh       (the same, with more shuck flags)
#   ROUTES=10000 bench/callgrind.sh              (N server-name routes to a named backend,
#                                                 the origin; the client asks for one of them)
#   ROUTES=0 bench/callgrind.sh                  (the same client, no route: the baseline)
#   QUIC=1 bench/callgrind.sh                    (a full QUIC handshake and one HTTP/3
#                                                 request a connection instead, one at a
#                                                 time; no keep-alive figure)
#
# Each figure is a difference of two runs with fixed work, so start-up and shutdown cancel:
#   keep-alive: one session of 4,500 requests minus one of 500, divided by 4,000;
#   handshake:  sessions of one request for 8 s minus those of 2 s, divided by the
#               difference in sessions (TLS 1.3, ECDSA P-256 self-signed certificate, no
#               resumption; connect, one request and close included).
# shuck runs with one worker; the origin (shuck-bench origin) runs outside valgrind. The
# instructions of aws-lc's start-up entropy (jitterentropy) are left out: their number
# changes from run to run.
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh
origin_and_cert
# With ROUTES=N: every connection asks for www.example.com; a configuration file routes N
# names (www.example.com among them) to a named backend that is the origin. N=0: no file.
routes=()
load_sni=()
if [ -n "${ROUTES:-}" ]; then
    load_sni=(--sni www.example.com)
    if [ "$ROUTES" -gt 0 ]; then
        {
            echo "backend = { name = \"web\" server = \"[127.0.0.1]:$oport\" }"
            for i in $(seq 2 "$ROUTES"); do
                echo "route = { sni = \"h$i.example.com\" backend = \"web\" }"
            done
            echo "route = { sni = \"www.example.com\" backend = \"web\" }"
        } >"$work/routes.conf"
        routes=(--config "$work/routes.conf")
    fi
fi

# Runs shuck under callgrind while shuck-bench does "$@"; prints the instructions counted,
# the sessions completed and the requests answered.
count() {
    local port pid out
    port=$(free_port)
    # One file per process (%p): the master and the worker it forks (and, with ACME, the
    # client) each write their own; the counts are summed, and the master's cancel out.
    out="$work/cg.out"
    rm -f "$out".*
    valgrind --tool=callgrind --callgrind-out-file="$out.%p" \
        "$shuck" -n 1 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q $(quic_args) ${SHUCK_ARGS:-} "${routes[@]}" "$pem" 2>"$work/vg.log" &
    pid=$!
    wait_port "$port"
    load_json "$work/load.json" "$@" "${load_sni[@]}"
    kill -TERM "$pid"
    wait "$pid" || true
    local done
    done=$(python3 - "$work/load.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r["failures"] or r["completed"] != r["attempted"] or not r["completed"]:
    sys.exit(f"the load run failed: {r}")
print(r["completed"], r["requests"])
PY
)
    # Less aws-lc's jitter entropy, which seeds its random generator at each start and
    # runs a random number of rounds (a million instructions either way, 300 a request).
    local total=0 f n jitter
    for f in "$out".*; do
        n=$(awk '/^(summary|totals):/ { print $2; exit }' "$f")
        jitter=$(callgrind_annotate --threshold=100 "$f" 2>/dev/null |
            awk '/jitterentropy/ { gsub(",", "", $1); j += $1 } END { printf "%.0f", j }')
        total=$((total + n - jitter))
    done
    echo "$total $done"
}

read -r hs1 hn1 _ <<<"$(count --duration 2 --requests-per-conn 1)"
read -r hs2 hn2 _ <<<"$(count --duration 8 --requests-per-conn 1)"
if [ -z "${QUIC:-}" ]; then
    # One session each: the loop starts one session and the deadline has passed when it ends.
    read -r ka1 _ kr1 <<<"$(count --duration 0.001 --requests-per-conn 500)"
    read -r ka2 _ kr2 <<<"$(count --duration 0.001 --requests-per-conn 4500)"
    echo "keep-alive request: $(( (ka2 - ka1) / (kr2 - kr1) )) instructions ($kr1 and $kr2 requests)"
fi
echo "full handshake:     $(( (hs2 - hs1) / (hn2 - hn1) )) instructions ($hn1 and $hn2 sessions)"
