"""GET /v1/models and /v1/models/{name}: manifest facts plus provider, precision, variants."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from service.api.dependencies import get_engine, require_api_key
from service.api.responses import json_response
from service.api.schemas import ModelCard, ModelList, error_responses
from service.engine import Engine

router = APIRouter(tags=["models"], dependencies=[Depends(require_api_key)])


@router.get("/v1/models", response_model=ModelList, responses=error_responses(401))
async def list_models(engine: Engine = Depends(get_engine)):
    return json_response({"data": [rt.info() for rt in engine.models.values()]})


@router.get("/v1/models/{name}", response_model=ModelCard, responses=error_responses(401, 404))
async def get_model(name: str, request: Request, engine: Engine = Depends(get_engine)):
    rt = engine.get(name)
    request.state.model = rt.name
    return json_response(rt.info())
