"""The runtime's memcpy trace option (issue 6 item 7) without a GPU: summing the per-worker traces, the
summary fields next to our counters, the CPU record (null with the reason), the CLI flag. The CUDA path
itself is checked by tests/test_runtime_gpu.py::test_memcpy_trace_agrees_with_counters."""
from __future__ import annotations

from harmony.memcpy_trace import KINDS, sum_traces, unavailable
from harmony.runtime import _memcpy_fields
from harmony.runtime.launch import merge_iteration


def _trace(h2d, d2h, p2p=0):
    return {"h2d": h2d, "d2h": d2h, "p2p": p2p, "d2d": 5, "h2d_pageable": 0, "d2h_pageable": 0, "count": 3,
            "source": "torch.profiler CUDA memcpy activity, one iteration", "iteration": 1}


def _part(rank, trace=None, p2p=0):
    b = {"h2d_weights": 1000, "h2d_act": 100, "d2h_grads": 500, "d2h_act": 50, "p2p": p2p, "allreduce": 0}
    p = {"iteration": 1, "time_s": 1.0 + rank, "loss_part": 0.5, "bytes": b, "peak_allocated": 0,
         "peak_reserved": 0, "alloc_retries": 0, "rss": 1, "pinned": 2}
    if trace is not None:
        p["memcpy_trace"] = trace
    return p


def test_sum_traces_and_unavailable():
    s = sum_traces([_trace(10, 20), _trace(1, 2)])
    assert (s["h2d"], s["d2h"], s["d2d"], s["count"], s["ranks"]) == (11, 22, 10, 6, 2)
    u = unavailable("why")
    assert all(u[k] is None for k in KINDS) and u["source"] == "unavailable: why"
    assert sum_traces([_trace(1, 1), u])["h2d"] is None


def test_merge_iteration_sums_traces_of_all_ranks():
    m = merge_iteration({0: _part(0, _trace(1100, 550)), 1: _part(1, _trace(1100, 550))})
    assert m["memcpy_trace"]["h2d"] == 2200 and m["memcpy_trace"]["ranks"] == 2
    assert "memcpy_trace" not in merge_iteration({0: _part(0), 1: _part(1)})


def test_summary_fields_agreement():
    merged = [merge_iteration({0: _part(0)}), merge_iteration({0: _part(0, _trace(1100, 550))})]
    merged[0]["iteration"] = 0
    f = _memcpy_fields(merged, 1, "cuda", 3, 2, 1)
    assert f["memcpy_counted"] == {"h2d": 1100, "d2h": 550, "p2p": 0}
    assert f["memcpy_agreement"] == {"h2d": 0.0, "d2h": 0.0, "p2p": 0.0} and f["memcpy_agrees"] is True
    # 2% more H2D in the trace than counted: disagreement
    merged[1]["memcpy_trace"] = _trace(1122, 550)
    assert _memcpy_fields(merged, 1, "cuda", 3, 2, 1)["memcpy_agrees"] is False
    # N = 2 with p2p over NCCL: invisible to the trace, so not compared
    two = merge_iteration({0: _part(0, _trace(1100, 550), p2p=64), 1: _part(1, _trace(1100, 550))})
    f = _memcpy_fields([two], 1, "cuda", 3, 2, 2)
    assert f["memcpy_agreement"]["p2p"] is None and f["memcpy_agrees"] is True
    # CPU, and too few iterations: null with the reason
    f = _memcpy_fields([], None, "cpu", 3, 1, 1)
    assert f["memcpy_trace"]["h2d"] is None and "cpu" in f["memcpy_trace"]["source"] and f["memcpy_agrees"] is None
    f = _memcpy_fields([], None, "cuda", 2, 1, 1)
    assert "iters >= warmup + 2" in f["memcpy_trace"]["source"]


def test_cpu_run_records_null_trace(tmp_path):
    import json
    from test_runtime import schedule
    from harmony.runtime import run_schedule
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    out = tmp_path / "run.jsonl"
    s = run_schedule(rec, g, iters=2, device="cpu", memcpy_trace=True, output=str(out))
    assert s["status"] == "ok" and s["memcpy_agrees"] is None
    assert s["memcpy_trace"]["h2d"] is None and s["memcpy_trace"]["source"].startswith("unavailable: --device cpu")
    assert json.loads(out.read_text().splitlines()[-1])["memcpy_trace"]["source"] == s["memcpy_trace"]["source"]
    assert "memcpy_trace" not in run_schedule(rec, g, iters=1, device="cpu")


def test_cli_flag():
    import argparse
    from harmony.runtime.cli import add_arguments
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["s.json", "--iters", "3", "--memcpy-trace", "-o", "x"]).memcpy_trace
    assert not p.parse_args(["s.json", "--iters", "3", "-o", "x"]).memcpy_trace


def test_trace_probe_reads_bytes_from_the_profilers_in_memory_events():
    """experiments/device/trace_probe.py (docs/performance.md entry 45): a device event's metadata, with or
    without braces as Kineto writes it, gives its bytes by kind; a memcpy without bytes is counted apart,
    and other events are ignored."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "experiments/device/trace_probe.py"
    spec = importlib.util.spec_from_file_location("trace_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Ev:
        def __init__(self, name, meta):
            self._n, self._m = name, meta

        def name(self):
            return self._n

        def metadata_json(self):
            return self._m

    class Prof:
        class profiler:
            class kineto_results:
                @staticmethod
                def events():
                    return [Ev("Memcpy HtoD (Pinned -> Device)", '"device": 0, "bytes": 100'),
                            Ev("Memcpy DtoH (Device -> Pinned)", '{"bytes": 40, "stream": 7}'),
                            Ev("Memcpy DtoD (Device -> Device)", '"device": 0'),
                            Ev("void gemm_kernel", '"bytes": 999')]
    out = mod.in_memory_bytes(Prof)
    assert (out["h2d"], out["d2h"], out["d2d"], out["count"], out["without_bytes"]) == (100, 40, 0, 2, 1)
