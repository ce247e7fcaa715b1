"""KServe v2 (the Open Inference Protocol) bodies, with OpenAPI examples: they document what the
router parses by hand (binary tensor data cannot go through a JSON model); the tensors
themselves are compat/v2tensors.py's. And the infer answers' writers: TENSORS (a classifier's
arrays, which the route made), EMBEDDING (an embedding model's) and TOKENS (a tagger's), the
last two padded here to the batch's longest input."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from headwise.service.api.compat import v2tensors as v2
from headwise.service.api.sizes import CHAR_BYTES, ENVELOPE_BYTES
from headwise.service.api.writer import Raw, Writer

OUTPUT_BYTES = 160  # an output's JSON beside its data: {"name", "datatype", "shape", "parameters": {...}}


class V2Error(BaseModel):
    error: str


class V2TensorMeta(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class V2ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[V2TensorMeta]
    outputs: list[V2TensorMeta]


class V2Duration(BaseModel):
    count: int
    ns: int = Field(..., description="nanoseconds, summed over `count`")


class V2InferStats(BaseModel):
    success: V2Duration = Field(..., description="requests answered; ns: queued → answered")
    fail: V2Duration = Field(..., description="requests that failed once queued")
    queue: V2Duration = Field(..., description="queued → its batch starts (tokenising left out)")
    compute_input: V2Duration = Field(..., description="tokenising and building the batch's feeds")
    compute_infer: V2Duration = Field(..., description="onnxruntime's run")
    compute_output: V2Duration = Field(..., description="cutting each answer out of the outputs")
    cache_hit: V2Duration
    cache_miss: V2Duration


class V2BatchStats(BaseModel):
    batch_size: int
    compute_input: V2Duration
    compute_infer: V2Duration
    compute_output: V2Duration


class V2ModelStat(BaseModel):
    name: str
    version: str
    last_inference: int = Field(..., description="ms since the epoch; 0: none yet")
    inference_count: int = Field(..., description="inputs run")
    execution_count: int = Field(..., description="batches run")
    inference_stats: V2InferStats
    response_stats: dict
    batch_stats: list[V2BatchStats]
    memory_usage: list


class V2ModelStats(BaseModel):
    """Triton's statistics extension (GET /v2/models[/{name}[/versions/{v}]]/stats)."""

    model_stats: list[V2ModelStat]


class V2ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class V2Input(BaseModel):
    name: str = Field(..., description="'text'")
    datatype: str = Field(..., description="'BYTES'")
    shape: list[int] = Field(..., description="[N] (or [N, 1])")
    data: Any = Field(None, description="N strings, flat or nested; absent when sent as binary")
    parameters: dict[str, Any] | None = Field(
        None, description="binary_data_size: this input's bytes after the JSON header "
                          "(each element a 4-byte little-endian length, then UTF-8)")


class V2RequestedOutput(BaseModel):
    name: str = Field(..., description="sentence_embedding | last_hidden_state | attentions | attention_mask")
    parameters: dict[str, Any] | None = Field(None, description="binary_data: true for raw bytes")


class V2InferRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["hello", "world"]}]},
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["Attention is all you need."]}],
         "outputs": [{"name": "attentions", "parameters": {"binary_data": True}}, {"name": "attention_mask"}],
         "parameters": {"attention_layers": "0,5", "attention_heads": "0,3", "attention_dtype": "FP16"}},
    ]})

    id: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="binary_data_output (bool: every output as binary); attention_layers and "
                          "attention_heads (int, list or comma-separated string; default all); "
                          "attention_dtype FP32 | FP16; normalize, truncate (bool, default true)")
    inputs: list[V2Input]
    outputs: list[V2RequestedOutput] | None = Field(None, description="default: sentence_embedding")


class V2Output(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    data: list | None = None
    parameters: dict[str, Any] | None = None


class V2InferResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model_name": "all-minilm-l6-v2", "model_version": "1",
        "outputs": [{"name": "sentence_embedding", "datatype": "FP32", "shape": [1, 3], "data": [0.1, 0.2, 0.3]}]}]})

    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[V2Output]


# -- the answers -------------------------------------------------------------------------------

class Outputs(NamedTuple):
    """An infer request as its answer reads it."""

    model: tuple[str, str]  # its name and version
    id: str | None  # the request's id, echoed when it is a string
    binary: dict[str, bool]  # each output asked for, in the order asked: as binary data?
    size: int  # the outputs' bound in bytes: raw, JSON numbers or strings (the route counts each output's cells)
    lengths: tuple[int, ...] | list[int] = ()  # each input's tokens, to pad to the longest (EMBEDDING, TOKENS)
    attention_dtype: str = "float32"  # EMBEDDING's attentions
    n_labels: int = 0  # TOKENS' last axis


def echoed_id(header: dict) -> str | None:
    """The request's `id`, echoed in the answer when it is a string."""
    return header["id"] if isinstance(header.get("id"), str) else None


def encode_outputs(arrays: dict[str, np.ndarray], q: Outputs) -> Raw:
    """The outputs `q` asks for, from `arrays`, as JSON or with their binary data after the
    JSON header (its length in Inference-Header-Content-Length)."""
    outs, buffers = [], []
    for name, binary in q.binary.items():
        a = arrays[name]
        if a.dtype == object:  # the classification extension's strings
            o, raw = v2.bytes_output(name, list(a.shape), a.reshape(-1).tolist(), binary)
        else:
            o, raw = v2.output(name, v2.datatype_of(a), a, binary)
        outs.append(o)
        if raw is not None:
            buffers.append(raw)
    head = {"model_name": q.model[0], "model_version": q.model[1], "outputs": outs}
    if q.id is not None:
        head["id"] = q.id
    body, n = v2.encode_response(head, buffers)
    if n is None:
        return Raw(body)
    return Raw(body, "application/octet-stream", ((v2.HEADER.encode(), str(n).encode()),))


def _sized(_result, q: Outputs) -> int:
    """The route's count of the outputs' cells, and what surrounds them: the model's name and
    version, the echoed id (any length: every character escaped at worst), and each output's
    name, datatype, shape and binary_data_size."""
    echoed = len(q.id or "") + len(q.model[0]) + len(q.model[1])
    return q.size + ENVELOPE_BYTES + OUTPUT_BYTES * len(q.binary) + CHAR_BYTES * echoed


# the arrays the route made (a classifier's logits and scores, and its classification strings)
TENSORS = Writer(_sized, encode_outputs, "send fewer inputs", raw=True)


def pad_tokens(arrays: list[np.ndarray], t: int) -> np.ndarray:
    """[T_i, d] per input → [N, t, d], zeros past each input's end."""
    out = np.zeros((len(arrays), t, arrays[0].shape[-1]), dtype=np.float32)
    for i, a in enumerate(arrays):
        out[i, :len(a)] = a
    return out


def pad_attention(arrays: list[np.ndarray], t: int, dtype: str) -> np.ndarray:
    """[..., T_i, T_i] per input ([L, H], [L] or nothing before) → [N, ..., t, t], zeros past
    each input's end."""
    out = np.zeros((len(arrays), *arrays[0].shape[:-2], t, t), dtype=dtype)
    for i, a in enumerate(arrays):
        n = a.shape[-1]
        out[i, ..., :n, :n] = a
    return out


def pad_hidden(arrays: list[np.ndarray], t: int) -> np.ndarray:
    """[L', T_i, d] per input → [N, L', t, d], zeros past each input's end; pooled [L', d] → [N, L', d]."""
    if arrays[0].ndim == 2:
        return np.stack(arrays).astype(np.float32)
    out = np.zeros((len(arrays), arrays[0].shape[0], t, arrays[0].shape[-1]), dtype=np.float32)
    for i, a in enumerate(arrays):
        out[i, :, :a.shape[1]] = a
    return out


def attention_mask(lengths: list[int], t: int) -> np.ndarray:
    """[N, t] int64: 1 at each input's real positions."""
    return (np.arange(t)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)


def _embedding(result, q: Outputs) -> Raw:
    """An EmbedResult's outputs (None: the attention mask alone), padded to the longest input."""
    t = max(q.lengths)
    arrays = {"attention_mask": attention_mask(q.lengths, t)}
    if "sentence_embedding" in q.binary:
        arrays["sentence_embedding"] = np.stack([e.sentence for e in result.data]).astype(np.float32)
    if "last_hidden_state" in q.binary:
        arrays["last_hidden_state"] = pad_tokens([e.tokens for e in result.data], t)
    if "attentions" in q.binary:
        arrays["attentions"] = pad_attention([e.attention["data"] for e in result.data], t, q.attention_dtype)
    if "hidden_states" in q.binary:
        arrays["hidden_states"] = pad_hidden([e.hidden["data"] for e in result.data], t)
    return encode_outputs(arrays, q)


EMBEDDING = Writer(_sized, _embedding, "ask for fewer inputs, layers or heads, or binary outputs", raw=True)


def _tokens(result, q: Outputs) -> Raw:
    """A TagResult's token_logits and token_scores [N, T, n_labels], zeros past each input's
    end, and its attention_mask [N, T]."""
    n, t, k = len(q.lengths), max(q.lengths), q.n_labels
    arrays = {"attention_mask": attention_mask(q.lengths, t)}
    for name, field in (("token_logits", "logits"), ("token_scores", "scores")):
        if name in q.binary:
            a = np.zeros((n, t, k), dtype=np.float32)
            for i, tagged in enumerate(result.data):
                a[i, :q.lengths[i]] = getattr(tagged, field)
            arrays[name] = a
    return encode_outputs(arrays, q)


TOKENS = Writer(_sized, _tokens, "send fewer or shorter texts, or binary outputs", raw=True)
