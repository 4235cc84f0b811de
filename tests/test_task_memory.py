"""The task memory rule (harmony.schedule.memory) against the runtime's own tasks on the CPU.

The worker's per-task memory probe (`HARMONY_TASK_PEAKS`, docs/runtime.md) records each compute task's peak:
on CUDA from the caching allocator, on the CPU from the storages the worker's thread makes
(harmony.gpumem.MemoryMeter). Here the tiny model of every family is profiled on the CPU and run under the
probe with a plan of one microbatch per task and one of two; every task must stay within what the simulator
charges it (its own peak plus the next task's prefetch, as `experiments/resimulate_runs.py --task-peaks`
compares on the GPU). And gpt2-tiny's one-microbatch loss pack, which entry 87's rule (LayerCosts.one_pass)
models without the dW it has not made, the group input counted twice or an outgoing-gradient buffer, must be
modelled to within a few bytes, where the older rule was over by the LM head's dW and more.
"""
from __future__ import annotations

import pytest

from harmony import profile as hp
from harmony.decompose import decompose_model
from harmony.models import get_model
from harmony.pack_check import check_tasks_cpu
from harmony.schedule.memory import LayerCosts
from harmony.schedule.tasks import ScheduleConfig, build_task_graph

D = 8
FAMILIES = ("mlp-tiny", "gpt2-tiny", "bert-tiny", "vgg-tiny", "resnet-tiny")
OVERRIDES = {"resnet-tiny": {"image_size": 64}}     # as tests/test_runtime.py: BatchNorm is not chaotic there
_PROFILED: dict = {}


def profiled(name: str):
    """(model.json, LayerCosts of a CPU profile at u = 4 and 8), once per module."""
    if name not in _PROFILED:
        ov = OVERRIDES.get(name, {})
        mj = decompose_model(get_model(name, **ov), source={"kind": "zoo", "name": name, "overrides": ov},
                             with_flops=False)
        prof = hp.profile_model(mj, hp.ProfileOptions(ubatch=[4, 8], trials=1, progress=False))
        _PROFILED[name] = (mj, LayerCosts(prof))
    return _PROFILED[name]


def probed_run(mj, costs, u):
    """(task, measured peak, the simulator's own task peak, the next task's prefetch) per compute task."""
    L = mj["num_vlayers"]
    cfg = ScheduleConfig(mode="vPP", gpus=1, minibatch=D, ubatch_fwd=u, ubatch_bwd=u,
                         bwd_packs=((0, 2), (2, L - 3), (L - 3, L)), fwd_packs=((0, 2), (2, L - 3)))
    return [(x["task"], x["measured_bytes"], x["own_bytes"], x["prefetch_bytes"])
            for x in check_tasks_cpu(mj, costs, build_task_graph(cfg, L))]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_task_the_runtime_runs_stays_within_the_simulators_memory_charge(name):
    """One microbatch per task (u = D) and two (u = D/2): each task's measured peak is at most its modelled
    own peak plus the next task's prefetch. (The CPU issues that prefetch after the task, the GPU beside it:
    the simulator's charge bounds both.)"""
    mj, costs = profiled(name)
    for u in (D, D // 2):
        for t, measured, own, prefetch in probed_run(mj, costs, u):
            assert measured <= own + prefetch, (u, t.kind, t.pack, measured, own, prefetch)


def test_a_one_microbatch_loss_pack_is_modelled_to_the_byte_where_the_older_rule_was_over_by_its_dw():
    mj, costs = profiled("gpt2-tiny")
    L = mj["num_vlayers"]
    loss = [x for x in probed_run(mj, costs, D) if x[0].kind == "BWD" and x[0].pack[1] == L]
    (t, measured, own, _), = loss
    old = costs.task_bytes("BWD", *t.pack, D, D)            # the rule before entry 87
    assert abs(measured - own) <= 64, (measured, own)
    assert old - own >= costs.grads(*t.pack), (old, own)      # at least the LM head's dW less
