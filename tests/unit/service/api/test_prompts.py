"""Prompts and Matryoshka dimensions in-process with the fake backend (service.engine.prompts,
service.engine.matryoshka): a prompt's answer equals the prompted text's, on every embedding
route; the default prompt (the package's, HEADWISE_DEFAULT_PROMPT_NAME); Cohere's input_type;
the prompt's tokens marked and counted; every refusal a 4xx naming what to change."""

import json

import numpy as np
import pytest

from headwise.service.engine import prompts
from headwise.service.engine.prompts import Prompt
from headwise.service.package import PackageError, load_package
from tests.unit.fakes import D_MODEL, client_for, make_package, wait_ready

PROMPTS = {"query": "query: ", "passage": "passage: ", "classification": "the cat ", "empty": ""}


def declare(folder, **fields):
    """The fake package with more manifest fields (the manifest vouches for other files only)."""
    m = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**m, **fields}))
    return folder


@pytest.fixture
def prompted(tmp_path):
    return declare(make_package(tmp_path / "prompted"), prompts=PROMPTS, default_prompt_name=None)


@pytest.fixture
def pc(prompted):
    with client_for(prompted) as c:
        wait_ready(c)
        yield c


def embed(c, inputs, **extra):
    r = c.post("/v1/embed", json={"inputs": inputs, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def vectors(body) -> np.ndarray:
    return np.float32([d["embedding"] for d in body["data"]])


def native_error(r, status, *words):
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    for w in words:
        assert w in message, message
    return message


# -- /v1/embed ---------------------------------------------------------------------------------

def test_prompt_name_embeds_the_prompt_then_the_text(pc):
    texts = ["the cat sat", "a dog"]
    got = embed(pc, texts, prompt_name="query")
    assert np.array_equal(vectors(got), vectors(embed(pc, ["query: " + t for t in texts])))
    assert got["prompt"] == {"name": "query", "text": "query: "}
    assert not np.array_equal(vectors(got), vectors(embed(pc, texts)))  # no default: no prompt


def test_the_prompts_tokens_are_marked_and_counted_in_usage(pc):
    plain, got = embed(pc, ["the cat sat"]), embed(pc, ["the cat sat"], prompt_name="classification")
    item = got["data"][0]
    assert item["tokens"] == ["[CLS]", "the", "cat", "the", "cat", "sat", "[SEP]"]
    assert item["prompt_span"] == [1, 3]  # "the cat " are positions 1 and 2; [CLS] is no prompt token
    assert got["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + 2
    assert "prompt_span" not in plain["data"][0] and "prompt" not in plain


def test_an_empty_prompt_is_no_prompt(pc):
    got = embed(pc, ["a dog"], prompt_name="empty")
    assert np.array_equal(vectors(got), vectors(embed(pc, ["a dog"])))
    assert "prompt" not in got and "prompt_span" not in got["data"][0]


def test_a_prompt_name_the_model_lacks_is_422_naming_its_prompts(pc, client):
    native_error(pc.post("/v1/embed", json={"inputs": "a", "prompt_name": "nope"}), 422, "prompt_name",
                 "'nope'", "classification, empty, passage, query")
    native_error(client.post("/v1/embed", json={"inputs": "a", "prompt_name": "query"}), 422, "prompt_name",
                 "its prompts: none")


# -- the default prompt --------------------------------------------------------------------------

def test_the_packages_default_prompt_applies_when_none_is_named(tmp_path):
    pkg = declare(make_package(tmp_path / "models"), prompts=PROMPTS, default_prompt_name="passage")
    with client_for(pkg) as c:
        wait_ready(c)
        got = embed(c, ["a dog"])
        assert np.array_equal(vectors(got), vectors(embed(c, ["passage: a dog"], prompt_name="empty")))
        assert got["prompt"]["name"] == "passage"
        assert np.array_equal(vectors(embed(c, ["a dog"], prompt_name="query")),
                              vectors(embed(c, ["query: a dog"], prompt_name="empty")))  # named beats default
        card = c.get("/v1/models/tiny").json()
        assert card["prompts"] == PROMPTS and card["default_prompt_name"] == "passage"


def test_the_default_prompt_setting_applies_on_every_embedding_route(prompted):
    with client_for(prompted, default_prompt_name="query") as c:  # HEADWISE_DEFAULT_PROMPT_NAME=query
        wait_ready(c)
        want = vectors(embed(c, ["query: a dog"], prompt_name="empty"))
        assert np.array_equal(vectors(embed(c, ["a dog"])), want)
        openai = c.post("/v1/embeddings", json={"input": "a dog"}).json()["data"][0]["embedding"]
        assert np.array_equal(np.float32([openai]), want)
        assert np.array_equal(np.float32(c.post("/embed", json={"inputs": "a dog"}).json()), want)
        assert c.get("/v1/models/tiny").json()["default_prompt_name"] == "query"
        ids = c.post("/v1/tokenize", json={"inputs": "a dog"}).json()["data"][0]["ids"]
        as_ids = c.post("/embed", json={"inputs": [ids]}).json()  # token ids: used as they are
        assert np.array_equal(np.float32(as_ids), vectors(embed(c, ["a dog"], prompt_name="empty")))


def test_the_default_prompt_on_the_routes_without_a_prompt_field(prompted):
    with client_for(prompted, default_prompt_name="query") as c:
        wait_ready(c)
        want = vectors(embed(c, ["query: a dog", "query: the cat"], prompt_name="empty"))
        infer = c.post("/v2/models/tiny/infer", json={"inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a dog", "the cat"]}]}).json()
        got = np.float32(infer["outputs"][0]["data"]).reshape(2, -1)
        assert np.array_equal(got, want)  # KServe
        score = c.post("/score", json={"text_1": "a dog", "text_2": ["the cat"]}).json()["data"][0]["score"]
        cos = float(want[0].astype(np.float64) @ want[1] / np.linalg.norm(want[0]) / np.linalg.norm(want[1]))
        assert score == pytest.approx(cos, abs=1e-6)  # vLLM's score of an embedding model
        tokens = c.post("/v1/head_importance", json={"input": "a dog"}).json()["tokens"]
        assert tokens == ["[CLS]", "[UNK]", "[UNK]", "a", "dog", "[SEP]"]  # of "query: a dog" (the fake vocabulary)


def test_a_default_prompt_setting_the_model_lacks_stops_start_up(prompted):
    with pytest.raises(PackageError, match=r"HEADWISE_DEFAULT_PROMPT_NAME is 'nope'.*'tiny'.*query"), \
            client_for(prompted, default_prompt_name="nope"):
        pass


# -- TEI -----------------------------------------------------------------------------------------

def test_tei_prompt_name_on_embed_embed_all_similarity_and_tokenize(pc):
    want = vectors(embed(pc, ["query: a dog"]))
    assert np.array_equal(np.float32(pc.post("/embed", json={"inputs": "a dog", "prompt_name": "query"}).json()),
                          want)
    tokens = pc.post("/embed_all", json={"inputs": "a dog", "prompt_name": "query"}).json()[0]
    assert len(tokens) == len(embed(pc, ["query: a dog"])["data"][0]["tokens"])
    sims = pc.post("/similarity", json={"inputs": {"source_sentence": "a dog", "sentences": ["a dog"]},
                                        "parameters": {"prompt_name": "query"}})
    assert sims.status_code == 200 and sims.json() == pytest.approx([1.0], abs=1e-6)
    toks = pc.post("/tokenize", json={"inputs": "a dog", "prompt_name": "query"}).json()[0]
    assert [t["text"] for t in toks][:3] == ["[CLS]", "query", ":"]
    for path, body in [("/embed", {"inputs": "a", "prompt_name": "nope"}),
                       ("/embed", {"inputs": [[2, 5, 3]], "prompt_name": "query"}),  # ids take no prompt
                       ("/tokenize", {"inputs": "a", "prompt_name": "nope"})]:
        r = pc.post(path, json=body)
        assert r.status_code == 422 and r.json()["error_type"] == "Validation" and "prompt_name" in r.json()["error"]


# -- Cohere's input_type --------------------------------------------------------------------------

def cohere(c, input_type, **extra):
    return c.post("/v2/embed", json={"model": "tiny", "texts": ["a dog"], "input_type": input_type, **extra})


@pytest.mark.parametrize(("input_type", "prefix"), [
    ("search_query", "query: "), ("search_document", "passage: "), ("classification", "the cat ")])
def test_input_type_picks_the_models_prompt_for_that_use(pc, input_type, prefix):
    got = cohere(pc, input_type).json()["embeddings"]["float"]
    assert np.array_equal(np.float32(got), vectors(embed(pc, [prefix + "a dog"])))
    assert cohere(pc, input_type).json()["texts"] == ["a dog"]  # echoed as sent


def test_input_type_without_a_prompt_for_it_is_422_on_a_model_with_prompts(pc):
    r = cohere(pc, "clustering")
    assert r.status_code == 422, r.text
    assert "input_type" in r.json()["message"] and "'clustering'" in r.json()["message"]


def test_input_type_document_prefers_document_over_passage(tmp_path):
    pkg = declare(make_package(tmp_path / "models"), prompts={"document": "the ", "passage": "a "})
    with client_for(pkg) as c:
        wait_ready(c)
        got = cohere(c, "search_document").json()["embeddings"]["float"]
        assert np.array_equal(np.float32(got), vectors(embed(c, ["the a dog"])))


# -- Matryoshka dimensions -------------------------------------------------------------------------

def test_dimensions_are_refused_without_matryoshka_dimensions(client):
    r = client.post("/v1/embeddings", json={"input": "a dog", "dimensions": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions", r.text
    assert "HEADWISE_MATRYOSHKA_DIMENSIONS" in r.json()["error"]["message"]
    whole = client.post("/v1/embeddings", json={"input": "a dog", "dimensions": D_MODEL})
    assert whole.status_code == 200 and len(whole.json()["data"][0]["embedding"]) == D_MODEL


def test_dimensions_declared_by_the_package_are_served_and_others_refused(tmp_path):
    pkg = declare(make_package(tmp_path / "models"), matryoshka_dimensions=[8, 4])
    with client_for(pkg) as c:
        wait_ready(c)
        full = vectors(embed(c, ["a dog"]))[0].astype(np.float64)
        got = c.post("/v1/embeddings", json={"input": "a dog", "dimensions": 4}).json()["data"][0]["embedding"]
        np.testing.assert_allclose(got, full[:4] / np.linalg.norm(full[:4]), atol=1e-6)
        r = c.post("/v1/embeddings", json={"input": "a dog", "dimensions": 5})
        assert r.status_code == 400 and "(8, 4;" in r.json()["error"]["message"]
        assert c.get("/v1/models/tiny").json()["matryoshka_dimensions"] == [8, 4]


def test_a_matryoshka_setting_over_the_embedding_size_stops_start_up(package):
    with pytest.raises(PackageError, match=rf"HEADWISE_MATRYOSHKA_DIMENSIONS names {D_MODEL + 1}"), \
            client_for(package, matryoshka_dimensions=(D_MODEL + 1,)):
        pass


# -- occlusion and similarity -------------------------------------------------------------------

def test_occlusion_marks_the_prompts_tokens_and_shifts_spans(pc):
    r = pc.post("/v1/occlusion", json={"input": "a dog", "prompt_name": "classification"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prompt"] == {"name": "classification", "text": "the cat "} and body["prompt_span"] == [1, 3]
    assert body["tokens"] == ["[CLS]", "the", "cat", "a", "dog", "[SEP]"] and len(body["effects"]) == 6
    spans = pc.post("/v1/occlusion", json={"input": "a dog", "prompt_name": "classification", "spans": [[2, 5]]})
    unit = spans.json()["units"][0]
    assert unit["text"] == "dog" and unit["tokens"] == [4] and unit["start"] == 10  # into the prompted text
    bad = pc.post("/v1/occlusion", json={"input": "a dog", "prompt_name": "classification", "spans": [[-3, 2]]})
    assert bad.status_code == 422  # a span reaching into the prompt is refused, as one outside `input`


def test_similarity_with_a_prompt_equals_the_prompted_texts(pc):
    got = pc.post("/v1/similarity", json={"source": "a dog", "targets": ["the cat"], "prompt_name": "query"}).json()
    want = pc.post("/v1/similarity", json={"source": "query: a dog", "targets": ["query: the cat"]}).json()
    assert got["data"][0]["score"] == want["data"][0]["score"] and got["prompt"]["name"] == "query"


# -- the rules, pure -----------------------------------------------------------------------------

class Pkg:
    name = "m"

    def __init__(self, prompts, default=None):
        self.prompts, self.default_prompt_name = prompts, default


def test_resolution_order_named_then_setting_then_package():
    p = Pkg({"q": "q: ", "d": "d: "}, default="d")
    assert prompts.resolve(p, None, "q") == Prompt("q", "q: ")
    assert prompts.resolve(p, "q", None) == Prompt("q", "q: ")
    assert prompts.resolve(p, None, None) == Prompt("d", "d: ")
    assert prompts.resolve(Pkg({}), None, None) is None


def test_input_type_on_a_model_with_only_empty_prompts_is_no_prompt():
    # sentence-transformers 5+ saves {"query": "", "document": ""} for every model
    assert prompts.for_input_type(Pkg({"query": "", "document": ""}), "clustering", None) is None
    assert prompts.for_input_type(Pkg({}), "search_query", None) is None
    assert prompts.for_input_type(Pkg({"query": "q: "}), None, None) is None


def test_a_span_is_the_tokens_that_begin_inside_the_prompt():
    special = frozenset({2, 3})
    ids, offsets = [2, 10, 11, 12, 3], [(0, 0), (0, 5), (5, 6), (7, 10), (0, 0)]
    assert prompts.span(Prompt("q", "query: "), ids, offsets, special) == [1, 3]
    assert prompts.span(Prompt("q", ""), ids, offsets, special) is None
    assert prompts.span(None, ids, offsets, special) is None


def test_a_manifest_with_bad_prompts_or_dimensions_is_refused(tmp_path):
    for i, fields in enumerate([{"prompts": {"q": 3}}, {"prompts": {"q": "q"}, "default_prompt_name": "x"},
                                {"matryoshka_dimensions": [D_MODEL + 1]}, {"matryoshka_dimensions": "8"}]):
        pkg = declare(make_package(tmp_path / str(i)), **fields)
        with pytest.raises(PackageError, match=r"manifest\.json"):
            load_package(pkg)
