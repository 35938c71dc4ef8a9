#!/usr/bin/env bash
# How report/predict and sweep planning scale: a 100,000-case results file reported and predicted from, a
# 100,000-case sweep file planned (--plan), a 10^6-case sweep file refused. Targets: each under 10 s. Prints seconds per step; the
# files are made from results/tcp-loopback.json (its first case, copied with new sizes and rates).
#   scripts/bench-scale.sh [N_CASES]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
cargo build --release --quiet
K=$PWD/target/release/kvxfer
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
python3 - "$n" "$t" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
d = json.load(open("results/tcp-loopback.json"))
base = d["cases"][0]
cases = []
for i in range(n):
    c = json.loads(json.dumps(base))
    c["size_bytes"] = (i + 1) << 20
    # A rise, a plateau with noise, a collapse: the ceiling search has real work.
    g = 1 + 8 * i / (n * 0.1) if i < n * 0.1 else (9.7 + ((i * 7919) % 100) * 0.001 if i < n * 0.9 else 4.0)
    for k in ("p50", "p90", "p99", "min", "max", "mean"):
        c["gbps"][k] = g
    cases.append(c)
d["cases"] = cases
json.dump(d, open(f"{out}/big.json", "w"))
sizes = ",".join(f'"{i + 1}MiB"' for i in range(1000))
blocks = ", ".join(f'"{b + 1}KiB"' for b in range(100))
open(f"{out}/1e5.toml", "w").write(f'name = "scale"\nsizes = [{sizes}]\nblock_size = [{blocks}]\n')
blocks = ", ".join(f'"{b + 1}KiB"' for b in range(1000))
open(f"{out}/1e6.toml", "w").write(f'name = "scale"\nsizes = [{sizes}]\nblock_size = [{blocks}]\n')
PY
timed() { local s=$EPOCHREALTIME; "$@" > "$t/out" 2>&1 || true; awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }'; }
printf "report, %d cases (%s MB):     %6.2f s  (target < 10 s)\n" "$n" "$(du -m "$t/big.json" | cut -f1)" "$(timed "$K" report "$t/big.json" --md "$t/big.md")"
grep -m1 -o "ceiling [0-9.]* GB/s" "$t/big.md" || grep -m1 -o "ceiling [0-9.]* GB/s" "$t/out" || echo "(no ceiling line)"
printf "predict from it:                 %6.2f s  (target < 10 s)\n" "$(timed "$K" predict --results "$t/big.json" --tokens 1k,32k --model qwen3-30b-a3b)"
printf "sweep --plan, 100,000 cases:     %6.2f s  (target < 10 s)\n" "$(timed "$K" sweep "$t/1e5.toml" --plan)"
tail -1 "$t/out"
printf "sweep, 1,000,000 cases refused:  %6.2f s  (target < 10 s)\n" "$(timed "$K" sweep "$t/1e6.toml" --plan)"
tail -1 "$t/out"
