"""service.tracing: off, nothing of the SDK is loaded; asked for without the SDK, start-up
stops and says why; on, an in-process request gives its chain of spans (the fake backend's
device run written here, in-process mode)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

import pytest

from headwise.service import tracing


def test_off_no_sdk_is_imported(tiny_package):
    code = textwrap.dedent(f"""
        import sys
        from fastapi.testclient import TestClient
        from headwise.service.api.app import create_app
        from headwise.service.settings import Settings
        from tests.unit.fakes import FakeBackend, wait_ready
        with TestClient(create_app(Settings(models_dir={str(tiny_package.parent)!r}),
                                   backend_factory=FakeBackend)) as c:
            wait_ready(c)
            assert c.post("/v1/embed", json={{"inputs": "x"}}).status_code == 200
        loaded = [m for m in sys.modules if m.startswith("opentelemetry.sdk")]
        assert not loaded, loaded
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_asked_for_without_the_sdk_start_up_stops_naming_it(tiny_package, monkeypatch, capsys):
    from importlib import util

    from headwise.service.server import serve

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a))
    monkeypatch.setenv("HEADWISE_OTEL", "true")
    monkeypatch.setenv("HEADWISE_PROVIDER", "cpu")
    for var in ("HEADWISE_WORKERS", "HEADWISE_MODELS_DIR"):  # serve.main writes them: restored after
        monkeypatch.setenv(var, "")
    args = argparse.Namespace(models=str(tiny_package.parent), host=None, port=None, workers=1,
                              log_level="warning", access_log=False)
    assert serve.main(args) == 2
    assert "headwise[otel]" in capsys.readouterr().err


@pytest.fixture
def spans():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracing.setup(True, "server", exporter)
    yield exporter
    tracing.shutdown()


def test_on_a_request_gives_its_chain(spans, package):
    from opentelemetry.trace import SpanKind

    from tests.unit.fakes import client_for, wait_ready

    with client_for(package) as c:
        wait_ready(c)
        r = c.post("/v1/embed", json={"inputs": ["the cat sat"]},
                   headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
        assert r.status_code == 200
    by = {s.name: s for s in spans.get_finished_spans()}
    server = by["POST /v1/embed"]
    assert server.kind == SpanKind.SERVER and format(server.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert server.parent.span_id == 0xB7AD6B7169203331
    for name in ("validate", "queue", "tokenise", "batch", "serialise"):
        assert by[name].parent.span_id == server.context.span_id, name
    assert by["device run"].parent.span_id == by["batch"].context.span_id
    assert by["batch"].attributes["headwise.batch.size"] == 1


def test_analytics_rows_are_traced_under_their_request(spans, package):
    from tests.unit.fakes import client_for, wait_ready

    with client_for(package) as c:
        wait_ready(c)
        assert c.post("/v1/occlusion", json={"input": "the cat sat on the mat"}).status_code == 200
    done = spans.get_finished_spans()
    server = next(s for s in done if s.name == "POST /v1/occlusion")
    batches = [s for s in done if s.name == "batch" and s.parent.span_id == server.context.span_id]
    assert batches and all(s.context.trace_id == server.context.trace_id for s in batches)


def test_a_request_not_sampled_costs_no_child_span(package, monkeypatch):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.unit.fakes import client_for, wait_ready

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    exporter = InMemorySpanExporter()
    tracing.setup(True, "server", exporter)
    try:
        with client_for(package) as c:
            wait_ready(c)
            r = c.post("/v1/embed", json={"inputs": ["the cat sat"]}, headers={"X-Request-Id": "unsampled"})
            assert r.status_code == 200 and r.headers["x-request-id"] == "unsampled"
    finally:
        tracing.shutdown()
    assert exporter.get_finished_spans() == ()


# -- the spans written directly (service.tracing's ReadableSpans, not the SDK's Tracer) -------------
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_server_span_follows_its_parent_and_is_named_by_its_route(spans):
    from opentelemetry.trace import SpanKind, StatusCode

    from headwise.service.logs import trace_id

    state, token, ids = tracing.start_server_span("POST", "/v1/items/7", {"traceparent": TRACEPARENT,
                                                                          "tracestate": "vendor=1"}, "rid-1")
    assert trace_id.get() == "0af7651916cd43dd8448eb211c80319c"
    here = tracing.current()
    assert here.trace_id == 0x0AF7651916CD43DD8448EB211C80319C and here.trace_flags.sampled
    tracing.end_server_span(state, token, ids, "/v1/items/{id}", 503, "m")
    assert tracing.current() is None and trace_id.get() is None
    (server,) = spans.get_finished_spans()
    assert server.name == "POST /v1/items/{id}" and server.kind == SpanKind.SERVER
    assert server.context == here and server.parent.span_id == 0xB7AD6B7169203331 and server.parent.is_remote
    assert server.context.trace_state.get("vendor") == "1"
    assert dict(server.attributes) == {"http.request.method": "POST", "url.path": "/v1/items/7",
                                       "headwise.request_id": "rid-1", "http.route": "/v1/items/{id}",
                                       "http.response.status_code": 503, "headwise.model": "m"}
    assert server.status.status_code == StatusCode.ERROR
    assert server.start_time <= server.end_time and server.instrumentation_scope.name == "headwise"
    assert server.resource.attributes["headwise.process"] == "server"


def test_a_root_server_span_gets_a_fresh_random_trace(spans):
    state, token, ids = tracing.start_server_span("GET", "/health", None, "rid-2")
    tracing.end_server_span(state, token, ids, None, 200, "")
    (server,) = spans.get_finished_spans()
    assert server.parent is None and server.context.trace_id != 0 and server.context.span_id != 0
    assert int(server.context.trace_flags) == 0x03  # sampled, random trace id (as the SDK's Tracer sets it)
    assert server.name == "GET /health" and "http.route" not in server.attributes
    assert "headwise.model" not in server.attributes and server.status.is_unset


def test_children_share_the_trace_flags_and_state_of_their_parent(spans):
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    parent = SpanContext(0xABC, 0xDEF, False, TraceFlags(0x03), TraceState([("k", "v")]))
    kids = [tracing.child_of(parent) for _ in range(100)]
    assert len({kid.span_id for kid in kids}) == 100
    for kid in kids:
        assert (kid.trace_id, kid.trace_flags, kid.trace_state, kid.is_remote) == (0xABC, 0x03, parent.trace_state, False)
        assert kid.span_id not in (0, 0xDEF) and kid.is_valid


def test_context_of_reads_a_traceparent_and_refuses_what_is_not_one(spans):
    ctx = tracing.context_of(TRACEPARENT)
    assert (ctx.trace_id, ctx.span_id, int(ctx.trace_flags), ctx.is_remote) == (
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1, True)
    for bad in ("", "00-xyz", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "01-" + TRACEPARENT[3:],
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", "00-0af7651916cd43dd8448eb211c8031zz-b7ad6b7169203331-01"):
        assert tracing.context_of(bad) is None, bad


def test_begun_spans_are_written_when_ended_with_their_links(spans):
    from opentelemetry.trace import SpanContext, TraceFlags

    a = SpanContext(0x1, 0x11, False, TraceFlags(0x01))
    b = SpanContext(0x2, 0x22, False, TraceFlags(0x01))
    attributes = {"headwise.batch.size": 2}
    first = tracing.start("batch", a, 1.0, [b], attributes)
    other = tracing.start("batch", b, 1.0, [first.context], attributes)
    assert spans.get_finished_spans() == ()  # nothing written before the end
    assert tracing.traceparent(first) == f"00-{0x1:032x}-{first.context.span_id:016x}-01"
    assert tracing.context_of(tracing.traceparent(first)).span_id == first.context.span_id
    tracing.end([first, other], 2.0)
    tracing.device_runs([first.context, None], 1.2, 1.8, **{"headwise.device.rows": 2})
    got = {(s.name, s.context.trace_id): s for s in spans.get_finished_spans()}
    one, two, device = got["batch", 1], got["batch", 2], got["device run", 1]
    assert one.parent == a and two.parent == b and one.context == first.context
    assert [link.context for link in one.links] == [b] and [link.context for link in two.links] == [first.context]
    assert one.end_time - one.start_time == 1_000_000_000 and dict(one.attributes) == attributes
    assert device.parent == first.context and device.start_time == tracing.wall_ns(1.2)
    assert len(got) == 3  # the None parent gave no span


def test_links_over_the_sdks_limit_are_dropped_and_counted(monkeypatch):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanContext, TraceFlags

    monkeypatch.setenv("OTEL_SPAN_LINK_COUNT_LIMIT", "2")
    exporter = InMemorySpanExporter()
    tracing.setup(True, "server", exporter)
    try:
        parent = SpanContext(0x1, 0x11, False, TraceFlags(0x01))
        tracing.end([tracing.start("batch", parent, 1.0, [SpanContext(i, i, False) for i in range(2, 7)])], 2.0)
    finally:
        tracing.shutdown()
    (batch,) = exporter.get_finished_spans()
    assert len(batch.links) == 2 and batch.dropped_links == 3


def test_a_block_span_is_written_under_the_current_request_only(spans):
    with tracing.span("validate"):
        pass
    assert spans.get_finished_spans() == ()  # no request: nothing
    state, token, ids = tracing.start_server_span("POST", "/v1/embed", None, "rid-3")
    with tracing.span("serialise", **{"headwise.response.bound_bytes": 10}):
        pass
    tracing.end_server_span(state, token, ids, "/v1/embed", 200, "")
    child, server = spans.get_finished_spans()
    assert child.name == "serialise" and child.parent == server.context
    assert server.start_time <= child.start_time <= child.end_time <= server.end_time
    assert dict(child.attributes) == {"headwise.response.bound_bytes": 10}


def test_a_dropped_request_makes_no_span_and_nothing_current(monkeypatch):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from headwise.service.logs import trace_id

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    exporter = InMemorySpanExporter()
    tracing.setup(True, "server", exporter)
    try:
        state, token, ids = tracing.start_server_span("POST", "/v1/embed", None, "rid-4")
        assert (state, token) == (None, None) and tracing.current() is None and len(trace_id.get()) == 32
        tracing.end_server_span(state, token, ids, "/v1/embed", 200, "")
        # a client's sampled parent is still followed (parent-based)
        state, token, ids = tracing.start_server_span("POST", "/v1/embed", {"traceparent": TRACEPARENT}, "rid-5")
        assert tracing.current() is not None
        tracing.end_server_span(state, token, ids, "/v1/embed", 200, "")
    finally:
        tracing.shutdown()
    assert [s.attributes["headwise.request_id"] for s in exporter.get_finished_spans()] == ["rid-5"]


def test_sdk_disabled_leaves_tracing_off(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    tracing.setup(True, "server")
    assert not tracing.ON and tracing.current() is None
