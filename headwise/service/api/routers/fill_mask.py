"""POST /v1/fill_mask: masked language models, one Engine.submit call for the fill capability:
per text, at each of its mask tokens the likeliest tokens, as transformers' fill-mask pipeline
answers (`score`, `token`, `token_str`, `sequence`), with optional per-head attention and
removed heads. The request's writer is here too."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, conint, conlist

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.compat import fill_pipeline
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer
from headwise.service.api.schemas import Ablate, AttentionOptions, Usage, ablation, error_responses
from headwise.service.api.sizes import ENVELOPE_BYTES
from headwise.service.api.writer import Writer
from headwise.service.engine import Engine
from headwise.service.engine.heads.masked import FILL, MAX_TOP_K, FillParams, target_ids

router = APIRouter(tags=["fill_mask"], dependencies=[Depends(require_api_key)])


class FillMaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "Paris is the [MASK] of France."},
        {"inputs": ["The [MASK] sat on the mat."], "top_k": 3, "targets": ["cat", "dog"]},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: StrictStr | list[StrictStr] = Field(..., description="one text or a list, each with the model's mask "
                                                                "token (its card's mask_token) at least once")
    top_k: conint(strict=True, ge=1, le=MAX_TOP_K) = Field(5, description="fills per mask, best first")
    targets: StrictStr | conlist(StrictStr, min_length=1, max_length=MAX_TOP_K) | None = Field(
        None, description="choose fills among these only: a token of the vocabulary as it is, else the first "
                          "token a text encodes to (scores stay probabilities over the whole vocabulary)")
    truncate: StrictBool = Field(True, description="cut each text at max_len tokens (a mask past the cut is "
                                                   "refused); false: 422 when longer")
    attention: AttentionOptions | None = Field(None, description="per input, every asked-for head's weights "
                                                                 "over all its tokens, as on /v1/embed")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: fill with those heads removed')


class Fill(BaseModel):
    score: float = Field(..., description="the token's probability at the mask")
    token: int = Field(..., description="its id")
    token_str: str = Field(..., description="the token decoded alone")
    sequence: str = Field(..., description="the text decoded with the token in the mask's place")


class Mask(BaseModel):
    position: int = Field(..., description="the mask token's position in the model's input ([CLS] is 0)")
    fills: list[Fill]


class Filled(BaseModel):
    index: int
    masks: list[Mask]
    attention: dict | None = None


class FillMaskResponse(BaseModel):
    model: str
    data: list[Filled]
    usage: Usage


def _fills(result, _) -> dict:
    return native.per_input(result, lambda _, x: {"masks": [
        {"position": at, "fills": fill_pipeline.fills_of(fills)} for at, fills in zip(x.masks, x.fills, strict=True)]})


FILLS = Writer(lambda r, _: r.answer_bytes + ENVELOPE_BYTES, _fills, "send fewer inputs, or a smaller top_k")


@router.post("/v1/fill_mask", response_model=FillMaskResponse, response_model_exclude_none=True,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def fill_mask(request: Request, body: Json[FillMaskRequest], engine: Engine = Depends(get_engine),
                    probe=Depends(disconnect_probe)):
    """The likeliest tokens at each mask token of one text or a list."""
    rt = model_for(request, engine, body.model)
    fill = FILL.of(rt)
    spec = body.attention.spec(rt) if body.attention is not None else None
    targets = target_ids(fill.tokenizer, body.targets) if body.targets is not None else None
    params = FillParams(truncate=body.truncate, top_k=body.top_k, targets=targets, attention=spec,
                        ablate=ablation(rt, body.ablate))
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    result = await engine.submit(rt, FILL, texts, params, probe)
    return await answer(engine, FILLS, result, body)
