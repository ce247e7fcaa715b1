"""/v1/rerank and /v1/predict end to end: a real `headwise serve` process on tiny random
classification packages (a 1-label cross-encoder, a 3-label classifier) beside an embedding
package, answers compared with transformers' BertForSequenceClassification within 1e-5, the
rerank attention with the attention graph's own weights sliced by numpy, errors in the native
shape, and the per-model metrics."""

from __future__ import annotations

import base64

import numpy as np
import onnxruntime as ort
import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUERY = "where is the cat"
DOCS = ["a dog", "the cat sat on the mat", "", "blue fox jumps", "the cat is on the mat, the dog is not"]


@pytest.fixture(scope="module")
def srv(start_server, classifier_packages, tiny_package, tmp_path_factory):
    models = tmp_path_factory.mktemp("classify-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / "tiny").symlink_to(tiny_package, target_is_directory=True)  # an embedding model beside them
    return start_server(models=models, env={"HEADWISE_MAX_CLIENT_BATCH": "8", "HEADWISE_MAX_INPUT_CHARS": "5000",
                                            "HEADWISE_ATTENTION_BUDGET_BYTES": "200000",
                                            "HEADWISE_MAX_RESPONSE_BYTES": "200000"})


def tokenizer(ckpt):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")


def reference(ckpt, ref, firsts, seconds=None):
    """transformers' logits for texts or pairs (sent as a batch, as sentence-transformers'
    CrossEncoder does), each alone, and their encodings."""
    tok = tokenizer(ckpt)
    out, encs = [], []
    for i, a in enumerate(firsts):
        args = ([a],) if seconds is None else ([a], [seconds[i]])
        b = tok(*args, truncation=True, max_length=64, return_token_type_ids=True, return_tensors="pt")
        with torch.no_grad():
            out.append(ref(**b).logits[0].numpy())
        encs.append(b)
    return np.stack(out), encs


def ok(r):
    assert r.status_code == 200, r.text
    return r.json()


def error(r, status, type_):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == type_ and err["code"] == status
    return err["message"]


def test_rerank_is_sorted_and_equals_transformers(srv, classifier_packages):
    ckpt, ref = classifier_packages["tiny-reranker"]
    want, _ = reference(ckpt, ref, [QUERY] * len(DOCS), DOCS)
    want = want[:, 0]
    got = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS, "return_text": True}))
    assert got["model"] == "tiny-reranker" and len(got["results"]) == len(DOCS)
    scores = [r["score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)
    assert [r["index"] for r in got["results"]] == list(np.argsort(-want, kind="stable"))
    for r in got["results"]:
        assert r["text"] == DOCS[r["index"]] and "attention" not in r
        assert abs(r["score"] - float(torch.sigmoid(torch.tensor(want[r["index"]])))) < 1e-6
    raw = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS, "raw_scores": True}))
    for r in raw["results"]:
        assert abs(r["score"] - want[r["index"]]) < 1e-5 and "text" not in r
    top = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS, "top_n": 2}))
    assert [r["index"] for r in top["results"]] == [r["index"] for r in got["results"][:2]]
    assert got["usage"]["prompt_tokens"] == got["usage"]["total_tokens"] > 0


def test_predict_equals_transformers(srv, classifier_packages):
    ckpt, ref = classifier_packages["tiny-classifier"]
    labels = ["negative", "neutral", "positive"]
    got = ok(srv.post("/v1/predict", {"model": "tiny-classifier",
                                      "inputs": ["the cat sat", ["a dog", "the lazy dog"], ["one text"]]}))
    texts, _ = reference(ckpt, ref, ["the cat sat", "one text"])
    pair, _ = reference(ckpt, ref, ["a dog"], ["the lazy dog"])
    for item, logits in zip(got["data"], [texts[0], pair[0], texts[1]], strict=True):
        want = torch.softmax(torch.from_numpy(logits), -1).numpy()
        assert [p["label"] for p in item] == [labels[j] for j in np.argsort(-want, kind="stable")]
        for p in item:
            assert abs(p["score"] - want[labels.index(p["label"])]) < 1e-5
    # a list of exactly two texts is one pair (as TEI reads it); one text is a batch of one
    one_pair = ok(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": ["a dog", "the lazy dog"]}))
    assert one_pair["data"] == [got["data"][1]]
    raw = ok(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": "the cat sat", "raw_scores": True}))
    assert {p["label"]: p["score"] for p in raw["data"][0]} == pytest.approx(dict(zip(labels, texts[0].tolist(), strict=True)),
                                                                            abs=1e-5)


def _graph_weights(models, ids, types) -> np.ndarray:
    """The analysis graph's weights, every head kept: the graph the server answers attention from."""
    sess = ort.InferenceSession(str(models / "tiny-reranker" / "analysis.onnx"), providers=["CPUExecutionProvider"])
    head_mask = next(i for i in sess.get_inputs() if i.name == "head_mask")
    return sess.run(["attentions"], {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": types,
                                     "head_mask": np.ones((len(ids), *head_mask.shape[1:]), np.float32)})[0][0]


def test_rerank_attention_is_the_graph_weights_sliced(srv, classifier_packages):
    ckpt, ref = classifier_packages["tiny-reranker"]
    _, encs = reference(ckpt, ref, [QUERY] * len(DOCS), DOCS)
    tok = tokenizer(ckpt)
    dense = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS,
                                       "attention": {"layers": None, "heads": None}}))
    half = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS,
                                      "attention": {"layers": [1], "heads": [0], "dtype": "float16",
                                                    "encoding": "base64"}}))
    halves = {r["index"]: r["attention"] for r in half["results"]}
    for r in dense["results"]:
        i, a = r["index"], r["attention"]
        b = encs[i]
        full = _graph_weights(classifier_packages["models"], b.input_ids.numpy(), b.token_type_ids.numpy())
        q, d = np.asarray(a["query"]["positions"], int), np.asarray(a["document"]["positions"], int)
        # the query's and the document's own tokens, without [CLS]/[SEP]
        assert a["query"]["tokens"] == tok.tokenize(QUERY) and a["document"]["tokens"] == tok.tokenize(DOCS[i])
        assert list(q) == list(range(1, 1 + len(q))) and list(d) == list(range(len(q) + 2, len(q) + 2 + len(d)))
        assert [DOCS[i][s:e] for s, e in a["document"]["offsets"]] == [t.removeprefix("##") for t in a["document"]["tokens"]]
        qd, dq = a["query_to_document"], a["document_to_query"]
        assert qd["shape"] == [2, 2, len(q), len(d)] and dq["shape"] == [2, 2, len(d), len(q)]
        np.testing.assert_allclose(np.asarray(qd["data"], np.float32).reshape(qd["shape"]),
                                   full[:, :, q[:, None], d[None, :]], atol=1e-6, rtol=0)
        np.testing.assert_allclose(np.asarray(dq["data"], np.float32).reshape(dq["shape"]),
                                   full[:, :, d[:, None], q[None, :]], atol=1e-6, rtol=0)
        h = halves[i]["query_to_document"]
        got16 = np.frombuffer(base64.b64decode(h["data"]), "<f2").reshape(h["shape"])
        np.testing.assert_array_equal(got16, full[1:2, 0:1, q[:, None], d[None, :]].astype(np.float16))


def test_errors_are_native_and_clear(srv):
    assert "several models" in error(srv.post("/v1/rerank", {"query": "q", "texts": ["a"]}), 422, "validation")
    msg = error(srv.post("/v1/rerank", {"model": "tiny-classifier", "query": "q", "texts": ["a"]}), 422, "validation")
    assert "3 labels" in msg and "/v1/predict" in msg
    msg = error(srv.post("/v1/predict", {"model": "tiny", "inputs": "a"}), 422, "validation")
    assert "embedding model" in msg and "/v1/rerank" in msg
    msg = error(srv.post("/v1/embed", {"model": "tiny-reranker", "inputs": "a"}), 422, "validation")
    assert "classification model" in msg
    for route, body in (("/v1/similarity", {"source": "a", "targets": ["b"]}),
                        ("/v1/similarity", {"source": "a", "targets": ["b"], "explain": True}),
                        ("/v1/occlusion", {"input": "a"})):
        msg = error(srv.post(route, {"model": "tiny-reranker", **body}), 422, "validation")
        assert "classification model" in msg and route in msg and "/v1/rerank" in msg
    assert error(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": []}), 400,
                 "invalid_request") == "'texts' is empty"
    assert "at most 8" in error(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": ["a"] * 9}),
                                413, "too_large")
    msg = error(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": ["a", "b" * 80],
                                        "truncate": False}), 422, "validation")
    assert msg.startswith("texts[1] has ") and "limit of 64" in msg
    long = ["the quick brown fox jumps over the lazy dog " * 8] * 8
    msg = error(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": long[0], "texts": long,
                                        "attention": {}}), 413, "too_large")
    assert "attention" in msg and "200000" in msg
    assert error(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": ["a"], "top_n": 0}),
                 422, "validation")
    assert error(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": [["a", "b", "c"]]}), 422,
                 "validation") == "each of 'inputs' is a text or a pair of two texts"
    assert error(srv.post("/v1/rerank", {"model": "nope", "query": "q", "texts": ["a"]}), 404, "not_found")
    mark = "zebra-unicorn-4711 "  # a client's text never comes back in an error
    r = srv.post("/v1/rerank", {"model": "tiny-reranker", "query": mark * 300, "texts": ["a"]})
    assert error(r, 413, "too_large").startswith("query has 5700 characters") and "zebra" not in r.text
    r = srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": [["a", mark * 300], "b"]})
    assert error(r, 413, "too_large").startswith("inputs[0] has 5700 characters") and "zebra" not in r.text
    assert error(srv.post("/v1/predict", content=b'{"inputs": [', headers={"content-type": "application/json"}),
                 400, "invalid_request") == "malformed JSON body"
    # echoed texts count in the answer's bound (6 bytes a character at most): 8 × 4,896 × 6 > 200,000
    body = {"model": "tiny-reranker", "query": "q", "texts": ["the cat " * 612] * 8}
    assert len(ok(srv.post("/v1/rerank", body))["results"]) == 8
    runs = batches(srv, "tiny-reranker")
    assert "HEADWISE_MAX_RESPONSE_BYTES" in error(srv.post("/v1/rerank", {**body, "return_text": True}), 413,
                                                  "too_large")
    assert batches(srv, "tiny-reranker") == runs  # refused before inference
    assert len(ok(srv.post("/v1/rerank", {**body, "return_text": True, "top_n": 2}))["results"]) == 2


def batches(srv, model: str) -> float:
    """The batches the model's fast graph has run (headwise_batch_size_count)."""
    line = f'headwise_batch_size_count{{model="{model}",variant="fast"}}'
    return sum(float(x.split()[-1]) for x in srv.metrics().splitlines() if x.startswith(line))


def test_model_cards_and_metrics(srv):
    cards = {m["name"]: m for m in ok(srv.get("/v1/models"))["data"]}
    assert cards["tiny-reranker"]["task"] == "classification" and cards["tiny-reranker"]["labels"] == ["LABEL_0"]
    assert cards["tiny-classifier"]["labels"] == ["negative", "neutral", "positive"]
    assert cards["tiny"]["task"] == "embedding" and "labels" not in cards["tiny"]
    ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": ["a", "b"]}))
    ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": "q", "texts": ["a"], "attention": {"layers": [0]}}))
    ok(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": "a"}))
    text = srv.metrics()
    for line in ('headwise_requests_total{code="200",model="tiny-reranker",route="/v1/rerank"}',
                 'headwise_requests_total{code="200",model="tiny-classifier",route="/v1/predict"}',
                 'headwise_inference_duration_seconds_count{model="tiny-reranker",variant="fast"}',
                 'headwise_inference_duration_seconds_count{model="tiny-reranker",variant="attention"}',
                 'headwise_batch_size_count{model="tiny-classifier",variant="fast"}',
                 'headwise_batch_tokens_count{model="tiny-reranker",variant="fast"}',
                 'headwise_input_tokens_count{model="tiny-reranker"}',
                 'headwise_attention_bytes_total{model="tiny-reranker"}'):
        assert any(x.startswith(line) and float(x.split()[-1]) > 0 for x in text.splitlines()), line
