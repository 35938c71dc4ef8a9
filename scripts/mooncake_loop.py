#!/usr/bin/env python3
"""The reference for kvxfer's mooncake harness (scripts/bench-engines.sh): the same engine call kvxfer makes,
batch_transfer_sync_write of BATCH entries of BLOCK bytes between two engines on loopback, driven by a bare Python
loop through the same worker (python/kvxfer_mooncake.py) with no kvxfer around it. Prints one JSON line:
{"gbps": aggregate (all bytes over all calls' time), "p50_gbps": ..., "batches": N}.

usage: mooncake_loop.py PYTHON_WITH_WHEEL BATCHES BLOCK BATCH
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

py, batches, block, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "kvxfer_mooncake.py")
size = block * batch
logs = tempfile.TemporaryDirectory(prefix="mooncake-loop-")


def start(name):
    # The worker's stderr goes to a file, as kvxfer sends it: the worker reads the engine's log lines back from
    # its own stderr to check which transport the engine installed.
    log = open(os.path.join(logs.name, f"{name}.log"), "w")
    p = subprocess.Popen([py, worker], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    p.log = log.name
    return p


def call(p, req):
    p.stdin.write(json.dumps(req) + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    reply = json.loads(line) if line else {"error": "the worker exited"}
    if not reply.get("ok"):
        with open(p.log, errors="replace") as f:
            sys.stderr.write("".join(f.readlines()[-15:]))
        sys.exit(f"mooncake_loop: {req['op']}: {reply.get('error')} (the worker's log above)")
    return reply


# Shared buffers, as kvxfer makes them: memory files both this process and the workers map.
fds = []
for _ in range(2):
    fd = os.memfd_create("mooncake-loop")
    os.ftruncate(fd, size)
    fds.append(fd)
rx, tx = start("receiver"), start("sender")
session = call(rx, {"op": "init", "host": "127.0.0.1", "protocol": "tcp", "device": ""})["session"]
raddr = call(rx, {"op": "map", "path": f"/proc/{os.getpid()}/fd/{fds[0]}", "len": size})["addr"]
call(tx, {"op": "init", "host": "127.0.0.1", "protocol": "tcp", "device": ""})
call(tx, {"op": "map", "path": f"/proc/{os.getpid()}/fd/{fds[1]}", "len": size})
call(tx, {"op": "plan", "id": 1, "src": [i * block for i in range(batch)],
          "dst": [raddr + i * block for i in range(batch)], "len": [block] * batch})
# One untimed call opens the connection, as kvxfer's warm-up rep does.
call(tx, {"op": "write", "session": session, "plan": 1})
ns = [call(tx, {"op": "write", "session": session, "plan": 1})["ns"] for _ in range(batches)]
print(json.dumps({"gbps": batches * size / sum(ns), "p50_gbps": size / statistics.median(ns), "batches": batches}))
for p in (tx, rx):
    p.stdin.close()
    p.wait()
