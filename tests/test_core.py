"""Shared pieces: sizes, artifact I/O, the run-record schema, the reference trainer, the CLI."""
import json

import pytest
import torch

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
