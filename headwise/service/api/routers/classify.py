"""POST /v1/rerank and /v1/predict: classification packages (cross-encoders, classifiers),
in the native API's shape (docs/api.md). One Engine.rerank or Engine.classify call each.
/v1/rerank also takes Jina's body (`documents`) and answers it in Jina's shape
(service.api.compat.rerank); its errors stay the native API's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api import native
from headwise.service.api.body import Json, json_body
from headwise.service.api.compat import rerank as compat
from headwise.service.api.compat.vllm import max_tokens, truncate
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.ranking import rank
from headwise.service.api.responses import answer
from headwise.service.api.schemas import Ablate, AttentionOptions, Usage, ablation, error_responses
from headwise.service.api.sizes import ENVELOPE_BYTES
from headwise.service.engine import Engine
from headwise.service.engine.classify import ClassifyParams
from headwise.service.engine.runtime import Runtime
from headwise.service.errors import Validation

router = APIRouter(tags=["classify"], dependencies=[Depends(require_api_key)])


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "What is the capital of France?",
         "texts": ["Paris is the capital of France.", "Berlin is in Germany."]},
        {"query": "capital of France", "texts": ["Paris is the capital of France."], "return_text": True,
         "top_n": 1, "attention": {"layers": [0], "heads": [0, 1], "dtype": "float16", "encoding": "base64"}},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    query: StrictStr = Field(..., description="the query, the first text of every pair")
    texts: list[StrictStr] = Field(..., description="the documents to score against the query")
    raw_scores: StrictBool = Field(False, description="the logit as it is; false: its sigmoid")
    return_text: StrictBool = Field(False, description="echo each document's text in its result")
    truncate: StrictBool = Field(True, description="cut each pair at max_len (longest text first); false: 422 "
                                                   "when longer")
    top_n: StrictInt | None = Field(None, ge=1, description="return only the n best results")
    attention: AttentionOptions | None = Field(
        None, description="per result, the attention between the query's and the document's tokens")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: score with those heads removed')


def own_or_jina(name: str, own: type[BaseModel]):
    """A body dependency for a rerank route that takes its `own` body (`texts`) or Jina's
    (`documents`): compat.keyed_body parsed by body.json_body, its errors as the chosen model's
    alone; documented (service.api.app) as the union `name`."""
    model = compat.keyed_body(name, own)
    parse = json_body(model)

    async def either(request: Request):
        try:
            return (await parse(request)).root
        except RequestValidationError as e:
            raise RequestValidationError(compat.untag(e.errors())) from None

    either.body_model = model
    return either


rerank_body = own_or_jina("RerankBody", RerankRequest)
RerankBody = rerank_body.body_model


class RerankResult(BaseModel):
    index: int
    score: float
    text: str | None = None
    attention: dict | None = None


class RerankResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "ms-marco-minilm", "results": [{"index": 0, "score": 0.998}, {"index": 1, "score": 0.0003}],
        "usage": {"prompt_tokens": 31, "total_tokens": 31}}]})

    model: str
    results: list[RerankResult]
    usage: Usage


PredictItem = StrictStr | list[StrictStr]


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "I loved this film."},
        {"inputs": ["A man is eating.", "Someone eats."]},
        {"inputs": [["A man is eating.", "Someone eats."], "I loved this film.", ["One text"]],
         "raw_scores": True},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: StrictStr | list[PredictItem] = Field(
        ..., description="a text; a pair [a, b] (a list of exactly two texts is one pair); or a list whose "
                         "items are texts, pairs [a, b] or [text]")
    raw_scores: StrictBool = Field(False, description="logits as they are; false: softmax (sigmoid for one label)")
    truncate: StrictBool = Field(True, description="cut at max_len; false: 422 when longer")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: answer with those heads removed')


class Prediction(BaseModel):
    label: str
    score: float


class PredictResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "tiny-sentiment",
        "data": [[{"label": "positive", "score": 0.97}, {"label": "neutral", "score": 0.02},
                  {"label": "negative", "score": 0.01}]],
        "usage": {"prompt_tokens": 8, "total_tokens": 8}}]})

    model: str
    data: list[list[Prediction]]
    usage: Usage


def _spec(rt: Runtime, a: AttentionOptions | None):
    if a is None:
        return None
    if a.aggregate != "none":  # the blocks are between two texts; no rollout or mean of them yet
        raise Validation("attention.aggregate is for /v1/embed; /v1/rerank returns the query↔document blocks "
                         "per layer and head (aggregate: none)", field="attention")
    return a.spec(rt)


@router.post("/v1/rerank", response_model=RerankResponse | compat.JinaRerankResponse,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def rerank(request: Request, body: Annotated[RerankRequest | compat.JinaRerankRequest, Depends(rerank_body)],
                 engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Score every text against the query with a cross-encoder; results sorted by score, best
    first; with `attention`, each result's query↔document attention blocks. Jina's body
    (`documents` instead of `texts`) is answered in Jina's shape."""
    rt = model_for(request, engine, body.model)
    if isinstance(body, compat.JinaRerankRequest):
        return await jina_rerank(rt, body, engine, probe)
    params = ClassifyParams(truncate=body.truncate, raw_scores=body.raw_scores, attention=_spec(rt, body.attention),
                            ablate=ablation(rt, body.ablate))
    r = await rank(engine, rt, body.query, body.texts, params, probe, echo=body.texts if body.return_text else None,
                   top_n=body.top_n, envelope=ENVELOPE_BYTES, item_bytes=0, too_large=native.RERANK.advice)
    return await answer(engine, native.RERANK, r, body)


async def jina_rerank(rt: Runtime, body: compat.JinaRerankRequest, engine: Engine, probe):
    """Jina's body (on /v1/rerank and TEI's /rerank): the same engine call and scores as the
    route's own body, answered in Jina's shape."""
    texts, echo = compat.document_texts(body.documents), body.return_documents
    k = max_tokens(body.truncate_prompt_tokens, rt.tokenizer, pair=True)
    with compat.fields_named({"texts": "documents"}):
        params = ClassifyParams(truncate=truncate(body.truncation_side), max_tokens=k)
        r = await rank(engine, rt, body.query, texts, params, probe, echo=texts if echo else None,
                       top_n=body.top_n or None, envelope=ENVELOPE_BYTES + compat.ID_BYTES,
                       item_bytes=compat.ITEM_BYTES,
                       too_large=compat.JINA_RERANK.advice)
    return await answer(engine, compat.JINA_RERANK, r, texts if echo else None)


@router.post("/v1/predict", response_model=PredictResponse,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def predict(request: Request, body: Json[PredictRequest],
                  engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Classify texts and pairs: per input every label with its score, best first."""
    rt = model_for(request, engine, body.model)
    params = ClassifyParams(truncate=body.truncate, raw_scores=body.raw_scores, ablate=ablation(rt, body.ablate))
    result = await engine.classify(rt, predict_inputs(body.inputs), params, probe)
    return await answer(engine, native.PREDICT, result)


def predict_inputs(inputs) -> list:
    """As TEI reads `inputs`: a text; a list of exactly two texts is one pair; any other list is
    a batch whose items are texts, [a, b] pairs or [text]. A list of another length is left for
    the engine to refuse."""
    if isinstance(inputs, str):
        return [inputs]
    if len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        return [tuple(inputs)]
    return [x if isinstance(x, str) else x[0] if len(x) == 1 else tuple(x) for x in inputs]
