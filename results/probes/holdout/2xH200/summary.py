"""Each holdout record's time beside its prediction, and best Harmony over the best swap baseline per point.
    python results/probes/holdout/2xH200/summary.py [RUNS_DIR]"""
import glob
import json
import sys
from pathlib import Path

runs = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "runs")
best: dict[str, dict[str, float]] = {}
for f in sorted(glob.glob(f"{runs}/*/*/*.jsonl")):
    s = json.loads(Path(f).read_text().splitlines()[-1])
    system, model = Path(f).parts[-3], Path(f).parts[-2]
    t, p = s.get("iter_time_s"), s.get("predicted_iter_time_s")
    print(f"{model:11s} {system:12s} {s['status']:4s} {t:.4f} s, predicted {p:.4f}, {t / p:.3f}x, "
          f"u {s.get('ubatch_fwd')}/{s.get('ubatch_bwd')}" if t and p else f"{model} {system} {s['status']}")
    if t:
        side = "harmony" if system.startswith("harmony") else "swap"
        best.setdefault(model, {})[side] = min(t, best.get(model, {}).get(side, float("inf")))
for model, b in best.items():
    if len(b) == 2:
        print(f"{model}: best Harmony / best swap baseline (samples/s) {b['swap'] / b['harmony']:.3f}x")
