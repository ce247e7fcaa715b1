"""A cosine similarity and its exact split over token pairs, for a mean-pooled embedding, as pure
numpy functions (docs/analytics.md has the formula). No HTTP, no batching: the similarity
operation (service.engine.analytics.explain) calls these on what the graphs returned."""

from __future__ import annotations

import numpy as np


def pair_contributions(h_source: np.ndarray, h_target: np.ndarray) -> tuple[float, np.ndarray]:
    """The cosine of two mean-pooled embeddings, split exactly over token pairs.

    With u = mean_i h_i and v = mean_j g_j (real tokens only),
    cos(u, v) = Σ_ij h_i·g_j / (T_s · T_t · ‖u‖ · ‖v‖), so C_ij = h_i·g_j / (T_s T_t ‖u‖ ‖v‖)
    sums to the score. h_source: [T_s, D], h_target: [T_t, D] (the token states before
    pooling). Returns (score, C [T_s, T_t]). Exact for mean pooling only: CLS pooling uses one
    token, and there is no such split."""
    hs, ht = h_source.astype(np.float64), h_target.astype(np.float64)
    u, v = hs.mean(axis=0), ht.mean(axis=0)
    scale = len(hs) * len(ht) * np.linalg.norm(u) * np.linalg.norm(v)
    contrib = (hs @ ht.T) / scale
    score = clamp_cosine(float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v))))
    return score, contrib.astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """In float64, in [-1, 1]; 0 when either vector is zero."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    n = np.linalg.norm(a) * np.linalg.norm(b)
    return clamp_cosine(float(a @ b / n)) if n > 0 else 0.0


def clamp_cosine(c: float) -> float:
    """A cosine computed in floating point, held to [-1, 1]: rounding puts a vector's cosine
    with itself at 1.0000000000000002 now and then, which math.acos refuses (issue 40)."""
    return min(1.0, max(-1.0, c))


def top_pairs(contrib: np.ndarray, k: int) -> list[tuple[int, int, float]]:
    """The k token pairs that add most to the score: (source index, target index, value)."""
    flat = np.argsort(-contrib, axis=None, kind="stable")[:k]
    rows, cols = np.unravel_index(flat, contrib.shape)
    return [(int(i), int(j), float(contrib[i, j])) for i, j in zip(rows, cols, strict=True)]
