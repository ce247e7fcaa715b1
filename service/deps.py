"""FastAPI dependencies: the engine, the settings, and the optional API key.

All async, so FastAPI does not hop to a thread for them.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from service.engine import Engine
from service.errors import Unauthorized
from service.settings import Settings

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
    """The whole body, straight from `receive`: Starlette's `request.body()` goes through an
    async generator, 12 µs more per request under uvicorn (bench.overhead: 57 vs 45 µs for a
    request that only reads its body). A disconnect mid-body raises as Starlette's does."""
    chunks, more = [], True
    while more:
        message = await request.receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    request._body = body  # what Request.body() caches, should anything read it again
    return body


def openapi_body(model: type[BaseModel]) -> dict:
    """`openapi_extra` documenting a json_body (its schema is added by service.app)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def checked_body(request: Request, parse) -> tuple[BaseModel, Engine]:
    """What the embedding routes' dependencies would give (API key checked, body parsed with
    `parse = json_body(Model)`, the engine), called directly: FastAPI's dependency solving was
    27 of the 113 µs of app CPU per /v1/embed request (measured in process), and those routes
    are the ones under load."""
    await require_api_key(request)
    return await parse(request), request.app.state.engine


def direct(endpoint):
    """Mark an endpoint `async def f(request: Request) -> Response` that uses no `Depends` as
    one that ServiceMiddleware calls itself, past FastAPI's routing and middleware stack (about
    100 µs of a request's 300 µs of server CPU, measured; bench/results/experiments-cpu.md).
    FastAPI still declares the route (OpenAPI, 405 for other methods, `/path/` redirects)."""
    endpoint.direct = True
    return endpoint


def disconnect_probe(request: Request) -> Callable[[], Awaitable[bool]]:
    """What the batcher calls to learn that a client went away. uvicorn's `receive` is a bound
    method of its request cycle, whose `disconnected` flag its protocol sets when the connection
    is lost: read that (Starlette's `is_disconnected` opens and cancels an anyio scope per call).
    Any other server, or a wrapped `receive`: Starlette's check."""
    cycle = getattr(request.receive, "__self__", None)
    if not isinstance(getattr(cycle, "disconnected", None), bool):
        return request.is_disconnected

    async def disconnected() -> bool:
        return cycle.disconnected

    return disconnected


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def require_api_key(request: Request) -> None:
    key = request.app.state.settings.api_key
    if key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # compare_digest on bytes: constant time whatever the token's content.
    ok = hmac.compare_digest(token.strip().encode(), key.get_secret_value().encode())
    if scheme.lower() != "bearer" or not ok:
        raise Unauthorized("missing or wrong bearer token",
                           headers={"WWW-Authenticate": 'Bearer realm="headwise"'})
