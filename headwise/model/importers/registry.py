"""Which importer reads a checkpoint directory, from config.json's model_type alone."""

from __future__ import annotations

from pathlib import Path

from headwise.model.importers import (
    bert,
    distilbert,
    gpt2,
    marian,
    modernbert,
    mpnet,
    qwen3,
    roberta,
)
from headwise.model.importers.common import CheckpointError, read_config

IMPORTERS = (bert, roberta, distilbert, mpnet, modernbert, qwen3, gpt2, marian)


def importer_for(path: Path):
    model_type = read_config(path).get("model_type")
    for importer in IMPORTERS:
        if model_type in importer.MODEL_TYPES:
            return importer
    supported = sorted(t for importer in IMPORTERS for t in importer.MODEL_TYPES)
    raise CheckpointError(f"{path}: unknown architecture model_type={model_type!r}; supported: {supported}")


def checkpoint_architecture(path: str | Path) -> str:
    """"encoder" | "decoder" | "encoder-decoder", from config.json alone (no weights read)."""
    return importer_for(Path(path)).ARCHITECTURE


def checkpoint_heads(path: str | Path) -> list[str]:
    """config.json's `architectures`: the transformers classes the checkpoint was saved as
    (BertForSequenceClassification, ...), from which export picks its kind. Whether the
    family's importer reads that head is the importer's to say (it refuses one it does not,
    naming it)."""
    return [str(a) for a in read_config(Path(path)).get("architectures") or []]


def load_checkpoint(path: str | Path):
    """Import any supported checkpoint directory; returns (model, info dict).

    info: family, architecture, task, and for generative models special_tokens (bos, eos, pad,
    decoder_start) and suppress_token_ids; for classifiers and token classifiers labels."""
    path = Path(path)
    return importer_for(path).load(path)
