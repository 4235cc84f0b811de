"""Write a swap baseline's schedule without running it: the plan `harmony baseline swap-dp|swap-pp` would run
at one microbatch size, from a results folder's model, profile and calibration, so a device call can run it
with `harmony run` (and its diagnostics, e.g. `--memcpy-trace --trace-host-ops`) and nothing else.
`harmony baseline ... --schedule-out` writes the same record, but only after running it.

    PYTHONPATH=. python experiments/swap_schedule.py results/paper/2xH200 vgg416 --minibatch 8 --gpus 1 \
        --ubatch 8 [--baseline swap-dp] [--cap 11GiB] [--precision tf32] -o vgg416.D8.N1.swap-dp-u8.schedule.json
"""
from __future__ import annotations

import argparse
import os
import sys

from harmony.jsonio import read_json
from harmony.gpumem import parse_cap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results folder with models/, profiles/ and calibration.json")
    ap.add_argument("model", help="model name (models/MODEL.json, profiles/MODEL.json)")
    ap.add_argument("--minibatch", type=int, required=True)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--ubatch", type=int, required=True)
    ap.add_argument("--baseline", choices=("swap-dp", "swap-pp"), default="swap-dp")
    ap.add_argument("--cap", default="11GiB", help="GPU memory cap (default 11GiB, figure 10's)")
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    paths = {k: os.path.join(a.results, *p) for k, p in
             (("model", ("models", f"{a.model}.json")), ("profile", ("profiles", f"{a.model}.json")),
              ("calibration", ("calibration.json",)))}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        print(f"missing {', '.join(missing)}: name a results folder that has the model decomposed, profiled "
              "and a calibration", file=sys.stderr)
        return 2
    mj = read_json(paths["model"], kind="model")
    profile = read_json(paths["profile"], kind="profile")
    calibration = read_json(paths["calibration"], kind="calibration")
    cap = parse_cap(a.cap)
    from baselines.common import Infeasible
    from baselines.predicted_start import config_builder
    from baselines.swap_dp import schedule_record
    from harmony.schedule.io import save_schedule
    try:
        cfg = config_builder(a.baseline)(mj, a.minibatch, a.gpus, a.ubatch, cap=cap, profile=profile)
    except Infeasible as e:
        print(f"{a.baseline} {a.model} D={a.minibatch} N={a.gpus} u={a.ubatch}: infeasible: {e}", file=sys.stderr)
        return 1
    rec = schedule_record(a.baseline, mj, cfg, cap=cap, precision=a.precision, profile=profile,
                          calibration=calibration, search={"packing": "layer", "memory_rule": "profile"})
    save_schedule(a.output, rec)
    pred = rec.get("prediction") or {}
    print(f"{a.baseline} {a.model} D={a.minibatch} N={a.gpus} u={a.ubatch}: {len(cfg.bwd_packs)} packs, "
          f"predicted {pred.get('iter_time_s')} s an iteration; wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
