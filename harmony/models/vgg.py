"""VGG (Simonyan & Zisserman 2015) as a chain of vLayers: one per 3x3 conv (with its ReLU, and the stage's
max-pool after the stage's last conv), three fully-connected vLayers, loss.

Named configurations: `vgg16` (torchvision's vgg16: 13 convs + 3 FC, 138,357,544 parameters), `vgg416`
(the paper's: VGG16 with 80 extra 3x3 convs per stage, 413 convs + 3 FC, 0.578 B) and `vgg-tiny`.

No BatchNorm by default: torchvision's vgg16 and the paper's 0.578 B count are both without it
(`batch_norm=True` gives the vgg16_bn variant). The layer names and order follow torchvision's, so a
state_dict maps one to one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harmony.models.base import (ImageClassifierSpec, draw_normal_, kaiming_normal_, register, to_channels_last,
                                 uninitialised)
from harmony.models.mlp import CrossEntropyLoss
from harmony.optim import OptimizerConfig


@dataclass
class VGGConfig:
    widths: tuple[int, ...] = (64, 128, 256, 512, 512)   # channels of each stage
    convs: tuple[int, ...] = (2, 2, 3, 3, 3)             # 3x3 convs per stage (VGG16)
    extra_convs: int = 0              # extra width-preserving 3x3 convs per stage (vgg416: 80)
    batch_norm: bool = False
    image_size: int = 224
    in_channels: int = 3
    n_classes: int = 1000
    pool_size: int = 7                # adaptive average pool before the classifier (torchvision: 7x7)
    fc_hidden: int = 4096
    dropout: float = 0.5              # classifier dropout (torchvision)
    channels_last: bool = False       # activations in channels-last format (as ResNetConfig's; entry 105)

    def __post_init__(self):
        self.widths, self.convs = tuple(self.widths), tuple(self.convs)
        if len(self.widths) != len(self.convs):
            raise ValueError(f"widths {self.widths} and convs {self.convs} must have one entry per stage")


class VGGConv(nn.Module):
    """(x[B,Cin,H,W], labels) -> (relu(conv(x)) [max-pooled if it ends a stage], labels)"""
    kind = "vgg.conv"

    def __init__(self, c_in: int, c_out: int, batch_norm: bool, pool: bool, channels_last: bool = False):
        super().__init__()
        self.conv = uninitialised(nn.Conv2d, c_in, c_out, kernel_size=3, padding=1)   # initialised below
        self.bn = nn.BatchNorm2d(c_out) if batch_norm else None
        self.pool = pool
        self.channels_last = channels_last
        kaiming_normal_(self.conv.weight, mode="fan_out", nonlinearity="relu")  # torchvision's init
        nn.init.zeros_(self.conv.bias)

    def extra_repr(self):           # in the vLayer's signature: a profile is per memory format
        return f"pool={self.pool}" + (", channels_last=True" if self.channels_last else "")

    def forward(self, x, labels):
        if self.channels_last:
            x = to_channels_last(x)
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        x = F.relu(x)
        if self.pool:
            x = F.max_pool2d(x, kernel_size=2, stride=2)
        return x, labels


class VGGFC(nn.Module):
    """Classifier vLayer. The first one also average-pools and flattens; the last has no ReLU/dropout."""
    kind = "vgg.fc"

    def __init__(self, d_in: int, d_out: int, dropout: float, first: bool, last: bool, pool_size: int = 7,
                 channels_last: bool = False):
        super().__init__()
        # the first pools a 4-d activation, so it converts as the convolutions do (ResNetHead says why)
        self.channels_last = channels_last and first
        self.fc = uninitialised(nn.Linear, d_in, d_out)                # initialised below
        self.drop = None if last else nn.Dropout(dropout)
        self.first, self.last, self.pool_size = first, last, pool_size
        draw_normal_(self.fc.weight, 0, 0.01)
        nn.init.zeros_(self.fc.bias)

    def extra_repr(self):
        return f"first={self.first}, last={self.last}" + (", channels_last=True" if self.channels_last else "")

    def forward(self, x, labels):
        if self.first:
            if self.channels_last:
                x = to_channels_last(x)
            x = torch.flatten(F.adaptive_avg_pool2d(x, self.pool_size), 1)
        x = self.fc(x)
        if not self.last:
            x = self.drop(F.relu(x))
        return x, labels


class VGGModel(ImageClassifierSpec):
    family = "vgg"

    def iter_vlayers(self):
        c = self.config
        c_in = c.in_channels
        for width, n in zip(c.widths, c.convs):
            total = n + c.extra_convs
            for j in range(total):
                yield VGGConv(c_in, width, c.batch_norm, pool=(j == total - 1), channels_last=c.channels_last)
                c_in = width
        yield VGGFC(c_in * c.pool_size ** 2, c.fc_hidden, c.dropout, first=True, last=False, pool_size=c.pool_size,
                    channels_last=c.channels_last)
        yield VGGFC(c.fc_hidden, c.fc_hidden, c.dropout, first=False, last=False)
        yield VGGFC(c.fc_hidden, c.n_classes, c.dropout, first=False, last=True)
        yield CrossEntropyLoss()



# The paper's CNN optimizer: SGD, lr 0.1, momentum 0.9, weight decay 1e-4.
CNN_OPTIMIZER = OptimizerConfig(kind="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4)

NAMED = {
    "vgg16": (dict(), None),
    "vgg416": (dict(extra_convs=80), {"params": 0.578e9, "vlayers": 416 + 1}),
    # not in the paper: trains a few iterations in about a second on a CPU
    "vgg-tiny": (dict(widths=(8, 16, 16, 32, 32), convs=(1, 1, 2, 2, 2), image_size=32, n_classes=10,
                      pool_size=1, fc_hidden=64, dropout=0.0), None),
}


def vgg(name: str, **overrides) -> VGGModel:
    return VGGModel(name, VGGConfig(**{**NAMED[name][0], **overrides}), CNN_OPTIMIZER)


for _name, (_fields, _paper) in NAMED.items():
    register(_name, lambda _n=_name, **o: vgg(_n, **o), paper=_paper)
