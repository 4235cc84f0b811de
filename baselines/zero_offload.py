"""zero-offload: DeepSpeed ZeRO-3 with parameter and optimizer offload to CPU (ZeRO-Offload / the CPU part
of ZeRO-Infinity), where DeepSpeed is installed. It is an optional extra (`pip install -e .[deepspeed]`);
DeepSpeed builds its CPU Adam with a C++ compiler at first use. Without it the run record says
`unavailable`, with the reason and the install command.

Settings (DeepSpeed's ZeRO-3 offload configuration as its documentation describes it; docs/baselines.md
cites it):
  zero_optimization: stage 3, offload_param {device: cpu, pin_memory: true},
                     offload_optimizer {device: cpu, pin_memory: true}, overlap_comm, contiguous_gradients
                     (the documented defaults otherwise);
  optimizer: the model's (AdamW -> DeepSpeed's CPU Adam in AdamW mode, same lr/betas/eps/weight decay;
             Adam likewise; SGD as a client torch optimizer: zero_force_ds_cpu_optimizer off,
             zero_allow_untested_optimizer on);
  train_batch_size D, train_micro_batch_size_per_gpu u, gradient_accumulation_steps D / (u N);
  bf16 {enabled} for --precision bf16; no gradient clipping (none of our systems clips);
  activation checkpointing per vLayer (torch.utils.checkpoint around every vLayer but the loss), not
  DeepSpeed's own `activation_checkpointing` config (which only acts on models that call
  deepspeed.checkpointing.checkpoint), so the recompute is the same as fsdp-offload's and resident's.
Start-up: the CPU Adam op is built (torch.utils.cpp_extension JIT, ninja + g++, into
$TORCH_EXTENSIONS_DIR, cached there) before deepspeed.initialize, so its time shows as its own phase; every
phase logs a timestamped line on stderr (baselines.common.log_phase).
Bytes per iteration come from the torch.profiler memcpy trace (harmony.memcpy_trace).
"""
from __future__ import annotations

import os

import torch

from baselines.common import (MicrobatchClock, RunWriter, Settings, apply_cap, apply_precision, autocast,
                              load_model, log_phase, microbatch_ranges, pin_batches, resolve_device,
                              status_only, train_loop)
from baselines.ranks import failed_ranks_record, rank_gather, spawn_ranks, use_rank_share_of_cores
from baselines.fsdp_offload import Chain, Checkpointed
from harmony.data import load_batches
from harmony.jsonio import Deferred
from harmony.optim import set_lr
from harmony.runtime.launch import free_port

INSTALL = "pip install -e .[deepspeed]"


def deepspeed_status() -> tuple[bool, str]:
    """(importable, reason)."""
    try:
        import deepspeed  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a DeepSpeed that fails at import
        return False, (f"DeepSpeed is not importable here ({type(e).__name__}: {e}); install the optional "
                       f"extra with `{INSTALL}` (DeepSpeed builds its CPU Adam with a C++ compiler at first use)")
    return True, f"deepspeed {deepspeed.__version__}"


def ds_config(spec, s: Settings, u: int) -> dict:
    o = spec.optimizer
    N = s.gpus
    if s.minibatch % (u * N):
        raise ValueError(f"zero-offload needs D = u x N x accumulation steps: D={s.minibatch}, u={u}, N={N}")
    pin = s.device == "cuda"
    cfg = {
        "train_batch_size": s.minibatch,
        "train_micro_batch_size_per_gpu": u,
        "gradient_accumulation_steps": s.minibatch // (u * N),
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "cpu", "pin_memory": pin},
            "offload_optimizer": {"device": "cpu", "pin_memory": pin},
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        "bf16": {"enabled": s.precision == "bf16"},
        "gradient_clipping": 0.0,
        "wall_clock_breakdown": False,
        "steps_per_print": 10**9,
    }
    if o.kind in ("adamw", "adam"):
        cfg["optimizer"] = {"type": "AdamW" if o.kind == "adamw" else "Adam",
                            "params": {"lr": o.lr_at(0), "betas": list(o.betas), "eps": o.eps,
                                       "weight_decay": o.weight_decay}}
    else:
        # SGD (VGG, ResNet): our client torch optimizer. DeepSpeed refuses any optimizer it has not tested
        # with ZeRO unless told (the first H100 runs of vgg416 and resnet1026 stopped on that assertion).
        cfg["zero_force_ds_cpu_optimizer"] = False
        cfg["zero_allow_untested_optimizer"] = True
    return cfg


def build_cpu_adam() -> str:
    """Build (or load from $TORCH_EXTENSIONS_DIR) DeepSpeed's CPU Adam op; what was loaded, for the log."""
    from deepspeed.accelerator import get_accelerator
    builder = get_accelerator().create_op_builder("CPUAdamBuilder")
    if builder is None:
        return "no CPUAdamBuilder for this accelerator"
    builder.load(verbose=False)
    return (f"{builder.absolute_name()} (TORCH_EXTENSIONS_DIR="
            f"{os.environ.get('TORCH_EXTENSIONS_DIR', 'default: ~/.cache/torch_extensions')})")


def _train(rank: int, s: Settings, port: int):
    log_phase("zero-offload", "importing deepspeed")
    import deepspeed
    log_phase("zero-offload", f"deepspeed {deepspeed.__version__} imported")

    N = s.gpus
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(N), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    dev = resolve_device(s.device, rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    deepspeed.init_distributed(dist_backend="nccl" if dev.type == "cuda" else "gloo")
    import torch.distributed as dist
    log_phase("zero-offload", "distributed initialised")
    spec, mj = load_model(s.model, s.overrides)
    u = s.ubatch_or_default()
    cfg = ds_config(spec, s, u)
    if "optimizer" in cfg:
        log_phase("zero-offload", "building/loading DeepSpeed's CPU Adam op")
        log_phase("zero-offload", f"CPU Adam op ready: {build_cpu_adam()}")
    s.extra.update(precision_settings=apply_precision(s.precision), memory_cap=apply_cap(dev, s.gpu_memory_cap),
                   deepspeed_config=cfg, deepspeed=deepspeed.__version__,
                   activation_checkpointing="per vLayer (all but the loss)")
    layers = list(spec.build("cpu", seed=s.seed))
    chain = Chain([Checkpointed(m) for m in layers[:-1]] + [layers[-1]])
    log_phase("zero-offload", f"model built on the CPU ({sum(p.numel() for p in chain.parameters()):,} parameters)")
    client_opt = None
    if "optimizer" not in cfg:
        from harmony.optim import make_optimizer
        client_opt = make_optimizer(list(chain.parameters()), spec.optimizer)
    engine, opt, _, _ = deepspeed.initialize(model=chain, model_parameters=list(chain.parameters()),
                                             optimizer=client_opt, config=cfg)
    log_phase("zero-offload", f"deepspeed.initialize done (ZeRO-3, offload to CPU, u={u})")
    share = s.minibatch // N
    lo = rank * share
    batches = pin_batches([tuple(t[lo:lo + share] for t in b)
                           for b in load_batches(spec, s.data, s.minibatch, s.iters, s.data_seed)], dev)
    log_phase("zero-offload", f"{len(batches)} minibatches ready; training")

    clock = MicrobatchClock([dev])

    def step(i: int, batch: tuple) -> float:
        set_lr(engine.optimizer, spec.optimizer, i)
        total = torch.zeros((), device=dev)
        for a, b in microbatch_ranges(share, u):
            x = tuple(t[a:b].to(dev, non_blocking=True) for t in batch)
            with autocast(dev, s.precision):
                (loss,) = engine(*x)
            engine.backward(loss)
            engine.step()
            total += loss.detach().float() * ((b - a) / share)
            clock.tick()
        if N > 1:
            dist.all_reduce(total)
            total /= N
        return float(total)

    import dataclasses
    mine = s if rank == 0 else dataclasses.replace(s, output=None, extra=dict(s.extra))
    return train_loop(mine, RunWriter(mine, spec.name), step, batches, devices=[dev],
                      trace_bytes_as_counters=True, gather=rank_gather(N), model_json=mj, clock=clock)


def _spawn_entry(rank: int, s: Settings, port: int):
    use_rank_share_of_cores(s.gpus)
    _train(rank, s, port)       # an exception's traceback: spawn_ranks prints it


def run(s: Settings) -> dict:
    ok, why = deepspeed_status()
    if not ok:
        spec, _ = load_model(s.model, s.overrides)
        return status_only(s, spec.name, "unavailable", why, install=INSTALL)
    # Every run is its own process, at N = 1 too. Run in the search's process, a candidate that went out
    # of memory left GPU memory DeepSpeed still held, and every smaller u after it went out of memory in
    # deepspeed.initialize's model.to(device) with 10.9 of the 11 GiB cap allocated: gpt2-xl D=256 u=4, 2
    # and 1 on one H200 (h200n1-15), though u=4 runs at D = 64 (docs/performance.md entry 116).
    port = free_port()
    from harmony.jsonio import read_jsonl
    try:
        spawn_ranks(_spawn_entry, (s, port), s.gpus)
    except Deferred:
        raise               # every rank left it for the next call (baselines/cli.py)
    except Exception as e:  # noqa: BLE001 - a rank's RankFailed, or what else a rank raised
        return failed_ranks_record(s, load_model(s.model, s.overrides)[0].name, e)
    return read_jsonl(s.output)[-1] if s.output and os.path.exists(s.output) else {"status": "ok"}
