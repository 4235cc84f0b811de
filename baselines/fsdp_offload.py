"""fsdp-offload: PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`) with `CPUOffloadPolicy`: what a
PyTorch user reaches for today to train a model larger than the GPU.

Settings (the FSDP2 documentation's recommended use; docs/baselines.md cites it):
  - torch.distributed initialised even for N = 1 (NCCL on CUDA, gloo on the CPU); a 1-D DeviceMesh of N.
  - `fully_shard` bottom-up: every vLayer with parameters is its own FSDP unit (one all-gather /
    reduce-scatter group per vLayer), then the root; `reshard_after_forward` left at its default (True for
    the vLayers, False for the root).
  - `CPUOffloadPolicy(pin_memory=True)` on CUDA (False on the CPU, where pinning needs an accelerator):
    sharded parameters, gradients and optimizer state live in host memory; parameters are copied
    host-to-device before each unit's all-gather, gradients device-to-host after its reduce-scatter, and
    the optimizer steps on the CPU.
  - Optimizer: the model's optimizer from harmony.optim (fused CPU AdamW for GPT-2), created after
    sharding, over the sharded (DTensor) parameters. DTensor has a sharding rule for fused Adam/AdamW
    but none for fused SGD (`aten._fused_sgd_`, torch 2.11-2.13), so for SGD (the CNNs) the same fused
    SGD steps the local shards of the DTensor parameters and gradients instead (`LocalShardOptimizer`):
    elementwise, so identical to stepping the DTensors, and bit-for-bit harmony.optim's SGD (foreach or
    single-tensor SGD differ from fused SGD in the last bit).
  - Activation checkpointing per vLayer (all but the loss), applied inside each FSDP unit
    (torch.utils.checkpoint, non-reentrant), as torchtitan does with its per-block wrapper.
  - Microbatches of `--ubatch` with gradient accumulation to reach D: each microbatch's backward
    reduce-scatters (and so offloads) its gradients; FSDP2 then accumulates them in the sharded CPU
    gradient. Gradient sync is left on for every microbatch (the default): turning it off would keep
    unsharded gradients of the whole model on the GPU, which is what the cap forbids.
  - Precision: fp32/tf32 as the matmul flags; bf16 with `MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32)`.
N > 1: one process per GPU (torch.multiprocessing), each on D/N samples; rank 0 writes the record.
Bytes per iteration come from the torch.profiler memcpy trace (harmony.memcpy_trace), summed over ranks.
"""
from __future__ import annotations

import os
import sys
import traceback

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from baselines.common import (MicrobatchClock, RunWriter, Settings, accumulate_microbatches, apply_cap,
                              apply_precision, is_oom, load_model, pin_batches, resolve_device, status_only,
                              train_loop)
from baselines.ranks import failed_ranks_record, rank_gather, spawn_ranks, use_rank_share_of_cores
from harmony.data import load_batches
from harmony.jsonio import Deferred
from harmony.optim import make_optimizer, set_lr
from harmony.runtime.launch import free_port


class Checkpointed(nn.Module):
    """One vLayer under activation checkpointing (keeps only its inputs; recomputes in backward)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *x):
        if torch.is_grad_enabled():
            return checkpoint(self.inner, *x, use_reentrant=False)
        return self.inner(*x)


class Chain(nn.Module):
    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, *x):
        for layer in self.layers:
            x = layer(*x)
        return x


class LocalShardOptimizer:
    """harmony.optim's optimizer over the local shards of DTensor parameters (for optimizers whose fused
    op DTensor cannot dispatch: SGD). Each step re-aliases a plain leaf tensor to every parameter's local
    shard and its gradient's local shard (no copies), then steps the fused optimizer on those; the
    optimizer state (momentum) is keyed by the leaf tensors, which live as long as this object."""

    def __init__(self, params: list, cfg):
        self.params = list(params)
        self.shadows = [nn.Parameter(_local(p).detach(), requires_grad=p.requires_grad) for p in self.params]
        self.inner = make_optimizer(self.shadows, cfg)

    @property
    def param_groups(self):
        return self.inner.param_groups

    @property
    def state(self):
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        for sh in self.shadows:
            sh.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, sh in zip(self.params, self.shadows):
            local = _local(p)
            if sh.data_ptr() != local.data_ptr() or sh.shape != local.shape:
                sh.data = local            # FSDP2 re-saved the shard (lazy init): alias the new storage
            sh.grad = None if p.grad is None else _local(p.grad).detach()
        self.inner.step()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def fsdp_optimizer(params: list, cfg):
    """The model's optimizer over FSDP2's DTensor parameters: as is where DTensor runs its fused kernel
    (Adam, AdamW), on the local shards for SGD."""
    if cfg.kind == "sgd":
        return LocalShardOptimizer(params, cfg)
    return make_optimizer(params, cfg)


def build_fsdp(spec, s: Settings, dev: torch.device, mesh) -> Chain:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    layers = list(spec.build("cpu", seed=s.seed))
    chain = Chain([Checkpointed(m) for m in layers[:-1]] + [layers[-1]])
    chain.train()
    kw = {"mesh": mesh, "offload_policy": CPUOffloadPolicy(pin_memory=dev.type == "cuda")}
    if s.precision == "bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for m in chain.layers:
        if any(True for _ in m.parameters()):
            fully_shard(m, **kw)
    fully_shard(chain, **kw)
    return chain


def _worker(rank: int, s: Settings, port: int, result: dict | None = None) -> dict | None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    N = s.gpus
    dev = resolve_device(s.device, rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=N)
    try:
        summary = _train(rank, s, dev, init_device_mesh(dev.type, (N,)), result)
    except BaseException:
        if N == 1:      # a spawned rank ends without teardown: a peer may wait in a collective (_rank_main)
            dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    return summary


def _train(rank: int, s: Settings, dev: torch.device, mesh, result: dict | None):
    import torch.distributed as dist

    N = s.gpus
    spec, mj = load_model(s.model, s.overrides)
    s.extra.update(precision_settings=apply_precision(s.precision), memory_cap=apply_cap(dev, s.gpu_memory_cap),
                   fsdp="fully_shard per vLayer + root, CPUOffloadPolicy(pin_memory=%s)" % (dev.type == "cuda"),
                   activation_checkpointing="per vLayer (all but the loss)",
                   optimizer=f"{spec.optimizer.kind}, fused, CPU (sharded DTensor parameters"
                   + ("; SGD on their local shards)" if spec.optimizer.kind == "sgd" else ")"),
                   gradient_sync="every microbatch (FSDP2 default)")
    writer = RunWriter(s if rank == 0 else _silent(s), spec.name)
    try:
        model = build_fsdp(spec, s, dev, mesh)
        opt = fsdp_optimizer([p for p in model.parameters() if p.requires_grad], spec.optimizer)
    except Exception as e:  # noqa: BLE001
        if is_oom(e) and N == 1:     # a spawned rank's OOM is recorded by the parent, whichever rank has it
            return status_only(s, spec.name, "oom", str(e).splitlines()[0])
        raise
    share = s.minibatch // N
    lo = rank * share
    u = min(s.ubatch_or_default(), share)
    batches = [tuple(t[lo:lo + share] for t in b)
               for b in load_batches(spec, s.data, s.minibatch, s.iters, s.data_seed)]
    batches = pin_batches(batches, dev)

    clock = MicrobatchClock([dev])

    def step(i: int, batch: tuple) -> float:
        set_lr(opt, spec.optimizer, i)
        opt.zero_grad(set_to_none=True)
        total = accumulate_microbatches(lambda x: model(*x), batch, share, u, dev, s.precision, clock)
        opt.step()
        if N > 1:
            dist.all_reduce(total)
            total /= N
        return float(total)

    summary = train_loop(s if rank == 0 else _silent(s), writer, step, batches, devices=[dev],
                         trace_bytes_as_counters=True, gather=rank_gather(N), model_json=mj,
                         clock=clock)
    if result is not None:
        # tests: the trained parameters (full tensors) and losses
        params = [p.full_tensor().detach().cpu().clone() if hasattr(p, "full_tensor") else p.detach().cpu()
                  for p in model.parameters()]
        if rank == 0:
            result.update(params=params, losses=[it.loss for it in writer.iterations], summary=summary)
    return summary if rank == 0 else None


def _silent(s: Settings) -> Settings:
    import dataclasses
    return dataclasses.replace(s, output=None, extra=dict(s.extra))


def _spawn_entry(rank: int, s: Settings, port: int, path: str | None):
    use_rank_share_of_cores(s.gpus)
    out: dict = {}
    _worker(rank, s, port, out if path else None)     # an exception's traceback: spawn_ranks prints it
    if path and rank == 0:
        torch.save({"params": out.get("params"), "losses": out.get("losses")}, path)


def run(s: Settings, _result: dict | None = None) -> dict:
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard  # noqa: F401
    except ImportError as e:
        spec, _ = load_model(s.model, s.overrides)
        return status_only(s, spec.name, "unavailable", f"FSDP2 is not in this torch ({torch.__version__}): {e}")
    if s.device == "cuda" and torch.cuda.is_available() and torch.cuda.device_count() < s.gpus:
        raise ValueError(f"--gpus {s.gpus} but only {torch.cuda.device_count()} CUDA devices are visible")
    port = free_port()
    if s.gpus == 1:
        try:
            return _worker(0, s, port, _result)
        except Deferred:
            raise           # baselines/cli.py leaves it for the next call
        except Exception as e:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            spec, _ = load_model(s.model, s.overrides)
            return status_only(s, spec.name, "oom" if is_oom(e) else "error", f"{type(e).__name__}: {e}")
    import tempfile
    from harmony.jsonio import read_jsonl
    path = None
    if _result is not None:
        fd, path = tempfile.mkstemp(suffix=".pt")
        os.close(fd)
    try:
        spawn_ranks(_spawn_entry, (s, port, path), s.gpus)
    except Deferred:
        raise               # every rank left it for the next call (baselines/cli.py)
    except Exception as e:  # noqa: BLE001 - a rank's RankFailed, or what else a rank raised
        return failed_ranks_record(s, load_model(s.model, s.overrides)[0].name, e)
    if path:
        _result.update(torch.load(path))
        os.unlink(path)
    if s.output and os.path.exists(s.output):
        return read_jsonl(s.output)[-1]
    return {"status": "ok"}
