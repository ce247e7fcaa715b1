"""service.logs: which request ids are taken, and the two log formats."""

import json
import logging
import logging.config

import pytest

from headwise.service.logs import JsonFormatter, RequestContext, accepted_id, request_id
from headwise.service.server.serve import log_config


@pytest.mark.parametrize("raw", [b"abc-123", b"x" * 128, b"trace:4bf92f35/00f067aa"])
def test_a_plausible_client_id_is_kept(raw):
    assert accepted_id(raw) == raw.decode()


@pytest.mark.parametrize("raw", [None, b"", b"x" * 129, b"has space", b"line\nbreak", "caf\u00e9".encode()])
def test_anything_else_gets_a_new_id(raw):
    rid = accepted_id(raw)
    assert len(rid) == 32 and int(rid, 16) >= 0 and rid != accepted_id(raw)


def _record(msg="hello %s", args=("world",), name="headwise.service"):
    record = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)
    RequestContext().filter(record)
    return record


def test_json_lines_carry_the_request_id():
    token = request_id.set("req-1")
    try:
        line = JsonFormatter().format(_record())
    finally:
        request_id.reset(token)
    out = json.loads(line)
    assert out["message"] == "hello world" and out["request_id"] == "req-1" and out["level"] == "INFO"
    assert out["logger"] == "headwise.service" and "trace_id" in out and out["time"].endswith("Z")
    assert json.loads(JsonFormatter().format(_record()))["request_id"] is None  # outside a request


def test_json_access_lines_name_their_fields():
    record = _record('%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "POST", "/v1/embed", "1.1", 200), "uvicorn.access")
    out = json.loads(JsonFormatter().format(record))
    assert out["method"] == "POST" and out["path"] == "/v1/embed" and out["status_code"] == 200


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_config_is_a_valid_dict_config(fmt, capsys):
    logging.config.dictConfig(log_config("info", fmt))
    token = request_id.set("req-2")
    try:
        logging.getLogger("headwise.service").warning("something %d", 7)
    finally:
        request_id.reset(token)
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    err = capsys.readouterr().err.strip()
    if fmt == "json":
        assert json.loads(err)["request_id"] == "req-2"
    else:
        assert "something 7" in err and err.endswith("request_id=req-2")
