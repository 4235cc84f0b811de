"""Event-driven simulation of a task graph: iteration time, peak memory per GPU, bytes, trace events.

Resources (each a serial stream; an operation starts when its inputs are ready and its stream is free;
overlap happens only across streams):
  per GPU r   swap-in (H2D), compute, swap-out (D2H)
  per channel GPU src -> GPU dst: P2P (the runtime's one process group, one NCCL stream, per direction)
  host        the CPU optimizer: one stream per process, each at that worker's share of the calibrated
              all-core rate (the runtime gives each of N workers cores // N threads), when the calibration
              says how many cores it measured with (`cpu_threads`); otherwise one stream shared by all
              (`cpu_shared`), because the profiled optimizer rate already uses all cores
  host links  with `shared_link` all GPUs' swap-in use one H2D stream and all swap-outs one D2H stream
              (the paper's box); otherwise each GPU has its own link (the H200x2: 55.5 GB/s each, 110.6
              together). From calibration, overridable.

What overlaps, as the runtime does it:
  - weights (and a BWD's first stashed microbatch) of a task are prefetched on the swap-in stream while the rank's
    previous task computes (double buffer), but only if previous peak + those bytes fit under the cap;
    otherwise the prefetch waits for the previous compute to finish;
  - the host issues each rank's compute tasks one after the other (`host` lane: a task's issue seconds,
    the sum of its vLayers' profiled host issue times, plus on CUDA the runtime's own work per task and a
    BWD task's extra, CUDA_HOST_TASK_S and CUDA_HOST_BWD_EXTRA_VLAYERS): it runs ahead of the GPU across tasks, within an
    iteration, so a task's kernels start no earlier than its issue starts and end no earlier than its
    issue ends (docs/performance.md entry 34); the host starts an iteration when the last one has ended
    (the runtime waits for its copies, sends and updates there); profiles without issue times issue in
    no time;
  - a task's inputs stream in microbatch by microbatch (`mb_pipeline`): a consumer starts on its first
    microbatch when that has arrived and cannot finish before its last input arrives plus one microbatch;
    a producer's outputs are ready linearly between its first and its last microbatch;
  - an output sent to another GPU (vPP) stays allocated on its GPU through the rank's next compute task:
    the send completes only as the consumer receives it, microbatch by microbatch, and by then the host
    has issued (and allocated) that next task; the runtime drops its sends at the iteration's end, so
    nothing is held across iterations. (2x H200, gpt2-xl vPP D = 64: rank 0 peaked at 10.06 GiB allocated
    where the task peaks alone said 9.65; held, 10.04; docs/performance.md entry 33);
  - an output made for a later task of the same GPU that is not the next one waits there in between, on
    top of the peaks of the tasks that run meanwhile (entry 84: swap-pp's loss-pack inputs did, through
    the forward pass, until entry 85 stashed them; its schedule files from before still hold that graph.
    Harmony's consumers are the next task, so nothing of Harmony's waits);
  - with `run_ahead` n (the runtime's --run-ahead; on CUDA its default, 1), the host issues a rank's task only
    once the task n + 1 back on that rank in the iteration has finished its kernels and every device-to-host
    copy queued by then (the worker's wait on `Copier.mark`): a forward pass whose stashes leave slower
    than it computes runs at the copies' pace, not ahead of them (VGG416 D = 256's 2-layer packs stash
    3.3 GB each; docs/performance.md entry 114);
  - stash D2H copies overlap the FWD that produces them; dW leaves once after the BWD (after the ring
    all-reduce in vDP; `allreduce` inline: each rank's next compute waits for that all-reduce, as the
    runtime's default does); the UPD runs on the host when the pack's dW is there, concurrently with later BWDs;
  - next iteration: a task's weight swap-in waits for the UPD of every pack it loads (previous iteration);
  - compute beside a resident NCCL send or receive (vPP, N > 1) runs `nccl_slowdown()` times slower:
    a send stays on the GPU, holding SMs, from its producer's first microbatch until its receive is posted,
    before the consumer's last microbatch (`p2p_receive` lazy) or at its start (eager; the consumer's
    receives then wait on its GPU for the producer); docs/performance.md entries 47-48, `_beside_nccl_scale`.
Bytes are taken from tasks.task_transfers, so they equal count_bytes for the same graph by construction.
Iteration time is the steady-state mean over iterations 2..K (K = `iterations`, default 3).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace

from harmony.profile_data import Calibration
from harmony.schedule.memory import LayerCosts
from harmony.schedule.tasks import (ALLREDUCE_MODES, DEFAULT_ALLREDUCE, DEFAULT_RECEIVE_MODE, DEFAULT_RUN_AHEAD,
                                   RECEIVE_MODES, TRANSFER_KINDS, TaskGraph, task_transfers)
from harmony.timeline import intersection_length, merge_intervals

DEFAULT_TASK_OVERHEAD_S = 0.0
# GPU compute beside a resident NCCL send/recv kernel, against alone, on CUDA: traced 1.10-1.18x on 2x H100
# (`harmony timeline` beside_nccl) and +12-16% over the profile on 2x H200; charged, 13 of 14 2x H200 vPP
# runs outside those two plans come within 10% of the model, against 6 (docs/performance.md entry 47).
# A calibration's own `beside_nccl_slowdown` overrides it; gloo (the CPU) runs no such kernels.
CUDA_BESIDE_NCCL_SLOWDOWN = 1.15
# With eager receives (the default since entry 48) the kernels left beside NCCL ran 1.26-1.27x on gpt2-xl
# D = 256's traced ranks, a mean of 1.23 over the eight eager rank-traces of entry 48 (lazy: 1.11-1.14).
# The traces' number, not one fitted to runs: with it, figure 10's eager vPP runs at N = 2 (made after the
# traces) come within 10% at 10 of 12 on 2x H200 and 11 of 12 on 2x H100 (1.15: 5 and 8; entry 58).
CUDA_BESIDE_NCCL_SLOWDOWN_EAGER = 1.23
# The runtime's own host work per compute task on CUDA (installing a pack's weights, its copies and stream
# records, flags and timing marks), on top of the profile's issue times, which are plain PyTorch's: 0.60 ms,
# from entry 75's narrow benchmark on one H200. Runtime over plain PyTorch, 131 vLayers: 1,561 us per vLayer
# with one-vLayer packs (259 FWD and BWD tasks) and 522 with eight (33 tasks), so 1,039 us x 131 over 226
# more tasks. It is measured there, not fitted to runs. It matters where tasks are many and short: the swap
# baselines' one-vLayer packs, whose ResNet1026 runs were 2.3-2.7x their prediction without it and are
# 1.4-1.6x with it. Harmony's figure-10 predictions do not move (docs/performance.md entry 78). A
# calibration's own `host_task_s` overrides it; the CPU (gloo, no CUDA calls) is not charged.
CUDA_HOST_TASK_S = 0.60e-3
# A BWD task's host work beyond its profiled issue and that per-task charge, once a task: about one of its
# vLayers' plain-PyTorch backward issue again. Traced on one H200 (docs/performance.md entry 93, items 61
# and 62), swap-dp's one-layer BWD tasks were issued 0.60 ms (VGG416), 1.35 ms (ResNet1026) and 1.7-2.1 ms
# (BERT96) past their lane: 1.2, 1.05 and 0.64-0.80 times one layer's profiled issue; their FWD tasks at or
# under their lane. Once a task, not per vLayer: charged per vLayer it over-predicts Harmony's packed runs
# on 2x H200 (median error 3.7% -> 5.0%, within 10% 39 -> 32 of 41), once a task it leaves them where they
# were and brings swap-dp's candidates there from 13 to 20 of 24 within 10%. The traces put it on torch's
# per-op work and the engine's hand-over in a task's backward, and the runtime's Python per task. A
# calibration's own `host_bwd_extra_vlayers` overrides it; the CPU is not charged.
CUDA_HOST_BWD_EXTRA_VLAYERS = 1.0


@dataclass(frozen=True)
class SimParams:
    h2d_Bps: float
    d2h_Bps: float
    p2p_Bps: tuple = ()                 # N x N (None on the diagonal) or () -> through host
    p2p_fallback_Bps: float = 0.0
    shared_link: bool = False           # all GPUs share one host link (contend)
    duplex_factor: float = 1.0          # both directions at once: each direction gets this fraction
    # every GPU both ways at once, all together (calibration's duplex_pinned_total_Bps; 0: not measured).
    # On 2x H200 it is 146-154 GB/s against two GPUs' 2 x 101: the host, not each GPU's link, limits four
    # copy streams (docs/performance.md entry 92); duplex_for(N) charges it
    duplex_total_Bps: float = 0.0
    cpu_shared: bool = True             # one CPU optimizer stream for all processes (without cpu_threads)
    opt_params_per_s: float = 1e9       # CPU optimizer, all cores (calibrated); fallback without opt_step_s
    cpu_threads: int = 0                # the cores that rate was measured with (0: not measured, no share)
    task_overhead_s: float = DEFAULT_TASK_OVERHEAD_S
    # the runtime's own host work on the host lane, besides the profile's issue times: per compute task, and
    # per vLayer and microbatch (0 here; from a CUDA calibration, per task CUDA_HOST_TASK_S, entry 78;
    # experiments/resimulate_runs.py --host-overhead asks what other charges would do, entry 46)
    host_task_s: float = 0.0
    host_vlayer_s: float = 0.0
    # ... and per vLayer a compute task holds, and per parameter tensor of those vLayers, once a task
    # whatever its microbatches: installing, releasing and (BWD) handing gradients to the arena go one vLayer
    # and one tensor at a time (0 here; benchmarks/runtime_overhead.py --json measures them, entry 97; the
    # second needs the profile's `param_tensors`, experiments/merge_issue_factors.py adds them)
    host_vlayer_task_s: float = 0.0
    host_param_tensor_s: float = 0.0
    # a BWD task's host issue takes this many of its vLayers' mean profiled BWD issue (one microbatch's)
    # more, once a task (0 here; CUDA_HOST_BWD_EXTRA_VLAYERS from a CUDA calibration)
    host_bwd_extra_vlayers: float = 0.0
    # GPU compute runs this many times slower while an NCCL send/recv kernel of the rank's p2p is resident
    # beside it (vPP, N > 1): a send waits on the GPU, holding its thread blocks' SMs, until the consumer
    # posts the receive. 1: not charged (docs/performance.md entries 46 and 47)
    beside_nccl_slowdown: float = 1.0
    # the same with eager receives, where it differs (None: as beside_nccl_slowdown); see nccl_slowdown
    beside_nccl_eager: float | None = None
    # when the runtime posts a task's receives from another GPU (`harmony run --p2p-receive`): "lazy", each
    # just before its microbatch; "eager", all at the task's start (then the consumer's GPU holds the
    # receives of microbatches not yet produced)
    p2p_receive: str = DEFAULT_RECEIVE_MODE
    # vDP's gradient all-reduce (`harmony run --allreduce`): "inline", the rank's compute waits for it, as the
    # runtime's default does; "overlap", the next compute task of a rank runs while it does (what this model
    # assumed until its A/B on 2x H200 measured no gain, docs/performance.md entry 77)
    allreduce: str = DEFAULT_ALLREDUCE
    # how many compute tasks a rank's host issues past the last one whose kernels and device-to-host copies
    # have completed (`harmony run --run-ahead`); None: no bound, as on the CPU, where every copy has
    # completed when it returns; from a CUDA calibration, the runtime's default (DEFAULT_RUN_AHEAD)
    run_ahead: int | None = None
    mb_pipeline: bool = True
    iterations: int = 3

    def __post_init__(self):
        if self.p2p_receive not in RECEIVE_MODES:
            raise ValueError(f"p2p_receive must be 'lazy' or 'eager', got {self.p2p_receive!r}")
        if self.allreduce not in ALLREDUCE_MODES:
            raise ValueError(f"allreduce must be 'inline' or 'overlap', got {self.allreduce!r}")
        if self.run_ahead is not None and self.run_ahead < 0:
            raise ValueError(f"run_ahead must be at least 0 tasks (or None: no bound), got {self.run_ahead}")

    def nccl_slowdown(self) -> float:
        """The factor for compute beside a resident NCCL kernel under this receive mode."""
        if self.p2p_receive == "eager" and self.beside_nccl_eager is not None:
            return self.beside_nccl_eager
        return self.beside_nccl_slowdown

    def worker_opt_rate(self, gpus: int) -> float:
        """CPU optimizer parameters/s of one worker: the calibrated all-core rate times the worker's share
        of the cores (the runtime gives each of N workers cores // N threads; docs/performance.md entry 20)."""
        if not self.cpu_threads or gpus <= 1:
            return self.opt_params_per_s
        return self.opt_params_per_s * max(1, self.cpu_threads // gpus) / self.cpu_threads

    def with_worker_opt_rate(self, rate: float, gpus: int) -> "SimParams":
        """These parameters with the all-core rate set so that one worker of `gpus` steps `rate` (the
        inverse of worker_opt_rate)."""
        share = max(1, self.cpu_threads // gpus) if self.cpu_threads and gpus > 1 else 0
        return replace(self, opt_params_per_s=rate * self.cpu_threads / share if share else rate)

    def duplex_for(self, gpus: int) -> float:
        """The fraction of its one-way rate each direction of one GPU's link gets when `gpus` GPUs copy
        both ways at once: one GPU's duplex factor, or the all-GPU duplex total's share when that is less.
        Static: every GPU is taken to copy both ways at the same time, as vDP's ranks and a swap
        pipeline's stages mostly do (a shared link already queues all GPUs' copies on one lane)."""
        if gpus <= 1 or self.shared_link or not self.duplex_total_Bps:
            return self.duplex_factor
        return min(self.duplex_factor, self.duplex_total_Bps / (gpus * (self.h2d_Bps + self.d2h_Bps)))

    def p2p(self, src: int, dst: int) -> float:
        m = self.p2p_Bps
        if m and src < len(m) and dst < len(m[src]) and m[src][dst]:
            return m[src][dst]
        return self.p2p_fallback_Bps

    @staticmethod
    def from_calibration(cal: Calibration | dict, host_link: str | None = None, optimizer: str = "adamw",
                         **kw) -> "SimParams":
        """host_link: 'shared' | 'per-gpu' | None (from calibration: `host_link` key if present, else
        shared when the measured all-GPU H2D total (`h2d_pinned_total_Bps`) is < 1.5x one GPU's)."""
        raw = cal.raw if isinstance(cal, Calibration) else cal
        h2d, d2h = raw["h2d_pinned_Bps"], raw["d2h_pinned_Bps"]
        duplex = raw.get("duplex_pinned_Bps")
        factor = min(1.0, duplex / (h2d + d2h)) if duplex else 1.0
        if host_link is None:
            host_link = raw.get("host_link")
        if host_link is None:
            total = raw.get("h2d_pinned_total_Bps")
            host_link = "shared" if (total and total < 1.5 * h2d) else "per-gpu"
        if host_link not in ("shared", "per-gpu"):
            raise ValueError(f"host link must be 'shared' or 'per-gpu', got {host_link!r}")
        rate = raw.get("cpu_sgd_params_per_s" if optimizer == "sgd" else "cpu_adam_params_per_s") or 1e9
        p2p = tuple(tuple(row) for row in (raw.get("p2p_Bps") or ()))
        cuda = str(raw.get("device") or "").startswith("cuda")
        nccl = raw.get("beside_nccl_slowdown")
        if nccl is None and cuda:
            nccl = CUDA_BESIDE_NCCL_SLOWDOWN
            if "beside_nccl_slowdown" not in kw:
                kw.setdefault("beside_nccl_eager", CUDA_BESIDE_NCCL_SLOWDOWN_EAGER)
        kw.setdefault("beside_nccl_slowdown", float(nccl or 1.0))
        # the runtime's host charges: the calibration's own value, else the CUDA default (none on the CPU)
        for key, cuda_default in (("host_task_s", CUDA_HOST_TASK_S),
                                  ("host_bwd_extra_vlayers", CUDA_HOST_BWD_EXTRA_VLAYERS)):
            own = raw.get(key)
            kw.setdefault(key, float(own if own is not None else cuda_default if cuda else 0.0))
        if cuda:                # the runtime's bound on its host (the CPU's copies complete as issued)
            kw.setdefault("run_ahead", DEFAULT_RUN_AHEAD)
        return SimParams(h2d_Bps=h2d, d2h_Bps=d2h, p2p_Bps=p2p, p2p_fallback_Bps=min(h2d, d2h) / 2,
                         shared_link=host_link == "shared", duplex_factor=factor,
                         duplex_total_Bps=float(raw.get("duplex_pinned_total_Bps") or 0.0),
                         opt_params_per_s=rate, cpu_threads=int(raw.get("cpu_threads") or 0), **kw)


def host_tensor_charge(vlayer_us: float, param_us: float) -> dict:
    """SimParams fields for the runtime's host work per vLayer a task holds and per parameter tensor of them,
    given in microseconds (`--host-tensors` in experiments/resimulate_runs.py and predict_swap_search.py)."""
    return {"host_vlayer_task_s": vlayer_us / 1e6, "host_param_tensor_s": param_us / 1e6}


def upd_duration(costs: LayerCosts, params: SimParams, pack: tuple[int, int], gpus: int) -> float:
    """Seconds of one pack's CPU optimizer step. The profile's opt_step_s is timed per vLayer, each layer's
    state hot in the cache, with every core; a run steps a whole pack from memory with one worker's share of
    the cores. With a measured calibration (`cpu_threads`), the step takes at least parameters / that
    worker's calibrated rate: on 2x H200 the profile said 11.5 G params/s for bert96 and the run's steps
    measured 2.2-3.5 (host phases), against 2.8 from the calibration (docs/performance.md entry 20)."""
    s, e = pack
    profiled = costs.opt_time(s, e)
    if profiled > 0 and not params.cpu_threads:
        return profiled
    return max(profiled, sum(costs.params[s:e]) / params.worker_opt_rate(gpus))


@dataclass
class SimResult:
    iter_time_s: float
    iteration_ends: list[float]
    bytes: dict[str, int]
    peak_memory_bytes: list[int]
    task_peak_bytes: list[int]               # per task: its peak (compute tasks; with what the rank still
                                             # holds for sends to other GPUs), 0 for UPD
    feasible: bool
    cap: float | None
    compute_s: list[float]                   # per GPU, one iteration
    cpu_update_s: float
    # compute tasks whose prefetch waits for the rank's previous task to finish (the two do not fit together)
    prefetch_waits: list[int] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)      # (pid, tid, name, start, end, args)
    memory: list[tuple] = field(default_factory=list)      # (rank, time, bytes)
    # per GPU, one iteration: the profiled host issue seconds of its compute tasks (a run records its own
    # as host_phases' issue_s; the two apart say how fast the run's host issued against the profile's)
    issue_s: list[float] = field(default_factory=list)
    # per task: what its rank still held for the previous task's sends to other GPUs while it ran (vPP,
    # N > 1), included in task_peak_bytes; the search leaves room for it where it pushed a task over the cap
    task_held_bytes: list[int] = field(default_factory=list)

    @property
    def held_send_bytes(self) -> int:
        """The most any task held for an earlier send."""
        return max(self.task_held_bytes, default=0)

    def summary(self) -> dict:
        return {"iter_time_s": self.iter_time_s, "bytes": self.bytes,
                "peak_memory_bytes": self.peak_memory_bytes, "feasible": self.feasible}


class _Info:
    __slots__ = ("t", "kind", "rank", "nmb", "w_bytes", "act_h2d", "p2p_act",
                 "p2p_grad", "d2h_act", "d2h_grads", "allreduce", "peak", "gate_packs", "upd_dur",
                 "prefetch_bytes", "stash_src", "sent_bytes", "waiting_bytes", "dev", "iss", "dev_first",
                 "iss_first", "dev_last")


def _sim_order(g: TaskGraph) -> list[int]:
    """Execution order for the list scheduler. vDP: interleave the ranks' chains (k-th task of every rank,
    then the (k+1)-th), UPDs right after their last dependency, so shared links are claimed in time order."""
    if g.config.placement != "every-gpu" or g.config.gpus == 1:
        return [t.id for t in g.tasks]
    per_rank: dict[int, list[int]] = {}
    for t in g.tasks:
        if t.kind != "UPD":
            per_rank.setdefault(t.rank, []).append(t.id)
    pos = {tid: (k, r) for r, ids in per_rank.items() for k, tid in enumerate(ids)}
    comp = sorted(pos, key=pos.get)
    upd_after: dict[int, list[int]] = {}
    rank_in = {tid: i for i, tid in enumerate(comp)}
    for t in g.tasks:
        if t.kind == "UPD":
            last = max(t.deps, key=rank_in.get)
            upd_after.setdefault(last, []).append(t.id)
    out = []
    for tid in comp:
        out.append(tid)
        out += upd_after.get(tid, [])
    return out


def _device_issue(t, costs: LayerCosts, params: SimParams) -> tuple[float, float, float, float, float]:
    """A compute task's (device s, host issue s, first microbatch's device and issue s, last microbatch's
    device s): the profile's, with the per-task overhead on the device and the runtime's own host work on
    the host lane (SimParams.host_task_s, host_vlayer_s, host_vlayer_task_s, host_param_tensor_s, and
    host_bwd_extra_vlayers on a BWD task)."""
    s, e = t.pack
    nmb = -(-t.num_samples // t.ubatch)
    dev, iss, dev_first, iss_first, dev_last = costs.task_device_issue(t.kind, s, e, t.ubatch, t.num_samples)
    dev += params.task_overhead_s
    if t.kind == "BWD" and params.host_bwd_extra_vlayers:
        extra = params.host_bwd_extra_vlayers * iss_first / (e - s)
        iss += extra
        iss_first += extra
    if params.host_task_s or params.host_vlayer_s:
        iss += params.host_task_s + params.host_vlayer_s * (e - s) * nmb
        iss_first += params.host_task_s + params.host_vlayer_s * (e - s)
    if params.host_vlayer_task_s or params.host_param_tensor_s:
        per_task = params.host_vlayer_task_s * (e - s)
        if params.host_param_tensor_s:
            per_task += params.host_param_tensor_s * costs.param_tensors(s, e)
        iss += per_task
        iss_first += per_task
    return dev, iss, dev_first, iss_first, dev_last


def _prepare(g: TaskGraph, costs: LayerCosts, sizes, params: SimParams) -> list[_Info]:
    cfg = g.config
    infos = []
    kept_in = _starts_with_kept_grads(g)
    pack_starts, pack_ends = [p[0] for p in cfg.bwd_packs], [p[1] for p in cfg.bwd_packs]
    for t in g.tasks:
        x = _Info()
        x.t, x.kind, x.rank = t, t.kind, t.rank
        x.w_bytes = x.act_h2d = x.d2h_act = x.d2h_grads = x.allreduce = 0
        x.p2p_act = x.p2p_grad = None
        x.peak = 0
        x.upd_dur = 0.0
        x.stash_src = None
        x.sent_bytes = 0
        x.waiting_bytes = 0
        if t.kind == "UPD":
            x.upd_dur = upd_duration(costs, params, t.pack, g.config.gpus)
            infos.append(x)
            continue
        s, e = t.pack
        x.nmb = -(-t.num_samples // t.ubatch)       # microbatches
        x.dev, x.iss, x.dev_first, x.iss_first, x.dev_last = _device_issue(t, costs, params)
        # a BWD that all-reduces or adds into kept dW holds the pack's dW throughout (LayerCosts.one_pass)
        x.peak = int(costs.task_bytes(t.kind, s, e, t.ubatch, t.num_samples,
                                      fresh_grads=not t.allreduce and t.id not in kept_in))
        act_is_p2p = t.act_in[0] == "task" and g.tasks[t.act_in[1]].rank != t.rank
        for tr in task_transfers(g, t, sizes):
            k = tr.kind
            if k == "h2d_weights":
                x.w_bytes += tr.nbytes
            elif k == "h2d_act":
                x.act_h2d += tr.nbytes
            elif k == "p2p":
                if act_is_p2p and x.p2p_act is None:
                    x.p2p_act = (tr.nbytes, tr.src)
                else:
                    x.p2p_grad = (tr.nbytes, tr.src)
            elif k == "d2h_act":
                x.d2h_act += tr.nbytes
            elif k == "d2h_grads":
                x.d2h_grads += tr.nbytes
            elif k == "allreduce":
                x.allreduce += tr.nbytes
        if t.act_in[0] == "stash":
            x.stash_src = t.act_in[1]
        # a stash's first microbatch comes with the prefetch; the others stream in during the task, one
        # microbatch ahead (runtime.transfer.StashInput), inside the task's own peak (LayerCosts.group_buffers)
        x.prefetch_bytes = x.w_bytes + (x.act_h2d * min(t.ubatch, t.num_samples) // t.num_samples
                                        if t.act_in[0] == "stash" else 0)
        # the backward packs whose update the task's loads wait for: those overlapping its load range. The
        # packs partition the layers in order (tasks.validate), so they are one run of indices, found by
        # bisection; a scan of every pack for every task grew as tasks x packs (a fifth of a swap
        # baseline's one-vLayer ResNet1026 candidates' simulation)
        ll = t.load_layers
        x.gate_packs = list(range(bisect_right(pack_ends, ll[0]), bisect_left(pack_starts, ll[1]))) \
            if ll[1] > ll[0] else []
        infos.append(x)
    # what each producer sends to other GPUs: the P2P bytes its remote consumers receive
    for x in infos:
        t = x.t
        if x.p2p_act is not None:
            infos[t.act_in[1]].sent_bytes += x.p2p_act[0]
        if x.p2p_grad is not None:
            infos[t.grad_in].sent_bytes += x.p2p_grad[0]
    _add_waiting_outputs(g, costs, infos)
    return infos


def task_memory_charges(g: TaskGraph, costs: LayerCosts, params: SimParams,
                        waits=frozenset()) -> dict[int, tuple[int, int]]:
    """Per compute task, (its own peak, the bytes of the next compute task's prefetch on its rank where the plan
    overlaps them: not for a task in `waits`, the schedule's `prediction.prefetch_waits`). Their sum is what
    the simulator charges the task, and what the worker's per-task memory probe measures against it."""
    infos = _prepare(g, costs, costs.layer_sizes(), params)
    out = {}
    for r in range(g.config.gpus):
        comp = [t for t in g.tasks if t.kind != "UPD" and t.rank == r]
        for t, nxt in zip(comp, comp[1:] + [None]):
            pf = infos[nxt.id].prefetch_bytes if nxt is not None and nxt.id not in waits else 0
            out[t.id] = (infos[t.id].peak, pf)
    return out


def _starts_with_kept_grads(g: TaskGraph) -> set[int]:
    """The BWD tasks that start with dW already on the GPU: those whose rank's previous compute task kept its
    gradients for them (grad_keep, swap-pp's stages that fit; tasks._keep_gradients_on_gpu)."""
    out, prev = set(), {}
    for t in g.tasks:
        if t.kind == "UPD":
            continue
        p = prev.get(t.rank)
        if t.kind == "BWD" and p is not None and p.kind == "BWD" and p.grad_keep and p.pack == t.pack:
            out.add(t.id)
        prev[t.rank] = t
    return out


def _add_waiting_outputs(g: TaskGraph, costs: LayerCosts, infos: list[_Info]) -> None:
    """Per compute task, the outputs that an earlier task of its rank made for a later one there and that
    wait on the GPU while it runs (`waiting_bytes`). Harmony's consumer is the rank's next task, so nothing
    waits: the producer's and the consumer's own peaks hold the output (LayerCosts.group_buffers). Before
    docs/performance.md entry 85, swap-pp's graph fed its loss pack from the last forward in GPipe order,
    so that input waited through the rest of the forward pass: at GPT2-XL D = 256 u = 8, 31 microbatches
    of the LM head's input, 1.6 GiB the peak left out (predicted 5.40 GiB, 6.53 allocated; at u = 16 the
    OOM the peak did not predict; entry 84). Today's builder stashes it; graphs read from the schedule
    files of before still wait. The rank runs its compute tasks in graph order."""
    pos: dict[int, int] = {}
    count: dict[int, int] = {}
    for t in g.tasks:
        if t.kind != "UPD":
            pos[t.id] = count.get(t.rank, 0)
            count[t.rank] = pos[t.id] + 1
    # alive strictly between the producer's and the consumer's positions on the rank: a difference array
    delta = {r: [0] * (n + 1) for r, n in count.items()}
    for t in g.tasks:
        if t.kind == "UPD":
            continue
        for p, what in ((t.act_in[1] if t.act_in[0] == "task" else None, "Y"), (t.grad_in, "dX")):
            if p is None or g.tasks[p].rank != t.rank or pos[t.id] - pos[p] < 2:
                continue
            q = g.tasks[p]
            nbytes = int((costs.xout[q.pack[1] - 1] if what == "Y" else costs.xin[q.pack[0]]) * q.num_samples)
            delta[t.rank][pos[p] + 1] += nbytes
            delta[t.rank][pos[t.id]] -= nbytes
    run = {r: 0 for r in count}
    for t in g.tasks:
        if t.kind != "UPD":
            run[t.rank] += delta[t.rank][pos[t.id]]
            infos[t.id].waiting_bytes = run[t.rank]


# passes that re-time the compute beside resident NCCL kernels from the previous pass's timeline
BESIDE_NCCL_PASSES = 2


def simulate(g: TaskGraph, costs: LayerCosts, params: SimParams, cap: float | None = None,
             record: bool = False) -> SimResult:
    """Simulate `params.iterations` iterations of graph g. costs: LayerCosts of the model's profile.

    With `params.beside_nccl_slowdown` > 1 and sends between GPUs, each compute task is slowed by that
    factor over the share of it that ran beside a resident NCCL kernel on its GPU, as the previous pass
    timed it (`_beside_nccl_scale`); the timeline is re-simulated BESIDE_NCCL_PASSES times."""
    return _simulate(g, costs, params, cap, record)[0]


def task_spans(g: TaskGraph, costs: LayerCosts, params: SimParams, cap: float | None = None) -> dict[int, tuple]:
    """Per compute task id, (start, end) of its GPU compute in the last simulated iteration, in seconds from
    that iteration's start (the previous iteration's end): what a run's `task_spans` records
    (harmony/runtime/task_clock.py), to set beside it (`experiments/resimulate_runs.py --task-spans`)."""
    result, (c_start, _, c_end) = _simulate(g, costs, params, cap, False)
    origin = result.iteration_ends[-2] if len(result.iteration_ends) > 1 else 0.0
    return {t.id: (c_start[t.id] - origin, c_end[t.id] - origin) for t in g.tasks if t.kind != "UPD"}


def task_issue_seconds(g: TaskGraph, costs: LayerCosts, params: SimParams) -> dict[int, float]:
    """Per compute task id, the seconds the model's host lane spends issuing it: its vLayers' profiled issue
    times plus the runtime's charge per task (SimParams.host_task_s, host_vlayer_s). What a run's issue
    intervals (`task_issued`) are to be set beside (`experiments/resimulate_runs.py --task-spans`)."""
    return {t.id: _device_issue(t, costs, params)[1] for t in g.tasks if t.kind != "UPD"}


def simulate_receive_modes(g: TaskGraph, costs: LayerCosts, params: SimParams, cap: float | None,
                           modes: tuple[str, ...], beat: float | None = None) -> tuple[str, SimResult]:
    """The fastest feasible of the receive `modes` for graph g (the first on a tie) and its simulation. The
    modes differ only in which compute runs beside NCCL, so they share the task costs and the first pass,
    the one timed as profiled (a second mode takes two more passes, not three). beat: a time to beat (the
    search's best so far); when even the first pass, with no compute slowed, is no faster, no mode after
    the first can be, and they are not simulated."""
    best = None
    for m, (sim, _) in _simulate_modes(g, costs, params, cap, False, modes, beat).items():
        # in the order of `modes`, strictly faster to replace: the first mode wins a tie
        if best is None or (sim.feasible, -sim.iter_time_s) > (best[1].feasible, -best[1].iter_time_s):
            best = (m, sim)
    return best


def _simulate(g: TaskGraph, costs: LayerCosts, params: SimParams, cap: float | None,
              record: bool) -> tuple[SimResult, tuple[list[float], ...]]:
    return _simulate_modes(g, costs, params, cap, record, (params.p2p_receive,))[params.p2p_receive]


def _simulate_modes(g: TaskGraph, costs: LayerCosts, params: SimParams, cap: float | None, record: bool,
                    modes: tuple[str, ...], beat: float | None = None) -> dict[str, tuple[SimResult, tuple]]:
    """Per receive mode, the simulation of g and its last iteration's task times (`_run`); the modes after
    the first only while the unslowed first pass is faster than `beat` (simulate_receive_modes)."""
    sizes = costs.layer_sizes()
    infos = _prepare(g, costs, sizes, params)       # the receive mode does not enter the task costs
    order = _sim_order(g)
    crosses = any(x.p2p_act or x.p2p_grad for x in infos if x.kind != "UPD")
    unscaled = None                                  # the first pass: no slowdown, the same for every mode
    out = {}
    for mode in modes:
        if out and beat is not None and unscaled is not None and unscaled[0].iter_time_s >= beat:
            break
        p = params if mode == params.p2p_receive else replace(params, p2p_receive=mode)
        scale = None
        if p.nccl_slowdown() != 1.0 and crosses:
            for k in range(BESIDE_NCCL_PASSES):
                if k == 0:
                    unscaled = unscaled or _run(g, infos, order, sizes, p, cap, False, None)
                    times = unscaled[1]
                else:
                    times = _run(g, infos, order, sizes, p, cap, False, scale)[1]
                scale = _beside_nccl_scale(infos, *times, p.nccl_slowdown(), g.config.gpus, mode)
        out[mode] = _run(g, infos, order, sizes, p, cap, record, scale)
    return out


def _beside_nccl_scale(infos: list[_Info], c_start: list[float], c_first: list[float], c_end: list[float],
                       f: float, gpus: int, receive: str) -> list[float]:
    """Per task, how much longer its GPU compute takes beside resident NCCL kernels: 1 + (f - 1) x the
    share of [start, end] during which an NCCL kernel of its rank is resident. A send is posted as the
    producer's first microbatch is computed and stays on the GPU until its receive is posted
    (harmony/runtime/p2p.py). Lazy receives are posted just before each microbatch, so the producer's rank
    holds a send from the producer's first microbatch to the consumer's last. Eager receives are all posted
    at the consumer's start: the producer's rank holds a send until then, and the consumer's rank holds
    receives from its start until the producer's last microbatch is computed."""
    resident: list[list[tuple[float, float]]] = [[] for _ in range(gpus)]
    for q, x in enumerate(infos):
        if x.kind == "UPD":
            continue
        t = x.t
        for p, tr in ((t.act_in[1] if t.act_in[0] == "task" else None, x.p2p_act), (t.grad_in, x.p2p_grad)):
            if p is None or tr is None:
                continue
            spans = ([(infos[p].rank, c_first[p], c_end[q] - x.dev_last)] if receive == "lazy" else
                     [(infos[p].rank, c_first[p], c_start[q]), (x.rank, c_start[q], c_end[p])])
            for rank, a, b in spans:
                resident[rank].append((a, b))
    merged = [merge_intervals(spans) for spans in resident]      # empty and reversed spans dropped
    scale = [1.0] * len(infos)
    for tid, x in enumerate(infos):
        s, e = c_start[tid], c_end[tid]
        if x.kind == "UPD" or e <= s:
            continue
        scale[tid] = 1.0 + (f - 1.0) * intersection_length([(s, e)], merged[x.rank]) / (e - s)
    return scale


def _run(g: TaskGraph, infos: list[_Info], order: list[int], sizes, params: SimParams, cap: float | None,
         record: bool, scale: list[float] | None) -> tuple[SimResult, tuple[list[float], ...]]:
    """One simulation of the graph; `scale` stretches each task's GPU compute (None: as profiled).
    Returns the result and each compute task's start, first microbatch's end and end in the last
    iteration."""
    cfg = g.config
    N = cfg.gpus
    pack_index = {p: i for i, p in enumerate(cfg.bwd_packs)}
    h2d_bw = params.h2d_Bps * params.duplex_for(N)
    d2h_bw = params.d2h_Bps * params.duplex_for(N)
    shared = params.shared_link
    link = (lambda r: 0) if shared else (lambda r: r)
    h2d_free = [0.0] * N
    d2h_free = [0.0] * N
    # one P2P lane per channel (src, dst): the runtime gives each direction its own process group, so its
    # own NCCL stream (harmony/runtime/p2p.py). Lanes per sending and per receiving GPU instead queued a
    # message behind another channel's in the order tasks are simulated, not in time: swap-pp's last stage
    # at N = 4 then waited for its next activation until the stage before it had sent a gradient the other
    # way, 3.33 s predicted against 2.01 measured (docs/performance.md entry 80)
    channel_free: dict[tuple[int, int], float] = {}
    comp_free = [0.0] * N
    ring_free = 0.0
    cpu_free = [0.0] * N
    last_comp: list[tuple | None] = [None] * N   # (start, end, peak) of the rank's previous compute task
    peak = [0] * N
    task_peaks = [x.peak for x in infos]       # a task's own peak plus what the rank still holds for sends
    task_held = [0] * len(infos)
    waits: set[int] = set()
    upd_prev = [0.0] * len(cfg.bwd_packs)
    # per rank, the end of the latest device-to-host copy it has queued (its D2H stream is in order)
    d2h_last = [0.0] * N
    ends = []
    ev = [] if record else None
    mem = [] if record else None
    nt = len(infos)
    c_start = [0.0] * nt
    c_first = [0.0] * nt
    c_end = [0.0] * nt
    stash_done = [0.0] * nt
    grad_done = [0.0] * nt
    pipe = params.mb_pipeline
    dev_s, iss_s = [0.0] * N, [0.0] * N
    for x in infos:
        if x.kind != "UPD":
            dev_s[x.rank] += x.dev
            iss_s[x.rank] += x.iss
    compute_s = [max(d, i) for d, i in zip(dev_s, iss_s)]      # as schedule_bound's compute term

    for it in range(params.iterations):
        upd_cur = [0.0] * len(cfg.bwd_packs)
        it_end = 0.0
        held = [0] * N                          # bytes the rank's previous compute task sent to other GPUs
        # per rank, when each compute task issued this iteration had run its kernels and the D2H copies queued
        # up to it (the worker's Copier.mark after the task; its run-ahead window starts afresh each iteration)
        marks: list[list[float]] = [[] for _ in range(N)]
        # each rank's host starts issuing when the last iteration has ended (the runtime waits for its
        # copies, sends and updates there)
        host_free = [ends[-1] if ends else 0.0] * N
        for tid in order:
            x = infos[tid]
            t = x.t
            if x.kind == "UPD":
                deps = t.deps
                if cfg.mode == "vDP" and any(infos[d].allreduce for d in deps):
                    ar = max(infos[d].allreduce for d in deps)
                    a0 = max(ring_free, max(c_end[d] for d in deps))
                    a1 = a0 + ar / params.p2p(0, 1 % N)
                    ring_free = a1
                    if params.allreduce == "inline":     # each rank's compute stream waits for the collective
                        for d in deps:
                            comp_free[infos[d].rank] = max(comp_free[infos[d].rank], a1)
                    if record:
                        ev.append(("gpus", "allreduce", f"AR {t.pack}", a0, a1, {"bytes": ar}))
                    for d in deps:
                        dx = infos[d]
                        if dx.d2h_grads:
                            L = link(dx.rank)
                            s0 = max(d2h_free[L], a1)
                            s1 = s0 + dx.d2h_grads / d2h_bw
                            d2h_free[L] = s1
                            grad_done[d] = s1
                            d2h_last[dx.rank] = max(d2h_last[dx.rank], s1)
                            if record:
                                ev.append((dx.rank, "swap-out", f"dW {t.pack}", s0, s1, {"bytes": dx.d2h_grads}))
                        else:
                            grad_done[d] = a1
                ready = max(grad_done[d] for d in deps)
                proc = 0 if params.cpu_shared and not params.cpu_threads else t.rank
                u0 = max(cpu_free[proc], ready)
                u1 = u0 + x.upd_dur
                cpu_free[proc] = u1
                upd_cur[pack_index[t.pack]] = u1
                it_end = max(it_end, u1)
                if record:
                    ev.append(("host", f"cpu{proc}", f"UPD {t.pack}", u0, u1, {}))
                continue

            r = x.rank
            prev = last_comp[r]
            # --- swap-in: weights (+ stash) prefetched during the previous compute if memory allows
            if prev is None:
                gate = 0.0
            elif cap is None or prev[2] + x.prefetch_bytes <= cap:
                gate = prev[0]
                peak[r] = max(peak[r], prev[2] + x.prefetch_bytes)
                if record and x.prefetch_bytes:
                    mem.append((r, prev[0], prev[2] + x.prefetch_bytes))
            else:
                gate = prev[1]
                if x.prefetch_bytes:
                    waits.add(t.id)
            for pi in x.gate_packs:
                if upd_prev[pi] > gate:
                    gate = upd_prev[pi]
            L = link(r)
            w_end = gate
            if x.w_bytes:
                w0 = max(h2d_free[L], gate)
                w_end = w0 + x.w_bytes / h2d_bw
                h2d_free[L] = w_end
                if record:
                    ev.append((r, "swap-in", f"W {t.pack}", w0, w_end, {"bytes": x.w_bytes}))
            first_in = w_end
            last_in = w_end
            if x.act_h2d:
                a0 = max(h2d_free[L], gate if x.stash_src is None else max(gate, stash_done[x.stash_src]))
                dur = x.act_h2d / h2d_bw
                a1 = a0 + dur
                h2d_free[L] = a1
                first_in = max(first_in, a0 + dur / x.nmb if pipe else a1)
                last_in = max(last_in, a1)
                if record:
                    ev.append((r, "swap-in", f"X {t.pack}", a0, a1, {"bytes": x.act_h2d}))
            # inputs produced by another compute task: the activation (Y) and the output gradient (dY);
            # on the same GPU they are local, else they arrive over P2P
            for p, nbytes, label in ((t.act_in[1] if t.act_in[0] == "task" else None, x.p2p_act, "Y"),
                                     (t.grad_in, x.p2p_grad, "dY")):
                if p is None:
                    continue
                if nbytes is None:
                    f, l = (c_first[p] if pipe else c_end[p]), c_end[p]
                else:
                    f, l = _p2p(nbytes, r, p, infos, c_first, c_end, channel_free, params, pipe,
                                ev, t.pack, label)
                first_in, last_in = max(first_in, f), max(last_in, l)
            # --- compute
            h0 = host_free[r]                   # the host issues this task after the rank's previous one
            if params.run_ahead is not None and len(marks[r]) > params.run_ahead:
                h0 = max(h0, marks[r][-(params.run_ahead + 1)])     # ... and after the run-ahead wait
            host_free[r] = h0 + x.iss
            k = scale[tid] if scale else 1.0
            dev = x.dev * k
            s0 = max(comp_free[r], first_in, h0)
            # the last microbatch runs once its input is here, issued already unless the host is behind
            s1 = max(s0 + dev, h0 + x.iss, last_in + x.dev_last * k)
            comp_free[r] = s1
            c_start[tid], c_first[tid], c_end[tid] = s0, max(s0 + x.dev_first * k, h0 + x.iss_first), s1
            x_peak = x.peak + held[r] + x.waiting_bytes
            task_held[tid] = held[r]
            held[r] = x.sent_bytes
            task_peaks[tid] = x_peak
            last_comp[r] = (s0, s1, x_peak)
            if x_peak > peak[r]:
                peak[r] = x_peak
            it_end = max(it_end, s1)
            if record:
                ev.append((r, "compute", f"{x.kind} {t.pack}", s0, s1,
                           {"u": t.ubatch, "samples": t.num_samples, "peak_bytes": x_peak, "device_s": dev}))
                mem.append((r, s0, x_peak))
            # --- swap-out
            if x.d2h_act:
                dur = x.d2h_act / d2h_bw
                o0 = max(d2h_free[L], c_first[tid])
                o1 = max(o0 + dur, s1 + dur / x.nmb) if pipe else max(d2h_free[L], s1) + dur
                d2h_free[L] = o1
                stash_done[tid] = o1
                d2h_last[r] = max(d2h_last[r], o1)
                it_end = max(it_end, o1)
                if record:
                    ev.append((r, "swap-out", f"X {t.pack}", o0, o1, {"bytes": x.d2h_act}))
            if x.d2h_grads and not x.allreduce:
                o0 = max(d2h_free[L], s1)
                o1 = o0 + x.d2h_grads / d2h_bw
                d2h_free[L] = o1
                grad_done[tid] = o1
                d2h_last[r] = max(d2h_last[r], o1)
                if record:
                    ev.append((r, "swap-out", f"dW {t.pack}", o0, o1, {"bytes": x.d2h_grads}))
            elif x.kind == "BWD" and not x.allreduce:
                grad_done[tid] = s1
            marks[r].append(max(s1, d2h_last[r]))
        upd_prev = upd_cur
        ends.append(it_end)

    K = len(ends)
    iter_time = (ends[-1] - ends[0]) / (K - 1) if K > 1 else ends[0]
    totals = {k: 0 for k in TRANSFER_KINDS}
    for x in infos:
        if x.kind == "UPD":
            continue
        for tr in task_transfers(g, x.t, sizes):
            totals[tr.kind] += tr.nbytes
    totals["h2d"] = totals["h2d_weights"] + totals["h2d_act"]
    totals["d2h"] = totals["d2h_grads"] + totals["d2h_act"]
    feasible = cap is None or max(task_peaks) <= cap
    cpu = sum(x.upd_dur for x in infos if x.kind == "UPD")
    return (SimResult(iter_time, ends, totals, peak, task_peaks, feasible, cap, compute_s, cpu, sorted(waits),
                      ev or [], mem or [], iss_s, task_held), (c_start, c_first, c_end))


def _p2p(tr, r, p, infos, c_first, c_end, channel_free, params, pipe, ev, pack, label):
    nbytes, src = tr
    dur = nbytes / params.p2p(src, r)
    pn = infos[p].nmb
    free = channel_free.get((src, r), 0.0)
    if pipe:
        a0 = max(free, c_first[p])
        first = a0 + dur / pn
        last = max(a0 + dur, c_end[p] + dur / pn)
    else:
        a0 = max(free, c_end[p])
        first = last = a0 + dur
    channel_free[(src, r)] = last
    if ev is not None:
        ev.append((r, "p2p-in", f"{label} {pack} from {src}", a0, last, {"bytes": nbytes}))
    return first, last
