"""Re-simulate every committed Harmony run of a results folder with the current cost model.

A run record keeps the prediction made when its schedule was searched (`predicted_iter_time_s`); the
figures and `harmony check` use that one. After a change to the cost model (docs/performance.md), this
prints, for the same schedules, profiles and calibration, the measured time, the recorded prediction and
the current model's prediction, so the change's effect on accuracy is measured on the committed runs.

    python experiments/resimulate_runs.py [results/paper/1xH100-80GB-HBM3]
"""
from __future__ import annotations

import glob
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from harmony.profile_data import Profile
    from harmony.schedule.cli import model_sizes
    from harmony.schedule.io import load_schedule
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    root = Path(argv[0] if argv else "results/paper/1xH100-80GB-HBM3")
    cal = json.loads((root / "calibration.json").read_text())
    print(f"{'model':<11} {'mode':<4} {'N':>2} {'D':>5} {'measured s':>10} {'recorded pred':>13} {'ratio':>6} "
          f"{'current pred':>12} {'ratio':>6}")
    for run in sorted(glob.glob(str(root / "runs" / "harmony-*" / "*" / "*.jsonl"))):
        s = json.loads(Path(run).read_text().splitlines()[-1])
        if s.get("status") != "ok":
            continue
        m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
        sched = root / "schedules" / m / f"{mode}-N{N}-D{D}-auto.json"
        prof_path = root / "profiles" / f"{m}.json"
        if not sched.exists() or not prof_path.exists():
            continue
        rec, graph = load_schedule(sched)
        params = SimParams.from_calibration(cal, optimizer=(rec["model"].get("optimizer") or {}).get("kind", "adamw"))
        costs = LayerCosts(Profile.load(prof_path), sizes=model_sizes(rec["model"]))
        now = simulate(graph, costs, params, rec.get("gpu_memory_cap")).iter_time_s
        t, was = s["iter_time_s"], s.get("predicted_iter_time_s")
        print(f"{m:<11} {mode:<4} {N:>2} {D:>5} {t:>10.3f} {was or float('nan'):>13.3f} {t / was if was else float('nan'):>6.2f} "
              f"{now:>12.3f} {t / now:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
