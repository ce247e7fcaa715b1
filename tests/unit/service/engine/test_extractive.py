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
