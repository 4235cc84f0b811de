"""The schedule search's own cost (Table 1's "search time"), against its target of 2 s of CPU per model.

    python benchmarks/search_time.py                 # 3 repeats, analytic profiles, target 2 s
    python benchmarks/search_time.py --repeats 5 --profiles results/paper/1xH100-80GB-HBM3/profiles

Runs `harmony table1` (D = 64, vPP, N = 4, Table 1's caps) `--repeats` times and prints, per model, the
median and the range of the search's CPU seconds (process time: a loaded machine stretches wall time but
not CPU time, though cache and frequency effects remain) with the candidate count. Exits 1 when a model's
median misses `--target`. This is a benchmark and not a unit test on purpose: a timing asserted in the CPU
suite fails whenever the CI machine is busy, and says nothing about correctness.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=2.0, help="CPU seconds per model (default 2)")
    ap.add_argument("--profiles", default=None, help="measured profiles (default: --analytic ones)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1 (got {args.repeats})")
    from harmony.cli import main as harmony

    cpu: dict[str, list[float]] = {}
    cands: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            out = Path(tmp) / f"table1-{r}.csv"
            src = ["--profiles", args.profiles] if args.profiles else ["--analytic"]
            print(f"repeat {r + 1}/{args.repeats}", file=sys.stderr)
            if harmony(["table1", *src, "-o", str(out)]) != 0:
                return 2
            for row in csv.DictReader(open(out)):
                cpu.setdefault(row["model"], []).append(float(row["search_cpu_s"]))
                cands[row["model"]] = row["candidates"]
    missed = []
    print(f"{'model':<12} {'candidates':>10} {'median CPU s':>13} {'min':>7} {'max':>7}  target {args.target} s")
    for model, ts in cpu.items():
        med = statistics.median(ts)
        ok = med <= args.target
        missed += [] if ok else [model]
        print(f"{model:<12} {cands[model]:>10} {med:>13.3f} {min(ts):>7.3f} {max(ts):>7.3f}  "
              f"{'met' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
