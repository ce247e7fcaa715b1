"""A pair's per-token word spans (service.engine.pair_spans.word_chars), chosen from the whole
pair's encoding, equal the tokenizers library's word_to_chars on the encoding it cuts itself:
whole, and cut by longest_first and only_second, for the bundled all-MiniLM-L6-v2 tokenizer and
a byte-level BPE one with RoBERTa's post-processor (words cut through end at their last kept
piece)."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, processors

from headwise.model.sentence import default_checkpoint
from headwise.service.engine.pair_cut import kept
from headwise.service.engine.pair_spans import word_chars
from tests.fixtures.families import ROBERTA_SPECIALS, bpe_tokenizer

PAIRS = [("where is the cat", "the unaffable cat sat on the mat"), ("naïve café 🙂 Zoë", "Berkeleyan wanderings " * 5),
         ("a", "b"), ("", "hello world"), ("supercalifragilistic words here", "")]


@pytest.fixture(scope="module", params=["minilm", "roberta"])
def file(request, tmp_path_factory):
    if request.param == "minilm":
        return default_checkpoint() / "tokenizer.json"
    folder = tmp_path_factory.mktemp("roberta")
    bpe_tokenizer(folder, ROBERTA_SPECIALS, ("<s> $A </s>", "<s> $A </s> </s> $B </s>"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def library_spans(e) -> list:
    return [None if w is None else e.word_to_chars(w, s) for w, s in zip(e.word_ids, e.sequence_ids, strict=True)]


@pytest.mark.parametrize("cut", ["longest_first", "only_second"])
def test_word_spans_equal_the_library(file, cut):
    whole = Tokenizer.from_file(str(file))
    whole.no_padding()
    whole.no_truncation()
    compared = 0
    for a, b in PAIRS:
        e = whole.encode(a, b)
        assert word_chars(e, range(len(e.ids))) == library_spans(e)
        segments = np.asarray([-1 if s is None else s for s in e.sequence_ids], dtype=np.int8)
        for k in range(int((segments == -1).sum()) + 1, len(e.ids)):
            keep = kept(segments, k, cut)
            cutting = Tokenizer.from_file(str(file))
            cutting.no_padding()
            cutting.enable_truncation(max_length=k, strategy=cut)
            try:
                want = cutting.encode(a, b)
            except Exception:  # only_second with a first text that leaves no room
                continue
            if np.asarray(e.ids)[keep].tolist() != want.ids:
                continue  # the library's own special case (no room): not what these spans are about
            assert word_chars(e, keep) == library_spans(want), (a, b, k)
            compared += 1
    assert compared > 10
