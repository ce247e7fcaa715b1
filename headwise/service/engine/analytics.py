"""Attention analytics as pure numpy functions over one input's weights and hidden states:
head aggregation, attention rollout, and the exact token-pair decomposition of a mean-pooled
cosine similarity. No HTTP, no batching: the engine calls these on what the graphs returned.

Attention is not explanation (Jain & Wallace 2019, "Attention is not Explanation"): these
summarise where the heads looked, not why the model answered as it did.
"""

from __future__ import annotations

import numpy as np


def head_mean(att: np.ndarray) -> np.ndarray:
    """[L, H, T, T] → [L, T, T]: each layer's heads averaged (rows still sum to 1), in float32
    (numpy's pairwise sums: within 1e-7 of a float64 mean for weights in [0, 1])."""
    return att.mean(axis=1, dtype=np.float32)


def rollout(att: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers",
    §3): with the residual connection counted as attention to oneself,
    Â_l = (1 − r)·mean_h(A_l) + r·I, rows renormalised, and R = Â_L ⋯ Â_1.

    att: [L, H, T, T] (layer 0 first) → [T, T], row i: how much each input token reaches the
    last layer's token i; rows sum to 1. Computed in float32, which halves the time of the
    products on the inference thread; it stays within 1e-6 of a float64 rollout (its rows are
    convex combinations, so rounding does not grow through the layers: tested)."""
    layers = att.mean(axis=1, dtype=np.float32)  # (L, T, T)
    t = layers.shape[-1]
    eye = np.eye(t, dtype=np.float32)
    out = eye
    for a in layers:  # R_l = Â_l · R_{l-1}
        a_hat = (1.0 - residual) * a + residual * eye
        a_hat /= a_hat.sum(axis=-1, keepdims=True)
        out = a_hat @ out
    return out


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
