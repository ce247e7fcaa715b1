"""Fill-mask end to end: a real `headwise serve` (in process, and with the engine in its own
process) on a tiny random BertForMaskedLM package, answers compared with transformers' fill-mask
pipeline on the same checkpoint: one mask and several, targets, a batch whose texts differ in
length, per-head attention and removed heads, and huggingface_hub's InferenceClient.fill_mask on
TEI's POST /; a text without its mask, and an embedding model asked to fill, are refused in the
native shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.e2e.conftest import ENGINE_MODES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TEXTS = ["the cat sat on the [MASK].", "[MASK] dog", "a quick brown fox jumps over the [MASK] dog, " * 3,
         "[MASK] cat sat on the [MASK] mat"]


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    from tests.fixtures.tiny import make_fill_mask_package

    return make_fill_mask_package(tmp_path_factory.mktemp("fill"))


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, mlm):
    return start_server(models=mlm["models"], env=ENGINE_MODES[request.param])


@pytest.fixture(scope="module")
def pipe(mlm):
    from transformers import AutoTokenizer, FillMaskPipeline

    ckpt, model = mlm["tiny-mlm"]
    return FillMaskPipeline(model=model.eval(), tokenizer=AutoTokenizer.from_pretrained(str(ckpt)))


def same(got: list, want: list) -> None:
    """Our fills at one mask against the pipeline's."""
    assert [(f["token"], f["token_str"], f["sequence"]) for f in got] == [
        (w["token"], w["token_str"], w["sequence"]) for w in want]
    np.testing.assert_allclose([f["score"] for f in got], [w["score"] for w in want], rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("top_k,targets", [(5, None), (2, ["cat", "dog", "zebra"])])
def test_fills_equal_the_pipeline_whatever_shares_the_batch(srv, pipe, top_k, targets):
    r = srv.post("/v1/fill_mask", {"inputs": TEXTS, "top_k": top_k, **({"targets": targets} if targets else {})})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] > 0
    for text, item in zip(TEXTS, body["data"], strict=True):
        want = pipe(text, top_k=top_k, **({"targets": targets} if targets else {}))
        want = [want] if isinstance(want[0], dict) else want  # one mask: its fills, not a list of them
        ids = pipe.tokenizer(text)["input_ids"]
        assert [m["position"] for m in item["masks"]] == [i for i, x in enumerate(ids)
                                                          if x == pipe.tokenizer.mask_token_id]
        for mask, theirs in zip(item["masks"], want, strict=True):
            same(mask["fills"], theirs)
    alone = srv.post("/v1/fill_mask", {"inputs": TEXTS[0], "top_k": top_k,
                                       **({"targets": targets} if targets else {})}).json()
    assert alone["data"][0]["masks"] == body["data"][0]["masks"]


def test_the_card_names_the_mask_token(srv):
    card = srv.get("/v1/models/tiny-mlm").json()
    assert (card["task"], card["mask_token"]) == ("fill-mask", "[MASK]")


def test_attention_and_removed_heads(srv, mlm):
    from transformers import AutoTokenizer

    from tests.fixtures.references import ablated_forward

    ckpt, model = mlm["tiny-mlm"]
    text = TEXTS[0]
    r = srv.post("/v1/fill_mask", {"inputs": text, "top_k": 3, "attention": {"layers": [0], "heads": [1]}})
    assert r.status_code == 200, r.text
    att = r.json()["data"][0]["attention"]
    b = AutoTokenizer.from_pretrained(str(ckpt))([text], return_tensors="pt")
    with torch.no_grad():
        want = model(**b, output_attentions=True).attentions[0][0, 1].numpy()  # [T, T]
    assert att["shape"] == [1, 1, *want.shape]
    np.testing.assert_allclose(np.array(att["data"]).reshape(want.shape), want, atol=1e-4)
    removed = srv.post("/v1/fill_mask", {"inputs": text, "top_k": 3, "ablate": {"0": [0, 1]}})
    assert removed.status_code == 200, removed.text
    mask = np.ones((1, model.config.num_hidden_layers, model.config.num_attention_heads), np.float32)
    mask[0, 0] = 0
    logits = ablated_forward(model.eval(), mask, **b).logits[0]
    at = removed.json()["data"][0]["masks"][0]
    probs = torch.softmax(logits[at["position"]], -1)
    assert [f["token"] for f in at["fills"]] == probs.topk(3).indices.tolist()
    np.testing.assert_allclose([f["score"] for f in at["fills"]], probs.topk(3).values.numpy(), rtol=1e-3)


def test_a_text_without_its_mask_is_refused_alone(srv):
    r = srv.post("/v1/fill_mask", {"inputs": ["the [MASK] sat", "no mask here"]})
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["type"], r.json()["error"]["code"]) == ("validation", 422)
    assert "inputs[1] has no mask token '[MASK]'" in r.json()["error"]["message"]
    cut = srv.post("/v1/fill_mask", {"inputs": "the cat " * 40 + "[MASK]"})  # the mask past max_len
    assert cut.status_code == 422 and "truncation cut them off" in cut.json()["error"]["message"]
    bad = srv.post("/v1/fill_mask", {"inputs": "the [MASK]", "targets": [""]})
    assert bad.status_code == 422 and "targets" in bad.json()["error"]["message"], bad.text


def test_another_kind_is_refused_with_the_one_message(start_server):
    """An embedding model asked to fill hears what it serves."""
    srv = start_server()
    r = srv.post("/v1/fill_mask", {"inputs": "the [MASK]"})
    assert r.status_code == 422, r.text
    assert "/v1/fill_mask serves masked language models" in r.json()["error"]["message"]


def test_huggingface_hub_fill_mask_reads_the_pipelines_shape(srv, pipe):
    """TEI's POST / on a masked language model: transformers' fill-mask pipeline's answer, as
    huggingface_hub's InferenceClient.fill_mask reads it (Hugging Face Inference Endpoints'
    shape); several masks answer the pipeline's list of lists."""
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    hub = InferenceClient(model=srv.url, timeout=120)
    for kw in ({}, {"top_k": 2, "targets": ["cat", "dog", "mat"]}):
        got = hub.fill_mask(TEXTS[0], **kw)
        want = pipe(TEXTS[0], **kw)
        assert [(g.token, g.token_str, g.sequence) for g in got] == [
            (w["token"], w["token_str"], w["sequence"]) for w in want]
        np.testing.assert_allclose([g.score for g in got], [w["score"] for w in want], rtol=1e-3, atol=1e-6)
    r = srv.post("/", {"inputs": TEXTS[3], "parameters": {"top_k": 2}})
    assert r.status_code == 200, r.text
    assert [[f["token"] for f in m] for m in r.json()] == [[w["token"] for w in m] for m in pipe(TEXTS[3], top_k=2)]
    with pytest.raises(HfHubHTTPError, match="no mask token"):
        hub.fill_mask("no mask here")
