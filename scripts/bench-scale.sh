#!/usr/bin/env bash
# How report/predict and sweep planning scale: a 100,000-case results file reported and predicted from, a
# 100,000-case sweep file planned (--plan), a 10^6-case sweep file refused. Targets: each under 10 s. Prints seconds per step; the
# files are made from results/tcp-loopback.json (its first case, copied with new sizes and rates).
#   scripts/bench-scale.sh [N_CASES]
#   KVXFER=path/to/kvxfer scripts/bench-scale.sh    # that binary, without building
#   scripts/bench-scale.sh --quick    # a 1,000-case results file (scripts/test runs it): proves the script works
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then n=1000; else n=${1:-100000}; fi
if [ -n "${KVXFER:-}" ]; then K=$KVXFER; else cargo build --release --quiet; K=$PWD/target/release/kvxfer; fi
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
# step LABEL EXIT CMD...: CMD's seconds after LABEL, its output in $t/out; any exit status but EXIT stops the script.
step() {
  local label=$1 want=$2 s=$EPOCHREALTIME rc=0; shift 2
  "$@" > "$t/out" 2>&1 || rc=$?
  printf "%-33s%6.2f s  (target < 10 s)\n" "$label" "$(awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
  [ "$rc" = "$want" ] || { cat "$t/out" >&2; echo "bench-scale: $* exited $rc, not $want" >&2; exit 1; }
}
step "report, $n cases ($(du -m "$t/big.json" | cut -f1) MB):" 0 "$K" report "$t/big.json" --md "$t/big.md"
grep -m1 -o "ceiling [0-9.]* GB/s" "$t/big.md" || grep -m1 -o "ceiling [0-9.]* GB/s" "$t/out" || echo "(no ceiling line)"
step "predict from it:" 0 "$K" predict --results "$t/big.json" --tokens 1k,32k --model qwen3-30b-a3b
step "sweep --plan, 100,000 cases:" 0 "$K" sweep "$t/1e5.toml" --plan
tail -1 "$t/out"
step "sweep, 1,000,000 cases refused:" 2 "$K" sweep "$t/1e6.toml" --plan
tail -1 "$t/out"
