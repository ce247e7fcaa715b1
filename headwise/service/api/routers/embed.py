"""POST /v1/embed: sentence or token embeddings, optionally with per-head attention."""

from __future__ import annotations

import time
from dataclasses import replace

from fastapi import APIRouter, Depends, Request

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer
from headwise.service.api.schemas import EmbedRequest, EmbedResponse, ablation, error_responses
from headwise.service.api.timing import characters, tei_headers
from headwise.service.engine import Engine, prompts
from headwise.service.engine.internals import HiddenSpec
from headwise.service.engine.params import EmbedParams

router = APIRouter(tags=["embed"], dependencies=[Depends(require_api_key)])


@router.post("/v1/embed", response_model=EmbedResponse,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def embed(request: Request, body: Json[EmbedRequest], engine: Engine = Depends(get_engine),
                probe=Depends(disconnect_probe)):
    """Embed one text or a list (after the prompt, `prompt_name` or the default); with `attention`, also return every asked-for head's weights,
    un-padded to each input's own token count; with `hidden_states`, chosen layers' outputs;
    with `ablate`, the answer with those heads removed. TEI's timing headers come with it."""
    # TEI's total time from here: where a `started_at` dependency, solved after the body's,
    # would read the clock, without the dependency's call per request (issue 37)
    started = time.perf_counter()
    rt = model_for(request, engine, body.model)
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    prompt = prompts.resolve(rt.package, engine.settings.default_prompt_name, body.prompt_name)
    texts = prompts.apply(texts, prompt)
    spec = body.attention.spec(rt) if body.attention is not None else None
    tokens = body.output == "tokens"
    params = EmbedParams(sentence=not tokens, tokens=tokens, normalize=body.normalize, truncate=body.truncate,
                         attention=spec, token_strings=True)
    if body.hidden_states is not None or body.ablate is not None:  # a plain request selects nothing
        params = replace(params, **internals(rt, body))
    result = await engine.embed(rt, texts, params, probe)

    used = prompts.payload(prompt)
    asked = native.Embedding(tokens, prompt, used, rt.tokenizer.special_ids if used else native.NO_IDS)
    return await answer(engine, native.EMBED, result, asked, headers=tei_headers(rt, result, started, characters(texts)))


def internals(rt, body) -> dict:
    """EmbedParams' `hidden` and `ablate` from the request's `hidden_states` and `ablate`
    (Validation naming the field for an index out of range)."""
    pkg = rt.package
    h = body.hidden_states
    hidden = HiddenSpec.select(pkg.n_layers, h.layers, pooling=h.pooling, dtype=h.dtype,
                               encoding=h.encoding) if h is not None else None
    return {"hidden": hidden, "ablate": ablation(rt, body.ablate)}
