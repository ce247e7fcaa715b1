"""KServe v2 / Open Inference Protocol against a real `headwise serve` (fp32, CPU), driven by the
real `tritonclient.http` client: health, metadata, inference with JSON and binary tensors, and
attention; every result equals POST /v1/embed's (issue 5)."""

from __future__ import annotations

import gzip
import struct

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["hi", "A man is playing a guitar.", "naïve café — 東京 emoji 🙂",
         "Transformers use scaled dot-product attention; every head looks at different tokens!"]


@pytest.fixture(scope="module")
def client(server):
    c = th.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=120)
    yield c
    c.close()


def native(server, texts, **kw) -> list[dict]:
    r = server.post("/v1/embed", {"inputs": texts, **kw})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def text_input(texts, binary: bool) -> th.InferInput:
    i = th.InferInput("text", [len(texts)], "BYTES")
    i.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_), binary_data=binary)
    return i


def test_health_and_metadata(client, model):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(model) and client.is_model_ready(model, "1")
    assert not client.is_model_ready("no-such-model")
    md = client.get_model_metadata(model)
    assert md["name"] == model and md["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    outs = {o["name"]: o for o in md["outputs"]}
    assert outs["sentence_embedding"] == {"name": "sentence_embedding", "datatype": "FP32", "shape": [-1, 384]}
    assert outs["attentions"]["shape"] == [-1, 6, 12, -1, -1]
    assert outs["attention_mask"]["datatype"] == "INT64"
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
def test_infer_equals_native(client, server, model, binary_in, binary_out):
    res = client.infer(model, [text_input(TEXTS, binary_in)],
                       outputs=[th.InferRequestedOutput("sentence_embedding", binary_data=binary_out),
                                th.InferRequestedOutput("last_hidden_state", binary_data=binary_out),
                                th.InferRequestedOutput("attention_mask", binary_data=binary_out)])
    emb = res.as_numpy("sentence_embedding")
    hidden, mask = res.as_numpy("last_hidden_state"), res.as_numpy("attention_mask")
    assert emb.dtype == np.float32 and emb.shape == (len(TEXTS), 384)
    ref = np.array([d["embedding"] for d in native(server, TEXTS)], dtype=np.float32)
    assert np.array_equal(emb, ref)
    tokens = native(server, TEXTS, output="tokens")
    assert hidden.shape[:2] == mask.shape and mask.dtype == np.int64
    for i, d in enumerate(tokens):
        t = int(mask[i].sum())
        assert t == len(d["tokens"]) and mask[i, :t].all()
        assert np.array_equal(hidden[i, :t], np.array(d["embedding"], dtype=np.float32))
        assert not hidden[i, t:].any()


def test_default_output_is_sentence_embedding(client, server, model):
    res = client.infer(model, [text_input(TEXTS[:2], True)])  # no outputs: binary_data_output
    assert [o["name"] for o in res.get_response()["outputs"]] == ["sentence_embedding"]
    ref = np.array([d["embedding"] for d in native(server, TEXTS[:2])], dtype=np.float32)
    assert np.array_equal(res.as_numpy("sentence_embedding"), ref)


@pytest.mark.parametrize("binary_out", [False, True])
def test_attention_with_layer_and_head_selection(client, server, model, binary_out):
    res = client.infer(model, [text_input(TEXTS, False)],
                       outputs=[th.InferRequestedOutput("attentions", binary_data=binary_out),
                                th.InferRequestedOutput("attention_mask", binary_data=binary_out),
                                th.InferRequestedOutput("sentence_embedding", binary_data=binary_out)],
                       parameters={"attention_layers": "0,5", "attention_heads": "1,3,11"})
    att, mask = res.as_numpy("attentions"), res.as_numpy("attention_mask")
    t = mask.shape[1]
    assert att.dtype == np.float32 and att.shape == (len(TEXTS), 2, 3, t, t)
    ref = native(server, TEXTS, attention={"layers": [0, 5], "heads": [1, 3, 11]})
    for i, d in enumerate(ref):
        n = int(mask[i].sum())
        assert np.array_equal(att[i, :, :, :n, :n], np.array(d["attention"]["data"], dtype=np.float32))
        assert not att[i, :, :, n:].any() and not att[i, :, :, :, n:].any()
    assert np.array_equal(res.as_numpy("sentence_embedding"),
                          np.array([d["embedding"] for d in ref], dtype=np.float32))


def test_attention_fp16_all_heads(client, server, model):
    res = client.infer(model, [text_input(TEXTS[:2], True)], outputs=[th.InferRequestedOutput("attentions")],
                       parameters={"attention_dtype": "FP16", "attention_layers": 2})
    att = res.as_numpy("attentions")
    assert att.dtype == np.float16 and att.shape[:3] == (2, 1, 12)
    ref = native(server, TEXTS[:2], attention={"layers": [2], "dtype": "float16", "encoding": "base64"})
    for i, d in enumerate(ref):
        a = d["attention"]
        want = np.frombuffer(__import__("base64").b64decode(a["data"]), dtype="<f2").reshape(a["shape"])
        n = a["shape"][-1]
        assert np.array_equal(att[i, :, :, :n, :n], want)


@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_hidden_states_equal_native(client, server, model, pooling):
    res = client.infer(model, [text_input(TEXTS, True)],
                       outputs=[th.InferRequestedOutput("hidden_states", binary_data=True),
                                th.InferRequestedOutput("attention_mask")],
                       parameters={"hidden_states_layers": "6,0", "hidden_states_pooling": pooling})
    got, mask = res.as_numpy("hidden_states"), res.as_numpy("attention_mask")
    want = native(server, TEXTS, hidden_states={"layers": [6, 0], "pooling": pooling})
    assert got.shape[:2] == (len(TEXTS), 2) and got.shape[-1] == 384
    for i, item in enumerate(want):
        h = np.asarray(item["hidden_states"]["data"], np.float32)
        if pooling == "none":
            t = int(mask[i].sum())
            np.testing.assert_array_equal(got[i, :, :t], h)
            assert not got[i, :, t:].any()
        else:
            np.testing.assert_array_equal(got[i], h)
    md = {o["name"]: o for o in client.get_model_metadata(model)["outputs"]}
    assert md["hidden_states"]["shape"] == [-1, -1, -1, 384]
    with pytest.raises(InferenceServerException, match="hidden_states_layers"):
        client.infer(model, [text_input(TEXTS, True)], outputs=[th.InferRequestedOutput("hidden_states")],
                     parameters={"hidden_states_layers": "7"})


def test_versioned_routes_and_request_id(server, model):
    body = {"id": "req-7", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 1], "data": [["hi"]]}]}
    r = httpx.post(f"{server.url}/v2/models/{model}/versions/1/infer", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["id"] == "req-7"
    r = httpx.post(f"{server.url}/v2/models/{model}/versions/9/infer", json=body, timeout=60)
    assert r.status_code == 404 and set(r.json()) == {"error"}
    zipped = gzip.compress(orjson.dumps(body))
    r = httpx.post(f"{server.url}/v2/models/{model}/infer", content=zipped,
                   headers={"Content-Encoding": "gzip"}, timeout=60)
    assert r.status_code == 200, r.text


def bad(server, model, body=None, *, content=None, headers=None, status=400, path=None) -> str:
    url = server.url + (path or f"/v2/models/{model}/infer")
    r = httpx.post(url, json=body, timeout=60) if content is None else httpx.post(
        url, content=content, headers=headers or {}, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()
    assert set(err) == {"error"} and isinstance(err["error"], str) and err["error"]
    return err["error"]


def text_tensor(**kw) -> dict:
    return {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a", "b"], **kw}


def test_bad_requests_get_4xx_in_kserve_shape(server, model):
    assert "BYTES" in bad(server, model, {"inputs": [text_tensor(datatype="FP32", data=[1.0, 2.0])]})
    assert "3 elements" in bad(server, model, {"inputs": [text_tensor(shape=[3])]})
    assert "unknown output" in bad(server, model, {"inputs": [text_tensor()], "outputs": [{"name": "logits"}]})
    bad(server, model, {"inputs": [text_tensor()]}, path="/v2/models/no-such-model/infer", status=404)
    bad(server, model, {"inputs": [text_tensor(name="image")]})
    bad(server, model, {"inputs": []})
    bad(server, model, {"inputs": [text_tensor(shape=[0], data=[])]})
    bad(server, model, {"inputs": [text_tensor(data=["a", 2])]})
    bad(server, model, {"inputs": [text_tensor()], "parameters": {"attention_layers": "0,99"},
                        "outputs": [{"name": "attentions"}]})
    bad(server, model, content=b'{"inputs": [', headers={"content-type": "application/json"})
    bad(server, model, content=b"\x1f\x8bnot gzip", headers={"content-encoding": "gzip"})
    raw = struct.pack("<I", 2) + b"hi"
    head = orjson.dumps({"inputs": [text_tensor(shape=[1], data=None, parameters={"binary_data_size": len(raw)})]})
    assert "but the body has" in bad(server, model, content=head + raw,
                                     headers={"Inference-Header-Content-Length": str(len(head) + 100)})
    assert "past the end" in bad(server, model, content=head + raw[:-1],
                                 headers={"Inference-Header-Content-Length": str(len(head))})
    bad(server, model, content=head + raw + b"xx", headers={"Inference-Header-Content-Length": str(len(head))})
    bad(server, model, content=head + raw, headers={"Inference-Header-Content-Length": "many"})
    r = httpx.get(server.url + "/v2/models/no-such-model", timeout=30)
    assert r.status_code == 404 and set(r.json()) == {"error"}
    r = httpx.get(server.url + f"/v2/models/{model}/infer", timeout=30)  # a KServe route: its shape
    assert r.status_code == 405 and isinstance(r.json()["error"], str)


def test_tritonclient_raises_with_our_message(client, model):
    i = th.InferInput("text", [2], "BYTES")
    i.set_data_from_numpy(np.array([b"a", b"b"], dtype=np.object_))
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, [i], outputs=[th.InferRequestedOutput("nope")])
    assert e.value.status() == "400" and "unknown output 'nope'" in e.value.message()


def test_metrics_use_route_templates(server, model):
    httpx.post(f"{server.url}/v2/models/{model}/infer", timeout=60,
               json={"inputs": [text_tensor()]}).raise_for_status()
    m = server.metrics()
    assert 'route="/v2/models/{model}/infer"' in m
    assert f"/v2/models/{model}/infer" not in m
