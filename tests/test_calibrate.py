"""Calibration (harmony.calibrate) on the CPU: every field present, positive, readable by Calibration."""
from __future__ import annotations

import json

import pytest
import torch

from harmony.cli import main as cli
from harmony.profile_data import Calibration

BPS = ("h2d_pinned_Bps", "d2h_pinned_Bps", "duplex_pinned_Bps", "h2d_pageable_Bps", "d2h_pageable_Bps",
       "host_memcpy_Bps")


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "calibration.json"
    assert cli(["calibrate", "-o", str(out), "--quick", "--quiet", "--trials", "3"]) == 0
    return out


def test_fields_present_and_positive(cal):
    rec = json.loads(cal.read_text())
    assert rec["artifact"] == "calibration" and rec["schema_version"] == 1
    for k in BPS:
        assert rec[k] > 0, k
        lo, hi = rec["spread"][k]
        assert lo <= rec[k] <= hi
    for prec in ("fp32", "tf32", "bf16"):
        assert rec["matmul_flops"][prec] > 0
    assert rec["cpu_adam_params_per_s"] > 0 and rec["cpu_sgd_params_per_s"] > 0
    lo, hi = rec["spread"]["host_issue_s_per_call"]          # the host's speed: a module call takes > 0 s
    assert 0 < lo <= rec["host_issue_s_per_call"] <= hi and rec["sizes"]["host_issue_calls"] == 20 * 16
    assert rec["cpu_threads"] == torch.get_num_threads()
    assert rec["host_memory_bytes"] > 0 and rec["gpu_count"] == 0
    assert rec["p2p_Bps"] is None            # CPU: no GPU pairs
    assert "h2d_pinned_total_Bps" not in rec  # nor GPUs to copy to at once: the link is read as per-GPU
    assert rec["device"] == "cpu" and "memcpy" in rec["method"]


def test_a_workers_share_of_the_cores_is_timed_beside_the_all_core_optimizer_rate(tmp_path, monkeypatch):
    """Where a run worker gets other threads than torch's default (cores // GPUs on a GPU host), AdamW is
    timed again with that many and recorded as `cpu_adam_worker_share`; the all-core rate keeps its own
    spread, and torch's thread count is back to what it was."""
    import harmony.runtime
    before = torch.get_num_threads()
    monkeypatch.setattr(harmony.runtime, "default_worker_threads", lambda gpus: before + 1)
    out = tmp_path / "calibration.json"
    assert cli(["calibrate", "-o", str(out), "--quick", "--quiet", "--trials", "3"]) == 0
    rec = json.loads(out.read_text())
    share = rec["cpu_adam_worker_share"]
    assert share["threads"] == before + 1 and share["params_per_s"] > 0
    lo, hi = rec["spread"]["cpu_adamw_params_per_s"]
    assert lo <= rec["cpu_adam_params_per_s"] <= hi
    lo, hi = rec["spread"]["cpu_adamw_worker_share_params_per_s"]
    assert lo <= share["params_per_s"] <= hi
    assert torch.get_num_threads() == before == rec["cpu_threads"]


def test_reader(cal):
    c = Calibration.load(cal)
    assert c.h2d_pinned_Bps > 0
    assert c.p2p(0, 1) == min(c.d2h_pinned_Bps, c.h2d_pinned_Bps) / 2   # no measured pair: via the host
    assert c.matmul_rate("tf32") > 0


def test_bad_arguments(tmp_path, capsys):
    assert cli(["calibrate", "-o", str(tmp_path / "c.json"), "--trials", "0"]) == 2
    assert "error:" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli(["calibrate", "-o", str(tmp_path / "c.json"), "--device", "cuda"]) == 2
    assert not (tmp_path / "c.json").exists()


def test_shared_host_link_is_read_from_the_all_gpu_copies():
    """With no `host_link` key, the simulator shares the host link among GPUs exactly when copying to all
    GPUs at once moved less than 1.5x what one GPU's copy did."""
    from harmony.schedule.simulate import SimParams
    base = {"h2d_pinned_Bps": 50e9, "d2h_pinned_Bps": 50e9}
    assert not SimParams.from_calibration(base).shared_link                       # not measured: per GPU
    assert SimParams.from_calibration({**base, "h2d_pinned_total_Bps": 60e9}).shared_link
    assert not SimParams.from_calibration({**base, "h2d_pinned_total_Bps": 95e9}).shared_link
    assert not SimParams.from_calibration({**base, "h2d_pinned_total_Bps": 60e9}, host_link="per-gpu").shared_link


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_all_gpu_copies_are_measured_on_a_multi_gpu_host():
    from harmony.calibrate import Calibrator
    cal = Calibrator("cuda:0", trials=3, quick=True)
    one = cal.cuda_transfers()
    total = cal.all_gpu_transfers()
    n = torch.cuda.device_count()
    for k, single in (("h2d_pinned_total_Bps", one["h2d_pinned_Bps"]), ("d2h_pinned_total_Bps", one["d2h_pinned_Bps"])):
        # at least what one GPU moves alone would be, at most every GPU at full speed (with 30% slack)
        assert 0.7 * single <= total[k] <= 1.3 * n * single, (k, total[k], single)
    # both ways on every GPU: at least one GPU's two directions alone would move, at most every GPU's duplex
    assert 0.7 * one["duplex_pinned_Bps"] <= total["duplex_pinned_total_Bps"] <= 1.3 * n * one["duplex_pinned_Bps"]
