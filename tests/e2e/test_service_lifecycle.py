"""Start-up and shutdown of a real server: 503 until warm, SIGTERM drains and exits 0,
a bad package stops `headwise serve` with a clear message."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.e2e.conftest import REPO, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_not_ready_until_warm(start_server):
    srv = start_server(wait=None)
    seen, embed_while_warming = [], None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            code = httpx.get(srv.url + "/health/ready", timeout=5).status_code
        except httpx.TransportError:
            assert srv.proc.poll() is None, srv.log_tail()
            time.sleep(0.01)
            continue
        seen.append(code)
        if code == 503 and embed_while_warming is None:
            embed_while_warming = httpx.post(srv.url + "/v1/embed", json={"inputs": "x"}, timeout=30)
        if code == 200:
            break
        time.sleep(0.01)
    assert seen and seen[0] == 503 and seen[-1] == 200, seen
    assert set(seen) == {503, 200}
    assert embed_while_warming.status_code == 503
    assert embed_while_warming.json()["error"]["type"] == "not_ready"
    assert httpx.get(srv.url + "/health/live").status_code == 200
    assert httpx.post(srv.url + "/v1/embed", json={"inputs": "x"}, timeout=30).status_code == 200
    srv.stop()


def test_sigterm_drains_in_flight_requests_and_exits_0(start_server):
    srv = start_server(env={"HEADWISE_GRACE_SECONDS": "20"})
    result = {}

    def long_request():
        body = {"inputs": [("word " * 300) + str(i) for i in range(64)], "attention": {"layers": [0], "heads": [0]}}
        result["r"] = httpx.post(srv.url + "/v1/embed", json=body, timeout=120)

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.5)  # in flight
    t0 = time.monotonic()
    srv.signal()
    time.sleep(0.05)
    with contextlib.suppress(httpx.TransportError):  # refused (listener closed) or 503
        assert httpx.get(srv.url + "/health/ready", timeout=5).status_code == 503
    t.join(60)
    assert result["r"].status_code == 200 and len(result["r"].json()["data"]) == 64
    assert srv.proc.wait(30) == 0, srv.log_tail()
    assert time.monotonic() - t0 < 20


def test_bad_package_is_refused_with_a_clear_message(default_package, tmp_path):
    bad = tmp_path / default_package.name
    shutil.copytree(default_package, bad)
    with open(bad / "tokenizer.json", "ab") as fh:
        fh.write(b"\n")
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(bad), "--port", "0"],
                       cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "tokenizer.json" in r.stderr and "sha256" in r.stderr
    assert "Traceback" not in r.stderr
