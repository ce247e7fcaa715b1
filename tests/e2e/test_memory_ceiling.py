"""A real server with default settings stays inside the shipped memory limit (docker/k8s:
1,536 MiB) under a mix of the largest valid requests at once, turns away what does not fit
(429) or what no request may ask for (413), and gives the memory back afterwards (issue 17)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.e2e.conftest import rss_mib

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LIMIT_MIB = 1536
LONG = " ".join(["attention"] * 300)  # truncated to max_len, 256 tokens


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server(env={"HEADWISE_PRECISION": "fp32"})


def test_what_no_request_may_ask_for_is_413_before_inference(srv):
    every_head = {"format": "dense", "dtype": "float32", "encoding": "json"}
    r = srv.post("/v1/embed", {"inputs": [LONG, LONG], "attention": every_head})  # 2 × 75 MB of JSON
    assert r.status_code == 413 and "HEADWISE_MAX_RESPONSE_BYTES" in r.json()["error"]["message"]
    r = srv.post("/v1/embed", {"inputs": [LONG] * 200, "output": "tokens"})  # 200 × 256 × 384 floats
    assert r.status_code == 413
    r = srv.post("/v1/embed", {"inputs": [LONG], "attention": {**every_head, "format": "topk", "top_k": 1000}})
    assert r.status_code == 200  # top-k of every key: values and indices, 1 input, within the bound


def test_the_largest_valid_requests_at_once_stay_under_the_memory_limit(srv):
    heavy = [
        {"inputs": [LONG], "attention": {"format": "dense", "dtype": "float32", "encoding": "json"}},  # ~75 MB
        {"inputs": [LONG] * 48, "output": "tokens"},  # ~76 MB
    ]
    pid = srv.proc.pid

    def client(i: int) -> list[int]:
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            return [c.post("/v1/embed", json=heavy[(i + j) % 2]).status_code for j in range(3)]

    # One wave first: glibc keeps the arenas a first wave of threads grows, whatever ran before
    # (alone, this test's baseline was ~400 MiB; after the module's first test ~640-770), so what
    # "given back" can hold to is the same wave again, against the RSS the first one left.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    time.sleep(2)
    baseline = rss_mib(pid)
    peak, stop = [baseline], threading.Event()

    def watch():
        while not stop.is_set():
            peak.append(rss_mib(pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            codes = [c for cs in pool.map(client, range(8)) for c in cs]
    finally:
        stop.set()
        watcher.join()
    print(f"\n8 clients x 3 heavy requests: {codes.count(200)} x 200, {codes.count(429)} x 429; "
          f"RSS baseline {baseline:.0f} MiB, peak {max(peak):.0f} MiB")
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 6, codes
    assert max(peak) < LIMIT_MIB, f"peak RSS {max(peak):.0f} MiB (baseline {baseline:.0f})"
    time.sleep(2)
    after = rss_mib(pid)
    print(f"RSS 2 s after: {after:.0f} MiB")
    assert after < baseline + 384, f"RSS {after:.0f} MiB after, {baseline:.0f} before"
    r = srv.post("/v1/embed", {"inputs": ["still serving"]})
    assert r.status_code == 200


def test_clients_that_do_not_read_their_answers_cannot_hold_memory(srv):
    """12 clients each ask for ~75 MB of JSON attention and never read it: the answers that fit
    the in-flight budget wait in the server's buffers, the rest get 429, and RSS stays bounded."""
    import json
    import socket

    body = json.dumps({"inputs": [LONG], "attention": {"format": "dense", "dtype": "float32",
                                                       "encoding": "json"}}).encode()
    head = (b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    def answered() -> float:  # /v1/embed requests completed so far (a held answer is not, yet)
        return sum(float(line.rsplit(" ", 1)[1]) for line in srv.metrics().splitlines()
                   if line.startswith("headwise_requests_total{") and 'route="/v1/embed"' in line)

    pid = srv.proc.pid
    baseline, peak, before = rss_mib(pid), 0.0, answered()
    socks = []
    for _ in range(12):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader's small window
        s.sendall(head + body)
        socks.append(s)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and answered() - before < 12 - 3:  # 3 × 75 MB fit 256 MiB
        peak = max(peak, rss_mib(pid))
        time.sleep(0.1)
    time.sleep(1)
    peak = max(peak, rss_mib(pid))
    peak = max(peak, rss_mib(pid))
    statuses = []
    for s in socks:
        s.settimeout(120)
        first = s.recv(64)
        statuses.append(int(first[9:12]))
        s.close()
    print(f"\n12 non-reading clients: {statuses.count(200)} x 200, {statuses.count(429)} x 429; "
          f"RSS baseline {baseline:.0f} MiB, peak {peak:.0f} MiB")
    assert set(statuses) <= {200, 429} and statuses.count(429) >= 6, statuses
    assert peak < LIMIT_MIB
    assert srv.post("/v1/embed", {"inputs": ["still serving"]}).status_code == 200
    assert inflight_response_bytes(srv) == 0  # every reservation went back, closed clients too


def inflight_response_bytes(srv) -> float:
    deadline = time.monotonic() + 10
    while True:
        value = next(float(line.split()[-1]) for line in srv.metrics().splitlines()
                     if line.startswith("headwise_response_bytes_inflight "))
        if value == 0 or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_inputs_far_over_max_len_cost_what_their_answer_needs(srv):
    """256 inputs of 5,000 CJK characters (a token each) without truncation: refused (422)
    after reading each only as far as needed, and nothing of them is kept afterwards."""
    body = {"inputs": ["東" * 5000] * 256, "truncate": False}
    pid = srv.proc.pid
    before = rss_mib(pid)
    for _ in range(6):
        r = srv.post("/v1/embed", body)
        assert r.status_code == 422 and "tokens or more" in r.json()["error"]["message"]
    grew = rss_mib(pid) - before
    print(f"\n6 requests of 256 x 5,000 CJK characters, truncate false: RSS +{grew:.0f} MiB")
    assert grew < 400  # a refused request once kept its tokens (bench/results/reliability-cpu.md)
    assert srv.post("/v1/embed", {"inputs": ["東" * 5000], "truncate": True}).status_code == 200


def test_large_answers_do_not_stall_the_event_loop(srv):
    """The issue's 300 MB `output: "tokens"` answer stalled /health/live (the figure:
    bench/results/reliability-cpu.md): it is now refused before inference, and the largest
    allowed one is written off the event loop in pieces (orjson holds the GIL for a whole
    call), so probes keep being answered."""
    import threading

    def worst_probe_during(body: dict) -> tuple[int, float]:
        done, got = threading.Event(), {}

        def big():
            got["status"] = srv.post("/v1/embed", body, timeout=300).status_code
            done.set()

        t = threading.Thread(target=big)
        t.start()
        worst = 0.0
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            while not done.is_set():
                t0 = time.monotonic()
                assert c.get("/health/live").status_code == 200
                worst = max(worst, time.monotonic() - t0)
                time.sleep(0.01)
        t.join()
        return got["status"], worst

    status, _ = worst_probe_during({"inputs": [LONG] * 256, "output": "tokens"})
    assert status == 413
    status, worst = worst_probe_during({"inputs": [LONG] * 64, "output": "tokens"})  # ~75 MB of JSON
    print(f"\n/health/live while a 75 MB answer is written: worst {1000 * worst:.0f} ms")
    assert status == 200 and worst < 0.5  # loose: timings vary with the machine; bench figures in docs/security.md
