"""POST /v1/tag: token classification (NER and PII taggers), one Engine.tag call: per input
its tokens, each with its likeliest label and score (the token-classification pipeline of
transformers with no aggregation), optionally every label's score and per-head attention; or,
with an aggregation_strategy, its entities as that pipeline groups them."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer
from headwise.service.api.schemas import Ablate, AttentionOptions, Usage, ablation, error_responses
from headwise.service.engine import Engine
from headwise.service.engine.heads.tokens import TagParams
from headwise.service.errors import Validation

router = APIRouter(tags=["tag"], dependencies=[Depends(require_api_key)])


class TagRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "My name is Clara and I live in Berkeley."},
        {"inputs": ["Clara lives in Berkeley."], "all_scores": True, "ignore_labels": ["O"]},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: StrictStr | list[StrictStr] = Field(..., description="one text or a list")
    truncate: StrictBool = Field(True, description="cut each text at max_len tokens; false: 422 when longer")
    raw_scores: StrictBool = Field(False, description="each token's logits as they are; false: their softmax")
    all_scores: StrictBool = Field(False, description="every label's score per token, in `labels` order")
    ignore_labels: list[StrictStr] = Field([], description="leave out tokens (or entities) whose likeliest label "
                                                          'is one of these (transformers\' pipeline leaves out ["O"])')
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = Field(
        "none", description="none: every token; else each text's entities as transformers' token-classification "
                            "pipeline groups them (its aggregation_strategy)")
    attention: AttentionOptions | None = Field(None, description="per input, every asked-for head's weights "
                                                                 "over all its tokens, as on /v1/embed")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: tag with those heads removed')


class TaggedToken(BaseModel):
    index: int = Field(..., description="the token's position in the model's input ([CLS] is 0)")
    token: str
    start: int = Field(..., description="its first character in the text")
    end: int = Field(..., description="one past its last character")
    label: str
    score: float
    scores: list[float] | None = None


class Entity(BaseModel):
    entity_group: str = Field(..., description="the label, its B-/I- prefix dropped")
    score: float = Field(..., description="the mean of its tokens' (or words') scores")
    word: str = Field(..., description="its tokens as the tokenizer's decoder writes them")
    start: int
    end: int


class TaggedText(BaseModel):
    index: int
    tokens: list[TaggedToken] | None = Field(None, description="with aggregation_strategy none")
    entities: list[Entity] | None = Field(None, description="with another aggregation_strategy")
    attention: dict | None = None


class TagResponse(BaseModel):
    model: str
    labels: list[str]
    data: list[TaggedText]
    usage: Usage


@router.post("/v1/tag", response_model=TagResponse, response_model_exclude_none=True,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def tag(request: Request, body: Json[TagRequest], engine: Engine = Depends(get_engine),
              probe=Depends(disconnect_probe)):
    """Label every token of one text or a list (special tokens left out)."""
    rt = model_for(request, engine, body.model)
    grouped = body.aggregation_strategy != "none"
    if grouped and (body.raw_scores or body.all_scores):
        raise Validation(f"aggregation_strategy {body.aggregation_strategy} groups activated scores into one per "
                         "entity: send raw_scores and all_scores false, or aggregation_strategy none",
                         field="aggregation_strategy")
    spec = body.attention.spec(rt) if body.attention is not None else None
    params = TagParams(truncate=body.truncate, raw_scores=body.raw_scores, attention=spec,
                       ablate=ablation(rt, body.ablate))
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    result = await engine.tag(rt, texts, params, probe)
    if grouped:
        asked = native.Tagging(texts, body.aggregation_strategy, set(body.ignore_labels), rt.tokenizer)
        return await answer(engine, native.ENTITIES, result, asked)
    return await answer(engine, native.TAG, result, body)
