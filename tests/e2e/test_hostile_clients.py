"""Hostile clients against a real `headwise serve` (issue 17): oversized and endless heads,
chunked bodies past the limit in any case, connections that never finish a request, uploads
that stall or abort, cross-site simple POSTs, signals, and packages that cannot load.

Loopback only, every loop bounded in count and time; runnable alone (a tiny random package,
built in seconds: `pytest tests/e2e/test_hostile_clients.py`)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import REPO, HeadwiseServer, clean_env, free_port, rss_mib

pytestmark = pytest.mark.timeout(300)

MAX_BODY = 200_000
FAST = {"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_BODY_BYTES": str(MAX_BODY), "HEADWISE_HEAD_TIMEOUT_S": "1",
        "HEADWISE_BODY_TIMEOUT_S": "2", "HEADWISE_GRACE_SECONDS": "10"}


def serve(models: Path, tmp: Path, **env) -> HeadwiseServer:
    port = free_port()
    log = tmp / f"serve-{port}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "headwise.cli", "serve", "--models", str(models),
                                 "--host", "127.0.0.1", "--port", str(port)], cwd=REPO,
                                env=clean_env(**{**FAST, **env}), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    srv = HeadwiseServer(f"http://127.0.0.1:{port}", port, proc, log)
    srv.wait(timeout=60)
    return srv


@pytest.fixture(scope="module")
def srv(tiny_package, tmp_path_factory):
    s = serve(tiny_package.parent, tmp_path_factory.mktemp("hostile"))
    yield s
    s.stop()


def connect(srv: HeadwiseServer, timeout: float = 10) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s: socket.socket, limit: int = 1 << 20) -> bytes:
    """Everything until the server closes (or the socket's timeout)."""
    out = b""
    try:
        while len(out) < limit:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def status_of(raw: bytes) -> int:
    assert raw.startswith(b"HTTP/1.1 "), raw[:200]
    return int(raw[9:12])


def body_of(raw: bytes) -> dict:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def still_serves(srv: HeadwiseServer) -> None:
    r = srv.post("/v1/embed", {"inputs": ["still here"]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("coding", [b"chunked", b"Chunked", b"CHUNKED"])
def test_a_chunked_body_past_the_limit_is_413_in_any_case(srv, coding):
    s = connect(srv)
    s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: " + coding + b"\r\n\r\n")
    chunk = b"a" * 65536
    sent = 0
    try:
        while sent < 4 * MAX_BODY:
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    raw = read_all(s)
    assert status_of(raw) == 413 and body_of(raw)["error"]["type"] == "too_large"
    still_serves(srv)


def test_a_head_too_large_or_with_too_many_headers_is_431_and_closed(srv):
    for head in (b"X-Big: " + b"a" * 70_000 + b"\r\n", b"".join(b"X-H%d: v\r\n" % i for i in range(150))):
        s = connect(srv)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
        raw = read_all(s)
        assert status_of(raw) == 431, raw[:300]
        assert body_of(raw)["error"]["code"] == 431
    still_serves(srv)


@pytest.mark.parametrize("request_", [
    b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n{}",
    b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\nZZ\r\n",
    b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
], ids=["negative-length", "bad-chunk-size", "length-and-chunked"])
def test_a_request_that_cannot_be_parsed_is_400_in_the_native_shape_and_closed(srv, request_):
    s = connect(srv)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        s.sendall(request_)
    raw = read_all(s)
    assert status_of(raw) == 400, raw[:300]
    head = raw.split(b"\r\n\r\n", 1)[0].lower()
    assert b"content-type: application/json" in head and b"x-request-id: " in head
    err = body_of(raw)["error"]
    assert (err["type"], err["code"]) == ("invalid_request", 400) and err["request_id"]
    still_serves(srv)


def test_a_trailing_slash_is_404_not_a_redirect_to_the_clients_host(srv):
    r = httpx.post(srv.url + "/v1/embed/", json={"inputs": ["x"]}, headers={"Host": "evil.example"})
    assert r.status_code == 404 and "location" not in r.headers, r.headers
    assert r.json()["error"]["type"] == "not_found"
    r = httpx.get(srv.url + "/v1/models/")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def test_a_header_line_that_never_ends_holds_no_memory(srv):
    before = rss_mib(srv.proc.pid)
    socks = []
    for _ in range(8):  # 8 connections, each trying to send 32 MB of one header line
        s = connect(srv)
        s.sendall(b"GET / HTTP/1.1\r\nX-Endless: ")
        socks.append(s)
    refused = 0
    for s in socks:
        try:
            for _ in range(512):
                s.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            refused += 1
            continue
        raw = read_all(s)
        refused += status_of(raw) == 431
    assert refused == 8
    assert rss_mib(srv.proc.pid) - before < 64  # each was cut at 64 KB, not 32 MB
    still_serves(srv)


def test_connections_that_never_finish_a_request_are_closed(srv):
    idle = [connect(srv) for _ in range(20)]  # connected, nothing sent
    partial = [connect(srv) for _ in range(20)]  # half a head
    for s in partial:
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
    slow_body = connect(srv)  # a head, then a body that never arrives
    slow_body.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"inputs\":")
    t0 = time.monotonic()
    for s in [*idle, *partial]:
        raw = read_all(s)
        assert raw == b"" or status_of(raw) == 408
    assert status_of(read_all(slow_body)) == 408
    assert time.monotonic() - t0 < 8  # 1 s head and 2 s body timeouts here, loosely
    still_serves(srv)


def test_normal_keep_alive_traffic_is_unaffected(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for _ in range(3):
            assert c.post("/v1/embed", json={"inputs": ["a"]}).status_code == 200
        time.sleep(1.5)  # past the head timeout, inside uvicorn's keep-alive (5 s)
        assert c.post("/v1/embed", json={"inputs": ["b"]}).status_code == 200


def test_an_upload_aborted_mid_body_is_a_disconnect_not_a_500(srv):
    for _ in range(3):
        s = connect(srv)
        s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000\r\n\r\n{\"inputs\": [\"abc")
        time.sleep(0.2)
        s.close()
    time.sleep(0.5)
    text = srv.metrics()
    assert 'code="500"' not in text
    assert 'reason="internal"' not in text
    assert 'reason="disconnected"' in text
    assert "Traceback" not in srv.log_tail(20000)
    still_serves(srv)


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_kserve_refuses_bodies_a_cross_site_form_could_send(srv, ctype):
    body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]})
    r = httpx.post(f"{srv.url}/v2/models/tiny/infer", content=body, headers={"content-type": ctype}, timeout=30)
    assert r.status_code == 415 and "error" in r.json()
    ok = httpx.post(f"{srv.url}/v2/models/tiny/infer", content=body, timeout=30)  # tritonclient sends none
    assert ok.status_code == 200, ok.text


def test_max_client_batch_over_max_queue_is_refused_at_start(tiny_package):
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(tiny_package.parent),
                        "--port", "0"], cwd=REPO, env=clean_env(HEADWISE_MAX_QUEUE="8", HEADWISE_MAX_CLIENT_BATCH="16"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "HEADWISE_MAX_CLIENT_BATCH (16) is over HEADWISE_MAX_QUEUE (8)" in r.stderr


def test_a_stalled_upload_does_not_hold_sigterm(tiny_package, tmp_path):
    s = serve(tiny_package.parent, tmp_path)
    stalled = connect(s)
    stalled.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n{\"inputs\":")
    time.sleep(0.3)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.proc.wait(15) == 0
    assert time.monotonic() - t0 < 4  # not the 10 s grace period
    raw = read_all(stalled)
    assert raw == b"" or status_of(raw) == 503


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_drain_like_sigterm(tiny_package, tmp_path, sig):
    s = serve(tiny_package.parent, tmp_path)
    still_serves(s)
    s.signal(sig)
    assert s.proc.wait(15) == 0, s.log_tail()
    log = s.log_tail(20000)
    assert "Traceback" not in log and "KeyboardInterrupt" not in log


def _broken(pkg: Path, tmp: Path, how: str) -> Path:
    bad = tmp / how.replace(" ", "-") / pkg.name
    shutil.copytree(pkg, bad)
    manifest = json.loads((bad / "manifest.json").read_text())

    def rehash(name: str, entry: dict) -> None:
        import hashlib

        entry["sha256"] = hashlib.sha256((bad / name).read_bytes()).hexdigest()

    if how == "n_layers not a number":
        manifest["n_layers"] = "abc"
    elif how == "tokenizer not a tokenizer":
        (bad / "tokenizer.json").write_text('{"not": "a tokenizer"}')
        rehash("tokenizer.json", manifest["tokenizer"])
    elif how == "onnx not onnx":
        (bad / "fast.onnx").write_bytes(b"this is not a protobuf")
        rehash("fast.onnx", manifest["variants"]["fast"])
    (bad / "manifest.json").write_text(json.dumps(manifest))
    return bad.parent


@pytest.mark.parametrize("how, names", [("n_layers not a number", "n_layers"),
                                        ("tokenizer not a tokenizer", "tokenizer.json"),
                                        ("onnx not onnx", "fast.onnx")])
def test_a_package_that_matches_its_hashes_but_cannot_load_stops_start_up(tiny_package, tmp_path, how, names):
    models = _broken(tiny_package, tmp_path, how)
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(models), "--port", "0"],
                       cwd=REPO, env=clean_env(HEADWISE_PRECISION="fp32"), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert names in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


# What an attacker tries next.

def test_content_length_with_transfer_encoding_is_not_smuggled(srv):
    """Both framings at once (request smuggling): refused, and no second request hides in it."""
    s = connect(srv)
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + body)
    raw = read_all(s)
    assert raw.count(b"HTTP/1.1 ") == 1 and status_of(raw) == 400, raw[:300]
    still_serves(srv)


def test_deeply_nested_json_is_a_4xx(srv):
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"inputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
                 b'{"inputs": ["\xff\xfe"]}'):
        r = httpx.post(srv.url + "/v1/embed", content=body, headers={"content-type": "application/json"}, timeout=30)
        assert 400 <= r.status_code < 500 and "error" in r.json(), (r.status_code, r.text[:200])
    still_serves(srv)


def test_a_flood_of_pipelined_requests_is_answered_in_order_with_bounded_memory(srv):
    before = rss_mib(srv.proc.pid)
    s = connect(srv, timeout=60)
    n = 2000
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n" * n)
    got, deadline = b"", time.monotonic() + 60
    while got.count(b"HTTP/1.1 200") < n and time.monotonic() < deadline:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    assert got.count(b"HTTP/1.1 200") == n
    assert rss_mib(srv.proc.pid) - before < 64
    still_serves(srv)


def test_a_flood_of_connections_holds_no_more_than_max_connections(tiny_package, tmp_path):
    s = serve(tiny_package.parent, tmp_path, HEADWISE_MAX_CONNECTIONS="20")
    fds = lambda: len(list(Path(f"/proc/{s.proc.pid}/fd").iterdir()))  # noqa: E731
    before = fds()
    socks = [connect(s) for _ in range(200)]
    time.sleep(0.5)
    assert fds() - before <= 25  # the 180 past the limit were closed at once
    refused = 0
    for sock in socks[25:]:
        raw = read_all(sock)
        refused += raw == b"" or status_of(raw) == 503
    assert refused == 175
    for sock in socks:
        sock.close()
    time.sleep(1.5)  # the idle ones time out
    still_serves(s)
    s.stop()
