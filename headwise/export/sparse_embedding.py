"""Sparse-embedding packages (SPLADE: sentence-transformers' SparseEncoder, a `*ForMaskedLM`
checkpoint whose modules.json pools its logits with SpladePooling, model.splade) → fast.onnx
(sentence_embedding [B, vocab_size]: a weight per entry of the vocabulary, most of them 0),
fast.fp16.onnx (CUDA) and analysis.onnx, verified against the torch model. The pooling runs in
the graph, so a run returns one row per text, not its logits at every position.

A masked LM without SpladePooling stays a fill-mask package. No int8, as for the other heads
(docs/model-package.md); the manifest's `pooling` is "splade", with its settings beside it."""

from __future__ import annotations

from pathlib import Path

from headwise.export.encoder import EncoderKind
from headwise.export.pipeline import Options
from headwise.model.sentence import SPARSE, LoadedModel
from headwise.model.splade import SpladeConfig


class SparseEmbeddingKind(EncoderKind):
    task = SPARSE
    head = "ForMaskedLM"
    outputs = ("sentence_embedding",)
    int8 = False

    def matches(self, checkpoint: Path, heads: list[str]) -> bool:
        return super().matches(checkpoint, heads) and SpladeConfig.from_checkpoint(checkpoint) is not None

    def notes(self, options: Options) -> list[str]:
        return ["sparse-embedding packages have fp32 and fp16 variants, no int8"] if options.int8 else []

    def facts(self, loaded: LoadedModel) -> dict:
        head = loaded.model.head
        return {**super().facts(loaded), "pooling": "splade", "normalize": False, "embedding_dim": head.dim,
                "splade": {"pooling_strategy": head.config.strategy, "activation_function": head.config.activation}}
