"""What if the host link were slower? Simulated Harmony vs. swap-dp on the H100's profiles.

The paper's machines had PCIe 3.0 GPUs (about 12 GB/s host<->GPU); the H100 measured here moves 55 GB/s,
and its compute is ~10x a 1080 Ti's, so most swapping hides behind compute and the baselines come close
to Harmony (results/paper/1xH100-80GB-HBM3). This script asks the simulator, with the same committed
profiles and calibration, how the figure-10 configurations compare when only the host link bandwidth is
scaled (H2D, D2H and duplex together). Everything printed is a PREDICTION, never a measurement.

    python experiments/pcie_whatif.py [--results results/paper/1xH100-80GB-HBM3] [-o OUT.csv]

For each model and D: Harmony's searched vPP schedule (the scheduler's own search, 3% headroom, 11 GiB)
and swap-dp at its best microbatch among {4, 8, 16, 32} that the profile says fits, both simulated.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GRID = {"bert96": [16, 64, 256], "gpt2-xl": [16, 64, 256], "vgg416": [16, 64, 256], "resnet1026": [64, 256, 1024]}
LINKS_GBPS = {"measured (H100, PCIe 5.0)": None, "PCIe 4.0 (25 GB/s)": 25e9, "PCIe 3.0 (12 GB/s)": 12e9}
CAP = 11 * 2**30
HEADROOM = 0.03


def scaled(cal: dict, target: float | None) -> dict:
    if target is None:
        return cal
    f = target / cal["h2d_pinned_Bps"]
    out = dict(cal)
    for k in ("h2d_pinned_Bps", "d2h_pinned_Bps", "duplex_pinned_Bps"):
        if out.get(k):
            out[k] = out[k] * f
    return out


def harmony_time(costs, params, D: int, equal: bool) -> float | None:
    from harmony.schedule.search import search
    from harmony.schedule.tasks import ScheduleError
    try:
        res = search(costs, params, minibatch=D, gpus=1, mode="vPP", cap=CAP * (1 - HEADROOM), equal_ubatch=equal)
    except ScheduleError:
        return None
    return res.best.iter_time_s if res.best.feasible else None


def swap_dp_time(model_json, profile_raw, cal, D: int) -> tuple[float | None, int | None]:
    from baselines.common import Infeasible
    from baselines.swap_dp import predict, swap_dp_config
    from harmony.schedule.tasks import build_task_graph
    best = (None, None)
    for u in (4, 8, 16, 32):
        if u > D:
            continue
        try:
            cfg = swap_dp_config(model_json, D, 1, u, cap=CAP, profile=profile_raw)
        except Infeasible:
            continue
        g = build_task_graph(cfg, model_json["num_vlayers"])
        t = predict(model_json, g, profile_raw, cal, CAP, profile_raw.get("precision") or "fp32").get("iter_time_s")
        if t is not None and (best[0] is None or t < best[0]):
            best = (t, u)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/paper/1xH100-80GB-HBM3")
    ap.add_argument("-o", "--output", default=None, help="CSV (default: <results>/pcie-whatif.csv)")
    args = ap.parse_args(argv)
    from harmony.decompose import microbatch_sensitive
    from harmony.jsonio import write_csv
    from harmony.profile_data import Profile
    from harmony.schedule.cli import model_sizes
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams
    root = Path(args.results)
    cal0 = json.loads((root / "calibration.json").read_text())
    rows = []
    for model, Ds in GRID.items():
        mj = json.loads((root / "models" / f"{model}.json").read_text())
        ppath = root / "profiles" / f"{model}.json"
        prof = Profile.load(ppath)
        costs = LayerCosts(prof, sizes=model_sizes(mj))
        opt = (mj.get("optimizer") or {}).get("kind", "adamw")
        for link, target in LINKS_GBPS.items():
            cal = scaled(cal0, target)
            params = SimParams.from_calibration(cal, optimizer=opt)
            for D in Ds:
                th = harmony_time(costs, params, D, microbatch_sensitive(mj))
                ts, u = swap_dp_time(mj, prof.raw, cal, D)
                ratio = (ts / th) if (th and ts) else None
                rows.append({"model": model, "D": D, "host_link": link,
                             "host_link_Bps": round(cal["h2d_pinned_Bps"]),
                             "harmony_pred_s": th, "swap_dp_pred_s": ts, "swap_dp_ubatch": u,
                             "harmony_speedup_pred": ratio})
                print(f"{model:<11} D={D:<5} {link:<26} Harmony {th or float('nan'):7.3f} s  swap-dp(u={u}) "
                      f"{ts or float('nan'):7.3f} s  ->  {ratio or float('nan'):5.2f}x (predicted)", file=sys.stderr)
    out = Path(args.output or root / "pcie-whatif.csv")
    write_csv(out, rows)
    print(f"wrote {out} ({len(rows)} rows; predictions, not measurements)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
