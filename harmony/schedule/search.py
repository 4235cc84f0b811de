"""Search: enumerate (mode, N', u_bwd, backward packing, u_fwd >= u_bwd, forward packing), compose each
candidate's task graph, simulate it, rank by simulated iteration time. Deterministic: candidates are
enumerated in a fixed order, and ties go to the earlier one.

Microbatch sizes: the profile's sweep sizes plus the divisors of the rank's sample count, up to that count
and to the largest profiled size (no extrapolation of memory beyond it). A non-dividing u is allowed (the
graph runs a remainder microbatch).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from harmony.schedule.memory import LayerCosts
from harmony.schedule.packing import (PACKERS_BWD, PACKERS_FWD, PackContext, PackingError, bwd_packings,
                                      check_single_layers, fwd_packings, objective, uniform_packs)
from harmony.schedule.simulate import SimParams, SimResult, simulate
from harmony.schedule.tasks import ScheduleConfig, ScheduleError, build_task_graph


@dataclass
class Candidate:
    index: int
    config: ScheduleConfig
    bwd_packer: str
    fwd_packer: str
    objective_s: float            # packing objective J (bwd + fwd pass)
    iter_time_s: float            # simulated
    feasible: bool
    peak_bytes: int

    def row(self) -> dict:
        c = self.config
        return {"index": self.index, "mode": c.mode, "gpus": c.gpus, "minibatch": c.minibatch,
                "ubatch_fwd": c.ubatch_fwd, "ubatch_bwd": c.ubatch_bwd, "bwd_packer": self.bwd_packer,
                "fwd_packer": self.fwd_packer, "num_bwd_packs": len(c.bwd_packs),
                "num_fwd_packs": len(c.fwd_packs),
                "bwd_pack_sizes": " ".join(str(e - s) for s, e in c.bwd_packs),
                "fwd_pack_sizes": " ".join(str(e - s) for s, e in c.fwd_packs),
                "objective_s": round(self.objective_s, 9), "iter_time_s": round(self.iter_time_s, 9),
                "feasible": self.feasible, "peak_bytes": self.peak_bytes}


@dataclass
class SearchResult:
    best: Candidate
    best_sim: SimResult
    candidates: list[Candidate]
    search_time_s: float
    space: dict = field(default_factory=dict)

    def summary(self) -> dict:
        c = self.best.config
        return {"candidates": len(self.candidates), "search_time_s": self.search_time_s,
                "search_cpu_s": self.space.get("search_cpu_s"),
                "chosen": {"index": self.best.index, "mode": c.mode, "gpus": c.gpus, "ubatch_fwd": c.ubatch_fwd,
                           "ubatch_bwd": c.ubatch_bwd, "bwd_packer": self.best.bwd_packer,
                           "fwd_packer": self.best.fwd_packer, "num_bwd_packs": len(c.bwd_packs),
                           "num_fwd_packs": len(c.fwd_packs), "iter_time_s": self.best.iter_time_s},
                "space": self.space}


def ubatch_candidates(costs: LayerCosts, samples: int) -> list[int]:
    sweep = costs.profile.ubatch_sizes
    top = min(samples, max(sweep))
    divs = {d for d in range(1, samples + 1) if samples % d == 0}
    return sorted(u for u in set(sweep) | divs if 1 <= u <= top)


def search(costs: LayerCosts, params: SimParams, *, minibatch: int, gpus: int, mode: str = "vPP",
           cap: float | None = None, ubatch_fwd: int | None = None, ubatch_bwd: int | None = None,
           pack_size: int | None = None, bwd_packers=PACKERS_BWD, fwd_packers=PACKERS_FWD,
           progress=None, equal_ubatch: bool = False) -> SearchResult:
    """mode: vPP | vDP | auto (then modes and N' = 1..gpus are searched too). equal_ubatch: only
    u_fwd == u_bwd (models with dropout or BatchNorm, whose recompute must see the forward's microbatches)."""
    t0, c0 = time.perf_counter(), time.process_time()
    if minibatch < gpus:
        raise ScheduleError(f"minibatch D={minibatch} is smaller than the number of GPUs N={gpus}: "
                            f"every GPU needs at least one sample; raise D or lower N")
    if mode not in ("vPP", "vDP", "auto"):
        raise ScheduleError(f"mode {mode!r}: use vPP, vDP or auto")
    if ubatch_fwd is not None and ubatch_bwd is not None and ubatch_fwd < ubatch_bwd:
        raise ScheduleError(f"--ubatch-fwd {ubatch_fwd} < --ubatch-bwd {ubatch_bwd}: u_fwd must be >= u_bwd")
    if equal_ubatch and ubatch_fwd and ubatch_bwd and ubatch_fwd != ubatch_bwd:
        raise ScheduleError(f"--ubatch-fwd {ubatch_fwd} != --ubatch-bwd {ubatch_bwd}, but the model has dropout or "
                            f"BatchNorm: recompute must replay the forward's microbatches; use equal sizes or "
                            f"decompose with --set dropout=0")
    L = costs.L
    if mode == "auto":
        setups = [("vPP", n) for n in range(1, gpus + 1)] + [("vDP", n) for n in range(2, gpus + 1)]
    else:
        setups = [(mode, gpus)]
    cands: list[Candidate] = []
    best: Candidate | None = None
    errors: list[str] = []
    space = {"setups": [f"{m}-{n}" for m, n in setups], "ubatch": {}}
    for m, n_gpu in setups:
        samples = minibatch if m == "vPP" else -(-minibatch // n_gpu)
        us = ubatch_candidates(costs, samples)
        space["ubatch"][f"{m}-{n_gpu}"] = us
        ctx_kw = dict(n=samples, cap=cap, mode=m, gpus=n_gpu, h2d_Bps=params.h2d_Bps * params.duplex_factor,
                      d2h_Bps=params.d2h_Bps * params.duplex_factor, shared_link=params.shared_link,
                      task_overhead_s=params.task_overhead_s)
        ub_list = [ubatch_bwd] if ubatch_bwd else us
        for ub in ub_list:
            bctx = PackContext(kind="BWD", u=ub, **ctx_kw)
            if pack_size:
                bwds = {f"fixed-P{pack_size}": uniform_packs(L, pack_size)}
            else:
                bwds = _dedupe(bwd_packings(costs, bctx, bwd_packers))
                if not bwds:
                    try:
                        check_single_layers(costs, bctx)
                    except PackingError as e:
                        errors.append(str(e))
                    else:
                        errors.append(f"no backward packing fits at u_bwd={ub}")
                    continue
            uf_list = [ubatch_fwd] if ubatch_fwd else [ub] if equal_ubatch else [u for u in us if u >= ub]
            for bname, bpacks in bwds.items():
                jb = objective(costs, bctx, bpacks)
                for uf in uf_list:
                    fctx = PackContext(kind="FWD", u=uf, **ctx_kw)
                    if pack_size:
                        fwds = {"reuse": tuple(bpacks[:-1])}
                    else:
                        fwds = _dedupe(fwd_packings(costs, fctx, bpacks, fwd_packers))
                    for fname, fpacks in fwds.items():
                        cfg = ScheduleConfig(mode=m, gpus=n_gpu, minibatch=minibatch, ubatch_fwd=uf,
                                             ubatch_bwd=ub, bwd_packs=bpacks, fwd_packs=fpacks)
                        g = build_task_graph(cfg, L)
                        sim = simulate(g, costs, params, cap)
                        c = Candidate(len(cands), cfg, bname, fname, jb + objective(costs, fctx, fpacks),
                                      sim.iter_time_s, sim.feasible, max(sim.task_peak_bytes))
                        cands.append(c)
                        if c.feasible and (best is None or c.iter_time_s < best.iter_time_s):
                            best = c
                        if progress:
                            progress(c)
    if best is None:
        why = "; ".join(dict.fromkeys(errors)) or "every candidate exceeds the GPU memory cap"
        raise ScheduleError(f"no schedule fits: {why}")
    g = build_task_graph(best.config, L)
    best_sim = simulate(g, costs, params, cap, record=True)
    space["search_cpu_s"] = time.process_time() - c0   # CPU time: robust to a loaded machine
    return SearchResult(best, best_sim, cands, time.perf_counter() - t0, space)


def _dedupe(packings: dict) -> dict:
    """Keep the first name of each distinct packing (the name lists every packer that found it)."""
    seen: dict = {}
    for name, packs in packings.items():
        if packs in seen:
            seen[packs].append(name)
        else:
            seen[packs] = [name]
    return {"+".join(names): packs for packs, names in seen.items()}
