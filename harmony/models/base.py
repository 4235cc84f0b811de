"""The model contract every stage relies on.

A model is an ordered chain of vLayers. A vLayer is an nn.Module with one calling convention:
`outputs = vlayer(*inputs)` where inputs and outputs are tuples of tensors. vLayer i consumes exactly the
outputs of vLayer i-1 (vLayer 0 consumes the data tuple, labels included); a tensor that a later vLayer
needs (an attention mask, the labels) is passed through every vLayer in between. The last vLayer is the
loss: it returns `(loss,)`, a 0-dim tensor holding the *mean* over the samples of its batch, so a
minibatch split into microbatches of sizes u_i is trained exactly by back-propagating sum_i (u_i/D)*loss_i.
"""
from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from harmony.optim import OptimizerConfig


@dataclass(frozen=True)
class TensorSpec:
    """Shape of one tensor *per sample* (no batch dimension) and its dtype name (e.g. 'float32')."""
    shape: tuple[int, ...]
    dtype: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def bytes_per_sample(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.torch_dtype).element_size()

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorSpec":
        return TensorSpec(tuple(d["shape"]), d["dtype"])

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSpec":
        return TensorSpec(tuple(t.shape[1:]), str(t.dtype).removeprefix("torch."))


class ModelSpec:
    """A named model: how to build its vLayers, what data it eats, and how it is optimised.

    Families subclass this with a config dataclass (`self.config`). Everything here must work when the
    default device is 'meta' (the decomposer builds 40 B-parameter chains without allocating them).
    """

    family: str = "?"

    def __init__(self, name: str, config: Any, optimizer: OptimizerConfig):
        self.name = name
        self.config = config
        self.optimizer = optimizer

    # -- to implement per family -------------------------------------------------------------
    def build_vlayers(self) -> list[nn.Module]:
        """Fresh, randomly initialised vLayers on the current default device; loss vLayer last. A family
        implements this or `iter_vlayers`; by default the list of `iter_vlayers`."""
        if type(self).iter_vlayers is ModelSpec.iter_vlayers:
            raise NotImplementedError(f"{type(self).__name__} implements neither build_vlayers nor iter_vlayers")
        return list(self.iter_vlayers())

    def iter_vlayers(self) -> Iterator[nn.Module]:
        """The vLayers of build_vlayers, built one at a time as they are taken, drawing the same random
        numbers in the same order. A family whose build can go vLayer by vLayer implements this instead of
        build_vlayers, so that `build_each` holds one vLayer of a model, not all of it; the default builds
        the whole list first."""
        yield from self.build_vlayers()

    def input_specs(self) -> list[TensorSpec]:
        """Per-sample specs of the data tuple fed to vLayer 0 (inputs, then labels)."""
        raise NotImplementedError

    def synthetic_batch(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """A deterministic random batch (on the CPU) in the format of input_specs()."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------
    def build(self, device: str | torch.device = "cpu", seed: int | None = 0) -> nn.ModuleList:
        """Build the chain on `device` with deterministic initialisation (seed) unless device is meta."""
        return nn.ModuleList(self.build_each(device, seed))

    def build_each(self, device: str | torch.device = "cpu", seed: int | None = 0) -> Iterator[nn.Module]:
        """The chain of `build`, the same weights, one vLayer at a time: each is built when taken, so a
        caller that copies a vLayer away and drops it holds one at a time. The runtime's launcher fills the
        host arena this way; holding the whole model beside the arena cost 4 bytes per parameter of host
        memory at set-up (50 GiB for a 13 B GPT-2, enough to decide whether it fits a 252 GiB host). The
        seed is set once, before the first vLayer: the caller must draw no random numbers in between."""
        device = torch.device(device)
        if seed is not None and device.type != "meta":
            torch.manual_seed(seed)
        layers = self.iter_vlayers()
        while True:
            with torch.device(device), NoDrawsOnMeta():    # only while a vLayer is built, not the caller
                layer = next(layers, None)
            if layer is None:
                return
            yield layer

    def config_dict(self) -> dict:
        return dataclasses.asdict(self.config) if dataclasses.is_dataclass(self.config) else dict(self.config)

    def describe(self) -> dict:
        return {"name": self.name, "family": self.family, "config": self.config_dict(),
                "optimizer": dataclasses.asdict(self.optimizer)}


class ImageClassifierSpec(ModelSpec):
    """Data contract of the image families (VGG, ResNet): an image batch and integer class labels.
    The config must have in_channels, image_size and n_classes."""

    def input_specs(self) -> list[TensorSpec]:
        c = self.config
        return [TensorSpec((c.in_channels, c.image_size, c.image_size), "float32"), TensorSpec((), "int64")]

    def synthetic_batch(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        c = self.config
        x = torch.randn(batch, c.in_channels, c.image_size, c.image_size, generator=generator)
        return x, torch.randint(0, c.n_classes, (batch,), generator=generator)


def run_chain(layers: Sequence[nn.Module], inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Apply vLayers in order; returns the last vLayer's outputs (for the full chain: (loss,))."""
    x = tuple(inputs)
    for layer in layers:
        x = layer(*x)
        if not isinstance(x, tuple):
            raise TypeError(f"vLayer {type(layer).__name__} returned {type(x).__name__}, not a tuple of tensors")
    return x


# ------------------------------------------------------------------------------------------------
# Registry of named models. A family registers its named configurations; `get_model` also accepts
# overrides of any config field, so every family is parametric: get_model('gpt2-tiny', n_layer=8).
# ------------------------------------------------------------------------------------------------
_REGISTRY: dict[str, Callable[..., ModelSpec]] = {}
_PAPER: dict[str, dict] = {}


def uninitialised(module_cls: type[nn.Module], *args, **kwargs) -> nn.Module:
    """`module_cls(*args, **kwargs)` on the current default device with its parameters allocated but not
    drawn (torch.nn.utils.skip_init): for modules whose every parameter the family initialises itself right
    after. torch's default draw would be thrown away, and it is not cheap: building GPT2-XL on a CPU spent
    18.8 of its 27 s in kaiming-uniform draws that GPT-2's normal init then overwrote (docs/models.md)."""
    with NoDrawsOnMeta():                     # skip_init builds the module on meta first
        return nn.utils.skip_init(module_cls, *args, device=torch.get_default_device(), **kwargs)


class NoDrawsOnMeta(torch.overrides.TorchFunctionMode):
    """Within it, a normal draw into a meta tensor (`Tensor.normal_`, `nn.init.normal_`,
    `nn.init.kaiming_normal_`, ...) is a no-op: a meta tensor has no values to draw, and
    torch runs that call through a Python reference that imports torch._dynamo, which cost 1.1-1.3 s on
    this CPU and more on the GPU hosts in every process that builds a model (the runtime's host
    validation and each worker build on meta; `uninitialised` builds on meta inside skip_init). Draws into
    real tensors, and the CPU generator's stream, are untouched (meta draws never consume it)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "").endswith("normal_"):
            target = args[0] if args else kwargs.get("tensor")     # nn.init passes it by keyword
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target                                     # in-place draws return their tensor
        return func(*args, **kwargs)


DRAW_CHUNK = 1 << 20      # elements per independently seeded chunk of a large draw (fixed: results must
                          # not depend on the thread count)
_draw_pool: ThreadPoolExecutor | None = None


def draw_normal_(tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
    """`nn.init.normal_` for the families' own initialisation, drawn in parallel where it is large.
    torch's CPU `normal_` is serial: the H100 hosts drew 126 M values/s, so GPT2-XL's 1.64 B parameters
    took 13 s of every run's set-up and a 5.25 B GPT-2 33 s (docs/performance.md, entry 27). A contiguous CPU
    tensor of at least two chunks is drawn in fixed DRAW_CHUNK-element chunks on a thread pool (normal_
    releases the GIL), each chunk from its own generator, whose seeds are drawn in order from the global
    stream: the result depends on the seed only, not on the thread count. Smaller tensors are drawn from the
    global stream as before; a meta tensor is left alone (it has no values)."""
    global _draw_pool
    with torch.no_grad():
        n = tensor.numel()
        if tensor.is_meta:
            return tensor
        if tensor.device.type != "cpu" or n < 2 * DRAW_CHUNK or not tensor.is_contiguous():
            return tensor.normal_(mean, std)
        flat = tensor.view(-1)
        seeds = torch.randint(0, 2 ** 62, (math.ceil(n / DRAW_CHUNK),), dtype=torch.int64).tolist()

        def draw(i: int) -> None:
            with torch.no_grad():          # grad mode is per thread
                chunk = flat[i * DRAW_CHUNK:(i + 1) * DRAW_CHUNK]
                chunk.normal_(mean, std, generator=torch.Generator().manual_seed(seeds[i]))
        if _draw_pool is None:
            _draw_pool = ThreadPoolExecutor(max(1, torch.get_num_threads()), thread_name_prefix="harmony-init")
        list(_draw_pool.map(draw, range(len(seeds))))
    return tensor


def to_channels_last(x: torch.Tensor) -> torch.Tensor:
    """x in channels-last memory format, no copy when it already is. A convolutional vLayer of a model with
    `channels_last` converts its input on entry, since a stashed or received activation arrives
    NCHW-contiguous (docs/performance.md entry 105)."""
    return x.contiguous(memory_format=torch.channels_last)


def channels_last_only(t: torch.Tensor) -> bool:
    """Whether t is laid out channels-last and not also contiguous (a 1x1 image or one channel is both)."""
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def kaiming_normal_(tensor: torch.Tensor, mode: str = "fan_in", nonlinearity: str = "relu") -> torch.Tensor:
    """`nn.init.kaiming_normal_` (a = 0) through `draw_normal_`: std = gain / sqrt(fan)."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', not {mode!r}")
    if tensor.dim() < 2:
        raise ValueError(f"kaiming init needs a weight of at least 2 dimensions, got shape {tuple(tensor.shape)}")
    receptive = math.prod(tensor.shape[2:])
    fan = (tensor.shape[1] if mode == "fan_in" else tensor.shape[0]) * receptive
    return draw_normal_(tensor, 0.0, nn.init.calculate_gain(nonlinearity) / math.sqrt(fan))


def register(name: str, factory: Callable[..., ModelSpec], paper: dict | None = None) -> None:
    """Register a named model. `paper` holds the paper's figures (params, vlayers) for the docs table."""
    _REGISTRY[name] = factory
    if paper:
        _PAPER[name] = paper


def list_models() -> list[str]:
    _load_families()
    return sorted(_REGISTRY)


def paper_facts(name: str) -> dict:
    _load_families()
    return _PAPER.get(name, {})


def get_model(name: str, optimizer: dict | None = None, **overrides) -> ModelSpec:
    """The named model; `overrides` replace fields of its config, `optimizer` replaces fields of its
    OptimizerConfig (e.g. get_model('resnet-tiny', optimizer={"lr": 0.01})). Both are plain JSON, so a
    model.json's source {"kind": "zoo", "name": ..., "overrides": {..., "optimizer": {...}}} rebuilds the
    same spec (harmony.decompose.spec_from_model_json)."""
    _load_families()
    if name not in _REGISTRY:
        import difflib
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown model {name!r}.{hint} Known models: {', '.join(sorted(_REGISTRY))}. "
                       f"A user module is named as 'package.module:callable'.")
    spec = _REGISTRY[name](**overrides)
    if optimizer:
        spec.optimizer = replace_optimizer_fields(spec.optimizer, optimizer)
    return spec


def replace_optimizer_fields(cfg: OptimizerConfig, fields: dict) -> OptimizerConfig:
    """A copy of `cfg` with `fields` replaced (JSON lists become tuples); unknown fields are an error."""
    known = {f.name for f in dataclasses.fields(cfg)}
    bad = sorted(set(fields) - known)
    if bad:
        raise KeyError(f"unknown optimizer field(s) {bad}: OptimizerConfig has {sorted(known)}")
    return dataclasses.replace(cfg, **{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def _load_families() -> None:
    # Importing a family module registers its models.
    import harmony.models  # noqa: F401
