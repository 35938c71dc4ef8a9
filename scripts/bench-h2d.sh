#!/usr/bin/env bash
# bench-h2d.sh — for a host with one GPU: pinned host memory → GPU, the way a decode engine loads offloaded KV, in one
# run: torch's `copy_` from a pinned tensor (the reference, CUDA events around the copy) against kvxfer's cuda
# transport, contiguous with and without --verify, and paged (qwen3-30b-a3b geometry, 16 KiB pieces, the SM piece
# kernel) against contiguous of the same bytes. torch also copies right after the CPU wrote the source (what a
# --verify pattern fill does), and after that write was pushed out of the CPU caches, to show what dirty cache lines
# cost a DMA read. Prints GB/s (10^9 B/s) medians and the ratios.
#   KVXFER_BIN   kvxfer binary (default: target/release/kvxfer, built if missing)
#   REPS         reps per size (default 20)
# --quick: 96 MiB only, 3 reps: proves the script works, its figures mean nothing. On the GPU machine, with the
# kvxfer binary carried beside the checkout and torch installed there:
#   KVXFER_BIN=$PWD/kvxfer scripts/bench-h2d.sh --quick
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVXFER_BIN:-target/release/kvxfer}
[ -x "$BIN" ] || cargo build --release --quiet
TOKENS="1024 4096 16384"   # qwen3-30b-a3b, 96 KiB/token: 96 MiB, 384 MiB, 1.5 GiB
if [ "${1:-}" = --quick ]; then
  TOKENS=1024 REPS=${REPS:-3}
fi
REPS=${REPS:-20}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
lscpu | grep -E "^(Model name|L3 cache|Socket|NUMA node\(s\))" || true

echo "== reference: torch copy_ pinned -> cuda:0 (median of $REPS; the source clean, just written by the CPU, written then evicted)"
python3 - "$REPS" $TOKENS > "$work/torch.tsv" <<'PY'
import sys, torch
reps = int(sys.argv[1]); sizes = [int(t) * 96 * 1024 for t in sys.argv[2:]]
scratch = torch.empty(2 << 30, dtype=torch.uint8)   # written to push the source's lines out of the CPU caches
for n in sizes:
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True); src.fill_(1)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    times = {"clean": [], "written": [], "evicted": []}
    for i in range(reps):
        for how in times:      # interleaved, so drift hits every condition alike
            if how != "clean":
                src.fill_(i % 251)
            if how == "evicted":
                scratch.fill_(i % 7)
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); dst.copy_(src, non_blocking=True); b.record(); b.synchronize()
            times[how].append(a.elapsed_time(b))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"{n}\t" + "\t".join(f"{n / med[k] / 1e6:.2f}" for k in ("clean", "written", "evicted")))
    del src, dst
PY
printf "%10s %12s %12s %12s\n" size clean written evicted
awk '{printf "%7d MiB %7.2f GB/s %7.2f GB/s %7.2f GB/s\n", $1/1048576, $2, $3, $4}' "$work/torch.tsv"

tokens=$(echo $TOKENS | tr ' ' ',')
run() { # name, extra args...
  local name=$1; shift
  "$BIN" sweep --transport cuda --src pinned --dst gpu:0 --model qwen3-30b-a3b --tokens "$tokens" --reps "$REPS" --warmup 2 \
    --json "$work/$name.json" --out-dir "$work" "$@" >&2
}
echo "== kvxfer cuda pinned -> gpu:0 (p50 of $REPS after 2 warm-up reps)"
run plain
run verify --verify
run paged --layout paged --copy sm

python3 - "$work" <<'PY'
import json, sys, os
w = sys.argv[1]
torch = {int(l.split()[0]): [float(x) for x in l.split()[1:]] for l in open(os.path.join(w, "torch.tsv"))}
def p50(name):
    return {c["size_bytes"]: c["gbps"]["p50"] for c in json.load(open(os.path.join(w, name + ".json")))["cases"]}
plain, verify, paged = p50("plain"), p50("verify"), p50("paged")
print(f"{'size':>10} {'torch':>8} {'kvxfer':>8} {'÷torch':>7} {'--verify':>9} {'÷plain':>7} {'÷torch written':>15} {'paged sm':>9} {'÷contig':>8}")
for n, (clean, written, evicted) in sorted(torch.items()):
    pg = paged.get(n)
    print(f"{n >> 20:>6} MiB {clean:8.2f} {plain[n]:8.2f} {plain[n] / clean:6.3f}x {verify[n]:9.2f} {verify[n] / plain[n]:6.3f}x "
          f"{written / clean:14.3f}x {pg if pg else float('nan'):9.2f} {(pg or float('nan')) / plain[n]:7.3f}x")
PY
