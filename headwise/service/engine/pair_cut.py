"""Which tokens of an encoding a cut keeps, as `tokenizers` cuts (LongestFirst, OnlySecond) and
transformers asks by `truncation`, at the end of each side or at its start: a pair's at max_len or
shorter, and a single text's cut shorter than max_len (vLLM's `truncate_prompt_tokens`).

A single text cut to k keeps its special tokens and its first k − (those) tokens, which begin
what a cut at max_len keeps: so its cut to k is chosen from its encoding cut at max_len. A
pair's is not: longest_first at k does not follow from longest_first at max_len (the side that
is longer decides), so a pair is cut at k from its whole encoding."""

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
    OnlySecond); uncut where the first text leaves the second no token, but a budget of 0
    keeps no token of either (tokenizers' truncate_encodings, whatever the strategy)."""
    if budget == 0:
        return 0, 0
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


def single_kept(n: int, lead: int, trail: int, k: int, left: bool = False) -> np.ndarray:
    """Positions (ascending) a cut to k keeps of a single text's n tokens framed by `lead` and
    `trail` special tokens (service.engine.specials.Frame): all of them where n ≤ k, else the
    specials and the text's first k − lead − trail tokens (`left`: its last ones)."""
    if n <= k:
        return np.arange(n)
    room = max(k - lead - trail, 0)
    start = n - trail - room if left else lead
    return np.concatenate([np.arange(lead), np.arange(start, start + room), np.arange(n - trail, n)])


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
