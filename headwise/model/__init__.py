"""A Transformer written from scratch after "Attention Is All You Need" (Vaswani et al., 2017).

Read in this order: `attention` (eq. 1 and §3.2.2), `masks`, `positional` (§3.5),
`layers` (§3.1, §3.3), `transformer` (Encoder, Decoder, EncoderDecoder), then
`importers` for how real checkpoints map onto these modules.
"""

from headwise.model.attention import MultiHeadAttention, attention
from headwise.model.config import TransformerConfig
from headwise.model.transformer import Decoder, Encoder, EncoderDecoder, TransformerOutput

__all__ = [
    "Decoder",
    "Encoder",
    "EncoderDecoder",
    "MultiHeadAttention",
    "TransformerConfig",
    "TransformerOutput",
    "attention",
]
