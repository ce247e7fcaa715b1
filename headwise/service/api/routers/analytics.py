"""POST /v1/similarity (cosines, optionally split over token pairs) and POST /v1/occlusion
(each token's, word's or span's effect on the sentence embedding when masked out). docs/api.md,
docs/analytics.md."""

from __future__ import annotations

from typing import Literal

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
from headwise.service.api.schemas import PromptUsed, Usage, error_responses
from headwise.service.engine import Engine, prompts
from headwise.service.engine.analytics.spans import check_spans

router = APIRouter(tags=["analytics"], dependencies=[Depends(require_api_key)])


class SimilarityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"source": "A man is playing a guitar.", "targets": ["Someone plays music.", "The stock market fell."]},
        {"source": "The cat sat on the mat.", "targets": ["A cat is sitting."], "explain": True, "top_k": 5},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    source: StrictStr = Field(..., description="the text every target is compared with")
    targets: list[StrictStr] = Field(..., description="1..MAX_CLIENT_BATCH − 1 texts")
    prompt_name: StrictStr | None = Field(
        None, description="one of the model's prompts, prepended to the source and each target as /v1/embed does; default: "
        "HEADWISE_DEFAULT_PROMPT_NAME, else the model's default_prompt_name")
    explain: StrictBool = Field(False, description="split each score over token pairs (mean pooling only)")
    top_k: StrictInt = Field(10, ge=1, le=1000, description="token pairs listed per target with explain")
    truncate: StrictBool = Field(True, description="cut texts at max_len; false: 422 when longer")


class OcclusionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"input": "The cat sat on the mat."},
        {"input": "An unbelievably long tokenization.", "unit": "word"},
        {"input": "The cat sat on the mat.", "spans": [[0, 7], [15, 22]]}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    input: StrictStr = Field(..., description="one text; its T tokens cost T + 1 forward passes (U + 1 for U units)")
    prompt_name: StrictStr | None = Field(
        None, description="one of the model's prompts, prepended to the text as /v1/embed does: its tokens are occluded too, and marked (`prompt_span`); default: "
        "HEADWISE_DEFAULT_PROMPT_NAME, else the model's default_prompt_name")
    truncate: StrictBool = Field(True, description="cut the text at max_len; false: 422 when longer")
    unit: Literal["token", "word"] = Field(
        "token", description="what one row masks out: a token (every one, [CLS] and [SEP] too), or a word "
        "(the tokenizer's word: all its pieces at once; special tokens are never masked). Leave it out "
        "with `spans`")
    spans: list[tuple[StrictInt, StrictInt]] | None = Field(
        None, description="character ranges [start, end) of `input` (0 ≤ start < end ≤ its length; with a prompt, "
        "still of `input`: units' start and end are then of the prompted text, as `offsets`), each a "
        "row that masks every token overlapping it (special tokens never); they may overlap. "
        "1..MAX_CLIENT_BATCH − 1 of them; replaces `unit`")


class OcclusionUnit(BaseModel):
    text: str = Field(..., description="input[start:end] (with a prompt: of prompt text + input)")
    start: int = Field(..., description="first character, into `input` (with a prompt: into prompt text + input)")
    end: int = Field(..., description="one past the last character")
    tokens: list[int] = Field(..., description="the positions (into `tokens`) masked together in its row")
    effect: float = Field(..., description="1 − cos(embedding, embedding with these tokens masked out)")


class OcclusionResponse(BaseModel):
    """unit "token": `effects`, one per token. unit "word" or `spans`: `unit` and `units`."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "all-minilm-l6-v2", "tokens": ["[CLS]", "cat", "[SEP]"], "offsets": [[0, 0], [0, 3], [0, 0]],
         "effects": [0.01, 0.42, 0.02], "forward_passes": 4, "usage": {"prompt_tokens": 3, "total_tokens": 12}},
        {"model": "all-minilm-l6-v2", "unit": "word",
         "tokens": ["[CLS]", "un", "##bel", "##ie", "##va", "##bly", "cold", "[SEP]"],
         "offsets": [[0, 0], [0, 2], [2, 5], [5, 7], [7, 9], [9, 12], [13, 17], [0, 0]],
         "units": [{"text": "unbelievably", "start": 0, "end": 12, "tokens": [1, 2, 3, 4, 5], "effect": 0.31},
                   {"text": "cold", "start": 13, "end": 17, "tokens": [6], "effect": 0.45}],
         "forward_passes": 3, "usage": {"prompt_tokens": 8, "total_tokens": 24}}]})

    model: str
    prompt: PromptUsed | None = Field(None, description="the prompt prepended to `input`, when one was; "
                                      "`offsets` then count from its start")
    prompt_span: tuple[int, int] | None = Field(
        None, description="with a prompt: [start, end), the positions in `tokens` of the prompt's tokens")
    unit: Literal["word", "span"] | None = Field(None, description="with units: what they are; absent for tokens")
    tokens: list[str]
    offsets: list[tuple[int, int]]
    effects: list[float] | None = Field(None, description="unit token: one per token; absent otherwise")
    units: list[OcclusionUnit] | None = Field(None, description="unit word or spans: one per unit, in order")
    forward_passes: int = Field(..., description="T + 1, or units + 1")
    usage: Usage = Field(..., description="prompt_tokens T; total_tokens forward_passes · T")


@router.post("/v1/similarity", responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def similarity(request: Request, body: Json[SimilarityRequest],
                     engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """The cosine of the source's sentence embedding with each target's (the embeddings
    /v1/embed returns); with `explain`, each score's exact split over token pairs."""
    rt = model_for(request, engine, body.model)
    prompt = prompts.resolve(rt.package, engine.settings.default_prompt_name, body.prompt_name)
    source, *targets = prompts.apply([body.source, *body.targets], prompt)
    res = await engine.similarity(rt, source, targets, body.explain, body.truncate, body.top_k, probe)
    return await answer(engine, native.SIMILARITY, res, prompts.payload(prompt), analytics=True)


@router.post("/v1/occlusion", response_model=OcclusionResponse, response_model_exclude_none=True,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def occlusion(request: Request, body: Json[OcclusionRequest],
                    engine: Engine = Depends(get_engine), probe=Depends(disconnect_probe)):
    """Each token's (or word's, or span's) effect on the sentence embedding: 1 − cos(embedding,
    embedding with its tokens' attention_mask 0). T + 1 rows (units + 1) through the analytics
    batcher, after plain work, admitted at rows · T tokens."""
    rt = model_for(request, engine, body.model)
    unit = body.unit if "unit" in body.model_fields_set else None
    prompt = prompts.resolve(rt.package, engine.settings.default_prompt_name, body.prompt_name)
    [text] = prompts.apply([body.input], prompt)
    shift = len(text) - len(body.input)  # the client's spans are of `input`; the engine's, of the text
    spans = body.spans
    if spans is not None and shift:  # checked against `input` first: a span must not reach into the prompt
        spans = [(a + shift, b + shift) for a, b in check_spans(spans, len(body.input), engine.settings.max_client_batch - 1)]
    res = await engine.occlusion(rt, text, body.truncate, probe, unit, spans)
    used = prompts.payload(prompt)
    asked = native.Occluded(text, prompt, used, rt.tokenizer.special_ids)
    return await answer(engine, native.OCCLUSION, res, asked, analytics=True)
