"""Cohere's POST /v2/embed against a real `headwise serve` (fp32, CPU, all-MiniLM-L6-v2),
driven by the real `cohere` SDK's ClientV2.embed: every embedding type, float equal to
/v1/embed's and the quantised types exactly service.api.compat.cohere's of those floats;
output_dimension; mistakes raise the SDK's typed errors with our message in Cohere's shape
(issue 29)."""

from __future__ import annotations

import base64

import cohere
import httpx
import numpy as np
import pytest
from cohere.errors import BadRequestError, NotFoundError, UnprocessableEntityError

from headwise.service.api.compat import cohere as wire
from tests.fixtures.references import CUT_EITHER_END, left_cut_reference, shortened
from tests.fixtures.references import native_embeddings as native

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TEXTS = ["hi", "A man is playing a guitar.", "naïve café — 東京 emoji 🙂"]
TYPES = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
LONG = "attention " * 400  # over max_len (256 tokens)


@pytest.fixture(scope="module")
def co(server):
    return cohere.ClientV2(api_key="x", base_url=server.url, timeout=120)


def test_every_type_through_the_sdk(co, server, model):
    ref = native(server, TEXTS)
    r = co.embed(model=model, texts=TEXTS, input_type="search_document", embedding_types=TYPES)
    assert r.response_type == "embeddings_by_type" and r.texts == TEXTS and len(r.id) == 36
    e = r.embeddings
    got = np.array(e.float_, dtype=np.float32)
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, ref, atol=1e-6)
    assert np.array_equal(got, ref)  # the same inference, the same batch: the same bits
    assert e.int8 == wire.to_int8(ref).tolist() and e.uint8 == wire.to_uint8(ref).tolist()
    assert e.binary == wire.to_binary(ref).tolist() and e.ubinary == wire.to_ubinary(ref).tolist()
    assert len(e.ubinary[0]) == 384 // 8 and all(-128 <= x <= 127 for row in e.binary for x in row)
    decoded = np.stack([np.frombuffer(base64.b64decode(s), dtype="<f4") for s in e.base64])
    assert np.array_equal(decoded, ref)
    tokens = sum(len(d["ids"]) for d in server.post("/v1/tokenize", {"inputs": TEXTS}).json()["data"])
    assert r.meta.api_version.version == "2" and r.meta.billed_units.input_tokens == tokens


def test_quantised_types_keep_the_ranking(co, model):
    # not a wire property, a sanity bound: int8 and binary similarities rank as float's do
    texts = ["A man is playing a guitar.", "A man plays an instrument.", "The stock market fell today."]
    e = co.embed(model=model, texts=texts, input_type="search_query", embedding_types=["float", "int8", "ubinary"]).embeddings
    f, q = np.float64(e.float_), np.float64(e.int8)
    assert np.argsort(f[0] @ f.T).tolist() == np.argsort(q[0] @ q.T).tolist()
    bits = np.unpackbits(np.uint8(e.ubinary), axis=1)
    hamming = (bits[0] != bits).sum(axis=1)
    assert hamming[1] < hamming[2]


def test_default_type_and_input_types(co, server, model):
    ref = native(server, TEXTS)
    for input_type in ("search_document", "search_query", "classification", "clustering"):
        r = co.embed(model=model, texts=TEXTS, input_type=input_type)
        assert r.embeddings.int8 is None and np.array_equal(np.float32(r.embeddings.float_), ref)
    raw = server.post("/v2/embed", {"model": model, "texts": TEXTS}).json()  # input_type left out
    assert list(raw["embeddings"]) == ["float"] and np.array_equal(np.float32(raw["embeddings"]["float"]), ref)


@pytest.mark.parametrize("n", [8, 256, 384])
def test_output_dimension_cuts_and_renormalises(matryoshka_server, model, n):
    co = cohere.ClientV2(api_key="x", base_url=matryoshka_server.url, timeout=120)
    ref = native(matryoshka_server, TEXTS)
    want = ref if n == 384 else np.stack([shortened(v, n) for v in ref])
    r = co.embed(model=model, texts=TEXTS, input_type="search_document", output_dimension=n,
                 embedding_types=["float", "int8", "binary"])
    got = np.float32(r.embeddings.float_)
    assert got.shape == (3, n) and np.array_equal(got, want)
    assert r.embeddings.int8 == wire.to_int8(want).tolist() and r.embeddings.binary == wire.to_binary(want).tolist()


def test_truncate(co, server, model):
    r = co.embed(model=model, texts=[LONG], input_type="search_document")  # END, the default
    assert np.array_equal(np.float32(r.embeddings.float_), native(server, [LONG]))
    with pytest.raises(UnprocessableEntityError) as e:
        co.embed(model=model, texts=["hi", LONG], input_type="search_document", truncate="NONE")
    assert "texts[1]" in e.value.body["message"] and "truncate: END or START" in e.value.body["message"]
    start = co.embed(model=model, texts=[CUT_EITHER_END], input_type="search_document", truncate="START")
    got = np.float32(start.embeddings.float_)[0].astype(np.float64)
    want = left_cut_reference([CUT_EITHER_END])[0].astype(np.float64)
    assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) >= 0.99999  # its last tokens kept
    short = co.embed(model=model, texts=TEXTS, input_type="search_document", truncate="START")
    assert np.array_equal(np.float32(short.embeddings.float_), native(server, TEXTS))


def test_mistakes_raise_the_sdks_errors_in_cohere_shape(co, model):
    cases = [
        (BadRequestError, dict(model=model, texts=[]), "'texts' is empty"),
        (UnprocessableEntityError, dict(model=model, texts=["hi"], embedding_types=["int4"]), "embedding_types"),
        (UnprocessableEntityError, dict(model=model, texts=["hi"], output_dimension=0), "output_dimension"),
        (UnprocessableEntityError, dict(model=model, texts=["hi"], output_dimension=385), "1..384"),
        (BadRequestError, dict(model=model, texts=["hi"], output_dimension=256), "HEADWISE_MATRYOSHKA_DIMENSIONS"),
        (UnprocessableEntityError, dict(model=model, texts=["hi"], output_dimension=100,
                                        embedding_types=["ubinary"]), "multiple of 8"),
        (NotFoundError, dict(model="embed-v4.0", texts=["hi"]), "'model'"),
        (UnprocessableEntityError, dict(model=model, images=["data:image/png;base64,AAAA"]), "images"),
        (UnprocessableEntityError, dict(model=model, texts=["hi"], input_type="image"), "input_type"),
    ]
    for error, kw, words in cases:
        kw.setdefault("input_type", "search_document")
        with pytest.raises(error) as e:
            co.embed(**kw)
        assert set(e.value.body) == {"message"} and words in e.value.body["message"], (kw, e.value.body)


def test_missing_model_and_raw_shapes(server, model):
    url = server.url + "/v2/embed"
    for body, status, words in [({"texts": ["hi"]}, 422, "model"),
                                ({"model": model}, 400, "'texts' is required"),
                                ({"model": model, "texts": ["hi"], "truncate": "LEFT"}, 422, "truncate"),
                                ({"model": model, "texts": ["hi"], "max_tokens": 16}, 422, "max_tokens")]:
        r = httpx.post(url, json=body, timeout=60)
        assert r.status_code == status and set(r.json()) == {"message"} and words in r.json()["message"], r.text
    r = httpx.post(url, content=b'{"model": ', headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400 and set(r.json()) == {"message"}
