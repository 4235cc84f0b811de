"""Decomposer: model.json for every named model (meta device), the CLI, round trips, and the gpt2-40b budget."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest
import torch

from harmony.cli import main as harmony_main
from harmony.decompose import decompose_model, load_model_json, spec_from_model_json
from harmony.models import get_model, list_models, paper_facts


@pytest.mark.parametrize("name", list_models())
def test_decompose_every_named_model(name):
    rec = decompose_model(get_model(name), with_flops=False)
    assert {"schema_version", "model", "total_params", "vlayers"} <= set(rec)
    layers = rec["vlayers"]
    assert rec["num_vlayers"] == len(layers) and [r["index"] for r in layers] == list(range(len(layers)))
    assert rec["total_params"] == sum(r["params"] for r in layers)
    assert layers[-1]["is_loss"] and layers[-1]["outputs"] == [{"shape": [], "dtype": "float32"}]
    for a, b in zip(layers, layers[1:]):          # each vLayer consumes exactly the previous one's outputs
        assert a["outputs"] == b["inputs"]
    assert layers[0]["inputs"] == rec["input"]
    built = get_model(name).build("meta")        # tensors per vLayer (docs/performance.md entry 97)
    assert [r["param_tensors"] for r in layers] == [len(list(m.parameters())) for m in built]
    assert [r["buffer_tensors"] for r in layers] == [len(list(m.buffers())) for m in built]
    facts = paper_facts(name)
    if facts:
        assert abs(rec["total_params"] - facts["params"]) / facts["params"] < 0.01
        assert rec["num_vlayers"] == facts["vlayers"]


def test_identical_blocks_share_a_signature():
    rec = decompose_model(get_model("gpt2-tiny"))
    sigs = [r["signature"] for r in rec["vlayers"]]
    blocks = sigs[1:-3]
    assert len(set(blocks)) == 1 and len(set(sigs)) == 5
    assert all(r["flops_fwd_per_sample"] > 0 for r in rec["vlayers"][1:-3] + rec["vlayers"][-2:-1])  # blocks, head
    assert rec["vlayers"][1]["flops_fwd_per_sample"] == rec["vlayers"][2]["flops_fwd_per_sample"]


def test_decompose_matches_a_real_run_of_the_chain():
    # Specs recorded from the meta trace (with repeated blocks run once) equal those of a real CPU run.
    spec = get_model("resnet-tiny", blocks=(2, 2, 1, 1))
    rec = decompose_model(spec, with_flops=False)
    x = spec.synthetic_batch(2, torch.Generator().manual_seed(0))
    for r, layer in zip(rec["vlayers"], spec.build("cpu")):
        assert r["inputs"] == [{"shape": list(t.shape[1:]), "dtype": str(t.dtype)[6:]} for t in x]
        x = layer(*x)
        assert r["params"] == sum(p.numel() for p in layer.parameters())


def test_cli_writes_model_json_and_prints_counts(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert harmony_main(["decompose", "gpt2-tiny", "-o", str(out), "--set", "n_layer=3"]) == 0
    err = capsys.readouterr().err
    rec = load_model_json(out)
    assert rec["num_vlayers"] == 3 + 4 and f"{rec['num_vlayers']} vLayers" in err
    assert f"{rec['total_params']:,} parameters" in err
    spec = spec_from_model_json(rec)                # the overrides travel in model.json
    assert spec.config.n_layer == 3
    assert sum(p.numel() for p in spec.build("meta").parameters()) == rec["total_params"]


def test_set_reads_json_and_pythons_literals():
    """--set values: JSON, or Python's True/False/None (the workflow writes an alias's YAML `true` as True),
    else a string. `channels_last=False` once stayed the string "False", which the config took as true."""
    from harmony.decompose import parse_overrides
    got = parse_overrides(["a=True", "b=False", "c=None", "d=false", "e=3", "f=[1, 2]", "g=gelu", "h=x=y"])
    assert got == {"a": True, "b": False, "c": None, "d": False, "e": 3, "f": [1, 2], "g": "gelu", "h": "x=y"}
    assert got["b"] is False and got["a"] is True
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_overrides(["channels_last"])


def test_cli_unknown_model_is_a_clear_error(tmp_path, capsys):
    assert harmony_main(["decompose", "gpt2-mediun", "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'gpt2-mediun'" in err and "gpt2-medium" in err and "Traceback" not in err
    with pytest.raises(KeyError, match="unknown model"):
        get_model("no-such-model")


def test_models_table(capsys):
    assert harmony_main(["models", "--markdown", "gpt2-xl", "resnet1026"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| model |") and len(out) == 4
    row = out[2].split("|")
    assert row[1].strip() == "gpt2-xl" and row[3].strip() == "52" and "1,638,022,400" in row[5]


@pytest.mark.serial  # timing-sensitive: run alone, not beside another worker
def test_gpt2_40b_decomposes_in_budget(tmp_path):
    # Acceptance: < 30 s and < 2 GiB of RAM (2-core machine). A fresh process, as a user would run it.
    out = tmp_path / "m.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harmony.cli", "decompose", "gpt2-40b", "-o", str(out)],
                          capture_output=True, text=True)
    dt = time.perf_counter() - t0
    max_rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["num_vlayers"] == 204 and rec["total_params"] == 40_691_875_840
    assert "204 vLayers" in proc.stderr and "40,691,875,840 parameters" in proc.stderr
    assert dt < 30, f"took {dt:.1f} s"
    assert max_rss_kib < 2 * 1024 * 1024, f"max RSS {max_rss_kib / 1024:.0f} MiB"
