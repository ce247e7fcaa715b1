"""KServe v2 (the Open Inference Protocol) bodies, with OpenAPI examples: they document what the
router parses by hand (binary tensor data cannot go through a JSON model); the tensors
themselves are compat/v2tensors.py's."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
