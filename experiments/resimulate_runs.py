"""Re-simulate every committed Harmony run of a results folder with the current cost model.

A run record keeps the prediction made when its schedule was searched (`predicted_iter_time_s`); the
figures and `harmony check` use that one. After a change to the cost model (docs/performance.md), this
prints, for the same schedules and calibration, the measured time, the recorded prediction and the current
model's prediction, the schedule bound (DESIGN.md §5) under the current model with bound/measured, and the
caching allocator's retries per steady iteration (the most of any GPU; docs/performance.md entry 21), so the
change's effect on accuracy (claim C11) and on the bound (C12: above 1, the run beat its bound, which then is
not one) is measured on the committed runs.

`--profiles DIR` re-simulates with the profiles of another folder (`<model>.json` or `<model>.profile.json`)
instead of the run's own: a diagnostic that isolates which profiled cost a misprediction comes from (the
schedule is still the one that ran, searched with the run's own profile).

`--runs DIR` takes the run records of another folder (any `*.jsonl` under it, such as a same-host re-run), each
matched to the schedule of ROOT/schedules whose packs and microbatches it ran; `--calibration FILE` another
host's calibration (a call's `calls/TAG.calibration.json`); `--schedules DIR` another schedule folder (such as
a superseded one).

    PYTHONPATH=. python experiments/resimulate_runs.py [results/paper/1xH100-80GB-HBM3] [--profiles DIR]
        [--runs DIR] [--calibration FILE] [--schedules DIR]
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path


def profile_path(folder: Path, model: str) -> Path | None:
    for name in (f"{model}.json", f"{model}.json.gz", f"{model}.profile.json"):
        if (folder / name).exists():
            return folder / name
    return None


PLAN_KEYS = ("ubatch_fwd", "ubatch_bwd", "fwd_packs", "bwd_packs")     # what a run record says it ran


def find_schedule(run: str, s: dict, schedules: Path) -> Path | None:
    """The schedule a run record ran: named after the record under runs/harmony-*, else matched by plan."""
    m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
    if Path(run).parent.parent.name.startswith("harmony-"):
        cfg = Path(run).stem.split("-", 2)[-1]                      # N4-D64-auto -> auto
        sched = schedules / m / f"{mode}-N{N}-D{D}-{cfg}.json"
        return sched if sched.exists() else None
    plan = [s.get(k) for k in PLAN_KEYS]
    for sched in sorted((schedules / m).glob(f"{mode}-N{N}-D{D}-*.json")):
        c = json.loads(sched.read_text())["graph"]["config"]
        if [c.get(k) for k in PLAN_KEYS] == plan:
            return sched
    return None


def main(argv: list[str]) -> int:
    from harmony.profile_data import Profile
    from harmony.schedule.cli import model_sizes
    from harmony.schedule.bound import schedule_bound
    from harmony.schedule.io import load_schedule, planned_cap
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="results/paper/1xH100-80GB-HBM3")
    ap.add_argument("--profiles", help="profile folder to simulate with (default: ROOT/profiles)")
    ap.add_argument("--runs", help="folder of run records (default: ROOT/runs/harmony-*)")
    ap.add_argument("--calibration", help="calibration to simulate with (default: ROOT/calibration.json)")
    ap.add_argument("--schedules", help="schedule folder (default: ROOT/schedules)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    profiles = Path(args.profiles) if args.profiles else root / "profiles"
    cal_path = Path(args.calibration) if args.calibration else root / "calibration.json"
    cal = json.loads(cal_path.read_text())
    schedules = Path(args.schedules) if args.schedules else root / "schedules"
    runs = (sorted(glob.glob(str(Path(args.runs) / "**" / "*.jsonl"), recursive=True)) if args.runs
            else sorted(glob.glob(str(root / "runs" / "harmony-*" / "*" / "*.jsonl"))))
    print(f"# {root}: schedules of the runs; calibration {cal_path}; profiles from {profiles}; "
          f"runs from {args.runs or root / 'runs'}")
    print(f"{'model':<13} {'mode':<4} {'N':>2} {'D':>5} {'schedule':<10} {'measured s':>10} {'recorded pred':>13} "
          f"{'ratio':>6} {'current pred':>12} {'ratio':>6} {'bound':>8} {'/bound':>6} {'retries':>7}")
    for run in runs:
        s = json.loads(Path(run).read_text().splitlines()[-1])
        if s.get("status") != "ok":
            continue
        m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
        sched = find_schedule(run, s, schedules)
        cfg = sched.stem.split("-", 3)[-1] if sched else "?"
        prof = profile_path(profiles, m)
        if sched is None or prof is None:
            print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} (no {'schedule' if sched is None else 'profile'})")
            continue
        rec, graph = load_schedule(sched)
        params = SimParams.from_calibration(cal, optimizer=(rec["model"].get("optimizer") or {}).get("kind", "adamw"))
        costs = LayerCosts(Profile.load(prof), sizes=model_sizes(rec["model"]))
        # the cap the search planned under (cap less its headroom), as the recorded prediction was made
        cap = planned_cap(rec)
        now = simulate(graph, costs, params, cap).iter_time_s
        link = "shared" if params.shared_link else "per-gpu"
        bound = schedule_bound(graph, costs, cal, host_link=link)["schedule_bound_s"]
        t, was = s["iter_time_s"], s.get("predicted_iter_time_s")
        print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} {t:>10.3f} {was or float('nan'):>13.3f} "
              f"{t / was if was else float('nan'):>6.2f} {now:>12.3f} {t / now:>6.2f} {bound:>8.3f} {bound / t:>6.2f} "
              f"{max(s.get('alloc_retries') or [0]):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
