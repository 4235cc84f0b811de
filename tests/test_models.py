"""Model zoo: the paper's parameter/vLayer counts, the real architectures (against torchvision, transformers
and plain-PyTorch references on the same weights), parametric configs, and that tiny variants train."""
from __future__ import annotations

import functools
import math
import time

import pytest
import torch
from torch import nn

from harmony.models import get_model, list_models, paper_facts, run_chain
from harmony.models.bert import BertLayer
from harmony.models.gpt2 import GPT2Block
from harmony.optim import OptimizerConfig
from harmony.reference import minibatches, train_reference

PAPER_MODELS = ["bert-large", "bert96", "gpt2-medium", "gpt2-xl", "gpt2-10b", "gpt2-20b", "gpt2-30b", "gpt2-40b",
                "vgg416", "resnet1026"]
TINY = ["bert-tiny", "gpt2-tiny", "vgg-tiny", "resnet-tiny"]


def n_params(layers) -> int:
    return sum(p.numel() for p in layers.parameters())


@functools.lru_cache(maxsize=None)
def meta_chain(name: str):
    """The named model's chain on the meta device, built once per test session."""
    return get_model(name).build("meta")


def test_every_paper_model_is_registered_with_its_facts():
    names = list_models()
    for name in PAPER_MODELS + TINY + ["vgg16", "resnet34"]:
        assert name in names
    for name in PAPER_MODELS:
        assert {"params", "vlayers"} <= set(paper_facts(name)), name


@pytest.mark.parametrize("name", PAPER_MODELS)
def test_paper_parameter_and_vlayer_counts(name):
    layers = meta_chain(name)
    facts = paper_facts(name)
    assert abs(n_params(layers) - facts["params"]) / facts["params"] < 0.01
    assert len(layers) == facts["vlayers"]


def test_vlayer_structure_as_in_the_paper():
    # n_layer + 3 + loss for GPT-2; embeddings + encoder layers + 2 head vLayers + loss for BERT
    for n in (3, 9):
        assert len(get_model("gpt2-tiny", n_layer=n).build("meta")) == n + 4
    assert len(get_model("bert-large", n_layer=7).build("meta")) == 7 + 4
    kinds = [getattr(l, "kind") for l in meta_chain("resnet1026")]
    assert kinds.count("resnet.basic_block") == 512 and kinds[0] == "resnet.stem" and kinds[-1].startswith("loss.")
    kinds = [getattr(l, "kind") for l in meta_chain("vgg416")]
    assert kinds.count("vgg.conv") == 413 and kinds.count("vgg.fc") == 3


def test_standard_depth_matches_torchvision_parameter_counts():
    # torchvision.models.vgg16() and resnet34() parameter counts (torchvision's documented numbers)
    assert n_params(meta_chain("vgg16")) == 138_357_544
    assert n_params(meta_chain("resnet34")) == 21_797_672


def test_gpt2_lm_head_is_untied():
    layers = get_model("gpt2-tiny").build("cpu")
    assert layers[-2].lm_head.weight.data_ptr() != layers[0].wte.weight.data_ptr()
    c = get_model("gpt2-tiny").config
    assert n_params(layers) == (2 * c.vocab_size * c.n_embd + c.n_ctx * c.n_embd + 2 * c.n_embd
                                + c.n_layer * (12 * c.n_embd ** 2 + 13 * c.n_embd))


# ------------------------------------------------------------------------------------------------
# torchvision (skipped where it does not import, e.g. the CPU torch build of the dev machines)
# ------------------------------------------------------------------------------------------------
def _torchvision():
    try:
        import torchvision
        return torchvision
    except Exception as e:  # noqa: BLE001 - a broken build raises RuntimeError, not ImportError
        pytest.skip(f"torchvision unavailable: {type(e).__name__}: {e}")


@pytest.mark.parametrize("name,tv_name", [("vgg16", "vgg16"), ("resnet34", "resnet34")])
def test_standard_depth_matches_torchvision_outputs(name, tv_name):
    tv = _torchvision()
    ref = getattr(tv.models, tv_name)(weights=None).eval()
    ours = get_model(name).build("cpu", seed=0).eval()
    ours_sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert n_params(ours) == sum(p.numel() for p in ref.parameters())
    assert [tuple(v.shape) for v in ours_sd.values()] == [tuple(v.shape) for v in ref_sd.values()]
    ref.load_state_dict(dict(zip(ref_sd.keys(), ours_sd.values())))
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        (logits, _) = run_chain(ours[:-1], (x, torch.zeros(2, dtype=torch.long)))
        expected = ref(x)
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Transformer blocks vs independent plain-PyTorch references on the same weights
# ------------------------------------------------------------------------------------------------
def _layer_norm(x, ln):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _softmax_attention(q, k, v, additive_mask):
    # q, k, v: [B, nh, T, hs]; explicit softmax(QK^T / sqrt(hs) + mask) V
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + additive_mask
    return torch.softmax(scores, dim=-1) @ v


def _heads(t, nh):
    B, T, C = t.shape
    return t.view(B, T, nh, C // nh).transpose(1, 2)


def _merge(t):
    B, nh, T, hs = t.shape
    return t.transpose(1, 2).reshape(B, T, nh * hs)


def test_gpt2_block_matches_plain_reference():
    spec = get_model("gpt2-tiny", n_embd=48, n_head=3)
    c = spec.config
    torch.manual_seed(0)
    blk = GPT2Block(c).eval()
    for p in blk.parameters():                      # non-trivial LayerNorm weights and biases too
        p.data.normal_(0, 0.1)
    h = torch.randn(2, 10, c.n_embd)
    with torch.no_grad():
        out, lab = blk(h, torch.zeros(2, 10, dtype=torch.long))
        a = blk.attn
        x = _layer_norm(h, blk.ln_1)
        qkv = x @ a.c_attn.weight.T + a.c_attn.bias
        q, k, v = (_heads(t, c.n_head) for t in qkv.split(c.n_embd, dim=-1))
        causal = torch.triu(torch.full((10, 10), float("-inf")), diagonal=1)
        y = _merge(_softmax_attention(q, k, v, causal)) @ a.c_proj.weight.T + a.c_proj.bias
        h1 = h + y
        x = _layer_norm(h1, blk.ln_2)
        u = x @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias
        u = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))   # gelu_new
        expected = h1 + u @ blk.mlp.c_proj.weight.T + blk.mlp.c_proj.bias
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_bert_layer_matches_plain_reference_with_padding():
    c = get_model("bert-tiny", hidden=48, n_head=3, ffn=96).config
    torch.manual_seed(0)
    layer = BertLayer(c).eval()
    for p in layer.parameters():
        p.data.normal_(0, 0.1)
    S = 12
    h = torch.randn(2, S, c.hidden)
    mask = torch.ones(2, S, dtype=torch.long)
    mask[0, 7:] = 0                                  # sample 0 is padded after 7 tokens
    with torch.no_grad():
        out, mask_out, lab = layer(h, mask, torch.zeros(2, dtype=torch.long))
        at = layer.attention
        q, k, v = (_heads(x @ lin.weight.T + lin.bias, c.n_head) for x, lin in
                   ((h, at.query), (h, at.key), (h, at.value)))
        additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min  # HF's mask
        a = _merge(_softmax_attention(q, k, v, additive)) @ layer.attention_output.weight.T + layer.attention_output.bias
        h1 = _layer_norm(h + a, layer.attention_LayerNorm)
        u = h1 @ layer.intermediate.weight.T + layer.intermediate.bias
        u = 0.5 * u * (1 + torch.erf(u / math.sqrt(2)))
        expected = _layer_norm(h1 + u @ layer.output.weight.T + layer.output.bias, layer.output_LayerNorm)
    assert mask_out is mask
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Hugging Face transformers (optional test dependency: `pip install transformers`)
# ------------------------------------------------------------------------------------------------
def test_gpt2_matches_transformers():
    transformers = pytest.importorskip("transformers")
    spec = get_model("gpt2-tiny", n_layer=2, n_embd=48, n_head=3, n_ctx=32, seq_len=16, vocab_size=97)
    c = spec.config
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=c.layer_norm_eps,
        activation_function="gelu_new", attn_implementation="eager")).eval()
    ours = spec.build("cpu", seed=0).eval()
    sd = hf.state_dict()
    with torch.no_grad():
        ours[0].wte.weight.copy_(sd["transformer.wte.weight"])
        ours[0].wpe.weight.copy_(sd["transformer.wpe.weight"])
        for i in range(c.n_layer):
            b, p = ours[1 + i], f"transformer.h.{i}."
            for name in ("ln_1", "ln_2"):
                getattr(b, name).weight.copy_(sd[p + name + ".weight"])
                getattr(b, name).bias.copy_(sd[p + name + ".bias"])
            for mod, key in ((b.attn.c_attn, "attn.c_attn"), (b.attn.c_proj, "attn.c_proj"),
                             (b.mlp.c_fc, "mlp.c_fc"), (b.mlp.c_proj, "mlp.c_proj")):
                mod.weight.copy_(sd[p + key + ".weight"].T)     # HF's Conv1D stores [in, out]
                mod.bias.copy_(sd[p + key + ".bias"])
        ours[-3].ln_f.weight.copy_(sd["transformer.ln_f.weight"])
        ours[-3].ln_f.bias.copy_(sd["transformer.ln_f.bias"])
        ours[-2].lm_head.weight.copy_(sd["lm_head.weight"])   # HF ties it to wte; ours is a separate copy
        ids, labels = spec.synthetic_batch(2, torch.Generator().manual_seed(0))
        logits, _ = run_chain(ours[:-1], (ids, labels))
        expected = hf(input_ids=ids).logits
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)


def test_bert_matches_transformers():
    transformers = pytest.importorskip("transformers")
    spec = get_model("bert-tiny", n_layer=2, hidden=48, n_head=3, ffn=96, vocab_size=97, max_position=32, seq_len=16)
    c = spec.config
    hf = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden, num_hidden_layers=c.n_layer, num_attention_heads=c.n_head,
        intermediate_size=c.ffn, max_position_embeddings=c.max_position, type_vocab_size=c.type_vocab_size,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=c.layer_norm_eps,
        num_labels=c.n_classes, attn_implementation="eager")).eval()
    ours = spec.build("cpu", seed=0).eval()
    sd = hf.state_dict()
    names = {"word_embeddings": "bert.embeddings.word_embeddings", "position_embeddings": "bert.embeddings.position_embeddings",
             "token_type_embeddings": "bert.embeddings.token_type_embeddings", "LayerNorm": "bert.embeddings.LayerNorm"}
    layer_names = {"attention.query": "attention.self.query", "attention.key": "attention.self.key",
                   "attention.value": "attention.self.value", "attention_output": "attention.output.dense",
                   "attention_LayerNorm": "attention.output.LayerNorm", "intermediate": "intermediate.dense",
                   "output": "output.dense", "output_LayerNorm": "output.LayerNorm"}
    with torch.no_grad():
        def copy(mod, prefix):
            mod.weight.copy_(sd[prefix + ".weight"])
            if getattr(mod, "bias", None) is not None:
                mod.bias.copy_(sd[prefix + ".bias"])
        for ours_name, hf_name in names.items():
            copy(getattr(ours[0], ours_name), hf_name)
        for i in range(c.n_layer):
            for ours_name, hf_name in layer_names.items():
                copy(ours[1 + i].get_submodule(ours_name), f"bert.encoder.layer.{i}.{hf_name}")
        copy(ours[-3].dense, "bert.pooler.dense")
        copy(ours[-2].classifier, "classifier")
        ids, tt, mask, label = spec.synthetic_batch(3, torch.Generator().manual_seed(0))
        assert (mask == 0).any() and (tt == 1).any()        # padding and both segments are exercised
        logits, _ = run_chain(ours[:-1], (ids, tt, mask, label))
        expected = hf(input_ids=ids, token_type_ids=tt, attention_mask=mask).logits
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Parametric configs, dropout, the vLayer contract, training
# ------------------------------------------------------------------------------------------------
def test_families_are_parametric():
    assert get_model("bert-large", seq_len=128).input_specs()[0].shape == (128,)
    assert get_model("gpt2-tiny", seq_len=16).input_specs()[0].shape == (16,)
    assert get_model("vgg-tiny", image_size=48).input_specs()[0].shape == (3, 48, 48)
    assert len(get_model("resnet-tiny", blocks=(2, 1, 1, 3)).build("meta")) == 1 + 7 + 2
    assert len(get_model("vgg-tiny", extra_convs=2).build("meta")) == 8 + 5 * 2 + 4
    with pytest.raises(ValueError):
        get_model("gpt2-tiny", n_embd=50, n_head=3)
    with pytest.raises(TypeError):
        get_model("gpt2-tiny", no_such_field=1)


@pytest.mark.parametrize("name", ["resnet-tiny", "vgg-tiny"])
def test_channels_last_is_the_same_model_in_another_memory_format(name):
    """`channels_last=True` (docs/performance.md entry 105): the same weights, the activations in channels-last
    format from the first vLayer on (an NCHW input, as a stash or a receive delivers one, is converted), the
    same outputs and gradients up to fp32 rounding; the convolutional vLayers' signatures differ, so a
    profile never shares one format's times with the other."""
    from harmony.decompose import decompose_model
    # resnet-tiny at 64 pixels: at 32 its last stage is 1x1 and BatchNorm over two values turns rounding into
    # sign flips (tests/test_runtime.py, OVERRIDES)
    size = {"image_size": 64} if name == "resnet-tiny" else {}
    plain, cl = (get_model(name, channels_last=v, **size).build("cpu", seed=0) for v in (False, True))
    x, labels = get_model(name, **size).synthetic_batch(2, torch.Generator().manual_seed(1))
    ys = []
    for layers in (plain, cl):
        xs, inner = (x.requires_grad_(False), labels), []
        for layer in layers:
            xs = layer(*xs)
            inner.append(xs[0])
        xs[0].backward()
        ys.append((inner, [p.grad for p in layers.parameters()]))
    (a_in, a_g), (b_in, b_g) = ys
    assert b_in[0].is_contiguous(memory_format=torch.channels_last) and a_in[0].is_contiguous()
    for a, b in zip(a_in, b_in, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(a_g, b_g, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)
    sig = [[v["signature"] for v in decompose_model(get_model(name, channels_last=v), with_flops=False)["vlayers"]]
           for v in (False, True)]
    # every vLayer whose input is a 4-d activation converts it: the convolutions and the heads that pool
    vl = decompose_model(get_model(name), with_flops=False)["vlayers"]
    conv = [i for i, v in enumerate(vl) if v["kind"] in ("resnet.stem", "resnet.basic_block", "vgg.conv",
                                                         "resnet.head")
            or (v["kind"] == "vgg.fc" and i > 0 and vl[i - 1]["kind"] == "vgg.conv")]
    assert conv and all(sig[0][i] != sig[1][i] for i in conv)
    assert all(sig[0][i] == sig[1][i] for i in range(len(sig[0])) if i not in conv)


@pytest.mark.parametrize("name,fields", [("gpt2-tiny", {"dropout": 0.25}),
                                         ("bert-tiny", {"hidden_dropout": 0.25, "attn_dropout": 0.25}),
                                         ("vgg-tiny", {"dropout": 0.25}), ("resnet-tiny", {"dropout": 0.25})])
def test_dropout_rate_comes_from_the_config(name, fields):
    layers = get_model(name, **fields).build("meta")
    rates = [m.p for m in layers.modules() if isinstance(m, nn.Dropout)]
    rates += [m.attn_dropout for m in layers.modules() if hasattr(m, "attn_dropout")]
    assert rates and all(r == 0.25 for r in rates)


def test_paper_models_default_to_the_original_dropout():
    assert get_model("gpt2-xl").config.dropout == 0.1
    assert get_model("bert-large").config.hidden_dropout == 0.1
    assert get_model("vgg416").config.dropout == 0.5


@pytest.mark.parametrize("name,fields", [("bert-tiny", {}), ("bert-tiny", {"head": "mlm"}), ("gpt2-tiny", {}),
                                         ("vgg-tiny", {}), ("resnet-tiny", {})])
def test_vlayer_contract_and_microbatch_exactness(name, fields):
    spec = get_model(name, **fields)
    layers = spec.build("cpu", seed=0)
    if spec.family == "resnet":
        layers.eval()   # BatchNorm in train mode normalises per microbatch: not microbatch-exact by design
    batch = spec.synthetic_batch(4, torch.Generator().manual_seed(0))
    assert [tuple(t.shape[1:]) for t in batch] == [s.shape for s in spec.input_specs()]
    assert [str(t.dtype) for t in batch] == ["torch." + s.dtype for s in spec.input_specs()]
    (loss,) = run_chain(layers, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    halves = [run_chain(layers, tuple(t[i:i + 2] for t in batch))[0] for i in (0, 2)]
    torch.testing.assert_close(loss, (halves[0] + halves[1]) / 2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", TINY)
def test_tiny_variant_learns_a_fixed_batch_quickly(name):
    spec = get_model(name)
    spec.optimizer = OptimizerConfig(kind="adamw", lr=3e-3)
    batch = minibatches(spec, 8, 1)[0]
    t0 = time.process_time()   # CPU time: wall time on a shared 2-core machine says more about the neighbours
    losses, _ = train_reference(spec, [batch] * 6, seed=0)
    cpu_s = time.process_time() - t0
    assert losses[-1] < losses[0], losses
    # about a second (0.4-1.6 CPU s on a 2-core dev machine); the bound only catches a variant gone big
    assert cpu_s < 10.0, f"{name}: 6 iterations took {cpu_s:.2f} CPU s"


@pytest.mark.parametrize("name,fields", [("gpt2-tiny", {}), ("bert-tiny", {}), ("bert-tiny", {"head": "mlm"}),
                                         ("vgg-tiny", {}), ("vgg-tiny", {"batch_norm": True}),
                                         ("resnet-tiny", {}), ("resnet-tiny", {"zero_init_residual": True})])
def test_every_parameter_left_uninitialised_is_initialised_by_its_family(monkeypatch, name, fields):
    """The families build modules whose parameters they initialise themselves without torch's default draw
    (models.base.uninitialised). Here those parameters start as NaN: after the build, none may be left."""
    real = nn.utils.skip_init

    def nan_filled(*args, **kwargs):
        module = real(*args, **kwargs)
        with torch.no_grad():
            for p in module.parameters():
                p.fill_(float("nan"))
        return module
    monkeypatch.setattr(nn.utils, "skip_init", nan_filled)
    layers = get_model(name, **fields).build("cpu", seed=0)
    assert any(True for _ in layers.parameters())
    for pname, p in layers.named_parameters():
        assert not torch.isnan(p).any(), f"{name} {fields}: {pname} was never initialised"


def test_building_on_meta_draws_nothing_and_cpu_draws_are_unchanged():
    """A normal draw into a meta tensor is skipped (models.base.NoDrawsOnMeta): torch would import
    torch._dynamo for it, 1-4 s in every process that builds a model on meta. Checked in a fresh
    interpreter, since another test may have imported torch._dynamo here already. Draws into CPU tensors
    still happen, in the seed's stream: two builds with one seed agree, and the weights are not constant."""
    import subprocess
    import sys
    code = ("import sys\nfrom harmony.models import get_model\n"
            "for n in ('gpt2-tiny', 'bert-tiny', 'vgg-tiny', 'resnet-tiny'):\n    get_model(n).build('meta')\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
    a, b = (get_model("gpt2-tiny").build("cpu", seed=3) for _ in range(2))
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    wte = a[0].wte.weight
    assert wte.std() > 0, "the embedding was not drawn"


def test_large_draws_are_parallel_chunks_that_do_not_depend_on_the_thread_count(monkeypatch):
    """models.base.draw_normal_ splits a large CPU draw into DRAW_CHUNK-element chunks, each seeded from the
    global stream: one seed gives one tensor whatever the pool's size, with the requested mean and std."""
    from concurrent.futures import ThreadPoolExecutor

    from harmony.models import base
    monkeypatch.setattr(base, "DRAW_CHUNK", 1 << 12)
    draws = []
    for threads in (1, 3):
        monkeypatch.setattr(base, "_draw_pool", ThreadPoolExecutor(threads))
        torch.manual_seed(7)
        draws.append(base.draw_normal_(torch.empty(10 * (1 << 12) + 5), mean=1.0, std=0.5))
        after = torch.rand(1)                     # the global stream moved on by the same amount
        draws.append(after)
    assert torch.equal(draws[0], draws[2]) and torch.equal(draws[1], draws[3])
    x = draws[0]
    assert abs(float(x.mean()) - 1.0) < 0.02 and abs(float(x.std()) - 0.5) < 0.02
    assert len(torch.unique(x[:1 << 12] - x[1 << 12:2 << 12])) > 100     # chunks are not copies of each other
    meta = torch.empty(1 << 20, device="meta")
    assert base.draw_normal_(meta) is meta


def test_kaiming_normal_has_torchs_std():
    from harmony.models.base import kaiming_normal_
    w = torch.empty(256, 64, 3, 3)
    for mode, fan in (("fan_out", 256 * 9), ("fan_in", 64 * 9)):
        torch.manual_seed(0)
        kaiming_normal_(w, mode=mode, nonlinearity="relu")
        assert abs(float(w.std()) / math.sqrt(2.0 / fan) - 1) < 0.02, mode
    with pytest.raises(ValueError, match="mode"):
        kaiming_normal_(w, mode="fan_avg")


@pytest.mark.parametrize("name", [*TINY, "mlp-tiny"])
def test_build_each_draws_the_lists_weights_and_holds_one_vlayer_at_a_time(name):
    """ModelSpec.build_each, which the runtime's launcher fills the host arena from: the weights of the
    whole list built at once from the same seed (what PyTorch's reference trains), each vLayer built only
    when taken, so that a caller who drops each one holds one at a time (at 13 B parameters the whole
    model beside the arena is 50 GiB of host memory)."""
    import weakref
    from harmony.models.base import NoDrawsOnMeta
    spec = get_model(name)
    torch.manual_seed(5)
    with NoDrawsOnMeta():
        whole = spec.build_vlayers()
    gone, n = [], 0
    for i, layer in enumerate(spec.build_each("cpu", seed=5)):
        assert all(r() is None for r in gone), f"vLayer {i} was built while an earlier one was still held"
        ref = whole[i].state_dict()
        got = layer.state_dict()
        assert list(got) == list(ref)
        for k in ref:
            assert torch.equal(got[k], ref[k]), f"vLayer {i} {k}"
        gone.append(weakref.ref(layer))
        del layer, got
        n += 1
    assert n == len(whole)
