"""Fit the runtime's host work per task, per vLayer and per tensor from `benchmarks/runtime_overhead.py --json`
records (docs/performance.md entry 97; `experiments/device/vlayer-host-1gpu.sh` makes them on a GPU host).

Each record row is one packing of one narrow model: the runtime's paired overhead over plain PyTorch per
iteration, and what it could scale with, summed over the iteration's compute tasks (`work_counts`: tasks,
vLayers a task holds, their tensors, each again per microbatch). The fit is least squares of

    overhead_s = a * compute_tasks + v * vlayer_tasks + t * tensor_tasks + p * param_tasks
                 + m * vlayer_microbatches + k

(param_tasks: parameter tensors only, whose gradients also go to the arena) over every row of every file.
Each term's coefficient is printed in microseconds, then each row's residual and a leave-one-family-out
check (fit without one model family, predict its rows): a per-tensor term that holds across families
predicts the family it never saw. `--terms` picks the terms (default all of them).

    PYTHONPATH=. python experiments/fit_vlayer_host.py DIR [DIR ...] [--terms compute_tasks tensor_tasks ...]
"""
from __future__ import annotations

import argparse
import functools
import glob
import json
import sys
from pathlib import Path

import numpy as np

TERMS = ("compute_tasks", "vlayer_tasks", "tensor_tasks", "param_tasks", "vlayer_microbatches")
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _benchmark():
    """benchmarks/runtime_overhead.py as a module (benchmarks/ is no package), loaded once."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("runtime_overhead", ROOT / "benchmarks" / "runtime_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def complete(rec: dict, row: dict, terms: tuple[str, ...] = TERMS) -> dict:
    """A row with the counts `terms` needs: records written before a count existed (param_tasks came after
    call vhost1) get every count of `work_counts` again from the model, packing and microbatch they name."""
    if all(t in row for t in terms):
        return row
    bench = _benchmark()
    _, record, graph, _ = bench.build(rec["model"], rec["overrides"], rec["minibatch"], row["pack"], rec["ubatch"])
    return {**row, **bench.work_counts(record["model"], graph)}


def load_rows(dirs: list[str], terms: tuple[str, ...] = TERMS) -> list[dict]:
    rows = []
    for d in dirs:
        files = sorted(glob.glob(str(Path(d) / "*.json")))
        for f in files:
            rec = json.loads(Path(f).read_text())
            if "rows" not in rec:             # env.json and the like
                continue
            for r in rec["rows"]:
                r = complete(rec, r, terms)
                rows.append({**r, "name": Path(f).stem, "family": rec["model"].split("-")[0]})
    return rows


def fit(rows: list[dict], terms: tuple[str, ...]) -> np.ndarray:
    """Coefficients of `terms` then the intercept, seconds per unit (least squares)."""
    X = np.array([[r[t] for t in terms] + [1.0] for r in rows], dtype=float)
    y = np.array([r["paired_overhead_s"] for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return coef


def predict(coef: np.ndarray, r: dict, terms: tuple[str, ...]) -> float:
    return float(sum(c * r[t] for c, t in zip(coef, terms)) + coef[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="folders of runtime_overhead.py --json files")
    ap.add_argument("--terms", nargs="+", default=list(TERMS), choices=TERMS)
    a = ap.parse_args(argv)
    terms = tuple(a.terms)
    rows = load_rows(a.dirs, terms)
    if len(rows) <= len(terms) + 1:
        print(f"fit_vlayer_host.py: {len(rows)} rows in {a.dirs}, too few for {len(terms) + 1} coefficients",
              file=sys.stderr)
        return 2
    coef = fit(rows, terms)
    print(f"{len(rows)} rows from {len({r['name'] for r in rows})} files; least squares of the paired overhead:")
    for c, t in zip(coef, terms):
        print(f"  {t:>20}: {c * 1e6:8.2f} us")
    print(f"  {'per iteration':>20}: {coef[-1] * 1e3:8.2f} ms")
    families = sorted({r["family"] for r in rows})
    held = {}
    for fam in families:
        rest = [r for r in rows if r["family"] != fam]
        if len(rest) > len(terms) + 1:
            held[fam] = fit(rest, terms)
    print(f"{'file':>16} {'pack':>5} {'u x n':>6} {'T/vL':>5} {'overhead ms':>12} {'fit ms':>8} {'left-out fit':>13}")
    for r in rows:
        lo = held.get(r["family"])
        lo_s = f"{predict(lo, r, terms) * 1e3:13.2f}" if lo is not None else f"{'-':>13}"
        print(f"{r['name']:>16} {r['pack']:>5} {r['microbatches']:>6} {r['tensors_per_vlayer_mean']:>5.1f} "
              f"{r['paired_overhead_s'] * 1e3:12.2f} {predict(coef, r, terms) * 1e3:8.2f} {lo_s}")
    res = [predict(coef, r, terms) / r["paired_overhead_s"] - 1 for r in rows if r["paired_overhead_s"] > 0]
    print(f"fit/measured - 1: median |.| {np.median(np.abs(res)):.3f}, worst {max(res, key=abs):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
