"""Can the memcpy trace skip its JSON? A probe for docs/performance.md entry 45 (run on a GPU, seconds).

harmony.memcpy_trace exports each traced iteration's Kineto trace as Chrome JSON, parses it back and sums
the `bytes` of its memcpy events. On resnet1026 the traced iteration costs up to 77 s more than an
untraced one, and on the CPU machine exporting and parsing 500,000 events alone took 3.6 s. The profiler
also hands its events over in memory (`prof.profiler.kineto_results.events()`), where a device event's
`metadata_json()` may carry the same `bytes`. This runs one copy-heavy step under the profiler and reports,
for both routes, the bytes per kind and the seconds each took, so that a later change can use the
in-memory route only if it gives the same bytes.

    python3 experiments/device/trace_probe.py [--copies 2000] [--mib 4] > probe.txt
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def in_memory_bytes(prof) -> dict:
    """memcpy bytes per kind from the profiler's in-memory events, summed as the exported trace's are
    (harmony.memcpy_trace.memcpy_bytes_from_trace); `without_bytes`: memcpy events that carry none."""
    from harmony.memcpy_trace import classify, memcpy_bytes_from_trace
    events, without = [], 0
    for ev in prof.profiler.kineto_results.events():
        if classify(ev.name()) is None:
            continue
        meta = (ev.metadata_json() or "").strip()
        try:
            nbytes = json.loads(meta if meta.startswith("{") else "{" + meta + "}").get("bytes")
        except ValueError:
            nbytes = None
        if nbytes is None:
            without += 1
        else:
            events.append({"name": ev.name(), "args": {"bytes": nbytes}})
    return {**memcpy_bytes_from_trace(events), "without_bytes": without}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, default=2000, help="H2D and D2H copies in the step (each)")
    p.add_argument("--mib", type=float, default=4.0, help="size of each copy")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    from torch.profiler import ProfilerActivity, profile

    from harmony.memcpy_trace import memcpy_bytes_from_trace
    n = int(args.mib * 2**20 // 4)
    host = torch.ones(n).pin_memory()
    dev = torch.empty(n, device="cuda")

    def step():
        for _ in range(args.copies):
            dev.copy_(host, non_blocking=True)
            host.copy_(dev, non_blocking=True)
            dev.mul_(1.0)                        # a kernel between copies, as in training
        torch.cuda.synchronize()
    step()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    t0 = time.perf_counter()
    mem = in_memory_bytes(prof)
    t1 = time.perf_counter()
    import os
    import tempfile
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    t2 = time.perf_counter()
    with open(path) as f:
        trace = json.load(f)
    t3 = time.perf_counter()
    chrome = memcpy_bytes_from_trace(trace)
    t4 = time.perf_counter()
    os.unlink(path)
    expect = args.copies * n * 4
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.copies} H2D + {args.copies} D2H copies "
          f"of {args.mib:g} MiB: {expect:,} bytes each way expected")
    print(f"in-memory events: {mem}  ({t1 - t0:.3f} s)")
    print(f"chrome trace:     {chrome}  (export {t2 - t1:.3f} s, json.load {t3 - t2:.3f} s, sum {t4 - t3:.3f} s, "
          f"{len(trace.get('traceEvents', []))} events)")
    same = all(mem[k] == chrome[k] for k in ("h2d", "d2h", "p2p", "d2d")) and mem["without_bytes"] == 0
    print(f"same bytes both ways: {same}; chrome trace h2d/d2h as expected: "
          f"{chrome['h2d'] == expect and chrome['d2h'] == expect}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
