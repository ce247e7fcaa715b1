"""Batching, metrics and disconnects against a real `headwise serve` (issue 4)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.metrics import total

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

METRICS = ["requests_total", "request_duration_seconds", "request_failures_total", "queue_duration_seconds",
           "tokenize_duration_seconds", "inference_duration_seconds", "batch_size", "batch_tokens",
           "input_tokens", "queue_depth", "inflight_requests", "attention_bytes_total", "model_info"]


def test_64_concurrent_requests_are_batched_and_each_correct(server):
    # ~130 tokens each, so a lone run outlasts a client's next send even on a loaded machine
    filler = " and then it wandered along the river bank past the old mill" * 10
    texts = [f"sentence number {i}: the {['cat', 'dog', 'fox', 'owl'][i % 4]} sat on mat {i * 7}{filler}"
             for i in range(64)]
    alone = [server.post("/v1/embed", {"inputs": t}).json()["data"][0]["embedding"] for t in texts]
    before = server.metrics()

    async def burst():
        async with httpx.AsyncClient(base_url=server.url, timeout=120,
                                     limits=httpx.Limits(max_connections=64)) as c:
            return await asyncio.gather(*(c.post("/v1/embed", json={"inputs": t}) for t in texts))

    responses = asyncio.run(burst())
    after = server.metrics()
    assert all(r.status_code == 200 for r in responses)
    got = np.array([r.json()["data"][0]["embedding"] for r in responses])
    np.testing.assert_allclose(got, np.array(alone), atol=1e-5)
    calls = (total(after, "headwise_inference_duration_seconds_count")
             - total(before, "headwise_inference_duration_seconds_count"))
    inputs = total(after, "headwise_batch_size_sum") - total(before, "headwise_batch_size_sum")
    assert inputs == 64
    assert calls < 64, calls


def test_metrics_parse_and_count_the_traffic(server):
    before = server.metrics()
    for i in range(10):
        assert server.post("/v1/embed", {"inputs": [f"hello {i}", "world"]}).status_code == 200
    for _ in range(3):
        assert server.post("/v1/tokenize", {"inputs": "hello world"}).status_code == 200
    att = server.post("/v1/embed", {"inputs": "hello world", "attention": {"layers": [1], "heads": [2, 3],
                                                                           "dtype": "float16"}})
    t = len(att.json()["data"][0]["tokens"])
    assert server.post("/v1/embed", {"inputs": 3}).status_code == 422
    assert server.post("/v1/embed", {"inputs": "x", "output": "both"}).status_code == 422
    assert server.post("/v1/embed", {"inputs": []}).status_code == 400
    after = server.metrics()

    names = {fam.name for fam in text_string_to_metric_families(after)}
    for m in METRICS:
        base = m.removesuffix("_total")
        assert "headwise_" + base in names, m

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    model = "all-minilm-l6-v2"
    assert delta("headwise_requests_total", route="/v1/embed", model=model, code="200") == 11
    assert delta("headwise_requests_total", route="/v1/tokenize", model=model, code="200") == 3
    assert delta("headwise_requests_total", route="/v1/embed", code="422") == 2
    assert delta("headwise_requests_total", route="/v1/embed", code="400") == 1
    assert delta("headwise_request_duration_seconds_count", route="/v1/embed") == 14
    assert delta("headwise_request_failures_total", reason="validation") == 2
    assert delta("headwise_request_failures_total", reason="invalid_request") == 1
    assert delta("headwise_input_tokens_count", model=model) == 21
    assert delta("headwise_batch_size_sum", model=model) == 21
    assert delta("headwise_batch_size_sum", variant="attention") == 1
    assert 4 <= delta("headwise_tokenize_duration_seconds_count", model=model) <= 14  # one per batch encode
    assert delta("headwise_attention_bytes_total", model=model) == 1 * 2 * t * t * 2
    assert delta("headwise_queue_duration_seconds_count", variant="fast") >= 1
    assert total(after, "headwise_model_info", model=model, provider="cpu", precision="fp32") == 1
    assert total(after, "headwise_queue_depth", variant="fast") == 0


def _raw_post_then_close(port: int, body: dict, linger: float) -> None:
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        time.sleep(linger)


def test_disconnected_requests_are_dropped_before_inference(start_server):
    # a batch that hangs 3 s on the inference thread (fault injection), whatever the batch cap
    srv = start_server(env={"HEADWISE_FAULT_INJECTION": "true"})
    try:
        before = srv.metrics()
        busy = threading.Thread(target=srv.post, args=("/v1/embed", {"inputs": "__headwise_fault__:hang=3"}))
        busy.start()
        time.sleep(0.3)  # the hanging batch is running now
        _raw_post_then_close(srv.port, {"inputs": "nobody is waiting for this"}, linger=0.2)
        busy.join(120)
        assert srv.post("/v1/embed", {"inputs": "after"}).status_code == 200
        after = srv.metrics()

        def delta(name, **labels):
            return total(after, name, **labels) - total(before, name, **labels)

        assert delta("headwise_request_failures_total", reason="disconnected") == 1
        assert delta("headwise_batch_size_sum") == 2  # the dropped one never ran
    finally:
        assert srv.stop() == 0


def test_several_workers_share_their_metrics(start_server):
    srv = start_server(args=["--workers", "2"], env={"HEADWISE_PRECISION": "fp32"})
    try:
        streak, deadline = 0, time.monotonic() + 120
        while streak < 10:  # each worker warms up on its own; new connections reach either
            assert time.monotonic() < deadline, srv.log_tail()
            streak = streak + 1 if srv.get("/health/ready").status_code == 200 else 0
            time.sleep(0.05)
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            for i in range(20):
                assert c.post("/v1/embed", json={"inputs": f"text {i}"}).status_code == 200
        # new connections spread over the workers; the merged view counts all of them
        for i in range(10):
            assert httpx.post(srv.url + "/v1/embed", json={"inputs": f"other {i}"}, timeout=60).status_code == 200
        # the other worker's last changes are written at most metric_values.FLUSH_S after them
        deadline = time.monotonic() + 10
        while total(text := srv.metrics(), "headwise_requests_total", route="/v1/embed", code="200") < 30:
            assert time.monotonic() < deadline, text
            time.sleep(0.02)
        assert total(text, "headwise_requests_total", route="/v1/embed", code="200") == 30
        assert total(text, "headwise_batch_size_sum") == 30
        assert total(text, "headwise_model_info", provider="cpu", precision="fp32") == 1
    finally:
        assert srv.stop() == 0
