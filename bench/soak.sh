#!/bin/sh
# A soak: shuck under a moderate, steady mix of traffic for a long time, reloaded every
# minute, its memory sampled every 10 s. It passes when no connection failed; the RSS
# series (bench/results/soak-*.tsv) shows whether memory is flat after warm-up.
#
#   cargo build --release -p shuck -p shuck-bench && bench/soak.sh [SECONDS]   (default 1800)
#
# The traffic, three shuck-bench loads at once, all on loopback:
#   - TLS 1.3, 20 sessions/s, one in two resumed by ticket, 8 keep-alive requests of 4 KB;
#   - TLS 1.2, 10 sessions/s, one in two resumed by session ID, 2 requests each;
#   - 1 session/s fetching 1 MB twice.
# Every process this script starts is ended by its PID when it stops, however it stops.
set -eu

duration=${1:-1800}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
out=$root/bench/results
[ -x "$bin/shuck" ] && [ -x "$bin/shuck-bench" ] || {
    echo "soak: build first: cargo build --release -p shuck -p shuck-bench" >&2
    exit 2
}
mkdir -p "$out"
work=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Ports from the kernel's ephemeral range would race other programs; these are fixed and
# checked free.
origin_port=18700
port=18743
for p in $origin_port $port; do
    if ss -ltn "sport = :$p" | grep -q LISTEN; then
        echo "soak: port $p is in use" >&2
        exit 2
    fi
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat "$work/cert.pem" "$work/key.pem" >"$work/shuck.pem"

"$bin/shuck-bench" origin --listen "127.0.0.1:$origin_port" >"$work/origin.log" 2>&1 &
pids="$pids $!"
"$bin/shuck" -n 2 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$origin_port" \
    --pem-file "$work/shuck.pem" >"$work/shuck.log" 2>&1 &
master=$!
pids="$pids $master"

i=0
until ss -ltn "sport = :$port" | grep -q LISTEN; do
    i=$((i + 1))
    [ $i -lt 100 ] || { echo "soak: shuck did not start" >&2; cat "$work/shuck.log" >&2; exit 1; }
    sleep 0.1
done

load() {
    name=$1
    shift
    "$bin/shuck-bench" load --json --target "127.0.0.1:$port" --duration "$duration" \
        --timeout 10 "$@" >"$work/$name.json" 2>"$work/$name.err" &
    pids="$pids $!"
}
load tls13-keepalive --tls 1.3 --rate 20 --reuse every:2 --requests-per-conn 8 --size 4k
load tls12-session-id --tls 1.2 --resume-by id --rate 10 --reuse every:2 --requests-per-conn 2
load transfer-1m --rate 1 --requests-per-conn 2 --size 1m

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
workers() { cat /proc/"$master"/task/*/children 2>/dev/null; }

stamp=$(date -u +%Y%m%dT%H%M%SZ)
series=$out/soak-$stamp.tsv
printf 'seconds\tmaster_rss_kb\tworker_rss_kb\treloads\n' >"$series"
start=$(date +%s)
reloads=0
next_reload=$((start + 60))
while :; do
    now=$(date +%s)
    elapsed=$((now - start))
    [ $elapsed -le "$duration" ] || break
    kill -0 "$master" 2>/dev/null || { echo "soak: shuck exited" >&2; cat "$work/shuck.log" >&2; exit 1; }
    w=0
    for p in $(workers); do w=$((w + $(rss_kb "$p"))); done
    printf '%s\t%s\t%s\t%s\n' "$elapsed" "$(rss_kb "$master")" "$w" "$reloads" >>"$series"
    if [ "$now" -ge $next_reload ]; then
        kill -HUP "$master"
        reloads=$((reloads + 1))
        next_reload=$((next_reload + 60))
    fi
    sleep 10
done
# The loads end on their own at $duration; give them their timeout to finish.
for name in tls13-keepalive tls12-session-id transfer-1m; do
    i=0
    while [ ! -s "$work/$name.json" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
done

failed=0
for name in tls13-keepalive tls12-session-id transfer-1m; do
    if [ ! -s "$work/$name.json" ]; then
        echo "soak: $name gave no report:" >&2
        cat "$work/$name.err" >&2
        failed=1
        continue
    fi
    cp "$work/$name.json" "$out/soak-$stamp-$name.json"
    python3 - "$work/$name.json" "$name" <<'EOF' || failed=1
import json, sys
r = json.load(open(sys.argv[1]))
bad = {k: v for k, v in r["failures"].items() if v}
print(f"{sys.argv[2]:18} completed {r['completed']:7} requests {r['requests']:8} "
      f"resumed {100 * r['resumed_share']:5.1f} %  p99 handshake {r['handshake_ms']['p99']:.1f} ms  "
      f"failures {bad or 0}")
sys.exit(1 if bad else 0)
EOF
done
python3 - "$series" <<'EOF'
import sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n")[1:] if l]
w = [int(r[2]) for r in rows]
m = [int(r[1]) for r in rows]
warm = [x for r, x in zip(rows, w) if int(r[0]) >= 120] or w
print(f"samples {len(rows)}, reloads {rows[-1][3]}")
print(f"worker RSS KB: first {w[0]}, after warm-up (2 min) min {min(warm)} max {max(warm)} last {w[-1]}")
print(f"master RSS KB: min {min(m)} max {max(m)}")
EOF
grep -c 'reload' "$work/shuck.log" | sed 's/^/shuck log lines mentioning reload: /'
echo "series: $series"
exit $failed
