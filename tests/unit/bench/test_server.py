"""bench.server: the one server starter (a stdlib HTTP server stands in for headwise)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import server as bench_server
from bench.server import Server, clean_env, free_port, python_of, start_headwise

# Answers 200 on /ready and 404 elsewhere; prints one line so that the log has something.
READY = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/ready" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def stand_in(tmp_path: Path | None, ready_path: str = "/ready", code: str = READY, **kw) -> Server:
    port = free_port()
    return Server("stand-in", [sys.executable, "-c", code, str(port)], {}, port, ready_path, tmp_path, **kw)


def test_clean_env_drops_every_headwise_setting_then_adds_the_harness_ones(monkeypatch):
    monkeypatch.setenv("HEADWISE_WORKERS", "4")
    monkeypatch.setenv("BENCH_KEEP", "1")
    env = clean_env({"HEADWISE_PROVIDER": "cpu"})
    assert env["BENCH_KEEP"] == "1" and env["HEADWISE_PROVIDER"] == "cpu" and "HEADWISE_WORKERS" not in env
    assert "HEADWISE_WORKERS" not in clean_env()


def test_python_of_a_tree_is_its_own_venv_when_it_has_one(tmp_path):
    assert python_of(None) == sys.executable and python_of(tmp_path) == sys.executable
    own = tmp_path / ".venv" / "bin" / "python"
    own.parent.mkdir(parents=True)
    own.touch()
    assert python_of(tmp_path) == str(own)


@pytest.mark.parametrize(("workers", "streak"), [(None, 64), ("auto", 64), ("1", 1), ("2", 16), ("8", 64)])
def test_ready_takes_a_streak_of_answers_by_workers(workers, streak, monkeypatch):
    monkeypatch.setattr(bench_server.subprocess, "Popen", lambda *a, **k: None)
    env = {} if workers is None else {"HEADWISE_WORKERS": workers}
    assert Server("s", [], env, 1, "/", None)._streak_for_workers() == streak


def test_start_headwise_serves_this_checkouts_cli_with_a_clean_environment(monkeypatch, tmp_path):
    seen = {}

    def popen(argv, **kw):
        seen.update(argv=argv, **kw)

    monkeypatch.setattr(bench_server.subprocess, "Popen", popen)
    monkeypatch.setenv("HEADWISE_THREADS", "3")
    s = start_headwise(tmp_path / "models", "int8", "cpu", tmp_path, {"HEADWISE_MAX_QUEUE": "16"}, name="x")
    assert seen["argv"][:6] == [sys.executable, "-m", "headwise.cli", "serve", "--models", str(tmp_path / "models")]
    assert seen["argv"][seen["argv"].index("--port") + 1] == str(s.port) and s.url.endswith(f":{s.port}")
    assert seen["env"]["HEADWISE_PRECISION"] == "int8" and seen["env"]["HEADWISE_MAX_QUEUE"] == "16"
    assert "HEADWISE_THREADS" not in seen["env"] and seen["start_new_session"] and s.log == tmp_path / "x.log"
    s._log.close()


def test_a_server_is_ready_logs_and_stops(tmp_path):
    s = stand_in(tmp_path, ready_streak=3)
    try:
        s.wait_ready(30)
        assert bench_server.http("GET", s.url + "/ready")[0] == 200
    finally:
        s.stop()
    assert s.proc.poll() is not None and "listening" in s.tail()
    s.stop()  # again: harmless


def test_a_server_without_a_log_folder_drops_its_output(tmp_path):
    s = stand_in(None, ready_streak=1)
    try:
        s.wait_ready(30)
    finally:
        s.stop()
    assert s.log is None and s.tail() == ""


def test_a_server_that_exits_is_an_error_with_its_log(tmp_path):
    s = stand_in(tmp_path, code="print('no model here'); raise SystemExit(3)")
    with pytest.raises(RuntimeError, match=r"stand-in exited with 3:\n.*no model here"):
        s.wait_ready(30)


def test_a_server_never_ready_is_stopped(tmp_path):
    s = stand_in(tmp_path, ready_path="/never", ready_streak=1)
    with pytest.raises(RuntimeError, match="/never not 200 within 1 s"):
        s.wait_ready(1)
    assert s.proc.poll() is not None
