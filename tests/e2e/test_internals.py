"""Hidden states and head ablation on POST /v1/embed, against a real server and the real
MiniLM package, checked against transformers: `output_hidden_states`, and heads removed by a
forward pre-hook on each layer's W_O (tests.fixtures.references.ablated_forward)."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.fixtures.metrics import total
from tests.fixtures.references import ablated_forward

TEXTS = ["Attention is all you need.", "The cat sat on the mat, unbelievably calmly."]


@pytest.fixture(scope="module")
def hf():
    """The checkpoint the package was exported from, in transformers, and its tokenizer."""
    from transformers import AutoModel, AutoTokenizer

    from headwise.model.sentence import default_checkpoint

    ck = str(default_checkpoint())
    return AutoModel.from_pretrained(ck, attn_implementation="eager").eval(), AutoTokenizer.from_pretrained(ck)


def reference(hf, texts, head_mask=None):
    """Per text: its hidden states [L + 1, T, D] and its mean-pooled, normalised embedding."""
    model, tok = hf
    cfg = model.config
    out = []
    for text in texts:
        b = tok([text], return_tensors="pt")
        mask = np.ones((1, cfg.num_hidden_layers, cfg.num_attention_heads), np.float32) if head_mask is None \
            else head_mask[None]
        r = ablated_forward(model, mask, **b)
        states = np.stack([h[0].numpy() for h in r.hidden_states])  # (L + 1, T, D)
        e = states[-1].mean(0, dtype=np.float64)
        out.append((states, (e / np.linalg.norm(e)).astype(np.float32)))
    return out


def decoded(h: dict) -> np.ndarray:
    if h["encoding"] == "base64":
        dtype = {"float32": "<f4", "float16": "<f2"}[h["dtype"]]
        return np.frombuffer(base64.b64decode(h["data"]), dtype=dtype).reshape(h["shape"]).astype(np.float32)
    return np.asarray(h["data"], dtype=np.float32).reshape(h["shape"])


def embed(server, **body):
    r = server.post("/v1/embed", {"inputs": TEXTS, **body})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_every_layer_equals_transformers_output_hidden_states(server, hf):
    data = embed(server, hidden_states={})
    for item, (states, _) in zip(data, reference(hf, TEXTS), strict=True):
        h = item["hidden_states"]
        assert h["layers"] == list(range(7)) and h["pooling"] == "none" and h["shape"] == list(states.shape)
        np.testing.assert_allclose(decoded(h), states, atol=1e-5, rtol=0)


def test_chosen_layers_pooled_and_encoded(server, hf):
    ref = reference(hf, TEXTS)
    for pooling, dtype, encoding in (("mean", "float32", "base64"), ("cls", "float16", "base64"),
                                     ("mean", "float16", "json")):
        data = embed(server, hidden_states={"layers": [6, 0, 3], "pooling": pooling, "dtype": dtype,
                                            "encoding": encoding})
        for item, (states, _) in zip(data, ref, strict=True):
            h = item["hidden_states"]
            chosen = states[[6, 0, 3]]
            want = chosen.mean(1) if pooling == "mean" else chosen[:, 0]
            assert h["shape"] == [3, 384] and h["layers"] == [6, 0, 3]
            tol = 1e-5 if dtype == "float32" else 2e-3 * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(decoded(h), want, atol=tol, rtol=0 if dtype == "float32" else 1e-3)


def test_the_plain_answer_does_not_move_when_hidden_states_are_asked(server):
    plain = embed(server)
    with_states = embed(server, hidden_states={"layers": [6], "pooling": "cls"})
    for a, b in zip(plain, with_states, strict=True):
        np.testing.assert_allclose(b["embedding"], a["embedding"], atol=1e-6)


def test_ablation_equals_transformers_with_a_pre_hook_on_w_o(server, hf):
    cfg = hf[0].config
    ablate = {"0": [1, 2], "3": list(range(12)), "5": [7]}
    mask = np.ones((cfg.num_hidden_layers, cfg.num_attention_heads), np.float32)
    for layer, heads in ablate.items():
        mask[int(layer), heads] = 0
    data = embed(server, ablate=ablate, hidden_states={"layers": [4]})
    plain = embed(server)
    for item, before, (states, e) in zip(data, plain, reference(hf, TEXTS, mask), strict=True):
        np.testing.assert_allclose(item["embedding"], e, atol=1e-5, rtol=0)
        np.testing.assert_allclose(decoded(item["hidden_states"]), states[[4]], atol=1e-5, rtol=0)
        assert 1 - float(np.dot(item["embedding"], before["embedding"])) > 1e-4  # the heads mattered


def test_ablated_inputs_never_share_a_batch_with_plain_ones(server):
    """Ablated requests run in batches of their own (the analysis variant's): sent at the same
    time as plain ones, every ablated input is counted in an analysis batch and every plain
    input in a fast one, and the plain answers are those sent alone (within the fast graph's
    own batch invariance)."""
    alone = [np.asarray(server.post("/v1/embed", {"inputs": t}).json()["data"][0]["embedding"]) for t in TEXTS]

    def inputs_run(variant: str) -> float:
        return total(server.get("/metrics").text, "headwise_batch_size_sum", variant=variant)

    before = {v: inputs_run(v) for v in ("fast", "analysis")}

    def plain(i):
        return np.asarray(server.post("/v1/embed", {"inputs": TEXTS[i % 2]}).json()["data"][0]["embedding"]), i % 2

    def ablated(i):
        return server.post("/v1/embed", {"inputs": TEXTS[i % 2], "ablate": {str(i % 6): [i % 12]}}).status_code

    with ThreadPoolExecutor(16) as pool:
        plains = [pool.submit(plain, i) for i in range(48)]
        codes = [pool.submit(ablated, i) for i in range(48)]
        assert {c.result() for c in codes} == {200}
        for f in plains:
            got, which = f.result()
            np.testing.assert_allclose(got, alone[which], atol=1e-6, rtol=0)
    assert inputs_run("fast") - before["fast"] == 48
    assert inputs_run("analysis") - before["analysis"] == 48


@pytest.mark.parametrize("body, field", [
    ({"hidden_states": {"layers": [7]}}, "hidden_states.layers"),
    ({"hidden_states": {"layers": []}}, "hidden_states.layers"),
    ({"hidden_states": {"layers": [1, 1]}}, "hidden_states.layers"),
    ({"hidden_states": {"pooling": "max"}}, "hidden_states.pooling"),
    ({"ablate": {"6": [0]}}, "ablate.6"),
    ({"ablate": {"2": [12]}}, "ablate.2"),
    ({"ablate": {"2": []}}, "ablate.2"),
    ({"ablate": {"x": [0]}}, "ablate.x"),
    ({"ablate": {"02": [0], "2": [1]}}, "ablate.2"),
])
def test_bad_indices_are_a_422_naming_the_field(server, body, field):
    r = server.post("/v1/embed", {"inputs": "hello", **body})
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["message"]


def test_hidden_states_over_the_response_budget_are_refused_before_inference(server):
    long = "attention " * 300
    r = server.post("/v1/embed", {"inputs": [long] * 32, "hidden_states": {}})
    assert r.status_code == 413, r.text
    assert "hidden states" in r.json()["error"]["message"]


# -- /v1/rerank and /v1/predict with heads removed (the tiny cross-encoder and classifier) -------

QUERY, DOCS = "what is the capital of france", ["Paris is the capital of France.", "Berlin is in Germany."]
ABLATE = {"0": [1], "1": [0]}


@pytest.fixture(scope="module")
def classifiers(start_server, classifier_packages):
    return start_server(classifier_packages["models"])


def hf_logits(classifier_packages, name, pairs, mask):
    from transformers import AutoTokenizer

    ckpt, ref = classifier_packages[name]
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    b = tok([a for a, _ in pairs], [d for _, d in pairs], return_tensors="pt", padding=True)
    head_mask = np.repeat(mask[None], len(pairs), axis=0)
    return ablated_forward(ref.eval(), head_mask, **b).logits.numpy()


def head_mask_of(ablate: dict, n_layers: int = 2, n_heads: int = 2) -> np.ndarray:
    m = np.ones((n_layers, n_heads), np.float32)
    for layer, heads in ablate.items():
        m[int(layer), heads] = 0
    return m


def test_rerank_and_predict_with_heads_removed_equal_transformers(classifiers, classifier_packages):
    mask = head_mask_of(ABLATE)
    pairs = [(QUERY, d) for d in DOCS]
    r = classifiers.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS, "raw_scores": True,
                                        "ablate": ABLATE})
    assert r.status_code == 200, r.text
    want = hf_logits(classifier_packages, "tiny-reranker", pairs, mask)[:, 0]
    for x in r.json()["results"]:
        assert abs(x["score"] - float(want[x["index"]])) < 1e-5
    plain = classifiers.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS,
                                            "raw_scores": True}).json()["results"]
    assert {x["index"]: x["score"] for x in plain} != {x["index"]: x["score"] for x in r.json()["results"]}
    p = classifiers.post("/v1/predict", {"model": "tiny-classifier", "inputs": [list(pair) for pair in pairs],
                                         "raw_scores": True, "ablate": ABLATE})
    assert p.status_code == 200, p.text
    want = hf_logits(classifier_packages, "tiny-classifier", pairs, mask)
    labels = classifier_packages["tiny-classifier"][1].config.id2label
    for row, logits in zip(p.json()["data"], want, strict=True):
        got = {x["label"]: x["score"] for x in row}
        for i, v in enumerate(logits):
            assert abs(got[labels[i]] - float(v)) < 1e-5


def test_rerank_ablate_names_the_field(classifiers):
    r = classifiers.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS, "ablate": {"2": [0]}})
    assert r.status_code == 422 and "ablate.2" in r.json()["error"]["message"]


HOSTILE_KEYS = ["²", "①", "٣", "３", "+1", "1_0", " 1", "9" * 5000]  # isdigit()/int() disagree on each


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_an_ablate_key_other_than_ascii_digits_is_a_422_naming_it_on_every_route(server, classifiers, key):
    """Issue 40, item 1: "²" and a 5,000-digit key were a 500 (int() after isdigit()), "٣" and
    "３" were layer 3. Each is a 422 in the native shape naming `ablate.<key>` (its first 40
    characters), on /v1/embed, /v1/rerank and /v1/predict."""
    shown = key if len(key) <= 40 else key[:40] + "…"
    answers = [server.post("/v1/embed", {"inputs": "hello", "ablate": {key: [0]}}),
               classifiers.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS,
                                               "ablate": {key: [0]}}),
               classifiers.post("/v1/predict", {"model": "tiny-classifier", "inputs": "hello", "ablate": {key: [0]}})]
    for r in answers:
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["type"] == "validation" and f"ablate.{shown}" in err["message"], err
