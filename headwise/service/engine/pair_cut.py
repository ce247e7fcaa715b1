"""Which tokens of a pair's encoding a cut to max_len keeps, as `tokenizers` cuts (LongestFirst,
OnlySecond) and transformers asks by `truncation`, at the end of each side or at its start."""

from __future__ import annotations

from typing import Literal

import numpy as np

Cut = Literal["longest_first", "only_second"]  # how a pair is cut (transformers' `truncation`)


def longest_first(n_a: int, n_b: int, budget: int) -> tuple[int, int]:
    """The tokens each side of a pair of n_a and n_b tokens keeps when cut to `budget` (max_len
    less the special tokens), as tokenizers' truncate_encodings cuts with LongestFirst: the
    shorter side (the first of equals) keeps its whole length where the longer can take the
    rest; else each keeps half, and the longer (the second of equals) the odd token."""
    if n_a + n_b <= budget:
        return n_a, n_b
    swap = n_a > n_b
    n1, n2 = (n_b, n_a) if swap else (n_a, n_b)  # n1 <= n2
    k1, k2 = n1, (n1 if n1 > budget else max(n1, budget - n1))
    if k1 + k2 > budget:
        k1, k2 = budget // 2, budget // 2 + budget % 2
    k1, k2 = min(k1, n1), min(k2, n2)
    return (k2, k1) if swap else (k1, k2)


def only_second(n_a: int, n_b: int, budget: int) -> tuple[int, int]:
    """The tokens each side keeps when cut to `budget` off the second text only (tokenizers'
    OnlySecond); uncut where the first text leaves the second no token."""
    if n_a + n_b <= budget or n_a >= budget:
        return n_a, n_b
    return n_a, budget - n_a


def kept(segments: np.ndarray, max_len: int, cut: Cut) -> np.ndarray:
    """Positions (ascending) of a pair encoding's tokens that `cut` keeps at max_len: every
    special token (segment -1) and each side's first tokens. `segments` (T,) int8."""
    first, second = segments == 0, segments == 1
    n_a, n_b = int(first.sum()), int(second.sum())
    counts = longest_first if cut == "longest_first" else only_second
    k_a, k_b = counts(n_a, n_b, max(max_len - (len(segments) - n_a - n_b), 0))
    keep = (~first & ~second) | (first & (np.cumsum(first) <= k_a)) | (second & (np.cumsum(second) <= k_b))
    return np.flatnonzero(keep)


def from_the_left(segments: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Positions (ascending) that keep as many of each side's tokens as `keep` does, but its
    last ones: the cut at their start (tokenizers' TruncationDirection::Left, which counts
    what each side keeps as a cut at the end does)."""
    out = segments < 0
    for side in (0, 1):
        mine = segments == side
        from_end = np.cumsum(mine[::-1])[::-1]  # per position, this side's tokens from it to the end
        out |= mine & (from_end <= int(mine[keep].sum()))
    return np.flatnonzero(out)


def window_count(segments: np.ndarray, max_len: int, stride: int) -> int:
    """How many windows `windows` reads a pair in, without making them. ValueError (with the
    room) where the pair does not fit and room ≤ stride, which tokenizers refuses."""
    if len(segments) <= max_len:
        return 1
    n_b = int((segments == 1).sum())
    room = max_len - (len(segments) - n_b)  # the second text's tokens per window (n_b > room: it does not fit)
    if room <= stride:
        raise ValueError(room)
    return 1 + -(-(n_b - room) // (room - stride))


def windows(segments: np.ndarray, max_len: int, stride: int) -> list[np.ndarray]:
    """Positions (ascending) of each window a pair is read in when its second text is cut with
    `stride` (tokenizers' OnlySecond cut and its overflowing encodings, transformers'
    `return_overflowing_tokens`): every special token and the whole first text, and the
    second's tokens [start, start + room) for start = 0, room − stride, … until one reaches its
    end, `room` being max_len less the others; one window where the pair fits. ValueError as
    `window_count`."""
    n = window_count(segments, max_len, stride)
    if len(segments) <= max_len:
        return [np.arange(len(segments))]
    second, others = np.flatnonzero(segments == 1), np.flatnonzero(segments != 1)
    room = max_len - len(others)
    step = room - stride
    return [np.sort(np.concatenate([others, second[k * step:k * step + room]])) for k in range(n)]
