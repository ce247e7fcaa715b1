"""MPNet's relative position bias (Song et al. 2020, "MPNet: Masked and Permuted Pre-training
for Language Understanding", which takes it from T5: Raffel et al. 2020, §2.1).

Besides its absolute positions, every attention score gets a learned scalar per head that
depends on the distance j − i between the query and the key, read from a small table of
buckets: exact distances for the nearest, logarithmically wider buckets up to max_distance,
and separate buckets for keys before and after the query. One table serves every layer: the
bias is computed once per forward (Encoder) and added to each layer's scores with the mask.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def relative_position_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """Distance j − i (any shape, int64) → bucket index in [0, num_buckets).

    Half the buckets are for keys after the query (j > i), half for keys before or at it; of
    each half, the first num_buckets/4 are exact distances 0, 1, ..., the rest cover up to
    max_distance on a log scale (every farther distance shares the last bucket)."""
    n = -relative_position
    half = num_buckets // 2
    bucket = (n < 0).to(torch.long) * half  # keys after the query: the upper half
    n = n.abs()
    max_exact = half // 2
    large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (half - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, half - 1))
    return bucket + torch.where(n < max_exact, n, large)


class RelativePositionBias(nn.Module):
    """bias[h, i, j] = table[bucket(j − i), h], shared by every layer."""

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_heads)

    def forward(self, t: int, device=None) -> Tensor:
        """The bias of a length-t input: (1, H, T, T), added to the attention scores."""
        pos = torch.arange(t, dtype=torch.long, device=device)
        relative = pos[None, :] - pos[:, None]  # (T, T): key position − query position
        buckets = relative_position_bucket(relative, self.num_buckets, self.max_distance)
        return self.table(buckets).permute(2, 0, 1)[None]  # (T, T, H) → (1, H, T, T)
