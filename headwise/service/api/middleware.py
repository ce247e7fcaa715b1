"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task per request): the request's id
(`X-Request-Id`, echoed on every answer: service.logs) and its server span (service.tracing),
body size limit, in-flight gauge and count (for draining), per-route request counts and
latency, security headers on the viewer's page and files; an error no handler answered becomes
the protocol's 500 here, with the id. `shortcuts` ((method, path) → an ASGI callable) are
answered here rather than by the app's router: empty in the plain app; filled by the fast path
`headwise serve` installs (server.fastpath)."""

from __future__ import annotations

import time

from starlette.requests import Request

from headwise.service import tracing
from headwise.service.api import errors
from headwise.service.api.errors import NATIVE
from headwise.service.logs import accepted_id, request_id
from headwise.service.metrics import Metrics

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff")]


class Activity:
    """HTTP requests being served right now, by their `receive`: what a SIGTERM drain waits for
    is `busy()`, those not still waiting for their client to send the body."""

    def __init__(self) -> None:
        self.receives: set = set()
        # whether a request is still waiting for its client to send the body: only the server
        # knows (server.http_protocol.body_pending under `headwise serve`)
        self.body_pending = lambda receive: False

    def busy(self) -> int:
        return sum(1 for r in self.receives if not self.body_pending(r))


class ServiceMiddleware:
    def __init__(self, app, metrics: Metrics, max_body_bytes: int, activity: Activity | None = None,
                 shortcuts: dict | None = None, routes: list | None = None):
        self.app = app
        self.routes = routes or []  # the app's, to find a refused request's protocol
        self.shortcuts = shortcuts if shortcuts is not None else {}
        self.metrics = metrics
        self.max_body = max_body_bytes
        self.activity = activity or Activity()
        self._children: dict[tuple, tuple] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        m = self.metrics
        status = 500
        started = False
        t0 = time.perf_counter()
        m.inflight.inc()
        self.activity.receives.add(receive)
        path = scope.get("path", "")
        page = path == "/" or path.startswith("/static/")
        length, framed, rid, carrier = _head(scope)
        rid = accepted_id(rid)
        token = request_id.set(rid)
        traced = tracing.start_server_span(scope["method"], path, carrier, rid) if tracing.ON else None
        echo = (b"x-request-id", rid.encode())

        async def send_wrapper(message):
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                extra = [echo, *PAGE_HEADERS] if page else [echo]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        try:
            too_large, receive = await self._limit_body(length, framed, receive)
            if too_large:
                m.request_failures.labels(model="", reason="too_large").inc()
                # in the route's protocol shape (KServe, OpenAI, native); and the connection
                # closes, since the unread rest of the body must not be read as a next request
                resp = self._protocol(scope).response(413, "too_large", f"request body over {self.max_body} bytes",
                                                      {"Connection": "close"})
                await resp(scope, receive, send_wrapper)
            elif (shortcut := self.shortcuts.get((scope["method"], path))) is not None:
                await shortcut(scope, receive, send_wrapper)
            else:
                await self._app(scope, receive, send_wrapper, lambda: started)
        finally:
            request_id.reset(token)
            m.inflight.dec()
            self.activity.receives.discard(receive)
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            model = (scope.get("state") or {}).get("model", "")
            if traced is not None:
                tracing.end_server_span(*traced, route, status, model)
            count, duration = self._series(route, model, status)
            count.inc()
            duration.observe(time.perf_counter() - t0)

    async def _app(self, scope, receive, send, started) -> None:
        """The app; an exception no handler took becomes the protocol's 500 here, so that it
        carries the request's id too (a response already begun can only be cut: it re-raises)."""
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if started():
                raise
            response = await errors.handle(Request(scope, receive), exc)
            await response(scope, receive, send)

    def _protocol(self, scope):
        """The protocol of the route `scope` would reach (before routing: a refusal)."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match.name != "NONE":
                return getattr(route, "protocol", NATIVE)
        return NATIVE

    def _series(self, route: str, model: str, status: int):
        """The (counter, histogram) children for these labels; looked up once, then cached
        (prometheus-client's `labels()` costs a lock and a tuple per call)."""
        key = (route, model, status)
        got = self._children.get(key)
        if got is None:
            m = self.metrics
            got = (m.requests.labels(route=route, model=model, code=str(status)),
                   m.request_duration.labels(route=route, model=model))
            if len(self._children) < 4096:  # bounded: routes are templates, models a few, codes ~20
                self._children[key] = got
        return got

    async def _limit_body(self, length: bytes | None, framed: bool, receive):
        """(over the limit?, receive to pass on). Chunked bodies are read here, up to the limit."""
        if length is not None and not framed:
            try:
                return int(length) > self.max_body, receive
            except ValueError:
                return False, receive  # the server rejects a bad Content-Length itself
        if not framed:
            return False, receive
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return False, receive
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body:
                return True, receive
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return False, replay


def _head(scope) -> tuple[bytes | None, bool, bytes | None, dict[str, str] | None]:
    """(Content-Length, whether a Transfer-Encoding frames the body, X-Request-Id, the W3C trace
    context headers), in one pass."""
    length, framed, rid, carrier = None, False, None, None
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            framed = True  # any coding, any case ("Chunked"): the body is counted as it comes
        elif name == b"x-request-id":
            rid = value
        elif name == b"traceparent" or name == b"tracestate":
            carrier = carrier or {}
            carrier[name.decode()] = value.decode("latin-1")
    return length, framed, rid, carrier
