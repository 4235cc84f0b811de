"""ResNet with BasicBlocks (He et al. 2016) as a chain of vLayers: stem, one vLayer per residual block,
head (average pool + fc), loss.

Named configurations: `resnet34` (torchvision's resnet34: blocks [3, 4, 6, 3], 21,797,672 parameters),
`resnet1026` (the paper's: blocks [128, 128, 128, 128], 0.802 B, 514 vLayers + loss) and `resnet-tiny`.

With BatchNorm (as torchvision's resnet34; the paper's 0.802 B includes the BatchNorm affine parameters).
BatchNorm running statistics are buffers. Layer names and order follow torchvision's, so a state_dict maps
one to one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harmony.models.base import ImageClassifierSpec, kaiming_normal_, register, to_channels_last, uninitialised
from harmony.models.mlp import CrossEntropyLoss
from harmony.models.vgg import CNN_OPTIMIZER


@dataclass
class ResNetConfig:
    blocks: tuple[int, ...] = (3, 4, 6, 3)          # BasicBlocks per stage (resnet34)
    widths: tuple[int, ...] = (64, 128, 256, 512)   # channels per stage; stride 2 from the second stage on
    stem_width: int = 64
    image_size: int = 224
    in_channels: int = 3
    n_classes: int = 1000
    dropout: float = 0.0              # before the fc (torchvision's ResNet has none)
    zero_init_residual: bool = False  # torchvision's option: zero the last BN of each block
    # activations in channels-last (NHWC) memory format, weights as they are: cuDNN's tensor-core kernels run
    # ResNet1026's blocks in 0.73 of NCHW's time on an H200 (docs/performance.md entry 105); the numbers are
    # the same model's, in another order of arithmetic, so every system must run it alike
    channels_last: bool = False

    def __post_init__(self):
        self.blocks, self.widths = tuple(self.blocks), tuple(self.widths)
        if len(self.blocks) != len(self.widths):
            raise ValueError(f"blocks {self.blocks} and widths {self.widths} must have one entry per stage")


def _init_conv_bn(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ResNetStem(nn.Module):
    """(img, labels) -> (maxpool(relu(bn(conv7x7/2(img)))), labels)"""
    kind = "resnet.stem"

    def __init__(self, c: ResNetConfig):
        super().__init__()
        self.conv1 = uninitialised(nn.Conv2d, c.in_channels, c.stem_width, kernel_size=7, stride=2, padding=3,
                                   bias=False)
        self.bn1 = nn.BatchNorm2d(c.stem_width)
        self.channels_last = c.channels_last
        _init_conv_bn(self)

    def extra_repr(self):           # in the vLayer's signature: a profile is per memory format
        return "channels_last=True" if self.channels_last else ""

    def forward(self, x, labels):
        if self.channels_last:
            x = to_channels_last(x)
        return F.max_pool2d(F.relu(self.bn1(self.conv1(x))), kernel_size=3, stride=2, padding=1), labels


class BasicBlock(nn.Module):
    """(x, labels) -> (relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), labels)"""
    kind = "resnet.basic_block"

    def __init__(self, c_in: int, c_out: int, stride: int, zero_init_residual: bool = False,
                 channels_last: bool = False):
        super().__init__()
        self.channels_last = channels_last
        self.conv1 = uninitialised(nn.Conv2d, c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = uninitialised(nn.Conv2d, c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(uninitialised(nn.Conv2d, c_in, c_out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(c_out))
        _init_conv_bn(self)
        if zero_init_residual:
            nn.init.zeros_(self.bn2.weight)

    def extra_repr(self):
        return "channels_last=True" if self.channels_last else ""

    def forward(self, x, labels):
        if self.channels_last:
            x = to_channels_last(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity), labels


class ResNetHead(nn.Module):
    """(x[B,C,h,w], labels) -> (fc(flatten(avgpool(x))), labels)"""
    kind = "resnet.head"

    def __init__(self, c: ResNetConfig):
        super().__init__()
        self.drop = nn.Dropout(c.dropout)
        self.fc = nn.Linear(c.widths[-1], c.n_classes)
        # converts too: a received NCHW activation would otherwise be pooled in another order than plain
        # PyTorch pools the channels-last one (on CUDA, 2.5e-6 apart after a few steps; entry 106)
        self.channels_last = c.channels_last

    def extra_repr(self):
        return "channels_last=True" if self.channels_last else ""

    def forward(self, x, labels):
        if self.channels_last:
            x = to_channels_last(x)
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))), labels


class ResNetModel(ImageClassifierSpec):
    family = "resnet"

    def iter_vlayers(self):
        c = self.config
        yield ResNetStem(c)
        c_in = c.stem_width
        for s, (n, width) in enumerate(zip(c.blocks, c.widths)):
            for j in range(n):
                yield BasicBlock(c_in, width, stride=2 if (s > 0 and j == 0) else 1,
                                 zero_init_residual=c.zero_init_residual, channels_last=c.channels_last)
                c_in = width
        yield ResNetHead(c)
        yield CrossEntropyLoss()



NAMED = {
    "resnet34": (dict(), None),
    "resnet1026": (dict(blocks=(128, 128, 128, 128)), {"params": 0.802e9, "vlayers": 514 + 1}),
    # not in the paper: trains a few iterations in about a second on a CPU
    "resnet-tiny": (dict(blocks=(1, 1, 1, 1), widths=(8, 16, 32, 64), stem_width=8, image_size=32,
                         n_classes=10), None),
}


def resnet(name: str, **overrides) -> ResNetModel:
    return ResNetModel(name, ResNetConfig(**{**NAMED[name][0], **overrides}), CNN_OPTIMIZER)


for _name, (_fields, _paper) in NAMED.items():
    register(_name, lambda _n=_name, **o: resnet(_n, **o), paper=_paper)
