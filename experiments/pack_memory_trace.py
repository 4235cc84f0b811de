"""Where a pack's memory goes, vLayer by vLayer: docs/performance.md entry 38's diagnosis.

`harmony profile --check-pack` measures a pack's peak as a whole. When that peak is far above the pack rule
(vgg416's 164:247 at u = 32 on the H100: predicted 8.70 GiB, out of memory at 10.74 GiB allocated under an
11 GiB cap), this says which step adds what: it runs the pack's recompute forward with grad one vLayer at a
time, recording the bytes allocated after each (against the profile's chain_saved for that vLayer) and the
step's peak, then the backward's peak (against the pack rule). (No per-vLayer backward hooks: module
backward hooks keep gradients alive and would change what they measure.) Both cuDNN settings are tried: the profiler's (cudnn.deterministic off) and
the runtime's (on; harmony/runtime/worker.py), since their algorithms may hold different workspaces.

    PYTHONPATH=. python experiments/pack_memory_trace.py results/.../models/vgg416.json \
        results/.../remeasure/pack-memory/vgg416-164-247-u32.profile.json 164:247 32 -o trace.json

No memory cap is set: the point is to measure past the cap, not to fail at it."""
from __future__ import annotations

import argparse
import sys

import torch

from harmony import gpumem
from harmony.decompose import load_model_json
from harmony.jsonio import write_json
from harmony.pack_check import predict_pack_peak, walk_to_pack
from harmony.profile import make_inputs
from harmony.profile_data import Profile


def trace(model_json, prof: Profile, start: int, end: int, u: int, device, precision: str,
          deterministic: bool) -> dict:
    dev = torch.device(device)
    torch.backends.cudnn.deterministic = deterministic
    src, x_cpu = walk_to_pack(model_json, start, end, dev, precision)
    gpumem.free_cached(dev)
    with gpumem.MemoryMeter(dev) as m:
        base = m.current()
        layers = [src.get(i) for i in range(start, end)]
        xs = make_inputs(tuple(t.to(dev) for t in x_cpu), u, needs_grad=start > 0)
        for layer in layers:            # dW allocated, as in the pack check (and a pack after its first BWD)
            for p in layer.parameters():
                p.grad = torch.zeros_like(p)
        resident = m.current() - base
        fwd = []
        y = xs
        before = m.current()
        for i, layer in zip(range(start, end), layers):
            m.reset_peak()
            with gpumem.autocast(dev, precision):
                y = layer(*y)
            now = m.current()
            fwd.append({"vlayer": i, "delta_bytes": now - before, "chain_saved_bytes": prof.chain_saved(i, u),
                        "step_peak_bytes": m.peak() - before})
            before = now
        after_fwd = m.current() - base
        diff = [o for o in y if isinstance(o, torch.Tensor) and o.requires_grad]
        m.reset_peak()
        torch.autograd.backward(diff, [torch.randn_like(o) for o in diff])
        bwd_peak = m.peak() - base
    return {"range": [start, end], "u": u, "deterministic": deterministic, "resident_bytes": resident,
            "after_recompute_forward_bytes": after_fwd, "bwd_peak_bytes": bwd_peak,
            "predicted_bytes": predict_pack_peak(prof, (start, end), u),
            "predicted_chain_saved_bytes": sum(prof.chain_saved(i, u) for i in range(start, end)),
            "input_bytes": sum(t.numel() * t.element_size() for t in xs if isinstance(t, torch.Tensor)),
            "fwd_steps": fwd}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_json")
    ap.add_argument("profile_json")
    ap.add_argument("range", help="START:END (half-open vLayer range)")
    ap.add_argument("u", type=int)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="tf32", choices=gpumem.PRECISIONS)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    s, e = (int(v) for v in a.range.split(":"))
    mj, prof = load_model_json(a.model_json), Profile.load(a.profile_json)
    out = []
    for det in (False, True):
        r = trace(mj, prof, s, e, a.u, a.device, a.precision, det)
        G = 2**30
        extra = [f for f in r["fwd_steps"] if f["delta_bytes"] > f["chain_saved_bytes"] * 1.01 + 2**20]
        print(f"{a.range} u={a.u} deterministic={det}: resident {r['resident_bytes'] / G:.2f} GiB, after the "
              f"recompute forward {r['after_recompute_forward_bytes'] / G:.2f} GiB (resident + input + chain_saved: "
              f"{(r['resident_bytes'] + r['input_bytes'] + r['predicted_chain_saved_bytes']) / G:.2f}), backward peak {r['bwd_peak_bytes'] / G:.2f} GiB, "
              f"pack rule {r['predicted_bytes'] / G:.2f} GiB; {len(extra)} vLayers hold more than chain_saved"
              + "".join(f"\n  vLayer {f['vlayer']}: +{f['delta_bytes'] / 2**20:.1f} MiB against "
                        f"{f['chain_saved_bytes'] / 2**20:.1f}" for f in extra[:8]), file=sys.stderr)
        out.append(r)
        gpumem.free_cached(torch.device(a.device))
    write_json(a.output, {"traces": out, "env": gpumem.set_precision(a.precision),
                          "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
