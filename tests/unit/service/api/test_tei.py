"""TEI's routes in-process with the fake backend: answer shapes, TEI's error shape and
statuses for every row, model selection (HEADWISE_DEFAULT_MODEL). The shaping of
service.api.compat.tei, of /predict and /rerank, and the echoed texts' bound: test_tei_shaping.py."""

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwise.service.api.errors import NATIVE, OPENAI, TEI, Empty, WrongModelKind
from headwise.service.engine import Capability
from headwise.service.errors import InvalidRequest, NotReady
from tests.unit.fakes import (
    D_MODEL,
    SECRET_TEXT,
    FakeBackend,
    FakeClassifierBackend,
    GatedBackend,
    client_for,
    make_package,
    tei_error,
    wait_ready,
)


def v1(client, texts, **extra) -> np.ndarray:
    return np.float32([d["embedding"] for d in client.post("/v1/embed", json={"inputs": texts, **extra}).json()["data"]])


# -- answers ---------------------------------------------------------------------------------------

def test_embed_shapes_equal_v1_embed(client):
    texts = ["the cat sat", "a dog"]
    assert np.array_equal(np.float32(client.post("/embed", json={"inputs": texts}).json()), v1(client, texts))
    one = client.post("/embed", json={"inputs": "the cat"}).json()
    assert len(one) == 1 and np.array_equal(np.float32(one), v1(client, ["the cat"]))
    ids = client.post("/v1/tokenize", json={"inputs": texts}).json()["data"]
    got = client.post("/embed", json={"inputs": [d["ids"] for d in ids]}).json()
    assert np.array_equal(np.float32(got), v1(client, texts))
    raw = client.post("/embed", json={"inputs": texts, "normalize": False}).json()
    assert np.array_equal(np.float32(raw), v1(client, texts, normalize=False))


@pytest.mark.parametrize("normalize", [True, False])
def test_dimensions_cut_then_normalise_as_tei_for_a_matryoshka_model(package, normalize):
    with client_for(package, matryoshka_dimensions=(3,)) as client:  # HEADWISE_MATRYOSHKA_DIMENSIONS=3
        wait_ready(client)
        full = v1(client, ["the cat sat"], normalize=normalize)[0].astype(np.float64)
        got = np.array(client.post("/embed", json={"inputs": "the cat sat", "dimensions": 3,
                                                   "normalize": normalize}).json()[0])
        want = full[:3] / np.linalg.norm(full[:3]) if normalize else full[:3]
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert len(client.post("/embed", json={"inputs": "a", "dimensions": D_MODEL}).json()[0]) == D_MODEL


def test_dimensions_are_refused_for_a_model_without_matryoshka_dimensions(client):
    error = tei_error(client.post("/embed", json={"inputs": "a", "dimensions": 3}), 400, "Validation")
    assert "HEADWISE_MATRYOSHKA_DIMENSIONS" in error and "dimensions" in error
    assert len(client.post("/embed", json={"inputs": "a", "dimensions": D_MODEL}).json()[0]) == D_MODEL


def test_embed_all_and_similarity(client):
    tokens = client.post("/v1/embed", json={"inputs": ["the cat"], "output": "tokens"}).json()["data"][0]
    got = client.post("/embed_all", json={"inputs": "the cat"}).json()
    assert np.array_equal(np.float32(got[0]), np.float32(tokens["embedding"]))
    texts = ["the cat sat", "a cat sat", "the lazy fox"]
    sims = client.post("/similarity", json={"inputs": {"source_sentence": texts[0], "sentences": texts[1:]},
                                            "parameters": {"truncate": True}}).json()
    vecs = v1(client, texts).astype(np.float64)
    want = [float(vecs[0] @ v / np.linalg.norm(vecs[0]) / np.linalg.norm(v)) for v in vecs[1:]]
    np.testing.assert_allclose(sims, want, atol=1e-7)
    native = client.post("/v1/similarity", json={"source": texts[0], "targets": texts[1:]}).json()
    assert sims == [d["score"] for d in native["data"]]  # one implementation: Engine.similarity
    fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    counted = {s.labels["analytic"]: s.value for s in fams["headwise_analytics_requests"].samples
               if s.name.endswith("_total")}
    assert counted["similarity"] == 2


def test_tokenize_tokens_and_byte_offsets(client):
    [toks] = client.post("/tokenize", json={"inputs": "the café"}).json()
    assert toks[0] == {"id": 2, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert toks[-1]["special"] and toks[-1]["text"] == "[SEP]"
    assert [(t["text"], t["start"], t["stop"]) for t in toks[1:-1]] == [("the", 0, 3), ("café", 4, 9)]  # é: 2 bytes
    bare = client.post("/tokenize", json={"inputs": ["the cat", "a"], "add_special_tokens": False}).json()
    assert [[t["text"] for t in toks] for toks in bare] == [["the", "cat"], ["a"]]
    assert len(client.post("/tokenize", json={"inputs": "the " * 100}).json()[0]) == 102  # not cut at max_len 32
    tok = client.app.state.engine.models["tiny"].tokenizer
    assert tok.special_ids is tok.special_ids  # read from tokenizer.json once, not per request


def test_decode(client):
    # (this tokenizer's [CLS] is no added special token, so skip_special_tokens keeps it: the
    # skipping itself is the e2e test's, on the real tokenizer)
    assert client.post("/decode", json={"ids": [4, 6]}).json() == ["the cat"]
    assert client.post("/decode", json={"ids": [[2, 4, 3], [6]], "skip_special_tokens": False}).json() == \
        ["[CLS] the [SEP]", "cat"]


def test_info(client):
    info = client.get("/info").json()
    assert info["model_id"] == info["served_model_name"] == "tiny"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_input_length"] == 32
    assert info["auto_truncate"] is True and info["max_client_batch_size"] == 256
    tei_error(client.get("/info", params={"model": "nope"}), 404, "Validation")


def test_root_answers_by_the_bodys_shape(client):
    assert np.array_equal(np.float32(client.post("/", json={"inputs": "the cat"}).json()), v1(client, ["the cat"]))
    sims = client.post("/", json={"inputs": {"source_sentence": "the cat", "sentences": ["a cat"]}}).json()
    assert len(sims) == 1 and 0 < sims[0] <= 1
    assert "re-ranker" in tei_error(client.post("/", json={"query": "a", "texts": ["b"]}), 424, "Backend")
    tei_error(client.post("/", json={"inputs": "a", "extra": SECRET_TEXT}), 422, "Validation")
    tei_error(client.post("/", content=b"[1]", headers={"content-type": "application/json"}), 422, "Validation")
    tei_error(client.post("/", content=b'{"inputs": "a"}'), 422, "Validation")  # not typed as JSON
    assert client.get("/").status_code in (200, 404)  # GET / is the viewer page, not TEI's


# -- errors ----------------------------------------------------------------------------------------

def test_error_rows_in_teis_shape(package):
    with client_for(package, max_client_batch=3, max_body_bytes=3000, max_input_chars=200) as c:
        wait_ready(c)
        post = c.post
        tei_error(post("/embed", content=b'{"inputs": ["' + SECRET_TEXT.encode() + b'"',
                       headers={"content-type": "application/json"}), 400, "Validation")
        for path, body in [("/embed", {"inputs": []}), ("/embed_all", {"inputs": []}), ("/tokenize", {"inputs": []}),
                           ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}),
                           ("/decode", {"ids": []}), ("/decode", {"ids": [[2], []]})]:
            tei_error(post(path, json=body), 400, "Empty")
        tei_error(post("/embed", json={"inputs": "x", "model": SECRET_TEXT}), 404, "Validation")
        tei_error(c.delete("/embed"), 405, "Validation")
        tei_error(post("/embed", json={"inputs": ["a"] * 4}), 413, "Validation")
        tei_error(post("/similarity", json={"inputs": {"source_sentence": "a", "sentences": ["b"] * 3}}), 413,
                  "Validation")  # the source counts
        tei_error(post("/embed", json={"inputs": "a" * 201}), 413, "Validation")
        tei_error(post("/embed", json={"inputs": "a" * 2990}), 413, "Validation")  # the body limit
        tei_error(post("/decode", json={"ids": [[2]] * 4}), 413, "Validation")
        for body in [{"inputs": "a", "surprise": SECRET_TEXT}, {"inputs": 3}, {"inputs": ["a", [2]]},
                     {"inputs": "a", "truncation_direction": "up"},
                     {"inputs": "a", "prompt_name": "query"}, {"inputs": "a", "dimensions": 0},
                     {"inputs": "a", "dimensions": D_MODEL + 1}, {"inputs": "a", "encoding_format": "base64"},
                     {"inputs": "the " * 40, "truncate": False}, {"inputs": [[2, 999]]}]:
            tei_error(post("/embed", json=body), 422, "Validation")
        assert post("/embed", json={"inputs": "the " * 40, "truncate": False, "truncation_direction": "left"}) \
            .status_code == 422  # over max_len: refused for its length, whichever direction
        assert post("/embed", json={"inputs": "the cat", "truncate": False, "truncation_direction": "Left"}) \
            .status_code == 200  # nothing cut: the direction changes nothing
        assert post("/embed", json={"inputs": "the " * 40}).status_code == 200  # auto_truncate
        ends = {d: post("/embed", json={"inputs": "cat " + "the " * 40 + "dog", "truncation_direction": d}).json()
                for d in ("right", "left", "Left")}
        assert ends["left"] == ends["Left"] != ends["right"]  # the start cut away, not the end
        tei_error(post("/tokenize", json={"inputs": "a", "prompt_name": "q"}), 422, "Validation")
        tei_error(post("/decode", json={"ids": [28]}), 422, "Validation")
        for path in ("/rerank", "/predict"):
            body = {"query": "a", "texts": ["b"]} if path == "/rerank" else {"inputs": "a"}
            assert "served: tiny (embedding)" in tei_error(post(path, json=body), 424, "Backend")
            tei_error(post(path, json={**body, "model": "tiny"}), 424, "Backend")
        fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
        reasons = {s.labels["reason"] for s in fams["headwise_request_failures"].samples}
        assert {"invalid_request", "validation", "too_large", "not_found"} <= reasons
        assert not reasons & {"Empty", "Backend", "empty", "backend"}  # metrics keep headwise's reasons


def test_auth_overload_not_ready_and_internal(package):
    with client_for(package, api_key="k3y", max_inflight_response_bytes=3000, max_response_bytes=3000) as c:
        wait_ready(c)
        tei_error(c.post("/embed", json={"inputs": "x"}), 401, "Validation")
        tei_error(c.get("/info"), 401, "Validation")
        auth = {"Authorization": "Bearer k3y"}
        held = c.app.state.engine.responses.reserve(2900)
        r = c.post("/embed_all", json={"inputs": "the cat"}, headers=auth)
        tei_error(r, 429, "Overloaded")
        assert r.headers["retry-after"] == "1"
        for path, body in [("/embed", {"inputs": "the cat"}), ("/decode", {"ids": [4, 6] * 20}),
                           ("/similarity", {"inputs": {"source_sentence": "the cat", "sentences": ["a dog"]}})]:
            tei_error(c.post(path, json=body, headers=auth), 429, "Overloaded")  # every answer counts in flight
        held.release()
        assert c.post("/embed_all", json={"inputs": "the cat"}, headers=auth).status_code == 200
    GatedBackend.gate.clear()
    with client_for(package, backend=GatedBackend) as c:
        tei_error(c.post("/embed", json={"inputs": "x"}), 503, "Unhealthy")
        GatedBackend.gate.set()
        wait_ready(c)


def test_internal_error_is_backend(package, monkeypatch):
    from fastapi.testclient import TestClient

    from headwise.service.api.app import create_app
    from headwise.service.settings import Settings

    app = create_app(Settings(models_dir=package.parent), backend_factory=FakeBackend)
    with TestClient(app, raise_server_exceptions=False) as c:
        wait_ready(c)

        async def boom(*a, **k):
            raise RuntimeError(SECRET_TEXT)

        monkeypatch.setattr(c.app.state.engine, "embed", boom)
        assert tei_error(c.post("/embed", json={"inputs": "x"}), 500, "Backend") == "internal server error"


def test_the_protocol_table():
    assert TEI.payload(Empty("'inputs' is empty")) == {"error": "'inputs' is empty", "error_type": "Empty"}
    assert TEI.status_of(Empty("x")).code == 400 and NATIVE.status_of(Empty("x")).type == "invalid_request"
    assert TEI.status_of(WrongModelKind("x")).code == 424 and OPENAI.status_of(WrongModelKind("x")).code == 422
    assert TEI.payload(WrongModelKind("x"))["error_type"] == "Backend"
    assert TEI.payload(NotReady("x"))["error_type"] == "Unhealthy"
    assert TEI.payload(InvalidRequest("x"))["error_type"] == "Validation"


# -- which model answers ---------------------------------------------------------------------------

def test_default_model_and_name_order(tmp_path):
    root = tmp_path / "models"
    make_package(root, "beta")
    alpha = make_package(root, "alpha")
    with client_for(make_package(tmp_path / "one", "beta")) as c:  # one package served: it is the default
        wait_ready(c)
        assert c.get("/info").json()["model_id"] == "beta"
    with client_for(alpha) as c:  # several: the first in name order
        wait_ready(c)
        assert c.get("/info").json()["model_id"] == "alpha"
        assert c.post("/embed", json={"inputs": "a", "model": "beta"}).status_code == 200
        # the native API still asks which
        assert c.post("/v1/embed", json={"inputs": "a"}).status_code == 422
    with client_for(alpha, default_model="beta") as c:
        wait_ready(c)
        assert c.get("/info").json()["model_id"] == "beta"
        assert c.get("/info", params={"model": "alpha"}).json()["model_id"] == "alpha"
        fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
        routes = {(s.labels["route"], s.labels["model"]) for s in fams["headwise_requests"].samples}
        assert ("/info", "beta") in routes
    with pytest.raises(Exception, match=r"HEADWISE_DEFAULT_MODEL is 'gamma'.*served: alpha, beta"), \
            client_for(alpha, default_model="gamma"):
        pass


# -- /info's batch limit ---------------------------------------------------------------------------

def test_info_reports_each_encoders_own_batch_limit(tmp_path):
    import json

    root = tmp_path / "models"
    make_package(root, "tiny")
    cls = make_package(root, "zcls")
    manifest = json.loads((cls / "manifest.json").read_text())
    manifest.update(task="classification", labels=["no", "yes"])
    (cls / "manifest.json").write_text(json.dumps(manifest))
    with client_for(cls, backend=FakeClassifierBackend, max_batch_tokens=4096, cpu_max_batch_tokens=512) as c:
        wait_ready(c)
        engine = c.app.state.engine
        assert engine.models["zcls"].capabilities == {Capability.CLASSIFY, Capability.ANALYSE}  # 2 labels
        for name in ("tiny", "zcls"):  # on CPU the batchers cut at the smaller of the two settings
            info = c.get("/info", params={"model": name}).json()
            assert info["max_batch_tokens"] == engine.models[name].limits("embed").max_batch_tokens == 512
        assert c.get("/info", params={"model": "zcls"}).json()["model_type"] == {
            "classifier": {"id2label": {"0": "no", "1": "yes"}, "label2id": {"no": 0, "yes": 1}}}
        assert c.post("/predict", json={"inputs": "the cat"}).status_code == 200


def test_decoded_texts_over_the_response_cap_are_refused(package):
    with client_for(package, max_response_bytes=400) as c:
        wait_ready(c)
        assert c.post("/decode", json={"ids": [4, 6]}).status_code == 200
        msg = tei_error(c.post("/decode", json={"ids": [4, 6] * 40}), 413, "Validation")
        assert "HEADWISE_MAX_RESPONSE_BYTES" in msg


def test_health_is_teis_probe_and_open_without_the_key(package):
    GatedBackend.gate.clear()
    with client_for(package, api_key="k3y", backend=GatedBackend) as c:
        tei_error(c.get("/health"), 503, "Unhealthy")  # warming up: TEI's shape
        GatedBackend.gate.set()
        wait_ready(c)
        r = c.get("/health")  # no Authorization header: a probe stays open
        assert r.status_code == 200 and r.content == b""
