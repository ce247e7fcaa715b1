"""The new encoder families served by a real `headwise serve` (fp32, CPU), each exported by the
real pipeline from a tiny random checkpoint saved by sentence-transformers (issue 38):

- /v1/embed answers equal `SentenceTransformer.encode` for texts of different lengths in one
  request (XLM-R, MPNet, DistilBERT, ModernBERT, Qwen3);
- Qwen3's last-token pooling answers each text as it answers it alone (batch invariance), and
  TEI's `normalize: false` gives the vector before sentence-transformers' Normalize;
- per-head attention: one map per query head under GQA, nothing above the diagonal of the
  causal model, rows that sum to 1;
- an XLM-R cross-encoder reranks as sentence-transformers' CrossEncoder scores.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.families import CLASSIFIERS, EMBEDDERS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

FAMILIES = ("xlm-roberta", "mpnet", "distilbert", "modernbert", "qwen3")
TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "a",
         "attention heads look at tokens, one two three!"]
RERANKER = "xlmr-reranker"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """family → (checkpoint, SentenceTransformer); the packages in one models folder."""
    from headwise.export.package import build_package

    root, models = tmp_path_factory.mktemp("families"), tmp_path_factory.mktemp("family-models")
    refs = {}
    for family in FAMILIES:
        ckpt, st = EMBEDDERS[family](root / family)
        build_package(ckpt, models, family, int8=False, fp16=False, quality=False, progress=lambda m: None)
        refs[family] = (ckpt, st)
    ce_dir, _ = CLASSIFIERS["xlm-roberta"](root / "ce", 1)
    build_package(ce_dir, models, RERANKER, int8=False, fp16=False, quality=False, progress=lambda m: None)
    refs[RERANKER] = (ce_dir, None)
    return refs, models


@pytest.fixture(scope="module")
def srv(start_server, built):
    return start_server(built[1], env={"HEADWISE_PRECISION": "fp32"})


def embed(srv, model: str, texts: list[str], **extra) -> list[dict]:
    r = srv.post("/v1/embed", {"model": model, "inputs": texts, **extra})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("family", FAMILIES)
def test_embeddings_equal_sentence_transformers(srv, built, family):
    st = built[0][family][1]
    got = [d["embedding"] for d in embed(srv, family, TEXTS)]
    want = st.encode(TEXTS, convert_to_numpy=True)
    assert cosines(got, want).min() >= 0.999999
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_last_token_pooling_is_batch_invariant_and_unnormalised_on_request(srv, built):
    together = np.array([d["embedding"] for d in embed(srv, "qwen3", TEXTS)])
    alone = np.array([embed(srv, "qwen3", [t])[0]["embedding"] for t in TEXTS])
    assert np.abs(together - alone).max() <= 1e-6
    from sentence_transformers import SentenceTransformer

    st = built[0]["qwen3"][1]
    before_normalize = SentenceTransformer(modules=list(st)[:-1], device="cpu").encode(TEXTS, convert_to_numpy=True)
    r = srv.post("/embed", {"model": "qwen3", "inputs": TEXTS, "normalize": False})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json(), before_normalize, rtol=1e-4, atol=1e-5)


def test_per_head_attention_of_the_causal_gqa_model(srv):
    [d] = embed(srv, "qwen3", [TEXTS[1]], attention={"layers": [0, 1]})
    a = np.array(d["attention"]["data"])  # [L, H, T, T]
    assert a.shape[:2] == (2, 4)  # one map per query head (4 over 2 key/value heads)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
    assert np.abs(np.triu(a, k=1)).max() == 0.0  # causal: no token looks ahead


def test_the_xlmr_cross_encoder_reranks_as_sentence_transformers(srv, built):
    from sentence_transformers import CrossEncoder

    query, docs = "where is the cat", ["the cat sat on the mat", "a dog", "hello world"]
    r = srv.post("/v1/rerank", {"model": RERANKER, "query": query, "texts": docs})
    assert r.status_code == 200, r.text
    want = CrossEncoder(str(built[0][RERANKER][0]), device="cpu").predict([(query, d) for d in docs])
    got = {x["index"]: x["score"] for x in r.json()["results"]}
    assert [x["index"] for x in r.json()["results"]] == list(np.argsort(-want, kind="stable"))
    assert all(abs(got[i] - float(want[i])) < 1e-5 for i in range(len(docs)))


@pytest.mark.parametrize("family", ["qwen3", "modernbert", "mpnet"])
def test_hidden_states_ablation_head_importance_and_occlusion_on_each_family(srv, built, family):
    import torch

    st = built[0][family][1]
    text = TEXTS[1]
    [d] = embed(srv, family, [text], hidden_states={})
    served = np.array(d["hidden_states"]["data"])  # [n_layers + 1, T, d_model]
    tok = st.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        want = st[0].auto_model(**tok, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(served, torch.stack(want)[:, 0].numpy(), atol=1e-4)

    plain, ablated = embed(srv, family, [text])[0], embed(srv, family, [text], ablate={"0": [0]})[0]
    assert np.abs(np.subtract(plain["embedding"], ablated["embedding"])).max() > 1e-6  # the head mattered

    r = srv.post("/v1/head_importance", {"model": family, "input": text})
    assert r.status_code == 200, r.text
    body = r.json()
    n_layers, n_heads = body["shape"]
    assert n_layers == len(want) - 1 and body["forward_passes"] == n_layers * n_heads + 1
    assert np.isfinite(body["importance"]).all() and np.max(body["importance"]) > 0

    r = srv.post("/v1/occlusion", {"model": family, "input": text, "unit": "word"})
    assert r.status_code == 200, r.text
    units = r.json()["units"]
    assert len(units) == len(text.split()) and all(np.isfinite(u["effect"]) for u in units)
