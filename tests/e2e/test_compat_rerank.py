"""Rerank in other APIs' shapes end to end: a real `headwise serve` process on the tiny
cross-encoder beside an embedding package. Jina's body on /v1/rerank equals the native body's
scores and sentence-transformers' CrossEncoder; Cohere's /v2/rerank through the cohere SDK
(ClientV2), max_tokens_per_doc cut as transformers' tokenizer cuts; a RAG framework's reranker
(answerdotai's `rerankers`, its Jina API ranker pointed at this server) ranks as the native
route; and each protocol's errors in its own shape, naming the field."""

from __future__ import annotations

import cohere
import httpx
import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUERY = "where is the cat"
DOCS = ["a dog", "the cat sat on the mat", "blue fox jumps", "the cat is on the mat, the dog is not",
        "where is the cat? on the mat", ""]
MODEL = "tiny-reranker"


@pytest.fixture(scope="module")
def srv(start_server, classifier_packages, tiny_package, tmp_path_factory):
    models = tmp_path_factory.mktemp("rerank-models")
    (models / MODEL).symlink_to(classifier_packages["models"] / MODEL, target_is_directory=True)
    (models / "tiny").symlink_to(tiny_package, target_is_directory=True)  # an embedding model beside it
    return start_server(models=models)


def ok(r: httpx.Response) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


def native(srv, texts=DOCS) -> dict[int, float]:
    """The native route's score per index (its own body)."""
    got = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "texts": texts}))
    return {x["index"]: x["score"] for x in got["results"]}


def best_first(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda i: (-scores[i], i))


def test_jina_body_equals_the_native_body_and_cross_encoder(srv, classifier_packages):
    from sentence_transformers import CrossEncoder

    own = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "texts": DOCS}))
    jina = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCS}))
    assert jina["model"] == MODEL and jina["usage"] == own["usage"] and jina["usage"]["prompt_tokens"] > 0
    assert [x["index"] for x in jina["results"]] == [x["index"] for x in own["results"]]
    for j, o in zip(jina["results"], own["results"], strict=True):
        assert abs(j["relevance_score"] - o["score"]) < 1e-6 and j["document"] == {"text": DOCS[j["index"]]}
    ckpt, _ = classifier_packages[MODEL]
    ce = CrossEncoder(str(ckpt), device="cpu")  # sigmoid over its one label, as headwise answers
    want = ce.predict([(QUERY, d) for d in DOCS])
    for x in jina["results"]:
        assert abs(x["relevance_score"] - float(want[x["index"]])) < 1e-6, (x, want)
    objects = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "documents": [{"text": d} for d in DOCS],
                                         "top_n": 2, "return_documents": False}))
    assert objects["results"] == [{"index": x["index"], "relevance_score": x["relevance_score"]}
                                  for x in jina["results"][:2]]


def test_jina_body_answers_vllms_rerank_fields(srv):
    """vLLM's /rerank takes Jina's body: its answer carries an id, and top_n 0 (vLLM's default)
    returns every document, as vLLM does."""
    full = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCS}))
    zero = ok(srv.post("/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCS, "top_n": 0}))
    assert zero["results"] == full["results"] and len(zero["results"]) == len(DOCS)
    assert zero["id"].startswith("rerank-") and zero["id"] != full["id"]
    assert len(ok(srv.post("/rerank", {"model": MODEL, "query": QUERY, "documents": DOCS, "top_n": 0}))["results"]) == len(DOCS)


def test_cohere_sdk_reranks_as_the_native_route(srv):
    own = native(srv)
    client = cohere.ClientV2(api_key="unused", base_url=srv.url)
    got = client.rerank(model=MODEL, query=QUERY, documents=DOCS, top_n=3)
    assert [r.index for r in got.results] == best_first(own)[:3]
    assert all(abs(r.relevance_score - own[r.index]) < 1e-6 for r in got.results)
    assert got.id and got.meta.api_version.version == "2" and got.meta.billed_units.search_units == 1
    assert got.meta.tokens.input_tokens > 0 and got.meta.tokens.output_tokens == 0
    every = client.rerank(model=MODEL, query=QUERY, documents=DOCS * 20)  # 120 documents: 2 search units
    assert len(every.results) == 120 and every.meta.billed_units.search_units == 2


def test_max_tokens_per_doc_cuts_as_the_tokenizer_does(srv, classifier_packages):
    from transformers import PreTrainedTokenizerFast

    ckpt, _ = classifier_packages[MODEL]
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")
    n = 4
    cut = []
    for d in DOCS:
        spans = tok(d, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        cut.append(d if len(spans) <= n else d[:spans[n - 1][1]])
    assert any(c != d for c, d in zip(cut, DOCS, strict=True))
    want = native(srv, cut)
    client = cohere.ClientV2(api_key="unused", base_url=srv.url)
    got = client.rerank(model=MODEL, query=QUERY, documents=DOCS, max_tokens_per_doc=n)
    assert [r.index for r in got.results] == best_first(want)
    assert all(abs(r.relevance_score - want[r.index]) < 1e-6 for r in got.results)
    whole = client.rerank(model=MODEL, query=QUERY, documents=DOCS, max_tokens_per_doc=4096)
    assert {r.index: r.relevance_score for r in whole.results} == pytest.approx(native(srv), abs=1e-6)


def test_rerankers_jina_ranker_ranks_as_the_native_route(srv):
    from rerankers import Reranker

    ranker = Reranker(MODEL, model_type="jina", api_key="unused", url=f"{srv.url}/v1/rerank", verbose=0)
    ranked = ranker.rank(query=QUERY, docs=DOCS)
    own = native(srv)
    assert [r.document.doc_id for r in ranked.results] == best_first(own)
    assert [r.rank for r in ranked.results] == list(range(1, len(DOCS) + 1))
    for r in ranked.results:
        assert r.document.text == DOCS[r.document.doc_id] and abs(r.score - own[r.document.doc_id]) < 1e-6
    assert ranked.top_k(1)[0].document.doc_id == best_first(own)[0]


def native_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and r.json()["error"]["code"] == status
    return r.json()["error"]["message"]


def cohere_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    assert set(r.json()) == {"message"}
    return r.json()["message"]


@pytest.mark.parametrize("body, status, field", [
    ({"model": MODEL, "documents": ["a"]}, 422, "query"),
    ({"model": MODEL, "query": "q", "documents": ["a"], "texts": ["a"]}, 422, None),
    ({"model": MODEL, "query": "q", "documents": ["a"], "top_n": -1}, 422, "top_n"),
    ({"model": MODEL, "query": "q", "documents": []}, 400, "'documents'"),
    ({"model": "nope", "query": "q", "documents": ["a"]}, 404, None),
    ({"model": "tiny", "query": "q", "documents": ["a"]}, 422, None),  # an embedding model asked to rerank
])
def test_errors_in_each_protocols_shape(srv, body, status, field):
    jina = native_error(srv.post("/v1/rerank", body), status)
    co = cohere_error(srv.post("/v2/rerank", body), status)
    if field is not None:
        assert jina.startswith(field) and co.startswith(field), (jina, co)
    if "texts" in body:  # Jina's body and headwise's at once; Cohere's has no `texts`
        assert jina.startswith("documents: send 'texts'") and co.startswith("texts: Extra inputs")
    if body["model"] == "nope":
        assert "no model by that name" in jina and "no model by that name" in co
    if body["model"] == "tiny":
        assert "embedding model" in jina and "embedding model" in co


def test_cohere_sdk_raises_its_own_errors(srv):
    client = cohere.ClientV2(api_key="unused", base_url=srv.url)
    with pytest.raises(cohere.errors.NotFoundError) as e:
        client.rerank(model="nope", query=QUERY, documents=DOCS)
    assert "no model by that name" in e.value.body["message"]
    with pytest.raises(cohere.errors.UnprocessableEntityError) as e:
        client.rerank(model=MODEL, query=QUERY, documents=DOCS, top_n=0)
    assert e.value.body["message"].startswith("top_n")
    with pytest.raises(cohere.errors.UnprocessableEntityError):
        client.rerank(model="tiny", query=QUERY, documents=DOCS)
    with pytest.raises(cohere.errors.BadRequestError) as e:
        client.rerank(model=MODEL, query=QUERY, documents=[])
    assert e.value.body["message"] == "'documents' is empty"
    assert np.isfinite([r.relevance_score for r in client.rerank(model=MODEL, query="", documents=DOCS).results]).all()


def test_tei_rerank_takes_jinas_body_too(srv):
    """TEI's /rerank (and POST /, /invocations) answer Jina's body in Jina's shape, its own body
    unchanged; the errors stay TEI's."""
    own = ok(srv.post("/rerank", {"model": MODEL, "query": QUERY, "texts": DOCS}))
    assert {x["index"] for x in own} == set(range(len(DOCS))) and "relevance_score" not in own[0]
    scores = {x["index"]: x["score"] for x in own}
    for path in ("/rerank", "/", "/invocations"):
        jina = ok(srv.post(path, {"model": MODEL, "query": QUERY, "documents": DOCS, "top_n": 3}))
        assert [x["index"] for x in jina["results"]] == best_first(scores)[:3]
        assert all(abs(x["relevance_score"] - scores[x["index"]]) < 1e-6 for x in jina["results"])
        assert jina["results"][0]["document"] == {"text": DOCS[jina["results"][0]["index"]]}
    both = srv.post("/rerank", {"query": QUERY, "texts": DOCS, "documents": DOCS})
    assert both.status_code == 422 and both.json()["error_type"] == "Validation" and "documents" in both.json()["error"]
    empty = srv.post("/rerank", {"query": QUERY, "documents": []})
    assert empty.status_code == 400 and empty.json() == {"error": "'documents' is empty", "error_type": "Empty"}


def test_tei_rerank_cut_at_the_start_equals_a_cross_encoder_cutting_left(srv, classifier_packages):
    """truncation_direction left: each pair cut longest-first at each text's start, as
    transformers' tokenizer with truncation_side "left" cuts it for sentence-transformers'
    CrossEncoder."""
    from sentence_transformers import CrossEncoder

    ckpt, _ = classifier_packages[MODEL]
    ce = CrossEncoder(str(ckpt), device="cpu")
    ce.tokenizer.truncation_side = "left"
    n = ce.tokenizer.model_max_length
    docs = ["the cat " * n + "sat on the mat", "a dog " * n + "is not here", "blue fox"]
    query = "where " * n + "is the cat"
    got = ok(srv.post("/rerank", {"model": MODEL, "query": query, "texts": docs, "truncation_direction": "left"}))
    right = ok(srv.post("/rerank", {"model": MODEL, "query": query, "texts": docs}))
    want = ce.predict([(query, d) for d in docs])
    for x in got:
        assert abs(x["score"] - float(want[x["index"]])) < 1e-6, (x, want)
    assert {x["index"]: x["score"] for x in got} != {x["index"]: x["score"] for x in right}

