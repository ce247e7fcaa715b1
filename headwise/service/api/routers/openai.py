"""POST /v1/embeddings, OpenAI-compatible: the `openai` client works unchanged against it.

The same inference as POST /v1/embed with its defaults (pooled, normalised, truncated at
max_len), so a float result equals /v1/embed's. Token-id inputs are used as they are, as TEI
and vLLM do: no special tokens added, 1..max_len ids each in the vocabulary (no truncation).
vLLM's `truncate_prompt_tokens` cuts texts shorter than max_len (service.api.compat.vllm.max_tokens).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import Json
from headwise.service.api.compat import openai as compat
from headwise.service.api.compat.openai import EmbeddingsRequest, EmbeddingsResponse, OpenAIError
from headwise.service.api.compat.vllm import check_priority, max_tokens, truncate
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.errors import OPENAI, route_class
from headwise.service.api.responses import answer
from headwise.service.engine import Engine, matryoshka, prompts
from headwise.service.engine.heads.embedding import token_ids
from headwise.service.engine.params import EmbedParams
from headwise.service.errors import InvalidRequest

router = APIRouter(tags=["openai"], route_class=route_class(OPENAI), dependencies=[Depends(require_api_key)])


@router.post("/v1/embeddings", response_model=EmbeddingsResponse,
             responses={c: {"model": OpenAIError} for c in (400, 401, 404, 413, 422, 429, 503)})
async def embeddings(request: Request, body: Json[EmbeddingsRequest],
                    engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Embeddings in OpenAI's shape, after the default prompt (HEADWISE_DEFAULT_PROMPT_NAME, else
    the model's; OpenAI's body names none); `dimensions` truncates and re-normalises, for a
    model with Matryoshka dimensions only (service.engine.matryoshka). vLLM's `normalize`,
    `embed_dtype` and `endianness` are served as vLLM serves them."""
    rt = model_for(request, engine, body.model)
    check_priority(body.priority)
    inputs = body.input
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    d = rt.package.embedding_dim
    if body.dimensions is not None and not 1 <= body.dimensions <= d:
        raise InvalidRequest(f"'dimensions' must be in 1..{d} for this model", field="dimensions")
    cut = matryoshka.check(rt.package, engine.settings, body.dimensions)
    k = max_tokens(body.truncate_prompt_tokens, rt.tokenizer, ids=token_ids(inputs), special=body.add_special_tokens)
    inputs = prompts.apply(inputs, prompts.default(rt.package, engine.settings.default_prompt_name))
    normalize = body.normalize is not False
    params = EmbedParams(normalize=normalize, truncate=truncate(body.truncation_side), max_tokens=k,
                         special_tokens=body.add_special_tokens)
    result = await engine.embed(rt, inputs, params, probe)
    return await answer(engine, compat.EMBEDDINGS, result, compat.Embeddings(
        cut, body.encoding_format == "base64", normalize, body.embed_dtype, body.endianness))
