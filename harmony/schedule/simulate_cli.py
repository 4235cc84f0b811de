"""`harmony simulate schedule.json --profile profile.json`: predicted iteration time, bytes per kind,
peak memory per GPU and a trace, for any schedule.json (Harmony's or a swap baseline's), under the memory
the search planned with (harmony.schedule.io.planned_cap) and the receive mode it chose
(harmony.schedule.io.planned_receive_mode)."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def add_arguments(p):
    p.add_argument("schedule", help="schedule.json")
    p.add_argument("--profile", required=True, help="profile.json of the schedule's model")
    p.add_argument("--calibration", default=None, help="calibration.json (or analytic:paper|analytic:h100); "
                   "default: calibration.json next to the profile")
    p.add_argument("--host-link", choices=["shared", "per-gpu"], default=None)
    p.add_argument("--iterations", type=int, default=3, help="iterations to simulate (steady state: 2..K)")
    p.add_argument("--no-mb-pipeline", action="store_true", help="inputs arrive whole, not per microbatch")
    p.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace here")
    p.add_argument("-o", "--output", default=None, help="write the prediction JSON here (default: stdout)")


def main(args) -> int:
    from harmony.jsonio import write_json
    from harmony.profile_data import Profile
    from harmony.schedule.cli import load_calibration, model_sizes, prediction_record
    from harmony.schedule.io import load_schedule, planned_cap, planned_compute_scale, planned_receive_mode
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import SimParams, simulate
    from harmony.schedule.trace import save_trace

    rec, graph = load_schedule(args.schedule)
    ppath = Path(args.profile)
    prof = Profile.load(ppath, compute_scale=planned_compute_scale(rec))
    if prof.num_layers != graph.config.num_layers:
        raise ValueError(f"{args.profile} has {prof.num_layers} vLayers, the schedule {graph.config.num_layers}")
    cal, _ = load_calibration(args.calibration, ppath)
    opt = (rec["model"].get("optimizer") or {}).get("kind", "adamw")
    params = SimParams.from_calibration(cal, host_link=args.host_link, optimizer=opt,
                                        iterations=max(1, args.iterations), mb_pipeline=not args.no_mb_pipeline,
                                        p2p_receive=planned_receive_mode(rec))
    costs = LayerCosts(prof, sizes=model_sizes(rec["model"]))
    sim = simulate(graph, costs, params, planned_cap(rec), record=bool(args.trace))
    pred = prediction_record(graph, costs, params, cal, sim, rec["model"], rec.get("precision", "fp32"))
    if args.trace:
        save_trace(args.trace, sim, {"schedule": args.schedule})
    if args.output:
        write_json(args.output, {"artifact": "prediction", "schema_version": 1, "schedule": args.schedule,
                                 "prediction": pred})
    else:
        json.dump(pred, sys.stdout, indent=1)
        print()
    return 0 if sim.feasible else 1
