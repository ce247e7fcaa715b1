"""A Transformer written from scratch after "Attention Is All You Need" (Vaswani et al., 2017).

Read in this order: `attention` (eq. 1 and §3.2.2), `masks`, `positional` (§3.5),
`layers` (§3.1, §3.3), `transformer` (Encoder, Decoder, EncoderDecoder), `heads` and
`encoder_model` (an Encoder with a pooling, classification or tagging head), then `importers`
for how real checkpoints map onto these modules and `sentence` for loading an encoder with its
head.
"""

from headwise.model.attention import MultiHeadAttention, attention
from headwise.model.config import TransformerConfig
from headwise.model.encoder_model import EncoderModel, EncoderModelOutput
from headwise.model.transformer import Decoder, Encoder, EncoderDecoder, TransformerOutput

__all__ = [
    "Decoder",
    "Encoder",
    "EncoderDecoder",
    "EncoderModel",
    "EncoderModelOutput",
    "MultiHeadAttention",
    "TransformerConfig",
    "TransformerOutput",
    "attention",
]
