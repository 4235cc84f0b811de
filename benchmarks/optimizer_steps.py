"""One pack's CPU optimizer step: every parameter on its own against small ones coalesced (performance log 29).

torch's fused CPU optimizer steps one tensor at a time, and each tensor opens an OpenMP parallel region;
with passive waits (what every Harmony worker runs with) each region wakes its team. The runtime therefore
steps a pack's parameters under `--coalesce-below` values as one flat tensor (`harmony/runtime/optim.py`,
`_PackOptimizer`). This times that code path on a model's real parameter shapes:

    A: _PackOptimizer(..., coalesce_below=0)       every tensor on its own
    B: _PackOptimizer(..., coalesce_below=THRESH)  tensors under THRESH values gathered, stepped, scattered

By default only the parameters under `--max-values` (64 Ki) are stepped, which is where the difference is
and what fits any machine; `--max-values 0` takes every parameter (resnet1026: 801.8 M values, 3 copies,
about 10 GB). A and B alternate, so a load change hits both alike; medians over `--iters` steps after one
warm-up step each. The OpenMP wait policy is read when torch starts: set it in the environment.

    OMP_WAIT_POLICY=passive python benchmarks/optimizer_steps.py                  # resnet1026 and bert96
    OMP_WAIT_POLICY=passive python benchmarks/optimizer_steps.py --models vgg416 --threshold 16384
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from harmony.models import get_model
from harmony.runtime.optim import _PackOptimizer


def pack_of(model: str, max_values: int, seed: int = 0):
    spec = get_model(model)
    shapes = [p.shape for p in spec.build("meta").parameters()
              if max_values == 0 or p.numel() < max_values]
    g = torch.Generator().manual_seed(seed)
    w = [torch.randn(s, generator=g) for s in shapes]
    dw = [torch.randn(s, generator=g) for s in shapes]
    k = [[torch.zeros(s) for _ in range(spec.optimizer.state_tensors_per_param())] for s in shapes]
    return spec, w, dw, k


def time_steps(po: _PackOptimizer, first_iteration: int, iters: int) -> list[float]:
    out = []
    for it in range(first_iteration, first_iteration + iters):
        t = time.perf_counter()
        po.step(it, set())
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet1026", "bert96"])
    ap.add_argument("--threshold", type=int, default=4096, help="B's --coalesce-below (default %(default)s)")
    ap.add_argument("--max-values", type=int, default=65536,
                    help="step only the parameters with fewer values (0: all; default %(default)s)")
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3, help="A B alternations (default %(default)s)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, B coalesces below {args.threshold} values")
    print(f"{'model':12} {'tensors':>8} {'coalesced':>9} {'values':>9} {'per tensor (ms)':>16} {'coalesced (ms)':>15} "
          f"{'B/A':>6}")
    for model in args.models:
        spec, w, dw, k = pack_of(model, args.max_values)
        a = _PackOptimizer(w, dw, k, spec.optimizer, coalesce_below=0)
        # B steps its own copies, so that A's and B's parameters follow the same number of steps each
        w2, dw2 = [t.clone() for t in w], [t.clone() for t in dw]
        k2 = [[t.clone() for t in ks] for ks in k]
        b = _PackOptimizer(w2, dw2, k2, spec.optimizer, coalesce_below=args.threshold)
        a.step(0, set())
        b.step(0, set())
        ta, tb = [], []
        for r in range(args.rounds):
            ta += time_steps(a, 1 + r * args.iters, args.iters)
            tb += time_steps(b, 1 + r * args.iters, args.iters)
        ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
        print(f"{model:12} {len(w):8d} {len(b.small):9d} {sum(t.numel() for t in w) / 1e6:8.2f}M "
              f"{ma:16.1f} {mb:15.1f} {mb / ma:6.2f}")
        # the same arithmetic: both copies hold the same weights after the same steps
        worst = max(float((x - y).abs().max() / (y.abs().max() + 1e-30)) for x, y in zip(w, w2))
        assert worst <= 1e-6, f"{model}: coalesced weights differ from per-tensor ones by {worst:.2e} (relative)"


if __name__ == "__main__":
    main()
