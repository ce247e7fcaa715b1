"""What the task-head routes answer (/v1/tag, /v1/answer, /v1/fill_mask, /v1/embed_sparse), parsed: plain
dataclasses beside those of headwise.client.types, with the answer's JSON in `.raw`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headwise.client.types import Attention, Usage


@dataclass(frozen=True)
class TaggedToken:
    """A token's likeliest label (POST /v1/tag): `index` its position in the model's input,
    `start`/`end` its characters in the text; `scores` every label's, with all_scores."""

    index: int
    token: str
    start: int
    end: int
    label: str
    score: float
    scores: list[float] | None = None


@dataclass(frozen=True)
class Entity:
    """Tokens (or words) grouped as transformers' token-classification pipeline groups them."""

    entity_group: str
    score: float
    word: str
    start: int
    end: int


@dataclass(frozen=True, eq=False)
class TaggedText:
    index: int
    tokens: list[TaggedToken] | None  # aggregation_strategy "none"
    entities: list[Entity] | None  # another aggregation_strategy
    attention: Attention | None = None


@dataclass(frozen=True, eq=False)
class TagResult:
    model: str
    labels: list[str]
    data: list[TaggedText]  # per input
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """A span of the context: its characters [start, end) and its score."""

    answer: str
    score: float
    start: int
    end: int


@dataclass(frozen=True, eq=False)
class AnswerItem:
    index: int
    answers: list[Answer]  # best first
    attention: Attention | None = None


@dataclass(frozen=True, eq=False)
class AnswerResult:
    model: str
    data: list[AnswerItem]  # per (question, context) pair
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class Fill:
    """A token at a mask (POST /v1/fill_mask): its probability, id, string, and the text with it
    in the mask's place."""

    score: float
    token: int
    token_str: str
    sequence: str


@dataclass(frozen=True, eq=False)
class Mask:
    position: int  # the mask token's position in the model's input
    fills: list[Fill]  # best first


@dataclass(frozen=True, eq=False)
class FillItem:
    index: int
    masks: list[Mask]  # in the text's order
    attention: Attention | None = None


@dataclass(frozen=True, eq=False)
class FillMaskResult:
    model: str
    data: list[FillItem]  # per input
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, eq=False)
class SparseItem:
    """A text's sparse embedding (POST /v1/embed_sparse): its non-zero weights over the
    vocabulary, `indices` ascending; `tokens` each index's vocabulary entry, with decode."""

    index: int
    indices: np.ndarray  # int64 (nnz,)
    values: np.ndarray  # float32 (nnz,)
    tokens: list[str | None] | None = None
    attention: Attention | None = None

    def dense(self, size: int) -> np.ndarray:
        """The whole vector: `size` weights (the vocabulary's), zero where none is listed."""
        out = np.zeros(size, np.float32)
        out[self.indices] = self.values
        return out


@dataclass(frozen=True, eq=False)
class SparseResult:
    model: str
    data: list[SparseItem]  # per input
    usage: Usage
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
