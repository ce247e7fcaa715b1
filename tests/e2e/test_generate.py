"""POST /v1/generate end to end (issue #10): tiny random GPT-2 and Marian checkpoints are built
and exported in the test session, then served by a real `headwise serve` together with a tiny
encoder package. Greedy outputs are checked against the numpy + onnxruntime loop of
tests/unit/export/test_generative_export.py run on the same package files."""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.fixtures.generative_onnx import (
    Package,
    encode_padded,
    onnx_greedy_decoder,
    onnx_greedy_encoder_decoder,
)
from tests.fixtures.references import payload_array as array

MAX_NEW = 40
MAX_PROMPT = 48
FAULT = "__headwise_fault__:"
PROMPTS = ["the quick brown fox", "hello", "a cat sat on the mat", "the dog looks at the red ball"]

pytestmark = [pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, tiny_package) -> Path:
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian

    ckpt = tmp_path_factory.mktemp("gen-ckpt")
    out = tmp_path_factory.mktemp("gen-models")
    build_package(make_tiny_gpt2(ckpt / "gpt2", n_layers=2, n_heads=2, d_model=32), out, "tiny-gpt2",
                  progress=lambda m: None)
    marian = make_tiny_marian(ckpt / "marian", n_layers=2, n_decoder_layers=3, init_std=0.05,
                              embedding_std=0.01, logits_bias_std=0.05)
    build_package(marian, out, "tiny-marian", progress=lambda m: None)
    shutil.copytree(tiny_package, out / "tiny-bert")
    return out


@pytest.fixture(scope="module")
def srv(start_server, models_dir):
    return start_server(models=models_dir, env={
        "HEADWISE_MAX_NEW_TOKENS": str(MAX_NEW), "HEADWISE_MAX_PROMPT_TOKENS": str(MAX_PROMPT),
        "HEADWISE_FAULT_INJECTION": "true"})


@pytest.fixture(scope="module")
def gpt2(models_dir) -> Package:
    return Package(models_dir / "tiny-gpt2")


@pytest.fixture(scope="module")
def marian(models_dir) -> Package:
    return Package(models_dir / "tiny-marian")


def generate(srv, **body) -> dict:
    r = srv.post("/v1/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(srv, **body) -> tuple[list[dict], dict]:
    events = []
    with httpx.stream("POST", srv.url + "/v1/generate", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        assert line.startswith("data: ")
        events.append(json.loads(line[6:]))
    return events[:-1], events[-1]


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:{{(.*)}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def greedy_ref(pkg: Package, text: str, steps: int) -> list[int]:
    eos = pkg.special["eos"]
    if pkg.manifest["architecture"] == "decoder":
        ids, mask = encode_padded(pkg, [text], left=True)
        out = onnx_greedy_decoder(pkg, ids, mask, steps, eos=eos)[0]
    else:
        ids, mask = encode_padded(pkg, [text], left=False)
        out = onnx_greedy_encoder_decoder(pkg, ids, mask, steps, eos=eos)[0, 1:]
    out = out.tolist()
    return out[: out.index(eos) + 1] if eos in out else out


# ------------------------------------------------------------------------ results


def test_models_list_shows_generative_architectures(srv):
    cards = {m["name"]: m for m in srv.get("/v1/models").json()["data"]}
    assert cards["tiny-gpt2"]["architecture"] == "decoder"
    assert cards["tiny-marian"]["architecture"] == "encoder-decoder"
    assert cards["tiny"]["architecture"] == "encoder"
    assert cards["tiny-gpt2"]["generate"]["input"] == "prompt"
    assert cards["tiny-marian"]["generate"]["input"] == "source"


@pytest.mark.parametrize("name,field", [("tiny-gpt2", "prompt"), ("tiny-marian", "source")])
def test_greedy_equals_the_onnxruntime_reference(srv, request, name, field):
    pkg = request.getfixturevalue("gpt2" if field == "prompt" else "marian")
    for text in PROMPTS[:3]:
        out = generate(srv, model=name, **{field: text}, max_new_tokens=20)
        ref = greedy_ref(pkg, text, 20)
        assert out["ids"] == ref
        assert out["finish_reason"] == ("eos" if ref[-1] == pkg.special["eos"] else "length")
        assert out["usage"] == {"prompt_tokens": len(out[field]["ids"]), "completion_tokens": len(ref),
                                "total_tokens": len(out[field]["ids"]) + len(ref)}
        assert out["tokens"] == [pkg.tokenizer.id_to_token(i) for i in ref]
        assert out["text"] == pkg.tokenizer.decode([i for i in ref if i != pkg.special["eos"]])


@pytest.mark.parametrize("name,field", [("tiny-gpt2", "prompt"), ("tiny-marian", "source")])
def test_streamed_and_not_streamed_are_identical_for_a_seed(srv, name, field):
    body = {"model": name, field: "the cat sat", "max_new_tokens": 24, "temperature": 1.3, "top_k": 50,
            "top_p": 0.95, "seed": 1234}
    plain = generate(srv, **body)
    events, final = stream(srv, **body)
    assert final == plain
    assert [e["id"] for e in events] == plain["ids"]
    assert [e["index"] for e in events] == list(range(len(plain["ids"])))
    assert [e["token"] for e in events] == plain["tokens"]
    assert "".join(e["text"] for e in events).startswith(plain["text"])
    assert generate(srv, **body) == plain  # and again
    other = generate(srv, **{**body, "seed": 99})
    greedy = generate(srv, **{**body, "temperature": 0})
    assert plain["ids"] != other["ids"] or plain["ids"] != greedy["ids"]  # sampling does sample


def test_stop_string_ends_generation(srv, gpt2):
    ref = generate(srv, model="tiny-gpt2", prompt="the quick brown fox", max_new_tokens=20)
    text = ref["text"]
    stop = next(text[i:i + 2] for i in range(3, len(text) - 1) if text[i:i + 2] not in text[:i + 1])
    out = generate(srv, model="tiny-gpt2", prompt="the quick brown fox", max_new_tokens=20, stop=[stop, "zzzz"])
    assert out["finish_reason"] == "stop"
    assert out["text"] == text[: text.index(stop)]
    assert out["ids"] == ref["ids"][: len(out["ids"])] and len(out["ids"]) < len(ref["ids"])


# ------------------------------------------------------------------------ attention


@pytest.mark.parametrize("encoding", ["json", "base64"])
def test_decoder_attention_is_causal_and_matches_recomputing(srv, gpt2, encoding):
    m = gpt2.manifest
    L, H = m["n_layers"], m["n_heads"]
    out = generate(srv, model="tiny-gpt2", prompt="a cat sat on the mat", max_new_tokens=12,
                   attention={"layers": None, "heads": None, "dtype": "float32", "encoding": encoding})
    att = out["attention"]
    P, N = len(out["prompt"]["ids"]), len(out["ids"])
    assert att["layers"] == list(range(L)) and att["heads"] == list(range(H))
    prompt = array(att["prompt"], "float32", encoding)
    assert prompt.shape == (L, H, P, P)
    assert len(att["steps"]) == N
    T = P + N - 1  # every token that was fed as a query: the prompt, then all but the last new one
    full = np.zeros((L, H, T, T))
    full[:, :, :P, :P] = prompt
    for i, step in enumerate(att["steps"]):
        row = array(step["self_attention"], "float32", encoding)
        assert row.shape == (L, H, 1, P + i)  # the tokens so far, no more
        np.testing.assert_allclose(row.sum(-1), 1, atol=1e-5)
        full[:, :, P - 1 + i, : P + i] = row[:, :, 0]
        assert "cross_attention" not in step
    np.testing.assert_allclose(full.sum(-1), 1, atol=1e-5)
    assert np.all(full[:, :, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)  # no future
    # the same weights as recomputing the whole sequence at once
    ids = np.asarray([out["prompt"]["ids"] + out["ids"][:-1]], np.int64)
    ref = gpt2.run("prefill.attention", input_ids=ids, attention_mask=np.ones_like(ids))["attentions"][0]
    np.testing.assert_allclose(full, ref, atol=1e-5)


def test_cross_attention_shape_per_step(srv, marian):
    out = generate(srv, model="tiny-marian", source="the quick brown fox jumps", max_new_tokens=10,
                   attention={"layers": [0, 2], "heads": [1], "dtype": "float16", "encoding": "base64"})
    S = len(out["source"]["ids"])
    steps = out["attention"]["steps"]
    assert len(steps) == len(out["ids"]) and "prompt" not in out["attention"]
    for i, step in enumerate(steps):
        cross = array(step["cross_attention"], "float16", "base64")
        assert cross.shape == (2, 1, 1, S)  # [L, H, 1, T_src]
        np.testing.assert_allclose(cross.sum(-1), 1, atol=3e-3)
        self_att = array(step["self_attention"], "float16", "base64")
        assert self_att.shape == (2, 1, 1, i + 1)  # decoder start + the tokens before this one
        np.testing.assert_allclose(self_att.sum(-1), 1, atol=3e-3)
    plain = generate(srv, model="tiny-marian", source="the quick brown fox jumps", max_new_tokens=10)
    assert plain["ids"] == out["ids"] and "attention" not in plain


# ------------------------------------------------------------------------ errors and limits


@pytest.mark.parametrize("body,status,words", [
    ({"model": "tiny-gpt2", "prompt": "hi", "max_new_tokens": MAX_NEW + 1}, 422, "HEADWISE_MAX_NEW_TOKENS"),
    ({"model": "tiny-gpt2", "prompt": "the cat " * 40}, 422, "HEADWISE_MAX_PROMPT_TOKENS"),
    ({"model": "tiny-marian", "source": " ".join(["cat"] * 60)}, 422, "HEADWISE_MAX_PROMPT_TOKENS"),
    ({"model": "tiny-gpt2", "source": "hi"}, 422, "'prompt'"),
    ({"model": "tiny-marian", "prompt": "hi"}, 422, "'source'"),
    ({"model": "tiny-marian"}, 422, "source"),
    ({"model": "tiny-gpt2", "prompt": ""}, 400, "empty"),
    ({"model": "tiny", "prompt": "hi"}, 422, "/v1/embed"),
    ({"model": "nope", "prompt": "hi"}, 404, "tiny-gpt2"),
    ({"model": "tiny-gpt2", "prompt": "hi", "top_p": 0}, 422, "top_p"),
    ({"model": "tiny-gpt2", "prompt": "hi", "temperature": -1}, 422, "temperature"),
    ({"model": "tiny-gpt2", "prompt": "hi", "attention": {"layers": [7]}}, 422, "attention.layers"),
    ({"model": "tiny-gpt2", "prompt": "hi", "stop": [""]}, 422, "stop"),
    ({"model": "tiny-gpt2", "prompt": "hi", "beams": 2}, 422, "beams"),
    ({"prompt": "hi"}, 422, "several models"),
])
def test_client_mistakes_are_4xx(srv, body, status, words):
    r = srv.post("/v1/generate", json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_embed_refuses_generative_models_and_still_serves_encoders(srv):
    r = srv.post("/v1/embed", json={"model": "tiny-gpt2", "inputs": "hello"})
    assert r.status_code == 422 and "/v1/generate" in r.json()["error"]["message"]
    r = srv.post("/v1/embed", json={"model": "tiny", "inputs": ["hello", "a cat"],
                                    "attention": {"layers": [0]}})
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    r = srv.post("/v1/tokenize", json={"model": "tiny-marian", "inputs": "the cat"})
    assert r.status_code == 200 and r.json()["data"][0]["tokens"] == ["the", "cat", "</s>"]
    # KServe: the metadata offers only the mask; embeddings asked anyway are refused, clearly
    assert [o["name"] for o in srv.get("/v2/models/tiny-gpt2").json()["outputs"]] == ["attention_mask"]
    text = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["the cat"]}
    r = srv.post("/v2/models/tiny-gpt2/infer", json={"inputs": [text]})
    assert r.status_code == 422 and "/v1/generate" in r.json()["error"]
    r = srv.post("/v2/models/tiny-marian/infer", json={"inputs": [text], "outputs": [{"name": "attention_mask"}]})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [1, 1, 1]


# ------------------------------------------------------------------------ serving


def test_disconnect_stops_generation(srv):
    def counts():
        text = srv.metrics()
        return (metric(text, "headwise_request_failures_total", model="tiny-gpt2", reason="disconnected"),
                metric(text, "headwise_generated_tokens_total", model="tiny-gpt2"))

    dropped0, tokens0 = counts()
    body = {"model": "tiny-gpt2", "prompt": FAULT + "slow=0.05 the cat", "max_new_tokens": MAX_NEW, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/generate", json=body, timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen == 2:
                break  # closing the response drops the connection
    with pytest.raises(httpx.ReadTimeout):  # the non-streamed kind: the client gives up
        httpx.post(srv.url + "/v1/generate", timeout=0.5,
                   json={**body, "stream": False, "prompt": FAULT + "slow=0.05 a dog"})
    deadline = time.monotonic() + 10
    while counts()[0] < dropped0 + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    dropped, tokens = counts()
    assert dropped == dropped0 + 2
    time.sleep(0.5)
    assert counts()[1] == tokens  # nothing more is generated for them
    assert tokens - tokens0 < MAX_NEW  # and neither ran to its end (2 × 40 tokens)


def test_concurrent_requests_are_batched_and_each_correct(srv, gpt2, marian):
    def sums(text, variant):
        return (metric(text, "headwise_batch_size_sum", model=variant[0], variant=variant[1]),
                metric(text, "headwise_batch_size_count", model=variant[0], variant=variant[1]))

    before = srv.metrics()
    jobs = [("tiny-gpt2", "prompt", FAULT + f"slow=0.05 {p}") for p in PROMPTS] + \
           [("tiny-marian", "source", FAULT + f"slow=0.05 {p}") for p in PROMPTS]
    with ThreadPoolExecutor(len(jobs)) as pool:
        outs = list(pool.map(lambda j: generate(srv, model=j[0], **{j[1]: j[2]}, max_new_tokens=16), jobs))
    for (name, _, text), out in zip(jobs, outs, strict=True):
        assert out["ids"] == greedy_ref(gpt2 if name == "tiny-gpt2" else marian, text, 16), text
    after = srv.metrics()
    for variant in (("tiny-gpt2", "decode"), ("tiny-marian", "decoder_step")):
        (s0, c0), (s1, c1) = sums(before, variant), sums(after, variant)
        assert c1 > c0 and (s1 - s0) / (c1 - c0) > 1.5, variant  # several rows per step on average


def test_generation_metrics(srv):
    generate(srv, model="tiny-marian", source="hello", max_new_tokens=5)
    text = srv.metrics()
    for model in ("tiny-gpt2", "tiny-marian"):
        assert metric(text, "headwise_generated_tokens_total", model=model) > 0
        assert metric(text, "headwise_time_to_first_token_seconds_count", model=model) > 0
        assert metric(text, "headwise_inter_token_latency_seconds_count", model=model) > 0
    assert metric(text, "headwise_requests_total", route="/v1/generate", model="tiny-marian", code="200") > 0


def test_generation_attention_counts_against_the_response_bound(start_server, models_dir):
    """The attention a generation asks for is bounded as it will be written (issue 17)."""
    s = start_server(models=models_dir, env={"HEADWISE_MAX_RESPONSE_BYTES": "20000"})
    body = {"model": "tiny-gpt2", "prompt": "the cat sat on the mat and the dog", "max_new_tokens": 16,
            "attention": {"encoding": "json"}}
    r = s.post("/v1/generate", json=body)
    assert r.status_code == 413 and "HEADWISE_MAX_RESPONSE_BYTES" in r.json()["error"]["message"], r.text
    r = s.post("/v1/generate", json={**body, "attention": {"encoding": "base64"}})  # a third of it
    assert r.status_code == 200, r.text
    with httpx.stream("POST", s.url + "/v1/generate", json={**body, "attention": {"encoding": "base64"},
                                                              "stream": True}, timeout=60) as streamed:
        assert streamed.status_code == 200 and b"[DONE]" in b"".join(streamed.iter_bytes())
    with httpx.stream("POST", s.url + "/v1/generate", json={**body, "attention": {"encoding": "base64"},
                                                              "stream": True}, timeout=60) as left:
        next(left.iter_bytes())  # the client goes away mid-stream
    time.sleep(1)
    gauge = [line for line in s.get("/metrics").text.splitlines() if line.startswith("headwise_response_bytes_inflight ")]
    assert gauge == ["headwise_response_bytes_inflight 0.0"], gauge  # every reservation went back
    s.stop()


def test_sigterm_past_the_grace_period_ends_running_generations(start_server, models_dir):
    """A generation still running when the grace period ends gets 503 and the server exits 0
    (the engine's abort reached the generation scheduler, which had no abort)."""
    import signal
    import threading

    s = start_server(models=models_dir, env={"HEADWISE_FAULT_INJECTION": "true", "HEADWISE_GRACE_SECONDS": "3"})
    got = {}

    def slow():
        got["r"] = s.post("/v1/generate", json={"model": "tiny-gpt2", "prompt": "__headwise_fault__:slow=0.5 the cat",
                                                "max_new_tokens": 30}, timeout=60)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    assert s.proc.wait(20) == 0, s.log_tail()
    assert time.monotonic() - t0 < 8
    t.join(30)
    assert got["r"].status_code == 503, got["r"].text
    assert "AttributeError" not in s.log_tail(20000)


def test_max_new_tokens_left_out_fits_a_lower_limit(start_server, models_dir):
    """Leaving max_new_tokens out asks for 16, or HEADWISE_MAX_NEW_TOKENS when that is lower."""
    s = start_server(models=models_dir, env={"HEADWISE_MAX_NEW_TOKENS": "4"})
    r = s.post("/v1/generate", json={"model": "tiny-gpt2", "prompt": "the cat"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 4
    r = s.post("/v1/generate", json={"model": "tiny-gpt2", "prompt": "the cat", "max_new_tokens": 5})
    assert r.status_code == 422 and "HEADWISE_MAX_NEW_TOKENS" in r.json()["error"]["message"]
    s.stop()
