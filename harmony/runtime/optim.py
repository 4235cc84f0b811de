"""Per-pack CPU optimizer updates on the host arena, in threads, so a pack's UPD overlaps the backward
tasks that follow it.

Each backward pack gets its own optimizer (harmony.optim.make_optimizer: fused CPU AdamW/Adam/SGD) over
nn.Parameters that *are* the arena's W views, with `.grad` = the arena's dW views and the optimizer state K
pre-placed in the arena (so K is shared memory too, and counted in the host-memory check). The element-wise
update of one optimizer over all parameters equals the per-pack updates, so this is the reference's
optimizer exactly.

Small parameters can be stepped as one (`coalesce_below`; off by default, see COALESCE_BELOW): a fused CPU
step still handles one tensor at a time, and each costs a parallel region's fork and join (~15 us with
passive OpenMP waits on 2 cores, for a BatchNorm weight of 64 values), which dominated the updates of
models made of thousands of small tensors (resnet1026: 2,057 of its 3,086 tensors hold under 4,096
values; docs/performance.md entry 29). Their
weights and gradients are gathered into one flat parameter, stepped with its own flat optimizer state,
and the new weights scattered back into the arena. The update is element-wise, so this is the same
arithmetic; the flat state is a few MB outside the arena (counted nowhere else). A pack in which a small
parameter has no gradient in some iteration (torch skips such a parameter: no weight decay, no momentum)
goes back to one tensor at a time for good, its flat state copied into the arena's K first; until then
every parameter had the same history, so the copy is exact.

Gradient arrivals (device->host copies, possibly accumulated over microbatch groups) are finished by a
single ordered "signal" thread; the UPD job waits for its pack's arrivals, steps, and publishes
`upd_done[pack] = iteration + 1` in the arena, which a worker's next-iteration weight load waits for.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import nn

from harmony.optim import OptimizerConfig, make_optimizer, set_lr
from harmony.runtime.host_store import HostArena
from harmony.runtime.transfer import wait_event


def _prefill_state(opt: torch.optim.Optimizer, params: list[nn.Parameter], states: list[list[torch.Tensor]],
                   cfg: OptimizerConfig, zero: bool = True) -> None:
    """Put the optimizer's per-parameter state into the arena views (zero-initialised, as torch would, unless
    `zero` is False: the views already hold the state of earlier steps)."""
    fused = bool(opt.param_groups[0].get("fused"))
    for p, ks in zip(params, states):
        for k in ks:
            if zero:
                k.zero_()
        if cfg.kind in ("adam", "adamw"):
            from torch.optim.optimizer import _get_scalar_dtype
            opt.state[p] = {"step": torch.zeros((), dtype=_get_scalar_dtype(is_fused=fused)),
                            "exp_avg": ks[0], "exp_avg_sq": ks[1]}
        elif cfg.kind == "sgd" and ks:
            # 0.9 * 0 + g == g exactly: the same first step as torch's lazily cloned buffer
            opt.state[p] = {"momentum_buffer": ks[0]}


# Parameters with fewer values are stepped as one flat tensor (0: never). Off by default: on the H100 it
# halved resnet1026's stepping time but made the iterations 2-3% longer (docs/performance.md entry 29).
COALESCE_BELOW = 0


class _PackOptimizer:
    """The optimizer of one backward pack over the arena's W, dW and K views: the parameters with at least
    `coalesce_below` values one tensor each, the others (when two or more) as one flat parameter."""

    def __init__(self, weights: list[torch.Tensor], grads: list[torch.Tensor], states: list[list[torch.Tensor]],
                 cfg: OptimizerConfig, coalesce_below: int):
        self.cfg = cfg
        self.params = [nn.Parameter(w, requires_grad=True) for w in weights]
        self.grads, self.states = grads, states
        small = [i for i, w in enumerate(weights) if w.numel() < coalesce_below]
        if len(small) < 2 or len({weights[i].dtype for i in small}) != 1:
            small = []
        self.small = small                       # indices stepped through the flat parameter
        small_set = set(small)
        self.big = [i for i in range(len(weights)) if i not in small_set]
        self.flat = self.flat_grad = None
        flat_states: list[torch.Tensor] = []
        if small:
            sizes = [weights[i].numel() for i in small]
            self.sizes, total, dt = sizes, sum(sizes), weights[small[0]].dtype
            self.flat = nn.Parameter(torch.empty(total, dtype=dt), requires_grad=True)
            self.flat_grad = torch.empty(total, dtype=dt)
            # made once: building thousands of views per step costs as much as the steps it saves
            self.small_w = [weights[i].view(-1) for i in small]          # the arena's W ...
            self.small_g = [grads[i].view(-1) for i in small]            # ... and dW, flattened views
            self.flat_parts = list(self.flat.data.split(sizes))
            flat_states = [torch.empty(total, dtype=dt) for _ in (states[small[0]] if states else [])]
        self.opt = self._make([self.params[i] for i in self.big], [states[i] for i in self.big],
                              extra=(self.flat, flat_states) if small else None)

    def _make(self, params, states, extra=None):
        if extra is not None:
            params, states = params + [extra[0]], states + [extra[1]]
        if not params:
            return None
        opt = make_optimizer(params, self.cfg)
        _prefill_state(opt, params, states, self.cfg)
        return opt

    def step(self, iteration: int, missing: set[int]) -> int:
        """One update of the pack (params in `missing` have no gradient this iteration and are skipped, as
        torch skips them); returns the number of values updated."""
        if self.opt is None:
            return 0
        if self.small and missing.intersection(self.small):
            self._uncoalesce()
        n = 0
        for i in self.big:
            p = self.params[i]
            p.grad = None if i in missing else self.grads[i]     # no gradient: torch skips the parameter
            n += 0 if i in missing else p.numel()
        if self.small:
            torch.cat(self.small_w, out=self.flat.data)
            torch.cat(self.small_g, out=self.flat_grad)
            self.flat.grad = self.flat_grad
            n += self.flat.numel()
        set_lr(self.opt, self.cfg, iteration)
        self.opt.step()
        if self.small:
            torch._foreach_copy_(self.small_w, self.flat_parts)
        return n

    def _uncoalesce(self) -> None:
        """Step every parameter on its own from now on: the flat state goes into the arena's K views of the
        small parameters (Adam's step count to each of them), the large ones keep theirs, and one optimizer
        over all of them takes over, as without coalescing."""
        old = self.opt.state
        flat_state = old.get(self.flat, {})
        bufs = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                "sgd": ("momentum_buffer",)}[self.cfg.kind]
        for j, name in enumerate(bufs):
            if flat_state.get(name) is not None:
                for i, part in zip(self.small, flat_state[name].split(self.sizes)):
                    self.states[i][j].copy_(part.view_as(self.states[i][j]))
        steps = {i: old.get(self.params[i], {}).get("step") for i in self.big}
        steps.update({i: flat_state.get("step") for i in self.small})
        self.big, self.small, self.flat = list(range(len(self.params))), [], None
        self.opt = make_optimizer(self.params, self.cfg)
        _prefill_state(self.opt, self.params, self.states, self.cfg, zero=False)
        for i, p in enumerate(self.params):
            if steps[i] is not None and "step" in self.opt.state[p]:
                self.opt.state[p]["step"] = steps[i].clone()


class PackUpdater:
    def __init__(self, arena: HostArena, bwd_packs, cfg: OptimizerConfig, threads: int = 2,
                 coalesce_below: int = COALESCE_BELOW):
        if coalesce_below < 0:
            raise ValueError(f"coalesce_below must be >= 0 (0 turns coalescing off), got {coalesce_below}")
        self.arena, self.packs, self.cfg, self.coalesce_below = arena, list(bwd_packs), cfg, coalesce_below
        self.upd_flags = arena.upd_done.numpy()   # one view of the flags (numpy: an element write costs no tensor)
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="harmony-upd")
        self.signal = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harmony-signal")
        self._opts: dict[int, _PackOptimizer] = {}
        self._arrivals: dict[int, list[Future]] = {}
        self._missing: dict[int, set[int]] = {}      # pack -> indices of params without a gradient
        self._pending: list[Future] = []
        self._stats_lock = threading.Lock()
        self._stats = self._zero_stats()

    @staticmethod
    def _zero_stats() -> dict:
        # thread-seconds (the pool's threads may overlap): waiting for a pack's gradients, stepping it; and
        # the signal thread's adding of accumulated gradient groups into dW (swap-dp, swap-pp at u < D)
        return {"upd_wait_grads_s": 0.0, "upd_step_s": 0.0, "upd_params": 0, "upd_steps": 0,
                "grad_add_s": 0.0, "grad_adds": 0}

    def take_stats(self) -> dict:
        """The update jobs' waits and steps since the last call (one iteration's, after wait_all)."""
        with self._stats_lock:
            out, self._stats = self._stats, self._zero_stats()
        return out

    def _optimizer(self, pi: int) -> "_PackOptimizer":
        if pi not in self._opts:
            params, grads, states = [], [], []
            for layer in range(*self.packs[pi]):
                for w, g, ks in zip(self.arena.weights(layer), self.arena.grads(layer), self.arena.state(layer)):
                    if g is not None:
                        params.append(w)
                        grads.append(g)
                        states.append(ks)
            self._opts[pi] = _PackOptimizer(params, grads, states, self.cfg, self.coalesce_below)
        return self._opts[pi]

    def grads_arriving(self, pi: int, event, add_into: list[torch.Tensor] | None = None,
                       staged: list[torch.Tensor] | None = None, missing: set[int] | None = None) -> None:
        """A device->host gradient copy for pack `pi` was issued (event: its completion, None when already
        done). With add_into/staged, the staged copy is added into dW once it lands (grad accumulation)."""
        if missing is not None:
            self._missing.setdefault(pi, set()).update(missing)

        def finish():
            wait_event(event)
            if add_into is not None:
                self.add_grads(add_into, staged)
        if event is None and add_into is None:
            return
        if event is None:          # CPU: synchronous
            finish()
            return
        self._arrivals.setdefault(pi, []).append(self.signal.submit(finish))

    def add_grads(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
        """Add one gradient group into a pack's dW on the host, counted in the stats: host work beside the
        issue loop, on the intra-op threads the issuing thread shares (docs/performance.md entry 91)."""
        t0 = time.perf_counter()
        for d, s in zip(dsts, srcs):
            d.add_(s)
        with self._stats_lock:
            self._stats["grad_add_s"] += time.perf_counter() - t0
            self._stats["grad_adds"] += 1

    def submit(self, pi: int, iteration: int) -> Future:
        arrivals = self._arrivals.pop(pi, [])
        missing = self._missing.pop(pi, set())

        def job():
            t0 = time.perf_counter()
            for f in arrivals:
                f.result()
            po = self._optimizer(pi)
            t1 = time.perf_counter()
            n = po.step(iteration, missing)
            self.upd_flags[pi] = iteration + 1
            t2 = time.perf_counter()
            with self._stats_lock:
                st = self._stats
                st["upd_wait_grads_s"] += t1 - t0
                st["upd_step_s"] += t2 - t1
                st["upd_params"] += n
                st["upd_steps"] += 1
        fut = self.pool.submit(job)
        self._pending.append(fut)
        return fut

    def run_in_signal_thread(self, fn) -> Future:
        return self.signal.submit(fn)

    def wait_all(self) -> None:
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.signal.shutdown(wait=True, cancel_futures=True)
