"""The model's update tail beside the runs' (docs/performance.md entry 102): for every Harmony run record of a
results folder, the simulator's time from the last compute task's end to the last CPU update's end in a
steady-state iteration of the run's schedule, and the run's own `upd_drain_s` (the host's wait for updates
after its GPU work and copies are done) and `gpu_drain_s`, medians over the timed iterations, the larger rank.

    PYTHONPATH=. python experiments/update_tail.py results/paper/2xH200 [--gpus 2]
"""
from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path


def _median_phase(iterations: list[dict], key: str) -> float:
    return statistics.median(max(h.get(key, 0.0) for h in it["host_phases"]) for it in iterations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results folder with runs/, schedules/, profiles/ and calibration.json")
    ap.add_argument("--gpus", type=int, default=None, help="only runs on this many GPUs")
    a = ap.parse_args(argv)
    from harmony.jsonio import read_json, read_jsonl
    from harmony.schedule.io import planned_cap
    from harmony.schedule.simulate import simulate
    from resimulate_runs import find_schedule, require_profile, sim_inputs     # experiments/, beside this

    root = Path(a.results)
    runs = sorted(glob.glob(str(root / "runs" / "harmony-v*" / "*" / f"N{a.gpus or '*'}-D*-*.jsonl")))
    if not runs:
        print(f"no Harmony run records under {root}/runs/", file=sys.stderr)
        return 2
    cal = read_json(root / "calibration.json", kind="calibration")
    print(f"{'model':12s} {'mode':4s} {'point':14s} {'measured':>9s} {'predicted':>9s} {'model tail':>11s} "
          f"{'upd_drain':>10s} {'gpu_drain':>10s}")
    for run in runs:
        lines = read_jsonl(run)
        summary = lines[-1]
        timed = [r for r in lines if "iteration" in r and r.get("host_phases")][summary.get("warmup_iterations", 1):]
        sched = find_schedule(run, summary, root / "schedules") if summary.get("status") == "ok" else None
        if sched is None or not timed:
            continue
        rec, g, costs, params = sim_inputs(sched, require_profile(root / "profiles", summary["model"]), cal)
        sim = simulate(g, costs, params, planned_cap(rec), record=True)
        e0, e1 = sim.iteration_ends[-2], sim.iteration_ends[-1]
        inside = [ev for ev in sim.events if e0 < ev[4] <= e1]
        compute_end = max(ev[4] for ev in inside if ev[2].split()[0] in ("FWD", "BWD"))
        update_end = max([ev[4] for ev in inside if ev[2].startswith("UPD")] or [compute_end])
        print(f"{summary['model']:12s} {g.config.mode:4s} {Path(run).stem:14s} {summary['iter_time_s']:8.3f}s "
              f"{sim.iter_time_s:8.3f}s {max(0.0, update_end - compute_end) * 1e3:8.1f} ms "
              f"{_median_phase(timed, 'upd_drain_s') * 1e3:7.1f} ms {_median_phase(timed, 'gpu_drain_s') * 1e3:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
