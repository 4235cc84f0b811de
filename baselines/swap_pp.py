"""swap-pp: pipeline parallelism, GPipe style, written as a schedule in the Harmony task language.

  mode vPP with placement "stages": N contiguous stages, one per GPU, balanced by compute (profiled
  forward+backward time at u with a profile.json, else the forward FLOPs in model.json); the stage
  mapping is explicit in ScheduleConfig.stages,
  group_size = 1 (a task is one microbatch), GPipe order: the forward of every microbatch, then the
  backward of every microbatch in the same (forward) group order, then the flush (each pack's update after
  its last backward),
  packs = the whole stage when its tasks fit the cap at u (plain pipeline parallelism: consecutive tasks
  on a GPU share the pack, so its weights stay resident, pin_shared=True), else single vLayers within
  that stage (the stage swaps per layer, as in swap-dp).

Stage boundaries (N > 1): activations and their gradients go GPU->GPU (P2P, streamed microbatch by
microbatch, harmony/runtime/p2p.py). A resident stage accumulates dW on the GPU across its microbatches and
sends it to host memory once, after its last backward (`grad_keep`, harmony.schedule.tasks), as GPipe
does; a stage that swaps per layer sends each vLayer's dW after every microbatch, summed in host memory.
Known difference from GPipe: the input of every backward pack but the first (the data, read again) is
stashed in host memory between its forward and its backward (the task language stashes each backward
pack's input; GPipe keeps stage inputs on the GPU): an extra D2H+H2D of one activation per resident stage
per microbatch, small next to the weights (a stage that swaps per layer stashes every vLayer's input, as
swap-dp does). The loss pack's input is stashed too when the last forward runs on its GPU; kept there, it
waited through every other microbatch's forward (GPT2-XL D = 256: 1.5 GiB at u = 16, which then ran out
of memory under 11 GiB; docs/performance.md entry 85). From another GPU it arrives over P2P.
"""
from __future__ import annotations

from baselines.common import Infeasible, Settings, load_model, status_only
from baselines.swap_dp import (DEFAULT_PACKING, TaskMemory, _finish, _load_aux, fit_packs, requested_packing,
                              single_layer_packs)
from harmony.schedule.tasks import Range, ScheduleConfig


def layer_weights(model_json: dict, profile: dict | None, u: int) -> list[float]:
    """Per-vLayer cost used to balance stages: profiled fwd+bwd time at u, else forward FLOPs, else bytes."""
    L = model_json["num_vlayers"]
    if profile is not None:
        from harmony.schedule.memory import LayerCosts
        c = LayerCosts(profile).at(u)
        return [c.fwd[i] + c.bwd[i] for i in range(L)]
    fl = [v.get("flops_fwd_per_sample") for v in model_json["vlayers"]]
    if all(f is not None for f in fl) and sum(fl) > 0:
        return [float(f) for f in fl]
    return [float(v["param_bytes"]) for v in model_json["vlayers"]]


def balanced_stages(weights: list[float], n: int) -> list[Range]:
    """Contiguous partition of the layers into n non-empty stages minimising the largest stage sum
    (exact dynamic programme, O(n L^2))."""
    L = len(weights)
    if n > L:
        raise ValueError(f"{n} stages for {L} vLayers: use at most {L} GPUs")
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    # DP over (stages, end): best[k][e] = min over s of (max(bottleneck), sum of squares) of the first k
    # stages ending at e; the sum of squares breaks ties between equal bottlenecks towards even stages.
    INF = (float("inf"), float("inf"))
    best = [[INF] * (L + 1) for _ in range(n + 1)]
    cut = [[0] * (L + 1) for _ in range(n + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, n + 1):
        for e in range(k, L - (n - k) + 1):
            for s in range(k - 1, e):
                prev = best[k - 1][s]
                w = prefix[e] - prefix[s]
                v = (max(prev[0], w), prev[1] + w * w)
                if v < best[k][e]:
                    best[k][e], cut[k][e] = v, s
    stages, e = [], L
    for k in range(n, 0, -1):
        s = cut[k][e]
        stages.append((s, e))
        e = s
    return stages[::-1]


def swap_pp_config(model_json: dict, minibatch: int, gpus: int, ubatch: int, *, cap: int | None = None,
                   profile: dict | None = None, stage_packing: str = DEFAULT_PACKING) -> ScheduleConfig:
    L = model_json["num_vlayers"]
    mem = TaskMemory(model_json, profile)
    stages = balanced_stages(layer_weights(model_json, profile, ubatch), gpus)
    packs: list[Range] = []
    for r, (s, e) in enumerate(stages):
        # (without a profile the memory rule is a lower bound: a stage that "fits" may still OOM at run time)
        if mem.pack_fits(s, e, ubatch, cap, fwd=e < L):
            packs.append((s, e))
            continue
        stage_packs = (single_layer_packs(s, e, model_json) if stage_packing == DEFAULT_PACKING
                       else fit_packs(mem, s, e, ubatch, cap))
        mem.check_packs(stage_packs, ubatch, cap, f"swap-pp stage {r} [{s},{e})")
        packs.extend(stage_packs)
    return ScheduleConfig(mode="vPP", gpus=gpus, minibatch=minibatch, ubatch_fwd=ubatch, ubatch_bwd=ubatch,
                          bwd_packs=tuple(packs), fwd_packs=tuple(packs[:-1]), group_size=1,
                          placement="stages", pin_shared=True, stages=tuple(stages))


def config_for(s: Settings, mj: dict, profile: dict | None) -> ScheduleConfig:
    """The ScheduleConfig a run of these settings trains (raises Infeasible): `run`'s, and the microbatch
    search's host-memory forecast (baselines.predicted_start.host_need_of)."""
    return swap_pp_config(mj, s.minibatch, s.gpus, s.ubatch_or_default(), cap=s.gpu_memory_cap, profile=profile,
                          stage_packing=requested_packing(s))


def run(s: Settings) -> dict:
    spec, mj = load_model(s.model, s.overrides)
    profile, calibration = _load_aux(s)
    packing = requested_packing(s)
    try:
        cfg = config_for(s, mj, profile)
    except Infeasible as e:
        return status_only(s, spec.name, "infeasible", str(e), mode="vPP")
    s.extra["stages"] = [list(x) for x in cfg.stages]
    s.extra["stages_swapping"] = [r for r, (a, b) in enumerate(cfg.stages) if (a, b) not in cfg.bwd_packs]
    return _finish(s, spec.name, mj, cfg, profile, calibration, packing)
