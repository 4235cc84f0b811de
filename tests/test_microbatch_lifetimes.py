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

from harmony.runtime.worker import GradSpan, Worker

N, U = 6, 2


class _Task(SimpleNamespace):
    allreduce = False          # one GPU: no all-reduce, so autograd makes dW (the buffer is vDP's, below)
    grad_keep = False

    def microbatches(self):
        return [(lo, min(lo + U, N)) for lo in range(0, N, U)]


class _Input:
    def __init__(self, x):
        self.x = x

    def microbatch(self, lo, hi):
        return (self.x[lo:hi],)


def _worker(run_layers):
    w = SimpleNamespace(device=torch.device("cpu"), precision="fp32", rank=0, current=None, acts={}, grads_out={},
                        cfg=SimpleNamespace(num_layers=3, minibatch=N), loss_acc=torch.zeros(()), keep_layout=False)
    w._fault_point = lambda t, it: None
    w._specs = lambda layer: [(None, torch.float32)]
    w._run_layers = run_layers
    w._finish_grads = lambda t, it, reduce_into=None: None
    for name in ("_fwd_microbatch", "_bwd_microbatch", "_rows_like"):
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


def test_a_one_microbatch_bwd_makes_its_dw_layer_by_layer_and_hands_on_autograds_dx():
    """What the memory rule for a BWD of one microbatch (LayerCosts.one_pass, docs/performance.md entry 87)
    counts on: while the upper vLayer runs its backward the lower one has no dW yet (the task starts with
    `p.grad` None, as Worker.install leaves it without kept gradients), and the input gradient handed to the
    pack below is autograd's dX itself, not a group buffer. With two microbatches the worker gathers the
    group's input gradient into a buffer of its own, as the general rule counts."""
    lower, upper = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    seen = []

    class Probe(torch.autograd.Function):      # between the vLayers: its backward runs after the upper one's
        @staticmethod
        def forward(ctx, y):
            return y.view_as(y)

        @staticmethod
        def backward(ctx, g):
            seen.append(lower.grad)
            return g

    def run_layers(t, xs, it, lo):
        return (Probe.apply(xs[0] * lower) * upper,)

    for n in (U, 2 * U):                       # one microbatch of the group, then two
        lower.grad = upper.grad = None
        x, gy = torch.randn(n, 3), torch.randn(n, 3)
        w = _worker(run_layers)
        w.get_input = lambda t, it, fetched: _Input(x)
        w.get_grad = lambda t: _Input(gy)
        w.grad_consumer = {1: SimpleNamespace(rank=0)}
        made = []
        w._bwd_microbatch = lambda *a, _f=w._bwd_microbatch: made.append(_f(*a)) or made[-1]
        t = _Task(id=1, kind="BWD", pack=(1, 2), samples=(0, n), num_samples=n, grad_in=0)
        t.microbatches = lambda n=n: [(lo, min(lo + U, n)) for lo in range(0, n, U)]
        seen.clear()
        Worker.run_bwd(w, t, 0, {})
        assert seen[0] is None                 # the first microbatch: the lower vLayer's dW not made yet
        assert all(g is not None for g in seen[1:]) and len(seen) == n // U   # later ones add into dW
        torch.testing.assert_close(w.grads_out[1][0], gy * (lower * upper).detach())
        assert (w.grads_out[1][0] is made[0][0]) is (n == U)


def test_install_leaves_a_parameter_without_a_gradient_unless_the_previous_bwd_kept_one():
    """A task's weights are installed with `p.grad` None, so its backward makes dW vLayer by vLayer (the
    memory rule's one-pass form); only dW kept by the previous BWD of the same pack (swap-pp's grad_keep) is
    installed with them, and then the whole pack's dW is there from the start (the general form)."""
    from torch import nn
    tensors = [torch.randn(3)]
    kept = torch.ones(3)
    for kept_grads, want in (({}, None), ({0: {0: kept}}, kept)):
        params: dict = {}
        w = SimpleNamespace(installed=set(), kept_grads=dict(kept_grads), resident={},
                            copier=SimpleNamespace(ready=lambda buffers, ev: None),
                            param_slots={0: [(params, "weight", True, 0)]}, buffer_slots={0: []})
        Worker.install(w, SimpleNamespace(pack=(0, 1)), {0: (tensors, None, None)})
        assert isinstance(params["weight"], nn.Parameter) and params["weight"].grad is want


def test_a_vdp_bwd_accumulates_dw_into_the_buffer_its_all_reduce_sums_in_place():
    """vDP across GPUs (docs/performance.md entry 89): before the backward the worker makes the pack's dW
    views of one zeroed buffer, autograd accumulates into them over the task's microbatches, and the
    all-reduce sums that buffer itself. It used to concatenate the gradients into a copy, which held the
    pack's dW twice at that moment (the CPU task probe: vgg-tiny's [2, 10) BWD 75 KB over its charge at
    N = 2). A gradient kept by the previous BWD (grad_keep) leaves the worker on the copy path. The buffer
    mirrors the arena's dW range, alignment padding included (entry 99): the second gradient starts 64 bytes
    (16 float32) in, and the padding between is reduced as zeros."""
    from torch import nn
    for kept in (False, True):
        lower, upper = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
        x, gy = torch.randn(2 * U, 3), torch.randn(2 * U, 3)
        w = _worker(lambda t, xs, it, lo: (xs[0] * lower * upper,))
        w.cfg.num_layers = 4
        w.get_input = lambda t, it, fetched: _Input(x)
        w.get_grad = lambda t: _Input(gy)
        w.grad_consumer, w.N, w.ordered_reduce = {}, 2, False
        w.counters = SimpleNamespace(add=lambda *a: None)
        w.grad_slots = {1: [({"w": lower}, "w", None)], 2: [({"w": upper}, "w", None)]}
        w.grad_spans = {(1, 3): GradSpan(torch.empty(19 * 4, dtype=torch.uint8), torch.float32, [0, 16])}
        made, reduced = [], []
        w._grads_into_one_buffer = lambda t, _f=Worker._grads_into_one_buffer.__get__(w): made.append(_f(t)) or made[-1]
        w._finish_grads = Worker._finish_grads.__get__(w)
        w._all_reduce = lambda flat, to_host_only: reduced.append(flat.clone()) or flat.mul_(2)   # two equal ranks
        if kept:
            lower.grad = torch.zeros(3)
        t = _Task(id=1, kind="BWD", pack=(1, 3), samples=(0, 2 * U), num_samples=2 * U, grad_in=0,
                  allreduce=True, grad_keep=False, grad_to_host=False)
        t.microbatches = lambda: [(0, U), (U, 2 * U)]
        Worker.run_bwd(w, t, 0, {})
        want = torch.cat([(gy * x * upper).sum(0), (gy * x * lower).sum(0)]).detach()
        if kept:                                 # a kept dW: the copy, as before
            assert made == [None]
            torch.testing.assert_close(reduced[0], want)
        else:                                    # the buffer autograd accumulated into is the one reduced
            padded = torch.cat([want[:3], torch.zeros(13), want[3:]])
            torch.testing.assert_close(reduced[0], padded)
            assert made[0] is not None and made[0].shape == (19,)
            torch.testing.assert_close(made[0], 2 * padded)
        assert lower.grad is None and upper.grad is None
