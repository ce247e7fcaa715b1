"""Fill-mask packages (masked language models) from a tiny random BertForMaskedLM checkpoint:
the manifest says task and mask token (no labels, no pairs, no int8), every graph's token logits
over the vocabulary equal transformers' within 1e-4 at real tokens (fp16 within 5e-2), the
analysis graph's with heads removed too, `headwise verify` re-checks it on texts holding the
mask token, and a tokenizer without one is refused at export."""

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from headwise.export.fill_mask import PARITY_MASKED, FillMaskKind, parity_texts
from headwise.export.package import KINDS, build_package, kind_of_checkpoint, verify_package
from headwise.export.pipeline import Options
from headwise.export.verify import parity_table
from headwise.model.importers import CheckpointError
from headwise.model.tokenizer import Tokenizer
from tests.fixtures.references import ablated_forward
from tests.fixtures.tiny import make_fill_mask_package, make_tiny_bert_mlm, tiny_tokenizer

TEXTS = parity_texts("[MASK]")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = make_fill_mask_package(tmp_path_factory.mktemp("mlm"))
    ckpt, ref = out["tiny-mlm"]
    pkg = out["models"] / "tiny-mlm"
    return ckpt, ref, pkg, json.loads((pkg / "manifest.json").read_text())


def inputs(ckpt, manifest: dict, texts: list[str]):
    b = Tokenizer(ckpt, manifest["max_len"])(texts)
    return b, {"input_ids": b.input_ids, "attention_mask": b.attention_mask, "token_type_ids": b.token_type_ids}


def run(pkg, manifest: dict, variant: str, feeds: dict, names: list[str] | None = None) -> dict:
    sess = ort.InferenceSession(str(pkg / manifest["variants"][variant]["file"]), providers=["CPUExecutionProvider"])
    mine = {i.name: feeds[i.name] for i in sess.get_inputs()}
    names = names or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, mine), strict=True))


def test_the_checkpoint_is_exported_as_a_fill_mask_model(exported):
    ckpt, *_ = exported
    kind = kind_of_checkpoint(ckpt)
    assert kind is KINDS["fill-mask"] and isinstance(kind, FillMaskKind) and kind.task == "fill-mask"
    assert kind.notes(Options(int8=True)) == ["fill-mask packages have fp32 and fp16 variants, no int8"]


def test_the_parity_texts_hold_the_mask_token():
    assert TEXTS[0] == "Paris is the [MASK] of France." and sum("[MASK]" in t for t in TEXTS) >= 8
    assert parity_texts("<mask>")[2] == "The quick brown <mask> jumps over the lazy <mask>."
    assert len(TEXTS) == len(PARITY_MASKED)


def test_manifest_says_what_it_is(exported):
    _, ref, _, m = exported
    assert (m["task"], m["mask_token"], m["pooling"], m["normalize"]) == ("fill-mask", "[MASK]", None, False)
    assert "labels" not in m
    assert "pairs" not in m["tokenizer"]  # single texts only
    assert m["vocab_size"] == ref.config.vocab_size
    assert set(m["variants"]) == {"fast", "fast.fp16", "analysis"}  # built with int8 asked: none offered
    assert m["variants"]["fast"]["outputs"] == m["variants"]["fast.fp16"]["outputs"] == ["token_logits"]
    assert m["variants"]["analysis"]["outputs"] == ["token_logits", "attentions", "attentions_f16", "hidden_states"]
    for variant in m["variants"]:
        assert m["outputs"][variant][0] == {"name": "token_logits", "dtype": "float32",
                                            "shape": ["batch", "seq", ref.config.vocab_size]}
    assert all(p["passed"] for p in m["parity"].values())
    assert m["parity"]["fast"]["token_logits"] < 1e-4 and m["parity"]["analysis"]["ablation"] < 1e-4


def test_every_graph_equals_transformers_at_real_tokens(exported):
    ckpt, ref, pkg, m = exported
    b, torch_in = inputs(ckpt, m, TEXTS)
    assert (b.input_ids == 4).sum() >= 8  # [MASK] read as one token
    with torch.no_grad():
        want = ref(**torch_in, output_attentions=True)
    feeds = {k: v.numpy() for k, v in torch_in.items()} | {
        "head_mask": np.ones((len(TEXTS), ref.config.num_hidden_layers, ref.config.num_attention_heads), np.float32)}
    real = b.attention_mask.numpy().astype(bool)
    assert not real.all()  # padded
    for variant, tol in (("fast", 1e-4), ("analysis", 1e-4), ("fast.fp16", 5e-2)):
        got = run(pkg, m, variant, feeds)
        assert got["token_logits"].shape == (*b.input_ids.shape, ref.config.vocab_size)
        np.testing.assert_allclose(got["token_logits"][real], want.logits.numpy()[real], atol=tol, rtol=0,
                                   err_msg=variant)
        if variant == "analysis":
            np.testing.assert_allclose(got["attentions"], torch.stack(want.attentions, 1).numpy(), atol=1e-5)


def test_the_analysis_graph_equals_transformers_with_heads_removed(exported):
    ckpt, ref, pkg, m = exported
    b, torch_in = inputs(ckpt, m, TEXTS[:4])
    cfg = ref.config
    head_mask = np.ones((4, cfg.num_hidden_layers, cfg.num_attention_heads), np.float32)
    head_mask[0, 0, 1] = head_mask[2, 1, :] = 0
    real = b.attention_mask.numpy().astype(bool)
    want = ablated_forward(ref, head_mask, **torch_in)
    got = run(pkg, m, "analysis", {k: v.numpy() for k, v in torch_in.items()} | {"head_mask": head_mask},
              ["token_logits"])
    np.testing.assert_allclose(got["token_logits"][real], want.logits.numpy()[real], atol=1e-4, rtol=0)


def test_headwise_verify_rechecks_it(exported):
    ckpt, _, pkg, _ = exported
    parity = verify_package(pkg, ckpt, progress=lambda m: None, quality=False)
    assert all(p["passed"] for p in parity.values())
    assert set(parity) == {"fast", "fast.fp16", "analysis"}
    assert parity["fast"]["token_logits"] < 1e-4 and parity["fast.fp16"]["token_logits"] < 5e-2
    assert "tok_logits" in parity_table(parity)


def test_a_tokenizer_without_a_mask_token_is_refused(tmp_path):
    ckpt = tmp_path / "ckpt"
    make_tiny_bert_mlm(ckpt)
    tiny_tokenizer(ckpt)  # [MASK] in the vocabulary, but split into [, mask, ] in a text
    with pytest.raises(CheckpointError, match=r"its tokenizer has no mask token \(\[MASK\] or <mask>"):
        build_package(ckpt, tmp_path / "models", "nomask", progress=lambda m: None, quality=False)
    assert not (tmp_path / "models" / "nomask").exists()
