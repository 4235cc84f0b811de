"""Search every searched schedule of a results folder again, with today's code and the folder's profiles,
and say where the plan on record is no longer the one the search picks.

A run record is checked against its own schedule's prediction (`harmony check`), so a schedule searched
from an older profile or by an older search keeps "passing" while a better plan exists: gpt2-xl at
D = 256 on the H100 ran a u = 4 plan searched from the profile before docs/performance.md entry 35 for two
sessions, 6% slower by prediction than what the search picks from today's profile (entry 37). This finds
such schedules. Only `*-auto.json` schedules are searched (fixed plans such as figure 8's are not; with
`--fixed` they are made again too, their plan the same, their prediction today's model's), with
the cap, headroom and mode each one records, the folder's `profiles/<model>.json`, `models/<model>.json`
and `calibration.json`. A plan whose microbatches or packs differ and whose prediction is at least
`--threshold` faster (default 2%) than the plan on record simulated by today's model ("its plan today":
the prediction on record was made by the model of its day) is marked STALE: re-search it and re-run its
records.

    PYTHONPATH=. python experiments/stale_schedules.py results/paper/1xH100-80GB-HBM3 [--gpus 1]
        [--threshold 0.02] [--only MODEL] [--headroom H] > results/paper/1xH100-80GB-HBM3/stale-schedules.txt

`--headroom H` searches with that headroom instead of each record's: the predicted cost, point by point,
of changing the workflow's headroom (docs/performance.md entry 38).

`--rewrite` writes today's search over every schedule whose plan or prediction changed and that no run
record used (a figure's predicted points, e.g. N = 4 on a one-GPU machine; a search that found no plan),
with its candidates CSV, trace and log, as the workflow's schedule rule does. A plan is its microbatches, packs and, for vPP across GPUs, the receive
mode the search chose (entry 59). A schedule with a run is left as it is
(its run executed that plan): re-run it to change it.

`--rewrite --rewrite-runs REASON` also rewrites each schedule with a run whose prediction today's search
moves by at least `--threshold` from the one its run was measured against, or whose plan today's search
beats by that much: the old schedule files go to `superseded/REASON/`, and the last line names the runs to
measure again (`experiments/device/rerun-stale.py ... --reason REASON --records ...`), since a prediction
counts only when it was made before its run (docs/performance.md entry 79).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from harmony.cli import main as harmony_main
from harmony.schedule.io import planned_receive_mode
from harmony.schedule.tasks import ScheduleConfig, ScheduleError
from harmony.workflow import cfg_args
from resimulate_runs import sim_inputs      # experiments/: this script's folder is on sys.path


def receive(rec: dict) -> tuple:
    """The receive mode a run of a vPP schedule across GPUs takes from it (`harmony run`'s default since
    docs/performance.md entry 59); () where nothing is received from another GPU."""
    return (planned_receive_mode(rec),) if ScheduleConfig.from_json(rec["graph"]["config"]).receives_across_gpus else ()


def plan(rec: dict) -> tuple:
    c = rec["graph"]["config"]
    return (c["ubatch_fwd"], c["ubatch_bwd"], len(c["bwd_packs"]), len(c["fwd_packs"])) + receive(rec)


def setting(rec: dict, sched: Path) -> dict:
    """Mode, GPUs, minibatch, cap and headroom of a schedule record; of a failed search's record
    (`stage-failure`: no plan, e.g. infeasible) from its file name (MODE-N<gpus>-D<minibatch>-auto.json) and
    the command it ran."""
    if "graph" in rec:
        c = rec["graph"]["config"]
        return {"mode": c["mode"], "gpus": c["gpus"], "minibatch": c["minibatch"],
                "cap": rec.get("gpu_memory_cap"), "headroom": rec.get("search", {}).get("headroom")}
    m = re.fullmatch(r"(vPP|vDP)-N(\d+)-D(\d+)-auto", sched.stem)
    if not m:
        raise ValueError(f"{sched}: neither a schedule nor named MODE-N<gpus>-D<minibatch>-auto.json")
    cmd = rec.get("command") or []
    words = cmd.split() if isinstance(cmd, str) else [str(w) for w in cmd]
    opt = {k: words[i + 1] for i, k in enumerate(words[:-1]) if k in ("--gpu-memory", "--headroom")}
    return {"mode": m[1], "gpus": int(m[2]), "minibatch": int(m[3]), "cap": opt.get("--gpu-memory"),
            "headroom": float(opt["--headroom"]) if "--headroom" in opt else None}


def same_plan(rec: dict) -> tuple:
    """What a run of the schedule executes: its microbatch sizes, packs and receive mode."""
    c = rec["graph"]["config"]
    return (c["ubatch_fwd"], c["ubatch_bwd"], tuple(map(tuple, c["bwd_packs"])), tuple(map(tuple, c["fwd_packs"])),
            receive(rec))


def research(root: Path, sched: Path, out: Path, headroom: float | None = None) -> tuple[dict | None, str]:
    """The search of today's code for the setting of schedule `sched` (its record's cap, headroom, mode;
    `headroom` replaces the record's), written to `out` with its candidates CSV and trace beside it, named as
    the workflow names them; returns (the schedule, None when it finds no plan either; the search's log)."""
    rec = json.loads(sched.read_text())
    c = setting(rec, sched)
    model = sched.parent.name
    stem = str(out)[:-len(".json")]
    cmd = ["schedule", str(root / "profiles" / f"{model}.json"),
           "--model", str(root / "models" / f"{model}.json"), "--minibatch", str(c["minibatch"]),
           "--gpus", str(c["gpus"]), "--mode", c["mode"], "--calibration", str(root / "calibration.json"),
           "-o", str(out), "--candidates", stem + ".csv", "--trace", stem + ".trace.json.gz"]
    if c["cap"]:
        cmd += ["--gpu-memory", str(c["cap"])]
    if headroom is None:
        headroom = c["headroom"]
    if headroom is not None:
        cmd += ["--headroom", str(headroom)]
    cmd += cfg_args(sched.stem.split(f"-D{c['minibatch']}-", 1)[1]).split()    # a fixed plan's u and pack size
    err = io.StringIO()        # in this process: one torch import for every search, not one each
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = harmony_main(cmd)
    if rc:
        if "graph" not in rec and "no schedule fits" in err.getvalue():
            return None, err.getvalue()
        raise RuntimeError(f"{sched}: the search failed: {err.getvalue().strip()[-400:]}")
    return json.loads(out.read_text()), err.getvalue()


def plan_today(root: Path, sched: Path, cal: dict) -> float:
    """The plan on record simulated by today's model (the folder's profile and calibration, the cap it was
    planned under): what a re-run of it would be predicted today, to weigh today's search against. The
    prediction on record was made by the model of its day; after a change of the model (entry 47's charge
    beside NCCL, entry 48's receives) comparing today's search with it mixes the two changes."""
    from harmony.schedule.io import planned_cap
    from harmony.schedule.simulate import simulate
    rec, graph, costs, params = sim_inputs(sched, root / "profiles" / f"{sched.parent.name}.json", cal)
    return simulate(graph, costs, params, planned_cap(rec)).iter_time_s


def run_record(root: Path, sched: Path, old: dict) -> Path:
    """Where the workflow keeps the run of schedule `sched`: runs/harmony-MODE/MODEL/N<g>-D<d>-<cfg>.jsonl."""
    c = setting(old, sched)
    cfg = sched.stem.split(f"-D{c['minibatch']}-", 1)[1]
    return root / "runs" / f"harmony-{c['mode']}" / sched.parent.name / f"N{c['gpus']}-D{c['minibatch']}-{cfg}.jsonl"


SCHEDULE_SUFFIXES = (".json", ".csv", ".trace.json.gz")


def rewrite(root: Path, sched: Path, old: dict, searched: Path, log: str,
            with_run: str | None = None) -> tuple[str, Path | None]:
    """The search just written to `searched` (schedule, CSV, trace) moved over `sched`, and its log where
    the workflow's schedule rule keeps it, unless a run record used `sched`. `with_run` (a reason): a
    schedule with a run is rewritten too, its old files moved to superseded/REASON/ first; the run record
    stays until it is run again (experiments/device/rerun-stale.py --records, with the same reason).
    Returns (the note for the line, the run record to measure again or None)."""
    c = setting(old, sched)
    convergence = root.glob(f"convergence/*/{sched.parent.name}/harmony-{c['mode']}-N{c['gpus']}.jsonl")
    run = run_record(root, sched, old)
    has_run = run.exists() or (not sched.stem.endswith("-auto") and any(convergence))
    if has_run and not (with_run and run.exists()):
        return "  (has a run: left)", None
    log_path = root / "logs" / "schedule" / sched.parent.name / f"{sched.stem}.log"
    if has_run:
        for f in [Path(str(sched)[:-len(".json")] + x) for x in SCHEDULE_SUFFIXES] + [log_path]:
            if f.exists():
                dest = root / "superseded" / with_run / f.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(f), str(dest))
    for suffix in SCHEDULE_SUFFIXES:
        shutil.move(str(searched)[:-len(".json")] + suffix, str(sched)[:-len(".json")] + suffix)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(log)
    if has_run:
        return f"  rewritten; its run {run.relative_to(root)} runs again ({with_run})", run
    return "  rewritten", None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a results folder with schedules/, profiles/, models/, calibration.json")
    ap.add_argument("--gpus", type=int, default=None, help="only schedules for this many GPUs")
    ap.add_argument("--only", default=None, help="only this model")
    ap.add_argument("--rewrite", action="store_true",
                    help="write today's plan over each changed schedule that no run record used (predictions)")
    ap.add_argument("--rewrite-runs", metavar="REASON", default=None,
                    help="with --rewrite, also each schedule with a run whose prediction today differs from the "
                         "one its run was measured against by at least --threshold (a plan STALE, or the model "
                         "changed): its old files go to superseded/REASON/, and the runs to re-run are listed "
                         "(a prediction is made before its run, so the record must be measured again)")
    ap.add_argument("--fixed", action="store_true",
                    help="also the fixed plans (MODE-N<g>-D<d>-u<f>-<b>-p<pack>.json): the same plan, today's prediction")
    ap.add_argument("--threshold", type=float, default=0.02, help="predicted gain that makes a plan STALE")
    ap.add_argument("--headroom", type=float, default=None,
                    help="search with this memory headroom instead of each record's: what a change of the "
                         "workflow's headroom would cost by prediction (a plan the search then picks is "
                         "slower or the same, so none is STALE)")
    a = ap.parse_args(argv)
    if a.rewrite_runs and not a.rewrite:
        ap.error("--rewrite-runs REASON goes with --rewrite")
    if a.rewrite_runs is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", a.rewrite_runs):
        ap.error(f"--rewrite-runs {a.rewrite_runs!r}: a reason is one folder name (letters, digits, . _ -)")
    named = re.compile(r"(vPP|vDP)-N\d+-D\d+-(auto|u\d+-\d+-p\d+)" if a.fixed else r"(vPP|vDP)-N\d+-D\d+-auto")
    scheds = sorted(p for p in (a.root / "schedules").glob("*/*.json")
                    if named.fullmatch(p.stem) and (a.only is None or p.parent.name == a.only)
                    and (a.root / "profiles" / f"{p.parent.name}.json").exists())
    if not scheds:
        print(f"no searched schedules with a profile under {a.root}/schedules", file=sys.stderr)
        return 2
    print(f"# {a.root}: each searched schedule against today's search"
          + (f" with headroom {a.headroom}" if a.headroom is not None else "")
          + f" (u_fwd, u_bwd, bwd packs, fwd packs; predicted s/iteration; its plan today: the plan on record "
          f"simulated by today's model); STALE: another plan, "
          f">= {a.threshold:.0%} faster")
    stale = 0
    rerun: list[str] = []       # --rewrite-runs: the run records whose schedule was rewritten
    cal = json.loads((a.root / "calibration.json").read_text())     # every plan is simulated with it
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(scheds):
            old = json.loads(p.read_text())
            if a.gpus is not None and setting(old, p)["gpus"] != a.gpus:
                continue
            print(f"[{i + 1}/{len(scheds)}] {p.parent.name}/{p.name}", file=sys.stderr, flush=True)
            searched = Path(tmp) / "s.json"
            new, log = research(a.root, p, searched, a.headroom)
            # a prediction is what a figure shows where no run is: a new model of the same plan changes it too
            changed = new is not None and ("graph" not in old or same_plan(old) != same_plan(new)
                                           or abs(new["prediction"]["iter_time_s"] / old["prediction"]["iter_time_s"]
                                                  - 1) > 1e-3)
            if "graph" in old:          # before any rewrite: the plan on record under today's model
                try:
                    t_same = plan_today(a.root, p, cal)
                    today = f"; its plan today {t_same:8.3f} ({new['prediction']['iter_time_s'] / t_same - 1:+.1%})"
                except ScheduleError as e:      # a task list this code does not rebuild: weigh against the record
                    t_same = old["prediction"]["iter_time_s"]
                    today = f"; its plan today: not simulated ({str(e).split(': ')[-1][:60]})"
            # --rewrite-runs: the run was measured against a prediction today's model moves by the threshold,
            # or today's search beats its plan by it (STALE below)
            moved = "graph" in old and new is not None and (
                abs(new["prediction"]["iter_time_s"] / old["prediction"]["iter_time_s"] - 1) >= a.threshold
                or (same_plan(old) != same_plan(new) and 1 - new["prediction"]["iter_time_s"] / t_same >= a.threshold))
            done, again = rewrite(a.root, p, old, searched, log, a.rewrite_runs if moved else None) \
                if a.rewrite and changed else ("", None)
            if again is not None:
                rerun.append(str(again))
            if "graph" not in old:      # the search on record found no plan (e.g. infeasible)
                now = "no plan either" if new is None else \
                    f"{plan(new)} {new['prediction']['iter_time_s']:8.3f} STALE"
                stale += new is not None
                print(f"{p.parent.name:18s} {p.stem:18s} record {old.get('status', 'failed')} (no plan)  now {now}"
                      f"{done}", flush=True)
                continue
            t_old, t_new = old["prediction"]["iter_time_s"], new["prediction"]["iter_time_s"]
            # STALE: today's search against the same plan under today's model, so a change of the model alone
            # (the same plan predicted slower or faster) marks nothing and hides no better plan
            gain = 1 - t_new / t_old
            mark = "STALE" if same_plan(old) != same_plan(new) and 1 - t_new / t_same >= a.threshold else ""
            stale += bool(mark)
            print(f"{p.parent.name:18s} {p.stem:18s} record {plan(old)} {t_old:8.3f}  now {plan(new)} "
                  f"{t_new:8.3f} ({-gain:+.1%}){today} {mark}".rstrip() + done, flush=True)
    print(f"# {stale} stale")
    if rerun:
        print(f"# {len(rerun)} run(s) to measure again against their new prediction, e.g.: "
              f"python experiments/device/rerun-stale.py {a.root} --key rewritten_schedule "
              f"--reason {a.rewrite_runs} --records '{'|'.join(re.escape(r) for r in rerun)}' "
              f"--config scale={a.root.parent.name} hardware={a.root.name} gpus_present=N iters=4 -o LIST.sh")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
