"""GET /v1/models and /v1/models/{name}: OpenAI's model list (id, object, created, owned_by),
so `openai`'s `models.list()` and `models.retrieve()` work, with headwise's facts beside them:
each runtime's card (manifest facts plus provider, precision, variants), validated by
ModelCard for every kind."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.dependencies import get_engine, model_for, require_api_key
from headwise.service.api.schemas import ModelCard, ModelList, error_responses
from headwise.service.engine import Engine

router = APIRouter(tags=["models"], dependencies=[Depends(require_api_key)])


@router.get("/v1/models", response_model=ModelList, response_model_exclude_unset=True,
            responses=error_responses(401))
async def list_models(engine: Engine = Depends(get_engine)):
    return ModelList(object="list", data=[ModelCard.model_validate(rt.card()) for rt in engine.models.values()])


@router.get("/v1/models/{name}", response_model=ModelCard, response_model_exclude_unset=True,
            responses=error_responses(401, 404))
async def get_model(name: str, request: Request, engine: Engine = Depends(get_engine)):
    rt = model_for(request, engine, name)
    return ModelCard.model_validate(rt.card())
