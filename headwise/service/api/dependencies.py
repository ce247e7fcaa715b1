"""FastAPI dependencies: the engine, the settings, the optional API key, the disconnect probe.

All async, so FastAPI does not hop to a thread for them. And `model_for`, the one way a route
picks its model: a plain function the endpoint calls (no dependency of its own, so the hot
routes keep their plain `async def f(request)` dependencies for the fast path).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import overload

from fastapi import Request

from headwise.service.api.errors import Unauthorized
from headwise.service.engine import Capability, Engine, Runtime
from headwise.service.engine.runtime import R
from headwise.service.settings import Settings


async def disconnect_probe(request: Request) -> Callable[[], Awaitable[bool]]:
    """What the batcher calls to learn that a client went away: the server's own view where the
    app was given one (`app.state.disconnect_probe`, server.fastpath under `headwise serve`),
    else Starlette's check."""
    probe = getattr(request.app.state, "disconnect_probe", None)
    return (probe and probe(request)) or request.is_disconnected


@overload
def model_for(request: Request, engine: Engine, name: str | None) -> Runtime: ...


@overload
def model_for(request: Request, engine: Engine, name: str | None, needs: Capability[R]) -> R: ...


def model_for(request, engine, name, needs=None):
    """The model that answers (`Engine.get`: NotFound, or Validation when none is named and
    several are served, or it lacks `needs`), narrowed to `needs`' protocol when given, and
    named on the request for the metrics' labels."""
    rt = engine.get(name) if needs is None else engine.get(name, needs)
    request.scope.setdefault("state", {})["model"] = rt.name  # request.state's dict, without its wrapper
    return rt


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
