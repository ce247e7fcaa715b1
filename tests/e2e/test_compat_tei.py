"""text-embeddings-inference's routes against a real `headwise serve` (fp32, CPU, the real
all-MiniLM-L6-v2 package), driven by real TEI clients: huggingface_hub's InferenceClient
pointed at the server (feature_extraction, sentence_similarity, both through TEI's `POST /`)
and LangChain's HuggingFaceEndpointEmbeddings; answers equal /v1/embed's and
sentence-transformers' within float noise; mistakes come back in TEI's error shape (issue 21)."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEXTS = ["A man is playing a guitar.", "hi", "naïve café — 東京 emoji 🙂",
         "The quick brown fox jumps over the lazy dog."]
LONG = "attention " * 400  # over max_len (256 tokens)


@pytest.fixture(scope="module")
def hub(server) -> InferenceClient:
    return InferenceClient(model=server.url, timeout=120)


def native(server, texts, **extra) -> np.ndarray:
    r = server.post("/v1/embed", {"inputs": texts, **extra})
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


def tei_error(r: httpx.Response, status: int, error_type: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    assert "Traceback" not in r.text
    return body["error"]


def cos(u, v) -> float:
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


# -- huggingface_hub's InferenceClient ----------------------------------------------------------

def test_feature_extraction_equals_sentence_transformers_and_v1_embed(hub, server):
    from sentence_transformers import SentenceTransformer

    from headwise.model.sentence import default_checkpoint

    got = hub.feature_extraction([*TEXTS, LONG])
    assert got.dtype == np.float32 and got.shape == (len(TEXTS) + 1, 384)
    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    want = st.encode([*TEXTS, LONG], convert_to_numpy=True)
    assert min(cos(g, w) for g, w in zip(got, want, strict=True)) >= 0.99999
    assert np.array_equal(got, native(server, [*TEXTS, LONG]))  # the same inference as /v1/embed
    one = hub.feature_extraction("hi")  # TEI answers a single input as a list of one
    assert one.shape == (1, 384) and np.array_equal(one[0], native(server, ["hi"])[0])


def test_feature_extraction_options(hub, server):
    raw = hub.feature_extraction(TEXTS, normalize=False)
    assert np.array_equal(raw, native(server, TEXTS, normalize=False))
    assert np.linalg.norm(raw[0]) > 1.5  # mean pooling, not normalised
    with pytest.raises(HfHubHTTPError) as e:  # all-MiniLM-L6-v2 was not trained to be cut
        hub.feature_extraction(TEXTS, dimensions=64)
    assert e.value.response.status_code == 400 and "HEADWISE_MATRYOSHKA_DIMENSIONS" in e.value.response.text
    assert np.array_equal(hub.feature_extraction(TEXTS, truncate=True, truncation_direction="right"),
                          native(server, TEXTS))
    with pytest.raises(HfHubHTTPError) as e:
        hub.feature_extraction(LONG, truncate=False)
    assert e.value.response.status_code == 422 and "over this model's limit of 256" in e.value.response.text
    for bad in ({"prompt_name": "query"}, {"dimensions": 385}):
        with pytest.raises(HfHubHTTPError) as e:
            hub.feature_extraction("hi", **bad)
        assert e.value.response.status_code == 422 and e.value.response.json()["error_type"] == "Validation"


def test_feature_extraction_cut_at_the_start_equals_sentence_transformers_cutting_left(hub, server):
    from tests.fixtures.references import CUT_EITHER_END, left_cut_reference

    texts = [CUT_EITHER_END, TEXTS[0]]
    left = hub.feature_extraction(texts, truncate=True, truncation_direction="Left")
    want = left_cut_reference(texts)
    assert min(cos(g, w) for g, w in zip(left, want, strict=True)) >= 0.99999
    assert cos(left[0], native(server, [CUT_EITHER_END])[0]) < 0.99  # not the cut at its end
    np.testing.assert_allclose(left[1], native(server, [TEXTS[0]])[0], atol=1e-6)  # nothing to cut: the same


def test_feature_extraction_dimensions_on_a_matryoshka_model(matryoshka_server):
    hub = InferenceClient(model=matryoshka_server.url, timeout=120)
    short = hub.feature_extraction(TEXTS, dimensions=64)
    ref = native(matryoshka_server, TEXTS)[:, :64].astype(np.float64)
    np.testing.assert_allclose(short, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-6)


def test_sentence_similarity_is_the_cosine_of_v1_embeds_embeddings(hub, server):
    from sentence_transformers import SentenceTransformer, util

    from headwise.model.sentence import default_checkpoint

    source, others = TEXTS[0], [*TEXTS[1:], LONG]
    got = hub.sentence_similarity(source, other_sentences=others)
    vecs = native(server, [source, *others])
    assert len(got) == len(others)
    np.testing.assert_allclose(got, [cos(vecs[0], v) for v in vecs[1:]], atol=1e-7)
    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    want = util.cos_sim(st.encode([source]), st.encode(others))[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


# -- LangChain -----------------------------------------------------------------------------------

def test_langchain_endpoint_embeddings(server):
    from langchain_huggingface import HuggingFaceEndpointEmbeddings

    emb = HuggingFaceEndpointEmbeddings(model=server.url)
    ref = native(server, TEXTS)
    docs = np.array(emb.embed_documents(TEXTS), dtype=np.float32)
    assert np.array_equal(docs, ref)
    assert np.array_equal(np.float32(emb.embed_query(TEXTS[1])), native(server, TEXTS[1:2])[0])
    docs = np.array(asyncio.run(emb.aembed_documents(TEXTS)), dtype=np.float32)
    assert np.array_equal(docs, ref)


# -- the other routes, over plain HTTP -----------------------------------------------------------

def test_embed_all_is_v1_embeds_token_output(server):
    r = server.post("/embed_all", {"inputs": TEXTS[:2]})
    assert r.status_code == 200, r.text
    tokens = server.post("/v1/embed", {"inputs": TEXTS[:2], "output": "tokens"}).json()["data"]
    for got, want in zip(r.json(), tokens, strict=True):
        assert np.array_equal(np.float32(got), np.float32(want["embedding"]))
        assert np.array(got).shape == (len(want["tokens"]), 384)


def test_health_probe_answers_as_teis(server):
    r = server.get("/health")
    assert r.status_code == 200 and r.content == b""


def test_embed_token_ids_and_batches(server):
    ids = [d["ids"] for d in server.post("/v1/tokenize", {"inputs": TEXTS}).json()["data"]]
    r = server.post("/embed", {"inputs": ids})
    assert r.status_code == 200 and np.array_equal(np.float32(r.json()), native(server, TEXTS))
    r = server.post("/embed", {"inputs": ids[1]})  # one list of ids is one input
    assert np.array_equal(np.float32(r.json()), native(server, TEXTS[1:2]))


def test_tokenize_and_decode(server):
    text = TEXTS[2]
    r = server.post("/tokenize", {"inputs": text})
    assert r.status_code == 200, r.text
    [toks] = r.json()
    mine = server.post("/v1/tokenize", {"inputs": text}).json()["data"][0]
    assert [t["id"] for t in toks] == mine["ids"]
    assert toks[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    raw = text.encode()
    for t in toks[1:-1]:  # byte offsets, as TEI's: the token's text is those bytes of the input
        assert not t["special"] and raw[t["start"]:t["stop"]].decode() == t["text"]
    bare = server.post("/tokenize", {"inputs": [text, "hi"], "add_special_tokens": False}).json()
    assert [t["id"] for t in bare[0]] == mine["ids"][1:-1] and len(bare) == 2
    typed = server.post("/tokenize", {"inputs": "say [CLS]"}).json()[0]  # typed, not added: not special
    assert typed[2] == {"id": 101, "text": "[CLS]", "special": False, "start": 4, "stop": 9}
    whole = server.post("/tokenize", {"inputs": LONG}).json()[0]  # not cut at max_len, as TEI's
    assert len(whole) == 402
    r = server.post("/decode", {"ids": [mine["ids"], [101, 7592, 102]]})
    assert r.json() == ["naive cafe — 東 京 emoji", "hello"]  # [UNK] is special too: skipped
    assert server.post("/decode", {"ids": [101, 7592, 102], "skip_special_tokens": False}).json() == \
        ["[CLS] hello [SEP]"]


def test_info(server):
    r = server.get("/info")
    assert r.status_code == 200
    info = r.json()
    assert info["model_id"] == info["served_model_name"] == "all-minilm-l6-v2"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["model_dtype"] == "float32"
    assert info["max_input_length"] == 256 and info["auto_truncate"] is True
    assert server.get("/info", params={"model": "all-minilm-l6-v2"}).json() == info


def test_root_dispatches_by_the_bodys_shape(server):
    r = server.post("/", {"inputs": TEXTS[:2]})
    assert np.array_equal(np.float32(r.json()), native(server, TEXTS[:2]))
    r = server.post("/", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:2]}})
    assert r.status_code == 200 and len(r.json()) == 1
    assert server.get("/").status_code in (200, 404)  # GET / is still the viewer page


def test_mistakes_in_teis_shape(server):
    tei_error(server.post("/embed", {"inputs": []}), 400, "Empty")
    tei_error(server.post("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}), 400, "Empty")
    tei_error(server.post("/decode", {"ids": []}), 400, "Empty")
    tei_error(server.post("/embed", {"inputs": "a", "model": "nope"}), 404, "Validation")
    tei_error(server.post("/embed", {"inputs": "a", "nope": 1}), 422, "Validation")
    tei_error(server.post("/embed", {"inputs": ["a", [101]]}), 422, "Validation")
    tei_error(server.post("/decode", {"ids": [30522]}), 422, "Validation")
    assert "re-ranker" in tei_error(server.post("/rerank", {"query": "a", "texts": ["b"]}), 424, "Backend")
    tei_error(server.post("/predict", {"inputs": "a"}), 424, "Backend")
    tei_error(httpx.post(server.url + "/embed", content=b"{", headers={"content-type": "application/json"}),
              400, "Validation")
    tei_error(server.post("/embed", {"inputs": ["a"] * 257}), 413, "Validation")
    m = server.metrics()
    assert 'route="/embed"' in m and 'route="/rerank"' in m


# -- classification packages: /rerank, /predict, text_classification ------------------------------

QUERY = "where is the cat"
DOCS = ["a dog", "the cat sat on the mat", "", "blue fox jumps", "the cat is on the mat, the dog is not"]
LABELS = ["negative", "neutral", "positive"]


@pytest.fixture(scope="module")
def mixed(start_server, classifier_packages, default_package, tmp_path_factory):
    """MiniLM beside a tiny cross-encoder and a tiny 3-label classifier, no default named: each
    route finds the first model, in name order, that can answer it."""
    models = tmp_path_factory.mktemp("tei-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / "all-minilm-l6-v2").symlink_to(default_package, target_is_directory=True)
    return start_server(models=models, env={"HEADWISE_PRECISION": "fp32"})


def logits(classifier_packages, name, firsts, seconds=None) -> np.ndarray:
    """transformers' BertForSequenceClassification, one input at a time."""
    import torch
    from transformers import PreTrainedTokenizerFast

    ckpt, ref = classifier_packages[name]
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")
    out = []
    for i, a in enumerate(firsts):
        args = ([a],) if seconds is None else ([a], [seconds[i]])
        b = tok(*args, truncation=True, max_length=64, return_token_type_ids=True, return_tensors="pt")
        with torch.no_grad():
            out.append(ref(**b).logits[0].numpy())
    return np.stack(out).astype(np.float64)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_rerank_equals_transformers_best_first(mixed, classifier_packages):
    want = 1 / (1 + np.exp(-logits(classifier_packages, "tiny-reranker", [QUERY] * len(DOCS), DOCS)[:, 0]))
    r = mixed.post("/rerank", {"query": QUERY, "texts": DOCS, "return_text": True})  # no model: the re-ranker
    assert r.status_code == 200, r.text
    got = r.json()
    assert [g["index"] for g in got] == list(np.argsort(want, kind="stable")[::-1])  # TEI's order
    for g in got:
        assert set(g) == {"index", "text", "score"} and g["text"] == DOCS[g["index"]]
        assert abs(g["score"] - want[g["index"]]) < 1e-5
    raw = mixed.post("/rerank", {"query": QUERY, "texts": DOCS, "raw_scores": True}).json()
    want_raw = logits(classifier_packages, "tiny-reranker", [QUERY] * len(DOCS), DOCS)[:, 0]
    assert all(set(g) == {"index", "score"} and abs(g["score"] - want_raw[g["index"]]) < 1e-5 for g in raw)
    root = mixed.post("/", {"query": QUERY, "texts": DOCS, "return_text": True}).json()
    assert root == got
    tei_error(mixed.post("/rerank", {"query": QUERY, "texts": DOCS, "model": "tiny-classifier"}), 424, "Backend")
    tei_error(mixed.post("/rerank", {"query": QUERY, "texts": []}), 400, "Empty")


def test_predict_equals_transformers(mixed, classifier_packages):
    texts = logits(classifier_packages, "tiny-classifier", ["the cat sat", "one text"])
    pair = logits(classifier_packages, "tiny-classifier", ["a dog"], ["the lazy dog"])
    r = mixed.post("/predict", {"inputs": [["the cat sat"], ["a dog", "the lazy dog"], ["one text"]]})
    assert r.status_code == 200, r.text
    for item, want in zip(r.json(), softmax(np.stack([texts[0], pair[0], texts[1]])), strict=True):
        assert [p["label"] for p in item] == [LABELS[j] for j in np.argsort(want, kind="stable")[::-1]]
        assert all(abs(p["score"] - want[LABELS.index(p["label"])]) < 1e-5 for p in item)
    one = mixed.post("/predict", {"inputs": ["a dog", "the lazy dog"]}).json()  # a pair: one answer, unnested
    assert one == r.json()[1]
    raw = mixed.post("/predict", {"inputs": "the cat sat", "raw_scores": True}).json()
    assert {p["label"]: p["score"] for p in raw} == pytest.approx(dict(zip(LABELS, texts[0], strict=True)), abs=1e-5)
    cross = mixed.post("/predict", {"inputs": [QUERY, DOCS[1]], "model": "tiny-reranker"}).json()
    assert len(cross) == 1 and cross[0]["label"] == "LABEL_0"  # a re-ranker predicts too, as in TEI
    tei_error(mixed.post("/predict", {"inputs": ["a", "b", "c"]}), 422, "Validation")


def test_text_classification_through_huggingface_hub(mixed, classifier_packages):
    hub = InferenceClient(model=mixed.url, timeout=120)
    want = softmax(logits(classifier_packages, "tiny-classifier", ["the cat sat"]))[0]
    got = hub.text_classification("the cat sat")
    # TEI answers one text with a flat list; huggingface_hub reads its first element, the best label
    best = int(np.argmax(want))
    assert got.label == LABELS[best] and abs(got.score - want[best]) < 1e-5
    raw = hub.text_classification("the cat sat", function_to_apply="none")
    assert abs(raw.score - logits(classifier_packages, "tiny-classifier", ["the cat sat"])[0].max()) < 1e-5
    # the embedding model still answers feature_extraction on the same server (POST / too)
    emb = hub.feature_extraction("the cat sat")
    assert emb.shape == (1, 384)
    assert mixed.get("/info").json()["model_id"] == "all-minilm-l6-v2"  # the first in name order
    info = mixed.get("/info", params={"model": "tiny-classifier"}).json()
    assert info["model_type"] == {"classifier": {"id2label": {"0": "negative", "1": "neutral", "2": "positive"},
                                                 "label2id": {"negative": 0, "neutral": 1, "positive": 2}}}
    assert list(mixed.get("/info", params={"model": "tiny-reranker"}).json()["model_type"]) == ["reranker"]
