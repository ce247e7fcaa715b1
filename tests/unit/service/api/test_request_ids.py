"""X-Request-Id: taken from the client or made, echoed on every answer, and in the error bodies
in our own shape (native); OpenAI's, vLLM's, TEI's, Cohere's and KServe's keep theirs exactly."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.unit.fakes import GatedBackend, client_for


def _id(r) -> str:
    rid = r.headers["x-request-id"]
    assert rid
    return rid


def test_a_client_id_is_echoed_and_one_is_made_otherwise(client):
    r = client.post("/v1/embed", json={"inputs": "hello"}, headers={"X-Request-Id": "mine-1"})
    assert r.status_code == 200 and _id(r) == "mine-1"
    a, b = (client.post("/v1/embed", json={"inputs": "hello"}) for _ in range(2))
    assert len(_id(a)) == 32 and _id(a) != _id(b)
    bad = client.post("/v1/embed", json={"inputs": "hello"}, headers={"X-Request-Id": "two words"})
    assert _id(bad) != "two words" and len(_id(bad)) == 32


@pytest.mark.parametrize("path, body, where", [
    ("/v1/embed", {"inputs": []}, "native"),
    ("/v1/embeddings", {"input": [], "model": "tiny"}, "openai"),
    ("/embed", {"inputs": []}, "tei"),
    ("/v2/models/tiny/infer", {"inputs": []}, "kserve"),
])
def test_errors_carry_it(client, path, body, where):
    r = client.post(path, json=body, headers={"X-Request-Id": "err-1"})
    assert 400 <= r.status_code < 500 and _id(r) == "err-1"
    if where == "native":
        assert r.json()["error"]["request_id"] == "err-1"
    else:  # the protocol's documented shape, exactly: the header only
        assert "err-1" not in r.text


def test_413_429_and_503_carry_it(package):
    with client_for(package, max_body_bytes=1024) as c:
        r = c.post("/v1/embed", content=b'{"inputs": "' + b"x" * 2000 + b'"}', headers={
            "content-type": "application/json", "X-Request-Id": "big"})
        assert r.status_code == 413 and _id(r) == "big" and r.json()["error"]["request_id"] == "big"
    GatedBackend.gate.clear()
    with client_for(package, backend=GatedBackend) as c:
        r = c.post("/v1/embed", json={"inputs": "x"}, headers={"X-Request-Id": "early"})
        assert r.status_code == 503 and _id(r) == "early" and r.json()["error"]["request_id"] == "early"
        GatedBackend.gate.set()


def test_an_unhandled_error_is_a_500_with_the_id(package, monkeypatch):
    from headwise.service.engine import Engine

    def broken(*a, **k):
        raise RuntimeError("a bug")

    with client_for(package) as c:
        monkeypatch.setattr(Engine, "embed", broken)
        r = c.post("/v1/embed", json={"inputs": "x"}, headers={"X-Request-Id": "bug-1"})
    assert r.status_code == 500 and _id(r) == "bug-1"
    assert r.json()["error"] == {"message": "internal server error", "type": "internal", "code": 500,
                                 "request_id": "bug-1"}


def test_each_concurrent_request_gets_its_own(client):
    def one(i):
        r = client.post("/v1/embed", json={"inputs": f"text {i}"}, headers={"X-Request-Id": f"c-{i}"})
        return _id(r) == f"c-{i}"

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(32)))
