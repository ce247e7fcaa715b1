"""A writer: one protocol's answer to one operation (service.api.responses.answer sends it).
Writers sit with their protocol: the native API's in service.api.native, the others' in
service.api.compat. Pure: no HTTP, no engine calls, so a protocol module may hold its writers.
A writer's payload is JSON (a dict or list, serialised by `answer`), or with `raw` a `Raw`
body it wrote itself (KServe v2's tensors, binary or JSON)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from headwise.service.api.sizes import JSON

R = TypeVar("R")  # what the engine answered (EmbedResult, a Ranking, ...)
Q = TypeVar("Q")  # the request as the writer reads it: its body, or what the route made of it


@dataclass(frozen=True, slots=True)
class Writer(Generic[R, Q]):
    """`bound(result, request)`: the most bytes the answer takes as written, known before it is
    built; `build(result, request)`: its payload. `advice`: what a client whose answer is over
    HEADWISE_MAX_RESPONSE_BYTES may ask for instead."""

    bound: Callable[[R, Q], int]
    build: Callable[[R, Q], Any]
    advice: str = "send fewer or shorter texts"
    raw: bool = False  # build returns a Raw body, not a payload to write as JSON


@dataclass(frozen=True, slots=True)
class Raw:
    """A body its writer wrote: its bytes, media type and own headers (raw name, value pairs)."""

    body: bytes
    media_type: str = "application/json"
    headers: tuple[tuple[bytes, bytes], ...] = ()


def counted(result, _request) -> int:
    """The bound when it is the engine's own: what its Measure gave when it checked the request
    (EmbedResult, ClassifyResult, TagResult, Similarity `.answer_bytes`)."""
    return result.answer_bytes


def ranked(ranking, _request) -> int:
    """A rerank route's bound: its Ranking's (service.api.ranking.rank counted it, the echoed
    texts included, and checked them before inference)."""
    return ranking.size


def priced(result, _request) -> int:
    """The bound of an answer the engine counted without pricing it (Occlusion's `answer`, checked
    by the engine only for units): its counts priced in JSON."""
    return JSON.bytes(result.answer)
