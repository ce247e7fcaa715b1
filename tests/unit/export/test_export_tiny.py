"""Export and verify of tiny random models, in seconds."""

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from headwise.export.manifest import PackageError, read
from headwise.export.package import build_package
from headwise.export.verify import verify
from headwise.model.sentence import load_sentence_model


def test_package_layout_and_hashes(tiny_package):
    m = read(tiny_package)
    files = {p.name for p in tiny_package.iterdir()}
    assert {"manifest.json", "tokenizer.json", "fast.onnx", "fast.int8.onnx", "fast.fp16.onnx", "analysis.onnx"} <= files
    assert "attention.onnx" not in files  # attention is served from the analysis graph
    assert not any(name.endswith(".partial") for name in files)
    assert not any(p.name.endswith(".partial") for p in tiny_package.parent.iterdir())
    for v in m["variants"].values():
        assert len(v["sha256"]) == 64
        onnx.checker.check_model(str(tiny_package / v["file"]))
    assert m["fusion"]["Attention"] == 2
    assert m["parity"]["fast"]["sentence_embedding"] < 1e-5
    for file, fused in (("fast.onnx", 0), ("fast.int8.onnx", 0), ("fast.fp16.onnx", 4)):  # 2 layers × 2
        ops = [n.op_type for n in onnx.load(str(tiny_package / file)).graph.node]
        assert ops.count("SkipLayerNormalization") == fused, file
        assert ops.count("LayerNormalization") == 4 - fused, file


def test_dynamic_batch_and_sequence(tiny_package, tiny_checkpoint):
    loaded = load_sentence_model(tiny_checkpoint)
    s = ort.InferenceSession(str(tiny_package / "analysis.onnx"), providers=["CPUExecutionProvider"])
    for texts in (["hello"], ["the cat sat on the mat", "dog", "a b c d e f g h i j k"]):
        b = loaded.tokenizer(texts)
        feeds = {"input_ids": b.input_ids.numpy(), "attention_mask": b.attention_mask.numpy(),
                 "token_type_ids": b.token_type_ids.numpy(), "head_mask": np.ones((len(texts), 2, 2), np.float32)}
        emb, att, att16 = s.run(["sentence_embedding", "attentions", "attentions_f16"], feeds)
        np.testing.assert_array_equal(att16, att.astype(np.float16))
        t = b.input_ids.shape[1]
        assert att.shape == (len(texts), 2, 2, t, t)
        with torch.no_grad():
            want = loaded.model(b.input_ids, b.attention_mask, need_weights=True)
        np.testing.assert_allclose(emb, want.sentence_embedding.numpy(), atol=1e-5)
        np.testing.assert_allclose(att, torch.stack(want.attentions, 1).numpy(), atol=1e-5)


def test_exports_are_deterministic(tiny_checkpoint, tiny_package, tmp_path):
    again = build_package(tiny_checkpoint, tmp_path, "tiny", progress=lambda m: None, quality=False)
    a, b = read(tiny_package), read(again)
    for m in (a, b):
        m.pop("created_at")
    assert a == b


def test_tampering_fails_verify_naming_the_file(tiny_package, tiny_checkpoint, tmp_path):
    pkg = tmp_path / "tampered"
    shutil.copytree(tiny_package, pkg)
    data = bytearray((pkg / "fast.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (pkg / "fast.onnx").write_bytes(bytes(data))
    with pytest.raises(PackageError, match=r"fast\.onnx"):
        verify(pkg, tiny_checkpoint, progress=lambda m: None, quality=False)


def test_missing_file_fails_verify(tiny_package, tiny_checkpoint, tmp_path):
    pkg = tmp_path / "missing"
    shutil.copytree(tiny_package, pkg)
    (pkg / "analysis.onnx").unlink()
    with pytest.raises(PackageError, match=r"analysis\.onnx: missing"):
        verify(pkg, tiny_checkpoint, progress=lambda m: None, quality=False)


def test_cli_export_and_verify(tiny_checkpoint, tmp_path, capsys):
    from headwise.cli import main

    assert main(["export", str(tiny_checkpoint), "--name", "t", "--out", str(tmp_path), "--no-fp16", "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "[1/4] load" in out and "fused operators: Attention=2" in out
    m = json.loads((tmp_path / "t/manifest.json").read_text())
    assert "fast.fp16" not in m["variants"]
    assert main(["verify", str(tmp_path / "t"), "--checkpoint", str(tiny_checkpoint), "--no-quality"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "t"), "--checkpoint", str(tiny_checkpoint), "--stsb", "/nonexistent"]) == 1
    assert "/nonexistent: no such file" in capsys.readouterr().err
    (tmp_path / "t/tokenizer.json").write_text("{}")
    assert main(["verify", str(tmp_path / "t"), "--checkpoint", str(tiny_checkpoint)]) == 1
    assert "tokenizer.json" in capsys.readouterr().err


def test_cli_export_bad_checkpoint_exits_nonzero(tmp_path, capsys):
    from headwise.cli import main

    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "no config.json" in capsys.readouterr().err
