"""POST /v1/similarity (cosines, optionally split over token pairs) and POST /v1/occlusion
(each token's effect on the sentence embedding when masked out). docs/api.md, docs/analytics.md."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api.body import Json
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import budgeted_json
from headwise.service.api.schemas import error_responses
from headwise.service.engine import Engine

router = APIRouter(tags=["analytics"], dependencies=[Depends(require_api_key)])


class SimilarityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"source": "A man is playing a guitar.", "targets": ["Someone plays music.", "The stock market fell."]},
        {"source": "The cat sat on the mat.", "targets": ["A cat is sitting."], "explain": True, "top_k": 5},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    source: StrictStr = Field(..., description="the text every target is compared with")
    targets: list[StrictStr] = Field(..., description="1..MAX_CLIENT_BATCH − 1 texts")
    explain: StrictBool = Field(False, description="split each score over token pairs (mean pooling only)")
    top_k: StrictInt = Field(10, ge=1, le=1000, description="token pairs listed per target with explain")
    truncate: StrictBool = Field(True, description="cut texts at max_len; false: 422 when longer")


class OcclusionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"input": "The cat sat on the mat."}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    input: StrictStr = Field(..., description="one text; its T tokens cost T + 1 forward passes")
    truncate: StrictBool = Field(True, description="cut the text at max_len; false: 422 when longer")




@router.post("/v1/similarity", responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def similarity(request: Request, body: Json[SimilarityRequest],
                     engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """The cosine of the source's sentence embedding with each target's (the embeddings
    /v1/embed returns); with `explain`, each score's exact split over token pairs."""
    rt = model_for(request, engine, body.model)
    res = await engine.similarity(rt, body.source, body.targets, body.explain, body.truncate, body.top_k, probe)

    def build() -> dict:
        data = []
        for i, (enc, score) in enumerate(zip(res.targets, res.scores, strict=True)):
            item = {"index": i, "score": score}
            if res.explained is not None:
                ex = res.explained[i]
                item.update(tokens=enc.tokens, offsets=enc.offsets, contributions=ex.contributions,
                            top_pairs=[{"source": s, "target": t, "value": v} for s, t, v in ex.pairs])
            data.append(item)
        out = {"model": res.model, "data": data, "usage": res.usage}
        if res.explained is not None:
            out["source"] = {"tokens": res.source.tokens, "offsets": res.source.offsets}
        return out

    return await budgeted_json(engine.analytics.responses, res.answer_bytes, build, engine.analytics.run)


@router.post("/v1/occlusion", responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def occlusion(request: Request, body: Json[OcclusionRequest],
                    engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Each token's effect on the sentence embedding: 1 − cos(embedding, embedding with that
    token's attention_mask 0). T + 1 rows through the analytics batcher, after plain work,
    admitted at (T + 1) · T tokens."""
    rt = model_for(request, engine, body.model)
    res = await engine.occlusion(rt, body.input, body.truncate, probe)
    enc = res.encoding

    def build() -> dict:
        return {"model": res.model, "tokens": enc.tokens, "offsets": enc.offsets, "effects": res.effects,
                "forward_passes": res.passes, "usage": res.usage}

    return await budgeted_json(engine.analytics.responses, res.answer_bytes, build, engine.analytics.run)
