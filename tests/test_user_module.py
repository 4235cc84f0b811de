"""User nn.Modules through torch.fx: split into a chain of vLayers that computes the original output bit
for bit (skip connections threaded through), the decompose CLI path, and clear errors."""
from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harmony.cli import main as harmony_main
from harmony.decompose import load_model_json, spec_from_model_json
from harmony.models import run_chain
from harmony.reference import minibatches, train_reference
from harmony.user_module import resolve_user_module, split_module


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(F.gelu(self.fc(x)))


class SkipNet(nn.Module):
    """A long skip (h0 is used three vLayers later), a skip from the raw input, and dropout."""

    def __init__(self, d_in=12, d=16, n_classes=5, p=0.2):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.b1 = Block(d)
        self.b2 = Block(d)
        self.drop = nn.Dropout(p)
        self.b3 = Block(d)
        self.out = nn.Linear(d, n_classes)
        self.scale = nn.Parameter(torch.ones(d))    # used directly in forward (a get_attr node)

    def forward(self, x):
        h0 = self.inp(x)
        h = self.b2(self.b1(h0))
        h = self.b3(self.drop(h)) * self.scale + h0 + x.mean(-1, keepdim=True)
        return self.out(h)


def _chain_output(vlayers, *inputs):
    labels = torch.zeros(inputs[0].shape[0], dtype=torch.long)
    out = run_chain(vlayers, (*inputs, labels))
    assert out[-1] is labels                         # labels ride at the end of every tuple
    return out[0]


@pytest.mark.parametrize("split_at", [None, ["b1", "b3"], ["b2", "out"], ["b1.norm", "b3.fc"]])
def test_chain_equals_original_bit_for_bit(split_at):
    torch.manual_seed(0)
    m = SkipNet().train()                            # dropout active: the RNG is consumed in the same order
    vlayers = split_module(m, split_at)
    expected_stages = 6 if split_at is None else len(split_at) + 1   # + the ops before the first boundary
    assert len(vlayers) == expected_stages
    x = torch.randn(8, 12, requires_grad=True)
    torch.manual_seed(1)
    ref = m(x)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    torch.manual_seed(1)
    out = _chain_output(vlayers, x)
    out.square().sum().backward()
    assert torch.equal(out, ref)
    for g, r in zip([p.grad for p in m.parameters()] + [x.grad], ref_grads):
        assert torch.equal(g, r)


def test_skip_tensors_are_threaded_through_intermediate_vlayers():
    m = SkipNet()
    vlayers = split_module(m)                        # inp | b1 | b2 | drop | b3 | out
    # after 'inp', h0 and x (for x.mean) must travel with h through b1, b2 and drop to b3
    assert [v.n_in for v in vlayers] == [1, 2, 3, 3, 3, 1]
    # every parameter lives in exactly one vLayer, all are covered
    ids = [id(p) for v in vlayers for p in v.parameters()]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))


class Stacked(nn.Module):
    """Blocks held in containers, as most models hold them: a Sequential of blocks that are themselves
    Sequentials, a ModuleList iterated in forward, a skip past both of its blocks, and a head."""
    example_input = "8:float32"

    def __init__(self, d=8, n_classes=3):
        super().__init__()
        self.stem = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(3)])
        self.blocks = nn.ModuleList(Block(d) for _ in range(2))
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):
        h0 = self.stem(x)
        x = h0
        for b in self.blocks:
            x = b(x) + x
        return self.head(x + h0)


def test_default_split_takes_a_containers_children_one_level_deep():
    from harmony.user_module import default_boundaries
    m = Stacked()
    assert default_boundaries(m) == ["stem.0", "stem.1", "stem.2", "blocks.0", "blocks.1", "head"]
    assert default_boundaries(SkipNet()) == ["inp", "b1", "b2", "drop", "b3", "out"]   # no container: unchanged
    vlayers = split_module(m)
    assert len(vlayers) == 6
    x = torch.randn(4, 8)
    assert torch.equal(_chain_output(vlayers, x), m(x))


def _write(tmp_path, src: str, name="usermod.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(src))
    return str(path)


USER_SRC = """
    import torch
    from torch import nn

    class Net(nn.Module):
        example_input = "3x8x8:float32"

        def __init__(self, width=4, n_classes=3):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 3, padding=1)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(width, n_classes)

        def forward(self, x):
            h = torch.relu(self.conv1(x))
            h = torch.relu(self.conv2(h)) + h          # residual across the conv2 vLayer boundary
            return self.fc(torch.flatten(self.pool(h), 1))

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            if x.dim() == 2:                           # control flow on a traced value: not traceable
                return self.fc(x)
            return -self.fc(x)

    class Holder(nn.Module):                           # Branchy inside a boundary is called as a whole
        def __init__(self):
            super().__init__()
            self.inner = Branchy()
            self.head = nn.Linear(2, 2)

        def forward(self, x):
            return self.head(self.inner(x))

    class SizeAcross(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x):
            n = x.size(1)                              # an int used after the next boundary
            return self.b(self.a(x)) * n

    def make_net(width=4):
        return Net(width=width)

    not_a_module = 3
"""


def test_decompose_cli_user_module_roundtrip(tmp_path, capsys):
    path = _write(tmp_path, USER_SRC)
    out = tmp_path / "m.json"
    assert harmony_main(["decompose", f"{path}:make_net", "-o", str(out), "--set", "width=6"]) == 0
    rec = load_model_json(out)
    assert rec["source"]["kind"] == "module" and rec["num_vlayers"] == 4 + 1
    # the default boundaries are recorded as resolved, so the file rebuilds these vLayers if the default changes
    assert rec["source"]["split_at"] and len(rec["source"]["split_at"]) == 4
    assert f"split at: --split-at {','.join(rec['source']['split_at'])}" in capsys.readouterr().err
    assert rec["input"] == [{"shape": [3, 8, 8], "dtype": "float32"}, {"shape": [], "dtype": "int64"}]
    spec = spec_from_model_json(rec)
    layers = spec.build("cpu", seed=0)
    assert sum(p.numel() for p in layers.parameters()) == rec["total_params"] == 3 * 6 * 9 + 6 + 6 * 6 * 9 + 6 + 6 * 3 + 3
    # the rebuilt chain equals the module built the same way, and it trains with the reference trainer
    torch.manual_seed(0)
    from importlib.util import module_from_spec, spec_from_file_location
    s = spec_from_file_location("usermod_check", path)
    mod = module_from_spec(s)
    s.loader.exec_module(mod)
    orig = mod.make_net(width=6)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(_chain_output(list(layers)[:-1], x), orig(x))
    losses, _ = train_reference(spec, minibatches(spec, 4, 2), seed=0)
    assert len(losses) == 2 and all(l == l for l in losses)


def test_split_at_boundaries_from_the_cli_and_mse_loss(tmp_path):
    path = _write(tmp_path, USER_SRC)
    out = tmp_path / "m.json"
    assert harmony_main(["decompose", f"{path}:Net", "-o", str(out), "--split-at", "conv2,fc",
                         "--set", "loss=\"mse\"", "--example-input", "3x6x6:float32"]) == 0
    rec = load_model_json(out)
    # conv1 (before the first boundary) is a vLayer of its own
    assert [v["kind"] for v in rec["vlayers"]] == ["user.prologue", "user.Conv2d", "user.Linear", "loss.mse"]
    assert rec["input"][-1] == {"shape": [3], "dtype": "float32"}      # mse target has the output's shape
    # the residual h is conv2's input: it crosses the boundary once, then the labels
    assert rec["vlayers"][0]["outputs"] == [{"shape": [4, 6, 6], "dtype": "float32"}, rec["input"][-1]]


def test_untraceable_module_error(tmp_path, capsys):
    path = _write(tmp_path, USER_SRC)
    with pytest.raises(ValueError, match="torch.fx cannot trace Branchy"):
        resolve_user_module(f"{path}:Branchy", {}, example_input="4:float32")
    # the same code inside a boundary submodule is fine: it is called as a whole
    spec, _ = resolve_user_module(f"{path}:Holder", {}, example_input="4:float32", split_at="inner,head")
    assert len(spec.build("meta")) == 3
    assert harmony_main(["decompose", f"{path}:Branchy", "-o", str(tmp_path / "x.json"),
                         "--example-input", "4:float32"]) == 2
    assert "cannot trace" in capsys.readouterr().err


def test_boundary_that_is_not_a_submodule(tmp_path):
    with pytest.raises(ValueError, match=r"boundary 'b4' is not a submodule of SkipNet.*top-level submodules: inp, b1"):
        split_module(SkipNet(), ["b1", "b4"])
    with pytest.raises(ValueError, match="nested"):
        split_module(SkipNet(), ["b1", "b1.fc"])
    path = _write(tmp_path, USER_SRC)
    with pytest.raises(ValueError, match="'conv3' is not a submodule.*Did you mean conv"):
        resolve_user_module(f"{path}:Net", {}, split_at="conv3")
    # a container's element that forward never calls (a default boundary): the error names the cut to use instead
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            for b in self.blocks[:2]:
                x = b(x)
            return self.head(x)
    with pytest.raises(ValueError, match=r"\['blocks.2'\] are never called .* --split-at blocks.0,blocks.1,head$"):
        split_module(Unused())


def test_unknown_names(tmp_path):
    path = _write(tmp_path, USER_SRC)
    with pytest.raises(ValueError, match="cannot import 'no_such_pkg.models'"):
        resolve_user_module("no_such_pkg.models:Net", {}, example_input="4:float32")
    with pytest.raises(ValueError, match="has no attribute 'Nett'.*Did you mean Net"):
        resolve_user_module(f"{path}:Nett", {})
    with pytest.raises(ValueError, match="not an nn.Module"):
        resolve_user_module(f"{path}:not_a_module", {})
    with pytest.raises(ValueError, match="--example-input"):
        resolve_user_module(f"{path}:Holder", {})
    with pytest.raises(ValueError, match="bad --example-input"):
        resolve_user_module(f"{path}:Holder", {}, example_input="4xfloat32")
    with pytest.raises(ValueError, match="unknown loss"):
        resolve_user_module(f"{path}:Net", {"loss": "hinge"})


def test_non_tensor_across_a_boundary_is_a_clear_error(tmp_path):
    path = _write(tmp_path, USER_SRC)
    with pytest.raises(ValueError, match="only tensors may cross vLayer boundaries"):
        resolve_user_module(f"{path}:SizeAcross", {}, example_input="4:float32")


def stacked_schedule(mode: str, gpus: int, minibatch: int, ubatch_fwd: int, ubatch_bwd: int):
    """(spec, schedule record, task graph) of this file's Stacked with tests/test_runtime.py's P1 packing. The
    workers import the module by its file, as they would a user's."""
    from harmony.decompose import decompose_model
    from harmony.schedule.io import make_schedule_record
    from harmony.schedule.tasks import ScheduleConfig, build_task_graph
    from test_runtime import packings
    spec, source = resolve_user_module(f"{__file__}:Stacked", {})
    mj = decompose_model(spec, source=source, with_flops=False)
    L = mj["num_vlayers"]
    bwd, fwd = packings(L)["P1"]
    g = build_task_graph(ScheduleConfig(mode=mode, gpus=gpus, minibatch=minibatch, ubatch_fwd=ubatch_fwd,
                                        ubatch_bwd=ubatch_bwd, bwd_packs=bwd, fwd_packs=fwd), L)
    return spec, make_schedule_record(mj, g), g


def test_the_runtime_trains_a_user_module_as_plain_pytorch_does_in_both_modes():
    """A user's own nn.Module (blocks held in containers, a skip past two of them) through the runtime on two
    CPU workers, vPP with u_fwd != u_bwd and vDP: the workers rebuild it from model.json's source record, and
    its losses and trained parameters equal plain PyTorch's on the same minibatches (to float rounding: the
    runtime sums microbatch gradients, plain PyTorch takes the minibatch at once)."""
    from harmony.reference import max_relative_difference
    from harmony.runtime import train_many
    D, iters = 8, 3
    runs = []
    for mode, uf, ub in (("vPP", 4, 2), ("vDP", 2, 2)):
        spec, rec, g = stacked_schedule(mode, 2, D, uf, ub)
        assert g.config.bwd_packs[-1][1] == 3 + 2 + 1 + 1      # stem.0-2, blocks.0-1, head, loss
        runs.append((rec, g, {"iters": iters}))
    ref_losses, ref_layers = train_reference(spec, minibatches(spec, D, iters, 1234), seed=0)
    for (losses, params, _), mode in zip(train_many(runs), ("vPP", "vDP")):
        assert max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True)) <= 1e-5, (mode, losses, ref_losses)
        assert max_relative_difference(params, list(ref_layers.parameters())) <= 1e-4, mode
