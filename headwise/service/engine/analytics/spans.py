"""Occlusion units other than single tokens: words and the character spans a client names.
A unit is the token positions one occlusion row masks out together (attention_mask 0).

- word: the tokenizer's own words, its word ids (the pre-tokenizer's splits; an added token is
  a word of its own), so a word's pieces ("un", "##bel", ...) go together.
- span: a character range [start, end) of the input; it holds every token whose characters
  overlap it. Spans may overlap or repeat: each is a row of its own.

Only tokens that cover characters of the input (offsets start < end) belong to a unit: the
tokens the post-processor adds ([CLS], [SEP], offsets (0, 0)) are part of no word and of no
span, and stay unmasked in every row. Offsets count characters (code points), as everywhere.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.errors import FIELD, TooLarge, Validation

Offsets = Sequence[tuple[int, int]]
Kind = Literal["word", "span"]


@dataclass(frozen=True)
class Unit:
    """Token positions masked together (ascending), and the characters [start, end) of the
    input they stand for: a word's, from its first token's start to its last token's end; a
    span's, as the client sent it."""

    start: int
    end: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Units:
    kind: Kind
    units: list[Unit]

    def __len__(self) -> int:
        return len(self.units)


class Encodes(Protocol):
    """What word_ranges needs of a tokenizer: `tokenizers.Tokenizer.encode`."""

    def encode(self, sequence: str, add_special_tokens: bool = True): ...


def located(offsets: Offsets) -> list[int]:
    """The positions of the tokens that cover characters of the input."""
    return [i for i, (s, e) in enumerate(offsets) if s < e]


def check_spans(spans: Sequence[Sequence[int]], n_chars: int, max_spans: int) -> list[tuple[int, int]]:
    """The client's spans as (start, end) pairs, each a character range of an input of
    `n_chars` characters; at most `max_spans` of them (MAX_CLIENT_BATCH − 1: a row each and
    one for the whole input). Raises Validation (TooLarge for too many) naming spans[i]."""
    if not spans:
        raise Validation(f"'{FIELD}' is empty: name at least one [start, end) character range, or leave it out",
                         field="spans")
    if len(spans) > max_spans:
        raise TooLarge(f"{FIELD} has {len(spans)} ranges: {len(spans) + 1} forward passes, over the {max_spans + 1} "
                       "inputs one request may ask for (HEADWISE_MAX_CLIENT_BATCH); send fewer spans", field="spans")
    out = []
    for i, span in enumerate(spans):
        if len(span) != 2:
            raise Validation(f"{FIELD}[{i}]: a span is [start, end], two character indices", field="spans")
        s, e = span
        if not 0 <= s < e <= n_chars:
            raise Validation(f"{FIELD}[{i}]: [{s}, {e}) is not a character range of the input: "
                             f"needs 0 ≤ start < end ≤ {n_chars} (its length in characters)", field="spans")
        out.append((s, e))
    return out


def span_units(offsets: Offsets, spans: Sequence[tuple[int, int]]) -> Units:
    """Each span's unit: the located tokens whose characters overlap [start, end). A span that
    holds none (whitespace only, or past where truncation cut the input) raises Validation."""
    tokens = [(i, offsets[i]) for i in located(offsets)]
    units = []
    for n, (start, end) in enumerate(spans):
        held = tuple(i for i, (s, e) in tokens if s < end and e > start)
        if not held:
            raise Validation(f"{FIELD}[{n}]: characters [{start}, {end}) hold no token of the input (only "
                             "whitespace, or past where truncation cut it)", field="spans")
        units.append(Unit(start, end, held))
    return Units("span", units)


def word_ranges(tokenizer: Encodes, text: str) -> list[tuple[int, int]]:
    """Each word's characters [start, end) in `text`, in order: the characters of the tokens
    the tokenizer numbers with one word id."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    ranges: dict[int, tuple[int, int]] = {}
    for w, (s, e) in zip(enc.word_ids, enc.offsets, strict=True):
        if w is None or s >= e:
            continue
        a, b = ranges.get(w, (s, e))
        ranges[w] = (min(a, s), max(b, e))
    return sorted(ranges.values())


def group_words(offsets: Offsets, words: Sequence[tuple[int, int]]) -> Units:
    """The located tokens grouped by the word (ranges in order, disjoint) that holds each one's
    first character, in the order of the text; a token in no word is a unit of its own."""
    starts = [s for s, _ in words]
    groups: dict[object, list[int]] = {}
    for i in located(offsets):
        s = offsets[i][0]
        w = bisect_right(starts, s) - 1
        groups.setdefault(w if w >= 0 and s < words[w][1] else ("alone", i), []).append(i)
    return Units("word", [Unit(offsets[ix[0]][0], max(offsets[i][1] for i in ix), tuple(ix))
                          for ix in groups.values()])


def word_units(tokenizer: TextTokenizer, text: str, enc: Encoded) -> Units:
    """The words of `text` that `enc` (its tokens, maybe truncated) holds. Only the text up to
    the last token's end is read again: the words before it are split as in the whole text,
    and the one it may cut still holds that token's characters. Blocking: a tokenizer thread."""
    offsets = enc.offsets
    cut = max((offsets[i][1] for i in located(offsets)), default=0)
    return group_words(offsets, word_ranges(tokenizer.untruncated, text[:cut]))
