"""Cohere's POST /v2/embed in-process with the fake backend: the embedding types pinned on
hand-made vectors (service.api.compat.cohere), the answer's shape, and every refusal in
Cohere's error shape ({"message"}) naming its field."""

import base64

import numpy as np
import pytest

from headwise.service.api.compat import cohere
from tests.unit.fakes import D_MODEL, SECRET_TEXT, client_for, wait_ready

X = np.array([[1.0, -1.0, 0.0, 0.5, -0.5, 0.25, 1.5, -0.004]], dtype=np.float32)


def cohere_error(r, status: int, *words: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"message"} and body["message"], body
    assert "Traceback" not in r.text and SECRET_TEXT not in r.text
    for w in words:
        assert w in body["message"], body
    return body["message"]


def v1(client, texts) -> np.ndarray:
    return np.float32([d["embedding"] for d in client.post("/v1/embed", json={"inputs": texts}).json()["data"]])


def v2(client, **body):
    return client.post("/v2/embed", json={"model": "tiny", "input_type": "search_document", **body})


# -- the types, by hand ------------------------------------------------------------------------------

def test_int8_and_uint8_one_fixed_range_rounded_half_to_even():
    # 0.5·127 = 63.5 → 64 and -63.5 → -64 (half to even), 1.5 clipped to 1, -0.004·127 → -1
    assert cohere.to_int8(X).tolist() == [[127, -127, 0, 64, -64, 32, 127, -1]]
    assert cohere.to_int8(X).dtype == np.int8
    assert cohere.to_uint8(X).tolist() == [[255, 1, 128, 192, 64, 160, 255, 127]]
    assert cohere.to_uint8(X).dtype == np.uint8
    assert cohere.to_int8(np.float32([[-7.0, 0.0039]])).tolist() == [[-127, 0]]


def test_binary_packs_sign_bits_first_dimension_most_significant():
    # bits (> 0): 1 0 0 1 0 1 1 0 = 0b10010110 = 150; zero is not positive
    assert cohere.to_ubinary(X).tolist() == [[150]]
    assert cohere.to_binary(X).tolist() == [[150 - 128]]
    m = np.float32([[0.1] * 8 + [-0.1] * 8, [0.0] * 7 + [1e-9] + [-1.0] + [2.0] * 7])
    assert cohere.to_ubinary(m).tolist() == [[255, 0], [1, 127]]
    assert cohere.to_binary(m).tolist() == [[127, -128], [-127, -1]]
    assert cohere.to_binary(m).dtype == np.int8


def test_binary_families_equal_sentence_transformers():
    quantize = pytest.importorskip("sentence_transformers.util.quantization").quantize_embeddings
    m = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    assert np.array_equal(cohere.to_ubinary(m), quantize(m, precision="ubinary"))
    assert np.array_equal(cohere.to_binary(m), quantize(m, precision="binary"))


def test_base64_is_float32_little_endian():
    assert cohere.to_base64(np.float32([[1.0, -2.0]])) == ["AACAPwAAAMA="]
    m = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    for s, row in zip(cohere.to_base64(m), m, strict=True):
        assert np.array_equal(np.frombuffer(base64.b64decode(s), dtype="<f4"), row)


def test_types_asked_default_float_and_once_each():
    assert cohere.types_asked(None) == ["float"]
    assert cohere.types_asked(["int8", "float", "int8"]) == ["int8", "float"]
    assert list(cohere.embeddings_by_type(X, ["ubinary", "float"])) == ["ubinary", "float"]


# -- the route ---------------------------------------------------------------------------------------

def test_answer_shape_and_float_equals_v1_embed(client):
    texts = ["the cat sat", "a dog"]
    r = v2(client, texts=texts)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "embeddings", "texts", "meta", "response_type"}
    assert body["response_type"] == "embeddings_by_type" and body["texts"] == texts
    assert list(body["embeddings"]) == ["float"]
    assert np.array_equal(np.float32(body["embeddings"]["float"]), v1(client, texts))
    tokens = sum(len(d["ids"]) for d in client.post("/v1/tokenize", json={"inputs": texts}).json()["data"])
    assert body["meta"] == {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}}
    assert len(body["id"]) == 36 and body["id"] != v2(client, texts=texts).json()["id"]


def test_every_type_from_the_same_floats(client):
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    e = v2(client, texts=["the cat sat", "a dog"], embedding_types=types).json()["embeddings"]
    assert list(e) == types
    f = np.float32(e["float"])
    assert e["int8"] == cohere.to_int8(f).tolist() and e["uint8"] == cohere.to_uint8(f).tolist()
    assert e["binary"] == cohere.to_binary(f).tolist() and e["ubinary"] == cohere.to_ubinary(f).tolist()
    assert e["base64"] == cohere.to_base64(f) and len(e["ubinary"][0]) == D_MODEL // 8
    only = v2(client, texts=["a dog"], embedding_types=["int8"]).json()["embeddings"]
    assert list(only) == ["int8"] and only["int8"] == [e["int8"][1]]


def test_output_dimension_cuts_then_normalises_for_a_matryoshka_model(package):
    with client_for(package, matryoshka_dimensions=(3,)) as client:  # HEADWISE_MATRYOSHKA_DIMENSIONS=3
        wait_ready(client)
        full = v1(client, ["the cat sat"])[0].astype(np.float64)
        r = v2(client, texts=["the cat sat"], output_dimension=3)
        np.testing.assert_allclose(r.json()["embeddings"]["float"][0], full[:3] / np.linalg.norm(full[:3]),
                                   atol=1e-6)
        whole = v2(client, texts=["the cat sat"], output_dimension=D_MODEL).json()["embeddings"]["float"]
        assert np.array_equal(np.float32(whole), v1(client, ["the cat sat"]))
        cohere_error(v2(client, texts=["a"], output_dimension=2), 400, "output_dimension", "Matryoshka", "(3;")


def test_output_dimension_is_refused_for_a_model_without_matryoshka_dimensions(client):
    message = cohere_error(v2(client, texts=["a"], output_dimension=3), 400, "output_dimension",
                           "HEADWISE_MATRYOSHKA_DIMENSIONS", "--matryoshka-dimensions")
    assert "no Matryoshka dimensions" in message
    whole = v2(client, texts=["a"], output_dimension=D_MODEL)  # the whole embedding is no cut
    assert np.array_equal(np.float32(whole.json()["embeddings"]["float"]), v1(client, ["a"]))


@pytest.mark.parametrize("input_type", [None, "search_document", "search_query", "classification", "clustering"])
def test_input_type_does_not_change_the_embedding_of_a_model_without_prompts(client, input_type):
    body = {"model": "tiny", "texts": ["a dog"], **({"input_type": input_type} if input_type else {})}
    r = client.post("/v2/embed", json={**body, "priority": 3, "max_tokens": 32})
    assert np.array_equal(np.float32(r.json()["embeddings"]["float"]), v1(client, ["a dog"]))


def test_truncate_end_and_start_cut_and_none_refuses(client):
    long = "dog " + " ".join(["cat"] * 60) + " bird"  # 64 tokens, over max_len 32
    cut = v2(client, texts=[long]).json()["embeddings"]["float"]
    assert np.array_equal(np.float32(cut), v1(client, [long]))
    cohere_error(v2(client, texts=["a", long], truncate="NONE"), 422, "texts[1]", "truncate: END or START")
    start = v2(client, texts=[long], truncate="START").json()["embeddings"]["float"]
    assert start != cut  # the start cut away: its last tokens kept
    ok = v2(client, texts=["a dog"], truncate="START")  # nothing to cut: the same answer
    assert np.array_equal(np.float32(ok.json()["embeddings"]["float"]), v1(client, ["a dog"]))


@pytest.mark.parametrize(("extra", "status", "words"), [
    ({"texts": []}, 400, ("'texts' is empty",)),
    ({"texts": None}, 400, ("'texts' is required",)),
    ({"texts": "a dog"}, 422, ("texts",)),
    ({"texts": [SECRET_TEXT, 3]}, 422, ("texts.1",)),
    ({"embedding_types": ["float", "int4"]}, 422, ("embedding_types.1",)),
    ({"embedding_types": []}, 422, ("embedding_types", "empty")),  # issue 40, item 7: was taken as ["float"]
    ({"output_dimension": 0}, 422, ("output_dimension", f"1..{D_MODEL}")),
    ({"output_dimension": D_MODEL + 1}, 422, ("output_dimension",)),
    ({"output_dimension": 4, "embedding_types": ["ubinary"]}, 422, ("output_dimension", "multiple of 8")),
    ({"truncate": "end"}, 422, ("truncate",)),
    ({"max_tokens": 8}, 422, ("max_tokens", "32")),
    ({"images": ["data:image/png;base64,AAAA"]}, 422, ("images",)),
    ({"input_type": "image"}, 422, ("input_type",)),
    ({"inputs": [{"content": [{"type": "text", "text": "a"}]}]}, 422, ("inputs", "texts")),
    ({"model": "nope"}, 404, ("'model'", "tiny")),
    ({"model": None}, 422, ("model",)),
    ({"colour": "blue"}, 422, ("colour",)),
])
def test_refusals_in_cohere_shape(client, extra, status, words):
    body = {"model": "tiny", "texts": ["a dog"], **extra}
    cohere_error(client.post("/v2/embed", json={k: v for k, v in body.items() if v is not None}), status, *words)


def test_missing_model_and_malformed_body(client):
    cohere_error(client.post("/v2/embed", json={"texts": ["a"]}), 422, "model")
    cohere_error(client.post("/v2/embed", content=b"{", headers={"content-type": "application/json"}), 400, "JSON")


def test_response_bound_counts_every_type(package):
    from headwise.service.api.sizes import JSON, echoed_bytes
    from headwise.service.engine.size import Size
    from tests.unit.fakes import client_for, wait_ready

    texts = ["the cat sat on the mat"] * 4  # 8 tokens each
    floats = JSON.bytes(Size(values=4 * D_MODEL, tokens=4 * 8))  # 4 sentence embeddings, their tokens
    bound = echoed_bytes(texts) + cohere.ENVELOPE_BYTES + floats
    with client_for(package, max_response_bytes=bound + 2 * floats - 1) as c:  # room for 2 types, not 3
        wait_ready(c)
        assert v2(c, texts=texts, embedding_types=["int8", "binary"]).status_code == 200
        cohere_error(v2(c, texts=texts, embedding_types=["float", "int8", "ubinary"]), 413, "embedding_types")
