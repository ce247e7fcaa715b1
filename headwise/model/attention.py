"""Scaled dot-product and multi-head attention (§3.2 of "Attention Is All You Need")."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headwise.model.norms import RMSNorm
from headwise.model.rotary import apply_rotary


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: nn.Module | None = None
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(QKᵀ / √d_k) V, eq. (1).

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v).
    mask: additive bias broadcastable to (..., T_q, T_k) (see `masks.to_bias`).
    Returns the output (..., T_q, d_v) and the weights (..., T_q, T_k); each row sums to 1.
    """
    scale = 1.0 / math.sqrt(q.size(-1))  # multiplied, not divided: bit-identical to HF eager
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(dim=-1)
    probs = dropout(weights) if dropout is not None else weights
    return torch.matmul(probs, v), weights


class FusedWeightsError(RuntimeError):
    """The fused kernel never materialises the weights, so it cannot return them."""


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Grouped-query attention (Ainslie et al. 2023, "GQA"): each of the n_kv key/value heads
    serves n_rep consecutive query heads. (B, H_kv, T, Dh) → (B, H_kv · n_rep, T, Dh)."""
    if n_rep == 1:
        return x
    b, h_kv, t, d = x.shape
    return x[:, :, None].expand(b, h_kv, n_rep, t, d).reshape(b, h_kv * n_rep, t, d)  # (B, H, T, Dh)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O, §3.2.2.

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V). The h per-head projections d_model → d_k
    are stored side by side as one d_model → d_model matrix per Q, K and V, which is the same
    map and one matmul instead of h.

    Later parts, each off by default: n_kv_heads < n_heads key/value heads shared by groups of
    query heads (GQA; the weights stay one map per query head); d_head other than
    d_model / n_heads; qk_norm: an RMSNorm over each head's queries and keys (Qwen3; eps
    given); rotary positions applied to queries and keys (forward's `rope`).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 n_kv_heads: int | None = None, d_head: int | None = None, qk_norm: float | None = None):
        super().__init__()
        if d_head is None and d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.d_head = d_head or d_model // n_heads
        self.w_q = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.w_k = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
        self.w_v = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_head, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        if qk_norm is not None:
            self.q_norm, self.k_norm = RMSNorm(self.d_head, qk_norm), RMSNorm(self.d_head, qk_norm)
        else:
            self.q_norm = self.k_norm = None

    def split_heads(self, x: Tensor, n_heads: int | None = None) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n_heads or self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
        past: tuple[Tensor, Tensor] | None = None,
        head_mask: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """query: (B, T_q, d_model); key/value: (B, T_k, d_model); mask: additive bias.

        need_weights: return every head's weights (B, H, T_q, T_k).
        fused: use F.scaled_dot_product_attention; defaults to `not need_weights`. Asking
            for weights from the fused path raises FusedWeightsError.
        past: cached (K, V), each (B, H, T_past, Dh), prepended to this step's keys/values.
        head_mask: (B, H) multipliers of each head's output before Concat · W_O (0 removes the
            head: the ablation of Michel et al. 2019; what transformers 4's `head_mask` did).
        rope: (cos, sin), each (B, 1, T, Dh): rotate queries and keys by their positions
            (rotary.py; self-attention without a past).
        Returns (output (B, T_q, d_model), weights or None, present (K, V) for caching: the
        n_kv_heads key/value heads before they are repeated).
        """
        if fused is None:
            fused = not need_weights
        if fused and need_weights:
            raise FusedWeightsError(
                "the fused attention path does not compute weights; call with fused=False"
            )
        b, t_q, _ = query.shape
        q = self.split_heads(self.w_q(query))  # (B, H, Tq, Dh)
        k = self.split_heads(self.w_k(key), self.n_kv_heads)  # (B, H_kv, Tk, Dh)
        v = self.split_heads(self.w_v(value), self.n_kv_heads)  # (B, H_kv, Tk, Dh)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, H_kv, Tpast+Tk, Dh)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        groups = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (B, H, Tk, Dh)
        if fused:
            p = self.dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        else:
            out, weights = attention(q, k, v, mask, self.dropout)  # (B, H, Tq, Dh)
        if head_mask is not None:
            out = out * head_mask[:, :, None, None].to(out.dtype)  # (B, H, 1, 1) over (B, H, Tq, Dh)
        out = out.transpose(1, 2).reshape(b, t_q, self.n_heads * self.d_head)  # (B, Tq, D)
        return self.w_o(out), (weights if need_weights else None), present
