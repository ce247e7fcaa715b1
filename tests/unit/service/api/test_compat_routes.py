"""The compatible routes in-process with the fake backend: limits and readiness in each
protocol's error shape, padded attention budget, pre-tokenised ids, metrics labels."""

import struct
import typing

import numpy as np
import orjson

from tests.unit.fakes import (
    D_MODEL,
    N_HEADS,
    N_LAYERS,
    GatedBackend,
    client_for,
    fake_hidden,
    wait_ready,
)


def infer(c, body, **kw):
    return c.post("/v2/models/tiny/infer", content=orjson.dumps(body), **kw)


def text(*texts):
    return {"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": list(texts)}


def kserve_error(r, status):
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and isinstance(r.json()["error"], str)
    return r.json()["error"]


def test_limits_in_kserve_shape(package):
    cell = N_LAYERS * N_HEADS * 4
    # 6 tokens (36 cells) fits; 6 and 3 tokens fit per input (36 + 9) but not padded (2 × 36)
    with client_for(package, max_client_batch=3, attention_budget_bytes=cell * 50) as c:
        wait_ready(c)
        assert "at most 3" in kserve_error(infer(c, {"inputs": [text("a", "b", "c", "d")]}), 413)
        att = {"outputs": [{"name": "attentions"}, {"name": "attention_mask"}]}
        r = infer(c, {"inputs": [text("the cat sat on")], **att})
        assert r.status_code == 200, r.text
        assert "padded" in kserve_error(infer(c, {"inputs": [text("the cat sat on", "a")], **att}), 413)
        assert kserve_error(c.post("/v2/models/tiny/infer", content=b"{}", headers={"content-encoding": "br"}), 400)


def test_not_ready_in_both_shapes(package):
    GatedBackend.gate.clear()
    with client_for(package, backend=GatedBackend) as c:
        assert c.get("/v2/health/live").json() == {"live": True}
        kserve_error(c.get("/v2/health/ready"), 503)
        kserve_error(c.get("/v2/models/tiny/ready"), 503)
        kserve_error(infer(c, {"inputs": [text("x")]}), 503)
        r = c.post("/v1/embeddings", json={"input": "x"})
        assert r.status_code == 503 and r.json()["error"]["type"] == "not_ready" and "param" in r.json()["error"]
        GatedBackend.gate.set()
        wait_ready(c)
        assert c.get("/v2/health/ready").json() == {"ready": True}


def test_binary_round_trip_and_padding(package):
    with client_for(package) as c:
        wait_ready(c)
        raw = struct.pack("<I", 3) + b"cat" + struct.pack("<I", 11) + b"the dog sat"
        head = orjson.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                         "parameters": {"binary_data_size": len(raw)}}],
                             "outputs": [{"name": "last_hidden_state"}, {"name": "attention_mask"}],
                             "parameters": {"binary_data_output": True}})
        r = c.post("/v2/models/tiny/infer", content=head + raw,
                   headers={"Inference-Header-Content-Length": str(len(head))})
        assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
        n = int(r.headers["inference-header-content-length"])
        outs = orjson.loads(r.content[:n])["outputs"]
        hidden_size = outs[0]["parameters"]["binary_data_size"]
        hidden = np.frombuffer(r.content[n:n + hidden_size], "<f4").reshape(outs[0]["shape"])
        mask = np.frombuffer(r.content[n + hidden_size:], "<i8").reshape(outs[1]["shape"])
        assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]] and hidden.shape == (2, 5, D_MODEL)
        ids = [2, c.post("/v1/tokenize", json={"inputs": "cat"}).json()["data"][0]["ids"][1], 3]
        assert np.array_equal(hidden[0, :3], fake_hidden(np.array([ids]))[0]) and not hidden[0, 3:].any()


def test_token_ids_and_metrics_labels(package):
    with client_for(package) as c:
        wait_ready(c)
        ids = c.post("/v1/tokenize", json={"inputs": ["the cat", "a dog"]}).json()["data"]
        by_text = c.post("/v1/embeddings", json={"input": ["the cat", "a dog"]}).json()
        by_ids = c.post("/v1/embeddings", json={"input": [d["ids"] for d in ids]}).json()
        assert by_ids["data"] == by_text["data"] and by_ids["usage"] == by_text["usage"]
        r = c.post("/v1/embeddings", json={"input": [[2, 999, 3]]})
        assert r.status_code == 422 and "token ids must be in" in r.json()["error"]["message"]
        assert infer(c, {"inputs": [text("x")]}).status_code == 200
        m = c.get("/metrics").text
        assert 'route="/v1/embeddings"' in m and 'route="/v2/models/{model}/infer"' in m
        assert 'route="/v2/models/tiny/infer"' not in m


class CountingBackend(GatedBackend):
    runs: typing.ClassVar[list] = []

    def run(self, role, feeds, outputs):
        self.runs.append((role, tuple(outputs)))
        return super().run(role, feeds, outputs)


def test_one_kserve_request_is_one_engine_call(package):
    """Every output asked for comes from one batch: pooled, token rows and attention together."""
    GatedBackend.gate.set()
    with client_for(package, backend=CountingBackend) as c:
        wait_ready(c)
        CountingBackend.runs.clear()
        asked = [{"name": n} for n in ("sentence_embedding", "last_hidden_state", "attentions", "attention_mask")]
        r = infer(c, {"inputs": [text("the cat sat", "a dog")], "outputs": asked})
        assert r.status_code == 200, r.text
        assert len(CountingBackend.runs) == 1 and CountingBackend.runs[0][0] == "attention"
        assert {"sentence_embedding", "last_hidden_state", "attentions"} <= set(CountingBackend.runs[0][1])
        native = c.post("/v1/embed", json={"inputs": ["the cat sat", "a dog"]}).json()["data"]
        got = {o["name"]: o for o in r.json()["outputs"]}
        want = np.array([d["embedding"] for d in native], dtype=np.float32)
        assert np.array_equal(np.array(got["sentence_embedding"]["data"], np.float32).reshape(want.shape), want)


def test_an_attention_index_given_twice_is_refused_on_embed_and_kserve(package):
    with client_for(package) as c:
        wait_ready(c)
        for attention, what in (({"layers": [1, 1]}, "layers"), ({"heads": [0, 2, 0]}, "heads")):
            r = c.post("/v1/embed", json={"inputs": "the cat", "attention": attention})
            assert r.status_code == 422 and r.json()["error"]["message"] == f"attention.{what}: each index at most once"
        for params, key in (({"attention_layers": "1,1"}, "attention_layers"), ({"attention_heads": [0, 0]}, "attention_heads")):
            r = infer(c, {"inputs": [text("the cat")], "outputs": [{"name": "attentions"}], "parameters": params})
            assert kserve_error(r, 400) == f"parameter {key}: each index at most once"  # as KServe's other parameter mistakes


def test_a_kserve_index_string_takes_plain_ascii_digits_only(package):
    """Issue 40's sweep: `attention_layers` as a string went through int(), which took "٣" and
    "３" as 3 and "1_0" as 10. Each is a 400 in KServe's shape; "0, 1" (spaces) still works."""
    with client_for(package) as c:
        wait_ready(c)
        for layers, why in (("٣", "an integer"), ("３", "an integer"), ("+1", "an integer"), ("1_0", "an integer"),
                            ("²", "an integer"), ("0,٣", "an integer"), ("9" * 5000, "each must be in 0..")):
            r = infer(c, {"inputs": [text("the cat")], "outputs": [{"name": "attentions"}],
                          "parameters": {"attention_layers": layers}})
            assert f"parameter attention_layers: {why}" in kserve_error(r, 400), layers[:20]
        for layers in ("0, 1", "01"):
            r = infer(c, {"inputs": [text("the cat")], "outputs": [{"name": "attentions"}],
                          "parameters": {"attention_layers": layers}})
            assert r.status_code == 200, r.text


def test_too_many_inputs_name_the_field_on_openais_route(package):
    """Issue 40, item 3: the count's 413 named no field (`"param": null`); OpenAI's and vLLM's
    bodies name `input`, as the too-long text's 413 does."""
    with client_for(package, max_client_batch=3) as c:
        wait_ready(c)
        r = c.post("/v1/embeddings", json={"input": ["a"] * 4})
        assert r.status_code == 413 and r.json()["error"]["param"] == "input", r.text
        assert r.json()["error"]["message"] == "4 inputs; at most 3 per request"


def test_a_deeply_nested_kserve_parameter_is_a_400_not_a_500(package):
    """Issue 40's sweep: attention_dtype went through str(), whose repr of a list nested 1,020
    deep (orjson reads up to 1,024) raised RecursionError: a 500. Each parameter takes its own
    type only."""
    deep = b"[" * 1020 + b"]" * 1020
    with client_for(package) as c:
        wait_ready(c)
        for key, says in (("attention_dtype", "must be FP32 or FP16"), ("attention_aggregate", "must be none, mean"),
                          ("attention_layers", "an integer, a list")):
            head = orjson.dumps({"inputs": [text("the cat")], "outputs": [{"name": "attentions"}],
                                 "parameters": {key: "DEEP"}}).replace(b'"DEEP"', deep)
            assert says in kserve_error(c.post("/v2/models/tiny/infer", content=head), 400), key


def test_a_kserve_tensor_name_that_is_not_a_string_is_a_400_not_a_500(package):
    """Issue 40's sweep: an unknown tensor name went into the message through repr(), which a
    list nested 1,020 deep made a RecursionError, a 500. A name that is not a string is named by
    its type; a long one is cut to 40 characters."""
    deep = b"[" * 1020 + b"]" * 1020
    with client_for(package) as c:
        wait_ready(c)
        for body, says in (({"inputs": [{**text("a"), "name": "DEEP"}]}, "unexpected input (a list)"),
                           ({"inputs": [text("a")], "outputs": [{"name": "DEEP"}]}, "unknown output (a list)"),
                           ({"inputs": [text("a")], "outputs": [{"name": "x" * 5000}]}, "unknown output 'xxxx")):
            r = c.post("/v2/models/tiny/infer", content=orjson.dumps(body).replace(b'"DEEP"', deep))
            msg = kserve_error(r, 400)
            assert msg.startswith(says) and len(msg) < 300, msg[:100]
