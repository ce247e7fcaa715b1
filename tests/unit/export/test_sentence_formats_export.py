"""A tiny BERT saved by today's SentenceTransformer.save (pooling_mode, a Dense layer, no
max_seq_length) exports, verifies against torch, and its fast graph equals encode."""

import numpy as np
import onnxruntime as ort

from headwise.export.manifest import read
from headwise.export.package import build_package
from headwise.export.runner import session_feeds
from headwise.model.sentence import load_sentence_model
from tests.fixtures.families import TEXTS, make_st_bert


def test_todays_format_with_cls_and_dense_exports_and_equals_encode(tmp_path):
    ckpt, st = make_st_bert(tmp_path / "ckpt", pooling="cls", dense=16)
    pkg = build_package(ckpt, tmp_path / "models", "st6", progress=lambda m: None, quality=False)
    m = read(pkg)
    assert (m["pooling"], m["normalize"], m["embedding_dim"]) == ("cls", True, 16)
    assert all(f["passed"] for f in m["parity"].values())
    assert m["outputs"]["fast"][0] == {"name": "sentence_embedding", "dtype": "float32", "shape": ["batch", 16]}
    sess = ort.InferenceSession(str(pkg / "fast.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(["sentence_embedding"], session_feeds(sess, load_sentence_model(ckpt).tokenizer, TEXTS))[0]
    np.testing.assert_allclose(got, st.encode(TEXTS), atol=1e-5)
