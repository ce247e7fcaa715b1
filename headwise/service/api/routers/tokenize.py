"""POST /v1/tokenize: tokens, ids and character offsets, as the model sees the text."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import Json
from headwise.service.api.dependencies import get_engine, model_for, require_api_key
from headwise.service.api.responses import json_response
from headwise.service.api.schemas import TokenizeRequest, TokenizeResponse, error_responses
from headwise.service.engine import Engine

router = APIRouter(tags=["tokenize"], dependencies=[Depends(require_api_key)])


@router.post("/v1/tokenize", response_model=TokenizeResponse,
             responses=error_responses(400, 401, 404, 413, 422, 503))
async def tokenize(request: Request, body: Json[TokenizeRequest],
                   engine: Engine = Depends(get_engine)):
    rt = model_for(request, engine, body.model)
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    encs = await engine.tokenize(rt, texts, body.truncate)
    n = sum(e.length for e in encs)
    return json_response({
        "model": rt.name,
        "data": [{"index": i, "tokens": e.tokens, "ids": e.ids, "offsets": e.offsets}
                 for i, e in enumerate(encs)],
        "usage": {"prompt_tokens": n, "total_tokens": n},
    })
