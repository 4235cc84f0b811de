"""Plain PyTorch training: the ground truth every execution mode is checked against.

The whole chain on one device, one forward and backward over the whole minibatch, the same optimizer
config. A system is correct when, from the same initial weights and minibatches, its losses and
parameters after K iterations equal these.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

from harmony.models.base import ModelSpec, run_chain
from harmony.optim import make_optimizer, set_lr


def minibatches(spec: ModelSpec, minibatch: int, iters: int, seed: int = 1234) -> list[tuple[torch.Tensor, ...]]:
    """The deterministic synthetic minibatches used by tests and synthetic runs (iteration i -> batch i)."""
    g = torch.Generator().manual_seed(seed)
    return [spec.synthetic_batch(minibatch, g) for _ in range(iters)]


def train_reference(spec: ModelSpec, batches: Sequence[tuple[torch.Tensor, ...]], seed: int = 0,
                    device: str = "cpu", layers: nn.ModuleList | None = None) -> tuple[list[float], nn.ModuleList]:
    """Train `spec` (initialised with `seed`) on `batches`; returns per-iteration losses and the trained chain."""
    if layers is None:
        # Initialise on the CPU generator and move: every system (the runtime's host arena, the baselines)
        # starts from the CPU initialisation, and CUDA's generator would draw different weights.
        layers = spec.build("cpu", seed=seed).to(device)
    layers.train()
    params = [p for p in layers.parameters() if p.requires_grad]
    opt = make_optimizer(params, spec.optimizer)
    losses = []
    for step, batch in enumerate(batches):
        set_lr(opt, spec.optimizer, step)
        opt.zero_grad(set_to_none=True)
        (loss,) = run_chain(layers, tuple(t.to(device) for t in batch))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, layers


def max_relative_difference(a: Iterable[torch.Tensor], b: Iterable[torch.Tensor]) -> float:
    """max over tensors of ||a - b||_inf / max(||b||_inf, tiny): the metric of the correctness tests."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        x = x.detach().double().cpu()
        y = y.detach().double().cpu()
        denom = max(float(y.abs().max()), 1e-12) if y.numel() else 1.0
        worst = max(worst, float((x - y).abs().max()) / denom if x.numel() else 0.0)
    return worst
