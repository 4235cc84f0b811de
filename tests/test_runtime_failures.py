"""`harmony run` failure behaviour and the CLI/run record, on CPU worker processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harmony.jsonio import partial_path, read_jsonl
from harmony.metrics import validate_summary
from harmony.runtime import run_schedule, validate_against_model
from harmony.runtime.host_store import HostMemoryError
from harmony.schedule.io import save_schedule
from harmony.schedule.tasks import ScheduleError, count_bytes, layer_sizes_from_model

sys.path.insert(0, os.path.dirname(__file__))
from test_runtime import schedule  # noqa: E402


def _no_children_left():
    """No spawned worker (multiprocessing 'spawn_main' children) of this process is alive."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        kids = []
        for c in psutil.Process().children(recursive=True):
            try:
                if c.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(c.cmdline()):
                    kids.append(c)
            except psutil.NoSuchProcess:
                pass
        if not kids:
            return True
        time.sleep(0.1)
    return False


def test_schedule_for_another_model_is_refused_before_start():
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    bad = json.loads(json.dumps(rec))
    bad["model"]["vlayers"][1]["param_bytes"] += 4
    with pytest.raises(ScheduleError, match="another model"):
        validate_against_model(bad, g)
    _, rec2, g2 = schedule("gpt2-tiny", "vPP", 1, 2, 2, "P1")
    with pytest.raises(ScheduleError, match="vLayers"):
        validate_against_model(rec, g2)


def test_batch_dependent_layers_refuse_rechunking():
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 4, 2, "P1", dropout=0.1)
    with pytest.raises(ScheduleError, match="u_fwd=4 != u_bwd=2"):
        validate_against_model(rec, g)


def test_host_memory_too_small_is_refused_up_front(monkeypatch, tmp_path):
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", "10000")
    with pytest.raises(HostMemoryError, match=r"needs [0-9,]+ bytes .* but 10,000 bytes"):
        run_schedule(rec, g, iters=1)
    out = tmp_path / "run.jsonl"
    s = run_schedule(rec, g, iters=1, output=str(out))
    assert s["status"] == "infeasible" and "10,000 bytes" in s["message"]
    assert s["infeasible_reason"] == "host-memory"      # the baselines' climb stops on it
    assert read_jsonl(out)[-1]["status"] == "infeasible"


def test_a_run_the_host_refuses_is_recorded_not_left_for_the_next_call(monkeypatch, tmp_path):
    """A run whose predicted iterations outlast $HARMONY_DEADLINE but whose arena the host cannot hold is
    refused by the host check in seconds, before any set-up: it is recorded `infeasible` in this call, not
    left for the next as minutes of work (swap-pp VGG416 D = 256's u = 4, a 488 GiB arena on a 124 GiB host,
    was left as 550 s in h200n1-6). The same run on a host that holds it is still left."""
    from harmony.jsonio import Deferred
    from harmony.runtime import host_refuses
    from harmony.schedule.host_memory import arena_bytes, process_reserve_bytes
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    rec = dict(rec, prediction={"iter_time_s": 100.0})        # 4 iterations: far past the deadline below
    monkeypatch.setenv("HARMONY_DEADLINE", str(time.time() + 60))
    arena = arena_bytes(g, rec["model"]).total
    need = arena + process_reserve_bytes(1, arena)
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(need))
    assert not host_refuses(rec, g)
    with pytest.raises(Deferred, match="before HARMONY_DEADLINE"):
        run_schedule(rec, g, iters=4, output=str(tmp_path / "fits.jsonl"))
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(need - 1))
    assert host_refuses(rec, g)
    t0 = time.perf_counter()
    s = run_schedule(rec, g, iters=4, output=str(tmp_path / "over.jsonl"))
    assert s["status"] == "infeasible" and s["infeasible_reason"] == "host-memory"
    assert time.perf_counter() - t0 < 30 and s["iterations"] == 0


def test_the_host_check_holds_back_memory_for_the_runs_processes(monkeypatch, tmp_path):
    """An arena that fits host memory alone but not beside the run's processes is refused up front: swap-dp
    vgg416 D = 256 u = 64 on 2x H200 took 244 GiB of 249 available and the kernel killed a worker after a
    minute of set-up (docs/performance.md entry 60). The reserve is 2 GiB for each worker and the launcher."""
    from harmony.runtime.host_store import plan_layout
    from harmony.schedule.host_memory import process_reserve_bytes
    spec, rec, g = schedule("mlp-tiny", "vPP", 2, 2, 2, "P1")
    arena = plan_layout(spec.build("meta"), g, rec["model"], spec.optimizer.state_tensors_per_param()).total_bytes
    reserve = process_reserve_bytes(2, arena)      # 2 GiB and the arena's page tables for each of 3 processes
    assert reserve == 3 * 2 * 2**30 + int(3 * arena * 8 / 4096)
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(arena + reserve - 1))
    s = run_schedule(rec, g, iters=1, output=str(tmp_path / "over.jsonl"))
    assert s["status"] == "infeasible" and s["infeasible_reason"] == "host-memory"
    assert "worker reserve 6.00 GiB" in s["message"]
    monkeypatch.setenv("HARMONY_HOST_MEMORY_BYTES", str(arena + reserve))
    assert run_schedule(rec, g, iters=1, output=str(tmp_path / "fits.jsonl"))["status"] == "ok"


def test_a_worker_killed_by_sigkill_is_named_as_the_likely_host_oom(tmp_path):
    """A worker that dies of SIGKILL (exit -9) without a report: the record says what most likely sent it
    (the kernel's OOM killer) with the arena's size beside what was available, instead of the bare code."""
    _, rec, g = schedule("mlp-tiny", "vDP", 2, 2, 2, "P1")
    fwd = next(t for t in g.tasks if t.kind == "FWD" and t.rank == 0)
    s = run_schedule(rec, g, iters=2, output=str(tmp_path / "run.jsonl"), timeout_s=20,
                     fault={"kind": "crash", "rank": 0, "task": fwd.id, "iteration": 0, "signal": int(signal.SIGKILL)})
    assert s["status"] == "error" and "worker 0 exited with code -9" in s["message"]
    assert "out-of-memory killer" in s["message"] and "host arena took" in s["message"]
    assert _no_children_left()


def test_oom_in_a_task_names_it_and_ends_every_worker(tmp_path):
    _, rec, g = schedule("mlp-tiny", "vPP", 2, 2, 2, "P1")
    bwd = next(t for t in g.tasks if t.kind == "BWD" and t.rank == 1)
    out = tmp_path / "run.jsonl"
    t0 = time.monotonic()
    s = run_schedule(rec, g, iters=3, output=str(out), timeout_s=20,
                     fault={"kind": "oom", "rank": 1, "task": bwd.id, "iteration": 1})
    assert time.monotonic() - t0 < 60
    assert s["status"] == "oom"
    assert s["failure"]["task"] == bwd.id and s["failure"]["ubatch"] == 2
    assert f"task {bwd.id}" in s["message"] and "u=2" in s["message"]
    lines = read_jsonl(out)
    assert [l["record"] for l in lines] == ["iteration", "summary"]     # iteration 0 kept, marked summary
    assert _no_children_left()


def test_worker_crash_ends_every_process_and_keeps_the_partial_record(tmp_path):
    _, rec, g = schedule("mlp-tiny", "vDP", 2, 2, 2, "P1")
    fwd = next(t for t in g.tasks if t.kind == "FWD" and t.rank == 0)
    out = tmp_path / "run.jsonl"
    # delay_s: a process that dies a few microseconds after queueing its iteration-1 record can lose it in
    # its queue's feeder thread (a real crash can too); what is tested is that the launcher keeps what it got
    s = run_schedule(rec, g, iters=3, output=str(out), timeout_s=20,
                     fault={"kind": "crash", "rank": 0, "task": fwd.id, "iteration": 2, "delay_s": 1.0})
    assert s["status"] == "error" and "worker 0 exited with code 17" in s["message"]
    lines = read_jsonl(out)
    assert [l["record"] for l in lines] == ["iteration", "iteration", "summary"]
    assert _no_children_left()


@pytest.mark.serial  # timing-sensitive: run alone, not beside another worker
def test_a_stalled_run_ends_with_every_worker_threads_stack_in_its_log(tmp_path, capfd, monkeypatch):
    # every rank hangs in the same task, so no collective times out first: only the launcher's progress
    # watchdog (timeout_s + SETUP_MARGIN_S, here 1 + 4 s instead of 1 + 30) ends the run, and before it
    # does, the workers' stacks go to stderr
    import harmony.runtime.launch as launch_mod
    monkeypatch.setattr(launch_mod, "SETUP_MARGIN_S", 4.0)
    _, rec, g = schedule("mlp-tiny", "vDP", 2, 2, 2, "P1")
    s = run_schedule(rec, g, iters=2, output=str(tmp_path / "run.jsonl"), timeout_s=1,
                     fault={"kind": "hang", "iteration": 0})      # no rank, no task: each rank's first
    assert s["status"] == "error" and "no progress from the workers for 5 s" in s["message"], s["message"]
    assert "stack is in the log" in s["message"]
    err = capfd.readouterr().err
    assert "_fault_point" in err and "most recent call first" in err
    assert _no_children_left()


def test_the_stall_window_after_set_up_follows_the_predicted_iteration():
    from harmony.runtime.launch import STALL_MIN_S, iteration_stall_s
    assert iteration_stall_s({"timeout_s": 300}) == 330                  # no prediction: the set-up window
    assert iteration_stall_s({"timeout_s": 300, "predicted_iter_s": 6.7}) == STALL_MIN_S
    assert iteration_stall_s({"timeout_s": 300, "predicted_iter_s": 20.0}) == 200
    assert iteration_stall_s({"timeout_s": 100, "predicted_iter_s": 20.0}) == 130   # never longer than it


@pytest.mark.serial  # timing-sensitive: run alone, not beside another worker
def test_a_run_that_stalls_after_set_up_ends_after_its_predicted_window(tmp_path, monkeypatch):
    """Once every rank is ready, a hang ends after STALL_ITERATIONS predicted iterations (here a floor of
    2 s), not after timeout_s + 30 s (here 90 s): entry 111's deadlock at the GPU memory cap cost 330 s."""
    import harmony.runtime.launch as launch_mod
    from harmony.runtime import Prepared
    monkeypatch.setattr(launch_mod, "STALL_MIN_S", 2.0)
    _, rec, g = schedule("mlp-tiny", "vDP", 2, 2, 2, "P1")
    prep = Prepared(rec, g, iters=2, timeout_s=60, fault={"kind": "hang", "iteration": 0})
    # the CPU run gets no prediction (Prepared sets it on CUDA only); a GPU schedule's is set here
    assert prep.job["predicted_iter_s"] is None
    prep.job["predicted_iter_s"] = 0.01
    try:
        t0 = time.monotonic()
        out = launch_mod.launch(prep.job, 2)
        took = time.monotonic() - t0
    finally:
        prep.close()
    assert out.status == "error" and "no progress from the workers for 2 s" in out.message
    assert took < 45, took
    assert _no_children_left()


def _cli(tmp_path, rec, extra_env=None, iters=3, extra_args=(), new_group=False):
    sched = tmp_path / "schedule.json"
    save_schedule(sched, rec)
    out = tmp_path / "run.jsonl"
    env = dict(os.environ, **(extra_env or {}))
    cmd = [sys.executable, "-m", "harmony.cli", "run", str(sched), "--iters", str(iters), "--device", "cpu",
           "--warmup", "1", "-o", str(out), *extra_args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_group), out


def test_cli_run_record_and_counters(tmp_path):
    _, rec, g = schedule("gpt2-tiny", "vPP", 2, 4, 2, "P2")
    p, out = _cli(tmp_path, rec)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    lines = read_jsonl(out)
    its, summary = lines[:-1], lines[-1]
    validate_summary(summary)
    assert summary["status"] == "ok" and len(its) == 3 and summary["iter_time_s"] > 0
    want = count_bytes(g, layer_sizes_from_model(rec["model"]))
    assert summary["bytes_h2d"] == want["h2d"] and summary["bytes_d2h"] == want["d2h"]
    assert summary["bytes_p2p"] == want["p2p"] > 0
    assert summary["bytes_by_kind"] == {k: want[k] for k in summary["bytes_by_kind"]}
    assert summary["predicted_bytes"]["h2d_weights"] == want["h2d_weights"]
    assert summary["env"]["precision"] == "fp32" and summary["ubatch_fwd"] == 4
    # where each rank's host time went: the phases partition the rank's iteration (nothing else runs in
    # it but the loss read), every pack of the rank was stepped once, and the log prints a line per rank
    upd = [t for t in g.tasks if t.kind == "UPD"]
    grad_bytes = layer_sizes_from_model(rec["model"]).grad_bytes      # fp32: 4 bytes per trainable parameter
    rank_params = [sum(sum(grad_bytes[slice(*t.pack)]) // 4 for t in upd if t.rank == r) for r in range(2)]
    for it in its:
        assert len(it["host_phases"]) == 2
        for r, ph in enumerate(it["host_phases"]):
            spent = ph["issue_s"] + ph["sends_drain_s"] + ph["gpu_drain_s"] + ph["upd_drain_s"]
            assert 0.5 * it["rank_time_s"][r] <= spent <= it["rank_time_s"][r] + 1e-6
            assert 0 <= ph["flag_wait_s"] <= ph["issue_s"]
            assert ph["upd_steps"] == sum(1 for t in upd if t.rank == r)
            assert ph["upd_params"] == rank_params[r] > 0 and ph["upd_step_s"] > 0
    assert [ph["upd_steps"] for ph in summary["host_phases"]] == [sum(1 for t in upd if t.rank == r) for r in range(2)]
    assert err.count(" host: issue ") == 2, err
    # the host runs at most RUN_AHEAD tasks past the last finished one by default (entry 39)
    assert summary["run_ahead"] == 1 and err.count("run-ahead waits") == 2, err
    # the allocator's segments per stream exist only on a GPU (tests/test_runtime_gpu.py checks them there)
    assert summary["reserved_by_stream"] is None and "by stream" not in err
    # every worker's OpenMP threads wait passively unless the user says otherwise (performance log 19)
    assert summary["env"]["omp_wait_policy"] == os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    assert summary["update_threads"] == 2 and summary["worker_threads"] == max(1, (os.cpu_count() or 1) // 2)
    assert summary["load_buffers"] == "copy-stream" and summary["weight_copies"] == "per-vlayer"


def test_host_phases_count_the_host_gradient_adds_and_the_garbage_collector(tmp_path):
    # swap-dp at u < the rank's share sends each pack's dW once per microbatch group, and the host adds the
    # later groups into the first (grad_accumulate): host work beside the issue loop that entry 91 needs
    # counted. Every such task of a rank is one add a rank and iteration, each taking some time.
    from baselines.swap_dp import swap_dp_config
    from harmony.decompose import decompose_model
    from harmony.models import get_model
    from harmony.schedule.io import make_schedule_record
    from harmony.schedule.tasks import build_task_graph
    mj = decompose_model(get_model("gpt2-tiny"), source={"kind": "zoo", "name": "gpt2-tiny", "overrides": {}},
                         with_flops=False)
    g = build_task_graph(swap_dp_config(mj, 8, 2, 2), mj["num_vlayers"])
    adds = [sum(1 for t in g.tasks if t.grad_accumulate and t.rank == r) for r in range(2)]
    assert all(a > 0 for a in adds), adds
    p, out = _cli(tmp_path, make_schedule_record(mj, g))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    lines = read_jsonl(out)
    for it in lines[:-1]:
        for r, ph in enumerate(it["host_phases"]):
            assert ph["grad_adds"] == adds[r] and ph["grad_add_s"] > 0
            assert ph["gc_s"] >= 0 and ph["gc_collections"] >= ph["gc_gen2"] >= 0
            assert ph["gc_s"] <= it["rank_time_s"][r] + 1e-6
    assert err.count("gradient groups added on the host") == 2, err


def test_gc_clock_counts_a_full_collection_and_registers_once():
    import gc
    from harmony.runtime.gc_clock import GC_CLOCK
    GC_CLOCK.start().start()        # a second run in the same worker process starts it again
    try:
        assert sum(1 for c in gc.callbacks if getattr(c, "__self__", None) is GC_CLOCK) == 1
        GC_CLOCK.take()
        gc.collect()
        got = GC_CLOCK.take()
        assert got["gc_collections"] >= 1 and got["gc_gen2"] >= 1 and got["gc_s"] > 0
        assert GC_CLOCK.take()["gc_s"] < got["gc_s"]        # take() starts the count again
    finally:
        GC_CLOCK.stop()


def test_cli_run_thread_options(tmp_path):
    _, rec, g = schedule("gpt2-tiny", "vDP", 2, 4, 2, "P2")
    p, out = _cli(tmp_path, rec, {"OMP_WAIT_POLICY": "ACTIVE"}, extra_args=[
        "--update-threads", "1", "--worker-threads", "1", "--load-buffers", "compute-stream",
        "--weight-copies", "per-tensor", "--run-ahead", "none", "--allreduce", "overlap"])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    summary = read_jsonl(out)[-1]
    assert (summary["update_threads"], summary["worker_threads"]) == (1, 1)
    # --run-ahead none: no bound, recorded as null, and no waits to report (the default's are checked above;
    # on the CPU every copy has completed when it returns; tests/test_runtime_gpu.py runs the events)
    assert summary["run_ahead"] is None and all("run_ahead_wait_s" not in ph for ph in summary["host_phases"])
    assert "run-ahead waits" not in err, err
    assert summary["load_buffers"] == "compute-stream"        # recorded; on the CPU there is one pool anyway
    assert summary["weight_copies"] == "per-tensor"
    assert summary["allreduce"] == "overlap"        # recorded; on the CPU gloo's all-reduce blocks either way
    assert summary["env"]["omp_wait_policy"] == "ACTIVE"       # the user's setting wins
    p, out = _cli(tmp_path, rec, extra_args=["--update-threads", "0"])
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "--update-threads must be at least 1 (got 0)" in err, err
    p, out = _cli(tmp_path, rec, extra_args=["--trace-host-ops"])
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "--trace-host-ops adds CPU activity to the --memcpy-trace iteration: add " \
        "--memcpy-trace" in err, err
    p, out = _cli(tmp_path, rec, extra_args=["--run-ahead", "-1"])
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "'-1': give a number of tasks, 0 or more, or none (no bound)" in err, err
    with pytest.raises(ValueError, match="load_buffers 'shared': choose one of auto, copy-stream, compute-stream"):
        run_schedule(rec, g, iters=1, load_buffers="shared")
    with pytest.raises(ValueError, match="weight_copies 'one': choose one of per-tensor, per-vlayer"):
        run_schedule(rec, g, iters=1, weight_copies="one")
    with pytest.raises(ValueError, match="--run-ahead must be at least 0 tasks"):
        run_schedule(rec, g, iters=1, run_ahead=-1)
    with pytest.raises(ValueError, match="allreduce 'async': choose one of inline, overlap"):
        run_schedule(rec, g, iters=1, allreduce="async")
    # the search models the all-reduce the runtime runs by default: inline, which the A/B of
    # docs/performance.md entry 77 kept (a plan searched with one mode and run with the other is mispredicted)
    import argparse
    from harmony.runtime.cli import add_arguments
    from harmony.schedule.simulate import SimParams
    from harmony.schedule.tasks import DEFAULT_ALLREDUCE
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["x.json", "--iters", "1", "-o", "r.jsonl"]).allreduce == DEFAULT_ALLREDUCE
    assert SimParams.__dataclass_fields__["allreduce"].default == DEFAULT_ALLREDUCE == "inline"
    assert run_schedule(rec, g, iters=1, device="cpu")["allreduce"] == "inline"


@pytest.mark.parametrize("flag,mode,n", [("--deterministic", "vPP", 1), ("--ordered-reduce", "vDP", 2)])
def test_checking_flags_reach_the_workers_and_the_record(tmp_path, flag, mode, n):
    # --deterministic is a cuda setting (docs/performance.md entry 71); --ordered-reduce sums vDP's ranks in
    # rank order (entry 74), the same sum as the all-reduce's at N = 2 (two operands, one association), and
    # counts what an all-gather moves, (N - 1) x the gradients per rank: the ring's 2 (N - 1) / N at N = 2.
    # On the CPU each travels to the workers' job and into the record, and the training is the one a plain
    # run computes, bit for bit
    key = flag[2:].replace("-", "_")
    _, rec, g = schedule("gpt2-tiny", mode, n, 2, 2, "P2" if n == 1 else "P1")
    p, out = _cli(tmp_path, rec, extra_args=[flag])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    summary = read_jsonl(out)[-1]
    plain = run_schedule(rec, g, iters=3, device="cpu")
    assert summary[key] is True and plain[key] is False
    assert plain["losses"] == summary["losses"] and plain["bytes_allreduce"] == summary["bytes_allreduce"]
    assert (summary["bytes_allreduce"] > 0) is (mode == "vDP")
    from harmony.runtime import Prepared
    prep = Prepared(rec, g, iters=1, defer_weights=True, **{key: True})
    try:
        assert prep.job[key] is True
    finally:
        prep.close()


@pytest.mark.parametrize("sig,group", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm", "sigterm-to-the-group"])
def test_ctrl_c_ends_every_process_and_marks_the_record(tmp_path, sig, group):
    # "sigterm-to-the-group" is how `timeout` (a device call's budget) ends a run: workers get it too
    _, rec, g = schedule("mlp-tiny", "vPP", 2, 2, 2, "P1")
    p, out = _cli(tmp_path, rec, {"HARMONY_FAULT": json.dumps({"kind": "slow", "seconds": 0.05})}, iters=200,
                  new_group=group)
    partial = partial_path(out)            # records land there while the run goes on
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (partial.exists() and partial.read_text().count("\n") >= 1):
        time.sleep(0.1)
    assert p.poll() is None, "the run ended before its first record could be seen"
    workers = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    os.killpg(p.pid, sig) if group else p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:      # say who is left: the launcher, or a descendant holding our pipes
        left = []
        for pid in [p.pid, *workers]:
            try:
                q = psutil.Process(pid)
                left.append((pid, q.status(), " ".join(q.cmdline()[:4])))
            except psutil.Error:
                pass
        p.kill()
        pytest.fail(f"not ended 60 s after {sig.name}; launcher exit code {p.poll()}; still there: {left}")
    assert p.returncode == 130, err
    summary = read_jsonl(out)[-1]
    assert summary["record"] == "summary" and summary["status"] == "interrupted"
    # a time limit ends runs with SIGTERM: the log then says where each worker was (Ctrl-C stays quiet)
    if not group:       # (sent to the group, the workers may be gone before the launcher asks them)
        assert (sig == signal.SIGTERM) == ("stack at SIGTERM" in summary["message"])
    assert (sig == signal.SIGTERM) == ("most recent call first" in err)
    if not group:       # (sent to the group, every process writes its stack at once and lines interleave)
        assert (sig == signal.SIGTERM) == ("in launch_many" in err)    # the launcher's own stack too
    assert summary["iterations"] >= 1
    time.sleep(0.5)
    assert not [pid for pid in workers if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_a_grid_job_the_calls_end_stops_leaves_the_workers_stacks_in_its_log(tmp_path):
    """The device grid's case end to end: `python -m harmony.workflow guard ... -- harmony run ...` stopped by
    SIGTERM to its process group (timeout(1) at the call's end). The guard forwards what the run prints on
    its way out, so every worker thread's stack reaches the log, and no record is left (the next call
    runs the job again)."""
    _, rec, g = schedule("mlp-tiny", "vPP", 2, 2, 2, "P1")
    sched = tmp_path / "schedule.json"
    save_schedule(sched, rec)
    out = tmp_path / "run.jsonl"
    env = dict(os.environ, HARMONY_FAULT=json.dumps({"kind": "slow", "seconds": 0.05}))
    cmd = [sys.executable, "-m", "harmony.workflow", "guard", "--out", str(out), "--system", "harmony-vPP",
           "--model", "mlp-tiny", "--gpus", "2", "--", sys.executable, "-m", "harmony.cli", "run", str(sched),
           "--iters", "200", "--device", "cpu", "-o", str(out)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (partial_path(out).exists()
                                               and partial_path(out).read_text().count("\n") >= 1):
        time.sleep(0.1)
    assert p.poll() is None, "the run ended before its first record could be seen"
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "most recent call first" in err and not out.exists()
    assert _no_children_left()


@pytest.mark.parametrize("disarm", [False, True], ids=["stuck", "ended-in-time"])
@pytest.mark.serial  # timing-sensitive: run alone, not beside another worker
def test_interrupt_watchdog_bounds_a_stuck_shutdown(disarm):
    """Once armed by Ctrl-C/SIGTERM, the watchdog kills what the launcher started and exits 130 if the
    launcher has not ended its workers in time; disarmed (the workers ended), the process lives on."""
    code = f"""
import subprocess, sys, time
from harmony.runtime.launch import WATCHDOG
WATCHDOG.seconds = 1.0
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # not holding our pipes
print(child.pid, flush=True)
WATCHDOG.arm()
if {disarm}:
    WATCHDOG.disarm()
time.sleep(4)
print("alive", flush=True)
"""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    child = int(p.stdout.split()[0])
    if disarm:
        assert p.returncode == 0 and "alive" in p.stdout, p.stderr
        psutil.Process(child).kill()
    else:
        assert p.returncode == 130 and "alive" not in p.stdout, (p.stdout, p.stderr)
        assert "still not ended" in p.stderr
        assert time.monotonic() - t0 < 30
        time.sleep(0.5)
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_run_that_would_outlast_the_deadline_is_left_for_the_next_call(tmp_path):
    """With $HARMONY_DEADLINE (a device call's end), `harmony run` does not start a run whose predicted
    iterations plus set-up would end after it: it exits DEFERRED_EXIT with neither a record nor a partial
    one, for the next call to run (h100-grid14 lost a gpt2-xl run cut off after 3 of its 4 iterations).
    With time enough it runs as usual."""
    from harmony.jsonio import DEFERRED_EXIT
    from harmony.runtime import RUN_OVERHEAD_S
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    rec = dict(rec, prediction={"iter_time_s": 0.5})      # what `harmony schedule` would have predicted
    p, out = _cli(tmp_path, rec, extra_env={"HARMONY_DEADLINE": str(time.time() + RUN_OVERHEAD_S - 5)})
    _, err = p.communicate(timeout=120)
    assert p.returncode == DEFERRED_EXIT, err
    assert not out.exists() and not partial_path(out).exists()
    assert "left for the next call" in err and "before HARMONY_DEADLINE" in err
    p, out = _cli(tmp_path, rec, extra_env={"HARMONY_DEADLINE": str(time.time() + 600)})
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert read_jsonl(out)[-1]["status"] == "ok"


def test_the_set_up_a_deadline_allows_for_grows_with_the_host_arena(monkeypatch):
    """Set-up is mostly the workers pinning the host arena (docs/performance.md entry 45: 99 s for vgg416's
    113 GB arena): a schedule that records its arena is allowed 0.6 s per GB more, so a run that fits the
    flat 45 s but not its own set-up is left for the next call."""
    from harmony.jsonio import Deferred
    from harmony.runtime import RUN_OVERHEAD_S, defer_past_deadline, run_overhead_s
    big = {"prediction": {"iter_time_s": 11.5}, "search": {"host_memory": {"chosen_bytes": 113_394_627_328}}}
    assert run_overhead_s({}) == RUN_OVERHEAD_S and run_overhead_s(big) == pytest.approx(45 + 68.0, abs=0.1)
    # a schedule without a search (swap-dp's, swap-pp's): its arena sized from the model and graph
    from harmony.schedule.host_memory import arena_bytes
    _, rec, g = schedule("mlp-tiny", "vPP", 1, 2, 2, "P1")
    bare = {k: v for k, v in rec.items() if k != "search"}
    assert run_overhead_s(bare, g) == pytest.approx(45 + 0.6 * arena_bytes(g, rec["model"]).total / 1e9)
    assert run_overhead_s(bare, g) > RUN_OVERHEAD_S
    import harmony.jsonio as jsonio
    monkeypatch.setattr(jsonio, "seconds_left", lambda: 130.0)  # 4 x 11.5 s x 1.1 = 50.6 s: fits 45 s of set-up, not 113
    defer_past_deadline({"prediction": big["prediction"]}, 4, traced=False)
    with pytest.raises(Deferred, match=r"set-up \(113 s\)"):
        defer_past_deadline(big, 4, traced=False)
    # prefaulted (the default on cuda), the workers pin pages that exist: 35 s + 0.35 s per GB (vgg416's
    # 113 GB took 51 s besides its iterations), so the same run fits the same 130 s
    assert run_overhead_s(big, prefault=True) == pytest.approx(35 + 39.7, abs=0.1)
    defer_past_deadline(big, 4, traced=False, prefault=True)


@pytest.mark.parametrize("why", ["max-iter-s", "deadline"])
def test_the_workers_stop_together_after_a_timed_iteration(tmp_path, monkeypatch, why):
    """The swap baselines' --max-iter-s (every timed iteration here is slower than 0 s) or a
    $HARMONY_DEADLINE already past stops both ranks after the first timed iteration, not before (the
    warm-up is never the measurement); the summary says why and has its median from what ran."""
    _, rec, g = schedule("mlp-tiny", "vPP", 2, 2, 2, "P2")
    if why == "deadline":
        monkeypatch.setenv("HARMONY_DEADLINE", str(time.time() - 1))   # the workers inherit it
    out = tmp_path / "run.jsonl"
    s = run_schedule(rec, g, iters=4, warmup=1, device="cpu", output=str(out),
                     max_iter_s=0.0 if why == "max-iter-s" else None)
    validate_summary(s)
    assert s["status"] == "ok" and s["iterations"] == 2 and s["iter_time_s"] > 0
    assert "stopped after iteration 1 of 4" in s["cut_short"]
    assert ("--max-iter-s" if why == "max-iter-s" else "HARMONY_DEADLINE") in s["cut_short"]
    assert [l["record"] for l in read_jsonl(out)] == ["iteration", "iteration", "summary"]
    assert _no_children_left()
