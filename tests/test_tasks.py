"""The task graph: structure, placement, residency and the byte accounting both interpreters share."""
import itertools

import pytest

from harmony.schedule.tasks import (LayerSizes, ScheduleConfig, ScheduleError, TaskGraph, build_task_graph,
                                    count_bytes, rank_samples, sample_groups, validate_graph)

L = 10
SIZES = LayerSizes(weight_bytes=tuple(100 + i for i in range(L)), grad_bytes=tuple(100 + i for i in range(L)),
                   input_bytes_per_sample=(7,) * L, output_bytes_per_sample=(7,) * L)


def cfg(**kw):
    base = dict(mode="vPP", gpus=1, minibatch=8, ubatch_fwd=4, ubatch_bwd=2,
                bwd_packs=((0, 3), (3, 6), (6, 10)), fwd_packs=((0, 3), (3, 6)))
    base.update(kw)
    return ScheduleConfig(**base)


def test_harmony_single_gpu_order_and_bytes():
    g = build_task_graph(cfg())
    assert [(t.kind, t.pack) for t in g.tasks] == [
        ("FWD", (0, 3)), ("FWD", (3, 6)), ("BWD", (6, 10)), ("UPD", (6, 10)),
        ("BWD", (3, 6)), ("UPD", (3, 6)), ("BWD", (0, 3)), ("UPD", (0, 3))]
    b = count_bytes(g, SIZES)
    W = sum(SIZES.weight_bytes)
    # weights: forward packs [0,6) once, every backward pack once
    assert b["h2d_weights"] == sum(SIZES.weight_bytes[:6]) + W
    assert b["d2h_grads"] == W                       # gradients leave once per pack
    assert b["d2h_act"] == 8 * 7                     # one stash: input of bwd pack [3,6)
    assert b["h2d_act"] == 8 * 7 * 3                 # data (FWD), stash back, data (BWD [0,3))
    assert b["p2p"] == 0 and b["allreduce"] == 0


def test_microbatches_with_remainder():
    g = build_task_graph(cfg(minibatch=7, ubatch_fwd=3, ubatch_bwd=2))
    fwd = g.tasks[0]
    assert fwd.microbatches() == [(0, 3), (3, 6), (6, 7)]
    bwd = [t for t in g.tasks if t.kind == "BWD"][0]
    assert bwd.microbatches() == [(0, 2), (2, 4), (4, 6), (6, 7)]


def test_vpp_round_robin_and_p2p():
    g = build_task_graph(cfg(gpus=2))
    compute = [t for t in g.tasks if t.kind != "UPD"]
    assert [t.rank for t in compute] == [0, 1, 0, 1, 0]
    for t in g.tasks:
        if t.kind == "UPD":
            assert t.rank == g.tasks[t.deps[-1]].rank
    assert count_bytes(g, SIZES)["p2p"] > 0


def test_vdp_shares_allreduce_and_single_gradient_copy():
    g = build_task_graph(cfg(mode="vDP", gpus=2, minibatch=9, ubatch_fwd=2, ubatch_bwd=2))
    assert rank_samples(9, 2, "vDP") == [(0, 5), (5, 9)]
    b = count_bytes(g, SIZES)
    W = sum(SIZES.weight_bytes)
    assert b["d2h_grads"] == W                        # one rank sends each pack's reduced gradient
    # ring all-reduce: each of the 2 ranks sends 2(N-1)/N = 1x each pack's gradient
    assert b["allreduce"] == 2 * W
    upd_ranks = sorted(t.rank for t in g.tasks if t.kind == "UPD")
    assert upd_ranks == [0, 0, 1]                     # packs spread over ranks (i mod N)


@pytest.mark.parametrize("group", [None, 1])
def test_vdp_update_follows_the_updating_ranks_own_last_backward(group):
    """A worker submits its UPDs in its task order. Placed after the last rank's BWD of the pack, rank 0's
    updates came after all of its own tasks and ran once its GPU had finished (performance log 22): each
    must follow the updating rank's own last BWD of the pack, the other replicas' gradients coming
    through that BWD's all-reduce."""
    g = build_task_graph(cfg(mode="vDP", gpus=3, minibatch=12, ubatch_fwd=2, ubatch_bwd=2, group_size=group))
    validate_graph(g)
    for r in range(3):
        mine = g.rank_tasks(r)
        for i, t in enumerate(mine):
            if t.kind == "UPD":
                own_bwd = [k for k, x in enumerate(mine) if x.kind == "BWD" and x.pack == t.pack]
                assert i == max(own_bwd) + 1, (r, t.pack, [(x.kind, x.pack) for x in mine])
                assert {g.tasks[d].rank for d in t.deps} == {0, 1, 2}      # it still waits for every replica
    assert sum(t.kind == "UPD" and t.rank == 0 for t in g.tasks) == 1


def test_schedule_with_the_old_update_placement_loads_with_the_new_one(tmp_path):
    """schedule.json files written before the change differ only in where the UPDs sit: they load (with
    the current placement), while any other difference from the rebuilt task list is still refused."""
    from harmony.schedule.io import load_schedule, make_schedule_record, save_schedule
    g = build_task_graph(cfg(mode="vDP", gpus=2, minibatch=8, ubatch_fwd=2, ubatch_bwd=2))
    # the old placement: each UPD after the pack's last BWD on any rank, ids renumbered
    compute = [t for t in g.tasks if t.kind != "UPD"]
    upds = {t.pack: t for t in g.tasks if t.kind == "UPD"}
    last = {p: max((t for t in compute if t.kind == "BWD" and t.pack == p), key=lambda t: t.id) for p in upds}
    order = []
    for t in compute:
        order.append(t)
        order += [upds[p] for p in upds if last[p] is t]
    old_id = {id(t): t.id for t in g.tasks}
    new_id = {old_id[id(t)]: i for i, t in enumerate(order)}
    old = TaskGraph.from_json(g.to_json())
    old.tasks = []
    for i, t in enumerate(order):
        d = t.to_json()
        d["id"] = i
        if d["act_in"][0] in ("task", "stash"):
            d["act_in"] = [d["act_in"][0], new_id[d["act_in"][1]]]
        if d["grad_in"] is not None:
            d["grad_in"] = new_id[d["grad_in"]]
        d["deps"] = [new_id[x] for x in d["deps"]]
        old.tasks.append(type(t).from_json(d))
    assert [t.to_json() for t in old.tasks] != [t.to_json() for t in g.tasks]
    model = {"model": "m", "num_vlayers": L}
    path = tmp_path / "old.json"
    save_schedule(path, make_schedule_record(model, old))
    rec, loaded = load_schedule(path)
    assert [t.to_json() for t in loaded.tasks] == [t.to_json() for t in g.tasks]
    assert rec["graph"] == g.to_json()
    old.tasks[1].ubatch += 1                                    # any other difference: refused
    save_schedule(path, make_schedule_record(model, old))
    with pytest.raises(ScheduleError, match="does not match its config"):
        load_schedule(path)


def test_pin_keeps_shared_weights_between_last_fwd_and_first_bwd():
    # reuse packing, 2 GPUs: GPU1's last FWD [3,6) and first BWD [3,6) share all layers
    g = build_task_graph(cfg(gpus=2))
    fwd36 = [t for t in g.tasks if t.kind == "FWD" and t.pack == (3, 6)][0]
    bwd36 = [t for t in g.tasks if t.kind == "BWD" and t.pack == (3, 6)][0]
    assert fwd36.rank == bwd36.rank
    assert fwd36.keep_layers == (3, 6) and bwd36.load_layers == (3, 3)
    g2 = build_task_graph(cfg(gpus=2, pin_shared=False))
    assert count_bytes(g2, SIZES)["h2d_weights"] - count_bytes(g, SIZES)["h2d_weights"] == sum(SIZES.weight_bytes[3:6])


def test_swap_dp_moves_weights_per_microbatch():
    harmony = build_task_graph(cfg(mode="vDP", ubatch_fwd=2, ubatch_bwd=2))
    swap = build_task_graph(cfg(mode="vDP", ubatch_fwd=2, ubatch_bwd=2, group_size=1, pin_shared=False))
    hb, sb = count_bytes(harmony, SIZES), count_bytes(swap, SIZES)
    assert sb["h2d_weights"] == 4 * hb["h2d_weights"]       # 4 microbatches
    assert sb["d2h_grads"] == 4 * hb["d2h_grads"]
    accum = [t.grad_accumulate for t in swap.tasks if t.kind == "BWD"]
    assert accum.count(False) == 3                           # first microbatch of each pack starts the sum


def test_stage_placement_is_static():
    g = build_task_graph(cfg(gpus=2, ubatch_fwd=2, group_size=1, placement="stages",
                             bwd_packs=((0, 5), (5, 10)), fwd_packs=((0, 5),)))
    ranks = {t.pack: t.rank for t in g.tasks if t.kind != "UPD"}
    assert ranks == {(0, 5): 0, (5, 10): 1}


@pytest.mark.parametrize("mode,gpus,group", list(itertools.product(["vPP", "vDP"], [1, 2, 3], [None, 1])))
def test_json_round_trip_and_validation(mode, gpus, group):
    c = cfg(mode=mode, gpus=gpus, minibatch=12, ubatch_fwd=2, ubatch_bwd=2, group_size=group)
    g = build_task_graph(c)
    g2 = TaskGraph.from_json(g.to_json())
    assert [t.to_json() for t in g2.tasks] == [t.to_json() for t in g.tasks]
    # every producer precedes its consumer; each rank's list is the global order restricted to it
    for t in g.tasks:
        if t.act_in[0] != "data" and t.kind != "UPD":
            assert t.act_in[1] < t.id
        if t.grad_in is not None:
            assert t.grad_in < t.id


@pytest.mark.parametrize("bad,msg", [
    (dict(bwd_packs=((0, 3), (4, 10))), "contiguous"),
    (dict(fwd_packs=((0, 4), (4, 6))), "crosses the start"),
    (dict(ubatch_fwd=1, ubatch_bwd=2), "u_fwd"),
    (dict(mode="vDP", gpus=16, minibatch=8), "smaller than the number of GPUs"),
    (dict(mode="vXP"), "mode"),
    (dict(fwd_packs=((0, 3),)), "ends at layer"),
])
def test_bad_configs_are_named(bad, msg):
    with pytest.raises(ScheduleError, match=msg):
        build_task_graph(cfg(**bad))


def test_sample_groups():
    assert sample_groups((0, 10), 3, None) == [(0, 10)]
    assert sample_groups((0, 10), 3, 1) == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_gpipe_flush_stashes_the_loss_packs_input_when_its_forward_is_on_the_same_gpu():
    """Entry 85: in GPipe order every group's forward runs before the first backward, so the loss pack's
    input, made by the last forward task, would wait on its GPU through the rest of the forward pass. It
    is stashed in host memory like every other pack's input: one more D2H and H2D of it per microbatch.
    Where the loss pack runs right after that forward (Harmony's one group, swap-dp's microbatch by
    microbatch) or on another GPU (sent over P2P), it still continues from the task."""
    packs = tuple((i, i + 1) for i in range(L - 1)) + ((L - 1, L),)
    one_gpu = dict(gpus=1, ubatch_fwd=2, ubatch_bwd=2, bwd_packs=packs, fwd_packs=packs[:-1])
    gpipe = build_task_graph(cfg(group_size=1, placement="stages", stages=((0, L),), **one_gpu))
    loss = [t for t in gpipe.tasks if t.kind == "BWD" and t.pack == packs[-1]]
    assert len(loss) == 4 and all(t.act_in[0] == "stash" for t in loss)
    assert all(gpipe.tasks[t.act_in[1]].stash_out for t in loss)
    # the last FWD's output (pack [L-2, L-1)) now goes to host and back: 8 samples x 7 bytes each way,
    # on top of the other packs' stashes (every FWD but the first stashes its input for its BWD)
    b = count_bytes(gpipe, SIZES)
    assert b["d2h_act"] == 8 * 7 * (L - 1)
    harmony = build_task_graph(cfg(**one_gpu))
    swap_dp = build_task_graph(cfg(mode="vDP", group_size=1, pin_shared=False, **one_gpu))
    across = build_task_graph(cfg(gpus=2, ubatch_fwd=2, ubatch_bwd=2, group_size=1, placement="stages",
                                  stages=((0, L - 1), (L - 1, L)), bwd_packs=packs, fwd_packs=packs[:-1]))
    for g in (harmony, swap_dp, across):
        assert all(t.act_in[0] == "task" for t in g.tasks if t.kind == "BWD" and t.pack == packs[-1])


def test_gpipe_resident_stage_sends_gradients_once():
    """swap-pp with whole stages resident: the BWDs of a stage accumulate dW on the GPU (grad_keep) and
    only the stage's last BWD of the iteration sends it: one gradient copy per pack, as in GPipe."""
    g = build_task_graph(cfg(gpus=2, ubatch_fwd=2, ubatch_bwd=2, group_size=1, placement="stages",
                             stages=((0, 6), (6, 10)), bwd_packs=((0, 6), (6, 10)), fwd_packs=((0, 6),)))
    bwds = [t for t in g.tasks if t.kind == "BWD"]
    assert len(bwds) == 8
    for pack in ((0, 6), (6, 10)):
        mine = [t for t in bwds if t.pack == pack]
        assert [t.grad_keep for t in mine] == [True, True, True, False]
        assert [t.grad_to_host for t in mine] == [False, False, False, True]
        assert not any(t.grad_accumulate for t in mine)
    assert count_bytes(g, SIZES)["d2h_grads"] == sum(SIZES.grad_bytes)
    # swapped stages (one vLayer per pack) and swap-dp keep sending per microbatch
    packs = tuple((i, i + 1) for i in range(L))
    g2 = build_task_graph(cfg(gpus=2, ubatch_fwd=2, ubatch_bwd=2, group_size=1, placement="stages",
                              stages=((0, 5), (5, 10)), bwd_packs=packs, fwd_packs=packs[:-1]))
    assert not any(t.grad_keep for t in g2.tasks)
    assert count_bytes(g2, SIZES)["d2h_grads"] == 4 * sum(SIZES.grad_bytes)
