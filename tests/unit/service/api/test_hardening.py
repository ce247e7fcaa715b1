"""Issue 8, in-process: the API key is compared with hmac.compare_digest, docs follow
HEADWISE_DOCS, fault injection is off unless asked for, error bodies stay short."""

from __future__ import annotations

import hmac

from starlette.testclient import TestClient

from headwise.service.api.app import create_app
from headwise.service.settings import Settings, load_settings
from tests.unit.fakes import FakeBackend, make_package


def test_defaults(monkeypatch):
    for k in ("HEADWISE_DOCS", "HEADWISE_FAULT_INJECTION"):
        monkeypatch.delenv(k, raising=False)
    s = load_settings()
    assert s.docs is True and s.fault_injection is False and s.max_input_chars == 100_000
    monkeypatch.setenv("HEADWISE_DOCS", "false")
    assert load_settings().docs is False


def test_key_compared_in_constant_time_and_docs_hidden(tmp_path, monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    pkg = make_package(tmp_path / "models")
    app = create_app(Settings(models_dir=pkg.parent, api_key="s3cret", docs=False), backend_factory=FakeBackend)
    with TestClient(app) as c:
        for token in ("s3c", "s3cret-no", "wrong"):
            r = c.post("/v1/tokenize", json={"inputs": "x"}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert len(calls) == 3 and all(b == b"s3cret" for _, b in calls)
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert c.get(path).status_code == 404
        assert c.get("/health/live").status_code == 200


def test_long_unknown_field_is_not_repeated(tmp_path):
    pkg = make_package(tmp_path / "models")
    app = create_app(Settings(models_dir=pkg.parent), backend_factory=FakeBackend)
    with TestClient(app) as c:
        r = c.post("/v1/tokenize", json={"inputs": "x", "k" * 100_000: 1, "model_typo": 2})
        assert r.status_code == 422 and len(r.content) < 400
        assert "model_typo" in r.text and "kkkkkkkkkk" not in r.text
