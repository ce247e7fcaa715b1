"""Reading checkpoint directories and copying tensors in by an explicit key map."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor, nn


class CheckpointError(ValueError):
    """A checkpoint that cannot be imported: unknown architecture, missing key, bad shape."""


def read_config(path: Path) -> dict:
    cfg = path / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{path}: no config.json (expected a Hugging Face checkpoint directory)")
    return json.loads(cfg.read_text())


def read_generation_config(path: Path) -> dict:
    """generation_config.json when the checkpoint has one (special tokens, banned ids), else {}."""
    f = path / "generation_config.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def weights_file(path: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return path / name
    raise CheckpointError(f"{path}: neither model.safetensors nor pytorch_model.bin found")


def read_state_dict(path: Path) -> dict[str, Tensor]:
    f = weights_file(path)
    if f.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(f))
    return torch.load(str(f), map_location="cpu", weights_only=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def strip_prefix(state: Mapping[str, Tensor], prefixes: tuple[str, ...]) -> dict[str, Tensor]:
    """Checkpoints save either the bare model or a task head around it ('bert.', 'model.')."""
    out = {}
    for k, v in state.items():
        for p in prefixes:
            if k.startswith(p):
                k = k[len(p):]
                break
        out[k] = v
    return out


def assign(
    module: nn.Module,
    state: Mapping[str, Tensor],
    key_map: Mapping[str, str],
    transforms: Mapping[str, Callable[[Tensor], Tensor]] | None = None,
) -> None:
    """Copy state[ckpt_key] into module's parameter/buffer `our_key` for every pair in key_map.

    Every one of our parameters must be covered; every mapped checkpoint key must exist and
    have the right shape. Errors name the key.
    """
    transforms = transforms or {}
    ours = dict(module.named_parameters())
    ours.update(dict(module.named_buffers()))
    uncovered = [k for k in dict(module.named_parameters()) if k not in key_map]
    if uncovered:
        raise CheckpointError(f"no checkpoint key maps onto our parameter(s): {', '.join(uncovered[:5])}")
    with torch.no_grad():
        for our_key, ckpt_key in key_map.items():
            if ckpt_key not in state:
                raise CheckpointError(f"checkpoint is missing key {ckpt_key!r} (for {our_key})")
            if our_key not in ours:
                raise CheckpointError(f"internal key map names unknown parameter {our_key!r}")
            src = state[ckpt_key]
            if our_key in transforms:
                src = transforms[our_key](src)
            dst = ours[our_key]
            if tuple(src.shape) != tuple(dst.shape):
                raise CheckpointError(
                    f"shape mismatch for checkpoint key {ckpt_key!r}: checkpoint has "
                    f"{tuple(src.shape)}, the model expects {tuple(dst.shape)}"
                )
            dst.copy_(src.to(dst.dtype))


def read_checkpoint(path: Path, prefixes: tuple[str, ...]) -> tuple[dict, dict, dict[str, Tensor]]:
    """config.json, generation_config.json ({} without one) and the weights, with the prefix
    a task wrapper saves them under stripped (see `strip_prefix`)."""
    return read_config(path), read_generation_config(path), strip_prefix(read_state_dict(path), prefixes)


def sizes(raw: dict, names: Mapping[str, str]) -> dict:
    """TransformerConfig's sizes from config.json by a map of our name → the checkpoint's."""
    return {ours: raw[theirs] for ours, theirs in names.items()}


def weights_and_biases(ours: str, theirs: str, modules: Mapping[str, str]) -> dict[str, str]:
    """our key → checkpoint key for the weight and the bias of every module in `modules`
    (our name → theirs), under the prefixes `ours` and `theirs`."""
    return {f"{ours}{a}.{p}": f"{theirs}{b}.{p}" for a, b in modules.items() for p in ("weight", "bias")}


def check_model_type(raw: dict, model_types: set[str], family: str) -> None:
    if raw.get("model_type") not in model_types:
        raise CheckpointError(f"not a {family} checkpoint: model_type={raw.get('model_type')!r}")


def activation(raw: dict, key: str, default: str, names: Mapping[str, str]) -> str:
    """The checkpoint's activation name (config.json `key`) as TransformerConfig's."""
    act = raw.get(key, default)
    if act not in names:
        raise CheckpointError(f"unsupported {key} {act!r}")
    return names[act]


def generation_setting(raw: dict, gen: dict, key: str, default=None):
    """generation_config.json wins over config.json, as in transformers' generate(); of a
    list (several eos ids) the first."""
    value = gen.get(key, raw.get(key, default))
    return value[0] if isinstance(value, list) else value


def loaded(model: nn.Module, state: Mapping[str, Tensor], key_map: Mapping[str, str],
           transforms: Mapping[str, Callable[[Tensor], Tensor]] | None = None) -> nn.Module:
    """model with every key_map entry assigned from state (see `assign`), in eval mode."""
    assign(model, state, key_map, transforms)
    return model.eval()
