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
    """Train `spec` (initialised with `seed`) on `batches`, one forward and backward over each whole
    minibatch; returns per-iteration losses and the trained chain."""
    D = batches[0][0].shape[0] if batches else 1
    return train_in_order(spec, batches, even_shares(D, D, 1), seed=seed, device=device, layers=layers)


def even_shares(minibatch: int, ubatch: int, shares: int) -> list[list[tuple[int, int]]]:
    """The microbatch ranges of `shares` rank shares of a minibatch, as vDP splits it over that many GPUs
    (harmony.schedule.tasks.rank_samples), each share cut into microbatches of `ubatch` (the last one
    smaller where it does not divide), as a task cuts its samples."""
    from harmony.schedule.tasks import rank_samples
    if not 1 <= shares <= minibatch:
        raise ValueError(f"{shares} shares of a minibatch of {minibatch}: give 1 to {minibatch}")
    return [[(s, min(s + ubatch, hi)) for s in range(lo, hi, ubatch)]
            for lo, hi in rank_samples(minibatch, shares, "vDP")]


def train_in_order(spec: ModelSpec, batches: Sequence[tuple[torch.Tensor, ...]],
                   shares: list[list[tuple[int, int]]], *, seed: int = 0, dropout: bool = False,
                   device: str = "cpu", host_optimizer: bool = False, layers: nn.ModuleList | None = None,
                   on_iteration=None) -> tuple[list[float], nn.ModuleList]:
    """Plain PyTorch in the runtime's order of arithmetic: per iteration, each microbatch of each rank share
    through the whole chain and backward of (u_i / D) * loss_i, accumulated per share; the shares' gradients
    summed in rank order (vDP's all-reduce of two ranks is that sum); one optimizer step. No runtime code is
    involved: what Harmony's runs must equal (on the CPU bitwise, tests/test_runtime.py).

    `shares`: the microbatch ranges of each rank share (even_shares; one share for vPP and for N = 1). With
    `dropout`, vLayer l of the microbatch starting at sample s draws from dropout_seed(seed, it, l, s), the
    runtime's convention. The loss is summed as the runtime reports it: each share's in fp32 on the device,
    the shares' in rank order. Initialised on the CPU and moved (CUDA's generator draws other weights than the
    runtime's arena holds). `host_optimizer`: the step runs on CPU copies of the parameters (gradients
    copied to the host, parameters copied back), as the runtime's does; the fused CPU and CUDA kernels of
    the same optimizer round an update differently. `on_iteration(step, loss)` after each step (timing)."""
    from harmony.runtime.worker import dropout_seed
    if layers is None:
        layers = spec.build("cpu", seed=seed).to(device)
    layers.train()
    params = [p for p in layers.parameters() if p.requires_grad]
    on_cuda = torch.device(device).type == "cuda"
    host = host_grads = None
    if host_optimizer:
        # host copies and gradient buffers allocated once, pinned where a GPU computes: fresh pageable copies
        # every step (and oversubscribed threads) kept two references past 535 s, 141-151 s without (entry 70)
        host = [torch.empty_like(p, device="cpu", pin_memory=on_cuda).copy_(p.detach()).requires_grad_(True) for p in params]
        host_grads = [torch.empty_like(h, pin_memory=on_cuda) for h in host]
        for h, g_ in zip(host, host_grads):
            h.grad = g_
    opt = make_optimizer(host if host_optimizer else params, spec.optimizer)
    losses = []
    for it, batch in enumerate(batches):
        set_lr(opt, spec.optimizer, it)
        D = batch[0].shape[0]
        total, summed = 0, None
        for ranges in shares:
            for p in params:          # the device parameters: with host_optimizer, opt holds the host copies
                p.grad = None
            part = torch.zeros((), device=device)     # the share's loss summed on the device, as a worker does
            for lo, hi in ranges:
                x = tuple(t[lo:hi].to(device) for t in batch)
                for li, layer in enumerate(layers):
                    if dropout:
                        torch.manual_seed(dropout_seed(seed, it, li, lo))
                    x = run_chain((layer,), x)
                (x[0] * ((hi - lo) / D)).backward()
                part = part + x[0].detach().float() * ((hi - lo) / D)
            total += float(part)                      # the shares' parts in rank order, as the launcher adds them
            grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
            summed = grads if summed is None else [a + b for a, b in zip(summed, grads)]
        if host_optimizer:
            for buf, g_ in zip(host_grads, summed):
                buf.copy_(g_, non_blocking=True)
            if on_cuda:
                torch.cuda.synchronize(device)      # the gradients are on the host before the step reads them
            opt.step()
            with torch.no_grad():   # stream-ordered before the next iteration's kernels and its host copies
                for p, h in zip(params, host):
                    p.copy_(h, non_blocking=True)
        else:
            for p, g_ in zip(params, summed):
                p.grad = g_
            opt.step()
        losses.append(total)
        if on_iteration is not None:
            on_iteration(it, total)
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
