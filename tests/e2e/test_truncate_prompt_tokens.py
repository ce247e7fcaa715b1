"""vLLM's `truncate_prompt_tokens` below max_len against a real `headwise serve` (in process, and
with the engine in its own process): each input is cut to k tokens, special tokens included, as
the tokenizer's truncation at max_length=k cuts it. /score's cross-encoder scores and /classify's
probabilities equal transformers' on pairs and texts cut so, and Jina's rerank body (vLLM's
/rerank) scores as /score does; /v1/embeddings (through the
`openai` client's extra_body) and /score's cosines equal sentence-transformers' with
max_seq_length=k; usage counts the cut tokens; what cannot be cut is refused naming the field.
vLLM's `truncation_side: "left"` keeps each input's last tokens, as transformers' tokenizer with
truncation_side="left" cuts it, with k and at max_len."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.e2e.conftest import ENGINE_MODES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MINILM = "all-minilm-l6-v2"
QUERY = "where is the cat sitting today"
DOCS = ["the cat sat on the mat " * 12, "a dog", "blue fox jumps over the lazy dog " * 3, ""]
TEXTS = ["the quick brown fox jumps over the lazy dog " * 5, "one text", "naïve café — 東京 🙂 " * 4]


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, classifier_packages, default_package, tmp_path_factory):
    models = tmp_path_factory.mktemp("cut-models")
    for name in ("tiny-reranker", "tiny-classifier"):
        (models / name).symlink_to(classifier_packages["models"] / name, target_is_directory=True)
    (models / MINILM).symlink_to(default_package, target_is_directory=True)
    return start_server(models=models, env=ENGINE_MODES[request.param])


def ok(r) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


def refused(r, status: int) -> str:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == "truncate_prompt_tokens", error
    return error["message"]


def logits(package, items: list, k: int, side: str = "right") -> tuple[np.ndarray, list[int]]:
    """transformers' logits of each text or pair cut to k tokens (one at a time) at `side`, and their lengths."""
    from transformers import PreTrainedTokenizerFast

    ckpt, ref = package
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]", truncation_side=side)
    out, lengths = [], []
    with torch.no_grad():
        for item in items:
            a, b = (item, None) if isinstance(item, str) else item
            enc = tok([a], None if b is None else [b], truncation=True, max_length=k, return_token_type_ids=True,
                      return_tensors="pt")
            lengths.append(enc["input_ids"].shape[1])
            out.append(ref(**enc).logits[0].numpy())
    return np.stack(out), lengths


@pytest.mark.parametrize("k", [3, 9, 20])
def test_cross_encoder_scores_of_pairs_cut_to_k(srv, classifier_packages, k):
    answer = ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS,
                                    "truncate_prompt_tokens": k}))
    want, lengths = logits(classifier_packages["tiny-reranker"], [(QUERY, d) for d in DOCS], k)
    np.testing.assert_allclose([d["score"] for d in answer["data"]], torch.sigmoid(torch.from_numpy(want[:, 0])),
                               atol=1e-5, rtol=0)
    assert max(lengths) == k and answer["usage"]["prompt_tokens"] == sum(lengths)


def test_jinas_rerank_body_takes_vllms_cut_too(srv):
    """vLLM's /rerank takes Jina's body with truncate_prompt_tokens: on /v1/rerank and TEI's
    /rerank, the scores of /score at the same k."""
    want = [d["score"] for d in ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS,
                                                        "truncate_prompt_tokens": 9}))["data"]]
    assert want != [d["score"] for d in ok(srv.post("/score", {"model": "tiny-reranker", "text_1": QUERY,
                                                                "text_2": DOCS}))["data"]]
    for path in ("/v1/rerank", "/rerank"):
        got = ok(srv.post(path, {"model": "tiny-reranker", "query": QUERY, "documents": DOCS,
                                 "return_documents": False, "truncate_prompt_tokens": 9}))
        assert sorted((r["index"], r["relevance_score"]) for r in got["results"]) == list(enumerate(want)), path


@pytest.mark.parametrize("k", [2, 7, 33])
def test_classify_of_texts_cut_to_k(srv, classifier_packages, k):
    answer = ok(srv.post("/classify", {"model": "tiny-classifier", "input": TEXTS, "truncate_prompt_tokens": k}))
    want, lengths = logits(classifier_packages["tiny-classifier"], TEXTS, k)
    np.testing.assert_allclose([d["probs"] for d in answer["data"]], torch.softmax(torch.from_numpy(want), -1),
                               atol=1e-5, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(lengths)


def sentence_transformer(k: int, side: str = "right"):
    from sentence_transformers import SentenceTransformer

    from headwise.model.sentence import default_checkpoint

    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    st.max_seq_length = k  # its tokenizer then truncates at max_length=k
    st.tokenizer.truncation_side = side
    return st


def test_embeddings_of_texts_cut_to_k_through_the_openai_client(srv):
    import openai

    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    got = client.embeddings.create(model=MINILM, input=[*TEXTS, *DOCS[:2]], extra_body={"truncate_prompt_tokens": 10})
    st = sentence_transformer(10)
    want = st.encode([*TEXTS, *DOCS[:2]], normalize_embeddings=True)
    np.testing.assert_allclose([d.embedding for d in got.data], want, atol=1e-5, rtol=0)
    lengths = [len(st.tokenizer(t, truncation=True, max_length=10)["input_ids"]) for t in [*TEXTS, *DOCS[:2]]]
    assert got.usage.prompt_tokens == sum(lengths) and max(lengths) == 10
    whole = client.embeddings.create(model=MINILM, input=TEXTS[0], extra_body={"truncate_prompt_tokens": -1})
    np.testing.assert_allclose(whole.data[0].embedding, sentence_transformer(256).encode(TEXTS[0]), atol=1e-5)


def test_embedding_model_scores_are_cosines_of_texts_cut_to_k(srv):
    answer = ok(srv.post("/score", {"model": MINILM, "text_1": QUERY, "text_2": DOCS, "truncate_prompt_tokens": 6}))
    st = sentence_transformer(6)
    q, d = st.encode([QUERY], convert_to_tensor=True), st.encode(DOCS, convert_to_tensor=True)
    np.testing.assert_allclose([x["score"] for x in answer["data"]],
                               torch.nn.functional.cosine_similarity(q, d).numpy(), atol=1e-5, rtol=0)


def test_what_cannot_be_cut_is_refused_naming_the_field(srv):
    assert "under the 3 tokens this model needs for each pair" in refused(
        srv.post("/score", {"model": "tiny-reranker", "text_1": "a", "text_2": "b", "truncate_prompt_tokens": 2}), 422)
    assert "under the 2 tokens this model needs for each input" in refused(
        srv.post("/classify", {"model": "tiny-classifier", "input": "a", "truncate_prompt_tokens": 1}), 422)
    assert "over this model's max_len (64)" in refused(
        srv.post("/classify", {"model": "tiny-classifier", "input": "a", "truncate_prompt_tokens": 65}), 400)
    assert "token ids are used as they are" in refused(
        srv.post("/v1/embeddings", {"model": MINILM, "input": [101, 7592, 102], "truncate_prompt_tokens": 2}), 422)
    assert "under the 2 tokens" in refused(
        srv.post("/v1/embeddings", {"model": MINILM, "input": "a", "truncate_prompt_tokens": 0}), 422)
    ok(srv.post("/v1/embeddings", {"model": MINILM, "input": [101, 7592, 102], "truncate_prompt_tokens": -1}))


def test_left_side_cuts_pairs_and_texts_at_their_start(srv, classifier_packages):
    """truncation_side "left": /score's pairs and /classify's texts keep their last tokens, as
    transformers' truncation_side="left" cuts them; Jina's rerank body scores as /score."""
    body = {"model": "tiny-reranker", "text_1": QUERY, "text_2": DOCS, "truncate_prompt_tokens": 9}
    answer = ok(srv.post("/score", {**body, "truncation_side": "left"}))
    want, lengths = logits(classifier_packages["tiny-reranker"], [(QUERY, d) for d in DOCS], 9, "left")
    scores = [d["score"] for d in answer["data"]]
    np.testing.assert_allclose(scores, torch.sigmoid(torch.from_numpy(want[:, 0])), atol=1e-5, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(lengths)
    assert scores != [d["score"] for d in ok(srv.post("/score", body))["data"]]
    assert ok(srv.post("/score", {**body, "truncation_side": "right"}))["data"] == ok(srv.post("/score", body))["data"]
    for path in ("/v1/rerank", "/rerank"):
        got = ok(srv.post(path, {"model": "tiny-reranker", "query": QUERY, "documents": DOCS, "return_documents": False,
                                 "truncate_prompt_tokens": 9, "truncation_side": "left"}))
        assert sorted((r["index"], r["relevance_score"]) for r in got["results"]) == list(enumerate(scores)), path
    answer = ok(srv.post("/classify", {"model": "tiny-classifier", "input": TEXTS, "truncate_prompt_tokens": 7,
                                       "truncation_side": "left"}))
    want, lengths = logits(classifier_packages["tiny-classifier"], TEXTS, 7, "left")
    np.testing.assert_allclose([d["probs"] for d in answer["data"]], torch.softmax(torch.from_numpy(want), -1),
                               atol=1e-5, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(lengths)


def test_left_side_embeddings_with_k_and_at_max_len(srv):
    """/v1/embeddings with truncation_side "left" (the openai client's extra_body) equals
    sentence-transformers with its tokenizer cutting at the start: at k, and at max_len with no k."""
    import openai

    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    got = client.embeddings.create(model=MINILM, input=TEXTS, extra_body={"truncate_prompt_tokens": 10,
                                                                          "truncation_side": "left"})
    np.testing.assert_allclose([d.embedding for d in got.data], sentence_transformer(10, "left").encode(TEXTS),
                               atol=1e-5, rtol=0)
    long = "a very long text about cats and dogs " * 60 + "ending in something else entirely"
    got = client.embeddings.create(model=MINILM, input=long, extra_body={"truncation_side": "left"})
    np.testing.assert_allclose(got.data[0].embedding, sentence_transformer(256, "left").encode(long), atol=1e-5)
    assert got.usage.prompt_tokens == 256
    assert not np.allclose(got.data[0].embedding, sentence_transformer(256).encode(long), atol=1e-3)


def test_a_side_that_is_not_left_or_right_is_refused(srv):
    for path, body in (("/classify", {"model": "tiny-classifier", "input": "a"}),
                       ("/v1/embeddings", {"model": MINILM, "input": "a"}),
                       ("/v1/rerank", {"model": "tiny-reranker", "query": "a", "documents": ["b"]})):
        r = srv.post(path, {**body, "truncation_side": "middle"})
        assert r.status_code == 422 and "truncation_side" in r.text, (path, r.text)


def mean_pooled_without_specials(texts: list[str], k: int | None = None) -> np.ndarray:
    """MiniLM's normalised mean pooling of each text read with add_special_tokens=False (cut to k)."""
    st = sentence_transformer(256)
    out = []
    with torch.no_grad():
        for text in texts:
            enc = st.tokenizer([text], add_special_tokens=False, truncation=True, max_length=k or 256,
                               return_tensors="pt")
            hidden = st[0].auto_model(**enc).last_hidden_state[0]
            out.append(torch.nn.functional.normalize(hidden.mean(0), dim=0).numpy())
    return np.stack(out)


def test_texts_read_without_special_tokens(srv, classifier_packages):
    """vLLM's add_special_tokens: false on /v1/embeddings (extra_body) and /classify: each text
    without [CLS] and [SEP], as transformers' tokenizer reads it with add_special_tokens=False,
    cut to k tokens of the text itself; a text of no tokens so read is refused."""
    import openai

    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    got = client.embeddings.create(model=MINILM, input=TEXTS, extra_body={"add_special_tokens": False})
    np.testing.assert_allclose([d.embedding for d in got.data], mean_pooled_without_specials(TEXTS), atol=1e-5)
    assert got.usage.prompt_tokens == sum(len(sentence_transformer(256).tokenizer(t, add_special_tokens=False)
                                              ["input_ids"]) for t in TEXTS)
    got = client.embeddings.create(model=MINILM, input=TEXTS, extra_body={"add_special_tokens": False,
                                                                          "truncate_prompt_tokens": 1})
    np.testing.assert_allclose([d.embedding for d in got.data], mean_pooled_without_specials(TEXTS, 1), atol=1e-5)
    assert got.usage.prompt_tokens == len(TEXTS)

    ckpt, ref = classifier_packages["tiny-classifier"]
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), pad_token="[PAD]")
    encs = [tok([t], add_special_tokens=False, truncation=True, max_length=7, return_token_type_ids=True,
                return_tensors="pt") for t in TEXTS]
    with torch.no_grad():
        want = np.stack([ref(**enc).logits[0].numpy() for enc in encs])
    answer = ok(srv.post("/classify", {"model": "tiny-classifier", "input": TEXTS, "add_special_tokens": False,
                                       "truncate_prompt_tokens": 7}))
    np.testing.assert_allclose([d["probs"] for d in answer["data"]], torch.softmax(torch.from_numpy(want), -1),
                               atol=1e-5, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(enc["input_ids"].shape[1] for enc in encs)

    for path, body in (("/classify", {"model": "tiny-classifier"}), ("/v1/embeddings", {"model": MINILM})):
        r = srv.post(path, {**body, "input": ["a text", " "], "add_special_tokens": False})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["param"] == "input" and "input[1] has no tokens" in r.json()["error"]["message"]
    r = srv.post("/score", {"model": "tiny-reranker", "text_1": "a", "text_2": "b", "add_special_tokens": False})
    assert r.status_code == 422 and "add_special_tokens" in r.text  # vLLM's /score has no such field
