"""headwise.wordpiece: a single text the ASCII path takes, read by our WordPiece, has the ids,
type ids, tokens and offsets `tokenizers` gives (with and without special tokens, whole and
truncated) on the shipped all-MiniLM-L6-v2 tokenizer, a tiny one full of unknown words and
"##" pieces, a cased one, and BERT's older post-processor; TextTokenizer reads such texts
without `tokenizers` and the others with it, in order; a tokenizer it cannot read is left to
`tokenizers`; a reader that disagrees is dropped when loaded, and `headwise export` fails it."""

from __future__ import annotations

import json
import logging

import pytest
from tokenizers import Tokenizer

from headwise import wordpiece
from headwise.ascii_path import AsciiPath, mismatches
from headwise.export.manifest import PackageError
from headwise.export.verify import check_ascii_path
from headwise.model.sentence import default_checkpoint  # the bundled all-MiniLM-L6-v2
from headwise.service.engine.tokenizer import TextTokenizer
from tests.fixtures.families import ROBERTA_SPECIALS, ROBERTA_TEMPLATE, bpe_tokenizer
from tests.fixtures.tiny import tiny_tokenizer
from tests.fixtures.wordpiece import cased_bert_processing, readings
from tests.fixtures.wordpiece import texts as wordpiece_texts

MINILM = default_checkpoint() / "tokenizer.json"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return wordpiece_texts()


def test_the_shipped_tokenizer(texts):
    assert readings(MINILM, texts, "wordpiece") > 20_000


def test_a_tiny_vocabulary_of_pieces_and_unknown_words(tmp_path, texts):
    tiny_tokenizer(tmp_path)
    assert readings(tmp_path / "tokenizer.json", texts, "wordpiece") > 20_000
    wp = AsciiPath.of(tmp_path / "tokenizer.json").wordpiece
    _, tokens, offsets = wp.pieces("zebra-x", 10)
    assert tokens == ["z", "##e", "##b", "##r", "##a", "[UNK]", "x"] and offsets[1] == (1, 2)  # no "-" in it


def test_a_cut_at_every_piece_around_the_first_word_that_is_no_entry():
    """The words before the first that is no vocabulary entry are taken at once, the rest one by
    one: a cut at every piece, across that seam and inside a word's pieces, is the tokenizer's."""
    wp = AsciiPath.of(MINILM).wordpiece
    usual = Tokenizer.from_file(str(MINILM))
    usual.no_padding()
    text = "the cat unaffable xylophonists sat, on zzzzqqqq mats"
    for cut in range(2, 20):
        usual.enable_truncation(max_length=cut)
        for special in (True, False):
            e = usual.encode(text, add_special_tokens=special)
            assert (e.ids, e.type_ids, e.tokens, e.offsets) == wp.encode(text, special, cut), (cut, special)
    assert wp.pieces(text, 0) == wp.pieces(text, -1) == ([], [], [])


def test_a_cased_tokenizer_and_bert_processing(tmp_path, texts):
    cased_bert_processing(tmp_path)
    assert readings(tmp_path / "tokenizer.json", texts[::5], "wordpiece") > 4_000


def test_text_tokenizer_reads_ascii_without_tokenizers():
    tok = TextTokenizer(MINILM, 16)
    seen = []
    tok._truncating.encode_batch = lambda items, **kw: seen.append(list(items)) or tok._plain.encode_batch(items, **kw)
    mixed = ["plain ascii", "naïve café", "[CLS] special", "MORE ascii text that is long enough to be cut " * 3]
    got = tok.encode_unchecked(mixed)
    assert seen == [["naïve café", "[CLS] special"]]  # only what the path leaves
    usual = Tokenizer.from_file(str(MINILM))
    usual.no_padding()
    usual.enable_truncation(max_length=16)
    for g, want in zip(got, usual.encode_batch(mixed), strict=True):
        assert (g.ids.tolist(), g.type_ids.tolist(), g.tokens, g.offsets) == (
            want.ids, want.type_ids, want.tokens, want.offsets)


def test_what_it_does_not_read(tmp_path):
    bpe_tokenizer(tmp_path, ROBERTA_SPECIALS, ROBERTA_TEMPLATE)
    assert wordpiece.WordPiece.of(json.loads((tmp_path / "tokenizer.json").read_text())) is None
    config = json.loads(MINILM.read_text())
    assert wordpiece.WordPiece.of(config) is not None
    assert wordpiece.WordPiece.of({**config, "pre_tokenizer": {"type": "Whitespace"}}) is None
    assert wordpiece.WordPiece.of({**config, "post_processor": {"type": "ByteLevel"}}) is None
    pair_only = {**config["post_processor"], "single": [{"Sequence": {"id": "B", "type_id": 0}}]}
    assert wordpiece.WordPiece.of({**config, "post_processor": pair_only}) is None


def test_a_reader_that_disagrees_is_dropped_and_fails_the_export(monkeypatch, caplog):
    """Were it to read no word whole, "hello" would come out in pieces."""
    whole = wordpiece.WordPiece.pieces

    def in_pieces(self, text, limit):
        return whole(self, text.replace("hello", "hel lo"), limit)

    monkeypatch.setattr(wordpiece, "SELF_CHECK", ("say hello",))
    monkeypatch.setattr(wordpiece.WordPiece, "pieces", in_pieces)
    with caplog.at_level(logging.WARNING, logger="headwise"):
        assert AsciiPath.of(MINILM).wordpiece is None
    assert "otherwise than the tokenizer" in caplog.text
    monkeypatch.setattr(wordpiece, "SELF_CHECK", ("the cat",))
    assert AsciiPath.of(MINILM).wordpiece is not None
    bad = mismatches(MINILM, ["hello there", "the cat"], 256)
    assert bad and "hello" in bad[0]
    with pytest.raises(PackageError, match="ASCII path reads"):
        check_ascii_path(MINILM, 256, lambda _: None)


def test_short_word_limits_and_limits_below_the_special_tokens(tmp_path):
    """A word over max_input_chars_per_word is unknown even where the vocabulary holds it; a
    truncation below the special tokens' count is no truncation, as in the tokenizer."""
    config = json.loads(MINILM.read_text())
    config["model"]["max_input_chars_per_word"] = 3
    (tmp_path / "tokenizer.json").write_text(json.dumps(config))
    usual = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    usual.no_padding()
    wp = wordpiece.WordPiece.of(config)
    for cut in (None, 1, 0):
        if cut is None:
            usual.no_truncation()
        else:
            usual.enable_truncation(max_length=cut)
        for text in ("hello world", "a cat sat"):
            e = usual.encode(text)
            assert (e.ids, e.type_ids, e.tokens, e.offsets) == wp.encode(text, True, 1 << 62 if cut is None else cut)
