#!/usr/bin/env bash
# bench-nvlink.sh — for a host with 2 GPUs: in one run, a reference peer copy (torch `copy_` cuda:0 → cuda:1) and
# kvxfer's cuda transport (copy engine and SM kernel) at 96 MiB, 1.5 GiB, 6 GiB and 12 GiB, plus pinned → GPU.
# Prints GB/s (10^9 B/s) medians and the ratio kvxfer p50 / torch median. Needs python3 with torch for the reference.
#   KVXFER_BIN   kvxfer binary (default: target/release/kvxfer, built if missing)
#   REPS         reps per size (default 7)
# --quick: 96 MiB only (pinned too), 2 reps, in seconds: proves the script works, its figures mean nothing. On the
# GPU machine, with the kvxfer binary carried beside the checkout and torch installed there:
#   KVXFER_BIN=$PWD/kvxfer scripts/bench-nvlink.sh --quick
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVXFER_BIN:-target/release/kvxfer}
[ -x "$BIN" ] || cargo build --release --quiet
SIZES_MIB="96 1536 6144 12288" PINNED_MIB=1536
if [ "${1:-}" = --quick ]; then
  SIZES_MIB=96 PINNED_MIB=96 REPS=${REPS:-2}
fi
REPS=${REPS:-7}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

echo "== reference: torch copy_ cuda:0 -> cuda:1 and pinned -> cuda:0 (median of $REPS)"
python3 - "$REPS" "$PINNED_MIB" $SIZES_MIB > "$work/torch.tsv" <<'PY'
import sys, torch
reps, pinned = int(sys.argv[1]), int(sys.argv[2]) << 20; sizes = [int(s) for s in sys.argv[3:]]
def timed(dst, src):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps + 1):
        torch.cuda.synchronize(); s.record(); dst.copy_(src, non_blocking=True); e.record(); e.synchronize()
        if i: times.append(s.elapsed_time(e))
    times.sort(); return times[len(times) // 2]
for mib in sizes:
    n = mib << 20
    a = torch.empty(n, dtype=torch.uint8, device="cuda:0"); b = torch.empty(n, dtype=torch.uint8, device="cuda:1")
    print(f"nvlink\t{n}\t{n / timed(b, a) / 1e6:.1f}"); del a, b; torch.cuda.empty_cache()
n = pinned
h = torch.empty(n, dtype=torch.uint8).pin_memory(); g = torch.empty(n, dtype=torch.uint8, device="cuda:0")
print(f"pinned\t{n}\t{n / timed(g, h) / 1e6:.1f}")
PY
cat "$work/torch.tsv"

sizes=$(for m in $SIZES_MIB; do printf '%sMiB,' "$m"; done); sizes=${sizes%,}
run() { # name, extra args...
  local name=$1; shift
  "$BIN" sweep --transport cuda --reps "$REPS" --warmup 2 --json "$work/$name.json" --out-dir "$work" "$@" >&2
}
echo "== kvxfer (p50 of $REPS after 2 warm-up reps)"
run ce --src gpu:0 --dst gpu:1 --sizes "$sizes" --copy ce
run sm --src gpu:0 --dst gpu:1 --sizes "$sizes" --copy sm
run pinned --src pinned --dst gpu:0 --sizes "${PINNED_MIB}MiB" --copy ce

python3 - "$work" "$PINNED_MIB" <<'PY'
import json, sys, os
w = sys.argv[1]
ref = {}
for line in open(os.path.join(w, "torch.tsv")):
    kind, n, g = line.split(); ref[(kind, int(n))] = float(g)
def p50(name):
    return {c["size_bytes"]: c["gbps"]["p50"] for c in json.load(open(os.path.join(w, name + ".json")))["cases"]}
ce, sm, pin = p50("ce"), p50("sm"), p50("pinned")
print(f"{'size':>10} {'torch GB/s':>11} {'kvxfer ce':>10} {'kvxfer sm':>10} {'best/torch':>11}")
for n in sorted(ce):
    t = ref[("nvlink", n)]; best = max(ce[n], sm.get(n, 0))
    print(f"{n / 2**20:>7.0f} MiB {t:>11.1f} {ce[n]:>10.1f} {sm.get(n, float('nan')):>10.1f} {best / t:>11.3f}")
n = int(sys.argv[2]) << 20
print(f"pinned->gpu:0 {n >> 20} MiB: torch {ref[('pinned', n)]:.1f} GB/s, kvxfer {pin[n]:.1f} GB/s, ratio {pin[n] / ref[('pinned', n)]:.3f}")
PY
