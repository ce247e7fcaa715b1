"""Encoder, Decoder and EncoderDecoder stacks (§3.1, Figure 1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headwise.model.config import TransformerConfig
from headwise.model.layers import DecoderLayer, EncoderLayer
from headwise.model.masks import causal_mask, combine, local_mask, padding_mask, to_bias
from headwise.model.norms import norm
from headwise.model.positional import offset_positions, positional_encoding
from headwise.model.relative import RelativePositionBias
from headwise.model.rotary import RotaryEmbedding


@dataclass
class TransformerOutput:
    last_hidden_state: Tensor  # (B, T, D)
    attentions: tuple[Tensor, ...] | None = None  # n_layers × (B, H, T, T)
    cross_attentions: tuple[Tensor, ...] | None = None  # n_layers × (B, H, T_tgt, T_src)
    logits: Tensor | None = None  # (B, T, vocab)
    present: tuple[tuple[Tensor, Tensor], ...] | None = None  # n_layers × (K, V) (B, H, T, Dh)
    hidden_states: tuple[Tensor, ...] | None = None  # (n_layers + 1) × (B, T, D): embeddings, then each layer


class Embeddings(nn.Module):
    """Token embedding (× √d_model when the config says, §3.4) + positional encoding
    (+ segment embedding and LayerNorm for BERT), then dropout."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=None)
        self.positions = positional_encoding(cfg.positional, cfg.max_len, cfg.d_model, cfg.sinusoidal_layout)
        self.segments = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.norm = norm(cfg) if cfg.embedding_layer_norm else None
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.use_token_types = cfg.use_token_types
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self, input_ids: Tensor, position_ids: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        if position_ids is None:
            position_ids = torch.arange(input_ids.size(1), device=input_ids.device)[None]  # (1, T)
        x = self.tokens(input_ids) * self.scale  # (B, T, D)
        if self.positions is not None:  # rotary positions act inside attention instead
            x = x + self.positions(position_ids)
        if self.segments is not None and not self.use_token_types:
            x = x + self.segments.weight[0]  # (D,) to every token: RoBERTa's one segment
        elif self.segments is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segments(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions that count real tokens only, for left-padded batches: (B, T) → (B, T).

    Left padding shifts every real token right; with arange positions the first real token
    of a short prompt would sit at position 3, not 0, and a model with learned positions
    (GPT-2) would see a different input than it was trained on. Position = number of real
    tokens before it, and 0 on padding, as Hugging Face's generate() computes it.
    """
    positions = attention_mask.long().cumsum(-1) - 1  # (B, T)
    return positions.masked_fill(attention_mask == 0, 0)


class Encoder(nn.Module):
    """N identical layers of self-attention + feed-forward over the whole input."""

    def __init__(self, cfg: TransformerConfig, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = norm(cfg) if cfg.final_layer_norm else None
        rotary = cfg.positional == "rotary"
        self.rope = RotaryEmbedding(cfg.d_head, cfg.max_len, cfg.rope_theta) if rotary else None
        self.rope_local = (RotaryEmbedding(cfg.d_head, cfg.max_len, cfg.rope_theta_local)
                           if rotary and cfg.rope_theta_local is not None else self.rope)
        self.relative_bias = (RelativePositionBias(cfg.n_heads, cfg.relative_attention_buckets,
                                                   cfg.relative_attention_max_distance)
                              if cfg.relative_attention_buckets else None)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
        head_mask: Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> TransformerOutput:
        """input_ids, attention_mask, token_type_ids: (B, T). attention_mask: 1 = real token.

        head_mask: (B, n_layers, n_heads) multipliers of each head's output (0: removed).
        output_hidden_states: also return the residual stream after the embeddings and after
        each layer (the last one after the final norm, where the model has one), as
        transformers' `output_hidden_states` does.
        """
        positions = None
        if self.config.position_offset and attention_mask is not None:
            positions = offset_positions(attention_mask, self.config.position_offset)  # (B, T)
        elif self.config.position_offset:
            positions = self.config.position_offset + torch.arange(input_ids.size(1), device=input_ids.device)[None]
        x = self.embeddings(input_ids, positions, token_type_ids)
        cfg, t = self.config, input_ids.size(1)
        pad = padding_mask(attention_mask) if attention_mask is not None else None
        if cfg.causal:  # a decoder-style embedding model: each token sees those before it
            pad = combine(causal_mask(t, device=x.device), pad)
        mask = to_bias(pad, x.dtype)
        if self.relative_bias is not None:  # MPNet: (1, H, T, T), the same in every layer
            bias = self.relative_bias(t, input_ids.device)
            mask = bias if mask is None else bias + mask  # (B, H, T, T)
        local = (to_bias(combine(local_mask(t, cfg.local_window, x.device), pad), x.dtype)
                 if cfg.local_window is not None else None)
        rope = rope_local = None
        if self.rope is not None:  # rotary: (cos, sin) of positions 0..T-1, (1, 1, T, Dh) each
            ids = torch.arange(t, device=input_ids.device)[None]  # (1, T)
            rope, rope_local = self.rope(ids), self.rope_local(ids)
        attentions, states = [], [x]
        for i, layer in enumerate(self.layers):
            is_local = cfg.is_local(i)
            x, w = layer(x, local if is_local else mask, need_weights, fused,
                         head_mask[:, i] if head_mask is not None else None, rope_local if is_local else rope)
            attentions.append(w)
            states.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            states[-1] = x
        return TransformerOutput(x, tuple(attentions) if need_weights else None,
                                 hidden_states=tuple(states) if output_hidden_states else None)


class Decoder(nn.Module):
    """N layers of masked (causal) self-attention, optional encoder-decoder attention and
    feed-forward; a linear map onto the vocabulary, tied to the token embedding (§3.4)."""

    def __init__(
        self, cfg: TransformerConfig, cross_attention: bool = False, embeddings: Embeddings | None = None
    ):
        super().__init__()
        self.config = cfg
        n = (cfg.n_decoder_layers or cfg.n_layers) if cross_attention else cfg.n_layers
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg, cross_attention) for _ in range(n))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.final_layer_norm else None
        self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size), persistent=False)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
        past: tuple[tuple[Tensor, Tensor], ...] | None = None,
        position_ids: Tensor | None = None,
        last_logits_only: bool = False,
        output_hidden_states: bool = False,
    ) -> TransformerOutput:
        """input_ids: (B, T) new tokens; attention_mask: (B, T_past + T), 1 = real token;
        memory: encoder output (B, S, D) with memory_mask (B, S); past: cached K/V per layer.
        last_logits_only: logits (B, 1, V) for the last position only, all generation needs
        (the vocabulary projection of every prompt position would add about half again to
        GPT-2 small's prefill).
        output_hidden_states: also return the residual stream of the T new tokens after the
        embeddings and after each layer (the last one after the final norm, where the model
        has one), as Encoder.forward and transformers' `output_hidden_states` do."""
        t = input_ids.size(1)
        t_past = past[0][0].size(2) if past else 0
        if position_ids is None:
            position_ids = torch.arange(t_past, t_past + t, device=input_ids.device)[None]  # (1, T)
        x = self.embeddings(input_ids, position_ids=position_ids)
        pad = padding_mask(attention_mask) if attention_mask is not None else None
        self_mask = to_bias(combine(causal_mask(t, t_past + t, x.device), pad), x.dtype)
        cross_mask = to_bias(padding_mask(memory_mask), x.dtype) if memory_mask is not None else None
        self_ws, cross_ws, present, states = [], [], [], [x]
        for i, layer in enumerate(self.layers):
            x, sw, cw, kv = layer(
                x, self_mask, memory, cross_mask, need_weights, fused, past[i] if past else None
            )
            self_ws.append(sw)
            cross_ws.append(cw)
            present.append(kv)
            states.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            states[-1] = x
        if last_logits_only:
            # F.linear on 2-D input exports as one Gemm reading the embedding as is; x @ Eᵀ
            # would have the exporter fold a transposed copy of it into the file.
            logits = F.linear(x[:, -1], self.embeddings.tokens.weight, self.final_logits_bias)[:, None]  # (B, 1, V)
        else:
            logits = x @ self.embeddings.tokens.weight.T + self.final_logits_bias  # (B, T, V)
        has_cross = self.layers[0].cross_attn is not None
        return TransformerOutput(
            last_hidden_state=x,
            attentions=tuple(self_ws) if need_weights else None,
            cross_attentions=tuple(cross_ws) if need_weights and has_cross else None,
            logits=logits,
            present=tuple(present),
            hidden_states=tuple(states) if output_hidden_states else None,
        )


class EncoderDecoder(nn.Module):
    """The paper's architecture: an Encoder over the source, a Decoder over the target that
    attends to the encoder output. Source and target share one embedding table here, as in
    the paper (§3.4) and Marian."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.config = cfg
        shared = Embeddings(cfg)
        self.encoder = Encoder(cfg, embeddings=shared)
        self.decoder = Decoder(cfg, cross_attention=True, embeddings=shared)

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None, **kw) -> TransformerOutput:
        return self.encoder(src_ids, src_mask, **kw)

    def forward(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
        output_hidden_states: bool = False,
    ) -> tuple[TransformerOutput, TransformerOutput]:
        """Returns (encoder output, decoder output); output_hidden_states: both carry theirs."""
        enc = self.encoder(src_ids, src_mask, need_weights=need_weights, fused=fused,
                           output_hidden_states=output_hidden_states)
        dec = self.decoder(
            tgt_ids, tgt_mask, enc.last_hidden_state, src_mask, need_weights=need_weights, fused=fused,
            output_hidden_states=output_hidden_states,
        )
        return enc, dec
