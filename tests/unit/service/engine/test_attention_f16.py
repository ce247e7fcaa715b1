"""The attention graph's own float16 weights (`attentions_f16`, a Cast in the graph): equal to
numpy's float16 cast of its float32 weights, recorded by verify, and what the service sends
for dense float16 attention (the float32 weights are not fetched then). Packages without
that output keep the numpy cast."""

import base64
import json
import shutil
from typing import ClassVar

import numpy as np
import pytest
from fastapi.testclient import TestClient

from headwise.service.api.app import create_app
from headwise.service.backends.onnxruntime import OrtBackend
from headwise.service.settings import Settings

TEXTS = ["the quick brown fox", "a cat sat on the mat and looked at the dog for a while", "hi"]


def decode(att: dict) -> np.ndarray:
    dtype = np.float16 if att["dtype"] == "float16" else np.float32
    data = att["data"]
    a = np.frombuffer(base64.b64decode(data), dtype) if att["encoding"] == "base64" else np.asarray(data, dtype)
    return a.reshape(att["shape"])


class Spy(OrtBackend):
    fetched: ClassVar[list] = []  # every run of every instance, in order

    def run(self, role, feeds, outputs):
        Spy.fetched.append((role, tuple(outputs)))
        return super().run(role, feeds, outputs)


def serve(models, **settings):
    app = create_app(Settings(models_dir=models, provider="cpu", **settings), backend_factory=Spy)
    return TestClient(app)


def attention(client, dtype, fmt="dense"):
    spec = {"dtype": dtype, "encoding": "base64", "format": fmt}
    r = client.post("/v1/embed", json={"inputs": TEXTS, "attention": spec})
    assert r.status_code == 200, r.text
    return [item["attention"] for item in r.json()["data"]]


def ready(client):
    import time
    while client.get("/health/ready").status_code != 200:
        time.sleep(0.02)


def test_manifest_lists_it_and_verify_found_no_mismatch(tiny_package):
    m = json.loads((tiny_package / "manifest.json").read_text())
    assert "attentions_f16" in m["variants"]["analysis"]["outputs"]
    assert m["parity"]["analysis"]["attentions_f16_mismatches"] == 0
    assert m["parity"]["analysis"]["passed"]


def test_float16_answers_come_from_the_graph_and_equal_numpys_cast(tiny_package):
    with serve(tiny_package.parent) as c:
        ready(c)
        Spy.fetched.clear()
        f16 = attention(c, "float16")
        assert Spy.fetched == [("attention", ("sentence_embedding", "attentions_f16"))]
        f32 = attention(c, "float32")
        assert ("attention", ("sentence_embedding", "attentions")) in Spy.fetched
        for a16, a32 in zip(f16, f32, strict=True):
            np.testing.assert_array_equal(decode(a16), decode(a32).astype(np.float16))
        Spy.fetched.clear()
        attention(c, "float16", fmt="topk")  # top-k orders by the float32 weights
        assert Spy.fetched == [("attention", ("sentence_embedding", "attentions"))]


def test_a_package_without_it_casts_in_numpy(tiny_package, tmp_path):
    old = tmp_path / "models" / tiny_package.name
    shutil.copytree(tiny_package, old)
    m = json.loads((old / "manifest.json").read_text())
    m["variants"]["analysis"]["outputs"].remove("attentions_f16")  # as a package from before it
    (old / "manifest.json").write_text(json.dumps(m))
    with serve(old.parent) as c, serve(tiny_package.parent) as new:
        ready(c)
        ready(new)
        Spy.fetched.clear()
        got = attention(c, "float16")
        assert Spy.fetched == [("attention", ("sentence_embedding", "attentions"))]
        for a, b in zip(got, attention(new, "float16"), strict=True):
            np.testing.assert_array_equal(decode(a), decode(b))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_json_encoding_too(tiny_package, dtype):
    with serve(tiny_package.parent) as c:
        ready(c)
        r = c.post("/v1/embed", json={"inputs": TEXTS[:1], "attention": {"dtype": dtype, "encoding": "json"}})
        assert r.status_code == 200
        a = decode(r.json()["data"][0]["attention"])
        assert a.dtype == np.dtype(dtype) and np.allclose(a.sum(-1), 1, atol=2e-3)
