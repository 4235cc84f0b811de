"""The host arena: W (weights and buffers), dW, optimizer state K, stashed activations X and the
cross-process flags, held ONCE in host memory and shared by every worker process.

Storage is one anonymous memory file (memfd) that the launcher creates and every worker maps with
`torch.from_file(/proc/<launcher pid>/fd/<fd>, shared=True)`. memfd pages are not limited by the size of
/dev/shm (often 64 MiB in containers), unlike torch's `share_memory_()`. On CUDA each worker registers the
part GPUs copy to and from (all but the optimizer state K) as pinned memory (`cudaHostRegister`), so every
swap is a DMA copy at full PCIe speed; there is no
per-worker pinned copy of the model (the original Harmony kept one per GPU: (N+1)x|W| host memory).

Layout (every entry 64-byte aligned, typed views into one uint8 mapping):
  flags   int64[num_bwd_packs]  upd_done[p]   = iterations whose UPD of backward pack p has finished
          int64[num_tasks]      stash_done[t] = iterations whose stash of FWD task t is in host memory
  W       per vLayer, its W block: every parameter and buffer (model order) back to back, so that one
          copy can bring the whole vLayer to the device (`harmony run --weight-copies per-vlayer`); the
          blocks of consecutive vLayers are adjacent, so one copy can bring a pack (`per-pack`)
  dW      per trainable parameter, vLayer after vLayer: a pack's gradients are one range, which a vDP
          task's gradients fill in one copy (Worker._grads_into_one_buffer)
  X       stash regions; each FWD task with stash_out views one, per output tensor: [samples, *per-sample
          shape]. Stashes of one rank whose lifetimes do not overlap share a region (see `plan_stash`).
  K       per trainable parameter, `state_tensors_per_param` tensors (Adam: exp_avg, exp_avg_sq; SGD:
          momentum). Last, because no GPU copies it: workers pin the prefix before it (`device_bytes`).
The stash plan and the flag sizes live in harmony/schedule/host_memory.py, where `harmony schedule` uses them
to check each candidate's arena against the host memory budget before a run ever gets here.
"""
from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from harmony.schedule.host_memory import ALIGN, Entry, aligned, flag_shapes, plan_stash
from harmony.units import format_bytes

__all__ = ["ALIGN", "Entry", "ArenaLayout", "HostArena", "HostMemoryError", "check_fits", "host_available_bytes",
           "layer_slots", "plan_layout"]


class HostMemoryError(RuntimeError):
    """The arena does not fit host memory: refused before anything is allocated."""


def layer_slots(layer: nn.Module) -> list[tuple[nn.Module, str, bool, torch.Tensor]]:
    """(module, attribute, is_parameter, tensor) for every parameter then buffer of a vLayer, in the order
    `layer.parameters()` / `layer.buffers()` yield them (shared tensors once)."""
    out, seen = [], set()
    for _, mod in layer.named_modules():
        for name, p in mod._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                out.append((mod, name, True, p))
    for _, mod in layer.named_modules():
        for name, b in mod._buffers.items():
            if b is not None and id(b) not in seen:
                seen.add(id(b))
                out.append((mod, name, False, b))
    return out


@dataclass
class ArenaLayout:
    total_bytes: int = 0
    upd_flags: Entry | None = None
    stash_flags: Entry | None = None
    # per vLayer: list over slots of (W entry, dW entry or None, [K entries])
    weights: list[list[tuple[Entry, Entry | None, list[Entry]]]] = field(default_factory=list)
    # per vLayer: (offset, nbytes) of its W block, which holds exactly the W entries of `weights[l]`, in slot
    # order, each 64-byte aligned (the padding, < 64 bytes per tensor, travels with a block copy)
    w_blocks: list[tuple[int, int]] = field(default_factory=list)
    stash: dict[int, list[Entry]] = field(default_factory=dict)     # FWD task id -> one entry per output
    bytes_by_part: dict[str, int] = field(default_factory=dict)
    # the arena's prefix that GPUs copy to and from (flags, W, dW, X); K, the optimizer state, comes after
    # it and only the host's optimizer touches it, so a CUDA worker pins this prefix only (`HostArena.pin`)
    device_bytes: int = 0


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def plan_layout(layers: nn.ModuleList, graph, model_json: dict, state_per_param: int) -> ArenaLayout:
    """Offsets of everything in the arena (no allocation): layers may live on the meta device."""
    lay = ArenaLayout()
    pos = [0]
    parts = {"flags": 0, "W": 0, "dW": 0, "K": 0, "X": 0}

    def alloc(shape, dtype: str, part: str) -> Entry:
        e = Entry(pos[0], tuple(int(s) for s in shape), dtype)
        pos[0] += aligned(e.nbytes)
        parts[part] += e.nbytes
        return e

    upd_shape, stash_shape = flag_shapes(graph)
    lay.upd_flags = alloc(upd_shape, "int64", "flags")
    lay.stash_flags = alloc(stash_shape, "int64", "flags")
    state = []                      # (shape, dtype, the slot's K list): placed after X, see `device_bytes`
    # every vLayer's W block, back to back, then every dW: consecutive vLayers' weights (a pack's) are one
    # range, and so are their gradients (module docstring, Layout)
    w_of_layer = []
    for layer in layers:
        sl = layer_slots(layer)
        start = pos[0]
        w_of_layer.append(([alloc(t.shape, _dtype_name(t.dtype), "W") for _, _, _, t in sl], sl))
        lay.w_blocks.append((start, pos[0] - start))
    for ws, sl in w_of_layer:
        slots = []
        for w, (_, _, is_param, t) in zip(ws, sl):
            trainable = is_param and t.requires_grad
            dw = alloc(t.shape, _dtype_name(t.dtype), "dW") if trainable else None
            ks: list[Entry] = []
            if trainable:
                state += [(t.shape, _dtype_name(t.dtype), ks)] * state_per_param
            slots.append((w, dw, ks))
        lay.weights.append(slots)
    region_of, region_bytes, local = plan_stash(graph, model_json)
    bases = []
    for size in region_bytes:
        bases.append(pos[0])
        pos[0] += size
        parts["X"] += size
    for tid, entries in local.items():
        base = bases[region_of[tid]]
        lay.stash[tid] = [Entry(base + e.offset, e.shape, e.dtype) for e in entries]
    pos[0] = aligned(pos[0])
    lay.device_bytes = pos[0]
    for shape, dtype, ks in state:
        ks.append(alloc(shape, dtype, "K"))
    lay.total_bytes = pos[0]
    lay.bytes_by_part = parts
    return lay


def host_available_bytes() -> int:
    """Memory the arena may take: MemAvailable (HARMONY_HOST_MEMORY_BYTES overrides it, for tests)."""
    override = os.environ.get("HARMONY_HOST_MEMORY_BYTES")
    if override:
        return int(float(override))
    import psutil
    return psutil.virtual_memory().available


def check_fits(layout: ArenaLayout, reserve_bytes: int = 0) -> None:
    """Refuse, with the numbers, when the arena (+ a reserve for the processes beside it, `process_reserve_bytes`)
    does not fit host memory."""
    need = layout.total_bytes + reserve_bytes
    avail = host_available_bytes()
    if need > avail:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in layout.bytes_by_part.items() if v)
        raise HostMemoryError(
            f"host memory too small: the run needs {need:,} bytes ({format_bytes(need)}: {parts}, "
            f"worker reserve {format_bytes(reserve_bytes)}) but {avail:,} bytes ({format_bytes(avail)}) are "
            f"available; use a smaller model or a machine with more host memory")


CUDA_ERROR_ALREADY_REGISTERED = 712    # cudaErrorHostMemoryAlreadyRegistered


def cuda_error_text(cudart, rc, code: int) -> str:
    """'error 712 (part or all of the requested memory range is already mapped)': torch's cudart binding
    names few of CUDA's error codes (the others print as `cudaError.???`), so the number and CUDA's own
    string are given."""
    try:
        text = cudart.cudaGetErrorString(rc)
    except Exception:  # noqa: BLE001 - a binding without it: the number alone still identifies the error
        text = None
    return f"error {code}" + (f" ({text})" if text else "")


MADV_POPULATE_WRITE = 23     # linux/mman.h (Linux 5.14); Python's mmap module does not name it before 3.13
MADV_DONTNEED = 4


class HostArena:
    """One shared mapping holding the layout. Create in the launcher with `create`, map in workers with
    `attach` (same path)."""

    def __init__(self, layout: ArenaLayout, path: str, buf: torch.Tensor, fd: int | None = None):
        self.layout, self.path, self.buf, self._fd = layout, path, buf, fd
        self.pinned_bytes = 0
        self._registered_ptr = None

    @staticmethod
    def create(layout: ArenaLayout) -> "HostArena":
        check_fits(layout)
        fd = os.memfd_create("harmony-arena")
        size = max(layout.total_bytes, ALIGN)
        os.ftruncate(fd, size)
        path = f"/proc/{os.getpid()}/fd/{fd}"
        buf = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        return HostArena(layout, path, buf, fd)

    @staticmethod
    def attach(layout: ArenaLayout, path: str) -> "HostArena":
        size = max(layout.total_bytes, ALIGN)
        return HostArena(layout, path, torch.from_file(path, shared=True, size=size, dtype=torch.uint8))

    def view(self, e: Entry) -> torch.Tensor:
        return self.buf[e.offset:e.offset + e.nbytes].view(getattr(torch, e.dtype)).view(e.shape)

    # -- typed accessors -------------------------------------------------------------------------
    def weights(self, layer: int) -> list[torch.Tensor]:
        return [self.view(w) for w, _, _ in self.layout.weights[layer]]

    def grads(self, layer: int) -> list[torch.Tensor | None]:
        return [self.view(d) if d is not None else None for _, d, _ in self.layout.weights[layer]]

    def state(self, layer: int) -> list[list[torch.Tensor]]:
        return [[self.view(k) for k in ks] for _, _, ks in self.layout.weights[layer]]

    def stash(self, task_id: int) -> list[torch.Tensor]:
        return [self.view(e) for e in self.layout.stash[task_id]]

    @property
    def upd_done(self) -> torch.Tensor:
        return self.view(self.layout.upd_flags)

    @property
    def stash_done(self) -> torch.Tensor:
        return self.view(self.layout.stash_flags)

    def fill_weights(self, layers: Iterable[nn.Module], clock=None) -> None:
        """Copy a freshly initialised chain into W (launcher, once). `layers` may be built as it is taken
        (ModelSpec.build_each): each vLayer is dropped once copied. With a PhaseClock, the time spent
        building the vLayers adds up under `init_weights` and the copies under `arena_fill`."""
        build = fill = 0.0
        it = iter(layers)
        for i in itertools.count():
            t0 = time.perf_counter()
            layer = next(it, None)       # built here when `layers` is a generator
            t1 = time.perf_counter()
            build += t1 - t0
            if layer is None:
                break
            for dst, (_, _, _, src) in zip(self.weights(i), layer_slots(layer), strict=True):
                dst.copy_(src.detach())
            del layer                    # before the next vLayer is built: one at a time
            fill += time.perf_counter() - t1
        if clock is not None:
            clock.add("init_weights", build)
            clock.add("arena_fill", fill)

    def prefault(self, nbytes: int | None = None, threads: int | None = None) -> int:
        """Give the first `nbytes` of the mapping (default: the part workers pin) host pages now, several
        threads at once, so that the workers' cudaHostRegister finds them allocated. Pinning a fresh memfd
        allocates and zeroes every page on one thread: 2.1 GB/s (1.4-3.8) over 51 runs, 67 s of a 147 s run at most
        (docs/performance.md entry 45). MADV_POPULATE_WRITE (Linux 5.14) faults the pages in without writing
        to them, so it is safe beside the workers and the weight fill; older kernels get one posix_fallocate.
        The pages stay in the memory file, not in this process's resident set. Returns the bytes it covered."""
        import ctypes
        from concurrent.futures import ThreadPoolExecutor
        n = min(self.layout.device_bytes if nbytes is None else nbytes, self.buf.numel())
        if n <= 0:
            return 0
        threads = max(1, threads or min(16, os.cpu_count() or 1))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        base, page, chunk = self.buf.data_ptr(), os.sysconf("SC_PAGE_SIZE"), 1 << 30

        def populate(off: int) -> int:      # 0, or the errno
            size = min(chunk, n - off)
            if libc.madvise(base + off, size, MADV_POPULATE_WRITE) != 0:
                return ctypes.get_errno()
            # drop this process's page-table entries again: the memfd keeps the pages (the workers map
            # them), and the launcher's RSS, which the run records add to the workers', stays as it was
            libc.madvise(base + off, size, MADV_DONTNEED)
            return 0
        assert base % page == 0, "the arena mapping is page-aligned"
        with ThreadPoolExecutor(threads) as pool:
            errs = set(pool.map(populate, range(0, n, chunk))) - {0}
        if errs:                            # EINVAL: a kernel without MADV_POPULATE_WRITE
            if self._fd is None:
                raise OSError(min(errs), f"madvise(MADV_POPULATE_WRITE) of the host arena: {os.strerror(min(errs))}")
            os.posix_fallocate(self._fd, 0, n)
        return n

    def pin(self) -> int:
        """Register the part of the mapping that GPUs copy to and from (`ArenaLayout.device_bytes`: all but
        the optimizer state) with CUDA, page-locked and DMA-able, in this process; returns pinned bytes.
        Registering costs time in proportion to its size, in every worker, at set-up."""
        if self._registered_ptr is not None:
            return self.pinned_bytes
        cudart = torch.cuda.cudart()
        ptr, size = self.buf.data_ptr(), self.layout.device_bytes
        rc = cudart.cudaHostRegister(ptr, size, 0)
        code = int(getattr(rc, "value", rc))
        if code != 0:
            hint = ("this process still has an arena registered at that address: unpin one before its "
                    "mapping goes (HostArena.unpin)" if code == CUDA_ERROR_ALREADY_REGISTERED
                    else "check the memlock limit (ulimit -l)")
            raise RuntimeError(f"cudaHostRegister of the {format_bytes(size)} host arena failed: "
                               f"{cuda_error_text(cudart, rc, code)} (pointer {ptr:#x}, {size:,} of "
                               f"{self.buf.numel():,} mapped bytes); {hint}")
        self._registered_ptr, self.pinned_bytes = ptr, size
        return size

    def unpin(self) -> None:
        if self._registered_ptr is not None:
            torch.cuda.cudart().cudaHostUnregister(self._registered_ptr)
            self._registered_ptr, self.pinned_bytes = None, 0

    def close(self) -> None:
        self.buf = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
