"""`mlp-tiny`: a small chain used by tests of every stage (not one of the paper's models).

Dense layers with a pass-through label tensor, a dropout, and a cross-entropy loss vLayer: the smallest
model that exercises the whole vLayer contract.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harmony.models.base import ModelSpec, TensorSpec, register
from harmony.optim import OptimizerConfig


@dataclass
class MLPConfig:
    n_layer: int = 6        # hidden Linear+GELU vLayers
    d_in: int = 32
    d_hidden: int = 64
    n_classes: int = 10
    dropout: float = 0.0


class MLPIn(nn.Module):
    kind = "mlp.in"

    def __init__(self, c: MLPConfig):
        super().__init__()
        self.proj = nn.Linear(c.d_in, c.d_hidden)

    def forward(self, x, labels):
        return self.proj(x), labels


class MLPBlock(nn.Module):
    kind = "mlp.block"

    def __init__(self, c: MLPConfig):
        super().__init__()
        self.fc = nn.Linear(c.d_hidden, c.d_hidden)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, h, labels):
        return h + self.drop(F.gelu(self.fc(h))), labels


class MLPHead(nn.Module):
    kind = "mlp.head"

    def __init__(self, c: MLPConfig):
        super().__init__()
        self.out = nn.Linear(c.d_hidden, c.n_classes)

    def forward(self, h, labels):
        return self.out(h), labels


class CrossEntropyLoss(nn.Module):
    """Loss vLayer: (logits[B, ..., C], labels[B, ...]) -> (mean loss,)."""
    kind = "loss.cross_entropy"

    def forward(self, logits, labels):
        return (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)),)


class MLPModel(ModelSpec):
    family = "mlp"

    def iter_vlayers(self):
        c = self.config
        yield MLPIn(c)
        for _ in range(c.n_layer):
            yield MLPBlock(c)
        yield MLPHead(c)
        yield CrossEntropyLoss()

    def input_specs(self):
        return [TensorSpec((self.config.d_in,), "float32"), TensorSpec((), "int64")]

    def synthetic_batch(self, batch, generator):
        c = self.config
        x = torch.randn(batch, c.d_in, generator=generator)
        y = torch.randint(0, c.n_classes, (batch,), generator=generator)
        return x, y


def mlp(name: str = "mlp-tiny", **overrides) -> MLPModel:
    return MLPModel(name, MLPConfig(**overrides), OptimizerConfig(kind="adamw", lr=1e-3, weight_decay=0.01))


register("mlp-tiny", lambda **o: mlp("mlp-tiny", **o))
