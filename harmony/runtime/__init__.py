"""`harmony run`: execute a schedule (task graph) on N GPUs, or N CPU worker processes, and record it.

    run_schedule(record, graph, iters=..., device="cpu"|"cuda", ...) -> summary record (+ run.jsonl)
    train_with_schedule(record, graph, iters=...) -> (losses, trained parameters in model order)

See docs/runtime.md. The modules: host_store (the one shared, pinned host arena for W, dW, K and stashes),
transfer (copy streams, events, byte counters), worker (one process per GPU: the task interpreter),
optim (per-pack CPU optimizer in threads), launch (spawn, supervise, tear down), cli.
"""
from __future__ import annotations

import os
import time

import torch

from harmony.runtime.optim import COALESCE_BELOW
from harmony.runtime.p2p import channels_last_model
from harmony.runtime.transfer import DEFAULT_WEIGHT_COPIES
from harmony.schedule.tasks import (DEFAULT_ALLREDUCE, DEFAULT_RECEIVE_MODE, DEFAULT_RUN_AHEAD, RECEIVE_MODES,
                                   ScheduleError, TaskGraph)
from harmony.units import format_bytes

__all__ = ["run_schedule", "train_with_schedule", "validate_against_model", "ScheduleError"]


def validate_against_model(record: dict, graph: TaskGraph, device: str = "cpu"):
    """Clear errors before any process starts: the schedule must fit the model it embeds, and the machine.
    Returns (spec, layers on the meta device)."""
    from harmony.decompose import spec_from_model_json
    from harmony.runtime.worker import is_batch_dependent, is_stochastic

    model = record["model"]
    cfg = graph.config
    spec = spec_from_model_json(model)
    layers = spec.build("meta")
    if len(layers) != model["num_vlayers"] or cfg.num_layers != len(layers):
        raise ScheduleError(f"the schedule covers {cfg.num_layers} vLayers, model.json lists "
                            f"{model['num_vlayers']} and {model['model']} builds {len(layers)}: "
                            f"regenerate model.json and the schedule for this model")
    for i, (layer, vl) in enumerate(zip(layers, model["vlayers"])):
        pb = sum(p.numel() * p.element_size() for p in layer.parameters())
        bb = sum(b.numel() * b.element_size() for b in layer.buffers())
        if (pb, bb) != (vl["param_bytes"], vl["buffer_bytes"]):
            raise ScheduleError(f"vLayer {i} of {model['model']} has {pb} parameter and {bb} buffer bytes but "
                                f"the schedule's model.json says {vl['param_bytes']} and {vl['buffer_bytes']}: "
                                f"the schedule was made for another model or version; regenerate it")
    if cfg.ubatch_fwd != cfg.ubatch_bwd:
        fwd_layers = {l for s, e in cfg.fwd_packs for l in range(s, e)}
        bad = [i for i in sorted(fwd_layers) if is_stochastic(layers[i]) or is_batch_dependent(layers[i])]
        if bad:
            raise ScheduleError(
                f"u_fwd={cfg.ubatch_fwd} != u_bwd={cfg.ubatch_bwd} but vLayers {bad[:5]} have dropout or "
                f"BatchNorm: a recompute at another microbatch size cannot reproduce the forward (dropout masks "
                f"and batch statistics are drawn per microbatch); use u_fwd == u_bwd, or turn dropout off")
    from harmony.runtime.p2p import check_channel_order
    check_channel_order(graph)      # both ends of every GPU pair must post P2P messages in one order
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ScheduleError("--device cuda but CUDA is not available here; use --device cpu")
        if torch.cuda.device_count() < cfg.gpus:
            raise ScheduleError(f"the schedule needs N={cfg.gpus} GPUs but {torch.cuda.device_count()} are visible")
    elif device != "cpu":
        raise ScheduleError(f"unknown device {device!r}: use cpu or cuda")
    return spec, layers


def _predictions(record: dict, graph: TaskGraph) -> dict:
    """The schedule's own prediction (written by `harmony schedule`: simulated time, schedule bound and its
    terms, physical roofline); null values when the schedule carries none."""
    pred = dict(record.get("prediction") or {})
    phys = pred.get("physical_roofline") or {}
    return {"predicted_iter_time_s": pred.get("iter_time_s"),
            "schedule_bound_s": pred.get("schedule_bound_s"),
            "schedule_bound_terms": pred.get("terms"),
            "roofline_s": pred.get("roofline_s") or phys.get("roofline_s"),
            "roofline_terms": phys.get("terms"),
            "predicted_bytes_simulator": pred.get("bytes"),
            "predicted_peak_memory_bytes": pred.get("peak_memory_bytes")}


# How many compute tasks the host may issue past the last whose kernels and device-to-host copies have
# completed (None: no bound): harmony.schedule.tasks.DEFAULT_RUN_AHEAD, which the simulator models too
RUN_AHEAD = DEFAULT_RUN_AHEAD


class Prepared:
    """A validated schedule with its arena allocated and filled with the initial weights; with
    `defer_weights`, filled only when `fill_weights()` is called (`_execute` does it while the workers set
    up, which they do without reading the weights)."""

    def __init__(self, record: dict, graph: TaskGraph, *, iters: int, device: str = "cpu", data: str = "synthetic",
                 precision: str = "fp32", gpu_memory_cap: int | None = None, seed: int = 0,
                 data_seed: int = 1234, timeout_s: float = 300.0, fault: dict | None = None,
                 update_threads: int = 2, worker_threads: int | None = None,
                 memcpy_trace_iteration: int | None = None, trace_host_ops: bool = False,
                 load_buffers: str = "auto", weight_copies: str = DEFAULT_WEIGHT_COPIES, defer_weights: bool = False,
                 coalesce_below: int = COALESCE_BELOW, max_iter_s: float | None = None,
                 first_timed_iteration: int = 1, run_ahead: int | None = RUN_AHEAD,
                 arena_prefault: bool = False, p2p_max_ctas: int | None = None,
                 p2p_receive: str = DEFAULT_RECEIVE_MODE, deterministic: bool = False,
                 ordered_reduce: bool = False, allreduce: str = DEFAULT_ALLREDUCE, keep_layout: bool = True):
        from harmony.runtime.host_store import HostArena, plan_layout, check_fits
        from harmony.schedule.host_memory import process_reserve_bytes
        from harmony.runtime.transfer import resolve_load_buffers

        from harmony.metrics import PhaseClock

        clock = self._clock = PhaseClock()
        spec, self.meta_layers = validate_against_model(record, graph, device)
        self.graph, self.device = graph, device
        self.layout = plan_layout(self.meta_layers, graph, record["model"], spec.optimizer.state_tensors_per_param())
        check_fits(self.layout, process_reserve_bytes(graph.config.gpus, self.layout.total_bytes))  # + the processes
        clock.lap("validate_layout")
        self.arena = HostArena.create(self.layout)
        clock.lap("arena_create")
        self.setup_s = clock.phases                # fill_weights adds its phases
        self._spec, self._seed, self._prefault = spec, seed, arena_prefault
        if not defer_weights:
            self.fill_weights()
        self.job = {"graph": graph.to_json(), "model": record["model"], "layout": self.layout,
                    "arena_path": self.arena.path, "device": device, "precision": precision,
                    "gpu_memory_cap": gpu_memory_cap, "data": data, "data_seed": data_seed, "seed": seed,
                    "iters": iters, "timeout_s": timeout_s, "fault": fault, "update_threads": update_threads,
                    "load_buffers": resolve_load_buffers(load_buffers, record.get("prediction")),
                    "prefetch_waits": (record.get("prediction") or {}).get("prefetch_waits"),
                    "weight_copies": weight_copies,
                    "coalesce_below": coalesce_below,
                    "threads_per_worker": worker_threads,
                    "memcpy_trace_iteration": memcpy_trace_iteration if device == "cuda" else None,
                    "trace_host_ops": trace_host_ops,
                    # the workers may stop after a timed iteration (worker.stop_after): --max-iter-s, deadline
                    "max_iter_s": max_iter_s, "first_timed_iteration": first_timed_iteration,
                    "run_ahead": run_ahead, "p2p_max_ctas": p2p_max_ctas, "p2p_receive": p2p_receive,
                    "deterministic": deterministic, "ordered_reduce": ordered_reduce, "allreduce": allreduce,
                    "keep_layout": keep_layout,
                    # the launcher's stall window once every rank is ready (launch.iteration_stall_s)
                    "predicted_iter_s": (record.get("prediction") or {}).get("iter_time_s") if device == "cuda"
                    else None,    # a CPU run of a GPU profile's schedule is far slower than its prediction
                    "launcher_pid": os.getpid()}   # the process that holds the arena (host PSS, rank 0)
        self.records = []

    def fill_weights(self) -> None:
        """Build the model on the CPU (the seed's weights, as PyTorch's reference gets them) and copy its
        weights and buffers into the arena's W, one vLayer at a time (ModelSpec.build_each): the host never
        holds the model beside the arena."""
        clock = self._clock
        clock.restart()                            # its phases begin whenever it is called
        if self._prefault:                         # --arena-prefault: the pages the workers pin, now
            self.arena.prefault()
            clock.lap("arena_prefault")
        self.arena.fill_weights(self._spec.build_each("cpu", seed=self._seed), clock)

    def on_iteration(self, writer=None):
        from harmony.metrics import IterationRecord
        D, device = self.graph.config.minibatch, self.device

        def cb(m: dict) -> None:
            b = m["bytes"]
            rec = IterationRecord(
                iteration=m["iteration"], time_s=m["time_s"], samples_per_s=D / m["time_s"] if m["time_s"] else 0.0,
                loss=m["loss"], bytes_h2d=b["h2d_weights"] + b["h2d_act"], bytes_d2h=b["d2h_grads"] + b["d2h_act"],
                bytes_p2p=b["p2p"], bytes_allreduce=b["allreduce"],
                peak_allocated_bytes=m["peak_allocated"] if device == "cuda" else [],
                peak_reserved_bytes=m["peak_reserved"] if device == "cuda" else [],
                alloc_retries=m["alloc_retries"] if device == "cuda" else [],
                host_rss_bytes=m["rss"] + _rss(), host_pinned_bytes=m["pinned"],
                host_pss_bytes=m.get("pss"), gpu_clocks=m.get("gpu_clocks"))
            self.records.append(rec)
            if writer is not None:
                extra = ("host_phases", "task_spans", "task_issued", "task_spans_error", "reserved_by_stream")
                writer.write({**rec.to_json(), "bytes_by_kind": b, "rank_time_s": m["rank_time_s"],
                              **{k: m[k] for k in extra if k in m}})
        return cb

    def parameters(self) -> list[torch.Tensor]:
        """Current W of every parameter, in model order (copies)."""
        from harmony.runtime.host_store import layer_slots
        params = []
        for i, layer in enumerate(self.meta_layers):
            for (_, _, is_param, _), w in zip(layer_slots(layer), self.arena.weights(i)):
                if is_param:
                    params.append(w.clone())
        return params

    def close(self) -> None:
        self.arena.close()


def _execute(record: dict, graph: TaskGraph, *, writer=None, **kw):
    from harmony.runtime.launch import launch
    prep = Prepared(record, graph, defer_weights=True, **kw)
    try:
        # the host initialises the weights while the workers start, join the process group, build the model
        # on the meta device and pin the arena; they wait for the weights before their first iteration
        outcome = launch(prep.job, graph.config.gpus, prep.on_iteration(writer), while_starting=prep.fill_weights)
        outcome.records, outcome.layout = prep.records, prep.layout
        outcome.setup_s = {"host": prep.setup_s, "workers_ready_after_s": outcome.ready_after_s,
                           "worker_slowest_rank": outcome.worker_setup_s,
                           "workers_exit_s": outcome.exit_s}     # after the last iteration, not set-up
        return outcome
    finally:
        prep.close()


def _rss() -> int:
    import psutil
    return psutil.Process().memory_info().rss


# What a run costs besides its iterations: interpreter and CUDA start, worker set-up (17.5 s for gpt2-xl on
# the H100), exit. A run that started with 135 s left and needed 4 x 24 s iterations was cut off (h100-grid14).
# Set-up grows with the host arena the workers pin: over 51 committed runs, wall less iterations was at most
# 45 s + 0.6 s per GB of arena (vgg416 vPP D = 256, 113 GB: 99 s; 12 of the 51 took more than 45 s flat;
# docs/performance.md entry 45). The schedule records its arena's size (search.host_memory.chosen_bytes).
RUN_OVERHEAD_S = 45.0
RUN_OVERHEAD_S_PER_ARENA_GB = 0.6
# With the arena prefaulted (the default on cuda) the workers pin pages that exist: over the first 16 such
# runs (H100 and 2x H200) wall less iterations was at most 22.7 s + 0.35 s per GB (vgg416's 113 GB: 51 s,
# where 35 s + 0.6 s per GB allowed 113 s and left the last runs of x2-grid5 for the next call).
RUN_OVERHEAD_S_PREFAULTED = 35.0
RUN_OVERHEAD_S_PER_ARENA_GB_PREFAULTED = 0.35


def run_overhead_s(record: dict, graph: TaskGraph | None = None, prefault: bool = False) -> float:
    """A run's expected time besides its iterations, from its host arena: the size its schedule's search
    recorded, else (swap-dp's and swap-pp's schedules have no search) sized from the model and graph.
    prefault: the launcher populates the arena before the workers pin it (run_schedule's arena_prefault)."""
    arena = ((record.get("search") or {}).get("host_memory") or {}).get("chosen_bytes")
    if not arena and graph is not None and isinstance(record.get("model"), dict):
        from harmony.schedule.host_memory import arena_bytes
        try:
            arena = arena_bytes(graph, record["model"]).total
        except (KeyError, TypeError, ValueError):     # a record without per-vLayer sizes: the flat estimate
            arena = None
    base, per_gb = ((RUN_OVERHEAD_S_PREFAULTED, RUN_OVERHEAD_S_PER_ARENA_GB_PREFAULTED) if prefault
                    else (RUN_OVERHEAD_S, RUN_OVERHEAD_S_PER_ARENA_GB))
    return base + (per_gb * arena / 1e9 if arena else 0.0)


def run_cost_s(record: dict, iters: int, traced: bool, graph: TaskGraph | None = None,
               prefault: bool = False) -> tuple[float, float] | None:
    """(its iterations' predicted seconds, its set-up's: run_overhead_s) of a run of the schedule, as the
    deadline check charges them (experiments/device/pending_jobs.py plans calls with the same); None when
    the schedule has no prediction."""
    per_iter = (record.get("prediction") or {}).get("iter_time_s")
    if not per_iter:
        return None
    iter_s = per_iter * (iters + (1 if traced else 0))   # the traced iteration runs about twice as long
    return iter_s, run_overhead_s(record, graph, prefault)


def host_refuses(record: dict, graph: TaskGraph | None) -> bool:
    """Whether the host arena's own check (host_store.check_fits) will refuse this run before any set-up: the
    search's estimate (harmony.schedule.host_memory.arena_bytes, below the layout by alignment padding only)
    and the processes' reserve already exceed the memory available. Such a run is recorded `infeasible` in
    seconds, so no deadline defers it: swap-pp VGG416 D = 256's u = 4 (a 488 GiB arena on a 124 GiB host)
    was left for the next call as 550 s of iterations and set-up (h200n1-6)."""
    if graph is None or not isinstance(record.get("model"), dict):
        return False
    from harmony.runtime.host_store import host_available_bytes
    from harmony.schedule.host_memory import run_host_need
    try:
        need = run_host_need(graph, record["model"])
    except (KeyError, TypeError, ValueError):      # a record without per-vLayer sizes: let the run check
        return False
    return need > host_available_bytes()


def defer_past_deadline(record: dict, iters: int, traced: bool, graph: TaskGraph | None = None,
                        prefault: bool = False) -> None:
    """Raise Deferred when the schedule's predicted iterations (10% over, plus its set-up: run_overhead_s)
    would outlast $HARMONY_DEADLINE, so a device call does not end inside a run and lose it."""
    from harmony.jsonio import DEADLINE_MARGIN, Deferred, outlasts_deadline, seconds_left
    left = seconds_left()
    cost = run_cost_s(record, iters, traced, graph, prefault) if left is not None else None
    if cost is None:
        return
    iter_s, overhead = cost
    per_iter = record["prediction"]["iter_time_s"]
    if outlasts_deadline(iter_s, left - overhead) and not host_refuses(record, graph):
        need = DEADLINE_MARGIN * iter_s + overhead
        raise Deferred(f"{iters} iterations of {per_iter:.1f} s predicted need about {need:.0f} s with set-up "
                       f"({overhead:.0f} s), {max(left, 0):.0f} s are left before HARMONY_DEADLINE")


def run_schedule(record: dict, graph: TaskGraph, *, iters: int, device: str = "cpu", data: str = "synthetic",
                 precision: str = "fp32", gpu_memory_cap: int | None = None, warmup: int = 1,
                 output: str | None = None, system: str = "harmony", seed: int = 0, data_seed: int = 1234,
                 timeout_s: float = 300.0, fault: dict | None = None, memcpy_trace: bool = False,
                 trace_host_ops: bool = False, worker_threads: int | None = None, update_threads: int = 2,
                 load_buffers: str = "auto", weight_copies: str = DEFAULT_WEIGHT_COPIES,
                 coalesce_below: int | None = None, max_iter_s: float | None = None,
                 run_ahead: int | None = RUN_AHEAD, arena_prefault: bool | None = None,
                 p2p_max_ctas: int | None = None, p2p_receive: str | None = None,
                 deterministic: bool = False, ordered_reduce: bool = False, allreduce: str = DEFAULT_ALLREDUCE,
                 keep_layout: bool = True) -> dict:
    """Run `iters` iterations (the first `warmup` excluded from the medians) of the schedule; returns the
    summary record, and writes run.jsonl (iteration lines as they finish, then the summary) if `output`.
    memcpy_trace: every worker traces iteration `warmup` with torch.profiler (CUDA memcpy activity); that
    iteration is then excluded from the medians too (the profiler slows it), so it needs
    iters >= warmup + 2. trace_host_ops: that trace records CPU activity too (torch ops, the autograd engine),
    so its timeline ranks the host's own work by self time (`harmony timeline`; the iteration runs slower
    still). The summary gets `memcpy_trace` (bytes per kind summed over the workers, or null
    kinds and the reason), `memcpy_counted` (our counters for the same iteration), `memcpy_agreement`
    (relative difference per kind) and `memcpy_agrees` (every visible kind within 1%); see docs/runtime.md.
    Failures inside the run give a summary with status oom/error/interrupted; a schedule that does not fit
    the model, or a host too small for the arena, raise before anything starts.
    The workers stop after a timed iteration when the slowest rank's was slower than `max_iter_s` (the swap
    baselines' --max-iter-s), or when the next would end after $HARMONY_DEADLINE; `cut_short` says so. After
    a warm-up iteration slower than `max_iter_s` they skip the memcpy trace and time that iteration instead.
    arena_prefault: give the pinned part of the host arena its pages on the launcher's threads while the
    workers start (None: on for cuda, where the workers pin it; docs/performance.md entry 45).
    p2p_max_ctas: on cuda, at most this many thread blocks for each NCCL send/recv kernel of the GPU-to-GPU
    channels (their process groups' NCCL config; None: NCCL's choice). A send stays resident on the GPU
    until its receive is posted, beside the compute; docs/performance.md entry 46 (an A/B, not a default).
    p2p_receive: `eager` posts all of a task's receives from another GPU when it starts, `lazy` each just
    before its microbatch (harmony/runtime/p2p.py; docs/performance.md entry 48); None: the mode the
    schedule's search chose (`planned_receive_mode`; entry 59).
    deterministic: on cuda, every worker runs torch's deterministic kernels only
    (`gpumem.set_deterministic(strict=True)`), so that two runs of a schedule compute the same bits (GPT-2's
    fused attention backward otherwise does not: measured for plain PyTorch, docs/performance.md entry 71),
    and an op that has no deterministic CUDA kernel fails the run with torch's error naming it.
    ordered_reduce: vDP sums its ranks' gradients in rank order, ((g0 + g1) + g2) + ..., on every rank (an
    all-gather, then the additions), as plain PyTorch in the runtime's order does
    (`reference.train_in_order`), instead of the collective's all-reduce, whose association over more than
    two ranks is the library's own (NCCL's differs per chunk). For checking a curve bit for bit at N > 2;
    it moves (N - 1) times the gradients per rank, against the ring all-reduce's 2 (N - 1) / N.
    allreduce: vDP on cuda, `inline` (the compute stream waits for each pack's all-reduce) or `overlap` (only
    the gradients' copy to the host waits for it; the next task computes meanwhile); the same sums either
    way (docs/runtime.md, "The all-reduce"; docs/performance.md entry 77).
    keep_layout: a channels-last model's activations and their gradients cross pack boundaries in their own
    layout (sends and stashes as NHWC views), the default; off, they cross as NCHW, which costs a reorder on
    each side (4-7% of the iteration, docs/performance.md entry 108). The same numbers either way
    (harmony/runtime/p2p.py). No effect on other models; a channels-last model's summary records it."""
    from harmony.jsonio import JsonlWriter
    from harmony.metrics import env_record, make_summary
    from harmony.runtime.host_store import HostMemoryError
    from harmony.schedule.host_memory import process_reserve_bytes
    from harmony.runtime.launch import prepare_worker_environment
    from harmony.runtime.transfer import check_allreduce, check_weight_copies, resolve_load_buffers
    from harmony.schedule.tasks import count_bytes, layer_sizes_from_model

    if arena_prefault is None:          # only cuda pins the arena: on the CPU there is nothing to win
        arena_prefault = device == "cuda"
    defer_past_deadline(record, iters, memcpy_trace and device == "cuda" and iters >= warmup + 2, graph,
                        prefault=arena_prefault)
    load_buffers = resolve_load_buffers(load_buffers, record.get("prediction"))
    check_weight_copies(weight_copies)
    check_allreduce(allreduce)
    coalesce_below = COALESCE_BELOW if coalesce_below is None else coalesce_below
    if coalesce_below < 0:
        raise ValueError(f"--coalesce-below must be at least 0 (0 turns coalescing off), got {coalesce_below}")
    if run_ahead is not None and run_ahead < 0:
        raise ValueError(f"--run-ahead must be at least 0 tasks (or none: no bound), got {run_ahead}")
    if p2p_receive is None:
        from harmony.schedule.io import planned_receive_mode
        p2p_receive = planned_receive_mode(record)
    if p2p_receive not in RECEIVE_MODES:
        raise ValueError(f"--p2p-receive must be one of {', '.join(RECEIVE_MODES)}, got {p2p_receive!r}")
    if p2p_max_ctas is not None and p2p_max_ctas < 1:
        raise ValueError(f"--p2p-max-ctas must be at least 1 thread block (or left out: NCCL's choice), "
                         f"got {p2p_max_ctas}")
    cfg = graph.config
    writer = JsonlWriter(output) if output else None
    prepare_worker_environment(device)  # what the workers will run with, so the env record names it
    env = env_record(device, precision, gpu_memory_cap)
    status, message, failure, records, layout, pinned, merged = "ok", None, None, [], None, 0, []
    trace_skipped = None
    infeasible_reason = None
    setup_s, t_start = None, time.perf_counter()
    trace_it = warmup if (memcpy_trace and device == "cuda" and iters >= warmup + 2) else None
    if trace_it is not None:
        warmup += 1                    # the traced iteration is not timed
    try:
        try:
            out = _execute(record, graph, iters=iters, device=device, data=data, precision=precision,
                           gpu_memory_cap=gpu_memory_cap, seed=seed, data_seed=data_seed, writer=writer,
                           timeout_s=timeout_s, fault=fault, memcpy_trace_iteration=trace_it,
                           trace_host_ops=trace_host_ops,
                           worker_threads=worker_threads, update_threads=update_threads,
                           load_buffers=load_buffers, weight_copies=weight_copies,
                           coalesce_below=coalesce_below, max_iter_s=max_iter_s, first_timed_iteration=warmup,
                           run_ahead=run_ahead, arena_prefault=arena_prefault, p2p_max_ctas=p2p_max_ctas,
                           p2p_receive=p2p_receive, deterministic=deterministic, ordered_reduce=ordered_reduce,
                           allreduce=allreduce, keep_layout=keep_layout)
            status, message, failure, records = out.status, out.message, out.failure, out.records
            layout, pinned, merged = out.layout, out.pinned_bytes, out.iterations
            setup_s = out.setup_s
            trace_skipped = next((m["memcpy_trace_skipped"] for m in merged if "memcpy_trace_skipped" in m), None)
            if trace_skipped is not None:
                warmup -= 1            # the workers timed the iteration they did not trace (worker.run)
        except HostMemoryError as e:
            # whether a smaller u needs less depends on the schedule (a stash per microbatch or per sample:
            # harmony.schedule.host_memory.plan_stash); the baselines' climb reads it from the system
            status, message, infeasible_reason = "infeasible", str(e), "host-memory"
            if writer is None:
                raise
        if status == "error" and _sigkilled(failure) and layout is not None:
            message += sigkill_hint(layout.total_bytes, process_reserve_bytes(cfg.gpus, layout.total_bytes))
        predicted_bytes = count_bytes(graph, layer_sizes_from_model(record["model"]))
        cut = _cut_short(records, iters, max_iter_s) if status == "ok" else None
        summary = make_summary(
            system=system, model=record["model"]["model"], mode=cfg.mode, gpus=cfg.gpus, minibatch=cfg.minibatch,
            status=status, iterations=records, warmup=warmup, env=env, message=message,
            **_predictions(record, graph),
            ubatch_fwd=cfg.ubatch_fwd, ubatch_bwd=cfg.ubatch_bwd, bwd_packs=[list(p) for p in cfg.bwd_packs],
            fwd_packs=[list(p) for p in cfg.fwd_packs], group_size=cfg.group_size, placement=cfg.placement,
            precision=precision, gpu_memory_cap=gpu_memory_cap, device=device,
            worker_threads=worker_threads or default_worker_threads(cfg.gpus), update_threads=update_threads,
            load_buffers=load_buffers, weight_copies=weight_copies,
            coalesce_below=coalesce_below, run_ahead=run_ahead, arena_prefault=arena_prefault,
            **({"p2p_max_ctas": p2p_max_ctas} if p2p_max_ctas is not None else {}), p2p_receive=p2p_receive,
            deterministic=deterministic, ordered_reduce=ordered_reduce, allreduce=allreduce,
            **({"keep_layout": bool(keep_layout)} if channels_last_model(record["model"]) else {}),
            bytes_by_kind=_median_by_kind(merged, warmup), host_phases=_median_host_phases(merged, warmup),
            task_spans=_median_per_task(merged, warmup, "task_spans"),
            task_issued=_median_per_task(merged, warmup, "task_issued"),
            reserved_by_stream=merged[-1].get("reserved_by_stream") if merged else None,
            gpu_clocks=_gpu_clocks(merged, warmup),
            predicted_bytes=predicted_bytes,
            host_arena_bytes=layout.total_bytes if layout else None,
            host_arena_parts=layout.bytes_by_part if layout else None, host_pinned_bytes=pinned,
            failure={k: v for k, v in (failure or {}).items() if k != "traceback"} or None,
            losses=[r.loss for r in records],
            setup_s=setup_s, wall_s=round(time.perf_counter() - t_start, 3),
            **({"infeasible_reason": infeasible_reason} if infeasible_reason else {}),
            **({"cut_short": cut} if cut else {}),
            **({"memcpy_trace_skipped": trace_skipped} if trace_skipped else {}),
            **(_memcpy_fields(merged, trace_it, device, iters, warmup, cfg.gpus, trace_skipped)
               if memcpy_trace else {}))
        if writer is not None:
            writer.write(summary)
        return summary
    finally:
        if writer is not None:
            writer.close()


def _sigkilled(failure: dict | None) -> bool:
    """A worker died of SIGKILL: the one that exited without a report (the launcher's `exitcode`) or one
    named by a survivor's error report (`crashed_exitcodes`, harmony/runtime/launch.py)."""
    f = failure or {}
    return -9 in (f.get("exitcode"), *f.get("crashed_exitcodes", ()))


def sigkill_hint(arena_bytes: int, reserve_bytes: int) -> str:
    """What a worker's SIGKILL (exit -9) most likely was, with the numbers to judge it: nothing in a run sends
    that signal, and on Linux the kernel's out-of-memory killer does when host memory runs out (swap-dp vgg416
    D = 256 u = 64 on 2x H200: a 244 GiB arena on a host with 249 GiB available, x2-grid20)."""
    from harmony.runtime.host_store import host_available_bytes
    return (f" (SIGKILL: most likely the kernel's out-of-memory killer; the host arena took "
            f"{format_bytes(arena_bytes)} and the run's processes about {format_bytes(reserve_bytes)} more, with "
            f"{format_bytes(host_available_bytes())} available now; `dmesg` on the host names the victim)")


def _cut_short(records: list, iters: int, max_iter_s: float | None) -> str | None:
    """Why the workers stopped before `iters` iterations (worker.stop_after), or None if they did not."""
    if not records or len(records) >= iters:
        return None
    last = records[-1]
    why = (f"{last.time_s:.1f} s > --max-iter-s {max_iter_s:g}" if max_iter_s is not None and last.time_s > max_iter_s
           else "the next would end after HARMONY_DEADLINE")
    return f"stopped after iteration {last.iteration} of {iters}: {why}; the steady state is what ran"


def _memcpy_fields(merged: list[dict], trace_it: int | None, device: str, iters: int, warmup: int,
                   gpus: int, skipped: str | None = None) -> dict:
    """The summary's memcpy_* fields: the traced iteration's memcpy bytes next to our counters for it.
    Visible in the trace: the H2D and D2H copies (weights, activations, stashes, gradients: pinned arena
    <-> GPU on our copy streams, "Memcpy HtoD/DtoH (Pinned ...)"). Not visible: NCCL traffic (all-reduce,
    and our p2p, which is NCCL send/recv: kernels, not memcpy), so p2p is compared only when we counted
    none (then the trace must show none either); CPU-side work (the optimizer on the arena)."""
    from harmony.memcpy_trace import agreement, unavailable
    if device != "cuda":
        return {"memcpy_trace": unavailable(f"--device {device}: memcpy activity is a CUDA profiler feature"),
                "memcpy_counted": None, "memcpy_agreement": None, "memcpy_agrees": None}
    rec = next((m for m in merged if m["iteration"] == trace_it and "memcpy_trace" in m), None)
    if rec is None:
        if skipped is not None:
            why = skipped
        elif trace_it is None:
            why = (f"needs iters >= warmup + 2 (got iters={iters}, warmup={warmup}): the traced iteration is "
                   f"excluded from timing")
        else:
            why = f"iteration {trace_it} did not complete"
        return {"memcpy_trace": unavailable(why), "memcpy_counted": None, "memcpy_agreement": None,
                "memcpy_agrees": None}
    b = rec["bytes"]
    counted = {"h2d": b["h2d_weights"] + b["h2d_act"], "d2h": b["d2h_grads"] + b["d2h_act"], "p2p": b["p2p"]}
    traced = dict(rec["memcpy_trace"])
    traced["not_visible"] = "NCCL all-reduce and NCCL send/recv (our p2p kind): kernels, not memcpy"
    agree = agreement(counted, traced)
    if counted["p2p"] and gpus > 1:
        agree["p2p"] = None            # sent over NCCL: not in the trace (recorded traced p2p stays 0)
    vals = [v for v in agree.values() if v is not None]
    return {"memcpy_trace": traced, "memcpy_counted": counted, "memcpy_agreement": agree,
            "memcpy_agrees": bool(vals) and all(v <= 0.01 for v in vals)}


def _median_by_kind(iterations: list[dict], warmup: int) -> dict | None:
    """Per-kind bytes per iteration: medians over the steady-state iterations (warm-up excluded)."""
    import statistics
    from harmony.metrics import steady_state
    steady = steady_state(iterations, warmup)
    if not steady:
        return None
    return {k: int(statistics.median(m["bytes"][k] for m in steady)) for k in steady[0]["bytes"]}


def default_worker_threads(gpus: int) -> int:
    """CPU threads per worker process unless set: the host's cores shared evenly by the workers."""
    import os
    return max(1, (os.cpu_count() or 1) // gpus)


def _median_host_phases(iterations: list[dict], warmup: int) -> list[dict] | None:
    """Per rank, the medians over the steady-state iterations of where its host time went (the worker's
    `host_phases`: issuing tasks, waiting for update flags, draining sends, GPU work and optimizer steps,
    and the update jobs' thread-seconds); null when the workers reported none."""
    import statistics
    from harmony.metrics import steady_state
    steady = [m for m in steady_state(iterations, warmup) if "host_phases" in m]
    if not steady:
        return None
    ranks = len(steady[0]["host_phases"])
    def med(vals: list):
        return statistics.median_low(vals) if isinstance(vals[0], int) else round(statistics.median(vals), 6)
    return [{k: med([m["host_phases"][r][k] for m in steady]) for k in steady[0]["host_phases"][r]}
            for r in range(ranks)]


def _gpu_clocks(iterations: list[dict], warmup: int) -> list[dict | None] | None:
    """Per rank, its GPU's clock over the steady-state iterations (harmony/gpu_clocks.py); null when the
    workers sampled none (CPU, no NVML)."""
    from harmony.gpu_clocks import per_gpu
    from harmony.metrics import steady_state
    return per_gpu([m.get("gpu_clocks") for m in steady_state(iterations, warmup)])


def _median_per_task(iterations: list[dict], warmup: int, key: str) -> list[list] | None:
    """Per rank, each compute task's entry of `key` with every number after its task id the median over the
    steady-state iterations: `task_spans` ([task id, start s, end s] on its GPU) or `task_issued` ([task id,
    s] when the host had issued it; harmony/runtime/task_clock.py); null when the workers reported none.
    The traced iteration runs under the profiler, so it is left out where another steady iteration was
    timed."""
    import statistics
    from harmony.metrics import steady_state
    steady = [m for m in steady_state(iterations, warmup) if m.get(key)]
    untraced = [m for m in steady if "memcpy_trace" not in m]
    steady = untraced or steady
    if not steady:
        return None
    out = []
    for r, first in enumerate(steady[0][key]):
        per_it = [m[key][r] for m in steady]
        out.append([[entry[0], *(round(statistics.median(s[i][j] for s in per_it), 6) for j in range(1, len(entry)))]
                    for i, entry in enumerate(first)])
    return out


def train_with_schedule(record: dict, graph: TaskGraph, *, iters: int, **kw):
    """For tests: run and return (losses, trained parameters in model order, per-iteration bytes by kind).
    Raises RuntimeError if the run did not end ok."""
    return train_many([(record, graph, dict(kw, iters=iters))])[0]


def train_many(runs: list[tuple[dict, TaskGraph, dict]]):
    """Several runs with the same N and device in one set of worker processes (start-up paid once).
    Each run: (record, graph, keyword arguments of Prepared). Returns one (losses, params, bytes) per run."""
    from harmony.runtime.launch import launch_many
    preps = [Prepared(rec, g, **dict({"timeout_s": 120.0}, **kw)) for rec, g, kw in runs]
    try:
        Ns = {p.graph.config.gpus for p in preps}
        if len(Ns) != 1:
            raise ValueError(f"train_many needs runs with one N, got {sorted(Ns)}")
        outs = launch_many([p.job for p in preps], Ns.pop(), [p.on_iteration() for p in preps])
        results = []
        for p, o in zip(preps, outs):
            if o.status != "ok":
                raise RuntimeError(f"run ended with status {o.status}: {o.message}")
            results.append(([r.loss for r in p.records], p.parameters(), [dict(m["bytes"]) for m in o.iterations]))
        return results
    finally:
        for p in preps:
            p.close()
