"""What Harmony's simulator predicts for each candidate of a swap baseline's microbatch search, written before
the search runs (docs/performance.md entry 81): the baseline's own task graph (baselines.swap_dp / swap_pp,
one vLayer per pack) at every u the workflow's search tries (powers of two dividing D/N:
`harmony.workflow.baseline_ubatches`), simulated with the folder's profile and calibration
(the runtime's host work per task included, entry 78; the all-reduce inline, as the runtime runs it), beside
Harmony's best measured run of the same point, whose record gives the cap the point is planned under. A u
whose task cannot fit the cap prints `infeasible`; one whose simulated peak is over the cap is printed with
that peak and left out of the best (docs/performance.md entry 83: the baseline's own check is a lower
bound, so its search tries it, and on the GPU it ran out of memory). With the loss pack's waiting inputs
counted (entry 84) the peak called all five GPT2-XL points items 49-51 ran: the two that ran out of
memory are over the cap, and the three that trained are 0.4-0.5 GiB over their allocated peaks.

    PYTHONPATH=. python experiments/predict_swap_search.py RESULTS SYSTEM N MODEL:D [MODEL:D ...]
    e.g. results/paper/4xH200 swap-dp 4 gpt2-xl:64 bert96:64 vgg416:64 resnet1026:256
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from baselines.common import Infeasible
from harmony.schedule.memory import LayerCosts
from harmony.schedule.simulate import simulate
from harmony.schedule.tasks import build_task_graph
from harmony.workflow import baseline_ubatches
from resimulate_baselines import CONFIGS, swap_sim_params    # experiments/: this script's folder is on sys.path
from runtime_gap import harmony_runs


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] not in CONFIGS:
        print(__doc__, file=sys.stderr)
        return 2
    root, system, n = Path(argv[0]), argv[1], int(argv[2])
    calibration = json.loads((root / "calibration.json").read_text())
    print(f"# {root}, {system} at N = {n}: simulated s/iteration per microbatch candidate; Harmony's best measured")
    for point in argv[3:]:
        name, d = point.split(":")[0], int(point.split(":")[1])
        model = json.loads((root / "models" / f"{name}.json").read_text())
        profile = json.loads((root / "profiles" / f"{name}.json").read_text())
        costs = LayerCosts(profile)
        params = swap_sim_params(calibration, model)
        runs = harmony_runs(root, name, n, d)
        if not runs:       # the cap the point was planned under comes from them
            print(f"{name} D={d}: no Harmony run at N = {n} under {root}/runs: nothing to compare with")
            continue
        cap = next(iter(runs.values())).get("gpu_memory_cap")
        h = min(r["iter_time_s"] for r in runs.values())
        cells, best = [], None
        for u in baseline_ubatches(d, n):
            try:
                cfg = CONFIGS[system](model, d, n, u, cap=cap, profile=profile)
                sim = simulate(build_task_graph(cfg, model["num_vlayers"]), costs, params)
                t, peak = sim.iter_time_s, max(sim.peak_memory_bytes)
                if cap is not None and peak > cap:
                    # the baseline's own check is a lower bound and lets it try this u (an OOM is a
                    # record), but the simulator's peak says it cannot train: item 50 measured u = 32 at
                    # GPT2-XL D = 64 (19.97 GiB predicted) out of memory under 11 GiB
                    cells.append(f"u={u} {t:.3f} (peak {peak / 2**30:.2f} GiB over the cap: left out)")
                    continue
                cells.append(f"u={u} {t:.3f}")
                best = t if best is None or t < best else best
            except Infeasible:
                cells.append(f"u={u} infeasible")
        ratio = f", Harmony over the best candidate {best / h:.2f}x" if best else ""
        print(f"{name} D={d}: {'; '.join(cells)} | Harmony {h:.3f}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
