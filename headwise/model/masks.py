"""Padding and causal (look-ahead) masks, §3.2.3 of the paper.

Masks are boolean with True = "may attend", broadcastable to (B, H, T_q, T_k). A model
builds them once per forward and turns them into one additive bias with `to_bias`, the
form both the explicit and the fused attention paths (and onnxruntime's fuser) understand.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(attention_mask: Tensor) -> Tensor:
    """(B, T_k) with 1 for real tokens → (B, 1, 1, T_k): every query may see real keys only."""
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, Tk)


def causal_mask(t_q: int, t_k: int | None = None, device=None) -> Tensor:
    """(1, 1, T_q, T_k): query i sees keys 0..i (+ any past keys when T_k > T_q)."""
    t_k = t_q if t_k is None else t_k
    past = t_k - t_q
    q = torch.arange(t_q, device=device)[:, None]
    k = torch.arange(t_k, device=device)[None, :]
    return (k <= q + past)[None, None]  # (1, 1, Tq, Tk)


def local_mask(t: int, window: int, device=None) -> Tensor:
    """(1, 1, T, T): query i sees keys j with |i − j| ≤ window // 2, a band of `window` + 1
    tokens around it (ModernBERT's local attention; Beltagy et al. 2020, "Longformer", §3.1)."""
    pos = torch.arange(t, device=device)
    return ((pos[None, :] - pos[:, None]).abs() <= window // 2)[None, None]  # (1, 1, T, T)


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the given masks, ignoring None."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def to_bias(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Boolean mask → additive bias: 0 where allowed, the dtype's most negative value elsewhere.

    exp(min - max) underflows to exactly 0, so masked keys get exactly zero weight, and a row
    with every key masked becomes uniform instead of NaN (as Hugging Face does).
    """
    if mask is None:
        return None
    return (1.0 - mask.to(dtype)) * torch.finfo(dtype).min
