#!/usr/bin/env bash
# Server CPU time per full handshake for two shuck builds, alternated A B B A A B B A so that
# the machine's drift falls on both alike (one worker on CPU 0, the client on CPU 1).
#
#   bench/handshake-ab.sh OLD_SHUCK NEW_SHUCK          (QUIC: h3-load --handshakes)
#   MODE=tcp bench/handshake-ab.sh OLD_SHUCK NEW_SHUCK (TCP + TLS 1.3: load --reuse never)
#
# Each run: 10 clients at a time for 5 s, one request a connection, the suite QUIC starts
# with (TLS_AES_128_GCM_SHA256) for both protocols; prints µs of the worker's CPU (user +
# system, /proc) per handshake completed, then each build's mean.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 OLD_SHUCK NEW_SHUCK" >&2; exit 2; }
bench=${SHUCK_BENCH:-target/release/shuck-bench}
# shellcheck source=bench/lib.sh
. bench/lib.sh
origin_and_cert
ticks=$(getconf CLK_TCK)

# µs of worker CPU per handshake for shuck binary $1.
run() {
    local port pid worker t0 t1 n
    port=$(free_port)
    taskset -c 0 "$1" -n 1 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q --http --quic \
        --ciphersuites TLS_AES_128_GCM_SHA256 "$pem" &
    pid=$!
    wait_port "$port"
    worker=$(pgrep -P "$pid" | head -1)
    t0=$(awk '{ print $14 + $15 }' "/proc/$worker/stat")
    if [ "${MODE:-quic}" = tcp ]; then
        n=$(taskset -c 1 "$bench" load --target "127.0.0.1:$port" --concurrency 10 --duration 5 \
            --reuse never --tls 1.3 --json |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["completed"])')
    else
        n=$(taskset -c 1 "$bench" h3-load --addr "127.0.0.1:$port" --connections 10 --streams 1 \
            --handshakes --duration 5 | awk '{ print $1 }')
    fi
    t1=$(awk '{ print $14 + $15 }' "/proc/$worker/stat")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    [ "$n" -gt 0 ] || { echo "no handshake completed" >&2; exit 1; }
    echo $(((t1 - t0) * 1000000 / ticks / n))
}

declare -A sum=([A]=0 [B]=0)
for side in A B B A A B B A; do
    bin=$1
    [ "$side" = B ] && bin=$2
    us=$(run "$bin")
    echo "$side $us"
    sum[$side]=$((sum[$side] + us))
done
echo "mean µs per handshake: A $((sum[A] / 4)), B $((sum[B] / 4))"
