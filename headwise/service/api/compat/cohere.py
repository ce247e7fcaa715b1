"""Cohere's v2 embed wire format (its API's /v2/embed; the `cohere` SDK's ClientV2.embed):
the request body with Cohere's names and defaults, its EmbedByTypeResponse and writer, and the
embedding types as pure numpy functions (no HTTP, no engine calls here).

The quantised types. `binary` and `ubinary` are Cohere's and sentence-transformers'
(`quantize_embeddings`): one sign bit per dimension (value > 0 → 1), packed eight to a byte
with numpy.packbits, first dimension in the most significant bit; `ubinary` is the byte
(0..255), `binary` the byte minus 128 (-128..127). `int8` and `uint8` are scalar quantisation,
whose calibration ranges Cohere does not publish: these are headwise's own, one fixed range
[-1, 1] for every dimension of the normalised embedding, the same for every request and model,
so that int8 dot products are proportional to the float ones: int8 = rint(clip(x, -1, 1) · 127)
(numpy's rint: half to even), uint8 = int8 + 128. `base64` is Cohere's: the float32
little-endian bytes of the (shortened) embedding, base64-encoded.
"""

from __future__ import annotations

import base64
import uuid
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from headwise.service.api.compat.openai import shorten
from headwise.service.api.writer import Writer
from headwise.service.engine.tokenizer import LEFT, Truncate
from headwise.service.errors import Validation

EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
BINARY_TYPES = ("binary", "ubinary")
INT8_SCALE = 127  # int8 = rint(clip(x, -1, 1) · 127): headwise's range, Cohere's is unpublished
# The most an answer writes beyond the engine's counted vectors: id, meta and the keys.
ENVELOPE_BYTES = 512


CUTS: dict[str, Truncate] = {"END": True, "START": LEFT, "NONE": False}  # `truncate` → the engine's


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "all-minilm-l6-v2", "texts": ["hello", "a longer sentence"], "input_type": "search_document"},
        {"model": "all-minilm-l6-v2", "texts": ["hello"], "input_type": "search_query",
         "embedding_types": ["float", "int8", "ubinary"], "output_dimension": 128}]})

    model: StrictStr = Field(..., description="the served model's name")
    texts: list[StrictStr] | None = Field(None, description="the texts to embed")
    input_type: Literal["search_document", "search_query", "classification", "clustering", "image"] | None = Field(
        None, description="the model's prompt for that use (search_query: its query prompt; search_document: "
        "its document, passage or corpus prompt; classification, clustering: the prompt of that name); no prompt "
        "for a model with none; 422 for a model with prompts but none for that use; `image` is refused")
    embedding_types: list[EmbeddingType] | None = Field(
        None, description="the types to answer, default [\"float\"]; see docs/api.md for int8/uint8's ranges")
    output_dimension: StrictInt | None = Field(
        None, description="keep the first n dimensions, then normalise; a model's Matryoshka dimensions only")
    truncate: Literal["NONE", "START", "END"] = Field(
        "END", description="END: cut the end at max_len; START: cut the start (the last tokens are kept, "
                           "a prompt's first); NONE: 422 when longer")
    max_tokens: StrictInt | None = Field(None, description="at least max_len (no effect); smaller is refused")
    priority: StrictInt | None = Field(None, description="accepted and without effect")
    images: list[StrictStr] | None = Field(None, description="refused: text models only")
    inputs: list[dict] | None = Field(None, description="refused: send texts")


class ApiVersion(BaseModel):
    version: str = "2"


class BilledUnits(BaseModel):
    input_tokens: int


class ApiMeta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class EmbeddingsByType(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class EmbedResponse(BaseModel):
    """Cohere's EmbedByTypeResponse: only the embedding types asked for are present."""

    id: str
    embeddings: EmbeddingsByType
    texts: list[str]
    meta: ApiMeta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


class CohereError(BaseModel):
    message: str


ERROR_RESPONSES = {c: {"model": CohereError} for c in (400, 401, 404, 413, 422, 429, 503)}


def types_asked(types: list[str] | None) -> list[str]:
    """The embedding types in the order first asked, each once; float when the field is absent
    (or null). An empty list is refused (Validation), as Cohere's API refuses it."""
    if types is None:
        return ["float"]
    if not types:
        raise Validation("embedding_types: an empty list; name at least one type, or leave the field out for "
                         "[\"float\"]", field="embedding_types")
    return list(dict.fromkeys(types))


def to_int8(m: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(np.asarray(m, dtype=np.float64), -1.0, 1.0) * INT8_SCALE).astype(np.int8)


def to_uint8(m: np.ndarray) -> np.ndarray:
    return (to_int8(m).astype(np.int16) + 128).astype(np.uint8)


def to_ubinary(m: np.ndarray) -> np.ndarray:
    """Sign bits (> 0) packed big-endian: d/8 bytes per row (d a multiple of 8)."""
    return np.packbits(np.asarray(m) > 0, axis=-1)


def to_binary(m: np.ndarray) -> np.ndarray:
    return (to_ubinary(m).astype(np.int16) - 128).astype(np.int8)


def to_base64(m: np.ndarray) -> list[str]:
    return [base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii") for row in m]


def embeddings_by_type(m: np.ndarray, types: list[str]) -> dict:
    """{type: every row as that type} for the float32 matrix `m` [N, d], in `types`' order."""
    make = {"float": lambda x: x, "int8": to_int8, "uint8": to_uint8, "binary": to_binary,
            "ubinary": to_ubinary, "base64": to_base64}
    return {t: make[t](m) for t in types}


class Embedding(NamedTuple):
    """/v2/embed's request as its answer reads it."""

    texts: list[str]  # echoed back
    types: list[str]  # embedding_types, in order
    dimension: int  # output_dimension (the first values, re-normalised), else the model's
    echoed: int  # the echoed texts' bound and the envelope (checked before any inference)


def _embeddings(result, q: Embedding) -> dict:
    m = np.stack([e.sentence for e in result.data])
    if q.dimension < m.shape[1]:
        m = np.stack([shorten(v, q.dimension) for v in m])
    return {"id": str(uuid.uuid4()), "embeddings": embeddings_by_type(m, q.types), "texts": q.texts,
            "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": result.n_tokens}},
            "response_type": "embeddings_by_type"}


# an EmbedResult: each type writes at most what float does (16 bytes a value, tokens counted besides)
EMBED = Writer(lambda r, q: q.echoed + r.answer_bytes * len(q.types), _embeddings,
               "ask for fewer embedding_types, or send fewer texts")
