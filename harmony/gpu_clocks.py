"""The GPU's SM clock, power, temperature and clock-event reasons, sampled beside timed work (NVML).

Kernels that take longer in a run than in its profile (docs/performance.md entries 52 and 65: 3-7% on the
`large` GPT-2, every task alike) have two explanations that the records could not tell apart: the clock
fell under sustained load (a power or thermal limit), or the copy engines' traffic shared the GPU's memory.
A profile trial lasts at most 0.25 s, a run's backward task seconds. With the clock sampled beside both,
the profile's `gpu_clocks` and the run's say which.

Samples taken while NVML reports the GPU idle are counted but left out of the clock statistics: between
trials and during CPU optimizer steps the clock drops to its idle value, which says nothing about the
kernels' speed.
"""
from __future__ import annotations

import statistics
import threading
from typing import Any

# NVML's clock-event ("throttle") reason bits (nvml.h nvmlClocksEventReason*), named as nvidia-smi names them
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
IDLE = 0x1
INTERVAL_S = 0.1

# one sample: (SM clock MHz, power W, temperature C, reason bits); None where NVML could not say
Sample = tuple[float | None, float | None, float | None, int | None]


def summarize(samples: list[Sample], sm_limit_mhz: float | None = None,
              interval_s: float = INTERVAL_S) -> dict[str, Any] | None:
    """What a stretch of samples says: the SM clock's median, minimum and maximum over the busy samples
    (NVML's idle bit clear), the power's median and maximum, the hottest temperature, and for each clock-event
    reason the fraction of all samples it was set in. None without samples."""
    if not samples:
        return None
    busy = [s for s in samples if not ((s[3] or 0) & IDLE)]
    sm = [s[0] for s in busy if s[0] is not None]
    power = [s[1] for s in busy if s[1] is not None]
    temp = [s[2] for s in samples if s[2] is not None]
    reasons: dict[str, float] = {}
    for bit, name in REASONS.items():
        n = sum(1 for s in samples if (s[3] or 0) & bit)
        if n:
            reasons[name] = round(n / len(samples), 3)
    return {
        "samples": len(samples), "busy_samples": len(busy), "interval_s": interval_s,
        "sm_mhz_median": statistics.median(sm) if sm else None, "sm_mhz_min": min(sm) if sm else None,
        "sm_mhz_max": max(sm) if sm else None, "sm_mhz_limit": sm_limit_mhz,
        "power_w_median": round(statistics.median(power), 1) if power else None,
        "power_w_max": round(max(power), 1) if power else None,
        "temperature_c_max": max(temp) if temp else None, "reasons": reasons,
    }


def combine(parts: list[dict | None]) -> dict[str, Any] | None:
    """Several stretches' summaries as one (a run's steady iterations): medians of the medians, the lowest
    minimum, the highest maximum, each reason's fraction weighted by the stretches' samples."""
    parts = [p for p in parts if p]
    if not parts:
        return None

    def vals(key: str) -> list:
        return [p[key] for p in parts if p.get(key) is not None]
    n = sum(p["samples"] for p in parts)
    reasons: dict[str, float] = {}
    for p in parts:
        for name, frac in p["reasons"].items():
            reasons[name] = reasons.get(name, 0.0) + frac * p["samples"] / n
    med = vals("sm_mhz_median")
    pw = vals("power_w_median")
    return {
        "samples": n, "busy_samples": sum(p["busy_samples"] for p in parts), "interval_s": parts[0]["interval_s"],
        "sm_mhz_median": statistics.median(med) if med else None,
        "sm_mhz_min": min(vals("sm_mhz_min"), default=None), "sm_mhz_max": max(vals("sm_mhz_max"), default=None),
        "sm_mhz_limit": parts[0].get("sm_mhz_limit"),
        "power_w_median": round(statistics.median(pw), 1) if pw else None,
        "power_w_max": max(vals("power_w_max"), default=None),
        "temperature_c_max": max(vals("temperature_c_max"), default=None),
        "reasons": {k: round(v, 3) for k, v in sorted(reasons.items())},
    }


def per_gpu(iterations: list[list[dict | None] | None]) -> list[dict | None] | None:
    """A run's clocks per GPU from its iterations' (each a list per GPU, or None): each GPU's stretches
    combined; None where no iteration sampled any."""
    rows = [row for row in iterations if row and any(row)]
    if not rows:
        return None
    return [combine([row[g] for row in rows if g < len(row)]) for g in range(max(len(r) for r in rows))]


class ClockSampler:
    """Samples one GPU every INTERVAL_S on a daemon thread; `take()` returns the summary of the samples since
    the last `take()` and starts a new stretch. Build it with `for_device`, which gives None where there is
    nothing to sample (a CPU device, no NVML): callers then record nothing."""

    def __init__(self, nvml, handle, interval_s: float = INTERVAL_S):
        self._nvml, self._handle, self._interval = nvml, handle, interval_s
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sm_limit_mhz = self._read(lambda: float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)))

    @classmethod
    def for_device(cls, device) -> "ClockSampler | None":
        import torch
        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            return None
        try:
            import pynvml
            pynvml.nvmlInit()
            # NVML numbers GPUs whatever CUDA_VISIBLE_DEVICES hides: find this device by its UUID
            uuid = str(torch.cuda.get_device_properties(dev).uuid)
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            return cls(pynvml, handle)
        except Exception:  # noqa: BLE001 - no NVML here: the record goes without clocks
            return None

    @staticmethod
    def _read(fn):
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a metric this GPU or driver does not report
            return None

    def sample(self) -> Sample:
        nvml, h = self._nvml, self._handle
        # newer NVML names "throttle reasons" "clocks event reasons": either, else none (the sample reads None)
        reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                      or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        return (self._read(lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
                self._read(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                self._read(lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))),
                self._read(lambda: int(reasons_fn(h))))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            s = self.sample()
            with self._lock:
                self._samples.append(s)

    def start(self) -> "ClockSampler":
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="gpu-clocks", daemon=True)
            self._thread.start()
        return self

    def take(self) -> dict[str, Any] | None:
        with self._lock:
            samples, self._samples = self._samples, []
        return summarize(samples, self.sm_limit_mhz, self._interval)

    def stop(self) -> dict[str, Any] | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._interval + 1.0)
            self._thread = None
        return self.take()

    def __enter__(self) -> "ClockSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class DeviceClocks:
    """A ClockSampler per device of a process (none for a CPU device), started at once and taken together:
    `take()` gives one summary per device, in the devices' order, or None when none has samples; `stop()`
    ends the sampling and takes the last stretch. `active`: whether any device is sampled at all."""

    def __init__(self, devices):
        self._samplers = [ClockSampler.for_device(d) for d in devices]
        self.active = any(smp is not None for smp in self._samplers)
        for smp in self._samplers:
            if smp is not None:
                smp.start()

    def take(self) -> list[dict | None] | None:
        row = [smp.take() if smp is not None else None for smp in self._samplers]
        return row if any(row) else None

    def stop(self) -> list[dict | None] | None:
        row = [smp.stop() if smp is not None else None for smp in self._samplers]
        return row if any(row) else None


def held_by(clocks: dict, none: str = "none") -> str:
    """The clock-event reasons of a summary with the share of samples each was set in (gpu_idle left out)."""
    reasons = (clocks.get("reasons") or {}).items()
    return ", ".join(f"{k} {v:.0%}" for k, v in reasons if k != "gpu_idle") or none


def line(name: str, clocks: dict | None) -> str:
    """One line for a report: the SM clock and what held it down."""
    if not clocks or clocks.get("sm_mhz_median") is None:
        return f"{name}: no GPU clock samples"
    held = held_by(clocks)
    limit = f" of {clocks['sm_mhz_limit']:.0f}" if clocks.get("sm_mhz_limit") else ""
    return (f"{name}: SM clock median {clocks['sm_mhz_median']:.0f}{limit} MHz (min {clocks['sm_mhz_min']:.0f}), "
            f"power median {clocks['power_w_median']} W, max {clocks['temperature_c_max']} C, "
            f"{clocks['busy_samples']} busy of {clocks['samples']} samples; clock-event reasons: {held}")


SLOWER_CLOCK = 0.05     # a run's median SM clock this far under the profile's is worth a note


def slower_than_profiled(profile_clocks: dict | None, run_clocks: list[dict | None] | None,
                         compute_scale: float | dict[int, float] = 1.0) -> str | None:
    """A note when a run's GPU held a clock well under the one its profile was timed at (a power or thermal
    limit under sustained load: the `large` GPT-2 ran at 1,748 MHz on an H100 whose profile saw 1,980, and its
    tasks took 1.05x their profiled time, docs/performance.md entry 65), unless the schedule already plans
    with a compute scale. None when either side has no samples or the clocks agree."""
    if compute_scale != 1.0 or not profile_clocks or not profile_clocks.get("sm_mhz_median"):
        return None
    ref = profile_clocks["sm_mhz_median"]
    worst = None
    for rank, c in enumerate(run_clocks or []):
        if c and c.get("sm_mhz_median") and c["sm_mhz_median"] < ref * (1 - SLOWER_CLOCK):
            if worst is None or c["sm_mhz_median"] < worst[1]["sm_mhz_median"]:
                worst = (rank, c)
    if worst is None:
        return None
    rank, c = worst
    held = held_by(c, none="no reason NVML gave")
    return (f"harmony run: note: GPU {rank} ran at {c['sm_mhz_median']:.0f} MHz ({held}) against the "
            f"{ref:.0f} MHz its profile was timed at, so its tasks run slower than the prediction assumes. "
            f"`harmony profile --sustain 4` measures the factors (one per microbatch size) and `harmony schedule "
            f"--compute-scale profile` plans with them (docs/performance.md entries 65, 66 and 68)")


def gpu_state(nvml=None) -> list[dict] | None:
    """Every GPU that NVML sees, now: its index and UUID, utilisation (the share of NVML's last sample
    period in which a kernel ran), memory used, SM clock and power; None without NVML. For a stalled
    run's record (harmony/runtime/launch.py): GPUs busy at a stall run kernels that wait on each other
    (NCCL's send and receive kernels spin until their peer's arrive), idle ones wait on their host or on
    an event (docs/performance.md entry 107). `nvml`: the pynvml module, or a stand-in for tests."""
    read = ClockSampler._read
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            util = read(lambda: nvml.nvmlDeviceGetUtilizationRates(h))
            mem = read(lambda: nvml.nvmlDeviceGetMemoryInfo(h))
            uuid = read(lambda: nvml.nvmlDeviceGetUUID(h))
            out.append({"index": i, "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                        "gpu_util_pct": util.gpu if util is not None else None,
                        "memory_used_bytes": mem.used if mem is not None else None,
                        "sm_clock_mhz": read(lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
                        "power_w": read(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)})
        return out
    except Exception:  # noqa: BLE001 - no NVML (a CPU machine, no driver): the record says nothing
        return None
