"""vLLM's pooling routes: POST /score, /v1/score, /classify, /v1/classify, and its /detokenize
(docs/api.md, vLLM; its /tokenize body is served on TEI's /tokenize, routers/tei.py). Errors in
vLLM's (OpenAI's) shape; bodies and shaping in service.api.compat.vllm and vllm_tokens.

/score answers as vLLM does by the model's kind: a cross-encoder (a classification package with
one label) scores each pair itself (its sigmoid, as /v1/rerank's score); an embedding model
scores the cosine of the two texts' /v1/embed embeddings (vLLM's bi-encoder scoring), from one
Engine.embed call of every text. /classify is /v1/predict's inference on texts, in vLLM's shape.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import Json
from headwise.service.api.compat import vllm, vllm_tokens
from headwise.service.api.compat.openai import OpenAIError
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.errors import VLLM, WrongModelKind, route_class
from headwise.service.api.responses import answer
from headwise.service.engine import Capability, Engine, Runtime, prompts
from headwise.service.engine.classify import ClassifyParams
from headwise.service.engine.params import EmbedParams
from headwise.service.errors import NotFound, Validation

router = APIRouter(tags=["vllm"], route_class=route_class(VLLM), dependencies=[Depends(require_api_key)])
ERRORS = {c: {"model": OpenAIError} for c in (400, 401, 404, 413, 422, 429, 503)}


def _model(request: Request, engine: Engine, name: str | None) -> Runtime:
    """model_for, its refusals (unknown model, several served and none named) naming `model`."""
    try:
        return model_for(request, engine, name)
    except (NotFound, Validation) as e:
        e.field = e.field or "model"
        raise


@router.post("/score", response_model=vllm.VllmScoreResponse, responses=ERRORS)
@router.post("/v1/score", response_model=vllm.VllmScoreResponse, responses=ERRORS)
async def score(request: Request, body: Json[vllm.ScoreRequest],
                engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Score text pairs, one against many or pairwise: a cross-encoder's relevance, or the
    cosine of an embedding model's embeddings; `data[i]` is pair i's."""
    rt = _model(request, engine, body.model)
    Capability.RERANK.of(rt, "/score", also=(Capability.EMBED,), error=WrongModelKind, field="model")
    activated = vllm.check_options(body)
    cross = Capability.RERANK in rt.capabilities
    k = vllm.max_tokens(body.truncate_prompt_tokens, rt.tokenizer, pair=cross)
    inputs = vllm.score_inputs(body)
    s = engine.settings
    vllm.check_texts(inputs, s.max_input_chars, s.max_client_batch,
                     None if cross else len(inputs.firsts) + len(inputs.seconds))
    if cross:
        params = ClassifyParams(truncate=vllm.truncate(body.truncation_side), max_tokens=k, raw_scores=not activated)
        result = await engine.classify(rt, inputs.pairs(), params, probe)
        scores = [float(c.scores[0]) for c in result.data]
    else:  # the single first text is embedded once (vLLM's too); cosines ignore the activation (normalising)
        texts = prompts.apply(inputs.firsts + inputs.seconds, prompts.default(rt.package, s.default_prompt_name))
        result = await engine.embed(rt, texts, EmbedParams(truncate=vllm.truncate(body.truncation_side), max_tokens=k),
                                    probe)
        scores = vllm.cosines([e.sentence for e in result.data], inputs)
    return await answer(engine, vllm.SCORE, result, scores)


@router.post("/classify", response_model=vllm.VllmClassificationResponse, responses=ERRORS)
@router.post("/v1/classify", response_model=vllm.VllmClassificationResponse, responses=ERRORS)
async def classify(request: Request, body: Json[vllm.ClassifyRequest],
                   engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Classify texts: every label's probability (softmax; the sigmoid of a one-label model's
    logit, as /v1/predict), in id2label order, and the likeliest label."""
    rt = Capability.CLASSIFY.of(_model(request, engine, body.model), "/classify", error=WrongModelKind,
                                field="model")
    activated = vllm.check_options(body)
    k = vllm.max_tokens(body.truncate_prompt_tokens, rt.tokenizer, special=body.add_special_tokens)
    texts = [body.input] if isinstance(body.input, str) else body.input
    params = ClassifyParams(truncate=vllm.truncate(body.truncation_side), max_tokens=k, raw_scores=not activated,
                            special_tokens=body.add_special_tokens)
    result = await engine.classify(rt, texts, params, probe)
    return await answer(engine, vllm.CLASSIFY, result)


@router.post("/detokenize", response_model=vllm_tokens.VllmDetokenizeResponse, responses=ERRORS)
async def detokenize(request: Request, body: Json[vllm_tokens.VllmDetokenizeRequest],
                     engine: Engine = Depends(get_engine)):
    """Token ids back to text, special tokens kept (vLLM's /detokenize)."""
    rt = _model(request, engine, body.model)
    n = rt.tokenizer.vocab_size
    if (bad := next((j for j, t in enumerate(body.tokens) if not 0 <= t < n), None)) is not None:
        raise Validation(f"tokens[{bad}]: token ids must be in 0..{n - 1}", field="tokens")
    texts = await engine.decode(rt, [body.tokens], skip_special_tokens=False) if body.tokens else [""]
    return await answer(engine, vllm_tokens.DETOKENIZE, texts)
