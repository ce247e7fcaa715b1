"""Liveness and readiness probes; open even when an API key is set. The answers are the
engine's (Engine.check_live / check_ready); KServe's probes (routers/kserve.py) ask the same."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from headwise.service.api.dependencies import get_engine
from headwise.service.api.errors import NATIVE
from headwise.service.api.responses import probe
from headwise.service.api.schemas import error_responses
from headwise.service.engine import Engine

router = APIRouter(tags=["health"])


@router.get("/health/live", responses=error_responses(503))
async def live(engine: Engine = Depends(get_engine)):
    return probe(NATIVE, engine.check_live, {"status": "live"})


@router.get("/health/ready", responses=error_responses(503))
async def ready(engine: Engine = Depends(get_engine)):
    return probe(NATIVE, engine.check_ready, {"status": "ready"})
