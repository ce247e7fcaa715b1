"""POST /v2/rerank in Cohere's v2 shape (docs/api.md). Errors in Cohere's shape.

Cohere's SDK (`cohere.ClientV2(base_url=...).rerank(...)`) works against it unchanged. Scores
are the native /v1/rerank's; `max_tokens_per_doc` cuts each document by the model's own
tokenizer before it is paired with the query.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import Json
from headwise.service.api.compat import cohere
from headwise.service.api.compat import rerank as compat
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.errors import COHERE, route_class
from headwise.service.api.ranking import rank
from headwise.service.api.responses import answer
from headwise.service.api.sizes import ENVELOPE_BYTES, check_response_bytes, echoed_bytes
from headwise.service.engine import Capability, Engine, Runtime
from headwise.service.engine.classify import ClassifyParams
from headwise.service.errors import Validation

router = APIRouter(tags=["cohere"], route_class=route_class(COHERE), dependencies=[Depends(require_api_key)])


@router.post("/v2/rerank", response_model=compat.CohereRerankResponse, response_model_exclude_none=True,
             responses=cohere.ERROR_RESPONSES)
async def rerank(request: Request, body: Json[compat.CohereRerankRequest],
                 engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Each document's relevance to the query (a cross-encoder's sigmoid), best first (ties by
    index); `index` is the document's place in `documents`."""
    rt = model_for(request, engine, body.model)
    if body.relevant_spans is not None and body.relevant_spans.mode == "enabled":
        raise Validation("relevant_spans: this server returns no spans; send mode 'disabled' or leave it out",
                         field="relevant_spans")
    texts, echo = compat.document_texts(body.documents), body.return_documents
    envelope = compat.COHERE_META_BYTES + ENVELOPE_BYTES
    if echo:  # the echoed texts alone, before any inference (or tokenising) is spent on them
        check_response_bytes(envelope + echoed_bytes(texts, body.top_n), engine.settings.max_response_bytes,
                             compat.COHERE_RERANK.advice)
    pairs = await _cut(engine, rt, texts, body.max_tokens_per_doc)
    r = await rank(engine, rt, body.query, pairs, ClassifyParams(), probe, echo=texts if echo else None,
                   top_n=body.top_n, envelope=envelope, item_bytes=compat.ITEM_BYTES, too_large=compat.COHERE_RERANK.advice)
    return await answer(engine, compat.COHERE_RERANK, r, compat.CohereRerank(len(texts), texts if echo else None))


async def _cut(engine: Engine, rt: Runtime, texts: list[str], n: int) -> list[str]:
    """Each document cut after its first n tokens (the model's tokenizer, no special tokens).
    With n ≥ max_len nothing is cut here: the pair is cut at max_len anyway, and its document
    keeps fewer than n tokens whichever way (Cohere's default, 4096, cuts nothing then)."""
    if n >= rt.package.max_len:
        return texts
    Capability.RERANK.of(Capability.CLASSIFY.of(rt))  # the model's kind, before its tokenizer is asked anything
    with compat.fields_named({"inputs": "documents"}):
        # cut at max_len (> n tokens): only what may be kept is read
        encs = await engine.tokenize(rt, texts, truncate=True, special_tokens=False)
    return [compat.cut_at(t, e.offsets, n) for t, e in zip(texts, encs, strict=True)]
