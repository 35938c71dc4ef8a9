#!/usr/bin/env bash
# What --counters auto costs against --counters off: the same loopback sweep with each, interleaved
# PAIRS times so machine drift hits both alike. Prints, per pair and over all, the p50 of transfer_ms (the timed
# interval, which the reads stay outside of) and the wall time per rep (which the reads add to), and their ratios.
#   scripts/bench-counters.sh [PAIRS] [extra sweep flags...]     (default: 5 pairs of --sizes 1MiB --reps 300)
#   KVXFER=path/to/kvxfer scripts/bench-counters.sh   # that binary, without building
#   scripts/bench-counters.sh --quick     # 1 pair of 20 reps (scripts/test runs it): proves the script works, its
#                                         # figures mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."
reps=300
if [ "${1:-}" = --quick ]; then
  shift; pairs=1 reps=20
else
  pairs=${1:-5}
  shift || true
fi
if [ -n "${KVXFER:-}" ]; then K=$KVXFER; else cargo build --release --quiet; K=$PWD/target/release/kvxfer; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
args=(sweep --sizes 1MiB --reps "$reps" --warmup 0 "$@")
for i in $(seq "$pairs"); do
  for mode in auto off; do
    s=$EPOCHREALTIME
    "$K" "${args[@]}" --counters "$mode" --json "$t/$mode-$i.json" --md "$t/$mode-$i.md" > "$t/out" 2>&1 ||
      { cat "$t/out" >&2; echo "bench-counters: kvxfer sweep --counters $mode failed" >&2; exit 1; }
    awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }' > "$t/$mode-$i.wall"
  done
done
python3 - "$t" "$pairs" <<'PY'
import json, statistics, sys
t, pairs = sys.argv[1], int(sys.argv[2])
def one(mode, i):
    c = json.load(open(f"{t}/{mode}-{i}.json"))["cases"][0]
    wall = float(open(f"{t}/{mode}-{i}.wall").read())
    return c["transfer_ms"]["p50"], wall / c["n"] * 1e3
rows = [(one("auto", i), one("off", i)) for i in range(1, pairs + 1)]
print("pair   transfer_ms p50: auto    off    ratio   wall ms/rep: auto    off    ratio")
for i, ((pa, wa), (po, wo)) in enumerate(rows, 1):
    print(f"{i:4}                  {pa:7.3f} {po:7.3f} {pa / po:6.2f}×             {wa:6.2f} {wo:6.2f} {wa / wo:6.2f}×")
med = lambda xs: statistics.median(xs)
pa, po = med([r[0][0] for r in rows]), med([r[1][0] for r in rows])
wa, wo = med([r[0][1] for r in rows]), med([r[1][1] for r in rows])
print(f"median                {pa:7.3f} {po:7.3f} {pa / po:6.2f}×             {wa:6.2f} {wo:6.2f} {wa / wo:6.2f}×")
PY
