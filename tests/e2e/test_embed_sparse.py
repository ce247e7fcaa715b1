"""Sparse embeddings (SPLADE) end to end: a real `headwise serve` (in process, and with the engine
in its own process) on a tiny SparseEncoder package, answers compared with sentence-transformers'
SparseEncoder on the same checkpoint: the non-zero entries and their weights, whatever shares the
batch; `decode` names the vocabulary entries as SparseEncoder.decode does; per-head attention and
removed heads; an embedding model asked for sparse embeddings and a sparse model asked for dense
ones are refused in the native shape, as are an over-long text and no texts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.e2e.conftest import ENGINE_MODES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TEXTS = ["the cat sat on the mat.", "a dog", "a quick brown fox jumps over the lazy dog, " * 3, "ünïcödé 🎉 naïve"]


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    from tests.fixtures.tiny import make_sparse_package

    return make_sparse_package(tmp_path_factory.mktemp("sparse"))


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, sparse):
    return start_server(models=sparse["models"], env=ENGINE_MODES[request.param])


def dense(item: dict, vocab: int) -> np.ndarray:
    out = np.zeros(vocab, np.float32)
    out[item["indices"]] = item["values"]
    return out


def test_weights_equal_sparse_encoder_whatever_shares_the_batch(srv, sparse):
    _, ref = sparse["tiny-splade"]
    want = ref.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    r = srv.post("/v1/embed_sparse", {"inputs": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-splade" and body["usage"]["prompt_tokens"] > 0
    for i, (item, w) in enumerate(zip(body["data"], want, strict=True)):
        assert item["index"] == i and "tokens" not in item
        assert item["indices"] == np.flatnonzero(w).tolist()  # ascending, the same entries
        np.testing.assert_allclose(item["values"], w[w > 0], atol=1e-5, rtol=0)
        alone = srv.post("/v1/embed_sparse", {"inputs": TEXTS[i]}).json()["data"][0]
        assert alone["indices"] == item["indices"] and alone["values"] == item["values"]


def test_decode_names_each_index_as_sparse_encoder_decode(srv, sparse):
    _, ref = sparse["tiny-splade"]
    item = srv.post("/v1/embed_sparse", {"inputs": TEXTS[0], "decode": True}).json()["data"][0]
    theirs = dict(ref.decode(ref.encode(TEXTS[:1], convert_to_tensor=True))[0])
    ours = dict(zip(item["tokens"], item["values"], strict=True))
    assert set(ours) == set(theirs)
    np.testing.assert_allclose([ours[t] for t in theirs], list(theirs.values()), atol=1e-5)


def test_the_card_says_what_it_is(srv):
    card = srv.get("/v1/models/tiny-splade").json()
    assert (card["task"], card["pooling"], card["normalize"]) == ("sparse-embedding", "splade", False)


def test_attention_and_removed_heads(srv, sparse):
    from transformers import AutoTokenizer, BertForMaskedLM

    from headwise.model.splade import splade_pool
    from tests.fixtures.references import ablated_forward

    ckpt, ref = sparse["tiny-splade"]
    mlm = BertForMaskedLM.from_pretrained(str(ckpt), attn_implementation="eager").eval()  # the encoder's masked LM
    text = TEXTS[0]
    r = srv.post("/v1/embed_sparse", {"inputs": text, "attention": {"layers": [0], "heads": [1]}})
    assert r.status_code == 200, r.text
    att = r.json()["data"][0]["attention"]
    b = AutoTokenizer.from_pretrained(str(ckpt))([text], return_tensors="pt")
    with torch.no_grad():
        want = mlm(**b, output_attentions=True).attentions[0][0, 1].numpy()  # [T, T]
    assert att["shape"] == [1, 1, *want.shape]
    np.testing.assert_allclose(np.array(att["data"]).reshape(want.shape), want, atol=1e-4)
    removed = srv.post("/v1/embed_sparse", {"inputs": text, "ablate": {"0": [0, 1]}})
    assert removed.status_code == 200, removed.text
    mask = np.ones((1, mlm.config.num_hidden_layers, mlm.config.num_attention_heads), np.float32)
    mask[0, 0] = 0
    with torch.no_grad():
        w = splade_pool(ablated_forward(mlm, mask, **b).logits, b["attention_mask"])[0].numpy()
    got = dense(removed.json()["data"][0], w.shape[0])
    np.testing.assert_allclose(got, w, atol=1e-5)
    assert np.abs(got - ref.encode([text], convert_to_tensor=True).to_dense().numpy()[0]).max() > 1e-4  # it changed


def test_what_cannot_be_answered_is_refused_in_the_native_shape(srv):
    r = srv.post("/v1/embed_sparse", {"inputs": "the cat " * 40, "truncate": False})
    assert r.status_code == 422, r.text
    assert "over this model's limit" in r.json()["error"]["message"]
    assert srv.post("/v1/embed_sparse", {"inputs": "the cat " * 40}).status_code == 200  # cut by default
    empty = srv.post("/v1/embed_sparse", {"inputs": []})
    assert (empty.status_code, empty.json()["error"]["type"]) == (400, "invalid_request")
    dense_asked = srv.post("/v1/embed", {"inputs": "the cat"})
    assert dense_asked.status_code == 422
    assert "is a sparse embedding model: use POST /v1/embed_sparse" in dense_asked.json()["error"]["message"]


def test_an_embedding_model_is_refused_with_the_one_message(start_server):
    srv = start_server()
    r = srv.post("/v1/embed_sparse", {"inputs": "the cat"})
    assert r.status_code == 422, r.text
    assert "/v1/embed_sparse serves sparse embedding models" in r.json()["error"]["message"]


def test_tei_embed_sparse_answers_teis_shape(srv, sparse):
    """TEI's POST /embed_sparse: per input its [{index, value}, ...], the native route's entries;
    token-id inputs as TEI takes them; /info says what TEI says of a SPLADE model."""
    from transformers import AutoTokenizer

    ckpt, _ = sparse["tiny-splade"]
    native = srv.post("/v1/embed_sparse", {"inputs": TEXTS}).json()["data"]
    r = srv.post("/embed_sparse", {"inputs": TEXTS})
    assert r.status_code == 200, r.text
    assert "x-compute-time" in r.headers
    for got, want in zip(r.json(), native, strict=True):
        assert [v["index"] for v in got] == want["indices"] and [v["value"] for v in got] == want["values"]
    ids = AutoTokenizer.from_pretrained(str(ckpt))(TEXTS[1])["input_ids"]
    by_ids = srv.post("/embed_sparse", {"inputs": ids})
    assert by_ids.status_code == 200, by_ids.text
    assert [v["index"] for v in by_ids.json()[0]] == native[1]["indices"]
    info = srv.get("/info").json()
    assert info["model_type"] == {"embedding": {"pooling": "splade"}}


def test_tei_refusals_come_in_teis_shape(srv, start_server):
    long = srv.post("/embed_sparse", {"inputs": "the cat " * 40, "truncate": False})
    assert (long.status_code, long.json()) == (422, {"error": long.json()["error"], "error_type": "Validation"})
    prompt = srv.post("/embed_sparse", {"inputs": "the cat", "prompt_name": "query"})
    assert prompt.status_code == 422 and set(prompt.json()) == {"error", "error_type"}, prompt.text
    other = start_server().post("/embed_sparse", {"inputs": "the cat"})
    assert (other.status_code, other.json()["error_type"]) == (424, "Backend"), other.text
    assert "no model served is a sparse embedding model (SPLADE: a SparseEncoder): /embed_sparse" in other.json()["error"]


def test_the_python_client_reads_it(srv, sparse):
    """headwise.client's embed_sparse (sync and async): the route's answer as arrays, decoded
    tokens, attention; a refusal as HeadwiseError."""
    import asyncio

    from headwise.client import AsyncClient, Client, HeadwiseError

    texts = ["the cat sat on the mat.", "a dog"]
    want = srv.post("/v1/embed_sparse", {"inputs": texts, "decode": True, "attention": {"layers": [0]}}).json()
    with Client(srv.url) as c:
        res = c.embed_sparse(texts, decode=True, attention={"layers": [0], "encoding": "base64"})
        for got, item in zip(res.data, want["data"], strict=True):
            assert got.indices.tolist() == item["indices"] and got.tokens == item["tokens"]
            assert np.array_equal(got.values, np.asarray(item["values"], np.float32))
            assert np.allclose(got.attention.values, np.asarray(item["attention"]["data"], dtype=np.float32))
            dense = got.dense(int(got.indices.max()) + 1)
            assert np.array_equal(dense[got.indices], got.values) and (dense > 0).sum() == len(got.indices)
        with pytest.raises(HeadwiseError) as e:
            c.embed_sparse("the cat " * 40, truncate=False)
        assert e.value.status == 422

    async def one():
        async with AsyncClient(srv.url) as c:
            return await c.embed_sparse("a dog")

    got = asyncio.run(one()).data[0]
    assert got.tokens is None and got.indices.tolist() == want["data"][1]["indices"]
