"""An encoder with a sequence-classification head: cross-encoders (one label: a relevance score
for a query–text pair, what a reranker sorts by) and classifiers (n labels).

The head is BERT's (Devlin et al. 2019, "BERT", §4.1 and Figure 4): the final hidden state of
the first token, [CLS], through the pooler (dense + tanh), then a linear layer to one logit per
label. Pairs are one sequence `[CLS] a [SEP] b [SEP]` whose segment ids tell the halves apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from headwise.model.transformer import Encoder


class ClassificationHead(nn.Module):
    def __init__(self, d_model: int, n_labels: int):
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.classifier = nn.Linear(d_model, n_labels)

    def forward(self, last_hidden_state: Tensor) -> Tensor:
        cls = last_hidden_state[:, 0]  # (B, D): the [CLS] token
        return self.classifier(torch.tanh(self.pooler(cls)))  # (B, n_labels)


@dataclass
class ClassifierOutput:
    logits: Tensor  # (B, n_labels)
    last_hidden_state: Tensor  # (B, T, D)
    attentions: tuple[Tensor, ...] | None  # n_layers × (B, H, T, T)


class SequenceClassifier(nn.Module):
    def __init__(self, encoder: Encoder, n_labels: int, labels: list[str]):
        super().__init__()
        self.encoder = encoder
        self.head = ClassificationHead(encoder.config.d_model, n_labels)
        self.labels = labels

    @property
    def config(self):
        return self.encoder.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
    ) -> ClassifierOutput:
        out = self.encoder(input_ids, attention_mask, token_type_ids, need_weights, fused)
        return ClassifierOutput(self.head(out.last_hidden_state), out.last_hidden_state, out.attentions)
