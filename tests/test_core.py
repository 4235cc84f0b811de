"""Shared pieces: sizes, artifact I/O, the run-record schema, the reference trainer, the CLI."""
import json

import pytest

from harmony.cli import main as cli_main
from harmony.jsonio import ArtifactError, JsonlWriter, partial_path, read_json, read_jsonl, write_json
from harmony.metrics import IterationRecord, env_record, make_summary, validate_summary
from harmony.models import get_model
from harmony.reference import max_relative_difference, minibatches, train_reference
from harmony.units import parse_bytes


def test_parse_bytes():
    assert parse_bytes("11GiB") == 11 * 2**30
    assert parse_bytes("9e9") == 9_000_000_000
    assert parse_bytes("10GB") == 10**10
    assert parse_bytes(None) is None and parse_bytes("none") is None
    with pytest.raises(ValueError, match="cannot read the size"):
        parse_bytes("eleven gigs")


def test_atomic_json_and_artifact_checks(tmp_path):
    p = tmp_path / "a.json"
    write_json(p, {"artifact": "model", "schema_version": 1, "x": 1})
    assert read_json(p, kind="model", schema_version=1)["x"] == 1
    assert not list(tmp_path.glob(".*tmp"))
    with pytest.raises(ArtifactError, match="expected a profile artifact"):
        read_json(p, kind="profile")
    with pytest.raises(ArtifactError, match="schema_version"):
        read_json(p, kind="model", schema_version=2)
    with pytest.raises(ArtifactError, match="not found"):
        read_json(tmp_path / "missing.json")



def test_write_json_gz_and_compact(tmp_path):
    import gzip
    obj = {"artifact": "model", "schema_version": 1, "x": [0.1, 1e-300, 2**70], "s": "ü"}
    p = tmp_path / "t.trace.json.gz"
    write_json(p, obj, indent=None)
    assert p.read_bytes()[:2] == b"\x1f\x8b"                      # gzip, not text
    with gzip.open(p, "rt") as f:
        assert json.load(f) == obj
    assert read_json(p, kind="model") == obj                         # read_json reads .gz too
    assert not list(tmp_path.glob(".*tmp"))
    first = p.read_bytes()
    write_json(p, obj, indent=None)
    assert p.read_bytes() == first                                   # no timestamp in the header
    bad = tmp_path / "bad.json.gz"
    bad.write_text("not gzip")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_json(bad)
    c = tmp_path / "c.json"                                          # indent=None: one line
    write_json(c, obj, indent=None)
    assert c.read_text().count("\n") == 1 and json.loads(c.read_text()) == obj


def test_compact_results_and_tree_size(tmp_path):
    """experiments/compact_results.py: traces -> .gz, profiles/schedules -> one line, mtimes kept, the rest
    untouched, re-runnable; experiments/device/tree_size.py: what the device tool would copy."""
    import gzip
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    res = tmp_path / "results" / "schedules" / "m"
    trace, sched, model = res / "a.trace.json", res / "a.json", tmp_path / "results" / "m.json"
    write_json(trace, {"traceEvents": [{"ph": "X", "ts": 0.1}]}, indent=None)
    write_json(sched, {"artifact": "schedule", "schema_version": 1, "x": [1.0000000000000002, 3e-7]})
    write_json(model, {"artifact": "model", "schema_version": 1, "x": 1})
    for i, f in enumerate((trace, sched, model)):
        os.utime(f, ns=(10**18 + i, 10**18 + i))
    old_trace, old_sched, old_model = trace.read_bytes(), json.loads(sched.read_text()), model.read_bytes()
    script = [sys.executable, str(root / "experiments/compact_results.py"), str(tmp_path / "results")]
    out = subprocess.run([*script, "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert "would convert 1 traces" in out and "1 profiles/schedules" in out and trace.exists()
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert "converted 1 traces" in out
    gz = res / "a.trace.json.gz"
    assert not trace.exists() and gzip.decompress(gz.read_bytes()) == old_trace
    assert json.loads(sched.read_text()) == old_sched and sched.read_text().count("\n") == 1
    assert model.read_bytes() == old_model
    assert [f.stat().st_mtime_ns for f in (gz, sched, model)] == [10**18, 10**18 + 1, 10**18 + 2]
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert "converted 0 traces" in out and "0 profiles/schedules" in out
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big").write_bytes(b"x" * 2**20)
    size = [sys.executable, str(root / "experiments/device/tree_size.py"), "--repo", str(tmp_path)]
    p = subprocess.run(size, capture_output=True, text=True)
    assert p.returncode == 0 and "results/schedules/m/" in p.stdout and " 4 files" in p.stdout
    p = subprocess.run([*size, "--carry", "ignored", "--limit", "0.5"], capture_output=True, text=True)
    assert p.returncode == 1 and " 5 files" in p.stdout and "over the 0.5 MiB limit" in p.stdout

def test_summary_schema(tmp_path):
    its = [IterationRecord(i, t, 8 / t, 1.0, bytes_h2d=10 * (i + 1)) for i, t in enumerate([5.0, 1.0, 2.0, 3.0])]
    s = make_summary(system="harmony", model="mlp-tiny", mode="vPP", gpus=1, minibatch=8, status="ok",
                     iterations=its, warmup=1, env=env_record("cpu"))
    validate_summary(s)
    env = s["env"]                                    # what a host-bound run's speed depends on is recorded
    assert env["host_memory_available_bytes"] > 0 and env["load_avg_1m"] is not None and "cpu_model" in env
    assert s["iter_time_s"] == 2.0                    # median of 1, 2, 3: the warm-up 5.0 is excluded
    assert s["samples_per_s"] == 4.0
    with JsonlWriter(tmp_path / "r.jsonl") as w:
        for it in its:
            w.write(it.to_json())
        w.write(s)
    recs = read_jsonl(tmp_path / "r.jsonl")
    assert recs[-1]["record"] == "summary" and len(recs) == 5
    # until it is closed the record lives under <name>.partial: a killed run leaves no finished-looking file
    w = JsonlWriter(tmp_path / "killed.jsonl")
    w.write(its[0].to_json())
    assert not (tmp_path / "killed.jsonl").exists() and len(read_jsonl(partial_path(tmp_path / "killed.jsonl"))) == 1
    with pytest.raises(ValueError, match="status"):
        make_summary(system="x", model="m", mode=None, gpus=1, minibatch=1, status="great",
                     iterations=[], warmup=0, env={})


def test_allocator_retries_are_summarised_over_steady_iterations_and_warned_about():
    from harmony.metrics import allocator_warning
    retries = [[7, 7], [0, 0], [0, 2], [0, 1]]       # the warm-up's first-touch retries do not count
    its = [IterationRecord(i, 1.0, 8.0, 1.0, peak_reserved_bytes=[11 * 2**30] * 2, alloc_retries=r)
           for i, r in enumerate(retries)]
    s = make_summary(system="harmony", model="m", mode="vDP", gpus=2, minibatch=8, status="ok",
                     iterations=its, warmup=1, env={})
    assert s["alloc_retries"] == [0, 2]
    line = allocator_warning(s)
    assert "retried 2 allocation(s) per iteration" in line and "11.00" in line and "--headroom" in line
    quiet = make_summary(system="harmony", model="m", mode="vDP", gpus=2, minibatch=8, status="ok",
                         iterations=its[:2], warmup=1, env={})
    assert quiet["alloc_retries"] == [0, 0] and allocator_warning(quiet) is None   # no retry: nothing to say


def test_reserved_by_stream_is_gpu_only_and_printed_largest_stream_first():
    from harmony.gpumem import reserved_by_stream
    from harmony.metrics import format_reserved_by_stream
    assert reserved_by_stream("cpu", {}) == {}
    g = 2**30
    lines = format_reserved_by_stream([{"h2d": {"reserved": 2 * g, "allocated": 0},
                                        "compute": {"reserved": 9 * g, "allocated": g // 2}}, {}])
    assert lines == ["rank 0 reserved GiB by stream after the last iteration: compute 9.00 (0.50 in use), "
                     "h2d 2.00 (0.00 in use)"]
    assert format_reserved_by_stream(None) == []


def test_reference_training_is_deterministic():
    spec = get_model("mlp-tiny")
    batches = minibatches(spec, 8, 3)
    l1, m1 = train_reference(spec, batches)
    l2, m2 = train_reference(spec, batches)
    assert l1 == l2
    assert max_relative_difference(m1.parameters(), m2.parameters()) == 0.0
    assert l1[-1] != l1[0]


def test_unknown_model_error_names_alternatives():
    with pytest.raises(KeyError, match="unknown model 'mlp-tinyy'.*mlp-tiny"):
        get_model("mlp-tinyy")


def test_cli_decompose_and_errors(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert cli_main(["decompose", "mlp-tiny", "-o", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["num_vlayers"] == 9 and m["vlayers"][-1]["is_loss"]
    assert m["total_params"] == sum(p.numel() for p in get_model("mlp-tiny").build().parameters())
    # identical blocks share a signature (the profiler's dedup key)
    sigs = {v["signature"] for v in m["vlayers"][1:7]}
    assert len(sigs) == 1
    assert cli_main(["decompose", "no-such-model", "-o", str(out)]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_segments_by_stream_sums_a_snapshot_per_stream_with_its_unused_blocks():
    """What the caching allocator holds per stream (the run records' `reserved_by_stream`, the task probe's
    `allocator_at_start`): reserved and allocated per segment, cached-but-unused blocks and the largest of
    them; another device's segments and an unnamed stream's are kept apart."""
    from harmony.gpumem import segments_by_stream
    m = 2 ** 20
    snap = [
        {"device": 0, "stream": 7, "total_size": 100 * m, "allocated_size": 60 * m,
         "blocks": [{"size": 60 * m, "state": "active_allocated"}, {"size": 30 * m, "state": "inactive"},
                    {"size": 10 * m, "state": "inactive"}]},
        {"device": 0, "stream": 7, "total_size": 40 * m, "allocated_size": 0,
         "blocks": [{"size": 40 * m, "state": "inactive"}]},
        {"device": 0, "stream": 9, "total_size": 20 * m, "allocated_size": 20 * m,
         "blocks": [{"size": 20 * m, "state": "active_pending_free"}]},
        {"device": 1, "stream": 7, "total_size": 500 * m, "allocated_size": 0, "blocks": []},
    ]
    out = segments_by_stream(snap, 0, {7: "compute"})
    assert out == {"compute": {"reserved": 140 * m, "allocated": 60 * m, "free": 80 * m, "largest_free": 40 * m,
                               "segments": 2},
                   "other": {"reserved": 20 * m, "allocated": 20 * m, "free": 0, "largest_free": 0, "segments": 1}}
    assert segments_by_stream(snap, 1, {})["other"]["reserved"] == 500 * m


def test_visible_gpu_uuids_name_the_gpus_this_process_computes_on():
    """env.gpu_uuids names the devices torch sees (CUDA_VISIBLE_DEVICES applied), written as NVML writes them;
    a property without a usable uuid gives None (env_record then falls back to the host's NVML list)."""
    import uuid
    from types import SimpleNamespace
    from harmony.metrics import visible_gpu_uuids
    u = uuid.UUID("28dfe27e-84b3-065a-3710-8698634b217a")
    want = "GPU-28dfe27e-84b3-065a-3710-8698634b217a"
    assert visible_gpu_uuids([SimpleNamespace(uuid=u)]) == [want]
    assert visible_gpu_uuids([SimpleNamespace(uuid=want.upper())]) == [want]
    assert visible_gpu_uuids([SimpleNamespace(uuid=u.hex)]) == [want]
    assert visible_gpu_uuids([]) == []
    assert visible_gpu_uuids([SimpleNamespace(uuid=u), SimpleNamespace()]) is None
    assert visible_gpu_uuids([SimpleNamespace(uuid="not-a-uuid")]) is None
    assert "gpu_uuids" not in env_record("cpu")
