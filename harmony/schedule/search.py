"""Search: enumerate (mode, N', u_bwd, backward packing, u_fwd >= u_bwd, forward packing), compose each
candidate's task graph, simulate it, rank by simulated iteration time. Deterministic: candidates are
enumerated in a fixed order, and ties go to the earlier one. The fastest are then refined at their bottom:
the bottom backward pack split in two at every point (`bottom_splits`), each split simulated as a candidate;
then the fastest of all cut further near its bottom, one cut more per round (`bottom_cut_points`).

A candidate is feasible when every task fits the GPU memory cap (the simulator) and, given a host memory
budget, its host arena fits the budget (harmony.schedule.host_memory: W + dW + K + every stash, the bytes
`harmony run` allocates and checks before it starts). Harmony stashes each FWD pack boundary's activation
for all D samples until its BWD, so the fastest schedule (many small packs) can need more host memory than
the machine has; a slower one with fewer stash points may fit.

Microbatch sizes: the profile's sweep sizes plus the divisors of the rank's sample count, up to that count
and to the largest profiled size (no extrapolation of memory beyond it). A non-dividing u is allowed (the
graph runs a remainder microbatch).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from harmony.schedule.host_memory import HostBytes, HostMemoryModel
from harmony.schedule.memory import LayerCosts
from harmony.schedule.packing import (PACKERS_BWD, PACKERS_FWD, PackContext, PackingError, bwd_packings,
                                      check_single_layers, fwd_packings, objective, uniform_packs)
from harmony.schedule.simulate import SimParams, SimResult, simulate, simulate_receive_modes
from harmony.schedule.tasks import (DEFAULT_RECEIVE_MODE, RECEIVE_MODES, ScheduleConfig, ScheduleError,
                                    build_task_graph)


@dataclass
class Candidate:
    index: int
    config: ScheduleConfig
    bwd_packer: str
    fwd_packer: str
    objective_s: float            # packing objective J (bwd + fwd pass)
    iter_time_s: float            # simulated
    gpu_feasible: bool            # every task fits the GPU cap (the simulator)
    peak_bytes: int
    host: HostBytes | None = None      # its host arena (None: no model record given to the search)
    host_fits: bool = True             # within the host memory budget (True when unchecked)
    p2p_receive: str = DEFAULT_RECEIVE_MODE    # the receive mode it was simulated with (receive_modes)

    @property
    def feasible(self) -> bool:
        """Fits the GPU cap and the host memory budget."""
        return self.gpu_feasible and self.host_fits

    @property
    def host_bytes(self) -> int | None:
        return self.host.total if self.host is not None else None

    def row(self) -> dict:
        c = self.config
        return {"index": self.index, "mode": c.mode, "gpus": c.gpus, "minibatch": c.minibatch,
                "ubatch_fwd": c.ubatch_fwd, "ubatch_bwd": c.ubatch_bwd, "bwd_packer": self.bwd_packer,
                "fwd_packer": self.fwd_packer, "num_bwd_packs": len(c.bwd_packs),
                "num_fwd_packs": len(c.fwd_packs),
                "bwd_pack_sizes": " ".join(str(e - s) for s, e in c.bwd_packs),
                "fwd_pack_sizes": " ".join(str(e - s) for s, e in c.fwd_packs),
                "objective_s": round(self.objective_s, 9), "iter_time_s": round(self.iter_time_s, 9),
                "feasible": self.feasible, "peak_bytes": self.peak_bytes, "host_bytes": self.host_bytes,
                "host_fits": self.host_fits, "p2p_receive": self.p2p_receive}


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
                           "num_fwd_packs": len(c.fwd_packs), "iter_time_s": self.best.iter_time_s,
                           "host_bytes": self.best.host_bytes, "p2p_receive": self.best.p2p_receive},
                "space": self.space}


def ubatch_candidates(costs: LayerCosts, samples: int) -> list[int]:
    sweep = costs.profile.ubatch_sizes
    top = min(samples, max(sweep))
    divs = {d for d in range(1, samples + 1) if samples % d == 0}
    return sorted(u for u in set(sweep) | divs if 1 <= u <= top)


def receive_modes(cfg: ScheduleConfig, params: SimParams, receive: str | None = None) -> tuple[str, ...]:
    """The receive modes a candidate is simulated with, the default first (it wins a tie). `receive` fixes
    one; None: both for vPP across GPUs when the model tells them apart (a slowdown beside NCCL), since
    neither is faster everywhere: on two H100s eager ran 2.6-15% faster on four plans, on two H200s five
    other plans ran 5-20% slower with it (docs/performance.md entries 48 and 59). Otherwise (vDP, one GPU,
    the CPU's gloo) both simulate alike and the default is kept."""
    if receive is not None:
        if receive not in RECEIVE_MODES:
            raise ValueError(f"receive mode must be one of {', '.join(RECEIVE_MODES)}, got {receive!r}")
        return (receive,)
    if not cfg.receives_across_gpus:
        return (DEFAULT_RECEIVE_MODE,)
    factors = {replace(params, p2p_receive=m).nccl_slowdown() for m in RECEIVE_MODES}
    if factors == {1.0}:
        return (DEFAULT_RECEIVE_MODE,)
    return (DEFAULT_RECEIVE_MODE,) + tuple(m for m in RECEIVE_MODES if m != DEFAULT_RECEIVE_MODE)


# fractions of the cap that the packers also pack under (the candidates are simulated against the cap itself)
TIGHTER_PACK_BUDGETS = (0.9, 0.8, 0.7, 0.6, 0.5)
# the tighter budgets pack at the microbatch sizes of the first pass's fastest BUDGET_PASS_PAIRS (u_fwd, u_bwd)
# pairs, the second only if its fastest plan is within BUDGET_PASS_WITHIN of the first's (entry 67)
BUDGET_PASS_PAIRS = 2
BUDGET_PASS_WITHIN = 1.05
# whose bottom pack is split (bottom_splits): the fastest SPLIT_LEADERS of all and of the first packing pass,
# and each pass's fastest, if within SPLIT_WITHIN of the fastest (a split gained at most 5.5%, entry 36),
# and the first pass's fastest whatever its time (entry 54), each at every split point; then the
# SPLIT_ALL_MAX fastest other plans within SPLIT_ALL_WITHIN, coarse to fine (a split gained 10.7% on the
# 36-layer GPT-2, entry 67; under its per-u power-cap factors that plan's parent ranked twelfth, so six were
# too few, entry 68: 7-21% more candidates for Table 1's models, the same plans). 1.25, not 1.10: on one H200's
# VGG416 profile at vPP N = 4 D = 256 the best plan splits a parent 1.215x the fastest unsplit plan, whose
# bottom pack holds 46 vLayers at the input resolution (3.756 s against 3.878 without it; entry 114)
SPLIT_LEADERS = 3
SPLIT_WITHIN = 1.06
SPLIT_ALL_WITHIN = 1.25
SPLIT_ALL_MAX = 12
# then the fastest plan is cut once more per round at every vLayer boundary below CUT_BOTTOM_VLAYERS
# (`bottom_cut_points`), for CUT_ROUNDS rounds, each from the last round's fastest cut: which packs' updates end
# the iteration depends on the two GPUs' CPU shares, so the fastest bottom is not one split away, and the time
# can stay flat for a cut before the next one gains (2x H200 gpt2-xl vDP D = 16: the best split 0.7467 s, one cut
# 0.7458, two cuts the same, four cuts 0.7349; 24 vLayers reach GPT-2's bottom four to five packs; entry 101).
# The fastest cut plan is kept only if CUT_MIN_GAIN faster than the plan it started from: a pack more is a task
# more for the runtime, and cuts that gain microseconds by the model added up to nine packs to VGG416's plans.
CUT_BOTTOM_VLAYERS = 24
CUT_ROUNDS = 6
CUT_MIN_GAIN = 0.002


def search(costs: LayerCosts, params: SimParams, *, minibatch: int, gpus: int, mode: str = "vPP",
           cap: float | None = None, ubatch_fwd: int | None = None, ubatch_bwd: int | None = None,
           pack_size: int | None = None, bwd_packers=PACKERS_BWD, fwd_packers=PACKERS_FWD,
           progress=None, equal_ubatch: bool = False, model_json: dict | None = None,
           host_memory: int | None = None, receive: str | None = None) -> SearchResult:
    """mode: vPP | vDP | auto (then modes and N' = 1..gpus are searched too). equal_ubatch: only
    u_fwd == u_bwd (models with dropout or BatchNorm, whose recompute must see the forward's microbatches).
    model_json: the model record; with it every candidate's host arena is computed (Candidate.host).
    host_memory: host bytes the arena may take (None: unchecked); needs model_json.
    receive: the receive mode every candidate is simulated with (None: each candidate's faster one,
    `receive_modes`; it becomes part of the plan, Candidate.p2p_receive)."""
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
    if host_memory is not None and model_json is None:
        raise ValueError("search(host_memory=...) needs the model record (model_json) to size the host arena")
    host_model = HostMemoryModel(model_json) if model_json is not None else None
    L = costs.L
    if mode == "auto":
        setups = [("vPP", n) for n in range(1, gpus + 1)] + [("vDP", n) for n in range(2, gpus + 1)]
    else:
        setups = [(mode, gpus)]
    cands: list[Candidate] = []
    best: Candidate | None = None
    errors: list[str] = []

    def evaluate(cfg: ScheduleConfig, bname: str, fname: str, objective_s: float, group: str = "") -> None:
        """Simulate one candidate, record it, keep it as the best if it is feasible and faster. group: the
        packing pass it came from (its leaders get their bottom pack split)."""
        nonlocal best
        pass_of[len(cands)] = group
        g = build_task_graph(cfg, L)
        # a candidate that cannot beat the best so far in any mode is simulated in the first only
        p2p, sim = simulate_receive_modes(g, costs, params, cap, receive_modes(cfg, params, receive),
                                          beat=best.iter_time_s if best is not None else None)
        hb = host_model.need(g) if host_model is not None else None
        fits = host_memory is None or hb.total <= host_memory
        c = Candidate(len(cands), cfg, bname, fname, objective_s, sim.iter_time_s, sim.feasible,
                      max(sim.task_peak_bytes), hb, fits, p2p)
        held[c.index] = sim.held_send_bytes
        if cap is not None and held[c.index]:    # tasks over the cap with a send held: room for it at their start
            for t in g.tasks:
                h = sim.task_held_bytes[t.id]
                if h and sim.task_peak_bytes[t.id] > cap and h > room[t.kind][t.pack[0]]:
                    room[t.kind][t.pack[0]] = h
        cands.append(c)
        if c.feasible and (best is None or c.iter_time_s < best.iter_time_s):
            best = c
        if progress:
            progress(c)

    space = {"setups": [f"{m}-{n}" for m, n in setups], "ubatch": {}}
    seen: set[tuple] = set()
    room = {"FWD": [0] * L, "BWD": [0] * L}     # per start layer: the send a task starting there held (entry 44)
    held: dict[int, int] = {}                   # candidate index -> the largest send one of its tasks held
    pass_of: dict[int, str] = {}                # candidate index -> the packing pass that made it

    def first_time(cfg: ScheduleConfig) -> bool:
        """Whether this plan has not been simulated yet in this search (and mark it as simulated)."""
        key = (cfg.mode, cfg.gpus, cfg.ubatch_fwd, cfg.ubatch_bwd, tuple(cfg.bwd_packs), tuple(cfg.fwd_packs))
        if key in seen:
            return False
        seen.add(key)
        return True

    def pack_setup(m: str, n_gpu: int, samples: int, us: list[int], rooms: dict | None,
                   errors_out: list[str] | None, tag: str = "", pack_cap: float | None = None) -> None:
        """Every packing of one setup whose tasks fit `pack_cap` (default: the cap; less
        `rooms[kind][start]`), each simulated against the cap."""
        duplex = params.duplex_for(n_gpu)
        ctx_kw = dict(n=samples, cap=cap if pack_cap is None else pack_cap, mode=m, gpus=n_gpu,
                      h2d_Bps=params.h2d_Bps * duplex, d2h_Bps=params.d2h_Bps * duplex,
                      shared_link=params.shared_link,
                      task_overhead_s=params.task_overhead_s)
        ub_list = [ubatch_bwd] if ubatch_bwd else us
        for ub in ub_list:
            bctx = PackContext(kind="BWD", u=ub, room=rooms and rooms["BWD"], **ctx_kw)
            if pack_size:
                bwds = {f"fixed-P{pack_size}": uniform_packs(L, pack_size)}
            else:
                bwds = _dedupe(bwd_packings(costs, bctx, bwd_packers))
                if not bwds:
                    if errors_out is not None:
                        try:
                            check_single_layers(costs, bctx)
                        except PackingError as e:
                            errors_out.append(str(e))
                        else:
                            errors_out.append(f"no backward packing fits at u_bwd={ub}")
                    continue
            uf_list = [ubatch_fwd] if ubatch_fwd else [ub] if equal_ubatch else [u for u in us if u >= ub]
            for bname, bpacks in bwds.items():
                jb = objective(costs, bctx, bpacks)
                for uf in uf_list:
                    fctx = PackContext(kind="FWD", u=uf, room=rooms and rooms["FWD"], **ctx_kw)
                    if pack_size:
                        fwds = {"reuse": tuple(bpacks[:-1])}
                    else:
                        fwds = _dedupe(fwd_packings(costs, fctx, bpacks, fwd_packers))
                    for fname, fpacks in fwds.items():
                        cfg = ScheduleConfig(mode=m, gpus=n_gpu, minibatch=minibatch, ubatch_fwd=uf,
                                             ubatch_bwd=ub, bwd_packs=bpacks, fwd_packs=fpacks)
                        if not first_time(cfg):
                            continue
                        evaluate(cfg, bname + tag, fname + tag, jb + objective(costs, fctx, fpacks), tag)

    for m, n_gpu in setups:
        samples = minibatch if m == "vPP" else -(-minibatch // n_gpu)
        us = ubatch_candidates(costs, samples)
        space["ubatch"][f"{m}-{n_gpu}"] = us
        for k in room:
            room[k] = [0] * L
        first = len(cands)
        pack_setup(m, n_gpu, samples, us, None, errors)
        # The packers fill each pack up to the cap, so a larger cap can lose a plan a smaller one finds
        # (the large GPT-2 at 5% headroom predicted 5.52 s, at 10% 5.21 s: fuller packs left no room to
        # prefetch beside them). The same packers under tighter budgets, simulated against the real cap,
        # keep those plans in the search (docs/performance.md entry 51). Only at the microbatch sizes of
        # the setup's fastest plans so far (every u at every budget cost Table 1 its 2 s target): the
        # fastest's, and the runner-up's within BUDGET_PASS_WITHIN of it (entry 67: the 36-layer GPT-2's u = 4
        # was 2.4% behind u = 8 in the first pass, and its tighter packings, never tried, held a plan 3.4%
        # faster than the one chosen).
        if cap is not None and not pack_size:
            for us_lead in budget_pass_ubatches(cands[first:]):
                for f in TIGHTER_PACK_BUDGETS:
                    pack_setup(m, n_gpu, samples, us_lead, None, None, tag=f"+budget{f:g}", pack_cap=cap * f)
        # The packers fit each task alone under the cap, but a vPP rank still holds what its previous task
        # sent to another GPU (the simulator adds it: docs/performance.md entry 33), so at a large D every
        # packing can come out over the cap by one send (2x H200, gpt2-xl vPP D = 256 N = 2: tasks at 10.9-11.3
        # GiB against 9.9, no schedule; entry 44). Then the packers run again with room for those sends, in
        # two ways, since neither finds the better plan everywhere (entry 44): each pack leaves room for the
        # send that a task starting where it starts held, until no new task goes over (three passes at most);
        # and every pack leaves the same room, each distinct held send, smallest first, until one fits.
        if pack_size or cap is None:
            continue
        # only where holding a send ruled out a candidate faster than every one that fits: smaller packs
        # rarely beat those that fit, and the passes cost more than the first (Table 1's vPP N = 4: 2.4x)
        fits_s = min((c.iter_time_s for c in cands[first:] if c.gpu_feasible), default=float("inf"))
        if not any(not c.gpu_feasible and held[c.index] and c.iter_time_s < fits_s for c in cands[first:]):
            continue
        for _ in range(3):
            rooms = {k: tuple(v) for k, v in room.items()}
            if not any(any(v) for v in rooms.values()):
                break
            pack_setup(m, n_gpu, samples, us, rooms, None, tag="+send-room")
            if all(tuple(v) == rooms[k] for k, v in room.items()):
                break
        over = sorted({held[c.index] for c in cands[first:] if not c.gpu_feasible and 0 < held[c.index] < cap})
        for h in over[:3]:
            before = len(cands)
            pack_setup(m, n_gpu, samples, us, {k: (h,) * L for k in room}, None, tag="+send-room-all")
            if any(c.gpu_feasible for c in cands[before:]):
                break
        if len(cands) > first and any("send-room" in c.bwd_packer for c in cands[first:]):
            space.setdefault("held_send_room_bytes", {})[f"{m}-{n_gpu}"] = max(held[c.index] for c in cands[first:])
    if best is not None and not pack_size:
        # the bottom split of the fastest few, of the first pass's and of every pass's fastest: a plan a
        # little slower unsplit can split better, so a pass that adds candidates must not push the one that
        # splits best out of the leaders (2x H100 gpt2-xl vPP D = 64 lost 0.8% splitting only the fastest)
        ranked = sorted((c for c in cands if c.feasible), key=lambda c: c.iter_time_s)
        firsts = {pass_of[c.index]: c for c in reversed(ranked)}       # each pass's fastest
        main = [c for c in ranked if pass_of[c.index] == ""][:SPLIT_LEADERS]
        # The first pass's fastest is split whatever its time, as the search did before the tighter passes,
        # so they never lose its plan (a split gained 11-16% on the H100's vgg416 at N = 4, where the
        # passes' plans were more than 6% faster unsplit: entry 54).
        picked = {c.index: c for c in main + ranked[:SPLIT_LEADERS] + list(firsts.values())}
        window = ranked[0].iter_time_s * SPLIT_WITHIN
        leaders = [c for c in picked.values() if c.iter_time_s <= window or c is firsts.get("")]
        # and every other plan within SPLIT_ALL_WITHIN: a bottom pack of 13 vLayers split at 4 gained 10.7% on
        # the 36-layer GPT-2 (entry 67), from a plan 6-8% behind the fastest and second at its microbatch size
        wide = ranked[0].iter_time_s * SPLIT_ALL_WITHIN
        chosen = {c.index for c in leaders}
        wider = [c for c in ranked if c.index not in chosen and c.iter_time_s <= wide][:SPLIT_ALL_MAX]

        def split_at(base: Candidate, cfg: ScheduleConfig) -> float:
            """Simulate one bottom split of base (once per search); its time, inf if infeasible or seen."""
            if not first_time(cfg):
                return float("inf")
            evaluate(cfg, base.bwd_packer + "+split-bottom", base.fwd_packer + "+split-bottom", base.objective_s)
            return cands[-1].iter_time_s if cands[-1].feasible else float("inf")

        for base in leaders:   # evaluate() appends to `cands` and moves `best`: the leaders are fixed first
            for cfg in bottom_splits(base.config):
                split_at(base, cfg)
        for base in wider:     # the wider window's, coarse to fine: a few split points, then a bisection
            splits = bottom_splits(base.config)
            coarse_to_fine(len(splits), lambda i, b=base, sp=splits: split_at(b, sp[i]))
        # then the fastest plan's bottom, one cut more per round from the round's fastest (faster or not: the
        # times plateau between cuts that gain), for CUT_ROUNDS rounds; kept if CUT_MIN_GAIN faster in the end
        start = base = best
        for _ in range(CUT_ROUNDS):
            tried = []
            for k in bottom_cut_points(base.config):
                cfg = split_pack_at(base.config, k)
                if first_time(cfg):
                    evaluate(cfg, base.bwd_packer + "+cut-bottom", base.fwd_packer + "+cut-bottom", base.objective_s)
                    tried += [cands[-1]] if cands[-1].feasible else []
            if not tried:
                break
            base = min(tried, key=lambda c: c.iter_time_s)
        if best.iter_time_s > start.iter_time_s * (1 - CUT_MIN_GAIN):
            best = start
    if best is None:
        over_host = [c for c in cands if c.gpu_feasible]
        if over_host:
            raise ScheduleError(host_memory_message(over_host, host_memory, minibatch))
        # the first reason, not one per microbatch size and mode: the smallest u is tried first and needs the least
        reasons = list(dict.fromkeys(errors))
        why = reasons[0] if reasons else "every candidate exceeds the GPU memory cap"
        if len(reasons) > 1:
            why += f" (and {len(reasons) - 1} more for the other microbatch sizes and modes)"
        raise ScheduleError(f"no schedule fits: {why}")
    g = build_task_graph(best.config, L)
    best_sim = simulate(g, costs, replace(params, p2p_receive=best.p2p_receive), cap, record=True)
    space["search_cpu_s"] = time.process_time() - c0   # CPU time: robust to a loaded machine
    return SearchResult(best, best_sim, cands, time.perf_counter() - t0, space)


def budget_pass_ubatches(first_pass: list[Candidate]) -> list[list[int]]:
    """The microbatch sizes the tighter-budget passes pack at: the fastest feasible plan's (u_fwd, u_bwd),
    then the fastest plan's of one other pair if within BUDGET_PASS_WITHIN of it. Each as the sorted
    distinct sizes pack_setup takes."""
    best_of: dict[tuple[int, int], float] = {}
    for c in first_pass:
        if c.feasible:
            key = (c.config.ubatch_fwd, c.config.ubatch_bwd)
            best_of[key] = min(best_of.get(key, float("inf")), c.iter_time_s)
    ranked = sorted(best_of.items(), key=lambda kv: kv[1])[:BUDGET_PASS_PAIRS]
    return [sorted(set(pair)) for pair, t in ranked if t <= ranked[0][1] * BUDGET_PASS_WITHIN]


def coarse_to_fine(n: int, time_of) -> int | None:
    """The index in range(n) with the least time_of(i): the indices 0, 1, 3, 7, ... and n - 1 first, then a
    bisection on the slope between the best one's coarse neighbours; each index is tried once. Exact where
    the time falls and then rises along the indices, as it does across a bottom pack's split points (the
    36-layer GPT-2's pack of 13: 8.12, 7.88, 7.64, 7.49, 7.60, 7.72 ... s; entry 67), in about 3 log2(n)
    tries instead of n. None when n is 0."""
    if n <= 0:
        return None
    times: dict[int, float] = {}

    def t(i: int) -> float:
        if i not in times:
            times[i] = time_of(i)
        return times[i]

    coarse, k = [], 1
    while k - 1 < n - 1:
        coarse.append(k - 1)
        k *= 2
    coarse.append(n - 1)
    j = min(range(len(coarse)), key=lambda j: (t(coarse[j]), coarse[j]))
    lo, hi = coarse[max(j - 1, 0)], coarse[min(j + 1, len(coarse) - 1)]
    while hi - lo > 2:
        mid = (lo + hi) // 2
        if t(mid) <= t(mid + 1):
            hi = mid + 1
        else:
            lo = mid
    for i in range(lo, hi + 1):
        t(i)
    return min(times, key=lambda i: (times[i], i))


def bottom_splits(cfg: ScheduleConfig) -> list[ScheduleConfig]:
    """The configuration with its bottom backward pack [0, e) split at each k in (0, e), and the forward pack
    that holds k split there too (a backward pack's input is stashed by the forward).

    Why: the bottom pack's backward is the iteration's last task. Its gradients go to the host and the CPU
    update of its weights runs after the GPU has finished, so the iteration ends one pack's copy and update
    after its compute. The packers balance packs by memory or time and do not see that tail. A smaller
    bottom pack shortens it, at the cost of one more pack. On the H100 gpt2-xl D = 16 plan, splitting the
    bottom pack [0, 7) at 3 is predicted 1.439 s instead of 1.487 s (docs/performance.md entry 36)."""
    s0, e0 = cfg.bwd_packs[0]
    return [split_pack_at(cfg, k) for k in range(s0 + 1, e0)]


def split_pack_at(cfg: ScheduleConfig, k: int) -> ScheduleConfig:
    """The configuration with the backward pack that holds vLayer boundary k inside it split at k, and the
    forward pack around k split there too (a backward pack's input is stashed by the forward). A one-pack
    plan (the bottom pack is the loss pack) gets its first forward pack, [s0, k)."""
    i = next((i for i, (s, e) in enumerate(cfg.bwd_packs) if s < k < e), None)
    if i is None:
        raise ValueError(f"vLayer boundary {k} is not inside a backward pack of {cfg.bwd_packs}")
    s0, e0 = cfg.bwd_packs[i]
    if len(cfg.bwd_packs) == 1:
        fwd = ((s0, k),)
    else:
        fwd = tuple(p for f in cfg.fwd_packs for p in (((f[0], k), (k, f[1])) if f[0] < k < f[1] else (f,)))
    return replace(cfg, bwd_packs=(*cfg.bwd_packs[:i], (s0, k), (k, e0), *cfg.bwd_packs[i + 1:]), fwd_packs=fwd)


def bottom_cut_points(cfg: ScheduleConfig, span: int | None = None) -> list[int]:
    """The vLayer boundaries below `span` (default CUT_BOTTOM_VLAYERS) where a backward pack can still be
    cut (`split_pack_at`): inside a pack, and not inside the loss pack (the last), unless it is the only one."""
    span = CUT_BOTTOM_VLAYERS if span is None else span
    packs = cfg.bwd_packs if len(cfg.bwd_packs) == 1 else cfg.bwd_packs[:-1]
    return [k for s, e in packs for k in range(s + 1, e) if k < span]


def host_memory_message(over_host: list[Candidate], budget: int, minibatch: int) -> str:
    """Why nothing fits when candidates fit the GPU but not the host: the least host-hungry one, by how much."""
    from harmony.units import format_bytes
    c = min(over_host, key=lambda x: (x.host_bytes, x.iter_time_s))
    h = c.host
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in h.to_json().items() if k != "total" and v)
    return (f"no schedule fits host memory: {len(over_host)} candidate(s) fit the GPU, but the smallest host arena "
            f"among them (candidate {c.index}: {c.config.mode} N={c.config.gpus} u_bwd={c.config.ubatch_bwd}, "
            f"{len(c.config.bwd_packs)} backward packs) needs {h.total:,} bytes ({format_bytes(h.total)}: {parts}), "
            f"{h.total - budget:,} bytes ({format_bytes(h.total - budget)}) over the host memory budget of "
            f"{budget:,} bytes ({format_bytes(budget)}): use a machine with more host memory, "
            + (f"a smaller D (the stashed activations X grow with D={minibatch}), " if h.X else
               "a smaller model (its weights, gradients and optimizer state alone exceed the budget), ")
            + "or pass --host-memory (a larger budget, or none to skip the check)")


def _dedupe(packings: dict) -> dict:
    """Keep the first name of each distinct packing (the name lists every packer that found it)."""
    seen: dict = {}
    for name, packs in packings.items():
        if packs in seen:
            seen[packs].append(name)
        else:
            seen[packs] = [name]
    return {"+".join(names): packs for packs, names in seen.items()}
