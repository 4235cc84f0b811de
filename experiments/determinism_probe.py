"""Is plain PyTorch training of a model bitwise reproducible run to run on this device, and if not, which op?

Figure 21's GPT-2 curves differ from themselves between two GPU machines (up to 9.5e-7 from iteration 1,
docs/performance.md entry 69) where figure 13's BERT curves are bitwise equal across three. This trains
the same model twice from the same weights and minibatches (harmony.reference.train_in_order, one share)
under each mode and says whether the two runs' losses and parameters are equal:
  default        PyTorch's defaults (what the figures ran);
  deterministic  torch.use_deterministic_algorithms(True, warn_only=True): the warnings name every op that
                 has no deterministic implementation, and the ops that have one use it;
  strict         torch.use_deterministic_algorithms(True): an op without a deterministic kernel raises,
                 and fused attention takes its deterministic backward;
  math-sdpa      scaled_dot_product_attention on its plain math kernels (no fused attention backward).

    PYTHONPATH=. python experiments/determinism_probe.py results/paper/2xH200/models/gpt2-medium-ft.json \\
        --device cuda --minibatch 32 --ubatch 2 --iters 3 [--modes default,deterministic,math-sdpa]
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import warnings


def parameter_digest(layers) -> str:
    h = hashlib.sha256()
    for p in layers.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def device_sync(device: str):
    """What host_timed needs to time device work: the device's synchronize, or nothing on the CPU."""
    import torch
    return torch.cuda.synchronize if device.startswith("cuda") else None


def train_once(args, spec, batches):
    """One training from the same weights and minibatches: its losses, parameter digest and wall time (the
    device synchronised at both ends; set-up excluded)."""
    from harmony.calibrate import host_timed
    from harmony.reference import even_shares, train_in_order
    layers = spec.build("cpu", seed=args.init_seed).to(args.device)
    shares = even_shares(args.minibatch, args.ubatch, 1)
    out = []

    def train():
        out.append(train_in_order(spec, batches, shares, seed=args.init_seed, device=args.device, layers=layers))
    (seconds,) = host_timed(train, 1, 0, device_sync(args.device))
    losses, layers = out[0]
    return losses, parameter_digest(layers), seconds


def attention_time(args, spec, repeats: int = 20) -> float | None:
    """Median seconds of one scaled_dot_product_attention forward and backward at the model's attention shape
    (one microbatch, causal), under whatever mode is active: what the mode costs in the kernel it changes."""
    import statistics
    import torch
    from harmony.calibrate import host_timed
    cfg = getattr(spec, "config", None)
    heads, width, seq = (getattr(cfg, name, None) for name in ("n_head", "n_embd", "seq_len"))
    if not (heads and width and seq):
        return None
    shape = (args.ubatch, heads, seq, width // heads)
    q, k, v = (torch.randn(shape, device=args.device, requires_grad=True) for _ in range(3))

    def step():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    return statistics.median(host_timed(step, repeats, 3, device_sync(args.device)))


def mode_context(mode: str):
    import torch
    if mode == "default":
        return contextlib.nullcontext()
    if mode == "math-sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.MATH])
    if mode in ("deterministic", "strict"):
        @contextlib.contextmanager
        def deterministic():
            torch.use_deterministic_algorithms(True, warn_only=mode == "deterministic")
            try:
                yield
            finally:
                torch.use_deterministic_algorithms(False)
        return deterministic()
    raise SystemExit(f"unknown mode {mode!r}: use default, deterministic, strict or math-sdpa")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model record (results/.../models/NAME.json)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data", default="data")
    ap.add_argument("--minibatch", type=int, default=32)
    ap.add_argument("--ubatch", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234, help="data seed")
    ap.add_argument("--init-seed", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "tf32"], default="tf32")
    ap.add_argument("--modes", default="default,deterministic,math-sdpa")
    ap.add_argument("-o", "--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    # cuBLAS is deterministic only with a fixed workspace configuration (its documented requirement)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    from harmony.data import load_batches
    from harmony.gpumem import set_precision
    from harmony.jsonio import write_json
    from harmony.workflow import spec_from_model_json
    set_precision(args.precision)
    spec = spec_from_model_json(args.model)
    batches = load_batches(spec, args.data, args.minibatch, args.iters, args.seed)
    result = {"model": args.model, "device": args.device, "minibatch": args.minibatch, "ubatch": args.ubatch,
              "iters": args.iters, "precision": args.precision, "torch": torch.__version__, "modes": {}}
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(0)
    for mode in args.modes.split(","):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with mode_context(mode):
                runs = [train_once(args, spec, batches) for _ in range(2)]
                attention_s = attention_time(args, spec)
        (la, da, ta), (lb, db, tb) = runs
        worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(la, lb)), default=0.0)
        ops = sorted({str(w.message).split(" does not have a deterministic")[0] for w in caught
                      if "deterministic" in str(w.message)})
        result["modes"][mode] = {"losses_equal": la == lb, "parameters_equal": da == db,
                                 "largest_relative_loss_gap": worst, "losses": [la, lb],
                                 "nondeterministic_ops": ops, "train_s": [ta, tb],
                                 "attention_fwd_bwd_s": attention_s}
        print(f"{mode:14s} losses equal {la == lb}, parameters equal {da == db}, "
              f"largest relative loss gap {worst:.1e}, training {min(ta, tb):.2f} s"
              + (f", attention forward+backward {attention_s * 1e3:.2f} ms" if attention_s else "")
              + (f"; ops without a deterministic kernel: {ops}" if ops else ""),
              flush=True)
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
