"""The whole app in-process, with the fake backend: routes, errors, limits, auth, metrics."""

import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.fakes import (
    D_MODEL,
    N_HEADS,
    N_LAYERS,
    SECRET_TEXT,
    FakeBackend,
    GatedBackend,
    assert_error,
    client_for,
    fake_attention,
    wait_ready,
)


def embed(client, **body):
    return client.post("/v1/embed", json=body)


def test_embed_sentences(client):
    r = embed(client, inputs=["the cat sat", "hello"])
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == "tiny" and [d["index"] for d in body["data"]] == [0, 1]
    d0 = body["data"][0]
    assert d0["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert d0["offsets"] == [[0, 0], [0, 3], [4, 7], [8, 11], [0, 0]]
    assert len(d0["embedding"]) == D_MODEL
    assert abs(np.linalg.norm(d0["embedding"]) - 1) < 1e-5
    assert body["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    assert "attention" not in d0


def test_single_string_tokens_output_and_normalize_false(client):
    tok = embed(client, inputs="the cat", output="tokens").json()["data"][0]
    assert np.array(tok["embedding"]).shape == (4, D_MODEL)
    raw = embed(client, inputs="the cat", normalize=False).json()["data"][0]["embedding"]
    np.testing.assert_allclose(raw, np.mean(tok["embedding"], axis=0), atol=1e-6)


def test_attention_is_unpadded_per_input(client):
    texts = ["hello", "the quick brown fox jumps over the lazy dog"]
    r = embed(client, inputs=texts, attention={})
    for d in r.json()["data"]:
        t = len(d["tokens"])
        a = d["attention"]
        assert a["shape"] == [N_LAYERS, N_HEADS, t, t] and a["layers"] == [0, 1]
        got = np.array(a["data"], dtype=np.float32)
        ids = np.array([client.post("/v1/tokenize", json={"inputs": texts[d["index"]]}).json()["data"][0]["ids"]])
        np.testing.assert_allclose(got, fake_attention(ids, np.ones_like(ids))[0], atol=1e-6)
        np.testing.assert_allclose(got.sum(-1), 1, atol=1e-5)


def test_attention_selection_formats_and_encodings(client):
    ids = np.array([client.post("/v1/tokenize", json={"inputs": "a dog sat"}).json()["data"][0]["ids"]])
    full = fake_attention(ids, np.ones_like(ids))[0]
    want = full[[1]][:, [2, 0]]
    a = embed(client, inputs="a dog sat", attention={"layers": [1], "heads": [2, 0], "dtype": "float16",
                                                      "encoding": "base64"}).json()["data"][0]["attention"]
    got = np.frombuffer(base64.b64decode(a["data"]), "<f2").reshape(a["shape"])
    assert a["shape"] == [1, 2, 5, 5] and a["dtype"] == "float16"
    np.testing.assert_allclose(got, want, atol=1e-3)
    k = embed(client, inputs="a dog sat", attention={"format": "topk", "top_k": 2}).json()["data"][0]["attention"]
    assert k["shape"] == [N_LAYERS, N_HEADS, 5, 2]
    np.testing.assert_allclose(k["data"]["values"], -np.sort(-full, axis=-1)[..., :2], atol=1e-6)
    np.testing.assert_array_equal(k["data"]["indices"], np.argsort(-full, axis=-1, kind="stable")[..., :2])


def test_tokenize_ignores_the_files_padding(client):
    d = client.post("/v1/tokenize", json={"inputs": ["Hello, world!"]}).json()["data"][0]
    assert d["tokens"] == ["[CLS]", "hello", ",", "world", "!", "[SEP]"]
    assert len(d["ids"]) == 6 and d["offsets"][1] == [0, 5]


def test_models(client):
    data = client.get("/v1/models").json()["data"]
    assert [m["name"] for m in data] == ["tiny"]
    m = client.get("/v1/models/tiny").json()
    assert (m["n_layers"], m["n_heads"], m["d_model"], m["provider"], m["ready"]) == (2, 3, 8, "cpu", True)
    assert m["variants"]["attention"]["serving"] and m["attention"]
    assert_error(client.get("/v1/models/nope"), 404, "not_found")


def test_error_table(package):
    with client_for(package, max_client_batch=3, max_body_bytes=2000, attention_budget_bytes=1000) as c:
        wait_ready(c)
        assert_error(c.post("/v1/embed", content=b'{"inputs": ["' + SECRET_TEXT.encode() + b'"',
                            headers={"content-type": "application/json"}), 400, "invalid_request")
        assert_error(embed(c, inputs=[]), 400, "invalid_request")
        assert_error(embed(c, inputs="x", model=SECRET_TEXT), 404, "not_found")
        assert_error(c.get("/v2/" + SECRET_TEXT), 404, "not_found")
        assert_error(embed(c, inputs=[SECRET_TEXT] * 4), 413, "too_large")
        assert_error(embed(c, inputs=SECRET_TEXT * 200), 413, "too_large")
        assert_error(embed(c, inputs="the cat " * 3, attention={}), 413, "too_large")
        assert_error(embed(c, inputs=[SECRET_TEXT, 3]), 422, "validation")
        assert_error(embed(c, inputs=SECRET_TEXT, output="pixels"), 422, "validation")
        assert_error(embed(c, inputs=SECRET_TEXT, attention={"layers": [9]}), 422, "validation")
        assert_error(embed(c, inputs=SECRET_TEXT, surprise=1), 422, "validation")
        err = assert_error(embed(c, inputs="the " * 40, truncate=False), 422, "validation")
        assert "32" in err["message"]
        assert embed(c, inputs="the " * 40).status_code == 200  # truncated by default
        assert_error(c.post("/v1/embed", content=b'{"inputs": "x"}'), 422, "validation")  # not JSON typed
        assert_error(c.delete("/v1/embed"), 405, "method_not_allowed")
        assert embed(c, inputs="still serving").status_code == 200


def test_api_key(package):
    with client_for(package, api_key="k3y") as c:
        wait_ready(c)
        r = embed(c, inputs="x")
        assert_error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert_error(c.post("/v1/embed", json={"inputs": "x"}, headers={"Authorization": "Bearer nope"}),
                     401, "unauthorized")
        ok = c.post("/v1/embed", json={"inputs": "x"}, headers={"Authorization": "Bearer k3y"})
        assert ok.status_code == 200
        assert c.get("/health/live").status_code == 200 and c.get("/metrics").status_code == 200


class HeldBackend(FakeBackend):
    """Once `held`, each run says it `started` and waits for `release`."""

    held, started, release = False, threading.Event(), threading.Event()

    def run(self, role, feeds, outputs):
        if self.held:
            self.started.set()
            assert self.release.wait(10), "the test never released the device"
        return super().run(role, feeds, outputs)


def plain_queue_depth(c) -> float:
    families = text_string_to_metric_families(c.get("/metrics").text)
    return sum(s.value for f in families if f.name == "headwise_queue_depth" for s in f.samples
               if s.labels.get("priority") == "plain")


def test_queue_full_is_429(package):
    HeldBackend.held = False
    HeldBackend.started.clear()
    HeldBackend.release.clear()
    with client_for(package, backend=HeldBackend, max_queue=2, max_client_batch=2) as c, ThreadPoolExecutor(4) as pool:
        wait_ready(c)
        HeldBackend.held = True
        try:
            first = pool.submit(embed, c, inputs="a")
            assert HeldBackend.started.wait(10)  # running, and held
            second = pool.submit(embed, c, inputs=["a", "b"])
            deadline = time.monotonic() + 10
            while plain_queue_depth(c) < 2 and time.monotonic() < deadline:  # queued: 2 inputs
                time.sleep(0.01)
            r = embed(c, inputs="c")
            assert_error(r, 429, "overloaded")
            assert int(r.headers["retry-after"]) >= 1
        finally:
            HeldBackend.release.set()
            HeldBackend.held = False
        assert first.result().status_code == 200 and second.result().status_code == 200


def test_not_ready_until_warm(package):
    GatedBackend.gate.clear()
    with client_for(package, backend=GatedBackend) as c:
        assert c.get("/health/live").status_code == 200
        assert_error(c.get("/health/ready"), 503, "not_ready")
        assert_error(embed(c, inputs="x"), 503, "not_ready")
        GatedBackend.gate.set()
        wait_ready(c)
        assert embed(c, inputs="x").status_code == 200


def test_ready_before_serving_starts_only_once_prepared(package):
    """Process mode's front-ends share a listening socket: one may accept a connection only
    once it is prepared, or a client told "ready" by a sibling would get 503."""
    from fastapi.testclient import TestClient

    from headwise.service.api.app import create_app
    from headwise.service.settings import Settings

    GatedBackend.gate.clear()
    threading.Timer(0.2, GatedBackend.gate.set).start()
    app = create_app(Settings(models_dir=package.parent), backend_factory=GatedBackend, ready_before_serving=True)
    with TestClient(app) as c:  # its start-up returns only once the sessions are open
        assert app.state.engine.ready
        assert embed(c, inputs="x").status_code == 200


def test_metrics_after_traffic(client):
    for _ in range(3):
        embed(client, inputs=["the cat", "a dog"])
    embed(client, inputs="hello", attention={"layers": [0]})
    embed(client, inputs=[])
    text = client.get("/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("requests", "request_duration_seconds", "request_failures", "queue_duration_seconds",
                 "tokenize_duration_seconds", "inference_duration_seconds", "batch_size", "batch_tokens",
                 "input_tokens", "queue_depth", "inflight_requests", "attention_bytes", "model_info"):
        assert "headwise_" + name in fams, name

    def value(fam, sample, **labels):
        return sum(s.value for s in fams[fam].samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("headwise_requests", "headwise_requests_total", route="/v1/embed", code="200") == 4
    assert value("headwise_requests", "headwise_requests_total", route="/v1/embed", code="400") == 1
    assert value("headwise_request_failures", "headwise_request_failures_total", reason="invalid_request") == 1
    assert value("headwise_input_tokens", "headwise_input_tokens_count", model="tiny") == 7
    assert value("headwise_batch_size", "headwise_batch_size_sum", variant="fast") == 6
    assert value("headwise_attention_bytes", "headwise_attention_bytes_total") == 1 * 3 * 3 * 3 * 4
    assert value("headwise_model_info", "headwise_model_info", provider="cpu", precision="fp32") == 1


def test_bad_package_fails_start_up_naming_the_file(package):
    (package / "fast.onnx").write_bytes(b"tampered")
    with pytest.raises(Exception, match=r"fast\.onnx.*sha256"), client_for(package):
        pass


def test_index_page_and_openapi(client):
    r = client.get("/")
    assert r.status_code in (200, 404)
    if r.status_code == 200:
        assert "html" in r.headers["content-type"]
    else:
        assert_error(r, 404, "not_found")
    spec = client.get("/openapi.json").json()
    assert "/v1/embed" in spec["paths"] and "/v1/tokenize" in spec["paths"]
    assert spec["components"]["schemas"]["EmbedRequest"]["examples"]



def test_every_json_body_is_documented_from_its_declaration(client):
    """`body: Json[Model]` is the one declaration: the OpenAPI request body comes from it (a
    native route's as a reference to components, a compatible protocol's inlined)."""
    from fastapi.routing import APIRoute

    from headwise.service.api.body import body_model
    from headwise.service.api.errors import NATIVE

    spec = client.get("/openapi.json").json()
    routes = [r for r in client.app.router.routes if hasattr(r, "original_router")]
    seen = set()
    for route in (r for i in routes for r in i.original_router.routes if isinstance(r, APIRoute)):
        model = next((m for d in route.dependant.dependencies if (m := body_model(d.call))), None)
        if model is None:
            continue
        seen.add(route.path)
        body = spec["paths"][route.path]["post"]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        assert body["required"] is True
        if getattr(route, "protocol", NATIVE) is NATIVE:
            assert schema == {"$ref": f"#/components/schemas/{model.__name__}"}
            assert spec["components"]["schemas"][model.__name__]["title"] == model.__name__
        else:
            assert "$ref" not in str(schema) and schema["title"] == model.__name__
    assert {"/v1/embed", "/v1/tokenize", "/v1/generate", "/v1/rerank", "/v1/predict", "/v1/similarity",
            "/v1/occlusion", "/v1/embeddings", "/embed", "/rerank", "/decode"} <= seen

def test_chunked_body_under_the_limit_is_read(package):
    with client_for(package, max_body_bytes=2000) as c:
        wait_ready(c)

        def chunks():
            yield b'{"inputs": '
            yield b'"the cat"}'
        r = c.post("/v1/embed", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 200 and r.json()["data"][0]["tokens"][1] == "the"


def test_usable_cores_follow_the_cgroup_quota(tmp_path):
    from headwise.service.cpu import usable_cores

    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cores(tmp_path) == min(2, usable_cores(tmp_path / "none"))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == usable_cores(tmp_path / "none") >= 1


class CudaFakeBackend(FakeBackend):
    provider = "cuda"


@pytest.mark.parametrize("backend, settings, tokens", [
    (FakeBackend, {}, 1024),  # CPU: the smaller of the two caps
    (FakeBackend, {"cpu_max_batch_tokens": 0}, 16384),
    (FakeBackend, {"max_batch_tokens": 512}, 512),
    (CudaFakeBackend, {}, 16384),
])
def test_batch_token_cap_depends_on_the_provider(package, backend, settings, tokens):
    with client_for(package, backend=backend, **settings) as c:
        wait_ready(c)
        rt = next(iter(c.app.state.engine.models.values()))
        assert {b.limits.max_batch_tokens for b in rt.batchers.values()} == {tokens}
        assert all(b.pad_to_bucket is (backend is CudaFakeBackend) for b in rt.batchers.values())


def test_the_server_hands_the_gil_over_within_its_switch_interval(package):
    """HEADWISE_SWITCH_INTERVAL_MS is the interpreter's switch interval once the app starts."""
    import sys

    before = sys.getswitchinterval()
    try:
        with client_for(package, switch_interval_ms=0.25) as c:
            wait_ready(c)
            assert sys.getswitchinterval() == pytest.approx(0.00025)
    finally:
        sys.setswitchinterval(before)
