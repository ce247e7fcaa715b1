"""What an embedding request asks for (EmbedParams, AttentionSpec) and the bytes its answer
takes: the measures the attention and response budgets count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
INDEX_DTYPE = np.dtype("<i4")
# The most one value takes in the JSON orjson writes, its comma included ("-1.2345678e-5,"):
# what the response budgets count, so that a check holds for the bytes really built.
JSON_VALUE_BYTES = {"float32": 16, "float16": 11}
JSON_INDEX_BYTES = 6  # an int32 key index below 100,000 and its comma
TOKEN_BYTES = 48  # one token's string and [start, end] offsets in the JSON, generously


@dataclass(frozen=True)
class AttentionSpec:
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    all_layers: bool
    all_heads: bool
    format: str  # dense | topk
    top_k: int
    dtype: str  # float32 | float16
    encoding: str  # json | base64

    def item_size(self) -> int:
        return DTYPES[self.dtype].itemsize

    def nbytes(self, t: int) -> int:
        """Bytes of the dense [L, H, T, T] array this spec asks for (the budget's measure)."""
        return len(self.layers) * len(self.heads) * t * t * self.item_size()

    def returned_bytes(self, t: int) -> int:
        if self.format == "dense":
            return self.nbytes(t)
        k = min(self.top_k, t)
        return len(self.layers) * len(self.heads) * t * k * (self.item_size() + INDEX_DTYPE.itemsize)

    def serialized_bytes(self, t: int) -> int:
        """Bytes this input's attention takes in the response body."""
        values = len(self.layers) * len(self.heads) * t * (t if self.format == "dense" else min(self.top_k, t))
        return written_bytes(values, self.dtype, self.encoding, indices=values if self.format == "topk" else 0)


def written_bytes(values: int, dtype: str, encoding: str, indices: int = 0) -> int:
    """Bytes `values` attention weights of `dtype` (and top-k's int32 `indices`) take in a
    response body: JSON numbers, or base64 of the raw bytes."""
    if encoding == "base64":
        return -(-(values * DTYPES[dtype].itemsize + indices * INDEX_DTYPE.itemsize) * 4 // 3)
    return values * JSON_VALUE_BYTES[dtype] + indices * JSON_INDEX_BYTES


@dataclass(frozen=True)
class EmbedParams:
    output: str = "sentence"  # sentence | tokens
    normalize: bool = True
    truncate: bool = True
    attention: AttentionSpec | None = None


def response_bytes(params: EmbedParams, t: int, d_model: int) -> int:
    """An upper bound of the bytes one input of `t` tokens takes in a JSON response: its
    embedding (one vector, or one per token), its tokens and offsets, its attention."""
    vectors = t if params.output == "tokens" else 1
    attention = params.attention.serialized_bytes(t) if params.attention is not None else 0
    return vectors * d_model * JSON_VALUE_BYTES["float32"] + t * TOKEN_BYTES + attention
