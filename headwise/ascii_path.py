"""Printable ASCII read past the normalizer, with the same answer (issue 37, item 6).

BERT's normalizer (`BertNormalizer`: clean the text, split CJK characters, strip accents, lower
the case) is a third of `tokenizers`' CPU on English text (bench/results/tokenizers-ascii.md):
it walks the text a character at a time through Unicode tables and keeps an alignment per
character. On a text of printable ASCII (and tab, newline, carriage return) it can do nothing but
lower the case: no control character to remove (those are refused below), no CJK, no accent, and
the whitespace it maps to a space is whitespace to `BertPreTokenizer` either way. Python's
`str.lower` lowers ASCII exactly as the normalizer does and keeps every character's position.
So such a text, lowered, given to the same tokenizer without its normalizer, has the same ids,
type ids, tokens, offsets and word ids. One exception: an added token ([CLS], [SEP], [MASK],
...) is matched before the normalizer, on the text as sent, so a text that holds one's content
in any case is read the usual way.

Only tokenizers whose normalizer is `BertNormalizer` and whose pre-tokenizer is
`BertPreTokenizer` take this path (BERT, MiniLM, MPNet, DistilBERT); `headwise export`'s
verification checks it on the package's tokenizer against the usual reading (`mismatches`),
text by text, over the STS-B sentences, the multilingual and hostile sets and hostile ASCII
(export/text_sets.py).

Where the tokenizer is BERT's WordPiece, a single text the path takes is read by
headwise.wordpiece instead of the twin (about a quarter of its CPU): `AsciiPath.wordpiece`, kept
only where it reads SELF_CHECK as the tokenizer does, and checked with the twin by `mismatches`.
Such a text is read by a compiled WordPiece instead (`AsciiPath.compiled`, headwise.compiled)
where that too reads SELF_CHECK as the tokenizer does; `mismatches` checks it the same way.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from tokenizers import Tokenizer

from headwise import compiled, wordpiece

UNSAFE = re.compile(r"[^\t\n\r -~]")  # anything but printable ASCII, tab, newline, return


class AsciiPath:
    """A tokenizer's normalizer-free twin, and which texts it may read."""

    def __init__(self, config: dict, lowercase: bool, file: str | Path | None = None,
                 loaded: Tokenizer | None = None):
        """`file`: where `config` was read from, for the compiled reader (none without it);
        `loaded`: the tokenizer from it, where the caller has one (its normalizer is set aside
        and put back; padding and truncation, if it has them, are not changed)."""
        self.lowercase = lowercase
        # every added token's content, lowered (and normalized, for one matched after the
        # normalizer): a text holding one, in any case, goes the usual way
        usual = loaded if loaded is not None else _load(config, file)
        norm = usual.normalizer
        added = config.get("added_tokens") or ()
        self.added = tuple({t["content"].lower() for t in added}
                           | {norm.normalize_str(t["content"]).lower() for t in added if t.get("normalized")})
        # one search for any of them, instead of one `in` each
        self._holds_added = re.compile("|".join(map(re.escape, self.added))) if self.added else None
        # the twin's tokenizer.json, written by tokenizers (json.dumps of a vocabulary is slower)
        usual.normalizer = None
        self.bare = usual.to_str()  # its padding and truncation: each Reader sets its twin's
        usual.normalizer = norm
        if loaded is None:  # ours: the checks below read it without padding or truncation
            usual.no_padding()
            usual.no_truncation()
        self.wordpiece = wordpiece.WordPiece.of(config)
        self.compiled: compiled.Compiled | None = None
        if self.wordpiece is not None and (wrong := self.disagreements(usual, wordpiece.SELF_CHECK)):
            logging.getLogger("headwise").warning(
                "tokenizer: headwise.wordpiece reads %d test texts otherwise than the tokenizer (first: %r); "
                "the tokenizer reads them all", len(wrong), wrong[0])
            self.wordpiece = None
        if self.wordpiece is not None and file is not None:
            self.compiled = compiled.Compiled.of(file, self.wordpiece)
            if self.compiled is not None and (wrong := self.disagreements(usual, wordpiece.SELF_CHECK,
                                                                          reader=self.compiled)):
                logging.getLogger("headwise").warning(
                    "tokenizer: tokie reads %d test texts otherwise than the tokenizer (first: %r); "
                    "headwise.wordpiece reads them all", len(wrong), wrong[0])
                self.compiled = None

    def disagreements(self, usual: Tokenizer, texts, max_len: int | None = None, reader=None) -> list[str]:
        """The texts of `texts` the path takes that `reader` (`self.wordpiece`, or
        `self.compiled`) reads otherwise than `usual` (no padding; truncating at max_len, if
        given), with and without special tokens; a compiled reader's ids alone too (its `ids`)."""
        out, reader = [], reader or self.wordpiece
        label, cut = (", tokie" if reader is self.compiled else ""), (1 << 62 if max_len is None else max_len)
        if max_len is not None or usual.padding is not None or usual.truncation is not None:  # a copy set so
            usual = Tokenizer.from_str(usual.to_str())
            usual.no_padding()
            if max_len is None:
                usual.no_truncation()
            else:
                usual.enable_truncation(max_length=max_len)
        for text in texts:
            low = self.text(text)
            if low is None:
                continue
            for special in (True, False):
                e = usual.encode(text, add_special_tokens=special)
                if (e.ids, e.type_ids, e.tokens, e.offsets) != tuple(reader.encode(low, special, cut)) or (
                        reader is self.compiled and reader.ids(low, special, cut) not in (None, (e.ids, e.type_ids))):
                    out.append(f"{text!r} (special tokens: {special}, truncated: {max_len is not None}{label})")
        return out

    @classmethod
    def of(cls, file: str | Path, loaded: Tokenizer | None = None) -> AsciiPath | None:
        """The path for the tokenizer in `file` (`loaded` from it, where the caller has it), or
        None where its normalizer could do more to ASCII than lower its case."""
        config = json.loads(Path(file).read_text(encoding="utf-8"))
        norm, pre = config.get("normalizer"), config.get("pre_tokenizer")
        if not (isinstance(norm, dict) and norm.get("type") == "BertNormalizer"
                and isinstance(pre, dict) and pre.get("type") == "BertPreTokenizer"):
            return None
        return cls(config, bool(norm.get("lowercase", True)), file, loaded)

    def text(self, text: str) -> str | None:
        """What the twin reads for `text` (lowered), or None: read it the usual way."""
        if not text.isascii() or UNSAFE.search(text) is not None:
            return None
        low = text.lower()
        if self._holds_added is not None and self._holds_added.search(low) is not None:
            return None
        return low if self.lowercase else text

    def item(self, item):
        """`text` for a text, or for a pair (a, b) both sides, else None."""
        if isinstance(item, str):
            return self.text(item)
        a, b = self.text(item[0]), self.text(item[1])
        return None if a is None or b is None else (a, b)


class Reader:
    """`tok` (its truncation and padding set), its batches' texts and pairs that the path takes
    read by its twin; everything else is `tok`'s own."""

    def __init__(self, tok: Tokenizer, path: AsciiPath):
        self.usual, self.path = tok, path
        self.twin = Tokenizer.from_str(path.bare)
        self.twin.no_padding()
        self.twin.no_truncation()
        if (t := tok.truncation) is not None:
            self.twin.enable_truncation(**t)
        if (p := tok.padding) is not None:
            self.twin.enable_padding(**p)

    def encode_batch(self, items: list, **kw) -> list:
        return self._read("encode_batch", items, kw)

    def encode_batch_fast(self, items: list, **kw) -> list:
        return self._read("encode_batch_fast", items, kw)

    def __getattr__(self, name: str):
        return getattr(self.usual, name)

    def _read(self, call: str, items: list, kw: dict) -> list:
        plain = [self.path.item(x) for x in items]
        if all(p is None for p in plain):
            return getattr(self.usual, call)(items, **kw)
        if all(p is not None for p in plain):
            return getattr(self.twin, call)(plain, **kw)
        usual = [i for i, p in enumerate(plain) if p is None]
        bare = [i for i, p in enumerate(plain) if p is not None]
        out: list = [None] * len(items)
        for i, e in zip(usual, getattr(self.usual, call)([items[i] for i in usual], **kw), strict=True):
            out[i] = e
        for i, e in zip(bare, getattr(self.twin, call)([plain[i] for i in bare], **kw), strict=True):
            out[i] = e
        return out


def _load(config: dict, file: str | Path | None) -> Tokenizer:
    """The tokenizer `config` describes, from `file` where it was read from."""
    return Tokenizer.from_file(str(file)) if file is not None else Tokenizer.from_str(json.dumps(config))


def reader(tok: Tokenizer, path: AsciiPath | None):
    """`tok`, reading through `path` where there is one."""
    return tok if path is None else Reader(tok, path)


def mismatches(file: str | Path, texts: list[str], max_len: int = 512) -> list[str]:
    """Where the path's reading differs from the usual one (ids, type ids, tokens, offsets,
    word ids), for each text the path takes, alone and paired with the next, special tokens
    added, untruncated and (alone) truncated at max_len; [] when it agrees or takes nothing.
    (The normalizer runs before special tokens are added and truncation cuts: those two are
    only checked to be passed on.) With a WordPiece reader, also each single text as it reads
    it, with and without special tokens, whole and truncated at max_len and at 16 tokens, and
    with a compiled reader, its reading the same way."""
    path = AsciiPath.of(file)
    if path is None:
        return []
    taken = [t for t in texts if path.text(t) is not None]
    out = []
    for truncate, items in ((False, taken), (False, list(zip(taken, taken[1:] + taken[:1], strict=True))),
                            (True, taken[:100])):
        usual = Tokenizer.from_file(str(file))
        usual.no_padding()
        if truncate:
            usual.enable_truncation(max_length=max_len)
        else:
            usual.no_truncation()
        a, b = usual.encode_batch(items), Reader(usual, path).encode_batch(items)
        for item, x, y in zip(items, a, b, strict=True):
            if (x.ids, x.type_ids, x.tokens, x.offsets, x.word_ids) != (y.ids, y.type_ids, y.tokens, y.offsets,
                                                                         y.word_ids):
                out.append(f"{item!r} (truncated: {truncate})")
    readers = [r for r in (path.wordpiece, path.compiled) if r is not None]  # a compiled one only beside a wordpiece
    usual = Tokenizer.from_file(str(file)) if readers else None
    for reader in readers:
        out += path.disagreements(usual, taken, reader=reader)
        out += path.disagreements(usual, taken[:500], max_len, reader) + path.disagreements(usual, taken[:500], 16, reader)
    return out
