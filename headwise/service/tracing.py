"""OpenTelemetry traces, opt-in (HEADWISE_OTEL=true; docs/observability.md#traces).

One server span per request (every route, the fast path's too), a child of the client's W3C
`traceparent` when it sends one. Its children: validate, queue, tokenise, batch (one per request
it served, with the batch's size and padded length; the first request's links to the others'
spans, theirs to it: service.engine.traced),
device run (under batch; written by the process that owns the device: the engine process in
process mode, which gets the batch spans' `traceparent`s in the run's message) and serialise;
one span per generation. Spans go to the OTLP/HTTP exporter the standard OTEL_* variables
configure (endpoint, headers, sampler, batch processor).

Off, every entry point here is a test of `ON` and nothing else: no SDK is imported. Times the
engine took with time.perf_counter() are placed on the wall clock by one offset.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

from headwise.service.logs import trace_id

ON = False
_tracer: Any = None
_provider: Any = None
_offset_ns = 0  # wall-clock ns − perf_counter ns
SDK_MISSING = ("HEADWISE_OTEL=true needs the OpenTelemetry SDK and its OTLP exporter: "
               "pip install 'headwise[otel]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)")


class TracingError(RuntimeError):
    """Tracing was asked for and cannot be set up (the SDK is missing)."""


def check(enabled: bool) -> None:
    """Raises TracingError when tracing is asked for and the SDK is not installed (start-up)."""
    from importlib.util import find_spec

    if enabled and (find_spec("opentelemetry.sdk") is None
                    or find_spec("opentelemetry.exporter.otlp.proto.http") is None):
        raise TracingError(SDK_MISSING)


def setup(enabled: bool, process: str, exporter=None) -> None:
    """Start exporting spans from this process (`process`: server, front-end, engine) when
    `enabled`, to OTLP/HTTP (or to `exporter`, in tests, span by span); raises TracingError
    when the SDK is not installed."""
    global ON, _tracer, _provider, _offset_ns
    if not enabled or ON:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as e:
        raise TracingError(SDK_MISSING) from e
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "headwise"),
                                "headwise.process": process, "process.pid": os.getpid()})
    _provider = TracerProvider(resource=resource)  # sampler: OTEL_TRACES_SAMPLER (parent-based on)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()) if exporter is None
                                 else SimpleSpanProcessor(exporter))
    _tracer = _provider.get_tracer("headwise")
    _offset_ns = time.time_ns() - time.perf_counter_ns()
    ON = True


def shutdown() -> None:
    """Export what is left (at a process's end)."""
    global ON
    if ON:
        ON = False
        _provider.shutdown()


def wall_ns(perf: float) -> int:
    return int(perf * 1e9) + _offset_ns


# -- the server span ----------------------------------------------------------------------------
class _Api:
    """The OpenTelemetry API's parts used per request, imported once tracing is on."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context, self.trace, self.server = context, trace, trace.SpanKind.SERVER
        self.error = Status(StatusCode.ERROR)
        self.propagator = TraceContextTextMapPropagator()


_api: _Api | None = None


def _otel() -> _Api:
    global _api
    if _api is None:
        _api = _Api()
    return _api


def start_server_span(method: str, path: str, carrier: dict[str, str] | None, request_id: str):
    """The request's span, a child of the `traceparent` (and `tracestate`) in `carrier` if any,
    made current when sampled (its trace id set for the log lines either way: service.logs)
    → what end_server_span takes."""
    api = _otel()
    parent = api.propagator.extract(carrier) if carrier else None
    span = _tracer.start_span(f"{method} {path}", context=parent, kind=api.server)
    ids = trace_id.set(format(span.get_span_context().trace_id, "032x"))
    if not span.is_recording():  # not sampled: nothing more to do
        return span, None, ids
    span.set_attributes({"http.request.method": method, "url.path": path, "headwise.request_id": request_id})
    return span, api.context.attach(api.trace.set_span_in_context(span)), ids


def end_server_span(span, token, ids, route: str | None, status: int, model: str) -> None:
    trace_id.reset(ids)
    if token is None:  # not sampled: nothing was made current
        return
    if route:
        span.update_name(f"{span.name.split(' ', 1)[0]} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if model:
        span.set_attribute("headwise.model", model)
    if status >= 500:
        span.set_status(_api.error)
    span.end()
    _api.context.detach(token)


# -- children ---------------------------------------------------------------------------------
def current():
    """The current context when its span records (the request's, sampled), for work done later
    elsewhere; None when off or not sampled: nothing is traced for that request."""
    if not ON:
        return None
    api = _otel()
    ctx = api.context.get_current()
    return ctx if api.trace.get_current_span(ctx).is_recording() else None


class _Child:
    __slots__ = ("span",)

    def __init__(self, span) -> None:
        self.span = span

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        self.span.end()
        return False


NOOP = nullcontext()  # reusable: one for every untraced block


def span(name: str, **attributes):
    """A context manager: a child of the current span while its block runs (nothing when off or
    not sampled). It is not made current: nothing under it needs to find it."""
    parent = current()
    if parent is None:
        return NOOP
    return _Child(_tracer.start_span(name, context=parent, attributes=attributes))


def record(name: str, parent, start: float, end: float, **attributes) -> None:
    """A finished child of `parent` (a context from `current()`), from perf_counter times."""
    _tracer.start_span(name, context=parent, start_time=wall_ns(start), attributes=attributes).end(wall_ns(end))


def start(name: str, parent, at: float, links: Iterable = (), **attributes):
    """A child of `parent` begun at perf_counter time `at`, linked to `links` (span contexts)."""
    link = _otel().trace.Link
    return _tracer.start_span(name, context=parent, start_time=wall_ns(at), links=[link(c) for c in links],
                              attributes=attributes)


def in_context(span):
    """A context whose current span is `span` (a parent for spans begun elsewhere)."""
    return _otel().trace.set_span_in_context(span)


def span_context(ctx):
    """The span context of a context's current span (for a link)."""
    return _otel().trace.get_current_span(ctx).get_span_context()


def end(spans: Iterable, at: float) -> None:
    for s in spans:
        s.end(wall_ns(at))


def traceparent(s) -> str:
    """A span's W3C traceparent, for a run's message to the engine process."""
    c = s.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def context_of(parent: str):
    """The context a traceparent names (another process's span)."""
    return _otel().propagator.extract({"traceparent": parent})


def device_runs(parents: Iterable, start_: float, end_: float, **attributes) -> None:
    """One `device run` span under each batch span (contexts), from perf_counter times."""
    for parent in parents:
        record("device run", parent, start_, end_, **attributes)
