"""text-embeddings-inference's wire format (its router/src/http/types.rs): request and response
bodies with TEI's field names and defaults, the pure shaping the TEI routes share, and one writer
per route (no HTTP, no engine calls here).

Every body also takes `model`, headwise's addition, to pick one of several served models. A
field that would change the answer and that headwise cannot honour is refused (422), never
ignored: a `prompt_name` the model does not have (service.engine.prompts), `dimensions` on a
model without Matryoshka dimensions (service.engine.matryoshka), `encoding_format` other than
float.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api.sizes import echoed_bytes
from headwise.service.api.writer import Writer, counted, ranked
from headwise.service.engine.tokenizer import LEFT, Truncate
from headwise.service.errors import Validation

Direction = Literal["Right", "right", "Left", "left"]
PROMPT_NAME = ("one of the model's sentence-transformers prompts, prepended to each text; default: "
               "HEADWISE_DEFAULT_PROMPT_NAME, else the model's default_prompt_name")
Ids = list[StrictInt]


class TeiBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictStr | None = Field(None, description="headwise: which served model answers; default: see docs/api.md")


class Truncation(BaseModel):
    truncate: StrictBool | None = Field(None, description="null: the server's auto_truncate (true)")
    truncation_direction: Direction = Field("right", description="where a text too long is cut: right (its end) "
                                            "or left (its start: its last tokens are kept)")


class EmbedRequest(TeiBody, Truncation):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "What is Deep Learning?"}, {"inputs": ["a", "b"], "normalize": True, "dimensions": 128}]})

    inputs: StrictStr | Ids | list[StrictStr | Ids] = Field(
        ..., description="a text, token ids, or a list of either (used as they are: no special tokens added)")
    prompt_name: StrictStr | None = Field(None, description=PROMPT_NAME)
    normalize: StrictBool = True
    dimensions: StrictInt | None = Field(
        None, description="keep the first n dimensions (then normalise); a model's Matryoshka dimensions only")
    encoding_format: Literal["float"] | None = Field(None, description="huggingface_hub's; float only")


class EmbedAllRequest(TeiBody, Truncation):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"inputs": "What is Deep Learning?"}]})

    inputs: StrictStr | Ids | list[StrictStr | Ids]
    prompt_name: StrictStr | None = Field(None, description=PROMPT_NAME)


class SimilarityInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(Truncation):
    model_config = ConfigDict(extra="forbid")

    prompt_name: StrictStr | None = Field(None, description=PROMPT_NAME)


class SimilarityRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": {"source_sentence": "What is Deep Learning?", "sentences": ["What is Machine Learning?"]}}]})

    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class RerankRequest(TeiBody, Truncation):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "What is Deep Learning?", "texts": ["Deep Learning is ...", "Paris is ..."]}]})

    query: StrictStr
    texts: list[StrictStr]
    raw_scores: StrictBool = Field(False, description="the logit as it is; otherwise its sigmoid")
    return_text: StrictBool = False


class PredictParameters(BaseModel):
    """huggingface_hub's text_classification parameters (TEI itself ignores them)."""

    model_config = ConfigDict(extra="forbid")

    top_k: StrictInt | None = Field(None, ge=1, description="the k best labels only")
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = Field(
        None, description="default: sigmoid with one label, softmax with more; none = raw_scores")


class PredictRequest(TeiBody, Truncation):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "I like you."}, {"inputs": ["What is Deep Learning?", "Deep Learning is ..."]},
        {"inputs": [["I like you."], ["a question", "its answer"]]}]})

    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]] = Field(
        ..., description="a text, a pair [text, text], or a batch of [text] and [text, text]")
    raw_scores: StrictBool = False
    parameters: PredictParameters | None = None


class TokenizeRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"inputs": "test"}]})

    inputs: StrictStr | list[StrictStr]
    add_special_tokens: StrictBool = True
    prompt_name: StrictStr | None = Field(None, description=PROMPT_NAME)


class DecodeRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"ids": [101, 3231, 102]}]})

    ids: Ids | list[Ids]
    skip_special_tokens: StrictBool = True


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None = Field(..., description="UTF-8 byte offset; null for special tokens")
    stop: int | None


class Prediction(BaseModel):
    score: float
    label: str


class Rank(BaseModel):
    index: int
    text: str | None = None
    score: float


class SparseValue(BaseModel):
    index: int = Field(..., description="a vocabulary id")
    value: float = Field(..., description="its weight, > 0")


class TeiError(BaseModel):
    error: str
    error_type: Literal["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"]


class Info(BaseModel):
    model_id: str
    model_sha: str | None
    model_dtype: str
    served_model_name: str
    model_type: dict = Field(..., description='{"embedding": {"pooling"}}, {"classifier" | "reranker": '
                                              '{"id2label", "label2id"}} or {"generator": {}}')
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None
    docker_label: str | None


# -- shaping ---------------------------------------------------------------------------------

def truncation(t: Truncation) -> Truncate:
    """The engine's `truncate`: off, at the end, or "left" (at the start, as TEI's tokenizer
    cuts with TruncationDirection::Left)."""
    on = True if t.truncate is None else t.truncate  # TEI's auto_truncate, true by default
    return LEFT if on and t.truncation_direction.lower() == "left" else on


def embed_inputs(inputs) -> list:
    """TEI's Input → the engine's list: all texts, or all token-id lists."""
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        return [inputs]
    if len({isinstance(x, str) for x in inputs}) > 1:
        raise Validation("inputs: send all texts or all token-id lists, not both", field="inputs")
    return list(inputs)


def predict_inputs(inputs) -> tuple[list[str | tuple[str, str]], bool]:
    """TEI's PredictInput → (items, single): a text, a pair [a, b], or a batch of [a] / [a, b]."""
    if isinstance(inputs, str):
        return [inputs], True
    if not inputs:
        raise Validation("inputs: a string, a pair of strings [string, string] or a batch of mixed strings "
                         "and pairs [[string], [string, string], ...]", field="inputs")
    if isinstance(inputs[0], str):
        if len(inputs) > 2:
            raise Validation(f"inputs: a pair has 2 texts, not {len(inputs)} (a batch is a list of lists)",
                             field="inputs")
        return [inputs[0] if len(inputs) == 1 else (inputs[0], inputs[1])], True
    items: list[str | tuple[str, str]] = []
    for i, seq in enumerate(inputs):
        if len(seq) not in (1, 2):
            raise Validation(f"inputs[{i}]: one text or a pair of texts, not {len(seq)}", field="inputs")
        items.append(seq[0] if len(seq) == 1 else (seq[0], seq[1]))
    return items, False


def matryoshka(v: np.ndarray, n: int | None, normalize: bool) -> np.ndarray:
    """TEI's `dimensions`: the first n values, normalised again when asked (in float64)."""
    if n is None or n == len(v):
        return v
    w = np.asarray(v[:n], dtype=np.float64)
    if normalize:
        w = w / max(np.linalg.norm(w), 1e-12)
    return w.astype(np.float32)


def check_dimensions(n: int | None, d_model: int) -> None:
    if n is not None and not 1 <= n <= d_model:
        raise Validation(f"dimensions must be in 1..{d_model} for this model", field="dimensions")


def activate(logits: np.ndarray, how: str) -> np.ndarray:
    """huggingface_hub's function_to_apply over one input's logits."""
    x = np.asarray(logits, dtype=np.float64)
    if how == "sigmoid":
        x = 1.0 / (1.0 + np.exp(-x))
    elif how == "softmax":
        e = np.exp(x - x.max())
        x = e / e.sum()
    return x.astype(np.float32)


def best_first(items: list, score) -> list:
    """Highest score first, as TEI orders them (a stable ascending sort, reversed)."""
    return sorted(items, key=score)[::-1]


def order(scores, top_n: int | None = None) -> list[int]:
    """Indices in TEI's order (best_first: ties by the later index first); the top_n when given."""
    best = best_first(list(range(len(scores))), lambda i: scores[i])
    return best if top_n is None else best[:top_n]


def byte_offsets(text: str) -> list[int] | None:
    """UTF-8 byte offset of each character (and of the end) of `text`; None when ASCII, where
    the two agree. TEI's token offsets count bytes; the tokenizer's Python binding, characters."""
    if text.isascii():
        return None
    out, at = [0], 0
    for ch in text:
        at += len(ch.encode("utf-8"))
        out.append(at)
    return out


def simple_tokens(text: str, ids, tokens: list[str], offsets, special_ids: frozenset[int]) -> list[dict]:
    """One encoding as TEI's SimpleTokens: special tokens (those the post-processor added: a
    special id with no span) by name and no offsets, the others as their slice of the text."""
    at = byte_offsets(text)
    out = []
    for i, tok, (a, b) in zip(ids, tokens, offsets, strict=True):
        i = int(i)
        if i in special_ids and a == b == 0:
            out.append({"id": i, "text": tok, "special": True, "start": None, "stop": None})
        else:
            out.append({"id": i, "text": text[a:b], "special": False,
                        "start": at[a] if at else a, "stop": at[b] if at else b})
    return out


def tokens_bytes(texts: list[str], n_tokens: int) -> int:
    """A bound of the JSON bytes of /tokenize's answer: per token its fields, and its text
    at most once more than the input's own bytes, escaped (6 bytes per character)."""
    return n_tokens * 96 + sum(6 * len(t) for t in texts)


# -- the answers, a writer per route -------------------------------------------------------------

SPARSE_VALUE_BYTES = 48  # {"index":1234567,"value":-1.2345678e-5}, and its comma


class Cut(NamedTuple):
    """/embed's request as its answer reads it."""

    dimensions: int | None  # Matryoshka: the first n values
    normalize: bool


# an EmbedResult each
EMBED = Writer(counted, lambda r, q: [matryoshka(e.sentence, q.dimensions, q.normalize) for e in r.data])
EMBED_ALL = Writer(counted, lambda r, _: [e.tokens for e in r.data])
# a HeadResult of SparseVectors: per input its non-zero weights, {index, value} each
EMBED_SPARSE = Writer(lambda r, _: r.answer_bytes + SPARSE_VALUE_BYTES * sum(len(x.indices) for x in r.data),
                      # float32 scalars, which orjson writes in their own shortest digits (as the native route)
                      lambda r, _: [[{"index": i, "value": v} for i, v in zip(x.indices.tolist(), x.values, strict=True)]
                                    for x in r.data],
                      "send fewer inputs")
# a Similarity
SIMILARITY = Writer(counted, lambda res, _: res.scores, "send fewer sentences")
# a Ranking and the route's body
RERANK = Writer(ranked, lambda r, body: [{"index": i, **({"text": body.texts[i]} if body.return_text else {}),
                                          "score": r.scores[i]} for i in r.order],
                "send fewer texts, or return_text: false")


class Predicted(NamedTuple):
    """/predict's request as its answer reads it."""

    function: str | None  # parameters.function_to_apply, applied to the logits; None: the scores
    top_k: int | None
    single: bool  # one text or pair: one list, not a list of lists


def _predict(result, q: Predicted) -> list:
    out = []
    for c in result.data:
        scores = activate(c.logits, q.function) if q.function is not None else c.scores
        best = best_first([{"score": float(s), "label": label} for s, label in zip(scores, result.labels, strict=True)],
                          lambda p: p["score"])
        out.append(best[:q.top_k] if q.top_k else best)
    return out[0] if q.single else out


PREDICT = Writer(counted, _predict, "send fewer inputs")


class Tokenized(NamedTuple):
    """/tokenize's request as its answer reads it."""

    texts: list[str]  # as tokenised (the prompt before each)
    special: frozenset[int]  # the tokenizer's special ids


# the texts' encodings (Engine.tokenize)
TOKENIZE = Writer(lambda encs, q: tokens_bytes(q.texts, sum(e.length for e in encs)),
                  lambda encs, q: [simple_tokens(t, e.ids, e.tokens, e.offsets, q.special)
                                   for t, e in zip(q.texts, encs, strict=True)])
# the decoded texts
DECODE = Writer(lambda texts, _: echoed_bytes(texts), lambda texts, _: texts, "send fewer ids")
