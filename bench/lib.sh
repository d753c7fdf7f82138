# Helpers the measuring scripts of bench/ share (sourced, not run): a free loopback port,
# waiting until something listens on one, shuck-bench's origin started on one, and a
# certificate for shuck.

# A TCP port nothing listens on now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to a minute for a listener on 127.0.0.1:$1.
wait_port() {
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

# Starts "$bench" origin on a free port (ORIGIN_ARGS=--h2c: the HTTP/2 one); sets oport and
# origin_pid.
start_origin() {
    oport=$(free_port)
    # shellcheck disable=SC2086
    "$bench" origin --listen "127.0.0.1:$oport" ${ORIGIN_ARGS:-} >/dev/null 2>&1 &
    origin_pid=$!
    wait_port "$oport"
}

# Writes an ECDSA P-256 certificate for localhost with its key to $1/shuck.pem (the key
# type of the self-signed default) and sets pem; shuck needs one in front of a backend.
make_cert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
    cat "$1/cert.pem" "$1/key.pem" >"$1/shuck.pem"
    chmod 600 "$1/shuck.pem"
    pem="$1/shuck.pem"
}

# A scratch directory removed at exit, "$bench" origin and a certificate in it, stopped at
# exit: what the callgrind scripts start from. Sets work, oport, origin_pid and pem.
origin_and_cert() {
    work=$(mktemp -d)
    origin_pid=
    trap '{ [ -n "$origin_pid" ] && kill "$origin_pid" 2>/dev/null; rm -rf "$work"; }' EXIT
    start_origin
    make_cert "$work"
}

# One load run against 127.0.0.1:$port, its report (shuck-bench load's JSON) written to $1;
# the rest are shuck-bench load's options. With QUIC=1 the load is a full QUIC handshake
# and one HTTP/3 request on each new connection, one at a time (shuck-bench h3-load
# --handshakes), for the --duration given first; its report is put in the same shape.
load_json() {
    local out=$1
    shift
    if [ -n "${QUIC:-}" ]; then
        [ "$1" = --duration ] || { echo "load_json: QUIC=1 takes --duration first" >&2; return 1; }
        local ok bad
        read -r ok bad <<<"$("$bench" h3-load --addr "127.0.0.1:$port" --connections 1 \
            --streams 1 --handshakes --duration "$2")"
        echo "{\"completed\": $ok, \"attempted\": $((ok + bad)), \"failures\": $bad, \"requests\": $ok}" >"$out"
    else
        "$bench" load --target "127.0.0.1:$port" --concurrency 1 --timeout 120 --json "$@" >"$out"
    fi
}

# QUIC=1: shuck's flags for HTTP/3 (and the suite shuck-bench h3 gives every peer).
quic_args() {
    [ -n "${QUIC:-}" ] && echo "--http --quic --ciphersuites TLS_AES_128_GCM_SHA256"
    return 0
}

# Starts shuck binary $1 on CPU 0 with one worker, HTTP/1.1, HTTP/2 and HTTP/3 in front of
# the origin, with the suite QUIC starts with (what the handshake scripts measure); sets
# port, pid and worker (the worker's pid, whose CPU counts).
start_shuck_pinned() {
    port=$(free_port)
    taskset -c 0 "$1" -n 1 -f "[127.0.0.1]:$port" -b "[127.0.0.1]:$oport" -q --http --quic \
        --ciphersuites TLS_AES_128_GCM_SHA256 "$pem" &
    pid=$!
    wait_port "$port"
    worker=$(pgrep -P "$pid" | head -1)
}

# One handshake load on CPU 1 against 127.0.0.1:$2, 10 clients at a time for 5 s, one
# request a connection: $3 quic (shuck-bench h3-load --handshakes), raw (the same with
# --raw: QUIC without HTTP/3, which only floor-server answers) or tcp (load --reuse never
# --tls 1.3). Prints µs of process $1's CPU (user + system, /proc) per handshake.
handshake_cpu() {
    local t0 t1 n raw
    t0=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    if [ "$3" = tcp ]; then
        n=$(taskset -c 1 "$bench" load --target "127.0.0.1:$2" --concurrency 10 --duration 5 \
            --reuse never --tls 1.3 --json |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["completed"])')
    else
        raw=()
        [ "$3" = raw ] && raw=(--raw)
        n=$(taskset -c 1 "$bench" h3-load --addr "127.0.0.1:$2" --connections 10 --streams 1 \
            --handshakes --duration 5 "${raw[@]}" | awk '{ print $1 }')
    fi
    t1=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    [ "$n" -gt 0 ] || { echo "no handshake completed" >&2; return 1; }
    echo $(((t1 - t0) * 1000000 / $(getconf CLK_TCK) / n))
}
