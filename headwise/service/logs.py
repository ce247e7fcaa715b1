"""Request ids and log lines (docs/observability.md).

A request's id is the client's `X-Request-Id` when it is a plausible one (1 to 128 visible ASCII
characters), else one made here; it lives in the `request_id` context variable while the
request is served, so every log line written for it carries it. `HEADWISE_LOG_FORMAT=json`
writes one JSON object per line (time, level, logger, message, request_id, trace_id, and the
access log's fields); `text` (the default) is uvicorn's format, with the request's id appended.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import sys
import time
from contextvars import ContextVar

import orjson

request_id: ContextVar[str | None] = ContextVar("headwise_request_id", default=None)
# the trace a request's spans belong to (service.tracing sets it when tracing is on)
trace_id: ContextVar[str | None] = ContextVar("headwise_trace_id", default=None)

MAX_ID = 128


_PREFIX = os.urandom(8).hex()  # this process's; a new one after a fork (below)
_count = itertools.count()


def _reseed() -> None:
    global _PREFIX, _count
    _PREFIX, _count = os.urandom(8).hex(), itertools.count()


os.register_at_fork(after_in_child=_reseed)


def new_id() -> str:
    """32 hex digits: a random one per process and a counter (no system call per request)."""
    return f"{_PREFIX}{next(_count):016x}"


def accepted_id(raw: bytes | None) -> str:
    """The client's id when it is 1–128 visible ASCII characters (nothing a log line or a header
    could be split on), else a new one."""
    if raw and len(raw) <= MAX_ID and all(0x21 <= b <= 0x7E for b in raw):
        return raw.decode("ascii")
    return new_id()


class RequestContext(logging.Filter):
    """Puts the request's id and trace id on every record written while it is served."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        if not hasattr(record, "trace_id"):
            record.trace_id = trace_id.get()
        return True


class TextFormatter(logging.Formatter):
    """uvicorn's text lines (levelprefix, access line), with " request_id=…" when there is one."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        rid = getattr(record, "request_id", None)
        return f"{line} request_id={rid}" if rid else line


ACCESS_FIELDS = ("client_addr", "method", "path", "http_version", "status_code")


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": _iso(record.created), "level": record.levelname, "logger": record.name,
               "message": record.getMessage(), "request_id": getattr(record, "request_id", request_id.get()),
               "trace_id": getattr(record, "trace_id", trace_id.get())}
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            out |= dict(zip(ACCESS_FIELDS, record.args, strict=True))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def text_formatter(inner: str, **options) -> TextFormatter:
    """uvicorn's formatter named `inner` ("module.Class"), with the request's id appended."""
    module, _, name = inner.rpartition(".")
    return TextFormatter(getattr(importlib.import_module(module), name)(**options))


def configure(level: str, fmt: str, text: str = "%(levelname)s:     %(message)s") -> None:
    """A process without uvicorn (the engine process, the supervisor): the root logger in `fmt`,
    `text` the line's format for fmt="text"."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestContext())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(text))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def say(message: str, level: int = logging.ERROR, who: str = "headwise serve") -> None:
    """A line to stderr before any logging is set up (a start-up refusal), in the format
    HEADWISE_LOG_FORMAT asks for, however the other settings turned out."""
    if os.environ.get("HEADWISE_LOG_FORMAT", "").strip().lower() == "json":
        record = logging.LogRecord(who.replace(" ", "."), level, __file__, 0, message, None, None)
        line = JsonFormatter().format(record)
    else:
        line = f"{who}: {message}"
    print(line, file=sys.stderr, flush=True)
