"""Device settings every stage applies the same way: the GPU memory cap and the matmul precision.

`--gpu-memory 11GiB` makes a big GPU behave like the paper's GTX 1080 Ti: `apply_memory_cap` limits the
CUDA caching allocator of one device with `torch.cuda.set_per_process_memory_fraction(cap / total)`, so
any allocation that would take the allocator's reserved memory past the cap raises
`torch.cuda.OutOfMemoryError` exactly as a smaller GPU would. The CUDA context itself (a few hundred MiB)
is outside the allocator and not counted, as on the real small GPU it would not be either. On the CPU the
cap is a no-op; the returned record says so, and every artifact stores that record.

Precision: `set_precision('fp32'|'tf32'|'bf16')` sets the global matmul/cuDNN flags, and
`autocast(device, precision)` is the context a forward runs in (bf16 autocast; no-op otherwise). The
profiler, the runtime and the baselines call these two, so all of them compute the same way.
"""
from __future__ import annotations

import contextlib
import os
import threading
import weakref

import torch

from harmony.units import format_bytes, parse_bytes

PRECISIONS = ("fp32", "tf32", "bf16")


def add_gpu_memory_argument(p, default: str | None = None) -> None:
    """The `--gpu-memory` flag, identical on profile, run and every baseline."""
    p.add_argument("--gpu-memory", default=default, metavar="SIZE",
                   help="cap the GPU memory PyTorch may allocate, e.g. 11GiB (the paper's GTX 1080 Ti); "
                        "default: no cap. Ignored (and recorded as such) on the CPU")


def alloc_retries(device) -> int:
    """How many times the caching allocator of `device` has, since the process started, freed its cached
    blocks to retry a cudaMalloc that failed (0 on the CPU). Each retry synchronizes the device; a run whose
    memory sits at the cap pays it on every iteration, so the run records it per iteration."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))


def reserved_by_stream(device, names: dict[int, str]) -> dict[str, dict[str, int]]:
    """The caching allocator's segments on `device` now, per CUDA stream (segments_by_stream of
    torch.cuda.memory_snapshot()). A block cached on one stream is reused only by allocations on that stream,
    so when copies allocate on their own stream, memory freed by one stream's tensors is not there for the
    other's: reserved can reach the cap with much less allocated, and every allocation that then fails makes
    the allocator free its cache and retry (`alloc_retries`). Empty on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return segments_by_stream(torch.cuda.memory_snapshot(), idx, names)


def segments_by_stream(segments: list[dict], device_index: int, names: dict[int, str]) -> dict[str, dict[str, int]]:
    """A memory snapshot's segments on one device summed per stream, {name: {reserved, allocated, free,
    largest_free, segments}} in bytes: `free` is what the stream holds cached but unused (its inactive
    blocks), `largest_free` the largest of them, the largest request it can serve without growing a segment;
    reserved - allocated - free is what blocks in use round up to. `names` maps a stream handle
    (`Stream.cuda_stream`) to its name; other streams count as "other"."""
    out: dict[str, dict[str, int]] = {}
    for seg in segments:
        if seg.get("device") != device_index:
            continue
        part = out.setdefault(names.get(seg.get("stream"), "other"),
                              {"reserved": 0, "allocated": 0, "free": 0, "largest_free": 0, "segments": 0})
        part["reserved"] += int(seg.get("total_size", 0))
        part["allocated"] += int(seg.get("allocated_size", 0))
        part["segments"] += 1
        for block in seg.get("blocks", ()):
            if block.get("state") == "inactive":
                part["free"] += int(block.get("size", 0))
                part["largest_free"] = max(part["largest_free"], int(block.get("size", 0)))
    return out


def parse_cap(text) -> int | None:
    """'11GiB' -> bytes; None/''/'none' -> None. A bad size raises ValueError with the accepted forms."""
    cap = parse_bytes(text)
    if cap is not None and cap <= 0:
        raise ValueError(f"--gpu-memory must be positive, got {text!r}")
    return cap


def apply_memory_cap(device, cap_bytes: int | None) -> dict:
    """Cap the caching allocator of `device` at `cap_bytes` (None: no cap). Returns the record to store:
    {gpu_memory_cap, applied, device_total_bytes, fraction}. Raises ValueError if the cap exceeds the
    device's memory (a cap that cannot be honoured would silently make results incomparable)."""
    device = torch.device(device)
    rec = {"gpu_memory_cap": cap_bytes, "applied": False, "device_total_bytes": None, "fraction": None}
    if device.type != "cuda":
        rec["note"] = "cpu: no allocator cap (recorded only)"
        return rec
    idx = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(idx).total_memory
    rec["device_total_bytes"] = total
    if cap_bytes is None:
        torch.cuda.set_per_process_memory_fraction(1.0, idx)
        return rec
    if cap_bytes > total:
        raise ValueError(f"--gpu-memory {format_bytes(cap_bytes)} is more than the "
                         f"{format_bytes(total)} of {torch.cuda.get_device_name(idx)}")
    frac = cap_bytes / total
    torch.cuda.set_per_process_memory_fraction(frac, idx)
    rec.update(applied=True, fraction=frac)
    return rec


def usable_bytes(device, cap_bytes: int | None) -> int | None:
    """What the allocator may hand out on `device`: the cap, else the device's memory; None on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return cap_bytes
    idx = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(idx).total_memory
    return min(cap_bytes, total) if cap_bytes else total


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_cached(device) -> None:
    """After an OOM: collect garbage and give cached blocks back so the next attempt starts clean."""
    import gc
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def set_precision(precision: str) -> dict:
    """Global matmul/cuDNN settings for `precision`; returns them for the record.
    fp32: strict IEEE fp32 (no TF32 anywhere); tf32: TF32 matmuls and convolutions; bf16: fp32 master
    weights with bf16 autocast for the forward (matmuls in fp32 run strict)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return {"precision": precision, "matmul_allow_tf32": tf32, "cudnn_allow_tf32": tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "autocast": "bfloat16" if precision == "bf16" else None}


def set_deterministic(strict: bool = False) -> dict:
    """Deterministic CUDA kernels, chosen without timing: cuDNN deterministic, no autotuning (benchmark
    picks algorithms by measured speed, which may differ between two processes), deterministic
    implementations where torch has them, and cuBLAS's deterministic workspace (CUBLAS_WORKSPACE_CONFIG;
    read when the first cuBLAS handle is made, so call this before the first matmul). TF32 is governed by
    set_precision.
    strict=False (warn_only): an op without a deterministic kernel warns instead of failing, and fused
    (memory-efficient) attention keeps its non-deterministic backward, so GPT-2 still differs run to run
    by about 1e-6 (experiments/determinism_probe.py, docs/performance.md entry 71). The GPU correctness
    test sets HARMONY_DETERMINISTIC=1, which spawned workers inherit, and calls this in the test process
    too. strict=True (`harmony run --deterministic`): every op must have a deterministic kernel, attention
    takes its deterministic backward, and an op without one raises (torch names it)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True, warn_only=not strict)
    return {"cudnn_deterministic": True, "cudnn_benchmark": False,
            "deterministic_algorithms": "strict" if strict else "warn_only",
            "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"]}


def autocast(device, precision: str):
    """Context for forwards: bf16 autocast when precision is bf16, else nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ------------------------------------------------------------------------------------------------
# Measuring memory: one interface for CUDA (the caching allocator's counters) and the CPU (a tracker
# of tensor storages alive), so the profiler and the pack check measure the same quantity on both.
# ------------------------------------------------------------------------------------------------
class MemoryMeter:
    """`current()` and `peak()` in bytes; use deltas: `base = m.current(); m.reset_peak(); ...;
    m.peak() - base`.

    CUDA: torch.cuda.memory_allocated / max_memory_allocated (bytes handed out by the caching allocator,
    after a synchronize). CPU: while the meter is entered, a TorchDispatchMode sees every aten op, and
    every storage an op creates (one not shared with the op's inputs) is counted from its creation until
    the storage is freed (a weakref finalizer on the storage). That is exactly "bytes of tensors alive"
    created inside the region: activations, saved tensors, gradients, temporaries, with views and
    in-place results not double counted. Storages created before entering are not seen (they are the
    baseline). Allocator rounding and library scratch buffers (oneDNN) are not seen on the CPU.
    """

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._mode = None

    def __enter__(self):
        if not self.cuda:
            self._mode = _LiveStorageMode()
            self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def current(self) -> int:
        if self.cuda:
            self.sync()
            return torch.cuda.memory_allocated(self.device)
        return self._mode.live if self._mode else 0

    def reset_peak(self) -> None:
        if self.cuda:
            self.sync()
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self._mode:
            self._mode.peak = self._mode.live

    def peak(self) -> int:
        if self.cuda:
            self.sync()
            return torch.cuda.max_memory_allocated(self.device)
        return self._mode.peak if self._mode else 0


def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):   # tensors without storage (sparse, nested, meta)
        return 0


from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402


class _LiveStorageMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}
        # a storage made here may be freed on another thread (its finalizer runs where the last reference
        # goes), and `live -= n` there against `live += n` here are each a read-modify-write that a thread
        # switch can split. (Guarding them did not remove entry 89's sporadic excess: that is elsewhere.)
        self._lock = threading.Lock()

    def _free(self, key: int) -> None:
        with self._lock:
            n = self._sizes.pop(key, None)
            if n is not None:
                self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat_in, _ = tree_flatten((args, kwargs))
        seen = {_storage_key(a) for a in flat_in if isinstance(a, torch.Tensor)}
        flat_out, _ = tree_flatten(out)
        for t in flat_out:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            key = _storage_key(t)
            if not key or key in seen or key in self._sizes:
                continue
            st = t.untyped_storage()
            with self._lock:
                self._sizes[key] = st.nbytes()
                self.live += st.nbytes()
                self.peak = max(self.peak, self.live)
            weakref.finalize(st, self._free, key)
            seen.add(key)
        return out
