#!/usr/bin/env bash
# Instructions the HTTP/2 gateway executes per request, counted by callgrind over the
# worker's task polls only (tokio's LocalSet ticks: no start-up, no aws-lc entropy).
#
#   bench/callgrind-h2.sh [SHUCK] [SHUCK_BENCH] [SIZE]   (defaults: target/release/..., 0)
#   SHUCK_ARGS="--access-log F" bench/callgrind-h2.sh    (the same, with more shuck flags)
#   H2C=1 bench/callgrind-h2.sh                          (to an HTTP/2 origin: proto = h2)
#
# The figure is a difference of two runs with fixed work, so the handshakes cancel:
# h2load with 10 connections of 10 streams each, 12 000 requests minus 2 000, divided by
# 10 000. shuck runs with one worker in --http mode; the origin (shuck-bench origin, GET /N
# answers N bytes) runs outside valgrind. Needs valgrind and h2load (nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
size=${3:-0}
for tool in valgrind h2load; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
. bench/lib.sh
[ -n "${H2C:-}" ] && ORIGIN_ARGS=--h2c
origin_and_cert
to=()
[ -n "${H2C:-}" ] && to=(--named-backend "name=h2c;server=[127.0.0.1]:$oport;proto=h2"
    --route "host=127.0.0.1;backend=h2c")

# Runs shuck under callgrind while h2load makes $1 requests; prints the instructions.
count() {
    local port pid out total=0 f n
    port=$(free_port)
    out="$work/cg.out"
    rm -f "$out".*
    valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='tokio::task::local::LocalSet::tick' \
        --callgrind-out-file="$out.%p" \
        "$shuck" -n 1 --http -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q "${to[@]}" ${SHUCK_ARGS:-} "$pem" \
        2>"$work/vg.log" &
    pid=$!
    wait_port "$port"
    h2load -c 10 -m 10 -n "$1" "https://127.0.0.1:$port/$size" >"$work/h2load.log"
    if ! grep -q "$1 succeeded" "$work/h2load.log"; then
        # Not left running under valgrind: the exit trap ends only the origin.
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" || true
        cat "$work/h2load.log" "$work/vg.log" >&2
        exit 1
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    for f in "$out".*; do
        n=$(awk '/^(summary|totals):/ { print $2; exit }' "$f")
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

small=$(count 2000)
large=$(count 12000)
echo "HTTP/2 request ($size-byte answers): $(( (large - small) / 10000 )) instructions"
