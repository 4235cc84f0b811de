"""`harmony figure`: run records -> <figure>.csv (exactly the numbers plotted), .png, .pdf, .env.json.

  harmony figure figure10 RUN.jsonl ... SCHEDULE.json ... --experiment experiments/figure10.yaml \\
      --scale smoke --hardware cpu -o results/smoke/cpu/figure10.csv      (what Snakemake calls; the
      input files come right after the figure name)
  harmony figure --all --from results/paper/1xH100-80GB-HBM3                 (re-draw every figure
      from the records already there: no stage runs, no GPU, seconds)

Rows come from run summaries (measured) and, for GPU counts this machine does not have, from the
simulator's prediction stored in schedule.json (kind "predicted"). A configuration that did not run
(status oom / infeasible / unavailable / error, or no record at all: "missing") stays in the CSV and is
marked on the plot, never dropped. Reads JSON only: no torch import, so re-drawing is fast anywhere.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import platform
import sys
from pathlib import Path

import yaml

from harmony.workflow import BASELINES, FIGURES, HARMONY, cfg_name, parse_path

COLUMNS = ["figure", "scale", "hardware", "model", "model_params", "minibatch", "system", "gpus", "cfg", "kind", "status",
           "samples_per_s", "iter_time_s", "predicted_iter_time_s", "bytes_h2d", "bytes_d2h", "bytes_p2p",
           "bytes_allreduce", "swap_bytes", "precision", "gpu_memory_cap", "data", "message", "source"]
CURVE_COLUMNS = ["figure", "scale", "hardware", "model", "model_params", "minibatch", "system", "gpus", "status",
                 "iteration", "loss", "data", "source"]
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
    p.add_argument("--all", action="store_true", help="every figure whose records exist under --from")
    p.add_argument("--from", dest="from_dir", help="results/<scale>/<hardware>: read the records found there")


def main(args) -> int:
    if args.all or args.from_dir:
        if not args.from_dir:
            raise ValueError("--all needs --from results/<scale>/<hardware>")
        root = Path(args.from_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such results folder")
        scale, hardware = args.scale or root.parent.name, args.hardware or root.name
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
            rows = collect(fig, exp, scale, hardware, files, complete=True)
            if not any(r.get("kind") in ("measured", "predicted", "curve", "table") and r.get("status") != "missing" for r in rows):
                print(f"{fig}: skipped (no records under {root})")
                continue
            out = root / f"{fig}.csv"
            render(fig, exp, scale, hardware, rows, out, args.gpus_present)
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


def _glob_results(root: Path) -> list[str]:
    pats = ["runs/*/*/*.jsonl", "convergence/*/*/*.jsonl", "schedules/*/*.json", "table1-search.csv"]
    return sorted(f for p in pats for f in glob.glob(str(root / p)) if not f.endswith(".trace.json"))


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


def measured_row(ident: dict, summ: dict | None, path: str) -> dict:
    if summ is None:
        return {**ident, "kind": "measured", "status": "error", "message": "run left no summary record",
                "source": path}
    env = summ.get("env") or {}
    h2d, d2h = summ.get("bytes_h2d"), summ.get("bytes_d2h")
    return {**ident, "kind": "measured", "status": summ.get("status"),
            "samples_per_s": _num(summ.get("samples_per_s")), "iter_time_s": _num(summ.get("iter_time_s")),
            "predicted_iter_time_s": _num(summ.get("predicted_iter_time_s")),
            "bytes_h2d": h2d, "bytes_d2h": d2h, "bytes_p2p": summ.get("bytes_p2p"),
            "bytes_allreduce": summ.get("bytes_allreduce"),
            "swap_bytes": (h2d or 0) + (d2h or 0) if (h2d is not None or d2h is not None) else None,
            "precision": env.get("precision"), "gpu_memory_cap": env.get("gpu_memory_cap"),
            "data": summ.get("data"), "message": summ.get("message"), "source": path}


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


def collect(fig: str, exp: dict, scale: str, hardware: str, files: list[str], complete: bool) -> list[dict]:
    """The rows of a figure from the given files, restricted to the figure's grid at this scale.
    Every grid point appears: measured, predicted, or a status saying why not (missing included)."""
    grid = exp["grid"][scale]
    base = {"figure": fig, "scale": scale, "hardware": hardware}
    if exp["kind"] == "table":
        rows = []
        for f in files:
            if f.endswith(".csv"):
                with open(f, newline="") as fh:
                    rows += [{**base, "kind": "table", "status": "ok", **r} for r in csv.DictReader(fh)]
        return rows
    if exp["kind"] == "convergence":
        return _collect_curves(grid, base, files)
    models = grid["models"]
    cfgs = [cfg_name(s) for s in (grid.get("schedules") or ["auto"])]
    measured: dict[tuple, dict] = {}
    predicted: dict[tuple, str] = {}
    for f in files:
        ident = parse_path(f)
        if not ident or ident["kind"] not in ("run", "schedule"):
            continue
        if ident["model"] not in models or ident["minibatch"] not in models[ident["model"]]:
            continue
        if ident["system"] not in grid["systems"]:
            continue
        cfg = ident.get("cfg")
        if (ident["system"] in HARMONY and cfg not in cfgs) or (ident["system"] not in HARMONY and cfg != "best"):
            continue   # another figure's configuration, or a baseline's per-candidate search file
        key = (ident["model"], ident["minibatch"], ident["system"], ident["gpus"], cfg)
        if ident["kind"] == "run":
            measured[key] = measured_row({**base, **_ident(ident)}, read_run(f)[0], f)
        elif ident["kind"] == "schedule":
            predicted[key] = f
    rows = list(measured.values())
    for key, f in predicted.items():
        if key not in measured and key[3] in grid["systems"][key[2]]:
            ident = dict(zip(("model", "minibatch", "system", "gpus", "cfg"), key))
            rows.append(predicted_row({**base, **ident}, f))
    if complete:   # grid points with neither a run nor a prediction are shown as missing
        have = {(r["model"], r["minibatch"], r["system"], r["cfg"]) for r in rows}
        for model, Ds in models.items():
            for D in Ds:
                for system, Ns in grid["systems"].items():
                    for cfg in (cfgs if system in HARMONY else ["best"]):
                        if (model, D, system, cfg) not in have:
                            rows.append({**base, "model": model, "minibatch": D, "system": system,
                                         "gpus": max(Ns), "cfg": cfg, "kind": "measured", "status": "missing",
                                         "message": "no run record"})
    order = {s: i for i, s in enumerate(SYSTEM_ORDER)}
    mlist = list(models)
    rows.sort(key=lambda r: (mlist.index(r["model"]), r["minibatch"], order.get(r["system"], 99), r["gpus"],
                             cfgs.index(r["cfg"]) if r["cfg"] in cfgs else -1, r["kind"]))
    return rows


def _ident(ident: dict) -> dict:
    return {k: ident.get(k) for k in ("model", "minibatch", "system", "gpus", "cfg")}


def _collect_curves(grid: dict, base: dict, files: list[str]) -> list[dict]:
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
        rows.append({**base, "model": next(iter(grid["models"])), "minibatch": None, "system": system,
                     "gpus": n, "status": "missing", "kind": "curve", "iteration": None, "loss": None,
                     "message": "not run (needs more GPUs than present, or no record)"})
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
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
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
