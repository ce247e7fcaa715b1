"""POST /v1/tag on a token-classification package with the fake backend: each text's tokens
without the special ones, their likeliest label and softmax score, every score on request,
ignored labels left out, attention per input, and the one refusal for the other kinds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headwise.service.engine.runtime import Capability
from tests.unit.fakes import (
    FakeBackend,
    assert_error,
    client_for,
    fake_hidden,
    make_package,
    wait_ready,
)

LABELS = ["O", "B-PER", "I-PER"]


class FakeTaggerBackend(FakeBackend):
    """FakeBackend with `token_logits`: each token's first three fake hidden values."""

    def run(self, role, feeds, outputs):
        out = super().run(role, feeds, [o for o in outputs if o != "token_logits"] + ["last_hidden_state"])
        out["token_logits"] = out["last_hidden_state"][:, :, :len(LABELS)] * 4
        return {k: out[k] for k in outputs}


@pytest.fixture
def tagger(tmp_path):
    folder = make_package(tmp_path / "tagger")
    m = json.loads((folder / "manifest.json").read_text())
    m.update(task="token-classification", labels=LABELS, pooling=None, normalize=False)
    (folder / "manifest.json").write_text(json.dumps(m))
    with client_for(folder, FakeTaggerBackend) as c:
        wait_ready(c)
        yield c


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_each_token_gets_its_label_and_score_special_tokens_left_out(tagger):
    r = tagger.post("/v1/tag", json={"inputs": ["the cat sat", "a dog"], "all_scores": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["labels"] == LABELS and body["usage"]["prompt_tokens"] == 5 + 4
    first = body["data"][0]["tokens"]
    assert [t["token"] for t in first] == ["the", "cat", "sat"] and [t["index"] for t in first] == [1, 2, 3]
    assert [(t["start"], t["end"]) for t in first] == [(0, 3), (4, 7), (8, 11)]
    ids = tagger.app.state.engine.models["tiny"].tokenizer.encode(["the cat sat"])[0].ids
    want = _softmax(fake_hidden(ids[None])[0, 1:4, :3].astype(np.float64) * 4)
    np.testing.assert_allclose([t["scores"] for t in first], want, rtol=1e-5)
    assert [t["label"] for t in first] == [LABELS[j] for j in want.argmax(-1)]
    np.testing.assert_allclose([t["score"] for t in first], want.max(-1), rtol=1e-5)
    card = tagger.get("/v1/models/tiny").json()
    assert card["task"] == "token-classification" and card["labels"] == LABELS


def test_ignored_labels_raw_scores_and_attention(tagger):
    everything = tagger.post("/v1/tag", json={"inputs": "the cat sat on the mat"}).json()["data"][0]["tokens"]
    kept = {t["label"] for t in everything}
    drop = sorted(kept)[0]
    r = tagger.post("/v1/tag", json={"inputs": "the cat sat on the mat", "ignore_labels": [drop],
                                     "raw_scores": True, "attention": {"layers": [0], "heads": [1]}})
    assert r.status_code == 200, r.text
    item = r.json()["data"][0]
    assert [t["index"] for t in item["tokens"]] == [t["index"] for t in everything if t["label"] != drop]
    assert all("scores" not in t for t in item["tokens"])
    assert item["attention"]["shape"] == [1, 1, 8, 8]  # every position, [CLS] and [SEP] included
    ids = tagger.app.state.engine.models["tiny"].tokenizer.encode(["the cat sat on the mat"])[0].ids
    logits = fake_hidden(ids[None])[0, :, :3] * 4
    np.testing.assert_allclose([t["score"] for t in item["tokens"]],
                               [logits[t["index"]].max() for t in item["tokens"]], rtol=1e-5)  # the logit itself


def test_removed_heads_run_on_the_analysis_graph(tagger):
    plain = tagger.post("/v1/tag", json={"inputs": "the cat sat", "all_scores": True, "raw_scores": True}).json()
    r = tagger.post("/v1/tag", json={"inputs": "the cat sat", "all_scores": True, "raw_scores": True,
                                     "ablate": {"0": [0]}})
    assert r.status_code == 200, r.text
    before = np.array([t["scores"] for t in plain["data"][0]["tokens"]])
    after = np.array([t["scores"] for t in r.json()["data"][0]["tokens"]])
    pkg = tagger.app.state.engine.models["tiny"].package
    kept = 1 - 1 / (pkg.n_layers * pkg.n_heads)
    np.testing.assert_allclose(after, before * kept, rtol=1e-5)  # the fake scales by the head mask's mean
    assert any(role == "analysis" for role, _ in tagger.app.state.engine.models["tiny"].backend.calls)
    assert_error(tagger.post("/v1/tag", json={"inputs": "x", "ablate": {"7": [0]}}), 422, "validation")


def test_bad_input_and_the_other_kinds_are_refused(tagger, client):
    assert_error(tagger.post("/v1/tag", json={"inputs": []}), 400, "invalid_request")
    assert_error(tagger.post("/v1/tag", json={"inputs": "x", "attention": {"layers": [9]}}), 422, "validation")
    r = tagger.post("/v1/embed", json={"inputs": "x"})
    assert_error(r, 422, "validation")
    assert "a token-classification model (3 labels): use POST /v1/tag" in r.json()["error"]["message"]
    r = client.post("/v1/tag", json={"inputs": "x"})  # an embedding model
    assert_error(r, 422, "validation")
    assert r.json()["error"]["message"] == ("model 'tiny' is an embedding model: use POST /v1/embed; /v1/tag serves "
                                            "token-classification models (NER and PII taggers)")
    engine = tagger.app.state.engine
    assert engine.models["tiny"].capabilities == {Capability.TAG, Capability.ANALYSE}


def test_kserve_answers_every_positions_logits_and_scores(tagger):
    meta = tagger.get("/v2/models/tiny").json()
    assert [o["name"] for o in meta["outputs"]] == ["token_logits", "token_scores", "attention_mask"]
    assert meta["outputs"][0]["shape"] == [-1, -1, 3] and [i["name"] for i in meta["inputs"]] == ["text"]
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["the cat sat", "a dog"]}],
            "outputs": [{"name": "token_logits"}, {"name": "token_scores"}, {"name": "attention_mask"}]}
    r = tagger.post("/v2/models/tiny/infer", json=body)
    assert r.status_code == 200, r.text
    out = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in r.json()["outputs"]}
    assert out["token_logits"].shape == (2, 5, 3) and out["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 1, 0]]
    ids = tagger.app.state.engine.models["tiny"].tokenizer.encode(["a dog"])[0].ids
    np.testing.assert_allclose(out["token_logits"][1, :4], fake_hidden(ids[None])[0, :, :3] * 4, rtol=1e-5)
    assert not out["token_logits"][1, 4].any()
    np.testing.assert_allclose(out["token_scores"][1, :4], _softmax(out["token_logits"][1, :4]), rtol=1e-5)
    r = tagger.post("/v2/models/tiny/infer", json={**body, "outputs": [{"name": "token_scores",
                                                                        "parameters": {"classification": 2}}]})
    assert r.status_code == 400 and "classification extension" in r.text


def test_teis_root_answers_the_token_classification_pipelines_shape(tagger):
    from tests.unit.fakes import tei_error

    every = tagger.post("/v1/tag", json={"inputs": "the cat sat on the mat"}).json()["data"][0]["tokens"]
    r = tagger.post("/", json={"inputs": "the cat sat on the mat", "parameters": {"ignore_labels": []}})
    assert r.status_code == 200, r.text
    assert [(e["entity"], e["index"], e["word"], e["start"], e["end"]) for e in r.json()] == [
        (t["label"], t["index"], t["token"], t["start"], t["end"]) for t in every]
    default = tagger.post("/", json={"inputs": "the cat sat on the mat"}).json()  # ["O"] ignored
    assert [e["index"] for e in default] == [t["index"] for t in every if t["label"] != "O"]
    simple = tagger.post("/", json={"inputs": "the cat sat on the mat", "parameters": {
        "aggregation_strategy": "simple", "ignore_labels": []}}).json()
    assert sum(e["end"] - e["start"] for e in simple) <= len("the cat sat on the mat")
    assert simple and all("entity_group" in e and e["entity_group"] in ("O", "PER") for e in simple)
    tei_error(tagger.post("/", json={"inputs": "x", "parameters": {"stride": 4}}), 422, "Validation")
    for strategy in ("first", "average", "max"):  # word-level: each of these words is one token here
        words = tagger.post("/", json={"inputs": "the cat sat on the mat", "parameters": {
            "aggregation_strategy": strategy, "ignore_labels": []}}).json()
        assert [(e["entity_group"], e["word"]) for e in words] == [(e["entity_group"], e["word"]) for e in simple]
    tei_error(tagger.post("/", json={"inputs": "x", "parameters": {"aggregation_strategy": "longest"}}), 422,
              "Validation")
    info = tagger.get("/info").json()
    assert info["model_type"] == {"token_classifier": {"id2label": {"0": "O", "1": "B-PER", "2": "I-PER"},
                                                       "label2id": {"O": 0, "B-PER": 1, "I-PER": 2}}}
    assert "(served: tiny (token_classifier))" in tei_error(tagger.post("/embed", json={"inputs": "x"}), 424, "Backend")
    named = tei_error(tagger.post("/predict", json={"inputs": "x", "model": "tiny"}), 424, "Backend")
    assert named.startswith("model 'tiny' is a token-classification model (3 labels): /predict needs a classification")
