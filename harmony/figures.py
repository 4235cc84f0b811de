"""`harmony figure`: run records -> <figure>.csv (exactly the numbers plotted), .png, .pdf, .env.json.

  harmony figure figure10 RUN.jsonl ... SCHEDULE.json ... --experiment experiments/figure10.yaml \\
      --scale smoke --hardware cpu -o results/smoke/cpu/figure10.csv      (what Snakemake calls; the
      input files come right after the figure name)
  harmony figure --all --from results/paper/1xH100-80GB-HBM3                 (re-draw every figure
      from the records already there: no stage runs, no GPU, seconds)
  harmony figure --import-device results/paper/1xH100-80GB-HBM3     (file the records that the device
      scripts wrote, e.g. gpt2-xl-D64-N1/harmony.jsonl, into the layout above: runs/<system>/<model>/
      N<n>-D<d>-<cfg>.jsonl, named from each summary's own system/mode/model/gpus/minibatch; byte copies)
  harmony figure --results-page -o docs/results.md   (every figure of every results/<scale>/<hardware>/,
      its claims table and the hardware of its numbers, as one Markdown page)

Rows come from run summaries (measured) and, for GPU counts this machine does not have, from the
simulator's prediction stored in schedule.json (kind "predicted"). A configuration that did not run
(status oom / infeasible / unavailable / error, or no record at all: "missing", drawn as "not run") stays
in the CSV and is marked on the plot, never dropped. Reads JSON only: no torch import, so re-drawing is fast anywhere.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import platform
import re
import sys
from pathlib import Path

import yaml

from harmony.jsonio import write_csv
from harmony.workflow import BASELINES, FIGURES, HARMONY, cfg_name, grid_of, parse_path, run_gpus

COLUMNS = ["figure", "scale", "hardware", "model", "model_params", "minibatch", "system", "gpus", "cfg", "kind", "status",
           "samples_per_s", "iter_time_s", "predicted_iter_time_s", "roofline_s", "roofline_fraction",
           "schedule_bound_s", "bound_fraction", "bytes_h2d",
           "bytes_d2h", "bytes_p2p", "bytes_allreduce", "swap_bytes", "ubatch", "precision", "gpu_memory_cap", "data",
           "message", "source"]
CURVE_COLUMNS = ["figure", "scale", "hardware", "model", "model_params", "minibatch", "system", "gpus", "status",
                 "iteration", "loss", "data", "source", "message"]
SYSTEM_ORDER = [*HARMONY, *BASELINES, "pytorch"]


def add_arguments(p):
    p.add_argument("figure", nargs="?", choices=FIGURES, help="which figure (omit with --all)")
    p.add_argument("inputs", nargs="*", help="run records (.jsonl), schedules (.json), table1 search (.csv)")
    p.add_argument("--experiment", help="the figure's grid (default experiments/<figure>.yaml)")
    p.add_argument("--experiments-dir", default="experiments")
    p.add_argument("--scale", help="smoke | paper | large (default: from the results path)")
    p.add_argument("--hardware", help="hardware tag (default: from the results path)")
    p.add_argument("--gpus-present", type=int, default=None, help="GPUs the runs could use (for the title)")
    p.add_argument("-o", "--out", help="output CSV; PNG, PDF and .env.json are written beside it")
    p.add_argument("--all", action="store_true", help="every figure whose records exist under --from (or that was "
                   "drawn there before); name a figure with --from to draw it before any of its points ran")
    p.add_argument("--from", dest="from_dir", help="results/<scale>/<hardware>: read the records found there")
    p.add_argument("--import-device", metavar="DIR",
                   help="file the records written by the device scripts under DIR into the workflow layout "
                        "(runs/<system>/<model>/N<n>-D<d>-<cfg>.jsonl, schedules/, profiles/, models/, "
                        "calibration.json, table1-search.csv) of --into (default DIR); with --all, draw after")
    p.add_argument("--into", help="results/<scale>/<hardware> to file the imported records into (default: DIR)")
    p.add_argument("--results-page", action="store_true",
                   help="write the results page (every figure, claims table, hardware) of --results-root")
    p.add_argument("--results-root", default="results", help="folder holding <scale>/<hardware>/ (default results)")


def main(args) -> int:
    if getattr(args, "import_device", None):
        import_device(Path(args.import_device), Path(args.into or args.import_device))
        if not args.all:
            return 0
        args.from_dir = args.from_dir or (args.into or args.import_device)
    if getattr(args, "results_page", False):
        return write_results_page(Path(args.results_root), Path(args.out or "docs/results.md"))
    if args.all or args.from_dir:
        if not args.from_dir:
            raise ValueError("--all needs --from results/<scale>/<hardware>")
        root = Path(args.from_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such results folder")
        scale, hardware = args.scale or root.parent.name, args.hardware or root.name
        gpus_present = args.gpus_present if args.gpus_present is not None else gpus_of_hardware(hardware)
        files = _glob_results(root)
        figures = FIGURES if args.all else [args.figure]
        made = 0
        for fig in figures:
            exp = _load_experiment(fig, args.experiment if not args.all else None, args.experiments_dir)
            if scale not in exp["grid"]:
                raise ValueError(f"scale {scale!r} (from {root}) is not a scale of {fig}")
            if fig == "table1" and not (root / "table1-search.csv").exists():
                print(f"{fig}: skipped (no {root / 'table1-search.csv'})")
                continue
            rows = collect(fig, exp, scale, hardware, files, complete=True, gpus_present=gpus_present)
            # --all draws the figures with records, and those drawn before (a figure named on its own is
            # drawn with its grid points missing, so that C8 counts what is left to run on this machine)
            if (args.all and not (root / f"{fig}.csv").exists()
                    and not any(r.get("source") or r.get("kind") == "table" for r in rows)):
                print(f"{fig}: skipped (no records under {root})")
                continue
            out = root / f"{fig}.csv"
            render(fig, exp, scale, hardware, rows, out, gpus_present)
            made += 1
            print(f"{fig}: {out.with_suffix('.png')}")
        print(f"{made} figure(s) re-drawn from {root}")
        return 0
    if not args.figure or not args.out:
        raise ValueError("give a FIGURE and -o OUT.csv (or --all --from DIR)")
    exp = _load_experiment(args.figure, args.experiment, args.experiments_dir)
    out = Path(args.out)
    scale = args.scale or out.parent.parent.name
    hardware = args.hardware or out.parent.name
    rows = collect(args.figure, exp, scale, hardware, args.inputs, complete=False)
    render(args.figure, exp, scale, hardware, rows, out, args.gpus_present)
    print(f"{args.figure}: {len(rows)} rows -> {out} (+ .png .pdf .env.json)")
    return 0


def _load_experiment(fig: str, path: str | None, exp_dir: str) -> dict:
    return yaml.safe_load(Path(path or f"{exp_dir}/{fig}.yaml").read_text())


def gpus_of_hardware(hardware: str) -> int | None:
    """GPUs of a hardware tag: '1xH100-80GB-HBM3' -> 1, '2xH200' -> 2; 'cpu' or unknown -> None."""
    import re
    m = re.match(r"(\d+)x", hardware or "")
    return int(m[1]) if m else None


def _glob_results(root: Path) -> list[str]:
    pats = ["runs/*/*/*.jsonl", "convergence/*/*/*.jsonl", "schedules/*/*.json", "table1-search.csv"]
    return sorted(f for p in pats for f in glob.glob(str(root / p)) if not f.endswith((".trace.json", ".trace.json.gz")))


# ------------------------------------------------------------------------------------------------
# Reading records
# ------------------------------------------------------------------------------------------------
def read_run(path: str) -> tuple[dict | None, list[dict]]:
    """(summary, iteration records) of a run.jsonl; summary None if the run left none."""
    summary, iters = None, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("record") == "summary":
                summary = rec
            elif rec.get("record") == "iteration":
                iters.append(rec)
    return summary, iters


def _num(x):
    return None if x is None else x


UNFINISHED_SEARCH = "not run to the end: its microbatch search is unfinished"   # how harmony check knows one


def unfinished_search(files: list[str] | None) -> str | None:
    """The message of a baseline's grid point whose microbatch search has candidates on record but no
    result yet (it spans device calls: zero-offload resnet1026 D=64 had u=8 on record for sessions): each
    candidate's status and speed, so the point says how far it got. None without candidates."""
    if not files:
        return None
    done = []
    for f in files:
        summ = read_run(f)[0] or {}
        u = parse_path(f)["cfg"].split(".u", 1)[1]
        sps = summ.get("samples_per_s") if summ.get("status") == "ok" else None   # over-time: warm-up only
        done.append((int(u) if u.isdigit() else 0, f"u={u} {summ.get('status', 'unfinished')}"
                     + (f" {sps:.3f} samples/s" if sps else "")))
    return (f"{UNFINISHED_SEARCH}; on record " +
            ", ".join(text for _, text in sorted(done)))


def measured_row(ident: dict, summ: dict | None, path: str) -> dict:
    if summ is None:
        return {**ident, "kind": "measured", "status": "error", "message": "run left no summary record",
                "source": path}
    env = summ.get("env") or {}
    h2d, d2h = summ.get("bytes_h2d"), summ.get("bytes_d2h")
    t, roof, bound = summ.get("iter_time_s"), summ.get("roofline_s"), summ.get("schedule_bound_s")
    if summ.get("status") == "over-time":
        # its iterations are warm-up only (records from before make_summary knew this gave the warm-up's)
        summ, t = {**summ, "samples_per_s": None}, None
    return {**ident, "kind": "measured", "status": summ.get("status"),
            "samples_per_s": _num(summ.get("samples_per_s")), "iter_time_s": _num(t),
            "predicted_iter_time_s": _num(summ.get("predicted_iter_time_s")),
            # DESIGN.md section 5: achieved fraction of the physical roofline (1.0 = at the hardware's limit)
            "roofline_s": _num(roof), "roofline_fraction": roof / t if roof and t else None,
            # the schedule's own bound (max of its compute, transfer and CPU-update terms; Harmony runs only)
            "schedule_bound_s": _num(bound), "bound_fraction": bound / t if bound and t else None,
            "bytes_h2d": h2d, "bytes_d2h": d2h, "bytes_p2p": summ.get("bytes_p2p"),
            "bytes_allreduce": summ.get("bytes_allreduce"),
            "swap_bytes": (h2d or 0) + (d2h or 0) if (h2d is not None or d2h is not None) else None,
            "ubatch": _ubatch(summ), "precision": env.get("precision"), "gpu_memory_cap": env.get("gpu_memory_cap"),
            "data": summ.get("data"), "message": summ.get("message"), "source": path}


def _ubatch(summ: dict) -> str | None:
    """Microbatch size(s) the run used: 'u' (baselines) or 'fwd/bwd' (Harmony)."""
    if summ.get("ubatch_fwd") is not None and summ.get("system", "").startswith("harmony"):
        return f"{summ['ubatch_fwd']}/{summ.get('ubatch_bwd')}"
    u = summ.get("ubatch", summ.get("ubatch_fwd"))
    return None if u is None else str(u)


def predicted_row(ident: dict, path: str) -> dict:
    rec = json.loads(Path(path).read_text())
    if rec.get("artifact") == "stage-failure":
        return {**ident, "kind": "predicted", "status": rec.get("status", "error"),
                "message": rec.get("message"), "source": path}
    pred = rec.get("prediction") or {}
    t = pred.get("iter_time_s")
    b = pred.get("bytes") or {}
    h2d = b.get("h2d_weights", 0) + b.get("h2d_act", 0)
    d2h = b.get("d2h_grads", 0) + b.get("d2h_act", 0)
    return {**ident, "kind": "predicted", "status": "ok" if t else "error",
            "samples_per_s": ident["minibatch"] / t if t else None, "iter_time_s": t,
            "predicted_iter_time_s": t, "bytes_h2d": h2d, "bytes_d2h": d2h, "bytes_p2p": b.get("p2p"),
            "bytes_allreduce": b.get("allreduce"), "swap_bytes": h2d + d2h,
            "precision": rec.get("precision"), "gpu_memory_cap": rec.get("gpu_memory_cap"),
            "message": None if t else "schedule has no prediction", "source": path}


def collect(fig: str, exp: dict, scale: str, hardware: str, files: list[str], complete: bool,
            gpus_present: int | None = None) -> list[dict]:
    """The rows of a figure from the given files, restricted to the figure's grid at this scale.
    Every grid point appears: measured, predicted, or a status saying why not (missing included).
    With `complete` and `gpus_present`, the grid points are those the workflow would produce on that
    machine (measured at the N present, Harmony predicted at larger N: harmony.workflow.Plan.run_gpus),
    and each one without a record is a row with status "missing" (drawn "not run")."""
    grid = grid_of(exp, scale, hardware)
    base = {"figure": fig, "scale": scale, "hardware": hardware}
    if exp["kind"] == "table":
        rows = []
        for f in files:
            if f.endswith(".csv"):
                with open(f, newline="") as fh:
                    rows += [{**base, "kind": "table", "status": "ok", **r} for r in csv.DictReader(fh)]
        return rows
    if exp["kind"] == "convergence":
        return _collect_curves(grid, base, files, gpus_present)
    models = grid["models"]
    cfgs = [cfg_name(s) for s in (grid.get("schedules") or ["auto"])]
    measured: dict[tuple, dict] = {}
    predicted: dict[tuple, str] = {}
    candidates: dict[tuple, list[str]] = {}   # a baseline's per-candidate search files, per grid point
    for f in files:
        ident = parse_path(f)
        if not ident or ident["kind"] not in ("run", "schedule"):
            continue
        if ident["model"] not in models or ident["minibatch"] not in models[ident["model"]]:
            continue
        if ident["system"] not in grid["systems"]:
            continue
        cfg = ident.get("cfg")
        if ident["kind"] == "run" and ident["system"] not in HARMONY and str(cfg).startswith("best.u"):
            candidates.setdefault((ident["model"], ident["minibatch"], ident["system"], ident["gpus"]), []).append(f)
            continue
        if (ident["system"] in HARMONY and cfg not in cfgs) or (ident["system"] not in HARMONY and cfg != "best"):
            continue   # another figure's configuration
        key = (ident["model"], ident["minibatch"], ident["system"], ident["gpus"], cfg)
        if ident["kind"] == "run":
            measured[key] = measured_row({**base, **_ident(ident)}, read_run(f)[0], f)
        elif ident["kind"] == "schedule":
            predicted[key] = f
    for key, twin in _one_gpu_twins(measured, predicted).items():
        measured[key] = {**measured[twin], "system": key[2],
                         "message": f"one GPU: the same task graph as {twin[2]} N=1, whose run this is"}
    rows = list(measured.values())
    for key, f in predicted.items():
        if key not in measured and key[3] in grid["systems"][key[2]]:
            ident = dict(zip(("model", "minibatch", "system", "gpus", "cfg"), key))
            rows.append(predicted_row({**base, **ident}, f))
    if complete and gpus_present:   # every point the workflow would make on this machine, per N
        have = {(r["model"], r["minibatch"], r["system"], r["cfg"], r["gpus"]) for r in rows}
        for model, Ds in models.items():
            for D in Ds:
                for system, Ns in grid["systems"].items():
                    run_n, pred_n = run_gpus(Ns, gpus_present)
                    points = [(n, "measured") for n in run_n]
                    if system in HARMONY:
                        points += [(n, "predicted") for n in pred_n]
                    for cfg in (cfgs if system in HARMONY else ["best"]):
                        for n, kind in points:
                            if (model, D, system, cfg, n) not in have:
                                rows.append({**base, "model": model, "minibatch": D, "system": system,
                                             "gpus": n, "cfg": cfg, "kind": kind, "status": "missing",
                                             "message": (unfinished_search(candidates.get((model, D, system, n)))
                                                         or "not run: no record") if kind == "measured"
                                             else "not run: no schedule searched for this N (no prediction)"})
    elif complete:   # grid points with neither a run nor a prediction are shown as missing
        have = {(r["model"], r["minibatch"], r["system"], r["cfg"]) for r in rows}
        for model, Ds in models.items():
            for D in Ds:
                for system, Ns in grid["systems"].items():
                    for cfg in (cfgs if system in HARMONY else ["best"]):
                        if (model, D, system, cfg) not in have:
                            rows.append({**base, "model": model, "minibatch": D, "system": system,
                                         "gpus": max(Ns), "cfg": cfg, "kind": "measured", "status": "missing",
                                         "message": unfinished_search(candidates.get((model, D, system, max(Ns))))
                                         or "not run: no record"})
    order = {s: i for i, s in enumerate(SYSTEM_ORDER)}
    mlist = list(models)
    rows.sort(key=lambda r: (mlist.index(r["model"]), r["minibatch"], order.get(r["system"], 99), r["gpus"],
                             cfgs.index(r["cfg"]) if r["cfg"] in cfgs else -1, r["kind"]))
    return rows


def _one_gpu_twins(measured: dict[tuple, dict], schedules: dict[tuple, str]) -> dict[tuple, tuple]:
    """{Harmony point without a run: the other mode's point whose run stands for it}. On one GPU a vPP and a
    vDP schedule of the same configuration can be one task graph (figures 17/18: u = 1, packs of 2), which
    runs identically whatever the mode is called; a point counts only if both schedules are on record and
    their tasks are equal, so nothing is inferred from the names."""
    out = {}
    for key, f in schedules.items():
        model, D, system, n, cfg = key
        if n != 1 or system not in HARMONY or key in measured:
            continue
        twin = (model, D, next(s for s in HARMONY if s != system), n, cfg)
        if twin in measured and twin in schedules and _tasks(f) == _tasks(schedules[twin]):
            out[key] = twin
    return out


def _tasks(schedule_path: str) -> list | None:
    try:
        return (json.loads(Path(schedule_path).read_text()).get("graph") or {}).get("tasks")
    except (OSError, ValueError):
        return None


def _ident(ident: dict) -> dict:
    return {k: ident.get(k) for k in ("model", "minibatch", "system", "gpus", "cfg")}


def _collect_curves(grid: dict, base: dict, files: list[str], gpus_present: int | None = None) -> list[dict]:
    """Every curve of the grid: its record's losses, or one row saying why there are none. A curve on more
    GPUs than the machine has is `unavailable` there (a loss curve cannot be predicted, unlike a throughput
    point at a larger N); one that could run here and has no record is `missing`."""
    rows = []
    wanted = {(c["system"], c["gpus"]) for c in grid["curves"]}
    found = set()
    data_name = None
    for f in files:
        ident = parse_path(f)
        if not ident or ident["kind"] != "convergence" or ident["model"] not in grid["models"]:
            continue
        if ident["figure"] != base["figure"] or (ident["system"], ident["gpus"]) not in wanted:
            continue
        summ, iters = read_run(f)
        status = summ.get("status") if summ else "error"
        data_name = data_name or (summ or {}).get("data")
        D = grid["models"][ident["model"]][0]
        common = {**base, "model": ident["model"], "minibatch": D, "system": ident["system"],
                  "gpus": ident["gpus"], "status": status, "source": f}
        found.add((ident["system"], ident["gpus"]))
        if not iters:
            rows.append({**common, "kind": "curve", "iteration": None, "loss": None,
                         "message": (summ or {}).get("message")})
        for it in iters:
            rows.append({**common, "kind": "curve", "iteration": it.get("iteration"), "loss": it.get("loss")})
    for system, n in sorted(wanted - found):
        beyond = bool(gpus_present) and n > gpus_present
        rows.append({**base, "model": next(iter(grid["models"])), "minibatch": None, "system": system,
                     "gpus": n, "status": "unavailable" if beyond else "missing", "kind": "curve",
                     "iteration": None, "loss": None,
                     "message": (f"needs {n} GPUs, this machine has {gpus_present}" if beyond
                                 else "not run: no record")})
    for r in rows:
        r["data"] = data_name or "unknown"
    return rows


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------
def render(fig: str, exp: dict, scale: str, hardware: str, rows: list[dict], out: Path,
           gpus_present: int | None = None) -> None:
    from harmony import figures_plot
    out.parent.mkdir(parents=True, exist_ok=True)
    kind = exp["kind"]
    _add_model_params(rows, out.parent / "models")
    cols = CURVE_COLUMNS if kind == "convergence" else (None if kind == "table" else COLUMNS)
    if cols is None:
        cols = list(dict.fromkeys(k for r in rows for k in r))
    write_csv(out, rows, cols, extrasaction="ignore")
    title = f"{exp.get('title', fig)}\n[{fig}; scale {scale}; {hardware}]"
    figures_plot.plot(kind, exp, rows, title, out.with_suffix(".png"), out.with_suffix(".pdf"))
    write_env(fig, scale, hardware, rows, out.with_suffix(".env.json"), gpus_present)


def _add_model_params(rows: list[dict], models_dir: Path) -> None:
    """Parameter count of each model (from its model.json next to the results), for labels and the CSV."""
    cache: dict[str, int | None] = {}
    for r in rows:
        m = r.get("model")
        if m and m not in cache:
            p = models_dir / f"{m}.json"
            try:
                cache[m] = json.loads(p.read_text()).get("total_params") if p.exists() else None
            except (OSError, json.JSONDecodeError):
                cache[m] = None
        if m and r.get("kind") != "table":
            r["model_params"] = cache.get(m)


def write_env(fig: str, scale: str, hardware: str, rows: list[dict], path: Path, gpus_present) -> None:
    """Environment record of a figure: every distinct environment of the runs it plots, and the machine
    that drew it."""
    envs, seen = [], set()
    for src in dict.fromkeys(r.get("source") for r in rows if r.get("source", "").endswith(".jsonl")):
        summ, _ = read_run(src)
        env = (summ or {}).get("env")
        if env:
            key = json.dumps({k: v for k, v in env.items() if k not in ("host",)}, sort_keys=True)
            if key not in seen:
                seen.add(key)
                envs.append(env)
    import matplotlib
    from harmony.metrics import git_commit
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[f"{r.get('kind')}:{r.get('status')}"] = statuses.get(f"{r.get('kind')}:{r.get('status')}", 0) + 1
    rec = {"artifact": "figure-env", "schema_version": 1, "figure": fig, "scale": scale, "hardware": hardware,
           "gpus_present": gpus_present, "rows": len(rows), "row_statuses": statuses, "run_environments": envs,
           "drawn_on": {"python": platform.python_version(), "matplotlib": matplotlib.__version__,
                        "host": platform.node(), "git_commit": git_commit()}}
    path.write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":   # pragma: no cover
    import argparse
    p = argparse.ArgumentParser()
    add_arguments(p)
    sys.exit(main(p.parse_args()))


# ------------------------------------------------------------------------------------------------
# Records written by the device scripts -> the workflow's layout
# ------------------------------------------------------------------------------------------------
# search/: the candidates of a microbatch search (the best one is the record beside it, listing them all);
# remeasure/: repeated runs of a grid point kept as evidence beside its record (their README says why)
IMPORT_SKIP_DIRS = {"superseded", "search", "remeasure", "runs", "convergence", "logs", "schedules", "models",
                    "profiles", "table1"}


def import_device(src: Path, root: Path) -> list[tuple[str, str, str]]:
    """File the records the device scripts wrote under `src` (e.g. gpt2-xl-D64-N1/harmony.jsonl,
    profiles/gpt2-xl.profile.json, table1.csv) into the workflow's layout under `root`. A run record goes
    to runs/<system>/<model>/N<gpus>-D<minibatch>-<cfg>.jsonl, named from its own summary (system, mode,
    model, gpus, minibatch): Harmony's cfg is `auto` when the schedule it ran was searched, baselines'
    is `best`. Files are copied byte for byte (numbers are never touched); anything under a
    `superseded/` or `search/` folder is left out; two records claiming the same grid point are an error. Returns
    [(source, destination, what happened)]."""
    import filecmp
    import shutil
    src, root = Path(src), Path(root)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such folder")
    plan: dict[Path, Path] = {}
    notes: list[tuple[str, str, str]] = []

    def want(s: Path, d: Path):
        if d in plan and plan[d] != s:
            raise ValueError(f"{plan[d]} and {s} both file to {d}: move the superseded one into a superseded/ folder")
        plan[d] = s

    for f in sorted(src.rglob("*.jsonl")):
        rel = f.relative_to(src)
        if set(rel.parts[:-1]) & IMPORT_SKIP_DIRS:
            continue
        summ, _ = read_run(str(f))
        if not summ:
            notes.append((str(f), "", "skipped: no summary record"))
            continue
        system = summ.get("system")
        if system == "harmony":
            system = f"harmony-{summ.get('mode')}"
        if system not in SYSTEM_ORDER or system == "pytorch":
            notes.append((str(f), "", f"skipped: system {summ.get('system')!r} is not a throughput system"))
            continue
        model, gpus, D = summ.get("model"), summ.get("gpus"), summ.get("minibatch")
        model = _device_model_id(f, model, gpus, D)
        if not (model and isinstance(gpus, int) and isinstance(D, int)):
            notes.append((str(f), "", "skipped: summary lacks model/gpus/minibatch"))
            continue
        cfg = "best"
        if system in HARMONY:
            sched = _device_schedule(f, src, model, gpus, D)
            if sched is None:
                notes.append((str(f), "", "skipped: Harmony run without its schedule.json (cfg unknown)"))
                continue
            rec = json.loads(sched.read_text())
            gcfg = (rec.get("graph") or {}).get("config") or {}
            if rec.get("search"):
                cfg = "auto"
            elif gcfg.get("pack_size"):
                cfg = cfg_name(gcfg)
            else:
                notes.append((str(f), "", "skipped: fixed schedule without pack_size (cfg unknown)"))
                continue
            want(sched, root / "schedules" / model / f"{system.split('-')[1]}-N{gpus}-D{D}-{cfg}.json")
        want(f, root / "runs" / system / model / f"N{gpus}-D{D}-{cfg}.jsonl")
    prof = src / "profiles"
    if prof.is_dir():
        for f in sorted(prof.glob("*.profile.json")):
            want(f, root / "profiles" / f"{f.name[:-len('.profile.json')]}.json")
        for f in sorted(prof.glob("*.model.json")):
            want(f, root / "models" / f"{f.name[:-len('.model.json')]}.json")
        for name, dest in (("calibration.json", "calibration.json"), ("env.json", "env.json")):
            if (prof / name).exists():
                want(prof / name, root / dest)
    t1 = src / "table1.csv"
    if t1.exists():
        with open(t1, newline="") as fh:
            header = next(csv.reader(fh), [])
        if "figure" not in header:   # the search's own output (a drawn table1.csv has a `figure` column)
            want(t1, root / "table1-search.csv")
    for d, s in plan.items():
        if d.resolve() == s.resolve():
            continue
        if d.exists() and filecmp.cmp(s, d, shallow=False):
            notes.append((str(s), str(d), "unchanged"))
            continue
        what = "replaced" if d.exists() else "filed"
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s, d)
        notes.append((str(s), str(d), what))
    for s, d, what in notes:
        print(f"{what:9} {s}" + (f" -> {d}" if d else ""))
    print(f"import {src} -> {root}: " + ", ".join(
        f"{sum(1 for n in notes if n[2].split(':')[0] == k)} {k}" for k in ("filed", "replaced", "unchanged", "skipped")))
    return notes


def _device_model_id(run: Path, model: str | None, gpus, D) -> str | None:
    """The grid's model id of a device-layout record: the folder `<id>-D<D>-N<N>` names it when its D and N
    are the record's own. An alias (zoo model + overrides, e.g. gpt2-4096x24) decomposed without --name
    carries its base's name (gpt2-10b) in the record; the folder says which grid point it is, also when it is
    the folder imported itself (`--import-device R/gpt2-4096x36-D32-N1`)."""
    m = re.fullmatch(r"(.+)-D(\d+)-N(\d+)", run.parent.name)
    if m and int(m.group(2)) == D and int(m.group(3)) == gpus:
        return m.group(1)
    return model


def _device_schedule(run: Path, src: Path, model: str, gpus: int, D: int) -> Path | None:
    """The schedule a device-script Harmony run executed: <stem>.schedule.json beside the run record,
    else schedules/<model>.D<d>.N<n>.schedule.json of the device layout."""
    for cand in (run.with_name(f"{run.stem}.schedule.json"), src / "schedules" / f"{model}.D{D}.N{gpus}.schedule.json"):
        if cand.exists():
            return cand
    return None


# ------------------------------------------------------------------------------------------------
# The results page (docs/results.md)
# ------------------------------------------------------------------------------------------------
ENV_KEYS = ("gpu", "gpu_count", "driver", "cuda", "torch", "python", "cpu", "cpu_model", "cpu_count", "host_memory_bytes",
            "precision", "gpu_memory_cap")


def write_results_page(results_root: Path, out: Path) -> int:
    """One Markdown page: for each results/<scale>/<hardware>/ folder, every figure present (PNG linked,
    row statuses counted), the claims table (harmony check, evaluated now from the figure CSVs) and the
    environment records of the runs behind the numbers, after the folder's NOTES.md where there is one.
    Generated; never edited by hand."""
    from harmony.checks import evaluate
    from harmony.metrics import git_commit
    out = Path(out)
    folders = sorted(p for p in Path(results_root).glob("*/*") if p.is_dir() and p.parent.name in
                     ("smoke", "paper", "large") and any(p.glob("*.env.json")))
    rel = lambda p: os.path.relpath(p, out.parent).replace(os.sep, "/")   # noqa: E731
    L = ["# Results", "",
         "Generated by `harmony figure --results-page` (`snakemake results_page --cores 1`) from the figure CSVs,",
         "their `.env.json` environment records and `harmony check`; do not edit by hand. Every number here comes",
         "from a run record under `results/<scale>/<hardware>/` (docs/artifact-evaluation.md §4); a grid point",
         "without one is counted as *not run*, never filled in. `results/smoke/` is not committed (its links",
         "work after `snakemake all` on your machine); GPU results under `results/paper/`, `results/large/` are.",
         "", f"Drawn at git commit `{git_commit() or 'unknown'}`.", ""]
    if not folders:
        L.append("(no results folder with figures yet)")
    for root in folders:
        scale, hw = root.parent.name, root.name
        L += [f"## {scale} / {hw}", ""]
        notes = root / "NOTES.md"      # what a reader must know about these numbers (kept by hand, beside them)
        if notes.exists():
            L += [f"Notes ([`NOTES.md`]({rel(notes)})):", "", notes.read_text().strip(), ""]
        envs = _folder_envs(root)
        L += ["Hardware of the numbers below (distinct environment records of the runs each figure plots; "
              "`env.json` of the folder first when present):", "",
              "| source | " + " | ".join(ENV_KEYS) + " |", "|---" * (len(ENV_KEYS) + 1) + "|"]
        for src, env in envs:
            L.append(f"| {src} | " + " | ".join(_env_cell(k, env.get(k)) for k in ENV_KEYS) + " |")
        L += ["", "### Figures", "", "| figure | rows | measured ok | predicted ok | failed (oom/infeasible/n/a/error) "
              "| not run | runs on |", "|---|---|---|---|---|---|---|"]
        figs = []
        for fig in FIGURES:
            envp = root / f"{fig}.env.json"
            if not envp.exists():
                continue
            rec = json.loads(envp.read_text())
            st = rec.get("row_statuses") or {}
            cnt = lambda pred: sum(v for k, v in st.items() if pred(*k.split(":", 1)))   # noqa: E731
            ok_m = cnt(lambda k, s: s == "ok" and k in ("measured", "curve", "table"))
            ok_p = cnt(lambda k, s: s == "ok" and k == "predicted")
            miss = cnt(lambda k, s: s == "missing")
            bad = cnt(lambda k, s: s not in ("ok", "missing"))
            gpus = sorted({f"{e.get('gpu_count') or ''}x{e.get('gpu')}" if e.get("gpu") else f"CPU ({e.get('cpu_count')} cores)"
                           for e in rec.get("run_environments") or []})
            L.append(f"| [{fig}]({rel(root / f'{fig}.png')}) | {rec.get('rows')} | {ok_m} | {ok_p} | {bad} | {miss} "
                     f"| {', '.join(gpus) or '—'} |")
            figs.append(fig)
        L.append("")
        for fig in figs:
            L += [f"#### {fig}", "", f"![{fig} ({scale}, {hw})]({rel(root / f'{fig}.png')})", "",
                  f"Numbers: [`{fig}.csv`]({rel(root / f'{fig}.csv')}); environment: "
                  f"[`{fig}.env.json`]({rel(root / f'{fig}.env.json')}).", ""]
        L += ["### Claims (`harmony check`)", "", "| claim | verdict | expected | measured | detail |",
              "|---|---|---|---|---|"]
        for r in evaluate(root, scale):
            L.append(f"| {r['claim']} {r['text']} | **{r['verdict']}** | {r['expected']} | {r['measured']} | "
                     f"{r['detail'].replace('|', '/')} |")
        L.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L) + "\n")
    print(f"results page: {len(folders)} results folder(s) -> {out}")
    return 0


def _folder_envs(root: Path) -> list[tuple[str, dict]]:
    out, seen = [], set()
    cands = []
    if (root / "env.json").exists():
        try:
            cands.append(("env.json", json.loads((root / "env.json").read_text())))
        except json.JSONDecodeError:
            pass
    for envp in sorted(root.glob("*.env.json")):
        for env in json.loads(envp.read_text()).get("run_environments") or []:
            cands.append((envp.name.replace(".env.json", " runs"), env))
    for src, env in cands:
        key = json.dumps({k: env.get(k) for k in ENV_KEYS}, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append((src, env))
    return out


def _env_cell(k, v) -> str:
    if v is None:
        return "—" if k != "gpu_memory_cap" else "none"
    if k in ("host_memory_bytes", "gpu_memory_cap") and isinstance(v, (int, float)):
        return f"{v / 1024 ** 3:.1f} GiB"
    return str(v).replace("|", "/")
