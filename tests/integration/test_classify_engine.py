"""Engine.classify and Engine.rerank on tiny random classification packages through the real
onnxruntime backend, against transformers' BertForSequenceClassification and its tokenizer:
logits within 1e-5, sigmoid/softmax scores, pairs cut like transformers' "longest_first", and
the query↔document attention blocks equal to the attention graph's own weights sliced by numpy."""

from __future__ import annotations

import asyncio

import numpy as np
import onnxruntime as ort
import pytest
import torch

from headwise.service.api.sizes import JSON
from headwise.service.engine import Engine
from headwise.service.engine.classify import ClassifyParams
from headwise.service.engine.params import EmbedParams
from headwise.service.errors import InvalidRequest, TooLarge, Validation
from headwise.service.metrics import Metrics
from headwise.service.package import load_package
from headwise.service.settings import Settings

QUERY = "where is the cat"
DOCS = ["the cat sat on the mat", "a dog", "", "hello world " * 40, "the quick brown fox jumps over the lazy dog"]


def run(models, fn, **settings):
    """fn(engine) on a started Engine serving `models` (real onnxruntime, CPU)."""
    async def go():
        engine = Engine(Settings(models_dir=models, provider="cpu", **settings), Metrics(gpu=None), measure=JSON)
        engine.load_packages()
        engine._prepare()
        engine.start()
        try:
            return await fn(engine)
        finally:
            await engine.close()
    return asyncio.run(go())


def hf_tokenizer(ckpt):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")


def reference(ckpt, ref, item, max_len=64):
    """transformers' logits and encoding of a text or (a, b) pair, truncated to max_len. Pairs
    go in as a batch of one, as sentence-transformers' CrossEncoder sends them: an empty second
    text is then still a pair ([CLS] a [SEP] [SEP]), not a single text."""
    tok = hf_tokenizer(ckpt)
    args = ([item],) if isinstance(item, str) else ([item[0]], [item[1]])
    b = tok(*args, truncation=True, max_length=max_len, return_token_type_ids=True, return_tensors="pt")
    with torch.no_grad():
        logits = ref(**b).logits[0].numpy()
    return logits, b


@pytest.fixture(scope="module")
def models(classifier_packages):
    return classifier_packages["models"]


@pytest.mark.parametrize("attention", [False, True], ids=["fast", "attention-graph"])
def test_rerank_equals_transformers(classifier_packages, models, attention):
    ckpt, ref = classifier_packages["tiny-reranker"]

    async def fn(engine):
        rt = engine.get("tiny-reranker")
        spec = rt.attention_spec([0], [1]) if attention else None
        return await engine.rerank(rt, QUERY, DOCS, ClassifyParams(attention=spec))

    result = run(models, fn)
    assert result.model == "tiny-reranker" and result.labels == ["LABEL_0"] and len(result.data) == len(DOCS)
    for doc, got in zip(DOCS, result.data, strict=True):
        want, b = reference(ckpt, ref, (QUERY, doc))
        np.testing.assert_array_equal(got.encoding.ids, b.input_ids[0].numpy())
        np.testing.assert_array_equal(got.encoding.type_ids, b.token_type_ids[0].numpy())
        assert got.logits.shape == (1,) and got.logits.dtype == np.float32
        np.testing.assert_allclose(got.logits, want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(got.scores, torch.sigmoid(torch.from_numpy(want)).numpy(), atol=1e-6, rtol=0)
        assert (got.attention is not None) == attention


def test_classify_texts_and_pairs_equal_transformers(classifier_packages, models):
    ckpt, ref = classifier_packages["tiny-classifier"]
    inputs = ["the cat sat on the mat", ("a dog", "the lazy dog"), ["is it red", "it is blue"], "", "hello " * 80]

    async def fn(engine):
        rt = engine.get("tiny-classifier")
        return (await engine.classify(rt, inputs, ClassifyParams()),
                await engine.classify(rt, inputs, ClassifyParams(raw_scores=True)))

    soft, raw = run(models, fn)
    assert soft.labels == ["negative", "neutral", "positive"]
    for item, got, got_raw in zip(inputs, soft.data, raw.data, strict=True):
        want, _ = reference(ckpt, ref, item if isinstance(item, str) else tuple(item))
        np.testing.assert_allclose(got.logits, want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(got.scores, torch.softmax(torch.from_numpy(want), -1).numpy(), atol=1e-6, rtol=0)
        assert abs(float(got.scores.sum()) - 1) < 1e-6
        np.testing.assert_array_equal(got_raw.scores, got_raw.logits)
        np.testing.assert_allclose(got_raw.logits, got.logits, atol=1e-6, rtol=0)


def test_an_answer_does_not_depend_on_its_batch(models):
    others = [f"{w} " * (i % 13 + 1) for i, w in enumerate(["red", "blue", "the cat", "fox", "small"] * 6)]

    async def fn(engine):
        rt = engine.get("tiny-reranker")
        alone = await engine.rerank(rt, QUERY, ["the cat sat on the mat"], ClassifyParams())
        together = await asyncio.gather(*(engine.rerank(rt, QUERY, [*others[:k], "the cat sat on the mat", *others[k:]],
                                                        ClassifyParams()) for k in (0, 7, 30)))
        return alone, together

    alone, together = run(models, fn)
    for k, res in zip((0, 7, 30), together, strict=True):
        np.testing.assert_allclose(res.data[k].logits, alone.data[0].logits, atol=1e-5, rtol=0)


LONG = "the quick brown fox jumps over the lazy dog " * 40  # ~1,700 characters: past the first prefix


@pytest.mark.parametrize("pair", [(LONG, "a dog"), ("a dog", LONG), (LONG, LONG[::-1]), ("cat " * 40, "dog " * 45)],
                         ids=["long-query", "long-doc", "both-long", "both-over-half"])
def test_pairs_are_cut_like_transformers_longest_first(classifier_packages, models, pair):
    ckpt, ref = classifier_packages["tiny-reranker"]

    async def fn(engine):
        rt = engine.get("tiny-reranker")
        got = await engine.classify(rt, [pair], ClassifyParams())
        with pytest.raises(Validation, match="over this model's limit of 64"):
            await engine.classify(rt, [pair], ClassifyParams(truncate=False))
        return got

    got = run(models, fn).data[0]
    want, b = reference(ckpt, ref, pair)
    assert got.encoding.length == 64
    np.testing.assert_array_equal(got.encoding.ids, b.input_ids[0].numpy())
    np.testing.assert_array_equal(got.encoding.type_ids, b.token_type_ids[0].numpy())
    np.testing.assert_allclose(got.logits, want, atol=1e-5, rtol=0)


def _graph_weights(models, enc) -> np.ndarray:
    """The analysis graph's full [L, H, T, T] weights for one unpadded pair, every head kept."""
    sess = ort.InferenceSession(str(models / "tiny-reranker" / "analysis.onnx"), providers=["CPUExecutionProvider"])
    head_mask = next(i for i in sess.get_inputs() if i.name == "head_mask")
    feeds = {"input_ids": enc.ids[None], "attention_mask": np.ones((1, enc.length), np.int64),
             "token_type_ids": enc.type_ids[None], "head_mask": np.ones((1, *head_mask.shape[1:]), np.float32)}
    return sess.run(["attentions"], feeds)[0][0]


def _arr(block, dtype="float32"):
    return np.asarray(block["data"], dtype=dtype)


def test_attention_blocks_are_the_graph_weights_sliced(classifier_packages, models):
    ckpt, _ = classifier_packages["tiny-reranker"]
    tok = hf_tokenizer(ckpt)

    async def fn(engine):
        rt = engine.get("tiny-reranker")
        dense = await engine.rerank(rt, QUERY, DOCS, ClassifyParams(attention=rt.attention_spec(None, None)))
        half = await engine.rerank(rt, QUERY, DOCS, ClassifyParams(attention=rt.attention_spec(
            [1], [0], dtype="float16", encoding="base64")))
        top = await engine.rerank(rt, QUERY, DOCS, ClassifyParams(attention=rt.attention_spec(
            [0, 1], [1], format="topk", top_k=2)))
        return dense, half, top

    dense, half, top = run(models, fn)
    q_tokens = tok.tokenize(QUERY)
    for doc, d, h, t in zip(DOCS, dense.data, half.data, top.data, strict=True):
        enc = d.encoding
        full = _graph_weights(models, enc)
        seg = enc.segments
        q, k = np.flatnonzero(seg == 0), np.flatnonzero(seg == 1)
        a = d.attention
        # the query's and the document's own tokens, special tokens left out
        # (the 80-word document is cut to what fits: its first tokens)
        assert a["query"]["tokens"] == q_tokens and a["document"]["tokens"] == tok.tokenize(doc)[: len(k)]
        assert a["query"]["positions"] == list(range(1, 1 + len(q_tokens)))
        assert a["document"]["positions"] == list(range(2 + len(q_tokens), 2 + len(q_tokens) + len(k)))
        assert a["document"]["offsets"] == [enc.offsets[i] for i in k]
        assert all(doc[s:e] for s, e in a["document"]["offsets"])  # into the document's own text
        assert a["query_to_document"]["shape"] == [2, 2, len(q), len(k)]
        assert a["document_to_query"]["shape"] == [2, 2, len(k), len(q)]
        want_qd, want_dq = full[:, :, q[:, None], k[None, :]], full[:, :, k[:, None], q[None, :]]
        np.testing.assert_allclose(_arr(a["query_to_document"]).reshape(want_qd.shape), want_qd, atol=1e-6, rtol=0)
        np.testing.assert_allclose(_arr(a["document_to_query"]).reshape(want_dq.shape), want_dq, atol=1e-6, rtol=0)
        # float16, base64: the graph's float16 weights, i.e. the float32 ones rounded
        import base64

        hq = np.frombuffer(base64.b64decode(h.attention["query_to_document"]["data"]), "<f2")
        np.testing.assert_array_equal(hq.reshape(1, 1, len(q), len(k)),
                                      _arr(a["query_to_document"])[1:2, 0:1].astype(np.float16))
        # top-k over the document's columns (and the query's, the other way)
        tq = t.attention["query_to_document"]
        if len(k):
            assert tq["shape"] == [2, 1, len(q), min(2, len(k))] and tq["index_dtype"] == "int32"
            idx, vals = np.asarray(tq["data"]["indices"]), np.asarray(tq["data"]["values"], np.float32)
            block = _arr(a["query_to_document"])[:, 1:2]
            np.testing.assert_array_equal(vals, np.take_along_axis(block, idx, -1))
            assert np.all(vals[..., 0] == block.max(-1))


def test_the_attention_budget_counts_the_blocks_returned(models):
    async def fn(engine, budget):
        rt = engine.get("tiny-reranker")
        spec = rt.attention_spec([0], None, dtype="float16")
        # query: 8 tokens; documents: 6 and 2 tokens → 2 · 8 · (6 + 2) cells per layer and head
        return await engine.rerank(rt, QUERY, ["the cat sat on the mat", "a dog"], ClassifyParams(attention=spec))

    need = 1 * 2 * 2 * 8 * (6 + 2) * 2
    assert run(models, lambda e: fn(e, need), attention_budget_bytes=need).data[0].attention is not None
    with pytest.raises(TooLarge, match=f"asked-for attention is {need} bytes, over the budget of {need - 1}"):
        run(models, lambda e: fn(e, need - 1), attention_budget_bytes=need - 1)


def test_what_each_model_refuses(models, classifier_packages):
    async def fn(engine):
        rt = engine.get("tiny-classifier")
        info = rt.card()
        assert info["task"] == "classification" and info["labels"] == ["negative", "neutral", "positive"]
        with pytest.raises(Validation, match=r"is a classification model .* /v1/rerank or /v1/predict"):
            await engine.embed(rt, ["a text"], EmbedParams())
        with pytest.raises(InvalidRequest, match="'texts' is empty"):
            await engine.rerank(rt, QUERY, [], ClassifyParams())
        with pytest.raises(TooLarge, match="3 inputs; at most 2"):
            await engine.rerank(rt, QUERY, ["a", "b", "c"], ClassifyParams())
        with pytest.raises(TooLarge, match="query has 81 characters"):
            await engine.rerank(rt, "q" * 81, ["a"], ClassifyParams())
        with pytest.raises(TooLarge, match=r"texts\[1\] has 81 characters"):
            await engine.rerank(rt, "q", ["a", "b" * 81], ClassifyParams())
        with pytest.raises(Validation, match=r"a classification model \(3 labels\): reranking needs a cross-encoder"):
            await engine.rerank(rt, QUERY, ["a"], ClassifyParams())
        with pytest.raises(Validation, match=r"texts\[1\] has \d+ tokens or more") as exc:
            await engine.rerank(engine.get("tiny-reranker"), "q", ["a", "b" * 70], ClassifyParams(truncate=False))
        assert exc.value.field == "texts"
        with pytest.raises(Validation, match="a text or a pair of two texts"):
            await engine.classify(rt, [("a", "b", "c")], ClassifyParams())
        return True

    assert run(models, fn, max_client_batch=2, max_input_chars=80)
    assert load_package(models / "tiny-reranker").labels == ("LABEL_0",)
