"""Per-input results cut out of a padded batch: pooled or token embeddings, and attention
un-padded to the input's own T (or a pair's blocks between its two texts), with layer/head
selection, aggregation (head mean, rollout), top-k, dtype and encoding."""

from __future__ import annotations

import numpy as np

from headwise.service.engine.aggregate import head_mean, rollout
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.tokenizer import Encoded
from headwise.service.engine.values import DTYPES, INDEX_DTYPE, encode_array


def select_attention(att: np.ndarray, t: int, spec: AttentionSpec) -> np.ndarray:
    """att: one input's padded [L, H, Tp, Tp] → [L', H', T, T], contiguous, its dtype kept."""
    return np.ascontiguousarray(_layers_heads(att[:, :, :t, :t], spec))


def _layers_heads(att: np.ndarray, spec: AttentionSpec) -> np.ndarray:
    if not spec.all_layers:
        att = att[list(spec.layers)]
    if not spec.all_heads:
        att = att[:, list(spec.heads)]
    return att


def step_attention(att: np.ndarray, spec: AttentionSpec) -> dict:
    """A generation step's (or prompt's) attention (L, H, ...) → {shape, data}: the chosen
    layers and heads, in the spec's dtype and encoding."""
    a = np.ascontiguousarray(_layers_heads(att, spec), dtype=np.float32)
    return {"shape": list(a.shape), "data": encode_array(a.astype(DTYPES[spec.dtype], copy=False), spec.encoding)}


def topk(a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest keys per query row, largest first; ties go to the lower index."""
    k = min(k, a.shape[-1])
    idx = np.argsort(-a, axis=-1, kind="stable")[..., :k]
    return idx.astype(INDEX_DTYPE), np.take_along_axis(a, idx, axis=-1)


_F32_SUBNORMAL_F16 = np.uint32(113 << 23)  # float32 bits of 2^-14: below it a float16 is subnormal


def weights_to_f16(a: np.ndarray) -> np.ndarray:
    """float32 → float16, bit-identical to `astype`, for arrays in [0, 1] (attention weights).

    numpy's cast leaves its SIMD path for every value that becomes a float16 subnormal, and
    most attention weights are that small (figures: bench/results/experiments-cpu.md). Normal values round to nearest-even by integer
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


def aggregate(a: np.ndarray, how: str) -> np.ndarray:
    """Selected, un-padded [L′, H′, T, T] → as `how` says: itself, the head mean [L′, T, T],
    or the rollout of the selected layers [T, T] (float32; the spec's layers are in model
    order for rollout, AttentionSpec.select)."""
    if how == "mean":
        return head_mean(a)
    if how == "rollout":
        return rollout(a)
    return a


def _header(spec: AttentionSpec) -> dict:
    return {"layers": list(spec.layers), "heads": list(spec.heads), "aggregate": spec.aggregate,
            "format": spec.format, "dtype": spec.dtype, "encoding": spec.encoding}


def attention_payload(att: np.ndarray, t: int, spec: AttentionSpec) -> dict:
    return _header(spec) | array_payload(aggregate(select_attention(att, t, spec), spec.aggregate), spec)


def array_payload(a: np.ndarray, spec: AttentionSpec) -> dict:
    """An [L', H', R, C] block of weights (or an aggregate of fewer axes) → {shape, data}
    (dense) or {shape, index_dtype, data: {indices, values}} (top-k over the last axis), in
    the spec's dtype and encoding."""
    dtype = DTYPES[spec.dtype]
    if spec.format == "dense":
        return {"shape": list(a.shape), "data": encode_array(_cast(a, dtype), spec.encoding)}
    idx, vals = topk(a, spec.top_k)
    return {"shape": list(idx.shape), "index_dtype": "int32",
            "data": {"indices": encode_array(idx, spec.encoding),
                     "values": encode_array(_cast(np.ascontiguousarray(vals), dtype), spec.encoding)}}


def pair_attention(att: np.ndarray, enc: Encoded, spec: AttentionSpec) -> dict:
    """A pair's padded [L, H, Tp, Tp] weights → the blocks between its two texts, special tokens
    left out: `query_to_document` [L', H', Tq, Td] (query rows, document columns) and
    `document_to_query` [L', H', Td, Tq], with each text's tokens, offsets and positions in the
    pair's sequence. The rows are the full softmax's, not renormalised over the block."""
    seg = enc.segments
    q, d = np.flatnonzero(seg == 0), np.flatnonzero(seg == 1)
    a = _layers_heads(att, spec)

    def side(idx: np.ndarray) -> dict:
        return {"tokens": [enc.tokens[i] for i in idx], "offsets": [enc.offsets[i] for i in idx],
                "positions": idx.tolist()}

    return _header(spec) | {
        "query": side(q), "document": side(d),
        "query_to_document": array_payload(np.ascontiguousarray(a[:, :, q[:, None], d[None, :]]), spec),
        "document_to_query": array_payload(np.ascontiguousarray(a[:, :, d[:, None], q[None, :]]), spec)}


REPOOLED = ("mean", "cls", "lasttoken")  # the poolings `pool` does as the graph does


def pool(hidden: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    """hidden: one input's un-padded [T, D] (its real positions) → [D] float32."""
    if mode not in REPOOLED:
        raise ValueError(f"no pooling {mode!r} here")
    v = hidden[0] if mode == "cls" else hidden[-1] if mode == "lasttoken" else hidden.mean(axis=0, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if normalize:
        v = v / max(np.linalg.norm(v), 1e-12)
    return v.astype(np.float32)
