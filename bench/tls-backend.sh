#!/usr/bin/env bash
# TLS to the backend: server CPU per client connection (full client handshake, one request,
# close) when the terminator re-encrypts to a TLS origin it verifies, for shuck (a backend
# block with tls = on), HAProxy (server ... ssl verify required, its ssl-reuse on by
# default) and nginx's stream module (proxy_ssl_verify on, proxy_ssl_session_reuse on).
#
#   bench/tls-backend.sh [SHUCK] [SHUCK_BENCH] [SECONDS] [ROUNDS]
#                                              (defaults: target/release/..., 5, 3)
#
# Each server runs one worker on CPU 0; the origin (nginx serving TLS 1.2 and 1.3 for origin.test,
# with a certificate from a CA of this run) and the load (shuck-bench load, 16 connections
# at a time, no client resumption) share CPU 1. CPU is each server's own processes' time
# on CPU (/proc/PID/task/*/schedstat, nanoseconds) over the run, divided by the connections
# completed. Rounds alternate the servers. Needs haproxy, nginx with its stream module,
# openssl and taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
shuck=${1:-target/release/shuck}
bench=${2:-target/release/shuck-bench}
secs=${3:-5}
rounds=${4:-3}
for tool in haproxy nginx openssl taskset; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
. bench/lib.sh
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
make_cert "$work"

# The origin's CA and certificate for origin.test.
(
    cd "$work"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=bench-ca -addext basicConstraints=critical,CA:true \
        -addext keyUsage=critical,keyCertSign -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=origin.test \
        -keyout origin.key -out origin.csr 2>/dev/null
    printf 'subjectAltName=DNS:origin.test\nextendedKeyUsage=serverAuth\n' >origin.ext
    openssl x509 -req -in origin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile origin.ext -out origin.crt 2>/dev/null
)
oport=$(free_port)
mkdir -p "$work/origin"
cat >"$work/origin/nginx.conf" <<EOF
daemon off;
master_process off;
worker_rlimit_nofile 65536;
pid $work/origin/nginx.pid;
error_log $work/origin/error.log error;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path $work/origin; proxy_temp_path $work/origin;
    fastcgi_temp_path $work/origin; uwsgi_temp_path $work/origin; scgi_temp_path $work/origin;
    server {
        listen 127.0.0.1:$oport ssl;
        ssl_certificate $work/origin.crt;
        ssl_certificate_key $work/origin.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:O:20m;
        ssl_session_tickets on;
        location / { return 200 ""; }
    }
}
EOF
taskset -c 1 nginx -c "$work/origin/nginx.conf" -e "$work/origin/error.log" &
pids+=($!)
wait_port "$oport"

# Starts server $1 on a free port, pinned to CPU 0; sets port and spid.
start() {
    port=$(free_port)
    case $1 in
    shuck)
        taskset -c 0 "$shuck" -n 1 -q -f "[127.0.0.1]:$port;backend=origin" \
            --named-backend "name=origin;server=[127.0.0.1]:$oport;tls=on;ca-file=$work/ca.crt;sni=origin.test" \
            --backend-connect-timeout 5 "$pem" &
        ;;
    haproxy)
        cat >"$work/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 9500
    tune.ssl.cachesize 20000
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend tls
    bind 127.0.0.1:$port ssl crt $pem
    default_backend origin
backend origin
    server origin 127.0.0.1:$oport ssl verify required ca-file $work/ca.crt sni str(origin.test) verifyhost origin.test
EOF
        taskset -c 0 haproxy -f "$work/haproxy.cfg" &
        ;;
    nginx)
        mkdir -p "$work/peer"
        cat >"$work/peer/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65536;
pid $work/peer/nginx.pid;
error_log $work/peer/error.log error;
events { worker_connections 16384; }
stream {
    server {
        listen 127.0.0.1:$port ssl backlog=4096;
        ssl_certificate $pem;
        ssl_certificate_key $pem;
        ssl_session_cache shared:SSL:20m;
        proxy_pass 127.0.0.1:$oport;
        proxy_ssl on;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate $work/ca.crt;
        proxy_ssl_name origin.test;
        proxy_ssl_server_name on;
        proxy_ssl_session_reuse on;
        proxy_ssl_protocols TLSv1.2 TLSv1.3;
    }
}
EOF
        taskset -c 0 nginx -c "$work/peer/nginx.conf" -e "$work/peer/error.log" &
        ;;
    esac
    spid=$!
    pids+=("$spid")
    wait_port "$port"
}

# Nanoseconds on CPU of process $1 and its children (shuck's worker, nginx's worker).
cpu_ns() {
    local total=0 p t
    for p in $1 $(pgrep -P "$1" || true); do
        for t in /proc/"$p"/task/*/schedstat; do
            [ -r "$t" ] && total=$((total + $(cut -d' ' -f1 "$t")))
        done
    done
    echo "$total"
}

# One run of server $1: prints µs of server CPU per connection and connections per second.
run() {
    start "$1"
    # Warm: the first connections fill the servers' backend session caches.
    "$bench" load --target "127.0.0.1:$port" --concurrency 4 --duration 1 --requests-per-conn 1 \
        --json >/dev/null
    local before after
    before=$(cpu_ns "$spid")
    taskset -c 1 "$bench" load --target "127.0.0.1:$port" --concurrency 16 --duration "$secs" \
        --requests-per-conn 1 --json >"$work/load.json"
    after=$(cpu_ns "$spid")
    kill -TERM "$spid"
    wait "$spid" 2>/dev/null || true
    python3 - "$work/load.json" "$before" "$after" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r["failures"] or not r["completed"]:
    sys.exit(f"{sys.argv[4]}: the load run failed: {r['failures']}")
us = (int(sys.argv[3]) - int(sys.argv[2])) / 1000 / r["completed"]
print(f"{sys.argv[4]:8} {us:8.1f} us/connection  {r['conns_per_s']:8.0f} connections/s")
PY
}

for _ in $(seq 1 "$rounds"); do
    for s in shuck haproxy nginx; do
        run "$s"
    done
done
