"""Issue 8, bad input against a real server: payload limits, malformed bodies, limits, API key,
security headers, and a labelled failure counter for every rejection. Never a 500, never an
echo, always the documented error shape; the server keeps serving throughout."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import pytest

from bench.limits import send_raw
from tests.fixtures.metrics import total
from tests.fixtures.procfs import proc_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "rel-key-5b7e1c9a"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {**AUTH, "content-type": "application/json"}
MARK = "quokka-marker-9031"  # planted in inputs; never in an error body
LIMIT = 4 * 1024 * 1024  # HEADWISE_MAX_BODY_BYTES (the default, said explicitly)
CLIENT_BATCH = 16


@pytest.fixture(scope="module")
def srv(start_server):
    s = start_server(env={"HEADWISE_API_KEY": KEY, "HEADWISE_PRECISION": "fp32", "HEADWISE_DOCS": "false",
                          "HEADWISE_MAX_BODY_BYTES": str(LIMIT), "HEADWISE_MAX_CLIENT_BATCH": str(CLIENT_BATCH)},
                     args=["--access-log"])
    yield s
    s.stop()


def rss_mb(pid: int) -> float:
    return proc_status(pid, "VmRSS") / 1024


def check(r: httpx.Response, status: int | tuple, type_: str | None = None) -> dict:
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    assert len(r.content) <= 2048, len(r.content)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code", "request_id"}
    assert body["error"]["request_id"] == r.headers["x-request-id"]
    assert body["error"]["code"] == r.status_code and body["error"]["message"]
    if type_:
        assert body["error"]["type"] == type_
    assert "Traceback" not in r.text and MARK not in r.text
    return body["error"]


def post_head(length: int) -> bytes:
    return (b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n")


def chunked_until_answered(port: int, total_bytes: int, chunk: int = 64 * 1024) -> tuple[int, int]:
    """Stream a chunked body; stop once the server answers. → (status, bytes sent by then)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                  + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        sent, piece = 0, b"%x\r\n" % chunk + b" " * chunk + b"\r\n"
        s.setblocking(False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            readable, writable, _ = select.select([s], [s] if sent < total_bytes else [], [], 1.0)
            if readable:
                s.setblocking(True)
                s.settimeout(10)
                data = s.recv(65536)
                return int(data.split()[1]), sent
            if writable:
                try:
                    s.sendall(piece)
                except BlockingIOError:
                    continue
                sent += chunk
                time.sleep(0.002)  # paced, so socket buffers hold little: `sent` is about what was read
        raise AssertionError(f"no answer after {sent} bytes")


@pytest.mark.parametrize("path, shape", [("/v1/embed", "native"), ("/v1/embeddings", "openai"),
                                         ("/v2/models/any/infer", "kserve")])
def test_an_oversized_body_gets_the_routes_own_413_shape_and_the_connection_closes(srv, path, shape):
    head = post_head(LIMIT + 1).replace(b"/v1/embed", path.encode(), 1)
    status, headers, rest, _ = send_raw(srv.port, head)
    assert status == 413 and headers["connection"] == "close"
    body = json.loads(rest)
    if shape == "kserve":
        assert set(body) == {"error"} and isinstance(body["error"], str)
    else:
        assert body["error"]["type"] == "too_large" and body["error"]["code"] == 413
        assert ("param" in body["error"]) == (shape == "openai")
    assert httpx.get(srv.url + "/health/ready").status_code == 200


def test_payload_limits_answer_413_fast_and_memory_stays_flat(srv):
    def round_():
        status, _, body, dt = send_raw(srv.port, post_head(LIMIT + 1), b"x" * (LIMIT + 1))
        assert status == 413 and b'"too_large"' in body and len(body) < 2048
        assert dt < 1.0, f"413 took {dt * 1000:.0f} ms"  # the 100 ms target: bench/limits.py
        status, _, body, dt = send_raw(srv.port, post_head(10 * 1000 * 1000), b"x" * (10 * 1000 * 1000))
        assert status == 413 and b'"too_large"' in body and dt < 1.0
        status, sent = chunked_until_answered(srv.port, 10 * 1000 * 1000)
        assert status == 413
        assert sent < LIMIT + 1024 * 1024, f"answered only after {sent} bytes"
        assert httpx.get(srv.url + "/health/ready").status_code == 200

    round_()  # first touch of every path
    before = srv.metrics()
    rss0 = rss_mb(srv.proc.pid)
    for _ in range(5):
        round_()
    grown = rss_mb(srv.proc.pid) - rss0
    assert grown < 20, f"RSS grew {grown:.1f} MB over 15 oversized bodies"
    assert total(srv.metrics(), "headwise_request_failures_total", reason="too_large") - total(
        before, "headwise_request_failures_total", reason="too_large") == 15
    assert srv.post("/v1/embed", {"inputs": "still fine"}, headers=AUTH).status_code == 200


MALFORMED = {
    "malformed JSON": (b'{"inputs": ["' + MARK.encode() + b'",', "application/json", 400),
    "empty body": (b"", "application/json", 400),
    "wrong content type": (b'{"inputs": "' + MARK.encode() + b'"}', "text/plain", 422),
    "invalid UTF-8": (b'{"inputs": "\xff\xfe' + MARK.encode() + b'"}', "application/json", 400),
    "nested 10,000 deep": (b'{"inputs": ' + b"[" * 10000 + b"]" * 10000 + b"}", "application/json", 400),
    "nested objects 10,000 deep": (b'{"inputs": "x", "z": ' + b'{"a":' * 10000 + b"1" + b"}" * 10001,
                                   "application/json", (400, 422)),
    "inputs 123": (b'{"inputs": 123}', "application/json", 422),
    "inputs null": (b'{"inputs": null}', "application/json", 422),
    "inputs {}": (b'{"inputs": {}}', "application/json", 422),
    "inputs [[1]]": (b'{"inputs": [[1]]}', "application/json", 422),
    "inputs [true]": (b'{"inputs": [true]}', "application/json", 422),
    "unknown field": (b'{"inputs": "x", "' + MARK.encode() + b'": 1}', "application/json", 422),
    "1 MB unknown field name": (b'{"inputs": "x", "' + MARK.encode() * 60000 + b'": 1}', "application/json", 422),
    "1 MB input of the wrong type": (b'{"inputs": ["' + MARK.encode() * 60000 + b'", 5]}', "application/json", 422),
    "1 MB of bad JSON": (b'{"inputs": "' + MARK.encode() * 60000, "application/json", 400),
    "many wrong fields": (b"{" + b",".join(b'"%s%d": %d' % (MARK.encode(), i, i) for i in range(5000)) + b"}",
                          "application/json", 422),
}


@pytest.mark.parametrize("path", ["/v1/embed", "/v1/tokenize"])
def test_malformed_bodies_are_4xx_in_the_documented_shape(srv, path):
    before = srv.metrics()
    for name, (body, ctype, status) in MALFORMED.items():
        r = httpx.post(srv.url + path, content=body, headers={**AUTH, "content-type": ctype}, timeout=60)
        try:
            check(r, status)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
    after = srv.metrics()
    failed = sum(total(after, "headwise_request_failures_total", reason=r) - total(before, "headwise_request_failures_total", reason=r)
                 for r in ("invalid_request", "validation"))
    assert failed == len(MALFORMED)
    assert total(after, "headwise_requests_total", code="500") == 0
    assert srv.post(path, {"inputs": "still fine"}, headers=AUTH).status_code == 200


def test_limits_client_batch_max_len_and_huge_strings(srv):
    r = srv.post("/v1/embed", {"inputs": [f"text {i}" for i in range(CLIENT_BATCH)]}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["data"]) == CLIENT_BATCH
    check(srv.post("/v1/embed", {"inputs": [MARK] * (CLIENT_BATCH + 1)}, headers=AUTH), 413, "too_large")
    # max_len + 1 tokens exactly: [CLS] + 255 words + [SEP] = 257 tokens
    words = " ".join(["hello"] * 255)
    err = check(srv.post("/v1/embed", {"inputs": words, "truncate": False}, headers=AUTH), 422, "validation")
    assert "256" in err["message"] and "257" in err["message"]
    r = srv.post("/v1/embed", {"inputs": words, "output": "tokens"}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["data"][0]["tokens"]) == 256
    # exactly max_len tokens without truncation is fine
    assert srv.post("/v1/embed", {"inputs": " ".join(["hello"] * 254), "truncate": False}, headers=AUTH).status_code == 200
    # millions of characters: refused on a len(), before any tokenisation
    before = srv.metrics()
    for truncate in (True, False):
        t0 = time.perf_counter()
        r = httpx.post(srv.url + "/v1/embed", headers=JSON, timeout=60,
                       content=b'{"truncate": %s, "inputs": "' % (b"true" if truncate else b"false")
                       + b"word " * 600_000 + b'"}')
        check(r, 413, "too_large")
        assert "characters" in r.json()["error"]["message"]
        assert time.perf_counter() - t0 < 2
    after = srv.metrics()
    assert (total(after, "headwise_tokenize_duration_seconds_count") == total(before, "headwise_tokenize_duration_seconds_count"))


def test_api_key(srv):
    before = srv.metrics()
    cases = {"missing": {}, "wrong": {"Authorization": "Bearer " + MARK}, "prefix only": {"Authorization": "Bearer " + KEY[:8]},
             "longer": {"Authorization": "Bearer " + KEY + "x"}, "empty": {"Authorization": "Bearer"},
             "wrong scheme": {"Authorization": "Basic " + KEY}}
    for name, headers in cases.items():
        for method, path in (("POST", "/v1/embed"), ("POST", "/v1/tokenize"), ("GET", "/v1/models")):
            r = httpx.request(method, srv.url + path, json={"inputs": MARK}, headers=headers, timeout=30)
            err = check(r, 401, "unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer"), name
            assert KEY not in r.text and KEY[:8] not in err["message"]
    failed = total(srv.metrics(), "headwise_request_failures_total", reason="unauthorized") - total(
        before, "headwise_request_failures_total", reason="unauthorized")
    assert failed == 3 * len(cases)
    for path in ("/health/live", "/health/ready", "/metrics"):
        assert httpx.get(srv.url + path).status_code == 200, path
    # HEADWISE_DOCS=false: no docs, no schema
    for path in ("/docs", "/redoc", "/openapi.json"):
        check(httpx.get(srv.url + path), 404, "not_found")
    assert srv.post("/v1/embed", {"inputs": "fine"}, headers=AUTH).status_code == 200
    assert KEY not in srv.log_tail(10_000_000), "the key is in the log"


def test_viewer_page_and_files_carry_security_headers(srv):
    r = httpx.get(srv.url + "/")
    if r.status_code == 404:
        pytest.skip("no viewer page installed")
    assert r.headers["content-security-policy"] == (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    assert r.headers["x-content-type-options"] == "nosniff"
    assets = [a for a in ("/static/app.js", "/static/viewer.js", "/static/style.css") if
              httpx.get(srv.url + a).status_code == 200]
    for a in assets or ["/static/no-such-file.js"]:
        r = httpx.get(srv.url + a)
        assert r.headers["x-content-type-options"] == "nosniff" and "frame-ancestors 'none'" in r.headers[
            "content-security-policy"]


def test_no_500_and_no_traceback_after_all_that(srv):
    assert total(srv.metrics(), "headwise_requests_total", code="500") == 0
    assert srv.proc.poll() is None
    assert "Traceback" not in srv.log_tail(10_000_000)
