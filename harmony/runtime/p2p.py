"""GPU-to-GPU activations and gradients, streamed microbatch by microbatch.

A compute task whose consumer runs on another GPU sends its output (FWD: the pack's output; BWD: the
gradient of its input) one microbatch at a time, as soon as that microbatch is computed; the consumer
receives lazily, just before the microbatch that needs the data. So in vPP the next GPU starts on the first
microbatch while this one computes the rest: the pipelining the simulator assumes (its `mb_pipeline`
arrival rule). Sending a task's whole output at its end instead serialises the GPUs of a pass.

Channels: one process group per direction (src -> dst) that the task graph uses. NCCL runs the P2P ops
of one group in posting order on one stream per rank (and, with an eagerly initialised communicator,
serialises unbatched P2P with every other op of that group). With both directions on one stream, rank A's
send of its 2nd chunk can queue behind its receive of a chunk that B sends only after receiving A's 2nd
chunk: a deadlock. One group per direction makes each channel a FIFO with one sender and one receiver.

Connections: NCCL connects two ranks on their first send/receive, and the sender's host waits there for
the receiver's; `connect` makes every channel's connection when the channels are made, before any task runs
(docs/performance.md entry 108: without it a first gradient send deadlocked with its peer's full launch queue).

Receives (`RECEIVE_MODES`): `lazy` posts each microbatch's receive just before the microbatch that needs it;
`eager` posts all of a task's receives when the task starts (its input buffer is allocated then either way)
and still waits for each only before its microbatch. A send stays on the GPU until its receive is posted,
and compute beside a resident NCCL kernel runs 10-18% slower (docs/performance.md entries 46-48), so eager
shortens how long the producer's sends sit beside its next tasks: from the producer's first microbatch to
the consumer's start, not to the consumer's last microbatch. Eager is the default (`DEFAULT_RECEIVE_MODE`):
on two H100s it made every vPP plan of entry 48's A/B 2.6-15% faster.

Order: NCCL matches messages by order, not by tag, so both ends of a channel must post in the same order.
Senders post in (producer task, microbatch) order, receivers in (consumer task, microbatch) order; these
agree when producer order and consumer order agree on every channel, which `check_channel_order`
verifies before anything runs. (Gloo, used on CPU, also gets a tag per message.)

Layout (`keep_layout`, docs/performance.md entries 107 and 108): a channels-last model's 4-d activations
and gradients travel as their NHWC permutation, the default; without keep_layout (`--no-keep-layout`) they
go out as NCHW (the sender's `contiguous()` copies each, and the receiving vLayer converts it back), 4-7%
slower on ResNet1026 and VGG416 (entry 108). The NHWC permutation is a contiguous view of a
channels-last tensor (no copy), received into an (n, H, W, C) buffer that the consumer reads as
channels-last. Both ends decide by the tensor's rank alone, so they agree without a message. Gloo refuses
a channels-last tensor itself ("input tensor has to be contiguous"), and the NHWC view passes on either
backend.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from harmony.schedule.tasks import DEFAULT_RECEIVE_MODE, RECEIVE_MODES, Range, ScheduleError, Task, TaskGraph

MAX_CHUNKS = 1 << 12          # microbatches per task } gloo tags: one per message,
MAX_TENSORS = 1 << 3          # tensors per message  } ((2 * producer + kind) * MAX_CHUNKS + i) * MAX_TENSORS + j


@dataclass(frozen=True)
class Edge:
    producer: Task
    consumer: Task
    kind: str                 # "act" (FWD output -> next task) | "grad" (BWD input gradient -> previous BWD)

    @property
    def channel(self) -> tuple[int, int]:
        return self.producer.rank, self.consumer.rank


def remote_edges(graph: TaskGraph) -> list[Edge]:
    """Every producer -> consumer edge between two different ranks."""
    out = []
    for t in graph.tasks:
        if t.kind in ("FWD", "BWD") and t.act_in[0] == "task":
            p = graph.tasks[t.act_in[1]]
            if p.rank != t.rank:
                out.append(Edge(p, t, "act"))
        if t.kind == "BWD" and t.grad_in is not None:
            p = graph.tasks[t.grad_in]
            if p.rank != t.rank:
                out.append(Edge(p, t, "grad"))
    return out


def check_channel_order(graph: TaskGraph) -> list[tuple[int, int]]:
    """The channels (src, dst) the graph uses, sorted; raises ScheduleError when a channel's sender and
    receiver would post its messages in different orders."""
    by_channel: dict[tuple[int, int], list[Edge]] = {}
    for e in remote_edges(graph):
        by_channel.setdefault(e.channel, []).append(e)
    for ch, edges in by_channel.items():
        sent = sorted(edges, key=lambda e: e.producer.id)
        received = sorted(edges, key=lambda e: e.consumer.id)
        if [(e.producer.id, e.kind) for e in sent] != [(e.producer.id, e.kind) for e in received]:
            bad = next(i for i, (a, b) in enumerate(zip(sent, received)) if a is not b)
            raise ScheduleError(
                f"GPU {ch[0]} -> GPU {ch[1]}: task {sent[bad].producer.id} sends before task "
                f"{received[bad].producer.id}, but the receiving tasks run the other way round "
                f"({received[bad].consumer.id} before {sent[bad].consumer.id}); NCCL matches messages by "
                f"order, so this placement cannot run: choose stages so that the loss pack shares a GPU "
                f"with the pack before it")
    return sorted(by_channel)


def chunks(t: Task) -> list[Range]:
    """The global sample ranges a task sends, one per microbatch, in order."""
    mbs = t.microbatches()
    if len(mbs) > MAX_CHUNKS:
        raise ScheduleError(f"task {t.id} has {len(mbs)} microbatches; at most {MAX_CHUNKS} are supported")
    return mbs


def group_options(max_ctas: int | None) -> dict:
    """new_group's keyword arguments for a channel: with max_ctas, an NCCL config that caps the thread blocks
    (CTAs, one per channel) of its send/recv kernels. NCCL keeps a send on the GPU until the peer posts its
    receive, and its blocks hold SMs the compute kernels beside it then lack (docs/performance.md entry 46)."""
    if max_ctas is None:
        return {}
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.max_ctas = int(max_ctas)
    return {"pg_options": opts}


def connect(group, ch: tuple[int, int], rank: int, cpu: bool) -> None:
    """Send one message over a new channel (src, dst) at start-up, and wait for it. NCCL makes a P2P
    connection on the first send/receive between two ranks, and the sender's host waits in that call until
    the receiver's host posts its side (docs/performance.md entry 108). Left to the first real message, a
    gradient's first send could wait on a peer whose host was held in a kernel launch, its queue full
    behind its own activation send, which waited on a receive the blocked sender had yet to post: swap-pp's
    channels-last ResNet1026 hung so, every time, in its first iteration. Made here, when no rank has work
    queued, the connections cannot wait on anything. Gloo needs no such set-up; it gets the same message so
    that the CPU runs this path too (tag 0 is free: the message is received before any other is posted)."""
    x = torch.zeros(1, device="cpu" if cpu else torch.device("cuda", torch.cuda.current_device()))
    kw = {"tag": 0} if cpu else {}
    work = dist.isend(x, dst=ch[1], group=group, **kw) if rank == ch[0] else dist.irecv(x, src=ch[0], group=group, **kw)
    work.wait()
    if not cpu:
        torch.cuda.current_stream().synchronize()


class Channels:
    """The directional process groups of a graph (created collectively: every rank calls in the same
    order; cached across the jobs of one worker process) and the send/receive ops on them."""

    _groups: dict[tuple[tuple[int, int], int | None], object] = {}

    def __init__(self, graph: TaskGraph, rank: int, cpu: bool, max_ctas: int | None = None,
                 receive: str = DEFAULT_RECEIVE_MODE, keep_layout: bool = False):
        if receive not in RECEIVE_MODES:
            raise ValueError(f"p2p receive must be one of {', '.join(RECEIVE_MODES)}, got {receive!r}")
        self.rank, self.cpu, self.receive, self.keep_layout = rank, cpu, receive, keep_layout
        self.channels = check_channel_order(graph)
        self.max_ctas = None if cpu else max_ctas       # an NCCL setting: gloo has no thread blocks
        self.groups: dict[tuple[int, int], object] = {}
        if graph.config.gpus > 1:
            made = []
            for ch in self.channels:
                key = (ch, self.max_ctas)
                if key not in Channels._groups:
                    Channels._groups[key] = dist.new_group(ranks=sorted(ch), **group_options(self.max_ctas))
                    made.append(ch)
                self.groups[ch] = Channels._groups[key]
            for ch in made:          # every rank in the same (sorted) order, so each pair meets
                if rank in ch:
                    connect(self.groups[ch], ch, rank, cpu)

    def isend(self, x: torch.Tensor, dst: int, tag: int):
        g = self.groups[(self.rank, dst)]
        return dist.isend(x, dst=dst, group=g, tag=tag) if self.cpu else dist.isend(x, dst=dst, group=g)

    def irecv(self, x: torch.Tensor, src: int, tag: int):
        """Post a receive into x. On CUDA, NCCL's stream first waits for the work already on the current
        stream, so the receive cannot write x before the kernels issued ahead of it are done with the memory."""
        g = self.groups[(src, self.rank)]
        return dist.irecv(x, src=src, group=g, tag=tag) if self.cpu else dist.irecv(x, src=src, group=g)


def channels_last_model(model_json: dict) -> bool:
    """Whether a model.json's model computes channels-last (`--set channels_last=true`): the models whose
    crossings `keep_layout` concerns."""
    return bool(model_json.get("config", {}).get("channels_last"))


def crossing_format(keep_layout: bool, dim: int) -> torch.memory_format:
    """The memory format a `dim`-d tensor crosses a pack boundary in: channels-last for an image batch
    with keep_layout, else NCHW-contiguous. Sender, receiver and the group buffers all decide by it."""
    return torch.channels_last if keep_layout and dim == 4 else torch.contiguous_format


def to_wire(x: torch.Tensor, keep_layout: bool) -> torch.Tensor:
    """What goes on the wire for x: NCHW-contiguous, or with keep_layout a 4-d tensor's NHWC view (a copy
    only when x is not channels-last already)."""
    fmt = crossing_format(keep_layout, x.dim())
    if fmt is torch.channels_last:
        return x.contiguous(memory_format=fmt).permute(0, 2, 3, 1)
    return x.contiguous()


def wire_buffer(n: int, shape: tuple, dtype, device, keep_layout: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the buffer receives land in, the tensor the consumer reads) for n samples of per-sample `shape`:
    the same tensor, or with keep_layout for an image a channels-last (n, C, H, W) tensor and its NHWC
    view. A row slice of the first is what `to_wire` sends for those rows."""
    fmt = crossing_format(keep_layout, 1 + len(shape))
    t = torch.empty((n, *shape), dtype=dtype, device=device, memory_format=fmt)
    return to_wire(t, keep_layout), t


def tag(producer_id: int, kind: str, i: int, j: int) -> int:
    return ((2 * producer_id + (kind == "grad")) * MAX_CHUNKS + i) * MAX_TENSORS + j


class StreamedInput:
    """A remote producer's output, received chunk by chunk into one buffer per tensor. `upto(hi)` makes
    sure every chunk that starts before global sample `hi` has been received (posted, and on CUDA ordered
    before the current stream's next kernels)."""

    def __init__(self, channels: Channels, producer: Task, kind: str, specs, device):
        self.channels, self.producer, self.kind = channels, producer, kind
        n = producer.num_samples
        self.s0 = producer.samples[0]
        bufs = [wire_buffer(n, shape, dt, device, channels.keep_layout) for shape, dt in specs]
        self.wire = [w for w, _ in bufs]          # what the receives write
        self.tensors = [t for _, t in bufs]       # what the consumer reads (the same, or its channels-last view)
        self.chunks = chunks(producer)
        self.next = 0                  # index of the first chunk not yet received
        self.posted: list[list] = []   # per chunk from `next` on, its receives' works (eager: all posted now)
        if channels.receive == "eager":
            for i in range(len(self.chunks)):
                self.posted.append(self._post(i))

    def microbatch(self, lo: int, hi: int) -> list[torch.Tensor]:
        """Global samples [lo, hi), received."""
        self.upto(hi)
        return [x[lo - self.s0:hi - self.s0] for x in self.tensors]

    def _post(self, i: int) -> list:
        lo_c, hi_c = self.chunks[i]
        return [self.channels.irecv(x[lo_c - self.s0:hi_c - self.s0], self.producer.rank,
                                    tag(self.producer.id, self.kind, i, j)) for j, x in enumerate(self.wire)]

    def upto(self, hi: int) -> None:
        while self.next < len(self.chunks) and self.chunks[self.next][0] < hi:
            works = self.posted.pop(0) if self.posted else self._post(self.next)
            self.next += 1
            for w in works:
                w.wait()      # CUDA: the current stream waits for the receive; the host goes on


class LocalInput:
    """An input already here (same rank, or the minibatch's data): nothing to wait for. s0: the global
    index of its first sample."""

    def __init__(self, tensors, s0: int):
        self.tensors = list(tensors)
        self.s0 = s0

    def microbatch(self, lo: int, hi: int) -> list[torch.Tensor]:
        """Global samples [lo, hi)."""
        return [x[lo - self.s0:hi - self.s0] for x in self.tensors]
