#!/usr/bin/env bash
# scripts/bench-tcp-path.sh -- does the tcp path kvxfer picks hold from run to run?
#
# Runs N back-to-back `kvxfer sweep --sizes $SIZE --reps $REPS` on loopback, each calibrating its tcp paths afresh,
# and prints for each run the path it kept (send+receive), why, and its p50; then how many different paths the N runs
# kept and the spread of their p50s (min-max, and max/min). The load average before and after says how busy the
# machine was: on a shared machine the p50s move with it, the path should not.
#
# Usage (repository root or anywhere):
#   scripts/bench-tcp-path.sh
#   N=10 SIZE=1GiB REPS=5 scripts/bench-tcp-path.sh
#   KVXFER_TCP_SPLICE=1 KVXFER_TCP_RECV=bounce scripts/bench-tcp-path.sh   # one path forced: its p50 spread alone
#   KVXFER=target/release/kvxfer scripts/bench-tcp-path.sh                 # that binary, without building
#   STRICT=1 scripts/bench-tcp-path.sh                                     # exit 1 when the runs kept different paths
#   scripts/bench-tcp-path.sh --quick     # 2 runs of 16 MiB, 2 reps (scripts/test runs it): proves the script works,
#                                         # its figures mean nothing
set -euo pipefail

if [ "${1:-}" = --quick ]; then
    N=${N:-2} SIZE=${SIZE:-16MiB} REPS=${REPS:-2}
fi
N=${N:-5}
SIZE=${SIZE:-256MiB}
REPS=${REPS:-7}
STRICT=${STRICT:-0}

cd "$(dirname "$0")/.."
say() { printf '%s\n' "$*" >&2; }
command -v python3 >/dev/null || { say "bench-tcp-path: needs python3 to read the results files"; exit 1; }

if [ -z "${KVXFER:-}" ]; then
    say "bench-tcp-path: cargo build --release --locked"
    cargo build --release --locked --quiet
    KVXFER=target/release/kvxfer
fi

WORK=$(mktemp -d /tmp/bench-tcp-path.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

say "bench-tcp-path: $N runs of kvxfer sweep --sizes $SIZE --reps $REPS; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$N"); do
    "$KVXFER" sweep --sizes "$SIZE" --reps "$REPS" --label "run$i" --json "$WORK/run$i.json" --out-dir "$WORK" \
        >/dev/null 2>"$WORK/run$i.err" || { cat "$WORK/run$i.err" >&2; exit 1; }
done
say "bench-tcp-path: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$STRICT" "$WORK"/run*.json <<'EOF'
import json, sys

strict, files = sys.argv[1] == "1", sorted(sys.argv[2:], key=lambda f: int(f.rsplit("run", 1)[1].split(".")[0]))
paths, p50s = [], []
for f in files:
    r = json.load(open(f))
    s = r["config"]["transport_detail"]["sender"]
    path = f'{s["send"]}+{s["recv"]}'
    p50 = r["cases"][0]["gbps"]["p50"]
    paths.append(path)
    p50s.append(p50)
    print(f'{r["label"]:>6}: {path:<14} p50 {p50:6.2f} GB/s  ({s.get("path_reason", "no reason recorded")})')
kept = sorted(set(paths))
print(f"paths kept: {len(kept)} ({', '.join(f'{p} x{paths.count(p)}' for p in kept)})")
lo, hi = min(p50s), max(p50s)
print(f"p50 over the runs: {lo:.2f}-{hi:.2f} GB/s (max/min {hi / lo:.2f})")
if strict and len(kept) > 1:
    print("STRICT: the runs kept different paths", file=sys.stderr)
    sys.exit(1)
EOF
