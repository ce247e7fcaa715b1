"""Positional encodings, §3.5: the fixed sinusoids of the paper, or learned vectors."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...).  (max_len, d_model)

    layout "interleaved" is the paper's; "split" puts the same d_model/2 sines in the first
    half and the cosines in the second (Marian, fairseq). Computed in float64 and rounded
    once to float32, as those implementations do: float32 arguments drift by ~1e-5 at
    position 500.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = pos * inv_freq  # (T, D/2)
    if layout == "split":
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).float()  # (T, D)
    if layout != "interleaved":
        raise ValueError(f"unknown sinusoidal layout {layout!r}")
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed encodings; a buffer, not a parameter, so nothing is learned."""

    def __init__(self, max_len: int, d_model: int, layout: str = "interleaved"):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, d_model, layout), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]  # (B, T, D)


class LearnedPositionalEncoding(nn.Module):
    """One trained vector per position (BERT, GPT-2). The paper found both work alike (§3.5)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, positions: Tensor) -> Tensor:
        return self.embedding(positions)  # (B, T, D)


def offset_positions(attention_mask: Tensor, offset: int) -> Tensor:
    """RoBERTa's positions (fairseq's): real tokens count from `offset` (pad_token_id + 1),
    padding sits at offset − 1, whichever side it is on. (B, T) → (B, T)."""
    mask = attention_mask.long()
    return mask.cumsum(-1) * mask + (offset - 1)  # (B, T)


def positional_encoding(kind: str, max_len: int, d_model: int, layout: str = "interleaved") -> nn.Module | None:
    """The vectors added to the token embeddings; None for rotary positions, which rotate the
    queries and keys inside attention instead (rotary.py)."""
    if kind == "rotary":
        return None
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(max_len, d_model, layout)
    if kind == "learned":
        return LearnedPositionalEncoding(max_len, d_model)
    raise ValueError(f"unknown positional encoding {kind!r}")
