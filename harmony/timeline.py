"""Where one iteration's time goes on the GPU, from the Kineto trace `harmony.memcpy_trace` already takes.

`measure_memcpy_bytes` profiles one steady-state iteration with CUDA activity; `timeline_from_trace` reads
the same trace events (Chrome format: `ph` "X", `cat`, `name`, `pid` = GPU index for GPU activity, `tid` =
stream, `ts`/`dur` in microseconds) and returns, for that process and its GPU:

  wall_s                 the profiled iteration's wall time (perf_counter around step + synchronize; the GPU
                         span when no wall time is given); gpu_span_s: first GPU activity start to last end
  compute_busy_s         union of the intervals of kernels that are not NCCL (memcpy/memset are not kernels)
  compute_idle_s         wall_s - compute_busy_s, and compute_idle_fraction = compute_idle_s / wall_s
  h2d/d2h/d2d/p2p_busy_s union of the memcpy intervals of each direction (harmony.memcpy_trace.classify)
  copy_busy_s            union of H2D and D2H; overlap_copy_compute_s: time a copy and a compute kernel run at once
  nccl_busy_s            union of NCCL kernels (name starts with "nccl" or contains "ncclDevKernel")
  memset_busy_s          union of memsets
  beside_nccl            the same kernels with and without an NCCL kernel resident on the GPU (a kernel is
                         "beside" when NCCL spans at least half of it; the same kernel = name, grid and block):
                         kernels (how many beside), compute_s (their time), compared (launch configurations
                         seen both ways, at least MIN_EACH times each), slowdown (their median time beside over
                         alone, weighted by the time beside; None when nothing compares). An NCCL kernel holds
                         SMs while it waits for its peer (docs/performance.md entry 46)
  kernels, nccl_kernels, memcpys, streams, devices
  top_kernels            the 8 kernel names (compute and NCCL) with the most total time: name (80 chars), total_s, count
  cpu_ops_top            the 8 CPU-side events with the most self time: name, cat, self_s, count. A trace of CUDA
                         activity only has CUDA runtime/driver calls (cudaStreamSynchronize, cudaLaunchKernel ...);
                         torch ops and record_function ranges appear only with CPU activity (`harmony run
                         --trace-host-ops`)
  host_threads           the 3 host threads with the most time inside traced calls (torch ops, CUDA runtime and
                         driver calls; nested calls counted once): thread, busy_s, calls, and top_calls (its
                         outermost calls with the most time: name, total_s, count). What a thread spends
                         outside them is Python and the runtime's own code, or waiting. `host_ops_traced` says
                         whether torch ops were in the trace: without them busy_s is only the CUDA API's time
  per_device             the busy fields per GPU, only when the process's trace shows more than one GPU

Unions count overlapping kernels on several streams once. `harmony timeline RUN.jsonl` prints them per rank.
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Iterable

from harmony.memcpy_trace import classify as memcpy_kind

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_CATS = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")
# what counts as a host thread's time inside a call: record_function ranges (user_annotation) and Python
# functions are left out, since they enclose Python code and would hide it
HOST_CALL_CATS = ("cpu_op", "cuda_runtime", "cuda_driver")
HOST_THREADS = 3
TOP_CALLS = 3       # a host thread's outermost calls kept, enough to tell the issue loop from autograd's thread
TOP = 8
NAME_CHARS = 80
MIN_EACH = 3        # beside_nccl compares a launch configuration seen at least this often each way


# --------------------------------------------------------------------------------------------------
# intervals
# --------------------------------------------------------------------------------------------------
def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same points (empty and reversed intervals dropped)."""
    out: list[list[float]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals: overlapping ones count once."""
    return sum(e - s for s, e in merge_intervals(intervals))


def intersection_length(a: Iterable[tuple[float, float]], b: Iterable[tuple[float, float]]) -> float:
    """Length of (union of a) ∩ (union of b)."""
    x, y = merge_intervals(a), merge_intervals(b)
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            total += hi - lo
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


# --------------------------------------------------------------------------------------------------
# events
# --------------------------------------------------------------------------------------------------
def gpu_event_kind(name: str, cat: str | None = None) -> str | None:
    """What a GPU activity is: "compute", "nccl", "h2d", "d2h", "d2d", "p2p", "memcpy_other" or "memset".
    `cat` is the trace category ("kernel", "gpu_memcpy", "gpu_memset"); None for an event known to be a GPU
    activity. Any other category (CPU ops, runtime calls, annotations) -> None."""
    c = (cat or "").lower()
    if c and c not in GPU_CATS:
        return None
    if c == "gpu_memcpy" or name.startswith("Memcpy"):
        return memcpy_kind(name) or "memcpy_other"
    if c == "gpu_memset" or name.startswith("Memset"):
        return "memset"
    if name.startswith("nccl") or "ncclDevKernel" in name:
        return "nccl"
    return "compute"


def _complete_events(trace: dict | list) -> list[dict]:
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        try:
            ts, dur = float(ev["ts"]), float(ev.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        out.append({"cat": str(ev.get("cat", "")), "name": str(ev.get("name", "")), "pid": ev.get("pid"),
                    "tid": ev.get("tid"), "s": ts * 1e-6, "e": (ts + max(dur, 0.0)) * 1e-6,
                    "launch": (str(args.get("grid")), str(args.get("block")))})
    return out


def beside_nccl(gpu: list[dict]) -> dict:
    """How the compute kernels ran while an NCCL kernel was resident, against the same kernels without
    (see the module docstring, `beside_nccl`)."""
    import bisect
    import statistics
    nccl = merge_intervals((ev["s"], ev["e"]) for ev in gpu if ev["kind"] == "nccl")
    starts = [s for s, _ in nccl]
    groups: dict = defaultdict(lambda: ([], []))
    n_beside, t_beside = 0, 0.0
    for ev in gpu:
        if ev["kind"] != "compute" or ev["e"] <= ev["s"]:
            continue
        covered, i = 0.0, max(bisect.bisect_right(starts, ev["s"]) - 1, 0)
        while i < len(nccl) and nccl[i][0] < ev["e"]:
            covered += max(0.0, min(ev["e"], nccl[i][1]) - max(ev["s"], nccl[i][0]))
            i += 1
        dur = ev["e"] - ev["s"]
        side = covered >= 0.5 * dur
        n_beside += side
        t_beside += dur if side else 0.0
        groups[(ev["name"], ev.get("launch"))][0 if side else 1].append(dur)
    num = den = 0.0
    compared = 0
    for with_, without in groups.values():
        if len(with_) >= MIN_EACH and len(without) >= MIN_EACH:
            mb, ma = statistics.median(with_), statistics.median(without)
            num += len(with_) * mb
            den += len(with_) * ma
            compared += 1
    return {"kernels": n_beside, "compute_s": _r(t_beside), "compared": compared,
            "slowdown": round(num / den, 4) if den > 0 else None}


def _r(x: float) -> float:
    return round(x, 9)


def _busy(gpu: list[dict], wall: float) -> dict:
    by: dict[str, list] = defaultdict(list)
    for ev in gpu:
        by[ev["kind"]].append((ev["s"], ev["e"]))
    compute = merge_intervals(by["compute"])
    copies = merge_intervals(by["h2d"] + by["d2h"])
    busy = union_length(compute)
    return {
        "compute_busy_s": _r(busy), "compute_idle_s": _r(wall - busy),
        "compute_idle_fraction": round((wall - busy) / wall, 4) if wall > 0 else None,
        **{f"{k}_busy_s": _r(union_length(by[k])) for k in ("h2d", "d2h", "d2d", "p2p")},
        "copy_busy_s": _r(union_length(copies)),
        "overlap_copy_compute_s": _r(intersection_length(copies, compute)),
        "nccl_busy_s": _r(union_length(by["nccl"])), "memset_busy_s": _r(union_length(by["memset"])),
        "kernels": len(by["compute"]), "nccl_kernels": len(by["nccl"]),
        "memcpys": sum(len(by[k]) for k in ("h2d", "d2h", "d2d", "p2p", "memcpy_other")),
    }


def cpu_self_times(events: list[dict]) -> list[dict]:
    """Top CPU-side events by self time (own duration minus the children nested in it on the same thread)."""
    threads: dict = defaultdict(list)
    for ev in events:
        if ev["cat"].lower() in CPU_CATS:
            threads[(ev["pid"], ev["tid"])].append(ev)
    agg: dict = {}
    for evs in threads.values():
        evs.sort(key=lambda ev: (ev["s"], -ev["e"]))
        selfs = [ev["e"] - ev["s"] for ev in evs]
        stack: list[int] = []
        for i, ev in enumerate(evs):
            while stack and evs[stack[-1]]["e"] <= ev["s"]:
                stack.pop()
            if stack:
                p = stack[-1]
                selfs[p] -= min(ev["e"], evs[p]["e"]) - ev["s"]
            stack.append(i)
        for ev, self_s in zip(evs, selfs):
            a = agg.setdefault(ev["name"], {"name": ev["name"][:NAME_CHARS], "cat": ev["cat"], "self_s": 0.0,
                                            "count": 0})
            a["self_s"] += max(self_s, 0.0)
            a["count"] += 1
    top = sorted(agg.values(), key=lambda a: -a["self_s"])[:TOP]
    return [dict(a, self_s=_r(a["self_s"])) for a in top]


def host_threads(events: list[dict]) -> list[dict]:
    """The HOST_THREADS threads with the most time inside torch ops and CUDA calls (their union per thread),
    each with the outermost calls that take most of it (`top_calls`: name, total_s, count), which tell the
    threads apart: the autograd engine's device thread runs `autograd::engine::evaluate_function: ...`."""
    threads: dict = defaultdict(list)
    for ev in events:
        if ev["cat"].lower() in HOST_CALL_CATS:
            threads[(ev["pid"], ev["tid"])].append(ev)
    out = []
    for key, evs in threads.items():
        evs.sort(key=lambda ev: (ev["s"], -ev["e"]))
        outer: dict = {}
        end = float("-inf")
        for ev in evs:
            if ev["s"] >= end:                # not nested in an earlier call of this thread
                o = outer.setdefault(ev["name"][:NAME_CHARS], [0.0, 0])
                o[0] += ev["e"] - ev["s"]
                o[1] += 1
                end = ev["e"]
            else:
                end = max(end, ev["e"])
        top = sorted(outer.items(), key=lambda kv: -kv[1][0])[:TOP_CALLS]
        out.append({"thread": str(key[1]), "busy_s": _r(union_length((ev["s"], ev["e"]) for ev in evs)),
                    "calls": len(evs), "top_calls": [{"name": n, "total_s": _r(t), "count": c} for n, (t, c) in top]})
    return sorted(out, key=lambda t: -t["busy_s"])[:HOST_THREADS]


def timeline_from_trace(trace: dict | list, wall_s: float | None = None) -> dict:
    """The timeline of one process's trace of one iteration (see the module docstring)."""
    events = _complete_events(trace)
    gpu = []
    for ev in events:
        kind = gpu_event_kind(ev["name"], ev["cat"]) if ev["cat"] else None
        if kind is not None:
            gpu.append(dict(ev, kind=kind))
    span = (max(ev["e"] for ev in gpu) - min(ev["s"] for ev in gpu)) if gpu else 0.0
    wall = wall_s if wall_s is not None else span
    kernels: dict = {}
    for ev in gpu:
        if ev["kind"] in ("compute", "nccl"):
            k = kernels.setdefault(ev["name"], [0.0, 0])
            k[0] += ev["e"] - ev["s"]
            k[1] += 1
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:TOP]
    devices = sorted({ev["pid"] for ev in gpu}, key=str)
    out = {
        "wall_s": _r(wall),
        "wall_source": ("perf_counter: profiled step + synchronize" if wall_s is not None
                        else "GPU span (no wall time given)"),
        "gpu_span_s": _r(span),
        **_busy(gpu, wall),
        "streams": len({(ev["pid"], ev["tid"]) for ev in gpu}),
        "devices": devices,
        "top_kernels": [{"name": n[:NAME_CHARS], "total_s": _r(t), "count": c} for n, (t, c) in top],
        "beside_nccl": beside_nccl(gpu),
        "cpu_ops_top": cpu_self_times(events),
        "host_threads": host_threads(events),
        "host_ops_traced": any(ev["cat"].lower() == "cpu_op" for ev in events),
    }
    if len(devices) > 1:
        out["per_device"] = {str(d): _busy([ev for ev in gpu if ev["pid"] == d], wall) for d in devices}
    return out


# --------------------------------------------------------------------------------------------------
# `harmony timeline RUN.jsonl`
# --------------------------------------------------------------------------------------------------
HOW = ("a timeline comes from a CUDA run with the memcpy trace on: baselines trace one iteration by default "
       "(`harmony baseline ...`, unless --no-memcpy-trace); `harmony run` needs --memcpy-trace and "
       "--iters >= WARMUP + 2")


def timelines_of(trace: dict | None) -> list[tuple[str, dict]]:
    """(label, timeline) per rank of a record's memcpy_trace: `timelines` (one per worker, rank order) in a
    summed record, `timeline` in one process's record."""
    if not trace:
        return []
    if trace.get("timelines"):
        return [(f"rank {r}", tl) for r, tl in enumerate(trace["timelines"]) if tl]
    if trace.get("timeline"):
        n = trace.get("ranks") or 1
        return [("rank 0" + (f" (of {n}; the record keeps rank 0's timeline only)" if n > 1 else ""),
                 trace["timeline"])]
    return []


def add_arguments(p) -> None:
    p.add_argument("run", help="run record (.jsonl) from `harmony run` or `harmony baseline`; or a Kineto trace .json")
    p.add_argument("--json", action="store_true", help="print the timelines as JSON")


def _load(path: str) -> tuple[dict | None, list[tuple[str, dict]]]:
    """(summary-ish record, timelines) of a run.jsonl; a Kineto trace .json(.gz) gives its own timeline."""
    import gzip
    from pathlib import Path
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: file not found")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "traceEvents" in whole:
        return None, [("trace", timeline_from_trace(whole))]
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    with_trace = [r for r in records if isinstance(r, dict) and r.get("memcpy_trace")]
    summaries = [r for r in with_trace if r.get("record") == "summary"]
    rec = (summaries or with_trace or [r for r in records if isinstance(r, dict) and r.get("record") == "summary"]
           or [None])[-1]
    return rec, timelines_of((rec or {}).get("memcpy_trace"))


def _s(x) -> str:
    return "-" if x is None else f"{x:.4f} s"


def _pct(x, wall) -> str:
    return f"{100 * x / wall:.1f}%" if x is not None and wall else "-"


def format_timeline(label: str, tl: dict) -> list[str]:
    if tl.get("error"):
        return [f"{label}: timeline failed: {tl['error']}"]
    w = tl.get("wall_s") or 0.0
    dev = tl.get("devices") or []
    lines = [f"{label}" + (f" (GPU {', '.join(map(str, dev))})" if dev else "")
             + f": wall {_s(w)} [{tl.get('wall_source', '')}], GPU span {_s(tl.get('gpu_span_s'))}",
             f"  compute busy {_s(tl.get('compute_busy_s'))} ({_pct(tl.get('compute_busy_s'), w)}), "
             f"idle {_s(tl.get('compute_idle_s'))} ({_pct(tl.get('compute_idle_s'), w)}); "
             f"{tl.get('kernels', 0):,} kernels on {tl.get('streams', 0)} streams",
             "  copies busy: "
             + ", ".join(f"{k.upper()} {_s(tl.get(f'{k}_busy_s'))}" for k in ("h2d", "d2h", "d2d", "p2p"))
             + f"; H2D|D2H {_s(tl.get('copy_busy_s'))}, overlapping compute {_s(tl.get('overlap_copy_compute_s'))}",
             f"  NCCL busy {_s(tl.get('nccl_busy_s'))} ({tl.get('nccl_kernels', 0)} kernels); "
             f"memset {_s(tl.get('memset_busy_s'))}"]
    b = tl.get("beside_nccl")
    if b and b.get("kernels"):
        lines.append(f"  beside a resident NCCL kernel: {b['kernels']:,} compute kernels, {_s(b['compute_s'])}; "
                     + (f"the same kernels (name, grid, block; {b['compared']} compared) took "
                        f"{b['slowdown']:.3f}x their time alone" if b.get("slowdown") else
                        "no kernel ran often enough both ways to compare"))
    for d, b in (tl.get("per_device") or {}).items():
        lines.append(f"  GPU {d}: compute busy {_s(b['compute_busy_s'])}, H2D {_s(b['h2d_busy_s'])}, "
                     f"D2H {_s(b['d2h_busy_s'])}, NCCL {_s(b['nccl_busy_s'])}")
    if tl.get("top_kernels"):
        lines.append("  top kernels (total time, share of wall, count):")
        lines += [f"    {k['total_s']:9.4f} s {_pct(k['total_s'], w):>6} x{k['count']:<6} {k['name']}"
                  for k in tl["top_kernels"]]
    if tl.get("cpu_ops_top"):
        lines.append("  CPU side, by self time:")
        lines += [f"    {c['self_s']:9.4f} s {_pct(c['self_s'], w):>6} x{c['count']:<6} {c['name']} [{c['cat']}]"
                  for c in tl["cpu_ops_top"]]
    if tl.get("host_threads"):
        inside = "torch ops and CUDA calls" if tl.get("host_ops_traced") else "CUDA API calls (no torch ops traced)"
        lines.append(f"  host threads, time inside {inside}; the rest is Python, the runtime's own code or waiting:")
        for t in tl["host_threads"]:
            calls = ", ".join(f"{c['name']} {_s(c['total_s'])} x{c['count']}" for c in t.get("top_calls", []))
            lines.append(f"    thread {t['thread']}: {_s(t['busy_s'])} ({_pct(t['busy_s'], w)}) "
                         f"in {t['calls']:,} calls; outermost: {calls}")
    return lines


def main(args) -> int:
    rec, tls = _load(args.run)
    if args.json:
        print(json.dumps({label: tl for label, tl in tls}, indent=1))
        return 0 if tls else 1
    if rec is not None:
        tr = rec.get("memcpy_trace") or {}
        head = " ".join(str(rec[k]) for k in ("system", "model", "mode") if rec.get(k))
        print(f"{args.run}: {head} N={rec.get('gpus')} D={rec.get('minibatch')}, status {rec.get('status')}; "
              f"traced iteration {tr.get('iteration', '-')} (profiler on, not timed)")
        # what an A/B over GPU-to-GPU transfers varies: the receive order and NCCL's own settings
        nccl = ((rec.get("env") or {}).get("nccl_env")) or {}
        if (rec.get("gpus") or 1) > 1 and (rec.get("p2p_receive") or nccl):
            print(f"  receives {rec.get('p2p_receive') or 'lazy (before the option)'}"
                  + (f"; NCCL {' '.join(f'{k}={v}' for k, v in nccl.items())}" if nccl else ""))
        t, p = rec.get("iter_time_s"), rec.get("predicted_iter_time_s")
        if t:
            print(f"  steady-state iteration {t:.4f} s (median, untraced)"
                  + (f"; predicted {p:.4f} s, measured/predicted {t / p:.2f}x" if p else ""))
        from harmony.metrics import format_host_phases
        for line in format_host_phases(rec.get("host_phases")):
            print("  " + line + " (median, untraced)")
    if not tls:
        src = ((rec or {}).get("memcpy_trace") or {}).get("source")
        print(f"{args.run}: no timeline in this record" + (f" (memcpy trace: {src})" if src else "") + f"; {HOW}")
        return 1
    for label, tl in tls:
        print("\n".join(format_timeline(label, tl)))
    return 0
