"""Attention analytics through a real `headwise serve` process on the real all-MiniLM-L6-v2
package: attention.aggregate (head mean, rollout) on /v1/embed and KServe, POST /v1/similarity
(with explain), POST /v1/occlusion. Every number is checked against a numpy reference computed
from what the same server returns un-aggregated (or, for occlusion, from transformers)."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from tests.fixtures.metrics import total
from tests.fixtures.references import occlusion_effects, reference_rollout

TEXT = "Attention rollout tracks how information flows from the input tokens to the last layer."
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 14)  # 128 tokens or so
BUDGET = 1 << 20  # 1 MiB: a 128-token input's per-head attention is 4.7 MB, its rollout 64 KiB
MAX_CLIENT_BATCH = 64


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_ATTENTION_BUDGET_BYTES": str(BUDGET),
                             "HEADWISE_MAX_CLIENT_BATCH": str(MAX_CLIENT_BATCH)})


def embed(srv, inputs, **kw) -> list[dict]:
    r = srv.post("/v1/embed", {"inputs": inputs, **kw})
    assert r.status_code == 200, r.text
    return r.json()["data"]


# -- attention.aggregate ------------------------------------------------------------------

@pytest.mark.parametrize("layers, heads", [(None, None), ([4, 1, 2], [0, 7])])
def test_mean_and_rollout_equal_references_from_the_same_requests_heads(srv, layers, heads):
    sel = {"layers": layers, "heads": heads}
    texts = [TEXT, "a short one"]
    per_head = [np.array(d["attention"]["data"]) for d in embed(srv, texts, attention=sel)]
    means = embed(srv, texts, attention={**sel, "aggregate": "mean"})
    rolls = embed(srv, texts, attention={**sel, "aggregate": "rollout"})
    for a, m, r in zip(per_head, means, rolls, strict=True):
        t = a.shape[-1]
        assert m["attention"]["shape"] == [a.shape[0], t, t] and r["attention"]["shape"] == [t, t]
        np.testing.assert_allclose(m["attention"]["data"], a.mean(axis=1), atol=1e-5)
        order = np.argsort(layers) if layers else np.arange(6)
        np.testing.assert_allclose(r["attention"]["data"], reference_rollout(a[order]), atol=1e-5)
        assert r["attention"]["aggregate"] == "rollout" and r["attention"]["heads"] == (heads or list(range(12)))


def test_aggregates_take_dtype_encoding_and_topk(srv):
    full = np.array(embed(srv, TEXT, attention={"aggregate": "rollout"})[0]["attention"]["data"], np.float32)
    a = embed(srv, TEXT, attention={"aggregate": "rollout", "dtype": "float16", "encoding": "base64"})[0]["attention"]
    got = np.frombuffer(base64.b64decode(a["data"]), "<f2").reshape(a["shape"])
    np.testing.assert_array_equal(got, full.astype(np.float16))
    k = embed(srv, TEXT, attention={"aggregate": "rollout", "format": "topk", "top_k": 3})[0]["attention"]
    assert k["shape"] == [full.shape[0], 3]
    np.testing.assert_allclose(k["data"]["values"], np.sort(full, -1)[:, ::-1][:, :3], atol=1e-7)


def test_the_budget_counts_the_aggregate(srv):
    r = srv.post("/v1/embed", {"inputs": LONG, "attention": {}})
    assert r.status_code == 413 and "budget" in r.json()["error"]["message"]
    d = embed(srv, LONG, attention={"aggregate": "rollout"})[0]
    assert d["attention"]["shape"][0] > 100


def test_aggregated_requests_are_counted(srv):
    before = total(srv.metrics(), "headwise_attention_aggregate_requests_total",
                     model="all-minilm-l6-v2", aggregate="mean")
    embed(srv, [TEXT, "two"], attention={"aggregate": "mean"})
    after = total(srv.metrics(), "headwise_attention_aggregate_requests_total",
                    model="all-minilm-l6-v2", aggregate="mean")
    assert after == before + 1


def test_kserve_attention_aggregate_parameter(srv):
    texts = [TEXT, "a short one"]
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": texts}],
            "outputs": [{"name": "attentions"}, {"name": "attention_mask"}],
            "parameters": {"attention_aggregate": "rollout", "attention_layers": "0,3"}}
    r = srv.post("/v2/models/all-minilm-l6-v2/infer", body)
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    att = np.array(outs["attentions"]["data"], np.float32).reshape(outs["attentions"]["shape"])
    mask = np.array(outs["attention_mask"]["data"]).reshape(outs["attention_mask"]["shape"])
    ref = embed(srv, texts, attention={"layers": [0, 3], "aggregate": "rollout"})
    assert att.shape == (2, mask.shape[1], mask.shape[1])
    for i, d in enumerate(ref):
        n = int(mask[i].sum())
        np.testing.assert_array_equal(att[i, :n, :n], np.array(d["attention"]["data"], np.float32))
        assert not att[i, n:].any() and not att[i, :, n:].any()
    body["parameters"]["attention_aggregate"] = "max"
    bad = srv.post("/v2/models/all-minilm-l6-v2/infer", body)
    assert bad.status_code == 400 and "attention_aggregate" in bad.json()["error"]


# -- POST /v1/similarity --------------------------------------------------------------------

SOURCE = "A man is playing a guitar on stage."
TARGETS = ["Someone performs music for a crowd.", "The stock market fell sharply today.", "guitar"]


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_scores_are_the_cosines_of_embed_embeddings(srv):
    r = srv.post("/v1/similarity", {"source": SOURCE, "targets": TARGETS})
    assert r.status_code == 200, r.text
    body = r.json()
    emb = [d["embedding"] for d in embed(srv, [SOURCE, *TARGETS])]
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    for d, e in zip(body["data"], emb[1:], strict=True):
        assert d["score"] == pytest.approx(cos(emb[0], e), abs=1e-6)
        assert set(d) == {"index", "score"}
    assert body["data"][0]["score"] > body["data"][1]["score"]


def test_explained_contributions_sum_to_the_score(srv):
    r = srv.post("/v1/similarity", {"source": SOURCE, "targets": TARGETS, "explain": True, "top_k": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    src = body["source"]
    plain = srv.post("/v1/similarity", {"source": SOURCE, "targets": TARGETS}).json()["data"]
    hs = np.array(embed(srv, SOURCE, output="tokens")[0]["embedding"], np.float64)
    for d, p, text in zip(body["data"], plain, TARGETS, strict=True):
        c = np.array(d["contributions"], np.float64)
        assert c.shape == (len(src["tokens"]), len(d["tokens"]))
        assert d["score"] == p["score"]
        assert c.sum() == pytest.approx(d["score"], abs=1e-5)
        # C_ij = h_i·g_j / (T_s T_t ‖u‖ ‖v‖), from /v1/embed's own token states
        ht = np.array(embed(srv, text, output="tokens")[0]["embedding"], np.float64)
        u, v = hs.mean(0), ht.mean(0)
        ref = hs @ ht.T / (len(hs) * len(ht) * np.linalg.norm(u) * np.linalg.norm(v))
        np.testing.assert_allclose(c, ref, atol=1e-5)
        assert len(d["top_pairs"]) == 4
        best = sorted(((i, j) for i in range(c.shape[0]) for j in range(c.shape[1])), key=lambda ij: -c[ij])[0]
        assert (d["top_pairs"][0]["source"], d["top_pairs"][0]["target"]) == best
        assert d["tokens"][0] == "[CLS]" and len(d["offsets"]) == len(d["tokens"])


def test_similarity_limits(srv):
    assert srv.post("/v1/similarity", {"source": "a", "targets": []}).status_code == 400
    many = srv.post("/v1/similarity", {"source": "a", "targets": ["b"] * MAX_CLIENT_BATCH})
    assert many.status_code == 413 and f"at most {MAX_CLIENT_BATCH}" in many.json()["error"]["message"]
    assert srv.post("/v1/similarity", {"source": "a", "targets": ["b"], "top_k": 0}).status_code == 422
    long = srv.post("/v1/similarity", {"source": LONG * 3, "targets": ["b"], "truncate": False})
    assert long.status_code == 422


def test_explain_is_refused_for_cls_pooling(start_server, default_package, tmp_path):
    import json
    import shutil

    pkg = tmp_path / "cls-model"
    shutil.copytree(default_package, pkg)
    m = json.loads((pkg / "manifest.json").read_text())
    m.update(name="cls-model", pooling="cls")
    (pkg / "manifest.json").write_text(json.dumps(m))
    s = start_server(models=pkg, env={"HEADWISE_PRECISION": "fp32"})
    try:
        assert s.post("/v1/similarity", {"source": "a", "targets": ["b"]}).status_code == 200
        r = s.post("/v1/similarity", {"source": "a", "targets": ["b"], "explain": True})
        assert r.status_code == 422 and "mean pooling" in r.json()["error"]["message"]
    finally:
        s.stop()


def test_similarity_is_counted(srv):
    labels = {"model": "all-minilm-l6-v2", "analytic": "similarity_explain"}
    before = total(srv.metrics(), "headwise_analytics_requests_total", **labels)
    srv.post("/v1/similarity", {"source": "a", "targets": ["b"], "explain": True})
    assert total(srv.metrics(), "headwise_analytics_requests_total", **labels) == before + 1


# -- POST /v1/occlusion ---------------------------------------------------------------------

def batch_inputs(metrics: str, variant: str) -> float:
    return total(metrics, "headwise_batch_size_sum", model="all-minilm-l6-v2", variant=variant)


def test_occlusion_equals_transformers_and_goes_through_the_batcher(srv):
    from transformers import AutoModel

    from headwise.model.sentence import default_checkpoint

    text = "The cat sat on the mat because it was warm."
    ids = srv.post("/v1/tokenize", {"inputs": text}).json()["data"][0]["ids"]
    before = batch_inputs(srv.metrics(), "analysis")
    r = srv.post("/v1/occlusion", {"input": text})
    assert r.status_code == 200, r.text
    body = r.json()
    t = len(ids)
    assert len(body["tokens"]) == t == len(body["effects"]) and body["forward_passes"] == t + 1
    model = AutoModel.from_pretrained(str(default_checkpoint())).eval()
    want = occlusion_effects(model, ids, [[i] for i in range(t)])
    np.testing.assert_allclose(body["effects"], want, atol=1e-5)
    # the T + 1 rows were batched by the analytics batcher, on the analysis graph (the fused
    # fast graph reads attention_mask as lengths, so it cannot mask a position inside)
    assert batch_inputs(srv.metrics(), "analysis") == before + t + 1
    assert max(body["effects"]) > 0


def test_occlusion_over_the_client_batch_is_refused(srv):
    r = srv.post("/v1/occlusion", {"input": LONG})
    assert r.status_code == 413 and "forward passes" in r.json()["error"]["message"]


SELF_TEXTS = ["The cat sat on the mat.", "Attention is all you need", "a", "hello world", TEXT,
              "Paris is the capital of France.", "the quick brown fox", "naïve café 東京", "1 2 3 4 5", "?"]


def test_a_text_against_itself_scores_at_most_one(server):
    """Issue 40, item 7: a text's cosine with itself came out 1.0000000000000002 (math.acos
    refuses it). Held to [-1, 1] on /v1/similarity (with and without explain), TEI's /similarity,
    and occlusion's effects are never below 0."""
    for explain in (False, True):
        for t in SELF_TEXTS:
            r = server.post("/v1/similarity", {"source": t, "targets": [t, t.upper()], "explain": explain})
            assert r.status_code == 200, r.text
            for d in r.json()["data"]:
                assert -1.0 <= d["score"] <= 1.0 and math.acos(d["score"]) >= 0, d["score"]
    r = server.post("/similarity", {"inputs": {"source_sentence": TEXT, "sentences": [*SELF_TEXTS, TEXT]}})
    assert r.status_code == 200, r.text
    assert all(-1.0 <= s <= 1.0 for s in r.json()) and r.json()[-1] == pytest.approx(1.0, abs=1e-6)
    r = server.post("/v1/occlusion", {"input": TEXT})
    assert r.status_code == 200 and min(r.json()["effects"]) >= 0.0, r.text
