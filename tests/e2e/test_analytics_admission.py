"""Analytics admission and priority through a real `headwise serve` process on the real
all-MiniLM-L6-v2 package: the token cap (413) and the token budget (429 with Retry-After) in
the native and TEI shapes, start-up refusing a cap over the budget, and answers unchanged:
an admitted occlusion equals the one it gets alone, and plain requests answered while it runs
equal their answers alone, bit for bit."""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
import time

import httpx
import pytest

from tests.e2e.conftest import REPO, clean_env
from tests.fixtures.metrics import total

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "in", "the", "park"]
BUDGET, CAP = 20_000, 16_000  # one occlusion of 120 tokens (121 × 120 = 14,520) fits, two do not
MODEL = "all-minilm-l6-v2"


def text_of(srv, tokens: int) -> str:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))
    assert len(srv.post("/v1/tokenize", {"inputs": text}).json()["data"][0]["ids"]) == tokens
    return text


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_ANALYTICS_TOKENS_INFLIGHT": str(BUDGET),
                             "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS": str(CAP)})


def test_a_request_over_the_token_cap_is_413_in_each_protocols_shape(srv):
    r = srv.post("/v1/occlusion", {"input": text_of(srv, 130)})  # 131 × 130 = 17,030 tokens
    assert r.status_code == 413, r.text
    msg = r.json()["error"]["message"]
    assert "17030 tokens" in msg and "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS" in msg
    long = text_of(srv, 200)
    r = srv.post("/v1/similarity", {"source": long, "targets": [long] * 80})  # 81 × 200 tokens
    assert r.status_code == 413 and "16200 tokens" in r.json()["error"]["message"]
    r = srv.post("/similarity", {"inputs": {"source_sentence": long, "sentences": [long] * 80}})
    assert r.status_code == 413, r.text
    assert set(r.json()) == {"error", "error_type"} and "16200 tokens" in r.json()["error"]


def test_head_importance_is_charged_its_rows_times_tokens(srv):
    """Issue 40, item 6: head importance costs (L·H + 1) · T (× the analysis graph's weight, 1:
    bench/results/analytics-weights.md), as occlusion does; over the cap, 413 naming it."""
    r = srv.post("/v1/head_importance", {"input": text_of(srv, 230)})  # 73 × 230 = 16,790 > 16,000
    assert r.status_code == 413, r.text
    msg = r.json()["error"]["message"]
    assert "16790 tokens" in msg and "73 rows of 230" in msg and "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS" in msg
    assert srv.post("/v1/head_importance", {"input": text_of(srv, 200)}).status_code == 200  # 14,600


def test_over_the_budget_is_429_with_retry_after_and_the_admitted_answer_is_unchanged(srv):
    text = text_of(srv, 120)
    alone = srv.post("/v1/occlusion", {"input": text})
    assert alone.status_code == 200, alone.text
    plain_alone = srv.post("/v1/embed", {"inputs": ["a plain request", "and another one"]}).json()["data"]
    with cf.ThreadPoolExecutor(1) as pool:
        running = pool.submit(lambda: httpx.post(f"{srv.url}/v1/occlusion", json={"input": text}, timeout=300))
        deadline = time.monotonic() + 30
        while total(srv.metrics(), "headwise_analytics_tokens_inflight") == 0:  # admitted: 14,520 in flight
            assert time.monotonic() < deadline and not running.done(), "the occlusion was never admitted"
            time.sleep(0.01)
        assert total(srv.metrics(), "headwise_analytics_tokens_inflight") == 121 * 120
        native = srv.post("/v1/occlusion", {"input": text})
        tei = srv.post("/similarity", {"inputs": {"source_sentence": text, "sentences": [text] * 60}})
        plain = srv.post("/v1/embed", {"inputs": ["a plain request", "and another one"]})
        first = running.result()
    assert native.status_code == 429, native.text
    assert native.json()["error"]["type"] == "overloaded"
    assert "HEADWISE_ANALYTICS_TOKENS_INFLIGHT" in native.json()["error"]["message"]
    assert int(native.headers["retry-after"]) >= 1
    assert tei.status_code == 429 and tei.json()["error_type"] == "Overloaded"
    assert int(tei.headers["retry-after"]) >= 1
    # plain work went on beside the occlusion, and its answers are those it gets alone
    assert plain.status_code == 200 and plain.json()["data"] == plain_alone
    assert first.status_code == 200 and first.json()["effects"] == alone.json()["effects"]
    assert total(srv.metrics(), "headwise_analytics_tokens_inflight") == 0


def test_analytics_queue_wait_is_its_own_series(srv):
    srv.post("/v1/similarity", {"source": "a cat", "targets": ["a dog"]})
    srv.post("/v1/embed", {"inputs": "a cat"})
    m = srv.metrics()
    assert total(m, "headwise_queue_duration_seconds_count", model=MODEL, priority="analytics") >= 1
    assert total(m, "headwise_queue_duration_seconds_count", model=MODEL, priority="plain") >= 1
    assert total(m, "headwise_queue_depth", model=MODEL, priority="analytics") == 0


def test_a_cap_over_the_budget_is_refused_at_start(default_package):
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(default_package),
                        "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=clean_env(HEADWISE_ANALYTICS_TOKENS_INFLIGHT="1000",
                                     HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS="2000"))
    assert r.returncode != 0
    assert "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS (2000) is over HEADWISE_ANALYTICS_TOKENS_INFLIGHT (1000)" in r.stderr
