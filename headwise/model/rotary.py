"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding", §3.4).

Instead of adding a position vector to the token, RoPE rotates each query and key: pairs of
dimensions (i, i + d/2) turn by the angle pos · θ^(−2i/d), so the score q_m · k_n depends on
the positions only through m − n. The pairs are the two halves of the head (transformers'
`rotate_half` layout), not adjacent dimensions as in the paper's eq. (34).

The cosines and sines are a table over positions (built once, in float32 exactly as
transformers computes them per forward), so an exported graph gathers rows instead of
computing angles: an fp16 graph then holds the table rounded once rather than angles computed
in fp16, which lose whole radians at long positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def inverse_frequencies(d_rot: int, theta: float) -> Tensor:
    """θ^(−2i/d) for i = 0 .. d/2 − 1: (d/2,) float32."""
    return 1.0 / (theta ** (torch.arange(0, d_rot, 2, dtype=torch.int64).float() / d_rot))


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) → (−x2, x1) over the two halves of the last dimension."""
    x1, x2 = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (B, H, T, Dh); cos, sin: (B, 1, T, Dh) → x rotated by its positions' angles."""
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """cos and sin of pos · θ^(−2i/d) for every position below max_len, each half stored once."""

    def __init__(self, d_rot: int, max_len: int, theta: float):
        super().__init__()
        angles = torch.arange(max_len, dtype=torch.int64).float()[:, None] * inverse_frequencies(d_rot, theta)  # (T, d/2)
        self.register_buffer("cos_half", angles.cos(), persistent=False)
        self.register_buffer("sin_half", angles.sin(), persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """positions (B, T) or (1, T) → cos, sin (B, 1, T, Dh) to rotate every head alike."""
        cos, sin = self.cos_half[positions], self.sin_half[positions]  # (B, T, d/2)
        return torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]  # (B, 1, T, d)
