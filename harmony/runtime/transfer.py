"""Copies between the host arena and a worker's device, counted where they are issued.

CUDA: two copy streams (host->device and device->host, so both directions run at once), every host side
pinned, every copy `non_blocking`, ordering by events: a consumer stream waits on the copy's event, never
on the whole device. Device buffers are allocated on the stream that writes them and `record_stream`-ed
on the streams that read them, so the caching allocator never hands a block back while a copy or kernel
still uses it.

`--load-buffers compute-stream` (LOAD_BUFFERS) allocates the buffers of loaded weights and stashes on the
compute stream instead, so the caching allocator keeps one pool for them and the activations: its cache is
per stream, and at a memory cap two pools can leave reserved memory at the cap with much less in use
(docs/performance.md entries 21 and 32). A block from the compute stream's pool may still be in use by
compute work already issued, so the worker reserves the buffers before it issues the task that precedes
their use and the copy stream waits for the compute work issued up to that point: the copy still overlaps
that task. Where the schedule's simulation found that the two do not fit together under the cap
(`prediction.prefetch_waits`), the worker reserves them only after that task, and the copy waits for it,
as the simulator charged. `auto` (the default) is compute-stream for a schedule that records
`prefetch_waits` and copy-stream for an older one. On the CPU the same reservations are made (plain
tensors, no streams), so the CI exercises the order.

`--weight-copies per-vlayer` copies each vLayer's weights and buffers as one block (the arena keeps them
contiguous, `ArenaLayout.w_blocks`) into one device allocation, and the tensors are views into it: one
allocation and one `cudaMemcpyAsync` per vLayer instead of one per tensor (847 instead of 10,160 per
resnet1026 vPP iteration at D = 64; docs/performance.md entry 23: 1.32 -> 1.08-1.10 s on the H100). It
is the default; `per-tensor` copies each tensor on its own. `per-pack` copies the W blocks of a task's
whole load at once (the arena keeps consecutive vLayers' blocks adjacent), cut only where a pack of
either packing begins or ends, so that a run of vLayers the next task keeps is a device block of its own
and the rest is freed when the task releases it (`Worker._load_segments`): one allocation, copy, event and
stream wait per pack instead of per vLayer (docs/performance.md entry 99).

Every Copier call comes from the worker's issue thread, whose current stream is the compute stream: a copy
switches to its stream with `torch.cuda.set_stream` and back to `compute`, not with `torch.cuda.stream(...)`,
whose entry and exit resolve the current device and stream again (environment lookups included) each time:
about 80 ms of a 1.25 s host-bound iteration on the GPU host, four switches per vLayer (docs/performance.md
entry 43).

CPU (`--device cpu`): "device" tensors are worker-local CPU tensors; the same calls make plain copies and
count the same bytes, so the CI checks of the counters against `count_bytes` cover the real code path.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harmony.runtime.p2p import crossing_format
from harmony.schedule.tasks import ALLREDUCE_MODES, TRANSFER_KINDS


class Counters:
    """Bytes per transfer kind issued by this worker in the current iteration."""

    def __init__(self):
        self.bytes = {k: 0 for k in TRANSFER_KINDS}

    def add(self, kind: str, n: int) -> None:
        self.bytes[kind] += int(n)

    def take(self) -> dict[str, int]:
        out, self.bytes = self.bytes, {k: 0 for k in TRANSFER_KINDS}
        return out


LOAD_BUFFERS = ("auto", "copy-stream", "compute-stream")
WEIGHT_COPIES = ("per-tensor", "per-vlayer", "per-pack")
# one allocation and copy per vLayer block: the default since the H100 A/B in docs/runtime.md (Weight copies)
DEFAULT_WEIGHT_COPIES = "per-vlayer"


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`, else a ValueError that names the setting and the choices."""
    if value not in choices:
        raise ValueError(f"{name} {value!r}: choose one of {', '.join(choices)}")
    return value


def check_load_buffers(value: str) -> str:
    return check_choice("load_buffers", value, LOAD_BUFFERS)


def resolve_load_buffers(value: str, prediction: dict | None) -> str:
    """`auto` -> compute-stream where the schedule's prediction says which prefetches wait for memory
    (`prefetch_waits`, written since docs/performance.md entry 32), else copy-stream; others unchanged."""
    if check_load_buffers(value) != "auto":
        return value
    return "compute-stream" if (prediction or {}).get("prefetch_waits") is not None else "copy-stream"


def check_allreduce(value: str) -> str:
    return check_choice("allreduce", value, ALLREDUCE_MODES)


def check_weight_copies(value: str) -> str:
    return check_choice("weight_copies", value, WEIGHT_COPIES)


@dataclass(frozen=True)
class BlockViews:
    """How a vLayer's tensors lie in its W block: per tensor (dtype, shape, stride, offset in elements of
    its dtype), offsets relative to the block's start."""
    tensors: tuple[tuple[torch.dtype, tuple[int, ...], tuple[int, ...], int], ...]

    @staticmethod
    def of(entries, block_offset: int) -> "BlockViews":
        """From the arena entries of a block (host_memory.Entry: offset, shape, dtype name)."""
        out = []
        for e in entries:
            dt = getattr(torch, e.dtype)
            rel = e.offset - block_offset
            if rel % dt.itemsize:
                raise ValueError(f"W entry at byte {rel} of its block is not aligned to its {e.dtype} elements")
            out.append((dt, tuple(e.shape), torch.empty(e.shape, dtype=dt, device="meta").stride(), rel // dt.itemsize))
        return BlockViews(tuple(out))

    def over(self, block: torch.Tensor, at: int = 0, typed: dict | None = None) -> list[torch.Tensor]:
        """The tensors, as views into `block` (uint8, storage offset 0), whose byte `at` (a multiple of 64)
        is where this W block starts. `typed`: typed views of `block` already made, shared by the vLayers
        of one block. Each tensor is `.data` of its view, which gives it a version counter of its own:
        views share their base's, so BatchNorm's in-place update of its running stats would otherwise look
        like a change to every weight that autograd saved."""
        typed = {} if typed is None else typed
        out = []
        for dt, shape, stride, off in self.tensors:
            base = typed.get(dt)
            if base is None:
                base = typed[dt] = block.view(dt)
            out.append(base.as_strided(shape, stride, off + at // dt.itemsize).data)
        return out


class Copier:
    def __init__(self, device: torch.device, counters: Counters, load_buffers: str = "copy-stream"):
        self.device = device
        self.cuda = device.type == "cuda"
        self.counters = counters
        if check_load_buffers(load_buffers) == "auto":
            raise ValueError("Copier: resolve load_buffers 'auto' first (resolve_load_buffers)")
        self.reserves = load_buffers == "compute-stream"        # module docstring
        if self.cuda:
            self.compute = torch.cuda.current_stream(device)
            self.h2d_stream = torch.cuda.Stream(device)
            self.d2h_stream = torch.cuda.Stream(device)
            # a stash's later microbatches (StashInput): their copies wait for compute progress, so on the
            # prefetch stream they would hold back the next task's weights queued behind them
            self.stash_stream = torch.cuda.Stream(device)

    # -- host -> device --------------------------------------------------------------------------
    def reserve(self, srcs: list[torch.Tensor]):
        """Device buffers for a later `h2d(srcs, ..., into=...)`, from the compute stream's pool, with an
        event after the compute work issued so far (the buffers' blocks may be in use until then). Each
        is laid out as its source (a channels-last stash view's too), so the copy is one plain memcpy."""
        outs = [torch.empty_like(t, device=self.device) for t in srcs]
        if not self.cuda:
            return outs, None
        ev = torch.cuda.Event()
        ev.record(self.compute)
        return outs, ev

    def h2d(self, srcs: list[torch.Tensor], kind: str, nbytes: int | None = None, into=None, after=None,
            stash_stream: bool = False):
        """Issue copies of host tensors to new device tensors (or into `into`, from `reserve`); returns
        (tensors, event or None). nbytes: the sources' total size when the caller knows it. after: an
        event the copies wait for (the D2H that wrote the sources). stash_stream: on the stream of a
        stash's later microbatches instead of the prefetch stream."""
        self.counters.add(kind, sum(t.numel() * t.element_size() for t in srcs) if nbytes is None else nbytes)
        if not self.cuda:
            if into is None:
                return [t.clone() for t in srcs], None
            for o, t in zip(into[0], srcs):
                o.copy_(t)
            return into[0], None
        stream = self.stash_stream if stash_stream else self.h2d_stream
        torch.cuda.set_stream(stream)
        try:
            if after is not None:
                stream.wait_event(after)
            if into is not None:
                outs, free_after = into
                stream.wait_event(free_after)
            else:
                outs = [torch.empty_like(t, device=self.device) for t in srcs]
            for o, t in zip(outs, srcs):
                o.copy_(t, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(stream)
        finally:
            torch.cuda.set_stream(self.compute)
        return outs, ev

    def h2d_block(self, block: torch.Tensor, views: list[tuple[BlockViews, int]], kind: str, nbytes: int,
                  into=None):
        """Issue ONE copy of a uint8 host block (the W blocks of one or more consecutive vLayers) into a new
        device block (or into `into`, from `reserve([block])`); returns (per vLayer its tensors: views into
        the device block, event or None, [device block]). views: per vLayer its BlockViews and the byte where
        its W block starts in `block`. nbytes: what the counters record, the tensors' own bytes (the block's
        alignment padding, < 64 bytes per tensor, is copied but not counted: count_bytes does not know it)."""
        (dev,), ev = self.h2d([block], kind, nbytes, into)
        typed: dict = {}
        return [v.over(dev, at, typed) for v, at in views], ev, [dev]

    def ready(self, tensors: list[torch.Tensor], event) -> None:
        """Make the compute stream wait for `event` before using `tensors` (which came from a copy stream)."""
        if not self.cuda or event is None:
            return
        self.compute.wait_event(event)
        for t in tensors:
            t.record_stream(self.compute)

    # -- device -> host --------------------------------------------------------------------------
    def d2h(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor], kind: str, nbytes: int | None = None):
        """Copy device tensors into host tensors (arena views or pinned staging); returns event or None.
        The copy starts once the compute stream has produced `srcs`. nbytes: what the counters record when
        it is not the sources' size (a pack's gradients copied as one padded block)."""
        self.counters.add(kind, sum(t.numel() * t.element_size() for t in srcs) if nbytes is None else nbytes)
        if not self.cuda:
            for d, s in zip(dsts, srcs):
                d.copy_(s)
            return None
        ev_src = torch.cuda.Event()
        ev_src.record(self.compute)
        self.d2h_stream.wait_event(ev_src)
        torch.cuda.set_stream(self.d2h_stream)
        try:
            for d, s in zip(dsts, srcs):
                d.copy_(s, non_blocking=True)
                s.record_stream(self.d2h_stream)
            ev = torch.cuda.Event()
            ev.record(self.d2h_stream)
        finally:
            torch.cuda.set_stream(self.compute)
        return ev

    def staging(self, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """Host buffers for device tensors `like` (pinned on CUDA)."""
        return [torch.empty(t.shape, dtype=t.dtype, pin_memory=self.cuda) for t in like]

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mark(self):
        """Events after the work issued so far on the compute and device-to-host streams (None on the
        CPU, where every copy has completed when it returns); wait_marks blocks until both have run."""
        if not self.cuda:
            return None
        evs = (torch.cuda.Event(), torch.cuda.Event())
        evs[0].record(self.compute)
        evs[1].record(self.d2h_stream)
        return evs


def host_view(v: torch.Tensor, keep_layout: bool) -> torch.Tensor:
    """A stash's host tensor as the runtime reads and writes it: in the layout it crosses in
    (`p2p.crossing_format`), i.e. as it is, or with keep_layout (a channels-last model's default) a 4-d
    one's bytes read in NHWC order, the same (n, C, H, W) tensor laid out channels-last. Its row slices stay
    channels-last, so a stash moves between a channels-last activation and the host without being reordered
    on either side (docs/performance.md entries 107 and 108)."""
    if crossing_format(keep_layout, v.dim()) is not torch.channels_last:
        return v
    n, c, h, w = v.shape
    return v.view(n, h, w, c).permute(0, 3, 1, 2)


class StashInput:
    """A BWD task's stashed input, loaded from the arena one microbatch ahead of the microbatch that uses
    it, so at most two of its microbatches are on the device instead of the whole group (docs/performance.md
    entry 37: for gpt2-xl at D = 256 the group's stash was 1.56 GiB, twice when the next task's was
    prefetched). The first microbatch comes with the task's prefetch (`first`: (tensors, event) of
    Copier.h2d), overlapping the previous task; microbatch i+1's copy is issued when microbatch i is,
    into a buffer reserved from the compute stream's pool (Copier.reserve: the copy waits for the compute
    work issued so far, so the block it reuses, microbatch i-1's, is free), on the stash stream.

    views: the stash's host tensors (group samples first); s0: the global index of its first sample;
    microbatches: the task's global sample ranges, taken in order; after: the D2H event that wrote the
    stash on this rank (None: written and published before the first copy was issued)."""

    def __init__(self, copier: "Copier", views: list[torch.Tensor], s0: int, microbatches, first, after=None):
        self.copier, self.views, self.s0 = copier, views, s0
        self.mbs = list(microbatches)
        self.after = after
        self.loaded = first            # (tensors, event) of microbatch self.k
        self.k = 0

    @staticmethod
    def slices(views: list[torch.Tensor], s0: int, lo: int, hi: int) -> list[torch.Tensor]:
        return [v[lo - s0:hi - s0] for v in views]

    def microbatch(self, lo: int, hi: int) -> list[torch.Tensor]:
        """The device tensors of global samples [lo, hi), the next microbatch in order; issues the copy of
        the one after it."""
        if self.k >= len(self.mbs) or self.mbs[self.k] != (lo, hi):
            want = self.mbs[self.k] if self.k < len(self.mbs) else "none"
            raise RuntimeError(f"stash read out of order: microbatch {(lo, hi)} asked, {want} next")
        tensors, ev = self.loaded
        self.k += 1
        if self.k < len(self.mbs):
            src = self.slices(self.views, self.s0, *self.mbs[self.k])
            self.loaded = self.copier.h2d(src, "h2d_act", into=self.copier.reserve(src), after=self.after,
                                          stash_stream=True)
            self.after = None          # the stash stream has waited for it once: later copies follow
        else:
            self.loaded = None
        self.copier.ready(tensors, ev)
        return tensors


def wait_marks(marks) -> None:
    """Block this host thread until the events of Copier.mark (None: nothing pending) have completed."""
    for ev in marks or ():
        wait_event(ev)


def wait_event(event) -> None:
    """Block this host thread until `event` (None: nothing pending) has completed."""
    if event is not None:
        event.synchronize()
