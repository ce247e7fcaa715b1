"""Bodies of the compatible routes (OpenAI embeddings, KServe v2), with OpenAPI examples. The
OpenAI request is parsed with these models; the KServe ones document what the router parses
by hand (binary tensor data cannot go through a JSON model)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from headwise.service.api.schemas import Usage

# -- OpenAI ----------------------------------------------------------------------------------


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "all-minilm-l6-v2", "input": "The cat sat on the mat."},
        {"input": ["hello", "a longer sentence"], "encoding_format": "base64", "dimensions": 128},
        {"input": [[101, 7592, 2088, 102]]},
    ]})

    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]] = Field(
        ..., description="a text, a list of texts, or token ids (one list or a list of lists). Token "
                         "ids go to the model as they are: no special tokens are added (send "
                         "/v1/tokenize's ids, which carry them)")
    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: little-endian float32 bytes")
    dimensions: StrictInt | None = Field(
        None, description="keep the first n dimensions and re-normalise; 1..d_model")
    user: StrictStr | None = Field(None, description="accepted and ignored")


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingsResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.01, -0.02, 0.03]}],
        "model": "all-minilm-l6-v2", "usage": {"prompt_tokens": 9, "total_tokens": 9}}]})

    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: Usage


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class OpenAIError(BaseModel):
    error: OpenAIErrorBody


# -- KServe v2 / Open Inference Protocol -----------------------------------------------------


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
