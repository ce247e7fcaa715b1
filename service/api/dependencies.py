"""FastAPI dependencies: the engine, the settings, the optional API key, the disconnect probe.

All async, so FastAPI does not hop to a thread for them.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request
from pydantic import BaseModel

from service.api.errors import Unauthorized
from service.engine import Engine
from service.settings import Settings


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
        raise Unauthorized("missing or wrong bearer token")
