"""GET /v1/models and /v1/models/{name}: OpenAI's model list (id, object, created, owned_by),
so `openai`'s `models.list()` and `models.retrieve()` work, with headwise's facts beside them:
each runtime's card (manifest facts plus provider, precision, variants), validated by
ModelCard for every kind, and one card per alias (HEADWISE_SERVED_MODEL_NAMES)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from headwise.service.api.dependencies import get_engine, model_for, require_api_key
from headwise.service.api.schemas import ModelCard, ModelList, error_responses
from headwise.service.engine import Engine, matryoshka, prompts

router = APIRouter(tags=["models"], dependencies=[Depends(require_api_key)])


@router.get("/v1/models", response_model=ModelList, response_model_exclude_unset=True,
            responses=error_responses(401))
async def list_models(engine: Engine = Depends(get_engine)):
    """Every served package, then every alias of one (HEADWISE_SERVED_MODEL_NAMES)."""
    cards = [ModelCard.model_validate(_card(rt, engine)) for rt in engine.models.values()]
    cards += [_alias_card(alias, engine.models[name], engine)
              for alias, name in engine.settings.served_model_names.items()]
    return ModelList(object="list", data=cards)


@router.get("/v1/models/{name}", response_model=ModelCard, response_model_exclude_unset=True,
            responses=error_responses(401, 404))
async def get_model(name: str, request: Request, engine: Engine = Depends(get_engine)):
    rt = model_for(request, engine, name)
    return ModelCard.model_validate(_card(rt, engine)) if name == rt.name else _alias_card(name, rt, engine)


def _alias_card(alias: str, rt, engine: Engine) -> ModelCard:
    """An alias's card: the package's, under the alias's `id`, with `alias_of` naming the package."""
    return ModelCard.model_validate({**_card(rt, engine), "id": alias, "alias_of": rt.name})


def _card(rt, engine: Engine) -> dict:
    """The runtime's card; an embedding model's with its prompts, the default prompt and the
    Matryoshka sizes as served (the settings' where set: service.engine.prompts, matryoshka)."""
    p, s = rt.package, engine.settings
    if p.task != "embedding":
        return rt.card()
    default = prompts.default(p, s.default_prompt_name)
    return {**rt.card(), "prompts": p.prompts, "default_prompt_name": default.name if default else None,
            "matryoshka_dimensions": list(matryoshka.declared(p, s))}
