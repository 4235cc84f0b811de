"""A BWD task's stash streams in one microbatch ahead (harmony.runtime.transfer.StashInput): it hands out
each microbatch's samples in order, counts the whole stash's bytes once, refuses out-of-order reads, and
never holds more than the current and the next microbatch (docs/performance.md entry 37). The runtime's
end-to-end checks against PyTorch (tests/test_runtime.py) run it in every stash-fed BWD task."""
from __future__ import annotations

import weakref

import pytest
import torch

from harmony.runtime.transfer import Copier, Counters, StashInput


def _stash(n=10, u=3, s0=20):
    views = [torch.arange(n * 4, dtype=torch.float32).reshape(n, 4), torch.arange(n, dtype=torch.int64)]
    mbs = [(s0 + lo, s0 + min(lo + u, n)) for lo in range(0, n, u)]
    counters = Counters()
    copier = Copier(torch.device("cpu"), counters, "compute-stream")
    return views, mbs, counters, copier, s0


def test_microbatches_in_order_with_the_whole_stash_counted_once():
    views, mbs, counters, copier, s0 = _stash()
    first = copier.h2d(StashInput.slices(views, s0, *mbs[0]), "h2d_act")
    inp = StashInput(copier, views, s0, mbs, first)
    for lo, hi in mbs:
        got = inp.microbatch(lo, hi)
        for g, v in zip(got, views, strict=True):
            assert torch.equal(g, v[lo - s0:hi - s0])
            assert g.data_ptr() != v.data_ptr()      # a copy, not the host tensor
    assert counters.take()["h2d_act"] == sum(v.numel() * v.element_size() for v in views)


def test_out_of_order_read_is_an_error():
    views, mbs, _, copier, s0 = _stash()
    inp = StashInput(copier, views, s0, mbs, copier.h2d(StashInput.slices(views, s0, *mbs[0]), "h2d_act"))
    with pytest.raises(RuntimeError, match="out of order"):
        inp.microbatch(*mbs[1])
    inp.microbatch(*mbs[0])
    inp.microbatch(*mbs[1])
    with pytest.raises(RuntimeError, match="out of order"):
        inp.microbatch(*mbs[1])


def test_at_most_two_microbatches_are_held():
    views, mbs, _, copier, s0 = _stash(n=12, u=2)
    alive: list[weakref.ref] = []
    reserve = copier.reserve

    def tracked(srcs):
        outs, ev = reserve(srcs)
        alive.extend(weakref.ref(o) for o in outs)
        return outs, ev
    copier.reserve = tracked
    first = copier.h2d(StashInput.slices(views, s0, *mbs[0]), "h2d_act", into=copier.reserve(
        StashInput.slices(views, s0, *mbs[0])))
    inp = StashInput(copier, views, s0, mbs, first)
    del first
    most = 0
    for lo, hi in mbs:
        xs = inp.microbatch(lo, hi)       # the task's use of microbatch i, with i + 1 loading
        most = max(most, sum(r() is not None for r in alive) // len(views))
        del xs
    assert most == 2
    assert len(alive) == len(mbs) * len(views)           # every microbatch had a buffer of its own
