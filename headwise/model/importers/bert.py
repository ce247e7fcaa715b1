"""BERT family (BERT, MiniLM, all-MiniLM-L6-v2): post-LN encoder, learned positions,
segment embeddings and a LayerNorm on the embeddings, erf GELU."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from torch import nn

from headwise.model.config import TransformerConfig
from headwise.model.encoder_model import EncoderModel
from headwise.model.heads import ClassificationHead, MaskedLMHead, TokenClassificationHead
from headwise.model.importers.common import (
    CheckpointError,
    activation,
    check_model_type,
    loaded,
    read_checkpoint,
    sizes,
    weights_and_biases,
)
from headwise.model.transformer import Encoder

MODEL_TYPES = {"bert"}
ARCHITECTURE = "encoder"
# Weights a bare encoder checkpoint may carry that headwise does not use: the pooler (BertModel
# always saves it; sentence models pool themselves) and the position-id buffer.
UNUSED = {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}
# What every BERT is; the sizes and the rest come from config.json.
FAMILY = {"norm_first": False, "positional": "learned", "scale_embedding": False, "embedding_layer_norm": True}
SIZES = {"vocab_size": "vocab_size", "d_model": "hidden_size", "n_heads": "num_attention_heads",
         "n_layers": "num_hidden_layers", "d_ff": "intermediate_size", "max_len": "max_position_embeddings"}
_ACT = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu"}


def sizes_of(raw: dict) -> dict:
    """TransformerConfig's sizes from a BERT-style config.json (RoBERTa's too)."""
    return sizes(raw, SIZES)


def config_from_hf(raw: dict) -> TransformerConfig:
    check_model_type(raw, MODEL_TYPES, "BERT")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"unsupported position_embedding_type {raw['position_embedding_type']!r}")
    return TransformerConfig(
        **sizes(raw, SIZES),
        **FAMILY,
        activation=activation(raw, "hidden_act", "gelu", _ACT),
        dropout=raw.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        type_vocab_size=raw.get("type_vocab_size", 2),
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
        m |= weights_and_biases(ours, theirs, pairs)
    return m


def check_no_task_head(path: Path, raw: dict, state: dict, used: set[str], base: str, heads: dict[str, str],
                       unused: frozenset | set, family: str) -> None:
    """A checkpoint with a head the family's importer does not read (a masked-LM head, ...)
    must not become an embedding model with the head silently dropped: its answers would be
    wrong. Refused by the class config.json names, and by any weight the encoder does not use.
    `base`, `unused`, `family`: the family's bare class, ignored weights and name in messages;
    `heads`: class name → what it is for, of the heads it does read (named in the refusal)."""
    named = [a for a in raw.get("architectures") or [] if a != base]
    extra = sorted(k for k in state if k not in used and k not in unused)
    if named or extra:
        what = f"architectures {named}" if named else "weights"
        shown = ", ".join(extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
        readable = "".join(f", {name} ({purpose})" for name, purpose in heads.items())
        raise CheckpointError(
            f"{path}: this checkpoint has a task head ({what}{'; ' if named and extra else ''}"
            f"{'unused weights: ' + shown if extra else ''}) that headwise would drop, serving its encoder as an "
            f"embedding model with wrong answers; headwise imports bare {family} encoders ({base}){readable}")


@dataclass(frozen=True)
class TaskHead:
    """A transformers …For<Task> head an encoder family's importer reads: what it is for (named
    in refusals) and `build(path, raw, state, cfg, keys, unused, name, family, transforms)` →
    (EncoderModel, info), given the family's encoder `keys` (and their `transforms`, where a
    checkpoint stacks weights: common.loaded) and the class `name` config.json gave."""

    what: str
    build: Callable[..., tuple[EncoderModel, dict]]


def encoder_or_head(path: Path, raw: dict, state: dict, cfg: TransformerConfig, keys: dict[str, str],
                    unused: frozenset | set, family: str, base: str, label: str,
                    heads: dict[str, TaskHead], transforms: dict | None = None) -> tuple[nn.Module, dict]:
    """An encoder family's checkpoint as the head config.json's `architectures` names, where
    `heads` (class name → TaskHead: the family's table) has it; else its bare encoder (task
    "embedding") once check_no_task_head finds no head that would be dropped. `base`, `label`:
    the family's bare class and its name in messages."""
    for name in raw.get("architectures") or []:
        if name in heads:
            return heads[name].build(path, raw, state, cfg, keys, unused, name, family, transforms)
    check_no_task_head(path, raw, state, set(keys.values()), base, {n: h.what for n, h in heads.items()}, unused, label)
    return loaded(Encoder(cfg), state, keys, transforms), {"family": family, "architecture": "encoder",
                                                          "task": "embedding"}


HEAD_KEYS = {"head.pooler.weight": "pooler.dense.weight", "head.pooler.bias": "pooler.dense.bias",
             "head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}


def labels_of(raw: dict) -> list[str]:
    """Label names in logit order: config.json's id2label, else LABEL_0, LABEL_1, ..."""
    n = int(raw.get("num_labels") or len(raw.get("id2label") or {}) or 2)
    names = {int(k): v for k, v in (raw.get("id2label") or {}).items()}
    return [names.get(i, f"LABEL_{i}") for i in range(n)]


def classifier(path: Path, raw: dict, state: dict, cfg: TransformerConfig, keys: dict[str, str],
               unused: frozenset | set, name: str, family: str, transforms: dict | None = None,
               head_keys: dict[str, str] = HEAD_KEYS, activation: str = "tanh") -> tuple[EncoderModel, dict]:
    """A `name` (…ForSequenceClassification) checkpoint of an encoder family whose base model
    maps by `keys` and whose pooler and classifier map by `head_keys`: an EncoderModel with a
    ClassificationHead (its pooler's `activation`); weights outside both (and `unused`) are
    refused by name. info adds task "classification" and the labels."""
    labels = labels_of(raw)
    head = ClassificationHead(cfg.d_model, labels, activation)
    model = with_head(path, state, cfg, keys, head, head_keys, unused, name, transforms)
    return model, {"family": family, "architecture": "encoder", "task": "classification", "labels": labels}


def classifies(head_keys: dict[str, str] = HEAD_KEYS, activation: str = "tanh") -> TaskHead:
    """…ForSequenceClassification (cross-encoders, classifiers) whose pooler and classifier map
    by `head_keys`, the pooler's activation `activation`."""
    return TaskHead("cross-encoders, classifiers", partial(classifier, head_keys=head_keys, activation=activation))


# transformers' …ForTokenClassification: `classifier` on the base model's last hidden state,
# the same names in BERT, RoBERTa, XLM-RoBERTa, DistilBERT and MPNet
TAGGER_KEYS = {"head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}


def tagger(path: Path, raw: dict, state: dict, cfg: TransformerConfig, keys: dict[str, str],
           unused: frozenset | set, name: str, family: str, transforms: dict | None = None) -> tuple[EncoderModel, dict]:
    """A `name` (…ForTokenClassification: NER and PII taggers) checkpoint of an encoder family
    whose base model maps by `keys`: an EncoderModel with a TokenClassificationHead
    (TAGGER_KEYS); weights outside both (and `unused`: a pooler the checkpoint carries) are
    refused by name. info adds task "token-classification" and the labels."""
    labels = labels_of(raw)
    model = with_head(path, state, cfg, keys, TokenClassificationHead(cfg.d_model, labels), TAGGER_KEYS, unused, name,
                      transforms)
    return model, {"family": family, "architecture": "encoder", "task": "token-classification", "labels": labels}


# Extractive question answering (Devlin et al. 2019, "BERT", §4.2, SQuAD): a start vector S and
# an end vector E scored against every token, i.e. a token classifier with two labels;
# transformers names it `qa_outputs` (out_features 2: start, end).
QA_KEYS = {"head.classifier.weight": "qa_outputs.weight", "head.classifier.bias": "qa_outputs.bias"}
SPAN_LABELS = ["start", "end"]


def answerer(path: Path, raw: dict, state: dict, cfg: TransformerConfig, keys: dict[str, str],
             unused: frozenset | set, name: str, family: str, transforms: dict | None = None) -> tuple[EncoderModel, dict]:
    """A `name` (…ForQuestionAnswering: SQuAD-style) checkpoint of an encoder family whose base
    model maps by `keys`: an EncoderModel with a two-label TokenClassificationHead (QA_KEYS:
    `qa_outputs`, the same name in BERT, RoBERTa, XLM-RoBERTa, DistilBERT and MPNet) whose
    labels are the span's start and end; weights outside both (and `unused`) are refused by
    name. info adds task "question-answering"."""
    model = with_head(path, state, cfg, keys, TokenClassificationHead(cfg.d_model, SPAN_LABELS), QA_KEYS, unused, name,
                      transforms)
    return model, {"family": family, "architecture": "encoder", "task": "question-answering", "labels": SPAN_LABELS}


@dataclass(frozen=True)
class MaskedLMNames:
    """Where a family's masked-LM head keeps its weights: the transform's dense layer and
    LayerNorm, the decoder, and the bias the decoder's is tied to (None: the decoder's own);
    `activation` the transform's (None: the encoder's, config.json's)."""

    dense: str
    norm: str
    decoder: str
    bias: str | None
    activation: str | None = None


# Masked language models (Devlin et al. 2019, "BERT", §3.1, "Masked LM"): transformers'
# BertLMPredictionHead, `cls.predictions`. Its decoder's weight is tied to the word embeddings
# and its bias to `cls.predictions.bias`: save_pretrained writes neither decoder tensor. A
# checkpoint that has its own (torch.save by older transformers; tie_word_embeddings false)
# has them read, as transformers reads them.
BERT_MLM = MaskedLMNames("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                         "cls.predictions.decoder", "cls.predictions.bias")
# RoBERTa's, XLM-RoBERTa's and MPNet's `lm_head`: the same, its activation GELU whatever the encoder's
LM_HEAD = MaskedLMNames("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias", "gelu")
# BERT's next-sentence head, which checkpoints saved from pre-training keep beside the masked-LM
# head (bert-base-uncased's): transformers' BertForMaskedLM leaves it unused, and so does headwise.
NSP = {"cls.seq_relationship.weight", "cls.seq_relationship.bias"}


def masked_lm(path: Path, raw: dict, state: dict, cfg: TransformerConfig, keys: dict[str, str],
              unused: frozenset | set, name: str, family: str, transforms: dict | None = None,
              names: MaskedLMNames = BERT_MLM) -> tuple[EncoderModel, dict]:
    """A `name` (…ForMaskedLM: fill-mask) checkpoint of an encoder family whose base model maps
    by `keys` and whose head is where `names` says: an EncoderModel with a MaskedLMHead (the
    decoder's weight the word embeddings' unless the checkpoint has its own, or says
    tie_word_embeddings false, then it must); weights outside these (and `unused`, and a
    next-sentence head: NSP) are refused by name. info adds task "fill-mask", no labels: the
    logits are over the tokenizer's vocabulary."""
    decoder, decoder_bias = f"{names.decoder}.weight", f"{names.decoder}.bias"
    tied = raw.get("tie_word_embeddings", True) and decoder not in state
    own_bias = names.bias is None or decoder_bias in state  # then transformers' logits use the decoder's
    head_keys = {"head.dense.weight": f"{names.dense}.weight", "head.dense.bias": f"{names.dense}.bias",
                 "head.norm.weight": f"{names.norm}.weight", "head.norm.bias": f"{names.norm}.bias",
                 "head.decoder.weight": keys["embeddings.tokens.weight"] if tied else decoder,
                 "head.decoder.bias": decoder_bias if own_bias else names.bias}
    head = MaskedLMHead(cfg.d_model, cfg.vocab_size, names.activation or cfg.activation, cfg.layer_norm_eps)
    unused = set(unused) | NSP | ({names.bias} if own_bias and names.bias else set())
    model = with_head(path, state, cfg, keys, head, head_keys, unused, name, transforms)
    return model, {"family": family, "architecture": "encoder", "task": "fill-mask"}


def fills(names: MaskedLMNames = BERT_MLM) -> TaskHead:
    """…ForMaskedLM (fill-mask) whose head is where `names` says."""
    return TaskHead("masked language models, fill-mask", partial(masked_lm, names=names))


TAGS = TaskHead("token taggers", tagger)
ANSWERS = TaskHead("extractive question answering", answerer)
FILLS = fills()


def with_head(path: Path, state: dict, cfg: TransformerConfig, keys: dict[str, str], head: nn.Module,
              head_keys: dict[str, str], unused: frozenset | set, name: str,
              transforms: dict | None = None) -> EncoderModel:
    """Encoder(cfg) under `head`, assigned by `keys` (the encoder's, with their `transforms`)
    and `head_keys`; a weight that neither maps nor `unused` names is refused by name, never
    dropped."""
    tf = {f"encoder.{k}": v for k, v in (transforms or {}).items()}
    keys = {f"encoder.{k}": v for k, v in keys.items()} | head_keys
    extra = sorted(k for k in state if k not in set(keys.values()) and k not in unused)
    if extra:
        raise CheckpointError(f"{path}: {name} checkpoint with weights headwise does not know: "
                              f"{', '.join(extra[:4])}")
    return loaded(EncoderModel(Encoder(cfg), head), state, keys, tf)


# The heads BERT's importer reads, by the class config.json's `architectures` names.
HEADS = {"BertForSequenceClassification": classifies(), "BertForTokenClassification": TAGS,
         "BertForQuestionAnswering": ANSWERS, "BertForMaskedLM": FILLS}


def load(path: Path):
    raw, _, state = read_checkpoint(path, ("bert.", "model."))
    cfg = config_from_hf(raw)
    return encoder_or_head(path, raw, state, cfg, key_map(cfg), UNUSED, "bert", "BertModel", "BERT", HEADS)
