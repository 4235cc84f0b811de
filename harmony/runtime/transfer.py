"""Copies between the host arena and a worker's device, counted where they are issued.

CUDA: two copy streams (host->device and device->host, so both directions run at once), every host side
pinned, every copy `non_blocking`, ordering by events: a consumer stream waits on the copy's event, never
on the whole device. Device buffers are allocated on the stream that writes them and `record_stream`-ed
on the streams that read them, so the caching allocator never hands a block back while a copy or kernel
still uses it.

`--load-buffers compute-stream` (LOAD_BUFFERS) allocates the buffers of loaded weights and stashes on the
compute stream instead, so the caching allocator keeps one pool for them and the activations: its cache is
per stream, and at a memory cap two pools can leave reserved memory at the cap with much less in use
(docs/performance.md entry 21). A block from the compute stream's pool may still be in use by compute work
already issued, so the worker reserves the buffers before it issues the task that precedes their use and
the copy stream waits for the compute work issued up to that point: the copy still overlaps that task.

CPU (`--device cpu`): "device" tensors are worker-local CPU tensors; the same calls make plain copies and
count the same bytes, so the CI checks of the counters against `count_bytes` cover the real code path.
"""
from __future__ import annotations

import torch

from harmony.schedule.tasks import TRANSFER_KINDS


class Counters:
    """Bytes per transfer kind issued by this worker in the current iteration."""

    def __init__(self):
        self.bytes = {k: 0 for k in TRANSFER_KINDS}

    def add(self, kind: str, n: int) -> None:
        self.bytes[kind] += int(n)

    def take(self) -> dict[str, int]:
        out, self.bytes = self.bytes, {k: 0 for k in TRANSFER_KINDS}
        return out


LOAD_BUFFERS = ("copy-stream", "compute-stream")


def check_load_buffers(value: str) -> str:
    if value not in LOAD_BUFFERS:
        raise ValueError(f"load_buffers {value!r}: choose one of {', '.join(LOAD_BUFFERS)}")
    return value


class Copier:
    def __init__(self, device: torch.device, counters: Counters, load_buffers: str = "copy-stream"):
        self.device = device
        self.cuda = device.type == "cuda"
        self.counters = counters
        self.reserves = self.cuda and check_load_buffers(load_buffers) == "compute-stream"   # module docstring
        if self.cuda:
            self.compute = torch.cuda.current_stream(device)
            self.h2d_stream = torch.cuda.Stream(device)
            self.d2h_stream = torch.cuda.Stream(device)

    # -- host -> device --------------------------------------------------------------------------
    def reserve(self, srcs: list[torch.Tensor]):
        """Device buffers for a later `h2d(srcs, ..., into=...)`, from the compute stream's pool, with an
        event after the compute work issued so far (the buffers' blocks may be in use until then)."""
        outs = [torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in srcs]
        ev = torch.cuda.Event()
        ev.record(self.compute)
        return outs, ev

    def h2d(self, srcs: list[torch.Tensor], kind: str, nbytes: int | None = None, into=None):
        """Issue copies of host tensors to new device tensors (or into `into`, from `reserve`); returns
        (tensors, event or None). nbytes: the sources' total size when the caller knows it."""
        self.counters.add(kind, sum(t.numel() * t.element_size() for t in srcs) if nbytes is None else nbytes)
        if not self.cuda:
            return [t.clone() for t in srcs], None
        with torch.cuda.stream(self.h2d_stream):
            if into is not None:
                outs, free_after = into
                self.h2d_stream.wait_event(free_after)
            else:
                outs = [torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in srcs]
            for o, t in zip(outs, srcs):
                o.copy_(t, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.h2d_stream)
        return outs, ev

    def ready(self, tensors: list[torch.Tensor], event) -> None:
        """Make the compute stream wait for `event` before using `tensors` (which came from a copy stream)."""
        if not self.cuda or event is None:
            return
        self.compute.wait_event(event)
        for t in tensors:
            t.record_stream(self.compute)

    # -- device -> host --------------------------------------------------------------------------
    def d2h(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor], kind: str):
        """Copy device tensors into host tensors (arena views or pinned staging); returns event or None.
        The copy starts once the compute stream has produced `srcs`."""
        n = sum(t.numel() * t.element_size() for t in srcs)
        self.counters.add(kind, n)
        if not self.cuda:
            for d, s in zip(dsts, srcs):
                d.copy_(s)
            return None
        ev_src = torch.cuda.Event()
        ev_src.record(self.compute)
        self.d2h_stream.wait_event(ev_src)
        with torch.cuda.stream(self.d2h_stream):
            for d, s in zip(dsts, srcs):
                d.copy_(s, non_blocking=True)
                s.record_stream(self.d2h_stream)
            ev = torch.cuda.Event()
            ev.record(self.d2h_stream)
        return ev

    def staging(self, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """Host buffers for device tensors `like` (pinned on CUDA)."""
        return [torch.empty(t.shape, dtype=t.dtype, pin_memory=self.cuda) for t in like]

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def wait_event(event) -> None:
    """Block this host thread until `event` (None: nothing pending) has completed."""
    if event is not None:
        event.synchronize()
