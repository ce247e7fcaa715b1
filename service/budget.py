"""The process-wide budget of response bytes being built or sent (HEADWISE_MAX_INFLIGHT_RESPONSE_BYTES).

Every request's response is counted as it will be serialised (service.postprocess.response_bytes)
from the moment its results are in until its last byte has gone to the client's connection.
A request that would take the total past the budget is turned away (429, Retry-After), so
that any mix of valid requests keeps the process inside its memory limit.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response, StreamingResponse

from service.errors import Overloaded


class ResponseBudget:
    """`gauge`: where `used` is shown (headwise_response_bytes_inflight), if anywhere."""

    def __init__(self, limit: int, gauge=None):
        self.limit = limit
        self.used = 0
        self._gauge = gauge

    def reserve(self, n: int) -> Reservation:
        if n > 0 and self.used + n > self.limit:
            raise Overloaded(f"responses being sent take {self.used} of {self.limit} bytes; this one needs {n}",
                             headers={"Retry-After": "1"})
        self._add(n)
        return Reservation(self, n)

    def _add(self, n: int) -> None:
        self.used += n
        if self._gauge is not None:
            self._gauge.set(self.used)


class Reservation:
    """Held until `release` (idempotent): by a BudgetedResponse once it has been sent. As a
    context manager, released when its block raises (the answer will never be sent)."""

    def __init__(self, budget: ResponseBudget, n: int):
        self._budget, self.n = budget, n

    def release(self) -> None:
        if self.n:
            self._budget._add(-self.n)
            self.n = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.release()


CHUNK = 1 << 20  # bytes handed to the server per send


class BudgetedResponse(Response):
    """A response that gives its reservation back once its last byte has gone to the client's
    connection. It is sent in CHUNK pieces, yielding to the event loop after each, so that the
    server's flow control (a client that does not read fills the socket buffer, and the next
    send waits) keeps it, and its bytes, counted for as long as the client makes it wait."""

    def __init__(self, body: bytes, reservation: Reservation, media_type: str = "application/json"):
        super().__init__(body, media_type=media_type)
        self.reservation = reservation

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            view = memoryview(self.body)
            for at in range(0, max(len(view), 1), CHUNK):
                more = at + CHUNK < len(view)
                await send({"type": "http.response.body", "body": view[at:at + CHUNK], "more_body": more})
                if more:
                    await asyncio.sleep(0)
        finally:
            self.body = b""
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
