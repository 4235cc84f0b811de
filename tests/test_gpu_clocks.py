"""harmony/gpu_clocks.py: the GPU's clock sampled beside profiles and runs (docs/performance.md entry 65).
The summaries and the sampling thread are tested on the CPU with a stand-in for NVML; one test on CUDA
samples a real GPU under load."""
from __future__ import annotations

import time

import pytest
import torch

from harmony.gpu_clocks import IDLE, ClockSampler, combine, line, slower_than_profiled, summarize


def test_summary_leaves_idle_samples_out_of_the_clock_and_counts_each_reason():
    samples = [(1980.0, 600.0, 60.0, 0), (1755.0, 700.0, 70.0, 0x4), (345.0, 70.0, 50.0, IDLE),
               (1800.0, None, 65.0, 0x4 | 0x20)]
    s = summarize(samples, sm_limit_mhz=1980.0)
    assert (s["samples"], s["busy_samples"]) == (4, 3)
    assert (s["sm_mhz_median"], s["sm_mhz_min"], s["sm_mhz_max"]) == (1800.0, 1755.0, 1980.0)   # 345 idle
    assert (s["power_w_median"], s["power_w_max"], s["temperature_c_max"]) == (650.0, 700.0, 70.0)
    assert s["reasons"] == {"gpu_idle": 0.25, "sw_power_cap": 0.5, "sw_thermal_slowdown": 0.25}
    assert summarize([]) is None
    assert "SM clock median 1800 of 1980 MHz (min 1755)" in line("run", s) and "sw_power_cap 50%" in line("run", s)
    assert line("run", None) == "run: no GPU clock samples"


def test_combine_weights_reasons_by_samples_and_keeps_the_extremes():
    a = summarize([(1980.0, 600.0, 60.0, 0)] * 3, 1980.0)
    b = summarize([(1700.0, 700.0, 80.0, 0x4)], 1980.0)
    c = combine([a, None, b])
    assert c["samples"] == 4 and c["sm_mhz_min"] == 1700.0 and c["sm_mhz_max"] == 1980.0
    assert c["sm_mhz_median"] == (1980.0 + 1700.0) / 2 and c["temperature_c_max"] == 80.0
    assert c["reasons"] == {"sw_power_cap": 0.25}
    assert combine([None, None]) is None


class FakeNVML:
    """The few NVML calls ClockSampler makes, with a clock that falls by 10 MHz per sample."""
    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

    def __init__(self):
        self.mhz = 1980

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetClockInfo(self, h, kind):
        self.mhz -= 10
        return self.mhz

    def nvmlDeviceGetPowerUsage(self, h):
        return 650_000                      # milliwatts

    def nvmlDeviceGetTemperature(self, h, kind):
        raise RuntimeError("not supported")  # a metric the driver does not report: None, not a failure

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x4


def test_sampler_thread_takes_stretches_and_survives_a_missing_metric():
    s = ClockSampler(FakeNVML(), handle=None, interval_s=0.01)
    assert s.sm_limit_mhz == 1980.0
    with s:
        time.sleep(0.2)
        first = s.take()
        time.sleep(0.1)
    assert first["samples"] >= 5 and first["sm_mhz_max"] < 1980.0
    assert first["power_w_median"] == 650.0 and first["temperature_c_max"] is None
    assert first["reasons"] == {"sw_power_cap": 1.0}
    assert s.take() is None                                     # stop() took the last stretch
    assert not any(t.name == "gpu-clocks" and t.is_alive() for t in __import__("threading").enumerate())


def test_no_sampler_on_the_cpu():
    assert ClockSampler.for_device("cpu") is None


def test_a_runs_summary_combines_each_ranks_steady_iterations():
    from harmony.runtime import _gpu_clocks
    it = lambda mhz: {"gpu_clocks": [summarize([(mhz, 500.0, 60.0, 0)]), summarize([(mhz - 100, 500.0, 60.0, 0)])]}
    merged = [it(1000.0), it(1900.0), it(1800.0)]          # iteration 0 is the warm-up
    got = _gpu_clocks(merged, warmup=1)
    assert [g["sm_mhz_median"] for g in got] == [1850.0, 1750.0]
    assert _gpu_clocks([{"time_s": 1.0}], warmup=0) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sampler_reads_a_busy_gpu():
    s = ClockSampler.for_device("cuda:0")
    assert s is not None, "NVML did not find this GPU by its UUID"
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(2):        # a sampler restarts after stop()
        with s:
            t_end = time.perf_counter() + 1.0
            while time.perf_counter() < t_end:
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
            busy = s.take()
        assert busy["busy_samples"] >= 5 and busy["sm_mhz_median"] > 100, busy
        assert 0 < busy["sm_mhz_median"] <= busy["sm_mhz_limit"] and busy["power_w_median"] > 0, busy


def test_per_gpu_combines_each_gpu_over_the_iterations_that_sampled():
    from harmony.gpu_clocks import per_gpu
    s = lambda mhz: summarize([(mhz, 500.0, 60.0, 0)])
    rows = [None, [s(1900.0), s(1500.0)], [None, None], [s(1700.0), s(1300.0)]]
    got = per_gpu(rows)
    assert [g["sm_mhz_median"] for g in got] == [1800.0, 1400.0] and [g["samples"] for g in got] == [2, 2]
    assert per_gpu([None, [None]]) is None and per_gpu([]) is None


def test_device_clocks_of_cpu_devices_sample_nothing():
    from harmony.gpu_clocks import DeviceClocks
    dc = DeviceClocks([torch.device("cpu"), torch.device("cpu")])
    assert dc.take() is None
    dc.stop()


def test_a_run_under_its_profiles_clock_gets_a_note_naming_the_remedy():
    """`harmony run` notes a GPU whose median clock was 5% or more under its profile's (entry 65's 1,748
    against 1,980 MHz at the power cap), the slowest rank named, unless the schedule already plans with a
    compute scale; no note without samples on either side or when the clocks agree."""
    profile = summarize([(1980.0, 485.0, 60.0, 0)] * 5, 1980.0)
    capped = summarize([(1748.0, 691.0, 70.0, 0x4)] * 5, 1980.0)
    near = summarize([(1950.0, 600.0, 65.0, 0)] * 5, 1980.0)
    note = slower_than_profiled(profile, [near, capped])
    assert note and "GPU 1 ran at 1748 MHz (sw_power_cap 100%)" in note and "1980 MHz" in note
    assert "--compute-scale profile" in note
    assert slower_than_profiled(profile, [near, near]) is None                  # within 5%
    assert slower_than_profiled(profile, [capped], compute_scale=1.05) is None   # already planned for
    assert slower_than_profiled(None, [capped]) is None and slower_than_profiled(profile, None) is None
    assert slower_than_profiled(profile, [None, {"sm_mhz_median": None}]) is None


class FakeNVMLDevices(FakeNVML):
    """Two GPUs for gpu_state: the first busy, the second idle and without a memory reading."""
    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("Util", (), {"gpu": 100 if h == 0 else 0})()

    def nvmlDeviceGetMemoryInfo(self, h):
        if h == 1:
            raise RuntimeError("not supported")
        return type("Mem", (), {"used": 3 * 2**30})()

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-aaaa" if h == 0 else "GPU-bbbb"      # bytes from older pynvml, str from newer


def test_gpu_state_reads_each_gpu_and_is_none_without_nvml(capsys, monkeypatch):
    """harmony.gpu_clocks.gpu_state, which the launcher records at a stall (docs/performance.md entry 107):
    one entry per GPU, a metric the driver does not report as None; no NVML, no state. The launcher's
    stalled_gpus prints one line per GPU beside the workers' stacks."""
    from harmony.gpu_clocks import gpu_state
    from harmony.runtime import launch
    state = gpu_state(FakeNVMLDevices())
    assert [(g["index"], g["uuid"], g["gpu_util_pct"], g["memory_used_bytes"]) for g in state] == \
        [(0, "GPU-aaaa", 100, 3 * 2**30), (1, "GPU-bbbb", 0, None)]
    assert state[0]["power_w"] == 650.0 and state[0]["sm_clock_mhz"] == 1970.0

    class NoNVML:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")
    assert gpu_state(NoNVML()) is None

    monkeypatch.setattr("harmony.gpu_clocks.gpu_state", lambda: state)
    assert launch.stalled_gpus() is state
    err = capsys.readouterr().err
    assert "stalled GPU 0 (GPU-aaaa): 100% busy, 3.00 GiB used" in err and "stalled GPU 1 (GPU-bbbb): 0% busy, ? GiB" in err
    monkeypatch.setattr("harmony.gpu_clocks.gpu_state", lambda: None)
    assert launch.stalled_gpus() is None and "no NVML here" in capsys.readouterr().err
