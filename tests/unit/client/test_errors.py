"""HeadwiseError from the error answers of docs/api.md#errors: the native body first, the other
protocols' shapes, and answers that are not JSON at all."""

from __future__ import annotations

import time

import httpx
import pytest

from headwise.client import Client, HeadwiseError
from headwise.client.errors import error_from_response


def native(status: int, kind: str, message: str) -> bytes:
    return httpx.Response(status, json={"error": {"message": message, "type": kind, "code": status}}).content


@pytest.mark.parametrize(("status", "content", "want"), [
    (404, native(404, "not_found", "model 'nope' not found"), (404, "not_found", "model 'nope' not found", None)),
    (422, native(422, "validation", "attention.layers: each index at most once"),
     (422, "validation", "attention.layers: each index at most once", "attention.layers")),
    (422, native(422, "validation", "texts[2].x: bad; inputs: bad"), (422, "validation", "texts[2].x: bad; inputs: bad", "texts[2].x")),
    (422, native(422, "validation", "model 'tiny' is an embedding model: use POST /v1/embed"),
     (422, "validation", "model 'tiny' is an embedding model: use POST /v1/embed", None)),
    (413, native(413, "too_large", "inputs: over 256"), (413, "too_large", "inputs: over 256", None)),  # only 422s name a field so
    (400, b'{"error": {"message": "\'input\' is empty", "type": "invalid_request", "code": 400, "param": "input"}}',
     (400, "invalid_request", "'input' is empty", "input")),
    (400, b'{"error": "malformed JSON", "error_type": "Validation"}', (400, "Validation", "malformed JSON", None)),
    (404, b'{"error": "model not found"}', (404, "error", "model not found", None)),
    (422, b'{"message": "documents: bad"}', (422, "error", "documents: bad", "documents")),
    (502, b"<html>Bad Gateway</html>", (502, "http_error", "<html>Bad Gateway</html>", None)),
    (500, b"", (500, "http_error", "", None)),
])
def test_error_bodies(status, content, want):
    e = error_from_response(status, content, {})
    assert (e.status, e.type, e.message, e.field) == want
    assert isinstance(e, Exception) and str(e).startswith(f"{status} {want[1]}")


def test_retry_after_is_read_when_it_is_seconds():
    assert error_from_response(429, native(429, "overloaded", "busy"), {"retry-after": "12"}).retry_after == 12.0
    assert error_from_response(503, native(503, "not_ready", "x"), {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}).retry_after is None
    assert error_from_response(500, native(500, "internal", "x"), {}).retry_after is None


@pytest.mark.parametrize(("value", "want"), [
    ("0", 0.0), (" 7 ", 7.0), ("0.5", 0.5), ("3600", 3600.0), ("86400", 3600.0), ("9" * 5000, 3600.0),
    ("inf", None), ("Infinity", None), ("nan", None), ("-5", None), ("1e309", None), ("1e3", None), ("+5", None),
    ("٣", None), ("1_0", None), ("", None),
])
def test_retry_after_is_a_finite_non_negative_number_or_none(value, want):
    """Issue 40, item 5: inf, nan, -5 and 1e309 came through as retry_after, and
    time.sleep(e.retry_after) raised. Larger than an hour is clamped; anything else is None."""
    got = error_from_response(429, native(429, "overloaded", "busy"), {"retry-after": value}).retry_after
    assert got == want
    if got is not None:
        time.sleep(got * 0)  # a value time.sleep takes


@pytest.mark.parametrize("content", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"error": {"message": ' + b"[" * 100_000 + b"]" * 100_000 + b', "type": "x"}}',
    b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"error": {"message": "m", "type": "x", "param": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
])
def test_a_deeply_nested_error_body_is_a_headwise_error(content):
    """Issue 40, item 5: json.loads (and str(), json.dumps) of a deep body raised RecursionError
    out of the call; it is a HeadwiseError whose message is the body's text, cut to 2,000."""
    e = error_from_response(502, content, {})
    assert isinstance(e, HeadwiseError) and e.status == 502 and len(e.message) <= 2000


def test_a_deeply_nested_error_answer_raises_headwise_error_from_a_call():
    deep = b"[" * 100_000 + b"]" * 100_000

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=deep, headers={"content-type": "application/json"})

    with Client("http://hw.test", transport=httpx.MockTransport(handler)) as c, pytest.raises(HeadwiseError):
        c.embed("a")


@pytest.mark.parametrize(("status", "kind"), [(401, "unauthorized"), (404, "not_found"), (413, "too_large"),
                                              (422, "validation"), (503, "not_ready")])
def test_every_method_raises_the_servers_error(status, kind):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=native(status, kind, "no"), headers={"content-type": "application/json"})

    with Client("http://hw.test", transport=httpx.MockTransport(handler)) as c:
        for call in (lambda: c.embed("a"), lambda: c.similarity("a", ["b"]), lambda: c.occlusion("a"),
                     lambda: c.rerank("q", ["a"]), lambda: c.predict("a"), lambda: c.generate("a"),
                     lambda: c.tokenize("a"), lambda: c.models(), lambda: c.model_info("m"),
                     lambda: c.head_importance("a")):
            with pytest.raises(HeadwiseError) as e:
                call()
            assert (e.value.status, e.value.type, e.value.message) == (status, kind, "no")


def test_the_error_carries_the_answers_request_id():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, content=native(422, "validation", "no"),
                              headers={"content-type": "application/json", "x-request-id": "srv-7"})

    with Client("http://hw.test", transport=httpx.MockTransport(handler)) as c, pytest.raises(HeadwiseError) as e:
        c.embed("a")
    assert e.value.request_id == "srv-7"
    assert error_from_response(500, b"", {}).request_id is None


@pytest.mark.parametrize(("status", "content", "kind"), [
    (307, b"", None),  # a redirect: this client follows none (the server sends none: a trailing slash is 404)
    (200, b"<html>not json</html>", "invalid_response"),
    (200, b"", "invalid_response"),
])
def test_an_answer_that_is_not_a_2xx_json_body_is_a_headwise_error(status, content, kind):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    with Client("http://hw.test", transport=httpx.MockTransport(handler)) as c, pytest.raises(HeadwiseError) as e:
        c.model_info("")
    assert e.value.status == status and (kind is None or e.value.type == kind)
