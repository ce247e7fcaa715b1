"""Classification packages (cross-encoders, classifiers): an encoder with BERT's
classification head → fast.onnx (logits), fast.fp16.onnx (CUDA) and analysis.onnx (logits,
every head's weights and every layer's hidden states), verified against the torch model on texts and on pairs.

The inputs are an encoder's (input_ids, attention_mask, token_type_ids): a pair is one
sequence whose segment ids tell its halves apart. int8 is not offered: without a labelled
set its cost in quality could not be measured (docs/model-package.md).
"""

from __future__ import annotations

from headwise.export.encoder import EncoderKind
from headwise.export.pipeline import Options
from headwise.export.verify import PARITY_PAIRS
from headwise.model.sentence import LoadedModel


class ClassifierKind(EncoderKind):
    task = "classification"
    head = "ForSequenceClassification"
    outputs = ("logits",)
    int8 = False
    parity_inputs = PARITY_PAIRS

    def notes(self, options: Options) -> list[str]:
        return ["classification packages have fp32 and fp16 variants, no int8"] if options.int8 else []

    def facts(self, loaded: LoadedModel) -> dict:
        facts = super().facts(loaded)
        return {**facts, "labels": list(loaded.model.head.labels), "pooling": None, "normalize": False,
                "tokenizer": {**facts["tokenizer"], "pairs": True}}
