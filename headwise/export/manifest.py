"""manifest.json: read, write, hash (docs/model-package.md)."""

from __future__ import annotations

import json
from pathlib import Path

from headwise.model.importers.common import sha256_file

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1
# The fields every package's manifest has, whatever its kind (headwise/export/pipeline.py
# writes them); headwise/service/package.py requires a subset.
COMMON_FIELDS = ("schema_version", "name", "version", "task", "family", "architecture", "source",
                 "n_layers", "n_heads", "d_model", "max_len", "vocab_size", "pooling", "normalize",
                 "tokenizer", "inputs", "outputs", "variants", "parity", "opset", "exporter_version",
                 "created_at")


class PackageError(RuntimeError):
    """A package that is incomplete, tampered with, or fails its parity thresholds."""


sha256 = sha256_file


def read(pkg: Path) -> dict:
    f = pkg / MANIFEST
    if not f.is_file():
        raise PackageError(f"{pkg}: no {MANIFEST}; not a model package")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise PackageError(f"{f}: not valid JSON ({e})") from e


def write(pkg: Path, manifest: dict) -> None:
    tmp = pkg / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    tmp.replace(pkg / MANIFEST)


def hashed_files(manifest: dict) -> dict[str, str]:
    """file name → recorded sha256, for every file the manifest vouches for."""
    files = {v["file"]: v["sha256"] for v in manifest.get("variants", {}).values()}
    tok = manifest.get("tokenizer")
    if tok:
        files[tok["file"]] = tok["sha256"]
    return files


def check_hashes(pkg: Path, manifest: dict) -> None:
    for name, expected in hashed_files(manifest).items():
        f = pkg / name
        if not f.is_file():
            raise PackageError(f"{f}: missing (the manifest lists it)")
        if sha256(f) != expected:
            raise PackageError(f"{f}: sha256 does not match the manifest (file changed or corrupt)")
