"""The host arena shares stash regions between stashes whose lifetimes do not overlap (harmony.runtime.
host_store._plan_stash): swap-dp reserves one microbatch's stash per rank instead of the minibatch's,
stashes read by another rank keep their own region, and swap-dp still trains like plain PyTorch."""
from __future__ import annotations

import copy
import itertools

import pytest
import torch

from baselines.common import load_model
from baselines.swap_dp import schedule_record, swap_dp_config
from harmony.data import load_batches
from harmony.reference import max_relative_difference, train_reference
from harmony.runtime.host_store import ALIGN, plan_layout
from harmony.schedule.tasks import ScheduleConfig, TaskGraph, build_task_graph

D = 8


def layout(name: str, graph: TaskGraph):
    spec, mj = load_model(name)
    return plan_layout(spec.build("meta"), graph, mj, spec.optimizer.state_tensors_per_param()), mj


def stash_bytes(graph: TaskGraph, mj: dict, tid: int) -> int:
    """Bytes one stash occupies in its region: its outputs, each 64-byte aligned."""
    t = graph.tasks[tid]
    total = 0
    for o in mj["vlayers"][t.pack[1] - 1]["outputs"]:
        n = t.num_samples * torch.empty((), dtype=getattr(torch, o["dtype"])).element_size()
        for s in o["shape"]:
            n *= s
        total += (n + ALIGN - 1) // ALIGN * ALIGN
    return total


def lifetimes(graph: TaskGraph) -> dict[int, tuple[int, int, int, int]]:
    """FWD task id -> (producer index, consumer index, producer rank, consumer rank)."""
    cons = {t.act_in[1]: t for t in graph.tasks if t.act_in[0] == "stash"}
    return {tid: (tid, c.id, graph.tasks[tid].rank, c.rank) for tid, c in cons.items()}


def extent(entries) -> tuple[int, int]:
    return entries[0].offset, max(e.offset + e.nbytes for e in entries)


def check_sharing_is_safe(lay, graph: TaskGraph) -> int:
    """Every two stashes whose bytes overlap are rank-local, on one rank, with disjoint lifetimes (one's
    consumer before the other's producer). Returns how many pairs share."""
    life = lifetimes(graph)
    assert set(lay.stash) == set(life)
    shared = 0
    for a, b in itertools.combinations(sorted(lay.stash), 2):
        (a0, a1), (b0, b1) = extent(lay.stash[a]), extent(lay.stash[b])
        if a0 < b1 and b0 < a1:
            pa, ca, ra, rca = life[a]
            pb, cb, rb, rcb = life[b]
            assert ra == rca == rb == rcb, (a, b, life[a], life[b])
            assert ca < pb, (a, b, life[a], life[b])       # a < b: a's consumer runs before b's producer
            shared += 1
    return shared


def check_shapes(lay, graph: TaskGraph, mj: dict) -> None:
    """Each stash is a list of Entry with the FWD output's shapes and dtypes at the task's sample count."""
    for tid, entries in lay.stash.items():
        t = graph.tasks[tid]
        outs = mj["vlayers"][t.pack[1] - 1]["outputs"]
        assert [(e.shape, e.dtype) for e in entries] == [((t.num_samples, *o["shape"]), o["dtype"]) for o in outs]
        assert all(e.offset % ALIGN == 0 for e in entries)
        assert extent(entries)[1] <= lay.total_bytes


@pytest.mark.parametrize("gpus", [1, 2])
def test_swap_dp_reserves_one_microbatch_of_stash_per_rank(gpus):
    _, mj = load_model("gpt2-tiny")
    g = build_task_graph(swap_dp_config(mj, D, gpus, 2), mj["num_vlayers"])
    lay, mj = layout("gpt2-tiny", g)
    check_shapes(lay, g, mj)
    per_microbatch = {r: sum(stash_bytes(g, mj, t.id) for t in g.tasks if t.stash_out and t.group == 0 and t.rank == r)
                      for r in range(gpus)}
    minibatch = sum(stash_bytes(g, mj, tid) for tid in lay.stash)
    assert len({t.group for t in g.tasks if t.kind == "FWD"}) == D // gpus // 2 > 1
    assert lay.bytes_by_part["X"] == sum(per_microbatch.values()) < minibatch
    assert check_sharing_is_safe(lay, g) > 0


def test_harmony_vpp_round_robin_shares_nothing_across_ranks():
    _, mj = load_model("gpt2-tiny")
    L = mj["num_vlayers"]
    bwd = ((0, 1), (1, 2), (2, 3), (3, L - 1), (L - 1, L))
    cfg = ScheduleConfig(mode="vPP", gpus=2, minibatch=D, ubatch_fwd=4, ubatch_bwd=2, bwd_packs=bwd, fwd_packs=bwd[:-1])
    g = build_task_graph(cfg, L)
    life = lifetimes(g)
    assert any(r != rc for _, _, r, rc in life.values())          # some stashes are read by the other rank
    lay, mj = layout("gpt2-tiny", g)
    check_shapes(lay, g, mj)
    assert check_sharing_is_safe(lay, g) == 0
    assert lay.bytes_by_part["X"] == sum(stash_bytes(g, mj, tid) for tid in lay.stash)


def test_stash_read_by_another_rank_keeps_its_region():
    """swap-dp on one rank, but the consumers of microbatch 0's stashes moved to rank 1: those stashes may
    not lend their region to later microbatches; the later ones still share among themselves."""
    _, mj = load_model("gpt2-tiny")
    g = copy.deepcopy(build_task_graph(swap_dp_config(mj, D, 1, 2), mj["num_vlayers"]))
    moved = {t.act_in[1] for t in g.tasks if t.act_in[0] == "stash" and t.group == 0}
    for t in g.tasks:
        if t.act_in[0] == "stash" and t.act_in[1] in moved:
            t.rank = 1
    lay, mj = layout("gpt2-tiny", g)
    assert check_sharing_is_safe(lay, g) > 0
    mine = {extent(lay.stash[tid]) for tid in moved}
    for tid, entries in lay.stash.items():
        if tid not in moved:
            a0, a1 = extent(entries)
            assert not any(a0 < b1 and b0 < a1 for b0, b1 in mine), tid
    per_microbatch = sum(stash_bytes(g, mj, tid) for tid in moved)
    assert lay.bytes_by_part["X"] == 2 * per_microbatch


def test_swap_dp_two_ranks_trains_like_pytorch_with_shared_stash():
    runtime = pytest.importorskip("harmony.runtime")
    spec, mj = load_model("mlp-tiny")
    cfg = swap_dp_config(mj, D, 2, 2)
    rec = schedule_record("swap-dp", mj, cfg, cap=None, precision="fp32")
    graph = TaskGraph.from_json(rec["graph"])
    lay, _ = layout("mlp-tiny", graph)
    assert check_sharing_is_safe(lay, graph) > 0
    iters = 3
    losses, params, _ = runtime.train_with_schedule(rec, graph, iters=iters)
    ref_losses, ref_layers = train_reference(spec, load_batches(spec, "synthetic", D, iters))
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    assert max_relative_difference(params, [p.detach() for p in ref_layers.parameters()]) <= 1e-6
