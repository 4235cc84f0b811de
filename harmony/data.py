"""Batch sources: where the minibatches of a run come from.

`load_batches(spec, data, minibatch, iters, seed)` returns `iters` minibatches in the format of
`spec.input_specs()` (inputs, then labels), on the CPU. `data="synthetic"` gives the deterministic random
batches of `harmony.reference.minibatches` (so every system and the reference see identical data);
real datasets (GLUE-MRPC, WikiText, an offline fallback corpus) are added here by the workflow stage.
"""
from __future__ import annotations

import torch

from harmony.models.base import ModelSpec


def load_batches(spec: ModelSpec, data: str, minibatch: int, iters: int, seed: int = 1234) -> list[tuple[torch.Tensor, ...]]:
    if data in (None, "", "synthetic"):
        from harmony.reference import minibatches
        return minibatches(spec, minibatch, iters, seed)
    raise ValueError(f"unknown data source {data!r}: use 'synthetic' or a dataset directory")
