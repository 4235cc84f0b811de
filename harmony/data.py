"""Batch sources: where the minibatches of a run come from.

`load_batches(spec, data, minibatch, iters, seed)` returns `iters` minibatches in the format of
`spec.input_specs()` (inputs, then labels), on the CPU. Iteration i always gets batch i, so every system
(Harmony's modes, the baselines, plain PyTorch) sees identical data.

`data` is one of
  "synthetic"          deterministic random batches (`harmony.reference.minibatches`): throughput runs
  DIR                  a dataset directory; the task follows the model family: GPT-2 -> language
                       modelling on WikiText, BERT -> sentence-pair classification on GLUE-MRPC
  "lm:DIR", "pair:DIR" the same with the task named
  "fallback"           the offline corpus below, task from the family
Real datasets looked for under DIR (docs/artifact-evaluation.md says how to download them):
  GLUE-MRPC            DIR/glue/MRPC/train.tsv, DIR/MRPC/train.tsv or DIR/mrpc/train.tsv
                       (columns Quality, #1 ID, #2 ID, #1 String, #2 String)
  WikiText-103 / -2    DIR/wikitext-103/wiki.train.tokens, DIR/wikitext-103-raw/wiki.train.raw,
                       then the same for wikitext-2
When none is there, the **offline fallback** is used: the English text of Python's own documentation
that ships with every CPython (`pydoc_data.topics`, ~0.46 MB in 79 topics). Language modelling reads it
as one byte stream; the sentence-pair task is next-sentence prediction: two consecutive sentences of one
topic (label 1) or a sentence and one from another topic (label 0), balanced.

Tokenization is byte-level for every source (no tokenizer download is needed): token = byte + 3, with
0 = [PAD], 1 = [CLS], 2 = [SEP]; the model's vocabulary must have at least 259 entries (the tiny
variants have 512, the paper's models 30522 / 50257). `describe_data` names the source actually used;
run records and figures carry it.
"""
from __future__ import annotations

import csv
import random
import re
from pathlib import Path

import torch

from harmony.models.base import ModelSpec

PAD, CLS, SEP, OFFSET = 0, 1, 2, 3
MAX_TEXT_BYTES = 64 << 20        # read at most this much of a big token file (WikiText-103: ~540 MB)

MRPC_FILES = ("glue/MRPC/train.tsv", "MRPC/train.tsv", "mrpc/train.tsv", "glue_data/MRPC/train.tsv")
WIKITEXT_FILES = ("wikitext-103/wiki.train.tokens", "wikitext-103-raw/wiki.train.raw",
                  "wikitext-2/wiki.train.tokens", "wikitext-2-raw/wiki.train.raw")


def load_batches(spec: ModelSpec, data: str, minibatch: int, iters: int, seed: int = 1234) -> list[tuple[torch.Tensor, ...]]:
    if data in (None, "", "synthetic"):
        from harmony.reference import minibatches
        return minibatches(spec, minibatch, iters, seed)
    source = resolve(spec, data)
    return source.batches(spec, minibatch, iters, seed)


def describe_data(spec: ModelSpec, data: str) -> str:
    """Human-readable name of the data a run used (written into run records and figure titles)."""
    if data in (None, "", "synthetic"):
        return "synthetic"
    return resolve(spec, data).name


# ------------------------------------------------------------------------------------------------
# Resolving a data spec
# ------------------------------------------------------------------------------------------------
def task_of(spec: ModelSpec) -> str:
    fam = getattr(spec, "family", "")
    if fam == "gpt2":
        return "lm"
    if fam == "bert":
        if getattr(spec.config, "head", "cls") != "cls":
            raise ValueError("real-data runs of BERT use the sequence-pair classification head (head='cls')")
        return "pair"
    raise ValueError(f"no real dataset for model family {fam!r}: use --data synthetic "
                     f"(real data exists for GPT-2 (language modelling) and BERT (sentence pairs))")


def resolve(spec: ModelSpec, data: str) -> "TextSource":
    task, _, where = data.partition(":") if data.split(":", 1)[0] in ("lm", "pair") else ("", "", data)
    task = task or task_of(spec)
    where = "" if where == "fallback" else where
    # A directory that does not exist (e.g. the default `data/` before any download) means: fallback.
    base = Path(where) if where and Path(where).is_dir() else None
    if task == "pair":
        f = _first(base, MRPC_FILES)
        return MRPCSource(f) if f else FallbackPairSource()
    if task == "lm":
        f = _first(base, WIKITEXT_FILES)
        return TokenFileSource(f) if f else FallbackLMSource()
    raise ValueError(f"unknown task {task!r}: use lm or pair")


def _first(base: Path | None, names) -> Path | None:
    if base is None:
        return None
    for n in names:
        if (base / n).is_file():
            return base / n
    return None


def encode(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode("utf-8")]


def _check_vocab(spec: ModelSpec) -> None:
    v = getattr(spec.config, "vocab_size", None)
    if v is not None and v < 256 + OFFSET:
        raise ValueError(f"{spec.name}: vocabulary of {v} < {256 + OFFSET} byte-level tokens")


# ------------------------------------------------------------------------------------------------
# Language modelling: one token stream cut into (seq_len + 1)-token chunks
# ------------------------------------------------------------------------------------------------
class TextSource:
    name = "?"

    def batches(self, spec, minibatch, iters, seed):
        raise NotImplementedError


class _LMSource(TextSource):
    def text(self) -> str:
        raise NotImplementedError

    def batches(self, spec, minibatch, iters, seed):
        _check_vocab(spec)
        T = spec.config.seq_len
        stream = torch.tensor(encode(self.text()), dtype=torch.int64)
        n_chunks = (len(stream) - 1) // (T + 1)
        if n_chunks < 1:
            raise ValueError(f"{self.name}: too little text for one sequence of {T} tokens")
        chunks = stream[: n_chunks * (T + 1)].view(n_chunks, T + 1)
        order = _epochs(n_chunks, minibatch * iters, seed)
        out = []
        for i in range(iters):
            c = chunks[order[i * minibatch:(i + 1) * minibatch]]
            out.append((c[:, :-1].contiguous(), c[:, 1:].contiguous()))   # labels already shifted
        return out


class TokenFileSource(_LMSource):
    def __init__(self, path: Path):
        self.path = path
        self.name = f"WikiText ({path.parent.name}/{path.name}, byte-level tokens)"

    def text(self) -> str:
        with open(self.path, "rb") as f:
            return f.read(MAX_TEXT_BYTES).decode("utf-8", errors="replace")


class FallbackLMSource(_LMSource):
    name = "offline fallback: Python documentation text (pydoc_data.topics), byte-level LM"

    def text(self) -> str:
        return "\n\n".join(_corpus_topics().values())


# ------------------------------------------------------------------------------------------------
# Sentence-pair classification
# ------------------------------------------------------------------------------------------------
class _PairSource(TextSource):
    def pairs(self, seed: int) -> list[tuple[str, str, int]]:
        raise NotImplementedError

    def batches(self, spec, minibatch, iters, seed):
        _check_vocab(spec)
        S = spec.config.seq_len
        pairs = self.pairs(seed)
        order = _epochs(len(pairs), minibatch * iters, seed)
        enc = [_encode_pair(a, b, S) for a, b, _ in pairs]
        labels = torch.tensor([y for _, _, y in pairs], dtype=torch.int64)
        ids = torch.stack([e[0] for e in enc])
        types = torch.stack([e[1] for e in enc])
        mask = torch.stack([e[2] for e in enc])
        out = []
        for i in range(iters):
            idx = order[i * minibatch:(i + 1) * minibatch]
            out.append((ids[idx], types[idx], mask[idx], labels[idx]))
        return out


def _encode_pair(a: str, b: str, S: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[CLS] a [SEP] b [SEP], longest-first truncation to S tokens, padded with [PAD]."""
    ta, tb = encode(a), encode(b)
    while len(ta) + len(tb) > S - 3:
        (ta if len(ta) >= len(tb) else tb).pop()
    toks = [CLS, *ta, SEP, *tb, SEP]
    types = [0] * (len(ta) + 2) + [1] * (len(tb) + 1)
    n = len(toks)
    pad = S - n
    return (torch.tensor(toks + [PAD] * pad), torch.tensor(types + [0] * pad),
            torch.tensor([1] * n + [0] * pad))


class MRPCSource(_PairSource):
    def __init__(self, path: Path):
        self.path = path
        self.name = f"GLUE-MRPC ({path.name}, byte-level tokens)"

    def pairs(self, seed):
        out = []
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(rows)
            if len(header) < 5 or not header[0].lower().startswith("quality"):
                raise ValueError(f"{self.path}: not a GLUE-MRPC TSV (header {header[:5]})")
            for r in rows:
                if len(r) >= 5 and r[0] in ("0", "1"):
                    out.append((r[3], r[4], int(r[0])))
        if not out:
            raise ValueError(f"{self.path}: no sentence pairs")
        return out


class FallbackPairSource(_PairSource):
    name = ("offline fallback: next-sentence pairs from Python documentation text "
            "(pydoc_data.topics), byte-level")

    def pairs(self, seed):
        topics = [_sentences(t) for t in _corpus_topics().values()]
        topics = [s for s in topics if len(s) >= 2]
        rng = random.Random(seed)
        out = []
        for ti, sents in enumerate(topics):
            for j in range(len(sents) - 1):
                if rng.random() < 0.5:
                    out.append((sents[j], sents[j + 1], 1))
                else:
                    other = topics[(ti + rng.randrange(1, len(topics))) % len(topics)]
                    out.append((sents[j], rng.choice(other), 0))
        return out


def _sentences(text: str) -> list[str]:
    text = re.sub(r"\s+", " ", text)
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 20]


def _corpus_topics() -> dict[str, str]:
    try:
        from pydoc_data.topics import topics
        return dict(topics)
    except ImportError:   # a Python built without pydoc_data: the standard library's docstrings instead
        import importlib
        out = {}
        for name in ("collections", "functools", "itertools", "json", "os", "pathlib", "re", "string",
                     "textwrap", "typing", "unittest", "argparse", "logging", "subprocess", "threading"):
            mod = importlib.import_module(name)
            docs = [mod.__doc__ or ""] + [getattr(getattr(mod, a), "__doc__", "") or "" for a in dir(mod)
                                          if not a.startswith("_")]
            out[name] = "\n".join(docs)
        return out


def _epochs(n: int, needed: int, seed: int) -> torch.Tensor:
    """Indices of `needed` samples: successive shuffled passes over n examples (epochs)."""
    g = torch.Generator().manual_seed(seed)
    parts, have = [], 0
    while have < needed:
        parts.append(torch.randperm(n, generator=g))
        have += n
    return torch.cat(parts)[:needed]
