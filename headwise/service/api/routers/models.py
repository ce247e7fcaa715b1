"""GET /v1/models and /v1/models/{name}: OpenAI's model list (id, object, created, owned_by),
so `openai`'s `models.list()` and `models.retrieve()` work, with headwise's facts beside them:
manifest facts plus provider, precision, variants."""

from __future__ import annotations

from datetime import datetime, timezone

from fastapi import APIRouter, Depends, Request

from headwise.service.api.dependencies import get_engine, require_api_key
from headwise.service.api.responses import json_response
from headwise.service.api.schemas import ModelCard, ModelList, error_responses
from headwise.service.engine import Engine
from headwise.service.engine.runtime import Runtime

router = APIRouter(tags=["models"], dependencies=[Depends(require_api_key)])


def created(manifest: dict) -> int:
    """The package's export time (manifest `created_at`, ISO 8601) in Unix seconds, a stable
    integer as OpenAI's `created` (a time without zone read as UTC); 0 when the manifest has
    none or an unreadable one."""
    try:
        when = datetime.fromisoformat(str(manifest["created_at"]))
    except (KeyError, ValueError):
        return 0
    return int((when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)).timestamp())


def card(rt: Runtime) -> dict:
    return {"id": rt.name, "object": "model", "created": created(rt.package.manifest), "owned_by": "headwise",
            **rt.info()}


@router.get("/v1/models", response_model=ModelList, responses=error_responses(401))
async def list_models(engine: Engine = Depends(get_engine)):
    return json_response({"object": "list", "data": [card(rt) for rt in engine.models.values()]})


@router.get("/v1/models/{name}", response_model=ModelCard, responses=error_responses(401, 404))
async def get_model(name: str, request: Request, engine: Engine = Depends(get_engine)):
    rt = engine.get(name)
    request.state.model = rt.name
    return json_response(card(rt))
