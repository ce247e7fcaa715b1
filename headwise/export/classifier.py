"""Classification packages (cross-encoders, classifiers): a BertForSequenceClassification
checkpoint → fast.onnx (logits), fast.fp16.onnx (CUDA) and attention.onnx (logits and every
head's weights), verified against model/'s SequenceClassifier on texts and on pairs.

The inputs are an encoder's (input_ids, attention_mask, token_type_ids): a pair is one
sequence whose segment ids tell its halves apart. int8 is not offered: without a labelled
set its cost in quality could not be measured (docs/model-package.md).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from headwise.export import manifest as mf
from headwise.export import runner
from headwise.export.graphs import INPUTS, OPSET
from headwise.export.optimize import optimize
from headwise.model.classifier import SequenceClassifier
from headwise.model.importers import load_checkpoint
from headwise.model.importers.common import read_config, sha256_file, weights_file
from headwise.model.tokenizer import Tokenizer

PARITY_INPUTS: list = [
    "Hello world", "", "A man is playing a guitar on stage while the crowd sings along.",
    "東京は日本の首都です。", " ".join(["long"] * 400),
    ("what is the capital of france", "Paris is the capital and largest city of France."),
    ("how do transformers work", "Attention weighs every token against every other token."),
    ("short", ""), ("", "an empty query"),
]
LIMITS = {  # max abs diff of logits vs torch; batch invariance as for embeddings
    "fp32": {"logits": 1e-4, "attentions_excess": 1e-5, "attentions_f16_mismatches": 0, "batch_invariance": 1e-5},
    "fp16": {"logits": 5e-2, "batch_invariance": 1e-3},
}
ATTENTION_RTOL = 1e-4


class LogitsGraph(nn.Module):
    def __init__(self, model: SequenceClassifier, with_attention: bool):
        super().__init__()
        self.model, self.with_attention = model, with_attention

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor):
        out = self.model(input_ids, attention_mask, token_type_ids, need_weights=self.with_attention, fused=False)
        if not self.with_attention:
            return (out.logits,)
        attentions = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
        return out.logits, attentions, attentions.to(torch.float16)


def outputs_of(with_attention: bool) -> list[str]:
    return ["logits", "attentions", "attentions_f16"] if with_attention else ["logits"]


def to_onnx(model: SequenceClassifier, path: Path, with_attention: bool) -> None:
    names = outputs_of(with_attention)
    example = (torch.ones(2, 7, dtype=torch.long), torch.ones(2, 7, dtype=torch.long),
               torch.zeros(2, 7, dtype=torch.long))
    axes = {n: {0: "batch", 1: "seq"} for n in INPUTS} | {"logits": {0: "batch"}}
    if with_attention:
        axes["attentions"] = axes["attentions_f16"] = {0: "batch", 3: "seq", 4: "seq"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LogitsGraph(model, with_attention).eval(), example, str(path), input_names=list(INPUTS),
                          output_names=names, dynamic_axes=axes, opset_version=OPSET, dynamo=False,
                          do_constant_folding=True)


def io_spec(model: SequenceClassifier, with_attention: bool) -> tuple[list[dict], list[dict]]:
    cfg = model.config
    inputs = [{"name": n, "dtype": "int64", "shape": ["batch", "seq"]} for n in INPUTS]
    outputs = [{"name": "logits", "dtype": "float32", "shape": ["batch", len(model.labels)]}]
    if with_attention:
        for name, dtype in (("attentions", "float32"), ("attentions_f16", "float16")):
            outputs.append({"name": name, "dtype": dtype, "shape": ["batch", cfg.n_layers, cfg.n_heads, "seq", "seq"]})
    return inputs, outputs


def max_len_of(checkpoint: Path, model: SequenceClassifier) -> int:
    """The tokenizer's model_max_length where the checkpoint gives one, within the positions."""
    import json

    cfg_file = checkpoint / "tokenizer_config.json"
    given = json.loads(cfg_file.read_text()).get("model_max_length") if cfg_file.is_file() else None
    limit = model.config.max_len
    return min(limit, int(given)) if isinstance(given, int | float) and given > 0 else limit


def build_classifier_package(checkpoint: Path, work: Path, name: str, fp16: bool, check: bool,
                             steps, progress: Callable[[str], None]) -> None:
    model, info = steps.run(f"load {checkpoint}", load_checkpoint, checkpoint)
    cfg = model.config
    max_len = max_len_of(checkpoint, model)
    tokenizer = Tokenizer(checkpoint, max_len)

    def export_graphs() -> None:
        to_onnx(model, work / "raw.onnx", with_attention=False)
        to_onnx(model, work / "attention.onnx", with_attention=True)

    steps.run("export to ONNX (logits + attention graphs)", export_graphs)
    fusion = steps.run("optimise (fuse attention, SkipLayerNorm, Gelu)" + (" + fp16" if fp16 else ""),
                       optimize, work / "raw.onnx", work / "fast.onnx", cfg.n_heads, cfg.d_model,
                       work / "fast.fp16.onnx" if fp16 else None)
    progress("      fused operators: " + ", ".join(f"{k}={v}" for k, v in sorted(fusion.items())))
    (work / "raw.onnx").unlink()
    shutil.copyfile(checkpoint / "tokenizer.json", work / "tokenizer.json")
    variants = {"fast": ("fast.onnx", "fp32", False)}
    if fp16:
        variants["fast.fp16"] = ("fast.fp16.onnx", "fp16", False)
    variants["attention"] = ("attention.onnx", "fp32", True)
    io = {v: io_spec(model, att) for v, (_, _, att) in variants.items()}
    manifest = {
        "schema_version": mf.SCHEMA_VERSION, "name": name, "version": "1", "family": info["family"],
        "architecture": "encoder", "task": "classification", "labels": list(model.labels),
        "source": {"path": checkpoint.name, "sha256": sha256_file(weights_file(checkpoint)),
                   "architectures": read_config(checkpoint).get("architectures")},
        "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "d_model": cfg.d_model, "max_len": max_len,
        "vocab_size": cfg.vocab_size, "pooling": None, "normalize": False,
        "tokenizer": {"file": "tokenizer.json", "sha256": mf.sha256(work / "tokenizer.json"),
                      "pad_id": tokenizer.pad_id, "pairs": True},
        "inputs": {v: io[v][0] for v in variants}, "outputs": {v: io[v][1] for v in variants},
        "variants": {v: {"file": f, "precision": p, "sha256": mf.sha256(work / f), "outputs": outputs_of(att)}
                     for v, (f, p, att) in variants.items()},
        "parity": {}, "fusion": fusion, "opset": OPSET,
    }
    mf.write(work, manifest)
    if check:
        steps.run("verify parity against torch", verify_classifier, work, model, tokenizer,
                  lambda m: progress("      " + m))


def verify_classifier(pkg: Path, model: SequenceClassifier, tokenizer: Tokenizer,
                      progress: Callable[[str], None] = print) -> dict:
    """Every variant's logits (and the attention graph's weights) against the torch model, on
    texts and pairs, batched and alone; writes manifest.parity, raises on a failing figure."""
    manifest = mf.read(pkg)
    mf.check_hashes(pkg, manifest)
    f = runner.feeds(tokenizer, PARITY_INPUTS)  # tokenizers encodes (a, b) tuples as pairs
    with torch.no_grad():
        ref = model(*(torch.from_numpy(f[k]) for k in INPUTS), need_weights=True, fused=False)
    want_logits = ref.logits.numpy()
    want_att = torch.stack(ref.attentions, 1).numpy()
    parity, failures = {}, []
    for vname, v in manifest["variants"].items():
        sess = runner.session(pkg / v["file"])
        names = [o.name for o in sess.get_outputs()]
        got = dict(zip(names, sess.run(names, f), strict=True))
        fig = {"logits": float(np.abs(got["logits"] - want_logits).max())}
        if "attentions" in got:
            fig["attentions"] = float(np.abs(got["attentions"] - want_att).max())
            fig["attentions_excess"] = float((np.abs(got["attentions"] - want_att) - ATTENTION_RTOL * np.abs(want_att)).max())
            fig["attentions_f16_mismatches"] = int((got["attentions_f16"] != got["attentions"].astype(np.float16)).sum())
        worst = 0.0
        for i, one in enumerate(PARITY_INPUTS):
            alone = sess.run(["logits"], runner.feeds(tokenizer, [one]))[0]
            worst = max(worst, float(np.abs(alone - got["logits"][i : i + 1]).max()))
        fig["batch_invariance"] = worst
        bad = [f"{k} = {fig[k]:.3g} exceeds {lim:g}" for k, lim in LIMITS[v["precision"]].items()
               if k in fig and fig[k] > lim]
        fig["passed"] = not bad
        failures += [f"{v['file']}: {b}" for b in bad]
        parity[vname] = fig
        progress(f"{vname:10} logits {fig['logits']:.2e}  batch_inv {worst:.2e}"
                 + (f"  attentions {fig['attentions']:.2e}" if "attentions" in fig else ""))
    manifest["parity"] = parity
    mf.write(pkg, manifest)
    if failures:
        raise mf.PackageError("parity check failed:\n  " + "\n  ".join(failures))
    return parity


def reverify(pkg: Path, checkpoint: Path) -> dict:
    """`headwise verify` of a classification package against its checkpoint."""
    model, _ = load_checkpoint(checkpoint)
    if not isinstance(model, SequenceClassifier):
        raise mf.PackageError(f"{checkpoint}: not a sequence classifier, but the package is one")
    manifest = mf.read(pkg)
    return verify_classifier(pkg, model, Tokenizer(checkpoint, int(manifest["max_len"])), lambda m: None)


def parity_table(parity: dict) -> str:
    lines = [f"{'variant':12}{'logits':>12}{'attentions':>12}{'batch_inv':>12}  passed"]
    for name, f in parity.items():
        att = f"{f['attentions']:.2e}" if "attentions" in f else "-"
        lines.append(f"{name:12}{f['logits']:12.2e}{att:>12}{f['batch_invariance']:12.2e}  {f['passed']}")
    return "\n".join(lines)
