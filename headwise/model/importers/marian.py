"""Marian (Junczys-Dowmunt et al., 2018; the OPUS-MT translation models): the paper's
encoder-decoder. Post-LN, fixed sinusoidal positions, one embedding table shared by the
encoder, the decoder and the output projection (§3.4), embeddings × √d_model when
`scale_embedding`, and a `final_logits_bias` added to the logits.

Two details differ from the paper's text and are handled by the config:
- the sinusoids are not interleaved: sines fill the first half of the vector and cosines
  the second (`sinusoidal_layout="split"`); positions start at 0 (no offset, unlike BART);
- the feed-forward activation is whatever `activation_function` says (OPUS-MT: swish).

Hugging Face does not save the sinusoid tables (they are rebuilt from the config), nor
always `final_logits_bias` (zeros then).
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers import common
from headwise.model.importers.common import CheckpointError, generation_setting
from headwise.model.transformer import EncoderDecoder

MODEL_TYPES = {"marian"}
ARCHITECTURE = "encoder-decoder"
# What every Marian is: post-LN, the paper's fixed sinusoids in the split layout.
FAMILY = {"norm_first": False, "positional": "sinusoidal", "sinusoidal_layout": "split",
          "layer_norm_eps": 1e-5}  # Hugging Face builds nn.LayerNorm(d_model): the default eps
SIZES = {"vocab_size": "vocab_size", "d_model": "d_model", "n_heads": "encoder_attention_heads",
         "n_layers": "encoder_layers", "d_ff": "encoder_ffn_dim", "max_len": "max_position_embeddings"}
_ACT = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
        "gelu_pytorch_tanh": "gelu_tanh"}


def config_from_hf(raw: dict) -> TransformerConfig:
    common.check_model_type(raw, MODEL_TYPES, "Marian")
    # model/ has one n_heads, one d_ff and one shared vocabulary for both stacks.
    same = {
        "encoder_attention_heads": "decoder_attention_heads",
        "encoder_ffn_dim": "decoder_ffn_dim",
        "vocab_size": "decoder_vocab_size",
    }
    for a, b in same.items():
        if raw.get(b) is not None and raw.get(a) != raw[b]:
            raise CheckpointError(f"{a}={raw.get(a)} differs from {b}={raw[b]}: not supported")
    if not raw.get("share_encoder_decoder_embeddings", True):
        raise CheckpointError("share_encoder_decoder_embeddings=false is not supported")
    if not raw.get("tie_word_embeddings", True):
        raise CheckpointError("an untied lm_head (tie_word_embeddings=false) is not supported")
    n_dec = raw["decoder_layers"]
    return TransformerConfig(
        **common.sizes(raw, SIZES),
        n_decoder_layers=n_dec if n_dec != raw["encoder_layers"] else None,
        **FAMILY,
        activation=common.activation(raw, "activation_function", "gelu", _ACT),
        dropout=raw.get("dropout", 0.1),
        scale_embedding=bool(raw.get("scale_embedding", False)),
        pad_token_id=raw.get("pad_token_id", raw["vocab_size"] - 1),
    )


def special_tokens(raw: dict, gen: dict) -> dict:
    """bos, eos, pad and decoder_start (OPUS-MT: its pad token)."""
    pad = generation_setting(raw, gen, "pad_token_id", raw["vocab_size"] - 1)
    return {"bos": generation_setting(raw, gen, "bos_token_id"), "eos": generation_setting(raw, gen, "eos_token_id", 0),
            "pad": pad, "decoder_start": generation_setting(raw, gen, "decoder_start_token_id", pad)}


def suppressed_tokens(gen: dict) -> list[int]:
    """Single-token `bad_words_ids` (OPUS-MT bans its pad token) → ids never to generate."""
    return sorted({ids[0] for ids in gen.get("bad_words_ids") or [] if len(ids) == 1})


def key_map(cfg: TransformerConfig, state: dict) -> tuple[dict[str, str], dict]:
    tokens = "shared.weight" if "shared.weight" in state else "encoder.embed_tokens.weight"
    m = {"encoder.embeddings.tokens.weight": tokens}
    tf: dict = {}
    if "final_logits_bias" in state:
        m["decoder.final_logits_bias"] = "final_logits_bias"
        tf["decoder.final_logits_bias"] = lambda b: b.reshape(-1)  # (1, V) → (V,)
    attn = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
    stacks = [("encoder", cfg.n_layers), ("decoder", cfg.n_decoder_layers or cfg.n_layers)]
    for stack, n in stacks:
        for i in range(n):
            ours, theirs = f"{stack}.layers.{i}.", f"{stack}.layers.{i}."
            pairs = {f"self_attn.{a}": f"self_attn.{b}" for a, b in attn.items()}
            pairs |= {"attn_residual.norm": "self_attn_layer_norm", "ff.w_1": "fc1", "ff.w_2": "fc2",
                      "ff_residual.norm": "final_layer_norm"}
            if stack == "decoder":
                pairs |= {f"cross_attn.{a}": f"encoder_attn.{b}" for a, b in attn.items()}
                pairs["cross_residual.norm"] = "encoder_attn_layer_norm"
            m |= common.weights_and_biases(ours, theirs, pairs)
    return m, tf


def load(path: Path) -> tuple[EncoderDecoder, dict]:
    raw, gen, state = common.read_checkpoint(path, ("model.",))
    cfg = config_from_hf(raw)
    info = {"family": "marian", "architecture": ARCHITECTURE, "task": "generation",
            "special_tokens": special_tokens(raw, gen), "suppress_token_ids": suppressed_tokens(gen)}
    return common.loaded(EncoderDecoder(cfg), state, *key_map(cfg, state)), info
