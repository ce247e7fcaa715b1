"""KServe v2 for question-answering models, without a server: the request's parameters as the
head's options (bounded as /v1/answer's), each input's answers as [N, top_k] rows padded past
its last, and the outputs' bound, which holds for the bytes really written."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headwise.service.api.compat import kserve
from headwise.service.api.routers.kserve_answer import _bound, _outputs, arrays, span_params
from headwise.service.engine.heads.extractive import Span, Spans, Windows
from headwise.service.errors import InvalidRequest, Validation


def test_parameters_are_v1_answers_options_with_its_bounds():
    p = span_params({"top_k": 3, "max_answer_len": 30, "handle_impossible_answer": True, "truncate": True}, 512)
    assert (p.top_k, p.max_answer_len, p.handle_impossible_answer, p.align_to_words, p.truncate) == (3, 30, True,
                                                                                                    True, True)
    assert span_params({}, 512).truncate is False and span_params({}, 512).top_k == 1
    assert span_params({}, 512).windows is None
    for bad in ({"top_k": 0}, {"top_k": 33}, {"top_k": 2.0}, {"top_k": True}, {"max_answer_len": 513},
                {"doc_stride": -1}, {"max_seq_len": 0}, {"doc_stride": 1.5}):
        with pytest.raises(InvalidRequest, match="must be an integer in"):
            span_params(bad, 512)
    with pytest.raises(InvalidRequest, match="must be a boolean"):
        span_params({"truncate": "yes"}, 512)


def test_window_parameters_take_the_pipelines_defaults_and_the_models_limit():
    assert span_params({"doc_stride": 64}, 512).windows == Windows(384, 64)
    assert span_params({"max_seq_len": 100}, 512).windows == Windows(100, 50)
    assert span_params({"doc_stride": 10}, 64).windows == Windows(64, 10)
    assert span_params({"max_seq_len": 512}, 512).windows == Windows(512, 128)
    with pytest.raises(Validation, match="over this model's limit of 64") as e:
        span_params({"max_seq_len": 65}, 64)
    assert e.value.field == "parameters.max_seq_len"
    with pytest.raises(Validation, match="larger than max_seq_len") as e:
        span_params({"doc_stride": 33, "max_seq_len": 32}, 64)
    assert e.value.field == "parameters.doc_stride"
    with pytest.raises(Validation, match="not both"):
        span_params({"doc_stride": 8, "truncate": True}, 64)


def test_all_four_outputs_unless_named_and_no_classification():
    assert _outputs({}, True) == {"answer": True, "score": True, "start": True, "end": True}
    assert _outputs({"outputs": [{"name": "score", "parameters": {"binary_data": True}}]}, False) == {"score": True}
    with pytest.raises(InvalidRequest, match="classification extension"):
        _outputs({"outputs": [{"name": "score", "parameters": {"classification": 2}}]}, False)


def test_rows_are_padded_and_the_bound_holds_for_the_written_body():
    result = SimpleNamespace(data=[Spans(None, [Span("Zoë \"in\" 中國", 0.5, 10, 22), Span("cat", 0.25, 0, 3)], None),
                                   Spans(None, [], None)])
    got = arrays(result, 3)
    assert got["answer"].tolist() == [["Zoë \"in\" 中國", "cat", ""], ["", "", ""]]
    assert got["start"].tolist() == [[10, 0, -1], [-1, -1, -1]] and got["score"][0, 2] == 0
    for binary in (False, True):
        want = dict.fromkeys(("answer", "score", "start", "end"), binary)
        raw = kserve.encode_outputs(got, kserve.Outputs(("m", "1"), None, want, 0))
        # the bound counts the cells, as every KServe route's: the binary data after the JSON
        # header; or the JSON, beside an envelope and each output's name, datatype and shape
        if binary:
            assert len(raw.body) - int(raw.headers[0][1]) <= _bound(want, got)
        else:
            assert len(raw.body) <= _bound(want, got) + 64 + 4 * 100


def test_the_writers_bound_holds_the_whole_body_whatever_the_id():
    """TENSORS' bound adds to the route's cells what surrounds them: the model's name and
    version, each output's header and the echoed id, which may be long (issue: a 1 MB id
    once declared a few bytes)."""
    got = arrays(SimpleNamespace(data=[Spans(None, [Span("cat", 0.5, 0, 3)], None)]), 2)
    for rid in (None, "x" * 10_000, '"\\' * 5_000):
        for binary in (False, True):
            want = dict.fromkeys(("answer", "score", "start", "end"), binary)
            q = kserve.Outputs(("tiny-qa", "1"), rid, want, _bound(want, got))
            assert len(kserve.encode_outputs(got, q).body) <= kserve.TENSORS.bound(None, q), (rid and rid[:4], binary)
