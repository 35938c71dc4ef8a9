#!/usr/bin/env bash
# scripts/bench-tcp.sh -- kvxfer's TCP transport against iperf3 on loopback, in one run.
#
#   1. iperf3 server on 127.0.0.1 + a single-stream client for IPERF_SECS seconds  -> GB/s (10^9 bytes/s)
#   2. /usr/bin/time -v target/release/kvxfer sweep --sizes $SIZE --reps $REPS     -> p50 GB/s, peak RSS
#   3. the same sweep with each combination of paths forced: KVXFER_TCP_SPLICE=1 (zero-copy) or =0 (the kernel
#      copies every byte into socket buffers) x KVXFER_TCP_RECV=direct (the kernel copies into the region) or
#      =bounce (into a cached buffer, then streaming stores); step 2 uses the paths kvxfer calibrates at connection
#      time
#
# Prints both bandwidths, their ratio (target >= 0.9) and the sweep's peak RSS against 2 x size + 64 MiB (sender
# buffer + receiver buffer + slack). Installs iperf3 / time from apt when missing and builds the release binary.
#
# Usage (repository root or anywhere; run as root or with sudo for the apt step):
#   scripts/bench-tcp.sh
#   SIZE=512MiB REPS=10 IPERF_SECS=10 scripts/bench-tcp.sh
#   STRICT=1 scripts/bench-tcp.sh      # exit 1 when a target is missed
#   KVXFER=path/to/kvxfer scripts/bench-tcp.sh   # that binary, without building (a machine without cargo)
#   scripts/bench-tcp.sh --quick       # every step at 16 MiB, 2 reps, 1 s of iperf3 (scripts/test runs it): proves the
#                                      # script works, its figures mean nothing
set -euo pipefail

if [ "${1:-}" = --quick ]; then
    SIZE=${SIZE:-16MiB} REPS=${REPS:-2} IPERF_SECS=${IPERF_SECS:-1}
fi
SIZE=${SIZE:-1GiB}
REPS=${REPS:-5}
IPERF_SECS=${IPERF_SECS:-5}
STRICT=${STRICT:-0}

cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { printf '%s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

apt_updated=0
apt_install() {
    if [ "$apt_updated" -eq 0 ]; then
        say "bench-tcp: apt-get update"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        apt_updated=1
    fi
    say "bench-tcp: apt-get install $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v iperf3 >/dev/null || apt_install iperf3
[ -x /usr/bin/time ] || apt_install time
command -v python3 >/dev/null || apt_install python3
# json_get FILE a.0.b -> the value at that path (list indices as numbers).
json_get() {
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(v)' "$1" "$2"
}

if [ -z "${KVXFER:-}" ]; then
    say "bench-tcp: cargo build --release"
    cargo build --release --quiet
    KVXFER="$ROOT/target/release/kvxfer"
fi

WORK=$(mktemp -d /tmp/bench-tcp.XXXXXX)
IPERF_PID=""
cleanup() {
    if [ -n "$IPERF_PID" ]; then kill "$IPERF_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# A free loopback port for iperf3.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# ---------------------------------------------------------------------------------------------- iperf3
say "bench-tcp: iperf3 single stream on 127.0.0.1:$PORT for ${IPERF_SECS}s"
iperf3 -s -B 127.0.0.1 -p "$PORT" >"$WORK/iperf3-server.log" 2>&1 &
IPERF_PID=$!
# Wait until the server listens (a probe connection would use up a one-off server, so look, don't knock).
listening() { grep -qi ":$(printf '%04X' "$PORT") 00000000:0000 0A" /proc/net/tcp; }
for _ in $(seq 300); do listening && break; sleep 0.1; done
listening || { cat "$WORK/iperf3-server.log" >&2; say "bench-tcp: iperf3 server did not start"; exit 1; }
iperf3 -c 127.0.0.1 -p "$PORT" -t "$IPERF_SECS" -P 1 -J >"$WORK/iperf3.json" || {
    cat "$WORK/iperf3.json" >&2
    say "bench-tcp: iperf3 client failed"
    exit 1
}
kill "$IPERF_PID" 2>/dev/null || true
wait "$IPERF_PID" 2>/dev/null || true
IPERF_PID=""
IPERF_BPS=$(json_get "$WORK/iperf3.json" end.sum_received.bits_per_second)
IPERF_GBPS=$(python3 -c "print(f'{$IPERF_BPS / 8 / 1e9:.3f}')")

# ---------------------------------------------------------------------------------------------- kvxfer
# kv_sweep NAME [VAR=VALUE...]: one sweep under /usr/bin/time -v, outputs in $WORK/NAME.*
kv_sweep() {
    local name=$1; shift
    env "$@" /usr/bin/time -v -o "$WORK/$name.time" \
        "$KVXFER" sweep --sizes "$SIZE" --reps "$REPS" \
        --json "$WORK/$name.json" --md "$WORK/$name.md" --out-dir "$WORK" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || {
        cat "$WORK/$name.out" "$WORK/$name.err" >&2
        say "bench-tcp: kvxfer sweep ($name) failed"
        exit 1
    }
}
say "bench-tcp: kvxfer sweep --sizes $SIZE --reps $REPS (default: the paths it calibrates)"
kv_sweep kvxfer -u KVXFER_TCP_SPLICE -u KVXFER_TCP_RECV
cat "$WORK/kvxfer.out"
grep 'tcp paths' "$WORK/kvxfer.err" >&2 || true
# Every combination forced, for reference: zero-copy splice or plain writes (the kernel copies every byte into
# socket buffers) on the send side; straight into the region or through the bounce buffer on the receive side.
FORCED=()
for send in 1 0; do
    for recv in direct bounce; do
        say "bench-tcp: kvxfer sweep again with KVXFER_TCP_SPLICE=$send KVXFER_TCP_RECV=$recv"
        kv_sweep "kvxfer-$send-$recv" KVXFER_TCP_SPLICE=$send KVXFER_TCP_RECV=$recv
        FORCED+=("$send" "$recv" "$(json_get "$WORK/kvxfer-$send-$recv.json" cases.0.gbps.p50)")
    done
done
KV_GBPS=$(json_get "$WORK/kvxfer.json" cases.0.gbps.p50)
PATHS="$(json_get "$WORK/kvxfer.json" config.transport_detail.sender.send)+$(json_get "$WORK/kvxfer.json" config.transport_detail.sender.recv)"
SIZE_BYTES=$(json_get "$WORK/kvxfer.json" cases.0.size_bytes)
RSS_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/kvxfer.time")
WALL=$(sed -n 's/.*Elapsed (wall clock).*): //p' "$WORK/kvxfer.time")

python3 - "$IPERF_GBPS" "$KV_GBPS" "$RSS_KB" "$SIZE_BYTES" "$WALL" "$STRICT" "$SIZE" "$REPS" "$IPERF_SECS" \
    "$PATHS" "${FORCED[@]}" <<'EOF'
import sys
iperf, kv, rss_kb, size, wall, strict = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
size_txt, reps, secs, paths = sys.argv[7], sys.argv[8], sys.argv[9], sys.argv[10]
forced = [(sys.argv[i], sys.argv[i + 1], float(sys.argv[i + 2])) for i in range(11, len(sys.argv), 3)]
MiB = 1 << 20
ratio = kv / iperf
rss = rss_kb * 1024
target = 2 * size + 64 * MiB
ok_ratio, ok_rss = ratio >= 0.9, rss <= target
yes = lambda b: "MET" if b else "NOT MET"
print()
print(f"iperf3 single stream ({secs} s, loopback):   {iperf:8.3f} GB/s")
print(f"kvxfer sweep {size_txt} p50 (n={reps}), default: {kv:8.3f} GB/s   (calibrated at connection: send+receive {paths})")
print(f"ratio kvxfer / iperf3:                   {ratio:8.3f}   (target >= 0.9: {yes(ok_ratio)})")
for send, recv, gbps in forced:
    name = "zero-copy splice" if send == "1" else "plain writes"
    print(f"kvxfer forced KVXFER_TCP_SPLICE={send} KVXFER_TCP_RECV={recv:<6} ({name}, {recv}): {gbps:.3f} GB/s, ratio {gbps / iperf:.3f}")
print(f"kvxfer peak RSS:                         {rss / MiB:8.1f} MiB (target <= 2 x {size / MiB:.0f} MiB + 64 MiB = {target / MiB:.0f} MiB: {yes(ok_rss)})")
print(f"kvxfer sweep wall time:                  {wall:>8}")
print("GB/s = 10^9 bytes/s")
if strict and not (ok_ratio and ok_rss):
    sys.exit(1)
EOF
