"""Encoder and decoder layers: attention and feed-forward sublayers, each wrapped in a
residual connection with LayerNorm (§3.1, §5.4), post-LN as in the paper or pre-LN."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from headwise.model.attention import MultiHeadAttention
from headwise.model.config import TransformerConfig

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position alike, eq. (2)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.w_1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.w_2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.act = _ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class Residual(nn.Module):
    """x + Sublayer(x), normalised after (post-LN: LayerNorm(x + Sublayer(x)), the paper)
    or before (pre-LN: x + Sublayer(LayerNorm(x)), GPT-2)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, tuple]:
        """sublayer(h) returns (output, *extras); extras (weights, cache) pass through."""
        if self.norm_first:
            out, *extras = sublayer(self.norm(x))
            return x + self.dropout(out), tuple(extras)
        out, *extras = sublayer(x)
        return self.norm(x + self.dropout(out)), tuple(extras)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward (§3.1, left of Figure 1)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ff = FeedForward(cfg)
        self.attn_residual = Residual(cfg)
        self.ff_residual = Residual(cfg)

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False, fused: bool | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """head_mask: (B, H) multipliers of this layer's heads (MultiHeadAttention)."""
        x, (weights, _) = self.attn_residual(
            x, lambda h: self.self_attn(h, h, h, mask, need_weights, fused, head_mask=head_mask)
        )
        x, _ = self.ff_residual(x, lambda h: (self.ff(h),))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, then (for encoder-decoder models) attention over the encoder
    output, then feed-forward (§3.1, right of Figure 1)."""

    def __init__(self, cfg: TransformerConfig, cross_attention: bool):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.attn_residual = Residual(cfg)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout) if cross_attention else None
        self.cross_residual = Residual(cfg) if cross_attention else None
        self.ff = FeedForward(cfg)
        self.ff_residual = Residual(cfg)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
        past: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None, tuple[Tensor, Tensor]]:
        """Returns (x, self-attention weights, cross-attention weights, present K/V)."""
        x, (self_w, present) = self.attn_residual(
            x, lambda h: self.self_attn(h, h, h, self_mask, need_weights, fused, past)
        )
        cross_w = None
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("this decoder layer attends to an encoder: pass memory")
            x, (cross_w, _) = self.cross_residual(
                x, lambda h: self.cross_attn(h, memory, memory, memory_mask, need_weights, fused)
            )
        x, _ = self.ff_residual(x, lambda h: (self.ff(h),))
        return x, self_w, cross_w, present
