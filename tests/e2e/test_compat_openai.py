"""OpenAI-compatible POST /v1/embeddings and GET /v1/models against a real `headwise serve`
(fp32, CPU), driven by the real `openai` client: float, base64, dimensions and token-id inputs
equal /v1/embed's, vLLM's normalize, embed_dtype and endianness as vLLM answers them; models.list() and models.retrieve() read OpenAI's model objects; mistakes
raise the client's errors with our message (issues 5, 21)."""

from __future__ import annotations

import base64
import json
from datetime import datetime

import httpx
import numpy as np
import openai
import pytest

from tests.fixtures.references import native_embeddings as native
from tests.fixtures.references import shortened

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["hi", "A man is playing a guitar.", "naïve café — 東京 emoji 🙂"]
KEY = "compat-key-42"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_float_equals_native(client, server, model):
    r = client.embeddings.create(model=model, input=TEXTS, encoding_format="float", user="someone")
    assert r.object == "list" and r.model == model and [d.index for d in r.data] == [0, 1, 2]
    assert np.array_equal(np.array([d.embedding for d in r.data], dtype=np.float32), native(server, TEXTS))
    tokens = sum(len(d["tokens"]) for d in server.post("/v1/tokenize", {"inputs": TEXTS}).json()["data"])
    assert r.usage.prompt_tokens == r.usage.total_tokens == tokens
    one = client.embeddings.create(model=model, input="hi", encoding_format="float")
    assert len(one.data) == 1 and np.array_equal(np.float32(one.data[0].embedding), native(server, ["hi"])[0])


def test_base64_explicit_and_client_default(client, server, model):
    ref = native(server, TEXTS)
    r = client.embeddings.create(model=model, input=TEXTS, encoding_format="base64")
    got = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in r.data])
    assert np.array_equal(got, ref)
    r = client.embeddings.create(model=model, input=TEXTS)  # the client asks for base64 and decodes it
    assert np.array_equal(np.array([d.embedding for d in r.data], dtype=np.float32), ref)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"])
def test_vllms_embed_dtype_and_endianness_write_torchs_bytes(client, server, model, dtype):
    """vLLM's base64 extension (its tensor2binary): the vector rounded by torch's `.to(dtype)`,
    in the byte order asked for."""
    import torch

    torch_dtype = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}.get(dtype) or getattr(torch, dtype)
    ref = torch.from_numpy(native(server, TEXTS)).to(torch_dtype)
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[ref.element_size()]
    for endianness in ("native", "little", "big"):
        r = client.embeddings.create(model=model, input=TEXTS, encoding_format="base64",
                                     extra_body={"embed_dtype": dtype, "endianness": endianness})
        want = ref.view(view).numpy()
        want = want.byteswap() if endianness == "big" else want  # this host is little-endian
        assert [base64.b64decode(d.embedding) for d in r.data] == [w.tobytes() for w in want], endianness


def test_vllms_normalize_false_answers_the_unnormalised_vector(client, server, model):
    r = client.embeddings.create(model=model, input=TEXTS, encoding_format="float", extra_body={"normalize": False})
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    raw = server.post("/v1/embed", {"inputs": TEXTS, "normalize": False}).json()["data"]
    assert np.array_equal(got, np.array([d["embedding"] for d in raw], dtype=np.float32))
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    same = client.embeddings.create(model=model, input=TEXTS, encoding_format="float", extra_body={"normalize": True})
    assert np.array_equal(np.array([d.embedding for d in same.data], dtype=np.float32), native(server, TEXTS))
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model, input=TEXTS, extra_body={"priority": 1})
    assert e.value.body["param"] == "priority"


@pytest.mark.parametrize("n", [1, 64, 383, 384])
def test_dimensions_truncate_and_renormalise(matryoshka_server, model, n):
    client = openai.OpenAI(base_url=matryoshka_server.url + "/v1", api_key="x", max_retries=0, timeout=120)
    ref = native(matryoshka_server, TEXTS)
    r = client.embeddings.create(model=model, input=TEXTS, dimensions=n, encoding_format="float")
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    want = ref if n == 384 else np.stack([shortened(v, n) for v in ref])
    assert got.shape == (len(TEXTS), n) and np.array_equal(got, want)
    raw = client.embeddings.create(model=model, input=TEXTS, dimensions=n, encoding_format="float",
                                   extra_body={"normalize": False})  # vLLM cuts and does not normalise
    whole = matryoshka_server.post("/v1/embed", {"inputs": TEXTS, "normalize": False}).json()["data"]
    assert np.array_equal(np.array([d.embedding for d in raw.data], dtype=np.float32),
                          np.array([d["embedding"][:n] for d in whole], dtype=np.float32))


def test_dimensions_are_refused_for_a_model_not_declared_matryoshka(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model, input="hi", dimensions=64)
    assert "HEADWISE_MATRYOSHKA_DIMENSIONS" in e.value.message and e.value.body["param"] == "dimensions"
    whole = client.embeddings.create(model=model, input="hi", dimensions=384, encoding_format="float")
    assert len(whole.data[0].embedding) == 384


def test_token_id_inputs_are_used_as_they_are(client, server, model):
    ids = [d["ids"] for d in server.post("/v1/tokenize", {"inputs": TEXTS}).json()["data"]]
    ref = native(server, TEXTS)
    r = client.embeddings.create(model=model, input=ids, encoding_format="float")
    assert np.array_equal(np.array([d.embedding for d in r.data], dtype=np.float32), ref)
    assert r.usage.prompt_tokens == sum(map(len, ids))
    # alone, as /v1/embed alone: padding to another length bucket moves the low bits
    r = client.embeddings.create(model=model, input=ids[1], encoding_format="float")
    assert len(r.data) == 1 and np.array_equal(np.float32(r.data[0].embedding), native(server, TEXTS[1:2])[0])
    # no special tokens are added: the ids without [CLS]/[SEP] give another vector
    r = client.embeddings.create(model=model, input=ids[1][1:-1], encoding_format="float")
    assert not np.allclose(np.float32(r.data[0].embedding), ref[1], atol=1e-3)


def test_model_is_optional_and_mixed_with_native_batches(server):
    r = httpx.post(server.url + "/v1/embeddings", json={"input": ["hi", "hello"]}, timeout=60)
    assert r.status_code == 200 and len(r.json()["data"]) == 2


def test_models_list_and_retrieve(client, server, model, default_package):
    listed = client.models.list()
    assert [m.id for m in listed.data] == [model]
    m = listed.data[0]
    assert m.object == "model" and m.owned_by == "headwise"
    exported = json.loads((default_package / "manifest.json").read_text())["created_at"]
    assert m.created == int(datetime.fromisoformat(exported).timestamp())  # the package's export time
    assert m.model_extra["d_model"] == 384 and m.model_extra["name"] == model  # headwise's fields beside
    one = client.models.retrieve(model)
    assert (one.id, one.object, one.created, one.owned_by) == (model, "model", m.created, "headwise")
    assert client.models.retrieve(model).created == m.created  # stable
    raw = httpx.get(server.url + "/v1/models", timeout=30).json()
    assert raw["object"] == "list"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("text-embedding-3-small")


def check(r: httpx.Response, status: int, param=None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code", "param"} and err["code"] == status and err["param"] == param
    assert "Traceback" not in r.text
    return err["message"]


def test_bad_requests_raise_the_clients_errors_with_our_message(client, server, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model, input="hi", dimensions=0)
    assert "'dimensions' must be in 1..384" in e.value.message
    assert e.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=model, input="hi", dimensions=385)
    with pytest.raises(openai.BadRequestError, match="'input' is empty"):
        client.embeddings.create(model=model, input=[])
    with pytest.raises(openai.NotFoundError, match="no model by that name"):
        client.embeddings.create(model="text-embedding-3-small", input="hi")
    with pytest.raises(openai.UnprocessableEntityError, match=r"token ids must be in 0\.\.30521"):
        client.embeddings.create(model=model, input=[[101, 30522, 102]])
    with pytest.raises(openai.UnprocessableEntityError, match=r"this model takes 1\.\.256"):
        client.embeddings.create(model=model, input=[[101] * 257])


def test_bad_requests_in_openai_shape(server, model):
    url = server.url + "/v1/embeddings"
    check(httpx.post(url, content=b'{"input": [', headers={"content-type": "application/json"}), 400)
    check(httpx.post(url, json={"input": []}), 400, "input")
    check(httpx.post(url, json={"input": [[]]}), 422, "input")  # the domain error names its field
    check(httpx.post(url, json={"input": ["a", 1]}), 422)
    check(httpx.post(url, json={"input": "a", "encoding_format": "int8"}), 422)
    check(httpx.post(url, json={"input": "a", "dimensions": "12"}), 422)
    check(httpx.post(url, json={"input": "a", "model": "nope"}), 404)
    check(httpx.post(url, json={"input": "a", "dimension": 12}), 422)


def test_api_key_covers_the_compatible_routes(start_server, model):
    s = start_server(env={"HEADWISE_API_KEY": KEY, "HEADWISE_PRECISION": "fp32"})
    try:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0).embeddings.create(
                model=model, input="hi")
        ok = openai.OpenAI(base_url=s.url + "/v1", api_key=KEY, max_retries=0).embeddings.create(
            model=model, input="hi")
        assert len(ok.data) == 1
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}
        r = httpx.post(f"{s.url}/v2/models/{model}/infer", json=body, timeout=60)
        assert r.status_code == 401 and set(r.json()) == {"error"}
        assert httpx.get(f"{s.url}/v2/models/{model}", timeout=30).status_code == 401
        r = httpx.post(f"{s.url}/v2/models/{model}/infer", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200
        # TEI's routes: huggingface_hub sends its token as the bearer token
        from huggingface_hub import InferenceClient
        from huggingface_hub.errors import HfHubHTTPError

        with pytest.raises(HfHubHTTPError) as e:
            InferenceClient(model=s.url, token="wrong").feature_extraction("hi")
        assert e.value.response.status_code == 401 and set(e.value.response.json()) == {"error", "error_type"}
        assert InferenceClient(model=s.url, token=KEY).feature_extraction("hi").shape == (1, 384)
        assert httpx.get(s.url + "/info", timeout=30).status_code == 401
        for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{model}/ready"):
            assert httpx.get(s.url + path, timeout=30).status_code == 200  # probes stay open
        m = s.metrics()
        assert 'route="/v1/embeddings"' in m and 'code="401"' in m
    finally:
        s.stop()
