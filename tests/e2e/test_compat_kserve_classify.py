"""KServe v2 for classification packages against a real `headwise serve`, driven by the real
`tritonclient.http` client: `text` and `text_pair` in, `logits` and `scores` out (JSON and
binary), Triton's classification extension, and the 400s; every number equals /v1/predict's
(which tests/e2e/test_classify.py holds to transformers)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUERIES = ["where is the cat", "naïve café — 東京", "blue"]
DOCS = ["the cat sat on the mat", "", "blue fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def srv(start_server, classifier_packages, tiny_package, tmp_path_factory):
    models = tmp_path_factory.mktemp("kserve-classify-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / "tiny").symlink_to(tiny_package, target_is_directory=True)
    return start_server(models=models)


@pytest.fixture(scope="module")
def client(srv):
    c = th.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    yield c
    c.close()


def texts(name: str, items: list[str], binary: bool) -> th.InferInput:
    i = th.InferInput(name, [len(items)], "BYTES")
    i.set_data_from_numpy(np.array([t.encode() for t in items], dtype=np.object_), binary_data=binary)
    return i


def predict(srv, model: str, inputs: list, raw: bool) -> np.ndarray:
    """/v1/predict's values in label order, [N, n_labels]."""
    r = srv.post("/v1/predict", {"model": model, "inputs": inputs, "raw_scores": raw})
    assert r.status_code == 200, r.text
    labels = srv.get(f"/v1/models/{model}").json()["labels"]
    return np.array([[{x["label"]: x["score"] for x in row}[lab] for lab in labels] for row in r.json()["data"]])


def test_metadata_names_text_pairs_and_logits(client):
    md = client.get_model_metadata("tiny-classifier")
    assert md["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]},
                            {"name": "text_pair", "datatype": "BYTES", "shape": [-1]}]
    assert md["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 3]},
                             {"name": "scores", "datatype": "FP32", "shape": [-1, 3]}]
    assert client.get_model_metadata("tiny-reranker")["outputs"][0]["shape"] == [-1, 1]
    assert "classification" in client.get_server_metadata()["extensions"]


@pytest.mark.parametrize("binary", [False, True])
def test_pairs_equal_native_predict(client, srv, binary):
    out = client.infer("tiny-reranker", [texts("text", QUERIES, binary), texts("text_pair", DOCS, binary)],
                       outputs=[th.InferRequestedOutput("logits", binary_data=binary),
                                th.InferRequestedOutput("scores", binary_data=binary)])
    pairs = [[q, d] for q, d in zip(QUERIES, DOCS, strict=True)]
    np.testing.assert_allclose(out.as_numpy("logits"), predict(srv, "tiny-reranker", pairs, raw=True), atol=1e-6)
    np.testing.assert_allclose(out.as_numpy("scores"), predict(srv, "tiny-reranker", pairs, raw=False), atol=1e-6)


def test_single_texts_default_to_logits(client, srv):
    out = client.infer("tiny-classifier", [texts("text", QUERIES, False)])
    assert [o["name"] for o in out.get_response()["outputs"]] == ["logits"]
    np.testing.assert_allclose(out.as_numpy("logits"), predict(srv, "tiny-classifier", [[q] for q in QUERIES], raw=True),
                               atol=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_classification_extension_lists_the_top_labels(client, srv, binary):
    out = client.infer("tiny-classifier", [texts("text", QUERIES, binary)],
                       outputs=[th.InferRequestedOutput("scores", binary_data=binary, class_count=2)])
    got = out.as_numpy("scores")
    assert got.shape == (len(QUERIES), 2)
    labels = srv.get("/v1/models/tiny-classifier").json()["labels"]
    want = predict(srv, "tiny-classifier", [[q] for q in QUERIES], raw=False)
    for row, values in zip(got, want, strict=True):
        order = np.argsort(-values, kind="stable")[:2]
        parsed = [(s.decode() if isinstance(s, bytes) else s).split(":") for s in row]
        assert [int(p[1]) for p in parsed] == order.tolist()
        assert [p[2] for p in parsed] == [labels[i] for i in order]
        np.testing.assert_allclose([float(p[0]) for p in parsed], values[order], atol=1e-6)


def test_mistakes_get_400_with_a_clear_message(client, srv):
    def refused(inputs, outputs=None, model="tiny-classifier") -> str:
        with pytest.raises(InferenceServerException) as e:
            client.infer(model, inputs, outputs=outputs)
        assert e.value.status() == "400", e.value.message()
        return e.value.message()

    assert "one second text per text" in refused([texts("text", QUERIES, False), texts("text_pair", DOCS[:2], False)])
    assert "input 'text' is missing" in refused([texts("text_pair", DOCS, False)])
    assert "this model has logits, scores" in refused([texts("text", QUERIES, False)],
                                                      [th.InferRequestedOutput("attentions")])
    assert "text_pair" in refused([texts("image", QUERIES, False)])
    # the extension is for classification outputs; an embedding model's refuse it
    assert "classification extension" in refused([texts("text", QUERIES, False)],
                                                  [th.InferRequestedOutput("sentence_embedding", class_count=1)],
                                                  model="tiny")
    r = srv.post("/v2/models/tiny-classifier/infer", {
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
        "outputs": [{"name": "scores", "parameters": {"classification": -1}}]})
    assert r.status_code == 400 and "non-negative integer" in r.json()["error"]
