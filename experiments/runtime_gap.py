"""How far apart in code Harmony's figure-10 runs and the swap baselines they are compared with were made
(docs/performance.md entry 81). swap-dp and swap-pp run on Harmony's runtime, so a baseline record made
on an older runtime measures that runtime, not only the baseline: a C3/C10 ratio across the gap compares
two versions of the same code. For each figure-10 point of a results folder, the commits to the runtime
(`harmony/runtime/`, the swap baselines' schedule builders) between each swap baseline's record and the
Harmony run it is measured against (the faster mode), from the code each record names (its source tree
hashes, else its `env.git_commit`), and how many allocations each record's caching allocator retried per
iteration at the cap (its `alloc_retries`, the busiest GPU): the runtime of 2026-11-23/24 retried where
today's does not, and on one H200 that alone made swap-pp 3.6-4.5% slower at gpt2-xl D = 16 and 64
(entry 82). Run from the repository root.

    python experiments/runtime_gap.py RESULTS [--min N]     (--min: list only gaps of at least N commits)
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from harmony.jsonio import read_jsonl
from harmony.provenance import commits_with

RUNTIME_PATHS = ("harmony/runtime", "baselines/swap_dp.py", "baselines/swap_pp.py")
SWAP_BASELINES = ("swap-dp", "swap-pp")


def record_commit(summary: dict, found: dict) -> str | None:
    """The commit whose code made a record: the oldest commit whose `harmony/` and `baselines/` hold the
    tree hashes the record carries (`env.source_trees`, from the files that ran), else its `git_commit`
    (a trailing `-dirty` dropped), which on the lent machines can lag the files (docs/artifact-evaluation.md,
    "Which code made a number"). `found` caches the lookups by tree hashes."""
    env = summary.get("env") or {}
    trees = env.get("source_trees")
    if trees:
        key = tuple(sorted(trees.items()))
        if key not in found:
            try:
                commits = commits_with(trees, repo=Path.cwd())
            except ValueError:
                commits = []
            found[key] = commits[-1] if commits else None
        if found[key]:
            return found[key]
    commit = (env.get("git_commit") or "").removesuffix("-dirty")
    return commit or None


def harmony_runs(root: Path, model: str, n: int, d: int) -> dict[str, dict]:
    """Mode -> summary of Harmony's measured vPP and vDP runs at this point (their default `auto` plans)
    that finished."""
    out = {}
    for mode in ("vPP", "vDP"):
        path = root / "runs" / f"harmony-{mode}" / model / f"N{n}-D{d}-auto.jsonl"
        if path.exists():
            s = read_jsonl(path)[-1]
            if s.get("status") == "ok" and s.get("iter_time_s"):
                out[mode] = s
    return out


def retries(summary: dict) -> int:
    """Allocations the record's caching allocator retried per iteration at its cap, on its busiest GPU."""
    r = summary.get("alloc_retries") or [0]
    return max(r) if isinstance(r, list) else int(r)


def commits_between(a: str, b: str) -> int | None:
    """Runtime commits on one side of a..b and not the other (either order), or None if one is unknown."""
    try:
        out = subprocess.run(["git", "rev-list", "--count", f"{a}...{b}", "--", *RUNTIME_PATHS],
                             capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError:
        return None
    return int(out.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--min", type=int, default=0, help="list only gaps of at least this many commits")
    a = ap.parse_args(argv)
    runs = Path(a.results) / "runs"
    if not runs.is_dir():
        print(f"{a.results}: no runs/ folder", file=sys.stderr)
        return 2
    print(f"# {a.results}: runtime commits ({', '.join(RUNTIME_PATHS)}) between each swap baseline's record "
          "and Harmony's faster run of the same point")
    found: dict = {}
    print(f"{'model':12s} {'point':9s} {'Harmony, commit':20s} {'baseline':8s} {'commit':8s} {'apart':>5s}"
          f"  retries (Harmony, baseline)")
    points = {(p.parent.name, p.name.removesuffix("-auto.jsonl")) for p in runs.glob("harmony-v??/*/N*-D*-auto.jsonl")}
    for model, point in sorted(points):
        n, d = (int(x) for x in re.fullmatch(r"N(\d+)-D(\d+)", point).groups())
        done = harmony_runs(runs.parent, model, n, d)
        if not done:
            continue
        mode, best = min(done.items(), key=lambda kv: kv[1]["iter_time_s"])
        h_commit = record_commit(best, found)
        for system in SWAP_BASELINES:
            rec = runs / system / model / f"{point}-best.jsonl"
            if not rec.exists() or h_commit is None:
                continue
            summary = read_jsonl(rec)[-1]
            b_commit = record_commit(summary, found)
            gap = commits_between(b_commit, h_commit) if b_commit else None
            if gap is not None and gap < a.min:
                continue
            note = "" if summary.get("status") == "ok" else f"  ({summary.get('status')})"
            print(f"{model:12s} {point:9s} {'harmony-' + mode + ' ' + h_commit[:8]:20s} {system:8s} "
                  f"{(b_commit or '-')[:8]:8s} {'?' if gap is None else gap:>5}  {retries(best):>3d} {retries(summary):>3d}"
                  f"{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
