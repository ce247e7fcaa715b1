"""Answers → results: pure functions from a route's decoded JSON to the client's dataclasses,
shared by Client and AsyncClient; and the decoder of /v1/generate's Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from headwise.client.arrays import decode_array, decode_block, decode_hidden_states
from headwise.client.errors import HeadwiseError, error_from_body, error_from_response
from headwise.client.heads import (
    Answer,
    AnswerItem,
    AnswerResult,
    Entity,
    Fill,
    FillItem,
    FillMaskResult,
    Mask,
    SparseItem,
    SparseResult,
    TaggedText,
    TaggedToken,
    TagResult,
)
from headwise.client.types import (
    Attention,
    EmbedItem,
    EmbedResult,
    GenerateAttention,
    GenerateHidden,
    GenerateResult,
    GenerateStep,
    GenerateToken,
    HeadImportanceResult,
    Label,
    ModelInfo,
    OcclusionResult,
    OcclusionUnit,
    PredictResult,
    RerankAttention,
    RerankItem,
    RerankResult,
    SimilarityItem,
    SimilarityResult,
    TokenizeItem,
    TokenizeResult,
    TokenPair,
    Tokens,
    Usage,
)


def read_answer(status: int, content: bytes, headers: Mapping[str, str]) -> Any:
    """The JSON of a 2xx answer; HeadwiseError for any other (a redirect, which this client does
    not follow, too), and for a 2xx whose body is not JSON."""
    if not 200 <= status < 300:
        raise error_from_response(status, content, headers)
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise HeadwiseError(status, "invalid_response", f"an answer that is not JSON: {content[:200]!r}") from None


def _usage(u: Mapping[str, Any] | None) -> Usage:
    u = u or {}
    return Usage(int(u.get("prompt_tokens", 0)), int(u.get("total_tokens", 0)), u.get("completion_tokens"))


def _offsets(offsets: list[Any]) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in offsets]


def _tokens(t: Mapping[str, Any]) -> Tokens:
    return Tokens(list(t["tokens"]), _offsets(t["offsets"]), t.get("positions"))


def attention(a: Mapping[str, Any]) -> Attention:
    """/v1/embed's `data[].attention` (docs/api.md: dense or top-k, any aggregate)."""
    block = decode_block(a, a["dtype"], a["encoding"], a["format"])
    return Attention(shape=block.shape, format=block.format, values=block.values, indices=block.indices,
                     layers=list(a["layers"]), heads=list(a["heads"]), aggregate=a.get("aggregate", "none"),
                     dtype=a["dtype"], encoding=a["encoding"])


def embed(d: Mapping[str, Any]) -> EmbedResult:
    items = []
    for x in d["data"]:
        att, hidden = x.get("attention"), x.get("hidden_states")
        items.append(EmbedItem(
            index=x["index"], embedding=np.asarray(x["embedding"], dtype=np.float32),
            tokens=list(x["tokens"]), offsets=_offsets(x["offsets"]),
            attention=attention(att) if att is not None else None,
            hidden_states=decode_hidden_states(hidden) if hidden is not None else None))
    return EmbedResult(d["model"], items, _usage(d.get("usage")), raw=dict(d))


def tokenize(d: Mapping[str, Any]) -> TokenizeResult:
    items = [TokenizeItem(x["index"], list(x["tokens"]), list(x["ids"]), _offsets(x["offsets"])) for x in d["data"]]
    return TokenizeResult(d["model"], items, _usage(d.get("usage")), raw=dict(d))


def similarity(d: Mapping[str, Any]) -> SimilarityResult:
    items = []
    for x in d["data"]:
        contrib = x.get("contributions")
        items.append(SimilarityItem(
            index=x["index"], score=float(x["score"]), tokens=x.get("tokens"),
            offsets=_offsets(x["offsets"]) if "offsets" in x else None,
            contributions=np.asarray(contrib, dtype=np.float32) if contrib is not None else None,
            top_pairs=[TokenPair(int(p["source"]), int(p["target"]), float(p["value"])) for p in x["top_pairs"]]
            if "top_pairs" in x else None))
    source = _tokens(d["source"]) if d.get("source") else None
    return SimilarityResult(d["model"], items, _usage(d.get("usage")), source, raw=dict(d))


def occlusion(d: Mapping[str, Any]) -> OcclusionResult:
    """unit token: `effects`, one per token; unit word or `spans`: `unit` and `units`, whose
    effects become `effects` ([U])."""
    units = None
    if d.get("units") is not None:
        units = [OcclusionUnit(str(u["text"]), int(u["start"]), int(u["end"]), [int(i) for i in u["tokens"]],
                               float(u["effect"])) for u in d["units"]]
        effects = np.array([u.effect for u in units], dtype=np.float64)
    else:
        effects = np.asarray(d["effects"], dtype=np.float64)
    return OcclusionResult(d["model"], list(d["tokens"]), _offsets(d["offsets"]), effects, int(d["forward_passes"]),
                           _usage(d.get("usage")), d.get("unit"), units, raw=dict(d))


def _rerank_attention(a: Mapping[str, Any]) -> RerankAttention:
    fmt, dtype, enc = a["format"], a["dtype"], a["encoding"]
    return RerankAttention(
        layers=list(a["layers"]), heads=list(a["heads"]), format=fmt, dtype=dtype, encoding=enc,
        query=_tokens(a["query"]), document=_tokens(a["document"]),
        query_to_document=decode_block(a["query_to_document"], dtype, enc, fmt),
        document_to_query=decode_block(a["document_to_query"], dtype, enc, fmt))


def rerank(d: Mapping[str, Any]) -> RerankResult:
    results = [RerankItem(x["index"], float(x["score"]), x.get("text"),
                          _rerank_attention(x["attention"]) if x.get("attention") else None)
               for x in d["results"]]
    return RerankResult(d["model"], results, _usage(d.get("usage")), raw=dict(d))


def predict(d: Mapping[str, Any]) -> PredictResult:
    data = [[Label(str(x["label"]), float(x["score"])) for x in labels] for labels in d["data"]]
    return PredictResult(d["model"], data, _usage(d.get("usage")), raw=dict(d))


def _tagged(i: int, x: Mapping[str, Any]) -> TaggedText:
    tokens = [TaggedToken(t["index"], t["token"], t["start"], t["end"], t["label"], float(t["score"]),
                          t.get("scores")) for t in x["tokens"]] if "tokens" in x else None
    entities = [Entity(e["entity_group"], float(e["score"]), e["word"], e["start"], e["end"])
                for e in x["entities"]] if "entities" in x else None
    att = x.get("attention")
    return TaggedText(x.get("index", i), tokens, entities, attention(att) if att is not None else None)


def tag(d: Mapping[str, Any]) -> TagResult:
    return TagResult(d["model"], list(d["labels"]), [_tagged(i, x) for i, x in enumerate(d["data"])],
                     _usage(d.get("usage")), raw=dict(d))


def answer(d: Mapping[str, Any]) -> AnswerResult:
    items = [AnswerItem(x.get("index", i), [Answer(a["answer"], float(a["score"]), a["start"], a["end"])
                                            for a in x["answers"]],
                        attention(x["attention"]) if x.get("attention") is not None else None)
             for i, x in enumerate(d["data"])]
    return AnswerResult(d["model"], items, _usage(d.get("usage")), raw=dict(d))


def fill_mask(d: Mapping[str, Any]) -> FillMaskResult:
    items = [FillItem(x.get("index", i),
                      [Mask(m["position"], [Fill(float(f["score"]), f["token"], f["token_str"], f["sequence"])
                                            for f in m["fills"]]) for m in x["masks"]],
                      attention(x["attention"]) if x.get("attention") is not None else None)
             for i, x in enumerate(d["data"])]
    return FillMaskResult(d["model"], items, _usage(d.get("usage")), raw=dict(d))


def embed_sparse(d: Mapping[str, Any]) -> SparseResult:
    items = [SparseItem(x.get("index", i), np.asarray(x["indices"], np.int64), np.asarray(x["values"], np.float32),
                        x.get("tokens"), attention(x["attention"]) if x.get("attention") is not None else None)
             for i, x in enumerate(d["data"])]
    return SparseResult(d["model"], items, _usage(d.get("usage")), raw=dict(d))


def _step(s: Mapping[str, Any], dtype: str, encoding: str) -> GenerateStep:
    def one(key: str) -> np.ndarray | None:
        a = s.get(key)
        return decode_array(a["data"], a["shape"], dtype, encoding) if a is not None else None

    return GenerateStep(self_attention=one("self_attention"), cross_attention=one("cross_attention"))


def generate(d: Mapping[str, Any]) -> GenerateResult:
    given = d.get("prompt") or d.get("source") or {}
    att = None
    if (a := d.get("attention")) is not None:
        dtype, enc = a.get("dtype", "float32"), a.get("encoding", "json")
        prompt = a.get("prompt")
        att = GenerateAttention(
            layers=list(a["layers"]), heads=list(a["heads"]), dtype=dtype, encoding=enc,
            prompt=decode_array(prompt["data"], prompt["shape"], dtype, enc) if prompt else None,
            steps=[_step(s, dtype, enc) for s in a.get("steps", [])])
    hidden = None
    if (h := d.get("hidden_states")) is not None:
        dtype, enc = h.get("dtype", "float32"), h.get("encoding", "json")
        prompt = h.get("prompt")
        hidden = GenerateHidden(
            layers=list(h["layers"]), pooling=h.get("pooling", "none"), dtype=dtype,
            prompt=decode_array(prompt["data"], prompt["shape"], dtype, enc) if prompt else None,
            steps=[decode_array(s["data"], s["shape"], dtype, enc) for s in h.get("steps", [])])
    return GenerateResult(
        model=d["model"], text=d["text"], tokens=list(d["tokens"]), ids=list(d["ids"]),
        finish_reason=d["finish_reason"], usage=_usage(d.get("usage")),
        input_tokens=list(given.get("tokens", [])), input_ids=list(given.get("ids", [])),
        attention=att, hidden_states=hidden, raw=dict(d))


class GenerateStream:
    """Server-Sent Events of /v1/generate → GenerateToken per token, then the GenerateResult.
    An error event raises HeadwiseError. Token events carry no dtype or encoding: those of the
    request are given."""

    def __init__(self, dtype: str = "float32", encoding: str = "json",
                 hidden: tuple[str, str] = ("float32", "json")) -> None:
        self.dtype, self.encoding = dtype, encoding  # the attention's
        self.hidden = hidden  # the hidden states' dtype and encoding
        self.done = False
        self._data: list[str] = []

    def feed(self, line: str) -> GenerateToken | GenerateResult | None:
        """One line of the stream (without its line break); an event when the line ends one."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):  # an SSE comment
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def close(self) -> GenerateToken | GenerateResult | None:
        """The end of the stream: its last event, if unterminated; an error if no [DONE] came."""
        ev = self._dispatch()
        if not self.done:
            raise HeadwiseError(200, "incomplete_stream", "the event stream ended before data: [DONE]")
        return ev

    def _dispatch(self) -> GenerateToken | GenerateResult | None:
        if not self._data:
            return None
        text, self._data = "\n".join(self._data), []
        if text == "[DONE]":
            self.done = True
            return None
        try:
            ev = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's recursion limit
            raise HeadwiseError(200, "invalid_stream", f"an event that is not a JSON object: {text[:200]}") from None
        if not isinstance(ev, Mapping):
            raise HeadwiseError(200, "invalid_stream", f"an event that is not a JSON object: {text[:200]}")
        if "error" in ev:
            err = ev["error"]
            code = err.get("code") if isinstance(err, Mapping) else None
            status = code if type(code) is int and 400 <= code <= 599 else 500
            try:
                raise error_from_body(status, ev)
            except RecursionError:
                raise HeadwiseError(status, "http_error", text[:2000]) from None
        if "finish_reason" in ev:
            return generate(ev)
        step, hidden = ev.get("attention"), ev.get("hidden_states")
        return GenerateToken(int(ev["index"]), ev["token"], int(ev["id"]), ev["text"],
                             _step(step, self.dtype, self.encoding) if step is not None else None,
                             decode_array(hidden["data"], hidden["shape"], *self.hidden) if hidden is not None else None)


def head_importance(d: Mapping[str, Any]) -> HeadImportanceResult:
    """POST /v1/head_importance's answer: `importance` [n_layers, n_heads] as float64, `top`
    as (layer, head, effect) tuples."""
    m = np.asarray(d["importance"], dtype=np.float64).reshape(d["shape"])
    top = [(int(x["layer"]), int(x["head"]), float(x["effect"])) for x in d.get("top", [])]
    return HeadImportanceResult(d.get("model"), m, measure=d.get("measure"), baseline=d.get("baseline"), top=top,
                                tokens=list(d.get("tokens", [])), raw=dict(d))


def model_info(c: Mapping[str, Any]) -> ModelInfo:
    return ModelInfo(
        id=c["id"], name=c.get("name", c["id"]), task=c.get("task"), architecture=c.get("architecture"),
        n_layers=c.get("n_layers"), n_heads=c.get("n_heads"), d_model=c.get("d_model"), max_len=c.get("max_len"),
        attention=bool(c.get("attention")), ready=bool(c.get("ready")), raw=dict(c))


def models(d: Mapping[str, Any]) -> list[ModelInfo]:
    return [model_info(c) for c in d["data"]]
