"""The run record: one JSONL file per run, written by `harmony run` and every baseline alike.

Lines are `{"record": "iteration", ...}` (one per training iteration, written as it finishes) followed by
one `{"record": "summary", ...}`. A run that dies keeps its iteration lines and gets a summary with
status `error`/`oom`/`interrupted`, so no log is ever lost. Figures read only the summary.
"""
from __future__ import annotations

import dataclasses
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
# over-time: a run that had a whole device call and could not finish its first timed iteration in it
# (baselines/common.py train_loop); its finished iterations stay in the record
STATUSES = ("ok", "oom", "infeasible", "error", "unavailable", "interrupted", "over-time")

# Keys every summary record carries (figures, checks and tests rely on them).
SUMMARY_KEYS = (
    "record", "schema_version", "system", "model", "mode", "gpus", "minibatch", "status",
    "iter_time_s", "samples_per_s", "bytes_h2d", "bytes_d2h", "bytes_p2p",
    "predicted_iter_time_s", "schedule_bound_s", "roofline_s", "env",
)
ENV_KEYS = ("gpu", "torch", "precision", "gpu_memory_cap")


@dataclass
class IterationRecord:
    iteration: int
    time_s: float
    samples_per_s: float
    loss: float | None
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    bytes_p2p: int = 0
    bytes_allreduce: int = 0
    peak_allocated_bytes: list[int] = field(default_factory=list)   # per GPU
    peak_reserved_bytes: list[int] = field(default_factory=list)    # per GPU
    alloc_retries: list[int] = field(default_factory=list)          # per GPU, during this iteration
    host_rss_bytes: int = 0
    host_pinned_bytes: int = 0
    # host memory in use, shared pages counted once: the processes' proportional set sizes summed
    # (process_pss), measured after iteration 0 only (it walks the page tables); None on other iterations
    host_pss_bytes: int | None = None
    # per GPU, its clock during this iteration (harmony/gpu_clocks.py); None where none was sampled
    gpu_clocks: list[dict | None] | None = None

    def to_json(self) -> dict:
        return {"record": "iteration", **dataclasses.asdict(self)}


def process_pss(pid: int | None = None) -> int | None:
    """A process's proportional set size in bytes (this one without `pid`; None where psutil cannot tell,
    e.g. not Linux): its private pages plus its share of each page it maps with other processes. Summed over
    the processes of a run at one moment, it counts a shared page once, where their RSS counts it once per
    process that touched it: Harmony's launcher writes the host arena's weights and every worker maps and
    pins the arena, so the sum of RSS counts the weights twice at N = 1 and the arena once per worker
    (docs/runtime.md). It walks the page tables (about 12 ms per GiB mapped), so runs take it once, outside
    every timed iteration."""
    try:
        import psutil
        return int(psutil.Process(pid).memory_full_info().pss)
    except Exception:  # noqa: BLE001 - no smaps, psutil without pss, or the process is gone: not measured
        return None


def steady_state(items: list, warmup: int) -> list:
    """The iterations after the first `warmup` (or the last one alone if there are not more)."""
    return items[warmup:] if len(items) > warmup else items[-1:]


def median_steady_state(times: list[float], warmup: int) -> float | None:
    """Median of iteration times after dropping the first `warmup` (or all but the last if too few)."""
    if not times:
        return None
    steady = steady_state(times, warmup)
    return statistics.median(steady)


def make_summary(*, system: str, model: str, mode: str | None, gpus: int, minibatch: int, status: str,
                 iterations: list[IterationRecord], warmup: int, env: dict, message: str | None = None,
                 predicted_iter_time_s: float | None = None, schedule_bound_s: float | None = None,
                 roofline_s: float | None = None, **extra: Any) -> dict:
    """The summary record. Steady-state medians exclude `warmup` iterations; bytes are per iteration."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    steady = steady_state(iterations, warmup)
    t = median_steady_state([it.time_s for it in iterations], warmup)
    if status == "over-time":     # it timed no iteration past its warm-up: the warm-up is not its rate
        t = None

    def med(attr: str) -> int | None:
        vals = [getattr(it, attr) for it in steady]
        return int(statistics.median(vals)) if vals else None

    out = {
        "record": "summary", "schema_version": SCHEMA_VERSION, "system": system, "model": model,
        "mode": mode, "gpus": gpus, "minibatch": minibatch, "status": status, "message": message,
        "iterations": len(iterations), "warmup_iterations": min(warmup, max(len(iterations) - 1, 0)),
        "iter_time_s": t, "samples_per_s": (minibatch / t) if t else None,
        "bytes_h2d": med("bytes_h2d"), "bytes_d2h": med("bytes_d2h"), "bytes_p2p": med("bytes_p2p"),
        "bytes_allreduce": med("bytes_allreduce"),
        "peak_allocated_bytes": _max_per_gpu(iterations, "peak_allocated_bytes"),
        "peak_reserved_bytes": _max_per_gpu(iterations, "peak_reserved_bytes"),
        # per GPU, the most allocator retries in one steady-state iteration (see allocator_warning)
        "alloc_retries": _max_per_gpu(steady, "alloc_retries"),
        "host_rss_bytes": max((it.host_rss_bytes for it in iterations), default=None),
        "host_pss_bytes": max((it.host_pss_bytes for it in iterations if it.host_pss_bytes is not None),
                              default=None),
        "final_loss": iterations[-1].loss if iterations else None,
        "predicted_iter_time_s": predicted_iter_time_s, "schedule_bound_s": schedule_bound_s,
        "roofline_s": roofline_s, "env": env,
    }
    out.update(extra)
    return out


def _max_per_gpu(iterations: list[IterationRecord], attr: str) -> list[int]:
    per = [getattr(it, attr) for it in iterations if getattr(it, attr)]
    return [max(col) for col in zip(*per)] if per else []


def allocator_warning(summary: dict) -> str | None:
    """A line for the log when the steady-state iterations made the caching allocator retry: its reserved
    memory reached the cap, so it freed cached blocks (synchronizing the device) to retry an allocation.
    The run is then slower than its schedule predicts, by the synchronizations and the lost overlap."""
    retries = summary.get("alloc_retries") or []
    if not any(retries):
        return None
    peaks = ", ".join(f"{b / 2**30:.2f}" for b in summary.get("peak_reserved_bytes") or [])
    return (f"warning: the CUDA caching allocator retried {max(retries)} allocation(s) per iteration "
            f"(per GPU: {retries}; peak reserved {peaks} GiB): the memory in use reaches the cap and every "
            "retry synchronizes the device. For Harmony, make the schedule again with a larger --headroom; "
            "for a baseline, a smaller microbatch")


def format_reserved_by_stream(per_rank: list[dict] | None) -> list[str]:
    """One line per rank of a summary's `reserved_by_stream` (the caching allocator's segments per CUDA
    stream at the end of the last iteration, harmony.gpumem.reserved_by_stream)."""
    lines = []
    for r, streams in enumerate(per_rank or []):
        parts = [f"{name} {v['reserved'] / 2**30:.2f} ({v['allocated'] / 2**30:.2f} in use)"
                 for name, v in sorted(streams.items(), key=lambda kv: -kv[1]["reserved"])]
        if parts:
            lines.append(f"rank {r} reserved GiB by stream after the last iteration: " + ", ".join(parts))
    return lines


def format_host_phases(phases: list[dict] | None) -> list[str]:
    """One line per rank of a summary's `host_phases` (runtime workers): where each rank's host time went
    in a steady-state iteration, and the optimizer's measured rate (parameters per thread-second)."""
    lines = []
    for r, p in enumerate(phases or []):
        step = p.get("upd_step_s") or 0.0
        rate = f", {p['upd_params'] / step / 1e9:.2f} G params/s per thread" if step and p.get("upd_params") else ""
        ahead = f", run-ahead waits {p['run_ahead_wait_s']:.3f}" if "run_ahead_wait_s" in p else ""
        lines.append(f"rank {r} host: issue {p['issue_s']:.3f} s (update-flag waits {p['flag_wait_s']:.3f}{ahead}), then "
                     f"sends {p['sends_drain_s']:.3f}, GPU drain {p['gpu_drain_s']:.3f}, optimizer drain "
                     f"{p['upd_drain_s']:.3f} s; {p.get('upd_steps', 0)} updates: waiting for gradients "
                     f"{p.get('upd_wait_grads_s', 0):.3f}, stepping {step:.3f} thread-s{rate}"
                     + (f"; {p['grad_adds']} gradient groups added on the host in {p['grad_add_s']:.3f} s"
                        if p.get("grad_adds") else "")
                     + (f"; garbage collector {p['gc_s']:.3f} s ({p['gc_collections']} collections, "
                        f"{p.get('gc_gen2', 0)} full)" if p.get("gc_collections") else ""))
    return lines


def validate_summary(rec: dict) -> None:
    missing = [k for k in SUMMARY_KEYS if k not in rec]
    missing += [f"env.{k}" for k in ENV_KEYS if k not in rec.get("env", {})]
    if missing:
        raise ValueError(f"summary record lacks {', '.join(missing)}")
    if rec["status"] not in STATUSES:
        raise ValueError(f"summary status {rec['status']!r} is not one of {STATUSES}")


# ------------------------------------------------------------------------------------------------
# Environment record
# ------------------------------------------------------------------------------------------------
def git_commit() -> str | None:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


class PhaseClock:
    """Seconds per named set-up phase (where a run's time before its first iteration goes): `lap(name)`
    closes the phase that began at the previous lap (or at construction)."""

    def __init__(self):
        self.phases: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self._t, 3)
        self._t = now

    def restart(self) -> None:
        """The next phase begins now (the time since the last lap belongs to no phase)."""
        self._t = time.perf_counter()

    def add(self, name: str, seconds: float) -> None:
        """Seconds of a phase timed in pieces (interleaved with another); the next phase begins now."""
        self.phases[name] = round(self.phases.get(name, 0.0) + seconds, 3)
        self._t = time.perf_counter()


def host_memory_record() -> dict:
    """The host's memory: total, and available now (what a run's host arena is checked against)."""
    import psutil
    vm = psutil.virtual_memory()
    return {"host_memory_bytes": vm.total, "host_memory_available_bytes": vm.available}


def env_record(device: str = "cpu", precision: str = "fp32", gpu_memory_cap: int | None = None,
               calibration: dict | None = None) -> dict:
    """GPU model/count, driver, torch/CUDA, precision, cap, host, git commit, calibrated bandwidths."""
    import torch

    from harmony.provenance import source_trees
    rec: dict[str, Any] = {
        "device": device, "precision": precision, "gpu_memory_cap": gpu_memory_cap,
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "host": platform.node(), "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "git_commit": git_commit(),
        # git's tree hash of the code folders from the files themselves: the GPU machines' copy of .git can
        # lag the code it travels with, so git_commit alone may name the wrong commit (harmony.provenance)
        "source_trees": source_trees(),
        # the caching allocator's settings (expandable segments or not) decide how close to a cap a run gets
        "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        # how idle OpenMP threads wait: spinning teams of several processes starve each other (entry 19)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        # NCCL's settings change how vPP's GPU-to-GPU sends run (thread blocks, copy engines; entries 46, 49)
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "gpu": None, "gpu_count": 0, "driver": None,
        # host-bound runs depend on the CPU and on what else the host is doing: which CPU, how loaded, how
        # much memory is free when the run starts (resnet1026 re-runs on another lease took 45% longer per
        # iteration with the same GPU work, and nothing recorded said why)
        "cpu_model": cpu_model(), "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        **host_memory_record(),
    }
    if os.environ.get("HARMONY_RUN_TAG"):
        # which re-run list made this record (experiments/device/rerun-stale.py: its superseded/ REASON), so
        # that the list knows its own runs when it is called again
        rec["run_tag"] = os.environ["HARMONY_RUN_TAG"]
    if device.startswith("cuda") and torch.cuda.is_available():
        rec["gpu"] = torch.cuda.get_device_name(0)
        rec["gpu_count"] = torch.cuda.device_count()
        rec["gpu_total_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        try:
            import pynvml
            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            rec["driver"] = drv.decode() if isinstance(drv, bytes) else drv
            uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())]
            rec["host_gpu_uuids"] = [u.decode() if isinstance(u, bytes) else u for u in uuids]
        except Exception:  # noqa: BLE001 - the driver version is informative only
            pass
        # which GPUs exactly: the ones this process computes on, in torch's order. A job run beside another
        # with CUDA_VISIBLE_DEVICES=1 sees one GPU; NVML lists the host's (records before the forty-ninth
        # session listed the host's here, so a one-GPU job on GPU 1 named GPU 0 first)
        visible = visible_gpu_uuids([torch.cuda.get_device_properties(i) for i in range(rec["gpu_count"])])
        if visible is not None:
            rec["gpu_uuids"] = visible
        elif rec.get("host_gpu_uuids"):
            rec["gpu_uuids"] = rec["host_gpu_uuids"]
    else:
        rec["gpu"] = "cpu"
    if calibration:
        rec["calibration"] = {k: v for k, v in calibration.items()
                              if k.endswith("_Bps") or k.endswith("_flops") or k.endswith("_per_s")}
    return rec


def visible_gpu_uuids(properties) -> list[str] | None:
    """NVML-style UUIDs ("GPU-8f52898b-...") of the devices torch sees, from their properties' `uuid`
    (32 hex digits, with or without dashes or the GPU- prefix); None where any is missing or malformed."""
    out = []
    for prop in properties:
        raw = getattr(prop, "uuid", None)
        if raw is None:
            return None
        text = str(raw).lower().removeprefix("gpu-").replace("-", "")
        if not re.fullmatch(r"[0-9a-f]{32}", text):
            return None
        out.append(f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
    return out


def cpu_model() -> str | None:
    """The CPU's marketing name (platform.processor() says only 'x86_64' on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def hardware_tag(env: dict) -> str:
    """Folder name for results of this hardware: e.g. '1xH100-80GB-HBM3', '2xH200', 'cpu'."""
    if not env.get("gpu") or env["gpu"] == "cpu":
        return "cpu"
    name = env["gpu"].replace("NVIDIA ", "").replace(" ", "-")
    return f"{env.get('gpu_count', 1)}x{name}"


def hardware_mismatch(env: dict, results_dir) -> str | None:
    """Why these GPUs (an environment record) must not write into `results_dir`, or None when they may.

    A results folder named for hardware (`results/paper/2xH200`: `NxNAME`, hardware_tag's form) takes
    records only from that hardware: the device tool may lend H100s for a call that asked for H200s, and
    such a call's runs filed with the H200s' would mix two machines in one figure (x2-ncclab1, twenty-eighth
    session). A folder not named that way (`cpu`, a scratch folder) is not checked."""
    folder = os.path.basename(os.path.normpath(str(results_dir)))
    if not re.fullmatch(r"\d+x[A-Za-z]\S*", folder):
        return None
    here = hardware_tag(env)
    if here == folder:
        return None
    return (f"this machine is {here} ({env.get('gpu_count', 0)} x {env.get('gpu') or 'no GPU'}), but the "
            f"results folder {results_dir} is for {folder}: its records would mix two machines. Run when the "
            f"device tool lends {folder}, or write into results/paper/{here} (ALLOW_OTHER_HW=1 skips this check)")
