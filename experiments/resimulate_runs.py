"""Re-simulate every committed Harmony run of a results folder with the current cost model.

A run record keeps the prediction made when its schedule was searched (`predicted_iter_time_s`); the
figures and `harmony check` use that one. After a change to the cost model (docs/performance.md), this
prints, for the same schedules and calibration, the measured time, the recorded prediction and the current
model's prediction, the schedule bound (DESIGN.md §5) under the current model with bound/measured, and the
caching allocator's retries per steady iteration (the most of any GPU; docs/performance.md entry 21), so the
change's effect on accuracy (claim C11) and on the bound (C12: above 1, the run beat its bound, which then is
not one) is measured on the committed runs. Last, `issue x` on plans near host-bound: the run's host issue
seconds (net of the waits the worker times) over the profile's, so a gap there shows when it is the host's
(docs/performance.md entry 41: the lent hosts issue one plan up to 25% apart). And `opt G/s` on every
run: the rate its CPU optimizer stepped at, parameters per thread-second of stepping (host phases, median
steady iteration), so a run whose host stepped slowly shows it whatever bound the plan (entry 43: bert96
vDP D = 16 stepped at 1.61 where the same graph's vPP run, in the same call, stepped at 2.54). It is per
update thread: two threads stepping at once share the cores, so it is for comparing runs, not the model.
And `host-b`: the share of the run's compute tasks whose GPU work ended within 1 ms of the host's issue
(`task_issued`, runs from the thirty-second session on): near 1, the GPU waited for the host; near 0, the
host was ahead (docs/performance.md entry 53).

`--profiles DIR` re-simulates with the profiles of another folder (`<model>.json` or `<model>.profile.json`)
instead of the run's own: a diagnostic that isolates which profiled cost a misprediction comes from (the
schedule is still the one that ran, searched with the run's own profile).

`--runs DIR` takes the run records of another folder (any `*.jsonl` under it, such as a same-host re-run), each
matched to the schedule of ROOT/schedules whose packs and microbatches it ran; `--calibration FILE` another
host's calibration (a call's `calls/TAG.calibration.json`); `--schedules DIR` another schedule folder (such as
a superseded one).

`--task-peaks SCHEDULE PROBE_DIR` prints each compute task's measured peak from a run of SCHEDULE made with
the worker's per-task memory probe (`HARMONY_TASK_PEAKS=PROBE_DIR harmony run ...`, docs/runtime.md) against
the model's, largest excess first: where a run's peak exceeds the model, which task and pack add it.

`--host-overhead TASK_MS VLAYER_MS` charges the runtime's own host work on the simulator's host lane besides
the profile's issue times (`SimParams.host_task_s`, `host_vlayer_s`: per compute task, and per vLayer and
microbatch; not calibrated, 0 in every search): whether a gap is host work the model leaves out. The last
line gives, over the runs, how close the current predictions are (median |measured/current - 1|, runs within
10%, the lowest and highest ratio); docs/performance.md entry 46 ruled host work out this way for 2x H200's
vPP misses.

`--run-ahead N|none|as-run` models the host's run-ahead bound (`harmony run --run-ahead`) as given; the
default, as-run, takes each run's recorded bound (none recorded: no bound, as before docs/performance.md
entry 39), which the simulator charges since entry 114.

`--breakdown SCHEDULE` prints where the model says one steady iteration of SCHEDULE goes, per GPU: the
seconds its GPU computes (the tasks' device times) against the iteration, the span of its compute tasks, and
how long its swap-in, swap-out and P2P lanes are busy, then the host's CPU updates. It is the simulated
side of `harmony timeline RUN.jsonl` (a traced run's compute busy, copies per direction and P2P), for
telling where a run that missed its prediction lost the time (docs/performance.md entry 46). A lane's time
is when it is in use: a transfer streamed microbatch by microbatch spans its first to its last microbatch, so
it is not the link's busy time; the gigabytes beside it are.

`--task-spans RUN` prints each compute task of RUN's median steady iteration beside the simulator's (the
gap before it, its span, and how long after its issue its GPU work ended), then per rank and task kind the
medians of its spans, measured and simulated, how often the host issued such a task, and the model's host
lane for one (its profiled issue plus the runtime's charge): a host that issues slower than its lane while
the GPU waits for it spends time the model leaves out (docs/performance.md entries 90 and 91). A swap-dp or
swap-pp record needs no schedule file: its plan is rebuilt from the folder's model (`models/MODEL.json`) by
the baseline's own packer at the record's microbatch and cap, and checked against the packs it ran.

`--peaks` prints, instead, each GPU's modelled peak memory against the run's `peak_allocated_bytes` (its
last iteration), for runs whose schedule records which prefetches wait (`prediction.prefetch_waits`; older
schedules do not, so their overlaps are unknown): the tasks' own peaks, then with what each rank still holds
for its sends to other GPUs (docs/performance.md entry 33), each plus the next task's prefetch where the
plan overlaps it.

    PYTHONPATH=. python experiments/resimulate_runs.py [results/paper/1xH100-80GB-HBM3] [--profiles DIR]
        [--runs DIR] [--calibration FILE] [--schedules DIR] [--host-overhead TASK_MS VLAYER_MS]
        [--host-tensors VLAYER_US PARAM_US]
        [--issue-in-pack] [--peaks | --task-peaks SCHEDULE PROBE_DIR | --breakdown SCHEDULE | --task-spans RUN]
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import statistics
import sys
from pathlib import Path

from harmony.schedule.tasks import ALLREDUCE_MODES, RECEIVE_MODES


def profile_path(folder: Path, model: str) -> Path | None:
    """MODEL's profile in FOLDER: profiles/<model>.json (paper scale) or profile.json (a `large` run's folder)."""
    for name in (f"{model}.json", f"{model}.json.gz", f"{model}.profile.json", "profile.json"):
        if (folder / name).exists():
            return folder / name
    return None


def require_profile(folder: Path, model: str) -> Path:
    path = profile_path(folder, model)
    if path is None:
        sys.exit(f"resimulate_runs.py: no profile of {model} in {folder}; pass --profiles FOLDER")
    return path


PLAN_KEYS = ("ubatch_fwd", "ubatch_bwd", "fwd_packs", "bwd_packs")     # what a run record says it ran


AS_RUN = "as-run"


def run_ahead_arg(value: str) -> int | str | None:
    """--run-ahead: `as-run`, or what `harmony run --run-ahead` takes (a number of tasks, or none)."""
    if value == AS_RUN:
        return value
    from harmony.runtime.cli import run_ahead_arg as runtime_arg
    return runtime_arg(value)


def overridden(params, args, receive: str | None, allreduce: str | None = None, run: dict | None = None):
    """The simulator's parameters with the command line's what-ifs (--host-overhead, --beside-nccl,
    --p2p-receive, --allreduce, --run-ahead) applied; `receive` and `allreduce` are the modes used when
    --p2p-receive and --allreduce are not given (None: the simulator's default), and `run` the run record
    whose host run-ahead bound is used by default (its `run_ahead`; none recorded: no bound, as the runtime
    ran before docs/performance.md entry 39)."""
    ahead = getattr(args, "run_ahead", AS_RUN)
    if ahead != AS_RUN:
        params = dataclasses.replace(params, run_ahead=ahead)
    elif run is not None and params.run_ahead is not None:     # a CUDA calibration: the bound the run had
        params = dataclasses.replace(params, run_ahead=run.get("run_ahead"))
    if args.host_overhead:
        params = dataclasses.replace(params, host_task_s=args.host_overhead[0] / 1e3,
                                     host_vlayer_s=args.host_overhead[1] / 1e3)
    if args.host_tensors:
        from harmony.schedule.simulate import host_tensor_charge
        params = dataclasses.replace(params, **host_tensor_charge(*args.host_tensors))
    if args.beside_nccl is not None:
        params = dataclasses.replace(params, beside_nccl_slowdown=args.beside_nccl, beside_nccl_eager=None)
    if args.p2p_receive or receive:
        params = dataclasses.replace(params, p2p_receive=args.p2p_receive or receive)
    if args.allreduce or allreduce:
        params = dataclasses.replace(params, allreduce=args.allreduce or allreduce)
    return params


def run_worker_opt_rate(summary: dict) -> float | None:
    """Parameters per second of the slowest rank's CPU optimizer in a run (its summary's host phases)."""
    rates = [h["upd_params"] / h["upd_step_s"] for h in summary.get("host_phases") or []
             if h.get("upd_step_s") and h.get("upd_params")]
    return min(rates) if rates else None


def find_schedule(run: str, s: dict, schedules: Path) -> Path | None:
    """The schedule a run record ran: named after the record under runs/harmony-* (the one in SCHEDULES, or
    else one that `stale_schedules.py --rewrite-runs` moved to superseded/*/schedules/ before the run was
    measured again, whichever holds the record's plan), else the device scripts' `harmony.schedule.json`
    beside a `harmony.jsonl` (large_gpu.sh's folders) when its plan is the record's, else matched by plan
    under SCHEDULES."""
    m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
    plan = [s.get(k) for k in PLAN_KEYS]
    if Path(run).parent.parent.name.startswith("harmony-"):
        cfg = Path(run).stem.split("-", 2)[-1]                      # N4-D64-auto -> auto
        name = f"{mode}-N{N}-D{D}-{cfg}.json"
        named = [schedules / m / name] + sorted(schedules.parent.glob(f"superseded/*/schedules/{m}/{name}"))
        for sched in (p for p in named if p.exists()):
            c = json.loads(sched.read_text()).get("graph", {}).get("config", {})
            if None in plan or [c.get(k) for k in PLAN_KEYS] == plan:     # a record without its plan: the name
                return sched
        return None
    beside = Path(run).with_name(Path(run).stem + ".schedule.json")
    candidates = [beside] if beside.exists() else []
    for sched in candidates + sorted((schedules / m).glob(f"{mode}-N{N}-D{D}-*.json")):
        c = json.loads(sched.read_text())["graph"]["config"]
        if [c.get(k) for k in PLAN_KEYS] == plan:
            return sched
    return None


def baseline_schedule(s: dict, root: Path) -> Path | None:
    """For a swap-dp or swap-pp run record: its plan rebuilt by the baseline's packer from ROOT's model at the
    record's microbatch and cap, written to a temporary schedule file (without a prediction), or None for
    another system. Exits when the rebuilt packs are not the ones the record ran (another packing option)."""
    import atexit
    import shutil
    import tempfile

    from harmony.schedule.io import save_schedule
    if s.get("system") not in ("swap-dp", "swap-pp"):
        return None
    model_file = root / "models" / f"{s['model']}.json"
    if not model_file.exists():
        sys.exit(f"resimulate_runs.py: {s['system']} record: no {model_file} to rebuild its plan from; pass --schedules")
    mj = json.loads(model_file.read_text())
    from baselines.predicted_start import config_builder
    from baselines.swap_dp import schedule_record
    cap = s.get("gpu_memory_cap")
    # with the profile its run had (--profile): swap-pp balances its stages by the per-layer times
    profile = profile_path(root / "profiles", s["model"])
    cfg = config_builder(s["system"])(mj, s["minibatch"], s["gpus"], s["ubatch"], cap=cap,
                                      profile=json.loads(profile.read_text()) if profile else None)
    ran = [[list(p) for p in s.get(k) or []] for k in ("bwd_packs", "fwd_packs")]
    if ran != [[list(p) for p in cfg.bwd_packs], [list(p) for p in cfg.fwd_packs]]:
        sys.exit(f"resimulate_runs.py: {s['system']}'s packer at u = {s['ubatch']} does not give the packs the "
                 f"record ran (another --packs option?); pass --schedules")
    rec = schedule_record(s["system"], mj, cfg, cap=cap, precision=s.get("precision") or "fp32")
    folder = tempfile.mkdtemp(prefix="resim-")
    atexit.register(shutil.rmtree, folder, True)
    out = Path(folder) / f"{s['system']}-{s['model']}.schedule.json"
    save_schedule(out, rec)
    return out


def sim_inputs(sched: Path, profile: Path, cal: dict, issue_in_pack: bool = False):
    """What simulating schedule `sched` needs: (its record, task graph, the profile's LayerCosts, SimParams
    from the calibration, with the model's optimizer and the schedule's receive mode). issue_in_pack:
    LayerCosts' (--issue-in-pack; docs/performance.md entry 96)."""
    from harmony.profile_data import Profile
    from harmony.schedule.cli import model_sizes
    from harmony.schedule.io import load_schedule, planned_compute_scale, planned_receive_mode
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams
    rec, graph = load_schedule(sched)
    params = SimParams.from_calibration(cal, optimizer=(rec["model"].get("optimizer") or {}).get("kind", "adamw"),
                                        p2p_receive=planned_receive_mode(rec))
    prof = Profile.load(profile, compute_scale=planned_compute_scale(rec))
    return rec, graph, LayerCosts(prof, sizes=model_sizes(rec["model"]), issue_in_pack=issue_in_pack), params


def main(argv: list[str]) -> int:
    from harmony.schedule.bound import schedule_bound
    from harmony.schedule.io import planned_cap
    from harmony.figures import read_run
    from harmony.schedule.simulate import simulate, task_issue_seconds, task_spans
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="results/paper/1xH100-80GB-HBM3")
    ap.add_argument("--profiles", help="profile folder to simulate with (default: ROOT/profiles)")
    ap.add_argument("--issue-in-pack", action="store_true", help="charge BWD packs from the profiles' in-pack "
                    "issue measurement (bwd_issue_in_pack; off by default, docs/performance.md entry 96)")
    ap.add_argument("--runs", help="folder of run records (default: ROOT/runs/harmony-*)")
    ap.add_argument("--calibration", help="calibration to simulate with (default: ROOT/calibration.json)")
    ap.add_argument("--schedules", help="schedule folder (default: ROOT/schedules); with --task-spans also the "
                                        "one schedule file the run ran")
    ap.add_argument("--peaks", action="store_true", help="modelled peak memory per GPU against the measured one")
    ap.add_argument("--task-peaks", nargs=2, metavar=("SCHEDULE", "PROBE_DIR"), default=None,
                    help="each task's measured peak (a run with HARMONY_TASK_PEAKS=PROBE_DIR) against the model's")
    ap.add_argument("--breakdown", metavar="SCHEDULE", default=None,
                    help="where one simulated steady iteration of SCHEDULE goes, per GPU and on the host")
    ap.add_argument("--task-spans", metavar="RUN",
                    help="each compute task's span on its GPU in RUN (a run record with `task_spans`) beside "
                         "the simulator's for the same schedule: which tasks take longer than modelled")
    ap.add_argument("--host-overhead", nargs=2, type=float, metavar=("TASK_MS", "VLAYER_MS"), default=None,
                    help="charge this much host work per compute task and per vLayer and microbatch on the "
                         "host lane (milliseconds), besides the profile's issue times")
    ap.add_argument("--host-tensors", nargs=2, type=float, metavar=("VLAYER_US", "PARAM_US"), default=None,
                    help="charge this much host work per vLayer a compute task holds and per parameter tensor "
                         "of them, once a task (microseconds; SimParams.host_vlayer_task_s and "
                         "host_param_tensor_s, docs/performance.md entry 97); the profiles need param_tensors "
                         "(experiments/merge_issue_factors.py --param-tensors)")
    ap.add_argument("--beside-nccl", type=float, metavar="FACTOR", default=None,
                    help="charge GPU compute FACTOR times its profiled time while an NCCL send/recv of its "
                         "rank is resident (SimParams.beside_nccl_slowdown; vPP at N > 1)")
    ap.add_argument("--p2p-receive", choices=RECEIVE_MODES, default=None,
                    help="model the runtime's receives between GPUs as posted lazily (each before its "
                         "microbatch) or eagerly (all at the task's start, the runtime's default since "
                         "docs/performance.md entry 48); default: as each run's record says it ran")
    ap.add_argument("--allreduce", choices=ALLREDUCE_MODES, default=None,
                    help="model vDP's all-reduce as the runtime's default runs it (inline: the rank's next "
                         "compute waits for it) or overlapped (`harmony run --allreduce overlap`); default: "
                         "as each run's record says it ran; docs/performance.md entry 77")
    ap.add_argument("--run-ahead", type=run_ahead_arg, default=AS_RUN, metavar="TASKS",
                    help="model the host's run-ahead bound (`harmony run --run-ahead`) as TASKS, none (no "
                         f"bound) or {AS_RUN} (default: each run's recorded bound); docs/performance.md entry 114")
    ap.add_argument("--optimizer-rate-from-run", action="store_true",
                    help="simulate each run with the CPU optimizer rate its slowest worker measured (host "
                         "phases) instead of the calibration's: how much of a miss the calibrated rate "
                         "explains (docs/performance.md entry 57)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    profiles = Path(args.profiles) if args.profiles else root / "profiles"
    cal_path = Path(args.calibration) if args.calibration else root / "calibration.json"
    if not cal_path.is_file():
        ap.error(f"{cal_path}: no calibration; pass --calibration (the machine's calibration.json: a `large` folder "
                 f"uses its box's paper-scale one, e.g. results/paper/1xH100-80GB-HBM3/calibration.json)")
    cal = json.loads(cal_path.read_text())
    schedules = Path(args.schedules) if args.schedules else root / "schedules"
    runs = (sorted(glob.glob(str(Path(args.runs) / "**" / "*.jsonl"), recursive=True)) if args.runs
            else sorted(glob.glob(str(root / "runs" / "harmony-*" / "*" / "*.jsonl"))))
    print(f"# {root}: schedules of the runs; calibration {cal_path}; profiles from {profiles}; "
          f"runs from {args.runs or root / 'runs'}")
    if args.task_peaks:
        sched = Path(args.task_peaks[0])
        model = json.loads(sched.read_text())["model"]["model"]
        return print_task_peaks(sched, require_profile(profiles, model), cal, Path(args.task_peaks[1]))
    if args.peaks:
        return print_peaks(runs, schedules, profiles, cal)
    if args.task_spans:
        run = args.task_spans
        s, _ = read_run(run)
        if not s or not s.get("task_spans"):
            sys.exit(f"resimulate_runs.py: {run} has no task_spans (runs recorded them from the thirtieth "
                     f"session on)")
        # a schedule file given for --schedules is the run's (an A/B's record beside the schedule it ran)
        sched = schedules if schedules.is_file() else (find_schedule(run, s, schedules)
                                                        or baseline_schedule(s, schedules.parent))
        if sched is None:
            sys.exit(f"resimulate_runs.py: no schedule in {schedules} matches {run}; pass --schedules")
        # a device folder (large_gpu.sh) keeps the profile beside the record; --profiles still wins
        profile = (profile_path(profiles, s["model"]) if args.profiles else None) \
            or profile_path(Path(run).parent, s["model"]) or require_profile(profiles, s["model"])
        rec, graph, costs, params = sim_inputs(sched, profile, cal, args.issue_in_pack)
        params = overridden(params, args, s.get("p2p_receive") or "lazy", s.get("allreduce") or "inline", s)
        simulated = task_spans(graph, costs, params, planned_cap(rec))
        for line in task_span_lines(s, graph, simulated) + kind_lines(s, graph, simulated,
                                                                      task_issue_seconds(graph, costs, params)):
            print(line)
        # a task longer than profiled: was the GPU's clock lower in the run than in the profile?
        from harmony.gpu_clocks import line as clock_line
        print(clock_line("profile's GPU", costs.profile.raw.get("gpu_clocks")))
        for r, clocks in enumerate(s.get("gpu_clocks") or [None]):
            print(clock_line(f"run's GPU {r}", clocks))
        return 0
    if args.breakdown:
        sched = Path(args.breakdown)
        model = json.loads(sched.read_text())["model"]["model"]
        rec, graph, costs, params = sim_inputs(sched, require_profile(profiles, model), cal, args.issue_in_pack)
        params = overridden(params, args, rec.get("prediction", {}).get("p2p_receive"))
        for line in breakdown_lines(simulate(graph, costs, params, planned_cap(rec), record=True)):
            print(line)
        return 0
    print(f"{'model':<13} {'mode':<4} {'N':>2} {'D':>5} {'schedule':<10} {'measured s':>10} {'recorded pred':>13} "
          f"{'ratio':>6} {'current pred':>12} {'ratio':>6} {'bound':>8} {'/bound':>6} {'retries':>7} {'issue x':>7} "
          f"{'opt G/s':>7} {'host-b':>6}")
    ratios: list[float] = []      # measured over the current model's prediction, per run
    for run in runs:
        s, iters = read_run(run)
        if not s or s.get("status") != "ok" or s.get("mode") not in ("vPP", "vDP"):   # e.g. a PyTorch reference
            continue
        m, D, N, mode = s["model"], s["minibatch"], s["gpus"], s["mode"]
        sched = find_schedule(run, s, schedules)
        cfg = sched.stem.split("-", 3)[-1] if sched else "?"
        prof = profile_path(profiles, m)
        if sched is None or prof is None:
            print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} (no {'schedule' if sched is None else 'profile'})")
            continue
        rec, graph, costs, params = sim_inputs(sched, prof, cal, args.issue_in_pack)
        # each run as it received and reduced (its summary's p2p_receive, lazy before the option existed, and
        # allreduce, inline before the option existed, and run-ahead bound), unless asked
        params = overridden(params, args, s.get("p2p_receive") or "lazy", s.get("allreduce") or "inline", s)
        own_rate = run_worker_opt_rate(s) if args.optimizer_rate_from_run else None
        if own_rate:
            params = params.with_worker_opt_rate(own_rate, N)
        # the cap the search planned under (cap less its headroom), as the recorded prediction was made
        cap = planned_cap(rec)
        sim = simulate(graph, costs, params, cap)
        now = sim.iter_time_s
        link = "shared" if params.shared_link else "per-gpu"
        bound = schedule_bound(graph, costs, cal, host_link=link)["schedule_bound_s"]
        t, was = s["iter_time_s"], s.get("predicted_iter_time_s")
        print(f"{m:<13} {mode:<4} {N:>2} {D:>5} {cfg:<10} {t:>10.3f} {was or float('nan'):>13.3f} "
              f"{t / was if was else float('nan'):>6.2f} {now:>12.3f} {t / now:>6.2f} {bound:>8.3f} {bound / t:>6.2f} "
              f"{max(s.get('alloc_retries') or [0]):>7} {issue_ratio(iters, sim):>7} "
              f"{optimizer_rate(iters):>7} {host_bound_share(s):>6}")
        ratios.append(t / now)
    if ratios:
        err = sorted(abs(r - 1) for r in ratios)
        print(f"# {len(ratios)} runs against the current model"
              + (f" with {args.host_overhead[0]:g} ms per task and {args.host_overhead[1]:g} ms per vLayer and "
                 f"microbatch of host work" if args.host_overhead else "")
              + (f" with {args.host_tensors[0]:g} us per vLayer and {args.host_tensors[1]:g} us per parameter "
                 f"tensor a task holds" if args.host_tensors else "")
              + (f" with compute {args.beside_nccl:g}x beside NCCL" if args.beside_nccl is not None else "")
              + (f" with {args.p2p_receive} receives" if args.p2p_receive else "")
              + (f" with the all-reduce {args.allreduce}" if args.allreduce else "")
              + (" with each run's own CPU optimizer rate" if args.optimizer_rate_from_run else "")
              + f": median |measured/current - 1| {statistics.median(err):.3f}, "
              f"{sum(e <= 0.10 for e in err)} within 10%, ratios {min(ratios):.2f}-{max(ratios):.2f}")
    return 0


def sim_breakdown(sim) -> tuple[float, dict, float]:
    """The last simulated iteration (its window is from the previous iteration's end to its own): per GPU,
    {"device_s": the device seconds of the compute tasks that start in it, and per lane (compute, swap-in,
    swap-out, p2p-in) the busy seconds, overlaps counted once}; and the host's CPU update seconds."""
    from harmony.timeline import union_length
    ends = sim.iteration_ends
    lo, hi = (ends[-2], ends[-1]) if len(ends) > 1 else (0.0, ends[0])
    lanes: dict = {}
    ranks: dict[int, dict] = {}
    host = []
    for pid, lane, _name, start, end, args in sim.events:
        a, b = max(start, lo), min(end, hi)
        if b <= a:
            continue
        if pid == "host":
            host.append((a, b))
        elif isinstance(pid, int):
            lanes.setdefault((pid, lane), []).append((a, b))
            r = ranks.setdefault(pid, {"device_s": 0.0})
            if lo <= start < hi:
                if lane == "compute":
                    r["device_s"] += args.get("device_s") or 0.0
                r[f"{lane} GB"] = r.get(f"{lane} GB", 0.0) + (args.get("bytes") or 0) / 1e9
    for (pid, lane), iv in lanes.items():
        ranks[pid][lane] = union_length(iv)
    return hi - lo, dict(sorted(ranks.items())), union_length(host)


def breakdown_lines(sim) -> list[str]:
    wall, ranks, host = sim_breakdown(sim)
    lines = [f"simulated steady iteration {wall:.3f} s (predicted {sim.iter_time_s:.3f} s per iteration)"]
    for r, b in ranks.items():
        dev = b["device_s"]
        lanes = ", ".join(f"{name} {b.get(lane, 0):.3f} s ({b.get(lane + ' GB', 0):.2f} GB)"
                          for lane, name in (("swap-in", "swap-in"), ("swap-out", "swap-out"), ("p2p-in", "P2P in")))
        lines.append(f"  GPU {r}: computes {dev:.3f} s ({dev / wall:.0%}), idle {max(wall - dev, 0):.3f} s; compute "
                     f"tasks span {b.get('compute', 0):.3f} s; lanes in use (a streamed transfer spans its first to "
                     f"last microbatch): {lanes}")
    lines.append(f"  host: CPU updates busy {host:.3f} s ({host / wall:.0%} of the iteration)")
    return lines


# a task whose GPU end comes within this of the host's issue end ran its kernels as the host issued them
HOST_BOUND_LAG_S = 1e-3


def task_lags(summary: dict) -> list[dict[int, float]] | None:
    """Per rank, {task id: seconds its GPU work ended after the host had issued it} (task_spans' end less
    task_issued); None for a run without `task_issued` (before the thirty-second session)."""
    spans, issued = summary.get("task_spans"), summary.get("task_issued")
    if not spans or not issued:
        return None
    out = []
    for rank_spans, rank_issued in zip(spans, issued):
        at = dict((tid, t) for tid, t in rank_issued)
        out.append({tid: end - at[tid] for tid, _, end in rank_spans if tid in at})
    return out


def host_bound_tasks(summary: dict) -> tuple[int, int] | None:
    """(tasks whose GPU work ended within HOST_BOUND_LAG_S of the host's issue end, tasks), over every rank
    of a run's median steady iteration; None without `task_issued`."""
    lags = task_lags(summary)
    if lags is None:
        return None
    every = [lag for rank in lags for lag in rank.values()]
    return sum(lag < HOST_BOUND_LAG_S for lag in every), len(every)


def host_bound_share(summary: dict) -> str:
    """`host-b` of the table: the share of a run's tasks that waited for the host, '-' without the record."""
    hb = host_bound_tasks(summary)
    return f"{hb[0] / hb[1]:.2f}" if hb and hb[1] else "-"


def kind_lines(summary: dict, graph, simulated: dict[int, tuple], issue_s: dict[int, float] | None) -> list[str]:
    """Per rank and task kind, the medians of entries 90 and 91: how often the host issued a task of that kind
    (the interval from the rank's previous task's issue end to this one's; `task_issued`) against the model's
    host lane for it (`task_issue_seconds`: profiled issue plus the runtime's charge), and the task's span on
    the GPU, measured and simulated. An interval well over the model's host lane with a GPU waiting for the
    host (host-bound lags) is host time the model leaves out."""
    kinds = {t.id: t.kind for t in graph.tasks}
    issued = summary.get("task_issued") or []
    lines = []
    for r, spans in enumerate(summary["task_spans"]):
        at = [(tid, t) for tid, t in issued[r]] if r < len(issued) else []
        gaps: dict[str, list[float]] = {}
        for (_, t0), (tid, t1) in zip(at, at[1:]):
            gaps.setdefault(kinds[tid], []).append(t1 - t0)
        for kind in ("FWD", "BWD"):
            ids = [tid for tid, _, _ in spans if kinds[tid] == kind]
            if not ids:
                continue
            meas = statistics.median(b - a for tid, a, b in spans if kinds[tid] == kind)
            sim = statistics.median(simulated[tid][1] - simulated[tid][0] for tid in ids)
            text = f"rank {r} {kind}: {len(ids)} tasks, span median {meas * 1e3:.2f} ms (simulated {sim * 1e3:.2f})"
            if gaps.get(kind):
                text += f"; issued every {statistics.median(gaps[kind]) * 1e3:.2f} ms (median)"
            if issue_s:
                text += f"; the model's host lane {statistics.median(issue_s[tid] for tid in ids) * 1e3:.2f} ms a task"
            lines.append(text)
    return lines


def task_span_lines(summary: dict, graph, simulated: dict[int, tuple]) -> list[str]:
    """Per rank, each compute task as the run timed it (median steady iteration) and as the simulator does:
    the gap before it (the stream waiting for its weights, stash or the previous task), its span and their
    ratio; then per rank the sums. A span holds the task's kernels and the stream's waits for data that
    arrives while it runs (harmony/runtime/task_clock.py). Runs that record `task_issued` add `lag`: how long
    after the host had issued the task its GPU work ended. Near 0 the GPU waited for the host (a slow host
    stretches such a span); large, the GPU was behind (its kernels or its waits stretch it)."""
    tasks = {t.id: t for t in graph.tasks}
    lags = task_lags(summary) or []
    lines = [f"{summary['model']} {summary['mode']} N={summary['gpus']} D={summary['minibatch']}: measured "
             f"{summary['iter_time_s']:.3f} s per iteration, predicted {summary.get('predicted_iter_time_s') or 0:.3f}"]
    for r, spans in enumerate(summary["task_spans"]):
        host = lags[r] if r < len(lags) else {}
        lines.append(f"rank {r}:  task kind pack         gap meas  gap sim   span meas  span sim   ratio"
                     + ("      lag" if host else ""))
        prev_m = prev_s = 0.0
        sums = [0.0, 0.0, 0.0, 0.0]
        for tid, a, b in spans:
            sa, sb = simulated[tid]
            t = tasks[tid]
            row = (a - prev_m, sa - prev_s, b - a, sb - sa)
            sums = [x + y for x, y in zip(sums, row)]
            ratio = f"{row[2] / row[3]:.2f}" if row[3] > 0 else "-"
            lag = f" {host[tid]:>8.4f}" if tid in host else ""
            lines.append(f"        {tid:>5} {t.kind:<4} {str(list(t.pack)):<10} {row[0]:>9.4f} {row[1]:>8.4f} "
                         f"{row[2]:>11.4f} {row[3]:>9.4f} {ratio:>7}{lag}")
            prev_m, prev_s = b, sb
        ratio = f"{sums[2] / sums[3]:.2f}" if sums[3] > 0 else "-"
        lines.append(f"        total                {sums[0]:>9.4f} {sums[1]:>8.4f} {sums[2]:>11.4f} {sums[3]:>9.4f} "
                     f"{ratio:>7}" + (f"   {sum(lag < HOST_BOUND_LAG_S for lag in host.values())} of {len(spans)} "
                                      f"tasks ended within {HOST_BOUND_LAG_S * 1e3:g} ms of their issue (host-bound)"
                                      if host else ""))
    return lines


# a plan whose profiled issue is this share of its compute or more can turn host-bound on a slower host
HOST_BOUND_ISSUE_SHARE = 0.8


def issue_ratio(iterations: list[dict], sim) -> str:
    """The run's host issue seconds over the profile's, busiest rank, median steady iteration; only for a
    plan near host-bound (profiled issue at least 80% of the GPU's profiled compute: bert96 D = 16 on 2x H200
    profiles at 0.84 and ran host-bound, issuing 1.65x its profile; docs/performance.md entry 60), '-'
    otherwise: on a
    device-bound plan the issue loop also blocks in CUDA (a full launch queue) and the ratio says nothing
    of the host. Net of the waits the worker times (update flags, run-ahead): near 1 where the run's host
    issued as fast as the profile's, above 1 on a slower host (docs/performance.md entry 41)."""
    profiled = max(sim.issue_s or [0.0])
    if profiled <= 0 or profiled < HOST_BOUND_ISSUE_SHARE * max(sim.compute_s):
        return "-"
    net = [max(h["issue_s"] - h.get("flag_wait_s", 0.0) - h.get("run_ahead_wait_s", 0.0) for h in r["host_phases"])
           for r in iterations if r.get("iteration", 0) > 0 and r.get("host_phases")]
    return f"{statistics.median(net) / profiled:.2f}" if net else "-"


def optimizer_rate(iterations: list[dict]) -> str:
    """G parameters per thread-second that the run's CPU optimizer stepped (all ranks, median steady
    iteration); '-' for a run without host phases."""
    rates = []
    for r in iterations:
        phases = r.get("host_phases") or []
        step_s = sum(h.get("upd_step_s", 0.0) for h in phases)
        if r.get("iteration", 0) > 0 and step_s > 0:
            rates.append(sum(h.get("upd_params", 0) for h in phases) / step_s / 1e9)
    return f"{statistics.median(rates):.2f}" if rates else "-"


def task_predictions(graph, costs, params, waits: set[int]) -> dict[int, tuple[int, int]]:
    """Per compute task, the modelled peak while it runs plus the next task's prefetch where the plan
    overlaps them: (with the task's own peak, with the simulator's, which adds what the rank still holds
    for its sends)."""
    from harmony.schedule.simulate import simulate, task_memory_charges
    held = simulate(graph, costs, params).task_peak_bytes
    return {tid: (own + pf, held[tid] + pf)
            for tid, (own, pf) in task_memory_charges(graph, costs, params, waits).items()}


def rank_peaks(graph, costs, params, waits: set[int]) -> tuple[list[int], list[int]]:
    """Per GPU, the largest of task_predictions: with the tasks' own peaks, and with the simulator's."""
    out = ([0] * graph.config.gpus, [0] * graph.config.gpus)
    preds = task_predictions(graph, costs, params, waits)
    for t in graph.tasks:
        if t.id in preds:
            for k in range(2):
                out[k][t.rank] = max(out[k][t.rank], preds[t.id][k])
    return out


def print_task_peaks(sched: Path, profile: Path, cal: dict, probe: Path) -> int:
    """Each compute task's measured peak (`HARMONY_TASK_PEAKS=DIR harmony run ...`, docs/runtime.md; the
    median over the iterations after the first) against task_predictions, largest excess first; then, where
    the probe recorded them, what the caching allocator held at the start of each task that retried."""
    rec, graph, costs, params = sim_inputs(sched, profile, cal)
    waits = set((rec.get("prediction") or {}).get("prefetch_waits") or ())
    preds = task_predictions(graph, costs, params, waits)
    by_task: dict[int, list[dict]] = {}
    for f in sorted(probe.glob("rank*.json")):
        for x in json.loads(f.read_text())["tasks"]:
            if x["iteration"] >= 1:
                by_task.setdefault(x["task"], []).append(x)
    G = 2 ** 30

    def median_of(xs: list[dict], key) -> float | None:   # None for a probe from before the allocator fields
        vals = [key(x) for x in xs if x.get("allocator_at_start") is not None]
        return statistics.median(vals) if vals else None

    def held(x: dict, field: str, combine=sum) -> int:       # over the streams, at the task's start
        return combine([v.get(field, 0) for v in x["allocator_at_start"].values()] or [0])

    def fmt(v: float | None, scale: float = G, width: int = 9, digits: int = 2) -> str:
        return f"{v / scale:>{width}.{digits}f}" if v is not None else f"{'-':>{width}}"
    rows = []
    for tid, xs in by_task.items():
        meas = statistics.median(x["peak_bytes"] for x in xs)
        allocator = (median_of(xs, lambda y: held(y, "reserved")), median_of(xs, lambda y: held(y, "free")),
                     median_of(xs, lambda y: held(y, "largest_free", max)), median_of(xs, lambda y: y["retries"]))
        rows.append((meas - preds[tid][1], tid, xs, meas, allocator))
    print(f"{'task':>5} {'kind':<4} {'pack':<11} {'next':>5} {'at start':>9} {'measured':>9} {'modelled':>9} "
          f"{'excess':>8} {'reserved':>9} {'unused':>9} {'largest':>9} {'retries':>7}  GiB at the task's start")
    for excess, tid, xs, meas, (reserved, free, largest, retries) in sorted(rows, key=lambda r: -r[0]):
        x = xs[0]
        start = statistics.median(y["start_bytes"] for y in xs)
        print(f"{tid:>5} {x['kind']:<4} {x['pack'][0]:>4}:{x['pack'][1]:<6} {str(x['next_task']):>5} "
              f"{start / G:>9.2f} {meas / G:>9.2f} {preds[tid][1] / G:>9.2f} {excess / G:>+8.2f} "
              f"{fmt(reserved)} {fmt(free)} {fmt(largest)} {fmt(retries, 1, 7, 1)}")
    for tid in sorted(r[1] for r in rows if (r[4][3] or 0) > 0):      # the tasks that retried
        last = by_task[tid][-1]
        streams = ", ".join(f"{name} {v['reserved'] / G:.2f} reserved, {v['allocated'] / G:.2f} allocated, "
                            f"{v.get('free', 0) / G:.2f} unused (largest {v.get('largest_free', 0) / G:.2f}, "
                            f"{v.get('segments', 0)} segments)"
                            for name, v in sorted(last["allocator_at_start"].items()))
        print(f"task {tid} retried {last['retries']} in iteration {last['iteration']}; at its start: {streams}")
    return 0


def print_peaks(runs, schedules: Path, profiles: Path, cal: dict) -> int:
    def fmt(xs) -> str:
        return " ".join(f"{x / 2 ** 30:5.2f}" for x in xs)
    print(f"{'model':<13} {'mode':<4} {'N':>2} {'D':>5}  {'own tasks, GiB per GPU':<24} {'sends held':<24} measured")
    for run in runs:
        lines = [json.loads(x) for x in Path(run).read_text().splitlines()]
        s = lines[-1]
        its = [x for x in lines if x.get("record") == "iteration" and x.get("peak_allocated_bytes")]
        if s.get("status") != "ok" or not its:
            continue
        sched, prof = find_schedule(run, s, schedules), profile_path(profiles, s["model"])
        if sched is None or prof is None:
            continue
        rec, graph, costs, params = sim_inputs(sched, prof, cal)
        waits = (rec.get("prediction") or {}).get("prefetch_waits")
        if waits is None:
            continue
        own, held = rank_peaks(graph, costs, params, set(waits))
        print(f"{s['model']:<13} {s['mode']:<4} {s['gpus']:>2} {s['minibatch']:>5}  {fmt(own):<24} "
              f"{fmt(held):<24} {fmt(its[-1]['peak_allocated_bytes'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
