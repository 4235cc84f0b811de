"""`harmony schedule`: search the best schedule for a profiled model -> schedule.json (+ search.csv, trace).

  harmony schedule profile.json --minibatch 64 --gpus 4 [--mode vPP|vDP|auto] [--gpu-memory 11GiB]
      [--calibration calibration.json] [--model model.json] -o schedule.json
      [--candidates search.csv] [--trace trace.json.gz] [--ubatch-fwd U] [--ubatch-bwd U] [--pack-size P]
      [--host-memory SIZE|none] [--p2p-receive auto|lazy|eager]

The schedule embeds the model.json record. It is taken from --model, else from the profile's own
`model_record` key if present, else from model.json next to the profile (same folder), else
<profile stem without .profile>.model.json next to it. The calibration comes from --calibration, else
calibration.json next to the profile; `--calibration analytic:paper` / `analytic:h100` use the ASSUMED
presets of harmony.schedule.synthetic (recorded as such in the schedule).

Host memory: every candidate's host arena (W + dW + K + stashed activations, harmony.schedule.host_memory)
must fit the host memory budget, as `harmony run` refuses an arena larger than the host's available memory.
The budget is --host-memory, else the host memory the profile recorded (the GPU host it was taken on:
available, else total), else the total the calibration recorded (measured calibrations, also taken on the
GPU host); `--host-memory none`, or inputs that record none, leave it unchecked (search.warnings says so).
"""
from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

from harmony.jsonio import read_json
from harmony.profile_data import Calibration, Profile, format_scale, sustained_factors
from harmony.schedule.host_memory import arena_budget, process_reserve_bytes
from harmony.schedule.tasks import RECEIVE_MODES
from harmony.units import format_bytes, parse_bytes


def add_arguments(p):
    p.add_argument("profile", help="profile.json from `harmony profile`")
    p.add_argument("--minibatch", "-D", type=int, required=True, help="samples per iteration (all GPUs)")
    p.add_argument("--gpus", "-N", type=int, required=True, help="GPUs (with --mode auto: at most this many)")
    p.add_argument("--mode", default="vPP", choices=["vPP", "vDP", "auto"])
    p.add_argument("--gpu-memory", default=None,
                   help="per-GPU memory cap, e.g. 11GiB or 9e9 (default: no cap; the plan then fits the memory of "
                        "the GPU the profile was taken on, or is unbounded for a CPU profile)")
    p.add_argument("--headroom", type=float, default=0.10,
                   help="fraction of the cap the plan leaves free for what the memory model does not see: "
                        "allocator rounding and fragmentation, CUDA/NCCL workspaces (default 0.10: with one "
                        "allocator pool, `harmony run --load-buffers auto`, 0.9-1.1 of 11 GiB stayed reserved "
                        "but unallocated, and plans at 5%% ran out of memory; at 10%% the H100 points of "
                        "docs/performance.md entry 32 ran 6-16%% faster than 5%% plans on two pools, and "
                        "predicted within 0.6%% of them)")
    p.add_argument("--host-memory", default=None,
                   help="host memory the run's arena may take (weights, gradients, optimizer state and every stashed "
                        "activation), e.g. 120GiB; candidates needing more are infeasible. Default: the host memory "
                        "the profile recorded for the machine it was taken on (available, else total), else the "
                        "calibration's total, less what the runtime holds back for each of the run's processes (N "
                        "workers and the launcher: 2 GiB and its page tables for the arena); 'none' turns the "
                        "check off")
    p.add_argument("--calibration", default=None, help="calibration.json (or analytic:paper, analytic:h100)")
    p.add_argument("--model", default=None, help="model.json (default: found next to the profile)")
    p.add_argument("--host-link", choices=["shared", "per-gpu"], default=None,
                   help="override the calibration: do the GPUs share one host link?")
    p.add_argument("--ubatch-fwd", type=int, default=None, help="fix u_fwd")
    p.add_argument("--ubatch-bwd", type=int, default=None, help="fix u_bwd")
    p.add_argument("--pack-size", type=int, default=None, help="fix the backward pack size P (layers); "
                   "forward packs then reuse the backward ones")
    p.add_argument("--task-overhead", type=float, default=0.0, help="fixed seconds per task in the simulator")
    p.add_argument("--compute-scale", default="1", metavar="F|profile",
                   help="multiply every profiled GPU compute time by this (default 1): the run's GPU holds a "
                        "lower clock than the profile's short trials saw, e.g. 1.05 for minutes of dense TF32 "
                        "matmuls at an H100's power cap (docs/performance.md entries 65 and 66; compare the "
                        "profile's and a run's `gpu_clocks`). `profile`: the factors `harmony profile --sustain` "
                        "measured, one per microbatch size (entry 68). Recorded in the schedule; host times are not scaled")
    p.add_argument("--p2p-receive", choices=("auto",) + RECEIVE_MODES, default="auto",
                   help="when the plan's tasks post their receives from another GPU (vPP, N > 1): auto "
                        "(default) simulates each candidate both ways and keeps the faster, which the schedule "
                        "records and `harmony run` then uses; lazy or eager fixes it (docs/performance.md "
                        "entry 59)")
    p.add_argument("-o", "--output", required=True, help="schedule.json to write")
    p.add_argument("--candidates", default=None, help="CSV of every candidate with its simulated time")
    p.add_argument("--trace", default=None, help="Chrome/Perfetto trace of the chosen schedule")


def load_calibration(arg: str | None, profile_path: Path) -> tuple[dict, str]:
    from harmony.schedule.synthetic import synthetic_calibration
    if arg and arg.startswith("analytic:"):
        return synthetic_calibration(arg.split(":", 1)[1]), arg
    path = Path(arg) if arg else profile_path.parent / "calibration.json"
    if not path.exists():
        raise FileNotFoundError(f"no calibration: {path} does not exist; run `harmony calibrate` and pass "
                                f"--calibration (or --calibration analytic:paper for assumed numbers)")
    return Calibration.load(path).raw, str(path)


def load_model_record(arg: str | None, profile_path: Path, profile_raw: dict) -> dict:
    if arg:
        return read_json(arg, kind="model")
    if isinstance(profile_raw.get("model_record"), dict):
        return profile_raw["model_record"]
    stem = profile_path.name.removesuffix(".json").removesuffix(".profile")
    for cand in (profile_path.parent / "model.json", profile_path.parent / f"{stem}.model.json"):
        if cand.exists():
            return read_json(cand, kind="model")
    raise FileNotFoundError(f"no model.json for {profile_path}: pass --model (the schedule embeds it)")


def prediction_record(graph, costs, params, cal: dict, sim, model_json: dict | None = None,
                      precision: str = "fp32") -> dict:
    from harmony.schedule.bound import physical_roofline, schedule_bound
    b = schedule_bound(graph, costs, cal, host_link="shared" if params.shared_link else "per-gpu")
    pred = {"iter_time_s": sim.iter_time_s, "bytes": sim.bytes, "peak_memory_bytes": sim.peak_memory_bytes,
            "schedule_bound_s": b["schedule_bound_s"], "terms": b["terms"], "feasible": sim.feasible,
            "iterations_simulated": len(sim.iteration_ends), "host_link_shared": params.shared_link,
            "mb_pipeline": params.mb_pipeline, "prefetch_waits": sim.prefetch_waits,
            # what the model charged compute beside a resident NCCL send, and when receives are posted
            "beside_nccl_slowdown": params.nccl_slowdown(), "p2p_receive": params.p2p_receive}
    if model_json is not None and model_json.get("vlayers"):
        from harmony.schedule.host_memory import arena_bytes
        pred["host_arena_bytes"] = arena_bytes(graph, model_json).to_json()   # what `harmony run` allocates
    if model_json is not None and precision in (cal.get("matmul_flops") or {}):
        pred["physical_roofline"] = physical_roofline(model_json, graph, cal, precision,
                                                      host_link="shared" if params.shared_link else "per-gpu")
    return pred


def model_sizes(model_json: dict):
    """LayerSizes from the model record (it knows which outputs carry gradients), None if not a full record."""
    from harmony.schedule.tasks import layer_sizes_from_model
    try:
        return layer_sizes_from_model(model_json)
    except (KeyError, TypeError):
        return None


def write_candidates(path, cands) -> None:
    rows = [c.row() for c in cands]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["index"])
        w.writeheader()
        w.writerows(rows)


def planning_limit_without_cap(profile_raw: dict) -> int | None:
    """Without a cap the GPU's own memory still bounds a pack (an unbounded plan would put the whole model
    in one pack and run out of memory at the `large` scale): the device memory the profile recorded, or
    None for a CPU profile (no GPU to overflow)."""
    return (profile_raw.get("memory_cap") or {}).get("device_total_bytes")


def host_memory_budget(arg: str | None, profile_raw: dict, cal: dict, gpus: int | None = None) -> tuple[int | None, str]:
    """(bytes the host arena may take or None = unchecked, where that came from). --host-memory wins (the
    arena's own budget, as given); else the profile's record of its host (available memory when profiled, else
    total), else a measured calibration's total, less what the runtime's host check (harmony/runtime/
    host_store.py check_fits) holds back beside the arena for an N-GPU run's processes when `gpus` is given
    (harmony.schedule.host_memory.arena_budget), so a plan the search admits is one the run admits."""
    if arg is not None:
        if str(arg).strip().lower() in ("none", "off", ""):
            return None, "--host-memory none"
        try:
            n = parse_bytes(arg)
        except ValueError as e:
            raise ValueError(f"--host-memory: {e}, or none to skip the check") from None
        if n is None or n <= 0:
            raise ValueError(f"--host-memory {arg!r}: give a size such as 120GiB, or none to skip the check")
        return n, "--host-memory"
    for rec, name in ((profile_raw, "profile"), (cal, "calibration")):
        if name == "calibration" and rec.get("analytic"):
            continue
        for key in ("host_memory_available_bytes", "host_memory_bytes"):
            if rec.get(key):
                n = int(rec[key])
                return (n if gpus is None else arena_budget(n, gpus)), f"{name}:{key}"
    return None, "none recorded"


def compute_scale(arg: str, profile: dict, path) -> tuple[float | dict[int, float], str]:
    """(factor on the profile's GPU compute times, where it came from) for --compute-scale: a number, or
    `profile` for the factors `harmony profile --sustain` recorded, one per microbatch size it stretched
    ({u: factor}; a profile from before docs/performance.md entry 68 holds one)."""
    if str(arg).strip().lower() == "profile":
        sus = profile.get("sustained") or {}
        scale = sustained_factors(sus)
        if not scale:
            why = (f"its sustained stretch gave no factor ({sus['factor_missing']})" if sus.get("factor_missing")
                   else "it has no sustained measurement; profile again with `harmony profile --sustain 4`")
            raise ValueError(f"--compute-scale profile: {path}: {why}; or give a number such as 1.05")
        src = (f"profile: vLayer {sus.get('vlayer')} back to back at u = {', '.join(map(str, sorted(scale)))}, "
               f"{sus.get('seconds')} s at u = {sus.get('u')}")
        if len(set(scale.values())) == 1:
            scale = next(iter(scale.values()))
    else:
        try:
            scale, src = float(arg), "--compute-scale"
        except ValueError:
            raise ValueError(f"--compute-scale {arg!r}: give a number such as 1.05, or `profile`") from None
    for f in (scale.values() if isinstance(scale, dict) else [scale]):
        if not 0.5 <= f <= 2.0:
            raise ValueError(f"--compute-scale {arg}: {f:g} is the run's compute time over the profile's and must "
                             f"lie between 0.5 and 2 (1.05: tasks 5% slower than profiled)")
    return scale, src


def optimizer_threads_mismatch(profile: dict, gpus: int) -> str | None:
    """A run's worker steps the optimizer with cpu_count // N threads (harmony/runtime/worker.py). A profile
    timed with more threads than that on its host predicts update times it will not see (4x H200: 64 threads
    against a worker's 16, and four profiles side by side: steps 15x too slow; docs/performance.md entry 12).
    None when they agree or the profile does not say (older profiles lack `cpu_count`)."""
    threads, cores = profile.get("threads"), profile.get("cpu_count")
    if not threads or not cores or str(profile.get("device", "")).startswith("cpu"):
        return None
    # N beyond the profiled host's GPUs is a prediction for a larger machine, whose cores are unknown here
    n_here = min(max(gpus, 1), profile.get("host_gpus") or gpus)
    worker = max(1, cores // n_here)
    if threads > worker:
        return (f"the profile timed the optimizer step with {threads} CPU threads, but a worker of an N = {n_here} "
                f"run on that {cores}-core host gets {worker}: the simulated update times may be off. Profile "
                f"again with `harmony profile --threads {worker}` for plans at this N")
    return None


def main(args) -> int:
    from harmony.decompose import microbatch_sensitive
    from harmony.schedule.io import make_schedule_record, save_schedule
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.search import search
    from harmony.schedule.simulate import SimParams
    from harmony.schedule.trace import save_trace

    ppath = Path(args.profile)
    prof = Profile.load(ppath)
    scale, scale_src = compute_scale(args.compute_scale, prof.raw, ppath)
    prof = replace(prof, compute_scale=scale)
    model_json = load_model_record(args.model, ppath, prof.raw)
    if model_json["num_vlayers"] != prof.num_layers:
        raise ValueError(f"{args.profile} has {prof.num_layers} vLayers but the model record has "
                         f"{model_json['num_vlayers']}: profile and model.json are from different models")
    cal, cal_src = load_calibration(args.calibration, ppath)
    threads_note = optimizer_threads_mismatch(prof.raw, args.gpus)
    if threads_note:
        print(f"warning: {threads_note}", file=sys.stderr)
    warnings = [threads_note] if threads_note else []
    host_budget, host_src = host_memory_budget(args.host_memory, prof.raw, cal, gpus=args.gpus)
    reserve = (process_reserve_bytes(args.gpus, host_budget)      # what the runtime holds back beside it
               if host_budget is not None and args.host_memory is None else 0)
    if host_budget is None and host_src == "none recorded":
        warnings.append("host memory not checked: neither the profile nor the calibration records the host's "
                        "memory; pass --host-memory SIZE to check the host arena (weights, gradients, optimizer "
                        "state, stashed activations) against it")
        print(f"warning: {warnings[-1]}", file=sys.stderr)
    cap = parse_bytes(args.gpu_memory)
    if not 0 <= args.headroom < 0.5:
        raise ValueError(f"--headroom {args.headroom}: give a fraction of the cap between 0 and 0.5")
    plan_limit = cap or planning_limit_without_cap(prof.raw)
    plan_cap = plan_limit * (1 - args.headroom) if plan_limit else None
    opt = (model_json.get("optimizer") or {}).get("kind", "adamw")
    params = SimParams.from_calibration(cal, host_link=args.host_link, optimizer=opt,
                                        task_overhead_s=args.task_overhead)
    costs = LayerCosts(prof, sizes=model_sizes(model_json))
    res = search(costs, params, minibatch=args.minibatch, gpus=args.gpus, mode=args.mode, cap=plan_cap,
                 ubatch_fwd=args.ubatch_fwd, ubatch_bwd=args.ubatch_bwd, pack_size=args.pack_size,
                 equal_ubatch=microbatch_sensitive(model_json), model_json=model_json, host_memory=host_budget,
                 receive=None if args.p2p_receive == "auto" else args.p2p_receive)
    from harmony.schedule.tasks import build_task_graph
    graph = build_task_graph(res.best.config, costs.L)
    params = replace(params, p2p_receive=res.best.p2p_receive)     # the plan's receive mode
    precision = prof.raw.get("precision") or "fp32"
    pred = prediction_record(graph, costs, params, cal, res.best_sim, model_json, precision)
    host = res.best.host
    srch = res.summary()
    fastest = min((c for c in res.candidates if c.gpu_feasible), key=lambda c: c.iter_time_s)
    srch["host_memory"] = {
        "budget_bytes": host_budget, "source": host_src, "reserve_bytes": reserve,
        "chosen_bytes": host.total, "candidates_over_budget": sum(not c.host_fits for c in res.candidates),
        "fastest_gpu_feasible": {"index": fastest.index, "iter_time_s": fastest.iter_time_s,
                                 "host_bytes": fastest.host_bytes}}
    srch.update({"warnings": warnings, "calibration": cal_src, "profile": str(ppath), "profile_analytic": bool(prof.raw.get("analytic")),
                 "candidates_csv": args.candidates, "headroom": args.headroom, "planned_cap_bytes": plan_cap})
    if scale != 1.0:
        srch.update(compute_scale=scale, compute_scale_source=scale_src)     # JSON keys u as strings
    if prof.raw.get("gpu_clocks"):          # the clock the profile was timed at, for `harmony run` to compare
        srch["profile_gpu_clocks"] = prof.raw["gpu_clocks"]
    rec = make_schedule_record(model_json, graph, gpu_memory_cap=cap, precision=precision, prediction=pred,
                               search=srch)
    save_schedule(args.output, rec)
    if args.candidates:
        write_candidates(args.candidates, res.candidates)
    if args.trace:
        save_trace(args.trace, res.best_sim, {"model": model_json["model"], "config": res.best.config.to_json()})
    c = res.best.config
    print(f"{model_json['model']}: {len(res.candidates)} candidates in {res.search_time_s:.3f} s; chosen "
          f"{c.mode} N={c.gpus} u_fwd={c.ubatch_fwd} u_bwd={c.ubatch_bwd} {len(c.bwd_packs)} bwd / "
          f"{len(c.fwd_packs)} fwd packs ({res.best.bwd_packer} / {res.best.fwd_packer})"
          f"{f', {params.p2p_receive} receives' if c.mode == 'vPP' and c.gpus > 1 else ''}; predicted "
          f"{'' if scale == 1.0 else f'(compute x{format_scale(scale)}, {scale_src}) '}"
          f"{pred['iter_time_s']:.4f} s/iteration (bound {pred['schedule_bound_s']:.4f} s), peak "
          f"{format_bytes(max(pred['peak_memory_bytes']))} (cap {format_bytes(cap) if cap else 'none'}"
          f"{'' if cap or not plan_cap else f', planned under {format_bytes(plan_cap)} of the profiled GPU'}); "
          f"host arena {format_bytes(host.total)} (budget "
          f"{format_bytes(host_budget) if host_budget is not None else 'unchecked'}, {host_src})", file=sys.stderr)
    if not fastest.host_fits:   # (a faster plan that fits the host is a bottom cut the search did not keep)
        print(f"host memory: the fastest schedule that fits the GPU (candidate {fastest.index}, "
              f"{fastest.iter_time_s:.4f} s/iteration) needs a {format_bytes(fastest.host_bytes)} host arena, over "
              f"the budget; chose the fastest that fits", file=sys.stderr)
    return 0
