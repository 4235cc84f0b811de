#!/usr/bin/env python3
"""Write a job list that runs stale run records again: those whose environment lacks a key that runs made
after a fix carry (default `omp_wait_policy`: performance log entry 19, spinning OpenMP teams).

Finds the stale records under RESULTS/runs/, asks Snakemake for the command of each (`snakemake -n -p
--force TARGET`, with the CONFIG the grids ran with; a baseline keeps the microbatch its search picked,
`baseline_ubatch=U`, so its search is not repeated), and writes them in priority order (Harmony first,
farthest from its prediction first; then swap-dp/swap-pp, then fsdp-offload and zero-offload, whose set-up is slowest) through `rerun`: on the
GPU machine, just before the job runs, its record and its search candidates (`<record>.u<u>.jsonl`) move
to RESULTS/superseded/REASON/ (committed with the call's tarball), so a figure keeps its old point until
the new one exists. A record that is fresh by then (a previous call ran it) is left alone, so the list is
re-runnable like every job list. Run it here, where snakemake is:
  python experiments/device/rerun-stale.py results/paper/2xH200 --gpus 2 \
      --config scale=paper hardware=2xH200 gpus_present=2 iters=4 -o experiments/device/rerun-2xH200.sh
  bash experiments/device/grid_gpu.sh experiments/device/rerun-2xH200.sh results/paper/2xH200 TAG
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ORDER = {"harmony": 0, "swap-dp": 1, "swap-pp": 1, "fsdp-offload": 2, "zero-offload": 2}
RERUN = r'''SUP=${SUPERSEDED:-%(sup)s}
rerun() {  # rerun RECORD RULE 'SHELL' OUTPUT...: move the stale RECORD and its candidates aside, then run the job
  local rec=$1 f; shift
  if grep -q '"%(key)s"' "$rec" 2>/dev/null; then n_skip=$((n_skip+1)); return; fi   # fresh: ran after the fix
  # fresh: this list ran it already (its runs' env records carry run_tag %(reason)s; a key no record has,
  # as a side-by-side re-run's, would otherwise run them again in every call)
  if grep -q '"run_tag": *"%(reason)s"' "$rec" 2>/dev/null; then n_skip=$((n_skip+1)); return; fi
  if [ "$budget" -gt 0 ] && [ "$SECONDS" -ge "$budget" ]; then n_left=$((n_left+1)); return; fi
  for f in "$rec" "${rec%%.jsonl}".u*.jsonl; do   # a fresh candidate (an earlier call's cut-off search) stays
    [ -e "$f" ] && ! grep -q '"%(key)s"' "$f" || continue
    mkdir -p "$SUP/$(dirname "${f#%(results)s/}")" && mv "$f" "$SUP/${f#%(results)s/}"
  done
  HARMONY_RUN_TAG=%(reason)s; export HARMONY_RUN_TAG; job "$@"; unset HARMONY_RUN_TAG
}
'''


def summary_of(path: Path) -> dict | None:
    from harmony.jsonio import read_jsonl
    rec = (read_jsonl(path) or [None])[-1]
    return rec if isinstance(rec, dict) and rec.get("record") == "summary" else None


def stale_records(results: str, key: str, gpus: int | None, systems: set[str] | None,
                  modes: set[str] | None = None, records: str | None = None,
                  by_config: bool = False, reason: str | None = None) -> list[tuple[tuple, str, dict]]:
    """(priority, record path, summary) of the run records under RESULTS/runs/ whose summary and env both
    lack `key` (and whose path matches the regular expression `records`, when given); Harmony first,
    farthest from its prediction first. `by_config`: one configuration (model, minibatch) after another,
    its baselines before its Harmony runs, so that a call cut short leaves whole side-by-side sets."""
    out = []
    for rec in sorted(Path(results, "runs").glob("*/*/*.jsonl")):
        if rec.name.count(".") > 1:                     # <record>.u<u>.jsonl: a search candidate
            continue
        s = summary_of(rec)
        if s is None or key in s or key in (s.get("env") or {}):
            continue
        if reason is not None and (s.get("env") or {}).get("run_tag") == reason:   # made by this re-run
            continue
        if records is not None and not re.search(records, str(rec)):
            continue
        system = s.get("system") or ""
        if (gpus is not None and s.get("gpus") != gpus) or (systems is not None and system not in systems) \
                or (modes is not None and s.get("mode") not in modes):
            continue
        t, pred = s.get("iter_time_s"), s.get("predicted_iter_time_s")
        off = abs(math.log(t / pred)) if t and pred else 0.0   # within a system: farthest from its prediction first
        order = (ORDER.get(system, 3), -off)
        if by_config:
            order = (s.get("model") or "", s.get("minibatch") or 0, -ORDER.get(system, 3), -off)
        out.append((order, str(rec), s))
    return sorted(out, key=lambda t: t[0])


def listing(targets: list[str], config: list[str], tmp: Path, n: int) -> Path:
    """One `snakemake -n -p --force` dry-run listing of the targets (their own jobs only, re-run)."""
    path = tmp / f"{n:03d}.txt"
    with open(path, "w") as f:
        subprocess.run(["snakemake", "-n", "-p", "--nolock", "--force", *targets, "--config", *config],
                       stdout=f, stderr=subprocess.DEVNULL, check=True)
    return path


def rewrite_joblist(lines: list[str], stale: list[tuple[tuple, str, dict]], results: str, key: str,
                    reason: str) -> tuple[str, int]:
    """The job list (`harmony.workflow joblist` lines of the forced stale jobs) with every job run through
    `rerun`, in the stale records' priority order; and how many records it re-runs."""
    records = {rec for _, rec, _ in stale}
    first = next(i for i, ln in enumerate(lines) if ln.startswith(("job ", "mkdir -p ")))
    out = lines[:first]
    out[1:1] = [f"# Then rewritten by experiments/device/rerun-stale.py: {len(stale)} records under {results}/runs/ "
                f"without {key}, each moved to superseded/{reason}/ just before it runs again."]
    out.append(RERUN % {"sup": f"{results}/superseded/{reason}", "key": key, "results": results, "reason": reason})
    blocks: dict[str, list[str]] = {}        # record -> its job's lines (mkdir -p, job), put in priority order
    pending: list[str] = []
    tail: list[str] = []
    for ln in lines[first:]:
        if ln.startswith("mkdir -p "):
            pending.append(ln)
        elif ln.startswith("job "):
            rec = next((o for o in shlex.split(ln)[3:] if o in records), None)
            if rec is None:
                raise SystemExit(f"a forced job that makes no stale record (an upstream job?): {ln[:200]}")
            blocks[rec], pending = pending + [f"rerun {shlex.quote(rec)} " + ln[len("job "):]], []
        else:
            tail.append(ln)
    n = len(blocks)
    for _, rec, _ in stale:
        out += blocks.get(rec, [])
    out += tail
    return "\n".join(out) + "\n", n


def prune_moved(results: str, key: str, reason: str) -> list[Path]:
    """After a re-run's tarball is unpacked here: delete RESULTS/<path> for each file the device moved to
    RESULTS/superseded/REASON/<path> whose copy here is still that moved file, byte for byte, and lacks
    `key` (tar adds files, it cannot delete the ones the device moved). A record the device ran again
    differs from the moved one and stays, even when it lacks the key too (a side-by-side re-run's key is
    one no record has: the fifty-second session's first prune, which tested only the key, deleted the
    call's new records). Returns the deleted."""
    sup, gone = Path(results) / "superseded" / reason, []
    for moved in sorted(sup.rglob("*.jsonl")):
        here = Path(results) / moved.relative_to(sup)
        if here.is_file() and here.read_bytes() == moved.read_bytes() and f'"{key}"' not in here.read_text():
            here.unlink()
            gone.append(here)
    return gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results folder, e.g. results/paper/2xH200")
    ap.add_argument("--config", nargs="+",
                    help="the grids' Snakemake config, e.g. scale=paper hardware=2xH200 gpus_present=2 iters=4")
    ap.add_argument("--prune-moved", action="store_true",
                    help="after unpacking a re-run's tarball: delete the stale copies here of the records the "
                         "device moved to superseded/REASON/ (no job list is written)")
    ap.add_argument("--key", default="omp_wait_policy",
                    help="summary or env key a fresh record has (default omp_wait_policy, an env key; "
                         "load_buffers marks runs with docs/performance.md entry 22's update order)")
    ap.add_argument("--reason", default="omp-spin", help="superseded/REASON/ folder name (default omp-spin)")
    ap.add_argument("--gpus", type=int, default=None, help="only records of this many GPUs")
    ap.add_argument("--systems", default=None, help="comma list of systems (default: all)")
    ap.add_argument("--modes", default=None, help="comma list of modes, e.g. vDP (default: all)")
    ap.add_argument("--records", default=None, metavar="REGEX",
                    help="only records whose path matches REGEX, e.g. 'gpt2-xl/N2-D(16|64)-' (with a --key no "
                         "record has, this re-runs chosen records side by side in one call)")
    ap.add_argument("--order", choices=("priority", "config"), default="priority",
                    help="priority (default): Harmony first, farthest from its prediction first; config: one "
                         "configuration after another, its baselines first, then its Harmony runs")
    ap.add_argument("-o", "--output")
    a = ap.parse_args(argv)
    results = a.results.rstrip("/")
    if a.prune_moved:
        for path in prune_moved(results, a.key, a.reason):
            print(f"deleted {path} (moved to superseded/{a.reason}/ on the device)", file=sys.stderr)
        return 0
    if not a.config or not a.output:
        ap.error("--config and -o are required to write a job list")
    systems = set(a.systems.split(",")) if a.systems else None
    stale = stale_records(results, a.key, a.gpus, systems, set(a.modes.split(",")) if a.modes else None,
                          a.records, a.order == "config", a.reason)
    if not stale:
        print(f"no stale records under {results}/runs/", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        listings, harmony = [], [rec for _, rec, s in stale if s.get("system", "").startswith("harmony")]
        if harmony:
            listings.append(listing(harmony, a.config, Path(tmp), 0))
        for i, (_, rec, s) in enumerate(stale):
            if not s.get("system", "").startswith("harmony"):
                u = s.get("ubatch")
                listings.append(listing([rec], a.config + ([f"baseline_ubatch={u}"] if u else []), Path(tmp), i + 1))
        raw = Path(tmp) / "joblist.sh"
        subprocess.run([sys.executable, "-m", "harmony.workflow", "joblist", *map(str, listings),
                        "--skip-rules", "figure", "-o", str(raw)], check=True)
        lines = raw.read_text().splitlines()
    text, n = rewrite_joblist(lines, stale, results, a.key, a.reason)
    Path(a.output).write_text(text)
    print(f"wrote {a.output}: {n} of {len(stale)} stale records", file=sys.stderr)
    return 0 if n == len(stale) else 1


if __name__ == "__main__":
    sys.exit(main())
