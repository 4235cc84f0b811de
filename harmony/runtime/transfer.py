"""Copies between the host arena and a worker's device, counted where they are issued.

CUDA: two copy streams (host->device and device->host, so both directions run at once), every host side
pinned, every copy `non_blocking`, ordering by events: a consumer stream waits on the copy's event, never
on the whole device. Device buffers are allocated on the stream that writes them and `record_stream`-ed
on the streams that read them, so the caching allocator never hands a block back while a copy or kernel
still uses it.

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


class Copier:
    def __init__(self, device: torch.device, counters: Counters):
        self.device = device
        self.cuda = device.type == "cuda"
        self.counters = counters
        if self.cuda:
            self.compute = torch.cuda.current_stream(device)
            self.h2d_stream = torch.cuda.Stream(device)
            self.d2h_stream = torch.cuda.Stream(device)

    # -- host -> device --------------------------------------------------------------------------
    def h2d(self, srcs: list[torch.Tensor], kind: str, nbytes: int | None = None):
        """Issue copies of host tensors to new device tensors; returns (tensors, event or None).
        nbytes: the sources' total size when the caller knows it (saves summing it per call)."""
        self.counters.add(kind, sum(t.numel() * t.element_size() for t in srcs) if nbytes is None else nbytes)
        if not self.cuda:
            return [t.clone() for t in srcs], None
        with torch.cuda.stream(self.h2d_stream):
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
