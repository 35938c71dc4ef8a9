#!/usr/bin/env python3
"""kvxfer worker that drives Mooncake Transfer Engine.

kvxfer (Rust) starts one of these per side and talks JSON lines:
one request per line on stdin, exactly one reply line per request on the
original stdout, logs on stderr.  Requests:

  {"op":"init","host":"127.0.0.1","protocol":"tcp"|"rdma","device":""}
      -> {"ok":true,"session":"HOST:PORT","version":"...","protocol":"tcp"}
  {"op":"map","path":"/proc/PID/fd/N","len":L}
      -> {"ok":true,"addr":ADDR,"reg_ms":F}
  {"op":"plan","id":K,"src":[off...],"dst":[addr...],"len":[n...]}
      -> {"ok":true,"entries":N}
  {"op":"write","session":"HOST:PORT","plan":K}
      -> {"ok":true,"ns":NS}
  {"op":"close"} -> {"ok":true}, then exit 0.   EOF on stdin -> exit 0.

Any failure -> {"ok":false,"error":"..."} and the worker keeps going.
Python 3.10+, stdlib only besides the Mooncake wheel.
"""

import os
import sys

# The protocol lives on stdout, but the engine is C++ code that may print to
# fd 1 (glog, printf) behind Python's back.  Keep the real stdout on a private
# fd and point fd 1 at stderr *before* mooncake is imported, so nothing but
# our replies can ever reach kvxfer's reader.
_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import ctypes  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import time  # noqa: E402

try:
    from mooncake.engine import TransferEngine
except ImportError:
    print("kvxfer: the mooncake worker needs the Mooncake wheel: "
          "pip install mooncake-transfer-engine-non-cuda "
          "(GPU hosts: the CUDA wheel)", file=sys.stderr)
    sys.exit(3)


def mooncake_version() -> str:
    # The module has no __version__; ask whichever distribution installed the
    # `mooncake` package (CUDA wheel "mooncake-transfer-engine" or the
    # "-non-cuda" one).
    dists = importlib.metadata.packages_distributions().get("mooncake", [])
    for name in dists + ["mooncake-transfer-engine",
                         "mooncake-transfer-engine-non-cuda"]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


IB_SYSFS = "/sys/class/infiniband"


def rdma_problem(device: str) -> str | None:
    """Why protocol "rdma" cannot work here, or None.

    Mooncake's initialize() returns 0 even when it finds no HCA (it logs
    "Found 0 HCAs" and quietly moves data over TCP), so a benchmark asking for
    RDMA would report TCP numbers.  Check the devices ourselves first.
    """
    have = sorted(os.listdir(IB_SYSFS)) if os.path.isdir(IB_SYSFS) else []
    if not have:
        return (f"protocol rdma: no RDMA device in {IB_SYSFS} (Mooncake would "
                "silently fall back to TCP); load the HCA/rxe driver "
                "(e.g. rdma link add rxe0 type rxe netdev eth0) or use "
                "protocol tcp")
    missing = [d for d in device.split(",") if d and d not in have]
    if missing:
        return (f"protocol rdma: device {','.join(missing)} not found; "
                f"available: {','.join(have)}")
    return None


def engine_hcas(te) -> list[str]:
    # get_local_topology() returns {"cpu:N": [[preferred HCAs], [others]]}.
    # It is what the engine itself discovered, so it also catches devices that
    # exist in sysfs but that Mooncake skipped (port down, no GID, ...).
    # Costs about a second (it spins up a probe engine), so only used for rdma.
    topo = json.loads(te.get_local_topology(""))
    return sorted({h for lists in topo.values() for lst in lists for h in lst})


class Worker:
    def __init__(self):
        self.te = None
        self.mm = None        # the mmap of kvxfer's memfd; must stay alive
        self.cbuf = None      # ctypes view pinning mm, gives its address
        self.addr = 0
        self.plans = {}       # id -> (srcs, dsts, lens), absolute addresses

    def op_init(self, req):
        if self.te is not None:
            raise ValueError("init: already initialized")
        host = req["host"]
        protocol = req["protocol"]
        device = req.get("device", "") or ""
        if protocol not in ("tcp", "rdma"):
            raise ValueError(f"init: protocol must be tcp or rdma, "
                             f"not {protocol!r}")
        if protocol == "rdma":
            problem = rdma_problem(device)
            if problem:
                raise ValueError(problem)
        te = TransferEngine()
        # P2PHANDSHAKE: no metadata server; peers are named "host:rpc_port".
        rc = te.initialize(host, "P2PHANDSHAKE", protocol, device)
        if rc != 0:
            raise RuntimeError(f"init: TransferEngine.initialize returned {rc}")
        if protocol == "rdma":
            hcas = engine_hcas(te)
            wanted = [d for d in device.split(",") if d]
            if not hcas or any(d not in hcas for d in wanted):
                raise ValueError(
                    f"protocol rdma: Mooncake found HCAs {hcas or 'none'} "
                    f"(wanted {device or 'any'}), it would fall back to TCP; "
                    "check the port state (ibv_devinfo) or use protocol tcp")
        self.te = te
        return {"session": f"{host}:{te.get_rpc_port()}",
                "version": mooncake_version(), "protocol": protocol}

    def op_map(self, req):
        self._need_engine()
        if self.mm is not None:
            raise ValueError("map: a buffer is already mapped")
        length = int(req["len"])
        # The path is /proc/<kvxfer pid>/fd/<memfd>: opening it gives us the
        # same pages kvxfer sees, so it can fill / verify them directly.
        fd = os.open(req["path"], os.O_RDWR)
        try:
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the memory alive
        cbuf = (ctypes.c_char * length).from_buffer(mm)
        addr = ctypes.addressof(cbuf)
        t0 = time.perf_counter_ns()
        rc = self.te.register_memory(addr, length)
        reg_ns = time.perf_counter_ns() - t0
        if rc != 0:
            del cbuf
            mm.close()
            raise RuntimeError(f"map: register_memory returned {rc}")
        self.mm, self.cbuf, self.addr = mm, cbuf, addr
        return {"addr": addr, "reg_ms": reg_ns / 1e6}

    def op_plan(self, req):
        if self.mm is None:
            raise ValueError("plan: map a buffer first")
        src, dst, lens = req["src"], req["dst"], req["len"]
        if not (len(src) == len(dst) == len(lens)):
            raise ValueError("plan: src, dst and len differ in length")
        size = len(self.mm)
        for off, n in zip(src, lens):
            if off < 0 or n <= 0 or off + n > size:
                raise ValueError(f"plan: src entry {off}+{n} outside the "
                                 f"{size}-byte buffer")
        # Build the final lists now so the timed call does no Python work.
        self.plans[req["id"]] = ([self.addr + int(o) for o in src],
                                 [int(d) for d in dst],
                                 [int(n) for n in lens])
        return {"entries": len(src)}

    def op_write(self, req):
        self._need_engine()
        srcs, dsts, lens = self.plans[req["plan"]]
        session = req["session"]
        t0 = time.perf_counter_ns()
        rc = self.te.batch_transfer_sync_write(session, srcs, dsts, lens)
        ns = time.perf_counter_ns() - t0
        if rc != 0:
            raise RuntimeError(f"write: batch_transfer_sync_write to "
                               f"{session} returned {rc}")
        return {"ns": ns}

    def op_close(self, req):
        if self.te is not None and self.mm is not None:
            self.te.unregister_memory(self.addr)
        return {}

    def _need_engine(self):
        if self.te is None:
            raise ValueError("send init first")


def reply(obj):
    _PROTO.write(json.dumps(obj, separators=(",", ":")) + "\n")


def main():
    w = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        op = None
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise ValueError(f"bad request: not JSON ({e})") from None
            if not isinstance(req, dict):
                raise ValueError("bad request: expected a JSON object")
            op = req["op"]
            handler = getattr(w, f"op_{op}", None)
            if handler is None:
                raise ValueError(f"unknown op {op!r}")
            reply({"ok": True, **handler(req)})
        except KeyError as e:
            reply({"ok": False, "error": f"{op or 'request'}: missing or "
                   f"unknown {e}"})
        except Exception as e:  # noqa: BLE001 - every error becomes a reply
            reply({"ok": False, "error": " ".join(str(e).split()) or
                   type(e).__name__})
        if op == "close":
            # Exit without tearing down engine threads in the interpreter's
            # shutdown, which is where C++ extensions tend to crash.
            _PROTO.flush()
            os._exit(0)
    os._exit(0)  # EOF: kvxfer is gone or done; leave quietly


if __name__ == "__main__":
    main()
