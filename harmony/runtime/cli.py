"""`harmony run schedule.json --iters K [--data synthetic|PATH] [--gpu-memory 11GiB] [--precision fp32|tf32|bf16]
[--device cpu|cuda] [--warmup W] [--memcpy-trace] -o run.jsonl`"""
from __future__ import annotations

import argparse
import sys

from harmony.schedule.tasks import DEFAULT_RECEIVE_MODE, RECEIVE_MODES


def run_ahead_arg(text: str) -> int | None:
    """--run-ahead: a number of tasks (0 or more), or `none` for no bound."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of tasks, 0 or more, or none (no bound)")
    return value


def add_arguments(p) -> None:
    from harmony.gpumem import PRECISIONS, add_gpu_memory_argument
    from harmony.runtime import RUN_AHEAD
    from harmony.runtime.transfer import DEFAULT_WEIGHT_COPIES, LOAD_BUFFERS, WEIGHT_COPIES
    from harmony.schedule.tasks import ALLREDUCE_MODES, DEFAULT_ALLREDUCE
    p.add_argument("schedule", help="schedule.json (from `harmony schedule`)")
    p.add_argument("--iters", type=int, required=True, help="training iterations, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="first iterations excluded from the medians (default 1)")
    p.add_argument("--data", default="synthetic", help="synthetic (default) or a dataset path")
    add_gpu_memory_argument(p)
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="matmul precision (default: the schedule's)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="cuda: one worker per GPU; cpu: N CPU worker processes (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds any wait on another worker may take before the run is ended (default 600)")
    p.add_argument("--memcpy-trace", action="store_true",
                   help="trace iteration WARMUP in every worker with torch.profiler (CUDA memcpy activity) and "
                        "report its bytes next to our counters (memcpy_trace, memcpy_agrees); that iteration is "
                        "not timed, so use --iters >= WARMUP + 2")
    p.add_argument("--trace-host-ops", action="store_true",
                   help="with --memcpy-trace: record CPU activity in that iteration too (torch ops, the autograd "
                        "engine), so `harmony timeline` ranks the host's own work by self time and shows how "
                        "much of each host thread's time no op covers (Python, the runtime's own code)")
    p.add_argument("--worker-threads", type=int, default=None,
                   help="CPU threads per worker process (torch intra-op: kernels on the CPU device, each "
                        "optimizer step; default: the host's cores divided by the GPUs)")
    p.add_argument("--update-threads", type=int, default=2,
                   help="optimizer steps a worker runs at once, each with --worker-threads threads (default 2)")
    p.add_argument("--load-buffers", choices=LOAD_BUFFERS, default="auto",
                   help="where the GPU buffers of loaded weights and stashes come from: the copy stream's "
                        "allocator pool, or the compute stream's (one pool with the activations, each "
                        "prefetch reserved when the schedule's plan fetches it); auto (default): "
                        "compute-stream where the schedule records that plan (prefetch_waits), else "
                        "copy-stream (docs/runtime.md, GPU memory pools)")
    p.add_argument("--weight-copies", choices=WEIGHT_COPIES, default=DEFAULT_WEIGHT_COPIES,
                   help="per-vlayer (default): copy a loaded vLayer's weights and buffers as one block, one "
                        "allocation and copy per vLayer; per-pack: one per pack (cut where the other packing "
                        "has a boundary); per-tensor: one tensor at a time (docs/runtime.md, Weight copies)")
    p.add_argument("--coalesce-below", type=int, default=None, metavar="VALUES",
                   help="step the parameters with fewer values than this as one flat tensor per pack "
                        "(default 0: every parameter on its own; 4096 coalesces biases and norm weights; "
                        "docs/runtime.md, Optimizer)")
    p.add_argument("--run-ahead", type=run_ahead_arg, default=RUN_AHEAD, metavar="TASKS",
                   help="how many compute tasks the host may issue past the last one whose kernels and "
                        f"device-to-host copies have completed (default {RUN_AHEAD}: the next task stays queued "
                        "on the GPU; none: no bound). "
                        "A block a pending copy reads is not reusable, so running far ahead grows the "
                        "allocator's reserve past the plan (docs/runtime.md, Host run-ahead)")
    p.add_argument("--deterministic", action="store_true",
                   help="on cuda, deterministic kernels only (torch.use_deterministic_algorithms, cuDNN "
                        "deterministic, cuBLAS's fixed workspace), so that two runs of the schedule compute the "
                        "same bits, which GPT-2's fused attention backward otherwise does not; an op without a "
                        "deterministic CUDA kernel fails the run, naming it. For checking, not timing: GPT-2 medium ran 2x "
                        "slower with it on H200s (docs/performance.md entries 71-72)")
    p.add_argument("--allreduce", choices=ALLREDUCE_MODES, default=DEFAULT_ALLREDUCE,
                   help="vDP on cuda: inline (default), the compute stream waits for each pack's gradient "
                        "all-reduce before the next task; overlap, only the gradients' copy to the host waits "
                        "for it and the next task computes meanwhile (SimParams.allreduce models either). The same sums "
                        "either way (docs/runtime.md, The all-reduce; docs/performance.md entry 77)")
    p.add_argument("--keep-layout", action=argparse.BooleanOptionalAction, default=True,
                   help="a channels-last model (--set channels_last=true): its activations and their gradients "
                        "cross pack boundaries, to another GPU or to the host's stash, in their own layout (as "
                        "NHWC views), the default; --no-keep-layout sends and stashes them NCHW, which the sender "
                        "and the receiving vLayer each reorder (4-7%% slower on ResNet1026 and VGG416, "
                        "docs/performance.md entry 108). The same numbers either way; no effect on other models")
    p.add_argument("--ordered-reduce", action="store_true",
                   help="vDP: sum the ranks' gradients in rank order on every rank (an all-gather, then the "
                        "additions), as `python -m harmony.workflow reference --shares N` does, instead of the "
                        "all-reduce, whose association over more than two GPUs is NCCL's own: with "
                        "--deterministic a vDP run at any N then equals that reference bit for bit. For checking: "
                        "it moves (N - 1)x the gradients per rank")
    p.add_argument("--arena-prefault", action=argparse.BooleanOptionalAction, default=None,
                   help="allocate the host pages the workers pin on several threads while they start, "
                        "instead of inside each worker's cudaHostRegister (about 2 GB/s there). Default: on "
                        "with --device cuda (it cut the set-up of figure 10's two largest arenas on the H100 by "
                        "20-40 s, iterations unchanged; docs/performance.md entry 45), off on the CPU, where "
                        "nothing is pinned")
    p.add_argument("--p2p-max-ctas", type=int, default=None, metavar="BLOCKS",
                   help="cap the thread blocks of each NCCL send/recv kernel between GPUs (vPP's activations "
                        "and gradients; default: NCCL's choice). A send sits on the GPU beside the compute "
                        "until its receive is posted (docs/performance.md entry 46)")
    p.add_argument("--p2p-receive", choices=RECEIVE_MODES, default=None,
                   help="when a task posts its receives from another GPU: eager, all when the task starts, so "
                        "the sender's NCCL kernels leave its GPU sooner; lazy, each just before its microbatch "
                        "(docs/performance.md entry 48). Default: the schedule's, which its search chose "
                        f"(prediction.p2p_receive; {DEFAULT_RECEIVE_MODE} for schedules without it; entry 59)")
    p.add_argument("-o", "--output", required=True, help="run.jsonl to write")


def receive_mode_note(record: dict, graph, receive: str | None) -> str | None:
    """A note when --p2p-receive makes the run post its receives from another GPU otherwise than the
    schedule's prediction assumed: the run is still correct, but its measured/predicted ratio then compares
    two receive orders (docs/performance.md entry 48). None when the run takes the schedule's."""
    assumed = (record.get("prediction") or {}).get("p2p_receive")
    if receive is None or assumed is None or assumed == receive or not graph.config.receives_across_gpus:
        return None
    return (f"harmony run: note: the schedule's prediction assumed {assumed} receives from the other GPUs, this "
            f"run makes {receive} ones (--p2p-receive {assumed} runs what was predicted; docs/performance.md "
            f"entry 48)")


def copy_engine_sends_warning(graph, environ) -> str | None:
    """A warning when NCCL is told to move send/recv data with its proxy thread's cudaMemcpyAsync
    (NCCL_P2P_USE_CUDA_MEMCPY=1) and the run sends between GPUs: on 2x H100 (NCCL 2.28.3) a vPP plan at
    N = 2 made no iteration in 225 s with it, where it takes 3.3 s without (docs/performance.md entry 49;
    NCCL's maintainers say it can hang, NVIDIA/nccl#907, #1509)."""
    value = environ.get("NCCL_P2P_USE_CUDA_MEMCPY", "").strip()
    if value in ("", "0") or graph.config.gpus < 2:
        return None
    return (f"harmony run: warning: NCCL_P2P_USE_CUDA_MEMCPY={value} is set; with it a vPP run at N = 2 made no "
            f"iteration in 225 s on 2x H100 (docs/performance.md entry 49). Unset it unless you are measuring it")


def main(args) -> int:
    import torch
    from harmony.gpumem import parse_cap
    from harmony.runtime import run_schedule
    from harmony.schedule.io import load_schedule

    record, graph = load_schedule(args.schedule)
    note = receive_mode_note(record, graph, args.p2p_receive)
    if note:
        print(note, file=sys.stderr)
    import os
    warning = copy_engine_sends_warning(graph, os.environ)
    if warning:
        print(warning, file=sys.stderr)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cap = parse_cap(args.gpu_memory) if args.gpu_memory else record.get("gpu_memory_cap")
    precision = args.precision or record.get("precision") or "fp32"
    for name in ("worker_threads", "update_threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if args.iters < 1:
        raise ValueError("--iters must be at least 1")
    if args.trace_host_ops and not args.memcpy_trace:
        raise ValueError("--trace-host-ops adds CPU activity to the --memcpy-trace iteration: add --memcpy-trace")
    import json
    fault = json.loads(os.environ["HARMONY_FAULT"]) if os.environ.get("HARMONY_FAULT") else None  # tests only
    from harmony.jsonio import DEFERRED_EXIT, Deferred
    try:
        summary = run_schedule(record, graph, iters=args.iters, device=device, data=args.data,
                               precision=precision, gpu_memory_cap=cap, warmup=args.warmup, output=args.output,
                               system=record.get("system") or "harmony", seed=args.seed, timeout_s=args.timeout,
                               fault=fault, memcpy_trace=args.memcpy_trace,
                               trace_host_ops=args.trace_host_ops, worker_threads=args.worker_threads,
                               update_threads=args.update_threads, load_buffers=args.load_buffers,
                               weight_copies=args.weight_copies, coalesce_below=args.coalesce_below,
                               run_ahead=args.run_ahead, arena_prefault=args.arena_prefault,
                               p2p_max_ctas=args.p2p_max_ctas, p2p_receive=args.p2p_receive,
                               deterministic=args.deterministic, ordered_reduce=args.ordered_reduce,
                               allreduce=args.allreduce, keep_layout=args.keep_layout)
    except Deferred as e:       # the device call would end inside the run: the next call runs it
        print(f"harmony run: left for the next call: {e}; no record written", file=sys.stderr)
        return DEFERRED_EXIT
    t = summary.get("iter_time_s")
    print(f"{summary['model']} {summary['mode']} N={summary['gpus']} D={summary['minibatch']}: {summary['status']}"
          + (f", {t:.4f} s/iteration, {summary['samples_per_s']:.2f} samples/s" if t else "")
          + (f" ({summary['message']})" if summary.get("message") else "") + f"; wrote {args.output}",
          file=sys.stderr)
    from harmony.metrics import allocator_warning, format_host_phases, format_reserved_by_stream
    from harmony.gpu_clocks import slower_than_profiled
    from harmony.schedule.io import planned_compute_scale
    for warning in (allocator_warning(summary), slower_than_profiled(
            (record.get("search") or {}).get("profile_gpu_clocks"), summary.get("gpu_clocks"),
            planned_compute_scale(record))):
        if warning:
            print(warning, file=sys.stderr)
    for line in format_host_phases(summary.get("host_phases")) + format_reserved_by_stream(
            summary.get("reserved_by_stream")):
        print(line, file=sys.stderr)
    su = summary.get("setup_s") or {}
    if su.get("workers_ready_after_s") is not None:
        slow = sorted({**su.get("host", {}), **su.get("worker_slowest_rank", {})}.items(), key=lambda kv: -kv[1])[:3]
        print(f"wall {summary.get('wall_s', 0):.1f} s; set-up: host {sum(su.get('host', {}).values()):.1f} s, workers "
              f"ready after {su['workers_ready_after_s']:.1f} s (largest phases: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in slow) + ")"
              + (f"; workers exited {su['workers_exit_s']:.1f} s after the last iteration"
                 if su.get("workers_exit_s") is not None else ""), file=sys.stderr)
    if summary.get("host_pss_bytes"):
        from harmony.units import format_bytes
        arena = summary.get("host_arena_bytes") or 0
        print(f"host memory {format_bytes(summary['host_pss_bytes'])} (launcher and workers, shared pages once; "
              f"the arena {format_bytes(arena)}, pinned {format_bytes(summary.get('host_pinned_bytes') or 0)})",
              file=sys.stderr)
    if args.memcpy_trace:
        tr = {k: v for k, v in (summary.get("memcpy_trace") or {}).items() if k not in ("timeline", "timelines")}
        print(f"memcpy trace {tr}; counted {summary.get('memcpy_counted')}; "
              f"agrees within 1%: {summary.get('memcpy_agrees')}", file=sys.stderr)
    return {"ok": 0, "interrupted": 130}.get(summary["status"], 1)
