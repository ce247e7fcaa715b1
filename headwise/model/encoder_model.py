"""An Encoder (§3.1 of "Attention Is All You Need") with one head on top (heads.py): the
model behind every encoder package: sentence-embedding, classification and token
classification alike."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from headwise.model.transformer import Encoder


@dataclass
class EncoderModelOutput:
    last_hidden_state: Tensor  # (B, T, D)
    attentions: tuple[Tensor, ...] | None  # n_layers × (B, H, T, T)
    sentence_embedding: Tensor | None = None  # (B, D), from a PoolingHead
    logits: Tensor | None = None  # (B, n_labels), from a ClassificationHead
    token_logits: Tensor | None = None  # (B, T, n_labels), from a TokenClassificationHead
    hidden_states: tuple[Tensor, ...] | None = None  # (n_layers + 1) × (B, T, D)


class EncoderModel(nn.Module):
    def __init__(self, encoder: Encoder, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

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
        head_mask: Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderModelOutput:
        """head_mask (B, n_layers, n_heads) and output_hidden_states: as Encoder.forward's."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, need_weights, fused, head_mask,
                           output_hidden_states)
        head = {self.head.output: self.head(out.last_hidden_state, attention_mask)}
        return EncoderModelOutput(out.last_hidden_state, out.attentions, hidden_states=out.hidden_states, **head)
