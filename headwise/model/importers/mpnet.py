"""MPNet (Song et al. 2020, "MPNet"; all-mpnet-base-v2): BERT's post-LN encoder with
RoBERTa's positions (counted over real tokens from padding_idx + 1 = 2), no segment
embeddings, and a relative position bias shared by every layer (model/relative.py), computed
from 32 buckets up to a distance of 128 as transformers' MPNetEncoder does.

The sequence-classification head (MPNetForSequenceClassification) is RoBERTa's: dense + tanh
+ out_proj on the first token. The token-classification head (MPNetForTokenClassification:
NER taggers) is BERT's `classifier` on every token, and the question-answering head
(MPNetForQuestionAnswering) BERT's `qa_outputs`; the masked-LM head (MPNetForMaskedLM) is
RoBERTa's `lm_head`.
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers import bert, roberta
from headwise.model.importers.common import (
    CheckpointError,
    activation,
    check_model_type,
    read_checkpoint,
    weights_and_biases,
)

MODEL_TYPES = {"mpnet"}
ARCHITECTURE = "encoder"
UNUSED = bert.UNUSED
# transformers' MPNet fixes these: padding_idx 1 for positions, compute_position_bias's 32 buckets.
PADDING_IDX, BUCKETS = 1, 32


def config_from_hf(raw: dict) -> TransformerConfig:
    check_model_type(raw, MODEL_TYPES, "MPNet")
    if raw.get("relative_attention_num_buckets", BUCKETS) != BUCKETS:
        raise CheckpointError(f"relative_attention_num_buckets={raw['relative_attention_num_buckets']}: "
                              f"transformers' MPNet reads {BUCKETS} buckets; headwise supports only that")
    return TransformerConfig(
        **bert.sizes_of(raw), **{**bert.FAMILY},
        activation=activation(raw, "hidden_act", "gelu", bert._ACT), dropout=raw.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12), type_vocab_size=0, pad_token_id=raw.get("pad_token_id", 1),
        position_offset=PADDING_IDX + 1, relative_attention_buckets=BUCKETS, relative_attention_max_distance=128,
    )


def key_map(cfg: TransformerConfig) -> dict[str, str]:
    m = {"embeddings.tokens.weight": "embeddings.word_embeddings.weight",
         "embeddings.positions.embedding.weight": "embeddings.position_embeddings.weight",
         "embeddings.norm.weight": "embeddings.LayerNorm.weight", "embeddings.norm.bias": "embeddings.LayerNorm.bias",
         "relative_bias.table.weight": "encoder.relative_attention_bias.weight"}
    pairs = {"self_attn.w_q": "attention.attn.q", "self_attn.w_k": "attention.attn.k",
             "self_attn.w_v": "attention.attn.v", "self_attn.w_o": "attention.attn.o",
             "attn_residual.norm": "attention.LayerNorm", "ff.w_1": "intermediate.dense", "ff.w_2": "output.dense",
             "ff_residual.norm": "output.LayerNorm"}
    for i in range(cfg.n_layers):
        m |= weights_and_biases(f"layers.{i}.", f"encoder.layer.{i}.", pairs)
    return m


# The heads MPNet's importer reads, by the class config.json's `architectures` names: the
# classifier is RoBERTa's (dense + tanh + out_proj), the token and span heads BERT's.
HEADS = {"MPNetForSequenceClassification": bert.classifies(roberta.HEAD_KEYS),
         "MPNetForTokenClassification": bert.TAGS, "MPNetForQuestionAnswering": bert.ANSWERS,
         "MPNetForMaskedLM": bert.fills(bert.LM_HEAD)}


def load(path: Path):
    raw, _, state = read_checkpoint(path, ("mpnet.",))
    cfg = config_from_hf(raw)
    return bert.encoder_or_head(path, raw, state, cfg, key_map(cfg), UNUSED, "mpnet", "MPNetModel", "MPNet", HEADS)
