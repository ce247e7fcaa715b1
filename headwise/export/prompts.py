"""A sentence-embedding checkpoint's prompts and Matryoshka dimensions, as the manifest
carries them (docs/model-package.md, "Prompts and Matryoshka dimensions").

Prompts: sentence-transformers keeps them in config_sentence_transformers.json, as `prompts`
(name → text, prepended to each input: `prompt + text`) and `default_prompt_name` (the prompt
used when a call names none). A prompt saved as null is an empty prompt, as
sentence-transformers reads it (SentenceTransformer._validate_prompts).

Matryoshka dimensions: sentence-transformers has no field saying a model was trained with
MatryoshkaLoss, so nothing in a checkpoint tells; `headwise export --matryoshka-dimensions`
declares them, and the service truncates embeddings only to those.
"""

from __future__ import annotations

import json
from pathlib import Path

from headwise.model.importers import CheckpointError

CONFIG = "config_sentence_transformers.json"


def read_prompts(checkpoint: Path) -> dict:
    """{"prompts": {name: text}, "default_prompt_name": name | None} from the checkpoint's
    config_sentence_transformers.json (both empty where it has none); CheckpointError for
    prompts that are not name → text, or a default that names none of them."""
    f = Path(checkpoint) / CONFIG
    if not f.is_file():
        return {"prompts": {}, "default_prompt_name": None}
    try:
        cfg = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f}: not valid JSON ({e})") from e
    raw = cfg.get("prompts") or {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and (v is None or isinstance(v, str))
                                            for k, v in raw.items()):
        raise CheckpointError(f"{f}: 'prompts' must map names to texts")
    prompts = {k: v or "" for k, v in raw.items()}
    default = cfg.get("default_prompt_name")
    if default is not None and (not isinstance(default, str) or default not in prompts):
        raise CheckpointError(f"{f}: default_prompt_name {default!r} is none of the prompts "
                              f"({', '.join(prompts) or 'none'})")
    return {"prompts": prompts, "default_prompt_name": default}


def matryoshka_dimensions(dims, d_model: int) -> list[int]:
    """The declared dimensions, largest first, each in 1..d_model (ValueError otherwise)."""
    out = sorted({int(n) for n in dims}, reverse=True)
    bad = [n for n in out if not 1 <= n <= d_model]
    if bad:
        raise ValueError(f"--matryoshka-dimensions: {', '.join(map(str, bad))} not in 1..{d_model} "
                         f"(the model's embedding size)")
    return out


def pooling_includes_prompt(checkpoint: Path) -> bool:
    """False where a sentence-transformers Pooling module of the checkpoint (modules.json) says
    `include_prompt: false` (INSTRUCTOR-style: the prompt's tokens are left out of the mean)."""
    modules = Path(checkpoint) / "modules.json"
    try:
        entries = json.loads(modules.read_text()) if modules.is_file() else []
    except json.JSONDecodeError:
        return True  # the model's loader reports a bad modules.json
    for m in entries if isinstance(entries, list) else []:
        if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling"):
            f = Path(checkpoint) / str(m.get("path", "")) / "config.json"
            try:
                cfg = json.loads(f.read_text()) if f.is_file() else {}
            except json.JSONDecodeError:
                continue
            if isinstance(cfg, dict) and cfg.get("include_prompt") is False:
                return False
    return True


def declared_facts(task: str, loaded, checkpoint: Path, options) -> dict:
    """The manifest keys an embedding package declares beside its graphs: `prompts`,
    `default_prompt_name` (from the checkpoint) and, when the export was told them,
    `matryoshka_dimensions`. Read right after the checkpoint loads, so a bad file or option
    stops the export before any graph is written; other kinds declare none."""
    dims = options.matryoshka_dimensions
    if task != "embedding":
        if dims:
            raise ValueError(f"--matryoshka-dimensions is for embedding models; this is a {task} model")
        return {}
    out = read_prompts(checkpoint)
    if any(out["prompts"].values()) and not pooling_includes_prompt(checkpoint):
        raise CheckpointError(f"{checkpoint}: its Pooling leaves the prompt's tokens out (include_prompt: false), "
                              "which headwise's pooling does not do: its answers with a prompt would differ from "
                              "sentence-transformers'")
    if dims:
        size = getattr(loaded.model.head, "dim", None) or loaded.model.config.d_model  # after any Dense layer
        out["matryoshka_dimensions"] = matryoshka_dimensions(dims, size)
    return out
