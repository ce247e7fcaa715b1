"""The one typed configuration every module reads.

Vocabulary: d_model, n_heads, n_kv_heads, d_head, n_layers, d_ff, max_len, dropout. Checkpoint
names such as `hidden_size` live only in the importers' key maps.

Besides the paper's Transformer it names the parts the field has added since, each off by
default: rotary positions (`positional="rotary"`, `rope_theta`), RMSNorm (`norm="rms"`),
grouped-query attention (`n_kv_heads`), gated feed-forward (`gated_ff`: SwiGLU with silu,
GeGLU with gelu), layers without biases (`bias`, `norm_bias`), q/k norms (`qk_norm`), a causal
encoder (`causal`), alternating local / global attention (`local_window`, `global_every`,
`rope_theta_local`) and MPNet's relative position bias.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
Positional = Literal["sinusoidal", "learned", "rotary"]
Norm = Literal["layer", "rms"]
# Where the sinusoids go in the vector: the paper interleaves them (sin at even dimensions,
# cos at odd); Marian (and fairseq) put all the sines first, then all the cosines.
SinusoidalLayout = Literal["interleaved", "split"]


class ConfigError(ValueError):
    """A configuration that cannot describe a working Transformer."""


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    max_len: int = 512
    dropout: float = 0.1
    # Paper defaults: post-LN, sinusoidal positions, ReLU feed-forward.
    norm_first: bool = False
    positional: Positional = "sinusoidal"
    sinusoidal_layout: SinusoidalLayout = "interleaved"
    activation: Activation = "relu"
    layer_norm_eps: float = 1e-5
    # Multiply token embeddings by sqrt(d_model) (§3.4). BERT does not, the paper does.
    scale_embedding: bool = True
    # BERT-style extras: segment embeddings and a LayerNorm right after the embeddings.
    type_vocab_size: int = 0
    embedding_layer_norm: bool = False
    # Pre-LN stacks end with one more LayerNorm (GPT-2's ln_f).
    final_layer_norm: bool = False
    pad_token_id: int = 0
    # RoBERTa: positions count real tokens only and start at pad_token_id + 1 (fairseq's
    # convention), so position_offset rows of the table are never used by a real token.
    position_offset: int = 0
    # RoBERTa takes no segment ids (its tokenizer gives none): every token gets segment 0's vector.
    use_token_types: bool = True
    # MPNet: a learned bias per head and bucket of relative distance, shared by every layer
    # (relative.py); 0 = none.
    relative_attention_buckets: int = 0
    relative_attention_max_distance: int = 128
    # Rotary positions (positional="rotary", rotary.py): the base θ of the angles.
    rope_theta: float = 10000.0
    norm: Norm = "layer"
    norm_bias: bool = True  # LayerNorm's β (ModernBERT has none)
    bias: bool = True  # the attention and feed-forward projections' biases
    # Grouped-query attention (Ainslie et al. 2023): n_kv_heads key/value heads, each shared by
    # n_heads / n_kv_heads query heads; None = n_heads (multi-head attention).
    n_kv_heads: int | None = None
    # Width of each head where it is not d_model / n_heads (Qwen3); None = d_model / n_heads.
    head_dim: int | None = None
    qk_norm: bool = False  # RMSNorm over each head's queries and keys before RoPE (Qwen3)
    gated_ff: bool = False  # FFN(x) = (act(x W_gate) ⊙ x W_up) W_down (GLU variants)
    # Each token attends to itself and the tokens before it only (decoder-style embedding models).
    causal: bool = False
    # Alternating attention (ModernBERT): layers i with i % global_every != 0 see only the keys
    # within local_window // 2 of the query, with their own rotary base rope_theta_local.
    local_window: int | None = None
    global_every: int = 1
    rope_theta_local: float | None = None
    # Whether layer 0 normalises its input before attention (ModernBERT's does not: the
    # embeddings are already normalised).
    first_attn_norm: bool = True
    # Decoder stack depth for encoder-decoder models; None means n_layers.
    n_decoder_layers: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ConfigError(msg)

        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            need(isinstance(value, int) and value > 0, f"{name} must be a positive int, got {value!r}")
        need(
            self.head_dim is not None or self.d_model % self.n_heads == 0,
            f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): "
            "each head gets d_model / n_heads dimensions",
        )
        need(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        need(self.positional in ("sinusoidal", "learned", "rotary"), f"unknown positional {self.positional!r}")
        need(self.norm in ("layer", "rms"), f"unknown norm {self.norm!r}")
        need(self.n_heads % self.n_kv_heads_ == 0,
             f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        need(self.positional != "rotary" or self.d_head % 2 == 0, "rotary positions need an even d_head")
        need(self.local_window is None or self.local_window > 0, "local_window must be positive")
        need(self.global_every >= 1, "global_every must be >= 1")
        need(
            self.sinusoidal_layout in ("interleaved", "split"),
            f"unknown sinusoidal_layout {self.sinusoidal_layout!r}",
        )
        need(
            self.activation in ("relu", "gelu", "gelu_tanh", "silu"),
            f"unknown activation {self.activation!r}",
        )
        need(self.type_vocab_size >= 0, "type_vocab_size must be >= 0")
        need(0 <= self.pad_token_id < self.vocab_size, "pad_token_id must index the vocabulary")
        need(self.layer_norm_eps > 0, "layer_norm_eps must be > 0")
        need(0 <= self.position_offset < self.max_len, "position_offset must leave room in the position table")
        if self.n_decoder_layers is not None:
            need(self.n_decoder_layers > 0, "n_decoder_layers must be positive")
        if self.positional == "sinusoidal":
            need(self.d_model % 2 == 0, "sinusoidal positions need an even d_model")

    @property
    def max_tokens(self) -> int:
        """The longest input the position table allows."""
        return self.max_len - self.position_offset

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def n_kv_heads_(self) -> int:
        """Key/value heads: n_kv_heads, or n_heads without grouped-query attention."""
        return self.n_kv_heads or self.n_heads

    def is_local(self, layer: int) -> bool:
        """Whether layer `layer` attends within local_window only (ModernBERT's alternation)."""
        return self.local_window is not None and layer % self.global_every != 0

    def to_dict(self) -> dict:
        return asdict(self)
