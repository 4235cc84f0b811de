"""Lower bounds on an iteration, for run records (runtime, baselines) and the schedule's prediction.

schedule_bound(graph, profile, calibration): max of
  compute_s     the busiest GPU's profiled compute: FWD at u_fwd + BWD (recompute + backward) at u_bwd, the
                larger of its kernels' seconds and its host's issue seconds (the host runs ahead across
                tasks: docs/performance.md entry 34)
  transfer_s    the busiest host link's bytes of THIS graph (count per task_transfers) at calibrated
                pinned bandwidths (H2D and D2H each; both together at the duplex rate, or at an N-th of
                all GPUs' duplex total where that is less); shared link: all
                GPUs' bytes on one link
  cpu_update_s  the optimizer steps (profiled opt_step_s, or parameters / calibrated CPU rate)
physical_roofline(model_json, graph, calibration, precision): max of
  flops_s       3 x forward FLOPs x D (forward + backward, no recompute) / (N x matmul rate)
  transfer_s    the unavoidable bytes: every weight in once and every gradient out once per iteration
  cpu_update_s  parameters / calibrated CPU optimizer rate
"""
from __future__ import annotations

from harmony.profile_data import Calibration, Profile
from harmony.schedule.memory import LayerCosts
from harmony.schedule.simulate import SimParams, upd_duration
from harmony.schedule.tasks import TaskGraph, layer_sizes_from_model, task_transfers


def _raw(cal):
    return cal.raw if isinstance(cal, Calibration) else cal


def schedule_bound(graph: TaskGraph, profile, calibration, host_link: str | None = None) -> dict:
    costs = profile if isinstance(profile, LayerCosts) else LayerCosts(profile if isinstance(profile, Profile)
                                                                       else Profile(profile))
    params = SimParams.from_calibration(calibration, host_link=host_link)
    N = graph.config.gpus
    sizes = costs.layer_sizes()
    dev = [0.0] * N
    iss = [0.0] * N
    h2d = [0] * N
    d2h = [0] * N
    p2p = 0
    cpu = 0.0
    for t in graph.tasks:
        if t.kind == "UPD":
            cpu += upd_duration(costs, params, t.pack, 1)   # a bound: all cores on it (workers may step at once)
            continue
        d, i = costs.task_device_issue(t.kind, t.pack[0], t.pack[1], t.ubatch, t.num_samples)[:2]
        dev[t.rank] += d
        iss[t.rank] += i
        for tr in task_transfers(graph, t, sizes):
            link = 0 if params.shared_link else t.rank
            if tr.kind in ("h2d_weights", "h2d_act"):
                h2d[link] += tr.nbytes
            elif tr.kind in ("d2h_grads", "d2h_act"):
                d2h[link] += tr.nbytes
            else:
                p2p = max(p2p, tr.nbytes)
    # both ways at once: one GPU's duplex, or its share of all GPUs' duplex total (SimParams.duplex_for)
    duplex = (params.h2d_Bps + params.d2h_Bps) * params.duplex_for(N)
    transfer = max(max(h2d[r] / params.h2d_Bps, d2h[r] / params.d2h_Bps, (h2d[r] + d2h[r]) / duplex)
                   for r in range(N))
    terms = {"compute_s": max(max(d, i) for d, i in zip(dev, iss)), "transfer_s": transfer, "cpu_update_s": cpu}
    return {"schedule_bound_s": max(terms.values()), "terms": terms}


def physical_roofline(model_json: dict, graph: TaskGraph, calibration, precision: str = "fp32",
                      host_link: str | None = None) -> dict:
    raw = _raw(calibration)
    N, D = graph.config.gpus, graph.config.minibatch
    flops = 3 * D * sum((v.get("flops_fwd_per_sample") or 0) for v in model_json["vlayers"])
    rate = raw["matmul_flops"][precision]
    sizes = layer_sizes_from_model(model_json)
    opt = (model_json.get("optimizer") or {}).get("kind", "adamw")
    params = SimParams.from_calibration(raw, host_link=host_link, optimizer=opt)
    links = 1 if params.shared_link else N
    w, g = sum(sizes.weight_bytes), sum(sizes.grad_bytes)
    transfer = max(w / (params.h2d_Bps * links), g / (params.d2h_Bps * links))
    nparams = model_json.get("total_params") or sum(v.get("params", 0) for v in model_json["vlayers"])
    terms = {"flops": flops, "flops_s": flops / (N * rate), "min_h2d_bytes": w, "min_d2h_bytes": g,
             "transfer_s": transfer, "cpu_update_s": nparams / params.opt_params_per_s,
             "precision": precision}
    return {"roofline_s": max(terms["flops_s"], terms["transfer_s"], terms["cpu_update_s"]), "terms": terms}
