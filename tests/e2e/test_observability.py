"""Request ids and JSON logs on a real `headwise serve` with the real model, in both engine
modes (docs/observability.md): every answer carries X-Request-Id (the client's, or a made one),
error bodies with room carry it, and with HEADWISE_LOG_FORMAT=json every line of every process
parses as JSON, the access lines carrying each request's id."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.e2e.conftest import ENGINE_MODES

pytestmark = pytest.mark.slow

MODES = ENGINE_MODES


@pytest.fixture(scope="module", params=list(MODES))
def srv(request, start_server):
    return start_server(env={"HEADWISE_LOG_FORMAT": "json", "HEADWISE_MAX_BODY_BYTES": "65536",
                             **MODES[request.param]}, args=("--access-log",))


def _lines(srv) -> list[dict]:
    text = srv.log.read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_answer_carries_its_id(srv):
    ok = srv.post("/v1/embed", json={"inputs": ["hello there"]}, headers={"X-Request-Id": "e2e-ok"})
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "e2e-ok"
    made = srv.post("/v1/embeddings", json={"input": "hello"})
    assert made.status_code == 200 and len(made.headers["x-request-id"]) == 32
    bad = srv.post("/v1/embeddings", json={"input": []}, headers={"X-Request-Id": "e2e-bad"})
    assert bad.status_code in (400, 422) and bad.headers["x-request-id"] == "e2e-bad"
    assert set(bad.json()["error"]) == {"message", "type", "code", "param"}  # OpenAI's shape, exactly
    native = srv.post("/v1/embed", json={"inputs": []}, headers={"X-Request-Id": "e2e-native"})
    assert native.status_code == 400 and native.json()["error"]["request_id"] == "e2e-native"
    tei = srv.post("/embed", json={"inputs": []}, headers={"X-Request-Id": "e2e-tei"})
    assert tei.status_code == 400 and tei.headers["x-request-id"] == "e2e-tei"
    big = httpx.post(srv.url + "/v1/embed", content=b'{"inputs": "' + b"a " * 40_000 + b'"}',
                     headers={"content-type": "application/json", "X-Request-Id": "e2e-big"}, timeout=30)
    assert big.status_code == 413 and big.headers["x-request-id"] == "e2e-big"
    missing = srv.get("/no/such/route", headers={"X-Request-Id": "e2e-404"})
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "e2e-404"
    hostile = srv.post("/v1/embed", json={"inputs": "x"}, headers={"X-Request-Id": "a\tb"})
    assert hostile.headers["x-request-id"] != "a\tb"



def test_the_clients_error_names_the_request(srv):
    from headwise.client import Client, HeadwiseError

    with Client(srv.url) as c, pytest.raises(HeadwiseError) as e:
        c.embed([])
    assert e.value.status == 400 and e.value.request_id and len(e.value.request_id) == 32


def test_json_logs_parse_and_carry_the_id(srv):
    for i in range(3):
        srv.post("/v1/embed", json={"inputs": f"line {i}"}, headers={"X-Request-Id": f"log-{i}"})
    deadline = time.monotonic() + 10
    while True:  # the access lines are written as the answers go out: wait for the last
        lines = _lines(srv)  # every line parses: a line that is not JSON fails here
        access = {line["request_id"]: line for line in lines if line["logger"] == "uvicorn.access"}
        if all(f"log-{i}" in access for i in range(3)) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for i in range(3):
        line = access[f"log-{i}"]
        assert line["method"] == "POST" and line["path"] == "/v1/embed" and line["status_code"] == 200
        assert line["level"] == "INFO" and line["time"].endswith("Z")
    assert all({"time", "level", "logger", "message", "request_id", "trace_id"} <= set(line) for line in lines)
    loggers = {line["logger"] for line in lines}
    if srv.env.get("HEADWISE_ENGINE") == "process":  # the supervisor and the engine write JSON too
        assert {"headwise.supervisor", "headwise.service"} <= loggers, loggers
