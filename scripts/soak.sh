#!/usr/bin/env bash
# Soak: one `kvxfer serve` on loopback takes N verified sessions of mixed sizes and layouts (default 1000)
# while a second process throws 2N hostile connections at it (silence, garbage, oversized and truncated frames,
# wrong-token handshakes, strangers on nothing at all), interleaved. serve's RSS and open fds are read after a
# warm-up of N/10 sessions (with hostile connections already coming: the allocator's arenas for handshake threads
# and the first sessions' buffers settle there) and at the end; the script fails when either grew by more than 10%,
# or when any session failed. RSS is also printed every 100 sessions: a leak grows with them, a warm-up does not.
#   scripts/soak.sh [SESSIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
cargo build --release --quiet
K=$PWD/target/release/kvxfer
t=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$("$K" token)
"$K" serve --listen "127.0.0.1:$port" --token "$token" --io-timeout 10s > "$t/serve.log" 2>&1 &
serve=$!
trap 'kill $serve $hostile 2>/dev/null || true; rm -rf "$t"' EXIT
hostile=
until grep -q "listening on" "$t/serve.log"; do kill -0 $serve; sleep 0.05; done
rss() { awk '/VmRSS/ { print $2 }' /proc/$serve/status; }
fds() { ls /proc/$serve/fd | wc -l; }
send() {
    local i=$1 layout=()
    case $((i % 4)) in
        0) layout=(--sizes 1MiB) ;;
        1) layout=(--sizes 16MiB,4MiB) ;;
        2) layout=(--layout paged --tokens 64,256 --model qwen3-30b-a3b) ;;
        3) layout=(--sizes 64MiB --streams 2) ;;
    esac
    KVXFER_TOKEN=$token "$K" send --peer "127.0.0.1:$port" "${layout[@]}" --reps 2 --verify \
        --connect-timeout 30s > "$t/send.log" 2>&1 || { cat "$t/send.log" >&2; echo "soak: session $i failed" >&2; exit 1; }
}
python3 - "$port" "$((2 * n))" > "$t/hostile.log" 2>&1 <<'PY' &
import os, random, socket, struct, sys, time
port, total = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(7)
def frame(b): return struct.pack(">I", len(b)) + b
kinds = [
    lambda: b"",                                              # connect, say nothing, close
    lambda: bytes(rng.getrandbits(8) for _ in range(512)),     # garbage
    lambda: b"\xff\xff\xff\xff" + b"x" * 64,                  # a huge length prefix
    lambda: struct.pack(">I", 5000) + b"y" * 100,             # a frame over the pre-auth limit, truncated
    lambda: frame(b'{"type":"hello","magic":"kvxfer","protocol":8,"version":"x","nonce":"' + b"00" * 16 + b'"}')
            + frame(b'{"type":"proof","proof":"' + b"11" * 32 + b'"}'),   # a wrong-token handshake
    lambda: frame(b'{"type":"finish"}'),                      # the wrong first message
]
done = 0
while done < total:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(kinds[done % len(kinds)]())
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
    except OSError as e:
        print("hostile connection", done, e)
    done += 1
    time.sleep(0.05)
print("hostile connections:", done)
PY
hostile=$!
for i in $(seq 1 $((n / 10 > 10 ? n / 10 : 10))); do send "$i"; done
rss0=$(rss); fds0=$(fds)
printf 'soak: after the warm-up, serve RSS %d KiB, %d fds\n' "$rss0" "$fds0" >&2
start=$EPOCHREALTIME
for i in $(seq 1 "$n"); do
    send "$i"
    [ $((i % 100)) -eq 0 ] && printf 'soak: %d/%d sessions, serve RSS %d KiB, %d fds\n' "$i" "$n" "$(rss)" "$(fds)" >&2
done
wait $hostile
hostile=
rss1=$(rss); fds1=$(fds)
kill -0 $serve
awk -v s="$start" -v e="$EPOCHREALTIME" -v n="$n" 'BEGIN { printf "soak: %d verified sessions in %.0f s\n", n, e - s }'
tail -n 1 "$t/hostile.log"
printf 'soak: serve RSS %d -> %d KiB (x%.3f), open fds %d -> %d\n' "$rss0" "$rss1" "$(awk -v a="$rss0" -v b="$rss1" 'BEGIN{print b/a}')" "$fds0" "$fds1"
awk -v a="$rss0" -v b="$rss1" -v f="$fds0" -v g="$fds1" 'BEGIN { exit !(b <= a * 1.1 && g <= f * 1.1) }' \
    || { echo "soak: serve grew by more than 10%" >&2; exit 1; }
echo "soak: ok"
