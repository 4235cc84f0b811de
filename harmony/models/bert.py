"""BERT (Devlin et al. 2019) as a chain of vLayers: embeddings, one vLayer per encoder layer, two head
vLayers, loss.

Named configurations: `bert-large` (0.335 B), `bert96` (BERT-Large with 96 layers; 1.242 B), `bert-tiny`.

Heads (config `head`):
- "cls" (default): sequence-pair classification as in the paper's GLUE-MRPC fine-tuning: a pooler vLayer
  (tanh dense on the [CLS] token) and a classifier vLayer (dropout + dense to `n_classes`). Data:
  (input_ids[S], token_type_ids[S], attention_mask[S], label[]). The paper's counts (0.335 B / 1.242 B,
  27 / 99 vLayers + loss) are this model.
- "mlm": pre-training style: masked-LM head (dense, GELU, LayerNorm, decoder to the vocabulary) plus the
  next-sentence head on the pooled [CLS]. The MLM decoder is untied from the word embedding (it lives in
  another vLayer), so this adds vocab x hidden parameters to the counts. Data: (input_ids, token_type_ids,
  attention_mask, mlm_labels[S] (-100 = not masked), nsp_label[]). Loss = per-sample mean MLM CE + NSP
  CE, averaged over samples.

The attention mask (1 = attend, 0 = padding; int64) is passed through every encoder vLayer. The sequence
length `seq_len` defaults to 512 (the paper's pre-training length); MRPC uses seq_len=128.
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
class BertConfig:
    n_layer: int = 24              # encoder layers
    hidden: int = 1024
    n_head: int = 16
    ffn: int = 4096                # intermediate size
    vocab_size: int = 30522
    max_position: int = 512        # size of the position embedding
    type_vocab_size: int = 2
    seq_len: int = 512             # tokens per sample (<= max_position); MRPC: 128
    head: str = "cls"              # "cls" (sequence-pair classification) | "mlm" (pre-training MLM + NSP)
    n_classes: int = 2             # classes of the "cls" head (MRPC: paraphrase or not)
    hidden_dropout: float = 0.1    # BERT's hidden_dropout_prob
    attn_dropout: float = 0.1      # BERT's attention_probs_dropout_prob
    layer_norm_eps: float = 1e-12
    init_std: float = 0.02

    def __post_init__(self):
        if self.hidden % self.n_head:
            raise ValueError(f"hidden={self.hidden} is not divisible by n_head={self.n_head}")
        if self.seq_len > self.max_position:
            raise ValueError(f"seq_len={self.seq_len} exceeds max_position={self.max_position}")
        if self.head not in ("cls", "mlm"):
            raise ValueError(f"unknown BERT head {self.head!r}: use 'cls' or 'mlm'")


def _init(module: nn.Module, std: float) -> None:
    """BERT's initialisation: normal(0, std) for Linear/Embedding weights, zero biases, LayerNorm (1, 0)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            draw_normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class BertEmbeddings(nn.Module):
    """(input_ids, token_type_ids, attention_mask, *labels) -> (h[B,S,H], attention_mask, *labels)"""
    kind = "bert.embeddings"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = uninitialised(nn.Embedding, c.vocab_size, c.hidden)
        self.position_embeddings = uninitialised(nn.Embedding, c.max_position, c.hidden)
        self.token_type_embeddings = uninitialised(nn.Embedding, c.type_vocab_size, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout)
        _init(self, c.init_std)

    def forward(self, input_ids, token_type_ids, attention_mask, *labels):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + self.position_embeddings(pos)
        return self.dropout(self.LayerNorm(h)), attention_mask, *labels


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.n_head = c.n_head
        self.query = uninitialised(nn.Linear, c.hidden, c.hidden)
        self.key = uninitialised(nn.Linear, c.hidden, c.hidden)
        self.value = uninitialised(nn.Linear, c.hidden, c.hidden)
        self.attn_dropout = c.attn_dropout

    def forward(self, h, attention_mask):
        B, S, H = h.shape
        # [B, S, H] -> [B, nh, S, hs]
        q, k, v = (lin(h).view(B, S, self.n_head, H // self.n_head).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        keep = attention_mask[:, None, None, :].bool()          # [B, 1, 1, S]: key positions to attend to
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        return y.transpose(1, 2).reshape(B, S, H)               # [B, nh, S, hs] -> [B, S, H]


class BertLayer(nn.Module):
    """Post-LN encoder layer: (h, attention_mask, *labels) -> (h, attention_mask, *labels)"""
    kind = "bert.layer"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(c)
        self.attention_output = uninitialised(nn.Linear, c.hidden, c.hidden)
        self.attention_LayerNorm = nn.LayerNorm(c.hidden, eps=c.layer_norm_eps)
        self.intermediate = uninitialised(nn.Linear, c.hidden, c.ffn)
        self.output = uninitialised(nn.Linear, c.ffn, c.hidden)
        self.output_LayerNorm = nn.LayerNorm(c.hidden, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout)
        _init(self, c.init_std)

    def forward(self, h, attention_mask, *labels):
        a = self.dropout(self.attention_output(self.attention(h, attention_mask)))
        h = self.attention_LayerNorm(h + a)
        f = self.dropout(self.output(F.gelu(self.intermediate(h))))  # exact (erf) GELU, as BERT
        h = self.output_LayerNorm(h + f)
        return h, attention_mask, *labels


class BertPooler(nn.Module):
    """(h, attention_mask, label) -> (pooled[B,H], label): tanh(dense(h[:, 0]))"""
    kind = "bert.pooler"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = uninitialised(nn.Linear, c.hidden, c.hidden)
        _init(self, c.init_std)

    def forward(self, h, attention_mask, label):
        return torch.tanh(self.dense(h[:, 0])), label


class BertClassifier(nn.Module):
    """(pooled, label) -> (logits[B, n_classes], label)"""
    kind = "bert.classifier"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.dropout = nn.Dropout(c.hidden_dropout)
        self.classifier = uninitialised(nn.Linear, c.hidden, c.n_classes)
        _init(self, c.init_std)

    def forward(self, pooled, label):
        return self.classifier(self.dropout(pooled)), label


class BertPretrainTransform(nn.Module):
    """(h, mask, mlm_labels, nsp_label) -> (t[B,S,H], pooled[B,H], mlm_labels, nsp_label)"""
    kind = "bert.pretrain_transform"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.transform = uninitialised(nn.Linear, c.hidden, c.hidden)
        self.transform_LayerNorm = nn.LayerNorm(c.hidden, eps=c.layer_norm_eps)
        self.pooler = uninitialised(nn.Linear, c.hidden, c.hidden)
        _init(self, c.init_std)

    def forward(self, h, attention_mask, mlm_labels, nsp_label):
        t = self.transform_LayerNorm(F.gelu(self.transform(h)))
        return t, torch.tanh(self.pooler(h[:, 0])), mlm_labels, nsp_label


class BertPretrainHeads(nn.Module):
    """(t, pooled, mlm_labels, nsp_label) -> (mlm_logits[B,S,V], nsp_logits[B,2], mlm_labels, nsp_label)"""
    kind = "bert.pretrain_heads"

    def __init__(self, c: BertConfig):
        super().__init__()
        self.decoder = uninitialised(nn.Linear, c.hidden, c.vocab_size)   # untied from the word embedding
        self.seq_relationship = uninitialised(nn.Linear, c.hidden, 2)
        _init(self, c.init_std)

    def forward(self, t, pooled, mlm_labels, nsp_label):
        return self.decoder(t), self.seq_relationship(pooled), mlm_labels, nsp_label


class BertPretrainLoss(nn.Module):
    """Loss vLayer of the "mlm" head: mean over samples of (the sample's mean MLM cross-entropy over its
    masked tokens + its NSP cross-entropy). Per-sample normalisation (rather than BERT's mean over all the
    batch's masked tokens) keeps the loss a mean over samples, so microbatching is exact (see base.py)."""
    kind = "loss.bert_pretrain"

    def forward(self, mlm_logits, nsp_logits, mlm_labels, nsp_label):
        B, S, V = mlm_logits.shape
        tok = F.cross_entropy(mlm_logits.reshape(-1, V), mlm_labels.reshape(-1), ignore_index=-100, reduction="none")
        n_masked = (mlm_labels != -100).sum(1).clamp(min=1)
        mlm = tok.view(B, S).sum(1) / n_masked
        return ((mlm + F.cross_entropy(nsp_logits, nsp_label, reduction="none")).mean(),)


class BertModel(ModelSpec):
    family = "bert"

    def iter_vlayers(self):
        c = self.config
        yield BertEmbeddings(c)
        for _ in range(c.n_layer):
            yield BertLayer(c)
        if c.head == "cls":
            yield BertPooler(c)
            yield BertClassifier(c)
            yield CrossEntropyLoss()
        else:
            yield BertPretrainTransform(c)
            yield BertPretrainHeads(c)
            yield BertPretrainLoss()

    def input_specs(self):
        S = self.config.seq_len
        x = [TensorSpec((S,), "int64")] * 3
        if self.config.head == "cls":
            return [*x, TensorSpec((), "int64")]
        return [*x, TensorSpec((S,), "int64"), TensorSpec((), "int64")]

    def synthetic_batch(self, batch, generator):
        c = self.config
        S = c.seq_len
        ids = torch.randint(0, c.vocab_size, (batch, S), generator=generator)
        split = torch.randint(1, S, (batch, 1), generator=generator)        # first segment length
        length = torch.randint(S // 2, S + 1, (batch, 1), generator=generator)  # rest is padding
        pos = torch.arange(S)[None, :]
        token_type = (pos >= split).long()
        mask = (pos < torch.maximum(length, split + 1)).long()
        if c.head == "cls":
            return ids, token_type, mask, torch.randint(0, c.n_classes, (batch,), generator=generator)
        masked = (torch.rand(batch, S, generator=generator) < 0.15) & mask.bool()
        masked[:, 1] = True                                                   # at least one per sample
        mlm_labels = torch.where(masked, ids, torch.full_like(ids, -100))
        return ids, token_type, mask, mlm_labels, torch.randint(0, 2, (batch,), generator=generator)


# BERT fine-tuning (paper Fig 13, GLUE-MRPC): Adam, lr 3e-5 with linear warmup over 10% of the steps of
# 3 epochs of MRPC's 3,668 training pairs at D = 32: ceil(0.1 * 3 * ceil(3668 / 32)) = 35 steps.
BERT_OPTIMIZER = OptimizerConfig(kind="adam", lr=3e-5, warmup_steps=math.ceil(0.1 * 3 * math.ceil(3668 / 32)))

NAMED = {
    "bert-large": (dict(n_layer=24), {"params": 0.335e9, "vlayers": 27 + 1}),
    "bert96": (dict(n_layer=96), {"params": 1.242e9, "vlayers": 99 + 1}),
    # not in the paper: trains a few iterations in about a second on a CPU
    "bert-tiny": (dict(n_layer=2, hidden=64, n_head=4, ffn=256, vocab_size=512, max_position=64, seq_len=32,
                       hidden_dropout=0.0, attn_dropout=0.0), None),
}


def bert(name: str, **overrides) -> BertModel:
    return BertModel(name, BertConfig(**{**NAMED[name][0], **overrides}), BERT_OPTIMIZER)


for _name, (_fields, _paper) in NAMED.items():
    register(_name, lambda _n=_name, **o: bert(_n, **o), paper=_paper)
