"""BERT family (BERT, MiniLM, all-MiniLM-L6-v2): post-LN encoder, learned positions,
segment embeddings and a LayerNorm on the embeddings, erf GELU."""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers.common import (
    CheckpointError,
    assign,
    read_config,
    read_state_dict,
    strip_prefix,
)
from headwise.model.transformer import Encoder

MODEL_TYPES = {"bert"}
ARCHITECTURE = "encoder"
# Weights a bare encoder checkpoint may carry that headwise does not use: the pooler (BertModel
# always saves it; sentence models pool themselves) and the position-id buffer.
UNUSED = {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}
_ACT = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu"}


def config_from_hf(raw: dict) -> TransformerConfig:
    if raw.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"not a BERT checkpoint: model_type={raw.get('model_type')!r}")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"unsupported position_embedding_type {raw['position_embedding_type']!r}")
    act = raw.get("hidden_act", "gelu")
    if act not in _ACT:
        raise CheckpointError(f"unsupported hidden_act {act!r}")
    return TransformerConfig(
        vocab_size=raw["vocab_size"],
        d_model=raw["hidden_size"],
        n_heads=raw["num_attention_heads"],
        n_layers=raw["num_hidden_layers"],
        d_ff=raw["intermediate_size"],
        max_len=raw["max_position_embeddings"],
        dropout=raw.get("hidden_dropout_prob", 0.1),
        norm_first=False,
        positional="learned",
        activation=_ACT[act],
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        scale_embedding=False,
        type_vocab_size=raw.get("type_vocab_size", 2),
        embedding_layer_norm=True,
        pad_token_id=raw.get("pad_token_id", 0),
    )


def key_map(cfg: TransformerConfig) -> dict[str, str]:
    m = {
        "embeddings.tokens.weight": "embeddings.word_embeddings.weight",
        "embeddings.positions.embedding.weight": "embeddings.position_embeddings.weight",
        "embeddings.segments.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    }
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"encoder.layer.{i}."
        pairs = {
            "self_attn.w_q": "attention.self.query",
            "self_attn.w_k": "attention.self.key",
            "self_attn.w_v": "attention.self.value",
            "self_attn.w_o": "attention.output.dense",
            "attn_residual.norm": "attention.output.LayerNorm",
            "ff.w_1": "intermediate.dense",
            "ff.w_2": "output.dense",
            "ff_residual.norm": "output.LayerNorm",
        }
        for a, b in pairs.items():
            for p in ("weight", "bias"):
                m[f"{ours}{a}.{p}"] = f"{theirs}{b}.{p}"
    return m


def check_no_task_head(path: Path, raw: dict, state: dict, used: set[str]) -> None:
    """A checkpoint with a head other than sequence classification (a masked-LM head, ...)
    must not become an embedding model with the head silently dropped: its answers would be
    wrong. Refused by the class config.json names, and by any weight the encoder does not use."""
    heads = [a for a in raw.get("architectures") or [] if a != "BertModel"]
    extra = sorted(k for k in state if k not in used and k not in UNUSED)
    if heads or extra:
        what = f"architectures {heads}" if heads else "weights"
        shown = ", ".join(extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
        raise CheckpointError(
            f"{path}: this checkpoint has a task head ({what}{'; ' if heads and extra else ''}"
            f"{'unused weights: ' + shown if extra else ''}) that headwise would drop, serving its encoder as an "
            "embedding model with wrong answers; headwise imports bare BERT encoders (BertModel) and "
            f"{CLASSIFIER} (cross-encoders, classifiers)")


CLASSIFIER = "BertForSequenceClassification"
HEAD_KEYS = {"head.pooler.weight": "pooler.dense.weight", "head.pooler.bias": "pooler.dense.bias",
             "head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}


def labels_of(raw: dict) -> list[str]:
    """Label names in logit order: config.json's id2label, else LABEL_0, LABEL_1, ..."""
    n = int(raw.get("num_labels") or len(raw.get("id2label") or {}) or 2)
    names = {int(k): v for k, v in (raw.get("id2label") or {}).items()}
    return [names.get(i, f"LABEL_{i}") for i in range(n)]


def load_classifier(path: Path):
    """A BertForSequenceClassification checkpoint (a cross-encoder or a classifier) as
    model.classifier.SequenceClassifier; info adds task "classification" and the labels."""
    from headwise.model.classifier import SequenceClassifier

    raw = read_config(path)
    cfg = config_from_hf(raw)
    state = strip_prefix(read_state_dict(path), ("bert.", "model."))
    keys = {f"encoder.{k}": v for k, v in key_map(cfg).items()} | HEAD_KEYS
    extra = sorted(k for k in state if k not in set(keys.values()) and k not in UNUSED)
    if extra:
        raise CheckpointError(f"{path}: {CLASSIFIER} checkpoint with weights headwise does not know: "
                              f"{', '.join(extra[:4])}")
    labels = labels_of(raw)
    model = SequenceClassifier(Encoder(cfg), len(labels), labels)
    assign(model, state, keys)
    model.eval()
    return model, {"family": "bert", "architecture": "encoder", "task": "classification", "labels": labels}


def load(path: Path):
    raw = read_config(path)
    if raw.get("architectures") == [CLASSIFIER]:
        return load_classifier(path)
    cfg = config_from_hf(raw)
    state = strip_prefix(read_state_dict(path), ("bert.", "model."))
    keys = key_map(cfg)
    check_no_task_head(path, raw, state, set(keys.values()))
    model = Encoder(cfg)
    assign(model, state, keys)
    model.eval()
    return model, {"family": "bert", "architecture": "encoder", "task": "embedding"}
