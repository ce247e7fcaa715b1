"""GPT-2 (Radford et al., 2019): a decoder-only Transformer. Learned positions, pre-LN
(LayerNorm before each sublayer) with one more LayerNorm (ln_f) at the top, tanh-GELU
feed-forward, and logits tied to the token embedding.

GPT-2 stores its projections as `Conv1D` modules, which are linear maps with the weight
kept as [in, out] (the transpose of nn.Linear's [out, in]), and it keeps Q, K and V side by
side in one `c_attn` matrix [d_model, 3·d_model]. Both are undone here, so model/ only ever
sees the paper's separate W^Q, W^K, W^V.

Left-padded batches need positions that count real tokens only:
`headwise.model.transformer.position_ids_from_mask` (re-exported here as `position_ids`).
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from headwise.model.config import TransformerConfig
from headwise.model.importers import common
from headwise.model.importers.common import CheckpointError, generation_setting
from headwise.model.transformer import Decoder, position_ids_from_mask

MODEL_TYPES = {"gpt2"}
ARCHITECTURE = "decoder"
# What every GPT-2 is: pre-LN with ln_f on top, learned positions, unscaled embeddings.
FAMILY = {"norm_first": True, "final_layer_norm": True, "positional": "learned", "scale_embedding": False}
SIZES = {"vocab_size": "vocab_size", "d_model": "n_embd", "n_heads": "n_head", "n_layers": "n_layer",
         "max_len": "n_positions"}
_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu", "silu": "silu"}

position_ids = position_ids_from_mask


def config_from_hf(raw: dict) -> TransformerConfig:
    common.check_model_type(raw, MODEL_TYPES, "GPT-2")
    # Variants model/ does not implement: say so rather than import something else.
    if not raw.get("scale_attn_weights", True):
        raise CheckpointError("scale_attn_weights=false (unscaled attention) is not supported")
    if raw.get("scale_attn_by_inverse_layer_idx", False):
        raise CheckpointError("scale_attn_by_inverse_layer_idx=true is not supported")
    if raw.get("add_cross_attention", False):
        raise CheckpointError("GPT-2 with add_cross_attention=true is not supported")
    if not raw.get("tie_word_embeddings", True):
        raise CheckpointError("GPT-2 with an untied lm_head (tie_word_embeddings=false) is not supported")
    return TransformerConfig(
        **common.sizes(raw, SIZES),
        **FAMILY,
        d_ff=raw.get("n_inner") or 4 * raw["n_embd"],
        activation=common.activation(raw, "activation_function", "gelu_new", _ACT),
        dropout=raw.get("resid_pdrop", 0.1),
        layer_norm_eps=raw.get("layer_norm_epsilon", 1e-5),
        # GPT-2 has no padding token; its eos pads batches (the masks make that harmless).
        pad_token_id=special_tokens(raw, {})["pad"],
    )


def special_tokens(raw: dict, gen: dict) -> dict[str, int | None]:
    """bos, eos, pad and decoder_start (none: GPT-2 starts from the prompt)."""
    eos = generation_setting(raw, gen, "eos_token_id", 50256)
    pad = generation_setting(raw, gen, "pad_token_id")
    return {"bos": generation_setting(raw, gen, "bos_token_id", eos), "eos": eos,
            "pad": pad if pad is not None else eos, "decoder_start": None}


def _conv1d(w: Tensor) -> Tensor:
    return w.T  # Conv1D [in, out] → nn.Linear [out, in]


def _column(part: int, d: int):
    """Slice Q (0), K (1) or V (2) out of c_attn's [d, 3d] weight or [3d] bias."""

    def take(w: Tensor) -> Tensor:
        if w.dim() == 2:
            return w[:, part * d : (part + 1) * d].T  # [d, 3d] → [d, d], as [out, in]
        return w[part * d : (part + 1) * d]  # [3d] → [d]

    return take


def key_map(cfg: TransformerConfig) -> tuple[dict[str, str], dict]:
    """our key → checkpoint key, and our key → transform of the checkpoint tensor."""
    m = {
        "embeddings.tokens.weight": "wte.weight",
        "embeddings.positions.embedding.weight": "wpe.weight",
        "final_norm.weight": "ln_f.weight",
        "final_norm.bias": "ln_f.bias",
    }
    tf: dict = {}
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"h.{i}."
        for part, name in enumerate(("w_q", "w_k", "w_v")):
            for p in ("weight", "bias"):
                key = f"{ours}self_attn.{name}.{p}"
                m[key] = f"{theirs}attn.c_attn.{p}"
                tf[key] = _column(part, cfg.d_model)
        conv1d = {"self_attn.w_o": "attn.c_proj", "ff.w_1": "mlp.c_fc", "ff.w_2": "mlp.c_proj"}
        m |= common.weights_and_biases(ours, theirs, conv1d)
        tf |= {f"{ours}{a}.weight": _conv1d for a in conv1d}
        m |= common.weights_and_biases(ours, theirs, {"attn_residual.norm": "ln_1", "ff_residual.norm": "ln_2"})
    return m, tf


def load(path: Path) -> tuple[Decoder, dict]:
    # GPT2LMHeadModel saves "transformer.h.0...", GPT2Model saves "h.0..."; lm_head is wte.
    raw, gen, state = common.read_checkpoint(path, ("transformer.",))
    cfg = config_from_hf(raw)
    info = {"family": "gpt2", "architecture": ARCHITECTURE, "task": "generation",
            "special_tokens": special_tokens(raw, gen), "suppress_token_ids": []}
    return common.loaded(Decoder(cfg, cross_attention=False), state, *key_map(cfg)), info
