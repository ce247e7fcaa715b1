"""OpenAI's embeddings wire format: the request `/v1/embeddings` is parsed with, its answer, its
writer and its error body (also vLLM's), with OpenAPI examples."""

from __future__ import annotations

import base64
import sys
from typing import Literal, NamedTuple

import ml_dtypes
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api.compat.vllm import CUT_SIDE, SPECIALS, Side
from headwise.service.api.schemas import Usage
from headwise.service.api.writer import Writer, counted

EmbedDType = Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
Endianness = Literal["native", "big", "little"]
# vLLM's embed_dtype → the numpy type its bytes are written in (bfloat16 and fp8 by ml_dtypes,
# rounded to nearest even as torch's `.to` rounds them)
E4M3_MAX = 448.0
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


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
        "float", description="base64: the vector's bytes, float32 little-endian unless embed_dtype and "
                             "endianness say otherwise")
    dimensions: StrictInt | None = Field(
        None, description="keep the first n dimensions and re-normalise (not with normalize: false); 1..d_model")
    normalize: StrictBool | None = Field(
        None, description="vLLM's: false answers the pooled vector unnormalised (refused for a model that "
                          "normalises inside its graph); null or true: normalised")
    embed_dtype: EmbedDType = Field("float32", description="vLLM's: the number format of base64's bytes (the "
                                                           "vector rounded to it); float answers ignore it")
    endianness: Endianness = Field("native", description="vLLM's: the byte order of base64's bytes; native: "
                                                         "the server's (" + sys.byteorder + ")")
    priority: StrictInt = Field(0, description="vLLM's: 0 only (no priority scheduling)")
    user: StrictStr | None = Field(None, description="accepted and ignored")
    truncate_prompt_tokens: StrictInt | None = Field(
        None, ge=-1, description="vLLM's: k cuts each text to k tokens, special tokens included, as the "
                                 "tokenizer's truncation at max_length=k; null or -1: at the model's max_len")
    truncation_side: Side = Field(None, description=CUT_SIDE)
    add_special_tokens: StrictBool = Field(True, description=SPECIALS + " (token ids are used as they are either way)")


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


def shorten(v: np.ndarray, n: int, normalize: bool = True) -> np.ndarray:
    """First n dimensions, re-normalised unless `normalize` is false (what OpenAI's `dimensions`
    does, and vLLM's Matryoshka cut)."""
    if n >= len(v):
        return v
    if not normalize:
        return v[:n]
    w = np.asarray(v[:n], dtype=np.float64)
    return (w / max(np.linalg.norm(w), 1e-12)).astype(np.float32)


def packed(v: np.ndarray, dtype: EmbedDType = "float32", endianness: Endianness = "little") -> bytes:
    """The vector's bytes in vLLM's embed_dtype and byte order (its tensor2binary)."""
    order = sys.byteorder if endianness == "native" else endianness
    a = np.asarray(v, dtype=np.float32)
    if dtype == "fp8_e4m3":  # it has no infinity: torch saturates at its largest finite value
        a = np.clip(a, -E4M3_MAX, E4M3_MAX)  # (NaN stays NaN); ml_dtypes would answer NaN
    with np.errstate(over="ignore"):  # a value past float16's range is its infinity, as torch's
        a = a.astype(DTYPES[dtype])
    if a.itemsize > 1 and order != sys.byteorder:
        a = a.view(f"u{a.itemsize}").byteswap()
    return a.tobytes()


class Embeddings(NamedTuple):
    """/v1/embeddings' request as its answer reads it."""

    cut: int | None  # `dimensions`, for a model with Matryoshka dimensions
    base64: bool  # encoding_format: base64
    normalize: bool  # false: `cut` is not normalised again
    dtype: EmbedDType  # base64's bytes
    endianness: Endianness


def _embeddings(result, q: Embeddings) -> dict:
    data = []
    for i, e in enumerate(result.data):
        emb = e.sentence
        if q.cut is not None:
            emb = shorten(emb, q.cut, q.normalize)
        if q.base64:
            emb = base64.b64encode(packed(emb, q.dtype, q.endianness)).decode("ascii")
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {"object": "list", "data": data, "model": result.model, "usage": result.usage}


# an EmbedResult; the engine's bound (it counts tokens it does not send: an upper bound)
EMBEDDINGS = Writer(counted, _embeddings)
