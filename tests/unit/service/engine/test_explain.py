"""/v1/similarity and /v1/occlusion in-process with the fake backend: scores are /v1/embed's
cosines, explained contributions sum to them, occlusion masks one position per row through the
embed batcher (and pools without it, in the graph or here)."""

import json
from typing import ClassVar

import numpy as np
import pytest

from tests.unit.fakes import (
    FakeBackend,
    assert_error,
    client_for,
    fake_hidden,
    make_package,
    wait_ready,
)


class MaskRecorder(FakeBackend):
    masks: ClassVar[list] = []  # (role, attention_mask) of every run

    def run(self, role, feeds, outputs):
        MaskRecorder.masks.append((role, feeds["attention_mask"].copy()))
        return super().run(role, feeds, outputs)


def app(tmp_path, normalize=True, pooling="mean", **settings):
    pkg = make_package(tmp_path / "models", normalize=normalize)
    if pooling != "mean":
        m = json.loads((pkg / "manifest.json").read_text())
        m["pooling"] = pooling
        (pkg / "manifest.json").write_text(json.dumps(m))
    client = client_for(pkg, backend=MaskRecorder, **settings)
    return client


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / n) if n else 0.0


def test_similarity_scores_and_explained_contributions(tmp_path):
    with app(tmp_path) as c:
        wait_ready(c)
        MaskRecorder.masks = []  # not warm-up's
        targets = ["the dog sat", "a quick brown fox", "mat"]
        emb = [d["embedding"] for d in c.post("/v1/embed", json={"inputs": ["the cat sat on the mat", *targets]}).json()["data"]]
        r = c.post("/v1/similarity", json={"source": "the cat sat on the mat", "targets": targets, "explain": True,
                                           "top_k": 3})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["source"]["tokens"][0] == "[CLS]"
        for d, e in zip(body["data"], emb[1:], strict=True):
            assert d["score"] == pytest.approx(cos(emb[0], e), abs=1e-6)
            assert np.sum(d["contributions"], dtype=np.float64) == pytest.approx(d["score"], abs=1e-5)
            assert [p["value"] for p in d["top_pairs"]] == sorted((p["value"] for p in d["top_pairs"]), reverse=True)
        # every row ran on the embed variant
        assert {role for role, _ in MaskRecorder.masks} == {"embed"}


def test_explain_needs_mean_pooling(tmp_path):
    with app(tmp_path, pooling="cls") as c:
        wait_ready(c)
        assert c.post("/v1/similarity", json={"source": "a", "targets": ["b"]}).status_code == 200
        err = assert_error(c.post("/v1/similarity", json={"source": "a", "targets": ["b"], "explain": True}),
                           422, "validation")
        assert "mean pooling" in err["message"] and "cls" in err["message"]


@pytest.mark.parametrize("normalize", [True, False])
def test_occlusion_masks_each_position_once(tmp_path, normalize):
    """normalize False: the package's pooled output is not what is asked (normalize true), so
    the engine pools last_hidden_state itself, and must leave the masked position out too."""
    with app(tmp_path, normalize=normalize, max_batch_size=3) as c:
        wait_ready(c)
        MaskRecorder.masks = []  # not warm-up's
        tok = c.post("/v1/tokenize", json={"inputs": "the cat sat on the mat"}).json()["data"][0]
        r = c.post("/v1/occlusion", json={"input": "the cat sat on the mat"})
        assert r.status_code == 200, r.text
        body = r.json()
        t = len(tok["ids"])
        masks = np.concatenate([m for _, m in MaskRecorder.masks])
        assert len(masks) == t + 1 and body["forward_passes"] == t + 1
        assert sorted(int(m.sum()) for m in masks) == [t - 1] * t + [t]
        h = fake_hidden(np.array([tok["ids"]]))[0].astype(np.float64)
        full = h.mean(0)
        want = [1 - cos(full, np.delete(h, i, 0).mean(0)) for i in range(t)]
        np.testing.assert_allclose(body["effects"], want, atol=1e-6)


def test_occlusion_and_similarity_limits(tmp_path):
    with app(tmp_path, max_client_batch=5, max_queue=5) as c:
        wait_ready(c)
        err = assert_error(c.post("/v1/occlusion", json={"input": "the cat sat on the mat"}), 413, "too_large")
        assert "forward passes" in err["message"]
        assert_error(c.post("/v1/similarity", json={"source": "a", "targets": []}), 400, "invalid_request")
        assert_error(c.post("/v1/similarity", json={"source": "a", "targets": ["b"] * 5}), 413, "too_large")
        assert_error(c.post("/v1/similarity", json={"source": "a", "targets": ["b"], "top_k": 0}), 422, "validation")
        assert_error(c.post("/v1/occlusion", json={"inputs": "a"}), 422, "validation")


def test_the_response_bound_counts_the_matrices(tmp_path):
    with app(tmp_path, max_response_bytes=5_000, max_inflight_response_bytes=5_000) as c:
        wait_ready(c)
        text = " ".join(["the cat sat on the mat"] * 4)
        assert c.post("/v1/similarity", json={"source": text, "targets": [text]}).status_code == 200
        err = assert_error(c.post("/v1/similarity", json={"source": text, "targets": [text], "explain": True}),
                           413, "too_large")
        assert "HEADWISE_MAX_RESPONSE_BYTES" in err["message"]


def test_the_response_bound_holds_the_envelope(tmp_path):
    from headwise.service.api.sizes import JSON
    from headwise.service.engine.analytics.explain import similarity_size

    with app(tmp_path) as c:
        wait_ready(c)
        for body in ({"source": "a", "targets": ["b"]}, {"source": "the cat", "targets": ["a dog"], "explain": True},
                     {"source": "a", "targets": ["b", "the cat sat on the mat"], "explain": True, "top_k": 1}):
            r = c.post("/v1/similarity", json=body)
            got = r.json()
            targets = [len(d["tokens"]) for d in got["data"]] if "source" in got else [3] * len(body["targets"])
            source = len(got["source"]["tokens"]) if "source" in got else 3
            bound = JSON.bytes(similarity_size(got["model"], source, targets, body.get("explain", False),
                                               body.get("top_k", 10)))
            assert len(r.content) <= bound, (body, len(r.content), bound)


class LaneRecorder(MaskRecorder):
    """A backend with an analytics session of its own, as OrtBackend opens on CPU."""

    def __init__(self, package, settings):
        super().__init__(package, settings)
        self.variants = {**self.variants, "analytics": "fast"}


def test_with_an_analytics_session_the_rows_run_on_it_and_plain_work_does_not(tmp_path):
    pkg = make_package(tmp_path / "models")
    with client_for(pkg, backend=LaneRecorder) as c:
        wait_ready(c)
        MaskRecorder.masks = []
        assert c.post("/v1/occlusion", json={"input": "the cat sat"}).status_code == 200
        assert c.post("/v1/similarity", json={"source": "a cat", "targets": ["a dog"]}).status_code == 200
        analytics = {role for role, _ in MaskRecorder.masks}
        MaskRecorder.masks = []
        assert c.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200
        # occlusion's rows with holes run on the analysis graph (it honours a hole inside an input)
        assert analytics == {"analytics", "analysis"} and {role for role, _ in MaskRecorder.masks} == {"embed"}


def test_over_the_analytics_budget_the_answer_is_429_with_retry_after(tmp_path):
    with app(tmp_path, analytics_tokens_inflight=40, analytics_max_request_tokens=30) as c:
        wait_ready(c)
        err = assert_error(c.post("/v1/occlusion", json={"input": "the cat sat on the mat"}), 413, "too_large")
        assert "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS" in err["message"]  # 9 rows of 8 tokens
        engine = c.app.state.engine
        held = engine.analytics.budget.admit(30, "another request")
        r = c.post("/v1/occlusion", json={"input": "cat"})  # 4 rows of 3: 12 tokens, 10 left
        err = assert_error(r, 429, "overloaded")
        assert r.headers["retry-after"] == "1" and "30 of 40 tokens" in err["message"]
        held.release()
        assert c.post("/v1/occlusion", json={"input": "cat"}).status_code == 200
        assert engine.analytics.budget.used == 0
