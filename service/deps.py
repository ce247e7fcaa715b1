"""FastAPI dependencies: the engine, the settings, and the optional API key.

All async, so FastAPI does not hop to a thread for them.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from service.engine import Engine
from service.errors import Unauthorized
from service.settings import Settings


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
