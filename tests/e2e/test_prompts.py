"""Prompts and Matryoshka dimensions against a real `headwise serve` (fp32, CPU) on a tiny
BERT saved with sentence-transformers prompts, exported by the real pipeline (issue 38, items
5 and 6): `prompt_name` answers equal `SentenceTransformer.encode(texts, prompt_name=...)`
through /v1/embed, huggingface_hub's InferenceClient (TEI's /embed) and the cohere client's
input_type; HEADWISE_DEFAULT_PROMPT_NAME; `dimensions` only to the declared sizes; every
refusal a 4xx, and a default prompt the model lacks stops start-up."""

from __future__ import annotations

import cohere
import httpx
import numpy as np
import openai
import pytest
from cohere.errors import UnprocessableEntityError
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError

from tests.fixtures.prompts import make_prompted_bert, reference
from tests.fixtures.references import shortened

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "a", "attention heads look at tokens"]
NAME = "prompted"
FP32 = {"HEADWISE_PRECISION": "fp32"}


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_prompted_bert(tmp_path_factory.mktemp("prompted") / "ckpt")


@pytest.fixture(scope="module")
def st(checkpoint):
    return reference(checkpoint)


@pytest.fixture(scope="module")
def models(checkpoint, tmp_path_factory):
    from headwise.export.package import build_package

    out = tmp_path_factory.mktemp("prompted-models")
    build_package(checkpoint, out, NAME, progress=lambda m: None, quality=False, matryoshka_dimensions=(16, 8))
    return out


@pytest.fixture(scope="module")
def srv(start_server, models):
    return start_server(models, env=FP32)


def embed(srv, texts, **extra) -> dict:
    r = srv.post("/v1/embed", {"inputs": texts, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def vectors(body) -> np.ndarray:
    return np.float32([d["embedding"] for d in body["data"]])


@pytest.mark.parametrize("name", [None, "query", "passage", "classification", "empty"])
def test_prompt_name_equals_sentence_transformers(srv, st, name):
    got = vectors(embed(srv, TEXTS, **({"prompt_name": name} if name else {})))
    want = st.encode(TEXTS, prompt_name=name, convert_to_numpy=True)
    assert cosines(got, want).min() >= 0.999999


def test_the_answer_marks_the_prompts_tokens_and_counts_them(srv):
    plain, got = embed(srv, ["hello world"]), embed(srv, ["hello world"], prompt_name="query",
                                                   attention={"layers": [0], "heads": [0]})
    item = got["data"][0]
    assert got["prompt"] == {"name": "query", "text": "query: "}
    start, end = item["prompt_span"]
    assert item["tokens"][0] == "[CLS]" and start == 1
    assert item["tokens"][end:] == plain["data"][0]["tokens"][1:]  # then the text's own tokens
    assert got["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + (end - start)
    t = len(item["tokens"])
    assert item["attention"]["shape"] == [1, 1, t, t]
    occ = srv.post("/v1/occlusion", {"input": "hello world", "prompt_name": "query"}).json()
    assert occ["prompt_span"] == [start, end] and len(occ["effects"]) == t


def test_tei_prompt_name_through_inference_client(srv, st):
    hub = InferenceClient(model=srv.url, timeout=120)
    got = hub.feature_extraction(TEXTS, prompt_name="query")
    assert cosines(got, st.encode(TEXTS, prompt_name="query")).min() >= 0.999999
    with pytest.raises(HfHubHTTPError) as e:
        hub.feature_extraction(TEXTS, prompt_name="nope")
    assert e.value.response.status_code == 422 and "prompt_name" in e.value.response.json()["error"]


def test_cohere_input_type_picks_the_query_and_document_prompts(srv, st):
    co = cohere.ClientV2(api_key="x", base_url=srv.url, timeout=120)
    for input_type, name in [("search_query", "query"), ("search_document", "passage"),
                             ("classification", "classification")]:
        r = co.embed(model=NAME, texts=TEXTS, input_type=input_type, embedding_types=["float"])
        assert cosines(r.embeddings.float_, st.encode(TEXTS, prompt_name=name)).min() >= 0.999999, input_type
    with pytest.raises(UnprocessableEntityError) as e:  # prompts, but none for clustering
        co.embed(model=NAME, texts=TEXTS, input_type="clustering")
    assert "input_type" in e.value.body["message"] and "'clustering'" in e.value.body["message"]


def test_unknown_prompt_name_is_422_never_500(srv):
    for path, body in [("/v1/embed", {"inputs": "a", "prompt_name": "nope"}),
                       ("/v1/occlusion", {"input": "a", "prompt_name": "nope"}),
                       ("/embed", {"inputs": [[2, 5, 3]], "prompt_name": "query"})]:
        r = srv.post(path, body)
        assert r.status_code == 422 and "prompt_name" in r.text and "Traceback" not in r.text, (path, r.text)


def test_dimensions_only_to_the_declared_matryoshka_sizes(srv, st, models):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    full = st.encode(TEXTS, convert_to_numpy=True)
    r = client.embeddings.create(model=NAME, input=TEXTS, dimensions=8, encoding_format="float")
    got = np.float32([d.embedding for d in r.data])
    assert got.shape == (len(TEXTS), 8)
    assert cosines(got, np.stack([shortened(v, 8) for v in full])).min() >= 0.999999
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=NAME, input=TEXTS, dimensions=12)
    assert "(16, 8;" in e.value.message and e.value.body["param"] == "dimensions"
    card = httpx.get(srv.url + "/v1/models/" + NAME).json()
    assert card["matryoshka_dimensions"] == [16, 8] and card["prompts"]["query"] == "query: "


def test_default_prompt_setting_applies_to_clients_without_prompt_name(start_server, models, st):
    srv = start_server(models, env={**FP32, "HEADWISE_DEFAULT_PROMPT_NAME": "query"})
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
        r = client.embeddings.create(model=NAME, input=TEXTS, encoding_format="float")
        got = np.float32([d.embedding for d in r.data])
        assert cosines(got, st.encode(TEXTS, prompt_name="query")).min() >= 0.999999
        named = vectors(embed(srv, TEXTS, prompt_name="passage"))  # a named prompt beats the default
        assert cosines(named, st.encode(TEXTS, prompt_name="passage")).min() >= 0.999999
    finally:
        srv.stop()


def test_a_default_prompt_the_model_lacks_stops_start_up(start_server, models):
    srv = start_server(models, env={**FP32, "HEADWISE_DEFAULT_PROMPT_NAME": "nope"}, wait=None)
    assert srv.proc.wait(120) != 0
    assert "HEADWISE_DEFAULT_PROMPT_NAME is 'nope'" in srv.log_tail()


# -- the viewer ------------------------------------------------------------------------------------

def test_the_viewer_runs_with_a_prompt_and_marks_its_tokens(open_viewer, srv):
    page = open_viewer(srv.url)
    assert page.locator("#field-prompt").is_visible()
    names = page.eval_on_selector_all("#prompt option", "els => els.map(e => e.value)")
    assert names == ["", "query", "passage", "classification", "empty"]
    assert page.locator("#tokens-0 .tok.prompt").count() == 0  # no default prompt: none marked
    page.select_option("#prompt", "query")
    page.fill("#text-a", "hello world")
    n = int(page.evaluate("document.body.dataset.run"))
    page.click("#run")
    page.wait_for_function("n => Number(document.body.dataset.run) > n", arg=n, timeout=60_000)
    api = embed(srv, ["hello world"], prompt_name="query")["data"][0]
    start, end = api["prompt_span"]
    shown = page.eval_on_selector_all("#tokens-0 .tok", "els => els.map(e => e.dataset.token)")
    marked = page.eval_on_selector_all("#tokens-0 .tok.prompt", "els => els.map(e => Number(e.dataset.index))")
    assert shown == api["tokens"] and marked == list(range(start, end))
    assert page.locator(".hv-q .hv-tok.prompt").count() == end - start  # the head view marks them too
    # occlusion, from the Analytics panel, with the same prompt
    runs = int(page.evaluate("document.querySelector('#analytics-section').dataset.run"))
    page.fill("#an-text-a", "hello world")
    page.click("#an-occlusion")
    page.wait_for_function("n => Number(document.querySelector('#analytics-section').dataset.run) > n",
                           arg=runs, timeout=60_000)
    assert page.locator("#an-error").is_hidden(), page.locator("#an-error").text_content()
    occ = page.eval_on_selector_all("#an-occlusion .an-token.prompt", "els => els.map(e => Number(e.dataset.i))")
    assert occ == list(range(start, end))
