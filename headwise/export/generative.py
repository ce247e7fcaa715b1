"""Build a generative model package (decoder-only or encoder-decoder): load → export the step
graphs with and without attention → manifest → verify. docs/model-package.md, "Generative
packages", is the contract this writes.

No onnxruntime fusion, int8 or fp16 variants yet: the transformer optimiser's decoder
patterns expect another KV-cache layout, and generation quality needs its own yardstick.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
import onnxruntime
import torch

from headwise.export import manifest as mf
from headwise.export.generative_graphs import OPSET, graph_table, io_spec, to_onnx
from headwise.export.generative_verify import verify_generative
from headwise.export.package import staged
from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.importers.common import sha256_file, weights_file

EXPORTER = "headwise 0.1.0"

TOKENIZER_MISSING = (
    "{path}: no tokenizer.json. A generative package serves the checkpoint's own tokenizer.json; "
    "Marian (OPUS-MT) checkpoints ship sentencepiece files (source.spm, target.spm, vocab.json) "
    "instead: convert them to a tokenizer.json whose ids are the model's (vocab.json) and put it "
    "in the checkpoint folder"
)


def build_generative_package(
    checkpoint: Path,
    out: Path,
    name: str,
    steps,
    check: bool = True,
    progress: Callable[[str], None] = print,
) -> Path:
    """Export a GPT-2 or Marian checkpoint to out/name; `steps` is headwise/export/package.py's Steps
    (numbered progress). Written to a temporary folder and moved into place when complete."""
    if not (checkpoint / "tokenizer.json").is_file():
        raise FileNotFoundError(TOKENIZER_MISSING.format(path=checkpoint))
    with staged(out, name) as work:
        model, info = steps.run(f"load {checkpoint}", load_checkpoint, checkpoint)
        if info["architecture"] not in ("decoder", "encoder-decoder"):
            raise CheckpointError(f"{checkpoint}: not a generative model ({info['architecture']})")
        graphs = list(graph_table(model))

        def export_graphs() -> None:
            for graph in graphs:
                to_onnx(model, graph, work / f"{graph}.onnx", with_attention=False)
                to_onnx(model, graph, work / f"{graph}.attention.onnx", with_attention=True)

        steps.run(f"export to ONNX ({', '.join(graphs)}; each with an attention form)", export_graphs)
        shutil.copyfile(checkpoint / "tokenizer.json", work / "tokenizer.json")
        mf.write(work, _manifest(model, info, checkpoint, name, work))
        if check:
            steps.run("verify parity against torch", verify_generative, work, checkpoint,
                      lambda m: progress("      " + m))
    return Path(out) / name


def _manifest(model, info: dict, checkpoint: Path, name: str, work: Path) -> dict:
    cfg = model.config
    special = info["special_tokens"]
    variants, inputs, outputs = {}, {}, {}
    for graph in graph_table(model):
        for with_attention in (False, True):
            v = f"{graph}.attention" if with_attention else graph
            inputs[v], outputs[v] = io_spec(model, graph, with_attention)
            variants[v] = {"file": f"{v}.onnx", "precision": "fp32", "sha256": mf.sha256(work / f"{v}.onnx"),
                           "outputs": [o["name"] for o in outputs[v]], "graph": graph,
                           "attention": with_attention}
    seq2seq = info["architecture"] == "encoder-decoder"
    n_decoder = len(model.decoder.layers) if seq2seq else len(model.layers)
    return {
        "schema_version": mf.SCHEMA_VERSION,
        "name": name,
        "version": "1",
        "family": info["family"],
        "architecture": info["architecture"],
        "source": {"path": checkpoint.name, "sha256": sha256_file(weights_file(checkpoint))},
        "n_layers": n_decoder,  # the layers of the step graphs' attentions
        "n_encoder_layers": len(model.encoder.layers) if seq2seq else 0,
        "n_decoder_layers": n_decoder,
        "n_heads": cfg.n_heads,
        "d_model": cfg.d_model,
        "d_head": cfg.d_head,
        "max_len": cfg.max_len,
        "vocab_size": cfg.vocab_size,
        "pooling": None,
        "normalize": False,
        "tokenizer": {"file": "tokenizer.json", "sha256": mf.sha256(work / "tokenizer.json"),
                      "pad_id": special["pad"]},
        "special_tokens": special,
        "generation": {"suppress_token_ids": info["suppress_token_ids"]},
        "inputs": inputs,
        "outputs": outputs,
        "variants": variants,
        "parity": {},
        "opset": OPSET,
        "exporter_version": f"{EXPORTER} (torch {torch.__version__.split('+')[0]}, onnx {onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__})",
        "created_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
