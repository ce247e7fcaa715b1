"""vLLM's /score and /classify against a real `headwise serve` (fp32, CPU): a tiny cross-encoder,
a tiny 3-label classifier, the real all-MiniLM-L6-v2 package and a tiny GPT-2 side by side.
Scores equal the native routes' (/v1/rerank, /v1/predict, the cosine of /v1/embed's
embeddings) within 1e-6, and sentence-transformers' (CrossEncoder on the tiny checkpoint,
SentenceTransformer on MiniLM) within float noise; mistakes come back in vLLM's (OpenAI's)
error shape naming the field (issue 29)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MINILM = "all-minilm-l6-v2"
QUERY = "where is the cat"
DOCS = ["a dog", "the cat sat on the mat", "", "blue fox jumps"]
QUERIES = ["the cat", "a red fox", "one two three", "is the dog big"]
SENTENCES = ["A man is playing a guitar.", "Someone plays an instrument.", "naïve café — 東京 🙂",
             "The quick brown fox jumps over the lazy dog."]
LONG = "attention " * 400  # over MiniLM's max_len (256 tokens)


@pytest.fixture(scope="module")
def srv(start_server, classifier_packages, default_package, tmp_path_factory):
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2

    models = tmp_path_factory.mktemp("vllm-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / MINILM).symlink_to(default_package, target_is_directory=True)
    ckpt = make_tiny_gpt2(tmp_path_factory.mktemp("vllm-gpt2") / "gpt2", n_layers=2, n_heads=2, d_model=32)
    build_package(ckpt, models, "tiny-gpt2", progress=lambda m: None)
    return start_server(models=models, env={"HEADWISE_MAX_CLIENT_BATCH": "8", "HEADWISE_MAX_INPUT_CHARS": "5000"})


def ok(r) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


def vllm_error(r, status: int, param: str | None) -> str:
    """vLLM's (OpenAI's) error body, naming `param`."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code", "param"}, body
    assert body["error"]["code"] == status and body["error"]["param"] == param, body
    assert "Traceback" not in r.text
    return body["error"]["message"]


def scores(answer: dict, kind: str = "score") -> list[float]:
    """The answer's scores, its envelope checked as vLLM writes it."""
    assert set(answer) == {"id", "object", "created", "model", "data", "usage"}
    assert re.fullmatch(rf"{kind}-[0-9a-f]{{32}}", answer["id"]) and answer["object"] == "list"
    assert abs(answer["created"] - time.time()) < 600
    u = answer["usage"]
    assert u["prompt_tokens"] == u["total_tokens"] > 0 and u["completion_tokens"] == 0
    assert [d["index"] for d in answer["data"]] == list(range(len(answer["data"])))
    if kind == "score":
        assert all(d["object"] == "score" for d in answer["data"])
        return [d["score"] for d in answer["data"]]
    return answer["data"]


def rerank(srv, query: str, texts: list[str], **extra) -> list[float]:
    got = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": query, "texts": texts, **extra}))
    return [s for _, s in sorted((r["index"], r["score"]) for r in got["results"])]


def embed(srv, texts: list[str]) -> np.ndarray:
    r = ok(srv.post("/v1/embed", {"model": MINILM, "inputs": texts}))
    return np.array([d["embedding"] for d in r["data"]], dtype=np.float64)


def transformers_logits(ckpt, ref, texts: list[str]) -> np.ndarray:
    """The reference's logits, one text at a time (tests/e2e/test_classify.py's way)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")
    with torch.no_grad():
        return np.stack([ref(**tok([t], truncation=True, max_length=64, return_token_type_ids=True,
                                   return_tensors="pt")).logits[0].numpy() for t in texts])


def cos(u, v) -> float:
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


# -- a cross-encoder -------------------------------------------------------------------------------

def test_cross_encoder_scores_equal_rerank_and_sentence_transformers(srv, classifier_packages):
    from sentence_transformers import CrossEncoder

    one_many = ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS}))
    got = scores(one_many)
    assert one_many["model"] == "tiny-reranker" and len(got) == len(DOCS)
    np.testing.assert_allclose(got, rerank(srv, QUERY, DOCS), atol=1e-6, rtol=0)
    native = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS}))
    assert one_many["usage"]["prompt_tokens"] == native["usage"]["prompt_tokens"]
    # the same pairs by vLLM's other names, on /v1/score, and a list of one as the first side
    for route, body in (("/v1/score", {"text_1": QUERY, "text_2": DOCS}),
                        ("/score", {"queries": QUERY, "documents": DOCS}),
                        ("/score", {"queries": [QUERY], "items": DOCS}),
                        ("/score", {"data_1": [QUERY], "data_2": DOCS})):
        np.testing.assert_allclose(scores(ok(srv.post(route, {"model": "tiny-reranker", **body}))), got, atol=1e-6)

    one = scores(ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS[1]})))
    np.testing.assert_allclose(one, got[1:2], atol=1e-6)

    pairwise = scores(ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERIES, "text_2": DOCS})))
    want = [rerank(srv, q, [d])[0] for q, d in zip(QUERIES, DOCS, strict=True)]
    np.testing.assert_allclose(pairwise, want, atol=1e-6, rtol=0)
    predicted = ok(srv.post("/v1/predict", {"model": "tiny-reranker", "inputs": [list(p) for p in zip(QUERIES, DOCS, strict=True)]}))
    np.testing.assert_allclose(pairwise, [d[0]["score"] for d in predicted["data"]], atol=1e-6, rtol=0)

    ckpt, _ = classifier_packages["tiny-reranker"]
    ce = CrossEncoder(str(ckpt), device="cpu")  # its default activation for one label: sigmoid
    np.testing.assert_allclose(got, ce.predict([(QUERY, d) for d in DOCS]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(pairwise, ce.predict(list(zip(QUERIES, DOCS, strict=True))), atol=1e-5, rtol=0)

    raw = scores(ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS,
                                        "use_activation": False})))
    np.testing.assert_allclose(raw, rerank(srv, QUERY, DOCS, raw_scores=True), atol=1e-6, rtol=0)
    assert np.ptp(raw) > 1e-5  # the tiny model's logits are close: this tolerance still tells them apart
    legacy = scores(ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS,
                                           "activation": False, "truncate_prompt_tokens": -1})))
    np.testing.assert_allclose(legacy, raw, atol=1e-7)


# -- an embedding model (vLLM's bi-encoder scoring) -----------------------------------------------

def test_embedding_scores_are_cosines_of_v1_embed_and_sentence_transformers(srv):
    from sentence_transformers import SentenceTransformer

    from headwise.model.sentence import default_checkpoint

    first, others = SENTENCES[0], [*SENTENCES[1:], LONG]
    one_many = ok(srv.post("/score", {"model": MINILM, "text_1": first, "text_2": others}))
    got = scores(one_many)
    vecs = embed(srv, [first, *others])
    np.testing.assert_allclose(got, [cos(vecs[0], v) for v in vecs[1:]], atol=1e-6, rtol=0)
    # the first text embedded once: usage counts each text's tokens once, as /v1/embed's
    assert one_many["usage"]["prompt_tokens"] == ok(srv.post("/v1/embed", {"model": MINILM,
                                                                            "inputs": [first, *others]}))["usage"]["prompt_tokens"]

    firsts = [SENTENCES[3], SENTENCES[2], "hi", LONG]
    pairwise = scores(ok(srv.post("/v1/score", {"model": MINILM, "queries": firsts, "documents": others})))
    a, b = embed(srv, firsts), embed(srv, others)
    np.testing.assert_allclose(pairwise, [cos(u, v) for u, v in zip(a, b, strict=True)], atol=1e-6, rtol=0)

    one = scores(ok(srv.post("/score", {"model": MINILM, "text_1": first, "text_2": others[0]})))
    np.testing.assert_allclose(one, got[:1], atol=1e-6)

    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    e1, e2 = st.encode([first], convert_to_tensor=True), st.encode(others, convert_to_tensor=True)
    np.testing.assert_allclose(got, torch.nn.functional.cosine_similarity(e1, e2).numpy(), atol=1e-5, rtol=0)
    ea, eb = st.encode(firsts, convert_to_tensor=True), st.encode(others, convert_to_tensor=True)
    np.testing.assert_allclose(pairwise, torch.nn.functional.cosine_similarity(ea, eb).numpy(), atol=1e-5, rtol=0)

    # cosines do not depend on the activation (normalising): the flag changes nothing here
    same = scores(ok(srv.post("/score", {"model": MINILM, "text_1": first, "text_2": others, "use_activation": False})))
    np.testing.assert_allclose(same, got, atol=1e-7)
    cut = scores(ok(srv.post("/score", {"model": MINILM, "text_1": first, "text_2": others,
                                        "truncate_prompt_tokens": 256})))
    np.testing.assert_allclose(cut, got, atol=1e-7)


# -- /classify --------------------------------------------------------------------------------------

def test_classify_equals_predict_and_transformers(srv, classifier_packages):
    labels = ["negative", "neutral", "positive"]
    texts = ["the cat sat", "one text", "blue fox jumps over the lazy dog"]
    answer = ok(srv.post("/classify", {"model": "tiny-classifier", "input": texts}))
    data = scores(answer, "classify")
    assert answer["model"] == "tiny-classifier"
    native = ok(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": [[t] for t in texts]}))["data"]
    logits = transformers_logits(*classifier_packages["tiny-classifier"], texts)
    for item, predicted, row in zip(data, native, logits, strict=True):
        assert set(item) == {"index", "label", "probs", "num_classes"} and item["num_classes"] == 3
        by_label = {p["label"]: p["score"] for p in predicted}
        np.testing.assert_allclose(item["probs"], [by_label[x] for x in labels], atol=1e-6, rtol=0)
        assert item["label"] == labels[int(np.argmax(item["probs"]))] == predicted[0]["label"]
        np.testing.assert_allclose(item["probs"], torch.softmax(torch.from_numpy(row), -1).numpy(), atol=1e-5)
    single = scores(ok(srv.post("/v1/classify", {"model": "tiny-classifier", "input": texts[0]})), "classify")
    assert len(single) == 1
    np.testing.assert_allclose(single[0]["probs"], data[0]["probs"], atol=1e-7)
    raw = scores(ok(srv.post("/classify", {"model": "tiny-classifier", "input": texts, "use_activation": False})),
                 "classify")
    np.testing.assert_allclose([d["probs"] for d in raw], logits, atol=1e-5)

    # a one-label model: the sigmoid of its logit, as /v1/predict
    one = scores(ok(srv.post("/classify", {"model": "tiny-reranker", "input": texts})), "classify")
    native = ok(srv.post("/v1/predict", {"model": "tiny-reranker", "inputs": [[t] for t in texts]}))["data"]
    for item, predicted in zip(one, native, strict=True):
        assert item["num_classes"] == 1 and item["label"] == "LABEL_0"
        assert abs(item["probs"][0] - predicted[0]["score"]) < 1e-6 and 0 < item["probs"][0] < 1


# -- errors ----------------------------------------------------------------------------------------

def test_errors_in_vllms_shape_name_the_field(srv):
    rr = {"model": "tiny-reranker"}
    assert "1 against" not in vllm_error(srv.post("/score", {**rr, "text_1": ["a", "b"], "text_2": ["c", "d", "e"]}),
                                         400, "text_2")
    vllm_error(srv.post("/score", {**rr, "queries": ["a", "b"], "documents": "c"}), 400, "documents")
    assert "empty" in vllm_error(srv.post("/score", {**rr, "text_1": [], "text_2": ["a"]}), 400, "text_1")
    vllm_error(srv.post("/score", {**rr, "queries": "a", "documents": []}), 400, "documents")
    assert "missing" in vllm_error(srv.post("/score", {**rr, "text_1": "a"}), 422, "text_2")
    vllm_error(srv.post("/score", {**rr, "documents": ["a"]}), 422, "queries")
    vllm_error(srv.post("/score", rr), 422, "text_1")
    vllm_error(srv.post("/score", {**rr, "text_1": "a", "text_2": "b", "queries": "c"}), 422, "queries")
    vllm_error(srv.post("/score", {**rr, "queries": "a", "documents": ["b"], "items": ["c"]}), 422, "items")
    assert "served:" in vllm_error(srv.post("/score", {"model": "nope", "text_1": "a", "text_2": "b"}), 404, "model")
    assert "several models" in vllm_error(srv.post("/score", {"text_1": "a", "text_2": "b"}), 422, "model")
    for model in ("tiny-gpt2", "tiny-classifier"):
        msg = vllm_error(srv.post("/score", {"model": model, "text_1": "a", "text_2": "b"}), 422, "model")
        assert "/score needs a re-ranker (a cross-encoder" in msg
    for model in ("tiny-gpt2", MINILM):
        assert "/classify needs" in vllm_error(srv.post("/classify", {"model": model, "input": "a"}), 422, "model")
    assert vllm_error(srv.post("/classify", {"model": "tiny-classifier", "input": []}), 400, "input") == \
        "'input' is empty"
    assert "at most 8" in vllm_error(srv.post("/score", {**rr, "text_1": "q", "text_2": ["a"] * 9}), 413, "text_2")
    # an embedding model embeds both sides: 1 + 8 texts
    assert "9 texts to embed" in vllm_error(srv.post("/score", {"model": MINILM, "text_1": "q", "text_2": ["a"] * 8}),
                                            413, "text_2")
    mark = "zebra-unicorn-4711 "  # a client's text never comes back in an error
    r = srv.post("/score", {**rr, "text_1": "q", "text_2": ["a", mark * 300]})
    assert vllm_error(r, 413, "text_2").startswith("text_2[1] has 5700 characters") and "zebra" not in r.text
    # issue 40, item 3: too many inputs named no param
    assert "9 inputs; at most 8" in vllm_error(srv.post("/classify", {"model": "tiny-classifier", "input": ["a"] * 9}),
                                               413, "input")
    r = srv.post("/classify", {"model": "tiny-classifier", "input": ["a", mark * 300]})
    assert vllm_error(r, 413, "input").startswith("input[1] has 5700 characters") and "zebra" not in r.text
    # truncation: over max_len (64 for the tiny models), or under a pair's special tokens, refused
    # (tests/e2e/test_truncate_prompt_tokens.py: the cuts themselves)
    vllm_error(srv.post("/score", {**rr, "text_1": "a", "text_2": "b", "truncate_prompt_tokens": 2}), 422,
               "truncate_prompt_tokens")
    vllm_error(srv.post("/classify", {**rr, "input": "a", "truncate_prompt_tokens": 65}), 400, "truncate_prompt_tokens")
    vllm_error(srv.post("/classify", {**rr, "input": "a", "truncate_prompt_tokens": -2}), 422, None)
    vllm_error(srv.post("/classify", {**rr, "input": "a", "priority": 1}), 400, "priority")
    vllm_error(srv.post("/classify", {**rr, "input": "a", "use_activation": True, "softmax": False}), 422,
               "use_activation")
    assert "messages" in vllm_error(srv.post("/classify", {**rr, "messages": [{"role": "user", "content": "a"}]}),
                                    422, None)
    vllm_error(srv.post("/score", content=b'{"text_1": ', headers={"content-type": "application/json"}), 400, None)
