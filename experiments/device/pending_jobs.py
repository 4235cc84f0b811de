"""What a generated job list (experiments/device/jobs-*.sh) has left to run, and about how much device time it
will take, so that a session can plan its calls (30 minutes of device time each; docs/performance.md
entry 45 found calls spent on the wrong jobs).

A job is left when one of its outputs is missing or empty (the list's own rule). Its estimate comes from:
  - a Harmony run (`run_harmony`, `run_convergence`): its schedule's predicted iteration times 1.1 for each
    iteration, plus the set-up the deadline allows for (`harmony.runtime.run_overhead_s`, prefaulted);
  - a baseline search: the same search (system, model, minibatch) done before, first in the list's own
    folder, then in the others (another machine, N = 1). Its device time is the larger of what the calls'
    console logs show (`[T s] RULE: OUTPUT` lines, a job lasting until the next one started, summed over
    the calls a search was spread over) and what its records hold: each candidate's iterations plus a
    set-up of SETUP_S (zero-offload's DeepSpeed started training 28-59 s after launch in x2-grid1; the
    others, about 10 s). A call's last job has no next line, so only its records count. An unfinished
    search has done what its candidates on record hold, which its next call skips. A search from
    another folder is scaled by the median ratio, this folder's time over that one's, of the same
    system's searches done in both (2x H200's first three zero-offload searches at N = 2 took 0.6, 2.6
    and 3.8x the H100's at N = 1), and unscaled where there is no such pair;
  - profiles and schedules: the median of that rule's jobs in the console logs;
  - with `--variant BASE=VARIANT` (a model alias of experiments/scales.yaml, device README item 63), a
    variant's job that has no basis of its own takes its base model's: the base's search, or its plan's
    prediction where the variant's plan is not searched yet (channels-last runs faster: an upper bound).
A job with no basis is listed as unknown. Estimates say where the time goes, not what a call will finish.
Last, it names each final record of the list's models that a move left only under the folder's
`superseded/` with no job of the list to make it again (write the list again if it should be).

    python experiments/device/pending_jobs.py experiments/device/jobs-2xH200.sh \
        --like results/paper/1xH100-80GB-HBM3 [--skip zero-offload] [--call-s 545] [--variant BASE=VARIANT ...]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

JOB_LINE = re.compile(r"^job (\S+) (.*)$")
STAMP = re.compile(r"^\[(\d+) s\] (\S+): (\S+)")
RUN_PATH = re.compile(r"/runs/(?P<system>[^/]+)/(?P<model>[^/]+)/N(?P<n>\d+)-D(?P<d>\d+)-")
HARMONY_RULES = ("run_harmony", "run_convergence")
SETUP_S = {"zero-offload": 30.0}      # per candidate, before its first iteration; others SETUP_S_OTHER
SETUP_S_OTHER = 10.0


@dataclass
class Job:
    rule: str
    cmd: str
    outputs: list[str]

    def left(self, root: Path) -> bool:
        return not all((root / o).is_file() and (root / o).stat().st_size > 0 for o in self.outputs)


def read_jobs(joblist: Path) -> list[Job]:
    """The `job RULE 'SHELL' OUTPUT...` lines of a generated job list, in order."""
    jobs = []
    for line in joblist.read_text().splitlines():
        m = JOB_LINE.match(line)
        if m:
            words = shlex.split(m.group(2))
            jobs.append(Job(m.group(1), words[0], words[1:]))
    return jobs


def job_key(rule: str, output: str) -> tuple | None:
    """(rule, system, model, minibatch) of a run or baseline output; None for others."""
    m = RUN_PATH.search("/" + output)
    return (rule, m["system"], m["model"], int(m["d"])) if m else None


def past_job_seconds(results: Path) -> tuple[dict[str, float], dict[str, list[float]]]:
    """From every call's console log under `results`: the seconds spent on each output (summed over the
    calls that ran it), and per rule the seconds of each job of that rule."""
    by_output: dict[str, float] = {}
    by_rule: dict[str, list[float]] = {}
    for log in sorted((results / "calls").glob("*.console.log")):
        stamps = [m for m in map(STAMP.match, log.read_text(errors="replace").splitlines()) if m]
        for a, b in zip(stamps, stamps[1:]):
            if int(b[1]) < int(a[1]):
                continue                    # a second list in the same log starts its clock again
            dt = float(int(b[1]) - int(a[1]))
            by_output[a[3]] = by_output.get(a[3], 0.0) + dt
            by_rule.setdefault(a[2], []).append(dt)
    return by_output, by_rule


def harmony_run_estimate(job: Job, root: Path, variants: dict[str, str] | None = None) -> tuple[float | None, str]:
    """A Harmony run: what the deadline check charges it (predicted iterations 10% over, the traced one
    too, plus the set-up it allows), prefaulted. `variants` (variant -> base): a variant's plan not yet
    searched is estimated by its base's plan at the same point."""
    from harmony.jsonio import DEADLINE_MARGIN
    from harmony.runtime import run_cost_s
    words = shlex.split(job.cmd)
    try:
        if "--schedule" in words:                # the workflow's guard names it
            sched = words[words.index("--schedule") + 1]
        else:                                    # `harmony run SCHEDULE ...`
            sched = next(w for w in words[words.index("run") + 1:] if w.endswith(".json"))
        iters = int(words[words.index("--iters") + 1]) if "--iters" in words else 5
    except (ValueError, IndexError, StopIteration):
        return None, "no schedule to predict from"
    note = ""
    if not (root / sched).is_file():
        parts = Path(sched).parts
        base = (variants or {}).get(parts[-2]) if len(parts) >= 2 else None
        if base is not None:
            sched, note = str(Path(*parts[:-2], base, parts[-1])), f"; {base}'s plan (this one is not searched yet)"
    try:
        record = json.loads((root / sched).read_text())
    except (ValueError, OSError):
        return None, "no schedule to predict from"
    cost = run_cost_s(record, iters, traced="--memcpy-trace" in words, prefault=True)
    if cost is None:
        return None, "its schedule has no prediction"
    iter_s, overhead = cost
    return (DEADLINE_MARGIN * iter_s + overhead,
            f"{iters} x {record['prediction']['iter_time_s']:.2f} s predicted + set-up" + note)


def records_seconds(final: Path, system: str, final_counts: bool = True) -> float:
    """A search's device time by its records: per candidate (`<stem>.u<U>.jsonl`, else the final record
    alone, unless `final_counts` is off: an unfinished search has none), its iterations plus SETUP_S."""
    from baselines.cli import candidate_cost_s
    from harmony.jsonio import candidate_paths
    files = candidate_paths(final) or ([final] if final_counts else [])
    return sum(candidate_cost_s(str(f)) + SETUP_S.get(system, SETUP_S_OTHER) for f in files)


def search_seconds(finals: list[Path], root: Path, by_output: dict[str, float], system: str) -> tuple[float, float]:
    """A finished search's device time two ways: its calls' logged seconds and its records' (the largest
    over `finals`, the same search's final records at any N)."""
    logged = max([by_output.get(str(f.relative_to(root)), 0.0) for f in finals])
    return logged, max(records_seconds(f, system) for f in finals)


def finished_searches(root: Path, folder: Path, system: str) -> dict[tuple[str, int], list[Path]]:
    """(model, minibatch) -> the final records of that system's finished searches in `folder`."""
    out: dict[tuple[str, int], list[Path]] = {}
    for f in sorted((root / folder / "runs" / system).glob("*/N*-D*-best.jsonl")):
        m = RUN_PATH.search("/" + str(f.relative_to(root)))
        if m:
            out.setdefault((m["model"], int(m["d"])), []).append(f)
    return out


def machine_ratio(root: Path, own_dir: Path, own: tuple, folder: Path, theirs: tuple, system: str) -> tuple[float | None, int]:
    """Median over the searches of `system` finished in both folders of (own seconds / their seconds), and
    how many there were: another machine's search time, scaled to this one's."""
    mine, other = finished_searches(root, own_dir, system), finished_searches(root, folder, system)
    ratios = []
    for key in sorted(mine.keys() & other.keys()):
        a = max(search_seconds(mine[key], root, own[0], system))
        b = max(search_seconds(other[key], root, theirs[0], system))
        if a > 0 and b > 0:
            ratios.append(a / b)
    return (statistics.median(ratios), len(ratios)) if ratios else (None, 0)


def estimate(job: Job, root: Path, own_dir: Path, own: tuple, like: list[tuple[Path, tuple]],
             ratios: dict[tuple[Path, str], tuple[float | None, int]],
             variants: dict[str, str] | None = None) -> tuple[float | None, str]:
    """`ratios`: machine_ratio per (other folder, system), filled as first needed (it reads every record of
    that system's searches in both folders; the same for every job of the list). `variants`: variant ->
    base model, whose jobs stand in where the variant has none."""
    if job.rule in HARMONY_RULES:
        return harmony_run_estimate(job, root, variants)
    key = job_key(job.rule, job.outputs[0])
    if key is not None:
        _, system, model, d = key
        # what a resumed search skips is its candidates on record, not the calls' time on it: a candidate cut
        # off is lost, and so are candidates moved to superseded/ (4x H200's swap-dp, fifty-sixth session)
        spent = records_seconds(root / job.outputs[0], system, final_counts=False)
        models = [model] + ([variants[model]] if variants and model in variants else [])
        for folder, past, m in ((f, p, m) for m in models for f, p in [(own_dir, own)] + like):
            finals = sorted((root / folder / "runs" / system / m).glob(f"N*-D{d}-best.jsonl"))
            finals = [f for f in finals if str(f.relative_to(root)) != job.outputs[0]]
            if not finals:
                continue
            logged, recorded = search_seconds(finals, root, past[0], system)
            where = ("this machine" if folder == own_dir else folder.name) + ("" if m == model else f", {m}")
            basis = f"the same search on {where}: {logged:.0f} s in its calls' logs, {recorded:.0f} s by its records"
            scale, pairs = None, 0
            if folder != own_dir:
                if (folder, system) not in ratios:
                    ratios[folder, system] = machine_ratio(root, own_dir, own, folder, past, system)
                scale, pairs = ratios[folder, system]
            if scale is not None:
                basis += f"; x{scale:.2f}, the median ratio of {pairs} {system} search(es) done on both"
            return (max(0.0, max(logged, recorded) * (scale or 1.0) - spent),
                    basis + (f"; {spent:.0f} s spent on this one already" if spent else ""))
        return None, "no such search has run"
    walls = own[1].get(job.rule) or [s for _, o in like for s in o[1].get(job.rule, [])]
    return (statistics.median(walls), f"median of {len(walls)} {job.rule} jobs") if walls else (None, "no basis")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("joblist", type=Path, help="a generated job list (experiments/device/jobs-*.sh)")
    p.add_argument("--like", type=Path, nargs="*", default=[],
                   help="other results folders whose calls ran the same kinds of job (another machine)")
    p.add_argument("--results", type=Path, default=None,
                   help="the list's own results folder (default: from its first output, results/<scale>/<hw>)")
    p.add_argument("--skip", default=None, help="leave out jobs whose first output matches this regex (JOB_SKIP)")
    p.add_argument("--call-s", type=float, default=545.0,
                   help="job-list seconds one device call gives (585 s less about 40 s of set-up and tail)")
    p.add_argument("--variant", nargs="*", default=[], metavar="BASE=VARIANT",
                   help="estimate a model variant's jobs by its base model's where it has none of its own")
    p.add_argument("--root", type=Path, default=Path("."), help="the repository root the list runs from")
    args = p.parse_args(argv)
    jobs = read_jobs(args.joblist)
    if not jobs:
        print(f"{args.joblist}: no `job` lines (is it a generated job list?)")
        return 1
    missing = [d for d in args.like if not (args.root / d / "runs").is_dir()]
    if missing:     # slim_tree.sh on HW takes the other hardware's folders off the disk
        print(f"--like {' '.join(map(str, missing))}: no runs/ folder on disk (after `slim_tree.sh on HW`, "
              f"run `bash experiments/device/slim_tree.sh off` first)")
        return 1
    left = [j for j in jobs if j.left(args.root)
            and not (args.skip and re.search(args.skip, j.outputs[0]))]
    own_dir = args.results or Path(*Path(jobs[0].outputs[0]).parts[:3])
    own = past_job_seconds(args.root / own_dir)
    like = [(d, past_job_seconds(args.root / d)) for d in args.like]
    variants = {}
    for pair in args.variant:
        base, sep, variant = pair.partition("=")
        if not (sep and base and variant):
            p.error(f"--variant {pair!r} is not BASE=VARIANT (e.g. resnet1026=resnet1026-cl)")
        variants[variant] = base
    total, unknown, ratios = 0.0, 0, {}
    print(f"{len(left)} of {len(jobs)} jobs left in {args.joblist}" + (f" (leaving out {args.skip})" if args.skip else ""))
    for j in left:
        s, basis = estimate(j, args.root, own_dir, own, like, ratios, variants)
        total += s or 0.0
        unknown += s is None
        print(f"{'?' if s is None else f'{s:.0f}':>6} s  {j.rule:<16} {j.outputs[0]}  ({basis})")
    calls = math.ceil(total / args.call_s) if total else 0
    print(f"about {total:.0f} s of job time ({total / 60:.0f} min) for the {len(left) - unknown} jobs with an "
          f"estimate, {unknown} without; at least {calls} call(s) of {args.call_s:.0f} s")
    for rel in moved_without_a_job(jobs, args.root, own_dir):
        print(f"not made again: {rel} is only under superseded/ and no job of this list writes it "
              f"(write the list again if it should be)")
    return 0


def moved_without_a_job(jobs: list[Job], root: Path, own_dir: Path) -> list[str]:
    """The final records (N*-D*-auto|best.jsonl) of the list's models that a move to `superseded/` took out of
    `runs/` and that no job of the list writes again: a list holds jobs only for the records missing when it
    was written, so a move after that leaves a point with no record and no job (entry 108's move of swap-dp
    resnet1026-cl D = 1024, found in entry 109)."""
    outputs = {o for j in jobs for o in j.outputs}
    models = {m.group("model") for o in outputs if (m := RUN_PATH.search(o))}
    found = set()
    moved = root / own_dir / "superseded"
    for old in sorted([*moved.glob("*/runs/*/*/N*-D*-auto.jsonl"), *moved.glob("*/runs/*/*/N*-D*-best.jsonl")]):
        system, model, name = old.parts[-3:]
        if model not in models:
            continue
        rel = str(own_dir / "runs" / system / model / name)
        if not (root / rel).exists() and rel not in outputs:
            found.add(rel)
    return sorted(found)


if __name__ == "__main__":
    raise SystemExit(main())
