"""Request bodies: JSON parsed and validated in one pass, and the raw body read from `receive`.

A route declares its body once, as a typed parameter: `body: Json[EmbedRequest]`. That is a
plain `async def parse(request)` dependency (so the fast path can call it), and the model it
carries (`parse.body_model`) is what service.api.app documents as the route's OpenAPI request
body: nothing else names the model.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from headwise.service import tracing

M = TypeVar("M", bound=BaseModel)


def json_body(model: type[M]):
    """A dependency that parses and validates the body in one pass with pydantic-core's JSON
    parser (FastAPI's own body path decodes with json.loads, then validates the dict: about a
    quarter of a small request's CPU). Mistakes take the usual road: RequestValidationError,
    which service.errors turns into 400 (malformed JSON) or 422."""

    async def parse(request: Request) -> M:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if not (ctype == "application/json" or ctype.endswith("+json")):
            # as FastAPI's strict content type: no JSON without saying so (CSRF)
            raise RequestValidationError([{"loc": ("body",), "msg": "not JSON", "type": "model_type"}])
        with tracing.span("validate"):
            try:
                return model.model_validate_json(await read_body(request))
            except ValidationError as e:
                raise RequestValidationError(e.errors(include_input=False, include_url=False)) from None

    parse.body_model = model  # what the route's OpenAPI request body documents (service.api.app)
    return parse


class Json:
    """`body: Json[Model]`: the request body, parsed by json_body(Model) and typed as Model.
    json_body measured against FastAPI's own body parameter: bench/experiments/body_parse.py."""

    def __class_getitem__(cls, model: type[M]):
        return Annotated[model, Depends(json_body(model))]


def body_model(call) -> type[BaseModel] | None:
    """The model a dependency parses the body into (a json_body's), else None."""
    return getattr(call, "body_model", None)


async def read_body(request: Request) -> bytes:
    """The whole body, straight from `receive` (Starlette's `request.body()` goes through an
    async generator: measurably slower per request, bench.overhead). Read once: nothing else
    reads the body. A disconnect mid-body raises as Starlette's does."""
    chunks, more = [], True
    while more:
        message = await request.receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)

