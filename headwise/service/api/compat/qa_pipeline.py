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
from headwise.service.engine.heads.extractive import SpanParams, Windows
from headwise.service.errors import FIELD, Validation

# headwise's bounds of the pipeline's options, on /v1/answer and KServe v2 too (a window's
# tokens are bounded by the model's max_len, checked with it: `windows`)
BOUNDS = {"top_k": (1, 32), "max_answer_len": (1, 512), "doc_stride": (0, 1 << 16), "max_seq_len": (1, 1 << 16)}
TopK = conint(strict=True, ge=BOUNDS["top_k"][0], le=BOUNDS["top_k"][1])
AnswerLength = conint(strict=True, ge=BOUNDS["max_answer_len"][0], le=BOUNDS["max_answer_len"][1])
DocStride = conint(strict=True, ge=BOUNDS["doc_stride"][0], le=BOUNDS["doc_stride"][1])
SeqLength = conint(strict=True, ge=BOUNDS["max_seq_len"][0], le=BOUNDS["max_seq_len"][1])
PIPELINE_SEQ_LEN, PIPELINE_STRIDE = 384, 128  # the pipeline's defaults: at most these, min(…, max_len) and half a window


def windows(doc_stride: int | None, max_seq_len: int | None, max_len: int, truncate: bool,
            prefix: str = "", truncate_field: str = "truncate", by_default: bool = False) -> Windows | None:
    """The windows the pipeline reads a context in for its `doc_stride` and `max_seq_len` (one
    given, the pipeline's default for the other: max_seq_len min(384, max_len), doc_stride
    min(max_seq_len // 2, 128)). Where neither is given: both defaults `by_default` (as the
    pipeline reads every context) unless truncate is asked, else None (a context past max_len
    is refused, or cut with truncate). Validation naming the field (after `prefix`;
    `truncate_field` for truncate) for a window past the model's max_len, a stride over the
    window, or windows asked with truncate."""
    if doc_stride is None and max_seq_len is None and (truncate or not by_default):
        return None
    if truncate:
        raise Validation(f"{FIELD}: send either truncate (cut the context) or doc_stride/max_seq_len (read it in "
                         "windows), not both", field=truncate_field)
    seq = min(PIPELINE_SEQ_LEN, max_len) if max_seq_len is None else max_seq_len
    if seq > max_len:
        raise Validation(f"{FIELD} is {seq}, over this model's limit of {max_len} tokens", field=prefix + "max_seq_len")
    stride = min(seq // 2, PIPELINE_STRIDE) if doc_stride is None else doc_stride
    if stride > seq:
        raise Validation(f"{FIELD} ({stride}) is larger than max_seq_len ({seq})", field=prefix + "doc_stride")
    return Windows(seq, stride)


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
    doc_stride: DocStride | None = Field(None, description="context tokens each window shares with the one "
                                         "before (default min(max_seq_len // 2, 128))")
    max_question_len: conint(strict=True, ge=1) | None = Field(
        None, description="no effect, as in the pipeline with a fast tokenizer (the question is kept whole)")
    max_seq_len: SeqLength | None = Field(None, description="tokens per window (default min(384, max_len))")


class QuestionAnsweringRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": {"question": "Where do I live?", "context": "My name is Clara and I live in Berkeley."}}]})

    inputs: QuestionAnsweringInput
    parameters: QuestionAnsweringParameters | None = None
    truncate: StrictBool | None = Field(None, description="cut the context of a pair longer than max_len tokens "
                                        "(as TEI's truncate on its other routes) instead of reading it in the "
                                        "pipeline's windows (false or null)")


def params(body: QuestionAnsweringRequest, max_len: int) -> SpanParams:
    """The head's params for the pipeline's, for a model of `max_len` tokens."""
    p = body.parameters or QuestionAnsweringParameters()
    given = {k: v for k, v in p.model_dump(include={"top_k", "max_answer_len", "handle_impossible_answer",
                                                   "align_to_words"}).items() if v is not None}
    return SpanParams(truncate=bool(body.truncate), **given,
                      windows=windows(p.doc_stride, p.max_seq_len, max_len, bool(body.truncate), "parameters.",
                                      by_default=True))


def _answers(result, _) -> dict | list[dict]:
    answers = [{"score": a.score, "start": a.start, "end": a.end, "answer": a.answer} for a in result.data[0].answers]
    return answers[0] if len(answers) == 1 else answers  # the pipeline's shape


# a HeadResult of one pair; the engine's figure bounds the spans, 16 bytes the list's brackets
ANSWERS = Writer(lambda r, _: r.answer_bytes + 16, _answers, "ask for a smaller top_k")
