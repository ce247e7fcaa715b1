"""WordPiece (Wu et al. 2016, §4.1; BERT: Devlin et al. 2019, §3.1), for the texts the ASCII path
takes (headwise.ascii_path): printable ASCII, lowered where the model is uncased, holding no added
token. On such a text BERT's pre-tokenizer only splits at whitespace and makes each punctuation
character a word of its own, so a word is a run of letters and digits or one punctuation mark,
and each word is read greedily, longest vocabulary entry first, later pieces with "##".

`tokenizers` reads such a text in about four times the CPU (bench/results/tokenizers-wordpiece.md):
it keeps an alignment per character through its pre-tokenizer and builds a map of every
character's byte offset to report offsets in characters. Here a text is one regular expression
and a dictionary lookup per word. The answer is the tokenizer's: ids, type ids, tokens and
offsets, with the special tokens of its post-processor's single template; `headwise export`
checks that on every package it takes (headwise.ascii_path.mismatches), and a tokenizer is
checked again on SELF_CHECK when the service loads it.
"""

from __future__ import annotations

import re
from itertools import islice

WORD = re.compile(r"[0-9A-Za-z]+|[!-/:-@\[-`{-~]")  # letters and digits, or one punctuation mark
_GROUP, _SPAN = re.Match.group, re.Match.span

# Texts the service reads both ways when it loads a tokenizer (headwise.service.engine.tokenizer).
SELF_CHECK = (
    "", " ", "a", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "don't stop-believing: 3.14159 is pi; e=mc^2 (einstein, 1905)",
    "tokenization unaffable hyperparameterisation xylophonists' zzzzqqqq",
    "email me at someone@example.com or visit https://example.org/a?b=c&d=e#f",
    "tabs\tand\nnewlines\r\nand    spaces", "$100 ~ 50% off! <tag> [x] {y} |z| `q` ^_^",
    "a" * 120 + " " + "b" * 99, "C++ vs. C# vs. F#... who's #1?", "1234567890 0987654321 42nd 3rd 1st",
)


class WordPiece:
    """A WordPiece model and its single-text template, or None from `of` where the tokenizer
    is not one this reads (any other model, pre-tokenizer or post-processor)."""

    def __init__(self, vocab: dict[str, int], unk: str, prefix: str, max_chars: int,
                 before: list[tuple[str, int, int]], after: list[tuple[str, int, int]], type_id: int):
        self.vocab, self.unk, self.unk_id = vocab, unk, vocab[unk]
        self.prefix, self.max_chars = prefix, max_chars
        self.later = {t[len(prefix):]: i for t, i in vocab.items() if t.startswith(prefix)}
        # no piece is longer than the longest entry: a word is read in O(length × that), not O(length²)
        self.longest = max(map(len, vocab), default=1), max(map(len, self.later), default=1)
        self._long_entries = self.longest[0] > max_chars  # then a word found may still be too long
        self.before, self.after, self.type_id = before, after, type_id  # specials: (token, id, type id)
        self.added = len(before) + len(after)
        # before and after the text: the specials' ids, tokens and type ids
        self.specials = tuple(([i for _, i, _ in x], [t for t, _, _ in x], [y for _, _, y in x]) for x in (before, after))

    @classmethod
    def of(cls, config: dict) -> WordPiece | None:
        model, pre = config.get("model") or {}, config.get("pre_tokenizer") or {}
        if model.get("type") != "WordPiece" or pre.get("type") != "BertPreTokenizer":
            return None
        vocab, unk = model.get("vocab") or {}, model.get("unk_token")
        if unk not in vocab:
            return None
        template = _single(config.get("post_processor"))
        if template is None:
            return None
        before, after, type_id = template
        return cls(vocab, unk, model.get("continuing_subword_prefix", "##"),
                   int(model.get("max_input_chars_per_word", 100)), before, after, type_id)

    def pieces(self, text: str, limit: int) -> tuple[list[int], list[str], list[tuple[int, int]]]:
        """The first `limit` pieces of `text` (no special tokens): ids, strings, character offsets."""
        out: tuple[list, list, list] = ([], [], [])
        self._read(text, limit, *out)
        return out

    def _read(self, text: str, limit: int, ids: list, tokens: list, offsets: list) -> None:
        """Appends the first `limit` pieces of `text` to the three lists. A word gives one piece
        or more, so the first `limit` words are all it reads; where each is a vocabulary entry
        (most texts), the lists grow in a few calls that loop in C."""
        limit = max(limit, 0)  # no pieces below none
        matches = list(islice(WORD.finditer(text), limit))
        words = list(map(_GROUP, matches))
        found = list(map(self.vocab.get, words))
        try:  # the words before the first that is no entry (with an entry longer than max_chars, none)
            k = 0 if self._long_entries else found.index(None)
        except ValueError:
            k = len(found)
        ids += found[:k]
        tokens += words[:k]
        offsets += map(_SPAN, matches[:k])
        end = len(ids) - k + limit
        for m, word, i in zip(matches[k:], words[k:], found[k:], strict=True):
            short = len(word) <= self.max_chars  # a longer word is unknown, as in the tokenizer
            if i is not None and short:
                got = [(i, word, m.span())]
            else:
                start = m.start()
                got = self._split(word, start) if short else None
                if got is None:  # no reading: the whole word is unknown
                    got = [(self.unk_id, self.unk, m.span())]
                else:
                    got = [(i, t if o[0] == start else self.prefix + t, o) for i, t, o in got]
            for i, t, o in got:
                ids.append(i)
                tokens.append(t)
                offsets.append(o)
            if len(ids) >= end:
                break
        del ids[end:], tokens[end:], offsets[end:]

    def _split(self, word: str, start: int) -> list[tuple[int, str, tuple[int, int]]] | None:
        """Longest match first, left to right; None where some part matches nothing."""
        out, a, n, table, longest = [], 0, len(word), self.vocab, self.longest[0]
        while a < n:
            b = min(n, a + longest)
            while b > a:
                i = table.get(word[a:b])
                if i is not None:
                    break
                b -= 1
            else:
                return None
            out.append((i, word[a:b], (start + a, start + b)))
            a, table, longest = b, self.later, self.longest[1]
        return out

    def encode(self, text: str, special_tokens: bool, max_tokens: int):
        """(ids, type ids, tokens, offsets) of `text`, at most `max_tokens` tokens in all: its
        first pieces, then the template's special tokens where `special_tokens` (as the
        tokenizer truncating at max_tokens)."""
        ids, tokens, offsets = self.pieces(text, self.room(special_tokens, max_tokens))
        return self.framed(ids, tokens, offsets, special_tokens)

    def room(self, special_tokens: bool, max_tokens: int) -> int:
        """How many of a text's pieces an answer of at most `max_tokens` tokens keeps: those
        tokens less the template's special tokens where `special_tokens`, and every piece where
        max_tokens is below them (the tokenizer does not truncate below its special tokens)."""
        if not special_tokens:
            return max(max_tokens, 0)
        return 1 << 62 if max_tokens < self.added else max_tokens - self.added

    def framed(self, ids: list[int], tokens: list[str], offsets: list[tuple[int, int]], special_tokens: bool):
        """A text's pieces → (ids, type ids, tokens, offsets), within the template's special
        tokens where `special_tokens`."""
        framed, types = self.framed_ids(ids, special_tokens)
        if not special_tokens:
            return framed, types, tokens, offsets
        (b_ids, b_tokens, _), (a_ids, a_tokens, _) = self.specials
        return (framed, types, b_tokens + tokens + a_tokens,
                [(0, 0)] * len(b_ids) + offsets + [(0, 0)] * len(a_ids))

    def framed_ids(self, ids: list[int], special_tokens: bool) -> tuple[list[int], list[int]]:
        """`framed`'s ids and type ids alone."""
        types = [self.type_id] * len(ids)
        if not special_tokens:
            return ids, types
        (b_ids, _, b_types), (a_ids, _, a_types) = self.specials
        return b_ids + ids + a_ids, b_types + types + a_types


def _single(post: dict | None):
    """The single-text template of a post-processor: (special tokens before the text, after it,
    the text's type id), each special (token, id, type id); None for one this does not read."""
    if post is None:
        return [], [], 0
    kind = post.get("type")
    if kind in ("BertProcessing", "RobertaProcessing"):
        (cls, cls_id), (sep, sep_id) = post["cls"], post["sep"]
        return [(cls, cls_id, 0)], [(sep, sep_id, 0)], 0
    if kind != "TemplateProcessing":
        return None
    specials, before, after, seen, type_id = post.get("special_tokens") or {}, [], [], False, 0
    for piece in post.get("single") or []:
        if "Sequence" in piece:
            if seen or piece["Sequence"].get("id") != "A":
                return None
            seen, type_id = True, int(piece["Sequence"].get("type_id", 0))
            continue
        name = piece["SpecialToken"]["id"]
        spec = specials.get(name) or {}
        if len(spec.get("ids") or ()) != 1:
            return None
        (after if seen else before).append((spec["tokens"][0], spec["ids"][0], int(piece["SpecialToken"].get("type_id", 0))))
    return (before, after, type_id) if seen else None
