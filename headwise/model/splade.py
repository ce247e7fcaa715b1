"""SPLADE: a sparse lexical embedding read off a masked language model's logits (Formal et al.
2021, "SPLADE: Sparse Lexical and Expansion Model for First Stage Ranking", §3, Eq. 2; max
pooling from SPLADE v2, §3.1): for every entry j of the vocabulary,

    w_j = max_i log(1 + ReLU(logit_ij))   over the text's tokens i

(`sum` in place of `max` in the first version), so a text is scored against the whole
vocabulary, and most entries are 0. As sentence-transformers' SparseEncoder describes it in
modules.json: the masked LM (MLMTransformer, or Transformer with `transformer_task`
"fill-mask") then SpladePooling (its config: `pooling_strategy` max or sum,
`activation_function` relu, or log1p_relu for a second log1p). Any other module is refused by
name rather than skipped, as are settings that would change SparseEncoder.encode's answer
(`default_prompt_name`, `max_active_dims`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from headwise.model.heads import MaskedLMHead
from headwise.model.importers import CheckpointError

Strategy = Literal["max", "sum"]
Activation = Literal["relu", "log1p_relu"]
# modules.json's type names (sentence-transformers 5.x and 6.x) of the masked LM and the pooling
MASKED_LM = ("MLMTransformer", "Transformer")
POOLING = "SpladePooling"


def splade_pool(logits: Tensor, attention_mask: Tensor, strategy: Strategy = "max",
                activation: Activation = "relu") -> Tensor:
    """(B, T, V) logits, (B, T) mask → (B, V) weights. Padding is zeroed before the ReLU, so it
    adds nothing to a max over values ≥ 0, nor to a sum (SpladePooling's order)."""
    x = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(logits.dtype)))  # (B, T, V)
    if activation == "log1p_relu":
        x = torch.log1p(x)
    return x.amax(dim=1) if strategy == "max" else x.sum(dim=1)  # (B, T, V) → (B, V)


@dataclass(frozen=True)
class SpladeConfig:
    strategy: Strategy = "max"
    activation: Activation = "relu"

    @classmethod
    def from_checkpoint(cls, path: Path) -> SpladeConfig | None:
        """The checkpoint's SpladePooling, or None when its modules.json has none (not a sparse
        encoder: a fill-mask model, or a sentence-transformers embedding model)."""
        modules_file = Path(path) / "modules.json"
        modules = json.loads(modules_file.read_text()) if modules_file.is_file() else []
        types = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        if POOLING not in types:
            return None
        if types != [types[0], POOLING] or types[0] not in MASKED_LM:
            raise CheckpointError(f"{modules_file}: modules {types}: headwise serves a sparse encoder made of "
                                    f"a masked LM then {POOLING} only")
        settings = Path(path) / "config_sentence_transformers.json"
        st = json.loads(settings.read_text()) if settings.is_file() else {}
        for key in ("default_prompt_name", "max_active_dims"):
            if st.get(key) is not None:
                raise CheckpointError(f"{settings}: {key} {st[key]!r} is not served for sparse encoders")
        folder = Path(path) / str(modules[1].get("path", ""))
        cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        strategy, activation = cfg.get("pooling_strategy", "max"), cfg.get("activation_function", "relu")
        if strategy not in ("max", "sum") or activation not in ("relu", "log1p_relu"):
            raise CheckpointError(f"{folder / 'config.json'}: pooling_strategy {strategy!r}, activation_function "
                                    f"{activation!r}: headwise pools by max or sum, with relu or log1p_relu")
        return cls(strategy, activation)


class SpladeHead(nn.Module):
    """A masked LM's head, then SPLADE pooling: the sentence embedding is a weight per entry of
    the vocabulary (B, vocab_size)."""

    output = "sentence_embedding"
    labels: tuple[str, ...] = ()

    def __init__(self, lm: MaskedLMHead, config: SpladeConfig):
        super().__init__()
        self.lm, self.config = lm, config
        self.dim = lm.vocab_size  # the embedding's size (export.graphs)

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        logits = self.lm(last_hidden_state, attention_mask)  # (B, T, vocab_size)
        return splade_pool(logits, attention_mask, self.config.strategy, self.config.activation)
