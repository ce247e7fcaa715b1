"""Responses of the native and compatible routes: JSON bodies, and bodies counted against the
process's in-flight response budget (service.engine.budget) until their last byte is sent.

Every JSON answer to an engine call is written by a `Writer` (service.api.writer), one per
(protocol, operation), and goes out through `answer`: its bound checked against
HEADWISE_MAX_RESPONSE_BYTES, reserved, and serialised."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from headwise.service import tracing
from headwise.service.api.errors import Protocol
from headwise.service.api.serialize import CHUNK_BYTES, dumps_chunks
from headwise.service.api.sizes import check_response_bytes
from headwise.service.api.writer import Raw, Writer
from headwise.service.engine.budget import Reservation, ResponseBudget, ShareOf
from headwise.service.errors import NotReady

if TYPE_CHECKING:
    from headwise.service.engine import Engine

R = TypeVar("R")
Q = TypeVar("Q")

DUMPS = orjson.OPT_SERIALIZE_NUMPY


def json_response(payload: dict) -> Response:
    return Response(orjson.dumps(payload, option=DUMPS), media_type="application/json")


def answer(engine: Engine, writer: Writer[R, Q], result: R, request: Q = None, *,
           headers: list[tuple[bytes, bytes]] | None = None, analytics: bool = False) -> Awaitable[Response]:
    """`writer`'s answer to `result`: its bound checked (TooLarge with its advice) and reserved in
    the in-flight budget (the analytics lane's share, and built on its thread, with `analytics`)
    until sent. `headers`: the response's own, as raw pairs (TEI's timing headers)."""
    size = writer.bound(result, request)
    cap = engine.settings.max_response_bytes
    if size > cap:
        check_response_bytes(size, cap, writer.advice)
    build = writer.build
    if writer.raw:
        return budgeted_raw(engine.responses, size, lambda: build(result, request))
    if analytics:
        lane = engine.analytics
        return budgeted_json(lane.responses, size, lambda: build(result, request), lane.run, headers)
    return budgeted_json(engine.responses, size, lambda: build(result, request), None, headers)


def probe(protocol: Protocol, check: Callable[[], object], ok: dict) -> Response:
    """A health probe's answer: `ok`, or `check`'s NotReady in the protocol's shape (not counted
    as a failed request: a probe saying "not yet" is doing its job)."""
    try:
        check()
    except NotReady as e:
        return protocol.error(e)
    return json_response(ok)


async def budgeted_json(budget: ResponseBudget | ShareOf, size: int, build, offload=None,
                        headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    """`build()` → the payload dict; its JSON is made off the event loop, in pieces, when
    `size` (the response's serialised bound) is over a chunk (serialize.CHUNK_BYTES), and counted against the process's
    in-flight response budget until sent (Overloaded when it does not fit). `offload(fn)`:
    where to build it whatever its size (analytics: their own thread, of the lowest priority).
    `headers`: the response's own, as raw (name, value) pairs (TEI's timing headers)."""
    with budget.reserve(size) as reservation, tracing.span("serialise", **{"headwise.response.bound_bytes": size}):
        if offload is not None:
            body = await offload(lambda: dumps_chunks(build()))
        elif size > CHUNK_BYTES:
            body = await run_in_threadpool(lambda: dumps_chunks(build()))
        else:  # one orjson call of at most a chunk: cheaper than a thread hop or a walk for pieces
            body = orjson.dumps(build(), option=DUMPS)
    return BudgetedResponse(body, reservation, headers=headers)


async def budgeted_raw(budget: ResponseBudget, size: int, build: Callable[[], Raw]) -> Response:
    """A body its writer wrote (`build()` → Raw), made off the event loop when `size` is over a
    chunk, and counted against the in-flight response budget until sent."""
    with budget.reserve(size) as reservation, tracing.span("serialise", **{"headwise.response.bound_bytes": size}):
        raw = await run_in_threadpool(build) if size > CHUNK_BYTES else build()
    return BudgetedResponse(raw.body, reservation, media_type=raw.media_type, headers=list(raw.headers))


CHUNK = 1 << 20  # bytes handed to the server per send


class BudgetedResponse(Response):
    """A response that gives its reservation back once its last byte has gone to the client's
    connection. Its body is bytes, or the chunks of one (serialize.dumps_chunks: never joined
    into one object, a copy that would hold the GIL). It is sent in pieces of at most CHUNK,
    yielding to the event loop after each, so that the server's flow control (a client that
    does not read fills the socket buffer, and the next send waits) keeps it, and its bytes,
    counted for as long as the client makes it wait."""

    def __init__(self, body: bytes | list[bytes], reservation: Reservation, media_type: str = "application/json",
                 headers: list[tuple[bytes, bytes]] | None = None):
        chunks = [body] if isinstance(body, bytes) else body
        # the head Starlette's Response.__init__ would make, without its general case
        self.status_code, self.media_type, self.background = 200, media_type, None
        self.body = chunks[0] if len(chunks) == 1 else b""
        if media_type.startswith("text/") and "charset=" not in media_type.lower():
            media_type += "; charset=" + self.charset
        self.raw_headers = [(b"content-length", b"%d" % sum(map(len, chunks))),
                            (b"content-type", media_type.encode("latin-1")), *(headers or ())]
        self.chunks = chunks
        self.reservation = reservation

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            pieces = [memoryview(c)[at:at + CHUNK] for c in self.chunks for at in range(0, len(c), CHUNK)]
            for i, piece in enumerate(pieces):
                more = i + 1 < len(pieces)
                await send({"type": "http.response.body", "body": piece, "more_body": more})
                if more:
                    await asyncio.sleep(0)
            if not pieces:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.body = b""
            self.chunks = []
            self.reservation.release()


class BudgetedStream(StreamingResponse):
    """A streamed response that gives its reservation back when the stream ends, however it ends."""

    def __init__(self, content, reservation: Reservation, **kw):
        super().__init__(content, **kw)
        self.reservation = reservation

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.reservation.release()
