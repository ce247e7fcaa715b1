"""Left truncation (`truncate="left"`, service.engine.tails): a text too long keeps its last
tokens, as the tokenizers library cuts with direction "left" (TEI's truncation_direction,
transformers' truncation_side="left"), read only as far from its end as the answer needs: ids,
type ids, tokens and offsets into the whole text are the library's, for singles and for pairs
(longest_first and only_second), with the tiny BERT tokenizer, the bundled all-MiniLM-L6-v2's,
a RoBERTa-style template and a byte-level BPE whose post-processor trims offsets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from headwise.model.sentence import default_checkpoint
from headwise.service.engine.pair_cut import from_the_left, kept
from headwise.service.engine.tokenizer import LEFT, TextTokenizer
from headwise.service.errors import Validation
from tests.fixtures.families import ROBERTA_SPECIALS, ROBERTA_TEMPLATE, bpe_tokenizer
from tests.fixtures.pairs import cases
from tests.fixtures.tiny import tiny_tokenizer

TEXTS = {
    "short": "the cat sat on the mat",
    "spaced": "hello unbelievable world",
    "at-the-limit": "cat " * 30,
    "just-over": "cat " * 31 + "dog",
    "long": "hello " * 3000 + "and the very end of it",
    "long-one-word": "a" * 5000,
    "unicode": "naïve café 🙂 猫が好き " * 400 + "fin",
    "empty": "",
}


def byte_level(path: Path) -> None:
    """roberta-base's kind of tokenizer, trained here: byte-level BPE, and a RobertaProcessing
    that trims a token's offsets to leave out its leading space (once: a second pass over an
    encoding would trim them again)."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(TEXTS.values())] * 4 + ["hello unbelievable world of cats"] * 4
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="module", params=["tiny", "minilm", "roberta", "byte-level"])
def file(request, tmp_path_factory) -> Path:
    if request.param == "minilm":
        return default_checkpoint() / "tokenizer.json"
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "tiny":
        tiny_tokenizer(folder)
    elif request.param == "roberta":
        bpe_tokenizer(folder, ROBERTA_SPECIALS, ROBERTA_TEMPLATE)
    else:
        byte_level(folder)
    return folder / "tokenizer.json"


def reference(file: Path, max_len: int, strategy: str = "longest_first") -> Tokenizer:
    tok = Tokenizer.from_file(str(file))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len, strategy=strategy, direction="left")
    return tok


def same(got, e) -> None:
    assert got.ids.tolist() == e.ids and got.type_ids.tolist() == e.type_ids
    assert got.tokens == e.tokens and got.offsets == e.offsets


@pytest.mark.parametrize("special_tokens", [True, False])
def test_texts_keep_their_last_tokens_as_the_library_cuts_them(file, special_tokens):
    ref = reference(file, 32)
    got = TextTokenizer(file, 32).encode_unchecked(list(TEXTS.values()), LEFT, special_tokens)
    for enc, text in zip(got, TEXTS.values(), strict=True):
        same(enc, ref.encode(text, add_special_tokens=special_tokens))
        assert enc.length <= 32


def test_a_left_cut_text_ends_as_the_whole_text_and_its_offsets_point_into_it(file):
    text = TEXTS["long"]
    enc = TextTokenizer(file, 32).encode([text], LEFT)[0]
    uncut = Tokenizer.from_file(str(file))
    uncut.no_truncation()  # the bundled file carries its own (at its end)
    uncut.no_padding()
    whole = uncut.encode(text)
    assert enc.length == 32
    assert enc.ids.tolist()[-8:] == whole.ids[-8:] and enc.offsets[-8:] == whole.offsets[-8:]


@pytest.mark.parametrize("name", list(cases(1)))
def test_pairs_keep_each_sides_last_tokens_as_the_library_cuts_them(file, name):
    pair = cases(1)[name]
    got = TextTokenizer(file, 32).encode_items([pair], LEFT)[0]
    e = reference(file, 32).encode(*pair)
    same(got, e)
    assert got.segments.tolist() == [-1 if s is None else s for s in e.sequence_ids]


@pytest.mark.parametrize("name", ["one-long", "short-over-half", "short", "empty-second-short"])
def test_only_second_from_the_left_cuts_the_second_texts_start(file, name):
    pair = cases(1)[name]
    tok = TextTokenizer(file, 32)
    got = tok.encode_items([pair], LEFT, words=True, cut="only_second")[0]
    try:
        want = reference(file, 32, "only_second").encode(*pair)
    except Exception as e:  # its first text leaves the second no room: refused here too
        assert "too short" in str(e)
        with pytest.raises(Validation, match="leaves its second no room"):
            tok.check([got], truncated=True, cut="only_second")
        return
    same(got, want)
    a, b = pair
    for (start, end), side, word in zip(got.offsets, got.segments.tolist(), got.words, strict=True):
        if side >= 0:  # a word's span holds its piece's, in its own text
            assert word[0] <= start <= end <= word[1] <= len((a, b)[side])


def test_transformers_truncation_side_left_agrees():
    from transformers import PreTrainedTokenizerFast

    file = default_checkpoint() / "tokenizer.json"
    hf = PreTrainedTokenizerFast(tokenizer_file=str(file), truncation_side="left", pad_token="[PAD]")
    texts = [TEXTS["long"], TEXTS["unicode"], TEXTS["short"]]
    got = TextTokenizer(file, 256).encode_unchecked(texts, LEFT)
    want = hf(texts, truncation=True, max_length=256)["input_ids"]
    assert [e.ids.tolist() for e in got] == want


def test_from_the_left_keeps_as_many_of_each_side_but_its_last():
    segments = np.array([-1, 0, 0, 0, 0, -1, 1, 1, 1, -1], dtype=np.int8)  # [CLS] a a a a [SEP] b b b [SEP]
    right = kept(segments, 7, "longest_first")  # 4 room: 2 of each side
    assert right.tolist() == [0, 1, 2, 5, 6, 7, 9]
    assert from_the_left(segments, right).tolist() == [0, 3, 4, 5, 7, 8, 9]
    everything = np.arange(len(segments))
    assert from_the_left(segments, everything).tolist() == everything.tolist()
