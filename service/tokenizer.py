"""The package's tokenizer.json through `tokenizers`, with our own padding/truncation rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from service.errors import Validation

CHARS_PER_TOKEN = 64


@dataclass(frozen=True, slots=True)
class Encoded:
    ids: np.ndarray  # (T,) int64
    type_ids: np.ndarray  # (T,) int64
    tokens: list[str]
    offsets: list[tuple[int, int]]

    @property
    def length(self) -> int:
        return len(self.tokens)


class TextTokenizer:
    def __init__(self, file: str | Path, max_len: int):
        self.max_len = max_len
        # The file may carry its own padding and truncation (all-MiniLM-L6-v2 pads to 128);
        # they are switched off here and ours apply.
        self._truncating = Tokenizer.from_file(str(file))
        self._truncating.no_padding()
        self._truncating.enable_truncation(max_length=max_len)
        self._full = Tokenizer.from_file(str(file))
        self._full.no_padding()
        self._full.no_truncation()

    def encode_unchecked(self, texts: list[str], truncate: bool = True) -> list[Encoded]:
        tok = self._truncating if truncate else self._full
        # Truncation happens after the whole text is tokenised, so a text far longer than
        # max_len tokens could span is cut first: a 4 MB input then costs what a long
        # sentence does. With truncation the cut changes nothing kept; without, the cut is
        # at a space, so its tokens are the text's first ones and already show it is too long.
        cap = self.max_len * CHARS_PER_TOKEN
        if truncate:
            texts = [t if len(t) <= cap else t[:cap] for t in texts]
        else:
            texts = [t if len(t) <= cap or t.rfind(" ", 0, cap) <= 0 else t[:t.rfind(" ", 0, cap)]
                     for t in texts]
        return [Encoded(np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64),
                        e.tokens, e.offsets) for e in tok.encode_batch(texts)]

    def check(self, encs: list[Encoded]) -> None:
        """An input over max_len (only possible with truncate=False) raises Validation (422)."""
        for i, e in enumerate(encs):
            if e.length > self.max_len:
                raise Validation(
                    f"inputs[{i}] has {e.length} tokens or more, over this model's limit of "
                    f"{self.max_len} (send truncate: true to cut it)"
                )

    @property
    def vocab_size(self) -> int:
        return self._full.get_vocab_size(with_added_tokens=True)

    def check_ids(self, seqs: list[list[int]]) -> None:
        """Pre-tokenised inputs: each non-empty, at most max_len ids, each in the vocabulary."""
        n = self.vocab_size
        for i, s in enumerate(seqs):
            if not s or len(s) > self.max_len:
                raise Validation(f"input[{i}] has {len(s)} token ids; this model takes 1..{self.max_len}")
            if min(s) < 0 or max(s) >= n:
                raise Validation(f"input[{i}]: token ids must be in 0..{n - 1}")

    def from_ids(self, seqs: list[list[int]]) -> list[Encoded]:
        """Ids used as they are (no special tokens added), type ids 0, no character offsets."""
        tok = self._full
        return [Encoded(np.asarray(s, dtype=np.int64), np.zeros(len(s), dtype=np.int64),
                        [tok.id_to_token(i) or "" for i in s], [(0, 0)] * len(s)) for s in seqs]

    def encode(self, texts: list[str], truncate: bool = True) -> list[Encoded]:
        """Batch-encode; with truncate=False an input over max_len raises Validation (422)."""
        encs = self.encode_unchecked(texts, truncate)
        self.check(encs)
        return encs
