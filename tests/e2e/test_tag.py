"""Token classification end to end: a real `headwise serve` (in process, and with the engine in
its own process) on a tiny random BertForTokenClassification package, answers compared with
transformers' model and its token-classification pipeline: /v1/tag, huggingface_hub's
InferenceClient.token_classification (TEI's POST /), KServe v2 through tritonclient, and the
per-head attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.e2e.conftest import ENGINE_MODES
from tests.fixtures.tiny import reference_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

# words the tiny vocabulary splits into pieces ("berkeley"), and ones it does not know at all ("中", "#")
TEXTS = ["Sarah Jessica Parker lives in Berkeley.", "the cat", "a dog sat on the mat, and the cat did not",
         "Berkeleyan wanderings of Zoë in 中國, #1"]


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, tagger_package):
    return start_server(models=tagger_package["models"], env=ENGINE_MODES[request.param])


@pytest.fixture(scope="module")
def ref(tagger_package):
    ckpt, model = tagger_package["tiny-tagger"]
    return reference_tokenizer(ckpt), model.eval()


def _reference(ref, text: str, attentions: bool = False):
    tok, model = ref
    b = tok([text], truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**b, output_attentions=attentions)
    return b, out


def test_tags_equal_transformers_whatever_shares_the_batch(srv, ref):
    r = srv.post("/v1/tag", {"inputs": TEXTS, "raw_scores": True, "all_scores": True, "ignore_labels": []})
    assert r.status_code == 200, r.text
    body = r.json()
    labels = body["labels"]
    assert labels == list(ref[1].config.id2label.values())
    for text, item in zip(TEXTS, body["data"], strict=True):
        b, out = _reference(ref, text)
        logits = out.logits[0].numpy()  # [T, n_labels]
        inner = list(range(1, b["input_ids"].shape[1] - 1))  # [CLS] and [SEP] carry no label
        assert [t["index"] for t in item["tokens"]] == inner
        np.testing.assert_allclose([t["scores"] for t in item["tokens"]], logits[inner], atol=1e-4)
        assert [t["label"] for t in item["tokens"]] == [labels[j] for j in logits[inner].argmax(-1)]
        offsets = b.encodings[0].offsets
        assert [(t["start"], t["end"]) for t in item["tokens"]] == [tuple(offsets[i]) for i in inner]
    alone = srv.post("/v1/tag", {"inputs": TEXTS[0], "all_scores": True}).json()["data"][0]["tokens"]
    b, out = _reference(ref, TEXTS[0])
    np.testing.assert_allclose([t["scores"] for t in alone], torch.softmax(out.logits[0], -1).numpy()[1:-1],
                               atol=1e-5)


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_the_hub_clients_token_classification_equals_transformers_pipeline(srv, ref, strategy):
    from huggingface_hub import InferenceClient
    from transformers import pipeline

    hub = InferenceClient(model=srv.url, timeout=120)
    tok, model = ref
    pipe = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy=strategy, device="cpu")
    for text in TEXTS:
        want = pipe(text, ignore_labels=[])
        got = hub.token_classification(text, aggregation_strategy=strategy, ignore_labels=[])
        key = "entity" if strategy == "none" else "entity_group"
        assert [(g[key], g.word, g.start, g.end) for g in got] == [(w[key], w["word"], w["start"], w["end"])
                                                                   for w in want]
        np.testing.assert_allclose([g.score for g in got], [float(w["score"]) for w in want], atol=1e-5)
    default = hub.token_classification(TEXTS[0], aggregation_strategy=strategy)  # the pipeline's: "O" left out
    assert [(g[key], g.start, g.end) for g in default] == [(w[key], w["start"], w["end"]) for w in pipe(TEXTS[0])]


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_v1_tag_groups_entities_as_transformers_pipeline(srv, ref, strategy):
    """/v1/tag with an aggregation_strategy: per text the pipeline's entities, whatever shares
    the request; ignore_labels leaves out groups; per-token options that it would not answer
    are refused."""
    from transformers import pipeline

    tok, model = ref
    pipe = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy=strategy, device="cpu")
    r = srv.post("/v1/tag", {"inputs": TEXTS, "aggregation_strategy": strategy})
    assert r.status_code == 200, r.text
    for text, item in zip(TEXTS, r.json()["data"], strict=True):
        want, got = pipe(text, ignore_labels=[]), item["entities"]
        assert "tokens" not in item
        assert [(g["entity_group"], g["word"], g["start"], g["end"]) for g in got] == [
            (w["entity_group"], w["word"], w["start"], w["end"]) for w in want]
        np.testing.assert_allclose([g["score"] for g in got], [float(w["score"]) for w in want], atol=1e-5)
    r = srv.post("/v1/tag", {"inputs": TEXTS[0], "aggregation_strategy": strategy, "ignore_labels": ["O"]})
    assert [g["start"] for g in r.json()["data"][0]["entities"]] == [w["start"] for w in pipe(TEXTS[0])]
    for bad in ({"raw_scores": True}, {"all_scores": True}):
        r = srv.post("/v1/tag", {"inputs": TEXTS[0], "aggregation_strategy": strategy, **bad})
        assert r.status_code == 422 and "aggregation_strategy" in r.json()["error"]["message"], r.text


def test_kserve_token_logits_through_tritonclient(srv, ref):
    import tritonclient.http as th

    client = th.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    try:
        md = client.get_model_metadata("tiny-tagger")
        n_labels = len(ref[1].config.id2label)
        assert md["outputs"][0] == {"name": "token_logits", "datatype": "FP32", "shape": [-1, -1, n_labels]}
        i = th.InferInput("text", [len(TEXTS)], "BYTES")
        i.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=np.object_), binary_data=True)
        out = client.infer("tiny-tagger", [i], outputs=[th.InferRequestedOutput("token_logits", binary_data=True),
                                                        th.InferRequestedOutput("attention_mask")])
    finally:
        client.close()
    logits, mask = out.as_numpy("token_logits"), out.as_numpy("attention_mask")
    for k, text in enumerate(TEXTS):
        b, want = _reference(ref, text)
        t = b["input_ids"].shape[1]
        assert mask[k].sum() == t
        np.testing.assert_allclose(logits[k, :t], want.logits[0].numpy(), atol=1e-4)
        assert not logits[k, t:].any()


def test_attention_is_the_models_own(srv, ref):
    r = srv.post("/v1/tag", {"inputs": TEXTS[0], "attention": {"layers": [1], "heads": [0]}})
    assert r.status_code == 200, r.text
    att = r.json()["data"][0]["attention"]
    _, out = _reference(ref, TEXTS[0], attentions=True)
    want = out.attentions[1][0, 0].numpy()
    assert att["shape"] == [1, 1, *want.shape]
    np.testing.assert_allclose(np.array(att["data"]).reshape(want.shape), want, atol=1e-4)


def test_other_routes_refuse_a_tagger_in_their_shape(srv):
    r = srv.post("/v1/embed", {"inputs": "x"})
    assert r.status_code == 422 and "use POST /v1/tag" in r.json()["error"]["message"], r.text
    r = srv.post("/v1/predict", {"inputs": "x"})
    assert r.status_code == 422 and "token-classification model" in r.json()["error"]["message"], r.text
    r = srv.post("/", {"inputs": "x", "parameters": {"aggregation_strategy": "longest"}})
    assert r.status_code == 422 and r.json()["error_type"] == "Validation", r.text
