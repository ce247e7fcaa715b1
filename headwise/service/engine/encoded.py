"""One input's tokens, as the tokenizer read them (service.engine.tokenizer)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Encoded:
    """One input's tokens: ids and type ids (T,) int64, and each token's string and character
    offsets. A pair's `segments` say per token 0 (first text), 1 (second text) or -1 (special
    token); None for a single text. Offsets of a pair's tokens are into their own text.

    Made from the tokenizer's encoding (`source`), the strings and offsets are built on first
    use: a plain embedding's answer never reads them (`materialize` builds them where one does,
    on the thread that tokenised). `source` may also be a function that makes that encoding
    (the text encoded again): for ids from `encode_batch_fast`, whose encodings carry neither
    strings nor offsets."""

    __slots__ = ("_offsets", "_source", "_tokens", "ids", "segments", "type_ids", "words")

    def __init__(self, ids: np.ndarray, type_ids: np.ndarray, tokens: list[str] | None = None,
                 offsets: list[tuple[int, int]] | None = None, segments: np.ndarray | None = None,
                 source=None, words: list[tuple[int, int] | None] | None = None):
        if (tokens is None or offsets is None) and source is None:
            raise ValueError("Encoded needs tokens and offsets, or the encoding they come from")
        self.ids, self.type_ids, self.segments = ids, type_ids, segments
        self._tokens, self._offsets, self._source = tokens, offsets, source
        self.words = words  # per token, its word's characters in its own text (encode_items(words=True))

    def _encoding(self):
        if callable(self._source):
            self._source = self._source()
        return self._source

    @property
    def tokens(self) -> list[str]:
        if self._tokens is None:
            self._tokens = self._encoding().tokens
        return self._tokens

    @property
    def offsets(self) -> list[tuple[int, int]]:
        if self._offsets is None:
            self._offsets = self._encoding().offsets
        return self._offsets

    def materialize(self) -> Encoded:
        """Build the strings and offsets now, and let the tokenizer's encoding go."""
        if self._source is not None:
            _ = self.tokens, self.offsets
            self._source = None
        return self

    @property
    def length(self) -> int:
        return len(self.ids)

    def picked(self, keep: np.ndarray) -> Encoded:
        """The tokens at positions `keep` (ascending, int), as one encoding: its strings and
        offsets still built on first use where this one's are."""
        segments = None if self.segments is None else self.segments[keep]
        words = None if self.words is None else [self.words[k] for k in keep]
        if self._source is None:
            return Encoded(self.ids[keep], self.type_ids[keep], [self._tokens[k] for k in keep],
                           [self._offsets[k] for k in keep], segments, words=words)
        return Encoded(self.ids[keep], self.type_ids[keep], segments=segments, words=words,
                       source=lambda: _Read([self.tokens[k] for k in keep], [self.offsets[k] for k in keep]))


class _Read(NamedTuple):
    """What an encoding source gives (Encoded.tokens, Encoded.offsets)."""

    tokens: list[str]
    offsets: list[tuple[int, int]]
