"""The offloading baselines against plain PyTorch on a GPU (run through the device tool; skipped without CUDA).

On the CPU, tests/test_baselines.py checks resident, swap-dp, swap-pp and fsdp-offload against the same
reference. zero-offload needs DeepSpeed, whose ZeRO-3 offload runs only on a GPU, so nothing checked it
until this file; fsdp-offload and resident run here too, on the same GPU, as the yardstick of what a GPU
run differs from the CPU reference by.

Each case is `harmony baseline SYSTEM mlp-tiny --device cuda --precision fp32` in its own process (DeepSpeed
initialises torch.distributed once per process), on a model without dropout (the GPU's dropout masks are
not the CPU's) and with AdamW (DeepSpeed's CPU Adam for zero-offload, the fused CPU AdamW for
fsdp-offload, the device's for resident). Its per-iteration losses are compared with
harmony.reference.train_reference on the CPU: the losses after the first iteration move only if the
optimizer steps did the same, so three iterations check the update as well as the forward.
Tolerance: 1e-4 relative (GPU against CPU kernels in fp32, TF32 off, and a different Adam
implementation's rounding), and a run must have status ok.

    python -m pytest -q tests/test_baselines_gpu.py        # on a GPU machine with DeepSpeed importable
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from baselines.common import load_model
from harmony.data import load_batches
from harmony.jsonio import read_jsonl
from harmony.reference import train_reference

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

D, ITERS, TOL = 8, 3, 1e-4
MODEL = "mlp-tiny"     # AdamW at lr 1e-3: one missed step moves the next loss by 6.5e-3 (gpt2-tiny's lr 5e-5 by
                       # 3.8e-5, under the tolerance, so it could not tell a step from none)
CASES = ([(system, u, 1) for system in ("resident", "fsdp-offload", "zero-offload") for u in (D, D // 2)]
         + [(system, D // 4, 2) for system in ("fsdp-offload", "zero-offload")])    # data parallel: D/2 per GPU


def reference_losses(lr: float | None = None) -> list[float]:
    """train_reference's losses for MODEL (with its optimizer's learning rate set to `lr`, if given)."""
    import copy
    import dataclasses
    spec, _ = load_model(MODEL)
    if lr is not None:
        spec = copy.copy(spec)
        spec.optimizer = dataclasses.replace(spec.optimizer, lr=lr)
    losses, _ = train_reference(spec, load_batches(spec, "synthetic", D, ITERS))
    return losses


def test_the_comparison_can_tell_a_step_from_none():
    """Runs on the CPU too: without the optimizer's steps the reference's later losses move by far more than
    the tolerance, so a baseline that dropped or botched its update cannot pass the test below."""
    ref, still = reference_losses(), reference_losses(lr=0.0)
    assert min(abs(a - b) / abs(a) for a, b in zip(ref[1:], still[1:])) > 10 * TOL


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("system, u, gpus", CASES)
def test_baseline_trains_like_pytorch_on_the_gpu(system, u, gpus, tmp_path):
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    if system == "zero-offload" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not importable here (experiments/device/fetch_wheels.sh, carried as .whl)")
    out = tmp_path / "run.jsonl"
    p = subprocess.run([sys.executable, "-m", "harmony.cli", "baseline", system, MODEL, "--minibatch", str(D),
                        "--ubatch", str(u), "--gpus", str(gpus), "--iters", str(ITERS), "--device", "cuda",
                        "--precision", "fp32", "--no-memcpy-trace", "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    records = read_jsonl(out)
    summary = records[-1]
    assert summary["status"] == "ok", summary.get("message")
    losses = [r["loss"] for r in records if r.get("record") == "iteration"]
    assert losses == pytest.approx(reference_losses(), rel=TOL), (system, u, gpus, losses)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("system", ["fsdp-offload", "zero-offload"])
def test_one_ranks_oom_ends_a_two_gpu_run_as_oom(system, tmp_path):
    """On NCCL a rank that fails mid-step leaves its peer waiting in a collective for ever; the run must end
    as an oom record within seconds instead (docs/performance.md entry 64: zero-offload gpt2-xl D=256 u=4
    sat silent for the rest of x2-grid34). Rank 1's third backward (iteration 1's first microbatch) raises
    the OOM, from tests/inject/sitecustomize.py on the ranks' PYTHONPATH."""
    import os
    import time
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    if system == "zero-offload" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not importable here (experiments/device/fetch_wheels.sh, carried as .whl)")
    tests = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([os.path.join(tests, "inject"), os.path.dirname(tests), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, FAIL_RANK="1", FAIL_AT_BACKWARD="3")
    out = tmp_path / "run.jsonl"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "harmony.cli", "baseline", system, MODEL, "--minibatch", str(D),
                        "--ubatch", str(D // 4), "--gpus", "2", "--iters", "4", "--device", "cuda",
                        "--precision", "fp32", "--no-memcpy-trace", "-o", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    summary = read_jsonl(out)[-1]
    assert summary["status"] == "oom", (summary.get("message"), p.stderr[-3000:])
    assert summary["message"].startswith("rank 1, iteration 1: CUDA out of memory"), summary["message"]
    print(f"{system}: oom recorded {time.monotonic() - t0:.1f} s after the start (set-up included)")


@pytest.mark.gpu
@needs_cuda
def test_zero_offload_runs_a_smaller_u_after_a_candidate_went_out_of_memory(tmp_path):
    """A microbatch search that starts where zero-offload goes out of memory must still run the smaller u
    that fits. Run in the search's process, the OOM left DeepSpeed's GPU memory held and every smaller u
    went out of memory at deepspeed.initialize (gpt2-xl D=256 u=4, 2 and 1 on one H200, h200n1-15;
    docs/performance.md entry 116). gpt2-medium's weights (1.6 GB) fit a 3 GiB cap at u = 1; u = 16's
    activations and recomputed attention do not."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not importable here (experiments/device/fetch_wheels.sh, carried as .whl)")
    out = tmp_path / "search.jsonl"
    p = subprocess.run([sys.executable, "-m", "harmony.cli", "baseline", "zero-offload", "gpt2-medium",
                        "--minibatch", "16", "--ubatch", "1,16", "--ubatch-start", "16", "--gpu-memory", "6GiB",
                        "--iters", "2", "--device", "cuda", "--no-memcpy-trace", "-o", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    search = {c["ubatch"]: c for c in read_jsonl(out)[-1]["ubatch_search"]}
    assert search[16]["status"] == "oom", search[16]        # the case: the first candidate goes out of memory
    assert search[1]["status"] == "ok", (search[1]["message"], p.stderr[-3000:])
