"""Head drift on a real `headwise serve` with the real package (issue 30): with
HEADWISE_ATTENTION_SAMPLE=1 every plain /v1/embed request is sampled, /metrics carries the
two histograms for every (layer, head) of MiniLM (6 × 12), and what one request observed is
the entropy and special share numpy computes from /v1/embed's own attention for the same
text; with the default (0) none of the names is on /metrics."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

ENTROPY = "headwise_head_attention_entropy"
SHARE = "headwise_head_special_share"
TEXT = "The river bank was quiet before the storm reached the old harbour."
N_LAYERS, N_HEADS = 6, 12


def samples(metrics: str, name: str) -> dict[tuple[str, str], float]:
    """(layer, head) → value of `name` (a histogram's _sum or _count line)."""
    out = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", metrics, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(kv["layer"], kv["head"])] = float(value)
    return out


def measured(metrics: str) -> float:
    m = re.search(r'^headwise_head_samples_total\{model="[^"]+",outcome="measured"\} (\S+)$', metrics, re.M)
    return float(m.group(1)) if m else 0.0


def wait_measured(srv, n: int, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while True:
        metrics = srv.metrics()
        if measured(metrics) >= n or time.monotonic() > deadline:
            return metrics
        time.sleep(0.05)


@pytest.fixture(scope="module")
def sampled(start_server):
    srv = start_server(env={"HEADWISE_ATTENTION_SAMPLE": "1", "HEADWISE_PRECISION": "fp32"})
    yield srv
    srv.stop()


def test_every_head_observed_and_equal_to_numpy_on_the_requests_attention(sampled):
    r = sampled.post("/v1/embed", json={"inputs": TEXT})
    assert r.status_code == 200, r.text
    metrics = wait_measured(sampled, 1)
    assert measured(metrics) == 1, sampled.log_tail()
    counts = samples(metrics, ENTROPY + "_count")
    assert set(counts) == {(str(layer), str(head)) for layer in range(N_LAYERS) for head in range(N_HEADS)}
    assert set(counts.values()) == {1.0}
    assert set(samples(metrics, SHARE + "_count").values()) == {1.0}
    entropy, share = samples(metrics, ENTROPY + "_sum"), samples(metrics, SHARE + "_sum")

    # The same text asking for its attention: not a plain request, so not sampled itself.
    body = sampled.post("/v1/embed", json={"inputs": TEXT, "attention": {}}).json()["data"][0]
    att = body["attention"]
    w = np.asarray(att["data"], dtype=np.float64)  # [L, H, T, T], dense float32 as JSON
    t = w.shape[-1]
    assert w.shape == (N_LAYERS, N_HEADS, t, t) and body["tokens"][0] == "[CLS]" and body["tokens"][-1] == "[SEP]"
    plogp = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)
    want_entropy = np.clip(-plogp.sum(-1).mean(-1) / np.log(t), 0, 1)  # [L, H]
    want_share = (w[..., 0] + w[..., t - 1]).mean(-1)
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            key = (str(layer), str(head))
            assert entropy[key] == pytest.approx(want_entropy[layer, head], abs=1e-5), key
            assert share[key] == pytest.approx(want_share[layer, head], abs=1e-5), key
    assert measured(sampled.metrics()) == 1


def test_each_plain_request_adds_its_inputs(sampled):
    before = samples(sampled.metrics(), ENTROPY + "_count")[("0", "0")]
    done = measured(sampled.metrics())
    r = sampled.post("/v1/embed", json={"inputs": ["a first sentence", "and a second, longer sentence here"]})
    assert r.status_code == 200
    assert sampled.post("/v1/embeddings", json={"input": "an OpenAI-shaped request"}).status_code == 200
    metrics = wait_measured(sampled, done + 2)
    assert measured(metrics) == done + 2
    assert samples(metrics, ENTROPY + "_count")[("5", "11")] == before + 3
    buckets = re.findall(rf'^{ENTROPY}_bucket\{{head="0",layer="0",le="([^"]+)"', metrics, re.M)
    assert buckets[:2] == ["0.05", "0.1"] and buckets[-2:] == ["1.0", "+Inf"] and len(buckets) == 21


def test_sampling_off_by_default_the_names_are_absent(server):
    assert server.post("/v1/embed", json={"inputs": TEXT}).status_code == 200
    metrics = server.metrics()
    assert "headwise_model_info" in metrics
    for name in (ENTROPY, SHARE, "headwise_head_samples_total"):
        assert name not in metrics
