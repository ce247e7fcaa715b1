"""The texts headwise.wordpiece reads, read by a compiled WordPiece (issue 37, item 6).

`tokie` (Rust, loads tokenizer.json) reads a single text of the ASCII path in a fraction of
headwise.wordpiece's CPU (bench/results/tokie-ascii.md). Its ids and tokens are `tokenizers`'
on the texts the path reads. Its offsets are not, in two ways, both mended here: it spans a
word's later piece with its "##" (so every later piece of the word is shifted), and an
over-long word's [UNK] as the five characters of "[UNK]" (a text with an [UNK] is read by
headwise.wordpiece instead). For an answer that carries no strings or offsets, its ids are
read alone (`ids`: tokie builds no offsets, and no token is looked up).

It is used only at the version it was tested at (TESTED, pinned in constraints.txt), and only
where it reads the service's SELF_CHECK texts as the tokenizer does (headwise.ascii_path);
`headwise export` checks it text by text over the package's sets (ascii_path.mismatches).
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from itertools import compress
from pathlib import Path
from typing import NamedTuple

from headwise.wordpiece import WordPiece

TESTED = "0.1.4"


def installed() -> str | None:
    try:
        return version("tokie")
    except PackageNotFoundError:
        return None


class Reading(NamedTuple):
    """One text's reading with its parts named, as `tokenizers` names an encoding's."""

    ids: list[int]
    type_ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]


class Compiled:
    """`WordPiece.encode`, the pieces read by tokie."""

    def __init__(self, tok, wp: WordPiece):
        self.tok, self.wp = tok, wp
        self.later = frozenset(wp.later.values())  # the ids of "##" pieces
        table = [""] * (max(wp.vocab.values()) + 1)
        for token, i in wp.vocab.items():
            table[i] = token
        self._token = table.__getitem__

    @classmethod
    def of(cls, file: str | Path, wp: WordPiece) -> Compiled | None:
        """The reader for tokenizer.json `file`, or None (logged) where tokie is not the tested
        version, cannot load it, or numbers its vocabulary otherwise."""
        if wp.prefix != "##":  # the mend of its spans reads BERT's prefix
            return None
        if (found := installed()) != TESTED:
            logging.getLogger("headwise").warning(
                "tokenizer: tokie %s is installed, not %s (constraints.txt); plain texts are read by "
                "headwise.wordpiece, with the same answers and more CPU", found or "(none)", TESTED)
            return None
        import tokie

        try:
            tok = tokie.Tokenizer.from_json(str(file))
        except Exception as e:  # any refusal of the file leaves it to headwise.wordpiece
            logging.getLogger("headwise").warning("tokenizer: tokie cannot read %s (%s); plain texts are read by "
                                                  "headwise.wordpiece", file, e)
            return None
        if tok.get_vocab() != wp.vocab:  # tokie 0.1.4 numbers a vocabulary with gaps densely
            logging.getLogger("headwise").warning(
                "tokenizer: tokie numbers %s's vocabulary otherwise than the file; plain texts are read by "
                "headwise.wordpiece", file)
            return None
        tok.no_padding()
        tok.no_truncation()
        return cls(tok, wp)

    def encode(self, text: str, special_tokens: bool, max_tokens: int):
        """`WordPiece.encode`'s (ids, type ids, tokens, offsets) for `text` (lowered by the path):
        tokie's pieces, cut and framed by headwise.wordpiece's template (tokie 0.1.4 adds no
        special tokens for BERT's older BertProcessing)."""
        wp = self.wp
        e = self.tok.encode_with_offsets(text, add_special_tokens=False)
        ids = e.ids
        if wp.unk_id in ids:  # an over-long word's [UNK] is spanned as "[UNK]" by tokie: read it ours
            return wp.encode(text, special_tokens, max_tokens)
        offsets = e.offsets
        if len(ids) > (n := wp.room(special_tokens, max_tokens)):
            ids, offsets = ids[:n], offsets[:n]
        tokens = list(map(self._token, ids))  # the vocabulary's own strings: a third of the cost of tokie's
        if not self.later.isdisjoint(ids):  # tokie spans a later piece with its "##": not the text's
            mend(tokens, offsets, compress(range(len(ids)), map(self.later.__contains__, ids)))
        return wp.framed(ids, tokens, offsets, special_tokens)

    def pieces(self, text: str) -> list[int]:
        """The ids of the pieces `text` (lowered by the path) is read as, special tokens aside."""
        return self.tok.encode(text, add_special_tokens=False).ids

    def reading(self, text: str, special_tokens: bool, max_tokens: int) -> Reading:
        """`encode`'s answer as a Reading: what an Encoded read by `ids` builds its strings and
        offsets from, when its answer needs them."""
        return Reading(*self.encode(text, special_tokens, max_tokens))

    def ids(self, text: str, special_tokens: bool, max_tokens: int,
            pieces: list[int] | None = None) -> tuple[list[int], list[int]] | None:
        """`encode`'s ids and type ids alone (tokie builds no offsets, and no token is looked
        up), or None where `text` holds an [UNK] (`encode` reads it); `pieces`: the text's
        `pieces()`, where they were read already."""
        wp = self.wp
        ids = self.pieces(text) if pieces is None else pieces
        if wp.unk_id in ids:
            return None
        if len(ids) > (n := wp.room(special_tokens, max_tokens)):
            ids = ids[:n]
        return wp.framed_ids(ids, special_tokens)


def mend(tokens: list[str], offsets: list[tuple[int, int]], later) -> None:
    """The characters of the later pieces ("##...") at positions `later` (ascending), in place:
    each starts where the piece before it ended and spans its token less the "##" (tokie
    starts it there but spans the "##" too, so the pieces after it in the word are shifted);
    a word's first piece keeps tokie's span."""
    for i in later:
        start = offsets[i - 1][1]
        offsets[i] = (start, start + len(tokens[i]) - 2)
