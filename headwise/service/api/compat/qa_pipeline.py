"""The answer of transformers' question-answering pipeline, as Hugging Face Inference Endpoints
serve it and huggingface_hub's `InferenceClient.question_answering` reads it: `{"inputs":
{"question", "context"}, "parameters": {...}}` → `{answer, score, start, end}`, or a list of
them when there are several (top_k). The spans are the answering head's (service.engine.heads.
extractive: the pipeline's own choice). Pure shaping: the TEI router's POST / calls
Engine.submit and answers with ANSWERS."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, conint

from headwise.service.api.compat.tei import TeiBody
from headwise.service.api.writer import Writer
from headwise.service.engine.heads.extractive import SpanParams
from headwise.service.errors import Validation

# headwise's bounds of the pipeline's options, on /v1/answer and KServe v2 too
BOUNDS = {"top_k": (1, 32), "max_answer_len": (1, 512)}
TopK = conint(strict=True, ge=BOUNDS["top_k"][0], le=BOUNDS["top_k"][1])
AnswerLength = conint(strict=True, ge=BOUNDS["max_answer_len"][0], le=BOUNDS["max_answer_len"][1])


class QuestionAnsweringInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: StrictStr
    context: StrictStr


class QuestionAnsweringParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    top_k: TopK | None = None
    max_answer_len: AnswerLength | None = None
    handle_impossible_answer: StrictBool | None = None
    align_to_words: StrictBool | None = None
    doc_stride: int | None = Field(None, description="refused: a context is read in one window")
    max_question_len: int | None = Field(None, description="refused: a pair is refused past max_len tokens")
    max_seq_len: int | None = Field(None, description="refused: the model's max_len is the window")


class QuestionAnsweringRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": {"question": "Where do I live?", "context": "My name is Clara and I live in Berkeley."}}]})

    inputs: QuestionAnsweringInput
    parameters: QuestionAnsweringParameters | None = None
    truncate: StrictBool | None = Field(None, description="cut the context of a pair longer than max_len tokens "
                                        "(as TEI's truncate on its other routes); false or null: 422")


def params(body: QuestionAnsweringRequest) -> SpanParams:
    """The head's params for the pipeline's; Validation for the window options, which would be
    answered otherwise than asked (one window of max_len tokens, a longer pair refused)."""
    p = body.parameters or QuestionAnsweringParameters()
    windows = [k for k in ("doc_stride", "max_question_len", "max_seq_len") if getattr(p, k) is not None]
    if windows:
        raise Validation(f"parameters.{windows[0]} is not served: a question and its context are read in one "
                         "window of the model's max_len tokens, and a longer pair is refused (or its context "
                         "cut, with truncate: true)", field="parameters")
    given = {k: v for k, v in p.model_dump(include={"top_k", "max_answer_len", "handle_impossible_answer",
                                                   "align_to_words"}).items() if v is not None}
    return SpanParams(truncate=bool(body.truncate), **given)


def _answers(result, _) -> dict | list[dict]:
    answers = [{"score": a.score, "start": a.start, "end": a.end, "answer": a.answer} for a in result.data[0].answers]
    return answers[0] if len(answers) == 1 else answers  # the pipeline's shape


# a HeadResult of one pair; the engine's figure bounds the spans, 16 bytes the list's brackets
ANSWERS = Writer(lambda r, _: r.answer_bytes + 16, _answers, "ask for a smaller top_k")
