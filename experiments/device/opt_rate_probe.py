"""A worker's CPU optimizer rate alone and beside another (docs/performance.md entry 102, open item).

The simulator gives each of N workers 1/N of the calibrated all-core rate whether or not another worker steps
at the same time (`SimParams.worker_opt_rate`). This times one fused AdamW step over the same parameters as
`harmony calibrate` (64 Mi fp32 values in 4 Mi chunks, the calibration's median of trials) three ways:
one process on all cores; one process on cores // N threads, alone; and N processes on cores // N threads
each, stepping at the same moments (a barrier before every trial). Prints and writes JSON.

    python3 experiments/device/opt_rate_probe.py [--procs 2] [--trials 7] [-o OUT.json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

TOTAL, CHUNK = 64 * 2**20, 4 * 2**20


def _step_times(threads: int, trials: int, barrier=None) -> list[float]:
    import torch
    sys.path.insert(0, os.getcwd())
    from harmony.optim import OptimizerConfig, make_optimizer
    torch.set_num_threads(threads)
    params = [torch.zeros(CHUNK).requires_grad_() for _ in range(TOTAL // CHUNK)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    opt = make_optimizer(params, OptimizerConfig(kind="adamw", lr=1e-4))
    opt.step()                                   # warm-up: the state is made here
    out = []
    for _ in range(trials):
        if barrier is not None:
            barrier.wait()
        t0 = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t0)
    return out


def _worker(threads, trials, barrier, queue, rank):
    queue.put((rank, _step_times(threads, trials, barrier)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2, help="workers stepping at once (N)")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("-o", "--output", default=None)
    a = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    share = max(1, cores // a.procs)
    rate = lambda ts: TOTAL / statistics.median(ts)          # noqa: E731
    result = {"cores": cores, "procs": a.procs, "threads_per_worker": share, "params": TOTAL}
    result["all_cores_alone"] = rate(_step_times(cores, a.trials))
    result["one_share_alone"] = rate(_step_times(share, a.trials))
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(a.procs), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(share, a.trials, barrier, queue, r)) for r in range(a.procs)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    result["one_share_beside_others"] = [rate(got[r]) for r in range(a.procs)]
    result["model_worker_rate"] = result["all_cores_alone"] * share / cores
    print(json.dumps(result, indent=1))
    if a.output:
        from harmony.jsonio import write_json
        write_json(a.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
