"""The answer of transformers' token-classification pipeline, as Hugging Face Inference
Endpoints serve it and huggingface_hub's `InferenceClient.token_classification` reads it: per
token `{entity, score, index, word, start, end}` (aggregation "none"), or per group
`{entity_group, score, word, start, end}`: "simple" fuses tokens whose B-/I- tags continue one
another (the pipeline's `group_entities`); "first", "average" and "max" first make each word
one entity (its first piece's label, its pieces' mean scores' best, or its most confident
piece's label: `aggregate_words`), then fuse those. A word's later pieces are told as the
pipeline tells them: by their string's length against the text they cover when the tokenizer
marks pieces (WordPiece's "##"), else by having no space before them. Labels in
`ignore_labels` (the pipeline's default: ["O"]) are left out after grouping. Pure shaping: the
TEI router's POST / calls Engine.tag and answers with ENTITIES."""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from headwise.service.api.compat.tei import TeiBody
from headwise.service.api.writer import Writer
from headwise.service.engine.heads.tokens import Tagged
from headwise.service.errors import Validation

Strategy = Literal["none", "simple", "first", "average", "max"]
WORDS = ("first", "average", "max")
# The bytes of one entity beyond its word's and label's characters (escaped at worst: 6 a character).
ENTITY_BYTES = 128


class TokenClassificationParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aggregation_strategy: Strategy | None = Field(None, description="none (the default), simple, first, average "
                                                  "or max")
    ignore_labels: list[StrictStr] | None = Field(None, description='labels left out; default ["O"]')
    stride: StrictInt | None = Field(None, description="refused: a text is cut at max_len tokens")


class TokenClassificationRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "My name is Sarah Jessica Parker", "parameters": {"aggregation_strategy": "simple"}}]})

    inputs: StrictStr = Field(..., description="one text")
    parameters: TokenClassificationParameters | None = None


def options(body: TokenClassificationRequest) -> tuple[str, set[str]]:
    """(aggregation, ignored labels); Validation for what would be answered otherwise than asked."""
    p = body.parameters or TokenClassificationParameters()
    strategy = p.aggregation_strategy or "none"
    if p.stride is not None:
        raise Validation("parameters.stride is not served: a text longer than the model's max_len is cut there",
                         field="parameters")
    return strategy, set(["O"] if p.ignore_labels is None else p.ignore_labels)


def size(text: str, n_tokens: int, labels: list[str]) -> int:
    """An upper bound of the answer's bytes: an entity per token, and their words, which
    together spell the text at most three times over (a piece's "##", a group's spaces)."""
    return 64 + n_tokens * (ENTITY_BYTES + 6 * max(len(x) for x in labels)) + 6 * 3 * len(text)


class Pieces(Protocol):
    """What the pipeline reads of the tokenizer (service.engine.tokenizer.TextTokenizer)."""

    word_aware: bool  # a word's later pieces are marked (WordPiece's "##")
    unk_id: int | None

    def join(self, tokens: list[str]) -> str: ...  # transformers' convert_tokens_to_string


def entities(t: Tagged, labels: list[str], strategy: str, ignore: set[str], text: str, pieces: Pieces) -> list[dict]:
    """The pipeline's entities of one `text`."""
    best = t.logits.argmax(axis=-1).tolist()
    enc = t.encoding
    ids, tokens, offsets = enc.ids.tolist(), enc.tokens, enc.offsets
    singles = []
    for i in t.labelled:
        start, end = offsets[i]
        word = text[start:end] if ids[i] == pieces.unk_id else tokens[i]  # an unknown token: the text it stands for
        singles.append({"entity": labels[best[i]], "score": float(t.scores[i, best[i]]), "index": i, "word": word,
                        "start": start, "end": end})
    if strategy == "none":
        return [e for e in singles if e["entity"] not in ignore]
    if strategy in WORDS:
        later = [ids[e["index"]] != pieces.unk_id and _is_subword(e["word"], text, e["start"], e["end"],
                                                                  pieces.word_aware) for e in singles]
        singles = [_word(w, t.scores, labels, strategy, pieces) for w in _words(singles, later)]
    groups: list[list[dict]] = []
    for e in singles:
        bi, tag = _tag(e["entity"])
        if groups and bi != "B" and tag == _tag(groups[-1][-1]["entity"])[1]:
            groups[-1].append(e)
        else:
            groups.append([e])
    out = []
    for g in groups:
        group = g[0]["entity"].split("-", 1)[-1]
        if group in ignore:
            continue
        out.append({"entity_group": group, "score": float(np.nanmean([e["score"] for e in g])),
                    "word": pieces.join([e["word"] for e in g]), "start": g[0]["start"], "end": g[-1]["end"]})
    return out


class Pipeline(NamedTuple):
    """POST /'s token-classification request as its answer reads it."""

    text: str
    strategy: str  # aggregation_strategy
    ignore: set[str]  # ignore_labels
    pieces: Pieces  # the model's tokenizer


# a TagResult of one text
ENTITIES = Writer(lambda r, q: size(q.text, r.data[0].encoding.length, r.labels),
                  lambda r, q: entities(r.data[0], r.labels, q.strategy, q.ignore, q.text, q.pieces),
                  "send a shorter text")


def _is_subword(token: str, text: str, start: int, end: int, word_aware: bool) -> bool:
    """A word's later piece, as the pipeline tells it (an unknown token never is one)."""
    if word_aware:
        return len(token) != end - start  # "##ing" covers 3 characters
    return start > 0 and " " not in text[start - 1:start + 1]


def _words(singles: list[dict], later: list[bool]) -> list[list[dict]]:
    """Tokens in words: a word is a token and the pieces after it (`later[i]`: token i is one)."""
    words: list[list[dict]] = []
    for e, piece in zip(singles, later, strict=True):
        if words and piece:
            words[-1].append(e)
        else:
            words.append([e])
    return words


def _word(pieces_of: list[dict], scores: np.ndarray, labels: list[str], strategy: str, pieces: Pieces) -> dict:
    """One word's entity (the pipeline's `aggregate_word`)."""
    rows = scores[[e["index"] for e in pieces_of]]  # [pieces, n_labels]
    if strategy == "first":
        row = rows[0]
    elif strategy == "max":
        row = rows[int(rows.max(axis=-1).argmax())]  # the first most confident piece
    else:
        row = np.nanmean(rows, axis=0)
    k = int(row.argmax())
    return {"entity": labels[k], "score": float(row[k]), "word": pieces.join([e["word"] for e in pieces_of]),
            "start": pieces_of[0]["start"], "end": pieces_of[-1]["end"]}


def _tag(label: str) -> tuple[str, str]:
    """(B or I, the entity type) of a B-I-O label; a label outside that scheme is its own type."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label
