"""Sentence pooling (mean or [CLS]) and L2 normalisation, as sentence-transformers
checkpoints describe them in modules.json and 1_Pooling/config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class PoolingConfig:
    mode: Literal["mean", "cls"] = "mean"
    normalize: bool = False

    @classmethod
    def from_checkpoint(cls, path: Path) -> PoolingConfig:
        """Read the checkpoint's sentence-transformers modules; plain checkpoints get
        unnormalised mean pooling."""
        modules_file = path / "modules.json"
        if not modules_file.is_file():
            return cls()
        modules = json.loads(modules_file.read_text())
        mode, normalize = "mean", False
        for m in modules:
            kind = m.get("type", "")
            if kind.endswith("Pooling"):
                pc = json.loads((path / m["path"] / "config.json").read_text())
                if pc.get("pooling_mode_cls_token"):
                    mode = "cls"
                elif pc.get("pooling_mode_mean_tokens"):
                    mode = "mean"
                else:
                    raise ValueError(f"{path}: unsupported pooling mode in {m['path']}/config.json")
            elif kind.endswith("Normalize"):
                normalize = True
        return cls(mode, normalize)


def pool(last_hidden_state: Tensor, attention_mask: Tensor, cfg: PoolingConfig) -> Tensor:
    """(B, T, D), (B, T) → (B, D)."""
    if cfg.mode == "cls":
        out = last_hidden_state[:, 0]
    else:
        m = attention_mask.to(last_hidden_state.dtype)[..., None]  # (B, T, 1)
        out = (last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1e-9)
    if cfg.normalize:
        out = F.normalize(out, p=2.0, dim=-1)
    return out


__all__ = ["PoolingConfig", "pool"]
