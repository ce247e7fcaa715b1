"""headwise.client against real `headwise serve` processes: the real all-MiniLM-L6-v2 package
(embed, attention per head and aggregated, similarity with explain, occlusion, errors; sync and
async), and a tiny cross-encoder, classifier and GPT-2 served together (rerank, predict,
generate, streamed or not). Every answer is compared with the same route's JSON, read without
the client."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from headwise.client import AsyncClient, Client, HeadwiseError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["The cat sat on the mat.", "Attention is all you need", "a"]
DEFAULT_NAME = "all-minilm-l6-v2"
DOCS_MD = Path(__file__).resolve().parents[2] / "docs" / "client.md"


@pytest.fixture(scope="module")
def hw(server):
    with Client(server.url) as c:
        yield c


def ok(r) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


def test_embed_equals_the_routes_json(server, hw):
    want = ok(server.post("/v1/embed", {"inputs": TEXTS}))
    res = hw.embed(TEXTS)
    assert res.model == want["model"] and res.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert res.embeddings.shape == (3, 384) and res.embeddings.dtype == np.float32
    assert np.array_equal(res.embeddings, np.asarray([d["embedding"] for d in want["data"]], dtype=np.float32))
    assert [d.tokens for d in res.data] == [d["tokens"] for d in want["data"]]
    assert [d.offsets for d in res.data] == [[tuple(o) for o in d["offsets"]] for d in want["data"]]
    raw = hw.embed(TEXTS[0], normalize=False, output="tokens").data[0].embedding
    assert raw.shape == (len(res.data[0].tokens), 384)


@pytest.mark.parametrize(("dtype", "encoding"), [("float32", "base64"), ("float16", "base64"), ("float16", "json")])
def test_attention_per_head_equals_the_json_floats(server, hw, dtype, encoding):
    want = ok(server.post("/v1/embed", {"inputs": TEXTS, "attention": {"dtype": dtype}}))
    res = hw.embed(TEXTS, attention={"dtype": dtype, "encoding": encoding})
    for got, item in zip(res.data, want["data"], strict=True):
        t = len(item["tokens"])
        a = got.attention
        assert a.values.shape == (6, 12, t, t) == tuple(item["attention"]["shape"])
        assert a.values.dtype == np.dtype(dtype) and a.layers == list(range(6)) and a.heads == list(range(12))
        assert np.array_equal(a.values, np.asarray(item["attention"]["data"], dtype=dtype))
        assert np.allclose(a.values.astype(np.float64).sum(-1), 1, atol=1e-2 if dtype == "float16" else 1e-5)


def test_attention_selection_and_topk(server, hw):
    opts = {"layers": [5, 0], "heads": [3], "format": "topk", "top_k": 4, "encoding": "base64"}
    want = ok(server.post("/v1/embed", {"inputs": TEXTS[0], "attention": {**opts, "encoding": "json"}}))["data"][0]
    a = hw.embed(TEXTS[0], attention=opts).data[0].attention
    t = len(want["tokens"])
    assert a.layers == [5, 0] and a.heads == [3] and a.values.shape == a.indices.shape == (2, 1, t, 4)
    assert np.array_equal(a.indices, want["attention"]["data"]["indices"])
    assert np.array_equal(a.values, np.asarray(want["attention"]["data"]["values"], dtype=np.float32))
    dense = hw.embed(TEXTS[0], attention={"layers": [5, 0], "heads": [3]}).data[0].attention.values
    assert np.array_equal(np.take_along_axis(dense, a.indices.astype(np.intp), -1), a.values)


@pytest.mark.parametrize(("aggregate", "shape"), [("mean", lambda t: (2, t, t)), ("rollout", lambda t: (t, t))])
def test_aggregated_attention(server, hw, aggregate, shape):
    opts = {"layers": [0, 3], "aggregate": aggregate}
    want = ok(server.post("/v1/embed", {"inputs": TEXTS, "attention": opts}))
    res = hw.embed(TEXTS, attention={**opts, "encoding": "base64"})
    for got, item in zip(res.data, want["data"], strict=True):
        a = got.attention
        assert a.aggregate == aggregate and a.values.shape == shape(len(item["tokens"]))
        assert np.array_equal(a.values, np.asarray(item["attention"]["data"], dtype=np.float32))
        assert np.allclose(a.values.sum(-1), 1, atol=1e-5)


def test_similarity_with_explain(server, hw):
    targets = ["A cat is sitting.", "The stock market fell."]
    want = ok(server.post("/v1/similarity", {"source": TEXTS[0], "targets": targets, "explain": True, "top_k": 3}))
    res = hw.similarity(TEXTS[0], targets, explain=True, top_k=3)
    assert res.scores.tolist() == [d["score"] for d in want["data"]] and res.scores[0] > res.scores[1]
    assert res.source.tokens == want["source"]["tokens"]
    for got, item in zip(res.data, want["data"], strict=True):
        assert got.contributions.shape == (len(want["source"]["tokens"]), len(item["tokens"]))
        assert np.array_equal(got.contributions, np.asarray(item["contributions"], dtype=np.float32))
        assert abs(float(got.contributions.astype(np.float64).sum()) - got.score) < 1e-5
        assert [(p.source, p.target, p.value) for p in got.top_pairs] == [
            (p["source"], p["target"], p["value"]) for p in item["top_pairs"]]
    plain = hw.similarity(TEXTS[0], targets)
    assert np.allclose(plain.scores, res.scores, atol=1e-6) and plain.data[0].contributions is None


def test_occlusion(server, hw):
    want = ok(server.post("/v1/occlusion", {"input": TEXTS[1]}))
    res = hw.occlusion(TEXTS[1])
    assert res.tokens == want["tokens"] and res.forward_passes == len(res.tokens) + 1
    assert res.effects.shape == (len(res.tokens),) and np.array_equal(res.effects, want["effects"])
    for kw in ({"unit": "word"}, {"spans": [[0, 9], [10, 12]]}):  # issue 40, item 2: KeyError 'effects'
        want = ok(server.post("/v1/occlusion", {"input": TEXTS[1], **kw}))
        res = hw.occlusion(TEXTS[1], **kw)
        assert res.unit == want["unit"] and res.forward_passes == len(want["units"]) + 1
        assert [(u.text, u.start, u.end, u.tokens, u.effect) for u in res.units] == [
            (u["text"], u["start"], u["end"], u["tokens"], u["effect"]) for u in want["units"]]
        assert np.array_equal(res.effects, [u["effect"] for u in want["units"]])


def test_hidden_states_and_ablation(server, hw):
    body = {"inputs": ["a cat", "a much longer sentence about cats"], "hidden_states": {"layers": [6, 0],
            "dtype": "float16", "encoding": "base64"}, "ablate": {"1": [3]}}
    want = ok(server.post("/v1/embed", body))["data"]
    res = hw.embed(body["inputs"], hidden_states=body["hidden_states"], ablate={1: [3]})
    for item, w in zip(res.data, want, strict=True):
        assert [h.layer for h in item.hidden_states] == [6, 0]
        assert item.hidden_states[0].array.shape == (len(w["tokens"]), 384)
        assert item.hidden_states[0].array.dtype == np.float16
        np.testing.assert_array_equal(item.embedding, np.asarray(w["embedding"], np.float32))


def test_head_importance(server, hw):
    want = ok(server.post("/v1/head_importance", {"input": TEXTS[0], "top_k": 3}))
    res = hw.head_importance(TEXTS[0], top_k=3)
    assert res.importance.shape == (6, 12) and res.measure == "cosine"
    np.testing.assert_array_equal(res.importance, np.asarray(want["importance"]))
    assert res.top == [(x["layer"], x["head"], x["effect"]) for x in want["top"]]


def test_tokenize_and_models(server, hw):
    want = ok(server.post("/v1/tokenize", {"inputs": TEXTS}))
    assert [d.ids for d in hw.tokenize(TEXTS).data] == [d["ids"] for d in want["data"]]
    (card,) = hw.models()
    assert (card.n_layers, card.n_heads, card.d_model, card.attention, card.ready) == (6, 12, 384, True, True)
    assert hw.model_info(card.name).max_len == card.max_len


def test_errors_are_headwise_errors(hw):
    with pytest.raises(HeadwiseError) as e:
        hw.embed("a", model="no-such-model")
    assert (e.value.status, e.value.type) == (404, "not_found") and "no model by that name" in e.value.message
    with pytest.raises(HeadwiseError) as e:
        hw.model_info("no-such-model")
    assert e.value.status == 404
    with pytest.raises(HeadwiseError) as e:
        hw.embed("a", attention={"layers": [0, 0]})
    assert (e.value.status, e.value.type, e.value.field) == (422, "validation", "attention.layers")
    with pytest.raises(HeadwiseError) as e:
        hw.embed([])
    assert (e.value.status, e.value.type) == (400, "invalid_request")


def test_async_client_answers_as_the_sync_one(server, hw):
    async def main():
        async with AsyncClient(server.url) as c:
            return await asyncio.gather(
                c.embed(TEXTS, attention={"aggregate": "rollout", "dtype": "float16", "encoding": "base64"}),
                c.similarity(TEXTS[0], TEXTS[1:], explain=True), c.occlusion(TEXTS[2]), c.models(),
                c.embed("a", model="no-such-model"), return_exceptions=True)

    emb, sim, occ, models, err = asyncio.run(main())
    want = hw.embed(TEXTS, attention={"aggregate": "rollout", "dtype": "float16", "encoding": "json"})
    assert np.array_equal(emb.embeddings, want.embeddings)
    for got, ref in zip(emb.data, want.data, strict=True):
        assert got.attention.values.dtype == np.float16 and np.array_equal(got.attention.values, ref.attention.values)
    # analytics rows batch with whatever else is waiting: equal within the graph's batch invariance
    np.testing.assert_allclose(sim.scores, hw.similarity(TEXTS[0], TEXTS[1:], explain=True).scores, atol=1e-6)
    assert np.array_equal(occ.effects, hw.occlusion(TEXTS[2]).effects) and models[0].n_heads == 12
    assert isinstance(err, HeadwiseError) and err.status == 404


# ---------------------------------------------------------------- rerank, predict, generate

QUERY = "where is the cat"
DOCS = ["a dog", "the cat sat on the mat", "where is the cat? on the mat", ""]


@pytest.fixture(scope="module")
def zoo(start_server, classifier_packages, tagger_package, qa_package, default_package, tmp_path_factory):
    """The tiny cross-encoder, classifier, tagger, answerer, masked LM and sparse encoder beside a tiny GPT-2 and
    MiniLM, in one server."""
    from headwise.export.package import build_package
    from tests.fixtures.tiny import make_fill_mask_package, make_sparse_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2

    models = tmp_path_factory.mktemp("client-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / DEFAULT_NAME).symlink_to(default_package, target_is_directory=True)
    for name, packages in (("tiny-tagger", tagger_package), ("tiny-qa", qa_package)):
        (models / name).symlink_to(packages["models"] / name, target_is_directory=True)
    mlm = make_fill_mask_package(tmp_path_factory.mktemp("client-mlm"))
    (models / "tiny-mlm").symlink_to(mlm["models"] / "tiny-mlm", target_is_directory=True)
    sparse = make_sparse_package(tmp_path_factory.mktemp("client-sparse"))
    (models / "tiny-splade").symlink_to(sparse["models"] / "tiny-splade", target_is_directory=True)
    ckpt = make_tiny_gpt2(tmp_path_factory.mktemp("client-gpt2") / "gpt2", n_layers=2, n_heads=2, d_model=32)
    build_package(ckpt, models, "tiny-gpt2", progress=lambda m: None)
    srv = start_server(models=models)
    with Client(srv.url) as c:
        yield srv, c


def test_rerank_with_attention(zoo):
    srv, c = zoo
    opts = {"layers": [0], "heads": [1], "dtype": "float16", "encoding": "base64"}
    want = ok(srv.post("/v1/rerank", {"model": "tiny-reranker", "query": QUERY, "texts": DOCS,
                                      "attention": {**opts, "encoding": "json"}}))
    res = c.rerank(QUERY, DOCS, model="tiny-reranker", attention=opts)
    assert [(r.index, r.score) for r in res.results] == [(x["index"], x["score"]) for x in want["results"]]
    for got, x in zip(res.results, want["results"], strict=True):
        a, w = got.attention, x["attention"]
        tq, td = len(w["query"]["tokens"]), len(w["document"]["tokens"])
        assert a.query_to_document.values.shape == (1, 1, tq, td) and a.document_to_query.values.shape == (1, 1, td, tq)
        assert np.array_equal(a.query_to_document.values, np.asarray(w["query_to_document"]["data"], dtype=np.float16))
        assert a.document.tokens == w["document"]["tokens"] and a.query.positions == w["query"]["positions"]
    top = c.rerank(QUERY, DOCS, model="tiny-reranker", top_n=2, return_text=True)
    assert [r.index for r in top.results] == [x["index"] for x in want["results"][:2]]
    assert top.results[0].text == DOCS[top.results[0].index]


def test_predict(zoo):
    srv, c = zoo
    want = ok(srv.post("/v1/predict", {"model": "tiny-classifier", "inputs": [["a", "b"], ["c"]]}))
    res = c.predict([("a", "b"), ["c"]], model="tiny-classifier")
    assert [[(x.label, x.score) for x in labels] for labels in res.data] == [
        [(x["label"], x["score"]) for x in labels] for labels in want["data"]]


def test_tag_tokens_and_entities(zoo):
    srv, c = zoo
    texts = ["Clara lives in Berkeley.", "a"]
    opts = {"layers": [0], "heads": [0]}
    want = ok(srv.post("/v1/tag", {"model": "tiny-tagger", "inputs": texts, "all_scores": True, "attention": opts}))
    res = c.tag(texts, model="tiny-tagger", all_scores=True, attention={**opts, "encoding": "base64"})
    assert res.labels == want["labels"] and res.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    for got, item in zip(res.data, want["data"], strict=True):
        assert got.entities is None
        assert [(t.index, t.token, t.start, t.end, t.label, t.score, t.scores) for t in got.tokens] == [
            (t["index"], t["token"], t["start"], t["end"], t["label"], t["score"], t["scores"]) for t in item["tokens"]]
        assert np.allclose(got.attention.values, np.asarray(item["attention"]["data"], dtype=np.float32))
    want = ok(srv.post("/v1/tag", {"model": "tiny-tagger", "inputs": texts[0], "aggregation_strategy": "first",
                                   "ignore_labels": ["O"]}))
    res = c.tag(texts[0], model="tiny-tagger", aggregation_strategy="first", ignore_labels=["O"])
    assert res.data[0].tokens is None
    assert [(e.entity_group, e.score, e.word, e.start, e.end) for e in res.data[0].entities] == [
        (e["entity_group"], e["score"], e["word"], e["start"], e["end"]) for e in want["data"][0]["entities"]]


def test_answer(zoo):
    srv, c = zoo
    pairs = [("who sat", "the cat sat on the mat"), ("where", "Zoë lives in Berkeley")]
    want = ok(srv.post("/v1/answer", {"model": "tiny-qa", "inputs": [{"question": q, "context": x} for q, x in pairs],
                                      "top_k": 2, "attention": {"layers": [1]}}))
    res = c.answer([q for q, _ in pairs], [x for _, x in pairs], model="tiny-qa", top_k=2,
                   attention={"layers": [1], "encoding": "base64"})
    for got, item in zip(res.data, want["data"], strict=True):
        assert [(a.answer, a.score, a.start, a.end) for a in got.answers] == [
            (a["answer"], a["score"], a["start"], a["end"]) for a in item["answers"]]
        assert np.allclose(got.attention.values, np.asarray(item["attention"]["data"], dtype=np.float32))
    one = c.answer(*pairs[0], model="tiny-qa")
    assert len(one.data) == 1 and one.data[0].answers[0].answer == want["data"][0]["answers"][0]["answer"]
    with pytest.raises(ValueError, match="two lists of one length"):
        c.answer(["a", "b"], ["c"], model="tiny-qa")
    with pytest.raises(HeadwiseError) as e:
        c.answer("who", "the cat " * 400, model="tiny-qa")
    assert e.value.status == 422 and "truncate" in str(e.value)
    long = ("who sat", "the cat sat on the mat " * 20)
    windows = c.answer(*long, model="tiny-qa", top_k=2, doc_stride=8, max_seq_len=32)
    want = ok(srv.post("/v1/answer", {"model": "tiny-qa", "inputs": {"question": long[0], "context": long[1]},
                                      "top_k": 2, "doc_stride": 8, "max_seq_len": 32}))
    assert [(a.answer, a.score, a.start) for a in windows.data[0].answers] == [
        (a["answer"], a["score"], a["start"]) for a in want["data"][0]["answers"]]


def test_fill_mask(zoo):
    srv, c = zoo
    texts = ["the cat sat on the [MASK].", "[MASK] dog and [MASK] cat"]
    want = ok(srv.post("/v1/fill_mask", {"model": "tiny-mlm", "inputs": texts, "top_k": 3, "targets": ["cat", "dog"],
                                         "attention": {"layers": [0]}}))
    res = c.fill_mask(texts, model="tiny-mlm", top_k=3, targets=["cat", "dog"],
                      attention={"layers": [0], "encoding": "base64"})
    for got, item in zip(res.data, want["data"], strict=True):
        assert [(m.position, [(f.score, f.token, f.token_str, f.sequence) for f in m.fills]) for m in got.masks] == [
            (m["position"], [(f["score"], f["token"], f["token_str"], f["sequence"]) for f in m["fills"]])
            for m in item["masks"]]
        assert np.allclose(got.attention.values, np.asarray(item["attention"]["data"], dtype=np.float32))
    one = c.fill_mask("the [MASK]", model="tiny-mlm", targets="cat")
    assert [f.token_str for f in one.data[0].masks[0].fills] == ["cat"]
    with pytest.raises(HeadwiseError) as e:
        c.fill_mask("no mask", model="tiny-mlm")
    assert e.value.status == 422 and "[MASK]" in str(e.value)



def test_generate_and_its_stream(zoo):
    srv, c = zoo
    body = {"model": "tiny-gpt2", "prompt": "the quick brown fox", "max_new_tokens": 5, "seed": 3}
    want = ok(srv.post("/v1/generate", {**body, "attention": {"layers": [1]}}))
    res = c.generate("the quick brown fox", model="tiny-gpt2", max_new_tokens=5, seed=3,
                     attention={"layers": [1], "encoding": "base64"})
    assert (res.text, res.ids, res.finish_reason) == (want["text"], want["ids"], want["finish_reason"])
    p = len(res.input_ids)
    assert res.attention.prompt.shape == (1, 2, p, p)
    assert np.array_equal(res.attention.prompt, np.asarray(want["attention"]["prompt"]["data"], dtype=np.float32))
    assert [s.self_attention.shape for s in res.attention.steps] == [(1, 2, 1, p + i) for i in range(len(res.ids))]
    events = list(c.generate_stream("the quick brown fox", model="tiny-gpt2", max_new_tokens=5, seed=3,
                                    attention={"layers": [1], "dtype": "float16", "encoding": "base64"}))
    *tokens, final = events
    assert [t.id for t in tokens] == res.ids and final.text == res.text == "".join(t.text for t in tokens)
    assert tokens[0].attention.self_attention.dtype == np.float16
    assert np.allclose(tokens[-1].attention.self_attention, res.attention.steps[-1].self_attention, atol=1e-3)

    hs = c.generate("the quick brown fox", model="tiny-gpt2", max_new_tokens=5, seed=3,
                    hidden_states={"layers": [2, 0], "encoding": "base64"}).hidden_states
    want = ok(srv.post("/v1/generate", {**body, "hidden_states": {"layers": [2, 0]}}))["hidden_states"]
    assert hs.layers == [2, 0] and len(hs.steps) == len(res.ids) and hs.steps[0].shape == (2, 32)
    np.testing.assert_array_equal(hs.prompt, np.asarray(want["prompt"]["data"], dtype=np.float32))
    np.testing.assert_array_equal(hs.steps[-1], np.asarray(want["steps"][-1]["data"], dtype=np.float32))
    *tokens, final = c.generate_stream("the quick brown fox", model="tiny-gpt2", max_new_tokens=5, seed=3,
                                       hidden_states={"layers": [2, 0], "dtype": "float16", "encoding": "base64"})
    assert all(t.hidden_states.shape == (2, 32) and t.hidden_states.dtype == np.float16 for t in tokens)
    np.testing.assert_allclose(tokens[-1].hidden_states, hs.steps[-1], atol=1e-2)
    assert final.hidden_states.layers == [2, 0]

    async def streamed():
        async with AsyncClient(srv.url) as a:
            return [e async for e in a.generate_stream("the quick brown fox", model="tiny-gpt2", max_new_tokens=5, seed=3)]

    assert [getattr(e, "id", None) for e in asyncio.run(streamed())[:-1]] == res.ids
    with pytest.raises(HeadwiseError) as e:
        c.generate("x", model="tiny-gpt2", max_new_tokens=100_000)
    assert (e.value.status, e.value.field) == (422, "max_new_tokens")
    with pytest.raises(HeadwiseError) as e:
        list(c.generate_stream("x", model="tiny-reranker"))
    assert e.value.status == 422


# ---------------------------------------------------------------- docs/client.md, every example

# The docs' model names → the test servers' (the tiny cross-encoder and GPT-2 stand in)
DOC_MODELS = {'"ms-marco-minilm"': '"tiny-reranker"', '"gpt2"': '"tiny-gpt2"', '"bert-base-ner"': '"tiny-tagger"',
              '"bert-squad"': '"tiny-qa"',
              '"bert-base-uncased"': '"tiny-mlm"', '"splade-v3"': '"tiny-splade"'}
DOC_URL = "http://127.0.0.1:8000"


def doc_examples() -> list[tuple[str, str, str | None]]:
    """(section, code, the output block that follows it or None) of each ```python block."""
    text = DOCS_MD.read_text(encoding="utf-8")
    out, section = [], ""
    for m in re.finditer(r"^(#{2,3} [^\n]*)$|^```python\n(.*?)^```\n(?:```\n(.*?)^```\n)?", text, re.M | re.S):
        if m.group(1):
            section = m.group(1).lstrip("# ")
        else:
            out.append((section, m.group(2), m.group(3)))
    return out


def test_every_python_example_of_the_client_docs_runs_against_a_real_server(server, zoo):
    """Issue 40, item 2: docs/client.md showed `hw.occlusion(text, unit=...)`, which raised
    KeyError. Each ```python block runs, in order, on the MiniLM server (one model: `model=` left
    out) or, when it names a model, on a server of several; an output block shown after one is
    the repr of its last expression (numpy printing at 4 digits)."""
    examples = doc_examples()
    assert len(examples) >= 12 and any("unit=\"word\"" in code for _, code, _ in examples)
    zoo_srv, _ = zoo
    single: dict = {}
    several: dict = {}
    ran = []
    for section, code, shown in examples:
        names_a_model = any(name in code for name in ('model="', "model='"))
        url = zoo_srv.url if names_a_model else server.url
        code = code.replace(DOC_URL, url)
        for doc_name, test_name in DOC_MODELS.items():
            code = code.replace(doc_name, test_name)
        ns = several if names_a_model else single
        if names_a_model and "hw" not in ns:
            exec("import numpy as np\nfrom headwise.client import Client, HeadwiseError\n"
                 f"hw = Client({url!r})", ns)
        tree = compile(code, f"docs/client.md ({section})", "exec")
        body, last = code.rstrip(), None
        if shown is not None:  # the last statement is an expression whose repr is shown
            lines = body.splitlines()
            body, last = "\n".join(lines[:-1]), lines[-1].split("#")[0].strip()
        with contextlib.redirect_stdout(io.StringIO()), np.printoptions(precision=4):
            exec(compile(body, f"docs/client.md ({section})", "exec") if last is not None else tree, ns)
            if last is not None:
                got = repr(eval(last, ns))
                assert got == shown.strip(), f"{section}: {last} is {got}, the docs show {shown.strip()}"
        ran.append(section)
    assert {"Occlusion", "Async", "Generate", "Errors", "Hidden states and removed heads", "Tag (NER, PII)",
            "Answer (extractive question answering)", "Fill mask"} <= set(ran)
