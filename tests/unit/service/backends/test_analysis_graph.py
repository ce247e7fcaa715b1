"""One graph for looking inside (HEADWISE_ANALYSIS): attention, hidden states and removed
heads all run on the analysis graph, in one session made when the first request needs it
(lazy, the default), at start-up (eager) or never (off: such requests are refused, 422).
Packages exported before it carry an attention graph too: it is ignored, or served where
the package has no analysis graph."""

import json
import shutil
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from headwise.service.api.app import create_app
from headwise.service.backends.onnxruntime import OrtBackend
from headwise.service.package import load_package
from headwise.service.settings import Settings, SettingsError, load_settings


def backend(path, **settings) -> OrtBackend:
    return OrtBackend(load_package(path), Settings(models_dir=path.parent, provider="cpu", **settings))


def feeds(n: int = 2, t: int = 5) -> dict[str, np.ndarray]:
    ids = np.arange(5, 5 + n * t, dtype=np.int64).reshape(n, t)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def test_lazy_makes_the_analysis_session_on_the_first_run_that_needs_it(tiny_package):
    b = backend(tiny_package)
    assert b.variants["attention"] == b.variants["analysis"] == "analysis"
    assert b.lazy() == ["attention", "analysis"]
    b.run("embed", feeds(), ["sentence_embedding"])
    assert b.lazy() == ["attention", "analysis"]  # plain work never loads it
    out = b.run("attention", feeds(), ["attentions"])  # no head mask given: every head kept
    assert out["attentions"].shape == (2, 2, 2, 5, 5) and b.lazy() == []
    assert b.session("attention") is b.session("analysis")  # one session for both roles


def test_attention_without_a_head_mask_equals_the_analysis_graph_keeping_every_head(tiny_package):
    b = backend(tiny_package, analysis="eager")
    assert b.lazy() == []
    f = feeds(3, 7)
    kept = b.run("analysis", {**f, "head_mask": np.ones((3, 2, 2), np.float32)}, ["attentions", "sentence_embedding"])
    got = b.run("attention", f, ["attentions", "sentence_embedding"])
    for name in got:
        np.testing.assert_array_equal(got[name], kept[name])


def test_off_serves_neither_role(tiny_package):
    b = backend(tiny_package, analysis="off")
    assert set(b.variants) <= {"embed", "analytics"} and b.lazy() == []


def _old(tiny_package, tmp_path, drop_analysis: bool):
    """A copy of the package as exported before 2026-11-28: an attention graph beside the
    analysis graph (the analysis graph's file stands in for it: same inputs bar the head mask)."""
    old = tmp_path / "models" / tiny_package.name
    shutil.copytree(tiny_package, old)
    m = json.loads((old / "manifest.json").read_text())
    m["variants"]["attention"] = {**m["variants"]["analysis"]}
    if drop_analysis:
        del m["variants"]["analysis"]
    (old / "manifest.json").write_text(json.dumps(m))
    return old


def test_an_older_package_serves_attention_from_its_analysis_graph(tiny_package, tmp_path):
    b = backend(_old(tiny_package, tmp_path, drop_analysis=False))
    assert b.variants["attention"] == "analysis"


def test_a_package_from_before_the_analysis_graph_serves_its_attention_graph(tiny_package, tmp_path):
    b = backend(_old(tiny_package, tmp_path, drop_analysis=True))
    assert b.variants["attention"] == "attention" and "analysis" not in b.variants


def test_drift_sampling_with_the_analysis_graph_off_is_refused_at_start_up(monkeypatch):
    monkeypatch.setenv("HEADWISE_ATTENTION_SAMPLE", "0.1")
    monkeypatch.setenv("HEADWISE_ANALYSIS", "off")
    with pytest.raises(SettingsError, match=r"HEADWISE_ATTENTION_SAMPLE .*HEADWISE_ANALYSIS=off"):
        load_settings()


def _client(models, **settings) -> TestClient:
    return TestClient(create_app(Settings(models_dir=models, provider="cpu", **settings)))


def _ready(c: TestClient) -> None:
    deadline = time.monotonic() + 60
    while c.get("/health/ready").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.parametrize("body", [{"attention": {"layers": [0]}}, {"hidden_states": {"layers": [1]}},
                                  {"ablate": {"0": [1]}}], ids=["attention", "hidden_states", "ablate"])
def test_with_it_off_looking_inside_is_refused_saying_so(tiny_package, body):
    with _client(tiny_package.parent, analysis="off") as c:
        _ready(c)
        assert c.post("/v1/embed", json={"inputs": ["a cat"]}).status_code == 200
        r = c.post("/v1/embed", json={"inputs": ["a cat"], **body})
        assert r.status_code == 422, r.text
        assert "HEADWISE_ANALYSIS=off" in r.json()["error"]["message"]
        assert c.get("/v1/models").json()["data"][0]["attention"] is False


def test_lazy_and_eager_answer_alike(tiny_package):
    body = {"inputs": ["a cat sat", "on the mat today"], "attention": {"layers": [0, 1]},
            "hidden_states": {"layers": [0, 2]}}
    answers = []
    for mode in ("lazy", "eager"):
        with _client(tiny_package.parent, analysis=mode) as c:
            _ready(c)
            r = c.post("/v1/embed", json=body)
            assert r.status_code == 200, r.text
            answers.append(r.content)
    assert answers[0] == answers[1]


def test_metrics_name_each_look_inside_lane_though_they_share_the_graph(tiny_package):
    """Attention and analysis requests run analysis.onnx, but each lane keeps its own `variant`
    label (its queue depth is a gauge of its own)."""
    with _client(tiny_package.parent) as c:
        _ready(c)
        assert c.post("/v1/embed", json={"inputs": ["a cat"], "attention": {"layers": [0]}}).status_code == 200
        assert c.post("/v1/embed", json={"inputs": ["a cat"], "hidden_states": {"layers": [1]}}).status_code == 200
        text = c.get("/metrics").text
    for variant in ("attention", "analysis"):
        line = f'headwise_inference_duration_seconds_count{{model="tiny",variant="{variant}"}}'
        assert any(x.startswith(line) and float(x.split()[-1]) == 1 for x in text.splitlines()), line
        assert f'headwise_queue_depth{{model="tiny",priority="plain",variant="{variant}"}}' in text
