"""headwise.compiled: the ids, type ids, tokens and offsets it reads with tokie for a text the
ASCII path takes are `tokenizers`' (with and without special tokens, whole and truncated) on the shipped
all-MiniLM-L6-v2 tokenizer, a tiny one full of unknown words and "##" pieces, a cased one with
BERT's older post-processor, and short word limits; a vocabulary tokie numbers otherwise (one
with gaps) is left to headwise.wordpiece; TextTokenizer reads such texts with it, whatever
the answer needs; another tokie version, or a reader that disagrees, is not used, and `headwise
export` fails a package it reads wrong."""

from __future__ import annotations

import json
import logging

import pytest
from tokenizers import Tokenizer

from headwise import compiled
from headwise.ascii_path import AsciiPath, mismatches
from headwise.export.manifest import PackageError
from headwise.export.verify import check_ascii_path
from headwise.model.sentence import default_checkpoint  # the bundled all-MiniLM-L6-v2
from headwise.service.engine.tokenizer import TextTokenizer
from tests.fixtures.tiny import tiny_tokenizer
from tests.fixtures.wordpiece import cased_bert_processing, dense_tiny, readings
from tests.fixtures.wordpiece import texts as wordpiece_texts

MINILM = default_checkpoint() / "tokenizer.json"
CUTS = (None, 128, 16, 3, 1)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return wordpiece_texts()


def test_the_shipped_tokenizer(texts):
    assert readings(MINILM, texts, "compiled", CUTS) > 30_000


def test_a_tiny_vocabulary_of_pieces_and_unknown_words(tmp_path, texts):
    dense_tiny(tmp_path)
    assert readings(tmp_path / "tokenizer.json", texts, "compiled", CUTS) > 30_000


def test_a_vocabulary_with_gaps_is_left_to_headwise_wordpiece(tmp_path, caplog):
    tiny_tokenizer(tmp_path)  # its ids skip 6
    with caplog.at_level(logging.WARNING, logger="headwise"):
        path = AsciiPath.of(tmp_path / "tokenizer.json")
    assert path.wordpiece is not None and path.compiled is None
    assert "numbers" in caplog.text
    assert mismatches(tmp_path / "tokenizer.json", ["a cat sat", "hello world"], 32) == []


def test_a_cased_tokenizer_and_bert_processing(tmp_path, texts):
    cased_bert_processing(tmp_path, dense_tiny)
    assert readings(tmp_path / "tokenizer.json", texts[::5], "compiled", CUTS) > 6_000


def test_a_short_word_limit(tmp_path, texts):
    config = json.loads(MINILM.read_text())
    config["model"]["max_input_chars_per_word"] = 3
    (tmp_path / "tokenizer.json").write_text(json.dumps(config))
    assert readings(tmp_path / "tokenizer.json", texts[::5], "compiled", CUTS) > 6_000


class Counting:
    """A compiled reader, counting its calls by kind."""

    def __init__(self, reader: compiled.Compiled):
        self.reader, self.calls = reader, {"encode": 0, "ids": 0, "reading": 0}

    def __getattr__(self, name):
        def call(*a):
            self.calls[name] += 1
            return getattr(self.reader, name)(*a)
        return call


def test_text_tokenizer_reads_plain_texts_with_it():
    """With lazy strings that no answer carries, it reads their ids alone; a string or offset
    read after all is read again, and equal."""
    tok = TextTokenizer(MINILM, 16)
    texts = ["plain ascii", "naïve café", "The cat sat on the unaffable mat " * 3, ""]
    usual = Tokenizer.from_file(str(MINILM))
    usual.no_padding()
    usual.enable_truncation(max_length=16)
    for lazy, strings, calls in ((True, False, {"encode": 0, "ids": 3, "reading": 0}),
                                 (True, True, {"encode": 3, "ids": 0, "reading": 0}),
                                 (False, True, {"encode": 3, "ids": 0, "reading": 0})):
        tok.ascii.compiled = counting = Counting(tok.ascii.compiled.reader if isinstance(tok.ascii.compiled, Counting)
                                                 else tok.ascii.compiled)
        got = tok.encode_unchecked(texts, lazy=lazy, strings=strings)
        assert counting.calls == calls  # not "naïve café"
        for g, want in zip(got, usual.encode_batch(texts), strict=True):
            assert (g.ids.tolist(), g.type_ids.tolist(), g.tokens, g.offsets) == (
                want.ids, want.type_ids, want.tokens, want.offsets)
        assert counting.calls["reading"] == calls["ids"]  # the strings, read again when asked for


def test_ids_alone_leave_a_text_with_an_unknown_word_to_encode():
    reader = TextTokenizer(MINILM, 16).ascii.compiled
    assert reader.ids("a " + "q" * 300, True, 16) is None
    assert reader.ids("a cat", True, 16) == ([101, 1037, 4937, 102], [0, 0, 0, 0])
    assert reader.ids("a cat sat", True, 3) == ([101, 1037, 102], [0, 0, 0])


def test_another_tokie_version_is_not_used(monkeypatch, caplog):
    monkeypatch.setattr(compiled, "installed", lambda: "0.2.0")
    with caplog.at_level(logging.WARNING, logger="headwise"):
        path = AsciiPath.of(MINILM)
    assert path.wordpiece is not None and path.compiled is None
    assert "tokie 0.2.0 is installed, not 0.1.4" in caplog.text


def test_a_reader_that_disagrees_is_dropped_and_fails_the_export(monkeypatch, caplog):
    """Were it to read "hello" as unknown, the check at load and the export's would see it."""
    whole = compiled.Compiled.encode

    def wrong(self, text, special, max_tokens):
        ids, *rest = whole(self, text, special, max_tokens)
        return ([100 if i == 7592 else i for i in ids], *rest)

    monkeypatch.setattr(compiled.Compiled, "encode", wrong)
    monkeypatch.setattr("headwise.wordpiece.SELF_CHECK", ("say hello",))
    with caplog.at_level(logging.WARNING, logger="headwise"):
        path = AsciiPath.of(MINILM)
    assert path.wordpiece is not None and path.compiled is None
    assert "tokie reads 2 test texts otherwise" in caplog.text
    monkeypatch.setattr("headwise.wordpiece.SELF_CHECK", ("the cat",))
    assert AsciiPath.of(MINILM).compiled is not None
    bad = mismatches(MINILM, ["hello there", "the cat"], 256)
    assert bad and "hello" in bad[0] and "tokie" in bad[0]
    with pytest.raises(PackageError, match="ASCII path reads"):
        check_ascii_path(MINILM, 256, lambda _: None)


def test_ids_read_otherwise_drop_the_reader_and_fail_the_export(monkeypatch):
    """Its ids alone are checked as its whole reading is: were they to differ, neither the
    check at load nor the export's would let it read."""
    alone = compiled.Compiled.ids

    def wrong(self, text, special, max_tokens):
        got = alone(self, text, special, max_tokens)
        return got and ([100 if i == 7592 else i for i in got[0]], got[1])

    monkeypatch.setattr(compiled.Compiled, "ids", wrong)
    monkeypatch.setattr("headwise.wordpiece.SELF_CHECK", ("say hello",))
    assert AsciiPath.of(MINILM).compiled is None
    monkeypatch.setattr("headwise.wordpiece.SELF_CHECK", ("the cat",))
    bad = mismatches(MINILM, ["hello there", "the cat"], 256)
    assert bad and "hello" in bad[0] and "tokie" in bad[0]


def test_the_installed_tokie_is_the_one_tested():
    """constraints.txt installs headwise.compiled's TESTED; another version is not used (above),
    so an upgrade shows here first: run this file against it, then move TESTED."""
    assert compiled.installed() == compiled.TESTED


def test_a_later_piece_starts_where_the_last_ended_and_spans_its_token_less_the_prefix():
    tokens = ["[CLS]", "the", "co", "##uga", "##r", ".", "[SEP]"]
    shifted = [(0, 0), (0, 3), (4, 6), (6, 11), (11, 14), (10, 11), (0, 0)]  # tokie's, "the cougar."
    compiled.mend(tokens, shifted, [3, 4])
    assert shifted == [(0, 0), (0, 3), (4, 6), (6, 9), (9, 10), (10, 11), (0, 0)]


@pytest.mark.parametrize("max_len", [16, 64])
def test_a_long_text_is_counted_and_read_by_it_as_the_tokenizer_reads_it(monkeypatch, max_len):
    """A text past PREFIX_TOKENS × max_len characters is read as a prefix whose pieces the
    compiled reader counts (headwise.wordpiece reads none of it, but for a prefix holding an
    [UNK], whose offsets it reads); truncated, its answer is the tokenizer's, however the
    answer is read; untruncated, it is longer than max_len."""
    tok = TextTokenizer(MINILM, max_len)
    pieces = tok.ascii.wordpiece.pieces
    texts = ["the unaffable cat sat on the encyclopedic mat " * 80,
             "a" * 400 + " the cat " * 300,  # an over-long word ([UNK]) within the cut
             "the cat sat " * 200 + "b" * 400]  # ... and past it

    def read_by_headwise_wordpiece(text, limit):
        assert text.startswith("a" * 400), text[:40]
        return pieces(text, limit)

    monkeypatch.setattr(tok.ascii.wordpiece, "pieces", read_by_headwise_wordpiece)
    usual = Tokenizer.from_file(str(MINILM))
    usual.no_padding()
    usual.enable_truncation(max_length=max_len)
    for lazy, strings in ((True, False), (True, True), (False, True)):
        for got, want in zip(tok.encode_unchecked(texts, lazy=lazy, strings=strings), usual.encode_batch(texts),
                             strict=True):
            assert (got.ids.tolist(), got.type_ids.tolist(), got.tokens, got.offsets) == (
                want.ids, want.type_ids, want.tokens, want.offsets)
        assert all(e.length > max_len for e in tok.encode_unchecked(texts, truncate=False, lazy=lazy, strings=strings))
