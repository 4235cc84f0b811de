"""The runtime's correctness test on CUDA (run through the device tool): one tiny model per family, vPP and
vDP, N = 1 (and N = 2 and 4 when that many GPUs are present), against plain PyTorch on the same GPU, fp32 strict (no
TF32), with the tolerance rule of tests/test_runtime.py; and the memcpy trace of one iteration against our
byte counters. Skipped without CUDA.

What makes the runtime's workers and the reference in this process compute the same thing:
  * the same initial weights: both are initialised on the CPU generator (the runtime's arena; the
    references build on the CPU and move);
  * the same kernels: HARMONY_DETERMINISTIC=1 (inherited by the spawned workers) makes every worker call
    harmony.gpumem.set_deterministic(), and this process calls it too: cuDNN deterministic, no
    cuDNN autotuning (benchmark=False: algorithms picked by timing can differ between processes),
    torch.use_deterministic_algorithms(warn_only), CUBLAS_WORKSPACE_CONFIG; set_precision("fp32") on both
    sides turns TF32 off for matmuls AND convolutions (torch.backends.cudnn.allow_tf32 defaults to True);
  * the same optimizer kernels: the runtime updates on the host arena with the fused CPU optimizer, so the
    microbatched reference steps on CPU copies too (host_optimizer=True); the CUDA kernel of the same
    optimizer may round an update differently;
  * BatchNorm: the runtime's forward and its recompute each run BN in training mode; both normalise with
    the microbatch's own statistics (the running statistics, the only thing the second call changes, are
    not read in training mode, not compared, and not written back), so the output equals the
    reference's single forward bit for bit with deterministic kernels. resnet-tiny runs at image_size 64
    (OVERRIDES in test_runtime.py): at 32 its training is chaotic and no trajectory comparison can pass.
For BatchNorm the tolerance is max(1e-6, 50x the inherent difference), the inherent difference being that
of the microbatched reference with its optimizer step on the GPU instead of the host (a rounding-only
change); it must itself be small (< 1e-4), else the check would mean nothing.
"""
from __future__ import annotations

import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

os.environ.setdefault("HARMONY_DETERMINISTIC", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")     # before this process's first cuBLAS call

from harmony.reference import max_relative_difference, minibatches, train_reference  # noqa: E402
from harmony.runtime import run_schedule, train_many  # noqa: E402
from harmony.gpumem import set_deterministic  # noqa: E402
from harmony.schedule.tasks import count_bytes, layer_sizes_from_model  # noqa: E402
from test_runtime import (D, FAMILIES, ITERS, OVERRIDES, SENSITIVE, TOL, has_bn, is_bn, loss_microbatches,  # noqa: E402
                          microbatched_reference, schedule)

BN_INHERENT_MAX = 1e-4


def _cases():
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out = []
    for m in FAMILIES:
        bn = is_bn(m)
        u = (2, 2) if bn else (4, 3)
        out += [(m, "vPP", 1, 3, 3, "P1"), (m, "vDP", 1, *u, "P2")]
        if n >= 2:
            out += [(m, "vPP", 2, *u, "P2"), (m, "vDP", 2, 3 if not bn else 2, 3 if not bn else 2, "P1")]
        if n >= 4:       # 4x H200: vPP over 4 stages (lazy per-microbatch sends) and vDP over 4 replicas
            out += [(m, "vPP", 4, *u, "P1"), (m, "vDP", 4, 2, 2, "P2")]
        # loaded weights and stashes in the compute stream's pool (--load-buffers compute-stream): the copy
        # waits for the compute work issued before its buffers were reserved, never for later work
        out += [(m, "vDP", 1, *u, "P2", "compute-stream")]
        if n >= 2:
            out += [(m, "vPP", 2, *u, "P2", "compute-stream")]
        # the same pool following a plan (--load-buffers auto on a schedule with prefetch_waits): every other
        # compute task's buffers are reserved only after the task before it, which its copies then wait for
        out += [(m, "vPP", 1, 3, 3, "P1", "compute-stream-plan")]
        if n >= 2:
            out += [(m, "vDP", 2, *u, "P1", "compute-stream-plan")]
        # --run-ahead 0: before each compute task the host waits for the previous one's kernels and copies
        out += [(m, "vPP", 1, *u, "P2", "run-ahead-0")]
        if n >= 2:
            out += [(m, "vPP", 2, *u, "P1", "run-ahead-0")]
        # one copy per tensor (--weight-copies per-tensor; the cases above run the default, one block per
        # vLayer, whose tensors are views into one device block), also from the compute stream's pool
        out += [(m, "vPP", 1, 3, 3, "P1", "per-tensor"), (m, "vDP", 1, *u, "P2", "per-tensor+compute-stream")]
        if n >= 2:
            out += [(m, "vDP", 2, *u, "P1", "per-tensor")]
        # one copy per pack (--weight-copies per-pack): a task's load is one device block, cut where either
        # packing has a boundary, also from the compute stream's pool; BatchNorm's in-place stats and a
        # transformer's mixed shapes (two families: the block logic is the same for all)
        if m in ("resnet-tiny", "gpt2-tiny"):
            out += [(m, "vPP", 1, 3, 3, "P2", "per-pack"), (m, "vDP", 1, *u, "P1", "per-pack+compute-stream")]
            if n >= 2:
                out += [(m, "vDP", 2, *u, "P2", "per-pack"), (m, "vPP", 2, *u, "P2", "per-pack")]
        # --allreduce overlap: the next task computes while a pack's gradients are all-reduced; only their
        # copy to the host waits for the reduction
        if n >= 2:
            out += [(m, "vDP", 2, *u, "P2", "allreduce-overlap")]
        if n >= 4:
            out += [(m, "vDP", 4, 2, 2, "P1", "allreduce-overlap")]
    return out


# the runtime options a case's 7th element names
OPTIONS = {"compute-stream": {"load_buffers": "compute-stream"}, "per-tensor": {"weight_copies": "per-tensor"},
           "per-tensor+compute-stream": {"weight_copies": "per-tensor", "load_buffers": "compute-stream"},
           "per-pack": {"weight_copies": "per-pack"},
           "per-pack+compute-stream": {"weight_copies": "per-pack", "load_buffers": "compute-stream"},
           "compute-stream-plan": {"load_buffers": "auto"},
           "run-ahead-0": {"load_buffers": "compute-stream", "run_ahead": 0},
           "allreduce-overlap": {"allreduce": "overlap"}}


def _with_plan(case, rec, g):
    """compute-stream-plan cases: a prediction whose prefetch_waits name every other compute task."""
    if case[6:] == ("compute-stream-plan",):
        rec["prediction"] = {"prefetch_waits": [t.id for t in g.tasks if t.kind != "UPD"][1::2]}
    return rec


@pytest.fixture(scope="module", autouse=True)
def deterministic():
    from harmony.gpumem import set_precision
    set_deterministic()
    set_precision("fp32")


@pytest.fixture(scope="module")
def results():
    out = {}
    for N in (1, 2, 4):
        cs = [c for c in _cases() if c[2] == N]
        if not cs:
            continue
        built = [schedule(c[0], c[1], N, c[3], c[4], c[5], **OVERRIDES.get(c[0], {})) for c in cs]
        res = train_many([(_with_plan(c, rec, g), g,
                           {"iters": ITERS, "device": "cuda", **(OPTIONS[c[6]] if len(c) > 6 else {})})
                          for c, (_, rec, g) in zip(cs, built)])
        for c, b, r in zip(cs, built, res):
            out[c] = (b, r)
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: "-".join(map(str, c)))
def test_gpu_matches_pytorch(results, case):
    (spec, rec, g), (losses, params, kinds) = results[case]
    assert_matches_pytorch(case, spec, g, losses, params)
    want = count_bytes(g, layer_sizes_from_model(rec["model"]))
    for k in kinds:
        assert k == {kind: want[kind] for kind in k}


@pytest.mark.parametrize("keep_layout", [False, True], ids=["nchw-crossings", "keep-layout"])
@pytest.mark.parametrize("name,mode,N", [("resnet-tiny", "vPP", 1), ("vgg-tiny", "vDP", 1), ("resnet-tiny", "vPP", 2)])
def test_channels_last_on_the_gpu_matches_pytorch(name, mode, N, keep_layout):
    """`channels_last` (docs/performance.md entry 105) on CUDA, where cuDNN runs the NHWC kernels: the
    runtime's stashed and received activations arrive NCHW and each vLayer converts them, or with
    --keep-layout (entry 107) they cross as NHWC views, sent over NCCL and copied to the host as they are;
    the reference builds the same model, so it computes in the same format."""
    if torch.cuda.device_count() < N:
        pytest.skip(f"needs {N} GPUs")
    spec, rec, g = schedule(name, mode, N, 2, 2, "P1", **{**OVERRIDES.get(name, {}), "channels_last": True})
    ((losses, params, _),) = train_many([(rec, g, {"iters": ITERS, "device": "cuda", "keep_layout": keep_layout})])
    assert_matches_pytorch((name, mode, N, "channels-last" + ("+keep-layout" if keep_layout else "")), spec, g,
                           losses, params)


def assert_matches_pytorch(case, spec, g, losses, params):
    """The runtime's losses and parameters against plain PyTorch on the same GPU, by the module's rule."""
    batches = minibatches(spec, D, ITERS, 1234)
    shares = loss_microbatches(g)
    mb_losses, mb_params = microbatched_reference(spec, batches, shares, device="cuda", host_optimizer=True)
    if has_bn(spec):   # from the spec: a user module has no zoo name
        ref_losses, ref_params = mb_losses, mb_params
        dev_params = microbatched_reference(spec, batches, shares, device="cuda")[1]
        inherent = [max_relative_difference([a], [b]) for a, b in zip(dev_params, mb_params)]
        assert max(inherent) < BN_INHERENT_MAX, ("BatchNorm training is chaotic at this setting", max(inherent))
    else:
        ref_losses, layers = train_reference(spec, batches, seed=0, device="cuda")
        ref_params = list(layers.parameters())
        inherent = [max_relative_difference([a], [b]) for a, b in zip(mb_params, ref_params)]
    rel_loss = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    worst = max(max_relative_difference([a], [b]) for a, b in zip(params, ref_params))
    print(f"{case}: loss rel {rel_loss:.2e}, worst parameter rel {worst:.2e}, worst inherent {max(inherent):.2e}")
    assert rel_loss <= TOL, (case, losses, ref_losses)
    for i, (a, b, inh) in enumerate(zip(params, ref_params, inherent)):
        rel = max_relative_difference([a], [b])
        assert rel <= max(TOL, SENSITIVE * inh), (case, i, rel, inh)


def test_a_user_module_on_the_gpu_matches_pytorch():
    """A user's own nn.Module through the runtime on CUDA (tests/test_user_module.py's Stacked: blocks held in
    containers, split block by block, and a skip past two of them, threaded through the vLayers between):
    vPP on one GPU with u_fwd != u_bwd, against plain PyTorch on the same GPU by the module's rule. The
    workers import the module from its file, as they would a user's."""
    from test_user_module import stacked_schedule
    spec, rec, g = stacked_schedule("vPP", 1, D, 4, 3)
    [(losses, params, kinds)] = train_many([(rec, g, {"iters": ITERS, "device": "cuda"})])
    assert_matches_pytorch(("user:Stacked", "vPP", 1, 4, 3), spec, g, losses, params)
    want = count_bytes(g, layer_sizes_from_model(rec["model"]))
    assert all(k == {kind: want[kind] for kind in k} for k in kinds)


@pytest.mark.parametrize("mode,N", [("vPP", 1), ("vPP", 2), ("vDP", 2)])
def test_dropout_on_the_gpu_matches_pytorch_seeded_alike(mode, N):
    """Dropout on CUDA: the workers seed only their GPU's generator (harmony.runtime.worker.seed_dropout,
    docs/performance.md entry 61), the reference seeds every backend with torch.manual_seed; the masks must
    be the same, in the forward and in the recompute, on whichever GPU a rank computes (vPP N = 2: the
    second half of the layers on cuda:1, the reference's on cuda:0)."""
    if torch.cuda.device_count() < N:
        pytest.skip(f"needs {N} GPUs")
    spec, rec, g = schedule("mlp-tiny", mode, N, 2, 2, "P1", dropout=0.3)
    ((losses, params, _),) = train_many([(rec, g, {"iters": ITERS, "device": "cuda"})])
    batches = minibatches(spec, D, ITERS, 1234)
    ref_losses, ref_params = microbatched_reference(spec, batches, loss_microbatches(g), dropout=True,
                                                    device="cuda", host_optimizer=True)
    rel_loss = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True))
    assert rel_loss <= TOL, (mode, N, losses, ref_losses)
    worst = max(max_relative_difference([a], [b]) for a, b in zip(params, ref_params, strict=True))
    assert worst <= TOL, (mode, N, worst)


@pytest.mark.parametrize("name,mode,N", [("gpt2-tiny", "vPP", 1), ("resnet-tiny", "vDP", 1), ("gpt2-tiny", "vPP", 2)])
def test_memcpy_trace_agrees_with_counters(name, mode, N):
    """Issue 6 item 7: the profiler's memcpy bytes of one steady-state iteration equal our counters within
    1% (H2D and D2H; p2p over NCCL is not memcpy and is excluded for N > 1)."""
    if torch.cuda.device_count() < N:
        pytest.skip(f"needs {N} GPUs")
    u = (2, 2) if is_bn(name) else (3, 3)
    _, rec, g = schedule(name, mode, N, *u, "P1", **OVERRIDES.get(name, {}))
    # per-tensor copies: a per-vlayer block also copies its alignment padding, which the counters leave out
    # and which is a large share of a tiny model's bytes (docs/runtime.md, Weight copies)
    s = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", memcpy_trace=True,
                     weight_copies="per-tensor")
    print(f"{name} {mode} N={N}: trace {s['memcpy_trace']}, counted {s['memcpy_counted']}, "
          f"agreement {s['memcpy_agreement']}")
    assert s["status"] == "ok", s.get("message")
    assert s["memcpy_trace"]["ranks"] == N and s["memcpy_trace"]["h2d"] > 0
    assert len(s["alloc_retries"]) == N and all(r >= 0 for r in s["alloc_retries"])   # read on every GPU
    assert s["memcpy_agrees"] is True, (s["memcpy_trace"], s["memcpy_counted"], s["memcpy_agreement"])
    # where each rank's host time went (performance log 19): on every GPU, the phases are there, every
    # pack of the rank was stepped, and the workers waited passively unless the user said otherwise
    assert len(s["host_phases"]) == N
    upd = [t for t in g.tasks if t.kind == "UPD"]
    for r, ph in enumerate(s["host_phases"]):
        assert ph["upd_steps"] == sum(1 for t in upd if t.rank == r) and ph["upd_step_s"] > 0
        assert ph["issue_s"] + ph["sends_drain_s"] + ph["gpu_drain_s"] + ph["upd_drain_s"] <= s["iter_time_s"] * 1.5
    assert s["env"]["omp_wait_policy"] == os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    # the workers pin all of the arena but the optimizer state, which only the host touches (entry 25);
    # the copies above, from and into the pinned part, agreed with the trace
    parts = s["host_arena_parts"]
    assert parts["K"] > 0 and s["host_pinned_bytes"] <= s["host_arena_bytes"] - parts["K"] < s["host_arena_bytes"]
    # host memory with the pinned arena counted once (entry 55): the sum of RSS counts the launcher's W
    # and every worker's mapping of the pinned part, the PSS each page once
    assert 0 < s["host_pss_bytes"] <= s["host_rss_bytes"] - N * s["host_pinned_bytes"] + s["host_pinned_bytes"]
    # the allocator's segments per stream (performance log 21): weights come in on the copy stream, the
    # activations they make on the compute stream, and a stream holds no more in use than it has reserved
    assert len(s["reserved_by_stream"]) == N
    for streams in s["reserved_by_stream"]:
        assert {"compute", "h2d"} <= set(streams), streams
        assert all(0 <= v["allocated"] <= v["reserved"] for v in streams.values()), streams
        assert all(v["free"] + v["allocated"] <= v["reserved"] and v["largest_free"] <= v["free"]
                   for v in streams.values()), streams


def test_task_probe_records_each_task_with_the_allocator_at_its_start(tmp_path, monkeypatch):
    """HARMONY_TASK_PEAKS=DIR (docs/runtime.md): one record per compute task and iteration, its peak at
    least what it started with, its retries counted, and what the caching allocator held per stream at its
    start, from which experiments/resimulate_runs.py --task-peaks reads fragmentation."""
    import json
    monkeypatch.setenv("HARMONY_TASK_PEAKS", str(tmp_path))
    _, rec, g = schedule("gpt2-tiny", "vPP", 1, 3, 3, "P1")
    s = run_schedule(rec, g, iters=2, warmup=1, device="cuda", precision="fp32")
    assert s["status"] == "ok", s.get("message")
    tasks = json.loads((tmp_path / "rank0.json").read_text())["tasks"]
    comp = [t.id for t in g.tasks if t.kind != "UPD"]
    assert [x["task"] for x in tasks] == comp * 2
    for x in tasks:
        assert x["peak_bytes"] >= x["start_bytes"] > 0 and x["retries"] >= 0, x
        streams = x["allocator_at_start"]
        assert "compute" in streams and all(v["free"] + v["allocated"] <= v["reserved"] for v in streams.values()), x


def test_memcpy_trace_is_skipped_after_a_warm_up_slower_than_max_iter_s():
    """A warm-up iteration slower than --max-iter-s: the next iteration is timed untraced, not traced and
    dropped (a traced 122 s iteration of swap-dp resnet1026 D=1024 outlasted the progress watchdog,
    h100-grid28), and the workers stop after it with that one iteration as the steady state."""
    _, rec, g = schedule("gpt2-tiny", "vPP", 1, 3, 3, "P1")
    s = run_schedule(rec, g, iters=4, warmup=1, device="cuda", precision="fp32", memcpy_trace=True,
                     max_iter_s=1e-6)
    assert s["status"] == "ok", s.get("message")
    assert "timed untraced" in s["memcpy_trace"]["source"] and s["memcpy_trace_skipped"], s["memcpy_trace"]
    assert s["iterations"] == 2 and "stopped after iteration 1" in s["cut_short"], (s["iterations"], s.get("cut_short"))
    assert s["warmup_iterations"] == 1 and s["iter_time_s"] > 0


def test_trace_host_ops_puts_the_hosts_torch_ops_in_the_traced_iterations_timeline():
    """--trace-host-ops (device README item 61): the traced iteration records CPU activity too, so the
    timeline ranks torch ops by self time and gives the issue thread's time inside ops and CUDA calls, which
    is more than the CUDA API alone and at most the traced wall; the bytes still agree with the counters."""
    _, rec, g = schedule("gpt2-tiny", "vPP", 1, 3, 3, "P1")
    s = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", memcpy_trace=True,
                     trace_host_ops=True, weight_copies="per-tensor")
    assert s["status"] == "ok", s.get("message")
    tr = s["memcpy_trace"]
    assert tr["source"].endswith("(CPU activity traced too)") and s["memcpy_agrees"] is True, tr
    tl = tr["timelines"][0]
    assert tl["host_ops_traced"] is True and any(c["cat"] == "cpu_op" for c in tl["cpu_ops_top"]), tl["cpu_ops_top"]
    busiest = tl["host_threads"][0]
    assert 0 < busiest["busy_s"] <= tl["wall_s"] and busiest["calls"] > 0, tl["host_threads"]


def test_capping_the_send_recv_thread_blocks_changes_no_number():
    """--p2p-max-ctas (docs/performance.md entry 46's A/B): the channels' NCCL config caps the blocks of
    their send/recv kernels; the same plan trains to the same losses, bit for bit, with one block."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    _, rec, g = schedule("gpt2-tiny", "vPP", 2, 3, 3, "P1")
    free = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32")
    capped = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", p2p_max_ctas=1)
    assert free["status"] == capped["status"] == "ok", (free.get("message"), capped.get("message"))
    assert capped["p2p_max_ctas"] == 1 and "p2p_max_ctas" not in free
    assert capped["losses"] == free["losses"] and capped["bytes_p2p"] == free["bytes_p2p"] > 0


def test_eager_receives_change_no_number():
    """--p2p-receive eager (docs/performance.md entry 48's A/B): every receive of a task is posted on NCCL's
    stream when the task starts, each still waited for before its microbatch; the same plan, over two
    GPUs, with remainder microbatches and u_fwd != u_bwd, trains to the same losses bit for bit."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    for uf, ub, packing in ((3, 3, "P1"), (4, 3, "P2")):
        _, rec, g = schedule("gpt2-tiny", "vPP", 2, uf, ub, packing)
        # both modes named: left out, a run takes the mode its schedule planned (entry 79), eager for some
        lazy = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", p2p_receive="lazy")
        eager = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", p2p_receive="eager")
        assert lazy["status"] == eager["status"] == "ok", (lazy.get("message"), eager.get("message"))
        assert lazy["p2p_receive"] == "lazy" and eager["p2p_receive"] == "eager"
        assert eager["losses"] == lazy["losses"] and eager["bytes_p2p"] == lazy["bytes_p2p"] > 0


def test_an_overlapped_all_reduce_changes_no_number():
    """--allreduce overlap (docs/performance.md entry 77): the same collectives in the same order, only the
    stream that waits for them differs, so vDP over two GPUs trains to the same losses, bit for bit, with
    u_fwd != u_bwd and remainder microbatches, and counts the same bytes."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    for name, uf, ub, packing in (("gpt2-tiny", 4, 3, "P2"), ("resnet-tiny", 2, 2, "P1")):
        _, rec, g = schedule(name, "vDP", 2, uf, ub, packing)
        inline = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32")
        overlap = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32", allreduce="overlap")
        assert inline["status"] == overlap["status"] == "ok", (inline.get("message"), overlap.get("message"))
        assert inline["allreduce"] == "inline" and overlap["allreduce"] == "overlap"
        assert overlap["losses"] == inline["losses"], name
        assert overlap["bytes_allreduce"] == inline["bytes_allreduce"] > 0


def test_nccl_copy_engine_sends_change_no_number(monkeypatch):
    """NCCL_P2P_USE_CUDA_MEMCPY=1 (docs/performance.md entry 49's A/B): NCCL moves the channels' data with
    the copy engines instead of its kernels' loads and stores; the same plan trains to the same losses, bit
    for bit, and the run's environment record names the setting (the workers inherit it). It passed on 2x
    H100 (x2-ce1), but a figure-10 plan then stalled with the setting: rejected, `harmony run` warns."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    _, rec, g = schedule("gpt2-tiny", "vPP", 2, 4, 3, "P2")
    plain = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32")
    monkeypatch.setenv("NCCL_P2P_USE_CUDA_MEMCPY", "1")
    ce = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32")
    assert plain["status"] == ce["status"] == "ok", (plain.get("message"), ce.get("message"))
    assert ce["env"]["nccl_env"].get("NCCL_P2P_USE_CUDA_MEMCPY") == "1"
    assert "NCCL_P2P_USE_CUDA_MEMCPY" not in plain["env"]["nccl_env"]
    assert ce["losses"] == plain["losses"] and ce["bytes_p2p"] == plain["bytes_p2p"] > 0


def test_task_spans_on_cuda_follow_the_stream():
    """task_spans on CUDA (harmony/runtime/task_clock.py): timing events on the compute stream give each
    compute task of the rank, in order, a span that starts when the previous one has ended; the steady
    spans fit inside the iteration."""
    _, rec, g = schedule("gpt2-tiny", "vPP", 1, 3, 3, "P1")
    s = run_schedule(rec, g, iters=3, warmup=1, device="cuda", precision="fp32")
    assert s["status"] == "ok", s.get("message")
    (spans,) = s["task_spans"]
    assert [x[0] for x in spans] == [t.id for t in g.tasks if t.kind != "UPD"]
    ends = [0.0] + [x[2] for x in spans]
    assert all(prev <= a <= b for prev, (_, a, b) in zip(ends, spans)), spans
    assert spans[-1][2] <= s["iter_time_s"] * 1.05, (spans[-1], s["iter_time_s"])
    # the host's issue ends on the same clock (the stream is empty at the origin): no task's GPU work ends
    # before the host has issued it
    (issued,) = s["task_issued"]
    assert [x[0] for x in issued] == [x[0] for x in spans]
    assert all(b >= t - 1e-3 for (_, _, b), (_, t) in zip(spans, issued)), (spans, issued)


def test_deterministic_runs_compute_the_same_bits():
    """`harmony run --deterministic` (docs/performance.md entry 71): GPT-2's fused attention backward is not
    deterministic by default (experiments/determinism_probe.py measured GPT-2 medium 2.7e-6 apart between two
    runs on an H200); with strict deterministic kernels two runs of one schedule report the same losses,
    vDP over two GPUs included where there are two, and the record says how it ran."""
    cases = [("vPP", 1, "P2")] + ([("vDP", 2, "P1")] if torch.cuda.device_count() >= 2 else [])
    for mode, n, placement in cases:
        _, rec, g = schedule("gpt2-tiny", mode, n, 4, 2, placement)
        runs = [run_schedule(rec, g, iters=4, warmup=1, device="cuda", precision="tf32", deterministic=True)
                for _ in range(2)]
        assert all(r["status"] == "ok" and r["deterministic"] is True for r in runs), [r.get("message") for r in runs]
        assert runs[0]["losses"] == runs[1]["losses"], (mode, runs[0]["losses"], runs[1]["losses"])


def test_ordered_reduce_at_four_gpus_is_plain_pytorch_in_its_order():
    """`--ordered-reduce` (docs/performance.md entry 74): vDP over four GPUs with strict deterministic kernels
    and the ranks' gradients summed in rank order reports the losses of plain PyTorch in that order
    (`train_in_order`, four shares, optimizer on host copies) on one GPU, bit for bit."""
    if torch.cuda.device_count() < 4:
        pytest.skip("needs 4 GPUs")
    from harmony.reference import train_in_order
    spec, rec, g = schedule("gpt2-tiny", "vDP", 4, 2, 2, "P1")
    run = run_schedule(rec, g, iters=ITERS, warmup=1, device="cuda", precision="tf32", deterministic=True,
                       ordered_reduce=True)
    assert run["status"] == "ok" and run["ordered_reduce"] is True, run.get("message")
    set_deterministic(strict=True)
    try:
        want, _ = train_in_order(spec, minibatches(spec, D, ITERS, 1234), loss_microbatches(g), device="cuda:0",
                                 host_optimizer=True)
    finally:
        set_deterministic()         # back to this module's warn-only kernels (HARMONY_DETERMINISTIC)
    assert run["losses"] == want, (run["losses"], want)


def test_env_names_the_visible_gpus_among_the_hosts():
    """env.gpu_uuids: torch's visible devices, each one of NVML's host_gpu_uuids (tests/test_core.py checks
    the formatting; here torch's property must give a UUID NVML knows)."""
    from harmony.metrics import env_record
    env = env_record("cuda", "fp32")
    assert len(env["gpu_uuids"]) == torch.cuda.device_count()
    assert set(env["gpu_uuids"]) <= set(env["host_gpu_uuids"]), env      # pynvml is a dependency


def test_host_gradient_adds_are_counted_on_the_signal_thread():
    """On CUDA the host adds each later dW group into the first on the updater's signal thread, after its
    device-to-host copy lands (the CPU adds on the worker's thread: tests/test_runtime_failures.py). Every
    grad_accumulate task of the graph is one add an iteration, each taking some time (entry 91)."""
    from baselines.swap_dp import swap_dp_config
    from harmony.decompose import decompose_model
    from harmony.models import get_model
    from harmony.schedule.io import make_schedule_record
    from harmony.schedule.tasks import build_task_graph
    mj = decompose_model(get_model("gpt2-tiny"), source={"kind": "zoo", "name": "gpt2-tiny", "overrides": {}},
                         with_flops=False)
    g = build_task_graph(swap_dp_config(mj, 8, 1, 2), mj["num_vlayers"])
    adds = sum(1 for t in g.tasks if t.grad_accumulate)
    assert adds > 0
    s = run_schedule(make_schedule_record(mj, g), g, iters=3, warmup=1, device="cuda", precision="fp32")
    assert s["status"] == "ok", s.get("message")
    (ph,) = s["host_phases"]
    assert ph["grad_adds"] == adds and ph["grad_add_s"] > 0
    assert ph["gc_collections"] >= ph["gc_gen2"] >= 0 and 0 <= ph["gc_s"] <= s["iter_time_s"]
