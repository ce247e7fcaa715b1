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
from headwise.model.importers.common import (
    CheckpointError,
    assign,
    read_config,
    read_generation_config,
    read_state_dict,
    strip_prefix,
)
from headwise.model.transformer import Decoder, position_ids_from_mask

MODEL_TYPES = {"gpt2"}
ARCHITECTURE = "decoder"
_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu", "silu": "silu"}

position_ids = position_ids_from_mask


def config_from_hf(raw: dict) -> TransformerConfig:
    if raw.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"not a GPT-2 checkpoint: model_type={raw.get('model_type')!r}")
    act = raw.get("activation_function", "gelu_new")
    if act not in _ACT:
        raise CheckpointError(f"unsupported activation_function {act!r}")
    # Variants model/ does not implement: say so rather than import something else.
    if not raw.get("scale_attn_weights", True):
        raise CheckpointError("scale_attn_weights=false (unscaled attention) is not supported")
    if raw.get("scale_attn_by_inverse_layer_idx", False):
        raise CheckpointError("scale_attn_by_inverse_layer_idx=true is not supported")
    if raw.get("add_cross_attention", False):
        raise CheckpointError("GPT-2 with add_cross_attention=true is not supported")
    if not raw.get("tie_word_embeddings", True):
        raise CheckpointError("GPT-2 with an untied lm_head (tie_word_embeddings=false) is not supported")
    d_model = raw["n_embd"]
    return TransformerConfig(
        vocab_size=raw["vocab_size"],
        d_model=d_model,
        n_heads=raw["n_head"],
        n_layers=raw["n_layer"],
        d_ff=raw.get("n_inner") or 4 * d_model,
        max_len=raw["n_positions"],
        dropout=raw.get("resid_pdrop", 0.1),
        norm_first=True,
        positional="learned",
        activation=_ACT[act],
        layer_norm_eps=raw.get("layer_norm_epsilon", 1e-5),
        scale_embedding=False,
        final_layer_norm=True,
        # GPT-2 has no padding token; its eos pads batches (the masks make that harmless).
        pad_token_id=special_tokens(raw, {})["pad"],
    )


def special_tokens(raw: dict, gen: dict) -> dict[str, int | None]:
    """generation_config.json wins over config.json, as in transformers' generate()."""

    def pick(key: str, default=None):
        value = gen.get(key, raw.get(key, default))
        return value[0] if isinstance(value, list) else value

    eos = pick("eos_token_id", 50256)
    pad = pick("pad_token_id")
    return {"bos": pick("bos_token_id", eos), "eos": eos, "pad": pad if pad is not None else eos,
            "decoder_start": None}


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
        for a, b in {"self_attn.w_o": "attn.c_proj", "ff.w_1": "mlp.c_fc", "ff.w_2": "mlp.c_proj"}.items():
            m[f"{ours}{a}.weight"] = f"{theirs}{b}.weight"
            tf[f"{ours}{a}.weight"] = _conv1d
            m[f"{ours}{a}.bias"] = f"{theirs}{b}.bias"
        for a, b in {"attn_residual.norm": "ln_1", "ff_residual.norm": "ln_2"}.items():
            for p in ("weight", "bias"):
                m[f"{ours}{a}.{p}"] = f"{theirs}{b}.{p}"
    return m, tf


def load(path: Path) -> tuple[Decoder, dict]:
    raw = read_config(path)
    cfg = config_from_hf(raw)
    # GPT2LMHeadModel saves "transformer.h.0...", GPT2Model saves "h.0..."; lm_head is wte.
    state = strip_prefix(read_state_dict(path), ("transformer.",))
    model = Decoder(cfg, cross_attention=False)
    keys, transforms = key_map(cfg)
    assign(model, state, keys, transforms)
    model.eval()
    info = {"family": "gpt2", "architecture": ARCHITECTURE,
            "special_tokens": special_tokens(raw, read_generation_config(path)), "suppress_token_ids": []}
    return model, info
