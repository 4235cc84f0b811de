"""Where a transformer block's GPU time goes, and what other kernels would save (docs/performance.md entry 103).

GPT2-XL's and BERT96's figure-10 plans are bound by the GPU's compute, at about 0.4-0.5 of the TF32 matmul
rate. This times one block (the model's second vLayer, fed by its first on a synthetic batch) as the runtime
runs it: a FWD task's forward under no_grad, and a BWD task's recompute + backward, with CUDA events
(warm-up excluded, the median of the trials), at each microbatch size, three ways:

- `default`: as the models run today (scaled_dot_product_attention picks its kernel; for fp32 that is
  the memory-efficient one, which runs on the CUDA cores, not the TF32 tensor cores);
- `math`: the same call held to SDPA's math backend (attention as TF32 matmuls and a softmax; it saves the
  attention probabilities, so the peak grows);
- `bf16-attention` (with --bf16-attention; a yardstick, not a proposal: the experiment trains fp32): the
  same call on q, k, v cast to bf16 and its output cast back, so SDPA runs a tensor-core kernel; a TF32
  tensor-core attention would take about twice its kernel time (TF32's matmul rate is half bf16's);
- for the convolutional models (`--models resnet1026,vgg416`): one vLayer in each stage, as the models run
  today (NCHW), in channels-last format (`channels-last`), which cuDNN's tensor-core kernels prefer, and
  with only the activations in it (`channels-last-inputs`: the weights stay NCHW and are converted per call);
- `compiled`: `torch.compile` of the block (default attention), at the sizes given by --compile-u only,
  since each size compiles anew.

It also splits the default BWD's kernel time by kind (GEMM, attention, normalisation, dropout, other
element-wise) from a torch.profiler trace at the first --compile-u size. Prints and writes JSON.

    python3 experiments/device/block_kernels_probe.py [--models gpt2-xl,bert96] [--trials 10] [--bf16-attention]
        [--no-compile] [-o OUT.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext

UBATCHES = {"gpt2-xl": [2, 4, 8, 16], "bert96": [4, 8, 16, 32]}
# one vLayer in the middle of each stage (resolution) of the convolutional models, and figure 10's sizes
CONV_LAYERS = {"resnet1026": [64, 192, 320, 448], "vgg416": [40, 120, 205, 290, 370]}
CONV_UBATCHES = {"resnet1026": [32, 128], "vgg416": [8, 32]}
COMPILE_U = {"gpt2-xl": [8], "bert96": [16]}
KERNEL_KINDS = (("attention", ("fmha", "attention", "attn")),
                ("gemm", ("gemm", "cutlass", "sm90", "sm80", "nvjet", "xmma", "cublas", "splitk")),
                ("norm", ("layer_norm", "layernorm")),
                ("dropout", ("dropout", "bernoulli", "philox")),
                ("softmax", ("softmax",)),
                ("elementwise", ("elementwise", "vectorized", "reduce", "gelu", "add", "mul", "copy", "fill")))


def kernel_kind(name: str) -> str:
    low = name.lower()
    for kind, keys in KERNEL_KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def block_and_inputs(name: str, u: int, device, index: int = 1):
    """(vLayer `index` of the model, in training mode on device, and its inputs): the vLayers before it run
    once, one at a time, on a synthetic batch of u samples, and are dropped."""
    import torch
    from harmony.models import get_model
    spec = get_model(name)
    g = torch.Generator().manual_seed(0)
    xs = [t.to(device) for t in spec.synthetic_batch(u, g)]
    for i, layer in enumerate(spec.iter_vlayers()):
        layer = layer.to(device).train()
        if i == index:
            return layer, list(xs)
        with torch.no_grad():
            out = layer(*xs)
        xs = list(out) if isinstance(out, (tuple, list)) else [out]
    raise IndexError(f"{name} has no vLayer {index}")


def channels_last(block, xs, weights: bool = True):
    """A copy of the block and its inputs in channels-last memory format (4-d tensors only); weights=False
    leaves the weights as they are (NCHW), as the models' `channels_last` option runs them."""
    import copy
    import torch
    from harmony.models.base import to_channels_last
    cl = copy.deepcopy(block).to(memory_format=torch.channels_last) if weights else block
    return cl, [to_channels_last(x) if x.dim() == 4 else x for x in xs]


def conv_points(name: str, trials: int, dev) -> list[dict]:
    """Convolutional vLayers (CONV_LAYERS, one in each stage) at CONV_UBATCHES: as the models run today
    (NCHW) and in channels-last format, which cuDNN's tensor-core kernels prefer."""
    import torch
    points = []
    for index in CONV_LAYERS[name]:
        for u in CONV_UBATCHES[name]:
            block, xs = block_and_inputs(name, u, dev, index)
            point = {"index": index, "u": u, "input_shape": list(xs[0].shape)}
            for var, (b, x) in (("default", (block, xs)), ("channels-last", channels_last(block, xs)),
                                ("channels-last-inputs", channels_last(block, xs, weights=False))):
                fwd, bwd = fwd_bwd(b, x, nullcontext)
                try:
                    point[var] = {"fwd_s": statistics.median(timed(fwd, trials)),
                                  "bwd_s": statistics.median(timed(bwd, trials))}
                except torch.OutOfMemoryError as e:
                    point[var] = {"error": f"out of memory: {str(e).splitlines()[0]}"}
            print(f"{name} vLayer {index} {tuple(xs[0].shape[1:])} u={u}: " + "; ".join(
                f"{v} fwd {point[v].get('fwd_s', 0) * 1e3:.2f} bwd {point[v].get('bwd_s', 0) * 1e3:.2f} ms"
                for v in ("default", "channels-last", "channels-last-inputs")), flush=True)
            points.append(point)
            del block, xs
            torch.cuda.empty_cache()
    return points


def timed(fn, trials: int, warmup: int = 3) -> list[float]:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


@contextmanager
def bf16_attention():
    """scaled_dot_product_attention on bf16 copies of q, k, v, its output cast back to their dtype (the models
    look the function up in torch.nn.functional at each call, so patching it there reaches them)."""
    import torch.nn.functional as F
    orig = F.scaled_dot_product_attention

    def cast(q, k, v, *a, **kw):
        return orig(q.bfloat16(), k.bfloat16(), v.bfloat16(), *a, **kw).to(q.dtype)
    F.scaled_dot_product_attention = cast
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig


def fwd_bwd(block, xs, ctx):
    """(FWD task's step, BWD task's step) for this block and inputs, under the attention context ctx."""
    import torch
    x0 = xs[0]

    def fwd():
        with torch.no_grad(), ctx():
            block(*xs)

    def bwd():
        x = x0.detach().requires_grad_(True)
        with ctx():
            out = block(x, *xs[1:])
        y = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.backward(y, torch.ones_like(y))
    return fwd, bwd


def peak_of(fn) -> int:
    import torch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def kernel_split(fn) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by_kind: dict[str, float] = {}
    names: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        us = ev.time_range.elapsed_us()        # a kernel event's own span on the GPU
        by_kind[kernel_kind(ev.name)] = by_kind.get(kernel_kind(ev.name), 0.0) + us / 1e6
        names[ev.name] = names.get(ev.name, 0.0) + us / 1e6
    top = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    return {"by_kind_s": by_kind, "top_kernels_s": [[n[:120], s] for n, s in top]}


def write_json(out: dict, path: str | None) -> None:
    """After every point (atomically): a call cut off mid-way keeps what it measured."""
    if path:
        from harmony.jsonio import write_json as write_atomically
        write_atomically(path, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2-xl,bert96")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    ap.add_argument("--bf16-attention", action="store_true", help="also time the bf16-attention yardstick")
    ap.add_argument("-o", "--output", help="write the results as JSON here")
    args = ap.parse_args(argv)
    import torch
    sys.path.insert(0, os.getcwd())
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from harmony.gpumem import set_precision
    if not torch.cuda.is_available():
        print("block_kernels_probe: needs a CUDA GPU (it times GPU kernels)", file=sys.stderr)
        return 2
    set_precision("tf32")
    dev = torch.device("cuda")
    ctxs = {"default": nullcontext, "math": lambda: sdpa_kernel([SDPBackend.MATH])}
    if args.bf16_attention:
        ctxs["bf16-attention"] = bf16_attention
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "trials": args.trials, "models": {}}
    for name in args.models.split(","):
        if name in CONV_LAYERS:
            out["models"][name] = {"points": conv_points(name, args.trials, dev)}
            write_json(out, args.output)
            continue
        if name not in UBATCHES:
            print(f"block_kernels_probe: no sizes for {name!r}; one of {', '.join([*UBATCHES, *CONV_LAYERS])}",
                  file=sys.stderr)
            return 2
        res = out["models"][name] = {"points": []}
        for u in UBATCHES[name]:
            block, xs = block_and_inputs(name, u, dev)
            point = {"u": u}
            for var, ctx in ctxs.items():
                fwd, bwd = fwd_bwd(block, xs, ctx)
                try:
                    point[var] = {"fwd_s": statistics.median(timed(fwd, args.trials)),
                                  "bwd_s": statistics.median(timed(bwd, args.trials)),
                                  "bwd_peak_bytes": peak_of(bwd)}
                except torch.OutOfMemoryError as e:
                    point[var] = {"error": f"out of memory: {str(e).splitlines()[0]}"}
                torch.cuda.empty_cache()
            if u in COMPILE_U[name]:
                fwd, bwd = fwd_bwd(block, xs, nullcontext)
                try:
                    res["kernels_default_bwd"] = kernel_split(bwd)
                except Exception as e:              # the profiler's API differs across versions
                    res["kernels_default_bwd_error"] = f"{type(e).__name__}: {e}"
                if not args.no_compile:
                    t0 = time.perf_counter()
                    try:
                        cblock = torch.compile(block)
                        cf, cb = fwd_bwd(cblock, xs, nullcontext)
                        cf(), cb()
                        torch.cuda.synchronize()
                        compile_s = time.perf_counter() - t0
                        point["compiled"] = {"fwd_s": statistics.median(timed(cf, args.trials)),
                                             "bwd_s": statistics.median(timed(cb, args.trials)),
                                             "bwd_peak_bytes": peak_of(cb), "compile_s": compile_s}
                        try:
                            res["kernels_compiled_bwd"] = kernel_split(cb)
                        except Exception as e:
                            res["kernels_compiled_bwd_error"] = f"{type(e).__name__}: {e}"
                    except Exception as e:          # a compile failure is a result, not a lost call
                        point["compiled"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            res["points"].append(point)
            cells = "; ".join(f"{v} fwd {p['fwd_s'] * 1e3:.2f} ms bwd {p['bwd_s'] * 1e3:.2f} ms "
                              f"peak {p['bwd_peak_bytes'] / 2**30:.2f} GiB" if "error" not in p else f"{v} {p['error']}"
                              for v, p in point.items() if v != "u")
            print(f"{name} u={u}: {cells}", flush=True)
            write_json(out, args.output)
            del block, xs
            torch.cuda.empty_cache()
        for key in ("kernels_default_bwd", "kernels_compiled_bwd"):
            if key in res:
                tot = sum(res[key]["by_kind_s"].values())
                print(f"{name} {key}: " + ", ".join(f"{k} {s / tot:.0%}" for k, s in
                                                     sorted(res[key]["by_kind_s"].items(), key=lambda kv: -kv[1])))
    write_json(out, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
