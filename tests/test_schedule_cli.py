"""`harmony schedule`, `harmony simulate`, `harmony table1` end to end on ANALYTIC profiles (CPU, fast)."""
import csv
import gzip
import json

import pytest

from harmony.cli import main
from harmony.jsonio import write_json
from harmony.schedule.io import load_schedule
from harmony.schedule.synthetic import analytic_model, synthetic_calibration, synthetic_profile
from harmony.schedule.tasks import count_bytes, layer_sizes_from_model


@pytest.fixture
def gpt2xl(tmp_path):
    m = analytic_model("gpt2-xl")
    write_json(tmp_path / "model.json", m)
    write_json(tmp_path / "profile.json", synthetic_profile(m, synthetic_calibration("paper")))
    write_json(tmp_path / "calibration.json", synthetic_calibration("paper"))
    return tmp_path


def test_schedule_and_simulate(gpt2xl):
    d = gpt2xl
    rc = main([
        "schedule", str(d / "profile.json"), "--minibatch", "64", "--gpus", "4", "--gpu-memory", "9e9",
        "-o", str(d / "s.json"), "--candidates", str(d / "c.csv"), "--trace", str(d / "t.trace.json.gz")])
    assert rc == 0
    rec, g = load_schedule(d / "s.json")             # model found next to the profile, graph consistent
    pred = rec["prediction"]
    sizes = layer_sizes_from_model(rec["model"])
    assert pred["bytes"] == count_bytes(g, sizes)
    assert max(pred["peak_memory_bytes"]) <= 9e9
    assert pred["iter_time_s"] >= pred["schedule_bound_s"] * (1 - 1e-9)
    assert set(pred["terms"]) == {"compute_s", "transfer_s", "cpu_update_s"}
    # the loads the runtime must fetch only after the previous task (docs/runtime.md, GPU memory pools)
    assert set(pred["prefetch_waits"]) <= {t.id for t in g.tasks if t.kind != "UPD"}
    assert rec["search"]["candidates"] > 10 and rec["search"]["search_time_s"] > 0
    rows = list(csv.DictReader(open(d / "c.csv")))
    assert len(rows) == rec["search"]["candidates"]
    # the chosen plan is the fastest, except that a cut of its bottom wins only if CUT_MIN_GAIN faster
    from harmony.schedule.search import CUT_MIN_GAIN
    fastest = min(float(r["iter_time_s"]) for r in rows if r["feasible"] == "True")
    assert fastest * (1 - 1e-9) <= pred["iter_time_s"] <= fastest / (1 - CUT_MIN_GAIN)
    assert (d / "t.trace.json.gz").read_bytes()[:2] == b"\x1f\x8b"      # the trace is gzip
    with gzip.open(d / "t.trace.json.gz", "rt") as f:
        tr = json.load(f)
    assert any(e["ph"] == "X" for e in tr["traceEvents"])
    assert (d / "s.json").read_text().count("\n") == 1                 # the schedule: one line of JSON
    rc = main(["simulate", str(d / "s.json"), "--profile", str(d / "profile.json"), "-o", str(d / "p.json")])
    assert rc == 0
    p = json.load(open(d / "p.json"))["prediction"]
    assert p["bytes"] == pred["bytes"] and p["iter_time_s"] == pytest.approx(pred["iter_time_s"])
    assert p["prefetch_waits"] == pred["prefetch_waits"]
    # fixed configuration
    rc = main(["schedule", str(d / "profile.json"), "-D", "64", "-N", "4", "--ubatch-fwd", "2", "--ubatch-bwd", "1",
               "--pack-size", "13", "-o", str(d / "f.json")])
    rec, g = load_schedule(d / "f.json")
    assert rec["search"]["candidates"] == 1 and g.config.bwd_packs[0] == (0, 13)


def test_the_schedule_records_the_receive_mode_its_search_chose_and_simulate_uses_it(gpt2xl):
    """On a CUDA calibration (a slowdown beside NCCL per receive mode) a vPP search on two GPUs picks each
    plan's receive mode; the schedule's prediction, its search summary and the candidates CSV name it, and
    `harmony simulate` of the schedule predicts the same time. `--p2p-receive lazy` fixes it."""
    d = gpt2xl
    write_json(d / "cuda.json", {**synthetic_calibration("paper"), "device": "cuda:0"})
    base = ["schedule", str(d / "profile.json"), "-D", "16", "-N", "2", "--gpu-memory", "9e9",
            "--calibration", str(d / "cuda.json")]
    assert main(base + ["-o", str(d / "s.json"), "--candidates", str(d / "c.csv")]) == 0
    rec, _ = load_schedule(d / "s.json")
    chosen = rec["prediction"]["p2p_receive"]
    assert chosen in ("lazy", "eager") and rec["search"]["chosen"]["p2p_receive"] == chosen
    rows = list(csv.DictReader(open(d / "c.csv")))
    assert {r["p2p_receive"] for r in rows} <= {"lazy", "eager"}
    fastest = min((r for r in rows if r["feasible"] == "True"), key=lambda r: float(r["iter_time_s"]))
    assert fastest["p2p_receive"] == chosen
    assert main(["simulate", str(d / "s.json"), "--profile", str(d / "profile.json"), "--calibration",
                 str(d / "cuda.json"), "-o", str(d / "p.json")]) == 0
    p = json.load(open(d / "p.json"))["prediction"]
    assert p["p2p_receive"] == chosen and p["iter_time_s"] == pytest.approx(rec["prediction"]["iter_time_s"])
    for fixed in ("lazy", "eager"):
        assert main(base + ["--p2p-receive", fixed, "-o", str(d / f"{fixed}.json")]) == 0
        fixed_rec, _ = load_schedule(d / f"{fixed}.json")
        assert fixed_rec["prediction"]["p2p_receive"] == fixed
        assert fixed_rec["prediction"]["iter_time_s"] >= rec["prediction"]["iter_time_s"] * (1 - 1e-9)


def test_compute_scale_multiplies_the_gpu_compute_and_simulate_reproduces_it(gpt2xl, capsys):
    """`--compute-scale F` (a run's GPU below the profile's clock, docs/performance.md entry 65): the same plan's
    compute term is F times the unscaled one, the schedule records F and `harmony simulate` of it predicts the
    recorded time; without the flag nothing is recorded; a scale outside [0.5, 2] is refused by name."""
    d = gpt2xl
    fixed = ["schedule", str(d / "profile.json"), "-D", "64", "-N", "4", "--ubatch-fwd", "2", "--ubatch-bwd",
             "1", "--pack-size", "13"]
    assert main(fixed + ["-o", str(d / "one.json")]) == 0
    assert main(fixed + ["--compute-scale", "1.5", "-o", str(d / "slow.json")]) == 0
    one, _ = load_schedule(d / "one.json")
    slow, _ = load_schedule(d / "slow.json")
    assert "compute_scale" not in one["search"] and slow["search"]["compute_scale"] == 1.5
    c1, c15 = one["prediction"]["terms"]["compute_s"], slow["prediction"]["terms"]["compute_s"]
    assert c15 == pytest.approx(1.5 * c1, rel=1e-9)
    assert slow["prediction"]["iter_time_s"] > one["prediction"]["iter_time_s"]
    assert main(["simulate", str(d / "slow.json"), "--profile", str(d / "profile.json"), "-o", str(d / "p.json")]) == 0
    p = json.load(open(d / "p.json"))["prediction"]
    assert p["iter_time_s"] == pytest.approx(slow["prediction"]["iter_time_s"])
    assert main(fixed + ["--compute-scale", "5", "-o", str(d / "x.json")]) == 2
    assert "--compute-scale 5: 5 is the run's compute time over the profile's" in capsys.readouterr().err
    # `profile`: the factor `harmony profile --sustain` recorded, refused by name where there is none
    capsys.readouterr()
    assert main(fixed + ["--compute-scale", "profile", "-o", str(d / "x.json")]) == 2
    assert "has no sustained measurement" in capsys.readouterr().err
    prof = json.loads((d / "profile.json").read_text())
    prof["sustained"] = {"vlayer": 3, "seconds": 10.0, "factor": 1.5}
    prof["gpu_clocks"] = {"sm_mhz_median": 1980.0}       # the clock the profile was timed at, for `harmony run`
    write_json(d / "profile.json", prof)
    assert main(fixed + ["--compute-scale", "profile", "-o", str(d / "measured.json")]) == 0
    measured, _ = load_schedule(d / "measured.json")
    assert measured["search"]["compute_scale"] == 1.5 and "vLayer 3" in measured["search"]["compute_scale_source"]
    assert measured["search"]["profile_gpu_clocks"] == {"sm_mhz_median": 1980.0}
    assert "profile_gpu_clocks" not in one["search"]        # a profile without clocks (the CPU's) adds none
    assert measured["prediction"]["iter_time_s"] == pytest.approx(slow["prediction"]["iter_time_s"])
    # one factor per microbatch size (entry 68): this plan's forward runs at u = 2, its backward at u = 1, so
    # scaling only u = 2 scales only the forward term, and simulate reproduces the per-u prediction
    prof["sustained"] = {"vlayer": 3, "seconds": 4.0, "u": 2, "factor": 1.5,
                         "by_ubatch": {"1": {"u": 1, "factor": None, "factor_missing": "host-bound"},
                                       "2": {"u": 2, "factor": 1.5}}}
    write_json(d / "profile.json", prof)
    assert main(fixed + ["--compute-scale", "profile", "-o", str(d / "by_u.json")]) == 0
    by_u, _ = load_schedule(d / "by_u.json")
    assert by_u["search"]["compute_scale"] == 1.5      # one measured size: one factor, applied at every u
    prof["sustained"]["by_ubatch"]["1"] = {"u": 1, "factor": 1.0}
    write_json(d / "profile.json", prof)
    assert main(fixed + ["--compute-scale", "profile", "-o", str(d / "by_u.json")]) == 0
    by_u, _ = load_schedule(d / "by_u.json")
    assert by_u["search"]["compute_scale"] == {"1": 1.0, "2": 1.5}
    terms = lambda rec: rec["prediction"]["terms"]
    assert terms(one)["compute_s"] < terms(by_u)["compute_s"] < terms(slow)["compute_s"]
    assert main(["simulate", str(d / "by_u.json"), "--profile", str(d / "profile.json"), "-o", str(d / "q.json")]) == 0
    assert json.load(open(d / "q.json"))["prediction"]["iter_time_s"] == pytest.approx(by_u["prediction"]["iter_time_s"])


def test_a_compute_scale_per_microbatch_size_is_linear_between_sizes_and_flat_outside():
    from harmony.profile_data import format_scale, scale_at
    s = {4: 1.06, 32: 1.02}
    assert scale_at(s, 1) == 1.06 and scale_at(s, 64) == 1.02 and scale_at(s, 4) == 1.06
    assert scale_at(s, 18) == pytest.approx(1.04) and scale_at(1.05, 7) == 1.05
    assert format_scale(s) == "1.06 at u=4, 1.02 at u=32" and format_scale(1.05) == "1.05"


def test_schedule_errors(gpt2xl, capsys):
    d = gpt2xl
    assert main(["schedule", str(d / "profile.json"), "-D", "64", "-N", "4", "--gpu-memory", "100MiB",
                 "-o", str(d / "x.json")]) == 2
    assert "cap" in capsys.readouterr().err
    assert main(["schedule", str(d / "profile.json"), "-D", "2", "-N", "4", "-o", str(d / "x.json")]) == 2
    assert "smaller than the number of GPUs" in capsys.readouterr().err


def test_table1_analytic(tmp_path):
    out = tmp_path / "table1.csv"
    assert main(["table1", "--analytic", "-o", str(out)]) == 0
    rows = {r["model"]: r for r in csv.DictReader(open(out))}
    assert set(rows) == {"bert96", "gpt2-xl", "vgg416", "resnet1026"}
    for r in rows.values():
        assert r["profile_source"] == "analytic"
        assert int(r["candidates"]) > 10
        assert float(r["search_cpu_s"]) > 0                 # the < 2 s target: benchmarks/search_time.py
        assert float(r["dp_over_heuristic"]) <= 1.02        # acceptance: DP within 2% of the best heuristic


def test_no_cap_plans_under_the_profiled_gpu(gpt2xl):
    """Without --gpu-memory the plan still fits the GPU the profile was taken on (the `large` scale): an
    unbounded plan would put the whole model in one pack. The record itself stays uncapped."""
    d = gpt2xl
    prof = json.load(open(d / "profile.json"))
    prof["memory_cap"] = {"gpu_memory_cap": None, "applied": False, "device_total_bytes": int(20e9)}
    write_json(d / "gpu.profile.json", prof)
    assert main(["schedule", str(d / "gpu.profile.json"), "--model", str(d / "model.json"), "-D", "64", "-N", "1",
                 "--headroom", "0.1", "-o", str(d / "g.json")]) == 0
    rec, _ = load_schedule(d / "g.json")
    assert rec["search"]["planned_cap_bytes"] == pytest.approx(18e9)
    assert max(rec["prediction"]["peak_memory_bytes"]) <= 18e9
    assert rec["gpu_memory_cap"] is None
    # a CPU profile (no device memory recorded) plans unbounded, as before
    assert main(["schedule", str(d / "profile.json"), "-D", "64", "-N", "1", "-o", str(d / "c.json")]) == 0
    assert load_schedule(d / "c.json")[0]["search"]["planned_cap_bytes"] is None


def test_warns_when_the_profiled_optimizer_threads_exceed_a_run_workers():
    """4x H200: profiles timed with 64 threads planned runs whose workers step with 16 (docs/performance.md
    entry 12); the schedule says so, for N on the profiled host only, and not for profiles that agree."""
    from harmony.schedule.cli import optimizer_threads_mismatch as check
    gpu = {"device": "cuda:0", "threads": 64, "cpu_count": 64, "host_gpus": 4}
    note = check(gpu, 4)
    assert note and "64 CPU threads" in note and "gets 16" in note and "--threads 16" in note
    assert check({**gpu, "threads": 16}, 4) is None                 # the new default: cores // host GPUs
    assert check({**gpu, "threads": 16}, 8) is None                 # N = 8: a larger machine, cores unknown
    assert "gets 32" in check({**gpu, "threads": 64}, 2)
    assert check({"device": "cuda:0", "threads": 64}, 4) is None    # older profile: no cpu_count recorded
    assert check({**gpu, "device": "cpu"}, 4) is None               # CPU runs: the worker threads are the test's
