"""One worker process per GPU (or per CPU "device"): executes its rank's tasks of the task graph, in global
order, every iteration.

Per compute task (FWD/BWD) the worker
  1. makes the task's weights resident: the layers in `load_layers` were prefetched from the arena on the
     host->device copy stream while the previous task computed (two weight sets live at most: the current
     task's and the next one's); the rest of the pack was kept by the previous task (`keep_layers`);
  2. gets its input: the minibatch slice (H2D), the producer's output (same rank: the tensor itself;
     other rank: torch.distributed recv), or its stash (H2D from the arena, written by the producing FWD);
  3. runs all its microbatches back to back: FWD without autograd at u_fwd; BWD recomputes its pack at
     u_bwd from the input and back-propagates (the loss pack weights its microbatch i by u_i/D);
     layers with dropout get a per-(iteration, layer, first sample) seed, so recompute replays the
     forward's masks;
  4. ships its results: outputs to the consumer's rank, stash to the arena (D2H, async), input
     gradients to the previous BWD's rank; accumulated weight gradients are all-reduced (vDP) and leave
     for the arena once (D2H), where the pack's UPD (a CPU thread) updates W as soon as they land;
  5. issues the prefetch of the next task's weights (and stash) and releases the layers it does not keep.
A layer's weights for iteration k+1 are loaded only after the UPD of its pack in iteration k published
`upd_done`. Every wait on another process has a timeout, so a dead peer ends the run instead of hanging it.
"""
from __future__ import annotations

import faulthandler
import hashlib
import os
import signal
import time
import traceback
from collections import Counter, deque
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from harmony.gpu_clocks import DeviceClocks
from harmony.gpumem import MemoryMeter, alloc_retries, autocast, reserved_by_stream, set_deterministic
from harmony.jsonio import outlasts_deadline, seconds_left
from harmony.metrics import PhaseClock
from harmony.models.base import channels_last_only, to_channels_last
from harmony.runtime.gc_clock import GC_CLOCK
from harmony.runtime.host_store import HostArena, layer_slots
from harmony.runtime.launch import print_stacks_on_sigterm
from harmony.runtime.optim import COALESCE_BELOW, PackUpdater
from harmony.runtime.p2p import Channels, LocalInput, StreamedInput, channels_last_model, crossing_format, tag, to_wire
from harmony.runtime.task_clock import TaskClock
from harmony.runtime.transfer import (DEFAULT_WEIGHT_COPIES, BlockViews, Copier, Counters, StashInput,
                                      check_allreduce, check_weight_copies, host_view, wait_marks)
from harmony.schedule.tasks import DEFAULT_ALLREDUCE, DEFAULT_RECEIVE_MODE


def dropout_seed(seed: int, iteration: int, layer: int, first_sample: int) -> int:
    """The RNG seed of vLayer `layer` on the microbatch starting at global sample `first_sample`."""
    h = hashlib.blake2b(f"{seed}:{iteration}:{layer}:{first_sample}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def seed_dropout(device: torch.device, seed: int) -> None:
    """Seed the one generator that dropout on `device` draws from (its default generator), so a
    recompute replays the forward's masks. Not torch.manual_seed: that seeds every backend, and for each
    one not initialised (XPU and MTIA on a GPU host, CUDA too on the CPU) it queues the call with a
    formatted stack trace, which reads the source lines of every frame: 0.3 ms per call on the CPU under
    the worker's stack, and a call per stochastic vLayer and microbatch, twice with the recompute
    (docs/performance.md entry 61)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def is_stochastic(layer: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in layer.modules())


def is_batch_dependent(layer: nn.Module) -> bool:
    """The forward of one sample depends on the others of its microbatch (BatchNorm in training)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in layer.modules())


_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


ORDERED_REDUCE_CHUNK = 1 << 22      # elements gathered at once: N x 16 MiB of fp32 beside the gradients


def sum_in_rank_order(flat: torch.Tensor, world: int, chunk: int = ORDERED_REDUCE_CHUNK) -> None:
    """In place, on every rank: flat = ((flat_0 + flat_1) + flat_2) + ... over the ranks, in rank order: the
    association plain PyTorch's `train_in_order` sums rank shares with. A chunk at a time (all-gather, then
    the additions), so that it needs `world` chunks of memory, not `world` copies of the gradients."""
    buffers = [torch.empty(min(chunk, flat.numel()), dtype=flat.dtype, device=flat.device) for _ in range(world)]
    for start in range(0, flat.numel(), chunk):
        part = flat[start:start + chunk]
        gathered = [b[:part.numel()] for b in buffers]      # the last chunk may be shorter
        dist.all_gather(gathered, part)
        total = gathered[0]
        for other in gathered[1:]:
            total += other                 # left fold: rank 0 + rank 1, then + rank 2, ...
        part.copy_(total)


@dataclass(frozen=True)
class LoadSegment:
    """vLayers [start, stop) whose W blocks one copy brings to the device (Worker._load_segments): `block`,
    their host bytes; `views`, per vLayer its BlockViews and the byte of `block` where its W block starts;
    `nbytes`, the tensors' own bytes (what the counters record)."""
    start: int
    stop: int
    block: torch.Tensor
    views: list
    nbytes: int


@dataclass(frozen=True)
class GradSpan:
    """A backward pack's dW range in the arena (Worker._grad_span): `host`, its bytes; `dtype`, its
    gradients' one dtype; `offsets`, each gradient's offset in elements of it, in grad_slots order."""
    host: torch.Tensor
    dtype: torch.dtype
    offsets: list[int]


class TaskFailure(RuntimeError):
    def __init__(self, info: dict):
        super().__init__(info.get("message", "task failed"))
        self.info = info


class Worker:
    def __init__(self, rank: int, job: dict, results):
        self.rank, self.job, self.results = rank, job, results
        self.timeout = float(job.get("timeout_s", 300))

    # ------------------------------------------------------------------------------------------
    # setup
    # ------------------------------------------------------------------------------------------
    def setup(self):
        from harmony.decompose import spec_from_model_json
        from harmony.data import load_batches
        from harmony.gpumem import apply_memory_cap, set_precision
        from harmony.runtime.host_store import ArenaLayout  # noqa: F401 (pickled layout type)
        from harmony.schedule.tasks import TaskGraph

        job = self.job
        clock = PhaseClock()
        if getattr(self, "process_group_s", None) is not None:
            clock.phases["process_group"] = self.process_group_s   # worker_main, before this job
        self.graph = TaskGraph.from_json(job["graph"])
        self.cfg = self.graph.config
        self.N = self.cfg.gpus
        dev = job["device"]
        if dev == "cuda":
            torch.cuda.set_device(self.rank)
            self.device = torch.device("cuda", self.rank)
        else:
            self.device = torch.device("cpu")
        from harmony.runtime import default_worker_threads
        torch.set_num_threads(job.get("threads_per_worker") or default_worker_threads(self.N))
        self.precision = job["precision"]
        set_precision(self.precision)
        self.ordered_reduce = bool(job.get("ordered_reduce"))     # harmony run --ordered-reduce
        self.allreduce_mode = check_allreduce(job.get("allreduce", DEFAULT_ALLREDUCE))   # harmony run --allreduce
        if job.get("deterministic") and self.device.type == "cuda":
            set_deterministic(strict=True)      # harmony run --deterministic
        elif os.environ.get("HARMONY_DETERMINISTIC") and self.device.type == "cuda":
            set_deterministic()       # GPU tests: the same kernels as the reference in the test process
        self.cap_record = apply_memory_cap(self.device, job.get("gpu_memory_cap"))
        clock.lap("device")              # CUDA context, precision, memory cap
        self.ctrl = _CTRL.get("group")
        self.spec = spec_from_model_json(job["model"])
        # keep_layout (the default; harmony run --no-keep-layout turns it off): a channels-last model's activations
        # and their gradients cross pack boundaries (sends, stashes) in their own layout, as NHWC views, not
        # NCHW (docs/performance.md entries 107 and 108)
        self.keep_layout = bool(job.get("keep_layout", True)) and channels_last_model(job["model"])
        self.layers = self.spec.build("meta")
        self.layers.train()
        self.slots = [layer_slots(l) for l in self.layers]
        self.stochastic = {i for i, l in enumerate(self.layers) if is_stochastic(l)}
        clock.lap("model")               # the chain on the meta device, its slots
        self.arena = HostArena.attach(job["layout"], job["arena_path"])
        self.pinned = self.arena.pin() if self.device.type == "cuda" else 0
        clock.lap("arena")               # attach the shared host arena, page-lock it (cudaHostRegister)
        self.counters = Counters()
        self.copier = Copier(self.device, self.counters, job.get("load_buffers", "copy-stream"))
        # compute tasks whose loads the plan fetches only after the rank's previous task (they do not fit
        # beside it under the cap): with compute-stream buffers they are reserved after that task
        self.prefetch_waits = frozenset(job.get("prefetch_waits") or ())
        self.weight_copies = check_weight_copies(job.get("weight_copies", DEFAULT_WEIGHT_COPIES))
        self.block_copies = self.weight_copies != "per-tensor"     # per-vlayer, per-pack: W blocks
        self.updater = PackUpdater(self.arena, self.cfg.bwd_packs, self.spec.optimizer,
                                   threads=job.get("update_threads", 2),
                                   coalesce_below=job.get("coalesce_below", COALESCE_BELOW))
        self.pack_index = {p: i for i, p in enumerate(self.cfg.bwd_packs)}
        self.batches = load_batches(self.spec, job["data"], self.cfg.minibatch, job["iters"], job["data_seed"])
        if self.device.type == "cuda":
            self.batches = [tuple(t.pin_memory() for t in b) for b in self.batches]
        clock.lap("batches")
        self.tasks = self.graph.rank_tasks(self.rank)
        self.compute_tasks = [t for t in self.tasks if t.kind != "UPD"]
        self.vls = job["model"]["vlayers"]
        # consumers: FWD output -> task consuming it through ("task", id); BWD -> task with grad_in == id
        self.act_consumer, self.grad_consumer = {}, {}
        for t in self.graph.tasks:
            if t.kind in ("FWD", "BWD") and t.act_in[0] == "task":
                self.act_consumer[t.act_in[1]] = t
            if t.kind == "BWD" and t.grad_in is not None:
                self.grad_consumer[t.grad_in] = t
        self.fault = job.get("fault") or {}
        self.channels = Channels(self.graph, self.rank, cpu=self.device.type == "cpu",
                                 max_ctas=job.get("p2p_max_ctas"), receive=job.get("p2p_receive", DEFAULT_RECEIVE_MODE),
                                 keep_layout=self.keep_layout)
        self._precompute()
        clock.lap("precompute")
        host_ready = getattr(self, "host_ready", None)
        if host_ready is not None:       # the launcher fills the arena's weights while we set up
            if not host_ready.wait(self.timeout):
                raise TimeoutError(f"rank {self.rank}: timed out after {self.timeout:.0f} s waiting for the "
                                   f"host to initialise the weights")
            clock.lap("wait_host_weights")
        self.setup_s = clock.phases

    def _precompute(self) -> None:
        """Everything the per-task hot path would otherwise rebuild every task of every iteration: arena
        views (a view costs a slice + two reshapes + an Entry.nbytes each), per-layer parameter/buffer
        slots, output specs, and per-task facts of the (fixed) task graph."""
        arena, L = self.arena, len(self.layers)
        # numpy views of the arena's flags: reading an element of a tensor builds a tensor and calls item()
        # (1.0 us on the 2-core CPU machine; more under the GPU host's profiler), a numpy element read takes
        # 0.06 us; both read the same shared memory (docs/performance.md entry 75)
        self.upd_flags, self.stash_flags = arena.upd_done.numpy(), arena.stash_done.numpy()
        self.w_views = [arena.weights(l) for l in range(L)]
        self.w_bytes = [sum(w.numel() * w.element_size() for w in ws) for ws in self.w_views]
        if self.block_copies:          # --weight-copies per-vlayer / per-pack: copies of W blocks
            self.load_segments = self._load_segments()
        # vDP across GPUs only: the reduced gradients of a pack go to the arena in one copy
        self.grad_spans = ({p: self._grad_span(p) for p in self.cfg.bwd_packs}
                           if any(t.allreduce for t in self.compute_tasks) else {})
        # per layer: [(module._parameters, name, requires_grad, slot index)], [(module._buffers, name, slot index)]
        self.param_slots = [[(mod._parameters, name, meta.requires_grad, k)
                             for k, (mod, name, is_param, meta) in enumerate(sl) if is_param] for sl in self.slots]
        self.buffer_slots = [[(mod._buffers, name, k) for k, (mod, name, is_param, _) in enumerate(sl) if not is_param]
                             for sl in self.slots]
        # per layer: [(module._parameters, name, dW view)] for the parameters with a dW entry, in slot order
        self.grad_slots = [[(mod._parameters, name, dw)
                            for (mod, name, _, _), dw in zip(sl, arena.grads(l)) if dw is not None]
                           for l, sl in enumerate(self.slots)]
        self.out_specs = [[(tuple(s["shape"]), getattr(torch, s["dtype"])) for s in vl["outputs"]] for vl in self.vls]
        self.out_specs_float = [[s for s in sp if s[1] in _FLOAT] for sp in self.out_specs]
        self.stash_views = {tid: [host_view(v, self.keep_layout) for v in arena.stash(tid)]
                            for tid in arena.layout.stash}
        # FWD task ids whose stash a task on another rank reads. run_fwd publishes a stash's flag for these
        # only, which holds while each stash has one reader (the task graph's rule, checked here)
        stash_readers = [c for c in self.graph.tasks if c.kind in ("FWD", "BWD") and c.act_in[0] == "stash"]
        shared = sorted(tid for tid, n in Counter(c.act_in[1] for c in stash_readers).items() if n > 1)
        if shared:
            raise ValueError(f"task graph: the stash of FWD task(s) {shared} has several readers; the runtime "
                             "orders a stash by one reader (harmony/schedule/tasks.py makes one per stash)")
        self.stash_remote = {c.act_in[1] for c in stash_readers if c.rank != self.rank}
        self.load_packs = {}            # task id -> indices of the backward packs its load_layers touch
        for t in self.compute_tasks:
            lo, hi = t.load_layers
            self.load_packs[t.id] = sorted(self._packs_of(range(lo, hi))) if hi > lo else []
        self.stochastic_tasks = {t.id for t in self.compute_tasks if any(l in self.stochastic for l in range(*t.pack))}
        self.installed: set[int] = set()    # layers whose modules hold Parameters over resident[layer]
        self.layer_list = list(self.layers)  # ModuleList slicing builds a new ModuleList per call
        # per layer: [(module._parameters or ._buffers, name, meta tensor)]: what `release` puts back
        self.meta_slots = [[(mod._parameters if is_param else mod._buffers, name, meta)
                            for mod, name, is_param, meta in sl] for sl in self.slots]

    def _load_segments(self) -> dict[int, list["LoadSegment"]]:
        """Per compute task, its load cut into the W-block copies `--weight-copies` asks for: every vLayer
        alone (per-vlayer), or runs of vLayers cut only where a forward or backward pack begins or ends
        (per-pack). A task keeps for the next one the layers both packs share, a run between such cuts,
        so every device block is kept or released whole and none holds memory the plan does not count."""
        arena, L, cfg = self.arena, len(self.layers), self.cfg
        blocks = arena.layout.w_blocks
        views = [BlockViews.of([w for w, _, _ in arena.layout.weights[l]], blocks[l][0]) for l in range(L)]
        if self.weight_copies == "per-vlayer":
            cuts = set(range(L + 1))
        else:
            cuts = {b for p in (*cfg.fwd_packs, *cfg.bwd_packs) for b in p}
        made: dict[tuple[int, int], LoadSegment] = {}

        def segment(a: int, b: int) -> LoadSegment:
            if (a, b) not in made:
                start = blocks[a][0]
                stop = blocks[b - 1][0] + blocks[b - 1][1]
                if sum(blocks[l][1] for l in range(a, b)) != stop - start:
                    raise RuntimeError(f"arena layout: the W blocks of vLayers {a}..{b - 1} are not adjacent")
                at = [(views[l], blocks[l][0] - start) for l in range(a, b)]
                made[a, b] = LoadSegment(a, b, arena.buf[start:stop], at, sum(self.w_bytes[a:b]))
            return made[a, b]

        out = {}
        for t in self.compute_tasks:
            lo, hi = t.load_layers
            edges = [lo, *sorted(c for c in cuts if lo < c < hi), hi] if hi > lo else []
            out[t.id] = [segment(a, b) for a, b in zip(edges, edges[1:])]
        return out

    # ------------------------------------------------------------------------------------------
    # weights
    # ------------------------------------------------------------------------------------------
    def _wait_flag(self, flags, idx: int, value: int, what) -> None:
        """Block until flags[idx] >= value (flags: a numpy view of the arena's). what(): the awaited
        thing, for the timeout's message; a callable, so the common case (already set) formats nothing."""
        if flags[idx] >= value:
            return
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.timeout
        delay = 2e-5
        while flags[idx] < value:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {self.rank}: timed out after {self.timeout:.0f} s waiting for {what()}")
            time.sleep(delay)
            delay = min(delay * 2, 2e-3)
        self.flag_wait_s += time.perf_counter() - t0

    def _packs_of(self, layers: range) -> set[int]:
        return {i for i, (s, e) in enumerate(self.cfg.bwd_packs) if s < layers.stop and layers.start < e}

    def reserve_loads(self, t) -> dict | None:
        """With --load-buffers compute-stream (Copier.reserves): the device buffers of task t's loads, taken
        before the task that precedes t is issued, so that their copies need not wait for it (or, for the
        plan's `prefetch_waits`, after it: the copies then wait for it). Else None."""
        if not self.copier.reserves:
            return None
        if self.block_copies:     # keyed by each segment's first vLayer, as prefetch reads them
            out = {seg.start: self.copier.reserve([seg.block]) for seg in self.load_segments[t.id]}
        else:
            out = {layer: self.copier.reserve(self.w_views[layer]) for layer in range(*t.load_layers)}
        if t.act_in[0] == "stash":      # its first microbatch (StashInput loads the others)
            out["stash"] = self.copier.reserve(self._stash_slices(t, *t.microbatches()[0]))
        return out

    def _stash_slices(self, t, lo: int, hi: int) -> list[torch.Tensor]:
        """Host views of global samples [lo, hi) of task t's stashed input."""
        return StashInput.slices(self.stash_views[t.act_in[1]], t.samples[0], lo, hi)

    def prefetch(self, t, it: int, reserved: dict | None = None) -> dict:
        """Issue the H2D copies of task t's `load_layers` (after their packs' UPD of the previous iteration)
        and of its stash input's first microbatch, into `reserved` buffers if given (reserve_loads). Returns
        {layer: (tensors, event, device buffers)}, plus the stash under key 'stash': a StashInput that holds
        the first microbatch's copy and loads the others as the task runs."""
        lo, hi = t.load_layers
        out = {}
        into = reserved or {}
        flags = self.upd_flags
        for pi in self.load_packs[t.id]:
            self._wait_flag(flags, pi, it, lambda pi=pi: f"the update of pack {self.cfg.bwd_packs[pi]}")
        if self.block_copies:
            for seg in self.load_segments[t.id]:
                per_layer, ev, bufs = self.copier.h2d_block(seg.block, seg.views, "h2d_weights", seg.nbytes,
                                                            into.get(seg.start))
                for layer, tensors in zip(range(seg.start, seg.stop), per_layer):
                    out[layer] = (tensors, ev, bufs)      # one `bufs` list per segment: install readies it once
        else:
            for layer in range(lo, hi):
                tensors, ev = self.copier.h2d(self.w_views[layer], "h2d_weights", self.w_bytes[layer],
                                              into.get(layer))
                out[layer] = (tensors, ev, tensors)
        if t.act_in[0] == "stash":
            src, written = t.act_in[1], None
            if src in self.stash_events:      # produced on this rank: order by event, no host wait
                written = self.stash_events.pop(src)
            else:
                self._wait_flag(self.stash_flags, src, it + 1, lambda: f"the stash of task {src}")
            mbs = t.microbatches()
            first = self.copier.h2d(self._stash_slices(t, *mbs[0]), "h2d_act", into=into.get("stash"),
                                    after=written)
            out["stash"] = StashInput(self.copier, self.stash_views[src], t.samples[0], mbs, first, written)
        return out

    def install(self, t, fetched: dict) -> None:
        """Put the task's weights into the modules: prefetched layers, plus those kept by the previous task."""
        installed, kept_grads = self.installed, self.kept_grads
        readied = None
        for layer in range(*t.pack):
            if layer in fetched:
                tensors, ev, buffers = fetched[layer]
                if buffers is not readied:     # W blocks: the one device block of the layer's segment, once
                    self.copier.ready(buffers, ev)
                    readied = buffers
                self.resident[layer] = tensors
                installed.discard(layer)
            elif layer not in self.resident:
                raise RuntimeError(f"task {t.id}: layer {layer} is neither loaded nor kept (schedule bug)")
            kept = kept_grads.pop(layer, None) or {}
            if layer in installed:
                # kept from the previous task: its modules already hold Parameters over these very tensors
                for params, name, _, k in self.param_slots[layer]:
                    params[name].grad = kept.get(k)  # the previous BWD's dW (grad_keep): backward adds to it
                continue
            tensors = self.resident[layer]
            for params, name, requires_grad, k in self.param_slots[layer]:
                p = params[name] = nn.Parameter(tensors[k], requires_grad=requires_grad)
                p.grad = kept.get(k)          # the previous BWD's dW (grad_keep): backward adds to it
            for buffers, name, k in self.buffer_slots[layer]:
                buffers[name] = tensors[k]
            installed.add(layer)

    def release(self, t) -> None:
        klo, khi = t.keep_layers
        drop = [layer for layer in self.resident if not klo <= layer < khi]
        for layer in drop:
            del self.resident[layer]
            self.installed.discard(layer)
            for d, name, meta in self.meta_slots[layer]:
                d[name] = meta

    # ------------------------------------------------------------------------------------------
    # activations
    # ------------------------------------------------------------------------------------------
    def _specs(self, layer_out: int, floating_only: bool = False):
        return (self.out_specs_float if floating_only else self.out_specs)[layer_out]

    def _send(self, tensors, dst: int, producer, kind: str, chunk: int) -> None:
        """Send one microbatch's tensors to `dst` (asynchronously; kept alive until the send completes)."""
        # drop finished sends, so a sent activation's memory is not held until the end of the iteration
        self.sends = [(w, x) for w, x in self.sends if not w.is_completed()]
        for j, x in enumerate(tensors):
            x = to_wire(x, self.keep_layout)
            self.counters.add("p2p", x.numel() * x.element_size())
            self.sends.append((self.channels.isend(x, dst, tag(producer.id, kind, chunk, j)), x))

    def get_input(self, t, it: int, fetched: dict):
        """The task's activation input, read microbatch by microbatch (`microbatch(lo, hi)`): a LocalInput
        (data, same-rank producer), the StashInput from its prefetch, or a StreamedInput that receives a
        remote producer's output."""
        kind, src = t.act_in
        lo, hi = t.samples
        if kind == "data":
            xs, ev = self.copier.h2d([x[lo:hi] for x in self.batches[it]], "h2d_act")
            self.copier.ready(xs, ev)
            return LocalInput(xs, lo)
        if kind == "stash":
            return fetched["stash"]
        producer = self.graph.tasks[src]
        if producer.rank == self.rank:
            return LocalInput(self.acts.pop(src), lo)
        return StreamedInput(self.channels, producer, "act", self._specs(t.pack[0] - 1), self.device)

    def get_grad(self, t):
        producer = self.graph.tasks[t.grad_in]
        if producer.rank == self.rank:
            return LocalInput(self.grads_out.pop(t.grad_in), t.samples[0])
        return StreamedInput(self.channels, producer, "grad", self._specs(t.pack[1] - 1, floating_only=True),
                             self.device)

    def _run_layers(self, t, xs, it: int, first_sample: int):
        lo, hi = t.pack
        if t.id not in self.stochastic_tasks:
            for layer in self.layer_list[lo:hi]:
                xs = layer(*xs)
            return xs
        for layer in range(lo, hi):
            if layer in self.stochastic:
                seed_dropout(self.device, dropout_seed(self.job["seed"], it, layer, first_sample))
            xs = self.layers[layer](*xs)
        return xs

    # ------------------------------------------------------------------------------------------
    # tasks
    # ------------------------------------------------------------------------------------------
    def run_fwd(self, t, it: int, fetched: dict) -> None:
        inp = self.get_input(t, it, fetched)
        s0, n = t.samples[0], t.num_samples
        specs = self._specs(t.pack[1] - 1)
        consumer = self.act_consumer.get(t.id)
        remote = consumer is not None and consumer.rank != self.rank
        keep_outs = t.stash_out or (consumer is not None and not remote)
        outs = None
        mbs = t.microbatches()
        for i, (lo, hi) in enumerate(mbs):
            self.current = (t, lo, hi)
            self._fault_point(t, it)
            ys = self._fwd_microbatch(t, it, inp, lo, hi, specs)
            if remote:         # stream: the consumer's GPU starts on this microbatch now
                self._send(ys, consumer.rank, t, "act", i)
            if keep_outs and len(mbs) == 1:
                outs = ys
            elif keep_outs:
                if outs is None:
                    outs = [self._rows_like(n, y) for y in ys]
                _copy_rows(outs, ys, slice(lo - s0, hi - s0))
            # freed here, not when the next microbatch rebinds the name: until then this output stayed
            # alive beside the next forward, u x Y more than the pack rule (docs/performance.md entry 38)
            del ys
        del inp
        if t.stash_out:
            ev = self.copier.d2h(self.stash_views[t.id], outs, "d2h_act")
            read_remotely = t.id in self.stash_remote
            if not read_remotely:
                # its one reader (tasks.py: one BWD task per stash) is on this rank and orders its copy
                # after this event, on the GPU: no flag to publish, so no signal-thread job per stash
                self.stash_events[t.id] = ev
            if ev is None:
                self.stash_flags[t.id] = it + 1
            elif read_remotely:
                flags, tid, val = self.stash_flags, t.id, it + 1

                def publish(ev=ev):
                    ev.synchronize()
                    flags[tid] = val
                self.updater.run_in_signal_thread(publish)
        if consumer is not None and not remote:
            self.acts[t.id] = outs

    def run_bwd(self, t, it: int, fetched: dict) -> None:
        inp = self.get_input(t, it, fetched)
        gin_src = self.get_grad(t) if t.grad_in is not None else None
        is_loss = t.pack[1] == self.cfg.num_layers
        s0 = t.samples[0]
        grad_consumer = self.grad_consumer.get(t.id)
        need_in_grad = grad_consumer is not None
        remote = need_in_grad and grad_consumer.rank != self.rank
        out_float = [dt in _FLOAT for _, dt in self._specs(t.pack[1] - 1)]
        in_float = gin = None
        reduce_into = self._grads_into_one_buffer(t) if t.allreduce and not t.grad_keep else None
        mbs = t.microbatches()
        for i, (lo, hi) in enumerate(mbs):
            self.current = (t, lo, hi)
            self._fault_point(t, it)
            sl = slice(lo - s0, hi - s0)
            xs = inp.microbatch(lo, hi)
            if in_float is None:        # the first microbatch says what the input is
                in_float = [x.dtype in _FLOAT for x in xs]
                if need_in_grad and len(mbs) > 1:    # the group's input gradient, for the consumer
                    gin = [self._rows_like(t.num_samples, x) for x, f in zip(xs, in_float) if f]
            gys = gin_src.microbatch(lo, hi) if gin_src is not None else None
            dxs = self._bwd_microbatch(t, it, xs, gys, lo, hi, in_float, out_float, need_in_grad, is_loss)
            if need_in_grad:
                if gin is None:     # one microbatch: its gradients are the group's, uncopied
                    gin = [dx if dx is not None else torch.zeros_like(x)
                           for dx, x in zip(dxs, [x for x, f in zip(xs, in_float) if f])]
                else:
                    _copy_rows(gin, dxs, sl)
                if remote:     # stream: the previous pack's GPU starts its backward on this microbatch
                    self._send([buf[sl] for buf in gin], grad_consumer.rank, t, "grad", i)
            # nothing of this microbatch may outlive it: a name still bound during the next microbatch's
            # recompute holds its tensor (an input gradient, u x X_in, did; docs/performance.md entry 38)
            del xs, gys, dxs
        del inp, gin_src
        self._finish_grads(t, it, reduce_into)
        if need_in_grad and not remote:
            self.grads_out[t.id] = gin

    def _rows_like(self, n: int, x: torch.Tensor) -> torch.Tensor:
        """An n-row buffer for a task's rows of x (a microbatch's): NCHW, or with keep_layout a 4-d x's
        rows channels-last, the layout its sends and stashes keep."""
        return torch.empty((n, *x.shape[1:]), dtype=x.dtype, device=self.device,
                           memory_format=crossing_format(self.keep_layout, x.dim()))

    def _fwd_microbatch(self, t, it: int, inp, lo: int, hi: int, specs) -> list:
        """Forward of one microbatch (no grad); its outputs in the dtypes the next pack takes."""
        xs = tuple(inp.microbatch(lo, hi))
        with torch.no_grad(), autocast(self.device, self.precision):
            ys = self._run_layers(t, xs, it, lo)
        return [y.to(dt) for y, (_, dt) in zip(ys, specs)]

    def _bwd_microbatch(self, t, it: int, xs, gys, lo: int, hi: int, in_float, out_float, need_in_grad: bool,
                        is_loss: bool) -> list:
        """Recompute forward and backward of one microbatch; returns the gradients of its floating inputs
        (None where autograd made none) when the consumer needs them. A method of its own so that its
        outputs, and everything else that refers to them, are freed when it returns."""
        xs = tuple(x.detach().requires_grad_(need_in_grad and f) for x, f in zip(xs, in_float))
        with torch.enable_grad():
            with autocast(self.device, self.precision):
                ys = self._run_layers(t, xs, it, lo)
            if is_loss:
                loss = ys[0].float()
                (loss * ((hi - lo) / self.cfg.minibatch)).backward()
                self.loss_acc = self.loss_acc + loss.detach() * ((hi - lo) / self.cfg.minibatch)
            else:
                yf = [y for y, f in zip(ys, out_float) if f]
                pairs = [(y, g) for y, g in zip(yf, gys) if y.requires_grad]
                if pairs:
                    torch.autograd.backward([p[0] for p in pairs],
                                            [laid_out_like(p[1].to(p[0].dtype), p[0]) for p in pairs])
        return [x.grad for x, f in zip(xs, in_float) if f] if need_in_grad else []

    def _grad_span(self, pack) -> GradSpan | None:
        """The arena's dW range of a backward pack, where the pack's gradients share one dtype; else None."""
        entries = [dw for layer in range(*pack) for _, dw, _ in self.arena.layout.weights[layer] if dw is not None]
        if not entries or len({e.dtype for e in entries}) > 1:
            return None
        dtype = getattr(torch, entries[0].dtype)
        start, stop = entries[0].offset, entries[-1].offset + entries[-1].nbytes
        return GradSpan(self.arena.buf[start:stop], dtype, [(e.offset - start) // dtype.itemsize for e in entries])

    def _grads_into_one_buffer(self, t) -> torch.Tensor | None:
        """vDP across GPUs: before the backward, make the pack's weight gradients views of one zeroed buffer,
        so that autograd accumulates into it, the all-reduce sums it in place and one copy takes it to the
        arena. The buffer mirrors the arena's dW range of the pack, alignment padding included
        (`_grad_span`): one copy instead of one per parameter tensor (docs/performance.md entry 99). The
        gradients were made by autograd and concatenated into a flat copy for the all-reduce, which held the
        pack's dW twice at that moment, past what the task's memory charge counts (entry 89). None (the
        copy, as before) when a gradient is already held (kept by the previous BWD) or the dtypes differ."""
        params = [mod_params[name] for layer in range(*t.pack) for mod_params, name, _ in self.grad_slots[layer]]
        span = self.grad_spans.get(t.pack)
        if not params or span is None or any(p.grad is not None or p.dtype != span.dtype for p in params):
            return None
        flat = torch.zeros(span.host.numel() // span.dtype.itemsize, dtype=span.dtype, device=self.device)
        for p, off in zip(params, span.offsets, strict=True):
            p.grad = flat[off:off + p.numel()].view(p.shape)
        return flat

    def _finish_grads(self, t, it: int, reduce_into: torch.Tensor | None = None) -> None:
        """All-reduce (vDP) and send the task's accumulated weight gradients to the arena, once; or, with
        grad_keep, hold them for the next BWD of the same pack (installed with the kept weights).
        `reduce_into`: the buffer `_grads_into_one_buffer` made the gradients views of, reduced in place
        while autograd still accumulates into those views; otherwise the gradients are concatenated."""
        if t.grad_keep:
            for layer in range(*t.pack):
                self.kept_grads[layer] = {k: params[name].grad for params, name, _, k in self.param_slots[layer]
                                          if params[name].grad is not None}
            return
        params, dsts, missing, idx = [], [], set(), 0
        for layer in range(*t.pack):
            for mod_params, name, dw in self.grad_slots[layer]:
                p = mod_params[name]
                if p.grad is None:
                    missing.add(idx)
                    p.grad = torch.zeros_like(p)
                params.append(p)
                dsts.append(dw)
                idx += 1
        if not params:
            return
        grads = [p.grad for p in params]
        one_block = False      # the gradients are the views `_grads_into_one_buffer` made, reduced in place
        if t.allreduce:
            one_block = reduce_into is not None and _views_of(grads, reduce_into, self.grad_spans[t.pack].offsets)
            if one_block:
                flat = reduce_into
            else:       # autograd replaced a view, or there was none: reduce a copy
                flat = torch.cat([g.reshape(-1) for g in grads])
            nbytes = sum(g.numel() * g.element_size() for g in grads)     # the padding is not counted
            if self.ordered_reduce:       # an all-gather: every other rank's whole share arrives
                self.counters.add("allreduce", (self.N - 1) * nbytes)
                sum_in_rank_order(flat, self.N)
            else:                         # the ring: 2 (N - 1) / N of the gradients per rank
                self.counters.add("allreduce", 2 * (self.N - 1) * nbytes // self.N)
                self._all_reduce(flat, to_host_only=t.grad_to_host)
            if not one_block:
                grads = list(torch.split(flat, [g.numel() for g in grads]))
                grads = [g.view(p.shape) for g, p in zip(grads, params)]
            missing = set()       # another rank may have had a gradient: the reduced sum is the gradient
        if t.grad_to_host:
            pi = self.pack_index[t.pack]
            if t.grad_accumulate:
                staged = self.copier.staging(grads) if self.copier.cuda else None
                if staged is None:            # CPU: add directly into dW (counted as the D2H it stands for)
                    self.counters.add("d2h_grads", sum(g.numel() * g.element_size() for g in grads))
                    self.updater.add_grads(dsts, grads)
                    self.updater.grads_arriving(pi, None)
                else:
                    ev = self.copier.d2h(staged, grads, "d2h_grads")
                    self.updater.grads_arriving(pi, ev, add_into=dsts, staged=staged)
            elif one_block:       # one copy of the buffer into the pack's dW range, padding and all
                ev = self.copier.d2h([self.grad_spans[t.pack].host], [flat.view(torch.uint8)], "d2h_grads", nbytes)
                self.updater.grads_arriving(pi, ev, missing=missing)
            else:
                ev = self.copier.d2h(dsts, grads, "d2h_grads")
                self.updater.grads_arriving(pi, ev, missing=missing)
        for p in params:
            p.grad = None

    def _all_reduce(self, flat: torch.Tensor, to_host_only: bool) -> None:
        """Sum `flat` over the ranks. `--allreduce overlap` (cuda, gradients bound for the host only): the
        collective runs on NCCL's stream and only the device-to-host stream waits for it, so the gradients'
        copy (Copier.d2h, issued next) follows the reduction while the next task's kernels go ahead on the
        compute stream; inline, the compute stream waits, including for the slowest rank to arrive. The
        collectives are issued in the same order on every rank either way."""
        if self.allreduce_mode == "overlap" and self.copier.cuda and to_host_only:
            work = dist.all_reduce(flat, async_op=True)
            with torch.cuda.stream(self.copier.d2h_stream):
                work.wait()               # the current stream (d2h) waits on the collective, not the host
        else:
            dist.all_reduce(flat)

    def run_upd(self, t, it: int) -> None:
        self.updater.submit(self.pack_index[t.pack], it)

    # ------------------------------------------------------------------------------------------
    # fault injection (tests of the failure paths): job["fault"] = {"kind": "oom"|"crash"|"hang"|"slow", ...}
    # ------------------------------------------------------------------------------------------
    def _fault_point(self, t, it: int) -> None:
        f = self.fault
        if not f:
            return
        if f.get("kind") == "slow":
            time.sleep(float(f.get("seconds", 0.2)))
            return
        if f.get("rank", self.rank) != self.rank or f.get("task", t.id) != t.id or f.get("iteration", it) != it:
            return
        if f["kind"] == "oom":
            raise torch.OutOfMemoryError(f"injected out-of-memory in task {t.id}")
        if f["kind"] == "crash":
            time.sleep(float(f.get("delay_s", 0.0)))
            if f.get("signal"):          # killed from outside, as the kernel's OOM killer does (SIGKILL)
                os.kill(os.getpid(), int(f["signal"]))
            os._exit(17)
        if f["kind"] == "hang":      # a stall: only the launcher's progress watchdog ends it
            while True:
                time.sleep(1.0)

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------
    def _barrier(self) -> None:
        if self.N > 1:
            dist.barrier(group=self.ctrl) if self.ctrl is not None else dist.barrier()

    def _memory(self) -> tuple[int, int]:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device), torch.cuda.max_memory_reserved(self.device)
        return 0, 0

    def stream_names(self) -> dict[int, str]:
        c = self.copier
        return {c.compute.cuda_stream: "compute", c.h2d_stream.cuda_stream: "h2d", c.d2h_stream.cuda_stream: "d2h",
                c.stash_stream.cuda_stream: "h2d-stash"}

    def start_run(self, probe: bool = False) -> None:
        """The state the iterations keep between tasks, empty before the first (`run`, and
        benchmarks/runtime_overhead.py, which calls `_iteration` in-process). probe: HARMONY_TASK_PEAKS."""
        self.resident: dict[int, list[torch.Tensor]] = {}
        self.acts, self.grads_out, self.stash_events, self.kept_grads = {}, {}, {}, {}
        self.sends = []
        self.current = None
        self.flag_wait_s = 0.0            # per iteration (reset in _iteration): host time in _wait_flag
        self.task_peaks, self.probe_peak = ([] if probe else None), 0
        # the probe's meter: the allocator's counters on CUDA; on the CPU the storages the worker's thread makes
        # from here on (harmony.gpumem.MemoryMeter), which are its "device" tensors: the arena is made before
        self.probe_meter = MemoryMeter(self.device).__enter__() if probe else None
        self.task_clock = TaskClock(self.device, self.copier.compute if self.copier.cuda else None)
        self.gc_clock = GC_CLOCK.start()

    def run(self) -> None:
        import psutil
        proc = psutil.Process()
        probe_dir = os.environ.get("HARMONY_TASK_PEAKS")
        self.start_run(probe=bool(probe_dir))
        # this GPU's clock beside each iteration (none on the CPU or without NVML; harmony/gpu_clocks.py)
        clocks = DeviceClocks([self.device])
        self.results.put(("ready", self.rank, {"pinned_bytes": self.pinned, "setup_s": self.setup_s}))
        self._barrier()
        trace_it = self.job.get("memcpy_trace_iteration")
        self.first_timed = self.job.get("first_timed_iteration", 1)
        trace_skipped = None
        for it in range(self.job["iters"]):
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
            retries0 = alloc_retries(self.device)
            traced = None
            clocks.take()                 # the samples since the last iteration: not this one's
            t0 = time.perf_counter()
            if it == trace_it and self.device.type == "cuda":
                # one steady-state iteration under torch.profiler (CUDA activity): the copies the GPU saw.
                # Every copy of an iteration is issued and completed inside it (no prefetch crosses the
                # iteration boundary; synchronize at its end); the loss is read after the trace.
                from harmony.memcpy_trace import measure_memcpy_bytes
                traced = measure_memcpy_bytes(lambda: self._iteration(it),
                                              host_ops=bool(self.job.get("trace_host_ops")))
                traced["iteration"] = it
            else:
                self._iteration(it)
            loss = float(self.loss_acc)
            dt = time.perf_counter() - t0
            alloc, reserved = self._memory()
            if self.task_peaks is not None:       # the probe resets the allocator's peak at every task
                alloc, self.probe_peak = max(alloc, self.probe_peak), 0
            payload = {"iteration": it, "time_s": dt, "loss_part": loss, "bytes": self.counters.take(),
                       "peak_allocated": alloc, "peak_reserved": reserved,
                       "alloc_retries": alloc_retries(self.device) - retries0, "rss": proc.memory_info().rss,
                       "pinned": self.pinned}
            if it == 0:
                payload.update(self._host_pss())
            payload["host_phases"] = {k: round(v, 6) for k, v in self.host_phases.items()}
            try:      # a diagnostic: if reading the events fails, the run goes on without them
                payload["task_spans"] = self.task_clock.spans()
                payload["task_issued"] = self.task_clock.issued_at()
            except Exception as e:          # noqa: BLE001
                payload["task_spans_error"] = f"{type(e).__name__}: {e}"[:300]
            if clocks.active:
                payload["gpu_clocks"] = (clocks.take() or [None])[0]
            if self.device.type == "cuda":   # after the iteration's end, outside its time
                payload["reserved_by_stream"] = reserved_by_stream(self.device, self.stream_names())
            if traced is not None:
                payload["memcpy_trace"] = traced
            if trace_skipped is not None and it == trace_skipped[0]:
                payload["memcpy_trace_skipped"] = trace_skipped[1]
            self.results.put(("iteration", self.rank, payload))
            self._barrier()
            if trace_it is not None and it == trace_it - 1 and self.job.get("max_iter_s") is not None:
                # A traced iteration runs slower under the profiler and is not timed: after a warm-up
                # iteration slower than --max-iter-s, the next one is timed untraced instead (as the
                # baselines' loop does). swap-dp resnet1026 D=1024 (122 s warm-up, h100-grid28) sat in
                # its traced iteration past the 330 s progress watchdog and left an error record.
                slowest, _ = self._reduce_slowest(dt, None)
                if slowest > self.job["max_iter_s"]:
                    trace_skipped = (trace_it, f"warm-up iteration {it} took {slowest:.1f} s > --max-iter-s "
                                     f"{self.job['max_iter_s']:g}: iteration {trace_it} is timed untraced")
                    trace_it, self.first_timed = None, self.first_timed - 1
            if self.stop_after(it, dt):
                break
        if probe_dir:
            self.probe_meter.__exit__(None, None, None)
            from harmony.jsonio import write_json
            write_json(os.path.join(probe_dir, f"rank{self.rank}.json"),
                       {"rank": self.rank, "gpu_memory_cap": self.job.get("gpu_memory_cap"), "tasks": self.task_peaks})

    def stop_after(self, it: int, dt: float) -> bool:
        """Whether every rank stops after iteration `it`: it was timed (past warm-up and trace), more are
        left, and the slowest rank's took longer than --max-iter-s, or one more as long (10% over) would
        end after $HARMONY_DEADLINE. The ranks reduce the same two numbers, so they all decide alike."""
        limit = self.job.get("max_iter_s")
        left = seconds_left()
        if it < self.first_timed or it >= self.job["iters"] - 1 or (limit is None and left is None):
            return False
        slowest, left = self._reduce_slowest(dt, left)
        return (limit is not None and slowest > limit) or outlasts_deadline(slowest, left)

    def _reduce_slowest(self, dt: float, left: float | None) -> tuple[float, float | None]:
        """The slowest rank's iteration time and the least time left before the deadline (every rank calls
        it at the same point, so every rank gets the same two numbers)."""
        vals = torch.tensor([dt, -(left if left is not None else float("inf"))], dtype=torch.float64)
        if self.N > 1:
            dist.all_reduce(vals, op=dist.ReduceOp.MAX, group=self.ctrl)
        least_left = -float(vals[1])
        return float(vals[0]), (None if least_left == float("inf") else least_left)

    # Per-task memory probe (HARMONY_TASK_PEAKS=DIR; diagnosis only, docs/runtime.md "Per-task memory
    # probe"): the device is synchronized before each compute task and after the next task's prefetch is
    # issued, so a task's peak is what it and that prefetch held, as the simulator charges it
    # (task_peak + the next task's prefetch_bytes). The synchronizations serialize the host with the GPU:
    # times taken with the probe on are not the run's.
    # It also records what the caching allocator holds per stream at the task's start (reserved, cached but
    # unused, the largest unused block) and how many allocations the task retried: a task that retries with
    # its peak on the model is short of a block its stream can reuse, not of memory (entry 38).
    def _probe_start(self) -> tuple[int, int, dict]:
        m = self.probe_meter
        self.probe_peak = max(self.probe_peak, m.peak())
        m.reset_peak()
        allocator = reserved_by_stream(self.device, self.stream_names()) if self.copier.cuda else {}
        return m.current(), alloc_retries(self.device), allocator

    def _probe_end(self, it: int, t, nxt, start: tuple[int, int, dict]) -> None:
        m = self.probe_meter
        peak = m.peak()
        self.probe_peak = max(self.probe_peak, peak)
        start_bytes, retries0, allocator = start
        self.task_peaks.append({"iteration": it, "task": t.id, "kind": t.kind, "pack": list(t.pack),
                                "next_task": nxt.id if nxt is not None else None, "start_bytes": start_bytes,
                                "peak_bytes": peak, "end_bytes": m.current(),
                                "retries": alloc_retries(self.device) - retries0, "allocator_at_start": allocator})

    def _iteration(self, it: int) -> None:
        """The rank's tasks of iteration `it`, until its copies, sends and updates have completed."""
        clock = time.perf_counter
        t0, self.flag_wait_s, self.run_ahead_wait_s = clock(), 0.0, 0.0
        self.gc_clock.take()              # this iteration's collections only
        self.loss_acc = torch.zeros((), device=self.device)
        self.task_clock.begin()
        first = self.compute_tasks[0] if self.compute_tasks else None
        fetched = self.prefetch(first, it, self.reserve_loads(first)) if first is not None else {}
        k = 0
        run_ahead = self.job.get("run_ahead")
        # the copier's marks after the last run_ahead + 1 compute tasks, oldest first (None: no bound)
        issued = deque(maxlen=run_ahead + 1) if run_ahead is not None else None
        for t in self.tasks:
            if t.kind == "UPD":
                self.run_upd(t, it)
                continue
            if issued is not None and len(issued) == issued.maxlen:
                # --run-ahead: before this task allocates, the one run_ahead + 1 back has finished its
                # kernels and device-to-host copies, so the blocks those copies read are reusable
                # (docs/runtime.md, Host run-ahead)
                t_wait = clock()
                wait_marks(issued[0])
                self.run_ahead_wait_s += clock() - t_wait
            self.install(t, fetched)
            k += 1
            nxt = self.compute_tasks[k] if k < len(self.compute_tasks) else None
            after_t = nxt is not None and self.copier.reserves and nxt.id in self.prefetch_waits
            reserved = self.reserve_loads(nxt) if nxt is not None and not after_t else None  # before t is issued
            if self.task_peaks is not None:
                probe_start = self._probe_start()
            started = self.task_clock.now()
            (self.run_fwd if t.kind == "FWD" else self.run_bwd)(t, it, fetched)
            self.task_clock.add(t.id, started, self.task_clock.now())
            if after_t:               # the plan's wait: t's memory is reused, so the copies wait for t
                self.release(t)
                reserved = self.reserve_loads(nxt)
            fetched = self.prefetch(nxt, it, reserved) if nxt is not None else {}
            if not after_t:
                self.release(t)
            if self.task_peaks is not None:
                self._probe_end(it, t, nxt, probe_start)
            if issued is not None:
                issued.append(self.copier.mark())
        self.current = None
        t1 = clock()
        for w, _ in self.sends:
            w.wait()
        t2 = clock()
        self.copier.synchronize()
        self.sends = []
        t3 = clock()
        self.updater.wait_all()
        t4 = clock()
        # where the rank's host time went (docs/runtime.md, "Host phases"): a slow iteration whose GPU span
        # is short spends the rest here, e.g. in optimizer steps left after the last kernel (upd_drain_s)
        self.host_phases = {"issue_s": t1 - t0, "flag_wait_s": self.flag_wait_s,
                            **({"run_ahead_wait_s": self.run_ahead_wait_s}
                               if self.job.get("run_ahead") is not None else {}),
                            "sends_drain_s": t2 - t1,
                            "gpu_drain_s": t3 - t2, "upd_drain_s": t4 - t3, **self.updater.take_stats(),
                            **self.gc_clock.take()}

    def _host_pss(self) -> dict:
        """{"pss": bytes} after iteration 0, before the barrier, so outside every timed iteration (the page
        walk takes about a second per 100 GiB mapped): this worker's PSS, and on rank 0 the launcher's too
        (which wrote the arena's weights), all taken while every process of the run maps the
        arena, so that their sum counts each shared page once. Empty where PSS cannot be read."""
        from harmony.metrics import process_pss
        own = process_pss()
        launcher_pid = self.job.get("launcher_pid")
        launcher = process_pss(launcher_pid) if self.rank == 0 and launcher_pid else 0
        return {"pss": own + launcher} if own is not None and launcher is not None else {}

    def failure_info(self, e: BaseException) -> dict:
        from harmony.gpumem import is_oom
        info = {"message": f"{type(e).__name__}: {e}", "oom": is_oom(e), "rank": self.rank,
                "traceback": traceback.format_exc(limit=20)}
        cur = getattr(self, "current", None)
        if cur is not None:
            t, lo, hi = cur
            info.update(task=t.id, kind=t.kind, pack=list(t.pack), ubatch=t.ubatch, microbatch=[lo, hi])
        if getattr(self, "device", None) is not None and self.device.type == "cuda":
            info.update(allocated_bytes=torch.cuda.memory_allocated(self.device),
                        reserved_bytes=torch.cuda.memory_reserved(self.device),
                        max_allocated_bytes=torch.cuda.max_memory_allocated(self.device),
                        gpu_memory_cap=self.job.get("gpu_memory_cap"))
        return info


def laid_out_like(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """g in y's memory format. A gradient that crosses a pack boundary arrives contiguous, where autograd
    inside one graph would hand a channels-last output (ResNetConfig.channels_last) a channels-last
    gradient, and cuDNN picks its kernels, and their order of summation, by format (docs/performance.md
    entry 105). The GPU test's 2.5e-6 difference turned out to be the head's pooling (entry 106); this
    was not measured apart from that fix, and is kept because it makes the pack's inputs what plain
    PyTorch's are."""
    return to_channels_last(g) if channels_last_only(y) else g


def _views_of(grads: list, flat: torch.Tensor, offsets: list[int]) -> bool:
    """Whether `grads` are still the views of `flat` at element `offsets` they were made as (autograd may
    replace a gradient instead of accumulating into it)."""
    base, size = flat.data_ptr(), flat.element_size()
    return len(grads) == len(offsets) and all(g.data_ptr() == base + off * size and g.is_contiguous()
                                              for g, off in zip(grads, offsets))


def _copy_rows(dsts: list, srcs: list, rows: slice) -> None:
    """dst[rows] = src for each pair; a None src (an input autograd gave no gradient) zeroes its rows, so
    the destinations need not be zero-filled first. A function, so that no loop variable keeps the last
    src alive in the caller (docs/performance.md entry 38)."""
    for dst, src in zip(dsts, srcs):
        if src is None:
            dst[rows].zero_()
        else:
            dst[rows].copy_(src)


_CTRL: dict = {}


class _Tagged:
    """The results queue, with every message tagged by the index of the job it belongs to."""

    def __init__(self, q, job_index: int):
        self.q, self.ji = q, job_index

    def put(self, msg) -> None:
        kind, rank, payload = msg
        self.q.put((kind, rank, self.ji, payload))


def _init_distributed(rank: int, job: dict) -> None:
    N = job["graph"]["config"]["gpus"]
    if N <= 1:
        return
    cuda = job["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    backend = "nccl" if cuda else "gloo"
    kw = {"device_id": torch.device("cuda", rank)} if cuda else {}
    dist.init_process_group(backend, init_method=job["init_method"], rank=rank, world_size=N,
                            timeout=timedelta(seconds=float(job.get("timeout_s", 300))), **kw)
    _CTRL["group"] = dist.new_group(backend="gloo") if cuda else None


STALL_DUMP_SIGNAL = signal.SIGUSR1


def worker_main(rank: int, jobs: list[dict], results, host_ready=None) -> None:
    """Entry point of a spawned worker process: runs the jobs (same N and device) one after the other.
    `host_ready` (an Event, or None): set by the launcher once the first job's arena holds its weights."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the launcher handles Ctrl-C and ends us
    # On a stall the launcher sends STALL_DUMP_SIGNAL before ending us: every thread's Python stack goes to
    # stderr (the run's log), so a hang names the call it sits in (a p2p receive, an allocator retry, ...).
    # A time limit (`timeout`, a scheduler) sends SIGTERM to the whole process group, us included: dump the
    # same, then die as SIGTERM would. (The launcher itself ends us with SIGKILL, which prints nothing.)
    faulthandler.register(STALL_DUMP_SIGNAL, all_threads=True)
    print_stacks_on_sigterm()
    code = 0
    w = None
    t0 = time.perf_counter()
    try:
        _init_distributed(rank, jobs[0])
    except BaseException as e:  # noqa: BLE001
        results.put(("error", rank, 0, {"message": f"process group: {type(e).__name__}: {e}", "oom": False,
                                        "rank": rank, "traceback": traceback.format_exc(limit=20)}))
        os._exit(1)
    for ji, job in enumerate(jobs):
        w = Worker(rank, job, _Tagged(results, ji))
        if ji == 0:
            w.process_group_s = round(time.perf_counter() - t0, 3)
            w.host_ready = host_ready
        try:
            w.setup()
            w.run()
            w.results.put(("done", rank, {}))
        except BaseException as e:  # noqa: BLE001 - every failure is reported to the launcher, then we exit
            w.results.put(("error", rank, w.failure_info(e)))
            code = 1
        finally:
            try:
                if getattr(w, "updater", None) is not None:
                    w.updater.close()
                if getattr(w, "arena", None) is not None:
                    w.arena.unpin()
            except BaseException:  # noqa: BLE001
                pass
        if code:
            break
    if code == 0 and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
    if code:
        try:      # os._exit skips the queue's feeder thread: flush the error report first
            results.close()
            results.join_thread()
        except Exception:  # noqa: BLE001
            pass
        os._exit(code)
