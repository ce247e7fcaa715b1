"""The logits head of classification packages (cross-encoders, classifiers): inputs are texts
or (a, b) pairs, tokenised as the package's tokenizer encodes pairs (segment ids mark the
second text); the graphs answer `logits`, activated per request (sigmoid for one label,
softmax for several); with attention a pair's answer is its query↔document blocks."""

from __future__ import annotations

import numpy as np

from headwise.service.engine.classify import (
    Classified,
    ClassifyParams,
    activate,
    answer_size,
    attention_bytes,
    returned_bytes,
)
from headwise.service.engine.outputs import attention_payload, pair_attention
from headwise.service.engine.params import AttentionSpec, Read
from headwise.service.engine.runtime import Capability
from headwise.service.engine.size import Size, total
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.package import ModelPackage


class LogitsHead:
    use = "use POST /v1/rerank or /v1/predict"
    cut: Cut = "longest_first"  # transformers' default, as CrossEncoder cuts a pair
    labelled = True  # its package lists labels, which its answers name

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer | None):
        self.labels = package.labels
        # a single relevance score reranks; several labels classify only (TEI's rule)
        self.capabilities = frozenset({Capability.CLASSIFY, *([Capability.RERANK] if len(self.labels) == 1 else [])})
        self.described = f"a classification model ({len(self.labels)} labels)"

    def card(self) -> dict:
        return {"labels": list(self.labels)}

    def pretokenised(self, inputs: Inputs) -> bool:
        return False

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        # with strings always (ClassifyParams.token_strings)
        return tokenizer.encode_items(inputs, read.truncate, cut=self.cut, max_tokens=read.max_tokens,
                                      special_tokens=read.special_tokens)

    def attention_need(self, params: ClassifyParams, encs: list[Encoded]) -> tuple[int, str]:
        spec = params.attention
        return (sum(attention_bytes(spec, e) if e.segments is not None else spec.nbytes(e.length) for e in encs),
                "asked-for attention")

    def answer_size(self, params: ClassifyParams, encs: list[Encoded]) -> Size:
        return total(answer_size(params, e, self.labels) for e in encs)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return returned_bytes(spec, enc) if enc.segments is not None else spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> ClassifyParams:
        return ClassifyParams()  # the attention variant still computes (and returns) its weights

    def outputs(self, entries: list[Entry]) -> list[str]:
        return ["logits"]

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> Classified:
        p: ClassifyParams = e.job.params
        row = out["logits"][i].astype("float32", copy=True)
        att = None
        if weights is not None:
            enc = e.encoding
            att = (pair_attention(weights, enc, p.attention) if enc.segments is not None
                   else attention_payload(weights, e.length, p.attention))
        return Classified(e.encoding, row, activate(row, p.raw_scores), att)
