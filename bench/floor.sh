#!/usr/bin/env bash
# A full QUIC handshake's server CPU against a full TCP + TLS 1.3 one, for shuck and for the
# floor under it: `shuck-bench floor-server`, the same libraries (quinn, h3, rustls,
# tokio-rustls) answering 200 themselves, with no gateway and no backend. The ratio the
# floor shows is the transport libraries' own; shuck's cannot fall below it by work above
# them.
#
#   bench/floor.sh [SHUCK]      (default target/release/shuck)
#
# One server at a time on CPU 0, the client on CPU 1; the five runs (floor QUIC with HTTP/3,
# floor QUIC alone: a stream a request, `h3-load --raw`; floor TCP, shuck QUIC, shuck TCP)
# rotate four times so that the machine's drift falls on all alike. Each run: 10 clients at a time for 5 s, one request a connection, the suite QUIC
# starts with (TLS_AES_128_GCM_SHA256); µs of the server's CPU (user + system, /proc) per
# handshake completed. Prints each run, then the means and the two ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${SHUCK_BENCH:-target/release/shuck-bench}
# shellcheck source=bench/lib.sh
. bench/lib.sh
origin_and_cert
# µs of server CPU per handshake: $1 floor|shuck, $2 quic|raw|tcp.
run() {
    local us
    if [ "$1" = floor ]; then
        port=$(free_port)
        taskset -c 0 "$bench" floor-server --listen "127.0.0.1:$port" --cert "$pem" &
        pid=$!
        wait_port "$port"
        worker=$pid
    else
        start_shuck_pinned "$shuck"
    fi
    us=$(handshake_cpu "$worker" "$port" "$2") || { kill "$pid"; exit 1; }
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "$us"
}

declare -A sum=([floor_quic]=0 [floor_raw]=0 [floor_tcp]=0 [shuck_quic]=0 [shuck_tcp]=0)
order=(floor_quic floor_raw floor_tcp shuck_quic shuck_tcp)
for round in 0 1 2 3; do
    for i in 0 1 2 3 4; do
        what=${order[$(((i + round) % 5))]}
        us=$(run "${what%_*}" "${what#*_}")
        echo "$what $us"
        sum[$what]=$((sum[$what] + us))
    done
done
for what in "${order[@]}"; do
    echo "mean $what: $((sum[$what] / 4)) µs per handshake"
done
python3 -c "
import sys
fq, fr, ft, sq, st = (int(x) for x in sys.argv[1:])
print(f'QUIC / TCP: floor {fq / ft:.2f}x (QUIC without HTTP/3: {fr / ft:.2f}x), shuck {sq / st:.2f}x')
" "${sum[floor_quic]}" "${sum[floor_raw]}" "${sum[floor_tcp]}" "${sum[shuck_quic]}" "${sum[shuck_tcp]}"
