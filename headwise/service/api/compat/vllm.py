"""vLLM's pooling wire format (its entrypoints' ScoreRequest, ScoreResponse, ClassificationRequest,
ClassificationResponse): request and response bodies with vLLM's field names, and the pure
shaping the /score and /classify routes share, and their writers (no HTTP, no engine calls here).

A field that would change the answer and that headwise cannot honour is refused, never
ignored: `truncate_prompt_tokens` under the special tokens each input takes, `priority` other
than 0 (as vLLM without priority scheduling), activation flags that disagree. Unknown fields are
refused (422), where vLLM logs and ignores them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api.sizes import CHAR_BYTES
from headwise.service.api.writer import Writer
from headwise.service.engine.analytics.cosine import cosine
from headwise.service.engine.specials import Frame
from headwise.service.engine.tokenizer import LEFT, Truncate
from headwise.service.errors import InvalidRequest, TooLarge, Validation

Texts = StrictStr | list[StrictStr]
Side = Literal["left", "right"] | None
SPECIALS = ("vLLM's: false reads each text without the special tokens the tokenizer's post-processor puts "
            "around it ([CLS], [SEP]); true: with them")
CUT_SIDE = ("vLLM's: the end each input is cut at (to truncate_prompt_tokens, or to max_len): right (null: the "
            "default) keeps its first tokens, left its last ones")

# vLLM's names for the two sides of /score, first side first; its ScoreRequest is the union
# of these bodies (text_1/text_2 the oldest, queries/documents the documented one).
PAIRS = (("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2"))
SIDES = ("text_1", "text_2", "queries", "documents", "items", "data_1", "data_2")


class VllmBody(BaseModel):
    """What vLLM's pooling requests share (its PoolingBasicRequestMixin, ClassifyRequestMixin)."""

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    user: StrictStr | None = Field(None, description="accepted and ignored")
    truncate_prompt_tokens: StrictInt | None = Field(
        None, ge=-1, description="k: cut each input (a pair: longest text first) to k tokens, special tokens "
                                 "included, as the tokenizer's truncation at max_length=k; null or -1: at the "
                                 "model's max_len")
    truncation_side: Side = Field(None, description=CUT_SIDE)
    priority: StrictInt = Field(0, description="0 only: no priority scheduling (vLLM's default refuses others too)")
    use_activation: StrictBool | None = Field(
        None, description="null/true: the cross-encoder's sigmoid, the classifier's softmax; false: raw logits")
    activation: StrictBool | None = Field(None, description="vLLM's older name of use_activation")
    softmax: StrictBool | None = Field(None, description="vLLM's older name of use_activation")


class ScoreRequest(VllmBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text_1": "What is the capital of France?",
         "text_2": ["Paris is the capital of France.", "Berlin is in Germany."]},
        {"queries": ["a cat", "a dog"], "documents": ["the cat sat", "the dog ran"]},
    ]})

    text_1: Texts | None = Field(None, description="the first text of every pair: one (against every text_2) or "
                                                   "as many as text_2 (pairwise)")
    text_2: Texts | None = Field(None, description="the second text of every pair")
    queries: Texts | None = Field(None, description="text_1 by vLLM's newer name")
    documents: Texts | None = Field(None, description="text_2 by vLLM's newer name (with queries)")
    items: Texts | None = Field(None, description="text_2 by another of vLLM's names (with queries)")
    data_1: Texts | None = Field(None, description="text_1 by vLLM's generic name")
    data_2: Texts | None = Field(None, description="text_2 by vLLM's generic name (with data_1)")


class ClassifyRequest(VllmBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"input": "I loved this film."}, {"input": ["I loved this film.", "Dull."], "truncate_prompt_tokens": -1}]})

    input: Texts = Field(..., description="a text or a list of texts")
    add_special_tokens: StrictBool = Field(True, description=SPECIALS)


class VllmUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: dict | None = None


class VllmList(BaseModel):
    """What vLLM's pooling answers share around their `data` (`data` and `usage` follow)."""

    id: str
    object: Literal["list"] = "list"
    created: int
    model: str


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class VllmScoreResponse(VllmList):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "score-5f0c0f3cb0a44e52a1b1ef1c9d0bb0a6", "object": "list", "created": 1735689600,
        "model": "ms-marco-minilm", "data": [{"index": 0, "object": "score", "score": 0.998}],
        "usage": {"prompt_tokens": 17, "total_tokens": 17, "completion_tokens": 0, "prompt_tokens_details": None}}]})

    data: list[ScoreData]
    usage: VllmUsage


class ClassificationData(BaseModel):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class VllmClassificationResponse(VllmList):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "classify-5f0c0f3cb0a44e52a1b1ef1c9d0bb0a6", "object": "list", "created": 1735689600,
        "model": "tiny-sentiment",
        "data": [{"index": 0, "label": "positive", "probs": [0.01, 0.02, 0.97], "num_classes": 3}],
        "usage": {"prompt_tokens": 8, "total_tokens": 8, "completion_tokens": 0, "prompt_tokens_details": None}}]})

    data: list[ClassificationData]
    usage: VllmUsage


# -- reading requests ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScoreInputs:
    """The two sides of /score as vLLM reads them: lists (a string is a list of one), the
    first of length 1 (one against many) or of the second's (pairwise)."""

    first: str  # the field names the client used, for messages
    second: str
    firsts: list[str]
    seconds: list[str]
    listed: tuple[bool, bool]  # whether each side came as a list (messages index it then)

    def __len__(self) -> int:
        return len(self.seconds)

    def pairs(self) -> list[tuple[str, str]]:
        one = len(self.firsts) == 1
        return [(self.firsts[0 if one else i], b) for i, b in enumerate(self.seconds)]

    def where(self, side: int, i: int) -> str:
        """A text's name in messages: `text_2[3]`, or `text_1` when the side was one string."""
        name = (self.first, self.second)[side]
        return f"{name}[{i}]" if self.listed[side] else name


def score_inputs(body: ScoreRequest) -> ScoreInputs:
    """The sides the body sent: one of vLLM's pairs of names, both present, neither empty,
    their lengths 1:1, 1:N or N:N (vLLM's rule); each mistake names its field."""
    sent = [name for name in SIDES if getattr(body, name) is not None]
    if not sent:
        raise Validation("send text_1 and text_2 (or queries and documents): the texts to score", field="text_1")
    pair = next((p for p in PAIRS if set(sent) == set(p)), None)
    if pair is None:
        alone = next((p for p in PAIRS if set(sent) < set(p)), None)
        if alone is not None:
            missing = next(n for n in alone if n not in sent)
            raise Validation(f"'{missing}' is missing: {alone[0]} and {alone[1]} go together", field=missing)
        # a complete pair and something more: name the more
        home = next((p for p in PAIRS if set(p) <= set(sent)), None) or next(p for p in PAIRS if sent[0] in p)
        other = next(n for n in sent if n not in home)
        raise Validation(f"send one pair of fields (text_1/text_2, queries/documents, queries/items or "
                         f"data_1/data_2), not {', '.join(sent)}", field=other)
    a, b = pair
    raw_a, raw_b = getattr(body, a), getattr(body, b)
    firsts = [raw_a] if isinstance(raw_a, str) else list(raw_a)
    seconds = [raw_b] if isinstance(raw_b, str) else list(raw_b)
    for name, side in ((a, firsts), (b, seconds)):
        if not side:
            raise InvalidRequest(f"'{name}' is empty: at least one text", field=name)
    if len(firsts) > 1 and len(firsts) != len(seconds):
        raise InvalidRequest(f"'{a}' has {len(firsts)} texts and '{b}' {len(seconds)}: send one {a} (scored "
                             f"against every {b}) or as many as {b} (scored pairwise)", field=b)
    return ScoreInputs(a, b, firsts, seconds, (not isinstance(raw_a, str), not isinstance(raw_b, str)))


def check_texts(inputs: ScoreInputs, max_chars: int, max_inputs: int, embedded: int | None) -> None:
    """MAX_INPUT_CHARS and MAX_CLIENT_BATCH by the client's own field names (the engine would
    name its flattened inputs): the pairs for a cross-encoder, the `embedded` texts for an
    embedding model (both sides, the single first text once)."""
    n = len(inputs) if embedded is None else embedded
    if n > max_inputs:
        what = (f"{n} pairs" if embedded is None else
                f"{n} texts to embed ({inputs.first} and {inputs.second} together)")
        raise TooLarge(f"{what}; at most {max_inputs} per request", field=inputs.second)
    for side, texts in enumerate((inputs.firsts, inputs.seconds)):
        for i, t in enumerate(texts):
            if len(t) > max_chars:
                name = (inputs.first, inputs.second)[side]
                raise TooLarge(f"{inputs.where(side, i)} has {len(t)} characters; at most {max_chars} per input",
                               field=name)


class Cuts(Protocol):
    """What `max_tokens` reads of the model's tokenizer (service.engine.tokenizer.TextTokenizer)."""

    max_len: int

    @property
    def frame(self) -> Frame | None: ...


def max_tokens(k: int | None, tokenizer: Cuts, pair: bool = False, ids: bool = False,
               special: bool = True) -> int | None:
    """`truncate_prompt_tokens` as the length inputs are cut to (EmbedParams.max_tokens): None for
    null, -1 or the tokenizer's max_len (the cut at max_len), else k. Over max_len: 400, as vLLM.
    422: under the special tokens each input takes (its frame's, of a pair or of a text; at least
    one token), where the tokenizer puts special tokens inside a text (no frame), and with token
    ids (`ids`), which are used as they are. Texts read without special tokens (`special` false)
    take none. The frame is read only where k needs it."""
    field, max_len = "truncate_prompt_tokens", tokenizer.max_len
    if k is None or k in (-1, max_len):
        return None
    if k > max_len:
        raise InvalidRequest(f"truncate_prompt_tokens ({k}) is over this model's max_len ({max_len}); "
                             f"send -1 or at most {max_len}", field=field)
    if ids:
        raise Validation(f"truncate_prompt_tokens ({k}): token ids are used as they are, at most max_len "
                         f"({max_len}) of them; cut them yourself, or send -1 or null", field=field)
    if not special:
        least = 1
    elif (frame := tokenizer.frame) is None:
        raise Validation(f"truncate_prompt_tokens: this model's tokenizer puts special tokens within a text, so "
                         f"inputs are cut at max_len ({max_len}) only; send -1, {max_len} or null", field=field)
    else:
        least = max(frame.pair if pair else frame.single, 1)
    if k < least:
        what = ("pair" if pair else "input") + (" (its special tokens included)" if special else "")
        raise Validation(f"truncate_prompt_tokens ({k}) is under the {least} tokens this model needs for each "
                         f"{what}; send at least {least}", field=field)
    return k


def truncate(side: Side) -> Truncate:
    """`truncation_side` as EmbedParams' and ClassifyParams' `truncate`: "left" cuts at the start
    (a pair: longest text first, each at its start), as transformers' truncation_side="left"."""
    return LEFT if side == "left" else True


def check_priority(priority: int) -> None:
    """vLLM's `priority`: 0 only, as vLLM without priority scheduling answers."""
    if priority != 0:
        raise InvalidRequest("priority: there is no priority scheduling; send 0", field="priority")


def check_options(body: VllmBody) -> bool:
    """The priority asked for, checked; returns whether scores are activated (use_activation,
    or its older names, which must agree)."""
    check_priority(body.priority)
    flags = {name: v for name in ("use_activation", "activation", "softmax") if (v := getattr(body, name)) is not None}
    if len(set(flags.values())) > 1:
        raise Validation(f"{' and '.join(flags)} disagree; send use_activation alone", field="use_activation")
    return next(iter(flags.values()), True)


# -- answers -------------------------------------------------------------------------------------

def cosines(vectors: list[np.ndarray], inputs: ScoreInputs) -> list[float]:
    """vLLM's bi-encoder score: the cosine (float64) of pair i's embeddings, `vectors` being
    those of firsts then seconds, in that order."""
    n1, one = len(inputs.firsts), len(inputs.firsts) == 1
    out = []
    for i in range(len(inputs)):
        u = np.asarray(vectors[0 if one else i], dtype=np.float64)
        v = np.asarray(vectors[n1 + i], dtype=np.float64)
        out.append(cosine(u, v))  # float64, clamped to [-1, 1]; 0 for a zero vector
    return out


def usage(prompt_tokens: int) -> dict:
    """vLLM's UsageInfo as it writes it (model_dump: its null detail included)."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
            "prompt_tokens_details": None}


def envelope(kind: str, model: str, data: list, prompt_tokens: int) -> dict:
    return {"id": f"{kind}-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": usage(prompt_tokens)}


def score_data(scores: list[float]) -> list[dict]:
    return [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]


def classification_data(labels: list[str], scores: list[np.ndarray]) -> list[dict]:
    """One ClassificationData per input: every label's probability in id2label order, and the
    label of the highest (the first of equals)."""
    return [{"index": i, "label": labels[int(np.argmax(s))], "probs": [float(x) for x in s],
             "num_classes": len(labels)} for i, s in enumerate(scores)]


ENVELOPE_BYTES = 256  # id, object, created, usage and the keys around data
SCORE_ITEM_BYTES = 80  # {"index": ..., "object": "score", "score": ...} and its comma
VALUE_BYTES = 26  # a float as orjson writes it, and its comma


def score_bytes(n: int, model: str) -> int:
    """A bound of /score's answer as written: the envelope and n scores."""
    return ENVELOPE_BYTES + CHAR_BYTES * len(model) + n * SCORE_ITEM_BYTES


def classification_bytes(n: int, labels: list[str], model: str) -> int:
    """A bound of /classify's answer as written: per input its longest label and every probability."""
    item = 64 + CHAR_BYTES * max((len(x) for x in labels), default=0) + VALUE_BYTES * len(labels)
    return ENVELOPE_BYTES + CHAR_BYTES * len(model) + n * item


# /score: the engine's result (a ClassifyResult or an EmbedResult) and each pair's score
SCORE = Writer(lambda r, scores: score_bytes(len(scores), r.model),
               lambda r, scores: envelope("score", r.model, score_data(scores), r.n_tokens))
# /classify: a ClassifyResult
CLASSIFY = Writer(lambda r, _: classification_bytes(len(r.data), r.labels, r.model),
                  lambda r, _: envelope("classify", r.model, classification_data(r.labels, [c.scores for c in r.data]),
                                        r.n_tokens))
