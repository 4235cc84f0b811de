"""Chrome / Perfetto trace (JSON "Trace Event Format") of a simulated iteration.

One process per GPU (threads: swap-in, p2p-in, compute, swap-out), one for the host (CPU optimizer
streams), one for collectives; a per-GPU memory counter. Open in https://ui.perfetto.dev or chrome://tracing.
"""
from __future__ import annotations

from harmony.jsonio import write_json

_TIDS = {"swap-in": 1, "p2p-in": 2, "compute": 3, "p2p-out": 4, "swap-out": 5, "allreduce": 6}


def trace_json(sim, meta: dict | None = None) -> dict:
    evs = []
    pids: dict = {}

    def pid_of(p):
        if p not in pids:
            pids[p] = len(pids) + 1
            name = f"GPU {p}" if isinstance(p, int) else str(p)
            evs.append({"ph": "M", "name": "process_name", "pid": pids[p], "args": {"name": name}})
        return pids[p]

    tids: dict = {}
    for p, stream, name, t0, t1, args in sim.events:
        pid = pid_of(p)
        tid = _TIDS.get(stream) or tids.setdefault(stream, 10 + len(tids))
        if (pid, tid) not in tids:
            tids[(pid, tid)] = True
            evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": stream}})
        evs.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": t0 * 1e6,
                    "dur": max(0.0, t1 - t0) * 1e6, "args": args})
    for r, t, b in sim.memory:
        evs.append({"ph": "C", "name": "memory", "pid": pid_of(r), "ts": t * 1e6, "args": {"bytes": b}})
    return {"traceEvents": evs, "displayTimeUnit": "ms",
            "otherData": {"source": "harmony simulate (predicted, not measured)", **(meta or {})}}


def save_trace(path, sim, meta: dict | None = None) -> None:
    write_json(path, trace_json(sim, meta), indent=None)
