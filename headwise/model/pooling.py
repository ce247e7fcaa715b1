"""Sentence pooling (mean, [CLS] or last token), optional Dense layers and L2 normalisation,
as sentence-transformers checkpoints describe them in modules.json and their module folders
(Reimers & Gurevych 2019, "Sentence-BERT", §3).

Both configuration formats are read: the one hub models carry (1_Pooling/config.json with
booleans `pooling_mode_mean_tokens`, `pooling_mode_cls_token`, `pooling_mode_lasttoken`) and
the one sentence-transformers 6.x writes (`"pooling_mode": "mean"`). A module or a pooling
mode headwise does not implement is refused by name rather than skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

PoolingMode = Literal["mean", "cls", "lasttoken"]
MODES = ("mean", "cls", "lasttoken")
# The older format's booleans → the mode they name (sentence-transformers' own table).
LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
               "pooling_mode_lasttoken": "lasttoken", "pooling_mode_max_tokens": "max",
               "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
               "pooling_mode_weightedmean_tokens": "weightedmean"}
# A Dense module's activation (its config's dotted class name) → the function it applies.
ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh", "torch.nn.modules.linear.Identity": "identity",
               "torch.nn.modules.activation.ReLU": "relu", "torch.nn.modules.activation.GELU": "gelu",
               "torch.nn.modules.activation.Sigmoid": "sigmoid"}


class PoolingConfigError(ValueError):
    """A sentence-transformers configuration headwise cannot reproduce."""


@dataclass(frozen=True)
class DenseSpec:
    """One sentence-transformers Dense module: y = act(x Wᵀ + b) on the pooled vector."""

    path: str  # its folder in the checkpoint (weights: model.safetensors or pytorch_model.bin)
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "tanh"


@dataclass(frozen=True)
class PoolingConfig:
    mode: PoolingMode = "mean"
    normalize: bool = False
    dense: tuple[DenseSpec, ...] = ()

    @classmethod
    def from_checkpoint(cls, path: Path) -> PoolingConfig:
        """Read the checkpoint's sentence-transformers modules (Transformer → Pooling →
        Dense* → Normalize); plain checkpoints get unnormalised mean pooling."""
        modules_file = path / "modules.json"
        if not modules_file.is_file():
            return cls()
        mode, normalize, dense = "mean", False, []
        for m in json.loads(modules_file.read_text()):
            kind = m.get("type", "").rsplit(".", 1)[-1]
            where = f"{path}: module {m.get('path') or '.'} ({m.get('type')})"
            if kind == "Transformer":
                continue
            if normalize:
                raise PoolingConfigError(f"{where} comes after Normalize: not supported")
            if kind not in ("Pooling", "Dense", "Normalize"):
                raise PoolingConfigError(f"{where}: headwise implements Transformer, Pooling, Dense and Normalize "
                                         "modules only")
            if kind == "Normalize":
                normalize = True
                continue
            config = json.loads((path / m["path"] / "config.json").read_text())
            if kind == "Pooling":
                mode = pooling_mode(config, where)
            else:
                dense.append(dense_spec(m["path"], config, where))
        return cls(mode, normalize, tuple(dense))

    @property
    def dense_out(self) -> int | None:
        """The embedding's size after the Dense layers, None without any."""
        return self.dense[-1].out_features if self.dense else None


def pooling_mode(config: dict, where: str) -> PoolingMode:
    """The one mode of a Pooling config, in either format."""
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in LEGACY_KEYS.items() if config.get(key)]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1 or modes[0] not in MODES:
        raise PoolingConfigError(f"{where}: unsupported pooling mode {modes or 'none'} (headwise pools with one "
                                 f"of {', '.join(MODES)})")
    return modes[0]


def dense_spec(folder: str, config: dict, where: str) -> DenseSpec:
    act = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if act not in ACTIVATIONS:
        raise PoolingConfigError(f"{where}: unsupported activation {act!r}")
    if config.get("use_residual"):
        raise PoolingConfigError(f"{where}: a Dense with use_residual is not supported")
    if config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
        raise PoolingConfigError(f"{where}: a Dense on {config['module_input_name']!r} is not supported")
    return DenseSpec(folder, int(config["in_features"]), int(config["out_features"]), bool(config.get("bias", True)),
                     ACTIVATIONS[act])


def last_token_index(attention_mask: Tensor) -> Tensor:
    """(B, T) → (B,): the position of each row's last real token, whichever side it is padded
    on: T − 1 − (the first 1 of the reversed mask). A row with no real token gives T − 1."""
    t = attention_mask.size(1)
    flipped = attention_mask.flip(1).to(torch.int32)  # (B, T)
    return t - 1 - flipped.argmax(1)  # (B,)


def pool(last_hidden_state: Tensor, attention_mask: Tensor, cfg: PoolingConfig) -> Tensor:
    """(B, T, D), (B, T) → (B, D), before any Dense layer and normalisation (heads.PoolingHead)."""
    if cfg.mode == "cls":
        return last_hidden_state[:, 0]  # right-padded: the first token is real
    if cfg.mode == "lasttoken":
        idx = last_token_index(attention_mask)  # (B,)
        return last_hidden_state[torch.arange(last_hidden_state.size(0)), idx]  # (B, D)
    m = attention_mask.to(last_hidden_state.dtype)[..., None]  # (B, T, 1)
    return (last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1e-9)


def normalize(x: Tensor) -> Tensor:
    return F.normalize(x, p=2.0, dim=-1)


__all__ = ["DenseSpec", "PoolingConfig", "PoolingConfigError", "last_token_index", "normalize", "pool"]
