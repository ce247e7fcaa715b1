"""The one place where exceptions become HTTP responses (docs/api.md, errors).

Body: {"error": {"message", "type", "code"}}; on the compatible routes the protocol's shape:
KServe v2 (/v2 routes) {"error": "..."}, OpenAI (/v1/embeddings) adds "param". Messages never
carry a stack trace or the client's input.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

log = logging.getLogger("headwise.service")


class APIError(Exception):
    status = 500
    type = "internal"

    def __init__(self, message: str, headers: dict[str, str] | None = None, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}
        self.param = param  # the request field at fault (OpenAI's error shape)


class InvalidRequest(APIError):
    status, type = 400, "invalid_request"


class Unauthorized(APIError):
    status, type = 401, "unauthorized"


class NotFound(APIError):
    status, type = 404, "not_found"


class TooLarge(APIError):
    status, type = 413, "too_large"


class UnsupportedMediaType(APIError):
    status, type = 415, "unsupported_media_type"


class Validation(APIError):
    status, type = 422, "validation"


class Overloaded(APIError):
    status, type = 429, "overloaded"


class NotReady(APIError):
    status, type = 503, "not_ready"


class Disconnected(Exception):
    """The client went away before its request reached inference."""


_BY_STATUS = {c.status: c.type for c in (InvalidRequest, Unauthorized, NotFound, TooLarge,
                                          UnsupportedMediaType, Validation, Overloaded, NotReady)}


OPENAI_PATHS = frozenset({"/v1/embeddings"})


def route_of(request: Request) -> str:
    """The matched route's template ("" when none matched: an unknown path gets the native shape)."""
    return getattr(request.scope.get("route"), "path", "")


def error_response(status: int, type_: str, message: str, headers: dict | None = None, *,
                   path: str = "", param: str | None = None) -> Response:
    """`path`: the route template, which picks the protocol's error shape."""
    if path == "/v2" or path.startswith("/v2/"):
        payload = {"error": message}
    else:
        payload = {"error": {"message": message, "type": type_, "code": status}}
        if path in OPENAI_PATHS:
            payload["error"]["param"] = param
    body = orjson.dumps(payload)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _note_failure(request: Request, reason: str) -> None:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        model = getattr(request.state, "model", "") or ""
        metrics.request_failures.labels(model=model, reason=reason).inc()


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


MAX_FIELD, MAX_MESSAGE = 40, 1000  # characters: an error body stays well under 2 KB


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


async def _api_error(request: Request, exc: APIError) -> Response:
    _note_failure(request, exc.type)
    return error_response(exc.status, exc.type, exc.message, exc.headers, path=route_of(request), param=exc.param)


async def _request_validation(request: Request, exc: RequestValidationError) -> Response:
    status, type_, message = _validation_message(exc)
    _note_failure(request, type_)
    return error_response(status, type_, message, path=route_of(request))


async def _http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    type_ = _BY_STATUS.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "internal")
    if exc.status_code == 404:
        message = "no such route"
    elif exc.status_code == 405:
        message = f"method {request.method} not allowed on this route"
        type_ = "method_not_allowed"
    else:
        message = exc.detail if isinstance(exc.detail, str) else type_
    _note_failure(request, type_)
    return error_response(exc.status_code, type_, message, getattr(exc, "headers", None), path=route_of(request))


async def _disconnected(request: Request, exc: Disconnected) -> Response:
    # Nobody reads this; the batcher has counted it (reason="disconnected"). 499 as nginx logs it.
    return error_response(499, "disconnected", "client closed the connection")


async def _disconnected_mid_body(request: Request, exc: ClientDisconnect) -> Response:
    # The client went away while sending its body: its mistake or its network, not ours, and
    # nothing to log beyond the count.
    _note_failure(request, "disconnected")
    return error_response(499, "disconnected", "client closed the connection while sending its body")


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    _note_failure(request, "internal")
    return error_response(500, "internal", "internal server error", path=route_of(request))


# Looked up along the exception's MRO, as Starlette does: the most specific class wins.
HANDLERS = {APIError: _api_error, RequestValidationError: _request_validation,
            StarletteHTTPException: _http_exception, Disconnected: _disconnected,
            ClientDisconnect: _disconnected_mid_body, Exception: _unexpected}


async def handle(request: Request, exc: Exception) -> Response:
    """The response for an exception raised outside FastAPI's own handling (the direct routes
    of service.middleware): the same handlers that `install` registers."""
    handler = next(HANDLERS[cls] for cls in type(exc).__mro__ if cls in HANDLERS)  # Exception at worst
    return await handler(request, exc)


def install(app: FastAPI) -> None:
    for cls, handler in HANDLERS.items():
        app.add_exception_handler(cls, handler)
