"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer: A Modern Bidirectional
Encoder"; gte-modernbert, ModernBERT classifiers): a pre-norm encoder with rotary positions,
a GeGLU feed-forward, LayerNorms without β, no biases, and alternating attention: every
`global_attn_every_n_layers`-th layer (0, 3, 6, ...) attends globally with θ = 160 000, the
others within local_attention / 2 tokens either side with θ = 10 000. Its embeddings are
normalised once, so layer 0 does not normalise its input again (`first_attn_norm=False`).

Checkpoint layouts undone here: Q, K and V stacked in one Wqkv [3·D, D]; the feed-forward's
activated and gating halves stacked in one Wi [2·d_ff, D] (the first half goes through GELU).
The sequence-classification head (ModernBertForSequenceClassification) pools the [CLS]
state or the mean (classifier_pooling), then dense + GELU + LayerNorm + classifier (its
"prediction head"); the token-classification and question-answering heads
(ModernBertForTokenClassification, ModernBertForQuestionAnswering) put every token's state
through the same prediction head and classifier, and the masked-LM head
(ModernBertForMaskedLM) through it and onto the vocabulary (`decoder`, tied to the embeddings).
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.heads import (
    MaskedLMHead,
    PredictionClassificationHead,
    PredictionTokenClassificationHead,
)
from headwise.model.importers import bert
from headwise.model.importers.common import (
    CheckpointError,
    check_model_type,
    read_checkpoint,
    sizes,
)
from headwise.model.importers.rope import rope_theta

MODEL_TYPES = {"modernbert"}
ARCHITECTURE = "encoder"
CLASSIFIER = "ModernBertForSequenceClassification"
FAMILY = {"norm_first": True, "final_layer_norm": True, "positional": "rotary", "norm_bias": False, "bias": False,
          "gated_ff": True, "embedding_layer_norm": True, "first_attn_norm": False, "scale_embedding": False,
          "type_vocab_size": 0, "dropout": 0.0}
SIZES = {"vocab_size": "vocab_size", "d_model": "hidden_size", "n_heads": "num_attention_heads",
         "n_layers": "num_hidden_layers", "d_ff": "intermediate_size", "max_len": "max_position_embeddings"}
_ACT = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "silu": "silu", "relu": "relu"}


def global_every(raw: dict) -> int:
    """Every how many layers one is global, from global_attn_every_n_layers or layer_types
    (which must then follow that pattern)."""
    n = int(raw.get("global_attn_every_n_layers", 3))
    types = raw.get("layer_types")
    if types:
        want = ["sliding_attention" if i % n else "full_attention" for i in range(len(types))]
        if types != want:
            raise CheckpointError(f"ModernBERT layer_types {types} do not alternate every {n} layers: not supported")
    return n


def config_from_hf(raw: dict) -> TransformerConfig:
    check_model_type(raw, MODEL_TYPES, "ModernBERT")
    for key in ("attention_bias", "mlp_bias", "norm_bias"):
        if raw.get(key):
            raise CheckpointError(f"ModernBERT with {key}=true is not supported")
    return TransformerConfig(
        **sizes(raw, SIZES), **FAMILY, activation=bert.activation(raw, "hidden_activation", "gelu", _ACT),
        layer_norm_eps=raw.get("norm_eps", 1e-5), pad_token_id=raw.get("pad_token_id") or 0,
        rope_theta=rope_theta(raw, "full_attention", 160000.0, legacy="global_rope_theta"),
        rope_theta_local=rope_theta(raw, "sliding_attention", 10000.0, legacy="local_rope_theta"),
        local_window=int(raw.get("local_attention", 128)), global_every=global_every(raw),
    )


def _rows(part: int, n: int):
    """Rows part·n .. (part + 1)·n of a stacked weight: Q, K or V of Wqkv, a half of Wi."""
    return lambda w: w[part * n : (part + 1) * n]


def key_map(cfg: TransformerConfig) -> tuple[dict[str, str], dict]:
    m = {"embeddings.tokens.weight": "embeddings.tok_embeddings.weight",
         "embeddings.norm.weight": "embeddings.norm.weight", "final_norm.weight": "final_norm.weight"}
    tf: dict = {}
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"layers.{i}."
        for part, name in enumerate(("w_q", "w_k", "w_v")):
            m[f"{ours}self_attn.{name}.weight"] = f"{theirs}attn.Wqkv.weight"
            tf[f"{ours}self_attn.{name}.weight"] = _rows(part, cfg.d_model)  # [3D, D] → [D, D]
        for part, name in enumerate(("w_gate", "w_up")):
            m[f"{ours}ff.{name}.weight"] = f"{theirs}mlp.Wi.weight"
            tf[f"{ours}ff.{name}.weight"] = _rows(part, cfg.d_ff)  # [2F, D] → [F, D]
        m |= {f"{ours}self_attn.w_o.weight": f"{theirs}attn.Wo.weight", f"{ours}ff.w_down.weight": f"{theirs}mlp.Wo.weight",
              f"{ours}ff_residual.norm.weight": f"{theirs}mlp_norm.weight"}
        if i > 0:
            m[f"{ours}attn_residual.norm.weight"] = f"{theirs}attn_norm.weight"
    return m, tf


def _head(raw: dict, cfg: TransformerConfig, labels: list[str], cls: type, pooling: str = "cls"):
    """The prediction head (dense + activation + LayerNorm) and its classifier, as config.json
    sets them (`classifier_bias`: the dense layer's bias; the LayerNorm has none)."""
    return cls(cfg.d_model, labels, pooling, raw.get("classifier_activation", "gelu"), cfg.layer_norm_eps,
               dense_bias=bool(raw.get("classifier_bias")))


def head_keys_of(raw: dict) -> dict[str, str]:
    keys = {"head.dense.weight": "head.dense.weight", "head.norm.weight": "head.norm.weight",
            "head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}
    return keys | ({"head.dense.bias": "head.dense.bias"} if raw.get("classifier_bias") else {})


def classifier(path, raw, state, cfg, keys, unused, name, family, transforms):
    """ModernBertForSequenceClassification: the [CLS] state or the mean (classifier_pooling)
    through the prediction head."""
    pooling = raw.get("classifier_pooling", "cls")
    if pooling not in ("cls", "mean"):
        raise CheckpointError(f"unsupported classifier_pooling {pooling!r}")
    labels = bert.labels_of(raw)
    head = _head(raw, cfg, labels, PredictionClassificationHead, pooling)
    model = bert.with_head(path, state, cfg, keys, head, head_keys_of(raw), unused, name, transforms)
    return model, {"family": family, "architecture": ARCHITECTURE, "task": "classification", "labels": labels}


def tagger(path, raw, state, cfg, keys, unused, name, family, transforms):
    """ModernBertForTokenClassification: every token's state through the prediction head."""
    labels = bert.labels_of(raw)
    head = _head(raw, cfg, labels, PredictionTokenClassificationHead)
    model = bert.with_head(path, state, cfg, keys, head, head_keys_of(raw), unused, name, transforms)
    return model, {"family": family, "architecture": ARCHITECTURE, "task": "token-classification", "labels": labels}


def answerer(path, raw, state, cfg, keys, unused, name, family, transforms):
    """ModernBertForQuestionAnswering: the tagger's head with the labels start and end (its
    linear map is named `classifier`, not BERT's `qa_outputs`)."""
    head = _head(raw, cfg, bert.SPAN_LABELS, PredictionTokenClassificationHead)
    model = bert.with_head(path, state, cfg, keys, head, head_keys_of(raw), unused, name, transforms)
    return model, {"family": family, "architecture": ARCHITECTURE, "task": "question-answering",
                   "labels": bert.SPAN_LABELS}


def masked_lm(path, raw, state, cfg, keys, unused, name, family, transforms):
    """ModernBertForMaskedLM: every token's state through the prediction head, then `decoder`
    onto the vocabulary (its weight the word embeddings', tied; its bias with decoder_bias)."""
    bias = raw.get("decoder_bias", True)
    head = MaskedLMHead(cfg.d_model, cfg.vocab_size, raw.get("classifier_activation", "gelu"), cfg.layer_norm_eps,
                        dense_bias=bool(raw.get("classifier_bias")), norm_bias=False)
    tied = raw.get("tie_word_embeddings", True) and "decoder.weight" not in state
    head_keys = {k: v for k, v in head_keys_of(raw).items() if not k.startswith("head.classifier")} | {
        "head.decoder.weight": keys["embeddings.tokens.weight"] if tied else "decoder.weight",
        **({"head.decoder.bias": "decoder.bias"} if bias else {})}
    model = bert.with_head(path, state, cfg, keys, head, head_keys, unused, name, transforms)
    return model, {"family": family, "architecture": ARCHITECTURE, "task": "fill-mask"}


# The heads ModernBERT's importer reads, by the class config.json's `architectures` names.
HEADS = {CLASSIFIER: bert.TaskHead(bert.classifies().what, classifier),
         "ModernBertForTokenClassification": bert.TaskHead(bert.TAGS.what, tagger),
         "ModernBertForQuestionAnswering": bert.TaskHead(bert.ANSWERS.what, answerer),
         "ModernBertForMaskedLM": bert.TaskHead(bert.FILLS.what, masked_lm)}


def load(path: Path):
    raw, _, state = read_checkpoint(path, ("model.",))
    cfg = config_from_hf(raw)
    keys, tf = key_map(cfg)
    return bert.encoder_or_head(path, raw, state, cfg, keys, set(), "modernbert", "ModernBertModel", "ModernBERT",
                                HEADS, tf)
