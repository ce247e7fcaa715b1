"""Extractive question-answering packages (SQuAD-style answerers: `*ForQuestionAnswering`):
an encoder whose head scores every token as the answer's start and as its end (Devlin et al.
2019, "BERT", §4.2) → fast.onnx (token_logits [B, T, 2]: start, end), fast.fp16.onnx (CUDA)
and analysis.onnx, verified against the torch model on (question, context) pairs at their
real tokens.

The graphs are a token classifier's with two labels; what differs is the input, a pair, and
what the server makes of the logits (service.engine.heads.extractive). No int8, as for the
other heads (docs/model-package.md).
"""

from __future__ import annotations

from headwise.export.pipeline import Options
from headwise.export.token_classifier import TokenClassifierKind
from headwise.model.sentence import LoadedModel

# A question and its context: as the pair [CLS] question [SEP] context [SEP]; longer than
# max_len, empty, and non-Latin, as the other kinds' inputs are.
PARITY_QUESTIONS: list = [
    ("what is the capital of france", "Paris is the capital and largest city of France."),
    ("how do transformers work", "Attention weighs every token against every other token."),
    ("who sings", "A man is playing a guitar on stage while the crowd sings along."),
    ("首都は", "東京は日本の首都です。"),
    ("long", " ".join(["long"] * 400)),
    ("", "an empty question"),
    ("an empty context", ""),
]


class QuestionAnsweringKind(TokenClassifierKind):
    task = "question-answering"
    head = "ForQuestionAnswering"
    parity_inputs = PARITY_QUESTIONS

    def notes(self, options: Options) -> list[str]:
        return ["question-answering packages have fp32 and fp16 variants, no int8"] if options.int8 else []

    def facts(self, loaded: LoadedModel) -> dict:
        facts = super().facts(loaded)
        return {**facts, "tokenizer": {**facts["tokenizer"], "pairs": True}}
