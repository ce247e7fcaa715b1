"""Liveness and readiness probes; open even when an API key is set."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.deps import get_engine
from service.engine import Engine
from service.errors import error_response
from service.routers.embed import json_response
from service.schemas import error_responses

router = APIRouter(tags=["health"])


@router.get("/health/live", responses=error_responses(503))
async def live(engine: Engine = Depends(get_engine)):
    if engine.failed:
        return error_response(503, "not_ready", "model failed to load; see the server log")
    return json_response({"status": "live"})


@router.get("/health/ready", responses=error_responses(503))
async def ready(engine: Engine = Depends(get_engine)):
    if engine.draining:
        return error_response(503, "not_ready", "draining")
    if not engine.ready:
        return error_response(503, "not_ready", "model not loaded or warming up")
    return json_response({"status": "ready"})
