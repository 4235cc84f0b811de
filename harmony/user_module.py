"""A user's own nn.Module as a chain of vLayers (torch.fx).

Named as 'package.module:callable' (or 'path/to/file.py:callable'); `callable(**overrides)` returns the
nn.Module (a Module subclass or a factory function; an nn.Module instance is taken as is).

Splitting. The module is traced with torch.fx, treating each *boundary* submodule as one opaque call
(so its own internals need not be traceable). Boundaries default to every top-level child module, a
container child (nn.Sequential, nn.ModuleList, nn.ModuleDict) standing for its children; the user
may list submodule names instead (`--split-at layer1,layer2.0,head`; nested names are fine). Each boundary
call starts a new vLayer; operations before the first boundary, if any, form a vLayer of their own (kind
'user.prologue'); operations after the last boundary join the last vLayer. vLayer i is a GraphModule holding exactly the graph nodes of its segment, in the
original order, on the original's submodules, so the chain computes bit for bit the original output.

Threading. vLayer i takes the values that are live at its start (computed earlier, used at i or later)
and returns those live at its end, in graph order; a tensor that skips vLayers (a skip connection, a
mask) is passed through the vLayers in between. The label tensors ride at the end of every tuple.

Loss. A loss vLayer is appended (override key `loss`, reserved: it is not passed to the callable):
- "cross_entropy" (default): the module's output is logits [B, ..., C]; labels are int64 [B, ...]
  (class indices; -100 is ignored); the loss is the mean cross-entropy.
- "mse": labels have the output's shape and dtype; the loss is the mean squared error.
The module must return a single tensor.

Data. `example_input` (`--example-input`) gives the per-sample inputs of forward, comma-separated
'SHAPE:DTYPE[:HIGH]', e.g. '3x32x32:float32' or '128:int64:30522,128:int64:2' (HIGH: exclusive upper
bound of random integers; default 2). A module may carry it instead as an attribute `example_input`.
Synthetic batches draw floats from N(0, 1) and integers from [0, HIGH).

Errors are ValueErrors with one clear message: a name that does not import, a callable that gives no
nn.Module, a module torch.fx cannot trace, a boundary that is not a submodule (or is never called), a
parameter used by two vLayers, a non-tensor value crossing a vLayer boundary.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from harmony.models.base import ModelSpec, TensorSpec, run_chain
from harmony.models.mlp import CrossEntropyLoss
from harmony.optim import OptimizerConfig

LOSSES = ("cross_entropy", "mse")
PROLOGUE = "<before the first boundary>"
RESERVED = ("loss",)


# ------------------------------------------------------------------------------------------------
# Loading the user's module
# ------------------------------------------------------------------------------------------------
def load_callable(name: str):
    """'package.module:attr.path' or 'file.py:attr' -> the object."""
    if ":" not in name:
        raise ValueError(f"a user module is named 'package.module:callable', got {name!r}")
    mod_name, attr = name.rsplit(":", 1)
    if not mod_name or not attr:
        raise ValueError(f"a user module is named 'package.module:callable', got {name!r}")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            if not os.path.isfile(mod_name):
                raise FileNotFoundError(f"no such file {mod_name!r}")
            mspec = importlib.util.spec_from_file_location(
                "harmony_user_" + os.path.splitext(os.path.basename(mod_name))[0], mod_name)
            module = importlib.util.module_from_spec(mspec)
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's name being wrong
        raise ValueError(f"cannot import {mod_name!r} for user model {name!r}: {type(e).__name__}: {e}") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            close = difflib.get_close_matches(attr, public, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"{mod_name!r} has no attribute {attr!r} (user model {name!r}).{hint}")
        obj = getattr(obj, part)
    return obj


def instantiate(name: str, overrides: dict) -> nn.Module:
    obj = load_callable(name)
    if isinstance(obj, nn.Module):
        if overrides:
            raise ValueError(f"{name!r} is an nn.Module instance; it takes no overrides ({sorted(overrides)})")
        return obj
    if not callable(obj):
        raise ValueError(f"{name!r} is a {type(obj).__name__}, not an nn.Module class or a function returning one")
    try:
        m = obj(**overrides)
    except TypeError as e:
        raise ValueError(f"calling {name!r} with overrides {overrides} failed: {e}") from e
    if not isinstance(m, nn.Module):
        raise ValueError(f"{name!r} returned a {type(m).__name__}, not an nn.Module")
    return m


# ------------------------------------------------------------------------------------------------
# Splitting with torch.fx
# ------------------------------------------------------------------------------------------------
class _BoundaryTracer(fx.Tracer):
    """Standard fx tracing, but each boundary submodule is one opaque call_module node."""

    def __init__(self, boundaries: set[str]):
        super().__init__()
        self.boundaries = boundaries

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname in self.boundaries or super().is_leaf_module(m, qualname)


class FxVLayer(nn.Module):
    """One segment of a traced module: (*live_in, *labels) -> (*live_out, *labels)."""
    kind = "user.fx"

    def __init__(self, gm: fx.GraphModule, n_in: int, index: int, boundary: str, boundary_cls: str):
        super().__init__()
        self.gm = gm
        self.n_in = n_in
        self.index = index
        self.boundary = boundary
        self.kind = f"user.{boundary_cls}"   # per instance: class of the submodule that starts this vLayer

    def extra_repr(self):
        return f"boundary={self.boundary!r}, n_in={self.n_in}"

    def forward(self, *args):
        out = self.gm(*args[: self.n_in])
        for i, t in enumerate(out):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"vLayer {self.index} ({self.boundary}) passes a {type(t).__name__} to the next "
                                 f"vLayer (output {i}); only tensors may cross vLayer boundaries: choose "
                                 f"other boundaries (--split-at) so that this value stays inside one vLayer")
        return (*out, *args[self.n_in:])


CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def default_boundaries(module: nn.Module) -> list[str]:
    """Every top-level child, with a container child (nn.Sequential, nn.ModuleList, nn.ModuleDict) standing
    for its own children: a model's stack of blocks is usually held in one, and taken whole it would be one
    vLayer holding nearly every layer. One level only: a block that is itself an nn.Sequential stays whole."""
    bounds = []
    for name, child in module.named_children():
        if isinstance(child, CONTAINERS) and len(child):
            bounds += [f"{name}.{sub}" for sub, _ in child.named_children()]
        else:
            bounds.append(name)
    return bounds


def _check_boundaries(module: nn.Module, split_at) -> list[str]:
    names = dict(module.named_modules())
    if split_at is None:
        bounds = default_boundaries(module)
        if not bounds:
            raise ValueError(f"{type(module).__name__} has no submodules to split at; pass --split-at")
        return bounds
    if isinstance(split_at, str):
        split_at = [s.strip() for s in split_at.split(",") if s.strip()]
    bounds = list(split_at)
    for b in bounds:
        if b == "" or b not in names:
            close = difflib.get_close_matches(b, [n for n in names if n], n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            top = ", ".join(n for n, _ in module.named_children())
            raise ValueError(f"boundary {b!r} is not a submodule of {type(module).__name__}.{hint} "
                             f"Its top-level submodules: {top}")
    for a in bounds:
        for b in bounds:
            if a != b and b.startswith(a + "."):
                raise ValueError(f"boundaries {a!r} and {b!r} are nested; list one of them")
    return bounds


def trace(module: nn.Module, boundaries: list[str]) -> fx.GraphModule:
    tracer = _BoundaryTracer(set(boundaries))
    try:
        graph = tracer.trace(module)
    except Exception as e:  # noqa: BLE001 - fx raises many kinds (TraceError, TypeError, RuntimeError ...)
        raise ValueError(
            f"torch.fx cannot trace {type(module).__name__}: {type(e).__name__}: {e}. The forward must not "
            f"branch on tensor values; code that is not traceable can go inside a submodule that is listed "
            f"as a boundary (--split-at), which is called as a whole") from e
    return fx.GraphModule(tracer.root, graph, type(module).__name__)


def split_module(module: nn.Module, split_at=None) -> list[FxVLayer]:
    """Cut `module` into FxVLayers (sharing the module's parameters); no loss vLayer."""
    bounds = _check_boundaries(module, split_at)
    gm = trace(module, bounds)
    nodes = list(gm.graph.nodes)
    bset = set(bounds)

    # Stage of every node: a call of a boundary submodule starts a new stage.
    stage, starts, seen = {}, [], set()
    cur = 0
    for n in nodes:
        if n.op == "call_module" and n.target in bset:
            if n.target in seen:
                raise ValueError(f"boundary submodule {n.target!r} is called more than once in forward; its "
                                 f"parameters would be in two vLayers")
            seen.add(n.target)
            if starts:
                cur += 1
            starts.append(n.target)
        elif not starts and n.op in ("call_module", "call_function", "call_method"):
            starts.append(PROLOGUE)  # operations before the first boundary form a vLayer of their own
        stage[n] = cur
    missing = [b for b in bounds if b not in seen]
    if missing:
        called = ",".join(b for b in bounds if b in seen)
        raise ValueError(f"boundary submodule(s) {missing} are never called in {type(module).__name__}.forward: "
                         f"list the ones that are with --split-at, e.g. --split-at {called}")
    n_stages = cur + 1
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output")
    for n in nodes:
        if n.op in ("placeholder", "output"):
            stage[n] = 0 if n.op == "placeholder" else n_stages - 1
    # get_attr nodes (parameters/buffers/constants used directly in forward) live in their users' stage.
    for n in nodes:
        if n.op == "get_attr":
            users = {stage[u] for u in n.users}
            if len(users) > 1:
                raise ValueError(f"attribute {n.target!r} is used by vLayers {sorted(users)}; a parameter must "
                                 f"belong to one vLayer: choose other boundaries")
            if users:
                stage[n] = users.pop()

    # Values produced in stage < s and used in stage >= s are live at the start of stage s.
    last_use = {}
    for n in nodes:
        for a in n.all_input_nodes:
            last_use[a] = max(last_use.get(a, -1), stage[n])
    order = {n: i for i, n in enumerate(nodes)}

    def live_at_start(s):
        if s == 0:
            return placeholders
        return sorted((n for n in nodes if n.op != "output" and n.op != "get_attr" and stage[n] < s
                       and last_use.get(n, -1) >= s), key=order.get)

    vlayers = []
    for s in range(n_stages):
        live_in = live_at_start(s)
        g = fx.Graph()
        env = {}
        for n in live_in:
            env[n] = g.placeholder(n.name if n.op != "placeholder" else n.target, type_expr=n.type)
        for n in nodes:
            if stage[n] == s and n.op not in ("placeholder", "output"):
                env[n] = g.node_copy(n, lambda a: env[a])
        if s == n_stages - 1:
            result = fx.node.map_arg(output.args[0], lambda a: env[a])
            g.output(result if isinstance(result, tuple) else (result,))
        else:
            g.output(tuple(env[n] for n in live_at_start(s + 1)))
        g.lint()
        sub = fx.GraphModule(gm, g, f"{type(module).__name__}_vlayer{s}")
        cls = "prologue" if starts[s] == PROLOGUE else type(gm.get_submodule(starts[s])).__name__
        vlayers.append(FxVLayer(sub, len(live_in), s, starts[s], cls))
    # Every parameter and buffer must belong to one vLayer (the runtime swaps and updates them per vLayer).
    owner = {}
    for v in vlayers:
        for t in [*v.parameters(), *v.buffers()]:
            if owner.setdefault(id(t), v.index) != v.index:
                names = [n for n, p in [*module.named_parameters(), *module.named_buffers()] if p is t]
                raise ValueError(f"{names[0] if names else 'a tensor'} is used by vLayers {owner[id(t)]} and "
                                 f"{v.index}; a parameter must belong to one vLayer: choose other boundaries")
    return vlayers


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------
class MSELoss(nn.Module):
    """Loss vLayer: (output, target) -> (mean squared error,)."""
    kind = "loss.mse"

    def forward(self, output, target):
        return (F.mse_loss(output, target),)


def make_loss(kind: str) -> nn.Module:
    if kind == "cross_entropy":
        return CrossEntropyLoss()
    if kind == "mse":
        return MSELoss()
    raise ValueError(f"unknown loss {kind!r} for a user module: use one of {', '.join(LOSSES)}")


# ------------------------------------------------------------------------------------------------
# ModelSpec
# ------------------------------------------------------------------------------------------------
@dataclass
class InputSpec:
    spec: TensorSpec
    high: int = 2   # integers: exclusive upper bound of random values


def parse_example_input(text) -> list[InputSpec]:
    """'3x32x32:float32,128:int64:30522' -> per-sample specs. An empty shape ('' or 'scalar') is 0-dim."""
    if text is None:
        raise ValueError("a user module needs its per-sample input: pass --example-input (e.g. '3x32x32:float32') "
                         "or give the module an attribute example_input")
    if isinstance(text, (list, tuple)):
        text = ",".join(text)
    out = []
    for item in str(text).split(","):
        parts = item.strip().split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"bad --example-input item {item!r}: use SHAPE:DTYPE[:HIGH], e.g. 3x32x32:float32")
        shape_s, dtype = parts[0], parts[1]
        try:
            shape = tuple(int(d) for d in shape_s.split("x")) if shape_s not in ("", "scalar") else ()
            high = int(parts[2]) if len(parts) == 3 else 2
        except ValueError:
            raise ValueError(f"bad --example-input item {item!r}: SHAPE is like 3x32x32, HIGH an integer") from None
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"bad --example-input item {item!r}: unknown dtype {dtype!r}")
        out.append(InputSpec(TensorSpec(shape, dtype), high))
    return out


class UserModuleSpec(ModelSpec):
    family = "user"

    def __init__(self, name: str, overrides: dict, split_at=None, example_input=None, loss: str = "cross_entropy",
                 optimizer: OptimizerConfig | None = None):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r} for a user module: use one of {', '.join(LOSSES)}")
        config = {"name": name, "overrides": dict(overrides), "split_at": split_at,
                  "example_input": example_input, "loss": loss}
        super().__init__(name, config, optimizer or OptimizerConfig())
        self._out_spec: TensorSpec | None = None
        self._inputs = parse_example_input(example_input)

    def module(self) -> nn.Module:
        return instantiate(self.config["name"], self.config["overrides"])

    def build_vlayers(self):
        vlayers = split_module(self.module(), self.config["split_at"])
        if vlayers[0].n_in != len(self._inputs):
            raise ValueError(f"{self.name}.forward takes {vlayers[0].n_in} tensor(s) but --example-input gives "
                             f"{len(self._inputs)}")
        return [*vlayers, make_loss(self.config["loss"])]

    def output_spec(self) -> TensorSpec:
        """Per-sample spec of the module's output (found by running it on meta tensors)."""
        if self._out_spec is None:
            with torch.device("meta"):
                m = self.module()
                x = [torch.empty((2, *i.spec.shape), dtype=i.spec.torch_dtype) for i in self._inputs]
                try:
                    with torch.no_grad():
                        y = m(*x)
                except Exception as e:  # noqa: BLE001
                    raise ValueError(f"running {self.name} on inputs {self.config['example_input']!r} failed: "
                                     f"{type(e).__name__}: {e}") from e
            if not isinstance(y, torch.Tensor):
                raise ValueError(f"{self.name} returns a {type(y).__name__}; a user module must return one tensor "
                                 f"(the input of its loss)")
            self._out_spec = TensorSpec.of(y)
        return self._out_spec

    def label_spec(self) -> TensorSpec:
        out = self.output_spec()
        if self.config["loss"] == "cross_entropy":
            if not out.shape:
                raise ValueError(f"{self.name} returns one value per sample; cross_entropy needs logits [..., C]")
            return TensorSpec(out.shape[:-1], "int64")
        return out

    def input_specs(self):
        return [*(i.spec for i in self._inputs), self.label_spec()]

    def synthetic_batch(self, batch, generator):
        xs = []
        for i in self._inputs:
            shape = (batch, *i.spec.shape)
            if i.spec.torch_dtype.is_floating_point:
                xs.append(torch.randn(shape, generator=generator).to(i.spec.torch_dtype))
            else:
                xs.append(torch.randint(0, i.high, shape, generator=generator, dtype=i.spec.torch_dtype))
        lab = self.label_spec()
        if self.config["loss"] == "cross_entropy":
            y = torch.randint(0, self.output_spec().shape[-1], (batch, *lab.shape), generator=generator)
        else:
            y = torch.randn((batch, *lab.shape), generator=generator).to(lab.torch_dtype)
        return (*xs, y)


def resolve_user_module(name: str, overrides: dict | None, split_at=None, example_input=None):
    """'package.module:callable' (+ overrides) -> (UserModuleSpec, source record for model.json)."""
    overrides = dict(overrides or {})
    loss = overrides.pop("loss", "cross_entropy")
    if isinstance(split_at, str):
        split_at = [s.strip() for s in split_at.split(",") if s.strip()] or None
    if example_input is None or split_at is None:
        with torch.device("meta"):   # no memory for the weights
            module = instantiate(name, overrides)
        if example_input is None:
            example_input = getattr(module, "example_input", None)
        if split_at is None:        # recorded as resolved, so model.json rebuilds these vLayers whatever the default
            split_at = default_boundaries(module) or None
    spec = UserModuleSpec(name, overrides, split_at=split_at, example_input=example_input, loss=loss)
    # Fail now, with a clear message, if it cannot be traced, split, or run as a chain (on meta tensors).
    layers = spec.build("meta")
    x = tuple(torch.empty((2, *s.shape), dtype=s.torch_dtype, device="meta") for s in spec.input_specs())
    try:
        with torch.no_grad():
            run_chain(layers, x)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"running the chain of {name} on meta tensors failed (decompose runs it on the meta "
                         f"device, so it must not read tensor values): {type(e).__name__}: {e}") from e
    source = {"kind": "module", "name": name, "overrides": {**overrides, "loss": loss},
              "split_at": split_at, "example_input": example_input}
    return spec, source


def spec_from_source(source: dict) -> UserModuleSpec:
    """Rebuild the spec from model.json's `source` record."""
    return resolve_user_module(source["name"], source.get("overrides", {}), split_at=source.get("split_at"),
                               example_input=source.get("example_input"))[0]
