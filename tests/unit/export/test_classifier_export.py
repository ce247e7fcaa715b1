"""Classification packages (cross-encoders, classifiers) from tiny random
BertForSequenceClassification checkpoints: every graph's logits equal transformers' within 1e-5
on texts and pairs, the manifest says task and labels, `headwise verify` re-checks them, and
the server reads them as classification packages (task and labels; never as embeddings)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from headwise.export.package import build_package
from headwise.export.verify import PARITY_PAIRS as PARITY_INPUTS
from headwise.model.tokenizer import Tokenizer
from headwise.service.package import load_package
from tests.fixtures.references import ablated_forward
from tests.fixtures.tiny import make_tiny_bert_classifier as make_classifier

REPO = Path(__file__).resolve().parents[3]



@pytest.fixture(scope="module", params=[(1, None), (3, {0: "negative", 1: "neutral", 2: "positive"})],
                ids=["reranker", "classifier"])
def exported(request, tmp_path_factory):
    n, id2label = request.param
    ckpt = tmp_path_factory.mktemp("ckpt") / "ce"
    ref = make_classifier(ckpt, n, id2label)
    pkg = build_package(ckpt, tmp_path_factory.mktemp("pkg"), "ce", progress=lambda m: None, quality=False)
    return ckpt, ref, pkg, n


def test_manifest_says_what_it_is(exported):
    _, _, pkg, n = exported
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["task"] == "classification" and len(m["labels"]) == n
    assert set(m["variants"]) == {"fast", "fast.fp16", "analysis"}
    assert m["parity"]["analysis"]["ablation"] < 1e-5 and m["parity"]["analysis"]["hidden_states"] < 1e-5
    assert m["variants"]["fast"]["outputs"] == ["logits"]
    assert all(p["passed"] for p in m["parity"].values())


def test_every_graph_equals_transformers_on_texts_and_pairs(exported):
    ckpt, ref, pkg, n = exported
    m = json.loads((pkg / "manifest.json").read_text())
    tok = Tokenizer(ckpt, m["max_len"])
    b = tok(PARITY_INPUTS)
    with torch.no_grad():
        want = ref(input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids,
                   output_attentions=True)
    feeds = {"input_ids": b.input_ids.numpy(), "attention_mask": b.attention_mask.numpy(),
             "token_type_ids": b.token_type_ids.numpy(),
             "head_mask": np.ones((len(PARITY_INPUTS), ref.config.num_hidden_layers, ref.config.num_attention_heads),
                                  np.float32)}
    for variant, tol in (("fast", 1e-5), ("analysis", 1e-5), ("fast.fp16", 5e-3)):
        sess = ort.InferenceSession(str(pkg / m["variants"][variant]["file"]), providers=["CPUExecutionProvider"])
        mine = {i.name: feeds[i.name] for i in sess.get_inputs()}
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, mine), strict=True))
        assert got["logits"].shape == (len(PARITY_INPUTS), n)
        np.testing.assert_allclose(got["logits"], want.logits.numpy(), atol=tol, rtol=0, err_msg=variant)
        if variant == "analysis":
            np.testing.assert_allclose(got["attentions"], torch.stack(want.attentions, 1).numpy(), atol=1e-5)
            np.testing.assert_array_equal(got["attentions_f16"], got["attentions"].astype(np.float16))


def test_the_analysis_graph_equals_transformers_with_heads_removed(exported):
    """hidden_states as transformers' output_hidden_states, and a head mask as the pre-hook
    reference (tests.fixtures.references.ablated_forward), on texts and pairs."""
    ckpt, ref, pkg, _ = exported
    m = json.loads((pkg / "manifest.json").read_text())
    tok = Tokenizer(ckpt, m["max_len"])
    b = tok(PARITY_INPUTS)
    cfg = ref.config
    head_mask = np.ones((len(PARITY_INPUTS), cfg.num_hidden_layers, cfg.num_attention_heads), np.float32)
    head_mask[0, 0, 1] = head_mask[3, 1, :] = head_mask[5, :, 0] = 0
    inputs = {"input_ids": b.input_ids, "attention_mask": b.attention_mask, "token_type_ids": b.token_type_ids}
    sess = ort.InferenceSession(str(pkg / m["variants"]["analysis"]["file"]), providers=["CPUExecutionProvider"])
    real = b.attention_mask.numpy().astype(bool)
    for mask in (np.ones_like(head_mask), head_mask):
        want = ablated_forward(ref, mask, **inputs)
        logits, hidden = sess.run(["logits", "hidden_states"], {k: v.numpy() for k, v in inputs.items()} | {"head_mask": mask})
        np.testing.assert_allclose(logits, want.logits.numpy(), atol=1e-5, rtol=0)
        states = torch.stack(want.hidden_states, 1).numpy()  # (B, L + 1, T, D)
        assert hidden.shape == states.shape
        np.testing.assert_allclose(hidden.transpose(0, 2, 1, 3)[real], states.transpose(0, 2, 1, 3)[real], atol=1e-5)
    moved = np.abs(sess.run(["logits"], {k: v.numpy() for k, v in inputs.items()} | {"head_mask": head_mask})[0]
                   - ref(**inputs).logits.detach().numpy())[[0, 3, 5]]
    assert moved.min() > 0  # the removed heads changed those answers


def test_headwise_verify_rechecks_it(exported):
    ckpt, _, pkg, _ = exported
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "verify", str(pkg), "--checkpoint", str(ckpt)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout and "logits" in r.stdout


def test_the_server_reads_it_as_a_classification_package(exported):
    _, ref, pkg, n = exported
    p = load_package(pkg)
    assert p.task == "classification" and len(p.labels) == n
    assert list(p.labels) == [ref.config.id2label[i] for i in range(n)]
