"""Request and response bodies of the native routes (docs/api.md), with OpenAPI examples."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.engine.heads import HEADS
from headwise.service.engine.internals import Ablation
from headwise.service.package import GENERATION

Task = Literal[(*HEADS, GENERATION)]  # a package's task: an encoder's head, or generation

Inputs = StrictStr | list[StrictStr]


class AttentionOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layers: list[StrictInt] | None = Field(None, description="layer indices; null: all")
    heads: list[StrictInt] | None = Field(None, description="head indices; null: all")
    format: Literal["dense", "topk"] = "dense"
    top_k: StrictInt = Field(8, ge=1, le=4096, description="keys kept per query row with format topk")
    dtype: Literal["float32", "float16"] = "float32"
    encoding: Literal["json", "base64"] = Field(
        "json", description="base64: little-endian raw bytes of the array in `shape` order, C order")
    aggregate: Literal["none", "mean", "rollout"] = Field(
        "none", description="none: [L,H,T,T]; mean: the selected heads' mean per selected layer [L,T,T]; "
        "rollout: attention rollout over the selected layers (head means inside) [T,T]")

    def spec(self, rt):
        """The engine's AttentionSpec of these options for the model `rt` (Validation for an
        index out of range)."""
        return rt.attention_spec(self.layers, self.heads, format=self.format, top_k=self.top_k, dtype=self.dtype,
                                 encoding=self.encoding, aggregate=self.aggregate)


class HiddenStatesOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layers: list[StrictInt] | None = Field(
        None, description="0..n_layers: 0 is the embeddings' output, i the output of layer i; null: all")
    pooling: Literal["none", "mean", "cls"] = Field(
        "none", description="none: [L',T,d_model] per token; mean: over the input's tokens; cls: the first token's "
                            "([L',d_model])")
    dtype: Literal["float32", "float16"] = "float32"
    encoding: Literal["json", "base64"] = Field(
        "json", description="base64: little-endian raw bytes of the array in `shape` order, C order")


# {"<layer>": [heads]}: those heads' outputs zeroed before W_O (docs/analytics.md)
Ablate = dict[StrictStr, list[StrictInt]]


def ablation(rt, ablate: Ablate | None) -> Ablation | None:
    """The engine's Ablation of a request's `ablate` for the model `rt` (None: nothing asked;
    Validation naming `ablate.<layer>` for a key or index out of range)."""
    return Ablation.select(rt.package.n_layers, rt.package.n_heads, ablate)


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "The cat sat on the mat."},
        {"model": "all-minilm-l6-v2", "inputs": ["hello", "a longer sentence"], "normalize": True},
        {"inputs": "Attention is all you need.",
         "attention": {"layers": [0, 5], "heads": [0, 3], "format": "dense", "dtype": "float16",
                       "encoding": "base64"}},
        {"inputs": "Attention is all you need.", "hidden_states": {"layers": [0, 3, 6], "pooling": "mean"},
         "ablate": {"2": [0, 5]}},
    ]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: Inputs = Field(..., description="one text or a list of texts")
    prompt_name: StrictStr | None = Field(
        None, description="one of the model's prompts (/v1/models: `prompts`), prepended to each input as "
        "sentence-transformers does; default: HEADWISE_DEFAULT_PROMPT_NAME, else the model's default_prompt_name")
    normalize: StrictBool = Field(True, description="L2-normalise sentence embeddings")
    truncate: StrictBool = Field(True, description="cut inputs at max_len; false: 422 when longer")
    output: Literal["sentence", "tokens"] = Field(
        "sentence", description="sentence: pooled [d_model]; tokens: last hidden state [T, d_model]")
    attention: AttentionOptions | None = Field(None, description="return per-head attention weights")
    hidden_states: HiddenStatesOptions | None = Field(None, description="return chosen layers' hidden states")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: answer with those heads removed')


class AttentionData(BaseModel):
    layers: list[int]
    heads: list[int]
    aggregate: str = "none"
    format: str
    shape: list[int]
    dtype: str
    encoding: str
    index_dtype: str | None = None
    data: Any = Field(..., description="dense: [L,H,T,T] array or base64; topk: {indices, values}")


class HiddenStatesData(BaseModel):
    layers: list[int]
    pooling: str
    dtype: str
    encoding: str
    shape: list[int]
    data: Any = Field(..., description="[L',T,d_model] (pooling none) or [L',d_model] array, or base64")


class EmbedItem(BaseModel):
    index: int
    embedding: list[float] | list[list[float]]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    attention: AttentionData | None = None
    hidden_states: HiddenStatesData | None = None
    prompt_span: tuple[int, int] | None = Field(
        None, description="with a prompt: [start, end), the positions in `tokens` of the prompt's tokens")


class PromptUsed(BaseModel):
    name: str
    text: str = Field(..., description="prepended to each input; `offsets` count from its start")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbedResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "all-minilm-l6-v2",
        "data": [{"index": 0, "embedding": [0.01, -0.02, 0.03],
                  "tokens": ["[CLS]", "hello", "[SEP]"], "offsets": [[0, 0], [0, 5], [0, 0]]}],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }]})

    model: str
    prompt: PromptUsed | None = Field(None, description="the prompt prepended to each input, when one was")
    data: list[EmbedItem]
    usage: Usage = Field(..., description="tokens read, the prompt's included")


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": ["Hello world!"]}]})

    model: StrictStr | None = None
    inputs: Inputs
    truncate: StrictBool = True


class TokenizeItem(BaseModel):
    index: int
    tokens: list[str]
    ids: list[int]
    offsets: list[tuple[int, int]]


class TokenizeResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "all-minilm-l6-v2",
        "data": [{"index": 0, "tokens": ["[CLS]", "hello", "world", "!", "[SEP]"],
                  "ids": [101, 7592, 2088, 999, 102], "offsets": [[0, 0], [0, 5], [6, 11], [11, 12], [0, 0]]}],
        "usage": {"prompt_tokens": 5, "total_tokens": 5},
    }]})

    model: str
    data: list[TokenizeItem]
    usage: Usage


class ModelCard(BaseModel):
    """OpenAI's model object (id, object, created, owned_by) with headwise's facts beside it:
    what a runtime's `card()` says, for every kind. Keys a kind lacks are left out."""

    id: str = Field(..., description="the model's name (OpenAI's `id`), or an alias of it")
    alias_of: str | None = Field(None, description="for an alias (HEADWISE_SERVED_MODEL_NAMES): the package it "
                                 "names")
    object: Literal["model"] = "model"
    created: int = Field(..., description="the package's export time (manifest created_at), Unix seconds; 0 if unknown")
    owned_by: str = Field("headwise", description="always headwise")
    name: str
    version: str
    family: str
    architecture: str
    task: Task
    labels: list[str] | None = Field(None, description="a classification model's labels, in logit order")
    mask_token: str | None = Field(None, description="a fill-mask model's mask token, which its inputs carry")
    n_layers: int
    n_encoder_layers: int | None = Field(None, description="an encoder-decoder's encoder layers (generative models)")
    n_heads: int
    d_model: int
    max_len: int
    pooling: str | None = Field(..., description="an encoder's pooling; null for generative models")
    prompts: dict[str, str] | None = Field(None, description="an embedding model's prompts (`prompt_name`)")
    default_prompt_name: str | None = Field(None, description="the prompt used when a request names none")
    matryoshka_dimensions: list[int] | None = Field(
        None, description="an embedding model's sizes it may be cut to (`dimensions`); empty: none")
    normalize: bool
    provider: str | None
    precision: str | None
    variants: dict[str, dict]
    attention: bool
    generate: dict | None = Field(None, description="a generative model's input field, special tokens and limits")
    ready: bool


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    code: int


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_responses(*codes: int) -> dict:
    return {c: {"model": ErrorResponse} for c in codes}
