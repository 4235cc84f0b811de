"""Host memory of a schedule: the bytes of the host arena that `harmony run` allocates for it, computed from
the task graph and the model record alone (no nn.Modules), so the search can check every candidate.

The arena (harmony/runtime/host_store.py, `plan_layout`) holds, every entry 64-byte aligned:
  flags  int64[number of backward packs] + int64[number of tasks]
  W      every parameter and buffer                      (model.json: param_bytes + buffer_bytes)
  dW     every trainable parameter                       (trainable_param_bytes)
  K      `state_tensors_per_param` copies of each trainable parameter (the model's optimizer: AdamW/Adam 2,
         SGD with momentum 1, plain SGD 0)
  X      stash regions (`plan_stash`): each FWD task with stash_out parks its outputs, [samples, *per-sample
         shape] per output tensor, until the BWD that consumes it. Harmony's stashes all overlap (every FWD
         precedes every BWD), so X = D x the boundary activations of every stash point: fewer, larger
         backward packs need less host memory.

`plan_stash` and the flag sizes are shared with plan_layout, so flags and X are exact. W, dW and K come
from the model record's per-vLayer byte totals; plan_layout aligns each tensor to 64 bytes, which the
record cannot see: `arena_bytes` is below plan_layout's total_bytes by that padding only (< 64 bytes per
parameter or buffer tensor and copy; 0 for GPT-2, 32 B for vgg416, 56 KiB for resnet1026's 6170 tensors).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

ALIGN = 64


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@lru_cache(maxsize=None)
def itemsize(dtype: str) -> int:
    import torch
    return getattr(torch, dtype).itemsize


@dataclass(frozen=True)
class Entry:
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * itemsize(self.dtype)


# Host memory each process of a run takes beside the arena: the launcher and every worker (torch, the CUDA
# context, the model's layers, the data). Measured on 52 runs of 2x H200 (results/paper/2xH200, host PSS less
# the arena; launcher + two workers): 2.64-16.5 GiB, median 3.6 GiB, so about 1.2 GiB per process, up to 5.5.
# PSS leaves out each process's page tables for the arena it maps whole (the launcher prefaults it, the
# workers pin it): one 8-byte entry per 4 KiB page, 0.5 GiB per process for a 244 GiB arena. Without either
# the runtime admitted swap-dp vgg416 D = 256 u = 64 (arena 244 GiB of the host's 249 available) and the kernel
# killed worker 0 (exit -9) after a minute of set-up (x2-grid20, docs/performance.md entry 60).
HOST_RESERVE_PER_PROCESS_BYTES = 2 * 2**30
PAGE_TABLE_BYTES_PER_BYTE = 8 / 4096


def process_reserve_bytes(gpus: int, arena_bytes: int = 0) -> int:
    """Host memory held back beside an arena of `arena_bytes` for the processes of an N-GPU run (N workers
    and the launcher): what `check_fits` (the runtime) adds to the arena, and `arena_budget` takes off."""
    n = gpus + 1
    return n * HOST_RESERVE_PER_PROCESS_BYTES + int(n * arena_bytes * PAGE_TABLE_BYTES_PER_BYTE)


def arena_budget(host_bytes: int, gpus: int) -> int:
    """The largest arena an N-GPU run can have in `host_bytes` of host memory, its processes' reserve
    (`process_reserve_bytes`) included: `harmony schedule`'s host budget."""
    n = gpus + 1
    return max(0, int((host_bytes - n * HOST_RESERVE_PER_PROCESS_BYTES) / (1 + n * PAGE_TABLE_BYTES_PER_BYTE)))


def flag_shapes(graph) -> tuple[tuple[int], tuple[int]]:
    """Shapes of the arena's two int64 flag arrays: upd_done (one per backward pack), stash_done (per task)."""
    return (len(graph.config.bwd_packs),), (len(graph.tasks),)


def plan_stash(graph, model_json: dict) -> tuple[dict[int, int], list[int], dict[int, list[Entry]]]:
    """Stash regions: (FWD task id -> region, bytes of each region, FWD task id -> its entries relative to
    the region's start). A stash lives from its FWD (D2H write) to the BWD that consumes it (H2D read).

    A later stash B reuses the region of an earlier stash A only when both are rank-local (producer and
    consumer on the same rank), on the same rank, and A's consumer comes before B's producer in task
    order. That is safe because a rank runs its tasks in that order every iteration and its streams order
    them: A's H2D read completes before its BWD computes (compute waits on the copy's event), B's FWD
    computes after that BWD, and B's D2H write waits for B's FWD; B's read waits on B's write (the stash
    event). Nothing orders accesses across ranks, so a stash read or written by another rank keeps its own
    region. swap-dp (microbatch by microbatch) thus holds one microbatch's stashes per rank, not the
    minibatch's; Harmony's stashes all overlap (every FWD precedes every BWD), so nothing is shared."""
    vls = model_json["vlayers"]
    consumer = {t.act_in[1]: t for t in graph.tasks if t.kind == "BWD" and t.act_in[0] == "stash"}
    local: dict[int, list[Entry]] = {}
    extent: dict[int, int] = {}
    for t in graph.tasks:                      # each stash's outputs laid out from its region's start
        if t.kind == "FWD" and t.stash_out:
            local[t.id], off = [], 0
            for o in vls[t.pack[1] - 1]["outputs"]:
                e = Entry(off, (t.num_samples, *(int(s) for s in o["shape"])), o["dtype"])
                local[t.id].append(e)
                off += aligned(e.nbytes)
            extent[t.id] = off
    region_of: dict[int, int] = {}
    region_bytes: list[int] = []
    free: dict[int, list[int]] = {}            # rank -> regions whose occupant's consumer has run
    for t in graph.tasks:                      # greedy in task order
        if t.id in local:
            c = consumer.get(t.id)
            pool = free.setdefault(t.rank, []) if c is not None and c.rank == t.rank else []
            if pool:   # best fit: the smallest free region that holds it, else the largest (grown)
                fits = [r for r in pool if region_bytes[r] >= extent[t.id]]
                r = min(fits, key=region_bytes.__getitem__) if fits else max(pool, key=region_bytes.__getitem__)
                pool.remove(r)
                region_bytes[r] = max(region_bytes[r], extent[t.id])
            else:
                r = len(region_bytes)
                region_bytes.append(extent[t.id])
            region_of[t.id] = r
        if t.kind == "BWD" and t.act_in[0] == "stash" and graph.tasks[t.act_in[1]].rank == t.rank:
            free[t.rank].append(region_of[t.act_in[1]])     # free for stashes produced after its consumer
    return region_of, region_bytes, local


def state_tensors_per_param(model_json: dict) -> int:
    """Optimizer state tensors per trainable parameter, from the model record's optimizer (the one the
    runtime builds: harmony.optim.OptimizerConfig; AdamW when the record names none)."""
    from harmony.optim import OptimizerConfig
    rec = model_json.get("optimizer") or {}
    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in rec.items() if k in names}
    return OptimizerConfig(**kw).state_tensors_per_param()


@dataclass(frozen=True)
class HostBytes:
    """Bytes of a schedule's host arena by part (flags and X with their alignment; W, dW, K as recorded)."""
    flags: int
    W: int
    dW: int
    K: int
    X: int

    @property
    def total(self) -> int:
        return self.flags + self.W + self.dW + self.K + self.X

    def to_json(self) -> dict:
        return {"total": self.total, "flags": self.flags, "W": self.W, "dW": self.dW, "K": self.K, "X": self.X}


class HostMemoryModel:
    """The arena bytes of any task graph of one model: the weight parts once, flags and X per graph."""

    def __init__(self, model_json: dict, state_per_param: int | None = None):
        self.model_json = model_json
        self.state_per_param = state_tensors_per_param(model_json) if state_per_param is None else state_per_param
        vls = model_json["vlayers"]
        self.W = sum(int(v["param_bytes"]) + int(v.get("buffer_bytes") or 0) for v in vls)
        self.dW = sum(int(v.get("trainable_param_bytes", v["param_bytes"])) for v in vls)
        self.K = self.state_per_param * self.dW

    def need(self, graph) -> HostBytes:
        flags = sum(aligned(8 * n) for (n,) in flag_shapes(graph))
        _, region_bytes, _ = plan_stash(graph, self.model_json)
        return HostBytes(flags, self.W, self.dW, self.K, sum(region_bytes))


def arena_bytes(graph, model_json: dict, state_per_param: int | None = None) -> HostBytes:
    """The host arena `harmony run` allocates for this graph (see the module docstring for the precision)."""
    return HostMemoryModel(model_json, state_per_param).need(graph)


def run_host_need(graph, model_json: dict) -> int:
    """Host memory a run of this graph asks for: its arena and its processes' reserve, as the runtime's
    `check_fits` counts them (below it by the arena's alignment padding only)."""
    arena = arena_bytes(graph, model_json).total
    return arena + process_reserve_bytes(graph.config.gpus, arena)
