"""The one typed configuration every module reads.

Vocabulary: d_model, n_heads, n_layers, d_ff, max_len, dropout. Checkpoint names such as
`hidden_size` live only in the importers' key maps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
Positional = Literal["sinusoidal", "learned"]
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
            self.d_model % self.n_heads == 0,
            f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): "
            "each head gets d_model / n_heads dimensions",
        )
        need(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        need(self.positional in ("sinusoidal", "learned"), f"unknown positional {self.positional!r}")
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
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)
