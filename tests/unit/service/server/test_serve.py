"""`headwise serve` (server.serve): the fast path and the bounded protocol only at the framework
versions they were written for, else the plain app with a warning; the protocol's bounds are
the settings', handed to it rather than read from the environment."""

from __future__ import annotations

import argparse
import functools
import signal

import pytest
import uvicorn

from headwise.service.server import fastpath, http_protocol, serve, versions


class Recorder:
    """uvicorn.Server that records its config instead of serving."""

    last = None

    def __init__(self, config):
        self.config, self.started = config, True
        Recorder.last = self

    def run(self):
        pass


@pytest.fixture
def run_serve(tiny_package, monkeypatch):
    monkeypatch.setattr(uvicorn, "Server", Recorder)
    for var in ("HEADWISE_WORKERS", "HEADWISE_MODELS_DIR", "HEADWISE_PORT", "HEADWISE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HEADWISE_PRECISION", "fp32")
    monkeypatch.setenv("HEADWISE_PROVIDER", "cpu")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def run(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        args = argparse.Namespace(models=str(tiny_package.parent), host=None, port=None, workers=1,
                                  log_level="warning", access_log=False)
        try:
            assert serve.main(args) == 0
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        return Recorder.last.config

    return run


def test_at_the_versions_written_for_the_fast_path_and_the_bounds_from_settings(run_serve):
    config = run_serve(HEADWISE_MAX_HEAD_BYTES="4096", HEADWISE_HEAD_TIMEOUT_S="7")
    assert isinstance(config.http, functools.partial) and config.http.func is http_protocol.HttpProtocol
    bounds = config.http.keywords["bounds"]
    assert (bounds.max_head_bytes, bounds.head_timeout_s) == (4096, 7.0)
    assert isinstance(config.app, fastpath.Entry) and ("POST", "/v1/embed") in config.app.app.state.shortcuts
    assert config.proxy_headers is False  # no access log: nothing reads X-Forwarded-For


def test_other_versions_serve_the_plain_app_and_say_so(run_serve, monkeypatch, capsys):
    monkeypatch.setitem(versions.WRITTEN_FOR, "uvicorn", "0.0.1")
    config = run_serve()
    assert config.http == "httptools" and config.app.state.shortcuts == {}
    err = capsys.readouterr().err
    assert "uvicorn 0.54.0 (written for 0.0.1)" in err and "plain FastAPI app" in err
