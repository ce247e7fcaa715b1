"""POST /v1/head_importance against a real server: the real MiniLM package (1 − cos of the
sentence embeddings) and the tiny cross-encoder (the change in score), each checked against a
direct loop over transformers with one head removed at a time by a pre-hook on W_O
(tests.fixtures.references.ablated_forward)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.references import ablated_forward

TEXT = "The cat sat on the mat because it was warm."
QUERY, DOC = "what is the capital of france", "Paris is the capital of France."


def loop_over_heads(model, inputs: dict, measure) -> np.ndarray:
    """[L, H]: measure(output with every head, output with head (l, h) removed)."""
    cfg = model.config
    n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
    full = ablated_forward(model, np.ones((1, n_layers, n_heads), np.float32), **inputs)
    out = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            mask = np.ones((1, n_layers, n_heads), np.float32)
            mask[0, layer, head] = 0
            out[layer, head] = measure(full, ablated_forward(model, mask, **inputs))
    return out


def test_an_embedding_models_heads_equal_the_loop_over_transformers(server):
    from transformers import AutoModel, AutoTokenizer

    from headwise.model.sentence import default_checkpoint

    ck = str(default_checkpoint())
    model, tok = AutoModel.from_pretrained(ck, attn_implementation="eager").eval(), AutoTokenizer.from_pretrained(ck)

    def embedding(out) -> np.ndarray:
        e = out.last_hidden_state[0].numpy().astype(np.float64).mean(0)
        return e / np.linalg.norm(e)

    want = loop_over_heads(model, dict(tok([TEXT], return_tensors="pt")),
                           lambda full, cut: 1 - float(embedding(full) @ embedding(cut)))
    r = server.post("/v1/head_importance", {"input": TEXT, "top_k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    t = len(body["tokens"])
    assert body["measure"] == "cosine" and body["baseline"] is None and body["shape"] == [6, 12]
    assert body["forward_passes"] == 73 and body["usage"] == {"prompt_tokens": t, "total_tokens": 73 * t}
    np.testing.assert_allclose(body["importance"], want, atol=1e-5)
    got = np.asarray(body["importance"])
    assert [(x["layer"], x["head"]) for x in body["top"]] == \
        [divmod(int(i), 12) for i in np.argsort(-got.ravel(), kind="stable")[:5]]


@pytest.fixture(scope="module")
def classifiers(start_server, classifier_packages):
    return start_server(classifier_packages["models"])


def test_a_cross_encoders_heads_equal_the_loop_over_transformers(classifiers, classifier_packages):
    from transformers import AutoTokenizer

    ckpt, ref = classifier_packages["tiny-reranker"]
    inputs = dict(AutoTokenizer.from_pretrained(str(ckpt))([QUERY], [DOC], return_tensors="pt"))
    sigmoid = lambda out: 1 / (1 + np.exp(-float(out.logits[0, 0])))  # noqa: E731
    for raw, score in ((False, sigmoid), (True, lambda out: float(out.logits[0, 0]))):
        want = loop_over_heads(ref.eval(), inputs, lambda full, cut, s=score: s(full) - s(cut))
        r = classifiers.post("/v1/head_importance", {"model": "tiny-reranker", "input": [QUERY, DOC],
                                                     "raw_scores": raw})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["measure"] == "score" and body["shape"] == [2, 2] and body["forward_passes"] == 5
        np.testing.assert_allclose(body["importance"], want, atol=1e-5)
        full = ablated_forward(ref.eval(), np.ones((1, 2, 2), np.float32), **inputs)
        assert abs(body["baseline"] - score(full)) < 1e-5


@pytest.mark.parametrize("body, status, words", [
    ({"model": "tiny-classifier", "input": "a text"}, 422, "or a re-ranker (a cross-encoder"),
    ({"model": "tiny-reranker", "input": ["a", "b", "c"]}, 422, "input"),
    ({"model": "tiny-reranker", "input": "x", "top_k": 0}, 422, "top_k"),
])
def test_bad_requests_are_4xx(classifiers, body, status, words):
    r = classifiers.post("/v1/head_importance", body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_a_pair_or_a_long_text_on_an_embedding_model_and_too_many_rows(server, start_server, default_package):
    r = server.post("/v1/head_importance", {"input": [QUERY, DOC]})
    assert r.status_code == 422 and "cross-encoder" in r.json()["error"]["message"]
    r = server.post("/v1/head_importance", {"input": "the cat " * 400, "truncate": False})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("input[0] has"), r.text
    small = start_server(default_package, env={"HEADWISE_MAX_CLIENT_BATCH": "64"})
    r = small.post("/v1/head_importance", {"input": TEXT})
    assert r.status_code == 413 and "73 forward passes" in r.json()["error"]["message"]
