"""OpenTelemetry traces, opt-in (HEADWISE_OTEL=true; docs/observability.md#traces).

One server span per request (every route, the fast path's too), a child of the client's W3C
`traceparent` when it sends one. Its children: validate, queue, tokenise, batch (one per request
it served, with the batch's size and padded length; the first request's links to the others'
spans, theirs to it: service.engine.traced),
device run (under batch; written by the process that owns the device: the engine process in
process mode, which gets the batch spans' `traceparent`s in the run's message) and serialise;
one span per generation. Spans go to the OTLP/HTTP exporter the standard OTEL_* variables
configure (endpoint, headers, sampler, batch processor).

The SDK's sampler decides a request's server span (OTEL_TRACES_SAMPLER), once; a request it
drops makes no span at all, and its children follow the server span. Spans are not started and
ended through the SDK's Tracer (a sampler run, a lock, attribute bounds and processor hooks per
span): each is written once, finished, as the SDK's own `ReadableSpan` (a child's ids: the
parent's trace, a random span id), and handed to the span processor, which batches and exports
it as before. A request's handle for its children (`current()`) is its server span's
SpanContext.

Off, every entry point here is a test of `ON` and nothing else: no SDK is imported. Times the
engine took with time.perf_counter() are placed on the wall clock by one offset.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable
from contextlib import nullcontext
from contextvars import ContextVar
from typing import Any

from headwise.service.logs import trace_id

ON = False
_provider: Any = None
_sdk: Any = None  # _Sdk, once on
_offset_ns = 0  # wall-clock ns − perf_counter ns
_current: ContextVar = ContextVar("headwise_span", default=None)  # the sampled request's server SpanContext
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


class _Sdk:
    """What writing a span needs, looked up once: the provider's sampler, resource and ids, the
    span processor's on_end, the SDK's classes."""

    def __init__(self, provider, processor) -> None:
        from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
        from opentelemetry.sdk.util import BoundedList
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import (
            Link,
            SpanContext,
            SpanKind,
            Status,
            StatusCode,
            TraceFlags,
            get_current_span,
        )
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.readable, self.span_context, self.link, self.flags = ReadableSpan, SpanContext, Link, TraceFlags
        self.on_end = processor.on_end
        self.should_sample = provider.sampler.should_sample
        self.ids = provider.id_generator
        self.random_ids = provider.id_generator.is_trace_id_random()
        self.resource = provider.resource
        self.scope = InstrumentationScope("headwise", "", None, None)  # what get_tracer("headwise") names
        self.server, self.internal = SpanKind.SERVER, SpanKind.INTERNAL
        self.unset, self.error = Status(StatusCode.UNSET), Status(StatusCode.ERROR)
        self.propagator = TraceContextTextMapPropagator()
        self.get_current_span = get_current_span
        limits = SpanLimits()  # OTEL_SPAN_LINK_COUNT_LIMIT and the rest, as the SDK's spans read them
        self.max_links, self.bounded = limits.max_links, BoundedList


def setup(enabled: bool, process: str, exporter=None) -> None:
    """Start exporting spans from this process (`process`: server, front-end, engine) when
    `enabled`, to OTLP/HTTP (or to `exporter`, in tests, span by span); raises TracingError
    when the SDK is not installed. OTEL_SDK_DISABLED=true leaves tracing off."""
    global ON, _provider, _sdk, _offset_ns
    if not enabled or ON or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
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
    processor = BatchSpanProcessor(OTLPSpanExporter()) if exporter is None else SimpleSpanProcessor(exporter)
    _provider.add_span_processor(processor)  # the provider's shutdown flushes it
    _sdk = _Sdk(_provider, processor)
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


def _write(name: str, context, parent, start_ns: int, end_ns: int, attributes, links=(), kind=None,
           status=None) -> None:
    """Hand one finished span to the processor (an internal one, status unset, by default)."""
    s = _sdk
    s.on_end(s.readable(name, context=context, parent=parent, resource=s.resource, attributes=attributes,
                        links=links, kind=kind or s.internal, status=status or s.unset, start_time=start_ns,
                        end_time=end_ns, instrumentation_scope=s.scope))


def _span_id() -> int:
    """A random span id, never 0 (the SDK's RandomIdGenerator's, less its calls)."""
    return random.getrandbits(64) or 1


def child_of(parent):
    """A new span's SpanContext under `parent` (a SpanContext): its trace, flags and state, and a
    new span id."""
    return _sdk.span_context(parent.trace_id, _span_id(), False, parent.trace_flags, parent.trace_state)


# -- the server span ----------------------------------------------------------------------------
def start_server_span(method: str, path: str, carrier: dict[str, str] | None, request_id: str):
    """The request's span, a child of the `traceparent` (and `tracestate`) in `carrier` if any,
    made current when sampled (its trace id set for the log lines either way: service.logs)
    → what end_server_span takes."""
    s = _sdk
    parent = context = None
    if carrier:
        context = s.propagator.extract(carrier)
        parent = s.get_current_span(context).get_span_context()
        if not parent.is_valid:
            parent = None
    tid = s.ids.generate_trace_id() if parent is None else parent.trace_id
    name = f"{method} {path}"
    sampled = s.should_sample(context, tid, name, s.server, None, ())
    ids = trace_id.set(format(tid, "032x"))
    if not sampled.decision.is_sampled():  # not sampled: no span, nothing made current
        return None, None, ids
    random_ids = s.random_ids if parent is None else parent.trace_flags.random_trace_id
    ctx = s.span_context(tid, _span_id(), False, s.flags(0x03 if random_ids else 0x01), sampled.trace_state)
    state = (ctx, parent, method, path, request_id, sampled.attributes, time.time_ns())
    return state, _current.set(ctx), ids


def end_server_span(state, token, ids, route: str | None, status: int, model: str) -> None:
    trace_id.reset(ids)
    if state is None:  # not sampled
        return
    end = time.time_ns()
    _current.reset(token)
    ctx, parent, method, path, request_id, extra, start = state
    attributes = {**extra} if extra else {}
    attributes["http.request.method"] = method
    attributes["url.path"] = path
    attributes["headwise.request_id"] = request_id
    if route:
        attributes["http.route"] = route
    attributes["http.response.status_code"] = status
    if model:
        attributes["headwise.model"] = model
    _write(f"{method} {route or path}", ctx, parent, start, end, attributes, kind=_sdk.server,
           status=_sdk.error if status >= 500 else None)


# -- children ---------------------------------------------------------------------------------
def current():
    """The request's server span's context when it is sampled, for work done later elsewhere (a
    parent); None when off or not sampled: nothing is traced for that request."""
    return _current.get() if ON else None


class _Child:
    __slots__ = ("attributes", "name", "parent", "start")

    def __init__(self, name: str, parent, attributes: dict) -> None:
        self.name, self.parent, self.attributes, self.start = name, parent, attributes, time.time_ns()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        _write(self.name, child_of(self.parent), self.parent, self.start, time.time_ns(), self.attributes)
        return False


NOOP = nullcontext()  # reusable: one for every untraced block


def span(name: str, **attributes):
    """A context manager: a child of the current span while its block runs (nothing when off or
    not sampled)."""
    parent = current()
    if parent is None:
        return NOOP
    return _Child(name, parent, attributes)


def record(name: str, parent, start: float, end: float, **attributes) -> None:
    """A finished child of `parent` (from `current()`), from perf_counter times."""
    _write(name, child_of(parent), parent, wall_ns(start), wall_ns(end), attributes)


class Begun:
    """A span begun and not yet written: its context (a parent for others, a link) is known
    from the start; end() writes it."""

    __slots__ = ("attributes", "context", "links", "name", "parent", "start")

    def __init__(self, name: str, parent, start_ns: int, attributes: dict, links) -> None:
        self.name, self.context, self.parent = name, child_of(parent), parent
        self.start, self.attributes, self.links = start_ns, attributes, links


def start(name: str, parent, at: float, links: Iterable = (), attributes: dict | None = None) -> Begun:
    """A child of `parent` begun at perf_counter time `at`, linked to `links` (span contexts; the
    SDK's link count limit applies), with `attributes` (kept, not copied)."""
    s = _sdk
    made = [s.link(c) for c in links]
    if len(made) > s.max_links:
        made = s.bounded.from_seq(s.max_links, made)
    return Begun(name, parent, wall_ns(at), attributes or {}, made)


def end(spans: Iterable[Begun], at: float) -> None:
    """Write begun spans, ended at perf_counter time `at`."""
    end_ns = wall_ns(at)
    for b in spans:
        _write(b.name, b.context, b.parent, b.start, end_ns, b.attributes, b.links)


def traceparent(b: Begun) -> str:
    """A begun span's W3C traceparent, for a run's message to the engine process."""
    c = b.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def context_of(parent: str):
    """The span context a traceparent names (another process's span), or None if it is not one."""
    try:
        version, tid, sid, flags = parent.split("-")
        ctx = _sdk.span_context(int(tid, 16), int(sid, 16), True, _sdk.flags(int(flags, 16)))
    except ValueError:
        return None
    return ctx if version == "00" and (len(tid), len(sid), len(flags)) == (32, 16, 2) and ctx.is_valid else None


def device_runs(parents: Iterable, start_: float, end_: float, **attributes) -> None:
    """One `device run` span under each batch span (span contexts; None: skipped), from
    perf_counter times."""
    start_ns, end_ns = wall_ns(start_), wall_ns(end_)
    for parent in parents:
        if parent is not None:
            _write("device run", child_of(parent), parent, start_ns, end_ns, attributes)
