"""Token-classification packages (NER and PII taggers) from a tiny random
BertForTokenClassification checkpoint: the manifest says task and labels (no pairs, no int8),
every graph's token logits equal transformers' within 1e-4 at real tokens (fp16 within 5e-3),
the analysis graph's hidden states and removed heads too, `headwise verify` re-checks it and
the server reads it as a token-classification package with those labels."""

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from headwise.export.package import KINDS, kind_of_checkpoint, verify_package
from headwise.export.pipeline import Options
from headwise.export.token_classifier import TokenClassifierKind
from headwise.export.verify import parity_table
from headwise.model.tokenizer import Tokenizer
from headwise.service.package import load_package
from tests.fixtures.references import ablated_forward
from tests.fixtures.tiny import TAGGER_LABELS, make_tagger_package

TEXTS = TokenClassifierKind.parity_inputs
LABELS = list(TAGGER_LABELS.values())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = make_tagger_package(tmp_path_factory.mktemp("tagger"))
    ckpt, ref = out["tiny-tagger"]
    pkg = out["models"] / "tiny-tagger"
    return ckpt, ref, pkg, json.loads((pkg / "manifest.json").read_text())


def inputs(ckpt, manifest: dict, texts: list[str]):
    b = Tokenizer(ckpt, manifest["max_len"])(texts)
    return b, {"input_ids": b.input_ids, "attention_mask": b.attention_mask, "token_type_ids": b.token_type_ids}


def run(pkg, manifest: dict, variant: str, feeds: dict, names: list[str] | None = None) -> dict:
    sess = ort.InferenceSession(str(pkg / manifest["variants"][variant]["file"]), providers=["CPUExecutionProvider"])
    mine = {i.name: feeds[i.name] for i in sess.get_inputs()}
    names = names or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, mine), strict=True))


def test_the_checkpoint_is_exported_as_a_token_classifier(exported):
    ckpt, *_ = exported
    kind = kind_of_checkpoint(ckpt)
    assert kind is KINDS["token-classification"] and kind.task == "token-classification"
    assert kind.notes(Options(int8=True)) == ["token-classification packages have fp32 and fp16 variants, no int8"]


def test_manifest_says_what_it_is(exported):
    *_, m = exported
    assert (m["task"], m["labels"], m["pooling"], m["normalize"]) == ("token-classification", LABELS, None, False)
    assert "pairs" not in m["tokenizer"]  # single texts only
    assert set(m["variants"]) == {"fast", "fast.fp16", "analysis"}  # built with int8 asked: none offered
    assert m["variants"]["fast"]["outputs"] == m["variants"]["fast.fp16"]["outputs"] == ["token_logits"]
    assert m["variants"]["analysis"]["outputs"] == ["token_logits", "attentions", "attentions_f16", "hidden_states"]
    for variant in m["variants"]:
        assert m["outputs"][variant][0] == {"name": "token_logits", "dtype": "float32",
                                            "shape": ["batch", "seq", len(LABELS)]}
    assert all(p["passed"] for p in m["parity"].values())
    assert m["parity"]["fast"]["token_logits"] < 1e-5 and m["parity"]["analysis"]["ablation"] < 1e-5


def test_every_graph_equals_transformers_at_real_tokens(exported):
    ckpt, ref, pkg, m = exported
    b, torch_in = inputs(ckpt, m, TEXTS)
    with torch.no_grad():
        want = ref(**torch_in, output_attentions=True)
    feeds = {k: v.numpy() for k, v in torch_in.items()} | {
        "head_mask": np.ones((len(TEXTS), ref.config.num_hidden_layers, ref.config.num_attention_heads), np.float32)}
    real = b.attention_mask.numpy().astype(bool)
    assert not real.all()  # padded
    for variant, tol in (("fast", 1e-4), ("analysis", 1e-4), ("fast.fp16", 5e-3)):
        got = run(pkg, m, variant, feeds)
        assert got["token_logits"].shape == (*b.input_ids.shape, len(LABELS))
        np.testing.assert_allclose(got["token_logits"][real], want.logits.numpy()[real], atol=tol, rtol=0,
                                   err_msg=variant)
        if variant == "analysis":
            np.testing.assert_allclose(got["attentions"], torch.stack(want.attentions, 1).numpy(), atol=1e-5)
            np.testing.assert_array_equal(got["attentions_f16"], got["attentions"].astype(np.float16))


def test_one_text_alone_has_its_own_length(exported):
    """Dynamic batch and seq axes: one short text gives (1, its tokens, n_labels)."""
    ckpt, ref, pkg, m = exported
    _, torch_in = inputs(ckpt, m, ["hello world"])
    got = run(pkg, m, "fast", {k: v.numpy() for k, v in torch_in.items()})["token_logits"]
    assert got.shape == (1, 4, len(LABELS))  # [CLS] hello world [SEP]
    with torch.no_grad():
        np.testing.assert_allclose(got, ref(**torch_in).logits.numpy(), atol=1e-4, rtol=0)


def test_the_analysis_graph_equals_transformers_with_heads_removed(exported):
    ckpt, ref, pkg, m = exported
    b, torch_in = inputs(ckpt, m, TEXTS)
    cfg = ref.config
    head_mask = np.ones((len(TEXTS), cfg.num_hidden_layers, cfg.num_attention_heads), np.float32)
    head_mask[0, 0, 1] = head_mask[3, 1, :] = head_mask[5, :, 0] = 0
    real = b.attention_mask.numpy().astype(bool)
    feeds = {k: v.numpy() for k, v in torch_in.items()}
    for mask in (np.ones_like(head_mask), head_mask):
        want = ablated_forward(ref, mask, **torch_in)
        got = run(pkg, m, "analysis", feeds | {"head_mask": mask}, ["token_logits", "hidden_states"])
        np.testing.assert_allclose(got["token_logits"][real], want.logits.numpy()[real], atol=1e-4, rtol=0)
        states = torch.stack(want.hidden_states, 1).numpy()  # (B, L + 1, T, D)
        np.testing.assert_allclose(got["hidden_states"].transpose(0, 2, 1, 3)[real],
                                   states.transpose(0, 2, 1, 3)[real], atol=1e-5)
    with torch.no_grad():
        moved = np.abs(run(pkg, m, "analysis", feeds | {"head_mask": head_mask}, ["token_logits"])["token_logits"]
                       - ref(**torch_in).logits.numpy())
    assert all(moved[i][real[i]].max() > 0 for i in (0, 3, 5))  # the removed heads changed those answers


def test_headwise_verify_rechecks_it(exported):
    ckpt, _, pkg, _ = exported
    parity = verify_package(pkg, ckpt, progress=lambda m: None, quality=False)
    assert all(p["passed"] for p in parity.values())
    assert set(parity) == {"fast", "fast.fp16", "analysis"}
    assert parity["fast"]["token_logits"] < 1e-4 and parity["fast.fp16"]["token_logits"] < 5e-2
    assert "tok_logits" in parity_table(parity)


def test_the_server_reads_it_as_a_token_classification_package(exported):
    _, ref, pkg, _ = exported
    p = load_package(pkg)
    assert p.task == "token-classification" and p.architecture == "encoder"
    assert list(p.labels) == LABELS == [ref.config.id2label[i] for i in range(len(LABELS))]
    assert p.variants["fast"].outputs == ("token_logits",)
