"""Task heads beyond BERT's, end to end, exported and served by one real `headwise serve`:

- extractive question answering from tiny random RobertaForQuestionAnswering
  (deepset/roberta-base-squad2's class), XLMRobertaForQuestionAnswering,
  DistilBertForQuestionAnswering (distilbert-base-cased-distilled-squad's),
  MPNetForQuestionAnswering and ModernBertForQuestionAnswering (its prediction head on every
  token) checkpoints: each
  family's pair template (`<s> q </s></s> c </s>`, `[CLS] q [SEP] c [SEP]`) and its lack of
  segment ids reach the span choice intact, /v1/answer's spans equal transformers' model and
  its span choice (tests/fixtures/qa.reference), in one batch;
- fill-mask from tiny random XLMRobertaForMaskedLM (`<mask>`, `lm_head`) and DistilBertForMaskedLM
  (`[MASK]`, `vocab_projector`) checkpoints: /v1/fill_mask's fills equal transformers' fill-mask
  pipeline's;
- DistilBertForSequenceClassification (distilbert-base-uncased-finetuned-sst-2-english's class,
  transformers' default sentiment classifier): /v1/predict's scores are the softmax of
  transformers' logits, under config.json's labels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures import families as fam
from tests.fixtures.qa import reference

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PAIRS = [("who sat", "the cat sat on the mat"), ("two dogs", "one red fox and two dogs, hello world"),
         ("a", "a")]


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    from transformers import AutoTokenizer

    from headwise.export.package import build_package

    root = tmp_path_factory.mktemp("answerers")
    refs = {}
    for family in fam.ANSWERER_FAMILIES:
        ckpt, model = fam.make_answerer(root / family, family)
        build_package(ckpt, root / "models", f"qa-{family}", progress=lambda m: None, quality=False)
        tok = AutoTokenizer.from_pretrained(str(ckpt), model_input_names=["input_ids", "attention_mask"])
        refs[f"qa-{family}"] = (tok, model.eval())
    ckpt, model = fam.make_headed(root / "sst2", "distilbert", "ForSequenceClassification",
                                   {"num_labels": 2, "id2label": {0: "NEGATIVE", 1: "POSITIVE"}}, 0)
    build_package(ckpt, root / "models", "sentiment", progress=lambda m: None, quality=False)
    refs["sentiment"] = (AutoTokenizer.from_pretrained(str(ckpt), model_input_names=["input_ids", "attention_mask"]),
                         model.eval())
    for family in ("xlm-roberta", "distilbert", "modernbert"):  # <mask>, [MASK]; lm_head, vocab_projector, decoder
        ckpt, model = fam.make_headed(root / f"mlm-{family}", family, "ForMaskedLM", {}, 0)
        build_package(ckpt, root / "models", f"mlm-{family}", progress=lambda m: None, quality=False)
        refs[f"mlm-{family}"] = (AutoTokenizer.from_pretrained(str(ckpt)), model.eval())
    return root / "models", refs


@pytest.fixture(scope="module")
def srv(start_server, heads):
    return start_server(models=heads[0])


@pytest.mark.parametrize("family", fam.ANSWERER_FAMILIES)
def test_answers_equal_transformers(srv, heads, family):
    name = f"qa-{family}"
    ref = heads[1][name]
    card = srv.get(f"/v1/models/{name}").json()
    assert card["task"] == "question-answering"
    r = srv.post("/v1/answer", {"model": name, "inputs": [{"question": q, "context": c} for q, c in PAIRS],
                                "top_k": 3, "handle_impossible_answer": True})
    assert r.status_code == 200, r.text
    for (q, c), item in zip(PAIRS, r.json()["data"], strict=True):
        want, _ = reference(ref, q, c, 3, True)
        got = item["answers"]
        assert [(a["answer"], a["start"], a["end"]) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
        np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("family", fam.ANSWERER_FAMILIES)
def test_windows_equal_the_pipelines_on_every_family(srv, heads, family):
    """doc_stride on each family's template (RoBERTa's `<s> q </s></s> c </s>` among them): the
    windows the tokenizer's overflow gives, and the answers gathered from them."""
    name = f"qa-{family}"
    q, c = "two dogs", " ".join(["one red fox and two dogs, hello world"] * 8)
    r = srv.post("/v1/answer", {"model": name, "inputs": {"question": q, "context": c}, "top_k": 3,
                                "handle_impossible_answer": True, "doc_stride": 6, "max_seq_len": 24})
    assert r.status_code == 200, r.text
    want, _ = reference(heads[1][name], q, c, 3, True, windows=(24, 6))
    got = r.json()["data"][0]["answers"]
    assert [(a["answer"], a["start"], a["end"]) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
    np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-3, atol=1e-6)


def test_distilbert_sentiment_scores_equal_transformers(srv, heads):
    import torch

    tok, model = heads[1]["sentiment"]
    texts = ["hello world", "the cat sat on the mat", "a"]
    r = srv.post("/v1/predict", {"model": "sentiment", "inputs": texts})
    assert r.status_code == 200, r.text
    with torch.no_grad():
        want = torch.softmax(model(**tok(texts, padding=True, return_tensors="pt")).logits, -1).numpy()
    for row, preds in zip(want, r.json()["data"], strict=True):
        got = {p["label"]: p["score"] for p in preds}
        assert set(got) == {"NEGATIVE", "POSITIVE"}
        np.testing.assert_allclose([got["NEGATIVE"], got["POSITIVE"]], row, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("family", ["xlm-roberta", "distilbert", "modernbert"])
def test_fills_equal_the_fill_mask_pipeline(srv, heads, family):
    from transformers import FillMaskPipeline

    tok, model = heads[1][f"mlm-{family}"]
    pipe = FillMaskPipeline(model=model, tokenizer=tok)
    texts = [f"the cat sat on the {tok.mask_token}.", f"{tok.mask_token} dog and {tok.mask_token} cat"]
    card = srv.get(f"/v1/models/mlm-{family}").json()
    assert (card["task"], card["mask_token"]) == ("fill-mask", tok.mask_token)
    r = srv.post("/v1/fill_mask", {"model": f"mlm-{family}", "inputs": texts, "top_k": 3})
    assert r.status_code == 200, r.text
    for text, item in zip(texts, r.json()["data"], strict=True):
        want = pipe(text, top_k=3)
        want = [want] if isinstance(want[0], dict) else want
        for mask, theirs in zip(item["masks"], want, strict=True):
            assert [(f["token"], f["token_str"], f["sequence"]) for f in mask["fills"]] == [
                (w["token"], w["token_str"], w["sequence"]) for w in theirs]
            np.testing.assert_allclose([f["score"] for f in mask["fills"]], [w["score"] for w in theirs], rtol=1e-3)
