"""What a classification request asks for (ClassifyParams), what it answers (Classified,
ClassifyResult), the activation of its logits, and what its answer holds: the attention budget's
bytes and the response's counts for /v1/rerank and /v1/predict (service.engine.size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from headwise.service.engine.internals import Ablation
from headwise.service.engine.params import AttentionSpec, Counted
from headwise.service.engine.size import Block, Size
from headwise.service.engine.stats import Timing
from headwise.service.engine.tokenizer import Encoded, Truncate
from headwise.service.engine.values import INDEX_DTYPE


@dataclass(frozen=True)
class ClassifyParams:
    truncate: Truncate = True
    max_tokens: int | None = None  # with truncate: cut at this many tokens (vLLM's truncate_prompt_tokens)
    special_tokens: bool = True  # false: texts without [CLS]/[SEP] (vLLM's add_special_tokens; not pairs)
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
class HeadResult(Counted):
    """A head's answers to one request (Engine.submit): a classifier's, a tagger's, ..."""

    model: str
    version: str
    labels: list[str]  # the package's labels, in logit order (none where its head has none)
    data: list  # each input's answer, in input order (a classifier's: Classified)
    answer_bytes: int  # what every input's answer takes as the engine's Measure writes it, checked when tokenised
    timing: Timing | None = None  # where its time went


ClassifyResult = HeadResult


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


def answer_size(params: ClassifyParams, enc: Encoded, labels: list[str] | tuple[str, ...]) -> Size:
    """What one input's answer of /v1/rerank or /v1/predict holds: its scores with their labels,
    and with attention its blocks and both texts' tokens and offsets (the text itself, when
    echoed, is the router's to count)."""
    scores = Size(values=len(labels), labels=len(labels), chars=sum(len(label) for label in labels), records=1)
    spec = params.attention
    if spec is None:
        return scores
    if enc.segments is None:  # a single text's attention: [L', H', T, T], as on /v1/embed
        return scores + Size(tokens=enc.length, records=4, blocks=(spec.block(enc.length),))
    tq, td = pair_sizes(enc)
    if spec.format == "dense":
        block = spec.cells_block(attention_cells(enc))
    else:
        n = topk_values(spec, enc)
        block = Block(n, spec.dtype, spec.encoding, indices=n)
    # each token of a pair also names its position in the pair's input
    return scores + Size(tokens=tq + td, indices=tq + td, records=4, blocks=(block,))
