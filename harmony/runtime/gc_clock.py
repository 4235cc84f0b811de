"""How long Python's garbage collector stopped this process, one iteration at a time.

A collection holds the interpreter lock, so every Python thread of the worker waits for it, the issue loop
included: a host-bound run (many short tasks, docs/performance.md entries 90 and 91) would show it as task
issue intervals far above the median. `gc.callbacks` brackets each collection; the clock sums their
durations and counts them by generation between two `take()` calls. Its cost is two clock reads per
collection.
"""
from __future__ import annotations

import gc
import time


class GcClock:
    def __init__(self):
        self._t0 = 0.0
        self._seconds = 0.0
        self._by_gen = [0, 0, 0]
        self._on = False

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self._seconds += time.perf_counter() - self._t0
            gen = info.get("generation", 2)
            self._by_gen[min(max(gen, 0), 2)] += 1

    def start(self) -> "GcClock":
        if not self._on:
            gc.callbacks.append(self._callback)
            self._on = True
        return self

    def stop(self) -> None:
        if self._on:
            gc.callbacks.remove(self._callback)
            self._on = False

    def take(self) -> dict:
        """The collections since the last take: seconds stopped (`gc_s`), how many (`gc_collections`) and how
        many of them were full ones (`gc_gen2`, which walk every tracked object)."""
        out = {"gc_s": self._seconds, "gc_collections": sum(self._by_gen), "gc_gen2": self._by_gen[2]}
        self._seconds, self._by_gen = 0.0, [0, 0, 0]
        return out


# One per process: a worker process may run several schedules (harmony.runtime.train_many), and a clock made
# per run would leave its callback behind in gc.callbacks when the next run starts its own.
GC_CLOCK = GcClock()
