"""text-embeddings-inference's routes (docs/api.md, TEI): `POST /embed`, `/embed_all`,
`/embed_sparse`, `/similarity`, `/rerank`, `/predict`, `/tokenize`, `/decode`, `GET /info`, `GET /health`, and
`POST /`, which answers by the body's shape and the model's kind as TEI's does; SageMaker's
`GET /ping` and `POST /invocations` are `/health` and `POST /`, as in TEI's SageMaker build.
The inference routes send TEI's timing headers (service.api.timing). TEI clients (huggingface_hub's
InferenceClient pointed at this server, LangChain's HuggingFaceEndpointEmbeddings, ...) work
unchanged; errors come in TEI's shape ({"error", "error_type"}).

TEI serves one model; here a body's `model` picks one of several, and without it the route
uses HEADWISE_DEFAULT_MODEL when that model can answer it, else the first served model, in
name order, that can.
"""

from __future__ import annotations

from typing import Annotated, overload

import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from headwise.service.api.body import Json, read_body
from headwise.service.api.compat import fill_pipeline, qa_pipeline, tei, token_pipeline, vllm_tokens
from headwise.service.api.compat.openapi import inline_schema
from headwise.service.api.compat.rerank import (
    JinaRerankRequest,
    JinaRerankResponse,
    fields_named,
    untag,
)
from headwise.service.api.dependencies import disconnect_probe, get_engine, require_api_key
from headwise.service.api.errors import TEI, Empty, WrongModelKind, route_class
from headwise.service.api.ranking import rank
from headwise.service.api.responses import answer, json_response
from headwise.service.api.routers.classify import jina_rerank, own_or_jina
from headwise.service.api.timing import characters, started_at, tei_headers
from headwise.service.engine import Capability, Engine, Runtime, matryoshka, prompts
from headwise.service.engine.classify import ClassifyParams
from headwise.service.engine.engine import TOKENIZER_THREADS
from headwise.service.engine.heads.extractive import ANSWER
from headwise.service.engine.heads.masked import FILL
from headwise.service.engine.heads.sparse import SPARSE, SparseParams
from headwise.service.engine.heads.tokens import TagParams
from headwise.service.engine.params import EmbedParams
from headwise.service.engine.runtime import R, Tagger
from headwise.service.errors import NotReady, Validation

router = APIRouter(tags=["tei"], route_class=route_class(TEI), dependencies=[Depends(require_api_key)])
probes = APIRouter(tags=["tei"], route_class=route_class(TEI))  # open, as /health/ready is
ERRORS = {c: {"model": tei.TeiError} for c in (400, 401, 404, 413, 422, 424, 429, 503)}

EMBEDDING, CLASSIFIER, RERANKER, GENERATOR = "embedding", "classifier", "reranker", "generator"
TAGGER = "token_classifier"  # no TEI type: headwise's, with a classifier's labels
# TEI's model types, read from the capabilities a model declares, first match (a model that
# reranks is a re-ranker, though it classifies too; a sparse encoder is an embedding model whose
# pooling is "splade", as TEI's)
KINDS = ((Capability.RERANK, RERANKER), (Capability.CLASSIFY, CLASSIFIER), (Capability.EMBED, EMBEDDING),
         (SPARSE, EMBEDDING), (Capability.TAG, TAGGER), (Capability.GENERATE, GENERATOR))


def kind(rt: Runtime) -> str:
    """TEI's model type for what the model declares; a kind TEI has no type for is named by
    its task (headwise's own)."""
    return next((k for cap, k in KINDS if cap in rt.capabilities), rt.package.task)


@overload
def pick(request: Request, engine: Engine, name: str | None, needs: None, route: str) -> Runtime: ...


@overload
def pick(request: Request, engine: Engine, name: str | None, needs: Capability[R], route: str) -> R: ...


def pick(request, engine, name, needs, route):
    """The model that answers, narrowed to `needs` (any model when None): `name`'s, else the
    default (HEADWISE_DEFAULT_MODEL) when it declares `needs`, else the first served that
    does, in name order."""
    if name is not None:
        rt = engine.get(name)
        if needs is not None:
            needs.of(rt, route, error=WrongModelKind)
    else:
        default = request.app.state.settings.default_model
        order = sorted(engine.models.values(), key=lambda r: (r.name != default, r.name))
        rt = next((r for r in order if needs is None or needs in r.capabilities), None)
        if rt is None:
            served = ", ".join(f"{r.name} ({kind(r)})" for r in order)
            raise WrongModelKind(f"no model served is {needs.need}: {route} has no model to answer it "
                                 f"(served: {served})")
    request.state.model = rt.name
    return rt


rerank_body = own_or_jina("TeiRerankBody", tei.RerankRequest)


def _schemas(*models: type[BaseModel]) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [inline_schema(m) for m in models]}}}}}


# -- the routes ------------------------------------------------------------------------------

@router.post("/embed", response_model=list[list[float]], responses=ERRORS)
async def embed(request: Request, body: Json[tei.EmbedRequest], engine: Engine = Depends(get_engine),
                probe=Depends(disconnect_probe), started: float = Depends(started_at)):
    """Pooled embeddings, one list per input (a single input too), as /v1/embed's."""
    rt, truncate = _embedding_model(request, engine, body, "/embed")
    inputs = _inputs(body.inputs)
    tei.check_dimensions(body.dimensions, rt.package.embedding_dim)
    cut = matryoshka.check(rt.package, engine.settings, body.dimensions)
    inputs = _prompted(engine, rt, inputs, body.prompt_name)
    result = await engine.embed(rt, inputs, EmbedParams(normalize=body.normalize, truncate=truncate), probe)
    return await answer(engine, tei.EMBED, result, tei.Cut(cut, body.normalize),
                        headers=tei_headers(rt, result, started, characters(inputs)))


@router.post("/embed_all", response_model=list[list[list[float]]], responses=ERRORS)
async def embed_all(request: Request, body: Json[tei.EmbedAllRequest], engine: Engine = Depends(get_engine),
                    probe=Depends(disconnect_probe), started: float = Depends(started_at)):
    """Every token's last hidden state, [T, d_model] per input, special tokens included."""
    rt, truncate = _embedding_model(request, engine, body, "/embed_all")
    params = EmbedParams(sentence=False, tokens=True, truncate=truncate)
    inputs = _prompted(engine, rt, _inputs(body.inputs), body.prompt_name)
    result = await engine.embed(rt, inputs, params, probe)
    return await answer(engine, tei.EMBED_ALL, result, headers=tei_headers(rt, result, started, characters(inputs)))


@router.post("/embed_sparse", response_model=list[list[tei.SparseValue]], responses=ERRORS)
async def embed_sparse(request: Request, body: Json[tei.EmbedAllRequest], engine: Engine = Depends(get_engine),
                       probe=Depends(disconnect_probe), started: float = Depends(started_at)):
    """A sparse encoder's (SPLADE's) non-zero weights over the vocabulary, per input, as /v1/embed_sparse's."""
    rt = pick(request, engine, body.model, SPARSE, "/embed_sparse")
    inputs = _prompted(engine, rt, _inputs(body.inputs), body.prompt_name)
    result = await engine.submit(rt, SPARSE, inputs, SparseParams(truncate=tei.truncation(body)), probe)
    return await answer(engine, tei.EMBED_SPARSE, result,
                        headers=tei_headers(rt, result, started, characters(inputs)))


@router.post("/similarity", response_model=list[float], responses=ERRORS)
async def similarity(request: Request, body: Json[tei.SimilarityRequest],
                     engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """The cosine of source_sentence's embedding with each sentence's: Engine.similarity, as
    /v1/similarity (/v1/embed's embeddings). In messages inputs[0] is source_sentence and
    inputs[i] sentences[i - 1]."""
    rt = pick(request, engine, body.model, Capability.EMBED, "/similarity")
    params = body.parameters or tei.SimilarityParameters()
    truncate = tei.truncation(params)
    if not body.inputs.sentences:
        raise Empty("'inputs.sentences' is empty", field="inputs.sentences")
    source, *sentences = _prompted(engine, rt, [body.inputs.source_sentence, *body.inputs.sentences],
                                   params.prompt_name)
    res = await engine.similarity(rt, source, sentences, False, truncate, 1, probe)
    return await answer(engine, tei.SIMILARITY, res)


@router.post("/rerank", response_model=list[tei.Rank] | JinaRerankResponse, response_model_exclude_none=True,
             responses=ERRORS)
async def rerank(request: Request, body: Annotated[tei.RerankRequest | JinaRerankRequest, Depends(rerank_body)],
                 engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe),
                 started: float = Depends(started_at)):
    """Each text's relevance to the query (a cross-encoder's sigmoid, or its logit with
    raw_scores), best first; `index` is the text's place in `texts`. Jina's body (`documents`
    instead of `texts`) is answered in Jina's shape, as /v1/rerank answers it."""
    rt = pick(request, engine, body.model, Capability.RERANK, "/rerank")
    if isinstance(body, JinaRerankRequest):
        if not body.documents:
            raise Empty("'documents' is empty", field="documents")
        return await jina_rerank(rt, body, engine, probe)
    truncate = tei.truncation(body)
    if not body.texts:
        raise Empty("'texts' is empty", field="texts")
    params = ClassifyParams(truncate=truncate, raw_scores=body.raw_scores)
    r = await rank(engine, rt, body.query, body.texts, params, probe, echo=body.texts if body.return_text else None,
                   top_n=None, envelope=0, item_bytes=0, too_large=tei.RERANK.advice, order=tei.order)
    chars = len(body.query) * len(body.texts) + characters(body.texts)
    return await answer(engine, tei.RERANK, r, body, headers=tei_headers(rt, r.result, started, chars))


@router.post("/predict", response_model=list[tei.Prediction] | list[list[tei.Prediction]],
             responses=ERRORS)
async def predict(request: Request, body: Json[tei.PredictRequest], engine: Engine = Depends(get_engine),
                  probe=Depends(disconnect_probe), started: float = Depends(started_at)):
    """Every label's score, best first: one list for a text or a pair, a list of lists for a batch."""
    rt = pick(request, engine, body.model, Capability.CLASSIFY, "/predict")
    truncate = tei.truncation(body)
    if body.inputs == []:
        raise Empty("'inputs' is empty", field="inputs")
    items, single = tei.predict_inputs(body.inputs)
    extra = body.parameters or tei.PredictParameters()
    how = extra.function_to_apply
    if body.raw_scores and how not in (None, "none"):
        raise Validation(f"raw_scores: true and parameters.function_to_apply {how!r} disagree",
                             field="raw_scores")
    raw = body.raw_scores or how is not None
    params = ClassifyParams(truncate=truncate, raw_scores=raw)
    result = await engine.classify(rt, items, params, probe)
    return await answer(engine, tei.PREDICT, result, tei.Predicted(how, extra.top_k, single),
                        headers=tei_headers(rt, result, started, characters(items)))


TOKENIZE_BODIES = _schemas(tei.TokenizeRequest, vllm_tokens.VllmTokenizeRequest)


@router.post("/tokenize", response_model=list[list[tei.SimpleToken]] | vllm_tokens.VllmTokenizeResponse,
             openapi_extra=TOKENIZE_BODIES, responses=ERRORS)
async def tokenize(request: Request, engine: Engine = Depends(get_engine)):
    """Every token of each text (not cut at max_len), with UTF-8 byte offsets into it; vLLM's
    body (`prompt`) is answered in vLLM's shape: the ids, their count, and the model's max_len."""
    body = await _json_object(request)
    if vllm_tokens.KEY in body:
        ask = _parse(vllm_tokens.VllmTokenizeRequest, body)
        rt = pick(request, engine, ask.model, None, "/tokenize")
        with fields_named({"inputs": "prompt"}):
            (enc,) = await engine.tokenize(rt, [ask.prompt], truncate=False, special_tokens=ask.add_special_tokens,
                                           whole=True)
        return await answer(engine, vllm_tokens.TOKENIZE, enc, vllm_tokens.Tokenized(rt.package.max_len,
                                                                                      ask.return_token_strs))
    body = _parse(tei.TokenizeRequest, body)
    rt = pick(request, engine, body.model, None, "/tokenize")
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    if not texts:
        raise Empty("'inputs' is empty", field="inputs")
    texts = _prompted(engine, rt, texts, body.prompt_name)  # TEI tokenises the prompted text too
    encs = await engine.tokenize(rt, texts, truncate=False, special_tokens=body.add_special_tokens, whole=True)
    return await answer(engine, tei.TOKENIZE, encs, tei.Tokenized(texts, rt.tokenizer.special_ids))


@router.post("/decode", response_model=list[str], responses=ERRORS)
async def decode(request: Request, body: Json[tei.DecodeRequest],
                 engine: Engine = Depends(get_engine)):
    """Token ids back to text, one string per list of ids."""
    rt = pick(request, engine, body.model, None, "/decode")
    seqs = [body.ids] if not body.ids or isinstance(body.ids[0], int) else body.ids
    if not seqs or any(not s for s in seqs):
        raise Empty("'ids' is empty", field="ids")
    texts = await engine.decode(rt, seqs, body.skip_special_tokens)
    return await answer(engine, tei.DECODE, texts)


@probes.get("/health", response_class=Response, responses={200: {"description": "healthy (no body)"}, 503: ERRORS[503]})
@probes.get("/ping", response_class=Response, responses={200: {"description": "healthy (no body)"}, 503: ERRORS[503]})
async def health(engine: Engine = Depends(get_engine)):
    """TEI's health probe (also SageMaker's GET /ping): 200 with no body when every model takes
    requests, else 503 in TEI's shape (`Unhealthy`); open without the API key, as
    /health/ready is."""
    try:
        engine.check_ready()
    except NotReady as e:
        return TEI.error(e)
    return Response(status_code=200)


@router.get("/info", response_model=tei.Info, responses={c: ERRORS[c] for c in (401, 404)})
async def info(request: Request, model: str | None = None, engine: Engine = Depends(get_engine)):
    """The model's and the server's facts, as TEI's /info; `?model=` picks one of several."""
    rt = pick(request, engine, model, None, "/info")
    s, k, card = engine.settings, kind(rt), rt.card()
    if k in (CLASSIFIER, RERANKER, TAGGER):
        names = card["labels"]
        model_type = {k: {"id2label": {str(i): n for i, n in enumerate(names)},
                          "label2id": {n: i for i, n in enumerate(names)}}}
    else:
        model_type = {k: {"pooling": card["pooling"]} if k == EMBEDDING else {}}
    precision = card["precision"] or next(iter(rt.package.variants.values())).precision
    return json_response({
        "model_id": rt.name, "model_sha": None,
        "model_dtype": {"fp32": "float32", "fp16": "float16"}.get(precision, precision),
        "served_model_name": rt.name, "model_type": model_type,
        "max_concurrent_requests": s.max_queue, "max_input_length": rt.package.max_len,
        "max_batch_tokens": rt.max_batch_tokens, "max_batch_requests": s.max_batch_size,
        "max_client_batch_size": s.max_client_batch, "auto_truncate": True,
        "tokenization_workers": TOKENIZER_THREADS, "version": request.app.version, "sha": None,
        "docker_label": None,
    })


ROOT_BODIES = _schemas(tei.EmbedRequest, tei.SimilarityRequest, tei.PredictRequest, tei.RerankRequest,
                       JinaRerankRequest, token_pipeline.TokenClassificationRequest,
                       qa_pipeline.QuestionAnsweringRequest, fill_pipeline.FillMaskRequest)


@router.post("/", response_model=list | JinaRerankResponse, openapi_extra=ROOT_BODIES, responses=ERRORS)
@router.post("/invocations", response_model=list | JinaRerankResponse, openapi_extra=ROOT_BODIES, responses=ERRORS)
async def root(request: Request, engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe),
               started: float = Depends(started_at)):
    """TEI's `POST /` (also SageMaker's POST /invocations): {query, texts} (or Jina's {query,
    documents}) is /rerank and inputs
    {source_sentence, sentences} is /similarity, inputs {question, context} transformers'
    question-answering pipeline; otherwise the model's kind decides: /embed for an embedding model, /predict
    for a classifier or re-ranker, transformers' token-classification pipeline for a tagger
    (also chosen by its parameters: aggregation_strategy, ignore_labels, stride), its fill-mask
    pipeline for a masked language model. The model is the named one, else the default; but text
    inputs with `parameters` (huggingface_hub's text_classification; /embed has no such field)
    go to /predict when a classification model is served."""
    body = await _json_object(request)
    name = body.get("model") if isinstance(body.get("model"), str) else None
    if "query" in body or "texts" in body or "documents" in body:
        return await rerank(request, _parse(rerank_body.body_model, body).root, engine, probe, started)
    if isinstance(body.get("inputs"), dict) and "question" in body["inputs"]:
        return await question_answering(request, _parse(qa_pipeline.QuestionAnsweringRequest, body), engine, probe)
    if isinstance(body.get("inputs"), dict):
        return await similarity(request, _parse(tei.SimilarityRequest, body), engine, probe)
    classifies = any(Capability.CLASSIFY in r.capabilities for r in engine.models.values())
    tokens = isinstance(body.get("parameters"), dict) and TOKEN_PARAMETERS & body["parameters"].keys()
    if name is None and "parameters" in body and classifies and not tokens:
        return await predict(request, _parse(tei.PredictRequest, body), engine, probe, started)
    rt = pick(request, engine, name, Capability.TAG if tokens else None, "/")
    if FILL.declared(rt):
        return await fill_mask(_parse(fill_pipeline.FillMaskRequest, body), rt, engine, probe)
    if tagger := Capability.TAG.declared(rt):
        return await token_classification(_parse(token_pipeline.TokenClassificationRequest, body), tagger, engine,
                                          probe)
    if Capability.EMBED in rt.capabilities:
        return await embed(request, _parse(tei.EmbedRequest, body), engine, probe, started)
    Capability.CLASSIFY.of(rt, "POST /", also=(Capability.EMBED, Capability.TAG), error=WrongModelKind)
    return await predict(request, _parse(tei.PredictRequest, body), engine, probe, started)


TOKEN_PARAMETERS = frozenset(token_pipeline.TokenClassificationParameters.model_fields)


async def question_answering(request: Request, body: qa_pipeline.QuestionAnsweringRequest, engine: Engine,
                             probe) -> Response:
    """POST / with {question, context} inputs: transformers' question-answering pipeline's answer
    (Hugging Face Inference Endpoints', huggingface_hub's InferenceClient.question_answering)."""
    rt = pick(request, engine, body.model, ANSWER, "/")
    result = await engine.answer(rt, [(body.inputs.question, body.inputs.context)],
                                 qa_pipeline.params(body, rt.package.max_len), probe)
    return await answer(engine, qa_pipeline.ANSWERS, result, body)


async def fill_mask(body: fill_pipeline.FillMaskRequest, rt: Runtime, engine: Engine, probe) -> Response:
    """POST / on a masked language model: transformers' fill-mask pipeline's answer (Hugging Face
    Inference Endpoints', huggingface_hub's InferenceClient.fill_mask)."""
    result = await engine.submit(rt, FILL, [body.inputs], fill_pipeline.params(body, rt.tokenizer), probe)
    return await answer(engine, fill_pipeline.FILLS, result, body)


async def token_classification(body: token_pipeline.TokenClassificationRequest, rt: Tagger, engine: Engine,
                               probe) -> Response:
    """POST / on a tagger: transformers' token-classification pipeline's answer (Hugging Face
    Inference Endpoints', huggingface_hub's InferenceClient.token_classification)."""
    strategy, ignore = token_pipeline.options(body)
    result = await engine.tag(rt, [body.inputs], TagParams(), probe)
    asked = token_pipeline.Pipeline(body.inputs, strategy, ignore, rt.tokenizer)
    return await answer(engine, token_pipeline.ENTITIES, result, asked)


# -- helpers -----------------------------------------------------------------------------------

def _embedding_model(request: Request, engine: Engine, body, route: str) -> tuple[Runtime, bool]:
    """/embed's and /embed_all's model, and whether to truncate."""
    rt = pick(request, engine, body.model, Capability.EMBED, route)
    return rt, tei.truncation(body)


def _prompted(engine: Engine, rt: Runtime, texts: list, name: str | None) -> list:
    """The texts after the prompt `prompt_name` names, else the default (service.engine.prompts)."""
    prompt = prompts.resolve(rt.package, engine.settings.default_prompt_name, name)
    return prompts.apply(texts, prompt, explicit=name is not None)


def _inputs(inputs) -> list:
    if not inputs:
        raise Empty("'inputs' is empty", field="inputs")
    return tei.embed_inputs(inputs)


async def _json_object(request: Request) -> dict:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await read_body(request)
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RequestValidationError([{"loc": ("body",), "msg": "malformed JSON", "type": "json_invalid"}]) from None
        if isinstance(body, dict):
            return body
    raise RequestValidationError([{"loc": ("body",), "msg": "not a JSON object", "type": "model_type"}])


def _parse(model: type[BaseModel], body: dict):
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(untag(e.errors(include_input=False, include_url=False))) from None
