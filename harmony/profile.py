"""Stage 2, profile: model.json -> profile.json (schema: harmony/profile_data.py; method: docs/profiling.md).

For every *distinct* vLayer (same signature = same class, shapes, dtypes and hyper-parameters) and every
microbatch size u of a sweep, measure on the target device:
  forward time (no grad), backward time (recompute forward with grad + backward), the median of
  `trials` runs after `warmup` runs, with (min, max) kept; the peak memory of each and the bytes saved
  for backward (harmony.gpumem.MemoryMeter: CUDA allocator counters, or a live-storage tracker on CPU);
and once per distinct vLayer the real CPU optimizer (harmony.optim.make_optimizer) on its parameters:
  the bytes of its state K and the time of one step with the runtime's threads per worker (`--threads`;
  on a GPU host: CPU cores / GPUs of the host, what each worker of a run on every GPU gets).
and once per distinct vLayer, from the tensors autograd saves in one forward (`retention`): whether it
  keeps its floating input alive for backward, and which bytes of its output only its consumer can keep
  alive (the pack rule frees them where the consumer does not retain its input).
Identical vLayers share the numbers (`profiled_as`). Each vLayer is fed its real inputs: the chain is
walked on the device at batch 2, one vLayer materialised at a time, and inputs at size u are the batch-2
inputs tiled along the sample dimension.

The default sweep is 1, 2, 4, ... up to the largest u that fits under the memory cap. A u is not tried
when the memory measured at the two previous sizes, extrapolated linearly, says it would not fit; an
OutOfMemoryError ends the sweep of that vLayer cleanly; so does a backward slower than --max-trial-s.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from harmony import gpumem
from harmony.gpu_clocks import DeviceClocks, combine
from harmony.jsonio import ArtifactError, write_json
from harmony.metrics import host_memory_record
from harmony.models.base import channels_last_only
from harmony.profile_data import PROFILE_ARTIFACT, PROFILE_SCHEMA, Profile, _interp
from harmony.progress import Progress
from harmony.units import format_bytes

# fwd_s/bwd_s on CUDA: kernels timed back to back behind a spin kernel; fwd_issue_s/bwd_issue_s: host time.
# Profiles with timing "cuda events" (before this) timed each vLayer bare, launch gaps included.
TIMING_CUDA = "cuda events behind a spin kernel + host issue time"
WALK_BATCH = 2           # batch size of the chain walk that produces every vLayer's real inputs
SERIES = ("fwd_s", "bwd_s", "fwd_issue_s", "bwd_issue_s", "fwd_peak_bytes", "fwd_grad_peak_bytes", "saved_bytes",
          "bwd_peak_bytes", "bwd_peak_held_bytes")
# recorded once per vLayer by retention() and copied to the vLayers profiled as a duplicate
RETENTION = ("retains_input", "freeable_output_bytes_per_sample")


@dataclass
class ProfileOptions:
    device: str = "cpu"
    ubatch: list[int] | None = None      # exact sizes; None: geometric sweep up to what fits
    trials: int = 5
    warmup: int | None = None            # untimed runs; default 1 on CPU, 2 on CUDA
    precision: str = "fp32"
    gpu_memory: int | None = None        # bytes; None: no cap
    max_ubatch: int | None = None        # sweep ceiling; default 8 on CPU, 1024 on CUDA
    max_trial_s: float | None = None     # stop a sweep after a u whose fastest backward takes longer; default 0.25 s
    headroom: float = 0.95               # fraction of the cap a predicted footprint may use
    opt_trials: int = 5
    threads: int | None = None           # CPU threads of the optimizer step; None: update_threads_default()
    seed: int = 0
    materialize: str = "auto"            # auto | full | stream (see LayerSource)
    sustain_s: float = 0.0               # > 0: time the heaviest vLayer's backward back to back this long per u (sustained)
    # bwd_issue_in_pack per vLayer; None: on CUDA only (on the CPU the issue is the compute, and the scheduler
    # never uses it there; measuring it added about two minutes to the CPU test suite's profiles)
    issue_in_pack: bool | None = None
    progress: bool = True
    calls: list = field(default_factory=list)   # (index, kind) of every vLayer actually measured (tests)


# ------------------------------------------------------------------------------------------------
# vLayers on the device, one at a time
# ------------------------------------------------------------------------------------------------
class LayerSource:
    """Hands out vLayer i materialised on `device`.

    'stream': the chain is built on the meta device and each vLayer is materialised alone (to_empty,
    a normal(0, 0.02) fill, then every submodule's reset_parameters), so a 40 B-parameter chain needs
    memory for one vLayer. Used only when every buffer belongs to a module with reset_parameters
    (buffers such as masks or position ids must hold real values).
    'full': the chain is built on the CPU with the model's own initialisation and vLayers are copied.
    'auto': full below 1 GiB of weights, else stream when possible."""

    def __init__(self, spec, model_json: dict, device, seed: int = 0, mode: str = "auto"):
        self.device = torch.device(device)
        self.seed = seed
        self.meta = spec.build("meta")
        covered = all(_buffers_covered(m) for m in self.meta)
        if mode == "auto":
            mode = "full" if model_json.get("total_param_bytes", 0) < 2**30 or not covered else "stream"
        if mode == "stream" and not covered:
            raise ValueError("--materialize stream: some vLayer has buffers that no reset_parameters sets")
        self.mode = mode
        self.cpu = spec.build("cpu", seed=seed) if mode == "full" else None

    def __len__(self):
        return len(self.meta)

    def get(self, i: int) -> nn.Module:
        if self.cpu is not None:
            return copy.deepcopy(self.cpu[i]).to(self.device)
        layer = copy.deepcopy(self.meta[i]).to_empty(device=self.device)
        torch.manual_seed(self.seed * 100003 + i)
        with torch.no_grad():
            for p in layer.parameters():
                if p.is_floating_point():
                    p.normal_(0.0, 0.02)
                else:
                    p.zero_()
            for m in layer.modules():
                if callable(getattr(m, "reset_parameters", None)):
                    m.reset_parameters()
        return layer


def _buffers_covered(layer: nn.Module) -> bool:
    return all(not any(b is not None for b in m._buffers.values()) or callable(getattr(m, "reset_parameters", None))
               for m in layer.modules())


def _tile(t: torch.Tensor, u: int) -> torch.Tensor:
    """t's samples repeated to u, in t's memory format: a channels-last model's vLayer gets the channels-last
    activation the vLayer below hands it inside a pack (profiled NCHW, each vLayer paid a conversion the
    run does not: VGG416's convolutions profiled 1.04-1.09x NCHW's forward time; entry 106)."""
    if t.dim() == 0:
        return t.clone()
    idx = torch.arange(u, device=t.device) % t.shape[0]
    fmt = torch.channels_last if channels_last_only(t) else torch.contiguous_format
    return t.index_select(0, idx).contiguous(memory_format=fmt)


def make_inputs(x0: tuple, u: int, needs_grad: bool) -> tuple:
    """x0 tiled to u samples; with needs_grad the floating ones are leaves that require grad, as the inputs
    of a pack's first vLayer are in the runtime (and in pack_check)."""
    xs = tuple(_tile(t, u) for t in x0)
    if needs_grad:
        xs = tuple(t.detach().requires_grad_() if t.is_floating_point() else t for t in xs)
    return xs


def interior_inputs(x0: tuple, u: int, needs_grad: bool) -> tuple:
    """make_inputs, but the floating inputs are what a vLayer inside a pack gets: the output of the vLayer
    below (not a leaf), whose gradient goes on down. It matters under bf16 autocast, which caches the cast
    copy of a leaf that requires grad and shares it among every op that casts it, while inside a pack each
    op makes its own: bert's query, key and value Linears save three bf16 copies of their input there, not
    one (profiled with leaf inputs, bert-tiny's layer measured two copies too few).
    A view of the leaf is such a tensor, costs no memory, and its backward node is C++ (a Python autograd
    Function there would add its call to every timed backward); the leaf behind it takes the gradient,
    which Runner drops after each backward (clear_grads)."""
    xs = make_inputs(x0, u, needs_grad)
    return tuple(t.view_as(t) if t.requires_grad else t for t in xs)


def clear_grads(xs: tuple) -> None:
    """Drop the gradients a backward left in the inputs (in the leaf behind an interior input), so that
    every backward allocates them as the first did."""
    for t in xs:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            leaf = t if t._base is None else t._base
            if leaf.is_leaf:
                leaf.grad = None


class Runner:
    """Forward (no grad) and recompute-forward + backward of one vLayer or pack on fixed inputs."""

    def __init__(self, layers, x: tuple, device, precision: str):
        self.layers = list(layers)
        self.x = x
        self.device = torch.device(device)
        self.precision = precision
        self.gy = None
        self.host_waited = False    # set by time_split when fn waited for the GPU (timed bare)

    def _chain(self):
        y = self.x
        with gpumem.autocast(self.device, self.precision):
            for layer in self.layers:
                y = layer(*y)
        return y

    def fwd(self):
        with torch.no_grad():
            return self._chain()

    def fwd_grad(self):
        return self._chain()

    def bwd(self):
        y = self._chain()
        diff = [o for o in y if isinstance(o, torch.Tensor) and o.requires_grad]
        if self.gy is None:
            self.gy = [torch.ones_like(o) if o.dim() == 0 else torch.randn_like(o) for o in diff]
        if diff:
            torch.autograd.backward(diff, self.gy)
        del y, diff
        clear_grads(self.x)

    def bwd_seeded(self):
        """Like bwd, but the output gradient is a fresh copy that autograd frees once consumed, as the
        gradient one vLayer hands to the next inside a pack (used for memory, not timing)."""
        y = self._chain()
        diff = [o for o in y if isinstance(o, torch.Tensor) and o.requires_grad]
        if diff:
            _Seed.apply(self.gy, *diff).backward()
        del y, diff
        clear_grads(self.x)

    def time_split(self, fn, trials: int) -> tuple[list[float], list[float]]:
        """(device seconds, host issue seconds) of each trial.

        On CUDA a spin kernel is queued ahead of the start event, long enough that the host has queued
        all of fn's kernels before the GPU reaches that event: the events then time the kernels back to
        back, as they run inside a pack where the host is ahead of the GPU. Timed bare, a vLayer whose
        kernels take less than their launches is charged its launch time (vgg416's 14x14 layers at u = 8:
        2.8x their per-sample time at u = 32; docs/performance.md entry 31). The issue seconds (host time
        in fn) are what the host needs whatever the GPU does; the cost model charges a pack the larger of
        the two sums. On the CPU both are the wall time.

        If the host's issue outlasts the spin, the spin is made 3x that issue time and the trial is run
        again, once per call. If it outlasts that one too, fn waits for the GPU (more kernels than the
        launch queue holds, as in a pack of 82 vgg416 vLayers, or a synchronisation inside it, such as
        the caching allocator returning memory to the driver at the memory cap), which no spin can hide:
        the remaining trials are timed bare, and `self.host_waited` is set. (Growing the spin again each
        time instead made a vgg416 pack check run for minutes: the wait grew with it.)"""
        dev_s, issue_s = [], []
        self.host_waited = False
        if self.device.type != "cuda":
            for _ in range(trials):
                t0 = time.perf_counter()
                fn()
                dev_s.append(time.perf_counter() - t0)
            return dev_s, list(dev_s)
        spin = min(max(1e-3, 3 * self._time_once(fn, 0.0)[2]), _MAX_SPIN_S)     # from a bare run's issue
        grown = False
        for _ in range(trials):
            while True:
                spun, dev, issued = self._time_once(fn, 0.0 if self.host_waited else spin)
                if self.host_waited or spun >= issued * 1.1 + 50e-6:
                    break
                if grown:
                    self.host_waited = True
                else:
                    grown, spin = True, min(3 * issued, _MAX_SPIN_S)
            dev_s.append(dev)
            issue_s.append(issued)
        return dev_s, issue_s

    def issue_time(self, issue_s: list[float]) -> float:
        """The issue time of time_split's trials: on CUDA the fastest. It is host CPU work, and every slower
        trial adds what the host did meanwhile: two vgg416 profiles of one H100 host a minute apart summed
        the median backward issue at u = 8 to 230 and 337 ms (docs/performance.md entry 32), and a pack
        issues in less than its vLayers' sum anyway (0.48-0.75x for vgg416's forward packs). On the CPU
        the issue is the time, whose statistic is the median."""
        return min(issue_s) if self.device.type == "cuda" else statistics.median(issue_s)

    def _time_once(self, fn, spin_s: float) -> tuple[float, float, float]:
        """(seconds the GPU spun, device seconds of fn's kernels, host seconds issuing fn); spin_s = 0:
        bare, after a synchronize."""
        z, a, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        if spin_s <= 0:
            torch.cuda.synchronize(self.device)
        z.record()
        if spin_s > 0:
            torch.cuda._sleep(int(spin_s * _spin_cycles_per_s(self.device)))
        a.record()
        t0 = time.perf_counter()
        fn()
        issued = time.perf_counter() - t0
        b.record()
        b.synchronize()
        return z.elapsed_time(a) / 1e3, a.elapsed_time(b) / 1e3, issued


_SPIN_RATE: dict = {}
_MAX_SPIN_S = 2.0        # a spin never lasts longer: a trial then costs at most this much extra


def _spin_cycles_per_s(device) -> float:
    """Clock cycles per second of torch.cuda._sleep on this GPU, measured once per process."""
    key = torch.device(device).index or 0
    if key not in _SPIN_RATE:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)                     # warm-up (module load, clocks)
        rates = []
        for _ in range(3):
            a.record()
            torch.cuda._sleep(10_000_000)
            b.record()
            b.synchronize()
            rates.append(10_000_000 / (a.elapsed_time(b) / 1e3))
        _SPIN_RATE[key] = min(rates)                     # the slowest clock: the spin then lasts at least as asked
    return _SPIN_RATE[key]


class _Seed(torch.autograd.Function):
    """A 0-dim node on top of a vLayer's outputs whose backward hands each output a fresh copy of its
    gradient template, so nothing outside autograd holds the output gradient."""

    @staticmethod
    def forward(ctx, templates, *ys):
        ctx.templates = templates
        return ys[0].new_zeros(())

    @staticmethod
    def backward(ctx, _g):
        return (None, *[t.clone() for t in ctx.templates])


def _measure_at(layer, x0, u, first: bool, opts: ProfileOptions) -> dict:
    """Time and memory of one vLayer at microbatch u."""
    dev = torch.device(opts.device)
    r = Runner([layer], interior_inputs(x0, u, needs_grad=not first), dev, opts.precision)
    for _ in range(max(1, opts.warmup)):     # >= 1: output grads and dW exist before measuring
        r.fwd()
        r.bwd()
    with gpumem.MemoryMeter(dev) as m:
        base = m.current()
        m.reset_peak()
        y = r.fwd()
        fwd_peak = m.peak() - base
        del y
        base = m.current()
        m.reset_peak()
        y = r.fwd_grad()
        saved = m.current() - base
        # the forward alone, with its input alive: in a pack a vLayer that does not keep its input still
        # holds it until this forward ends (profile_data.Profile.dropped)
        fwd_grad_peak = m.peak() - base
        del y
        base = m.current()
        m.reset_peak()
        r.bwd_seeded()
        bwd_peak = m.peak() - base
        # again with the output gradient allocated before and held by the caller throughout (so not
        # counted): how the top vLayer of a pack runs, its output gradient being the pack's
        base = m.current()
        m.reset_peak()
        r.bwd()
        bwd_peak_held = m.peak() - base
    tf, issue_f = r.time_split(r.fwd, opts.trials)
    tb, issue_b = r.time_split(r.bwd, opts.trials)
    issue = r.issue_time
    return {"fwd_s": statistics.median(tf), "fwd_spread": [min(tf), max(tf)],
            "bwd_s": statistics.median(tb), "bwd_spread": [min(tb), max(tb)],
            "fwd_issue_s": issue(issue_f), "bwd_issue_s": issue(issue_b),
            "fwd_issue_spread": [min(issue_f), max(issue_f)], "bwd_issue_spread": [min(issue_b), max(issue_b)],
            "fwd_peak_bytes": int(fwd_peak), "fwd_grad_peak_bytes": int(fwd_grad_peak),
            "saved_bytes": int(saved), "bwd_peak_bytes": int(bwd_peak),
            "bwd_peak_held_bytes": int(bwd_peak_held)}


# vLayers chained for the backward issue inside a pack (bwd_issue_in_pack)
ISSUE_CHAIN_K = 4


def bwd_issue_in_pack(layer: nn.Module, x0: tuple, u: int, first: bool, opts: ProfileOptions) -> dict | None:
    """How much of a vLayer's backward issue it costs inside a pack. The profile times each vLayer's
    recompute and backward alone, so its issue time pays once for what a pack pays once a task: the
    backward call, the autograd engine's start and hand-over. Summed over swap-pp's VGG416 stage of 274
    vLayers, those isolated times came to 145 ms a task, where the run issued one every 85 ms
    (docs/performance.md entry 95).
    Where the vLayer's outputs have its inputs' shapes and dtypes, it is timed chained ISSUE_CHAIN_K times (the
    same module, so the same kernels) beside alone, at microbatch u. `factor` is a vLayer's marginal issue
    in a chain over its issue alone: (chain - alone) / ((k - 1) * alone), clamped to [0, 1] (a vLayer inside a
    pack does not issue slower than alone, whose time includes all of a call's fixed cost). None where the
    vLayer does not chain onto itself (shapes change, the first vLayer's ids, the loss), or where the chain
    runs out of memory; inputs it passes through unchanged (GPT-2's labels) chain."""
    if first:
        return None
    x = interior_inputs(x0, u, needs_grad=True)
    if not any(t.is_floating_point() for t in x):
        return None
    with torch.no_grad(), gpumem.autocast(torch.device(opts.device), opts.precision):
        y = layer(*x)
    y = y if isinstance(y, tuple) else (y,)
    if len(y) != len(x) or any(not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype
                               for a, b in zip(x, y)):
        return None
    del y
    dev = torch.device(opts.device)
    alone, chain = Runner([layer], x, dev, opts.precision), Runner([layer] * ISSUE_CHAIN_K, x, dev, opts.precision)
    try:
        for r in (alone, chain):
            for _ in range(max(1, opts.warmup)):
                r.bwd()
        one = alone.issue_time(alone.time_split(alone.bwd, opts.trials)[1])
        k = chain.issue_time(chain.time_split(chain.bwd, opts.trials)[1])
    except Exception as e:  # noqa: BLE001 - a chain out of memory (a large smallest u) is no measurement
        if not gpumem.is_oom(e):
            raise
        gpumem.free_cached(dev)
        return None
    finally:
        for t in layer.parameters():
            t.grad = None
    factor = min(1.0, max(0.0, (k - one) / ((ISSUE_CHAIN_K - 1) * one))) if one > 0 else 1.0
    return {"k": ISSUE_CHAIN_K, "u": u, "alone_s": one, "chain_s": k, "factor": factor}


def retention(layer: nn.Module, x0: tuple, u: int, first: bool, opts: ProfileOptions) -> dict:
    """What a vLayer keeps alive of its inputs and outputs once its forward with grad is done, from the
    storages autograd saves for its backward (torch.autograd.graph.saved_tensors_hooks) in one such
    forward at microbatch u, under the profile's precision. Exact and device-independent: no memory is
    measured. (A memory drop cannot tell: the leaf behind the profiler's input is held by autograd's
    AccumulateGrad node whatever the vLayer saves.)

    retains_input: a floating input's storage is saved (itself or a view; under autocast a cast copy is
    another storage, so it does not count) or is one of the outputs' storages (passed through). Either way
    the input outlives the forward in a pack; otherwise (cross-entropy keeps its log-softmax, not its
    logits) the pack frees it as soon as this forward ends.
    freeable_output_bytes_per_sample: the bytes of the floating outputs in storages of their own (not an
    input's, a weight's or a buffer's) that the vLayer does not save itself. saved_bytes counts them, and
    they are what a pack frees once the next vLayer's forward has run, if that one does not retain its
    input. Integer outputs are left out (labels: cross-entropy saves its target)."""
    x = interior_inputs(x0, u, needs_grad=not first)
    saved: set[int] = set()

    def pack(t: torch.Tensor) -> None:
        # Nothing kept: no backward runs here. Returning t itself made an output that its own grad_fn saves
        # (ReLU's result) a reference cycle through autograd that the garbage collector cannot see; it
        # kept every profiled vLayer's graph, output and weights alive (vgg416: 1.1 GiB after a CPU
        # profile; on the H100 the pack checks after a profile ran out of memory under the cap,
        # docs/performance.md entry 38).
        saved.add(gpumem._storage_key(t))
        return None

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda _: None):
        y = Runner([layer], x, opts.device, opts.precision).fwd_grad()
    floats = [t for t in x if t.is_floating_point()]
    inputs = {gpumem._storage_key(t) for t in floats}
    outs = {gpumem._storage_key(t): t.untyped_storage().nbytes() for t in y
            if isinstance(t, torch.Tensor) and t.is_floating_point()}
    own = {gpumem._storage_key(t) for t in (*layer.parameters(), *layer.buffers())}
    kept = saved | inputs | own | {0}            # 0: no storage (empty, meta)
    freeable = sum(n for key, n in outs.items() if key not in kept)
    return {"retains_input": bool(inputs & (saved | set(outs))),
            "freeable_output_bytes_per_sample": int(freeable // u)}


def _extrapolate(meas: dict, key: str, u: int) -> float:
    us = sorted(meas)
    return _interp(us, [meas[v][key] for v in us], u)


def sweep_layer(layer, x0, rec: dict, first: bool, opts: ProfileOptions, limit: float | None, bar=None):
    """Measure one vLayer over the sweep; returns ({u: measurements}, reason the sweep stopped)."""
    dev = torch.device(opts.device)
    explicit = opts.ubatch is not None
    us = sorted(opts.ubatch) if explicit else _geometric(opts.max_ubatch)
    resident = rec["_resident"]
    per_u = rec["_io_bytes"]
    meas, stop, failed = {}, "end of sweep", []
    for u in us:
        if limit is not None and len(meas) >= 2:
            need = resident + per_u * u + max(_extrapolate(meas, "bwd_peak_bytes", u),
                                              _extrapolate(meas, "fwd_peak_bytes", u))
            if need > limit:
                stop = f"u={u} predicted {format_bytes(need)} > {format_bytes(limit)}"
                break
        if bar:
            bar.set_note(f"vLayer {rec['index']} {rec['kind']} u={u}")
        oom = False
        try:
            meas[u] = _measure_at(layer, x0, u, first, opts)
        except Exception as e:  # noqa: BLE001 - OOM ends the sweep; other errors: see below
            if gpumem.is_oom(e):
                oom = True
            elif meas:
                raise
            else:
                # some vLayers cannot run at small u (BatchNorm on a 1x1 map needs u >= 2): skip this u;
                # if no u works, the first error is raised
                failed.append((u, e))
                for t in layer.parameters():
                    t.grad = None
                continue
        if oom:
            for p in layer.parameters():
                p.grad = None
            gpumem.free_cached(dev)
            stop = f"out of memory at u={u}"
            break
        if not explicit and meas[u]["bwd_spread"][0] > opts.max_trial_s:   # fastest trial: robust to noise
            stop = f"backward {meas[u]['bwd_spread'][0]:.3f} s > {opts.max_trial_s} s at u={u}"
            break
    for p in layer.parameters():
        p.grad = None
    if failed and not meas and not stop.startswith("out of memory"):
        raise failed[0][1]
    if failed:
        stop += "; failed at u=" + ",".join(f"{u} ({type(e).__name__}: {str(e)[:80]})" for u, e in failed)
    return meas, stop


def heaviest_signature(vlayers: list[dict]) -> str:
    """The vLayer kind that carries most of the model's forward FLOPs (its count times its FLOPs per sample):
    GPT-2's and BERT's block. Its backward, run back to back, is what a run's GPU does for most of its time."""
    weight: dict[str, float] = {}
    for v in vlayers:
        weight[v["signature"]] = weight.get(v["signature"], 0.0) + float(v.get("flops_fwd_per_sample") or 0.0)
    return max(weight, key=lambda s: (weight[s], -min(v["index"] for v in vlayers if v["signature"] == s)))


def sustained(layer, x0, meas: dict, first: bool, opts: ProfileOptions) -> dict:
    """The vLayer's backward (recompute forward + backward) back to back for opts.sustain_s seconds at each
    swept u whose profiled backward is within opts.max_trial_s, largest u first, against its profiled time.

    The sweep's trials each follow a spin kernel and last at most max_trial_s, so the GPU is timed at the
    clock it boosts to. A run computes for seconds without a pause, and an H100 doing that in TF32 sits at
    its power cap at a lower clock (docs/performance.md entry 65: 1,748 against 1,980 MHz, tasks 1.05x their
    profile). How much lower than its profile depends on u: a short trial at a small u stays at the boost
    clock, a long one at a large u already meets the cap (the 36-layer block: 1.056 at u = 4, 1.019 at
    u = 32; entry 68). So each u gets its own stretch, and `by_ubatch` its factor: the median of the second
    half of the repetitions over the profiled median, what `harmony schedule --compute-scale profile`
    multiplies that u's GPU times by. The largest u's stretch is also the record's top level (the one
    stretch profiles before entry 68 hold). Where the host's issue of one backward takes as long as its
    kernels (a small u or vLayer), the GPU waits for the host between repetitions and the stretch says
    nothing about the clock: that u's `factor` is then None, with the reason (host_bound_reason)."""
    fits = [u for u in sorted(meas) if meas[u]["bwd_s"] <= opts.max_trial_s] or [min(meas)]
    # largest first: its stretch brings the GPU to the cap the smaller ones are then timed at
    stretches = {u: _stretch(layer, x0, meas, u, first, opts) for u in reversed(fits)}
    for p in layer.parameters():
        p.grad = None
    return {**stretches[fits[-1]], "by_ubatch": {str(u): stretches[u] for u in fits}}


def _stretch(layer, x0, meas: dict, u: int, first: bool, opts: ProfileOptions) -> dict:
    """One back-to-back stretch of the vLayer's backward at u (see sustained)."""
    dev = torch.device(opts.device)
    profiled = meas[u]["bwd_s"]
    r = Runner([layer], interior_inputs(x0, u, needs_grad=not first), dev, opts.precision)
    r.bwd()                                                   # output gradients and dW exist
    reps = max(4, int(opts.sustain_s / max(profiled, 1e-6)) + 1)
    times: list[float] = []
    issued: list[float] = []
    if dev.type == "cuda":
        # queued without a pause between repetitions, as a task's microbatches are; timed by events
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        torch.cuda.synchronize(dev)
        ev[0].record()
        for k in range(reps):
            t0 = time.perf_counter()
            r.bwd()
            issued.append(time.perf_counter() - t0)
            ev[k + 1].record()
        ev[-1].synchronize()
        times = [ev[k].elapsed_time(ev[k + 1]) / 1e3 for k in range(reps)]
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            r.bwd()
            times.append(time.perf_counter() - t0)
    late = statistics.median(times[len(times) // 2:])
    rec = {"u": u, "repetitions": reps, "seconds": round(sum(times), 3), "profiled_bwd_s": profiled,
           "first_bwd_s": times[0], "sustained_bwd_s": late, "factor": round(late / profiled, 4)}
    if issued:
        # the sweep's issue time (behind a spin, the launch queue empty), not the stretch's own: back to back,
        # once the launch queue is full every launch waits for a slot, so issuing a repetition takes as long as
        # its kernels however fast the host is (item 32's first call: 184.6 ms of 185.1 on the 36-layer block,
        # whose sweep issue is far less)
        rec["issue_s"] = meas[u]["bwd_issue_s"]
        rec["issue_back_to_back_s"] = statistics.median(issued[len(issued) // 2:])
        reason = host_bound_reason(rec["issue_s"], profiled)
        if reason:
            rec["factor"], rec["factor_missing"] = None, reason
    return rec


def host_bound_reason(issue_s: float, device_s: float) -> str | None:
    """Why a back-to-back stretch of a pass whose host issue takes issue_s and whose kernels take device_s
    cannot time the GPU, or None when it can: at 80% or more the GPU waits for the host between passes."""
    if issue_s < 0.8 * device_s:
        return None
    return (f"host-bound: issuing a backward took {issue_s * 1e3:.2f} ms of its {device_s * 1e3:.2f} ms of "
            f"kernels, so back to back the GPU would wait for the host; no clock to read")


def _geometric(top: int) -> list[int]:
    out, u = [], 1
    while u <= top:
        out.append(u)
        u *= 2
    return out


def optimizer_call_overhead(cfg, trials: int) -> float:
    """Fixed cost of one optimizer step call (a 1-element parameter): what a pack pays once however many
    vLayers it has. The simulator subtracts it from each vLayer's step time and adds it once per pack."""
    return optimizer_cost(torch.nn.Linear(1, 1, bias=False), cfg, trials)["opt_step_s"]


def optimizer_cost(layer: nn.Module, cfg, trials: int) -> dict:
    """K bytes and step time of the runtime's CPU optimizer on this vLayer's trainable parameters."""
    from harmony.optim import make_optimizer
    params = [p.detach().to("cpu", copy=True).requires_grad_() for p in layer.parameters() if p.requires_grad]
    if not params:
        return {"optim_bytes": 0, "opt_step_s": 0.0, "opt_median_s": 0.0, "opt_spread": [0.0, 0.0]}
    g = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * 1e-3
    opt = make_optimizer(params, cfg)
    # Warm-up: the first step allocates the state, and the first few steps after other work pay for
    # waking the intra-op thread pool (seen on the H100 host: 9 ms instead of 0.1 ms for a 147 KB layer).
    for _ in range(3):
        opt.step()
    k = sum(s.numel() * s.element_size() for p in params for s in opt.state[p].values()
            if isinstance(s, torch.Tensor) and s.numel() == p.numel() and s.dim() > 0)
    ts = []
    for _ in range(max(trials, 7)):
        t0 = time.perf_counter()
        opt.step()
        ts.append(time.perf_counter() - t0)
    # The fastest trial, not the median: the runtime's update threads are long-lived and step warm state,
    # while the trials here are hit by waking the thread pool (H100 host, vgg416: median 16 ms, fastest
    # 0.27 ms for the same 9.4 MB layer; the median made the simulator predict VGG416 D=16 at 2.1x the
    # measured time, the fastest trial at 0.92x; docs/performance.md entry 8).
    return {"optim_bytes": int(k), "opt_step_s": min(ts), "opt_median_s": statistics.median(ts),
            "opt_spread": [min(ts), max(ts)]}


# ------------------------------------------------------------------------------------------------
# The whole model
# ------------------------------------------------------------------------------------------------
def host_gpu_count() -> int:
    """GPUs of the host, whatever CUDA_VISIBLE_DEVICES hides (a profile run one per GPU sees one)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML (CPU machine, container without the library)
        return torch.cuda.device_count() if torch.cuda.is_available() else 0


def update_threads_default(dev: torch.device, host_gpus: int | None = None) -> tuple[int, str]:
    """CPU threads the optimizer step is timed with, and why. A run's worker steps its packs with
    cpu_count // N threads (harmony/runtime/worker.py); on a GPU host the profile takes N = every GPU of
    the host. Timing with all cores instead put 4 concurrent profiles x 64 threads on a 64-core 4x H200
    host: steps 15x slower than the runs' (docs/performance.md entry 12)."""
    cores = os.cpu_count() or 1
    if dev.type != "cuda":
        return torch.get_num_threads(), "torch default (CPU device)"
    gpus = max(host_gpu_count() if host_gpus is None else host_gpus, 1)
    return max(1, cores // gpus), f"{cores} CPU cores // {gpus} GPUs of the host (a worker's share at N = {gpus})"


def profile_model(model_json: dict, opts: ProfileOptions) -> dict:
    from harmony.decompose import spec_from_model_json
    t_start = time.perf_counter()
    dev = torch.device(opts.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {opts.device}: CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is not None:
        torch.cuda.set_device(dev)
    if opts.max_ubatch is None:
        opts.max_ubatch = 8 if dev.type == "cpu" else 1024
    if opts.warmup is None:
        # CPU: 3 untimed runs; with 1, the first vLayers of tiny models were timed at 45 ms instead of
        # 0.05 ms (thread-pool wake-up and first-call primitive creation landing in the median).
        opts.warmup = 3 if dev.type == "cpu" else 2
    if opts.max_trial_s is None:
        opts.max_trial_s = 0.25
    if opts.issue_in_pack is None:
        opts.issue_in_pack = dev.type == "cuda"
    prec_rec = gpumem.set_precision(opts.precision)
    cap_rec = gpumem.apply_memory_cap(dev, opts.gpu_memory)
    host_gpus = host_gpu_count() if dev.type == "cuda" else 0
    threads, threads_rule = (opts.threads, "--threads") if opts.threads else update_threads_default(dev, host_gpus)
    torch.set_num_threads(threads)
    usable = gpumem.usable_bytes(dev, opts.gpu_memory)
    spec = spec_from_model_json(model_json)
    cfg = spec.optimizer
    vl = model_json["vlayers"]
    source = LayerSource(spec, model_json, dev, seed=opts.seed, mode=opts.materialize)
    if len(source) != len(vl):
        raise ArtifactError(f"model.json lists {len(vl)} vLayers but the model builds {len(source)}: "
                            f"regenerate it with `harmony decompose`")
    first_of: dict[str, int] = {}
    for r in vl:
        first_of.setdefault(r["signature"], r["index"])
    unique = sorted(set(first_of.values()))
    heavy = heaviest_signature(vl) if opts.sustain_s > 0 else None
    sustain = None

    g = torch.Generator().manual_seed(opts.seed)
    x = tuple(t.to(dev) for t in spec.synthetic_batch(WALK_BATCH, g))
    results: dict[int, dict] = {}
    bar = Progress(len(unique), desc=f"profile {model_json['model']}", enabled=opts.progress)
    # the GPU's clock while the trials ran, to set beside a run's (harmony/gpu_clocks.py); the sustained
    # stretch (--sustain) is summarised on its own and left out of the trials'
    clocks = DeviceClocks([dev])
    trial_clocks: list = []
    with bar:
        for i in range(len(vl)):
            layer = source.get(i)
            if first_of[vl[i]["signature"]] == i:
                rec = _static_record(vl[i])
                with torch.no_grad():
                    w = sum(p.numel() * p.element_size() for p in layer.parameters())
                rec["_resident"] = 2 * w + rec["buffer_bytes"]
                rec["_io_bytes"] = rec["input_bytes_per_sample"] + rec["output_bytes_per_sample"]
                limit = None
                if usable is not None and dev.type == "cuda":
                    limit = usable * opts.headroom - torch.cuda.memory_allocated(dev) + w + rec["buffer_bytes"]
                opts.calls.append((i, vl[i]["kind"]))
                meas, stop = sweep_layer(layer, x, rec, first=(i == 0), opts=opts, limit=limit, bar=bar)
                if not meas:
                    raise ValueError(f"vLayer {i} ({vl[i]['kind']}) does not fit on {opts.device} even at u=1 "
                                     f"({stop}); raise --gpu-memory or split the layer")
                rec.update(retention(layer, x, min(meas), first=(i == 0), opts=opts))
                if opts.issue_in_pack:
                    rec["bwd_issue_in_pack"] = bwd_issue_in_pack(layer, x, min(meas), first=(i == 0), opts=opts)
                rec.update(optimizer_cost(layer, cfg, opts.opt_trials))
                rec["_meas"], rec["sweep_stop"] = meas, stop
                results[i] = rec
                if vl[i]["signature"] == heavy:
                    bar.set_note(f"vLayer {i} {vl[i]['kind']}: backward back to back, {opts.sustain_s:g} s")
                    trial_clocks.append((clocks.take() or [None])[0])
                    sustain = {"vlayer": i, "kind": vl[i]["kind"],
                               **sustained(layer, x, meas, first=(i == 0), opts=opts),
                               "gpu_clocks": (clocks.take() or [None])[0]}
                bar.update()
            with torch.no_grad(), gpumem.autocast(dev, opts.precision):
                x = layer(*x)
            del layer
    gpu_clocks = combine(trial_clocks + [(clocks.stop() or [None])[0]])
    us = sorted({u for r in results.values() for u in r["_meas"]})
    out_layers = []
    for r in vl:
        rep = results[first_of[r["signature"]]]
        rec = _static_record(r)
        rec["profiled_as"] = rep["index"]
        for k in ("weight_bytes", "buffer_bytes", "grad_bytes", *RETENTION):
            rec[k] = rep[k]
        rec.update(optim_bytes=rep["optim_bytes"], opt_step_s=rep["opt_step_s"], opt_median_s=rep["opt_median_s"],
                   opt_spread=rep["opt_spread"],
                   sweep_stop=rep["sweep_stop"])
        if "bwd_issue_in_pack" in rep:
            rec["bwd_issue_in_pack"] = rep["bwd_issue_in_pack"]
        meas = rep["_meas"]
        mu = sorted(meas)
        for key in SERIES:
            rec[key] = [meas[u][key] if u in meas else _interp(mu, [meas[v][key] for v in mu], u) for u in us]
        for key in ("fwd_spread", "bwd_spread", "fwd_issue_spread", "bwd_issue_spread"):
            rec[key] = [meas[u][key] if u in meas else
                        [_interp(mu, [meas[v][key][j] for v in mu], u) for j in (0, 1)] for u in us]
        rec["measured"] = [u in meas for u in us]
        out_layers.append(rec)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    return {
        "artifact": PROFILE_ARTIFACT, "schema_version": PROFILE_SCHEMA,
        "model": model_json["model"], "device": str(dev), "gpu": gpu, "precision": opts.precision,
        "precision_settings": prec_rec, "gpu_memory_cap": opts.gpu_memory, "memory_cap": cap_rec,
        "optimizer": spec.describe()["optimizer"], "threads": torch.get_num_threads(),
        "threads_rule": threads_rule, "cpu_count": os.cpu_count(),
        "host_gpus": host_gpus,
        # the host's memory, which bounds the run's host arena: `harmony schedule` checks candidates against it
        # (schedules are often made on another machine than the GPU host the profile was taken on)
        **host_memory_record(),
        "opt_call_overhead_s": optimizer_call_overhead(cfg, opts.opt_trials),
        "torch": torch.__version__, "trials": opts.trials, "warmup": opts.warmup,
        "timing": TIMING_CUDA if dev.type == "cuda" else "time.perf_counter",
        # of the trials (CUDA); profiles before docs/performance.md entry 32's follow-up took the median
        "issue_statistic": "min" if dev.type == "cuda" else "median (the time)",
        "memory_method": ("torch.cuda.max_memory_allocated deltas" if dev.type == "cuda"
                          else "live tensor storages (TorchDispatchMode tracker)"),
        "gpu_clocks": gpu_clocks,
        # the heaviest vLayer's backward back to back (--sustain): the clock a run holds against the trials'
        "sustained": sustain,
        "cudnn_benchmark": torch.backends.cudnn.benchmark, "materialize": source.mode, "ubatch_sizes": us, "unique_vlayers": len(unique),
        "wall_s": time.perf_counter() - t_start, "vlayers": out_layers,
    }


def _static_record(r: dict) -> dict:
    from harmony.models.base import TensorSpec
    inb = sum(TensorSpec.from_json(s).bytes_per_sample() for s in r["inputs"])
    outb = sum(TensorSpec.from_json(s).bytes_per_sample() for s in r["outputs"])
    return {"index": r["index"], "kind": r["kind"], "signature": r["signature"],
            "weight_bytes": r["param_bytes"], "buffer_bytes": r["buffer_bytes"],
            "grad_bytes": r["trainable_param_bytes"], "input_bytes_per_sample": inb,
            "output_bytes_per_sample": outb, "flops_fwd_per_sample": r.get("flops_fwd_per_sample"),
            "is_loss": r.get("is_loss", False), "param_tensors": r.get("param_tensors")}


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def parse_ubatch(text: str | None) -> list[int] | None:
    if text is None or text == "":
        return None
    try:
        us = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"--ubatch expects comma-separated positive integers, e.g. 1,2,4,8; got {text!r}") from None
    if not us or us[0] < 1:
        raise ValueError(f"--ubatch expects comma-separated positive integers, e.g. 1,2,4,8; got {text!r}")
    return us


def parse_range(text: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"--check-pack expects START:END (half-open vLayer range), got {text!r}") from None
    return a, b


def add_arguments(p) -> None:
    p.add_argument("model_json", help="model.json from `harmony decompose`")
    p.add_argument("-o", "--output", required=True, help="profile.json to write")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    gpumem.add_gpu_memory_argument(p)
    p.add_argument("--ubatch", default=None, help="exact microbatch sizes, e.g. 1,2,4,8 "
                   "(default: 1,2,4,... up to the largest that fits)")
    p.add_argument("--max-ubatch", type=int, default=None, help="ceiling of the default sweep (8 CPU, 1024 CUDA)")
    p.add_argument("--max-trial-s", type=float, default=None,
                   help="stop a vLayer's sweep after a u whose fastest backward takes longer (default 0.25 s)")
    p.add_argument("--trials", type=int, default=5, help="timed runs per measurement (median kept; >= 1)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs before measuring (1 CPU, 2 CUDA)")
    p.add_argument("--precision", default="fp32", choices=gpumem.PRECISIONS)
    p.add_argument("--materialize", default="auto", choices=["auto", "full", "stream"],
                   help="how vLayers get weights (see harmony.profile.LayerSource)")
    p.add_argument("--check-pack", default=None, metavar="START:END",
                   help="after profiling, run vLayers [START, END) as a pack and compare its measured peak "
                        "memory and its forward/backward times with the predictions from the profile "
                        "(stored as pack_check)")
    p.add_argument("--check-ubatch", type=int, default=None, help="u of --check-pack (default: the largest "
                   "measured u whose predicted pack peak is under 80%% of the cap)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of the timed optimizer step (default: "
                   "CPU cores / GPUs of the host on CUDA, a run worker's share; torch's default on CPU)")
    p.add_argument("--issue-in-pack", action=argparse.BooleanOptionalAction, default=None,
                   help="time each vLayer's backward issue chained four times beside alone (bwd_issue_in_pack; "
                        "default: on CUDA only)")
    p.add_argument("--sustain", type=float, default=0.0, metavar="SECONDS",
                   help="after its sweep, run the heaviest vLayer's backward back to back this long at each swept "
                        "u and record its time against the profiled one (`sustained.by_ubatch`: the GPU's "
                        "sustained clock, e.g. at its power cap, against the boost clock the short trials see; "
                        "`harmony schedule --compute-scale profile` plans with it). 4 s per u is ample on an "
                        "H100; default 0: off")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")


def main(args) -> int:
    from harmony.decompose import load_model_json
    if args.trials < 1 or (args.warmup is not None and args.warmup < 0):
        raise ValueError("--trials must be >= 1 and --warmup >= 0")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: give a positive number of CPU threads (or leave it out)")
    if not 0 <= args.sustain <= 600:
        raise ValueError(f"--sustain {args.sustain}: give seconds per microbatch size between 0 (off) and 600 (4 s is ample)")
    opts = ProfileOptions(device=args.device, ubatch=parse_ubatch(args.ubatch), trials=args.trials,
                          warmup=args.warmup, precision=args.precision,
                          gpu_memory=gpumem.parse_cap(args.gpu_memory), max_ubatch=args.max_ubatch,
                          max_trial_s=args.max_trial_s, materialize=args.materialize, progress=not args.quiet,
                          threads=args.threads, sustain_s=args.sustain, issue_in_pack=args.issue_in_pack)
    rng = parse_range(args.check_pack) if args.check_pack else None
    mj = load_model_json(args.model_json)
    prof = profile_model(mj, opts)
    if rng:
        from harmony.pack_check import check_pack
        prof["pack_check"] = check_pack(mj, prof, rng, args.check_ubatch, opts.device, opts.precision,
                                        trials=opts.trials)
    write_json(args.output, prof, indent=None)      # large: one line (see experiments/compact_results.py)
    if not args.quiet:
        print_summary(prof, file=sys.stderr)
    print(f"wrote {args.output}: {len(prof['vlayers'])} vLayers ({prof['unique_vlayers']} profiled), "
          f"u in {prof['ubatch_sizes']}, {prof['wall_s']:.1f} s", file=sys.stderr)
    return 0


def print_summary(prof: dict, file=sys.stdout) -> None:
    us = prof["ubatch_sizes"]
    lo, hi = us[0], us[-1]
    counts: dict[int, int] = {}
    for v in prof["vlayers"]:
        counts[v["profiled_as"]] = counts.get(v["profiled_as"], 0) + 1
    cap = prof.get("gpu_memory_cap")
    print(f"\n{prof['model']} on {prof['device']} ({prof.get('gpu') or 'cpu'}), {prof['precision']}, "
          f"cap {format_bytes(cap) if cap else 'none'}, {prof['threads']} CPU threads; "
          f"times ms at u={lo} | u={hi}", file=file)
    hdr = (f"{'idx':>5} {'kind':<22} {'x':>4} {'W':>10} {'K':>10} {'fwd':>16} {'bwd':>16} "
           f"{'saved/u':>10} {'bwd_peak@hi':>11} {'opt ms':>7} {'max u':>5}")
    print(hdr, file=file)
    P = Profile(prof)
    for i, n in sorted(counts.items()):
        v = prof["vlayers"][i]
        mu = max(u for u, m in zip(us, v["measured"]) if m)
        print(f"{i:>5} {v['kind'][:22]:<22} {n:>4} {format_bytes(v['weight_bytes']):>10} "
              f"{format_bytes(v['optim_bytes']):>10} "
              f"{P.fwd_time(i, lo) * 1e3:>7.2f}|{P.fwd_time(i, hi) * 1e3:<8.2f} "
              f"{P.bwd_time(i, lo) * 1e3:>7.2f}|{P.bwd_time(i, hi) * 1e3:<8.2f} "
              f"{format_bytes(P.saved(i, hi) / hi):>10} {format_bytes(P.bwd_peak(i, hi)):>11} "
              f"{v['opt_step_s'] * 1e3:>7.2f} {mu:>5}", file=file)
    L = range(P.num_layers)
    print(f"total: {P.num_layers} vLayers, W {format_bytes(sum(v['weight_bytes'] for v in prof['vlayers']))}, "
          f"B {format_bytes(sum(v['buffer_bytes'] for v in prof['vlayers']))}, "
          f"K {format_bytes(sum(v['optim_bytes'] for v in prof['vlayers']))}; per sample at u={hi}: "
          f"fwd {sum(P.fwd_time(i, hi) for i in L) / hi * 1e3:.2f} ms, "
          f"bwd {sum(P.bwd_time(i, hi) for i in L) / hi * 1e3:.2f} ms; "
          f"CPU optimizer {sum(P.opt_time(i) for i in L) * 1e3:.1f} ms/iteration", file=file)
    sus = prof.get("sustained")
    if sus:
        from harmony.gpu_clocks import line as clock_line
        factor = (f"factor {sus['factor']:.3f} (`harmony schedule --compute-scale profile`)" if sus.get("factor")
                  else f"no factor: {sus.get('factor_missing')}")
        print(f"sustained: vLayer {sus['vlayer']} ({sus['kind']}) backward at u={sus['u']} back to back, "
              f"{sus['repetitions']} times in {sus['seconds']:.1f} s: {sus['sustained_bwd_s'] * 1e3:.2f} ms "
              f"against {sus['profiled_bwd_s'] * 1e3:.2f} ms profiled, {factor}", file=file)
        if len(sus.get("by_ubatch") or {}) > 1:
            print("  by u: " + ", ".join(f"u={u} " + (f"{s['factor']:.3f}" if s.get("factor") else "none (host-bound)")
                                         for u, s in sus["by_ubatch"].items()), file=file)
        if sus.get("gpu_clocks"):
            print("  " + clock_line("meanwhile the GPU", sus["gpu_clocks"]), file=file)
    pc = prof.get("pack_check")
    if pc and pc.get("status") == "oom":
        print(f"pack {pc['range'][0]}:{pc['range'][1]} at u={pc['u']}: predicted "
              f"{format_bytes(pc['predicted_bytes'])}, did not fit under the cap ({pc['message']})", file=file)
    elif pc:
        print(f"pack {pc['range'][0]}:{pc['range'][1]} at u={pc['u']}: predicted "
              f"{format_bytes(pc['predicted_bytes'])}, measured {format_bytes(pc['measured_bytes'])} "
              f"({pc['rel_error'] * 100:+.1f}%; activations {pc['rel_error_activations'] * 100:+.1f}%)", file=file)
        if pc.get("measured_fwd_s") is not None:
            print(f"  time: forward {pc['measured_fwd_s'] * 1e3:.2f} ms measured as a pack, "
                  f"{pc['predicted_fwd_s'] * 1e3:.2f} ms summed over its vLayers ({pc['time_ratio_fwd']:.2f}x); "
                  f"backward {pc['measured_bwd_s'] * 1e3:.2f} / {pc['predicted_bwd_s'] * 1e3:.2f} ms "
                  f"({pc['time_ratio_bwd']:.2f}x)", file=file)
        if pc.get("measured_fwd_device_s") is not None:
            print(f"  the pack's device | host issue time: forward {pc['measured_fwd_device_s'] * 1e3:.2f} | "
                  f"{pc['measured_fwd_issue_s'] * 1e3:.2f} ms, backward {pc['measured_bwd_device_s'] * 1e3:.2f} | "
                  f"{pc['measured_bwd_issue_s'] * 1e3:.2f} ms"
                  + "".join(f"; the {k} waited for the GPU (timed bare)" for k in ("fwd", "bwd")
                            if pc.get(f"{k}_host_waited")), file=file)
