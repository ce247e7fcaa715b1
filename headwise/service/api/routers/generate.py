"""POST /v1/generate: text from a decoder (`prompt`) or encoder-decoder (`source`) model,
optionally streamed as Server-Sent Events, optionally with every step's attention and hidden
states (docs/generation.md)."""

from __future__ import annotations

import asyncio

import orjson
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from headwise.service.api.body import Json
from headwise.service.api.dependencies import get_engine, model_for, require_api_key
from headwise.service.api.errors import NATIVE
from headwise.service.api.responses import BudgetedResponse, BudgetedStream
from headwise.service.api.schemas import HiddenStatesOptions, error_responses
from headwise.service.api.serialize import dumps_chunks
from headwise.service.engine import Engine
from headwise.service.engine.generation.runtime import DEFAULT_NEW_TOKENS
from headwise.service.engine.generation.sampling import SamplingParams
from headwise.service.engine.generation.sequence import GenerateInput, Sequence
from headwise.service.engine.runtime import Capability, Runtime
from headwise.service.errors import Disconnected, ServiceError

router = APIRouter(tags=["generate"], dependencies=[Depends(require_api_key)])

DUMPS = orjson.OPT_SERIALIZE_NUMPY
POLL_S = 0.05  # how often a non-streamed request checks that its client is still there
Number = StrictFloat | StrictInt


class GenerateAttention(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layers: list[StrictInt] | None = Field(None, description="layer indices; null: all")
    heads: list[StrictInt] | None = Field(None, description="head indices; null: all")
    dtype: str = Field("float32", pattern="^(float32|float16)$")
    encoding: str = Field("json", pattern="^(json|base64)$",
                          description="base64: little-endian raw bytes of the array in `shape` order, C order")


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "gpt2", "prompt": "The cat sat", "max_new_tokens": 8},
        {"model": "opus-mt-en-de", "source": "The cat sat on the mat.", "max_new_tokens": 32,
         "attention": {"layers": [5], "heads": None}},
        {"prompt": "Once upon a time", "temperature": 0.8, "top_p": 0.95, "seed": 7, "stream": True},
        {"model": "gpt2", "prompt": "The cat sat", "max_new_tokens": 4,
         "hidden_states": {"layers": [0, 12], "dtype": "float16", "encoding": "base64"}},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    prompt: StrictStr | None = Field(None, description="the text to continue (decoder models)")
    source: StrictStr | None = Field(None, description="the text to translate (encoder-decoder models)")
    max_new_tokens: StrictInt = Field(DEFAULT_NEW_TOKENS, ge=1, description="at most HEADWISE_MAX_NEW_TOKENS; "
                                      "when left out, 16 or that limit if lower")
    temperature: Number | None = Field(None, ge=0, le=100, description="0, null or under 1e-5: greedy")
    top_k: StrictInt = Field(0, ge=0, description="0: off")
    top_p: Number = Field(1.0, gt=0, le=1, description="1: off")
    seed: StrictInt | None = Field(None, ge=0, lt=2**63, description="same seed, same output")
    stop: StrictStr | list[StrictStr] | None = Field(None, description="stop before any of these strings")
    stream: StrictBool = Field(False, description="Server-Sent Events, one per token")
    attention: GenerateAttention | None = Field(None, description="return every step's attention")
    hidden_states: HiddenStatesOptions | None = Field(
        None, description="return chosen layers' hidden states: the prompt's (decoders) and, per generated token, "
                          "those at the position whose logits chose it ([L', d_model])")


def _ask(body: GenerateRequest, rt: Runtime) -> GenerateInput:
    spec = None
    if body.attention is not None:
        a = body.attention
        spec = rt.attention_spec(a.layers, a.heads, dtype=a.dtype, encoding=a.encoding)
    h = body.hidden_states
    hidden = None
    if h is not None:  # an encoder's hidden states are /v1/embed's
        gen = Capability.GENERATE.of(rt)
        hidden = gen.hidden_spec(h.layers, pooling=h.pooling, dtype=h.dtype, encoding=h.encoding)
    return GenerateInput(
        prompt=body.prompt, source=body.source,
        max_new_tokens=body.max_new_tokens if "max_new_tokens" in body.model_fields_set else None,
        sampling=SamplingParams(float(body.temperature or 0.0), body.top_k, float(body.top_p)),
        seed=body.seed, stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        stream=body.stream, attention=spec, hidden=hidden)


@router.post("/v1/generate", responses={**error_responses(400, 401, 404, 413, 422, 429, 503),
               200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE with stream: true"}})
async def generate(request: Request, body: Json[GenerateRequest],
                   engine: Engine = Depends(get_engine)):
    """Generate up to `max_new_tokens` tokens. Non-streamed: one JSON result. Streamed:
    `data: {index, token, id, text[, attention][, hidden_states]}` per token, then `data: {<the result>}`,
    then `data: [DONE]`."""
    rt = model_for(request, engine, body.model)
    gen = await engine.generate(rt, _ask(body, rt))
    seq = gen.seq
    with gen.reservation as reservation:  # held by the response until it is sent
        disconnected = engine.metrics.request_failures.labels(model=rt.name, reason="disconnected")
        if body.stream:
            return BudgetedStream(_sse(seq, disconnected), reservation, media_type="text/event-stream",
                                  headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        while not seq.result.done():
            await asyncio.wait([seq.result], timeout=POLL_S)
            if not seq.result.done() and await request.is_disconnected():
                seq.cancel()
                disconnected.inc()
                raise Disconnected()
        result = seq.result.result()
        p = rt.package
        big = ((seq.params.attention is not None and len(seq.ids) * p.n_layers * p.n_heads > 4096)
               or (seq.params.hidden is not None and len(seq.ids) * (p.n_layers + 1) * p.d_model > 65536))
        body_bytes = await run_in_threadpool(dumps_chunks, result) if big else _dumps(result)
    return BudgetedResponse(body_bytes, reservation)


def _dumps(payload: dict) -> bytes:
    return orjson.dumps(payload, option=DUMPS)


def _event(payload) -> bytes:
    return b"data: " + orjson.dumps(payload, option=DUMPS) + b"\n\n"


async def _sse(seq: Sequence, disconnected):
    """Token events, the result, `[DONE]`. A client that goes away (the write fails, or the
    server sees the disconnect and cancels this) stops its generation."""
    try:
        while True:
            ev = await seq.events.get()
            if ev is None:
                break
            if isinstance(ev, BaseException):
                err = ev if isinstance(ev, ServiceError) else ServiceError("generation failed")
                yield _event(NATIVE.payload(err))
                break
            yield _event(ev)
        yield b"data: [DONE]\n\n"
    finally:
        if not seq.finished:
            seq.cancel()
            disconnected.inc()
