"""Process mode end to end (HEADWISE_ENGINE=process, docs/architecture.md#process-mode): a real
`headwise serve` supervisor, its engine process and front-end processes on the real
all-MiniLM-L6-v2 package, tiny classifiers and a tiny GPT-2.

- Every route family answers byte for byte what the in-process server answers.
- Front-ends open no onnxruntime; /metrics shows the engine's series.

Faults and shutdown: test_process_mode_faults.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PROCESS_MODE
from tests.fixtures.metrics import total
from tests.fixtures.procfs import roles

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROCESS = PROCESS_MODE
COMMON = {"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_NEW_TOKENS": "8"}


@pytest.fixture(scope="module")
def models(tmp_path_factory, default_package, classifier_packages) -> Path:
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2

    out = tmp_path_factory.mktemp("process-models")
    (out / default_package.name).symlink_to(default_package, target_is_directory=True)
    for name in ("tiny-reranker", "tiny-classifier"):
        (out / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    ckpt = tmp_path_factory.mktemp("process-gpt2")
    build_package(make_tiny_gpt2(ckpt / "gpt2", n_layers=2, n_heads=2, d_model=32), out, "tiny-gpt2",
                  progress=lambda m: None)
    return out


@pytest.fixture(scope="module")
def pair(start_server, models):
    """(in-process server, process-mode server with 2 front-ends) on the same packages."""
    return start_server(models=models, env=COMMON), start_server(models=models, env={**COMMON, **PROCESS})


MINILM = "all-minilm-l6-v2"
TEXTS = ["the cat sat on the mat", "a quick brown fox", "hello"]
REQUESTS = [
    ("/v1/embed", {"model": MINILM, "inputs": TEXTS}),
    ("/v1/embed", {"model": MINILM, "inputs": TEXTS[:1], "attention": {"layers": [0, 5], "heads": [1, 2]}}),
    ("/v1/embed", {"model": MINILM, "inputs": TEXTS[:2], "hidden_states": {"layers": [0, 6], "pooling": "mean"}}),
    ("/v1/embed", {"model": MINILM, "inputs": TEXTS[:1], "ablate": {"2": [0, 3]}}),
    ("/v1/embeddings", {"model": MINILM, "input": TEXTS}),
    ("/embed", {"model": MINILM, "inputs": TEXTS}),
    ("/embed", {"model": MINILM, "inputs": ["cut at its start " + "attention " * 300 + "to the end"],
                "truncation_direction": "left"}),
    ("/rerank", {"model": "tiny-reranker", "query": "where " * 60 + "is the cat", "texts": ["a dog " * 60, "a cat"],
                 "truncation_direction": "left"}),
    ("/v2/embed", {"model": MINILM, "texts": TEXTS, "input_type": "search_document", "embedding_types": ["float"]}),
    (f"/v2/models/{MINILM}/infer", {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                               "data": TEXTS[:2]}]}),
    ("/v1/similarity", {"model": MINILM, "source": "a cat", "targets": ["a dog", "the cat sat"], "explain": True}),
    ("/v1/occlusion", {"model": MINILM, "input": "the cat sat on the mat", "unit": "word"}),
    ("/v1/head_importance", {"model": MINILM, "input": "the cat sat"}),
    ("/v1/rerank", {"model": "tiny-reranker", "query": "where is the cat", "texts": ["a dog", "the cat sat"],
                    "attention": {"layers": [0], "heads": [0]}}),
    ("/v1/predict", {"model": "tiny-classifier", "inputs": ["a fine day", "a bad day"]}),
    ("/score", {"model": "tiny-reranker", "text_1": "where is the cat", "text_2": ["a dog", "the cat sat"]}),
    ("/v1/generate", {"model": "tiny-gpt2", "prompt": "the quick brown fox", "max_new_tokens": 6,
                      "attention": {"layers": [0], "heads": [0]}, "hidden_states": {"layers": [1]}}),
]
VOLATILE = ("id", "created")  # a generation's id and timestamp


def _stable(body: bytes):
    data = json.loads(body)
    if isinstance(data, dict):
        for k in VOLATILE:
            data.pop(k, None)
    return data


@pytest.mark.parametrize("path, body", REQUESTS, ids=[f"{p} {sorted(b)[-1]}" for p, b in REQUESTS])
def test_answers_are_byte_identical_to_the_in_process_server(pair, path, body):
    inproc, process = pair
    a, b = inproc.post(path, json=body), process.post(path, json=body)
    assert a.status_code == b.status_code == 200, (a.text[:300], b.text[:300])
    if any(k in a.json() for k in VOLATILE if isinstance(a.json(), dict)):
        assert _stable(a.content) == _stable(b.content)
    else:
        assert a.content == b.content


def _events(srv, body) -> list[dict]:
    with httpx.stream("POST", srv.url + "/v1/generate", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [_stable(line[6:].encode()) for line in lines[:-1]]


def test_streamed_generation_is_identical_too(pair):
    inproc, process = pair
    body = {"model": "tiny-gpt2", "prompt": "a cat sat on the mat", "max_new_tokens": 6, "seed": 3,
            "temperature": 0.8, "attention": {"layers": [1], "heads": [1]}}
    assert _events(inproc, body) == _events(process, body)


def test_errors_are_the_same_in_both_modes(pair):
    inproc, process = pair
    for path, body in [("/v1/embed", {"model": MINILM, "inputs": []}),
                       ("/v1/embed", {"model": MINILM, "inputs": ["x " * 600], "truncate": False}),
                       ("/v1/embed", {"model": "nope", "inputs": ["x"]}),
                       ("/v1/rerank", {"model": MINILM, "query": "q", "texts": ["a"]})]:
        ids = {"X-Request-Id": f"same-{path}-{len(str(body))}"}  # the one difference a made id would be
        a, b = inproc.post(path, json=body, headers=ids), process.post(path, json=body, headers=ids)
        assert a.status_code == b.status_code and a.status_code in (400, 404, 413, 422), a.text
        assert a.content == b.content and a.headers["x-request-id"] == b.headers["x-request-id"] == ids["X-Request-Id"]


def test_front_ends_open_no_onnxruntime_and_metrics_show_the_engine(pair):
    _, process = pair
    by_role = roles(process)
    assert len(by_role["engine"]) == 1 and len(by_role["frontend"]) == 2
    assert "onnxruntime" in Path(f"/proc/{by_role['engine'][0]}/maps").read_text()
    for pid in by_role["frontend"]:
        assert "onnxruntime" not in Path(f"/proc/{pid}/maps").read_text()
    process.post("/v1/embed", json={"model": MINILM, "inputs": TEXTS})
    busy = f'headwise_engine_busy_seconds_total{{model="{MINILM}",variant="fast"}}'
    deadline = time.monotonic() + 10  # the engine writes its values at most metric_values.FLUSH_S later
    while busy not in (text := process.metrics()):
        assert time.monotonic() < deadline, text
        time.sleep(0.02)
    assert "headwise_engine_stacked_runs_bucket" in text
    assert 'headwise_requests_total{code="200"' in text


def test_a_burst_with_the_pipeline_on_gets_each_its_own_answer(pair, start_server, models):
    """Overlap in process mode (HEADWISE_PIPELINE=on, CUDA's default): requests tokenised beside
    a running batch run as one batch larger than LOOP_TOKENISE (plain embeddings on the
    front-end's event loop, attention on its inference thread); each answer equals the
    in-process server's for that request alone, within float noise (the batches' padded lengths
    differ)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    srv = start_server(models=models, env={**COMMON, **PROCESS, "HEADWISE_FRONTENDS": "1",
                                           "HEADWISE_PIPELINE": "on", "HEADWISE_MAX_WAIT_MS": "0",
                                           "HEADWISE_FAULT_INJECTION": "true", "HEADWISE_FAULT_ENGINE_DELAY_MS": "150"})
    texts = [f"request {i}: the {'cat' if i % 2 else 'dog'} sat " * (1 + i % 5) for i in range(96)]

    def body(i: int) -> dict:
        extra = {"attention": {"layers": [1], "heads": [0]}} if i % 7 == 0 else {}
        return {"model": MINILM, "inputs": [texts[i]], **extra}

    with ThreadPoolExecutor(48) as pool:  # a slow device: 32 and more wait while a batch runs
        got = list(pool.map(lambda i: srv.post("/v1/embed", body(i)), range(len(texts))))
    for i, r in enumerate(got):
        assert r.status_code == 200, r.text
        got_item, want_item = r.json()["data"][0], pair[0].post("/v1/embed", body(i)).json()["data"][0]
        assert got_item["tokens"] == want_item["tokens"] and got_item["offsets"] == want_item["offsets"]
        np.testing.assert_allclose(got_item["embedding"], want_item["embedding"], atol=1e-6)
        if "attention" in want_item:
            np.testing.assert_allclose(got_item["attention"]["data"], want_item["attention"]["data"], atol=1e-6)
    page = srv.metrics()
    batches = total(page, "headwise_batch_size_count", model=MINILM, variant="fast")
    big = batches - total(page, "headwise_batch_size_bucket", model=MINILM, variant="fast", le="8.0")
    assert big >= 1, (batches, big)  # at least one batch over LOOP_TOKENISE ran
