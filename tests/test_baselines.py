"""Baselines: the swap schedules (on the Harmony runtime), resident and fsdp-offload train the tiny models
to the same parameters as plain PyTorch; unavailable / infeasible / OOM are records, not crashes; the CLI
rejects bad input with one line."""
import json
import os
import sys

import pytest
import torch

from baselines import resident
from baselines.common import RunWriter, Settings, load_model, train_loop
from baselines.swap_dp import schedule_record, swap_dp_config
from baselines.swap_pp import balanced_stages, swap_pp_config
from harmony.cli import main as harmony_main
from harmony.data import load_batches
from harmony.jsonio import read_jsonl
from harmony.memcpy_trace import agreement, measure_memcpy_bytes, memcpy_bytes_from_trace
from harmony.metrics import validate_summary
from harmony.reference import max_relative_difference, train_reference
from harmony.schedule.tasks import TaskGraph, build_task_graph, count_bytes, layer_sizes_from_model

D, ITERS = 8, 3


def reference(name, d=D, iters=ITERS):
    spec, _ = load_model(name)
    losses, layers = train_reference(spec, load_batches(spec, "synthetic", d, iters))
    return losses, [p.detach() for p in layers.parameters()]


# ------------------------------------------------------------------------------------------------
# Schedules: swap-dp and swap-pp in the task language
# ------------------------------------------------------------------------------------------------
def test_swap_dp_schedule_shape_and_bytes():
    _, mj = load_model("gpt2-tiny")
    L = mj["num_vlayers"]
    cfg = swap_dp_config(mj, 8, 1, 2)
    assert cfg.mode == "vDP" and cfg.group_size == 1 and not cfg.pin_shared
    # one vLayer per pack, except the LM head (which expands hidden state into logits) joins the loss pack
    assert cfg.bwd_packs == tuple((i, i + 1) for i in range(L - 2)) + ((L - 2, L),)
    b = count_bytes(build_task_graph(cfg, L), layer_sizes_from_model(mj))
    W = mj["total_param_bytes"] + mj["total_buffer_bytes"]
    loss_w = sum(v["param_bytes"] + v["buffer_bytes"] for v in mj["vlayers"][L - 2:])
    # every microbatch (4) brings every weight in twice (forward, backward) but the loss pack's once
    assert b["h2d_weights"] == 4 * (2 * W - loss_w)
    assert b["d2h_grads"] == 4 * sum(v["trainable_param_bytes"] for v in mj["vlayers"])


def test_swap_pp_stages_balanced_and_split_when_over_cap():
    assert balanced_stages([1, 1, 1, 1, 4], 2) == [(0, 4), (4, 5)]
    stages = balanced_stages([5, 1, 1, 1, 1, 1], 3)
    assert stages[0] == (0, 1) and sorted(e - s for s, e in stages[1:]) == [2, 3]
    _, mj = load_model("mlp-tiny")
    cfg = swap_pp_config(mj, 8, 2, 2)                 # no cap: whole stages, weights resident
    assert cfg.placement == "stages" and cfg.stages and len(cfg.bwd_packs) == 2
    g = build_task_graph(cfg, mj["num_vlayers"])
    assert {t.pack: t.rank for t in g.tasks if t.kind != "UPD"} == {cfg.stages[0]: 0, cfg.stages[1]: 1}
    b = count_bytes(g, layer_sizes_from_model(mj))
    assert b["h2d_weights"] == mj["total_param_bytes"]        # loaded once: consecutive tasks share the pack
    # a cap below a stage but above every layer: that stage swaps per vLayer
    W0 = sum(v["param_bytes"] for v in mj["vlayers"][:4])
    capped = swap_pp_config(mj, 8, 2, 2, cap=int(W0 * 1.2))
    assert len(capped.bwd_packs) > 2
    assert all(any(a <= s and e <= b_ for a, b_ in capped.stages) for s, e in capped.bwd_packs)


def single_layer_cap(mj, u):
    """A cap that every single vLayer (and the loss pack) fits but no whole stage does, by swap-pp's own
    lower-bound rule: swap-pp then swaps per layer within its stage."""
    from baselines.swap_dp import TaskMemory, single_layer_packs
    mem = TaskMemory(mj)
    return max(max(mem.lower_bound("BWD", s, e, u), mem.lower_bound("FWD", s, e, u))
               for s, e in single_layer_packs(0, mj["num_vlayers"], mj))


@pytest.mark.parametrize("system,gpus,per_layer", [("swap-dp", 1, False), ("swap-pp", 2, False),
                                                   ("swap-pp", 1, True)])
def test_swap_baselines_train_like_pytorch_on_the_runtime(system, gpus, per_layer):
    """per_layer: one GPU swapping per vLayer in GPipe order, so the loss pack's input is a stash read back
    after every microbatch's forward (entry 85), not the last forward task's output."""
    runtime = pytest.importorskip("harmony.runtime")
    _, mj = load_model("mlp-tiny")
    build = swap_dp_config if system == "swap-dp" else swap_pp_config
    cap = single_layer_cap(mj, 2) if per_layer else None
    cfg = build(mj, D, gpus, 2, cap=cap)
    rec = schedule_record(system, mj, cfg, cap=cap, precision="fp32")
    graph = TaskGraph.from_json(rec["graph"])
    if per_layer:
        loss = [t for t in graph.tasks if t.kind == "BWD" and t.pack == cfg.bwd_packs[-1]]
        assert len(cfg.bwd_packs) > 2 and len(loss) == D // 2 and all(t.act_in[0] == "stash" for t in loss)
    losses, params, by_kind = runtime.train_with_schedule(rec, graph, iters=ITERS)
    ref_losses, ref_params = reference("mlp-tiny")
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    # fp32, microbatches of 2 summed in another order than the whole-batch reference: rounding only
    assert max_relative_difference(params, ref_params) <= 1e-6
    predicted = count_bytes(graph, layer_sizes_from_model(mj))
    for k in ("h2d_weights", "h2d_act", "d2h_grads", "d2h_act", "p2p"):
        assert by_kind[-1][k] == predicted[k], k


def test_swap_baselines_keep_the_copy_stream_pool(monkeypatch):
    """A swap baseline's schedule records the plan's prefetch waits (it is simulated like Harmony's), which
    would make `--load-buffers auto` pick the compute stream's pool; every swap record on file ran the copy
    stream's, so the baselines ask for it (docs/runtime.md, GPU memory pools)."""
    import harmony.runtime
    from baselines.swap_dp import run_on_runtime
    _, mj = load_model("mlp-tiny")
    rec = schedule_record("swap-dp", mj, swap_dp_config(mj, D, 1, 2), cap=None, precision="fp32")
    rec["prediction"]["prefetch_waits"] = [1]
    seen = {}

    def fake_run_schedule(record, graph, **kw):
        seen.update(kw)
        return {"status": "ok"}
    monkeypatch.setattr(harmony.runtime, "run_schedule", fake_run_schedule)
    run_on_runtime(Settings(system="swap-dp", model="mlp-tiny", minibatch=D), rec, "mlp-tiny", "vDP")
    assert seen["load_buffers"] == "copy-stream"


# ------------------------------------------------------------------------------------------------
# resident and fsdp-offload
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,u,tol", [("mlp-tiny", 8, 0.0), ("gpt2-tiny", 8, 0.0), ("bert-tiny", 8, 0.0),
                                        ("mlp-tiny", 2, 1e-6)])
def test_resident_equals_reference(name, u, tol):
    s = Settings(system="resident", model=name, minibatch=D, ubatch=u, iters=ITERS)
    spec, _ = load_model(name)
    layers, step = resident.make_step(s, spec, torch.device("cpu"))
    losses = [step(i, b) for i, b in enumerate(load_batches(spec, "synthetic", D, ITERS))]
    ref_losses, ref_params = reference(name)
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    assert max_relative_difference(list(layers.parameters()), ref_params) <= tol


@pytest.mark.parametrize("gpus", [1, 2])
def test_fsdp_offload_on_cpu_gloo_equals_reference(gpus, tmp_path):
    from baselines import fsdp_offload
    out = tmp_path / "run.jsonl"
    s = Settings(system="fsdp-offload", model="mlp-tiny", minibatch=D, gpus=gpus, ubatch=2, iters=ITERS,
                 output=str(out))
    result = {}
    fsdp_offload.run(s, _result=result)
    summary = read_jsonl(out)[-1]
    validate_summary(summary)
    assert summary["status"] == "ok" and summary["gpus"] == gpus and summary["bytes_source"] == "memcpy_trace"
    # host memory with shared pages once: every rank's PSS after iteration 0 only (a page walk), summed
    pss = [r["host_pss_bytes"] for r in read_jsonl(out) if r.get("record") == "iteration"]
    assert pss[0] > 0 and pss[1:] == [None] * (len(pss) - 1) and summary["host_pss_bytes"] == pss[0]
    ref_losses, ref_params = reference("mlp-tiny")
    assert result["losses"] == pytest.approx(ref_losses, rel=1e-6)
    assert max_relative_difference(result["params"], ref_params) <= 1e-6


@pytest.mark.parametrize("name,gpus,u,tol", [("vgg-tiny", 1, D, 0.0), ("resnet-tiny", 1, D, 0.0),
                                              ("vgg-tiny", 2, 4, 2e-6)])
def test_fsdp_offload_sgd_models_on_cpu_equal_reference(name, gpus, u, tol, tmp_path):
    """SGD (the CNNs): DTensor has no rule for aten._fused_sgd_, so fsdp-offload steps harmony.optim's fused
    SGD on the local shards: bit for bit the reference with one microbatch (u = D, so BatchNorm sees the
    same batch), rounding only over 2 ranks (gradients averaged by reduce-scatter)."""
    from baselines import fsdp_offload
    out = tmp_path / "run.jsonl"
    s = Settings(system="fsdp-offload", model=name, minibatch=D, gpus=gpus, ubatch=u, iters=ITERS,
                 output=str(out))
    result = {}
    fsdp_offload.run(s, _result=result)
    summary = read_jsonl(out)[-1]
    assert summary["status"] == "ok", summary.get("message")
    assert "local shards" in summary["settings"]["optimizer"]
    ref_losses, ref_params = reference(name)
    assert result["losses"] == pytest.approx(ref_losses, rel=1e-6)
    assert max_relative_difference(result["params"], ref_params) <= tol


# ------------------------------------------------------------------------------------------------
# Results that are not "ok"
# ------------------------------------------------------------------------------------------------
def test_zero_offload_without_deepspeed_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)         # import deepspeed -> ImportError
    out = tmp_path / "z.jsonl"
    assert harmony_main(["baseline", "zero-offload", "mlp-tiny", "--minibatch", "8", "-o", str(out)]) == 0
    (summary,) = read_jsonl(out)
    validate_summary(summary)
    assert summary["status"] == "unavailable"
    assert "pip install -e .[deepspeed]" in summary["message"] and summary["install"]


def test_zero_offload_runs_in_a_process_of_its_own_at_one_gpu(tmp_path, monkeypatch):
    """At N = 1 zero-offload ran in the search's process, and after a candidate's OOM DeepSpeed's GPU memory
    stayed held, so every smaller u went out of memory too (docs/performance.md entry 116; the GPU test is
    tests/test_baselines_gpu.py). Here, on the CPU: a one-GPU run is handed to spawn_ranks with one rank,
    and its record is what that rank wrote."""
    import baselines.zero_offload as zo
    spawned = []

    def fake_spawn(entry, args, gpus):
        spawned.append((entry, gpus))
        s = args[0]
        with open(s.output, "w") as f:
            f.write(json.dumps({"record": "summary", "status": "ok", "from": "the rank"}) + "\n")

    monkeypatch.setattr(zo, "deepspeed_status", lambda: (True, "deepspeed (stand-in)"))
    monkeypatch.setattr(zo, "spawn_ranks", fake_spawn)
    out = tmp_path / "z.jsonl"
    rec = zo.run(Settings(system="zero-offload", model="mlp-tiny", minibatch=8, ubatch=4, gpus=1, output=str(out)))
    assert spawned == [(zo._spawn_entry, 1)]
    assert rec.get("from") == "the rank", rec


def test_no_committed_search_records_an_oom_below_a_u_that_ran():
    """A baseline's memory grows with its microbatch, so a search whose u went out of memory while a larger u
    of the same search ran is a harness fault, not a measurement: zero-offload's searches at N = 1 had 23
    such candidates, each run in the process of an earlier OOM (docs/performance.md entry 116; superseded).
    Every committed search record outside superseded/ is read."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "results"
    faults, searches = [], 0
    for path in root.glob("*/*/runs/*/*/*-best.jsonl"):
        if "superseded" in path.parts:
            continue
        search = read_jsonl(path)[-1].get("ubatch_search") or []
        searches += bool(search)
        ran = [c["ubatch"] for c in search if c["status"] == "ok"]
        faults += [f"{path.relative_to(root)}: u={c['ubatch']} oom, u={max(ran)} ok"
                   for c in search if ran and c["status"] == "oom" and c["ubatch"] < max(ran)]
    assert searches > 100, f"only {searches} search records found under {root}"
    assert not faults, faults


@pytest.mark.parametrize("name, client", [("vgg-tiny", True), ("resnet-tiny", True), ("gpt2-tiny", False)])
def test_zero_offload_config_takes_the_models_optimizer(name, client):
    """AdamW/Adam models get DeepSpeed's CPU Adam; SGD models keep our torch optimizer, which DeepSpeed
    accepts under ZeRO only when told that an untested optimizer is allowed (it asserts otherwise)."""
    from baselines.zero_offload import ds_config
    from harmony.models import get_model
    spec = get_model(name)
    cfg = ds_config(spec, Settings(system="zero-offload", model=name, minibatch=8, ubatch=2), 2)
    assert ("optimizer" not in cfg) == client
    assert cfg.get("zero_allow_untested_optimizer", False) == client
    assert cfg["gradient_accumulation_steps"] == 4 and cfg["zero_optimization"]["stage"] == 3


def test_cap_smaller_than_a_layer_is_infeasible(tmp_path):
    for system in ("swap-dp", "swap-pp"):
        out = tmp_path / f"{system}.jsonl"
        assert harmony_main(["baseline", system, "gpt2-tiny", "--minibatch", "8", "--ubatch", "2",
                             "--gpu-memory", "64KiB", "-o", str(out)]) == 0
        (summary,) = read_jsonl(out)
        validate_summary(summary)
        assert summary["status"] == "infeasible" and "vLayer" in summary["message"]


def test_oom_during_a_step_is_a_record(tmp_path):
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=3, output=str(tmp_path / "o.jsonl"))

    def step(i, batch):
        if i == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return 1.0

    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 3, devices=[torch.device("cpu")])
    validate_summary(summary)
    assert summary["status"] == "oom" and summary["iterations"] == 1 and "iteration 1" in summary["message"]
    assert read_jsonl(s.output)[-1]["status"] == "oom"


def test_max_iter_s_stops_after_the_first_slow_steady_state_iteration(tmp_path):
    """--max-iter-s: a run whose steady-state iteration outlasts the limit stops there with that one iteration
    as its measurement (status ok, `cut_short` says so); a slow warm-up alone does not stop it."""
    times = iter([5.0, 0.01, 3.0, 0.01, 0.01])      # seconds each step pretends to take
    clock = {"t": 0.0}

    def step(i, batch):
        clock["t"] += next(times)
        return 1.0
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5, max_iter_s=2.0,
                 output=str(tmp_path / "o.jsonl"))
    import baselines.common as bc
    real = bc.time.perf_counter
    bc.time.perf_counter = lambda: clock["t"]
    try:
        summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")])
    finally:
        bc.time.perf_counter = real
    validate_summary(summary)
    # iteration 0 (warm-up, 5 s) does not stop it; iteration 2 (3 s, steady state) does
    assert summary["status"] == "ok" and summary["iterations"] == 3
    assert "iteration 2" in summary["cut_short"] and summary["iter_time_s"] == pytest.approx((0.01 + 3.0) / 2)
    assert Settings(system="resident", model="m", minibatch=4).max_iter_s is None
    # several ranks: the slowest rank's time decides, so every rank leaves the loop at the same iteration
    s2 = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=4, max_iter_s=2.0)
    fast = train_loop(s2, RunWriter(s2, "mlp-tiny"), lambda i, b: 1.0, [()] * 4, devices=[torch.device("cpu")],
                      gather=lambda v: v + [(9.0, 9.0)] if v and isinstance(v[0], tuple) else v)
    assert fast["iterations"] == 2 and "9.0 s" in fast["cut_short"]


def test_a_too_slow_warmup_drops_the_memcpy_trace(tmp_path, monkeypatch):
    """--max-iter-s: when the warm-up iteration is already slower than the limit, the iteration after it is
    timed untraced (the trace doubles an iteration and counts as warm-up) and the run stops there; a system
    whose bytes come from the trace then records them as unknown (None), not as 0."""
    import harmony.memcpy_trace as mt
    traced = []
    monkeypatch.setattr(mt, "measure_memcpy_bytes", lambda fn: traced.append(fn()) or
                        {"h2d": 7, "d2h": 7, "p2p": 0})
    times = iter([5.0, 3.0, 0.01, 0.01])
    clock = {"t": 0.0}

    def step(i, batch):
        clock["t"] += next(times)
        return 1.0
    import baselines.common as bc
    monkeypatch.setattr(bc.time, "perf_counter", lambda: clock["t"])
    s = Settings(system="fsdp-offload", model="mlp-tiny", minibatch=4, iters=4, max_iter_s=2.0)
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 4, devices=[torch.device("cpu")],
                         trace_bytes_as_counters=True, trace=True)
    validate_summary(summary)
    assert not traced and summary["iterations"] == 2 and summary["iter_time_s"] == pytest.approx(3.0)
    assert "warm-up iteration 0" in summary["memcpy_trace_skipped"] and "iteration 1" in summary["cut_short"]
    assert summary["bytes_h2d"] is None and summary["bytes_source"] is None
    # a fast warm-up keeps the trace: iteration 1 is traced (and counts as warm-up), its bytes are the record's
    times, clock["t"] = iter([0.5, 0.5, 0.5, 0.5]), 0.0
    s2 = Settings(system="fsdp-offload", model="mlp-tiny", minibatch=4, iters=4, max_iter_s=2.0)
    ok = train_loop(s2, RunWriter(s2, "mlp-tiny"), step, [()] * 4, devices=[torch.device("cpu")],
                    trace_bytes_as_counters=True, trace=True)
    assert len(traced) == 1 and ok["bytes_h2d"] == 7 and "memcpy_trace_skipped" not in ok


def loop_clock(monkeypatch, deadline_s: float) -> dict:
    """The timed loop's clock (baselines.common) as a dict the test's steps advance (clock["t"] += seconds),
    and $HARMONY_DEADLINE `deadline_s` seconds after its start."""
    import baselines.common as bc
    clock = {"t": 0.0}
    monkeypatch.setattr(bc.time, "perf_counter", lambda: clock["t"])
    monkeypatch.setattr(bc, "seconds_left", lambda: deadline_s - clock["t"])
    return clock


def test_the_deadline_ends_a_run_after_its_timed_iterations_or_leaves_it(monkeypatch):
    """$HARMONY_DEADLINE (a device call's end): a run stops before an iteration that, as slow as the slowest
    so far (10% over), would end after it, keeping the timed iterations it has (a record, like
    --max-iter-s's cut); with none timed yet it raises Deferred and writes nothing (the next call runs it)."""
    import baselines.common as bc
    from harmony.jsonio import Deferred
    clock = loop_clock(monkeypatch, deadline_s=10.0)

    def step(i, batch):
        clock["t"] += 3.0
        return 1.0
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")])
    validate_summary(summary)
    # iterations end at 3, 6, 9 s: at 9 s one more (3.3 s) would pass the 10 s deadline
    assert summary["status"] == "ok" and summary["iterations"] == 3 and summary["iter_time_s"] == 3.0
    assert "HARMONY_DEADLINE" in summary["cut_short"] and "after iteration 2" in summary["cut_short"]
    clock["t"] = 0.0

    def slow(i, batch):
        clock["t"] += 8.0
        return 1.0
    s2 = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    with pytest.raises(Deferred, match="before any timed iteration"):
        train_loop(s2, RunWriter(s2, "mlp-tiny"), slow, [()] * 5, devices=[torch.device("cpu")])
    # without the deadline the same run goes to the end
    monkeypatch.setattr(bc, "seconds_left", lambda: None)
    clock["t"] = 0.0
    s3 = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    assert train_loop(s3, RunWriter(s3, "mlp-tiny"), slow, [()] * 5,
                      devices=[torch.device("cpu")])["iterations"] == 5


def test_the_deadline_estimates_the_iteration_after_the_trace_untraced(monkeypatch):
    """The traced iteration runs slower under the profiler (resident resnet1026 D=1024 u=32: 31 s, then 108 s
    traced, x2-grid3); the untraced iteration after it is estimated as the one before the trace, not as the
    traced one, so a run with time for it is timed in this call instead of being left for the next."""
    import harmony.memcpy_trace as mt
    import baselines.common as bc
    from harmony.jsonio import Deferred
    clock = loop_clock(monkeypatch, deadline_s=18.0)

    def step(i, batch):
        clock["t"] += 3.0
        return 1.0

    def slow_trace(fn):     # the profiler makes the traced iteration 3.5x as long
        fn()
        clock["t"] += 7.5
        return {"h2d": 0, "d2h": 0, "p2p": 0}
    monkeypatch.setattr(mt, "measure_memcpy_bytes", slow_trace)
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")], trace=True)
    validate_summary(summary)
    # iterations end at 3, 13.5 (traced), 16.5 s: 3.3 s fitted the 4.5 s left after the trace (11.6 did not)
    assert summary["status"] == "ok" and summary["iterations"] == 3 and summary["iter_time_s"] == 3.0
    # with too little time even for an untraced iteration, the run is left, and the reason says which estimate
    monkeypatch.setattr(bc, "seconds_left", lambda: 16.0 - clock["t"])
    clock["t"] = 0.0
    s2 = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    with pytest.raises(Deferred, match="as estimated before iteration 1, which the memcpy trace slowed"):
        train_loop(s2, RunWriter(s2, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")], trace=True)


def test_the_deadline_discounts_a_slow_first_iteration_as_the_nearest_candidate_ran(monkeypatch):
    """Settings.first_iter_ratio: after iteration 0 alone, the next iteration is estimated at that ratio of
    it (zero-offload resnet1026 D=64 u=8 ran 180 s then 74 s; u=16's 235 s first iteration, estimated as its
    own next, was left twice for a call that never had the time). Without the ratio the same run is left."""
    from harmony.jsonio import Deferred
    clock = loop_clock(monkeypatch, deadline_s=15.0)

    def first_slow(i, batch):
        clock["t"] += 8.0 if i == 0 else 3.0
        return 1.0
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    with pytest.raises(Deferred, match=r"about 8 s, as iteration 0"):   # 7 s left < 8.8
        train_loop(s, RunWriter(s, "mlp-tiny"), first_slow, [()] * 5, devices=[torch.device("cpu")])
    clock["t"] = 0.0
    s2 = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5, first_iter_ratio=0.4)
    summary = train_loop(s2, RunWriter(s2, "mlp-tiny"), first_slow, [()] * 5, devices=[torch.device("cpu")])
    validate_summary(summary)
    # 0.4 x 8 s = 3.2 s (3.5 with the margin) fits the 7 s left; iterations end at 8, 11, 14 s
    assert summary["status"] == "ok" and summary["iterations"] == 3 and summary["iter_time_s"] == 3.0
    assert "after iteration 2" in summary["cut_short"]


def test_the_deadline_estimates_iteration_one_from_iteration_zeros_own_microbatches(monkeypatch):
    """MicrobatchClock: a step that ticks after each microbatch has iteration 1 estimated as iteration 0 less
    its first microbatch's excess over the median of the others (zero-offload resnet1026 D=64 u=16: 208 s,
    then 23 s). Iteration 0 here: microbatches of 5, 1, 1, 1 s = 8 s, so iteration 1 is estimated at 4 s,
    which fits the 7 s left, where iteration 0 as its own estimate does not. Later iterations are not
    timed per microbatch (the clock is disarmed), and with fewer than three microbatches it gives none."""
    from harmony.jsonio import Deferred
    from baselines.common import MicrobatchClock
    clock = loop_clock(monkeypatch, deadline_s=15.0)
    mb = MicrobatchClock([torch.device("cpu")])
    ticks = []

    def step(i, batch, spans=(5.0, 1.0, 1.0, 1.0)):
        for d in (spans if i == 0 else (0.75,) * 4):
            clock["t"] += d
            mb.tick()
            ticks.append((i, len(mb.marks)))
        return 1.0
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")], clock=mb)
    validate_summary(summary)
    assert summary["status"] == "ok" and summary["iter_time_s"] == 3.0 and summary["iterations"] == 3
    assert len(mb.marks) == 5        # armed for iteration 0 only: its start and four microbatches
    assert MicrobatchClock([torch.device("cpu")]).next_iteration_s(8.0) is None
    mb.marks = [0.0, 5.0, 6.0]        # two microbatches: no median of the others to trust
    assert mb.next_iteration_s(6.0) is None
    # without the clock the same run is left for the next call (iteration 0's 8 s as its own next)
    clock["t"] = 0.0
    with pytest.raises(Deferred, match=r"about 8 s, as iteration 0"):
        train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 5, devices=[torch.device("cpu")])


def test_the_deadline_takes_the_smaller_of_the_clocks_and_the_nearest_candidates_estimate(monkeypatch):
    """With both estimates of iteration 1, the smaller one: one-time work spread over iteration 0's
    microbatches (DeepSpeed's) leaves the clock's estimate near iteration 0, where the nearest candidate's
    ratio finds it (zero-offload resnet1026 D=256 u=8: 261 s, the clock said 252 s, u=16 had run 213 s then
    48 s; x2-grid29). Iteration 0 here: 2, 2, 2, 2 s = 8 s, the clock's estimate 8 s, the ratio's 0.4 x 8 =
    3.2 s, which fits the 7 s left; and where the first microbatch carries the one-time work (5, 1, 1, 1 s)
    the clock's 4 s is under the ratio 0.9's 7.2 s and is the one taken."""
    from baselines.common import MicrobatchClock
    from harmony.jsonio import Deferred
    clock = loop_clock(monkeypatch, deadline_s=15.0)

    def stepper(mb, spans):
        def step(i, batch):
            for d in (spans if i == 0 else (0.75,) * 4):
                clock["t"] += d
                mb.tick()
            return 1.0
        return step
    for spans, ratio in (((2.0,) * 4, 0.4), ((5.0, 1.0, 1.0, 1.0), 0.9)):
        clock["t"] = 0.0
        mb = MicrobatchClock([torch.device("cpu")])
        s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5, first_iter_ratio=ratio)
        summary = train_loop(s, RunWriter(s, "mlp-tiny"), stepper(mb, spans), [()] * 5,
                             devices=[torch.device("cpu")], clock=mb)
        assert summary["status"] == "ok" and summary["iter_time_s"] == 3.0, spans
    clock["t"] = 0.0                  # the clock alone, spread one-time work: left for the next call
    mb = MicrobatchClock([torch.device("cpu")])
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=5)
    with pytest.raises(Deferred, match="less its first microbatch"):
        train_loop(s, RunWriter(s, "mlp-tiny"), stepper(mb, (2.0,) * 4), [()] * 5,
                   devices=[torch.device("cpu")], clock=mb)


def test_a_run_that_had_the_whole_call_and_cannot_time_an_iteration_is_recorded_over_time(tmp_path, monkeypatch):
    """$HARMONY_CALL_S: a run that began within FRESH_CALL_SLACK_S of its call's start and whose first timed
    iteration still would end after the deadline gets status over-time, with iteration 0 kept in its record
    (zero-offload resnet1026 D=1024: set-up, a 465 s first iteration and a 275 s second outlast any 10-minute
    call). The same run begun later in its call is left for the next call as before. A search takes an
    over-time candidate as finished, unless a call with a longer window runs it."""
    import time as _time

    import baselines.common as bc
    from baselines.cli import finished_candidate
    from harmony.jsonio import Deferred, read_jsonl
    clock = {"t": 0.0}
    monkeypatch.setattr(bc.time, "perf_counter", lambda: clock["t"])
    now = _time.time()
    monkeypatch.setattr(bc, "seconds_left", lambda: 15.0 - clock["t"])
    monkeypatch.setenv("HARMONY_DEADLINE", str(now + 15.0))
    monkeypatch.setenv("HARMONY_CALL_S", "100")         # the call began 85 s ago

    def step(i, batch):
        clock["t"] += 8.0
        return 1.0
    out = tmp_path / "r.u4.jsonl"
    s = Settings(system="resident", model="mlp-tiny", minibatch=4, ubatch=4, iters=3, output=str(out),
                 started_at=now - 80.0)       # 5 s into the call's 100: it had the whole call
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 3, devices=[torch.device("cpu")])
    validate_summary(summary)
    assert summary["status"] == "over-time" and summary["call_window_s"] == 100.0
    assert "would end after HARMONY_DEADLINE" in summary["message"]
    assert "began 5 s into its call's 100 s" in summary["message"]
    assert [r["iteration"] for r in read_jsonl(out) if r["record"] == "iteration"] == [0]
    s.model = str(tmp_path / "mlp-tiny.json")
    assert finished_candidate(s)["status"] == "over-time"           # not run again by a call as long
    monkeypatch.setenv("HARMONY_CALL_S", "200")
    assert finished_candidate(s) is None                              # a longer call runs it again
    monkeypatch.setenv("HARMONY_CALL_S", "100")
    clock["t"] = 0.0
    late = Settings(system="resident", model="mlp-tiny", minibatch=4, iters=3,
                    started_at=now - 5.0)     # 80 s into the call: a next call gives it more time
    with pytest.raises(Deferred, match="before any timed iteration"):
        train_loop(late, RunWriter(late, "mlp-tiny"), step, [()] * 3, devices=[torch.device("cpu")])


def test_a_candidate_that_stalled_on_the_gpu_is_not_run_again_but_other_errors_are(tmp_path):
    """A GPU stall (the launcher's watchdog: failure.stalled_gpus) cost x2-cl13-rec 330 s; the search reads
    it as a candidate that did not run instead of spending that again. Any other error runs again."""
    import json
    from baselines.cli import finished_candidate
    out = tmp_path / "r.u8.jsonl"
    s = Settings(system="swap-pp", model="mlp-tiny", minibatch=4, ubatch=8, iters=3, output=str(out))
    rec = {"record": "summary", "system": "swap-pp", "model": "mlp-tiny", "gpus": 1, "minibatch": 4,
           "ubatch": 8, "status": "error", "iterations": 0, "message": "no progress from the workers for 330 s",
           "env": {"device": s.device, "precision": s.precision, "gpu_memory_cap": s.gpu_memory_cap}}
    out.write_text(json.dumps(rec) + "\n")
    assert finished_candidate(s) is None                           # an error: run again
    out.write_text(json.dumps(dict(rec, failure={"stalled_gpus": [{"index": 0}]})) + "\n")
    assert finished_candidate(s)["status"] == "error"             # a GPU stall: taken as finished
    out.write_text(json.dumps(dict(rec, failure={"stalled_gpus": None})) + "\n")     # no NVML: still a stall
    assert finished_candidate(s)["status"] == "error"
    out.write_text(json.dumps(dict(rec, failure={"stalled_gpus": [{"index": 0}]}, minibatch=8)) + "\n")
    assert finished_candidate(s) is None                           # not these settings


def test_search_hands_each_candidate_its_nearest_finished_candidates_first_iteration_ratio(tmp_path,
                                                                                         monkeypatch):
    """The search reads each finished candidate's second iteration over its first from its record (at most
    1; none with fewer than two iterations) and gives the next candidate the nearest one below it."""
    import baselines.cli as bcli
    from baselines.cli import first_iter_ratio
    rec = tmp_path / "c.jsonl"
    rec.write_text("".join(json.dumps({"record": "iteration", "time_s": t}) + "\n" for t in (180.0, 74.0, 44.6))
                   + json.dumps({"record": "summary"}) + "\n")
    assert first_iter_ratio(str(rec)) == pytest.approx(74 / 180)
    rec.write_text(json.dumps({"record": "iteration", "time_s": 5.0}) + "\n")
    assert first_iter_ratio(str(rec)) is None and first_iter_ratio(str(tmp_path / "none.jsonl")) is None
    rec.write_text("".join(json.dumps({"record": "iteration", "time_s": t}) + "\n" for t in (2.0, 3.0)))
    assert first_iter_ratio(str(rec)) == 1.0
    seen, real = {}, bcli.run_one

    def spy(s):
        seen[s.ubatch] = s.first_iter_ratio
        r = real(s)
        r["samples_per_s"] = {2: 3.0, 4: 2.0, 8: 1.0}[s.ubatch]   # u=8 slower: the climb then goes down
        return r
    monkeypatch.setattr(bcli, "run_one", spy)
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "2,4,8",
                         "--iters", "3", "-o", str(out)]) == 0
    ran = {u: first_iter_ratio(str(out.with_name(f"r.u{u}.jsonl"))) for u in seen}
    assert list(seen) == [4, 8, 2] and seen[4] is None    # the climb's start: no candidate before it
    assert ran[4] is not None and seen[8] == ran[4]           # u=8: the nearest below
    assert seen[2] == ran[4]                                  # u=2: none below, the nearest above


def test_a_deadline_before_any_timed_iteration_defers_a_two_rank_run_in_the_parent(tmp_path, monkeypatch):
    """At N = 2 (fsdp-offload on gloo) the ranks gather their estimates and seconds left, so both leave the
    run at the same iteration (a rank left in a collective would hang), and the parent gets the Deferred
    that an exception in a spawned rank could not hand over: the CLI exits DEFERRED_EXIT with no record,
    as at N = 1. Before, a run at N > 1 went on past its warm-up and the call's end cut it off (x2-grid29:
    zero-offload resnet1026 D=256 u=8, and the search it was in was recorded over-time)."""
    from harmony.jsonio import DEFERRED_EXIT, partial_path
    monkeypatch.setenv("HARMONY_DEADLINE", str(__import__("time").time() - 1))   # the ranks inherit it
    out = tmp_path / "run.jsonl"
    rc = harmony_main(["baseline", "fsdp-offload", "mlp-tiny", "--minibatch", str(D), "--gpus", "2", "--ubatch",
                       "2", "--iters", "4", "-o", str(out)])
    assert rc == DEFERRED_EXIT and not out.exists() and not partial_path(out).exists()


def _two_rank_loop(tmp_path, monkeypatch, lefts: list[float], overs: list[str | None], step=None) -> dict:
    """train_loop as rank 0 of two, in this process: `gather` returns rank 0's value and rank 1's (from
    `overs` for the over-time verdict, else the same value); seconds_left() returns `lefts` in turn; `step`
    is the iteration (default: loss 1.0 at once)."""
    import baselines.common as bc
    it = iter(lefts)
    monkeypatch.setattr(bc, "seconds_left", lambda: next(it))
    monkeypatch.setattr(bc, "had_whole_call", lambda s: overs[0])

    def gather(values):
        if len(values) == 1 and (values[0] is None or isinstance(values[0], str)):   # the whole-call verdict
            return [values[0], overs[1]]
        return values * 2
    s = Settings(system="fsdp-offload", model="mlp-tiny", minibatch=4, gpus=2, ubatch=2, iters=3,
                 output=str(tmp_path / "r.jsonl"))
    return train_loop(s, RunWriter(s, "mlp-tiny"), step or (lambda i, b: 1.0), [()] * 3,
                      devices=[torch.device("cpu")], gather=gather)


def test_two_ranks_stop_after_the_warm_up_when_the_deadline_comes_then(tmp_path, monkeypatch):
    """Time left for the warm-up's next iteration, none after it: every rank stops after iteration 1."""
    summary = _two_rank_loop(tmp_path, monkeypatch, [1e9, 1e9, 0.0], [None, None])
    assert summary["status"] == "ok" and summary["iterations"] == 2
    assert "after iteration 1" in summary["cut_short"]


def test_two_ranks_take_rank_0s_verdict_on_the_whole_call(tmp_path, monkeypatch):
    """No time for a timed iteration: the ranks go by rank 0's had_whole_call, so they all stop over-time
    (rank 0's call began with the run) or all defer, whatever the other rank's own clock says."""
    from harmony.jsonio import Deferred
    summary = _two_rank_loop(tmp_path, monkeypatch, [1e9, 0.0], ["it began 1 s into its call's 585 s", None])
    assert summary["status"] == "over-time" and "began 1 s into" in summary["message"]
    with pytest.raises(Deferred, match="before any timed iteration"):
        _two_rank_loop(tmp_path, monkeypatch, [1e9, 0.0], [None, "it began 1 s into its call's 585 s"])


@pytest.mark.parametrize("system", ["resident", "fsdp-offload"])
def test_a_run_the_deadline_leaves_exits_deferred_without_a_record(tmp_path, monkeypatch, system):
    """The CLI turns a run's Deferred into DEFERRED_EXIT and drops its partial record, also through the
    systems that turn other exceptions into error records (fsdp-offload at N = 1)."""
    import baselines.common as bc
    from harmony.jsonio import DEFERRED_EXIT, partial_path
    monkeypatch.setattr(bc, "seconds_left", lambda: 0.0)
    out = tmp_path / "r.jsonl"
    rc = harmony_main(["baseline", system, "mlp-tiny", "--minibatch", "8", "--ubatch", "4", "--iters", "3",
                       "-o", str(out)])
    assert rc == DEFERRED_EXIT and not out.exists() and not partial_path(out).exists()


@pytest.mark.parametrize("speeds, slow, runs", [
    ([0, 0, 0, 1, 0, 0, 0], {3}, [3, 4]),         # the start ran, too slow: up once (OOM), never below it
    ([0, 1, 0, 0, 0, 0, 0], {1}, [3, 2, 1]),      # down past OOMs to the first that runs; too slow: stop there
    ([0, 1, 0, 0, 0, 0, 0], set(), [3, 2, 1, 0]),  # without the limit the climb checks the next one down
])
def test_climb_does_not_go_below_a_too_slow_candidate(speeds, slow, runs):
    from baselines.cli import climb
    tried = []

    def trial(i):
        tried.append(i)
        return speeds[i]
    climb(trial, len(speeds), lambda i: i in slow and i in tried)
    assert tried == runs


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("speeds, best, runs", [
    ([1, 2, 4, 8, 9, 0, 0], 4, 3),        # rises to a peak above the start, then out of memory: 3 runs, not 7
    ([1, 2, 4, 8, 7, 0, 0], 3, 3),        # the start is the peak: one step up, one down
    ([5, 6, 7, 3, 2, 1, 0], 2, 4),        # peak below the start (GPT2-XL swap-dp: u=8 10.81 > u=16 10.80)
    ([1, 2, 0, 0, 0, 0, 0], 1, 4),        # the start does not run: down until one runs, then on while faster
    ([0, 0, 0, 0, 0], 0, 3),              # nothing runs: the start and all below it (larger u needs more memory)
    ([3], 0, 1),
])
def test_microbatch_climb_finds_the_peak_with_few_runs(speeds, best, runs):
    from baselines.cli import climb
    tried = []

    def trial(i):
        tried.append(i)
        return speeds[i]
    climb(trial, len(speeds))
    assert len(tried) == len(set(tried)) == runs
    ran = [i for i in tried if speeds[i] > 0]
    assert (max(ran, key=lambda i: speeds[i]) if ran else 0) == best


@pytest.mark.parametrize("hint, start", [(None, None), (8, 3), (6, 3), (3, 2), (12, 4), (1, 0), (1000, 6)])
def test_ubatch_start_picks_the_nearest_candidate_on_a_log_scale(hint, start):
    """--ubatch-start: the climb starts at the candidate nearest the hint in ratio (6 is 1.33x from 8 and
    1.5x from 4), at either end past the list; without a hint the climb keeps its middle start (None)."""
    from baselines.cli import start_index
    assert start_index([1, 2, 4, 8, 16, 32, 64], hint) == start


def test_a_climb_that_starts_at_the_peak_runs_fewer_candidates():
    """Started at a hint that is the peak, the climb runs the peak and its two neighbours, and finds the
    same peak as from the middle (which ran five here)."""
    from baselines.cli import climb
    speeds = [1, 2, 3, 4, 5, 6, 2]
    for start, runs in ((None, [3, 4, 5, 6]), (5, [5, 6, 4])):
        tried = []
        climb(lambda i: tried.append(i) or speeds[i], len(speeds), start=start)
        assert tried == runs and max(tried, key=lambda i: speeds[i]) == 5


def test_cli_ubatch_start_records_where_the_climb_began(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--ubatch-start", "16", "--iters", "2", "-o", str(out)]) == 0
    summary = read_jsonl(out)[-1]
    assert summary["ubatch_climb_start"] == 16
    tried = [c["ubatch"] for c in summary["ubatch_search"] if c["status"] != "not tried"]
    assert 16 in tried and 1 not in tried
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2",
                         "--ubatch-start", "0", "--iters", "2", "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "--ubatch-start 0: give a microbatch size of at least 1" in capsys.readouterr().err


def test_cli_climb_lists_every_candidate(tmp_path):
    """A climbing search records each candidate once: run ones with their status, skipped ones as `not tried`;
    the output is the fastest that ran. `--ubatch-search all` runs them all."""
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--iters", "2", "-o", str(out)]) == 0
    summary = read_jsonl(out)[-1]
    search = summary["ubatch_search"]
    assert [x["ubatch"] for x in search] == [1, 2, 4, 8, 16]
    ran = [x for x in search if x["status"] == "ok"]
    assert {x["status"] for x in search} <= {"ok", "not tried"} and 2 <= len(ran) <= 5
    assert summary["ubatch"] == max(ran, key=lambda x: x["samples_per_s"])["ubatch"]
    assert all((tmp_path / f"r.u{x['ubatch']}.jsonl").exists() == (x["status"] == "ok") for x in search)
    out2 = tmp_path / "all.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--ubatch-search", "all", "--iters", "2", "-o", str(out2)]) == 0
    assert all(x["status"] == "ok" for x in read_jsonl(out2)[-1]["ubatch_search"])


def test_cli_resident_and_microbatch_search(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "8", "--ubatch", "2,4",
                         "--iters", "2", "-o", str(out)]) == 0
    summary = read_jsonl(out)[-1]
    validate_summary(summary)
    assert summary["status"] == "ok" and summary["ubatch"] in (2, 4)
    assert [x["ubatch"] for x in summary["ubatch_search"]] == [2, 4]
    assert (tmp_path / "r.u2.jsonl").exists() and (tmp_path / "r.u4.jsonl").exists()
    assert "microbatch search" in capsys.readouterr().err


@pytest.mark.parametrize("argv,msg", [
    (["resident", "no-such-model", "--minibatch", "8"], "unknown model"),
    (["resident", "mlp-tiny", "--minibatch", "7", "--gpus", "2"], "multiple of --gpus"),
    (["resident", "mlp-tiny", "--minibatch", "8", "--ubatch", "0"], "--ubatch 0"),
    (["resident", "mlp-tiny", "--minibatch", "8", "--ubatch", "two"], "comma list"),
    (["resident", "mlp-tiny", "--minibatch", "8", "--gpu-memory", "lots"], "cannot read the size"),
    (["swap-dp", "missing/model.json", "--minibatch", "8"], "no such model.json"),
])
def test_cli_bad_input(argv, msg, tmp_path, capsys):
    assert harmony_main(["baseline", *argv, "-o", str(tmp_path / "x.jsonl")]) == 2
    assert msg in capsys.readouterr().err


def test_cli_unknown_baseline_name(tmp_path):
    with pytest.raises(SystemExit) as e:
        harmony_main(["baseline", "megatron", "mlp-tiny", "--minibatch", "8", "-o", str(tmp_path / "x")])
    assert e.value.code == 2


# ------------------------------------------------------------------------------------------------
# memcpy trace
# ------------------------------------------------------------------------------------------------
def test_memcpy_trace_parser_and_cpu_fallback():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "args": {"bytes": 1000}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "args": {"bytes": 24}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "args": {"bytes": 500}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "args": {"bytes": 7}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "args": {"bytes": 3}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "args": {}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "args": {"bytes": 99}},
    ]}
    b = memcpy_bytes_from_trace(trace)
    assert (b["h2d"], b["d2h"], b["p2p"], b["d2d"], b["h2d_pageable"], b["count"]) == (1024, 500, 7, 3, 24, 5)
    assert agreement({"h2d": 1030, "d2h": 500, "p2p": 7}, b)["h2d"] < 0.01
    if not torch.cuda.is_available():
        ran = []
        r = measure_memcpy_bytes(lambda: ran.append(1))
        assert ran == [1] and r["h2d"] is None and r["source"].startswith("unavailable")


def test_device_script_records_a_sigkilled_candidate_as_oom(tmp_path):
    """experiments/device/baselines_gpu.sh on the CPU, with `timeout` replaced by one that SIGKILLs the
    baseline (as the kernel's OOM killer does when host memory runs out): the candidate still leaves an
    `oom` run record, picked as the system's record, instead of a lost result."""
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "timeout").write_text('#!/bin/bash\nshift; "$@" & pid=$!; sleep 1; kill -9 $pid; wait $pid\n')
    (fake / "timeout").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{Path(sys.executable).parent}:{os.environ['PATH']}", "DEVICE": "cpu",
           "MODEL": "gpt2-tiny", "D": "8", "SYSTEMS": "fsdp-offload", "FSDP_UBATCH": "4", "PRECISION": "fp32",
           "CAP": "", "PYTHONPATH": str(root)}
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(root / "experiments/device/baselines_gpu.sh"), str(out)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "killed by SIGKILL" in p.stdout
    rec = json.loads((out / "fsdp-offload.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "oom" and rec["killed_rc"] == 137 and rec["ubatch"] == 4
    assert rec["ubatch_search"][0]["status"] == "oom" and rec["env"]["precision"] == "fp32"


def test_infeasible_only_when_the_lower_bound_says_so():
    """The profile's memory rule over-counts GPT2-XL's LM head + loss pack at u=16 (13.2 GiB; the run on the
    H100 peaked at 9.8 GiB under an 11 GiB cap): swap-dp must still try it, as its best setting may be
    there. Infeasible is reserved for packs that the lower bound already puts over the cap, and it names
    the pack that will run (the loss pack, not the head alone)."""
    from pathlib import Path
    from baselines.common import Infeasible
    from harmony.schedule.memory import LayerCosts
    d = Path(__file__).resolve().parents[1] / "results/paper/1xH100-80GB-HBM3/profiles"
    mj = json.loads((d / "gpt2-xl.model.json").read_text())
    prof = json.loads((d / "gpt2-xl.profile.json").read_text())
    cap = 11 * 2**30
    assert LayerCosts(prof).task_bytes("BWD", 50, 52, 16, 16) > cap            # the profile's rule says no
    cfg = swap_dp_config(mj, 16, 1, 16, cap=cap, profile=prof)                  # ... but it is tried
    assert cfg.bwd_packs[-1] == (50, 52)
    with pytest.raises(Infeasible, match=r"pack of vLayers \[50,52\) needs at least"):
        swap_dp_config(mj, 64, 1, 64, cap=cap, profile=prof)                    # logits alone: 13 GB at u=64


def _host_memory_search(monkeypatch, tmp_path, system: str, host_bytes: int, infeasible_from: int):
    """A microbatch search of `system` on mlp-tiny (u = 1..16, starting at u = 4) whose runs are faked: every u
    from `infeasible_from` up is infeasible for host memory, a smaller one trains (a larger u faster), on a
    host with `host_bytes` available. (the candidates run, the final record's search)"""
    import baselines.cli as bcli
    from harmony.metrics import IterationRecord
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(host_bytes))
    ran = []

    def fake_run_one(s):
        ran.append(s.ubatch)
        w = RunWriter(s, "mlp-tiny")
        if s.ubatch >= infeasible_from:
            return w.summary("infeasible", "host memory too small: the run needs 9 bytes",
                             infeasible_reason="host-memory")
        for i in range(2):
            w.iteration(IterationRecord(iteration=i, time_s=4.0 / s.ubatch, samples_per_s=4.0 * s.ubatch, loss=1.0))
        return w.summary("ok", warmup=1)
    monkeypatch.setattr(bcli, "run_one", fake_run_one)
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", system, "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--iters", "2", "-o", str(out)]) == 0
    return ran, read_jsonl(out)[-1]


@pytest.mark.parametrize("system", ["swap-dp", "swap-pp"])
def test_climb_stops_below_a_host_memory_infeasible_candidate_only_if_the_next_u_is_forecast_not_to_fit(
        tmp_path, monkeypatch, system):
    """A candidate infeasible because the host arena does not fit ends the search only when the next u down is
    forecast (its own graph's arena) not to fit either; then the smaller u are listed as not tried with that
    forecast instead of each paying a set-up to fail the same way (H100 swap-pp resnet1026 D=1024: about a
    minute per candidate)."""
    ran, summary = _host_memory_search(monkeypatch, tmp_path, system, host_bytes=1, infeasible_from=4)
    assert ran == [4]
    search = summary["ubatch_search"]
    assert [x["status"] for x in search] == ["not tried", "not tried", "infeasible", "not tried", "not tried"]
    assert "u=2 would need" in search[0]["message"] and "of the 1 B available" in search[1]["message"]


@pytest.mark.parametrize("system", ["swap-dp", "swap-pp"])
def test_climb_goes_on_below_a_host_memory_infeasible_candidate_when_the_next_u_fits(tmp_path, monkeypatch, system):
    """The premise that a smaller u needs as much host memory is false for both swap baselines (swap-pp VGG416
    D = 256 at N = 2: u = 16 infeasible, u = 4 fits; the next test): when the forecast says the next u down
    fits, the search tries it and goes on down while faster."""
    ran, summary = _host_memory_search(monkeypatch, tmp_path, system, host_bytes=2**50, infeasible_from=4)
    assert ran == [4, 2, 1]         # u = 2 ran; u = 1, slower, ends the climb
    search = {x["ubatch"]: x["status"] for x in summary["ubatch_search"]}
    assert summary["status"] == "ok" and summary["ubatch"] == 2
    assert search[4] == "infeasible" and search[2] == search[1] == "ok"


def test_a_system_without_a_graph_tries_below_a_host_memory_infeasible_candidate(tmp_path, monkeypatch):
    """A baseline whose host memory cannot be forecast (no task graph: resident here) tries the smaller u."""
    ran, _ = _host_memory_search(monkeypatch, tmp_path, "resident", host_bytes=1, infeasible_from=4)
    assert ran == [4, 2, 1]


def test_swap_pp_needs_less_host_memory_at_a_smaller_u_when_its_stages_fit():
    """The committed fact that ended the old premise: swap-pp VGG416 D = 256 on 2x H200's model and profile stashes
    every vLayer's input at u = 16 (the stages swap layer by layer) and only each stage's at u = 4 (they fit
    the 11 GiB cap): 491 GiB of host arena against 12.5 (the host has about 250)."""
    from baselines.predicted_start import host_need_of
    root = os.path.join(os.path.dirname(__file__), "..", "results", "paper", "2xH200")

    def need(u):
        return host_need_of(Settings(system="swap-pp", model=os.path.join(root, "models", "vgg416.json"), minibatch=256,
                                     gpus=2, ubatch=u, gpu_memory_cap=11 * 2**30,
                                     profile=os.path.join(root, "profiles", "vgg416.json")))
    assert need(16) > 400 * 2**30 > 250 * 2**30 > 20 * 2**30 > need(4)
    assert host_need_of(Settings(system="resident", model="mlp-tiny", minibatch=16)) is None


@pytest.mark.parametrize("system", ["swap-dp", "swap-pp"])
def test_a_finished_candidates_settings_still_forecast_its_host_need(tmp_path, system):
    """A run records its pack count in its Settings' extra; the packing it was asked for must survive that,
    since the search asks a finished candidate's host need afterwards (no_lower below a host-infeasible u).
    The count once overwrote the request, and swap-dp VGG416 D = 256's search on one H200 ended in
    `packing 417: use one of ('layer', 'fit')` after its candidates had run (h200n1-8)."""
    from baselines.cli import run_one
    from baselines.predicted_start import host_need_of

    def settings():       # a cap under which one pack per vLayer ("layer") and "fit" packs differ
        return Settings(system=system, model="mlp-tiny", minibatch=8, ubatch=2, iters=1, warmup=0,
                        gpu_memory_cap=128 * 1024, output=str(tmp_path / f"{system}.jsonl"))
    before = host_need_of(settings())
    s = settings()
    assert run_one(s)["status"] == "ok"
    assert isinstance(s.extra["packs"], int)          # the count the record reports ...
    assert host_need_of(s) == before                  # ... leaves the packing request as it was


def test_packs_option_picks_the_swap_baselines_packing_and_names_its_misuse(tmp_path, capsys):
    """`--packs fit` packs a stage that does not fit the cap whole into the longest packs that do, where the
    default gives one vLayer a pack; the record says which. swap-dp's fit needs --profile, and a system
    without packs refuses the option, each with a message that names the fix."""
    def run(system, packs, *more):
        out = tmp_path / f"{system}-{packs}.jsonl"
        rc = harmony_main(["baseline", system, "mlp-tiny", "--minibatch", "8", "--ubatch", "2", "--iters", "1",
                           "--warmup", "0", "--gpu-memory", "128KiB", "--packs", packs, *more, "-o", str(out)])
        return rc, (read_jsonl(out)[-1] if out.exists() else None)
    rc, layer = run("swap-pp", "layer")
    assert rc == 0 and layer["settings"]["packing"] == "layer" and layer["settings"]["packs"] == 9
    rc, fit = run("swap-pp", "fit")
    assert rc == 0 and fit["settings"]["packing"] == "fit" and fit["settings"]["packs"] == 2
    capsys.readouterr()
    for system, message in (("swap-dp", "--packs fit needs --profile"), ("resident", "for swap-dp and swap-pp")):
        rc, rec = run(system, "fit")
        assert rc != 0 and message in capsys.readouterr().err, system


def test_climb_stops_at_an_over_time_candidate_and_the_point_is_over_time(tmp_path, monkeypatch):
    """An over-time candidate (it had a whole call and timed no iteration) ends the climb down, since a
    smaller u moves the weights more often and runs slower still (zero-offload resnet1026 D=1024 u=16,
    h100-grid42, where u=8 was left for a next call instead). With no candidate ok the point's record is the
    over-time one, and neither it nor the figure row gives its warm-up as a rate."""
    import baselines.cli as bcli
    from harmony.figures import measured_row
    from harmony.metrics import IterationRecord
    ran = []

    def fake_run_one(s):
        ran.append(s.ubatch)
        w = RunWriter(s, "mlp-tiny")
        w.iteration(IterationRecord(iteration=0, time_s=415.0, samples_per_s=16 / 415.0, loss=1.0))
        return w.summary("over-time", "iteration 1 would end after HARMONY_DEADLINE", warmup=1)
    monkeypatch.setattr(bcli, "run_one", fake_run_one)
    out = tmp_path / "r.jsonl"
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--iters", "2", "-o", str(out)]) == 0
    assert ran == [4]
    summary = read_jsonl(out)[-1]
    assert summary["status"] == "over-time" and summary["iter_time_s"] is None and summary["samples_per_s"] is None
    search = summary["ubatch_search"]
    assert [x["status"] for x in search] == ["not tried", "not tried", "over-time", "not tried", "not tried"]
    assert "whole device call" in search[0]["message"]
    # a record written before make_summary knew over-time (h100-grid42's) gave its warm-up as the rate
    row = measured_row({}, {**summary, "iter_time_s": 415.0, "samples_per_s": 0.0386}, str(out))
    assert row["status"] == "over-time" and row["samples_per_s"] is None and row["iter_time_s"] is None


def fake_clock(monkeypatch) -> dict:
    """A clock the search (baselines.cli) and the runs' own deadline check (harmony.jsonio.seconds_left)
    both read: {"t": seconds since the epoch}, advanced by the test."""
    import baselines.cli as bcli
    import harmony.jsonio as jsonio
    clock = {"t": 1000.0}

    class FakeTime:
        def time(self):
            return clock["t"]

        def perf_counter(self):
            return clock["t"]
    monkeypatch.setattr(bcli, "time", FakeTime())
    monkeypatch.setattr(jsonio, "time", FakeTime())
    return clock


def test_search_leaves_a_candidate_that_would_outlast_the_deadline(tmp_path, monkeypatch, capsys):
    """With $HARMONY_DEADLINE (the device call's end), the search does not start a candidate that, costing
    what its nearest tried neighbour cost, would end after it: it exits DEFERRED_EXIT with no record, and the
    next call's search reads back what finished and goes on (h100-grid9 lost 5 minutes to a killed one)."""
    import baselines.cli as bcli
    from harmony.jsonio import DEFERRED_EXIT
    clock = fake_clock(monkeypatch)
    ran, real = [], bcli.run_one

    def slow(s):                      # each candidate "takes" 60 s
        ran.append(s.ubatch)
        clock["t"] += 60
        return real(s)
    monkeypatch.setattr(bcli, "run_one", slow)
    monkeypatch.setenv("HARMONY_DEADLINE", "1100")
    out = tmp_path / "r.jsonl"
    args = ["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16", "--iters", "2",
            "-o", str(out)]
    assert harmony_main(args) == DEFERRED_EXIT
    assert ran == [4] and not out.exists() and (tmp_path / "r.u4.jsonl").exists()
    assert "u=8 would take about 60 s" in capsys.readouterr().err
    monkeypatch.delenv("HARMONY_DEADLINE")
    assert harmony_main(args) == 0 and out.exists()
    assert ran[0] == 4 and 4 not in ran[1:] and ran[1] == 8       # u=4 read back, the climb went on at u=8
    monkeypatch.setenv("HARMONY_DEADLINE", "soon")
    with pytest.raises(ValueError, match="HARMONY_DEADLINE"):
        bcli.seconds_left()      # what the search reads the deadline with


def test_cli_search_resumes_from_finished_candidates(tmp_path, monkeypatch, capsys):
    """A microbatch search cut short (a device call ends mid-search) goes on where it stopped: candidates
    whose record files hold a finished run of the same settings are read back, not run again; a record of
    other settings (here: other iterations) or an error record is run again."""
    import baselines.cli as bcli
    out = tmp_path / "r.jsonl"
    args = ["baseline", "resident", "mlp-tiny", "--minibatch", "8", "--ubatch", "2,4", "--iters", "2",
            "-o", str(out)]
    assert harmony_main(args) == 0
    first = read_jsonl(out)[-1]
    ran = []
    real = bcli.run_one
    monkeypatch.setattr(bcli, "run_one", lambda s: ran.append(s.ubatch) or real(s))
    out.unlink()
    assert harmony_main(args) == 0
    assert ran == [] and "already on record" in capsys.readouterr().err
    assert read_jsonl(out)[-1]["ubatch"] == first["ubatch"]
    # an error record of u=2 and a u=4 record of 3 iterations: both run again with --iters 2
    u2, u4 = tmp_path / "r.u2.jsonl", tmp_path / "r.u4.jsonl"
    rec = read_jsonl(u2)[-1]
    u2.write_text(json.dumps({**rec, "status": "error"}) + "\n")
    rec = read_jsonl(u4)[-1]
    u4.write_text(json.dumps({**rec, "iterations": 3}) + "\n")
    assert harmony_main(args) == 0
    assert sorted(ran) == [2, 4]
    # an oom at iteration 0 stands (the configuration's outcome, whatever --iters is); an unavailable
    # record (the machine lacked a package) runs again (x2-grid31 ran an oom u=32 a second time)
    rec = read_jsonl(u2)[-1]
    u2.write_text(json.dumps({**rec, "status": "oom", "iterations": 0, "samples_per_s": None}) + "\n")
    rec = read_jsonl(u4)[-1]
    u4.write_text(json.dumps({**rec, "status": "unavailable", "iterations": 0}) + "\n")
    ran.clear()
    assert harmony_main(args) == 0
    assert ran == [4] and read_jsonl(out)[-1]["ubatch"] == 4


def test_search_estimates_a_candidate_by_its_nearest_neighbour_below(tmp_path, monkeypatch, capsys):
    """The deadline estimate of a candidate is what the nearest candidate below it in u cost, not the costliest
    so far: going up from a slow small u past a faster one, the search starts the next candidate when the
    faster neighbour's cost fits (h100-grid26 left fsdp-offload bert96 D=256's u=64 for u=16's cost)."""
    import baselines.cli as bcli
    from harmony.jsonio import DEFERRED_EXIT
    clock = fake_clock(monkeypatch)
    cost = {4: 90.0, 8: 40.0, 16: 40.0}          # u=4 is slow, the larger u cost less
    ran, real = [], bcli.run_one

    def timed(s):
        ran.append(s.ubatch)
        clock["t"] += cost[s.ubatch]
        rec = real(s)
        rec["samples_per_s"] = s.ubatch * 1.0     # each step up is faster: the climb goes on up
        return rec
    monkeypatch.setattr(bcli, "run_one", timed)
    monkeypatch.setenv("HARMONY_DEADLINE", str(1000 + 95 + 90))   # 95 s left after u=4, 55 after u=8
    out = tmp_path / "r.jsonl"
    args = ["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16", "--iters", "2",
            "-o", str(out)]
    assert harmony_main(args) == 0 and out.exists()
    assert ran == [4, 8, 16]                      # u=16 estimated at u=8's 40 s, not u=4's 90 s
    clock["t"] = 1000.0
    cost[8] = 60.0                                # now 35 s are left after u=8, less than its 60 s
    for f in tmp_path.glob("r*.jsonl"):
        f.unlink()
    ran.clear()
    assert harmony_main(args) == DEFERRED_EXIT
    assert ran == [4, 8] and "u=16 would take about 60 s" in capsys.readouterr().err


def test_search_does_not_leave_a_candidate_the_host_will_refuse(tmp_path, monkeypatch, capsys):
    """A candidate whose host arena is over the host's memory is refused by the run's host check in seconds,
    so the search runs it (records `infeasible`) however long its neighbour took, instead of leaving it and
    the rest of the search for the next call (swap-pp VGG416 D = 256's u = 4 waited a call for a refusal,
    h200n1-6). A candidate that fits is still left when its neighbour's cost does not fit."""
    import baselines.cli as bcli
    from baselines.predicted_start import candidates
    from harmony.jsonio import DEFERRED_EXIT, write_json
    from harmony.metrics import IterationRecord
    from harmony.schedule.synthetic import synthetic_calibration, synthetic_profile
    _, mj = load_model("mlp-tiny")
    cal = synthetic_calibration("paper")
    prof = synthetic_profile(mj, cal, ubatch_sizes=(2, 4))
    for name, obj in (("model", mj), ("profile", prof), ("calibration", cal)):
        write_json(tmp_path / f"{name}.json", obj)
    need = {c.ubatch: c.host_bytes for c in candidates("swap-dp", mj, 16, 1, [2, 4], cap=None, profile=prof,
                                                        calibration=cal, host_bytes=None)}
    assert need[4] > need[2]          # swap-dp stashes more at the larger u: a host can hold u=2 and not u=4
    clock = fake_clock(monkeypatch)
    ran = []

    def fake_run_one(s):           # u=2 takes 60 s; u=4 is what the host check makes of it
        ran.append(s.ubatch)
        if s.ubatch == 2:
            clock["t"] += 60
        from harmony.runtime.host_store import host_available_bytes
        w = RunWriter(s, "mlp-tiny")
        if s.ubatch == 4 and need[4] > host_available_bytes():
            return w.summary("infeasible", warmup=1, message="host memory too small")
        for i in range(2):
            w.iteration(IterationRecord(iteration=i, time_s=1.0, samples_per_s=16.0 * s.ubatch, loss=1.0))
        return w.summary("ok", warmup=1)
    monkeypatch.setattr(bcli, "run_one", fake_run_one)
    monkeypatch.setenv("HARMONY_DEADLINE", str(1000 + 60 + 30))    # 30 s left after u=2
    args = ["baseline", "swap-dp", str(tmp_path / "model.json"), "--minibatch", "16", "--ubatch", "2,4",
            "--profile", str(tmp_path / "profile.json"), "--calibration", str(tmp_path / "calibration.json"),
            "--iters", "2", "--ubatch-start", "2"]
    # a host that holds both: u=4 costs u=2's 60 s, more than the 30 s left, so it is left
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(max(need.values())))
    assert harmony_main([*args, "-o", str(tmp_path / "fits.jsonl")]) == DEFERRED_EXIT
    assert ran == [2] and "u=4 would take about 60 s" in capsys.readouterr().err
    # a host that holds u=2's arena and not u=4's: u=4 is run (refused) in this call and the search ends
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(need[2]))
    ran.clear()
    clock["t"] = 1000.0
    assert harmony_main([*args, "-o", str(tmp_path / "over.jsonl")]) == 0
    assert ran == [2, 4]
    search = {x["ubatch"]: x["status"] for x in read_jsonl(tmp_path / "over.jsonl")[-1]["ubatch_search"]}
    assert search == {2: "ok", 4: "infeasible"}


def test_resident_draws_its_initial_weights_on_the_cpu_whatever_its_device(monkeypatch):
    """resident builds the model on the CPU and moves it: built on the GPU, the seed's draws were the GPU
    generator's, and mlp-tiny's first loss came out 6.7% off train_reference's (x2-correct1,
    tests/test_baselines_gpu.py). The meta device stands in for the GPU here: nothing is computed."""
    spec, _ = load_model("mlp-tiny")
    built_on, build = [], spec.build
    monkeypatch.setattr(spec, "build", lambda device="cpu", seed=0: built_on.append(str(device)) or build(device, seed))
    s = Settings(system="resident", model="mlp-tiny", minibatch=D, ubatch=D, iters=ITERS)
    layers, _ = resident.make_step(s, spec, torch.device("meta"))
    assert built_on == ["cpu"]
    assert all(p.device.type == "meta" for p in layers.parameters())


def test_a_baseline_the_calls_end_stops_prints_where_it_sat(tmp_path):
    """A device call's end sends SIGTERM to the job list's process group; a baseline (here resident on the
    CPU, one process) then prints every thread's stack to its log before it dies, as harmony run does."""
    import signal
    import subprocess
    import time
    cmd = [sys.executable, "-m", "harmony.cli", "baseline", "resident", "mlp-tiny", "--minibatch", "8",
           "--iters", "100000", "--device", "cpu", "-o", str(tmp_path / "r.jsonl")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in p.stderr:                  # its iterations have begun
        if "iteration 1:" in line:
            break
    time.sleep(0.2)
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM and "most recent call first" in err, err[-2000:]


@pytest.mark.parametrize("call_began_s_ago", [5.0, 200.0])
def test_the_calls_end_leaves_a_searchs_finished_candidates_standing(tmp_path, monkeypatch, call_began_s_ago):
    """SIGTERM (the device call's end) while a search's candidate runs: the search decides what it leaves
    and exits DEFERRED_EXIT without a search record. A candidate that began as its call did is recorded
    over-time (its warm-up line kept), one begun later leaves nothing; either way the next call's search
    goes on from the candidates on record and ends at the fastest. Before, the guard recorded the whole
    search over-time and hid u=16's 5.13 samples/s (zero-offload resnet1026 D=256, x2-grid29)."""
    import os
    import signal
    import time as _time

    import baselines.cli as bcli
    from harmony.jsonio import DEFERRED_EXIT, partial_path
    from harmony.metrics import IterationRecord
    monkeypatch.setenv("HARMONY_CALL_S", "300")
    monkeypatch.setenv("HARMONY_DEADLINE", str(_time.time() + 300 - call_began_s_ago))
    ran = []

    def fake_run_one(s):
        ran.append(s.ubatch)
        w = RunWriter(s, "mlp-tiny")
        first = IterationRecord(iteration=0, time_s=4.0 / s.ubatch, samples_per_s=4.0 * s.ubatch, loss=1.0)
        if s.ubatch == 8:      # the call ends during its warm-up (a line as the runtime writes it, more fields)
            w._w.write({**first.to_json(), "task_issued": [1.0]})
            os.kill(os.getpid(), signal.SIGTERM)
            _time.sleep(10)
            raise AssertionError("SIGTERM did not stop the candidate")
        w.iteration(first)
        w.iteration(IterationRecord(iteration=1, time_s=4.0 / s.ubatch, samples_per_s=4.0 * s.ubatch, loss=1.0))
        return w.summary("ok", warmup=1)
    monkeypatch.setattr(bcli, "run_one", fake_run_one)
    out = tmp_path / "r.jsonl"
    argv = ["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16", "--ubatch-start", "4",
            "--iters", "2", "-o", str(out)]
    assert harmony_main(argv) == DEFERRED_EXIT and ran == [4, 8]
    assert not out.exists() and signal.getsignal(signal.SIGTERM) is not bcli._raise_call_ended
    u8 = tmp_path / "r.u8.jsonl"
    assert not partial_path(u8).exists()
    if call_began_s_ago < 60:
        recs = read_jsonl(u8)
        assert [r["record"] for r in recs] == ["iteration", "summary"] and recs[-1]["status"] == "over-time"
        assert recs[-1]["ubatch"] == 8 and recs[-1]["call_window_s"] == 300.0
        assert "began 5 s into its call's 300 s" in recs[-1]["message"]
    else:
        assert not u8.exists()
    monkeypatch.delenv("HARMONY_DEADLINE")
    monkeypatch.delenv("HARMONY_CALL_S")
    ran.clear()
    if call_began_s_ago >= 60:           # the next call runs u=8 from its start: here, without a stop
        monkeypatch.setattr(bcli, "run_one", lambda s: (ran.append(s.ubatch), RunWriter(s, "mlp-tiny").summary(
            "oom", "CUDA out of memory"))[1] if s.ubatch == 8 else fake_run_one(s))
    assert harmony_main(argv) == 0
    summary = read_jsonl(out)[-1]
    assert summary["status"] == "ok" and summary["ubatch"] == 4
    statuses = {x["ubatch"]: x["status"] for x in summary["ubatch_search"]}
    assert statuses[4] == "ok" and statuses[8] == ("over-time" if call_began_s_ago < 60 else "oom")
    assert ran == ([2] if call_began_s_ago < 60 else [8, 2])


def test_a_candidate_the_calls_end_stopped_after_timed_iterations_is_recorded_ok_cut_short(tmp_path):
    """record_call_end: iterations past the warm-up are a result (ok, cut short by the call's end); only
    the warm-up is over-time. Torn last lines are skipped."""
    import json

    from baselines.common import record_call_end
    from harmony.jsonio import partial_path
    out = tmp_path / "r.u4.jsonl"
    s = Settings(system="resident", model="mlp-tiny", minibatch=8, ubatch=4, iters=4, output=str(out))
    lines = [json.dumps({"record": "iteration", "iteration": i, "time_s": t, "samples_per_s": 8 / t, "loss": 1.0})
             for i, t in enumerate((9.0, 2.0, 2.2))]
    partial_path(out).write_text("\n".join(lines) + '\n{"record": "itera')
    rec = record_call_end(s, "mlp-tiny", "it began 1 s into its call's 585 s")
    validate_summary(rec)
    assert rec["status"] == "ok" and rec["iterations"] == 3 and rec["iter_time_s"] == pytest.approx(2.1)
    assert "stopped after iteration 2 by the device call's end" in rec["cut_short"]
    assert read_jsonl(out)[-1] == rec and not partial_path(out).exists()


def test_one_ranks_oom_ends_a_two_rank_run_as_oom_instead_of_hanging(tmp_path):
    """Rank 1 runs out of memory in iteration 1 while rank 0 goes on into that iteration's collectives. The
    failed rank must not go on to the loop's own gathers (its peer waits in another collective: zero-offload
    gpt2-xl D=256 u=4 sat silent after iteration 2 for the rest of x2-grid34): its process ends, torch's
    spawn ends the other, and the parent records the run oom with the rank's message, in seconds. The OOM
    comes from tests/inject/sitecustomize.py, on the ranks' PYTHONPATH."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tests, "inject"), os.path.dirname(tests)]),
               FAIL_RANK="1", FAIL_AT_BACKWARD="3")      # u = 2 of a share of 4: iteration 1's first microbatch
    out = tmp_path / "run.jsonl"
    import subprocess
    proc = subprocess.run([sys.executable, "-m", "harmony.cli", "baseline", "fsdp-offload", "mlp-tiny",
                           "--minibatch", str(D), "--gpus", "2", "--ubatch", "2", "--iters", "4", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=240)
    rec = read_jsonl(out)[-1]
    assert rec["status"] == "oom", (rec, proc.stderr[-2000:])
    assert "rank 1" in rec["message"] and "iteration 1" in rec["message"] and "injected" in rec["message"], rec


def test_a_rank_whose_iteration_fails_raises_instead_of_going_on_to_the_gathers(tmp_path, monkeypatch):
    """In a system of ranks (gather set) a failed iteration ends the rank's loop with RankFailed, which
    carries the status the record gets; a single process (no gather) still records it and returns."""
    from baselines.common import RankFailed

    def step(i, b):
        if i == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return 1.0
    with pytest.raises(RankFailed) as failed:
        _two_rank_loop(tmp_path, monkeypatch, [1e9] * 20, [None, None], step=step)
    assert failed.value.status == "oom" and failed.value.message.startswith("rank ?, iteration 1: CUDA out of")
    s = Settings(system="fsdp-offload", model="mlp-tiny", minibatch=4, iters=3, output=str(tmp_path / "one.jsonl"))
    summary = train_loop(s, RunWriter(s, "mlp-tiny"), step, [()] * 3, devices=[torch.device("cpu")])
    assert summary["status"] == "oom" and summary["iterations"] == 1


def test_a_ranks_stalled_iteration_prints_its_stacks(tmp_path, monkeypatch, capfd):
    """A rank's iteration past its stall limit dumps every thread's stack to the log and goes on; the
    watch is cancelled when the loop ends, so nothing is printed after it."""
    import time

    import baselines.common as bc
    monkeypatch.setattr(bc, "FIRST_ITERATION_STALL_S", 0.2)
    monkeypatch.setattr(bc, "STALL_MIN_S", 0.2)
    summary = _two_rank_loop(tmp_path, monkeypatch, [1e9] * 3, [None, None],
                             step=lambda i, b: time.sleep(0.5 if i == 0 else 0.0) or 1.0)
    assert summary["status"] == "ok" and summary["iterations"] == 3
    err = capfd.readouterr().err
    assert err.count("Timeout (0:00:00.200000)!") == 1 and "most recent call first" in err, err[-1500:]
    time.sleep(0.5)
    assert "Timeout" not in capfd.readouterr().err


def _oom_in_rank_1_while_rank_0_waits(rank: int) -> None:
    """A spawned rank's entry for the test below (module level: the spawned ranks import it by name)."""
    import time
    if rank == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    time.sleep(120)          # rank 0: as if it waited in a collective for rank 1


def test_a_ranks_exception_outside_the_loop_ends_the_spawn_with_its_status():
    """An exception anywhere in a spawned rank (building the model, say) ends that rank at once with the
    status its record gets, and torch's spawn ends the peer instead of waiting for it."""
    import time

    from baselines.common import RankFailed
    from baselines.ranks import spawn_ranks
    t0 = time.monotonic()
    with pytest.raises(RankFailed) as failed:
        spawn_ranks(_oom_in_rank_1_while_rank_0_waits, (), 2)
    assert failed.value.status == "oom"
    assert failed.value.message.startswith("rank 1, OutOfMemoryError: CUDA out of memory"), failed.value.message
    assert time.monotonic() - t0 < 60, "the waiting rank was waited for, not ended"


def test_ubatch_start_predicted_starts_the_climb_at_the_fastest_candidate_that_fits(tmp_path, monkeypatch, capsys):
    """`--ubatch-start predicted` (docs/performance.md entry 88): swap-pp's climb begins at the candidate
    Harmony's simulator predicts fastest among those that fit the host, not at the middle one. The host is
    set just under the largest u's need (swap-dp's arena grows with u), so the fastest prediction is refused
    for host memory and the start is the next one; the summary keeps every candidate's prediction. A system
    without a task graph, or no profile, falls back to the middle and says why."""
    import baselines.cli as bcli
    from baselines.predicted_start import candidates, fastest_fitting
    from harmony.jsonio import write_json
    from harmony.metrics import IterationRecord
    from harmony.schedule.synthetic import synthetic_calibration, synthetic_profile
    _, mj = load_model("mlp-tiny")
    cal = synthetic_calibration("paper")
    prof = synthetic_profile(mj, cal, ubatch_sizes=(1, 2, 4, 8, 16))
    write_json(tmp_path / "model.json", mj)
    write_json(tmp_path / "profile.json", prof)
    write_json(tmp_path / "calibration.json", cal)
    us = [1, 2, 4, 8, 16]
    free = candidates("swap-dp", mj, 16, 1, us, cap=None, profile=prof, calibration=cal, host_bytes=None)
    fastest = fastest_fitting(free)
    host = min(c.host_bytes for c in free if c.ubatch == fastest.ubatch) - 1
    assert host > 0
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(host))
    expected = fastest_fitting(candidates("swap-dp", mj, 16, 1, us, cap=None, profile=prof, calibration=cal,
                                          host_bytes=host))
    assert expected is not None and expected.ubatch != fastest.ubatch
    ran = []

    def fake_run_one(s):
        ran.append(s.ubatch)
        w = RunWriter(s, "mlp-tiny")
        for i in range(2):        # the start is the peak: each neighbour is slower
            rate = 100.0 / (1 + abs(s.ubatch.bit_length() - expected.ubatch.bit_length()))
            w.iteration(IterationRecord(iteration=i, time_s=16 / rate, samples_per_s=rate, loss=1.0))
        return w.summary("ok", warmup=1)
    monkeypatch.setattr(bcli, "run_one", fake_run_one)
    out = tmp_path / "r.jsonl"
    args = ["baseline", "swap-dp", str(tmp_path / "model.json"), "--minibatch", "16", "--ubatch", "1,2,4,8,16",
            "--profile", str(tmp_path / "profile.json"), "--calibration", str(tmp_path / "calibration.json"),
            "--iters", "2"]
    assert harmony_main([*args, "--ubatch-start", "predicted", "-o", str(out)]) == 0
    summary = read_jsonl(out)[-1]
    assert ran[0] == expected.ubatch and summary["ubatch_climb_start"] == expected.ubatch, ran
    assert summary["ubatch"] == expected.ubatch
    pred = {c["ubatch"]: c for c in summary["ubatch_start_prediction"]}
    assert sorted(pred) == us and "host arena" in pred[fastest.ubatch]["why_not"], pred
    assert f"the climb starts at u={expected.ubatch}" in capsys.readouterr().err
    # no task graph to simulate: the middle candidate, said so
    ran.clear()
    assert harmony_main(["baseline", "resident", "mlp-tiny", "--minibatch", "16", "--ubatch", "1,2,4,8,16",
                         "--iters", "2", "--ubatch-start", "predicted", "-o", str(tmp_path / "res.jsonl")]) == 0
    assert ran[0] == 4 and "starts at the middle candidate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        harmony_main([*args, "--ubatch-start", "soon", "-o", str(tmp_path / "x.jsonl")])
    assert e.value.code == 2 and "'soon': give a microbatch size or `predicted`" in capsys.readouterr().err
