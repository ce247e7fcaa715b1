"""The answer of transformers' token-classification pipeline, as Hugging Face Inference
Endpoints serve it and huggingface_hub's `InferenceClient.token_classification` reads it: per
token `{entity, score, index, word, start, end}` (aggregation "none"), or per group of tokens
`{entity_group, score, word, start, end}` (aggregation "simple": B-/I- tags fused, as the
pipeline's `group_entities`). Labels in `ignore_labels` (the pipeline's default: ["O"]) are
left out after grouping. The word-based strategies ("first", "average", "max") are refused,
never answered as another. Pure shaping: the TEI router's POST / calls Engine.tag and this."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from headwise.service.api.compat.tei import TeiBody
from headwise.service.engine.heads.tokens import Tagged
from headwise.service.errors import Validation

Strategy = Literal["none", "simple", "first", "average", "max"]
SERVED = ("none", "simple")
# The bytes of one entity beyond its word's and label's characters (escaped at worst: 6 a character).
ENTITY_BYTES = 128


class TokenClassificationParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aggregation_strategy: Strategy | None = Field(None, description="none (the default) or simple")
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
    if strategy not in SERVED:
        raise Validation(f"parameters.aggregation_strategy {strategy!r} is not served (it groups by words); "
                         "send none or simple", field="parameters")
    if p.stride is not None:
        raise Validation("parameters.stride is not served: a text longer than the model's max_len is cut there",
                         field="parameters")
    return strategy, set(["O"] if p.ignore_labels is None else p.ignore_labels)


def size(text: str, n_tokens: int, labels: list[str]) -> int:
    """An upper bound of the answer's bytes: an entity per token, and their words, which
    together spell the text at most three times over (a piece's "##", a group's spaces)."""
    return 64 + n_tokens * (ENTITY_BYTES + 6 * max(len(x) for x in labels)) + 6 * 3 * len(text)


def entities(t: Tagged, labels: list[str], strategy: str, ignore: set[str],
             words: Callable[[list[int]], str]) -> list[dict]:
    """The pipeline's entities of one text: `words(positions)` is the text of those tokens as
    the tokenizer's decoder writes them (the pipeline's convert_tokens_to_string)."""
    best = t.logits.argmax(axis=-1).tolist()
    tokens, offsets = t.encoding.tokens, t.encoding.offsets
    singles = [{"entity": labels[best[i]], "score": float(t.scores[i, best[i]]), "index": i, "word": tokens[i],
                "start": offsets[i][0], "end": offsets[i][1]} for i in t.labelled]
    if strategy == "none":
        return [e for e in singles if e["entity"] not in ignore]
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
        out.append({"entity_group": group, "score": sum(e["score"] for e in g) / len(g),
                    "word": words([e["index"] for e in g]), "start": g[0]["start"], "end": g[-1]["end"]})
    return out


def _tag(label: str) -> tuple[str, str]:
    """(B or I, the entity type) of a B-I-O label; a label outside that scheme is its own type."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label
