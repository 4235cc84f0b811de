"""resident: plain PyTorch with the whole model on one device; the ceiling every offloading system is
measured against on the same GPU.

Weights, gradients and optimizer state stay on the device; the minibatch runs as microbatches of
`--ubatch` with gradient accumulation (loss of microbatch i scaled by u_i/D, so the step equals one over
the whole minibatch); activation checkpointing per vLayer (every vLayer but the loss keeps only its input
and recomputes in backward); the model's optimizer from harmony.optim, fused (fused GPU AdamW on CUDA).
No memory cap unless one is given (then an OOM is the result). The only host<->device traffic is the
minibatch itself and one loss scalar per iteration.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from baselines.common import (RunWriter, Settings, apply_cap, apply_precision, accumulate_microbatches, batch_bytes,
                              is_oom, load_model, pin_batches, resolve_device,
                              status_only, train_loop)
from harmony.data import load_batches
from harmony.optim import make_optimizer, set_lr


def forward_checkpointed(layers, inputs: tuple, use_checkpoint: bool = True):
    """The chain with every vLayer except the loss under activation checkpointing."""
    x = inputs
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        if use_checkpoint and i < last and torch.is_grad_enabled():
            x = checkpoint(layer, *x, use_reentrant=False)
        else:
            x = layer(*x)
    return x


def make_step(s: Settings, spec, dev: torch.device):
    """(layers, step): the resident model on `dev` and one training iteration over a minibatch."""
    # built on the CPU, then moved: the seed's draws are then the CPU generator's, as train_reference's and
    # every other system's are (built on the GPU, mlp-tiny started 6.7% off in loss: x2-correct1)
    layers = spec.build("cpu", seed=s.seed).to(dev)
    layers.train()
    opt = make_optimizer([p for p in layers.parameters() if p.requires_grad], spec.optimizer)
    D, u = s.minibatch, s.ubatch_or_default()

    def step(i: int, batch: tuple) -> float:
        set_lr(opt, spec.optimizer, i)
        opt.zero_grad(set_to_none=True)
        total = accumulate_microbatches(lambda x: forward_checkpointed(layers, x), batch, D, u, dev, s.precision)
        opt.step()
        return float(total)

    return layers, step


def run(s: Settings) -> dict:
    if s.gpus != 1:
        raise ValueError("resident runs on one device: use --gpus 1")
    spec, mj = load_model(s.model, s.overrides)
    dev = resolve_device(s.device)
    s.extra.update(activation_checkpointing="per vLayer (all but the loss)", optimizer="fused, on the device",
                   precision_settings=apply_precision(s.precision), memory_cap=apply_cap(dev, s.gpu_memory_cap))
    try:
        _, step = make_step(s, spec, dev)
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            return status_only(s, spec.name, "oom", f"model state does not fit on {dev}: {str(e).splitlines()[0]}")
        raise
    batches = pin_batches(load_batches(spec, s.data, s.minibatch, s.iters, s.data_seed), dev)
    data_bytes = batch_bytes(batches[0]) if dev.type == "cuda" else 0
    # float(loss) once per iteration: one 4-byte D2H copy
    counted = {"h2d": data_bytes, "d2h": 4 if dev.type == "cuda" else 0}
    return train_loop(s, RunWriter(s, spec.name), step, batches, devices=[dev], model_json=mj,
                      cpu_update=False, counted_bytes=lambda i: counted)
