"""Streaming P2P channels: which GPU pairs talk, and that both ends post their messages in one order."""
import pytest

from harmony.runtime.p2p import check_channel_order, chunks, remote_edges, tag
from harmony.schedule.tasks import ScheduleConfig, ScheduleError, build_task_graph

L = 10


def graph(**kw):
    base = dict(mode="vPP", gpus=2, minibatch=8, ubatch_fwd=4, ubatch_bwd=2,
                bwd_packs=((0, 3), (3, 6), (6, 10)), fwd_packs=((0, 3), (3, 6)))
    base.update(kw)
    return build_task_graph(ScheduleConfig(**base))


@pytest.mark.parametrize("N", [2, 3, 4])
def test_round_robin_channels_are_consistent(N):
    packs = tuple((i, i + 1) for i in range(L))
    g = graph(gpus=N, bwd_packs=packs, fwd_packs=packs[:-1])
    chans = check_channel_order(g)
    edges = remote_edges(g)
    assert chans == sorted({e.channel for e in edges})
    # round-robin in execution order: every forward activation goes to the next GPU
    assert {e.channel for e in edges if e.kind == "act"} >= {(r, (r + 1) % N) for r in range(N)}
    assert {e.kind for e in edges} == {"act", "grad"}
    assert all(e.producer.id < e.consumer.id and e.producer.rank != e.consumer.rank for e in edges)


def test_vdp_has_no_channels():
    assert check_channel_order(graph(mode="vDP")) == []


def test_gpipe_stages_are_consistent():
    packs = tuple((i, i + 1) for i in range(L))
    g = graph(gpus=2, ubatch_fwd=2, group_size=1, placement="stages", stages=((0, 5), (5, 10)),
              bwd_packs=packs, fwd_packs=packs[:-1])
    assert check_channel_order(g) == [(0, 1), (1, 0)]


def test_loss_stage_fed_by_the_previous_stage_is_consistent():
    """The loss pack's stage consumes the previous stage's forward outputs directly: GPipe's backward
    groups run in forward order, so the loss tasks take the outputs in the order they were sent."""
    g = graph(gpus=2, ubatch_fwd=2, group_size=1, placement="stages", stages=((0, 3), (3, 10)),
              bwd_packs=((0, 3), (3, 10)), fwd_packs=((0, 3),))
    assert check_channel_order(g) == [(0, 1), (1, 0)]


def test_out_of_order_channel_is_refused():
    """A graph whose receiver would take a channel's messages in another order than they are sent."""
    g = graph(gpus=2, ubatch_fwd=2, group_size=1, placement="stages", stages=((0, 3), (3, 10)),
              bwd_packs=((0, 3), (3, 10)), fwd_packs=((0, 3),))
    losses = [t for t in g.tasks if t.kind == "BWD" and t.pack == (3, 10)]
    a, b = losses[0], losses[1]
    a.act_in, b.act_in = b.act_in, a.act_in         # loss task of group 0 reads group 1's output
    with pytest.raises(ScheduleError, match="NCCL matches messages by order"):
        check_channel_order(g)


def test_tags_are_unique():
    g = graph(gpus=2)
    seen = set()
    for e in remote_edges(g):
        for i, _ in enumerate(chunks(e.producer)):
            for j in range(3):
                k = tag(e.producer.id, e.kind, i, j)
                assert k not in seen and 0 <= k < 2**31
                seen.add(k)
