"""How figure 10's Harmony-over-baseline ratios move if the GPU computed faster (docs/performance.md entry 103).

C10 fails on GPT2-XL and BERT96 because there both Harmony and the swap baselines are bound by the GPU's
compute (Harmony's schedule bound is 1.06-1.15x swap-dp's measured time on 2x H200): a baseline that
moves more bytes hides them behind the same kernels. This asks the simulator what a faster GPU compute
would do to that ratio, before any kernel is changed: every profiled GPU compute time (`fwd_s`, `bwd_s`;
host issue times stay) of the vLayers of the given kinds is multiplied by F, then

- Harmony's search runs as figure 10's `harmony schedule` does (vPP and vDP, the cap and headroom of the
  point's Harmony records), and the faster mode's predicted iteration is kept;
- swap-dp's and swap-pp's microbatch candidates are simulated as `experiments/predict_swap_search.py` does,
  and the fastest that fits the cap and the host is kept;

and it prints, per point and factor, each prediction and Harmony's ratio over the faster swap baseline
(predicted over predicted: the same model on both sides, so its own error mostly cancels).

usage: PYTHONPATH=.:experiments python experiments/compute_whatif.py RESULTS N MODEL:D [MODEL:D ...]
       [--factors 1,0.8,0.6] [--kinds gpt2.block,bert.layer] [-o OUT.csv]
  e.g. results/paper/2xH200 2 gpt2-xl:64 bert96:64 --kinds gpt2.block,bert.layer
  --kinds scales only vLayers of these kinds (default: every vLayer), e.g. the transformer blocks, whose
  attention and element-wise kernels a change of kernels would speed up
"""
from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from baselines.predicted_start import SYSTEMS, candidates, fastest_fitting
from harmony.jsonio import write_csv
from harmony.profile_data import COMPUTE_KEYS
from harmony.workflow import baseline_ubatches
from runtime_gap import harmony_runs

MODES = ("vPP", "vDP")


def scaled_profile(raw: dict, factor: float, kinds: set[str] | None) -> dict:
    """A copy of the profile whose GPU compute times (COMPUTE_KEYS) of the vLayers of `kinds` (all when None)
    are multiplied by factor."""
    out = copy.deepcopy(raw)
    for layer in out["vlayers"]:
        if kinds is None or layer.get("kind") in kinds:
            for key in COMPUTE_KEYS:
                layer[key] = [t * factor for t in layer[key]]
    return out


def harmony_best(profile_path: Path, model_path: Path, calibration: Path, d: int, n: int, cap: int | None,
                 workdir: Path) -> tuple[float | None, str, list[str]]:
    """(predicted s/iteration, mode) of the faster of Harmony's vPP and vDP searches, as figure 10 plans them,
    and the modes whose search failed (the row then says so: its best is not over both modes)."""
    best: tuple[float | None, str] = (None, "")
    failed = []
    for mode in MODES:
        out = workdir / f"{mode}.json"
        cmd = [sys.executable, "-m", "harmony.cli", "schedule", str(profile_path), "--model", str(model_path),
               "--minibatch", str(d), "--gpus", str(n), "--mode", mode, "--calibration", str(calibration),
               "-o", str(out)] + (["--gpu-memory", str(cap)] if cap else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            print(f"  harmony schedule {mode} D={d}: failed ({done.stderr.strip().splitlines()[-1:]})",
                  file=sys.stderr)
            failed.append(mode)
            continue
        pred = json.loads(out.read_text()).get("prediction") or {}
        t = pred.get("iter_time_s")
        if t is not None and (best[0] is None or t < best[0]):
            best = (t, mode)
    return best[0], best[1], failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="a results folder, e.g. results/paper/2xH200")
    ap.add_argument("n", type=int, help="GPUs")
    ap.add_argument("point", nargs="+", help="MODEL:D")
    ap.add_argument("--factors", default="1,0.8,0.6", help="compute-time factors to try (1 = as profiled)")
    ap.add_argument("--kinds", default=None, help="comma-separated vLayer kinds to scale (default: all)")
    ap.add_argument("-o", "--output", type=Path, help="also write the table as CSV")
    args = ap.parse_args(argv)
    try:
        factors = [float(f) for f in args.factors.split(",")]
    except ValueError:
        print(f"--factors {args.factors!r}: give comma-separated numbers such as 1,0.8,0.6", file=sys.stderr)
        return 2
    if any(f <= 0 for f in factors):
        print(f"--factors {args.factors!r}: every factor must be positive", file=sys.stderr)
        return 2
    kinds = set(args.kinds.split(",")) if args.kinds else None
    root, n = args.root, args.n
    cal_path = root / "calibration.json"
    calibration = json.loads(cal_path.read_text())
    env = root / "env.json"
    host = json.loads(env.read_text()).get("host_memory_bytes") if env.exists() else None
    rows = []
    print(f"# {root}, N = {n}: predicted s/iteration with GPU compute times x F"
          f" ({'vLayers of kind ' + ', '.join(sorted(kinds)) if kinds else 'every vLayer'})")
    print("model D F | Harmony (mode) | swap-dp (u) | swap-pp (u) | Harmony / faster swap baseline")
    for point in args.point:
        name, _, d_text = point.partition(":")
        if not d_text.isdigit():
            print(f"{point}: give each point as MODEL:D, e.g. gpt2-xl:64", file=sys.stderr)
            return 2
        d = int(d_text)
        model_path = root / "models" / f"{name}.json"
        model = json.loads(model_path.read_text())
        raw = json.loads((root / "profiles" / f"{name}.json").read_text())
        if kinds and not any(layer.get("kind") in kinds for layer in raw["vlayers"]):
            print(f"{name}: no vLayer of kind {', '.join(sorted(kinds))}: nothing would be scaled", file=sys.stderr)
            return 2
        runs = harmony_runs(root, name, n, d)
        cap = next(iter(runs.values())).get("gpu_memory_cap") if runs else None
        for f in factors:
            prof = scaled_profile(raw, f, kinds)
            with tempfile.TemporaryDirectory() as tmp:
                ppath = Path(tmp) / f"{name}.json"
                ppath.write_text(json.dumps(prof))
                h, mode, failed = harmony_best(ppath, model_path, cal_path, d, n, cap, Path(tmp))
            swaps = {}
            for system in SYSTEMS:
                c = fastest_fitting(candidates(system, model, d, n, baseline_ubatches(d, n), cap=cap, profile=prof,
                                               calibration=calibration, host_bytes=host))
                swaps[system] = (c.iter_time_s, c.ubatch) if c else (None, None)
            fastest = min((t for t, _ in swaps.values() if t is not None), default=None)
            ratio = fastest / h if fastest and h else None
            cells = " | ".join(f"{t:.3f} (u={u})" if t else "none fits" for t, u in swaps.values())
            print(f"{name} {d} {f:g} | " + (f"{h:.3f} ({mode})" if h else "no plan")
                  + (f" [{', '.join(failed)} search failed]" if failed else "") + f" | {cells} | "
                  + (f"{ratio:.2f}x" if ratio else "-"))
            rows.append({"model": name, "minibatch": d, "gpus": n, "factor": f, "kinds": args.kinds or "all",
                         "harmony_s": h, "harmony_mode": mode, "harmony_failed": " ".join(failed),
                         "swap_dp_s": swaps["swap-dp"][0],
                         "swap_dp_u": swaps["swap-dp"][1], "swap_pp_s": swaps["swap-pp"][0],
                         "swap_pp_u": swaps["swap-pp"][1], "harmony_over_swap": ratio})
    if args.output:
        write_csv(args.output, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
