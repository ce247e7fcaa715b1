"""POST /v1/answer: extractive question answering (SQuAD-style answerers), one Engine.submit
call for the answering capability: per (question, context) the best spans of the context, as
transformers' question-answering pipeline answers (`answer`, `score`, `start`, `end`), with
optional per-head attention and removed heads. The request's writer is here too."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.compat.qa_pipeline import (
    AnswerLength,
    DocStride,
    SeqLength,
    TopK,
    windows,
)
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer as write
from headwise.service.api.schemas import Ablate, AttentionOptions, Usage, ablation, error_responses
from headwise.service.api.sizes import ENVELOPE_BYTES
from headwise.service.api.writer import Writer
from headwise.service.engine import Engine
from headwise.service.engine.heads.extractive import SpanParams

router = APIRouter(tags=["answer"], dependencies=[Depends(require_api_key)])


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: StrictStr
    context: StrictStr = Field(..., description="the text the answer is cut from")


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": {"question": "Where does Clara live?", "context": "My name is Clara and I live in Berkeley."}},
        {"inputs": [{"question": "Who?", "context": "Clara lives in Berkeley."}], "top_k": 3},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: Question | list[Question] = Field(..., description="one question and its context, or a list")
    top_k: TopK = Field(1, description="answers per input, best first")
    max_answer_len: AnswerLength = Field(15, description="tokens an answer may span")
    handle_impossible_answer: StrictBool = Field(False, description='also offer the empty answer ("")')
    align_to_words: StrictBool = Field(True, description="widen an answer to the context's whole words")
    truncate: StrictBool = Field(False, description="cut the context of a pair longer than max_len tokens; "
                                                    "false: refused (an answer past the cut would never be found)")
    doc_stride: DocStride | None = Field(None, description="read each context in overlapping windows, as the "
                                         "pipeline does: context tokens each window shares with the one before "
                                         "(default, where max_seq_len is given: min(max_seq_len // 2, 128))")
    max_seq_len: SeqLength | None = Field(None, description="tokens per window, question included (default, where "
                                          "doc_stride is given: min(384, max_len))")
    attention: AttentionOptions | None = Field(None, description="per input, every asked-for head's weights "
                                                                 "over all its tokens, as on /v1/embed")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: answer with those heads removed')


class Span(BaseModel):
    answer: str = Field(..., description="the context's characters [start, end)")
    score: float = Field(..., description="the start's probability times the end's")
    start: int
    end: int


class Answered(BaseModel):
    index: int
    answers: list[Span]
    attention: dict | None = None


class AnswerResponse(BaseModel):
    model: str
    data: list[Answered]
    usage: Usage


def _answers(result, _) -> dict:
    return native.per_input(result, lambda _, x: {"answers": [
        {"answer": a.answer, "score": a.score, "start": a.start, "end": a.end} for a in x.answers]})


ANSWERS = Writer(lambda r, _: r.answer_bytes + ENVELOPE_BYTES, _answers, "send fewer inputs, or a smaller top_k")


@router.post("/v1/answer", response_model=AnswerResponse, response_model_exclude_none=True,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def answer(request: Request, body: Json[AnswerRequest], engine: Engine = Depends(get_engine),
                 probe=Depends(disconnect_probe)):
    """The best spans of each context that answer its question."""
    rt = model_for(request, engine, body.model)
    spec = body.attention.spec(rt) if body.attention is not None else None
    params = SpanParams(truncate=body.truncate, top_k=body.top_k, max_answer_len=body.max_answer_len,
                        handle_impossible_answer=body.handle_impossible_answer, align_to_words=body.align_to_words,
                        attention=spec, ablate=ablation(rt, body.ablate),
                        windows=windows(body.doc_stride, body.max_seq_len, rt.package.max_len, body.truncate))
    asked = [body.inputs] if isinstance(body.inputs, Question) else body.inputs
    result = await engine.answer(rt, [(q.question, q.context) for q in asked], params, probe)
    return await write(engine, ANSWERS, result, body)
