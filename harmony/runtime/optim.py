"""Per-pack CPU optimizer updates on the host arena, in threads, so a pack's UPD overlaps the backward
tasks that follow it.

Each backward pack gets its own optimizer (harmony.optim.make_optimizer: fused CPU AdamW/Adam/SGD) over
nn.Parameters that *are* the arena's W views, with `.grad` = the arena's dW views and the optimizer state K
pre-placed in the arena (so K is shared memory too, and counted in the host-memory check). The element-wise
update of one optimizer over all parameters equals the per-pack updates, so this is the reference's
optimizer exactly.

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
                   cfg: OptimizerConfig) -> None:
    """Put the optimizer's per-parameter state into the arena views (zero-initialised, as torch would)."""
    fused = bool(opt.param_groups[0].get("fused"))
    for p, ks in zip(params, states):
        for k in ks:
            k.zero_()
        if cfg.kind in ("adam", "adamw"):
            from torch.optim.optimizer import _get_scalar_dtype
            opt.state[p] = {"step": torch.zeros((), dtype=_get_scalar_dtype(is_fused=fused)),
                            "exp_avg": ks[0], "exp_avg_sq": ks[1]}
        elif cfg.kind == "sgd" and ks:
            # 0.9 * 0 + g == g exactly: the same first step as torch's lazily cloned buffer
            opt.state[p] = {"momentum_buffer": ks[0]}


class PackUpdater:
    def __init__(self, arena: HostArena, bwd_packs, cfg: OptimizerConfig, threads: int = 2):
        self.arena, self.packs, self.cfg = arena, list(bwd_packs), cfg
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="harmony-upd")
        self.signal = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harmony-signal")
        self._opts: dict[int, tuple[torch.optim.Optimizer, list[nn.Parameter], list[torch.Tensor]]] = {}
        self._arrivals: dict[int, list[Future]] = {}
        self._missing: dict[int, set[int]] = {}      # pack -> indices of params without a gradient
        self._pending: list[Future] = []
        self._stats_lock = threading.Lock()
        self._stats = self._zero_stats()

    @staticmethod
    def _zero_stats() -> dict:
        # thread-seconds (the pool's threads may overlap): waiting for a pack's gradients, stepping it
        return {"upd_wait_grads_s": 0.0, "upd_step_s": 0.0, "upd_params": 0, "upd_steps": 0}

    def take_stats(self) -> dict:
        """The update jobs' waits and steps since the last call (one iteration's, after wait_all)."""
        with self._stats_lock:
            out, self._stats = self._stats, self._zero_stats()
        return out

    def _optimizer(self, pi: int):
        if pi not in self._opts:
            params, grads, states = [], [], []
            for layer in range(*self.packs[pi]):
                for w, g, ks in zip(self.arena.weights(layer), self.arena.grads(layer), self.arena.state(layer)):
                    if g is None:
                        continue
                    p = nn.Parameter(w, requires_grad=True)
                    params.append(p)
                    grads.append(g)
                    states.append(ks)
            opt = make_optimizer(params, self.cfg) if params else None
            if opt is not None:
                _prefill_state(opt, params, states, self.cfg)
            self._opts[pi] = (opt, params, grads)
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
                for d, s in zip(add_into, staged):
                    d.add_(s)
        if event is None and add_into is None:
            return
        if event is None:          # CPU: synchronous
            finish()
            return
        self._arrivals.setdefault(pi, []).append(self.signal.submit(finish))

    def submit(self, pi: int, iteration: int) -> Future:
        arrivals = self._arrivals.pop(pi, [])
        missing = self._missing.pop(pi, set())

        def job():
            t0 = time.perf_counter()
            for f in arrivals:
                f.result()
            opt, params, grads = self._optimizer(pi)
            t1 = time.perf_counter()
            n = 0
            if opt is not None:
                for i, (p, g) in enumerate(zip(params, grads)):
                    p.grad = None if i in missing else g     # no gradient: torch skips the parameter
                    n += 0 if i in missing else p.numel()
                set_lr(opt, self.cfg, iteration)
                opt.step()
            self.arena.upd_done[pi] = iteration + 1
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
