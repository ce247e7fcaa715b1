"""Client and AsyncClient against httpx.MockTransport: the bodies they send, the headers, and
the answers they decode (fake answers shaped as docs/api.md writes them)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from headwise.client import AsyncClient, Client, HeadwiseError


class Fake:
    """A server of canned answers by path, recording every request."""

    def __init__(self, answers: dict[str, object]):
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[request.url.raw_path.decode().partition("?")[0]]
        if isinstance(answer, httpx.Response):
            return answer
        if isinstance(answer, bytes):
            return httpx.Response(200, content=answer, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=answer)

    @property
    def body(self) -> dict:
        return json.loads(self.requests[-1].content)


def b64(a, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")


def make(answers: dict, **kw) -> tuple[Client, Fake]:
    fake = Fake(answers)
    return Client("http://hw.test", transport=httpx.MockTransport(fake), **kw), fake


ATT = np.random.default_rng(1).random((2, 3, 4, 4)).astype("<f2")  # [L, H, T, T]
EMBED = {"model": "m", "usage": {"prompt_tokens": 8, "total_tokens": 8}, "data": [
    {"index": i, "embedding": [0.5 * i, 1.0, -0.25], "tokens": ["[CLS]", "a", "b", "[SEP]"],
     "offsets": [[0, 0], [0, 1], [2, 3], [0, 0]],
     "attention": {"layers": [0, 5], "heads": [0, 1, 2], "aggregate": "none", "format": "dense", "dtype": "float16",
                   "encoding": "base64", "shape": [2, 3, 4, 4], "data": b64(ATT, "<f2")}} for i in range(2)]}


def test_embed_sends_its_body_and_decodes_base64_float16_attention():
    c, fake = make({"/v1/embed": EMBED}, api_key="s3cret")
    opts = {"layers": [0, 5], "dtype": "float16", "encoding": "base64"}
    res = c.embed(["a b", "b a"], model="m", attention=opts)
    req = fake.requests[-1]
    assert req.method == "POST" and req.headers["authorization"] == "Bearer s3cret"
    assert fake.body == {"model": "m", "inputs": ["a b", "b a"], "normalize": True, "truncate": True,
                         "output": "sentence", "attention": opts}
    assert res.embeddings.shape == (2, 3) and res.embeddings.dtype == np.float32
    assert np.array_equal(res.embeddings[1], [0.5, 1.0, -0.25]) and res.usage.prompt_tokens == 8
    att = res.data[0].attention
    assert att.values.shape == (2, 3, 4, 4) and att.values.dtype == np.float16 and np.array_equal(att.values, ATT)
    assert (att.layers, att.heads, att.aggregate, att.indices) == ([0, 5], [0, 1, 2], "none", None)
    assert res.data[1].offsets[2] == (2, 3) and res.data[0].hidden_states is None


@pytest.mark.parametrize(("aggregate", "shape"), [("mean", [2, 4, 4]), ("rollout", [4, 4])])
def test_aggregated_attention_keeps_its_shape(aggregate, shape):
    a = np.full(shape, 0.25, dtype="<f4")
    answer = {**EMBED, "data": [{**EMBED["data"][0], "attention": {
        **EMBED["data"][0]["attention"], "aggregate": aggregate, "dtype": "float32", "encoding": "json",
        "shape": shape, "data": a.tolist()}}]}
    c, _ = make({"/v1/embed": answer})
    att = c.embed("a b", attention={"aggregate": aggregate}).data[0].attention
    assert att.values.shape == tuple(shape) and att.aggregate == aggregate and np.array_equal(att.values, a)


def test_embed_forwards_hidden_states_and_decodes_them():
    h = np.arange(12, dtype="<f2").reshape(4, 3)
    item = {**EMBED["data"][0], "attention": None,
            "hidden_states": {"layers": [2], "pooling": "none", "shape": [1, 4, 3], "dtype": "float16",
                              "encoding": "base64", "data": b64(h, "<f2")}}
    c, fake = make({"/v1/embed": {**EMBED, "data": [item]}})
    res = c.embed("a b", hidden_states={"layers": [2], "dtype": "float16", "encoding": "base64"}, output="tokens")
    assert fake.body["hidden_states"] == {"layers": [2], "dtype": "float16", "encoding": "base64"}
    assert "attention" not in fake.body and fake.body["output"] == "tokens"
    (hs,) = res.data[0].hidden_states
    assert hs.layer == 2 and hs.array.dtype == np.float16 and np.array_equal(hs.array, h)


def test_token_embeddings_are_per_item():
    item = {**EMBED["data"][0], "attention": None, "embedding": [[1.0, 2.0], [3.0, 4.0]]}
    c, _ = make({"/v1/embed": {**EMBED, "data": [item, {**item, "embedding": [[1.0, 2.0]]}]}})
    res = c.embed(["x", "y"], output="tokens")
    assert res.data[0].embedding.shape == (2, 2) and res.data[1].embedding.shape == (1, 2)
    with pytest.raises(ValueError, match=r"data\[i\]\.embedding"):
        res.embeddings  # noqa: B018


def test_similarity_with_explain():
    answer = {"model": "m", "usage": {"prompt_tokens": 9, "total_tokens": 9},
              "source": {"tokens": ["[CLS]", "a", "[SEP]"], "offsets": [[0, 0], [0, 1], [0, 0]]},
              "data": [{"index": 0, "score": 0.5, "tokens": ["[CLS]", "b", "[SEP]"], "offsets": [[0, 0], [0, 1], [0, 0]],
                        "contributions": [[0.1, 0.0, 0.0], [0.0, 0.2, 0.0], [0.0, 0.0, 0.2]],
                        "top_pairs": [{"source": 1, "target": 1, "value": 0.2}]},
                       {"index": 1, "score": -0.125}]}
    c, fake = make({"/v1/similarity": answer})
    res = c.similarity("a", ["b", "c"], explain=True, top_k=1)
    assert fake.body == {"source": "a", "targets": ["b", "c"], "explain": True, "top_k": 1, "truncate": True}
    assert res.scores.dtype == np.float64 and res.scores.tolist() == [0.5, -0.125]
    assert res.data[0].contributions.shape == (3, 3) and res.data[0].top_pairs[0].value == 0.2
    assert res.source.tokens[1] == "a" and res.data[1].contributions is None


OCCLUSION_TOKENS = {"model": "m", "tokens": ["[CLS]", "a", "[SEP]"], "offsets": [[0, 0], [0, 1], [0, 0]],
                    "effects": [0.01, 0.2, 0.03], "forward_passes": 4, "usage": {"prompt_tokens": 3, "total_tokens": 12}}
OCCLUSION_WORDS = {  # /v1/occlusion's own example (routers/analytics.py, OcclusionResponse)
    "model": "m", "unit": "word", "tokens": ["[CLS]", "un", "##bel", "##ie", "##va", "##bly", "cold", "[SEP]"],
    "offsets": [[0, 0], [0, 2], [2, 5], [5, 7], [7, 9], [9, 12], [13, 17], [0, 0]],
    "units": [{"text": "unbelievably", "start": 0, "end": 12, "tokens": [1, 2, 3, 4, 5], "effect": 0.31},
              {"text": "cold", "start": 13, "end": 17, "tokens": [6], "effect": 0.45}],
    "forward_passes": 3, "usage": {"prompt_tokens": 8, "total_tokens": 24}}


def test_occlusion_by_token():
    c, fake = make({"/v1/occlusion": OCCLUSION_TOKENS})
    res = c.occlusion("a", model="m", prompt_name="query")
    assert fake.body == {"model": "m", "input": "a", "truncate": True, "prompt_name": "query"}
    assert res.effects.tolist() == [0.01, 0.2, 0.03] and res.forward_passes == 4
    assert res.unit is None and res.units is None


@pytest.mark.parametrize(("kw", "sent"), [({"unit": "word"}, {"unit": "word"}),
                                          ({"spans": [(0, 12), (13, 17)]}, {"spans": [[0, 12], [13, 17]]})])
def test_occlusion_by_word_or_span_reads_units(kw, sent):
    """Issue 40, item 2: a word or span answer carries `units`, not `effects`; the client raised
    KeyError 'effects' on it."""
    answer = OCCLUSION_WORDS if "unit" in kw else {**OCCLUSION_WORDS, "unit": "span"}
    c, fake = make({"/v1/occlusion": answer})
    res = c.occlusion("unbelievably cold", **kw)
    assert fake.body == {"input": "unbelievably cold", "truncate": True, **sent}
    assert res.unit == answer["unit"] and [u.text for u in res.units] == ["unbelievably", "cold"]
    assert res.units[0].tokens == [1, 2, 3, 4, 5] and (res.units[1].start, res.units[1].end) == (13, 17)
    assert res.effects.dtype == np.float64 and res.effects.tolist() == [0.31, 0.45] and res.forward_passes == 3


def test_rerank_with_topk_attention():
    idx = np.array([[[[1, 0], [0, 1]]]], dtype="<i4")
    vals = np.array([[[[0.3, 0.1], [0.2, 0.05]]]], dtype="<f2")
    block = {"shape": [1, 1, 2, 2], "index_dtype": "int32", "data": {"indices": b64(idx, "<i4"), "values": b64(vals, "<f2")}}
    side = {"tokens": ["x", "y"], "offsets": [[0, 1], [2, 3]], "positions": [1, 2]}
    answer = {"model": "r", "usage": {"prompt_tokens": 12, "total_tokens": 12}, "results": [
        {"index": 1, "score": 0.9, "text": "doc", "attention": {
            "layers": [0], "heads": [0], "aggregate": "none", "format": "topk", "dtype": "float16", "encoding": "base64",
            "query": side, "document": side, "query_to_document": block, "document_to_query": block}},
        {"index": 0, "score": 0.1}]}
    c, fake = make({"/v1/rerank": answer})
    res = c.rerank("q", ["a", "doc"], top_n=2, return_text=True,
                   attention={"format": "topk", "top_k": 2, "dtype": "float16", "encoding": "base64"})
    assert fake.body["top_n"] == 2 and fake.body["texts"] == ["a", "doc"] and fake.body["attention"]["top_k"] == 2
    assert [r.index for r in res.results] == [1, 0] and res.results[0].text == "doc"
    att = res.results[0].attention
    assert att.query.positions == [1, 2] and np.array_equal(att.query_to_document.indices, idx)
    assert att.document_to_query.values.dtype == np.float16
    assert np.array_equal(att.query_to_document.to_dense(n_keys=len(att.document.tokens)),
                          np.array([[[[0.1, 0.3], [0.2, 0.05]]]], dtype=np.float16))
    assert res.results[1].attention is None


def test_predict_pairs_and_texts():
    c, fake = make({"/v1/predict": {"model": "cls", "usage": {"prompt_tokens": 5, "total_tokens": 5},
                                    "data": [[{"label": "pos", "score": 0.9}, {"label": "neg", "score": 0.1}]]}})
    res = c.predict([("a", "b"), ["c"]], raw_scores=True)
    assert fake.body["inputs"] == [["a", "b"], ["c"]] and fake.body["raw_scores"] is True
    assert res.data[0][0].label == "pos" and res.data[0][1].score == 0.1


GEN = {"model": "g", "text": " on the", "tokens": ["Ġon", "Ġthe"], "ids": [3, 4], "finish_reason": "length",
       "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
       "prompt": {"tokens": ["a", "b"], "ids": [1, 2]},
       "attention": {"layers": [0], "heads": [1], "dtype": "float32", "encoding": "json",
                     "prompt": {"shape": [1, 1, 2, 2], "data": [[[[1.0, 0.0], [0.5, 0.5]]]]},
                     "steps": [{"self_attention": {"shape": [1, 1, 1, 2], "data": [[[[0.4, 0.6]]]]}},
                               {"self_attention": {"shape": [1, 1, 1, 3], "data": [[[[0.2, 0.3, 0.5]]]]}}]}}


def test_generate_decodes_prompt_and_step_attention():
    c, fake = make({"/v1/generate": GEN})
    res = c.generate("a b", max_new_tokens=2, seed=7, stop=("x", "y"), attention={"layers": [0], "heads": [1]})
    assert fake.body == {"prompt": "a b", "max_new_tokens": 2, "seed": 7, "stop": ["x", "y"],
                         "attention": {"layers": [0], "heads": [1]}}
    assert res.text == " on the" and res.input_ids == [1, 2] and res.usage.completion_tokens == 2
    assert res.attention.prompt.shape == (1, 1, 2, 2)
    assert [s.self_attention.shape for s in res.attention.steps] == [(1, 1, 1, 2), (1, 1, 1, 3)]


def sse(*events) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def test_generate_stream_yields_tokens_then_the_result():
    step = {"self_attention": {"shape": [1, 1, 1, 2], "data": b64(np.array([0.25, 0.75]), "<f2")}}
    c, fake = make({"/v1/generate": sse({"index": 0, "token": "Ġon", "id": 3, "text": " on", "attention": step},
                                        {"index": 1, "token": "Ġthe", "id": 4, "text": " the"}, GEN, b"[DONE]")})
    events = list(c.generate_stream("a b", attention={"dtype": "float16", "encoding": "base64"}))
    assert fake.body["stream"] is True
    assert [e.token for e in events[:2]] == ["Ġon", "Ġthe"] and events[2].finish_reason == "length"
    assert events[0].attention.self_attention.dtype == np.float16 and events[1].attention is None
    assert events[0].attention.self_attention.tolist() == [[[[0.25, 0.75]]]]


def test_generate_stream_errors():
    err = {"error": {"message": "generation failed", "type": "internal", "code": 500}}
    c, _ = make({"/v1/generate": sse({"index": 0, "token": "a", "id": 1, "text": "a"}, err, b"[DONE]")})
    it = c.generate_stream("x")
    assert next(it).token == "a"
    with pytest.raises(HeadwiseError) as e:
        next(it)
    assert (e.value.status, e.value.type) == (500, "internal")
    c, _ = make({"/v1/generate": sse({"index": 0, "token": "a", "id": 1, "text": "a"})})
    with pytest.raises(HeadwiseError, match="before data: \\[DONE\\]"):
        list(c.generate_stream("x"))
    refused = httpx.Response(422, json={"error": {"message": "max_new_tokens: too many", "type": "validation", "code": 422}})
    c, _ = make({"/v1/generate": refused})
    with pytest.raises(HeadwiseError) as e:
        list(c.generate_stream("x", max_new_tokens=10_000))
    assert (e.value.status, e.value.field) == (422, "max_new_tokens")


def test_a_malformed_or_deeply_nested_stream_event_is_a_headwise_error():
    """Issue 40, item 5, in a stream: an event nested past the recursion limit raised
    RecursionError, one that was not JSON a JSONDecodeError; both are HeadwiseError."""
    deep = b"[" * 100_000 + b"]" * 100_000
    deep_error = b'{"error": {"message": ' + deep + b', "type": "x", "code": 500}}'
    for event in (deep, b"{not json", b"[1, 2]", deep_error):
        c, _ = make({"/v1/generate": sse({"index": 0, "token": "a", "id": 1, "text": "a"}, event, b"[DONE]")})
        it = c.generate_stream("x")
        assert next(it).token == "a"
        with pytest.raises(HeadwiseError):
            next(it)


def test_tokenize_models_and_model_info():
    card = {"id": "a/b", "name": "a/b", "task": "embedding", "architecture": "encoder", "n_layers": 6, "n_heads": 12,
            "d_model": 384, "max_len": 256, "attention": True, "ready": True, "pooling": "mean"}
    c, fake = make({"/v1/tokenize": {"model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3},
                                     "data": [{"index": 0, "tokens": ["[CLS]", "a", "[SEP]"], "ids": [1, 2, 3],
                                               "offsets": [[0, 0], [0, 1], [0, 0]]}]},
                    "/v1/models": {"object": "list", "data": [card]}, "/v1/models/a%2Fb": card})
    assert c.tokenize("a").data[0].ids == [1, 2, 3] and fake.body == {"inputs": "a", "truncate": True}
    (m,) = c.models()
    assert (m.id, m.n_layers, m.n_heads, m.attention, m.raw["pooling"]) == ("a/b", 6, 12, True, "mean")
    assert c.model_info("a/b").d_model == 384 and fake.requests[-1].url.raw_path == b"/v1/models/a%2Fb"


def test_head_importance_matrix():
    answer = {"model": "m", "measure": "score", "baseline": 0.9, "shape": [3, 2],
              "importance": [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], "top": [{"layer": 2, "head": 1, "effect": 0.6}],
              "tokens": ["[CLS]", "a", "[SEP]", "b", "[SEP]"], "forward_passes": 7,
              "usage": {"prompt_tokens": 5, "total_tokens": 35}}
    c, fake = make({"/v1/head_importance": answer})
    res = c.head_importance(("a", "b"), model="m", top_k=1)
    assert fake.body == {"model": "m", "input": ["a", "b"], "truncate": True, "raw_scores": False, "top_k": 1}
    assert res.importance.shape == (3, 2) and np.allclose(res.importance[2], [0.5, 0.6])
    assert res.measure == "score" and res.baseline == 0.9 and res.top == [(2, 1, 0.6)]


def test_async_client_shares_the_same_calls():
    fake = Fake({"/v1/embed": EMBED, "/v1/generate": sse(
        {"index": 0, "token": "Ġon", "id": 3, "text": " on"}, GEN, b"[DONE]"),
        "/v1/similarity": httpx.Response(404, json={"error": {"message": "model 'x' not found", "type": "not_found", "code": 404}})})

    async def main():
        async with AsyncClient("http://hw.test", api_key="k", transport=httpx.MockTransport(fake)) as c:
            res = await c.embed(["a b", "b a"], attention={"dtype": "float16", "encoding": "base64"})
            events = [e async for e in c.generate_stream("a b")]
            with pytest.raises(HeadwiseError) as e:
                await c.similarity("a", ["b"], model="x")
            return res, events, e.value

    res, events, err = asyncio.run(main())
    assert res.embeddings.shape == (2, 3) and np.array_equal(res.data[1].attention.values, ATT)
    assert fake.requests[0].headers["authorization"] == "Bearer k"
    assert [type(e).__name__ for e in events] == ["GenerateToken", "GenerateResult"]
    assert (err.status, err.type) == (404, "not_found")


def test_nothing_is_retried_by_default():
    busy = httpx.Response(429, json={"error": {"message": "queue full", "type": "overloaded", "code": 429}},
                          headers={"Retry-After": "3"})
    c, fake = make({"/v1/embed": busy})
    with pytest.raises(HeadwiseError) as e:
        c.embed("a")
    assert len(fake.requests) == 1 and e.value.retry_after == 3.0 and e.value.type == "overloaded"


def test_the_client_imports_none_of_the_server():
    code = ("import sys, headwise.client; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'fastapi', 'starlette', 'onnxruntime', "
            "'pydantic', 'uvicorn') or m.startswith(('headwise.service', 'headwise.model', 'headwise.export'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_tag_takes_one_ignored_label_as_a_string():
    c, fake = make({"/v1/tag": {"model": "m", "labels": ["O", "B-PER"], "data": [], "usage": {}}})
    c.tag("a", ignore_labels="B-PER")
    assert fake.body["ignore_labels"] == ["B-PER"]
    c.tag("a", ignore_labels=("O", "B-PER"))
    assert fake.body["ignore_labels"] == ["O", "B-PER"]
