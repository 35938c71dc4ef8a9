#!/usr/bin/env bash
# scripts/bench-engines.sh -- the engines against their own benchmark and against kvxfer's raw transports, in one
# run on one machine (loopback; GB/s = 10^9 bytes/s):
#   1. kvxfer --transport mooncake with transfer_engine_bench's shape — one batch_transfer_sync_write of BATCH
#      entries of BLOCK per rep (--mooncake-entries per-write) — against two references: the same call in a bare
#      Python loop (scripts/mooncake_loop.py, no kvxfer around it: kvxfer / loop >= 0.95 says the harness is not
#      what is measured), and Mooncake's own transfer_engine_bench from the wheel (C++, asynchronous submit + poll,
#      one thread, batches of BATCH blocks of BLOCK, write). Rates are aggregates: all bytes over all calls' time.
#   2. kvxfer tcp (raw) against kvxfer mooncake (tcp) and kvxfer nixl (UCX) at KV-transfer sizes: 96 MiB (1k
#      tokens of a 30B model), 1.5 GiB (16k) and 3 GiB (the 12 GiB end scaled down to this 24 GiB machine),
#      SIZE_REPS reps each, verified.
# verbs needs an RDMA device (scripts/rxe-vm has soft-RoCE ones), so it is not in this loopback run.
# Installs the wheels into target/engines-venv (scripts/setup --test) and builds the release binary; with
# KVXFER_ENGINES_PYTHON set, uses that venv's python instead.
#   BLOCK=65536 BATCH=128 REPS=1000 SECS=5 SIZES="96MiB,1536MiB,3GiB" SIZE_REPS=3 scripts/bench-engines.sh
#   scripts/bench-engines.sh --quick   # every step at tiny sizes, in seconds (scripts/test runs it): proves the script
#                                      # works, its figures mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0; if [ "${1:-}" = --quick ]; then QUICK=1; shift; fi
BLOCK=${BLOCK:-65536}
BATCH=${BATCH:-128}
if [ "$QUICK" = 1 ]; then
    REPS=${REPS:-20}; SECS=${SECS:-1}; SIZES=${SIZES:-1MiB,4MiB}; SIZE_REPS=${SIZE_REPS:-2}
fi
REPS=${REPS:-1000}
SECS=${SECS:-5}
SIZES=${SIZES:-96MiB,1536MiB,3GiB}
SIZE_REPS=${SIZE_REPS:-3}
say() { printf 'bench-engines: %s\n' "$*" >&2; }

[ -n "${KVXFER_ENGINES_PYTHON:-}" ] || scripts/setup --test
say "cargo build --release"
cargo build --release --quiet
K=$PWD/target/release/kvxfer
PY=${KVXFER_ENGINES_PYTHON:-$PWD/target/engines-venv/bin/python}
TEB=$("$PY" -c 'import mooncake, os; print(os.path.join(os.path.dirname(mooncake.__file__), "transfer_engine_bench"))')
[ -x "$TEB" ] || { say "no transfer_engine_bench in the wheel ($TEB)"; exit 1; }
WORK=$(mktemp -d /tmp/bench-engines.XXXXXX)
TARGET_PID=""
cleanup() {
    if [ -n "$TARGET_PID" ]; then kill "$TARGET_PID" 2>/dev/null || true; wait "$TARGET_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------- 1. transfer_engine_bench
BUF=$((BLOCK * BATCH * 4))
say "transfer_engine_bench: target, then a ${SECS}s initiator (1 thread, batches of $BATCH x $BLOCK B, write, tcp)"
"$TEB" --mode=target --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:12345 --protocol=tcp \
    --buffer_size="$BUF" >"$WORK/target.log" 2>&1 &
TARGET_PID=$!
# Its P2P port is random: wait for the line that names it.
port=""
for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/target.log" | head -n 1)
    [ -n "$port" ] && break
    kill -0 "$TARGET_PID" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || { cat "$WORK/target.log" >&2; say "transfer_engine_bench's target did not start"; exit 1; }
"$TEB" --mode=initiator --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1 \
    --segment_id="127.0.0.1:$port" --protocol=tcp --operation=write --buffer_size="$BUF" \
    --block_size="$BLOCK" --batch_size="$BATCH" --threads=1 --duration="$SECS" >"$WORK/initiator.log" 2>&1 ||
    { cat "$WORK/initiator.log" >&2; say "transfer_engine_bench's initiator failed"; exit 1; }
kill "$TARGET_PID" 2>/dev/null || true; wait "$TARGET_PID" 2>/dev/null || true; TARGET_PID=""
TEB_GBPS=$(sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p' "$WORK/initiator.log" | tail -n 1)
[ -n "$TEB_GBPS" ] || { cat "$WORK/initiator.log" >&2; say "no throughput line from transfer_engine_bench"; exit 1; }

say "kvxfer --transport mooncake: $REPS reps of one batch of $BATCH x $BLOCK B (per-write entries)"
KVXFER_PYTHON=$PY "$K" sweep --transport mooncake --mooncake-entries per-write --block-size "${BLOCK}B" \
    --sizes "$((BLOCK * BATCH))B" --reps "$REPS" --json "$WORK/shape.json" --out-dir "$WORK" >"$WORK/shape.out" 2>&1 ||
    { cat "$WORK/shape.out" >&2; say "kvxfer mooncake failed"; exit 1; }

say "the same call from a bare Python loop (scripts/mooncake_loop.py, $REPS batches)"
"$PY" scripts/mooncake_loop.py "$PY" "$REPS" "$BLOCK" "$BATCH" >"$WORK/loop.json" ||
    { say "scripts/mooncake_loop.py failed"; exit 1; }

# ---------------------------------------------------------------------------------------- 2. KV-sized transfers
for t in tcp mooncake nixl; do
    say "kvxfer --transport $t --sizes $SIZES --reps $SIZE_REPS --verify"
    KVXFER_PYTHON=$PY "$K" sweep --transport "$t" --sizes "$SIZES" --reps "$SIZE_REPS" --verify \
        --json "$WORK/$t.json" --out-dir "$WORK" >"$WORK/$t.out" 2>&1 ||
        { cat "$WORK/$t.out" >&2; say "kvxfer $t failed"; exit 1; }
done

python3 - "$TEB_GBPS" "$WORK" "$BLOCK" "$BATCH" <<'PY'
import json, sys
teb, work, block, batch = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shape = json.load(open(f"{work}/shape.json"))["cases"][0]
loop = json.load(open(f"{work}/loop.json"))
reps = shape["reps"]
agg = sum(r["gbps"] * r["transfer_ms"] for r in reps) / sum(r["transfer_ms"] for r in reps)
harness = agg / loop["gbps"]
print()
print(f"1. batches of {batch} x {block} B over Mooncake's TCP transport, loopback (aggregate GB/s)")
print(f"   kvxfer --transport mooncake ({len(reps)} reps):      {agg:7.3f}   (p50 {shape['gbps']['p50']:.3f})")
print(f"   the same call, bare Python loop ({loop['batches']}):     {loop['gbps']:7.3f}   (p50 {loop['p50_gbps']:.3f})")
print(f"   transfer_engine_bench (C++, async, 1 thread): {teb:7.3f}")
print(f"   ratio kvxfer / bare loop:                     {harness:7.3f}   (target >= 0.95: {'MET' if harness >= 0.95 else 'NOT MET'})")
print(f"   ratio kvxfer / transfer_engine_bench:         {agg / teb:7.3f}   (the sync Python API vs the C++ bench)")
print()
print("2. KV-sized transfers, p50 GB/s (verified)")
runs = {t: {c["size_bytes"]: c for c in json.load(open(f"{work}/{t}.json"))["cases"]} for t in ("tcp", "mooncake", "nixl")}
print(f"   {'size':>10}  {'tcp (raw)':>10}  {'mooncake':>10}  {'nixl':>10}  mooncake/tcp  nixl/tcp")
for size in sorted(runs["tcp"]):
    a, b, c = (runs[t][size]["gbps"]["p50"] for t in ("tcp", "mooncake", "nixl"))
    ok = all(runs[t][size]["verified"] for t in runs)
    print(f"   {size / 2**20:7.0f} MiB  {a:10.3f}  {b:10.3f}  {c:10.3f}  {b / a:12.3f}  {c / a:8.3f}{'' if ok else '  (NOT VERIFIED)'}")
print("GB/s = 10^9 bytes/s")
PY
