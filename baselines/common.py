"""What every baseline shares: settings, model loading, precision and memory cap, the timed training loop
and the run record.

A baseline is a `step(i, batch) -> loss` (one training iteration on one minibatch) plus the byte counts of
the copies it issues itself. `train_loop` times steps (synchronize, then clock), keeps warm-up out of the
medians, traces one steady-state iteration with torch.profiler on CUDA (harmony.memcpy_trace), and turns
an out-of-memory error into a run record with status "oom" instead of a crash. Every exit path writes a
summary that `harmony.metrics.validate_summary` accepts.
"""
from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import torch

from harmony.gpu_clocks import DeviceClocks, per_gpu
from harmony.gpumem import alloc_retries
from harmony.jsonio import (Deferred, JsonlWriter, call_window_s, outlasts_deadline, partial_path,
                            seconds_left)
from harmony.jsonio import had_whole_call as began_with_whole_call
from harmony.metrics import IterationRecord, env_record, make_summary, steady_state, validate_summary

_T0 = time.time()      # about process start (this module is imported first by every baseline)


def log_phase(system: str, what: str) -> None:
    """One timestamped start-up/progress line on stderr ("[zero-offload +12.3 s 17:41:05] what"): the
    GPU logs then show where a run's time went, also when its limit kills it."""
    print(f"[{system} +{time.time() - _T0:.1f} s {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr,
          flush=True)


SYSTEMS = ("swap-dp", "swap-pp", "fsdp-offload", "zero-offload", "resident")
PRECISIONS = ("fp32", "tf32", "bf16")


class Infeasible(Exception):
    """A configuration that cannot run under its constraints (a result: status 'infeasible')."""


class Unavailable(Exception):
    """The system cannot run in this environment (a result: status 'unavailable')."""


class RankFailed(Exception):
    """An iteration failed (OOM, infeasible, error) in one rank of a system of spawned ranks. Its peers may
    wait in a collective it will never join, so the rank does not go on to the loop's own gathers: it raises
    this out of train_loop, and baselines/ranks.py's _rank_main leaves `status` and `message` for the parent
    and ends the process at once (no teardown: destroying a process group a peer waits in can wait as
    long); torch's spawn then ends the others, and spawn_ranks raises it again in the parent, which
    records `status`.
    Before, the rank broke out of the loop as a single process does, into a gather while its peer waited
    inside DeepSpeed's step: zero-offload gpt2-xl D=256 u=4 on 2x H200 sat silent after iteration 2 for the
    rest of x2-grid34 (on gloo the peer's collective fails instead, and the run was recorded as an error)."""

    def __init__(self, status: str, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


@dataclass
class Settings:
    system: str
    model: str                      # the argument as given (zoo name or model.json path)
    minibatch: int
    gpus: int = 1
    ubatch: int | None = None       # None: D / N (no gradient accumulation)
    iters: int = 3
    warmup: int = 1
    device: str = "cpu"
    precision: str = "fp32"
    gpu_memory_cap: int | None = None
    data: str = "synthetic"
    seed: int = 0
    data_seed: int = 1234
    output: str | None = None
    memcpy_trace: bool = True       # trace one steady-state iteration on CUDA
    # stop after the first measured steady-state iteration slower than this (seconds; None: run all): a
    # best-setting search of a slow system at a large minibatch otherwise outlasts a device call
    max_iter_s: float | None = None
    # the deadline rule's estimate of iteration 1 from iteration 0 (None: as long as iteration 0). A search
    # sets it from its nearest candidate on record (second iteration / first, at most 1): zero-offload
    # resnet1026 D=64 ran 180 s then 74 s at u=8, and u=16, estimated at its own 235 s first, was left for a
    # next call twice that a 10-minute call never has (h100-grid33)
    first_iter_ratio: float | None = None
    # when this run began (time.time(); None: at process start): a run that began as its device call did
    # and still cannot finish a timed iteration in it is recorded over-time, not left for the next call
    started_at: float | None = None
    calibration: str | None = None  # calibration.json: for the roofline
    profile: str | None = None      # profile.json: memory estimates of the swap baselines
    overrides: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)   # system-specific knobs (recorded in the summary)

    @property
    def per_gpu_samples(self) -> int:
        return self.minibatch // self.gpus

    def ubatch_or_default(self) -> int:
        return self.ubatch or max(1, self.minibatch // self.gpus)


# ------------------------------------------------------------------------------------------------
# Model and environment (the spawned ranks of a system at N > 1: baselines/ranks.py)
# ------------------------------------------------------------------------------------------------
def load_model(model: str, overrides: dict | None = None):
    """(ModelSpec, model.json record) from a zoo name or a model.json path."""
    from harmony.decompose import decompose_model, load_model_json, resolve_spec, spec_from_model_json

    if model.endswith(".json") or os.path.sep in model:
        if not Path(model).exists():
            raise FileNotFoundError(f"{model}: no such model.json (give a zoo name or a model.json path)")
        mj = load_model_json(model)
        return spec_from_model_json(mj), mj
    spec, source = resolve_spec(model, overrides or {})
    return spec, decompose_model(spec, source)


def resolve_device(device: str, rank: int = 0) -> torch.device:
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("--device cuda but no CUDA device is visible; use --device cpu")
        return torch.device("cuda", rank if device == "cuda" else torch.device(device).index)
    if device != "cpu":
        raise ValueError(f"--device {device!r}: use cpu or cuda")
    return torch.device("cpu")


def apply_precision(precision: str) -> dict:
    """The matmul settings every stage uses (harmony.gpumem.set_precision); returns them for the record."""
    from harmony.gpumem import set_precision
    return set_precision(precision)


def autocast(device: torch.device, precision: str):
    from harmony import gpumem
    return gpumem.autocast(device, precision)


def apply_cap(device: torch.device, cap: int | None) -> dict:
    """Make the GPU behave as if it had `cap` bytes (harmony.gpumem.apply_memory_cap); the record of how."""
    from harmony.gpumem import apply_memory_cap
    return apply_memory_cap(device, cap)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def failure_status(exc: BaseException) -> str:
    """The status a run that raised `exc` is recorded with: oom, infeasible or error."""
    return "oom" if is_oom(exc) else "infeasible" if isinstance(exc, Infeasible) else "error"


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def host_rss() -> int:
    try:
        import psutil
        return psutil.Process().memory_info().rss
    except Exception:  # noqa: BLE001
        return 0


def host_pss(gather=None) -> int | None:
    """The host memory of the run's ranks, shared pages counted once (harmony.metrics.process_pss summed
    over the ranks; `gather` collects one value per rank at N > 1, and every rank must call it), or None
    where a rank cannot read it."""
    from harmony.metrics import process_pss
    own = process_pss()
    per_rank = gather([own]) if gather is not None else [own]
    return None if any(v is None for v in per_rank) else sum(per_rank)


def batch_bytes(batch) -> int:
    return sum(t.numel() * t.element_size() for t in batch)


def microbatch_ranges(n: int, u: int) -> list[tuple[int, int]]:
    return [(s, min(s + u, n)) for s in range(0, n, u)]


class MicrobatchClock:
    """Times the microbatches of iteration 0, for the deadline rule's estimate of iteration 1.

    A system's first iteration does one-time work: zero-offload resnet1026 D=64 u=16 took 208 s for
    iteration 0 and 23 s for each next (h100-grid37). Estimating the next iteration as the first leaves
    such a run for a call that never has the time. Where the one-time work lands on the first microbatch
    (cuDNN tuning each convolution, a first parameter fetch), the run's own microbatches say better;
    DeepSpeed's did not land there (D=256: 213 s estimated, 68.6 s measured, h100-grid39), and the estimate
    is then no worse than the iteration itself. train_loop arms the clock for iteration 0 only (it
    synchronises after each microbatch, which a timed iteration must not pay); a step calls tick() after
    each microbatch."""

    def __init__(self, devices: list[torch.device]):
        self.devices, self.marks, self.armed = devices, [], False

    def arm(self) -> None:
        self.armed, self.marks = True, [time.perf_counter()]

    def disarm(self) -> None:
        self.armed = False

    def tick(self) -> None:
        if self.armed:
            _sync(self.devices)
            self.marks.append(time.perf_counter())

    def next_iteration_s(self, iteration_s: float) -> float | None:
        """The iteration's time less its first microbatch's excess over the median of the others (None
        with fewer than three microbatches: one other is no median to trust)."""
        spans = [b - a for a, b in zip(self.marks, self.marks[1:])]
        if len(spans) < 3:
            return None
        rest = sorted(spans[1:])
        median = rest[len(rest) // 2] if len(rest) % 2 else (rest[len(rest) // 2 - 1] + rest[len(rest) // 2]) / 2
        return iteration_s - max(0.0, spans[0] - median)


def accumulate_microbatches(forward, batch: tuple, n: int, u: int, dev, precision: str,
                            clock: MicrobatchClock | None = None):
    """Backward of every microbatch of `batch` (n samples, microbatches of u), each loss weighted by its
    share of n, so the accumulated gradients are those of the whole batch. Returns the batch's mean loss
    as a device tensor (no synchronisation unless `clock` is armed)."""
    total = torch.zeros((), device=dev)
    for a, b in microbatch_ranges(n, u):
        x = tuple(t[a:b].to(dev, non_blocking=True) for t in batch)
        with autocast(dev, precision):
            (loss,) = forward(x)
        (loss * ((b - a) / n)).backward()
        total += loss.detach().float() * ((b - a) / n)
        if clock is not None:
            clock.tick()
    return total


def roofline_s(model_json: dict, settings: Settings, offload: bool = True) -> dict | None:
    """The physical roofline of this run with a calibration.json (None without): for an offloading system
    harmony.schedule.bound.physical_roofline (3 x forward FLOPs x D / (N x matmul rate); every weight in
    and every gradient out once; the CPU optimizer over all parameters), for `resident` its FLOPs term
    alone (nothing has to cross PCIe, the optimizer runs on the GPU)."""
    if not settings.calibration:
        return None
    from types import SimpleNamespace

    from harmony.schedule.bound import physical_roofline
    from harmony.profile_data import Calibration
    cal = Calibration.load(settings.calibration).raw
    if settings.precision not in (cal.get("matmul_flops") or {}):
        return None
    graph = SimpleNamespace(config=SimpleNamespace(gpus=settings.gpus, minibatch=settings.minibatch))
    r = physical_roofline(model_json, graph, cal, settings.precision)
    if not offload:
        r = {"roofline_s": r["terms"]["flops_s"], "terms": {k: r["terms"][k] for k in ("flops", "flops_s",
                                                                                      "precision")}}
    return r


# ------------------------------------------------------------------------------------------------
# The record
# ------------------------------------------------------------------------------------------------
class RunWriter:
    """run.jsonl of one baseline run: iteration lines as they finish, then one summary (always)."""

    def __init__(self, settings: Settings, model_name: str, mode: str | None = None):
        self.s = settings
        self.model_name = model_name
        self.mode = mode
        self.iterations: list[IterationRecord] = []
        self._w = JsonlWriter(settings.output) if settings.output else None

    def iteration(self, rec: IterationRecord) -> None:
        self.iterations.append(rec)
        if self._w:
            self._w.write(rec.to_json())

    def summary(self, status: str, message: str | None = None, warmup: int | None = None,
                **extra: Any) -> dict:
        s = self.s
        env = env_record(s.device, s.precision, s.gpu_memory_cap, _calibration(s.calibration))
        rec = make_summary(system=s.system, model=self.model_name, mode=self.mode, gpus=s.gpus,
                           minibatch=s.minibatch, status=status, iterations=self.iterations,
                           warmup=s.warmup if warmup is None else warmup, env=env, message=message,
                           ubatch=s.ubatch_or_default(), settings=dict(s.extra), **extra)
        validate_summary(rec)
        if self._w:
            self._w.write(rec)
            self._w.close()
        return rec


ITERATION_FIELDS = frozenset(f.name for f in fields(IterationRecord))


def record_call_end(s: Settings, model_name: str, why: str) -> dict:
    """The record of a run that the device call's end stopped after it had the whole call (a search's
    candidate: baselines/cli.py): its iteration lines from the .partial it left, then the summary. With
    no iteration past the warm-up (and the memcpy trace, on CUDA) it is `over-time`, as train_loop records
    such a run that sees the deadline coming; with timed iterations it is `ok`, cut short there."""
    part = partial_path(s.output)
    lines = part.read_text().splitlines() if part.exists() else []
    w = RunWriter(s, model_name)          # opens the .partial afresh: the lines were read first
    for line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:      # the line the stop tore
            continue
        if r.get("record") == "iteration":     # the runtime's lines (swap-dp, swap-pp) carry more fields
            w.iteration(IterationRecord(**{k: v for k, v in r.items() if k in ITERATION_FIELDS}))
    warmup = s.warmup + (1 if s.device.startswith("cuda") and s.memcpy_trace else 0)
    if len(w.iterations) > warmup:
        return w.summary("ok", None, warmup=warmup,
                         cut_short=f"stopped after iteration {len(w.iterations) - 1} by the device call's end")
    return w.summary("over-time", f"stopped by the device call's end before a timed iteration: {why}",
                     warmup=len(w.iterations), call_window_s=call_window_s())


def _calibration(path: str | None) -> dict | None:
    if not path:
        return None
    from harmony.profile_data import Calibration
    return Calibration.load(path).raw


def status_only(settings: Settings, model_name: str, status: str, message: str, mode: str | None = None,
                **extra: Any) -> dict:
    """A run that never started (unavailable, infeasible): a summary with no iterations."""
    return RunWriter(settings, model_name, mode).summary(status, message, **extra)


# ------------------------------------------------------------------------------------------------
# The timed loop
# ------------------------------------------------------------------------------------------------
StepFn = Callable[[int, tuple], float]     # (iteration, minibatch) -> loss of the minibatch


def train_loop(settings: Settings, writer: RunWriter, step: StepFn, batches: list, *,
               devices: list[torch.device], counted_bytes: Callable[[int], dict] | None = None,
               trace_bytes_as_counters: bool = False, gather: Callable[[list], list] | None = None,
               cpu_update: bool = True, model_json: dict | None = None, trace: bool | None = None,
               clock: MicrobatchClock | None = None) -> dict:
    """Run len(batches) iterations of `step`, write the records, return the summary.

    counted_bytes(i) -> {"h2d", "d2h", "p2p", "allreduce"}: the system's own counters for iteration i.
    trace_bytes_as_counters: the system issues no copies of its own (FSDP, DeepSpeed): iteration bytes
    come from the memcpy trace (from the traced iteration on). On CUDA with settings.memcpy_trace the
    iteration right after warm-up is traced and counted as warm-up too (the profiler slows it).
    gather(values) -> per-rank values (multi-process systems; rank 0 writes).
    trace: whether to trace one iteration (default: on CUDA with settings.memcpy_trace).
    clock: the MicrobatchClock that `step` ticks (armed in iteration 0 only, for the deadline rule).
    """
    from harmony.memcpy_trace import agreement, measure_memcpy_bytes

    s = settings
    gpus = [d for d in devices if d.type == "cuda"]
    use_cuda = bool(gpus)
    if trace is None:
        trace = use_cuda and s.memcpy_trace
    trace_at = s.warmup if (trace and len(batches) > s.warmup + 1) else None
    warmup = s.warmup + (1 if trace_at is not None else 0)
    traced: dict | None = None
    status, message, cut, trace_skipped = "ok", None, None, None
    deadline_set = seconds_left() is not None      # the same environment on every rank
    untraced_nxt: float | None = None              # the estimate of the next iteration made before it ran
    slowest_so_far = 0.0
    gpu_clock = DeviceClocks(gpus)     # each GPU's SM clock beside each iteration, as in Harmony's runs
    try:      # the stall watch (watch_for_a_stall) ends with the loop, however it ends
        for i, batch in enumerate(batches):
            if gather is not None:
                watch_for_a_stall(i, slowest_so_far)
            try:
                for d in devices:
                    if d.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(d)
                retries0 = [alloc_retries(d) for d in gpus]
                _sync(devices)
                gpu_clock.take()     # the samples since the last iteration: not this one's
                t0 = time.perf_counter()
                if clock is not None and i == 0 and deadline_set:
                    clock.arm()
                if i == trace_at:
                    out: dict = {}
                    traced = measure_memcpy_bytes(lambda: out.setdefault("loss", step(i, batch)))
                    loss = out["loss"]
                else:
                    loss = step(i, batch)
                _sync(devices)
                dt = time.perf_counter() - t0
                if clock is not None:
                    clock.disarm()
            except Exception as e:  # noqa: BLE001 - every failure becomes a record
                status = failure_status(e)
                if status == "oom":
                    message = f"iteration {i}: {str(e).splitlines()[0][:300]}"
                elif status == "infeasible":
                    message = str(e)
                else:
                    message = f"iteration {i}: {type(e).__name__}: {e}"
                    traceback.print_exc(file=sys.stderr)
                free_memory()
                if gather is not None:      # a peer may wait in a collective this rank will not join
                    import torch.distributed as dist
                    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else "?"
                    raise RankFailed(status, f"rank {rank}, {message}") from e
                break
            slowest_so_far = max(slowest_so_far, dt)
            log_phase(s.system, f"iteration {i}: {dt:.2f} s, loss {float(loss):.4f}"
                      + (" (memcpy traced)" if i == trace_at else ""))
            b = dict(counted_bytes(i)) if counted_bytes else {}
            if trace_bytes_as_counters and traced is not None:
                b = {"h2d": traced["h2d"] or 0, "d2h": traced["d2h"] or 0, "p2p": traced["p2p"] or 0,
                     "allreduce": b.get("allreduce", 0)}
            alloc = [torch.cuda.max_memory_allocated(d) for d in gpus]
            resv = [torch.cuda.max_memory_reserved(d) for d in gpus]
            retries = [alloc_retries(d) - r0 for d, r0 in zip(gpus, retries0)]
            pss = host_pss(gather) if i == 0 else None      # once, outside the timed iterations (a page walk)
            clock_row = gpu_clock.take() or [None] * len(gpus)
            if gather is not None:
                alloc, resv, retries = gather(alloc), gather(resv), gather(retries)
                clock_row = gather(clock_row)
            writer.iteration(IterationRecord(
                iteration=i, time_s=dt, samples_per_s=s.minibatch / dt if dt > 0 else 0.0, loss=float(loss),
                bytes_h2d=int(b.get("h2d", 0)), bytes_d2h=int(b.get("d2h", 0)), bytes_p2p=int(b.get("p2p", 0)),
                bytes_allreduce=int(b.get("allreduce", 0)), peak_allocated_bytes=alloc,
                peak_reserved_bytes=resv, alloc_retries=retries, host_rss_bytes=host_rss(), host_pss_bytes=pss,
                gpu_clocks=clock_row if any(clock_row) else None))
            # the next iteration's estimate for the deadline rule: this one, but after iteration 0 alone (a
            # system's first iteration builds what the later ones reuse) the smaller of its own microbatches'
            # estimate (MicrobatchClock: one-time work in the first microbatch) and iteration 0 scaled as the
            # search's nearest candidate on record ran (one-time work anywhere in it). The clock alone said
            # 252 s for zero-offload resnet1026 D=256 u=8 after a 261 s iteration 0, where u=16 had run 213 s
            # then 48 s (x2-grid29): DeepSpeed's one-time work is spread over the microbatches.
            own = clock.next_iteration_s(dt) if (clock is not None and i == 0 and deadline_set) else None
            ratio = s.first_iter_ratio if i == 0 and s.first_iter_ratio else 1.0
            if own is not None and own > dt * ratio:
                own = None       # the nearest candidate's ratio finds more one-time work: it estimates
            nxt = own if own is not None else dt * ratio
            if own is not None:
                log_phase(s.system, f"iteration 1 estimated at {own:.1f} s: iteration 0 less its first "
                                    f"microbatch's one-time work")
            # every rank must stop at the same iteration (a rank left in a collective hangs): the slowest decides
            sync_ranks = gather is not None and (s.max_iter_s is not None or deadline_set)
            slowest, nxt = (tuple(max(v) for v in zip(*gather([(dt, nxt)]))) if sync_ranks else (dt, nxt))
            if i == trace_at and untraced_nxt is not None:
                # the profiler slowed this iteration, and the next runs untraced: it is estimated as this one was
                # before its trace (resident resnet1026 D=1024 u=32 ran 31 s, then 108 s traced; estimated at
                # 108 s, the untraced iteration 2 was left for another call with 74 s to go, x2-grid3)
                nxt = untraced_nxt
            untraced_nxt = nxt
            if trace_at is not None and i < trace_at and over_max_iter(s, slowest):
                # The traced iteration runs about 2x slower and counts as warm-up: at 140 s a warm-up iteration,
                # trace plus one timed iteration outlast a device call (fsdp-offload vgg416 D=256, h100-grid7).
                trace_skipped = (f"warm-up iteration {i} took {slowest:.1f} s > --max-iter-s {s.max_iter_s:g}: "
                                 f"the next iteration is timed untraced")
                log_phase(s.system, trace_skipped)
                trace_at, warmup = None, s.warmup
            if cut_short(s, i, slowest, warmup, len(batches)):
                cut = (f"stopped after iteration {i}: {slowest:.1f} s > --max-iter-s {s.max_iter_s:g}; the steady "
                       f"state is this one iteration")
                log_phase(s.system, cut)
                break
            left = seconds_left() if deadline_set and i < len(batches) - 1 else None
            if left is not None and gather is not None:
                left = min(gather([left]))
            if outlasts_deadline(nxt, left):
                if i >= warmup:
                    cut = (f"stopped after iteration {i}: the next (about {nxt:.0f} s) would end after "
                           f"HARMONY_DEADLINE, {max(left, 0):.0f} s away; the steady state is what ran")
                    log_phase(s.system, cut)
                    break
                # nothing timed yet: the next call runs it afresh. Ranks (gather) decide together, since `left`
                # and `nxt` are gathered and `over` is rank 0's: every rank raises Deferred (spawn_ranks hands
                # it to the parent) or stops over-time at the same iteration. Before, a run at N > 1 went on
                # and the call's end cut it off: the guard then recorded the whole search over-time
                # (zero-offload resnet1026 D=256 u=8 on 2x H200, x2-grid29, with u=16 on record).
                how = (f"iteration {i}'s {slowest:.0f} s less its first microbatch's excess over the others"
                       if own is not None else f"as estimated before iteration {i}, which the memcpy trace slowed"
                       if i == trace_at else f"as iteration {i}" if ratio == 1.0 else
                       f"{ratio:.2f}x iteration {i}'s {slowest:.0f} s, as the nearest candidate on record ran")
                why = (f"iteration {i + 1} (about {nxt:.0f} s, {how}) would end after HARMONY_DEADLINE, "
                       f"{max(left, 0):.0f} s away, before any timed iteration")
                over = had_whole_call(s)
                if gather is not None:
                    over = gather([over])[0]
                if over is None:
                    raise Deferred(why)
                status, message = "over-time", f"{why}; {over}"
                log_phase(s.system, message)
                break
    finally:
        if gather is not None:
            faulthandler.cancel_dump_traceback_later()
        gpu_clock.stop()
    extra: dict[str, Any] = {"cut_short": cut} if cut else {}
    if status == "over-time":      # what call it had: a longer one runs it again (baselines/cli.py)
        extra["call_window_s"] = call_window_s()
    if traced is not None and gather is not None:      # every rank traced its own GPU: sum them
        per_rank = gather([traced])
        traced = {k: (sum(t[k] or 0 for t in per_rank) if isinstance(traced.get(k), int) else traced.get(k))
                  for k in traced}
        traced["ranks"] = len(per_rank)
    if traced is not None:
        extra["memcpy_trace"] = traced
        if not trace_bytes_as_counters and counted_bytes is not None:
            extra["memcpy_agreement"] = agreement(counted_bytes(trace_at), traced)
    extra["bytes_source"] = ("memcpy_trace" if trace_bytes_as_counters else "counters")
    if trace_skipped:
        extra["memcpy_trace_skipped"] = trace_skipped
        if trace_bytes_as_counters:    # no counters of its own and no trace: the bytes are unknown, not 0
            extra.update(bytes_source=None, bytes_h2d=None, bytes_d2h=None, bytes_p2p=None)
    its = writer.iterations
    extra["gpu_clocks"] = per_gpu([it.gpu_clocks for it in steady_state(its, warmup)])
    rl = roofline_s(model_json, s, offload=cpu_update) if model_json else None
    if rl is not None:
        extra["roofline_terms"] = rl["terms"]
        rl = rl["roofline_s"]
    if status == "ok" and not its:
        status, message = "error", "no iterations ran (--iters 0?)"
    return writer.summary(status, message, warmup=warmup, roofline_s=rl, **extra)


# A spawned rank's iteration that runs this much past the slowest before it (or past the first limit, for
# iteration 0) prints every thread's stack to the run's log: a rank stuck in a collective says where, which
# the parent's own stacks at the call's end cannot (x2-grid34's silent hang). The log goes on as before.
STALL_FACTOR, STALL_MIN_S, FIRST_ITERATION_STALL_S = 3.0, 120.0, 480.0


def watch_for_a_stall(i: int, slowest_so_far: float) -> None:
    """Arm faulthandler to dump this rank's stacks ("Timeout (0:02:00)!", then every thread) if iteration
    i outlasts its stall limit; each iteration re-arms it, and train_loop cancels it at the end."""
    limit = FIRST_ITERATION_STALL_S if i == 0 else max(STALL_MIN_S, STALL_FACTOR * slowest_so_far)
    faulthandler.dump_traceback_later(limit, repeat=False, file=sys.stderr, exit=False)


def had_whole_call(s: Settings) -> str | None:
    """Why no later device call gives this run more time, when none does (harmony.jsonio.had_whole_call,
    from when the run began: Settings.started_at, else the process start)."""
    return began_with_whole_call(s.started_at if s.started_at is not None else _T0)


def over_max_iter(s: Settings, dt: float) -> bool:
    """Whether an iteration of dt seconds is slower than --max-iter-s (never without the limit). A warm-up
    iteration that is drops the memcpy trace (train_loop); a steady-state one ends the run (cut_short); a
    candidate whose steady state is keeps the microbatch search from going lower (baselines/cli.py)."""
    return s.max_iter_s is not None and dt > s.max_iter_s


def cut_short(s: Settings, i: int, dt: float, warmup: int, n: int) -> bool:
    """Whether the run stops after iteration i: with --max-iter-s, once a steady-state iteration (past the
    warm-up and the traced one) took longer, when iterations are left. One measured iteration is the price
    of finishing at all: a 127 s/iteration run of four iterations plus its trace outlasts a device call."""
    return i >= warmup and over_max_iter(s, dt) and i < n - 1


def _sync(devices: list[torch.device]) -> None:
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


def pin_batches(batches: list, device: torch.device) -> list:
    """Pinned host copies of the minibatches when training on CUDA (pinned H2D copies are 5-7x faster)."""
    if device.type != "cuda":
        return batches
    return [tuple(t.pin_memory() for t in b) for b in batches]

