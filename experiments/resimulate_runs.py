"""Re-simulate every committed Harmony run of a results folder with the current cost model.

A run record keeps the prediction made when its schedule was searched (`predicted_iter_time_s`); the
figures and `harmony check` use that one. After a change to the cost model (docs/performance.md), this
prints, for the same schedules and calibration, the measured time, the recorded prediction and the current
model's prediction, and the schedule bound (DESIGN.md §5) under the current model with measured/bound, so the
change's effect on accuracy (claim C11) and on the bound (C12: a run far under 1 means the bound is not one)
is measured on the committed runs.

`--profiles DIR` re-simulates with the profiles of another folder (`<model>.json` or `<model>.profile.json`)
instead of the run's own: a diagnostic that isolates which profiled cost a misprediction comes from (the
schedule is still the one that ran, searched with the run's own profile).

    PYTHONPATH=. python experiments/resimulate_runs.py [results/paper/1xH100-80GB-HBM3] [--profiles DIR]
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path


def profile_path(folder: Path, model: str) -> Path | None:
    for name in (f"{model}.json", f"{model}.profile.json"):
        if (folder / name).exists():
            return folder / name
    return None


def main(argv: list[str]) -> int:
    from harmony.profile_data import Profile
    from harmony.schedule.cli import model_sizes
    from harmony.schedule.bound import schedule_bound
    from harmony.schedule.io import load_schedule
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="results/paper/1xH100-80GB-HBM3")
    ap.add_argument("--profiles", help="profile folder to simulate with (default: ROOT/profiles)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    profiles = Path(args.profiles) if args.profiles else root / "profiles"
    cal = json.loads((root / "calibration.json").read_text())
    print(f"# {root}: schedules and calibration of the runs; profiles from {profiles}")
    print(f"{'model':<13} {'mode':<4} {'N':>2} {'D':>5} {'schedule':<10} {'measured s':>10} {'recorded pred':>13} "
          f"{'ratio':>6} {'current pred':>12} {'ratio':>6} {'bound':>8} {'/bound':>6}")
    for run in sorted(glob.glob(str(root / "runs" / "harmony-*" / "*" / "*.jsonl"))):
        s = json.loads(Path(run).read_text().splitlines()[-1])
        if s.get("status") != "ok":
            continue
        m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
        cfg = Path(run).stem.split("-", 2)[-1]                      # N4-D64-auto -> auto
        sched = root / "schedules" / m / f"{mode}-N{N}-D{D}-{cfg}.json"
        prof = profile_path(profiles, m)
        if not sched.exists() or prof is None:
            print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} (no {'schedule' if not sched.exists() else 'profile'})")
            continue
        rec, graph = load_schedule(sched)
        params = SimParams.from_calibration(cal, optimizer=(rec["model"].get("optimizer") or {}).get("kind", "adamw"))
        costs = LayerCosts(Profile.load(prof), sizes=model_sizes(rec["model"]))
        now = simulate(graph, costs, params, rec.get("gpu_memory_cap")).iter_time_s
        link = "shared" if params.shared_link else "per-gpu"
        bound = schedule_bound(graph, costs, cal, host_link=link)["schedule_bound_s"]
        t, was = s["iter_time_s"], s.get("predicted_iter_time_s")
        print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} {t:>10.3f} {was or float('nan'):>13.3f} "
              f"{t / was if was else float('nan'):>6.2f} {now:>12.3f} {t / now:>6.2f} {bound:>8.3f} {bound / t:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
