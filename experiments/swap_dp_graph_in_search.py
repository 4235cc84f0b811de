"""Figure 10's vDP point at N = 2: Harmony's searched plan against swap-dp's own task graph (one vLayer per
pack, at the u its search picked), both simulated with Harmony's model, profile and calibration (on CUDA with
the runtime's host work per task, entry 78), with the all-reduce overlapped and inline (docs/performance.md entry 78). swap-dp's graph lies in Harmony's schedule
space. This asks whether the search misses it, and whether the model can be trusted there; the runs'
measured times are printed beside.
    PYTHONPATH=. python experiments/swap_dp_graph_in_search.py MODEL D [RESULTS]     (RESULTS: results/paper/2xH200)
"""
from __future__ import annotations

import dataclasses
import json
import sys

from baselines.swap_dp import swap_dp_config
from harmony.jsonio import read_jsonl
from harmony.schedule.memory import LayerCosts
from harmony.schedule.simulate import SimParams, simulate
from harmony.schedule.tasks import TaskGraph, build_task_graph


def summary(path: str) -> dict:
    return read_jsonl(path)[-1]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    model_name, D = argv[0], int(argv[1])
    R = argv[2] if len(argv) == 3 else "results/paper/2xH200"
    profile = json.load(open(f"{R}/profiles/{model_name}.json"))
    calibration = json.load(open(f"{R}/calibration.json"))
    model = json.load(open(f"{R}/models/{model_name}.json"))
    costs = LayerCosts(profile)
    params = SimParams.from_calibration(calibration, optimizer=(model.get("optimizer") or {}).get("kind", "adamw"))
    schedule = json.load(open(f"{R}/schedules/{model_name}/vDP-N2-D{D}-auto.json"))
    cap = schedule["search"]["planned_cap_bytes"]          # the cap the search planned with (its headroom)
    swap = summary(f"{R}/runs/swap-dp/{model_name}/N2-D{D}-best.jsonl")
    u = swap["ubatch_fwd"]
    swap_cfg = swap_dp_config(model, D, 2, u, cap=swap.get("gpu_memory_cap"), profile=profile)
    assert [list(p) for p in swap_cfg.bwd_packs] == swap["bwd_packs"], "the record ran other packs"
    graphs = {"harmony plan": TaskGraph.from_json(schedule["graph"]),
              "swap-dp graph": build_task_graph(swap_cfg, model["num_vlayers"])}
    for name, graph in graphs.items():
        for mode in ("overlap", "inline"):
            sim = simulate(graph, costs, dataclasses.replace(params, allreduce=mode), cap)
            print(f"{model_name} D={D} {name:14s} {mode:8s} {sim.iter_time_s:.4f} s, feasible {sim.feasible}, "
                  f"peak {max(sim.peak_memory_bytes) / 2**30:.2f} GiB (planned cap {cap / 2**30:.2f})")
    measured = {m: summary(f"{R}/runs/harmony-{m}/{model_name}/N2-D{D}-auto.jsonl")["iter_time_s"]
                for m in ("vDP", "vPP")}
    print(f"measured: Harmony vDP {measured['vDP']:.3f} s, vPP {measured['vPP']:.3f} s; "
          f"swap-dp {swap['iter_time_s']:.3f} s at u = {u} (its prediction {swap['predicted_iter_time_s']:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
