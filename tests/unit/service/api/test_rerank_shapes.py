"""Rerank wire shapes in-process with a fake cross-encoder: Jina's body on /v1/rerank beside
headwise's own (told apart by `documents` / `texts`), Cohere's /v2/rerank, each protocol's
errors naming the field, the OpenAPI document of both bodies, and the pure shaping of
service.api.compat.rerank."""

import json
import uuid

import numpy as np
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer, processors

from headwise.service.api.compat import rerank as compat
from headwise.service.api.ranking import best_first
from headwise.service.api.routers.classify import RerankBody, RerankRequest
from tests.unit.fakes import SECRET_TEXT, FakeBackend, _sha, client_for, make_package, wait_ready

QUERY = "the cat"
DOCS = ["a dog", "the cat sat on the mat", "hello world", "the quick brown fox jumps over the lazy dog"]


class RelevanceBackend(FakeBackend):
    """A fake cross-encoder: its one logit is the masked mean of the hidden states' first value
    (times 4), so it depends on every token of the pair and on nothing else."""

    def run(self, role, feeds, outputs):
        out = super().run(role, feeds, [o for o in outputs if o != "logits"] + ["last_hidden_state"])
        m = feeds["attention_mask"][..., None].astype(np.float32)
        out["logits"] = 4 * ((out["last_hidden_state"] * m).sum(1) / m.sum(1))[:, :1]
        return {k: out[k] for k in outputs}


def _reranker(root, name: str, max_len: int = 32):
    """make_package's tokenizer with a pair template, as a 1-label classification package."""
    folder = make_package(root, name, max_len=max_len)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(task="classification", labels=["score"])
    manifest["tokenizer"]["sha256"] = _sha(folder / "tokenizer.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank") / "models"
    make_package(root, "tiny")  # an embedding model beside it
    with client_for(_reranker(root, "zrank"), backend=RelevanceBackend, max_response_bytes=20000,
                    max_input_chars=5000) as client:
        wait_ready(client)
        yield client


def native(c, **extra) -> dict:
    r = c.post("/v1/rerank", json={"model": "zrank", "query": QUERY, "texts": DOCS, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def native_error(r, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == status and SECRET_TEXT not in r.text
    return body["error"]["message"]


def cohere_error(r, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"message"} and SECRET_TEXT not in r.text
    return body["message"]


# -- the pure pieces ---------------------------------------------------------------------------

def test_keyed_body_picks_the_model_by_key():
    own = RerankBody.model_validate_json(b'{"query": "q", "texts": ["a"]}').root
    jina = RerankBody.model_validate_json(b'{"query": "q", "documents": ["a", {"text": "b"}]}').root
    assert isinstance(own, RerankRequest) and own.texts == ["a"]
    assert isinstance(jina, compat.JinaRerankRequest) and compat.document_texts(jina.documents) == ["a", "b"]
    assert jina.return_documents is True and jina.top_n is None and jina.model is None  # Jina's defaults
    cases = {b'{"query": "q", "texts": ["a"], "documents": ["a"]}': [("both_bodies", ("documents",))],
             b'{"query": "q"}': [("missing", ("texts",))],  # neither: headwise's own body, naming what it misses
             b'{"documents": ["a"], "top_n": -1}': [("missing", ("query",)), ("greater_than_equal", ("top_n",))],
             b'[1]': [("model_type", ())]}
    for raw, want in cases.items():
        with pytest.raises(ValidationError) as e:
            RerankBody.model_validate_json(raw)
        assert [(x["type"], x["loc"]) for x in compat.untag(e.value.errors())] == want, raw


def test_results_are_best_first_ties_by_index():
    scores = [0.5, 0.9, 0.5, 0.1]
    assert best_first(scores) == [1, 0, 2, 3] and best_first(scores, 2) == [1, 0]
    assert compat.relevance_results([1, 0], scores, None) == [{"index": 1, "relevance_score": 0.9},
                                                              {"index": 0, "relevance_score": 0.5}]
    assert compat.relevance_results([2], scores, ["a", "b", "c", "d"]) == [
        {"index": 2, "relevance_score": 0.5, "document": {"text": "c"}}]
    assert [compat.search_units(n) for n in (1, 100, 101, 250)] == [1, 1, 2, 3]
    assert compat.cut_at("the cat sat", [(0, 3), (4, 7), (8, 11)], 2) == "the cat"
    assert compat.cut_at("the cat", [(0, 3), (4, 7)], 2) == "the cat"


def test_fields_named_renames_only_the_listed_field():
    from headwise.service.errors import FIELD, InvalidRequest

    with pytest.raises(InvalidRequest) as e, compat.fields_named({"texts": "documents"}):
        raise InvalidRequest(f"'{FIELD}' is empty", field="texts")
    assert (e.value.field, str(e.value)) == ("documents", "'documents' is empty")
    with pytest.raises(InvalidRequest) as e, compat.fields_named({"texts": "documents"}):
        raise InvalidRequest(f"{FIELD} is long", field="query")
    assert (e.value.field, str(e.value)) == ("query", "query is long")


# -- /v1/rerank: Jina's body ---------------------------------------------------------------------

def test_jina_body_scores_equal_the_native_body(c):
    own = native(c)
    r = c.post("/v1/rerank", json={"model": "zrank", "query": QUERY, "documents": [DOCS[0], *({"text": d} for d in DOCS[1:])]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert list(got) == ["id", "model", "usage", "results"] and got["model"] == "zrank" and got["usage"] == own["usage"]
    assert [(x["index"], x["relevance_score"]) for x in got["results"]] == [(x["index"], x["score"]) for x in own["results"]]
    assert all(list(x) == ["index", "relevance_score", "document"] and x["document"] == {"text": DOCS[x["index"]]}
               for x in got["results"])  # Jina's default: return_documents true
    assert len({x["relevance_score"] for x in got["results"]}) == len(DOCS)  # the fake tells them apart
    bare = c.post("/v1/rerank", json={"model": "zrank", "query": QUERY, "documents": DOCS, "top_n": 2,
                                      "return_documents": False}).json()
    assert bare["results"] == [{"index": x["index"], "relevance_score": x["relevance_score"]} for x in got["results"][:2]]


def test_native_body_answers_as_before(c):
    got = native(c, top_n=3, return_text=True)
    assert list(got) == ["model", "results", "usage"] and len(got["results"]) == 3
    assert all(list(x) == ["index", "score", "text"] and x["text"] == DOCS[x["index"]] for x in got["results"])
    assert all(list(x) == ["index", "score"] for x in native(c)["results"])


@pytest.mark.parametrize("body, status, starts", [
    ({"query": "q", "texts": ["a"], "documents": ["a"]}, 422, "documents: send 'texts'"),
    ({"query": "q"}, 422, "texts: Field required"),
    ({"documents": ["a"]}, 422, "query: Field required"),
    ({"query": "q", "documents": ["a"], "top_n": -1}, 422, "top_n: "),
    ({"query": "q", "documents": [{"txt": "a"}]}, 422, "documents.0"),
    ({"query": "q", "documents": []}, 400, "'documents' is empty"),
    ({"query": "q", "documents": ["a", "b" * 5001], "return_documents": False}, 413, "documents[1] has 5001"),
    ({"query": "q", "documents": ["a"], "return_text": True}, 422, "return_text: Extra inputs"),
])
def test_jina_body_errors_are_native_and_name_the_field(c, body, status, starts):
    assert native_error(c.post("/v1/rerank", json={"model": "zrank", **body}), status).startswith(starts)


def test_jina_body_model_errors(c):
    assert native_error(c.post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["a"]}), 404)
    msg = native_error(c.post("/v1/rerank", json={"model": "tiny", "query": "q", "documents": ["a"]}), 422)
    assert "embedding model" in msg
    msg = native_error(c.post("/v1/rerank", json={"query": "q", "documents": ["a"]}), 422)
    assert "several models" in msg
    r = c.post("/v1/rerank", json={"model": "zrank", "query": "q", "documents": [SECRET_TEXT * 1000] * 4})
    assert "return_documents: false" in native_error(r, 413)  # echoed documents over the response cap


# -- /v2/rerank: Cohere's --------------------------------------------------------------------------

def test_cohere_answer_and_scores(c):
    own = {x["index"]: x["score"] for x in native(c)["results"]}
    r = c.post("/v2/rerank", json={"model": "zrank", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    got = r.json()
    assert list(got) == ["id", "results", "meta"] and uuid.UUID(got["id"]).version == 4
    assert got["meta"] == {"api_version": {"version": "2"}, "billed_units": {"search_units": 1},
                           "tokens": {"input_tokens": native(c)["usage"]["prompt_tokens"], "output_tokens": 0}}
    assert [x["relevance_score"] for x in got["results"]] == sorted(own.values(), reverse=True)
    assert all(x["relevance_score"] == own[x["index"]] and "document" not in x for x in got["results"])
    top = c.post("/v2/rerank", json={"model": "zrank", "query": QUERY, "documents": DOCS, "top_n": 1,
                                     "return_documents": True, "priority": 3,
                                     "relevant_spans": {"mode": "disabled"}}).json()
    best = got["results"][0]
    assert top["results"] == [{**best, "document": {"text": DOCS[best["index"]]}}]


def test_cohere_max_tokens_per_doc_cuts_by_the_tokenizer(c):
    long = DOCS[3]  # 9 tokens
    cut = c.post("/v2/rerank", json={"model": "zrank", "query": QUERY, "documents": [long, "a"],
                                     "max_tokens_per_doc": 3, "return_documents": True}).json()
    want = {x["index"]: x["score"] for x in native(c, texts=["the quick brown", "a"])["results"]}
    assert {x["index"]: x["relevance_score"] for x in cut["results"]} == want
    assert {x["document"]["text"] for x in cut["results"]} == {long, "a"}  # the document as sent
    whole = {x["index"]: x["score"] for x in native(c, texts=[long, "a"])["results"]}
    for n in (9, 32, 4096):  # cutting nothing: the same scores
        got = c.post("/v2/rerank", json={"model": "zrank", "query": QUERY, "documents": [long, "a"],
                                         "max_tokens_per_doc": n}).json()
        assert {x["index"]: x["relevance_score"] for x in got["results"]} == whole


@pytest.mark.parametrize("body, status, starts", [
    ({"query": "q", "documents": ["a"]}, 422, "model: Field required"),
    ({"model": "zrank", "documents": ["a"]}, 422, "query: Field required"),
    ({"model": "zrank", "query": "q", "documents": ["a"], "texts": ["a"]}, 422, "texts: Extra inputs"),
    ({"model": "zrank", "query": "q", "documents": ["a"], "top_n": 0}, 422, "top_n: "),
    ({"model": "zrank", "query": "q", "documents": ["a"], "max_tokens_per_doc": 0}, 422, "max_tokens_per_doc: "),
    ({"model": "zrank", "query": "q", "documents": []}, 400, "'documents' is empty"),
    ({"model": "zrank", "query": "q", "documents": [], "max_tokens_per_doc": 2}, 400, "'documents' is empty"),
    ({"model": "zrank", "query": "q", "documents": ["a", "b" * 5001]}, 413, "documents[1] has 5001"),
    ({"model": "zrank", "query": "q", "documents": ["a", "b" * 5001], "max_tokens_per_doc": 2}, 413,
     "documents[1] has 5001"),
    ({"model": "zrank", "query": "q", "documents": ["a"], "relevant_spans": {"mode": "enabled"}}, 422,
     "relevant_spans: "),
    ({"model": "nope", "query": "q", "documents": ["a"]}, 404, "no model by that name"),
])
def test_cohere_errors_name_the_field(c, body, status, starts):
    assert cohere_error(c.post("/v2/rerank", json=body), status).startswith(starts)


@pytest.mark.parametrize("extra", [{}, {"max_tokens_per_doc": 2}])
def test_cohere_wrong_kind_of_model(c, extra):
    msg = cohere_error(c.post("/v2/rerank", json={"model": "tiny", "query": "q", "documents": ["a"], **extra}), 422)
    assert "embedding model" in msg


# -- OpenAPI --------------------------------------------------------------------------------------

def test_openapi_documents_both_bodies(c):
    spec = c.get("/openapi.json").json()
    body = spec["paths"]["/v1/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/RerankBody"}
    schemas = spec["components"]["schemas"]
    refs = {x["$ref"].rsplit("/", 1)[-1] for x in schemas["RerankBody"]["oneOf"]}
    assert refs == {"RerankRequest", "JinaRerankRequest"} and "documents" in schemas["JinaRerankRequest"]["properties"]
    answers = spec["paths"]["/v1/rerank"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert {x["$ref"].rsplit("/", 1)[-1] for x in answers["anyOf"]} == {"RerankResponse", "JinaRerankResponse"}
    cohere = spec["paths"]["/v2/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert cohere["title"] == "CohereRerankRequest" and "$ref" not in json.dumps(cohere)
