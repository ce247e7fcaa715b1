"""KServe v2 / Open Inference Protocol (works unchanged with `tritonclient.http`), with Triton's
binary tensor data extension for inputs and outputs.

Inference goes through Engine.embed as POST /v1/embed does, so every output equals what
/v1/embed returns for the same texts and attention request. `attentions` [N, L, H, T, T] and
`last_hidden_state` [N, T, d] are zero-padded to the batch's longest input, as is
`hidden_states` [N, L', T, d] (chosen layers, per token; [N, L', d] pooled); `attention_mask`
[N, T] says which positions are real. Classification packages (cross-encoders, classifiers)
take `text` and `text_pair` and answer `logits` and `scores` (service.api.routers.kserve_classify).
Errors: {"error": "..."} (service.errors).
"""

from __future__ import annotations

import zlib

from fastapi import APIRouter, Depends, Request

from headwise.service.api.body import read_body
from headwise.service.api.compat import kserve
from headwise.service.api.compat import v2tensors as v2
from headwise.service.api.compat.kserve import (
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2ModelMetadata,
    V2ModelStats,
    V2ServerMetadata,
)
from headwise.service.api.compat.openapi import request_body
from headwise.service.api.dependencies import disconnect_probe, get_engine, require_api_key
from headwise.service.api.errors import KSERVE, UnsupportedMediaType, route_class
from headwise.service.api.responses import answer, json_response, probe
from headwise.service.api.routers import kserve_answer, kserve_classify
from headwise.service.api.sizes import JSON_VALUE_BYTES
from headwise.service.engine import Capability, Engine, Runtime, prompts
from headwise.service.engine.heads.extractive import ANSWER
from headwise.service.engine.internals import POOLINGS, HiddenSpec
from headwise.service.engine.params import AGGREGATES, EmbedParams
from headwise.service.engine.values import ascii_index
from headwise.service.errors import InvalidRequest, NotFound, TooLarge

router = APIRouter(tags=["kserve v2"], route_class=route_class(KSERVE))
AUTH = [Depends(require_api_key)]
ERRORS = {c: {"model": V2Error} for c in (400, 401, 404, 413, 422, 429, 503)}
INPUT = "text"
ATTENTION_DTYPES = {"FP32": "float32", "FP16": "float16"}
BINARY_DOC = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}, "description":
              "binary tensor data extension: the JSON request (Inference-Header-Content-Length "
              "bytes), then each binary input's bytes in order"}}


def _runtime(request: Request, engine: Engine, model: str, version: str | None) -> Runtime:
    """The model, at `version` when one is named, named on the request (as dependencies.model_for)."""
    rt = engine.get(model)
    if version is not None and version != rt.package.version:
        raise NotFound(f"model {rt.name} has no version {version}; served: {rt.package.version}")
    request.state.model = rt.name
    return rt


def outputs_of(rt: Runtime) -> list[dict]:
    p = rt.package
    out = [{"name": "sentence_embedding", "datatype": "FP32", "shape": [-1, p.embedding_dim]},  # after Dense layers
           {"name": "last_hidden_state", "datatype": "FP32", "shape": [-1, -1, p.d_model]}]
    analyser = Capability.ANALYSE.declared(rt)
    inside = analyser.serves if analyser else lambda role: False  # a generator: the mask only
    if inside("attention"):
        out.append({"name": "attentions", "datatype": "FP32", "shape": [-1, p.n_layers, p.n_heads, -1, -1]})
    if inside("analysis"):  # [N, L', T, d] per token, [N, L', d] pooled (parameters below)
        out.append({"name": "hidden_states", "datatype": "FP32", "shape": [-1, -1, -1, p.d_model]})
    out.append({"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]})
    return out


# -- health and metadata ------------------------------------------------------------------

@router.get("/v2", response_model=V2ServerMetadata, dependencies=AUTH, responses=ERRORS)
async def server_metadata(request: Request):
    return json_response({"name": "headwise", "version": request.app.version,
                          "extensions": ["binary_tensor_data", "classification", "statistics"]})


@router.get("/v2/health/live", responses=ERRORS)
async def live(engine: Engine = Depends(get_engine)):
    return probe(KSERVE, engine.check_live, {"live": True})


@router.get("/v2/health/ready", responses=ERRORS)
async def ready(engine: Engine = Depends(get_engine)):
    return probe(KSERVE, engine.check_ready, {"ready": True})


@router.get("/v2/models/{model}/ready", responses=ERRORS)
@router.get("/v2/models/{model}/versions/{version}/ready", responses=ERRORS)
async def model_ready(model: str, request: Request, version: str | None = None,
                      engine: Engine = Depends(get_engine)):
    rt = _runtime(request, engine, model, version)
    return probe(KSERVE, lambda: engine.check_ready(rt), {"name": rt.name, "ready": True})


@router.get("/v2/models/stats", response_model=V2ModelStats, dependencies=AUTH, responses=ERRORS)
@router.get("/v2/models/{model}/stats", response_model=V2ModelStats, dependencies=AUTH, responses=ERRORS)
@router.get("/v2/models/{model}/versions/{version}/stats", response_model=V2ModelStats, dependencies=AUTH,
            responses=ERRORS)
async def model_stats(request: Request, model: str | None = None, version: str | None = None,
                      engine: Engine = Depends(get_engine)):
    """Triton's statistics extension: per model, its requests' successes and failures and the
    time they spent queued, tokenising and building feeds (compute_input), in onnxruntime
    (compute_infer) and cutting answers (compute_output), and the same per batch size
    (service.engine.stats). Every served model when none is named."""
    rts = [_runtime(request, engine, model, version)] if model is not None else engine.models.values()
    return json_response({"model_stats": [rt.stats.json(rt.name, rt.package.version) for rt in rts]})


@router.get("/v2/models/{model}", response_model=V2ModelMetadata, dependencies=AUTH, responses=ERRORS)
@router.get("/v2/models/{model}/versions/{version}", response_model=V2ModelMetadata, dependencies=AUTH,
            responses=ERRORS)
async def model_metadata(model: str, request: Request, version: str | None = None,
                         engine: Engine = Depends(get_engine)):
    rt = _runtime(request, engine, model, version)
    if clf := Capability.CLASSIFY.declared(rt):
        inputs, outputs = kserve_classify.inputs_of(clf), kserve_classify.outputs_of(clf)
    elif tagger := Capability.TAG.declared(rt):
        inputs = [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}]
        outputs = kserve_classify.token_outputs_of(tagger)
    elif answerer := ANSWER.declared(rt):
        inputs, outputs = kserve_answer.inputs_of(answerer), kserve_answer.outputs_of(answerer)
    elif Capability.EMBED in rt.capabilities:
        inputs, outputs = [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}], outputs_of(rt)
    else:  # no embeddings (422 when asked); its tokens' mask only
        inputs = [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}]
        outputs = [o for o in outputs_of(rt) if o["name"] == "attention_mask"]
    return json_response({"name": rt.name, "versions": [rt.package.version], "platform": "onnxruntime_onnx",
                          "inputs": inputs, "outputs": outputs})


# -- inference ----------------------------------------------------------------------------

# The content types a browser may POST cross-site without asking first (a CORS "simple"
# request): a page elsewhere must not drive inference. tritonclient sends no Content-Type.
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})


async def _body(request: Request) -> bytes:
    """The body, inflated when Content-Encoding says so (tritonclient's request compression),
    to at most the body limit. Refused (415) under a content type a cross-site form could send."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in SIMPLE_TYPES:
        raise UnsupportedMediaType(f"Content-Type {ctype} is not accepted: send application/json, "
                                   "application/octet-stream or none")
    body = await read_body(request)
    enc = request.headers.get("content-encoding", "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc not in ("gzip", "deflate"):
        raise InvalidRequest(f"Content-Encoding {enc!r} is not supported (gzip, deflate)")
    cap = request.app.state.settings.max_body_bytes
    d = zlib.decompressobj(16 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS)
    try:
        out = d.decompress(body, cap + 1)
    except zlib.error:
        raise InvalidRequest(f"the body is not valid {enc} data") from None
    if len(out) > cap:
        raise TooLarge(f"request body over {cap} bytes once inflated")
    return out


def _indices(params: dict, key: str, n: int) -> list[int] | None:
    """attention_layers / attention_heads: int, list of ints or "0,3" (protocol parameters are
    scalars, so a string is the portable form). In a string, each index is plain ASCII digits
    (spaces around the commas allowed): not int()'s "٣", "３", "+3" or "1_0"."""
    v = params.get(key)
    if v is None:
        return None
    try:
        if isinstance(v, str):
            parts = [x.strip() for x in v.split(",") if x.strip()]
            if not all(x.isascii() and x.isdigit() for x in parts):
                raise ValueError
            v = [n if (i := ascii_index(x, n)) is None else i for x in parts]  # n: out of range, below
        elif type(v) is int:
            v = [v]
        elif not (isinstance(v, list) and all(type(x) is int for x in v)):
            raise ValueError
    except ValueError:
        raise InvalidRequest(f"parameter {key}: an integer, a list of integers or a comma-separated string") from None
    if not v or any(not 0 <= i < n for i in v):
        raise InvalidRequest(f"parameter {key}: each must be in 0..{n - 1} and at least one given")
    if len(set(v)) != len(v):
        raise InvalidRequest(f"parameter {key}: each index at most once")
    return v


def _texts(header: dict, binary: memoryview) -> list[str]:
    return v2.text_inputs(header, binary, (INPUT,), "one input, 'text' (BYTES)")[INPUT]


def _outputs(header: dict, rt: Runtime, binary_default: bool) -> dict[str, bool]:
    """→ {output name: as binary?}, in the requested order."""
    return v2.plain_outputs(header, [o["name"] for o in outputs_of(rt)], ("sentence_embedding",), binary_default)


def _hidden_spec(params: dict, rt: Runtime) -> HiddenSpec:
    """hidden_states_layers (as attention_layers, 0..n_layers) and hidden_states_pooling."""
    pooling = params.get("hidden_states_pooling", "none")
    if pooling not in POOLINGS:
        raise InvalidRequest("parameter hidden_states_pooling must be none, mean or cls")
    n = rt.package.n_layers
    return HiddenSpec.select(n, _indices(params, "hidden_states_layers", n + 1), pooling=pooling)


def _response_bound(rt: Runtime, want: dict[str, bool], lengths: list[int], spec, hidden: HiddenSpec | None) -> int:
    """The bytes the padded output tensors take in the body: raw when binary, else as JSON."""
    n, t, p = len(lengths), max(lengths), rt.package
    cells = {"attention_mask": n * t, "sentence_embedding": n * p.embedding_dim, "last_hidden_state": n * t * p.d_model,
             "attentions": n * t * t * (spec.planes() if spec is not None else 0),
             "hidden_states": n * hidden.values(t, p.d_model) if hidden is not None else 0}
    return sum(cells[name] * (8 if binary else JSON_VALUE_BYTES["float32"]) for name, binary in want.items())


@router.post("/v2/models/{model}/infer", response_model=V2InferResponse, dependencies=AUTH, responses=ERRORS,
             openapi_extra=request_body(V2InferRequest, **BINARY_DOC))
@router.post("/v2/models/{model}/versions/{version}/infer", response_model=V2InferResponse,
             dependencies=AUTH, responses=ERRORS, openapi_extra=request_body(V2InferRequest, **BINARY_DOC))
async def infer(model: str, request: Request, version: str | None = None, engine: Engine = Depends(get_engine)):
    """Input `text` BYTES [N] → the outputs asked for by name (default sentence_embedding), as
    JSON or, with `binary_data`, as raw little-endian bytes after the JSON header."""
    rt = _runtime(request, engine, model, version)
    header, binary = v2.split_body(await _body(request), request.headers.get(v2.HEADER))
    params = header.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidRequest("'parameters' must be an object")
    if clf := Capability.CLASSIFY.declared(rt):
        return await kserve_classify.infer(engine, clf, request, header, binary, params)
    if tagger := Capability.TAG.declared(rt):
        return await kserve_classify.infer_tags(engine, tagger, request, header, binary, params)
    if answerer := ANSWER.declared(rt):
        return await kserve_answer.infer(engine, answerer, request, header, binary, params)
    texts = _texts(header, binary)
    want = _outputs(header, rt, v2.flag(params, "binary_data_output", False))
    normalize, truncate = v2.flag(params, "normalize", True), v2.flag(params, "truncate", True)
    spec, att_dtype = None, "float32"
    if "attentions" in want:
        p = rt.package
        dtype = params.get("attention_dtype", "FP32")  # a string only: str() of a deeply nested list raised
        att_dtype = ATTENTION_DTYPES.get(dtype.upper()) if isinstance(dtype, str) else None
        if att_dtype is None:
            raise InvalidRequest("parameter attention_dtype must be FP32 or FP16")
        aggregate = params.get("attention_aggregate", "none")
        if aggregate not in AGGREGATES:
            raise InvalidRequest("parameter attention_aggregate must be none, mean or rollout")
        spec = rt.attention_spec(_indices(params, "attention_layers", p.n_layers),
                                 _indices(params, "attention_heads", p.n_heads), dtype=att_dtype,
                                 aggregate=aggregate)
    hidden = _hidden_spec(params, rt) if "hidden_states" in want else None
    result = None
    if spec is not None or hidden is not None or "sentence_embedding" in want or "last_hidden_state" in want:
        # One engine call for every output; the attention budget counts the padded
        # [N, L, H, T, T] tensor, which is what travels.
        asked = EmbedParams(sentence="sentence_embedding" in want, tokens="last_hidden_state" in want,
                            normalize=normalize, truncate=truncate, attention=spec, padded_attention=True,
                            hidden=hidden)
        prompted = prompts.apply(texts, prompts.default(rt.package, engine.settings.default_prompt_name))
        result = await engine.embed(rt, prompted, asked, await disconnect_probe(request))
        lengths = [e.encoding.length for e in result.data]
    else:  # the attention mask alone
        lengths = [e.length for e in await engine.tokenize(rt, texts, truncate)]
    asked = kserve.Outputs((rt.name, rt.package.version), kserve.echoed_id(header), want,
                           _response_bound(rt, want, lengths, spec, hidden), lengths, attention_dtype=att_dtype)
    return await answer(engine, kserve.EMBEDDING, result, asked)
