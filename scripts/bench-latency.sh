#!/usr/bin/env bash
# kvxfer latency --transport tcp against sockperf ping-pong --tcp, both over loopback in the same run, at 14 B
# (sockperf's smallest message: it refuses 8 B), 4 KiB and 64 KiB: each one's p50 and the ratio kvxfer/sockperf
# (target: at most 1.05).
#   scripts/bench-latency.sh            # sockperf 3 s per size, kvxfer 20,000 ping-pongs per size
#   scripts/bench-latency.sh --quick    # 1 s / 1,000: proves the script works (scripts/test runs it), figures rough
# Like with like: sockperf's percentiles and avg-latency are half the round trip (it prints round trips only with
# --full-rtt, not used here), and so are kvxfer latency's; both ends of each run on loopback, each tool's client and
# server in their own threads (kvxfer's receiver is a thread of its process), TCP_NODELAY on both (sockperf's default
# for ping-pong), both waiting in blocking calls (sockperf's default epoll, kvxfer without --busy-poll), warm-ups on
# both (sockperf's own warm-up, kvxfer's --warmup-iters). sockperf's percentiles come from its own full sample, kvxfer's
# from an HDR histogram of 3 significant digits.
# TODO: the RDMA half (kvxfer latency --transport verbs against ib_write_lat) runs in the soft-RoCE VM
# (scripts/test-rxe); kvxfer has no verbs ping-pong yet, so this script compares tcp only.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=3 iters=20000
if [ "${1:-}" = --quick ]; then
  shift; secs=1 iters=1000
fi
command -v sockperf >/dev/null ||
  { echo "bench-latency: sockperf is missing; install it (scripts/setup --test, or apt-get install sockperf)" >&2; exit 1; }
cargo build --release --quiet
K=$PWD/target/release/kvxfer
t=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
# The server's buffer must hold the largest message (its default is smaller than 64 KiB).
sockperf server --tcp -i 127.0.0.1 -p "$port" -m 65536 > "$t/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "listen on" "$t/server.log" 2>/dev/null && break
  sleep 0.05
done
printf '%8s  %14s  %14s  %8s\n' size "sockperf p50" "kvxfer p50" ratio
for size in 14 4096 65536; do
  sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m "$size" -t "$secs" > "$t/sp-$size.log" 2>&1 ||
    { cat "$t/sp-$size.log" >&2; echo "bench-latency: sockperf ping-pong -m $size failed" >&2; exit 1; }
  sp=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$t/sp-$size.log")
  [ -n "$sp" ] || { cat "$t/sp-$size.log" >&2; echo "bench-latency: no p50 in sockperf's output" >&2; exit 1; }
  "$K" latency --transport tcp --sizes "$size" --iters "$iters" --json "$t/kv-$size.json" > "$t/kv.out" 2>&1 ||
    { cat "$t/kv.out" >&2; echo "bench-latency: kvxfer latency --sizes $size failed" >&2; exit 1; }
  kv=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][0]["latency_us"]["p50"])' "$t/kv-$size.json")
  python3 -c 'import sys; s, sp, kv = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]); print(f"{s:>8}  {sp:11.3f} µs  {kv:11.3f} µs  {kv / sp:7.2f}×")' \
    "$size B" "$sp" "$kv"
done
