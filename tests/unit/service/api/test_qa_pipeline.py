"""The question-answering pipeline's shape (TEI's POST /): every context is read in windows as
the pipeline reads it, of its defaults where none are given (max_seq_len min(384, max_len),
doc_stride min(max_seq_len // 2, 128)), unless headwise's truncate asks for the cut instead."""

from __future__ import annotations

from headwise.service.api.compat.qa_pipeline import QuestionAnsweringRequest, params
from headwise.service.engine.heads.extractive import Windows


def body(**extra) -> QuestionAnsweringRequest:
    return QuestionAnsweringRequest(inputs={"question": "who", "context": "the cat"}, **extra)


def test_windows_by_default_as_the_pipeline():
    assert params(body(), 512).windows == Windows(384, 128)
    assert params(body(), 64).windows == Windows(64, 32)
    assert params(body(parameters={"max_seq_len": 100}), 512).windows == Windows(100, 50)
    assert params(body(parameters={"doc_stride": 10}), 64).windows == Windows(64, 10)


def test_truncate_cuts_instead():
    p = params(body(truncate=True), 512)
    assert p.windows is None and p.truncate
