"""Stage 1, decompose: a model name (or a user's nn.Module) -> model.json, the chain of vLayers.

The chain is built on the meta device, so a 40 B-parameter GPT-2 decomposes without memory for its
weights. Per vLayer we record parameter/buffer counts and bytes, the per-sample specs of its inputs and
outputs (found by running the chain on meta tensors), and its forward FLOPs per sample.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time

import torch
from torch import nn

from harmony.jsonio import ArtifactError, read_json, write_json
from harmony.models.base import ModelSpec, TensorSpec, get_model

ARTIFACT = "model"
SCHEMA_VERSION = 1
META_BATCH = 2   # batch size of the meta-device trace (>1 so no dimension is mistaken for the batch)


def decompose_model(spec: ModelSpec, source: dict | None = None, with_flops: bool = True) -> dict:
    """model.json record for a ModelSpec."""
    layers = spec.build("meta")
    x = tuple(torch.empty((META_BATCH, *s.shape), dtype=s.torch_dtype, device="meta") for s in spec.input_specs())
    records = []
    # Identical vLayers on identical inputs (a model's repeated blocks) are run on meta once: the meta
    # kernels cost milliseconds per op, which made a 500-block ResNet take seconds. Key = what the layer
    # signature hashes, minus the outputs (which are what we are looking for).
    cache: dict[str, tuple[list[tuple[tuple[int, ...], torch.dtype]], float | None]] = {}
    for i, layer in enumerate(layers):
        inputs = [TensorSpec.of(t) for t in x]
        key = _run_key(layer, x)
        if key in cache:
            shapes, flops = cache[key]
            y = tuple(torch.empty(s, dtype=d, device="meta") for s, d in shapes)
        else:
            flops = _flops_per_sample(layer, x) if with_flops else None
            with torch.no_grad():
                y = layer(*x)
            if not isinstance(y, tuple):
                raise TypeError(f"vLayer {i} ({type(layer).__name__}) must return a tuple of tensors")
            cache[key] = ([(tuple(t.shape), t.dtype) for t in y], flops)
        outputs = [TensorSpec.of(t) if t.dim() > 0 else TensorSpec((), str(t.dtype).removeprefix("torch."))
                   for t in y]
        params = list(layer.parameters())
        buffers = list(layer.buffers())
        rec = {
            "index": i,
            "name": f"{i}:{getattr(layer, 'kind', type(layer).__name__)}",
            "kind": getattr(layer, "kind", type(layer).__name__),
            "params": sum(p.numel() for p in params),
            "param_bytes": sum(p.numel() * p.element_size() for p in params),
            "trainable_param_bytes": sum(p.numel() * p.element_size() for p in params if p.requires_grad),
            "buffers": sum(b.numel() for b in buffers),
            "buffer_bytes": sum(b.numel() * b.element_size() for b in buffers),
            # tensors the runtime installs one by one each task (its host work per task grows with the
            # parameters', docs/performance.md entry 97)
            "param_tensors": len(params), "buffer_tensors": len(buffers),
            "inputs": [s.to_json() for s in inputs],
            "outputs": [s.to_json() for s in outputs],
            "flops_fwd_per_sample": flops,
            "is_loss": i == len(layers) - 1,
            # Output depends on how samples are grouped into microbatches: dropout masks are drawn per
            # microbatch, BatchNorm normalises over it. Recompute at another size cannot replay them.
            "stochastic": any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in layer.modules()),
            "batch_dependent": any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in layer.modules()),
        }
        rec["signature"] = layer_signature(layer, rec)
        records.append(rec)
        x = y
    return {
        "artifact": ARTIFACT, "schema_version": SCHEMA_VERSION,
        "model": spec.name, "family": spec.family, "config": spec.config_dict(),
        "optimizer": spec.describe()["optimizer"],
        "source": source or {"kind": "zoo", "name": spec.name, "overrides": {}},
        "input": [s.to_json() for s in spec.input_specs()],
        "num_vlayers": len(records),
        "total_params": sum(r["params"] for r in records),
        "total_param_bytes": sum(r["param_bytes"] for r in records),
        "total_buffer_bytes": sum(r["buffer_bytes"] for r in records),
        "microbatch_sensitive": any(r["stochastic"] or r["batch_dependent"] for r in records),
        "vlayers": records,
    }


def layer_signature(layer: nn.Module, rec: dict) -> str:
    """Identical vLayers (same class, parameter shapes, input/output specs) share one signature, so the
    profiler measures one of them and shares the numbers."""
    key = {
        "cls": f"{type(layer).__module__}.{type(layer).__qualname__}",
        "kind": rec["kind"],
        "params": [(n, list(p.shape), str(p.dtype), p.requires_grad) for n, p in layer.named_parameters()],
        "buffers": [(n, list(b.shape), str(b.dtype)) for n, b in layer.named_buffers()],
        "inputs": rec["inputs"], "outputs": rec["outputs"],
        "extra": repr(layer),   # hyper-parameters (dropout rate, eps, kernel sizes) show up in repr
    }
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _run_key(layer: nn.Module, x: tuple[torch.Tensor, ...]) -> str:
    return json.dumps({
        "cls": f"{type(layer).__module__}.{type(layer).__qualname__}",
        "kind": getattr(layer, "kind", None),
        "params": [(n, list(p.shape), str(p.dtype)) for n, p in layer.named_parameters()],
        "buffers": [(n, list(b.shape), str(b.dtype)) for n, b in layer.named_buffers()],
        "inputs": [(list(t.shape), str(t.dtype)) for t in x],
        "extra": repr(layer),
    }, sort_keys=True)


def _flops_per_sample(layer: nn.Module, x: tuple[torch.Tensor, ...]) -> float | None:
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            layer(*x)
        return fc.get_total_flops() / META_BATCH
    except Exception:  # noqa: BLE001 - FLOPs are informative (roofline); an op without a formula is not fatal
        return None


# ------------------------------------------------------------------------------------------------
# From model.json back to a model: what profile, run and the baselines call.
# ------------------------------------------------------------------------------------------------
def load_model_json(path) -> dict:
    return read_json(path, kind=ARTIFACT, schema_version=SCHEMA_VERSION)


def spec_from_model_json(model_json: dict) -> ModelSpec:
    """Rebuild the ModelSpec that produced a model.json (zoo models, with their overrides, or a user module)."""
    src = model_json.get("source", {})
    if src.get("kind") == "zoo":
        return get_model(src["name"], **src.get("overrides", {}))
    if src.get("kind") == "module":
        from harmony.user_module import spec_from_source  # fx path: user nn.Modules
        return spec_from_source(src)
    raise ArtifactError(f"model.json has an unknown source {src!r}")


def microbatch_sensitive(model_json: dict) -> bool:
    """True when some vLayer's output depends on the microbatch grouping (dropout, BatchNorm): then a
    backward pack's recompute must run at the forward's microbatch size (u_fwd == u_bwd). Read from
    model.json; records written before the field existed are rebuilt on the meta device to find out."""
    if "microbatch_sensitive" in model_json:
        return bool(model_json["microbatch_sensitive"])
    if model_json.get("source", {}).get("kind") not in ("zoo", "module"):
        return False      # an analytic record (tests, Table 1 --analytic): no modules to inspect
    layers = spec_from_model_json(model_json).build("meta")
    return any(isinstance(m, (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm))
               and getattr(m, "p", 1) > 0 for layer in layers for m in layer.modules())


def resolve_spec(name: str, overrides: dict | None = None) -> tuple[ModelSpec, dict]:
    """A zoo name (with overrides) or 'package.module:callable' -> (spec, source record)."""
    overrides = overrides or {}
    if ":" in name:
        from harmony.user_module import resolve_user_module
        return resolve_user_module(name, overrides)
    return get_model(name, **overrides), {"kind": "zoo", "name": name, "overrides": overrides}


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def add_arguments(p) -> None:
    p.add_argument("model", help="a zoo name (see `harmony models`) or 'package.module:callable' returning an nn.Module")
    p.add_argument("-o", "--output", required=True, help="model.json to write")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set n_layer=8 (repeatable)")
    p.add_argument("--split-at", default=None,
                   help="user modules: comma-separated submodule names that start a new vLayer "
                        "(default: every top-level submodule, a container standing for its children)")
    p.add_argument("--example-input", default=None,
                   help="user modules: per-sample input shape and dtype, e.g. '3x32x32:float32'")
    p.add_argument("--no-flops", action="store_true", help="skip the FLOP count (faster)")
    p.add_argument("--name", default=None,
                   help="the model's name in every record (default: the zoo or module name); the workflow "
                        "names an alias (zoo model + --set, experiments/scales.yaml) by its id, e.g. gpt2-4096x24")


# Python's spellings of JSON's literals: the workflow writes an alias's YAML `true` as `--set KEY=True`, and
# a string "False" would be a true value to the model's config
_PY_LITERALS = {"True": True, "False": False, "None": None}


def parse_overrides(items: list[str]) -> dict:
    """--set KEY=VALUE items -> {KEY: VALUE}, VALUE read as JSON (or True/False/None), else kept a string."""
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        if v in _PY_LITERALS:
            out[k] = _PY_LITERALS[v]
            continue
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def main(args) -> int:
    t0 = time.perf_counter()
    overrides = parse_overrides(args.set)
    if ":" in args.model:
        from harmony.user_module import resolve_user_module
        spec, source = resolve_user_module(args.model, overrides, split_at=args.split_at,
                                           example_input=args.example_input)
    else:
        spec, source = resolve_spec(args.model, overrides)
    rec = decompose_model(spec, source, with_flops=not args.no_flops)
    if args.name:   # a label only: the model is rebuilt from rec["source"], never from its name
        rec["model"] = args.name
    write_json(args.output, rec)
    dt = time.perf_counter() - t0
    print(f"{rec['model']}: {rec['num_vlayers']} vLayers, {rec['total_params']:,} parameters "
          f"({rec['total_params'] / 1e9:.3f} B), {rec['total_param_bytes'] / 2**30:.2f} GiB of weights; "
          f"wrote {args.output} in {dt:.1f} s", file=sys.stderr)
    if source.get("kind") == "module":   # where a user's module was cut, to check it or change it with --split-at
        print(f"split at: --split-at {','.join(source['split_at'])}", file=sys.stderr)
    return 0
