"""The swap baselines' run records against Harmony's simulator, with and without a host charge per compute
task (docs/performance.md entry 78).

swap-dp and swap-pp run on Harmony's runtime as schedules with one vLayer per pack. The simulator charges a
task's host work as the profile's issue times, which are plain PyTorch's. The runtime's own work per task
(install, copies, stream records, flags, timing marks) is not charged. `--host-task-ms` charges it
(SimParams.host_task_s; a CUDA calibration's default since entry 78). Its default, 0.60 ms, is entry 75's
narrow benchmark on one H200: runtime over plain PyTorch for 131 vLayers, 1,561 us per vLayer at
one-vLayer packs (259 FWD and BWD tasks) and 522 at eight (33 tasks), so 1,039 us x 131 / 226 tasks. It is
measured there, not fitted to these records.

Each record's graph is built again by the baseline's own config function (baselines.swap_dp / swap_pp) at
the microbatch the record ran, checked against the record's packs, and simulated with the record's receive
mode and the all-reduce inline, as the runtime ran them.
    PYTHONPATH=. python experiments/resimulate_baselines.py [RESULTS] [--host-task-ms MS]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from baselines.predicted_start import SYSTEMS, config_builder, sim_params
from harmony.jsonio import read_jsonl
from harmony.schedule.memory import LayerCosts
from harmony.schedule.simulate import CUDA_HOST_TASK_S, simulate
from harmony.schedule.tasks import build_task_graph

BENCHMARK_TASK_MS = CUDA_HOST_TASK_S * 1e3     # entry 75's narrow benchmark on one H200: the per-task part


def records(root: Path):
    """(system, path, summary) of each swap baseline's chosen run (not its search candidates) that ran."""
    for system in SYSTEMS:
        for path in sorted((root / "runs" / system).glob("*/*.jsonl")):
            if path.name.count(".") > 1:                     # <record>.u<u>.jsonl: a search candidate
                continue
            s = read_jsonl(path)[-1]
            if s.get("status") == "ok" and s.get("iter_time_s"):
                yield system, path, s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="results/paper/2xH200")
    ap.add_argument("--host-task-ms", type=float, default=BENCHMARK_TASK_MS,
                    help=f"host work per compute task to charge (default {BENCHMARK_TASK_MS}: entry 75's benchmark)")
    a = ap.parse_args(argv)
    root = Path(a.root)
    calibration = json.loads((root / "calibration.json").read_text())
    print(f"# {root}: the swap baselines' records, measured against the model without and with "
          f"{a.host_task_ms:g} ms of host work per compute task")
    print(f"{'system':8s} {'model':11s} {'N':>2s} {'D':>5s} {'u':>4s} {'tasks':>6s} {'measured':>9s} "
          f"{'model':>8s} {'ratio':>6s} {'+host':>8s} {'ratio':>6s}")
    before, after = [], []
    inputs: dict[str, tuple | None] = {}       # model -> (model JSON, profile, its LayerCosts), read once

    def model_inputs(name: str) -> tuple | None:
        if name not in inputs:
            profile_path = root / "profiles" / f"{name}.json"
            profile = json.loads(profile_path.read_text()) if profile_path.exists() else None
            inputs[name] = None if profile is None else (
                json.loads((root / "models" / f"{name}.json").read_text()), profile, LayerCosts(profile))
        return inputs[name]

    for system, path, s in records(root):
        model_name, D, N, u = s["model"], s["minibatch"], s["gpus"], s["ubatch_fwd"]
        if model_inputs(model_name) is None:
            continue
        model, profile, costs = model_inputs(model_name)
        cfg = config_builder(system)(model, D, N, u, cap=s.get("gpu_memory_cap"), profile=profile)
        if [list(p) for p in cfg.bwd_packs] != s["bwd_packs"]:
            print(f"{system:8s} {model_name:11s} {N:>2d} {D:>5d} {u:>4d}  (packs differ from the record's: skipped)")
            continue
        graph = build_task_graph(cfg, model["num_vlayers"])
        params = sim_params(calibration, model, s.get("p2p_receive") or "lazy")
        plain = simulate(graph, costs, dataclasses.replace(params, host_task_s=0.0)).iter_time_s
        charged = simulate(graph, costs, dataclasses.replace(params, host_task_s=a.host_task_ms / 1e3)).iter_time_s
        tasks = sum(1 for t in graph.tasks if t.kind != "UPD")
        t = s["iter_time_s"]
        before.append(t / plain)
        after.append(t / charged)
        print(f"{system:8s} {model_name:11s} {N:>2d} {D:>5d} {u:>4d} {tasks:>6d} {t:>9.3f} {plain:>8.3f} "
              f"{t / plain:>6.2f} {charged:>8.3f} {t / charged:>6.2f}")
    for name, ratios in (("model", before), (f"model + {a.host_task_ms:g} ms per task", after)):
        if ratios:
            err = [abs(r - 1) for r in ratios]
            print(f"# {name}: {len(ratios)} runs, median |measured/model - 1| {statistics.median(err):.3f}, "
                  f"{sum(e <= 0.10 for e in err)} within 10%, ratios {min(ratios):.2f}-{max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
