"""ANALYTIC inputs for tests and for timing the search. Nothing here is a measurement.

- `analytic_model(name)`: shape-level model.json-like records for the four Table 1 models (bert96, gpt2-xl,
  vgg416, resnet1026) from their configurations (parameter counts, per-sample activation sizes, forward
  FLOPs by formula), flagged `"analytic": true`. Use `harmony decompose` for the real records.
- `synthetic_profile(model_json, calibration)`: a profile.json-conforming record whose times are
  FLOPs / matmul rate and whose memories are shape-derived multiples of the output size, flagged
  `"analytic": true` and `device: "analytic"`. Use `harmony profile` for measured ones.
- `synthetic_calibration(preset)`: 'paper' = the numbers the paper's scheduler assumed (harmony-notes:
  11.5 GiB/s host<->GPU shared by all GPUs, 8.2 GiB/s GPU<->GPU; ~11 TFLOP/s fp32, GTX 1080 Ti);
  'h100' = the ceilings in reference/hardware.md. CPU optimizer rates in 'paper' are assumptions.
"""
from __future__ import annotations

GiB = 2**30


def _layer(name, params, inp, out, flops, saved=None, peak=None, buffers=0, is_loss=False, dtype_in=None):
    """inp/out: lists of (shape, dtype)."""
    return {"name": name, "kind": name.split(":")[-1], "params": params, "param_bytes": 4 * params,
            "trainable_param_bytes": 4 * params, "buffers": buffers, "buffer_bytes": 4 * buffers,
            "inputs": [{"shape": list(s), "dtype": d} for s, d in inp],
            "outputs": [{"shape": list(s), "dtype": d} for s, d in out],
            "flops_fwd_per_sample": flops, "is_loss": is_loss,
            "act_saved_per_sample": saved, "act_peak_per_sample": peak}


def _finish(name, layers):
    for i, v in enumerate(layers):
        v["index"] = i
        v["name"] = f"{i}:{v['kind']}"
        v["signature"] = f"{v['kind']}:{v['params']}:{v['inputs']}"
    return {"artifact": "model", "schema_version": 1, "model": name, "analytic": True,
            "num_vlayers": len(layers), "total_params": sum(v["params"] for v in layers),
            "total_param_bytes": sum(v["param_bytes"] for v in layers),
            "total_buffer_bytes": sum(v["buffer_bytes"] for v in layers), "vlayers": layers}


def _transformer(name, n_layer, h, heads, seq, vocab, head_params, head_out, pos=512):
    f32, i64 = "float32", "int64"
    hid = ((seq, h), f32)
    lab = ((seq,), i64)
    block_p = 12 * h * h + 13 * h
    block_flops = 2 * block_p * seq + 4 * seq * seq * h
    saved = 4 * (16 * seq * h + 2 * heads * seq * seq)
    peak = 4 * (4 * seq * h + heads * seq * seq)
    L = [_layer("embed", (vocab + pos) * h + 2 * h, [((seq,), i64), lab], [hid, lab], 10 * seq * h,
                saved=4 * 2 * seq * h, peak=4 * 2 * seq * h)]
    L += [_layer("block", block_p, [hid, lab], [hid, lab], block_flops, saved=saved, peak=peak)
          for _ in range(n_layer)]
    L += [_layer("norm", 2 * h, [hid, lab], [hid, lab], 8 * seq * h, saved=4 * 2 * seq * h)]
    out = ((seq, head_out), f32)
    L += [_layer("head", head_params, [hid, lab], [out, lab], 2 * head_params * seq,
                 saved=4 * seq * head_out, peak=4 * seq * head_out)]
    L += [_layer("loss", 0, [out, lab], [((), f32)], 4 * seq * head_out, saved=4 * seq * head_out,
                 peak=8 * seq * head_out, is_loss=True)]
    return _finish(name, L)


def _conv(cin, cout, hw_out, k=3):
    p = k * k * cin * cout + cout
    return p, 2 * k * k * cin * cout * hw_out * hw_out


def _vgg416():
    f32 = "float32"
    L, c, hw = [], 3, 224
    lab = ((), "int64")
    for cout, n in zip((64, 128, 256, 512, 512), (82, 82, 83, 83, 83)):
        for j in range(n):
            p, fl = _conv(c, cout, hw)
            out_hw = hw // 2 if j == n - 1 else hw           # the stage's max-pool folded into its last conv
            out = cout * out_hw * out_hw * 4
            L.append(_layer("conv", p, [((c, hw, hw), f32), lab], [((cout, out_hw, out_hw), f32), lab], fl,
                            saved=2 * cout * hw * hw * 4 + out, peak=2 * cout * hw * hw * 4))
            c, hw = cout, out_hw
    for i, (a, b) in enumerate(((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000))):
        shape_in = (512, 7, 7) if i == 0 else (a,)
        L.append(_layer("fc", a * b + b, [(shape_in, f32), lab], [((b,), f32), lab], 2 * a * b,
                        saved=8 * b, peak=8 * b))
    L.append(_layer("loss", 0, [((1000,), f32), lab], [((), f32)], 4000, saved=8000, peak=8000, is_loss=True))
    return _finish("vgg416", L)


def _resnet1026():
    f32 = "float32"
    lab = ((), "int64")
    p, fl = _conv(3, 64, 112, k=7)
    L = [_layer("stem", p + 128, [((3, 224, 224), f32), lab], [((64, 56, 56), f32), lab], fl,
                saved=3 * 64 * 112 * 112 * 4, peak=2 * 64 * 112 * 112 * 4, buffers=128)]
    c, hw = 64, 56
    for si, cout in enumerate((64, 128, 256, 512)):
        for b in range(128):
            down = si > 0 and b == 0
            ohw = hw // 2 if down else hw
            p1, f1 = _conv(c, cout, ohw)
            p2, f2 = _conv(cout, cout, ohw)
            p = p1 + p2 + 4 * cout + ((c * cout + 2 * cout) if down else 0)
            act = cout * ohw * ohw * 4
            L.append(_layer("block", p, [((c, hw, hw), f32), lab], [((cout, ohw, ohw), f32), lab], f1 + f2,
                            saved=7 * act, peak=3 * act, buffers=4 * cout))
            c, hw = cout, ohw
    L.append(_layer("fc", 512 * 1000 + 1000, [((512, 7, 7), f32), lab], [((1000,), f32), lab], 2 * 512 * 1000,
                    saved=8000, peak=8000))
    L.append(_layer("loss", 0, [((1000,), f32), lab], [((), f32)], 4000, saved=8000, peak=8000, is_loss=True))
    return _finish("resnet1026", L)


def analytic_model(name: str) -> dict:
    """ANALYTIC shape-level record of a Table 1 model (not from `harmony decompose`)."""
    if name == "bert96":
        return _transformer("bert96", 96, 1024, 16, 512, 30522, head_params=1024 * 1024 + 1024 + 2 * 1024 + 2,
                            head_out=2)
    if name == "gpt2-xl":
        return _transformer("gpt2-xl", 48, 1600, 25, 1024, 50257, head_params=50257 * 1600, head_out=50257,
                            pos=1024)
    if name == "vgg416":
        return _vgg416()
    if name == "resnet1026":
        return _resnet1026()
    raise KeyError(f"no analytic record for {name!r}: bert96, gpt2-xl, vgg416, resnet1026")


def synthetic_calibration(preset: str = "paper") -> dict:
    """ASSUMED bandwidths/rates (see module docstring); never a measurement of this machine."""
    if preset == "paper":
        bw, p2p = 11.5 * GiB, 8.2 * GiB
        return {"artifact": "calibration", "schema_version": 1, "device": "analytic:paper-gtx1080ti",
                "analytic": True, "h2d_pinned_Bps": bw, "d2h_pinned_Bps": bw, "duplex_pinned_Bps": 2 * bw,
                "host_link": "shared", "host_memcpy_Bps": 16 * GiB,
                "p2p_Bps": [[None if i == j else p2p for j in range(8)] for i in range(8)],
                "matmul_flops": {"fp32": 11e12, "tf32": 11e12, "bf16": 11e12},
                "cpu_adam_params_per_s": 1e9, "cpu_sgd_params_per_s": 2e9, "gpu_count": 8}
    if preset == "h100":
        return {"artifact": "calibration", "schema_version": 1, "device": "analytic:hardware.md-h100",
                "analytic": True, "h2d_pinned_Bps": 55.0e9, "d2h_pinned_Bps": 55.1e9,
                "duplex_pinned_Bps": 90.7e9, "host_link": "per-gpu", "p2p_Bps": [],
                "matmul_flops": {"fp32": 52e12, "tf32": 409e12, "bf16": 792e12},
                "cpu_adam_params_per_s": 4.96e9, "cpu_sgd_params_per_s": 4.96e9, "gpu_count": 1}
    raise KeyError(f"unknown calibration preset {preset!r}: paper or h100")


def _spec_bytes(specs) -> int:
    from harmony.schedule.tasks import _spec_bytes as sb
    return sum(sb(s) for s in specs)


def synthetic_profile(model_json: dict, calibration: dict, ubatch_sizes=(1, 2, 4, 8, 16, 32),
                      precision: str = "fp32", efficiency: float = 0.6, launch_s: float = 50e-6) -> dict:
    """ANALYTIC profile.json record: fwd = FLOPs / (efficiency x matmul rate) + launch overhead,
    bwd (recompute + backward) = 3 x fwd; memories from per-sample activation sizes."""
    raw = calibration.raw if hasattr(calibration, "raw") else calibration
    rate = raw["matmul_flops"][precision] * efficiency
    opt_rate = raw.get("cpu_adam_params_per_s") or 1e9
    vls = []
    for v in model_json["vlayers"]:
        out_b = _spec_bytes(v["outputs"])
        in_b = _spec_bytes(v["inputs"])
        saved = v.get("act_saved_per_sample") or 4 * max(out_b, 1)
        peak = v.get("act_peak_per_sample") or 2 * max(out_b, 1)
        fl = v.get("flops_fwd_per_sample") or 0.0
        fwd = [launch_s + u * fl / rate for u in ubatch_sizes]
        vls.append({
            "index": v["index"], "kind": v["kind"], "signature": v.get("signature", ""),
            "profiled_as": v["index"], "weight_bytes": v["param_bytes"], "buffer_bytes": v["buffer_bytes"],
            "grad_bytes": v.get("trainable_param_bytes", v["param_bytes"]),
            "optim_bytes": 2 * v["param_bytes"], "params": v.get("params", v["param_bytes"] // 4),
            "input_bytes_per_sample": in_b, "output_bytes_per_sample": out_b, "flops_fwd_per_sample": fl,
            "opt_step_s": v.get("params", v["param_bytes"] // 4) / opt_rate,
            "fwd_s": fwd, "fwd_spread": [[f, f] for f in fwd],
            "bwd_s": [3 * f for f in fwd], "bwd_spread": [[3 * f, 3 * f] for f in fwd],
            "fwd_peak_bytes": [u * peak for u in ubatch_sizes],
            "saved_bytes": [u * saved for u in ubatch_sizes],
            "bwd_peak_bytes": [u * (saved + peak) for u in ubatch_sizes],
            "measured": [False] * len(ubatch_sizes)})
    return {"artifact": "profile", "schema_version": 1, "analytic": True, "model": model_json["model"],
            "device": "analytic", "gpu": None, "precision": precision, "gpu_memory_cap": None,
            "optimizer": model_json.get("optimizer"), "threads": None,
            "ubatch_sizes": list(ubatch_sizes), "vlayers": vls}
