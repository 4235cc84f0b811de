"""When each compute task ran on its rank's GPU, one iteration at a time: the runtime's side of
`experiments/resimulate_runs.py --task-spans`, which sets each task's span beside the simulator's.

On CUDA a timing event is recorded on the compute stream at the iteration's start and before and after each
compute task's kernels are issued. An event completes when the stream reaches it, so a task's start is when
the stream had finished everything issued before it (the previous task, and the waits for this task's
weights and stashed inputs that `install` issued), and its end is when its last kernel finished. A task's
span therefore holds its kernels and the stream's waits for data that arrives while it runs (a receive from
another GPU, a streamed swap-in); the gap before it holds the waits issued ahead of it. On the CPU every
op runs when it is issued, and the host clock is the device's.

The events are read after the iteration's final synchronize, outside its timed work; two events per task
cost microseconds. Spans are seconds from the iteration's origin on this rank.

Beside each span, when the host finished issuing the task (`issued`, the host clock from the same origin:
the iteration starts after a synchronize, so the stream is empty when the origin event is recorded and both
clocks start together). A task whose GPU end comes right after its issue end was waiting for the host (the
GPU ran the kernels as they came); one whose GPU end comes long after had a GPU behind the host. That tells
a slow host from slow kernels where both stretch a span (docs/performance.md entry 53).
"""
from __future__ import annotations

import time

import torch


class TaskClock:
    def __init__(self, device: torch.device, stream=None):
        """stream: the compute stream the marks go on (CUDA; default the device's current stream). Given
        once, so a mark does not look the current stream up: that lookup resolves the device index through
        environment reads, about 10 us a call, two calls per task (docs/performance.md entry 75)."""
        self.cuda = device.type == "cuda"
        self.stream = (stream or torch.cuda.current_stream(device)) if self.cuda else None
        self.origin = None
        self.host_origin = 0.0
        self.marks: list[tuple[int, object, object]] = []      # (task id, start, end)
        self.issued: list[tuple[int, float]] = []              # (task id, host seconds from the origin)

    def now(self):
        """A mark on the compute stream (CUDA: a timing event recorded there; CPU: the host clock)."""
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(self.stream)
        return ev

    def begin(self) -> None:
        """The iteration's origin; forgets the last iteration's tasks."""
        self.marks, self.issued = [], []
        self.origin = self.now()
        self.host_origin = time.perf_counter()

    def add(self, task_id: int, start, end) -> None:
        """Task `task_id` ran between marks `start` and `end`; called once its last kernel is issued."""
        self.marks.append((task_id, start, end))
        self.issued.append((task_id, time.perf_counter() - self.host_origin))

    def issued_at(self) -> list[list]:
        """[[task id, s], ...]: when the host had issued each task, seconds from the origin, in issue order."""
        return [[tid, round(t, 6)] for tid, t in self.issued]

    def spans(self) -> list[list]:
        """[[task id, start s, end s], ...] from the origin, in issue order. Call after the iteration's
        work has completed (CUDA: the events are complete, so reading them does not wait)."""
        if self.origin is None:
            return []
        if self.cuda:
            def since(ev) -> float:
                return self.origin.elapsed_time(ev) / 1e3
        else:
            def since(t: float) -> float:
                return t - self.origin
        return [[tid, round(since(s), 6), round(since(e), 6)] for tid, s, e in self.marks]
