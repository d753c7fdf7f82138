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
# µs of worker CPU per handshake for shuck binary $1.
run() {
    local us
    start_shuck_pinned "$1"
    us=$(handshake_cpu "$worker" "$port" "${MODE:-quic}") || { kill "$pid"; exit 1; }
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "$us"
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
