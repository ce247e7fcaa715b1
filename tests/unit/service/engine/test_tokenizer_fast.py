"""Texts read without offsets (TextTokenizer.encode_unchecked(strings=False): `tokenizers`'
encode_batch_fast, for answers that carry no token strings) have the same ids and type ids as
texts read with them, on every STS-B dev sentence the repository ships, the multilingual and
hostile sets of headwise/export/text_sets.py, and texts long enough to be read as prefixes; their
token strings and offsets, read after all, are the full encoding's. The embedding head reads
with strings unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headwise.export.stsb import BUNDLED, load_pairs
from headwise.export.text_sets import hostile, multilingual
from headwise.model.sentence import default_checkpoint  # the bundled all-MiniLM-L6-v2
from headwise.service.engine.heads.embedding import EmbeddingHead
from headwise.service.engine.params import Read
from headwise.service.engine.tokenizer import PREFIX_TOKENS, TextTokenizer
from tests.fixtures.tiny import tiny_tokenizer


def utf8(texts: list[str]) -> list[str]:
    """Those the tokenizer takes at all (a lone surrogate cannot cross into Rust)."""
    out = []
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            continue
        out.append(t)
    return out


@pytest.fixture(scope="module")
def minilm() -> Path:
    return default_checkpoint() / "tokenizer.json"


@pytest.fixture(scope="module")
def stsb() -> list[str]:
    a, b, _ = load_pairs(BUNDLED)
    return list(a) + list(b)


def same_ids(tok: TextTokenizer, texts: list[str], truncate: bool, special_tokens: bool):
    full = tok.encode_unchecked(texts, truncate, special_tokens, lazy=True)
    fast = tok.encode_unchecked(texts, truncate, special_tokens, lazy=True, strings=False)
    assert len(full) == len(fast) == len(texts)
    for f, q in zip(full, fast, strict=True):
        assert q.ids.dtype == f.ids.dtype == np.int64 and q.type_ids.dtype == np.int64
        assert np.array_equal(q.ids, f.ids) and np.array_equal(q.type_ids, f.type_ids)
    return full, fast


@pytest.mark.parametrize("special_tokens", [True, False])
@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("max_len", [256, 16])  # 16: most sentences cut, and read as prefixes
def test_stsb_sentences_have_the_same_ids_read_fast(minilm, stsb, max_len, truncate, special_tokens):
    assert len(stsb) == 3000
    tok = TextTokenizer(minilm, max_len)
    if max_len == 16:
        assert sum(len(t) > PREFIX_TOKENS * max_len for t in stsb) > 100  # the prefix loop runs
    same_ids(tok, stsb, truncate, special_tokens)


@pytest.mark.parametrize("truncate", [True, False])
def test_multilingual_and_hostile_texts_have_the_same_ids_read_fast(minilm, truncate):
    texts = utf8(multilingual() + hostile())
    assert len(texts) > 1000
    for max_len in (256, 16):
        same_ids(TextTokenizer(minilm, max_len), texts, truncate, True)


def test_strings_and_offsets_read_after_all_are_the_full_encodings(minilm, stsb):
    texts = [*stsb[:50], "naïve café 🙂 猫が好き", "e\u0301 \u202eevil\u202c", "hello " * 2000, "", "[CLS] x [SEP]"]
    for max_len, truncate in ((256, True), (16, True), (16, False)):
        tok = TextTokenizer(minilm, max_len)
        full, fast = same_ids(tok, texts, truncate, True)
        for i, (f, q) in enumerate(zip(full, fast, strict=True)):
            if i % 2:  # either way in: the strings first, or materialize
                assert q.tokens == f.tokens and q.offsets == f.offsets
            else:
                q.materialize()
                assert q._source is None and q.tokens == f.tokens and q.offsets == f.offsets
            assert len(q.tokens) == q.length


class Seen:
    """The calls the tokenizer gets."""

    def __init__(self, inner, calls: list[str]):
        self.inner, self.calls = inner, calls

    def encode_batch(self, texts, **kw):
        self.calls.append("encode_batch")
        return self.inner.encode_batch(texts, **kw)

    def encode_batch_fast(self, texts, **kw):
        self.calls.append("encode_batch_fast")
        return self.inner.encode_batch_fast(texts, **kw)

    def encode(self, text, **kw):
        self.calls.append("encode")
        return self.inner.encode(text, **kw)


def test_the_embedding_head_reads_with_strings_unless_told(tmp_path):
    tiny_tokenizer(tmp_path)
    tok = TextTokenizer(tmp_path / "tokenizer.json", 32, ascii=False)  # ASCII would go to headwise.wordpiece
    calls: list[str] = []
    tok._truncating, tok._full = Seen(tok._truncating, calls), Seen(tok._full, calls)
    head = EmbeddingHead.__new__(EmbeddingHead)
    texts = ["the cat sat on the mat", "hello world"]

    with_strings = head.encode(tok, texts, Read())
    assert calls == ["encode_batch"]
    assert [e.tokens for e in with_strings][1][0] == "[CLS]" and calls == ["encode_batch"]  # no second read

    calls.clear()
    without = head.encode(tok, texts, Read(strings=False))
    assert calls == ["encode_batch_fast"]
    for a, b in zip(with_strings, without, strict=True):
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.type_ids, b.type_ids)
    assert without[0].offsets == with_strings[0].offsets and calls == ["encode_batch_fast", "encode"]
    assert without[0].tokens == with_strings[0].tokens and calls == ["encode_batch_fast", "encode"]  # once


def test_other_callers_keep_the_full_encoding(minilm):
    """encode (the analytics routes, /v1/tokenize) and encode_items (pairs) carry offsets at once."""
    tok = TextTokenizer(minilm, 256)
    calls: list[str] = []
    tok._truncating, tok._full = Seen(tok._truncating, calls), Seen(tok._full, calls)
    enc = tok.encode(["the cat sat"])[0]
    assert enc.offsets[1] == (0, 3) and enc.tokens[1] == "the"
    pair = tok.encode_items([("the cat", "a dog")])[0]
    assert pair.tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[SEP]"]
    assert "encode_batch_fast" not in calls and "encode" not in calls
