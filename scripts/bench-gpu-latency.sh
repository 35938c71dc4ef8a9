#!/usr/bin/env bash
# bench-gpu-latency.sh — GPU ↔ GPU ping-pong latency: kvxfer `latency --transport cuda --src gpu:0 --dst gpu:D`
# against scripts/latency-ref.py (torch copy_ and the same two cuMemcpyAsync from Python), ROUNDS rounds
# interleaved in one run. D is 1 on a host with two GPUs or more (NVLink), else 0 (both copies inside one GPU).
# Prints per round and size the p50/p99 half round trip (µs) of each and kvxfer p50 / the best reference p50.
#   KVXFER_BIN  kvxfer binary (default: target/release/kvxfer, built if missing)
#   ROUNDS      rounds (default 3); ITERS timed exchanges per size (default 2000); SIZES (default 8,4KiB,64KiB,1MiB)
#   DST         the answering GPU (default as above)
#   KEEP        a folder to keep each round's results in (kvxfer-R.json, ref-R.json), created if missing
# --quick: one round of 200 exchanges: proves the script works; its figures mean little.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVXFER_BIN:-target/release/kvxfer}
[ -x "$BIN" ] || cargo build --release --quiet
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-2000}
if [ "${1:-}" = --quick ]; then ROUNDS=1 ITERS=200; fi
SIZES=${SIZES:-8,4096,65536,1048576}
WARMUP=200
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
DST=${DST:-$([ "$gpus" -ge 2 ] && echo 1 || echo 0)}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "== gpu:0 -> gpu:$DST ($gpus GPUs here), $ROUNDS rounds of $ITERS exchanges per size after $WARMUP"
for r in $(seq "$ROUNDS"); do
  "$BIN" latency --transport cuda --src gpu:0 --dst "gpu:$DST" --sizes "$SIZES" --iters "$ITERS" \
    --warmup-iters "$WARMUP" --io-timeout 15s --json "$work/kvxfer-$r.json" > "$work/kvxfer-$r.txt"
  python3 scripts/latency-ref.py 0 "$DST" "$SIZES" "$ITERS" "$WARMUP" "$work/ref-$r.json"
done
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/*.json "$KEEP"/; fi
python3 - "$work" "$ROUNDS" <<'PY'
import json, os, sys
w, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'round':>5} {'size':>8} {'kvxfer p50':>10} {'p99':>7} {'driver p50':>10} {'p99':>7} {'torch p50':>9} "
      f"{'p99':>7} {'events p50':>10} {'kvxfer/best':>11}")
for r in range(1, rounds + 1):
    k = {c["size_bytes"]: c["latency_us"] for c in json.load(open(os.path.join(w, f"kvxfer-{r}.json")))["cases"]}
    ref = json.load(open(os.path.join(w, f"ref-{r}.json")))
    for size in sorted(k):
        x, q = k[size], ref[str(size)]
        best = min(q["driver"]["p50"], q["torch"]["p50"])
        print(f"{r:>5} {size:>8} {x['p50']:>10.2f} {x['p99']:>7.2f} {q['driver']['p50']:>10.2f} "
              f"{q['driver']['p99']:>7.2f} {q['torch']['p50']:>9.2f} {q['torch']['p99']:>7.2f} "
              f"{q['torch_events']['p50']:>10.2f} {x['p50'] / best:>11.3f}")
PY
