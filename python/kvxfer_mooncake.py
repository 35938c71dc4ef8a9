#!/usr/bin/env python3
"""kvxfer worker that drives Mooncake Transfer Engine.

kvxfer (Rust) starts one of these per side and talks JSON lines:
one request per line on stdin, exactly one reply line per request on the
original stdout, logs on stderr.  Requests:

  {"op":"init","host":"127.0.0.1","protocol":"tcp"|"rdma"|"nvlink-intra",
   "device":""}
      -> {"ok":true,"session":"HOST:PORT","version":"...","protocol":"tcp",
          "transport":"tcp"}
  {"op":"map","path":"/proc/PID/fd/N","len":L}   (host memory: kvxfer's memfd)
      -> {"ok":true,"addr":ADDR,"reg_ms":F}
  {"op":"alloc","gpu":N,"len":L}                  (GPU memory, owned here)
      -> {"ok":true,"addr":ADDR,"reg_ms":F,"ipc":"HEX"}
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


# The engine ignores initialize()'s protocol when it picks its transport (the
# protocol only selects a memory allocator): it auto-discovers, and installs
# RDMA whenever it sees an HCA, NVLink when a CUDA build sees none, TCP
# otherwise. So each protocol is asked for through the engine's environment,
# before initialize(), and then checked in what the engine logged.
PROTOCOL_ENV = {
    "tcp": {"MC_FORCE_TCP": "1"},
    "rdma": {},
    "nvlink-intra": {"MC_INTRANODE_NVLINK": "1"},
}
# What the engine logs when it installs each transport.
INSTALLED_MARKS = {
    "tcp": ("MC_FORCE_TCP is set, using TCP transport only",),
    "rdma": ("installTransport, type=rdma", "type=rdma"),
    "nvlink-intra": ("Using Intra-Node NVLink transport",),
}
# The name initialize() knows the protocol by (it picks the allocator).
ENGINE_NAME = {"tcp": "tcp", "rdma": "rdma", "nvlink-intra": "nvlink_intra"}


def own_log() -> str:
    """What this process has written to stderr so far (kvxfer sends it to a
    file), where the engine's glog lines are."""
    try:
        with open(os.readlink("/proc/self/fd/2"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cuda_runtime():
    """The CUDA runtime the engine was built against, or None for a wheel
    built without CUDA (which must never be handed a device pointer: its TCP
    transport would read it as host memory)."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    for name in ("libcudart.so.13", "libcudart.so.12"):
        if name in maps:
            return ctypes.CDLL(name)
    return None


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def cuda_call(rt, what, rc):
    if rc != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        text = rt.cudaGetErrorString(rc).decode(errors="replace")
        raise RuntimeError(f"{what} failed: {text} ({rc})")


class Worker:
    def __init__(self):
        self.te = None
        self.mm = None        # the mmap of kvxfer's memfd; must stay alive
        self.cbuf = None      # ctypes view pinning mm, gives its address
        self.gpu = None       # (runtime, pointer) of a GPU allocation
        self.addr = 0
        self.size = 0
        self.plans = {}       # id -> (srcs, dsts, lens), absolute addresses

    def op_init(self, req):
        if self.te is not None:
            raise ValueError("init: already initialized")
        host = req["host"]
        protocol = req["protocol"]
        device = req.get("device", "") or ""
        if protocol not in PROTOCOL_ENV:
            raise ValueError(f"init: protocol must be one of "
                             f"{', '.join(PROTOCOL_ENV)}, not {protocol!r}")
        if protocol == "rdma":
            problem = rdma_problem(device)
            if problem:
                raise ValueError(problem)
        for key in ("MC_FORCE_TCP", "MC_INTRANODE_NVLINK", "MC_FORCE_MNNVL"):
            os.environ.pop(key, None)
        os.environ.update(PROTOCOL_ENV[protocol])
        te = TransferEngine()
        # P2PHANDSHAKE: no metadata server; peers are named "host:rpc_port".
        rc = te.initialize(host, "P2PHANDSHAKE", ENGINE_NAME[protocol], device)
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
        elif not any(m in own_log() for m in INSTALLED_MARKS[protocol]):
            hint = (" (this Mooncake build has no intra-node NVLink "
                    "transport: the CUDA wheel mooncake-transfer-engine-cuda13 "
                    "has it)" if protocol == "nvlink-intra" else "")
            raise ValueError(f"protocol {protocol}: the engine did not log "
                             f"installing it{hint}")
        self.te = te
        return {"session": f"{host}:{te.get_rpc_port()}",
                "version": mooncake_version(), "protocol": protocol}

    def op_map(self, req):
        self._need_unmapped()
        length = int(req["len"])
        # The path is /proc/<kvxfer pid>/fd/<memfd>: opening it gives us the
        # same pages kvxfer sees, so it can fill / verify them directly.
        fd = os.open(req["path"], os.O_RDWR)
        try:
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the memory alive
        self.cbuf = (ctypes.c_char * length).from_buffer(mm)
        self.mm = mm
        return self._register(ctypes.addressof(self.cbuf), length)

    def op_alloc(self, req):
        # GPU memory is allocated here, as a serving engine's KV cache lives
        # in the process that registers it: Mooncake's NVLink transport
        # exports what it registers with cudaIpcGetMemHandle, which refuses
        # memory that was itself opened from another process's handle.
        # kvxfer opens the handle returned here to fill and verify.
        self._need_unmapped()
        ordinal, length = int(req["gpu"]), int(req["len"])
        rt = cuda_runtime()
        if rt is None:
            raise ValueError(
                "alloc: GPU memory needs the CUDA build of Mooncake (pip "
                "install mooncake-transfer-engine-cuda13, or "
                "mooncake-transfer-engine for CUDA 12); this one has no CUDA")
        cuda_call(rt, f"cudaSetDevice({ordinal})", rt.cudaSetDevice(ordinal))
        ptr = ctypes.c_void_p()
        cuda_call(rt, f"cudaMalloc({length})",
                  rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(length)))
        self.gpu = (rt, ptr)
        handle = IpcHandle()
        cuda_call(rt, "cudaIpcGetMemHandle",
                  rt.cudaIpcGetMemHandle(ctypes.byref(handle), ptr))
        reply = self._register(ptr.value, length)
        reply["ipc"] = ctypes.string_at(ctypes.addressof(handle), 64).hex()
        return reply

    def _register(self, addr, length):
        t0 = time.perf_counter_ns()
        rc = self.te.register_memory(addr, length)
        reg_ns = time.perf_counter_ns() - t0
        if rc != 0:
            raise RuntimeError(f"register_memory returned {rc}")
        self.addr, self.size = addr, length
        return {"addr": addr, "reg_ms": reg_ns / 1e6}

    def _need_unmapped(self):
        self._need_engine()
        if self.size or self.gpu:
            raise ValueError("a buffer is already mapped")

    def op_plan(self, req):
        if not self.size:
            raise ValueError("plan: map a buffer first")
        src, dst, lens = req["src"], req["dst"], req["len"]
        if not (len(src) == len(dst) == len(lens)):
            raise ValueError("plan: src, dst and len differ in length")
        size = self.size
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
        if self.te is not None and self.size:
            self.te.unregister_memory(self.addr)
        if self.gpu is not None:
            rt, ptr = self.gpu
            rt.cudaFree(ptr)
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
