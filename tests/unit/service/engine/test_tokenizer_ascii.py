"""Printable ASCII read past BERT's normalizer (headwise.ascii_path): the same ids, type ids,
tokens, offsets and word ids as `tokenizers` gives, on the shipped all-MiniLM-L6-v2 tokenizer,
a cased one, and one whose added tokens are matched after the normalizer; a tokenizer whose
normalizer could do more is read the usual way; the check `headwise export` runs finds a path
that reads wrong; TextTokenizer's answers are the same with the path and without it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, normalizers

from headwise.ascii_path import AsciiPath, Reader, mismatches
from headwise.export.manifest import PackageError
from headwise.export.text_sets import ascii_hostile, hostile, multilingual, stsb
from headwise.export.verify import check_ascii_path
from headwise.model.sentence import default_checkpoint  # the bundled all-MiniLM-L6-v2
from headwise.service.engine.tokenizer import TextTokenizer
from tests.fixtures.families import ROBERTA_SPECIALS, ROBERTA_TEMPLATE, bpe_tokenizer
from tests.fixtures.tiny import tiny_tokenizer

MINILM = default_checkpoint() / "tokenizer.json"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return stsb() + multilingual() + hostile() + ascii_hostile()


def test_the_shipped_tokenizer_reads_ascii_alike(texts):
    path = AsciiPath.of(MINILM)
    assert path is not None and path.lowercase
    taken = [t for t in texts if path.text(t) is not None]
    assert len(taken) > 3000  # the STS-B sentences are ASCII, nearly all
    assert mismatches(MINILM, texts, 256) == []


def test_what_the_path_leaves_to_the_usual_reading():
    path = AsciiPath.of(MINILM)
    assert path.text("Hello World") == "hello world"
    assert path.text("tab\tnew\nline\rreturn") == "tab\tnew\nline\rreturn"
    for text in ("café", "del\x7f", "nul\x00", "vt\x0b", "esc\x1b[0m", "[SEP]", "x[mask]y", "a [Cls] b"):
        assert path.text(text) is None, text
    assert path.item(("a", "b")) == ("a", "b") and path.item(("a", "é")) is None


def test_a_cased_tokenizer_keeps_its_case(tmp_path, texts):
    tiny_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.save(str(tmp_path / "tokenizer.json"))
    path = AsciiPath.of(tmp_path / "tokenizer.json")
    assert not path.lowercase and path.text("The Cat") == "The Cat"
    assert mismatches(tmp_path / "tokenizer.json", texts, 32) == []


def test_an_added_token_matched_after_the_normalizer_is_left_to_it(tmp_path):
    tiny_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.add_tokens([AddedToken("Café", normalized=True)])  # normalized: "cafe", matched in "cafe"
    tok.save(str(tmp_path / "tokenizer.json"))
    assert AsciiPath.of(tmp_path / "tokenizer.json").text("a cafe here") is None
    assert mismatches(tmp_path / "tokenizer.json", ["a cafe here", "CAFE", "cafeteria", "the cat"], 32) == []


def test_other_normalizers_are_read_the_usual_way(tmp_path):
    bpe_tokenizer(tmp_path, ROBERTA_SPECIALS, ROBERTA_TEMPLATE)
    assert AsciiPath.of(tmp_path / "tokenizer.json") is None
    tok = TextTokenizer(tmp_path / "tokenizer.json", 32)
    assert tok.ascii is None and isinstance(tok._full, Tokenizer)
    config = json.loads(MINILM.read_text())
    (tmp_path / "nfc.json").write_text(json.dumps({**config, "normalizer": {"type": "NFC"}}))
    assert AsciiPath.of(tmp_path / "nfc.json") is None


def test_the_check_finds_a_path_that_reads_wrong(monkeypatch):
    """Were the path to take the special tokens' text, [SEP] would be read as "[", "sep", "]"."""
    monkeypatch.setattr(AsciiPath, "__init__", _without_added(AsciiPath.__init__))
    bad = mismatches(MINILM, ["hello [SEP] world", "the cat"], 256)
    assert bad and "[SEP]" in bad[0]
    with pytest.raises(PackageError, match="ASCII path reads"):
        check_ascii_path(MINILM, 256, lambda _: None)


def _without_added(init):
    def without(self, config, lowercase, file=None, loaded=None):
        init(self, config, lowercase, file, loaded)
        self.added, self._holds_added = (), None
    return without


def test_a_mixed_batch_is_answered_in_order(texts):
    usual = Tokenizer.from_file(str(MINILM))
    usual.no_padding()
    usual.enable_truncation(max_length=16)
    mixed = ["plain ascii", "naïve café", "[CLS] special", "MORE ascii text that is long enough to be cut " * 3]
    for got, want in zip(Reader(usual, AsciiPath.of(MINILM)).encode_batch(mixed), usual.encode_batch(mixed),
                         strict=True):
        assert (got.ids, got.tokens, got.offsets) == (want.ids, want.tokens, want.offsets)


@pytest.mark.parametrize("max_len,truncate", [(256, True), (16, True), (16, False)])
def test_text_tokenizer_answers_alike_with_and_without_the_path(texts, max_len, truncate):
    sample = [t for t in texts[::7] if _utf8(t)] + ["hello " * 2000, ""]
    fast, slow = TextTokenizer(MINILM, max_len), TextTokenizer(MINILM, max_len, ascii=False)
    assert fast.ascii is not None and slow.ascii is None
    for strings in (True, False):
        a = fast.encode_unchecked(sample, truncate, lazy=True, strings=strings)
        b = slow.encode_unchecked(sample, truncate, lazy=True, strings=strings)
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x.ids, y.ids) and np.array_equal(x.type_ids, y.type_ids)
            assert x.tokens == y.tokens and x.offsets == y.offsets
    pairs = list(itertools.pairwise(sample[:201]))
    for x, y in zip(fast.encode_items(pairs, truncate, words=True), slow.encode_items(pairs, truncate, words=True),
                    strict=True):
        assert np.array_equal(x.ids, y.ids) and x.tokens == y.tokens and x.offsets == y.offsets
        assert x.words == y.words and np.array_equal(x.segments, y.segments)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot cross into Rust
        return False
    return True


def test_the_package_tokenizer_is_verified(tmp_path):
    tiny_tokenizer(tmp_path)
    said = []
    check_ascii_path(Path(tmp_path / "tokenizer.json"), 32, said.append)
    assert said and "as the tokenizer does" in said[0]


def test_a_tokenizer_lent_to_the_path_is_given_back_as_it_was(texts):
    """TextTokenizer lends its untruncated tokenizer to the path (no second load): the path's
    set-up puts its normalizer back and leaves its padding and truncation alone."""
    lent = Tokenizer.from_file(str(MINILM))
    lent.enable_truncation(max_length=16)
    before = lent.to_str()
    path = AsciiPath.of(MINILM, lent)
    assert path is not None and path.wordpiece is not None and lent.to_str() == before
    fresh = Tokenizer.from_file(str(MINILM))
    fresh.enable_truncation(max_length=16)
    for got, want in zip(lent.encode_batch(texts[:300]), fresh.encode_batch(texts[:300]), strict=True):
        assert (got.ids, got.offsets) == (want.ids, want.offsets)
    own = AsciiPath.of(MINILM)  # loaded by the path itself
    for got, want in zip(Reader(fresh, path).encode_batch(texts[:300]), Reader(fresh, own).encode_batch(texts[:300]),
                         strict=True):
        assert (got.ids, got.offsets) == (want.ids, want.offsets)
