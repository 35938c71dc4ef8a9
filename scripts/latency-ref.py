# Reference for `kvxfer latency --transport cuda --src gpu:M --dst gpu:N`: the same GPU <-> GPU ping-pong written
# two ways a user would, timed on the host per exchange (half the round trip, as kvxfer reports it):
#   torch   b.copy_(a) then c.copy_(b), non_blocking, on one stream of gpu:M, then stream.synchronize(); also
#           timed by CUDA events around the two copies (the GPU's own view, no launch or wait on the host)
#   driver  cuMemcpyAsync(b <- a) and cuMemcpyAsync(c <- b) on that stream through ctypes, then a spin on
#           cuStreamQuery: what kvxfer does, minus Rust
# Prints per size the p50/p99 (µs) of each and writes them as JSON.
# Usage: python3 scripts/latency-ref.py SRC DST 8,4096,65536,1048576 ITERS WARMUP out.json
import ctypes, json, sys, time, torch

src, dst = int(sys.argv[1]), int(sys.argv[2])
sizes = [int(s) for s in sys.argv[3].split(",")]
iters, warmup = int(sys.argv[4]), int(sys.argv[5])
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
cuda.cuStreamQuery.argtypes = [ctypes.c_void_p]
NOT_READY = 600  # CUDA_ERROR_NOT_READY


def quantiles(half_ns):
    v = sorted(half_ns)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))] / 1e3
    return {"p50": q(0.5), "p99": q(0.99), "min": v[0] / 1e3}


out = {}
torch.cuda.set_device(src)
stream = torch.cuda.Stream(device=src)
for size in sizes:
    a = torch.full((size,), 0xA5, dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
    c = torch.empty(size, dtype=torch.uint8, device=f"cuda:{src}")
    res = {}
    # torch: host-timed exchanges, then event-timed ones.
    host, events = [], []
    with torch.cuda.stream(stream):
        for i in range(warmup + iters):
            t = time.perf_counter_ns()
            b.copy_(a, non_blocking=True); c.copy_(b, non_blocking=True); stream.synchronize()
            if i >= warmup:
                host.append((time.perf_counter_ns() - t) / 2)
        for i in range(warmup + iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(stream); b.copy_(a, non_blocking=True); c.copy_(b, non_blocking=True); e.record(stream)
            e.synchronize()
            if i >= warmup:
                events.append(s.elapsed_time(e) * 1e6 / 2)
    assert c[-1].item() == 0xA5 and c[0].item() == 0xA5, "torch's answer does not carry the message"
    res["torch"] = quantiles(host)
    res["torch_events"] = quantiles(events)
    # driver: the two copies and the spin, as kvxfer issues them (torch's copies above enabled peer access).
    c.zero_(); torch.cuda.synchronize(src)
    h, pa, pb, pc = stream.cuda_stream, a.data_ptr(), b.data_ptr(), c.data_ptr()
    drv = []
    for i in range(warmup + iters):
        t = time.perf_counter_ns()
        if cuda.cuMemcpyAsync(pb, pa, size, h) or cuda.cuMemcpyAsync(pc, pb, size, h):
            sys.exit("cuMemcpyAsync failed")
        while (r := cuda.cuStreamQuery(h)) == NOT_READY:
            pass
        if r:
            sys.exit(f"cuStreamQuery: error {r}")
        if i >= warmup:
            drv.append((time.perf_counter_ns() - t) / 2)
    assert c[-1].item() == 0xA5, "the driver copies' answer does not carry the message"
    res["driver"] = quantiles(drv)
    out[size] = res
    print(
        f"ref {size:>8} B gpu:{src}->gpu:{dst}: torch p50 {res['torch']['p50']:.2f} p99 {res['torch']['p99']:.2f} µs"
        f" (events p50 {res['torch_events']['p50']:.2f}), driver p50 {res['driver']['p50']:.2f}"
        f" p99 {res['driver']['p99']:.2f} µs",
        flush=True,
    )
    del a, b, c
json.dump(out, open(sys.argv[6], "w"), indent=1)
