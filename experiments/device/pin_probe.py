"""Why `benchmarks/runtime_overhead.py --device cuda` failed at cudaHostRegister on the H100 host
(h100-overhead1, 2026-11-24) at 32 blocks per stage but not at 2: register memfd mappings like the
runtime's host arena (harmony/runtime/host_store.py) in one process, at several sizes, the creator's
mapping and a second mapping of the same file, and print CUDA's error code for each.
    python3 experiments/device/pin_probe.py
"""
from __future__ import annotations

import os
import resource

import torch

from harmony.runtime.host_store import cuda_error_text


def mapping(size: int, fd: int | None = None):
    if fd is None:
        fd = os.memfd_create("probe")
        os.ftruncate(fd, size)
    path = f"/proc/{os.getpid()}/fd/{fd}"
    return fd, torch.from_file(path, shared=True, size=size, dtype=torch.uint8)


def register(buf: torch.Tensor, size: int) -> str:
    cudart = torch.cuda.cudart()
    rc = cudart.cudaHostRegister(buf.data_ptr(), size, 0)
    code = int(getattr(rc, "value", rc))
    if code == 0:
        cudart.cudaHostUnregister(buf.data_ptr())
        return "ok"
    return cuda_error_text(cudart, rc, code)


def main() -> None:
    print("memlock (soft, hard):", resource.getrlimit(resource.RLIMIT_MEMLOCK))
    caps = [l.strip() for l in open("/proc/self/status") if l.startswith("Cap")]
    print("capabilities:", "; ".join(caps))
    print("before any CUDA call: initialised", torch.cuda.is_initialized())
    for size in (4096, 65536, 1 << 20, 1_321_000, 4 << 20, 64 << 20, 1 << 30):
        fd, first = mapping(size)
        _, second = mapping(size, fd)
        print(f"size {size:>11,}: creator's mapping {register(first, size)}; second mapping of the file "
              f"{register(second, size)}; part of it ({size // 2:,} bytes) {register(second, size // 2)}")
        del first, second
        os.close(fd)
    print("after: initialised", torch.cuda.is_initialized())


if __name__ == "__main__":
    main()
