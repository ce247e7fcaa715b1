"""What a classification request asks for (ClassifyParams), what it answers (Classified,
ClassifyResult), the activation of its logits, and the bytes its answer takes: what the
attention and response budgets count for /v1/rerank and /v1/predict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from headwise.service.engine.internals import Ablation
from headwise.service.engine.params import AttentionSpec, Counted
from headwise.service.engine.stats import Timing
from headwise.service.engine.tokenizer import Encoded
from headwise.service.engine.values import INDEX_DTYPE, JSON_VALUE_BYTES, TOKEN_BYTES, written_bytes

LABEL_BYTES = 32  # one {"label": ..., "score": ...} beyond its label's own characters


@dataclass(frozen=True)
class ClassifyParams:
    truncate: bool = True
    raw_scores: bool = False  # logits as they are; otherwise sigmoid (1 label) or softmax (n labels)
    attention: AttentionSpec | None = None  # with pairs: the query↔document blocks (pair_attention)
    padded_attention: ClassVar[bool] = False  # the attention budget counts each input at its own length
    token_strings: ClassVar[bool] = True  # pairs are encoded with their strings (encode_items)
    ablate: Ablation | None = None  # heads removed (service.engine.internals)

    @property
    def analysis(self) -> bool:
        return self.ablate is not None


@dataclass(frozen=True, slots=True)
class Classified:
    """One input's answer."""

    encoding: Encoded  # of the (pair) input; segments mark which text each token is of
    logits: np.ndarray  # [n_labels] float32, raw
    scores: np.ndarray  # [n_labels] float32, activated unless raw_scores
    attention: dict | None  # service.engine.outputs.pair_attention


@dataclass(frozen=True)
class ClassifyResult(Counted):
    model: str
    version: str
    labels: list[str]  # id2label order
    data: list[Classified]  # in input order
    answer_bytes: int  # the bound of every input's answer as written, counted when they were tokenised
    timing: Timing | None = None  # where its time went


def activate(logits: np.ndarray, raw: bool) -> np.ndarray:
    """[n] logits → scores: as they are (raw), sigmoid for one label, softmax for several
    (computed in float64, returned as float32)."""
    if raw:
        return np.asarray(logits, dtype=np.float32)
    x = np.asarray(logits, dtype=np.float64)
    if x.shape[-1] == 1:
        out = 1.0 / (1.0 + np.exp(-x))
    else:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        out = e / e.sum(axis=-1, keepdims=True)
    return out.astype(np.float32)


def pair_sizes(enc: Encoded) -> tuple[int, int]:
    """(query tokens, document tokens) of a pair, special tokens left out; (0, 0) for a text."""
    if enc.segments is None:
        return 0, 0
    seg = enc.segments
    return int((seg == 0).sum()), int((seg == 1).sum())


def attention_cells(enc: Encoded) -> int:
    """Weights per layer and head a pair's attention answer holds: its [Tq, Td] and [Td, Tq] blocks."""
    tq, td = pair_sizes(enc)
    return 2 * tq * td


def attention_bytes(spec: AttentionSpec, enc: Encoded) -> int:
    """The attention budget's measure for one input: its two blocks, dense, in spec's dtype
    (top-k is measured the same way, as on /v1/embed)."""
    return spec.values_bytes(attention_cells(enc))


def topk_values(spec: AttentionSpec, enc: Encoded) -> int:
    """Weights a top-k answer keeps of a pair's two blocks, over every plane: k (or fewer) per
    row of each block."""
    tq, td = pair_sizes(enc)
    return spec.planes() * (tq * min(spec.top_k, td) + td * min(spec.top_k, tq))


def returned_bytes(spec: AttentionSpec, enc: Encoded) -> int:
    """Attention bytes returned for one input (headwise_attention_bytes_total)."""
    if spec.format == "dense":
        return attention_bytes(spec, enc)
    return topk_values(spec, enc) * (spec.item_size() + INDEX_DTYPE.itemsize)  # value + int32 index


def response_bytes(params: ClassifyParams, enc: Encoded, labels: list[str] | tuple[str, ...]) -> int:
    """An upper bound of the bytes one input takes in a JSON answer of /v1/rerank or /v1/predict:
    its scores with their labels, and with attention its blocks and both texts' tokens and offsets
    (the text itself, when echoed, is the router's to count)."""
    scores = sum(len(label) * 6 + LABEL_BYTES + JSON_VALUE_BYTES["float32"] for label in labels) + 64
    spec = params.attention
    if spec is None:
        return scores
    if enc.segments is None:  # a single text's attention: [L', H', T, T], as on /v1/embed
        return scores + spec.serialized_bytes(enc.length) + enc.length * TOKEN_BYTES + 256
    tq, td = pair_sizes(enc)
    if spec.format == "dense":
        values = spec.written_cells(attention_cells(enc))
    else:
        n = topk_values(spec, enc)
        values = written_bytes(n, spec.dtype, spec.encoding, indices=n)
    return scores + values + (tq + td) * (TOKEN_BYTES + 8) + 256
