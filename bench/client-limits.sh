#!/usr/bin/env bash
# What refusing a client over its limit costs the server (issue 48): shuck's
# --client-conn-rate against HAProxy's stick table (`tcp-request connection track-sc0 src`,
# `reject if { sc0_conn_rate gt 1 }`), both with one thread, the same client: one address
# opening connections as fast as two threads can (shuck-bench connect-load), every one past
# the first refused. Server CPU (user and system apart, the process and its children, from
# /proc) divided by the connections refused, two runs each; and the floor under both: a
# server that only accepts and resets (Python, so its user time is no measure; its system
# time is the kernel's share of a refused connection).
#
# Then what the flood costs everyone else: p99 session latency of a well-behaved client
# (127.0.0.1, 200 TLS sessions a second, one request each, under its limit of 300 new
# connections a second) alone and while 127.0.0.2 floods the same shuck past that limit
# from sixteen threads, each connect given 2 ms (its 300 a second let in, the rest
# refused): with --client-refuse reset, then drop. shuck runs on CPU 0, both clients on
# CPU 1, the flood's at nice 19: a flood comes from other machines, and its generator must
# not take the measuring client's CPU (without nice, on two cores, it does: RESULTS.md).
#
#   bench/client-limits.sh [SHUCK] [SHUCK_BENCH] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
secs=${3:-5}
command -v haproxy >/dev/null || { echo "haproxy is needed (apt-get install haproxy)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh
origin_and_cert
ticks=$(getconf CLK_TCK)

# User and system CPU microseconds of process $1 and its children so far.
cpu_us() {
    local u=0 s=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        read -r pu ps < <(awk '{print $14, $15}' "/proc/$p/stat")
        u=$((u + pu))
        s=$((s + ps))
    done
    echo "$((u * 1000000 / ticks)) $((s * 1000000 / ticks))"
}

# Loads the server $1 (pid) on port $2; prints "refused served failed user sys total" (the
# last three in CPU microseconds a refused connection). With DROPPED=1 the refusals are the
# connects given up on after 2 ms (SYNs the kernel dropped), from 16 threads.
measure() {
    local pid=$1 port=$2 u0 s0 u1 s1 refused served failed load=()
    [ -n "${DROPPED:-}" ] && load=(--connect-ms 2 --threads 16)
    "$bench" connect-load --addr "127.0.0.1:$port" --seconds 1 "${load[@]}" >/dev/null
    read -r u0 s0 <<<"$(cpu_us "$pid")"
    read -r refused served failed <<<"$("$bench" connect-load --addr "127.0.0.1:$port" --seconds "$secs" "${load[@]}")"
    read -r u1 s1 <<<"$(cpu_us "$pid")"
    [ -n "${DROPPED:-}" ] && refused=$failed
    python3 -c "n = max($refused, 1); u = ($u1 - $u0) / n; s = ($s1 - $s0) / n; print(f'$refused $served $failed {u:.2f} {s:.2f} {u + s:.2f}')"
}

# Waits for server $1 (pid $2) on port $3, measures it and stops it.
report() {
    wait_port "$3" || { cat "$work"/*.log >&2; exit 1; }
    printf '%-7s %s\n' "$1" "$(measure "$2" "$3")"
    kill "$2"
    wait "$2" 2>/dev/null || true
}

run_floor() {
    local port
    port=$(free_port)
    python3 -c '
import socket, struct, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(4096)
reset = struct.pack("ii", 1, 0)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
    c.close()
' "$port" &
    report floor $! "$port"
}

run_shuck() {
    local port
    port=$(free_port)
    "$shuck" -n 1 -q -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" \
        --client-conn-rate 1/m,burst=1 "$pem" 2>"$work/shuck.log" &
    report shuck $! "$port"
}

# The same with --client-refuse drop: past its first refusal, the client's SYNs are dropped
# by the kernel (its refusals: connects given up on after 2 ms).
run_shuck_drop() {
    local port
    port=$(free_port)
    "$shuck" -n 1 -q -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" --client-refuse drop \
        --client-conn-rate 1/m,burst=1 "$pem" 2>"$work/shuck.log" &
    DROPPED=1 report drop $! "$port"
}

run_haproxy() {
    local port
    port=$(free_port)
    cat >"$work/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 9500
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind 127.0.0.1:$port ssl crt $pem
    stick-table type ip size 100k expire 60s store conn_rate(60s)
    tcp-request connection track-sc0 src
    tcp-request connection reject if { sc0_conn_rate gt 1 }
    default_backend origin
backend origin
    server o 127.0.0.1:$oport
CFG
    haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
    report haproxy $! "$port"
}

# p99 session ms of 200 sessions/s from 127.0.0.1, with and without 127.0.0.2 flooding;
# $1: how refused clients are refused (--client-refuse).
run_neighbours() {
    local port pid quiet flood flooder
    port=$(free_port)
    taskset -c 0 "$shuck" -n 1 -q -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" \
        --client-conn-rate 300/s,burst=300 --client-refuse "$1" "$pem" 2>"$work/shuck.log" &
    pid=$!
    wait_port "$port"
    p99() { python3 -c 'import json,sys; print(json.load(sys.stdin)["session_ms"]["p99"])'; }
    quiet=$(taskset -c 1 "$bench" load --target "127.0.0.1:$port" --rate 200 --duration "$secs" --json | p99)
    taskset -c 1 nice -n 19 "$bench" connect-load --addr "127.0.0.1:$port" --from 127.0.0.2 --threads 16 \
        --connect-ms 2 --seconds "$((secs + 2))" >"$work/flood" &
    flooder=$!
    sleep 1
    flood=$(taskset -c 1 "$bench" load --target "127.0.0.1:$port" --rate 200 --duration "$secs" --json | p99)
    wait "$flooder"
    echo "$1: p99 ms alone $quiet, beside a flood $flood (flood: refused served failed $(cat "$work/flood"))"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

echo "server  refused served failed user_us sys_us total_us (a refusal; $(nproc) cores, ${secs} s a run, $(date -u +%F))"
for _ in 1 2; do
    run_shuck
    run_shuck_drop
    run_haproxy
    run_floor
done
for _ in 1 2; do
    run_neighbours reset
    run_neighbours drop
done
