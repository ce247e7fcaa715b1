"""Ranking, written once for every rerank route (native /v1/rerank, Jina's body, TEI's /rerank,
Cohere's /v2/rerank): the echoed texts' bound checked before any inference is spent on them,
the engine's scores, the order (best first, `top_n` kept) and the answer's bound in bytes.
Each route then only shapes the answer in its protocol's JSON, with its writer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headwise.service.api.sizes import JSON, check_response_bytes, echoed_bytes
from headwise.service.engine import Engine, Runtime
from headwise.service.engine.classify import ClassifyParams, ClassifyResult, answer_size


def best_first(scores: Sequence[float], top_n: int | None = None) -> list[int]:
    """Indices best first, ties by index; the top_n best when given."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return order if top_n is None else order[:top_n]


@dataclass(frozen=True, slots=True)
class Ranking:
    result: ClassifyResult
    scores: list[float]  # each text's score, in the texts' order
    order: list[int]  # the indices answered, best first
    size: int  # the answer's bound in bytes, as written


async def rank(engine: Engine, rt: Runtime, query: str, texts: list[str], params: ClassifyParams, probe, *,
               echo: list[str] | None, top_n: int | None, envelope: int, item_bytes: int, too_large: str,
               order: Callable[[Sequence[float], int | None], list[int]] = best_first) -> Ranking:
    """Score `texts` against `query` → the ranking and its bound: `envelope` bytes around the
    results, each result's engine-counted bytes plus `item_bytes` (a protocol's own keys), and
    the `echo` texts (the documents as sent, when the answer carries them). The echoed texts
    alone over HEADWISE_MAX_RESPONSE_BYTES → TooLarge with `too_large` as advice, before
    inference; the whole bound is checked when it is answered (responses.answer)."""
    cap = engine.settings.max_response_bytes
    if echo is not None:
        check_response_bytes(envelope + echoed_bytes(echo, top_n), cap, too_large)
    result = await engine.rerank(rt, query, texts, params, probe)
    scores = [float(c.scores[0]) for c in result.data]
    kept = order(scores, top_n)
    size = envelope + sum(JSON.bytes(answer_size(params, result.data[i].encoding, result.labels)) + item_bytes
                          for i in kept)
    if echo is not None:
        size += echoed_bytes([echo[i] for i in kept])
    return Ranking(result, scores, kept, size)
