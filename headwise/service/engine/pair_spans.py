"""A pair's per-token spans (service.engine.tokenizer): each token's word's characters, and
offsets moved to where each side of the pair was read from."""

from __future__ import annotations

import numpy as np


def word_chars(e, positions) -> list[tuple[int, int] | None]:
    """Per token of encoding `e` at `positions`, the characters [start, end) in its own text of
    the word it is a piece of, as far as the word's pieces at `positions` (ascending) reach: what
    the tokenizer's word_to_chars reads of the encoding cut to them, its first piece's start and
    its last piece's end (a word the cut goes through ends with its last kept piece); None for a
    token of no word (a special token)."""
    word_ids, sequence_ids, offsets = e.word_ids, e.sequence_ids, e.offsets
    reach: dict[tuple[int, int], tuple[int, int]] = {}
    for i in positions:
        if (w := word_ids[i]) is not None:
            start, end = offsets[i]
            reach[(sequence_ids[i], w)] = (reach.get((sequence_ids[i], w), (start,))[0], end)
    return [None if word_ids[i] is None else reach[(sequence_ids[i], word_ids[i])] for i in positions]


def shifted(spans: list, segments: np.ndarray, shift: tuple[int, int]) -> list:
    """A pair's per-token spans, each side's moved by `shift`, where its text was read from."""
    if not any(shift):
        return spans
    return [s if s is None or side < 0 else (s[0] + shift[side], s[1] + shift[side])
            for s, side in zip(spans, segments.tolist(), strict=True)]
