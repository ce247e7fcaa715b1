"""HeadwiseError from the error answers of docs/api.md#errors: the native body first, the other
protocols' shapes, and answers that are not JSON at all."""

from __future__ import annotations

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
