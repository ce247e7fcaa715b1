"""TEI's routes in-process with the fake backend: answer shapes, TEI's error shape and
statuses for every row, model selection (HEADWISE_DEFAULT_MODEL), and the pure shaping of
service.api.compat.tei."""

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwise.service.api.compat import tei
from headwise.service.api.errors import NATIVE, OPENAI, TEI, Empty, WrongModelKind
from headwise.service.engine import Capability
from headwise.service.errors import InvalidRequest, NotReady, Validation
from tests.unit.fakes import (
    D_MODEL,
    SECRET_TEXT,
    FakeBackend,
    FakeClassifierBackend,
    GatedBackend,
    client_for,
    make_package,
    wait_ready,
)


def tei_error(r, status: int, error_type: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    assert "Traceback" not in r.text and SECRET_TEXT not in r.text
    return body["error"]


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
                     {"inputs": "a", "truncation_direction": "left"}, {"inputs": "a", "truncation_direction": "up"},
                     {"inputs": "a", "prompt_name": "query"}, {"inputs": "a", "dimensions": 0},
                     {"inputs": "a", "dimensions": D_MODEL + 1}, {"inputs": "a", "encoding_format": "base64"},
                     {"inputs": "the " * 40, "truncate": False}, {"inputs": [[2, 999]]}]:
            tei_error(post("/embed", json=body), 422, "Validation")
        assert post("/embed", json={"inputs": "the " * 40, "truncate": False, "truncation_direction": "left"}) \
            .status_code == 422  # over max_len: refused for its length, whichever direction
        assert post("/embed", json={"inputs": "the cat", "truncate": False, "truncation_direction": "Left"}) \
            .status_code == 200  # nothing cut: the direction changes nothing
        assert post("/embed", json={"inputs": "the " * 40}).status_code == 200  # auto_truncate
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


# -- shaping ---------------------------------------------------------------------------------------

def test_predict_inputs_as_tei_reads_them():
    assert tei.predict_inputs("a") == (["a"], True)
    assert tei.predict_inputs(["a"]) == (["a"], True)
    assert tei.predict_inputs(["q", "d"]) == ([("q", "d")], True)
    assert tei.predict_inputs([["a"], ["q", "d"]]) == (["a", ("q", "d")], False)
    for bad in ([], ["a", "b", "c"], [["a", "b", "c"]], [[]]):
        with pytest.raises(Validation):
            tei.predict_inputs(bad)


def test_best_first_keeps_teis_order_for_ties():
    items = [{"i": 0, "s": 0.5}, {"i": 1, "s": 0.9}, {"i": 2, "s": 0.5}]
    assert [x["i"] for x in tei.best_first(items, lambda x: x["s"])] == [1, 2, 0]


def test_activations_and_offsets():
    logits = np.float32([1.0, -2.0, 0.5])
    np.testing.assert_allclose(tei.activate(logits, "softmax").sum(), 1, atol=1e-6)
    np.testing.assert_allclose(tei.activate(logits, "sigmoid"), 1 / (1 + np.exp(-logits)), atol=1e-6)
    assert np.array_equal(tei.activate(logits, "none"), logits)
    assert tei.byte_offsets("abc") is None and tei.byte_offsets("aé東🙂") == [0, 1, 3, 6, 10]
    v = np.float32([3, 4, 12])
    np.testing.assert_allclose(tei.matryoshka(v, 2, True), [0.6, 0.8])
    assert np.array_equal(tei.matryoshka(v, 2, False), [3, 4]) and tei.matryoshka(v, None, True) is v


# -- /predict and /rerank shaping, on a fake classification engine ----------------------------------

def _classifier(c, monkeypatch, labels, logits):
    """Serve a fake classification model "zcls" beside tiny (after it in name order):
    Engine.classify/rerank answer `logits`."""
    from dataclasses import replace
    from types import SimpleNamespace

    from headwise.service.engine.classify import (
        Classified,
        ClassifyResult,
        activate,
        response_bytes,
    )
    from headwise.service.engine.heads import LogitsHead

    engine = c.app.state.engine
    tiny = engine.models["tiny"]
    pkg = replace(tiny.package, name="zcls", task="classification", labels=tuple(labels))
    monkeypatch.setitem(engine.models, "zcls", SimpleNamespace(
        name="zcls", package=pkg, ready=True, capabilities=LogitsHead(pkg).capabilities,
        card=lambda: {**tiny.card(), **LogitsHead(pkg).card()}, max_batch_tokens=tiny.max_batch_tokens))
    asked = []

    async def classify(rt, items, params, probe=None):
        asked.append((items, params))
        enc = tiny.tokenizer.encode(["x"])[0]
        data = [Classified(enc, np.float32(row), activate(np.float32(row), params.raw_scores), None)
                for row in logits[:len(items)]]
        return ClassifyResult("zcls", "1", list(labels), data,
                              sum(response_bytes(params, d.encoding, list(labels)) for d in data))

    async def rerank(rt, query, texts, params, probe=None):
        return await classify(rt, [(query, t) for t in texts], params, probe)

    monkeypatch.setattr(engine, "classify", classify)
    monkeypatch.setattr(engine, "rerank", rerank)
    return asked


def test_predict_parameters_and_order(client, monkeypatch):
    asked = _classifier(client, monkeypatch, ["a", "b", "c"], [[0.0, 2.0, 1.0], [1.0, 1.0, -1.0]])
    got = client.post("/predict", json={"inputs": "x"}).json()  # the classifier, found by kind
    want = tei.activate(np.float32([0, 2, 1]), "softmax")
    assert [p["label"] for p in got] == ["b", "c", "a"] and got[0]["score"] == pytest.approx(want[1])
    assert [p["label"] for p in client.post("/predict", json={"inputs": [["x"], ["y"]]}).json()[1]] == ["b", "a", "c"]
    top = client.post("/predict", json={"inputs": "x", "parameters": {"top_k": 1, "function_to_apply": "none"}})
    assert top.json() == [{"score": 2.0, "label": "b"}] and asked[-1][1].raw_scores
    sig = client.post("/predict", json={"inputs": "x", "parameters": {"function_to_apply": "sigmoid"}}).json()
    assert sig[0]["score"] == pytest.approx(1 / (1 + np.exp(-2.0)))
    tei_error(client.post("/predict", json={"inputs": "x", "raw_scores": True,
                                            "parameters": {"function_to_apply": "softmax"}}), 422, "Validation")
    tei_error(client.post("/predict", json={"inputs": "x", "parameters": {"top_k": 0}}), 422, "Validation")
    tei_error(client.post("/predict", json={"inputs": []}), 400, "Empty")
    tei_error(client.post("/", json={"inputs": [], "model": "zcls"}), 400, "Empty")
    assert asked[0][0] == ["x"] and asked[1][0] == ["x", "y"]
    # POST /: huggingface_hub's text_classification body goes to the classifier, plain inputs embed
    assert client.post("/", json={"inputs": "x", "parameters": {}}).json()[0]["label"] == "b"
    assert len(client.post("/", json={"inputs": "the cat"}).json()[0]) == D_MODEL
    assert client.post("/", json={"inputs": "x", "model": "zcls"}).json()[0]["label"] == "b"
    tei_error(client.post("/embed", json={"inputs": "x", "model": "zcls"}), 424, "Backend")
    assert client.get("/info", params={"model": "zcls"}).json()["model_type"] == {
        "classifier": {"id2label": {"0": "a", "1": "b", "2": "c"}, "label2id": {"a": 0, "b": 1, "c": 2}}}


def test_rerank_order_and_text(client, monkeypatch):
    _classifier(client, monkeypatch, ["score"], [[0.5], [2.0], [0.5]])
    got = client.post("/rerank", json={"query": "q", "texts": ["a", "b", "c"], "return_text": True}).json()
    assert [(g["index"], g["text"]) for g in got] == [(1, "b"), (2, "c"), (0, "a")]  # ties: TEI's reversed order
    assert list(got[0]) == ["index", "text", "score"] and got[0]["score"] == pytest.approx(1 / (1 + np.exp(-2.0)))
    raw = client.post("/", json={"query": "q", "texts": ["a", "b", "c"], "raw_scores": True}).json()
    assert raw[0] == {"index": 1, "score": 2.0}
    assert client.get("/info", params={"model": "zcls"}).json()["model_type"] == {
        "reranker": {"id2label": {"0": "score"}, "label2id": {"score": 0}}}


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
        assert engine.models["zcls"].capabilities == {Capability.CLASSIFY}  # 2 labels
        for name in ("tiny", "zcls"):  # on CPU the batchers cut at the smaller of the two settings
            info = c.get("/info", params={"model": name}).json()
            assert info["max_batch_tokens"] == engine.models[name].limits("embed").max_batch_tokens == 512
        assert c.get("/info", params={"model": "zcls"}).json()["model_type"] == {
            "classifier": {"id2label": {"0": "no", "1": "yes"}, "label2id": {"no": 0, "yes": 1}}}
        assert c.post("/predict", json={"inputs": "the cat"}).status_code == 200


# -- the echoed texts' bound, before inference (TEI /rerank and /v1/rerank alike) -------------------

def test_echoed_texts_over_the_response_cap_are_refused_before_inference(package):
    with client_for(package, max_response_bytes=2000) as c, pytest.MonkeyPatch.context() as monkeypatch:
        wait_ready(c)
        _classifier(c, monkeypatch, ["score"], [[0.5]] * 4)
        engine, ran = c.app.state.engine, []
        answer = engine.rerank

        async def rerank(*a, **k):
            ran.append(a)
            return await answer(*a, **k)

        monkeypatch.setattr(engine, "rerank", rerank)
        texts = ["x" * 200] * 2  # 2 × (200 × 6 + 16) > 2000
        msg = tei_error(c.post("/rerank", json={"query": "q", "texts": texts, "return_text": True}), 413, "Validation")
        assert "HEADWISE_MAX_RESPONSE_BYTES" in msg
        r = c.post("/v1/rerank", json={"model": "zcls", "query": "q", "texts": texts, "return_text": True})
        assert r.status_code == 413 and "HEADWISE_MAX_RESPONSE_BYTES" in r.json()["error"]["message"], r.text
        assert ran == []  # refused before any inference
        # top_n: only the n longest texts can come back
        body = {"model": "zcls", "query": "q", "texts": [*texts, "y"], "return_text": True, "top_n": 1}
        assert c.post("/v1/rerank", json=body).status_code == 200
        # ...and only their answers count: 4 × 142 bytes of scores + 1372 echoed pass the cap of
        # 2000 with every text's bound, fit it with the one returned
        body = {"model": "zcls", "query": "q", "texts": ["x" * 226, "y", "y", "y"], "return_text": True}
        assert c.post("/v1/rerank", json=body).status_code == 413
        assert c.post("/v1/rerank", json={**body, "top_n": 1}).status_code == 200
        assert c.post("/rerank", json={"query": "q", "texts": texts}).status_code == 200  # no echo, no bound
        assert len(ran) == 4


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
