"""Request bodies: JSON parsed and validated in one pass, and the raw body read from `receive`."""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

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
        try:
            return model.model_validate_json(await read_body(request))
        except ValidationError as e:
            raise RequestValidationError(e.errors(include_input=False, include_url=False)) from None

    return parse


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


def openapi_body(model: type[BaseModel]) -> dict:
    """`openapi_extra` documenting a json_body (its schema is added by service.api.app)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}
