"""The client's results: dataclasses holding numpy arrays with the shapes docs/api.md names.
Every result keeps the decoded JSON it came from as `raw`, so fields added to the server later
are reachable before the client names them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np


class AttentionOptions(TypedDict, total=False):
    """The `attention` object of /v1/embed and /v1/rerank (rerank: `aggregate` "none" only)."""

    layers: list[int] | None
    heads: list[int] | None
    format: str  # "dense" | "topk"
    top_k: int
    dtype: str  # "float32" | "float16"
    encoding: str  # "json" | "base64"
    aggregate: str  # "none" | "mean" | "rollout"


class HiddenStatesOptions(TypedDict, total=False):
    """The `hidden_states` object of /v1/embed (as the server will take it once it ships)."""

    layers: list[int] | None
    pooling: str
    dtype: str
    encoding: str


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int | None = None


@dataclass(frozen=True, eq=False)  # numpy arrays have no truth value
class AttentionBlock:
    """One attention array. Dense: `values` has `shape`. Top-k: `values` and `indices` (int32,
    key positions) both have `shape`, k in place of the last axis, largest first."""

    shape: tuple[int, ...]
    format: str
    values: np.ndarray
    indices: np.ndarray | None

    def to_dense(self, n_keys: int | None = None) -> np.ndarray:
        """The dense array, zeros where top-k left a key out. `n_keys` is the last axis' length
        (default: the second-to-last axis', right for self-attention [..., T, T])."""
        if self.indices is None:
            return self.values
        n = self.shape[-2] if n_keys is None else n_keys
        out = np.zeros((*self.shape[:-1], n), dtype=self.values.dtype)
        np.put_along_axis(out, self.indices.astype(np.intp), self.values, axis=-1)
        return out


@dataclass(frozen=True, eq=False)
class Attention(AttentionBlock):
    """An input's attention on /v1/embed. Shape: `aggregate` "none" [L′, H′, T, T], "mean"
    [L′, T, T], "rollout" [T, T]; top-k the same with k for the last T."""

    layers: list[int] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    aggregate: str = "none"
    dtype: str = "float32"
    encoding: str = "json"


@dataclass(frozen=True, eq=False)
class HiddenState:
    """One layer's hidden state of one input: [T, d_model], or [d_model] when pooled.
    Layer 0 is the embeddings' output, layer i the output of block i (transformers' count)."""

    layer: int
    array: np.ndarray
    pooling: str | None = None
    dtype: str = "float32"


@dataclass(frozen=True, eq=False)
class EmbedItem:
    index: int
    embedding: np.ndarray  # [d_model] (sentence) or [T, d_model] (tokens), float32
    tokens: list[str]
    offsets: list[tuple[int, int]]
    attention: Attention | None = None
    hidden_states: list[HiddenState] | None = None


@dataclass(frozen=True, eq=False)
class EmbedResult:
    model: str
    data: list[EmbedItem]
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def embeddings(self) -> np.ndarray:
        """[N, d_model] for `output="sentence"`. With `output="tokens"` each item's embedding
        is [T_i, d_model] and the T_i differ: read `data[i].embedding`."""
        shapes = {item.embedding.shape for item in self.data}
        if len(shapes) != 1 or any(len(s) != 1 for s in shapes):
            raise ValueError("token embeddings differ in length per input: read data[i].embedding")
        return np.stack([item.embedding for item in self.data])


@dataclass(frozen=True)
class TokenizeItem:
    index: int
    tokens: list[str]
    ids: list[int]
    offsets: list[tuple[int, int]]


@dataclass(frozen=True)
class TokenizeResult:
    model: str
    data: list[TokenizeItem]
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class TokenPair:
    source: int
    target: int
    value: float


@dataclass(frozen=True, eq=False)
class SimilarityItem:
    index: int
    score: float
    tokens: list[str] | None = None
    offsets: list[tuple[int, int]] | None = None
    contributions: np.ndarray | None = None  # [T_source, T_target] float32; sums to `score`
    top_pairs: list[TokenPair] | None = None


@dataclass(frozen=True)
class Tokens:
    tokens: list[str]
    offsets: list[tuple[int, int]]
    positions: list[int] | None = None  # rerank only: positions in the pair's sequence


@dataclass(frozen=True, eq=False)
class SimilarityResult:
    model: str
    data: list[SimilarityItem]
    usage: Usage
    source: Tokens | None = None  # with explain
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def scores(self) -> np.ndarray:
        """[N] float64: the cosine of the source with each target, in `targets` order."""
        return np.array([d.score for d in sorted(self.data, key=lambda d: d.index)], dtype=np.float64)


@dataclass(frozen=True)
class OcclusionUnit:
    """One word or span of an occlusion answer: its text and [start, end) characters, the
    positions in `tokens` masked together in its row, and its effect."""

    text: str
    start: int
    end: int
    tokens: list[int]
    effect: float


@dataclass(frozen=True, eq=False)
class OcclusionResult:
    """`unit` is None for tokens (the default), "word" or "span". `effects` holds one effect,
    1 − cos(e, e with that token or unit masked out), per row: [T] for tokens, [U] (one per
    unit, as `units`) for words and spans."""

    model: str
    tokens: list[str]
    offsets: list[tuple[int, int]]
    effects: np.ndarray  # [T] or [U] float64
    forward_passes: int
    usage: Usage
    unit: str | None = None
    units: list[OcclusionUnit] | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, eq=False)
class RerankAttention:
    """Query↔document attention of one rerank result, special tokens left out."""

    layers: list[int]
    heads: list[int]
    format: str
    dtype: str
    encoding: str
    query: Tokens
    document: Tokens
    query_to_document: AttentionBlock  # [L′, H′, Tq, Td] (top-k: k for Td; indices into the document)
    document_to_query: AttentionBlock  # [L′, H′, Td, Tq]


@dataclass(frozen=True, eq=False)
class RerankItem:
    index: int
    score: float
    text: str | None = None
    attention: RerankAttention | None = None


@dataclass(frozen=True, eq=False)
class RerankResult:
    model: str
    results: list[RerankItem]  # best first
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class Label:
    label: str
    score: float


@dataclass(frozen=True)
class PredictResult:
    model: str
    data: list[list[Label]]  # per input, best first
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, eq=False)
class GenerateStep:
    """The attention of the query that chose one token: [L′, H′, 1, T_so_far], and for
    encoder-decoders the cross-attention [L′, H′, 1, S]."""

    self_attention: np.ndarray | None = None
    cross_attention: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class GenerateAttention:
    layers: list[int]
    heads: list[int]
    dtype: str
    encoding: str
    prompt: np.ndarray | None  # decoders: [L′, H′, P, P], the prompt's causal attention
    steps: list[GenerateStep]


@dataclass(frozen=True, eq=False)
class GenerateToken:
    """One streamed token event."""

    index: int
    token: str
    id: int
    text: str
    attention: GenerateStep | None = None
    hidden_states: np.ndarray | None = None  # [L′, d_model]: the states at the position that chose it


@dataclass(frozen=True, eq=False)
class GenerateResult:
    model: str
    text: str
    tokens: list[str]
    ids: list[int]
    finish_reason: str  # "eos" | "stop" | "length"
    usage: Usage
    input_tokens: list[str]  # the prompt's (decoder) or source's (encoder-decoder)
    input_ids: list[int]
    attention: GenerateAttention | None = None
    hidden_states: GenerateHidden | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, eq=False)
class GenerateHidden:
    """/v1/generate's hidden states: `steps[k]` [L′, d_model], the states at the position whose
    logits chose token k; `prompt` (decoders) [L′, P, d_model], or [L′, d_model] pooled."""

    layers: list[int]
    pooling: str
    dtype: str
    prompt: np.ndarray | None
    steps: list[np.ndarray]


@dataclass(frozen=True, eq=False)
class HeadImportanceResult:
    """Each head's effect when removed alone, [n_layers, n_heads]; `measure` "cosine" (an
    embedding model) or "score" (a cross-encoder, whose score with every head is `baseline`)."""

    model: str | None
    importance: np.ndarray
    measure: str | None = None
    baseline: float | None = None
    top: list[tuple[int, int, float]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    """A model card (GET /v1/models): the facts the client uses; the rest is in `raw`."""

    id: str
    name: str
    task: str | None
    architecture: str | None
    n_layers: int | None
    n_heads: int | None
    d_model: int | None
    max_len: int | None
    attention: bool
    ready: bool
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
