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
