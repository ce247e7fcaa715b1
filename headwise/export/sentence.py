"""Sentence-embedding packages: an encoder with a pooling head → fast.onnx
(sentence_embedding, last_hidden_state), fast.int8.onnx (per-token int8, CPU), fast.fp16.onnx
(CUDA) and analysis.onnx; verified for parity and STS-B quality, then timed on this CPU."""

from __future__ import annotations

from pathlib import Path

from headwise.export.encoder import EncoderKind
from headwise.export.pipeline import Options
from headwise.export.speed import measure, speed_lines
from headwise.model.sentence import LoadedModel


def _measure(pkg: Path, manifest: dict, progress) -> dict:
    speed = measure(pkg, manifest)
    for line in speed_lines(speed):
        progress(line)
    return speed


class SentenceKind(EncoderKind):
    task = "embedding"
    outputs = ("sentence_embedding", "last_hidden_state")
    int8 = True

    def facts(self, loaded: LoadedModel) -> dict:
        pooling = loaded.model.head.config
        return {**super().facts(loaded), "pooling": pooling.mode, "normalize": pooling.normalize,
                "embedding_dim": pooling.dense_out or loaded.model.config.d_model, "dense_layers": len(pooling.dense)}

    def measure(self, options: Options):
        return _measure if options.check and options.quality and options.int8 else None
