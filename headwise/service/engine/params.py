"""What a request asks for (EmbedParams, AttentionSpec), what an embedding answers
(EmbedResult), and what an answer holds: the attention budget's bytes and the response's counts
(service.engine.size)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from headwise.service.engine.size import Block
from headwise.service.engine.stats import Timing
from headwise.service.engine.tokenizer import Encoded, Truncate
from headwise.service.engine.values import DTYPES, INDEX_DTYPE
from headwise.service.errors import Validation

if TYPE_CHECKING:
    from headwise.service.engine.internals import Ablation, HiddenSpec

AGGREGATES = ("none", "mean", "rollout")


@dataclass(frozen=True)
class AttentionSpec:
    """Which attention weights a request asks for, and how they are written; the same for
    embeddings (per input, [L, H, T, T]) and generation (per step, [L, H, 1, T]).

    `aggregate` (embeddings only) folds the selected weights before they are written: `mean`
    averages the selected heads of each selected layer ([L, T, T]); `rollout` multiplies the
    selected layers' head means, in increasing layer order (service.engine.analytics.rollout,
    [T, T]). Every measure below counts what is written: the aggregate."""

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    all_layers: bool
    all_heads: bool
    format: str = "dense"  # dense | topk (embeddings only)
    top_k: int = 1
    dtype: str = "float32"  # float32 | float16
    encoding: str = "json"  # json | base64
    aggregate: str = "none"  # none | mean | rollout (embeddings only)

    @classmethod
    def select(cls, n_layers: int, n_heads: int, layers: Sequence[int] | None, heads: Sequence[int] | None,
               **how) -> AttentionSpec:
        """The spec for a model of n_layers × n_heads; None: all. Raises Validation for an
        index out of range, an empty list, or an index given twice (which would weigh its
        layer twice in an aggregate: rollout would apply it twice)."""
        for what, sel, n in (("layers", layers, n_layers), ("heads", heads, n_heads)):
            if sel is not None and (not sel or any(not 0 <= i < n for i in sel)):
                raise Validation(f"attention.{what}: each must be in 0..{n - 1} and the list non-empty")
            if sel is not None and len(set(sel)) != len(sel):
                raise Validation(f"attention.{what}: each index at most once")
        if how.get("aggregate", "none") == "rollout" and layers is not None:
            layers = sorted(layers)  # rollout composes layers in the model's order
        return cls(layers=tuple(layers) if layers is not None else tuple(range(n_layers)),
                   heads=tuple(heads) if heads is not None else tuple(range(n_heads)),
                   all_layers=layers is None, all_heads=heads is None, **how)

    def item_size(self) -> int:
        return DTYPES[self.dtype].itemsize

    def planes(self) -> int:
        """How many [T, T] (or per-step) planes are written: L′·H′, L′ for mean, 1 for rollout."""
        if self.aggregate == "rollout":
            return 1
        return len(self.layers) * (1 if self.aggregate == "mean" else len(self.heads))

    def values_bytes(self, cells: int) -> int:
        """Bytes of `cells` weights per plane, dense, in this dtype."""
        return self.planes() * cells * self.item_size()

    def nbytes(self, t: int) -> int:
        """Bytes of the dense array this spec writes, [L, H, T, T] or its aggregate (the
        budget's measure)."""
        return self.values_bytes(t * t)

    def returned_bytes(self, t: int) -> int:
        if self.format == "dense":
            return self.nbytes(t)
        k = min(self.top_k, t)
        return self.planes() * t * k * (self.item_size() + INDEX_DTYPE.itemsize)

    def block(self, t: int) -> Block:
        """What this input's attention writes in the answer."""
        values = self.planes() * t * (t if self.format == "dense" else min(self.top_k, t))
        return Block(values, self.dtype, self.encoding, values if self.format == "topk" else 0)

    def cells_block(self, cells: int) -> Block:
        """What `cells` dense weights per plane write in the answer."""
        return Block(self.planes() * cells, self.dtype, self.encoding)


class RequestParams(Protocol):
    """What an encoder runtime's batching reads of a request's params, whichever operation's
    (EmbedParams, service.engine.classify.ClassifyParams)."""

    @property
    def truncate(self) -> Truncate: ...

    @property
    def max_tokens(self) -> int | None: ...  # with truncate: the cut's length, at most max_len (None: max_len)

    @property
    def special_tokens(self) -> bool: ...  # the post-processor's special tokens around each text

    @property
    def attention(self) -> AttentionSpec | None: ...

    @property
    def padded_attention(self) -> bool: ...

    @property
    def token_strings(self) -> bool: ...

    @property
    def analysis(self) -> bool: ...  # run on the analysis graph (hidden states, removed heads)

    @property
    def ablate(self) -> Ablation | None: ...


class Read(NamedTuple):
    """How a job's texts are read (service.engine.heads' `encode`); the jobs read alike are read
    together."""

    truncate: Truncate = True  # False: refuse what is too long; True: cut at the end; "left": at the start
    max_tokens: int | None = None  # with truncate: the cut's length (None: max_len)
    strings: bool = True  # token strings and offsets answered (without: the fast read, no offsets)
    special_tokens: bool = True  # the post-processor's special tokens added

    @classmethod
    def of(cls, params: RequestParams) -> Read:
        return cls(params.truncate, params.max_tokens, bool(params.token_strings), params.special_tokens)


@dataclass(frozen=True)
class EmbedParams:
    sentence: bool = True  # the pooled [d_model] embedding
    tokens: bool = False  # the last hidden state, [T, d_model]
    normalize: bool = True
    truncate: Truncate = True  # False: 422 when too long; "left": keep the last tokens
    max_tokens: int | None = None  # with truncate: cut at this many tokens (vLLM's truncate_prompt_tokens)
    special_tokens: bool = True  # false: each text without [CLS]/[SEP] (vLLM's add_special_tokens)
    attention: AttentionSpec | None = None
    # The attention budget counts the request's inputs padded to its longest ([N, L, H, T, T],
    # as KServe returns them) rather than each input at its own length.
    padded_attention: bool = False
    # The answer carries each input's token strings and offsets (/v1/embed's does): they are
    # built on the thread that tokenises, not when the answer is written.
    token_strings: bool = False
    hidden: HiddenSpec | None = None  # hidden states of chosen layers (service.engine.internals)
    ablate: Ablation | None = None  # heads removed

    @property
    def analysis(self) -> bool:
        return self.hidden is not None or self.ablate is not None


@dataclass(frozen=True, slots=True)
class Embedded:
    """One input's answer."""

    encoding: Encoded
    sentence: np.ndarray | None  # [d_model] float32
    tokens: np.ndarray | None  # [T, d_model] float32
    attention: dict | None  # service.engine.outputs.attention_payload
    hidden: dict | None = None  # service.engine.internals.HiddenSpec.payload


def usage(prompt: int, total: int | None = None) -> dict:
    """An answer's `usage`, OpenAI's shape: the tokens read, and those run (occlusion runs more)."""
    return {"prompt_tokens": prompt, "total_tokens": prompt if total is None else total}


class Counted:
    """A result whose answers' encodings are its usage (`data`: one answer per input)."""

    __slots__ = ()
    data: list

    @property
    def n_tokens(self) -> int:
        n = 0  # a loop: half a generator's cost for one input (every answer's usage and TEI's headers read it)
        for d in self.data:
            n += d.encoding.length
        return n

    @property
    def usage(self) -> dict:
        return usage(self.n_tokens)


@dataclass(frozen=True)
class EmbedResult(Counted):
    model: str
    version: str
    data: list[Embedded]
    answer_bytes: int  # what the answer takes as the engine's Measure writes it, checked when it was tokenised
    timing: Timing | None = None  # where its time went (None: not run through a batcher's job)
