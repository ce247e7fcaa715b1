"""text-embeddings-inference's per-request timing headers, on TEI's inference routes and on
POST /v1/embed: `x-compute-type`, `x-compute-time`, `x-compute-characters`, `x-compute-tokens`,
`x-total-time`, `x-tokenization-time`, `x-queue-time` and `x-inference-time`, whole milliseconds
as TEI writes them. The times are the ones the engine keeps for Triton's statistics
(service.engine.stats.Timing), so the headers add a clock read and eight short header lines
per response (their cost: bench/results/timing-headers.md)."""

from __future__ import annotations

import time

from fastapi import Request

from headwise.service.engine import Runtime
from headwise.service.engine.stats import Timing


async def started_at(request: Request) -> float:
    """When the endpoint began (a plain dependency, so the fast path calls it too)."""
    return time.perf_counter()


def characters(inputs) -> int:
    """Characters of the texts a request computed: texts, pairs' both texts; token ids count none."""
    n = 0
    for x in inputs:
        if isinstance(x, str):
            n += len(x)
        elif isinstance(x, tuple):
            n += sum(len(t) for t in x)
    return n


def tei_headers(rt: Runtime, result, started: float, chars: int) -> list[tuple[bytes, bytes]]:
    """The headers for `result` (an EmbedResult or ClassifyResult) of a request that began at
    `started` (perf_counter) and computed `chars` characters, as the raw (name, value) pairs
    the response sends: built here once, not re-encoded by Starlette's Response. Whole
    milliseconds written inline (`b"%d" % int(seconds * 1000)`): this runs for every answer."""
    total = b"%d" % int((time.perf_counter() - started) * 1000)
    t = result.timing or UNTIMED
    backend = getattr(rt, "backend", None)  # None before load (and in unit tests' stand-ins)
    return [(b"x-compute-type", GPU if backend is not None and backend.provider == "cuda" else CPU),
            (b"x-compute-time", total), (b"x-compute-characters", b"%d" % chars),
            (b"x-compute-tokens", b"%d" % result.n_tokens), (b"x-total-time", total),
            (b"x-tokenization-time", b"%d" % int(t.tokenize * 1000)), (b"x-queue-time", b"%d" % int(t.queue * 1000)),
            (b"x-inference-time", b"%d" % int(t.infer * 1000))]


UNTIMED, GPU, CPU = Timing(), b"gpu", b"cpu"
