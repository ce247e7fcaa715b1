"""The token-classification head (NER and PII taggers: `*ForTokenClassification`), with what
its requests ask for (TagParams), each input's answer (Tagged), the result (TagResult) and what
an answer holds. Inputs are single texts, tokenised with their strings and character
offsets; the graphs answer `token_logits` [B, T, n_labels], cut here to each input's tokens
and activated per token (softmax, as transformers' token-classification pipeline). The
tokenizer's special tokens ([CLS], [SEP]) carry no label and are left out of the answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwise.service.engine.classify import ClassifyParams, HeadResult, activate
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec, Read
from headwise.service.engine.runtime import Capability
from headwise.service.engine.size import Size, total
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.package import ModelPackage

# A tagging request asks what a classification request does: truncation, raw or activated
# scores, attention (over every position: a single text's), removed heads.
TagParams = ClassifyParams


@dataclass(frozen=True, slots=True)
class Tagged:
    """One input's answer, over every position of its encoding; `labelled` says which carry a
    label (the special tokens do not)."""

    encoding: Encoded
    labelled: list[int]  # positions of the tokens that carry a label, in order
    logits: np.ndarray  # [T, n_labels] float32, raw
    scores: np.ndarray  # [T, n_labels] float32, activated unless raw_scores
    attention: dict | None  # service.engine.outputs.attention_payload, over every position


TagResult = HeadResult


def tag_size(params: TagParams, t: int, labels: tuple[str, ...]) -> Size:
    """What one input of `t` tokens answers: per token its string and offsets, its likeliest
    label (the longest label's characters, at worst) and score, and every label's score (a
    protocol may write them all); with attention its [L', H', T, T] weights."""
    spec = params.attention
    return Size(tokens=t, chars=t * max(len(x) for x in labels), labels=t, values=t * (len(labels) + 1),
                records=t + 1, blocks=(spec.block(t),) if spec is not None else ())


class TokenHead:
    use = "use POST /v1/tag"
    cut: Cut = "longest_first"  # single texts only
    labelled = True  # its package lists labels, which its answers name

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer):
        self.labels = package.labels
        self.capabilities = frozenset({Capability.TAG})
        self.described = f"a token-classification model ({len(self.labels)} labels)"
        self.special = tokenizer.special_ids  # the tokenizer's special tokens: no label

    def card(self) -> dict:
        return {"labels": list(self.labels)}

    def pretokenised(self, inputs: Inputs) -> bool:
        return False

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        # with strings and offsets: every answer names them
        return tokenizer.encode_unchecked(inputs, read.truncate, read.special_tokens, max_tokens=read.max_tokens)

    def attention_need(self, params: TagParams, encs: list[Encoded]) -> tuple[int, str]:
        return sum(params.attention.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_size(self, params: TagParams, encs: list[Encoded]) -> Size:
        return total(tag_size(params, e.length, self.labels) for e in encs)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> TagParams:
        return TagParams(attention=attention)

    def outputs(self, entries: list[Entry]) -> list[str]:
        return ["token_logits"]

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> Tagged:
        p: TagParams = e.job.params
        t = e.length
        labelled = [j for j, k in enumerate(e.encoding.ids.tolist()) if k not in self.special]
        logits = out["token_logits"][i, :t].astype("float32", copy=True)  # [T, n_labels]
        att = attention_payload(weights, t, p.attention) if weights is not None else None
        return Tagged(e.encoding, labelled, logits, activate(logits, p.raw_scores), att)
