"""A question-answering package from a tiny random BertForQuestionAnswering: the manifest names
its task, the span labels and a pair tokenizer; its variants are a token classifier's (no
int8), each verified on (question, context) pairs; the service loads it with the span head."""

import json

from headwise.export.question_answering import PARITY_QUESTIONS, QuestionAnsweringKind
from headwise.service.engine.heads import HEADS
from headwise.service.package import load_package


def test_the_package_says_what_it_is(qa_package):
    folder = qa_package["models"] / "tiny-qa"
    m = json.loads((folder / "manifest.json").read_text())
    assert m["task"] == "question-answering" and m["labels"] == ["start", "end"] and m["tokenizer"]["pairs"]
    assert set(m["variants"]) == {"fast", "fast.fp16", "analysis"}
    assert all(m["parity"][v]["passed"] for v in m["variants"])
    assert QuestionAnsweringKind.parity_inputs is PARITY_QUESTIONS and all(isinstance(p, tuple) for p in PARITY_QUESTIONS)
    p = load_package(folder)
    assert p.task in HEADS and p.labels == ("start", "end")
