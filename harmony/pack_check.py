"""Validating the pack rules: run vLayers [start, end) as one pack on the device and compare its measured
peak with what the additive memory rule (harmony.profile_data.pack_fwd_memory / pack_bwd_memory) predicts
from per-vLayer profiles, and its measured forward and backward times with the sum of the per-vLayer times
(what the simulator charges a pack). Each vLayer is profiled alone; in a pack the host launches the next
layer's kernels while the GPU runs the previous ones, so where launching costs more than computing (small
microbatches) the sum over-counts. `harmony profile --check-pack START:END` records the result in
profile.json as `pack_check`."""
from __future__ import annotations

import statistics

import torch

from harmony import gpumem
from harmony.profile import WALK_BATCH, LayerSource, Runner, make_inputs
from harmony.profile_data import Profile, pack_bwd_memory, pack_fwd_memory


def walk_to_pack(model_json, start: int, end: int, dev: torch.device, precision: str, seed: int = 0,
                 materialize: str = "auto"):
    """(the chain's LayerSource, the real input of vLayer `start` at batch WALK_BATCH on the CPU): the chain
    walked up to the pack with no grad, one vLayer materialised at a time, under `precision`."""
    from harmony.decompose import load_model_json, spec_from_model_json
    if not isinstance(model_json, dict):
        model_json = load_model_json(model_json)
    if not 0 <= start < end <= model_json["num_vlayers"]:
        raise ValueError(f"pack range {start}:{end} is outside 0:{model_json['num_vlayers']}")
    gpumem.set_precision(precision)
    spec = spec_from_model_json(model_json)
    src = LayerSource(spec, model_json, dev, seed=seed, mode=materialize)
    x = tuple(t.to(dev) for t in spec.synthetic_batch(WALK_BATCH, torch.Generator().manual_seed(seed)))
    for i in range(start):
        with torch.no_grad(), gpumem.autocast(dev, precision):
            x = src.get(i)(*x)
    return src, tuple(t.cpu() for t in x)


def measure_pack(model_json, layers_range, u: int, device, precision: str = "fp32", seed: int = 0,
                 materialize: str = "auto", trials: int = 0) -> dict:
    """Run vLayers [start, end) as a pack on `device` at microbatch u (their real inputs, from a walk of
    the chain) and measure, relative to the memory in use before the pack's weights and input arrive:
    the peak of a no-grad forward (`fwd_peak_bytes`) and of recompute forward + backward with dW
    already allocated (`bwd_peak_bytes`); `peak_bytes` is the larger. With `trials` > 0 also the median
    time of the pack's forward (`fwd_s`) and recompute forward + backward (`bwd_s`), timed as the profiler
    times one vLayer (harmony.profile.Runner.time_split)."""
    start, end = layers_range
    dev = torch.device(device)
    src, x_cpu = walk_to_pack(model_json, start, end, dev, precision, seed, materialize)
    if dev.type == "cuda":     # cuBLAS workspaces come from the caching allocator: allocate them first
        with gpumem.autocast(dev, precision):
            torch.ones(64, 64, device=dev) @ torch.ones(64, 64, device=dev)
    gpumem.free_cached(dev)
    with gpumem.MemoryMeter(dev) as m:
        base0 = m.current()
        x = tuple(t.to(dev) for t in x_cpu)
        layers = [src.get(i) for i in range(start, end)]
        r = Runner(layers, make_inputs(x, u, needs_grad=start > 0), dev, precision)
        del x
        r.fwd()
        m.reset_peak()
        y = r.fwd()
        fwd_peak = m.peak() - base0
        del y
        r.bwd()
        r.bwd()
        m.reset_peak()
        r.bwd()
        bwd_peak = m.peak() - base0
    out = {"range": [start, end], "u": u, "fwd_peak_bytes": int(fwd_peak), "bwd_peak_bytes": int(bwd_peak),
           "peak_bytes": int(max(fwd_peak, bwd_peak))}
    if trials > 0:     # what the cost model charges a pack: the larger of its device and host issue times
        for kind, fn in (("fwd", r.fwd), ("bwd", r.bwd)):
            dev_s, issue_s = r.time_split(fn, trials)
            out[f"{kind}_device_s"], out[f"{kind}_issue_s"] = statistics.median(dev_s), r.issue_time(issue_s)
            out[f"{kind}_s"] = max(out[f"{kind}_device_s"], out[f"{kind}_issue_s"])
            out[f"{kind}_host_waited"] = r.host_waited
    del r, layers
    gpumem.free_cached(dev)
    return out


def measure_pack_peak(model_json, layers_range, u: int, device, precision: str = "fp32") -> int:
    """Measured peak bytes of a pack's forward and backward (see measure_pack)."""
    return measure_pack(model_json, layers_range, u, device, precision)["peak_bytes"]


def predict_pack_peak(profile, layers_range, u: float) -> float:
    """Peak bytes of a pack predicted from per-vLayer profiles (profile_data.pack_*_memory)."""
    if not isinstance(profile, Profile):
        profile = Profile(profile)
    s, e = layers_range
    return max(pack_fwd_memory(profile, s, e, u), pack_bwd_memory(profile, s, e, u))


def check_pack(model_json: dict, prof: dict, layers_range, u: int | None, device, precision: str,
               trials: int = 5) -> dict:
    """The pack's measured peak memory and times against the per-vLayer profile's predictions. u=None: the
    largest profiled u at which the pack fits in 80% of the profile's cap."""
    p = Profile(prof)
    s, e = layers_range
    if u is None:
        fits = [v for v in p.ubatch_sizes if all(p.layers[i]["measured"][p.ubatch_sizes.index(v)]
                                                 for i in range(s, e))]
        cap = prof.get("gpu_memory_cap")
        if cap:
            fits = [v for v in fits if predict_pack_peak(p, layers_range, v) <= 0.8 * cap] or fits[:1]
        u = max(fits) if fits else 1
    pred_f, pred_b = pack_fwd_memory(p, s, e, u), pack_bwd_memory(p, s, e, u)
    try:
        meas = measure_pack(model_json, layers_range, u, device, precision, trials=trials)
    except Exception as exc:   # an OOM under the cap is a result (the pack needs more), not a lost profile
        if not gpumem.is_oom(exc):
            raise
        gpumem.free_cached(torch.device(device))
        return {"range": [s, e], "u": u, "status": "oom", "message": str(exc).splitlines()[0][:300],
                "predicted_bytes": max(pred_f, pred_b), "predicted_fwd_bytes": pred_f,
                "predicted_bwd_bytes": pred_b, "measured_bytes": None,
                "gpu_memory_cap": prof.get("gpu_memory_cap")}
    resident = sum(p.weight_bytes(i) + p.grad_bytes(i) for i in range(s, e))
    pred = max(pred_f, pred_b)
    out = {"range": [s, e], "u": u, "status": "ok", "predicted_bytes": pred, "measured_bytes": meas["peak_bytes"],
           "rel_error": (pred - meas["peak_bytes"]) / meas["peak_bytes"],
           "predicted_fwd_bytes": pred_f, "measured_fwd_bytes": meas["fwd_peak_bytes"],
           "predicted_bwd_bytes": pred_b, "measured_bwd_bytes": meas["bwd_peak_bytes"],
           "weights_and_grads_bytes": resident,
           "rel_error_activations": ((pred_b - resident) - (meas["bwd_peak_bytes"] - resident))
           / max(meas["bwd_peak_bytes"] - resident, 1)}
    if trials > 0:
        from harmony.schedule.memory import LayerCosts
        c = LayerCosts(p).at(u)         # the simulator's compute model: the per-vLayer times, summed (UCosts)
        for kind, pred in (("fwd", c.fwd_time(s, e)), ("bwd", c.bwd_time(s, e))):
            out[f"predicted_{kind}_s"], out[f"measured_{kind}_s"] = pred, meas[f"{kind}_s"]
            out[f"time_ratio_{kind}"] = meas[f"{kind}_s"] / pred if pred > 0 else None
            out[f"measured_{kind}_device_s"] = meas[f"{kind}_device_s"]
            out[f"measured_{kind}_issue_s"] = meas[f"{kind}_issue_s"]
            out[f"{kind}_host_waited"] = meas[f"{kind}_host_waited"]
    return out


def check_tasks_cpu(model_json: dict, costs, graph, iters: int = 3) -> list[dict]:
    """Validating the task rule (harmony.schedule.memory) the way check_pack validates the pack rule: run
    `graph` on CPU workers under the worker's per-task memory probe (`HARMONY_TASK_PEAKS`, docs/runtime.md)
    and return, per compute task, its measured peak (median over the iterations after the first) beside
    what the simulator charges it: its own peak plus the next task's prefetch on its rank
    (simulate.task_memory_charges; on the CPU that prefetch is issued after the task, on a GPU beside it,
    and the sum bounds both)."""
    import json
    import os
    import tempfile
    from pathlib import Path

    from harmony.runtime import run_schedule
    from harmony.schedule.io import make_schedule_record
    from harmony.schedule.simulate import SimParams, task_memory_charges
    with tempfile.TemporaryDirectory(prefix="task-probe-") as probe:
        old = os.environ.get("HARMONY_TASK_PEAKS")
        os.environ["HARMONY_TASK_PEAKS"] = probe          # the spawned workers read it
        try:
            run_schedule(make_schedule_record(model_json, graph), graph, iters=iters, device="cpu")
        finally:
            if old is None:
                os.environ.pop("HARMONY_TASK_PEAKS")
            else:
                os.environ["HARMONY_TASK_PEAKS"] = old
        probed = {r: json.loads((Path(probe) / f"rank{r}.json").read_text())["tasks"]
                  for r in range(graph.config.gpus)}
    charges = task_memory_charges(graph, costs, SimParams(h2d_Bps=1e9, d2h_Bps=1e9))   # bandwidths: no matter
    by_id = {t.id: t for t in graph.tasks}
    out = []
    for r, tasks in probed.items():
        for tid in sorted({x["task"] for x in tasks}):
            measured = statistics.median(x["peak_bytes"] for x in tasks if x["task"] == tid and x["iteration"] >= 1)
            own, prefetch = charges[tid]
            out.append({"task": by_id[tid], "rank": r, "measured_bytes": measured, "own_bytes": own,
                        "prefetch_bytes": prefetch})
    return out
