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
"""
from __future__ import annotations

import time

import torch


class TaskClock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.origin = None
        self.marks: list[tuple[int, object, object]] = []      # (task id, start, end)

    def now(self):
        """A mark on the compute stream (CUDA: a timing event recorded there; CPU: the host clock)."""
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def begin(self) -> None:
        """The iteration's origin; forgets the last iteration's tasks."""
        self.marks = []
        self.origin = self.now()

    def add(self, task_id: int, start, end) -> None:
        self.marks.append((task_id, start, end))

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
