"""RoBERTa and XLM-RoBERTa (Liu et al. 2019, "RoBERTa"; Conneau et al. 2020, "Unsupervised
Cross-lingual Representation Learning at Scale"): BERT's encoder, trained differently, with
two differences model/ is told about through the config:

- positions count real tokens only and start at pad_token_id + 1 (fairseq's convention:
  `position_offset`), so a 514-row table holds 512 tokens;
- no segment ids: the tokenizer gives none and the model adds segment 0's vector to every
  token (`use_token_types=False`), pairs included.

Tensor names are BERT's under a `roberta.` prefix; the sequence-classification head
(RobertaForSequenceClassification, XLMRobertaForSequenceClassification: bge-reranker,
cross-encoders) is dense + tanh + out_proj on the <s> token, BERT's pooler and classifier
under other names. The token-classification head (RobertaForTokenClassification,
XLMRobertaForTokenClassification: NER taggers) is BERT's: `classifier` on every token; so is
the question-answering head (RobertaForQuestionAnswering, XLMRobertaForQuestionAnswering:
deepset's SQuAD 2.0 answerers), `qa_outputs` on every token; the masked-LM head
(RobertaForMaskedLM, XLMRobertaForMaskedLM: roberta-base, xlm-roberta-base) is `lm_head`,
BERT's with GELU.
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers import bert
from headwise.model.importers.common import (
    CheckpointError,
    check_model_type,
    read_checkpoint,
)

MODEL_TYPES = {"roberta", "xlm-roberta"}
ARCHITECTURE = "encoder"
UNUSED = bert.UNUSED | {"embeddings.token_type_ids"}
BASES = {"roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel"}
HEAD_KEYS = {"head.pooler.weight": "classifier.dense.weight", "head.pooler.bias": "classifier.dense.bias",
             "head.classifier.weight": "classifier.out_proj.weight", "head.classifier.bias": "classifier.out_proj.bias"}


def config_from_hf(raw: dict) -> TransformerConfig:
    check_model_type(raw, MODEL_TYPES, "RoBERTa / XLM-RoBERTa")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"unsupported position_embedding_type {raw['position_embedding_type']!r}")
    if raw.get("is_decoder") or raw.get("add_cross_attention"):
        raise CheckpointError("a RoBERTa decoder (is_decoder / add_cross_attention) is not an encoder headwise serves")
    pad = raw.get("pad_token_id", 1)
    return TransformerConfig(
        **bert.sizes_of(raw), **bert.FAMILY,
        activation=bert.activation(raw, "hidden_act", "gelu", bert._ACT),
        dropout=raw.get("hidden_dropout_prob", 0.1), layer_norm_eps=raw.get("layer_norm_eps", 1e-5),
        type_vocab_size=raw.get("type_vocab_size", 1), pad_token_id=pad,
        position_offset=pad + 1, use_token_types=False,
    )


# The heads each family's importer reads, by the class config.json's `architectures` names.
HEADS = {family: {f"{cls}ForSequenceClassification": bert.classifies(HEAD_KEYS),
                  f"{cls}ForTokenClassification": bert.TAGS, f"{cls}ForQuestionAnswering": bert.ANSWERS,
                  f"{cls}ForMaskedLM": bert.fills(bert.LM_HEAD)}
         for family, cls in (("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta"))}


def load(path: Path):
    raw, _, state = read_checkpoint(path, ("roberta.",))
    cfg = config_from_hf(raw)
    family = raw["model_type"]
    return bert.encoder_or_head(path, raw, state, cfg, bert.key_map(cfg), UNUSED, family, BASES[family],
                                "RoBERTa / XLM-RoBERTa", HEADS[family])
