#!/usr/bin/env bash
# Request latency with the access log off, writing to a file, and writing to a FIFO that
# is open but never read (a stalled sink: a full disk, a syslog gone): a stalled sink must
# cost dropped lines, counted, and never a request's time (issue 47: p99 within 10 %).
#
#   bench/access-log-stall.sh [SHUCK] [SHUCK_BENCH] [SECONDS]   (defaults: target/release/..., 10)
#
# shuck runs with one worker in --http mode on CPU 0; shuck-bench load and its origin on
# CPU 1: an open loop of 200 new TLS sessions a second, 100 keep-alive HTTP/1.1 requests
# each (20 000 requests a second, well below what one core serves, so that latency is the
# requests' own and not a queue's). Each mode is run three times, in turn; the table has
# each run's requests, p50 and p99.
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
seconds=${3:-10}
# shellcheck source=bench/lib.sh
. bench/lib.sh
origin_and_cert
mkfifo "$work/fifo"
# Our own read end, never read from: the FIFO has a reader, so shuck's writes fill its
# 64 KiB and then block.
exec 3<>"$work/fifo"

# One run of mode $1; prints "requests p50 p99 dropped".
run() {
    local args=() port pid stats
    case $1 in
        off) ;;
        file) args=(--access-log "$work/access.log" --access-log-format json) ;;
        stalled) args=(--access-log "$work/fifo" --access-log-format json) ;;
    esac
    port=$(free_port)
    stats=$(free_port)
    taskset -c 0 "$shuck" -n 1 --http -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q \
        --stats "$stats" "${args[@]}" "$pem" 2>"$work/shuck.log" &
    pid=$!
    wait_port "$port"
    taskset -c 1 "$bench" load --target "127.0.0.1:$port" --rate 200 \
        --requests-per-conn 100 --duration "$seconds" --timeout 30 --json >"$work/load.json"
    local dropped
    dropped=$(curl -s "http://127.0.0.1:$stats/metrics" |
        awk '/^shuck_access_log_dropped_total/ { print $2 }')
    kill -TERM "$pid"
    wait "$pid" || true
    python3 - "$work/load.json" "${dropped:-0}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r["failures"]:
    sys.exit(f"the load run failed: {r}")
l = r["request_ms"]
print(r["requests"], f'{l["p50"]:.3f}', f'{l["p99"]:.3f}', sys.argv[2])
PY
}

echo "| mode | run | requests | p50 ms | p99 ms | lines dropped |"
echo "|---|---:|---:|---:|---:|---:|"
for round in 1 2 3; do
    for mode in off file stalled; do
        read -r n p50 p99 dropped <<<"$(run "$mode")"
        echo "| $mode | $round | $n | $p50 | $p99 | $dropped |"
    done
done
