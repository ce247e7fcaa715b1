"""POST /v2/embed in Cohere's v2 shape (docs/api.md): the `cohere` SDK's ClientV2.embed works
unchanged against it. Errors in Cohere's shape.

The same inference as POST /v1/embed with its defaults (pooled, normalised, truncated at
max_len), so `float` equals /v1/embed's; the other types are made from it
(service.api.compat.cohere). `input_type` picks the model's prompt for that use
(service.engine.prompts.for_input_type): search_query its query prompt, search_document its
document (passage, corpus) prompt, as sentence-transformers' encode_query and
encode_document; none for a model with no prompt text; refused (422) for a model that has
prompts but none for that use.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import Json
from headwise.service.api.compat import cohere
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.errors import COHERE, route_class
from headwise.service.api.responses import answer
from headwise.service.api.sizes import check_response_bytes, echoed_bytes
from headwise.service.engine import Capability, Engine, matryoshka, prompts
from headwise.service.engine.params import EmbedParams
from headwise.service.errors import (
    FIELD,
    InvalidRequest,
    NotFound,
    Validation,
)

router = APIRouter(tags=["cohere"], route_class=route_class(COHERE), dependencies=[Depends(require_api_key)])


@router.post("/v2/embed", response_model=cohere.EmbedResponse, response_model_exclude_none=True,
             responses=cohere.ERROR_RESPONSES)
async def embed(request: Request, body: Json[cohere.EmbedRequest],
                engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Embeddings by type, Cohere's EmbedByTypeResponse: only the types asked for."""
    texts = _texts(body)
    try:
        rt = model_for(request, engine, body.model, Capability.EMBED)
    except NotFound as e:  # Cohere's clients read the message only: say which field
        raise NotFound(f"'model': {e.message}", field="model") from None
    types = cohere.types_asked(body.embedding_types)
    d = rt.package.embedding_dim
    n = _dimension(body, types, d, rt.package.max_len)
    n = matryoshka.check(rt.package, engine.settings, n, "output_dimension") or d
    prompt = prompts.for_input_type(rt.package, body.input_type, engine.settings.default_prompt_name)
    echoed = echoed_bytes(texts) + cohere.ENVELOPE_BYTES
    cap = engine.settings.max_response_bytes
    check_response_bytes(echoed, cap, "send fewer or shorter texts")  # before any inference is spent
    try:
        result = await engine.embed(rt, prompts.apply(texts, prompt), EmbedParams(truncate=cohere.CUTS[body.truncate]),
                                    probe)
    except Validation as e:
        raise _too_long(e) from None
    return await answer(engine, cohere.EMBED, result, cohere.Embedding(texts, types, n, echoed))


def _texts(body: cohere.EmbedRequest) -> list[str]:
    """The texts; what headwise cannot embed (images, image input_type, mixed `inputs`) refused."""
    if body.images:
        raise Validation("'images': headwise serves text models; send texts", field="images")
    if body.input_type == "image":
        raise Validation("'input_type': image is not served (text models only); use search_document, "
                         "search_query, classification or clustering", field="input_type")
    if body.inputs is not None:
        raise Validation("'inputs' (mixed text and image content) is not supported; send the texts in 'texts'")
    if body.texts is None:
        raise InvalidRequest(f"'{FIELD}' is required", field="inputs")
    return body.texts


def _dimension(body: cohere.EmbedRequest, types: list[str], d: int, max_len: int) -> int:
    """The dimension answered (output_dimension, else d_model), checked against the types."""
    if body.max_tokens is not None and body.max_tokens < max_len:
        raise Validation(f"'max_tokens': headwise cuts inputs at this model's max_len ({max_len}) only; "
                         f"send at least {max_len} or leave it out", field="max_tokens")
    n = d if body.output_dimension is None else body.output_dimension
    if not 1 <= n <= d:
        raise Validation(f"'output_dimension' must be in 1..{d} for this model", field="output_dimension")
    binary = [t for t in types if t in cohere.BINARY_TYPES]
    if binary and n % 8:
        what = "output_dimension" if body.output_dimension is not None else "embedding_types"
        raise Validation(f"'{what}': {' and '.join(binary)} pack 8 dimensions a byte; the dimension ({n}) "
                         f"must be a multiple of 8", field=what)
    return n


def _too_long(e: Validation) -> Validation:
    """The engine's "over max_len" (truncate NONE), told in Cohere's terms."""
    if e.field != "inputs":
        return e
    text = e.render(COHERE.fields).replace(" (send truncate: true to cut it)", "")
    return Validation(f"{text} (send truncate: END or START to cut it)", field="inputs")
