"""POST /v1/head_importance: each head's effect on one input when removed alone (Michel et
al. 2019), as an [L, H] matrix and its top heads (docs/api.md, docs/analytics.md)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer
from headwise.service.api.schemas import Usage, error_responses
from headwise.service.engine import Engine, prompts

router = APIRouter(tags=["analytics"], dependencies=[Depends(require_api_key)])


class HeadImportanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"input": "The cat sat on the mat."},
        {"model": "ms-marco-minilm", "input": ["what is the capital of france", "Paris is the capital of France."],
         "top_k": 5}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    input: StrictStr | tuple[StrictStr, StrictStr] = Field(
        ..., description="a text; or [query, document] for a cross-encoder")
    truncate: StrictBool = Field(True, description="cut at max_len; false: 422 when longer")
    raw_scores: StrictBool = Field(False, description="cross-encoder: effects on the logit, not its sigmoid")
    top_k: StrictInt = Field(10, ge=1, le=4096, description="how many of the largest effects `top` lists")


class TopHead(BaseModel):
    layer: int
    head: int
    effect: float


class HeadImportanceResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "all-minilm-l6-v2", "measure": "cosine", "baseline": None, "shape": [6, 12],
        "importance": [[0.0012, 0.0004, "..."], "..."], "top": [{"layer": 0, "head": 4, "effect": 0.031}],
        "tokens": ["[CLS]", "the", "cat", "[SEP]"], "forward_passes": 73,
        "usage": {"prompt_tokens": 4, "total_tokens": 292}}]})

    model: str
    measure: str = Field(..., description="cosine: 1 − cos of sentence embeddings; score: score − score without")
    baseline: float | None = Field(None, description="cross-encoder: the score with every head")
    shape: list[int]
    importance: list[list[float]] = Field(..., description="[n_layers][n_heads]: each head's effect when removed alone")
    top: list[TopHead]
    tokens: list[str]
    forward_passes: int
    usage: Usage


@router.post("/v1/head_importance", response_model=HeadImportanceResponse,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def head_importance(request: Request, body: Json[HeadImportanceRequest],
                          engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Each head's effect when removed alone: L·H + 1 forward passes of the analysis graph
    through the analytics batcher, after plain work, admitted at rows · T tokens."""
    rt = model_for(request, engine, body.model)
    item = body.input if isinstance(body.input, str) else tuple(body.input)
    if isinstance(item, str):  # an embedding model's default prompt, as /v1/embed's
        [item] = prompts.apply([item], prompts.default(rt.package, engine.settings.default_prompt_name))
    res = await engine.head_importance(rt, item, body.truncate, body.raw_scores, probe)
    return await answer(engine, native.HEAD_IMPORTANCE, res, body.top_k, analytics=True)
