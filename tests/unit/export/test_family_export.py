"""Every encoder family exports (fast, int8, fp16 and analysis graphs) and its
package verifies against torch; the fast graph equals sentence-transformers' encode, the
analysis graph's weights transformers' eager attention; sequence classifiers' packages score as
transformers does."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from headwise.export.manifest import read
from headwise.export.package import build_package
from headwise.export.runner import session_feeds
from headwise.model.sentence import load_encoder_model
from tests.fixtures import families as fam


def run(pkg, file, feeds_of):
    sess = ort.InferenceSession(str(pkg / file), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds_of(sess)), strict=True))


@pytest.mark.parametrize("family", sorted(fam.EMBEDDERS))
def test_embedding_package_verifies_and_equals_encode(tmp_path, family):
    ckpt, st = fam.EMBEDDERS[family](tmp_path / "ckpt")
    pkg = build_package(ckpt, tmp_path / "models", family, progress=lambda m: None, quality=False)
    m = read(pkg)
    assert m["family"] == family
    assert set(m["variants"]) == {"fast", "fast.int8", "fast.fp16", "analysis"}
    assert all(f["passed"] for f in m["parity"].values()), m["parity"]
    assert m["parity"]["fast"]["batch_invariance"] <= 1e-6  # qwen3: last-token pooling over padded batches
    tok = load_encoder_model(ckpt).tokenizer
    got = run(pkg, "fast.onnx", lambda s: session_feeds(s, tok, fam.TEXTS))["sentence_embedding"]
    want = st.encode(fam.TEXTS)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.999999
    b = tok(fam.TEXTS[:3])
    att = run(pkg, "analysis.onnx", lambda s: session_feeds(s, tok, fam.TEXTS[:3]))["attentions"]
    with torch.no_grad():
        ref = fam.transformers_reference(ckpt)(input_ids=b.input_ids, attention_mask=b.attention_mask,
                                               output_attentions=True).attentions
    real = b.attention_mask.numpy().astype(bool)
    for layer, want_layer in enumerate(ref):
        d = np.abs(att[:, layer] - want_layer.numpy())  # (B, H, T, T)
        assert d.max(axis=(1, 3))[real].max() <= 1e-4  # every query row of a real token


@pytest.mark.parametrize("family", sorted(fam.CLASSIFIERS))
def test_classifier_package_verifies_and_scores_like_transformers(tmp_path, family):
    ckpt, ref = fam.CLASSIFIERS[family](tmp_path / "ckpt", 1)
    pkg = build_package(ckpt, tmp_path / "models", family, progress=lambda m: None, quality=False)
    m = read(pkg)
    assert (m["task"], m["family"]) == ("classification", family)
    assert all(f["passed"] for f in m["parity"].values()), m["parity"]
    tok = load_encoder_model(ckpt).tokenizer
    texts = [*fam.TEXTS[:3], *fam.PAIRS]
    got = run(pkg, "fast.onnx", lambda s: session_feeds(s, tok, texts))["logits"]
    b = tok(texts)
    with torch.no_grad():
        want = ref(input_ids=b.input_ids, attention_mask=b.attention_mask).logits.numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_an_unsupported_architecture_is_refused_at_export_naming_what_is_missing(tmp_path):
    import json

    from headwise.model.importers import CheckpointError

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt/config.json").write_text(json.dumps({"model_type": "nomic_bert"}))
    with pytest.raises(CheckpointError, match=r"unknown architecture model_type='nomic_bert'; supported: .*'modernbert'"):
        build_package(tmp_path / "ckpt", tmp_path / "models", "x", progress=lambda m: None, quality=False)
    ckpt, _ = fam.make_qwen3(tmp_path / "q")
    raw = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**raw, "use_sliding_window": True}))
    with pytest.raises(CheckpointError, match=r"sliding-window layers \(use_sliding_window\) is not supported"):
        build_package(ckpt, tmp_path / "models", "q", progress=lambda m: None, quality=False)
