# Reference for `kvxfer cluster --pattern bidir` over NVLink: two torch copy_ at once in opposite directions
# (gpu0 -> gpu1 on a stream of gpu0, gpu1 -> gpu0 on a stream of gpu1), started together, timed on the host
# after both streams finish. Prints per size: one direction alone and the bidirectional aggregate, p50 of 9 reps.
# Usage (2 GPUs, torch installed): python3 scripts/bidir-ref.py 100663296,1073741824,4294967296 out.json
import json, statistics, sys, time, torch
sizes = [int(s) for s in sys.argv[1].split(",")]
out = {}
for size in sizes:
    n = size // 2  # bf16 elements
    a0 = torch.ones(n, dtype=torch.bfloat16, device="cuda:0"); b1 = torch.empty(n, dtype=torch.bfloat16, device="cuda:1")
    a1 = torch.ones(n, dtype=torch.bfloat16, device="cuda:1"); b0 = torch.empty(n, dtype=torch.bfloat16, device="cuda:0")
    s0 = torch.cuda.Stream(device=0); s1 = torch.cuda.Stream(device=1)
    def uni():
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        t = time.perf_counter()
        with torch.cuda.stream(s0): b1.copy_(a0, non_blocking=True)
        s0.synchronize()
        return time.perf_counter() - t
    def bi():
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        t = time.perf_counter()
        with torch.cuda.stream(s0): b1.copy_(a0, non_blocking=True)
        with torch.cuda.stream(s1): b0.copy_(a1, non_blocking=True)
        s0.synchronize(); s1.synchronize()
        return time.perf_counter() - t
    for _ in range(2): uni(); bi()
    u = statistics.median(uni() for _ in range(9)); b = statistics.median(bi() for _ in range(9))
    out[size] = {"uni_gbps": size / u / 1e9, "bidir_aggregate_gbps": 2 * size / b / 1e9}
    print(f"torch {size >> 20} MiB: one direction {size / u / 1e9:.1f} GB/s, both at once {2 * size / b / 1e9:.1f} GB/s aggregate", flush=True)
    del a0, b1, a1, b0
json.dump(out, open(sys.argv[2], "w"), indent=1)
