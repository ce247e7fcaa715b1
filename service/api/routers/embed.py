"""POST /v1/embed: sentence or token embeddings, optionally with per-head attention."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.body import json_body, openapi_body
from service.api.dependencies import checked_body, direct, disconnect_probe
from service.api.responses import budgeted_json
from service.api.schemas import EmbedRequest, EmbedResponse, error_responses
from service.engine.params import EmbedParams, response_bytes

router = APIRouter(tags=["embed"])  # the API key: checked_body (a direct route: no Depends)

PARSE = json_body(EmbedRequest)


@router.post("/v1/embed", response_model=EmbedResponse, openapi_extra=openapi_body(EmbedRequest),
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
@direct
async def embed(request: Request):
    """Embed one text or a list; with `attention`, also return every asked-for head's weights,
    un-padded to each input's own token count."""
    body, engine = await checked_body(request, PARSE)
    rt = engine.get(body.model)
    request.state.model = rt.name
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    spec = None
    if body.attention is not None:
        a = body.attention
        spec = rt.attention_spec(a.layers, a.heads, a.format, a.top_k, a.dtype, a.encoding)
    params = EmbedParams(output=body.output, normalize=body.normalize, truncate=body.truncate, attention=spec)
    encs, results = await engine.embed(rt, texts, params, disconnect_probe(request))

    def build() -> dict:
        data = []
        for i, (enc, (emb, att)) in enumerate(zip(encs, results, strict=True)):
            item = {"index": i, "embedding": emb, "tokens": enc.tokens, "offsets": enc.offsets}
            if att is not None:
                item["attention"] = att
            data.append(item)
        n_tokens = sum(e.length for e in encs)
        return {"model": rt.name, "data": data, "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}

    size = sum(response_bytes(params, e.length, rt.package.d_model) for e in encs)
    return await budgeted_json(engine.responses, size, build)
