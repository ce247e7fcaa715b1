"""transformers' token-classification pipeline's answer shape (service.api.compat.token_pipeline)
without a model: one entity per token, or B-/I- groups fused as the pipeline's
group_entities, words made of their pieces first (first, average, max), ignored labels left out
after grouping, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

from headwise.service.api.compat.token_pipeline import TokenClassificationRequest, entities, options
from headwise.service.engine.heads.tokens import Tagged
from headwise.service.engine.tokenizer import Encoded
from headwise.service.errors import Validation

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]


class WordPieces:
    """A WordPiece tokenizer's side: "##" marks a word's later pieces."""

    word_aware = True
    unk_id = -1

    def join(self, tokens: list[str]) -> str:
        return " ".join(tokens).replace(" ##", "")


def _tagged(words: list[str], tags: list[str], score: float | list[float] = 0.9) -> Tagged:
    """[CLS] tokens [SEP], each tagged as `tags` says with `score`: a "##" piece continues the
    word before it in the text, any other token starts a word after a space."""
    n = len(words) + 2
    logits = np.zeros((n, len(LABELS)), np.float32)
    for i, tag in enumerate(tags, start=1):
        logits[i, LABELS.index(tag)] = 5.0
    each = score if isinstance(score, list) else [score] * len(tags)
    scores = np.zeros((n, len(LABELS)), np.float32)
    for i, (tag, p) in enumerate(zip(tags, each, strict=True), start=1):
        scores[i] = (1 - p) / (len(LABELS) - 1)
        scores[i, LABELS.index(tag)] = p
    offsets, at = [(0, 0)], -1
    for w in words:
        piece = w.removeprefix("##")
        at += 0 if w.startswith("##") else 1
        offsets.append((at, at + len(piece)))
        at += len(piece)
    enc = Encoded(np.arange(n), np.zeros(n, np.int64), ["[CLS]", *words, "[SEP]"], [*offsets, (0, 0)])
    return Tagged(enc, list(range(1, n - 1)), logits, scores, None)


def _text(words: list[str]) -> str:
    return WordPieces().join(words)


def _entities(words, tags, strategy, ignore=frozenset({"O"}), score=0.9, pieces=None):
    return entities(_tagged(words, tags, score), LABELS, strategy, set(ignore), _text(words), pieces or WordPieces())


def test_none_is_one_entity_per_token_without_the_ignored():
    words = ["sarah", "jessica", "lives", "here"]
    got = _entities(words, ["B-PER", "I-PER", "O", "B-LOC"], "none")
    assert got == [{"entity": "B-PER", "score": pytest.approx(0.9), "index": 1, "word": "sarah", "start": 0, "end": 5},
                   {"entity": "I-PER", "score": pytest.approx(0.9), "index": 2, "word": "jessica", "start": 6,
                    "end": 13},
                   {"entity": "B-LOC", "score": pytest.approx(0.9), "index": 4, "word": "here", "start": 20,
                    "end": 24}]
    assert len(_entities(words, ["B-PER", "I-PER", "O", "B-LOC"], "none", ignore=())) == 4


def test_simple_fuses_b_i_groups_as_the_pipeline():
    words, tags = ["a", "b", "c", "d", "e", "f", "g", "h"], ["B-PER", "I-PER", "B-PER", "I-LOC", "I-LOC", "O", "O", "MISC"]
    got = _entities(words, tags, "simple")
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in got] == [
        ("PER", "a b", 0, 3), ("PER", "c", 4, 5), ("LOC", "d e", 6, 9), ("MISC", "h", 14, 15)]
    assert all(e["score"] == pytest.approx(0.9) for e in got)
    with_o = _entities(words, tags, "simple", ignore=())
    assert [e["entity_group"] for e in with_o] == ["PER", "PER", "LOC", "O", "MISC"]  # the two O's: one group


def test_options_default_and_refusals():
    assert options(TokenClassificationRequest(inputs="x")) == ("none", {"O"})
    asked = TokenClassificationRequest(inputs="x", parameters={"aggregation_strategy": "simple", "ignore_labels": []})
    assert options(asked) == ("simple", set())
    for strategy in ("first", "average", "max"):
        assert options(TokenClassificationRequest(inputs="x", parameters={"aggregation_strategy": strategy}))[0] == strategy
    with pytest.raises(Validation, match="stride"):
        options(TokenClassificationRequest(inputs="x", parameters={"stride": 16}))


WORDS = ["sa", "##rah", "lives", "in", "ber", "##ke", "##ley"]  # "sarah lives in berkeley"
TAGS = ["B-PER", "I-LOC", "O", "O", "B-LOC", "B-PER", "I-LOC"]
SCORES = [0.6, 0.95, 0.9, 0.9, 0.5, 0.4, 0.45]


def _groups(got):
    return [(e["entity_group"], e["word"], e["start"], e["end"], round(e["score"], 4)) for e in got]


def test_first_takes_each_words_first_piece():
    got = _entities(WORDS, TAGS, "first", score=SCORES)
    assert _groups(got) == [("PER", "sarah", 0, 5, 0.6), ("LOC", "berkeley", 15, 23, 0.5)]


def test_max_takes_each_words_most_confident_piece():
    got = _entities(WORDS, TAGS, "max", score=SCORES)
    assert _groups(got) == [("LOC", "sarah", 0, 5, 0.95), ("LOC", "berkeley", 15, 23, 0.5)]


def test_average_takes_the_best_of_each_words_mean_scores():
    got = _entities(WORDS, TAGS, "average", score=SCORES)
    rest = (1 - np.array(SCORES)) / (len(LABELS) - 1)
    # "sarah": B-PER (0.6 + rest[1]) / 2 against I-LOC (rest[0] + 0.95) / 2
    sarah = max((0.6 + rest[1]) / 2, (rest[0] + 0.95) / 2)
    assert _groups(got)[0] == ("LOC", "sarah", 0, 5, round(sarah, 4))
    assert [g[:4] for g in _groups(got)] == [("LOC", "sarah", 0, 5), ("LOC", "berkeley", 15, 23)]


def test_words_without_marked_pieces_are_told_by_the_spaces_around_them():
    class Plain(WordPieces):
        word_aware = False

    tagged = _tagged(["sa", "##rah", "lives"], ["B-PER", "O", "O"], [0.6, 0.9, 0.9])
    got = entities(tagged, LABELS, "first", {"O"}, "sarah lives", Plain())
    assert _groups(got) == [("PER", "sarah", 0, 5, 0.6)]  # one word: no space between the two pieces


def test_an_unknown_token_is_the_text_it_stands_for_and_a_word_of_its_own():
    class Unk(WordPieces):
        unk_id = 2  # the second token, "##rah", is [UNK] here

    tagged = _tagged(["sa", "##rah", "lives"], ["B-PER", "I-PER", "O"])
    got = entities(tagged, LABELS, "none", {"O"}, "sarah lives", Unk())
    assert [(e["word"], e["index"]) for e in got] == [("sa", 1), ("rah", 2)]
    first = entities(tagged, LABELS, "first", {"O"}, "sarah lives", Unk())
    assert [(e["entity_group"], e["word"]) for e in first] == [("PER", "sa rah")]  # two words, fused by their tags
