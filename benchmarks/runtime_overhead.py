"""The runtime's host overhead per vLayer, on the CPU device.

Runs one Harmony worker (N = 1, vPP, one microbatch per task) in this process on a deep, narrow model
(resnet-tiny with many blocks: ~130 vLayers of tiny convs + BatchNorm, the shape of resnet1026 at toy size)
and times `Worker._iteration`, the code a spawned worker runs per iteration (prefetch, install, release,
inputs, forward, recompute + backward, gradients to the arena, UPD). The same in-process path the worker
process takes, minus the process boundary and the results queue (which are outside the iteration's timing
in a real run too).

Next to it, plain PyTorch on the same layers and packs, no runtime: forward of every FWD pack without
autograd, then per BWD pack (reverse order) a recompute from the pack's input with autograd and backward
with the incoming gradient, then one optimizer step (the runtime's UPDs do the same step on the arena).

    overhead per vLayer = (median runtime iteration - median plain iteration) / number of vLayers
    (paired)            = median over iterations of (runtime - plain) / number of vLayers

Runtime and plain iterations alternate, so a load change on the machine hits both alike.

Both use one torch thread; medians over `--iters` timed iterations after `--warmup`. `--device cuda` runs
both loops on the GPU instead (each iteration ends with a device synchronize): the model is narrow enough
that both are host-bound there too, so the difference is the runtime's host work with its CUDA calls, the
per-task and per-microbatch cost docs/performance.md entry 40 measures on the GPU host.
`--profile` adds a cProfile of the runtime iterations (top functions by own time and cumulative time);
`--parts` times the worker's per-task steps on the host without cProfile's slowdown.

    python benchmarks/runtime_overhead.py                       # table
    python benchmarks/runtime_overhead.py --profile --packs 8   # + cProfile hot spots
    python benchmarks/runtime_overhead.py --weight-copies per-tensor per-vlayer   # one copy per vLayer, A/B
    python benchmarks/runtime_overhead.py --model bert-tiny --set n_layer=32 hidden_dropout=0.1 attn_dropout=0.1 \
        --minibatch 4 --ubatch 2 --packs 8 --seeding device all-backends   # dropout seeding, A/B (entry 61)
    python benchmarks/runtime_overhead.py --device cuda --packs 1 --minibatch 8 --ubatch 2   # GPU host
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch

from harmony.decompose import decompose_model
from harmony.jsonio import write_json
from harmony.models import get_model
from harmony.optim import make_optimizer, set_lr
from harmony.runtime import Prepared
from harmony.runtime.transfer import DEFAULT_WEIGHT_COPIES, WEIGHT_COPIES
from harmony.schedule.io import make_schedule_record
from harmony.schedule.simulate import CUDA_HOST_TASK_S
from harmony.schedule.tasks import ScheduleConfig, build_task_graph


class _Sink:
    def put(self, msg) -> None:
        pass


def packs_of(L: int, size: int):
    """Backward packs of `size` vLayers (the last one holds the loss); forward packs = all but the last."""
    bwd = [(s, min(s + size, L)) for s in range(0, L, size)]
    if len(bwd) > 1 and bwd[-1][1] - bwd[-1][0] < 2:          # keep the loss with a real layer
        bwd[-2:] = [(bwd[-2][0], L)]
    fwd = bwd[:-1]
    return tuple(bwd), tuple(fwd)


def build(model: str, overrides: dict, D: int, pack: int, ubatch: int | None = None):
    spec = get_model(model, **overrides)
    mj = decompose_model(spec, source={"kind": "zoo", "name": model, "overrides": overrides}, with_flops=False)
    L = mj["num_vlayers"]
    bwd, fwd = packs_of(L, pack)
    u = ubatch or D
    cfg = ScheduleConfig(mode="vPP", gpus=1, minibatch=D, ubatch_fwd=u, ubatch_bwd=u, bwd_packs=bwd, fwd_packs=fwd)
    g = build_task_graph(cfg, L)
    return spec, make_schedule_record(mj, g), g, L


SEEDINGS = ("device", "all-backends")


@contextlib.contextmanager
def seeding_as(how: str):
    """'all-backends': the worker seeds dropout with torch.manual_seed, as before docs/performance.md entry
    61 (every backend's generator; a formatted stack trace per backend not initialised), for an A/B."""
    import harmony.runtime.worker as worker
    if how == "device":
        yield
        return
    runtime_seeding = worker.seed_dropout
    worker.seed_dropout = lambda device, seed: torch.manual_seed(seed)
    try:
        yield
    finally:
        worker.seed_dropout = runtime_seeding


PARTS = ("prefetch", "install", "run_fwd", "run_bwd", "release", "run_upd")   # a task's steps (worker.py)
# inside run_bwd: the weight gradients' handling once a BWD task's backward is done (to the arena, or kept),
# one step per tensor of every vLayer of the pack; timed apart from the backward's own issue
SUB_PARTS = ("_finish_grads",)


class RuntimeLoop:
    """One in-process worker (rank 0, N = 1) of the schedule; `step()` runs and times one iteration."""

    def __init__(self, record, graph, iters: int, weight_copies: str = DEFAULT_WEIGHT_COPIES, device: str = "cpu"):
        from harmony.runtime.worker import Worker
        self.prep = Prepared(record, graph, iters=iters, device=device, update_threads=1, weight_copies=weight_copies)
        w = self.w = Worker(0, dict(self.prep.job, threads_per_worker=1), _Sink())
        w.setup()
        w.start_run()
        self.it = 0

    def time_parts(self) -> None:
        """Wrap the worker's per-task steps with host timers (`--parts`): seconds each takes on the host, its
        CUDA calls issued but not waited for, summed per iteration; and the garbage collections inside."""
        import gc
        self.take_parts()
        self._gc_counter = lambda phase, info: setattr(self, "gc_runs", self.gc_runs + (phase == "start"))
        gc.callbacks.append(self._gc_counter)      # removed in close(): the next packing adds its own
        for name in PARTS + SUB_PARTS:
            def timed(*a, _fn=getattr(self.w, name), _name=name, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    self.part_s[_name] += time.perf_counter() - t0
            setattr(self.w, name, timed)

    def take_parts(self) -> dict:
        """This iteration's seconds per part (and 'gc': collections), reset for the next."""
        out = dict(getattr(self, "part_s", {}), gc=getattr(self, "gc_runs", 0))
        self.part_s, self.gc_runs = {k: 0.0 for k in PARTS + SUB_PARTS}, 0
        return out

    def step(self, prof=None) -> float:
        w = self.w
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        w._iteration(self.it)
        float(w.loss_acc)
        _sync()
        if prof is not None:
            prof.disable()
        dt = time.perf_counter() - t0
        w.counters.take()
        self.it += 1
        return dt

    def close(self) -> None:
        # as worker_main's teardown: unregister the pinned arena before its mapping goes, or the next
        # packing's arena, mapped at the freed address, fails cudaHostRegister with error 712 (already
        # registered; h100-overhead1, 2026-11-24)
        self.w.updater.close()
        self.w.arena.unpin()
        self.prep.close()
        if getattr(self, "_gc_counter", None) is not None:
            import gc
            gc.callbacks.remove(self._gc_counter)


class PlainLoop:
    """Plain PyTorch over the same layers, packs and microbatches: FWD packs without autograd, then per BWD
    pack (reverse) recompute + backward with the incoming gradient, each pack microbatch by microbatch as
    the runtime's tasks run them, then one optimizer step."""

    def __init__(self, spec, graph, D: int, device: str = "cpu"):
        self.spec, self.cfg = spec, graph.config
        self.layers = spec.build(device, seed=0)
        self.layers.train()
        self.opt = make_optimizer([p for p in self.layers.parameters() if p.requires_grad], spec.optimizer)
        batch = [t.to(device) for t in spec.synthetic_batch(D, generator=torch.Generator().manual_seed(1))]
        u = graph.config.ubatch_fwd
        self.microbatches = [tuple(t[i:i + u] for t in batch) for i in range(0, D, u)]
        self.it = 0

    def step(self) -> float:
        cfg, layers = self.cfg, self.layers
        t0 = time.perf_counter()
        inputs, mbs = {}, self.microbatches
        with torch.no_grad():
            for s, e in cfg.fwd_packs:
                inputs[s] = mbs
                out = []
                for xs in mbs:
                    for layer in layers[s:e]:
                        xs = layer(*xs)
                    out.append(xs)
                mbs = out
        inputs[cfg.bwd_packs[-1][0]] = mbs
        gs = None
        for s, e in reversed(cfg.bwd_packs):
            new_gs = []
            for m, xs in enumerate(inputs[s]):
                xin = tuple(x.detach().requires_grad_(x.dtype.is_floating_point) for x in xs)
                with torch.enable_grad():
                    ys = xin
                    for layer in layers[s:e]:
                        ys = layer(*ys)
                    if gs is None:
                        ys[0].backward()
                    else:
                        yf = [y for y in ys if y.requires_grad]
                        torch.autograd.backward(yf, gs[m][:len(yf)])
                new_gs.append([x.grad for x in xin if x.grad is not None])
            gs = new_gs
        set_lr(self.opt, self.spec.optimizer, self.it)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        _sync()
        self.it += 1
        return time.perf_counter() - t0


def tensors_per_vlayer(model_json: dict, params_only: bool = False) -> list[int]:
    """Each vLayer's parameters and buffers (`params_only`: parameters), as `harmony decompose` counts them:
    the tensors the runtime installs and releases, one by one, each task the vLayer is in; a parameter's
    gradient also goes to the arena."""
    return [v["param_tensors"] + (0 if params_only else v["buffer_tensors"]) for v in model_json["vlayers"]]


def work_counts(model_json: dict, graph) -> dict:
    """What the runtime's per-vLayer host work could scale with, summed over the compute tasks of an
    iteration: vLayers a task holds, their tensors, and both again per microbatch (a task runs each vLayer
    once a microbatch); BWD tasks apart (only they hand gradients to the arena)."""
    tensors, params = tensors_per_vlayer(model_json), tensors_per_vlayer(model_json, params_only=True)
    out = {"tensors": sum(tensors), "tensors_per_vlayer_mean": sum(tensors) / len(tensors),
           "param_tensors_per_vlayer_mean": sum(params) / len(params)}
    for key in ("vlayer_tasks", "tensor_tasks", "param_tasks", "vlayer_microbatches", "tensor_microbatches",
                "bwd_vlayer_tasks", "bwd_tensor_tasks", "bwd_param_tasks"):
        out[key] = 0
    for t in graph.rank_tasks(0):
        if t.kind == "UPD":
            continue
        s, e = t.pack
        nmb = -(-t.num_samples // t.ubatch)
        nt, npar = sum(tensors[s:e]), sum(params[s:e])
        out["vlayer_tasks"] += e - s
        out["tensor_tasks"] += nt
        out["param_tasks"] += npar
        out["vlayer_microbatches"] += (e - s) * nmb
        out["tensor_microbatches"] += nt * nmb
        if t.kind == "BWD":
            out["bwd_vlayer_tasks"] += e - s
            out["bwd_tensor_tasks"] += nt
            out["bwd_param_tasks"] += npar
    return out


def _sync() -> None:
    """An iteration ends when the GPU has finished it (a no-op on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def measure(spec, record, graph, D: int, iters: int, warmup: int, profile: bool, weight_copies: str = DEFAULT_WEIGHT_COPIES,
            device: str = "cpu", parts: list | None = None):
    """Runtime and plain iterations alternated (so load drifts on the machine hit both alike). `parts`: a
    list to append each timed runtime iteration's per-part host seconds to (RuntimeLoop.time_parts)."""
    rt_loop = RuntimeLoop(record, graph, iters + warmup, weight_copies, device)
    pl_loop = PlainLoop(spec, graph, D, device)
    if parts is not None:
        rt_loop.time_parts()
    prof = cProfile.Profile() if profile else None
    rt, pl = [], []
    try:
        for i in range(iters + warmup):
            r = rt_loop.step(prof if i >= warmup else None)
            got = rt_loop.take_parts() if parts is not None else None
            p = pl_loop.step()
            if i >= warmup:
                rt.append(r)
                pl.append(p)
                if got is not None:
                    parts.append(got)
    finally:
        rt_loop.close()
    return rt, pl, prof


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet-tiny")
    ap.add_argument("--blocks", type=int, default=32, help="resnet-tiny: blocks per stage (4 stages)")
    ap.add_argument("--widths", type=int, nargs=4, default=[8, 8, 8, 8],
                    help="resnet-tiny: channels per stage (narrow: the copies the CPU device makes stay small, "
                         "so the difference is the runtime's Python work, as on a host-bound GPU)")
    ap.add_argument("--image-size", type=int, default=8)
    ap.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                    help="model config fields for any model, e.g. --model bert-tiny --set n_layer=32 "
                         "hidden_dropout=0.1 attn_dropout=0.1 (values read as JSON, else as strings)")
    ap.add_argument("--minibatch", type=int, default=4)
    ap.add_argument("--ubatch", type=int, default=None,
                    help="microbatch size of every task (default: the minibatch, one microbatch); the swap "
                         "baselines run one-vLayer packs of many microbatches (--packs 1 --ubatch 1)")
    ap.add_argument("--packs", type=int, nargs="+", default=[8, 32], help="vLayers per pack (one run each)")
    ap.add_argument("--weight-copies", nargs="+", default=[DEFAULT_WEIGHT_COPIES], choices=WEIGHT_COPIES,
                    help="harmony run --weight-copies: one run per value and packing (default: the "
                         f"runtime's, {DEFAULT_WEIGHT_COPIES}; docs/performance.md's entries up to 61 ran "
                         "with per-tensor where their command names none)")
    ap.add_argument("--seeding", nargs="+", default=["device"], choices=SEEDINGS,
                    help="how the worker seeds a stochastic vLayer's dropout: 'device', the runtime's (the "
                         "device's generator only); 'all-backends', torch.manual_seed as before entry 61, "
                         "for an A/B. One run per value and packing")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: the same narrow model on the GPU, where both loops are host-bound, so the "
                         "difference is the runtime's host work with its CUDA calls (docs/performance.md entry 40)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile the runtime iterations of the first packing")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--parts", action="store_true",
                    help="time the worker's per-task steps (prefetch, install, run_fwd, run_bwd, release, run_upd) "
                         "on the host, ms per iteration (medians), and count garbage collections (entry 40)")
    ap.add_argument("--json", metavar="PATH", default=None,
                    help="also write the table (and with --parts the per-part medians) to PATH, atomically, with "
                         "each packing's tensors per vLayer: for fitting the runtime's host work per vLayer "
                         "against its tensors across models (docs/performance.md entry 97)")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device visible to torch (run it on the GPU machine, or leave it out)")
    torch.set_num_threads(1)
    overrides = {"blocks": (a.blocks,) * 4, "widths": tuple(a.widths),
                                          "stem_width": a.widths[0], "image_size": a.image_size} if a.model.startswith("resnet") else {}
    for item in a.set:
        field, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set {item!r}: expected FIELD=VALUE, e.g. n_layer=32")
        try:
            overrides[field] = json.loads(value)
        except json.JSONDecodeError:
            overrides[field] = value
    rows, records = [], []
    u = a.ubatch or a.minibatch
    if u < 1 or a.minibatch % u:
        ap.error(f"--ubatch {u} must divide --minibatch {a.minibatch}")
    n_mb = a.minibatch // u
    for k, (pack, copies, seeding) in enumerate((p, c, sd) for p in a.packs for c in a.weight_copies
                                                for sd in a.seeding):
        spec, record, graph, L = build(a.model, overrides, a.minibatch, pack, a.ubatch)
        parts = [] if a.parts else None
        with seeding_as(seeding):
            rt, pl, prof = measure(spec, record, graph, a.minibatch, a.iters, a.warmup, a.profile and k == 0,
                                   copies, a.device, parts)
        part_ms = {name: statistics.median(x[name] for x in parts) * 1e3 for name in PARTS + SUB_PARTS} \
            if parts else None
        if parts:
            label = f"pack {pack}, {copies}" + (f", seeding {seeding}" if len(a.seeding) > 1 else "")
            print(f"{label}: host ms per iteration (median of {len(parts)}): " + ", ".join(
                f"{name} {part_ms[name]:.1f}" for name in PARTS)
                + f"; grads to the arena {part_ms['_finish_grads']:.1f} of run_bwd's"
                + f"; garbage collections per iteration {statistics.median(x['gc'] for x in parts):g}")
        r, p = statistics.median(rt), statistics.median(pl)
        d = statistics.median(x - y for x, y in zip(rt, pl))     # per-pair difference: robust to drifts
        ntasks = sum(1 for t in graph.rank_tasks(0) if t.kind != "UPD")
        rows.append((pack, copies, L, ntasks, r, p, (r - p) / L * 1e6, d / L * 1e6, d / L / n_mb * 1e6, seeding))
        records.append({"pack": pack, "weight_copies": copies, "seeding": seeding, "vlayers": L,
                        "compute_tasks": ntasks, "microbatches": n_mb, **work_counts(record["model"], graph),
                        "runtime_s": rt, "plain_s": pl, "paired_overhead_s": d, "parts_ms_median": part_ms})
        if prof is not None:
            for key in ("tottime", "cumulative"):
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
                print(f"--- cProfile of {a.iters} runtime iterations, pack {pack}, sorted by {key} ---")
                print(s.getvalue())
    print(f"model {a.model} {overrides}  D={a.minibatch}, {n_mb} microbatch(es) of {u}  N=1 vPP  "
          f"{a.device.upper()}, 1 torch thread  {a.iters} timed iterations after {a.warmup} warm-up, medians")
    print(f"{'pack':>5} {'weight copies':>13} {'vLayers':>8} {'tasks':>6} {'runtime ms':>11} {'plain ms':>9} {'overhead us/vLayer':>19} "
          f"{'(paired)':>9} {'per microbatch':>15} {'seeding':>12}")
    for pack, copies, L, nt, r, p, o, od, om, sd in rows:
        print(f"{pack:>5} {copies:>13} {L:>8} {nt:>6} {r * 1e3:>11.2f} {p * 1e3:>9.2f} {o:>19.1f} {od:>9.1f} {om:>15.1f}"
              f" {sd:>12}")
    if a.json:
        from harmony.metrics import env_record
        write_json(a.json, {"argv": list(argv) if argv is not None else sys.argv[1:], "model": a.model,
                            "overrides": overrides, "minibatch": a.minibatch, "ubatch": u, "device": a.device,
                            "iters": a.iters, "warmup": a.warmup, "environment": env_record(a.device),
                            "rows": records})
        print(f"wrote {a.json}")
    # one line through the packings, when they differ in nothing else (one weight-copy mode, one seeding)
    fit = host_task_fit([(nt, od * L / 1e6) for _, _, L, nt, _, _, _, od, _, _ in rows]) \
        if len(a.weight_copies) == len(a.seeding) == 1 else None
    if fit is not None:
        a_s, c_s, n = fit
        print(f"per-task host charge: {a_s * 1e3:.3f} ms a compute task, {c_s * 1e3:.1f} ms an iteration besides "
              f"(least squares of the paired overhead over {n} packings; the simulator charges "
              f"{CUDA_HOST_TASK_S * 1e3:.2f} ms a task on CUDA, docs/performance.md entry 78)")


def host_task_fit(points: list[tuple[int, float]]) -> tuple[float, float, int] | None:
    """Least-squares line overhead_s = a * tasks + c through (compute tasks per iteration, the runtime's paired
    overhead over plain PyTorch in seconds per iteration), one point per packing of the same layers: a is the
    runtime's host work per task, the simulator's `host_task_s` (entry 78 took it from two packings). None
    with fewer than two distinct task counts."""
    if len({t for t, _ in points}) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mo = sum(o for _, o in points) / n
    a = sum((t - mt) * (o - mo) for t, o in points) / sum((t - mt) ** 2 for t, _ in points)
    return a, mo - a * mt, n


if __name__ == "__main__":
    main()
