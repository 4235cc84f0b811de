"""The simulator's view of a swap baseline's microbatch candidates, before any of them runs.

For each candidate u: the baseline's own task graph (`baselines.swap_dp` / `baselines.swap_pp`, one vLayer per
pack), Harmony's simulator on it with the machine's profile and calibration (the all-reduce inline, as the
runtime runs it), its GPU peak against the cap, and its host arena (what `harmony run` pins, plus the
processes' reserve) against the host's memory. `harmony baseline swap-pp ... --ubatch 1,2,...
--ubatch-start predicted` starts its climb at the fastest candidate that fits: a climb assumes one peak, and
swap-pp's predicted times over u can have several (VGG416 D = 16 on the H100's profile: 1.86 s at u = 2,
3.16 at u = 4, 1.69 at u = 8), while the H100's record at ResNet1026 D = 256 ran u = 32 alone, 17.9 s an
iteration, where u = 256 ran 3.2 s (docs/performance.md entry 88). The climb still measures; the prediction
only picks where it begins. `experiments/predict_swap_search.py` prints the same table for a results folder.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harmony.schedule.host_memory import run_host_need

GIB = 2**30
SYSTEMS = ("swap-dp", "swap-pp")       # the baselines that run a Harmony task graph, so can be simulated


@dataclass(frozen=True)
class Candidate:
    ubatch: int
    iter_time_s: float | None      # None when the baseline's own check refuses the u (no task fits the cap)
    peak_bytes: int | None         # the simulated per-GPU peak
    host_bytes: int | None         # host arena + the processes' reserve
    why_not: str | None            # None when it fits; else what the run would hit

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def sim_params(calibration: dict, model_json: dict, p2p_receive: str | None = None):
    """Harmony's model as the runtime runs a swap baseline's graph: the all-reduce inline, the receive mode
    the run uses (a swap baseline's schedule plans none, so the runtime's default)."""
    from harmony.schedule.simulate import SimParams
    from harmony.schedule.tasks import DEFAULT_RECEIVE_MODE
    params = SimParams.from_calibration(calibration, optimizer=(model_json.get("optimizer") or {}).get("kind", "adamw"))
    return dataclasses.replace(params, allreduce="inline", p2p_receive=p2p_receive or DEFAULT_RECEIVE_MODE)


def host_need_of(s) -> int | None:
    """What a run of these Settings (swap-dp or swap-pp) would ask of host memory (`run_host_need` of the graph it
    trains), worked out on the CPU in seconds, before any set-up; None for another system, or a u that the
    baseline's own check refuses for another reason. The microbatch search asks this of the next smaller u
    when a larger one was infeasible for host memory (baselines/cli.py `no_lower`): whether a smaller u
    needs less depends on the graph. swap-dp stashes one microbatch per rank, so its arena shrinks with u;
    swap-pp's can shrink by far more, since at a small u a whole stage fits the cap and stashes only its input,
    where at a larger u it swaps layer by layer and stashes every layer's (VGG416 D = 256 at N = 2: 12.5 GiB
    at u <= 8, 491 GiB at u = 16; docs/performance.md entry 110)."""
    if s.system not in SYSTEMS:
        return None
    from baselines.cli import system_module
    from baselines.common import Infeasible, load_model
    from baselines.swap_dp import _load_aux
    from harmony.schedule.tasks import build_task_graph
    _, model_json = load_model(s.model, s.overrides)
    profile, _ = _load_aux(s)
    try:
        cfg = system_module(s.system).config_for(s, model_json, profile)
    except Infeasible:
        return None
    return run_host_need(build_task_graph(cfg, model_json["num_vlayers"]), model_json)


def config_builder(system: str):
    """The function that lays out `system`'s graph at one u (one of SYSTEMS)."""
    from baselines.swap_dp import swap_dp_config
    from baselines.swap_pp import swap_pp_config
    return dict(zip(SYSTEMS, (swap_dp_config, swap_pp_config)))[system]


def candidates(system: str, model_json: dict, minibatch: int, gpus: int, ubatches: list[int], *, cap: int | None,
               profile: dict, calibration: dict, host_bytes: int | None,
               issue_in_pack: bool = False, sim_overrides: dict | None = None) -> list[Candidate]:
    """Each u of the search, simulated (ascending u). issue_in_pack: LayerCosts' (off by default);
    sim_overrides: SimParams fields to set over the calibration's (a what-if, such as the host charges of
    docs/performance.md entry 97)."""
    from baselines.common import Infeasible
    from harmony.schedule.memory import LayerCosts
    from harmony.schedule.simulate import simulate
    from harmony.schedule.tasks import build_task_graph
    build, costs, params = config_builder(system), LayerCosts(profile, issue_in_pack=issue_in_pack), sim_params(calibration, model_json)
    if sim_overrides:
        params = dataclasses.replace(params, **sim_overrides)
    out = []
    for u in sorted(ubatches):
        try:
            graph = build_task_graph(build(model_json, minibatch, gpus, u, cap=cap, profile=profile),
                                     model_json["num_vlayers"])
        except Infeasible as e:
            out.append(Candidate(u, None, None, None, f"infeasible: {e}"))
            continue
        sim = simulate(graph, costs, params)
        peak, need = max(sim.peak_memory_bytes), run_host_need(graph, model_json)
        why = None
        if host_bytes and need > host_bytes:
            why = f"host arena {need / GIB:.2f} GiB over the host's {host_bytes / GIB:.2f}"
        elif cap is not None and peak > cap:
            why = f"peak {peak / GIB:.2f} GiB over the cap"
        out.append(Candidate(u, sim.iter_time_s, peak, need, why))
    return out


def fastest_fitting(cands: list[Candidate]) -> Candidate | None:
    """The candidate predicted fastest among those that fit the cap and the host (None when none does)."""
    fits = [c for c in cands if c.why_not is None and c.iter_time_s is not None]
    return min(fits, key=lambda c: (c.iter_time_s, c.ubatch)) if fits else None
