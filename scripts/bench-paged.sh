#!/usr/bin/env bash
# bench-paged.sh — for a host with 2 GPUs: a paged KV transfer (qwen3-30b-a3b geometry, 16-token blocks = 16 KiB
# pieces in random slots of a pool twice the transfer, on both sides) moved gpu:0 → gpu:1 the way engines do it in
# PyTorch — gather the blocks into a staging tensor (advanced indexing), one peer copy_, scatter them with
# index_copy_ — against kvxfer's `--staging gather` (the same three steps) and its direct piece kernel
# (`--copy sm`, the default for paged). 1k, 32k and 128k tokens, in one run. torch moves the pool as bf16 (the
# cache's dtype) and as int64 (wider elements); the faster is the reference.
# Prints GB/s (10^9 B/s) medians and the ratios kvxfer p50 / torch median. Needs python3 with torch.
#   KVXFER_BIN   kvxfer binary (default: target/release/kvxfer, built if missing)
#   REPS         reps per size (default 7)
# --quick: 1k tokens only, 2 reps, in seconds: proves the script works, its figures mean nothing. On the GPU machine,
# with the kvxfer binary carried beside the checkout and torch installed there:
#   KVXFER_BIN=$PWD/kvxfer scripts/bench-paged.sh --quick
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVXFER_BIN:-target/release/kvxfer}
[ -x "$BIN" ] || cargo build --release --quiet
TOKENS="1024 32768 131072"
if [ "${1:-}" = --quick ]; then
  TOKENS=1024 REPS=${REPS:-2}
fi
REPS=${REPS:-7}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

echo "== reference: torch gather (index) -> copy_ cuda:0 -> cuda:1 -> index_copy_ (median of $REPS)"
python3 - "$REPS" $TOKENS > "$work/torch.tsv" <<'PY'
import sys, torch
reps = int(sys.argv[1]); tokens = [int(t) for t in sys.argv[2:]]
regions, piece = 48 * 2, 16 * 4 * 128 * 2          # qwen3-30b-a3b: 48 layers x (K, V); 16 tokens x 4 heads x 128 x 2 B
pool = 2 * max(tokens) // 16                        # as kvxfer's default --pool-tokens: twice the largest transfer
# The KV cache's own dtype (bf16), and the same bytes viewed as int64 (index kernels move one element per thread,
# so wider elements are faster): the better of the two is the reference.
dtypes = [torch.bfloat16, torch.int64]
src = torch.empty(regions, pool, piece, dtype=torch.uint8, device="cuda:0")
dst = torch.empty(regions, pool, piece, dtype=torch.uint8, device="cuda:1")
s0, s1 = torch.cuda.current_stream(0), torch.cuda.current_stream(1)
for t in tokens:
    nb = t // 16
    g = torch.Generator().manual_seed(t)
    src_ids = torch.randperm(pool, generator=g)[:nb].to("cuda:0")
    dst_ids = torch.randperm(pool, generator=g)[:nb].to("cuda:1")
    rates = []
    for dt in dtypes:
        sv, dv = src.view(dt), dst.view(dt)
        dst_stage = torch.empty(regions, nb, sv.shape[2], dtype=dt, device="cuda:1")
        times = []
        for i in range(reps + 1):
            torch.cuda.synchronize(0); torch.cuda.synchronize(1)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.device(0):
                a.record(s0)
                stage = sv[:, src_ids]                   # gather on gpu:0
            dst_stage.copy_(stage, non_blocking=True)    # one peer copy (torch syncs both devices' streams around it)
            with torch.cuda.device(1):
                dv.index_copy_(1, dst_ids, dst_stage)    # scatter on gpu:1
            s0.wait_stream(s1)
            with torch.cuda.device(0):
                b.record(s0)
            b.synchronize()
            if i: times.append(a.elapsed_time(b))
            del stage
        times.sort()
        rates.append(regions * nb * piece / times[len(times) // 2] / 1e6)
        del dst_stage; torch.cuda.empty_cache()
    print(f"{t}\t{regions * nb * piece}\t" + "\t".join(f"{r:.1f}" for r in rates))
PY
cat "$work/torch.tsv"

tokens=$(echo $TOKENS | tr ' ' ',')
run() { # name, extra args...
  local name=$1; shift
  "$BIN" sweep --transport cuda --src gpu:0 --dst gpu:1 --layout paged --model qwen3-30b-a3b --tokens "$tokens" \
    --reps "$REPS" --warmup 2 --json "$work/$name.json" --out-dir "$work" "$@" >&2
}
echo "== kvxfer (p50 of $REPS after 2 warm-up reps)"
run staged --staging gather
run direct --copy sm

python3 - "$work" <<'PY'
import json, sys, os
w = sys.argv[1]
ref, rows = {}, {}
for line in open(os.path.join(w, "torch.tsv")):
    t, n, bf16, i64 = line.split(); ref[int(n)] = (int(t), max(float(bf16), float(i64))); rows[int(n)] = (bf16, i64)
def p50(name):
    return {c["size_bytes"]: c["gbps"]["p50"] for c in json.load(open(os.path.join(w, name + ".json")))["cases"]}
staged, direct = p50("staged"), p50("direct")
print(f"{'tokens':>7} {'size':>9} {'torch bf16':>11} {'torch i64':>10} {'kvxfer staged':>14} {'ratio':>6} {'kvxfer direct':>14} {'ratio':>6}")
for n in sorted(ref):
    t, g = ref[n]; bf16, i64 = rows[n]
    print(f"{t:>7} {n / 2**20:>5.0f} MiB {bf16:>11} {i64:>10} {staged[n]:>14.1f} {staged[n] / g:>6.3f} {direct[n]:>14.1f} {direct[n] / g:>6.3f}")
print("GB/s = 10^9 bytes/s; ratio = kvxfer p50 / the faster torch median")
PY
