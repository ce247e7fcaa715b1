"""headwise.service.server.fastpath: the hot routes answered past FastAPI's routing, as `headwise
serve` runs the app, must answer exactly as the plain FastAPI app does; and the framework
versions installed are the ones it and server.http_protocol were written for."""

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from headwise.service.api.app import create_app
from headwise.service.api.middleware import ServiceMiddleware
from headwise.service.server import fastpath, versions
from headwise.service.settings import Settings
from tests.unit.fakes import SECRET_TEXT, FakeBackend, assert_error, wait_ready

KEY = "k" * 24
BOOM = "boom"  # [CLS] [UNK] [SEP]: on that batch the backend below fails like a bug would
UNK = 1

def test_the_framework_versions_are_the_ones_the_fast_paths_were_written_for():
    """constraints.txt installs what server.versions names; another version makes `headwise
    serve` fall back to the plain app (test_serve.py), so an upgrade shows here first: read
    fastpath.py and http_protocol.py against it, then move WRITTEN_FOR."""
    assert versions.mismatches() == {}, (
        f"headwise/service/server/fastpath.py and http_protocol.py rely on private internals; written "
        f"for {versions.WRITTEN_FOR}, installed {versions.installed()}")


class FailingBackend(FakeBackend):
    def run(self, role, feeds, outputs):
        ids = feeds["input_ids"]
        if ids.shape[1] == 3 and (ids == UNK).any():  # warm-up batches are 8 tokens or more
            raise RuntimeError("a bug, not the client's fault")
        return super().run(role, feeds, outputs)


def app_for(package, fast: bool, **settings):
    app = create_app(Settings(models_dir=package.parent, **settings), backend_factory=FailingBackend)
    return fastpath.install(app) if fast else app


def served(app):
    """What uvicorn is given: under `headwise serve` (the fast path installed), its Entry."""
    return fastpath.Entry(app) if app.state.shortcuts else app


def service_middleware(app) -> ServiceMiddleware:
    layer = app.middleware_stack
    if isinstance(layer, fastpath.HotFirst):
        layer = layer.stack
    while not isinstance(layer, ServiceMiddleware):
        layer = layer.app
    return layer


AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
EMBED_ROWS = [  # (body or raw bytes, headers): a 200 and every error row the embedding routes have
    ({"inputs": "the cat sat"}, AUTH),
    ({"inputs": ["the cat", "a dog sat on the mat"], "output": "tokens"}, AUTH),
    ({"inputs": "the cat", "attention": {"layers": [1], "heads": [0, 2], "format": "topk", "top_k": 2,
                                         "dtype": "float16", "encoding": "base64"}}, AUTH),
    ({"inputs": "the cat"}, {}),  # 401
    ({"inputs": "the cat"}, {"Authorization": "Bearer wrong"}),  # 401
    (b'{"inputs": [', {**AUTH, **JSON}),  # 400 malformed
    (b'{"inputs": "a"}', {**AUTH, "content-type": "text/plain"}),  # 422 not JSON
    ({"inputs": []}, AUTH),  # 400 empty
    ({"inputs": ["a"] * 5}, AUTH),  # 413 count
    ({"inputs": "a" * 300}, AUTH),  # 413 characters
    ({"inputs": "a", "attention": {"layers": [9]}}, AUTH),  # 422 selection
    ({"inputs": "a", "model": "nope"}, AUTH),  # 404
    ({"inputs": "the cat " * 20, "truncate": False}, AUTH),  # 422 max_len
    ({"inputs": "a", "extra": SECRET_TEXT}, AUTH),  # 422 unknown field
    ({"inputs": BOOM}, AUTH),  # 500
]
OPENAI_ROWS = [
    ({"input": "the cat sat"}, AUTH),
    ({"input": ["the cat", "a dog"], "dimensions": 4, "encoding_format": "base64"}, AUTH),
    ({"input": [[2, 5, 3]]}, AUTH),
    ({"input": []}, AUTH),
    ({"input": [[]]}, AUTH),
    ({"input": "a", "dimensions": 0}, AUTH),
    ({"input": "a" * 300}, AUTH),
    ({"input": "a", "model": "nope"}, AUTH),
    ({"input": "a"}, {}),
    (b"{", {**AUTH, **JSON}),
    ({"input": BOOM}, AUTH),
]
TEI_ROWS = [  # POST /embed, TEI's hot route: a 200 and every error row, in TEI's shape
    ({"inputs": "the cat sat"}, AUTH),
    ({"inputs": ["the cat", "a dog sat on the mat"], "normalize": False, "dimensions": 4}, AUTH),
    ({"inputs": [[2, 5, 3]]}, AUTH),
    ({"inputs": "the cat"}, {}),  # 401
    (b'{"inputs": [', {**AUTH, **JSON}),  # 400 malformed
    (b'{"inputs": "a"}', {**AUTH, "content-type": "text/plain"}),  # 422 not JSON
    ({"inputs": []}, AUTH),  # 400 Empty
    ({"inputs": ["a"] * 5}, AUTH),  # 413 count
    ({"inputs": "a" * 300}, AUTH),  # 413 characters
    ({"inputs": "a", "model": "nope"}, AUTH),  # 404
    ({"inputs": "the cat " * 20, "truncate": False}, AUTH),  # 422 max_len
    ({"inputs": "cat " + "the " * 20, "truncation_direction": "left"}, AUTH),  # 200, cut at its start
    ({"inputs": "a", "prompt_name": "q"}, AUTH),  # 422
    ({"inputs": "a", "extra": SECRET_TEXT}, AUTH),  # 422 unknown field
    ({"inputs": BOOM}, AUTH),  # 500
]
OTHER_ROWS = [  # (method, path, body, headers): the other routes, through FastAPI in both apps
    ("GET", "/health/live", None, {}), ("GET", "/health/ready", None, {}),
    ("GET", "/v1/models", None, AUTH), ("GET", "/v1/models/tiny", None, AUTH), ("GET", "/v1/models/x", None, AUTH),
    ("POST", "/v1/tokenize", {"inputs": "the cat"}, AUTH), ("POST", "/v1/tokenize", {"inputs": []}, AUTH),
    ("POST", "/v1/generate", {"prompt": "hi"}, AUTH),
    ("GET", "/v1/embed", None, AUTH), ("GET", "/v1/embeddings", None, AUTH), ("GET", "/nowhere", None, {}),
    ("GET", "/v2", None, AUTH), ("GET", "/v2/health/ready", None, {}), ("GET", "/v2/models/tiny/ready", None, {}),
    ("GET", "/v2/models/tiny", None, AUTH), ("GET", "/v2/models/tiny/versions/9", None, AUTH),
    ("POST", "/v2/models/tiny/infer", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                                   "data": ["the cat"]}]}, AUTH),
    ("POST", "/v2/models/tiny/infer", {"inputs": []}, AUTH),
    # TEI's routes
    ("POST", "/embed", {"inputs": ["the cat", "a dog"]}, AUTH), ("POST", "/embed", {"inputs": []}, AUTH),
    ("POST", "/embed", {"inputs": "a"}, {}), ("POST", "/embed", {"inputs": BOOM}, AUTH),
    ("POST", "/embed_all", {"inputs": "the cat"}, AUTH),
    ("POST", "/similarity", {"inputs": {"source_sentence": "the cat", "sentences": ["a dog"]}}, AUTH),
    ("POST", "/", {"inputs": "the cat"}, AUTH), ("POST", "/", {"query": "a", "texts": ["b"]}, AUTH),
    ("POST", "/rerank", {"query": "a", "texts": ["b"]}, AUTH), ("POST", "/predict", {"inputs": "a"}, AUTH),
    ("POST", "/tokenize", {"inputs": "the cat"}, AUTH), ("POST", "/decode", {"ids": [4, 6]}, AUTH),
    ("GET", "/info", None, AUTH), ("GET", "/embed", None, AUTH),
]


def _send(client, method, path, body, headers):
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers=headers)
    return client.request(method, path, json=body, headers=headers)


def _answer(r):
    """Status, headers (TEI's timing headers' values vary: only their presence; the request id
    made for each request: only its place) and body."""
    rid = r.headers["x-request-id"]
    headers = {k: "t" if k.endswith("-time") else "id" if v == rid else v for k, v in r.headers.items() if k != "date"}
    return r.status_code, headers, r.content.replace(rid.encode(), b"id")


def _conversation(package, fast: bool, **settings) -> list:
    out = []
    app = app_for(package, fast, api_key=KEY, max_client_batch=4, max_input_chars=200, **settings)
    with TestClient(served(app), raise_server_exceptions=False) as c:
        wait_ready(c)
        for body, headers in EMBED_ROWS:
            out.append(_answer(_send(c, "POST", "/v1/embed", body, headers)))
        for body, headers in OPENAI_ROWS:
            out.append(_answer(_send(c, "POST", "/v1/embeddings", body, headers)))
        for body, headers in TEI_ROWS:
            out.append(_answer(_send(c, "POST", "/embed", body, headers)))
        for method, path, body, headers in OTHER_ROWS:
            out.append(_answer(_send(c, method, path, body, headers)))
        big = b'{"inputs": "' + b"a" * 5000 + b'"}'
        out.append(_answer(c.post("/v1/embed", content=big, headers={**AUTH, **JSON})))  # 413 body
        out.append(_answer(c.post("/v1/embeddings", content=big, headers={**AUTH, **JSON})))
        out.append(_answer(c.post("/embed", content=big, headers={**AUTH, **JSON})))
        out.append(_answer(c.post("/v2/models/tiny/infer", content=big, headers=AUTH)))
        app.state.engine.draining = True  # the 503 rows
        out.append(_answer(c.post("/v1/embed", json={"inputs": "a"}, headers=AUTH)))
        out.append(_answer(c.post("/v1/embeddings", json={"input": "a"}, headers=AUTH)))
        out.append(_answer(c.post("/embed", json={"inputs": "a"}, headers=AUTH)))
    return out


def test_every_route_and_error_row_answers_alike_on_both_paths(package):
    plain = _conversation(package, fast=False, max_body_bytes=4096)
    fast = _conversation(package, fast=True, max_body_bytes=4096)
    assert len(plain) == len(fast)
    for i, (a, b) in enumerate(zip(plain, fast, strict=True)):
        assert a == b, f"answer {i} differs:\nplain {a}\nfast  {b}"
    assert plain[-4][2] == b'{"error":"request body over 4096 bytes"}'  # KServe's shape, before routing
    assert plain[-1][0] == 503 and b'"error_type":"Unhealthy"' in plain[-1][2]  # TEI's shape, draining
    codes = {a[0] for a in plain}
    assert {200, 400, 401, 404, 405, 413, 422, 424, 500, 503} <= codes, codes


def test_overloaded_answers_alike_on_both_paths(package):
    def answer(fast):
        app = app_for(package, fast, max_inflight_response_bytes=2000, max_response_bytes=2000)
        with TestClient(served(app)) as c:
            wait_ready(c)
            held = app.state.engine.responses.reserve(1900)  # answers in flight fill the budget
            got = [_answer(c.post("/v1/embed", json={"inputs": "the cat"})),
                   _answer(c.post("/v1/embeddings", json={"input": "the cat"})),
                   _answer(c.post("/embed", json={"inputs": "the cat"}))]
            held.release()
            return got

    plain, fast = answer(False), answer(True)
    assert plain == fast
    assert plain[0][0] == 429 and plain[0][1]["retry-after"] == "1", plain
    assert plain[1][0] == 429 and b'"type":"overloaded"' in plain[1][2], plain  # OpenAI's answers count too
    assert plain[2][0] == 429 and b'"error_type":"Overloaded"' in plain[2][2], plain


def test_the_hot_routes_skip_fastapi_and_others_do_not(package):
    app = app_for(package, fast=True)
    with TestClient(served(app)) as client:
        wait_ready(client)
        assert set(app.state.shortcuts) == {("POST", "/v1/embed"), ("POST", "/v1/embeddings"), ("POST", "/embed")}
        mw = service_middleware(app)
        seen, inner = [], mw.app

        async def spy(scope, receive, send):
            seen.append(scope["path"])
            await inner(scope, receive, send)

        mw.app = spy
        front, outer, outside = app.middleware_stack, app.middleware_stack.stack, []

        async def outer_spy(scope, receive, send):
            outside.append(scope.get("path"))
            await outer(scope, receive, send)

        front.stack = outer_spy  # Starlette's outer layers: only the routes that are not hot
        assert client.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200
        assert client.post("/v1/embeddings", json={"input": "the cat sat"}).status_code == 200
        assert client.post("/embed", json={"inputs": "the cat sat"}).status_code == 200
        assert client.post("/v1/tokenize", json={"inputs": "the cat"}).status_code == 200
        assert client.post("/embed_all", json={"inputs": "the cat"}).status_code == 200
        assert_error(client.get("/v1/embed"), 405, "method_not_allowed")
        assert seen == ["/v1/tokenize", "/embed_all", "/v1/embed"]
        assert outside == ["/v1/tokenize", "/embed_all", "/v1/embed"]
        assert "/v1/embed" in client.get("/openapi.json").json()["paths"]
        err = assert_error(client.post("/v1/embed", json={"inputs": BOOM}), 500, "internal")
        assert "bug" not in err["message"]
        fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        samples = [s for s in fams["headwise_requests"].samples if s.name.endswith("_total")]
        assert any(s.labels["route"] == "/v1/embed" and s.labels["code"] == "500" for s in samples)
        r = client.post("/embed", json={"inputs": BOOM})  # TEI's shape on its direct route too
        assert r.status_code == 500 and r.json() == {"error": "internal server error", "error_type": "Backend"}


def test_the_plain_app_has_no_shortcuts(package):
    app = app_for(package, fast=False)
    assert app.state.shortcuts == {} and getattr(app.state, "disconnect_probe", None) is None


def test_disconnect_probe_reads_uvicorns_flag_else_none():
    from headwise.service.server.http_protocol import uvicorn_disconnect_probe

    class Cycle:  # uvicorn's RequestResponseCycle: `receive` is its bound method
        disconnected = False

        async def receive(self):
            raise AssertionError("the probe must not receive")

    cycle = Cycle()
    probe = uvicorn_disconnect_probe(SimpleNamespace(receive=cycle.receive))
    assert asyncio.run(probe()) is False
    cycle.disconnected = True
    assert asyncio.run(probe()) is True

    async def plain_receive():
        return {"type": "http.disconnect"}

    assert uvicorn_disconnect_probe(SimpleNamespace(receive=plain_receive)) is None


def test_read_body_joins_chunks_and_reports_a_disconnect():
    from starlette.requests import ClientDisconnect, Request

    from headwise.service.api.body import read_body

    def request(*messages):
        queue = list(messages)

        async def receive():
            return queue.pop(0)

        return Request({"type": "http", "method": "POST", "headers": []}, receive)

    async def main():
        r = request({"type": "http.request", "body": b'{"inputs":', "more_body": True},
                    {"type": "http.request", "body": b' "a"}', "more_body": False})
        assert await read_body(r) == b'{"inputs": "a"}'
        with pytest.raises(ClientDisconnect):
            await read_body(request({"type": "http.request", "body": b"{", "more_body": True},
                                    {"type": "http.disconnect"}))

    asyncio.run(main())


def test_the_entry_takes_only_an_app_with_the_fast_path_installed(package):
    with pytest.raises(ValueError, match="install"):
        fastpath.Entry(app_for(package, fast=False))
