"""The runtime's correctness test on CUDA (run through the device tool): one tiny model per family, vPP and
vDP, N = 1 (and N = 2 when two GPUs are present), against plain PyTorch on the same GPU, fp32 strict (no
TF32), with the tolerance rule of tests/test_runtime.py. Skipped without CUDA."""
from __future__ import annotations

import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

os.environ.setdefault("HARMONY_DETERMINISTIC", "1")

from harmony.reference import max_relative_difference, minibatches, train_reference  # noqa: E402
from harmony.runtime import train_many  # noqa: E402
from harmony.runtime.worker import is_batch_dependent  # noqa: E402
from harmony.schedule.tasks import count_bytes, layer_sizes_from_model  # noqa: E402
from test_runtime import (D, FAMILIES, ITERS, SENSITIVE, TOL, loss_microbatches,  # noqa: E402
                          microbatched_reference, schedule)


def _cases():
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out = []
    for m in FAMILIES:
        bn = any(is_batch_dependent(l) for l in __import__("harmony.models", fromlist=["get_model"]).get_model(m).build("meta"))
        u = (2, 2) if bn else (4, 3)
        out += [(m, "vPP", 1, 3, 3, "P1"), (m, "vDP", 1, *u, "P2")]
        if n >= 2:
            out += [(m, "vPP", 2, *u, "P2"), (m, "vDP", 2, 3 if not bn else 2, 3 if not bn else 2, "P1")]
    return out


@pytest.fixture(scope="module")
def results():
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    from harmony.gpumem import set_precision
    set_precision("fp32")
    out = {}
    for N in (1, 2):
        cs = [c for c in _cases() if c[2] == N]
        if not cs:
            continue
        built = [schedule(c[0], c[1], N, c[3], c[4], c[5]) for c in cs]
        res = train_many([(rec, g, {"iters": ITERS, "device": "cuda"}) for _, rec, g in built])
        for c, b, r in zip(cs, built, res):
            out[c] = (b, r)
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: "-".join(map(str, c)))
def test_gpu_matches_pytorch(results, case):
    (spec, rec, g), (losses, params, kinds) = results[case]
    batches = minibatches(spec, D, ITERS, 1234)
    mb_losses, mb_params = microbatched_reference(spec, batches, loss_microbatches(g), device="cuda")
    if any(is_batch_dependent(l) for l in spec.build("meta")):
        ref_losses, ref_params, inherent = mb_losses, mb_params, [0.0] * len(mb_params)
    else:
        ref_losses, layers = train_reference(spec, batches, seed=0, device="cuda")
        ref_params = list(layers.parameters())
        inherent = [max_relative_difference([a], [b]) for a, b in zip(mb_params, ref_params)]
    rel_loss = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    worst = max(max_relative_difference([a], [b]) for a, b in zip(params, ref_params))
    print(f"{case}: loss rel {rel_loss:.2e}, worst parameter rel {worst:.2e}")
    assert rel_loss <= TOL
    for i, (a, b, inh) in enumerate(zip(params, ref_params, inherent)):
        rel = max_relative_difference([a], [b])
        assert rel <= max(TOL, SENSITIVE * inh), (case, i, rel, inh)
    want = count_bytes(g, layer_sizes_from_model(rec["model"]))
    for k in kinds:
        assert k == {kind: want[kind] for kind in k}
