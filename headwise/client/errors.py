"""HeadwiseError: an HTTP error answer, read from the native error body
`{"error": {"message", "type", "code"}}` (docs/api.md#errors), or from the other protocols'
shapes when a compatible route answered."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# A 422's message starts with the field path: `attention.layers: each index at most once`.
_FIELD = re.compile(r"^([A-Za-z_][\w]*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): ")


class HeadwiseError(Exception):
    """The server answered with an error status.

    `status`: the HTTP status; `type`: headwise's error type (`validation`, `not_found`,
    `too_large`, `overloaded`, ...); `message`: the server's message; `field`: the request field
    at fault when the answer names one (OpenAI's `param`, or the path a 422 message starts
    with), else None; `retry_after`: seconds from `Retry-After` (429, 503): a non-negative
    number at most MAX_RETRY_AFTER (3600; larger values are clamped), None when the header is
    absent or not such a number ("inf", "nan", "-5", "1e309", an HTTP date); `request_id`: the
    answer's `X-Request-Id` (the id the server logged the request under), None without one."""

    def __init__(self, status: int, type: str, message: str, field: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {type}: {message}")
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.request_id: str | None = None

    def __repr__(self) -> str:
        return (f"HeadwiseError(status={self.status!r}, type={self.type!r}, message={self.message!r}, "
                f"field={self.field!r})")


def error_from_body(status: int, body: Any, retry_after: float | None = None) -> HeadwiseError:
    """The error an error answer's decoded JSON body (or its text, when it was not JSON) says."""
    err = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(err, Mapping):  # native, OpenAI, vLLM
        message = str(err.get("message", ""))
        field = err.get("param") or err.get("field")
        kind = str(err.get("type") or "error")
    elif isinstance(err, str):  # KServe {"error"}, TEI {"error", "error_type"}
        message, field, kind = err, None, str(body.get("error_type") or "error")
    elif isinstance(body, Mapping) and isinstance(body.get("message"), str):  # Cohere
        message, field, kind = body["message"], None, "error"
    else:
        message = body if isinstance(body, str) else json.dumps(body)
        field, kind = None, "http_error"
    if field is None and status == 422 and (m := _FIELD.match(message)):
        field = m.group(1)
    return HeadwiseError(status, kind, message[:2000], str(field) if field is not None else None, retry_after)


def error_from_response(status: int, content: bytes, headers: Mapping[str, str]) -> HeadwiseError:
    """The error of an HTTP answer with status ≥ 400. Always a HeadwiseError, whatever the body:
    one nested too deeply for Python's recursion limit (json.loads, str() and json.dumps all
    recurse) is read as its text."""
    retry_after = _retry_after(headers.get("retry-after"))
    text = content.decode("utf-8", "replace")
    try:
        body: Any = json.loads(content) if content else ""
    except (ValueError, RecursionError):
        body = text
    try:
        err = error_from_body(status, body, retry_after)
    except RecursionError:  # e.g. {"error": {"message": [[[...]]]}}
        err = HeadwiseError(status, "http_error", text[:2000], None, retry_after)
    err.request_id = headers.get("x-request-id")
    return err


MAX_RETRY_AFTER = 3600.0  # seconds: a longer Retry-After is clamped to this
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a non-negative decimal number ("12", "0.5"), clamped to
    MAX_RETRY_AFTER. Anything else is dropped (None): an HTTP date (headwise never sends one),
    "inf", "nan", "-5", "1e309", "٣", so that `time.sleep(e.retry_after)` never raises."""
    if value is None or not _SECONDS.fullmatch(value.strip()):
        return None
    return min(float(value), MAX_RETRY_AFTER)
