"""The optimizer every system uses, on the CPU (Harmony, swap baselines, reference) or GPU (resident).

One config, one constructor, so the profiler's K bytes and update times, the runtime's updates and the
reference trainer are the same optimizer by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch


@dataclass(frozen=True)
class OptimizerConfig:
    kind: str = "adamw"            # adamw | adam (BERT-style, with linear warmup) | sgd (momentum)
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.9          # sgd only
    warmup_steps: int = 0          # linear warmup from 0 to lr over this many steps (any kind)

    def state_tensors_per_param(self) -> int:
        """Optimizer state K as a multiple of W: Adam(W) keeps exp_avg and exp_avg_sq; SGD a momentum buffer."""
        return {"adamw": 2, "adam": 2, "sgd": 1 if self.momentum else 0}[self.kind]

    def lr_at(self, step: int) -> float:
        """Learning rate for the 0-based `step`."""
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        return self.lr


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: OptimizerConfig,
                   fused: bool | None = None) -> torch.optim.Optimizer:
    """The optimizer for `params`. Fused kernels where torch has them (CPU fused Adam/AdamW since 2.4)."""
    params = list(params)
    if cfg.kind not in ("adamw", "adam", "sgd"):
        raise ValueError(f"unknown optimizer kind {cfg.kind!r}: use adamw, adam or sgd")
    if fused is None:
        fused = bool(params) and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params)
    if cfg.kind == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                 weight_decay=cfg.weight_decay, fused=fused or None)
    if cfg.kind == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                weight_decay=cfg.weight_decay, fused=fused or None)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay, fused=fused or None)


def set_lr(opt: torch.optim.Optimizer, cfg: OptimizerConfig, step: int) -> None:
    lr = cfg.lr_at(step)
    for g in opt.param_groups:
        g["lr"] = lr
