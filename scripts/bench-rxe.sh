#!/usr/bin/env bash
# bench-rxe.sh — kvxfer's verbs transport against perftest's ib_write_bw on the same soft-RoCE link, in one boot
# of the rxe VM (scripts/rxe-vm): server on rxeA, client on rxeB, at 4, 16 and 64 MiB. Prints both bandwidths in
# GB/s (10^9 B/s; ib_write_bw's MB/sec are 2^20 B) and the ratio kvxfer p50 / ib_write_bw average, against
# ib_write_bw's default single queue pair and against 4 queue pairs (kvxfer's default).
# Then RDMA READs, the decode side pulling: kvxfer --op read (the receiver on rxeA reads from the sender on rxeB)
# against ib_read_bw (its client on rxeB reads from its server on rxeA) with one queue pair, and the ratios of
# kvxfer at its default 4 queue pairs and at --qps 1. ib_read_bw -q 4 is not run: on rxe its READ requests time out,
# are re-sent and never recover (completer_retry_err and duplicate_request counters climb; -q 1 always finishes).
#   SIZES_MIB      sizes to compare writes at (default "4 16 64")
#   READ_SIZES_MIB sizes to compare reads at (default "1 64")
#   KVXFER_ARGS    extra kvxfer send arguments (default: none, i.e. kvxfer's defaults)
# --quick: 4 MiB writes and 1 MiB reads only, 5 perftest iterations and 2 kvxfer reps: proves the script works in
# one VM boot (a few minutes under emulation, most of it the boot), its figures mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_REPS=5 BENCH_ITERS=
if [ "${1:-}" = --quick ]; then
  SIZES_MIB=${SIZES_MIB:-4} READ_SIZES_MIB=${READ_SIZES_MIB:-1} BENCH_REPS=2 BENCH_ITERS=5
fi
cargo build --release --quiet
mkdir -p target/bench-rxe
inner=target/bench-rxe/inner.sh
cat > "$inner" <<'INNER'
set -u
K=target/release/kvxfer
out=target/bench-rxe
export KVXFER_TOKEN=bench-rxe-token-0123456789
: > $out/rows.tsv
for mib in ${SIZES_MIB:-4 16 64}; do
  bytes=$((mib << 20)); iters=${BENCH_ITERS:-$(( 320 / mib ))}; [ $iters -lt 5 ] && iters=5
  # perftest: N messages of SIZE, tx depth 128 (its defaults), with 1 QP (its default) and with 4 (kvxfer's).
  ib=""
  for q in 1 4; do
    timeout 300 ib_write_bw -d "$RXE_A_DEV" -x "$RXE_GID_INDEX" -F -q $q -s $bytes -n $iters > $out/ibs.log 2>&1 & srv=$!
    # The client gives up at once when the server is not listening yet (a loaded guest starts it late): retry.
    for try in 1 2 3 4 5 6; do
      sleep 2
      timeout 300 ib_write_bw -d "$RXE_B_DEV" -x "$RXE_GID_INDEX" -F -q $q -s $bytes -n $iters "$RXE_A_IP" > $out/ibc.log 2>&1 && break
    done
    wait $srv
    ib="$ib$(awk -v b=$bytes '$1 == b && NF >= 5 {print $4}' $out/ibc.log | tail -n 1)	"   # BW average [MB/sec]
  done
  # kvxfer: one transfer of SIZE per rep, p50 of BENCH_REPS (5) reps after 1 warm-up.
  port=$((20000 + mib))
  timeout 300 $K serve --listen "$RXE_A_IP:$port" -d "$RXE_A_DEV" --once > $out/serve.log 2>&1 & srv=$!
  sleep 1
  timeout 300 $K send --peer "$RXE_A_IP:$port" -d "$RXE_B_DEV" --transport verbs --sizes ${mib}MiB --reps $BENCH_REPS \
     --json $out/k$mib.json ${KVXFER_ARGS:-} > $out/send.log 2>&1 || { echo "kvxfer failed:"; cat $out/send.log $out/serve.log; }
  wait $srv
  kv=$(python3 -c "import json;print(json.load(open('$out/k$mib.json'))['cases'][0]['gbps']['p50'])" 2>/dev/null || echo nan)
  echo -e "$mib\t${ib}$kv" >> $out/rows.tsv
done
: > $out/reads.tsv
for mib in ${READ_SIZES_MIB:-1 64}; do
  bytes=$((mib << 20)); iters=${BENCH_ITERS:-$(( 320 / mib ))}; [ $iters -lt 5 ] && iters=5
  # perftest: the server (rxeA) lends its buffer, the client (rxeB) READs it over one queue pair. The guest's
  # routing serves connections to rxeA's address (a server on rxeB is not reached), so the bytes cross the veth
  # pair the other way than kvxfer's below; the link is symmetric.
  timeout 300 ib_read_bw -d "$RXE_A_DEV" -x "$RXE_GID_INDEX" -F -q 1 -s $bytes -n $iters > $out/ibs.log 2>&1 & srv=$!
  # The client gives up at once when the server is not listening yet (a loaded guest starts it late): retry.
  for try in 1 2 3 4 5 6; do
    sleep 2
    timeout 300 ib_read_bw -d "$RXE_B_DEV" -x "$RXE_GID_INDEX" -F -q 1 -s $bytes -n $iters "$RXE_A_IP" > $out/ibc.log 2>&1 && break
  done
  wait $srv
  ib="$(awk -v b=$bytes '$1 == b && NF >= 5 {print $4}' $out/ibc.log | tail -n 1)	"   # BW average [MB/sec]
  # kvxfer: the receiver on rxeA READs each rep from the sender on rxeB and times it; its default queue pairs, then 1.
  kv=""
  for qps in 4 1; do
    port=$((21000 + mib + qps * 100))
    timeout 300 $K serve --listen "$RXE_A_IP:$port" -d "$RXE_A_DEV" --once > $out/serve.log 2>&1 & srv=$!
    sleep 1
    timeout 300 $K send --peer "$RXE_A_IP:$port" -d "$RXE_B_DEV" --transport verbs --op read --qps $qps \
       --sizes ${mib}MiB --reps $BENCH_REPS --json $out/r$mib-$qps.json ${KVXFER_ARGS:-} > $out/send.log 2>&1 ||
       { echo "kvxfer failed:"; cat $out/send.log $out/serve.log; }
    wait $srv
    kv="$kv$(python3 -c "import json;print(json.load(open('$out/r$mib-$qps.json'))['cases'][0]['gbps']['p50'])" 2>/dev/null || echo nan)	"
  done
  echo -e "$mib\t${ib}${kv%	}" >> $out/reads.tsv
done
INNER
SIZES_MIB=${SIZES_MIB:-} READ_SIZES_MIB=${READ_SIZES_MIB:-} KVXFER_ARGS=${KVXFER_ARGS:-} BENCH_REPS=$BENCH_REPS BENCH_ITERS=$BENCH_ITERS \
  RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-1500} scripts/rxe-vm -- bash "$inner" >&2
python3 - target/bench-rxe/rows.tsv target/bench-rxe/reads.tsv "${KVXFER_ARGS:-}" <<'PY'
import sys, math
def gbps(mb):
    try:
        return float(mb) * 2**20 / 1e9
    except ValueError:
        return math.nan
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
print(f"kvxfer vs ib_write_bw on soft-RoCE (rxeB -> rxeA, one VM boot); kvxfer args: {sys.argv[3] or '(defaults)'}")
print(f"{'size':>8} {'ib_write_bw -q1':>16} {'ib_write_bw -q4':>16} {'kvxfer p50':>11} {'ratio vs q1':>12} {'ratio vs q4':>12}   (GB/s)")
for mib, ib1, ib4, kv in rows:
    a, b, k = gbps(ib1), gbps(ib4), float(kv)
    print(f"{mib + ' MiB':>8} {a:>16.4f} {b:>16.4f} {k:>11.4f} {k / a:>12.3f} {k / b:>12.3f}")
rows = [l.split("\t") for l in open(sys.argv[2]).read().splitlines() if l]
print(f"kvxfer --op read vs ib_read_bw -q 1 on soft-RoCE (rxeA reads from rxeB, one VM boot); kvxfer args: {sys.argv[3] or '(defaults)'}")
print(f"{'size':>8} {'ib_read_bw -q1':>15} {'kvxfer (4 QPs)':>15} {'kvxfer --qps 1':>15} {'ratio 4 QPs':>12} {'ratio 1 QP':>11}   (GB/s)")
for mib, ib1, k4, k1 in rows:
    a, k4, k1 = gbps(ib1), float(k4), float(k1)
    print(f"{mib + ' MiB':>8} {a:>15.4f} {k4:>15.4f} {k1:>15.4f} {k4 / a:>12.3f} {k1 / a:>11.3f}")
PY
