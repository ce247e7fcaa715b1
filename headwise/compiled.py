"""Token ids of the texts headwise.wordpiece reads, read by a compiled WordPiece (issue 37, item 6).

`tokie` (Rust, loads tokenizer.json) reads a single text of the ASCII path in about a tenth of
headwise.wordpiece's CPU (bench/results/tokie-ascii.md). Its ids and tokens are `tokenizers`'
on the texts the path reads; its offsets are not (it counts a later piece's "##" in its span),
so only its ids are taken, for answers that carry no token strings or offsets (a plain
embedding's), and headwise.wordpiece builds the strings and offsets if one is read after all.

It is used only at the version it was tested at (TESTED, pinned in constraints.txt), and only
where it reads the service's SELF_CHECK texts as the tokenizer does (headwise.ascii_path);
`headwise export` checks it text by text over the package's sets (ascii_path.mismatches).
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from headwise.wordpiece import WordPiece

TESTED = "0.1.4"


def installed() -> str | None:
    try:
        return version("tokie")
    except PackageNotFoundError:
        return None


class CompiledIds:
    """`WordPiece.encode`'s ids and type ids, the pieces read by tokie."""

    def __init__(self, tok, wp: WordPiece):
        self.tok, self.wp = tok, wp
        (self._b_ids, _, self._b_types), (self._a_ids, _, self._a_types) = wp.specials

    @classmethod
    def of(cls, file: str | Path, wp: WordPiece) -> CompiledIds | None:
        """The reader for tokenizer.json `file`, or None (logged) where tokie is not the tested
        version, cannot load it, or numbers its vocabulary otherwise."""
        found = installed()
        if found != TESTED:
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

    def encode(self, text: str, special_tokens: bool, max_tokens: int) -> tuple[list[int], list[int]]:
        """(ids, type ids) as `WordPiece.encode` gives them for `text` (lowered by the path)."""
        wp = self.wp
        pieces = self.tok.encode(text, add_special_tokens=False).ids
        if not special_tokens:
            ids = pieces[:max(max_tokens, 0)]
            return ids, [wp.type_id] * len(ids)
        if max_tokens < wp.added:  # the tokenizer does not truncate below its special tokens
            max_tokens = 1 << 62
        body = pieces[:max_tokens - wp.added]
        return self._b_ids + body + self._a_ids, self._b_types + [wp.type_id] * len(body) + self._a_types
