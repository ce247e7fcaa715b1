"""Where errors become HTTP responses (docs/api.md, errors): one table per protocol, from the
engine's domain errors (service.errors) to status, headers and body shape.

Native: {"error": {"message", "type", "code", "request_id"}}; OpenAI (/v1/embeddings) adds "param";
KServe v2 (/v2 routes) {"error": "..."}; TEI (text-embeddings-inference's routes)
{"error": "...", "error_type": "Validation"}; Cohere (/v2/embed, /v2/rerank) {"message": "..."};
vLLM (/score, /classify) OpenAI's. A route's protocol is its router's (`route_class`),
so the shape never depends on sniffing the URL. Messages never carry a stack trace or the
client's input. The native body carries the request's id too (OpenAI's and vLLM's keep their
exact four fields); every protocol's answers carry it in the X-Request-Id header.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from headwise.service.errors import (
    Disconnected,
    InvalidRequest,
    NotFound,
    NotReady,
    Overloaded,
    ServiceError,
    TooLarge,
    Validation,
)
from headwise.service.logs import request_id

log = logging.getLogger("headwise.service")


class Unauthorized(ServiceError):
    """No or a wrong bearer token (HEADWISE_API_KEY)."""


class UnsupportedMediaType(ServiceError):
    """A content type the route does not take."""


class Empty(InvalidRequest):
    """An empty list where inputs are needed (TEI tells it apart: error_type "Empty")."""


class WrongModelKind(Validation):
    """A route asked of a model of another kind (an embedding model asked to rerank): 424 on
    TEI's routes, as TEI answers it; 422 elsewhere."""


@dataclass(frozen=True)
class Status:
    code: int
    type: str  # also the failure's metrics reason
    headers: tuple[tuple[str, str], ...] = ()
    shown: str | None = None  # the type the body names, where the protocol names it otherwise


RETRY = (("Retry-After", "1"),)
BEARER = (("WWW-Authenticate", 'Bearer realm="headwise"'),)


@dataclass(frozen=True)
class Protocol:
    name: str
    # domain error class → status; looked up along the exception's MRO
    statuses: dict[type[ServiceError], Status]
    # (status, type, message, field) → the JSON body
    body: Callable[[int, str, str, str | None], dict]
    # engine field names as this protocol calls them
    fields: dict[str, str] = field(default_factory=dict)
    # whether the body's "error" object has room for the request's id (service.logs)
    carries_id: bool = False

    def _body(self, code: int, type_: str, message: str, param: str | None) -> dict:
        body = self.body(code, type_, message, param)
        if self.carries_id and (rid := request_id.get()) is not None:
            body["error"]["request_id"] = rid
        return body

    def status_of(self, exc: ServiceError) -> Status:
        return next(self.statuses[c] for c in type(exc).__mro__ if c in self.statuses)

    def response(self, code: int, type_: str, message: str, headers=None, field_: str | None = None) -> Response:
        param = self.fields.get(field_, field_) if field_ is not None else None
        return Response(orjson.dumps(self._body(code, type_, message, param)), status_code=code,
                        media_type="application/json", headers=dict(headers) if headers else None)

    def payload(self, exc: ServiceError) -> dict:
        """The error body, for an error met after the response started (a stream's event)."""
        s = self.status_of(exc)
        return self._body(s.code, s.shown or s.type, exc.render(self.fields), self.fields.get(exc.field, exc.field))

    def error(self, exc: ServiceError) -> Response:
        s = self.status_of(exc)
        headers = s.headers
        if getattr(exc, "retry_after", None):  # the engine's estimate replaces the table's default
            headers = (*(h for h in headers if h[0] != "Retry-After"), ("Retry-After", str(exc.retry_after)))
        return self.response(s.code, s.shown or s.type, exc.render(self.fields), headers, exc.field)


# Domain error → HTTP status and type: the same for every protocol served today; each protocol
# shapes the body its own way.
STATUSES = {
    InvalidRequest: Status(400, "invalid_request"),
    Unauthorized: Status(401, "unauthorized", BEARER),
    NotFound: Status(404, "not_found"),
    TooLarge: Status(413, "too_large"),
    UnsupportedMediaType: Status(415, "unsupported_media_type"),
    Validation: Status(422, "validation"),
    Overloaded: Status(429, "overloaded", RETRY),
    NotReady: Status(503, "not_ready"),
    ServiceError: Status(500, "internal"),
}

NATIVE = Protocol("native", STATUSES, lambda code, type_, message, param: {
    "error": {"message": message, "type": type_, "code": code}}, carries_id=True)

OPENAI = Protocol("openai", STATUSES, lambda code, type_, message, param: {
    "error": {"message": message, "type": type_, "code": code, "param": param}}, fields={"inputs": "input"})

KSERVE = Protocol("kserve v2", STATUSES, lambda code, type_, message, param: {"error": message},
                  fields={"inputs": "text"})

# Cohere's API (/v2/embed, /v2/rerank): {"message": "..."}, its fields by Cohere's names.
COHERE = Protocol("cohere", STATUSES, lambda code, type_, message, param: {"message": message},
                  fields={"inputs": "texts", "texts": "documents"})

# vLLM's pooling routes (/score, /classify): OpenAI's error shape, as vLLM answers them.
VLLM = Protocol("vllm", STATUSES, lambda code, type_, message, param: {
    "error": {"message": message, "type": type_, "code": code, "param": param}}, fields={"inputs": "input"})

# text-embeddings-inference: the body names one of TEI's ErrorType values, as TEI writes them,
# with TEI's statuses (Empty 400, Validation 422, Backend 424, Overloaded 429, Unhealthy 503).
# The statuses TEI has no case for (401, 404, 405, 413, 415, 500) stay headwise's, typed
# Validation (client mistakes) or Backend (500). Metrics reasons stay headwise's types.
TEI_TYPES = {"Empty": "Empty", "Backend": "Backend", "overloaded": "Overloaded", "not_ready": "Unhealthy",
             "internal": "Backend"}

TEI = Protocol("tei", {**STATUSES, Empty: Status(400, "invalid_request", shown="Empty"),
                       WrongModelKind: Status(424, "validation", shown="Backend")},
               lambda code, type_, message, param: {"error": message,
                                                    "error_type": TEI_TYPES.get(type_, "Validation")})


def route_class(protocol: Protocol) -> type[APIRoute]:
    """The `route_class` of a router whose routes answer errors in `protocol`'s shape."""
    return type(f"{protocol.name.title().replace(' ', '')}Route", (APIRoute,), {"protocol": protocol})


def protocol_of(scope) -> Protocol:
    """The matched route's protocol (native when no route matched)."""
    return getattr(scope.get("route"), "protocol", NATIVE)


def _note_failure(request: Request, reason: str) -> None:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        model = getattr(request.state, "model", "") or ""
        metrics.request_failures.labels(model=model, reason=reason).inc()


MAX_FIELD, MAX_MESSAGE = 40, 1000  # characters: an error body stays well under 2 KB


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "invalid_request", "malformed JSON body"
    by_field: dict[str, list[str]] = {}
    for e in errors:
        # Union members show up as extra loc parts ("str", "list[str]"); one field, one line.
        # A field name is the client's text too (an unknown key may be a megabyte): cut it short.
        loc = ".".join(_field(p) for p in e.get("loc", ()) if p != "body" and not _is_tag(p))
        if not loc:
            by_field.setdefault("body", []).append("must be a JSON object (Content-Type: application/json)")
            continue
        # pydantic's `msg` describes the expected value; `input` (the client's data) is dropped.
        msg = e.get("msg", "invalid value")
        if msg not in by_field.setdefault(loc, []):
            by_field[loc].append(msg)
    parts = [f"{loc}: {' or '.join(msgs)}" for loc, msgs in list(by_field.items())[:5]]
    if len(by_field) > 5:
        parts.append(f"... and {len(by_field) - 5} more")
    return 422, "validation", _short("; ".join(parts), MAX_MESSAGE)


def _field(part) -> str:
    """A location part as shown: indices and identifier-like names (at most MAX_FIELD
    characters); any other key the client sent is not repeated."""
    text = str(part)
    if isinstance(part, int) or (len(text) <= MAX_FIELD and text.isidentifier() and text.isascii()):
        return text
    return "<unknown field>"


def _short(text: str, limit: int = MAX_FIELD) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _is_tag(part) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "bool", "float") or "[" in part)


async def _service_error(request: Request, exc: ServiceError) -> Response:
    protocol = protocol_of(request.scope)
    _note_failure(request, protocol.status_of(exc).type)
    return protocol.error(exc)


async def _request_validation(request: Request, exc: RequestValidationError) -> Response:
    status, type_, message = _validation_message(exc)
    _note_failure(request, type_)
    return protocol_of(request.scope).response(status, type_, message)


_TYPES = {s.code: s.type for s in NATIVE.statuses.values()}


async def _http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    type_ = _TYPES.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "internal")
    if exc.status_code == 404:
        message = "no such route"
    elif exc.status_code == 405:
        message = f"method {request.method} not allowed on this route"
        type_ = "method_not_allowed"
    else:
        message = exc.detail if isinstance(exc.detail, str) else type_
    _note_failure(request, type_)
    headers = getattr(exc, "headers", None)
    return protocol_of(request.scope).response(exc.status_code, type_, message, headers)


async def _disconnected(request: Request, exc: Disconnected) -> Response:
    # Nobody reads this; the batcher has counted it (reason="disconnected"). 499 as nginx logs it.
    return NATIVE.response(499, "disconnected", "client closed the connection")


async def _disconnected_mid_body(request: Request, exc: ClientDisconnect) -> Response:
    # The client went away while sending its body: its mistake or its network, not ours, and
    # nothing to log beyond the count.
    _note_failure(request, "disconnected")
    return NATIVE.response(499, "disconnected", "client closed the connection while sending its body")


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    _note_failure(request, "internal")
    return protocol_of(request.scope).response(500, "internal", "internal server error")


# Looked up along the exception's MRO, as Starlette does: the most specific class wins.
HANDLERS = {ServiceError: _service_error, RequestValidationError: _request_validation,
            StarletteHTTPException: _http_exception, Disconnected: _disconnected,
            ClientDisconnect: _disconnected_mid_body, Exception: _unexpected}


async def handle(request: Request, exc: Exception) -> Response:
    """The response for an exception raised outside FastAPI's own handling: the same handlers
    that `install` registers."""
    handler = next(HANDLERS[cls] for cls in type(exc).__mro__ if cls in HANDLERS)  # Exception at worst
    return await handler(request, exc)


def install(app: FastAPI) -> None:
    for cls, handler in HANDLERS.items():
        app.add_exception_handler(cls, handler)
