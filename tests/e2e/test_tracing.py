"""OpenTelemetry traces end to end (docs/observability.md#traces): a real `headwise serve` on
the real model, in both engine modes, exporting over OTLP/HTTP to a real receiver that decodes
the protobuf requests. A request sent with a W3C traceparent gives spans of that trace:
server → validate, queue, tokenise, batch → device run, serialise; in process mode the device
run comes from the engine process. A batch that served several requests links to the others."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ENGINE_MODES
from tests.fixtures.otlp import OtlpReceiver

pytestmark = pytest.mark.slow

MODES = ENGINE_MODES
MINILM = "all-minilm-l6-v2"
CHAIN = {"validate", "queue", "tokenise", "batch", "device run", "serialise"}


@pytest.fixture(scope="module")
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def models(tmp_path_factory, default_package) -> Path:
    """The real MiniLM package and a tiny GPT-2 (for the generation's span)."""
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2

    out = tmp_path_factory.mktemp("traced-models")
    (out / default_package.name).symlink_to(default_package, target_is_directory=True)
    ckpt = tmp_path_factory.mktemp("traced-gpt2")
    build_package(make_tiny_gpt2(ckpt / "gpt2", n_layers=2, n_heads=2, d_model=32), out, "tiny-gpt2",
                  progress=lambda m: None)
    return out


@pytest.fixture(scope="module", params=list(MODES))
def traced(request, start_server, receiver, models):
    env = {"HEADWISE_OTEL": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
           "OTEL_BSP_SCHEDULE_DELAY": "100", "HEADWISE_MAX_WAIT_MS": "30", "HEADWISE_LOG_FORMAT": "json",
           **MODES[request.param]}
    return request.param, start_server(models=models, env=env, args=("--access-log",))


def _parent() -> tuple[str, str]:
    return os.urandom(16).hex(), os.urandom(8).hex()


def test_a_request_gives_its_trace_through_the_queue_and_the_device(traced, receiver):
    mode, srv = traced
    trace_id, parent = _parent()
    r = srv.post("/v1/embed", json={"model": MINILM, "inputs": ["tracing through the engine"]},
                 headers={"traceparent": f"00-{trace_id}-{parent}-01", "X-Request-Id": "traced-1"})
    assert r.status_code == 200
    spans = receiver.trace(trace_id, CHAIN | {"POST /v1/embed"})
    by = {s.name: s for s in spans}
    assert CHAIN | {"POST /v1/embed"} <= set(by), sorted(by)
    server = by["POST /v1/embed"]
    assert server.parent_id == parent and server.kind == 2  # SERVER, under the client's span
    assert server.attributes["headwise.request_id"] == "traced-1"
    assert server.attributes["http.response.status_code"] == 200 and server.attributes["http.route"] == "/v1/embed"
    for name in ("validate", "queue", "tokenise", "batch", "serialise"):
        assert by[name].parent_id == server.span_id, name
        assert server.start_ns <= by[name].start_ns <= by[name].end_ns <= server.end_ns, name
    batch, device = by["batch"], by["device run"]
    assert device.parent_id == batch.span_id
    assert batch.attributes["headwise.batch.size"] >= 1 and batch.attributes["headwise.batch.padded_length"] >= 1
    expect = "engine" if mode == "process" else "server"
    assert device.resource["headwise.process"] == expect
    assert server.resource["headwise.process"] == ("front-end" if mode == "process" else "server")
    lines = [json.loads(line) for line in srv.log.read_text().splitlines() if line.strip()]
    access = [line for line in lines if line["request_id"] == "traced-1" and line["logger"] == "uvicorn.access"]
    assert access and access[0]["trace_id"] == trace_id  # the log line names the trace


def test_a_batch_links_to_each_request_it_served(traced, receiver):
    _, srv = traced

    def one(p):
        return httpx.post(srv.url + "/v1/embed", json={"model": MINILM, "inputs": ["a batch shared by several requests"]},
                          headers={"traceparent": f"00-{p[0]}-{p[1]}-01"}, timeout=60).status_code

    shared: list = []
    for _ in range(5):  # whether 12 concurrent requests meet in one batch is the scheduler's: a few bursts
        parents = [_parent() for _ in range(12)]
        with ThreadPoolExecutor(12) as pool:
            assert set(pool.map(one, parents)) == {200}
        traces = {t: receiver.trace(t, {"batch", "POST /v1/embed"}) for t, _ in parents}
        servers = {t: next(s for s in spans if s.kind == 2) for t, spans in traces.items()}
        shared = [b for spans in traces.values() for b in spans if b.name == "batch"
                  and b.attributes["headwise.batch.requests"] > 1]
        if shared:
            break
    assert shared, "no two of 12 concurrent requests shared a batch, in 5 bursts"
    by_id = {b.span_id: b for b in shared}
    for b in shared:  # the batch's first request links to each other one; each other one links to the first's
        n = b.attributes["headwise.batch.requests"]
        if len(b.links) == 1 and b.links[0][1] in by_id:
            leader = by_id[b.links[0][1]]
            assert (b.trace_id, servers[b.trace_id].span_id) in leader.links
        else:
            assert len(b.links) == n - 1
            for trace_id, span_id in b.links:
                assert trace_id != b.trace_id and servers[trace_id].span_id == span_id


def test_untraced_requests_still_get_a_root_span(traced, receiver):
    _, srv = traced
    r = srv.post("/v1/embeddings", json={"model": MINILM, "input": "no parent"}, headers={"X-Request-Id": "root-1"})
    assert r.status_code == 200
    for _ in range(200):
        roots = [s for s in list(receiver.spans) if s.attributes.get("headwise.request_id") == "root-1"]
        if roots:
            break
        time.sleep(0.05)
    assert roots and roots[0].parent_id == "" and roots[0].name == "POST /v1/embeddings"


def test_a_generation_is_one_span_with_its_step_count(traced, receiver):
    _, srv = traced
    trace_id, parent = _parent()
    r = srv.post("/v1/generate", json={"model": "tiny-gpt2", "prompt": "hello", "max_new_tokens": 5},
                 headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    assert r.status_code == 200, r.text
    spans = receiver.trace(trace_id, {"generate", "POST /v1/generate"})
    gen = [s for s in spans if s.name == "generate"]
    server = next(s for s in spans if s.name == "POST /v1/generate")
    assert len(gen) == 1 and gen[0].parent_id == server.span_id  # one span, not one per token
    assert gen[0].attributes["headwise.generation.steps"] == len(r.json()["ids"])
