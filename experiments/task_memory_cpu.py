"""Each compute task's measured peak against the memory model's, on the CPU, for the tiny model of a family.

The worker's per-task memory probe (`HARMONY_TASK_PEAKS`, docs/runtime.md) runs on the CPU too: it counts the
storages the worker's thread makes (harmony.gpumem.MemoryMeter). This profiles MODEL on the CPU, runs a
three-pack plan (vPP, or vDP over N CPU workers) with one microbatch per task and with two, three iterations
each under the probe, and prints per task: measured peak, the simulator's charge (its own peak plus the next
task's prefetch) and the excess. `tests/test_task_memory.py` holds N = 1 to the
charge for every family. At N = 2, vDP's BWD tasks of weight-heavy packs ran up to 75 KB over it on every
run until their all-reduce stopped copying dW (docs/performance.md entries 87 and 89); a sporadic excess of
17-54 KB on the input pack, in one rank of some runs, is still open.

    PYTHONPATH=. python experiments/task_memory_cpu.py MODEL [--mode vDP] [--gpus 2] [--minibatch 8]
"""
from __future__ import annotations

import argparse


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
    from harmony.pack_check import check_tasks_cpu
    from harmony.schedule.memory import LayerCosts
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
        for x in check_tasks_cpu(mj, costs, build_task_graph(cfg, L)):
            t, charged = x["task"], x["own_bytes"] + x["prefetch_bytes"]
            over = x["measured_bytes"] - charged
            print(f"{u:>3} {x['rank']:>4} {t.kind:<4} {str(t.pack):<9} {x['measured_bytes']:>9.0f} "
                  f"{charged:>9} {over:>+8.0f}{'  over the charge' if over > 0 else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
