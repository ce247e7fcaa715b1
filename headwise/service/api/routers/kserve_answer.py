"""KServe v2 inference for extractive question-answering packages (`*ForQuestionAnswering`):
inputs `question` and `context`, BYTES [N] each (pair i is question i with context i);
outputs `answer` BYTES, `score` FP32, `start` and `end` INT64, each [N, top_k], through
Engine.submit as /v1/answer, so every answer equals /v1/answer's: best first, `start` and `end`
character offsets into the context. Where an input has fewer than top_k answers (alike spans
merged, or fewer possible), its row is padded with "", score 0 and offsets -1. The request's
`parameters` carry /v1/answer's options: `top_k`, `max_answer_len`, `handle_impossible_answer`,
`align_to_words` and `truncate` (false: a longer pair is refused). Used by
service.api.routers.kserve's infer route.
"""

from __future__ import annotations

import numpy as np
from fastapi import Request, Response

from headwise.service.api.compat import kserve
from headwise.service.api.compat import v2tensors as v2
from headwise.service.api.compat.qa_pipeline import BOUNDS, windows  # /v1/answer's
from headwise.service.api.dependencies import disconnect_probe
from headwise.service.api.responses import answer
from headwise.service.api.sizes import CHAR_BYTES, JSON_VALUE_BYTES
from headwise.service.engine import Engine
from headwise.service.engine.heads.extractive import SpanParams
from headwise.service.engine.runtime import Runtime
from headwise.service.errors import InvalidRequest

INPUTS = ("question", "context")
TAKES = "'question' and 'context' (BYTES [N] each)"
OUTPUTS = ("answer", "score", "start", "end")
DATATYPES = {"answer": "BYTES", "score": "FP32", "start": "INT64", "end": "INT64"}
STRING_BYTES = 8  # a BYTES element's 4-byte length, or its JSON quotes and comma


def inputs_of(rt: Runtime) -> list[dict]:
    return [{"name": name, "datatype": "BYTES", "shape": [-1]} for name in INPUTS]


def outputs_of(rt: Runtime) -> list[dict]:
    return [{"name": name, "datatype": DATATYPES[name], "shape": [-1, -1]} for name in OUTPUTS]


def _count(params: dict, key: str, default: int | None) -> int | None:
    v = params.get(key, default)
    if v is None:
        return None
    low, high = BOUNDS[key]
    if type(v) is not int or not low <= v <= high:
        raise InvalidRequest(f"parameter {key} must be an integer in {low}..{high}")
    return v


def span_params(params: dict, max_len: int) -> SpanParams:
    """The head's params from the request's `parameters`, for a model of `max_len` tokens
    (unknown ones are ignored, as KServe's other parameters are)."""
    truncate = v2.flag(params, "truncate", False)
    return SpanParams(truncate=truncate, top_k=_count(params, "top_k", 1),
                      max_answer_len=_count(params, "max_answer_len", 15),
                      handle_impossible_answer=v2.flag(params, "handle_impossible_answer", False),
                      align_to_words=v2.flag(params, "align_to_words", True),
                      windows=windows(_count(params, "doc_stride", None), _count(params, "max_seq_len", None), max_len,
                                      truncate, "parameters.", "parameters.truncate"))


def _outputs(header: dict, binary_default: bool) -> dict[str, bool]:
    """→ {output name: as binary?}, in the requested order; all four when none is named."""
    return v2.plain_outputs(header, OUTPUTS, OUTPUTS, binary_default)


def arrays(result, k: int) -> dict[str, np.ndarray]:
    """Each input's answers as [N, k] rows, padded past its last answer."""
    n = len(result.data)
    out = {"answer": np.full((n, k), "", dtype=object), "score": np.zeros((n, k), np.float32),
           "start": np.full((n, k), -1, np.int64), "end": np.full((n, k), -1, np.int64)}
    for i, spans in enumerate(result.data):
        for j, a in enumerate(spans.answers):
            out["answer"][i, j], out["score"][i, j], out["start"][i, j], out["end"][i, j] = (
                a.answer, a.score, a.start, a.end)
    return out


def _bound(want: dict[str, bool], got: dict[str, np.ndarray]) -> int:
    """The bytes the outputs take in the body: raw or JSON numbers, or the strings (every
    character escaped at worst)."""
    size = 0
    for name, binary in want.items():
        a = got[name]
        if a.dtype == object:
            size += sum(CHAR_BYTES * len(s) + STRING_BYTES for s in a.reshape(-1).tolist())
        else:
            size += a.size * (a.itemsize if binary else JSON_VALUE_BYTES["float32"])
    return size


async def infer(engine: Engine, rt: Runtime, request: Request, header: dict, binary: memoryview,
                params: dict) -> Response:
    inputs = v2.text_inputs(header, binary, INPUTS, TAKES)
    questions, contexts = inputs["question"], inputs.get("context")
    if contexts is None:
        raise InvalidRequest("input 'context' is missing")
    if len(contexts) != len(questions):
        raise InvalidRequest(f"input 'context' has {len(contexts)} elements and 'question' {len(questions)}: "
                             "one context per question")
    want = _outputs(header, v2.flag(params, "binary_data_output", False))
    sp = span_params(params, rt.package.max_len)
    result = await engine.answer(rt, list(zip(questions, contexts, strict=True)), sp,
                                 await disconnect_probe(request), field="question")  # pair i: question[i]
    got = arrays(result, sp.top_k)
    asked = kserve.Outputs((rt.name, rt.package.version), kserve.echoed_id(header), want, _bound(want, got))
    return await answer(engine, kserve.TENSORS, got, asked)
