"""Layer packing: cut a chain of vLayers into contiguous packs that fit the per-GPU memory cap.

Backward packs partition [0, L) (the last one holds the loss). Forward packs partition [0, start of the
last backward pack) and are split at every backward-pack start, so the forward pass is packed segment by
segment, one segment per backward pack but the last. Every packer works on a segment [lo, hi).

Packers: greedy (fill from the first layer), greedy-reverse (fill from the last), balanced-memory and
balanced-time (the fewest S equal-memory / equal-time packs that all fit), reuse (forward packs = backward
packs, if they fit at u_fwd) and dp (optimal under the objective below).

Objective (what `dp` minimises exactly, and what the property test compares): the estimated time of
one pass. Each pack has a cost, its own bottleneck,

    cost_p = max( C_p / P,  X_in,p / B_in,  X_out,p / B_out )
    vPP, N > 1:   J = w(S) * max_p cost_p + tau * S            (S microbatch-pipelined packs round-robin
                  on N GPUs at the pace of the slowest; w(S) = max(1 + (S-1)/m, ceil(S/N) + ((S-1) mod N)/m),
                  m = ceil(n/u): see wave_factor)
    vDP or N = 1: J = sum_p cost_p + tau * S                   (every GPU runs the tasks one by one)

  C_p      compute of the task (all microbatches of the rank's samples at u; profiled, remainder included)
  P        1 (vPP: the wave formula accounts for the N GPUs; vDP: each GPU runs every task on its share)
  X_in,p   bytes swapped in: the pack's weights (+ a BWD's stashed input);   B_in  = effective H2D
  X_out,p  bytes swapped out: a BWD's gradients; a FWD's stash is fixed by the segment and left out
  B_*      calibrated bandwidth per link x links working in parallel (vPP, own link per GPU: N links;
           shared host link: 1; vDP with a shared link: 1/N, every GPU moves every pack)
  tau      fixed per-task overhead (SimParams.task_overhead_s)
All packings share the cap rule (memory.py); the dp is exact over all contiguous packings that fit.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from harmony.schedule.memory import LayerCosts
from harmony.schedule.tasks import Range, ScheduleError
from harmony.units import format_bytes

PACKERS_BWD = ("greedy", "greedy-reverse", "balanced-memory", "balanced-time", "dp")
PACKERS_FWD = ("reuse", "greedy", "greedy-reverse", "balanced-memory", "balanced-time", "dp")


class PackingError(ScheduleError):
    pass


@dataclass(frozen=True)
class PackContext:
    kind: str                  # FWD | BWD
    u: int                     # microbatch size
    n: int                     # samples a task processes (D in vPP, the largest share in vDP)
    cap: float | None          # per-GPU bytes
    mode: str = "vPP"
    gpus: int = 1
    h2d_Bps: float = 12e9
    d2h_Bps: float = 12e9
    shared_link: bool = False
    task_overhead_s: float = 0.0
    # per start layer: bytes a task starting there leaves free for the send its rank still holds from its
    # previous task (vPP on several GPUs; the search fills it from the simulator, docs/performance.md entry 44)
    room: tuple[float, ...] | None = None

    @property
    def fresh_grads(self) -> bool:
        """Harmony's BWD tasks start with no dW on the GPU (one BWD per pack and GPU, its dW sent to host),
        except vDP's across GPUs, which all-reduce it (LayerCosts.one_pass)."""
        return not (self.mode == "vDP" and self.gpus > 1)

    def cap_at(self, s: int) -> float | None:
        """The cap a pack starting at layer s must fit."""
        if self.cap is None or self.room is None:
            return self.cap
        return self.cap - self.room[s]

    @property
    def parallel(self) -> int:
        return 1

    @property
    def links(self) -> float:
        if self.mode == "vPP":
            return 1.0 if self.shared_link else float(self.gpus)
        return 1.0 / self.gpus if self.shared_link else 1.0


def pack_cost(costs: LayerCosts, ctx: PackContext, s: int, e: int) -> float:
    """One pack's cost, written out term by term: the reference that the DP packers' vectorised
    _vec_cost is tested against (tests/test_schedule_sim.py)."""
    c = costs.task_time(ctx.kind, s, e, ctx.u, ctx.n)[0] / ctx.parallel
    xin = costs.weights(s, e)
    xout = 0.0
    if ctx.kind == "BWD":
        xout = costs.grads(s, e)
        if s > 0:
            xin += ctx.n * costs.xin[s]
    links = ctx.links
    return max(c, xin / (ctx.h2d_Bps * links), xout / (ctx.d2h_Bps * links)) + ctx.task_overhead_s


def objective(costs: LayerCosts, ctx: PackContext, packs) -> float:
    """vPP: wave_factor(S) * max_p cost_p + tau*S (S microbatch-pipelined tasks round-robin on N GPUs, at the
    pace of the slowest pack); vDP / N=1: sum_p cost_p (tasks run one after another on every GPU)."""
    cs = [pack_cost(costs, ctx, s, e) - ctx.task_overhead_s for s, e in packs]
    if not cs:
        return 0.0
    if _waves(ctx):
        return wave_factor(ctx, len(cs)) * max(cs) + ctx.task_overhead_s * len(cs)
    return sum(cs) + ctx.task_overhead_s * len(cs)


def _waves(ctx: PackContext) -> bool:
    return ctx.mode == "vPP" and ctx.gpus > 1


def wave_factor(ctx: PackContext, S: int) -> float:
    """vPP, N > 1: the pass time of S microbatch-pipelined packs of equal cost c, in units of c. Pack p runs
    on GPU p mod N and starts when pack p-1 has finished its first of m = ceil(n/u) microbatches (c/m later)
    and its GPU is free: latency-bound (m <= N) 1 + (S-1)/m; GPU-bound (m >= N) ceil(S/N) + ((S-1) mod N)/m
    (the last wave's fill). Non-decreasing in S."""
    N = ctx.gpus
    m = max(1, -(-ctx.n // ctx.u))
    return max(1 + (S - 1) / m, -(-S // N) + ((S - 1) % N) / m)


def _ends(costs, ctx, s, hi):
    ends = costs.feasible_ends(ctx.kind, s, ctx.u, ctx.n, ctx.cap_at(s), fresh_grads=ctx.fresh_grads)
    return ends[:np.searchsorted(ends, hi, side="right")]


def _fail(costs, ctx, lo, hi, why):
    raise PackingError(f"no {ctx.kind} packing of layers [{lo},{hi}) at u={ctx.u} fits the cap: {why}")


def greedy(costs: LayerCosts, ctx: PackContext, lo: int, hi: int) -> list[Range]:
    packs, s = [], lo
    while s < hi:
        ends = _ends(costs, ctx, s, hi)
        if len(ends) == 0:
            _fail(costs, ctx, lo, hi, f"no pack starting at layer {s} fits")
        e = int(ends[-1])
        packs.append((s, e))
        s = e
    return packs


def greedy_reverse(costs: LayerCosts, ctx: PackContext, lo: int, hi: int) -> list[Range]:
    packs, e = [], hi
    while e > lo:
        best = None
        for s in range(e - 1, lo - 1, -1):
            if costs.fits(ctx.kind, s, e, ctx.u, ctx.n, ctx.cap_at(s), ctx.fresh_grads):
                best = s
            elif best is not None:
                break
        if best is None:
            _fail(costs, ctx, lo, hi, f"no pack ending at layer {e} fits")
        packs.append((best, e))
        e = best
    return packs[::-1]


def _balanced(costs: LayerCosts, ctx: PackContext, lo: int, hi: int, weight: list[float], s_min: int):
    n_layers = hi - lo
    total = sum(weight[lo:hi]) or 1.0
    for S in range(max(1, s_min), min(n_layers, 2 * s_min + 4) + 1):
        cuts, acc, k = [lo], 0.0, 1
        for i in range(lo, hi):
            acc += weight[i]
            # cut after layer i when the running share passes k/S, keeping room for the remaining packs
            if k < S and acc >= total * k / S and i + 1 > cuts[-1] and hi - (i + 1) >= S - k:
                cuts.append(i + 1)
                k += 1
        while len(cuts) < S:           # not enough cuts (zero weights): split the longest pack
            j = max(range(len(cuts)), key=lambda q: (cuts[q + 1] if q + 1 < len(cuts) else hi) - cuts[q])
            end = cuts[j + 1] if j + 1 < len(cuts) else hi
            if end - cuts[j] < 2:
                break
            cuts.insert(j + 1, (cuts[j] + end) // 2)
        cuts.append(hi)
        packs = list(zip(cuts[:-1], cuts[1:]))
        if all(costs.fits(ctx.kind, s, e, ctx.u, ctx.n, ctx.cap_at(s), ctx.fresh_grads) for s, e in packs):
            return packs
    _fail(costs, ctx, lo, hi, "no balanced split fits")


def balanced_memory(costs: LayerCosts, ctx: PackContext, lo: int, hi: int, s_min: int = 1) -> list[Range]:
    c = costs.at(min(ctx.u, ctx.n))
    if ctx.kind == "FWD":
        w = [costs.w[i] + c.fwd_peak[i] for i in range(costs.L)]
    else:
        w = [costs.w[i] + costs.g[i] + c.saved[i] for i in range(costs.L)]
    return _balanced(costs, ctx, lo, hi, w, s_min)


def balanced_time(costs: LayerCosts, ctx: PackContext, lo: int, hi: int, s_min: int = 1) -> list[Range]:
    c = costs.at(min(ctx.u, ctx.n))
    return _balanced(costs, ctx, lo, hi, c.fwd if ctx.kind == "FWD" else c.bwd, s_min)


def dp(costs: LayerCosts, ctx: PackContext, lo: int, hi: int) -> list[Range]:
    """Exact minimum of J over contiguous packings of [lo, hi) whose every pack fits (vectorised over
    the pack's end; O(sum of feasible pack lengths))."""
    INF = float("inf")
    best = np.full(hi - lo + 1, INF)
    arg = np.full(hi - lo + 1, -1, dtype=np.int64)
    best[0] = 0.0
    for s in range(lo, hi):
        b = best[s - lo]
        if b == INF:
            continue
        ends = _ends(costs, ctx, s, hi)
        if len(ends) == 0:
            continue
        v = b + _vec_cost(costs, ctx, np.full(len(ends), s), ends) + ctx.task_overhead_s
        k = ends - lo
        better = v < best[k]
        best[k[better]] = v[better]
        arg[k[better]] = s
    if best[hi - lo] == INF:
        _fail(costs, ctx, lo, hi, "no contiguous packing fits (some layer does not fit alone)")
    packs, e = [], hi
    while e > lo:
        s = int(arg[e - lo])
        packs.append((s, e))
        e = s
    return packs[::-1]


def dp_waves(costs: LayerCosts, ctx: PackContext, lo: int, hi: int, stops=None) -> list[Range]:
    """Exact minimum of J = wave_factor(S) * max_p cost_p + tau*S over contiguous packings of [lo, hi) whose
    packs fit (and, for the forward pass, do not cross `stops`, the backward-pack starts) and number at most
    S_cap = max(2 S_g + 4, N (ceil(S_g/N) + 2)) packs, S_g = the greedy packing's count (the balanced
    heuristics search the same range; with tau = 0, J is flat in S beyond it, and ties go to fewer packs).
    Layered DP over S: m_S[e] = min over s of max(m_{S-1}[s], cost(s, e)); edges costlier than the best J
    so far divided by wave_factor(S) (non-decreasing) are pruned (exact: they cannot improve J).
    J sees only the costliest pack, so many packings tie; among the ties of each state the DP keeps the one
    with the least sum of squared pack costs (a tie-break, not part of J: the most even packs, which fill and
    drain the pipeline soonest). Without it the DP returned, of gpt2-xl's tied 4-pack plans at N = 4 (table
    1, analytic), one the simulator puts 2.9% behind balanced-time's (docs/performance.md entry 37)."""
    INF = float("inf")
    N, tau = ctx.gpus, ctx.task_overhead_s
    bounds = sorted(set(stops or ()) | {hi})
    edges = _edges(costs, ctx, lo, hi, tuple(bounds))
    if edges is None:
        _fail(costs, ctx, lo, hi, "no contiguous packing fits (some layer does not fit alone)")
    es, ee, ec = edges
    all_edges = (es, ee, ec)
    o = np.argsort(ee, kind="stable")             # edges grouped by end: one reduceat per layer
    es, ee, ec = es[o], ee[o], ec[o]
    # an upper bound to start pruning from: the greedy packing (fewest packs) if it exists
    best_j, best_layer = INF, None
    try:
        g = []
        for a, b in zip([lo, *bounds[:-1]], bounds):
            if b > a:
                g += greedy(costs, ctx, a, b)
        if g:
            best_j = objective(costs, ctx, g)
    except PackingError:
        pass
    s_cap = max(2 * len(g) + 4, N * (-(-len(g) // N) + 2)) if g else hi - lo
    width = hi - lo + 1
    cur = np.full(width, INF)
    cur[0] = 0.0
    cur_sq = np.zeros(width)                   # the tie-break: sum of squared costs of the state's packing
    layers = [cur]
    layers_sq = [cur_sq]
    for S in range(1, min(s_cap, hi - lo) + 1):
        w = wave_factor(ctx, S)
        limit = (best_j - tau * S) / w if best_j < INF else INF
        if limit < INF:                         # drop edges that can no longer improve J (limit only falls)
            keep = ec <= limit * (1 + 1e-12)
            if not keep.all():
                es, ee, ec = es[keep], ee[keep], ec[keep]
        if len(es) == 0:
            break
        v = np.maximum(cur[es], ec)
        heads = np.flatnonzero(np.r_[True, ee[1:] != ee[:-1]])
        new = np.full(width, INF)
        best_v = np.minimum.reduceat(v, heads)
        new[ee[heads]] = best_v
        group = np.repeat(np.arange(len(heads)), np.diff(np.r_[heads, len(v)]))
        q = np.where(v <= best_v[group] * (1 + 1e-12), cur_sq[es] + ec * ec, INF)
        new_sq = np.zeros(width)
        new_sq[ee[heads]] = np.minimum.reduceat(q, heads)
        layers.append(new)
        layers_sq.append(new_sq)
        cur, cur_sq = new, new_sq
        if new[-1] < INF:
            j = w * new[-1] + tau * S
            if j < best_j * (1 - 1e-12) or best_layer is None and j <= best_j:
                best_j, best_layer = j, S
        if not np.isfinite(cur).any():
            break
    if best_layer is None:
        if best_j < INF:
            return g
        _fail(costs, ctx, lo, hi, "no contiguous packing fits")
    # reconstruct: walk back through the layers
    es, ee, ec = all_edges
    packs, e = [], hi - lo
    target, target_sq = layers[best_layer][e], layers_sq[best_layer][e]
    for S in range(best_layer, 0, -1):
        prev, prev_sq = layers[S - 1], layers_sq[S - 1]
        m = (ee == e) & (prev[es] < INF) & (np.maximum(prev[es], ec) <= target * (1 + 1e-12))
        cand = np.nonzero(m)[0]
        k = int(cand[np.argmin(np.abs(prev_sq[es[cand]] + ec[cand] ** 2 - target_sq))])
        s = int(es[k])
        packs.append((s + lo, e + lo))
        target, target_sq = prev[s], prev_sq[s]
        e = s
    return packs[::-1]


def _edges(costs, ctx, lo, hi, bounds):
    """Every feasible pack [s, e) of [lo, hi) that does not cross `bounds` (ascending, ending at hi), as
    (s - lo, e - lo, cost) arrays, or None when there is none. Cached per (ctx, lo, hi, bounds): the search
    asks for the same segment under many schedules, and one vectorised cost call over all edges replaces
    one per start (the search's hottest loop; docs/performance.md entry 30)."""
    key = ("edges", ctx, lo, hi, bounds)
    if key in costs._task_cache:
        return costs._task_cache[key]
    starts, ends = [], []
    for s in range(lo, hi):
        e = _ends(costs, ctx, s, bounds[bisect.bisect_right(bounds, s)])
        if len(e):
            starts.append(np.full(len(e), s))
            ends.append(e)
    r = None
    if starts:
        es, ee = np.concatenate(starts), np.concatenate(ends)
        r = (es - lo, ee - lo, _vec_cost(costs, ctx, es, ee))
    costs._task_cache[key] = r
    return r


def _vec_cost(costs, ctx, s, e):
    """pack_cost less the task overhead, for the packs [s[i], e[i]) (integer arrays of one length)."""
    full, rem = divmod(ctx.n, ctx.u)
    comp = full * costs.at(ctx.u).time_np(ctx.kind, s, e)
    if rem:
        comp = comp + costs.at(rem).time_np(ctx.kind, s, e)
    wp, gp = costs.np_["w_prefix"], costs.np_["g_prefix"]
    xin = wp[e] - wp[s]
    links = ctx.links
    if ctx.kind == "FWD":
        return np.maximum(comp / ctx.parallel, xin / (ctx.h2d_Bps * links))
    xin = xin + np.where(s > 0, ctx.n * costs.np_["xin"][s], 0.0)   # the incoming dY of the group
    return np.maximum(np.maximum(comp / ctx.parallel, xin / (ctx.h2d_Bps * links)),
                      (gp[e] - gp[s]) / (ctx.d2h_Bps * links))


_SEGMENT_PACKERS = {"greedy": greedy, "greedy-reverse": greedy_reverse, "balanced-memory": balanced_memory,
                    "balanced-time": balanced_time, "dp": dp}


def _run(costs, ctx, name, lo, hi):
    key = ("pack", name, ctx, lo, hi)
    r = costs._task_cache.get(key)
    if r is None:
        try:
            r = _run_uncached(costs, ctx, name, lo, hi)
        except PackingError as e:
            r = e
        costs._task_cache[key] = r
    if isinstance(r, PackingError):
        raise r
    return r


def _run_uncached(costs, ctx, name, lo, hi):
    if name == "dp" and _waves(ctx):
        return dp_waves(costs, ctx, lo, hi)
    if name in ("balanced-memory", "balanced-time"):
        s_min = len(greedy(costs, ctx, lo, hi))
        return _SEGMENT_PACKERS[name](costs, ctx, lo, hi, s_min)
    return _SEGMENT_PACKERS[name](costs, ctx, lo, hi)


def bwd_packings(costs: LayerCosts, ctx: PackContext, packers=PACKERS_BWD) -> dict[str, tuple[Range, ...]]:
    """name -> backward packing, for every packer that finds one (duplicates kept under each name)."""
    out = {}
    for name in packers:
        try:
            out[name] = tuple(_run(costs, ctx, name, 0, costs.L))
        except PackingError:
            pass
    return out


def fwd_segments(bwd_packs) -> list[Range]:
    """Forward packs are split at every backward-pack start: one segment per backward pack but the last."""
    return [tuple(p) for p in bwd_packs[:-1]]


def fwd_packings(costs: LayerCosts, ctx: PackContext, bwd_packs, packers=PACKERS_FWD) -> dict[str, tuple[Range, ...]]:
    segs = fwd_segments(bwd_packs)
    out = {}
    for name in packers:
        try:
            if name == "reuse":
                if all(costs.fits("FWD", s, e, ctx.u, ctx.n, ctx.cap_at(s)) for s, e in segs):
                    out[name] = tuple(segs)
                continue
            if name == "dp" and _waves(ctx):
                if segs:
                    key = ("fwd-dp", ctx, tuple(segs))
                    r = costs._task_cache.get(key)
                    if r is None:
                        try:
                            r = tuple(dp_waves(costs, ctx, 0, segs[-1][1], stops=[s for s, _ in segs]))
                        except PackingError as e:
                            r = e
                        costs._task_cache[key] = r
                    if isinstance(r, PackingError):
                        raise r
                    out[name] = r
                else:
                    out[name] = ()
                continue
            packs = []
            for lo, hi in segs:
                packs += _run(costs, ctx, name, lo, hi)
            out[name] = tuple(packs)
        except PackingError:
            pass
    return out


def uniform_packs(num_layers: int, pack_size: int) -> tuple[Range, ...]:
    """Fixed pack size P (Fig 8): [0,P), [P,2P), ...; the last pack takes the remainder and the loss."""
    if pack_size < 1:
        raise PackingError(f"pack size must be >= 1, got {pack_size}")
    return tuple((s, min(s + pack_size, num_layers)) for s in range(0, num_layers, pack_size))


def check_single_layers(costs: LayerCosts, ctx: PackContext) -> None:
    """Clear error when some layer cannot be packed at all (not even alone) at this u."""
    for i in range(costs.L):
        if len(_ends(costs, ctx, i, costs.L)) == 0:
            need = costs.task_bytes(ctx.kind, i, i + 1, ctx.u, ctx.n, ctx.fresh_grads)
            raise PackingError(
                f"vLayer {i} alone needs {format_bytes(need)} as a {ctx.kind} task at u={ctx.u} over "
                f"{ctx.n} samples, more than the {format_bytes(ctx.cap)} a task may use (the GPU memory cap less "
                f"the search's headroom): raise --gpu-memory or lower the minibatch")
