"""KServe v2 inference for classification packages (cross-encoders and classifiers), as
Triton would serve such a model: input `text` BYTES [N], and optionally `text_pair` BYTES [N]
(the second text of each pair); outputs `logits` and `scores` FP32 [N, n_labels] (scores: the
sigmoid of a one-label model's logit, else the softmax), through Engine.classify as
/v1/predict, so every number equals /v1/predict's. Triton's classification extension: an
output's `classification: k` parameter answers BYTES [N, k] strings "<value>:<index>:<label>",
the k highest values of that output first. Used by service.api.routers.kserve's infer route.

Token-classification packages (taggers) take `text` BYTES [N] and answer `token_logits` and
`token_scores` FP32 [N, T, n_labels] (each token's softmax) and `attention_mask` INT64 [N, T],
through Engine.tag as /v1/tag: every position of the model's input, zeros past an input's end.
"""

from __future__ import annotations

import numpy as np
from fastapi import Request, Response

from headwise.service.api.compat import kserve
from headwise.service.api.compat import v2tensors as v2
from headwise.service.api.dependencies import disconnect_probe
from headwise.service.api.responses import answer
from headwise.service.api.sizes import JSON_VALUE_BYTES, check_response_bytes
from headwise.service.engine import Engine
from headwise.service.engine.classify import ClassifyParams
from headwise.service.engine.heads.tokens import TagParams
from headwise.service.engine.runtime import Runtime
from headwise.service.errors import InvalidRequest

INPUTS = ("text", "text_pair")
TAKES = "'text' (BYTES [N]) and, for pairs, 'text_pair' (BYTES [N])"
OUTPUTS = ("logits", "scores")
# A classification string's bytes beyond its label's: "-1.234567e+10:12345:" and, in JSON,
# its quotes and comma, or in binary its 4-byte length.
CLASS_BYTES = 32


def inputs_of(rt: Runtime) -> list[dict]:
    return [{"name": name, "datatype": "BYTES", "shape": [-1]} for name in INPUTS]


def outputs_of(rt: Runtime) -> list[dict]:
    n = len(rt.package.labels)
    return [{"name": name, "datatype": "FP32", "shape": [-1, n]} for name in OUTPUTS]


def _outputs(header: dict, binary_default: bool) -> dict[str, tuple[bool, int]]:
    """→ {output name: (as binary?, classification count or 0)}, in the requested order."""
    out: dict[str, tuple[bool, int]] = {}
    for name, params in v2.requested_outputs(header, OUTPUTS, "logits").items():
        k = params.get("classification", 0)
        if type(k) is not int or k < 0:
            raise InvalidRequest(f"output {name!r}: parameter classification must be a non-negative integer")
        out[name] = (v2.flag(params, "binary_data", binary_default), k)
    return out


def _bound(want: dict[str, tuple[bool, int]], n: int, labels: list[str]) -> int:
    """The bytes the outputs take in the body: raw or JSON numbers, or the strings."""
    size = 0
    label_bytes = max(len(s.encode()) for s in labels) * 6  # JSON may escape each byte as \\u00XX
    for binary, k in want.values():
        if k:
            size += n * min(k, len(labels)) * (CLASS_BYTES + label_bytes)
        else:
            size += n * len(labels) * (4 if binary else JSON_VALUE_BYTES["float32"])
    return size


def classification(values: np.ndarray, k: int, labels: list[str]) -> np.ndarray:
    """[N, n] values → [N, min(k, n)] strings "<value>:<index>:<label>", highest first (ties: the
    lower index first)."""
    k = min(k, values.shape[1])
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.array([[f"{values[r, i]:f}:{i}:{labels[i]}" for i in row] for r, row in enumerate(order)],
                    dtype=object).reshape(len(values), k)


async def infer(engine: Engine, rt: Runtime, request: Request, header: dict, binary: memoryview,
                params: dict) -> Response:
    inputs = v2.text_inputs(header, binary, INPUTS, TAKES)
    texts, seconds = inputs["text"], inputs.get("text_pair")
    if seconds is not None and len(seconds) != len(texts):
        raise InvalidRequest(f"input 'text_pair' has {len(seconds)} elements and 'text' {len(texts)}: "
                             "one second text per text")
    want = _outputs(header, v2.flag(params, "binary_data_output", False))
    truncate = v2.flag(params, "truncate", True)
    labels = rt.package.labels
    size = _bound(want, len(texts), labels)
    check_response_bytes(size, engine.settings.max_response_bytes, "send fewer inputs")
    items = texts if seconds is None else list(zip(texts, seconds, strict=True))
    result = await engine.classify(rt, items, ClassifyParams(truncate=truncate), await disconnect_probe(request))
    arrays = {"logits": np.stack([c.logits for c in result.data]).astype(np.float32),
              "scores": np.stack([c.scores for c in result.data]).astype(np.float32)}
    for name, (_, k) in want.items():
        if k:
            arrays[name] = classification(arrays[name], k, labels)
    asked = kserve.Outputs((rt.name, rt.package.version), kserve.echoed_id(header), {name: b for name, (b, _) in want.items()}, size)
    return await answer(engine, kserve.TENSORS, arrays, asked)


TOKEN_OUTPUTS = ("token_logits", "token_scores", "attention_mask")


def token_outputs_of(rt: Runtime) -> list[dict]:
    n = len(rt.package.labels)
    return [{"name": "token_logits", "datatype": "FP32", "shape": [-1, -1, n]},
            {"name": "token_scores", "datatype": "FP32", "shape": [-1, -1, n]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]}]


async def infer_tags(engine: Engine, rt: Runtime, request: Request, header: dict, binary: memoryview,
                     params: dict) -> Response:
    texts = v2.text_inputs(header, binary, ("text",), "one input, 'text' (BYTES [N])")["text"]
    want = v2.plain_outputs(header, TOKEN_OUTPUTS, ("token_logits",), v2.flag(params, "binary_data_output", False))
    result = await engine.tag(rt, texts, TagParams(truncate=v2.flag(params, "truncate", True)),
                              await disconnect_probe(request))
    lengths = [t.encoding.length for t in result.data]
    n, t, k = len(lengths), max(lengths), len(rt.package.labels)
    cells = {"token_logits": n * t * k, "token_scores": n * t * k, "attention_mask": n * t}
    size = sum(cells[name] * (8 if as_binary else JSON_VALUE_BYTES["float32"]) for name, as_binary in want.items())
    asked = kserve.Outputs((rt.name, rt.package.version), kserve.echoed_id(header), want, size, lengths, n_labels=k)
    return await answer(engine, kserve.TOKENS, result, asked)
