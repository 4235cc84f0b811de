"""Write a vDP schedule's twin with `shard_updates` (docs/performance.md entry 102): the same packs and
microbatches, every rank copying and stepping its 1/N of each pack, with the prediction today's model makes
for it (the folder's profile and calibration, under the memory the original was planned with), so that a
device call can run a plan against its sharded twin and nothing else differs.

    PYTHONPATH=. python experiments/shard_schedule.py results/paper/2xH200/schedules/bert96/vDP-N2-D16-auto.json \
        --results results/paper/2xH200 -o bert96-sharded.json
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("schedule", help="a vDP schedule.json across GPUs")
    ap.add_argument("--results", required=True, help="results folder with profiles/ and calibration.json")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    from harmony.profile_data import Profile
    from harmony.schedule.cli import load_calibration, model_sizes, prediction_record
    from harmony.schedule.io import (load_schedule, make_schedule_record, planned_cap, planned_compute_scale,
                                     save_schedule)
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    from harmony.schedule.tasks import ScheduleError, build_task_graph

    rec, g = load_schedule(a.schedule)
    model = rec["model"]["model"]
    ppath = os.path.join(a.results, "profiles", f"{model}.json")
    try:
        cfg = dataclasses.replace(g.config, shard_updates=True)
        graph = build_task_graph(cfg, rec["model"]["num_vlayers"])
    except ScheduleError as e:
        print(f"{a.schedule}: {e}", file=sys.stderr)
        return 2
    prof = Profile.load(ppath, compute_scale=planned_compute_scale(rec))
    cal, _ = load_calibration(os.path.join(a.results, "calibration.json"), ppath)
    opt = (rec["model"].get("optimizer") or {}).get("kind", "adamw")
    params = SimParams.from_calibration(cal, optimizer=opt)
    costs = LayerCosts(prof, sizes=model_sizes(rec["model"]))
    cap = planned_cap(rec)
    sims = {name: simulate(gr, costs, params, cap) for name, gr in (("plan", g), ("sharded", graph))}
    pred = prediction_record(graph, costs, params, cal, sims["sharded"], rec["model"], rec.get("precision", "fp32"))
    search = dict(rec.get("search") or {}, sharded_from=a.schedule)
    save_schedule(a.output, make_schedule_record(rec["model"], graph, gpu_memory_cap=rec.get("gpu_memory_cap"),
                                                 precision=rec.get("precision", "fp32"), prediction=pred,
                                                 search=search))
    print(f"{model} D={cfg.minibatch} N={cfg.gpus}: {len(cfg.bwd_packs)} packs, predicted "
          f"{sims['plan'].iter_time_s:.4f} s -> {sims['sharded'].iter_time_s:.4f} s sharded "
          f"({sims['sharded'].iter_time_s / sims['plan'].iter_time_s:.3f}); wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
