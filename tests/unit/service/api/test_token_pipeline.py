"""transformers' token-classification pipeline's answer shape (service.api.compat.token_pipeline)
without a model: one entity per token, or B-/I- groups fused as the pipeline's
group_entities, ignored labels left out after grouping, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

from headwise.service.api.compat.token_pipeline import TokenClassificationRequest, entities, options
from headwise.service.engine.heads.tokens import Tagged
from headwise.service.engine.tokenizer import Encoded
from headwise.service.errors import Validation

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]


def _tagged(words: list[str], tags: list[str], score: float = 0.9) -> Tagged:
    """[CLS] words [SEP], each word one token tagged as `tags` says, with `score`."""
    n = len(words) + 2
    logits = np.zeros((n, len(LABELS)), np.float32)
    for i, tag in enumerate(tags, start=1):
        logits[i, LABELS.index(tag)] = 5.0
    scores = np.full((n, len(LABELS)), (1 - score) / (len(LABELS) - 1), np.float32)
    for i, tag in enumerate(tags, start=1):
        scores[i, LABELS.index(tag)] = score
    offsets, at = [(0, 0)], 0
    for w in words:
        offsets.append((at, at + len(w)))
        at += len(w) + 1
    enc = Encoded(np.arange(n), np.zeros(n, np.int64), ["[CLS]", *words, "[SEP]"], [*offsets, (0, 0)])
    return Tagged(enc, list(range(1, n - 1)), logits, scores, None)


def _words(t: Tagged):
    return lambda positions: " ".join(t.encoding.tokens[i] for i in positions)


def test_none_is_one_entity_per_token_without_the_ignored():
    t = _tagged(["sarah", "jessica", "lives", "here"], ["B-PER", "I-PER", "O", "B-LOC"])
    got = entities(t, LABELS, "none", {"O"}, _words(t))
    assert got == [{"entity": "B-PER", "score": pytest.approx(0.9), "index": 1, "word": "sarah", "start": 0, "end": 5},
                   {"entity": "I-PER", "score": pytest.approx(0.9), "index": 2, "word": "jessica", "start": 6,
                    "end": 13},
                   {"entity": "B-LOC", "score": pytest.approx(0.9), "index": 4, "word": "here", "start": 20,
                    "end": 24}]
    assert len(entities(t, LABELS, "none", set(), _words(t))) == 4


def test_simple_fuses_b_i_groups_as_the_pipeline():
    t = _tagged(["a", "b", "c", "d", "e", "f", "g", "h"],
                ["B-PER", "I-PER", "B-PER", "I-LOC", "I-LOC", "O", "O", "MISC"])
    got = entities(t, LABELS, "simple", {"O"}, _words(t))
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in got] == [
        ("PER", "a b", 0, 3), ("PER", "c", 4, 5), ("LOC", "d e", 6, 9), ("MISC", "h", 14, 15)]
    assert all(e["score"] == pytest.approx(0.9) for e in got)
    with_o = entities(t, LABELS, "simple", set(), _words(t))
    assert [e["entity_group"] for e in with_o] == ["PER", "PER", "LOC", "O", "MISC"]  # the two O's: one group


def test_options_default_and_refusals():
    assert options(TokenClassificationRequest(inputs="x")) == ("none", {"O"})
    asked = TokenClassificationRequest(inputs="x", parameters={"aggregation_strategy": "simple", "ignore_labels": []})
    assert options(asked) == ("simple", set())
    for bad, words in (({"aggregation_strategy": "first"}, "'first' is not served"), ({"stride": 16}, "stride")):
        with pytest.raises(Validation, match=words):
            options(TokenClassificationRequest(inputs="x", parameters=bad))
