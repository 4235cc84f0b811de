"""GPT-2 (Radford et al. 2019) as a chain of vLayers: embedding, n_layer blocks, final LayerNorm, LM head, loss.

Named configurations: `gpt2-medium`, `gpt2-xl`, `gpt2-10b/20b/30b/40b` (the paper's billion-parameter
models: width 4096, 32 heads, 50/100/150/200 blocks) and `gpt2-tiny` (CPU tests).

The LM head is a separate vLayer with its *own* weight, i.e. untied from the token embedding (HF's
GPT2LMHeadModel ties them). The paper's parameter counts include this untied head (GPT2-XL: 1.638 B, not
1.56 B); with vLayers swapped independently a tied weight would have to live in two places anyway.

Data: `input_ids[T]` (int64) and `labels[T]` (int64, already shifted: labels[t] is the token after
input_ids[t]; -100 is ignored by the loss). The loss is the mean token cross-entropy; for the contract's
microbatch scaling to be exact every sample must have the same number of counted tokens (true for the
synthetic data and fixed-length LM chunks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harmony.models.base import ModelSpec, TensorSpec, draw_normal_, register, uninitialised
from harmony.models.mlp import CrossEntropyLoss
from harmony.optim import OptimizerConfig


@dataclass
class GPT2Config:
    n_layer: int = 24          # transformer blocks
    n_embd: int = 1024         # width
    n_head: int = 16           # attention heads (n_embd % n_head == 0)
    n_ctx: int = 1024          # max positions (size of the position embedding)
    seq_len: int = 1024        # tokens per sample (<= n_ctx)
    vocab_size: int = 50257
    dropout: float = 0.1       # embd/resid/attn dropout of the original GPT-2
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.seq_len > self.n_ctx:
            raise ValueError(f"seq_len={self.seq_len} exceeds n_ctx={self.n_ctx}")


class GPT2Embedding(nn.Module):
    """(input_ids[B,T], labels) -> (h[B,T,C], labels)"""
    kind = "gpt2.embedding"

    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = uninitialised(nn.Embedding, c.vocab_size, c.n_embd)
        self.wpe = uninitialised(nn.Embedding, c.n_ctx, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        draw_normal_(self.wte.weight, std=c.init_std)
        draw_normal_(self.wpe.weight, std=0.01)

    def forward(self, input_ids, labels):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.drop(self.wte(input_ids) + self.wpe(pos)), labels


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = uninitialised(nn.Linear, c.n_embd, 3 * c.n_embd)     # initialised by GPT2Block
        self.c_proj = uninitialised(nn.Linear, c.n_embd, c.n_embd)
        self.attn_dropout = c.dropout
        self.resid_drop = nn.Dropout(c.dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, T, C] -> [B, nh, T, hs]
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # [B, nh, T, hs] -> [B, T, C]
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.c_fc = uninitialised(nn.Linear, c.n_embd, 4 * c.n_embd)        # initialised by GPT2Block
        self.c_proj = uninitialised(nn.Linear, 4 * c.n_embd, c.n_embd)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))  # GPT-2's "gelu_new"


class GPT2Block(nn.Module):
    """Pre-LN transformer block: (h, labels) -> (h, labels)"""
    kind = "gpt2.block"

    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)
        self.mlp = MLP(c)
        residual_std = c.init_std / math.sqrt(2 * c.n_layer)   # GPT-2's scaled init of residual projections
        for lin, std in ((self.attn.c_attn, c.init_std), (self.attn.c_proj, residual_std),
                         (self.mlp.c_fc, c.init_std), (self.mlp.c_proj, residual_std)):
            draw_normal_(lin.weight, std=std)
            nn.init.zeros_(lin.bias)

    def forward(self, h, labels):
        h = h + self.attn(self.ln_1(h))
        h = h + self.mlp(self.ln_2(h))
        return h, labels


class GPT2FinalNorm(nn.Module):
    kind = "gpt2.ln_f"

    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_f = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)

    def forward(self, h, labels):
        return self.ln_f(h), labels


class GPT2Head(nn.Module):
    """Untied LM head: (h[B,T,C], labels) -> (logits[B,T,V], labels)"""
    kind = "gpt2.lm_head"

    def __init__(self, c: GPT2Config):
        super().__init__()
        self.lm_head = uninitialised(nn.Linear, c.n_embd, c.vocab_size, bias=False)
        draw_normal_(self.lm_head.weight, std=c.init_std)

    def forward(self, h, labels):
        return self.lm_head(h), labels


class GPT2Model(ModelSpec):
    family = "gpt2"

    def iter_vlayers(self):
        c = self.config
        yield GPT2Embedding(c)
        for _ in range(c.n_layer):
            yield GPT2Block(c)
        yield GPT2FinalNorm(c)
        yield GPT2Head(c)
        yield CrossEntropyLoss()

    def input_specs(self):
        T = self.config.seq_len
        return [TensorSpec((T,), "int64"), TensorSpec((T,), "int64")]

    def synthetic_batch(self, batch, generator):
        c = self.config
        tokens = torch.randint(0, c.vocab_size, (batch, c.seq_len + 1), generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# GPT-2 fine-tuning in the paper (Fig 21): AdamW, lr 5e-5.
GPT2_OPTIMIZER = OptimizerConfig(kind="adamw", lr=5e-5, weight_decay=0.0)

# name -> (config fields, the paper's figures)
NAMED = {
    "gpt2-medium": (dict(n_layer=24, n_embd=1024, n_head=16), {"params": 0.406e9, "vlayers": 27 + 1}),
    "gpt2-xl": (dict(n_layer=48, n_embd=1600, n_head=25), {"params": 1.638e9, "vlayers": 51 + 1}),
    "gpt2-10b": (dict(n_layer=50, n_embd=4096, n_head=32), {"params": 10.48e9, "vlayers": 53 + 1}),
    "gpt2-20b": (dict(n_layer=100, n_embd=4096, n_head=32), {"params": 20.55e9, "vlayers": 103 + 1}),
    "gpt2-30b": (dict(n_layer=150, n_embd=4096, n_head=32), {"params": 30.62e9, "vlayers": 153 + 1}),
    "gpt2-40b": (dict(n_layer=200, n_embd=4096, n_head=32), {"params": 40.69e9, "vlayers": 203 + 1}),
    # not in the paper: trains a few iterations in about a second on a CPU
    "gpt2-tiny": (dict(n_layer=4, n_embd=64, n_head=4, n_ctx=64, seq_len=32, vocab_size=512, dropout=0.0), None),
}


def gpt2(name: str, **overrides) -> GPT2Model:
    fields = {**NAMED[name][0], **overrides}
    return GPT2Model(name, GPT2Config(**fields), GPT2_OPTIMIZER)


for _name, (_fields, _paper) in NAMED.items():
    register(_name, lambda _n=_name, **o: gpt2(_n, **o), paper=_paper)
