"""Rerank wire shapes of other APIs (docs/api.md): Jina's body and answer, which the native
`/v1/rerank` takes beside its own (routers/classify.py) and TEI's `/rerank` too (routers/tei.py
imports the Jina pieces from here), and Cohere's v2 (routers/cohere_rerank.py). Pure: request
and response models, the shaping the routes share and their writers; no HTTP, no engine calls.

A route that takes its own body or Jina's tells them apart by one key: `texts` (its own) or
`documents` (Jina's), `keyed_body`. Scores are the engine's, as the native route's `score`: a
cross-encoder's sigmoid.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
)

from headwise.service.api.compat.vllm import CUT_SIDE, Side
from headwise.service.api.writer import Writer, ranked
from headwise.service.errors import ServiceError

OWN, JINA = "texts", "documents"  # the key that names each body, and its union tag
BOTH = "both_bodies"
ID_BYTES = 56  # the "id": "rerank-<32 hex>" vLLM's answer carries beside Jina's keys
ITEM_BYTES = 48  # a relevance result's keys beyond the native {"index", "score"} (its text counted apart)
SEARCH_UNIT_DOCUMENTS = 100  # Cohere bills one search unit per query of up to 100 documents
COHERE_META_BYTES = 256  # Cohere's id and meta around the results


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: StrictStr


Documents = list[StrictStr | RerankDocument]


class JinaRerankRequest(BaseModel):
    """Jina's rerank body (POST https://api.jina.ai/v1/rerank)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "ms-marco-minilm", "query": "What is the capital of France?",
         "documents": ["Paris is the capital of France.", {"text": "Berlin is in Germany."}],
         "top_n": 1, "return_documents": False}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    query: StrictStr
    documents: Documents = Field(..., description="texts, or {\"text\": ...} objects")
    top_n: StrictInt | None = Field(None, ge=0, description="return only the n best results; 0 (vLLM's default): all")
    return_documents: StrictBool = Field(True, description="echo each document as {\"text\"} (Jina's default: true)")
    truncate_prompt_tokens: StrictInt | None = Field(
        None, ge=-1, description="vLLM's (its /rerank takes this body): k cuts each pair to k tokens, special "
                                 "tokens included, longest text first; null or -1: at the model's max_len")
    truncation_side: Side = Field(None, description=CUT_SIDE)


class DocumentText(BaseModel):
    text: str


class RelevanceResult(BaseModel):
    index: int
    relevance_score: float
    document: DocumentText | None = None


class JinaUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class JinaRerankResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "rerank-1f0e4b0c2d5a4e7f9b3c6a8d2e1f4a5b", "model": "ms-marco-minilm",
        "usage": {"prompt_tokens": 31, "total_tokens": 31},
        "results": [{"index": 0, "relevance_score": 0.998, "document": {"text": "Paris is the capital of France."}}]}]})

    id: str = Field(description="vLLM's: rerank-<hex>, new for each answer (Jina's answer has none)")
    model: str
    usage: JinaUsage
    results: list[RelevanceResult]


class RelevantSpans(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["enabled", "disabled"]
    threshold: float | None = None
    max_spans: StrictInt | None = None


class CohereRerankRequest(BaseModel):
    """Cohere's v2 rerank body (POST https://api.cohere.com/v2/rerank)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "ms-marco-minilm", "query": "What is the capital of France?",
         "documents": ["Paris is the capital of France.", "Berlin is in Germany."], "top_n": 1}]})

    model: StrictStr = Field(..., description="the served model's name")
    query: StrictStr
    documents: Documents = Field(..., description="texts (Cohere's v2); {\"text\": ...} objects are taken too")
    top_n: StrictInt | None = Field(None, ge=1, description="return only the n best results")
    max_tokens_per_doc: StrictInt = Field(4096, ge=1, description="cut each document to its first n tokens, "
                                                                  "by the model's tokenizer, before pairing")
    return_documents: StrictBool = Field(False, description="echo each document as {\"text\"} (Cohere's v1 "
                                                            "field, kept by older v2 clients)")
    relevant_spans: RelevantSpans | None = Field(None, description="mode \"enabled\" is refused: no spans")
    priority: StrictInt | None = Field(None, description="taken and not used: requests are served in order")


class ApiVersion(BaseModel):
    version: str


class BilledUnits(BaseModel):
    search_units: int


class Tokens(BaseModel):
    input_tokens: int
    output_tokens: int


class CohereMeta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits
    tokens: Tokens


class CohereRerankResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": "5b4b0d3e-6a44-4a5e-9d8e-3a1f4c2f2a51", "results": [{"index": 0, "relevance_score": 0.998}],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1},
                 "tokens": {"input_tokens": 31, "output_tokens": 0}}}]})

    id: str
    results: list[RelevanceResult]
    meta: CohereMeta


# -- telling the bodies apart ----------------------------------------------------------------

def _body_key(value) -> str | None:
    """The union tag: Jina's body when `documents` is sent, else the route's own (whose errors
    then name what it misses); None (an error) when both are."""
    if isinstance(value, dict) and JINA in value:
        return None if OWN in value else JINA
    return OWN


def keyed_body(name: str, own: type[BaseModel], jina: type[BaseModel] = JinaRerankRequest) -> type[RootModel]:
    """A body model `name` that is `own` (with `texts`) or `jina` (with `documents`), picked by
    that key in the one validating pass. Its `.root` is the body; its errors' locations carry
    the tag first: `untag` takes it off."""
    union = Annotated[Annotated[own, Tag(OWN)] | Annotated[jina, Tag(JINA)], Discriminator(
        _body_key, custom_error_type=BOTH,
        custom_error_message="send 'texts' (this API's body) or 'documents' (Jina's body), not both")]
    return type(name, (RootModel[union],), {"__module__": __name__, "__doc__": (
        f"{own.__name__} (`texts`) or {jina.__name__} (`documents`, Jina's body), told apart by that key.")})


def untag(errors: Sequence[dict]) -> list[dict]:
    """pydantic's errors of a keyed_body as the chosen model's alone would be (the tag off
    their location); the both-bodies error located at `documents`."""
    out = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if e.get("type") == BOTH:
            loc = (JINA,)
        elif loc and loc[0] in (OWN, JINA):
            loc = loc[1:]
        out.append({**e, "loc": loc})
    return out


# -- shaping ---------------------------------------------------------------------------------

def document_texts(documents: Documents) -> list[str]:
    """Jina's and Cohere's documents (texts or {"text"} objects) → the engine's texts."""
    return [d if isinstance(d, str) else d.text for d in documents]


def relevance_results(order: Sequence[int], scores: Sequence[float], texts: Sequence[str] | None) -> list[dict]:
    """Jina's and Cohere's results in `order`: index, relevance_score, and with `texts` the
    document as {"text"}."""
    if texts is None:
        return [{"index": i, "relevance_score": scores[i]} for i in order]
    return [{"index": i, "relevance_score": scores[i], "document": {"text": texts[i]}} for i in order]


def search_units(n_documents: int) -> int:
    """Cohere's billed search units: one per query of up to 100 documents (Cohere also counts a
    document over 500 tokens as several; headwise does not)."""
    return max(1, math.ceil(n_documents / SEARCH_UNIT_DOCUMENTS))


def cut_at(text: str, offsets: Sequence[tuple[int, int]], n: int) -> str:
    """`text` up to the end of its n-th token (offsets: its tokens' character spans, no
    special tokens), or whole when it has at most n."""
    return text if len(offsets) <= n else text[:offsets[n - 1][1]]


@contextmanager
def fields_named(names: dict[str, str]) -> Iterator[None]:
    """Domain errors raised within name their field as `names` says: a foreign body's names on
    a route whose protocol names fields its own way (Jina's `documents` on /v1/rerank, whose
    errors are the native API's, where the engine says `texts`)."""
    try:
        yield
    except ServiceError as e:
        if e.field in names:
            e.message, e.field = e.render(names), names[e.field]
        raise


# -- the answers ---------------------------------------------------------------------------------

# Jina's answer (with vLLM's id): a Ranking and the documents' texts when they are echoed (else None)
JINA_RERANK = Writer(ranked, lambda r, echo: {"id": f"rerank-{uuid.uuid4().hex}", "model": r.result.model,
                                            "usage": r.result.usage,
                                            "results": relevance_results(r.order, r.scores, echo)},
                     "ask for fewer documents, top_n, or return_documents: false")


class CohereRerank(NamedTuple):
    """/v2/rerank's request as its answer reads it."""

    n_documents: int  # what Cohere bills search units for
    echo: list[str] | None  # the documents' texts, when they are echoed


def _cohere(r, q: CohereRerank) -> dict:
    meta = {"api_version": {"version": "2"}, "billed_units": {"search_units": search_units(q.n_documents)},
            "tokens": {"input_tokens": r.result.n_tokens, "output_tokens": 0}}
    return {"id": str(uuid.uuid4()), "results": relevance_results(r.order, r.scores, q.echo), "meta": meta}


COHERE_RERANK = Writer(ranked, _cohere, "ask for fewer documents, top_n, or return_documents: false")
