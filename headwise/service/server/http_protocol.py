"""uvicorn's httptools protocol, with a response's writes sent together and a client's
request head and body bounded in size and time.

- uvicorn writes a response's head on `http.response.start` and its body on
  `http.response.body`: two `send` syscalls and, with TCP_NODELAY, two packets the client
  wakes for. Writes made in one turn of the event loop are joined here and leave as one at the
  end of that turn. Measured with `python -m bench.overhead` (bench/results).
- uvicorn (0.54) and httptools put no limit on a request's head: a 16 MB header, 10,000
  headers, or a header line that never ends were all buffered. Here a head over
  HEADWISE_MAX_HEAD_BYTES or HEADWISE_MAX_HEADERS gets 431 and the connection closes.
- uvicorn times a connection out only after a first response (keep-alive). Here a connection
  must send its request head within HEADWISE_HEAD_TIMEOUT_S of opening (or of its last
  response), and its body within HEADWISE_BODY_TIMEOUT_S of the head, else 408 and close.
- On shutdown, a request still waiting for its body gets 503 at once instead of holding the
  server until its client sends the rest.
- A connection past HEADWISE_MAX_CONNECTIONS open ones is answered 503 and closed at once, so
  that no client holds file descriptors without bound (idle ones also close on the timeouts).
- A response's head is checked for the characters uvicorn refuses in header names and values
  with one search over all names and one over all values (uvicorn makes two per header; a
  /v1/embed answer has 12 with TEI's timing headers): `Cycle`, the same bytes and refusals.

- Each connection has one timer, for whichever is due next: its head, its body or, between
  requests, uvicorn's keep-alive; a request moves its deadline and schedules nothing.

This is the one module that relies on uvicorn's private protocol attributes (`cycle`,
`parser`, `transport`, `_unset_keepalive_if_required`, `_start_asgi_task`, `on_response_complete`
and what it reads (`timeout_keep_alive`, `pipeline`, `server_state`, `flow`), the request cycle's `disconnected`, `more_body` and response state); only `headwise serve` uses it (server.serve, through
server.fastpath), and only at the versions server.versions names.
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from headwise.service.logs import new_id


@dataclass(frozen=True)
class Bounds:
    """HEADWISE_MAX_CONNECTIONS, _MAX_HEAD_BYTES, _MAX_HEADERS, _HEAD_TIMEOUT_S, _BODY_TIMEOUT_S
    (headwise.service.settings; defaults as mainstream servers: nginx reads heads up to 4 × 8 KB,
    Node.js 16 KB, Go 1 MB; 100 headers is Go's and Node's count; 60 s is 4 MiB at 70 KB/s)."""

    max_connections: int
    max_head_bytes: int
    max_headers: int
    head_timeout_s: float
    body_timeout_s: float

    @classmethod
    def of(cls, settings) -> Bounds:
        s = settings
        return cls(s.max_connections, s.max_head_bytes, s.max_headers, s.head_timeout_s, s.body_timeout_s)


def protocol(settings) -> functools.partial:
    """uvicorn's `http` option: HttpProtocol with these settings' bounds. uvicorn builds each
    connection's protocol by calling it; a partial of a module-level class pickles, so the
    worker processes of `--workers N` get it too."""
    return functools.partial(HttpProtocol, bounds=Bounds.of(settings))


REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large",
           503: b"Service Unavailable"}
TYPES = {400: "invalid_request"}  # the native table's type, where the reason phrase does not give it


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing a request that was refused."""


IDLE = "keep-alive"  # the deadline is uvicorn's keep-alive: the connection closes without an answer
HEAD, BODY = "request head not received in time", "request body not received in time"
EARLY_S = 1e-3  # a timer may fire this early (the loops' clocks tick in milliseconds): it is due
JOIN_LIMIT = 1 << 16  # bytes: writes up to this are joined into one; larger ones are not copied


class CoalescingTransport:
    """A transport whose writes in one loop turn are sent as one; everything else passes through."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        held, self._held = self._held, []
        if not held or self._transport.is_closing():
            return
        if len(held) == 1:
            self._transport.write(held[0])
        elif sum(map(len, held)) <= JOIN_LIMIT:
            self._transport.write(b"".join(held))
        else:  # a large body is not copied to save a packet
            self._transport.writelines(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def refusal(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 response in the native error shape, closing the connection; its
    request id is a new one (the head, if any, was not read)."""
    rid = new_id()
    kind = TYPES.get(status) or REASONS[status].decode().lower().replace(" ", "_")
    body = json.dumps({"error": {"message": message, "type": kind,
                                 "code": status, "request_id": rid}}).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"x-request-id: %s\r\nconnection: close\r\n\r\n" % (status, REASONS[status], len(body), rid.encode())) + body


class Cycle(RequestResponseCycle):
    """uvicorn's request cycle, whose `http.response.start` checks the head's names and values
    in two regular-expression searches over them joined, instead of two per header. uvicorn's
    patterns are one-character classes, so a joined search finds a character exactly when one
    name (or value) holds it; then, and in every case but a plain start (paused writes, a gone
    client, an access log, a second start), uvicorn's own `send` runs and refuses as it does.
    The head written is uvicorn's, byte for byte (0.54's send, whose start is copied here)."""

    async def send(self, message) -> None:
        if (message["type"] != "http.response.start" or self.response_started or self.disconnected
                or self.flow.write_paused or self.access_log):
            return await super().send(message)
        headers = self.default_headers + list(message.get("headers", []))
        try:
            bad = (HEADER_RE.search(b"".join([name for name, _ in headers]))
                   or HEADER_VALUE_RE.search(b"".join([value for _, value in headers])))
        except TypeError:  # a name or value not bytes: uvicorn's error
            bad = True
        if bad:
            return await super().send(message)
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        content = [STATUS_LINE[status_code]]
        has_connection_close = False
        for name, value in headers:
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection":
                connection = [token.lower().strip() for token in value.split(b",")]
                if b"close" in connection:
                    self.keep_alive = False
                    has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status_code not in (204, 304):
            self.chunked_encoding = True  # neither content-length nor transfer-encoding
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))


class HttpProtocol(HttpToolsProtocol):
    """`uvicorn.Config(http=HttpProtocol)`: httptools, with CoalescingTransport, bounded heads
    and timeouts (module docstring)."""

    def __init__(self, *args, bounds: Bounds, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._bounds = bounds

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))
        self._in_head, self._head_bytes, self._n_headers = True, 0, 0
        self._in_body = False
        self._refused = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # loop time the timer fires at
        self._deadline: float | None = None  # loop time: what `_why` names is due by then
        self._why = ""
        self._body_due = 0.0  # the request's body's deadline, kept while keep-alive waits
        if len(self.connections) > self._bounds.max_connections:  # this one included
            self._refuse(503, f"over {self._bounds.max_connections} open connections; retry shortly")
            return
        self._arm(self._bounds.head_timeout_s, HEAD)

    def _arm(self, seconds: float, why: str) -> None:
        """408 with `why` unless disarmed within `seconds` (IDLE: uvicorn's keep-alive, closed
        without an answer)."""
        self._arm_at(self.loop.time() + seconds, why)

    def _arm_at(self, due: float, why: str) -> None:
        """One timer per connection, moved lazily: a later deadline only is noted, and the
        timer, firing before it, waits on for it; so a request on a busy connection costs no
        timer of its own. An earlier one (keep-alive after a body's deadline) moves the timer."""
        self._deadline, self._why = due, why
        if self._timer is not None and due < self._timer_at - EARLY_S:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer, self._timer_at = self.loop.call_at(due, self._expire), due

    def _disarm(self) -> None:
        self._deadline, self._why = None, ""

    def _expire(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        if self._deadline - self.loop.time() > EARLY_S:
            self._timer, self._timer_at = self.loop.call_at(self._deadline, self._expire), self._deadline
            return
        if self._why == IDLE:
            self._disarm()
            self.timeout_keep_alive_handler()
        else:
            self._refuse(408, self._why)

    def _unset_keepalive_if_required(self) -> None:
        """Data from the client ends keep-alive's wait: what it sends next is due by the head's
        deadline (even bytes that begin no request: a bare CRLF), or, for a body still coming
        after its answer, by the body's."""
        if self._why == IDLE:
            if self._in_body:
                self._arm_at(self._body_due, BODY)
            else:
                self._arm(self._bounds.head_timeout_s, HEAD)

    def on_response_complete(self) -> None:
        """uvicorn's (0.54), its keep-alive wait on the connection's one timer; also while the
        request's body is still coming (answered before it was read). A next request whose head
        has begun keeps its head's deadline instead."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self._deadline is None or self._in_body:
            self._arm(self.timeout_keep_alive, IDLE)

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` and close, whatever the request was doing; the app's task, if one
        runs, sees the client gone."""
        self._disarm()
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.response_complete = True  # the app must not write after this answer
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(refusal(status, message))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app) -> None:
        cycle.__class__ = Cycle  # uvicorn made it (on_headers_complete); nothing has run on it yet
        super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            if isinstance(e.__context__, _Refused):
                return
            self._bad_request()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_head and not self._refused:
            # the whole chunk was head: the head is still not complete at its end
            self._head_bytes += len(data)
            if self._head_bytes > self._bounds.max_head_bytes:
                self._refuse(431, f"request head over {self._bounds.max_head_bytes} bytes")

    def _bad_request(self) -> None:
        """A request httptools cannot parse (a negative or doubled Content-Length, a bad chunk
        size, ...): 400 in the native shape with a request id, as the other refusals of this
        layer, not uvicorn's plain-text one; the connection closes."""
        self.logger.warning("Invalid HTTP request received.")
        self._refuse(400, "invalid HTTP request: the request line, a header or the body's framing could not be parsed")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._n_headers = True, 0, 0
        if self._deadline is None or self._why == IDLE:  # else the head is due already (since
            self._arm(self._bounds.head_timeout_s, HEAD)  # the connection opened, or data came)

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self._bounds.max_head_bytes:
            self._refuse(431, f"request head over {self._bounds.max_head_bytes} bytes")
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._n_headers += 1
        self._head_bytes += len(name) + len(value) + 4
        b = self._bounds
        if self._n_headers > b.max_headers or self._head_bytes > b.max_head_bytes:
            self._refuse(431, f"request head over {b.max_headers} headers or {b.max_head_bytes} bytes")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body = True
        self._arm(self._bounds.body_timeout_s, BODY)
        self._body_due = self._deadline
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._disarm()
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete:  # answered before its body came
            self._arm(self.timeout_keep_alive, IDLE)

    def shutdown(self) -> None:
        if self._in_body and self.cycle is not None and not self.cycle.response_complete:
            self._refuse(503, "server shutting down: request body not complete")
            return
        super().shutdown()


def uvicorn_disconnect_probe(request):
    """A cheap disconnect check for the batcher: uvicorn's `receive` is a bound method of its
    request cycle, whose `disconnected` flag its protocol sets when the connection is lost
    (Starlette's `is_disconnected` opens and cancels an anyio scope per call). None under
    any other server, or a wrapped `receive`."""
    cycle = getattr(request.receive, "__self__", None)
    if not isinstance(getattr(cycle, "disconnected", None), bool):
        return None

    async def disconnected() -> bool:
        return cycle.disconnected

    return disconnected


def body_pending(receive) -> bool:
    """Whether the request behind this ASGI `receive` is still waiting for its client to send
    the rest of its body (uvicorn's request cycle; False under any other server)."""
    cycle = getattr(receive, "__self__", None)
    return getattr(cycle, "more_body", False) is True and not getattr(cycle, "disconnected", True)
