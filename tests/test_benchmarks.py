"""The CPU benchmarks still run against today's runtime (benchmarks/README.md). They time, so nothing here
checks a speed: only that each runs end to end and prints its table. benchmarks/runtime_overhead.py
calls Worker._iteration in-process and broke silently when the worker gained per-run state (the task
probe's) that it did not set; it now starts the run through Worker.start_run like Worker.run does."""
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_runtime_overhead_benchmark_runs_one_vlayer_packs_of_several_microbatches(capsys):
    bench = _load("runtime_overhead")
    bench.main(["--blocks", "2", "--packs", "1", "--minibatch", "4", "--ubatch", "2", "--iters", "1",
                "--warmup", "0", "--weight-copies", "per-vlayer"])
    out = capsys.readouterr().out
    assert "2 microbatch(es) of 2" in out, out
    row = out.strip().splitlines()[-1].split()
    assert row[:2] == ["1", "per-vlayer"] and float(row[4]) > 0 and float(row[5]) > 0, out


def test_runtime_overhead_parts_time_every_step_of_a_task(capsys):
    """--parts: the worker's per-task steps timed on the host (entry 40's next step on the GPU host); every
    step a BWD-pack schedule runs takes some time, and the wrappers leave the iteration's result alone."""
    bench = _load("runtime_overhead")
    bench.main(["--blocks", "2", "--packs", "1", "--minibatch", "4", "--ubatch", "2", "--iters", "2",
                "--warmup", "1", "--weight-copies", "per-vlayer", "--parts"])
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("pack 1, per-vlayer: host ms per iteration"))
    ms = dict(part.rsplit(" ", 1) for part in line.split("): ", 1)[1].split(";")[0].split(", "))
    assert set(ms) == set(bench.PARTS) and all(float(v) > 0 for v in ms.values()), line
    assert float(out.strip().splitlines()[-1].split()[4]) > 0, out


def test_runtime_overhead_fits_the_per_task_host_charge_through_the_packings(capsys):
    """Device README item 42: the runtime's host work per compute task, the slope of its paired overhead over
    plain PyTorch against the number of tasks, one packing per point (entry 78's 0.60 ms came from two)."""
    bench = _load("runtime_overhead")
    a, c, n = bench.host_task_fit([(259, 0.2 + 259 * 6e-4), (33, 0.2 + 33 * 6e-4), (17, 0.2 + 17 * 6e-4)])
    assert (a, c, n) == (pytest.approx(6e-4), pytest.approx(0.2), 3)
    assert bench.host_task_fit([(33, 0.1), (33, 0.2)]) is None           # one task count: no slope
    bench.main(["--blocks", "2", "--packs", "1", "8", "--minibatch", "4", "--iters", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert "ms a compute task" in out and "over 2 packings" in out, out


def test_runtime_overhead_json_counts_what_the_host_work_could_scale_with(tmp_path, capsys):
    """--json (docs/performance.md entry 97): each packing's record counts, over the iteration's compute tasks,
    the vLayers and tensors the runtime installs and releases; resnet-tiny's BasicBlocks hold 12 tensors (two
    convs, two BatchNorms with three buffers each), and with two microbatches a task runs each vLayer twice."""
    import json
    bench = _load("runtime_overhead")
    out = tmp_path / "ro.json"
    bench.main(["--blocks", "2", "--packs", "1", "8", "--minibatch", "4", "--ubatch", "2", "--iters", "1",
                "--warmup", "0", "--parts", "--json", str(out)])
    rec = json.loads(out.read_text())
    assert rec["model"] == "resnet-tiny" and rec["ubatch"] == 2 and rec["environment"]["device"] == "cpu"
    one, eight = rec["rows"]
    assert (one["pack"], eight["pack"], one["vlayers"]) == (1, 8, 11)
    spec = bench.get_model("resnet-tiny", blocks=(2,) * 4, widths=(8,) * 4, stem_width=8, image_size=8)
    model_json = bench.decompose_model(spec, with_flops=False)
    assert sorted(set(bench.tensors_per_vlayer(model_json)))[-2:] == [12, 18]   # a BasicBlock; one with a downsample
    for r in (one, eight):
        assert r["vlayer_microbatches"] == 2 * r["vlayer_tasks"] and r["tensor_microbatches"] == 2 * r["tensor_tasks"]
        assert r["bwd_tensor_tasks"] == r["tensors"]        # each vLayer is in one BWD task
    assert one["vlayer_tasks"] == 2 * 11 - 2 and one["compute_tasks"] > eight["compute_tasks"]
    assert set(one["parts_ms_median"]) == set(bench.PARTS + bench.SUB_PARTS)


def test_fit_vlayer_host_recovers_the_charges_the_rows_were_made_with(tmp_path, capsys):
    """experiments/fit_vlayer_host.py: rows made from known charges (150 us a task, 12 us a tensor in a task,
    2 ms an iteration) over three families of different tensors per vLayer come back from the fit, and a
    family left out is predicted from the other two."""
    import json
    spec = importlib.util.spec_from_file_location("fit_vlayer_host", ROOT / "experiments" / "fit_vlayer_host.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    for family, tpv in (("vgg", 2), ("resnet", 12), ("bert", 16)):
        rows = []
        for tasks, L in ((261, 132), (33, 132), (131, 66)):
            vt = 2 * L - 2
            rows.append({"pack": 1, "microbatches": 1, "tensors_per_vlayer_mean": tpv, "compute_tasks": tasks,
                         "vlayer_tasks": vt, "tensor_tasks": vt * tpv, "vlayer_microbatches": vt,
                         "paired_overhead_s": 150e-6 * tasks + 12e-6 * vt * tpv + 2e-3})
        (tmp_path / f"{family}.json").write_text(json.dumps({"model": f"{family}-tiny", "rows": rows}))
    (tmp_path / "env.json").write_text("{}")
    assert fit.main([str(tmp_path), "--terms", "compute_tasks", "tensor_tasks"]) == 0
    out = capsys.readouterr().out
    assert "9 rows from 3 files" in out
    assert "compute_tasks:   150.00 us" in out and "tensor_tasks:    12.00 us" in out and "2.00 ms" in out, out
    assert "median |.| 0.000" in out, out
    left_out = [float(line.split()[-1]) for line in out.splitlines() if line.strip().startswith("vgg ")]
    assert left_out and all(abs(x - y) < 1e-6 for x, y in zip(left_out, [float(line.split()[-2]) for line in
                                                                          out.splitlines() if line.strip().startswith("vgg ")]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the GPU case below runs instead")
def test_runtime_overhead_benchmark_refuses_cuda_without_a_gpu_and_names_the_fix(capsys):
    bench = _load("runtime_overhead")
    with pytest.raises(SystemExit):
        bench.main(["--device", "cuda", "--blocks", "2", "--packs", "1", "--iters", "1", "--warmup", "0"])
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runtime_overhead_benchmark_runs_on_the_gpu(capsys):
    """The GPU host's per-task cost (docs/performance.md entry 40): the in-process worker on cuda, one-vLayer
    packs of two microbatches, beside plain PyTorch on the same GPU. Two packings in one process: the second's
    arena is registered after the first's was released (error 712 when it was not, h100-overhead1)."""
    bench = _load("runtime_overhead")
    bench.main(["--device", "cuda", "--blocks", "2", "--packs", "1", "2", "--minibatch", "4", "--ubatch", "2",
                "--iters", "2", "--warmup", "1"])
    out = capsys.readouterr().out
    assert "CUDA, 1 torch thread" in out, out
    # one table row per packing; with two packings the last line is the per-task fit through them (99e06f16
    # made that line last, and this test read it as a row until the sixtieth session's GPU run)
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [r[0] for r in rows] == ["1", "2"], out
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows), out
    assert "ms a compute task" in out, out


def test_a_stochastic_vlayer_is_seeded_without_formatting_a_stack_trace(monkeypatch, capsys):
    """The worker seeds dropout once per stochastic vLayer and microbatch, twice with the recompute.
    torch.manual_seed formatted a stack trace per call for every backend not initialised (CUDA, XPU and
    MTIA here; XPU and MTIA on a GPU host): 0.3 ms a call under the worker's stack on the CPU, which made
    bert-tiny's runtime overhead 1.6 ms per vLayer instead of 0.4 (docs/performance.md entry 61). The
    in-process worker's iterations of a BERT with dropout must not format one."""
    import traceback

    import harmony.runtime.worker as worker
    bench = _load("runtime_overhead")
    spec, record, graph, _ = bench.build("bert-tiny", {"hidden_dropout": 0.1, "attn_dropout": 0.1}, 4, 2, 2)
    loop = bench.RuntimeLoop(record, graph, iters=2)
    try:
        assert loop.w.stochastic, "bert-tiny with dropout 0.1 has no stochastic vLayer: the test checks nothing"
        calls = []
        real = traceback.format_stack
        monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: calls.append(1) or real(*a, **k))
        seeded = []
        monkeypatch.setattr(worker, "seed_dropout", lambda dev, s, _f=worker.seed_dropout: seeded.append(s) or _f(dev, s))
        loop.step()
        loop.step()
    finally:
        loop.close()
    assert seeded, "the worker seeded no dropout: the check below would pass vacuously"
    assert not calls, f"{len(calls)} stack traces formatted in two iterations ({len(seeded)} dropout seeds)"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_stash_read_on_its_own_rank_costs_no_signal_thread_job():
    """A stash whose one reader is on the same rank is ordered by its D2H event on the GPU; the worker used
    to publish its host flag as well, through a signal-thread job per stash (a thread wake-up and GIL
    hand-off per FWD task, docs/performance.md entry 75). At N = 1 no flag has a reader: no job."""
    bench = _load("runtime_overhead")
    _, record, graph, _ = bench.build("resnet-tiny", {"blocks": (2, 2, 2, 2)}, 4, 2)
    assert any(t.stash_out for t in graph.tasks), "no task stashes: the check below would pass vacuously"
    loop = bench.RuntimeLoop(record, graph, iters=2, device="cuda")
    try:
        jobs = []
        real = loop.w.updater.run_in_signal_thread
        loop.w.updater.run_in_signal_thread = lambda fn: jobs.append(fn) or real(fn)
        loop.step()
        loop.step()
    finally:
        loop.close()
    assert not jobs, f"{len(jobs)} signal-thread jobs in two iterations of a one-rank schedule"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_task_clock_marks_go_on_the_stream_it_was_given():
    """TaskClock records its events on the stream it was built with, not on whatever stream is current
    (it no longer looks the current stream up per mark, entry 75): a mark on a busy stream is pending
    while one on the idle default stream completes."""
    from harmony.runtime.task_clock import TaskClock
    dev = torch.device("cuda")
    busy = torch.cuda.Stream()
    with torch.cuda.stream(busy):
        torch.cuda._sleep(int(1e9))              # about half a second of the busy stream
    on_busy = TaskClock(dev, busy).now()
    on_idle = TaskClock(dev).now()
    on_idle.synchronize()
    try:
        assert not on_busy.query(), "the mark completed at once: it was not recorded on the busy stream"
    finally:
        busy.synchronize()
    assert on_busy.query()


def test_the_worker_refuses_a_task_graph_whose_stash_has_two_readers():
    """run_fwd publishes a stash's host flag only for a reader on another rank, which is right while each
    stash has exactly one reader; a graph with two would hang its second reader, so set-up refuses it."""
    bench = _load("runtime_overhead")
    _, record, graph, _ = bench.build("resnet-tiny", {"blocks": (2, 2, 2, 2)}, 4, 2)
    readers = [t for t in graph.tasks if t.act_in[0] == "stash"]
    assert len(readers) >= 2, "fewer than two stash readers: nothing to alias"
    readers[1].act_in = readers[0].act_in
    with pytest.raises(ValueError, match="several readers"):
        bench.RuntimeLoop(record, graph, iters=2)


def test_runtime_overhead_sets_any_models_config_fields(capsys):
    bench = _load("runtime_overhead")
    bench.main(["--model", "bert-tiny", "--set", "n_layer=3", "hidden_dropout=0.1", "--packs", "2",
                "--minibatch", "2", "--iters", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert "'n_layer': 3, 'hidden_dropout': 0.1" in out, out
    with pytest.raises(SystemExit):
        bench.main(["--model", "bert-tiny", "--set", "n_layer"])
    assert "expected FIELD=VALUE" in capsys.readouterr().err
