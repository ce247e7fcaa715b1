"""Token-classification packages (NER and PII taggers): an encoder with BERT's tagging head
(Devlin et al. 2019, "BERT", Figure 4(d)) → fast.onnx (token_logits), fast.fp16.onnx (CUDA)
and analysis.onnx (token_logits, every head's weights and every layer's hidden states),
verified against the torch model on single texts at their real tokens.

A tagger labels the tokens of one text, so the tokenizer facts declare no pairs. int8 is not
offered: without a labelled set its cost in quality could not be measured
(docs/model-package.md).
"""

from __future__ import annotations

from headwise.export.encoder import EncoderKind
from headwise.export.pipeline import Options
from headwise.model.sentence import LoadedModel


class TokenClassifierKind(EncoderKind):
    task = "token-classification"
    head = "ForTokenClassification"
    outputs = ("token_logits",)
    int8 = False

    def notes(self, options: Options) -> list[str]:
        return ["token-classification packages have fp32 and fp16 variants, no int8"] if options.int8 else []

    def facts(self, loaded: LoadedModel) -> dict:
        return {**super().facts(loaded), "labels": list(loaded.model.head.labels), "pooling": None,
                "normalize": False}
