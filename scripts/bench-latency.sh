#!/usr/bin/env bash
# kvxfer latency against the reference tools, in one run, each ratio kvxfer p50 / the tool's p50:
# - tcp: kvxfer latency --transport tcp against sockperf ping-pong --tcp, both over loopback, at 14 B (sockperf's
#   smallest message: it refuses 8 B), 4 KiB and 64 KiB (target: at most 1.05);
# - verbs: kvxfer latency --transport verbs against perftest's ib_write_lat, between the two soft-RoCE devices of
#   the rxe VM (scripts/rxe-vm: server on rxeA, client on rxeB, one boot), at 8 B, 4 KiB and 64 KiB. Soft-RoCE is
#   emulated in software (under TCG, in a VM): its figures are noisy and say nothing about hardware.
#   scripts/bench-latency.sh            # sockperf 3 s per size, kvxfer 20,000 ping-pongs per size; 5,000 on rxe
#   scripts/bench-latency.sh --quick    # 1 s / 1,000; 500 on rxe: proves the script works, figures rough
#   scripts/bench-latency.sh --tcp-only # the tcp half alone (no VM: a host without qemu or root)
# Like with like: sockperf's percentiles and avg-latency are half the round trip (it prints round trips only with
# --full-rtt, not used here), and so are kvxfer latency's; both ends of each run on loopback, each tool's client and
# server in their own threads (kvxfer's receiver is a thread of its process), TCP_NODELAY on both (sockperf's default
# for ping-pong), both waiting in blocking calls (sockperf's default epoll, kvxfer without --busy-poll), warm-ups on
# both (sockperf's own warm-up, kvxfer's --warmup-iters). sockperf's percentiles come from its own full sample, kvxfer's
# from an HDR histogram of 3 significant digits.
# On rxe, ib_write_lat's t_typical is its median, and like kvxfer's half the round trip (RTT/2 for WRITE); both run as
# two processes (ib_write_lat server and client; kvxfer serve and latency), both RDMA-WRITE and spin on the last
# byte, both inlining small messages up to the same size (kvxfer is given what ib_write_lat printed that it used:
# perftest turns inline off on devices it does not know, rxe among them, where kvxfer's default is the device's
# limit, recorded as transport_detail.sender.inline), both with ACK timeout 18 (the VM's soft-RoCE turns
# retransmissions at 14 into errors: scripts/rxe-vm).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=3 iters=20000 rxe_iters=5000 vm=1
for arg in "$@"; do
  case $arg in
    --quick) secs=1 iters=1000 rxe_iters=500 ;;
    --tcp-only) vm= ;;
    *) echo "bench-latency: unknown argument $arg (--quick, --tcp-only)" >&2; exit 2 ;;
  esac
done
command -v sockperf >/dev/null ||
  { echo "bench-latency: sockperf is missing; install it (scripts/setup --test, or apt-get install sockperf)" >&2; exit 1; }
cargo build --release --quiet
K=$PWD/target/release/kvxfer
t=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
# The server's buffer must hold the largest message (its default is smaller than 64 KiB).
# kvxfer latency keeps its two ends' threads on different CPUs (the receiver on all but the last, itself on the last:
# results config.ping_pong_cpus); sockperf's server and client are pinned the same way, so both measure a wake-up on
# another core, never a hand-over on one (much faster, and taken by chance when left to the scheduler).
ncpu=$(nproc)
server_cpus=() client_cpus=()
if [ "$ncpu" -ge 2 ]; then server_cpus=(taskset -c "0-$((ncpu - 2))") client_cpus=(taskset -c "$((ncpu - 1))"); fi
"${server_cpus[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" -m 65536 > "$t/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "listen on" "$t/server.log" 2>/dev/null && break
  sleep 0.05
done
echo "tcp over loopback: kvxfer latency vs sockperf ping-pong --tcp (and each one's fastest message)"
printf '%8s  %14s  %14s  %8s  %14s  %14s\n' size "sockperf p50" "kvxfer p50" ratio "sockperf min" "kvxfer min"
for size in 14 4096 65536; do
  "${client_cpus[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m "$size" -t "$secs" > "$t/sp-$size.log" 2>&1 ||
    { cat "$t/sp-$size.log" >&2; echo "bench-latency: sockperf ping-pong -m $size failed" >&2; exit 1; }
  sp=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$t/sp-$size.log")
  spmin=$(sed -n 's/.*<MIN> observation = *\([0-9.]*\).*/\1/p' "$t/sp-$size.log")
  [ -n "$sp" ] && [ -n "$spmin" ] || { cat "$t/sp-$size.log" >&2; echo "bench-latency: no p50 or min in sockperf's output" >&2; exit 1; }
  "$K" latency --transport tcp --sizes "$size" --iters "$iters" --json "$t/kv-$size.json" > "$t/kv.out" 2>&1 ||
    { cat "$t/kv.out" >&2; echo "bench-latency: kvxfer latency --sizes $size failed" >&2; exit 1; }
  python3 - "$size B" "$sp" "$spmin" "$t/kv-$size.json" <<'PY'
import json, sys
s, sp, spmin = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
kv = json.load(open(sys.argv[4]))["cases"][0]["latency_us"]
print(f"{s:>8}  {sp:11.3f} µs  {kv['p50']:11.3f} µs  {kv['p50'] / sp:7.2f}×  {spmin:11.3f} µs  {kv['min']:11.3f} µs")
PY
done
[ -n "$vm" ] || exit 0
kill "$server" 2>/dev/null; server=

# The verbs half, in one boot of the rxe VM: ib_write_lat, then kvxfer serve + latency, at each size.
out=target/bench-latency
mkdir -p "$out"
cat > "$out/inner.sh" <<'INNER'
set -u
K=target/release/kvxfer
out=target/bench-latency
export KVXFER_TOKEN=bench-latency-token-0123456789
: > $out/rows.tsv
for size in 8 4096 65536; do
  timeout 300 ib_write_lat -d "$RXE_A_DEV" -x "$RXE_GID_INDEX" -u 18 -s $size -n $RXE_ITERS > $out/ibs.log 2>&1 & srv=$!
  sleep 2
  timeout 300 ib_write_lat -d "$RXE_B_DEV" -x "$RXE_GID_INDEX" -u 18 -s $size -n $RXE_ITERS "$RXE_A_IP" > $out/ibc-$size.log 2>&1
  wait $srv
  # " #bytes #iterations t_min t_max t_typical t_avg ...": t_typical is the median.
  ib=$(awk -v b=$size '$1 == b && NF >= 5 {print $5}' $out/ibc-$size.log | tail -n 1)
  inl=$(sed -n 's/.*Max inline data *: *\([0-9]*\).*/\1/p' $out/ibc-$size.log | head -n 1)
  echo -e "$size\t${ib:-nan}\t${inl:-?}" >> $out/rows.tsv
done
# kvxfer inlines what ib_write_lat did: perftest turns inline off on devices it does not know (rxe among them).
inline=$(sed -n 's/.*Max inline data *: *\([0-9]*\).*/\1/p' $out/ibc-8.log | head -n 1)
port=$((20000 + RANDOM % 20000))
timeout 600 $K serve --listen "$RXE_A_IP:$port" -d "$RXE_A_DEV" --once > $out/serve.log 2>&1 & srv=$!
timeout 600 $K latency --transport verbs --peer "$RXE_A_IP:$port" -d "$RXE_B_DEV" --ack-timeout 18 --inline ${inline:-0} \
  --sizes 8,4KiB,64KiB --iters $RXE_ITERS --json $out/kv.json > $out/latency.log 2>&1 ||
  { echo "kvxfer latency failed:"; cat $out/latency.log $out/serve.log; }
wait $srv
INNER
rm -f "$out/kv.json" "$out/rows.tsv"
RXE_ITERS=$rxe_iters RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-1500} scripts/rxe-vm -- bash "$out/inner.sh" >&2
python3 - "$out/rows.tsv" "$out/kv.json" <<'PY'
import json, math, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
try:
    kv = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    sys.exit("bench-latency: kvxfer latency wrote no results in the VM (its output is above)")
p50 = {c["size_bytes"]: c["latency_us"]["p50"] for c in kv["cases"]}
inline = kv["config"]["transport_detail"]["sender"]["inline"]
print(f"verbs on soft-RoCE (rxeB -> rxeA, one VM boot): kvxfer latency vs ib_write_lat; inline up to {inline} B (kvxfer), "
      f"{rows[0][2] if rows else '?'} B (ib_write_lat)")
print(f"{'size':>8}  {'ib_write_lat p50':>16}  {'kvxfer p50':>14}  {'ratio':>8}")
for size, ib, _ in rows:
    ib, k = float(ib), p50.get(int(size), math.nan)
    print(f"{size + ' B':>8}  {ib:13.3f} µs  {k:11.3f} µs  {k / ib:7.2f}×")
PY
