"""Heads: what an encoder's last hidden states become. One Encoder (transformer.py) carries
one head (encoder_model.py), so a sentence-embedding model and a classifier differ in their
head alone.

- PoolingHead: a sentence embedding, the mean of the token states, the [CLS] state or the last
  token's (decoder-style embedding models), through the checkpoint's Dense layers if any, L2
  normalised when the checkpoint says (Reimers & Gurevych 2019, "Sentence-BERT", §3).
- ClassificationHead: BERT's sequence-classification head (Devlin et al. 2019, "BERT", §4.1 and
  Figure 4): the [CLS] state through the pooler (dense + tanh), then a linear map to one logit
  per label. A cross-encoder is one with a single label, a relevance score for a query–text
  pair (what a reranker sorts by). DistilBERT's is the same with ReLU for tanh (its
  `pre_classifier`: Sanh et al. 2019 keep no pooler, and their classifier learns its own).

- TokenClassificationHead: BERT's tagging head (Devlin et al. 2019, Figure 4(d), "Single
  Sentence Tagging Tasks"; CoNLL-2003 NER in §5.3): every token's final hidden state through
  one linear map to one logit per label (NER and PII taggers), no pooler; dropout is the
  identity at inference. BERT labels a word by its first sub-token; the head scores every
  token and leaves that choice to the reader.

- PredictionClassificationHead: ModernBERT's (Warner et al. 2024, "Smarter, Better, Faster,
  Longer", §2.1): the [CLS] state or the mean of the token states, through dense + activation +
  LayerNorm (its "prediction head"), then a linear map to one logit per label.
  PredictionTokenClassificationHead: the same on every token's state, unpooled (ModernBERT's
  taggers and extractive answerers).

- MaskedLMHead: BERT's masked-LM head (Devlin et al. 2019, "BERT", §3.1, "Masked LM"): every
  token's state through dense + activation + LayerNorm, then a linear map to one logit per
  token of the vocabulary (its weight, in BERT, the word embeddings'), for a fill-mask model.

Each head names the output it adds (`output`), the field of EncoderModelOutput it fills.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from headwise.model.pooling import PoolingConfig, normalize, pool

_DENSE_ACTIVATIONS = {"tanh": torch.tanh, "identity": lambda x: x, "relu": torch.relu,
                      "gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid,
                      "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
                      "silu": torch.nn.functional.silu}


class PoolingHead(nn.Module):
    output = "sentence_embedding"

    def __init__(self, config: PoolingConfig):
        super().__init__()
        self.config = config
        # sentence-transformers' Dense modules, in order: y = act(x Wᵀ + b).
        self.dense = nn.ModuleList(nn.Linear(d.in_features, d.out_features, bias=d.bias) for d in config.dense)

    @property
    def dim(self) -> int | None:
        """The embedding's size where Dense layers change it from d_model, else None."""
        return self.config.dense_out

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        x = pool(last_hidden_state, attention_mask, self.config)  # (B, D)
        for spec, linear in zip(self.config.dense, self.dense, strict=True):
            x = _DENSE_ACTIVATIONS[spec.activation](linear(x))  # (B, D_out)
        return normalize(x) if self.config.normalize else x


class ClassificationHead(nn.Module):
    output = "logits"

    def __init__(self, d_model: int, labels: list[str], activation: str = "tanh"):
        super().__init__()
        self.labels = list(labels)
        self.pooler = nn.Linear(d_model, d_model)
        self.act = _DENSE_ACTIVATIONS[activation]
        self.classifier = nn.Linear(d_model, len(labels))

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        cls = last_hidden_state[:, 0]  # (B, D): the [CLS] token
        return self.classifier(self.act(self.pooler(cls)))  # (B, n_labels)


class TokenClassificationHead(nn.Module):
    output = "token_logits"

    def __init__(self, d_model: int, labels: list[str]):
        super().__init__()
        self.labels = list(labels)
        self.classifier = nn.Linear(d_model, len(labels))

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        """Every position's logits, padding included: which rows are real is the mask's to say."""
        return self.classifier(last_hidden_state)  # (B, T, D) → (B, T, n_labels)


class PredictionClassificationHead(nn.Module):
    output = "logits"

    def __init__(self, d_model: int, labels: list[str], pooling: str = "cls", activation: str = "gelu",
                 eps: float = 1e-5, dense_bias: bool = False, norm_bias: bool = False):
        super().__init__()
        self.labels, self.pooling = list(labels), pooling
        self.dense = nn.Linear(d_model, d_model, bias=dense_bias)
        self.act = _DENSE_ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=norm_bias)
        self.classifier = nn.Linear(d_model, len(labels))

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        if self.pooling == "cls":
            pooled = last_hidden_state[:, 0]  # (B, D)
        else:
            m = attention_mask.to(last_hidden_state.dtype)[..., None]  # (B, T, 1)
            pooled = (last_hidden_state * m).sum(1) / m.sum(1)  # (B, D)
        return self.classifier(self.norm(self.act(self.dense(pooled))))  # (B, n_labels)


class PredictionTokenClassificationHead(PredictionClassificationHead):
    output = "token_logits"

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        """Every position's logits, padding included, as TokenClassificationHead's."""
        return self.classifier(self.norm(self.act(self.dense(last_hidden_state))))  # (B, T, D) → (B, T, n_labels)


class MaskedLMHead(nn.Module):
    """transformers' BertLMPredictionHead: `transform` (dense, activation, LayerNorm), then
    `decoder` over the vocabulary with its own bias."""

    output = "token_logits"
    labels: tuple[str, ...] = ()  # no label names: the logits are over the tokenizer's vocabulary

    def __init__(self, d_model: int, vocab_size: int, activation: str = "gelu", eps: float = 1e-12,
                 dense_bias: bool = True, norm_bias: bool = True):
        super().__init__()
        self.vocab_size = vocab_size  # the logits' last axis (export.graphs)
        self.dense = nn.Linear(d_model, d_model, bias=dense_bias)  # ModernBERT's: classifier_bias
        self.act = _DENSE_ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=norm_bias)  # ModernBERT's has none
        self.decoder = nn.Linear(d_model, vocab_size)

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        """Every position's logits, padding included, as TokenClassificationHead's."""
        x = self.norm(self.act(self.dense(last_hidden_state)))  # (B, T, D)
        return self.decoder(x)  # (B, T, D) → (B, T, vocab_size)
