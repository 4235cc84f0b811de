"""`harmony baseline NAME MODEL --minibatch D --gpus N ... -o run.jsonl`: run one baseline system.

NAME: swap-dp | swap-pp | fsdp-offload | zero-offload | resident (see docs/baselines.md).
MODEL: a zoo name (`harmony models`) or a model.json path.
`--ubatch 2,4,8` searches the microbatch size (its records go to <output stem>.u<u>.jsonl); the fastest that
ran is copied to the output, with the search listed in its summary under `ubatch_search`. A candidate
whose record file already holds a finished run of the same settings is not run again, so a search cut
short (a device call's time limit) resumes where it stopped. The default
search climbs: it starts at the middle candidate (`--ubatch-start U`: the one nearest U, e.g. the model's
best u on another machine; `--ubatch-start predicted`: swap-dp's or swap-pp's fastest candidate that fits,
by Harmony's simulator), goes up while each larger u trains faster, and down
from the start only when the first step up did not beat it. Candidates it skips are listed as
`not tried`. Every run costs its whole set-up, so on a GPU this is 2-4 runs instead of all of them. It
assumes throughput rises with u up to a peak, then falls or runs out of memory; every search on record
(results/paper/1xH100-80GB-HBM3) had that shape. `--ubatch-search all` runs every candidate.
Exit status: 0 when a run record was written (ok, oom, infeasible and unavailable are results), 1 when the
run failed with an error, 2 on bad input.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import functools
import importlib
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path

from baselines.common import PRECISIONS, SYSTEMS, Settings, had_whole_call, over_max_iter, record_call_end
from baselines.predicted_start import SYSTEMS as GRAPH_SYSTEMS
from baselines.swap_dp import DEFAULT_PACKING, PACKINGS
from harmony.jsonio import (DEFERRED_EXIT, FRESH_CALL_SLACK_S, Deferred, call_window_s, candidate_path, partial_path,
                            read_jsonl, seconds_left, undo_interrupted)
from harmony.units import format_bytes, parse_bytes

MODULES = {"swap-dp": "baselines.swap_dp", "swap-pp": "baselines.swap_pp",
           "fsdp-offload": "baselines.fsdp_offload", "zero-offload": "baselines.zero_offload",
           "resident": "baselines.resident"}


def add_arguments(p) -> None:
    p.add_argument("name", choices=SYSTEMS, metavar="NAME", help=f"one of: {', '.join(SYSTEMS)}")
    p.add_argument("model", help="zoo name (see `harmony models`) or a model.json path")
    p.add_argument("--minibatch", "-D", type=int, required=True, help="samples per iteration, all GPUs together")
    p.add_argument("--gpus", "-N", type=int, default=1, help="GPUs (or CPU worker processes) (default 1)")
    p.add_argument("--gpu-memory", default=None, help="per-GPU memory cap, e.g. 11GiB (default: none)")
    p.add_argument("--iters", type=int, default=3, help="training iterations (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="iterations left out of the medians (default 1)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="default cpu")
    p.add_argument("--ubatch", default=None,
                   help="microbatch size, or a comma list to search (default D/N: no accumulation)")
    p.add_argument("--ubatch-search", default="climb", choices=["climb", "all"],
                   help="with a --ubatch list: climb from the middle candidate while throughput rises (default), "
                        "or run every candidate")
    p.add_argument("--ubatch-start", type=ubatch_start_arg, default=None, metavar="U|predicted",
                   help="with --ubatch-search climb: start at the candidate nearest U (on a log scale) instead "
                        "of the middle one, e.g. this model's best u on another machine; `predicted` (swap-dp, "
                        "swap-pp, with --profile and --calibration): at the candidate Harmony's simulator "
                        "predicts fastest among those that fit the cap and the host's memory. The climb and its "
                        "candidates stay the same, only fewer of them run when the start is near the peak")
    p.add_argument("--max-iter-s", type=float, default=None, metavar="SECONDS",
                   help="stop after the first steady-state iteration slower than this, and search no smaller "
                        "microbatch below such a candidate (default: run every iteration)")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help="matmul precision (default fp32)")
    p.add_argument("--data", default="synthetic", help="batch source (default synthetic)")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed (default 0)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field of a zoo model (repeatable)")
    p.add_argument("--profile", default=None, help="profile.json: memory estimates for swap-dp/swap-pp packing")
    p.add_argument("--calibration", default=None, help="calibration.json: bandwidths for the roofline")
    p.add_argument("--packs", default=DEFAULT_PACKING, choices=PACKINGS,
                   help="swap-dp/swap-pp packing where a stage does not fit the cap whole: one vLayer a pack "
                        "(layer, the vDNN/LMS granularity; default) or the longest packs that fit it (fit, needs "
                        "--profile)")
    p.add_argument("--schedule-out", default=None, help="swap-dp/swap-pp: also write the schedule.json here")
    p.add_argument("--no-memcpy-trace", action="store_true",
                   help="skip the torch.profiler memcpy trace of one steady-state iteration (CUDA)")
    p.add_argument("-o", "--output", required=True, help="run.jsonl to write")


def settings_from_args(args, ubatch: int | None) -> Settings:
    from harmony.decompose import parse_overrides
    if args.minibatch < 1:
        raise ValueError(f"--minibatch must be >= 1, got {args.minibatch}")
    if args.gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {args.gpus}")
    if args.minibatch % args.gpus:
        raise ValueError(f"--minibatch {args.minibatch} is not a multiple of --gpus {args.gpus}: "
                         f"every GPU gets D/N samples")
    if args.iters < 1 or args.warmup < 0:
        raise ValueError("--iters must be >= 1 and --warmup >= 0")
    if args.max_iter_s is not None and not args.max_iter_s > 0:
        raise ValueError(f"--max-iter-s must be > 0 seconds, got {args.max_iter_s}")
    if ubatch is not None and not (1 <= ubatch <= args.minibatch // args.gpus):
        raise ValueError(f"--ubatch {ubatch} must be between 1 and D/N = {args.minibatch // args.gpus}")
    return Settings(system=args.name, model=args.model, minibatch=args.minibatch, gpus=args.gpus,
                    ubatch=ubatch, iters=args.iters, warmup=args.warmup, device=args.device,
                    precision=args.precision, gpu_memory_cap=parse_bytes(args.gpu_memory), data=args.data,
                    seed=args.seed, output=args.output, memcpy_trace=not args.no_memcpy_trace,
                    max_iter_s=args.max_iter_s,
                    calibration=args.calibration, profile=args.profile, overrides=parse_overrides(args.set),
                    extra=baseline_extra(args))


def baseline_extra(args) -> dict:
    """The system-specific settings of `extra`: the packing a swap baseline is asked for (only when not the
    default, so other systems' records stay as they were) and where to write its schedule."""
    extra = {}
    if args.packs != DEFAULT_PACKING:
        if args.name not in GRAPH_SYSTEMS:       # the baselines whose task graph has packs
            raise ValueError(f"--packs {args.packs} is for {' and '.join(GRAPH_SYSTEMS)}; {args.name} has no packs")
        extra["packing"] = args.packs
    if args.schedule_out:
        extra["schedule_out"] = args.schedule_out
    return extra


def parse_ubatch(text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--ubatch {text!r}: give an integer or a comma list such as 2,4,8") from None
    if not values:
        raise ValueError("--ubatch is empty")
    return values


def first_iter_ratio(rec_path: str) -> float | None:
    """A finished candidate's second iteration over its first (at most 1), or None with fewer than two: how
    much of a first iteration is one-time work (DeepSpeed's and FSDP's set-up on the first step), which the
    deadline rule of the next candidate's run then discounts (Settings.first_iter_ratio)."""
    try:
        times = [r.get("time_s") or 0.0 for r in read_jsonl(rec_path) if r.get("record") == "iteration"]
    except (OSError, ValueError):
        return None
    if len(times) < 2 or times[0] <= 0:
        return None
    return min(1.0, times[1] / times[0])


def candidate_cost_s(rec_path: str) -> float:
    """What a finished candidate cost, at least: the sum of its iterations' times from its record file
    (setup not counted), or 0 when it has none (an OOM before the first iteration)."""
    try:
        return sum(r.get("time_s") or 0.0 for r in read_jsonl(rec_path) if r.get("record") == "iteration")
    except (OSError, ValueError):
        return 0.0


def _deferred(name: str, unfinished: Settings | None, why: Deferred, search: bool = False) -> int:
    """Leave the rest for the next call: drop the iteration lines of a run the deadline stopped (its next
    call starts it afresh) and exit DEFERRED_EXIT, which the workflow's guard records nothing for."""
    if unfinished is not None and unfinished.output:
        partial_path(unfinished.output).unlink(missing_ok=True)
    kept = "; the candidates on record are kept and read back then" if search else ""
    print(f"{name}: {'microbatch search ' if search else ''}left for the next call: {why}{kept}", file=sys.stderr)
    return DEFERRED_EXIT


class CallEnded(BaseException):
    """SIGTERM (the device call's end) while a search runs: raised in the main thread by the search's
    handler, past the systems' `except Exception` that would record it as an error."""


def _raise_call_ended(signum, frame):
    raise CallEnded()


@contextlib.contextmanager
def call_end_raises():
    """While a search runs its candidates, SIGTERM raises CallEnded in the main thread, so that the search
    decides what the call's end leaves of its candidate (stopped_by_call_end). faulthandler, registered
    again on top, still prints every thread's stack first, then chains to it."""
    from harmony.runtime.launch import print_stacks_on_sigterm
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_call_ended)
    print_stacks_on_sigterm()
    try:
        yield
    finally:
        faulthandler.unregister(signal.SIGTERM)
        signal.signal(signal.SIGTERM, old)


def stopped_by_call_end(s: Settings) -> Deferred:
    """What the device call's end leaves of search candidate `s` (the Deferred for the search to exit
    with). A candidate that began as its call did gets its record (common.record_call_end: over-time
    before a timed iteration), which the next call's search reads as finished, so that a point's finished
    candidates are never hidden: before, the guard recorded the whole search over-time (x2-grid29). One
    begun later in its call leaves no record, and the next call runs it from its start."""
    undo_interrupted(s.output)      # the runtime (swap-dp, swap-pp) records SIGTERM as `interrupted`
    over = had_whole_call(s)
    if over is None:
        partial_path(s.output).unlink(missing_ok=True)
        return Deferred(f"u={s.ubatch} was stopped by the device call's end, begun later than its call, "
                        f"so the next call runs it from its start")
    rec = record_call_end(s, Path(s.model).stem, over)
    _report(rec, s.output)
    return Deferred(f"u={s.ubatch} was stopped by the device call's end after it had the whole call: "
                    f"recorded {rec['status']}")


def system_module(name: str):
    """The module that implements baseline `name` (baselines/<name>.py): its `run`, and its constants."""
    return importlib.import_module(MODULES[name])


def run_one(s: Settings) -> dict:
    return system_module(s.system).run(s)


def main(args) -> int:
    from harmony.runtime.launch import print_stacks_on_sigterm
    print_stacks_on_sigterm()      # a search the call's end stops says where it sat (as harmony run does)
    ubatches = parse_ubatch(args.ubatch)
    settings = [settings_from_args(args, u) for u in ubatches]   # validates every candidate first
    if len(settings) == 1:
        try:
            rec = run_one(settings[0])
        except Deferred as e:
            return _deferred(args.name, settings[0], e)
        _report(rec, args.output)
        return 1 if rec["status"] == "error" else 0
    # search: each candidate it runs to its own file, the fastest that ran to the output
    out = Path(args.output)
    settings.sort(key=lambda s: s.ubatch)
    done: dict[int, tuple[Settings, dict]] = {}
    costs: dict[int, float] = {}  # what each candidate of this search cost (measured here, or on record)
    ratios: dict[int, float] = {}  # each finished candidate's second iteration over its first

    def nearest(known: dict[int, float], i: int) -> int | None:
        """The candidate nearest below i in u among `known`, else the nearest above (None when empty)."""
        below = [j for j in known if j < i]
        return max(below) if below else (min(known) if known else None)

    def estimated_cost(i: int) -> float:
        """What candidate i will likely cost: the nearest tried candidate below it in u, else the nearest above
        (0 before any). A larger u sweeps the weights fewer times per iteration, so the candidate below is the
        safe side when the climb goes up; going down, the run's own deadline check (train_loop) stops it before
        an iteration that would not fit. The costliest candidate so far, the rule before, overestimated
        every step up: fsdp-offload bert96 D=256's u=64 was left for u=16's 186 s after u=32 had cost 125 s
        (h100-grid26)."""
        j = nearest(costs, i)
        return 0.0 if j is None else costs[j]

    def trial(i: int) -> float:
        """Run candidate i (once); its samples/s, 0 unless it ran ok."""
        if i not in done:
            s = settings[i]
            s.output = str(candidate_path(out, s.ubatch))
            rec = finished_candidate(s)
            if rec is None:
                est, left = estimated_cost(i), seconds_left()
                # a candidate the host check will refuse (its arena over host memory) is recorded in
                # seconds whatever its neighbour cost, so no deadline leaves it (harmony.runtime.host_refuses)
                if est > 0 and left is not None and est > left and not over_host(i):
                    raise Deferred(f"u={s.ubatch} would take about {est:.0f} s (as its nearest candidate on "
                                   f"record), {max(left, 0):.0f} s are left before HARMONY_DEADLINE")
                j = nearest(ratios, i)
                s.first_iter_ratio = None if j is None else ratios[j]
                t0 = time.perf_counter()
                s.started_at = time.time()
                try:
                    rec = run_one(s)
                except Deferred as e:     # the run itself saw the deadline coming (train_loop)
                    partial_path(s.output).unlink(missing_ok=True)   # its next call starts it afresh
                    raise Deferred(f"u={s.ubatch}: {e}") from None
                except CallEnded:
                    raise stopped_by_call_end(s) from None
                if rec["status"] == "interrupted":     # the runtime's own SIGTERM handler ended it
                    raise stopped_by_call_end(s)
                costs[i] = time.perf_counter() - t0
            else:
                costs[i] = candidate_cost_s(s.output)
                print(f"{s.system}: u={s.ubatch} already on record ({rec['status']}), not run again: {s.output}",
                      file=sys.stderr)
            if (r := first_iter_ratio(s.output)) is not None:
                ratios[i] = r
            _report(rec, s.output)
            done[i] = (s, rec)
        rec = done[i][1]
        return (rec["samples_per_s"] or 0.0) if rec["status"] == "ok" else 0.0

    @functools.cache
    def host_need(i: int) -> int | None:
        from baselines.predicted_start import host_need_of
        return host_need_of(settings[i])

    @functools.cache
    def host_available() -> int:
        from harmony.runtime.host_store import host_available_bytes
        return host_available_bytes()

    def over_host(i: int) -> bool:
        """Whether candidate i's arena is over the host's memory (host_need: None for a system without one)."""
        need = host_need(i)
        return need is not None and need > host_available()

    def no_lower(i: int) -> str | None:
        """Why no candidate below i is tried, if none is (the skipped ones are listed as not tried): i ran
        slower per iteration than --max-iter-s (a smaller u moves the weights more often per sample), or i
        was infeasible for host memory and the next u down is forecast not to fit either. Whether a smaller u
        needs less host memory depends on the graph (baselines.predicted_start.host_need_of), so the search
        asks it rather than assume it: swap-pp VGG416 D = 256 at N = 2 was infeasible at u = 16 and left
        u = 4 untried, which fits (docs/performance.md entry 110). A system without a graph to ask tries it."""
        if i not in done:
            return None
        s, rec = done[i]
        if rec["status"] == "ok" and over_max_iter(s, rec["iter_time_s"] or 0):
            return "a larger u ran slower than --max-iter-s"
        if rec["status"] == "over-time":   # a smaller u moves the weights more often: slower still
            return "a larger u could not time an iteration in a whole device call"
        if i > 0 and rec["status"] == "infeasible" and (
                rec.get("infeasible_reason") == "host-memory"
                # records from before the field (H100 swap-pp resnet1026 D=1024) say so in the message
                or (rec.get("message") or "").startswith("host memory too small")):
            need = host_need(i - 1)
            if need is not None and need > host_available():
                return (f"a larger u was infeasible for host memory, and u={settings[i - 1].ubatch} would need "
                        f"{format_bytes(need)} of the {format_bytes(host_available())} available")
        return None

    hint, prediction = ubatch_start_hint(args, settings)
    start = start_index([s.ubatch for s in settings], hint)
    try:
        with call_end_raises():
            if getattr(args, "ubatch_search", "climb") == "all":
                for i in range(len(settings)):
                    trial(i)
            else:
                climb(trial, len(settings), lambda i: no_lower(i) is not None, start=start)
    except Deferred as e:
        return _deferred(args.name, None, e, search=True)
    except CallEnded:      # between candidates
        return _deferred(args.name, None, Deferred("the device call's end came between candidates"), search=True)
    results = [done[i] for i in sorted(done)]
    search = [{"ubatch": s.ubatch, "status": r["status"], "iter_time_s": r["iter_time_s"],
               "samples_per_s": r["samples_per_s"], "bytes_h2d": r["bytes_h2d"], "bytes_d2h": r["bytes_d2h"],
               "message": r.get("message"), "output": s.output} for s, r in results]
    search += [{"ubatch": settings[i].ubatch, "status": "not tried", "iter_time_s": None, "samples_per_s": None,
                "bytes_h2d": None, "bytes_d2h": None, "output": None,
                "message": "skipped by the climb: " + next(
                    (why for j in range(i + 1, len(settings)) if (why := no_lower(j))),
                    "a neighbour nearer the start was slower or did not run")}
               for i in range(len(settings)) if i not in done]
    search.sort(key=lambda x: x["ubatch"])
    ok = [(s, r) for s, r in results if r["status"] == "ok" and r["samples_per_s"]]
    if ok:      # the output is the fastest candidate's record
        src = max(ok, key=lambda sr: sr[1]["samples_per_s"])[0].output
    else:       # nothing ran: the output says why, with the most telling status of the candidates
        order = ["over-time", "oom", "infeasible", "unavailable", "error"]
        src = min(results, key=lambda sr: order.index(sr[1]["status"]) if sr[1]["status"] in order else 9)[0].output
    lines = Path(src).read_text().splitlines()
    summary = json.loads(lines[-1])
    summary["ubatch_search"] = search
    if start is not None:
        summary["ubatch_climb_start"] = settings[start].ubatch
    if prediction is not None:
        summary["ubatch_start_prediction"] = prediction
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines[:-1] + [json.dumps(summary)]) + "\n")
    print(f"{args.name}: microbatch search " + ", ".join(
        f"u={x['ubatch']}: {x['status']}" + (f" {x['samples_per_s']:.3f} samples/s" if x['samples_per_s'] else "")
        for x in search) + f"; best -> {out}", file=sys.stderr)
    return 0 if ok or all(r["status"] != "error" for _, r in results) else 1


# outcomes of the configuration that end a run before its --iters: their records stand whatever iteration
# count they hold ("unavailable" and "error" say more of the machine or the code: those run again)
NOT_RUN_THROUGH = ("oom", "infeasible", "over-time")


def finished_candidate(s: Settings) -> dict | None:
    """The summary of candidate `s` when its record file already holds a finished run of these same
    settings (a search cut short by a device call's time limit goes on where it stopped), else None.
    Error records are run again, except a GPU stall (the launcher's watchdog ended a CUDA run: its failure
    has `stalled_gpus`, null without NVML), which would cost minutes of a call again (entry 111: swap-pp
    VGG416 D = 256 at u = 8, at the memory cap, 330 s); delete its record file to run it again. A candidate with --set overrides
    always runs (they are not recorded). A run
    that --max-iter-s cut short counts as finished with fewer iterations; an over-time one (it had a whole
    call) too, until a call with a longer window than its own comes; so does an oom or infeasible one,
    whose iteration count is where it stopped, not --iters (x2-grid31 ran zero-offload resnet1026 D=256's
    u=32 out of memory a second time, two minutes of a call, because its record said 0 iterations)."""
    path = Path(s.output)
    if s.overrides or not path.is_file():
        return None
    try:
        rec = read_jsonl(path)[-1]
    except (ValueError, IndexError):   # a torn or empty file: run the candidate again
        return None
    env = rec.get("env") or {}
    stalled = rec.get("status") == "error" and "stalled_gpus" in (rec.get("failure") or {})
    same = (rec.get("record") == "summary" and rec.get("system") == s.system
            and rec.get("model") == Path(s.model).stem and rec.get("gpus") == s.gpus
            and rec.get("minibatch") == s.minibatch and rec.get("ubatch") == s.ubatch
            and (rec.get("iterations") == s.iters or rec.get("status") in NOT_RUN_THROUGH or stalled
                 or (rec.get("cut_short") and rec.get("iterations", 0) < s.iters))
            and env.get("device") == s.device
            and env.get("precision") == s.precision and env.get("gpu_memory_cap") == s.gpu_memory_cap)
    # over-time stands while no call gives more time than the one that ran it
    window = call_window_s()
    longer = (rec.get("status") == "over-time" and window is not None
              and window > (rec.get("call_window_s") or 0) + FRESH_CALL_SLACK_S)
    return rec if same and (rec.get("status") in ("ok", *NOT_RUN_THROUGH) or stalled) and not longer else None


def ubatch_start_arg(value: str) -> int | str:
    """--ubatch-start: a microbatch size, or `predicted`."""
    if value == "predicted":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give a microbatch size or `predicted`") from None


def ubatch_start_hint(args, settings: list[Settings]) -> tuple[int | None, list[dict] | None]:
    """(the u the climb starts nearest, the simulator's candidates when it chose it). For `predicted`:
    the fastest candidate predicted to fit the cap and this host's memory (baselines.predicted_start);
    the middle candidate, said on stderr, when the system has no task graph, the profile or calibration is
    missing, or no candidate is predicted to fit."""
    hint = getattr(args, "ubatch_start", None)
    if hint != "predicted":
        return hint, None
    from baselines.predicted_start import SYSTEMS, candidates, fastest_fitting
    s = settings[0]
    if args.name not in SYSTEMS or not (s.profile and s.calibration):
        print(f"{args.name}: --ubatch-start predicted needs swap-dp or swap-pp with --profile and --calibration; "
              f"the climb starts at the middle candidate", file=sys.stderr)
        return None, None
    from baselines.common import load_model
    from harmony.jsonio import read_json
    from harmony.runtime.host_store import host_available_bytes
    _, model_json = load_model(s.model, s.overrides)
    cands = candidates(args.name, model_json, s.minibatch, s.gpus, [x.ubatch for x in settings],
                       cap=s.gpu_memory_cap, profile=read_json(s.profile, kind="profile"),
                       calibration=read_json(s.calibration, kind="calibration"), host_bytes=host_available_bytes())
    best = fastest_fitting(cands)
    print(f"{args.name}: predicted " + "; ".join(
        f"u={c.ubatch} " + ("refused" if c.iter_time_s is None else f"{c.iter_time_s:.3f} s")
        + (f" ({c.why_not})" if c.why_not else "") for c in cands)
        + (f"; the climb starts at u={best.ubatch}" if best else "; none fits: the climb starts at the middle"),
        file=sys.stderr)
    return (best.ubatch if best else None), [c.to_json() for c in cands]


def start_index(ubatches: list[int], hint: int | None) -> int | None:
    """The climb's start for --ubatch-start: the index of the candidate nearest `hint` on a log scale (the
    smaller on a tie), None without a hint."""
    if hint is None:
        return None
    if hint < 1:
        raise ValueError(f"--ubatch-start {hint}: give a microbatch size of at least 1")
    return min(range(len(ubatches)), key=lambda i: (abs(math.log(ubatches[i] / hint)), ubatches[i]))


def climb(trial, n: int, no_lower=lambda i: False, start: int | None = None) -> None:
    """Hill-climb over candidates 0..n-1 (ascending u); trial(i) runs candidate i and returns its samples/s
    (0 when it did not run). Start in the middle (or at `start`); go up while each step is faster; go down
    from the start only if the first step up was not faster, while each step down is faster. Below a start that did not
    run (OOM, infeasible), go down until one runs, then on while faster. Never go down below a candidate
    i with no_lower(i) (it ran too slowly, or failed for a reason a smaller u cannot fix)."""
    start = n // 2 if start is None else start
    best_i, best = start, trial(start)
    if best > 0:
        i = start + 1
        while i < n and (v := trial(i)) > best:
            best_i, best, i = i, v, i + 1
        if best_i != start:
            return
    i = start - 1
    while i >= 0:
        if no_lower(i + 1):
            return
        v = trial(i)
        if v > best:
            best_i, best, i = i, v, i - 1
        elif best == 0:          # nothing has run yet: keep going down
            i -= 1
        else:
            return


def _report(rec: dict, path: str) -> None:
    sps = rec.get("samples_per_s")
    line = (f"{rec['system']} {rec['model']} D={rec['minibatch']} N={rec['gpus']} u={rec.get('ubatch')}: "
            f"{rec['status']}")
    if sps:
        line += (f", {sps:.3f} samples/s, {rec['iter_time_s']:.3f} s/iter, h2d {format_bytes(rec['bytes_h2d'])}"
                 f", d2h {format_bytes(rec['bytes_d2h'])} per iteration")
    if rec.get("host_pss_bytes"):
        line += f", host memory {format_bytes(rec['host_pss_bytes'])}"
    if rec.get("message"):
        line += f" ({rec['message']})"
    print(line + f" -> {path}", file=sys.stderr)
    from harmony.metrics import allocator_warning
    warning = allocator_warning(rec)
    if warning:
        print(warning, file=sys.stderr)
