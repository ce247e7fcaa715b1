"""DistilBERT (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"): BERT's post-LN
encoder with half the layers, no segment embeddings and no pooler. Learned positions (a
checkpoint trained with `sinusoidal_pos_embds` stores its fixed table as the same weight).

The bare encoder is imported (sentence-transformers models such as msmarco-distilbert-*), and
DistilBertForTokenClassification (NER taggers), whose head is BERT's: `classifier` on every
token, and DistilBertForQuestionAnswering (distilbert-base-cased-distilled-squad: SQuAD
answerers), whose head is BERT's too: `qa_outputs` on every token.
DistilBertForSequenceClassification (distilbert-base-uncased-finetuned-sst-2-english, the
sentiment classifier transformers' text-classification pipeline picks by default) is BERT's
classification head with ReLU for tanh: `pre_classifier` + ReLU + `classifier` on the [CLS]
token. DistilBertForMaskedLM (distilbert-base-uncased) has BERT's masked-LM head under other
names (`vocab_transform`, `vocab_layer_norm`, `vocab_projector`).
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers import bert, common

MODEL_TYPES = {"distilbert"}
ARCHITECTURE = "encoder"
UNUSED = {"embeddings.position_ids"}
HEAD_KEYS = {"head.pooler.weight": "pre_classifier.weight", "head.pooler.bias": "pre_classifier.bias",
             "head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}
FAMILY = {"norm_first": False, "positional": "learned", "scale_embedding": False, "embedding_layer_norm": True,
          "type_vocab_size": 0, "layer_norm_eps": 1e-12}  # nn.LayerNorm(dim, eps=1e-12) throughout
SIZES = {"vocab_size": "vocab_size", "d_model": "dim", "n_heads": "n_heads", "n_layers": "n_layers",
         "d_ff": "hidden_dim", "max_len": "max_position_embeddings"}


def config_from_hf(raw: dict) -> TransformerConfig:
    common.check_model_type(raw, MODEL_TYPES, "DistilBERT")
    return TransformerConfig(**common.sizes(raw, SIZES), **FAMILY, activation=common.activation(raw, "activation", "gelu", bert._ACT),
                             dropout=raw.get("dropout", 0.1), pad_token_id=raw.get("pad_token_id", 0))


def key_map(cfg: TransformerConfig) -> dict[str, str]:
    m = {"embeddings.tokens.weight": "embeddings.word_embeddings.weight",
         "embeddings.positions.embedding.weight": "embeddings.position_embeddings.weight",
         "embeddings.norm.weight": "embeddings.LayerNorm.weight", "embeddings.norm.bias": "embeddings.LayerNorm.bias"}
    pairs = {"self_attn.w_q": "attention.q_lin", "self_attn.w_k": "attention.k_lin", "self_attn.w_v": "attention.v_lin",
             "self_attn.w_o": "attention.out_lin", "attn_residual.norm": "sa_layer_norm", "ff.w_1": "ffn.lin1",
             "ff.w_2": "ffn.lin2", "ff_residual.norm": "output_layer_norm"}
    for i in range(cfg.n_layers):
        m |= common.weights_and_biases(f"layers.{i}.", f"transformer.layer.{i}.", pairs)
    return m


# DistilBertForMaskedLM's head: BERT's under other names, the projector's bias its own
MLM = bert.MaskedLMNames("vocab_transform", "vocab_layer_norm", "vocab_projector", None)
# The heads DistilBERT's importer reads, by the class config.json's `architectures` names.
HEADS = {"DistilBertForSequenceClassification": bert.classifies(HEAD_KEYS, "relu"),
         "DistilBertForTokenClassification": bert.TAGS, "DistilBertForQuestionAnswering": bert.ANSWERS,
         "DistilBertForMaskedLM": bert.fills(MLM)}


def load(path: Path):
    raw, _, state = common.read_checkpoint(path, ("distilbert.",))
    cfg = config_from_hf(raw)
    return bert.encoder_or_head(path, raw, state, cfg, key_map(cfg), UNUSED, "distilbert", "DistilBertModel",
                                "DistilBERT", HEADS)
