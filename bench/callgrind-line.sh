#!/usr/bin/env bash
# Instructions one access log line costs to write, apart from a request's: callgrind over
# crates/shuck/examples/access_line.rs, which writes N lines of an HTTP/2 request's facts
# (h2load's) as a worker thread does, into batches handed on every 1 MiB.
#
#   bench/callgrind-line.sh [FORMAT] [N]     (defaults: json, 100000)
#
# Needs valgrind. Prints instructions a line.
set -euo pipefail
cd "$(dirname "$0")/.."
format=${1:-json}
n=${2:-100000}
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out" "$out.build"' EXIT
cargo build --release -q -p shuck --example access_line 2>"$out.build" || { cat "$out.build" >&2; exit 1; }
valgrind --tool=callgrind --toggle-collect='access_line::lines*' --callgrind-out-file="$out" \
    target/release/examples/access_line "$format" "$n" >/dev/null 2>&1
total=$(awk '/^(summary|totals):/ { print $2; exit }' "$out")
echo "access log line ($format): $((total / n)) instructions"
