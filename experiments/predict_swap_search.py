"""What Harmony's simulator predicts for each candidate of a swap baseline's microbatch search, written before
the search runs (docs/performance.md entry 81): the baseline's own task graph (baselines.swap_dp / swap_pp,
one vLayer per pack) at every u the workflow's search tries (powers of two dividing D/N:
`harmony.workflow.baseline_ubatches`), simulated with the folder's profile and calibration
(the runtime's host work per task included, entry 78; the all-reduce inline, as the runtime runs it), beside
Harmony's best measured run of the same point, whose record gives the cap the point is planned under (the
superseded record, so marked, where the run was moved aside to be made again: device README item 47). A u
whose task cannot fit the cap prints `infeasible`; one whose simulated peak is over the cap prints that
peak, and the line then also gives Harmony's ratio over the best candidate under the cap (docs/performance.md
entry 83: the baseline's own check is a lower bound, so its search tries such a u; on the H100's profile
the peak called all five GPT2-XL points items 49-52 ran, but an older profile can over-count, as 2x
H200's does by 3.4 GiB at GPT2-XL's loss pack at u = 16). A u whose host arena (what `harmony run` pins:
weights, gradients, optimizer state and the activation stash, plus the processes' reserve) is over the
folder's host memory (env.json) prints that need, and is left out of the best under the cap too: the run
refuses it as `infeasible` (item 57: swap-pp at VGG416 D = 64 on the H100 needs 129.8 GiB at every u from 4,
where its stages swap layer by layer and stash every vLayer's input, but 10.5 GiB at u <= 2, where each
stage fits the cap whole and stashes only its input, docs/performance.md entry 110; swap-dp's stash grows
with u).

usage: PYTHONPATH=.:experiments python experiments/predict_swap_search.py RESULTS swap-dp|swap-pp N MODEL:D [MODEL:D ...]
       [--calibration FILE] [--measured] [--cap BYTES] [--profiles DIR] [--issue-in-pack]
       [--host-tensors VLAYER_US PARAM_US]
  e.g. results/paper/2xH200 swap-dp 2 gpt2-xl:16 bert96:256
  --calibration FILE simulates with another calibration than RESULTS/calibration.json (docs/performance.md
  entry 92: 2x H200's with the calls' measured `duplex_pinned_total_Bps`,
  results/paper/2xH200/calibration-duplex-total.json)
  --measured sets each candidate the search ran beside its prediction (its record under RESULTS/runs: the
  candidate's `.uU.jsonl`, or the search's final record at that u), and ends with how close the model is over
  them: the median |measured/predicted - 1| and how many within 10% (entry 92)
  --profiles DIR simulates with DIR/MODEL.json instead of the folder's profile (experiments/merge_issue_factors.py
  writes the folder's profiles with a newer measurement merged in: docs/performance.md entry 96);
  --issue-in-pack charges a BWD pack's host issue from that measurement (LayerCosts' issue_in_pack)
  --host-tensors VLAYER_US PARAM_US charges the runtime's host work per vLayer a task holds and per parameter
  tensor of them (docs/performance.md entry 97; needs --profiles from merge_issue_factors.py --param-tensors)
  --cap BYTES (e.g. 11GiB) plans a point that has no Harmony run under this cap, and prints its candidates
  alone (a point off figure 10's grid, predicted before any run of it: docs/performance.md entry 95)
  --untried-faster F (with --measured) names each candidate the search did not run, that fits, and is predicted
  under F times the search's best measured time (e.g. 0.8): where a climb may have stopped at a local peak
  (docs/performance.md entry 113: swap-pp ResNet1026 D = 1024 on 2x H200 stopped at u = 16, with u = 128 and
  256 untried); the last line counts the points so named
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from baselines.predicted_start import SYSTEMS, candidates, fastest_fitting
from harmony.jsonio import read_jsonl
from harmony.schedule.simulate import host_tensor_charge
from harmony.units import parse_bytes
from harmony.workflow import baseline_ubatches
from runtime_gap import harmony_runs

# where make-jobs-runtime-rerun.sh moves a point's records until they are made again on one host
SUPERSEDED = Path("superseded/pre-runtime-rerun")


def measured_candidate(root: Path, system: str, model: str, n: int, d: int, u: int) -> float | None:
    """The seconds per iteration the search's record of this candidate measured (status ok), or None: its
    own `.uU.jsonl`, else the search's final record when that ran at u."""
    base = root / "runs" / system / model / f"N{n}-D{d}-best"
    for path in (base.with_name(base.name + f".u{u}.jsonl"), base.with_name(base.name + ".jsonl")):
        if path.exists():
            s = read_jsonl(path)[-1]
            if s.get("status") == "ok" and s.get("iter_time_s") and s.get("ubatch") == u:
                return s["iter_time_s"]
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("system", choices=SYSTEMS)
    ap.add_argument("n", type=int)
    ap.add_argument("point", nargs="+", help="MODEL:D")
    ap.add_argument("--calibration", type=Path, help="simulate with this calibration, not ROOT/calibration.json")
    ap.add_argument("--measured", action="store_true", help="each candidate's record beside its prediction")
    ap.add_argument("--untried-faster", type=float, metavar="F",
                    help="with --measured: name the untried candidates that fit and are predicted under F x the "
                         "search's best measured time (a climb that may have stopped at a local peak)")
    ap.add_argument("--cap", type=parse_bytes, help="the GPU memory cap for a point with no Harmony run (e.g. 11GiB)")
    ap.add_argument("--profiles", type=Path, help="simulate with MODEL.json from this folder, not ROOT/profiles")
    ap.add_argument("--issue-in-pack", action="store_true",
                    help="charge BWD packs from the profile's in-pack issue measurement (off by default; entry 96)")
    ap.add_argument("--host-tensors", nargs=2, type=float, metavar=("VLAYER_US", "PARAM_US"), default=None,
                    help="charge this much host work per vLayer a task holds and per parameter tensor of them, "
                         "once a task (microseconds; entry 97; the profiles need param_tensors: "
                         "experiments/merge_issue_factors.py --param-tensors)")
    args = ap.parse_args(argv)
    root, system, n, cal_file, measured = args.root, args.system, args.n, args.calibration, args.measured
    if args.untried_faster is not None and not measured:
        print("--untried-faster compares with the search's measured candidates: add --measured", file=sys.stderr)
        return 2
    points = [p.split(":") for p in args.point]
    bad = [":".join(p) for p in points if len(p) != 2 or not p[1].isdigit()]
    if bad:
        print(f"{', '.join(bad)}: give each point as MODEL:D, the model and its minibatch (e.g. gpt2-xl:16)",
              file=sys.stderr)
        return 2
    calibration = json.loads((cal_file or root / "calibration.json").read_text())
    env = root / "env.json"
    host = json.loads(env.read_text()).get("host_memory_bytes") if env.exists() else None
    print(f"# {root}, {system} at N = {n}: simulated s/iteration per microbatch candidate; Harmony's best measured"
          + (f" (calibration {cal_file})" if cal_file else ""))
    misses: list[float] = []
    flagged: list[str] = []          # points with an untried candidate under --untried-faster
    for name, d in ((p[0], int(p[1])) for p in points):
        model = json.loads((root / "models" / f"{name}.json").read_text())
        profile = json.loads(((args.profiles or root / "profiles") / f"{name}.json").read_text())
        runs, which = harmony_runs(root, name, n, d), "Harmony"
        if not runs:       # moved aside to be made again beside the baselines (device README item 47)
            runs, which = harmony_runs(root / SUPERSEDED, name, n, d), "Harmony (superseded record)"
        if not runs and args.cap is None:       # the cap the point was planned under comes from them
            print(f"{name} D={d}: no Harmony run at N = {n} under {root}/runs: nothing to compare with "
                  f"(--cap plans it under a cap of your choosing)")
            continue
        cap = next(iter(runs.values())).get("gpu_memory_cap") if runs else args.cap
        h = min(r["iter_time_s"] for r in runs.values()) if runs else None
        # the baseline's own check is a lower bound and lets it try a u over the cap (an OOM is a record); the
        # simulated peak says whether it trains, as well as the profile's memory does (item 50: u = 32 at
        # GPT2-XL D = 64, 19.77 GiB predicted, out of memory under 11 GiB; but 2x H200's older profile puts the
        # loss pack at 13.16 GiB at u = 16, where 9.96 GiB was allocated)
        cands = candidates(system, model, d, n, baseline_ubatches(d, n), cap=cap, profile=profile,
                           calibration=calibration, host_bytes=host, issue_in_pack=args.issue_in_pack,
                           sim_overrides=host_tensor_charge(*args.host_tensors) if args.host_tensors else None)
        cells = [f"u={c.ubatch} infeasible" if c.iter_time_s is None
                 else f"u={c.ubatch} {c.iter_time_s:.3f}" + (f" ({c.why_not})" if c.why_not else "") for c in cands]
        if measured:
            ran: dict[int, float] = {}
            for i, c in enumerate(cands):
                m = measured_candidate(root, system, name, n, d, c.ubatch)
                if m is not None:
                    ran[c.ubatch] = m
                if m is not None and c.iter_time_s:
                    cells[i] += f" [measured {m:.3f}, {m / c.iter_time_s:.2f}x]"
                    misses.append(m / c.iter_time_s - 1)
            if args.untried_faster is not None and ran:
                u_best = min(ran, key=ran.get)
                under = [c for c in cands if c.ubatch not in ran and c.iter_time_s is not None and not c.why_not
                         and c.iter_time_s < args.untried_faster * ran[u_best]]
                if under:
                    flagged.append(f"{name}:{d}")
                    print(f"# {name} D={d}: untried " + ", ".join(f"u={c.ubatch} ({c.iter_time_s:.3f} s predicted)"
                                                                  for c in under)
                          + f" under {args.untried_faster:g}x the best measured, u={u_best} {ran[u_best]:.3f} s:"
                          " the search may have stopped at a local peak")
        best = min((c.iter_time_s for c in cands if c.iter_time_s is not None), default=None)
        fastest = fastest_fitting(cands)           # the candidate `--ubatch-start predicted` starts at
        best_fit = fastest.iter_time_s if fastest else None
        if h is None:
            fit = f"best that fits (GPU peak, host arena): u = {fastest.ubatch}" if fastest else "none fits"
            print(f"{name} D={d}: {'; '.join(cells)} | no Harmony run; {fit}")
            continue
        ratio = f", Harmony over the best candidate {best / h:.2f}x" if best else ""
        if best_fit is not None and best_fit != best:
            ratio += f", over the best that fits (GPU peak, host arena) {best_fit / h:.2f}x"
        print(f"{name} D={d}: {'; '.join(cells)} | {which} {h:.3f}{ratio}")
    if measured:
        if misses:
            print(f"# {len(misses)} candidates measured: median |measured/predicted - 1| "
                  f"{statistics.median(abs(x) for x in misses):.3f}, {sum(abs(x) <= 0.10 for x in misses)} within 10%")
        else:
            print("# no candidate of these points has a record")
    if args.untried_faster is not None:
        print(f"# {len(flagged)} point(s) with an untried candidate predicted under {args.untried_faster:g}x the "
              f"best measured" + (f": {', '.join(flagged)}" if flagged else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
