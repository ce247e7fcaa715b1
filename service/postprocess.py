"""Per-input results cut out of a padded batch: pooled or token embeddings, and attention
un-padded to the input's own T, with layer/head selection, top-k, dtype and encoding."""

from __future__ import annotations

import base64
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


def encode_array(a: np.ndarray, encoding: str):
    """json: the array itself (orjson writes it); base64: little-endian C-order bytes."""
    a = np.ascontiguousarray(a)
    if encoding == "base64":
        return base64.b64encode(a.tobytes()).decode("ascii")
    return a


def select_attention(att: np.ndarray, t: int, spec: AttentionSpec) -> np.ndarray:
    """att: one input's padded [L, H, Tp, Tp] → [L', H', T, T], contiguous, its dtype kept."""
    a = att[:, :, :t, :t]
    if not spec.all_layers:
        a = a[list(spec.layers)]
    if not spec.all_heads:
        a = a[:, list(spec.heads)]
    return np.ascontiguousarray(a)


def topk(a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest keys per query row, largest first; ties go to the lower index."""
    k = min(k, a.shape[-1])
    idx = np.argsort(-a, axis=-1, kind="stable")[..., :k]
    return idx.astype(INDEX_DTYPE), np.take_along_axis(a, idx, axis=-1)


_F32_SUBNORMAL_F16 = np.uint32(113 << 23)  # float32 bits of 2^-14: below it a float16 is subnormal


def weights_to_f16(a: np.ndarray) -> np.ndarray:
    """float32 → float16, bit-identical to `astype`, for arrays in [0, 1] (attention weights).

    numpy's cast leaves its SIMD path for every value that becomes a float16 subnormal, and
    most attention weights are that small: 55 ms for [6, 12, 128, 128] against 7.6 ms here
    (bench/results/experiments-cpu.md). Normal values round to nearest-even by integer
    arithmetic on the bits; subnormals are rint(x · 2^24), exact in float32. Anything else
    (NaN, out of range) takes numpy's cast."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not a.size or not (a.min() >= 0.0 and a.max() <= 1.0):
        return a.astype(np.float16)
    u = a.view(np.uint32)
    normal = (u + (np.uint32(0x0FFF) + ((u >> 13) & 1))) >> 13
    normal -= np.uint32(112 << 10)  # float32 exponent bias 127 → float16's 15
    sub = np.rint(a * np.float32(2.0 ** 24)).astype(np.uint32)
    return np.where(u < _F32_SUBNORMAL_F16, sub, normal).astype(np.uint16).view(np.float16)


def _cast(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if a.dtype == dtype:  # the graph's own float16 weights
        return a
    return weights_to_f16(a) if dtype == np.float16 else a.astype(dtype, copy=False)


def attention_payload(att: np.ndarray, t: int, spec: AttentionSpec) -> dict:
    a = select_attention(att, t, spec)
    dtype = DTYPES[spec.dtype]
    out = {"layers": list(spec.layers), "heads": list(spec.heads), "format": spec.format,
           "dtype": spec.dtype, "encoding": spec.encoding}
    if spec.format == "dense":
        out["shape"] = list(a.shape)
        out["data"] = encode_array(_cast(a, dtype), spec.encoding)
    else:
        idx, vals = topk(a, spec.top_k)
        out["shape"] = list(idx.shape)
        out["index_dtype"] = "int32"
        out["data"] = {"indices": encode_array(idx, spec.encoding),
                       "values": encode_array(_cast(vals, dtype), spec.encoding)}
    return out


def pool(hidden: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    """hidden: one input's un-padded [T, D] → [D] float32."""
    v = hidden[0] if mode == "cls" else hidden.mean(axis=0, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if normalize:
        v = v / max(np.linalg.norm(v), 1e-12)
    return v.astype(np.float32)
