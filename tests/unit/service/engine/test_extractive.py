"""The question-answering head's span choice equals transformers' (`select_starts_ends` and
`decode_spans`, the question-answering pipeline's, kept in transformers 5 by the document
question-answering pipeline) on random logits: the same spans, in the same order, the same
scores and the same empty answer's score, for every top_k and max_answer_len; where top_k
asks for more spans than are possible, transformers' impossible ones (score 0) are left out."""

import numpy as np
import pytest
from transformers.pipelines.document_question_answering import select_starts_ends

from headwise.service.engine.heads.extractive import SpanParams, choose


@pytest.mark.parametrize("top_k", [1, 3, 7, 400])
@pytest.mark.parametrize("max_answer_len", [1, 4, 15])
def test_spans_equal_transformers(top_k, max_answer_len):
    rng = np.random.default_rng(top_k * 100 + max_answer_len)
    for t in (5, 12, 19):
        logits = rng.normal(size=(t, 2)).astype(np.float32) * 3
        desired = np.zeros(t, np.int64)
        desired[0] = 1  # [CLS]
        desired[t // 3: t - 1] = 1  # the context, between the question and the last [SEP]
        p = SpanParams(top_k=top_k, max_answer_len=max_answer_len, handle_impossible_answer=True)
        spans, null = choose(logits, desired, p)
        p_mask = 1 - desired[None]
        starts, ends, scores, their_null = select_starts_ends(
            logits[None, :, 0], logits[None, :, 1], p_mask, np.ones((1, t), np.int64), top_k=top_k,
            handle_impossible_answer=True, max_answer_len=max_answer_len)
        possible = scores > 0  # past the possible spans transformers lists impossible ones at score 0
        assert [(s, e) for s, e, _ in spans] == list(zip(starts[possible].tolist(), ends[possible].tolist(),
                                                         strict=True))
        np.testing.assert_allclose([x for _, _, x in spans], scores[possible], rtol=1e-6)
        assert null == pytest.approx(their_null, rel=1e-6)
        assert all(desired[s] and desired[e] and s <= e < s + max_answer_len for s, e, _ in spans)


def test_a_span_widens_to_its_words_and_alike_spans_are_one_answer(tmp_path):
    """A span that starts or ends inside a word is widened to the word (the tokenizer's word
    map, as the pipeline's get_indices reads it), or kept to its tokens without
    align_to_words; spans that then read alike (case aside) are one answer, scores summed,
    as the pipeline's get_answer merges them."""
    from headwise.service.engine.heads.extractive import SpanHead
    from headwise.service.engine.tokenizer import TextTokenizer
    from headwise.service.engine.work import Entry, Job
    from tests.fixtures.tiny import tiny_tokenizer

    tiny_tokenizer(tmp_path)
    tok = TextTokenizer(tmp_path / "tokenizer.json", 64)
    pair = ("where", "Berkeley cat")
    [enc] = tok.encode_items([pair], words=True)
    pieces = [i for i, (t, s) in enumerate(zip(enc.tokens, enc.segments, strict=True)) if s == 1 and t.startswith("##")]
    assert len(pieces) >= 3 and enc.words[pieces[0]] == (0, 8)  # "berkeley" is read in pieces
    logits = np.full((enc.length, 2), -5.0, np.float32)
    a, b = pieces[0], pieces[2]
    logits[a, 0] = logits[b, 0] = 4.0  # two starts inside the word ...
    logits[b, 1] = 4.0  # ... and one end inside it: spans a..b and b..b both read "Berkeley"
    head = SpanHead(None, None)
    for words, want in ((True, ["Berkeley"]), (False, [pair[1][enc.offsets[a][0]:enc.offsets[b][1]],
                                                       pair[1][enc.offsets[b][0]:enc.offsets[b][1]]])):
        job = Job(1, inputs=[pair], params=SpanParams(top_k=2, align_to_words=words))
        got = head.answer({"token_logits": logits[None]}, 0, Entry(job, 0, enc.ids, enc.type_ids, enc), None)
        assert sorted(x.answer for x in got.answers) == sorted(want)
        spans, _ = choose(logits, (enc.segments == 1).astype(np.int64) | (np.arange(enc.length) == 0), job.params)
        if words:  # one answer, the two spans' scores summed
            assert (got.answers[0].start, got.answers[0].end) == (0, 8)
            assert got.answers[0].score == pytest.approx(spans[0][2] + spans[1][2], rel=1e-6)


def test_a_word_the_cut_goes_through_ends_with_its_last_kept_piece(tmp_path):
    """A context cut within a word: the word map reads as the tokenizer's word_to_chars reads
    the truncated encoding (transformers' pipeline's get_indices), so align_to_words answers
    only characters the model read, and the answer's bound (its tokens' characters) holds."""
    from transformers import PreTrainedTokenizerFast

    from headwise.service.engine.heads.extractive import span_size
    from headwise.service.engine.tokenizer import TextTokenizer
    from tests.fixtures.tiny import tiny_tokenizer

    tiny_tokenizer(tmp_path)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), pad_token="[PAD]")
    for max_len, context in ((12, "the cat " + "hello" * 4 + " and more"), (16, "z" * 30 + " end"),
                             (16, "the cat sat " * 2 + "hello" * 19 + " and more " * 2000)):
        [enc] = TextTokenizer(tmp_path / "tokenizer.json", max_len).encode_items([("who", context)], words=True,
                                                                                cut="only_second")
        ref = hf(["who"], [context], truncation="only_second", max_length=max_len).encodings[0]
        assert enc.ids.tolist() == ref.ids
        want = [None if w is None else ref.word_to_chars(w, ref.token_to_sequence(i)) for i, w in enumerate(ref.word_ids)]
        assert enc.words == [None if w is None else tuple(w) for w in want]
        last = max(i for i, s in enumerate(enc.segments) if s == 1)
        assert enc.words[last][1] == enc.offsets[last][1] < len(context)  # the cut went through a word
        assert span_size(SpanParams(), enc).chars == enc.offsets[last][1]


def test_windows_are_gathered_as_the_pipelines_postprocess_gathers_them():
    """Candidates in the windows' order: alike texts (case aside) are one answer at its first
    span's characters with the scores summed, across windows too; the empty answer is scored by
    the lowest window's; then best first, top_k, so a window's weaker spans still count."""
    from headwise.service.engine.heads.extractive import Span, Window, gathered

    context = "The cat sat. the Cat ran. A dog sat."
    first = Window([(0, 7, 0.30), (4, 7, 0.20)], null=0.40)  # "The cat", "cat"
    second = Window([(13, 20, 0.25), (26, 31, 0.22)], null=0.05)  # "the Cat" (as the first's), "A dog"
    p = SpanParams(top_k=3, handle_impossible_answer=True)
    assert gathered(context, [first, second], p) == [
        Span("The cat", pytest.approx(0.55), 0, 7), Span("A dog", 0.22, 26, 31), Span("cat", 0.20, 4, 7)]
    p = SpanParams(top_k=4, handle_impossible_answer=True)
    assert gathered(context, [first, second], p)[-1] == Span("", 0.05, 0, 0)  # the lowest window's
    assert gathered(context, [first], SpanParams(top_k=1, handle_impossible_answer=True)) == [Span("", 0.40, 0, 0)]
