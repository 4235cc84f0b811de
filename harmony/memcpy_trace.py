"""Swap volume as the GPU saw it: CUDA memcpy bytes of one training step, from torch.profiler.

Every system is measured the same way, whether or not its copies go through our counters (FSDP2 and
DeepSpeed do not): run one steady-state iteration under torch.profiler with CUDA activity, export the
Kineto trace, and add up the `bytes` of its `gpu_memcpy` events by kind. The kinds are the CUPTI names
that Kineto prints ("Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy PtoP
(Device -> Device)", "Memcpy DtoD (Device -> Device)"):

  h2d  host -> GPU        d2h  GPU -> host        p2p  GPU -> other GPU (peer copy)       d2d  on one GPU

What it cannot see: NCCL collectives and NCCL send/recv run as kernels, not memcpy activities, so
all-reduce and NCCL point-to-point traffic are absent (our runtime counts them itself); copies a CPU
thread makes without CUDA are absent too. Pageable copies are reported separately as well
(`h2d_pageable`, `d2h_pageable`), since they are 5-7x slower than pinned ones on the lent machines.

`measure_memcpy_bytes(step_fn)` returns {"h2d", "d2h", "p2p", "d2d", "h2d_pageable", "d2h_pageable",
"count", "source", "timeline"} for one call of step_fn; without CUDA it runs step_fn un-profiled and returns
None for every kind with source "unavailable: ..." (and no timeline). `timeline` is where the iteration's
time went on this process's GPU, from the same trace (harmony.timeline: wall, compute busy/idle, copy busy
per direction, copy/compute overlap, NCCL, top kernels); `sum_traces` keeps one per rank as `timelines`.
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from typing import Any, Callable

KINDS = ("h2d", "d2h", "p2p", "d2d")
_CUPTI = {"htod": "h2d", "dtoh": "d2h", "ptop": "p2p", "dtod": "d2d"}


def classify(name: str) -> str | None:
    """'Memcpy HtoD (Pinned -> Device)' -> 'h2d'; None for anything that is not a memcpy of a known kind."""
    parts = name.split()
    if len(parts) < 2 or parts[0].lower() != "memcpy":
        return None
    return _CUPTI.get(parts[1].lower())


def memcpy_bytes_from_trace(trace: dict | list) -> dict:
    """Sum memcpy bytes per kind from a Chrome/Kineto trace (the dict `export_chrome_trace` writes)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out: dict[str, Any] = {k: 0 for k in KINDS}
    out.update(h2d_pageable=0, d2h_pageable=0, count=0)
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") not in ("X", None):
            continue
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        if cat and cat != "gpu_memcpy" and not name.startswith("Memcpy"):
            continue
        kind = classify(name)
        if kind is None:
            continue
        nbytes = (ev.get("args") or {}).get("bytes")
        if nbytes is None:
            continue
        out[kind] += int(nbytes)
        out["count"] += 1
        if kind in ("h2d", "d2h") and "pageable" in name.lower():
            out[f"{kind}_pageable"] += int(nbytes)
    return out


def measure_memcpy_bytes(step_fn: Callable[[], Any], keep_trace: str | None = None,
                         host_ops: bool = False) -> dict:
    """Run `step_fn()` once under torch.profiler (CUDA activity) and return memcpy bytes per kind.

    The caller makes `step_fn` one steady-state iteration (after warm-up) and excludes it from timing:
    the profiler slows it down. `keep_trace`: also write the trace (.json or .json.gz) there. `host_ops`:
    record CPU activity too (torch ops, autograd), so the timeline's `cpu_ops_top` and `host_threads`
    cover the host's own work and not only its CUDA API calls; it slows the iteration further.
    """
    import torch

    if not torch.cuda.is_available():
        step_fn()
        return unavailable("no CUDA device (memcpy activity is a CUDA profiler feature)")
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if host_ops else [])
    with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
        t0 = time.perf_counter()
        step_fn()
        torch.cuda.synchronize()
        wall_s = time.perf_counter() - t0
    fd, path = tempfile.mkstemp(prefix="memcpy_trace.", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
        if keep_trace:
            opener = gzip.open if keep_trace.endswith(".gz") else open
            with opener(keep_trace, "wt") as f:
                json.dump(trace, f)
    finally:
        os.unlink(path)
    out = memcpy_bytes_from_trace(trace)
    out["source"] = ("torch.profiler CUDA memcpy activity, one iteration"
                     + (" (CPU activity traced too)" if host_ops else ""))
    try:
        from harmony.timeline import timeline_from_trace
        out["timeline"] = timeline_from_trace(trace, wall_s=wall_s)
    except Exception as e:  # noqa: BLE001 - a diagnostic must not lose the bytes or the run
        out["timeline"] = {"error": f"{type(e).__name__}: {e}", "wall_s": wall_s}
    return out


def unavailable(reason: str) -> dict:
    """The record of a trace that was not taken: every kind null, and why."""
    return {**{k: None for k in KINDS}, "h2d_pageable": None, "d2h_pageable": None, "count": 0,
            "source": f"unavailable: {reason}"}


def sum_traces(traces: list[dict]) -> dict:
    """One record for several processes' traces of the same iteration (one per GPU): bytes per kind summed
    (null if any is null), `ranks` = how many were summed, `timelines` = each one's `timeline` in the given
    (rank) order, null where a trace has none (present only if one has); other fields from the first."""
    out = dict(traces[0])
    for k in (*KINDS, "h2d_pageable", "d2h_pageable", "count"):
        vals = [t.get(k) for t in traces]
        out[k] = None if any(v is None for v in vals) else sum(vals)
    out["ranks"] = len(traces)
    timelines: list = []
    for t in traces:
        timelines += t["timelines"] if "timelines" in t else [t.get("timeline")]
    out.pop("timeline", None)
    out.pop("timelines", None)
    if any(tl is not None for tl in timelines):
        out["timelines"] = timelines
    return out


def agreement(counted: dict, traced: dict, kinds=("h2d", "d2h", "p2p")) -> dict:
    """Relative difference |counted - traced| / max(traced, 1) per kind (None where either is unknown).
    The acceptance bar for our own counters is 0.01."""
    out = {}
    for k in kinds:
        c, t = counted.get(k), traced.get(k)
        out[k] = None if c is None or t is None else abs(c - t) / max(t, 1)
    return out
