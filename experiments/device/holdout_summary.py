"""Each holdout run record's time beside its prediction, then best Harmony over the best swap baseline per
point (docs/performance.md entry 95): the table of results/probes/holdout/2xH200/README.md, and what
holdout-2xH200.sh prints at its end.
    python3 experiments/device/holdout_summary.py RUNS_DIR      (e.g. results/probes/holdout/2xH200/runs)"""
import glob
import json
import sys
from pathlib import Path


def main(runs: str) -> int:
    best: dict[str, dict[str, float]] = {}
    for f in sorted(glob.glob(f"{runs}/*/*/*.jsonl")):
        system, model = Path(f).parts[-3], Path(f).parts[-2]
        lines = Path(f).read_text().splitlines()
        if not lines:                  # a run that failed before its first line (its log says why)
            print(f"{model:11s} {system:12s} no record")
            continue
        s = json.loads(lines[-1])
        t, p = s.get("iter_time_s"), s.get("predicted_iter_time_s")
        if not (t and p):
            print(f"{model:11s} {system:12s} {s.get('status')}")
            continue
        print(f"{model:11s} {system:12s} {s['status']:4s} {t:.4f} s, predicted {p:.4f}, {t / p:.3f}x, "
              f"u {s.get('ubatch_fwd')}/{s.get('ubatch_bwd')}")
        side = "harmony" if system.startswith("harmony") else "swap"
        best.setdefault(model, {})[side] = min(t, best.get(model, {}).get(side, float("inf")))
    for model, b in best.items():
        if len(b) == 2:
            print(f"{model}: best Harmony / best swap baseline (samples/s) {b['swap'] / b['harmony']:.3f}x")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
