"""Against a real `headwise serve` (fp32, CPU): embeddings vs sentence-transformers, attention
vs model/'s explicit path, for every format, dtype and encoding (issue 4)."""

from __future__ import annotations

import base64
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SENTENCES = [
    "A man is playing a guitar.",
    "hi",
    "The quick brown fox jumps over the lazy dog, and then runs into the forest to hide from hunters.",
    "Transformers use scaled dot-product attention; every head looks at different tokens!",
    "naïve café — 東京 emoji 🙂",
]
LONG = "attention " * 400  # over max_len: truncated


@pytest.fixture(scope="module")
def reference():
    import torch

    from headwise.model.sentence import default_checkpoint, load_sentence_model

    lm = load_sentence_model()

    def attention(text: str):
        b = lm.tokenizer([text])
        with torch.no_grad():
            out = lm.model(b.input_ids, b.attention_mask, b.token_type_ids, need_weights=True, fused=False)
        return b.tokens[0], torch.stack(out.attentions, 1)[0].numpy()  # [L, H, T, T]

    return default_checkpoint(), attention


def decode(arr, dtype: str, encoding: str, shape) -> np.ndarray:
    if encoding == "base64":
        return np.frombuffer(base64.b64decode(arr), dtype={"float32": "<f4", "float16": "<f2", "int32": "<i4"}[dtype]).reshape(shape)
    return np.asarray(arr, dtype=np.float64 if dtype != "int32" else np.int64).reshape(shape)


def test_embeddings_match_sentence_transformers(server, reference):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(reference[0]), device="cpu")
    texts = [*SENTENCES, LONG]
    want = st.encode(texts, convert_to_numpy=True, normalize_embeddings=False)
    r = server.post("/v1/embed", {"inputs": texts})
    assert r.status_code == 200, r.text
    got = np.array([d["embedding"] for d in r.json()["data"]])
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.99999, cos
    assert len(r.json()["data"][-1]["tokens"]) == 256  # truncated at max_len
    # one at a time (other padding, other batch) gives the same vectors
    single = [server.post("/v1/embed", {"inputs": t}).json()["data"][0]["embedding"] for t in texts[:3]]
    np.testing.assert_allclose(single, got[:3], atol=1e-5)


def test_token_output_is_unpadded_last_hidden_state(server):
    r = server.post("/v1/embed", {"inputs": SENTENCES[:2], "output": "tokens"}).json()
    for d in r["data"]:
        assert np.array(d["embedding"]).shape == (len(d["tokens"]), 384)


@pytest.mark.parametrize("fmt, dtype, encoding", list(itertools.product(
    ["dense", "topk"], ["float32", "float16"], ["json", "base64"])))
def test_attention_equals_the_explicit_path(server, reference, fmt, dtype, encoding):
    _, ref_attention = reference
    body = {"inputs": SENTENCES, "attention": {"format": fmt, "dtype": dtype, "encoding": encoding, "top_k": 4}}
    r = server.post("/v1/embed", body)
    assert r.status_code == 200, r.text
    tol = 1e-5 if dtype == "float32" else 1e-3
    for d, text in zip(r.json()["data"], SENTENCES, strict=True):
        tokens, want = ref_attention(text)
        assert d["tokens"] == tokens
        a = d["attention"]
        t = len(tokens)
        assert (a["layers"], a["heads"], a["dtype"], a["encoding"]) == (list(range(6)), list(range(12)), dtype, encoding)
        if fmt == "dense":
            assert a["shape"] == [6, 12, t, t]
            got = decode(a["data"], dtype, encoding, a["shape"])
            np.testing.assert_allclose(got, want, atol=tol, rtol=0)
            np.testing.assert_allclose(got.sum(-1), 1, atol=tol * t)
        else:
            k = min(4, t)
            assert a["shape"] == [6, 12, t, k]
            idx = decode(a["data"]["indices"], "int32", encoding, a["shape"]).astype(np.int64)
            vals = decode(a["data"]["values"], dtype, encoding, a["shape"])
            true_top = -np.sort(-want, axis=-1)[..., :k]
            # the values found at the returned keys are the true k largest (robust to near-ties)
            np.testing.assert_allclose(np.take_along_axis(want, idx, -1), true_top, atol=1e-5, rtol=0)
            np.testing.assert_allclose(vals, true_top, atol=tol, rtol=0)
            assert (np.diff(vals, axis=-1) <= tol).all()  # largest first


def test_layer_and_head_selection(server, reference):
    _, ref_attention = reference
    body = {"inputs": SENTENCES[0], "attention": {"layers": [0, 5], "heads": [0, 3], "encoding": "base64"}}
    a = server.post("/v1/embed", body).json()["data"][0]["attention"]
    tokens, want = ref_attention(SENTENCES[0])
    assert a["shape"] == [2, 2, len(tokens), len(tokens)]
    got = decode(a["data"], "float32", "base64", a["shape"])
    np.testing.assert_allclose(got, want[[0, 5]][:, [0, 3]], atol=1e-5, rtol=0)


def test_mixed_lengths_in_flight_together(server, reference):
    _, ref_attention = reference
    texts = ["short one", SENTENCES[2] * 3, "hi", SENTENCES[3] * 2]
    body = lambda t: {"inputs": t, "attention": {"encoding": "base64", "dtype": "float32"}}  # noqa: E731
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(server.post, "/v1/embed", body(t)) for t in texts * 2]
        futures.append(pool.submit(server.post, "/v1/embed", body(texts)))  # one request, mixed lengths
        responses = [f.result() for f in futures]
    items = [(r.json()["data"][0], texts[i % 4]) for i, r in enumerate(responses[:-1])]
    items += list(zip(responses[-1].json()["data"], texts, strict=True))
    for d, text in items:
        tokens, want = ref_attention(text)
        a = d["attention"]
        assert d["tokens"] == tokens and a["shape"][2:] == [len(tokens), len(tokens)]
        np.testing.assert_allclose(decode(a["data"], "float32", "base64", a["shape"]), want, atol=1e-5, rtol=0)
