"""`harmony table1 --profiles DIR -o table1.csv`: the paper's Table 1, the search's own cost.

For bert96, gpt2-xl, vgg416 and resnet1026 at D = 64, vPP, N = 4, caps 9e9 bytes (BERT96, GPT2-XL) and
10 GiB (VGG416, ResNet1026): search time, candidate count, the chosen configuration, and the DP packing's
best simulated time against the best heuristic packing's. Profiles are looked up in DIR as
<model>/profile.json (+ <model>/model.json), or <model>.profile.json (+ <model>.model.json).
`--analytic` uses harmony.schedule.synthetic's ANALYTIC model records and profiles instead (for testing and
timing the search on a machine without the real profiles); every row says which it used.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

TABLE1 = [("bert96", 9e9), ("gpt2-xl", 9e9), ("vgg416", 10 * 2**30), ("resnet1026", 10 * 2**30)]


def add_arguments(p):
    p.add_argument("--profiles", default=None, help="folder with the four models' profiles")
    p.add_argument("--analytic", action="store_true", help="use ANALYTIC profiles (not measurements)")
    p.add_argument("--calibration", default=None, help="calibration.json or analytic:paper (default: "
                   "calibration.json in --profiles, else analytic:paper)")
    p.add_argument("--host-link", choices=["shared", "per-gpu"], default=None)
    p.add_argument("--minibatch", type=int, default=64)
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--models", default=None, help="comma-separated subset")
    p.add_argument("-o", "--output", required=True, help="table1.csv")
    p.add_argument("--candidates-dir", default=None, help="also write <model>.search.csv here")


def _find(profiles: Path, name: str):
    for prof, model in ((profiles / name / "profile.json", profiles / name / "model.json"),
                        (profiles / f"{name}.profile.json", profiles / f"{name}.model.json")):
        if prof.exists():
            return prof, model if model.exists() else None
    raise FileNotFoundError(f"no profile for {name} in {profiles} (expected {name}/profile.json or "
                            f"{name}.profile.json); or pass --analytic for analytic ones")


def packer_names(label: str) -> list[str]:
    """The packers a candidate's packing came from, without the search's tags: `greedy-reverse+dp+budget0.9+
    split-bottom` -> [greedy-reverse, dp]. The tags (budget0.9, split-bottom, send-room) say what the search
    did to the packing, not which packer made it; counted as packers, they made every tagged DP plan a
    "heuristic" one."""
    from harmony.schedule.packing import PACKERS_BWD, PACKERS_FWD
    known = set(PACKERS_BWD) | set(PACKERS_FWD)
    return [n for n in label.split("+") if n in known]


def dp_vs_heuristics(cands) -> tuple[float | None, float | None]:
    """The best simulated time of the plans whose backward and forward packings dp made, and of those whose
    backward and forward packings a heuristic made (the same packing from both counts for both; a plan that
    mixes dp with a heuristic counts for neither)."""
    def best(pred):
        ts = [c.iter_time_s for c in cands
              if c.feasible and pred(packer_names(c.bwd_packer), packer_names(c.fwd_packer))]
        return min(ts) if ts else None
    dp = best(lambda b, f: "dp" in b and "dp" in f)
    heur = best(lambda b, f: any(n != "dp" for n in b) and any(n != "dp" for n in f))
    return dp, heur


def main(args) -> int:
    from harmony.jsonio import read_json
    from harmony.profile_data import Profile
    from harmony.schedule.cli import load_calibration, model_sizes, write_candidates
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.search import search
    from harmony.schedule.simulate import SimParams
    from harmony.schedule.synthetic import analytic_model, synthetic_profile

    if not args.analytic and not args.profiles:
        raise ValueError("pass --profiles DIR (measured profiles) or --analytic")
    pdir = Path(args.profiles) if args.profiles else Path(".")
    cal_arg = args.calibration
    if cal_arg is None:
        cal_arg = str(pdir / "calibration.json") if (pdir / "calibration.json").exists() else "analytic:paper"
    cal, cal_src = load_calibration(cal_arg, pdir / "x")
    wanted = set(args.models.split(",")) if args.models else None
    rows = []
    for name, cap in TABLE1:
        if wanted and name not in wanted:
            continue
        if args.analytic:
            model = analytic_model(name)
            prof = Profile(synthetic_profile(model, cal))
            source = "analytic"
        else:
            ppath, mpath = _find(pdir, name)
            prof = Profile.load(ppath)
            model = read_json(mpath, kind="model") if mpath else {"optimizer": None}
            source = "analytic" if prof.raw.get("analytic") else "measured"
        opt = (model.get("optimizer") or {}).get("kind", "adamw")
        params = SimParams.from_calibration(cal, host_link=args.host_link, optimizer=opt)
        costs = LayerCosts(prof)
        from harmony.decompose import microbatch_sensitive
        equal = bool(model.get("model")) and microbatch_sensitive(model)
        res = search(LayerCosts(prof, sizes=model_sizes(model)), params, minibatch=args.minibatch, gpus=args.gpus,
                     mode="vPP", cap=cap, equal_ubatch=equal)
        c, b = res.best.config, res.best
        dp, heur = dp_vs_heuristics(res.candidates)
        rows.append({"model": name, "profile_source": source, "calibration": cal_src, "minibatch": args.minibatch,
                     "gpus": args.gpus, "mode": "vPP", "cap_bytes": int(cap), "num_vlayers": costs.L,
                     "search_time_s": round(res.search_time_s, 4),
                     "search_cpu_s": round(res.space["search_cpu_s"], 4), "candidates": len(res.candidates),
                     "ubatch_fwd": c.ubatch_fwd, "ubatch_bwd": c.ubatch_bwd, "num_bwd_packs": len(c.bwd_packs),
                     "num_fwd_packs": len(c.fwd_packs), "bwd_packer": b.bwd_packer, "fwd_packer": b.fwd_packer,
                     "iter_time_s": b.iter_time_s, "dp_best_s": dp, "heuristic_best_s": heur,
                     "dp_over_heuristic": (dp / heur) if (dp and heur) else None})
        if args.candidates_dir:
            write_candidates(Path(args.candidates_dir) / f"{name}.search.csv", res.candidates)
        print(f"{name} [{source}]: {len(res.candidates)} candidates, {res.search_time_s:.3f} s wall "
              f"({res.space['search_cpu_s']:.3f} s CPU), u_fwd="
              f"{c.ubatch_fwd} u_bwd={c.ubatch_bwd} packs {len(c.bwd_packs)}/{len(c.fwd_packs)}, "
              f"{b.iter_time_s:.3f} s/iter (predicted); dp/heuristic = "
              f"{rows[-1]['dp_over_heuristic']}", file=sys.stderr)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0
