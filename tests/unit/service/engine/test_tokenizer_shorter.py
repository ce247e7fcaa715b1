"""A cut shorter than max_len (vLLM's truncate_prompt_tokens): TextTokenizer's encodings cut to k
tokens equal the tokenizers library's own truncation at max_length=k, for single texts (every
read: with strings, lazy, ids alone, from the end) and pairs (longest_first, only_second), on
the bundled all-MiniLM-L6-v2 tokenizer and tiny ones framed as BERT, RoBERTa (its own
post-processor) and Qwen3 (an end-of-text token after the text only) frame them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from headwise.model.sentence import default_checkpoint
from headwise.service.engine.encoded import Encoded
from headwise.service.engine.specials import Frame
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import Validation
from tests.fixtures.families import ROBERTA_SPECIALS, bpe_tokenizer
from tests.fixtures.pairs import cases
from tests.fixtures.tiny import tiny_tokenizer

MINILM = default_checkpoint() / "tokenizer.json"
TEXTS = ["", "a", "the cat sat on the mat", "Berkeleyan wanderings of Zoë in 中國 " * 9,
         " ".join(["the unaffable cat sat on the mat"] * 40), "x" * 3000 + " end", "word " * 700]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    out = {"minilm": MINILM}
    tiny_tokenizer(folder := tmp_path_factory.mktemp("bert"))
    out["bert"] = folder / "tokenizer.json"
    bpe_tokenizer(folder := tmp_path_factory.mktemp("qwen"), {"unk_token": "<unk>", "eos_token": "<|endoftext|>"},
                  ("$A <|endoftext|>", "$A <|endoftext|> $B:1 <|endoftext|>:1"))
    out["qwen"] = folder / "tokenizer.json"
    bpe_tokenizer(folder := tmp_path_factory.mktemp("roberta"), ROBERTA_SPECIALS, ("<s> $A </s>", "<s> $A </s> </s> $B </s>"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    tok.save(str(folder / "tokenizer.json"))
    out["roberta"] = folder / "tokenizer.json"
    return out


def library(file: Path, k: int, **truncation) -> Tokenizer:
    tok = Tokenizer.from_file(str(file))
    tok.no_padding()
    tok.enable_truncation(max_length=k, **truncation)
    return tok


def same(got: Encoded, e, pair: bool = False) -> None:
    assert got.ids.tolist() == e.ids and got.type_ids.tolist() == e.type_ids
    assert got.tokens == e.tokens and got.offsets == e.offsets
    if pair:
        assert got.segments.tolist() == [-1 if s is None else s for s in e.sequence_ids]


def test_frames(files):
    assert TextTokenizer(files["minilm"], 256).frame == Frame(1, 1, 3)
    assert TextTokenizer(files["bert"], 64).frame == Frame(1, 1, 3)
    assert TextTokenizer(files["qwen"], 64).frame == Frame(0, 1, 2)
    assert TextTokenizer(files["roberta"], 64).frame == Frame(1, 1, 4)


def odd(folder: Path, model, single: str = "[CLS] $A [SEP]") -> Path:
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=single, pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 0), ("[SEP]", 1)])
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def test_frames_of_odd_tokenizers(tmp_path):
    """A vocabulary without "a" (read as no token), one that cannot read "a" at all (a word-level
    unknown token missing from it): framed from a text of their vocabulary. Special tokens
    within a text: no frame, so no cut shorter than max_len."""
    vocab = {"[CLS]": 0, "[SEP]": 1, "b": 2, "c": 3}
    for i, model in enumerate((models.BPE(vocab=vocab, merges=[]), models.WordLevel(vocab=vocab, unk_token="[UNK]"))):
        (folder := tmp_path / str(i)).mkdir()
        tok = TextTokenizer(odd(folder, model), 16)
        assert tok.frame == Frame(1, 1, 3)
        assert tok.encode_unchecked(["b c b c"], True, max_tokens=3)[0].tokens == ["[CLS]", "b", "[SEP]"]
    (folder := tmp_path / "middle").mkdir()
    assert TextTokenizer(odd(folder, models.BPE(vocab=vocab, merges=[]), "[CLS] $A [SEP] $A"), 16).frame is None


@pytest.mark.parametrize("which", ["minilm", "bert", "qwen", "roberta"])
@pytest.mark.parametrize("read", [{}, {"lazy": True}, {"lazy": True, "strings": False}, {"special_tokens": False}])
def test_singles_cut_short_equal_the_library(files, which, read):
    max_len = 256 if which == "minilm" else 64
    tok = TextTokenizer(files[which], max_len)
    specials = read.get("special_tokens", True)
    for k in (tok.frame.single if specials else 1, 5, 17, max_len - 1, max_len):
        got = tok.encode_unchecked(TEXTS, True, max_tokens=k, **read)
        for g, text in zip(got, TEXTS, strict=True):
            e = library(files[which], k).encode(text, add_special_tokens=specials)
            same(g, e)
            assert g.length <= k


@pytest.mark.parametrize("which", ["minilm", "roberta"])
def test_singles_cut_short_from_the_start_equal_the_library(files, which):
    tok = TextTokenizer(files[which], 64)
    for k in (3, 17, 63):
        for g, text in zip(tok.encode_unchecked(TEXTS, "left", max_tokens=k), TEXTS, strict=True):
            assert g.ids.tolist() == library(files[which], k, direction="left").encode(text).ids


@pytest.mark.parametrize("which", ["minilm", "bert", "roberta"])
@pytest.mark.parametrize("cut", ["longest_first", "only_second"])
def test_pairs_cut_short_equal_the_library(files, which, cut):
    """Cut at k from the whole pair: longest_first at k is not always longest_first at max_len cut
    again. With RoBERTa's 4 special tokens, 31 and 30 tokens cut at 64 keep 30 and 30; cut again
    at 9 those keep 2 and 3, where the pair cut at 9 keeps 3 and 2."""
    tok = TextTokenizer(files[which], 64)
    pairs = [*cases(2).values(), ("a b", "c"), ("two dogs", "one red fox and more"), ("a " * 31, "b " * 30)]
    for k in (tok.frame.pair, 9, 31, 64):
        got = tok.encode_items(pairs, True, cut=cut, max_tokens=k)
        lib = library(files[which], k, strategy=cut)
        for g, pair in zip(got, pairs, strict=True):
            try:
                e = lib.encode(*pair)
            except Exception:  # only_second: the first text leaves the second no room
                assert cut == "only_second"
                with pytest.raises(Validation, match=f"leaves its second no room within the {k} tokens asked for"):
                    tok.check([g], truncated=True, cut=cut, max_tokens=k)
                continue
            same(g, e, pair=True)
            tok.check([g], truncated=True, cut=cut, max_tokens=k)


def test_a_cut_short_keeps_the_start_of_the_cut_at_max_len(files):
    tok = TextTokenizer(files["minilm"], 256)
    items = ["the cat sat on the mat " * 60, ("the cat", "sat on the mat " * 80)]
    short, whole = tok.encode_items(items, True, max_tokens=12), tok.encode_items(items, True)
    assert [e.length for e in short] == [12, 12] and [e.length for e in whole] == [256, 256]
    assert np.array_equal(short[0].ids[:11], whole[0].ids[:11]) and short[0].ids[-1] == whole[0].ids[-1]


@pytest.mark.parametrize("which", ["minilm", "roberta"])
def test_texts_without_special_tokens_from_the_start_and_of_no_tokens(files, which):
    """vLLM's add_special_tokens false with truncation_side left: the library's ids; a text of no
    tokens so read is refused by `check`, naming it; pairs keep their special tokens."""
    tok = TextTokenizer(files[which], 64)
    for k in (1, 17, None):
        got = tok.encode_items(TEXTS, "left", max_tokens=k, special_tokens=False)
        for g, text in zip(got, TEXTS, strict=True):
            assert g.ids.tolist() == library(files[which], k or 64, direction="left").encode(
                text, add_special_tokens=False).ids
    with pytest.raises(Validation, match=r"\[0\] has no tokens") as e:
        tok.check(got, "input", run=True)
    assert e.value.field == "input"
    tok.check(got, "input")  # not for the model (/tokenize's answer): no tokens is an answer
    tok.check(tok.encode_items(TEXTS[:1]), "input", run=True)  # with its special tokens, an empty text is not empty
    with pytest.raises(ValueError, match="pairs"):
        tok.encode_items([("a", "b")], special_tokens=False)
