"""TextTokenizer.encode_windows: a (question, context) pair's windows are those transformers'
fast tokenizer reads it in with truncation="only_second", max_length, stride and
return_overflowing_tokens (the question-answering pipeline's max_seq_len and doc_stride): the
same windows, each with the same ids, type ids, tokens, offsets, sides and word spans, on the
bundled all-MiniLM-L6-v2 tokenizer and a tiny one full of word pieces; a pair it cannot read
(a question leaving its context no room beyond the stride) and too many windows are refused
before any window is built. A pair that fits its window is read whole whatever the stride
(tokenizers refuses a stride of max_length less a single text's special tokens or more for any
pair)."""

from __future__ import annotations

import itertools

import pytest
from tokenizers import Tokenizer

from headwise.model.sentence import default_checkpoint
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import TooLarge, Validation
from tests.fixtures.tiny import tiny_tokenizer

MINILM = default_checkpoint() / "tokenizer.json"
QUESTIONS = ["who sat on the mat", "where", "", "a b c d e f g h i j k l m n o p"]
CONTEXTS = [" ".join(["the cat sat on the unaffable mat"] * 20), "short context", "",
            "Berkeleyan wanderings of Zoë in 中國 " * 9, "x" * 300 + " end"]
WINDOWS = [(64, 16), (32, 10), (24, 0), (40, 20), (16, 3), (128, 64), (30, 29)]


def windows_of(lib: Tokenizer, q: str, c: str, max_len: int, stride: int):
    lib.enable_truncation(max_len, stride=stride, strategy="only_second")
    e = lib.encode(q, c)
    return [e, *e.overflowing]


@pytest.mark.parametrize("which", ["minilm", "tiny"])
def test_windows_equal_the_fast_tokenizers(tmp_path, which):
    if which == "tiny":
        tiny_tokenizer(tmp_path)
    file = MINILM if which == "minilm" else tmp_path / "tokenizer.json"
    tok, lib = TextTokenizer(file, 128), Tokenizer.from_file(str(file))
    lib.no_padding()
    read = refused = 0
    for (q, c), (max_len, stride) in itertools.product(itertools.product(QUESTIONS, CONTEXTS), WINDOWS):
        whole = tok.encode_items([(q, c)], truncate=False)[0]
        room = max_len - int((whole.segments != 1).sum())
        if whole.length > max_len and room <= stride:  # tokenizers panics here; headwise refuses
            says = (f"leave its context {room} of the {max_len} tokens" if room > 0 else
                    f"take {max_len - room} tokens, a whole window of max_seq_len={max_len}")
            with pytest.raises(Validation, match=says):
                tok.encode_windows([(q, c)], max_len, stride, 1000)
            refused += 1
            continue
        try:
            want = windows_of(lib, q, c, max_len, stride)
        except ValueError:  # a stride of at least max_len less a single text's specials: refused whatever the pair
            lib.no_truncation()
            want = [lib.encode(q, c)] if whole.length <= max_len else None
            assert want is not None
        (got,) = tok.encode_windows([(q, c)], max_len, stride, 1000)
        assert len(got) == len(want), (q, c, max_len, stride)
        for w, g in zip(want, got, strict=True):
            assert (g.ids.tolist(), g.type_ids.tolist(), g.tokens, g.offsets) == (w.ids, w.type_ids, w.tokens, w.offsets)
            assert g.segments.tolist() == [-1 if s is None else s for s in w.sequence_ids]
            assert g.words == [None if x is None else w.word_to_chars(x, sequence_index=s)
                               for x, s in zip(w.word_ids, w.sequence_ids, strict=True)]
        read += 1
    assert read > 100 and refused > 5


def test_too_many_windows_are_refused_before_any_is_built():
    tok = TextTokenizer(MINILM, 128)
    pairs = [("who", " ".join(["the cat sat on the mat"] * 40))] * 3  # 240 context tokens each
    (rows,) = {len(w) for w in tok.encode_windows(pairs, 32, 8, 1000)}
    assert len(tok.encode_windows(pairs, 32, 8, 3 * rows)) == 3
    with pytest.raises(TooLarge, match=f"take {3 * rows} windows of 32 tokens or more, over the limit of {3 * rows - 1}"):
        tok.encode_windows(pairs, 32, 8, 3 * rows - 1)
