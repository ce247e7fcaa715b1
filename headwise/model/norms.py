"""Normalisation layers: LayerNorm (Ba et al. 2016, with or without its bias β, as ModernBERT
drops it) and RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"): the
LayerNorm without re-centring, x / RMS(x) · g with RMS(x) = √(mean(x²) + ε). Qwen3 uses RMSNorm
for its sublayers, its final norm, and per head on the queries and keys (q/k norm)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from headwise.model.config import TransformerConfig


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / √(mean(x², last dim) + ε) · g, eq. (4) of the paper; computed in float32
    whatever x's dtype, as transformers' Qwen3RMSNorm does."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., d)
        return self.weight * h.to(x.dtype)


def norm(cfg: TransformerConfig, d: int | None = None) -> nn.Module:
    """The config's normalisation over d (default d_model) features: LayerNorm (with β unless
    cfg.norm_bias is False) or RMSNorm."""
    d = d or cfg.d_model
    if cfg.norm == "rms":
        return RMSNorm(d, cfg.layer_norm_eps)
    return nn.LayerNorm(d, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)
