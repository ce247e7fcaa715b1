"""Sparse-embedding packages (SPLADE) from a tiny SparseEncoder checkpoint: the manifest says task,
pooling and its settings (no labels, no int8), every graph's weights equal SparseEncoder.encode's
within 1e-5 (fp16 within 5e-3) with the same non-zero entries, the analysis graph's with heads
removed too, and `headwise verify` re-checks it."""

import json

import numpy as np
import onnxruntime as ort
import pytest

from headwise.export.package import KINDS, verify_package
from headwise.export.pipeline import Options
from headwise.export.sparse_embedding import SparseEmbeddingKind
from headwise.model.tokenizer import Tokenizer
from tests.fixtures.tiny import make_sparse_package

TEXTS = ["the cat sat on the mat", "a dog", "", "hello world " * 40, "Ünïcödé — naïve résumé 🎉"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = make_sparse_package(tmp_path_factory.mktemp("sparse"))
    ckpt, ref = out["tiny-splade"]
    pkg = out["models"] / "tiny-splade"
    return ckpt, ref, pkg, json.loads((pkg / "manifest.json").read_text())


def run(pkg, manifest: dict, variant: str, ckpt, texts: list[str]) -> dict:
    b = Tokenizer(ckpt, manifest["max_len"])(texts)
    feeds = {"input_ids": b.input_ids.numpy(), "attention_mask": b.attention_mask.numpy(),
             "token_type_ids": b.token_type_ids.numpy()}
    sess = ort.InferenceSession(str(pkg / manifest["variants"][variant]["file"]), providers=["CPUExecutionProvider"])
    if "head_mask" in {i.name for i in sess.get_inputs()}:
        feeds["head_mask"] = np.ones((len(texts), manifest["n_layers"], manifest["n_heads"]), np.float32)
    mine = {i.name: feeds[i.name] for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, mine), strict=True))


def test_the_kind_has_no_int8():
    kind = KINDS["sparse-embedding"]
    assert isinstance(kind, SparseEmbeddingKind) and kind.int8 is False
    assert kind.notes(Options(int8=True)) == ["sparse-embedding packages have fp32 and fp16 variants, no int8"]


def test_manifest_says_what_it_is(exported):
    _, ref, _, m = exported
    vocab = ref[0].auto_model.config.vocab_size
    assert (m["task"], m["pooling"], m["normalize"], m["embedding_dim"]) == ("sparse-embedding", "splade", False, vocab)
    assert m["splade"] == {"pooling_strategy": "max", "activation_function": "relu"}
    assert "labels" not in m and "mask_token" not in m
    assert set(m["variants"]) == {"fast", "fast.fp16", "analysis"}
    for variant in m["variants"]:
        assert m["outputs"][variant][0] == {"name": "sentence_embedding", "dtype": "float32", "shape": ["batch", vocab]}
    assert all(p["passed"] for p in m["parity"].values())
    assert m["parity"]["analysis"]["ablation"] < 1e-4


@pytest.mark.parametrize("variant,tol", [("fast", 1e-5), ("analysis", 1e-5), ("fast.fp16", 5e-3)])
def test_every_graph_equals_sparse_encoder(exported, variant, tol):
    ckpt, ref, pkg, m = exported
    got = run(pkg, m, variant, ckpt, TEXTS)["sentence_embedding"]
    want = ref.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)
    if variant != "fast.fp16":
        assert ((got > 0) == (want > 0)).all()


def test_verify_rechecks_it(exported):
    ckpt, _, pkg, _ = exported
    parity = verify_package(pkg, ckpt, progress=lambda _: None, quality=False)
    assert parity["fast"]["sentence_embedding"] < 1e-5 and parity["fast"]["batch_invariance"] == 0
