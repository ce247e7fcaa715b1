"""Positional encodings, §3.5: the fixed sinusoids of the paper, or learned vectors."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...).  (max_len, d_model)"""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (T, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed encodings; a buffer, not a parameter, so nothing is learned."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]  # (B, T, D)


class LearnedPositionalEncoding(nn.Module):
    """One trained vector per position (BERT, GPT-2). The paper found both work alike (§3.5)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, positions: Tensor) -> Tensor:
        return self.embedding(positions)  # (B, T, D)


def positional_encoding(kind: str, max_len: int, d_model: int) -> nn.Module:
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(max_len, d_model)
    if kind == "learned":
        return LearnedPositionalEncoding(max_len, d_model)
    raise ValueError(f"unknown positional encoding {kind!r}")
