"""The iteration timeline (harmony.timeline) without a GPU: the interval arithmetic, the classification of
GPU activities, a timeline from a synthetic Kineto trace in the format torch's exporter writes, the per-rank
plumbing through sum_traces / merge_iteration / the run summary, and `harmony timeline`."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harmony.memcpy_trace import memcpy_bytes_from_trace, sum_traces, unavailable
from harmony.timeline import (cpu_self_times, gpu_event_kind, host_threads, intersection_length, merge_intervals,
                              timeline_from_trace, timelines_of, union_length)


# ------------------------------------------------------------------------------------------------
# intervals
# ------------------------------------------------------------------------------------------------
def test_union_length():
    assert union_length([]) == 0
    assert union_length([(0, 1)]) == 1
    assert union_length([(0, 2), (1, 3)]) == 3                 # overlap counted once
    assert union_length([(0, 1), (1, 2)]) == 2                 # touching
    assert union_length([(5, 6), (0, 1), (0.5, 0.75)]) == 2    # unsorted, nested
    assert union_length([(0, 10), (2, 3), (4, 5)]) == 10       # contained
    assert union_length([(3, 3), (4, 2)]) == 0                 # empty and reversed dropped
    assert merge_intervals([(4, 5), (0, 2), (1, 3)]) == [(0, 3), (4, 5)]


def test_intersection_length():
    assert intersection_length([], [(0, 1)]) == 0
    assert intersection_length([(0, 2)], [(1, 3)]) == 1
    assert intersection_length([(0, 10)], [(1, 2), (3, 4), (9, 12)]) == 3
    # each side's own overlaps count once: a = [0,4) ∪ [6,8), b = [3,7)
    assert intersection_length([(0, 3), (1, 4), (6, 8)], [(3, 5), (4, 7)]) == pytest.approx(2)
    assert intersection_length([(0, 1)], [(1, 2)]) == 0
    # symmetric
    a, b = [(0, 1.5), (2, 5), (7, 9)], [(1, 2.5), (4, 8)]
    assert intersection_length(a, b) == pytest.approx(intersection_length(b, a)) == pytest.approx(3)


# ------------------------------------------------------------------------------------------------
# classification
# ------------------------------------------------------------------------------------------------
FAKES = [
    SimpleNamespace(name="void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<...>>(int, T)",
                    cat="kernel", kind="compute"),
    SimpleNamespace(name="sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", cat="kernel", kind="compute"),
    SimpleNamespace(name="Memcpy HtoD (Pinned -> Device)", cat="gpu_memcpy", kind="h2d"),
    SimpleNamespace(name="Memcpy HtoD (Pageable -> Device)", cat="gpu_memcpy", kind="h2d"),
    SimpleNamespace(name="Memcpy DtoH (Device -> Pinned)", cat="gpu_memcpy", kind="d2h"),
    SimpleNamespace(name="Memcpy DtoD (Device -> Device)", cat="gpu_memcpy", kind="d2d"),
    SimpleNamespace(name="Memcpy PtoP (Device -> Device)", cat="gpu_memcpy", kind="p2p"),
    SimpleNamespace(name="Memcpy HtoH (Pinned -> Pinned)", cat="gpu_memcpy", kind="memcpy_other"),
    SimpleNamespace(name="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", cat="kernel", kind="nccl"),
    SimpleNamespace(name="void ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                    cat="kernel", kind="nccl"),
    SimpleNamespace(name="ncclKernel_AllReduce_RING_LL_Sum_float", cat="kernel", kind="nccl"),
    SimpleNamespace(name="Memset (Device)", cat="gpu_memset", kind="memset"),
    SimpleNamespace(name="cudaLaunchKernel", cat="cuda_runtime", kind=None),
    SimpleNamespace(name="aten::mm", cat="cpu_op", kind=None),
    SimpleNamespace(name="fwd pack 3", cat="gpu_user_annotation", kind=None),
]


@pytest.mark.parametrize("ev", FAKES, ids=lambda ev: ev.name[:30])
def test_gpu_event_kind(ev):
    assert gpu_event_kind(ev.name, ev.cat) == ev.kind
    if ev.kind is not None:                     # known GPU activity without a category: by name alone
        assert gpu_event_kind(ev.name) == ev.kind


def test_memcpy_direction_is_memcpy_trace_classify():
    # one classification: the timeline's directions are memcpy_trace's kinds
    from harmony import memcpy_trace, timeline
    assert timeline.memcpy_kind is memcpy_trace.classify


# ------------------------------------------------------------------------------------------------
# a timeline from a trace
# ------------------------------------------------------------------------------------------------
BASE = 1_234_567_890.0        # µs, like the exporter's timestamps relative to its trimonth base


def X(cat, name, ts, dur, pid=0, tid=7, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": BASE + ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def synthetic_trace(gpu=0, host=4242):
    """One iteration, times in µs: compute kernels on two streams, copies on two more, NCCL, a memset,
    CPU-side runtime calls and a nested annotation, and the exporter's metadata and span events."""
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": gpu, "tid": 0, "ts": BASE, "args": {"name": "python"}},
        # compute: stream 7 [0,100) [150,250); stream 8 [50,120) overlaps stream 7 -> union [0,120) ∪ [150,250) = 220
        X("kernel", "void at::native::elementwise_kernel<128, 2>(int, F)", 0, 100, gpu, 7),
        X("kernel", "void at::native::elementwise_kernel<128, 2>(int, F)", 150, 100, gpu, 7),
        X("kernel", "sm90_xmma_gemm_f32f32", 50, 70, gpu, 8),
        # copies: H2D [80,180) (overlaps compute [80,120) ∪ [150,180) = 70), D2H [300,340) (no compute)
        X("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 80, 100, gpu, 20, bytes=1000),
        X("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 90, 10, gpu, 20, bytes=24),   # inside the first
        X("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 300, 40, gpu, 21, bytes=500),
        X("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 260, 5, gpu, 7, bytes=3),
        X("kernel", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 250, 60, gpu, 30),
        X("gpu_memset", "Memset (Device)", 345, 5, gpu, 7),
        X("gpu_user_annotation", "fwd pack", 0, 400, gpu, 7),                   # not an activity
        # CPU side: a user annotation [0,300) containing cudaLaunchKernel x2 (10 each) and a sync [100,290)
        X("user_annotation", "iteration", -5, 305, host, 1),
        X("cuda_runtime", "cudaLaunchKernel", 0, 10, host, 1),
        X("cuda_runtime", "cudaLaunchKernel", 20, 10, host, 1),
        X("cuda_runtime", "cudaStreamSynchronize", 100, 190, host, 1),
        {"ph": "s", "id": 1, "pid": host, "tid": 1, "ts": BASE, "cat": "ac2g", "name": "ac2g"},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": BASE - 5, "dur": 360, "args": {"Op count": 0}},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": BASE + 1355},
    ]}


def test_timeline_from_trace():
    tl = timeline_from_trace(synthetic_trace(), wall_s=500e-6)
    us = lambda x: pytest.approx(x * 1e-6, abs=1e-9)
    assert tl["wall_s"] == us(500) and tl["wall_source"].startswith("perf_counter")
    assert tl["gpu_span_s"] == us(350)                                  # [0, 350)
    assert tl["compute_busy_s"] == us(220) and tl["compute_idle_s"] == us(280)
    assert tl["compute_idle_fraction"] == pytest.approx(0.56)
    assert (tl["h2d_busy_s"], tl["d2h_busy_s"], tl["d2d_busy_s"], tl["p2p_busy_s"]) == (us(100), us(40), us(5), 0)
    assert tl["copy_busy_s"] == us(140) and tl["overlap_copy_compute_s"] == us(70)
    assert tl["nccl_busy_s"] == us(60) and tl["memset_busy_s"] == us(5)
    assert (tl["kernels"], tl["nccl_kernels"], tl["memcpys"]) == (3, 1, 4)
    assert tl["devices"] == [0] and tl["streams"] == 5 and "per_device" not in tl
    top = tl["top_kernels"]
    assert [k["name"][:25] for k in top] == ["void at::native::elementw", "sm90_xmma_gemm_f32f32", "ncclDevKernel_SendRecv(nc"]
    assert top[0]["total_s"] == us(200) and top[0]["count"] == 2
    cpu = {c["name"]: c for c in tl["cpu_ops_top"]}
    assert cpu["cudaStreamSynchronize"]["self_s"] == us(190) and cpu["cudaStreamSynchronize"]["cat"] == "cuda_runtime"
    assert cpu["cudaLaunchKernel"]["self_s"] == us(20) and cpu["cudaLaunchKernel"]["count"] == 2
    assert cpu["iteration"]["self_s"] == us(305 - 210)                 # children subtracted
    assert tl["cpu_ops_top"][0]["name"] == "cudaStreamSynchronize"
    json.dumps(tl)                                                       # goes into the run record as is
    # the memcpy bytes from the same trace are unchanged by the extra events
    b = memcpy_bytes_from_trace(synthetic_trace())
    assert (b["h2d"], b["d2h"], b["d2d"], b["count"]) == (1024, 500, 3, 4)


def test_timeline_without_wall_and_edge_cases():
    tl = timeline_from_trace(synthetic_trace())
    assert tl["wall_s"] == tl["gpu_span_s"] and tl["wall_source"].startswith("GPU span")
    empty = timeline_from_trace({"traceEvents": []}, wall_s=0.1)
    assert empty["compute_busy_s"] == 0 and empty["compute_idle_fraction"] == 1.0 and empty["top_kernels"] == []
    assert timeline_from_trace({"traceEvents": []})["compute_idle_fraction"] is None
    long = timeline_from_trace([X("kernel", "k" * 300, 0, 1)], wall_s=1e-6)    # a list of events works too
    assert len(long["top_kernels"][0]["name"]) == 80
    many = timeline_from_trace([X("kernel", f"kernel{i}", i * 10, i + 1) for i in range(20)], wall_s=1.0)
    assert len(many["top_kernels"]) == 8 and many["top_kernels"][0]["name"] == "kernel19"


def test_timeline_two_devices_in_one_process():
    tr = synthetic_trace(gpu=0)
    tr["traceEvents"] += [X("kernel", "gemm", 1000, 50, 1, 7), X("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1000, 20, 1, 9)]
    tl = timeline_from_trace(tr, wall_s=0.002)
    assert tl["devices"] == [0, 1] and set(tl["per_device"]) == {"0", "1"}
    assert tl["per_device"]["1"]["compute_busy_s"] == pytest.approx(50e-6)
    assert tl["per_device"]["1"]["overlap_copy_compute_s"] == pytest.approx(20e-6)
    assert tl["compute_busy_s"] == pytest.approx(270e-6)


def test_cpu_self_times_nesting():
    ev = lambda name, s, e, tid=1: {"cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "s": s, "e": e}
    top = {c["name"]: c["self_s"] for c in cpu_self_times([
        ev("a", 0, 10), ev("b", 1, 4), ev("c", 2, 3), ev("b", 5, 6), ev("d", 0, 3, tid=2),
        {"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "s": 0, "e": 100}])}
    assert top == {"a": pytest.approx(6), "b": pytest.approx(3), "c": pytest.approx(1), "d": pytest.approx(3)}


def test_host_threads_count_each_threads_time_inside_ops_and_cuda_calls_once():
    """A thread's nested calls (an autograd node, the op inside it, the launch inside that) count once; record
    function ranges and Python functions enclose Python code, so they are left out; GPU events are not host
    time. The issue thread here: [0,10) ∪ [12,15) = 13 µs inside calls, the rest of its 100 µs outside."""
    evs = [X("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 0, 10, 4242, 1),
           X("cpu_op", "aten::mm", 1, 8, 4242, 1), X("cuda_runtime", "cudaLaunchKernel", 2, 3, 4242, 1),
           X("cuda_runtime", "cudaMemcpyAsync", 12, 3, 4242, 1),
           X("user_annotation", "task", 0, 100, 4242, 1), X("python_function", "run_task", 0, 100, 4242, 1),
           X("cpu_op", "aten::add_", 0, 4, 4242, 2),                     # an update thread
           X("kernel", "gemm", 0, 90, 0, 7)]
    tl = timeline_from_trace({"traceEvents": evs}, wall_s=100e-6)
    assert tl["host_ops_traced"] is True
    first, second = tl["host_threads"]
    assert (first["thread"], first["busy_s"], first["calls"]) == ("1", pytest.approx(13e-6), 4)
    assert (second["thread"], second["busy_s"], second["calls"]) == ("2", pytest.approx(4e-6), 1)
    # the outermost calls tell the threads apart: the autograd node, not the op and launch inside it
    assert [(c["name"], c["count"]) for c in first["top_calls"]] == [
        ("autograd::engine::evaluate_function: MmBackward0", 1), ("cudaMemcpyAsync", 1)]
    assert first["top_calls"][0]["total_s"] == pytest.approx(10e-6)
    assert host_threads([]) == []
    # a trace of CUDA activity only: the threads' time inside the CUDA API, and said so
    cuda_only = timeline_from_trace({"traceEvents": [e for e in evs if e["cat"] != "cpu_op"]}, wall_s=100e-6)
    assert cuda_only["host_ops_traced"] is False
    assert [(t["thread"], t["busy_s"], t["calls"]) for t in cuda_only["host_threads"]] == [("1", pytest.approx(6e-6), 2)]
    from harmony.timeline import format_timeline
    text = "\n".join(format_timeline("rank 0", tl))
    assert "time inside torch ops and CUDA calls" in text and "thread 1: " in text and "(13.0%)" in text, text
    assert "CUDA API calls (no torch ops traced)" in "\n".join(format_timeline("rank 0", cuda_only))


# ------------------------------------------------------------------------------------------------
# plumbing: per-rank timelines through sum_traces / merge_iteration / the summary
# ------------------------------------------------------------------------------------------------
def _rank_trace(rank):
    t = memcpy_bytes_from_trace(synthetic_trace(gpu=rank))
    t.update(source="torch.profiler CUDA memcpy activity, one iteration", iteration=1,
             timeline=timeline_from_trace(synthetic_trace(gpu=rank), wall_s=500e-6 * (rank + 1)))
    return t


def test_sum_traces_keeps_every_ranks_timeline():
    s = sum_traces([_rank_trace(0), _rank_trace(1)])
    assert s["h2d"] == 2048 and "timeline" not in s
    assert [tl["devices"] for tl in s["timelines"]] == [[0], [1]]
    assert s["timelines"][1]["wall_s"] == pytest.approx(1e-3)
    assert sum_traces([s])["timelines"] == s["timelines"]                     # already summed: kept
    assert "timelines" not in sum_traces([unavailable("x"), unavailable("y")])
    assert sum_traces([_rank_trace(0), unavailable("y")])["timelines"][1] is None
    labels = [label for label, _ in timelines_of(s)]
    assert labels == ["rank 0", "rank 1"]
    # a baseline's gathered record keeps rank 0's timeline under `timeline`
    one = dict(_rank_trace(0), ranks=2)
    assert timelines_of(one)[0][0].startswith("rank 0 (of 2")
    assert timelines_of(unavailable("z")) == [] and timelines_of(None) == []


def test_summary_carries_timelines():
    from harmony.runtime import _memcpy_fields
    from harmony.runtime.launch import merge_iteration
    b = {"h2d_weights": 1000, "h2d_act": 24, "d2h_grads": 500, "d2h_act": 0, "p2p": 0, "allreduce": 0}
    part = lambda r: {"iteration": 1, "time_s": 1.0, "loss_part": 0.5, "bytes": dict(b), "peak_allocated": 0,
                      "peak_reserved": 0, "alloc_retries": 0, "rss": 1, "pinned": 2, "memcpy_trace": _rank_trace(r)}
    merged = merge_iteration({0: part(0), 1: part(1)})
    f = _memcpy_fields([merged], 1, "cuda", 3, 2, 2)
    assert len(f["memcpy_trace"]["timelines"]) == 2 and f["memcpy_agrees"] is True
    json.dumps(f)


# ------------------------------------------------------------------------------------------------
# `harmony timeline`
# ------------------------------------------------------------------------------------------------
def _summary(trace):
    return {"record": "summary", "system": "harmony", "model": "resnet1026", "mode": "vPP", "gpus": 2,
            "minibatch": 64, "status": "ok", "iter_time_s": 1.27, "predicted_iter_time_s": 1.0,
            "memcpy_trace": trace}


def test_cli_prints_per_rank(tmp_path, capsys):
    from harmony.cli import main
    run = tmp_path / "run.jsonl"
    summed = sum_traces([_rank_trace(0), _rank_trace(1)])
    run.write_text(json.dumps({"record": "iteration", "iteration": 0}) + "\n" + json.dumps(_summary(summed)) + "\n")
    assert main(["timeline", str(run)]) == 0
    out = capsys.readouterr().out
    assert "measured/predicted 1.27x" in out and "rank 0 (GPU 0)" in out and "rank 1 (GPU 1)" in out
    assert "compute busy 0.0002 s (44.0%)" in out and "overlapping compute 0.0001 s" in out
    assert "elementwise_kernel" in out and "cudaStreamSynchronize [cuda_runtime]" in out
    assert main(["timeline", str(run), "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert set(js) == {"rank 0", "rank 1"} and js["rank 0"]["kernels"] == 3


def test_cli_without_timeline(tmp_path, capsys):
    from harmony.cli import main
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps(_summary(unavailable("--device cpu: memcpy activity is a CUDA profiler feature"))) + "\n")
    assert main(["timeline", str(run)]) == 1
    out = capsys.readouterr().out
    assert "no timeline" in out and "--device cpu" in out and "--memcpy-trace" in out
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({k: v for k, v in _summary(None).items() if k != "memcpy_trace"}) + "\n")
    assert main(["timeline", str(bare)]) == 1
    assert "CUDA run with the memcpy trace on" in capsys.readouterr().out
    assert main(["timeline", str(tmp_path / "missing.jsonl")]) == 2
    # an A/B over GPU-to-GPU transfers is read from the header: the receive order and NCCL's settings
    two = tmp_path / "two.jsonl"
    two.write_text(json.dumps({**_summary(None), "gpus": 2, "p2p_receive": "eager",
                               "env": {"nccl_env": {"NCCL_P2P_USE_CUDA_MEMCPY": "1"}}}) + "\n")
    main(["timeline", str(two)])
    assert "receives eager; NCCL NCCL_P2P_USE_CUDA_MEMCPY=1" in capsys.readouterr().out


def test_cli_reads_a_kineto_trace(tmp_path, capsys):
    import gzip
    from harmony.cli import main
    p = tmp_path / "trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(synthetic_trace(), f)
    assert main(["timeline", str(p)]) == 0
    assert "trace (GPU 0): wall 0.0003 s [GPU span" in capsys.readouterr().out


def test_measure_memcpy_bytes_cpu_fallback_has_no_timeline():
    import torch
    from harmony.memcpy_trace import measure_memcpy_bytes
    if torch.cuda.is_available():
        pytest.skip("CUDA path: tests/test_runtime_gpu.py")
    ran = []
    r = measure_memcpy_bytes(lambda: ran.append(1))
    assert ran == [1] and "timeline" not in r and timelines_of(r) == []


def test_beside_nccl_compares_the_same_launch_with_and_without_a_resident_nccl_kernel():
    """docs/performance.md entry 46: a kernel is beside NCCL when an NCCL kernel spans at least half of it;
    the slowdown compares the median times of the same name, grid and block both ways (3 or more each)."""
    g, b = [132, 1, 1], [256, 1, 1]
    evs = [X("kernel", "ncclDevKernel_SendRecv", 1000, 2000, tid=20)]           # resident 1000-3000 µs
    evs += [X("kernel", "gemm", t, 100, grid=g, block=b) for t in (0, 200, 400, 600)]          # alone: 100 µs
    evs += [X("kernel", "gemm", t, 120, grid=g, block=b) for t in (1100, 1300, 1500)]          # beside: 120
    evs += [X("kernel", "gemm", 2000, 500, grid=[8, 1, 1], block=b)]       # another launch, only beside
    evs += [X("kernel", "softmax", 2950, 100)]                             # 50 µs covered: exactly half
    evs += [X("kernel", "relu", 2960, 100)]                                # 40 µs covered: alone
    tl = timeline_from_trace({"traceEvents": evs})
    bn = tl["beside_nccl"]
    assert bn["kernels"] == 5 and bn["compute_s"] == pytest.approx((3 * 120 + 500 + 100) * 1e-6)
    assert bn["compared"] == 1 and bn["slowdown"] == pytest.approx(1.2)
    quiet = timeline_from_trace({"traceEvents": evs[1:]})["beside_nccl"]           # no NCCL at all
    assert quiet == {"kernels": 0, "compute_s": 0.0, "compared": 0, "slowdown": None}
    from harmony.timeline import format_timeline
    assert any("took 1.200x their time alone" in line for line in format_timeline("rank 0", tl))
