"""Qwen3 as a causal embedding model (Qwen3-Embedding; Zhang et al. 2025, "Qwen3 Embedding"):
a decoder used as an encoder. Every token attends to itself and the tokens before it
(`causal`), and the sentence embedding is the last real token's state (last-token pooling,
from the checkpoint's sentence-transformers files).

Its layers are the parts the field has added since the paper, each a config switch here:
pre-norm with RMSNorm, rotary positions (θ from config.json), grouped-query attention
(num_key_value_heads), a head width of its own (head_dim), RMSNorm over each head's queries
and keys (q/k norm), a SwiGLU feed-forward and no biases. The language-model head
(lm_head.weight) is not used by an embedding model and is ignored; sliding-window layers and
scaled RoPE are refused.
"""

from __future__ import annotations

from pathlib import Path

from headwise.model.config import TransformerConfig
from headwise.model.importers.common import (
    CheckpointError,
    check_model_type,
    loaded,
    read_checkpoint,
    sizes,
)
from headwise.model.importers.rope import rope_theta
from headwise.model.transformer import Encoder

MODEL_TYPES = {"qwen3"}
ARCHITECTURE = "encoder"
UNUSED = {"lm_head.weight"}
ARCHITECTURES = {"Qwen3Model", "Qwen3ForCausalLM"}
FAMILY = {"norm_first": True, "final_layer_norm": True, "positional": "rotary", "norm": "rms",
          "gated_ff": True, "qk_norm": True, "causal": True, "scale_embedding": False, "type_vocab_size": 0,
          "dropout": 0.0}
SIZES = {"vocab_size": "vocab_size", "d_model": "hidden_size", "n_heads": "num_attention_heads",
         "n_kv_heads": "num_key_value_heads", "n_layers": "num_hidden_layers", "d_ff": "intermediate_size",
         "max_len": "max_position_embeddings"}


def config_from_hf(raw: dict) -> TransformerConfig:
    check_model_type(raw, MODEL_TYPES, "Qwen3")
    if raw.get("use_sliding_window") or any(t != "full_attention" for t in raw.get("layer_types") or []):
        raise CheckpointError("Qwen3 with sliding-window layers (use_sliding_window) is not supported")
    if raw.get("attention_bias"):
        raise CheckpointError("Qwen3 with attention_bias=true is not supported (biases on attention only)")
    if raw.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"unsupported hidden_act {raw['hidden_act']!r} (Qwen3's is silu)")
    pad = raw.get("pad_token_id")
    return TransformerConfig(
        **sizes(raw, SIZES), **FAMILY, activation="silu",
        bias=False,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
        layer_norm_eps=raw.get("rms_norm_eps", 1e-6), rope_theta=rope_theta(raw, default=1000000.0),
        pad_token_id=pad if isinstance(pad, int) and 0 <= pad < raw["vocab_size"] else 0,
    )


def key_map(cfg: TransformerConfig) -> dict[str, str]:
    m = {"embeddings.tokens.weight": "embed_tokens.weight", "final_norm.weight": "norm.weight"}
    pairs = {"self_attn.w_q": "self_attn.q_proj", "self_attn.w_k": "self_attn.k_proj",
             "self_attn.w_v": "self_attn.v_proj", "self_attn.w_o": "self_attn.o_proj",
             "self_attn.q_norm": "self_attn.q_norm", "self_attn.k_norm": "self_attn.k_norm",
             "attn_residual.norm": "input_layernorm", "ff_residual.norm": "post_attention_layernorm",
             "ff.w_gate": "mlp.gate_proj", "ff.w_up": "mlp.up_proj", "ff.w_down": "mlp.down_proj"}
    for i in range(cfg.n_layers):
        for ours, theirs in pairs.items():
            m[f"layers.{i}.{ours}.weight"] = f"layers.{i}.{theirs}.weight"
    return m


def load(path: Path):
    raw, _, state = read_checkpoint(path, ("model.",))
    heads = [a for a in raw.get("architectures") or [] if a not in ARCHITECTURES]
    if heads:
        raise CheckpointError(f"{path}: a Qwen3 checkpoint with a task head ({heads}) headwise would drop; "
                              f"headwise imports {sorted(ARCHITECTURES)} as causal embedding models")
    cfg = config_from_hf(raw)
    keys = key_map(cfg)
    extra = sorted(k for k in state if k not in set(keys.values()) and k not in UNUSED)
    if extra:
        raise CheckpointError(f"{path}: Qwen3 weights headwise does not know: {', '.join(extra[:4])}")
    return loaded(Encoder(cfg), state, keys), {"family": "qwen3", "architecture": ARCHITECTURE, "task": "embedding"}
