"""Nothing of a microbatch outlives it in a FWD or BWD task (harmony.runtime.worker, docs/performance.md entry
38). The pack rule charges a task one microbatch's working set; the runtime once kept the previous
microbatch's output (FWD), output and input gradient (BWD) alive through the next microbatch's forward, u x Y
more than the rule, which made vgg416 D = 256 peak 0.73 GiB over its prediction on the H100. Here the
worker's task methods run on stand-ins for its plumbing, and the vLayers check, each time they are called,
that every tensor the previous microbatch made is gone."""
from __future__ import annotations

import weakref
from types import SimpleNamespace

import torch

from harmony.runtime.worker import Worker

N, U = 6, 2


class _Task(SimpleNamespace):
    def microbatches(self):
        return [(lo, min(lo + U, N)) for lo in range(0, N, U)]


class _Input:
    def __init__(self, x):
        self.x = x

    def microbatch(self, lo, hi):
        return (self.x[lo:hi],)


def _worker(run_layers):
    w = SimpleNamespace(device=torch.device("cpu"), precision="fp32", rank=0, current=None, acts={}, grads_out={},
                        cfg=SimpleNamespace(num_layers=3, minibatch=N), loss_acc=torch.zeros(()))
    w._fault_point = lambda t, it: None
    w._specs = lambda layer: [(None, torch.float32)]
    w._run_layers = run_layers
    w._finish_grads = lambda t, it: None
    for name in ("_fwd_microbatch", "_bwd_microbatch"):
        setattr(w, name, getattr(Worker, name).__get__(w))
    return w


def _tracking_layer(weight=None):
    """A vLayer (y = 2x, or y = w x) that asserts the previous call's input and output are freed."""
    alive: list[weakref.ref] = []

    def run_layers(t, xs, it, lo):
        assert all(r() is None for r in alive), "a tensor of the previous microbatch is still alive"
        alive.clear()
        y = xs[0] * (2.0 if weight is None else weight)
        alive.extend([weakref.ref(xs[0]), weakref.ref(y)])
        return (y,)
    return run_layers


def test_fwd_task_frees_each_microbatch_output_before_the_next_forward():
    x = torch.randn(N, 3)
    w = _worker(_tracking_layer())
    w.get_input = lambda t, it, fetched: _Input(x)
    w.act_consumer = {0: SimpleNamespace(rank=0)}      # consumed on this GPU: outputs gathered for the group
    t = _Task(id=0, kind="FWD", pack=(0, 1), samples=(0, N), num_samples=N, stash_out=False)
    Worker.run_fwd(w, t, 0, {})
    assert torch.equal(w.acts[0][0], 2 * x)


def test_bwd_task_frees_each_microbatch_output_and_input_gradient_before_the_next():
    x, gy = torch.randn(N, 3), torch.randn(N, 3)
    weight = torch.randn(3, requires_grad=True)
    w = _worker(_tracking_layer(weight))
    w.get_input = lambda t, it, fetched: _Input(x)
    w.get_grad = lambda t: _Input(gy)
    w.grad_consumer = {1: SimpleNamespace(rank=0)}     # the pack below takes the input gradient
    t = _Task(id=1, kind="BWD", pack=(1, 2), samples=(0, N), num_samples=N, grad_in=0)
    Worker.run_bwd(w, t, 0, {})
    torch.testing.assert_close(w.grads_out[1][0], gy * weight.detach())
    torch.testing.assert_close(weight.grad, (gy * x).sum(0))
