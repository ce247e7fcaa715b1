"""Inputs of an exact token length, built with the model's own tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

# Words that BERT-style WordPiece vocabularies keep whole, so a text grows by about one token
# per word; the builder checks the count with the real tokenizer either way.
PROSE = ("the quick brown fox jumps over the lazy dog while a small cat sat on the red mat "
         "and two men are playing chess in the park near the old river as the weather is "
         "lovely in the spring and she sells sea shells by the shore")
WORDS = tuple(PROSE.split())
FILLERS = ("the", "a", "is", "on", "at", "one", "two")


def count_tokens(tokenizer, text: str) -> int:
    """Tokens the model sees for `text`, specials included, without truncation."""
    return len(tokenizer.encode(text).ids)


def text_of_length(tokenizer, n: int, words: Sequence[str] = WORDS) -> str:
    """A text that the tokenizer (no padding, no truncation) turns into exactly n tokens,
    special tokens ([CLS], [SEP]) included. Raises ValueError when it cannot."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    base = count_tokens(tokenizer, "")
    if n < base:
        raise ValueError(f"{n} tokens is fewer than the {base} special tokens alone")
    fillers = [f for f in FILLERS if count_tokens(tokenizer, f) == base + 1]
    if not fillers:
        raise ValueError("no single-token filler word in this vocabulary")
    parts: list[str] = []
    count = base
    for i in range(4 * n + 8):  # bounded: every accepted word adds ≥ 1 token
        if count >= n:
            break
        word = words[i % len(words)]
        trial = count_tokens(tokenizer, " ".join([*parts, word]))
        if trial <= n:
            parts.append(word)
            count = trial
        else:  # a multi-token word overshoots: top up with single-token fillers
            parts.append(fillers[i % len(fillers)])
            count = count_tokens(tokenizer, " ".join(parts))
    text = " ".join(parts)
    got = count_tokens(tokenizer, text)
    if got != n:
        raise ValueError(f"built a text of {got} tokens, wanted {n}")
    return text
