"""Left truncation: a text cut at its start, keeping its last tokens, as `tokenizers` cuts with
TruncationDirection::Left (TEI's `truncation_direction: left`, Cohere's `truncate: START`).

Like the tokenizer's right cut (TextTokenizer.encode_unchecked), a text is read only as far as
its answer needs, from its end: a suffix of `chars` characters, four times longer while that is
not enough. A suffix cut through a word (or a normaliser's sequence) can only change its first
tokens, so one whose tokens pass max_len by the margin ends with the whole text's last ones.
Offsets are then shifted back into the whole text."""

from __future__ import annotations

import numpy as np
from tokenizers import Encoding, Tokenizer


def tail(text: str, chars: int) -> str:
    return text[-chars:] if len(text) > chars else text


def singles(tok: Tokenizer, texts: list[str], max_len: int, special_tokens: bool, chars: int, margin: int):
    """Per text, (ids, type ids, tokens, offsets) of its encoding cut from the left to max_len.
    `tok`: the tokenizer cutting at the start (`enable_truncation(max_len, direction="left")`),
    without padding, whose own post-processing makes each answer (a second pass would trim a
    byte-level token's offsets again)."""
    out: list = [None] * len(texts)
    todo = list(range(len(texts)))
    while todo:
        tails = [tail(texts[i], chars) for i in todo]
        again = []
        for i, t, e in zip(todo, tails, tok.encode_batch(tails, add_special_tokens=special_tokens), strict=True):
            if len(t) == len(texts[i]) or len(e) + sum(len(o) for o in e.overflowing) > max_len + margin:
                out[i] = _placed(e, len(texts[i]) - len(t))
            else:
                again.append(i)
        todo, chars = again, chars * 4
    return out


def _placed(e: Encoding, shift: int):
    """A tail's encoding, its offsets moved by `shift` into the whole text (a special token's
    stay (0, 0))."""
    offsets = e.offsets if not shift else [
        o if special else (o[0] + shift, o[1] + shift) for o, special in zip(e.offsets, e.special_tokens_mask,
                                                                           strict=True)]
    return np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64), e.tokens, offsets
