"""TEI's shaping (service.api.compat.tei): its pure functions, /predict's and /rerank's answers
on a fake classification engine, and the echoed texts' bound before inference."""

import numpy as np
import pytest

from headwise.service.api.compat import tei
from headwise.service.errors import Validation
from tests.unit.fakes import D_MODEL, client_for, tei_error, wait_ready

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
    assert tei.order([0.5, 0.9, 0.9]) == [2, 1, 0] and tei.order([0.5, 0.9, 0.9], 1) == [2]


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

    from headwise.service.api.sizes import JSON
    from headwise.service.engine.classify import (
        Classified,
        ClassifyResult,
        activate,
        answer_size,
    )
    from headwise.service.engine.heads import LogitsHead
    from headwise.service.engine.size import total

    engine = c.app.state.engine
    tiny = engine.models["tiny"]
    pkg = replace(tiny.package, name="zcls", task="classification", labels=tuple(labels))
    monkeypatch.setitem(engine.models, "zcls", SimpleNamespace(
        name="zcls", package=pkg, ready=True, capabilities=LogitsHead(pkg, None).capabilities,
        described=LogitsHead(pkg, None).described,
        card=lambda: {**tiny.card(), **LogitsHead(pkg, None).card()}, max_batch_tokens=tiny.max_batch_tokens))
    asked = []

    async def classify(rt, items, params, probe=None):
        asked.append((items, params))
        enc = tiny.tokenizer.encode(["x"])[0]
        data = [Classified(enc, np.float32(row), activate(np.float32(row), params.raw_scores), None)
                for row in logits[:len(items)]]
        size = total(answer_size(params, d.encoding, list(labels)) for d in data)
        return ClassifyResult("zcls", "1", list(labels), data, JSON.bytes(size))

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
