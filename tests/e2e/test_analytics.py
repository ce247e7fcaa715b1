"""Attention analytics through a real `headwise serve` process on the real all-MiniLM-L6-v2
package: attention.aggregate (head mean, rollout) on /v1/embed and KServe, POST /v1/similarity
(with explain), POST /v1/occlusion. Every number is checked against a numpy reference computed
from what the same server returns un-aggregated (or, for occlusion, from onnxruntime directly)."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

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


def counter(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return 0.0


def reference_rollout(per_head: np.ndarray) -> np.ndarray:
    r = np.eye(per_head.shape[-1])
    for layer in per_head.astype(np.float64):
        a = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(layer.shape[-1])
        r = (a / a.sum(-1, keepdims=True)) @ r
    return r


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
    before = counter(srv.metrics(), "headwise_attention_aggregate_requests_total",
                     model="all-minilm-l6-v2", aggregate="mean")
    embed(srv, [TEXT, "two"], attention={"aggregate": "mean"})
    after = counter(srv.metrics(), "headwise_attention_aggregate_requests_total",
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
