"""Start N worker processes on one host, supervise them, and end them all, whatever happens.

The launcher (the process that calls `run_schedule`) owns the host arena and never touches CUDA. It
spawns one worker per GPU (torch.multiprocessing, start method 'spawn'), which rendezvous over TCP on
localhost (gloo on CPU, NCCL on CUDA) and report through one queue: `ready`, one `iteration` record per
rank and iteration, then `done` or `error` (with the failing task, its microbatch and the GPU memory).
On the first error, a worker that dies without a word (crash, kill), no progress for `timeout_s` (once
every rank is ready, for `iteration_stall_s` when the schedule predicts its iteration time), or
Ctrl-C/SIGTERM, the launcher ends every worker (SIGKILL) and returns what it has, marked; collectives in
the workers have timeouts too, so no process is left waiting. Before it ends them on a stall or on SIGTERM
(a time limit), every worker thread's Python stack goes to stderr, so the log says where a hung run sat.
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import torch.multiprocessing as mp


# Once every rank is ready, a run whose schedule predicts its iteration time is ended after this many
# predicted iterations without a report from the workers (at least STALL_MIN_S): a deadlocked candidate
# costs a device call 2-3 minutes, not the set-up window's 330 s (entry 111: swap-pp VGG416 D = 256 at
# u = 8 hung at the GPU memory cap in x2-cl13-rec). None of the 10,791 iterations of the 1,308 committed GPU
# records with a prediction outlasted this window, first iterations (cuDNN's autotuning, the memcpy trace)
# included: the largest ratio, 30x, was a 4 s iteration; the longest, 239 s and 167 s, were 5.1 and 6.5
# predicted iterations.
STALL_ITERATIONS, STALL_MIN_S = 10.0, 120.0
SETUP_MARGIN_S = 30.0   # the set-up window's margin over the job's own timeout_s


def setup_window_s(job: dict) -> float:
    """The launcher's window without progress while `job` sets up: its `timeout_s` + SETUP_MARGIN_S, so the
    workers' own timeouts name the wait first."""
    return float(job.get("timeout_s", 300)) + SETUP_MARGIN_S


def iteration_stall_s(job: dict) -> float:
    """The launcher's window without progress once every rank of `job` is ready: its set-up window, or
    STALL_ITERATIONS predicted iterations (at least STALL_MIN_S) when that is shorter. `predicted_iter_s` is
    set on CUDA runs only (Prepared)."""
    window = setup_window_s(job)
    pred = job.get("predicted_iter_s")
    return min(window, max(STALL_MIN_S, STALL_ITERATIONS * pred)) if pred else window


@dataclass
class Outcome:
    status: str = "ok"                       # ok | oom | error | interrupted
    message: str | None = None
    failure: dict | None = None
    iterations: list[dict] = field(default_factory=list)   # merged over ranks, in order
    pinned_bytes: int = 0
    ready_after_s: float | None = None       # launch -> every worker set up (process start, NCCL, arena, ...)
    worker_setup_s: dict = field(default_factory=dict)   # phase -> slowest rank's seconds
    setup_s: dict | None = None              # filled by harmony.runtime._execute: host + worker phases
    exit_s: float | None = None              # last job done -> every worker process exited (unpin, CUDA teardown)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def merge_iteration(parts: dict[int, dict]) -> dict:
    ranks = sorted(parts)

    def per_rank(key: str, merge=list) -> dict:
        """{key: merge(each rank's value)} when every rank reported one, else nothing."""
        return {key: merge([parts[r][key] for r in ranks])} if all(key in parts[r] for r in ranks) else {}

    by_kind: dict[str, int] = {}
    for r in ranks:
        for k, v in parts[r]["bytes"].items():
            by_kind[k] = by_kind.get(k, 0) + v
    return {
        "iteration": parts[ranks[0]]["iteration"],
        "time_s": max(parts[r]["time_s"] for r in ranks),
        "rank_time_s": [parts[r]["time_s"] for r in ranks],
        "loss": sum(parts[r]["loss_part"] for r in ranks),
        "bytes": by_kind,
        "peak_allocated": [parts[r]["peak_allocated"] for r in ranks],
        "peak_reserved": [parts[r]["peak_reserved"] for r in ranks],
        "alloc_retries": [parts[r]["alloc_retries"] for r in ranks],
        "rss": sum(parts[r]["rss"] for r in ranks),
        **per_rank("pss", sum),
        "pinned": max(parts[r]["pinned"] for r in ranks),
        **per_rank("host_phases"),
        **per_rank("task_spans"),
        **per_rank("task_issued"),
        **next(({"task_spans_error": parts[r]["task_spans_error"]} for r in ranks
                if "task_spans_error" in parts[r]), {}),
        **per_rank("reserved_by_stream"),
        **per_rank("gpu_clocks"),
        **per_rank("memcpy_trace", _sum_traces),
        **({"memcpy_trace_skipped": parts[ranks[0]]["memcpy_trace_skipped"]}   # every rank decided alike
           if "memcpy_trace_skipped" in parts[ranks[0]] else {}),
    }


# Expandable segments for every GPU worker: the caching allocator grows mapped segments instead of stranding
# blocks. Under a cap, fragmentation decided whether a schedule fits (resnet1026 on the H100 went OOM with
# 8.86 GiB allocated and 2.14 GiB reserved but unusable). Without a cap, near the GPU's full memory, the
# classic allocator frees cached blocks to retry a failed cudaMalloc, and each cudaFree synchronizes the
# device: 55 of them took 0.92 s of host time in one iteration of the 5.25 B GPT-2 (`large` scale, 77.6 GiB
# reserved), while the GPU idled 0.71 s. Read at allocator start-up, so it is set before the workers are
# spawned (they inherit it); a user's own PYTORCH_CUDA_ALLOC_CONF wins.
CUDA_ALLOC_CONF = "expandable_segments:True"


def worker_cuda_alloc_conf() -> str:
    """The PYTORCH_CUDA_ALLOC_CONF the GPU workers run with: the user's, else CUDA_ALLOC_CONF."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", CUDA_ALLOC_CONF)


# How idle OpenMP threads wait, for every worker process (ours and the baselines'). Each worker runs its
# compute or kernel issue in the main thread and optimizer steps in pool threads, each step an OpenMP team
# of the worker's threads; with N workers the teams outnumber the cores. Spinning (the default) then
# starves the rest: on 2x H200, bert96 vDP's steps ran at 0.30 G params/s per update thread instead of
# 2.9 and the iteration took 2.29 s instead of 1.35 (docs/performance.md entry 19); the CPU workers saw
# seconds per op. Read when a worker loads OpenMP, so it is set before the workers are spawned; a user's
# own OMP_WAIT_POLICY wins.
OMP_WAIT_POLICY = "PASSIVE"


def worker_omp_wait_policy() -> str:
    """The OMP_WAIT_POLICY the workers run with: the user's, else OMP_WAIT_POLICY."""
    return os.environ.get("OMP_WAIT_POLICY", OMP_WAIT_POLICY)


def prepare_worker_environment(device: str) -> None:
    """Set what worker processes read at start-up (they inherit this process's environment)."""
    os.environ["OMP_WAIT_POLICY"] = worker_omp_wait_policy()
    if device == "cuda":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = worker_cuda_alloc_conf()


def _sum_traces(traces: list[dict]) -> dict:
    from harmony.memcpy_trace import sum_traces
    return sum_traces(traces)


def _end_all(procs, grace_s: float = 5.0) -> None:
    # SIGKILL, not SIGTERM: the workers die on either (they catch neither), but on SIGTERM they first print
    # every thread's stack (worker_main), which is for time limits from outside, not for our own shutdown
    procs = [p for p in procs if p.pid is not None]      # started ones
    for p in procs:
        if p.is_alive():
            p.kill()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))


def launch(job: dict, nprocs: int, on_iteration=None, while_starting=None) -> Outcome:
    """Run `job` on `nprocs` worker processes. `on_iteration(merged)` is called as each iteration completes
    on every rank (the run record is written there, so a crash keeps it). `while_starting()`, if given, runs
    in this process once the workers have started; they set up meanwhile and wait for it to return before
    their first iteration (the host fills the arena's weights while the workers set up)."""
    return launch_many([job], nprocs, [on_iteration], while_starting)[0]


def launch_many(jobs: list[dict], nprocs: int, on_iteration: list | None = None,
                while_starting=None) -> list[Outcome]:
    """Run several jobs (same N and device) one after another in ONE set of worker processes: what tests
    use to pay process start-up and process-group set-up once. After a failed job the rest are not run.
    `while_starting`: as in `launch`, before the first job's first iteration."""
    from harmony.runtime.worker import worker_main

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    prepare_worker_environment(jobs[0]["device"] if jobs else "cpu")
    init = f"tcp://127.0.0.1:{free_port()}"
    jobs = [dict(j, init_method=init) for j in jobs]
    callbacks = on_iteration or [None] * len(jobs)
    setup_window = max(setup_window_s(j) for j in jobs)
    host_ready = ctx.Event() if while_starting is not None else None
    procs = [ctx.Process(target=worker_main, args=(r, jobs, results, host_ready), name=f"harmony-worker-{r}")
             for r in range(nprocs)]
    outs = [Outcome() for _ in jobs]
    pending: dict[tuple[int, int], dict[int, dict]] = {}
    done: dict[int, set[int]] = {j: set() for j in range(len(jobs))}
    last_progress = t_job = time.monotonic()      # t_job: when the current job's set-up began
    ready: dict[int, set[int]] = {}
    dead_since: dict[int, float] = {}
    current = 0
    # SIGTERM (`timeout`, a scheduler, snakemake) ends a run like Ctrl-C: workers stopped, record marked
    # `interrupted`, instead of the process dying with a record that has no summary. Either signal also
    # arms a watchdog (see _InterruptWatchdog) that this launch disarms once its workers are ended.
    in_main = threading.current_thread() is threading.main_thread()
    _INTERRUPTED_BY.clear()
    old_handlers = ({s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
                    if in_main else {})

    def fail_rest(j: int) -> None:
        for k in range(j + 1, len(jobs)):
            outs[k].status, outs[k].message = "error", f"not run: job {j} of the same launch failed"
    try:
        for p in procs:
            p.start()
        if while_starting is not None:
            while_starting()
            host_ready.set()
            last_progress = time.monotonic()
        while current < len(jobs):
            out = outs[current]
            try:
                kind, rank, ji, payload = results.get(timeout=0.2)
            except queue.Empty:
                now = time.monotonic()
                for r, p in enumerate(procs):
                    if p.exitcode is not None and not (p.exitcode == 0 and current >= len(jobs)):
                        dead_since.setdefault(r, now)     # let its last message arrive through the queue
                        if now - dead_since[r] > 2.0:
                            out.status = "error"
                            out.message = f"worker {r} exited with code {p.exitcode} without a report"
                            out.failure = {"rank": r, "exitcode": p.exitcode}
                            fail_rest(current)
                            return outs
                window = (iteration_stall_s(jobs[current]) if len(ready.get(current, ())) == nprocs
                          else setup_window)
                if now - last_progress > window:
                    out.status, out.message = "error", f"no progress from the workers for {window:.0f} s"
                    if dump_stacks(procs):
                        out.message += "; every worker thread's stack is in the log (stderr), above"
                    if jobs[current].get("device") == "cuda":
                        out.failure = {"stalled_gpus": stalled_gpus()}
                        out.message += "; the GPUs' state then is in the record's failure.stalled_gpus"
                    fail_rest(current)
                    return outs
                continue
            last_progress = time.monotonic()
            out = outs[ji]
            if kind == "ready":
                out.pinned_bytes = max(out.pinned_bytes, payload.get("pinned_bytes", 0))
                for phase, sec in (payload.get("setup_s") or {}).items():
                    out.worker_setup_s[phase] = max(out.worker_setup_s.get(phase, 0.0), sec)
                ready.setdefault(ji, set()).add(rank)
                if len(ready[ji]) == nprocs:
                    out.ready_after_s = round(time.monotonic() - t_job, 3)
            elif kind == "iteration":
                it = payload["iteration"]
                pending.setdefault((ji, it), {})[rank] = payload
                if len(pending[(ji, it)]) == nprocs:
                    merged = merge_iteration(pending.pop((ji, it)))
                    out.iterations.append(merged)
                    if callbacks[ji] is not None:
                        callbacks[ji](merged)
            elif kind == "done":
                done[ji].add(rank)
                while current < len(jobs) and len(done[current]) == nprocs:
                    current += 1
                    t_job = time.monotonic()
            elif kind == "error":
                out.status = "oom" if payload.get("oom") else "error"
                where = (f" in task {payload['task']} ({payload['kind']} of layers {payload['pack']}, "
                         f"u={payload['ubatch']}, samples {payload['microbatch']})" if "task" in payload else "")
                mem = (f"; GPU memory allocated {payload['allocated_bytes']:,} B, reserved "
                       f"{payload['reserved_bytes']:,} B, cap {payload.get('gpu_memory_cap')}"
                       if "allocated_bytes" in payload else "")
                out.message = f"rank {rank}{where}: {payload['message']}{mem}"
                out.failure = payload
                # a peer's crash usually shows up first as a communication error on a survivor: name it
                time.sleep(0.3)
                codes = {r: p.exitcode for r, p in enumerate(procs) if r != rank and p.exitcode not in (None, 0, 1)}
                if codes:
                    dead = [f"worker {r} exited with code {c}" for r, c in codes.items()]
                    out.message = "; ".join(dead) + f" (reported by {out.message})"
                    out.failure = dict(payload, crashed=dead, crashed_exitcodes=list(codes.values()))
                fail_rest(ji)
                return outs
        return outs
    except KeyboardInterrupt:
        outs[current].status = "interrupted"
        outs[current].message = "interrupted (Ctrl-C or SIGTERM): all workers ended"
        # SIGTERM is how a time limit (`timeout`, a device call's budget, a scheduler) ends a run: say where
        # the workers were, so that a run that overstayed its limit by stalling shows the call it sat in
        if _INTERRUPTED_BY.get("signal") == signal.SIGTERM and dump_stacks(procs, wait_s=1.0):
            outs[current].message += "; every worker thread's stack at SIGTERM is in the log (stderr)"
        for k in range(current + 1, len(jobs)):
            outs[k].status, outs[k].message = "interrupted", "not run: interrupted"
        return outs
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
        ok = all(o.status == "ok" for o in outs)
        t_end = time.monotonic()
        _end_all(procs, grace_s=10.0 if ok else 0.5)
        if outs:
            outs[-1].exit_s = round(time.monotonic() - t_end, 3)
        results.close()
        WATCHDOG.disarm()


class _InterruptWatchdog:
    """After Ctrl-C or SIGTERM the launcher ends its workers and returns; if that has not happened within
    `seconds`, the watchdog kills every process this one started and exits with 130, so an interrupted run
    never hangs. (The CPU suite once saw an interrupted run's launcher neither end its workers nor exit
    within 60 s, and its cause was not found again in 57 tries; this bounds it whatever it was.)"""

    def __init__(self, seconds: float = 30.0):
        self.seconds = seconds
        self._done = threading.Event()
        self._armed = False

    def arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        self._done.clear()
        threading.Thread(target=self._watch, daemon=True, name="harmony-interrupt-watchdog").start()

    def disarm(self) -> None:
        self._done.set()
        self._armed = False

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        import psutil
        print(f"harmony: the workers were still not ended {self.seconds:.0f} s after the interrupt; killing "
              "them and exiting (the run record keeps what was written, in its .partial file)",
              file=sys.stderr, flush=True)
        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
        os._exit(130)


WATCHDOG = _InterruptWatchdog()


def _stack_file():
    """Where faulthandler writes stacks: this process's own stderr (fd 2), also where sys.stderr is replaced
    (pytest's capture); None when there is no stderr with a file descriptor."""
    try:
        sys.__stderr__.fileno()
        return sys.__stderr__
    except (AttributeError, ValueError, OSError):
        return None


def print_stacks_on_sigterm() -> None:
    """In a process that does not catch SIGTERM (a worker, `harmony baseline`): on SIGTERM, print every
    thread's Python stack to stderr, then die of it as before. A time limit (`timeout`, a device call's
    end) signals the whole process group, so the log then says where a run that overstayed sat."""
    import faulthandler
    if (f := _stack_file()) is not None:
        faulthandler.register(signal.SIGTERM, file=f, all_threads=True, chain=True)


def stalled_gpus() -> list[dict] | None:
    """The GPUs' utilisation, memory, clock and power at a stall (harmony.gpu_clocks.gpu_state), also
    printed to stderr beside the workers' stacks: busy GPUs spin in kernels that wait on each other, idle
    ones wait on the host."""
    from harmony.gpu_clocks import gpu_state
    state = gpu_state()
    for g in state or []:
        mem = g["memory_used_bytes"]
        print(f"stalled GPU {g['index']} ({g['uuid']}): {g['gpu_util_pct']}% busy, "
              f"{'?' if mem is None else f'{mem / 2**30:.2f}'} GiB used, SM {g['sm_clock_mhz']} MHz, "
              f"{g['power_w']} W", file=sys.stderr)
    if state is None:
        print("stalled GPUs: no NVML here, their state is not known", file=sys.stderr)
    return state


def dump_stacks(procs, wait_s: float = 2.0) -> bool:
    """Ask each live worker to write every thread's Python stack to stderr (faulthandler, registered in
    worker_main), so that a stalled run's log says where it waits. Whether any worker was asked."""
    from harmony.runtime.worker import STALL_DUMP_SIGNAL
    asked = False
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            try:
                os.kill(p.pid, STALL_DUMP_SIGNAL)
                asked = True
            except OSError:
                pass
    if asked:
        sys.stderr.flush()
        time.sleep(wait_s)     # faulthandler writes from a signal handler; give it time before the kill
    return asked


_INTERRUPTED_BY: dict = {}     # the signal that interrupted the current launch, for its message


def _raise_interrupt(signum, frame):
    _INTERRUPTED_BY["signal"] = signum
    if signum == signal.SIGTERM and (f := _stack_file()) is not None:
        import faulthandler      # a time limit: where this process was too (filling the arena, waiting)
        faulthandler.dump_traceback(file=f, all_threads=True)
    WATCHDOG.arm()
    raise KeyboardInterrupt
