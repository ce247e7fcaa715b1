"""The direct routes (service.api.dependencies.direct): POST /v1/embed and /v1/embeddings are answered by
ServiceMiddleware past FastAPI's stack, with the same errors, metrics and disconnect checks."""

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.api.app import create_app
from service.api.dependencies import disconnect_probe
from service.api.middleware import ServiceMiddleware
from service.settings import Settings
from tests.unit.service_fakes import FakeBackend, make_package
from tests.unit.test_service_app import assert_error, wait_ready

BOOM = "boom"  # [CLS] [UNK] [SEP]: on that batch the backend below fails like a bug would
UNK = 1


class FailingBackend(FakeBackend):
    def run(self, role, feeds, outputs):
        ids = feeds["input_ids"]
        if ids.shape[1] == 3 and (ids == UNK).any():  # warm-up batches are 8 tokens or more
            raise RuntimeError("a bug, not the client's fault")
        return super().run(role, feeds, outputs)


def service_middleware(app) -> ServiceMiddleware:
    layer = app.middleware_stack
    while not isinstance(layer, ServiceMiddleware):
        layer = layer.app
    return layer


@pytest.fixture
def served(tmp_path):
    app = create_app(Settings(models_dir=make_package(tmp_path / "models").parent), backend_factory=FailingBackend)
    with TestClient(app) as client:
        wait_ready(client)
        yield app, client


def test_hot_routes_skip_fastapi_and_others_do_not(served):
    app, client = served
    mw = service_middleware(app)
    assert set(mw.direct) == {("POST", "/v1/embed"), ("POST", "/v1/embeddings")}
    seen = []
    inner = mw.app

    async def spy(scope, receive, send):
        seen.append(scope["path"])
        await inner(scope, receive, send)

    mw.app = spy
    assert client.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200
    assert client.post("/v1/embeddings", json={"input": "the cat sat"}).status_code == 200
    assert client.post("/v1/tokenize", json={"inputs": "the cat"}).status_code == 200
    assert_error(client.get("/v1/embed"), 405, "method_not_allowed")
    assert seen == ["/v1/tokenize", "/v1/embed"]
    assert "/v1/embed" in client.get("/openapi.json").json()["paths"]


def test_direct_route_errors_keep_their_shape_and_counts(served):
    _, client = served
    assert_error(client.post("/v1/embed", json={"inputs": "a", "attention": {"layers": [99]}}), 422, "validation")
    assert_error(client.post("/v1/embed", content=b"{", headers={"content-type": "application/json"}),
                 400, "invalid_request")
    err = assert_error(client.post("/v1/embeddings", json={"input": "x", "dimensions": 0}), 400, "invalid_request")
    assert err["param"] == "dimensions"  # OpenAI's shape on the OpenAI route
    # An unexpected error in inference: the documented 500, no trace, and the server goes on.
    err = assert_error(client.post("/v1/embed", json={"inputs": BOOM}), 500, "internal")
    assert "bug" not in err["message"]
    assert client.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200
    fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}

    def count(fam, **labels):
        return sum(s.value for s in fams[fam].samples
                   if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))

    assert count("headwise_requests", route="/v1/embed", code="500") == 1
    assert count("headwise_requests", route="/v1/embed", code="422") == 1
    assert count("headwise_requests", route="/v1/embeddings", code="400") == 1
    assert count("headwise_request_failures", reason="internal") == 1


def test_disconnect_probe_reads_uvicorns_flag_else_asks_starlette():
    class Cycle:  # uvicorn's RequestResponseCycle: `receive` is its bound method
        disconnected = False

        async def receive(self):
            raise AssertionError("the probe must not receive")

    cycle = Cycle()
    probe = disconnect_probe(SimpleNamespace(receive=cycle.receive))
    assert asyncio.run(probe()) is False
    cycle.disconnected = True
    assert asyncio.run(probe()) is True

    async def plain_receive():
        return {"type": "http.disconnect"}

    other = SimpleNamespace(receive=plain_receive, is_disconnected="starlette's")
    assert disconnect_probe(other) == "starlette's"


def test_read_body_joins_chunks_and_reports_a_disconnect():
    from starlette.requests import ClientDisconnect, Request

    from service.api.body import read_body

    def request(*messages):
        queue = list(messages)

        async def receive():
            return queue.pop(0)

        return Request({"type": "http", "method": "POST", "headers": []}, receive)

    async def main():
        r = request({"type": "http.request", "body": b'{"inputs":', "more_body": True},
                    {"type": "http.request", "body": b' "a"}', "more_body": False})
        assert await read_body(r) == b'{"inputs": "a"}'
        assert await r.body() == b'{"inputs": "a"}'  # cached, as Starlette's own read would be
        with pytest.raises(ClientDisconnect):
            await read_body(request({"type": "http.request", "body": b"{", "more_body": True},
                                    {"type": "http.disconnect"}))

    asyncio.run(main())
