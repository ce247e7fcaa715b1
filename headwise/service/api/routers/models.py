"""GET /v1/models and /v1/models/{name}: OpenAI's model list (id, object, created, owned_by),
so `openai`'s `models.list()` and `models.retrieve()` work, with headwise's facts beside them:
each runtime's card (manifest facts plus provider, precision, variants), validated by
ModelCard for every kind, and one card per alias (HEADWISE_SERVED_MODEL_NAMES)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.dependencies import get_engine, model_for, require_api_key
from headwise.service.api.schemas import ModelCard, ModelList, error_responses
from headwise.service.engine import Engine

router = APIRouter(tags=["models"], dependencies=[Depends(require_api_key)])


@router.get("/v1/models", response_model=ModelList, response_model_exclude_unset=True,
            responses=error_responses(401))
async def list_models(engine: Engine = Depends(get_engine)):
    """Every served package, then every alias of one (HEADWISE_SERVED_MODEL_NAMES)."""
    cards = [ModelCard.model_validate(rt.card()) for rt in engine.models.values()]
    cards += [_alias_card(alias, engine.models[name]) for alias, name in engine.settings.served_model_names.items()]
    return ModelList(object="list", data=cards)


@router.get("/v1/models/{name}", response_model=ModelCard, response_model_exclude_unset=True,
            responses=error_responses(401, 404))
async def get_model(name: str, request: Request, engine: Engine = Depends(get_engine)):
    rt = model_for(request, engine, name)
    return ModelCard.model_validate(rt.card()) if name == rt.name else _alias_card(name, rt)


def _alias_card(alias: str, rt) -> ModelCard:
    """An alias's card: the package's, under the alias's `id`, with `alias_of` naming the package."""
    return ModelCard.model_validate({**rt.card(), "id": alias, "alias_of": rt.name})
