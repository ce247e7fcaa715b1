"""The graphs of a generative package, as torch modules ready for torch.onnx.export.

Decoder-only (GPT-2): `prefill` runs the prompt and returns the first KV cache; `decode`
takes the cache and the new token(s) and returns the grown cache. Encoder-decoder (Marian):
`encoder` runs the source once and also projects it to every decoder layer's cross-attention
keys and values; `decoder_step` runs the target with a self-attention KV cache and attends
over those precomputed keys/values. Each graph has an `.attention` twin that also outputs the
attention probabilities, and (the step graphs) the new tokens' hidden states.
docs/model-package.md lists every name and shape.

The KV cache travels as two stacked tensors, keys and values, (L, B, H, T, Dh): two arrays for
a runtime to carry between steps instead of 2·L, batch on axis 1 and time on axis 3.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from headwise.export.graphs import export_module
from headwise.model.attention import MultiHeadAttention, attention
from headwise.model.transformer import (
    Decoder,
    EncoderDecoder,
    TransformerOutput,
    position_ids_from_mask,
)


def _stack_cache(present) -> tuple[Tensor, Tensor]:
    keys = torch.stack([k for k, _ in present])  # (L, B, H, T, Dh)
    values = torch.stack([v for _, v in present])  # (L, B, H, T, Dh)
    return keys, values


def _unstack_cache(keys: Tensor, values: Tensor) -> tuple[tuple[Tensor, Tensor], ...]:
    return tuple((keys[i], values[i]) for i in range(keys.size(0)))  # L × ((B, H, T, Dh), ...)


def _stack_states(out: TransformerOutput) -> Tensor:
    """The new tokens' residual stream after the embeddings and each layer (the last after the
    final norm): (B, L + 1, T, D)."""
    return torch.stack(out.hidden_states, dim=1)  # (L + 1) × (B, T, D) → (B, L + 1, T, D)


class PrefillGraph(nn.Module):
    """(input_ids, attention_mask) → next-token logits, present keys/values[, attentions,
    hidden_states]."""

    def __init__(self, decoder: Decoder, with_attention: bool):
        super().__init__()
        self.decoder, self.with_attention = decoder, with_attention

    def forward(self, input_ids: Tensor, attention_mask: Tensor):
        out = self.decoder(
            input_ids, attention_mask, need_weights=self.with_attention, fused=False,
            position_ids=position_ids_from_mask(attention_mask), last_logits_only=True,
            output_hidden_states=self.with_attention,
        )
        result = (out.logits[:, -1], *_stack_cache(out.present))  # logits (B, V)
        if self.with_attention:
            result += (torch.stack(out.attentions, dim=1),  # (B, L, H, T, T)
                       _stack_states(out))
        return result


class DecodeGraph(nn.Module):
    """(input_ids, attention_mask over past + new, past keys/values) → logits, present[,
    attentions, hidden_states]."""

    def __init__(self, decoder: Decoder, with_attention: bool):
        super().__init__()
        self.decoder, self.with_attention = decoder, with_attention

    def forward(self, input_ids: Tensor, attention_mask: Tensor, past_keys: Tensor, past_values: Tensor):
        t = input_ids.size(1)
        # Positions count real tokens (left padding), the new tokens are the last t of them.
        positions = position_ids_from_mask(attention_mask)[:, -t:]  # (B, T)
        out = self.decoder(
            input_ids, attention_mask, need_weights=self.with_attention, fused=False,
            past=_unstack_cache(past_keys, past_values), position_ids=positions, last_logits_only=True,
            output_hidden_states=self.with_attention,
        )
        result = (out.logits[:, -1], *_stack_cache(out.present))
        if self.with_attention:
            result += (torch.stack(out.attentions, dim=1),  # (B, L, H, T, T_past + T)
                       _stack_states(out))
        return result


def cross_keys_values(model: EncoderDecoder, memory: Tensor) -> tuple[Tensor, Tensor]:
    """Every decoder layer's cross-attention K = memory W^K and V = memory W^V, (L, B, H, S, Dh).

    They depend on the source only, so they are computed once per source instead of at every
    generated token: for a 100-token source, recomputing them would be ~14× the rest of a
    step's matrix work."""
    keys, values = [], []
    for layer in model.decoder.layers:
        mha = layer.cross_attn
        keys.append(mha.split_heads(mha.w_k(memory)))  # (B, H, S, Dh)
        values.append(mha.split_heads(mha.w_v(memory)))
    return torch.stack(keys), torch.stack(values)


class EncoderGraph(nn.Module):
    """(input_ids, attention_mask) → encoder_hidden_states, cross_keys, cross_values[, attentions]."""

    def __init__(self, model: EncoderDecoder, with_attention: bool):
        super().__init__()
        self.model, self.with_attention = model, with_attention

    def forward(self, input_ids: Tensor, attention_mask: Tensor):
        enc = self.model.encoder(input_ids, attention_mask, need_weights=self.with_attention, fused=False)
        h = enc.last_hidden_state  # (B, S, D)
        result = (h, *cross_keys_values(self.model, h))
        if self.with_attention:
            result += (torch.stack(enc.attentions, dim=1),)  # (B, L_enc, H, S, S)
        return result


class PrecomputedCrossAttention(nn.Module):
    """Stands in for a decoder layer's cross-attention inside the decoder_step graph: the
    same W^Q and W^O, with K and V read from the encoder graph's outputs instead of being
    projected again. DecoderLayer hands its `memory` argument through as key and value; here
    that is the stacked (2, L, B, H, S, Dh) cross keys/values, of which layer i takes its own."""

    def __init__(self, mha: MultiHeadAttention, index: int):
        super().__init__()
        self.mha, self.index = mha, index

    def forward(self, query, key, value, mask=None, need_weights=False, fused=None, past=None):
        b, t_q, _ = query.shape
        k, v = key[0, self.index], key[1, self.index]  # (B, H, S, Dh) each
        q = self.mha.split_heads(self.mha.w_q(query))  # (B, H, Tq, Dh)
        out, weights = attention(q, k, v, mask)  # (B, H, Tq, Dh), (B, H, Tq, S)
        out = out.transpose(1, 2).reshape(b, t_q, self.mha.n_heads * self.mha.d_head)  # (B, Tq, D)
        return self.mha.w_o(out), (weights if need_weights else None), (k, v)


class DecoderStepGraph(nn.Module):
    """(input_ids, attention_mask over past + new, encoder_attention_mask, cross_keys,
    cross_values, past_keys, past_values) → logits, present keys/values[, attentions,
    cross_attentions, hidden_states]."""

    def __init__(self, model: EncoderDecoder, with_attention: bool):
        super().__init__()
        self.decoder = copy.deepcopy(model.decoder)  # the model itself stays untouched
        for i, layer in enumerate(self.decoder.layers):
            layer.cross_attn = PrecomputedCrossAttention(layer.cross_attn, i)
        self.with_attention = with_attention

    def forward(self, input_ids, attention_mask, encoder_attention_mask, cross_keys, cross_values,
                past_keys, past_values):
        t = input_ids.size(1)
        # All ones gives Marian's arange positions; zeros let a runtime left-pad a cache to
        # join sequences of different lengths in one batch, as for a decoder-only model.
        positions = position_ids_from_mask(attention_mask)[:, -t:]  # (B, T)
        memory = torch.stack([cross_keys, cross_values])  # (2, L, B, H, S, Dh)
        out = self.decoder(
            input_ids, attention_mask, memory, encoder_attention_mask, need_weights=self.with_attention,
            fused=False, past=_unstack_cache(past_keys, past_values), position_ids=positions,
            last_logits_only=True, output_hidden_states=self.with_attention,
        )
        result = (out.logits[:, -1], *_stack_cache(out.present))
        if self.with_attention:
            result += (torch.stack(out.attentions, dim=1),  # (B, L, H, T, T_past + T)
                       torch.stack(out.cross_attentions, dim=1),  # (B, L, H, T, S)
                       _stack_states(out))
        return result


# name → (module, inputs, outputs, outputs added by the .attention form). Shapes use the
# symbolic names of docs/model-package.md; ints are filled in from the config.
INT, FLOAT = "int64", "float32"


def graph_table(model: Decoder | EncoderDecoder) -> dict[str, tuple]:
    cfg = model.config
    h, dh, v = cfg.n_heads, cfg.d_head, cfg.vocab_size
    if isinstance(model, Decoder):
        n = len(model.layers)
        cache = lambda t: [n, "batch", h, t, dh]  # noqa: E731
        states = ("hidden_states", FLOAT, ["batch", n + 1, "seq", cfg.d_model])
        return {
            "prefill": (
                PrefillGraph,
                [("input_ids", INT, ["batch", "seq"]), ("attention_mask", INT, ["batch", "seq"])],
                [("logits", FLOAT, ["batch", v]), ("present_keys", FLOAT, cache("seq")),
                 ("present_values", FLOAT, cache("seq"))],
                [("attentions", FLOAT, ["batch", n, h, "seq", "seq"]), states],
            ),
            "decode": (
                DecodeGraph,
                [("input_ids", INT, ["batch", "seq"]), ("attention_mask", INT, ["batch", "total_seq"]),
                 ("past_keys", FLOAT, cache("past_seq")), ("past_values", FLOAT, cache("past_seq"))],
                [("logits", FLOAT, ["batch", v]), ("present_keys", FLOAT, cache("total_seq")),
                 ("present_values", FLOAT, cache("total_seq"))],
                [("attentions", FLOAT, ["batch", n, h, "seq", "total_seq"]), states],
            ),
        }
    n_enc, n = len(model.encoder.layers), len(model.decoder.layers)
    cache = lambda t: [n, "batch", h, t, dh]  # noqa: E731
    return {
        "encoder": (
            EncoderGraph,
            [("input_ids", INT, ["batch", "src_seq"]), ("attention_mask", INT, ["batch", "src_seq"])],
            [("encoder_hidden_states", FLOAT, ["batch", "src_seq", cfg.d_model]),
             ("cross_keys", FLOAT, cache("src_seq")), ("cross_values", FLOAT, cache("src_seq"))],
            [("attentions", FLOAT, ["batch", n_enc, h, "src_seq", "src_seq"])],
        ),
        "decoder_step": (
            DecoderStepGraph,
            [("input_ids", INT, ["batch", "seq"]), ("attention_mask", INT, ["batch", "total_seq"]),
             ("encoder_attention_mask", INT, ["batch", "src_seq"]),
             ("cross_keys", FLOAT, cache("src_seq")), ("cross_values", FLOAT, cache("src_seq")),
             ("past_keys", FLOAT, cache("past_seq")), ("past_values", FLOAT, cache("past_seq"))],
            [("logits", FLOAT, ["batch", v]), ("present_keys", FLOAT, cache("total_seq")),
             ("present_values", FLOAT, cache("total_seq"))],
            [("attentions", FLOAT, ["batch", n, h, "seq", "total_seq"]),
             ("cross_attentions", FLOAT, ["batch", n, h, "seq", "src_seq"]),
             ("hidden_states", FLOAT, ["batch", n + 1, "seq", cfg.d_model])],
        ),
    }


def io_spec(model, graph: str, with_attention: bool) -> tuple[list[dict], list[dict]]:
    """Names, dtypes and shapes of one graph, as the manifest records them."""
    _, inputs, outputs, extra = graph_table(model)[graph]
    as_dicts = lambda rows: [{"name": n, "dtype": t, "shape": s} for n, t, s in rows]  # noqa: E731
    return as_dicts(inputs), as_dicts(outputs + (extra if with_attention else []))


# Sizes for tracing, all different so that no two symbolic axes get confused.
_EXAMPLE = {"batch": 2, "seq": 3, "past_seq": 5, "total_seq": 8, "src_seq": 7}


def _example(name: str, dtype: str, shape: list, vocab: int) -> Tensor:
    size = [_EXAMPLE[d] if isinstance(d, str) else d for d in shape]
    if dtype == INT:
        if name == "input_ids":
            return torch.randint(0, vocab, size, generator=torch.Generator().manual_seed(0))
        return torch.ones(size, dtype=torch.long)
    return torch.randn(size, generator=torch.Generator().manual_seed(1))


def to_onnx(model, graph: str, path, with_attention: bool) -> None:
    """Export one graph with its dynamic axes."""
    cls, inputs, _, _ = graph_table(model)[graph]
    example = tuple(_example(n, t, s, model.config.vocab_size) for n, t, s in inputs)
    export_module(cls(model, with_attention), example, path, *io_spec(model, graph, with_attention))
