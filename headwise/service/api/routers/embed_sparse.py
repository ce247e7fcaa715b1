"""POST /v1/embed_sparse: sparse embedding models (SPLADE), one Engine.submit call for the
sparse capability: per text, its non-zero weights over the vocabulary (`indices` ascending and
their `values`, as sentence-transformers' SparseEncoder.encode gives them), with the vocabulary
entries they weigh (`tokens`, asked for with `decode`), per-head attention and removed heads.
The request's writer is here too."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from headwise.service.api import native
from headwise.service.api.body import Json
from headwise.service.api.dependencies import (
    disconnect_probe,
    get_engine,
    model_for,
    require_api_key,
)
from headwise.service.api.responses import answer
from headwise.service.api.schemas import Ablate, AttentionOptions, Usage, ablation, error_responses
from headwise.service.api.sizes import CHAR_BYTES, ENVELOPE_BYTES, TEXT_ITEM_BYTES, VALUE_BYTES
from headwise.service.api.writer import Writer
from headwise.service.engine import Engine
from headwise.service.engine.heads.sparse import SPARSE, SparseParams

router = APIRouter(tags=["embed_sparse"], dependencies=[Depends(require_api_key)])
ID_BYTES = 8  # a vocabulary id below 10,000,000 and its comma


class SparseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "What is Deep Learning?"}, {"inputs": ["a query", "a document"], "decode": True}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    inputs: StrictStr | list[StrictStr] = Field(..., description="one text or a list")
    decode: StrictBool = Field(False, description="also answer the vocabulary entry each index weighs (`tokens`)")
    truncate: StrictBool = Field(True, description="cut each text at max_len tokens; false: 422 when longer")
    attention: AttentionOptions | None = Field(None, description="per input, every asked-for head's weights "
                                                                 "over all its tokens, as on /v1/embed")
    ablate: Ablate | None = Field(None, description='{"<layer>": [heads]}: embed with those heads removed')


class SparseEmbedding(BaseModel):
    index: int
    indices: list[int] = Field(..., description="the vocabulary ids of the non-zero weights, ascending")
    values: list[float] = Field(..., description="their weights, > 0")
    tokens: list[str | None] | None = Field(None, description="with decode: each id's entry of the vocabulary "
                                                              "(null for an id the tokenizer has none for)")
    attention: dict | None = None


class SparseResponse(BaseModel):
    model: str
    data: list[SparseEmbedding]
    usage: Usage


def _vectors(result, q) -> dict:
    """q: whether to decode, and the vocabulary's id → entry."""
    decode, vocab = q

    def fields(_, x) -> dict:
        out = {"indices": x.indices, "values": x.values}
        return {**out, "tokens": [vocab(int(i)) for i in x.indices]} if decode else out

    return native.per_input(result, fields)


def _bound(result, q) -> int:
    """The engine's count (records, attention) and what it could not know before the run: the
    entries, and with decode each one's vocabulary entry."""
    decode, vocab = q
    n = sum(len(x.indices) for x in result.data)
    chars = sum(len(vocab(int(i)) or "") * CHAR_BYTES + TEXT_ITEM_BYTES for x in result.data
                for i in x.indices) if decode else 0
    return result.answer_bytes + ENVELOPE_BYTES + n * (ID_BYTES + VALUE_BYTES) + chars


VECTORS = Writer(_bound, _vectors, "send fewer inputs")


@router.post("/v1/embed_sparse", response_model=SparseResponse, response_model_exclude_none=True,
             responses=error_responses(400, 401, 404, 413, 422, 429, 503))
async def embed_sparse(request: Request, body: Json[SparseRequest], engine: Engine = Depends(get_engine),
                       probe=Depends(disconnect_probe)):
    """Sparse embeddings of one text or a list: each text's non-zero weights over the vocabulary."""
    rt = model_for(request, engine, body.model)
    sparse = SPARSE.of(rt)
    spec = body.attention.spec(rt) if body.attention is not None else None
    params = SparseParams(truncate=body.truncate, attention=spec, ablate=ablation(rt, body.ablate))
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    result = await engine.submit(rt, SPARSE, texts, params, probe)
    return await answer(engine, VECTORS, result, (body.decode, sparse.tokenizer.untruncated.id_to_token))
