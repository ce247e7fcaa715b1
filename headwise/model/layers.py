"""Encoder and decoder layers: attention and feed-forward sublayers, each wrapped in a
residual connection with LayerNorm (§3.1, §5.4), post-LN as in the paper or pre-LN."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from headwise.model.attention import MultiHeadAttention
from headwise.model.config import TransformerConfig
from headwise.model.norms import norm

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
        self.w_1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.w_2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = _ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class GatedFeedForward(nn.Module):
    """FFN_GLU(x) = (act(x W_gate) ⊙ x W_up) W_down (Shazeer 2020, "GLU Variants Improve
    Transformer", eqs. 5-6): SwiGLU with silu (Qwen3), GeGLU with gelu (ModernBERT)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.w_gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.w_up = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.w_down = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = _ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_down(self.dropout(self.act(self.w_gate(x)) * self.w_up(x)))  # (B, T, D)


def feed_forward(cfg: TransformerConfig) -> nn.Module:
    return GatedFeedForward(cfg) if cfg.gated_ff else FeedForward(cfg)


class Residual(nn.Module):
    """x + Sublayer(x), normalised after (post-LN: LayerNorm(x + Sublayer(x)), the paper)
    or before (pre-LN: x + Sublayer(LayerNorm(x)), GPT-2). The norm is the config's (LayerNorm
    or RMSNorm); `normalise=False` leaves a pre-LN input as it is (ModernBERT's first layer)."""

    def __init__(self, cfg: TransformerConfig, normalise: bool = True):
        super().__init__()
        self.norm = norm(cfg) if normalise else nn.Identity()
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, tuple]:
        """sublayer(h) returns (output, *extras); extras (weights, cache) pass through."""
        if self.norm_first:
            out, *extras = sublayer(self.norm(x))
            return x + self.dropout(out), tuple(extras)
        out, *extras = sublayer(x)
        return self.norm(x + self.dropout(out)), tuple(extras)


def self_attention(cfg: TransformerConfig) -> MultiHeadAttention:
    """The config's attention: its heads, key/value heads, head width, biases and q/k norms."""
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout, cfg.bias, cfg.n_kv_heads, cfg.head_dim,
                              cfg.layer_norm_eps if cfg.qk_norm else None)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward (§3.1, left of Figure 1). `index`: the layer's place
    in the stack (ModernBERT's layer 0 does not normalise its input)."""

    def __init__(self, cfg: TransformerConfig, index: int = 0):
        super().__init__()
        self.self_attn = self_attention(cfg)
        self.ff = feed_forward(cfg)
        self.attn_residual = Residual(cfg, normalise=index > 0 or cfg.first_attn_norm)
        self.ff_residual = Residual(cfg)

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False, fused: bool | None = None,
        head_mask: Tensor | None = None, rope: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """head_mask: (B, H) multipliers of this layer's heads (MultiHeadAttention); rope: the
        rotary (cos, sin) of the input's positions."""
        x, (weights, _) = self.attn_residual(
            x, lambda h: self.self_attn(h, h, h, mask, need_weights, fused, head_mask=head_mask, rope=rope)
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
