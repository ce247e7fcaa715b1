"""Generative packages (decoder-only or encoder-decoder): the step graphs of
generative_graphs.py, each with and without attention, verified step by step by
generative_verify.py. docs/model-package.md, "Generative packages", is the contract.

No onnxruntime fusion, int8 or fp16 variants yet: the transformer optimiser's decoder
patterns expect another KV-cache layout, and generation quality needs its own yardstick.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from headwise.export import manifest as mf
from headwise.export.generative_graphs import graph_table, io_spec, to_onnx
from headwise.export.generative_verify import verify_generative
from headwise.export.pipeline import Kind, Options, Variant
from headwise.export.verify import resolve_checkpoint
from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.importers.common import sha256_file, weights_file

TOKENIZER_MISSING = (
    "{path}: no tokenizer.json. A generative package serves the checkpoint's own tokenizer.json; "
    "Marian (OPUS-MT) checkpoints ship sentencepiece files (source.spm, target.spm, vocab.json) "
    "instead: convert them to a tokenizer.json whose ids are the model's (vocab.json) and put it "
    "in the checkpoint folder"
)


@dataclass
class LoadedGenerative:
    model: nn.Module  # Decoder | EncoderDecoder
    info: dict  # family, architecture, special_tokens, suppress_token_ids
    source: dict  # {"path": basename, "sha256": weights hash}


class GenerativeKind(Kind):
    task = "generation"

    def notes(self, options: Options) -> list[str]:
        if options.int8 or options.fp16:
            return ["generative packages are fp32 only for now; --int8/--fp16 are ignored"]
        return []

    def load(self, checkpoint: Path) -> LoadedGenerative:
        if not (checkpoint / "tokenizer.json").is_file():
            raise FileNotFoundError(TOKENIZER_MISSING.format(path=checkpoint))
        model, info = load_checkpoint(checkpoint)
        if info["architecture"] not in ("decoder", "encoder-decoder"):
            raise CheckpointError(f"{checkpoint}: not a generative model ({info['architecture']})")
        return LoadedGenerative(model, info, {"path": checkpoint.name, "sha256": sha256_file(weights_file(checkpoint))})

    def export_label(self, loaded: LoadedGenerative) -> str:
        return f"{', '.join(graph_table(loaded.model))}; each with an attention form"

    def export(self, loaded: LoadedGenerative, work: Path) -> None:
        for graph in graph_table(loaded.model):
            to_onnx(loaded.model, graph, work / f"{graph}.onnx", with_attention=False)
            to_onnx(loaded.model, graph, work / f"{graph}.attention.onnx", with_attention=True)

    def variants(self, loaded: LoadedGenerative, options: Options) -> dict[str, Variant]:
        out = {}
        for graph in graph_table(loaded.model):
            for with_attention in (False, True):
                v = f"{graph}.attention" if with_attention else graph
                out[v] = Variant(f"{v}.onnx", "fp32", *io_spec(loaded.model, graph, with_attention),
                                 {"graph": graph, "attention": with_attention})
        return out

    def facts(self, loaded: LoadedGenerative) -> dict:
        model, info = loaded.model, loaded.info
        cfg = model.config
        seq2seq = info["architecture"] == "encoder-decoder"
        n_decoder = len(model.decoder.layers) if seq2seq else len(model.layers)
        return {
            "family": info["family"], "architecture": info["architecture"], "source": loaded.source,
            "n_layers": n_decoder,  # the layers of the step graphs' attentions
            "n_encoder_layers": len(model.encoder.layers) if seq2seq else 0,
            "n_decoder_layers": n_decoder,
            "n_heads": cfg.n_heads, "d_model": cfg.d_model, "d_head": cfg.d_head, "max_len": cfg.max_len,
            "vocab_size": cfg.vocab_size, "pooling": None, "normalize": False,
            "tokenizer": {"pad_id": info["special_tokens"]["pad"]},
            "special_tokens": info["special_tokens"],
            "generation": {"suppress_token_ids": info["suppress_token_ids"]},
        }

    def verify(self, pkg: Path, checkpoint: Path | None, options: Options, progress) -> dict:
        return verify_generative(pkg, resolve_checkpoint(mf.read(pkg), checkpoint), progress)
