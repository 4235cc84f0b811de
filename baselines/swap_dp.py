"""swap-dp: data parallelism with GPU memory virtualized by swapping (vDNN / IBM LMS style), written as a
schedule in the Harmony task language so the same runtime, byte counters and simulator apply.

  mode vDP (every GPU runs every task on its D/N samples; per-pack gradient all-reduce for N > 1),
  group_size = 1 (a task is ONE microbatch: microbatch by microbatch, FWD then BWD),
  pin_shared = False (weights are never kept across microbatches: the thing Harmony removes),
  u_fwd = u_bwd = u, packs = single vLayers by default ("layer", the vDNN/LMS granularity), or the
  largest packs that fit the cap ("fit", needs a profile.json).

So for every microbatch each layer's weights are brought in before its forward and again before its
backward; the input of every backward pack is stashed to host memory in the forward and fetched back
(backward recomputes the pack from it); each microbatch's weight gradients go to host memory and are
accumulated there; the optimizer (the model's, fused, on the CPU) steps each pack after its last
microbatch's backward. Prefetch of the next task's weights, pinned memory and the fused CPU optimizer come
from the runtime, exactly as for Harmony.
"""
from __future__ import annotations

from typing import Any

from baselines.common import Infeasible, Settings, load_model, status_only
from harmony.schedule.io import make_schedule_record, save_schedule
from harmony.schedule.tasks import _spec_bytes, Range, ScheduleConfig, ScheduleError, build_task_graph, layer_sizes_from_model

DEFAULT_PACKING = "layer"               # one vLayer a pack: the vDNN/LMS granularity
PACKINGS = (DEFAULT_PACKING, "fit")


# ------------------------------------------------------------------------------------------------
# Memory: the scheduler's pack rule with a profile (harmony.schedule.memory), else a lower bound
# ------------------------------------------------------------------------------------------------
class TaskMemory:
    """Bytes one task needs on a GPU. With a profile: harmony.schedule.memory.LayerCosts (the rule the
    scheduler and simulator use). Without: weights + gradients + the pack's input and every layer's
    output at u: a lower bound, enough to call a configuration infeasible, not to call it feasible."""

    def __init__(self, model_json: dict, profile: dict | None = None):
        self.sizes = layer_sizes_from_model(model_json)
        self.L = model_json["num_vlayers"]
        self.costs = None
        if profile is not None:
            from harmony.schedule.memory import LayerCosts
            self.costs = LayerCosts(profile)

    def task_bytes(self, kind: str, s: int, e: int, u: int) -> float:
        if self.costs is not None:
            return self.costs.task_bytes(kind, s, e, u, u)
        return self.lower_bound(kind, s, e, u)

    def lower_bound(self, kind: str, s: int, e: int, u: int) -> float:
        """What the task holds at least: weights (+ gradients in BWD), the pack's input and every layer's
        output at u. Never more than the task needs, so a pack over the cap by this rule cannot run."""
        sz = self.sizes
        act = u * (sz.input_bytes_per_sample[s] + sum(sz.output_bytes_per_sample[s:e]))
        grads = sz.grads((s, e)) if kind == "BWD" else 0
        return sz.weights((s, e)) + grads + act

    def pack_fits(self, s: int, e: int, u: int, cap: int | None, fwd: bool = True) -> bool:
        if cap is None:
            return True
        if fwd and e < self.L and self.task_bytes("FWD", s, e, u) > cap:
            return False
        return self.task_bytes("BWD", s, e, u) <= cap

    def check_packs(self, packs: list[Range], u: int, cap: int | None, what: str) -> None:
        """Infeasible only when it is certain: a pack the run will execute (the loss pack with the layers
        it takes, not each of them alone) needs more than the cap by the lower bound. The profile's rule
        only shapes packs: it over-counts (GPT2-XL's LM head + loss at u=16: 13.2 GiB by the profile, 9.8
        GiB measured under an 11 GiB cap), and a baseline's best setting is what runs, not what a
        conservative estimate allows. A candidate that does not fit at run time is an `oom` record."""
        if cap is None:
            return
        from harmony.units import format_bytes
        for s, e in packs:
            need = max(self.lower_bound("BWD", s, e, u), self.lower_bound("FWD", s, e, u) if e < self.L else 0)
            if need > cap:
                what_pack = f"vLayer {s}" if e == s + 1 else f"pack of vLayers [{s},{e})"
                raise Infeasible(f"{what}: {what_pack} needs at least {format_bytes(need)} at microbatch {u} "
                                 f"(weights, gradients, its input and outputs) but the cap is {format_bytes(cap)}; "
                                 f"a smaller microbatch or a larger cap may fit")


def single_layer_packs(lo: int, hi: int, model_json: dict | None = None) -> list[Range]:
    """One vLayer per pack, except that the loss pack also takes the trailing vLayers that expand the
    activation (GPT-2's LM head: 6.4 KB of hidden state in, 201 KB of logits out per token). Otherwise the
    logits of every in-flight microbatch would wait on the GPU for their backward (1.6 GB per microbatch
    of 8 for GPT2-XL), which no real swapping system does: they compute the loss right after the head."""
    start = loss_pack_start(model_json) if model_json and hi == model_json["num_vlayers"] else hi - 1
    start = max(lo, min(start, hi - 1))
    return [(i, i + 1) for i in range(lo, start)] + [(start, hi)]


def loss_pack_start(model_json: dict) -> int:
    """First vLayer of the loss pack: the loss, plus the vLayers right before it whose output is larger
    than their input."""
    vls = model_json["vlayers"]

    def nbytes(specs):
        return sum(_spec_bytes(x) for x in specs)
    s = len(vls) - 1
    while s - 1 >= 1 and nbytes(vls[s - 1]["outputs"]) > nbytes(vls[s - 1]["inputs"]):
        s -= 1
    return s


def fit_packs(mem: TaskMemory, lo: int, hi: int, u: int, cap: int | None) -> list[Range]:
    """Greedy: the longest packs from lo that fit the cap (single layers where nothing longer fits)."""
    out, s = [], lo
    while s < hi:
        e = s + 1
        while e < hi and mem.pack_fits(s, e + 1, u, cap):
            e += 1
        out.append((s, e))
        s = e
    return out


# ------------------------------------------------------------------------------------------------
# The schedule
# ------------------------------------------------------------------------------------------------
def swap_dp_config(model_json: dict, minibatch: int, gpus: int, ubatch: int, *, cap: int | None = None,
                   profile: dict | None = None, packing: str = DEFAULT_PACKING) -> ScheduleConfig:
    """The swap-dp ScheduleConfig. Raises Infeasible when a task cannot fit the cap."""
    if packing not in PACKINGS:
        raise ValueError(f"packing {packing!r}: use one of {PACKINGS}")
    if packing == "fit" and profile is None and cap is not None:
        raise ValueError("--packs fit needs --profile profile.json (pack memory comes from the profile)")
    L = model_json["num_vlayers"]
    if minibatch % gpus:
        raise ValueError(f"minibatch {minibatch} is not a multiple of gpus {gpus}")
    mem = TaskMemory(model_json, profile)
    packs = single_layer_packs(0, L, model_json) if packing == DEFAULT_PACKING else fit_packs(mem, 0, L, ubatch, cap)
    mem.check_packs(packs, ubatch, cap, "swap-dp")
    bwd = tuple(packs)
    fwd = tuple(p for p in packs[:-1])
    return ScheduleConfig(mode="vDP", gpus=gpus, minibatch=minibatch, ubatch_fwd=ubatch, ubatch_bwd=ubatch,
                          bwd_packs=bwd, fwd_packs=fwd, group_size=1, placement="every-gpu", pin_shared=False)


def schedule_record(system: str, model_json: dict, cfg: ScheduleConfig, *, cap: int | None, precision: str,
                    search: dict | None = None, profile: dict | None = None, calibration: dict | None = None) -> dict:
    graph = build_task_graph(cfg, model_json["num_vlayers"])
    prediction = predict(model_json, graph, profile, calibration, cap, precision)
    return make_schedule_record(model_json, graph, gpu_memory_cap=cap, precision=precision,
                                prediction=prediction, search=search, system=system)


def predict(model_json: dict, graph, profile: dict | None, calibration: dict | None, cap: int | None,
            precision: str = "fp32") -> dict:
    """Bytes per transfer kind from the task graph (what the runtime must count); with a profile and a
    calibration also the simulator's time, peak memory, the schedule bound and the physical roofline
    (the same prediction record `harmony schedule` writes)."""
    from harmony.schedule.tasks import count_bytes
    out: dict[str, Any] = {"bytes": count_bytes(graph, layer_sizes_from_model(model_json)), "iter_time_s": None}
    if profile is None or calibration is None:
        return out
    from harmony.schedule.cli import prediction_record
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    costs = LayerCosts(profile)
    params = SimParams.from_calibration(calibration, optimizer=(model_json.get("optimizer") or {}).get("kind", "adamw"))
    sim = simulate(graph, costs, params, cap)
    out = prediction_record(graph, costs, params, calibration, sim, model_json, precision)
    if out.get("physical_roofline"):
        out["roofline_s"] = out["physical_roofline"]["roofline_s"]
    return out


# ------------------------------------------------------------------------------------------------
# Running it on the Harmony runtime
# ------------------------------------------------------------------------------------------------
def run_on_runtime(s: Settings, record: dict, spec_name: str, mode: str) -> dict:
    import sys
    try:
        from harmony.runtime import run_schedule
    except ImportError as e:
        return status_only(s, spec_name, "unavailable",
                           f"the Harmony runtime is not in this build ({e}); swap-dp and swap-pp run as "
                           f"schedules on harmony.runtime.run_schedule", mode=mode,
                           predicted_bytes=record["prediction"]["bytes"] if record.get("prediction") else None)
    from harmony.jsonio import Deferred
    from harmony.schedule.tasks import TaskGraph
    graph = TaskGraph.from_json(record["graph"])
    try:
        summary = run_schedule(record, graph, iters=s.iters, device=s.device, data=s.data,
                               precision=s.precision, gpu_memory_cap=s.gpu_memory_cap, warmup=s.warmup,
                               output=s.output, system=s.system, seed=s.seed, data_seed=s.data_seed,
                               memcpy_trace=s.memcpy_trace, max_iter_s=s.max_iter_s,
                               # every swap baseline on record ran with the copy stream's pool; the
                               # compute-stream plan (docs/runtime.md) is Harmony's, measured in entry 32
                               load_buffers="copy-stream")
    except Deferred:
        raise                   # baselines/cli.py leaves the run (or the search) for the next call
    except Exception as e:  # noqa: BLE001 - the runtime should write its own record; this is the backstop
        import traceback
        traceback.print_exc(file=sys.stderr)
        from baselines.common import is_oom
        return status_only(s, spec_name, "oom" if is_oom(e) else "error", f"{type(e).__name__}: {e}", mode=mode)
    extra = {"ubatch": s.ubatch_or_default(), "settings": dict(s.extra),
             **{k: summary.get(k) for k in ("memcpy_trace", "memcpy_counted", "memcpy_agreement", "memcpy_agrees")},
             **({"infeasible_reason": summary["infeasible_reason"]} if summary.get("infeasible_reason") else {}),
             "bytes_source": "counters (harmony runtime)"}
    summary.update(extra)
    if s.output:
        amend_last_line(s.output, summary)
    return summary


def amend_last_line(path: str, summary: dict) -> None:
    """Replace the summary line the runtime wrote with the amended summary (baseline settings added)."""
    import json
    from pathlib import Path
    from harmony.jsonio import _default
    p = Path(path)
    lines = p.read_text().splitlines()
    if lines and json.loads(lines[-1]).get("record") == "summary":
        lines[-1] = json.dumps(summary, default=_default)
        p.write_text("\n".join(lines) + "\n")


def requested_packing(s: Settings) -> str:
    """The packing these Settings ask for ("layer" unless extra["packing"] says "fit"). Its own key: the run
    writes the pack count it trained to extra["packs"] for the record, and the search asks a finished
    candidate's settings again (an earlier shared key read the count back: `packing 417`, h200n1-8)."""
    return s.extra.get("packing", DEFAULT_PACKING)


def config_for(s: Settings, mj: dict, profile: dict | None) -> ScheduleConfig:
    """The ScheduleConfig a run of these settings trains (raises Infeasible): `run`'s, and the microbatch
    search's host-memory forecast (baselines.predicted_start.host_need_of)."""
    return swap_dp_config(mj, s.minibatch, s.gpus, s.ubatch_or_default(), cap=s.gpu_memory_cap, profile=profile,
                          packing=requested_packing(s))


def run(s: Settings) -> dict:
    spec, mj = load_model(s.model, s.overrides)
    profile, calibration = _load_aux(s)
    try:
        cfg = config_for(s, mj, profile)
    except Infeasible as e:
        return status_only(s, spec.name, "infeasible", str(e), mode="vDP")
    return _finish(s, spec.name, mj, cfg, profile, calibration, requested_packing(s))


def _finish(s: Settings, name: str, mj: dict, cfg: ScheduleConfig, profile, calibration, packing: str) -> dict:
    try:
        rec = schedule_record(s.system, mj, cfg, cap=s.gpu_memory_cap, precision=s.precision, profile=profile,
                              calibration=calibration,
                              search={"packing": packing, "memory_rule": "profile" if profile else "lower bound"})
    except ScheduleError as e:
        return status_only(s, name, "infeasible", str(e), mode=cfg.mode)
    if s.extra.get("schedule_out"):
        save_schedule(s.extra["schedule_out"], rec)
    s.extra.update(packing=packing, packs=len(cfg.bwd_packs), group_size=cfg.group_size,
                   pin_shared=cfg.pin_shared, placement=cfg.placement)
    return run_on_runtime(s, rec, name, cfg.mode)


def _load_aux(s: Settings):
    from harmony.jsonio import read_json
    profile = read_json(s.profile, kind="profile") if s.profile else None
    calibration = read_json(s.calibration, kind="calibration") if s.calibration else None
    return profile, calibration
