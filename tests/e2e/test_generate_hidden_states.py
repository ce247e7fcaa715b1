"""POST /v1/generate with `hidden_states` (issue 30): tiny random GPT-2 and Marian checkpoints
exported and served, each generated token's states held to transformers' `output_hidden_states`
within 1e-5.

The states returned with generated token k are those computed at the position whose logits
chose it: the last prompt token (GPT-2) or the decoder start token (Marian) for k = 0, then
generated token k - 1. So transformers runs on prompt + ids[:-1] (decoder inputs
[start] + ids[:-1]) and step k is its position P - 1 + k (k)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from tests.fixtures.references import payload_array as array

pytestmark = [pytest.mark.timeout(600)]

MAX_NEW = 12
ATOL = 1e-5


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tiny_package) -> dict[str, Path]:
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian

    ckpt = tmp_path_factory.mktemp("gen-ckpt")
    out = tmp_path_factory.mktemp("gen-models")
    gpt2 = make_tiny_gpt2(ckpt / "gpt2", n_layers=2, n_heads=2, d_model=32)
    build_package(gpt2, out, "tiny-gpt2", progress=lambda m: None)
    marian = make_tiny_marian(ckpt / "marian", n_layers=2, n_decoder_layers=3, init_std=0.05,
                              embedding_std=0.01, logits_bias_std=0.05)
    build_package(marian, out, "tiny-marian", progress=lambda m: None)
    shutil.copytree(tiny_package, out / "tiny")  # an encoder
    # A package exported before the step graphs had the output: its manifest does not list it.
    shutil.copytree(out / "tiny-gpt2", out / "old-gpt2")
    manifest = json.loads((out / "old-gpt2/manifest.json").read_text())
    manifest["name"] = "old-gpt2"
    for v in manifest["variants"].values():
        v["outputs"] = [o for o in v["outputs"] if o != "hidden_states"]
    (out / "old-gpt2/manifest.json").write_text(json.dumps(manifest))
    return {"models": out, "gpt2": gpt2, "marian": marian}


@pytest.fixture(scope="module")
def srv(start_server, dirs):
    return start_server(models=dirs["models"], env={"HEADWISE_MAX_NEW_TOKENS": str(MAX_NEW)})


def generate(srv, **body) -> dict:
    r = srv.post("/v1/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def hf_gpt2_states(ckpt: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' hidden states [L + 1, T, D] and logits [T, V] of one sequence."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0].numpy(), out.logits[0].numpy()


def hf_marian_states(ckpt: Path, src: list[int], tgt: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' decoder hidden states [L + 1, T, D] and logits [T, V] for target `tgt`."""
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt]),
                    output_hidden_states=True)
    return torch.stack(out.decoder_hidden_states)[:, 0].numpy(), out.logits[0].numpy()


# ------------------------------------------------------------------------ against transformers


def test_gpt2_every_layer_of_every_step_equals_transformers(srv, dirs):
    out = generate(srv, model="tiny-gpt2", prompt="the quick brown fox", max_new_tokens=10,
                   hidden_states={"layers": None})
    hs, prompt = out["hidden_states"], out["prompt"]["ids"]
    P, n = len(prompt), len(out["ids"])
    assert (hs["layers"], hs["pooling"], hs["dtype"], hs["encoding"]) == ([0, 1, 2], "none", "float32", "json")
    assert len(hs["steps"]) == n == 10
    ref, logits = hf_gpt2_states(dirs["gpt2"], prompt + out["ids"][:-1])  # (3, P + n - 1, 32)
    assert logits[P - 1:].argmax(-1).tolist() == out["ids"]  # the same greedy path
    np.testing.assert_allclose(array(hs["prompt"]), ref[:, :P], atol=ATOL, rtol=0)
    for k, step in enumerate(hs["steps"]):
        assert step["shape"] == [3, 32]
        np.testing.assert_allclose(array(step), ref[:, P - 1 + k], atol=ATOL, rtol=0)


def test_marian_every_layer_of_every_step_equals_transformers(srv, dirs):
    out = generate(srv, model="tiny-marian", source="the cat sat on the mat", max_new_tokens=10,
                   hidden_states={})
    hs = out["hidden_states"]
    assert hs["layers"] == [0, 1, 2, 3] and "prompt" not in hs  # the source has no decoder states
    manifest = json.loads((dirs["models"] / "tiny-marian/manifest.json").read_text())
    tgt = [manifest["special_tokens"]["decoder_start"], *out["ids"][:-1]]
    ref, logits = hf_marian_states(dirs["marian"], out["source"]["ids"], tgt)  # (4, n, 32)
    assert len(hs["steps"]) == len(out["ids"]) == len(tgt)
    for k, step in enumerate(hs["steps"]):
        assert step["shape"] == [4, 32]
        np.testing.assert_allclose(array(step), ref[:, k], atol=ATOL, rtol=0)
    logits[:, manifest["generation"]["suppress_token_ids"]] = -np.inf
    assert logits.argmax(-1).tolist() == out["ids"]  # the same greedy path


def test_layers_pooling_dtype_and_encoding(srv, dirs):
    out = generate(srv, model="tiny-gpt2", prompt="a cat sat on the mat", max_new_tokens=5,
                   hidden_states={"layers": [2, 0], "pooling": "mean", "dtype": "float16", "encoding": "base64"})
    hs, prompt = out["hidden_states"], out["prompt"]["ids"]
    P = len(prompt)
    ref, _ = hf_gpt2_states(dirs["gpt2"], prompt + out["ids"][:-1])
    assert hs["prompt"]["shape"] == [2, 32]  # pooled over the prompt's tokens
    np.testing.assert_allclose(array(hs["prompt"], "float16", "base64"), ref[[2, 0], :P].mean(1), atol=2e-2, rtol=1e-3)
    for k, step in enumerate(hs["steps"]):
        assert step["shape"] == [2, 32]  # one token: every pooling is the token itself
        np.testing.assert_allclose(array(step, "float16", "base64"), ref[[2, 0], P - 1 + k], atol=2e-2, rtol=1e-3)
    cls = generate(srv, model="tiny-gpt2", prompt="a cat sat on the mat", max_new_tokens=5,
                   hidden_states={"layers": [1], "pooling": "cls"})["hidden_states"]
    np.testing.assert_allclose(array(cls["prompt"]), ref[[1], 0], atol=ATOL, rtol=0)


def test_asking_for_states_changes_no_token(srv):
    for model, field in (("tiny-gpt2", "prompt"), ("tiny-marian", "source")):
        body = {"model": model, field: "the dog looks at the red ball", "max_new_tokens": 8}
        plain = generate(srv, **body)
        both = generate(srv, **body, hidden_states={"layers": [1]}, attention={"layers": [0]})
        assert plain["ids"] == both["ids"] and "hidden_states" not in plain
        assert len(both["attention"]["steps"]) == len(both["hidden_states"]["steps"]) == len(both["ids"])


def test_streamed_events_carry_each_steps_states(srv):
    body = {"model": "tiny-gpt2", "prompt": "hello", "max_new_tokens": 6, "seed": 3,
            "hidden_states": {"layers": [0, 2], "encoding": "base64"}, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/generate", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [json.loads(line[6:]) for line in r.iter_lines() if line and line != "data: [DONE]"]
    events, final = lines[:-1], lines[-1]
    assert [e["hidden_states"] for e in events] == final["hidden_states"]["steps"]
    assert all(e["hidden_states"]["shape"] == [2, 32] for e in events)
    assert final["ids"] == generate(srv, **{**body, "stream": False})["ids"]


# ------------------------------------------------------------------------ errors and limits


@pytest.mark.parametrize("body,status,words", [
    ({"model": "tiny-gpt2", "prompt": "hi", "hidden_states": {"layers": [3]}}, 422, "hidden_states.layers"),
    ({"model": "tiny-marian", "source": "hi", "hidden_states": {"layers": [4]}}, 422, "hidden_states.layers"),
    ({"model": "tiny-gpt2", "prompt": "hi", "hidden_states": {"layers": [1, 1]}}, 422, "hidden_states.layers"),
    ({"model": "tiny-gpt2", "prompt": "hi", "hidden_states": {"pooling": "max"}}, 422, "pooling"),
    ({"model": "old-gpt2", "prompt": "hi", "hidden_states": {}}, 422, "export it again"),
    ({"model": "tiny", "prompt": "hi", "hidden_states": {}}, 422, "/v1/embed"),
])
def test_client_mistakes_are_4xx(srv, body, status, words):
    r = srv.post("/v1/generate", json=body)
    assert r.status_code == status, r.text
    assert words in r.text, r.text
    if "old-gpt2" in body["model"]:
        assert "hidden_states" in r.json()["error"]["message"]
        assert srv.post("/v1/generate", json={**body, "hidden_states": None}).status_code == 200


def test_states_count_against_the_response_bound(start_server, dirs):
    """Refused before generation (413) when the states cannot fit HEADWISE_MAX_RESPONSE_BYTES;
    base64 or pooled fit."""
    s = start_server(models=dirs["models"], env={"HEADWISE_MAX_RESPONSE_BYTES": "20000",
                                                 "HEADWISE_MAX_NEW_TOKENS": "16"})
    body = {"model": "tiny-gpt2", "prompt": "the cat sat on the mat and the dog", "max_new_tokens": 16}
    r = s.post("/v1/generate", json={**body, "hidden_states": {}})
    assert r.status_code == 413 and "HEADWISE_MAX_RESPONSE_BYTES" in r.json()["error"]["message"], r.text
    assert "hidden states" in r.json()["error"]["message"]
    assert s.post("/v1/generate", json={**body, "hidden_states": {"encoding": "base64"}}).status_code == 200
    assert s.post("/v1/generate", json={**body, "hidden_states": {"layers": [2]}}).status_code == 200
    gauge = [line for line in s.get("/metrics").text.splitlines() if line.startswith("headwise_response_bytes_inflight ")]
    assert gauge == ["headwise_response_bytes_inflight 0.0"], gauge
    s.stop()
