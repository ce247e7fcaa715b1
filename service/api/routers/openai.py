"""POST /v1/embeddings, OpenAI-compatible: the `openai` client works unchanged against it.

The same inference as POST /v1/embed with its defaults (pooled, normalised, truncated at
max_len), so a float result equals /v1/embed's. Token-id inputs are used as they are, as TEI
and vLLM do: no special tokens added, 1..max_len ids each in the vocabulary (no truncation).
"""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request

from service.api.body import json_body
from service.api.compat.openapi import request_body
from service.api.compat.schemas import EmbeddingsRequest, EmbeddingsResponse, OpenAIError
from service.api.dependencies import checked_body, direct, disconnect_probe
from service.api.errors import OPENAI, route_class
from service.api.responses import json_response
from service.engine.params import EmbedParams
from service.errors import InvalidRequest

router = APIRouter(tags=["openai"], route_class=route_class(OPENAI))  # the API key: checked_body (a direct route: no Depends)
PARSE = json_body(EmbeddingsRequest)


def shorten(v: np.ndarray, n: int) -> np.ndarray:
    """First n dimensions, re-normalised (what OpenAI's `dimensions` does)."""
    if n >= len(v):
        return v
    w = np.asarray(v[:n], dtype=np.float64)
    return (w / max(np.linalg.norm(w), 1e-12)).astype(np.float32)


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, openapi_extra=request_body(EmbeddingsRequest),
             responses={c: {"model": OpenAIError} for c in (400, 401, 404, 413, 422, 429, 503)})
@direct
async def embeddings(request: Request):
    """Embeddings in OpenAI's shape; `dimensions` truncates and re-normalises."""
    body, engine = await checked_body(request, PARSE)
    rt = engine.get(body.model)
    request.state.model = rt.name
    inputs = body.input
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    if not inputs:
        raise InvalidRequest("'input' is empty", field="inputs")
    d = rt.package.d_model
    if body.dimensions is not None and not 1 <= body.dimensions <= d:
        raise InvalidRequest(f"'dimensions' must be in 1..{d} for this model", field="dimensions")
    encs, results = await engine.embed(rt, inputs, EmbedParams(), disconnect_probe(request))
    data, n_tokens = [], 0
    for i, (enc, (emb, _)) in enumerate(zip(encs, results, strict=True)):
        if body.dimensions is not None:
            emb = shorten(emb, body.dimensions)
        if body.encoding_format == "base64":
            emb = base64.b64encode(np.asarray(emb, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": i, "embedding": emb})
        n_tokens += enc.length
    return json_response({"object": "list", "data": data, "model": rt.name,
                          "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})
