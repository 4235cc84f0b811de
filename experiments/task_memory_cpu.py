"""Each compute task's measured peak against the memory model's, on the CPU, for the tiny model of a family.

The worker's per-task memory probe (`HARMONY_TASK_PEAKS`, docs/runtime.md) runs on the CPU too: it counts the
storages the worker's thread makes (harmony.gpumem.MemoryMeter). This profiles MODEL on the CPU, runs a
three-pack plan (vPP, or vDP over N CPU workers) with one microbatch per task and with two, three iterations
each under the probe, and prints per task: measured peak, the simulator's charge (its own peak plus the next
task's prefetch) and the excess. `tests/test_task_memory.py` holds N = 1 to the
charge for every family; at N = 2, vDP's BWD tasks of weight-heavy packs ran up to 75 KB over it
(docs/performance.md entry 87: open).

    PYTHONPATH=. python experiments/task_memory_cpu.py MODEL [--mode vDP] [--gpus 2] [--minibatch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a tiny zoo model (mlp-tiny, gpt2-tiny, bert-tiny, vgg-tiny, resnet-tiny)")
    ap.add_argument("--mode", choices=("vPP", "vDP"), default="vPP")
    ap.add_argument("--gpus", type=int, default=1, help="CPU worker processes (N)")
    ap.add_argument("--minibatch", type=int, default=8)
    a = ap.parse_args(argv)
    from harmony import profile as hp
    from harmony.decompose import decompose_model
    from harmony.models import get_model
    from harmony.runtime import run_schedule
    from harmony.schedule.io import make_schedule_record
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, _prepare
    from harmony.schedule.tasks import ScheduleConfig, build_task_graph

    D, N = a.minibatch, a.gpus
    share = D // N if a.mode == "vDP" else D
    if share < 2 or D % N:
        ap.error(f"--minibatch {D} must split into shares of at least 2 samples over --gpus {N}")
    ov = {"image_size": 64} if a.model == "resnet-tiny" else {}
    mj = decompose_model(get_model(a.model, **ov), source={"kind": "zoo", "name": a.model, "overrides": ov},
                         with_flops=False)
    us = (share, share // 2)
    costs = LayerCosts(hp.profile_model(mj, hp.ProfileOptions(ubatch=sorted(set(us)), trials=1, progress=False)))
    L = mj["num_vlayers"]
    print(f"{'u':>3} {'rank':>4} {'kind':<4} {'pack':<9} {'measured':>9} {'charged':>9} {'excess':>8}")
    for u in us:
        cfg = ScheduleConfig(mode=a.mode, gpus=N, minibatch=D, ubatch_fwd=u, ubatch_bwd=u,
                             bwd_packs=((0, 2), (2, L - 2), (L - 2, L)), fwd_packs=((0, 2), (2, L - 2)))
        g = build_task_graph(cfg, L)
        probe = Path(tempfile.mkdtemp(prefix="task-probe-"))
        os.environ["HARMONY_TASK_PEAKS"] = str(probe)
        run_schedule(make_schedule_record(mj, g), g, iters=3, device="cpu")
        infos = _prepare(g, costs, costs.layer_sizes(), SimParams(h2d_Bps=1e9, d2h_Bps=1e9))
        for r in range(N):
            tasks = json.loads((probe / f"rank{r}.json").read_text())["tasks"]
            comp = [t for t in g.tasks if t.kind != "UPD" and t.rank == r]
            for i, t in enumerate(comp):
                measured = statistics.median(x["peak_bytes"] for x in tasks if x["task"] == t.id and x["iteration"] >= 1)
                charged = infos[t.id].peak + (infos[comp[i + 1].id].prefetch_bytes if i + 1 < len(comp) else 0)
                print(f"{u:>3} {r:>4} {t.kind:<4} {str(t.pack):<9} {measured:>9.0f} {charged:>9} "
                      f"{measured - charged:>+8.0f}{'  over the charge' if measured > charged else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
