"""The per-pack optimizer steps small parameters as one flat tensor (harmony/runtime/optim.py): the same
updates as one torch optimizer over the parameters, including iterations where some have no gradient."""
import pytest
import torch

from harmony.optim import OptimizerConfig, make_optimizer, set_lr
from harmony.runtime.optim import PackUpdater, _PackOptimizer

CONFIGS = {
    "adamw": OptimizerConfig(kind="adamw", lr=1e-2, weight_decay=0.1, warmup_steps=2),
    "adam": OptimizerConfig(kind="adam", lr=1e-2, weight_decay=0.01),
    "sgd": OptimizerConfig(kind="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4),
    "sgd-no-momentum": OptimizerConfig(kind="sgd", lr=0.1, momentum=0.0),
}
# small ones (coalesced below 64 values) between large ones, several shapes
SHAPES = [(8, 4), (100,), (3, 3), (7,), (16, 16), (5, 2, 2), (1,), (70,)]


def _tensors(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in SHAPES]


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@pytest.mark.parametrize("coalesce_below", [0, 64, 10_000])
def test_pack_optimizer_matches_one_torch_optimizer(kind, coalesce_below):
    cfg = CONFIGS[kind]
    # what the arena holds: W, dW and K views (K pre-placed, as the arena does)
    w = _tensors(0)
    k = [[torch.empty_like(t) for _ in range(cfg.state_tensors_per_param())] for t in w]
    dw = [torch.empty_like(t) for t in w]
    po = _PackOptimizer(w, dw, k, cfg, coalesce_below)
    expect_small = [i for i, t in enumerate(w) if t.numel() < coalesce_below]
    assert po.small == (expect_small if len(expect_small) >= 2 else [])

    ref = [torch.nn.Parameter(t.clone()) for t in _tensors(0)]
    ref_opt = make_optimizer(ref, cfg)
    # iteration 3: a small and a large parameter have no gradient (torch skips them: no decay, no
    # momentum); the coalesced pack goes back to one tensor at a time there
    missing_at = {3: {3, 4}, 5: {0}}
    for it in range(7):
        grads = _tensors(100 + it)
        missing = missing_at.get(it, set())
        for i, (d, gr) in enumerate(zip(dw, grads)):
            d.copy_(gr)
            ref[i].grad = None if i in missing else gr.clone()
        n = po.step(it, missing)
        assert n == sum(t.numel() for i, t in enumerate(w) if i not in missing or
                        (i in po.small))          # coalesced ones always count; none are left after it 3
        set_lr(ref_opt, cfg, it)
        ref_opt.step()
        for i, (got, want) in enumerate(zip(w, ref)):
            torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-7,
                                       msg=lambda m: f"{kind} iteration {it} parameter {i}: {m}")
    if coalesce_below and len(expect_small) >= 2:
        assert po.small == [] and po.flat is None      # went back to one tensor at a time at iteration 3


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_coalescing_keeps_its_flat_state_until_a_gradient_is_missing(kind):
    cfg = CONFIGS[kind]
    w = _tensors(1)
    k = [[torch.zeros_like(t) for _ in range(cfg.state_tensors_per_param())] for t in w]
    dw = [torch.ones_like(t) for t in w]
    po = _PackOptimizer(w, dw, k, cfg, coalesce_below=64)
    for it in range(3):
        po.step(it, set())
    assert po.small and po.flat is not None
    # the arena's K of the coalesced parameters is not used while the flat state is
    assert all(float(k[i][0].abs().sum()) == 0.0 for i in po.small)
    small = list(po.small)
    po.step(3, {small[0]})
    # afterwards it is: the flat state was copied there before the step
    assert all(float(k[i][0].abs().sum()) > 0.0 for i in small[1:])


def test_pack_updater_refuses_a_negative_threshold():
    with pytest.raises(ValueError, match="coalesce_below"):
        PackUpdater(arena=None, bwd_packs=[], cfg=CONFIGS["sgd"], coalesce_below=-1)
